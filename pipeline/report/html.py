"""The manager report: one self-contained HTML file, or the CSV / Markdown variants.

``write_report(RESULTS, OUT, fmt)`` is what ``gpu-idle report`` and the nightly
sweep call. RESULTS is a run output dir or a sweep state dir
(:mod:`pipeline.report.summary` reads it and computes every number);
this module only formats:

* ``html``: Jinja2 template ``templates/report.html.j2`` with inline CSS, inline
  SVG plots (:mod:`pipeline.report.plots`) and the medical-record pages rendered
  from their Markdown as anchored sections: no network fetch at view time;
* ``csv``: the per-GPU cost table for spreadsheets (plain numbers, one row per GPU);
* ``md``: a short summary for chat or e-mail.
"""
from __future__ import annotations

import functools
import hashlib
import html as html_lib
import io
import math
import os
import json
import re
import uuid

import markdown as markdown_lib
from jinja2 import Environment
from markupsafe import Markup

from ..accounting.view import read_view
from ..analysis.cost import HOW_TO_PRICE
from ..analysis.fixfirst import REMEDIES, implausible
from ..analysis.meter import too_few_text
from ..config import ConfidenceConfig
from ..fleet.outputs import PAGES_DIR, gpu_json_name
from ..fleet.pricing import PRICING, repriced_summary
from ..fleet.reduce import assumed_text
from ..io import json_text, os_cause, write_text
from ..model import CATEGORIES
from ..store.results import read_manifest
from .. import categories, schema
from ..report import plots
from ..text import csv_safe, md_text, md_unescape
from .jinja import environment
from .teams import coverage_text, teams_markdown, whose_text
from .words import (NONE_TRUSTED, NOT_IDLE, PRICE_ON_PAGES, PRICED_LIKE_IDLE, basis_text, comm_idle_text,
                    for_pages, keep_words, ms, name_breaks, pct, remedy_summary, secs, signed_usd, speedup_text, startup_cut_text, trust_text, usd,
                    whole_speedup_text, wins_back_basis)
from .medical import NAME_CHARS, gpu_names, job_keys
from .summary import (TOP_FIXES, ReportError, Results, gpu_json_text, gpu_roles, load_results, ok_rows, record_anchors,
    shown_records, summarise, tier_ranks, withheld)

FORMATS = ("html", "csv", "md")

__all__ = ["FORMATS", "ReportError", "ReportNotWritten", "write_report", "render_html", "render_csv", "render_markdown"]


#: One-line meaning of each application category (the glossary of the page; remedies: fixfirst.REMEDIES), from
#: the registry (:attr:`pipeline.categories.Category.gloss`).
GLOSSARY = categories.Field("gloss", caveat=False)
#: Causes that are not the application's: explained on the page, never in the fix-first list.
CAVEAT_MEANINGS = categories.Field("gloss", caveat=True)


@functools.lru_cache(maxsize=None)
def _env() -> Environment:
    """The report page's Jinja environment, made once per process: it keeps its compiled templates."""
    env = environment(usd=usd, signed_usd=signed_usd, pct=pct, ms=ms, secs=secs, assumed_text=assumed_text,
                      meter_text=meter_text, basis_text=basis_text)
    # what every total that leaves GPUs unpriced says (docs/definitions.md#cost), in words: no configuration key
    env.globals["how_to_price"] = PRICE_ON_PAGES
    env.filters["for_pages"] = for_pages
    env.globals["startup_cut_text"] = startup_cut_text
    env.filters["keep_words"] = keep_words
    env.filters["remedy_summary"] = remedy_summary
    env.filters["name_breaks"] = name_breaks
    env.globals["speedup_text"] = speedup_text
    env.globals["whole_speedup_text"] = whole_speedup_text
    env.globals["implausible"] = implausible
    return env


#: Markdown syntax a medical record never needs and profile text must never reach: links,
#: images, link references, autolinks and raw HTML (inline patterns, block and pre-processors).
_UNSAFE_MARKDOWN = {"inlinePatterns": ("reference", "link", "image_link", "image_reference", "short_reference",
                                       "short_image_ref", "autolink", "automail", "html", "entity"),
                    "preprocessors": ("html_block",), "parser.blockprocessors": ("reference",)}


def _markdown() -> markdown_lib.Markdown:
    """A Markdown converter for record pages: tables, line breaks and abbreviations (a GPU's short
    name with its full key on hover) only. Nothing in the text can
    become a link, an image or raw HTML (whatever the page holds, e.g. a page written before
    profile text was escaped), and every ASCII punctuation character can be backslash-escaped
    (as CommonMark allows; :func:`~pipeline.text.md_text` relies on it)."""
    md = markdown_lib.Markdown(extensions=["tables", "nl2br", "abbr"])
    for attr, names in _UNSAFE_MARKDOWN.items():
        registry = md.parser.blockprocessors if attr == "parser.blockprocessors" else getattr(md, attr)
        for name in names:
            if name in registry:
                registry.deregister(name)
    md.ESCAPED_CHARS = sorted(set(md.ESCAPED_CHARS) | {chr(c) for c in range(33, 127) if not chr(c).isalnum()})
    return md


#: A record's link to a GPU page, as :func:`~pipeline.report.medical.job_record` writes it: an unescaped
#: ``[`` (profile text never has one: :func:`~pipeline.text.md_text`), a GPU's display name (only
#: :data:`~pipeline.report.medical.NAME_CHARS`), and a page name of safe characters only
#: (:func:`~pipeline.fleet.outputs.gpu_page_name`).
_PAGE_LINK = re.compile(r"(?<![\\\[])\[([" + NAME_CHARS + r"]+)\]\(\.\./" + PAGES_DIR + r"/([A-Za-z0-9_.-]+\.html)\)")


def _page_links(text: str, pages) -> tuple[str, dict]:
    """``text`` with each GPU-page link (:data:`_PAGE_LINK`) replaced by a placeholder, and the
    placeholder -> HTML map: ``<a href="gpu-pages/NAME.html">label</a>`` when NAME is in ``pages``
    (the pages written beside the report), else the label as text. Markdown never sees the links
    (its link syntax stays off, see :func:`_markdown`)."""
    nonce = uuid.uuid4().hex
    found: dict = {}

    def token(m: re.Match) -> str:
        key = f"GPUPAGE{nonce}N{len(found)}E"
        label = html_lib.escape(m.group(1))
        found[key] = (f'<a href="{PAGES_DIR}/{m.group(2)}">{label}</a>' if m.group(2) in pages else label)
        return key

    return _PAGE_LINK.sub(token, text), found


def _record_html(text: str, pages=()) -> str:
    """A medical-record page (Markdown) as HTML: its text is text (``<``, ``&`` escaped by the
    serializer), links, images and raw HTML are not rendered (see :func:`_markdown`), except the
    record's own links to GPU pages that exist beside the report (``pages``: their file names;
    :func:`_page_links`)."""
    if text.startswith("# "):  # the page title; the report's section heading says it
        text = text.split("\n", 1)[1] if "\n" in text else ""
    text, links = _page_links(text, set(pages))
    body = _markdown().convert(text)
    for key, link in links.items():
        body = body.replace(key, link)
    # An abbreviation's title is the definition's text as written: drop its Markdown escapes.
    body = re.sub(r'(<abbr title=")([^"]*)(")', lambda m: m.group(1) + md_unescape(m.group(2)) + m.group(3), body)
    # The page's own headings sit under the report's section heading.
    body = re.sub(r"<(/?)h([1-4])>", lambda m: f"<{m.group(1)}h{int(m.group(2)) + 2}>", body)
    return body


def _record_code() -> str:
    """What a record's HTML depends on besides its text: this module's source and the markdown version."""
    return plots.source_digest(__file__, markdown_lib.__version__)


def render_html(res: Results, plot_cache: str | None = None, pages: dict | None = None) -> str:
    """The report page for ``res`` (a complete HTML document).

    ``plot_cache``: a folder where the plots of the current night (categories,
    spread, timeline) and the HTML of the medical records are kept by their inputs
    (:func:`plots.cached`), so a night whose fleet did not change reuses them; None
    draws every plot. The trend is drawn every time. ``pages``: ``(report, gpu_key) -> href``
    of the GPU pages written beside the report (:func:`~pipeline.report.gpu_page.write_gpu_pages`),
    linked from the GPU tables, the fix-first list, the stragglers, the timeline and the records.
    """
    pages = pages or {}
    s = summarise(res)
    t = s["trend"]
    worst = s["worst_gpu"]
    names = s["gpu_names"]
    title = "no GPU analysed" if worst is None else timeline_title(worst, names[(worst["report"], worst["gpu_key"])])
    svgs = {
        "fixes": plots.cached(plot_cache, plots.fix_first_usd,
                              [{"category": e["category"], "idle_usd_per_month": e["idle_usd_per_month"], "tier": e["confidence_tier"]}
                               for e in s["fixes"]
                               if e["idle_usd_per_month"] == e["idle_usd_per_month"]]),   # an unpriced entry has no bar
        "categories": plots.cached(plot_cache, plots.categories_by_job, s["categories"]),
        "spread": plots.cached(plot_cache, plots.spread_by_job, s["spread"]),
        "timeline": plots.cached(plot_cache, plots.gpu_timeline, s["worst_doc"], title),
        "trend": plots.fleet_trend(t["nights"]),
    }
    # One section per page, its id from the page's file stem (unique per job: summary.record_anchors links it).
    records = [{"stem": stem, "anchor": "record-" + stem,
                "html": Markup(plots.cached(plot_cache, _record_html, text, *_page_names(pages),
                                            code=_record_code(), suffix=".html")),
                "title": (md_unescape(text.splitlines()[0].removeprefix("# Medical record:").strip()) if text else stem)}
               for stem, text in s["records"].items()]
    return _env().get_template("report.html.j2").render(
        s=s, t=t, svgs={k: Markup(v) for k, v in svgs.items()}, records=records,
        categories=CATEGORIES, colours=plots.CATEGORY_COLOURS, sliver_colour=plots.SLIVER_COLOUR,
        timeline_title=title, glossary=GLOSSARY, remedies=REMEDIES, caveats=CAVEAT_MEANINGS,
        confidence=ConfidenceConfig(), inf=float("inf"), page=lambda report, gpu_key: pages.get((report, gpu_key)),
        cause_names=CAUSE_NAMES, none_trusted=NONE_TRUSTED, top_fixes=TOP_FIXES,
        comm_idle_text=comm_idle_text, not_idle=NOT_IDLE, priced_like_idle=PRICED_LIKE_IDLE,
        name=lambda report, gpu_key: names.get((report, gpu_key), gpu_key),
        acct=None if withheld(res) else read_view(res.run_dir),
        coverage_text=coverage_text, whose_text=whose_text, priced_with=priced_with_text(s["priced_with"]))


def priced_with_text(p: dict | None) -> str:
    """What priced a report whose table was priced again as it was read (:func:`pipeline.report.summary.priced_with`),
    in words: the configuration files (or the defaults), the digest of their pricing settings, the rates and the
    month; "" for a table as its run priced it."""
    if not p:
        return ""
    rates = ", ".join(f"{r['model']} {usd(r['usd_per_gpu_hour'])}/GPU-hour" for r in p["rates"])
    overrides = "; ".join(f"cluster {c}: " + ", ".join(f"{m} {usd(v)}" for m, v in rates_.items())
                          for c, rates_ in p["cluster_rates"].items())
    own = ", ".join(f"{r['model']} {usd(r['usd_per_gpu_hour'])}/GPU-hour" for r in p.get("run_rates", [])) or "none"
    return (f"Priced as this report was made, with {', '.join(p['configs']) or 'the default configuration'} "
            f"(pricing settings {p['hash']}): {rates}" + (f"; overrides {overrides}" if overrides else "")
            + f"; {p['hours_per_month']:g} hours per month. Every dollar here and on the GPU pages beside it is at "
            "these rates, not the run's" + kept_text(p.get("kept") or {}) + ". Not shown here, as they hold the run's own dollars (at its rates: "
            f"{own}; {p.get('run_hours', 730.0):g} hours per month): the medical records (the run folder's records/, "
            "and the run's own report.html), the teams table (who pays, from the scheduler's accounting) and the "
            "earlier nights of a sweep's trend.")


def kept_text(kept: dict) -> str:
    """The GPUs that kept their run's pricing in a table priced again (``{why: GPUs}``), in words ("" for none)."""
    if not kept:
        return ""
    n = sum(kept.values())
    return (f", but for {n} GPU{'s' if n != 1 else ''} that kept the run's rate and dollars (a `not-repriced` warning "
            "on each), as each " + "; ".join(f"{why} ({k} GPU{'s' if k != 1 else ''})" for why, k in kept.items()))


def left_out_text(h: dict) -> str:
    """The GPUs a figure over the headline's GPUs (:func:`~pipeline.report.summary.headline_idle`) leaves out, as a
    sentence to follow it ("" when it leaves none out)."""
    if not h["left_out"]:
        return ""
    return (f" Over the {h['gpus']} GPU(s) on trusted captures, as the headline: {h['left_out']} on toy or "
            f"low-confidence ones left out ({h['left_out_tiers']}).")


def headline_idle_text(h: dict) -> str:
    """The Markdown headline's idle % (:func:`~pipeline.report.summary.headline_idle`): over the GPUs on trusted
    captures, the others counted as left out, or marked when every GPU is on a toy or low one."""
    text = f"{pct(h['idle_pct'])} device-level idle over {h['gpus']} GPU(s)"
    if h["left_out"]:
        return (text + f" on trusted captures; {h['left_out']} on toy or low-confidence ones left out "
                       f"({h['left_out_tiers']}; {pct(h['all_idle_pct'])} with them)")
    return text + (", all on toy or low-confidence captures: not to be trusted" if h["untrusted_only"] else "")


def timeline_title(worst: dict, name: str) -> str:
    """The timeline's title: the first GPU of the top 10 (``worst``, :func:`~pipeline.report.summary.summarise`'s
    ``worst_gpu``; ``name`` its display name), ranked as every list is, by tier first and then by dollars
    (:func:`~pipeline.report.summary.tier_ranks`): so it names the tier it leads: ``most expensive idle GPU on a
    trusted capture (medium): H100 #2 pid145/dev1 (train-2gpu-nccl, train.sqlite)``; with no trusted GPU, ``most
    expensive idle GPU of the best tier here, low (no trusted capture; not to be trusted): …``; a table written before
    the tiers: ``most expensive idle GPU: …``."""
    who = f"{name} ({worst['job']}, {os.path.basename(worst['report'])})"
    tier = worst.get("tier_name")
    if not tier:   # a table written before the tiers
        return f"most expensive idle GPU: {who}"
    if not worst.get("tier"):
        return f"most expensive idle GPU on a trusted capture ({tier}): {who}"
    return f"most expensive idle GPU of the best tier here, {tier} (no trusted capture; not to be trusted): {who}"


def _page_names(pages: dict) -> tuple:
    """``()`` without GPU pages, else ``(sorted page file names,)``: the extra argument of a cached
    record's rendering (a record rendered without pages keeps its cache key)."""
    return (sorted(os.path.basename(h) for h in pages.values()),) if pages else ()


#: Columns of the CSV variant, in order (ns shown as ms, money as plain numbers): :data:`pipeline.schema.REPORT_CSV`.
CSV_COLUMNS = schema.shown("report-csv")


def render_csv(res: Results) -> str:
    """The per-GPU cost table of the current night (:data:`CSV_COLUMNS`), ranked as every other view ranks GPUs:
    by tier first (:func:`~pipeline.report.summary.tier_ranks`: trusted, then ``low``, then ``toy``), then most
    expensive first (in each tier the unpriced GPUs after the priced ones), the error rows last. A table written
    before a column existed leaves it empty (``low_confidence`` and ``confidence_note`` are then computed from the
    window and iterations, as the HTML report does)."""
    fleet = res.current.copy()  # a finished fleet (an older table's fix columns filled as it is read)
    fleet["run_date"] = res.current_date
    fleet = schema.conform(fleet, [c for c in schema.REPORT_CSV if c != "run_date"])  # an older table: left empty
    for col in (c for c in schema.REPORT_CSV if schema.display_name(c) != c):
        fleet[schema.display_name(col)] = (fleet[col].astype("Float64") / 1e6).round(3)
    fleet["_failed"] = fleet["status"].isin(schema.NOT_ANALYSED)
    fleet["_tier"] = tier_ranks(fleet)
    fleet["_usd"] = fleet["idle_usd_per_month"].astype(float).fillna(-math.inf)   # unpriced last within its tier
    fleet = fleet.sort_values(["_failed", "_tier", "_usd", "report", "gpu_key"],
                              ascending=[True, True, False, True, True], kind="stable")
    buf = io.StringIO()
    csv_safe(fleet[CSV_COLUMNS]).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


#: The row before the first fix-first entry resting on toy or low-confidence captures only, in the Markdown list
#: (the HTML list's ``id="fix-apart"`` row says it at length; docs/definitions.md#confidence-tiers).
FIX_APART = ("*apart: what rests on toy or low-confidence captures only, ranked on its own after every trusted entry: "
             "the low ones, then the toy ones*")
#: The Markdown list's row before its archived entries (no rank: nothing prescribed; docs/definitions.md#fix-first).
FIX_ARCHIVED = ("*archived, not ranked: under the actionable share of the window on their GPUs, nothing prescribed; "
                "their idle is still in the figures*")


def _markdown_fixes(fixes: list[dict]) -> list[str]:
    """The Markdown variant's opening: the fleet's top :data:`~pipeline.report.summary.TOP_FIXES`
    fix-first entries (rank, category, what a fix wins back per month (:func:`wins_back_text`), the category's idle
    in USD/month (:func:`fix_usd_text`), speed-up, remedy, confidence), the row
    :data:`FIX_APART` before the first one resting on toy or low-confidence captures only (after a trusted one, or
    first when none is trusted), the row :data:`FIX_ARCHIVED` before the archived ones (no rank, after the ranked
    ones), then a blank line."""
    lines = ["**Fix first** (what a fix wins back per month, largest first: where the evidence bounds it, only that "
             "part, on the basis said; else the category's whole idle. Beside it the category's idle in USD/month: what "
             "it costs, not what a fix saves. A short capture extrapolated to a month)", ""]
    if not fixes:
        return lines + ["Nothing to fix: no application idle in the analysed GPUs.", ""]
    lines += ["| # | category | a fix wins back $/month | idle $/month | speed-up | remedy | confidence |",
              "|---|---|---|---|---|---|---|"]
    for i, e in enumerate(fixes[:TOP_FIXES]):
        if e.get("rank") is None and (i == 0 or fixes[i - 1].get("rank") is not None):  # its "Archived" row
            lines.append(f"| | {FIX_ARCHIVED} | | | | | |")
        elif e.get("rank") is not None and not e["trusted"] and (i == 0 or fixes[i - 1]["trusted"]):  # "Apart"
            lines.append(f"| | {FIX_APART} | | | | | |")
        low = "toy capture" if e["confidence_tier"] == "toy" else "low confidence"
        flags = [low if e["low_confidence"] else e["confidence_tier"]] + (
            ["implausible speed-up"] if e["implausible_speedup"] else [])
        lines.append(f"| {'' if e.get('rank') is None else e['rank']} | {e['category']} | {wins_back_text(e)} | {fix_usd_text(e)} | {speedup_text(e['speedup'], e.get('recoverable_speedup'))} | "
                     f"{md_text(e['remedy'])} | {', '.join(flags)} |")
    shown = fixes[:TOP_FIXES]
    legend = (["~$: the entry's dollars rest wholly or partly on assumed rates (how much is said beside them): the "
               "GPUs' models are not on the rate card or not named, priced at the default model's rate "
               "(`cost.default_model`)."] if any(e["assumed_gpus"] for e in shown) else []) + (
        ["unpriced: GPUs with no rate-card entry of their own (models named beside the dollars), in no dollar figure; "
         f"an entry resting on them alone reads unpriced; {HOW_TO_PRICE}."] if any(e["unpriced_gpus"] for e in shown)
        else [])
    return lines + ([""] + [for_pages(line) for line in legend] if legend else []) + [""]


def fix_usd_text(e: dict) -> str:
    """A fix-first entry's dollars as text (docs/definitions.md#cost): ``~$1,752.00 (of which $1,460.00 at assumed
    rates, 1 GPU(s))`` when some rest on assumed rates, ``$292.00 (1 GPU(s) unpriced: Quadro GP100 (1))``,
    ``unpriced (2 GPU(s): Quadro GP100 (2))`` (the models: ``unpriced_models``)
    when none of its GPUs is priced; ``$292.00`` otherwise: the category's idle in dollars, never what a fix wins
    back (:func:`wins_back_text` says that). The parts are the entry's ``assumed_usd_per_month``,
    ``assumed_gpus`` and ``unpriced_gpus`` (:func:`pipeline.analysis.fixfirst.fix_list`)."""
    models = f": {e['unpriced_models']}" if e.get("unpriced_models") else ""   # an older list names none
    if e["idle_usd_per_month"] != e["idle_usd_per_month"]:
        return f"unpriced ({e['unpriced_gpus']} GPU(s){models})"
    parts = ([f"of which {usd(e['assumed_usd_per_month'])} at assumed rates, {e['assumed_gpus']} GPU(s)"]
             if e["assumed_gpus"] else []) + ([f"{e['unpriced_gpus']} GPU(s) unpriced{models}"] if e["unpriced_gpus"]
                                              else [])
    return ("~" if e["assumed_gpus"] else "") + usd(e["idle_usd_per_month"]) + (f" ({'; '.join(parts)})" if parts else "")


def wins_back_text(e: dict) -> str:
    """What a fix of a fix-first entry wins back per month, as the lists lead with it (docs/definitions.md#diagnosis):
    ``$148.89 (bounded by the evidence: <basis>)`` when the evidence bounds it below the category's idle
    (:func:`pipeline.report.words.wins_back`), else ``$503.21 (the whole idle)``; ``~`` before it when some of the
    entry's dollars rest on assumed rates; ``unpriced`` when none of its GPUs is priced (an older list without the
    column: the whole idle)."""
    rec = float(e.get("fix_wins_back_usd_per_month", e["idle_usd_per_month"]))
    if rec != rec:
        return "unpriced"
    why = wins_back_basis(e["idle_usd_per_month"], rec, e.get("fix_wins_back_basis", ""))
    return ("~" if e["assumed_gpus"] else "") + f"{usd(rec)} ({why})"




def meter_text(meter: dict, fleet_usd: float) -> str:
    """One sentence setting what a sampled utilisation meter would read beside the truth
    (:func:`~pipeline.report.summary.meter_summary`; docs/definitions.md#sampled-meter) over the GPUs whose windows
    hold enough sample periods for a reading: the meter's reading, their device-level idle share and, when they are
    every GPU, the idle cost per month ``fleet_usd`` (USD; NaN: unpriced); the GPUs with too few periods said apart
    (:func:`~pipeline.analysis.meter.too_few_text`); with none enough, no reading, only how few periods there were."""
    few = too_few_text(meter["short"])
    if not meter["gpus"]:
        return f"No sampled-meter reading (nvidia-smi's GPU-Util): {few}."
    money = usd(fleet_usd) if fleet_usd != fleet_usd else f"{usd(fleet_usd)}/month"
    text = (f"A sampled meter (nvidia-smi's GPU-Util: did any kernel run in each sample period, 1/6 s by default) would "
            f"read {pct(meter['sampled_util_pct'])} busy ({meter['periods']} period(s) over {meter['gpus']} GPU(s)")
    if not few:
        return text + f"); the GPUs were idle {pct(meter['idle_pct'])} of the time: {money}."
    return text + f" with enough periods); those GPUs were idle {pct(meter['idle_pct'])} of the time. Not read: {few}."


#: The heading of the Markdown summary's busy-time block (:func:`busy_lines`): a different measure from the idle cost.
BUSY_HEADING = ("**Beside the idle: busy time inside collective kernels** (a different measure, in time: the GPUs were "
                "busy there, not idle, so none of it is in the {idle} idle cost above, nor ever added to it{comm}; the "
                "two measures below overlap, both being time inside the same collective kernels: never add them to "
                "each other either)")


def _busy_money(value: float, assumed: dict | None) -> str:
    """A busy measure's dollars in words (:data:`PRICED_LIKE_IDLE`), with the part at assumed rates; ``""`` when its
    GPUs are all unpriced."""
    if value != value:
        return ""
    money = ("~" if assumed and assumed["assumed_gpus"] else "") + f"{usd(value)}/month"
    return " " + PRICED_LIKE_IDLE.format(money=money) + (assumed_text(assumed) if assumed else "") + "."


def collective_lines(collective: dict | None, idle: str) -> list[str]:
    """The Markdown summary's item for the wait inside collectives, in the busy-time block (:func:`busy_lines`;
    :func:`~pipeline.report.medical.fleet_collectives`; docs/definitions.md#collective-wait): its time first, said
    not to be in the idle cost ``idle``, its dollars last in words; ``[]`` when no GPU ran a collective in its
    window."""
    if not collective:
        return []
    c = collective["fleet"]
    if not c["gpus"]:
        return [f"- Waiting for the last rank: not measured ({md_text(c['note'])})."]
    lines = [f"- Waiting for the last rank: {ms(c['wait_ns'])} ({pct(c['wait_pct'])} of the measured windows) busy "
             f"inside collectives waiting for the last rank to enter the call, on {c['gpus']} GPU(s): "
             f"{NOT_IDLE.format(idle=idle)}; remedy: {c['remedy']}.{_busy_money(c['usd'], c['assumed'])}"]
    lines += [f"  - {md_text(j['title'])}: late rank {md_text(j['late_rank'])} ({j['kind']}: last in {j['last']} of "
              f"{j['calls']} calls){', pipeline bubble' if j['wait_kind'] == 'pipeline bubble' else ''}"
              for j in collective["jobs"] if j["late_rank"]]
    return lines


def busy_lines(s: dict) -> list[str]:
    """The Markdown summary's one block of busy time inside collective kernels, last, after the idle headline and
    its lists and apart from them (docs/outputs.md#reports-for-people): :data:`BUSY_HEADING` (with where
    communication's idle is in the headline: :func:`~pipeline.report.words.comm_idle_text`), then the wait for the
    last rank (:func:`collective_lines`) and the exposed communication, each its own item, time first; ``[]`` when
    there is neither."""
    idle = usd(s["fleet_usd"]) if s["fleet_usd"] != s["fleet_usd"] else f"{usd(s['fleet_usd'])}/month"
    items = collective_lines(s["collective"], idle)
    if s["comm"]:
        c = s["comm"]
        items.append(f"- Exposed communication: {ms(c['exposed_ns'])} ({pct(c['exposed_pct'])} of the windows) of "
                     f"{ms(c['comm_ns'])} in collective kernels with no compute beside them, on {c['gpus']} GPU(s): "
                     f"{NOT_IDLE.format(idle=idle)}; it overlaps the wait for the last rank where both are measured: "
                     f"never add the two.{_busy_money(c['usd'], c)}")
    if not items:
        return []
    comm = comm_idle_text(s.get("comm_idle"))
    return [BUSY_HEADING.format(idle=idle, comm=f"; {comm}" if comm else ""), ""] + items


def reconcile_text(rc: dict) -> str:
    """One sentence saying how the fix-first list adds up to the headline idle cost
    (:func:`~pipeline.report.summary.reconcile`): the list, the slivers no category holds, profiler and
    untraced time, idle in no category and rounding (the last two only when not zero)."""
    parts = [f"{usd(rc['fixes'])} (the list)", f"{usd(rc['slivers'])} of sub-threshold slivers on GPUs that are "
             "not launch-bound (no category holds them)", f"{usd(rc['profiler'])} of profiler overhead",
             f"{usd(rc['untraced'])} of untraced time"]
    if rc["other"]:
        parts.append(f"{usd(rc['other'])} of idle in no category")
    if rc["rounding"]:
        parts.append(f"{usd(rc['rounding'])} of rounding to cents")
    return (f"How the list adds up to the headline: {usd(rc['headline'])}/month idle = "
            + " + ".join(parts).replace(f"{usd(rc['fixes'])} (the list)", f"{usd(rc['fixes'])} (the fix-first list)")
            + ".")


def _markdown_legend(rows: list[dict]) -> list[str]:
    """What the markers of the Markdown variant's GPU table mean, when any row has one."""
    out = []
    assumed = [r for r in rows if r["rate_assumed"] and r["rate_marker"] != "unpriced"]
    if assumed:
        out.append(f"({md_text(assumed[0]['rate_marker'])}): the GPU's model is not on the rate card or not named, "
                   "priced at the default model's rate (`cost.default_model`).")
    if any(r["rate_marker"] == "unpriced" for r in rows):
        out.append("unpriced: the GPU has no rate-card entry of its own (its model is not on the card, or it names none "
                   f"and is not an NVIDIA GPU): it has no rate and is in no dollar total; {HOW_TO_PRICE}.")
    if any(r["low_confidence"] for r in rows):
        out.append("(low confidence: …): a short window or few stable iterations extrapolated to a month.")
    return [""] + [for_pages(line) for line in out] if out else []


#: How each part of a night-over-night change (:data:`pipeline.fleet.changes.PARTS`) is named in text.
CAUSE_NAMES = {"idle": "idle", "rate": "rates", "fleet": "GPUs came/went"}


def _cause_text(parts: dict) -> str:
    """A mover's or the fleet's change by cause, e.g. ``idle +$3.00, rates −$119.01`` (the parts not zero
    to the cent; ``no change`` when none is)."""
    return ", ".join(f"{CAUSE_NAMES[p]} {signed_usd(parts[p])}" for p in parts["causes"]) or "no change"


def _markdown_causes(c: dict) -> list[str]:
    """The Markdown variant's lines on why the fleet's cost changed since the previous night
    (:func:`~pipeline.fleet.changes.split`, docs/definitions.md#trend): the three parts and the prices
    that changed."""
    lines = [f"Why: idle change {signed_usd(c['idle'])} (at tonight's rates), rate change {signed_usd(c['rate'])} "
             f"(at last night's idle), fleet change {signed_usd(c['fleet'])} (GPUs and jobs that came or went: "
             f"{c['gpus']['came']} GPU(s) came, {c['gpus']['went']} went)."]
    prices = [f"{md_text(r['before_model'] or 'unknown')}"
              + (f" → {md_text(r['after_model'] or 'unknown')}" if r["after_model"] != r["before_model"] else "")
              + f" {'–' if r['before_rate'] is None else usd(r['before_rate'])} → "
              f"{'–' if r['after_rate'] is None else usd(r['after_rate'])}/GPU-hour ({r['gpus']} GPU(s), "
              f"{signed_usd(r['usd'])})" for r in c["rates"]]
    if c["hours"]:
        prices.append(f"hours per month {c['hours']['before']:g} → {c['hours']['after']:g}")
    return lines + (["Prices changed: " + "; ".join(prices) + "."] if prices else [])


def render_markdown(res: Results) -> str:
    """A short summary for chat or e-mail: headline, clusters, top GPUs, change since the previous night.
    Names from the profiles and labels (jobs, clusters, GPU keys, rate-card text) are escaped
    (:func:`~pipeline.text.md_text`): never a link, emphasis or HTML in the reader's client."""
    s = summarise(res)
    t = s["trend"]
    span = s["current_date"] if s["first_date"] == s["last_date"] else f"{s['first_date']} – {s['last_date']}"
    lines = _markdown_fixes(s["fixes"])
    if s["reconcile"] and s["fixes"]:
        lines += [reconcile_text(s["reconcile"]), ""]
    lines += [f"**GPU idle cost, {s['current_date']}**: {usd(s['fleet_usd'])}{'' if s['fleet_usd'] != s['fleet_usd'] else '/month'} idle "
             f"({headline_idle_text(s['headline'])}"
             + (f", {s['failed_reports']} report(s) failed" if s["failed_reports"] else "") + ")"
             + for_pages(assumed_text(s["rates_assumed"])), "", trust_text(s["trust"]), ""]
    acct = None if withheld(res) else read_view(res.run_dir)  # who pays: teams and coverage, from the accounting
    if acct:
        lines += [whose_text(acct, markdown=True) + coverage_text(acct), "", *teams_markdown(acct), ""]
    h = s["headline"]   # the basis and the meter over the headline's GPUs (the trusted ones when there are some)
    if h["basis"]:
        lines += [basis_text(h["basis"], h["meter"]) + left_out_text(h), ""]
    if h["meter"]:
        lines += [meter_text(h["meter"], s["trust"]["trusted_usd"] if h["left_out"] else s["fleet_usd"])
                  + left_out_text(h), ""]
    if t["lacking"]:
        lines += ["The trend lacks night(s) whose history file is damaged: "
                  + "; ".join(f"{x['date']} ({md_text(x['file'])}: {md_text(x['why'])})" for x in t["lacking"]) + ".",
                  ""]
    if t["previous"]:
        cur, prev = t["nights"][-1], t["nights"][-2]
        lines.append(f"Since {t['previous']}: {signed_usd(cur['usd'] - prev['usd'])}/month "
                     f"(was {usd(prev['usd'])}). History: {span}, {s['nights_count']} night(s).")
        if t["new_jobs"]:
            lines.append("New jobs: " + ", ".join(f"{md_text(j['job'])} ({usd(j['usd'])})"
                                                  for j in t["new_jobs"]) + ".")
        if t["gone_jobs"]:
            lines.append("Gone (fixed or not profiled): "
                         + ", ".join(f"{md_text(j['job'])} (was {usd(j['usd'])})" for j in t["gone_jobs"]) + ".")
        lines += _markdown_causes(t["causes"])
        if t["movers"]:
            lines.append("Biggest movers: " + ", ".join(
                f"{md_text(m['job'])} {signed_usd(m['delta'])} ({_cause_text(m)})" for m in t["movers"][:3]) + ".")
        lines.append("")
    lines.append("By cluster: " + ", ".join(f"{md_text(c['cluster'])} {usd(c['idle_usd_per_month'])}"
                                             + (f" ({c['unpriced_gpus']} GPU(s) unpriced: {c['unpriced_models']})"
                                                if c["unpriced_gpus"] else "")
                                             for c in s["clusters"]) + ".")
    lines += ["", "| # | GPU | job | idle | main category | $/month |", "|---|---|---|---|---|---|"]
    for r in s["top"][:5]:
        marks = "".join(f" ({m})" for m in (r["rate_marker"], r["confidence_marker"])
                        if m and m != "unpriced")  # an unpriced GPU's dollars already read "unpriced"
        lines.append(f"| {r['rank']} | {md_text(r['gpu_name'])}{' (straggler)' if r['straggler'] else ''} | "
                     f"{md_text(r['job'])} | {pct(r['idle_pct'])} | {md_text(r['main_category'])} | {usd(r['usd'])}"
                     f"{md_text(marks)} |")
    lines += _markdown_legend(s["top"][:5])
    rates = "; ".join(f"{md_text(r['model'])} {usd(r['rate'])}/GPU-hour ({md_text(r['source'])})" if r["rate"] == r["rate"]
                      else f"unpriced ({md_text(for_pages(r['source']))})" for r in s["rate_card"])  # NaN: no rate
    lines += ["", f"Rates: {rates}." if rates else "Rates: none (no GPU analysed)."]
    if s["priced_with"]:
        lines += ["", md_text(priced_with_text(s["priced_with"]))]
    busy = busy_lines(s)   # a different measure: last, after every figure of the idle cost
    lines += [""] + busy if busy else []
    return "\n".join(lines) + "\n"


def write_report(results_dir, out_path, fmt: str = "html", night: str | None = None,
                 plot_cache: str | None = None, cfg=None, configs=()) -> str:
    """Render RESULTS (run output dir or sweep state dir) as ``fmt`` into ``out_path``, atomically.

    Args:
        results_dir: a ``gpu-idle run --out`` folder or a nightly-sweep state folder.
        out_path: the file to write (its folder is created).
        fmt: ``html`` (default), ``csv`` or ``md``.
        night: with a sweep state folder, the night to report (``YYYY-MM-DD``, history up to it);
            default the latest.
        plot_cache: for ``html``, a folder keeping plots by their inputs (see :func:`render_html`).
        cfg, configs: a configuration whose rate card prices the current table again, and the files it was read
            from (:func:`~pipeline.report.summary.load_results`); None: the table as its run priced it.
    Returns:
        ``out_path`` as a string.
    Raises:
        ReportError: RESULTS holds no fleet table; :class:`ReportNotWritten` (a ReportError): the file or
            its GPU pages could not be written (a full disk).
        OutputError: ``gpu-pages/`` beside ``out_path`` is a symbolic link or not a folder.
        ValueError: unknown ``fmt``.
    """
    if fmt not in FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; one of {', '.join(FORMATS)}")
    from .gpu_page import PagesIncomplete  # the GPU pages: not for compare.py, which renders with this module
    from .rendered import pages_folder, record_report

    res = load_results(os.fspath(results_dir), night, cfg, configs)
    out_path = os.fspath(out_path)
    pages = {}
    try:
        if fmt == "html":
            pages = write_pages(res, out_path, plot_cache)
            text = render_html(res, plot_cache, pages)
        else:
            text = {"csv": render_csv, "md": render_markdown}[fmt](res)
        write_text(out_path, text)
        # A page to share: readable as any new file would be (write_text's temporary file is 0600).
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(out_path, 0o666 & ~umask)
        if fmt == "html":
            record_report(out_path)
    except PagesIncomplete as exc:
        raise ReportNotWritten(f"{out_path}: not written ({os_cause(exc.cause)}); {exc.written} of "
                               f"{exc.total} GPU page(s) written in {exc.folder}{os.sep}") from exc
    except OSError as exc:
        where = (f"; {len(pages)} of {len(pages)} GPU page(s) written in {pages_folder(out_path)}{os.sep}"
                 if pages else "")
        raise ReportNotWritten(f"{out_path}: not written ({os_cause(exc)}){where}") from exc
    return out_path


class ReportNotWritten(ReportError):
    """The report (or its GPU pages) could not be written, e.g. on a full disk; the message names the
    file, the cause and how many GPU pages were written."""


def write_pages(res: Results, out_path: str, plot_cache: str | None = None) -> dict:
    """One page per analysed GPU of the current night that has its JSON, into ``gpu-pages/`` beside
    ``out_path`` (:func:`~pipeline.report.gpu_page.write_gpu_pages`; pages of other GPUs there are
    removed). Returns ``(report, gpu_key) -> href`` relative to the report's folder."""
    from .gpu_page import write_gpu_pages

    ok = ok_rows(res.current).sort_values(["report", "gpu_key"], kind="stable")
    keys = job_keys(res.current)
    anchors = record_anchors(keys, shown_records(res, keys))
    rows = [(str(r), str(g), anchors.get((str(c), str(j))))
            for r, g, c, j in zip(ok["report"], ok["gpu_key"], ok["cluster"], ok["job"])]
    return write_gpu_pages(rows, lambda report, gpu: _doc_text(res, report, gpu), out_path, plot_cache,
                           lambda: gpu_names(res.current), lambda: gpu_roles(res.current),
                           made_of=pages_made_of(res, rows, out_path))


def pages_made_of(res: Results, rows: list, out_path: str) -> str | None:
    """A digest of everything the GPU pages of ``rows`` (:func:`write_pages`) are made of besides the code, from what
    the folder's manifest vouches for (:func:`~pipeline.report.summary.load_results` checked the files it lists against
    it): the rows and their record anchors, the fleet table and the pricing it is finished with (the GPUs' names and
    roles come from it) and each row's JSON (its size and SHA-256, or absent). None when that cannot be said from the
    manifest: a table priced again as it was read, pages written beside a report in another folder than the night's
    or run's, a JSON file there that the manifest does not list."""
    if res.priced_with or not res.run_dir or os.path.dirname(os.path.abspath(out_path)) != os.path.abspath(res.run_dir):
        return None
    doc = read_manifest(res.run_dir)
    files = (doc or {}).get("files") or {}
    docs = []
    for report, gpu_key, _ in rows:
        rel = f"gpus/{gpu_json_name(report, gpu_key)}"
        if files.get(rel) is None and (rel in files or os.path.lexists(os.path.join(res.run_dir, rel))):
            return None   # claimed by name only, or a file no manifest vouches for
        docs.append(files.get(rel))
    if not doc or not doc["complete"] or files.get("fleet.parquet") is None:
        return None
    made = {"rows": rows, "fleet": files["fleet.parquet"], PRICING: doc.get(PRICING), "docs": docs}
    return hashlib.sha256(json.dumps(made, sort_keys=True).encode()).hexdigest()


def _doc_text(res: Results, report: str, gpu_key: str) -> str | None:
    """The text of the GPU's JSON (:func:`~pipeline.report.summary.gpu_json_text`); of a table priced again as it was
    read (:attr:`~pipeline.report.summary.Results.priced_with`), with its ``_summary`` priced as the table is
    (:func:`pipeline.fleet.pricing.repriced_summary`)."""
    text = gpu_json_text(res.run_dir, report, gpu_key)
    if text is None or not res.priced_with:
        return text
    rows = res.current[(res.current["report"] == report) & (res.current["gpu_key"] == gpu_key)]
    doc = json.loads(text)
    doc["_summary"] = repriced_summary(doc.get("_summary") or {}, rows.iloc[0].to_dict())
    return json_text(doc)
