"""``gpu-idle compare``'s outputs: a finished comparison (:func:`pipeline.compare.result.compare`) formatted
(docs/definitions.md#compare): the printed text, the Markdown, compare.csv, compare.json, compare.html and the
stacked records, and the folder they are written to. Nothing here reads a side, pairs, judges or prices: the
comparison comes finished from :mod:`pipeline.compare`, of which this module imports only its words
(:mod:`pipeline.compare.comparison`; tests/test_layers.py holds it).

Times are int ns, shares % of W (0..100), changes in percentage points, money USD per month.
"""
from __future__ import annotations

import math
import os
import re

import numpy as np
import pandas as pd

from ..compare.comparison import SIDES, missing, pair_title, per_gpu_forced, per_gpu_withheld
from ..fleet.outputs import PAGES_DIR
from ..fleet.reduce import assumed_text
from ..io import file_entry, json_text, prune, real_dir, remove_if_empty, same_file, write_text
from ..model import CATEGORIES
from ..schema import COMPARE_CSV
from ..store.results import MANIFEST, drop_manifest, read_manifest, write_folder_manifest
from ..text import csv_safe, md_code, md_text
from .medical import TOP_GAPS, job_record, record_stem
from .summary import is_sweep_dir
from .words import signed, signed_usd, usd


def gate_lines(g: dict) -> list[str]:
    """The gate's verdict (:func:`gate`) as plain lines: the verdict, then per job why it was not gated, or each
    figure that failed or grew (growth, noise floor, excess over it, threshold), and how many did not grow."""
    limits = "; ".join(t for t in (f"--fail-above {usd(g['above_usd'])}" if g["above_usd"] is not None else "",
                                   f"--fail-above-total {usd(g['above_total_usd'])}"
                                   if g["above_total_usd"] is not None else "",
                                   "--strict" if g["strict"] else "") if t)
    lines = [f"gate ({limits}): {g['verdict']}"]
    for j in g["jobs"]:
        name = j["job"] or "the comparison"
        if not j["applied"]:
            lines.append(f"  {name}: not gated: {j['why']}")
            continue
        grew = [c for c in j["checks"] if c["failed"] or (c["growth_usd"] or 0) > 0]
        for c in grew:
            what = "total idle" if c["what"] == "total" else f"{c['what']} idle"
            lines.append(f"  {name}: {what} {_signed_money(c['growth_usd'])}/month against a noise floor of "
                         f"{_money(c['floor_usd'])} ({_signed_money(c['excess_usd'])} beyond it) and a threshold of "
                         f"{_money(c['threshold_usd'])}: {c['reading']}" + (" (FAILED)" if c["failed"] else ""))
        rest = len(j["checks"]) - len(grew)
        if rest:
            lines.append(f"  {name}: {rest} other figure(s) did not grow")
    return lines


# ---------------------------------------------------------------------------------------------- outputs

#: compare.csv's columns: one row per GPU pair and per job (``level``), then one per unpaired GPU; declared
#: (with what each holds) in :data:`pipeline.schema.COMPARE_CSV`.
CSV_COLUMNS = COMPARE_CSV.columns


def _r(x, n: int = 4):
    """A figure for the files: rounded to ``n`` decimals; None when missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), n) + 0.0  # + 0.0: no -0.0


def _figures(d: dict | None) -> dict:
    """The CSV cells of one :func:`deltas` (empty when withheld)."""
    if d is None:
        return {}
    fb, fa = d["before"], d["after"]
    out = {"idle_pct_before": _r(fb["idle_pct"]), "idle_pct_after": _r(fa["idle_pct"]),
           "idle_pct_change_pts": _r(d["idle_pct_change_pts"]), "noise_floor_pts": _r(d["noise_floor_pts"]),
           "idle_change": d["idle_change"], "reading": d["reading"], "iteration_ms_before": _r(fb["iteration_ns"] / 1e6, 6),
           "iteration_ms_after": _r(fa["iteration_ns"] / 1e6, 6), "iteration_change_pct": _r(d["iteration_change_pct"]),
           "iteration_noise_floor_pct": _r(d["iteration_noise_floor_pct"]), "iteration_change": d["iteration_change"],
           "speedup": _r(d["speedup"])}
    for c in CATEGORIES:
        out.update({f"cat_{c}_ms_per_iteration_before": _r(fb[f"cat_{c}_ms_per_iteration"], 6),
                    f"cat_{c}_ms_per_iteration_after": _r(fa[f"cat_{c}_ms_per_iteration"], 6),
                    f"cat_{c}_ms_per_iteration_change": _r(d[f"cat_{c}_ms_per_iteration_change"], 6),
                    f"cat_{c}_pct_before": _r(fb[f"cat_{c}_pct"]), f"cat_{c}_pct_after": _r(fa[f"cat_{c}_pct"]),
                    f"cat_{c}_pct_change_pts": _r(d[f"cat_{c}_pct_change_pts"])})
    for k in ("usd_before_after_rates", "usd_after_after_rates", "usd_change_after_rates", "usd_before_fixed_rates",
              "usd_after_fixed_rates", "usd_change_fixed_rates", "saving_usd_per_month"):
        out[k] = _r(d[k], 2)
    out.update(rate_assumed=bool(d["assumed_gpus_after_rates"]), assumed_gpus=d["assumed_gpus_after_rates"],
               assumed_usd_before_after_rates=_r(d["assumed_usd_before_after_rates"], 2),
               assumed_usd_after_after_rates=_r(d["assumed_usd_after_after_rates"], 2),
               unpriced_gpus=d["unpriced_gpus_after_rates"], assumed_gpus_fixed_rates=d["assumed_gpus_fixed_rates"],
               unpriced_gpus_fixed_rates=d["unpriced_gpus_fixed_rates"])
    return out


def _tiers(c: dict) -> dict:
    """The CSV cells of one :func:`confidence`; an empty ``speedup`` where it is withheld (:func:`ratio_withheld`)."""
    return {"confidence_tier_before": c["before"], "confidence_tier_after": c["after"], "low_confidence": c["low"],
            "confidence_note": c["note"], **({"speedup": None} if ratio_withheld(c) else {})}


def csv_rows(result: dict) -> list[dict]:
    """compare.csv's rows (:data:`CSV_COLUMNS`), per job: its GPU pairs, then the job itself, then its
    unpaired GPUs; then the GPUs of unpaired jobs."""
    rows = []
    for job in result["jobs"]:
        v = job["verdict"]
        common = {"cluster": job["before"][0], "job": job["before"][1], "job_after": job["after"][1],
                  "pairing": job["basis"], "comparable": v["comparable"], "forced": job["forced"],
                  "reasons": "; ".join(v["reasons"])}
        withheld = per_gpu_withheld(job)
        for g in job["gpus"]:
            gaps = g.get("gaps") or []
            rows.append({**common, "level": "gpu", "gpu_before": g["before"]["name"], "gpu_after": g["after"]["name"],
                         "gpu_key_before": g["before"]["gpu_key"], "gpu_key_after": g["after"]["gpu_key"],
                         "forced": bool(forced_why(job, pair=True)), "withheld": withheld,
                         **_figures(g.get("deltas")), **_tiers(g["confidence"]),
                         **({"gaps_vanished": sum(x["count_before"] for x in gaps if x["change"] == "vanished"),
                             "gaps_appeared": sum(x["count_after"] for x in gaps if x["change"] == "appeared"),
                             "gaps_kept_changed": sum(1 for x in gaps if _width_changed(x))}
                            if g.get("deltas") is not None else {})})
        rows.append({**common, "level": "job", **_figures(job.get("deltas")), **_tiers(job["confidence"])})
        for u in job["unpaired"]:
            rows.append({**common, "level": f"unpaired-{u['side']}", f"gpu_{u['side']}": u["name"],
                         f"gpu_key_{u['side']}": u["gpu_key"]})
    for u in result["unpaired_jobs"]:
        for key in u["gpus"]:
            rows.append({"level": f"unpaired-{u['side']}", "cluster": u["job"][0], "job": u["job"][1],
                         f"gpu_key_{u['side']}": key, "comparable": False, "reasons": f"job only {u['side']}"})
    return rows


def render_csv(result: dict) -> str:
    """compare.csv: :func:`csv_rows` under :data:`CSV_COLUMNS` (text cells made safe for spreadsheets)."""
    frame = pd.DataFrame(csv_rows(result), columns=CSV_COLUMNS, dtype=object)  # whole numbers stay whole
    return csv_safe(frame).to_csv(index=False, lineterminator="\n")


def _plain(obj):
    """``obj`` with NaN as None and numpy scalars as Python's, for JSON."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(float(obj)) else float(obj)
    return obj


def json_result(result: dict) -> str:
    """compare.json (and ``--format json``): the :func:`compare` result, with its ``gate`` when one was asked for."""
    return json_text(_plain(result))


#: A kernel name in the Markdown is cut to this many characters (the last one ``…``).
KERNEL_CHARS = 60


def _cut(name, chars: int = KERNEL_CHARS) -> str:
    name = str(name)
    return name if len(name) <= chars else name[:chars - 1] + "…"


def forced_why(job: dict, pair: bool = False) -> str:
    """Why the figures of ``job`` (``pair``: of each of its GPU pairs) are shown only with ``--force``, as marked:
    ``not comparable`` (the verdict), ``not known to be the same GPU`` (a pair paired by a position only:
    :func:`~pipeline.compare.comparison.per_gpu_forced`), both ``; ``-joined; ``""`` when not forced."""
    return "; ".join(w for w, on in (("not comparable", job["forced"]),
                                     ("not known to be the same GPU", pair and per_gpu_forced(job))) if on)


def _mark(forced, low: bool = False) -> str:
    """A figure's marks: `` [forced: <why>]`` (``forced``: :func:`forced_why`; True: ``not comparable``) and
    `` [low confidence]``."""
    why = "not comparable" if forced is True else forced
    return (f" [forced: {why}]" if why else "") + (" [low confidence]" if low else "")


def _money(x) -> str:
    return usd(_nn(x))


def _signed_money(x) -> str:
    """A change in USD per month (:func:`pipeline.report.words.signed_usd`); ``unpriced`` when it cannot be priced."""
    return "unpriced" if missing(x) else signed_usd(x)


def _num(x, n: int = 2, unit: str = "") -> str:
    return "-" if x is None or math.isnan(x) else f"{x:,.{n}f}{unit}"


def _width_changed(x: dict) -> bool:
    """A ``kept`` gap group (:func:`gap_changes`) whose gaps' total width or count is not the same on both sides."""
    return x["change"] == "kept" and (x["ns_before"] != x["ns_after"] or x["count_before"] != x["count_after"])


def shown_gaps(gaps: list) -> list:
    """The gap groups a view lists: those that vanished or appeared and the kept ones whose width changed."""
    return [x for x in gaps if x["change"] != "kept" or _width_changed(x)]


def place_text(place: str) -> str:
    """A gap group's place (:func:`gap_changes`) as words: ``in a kept iteration, after kernel 3``, ``outside
    every iteration``."""
    return "outside every iteration" if place == "outside" else f"in a {place}"


def floor_text(change: str, floor: float, unit: str, note: str = "") -> str:
    """A change's reading against its noise floor (docs/definitions.md#compare-deltas) as a sentence part."""
    if change == "unknown":
        return "the noise floor is unknown (" + (note or "no stable iterations on a side to measure it") + \
            "): no change can be claimed"
    if change == "no change detectable":
        return f"within the noise floor of {_num(floor, 2, unit)}: no change detectable"
    return f"{change}, by more than the noise floor of {_num(floor, 2, unit)}"


def usd_figure(x, assumed_gpus: int) -> str:
    """A dollar figure as the product writes it (``$1,234.56``, ``−$57.99``, ``unpriced``), ``~`` before it when
    some of it rests on assumed rates (docs/definitions.md#cost)."""
    return ("~" if assumed_gpus and not missing(x) else "") + _money(x)


def rates_note(d: dict, basis: str) -> str:
    """What the dollars of one rate basis (``after_rates``/``fixed_rates``) of a :func:`deltas` rest on, after
    them: ``; of which $X -> $Y at assumed rates (N GPU(s))``, ``; N GPU(s) unpriced, not in it (their models);
    to price them, ...``; empty when neither (the wording of :func:`~pipeline.fleet.reduce.assumed_text`)."""

    n = d[f"assumed_gpus_{basis}"]
    out = (f"; of which {_money(d[f'assumed_usd_before_{basis}'])} -> {_money(d[f'assumed_usd_after_{basis}'])} "
           f"at assumed rates ({n} GPU(s))") if n else ""
    return out + assumed_text({"assumed_gpus": 0, "assumed_usd": 0.0, "unpriced_gpus": d[f"unpriced_gpus_{basis}"],
                               "unpriced_models": d.get(f"unpriced_models_{basis}")})


def ratio_withheld(conf: dict | None) -> str:
    """Why the speed-up (the iteration lengths' ratio) of a pair or job whose tiers are ``conf``
    (:func:`confidence`) is withheld: a side of tier ``toy`` (a window or kernel count too small to measure an
    iteration: a ratio such as 4421x would read as a result); ``""`` when it is shown (a ``low`` side's is marked)."""
    sides = [label for label in SIDES if (conf or {}).get(label) == "toy"]
    if not sides:
        return ""
    return (f"speed-up withheld: the {' and the '.join(sides)} side{'s are' if len(sides) > 1 else ' is a'} toy "
            f"capture{'s' if len(sides) > 1 else ''} (tier toy), too small for an iteration length to compare")


def summary_lines(d: dict, forced, low: bool = False, withheld: str = "") -> list[str]:
    """The Markdown lines of one :func:`deltas` (every figure marked when ``forced``, :func:`forced_why` or True for
    ``not comparable``, or ``low``): idle share,
    iteration length (each side's; the speed-up, or ``withheld``: :func:`ratio_withheld`), dollars
    (:func:`dollars_line`), the saving or why none is claimed, per category."""
    fb, fa, m = d["before"], d["after"], _mark(forced, low)
    idle = (f"idle {_num(fb['idle_pct'], 2, ' %')} -> {_num(fa['idle_pct'], 2, ' %')} "
            f"({signed(d['idle_pct_change_pts'], 2, ' pts')}); "
            f"{floor_text(d['idle_change'], d['noise_floor_pts'], ' pts', d.get('noise_floor_note', ''))}{m}")
    if missing(fb["iteration_ns"]) or missing(fa["iteration_ns"]):
        it = f"iteration length unknown (no stable iterations on a side){m}"
    else:
        it = (f"iteration {_num(fb['iteration_ns'] / 1e6, 3, ' ms')} -> {_num(fa['iteration_ns'] / 1e6, 3, ' ms')} "
              f"({signed(d['iteration_change_pct'], 2, ' %')}); "
              f"{floor_text(d['iteration_change'], d['iteration_noise_floor_pct'], ' %')}; "
              f"{withheld or 'speed-up ' + _num(d['speedup'], 3, 'x')}{m}")
    if d["idle_change"] == "lower":
        money = (f"saving {_money(d['saving_usd_per_month'])}/month at the after side's rates "
                 f"({_money(-d['usd_change_fixed_rates'])} at the before side's){m}")
    elif d["idle_change"] == "higher":
        money = (f"idle cost up {_money(d['usd_change_after_rates'])}/month at the after side's rates "
                 f"({_money(d['usd_change_fixed_rates'])} at the before side's){m}")
    elif d["idle_change"] == "unknown":
        money = f"no saving claimed: the noise floor is unknown{m}"
    else:
        money = f"no saving claimed: no change detectable{m}"
    cats = [f"{c} " + ("" if missing(d[f'cat_{c}_ms_per_iteration_change']) else
                       f"{signed(d[f'cat_{c}_ms_per_iteration_change'], 3, ' ms per iteration')}, ")
            + f"{signed(d[f'cat_{c}_pct_change_pts'], 2, ' pts')} of the measured window" for c in CATEGORIES
            if fb[f"cat_{c}_pct"] or fa[f"cat_{c}_pct"]]
    return [f"- {idle}", f"- {it}", f"- {dollars_line(d)}{m}", f"- {money}",
            f"- change per category: {'; '.join(cats) or 'none'}{m}"]


def dollars_line(d: dict) -> str:
    """Both sides' idle dollars per month of one :func:`deltas` and their change, at the after side's rates,
    then at fixed rates (the before side's) when those give other figures (docs/definitions.md#compare-deltas);
    shown whatever the reading (the saving is claimed apart, only when detectable). A total over some priced
    GPUs is their sum and says how many are unpriced; one resting partly on assumed rates reads ``~$`` and says
    how much (:func:`rates_note`)."""
    change = _signed_money
    n = d["assumed_gpus_after_rates"]
    text = (f"idle {usd_figure(d['usd_before_after_rates'], n)} -> {usd_figure(d['usd_after_after_rates'], n)} per "
            f"month at the after side's rates ({change(d['usd_change_after_rates'])}){rates_note(d, 'after_rates')}")
    after = (d["usd_before_after_rates"], d["usd_after_after_rates"])
    fixed = (d["usd_before_fixed_rates"], d["usd_after_fixed_rates"])
    if any(not (x == y or (missing(x) and missing(y))) for x, y in zip(after, fixed)):
        n = d["assumed_gpus_fixed_rates"]
        text += (f"; {usd_figure(fixed[0], n)} -> {usd_figure(fixed[1], n)} at fixed rates (the before side's) "
                 f"({change(d['usd_change_fixed_rates'])}){rates_note(d, 'fixed_rates')}")
    return text


def _nn(x) -> float:
    """``x`` with None as NaN (a figure read back from JSON)."""
    return math.nan if x is None else x


def no_pairs_text(result: dict) -> str:
    """The sentence saying that no job of one side paired with one of the other (docs/definitions.md#compare-pairing),
    naming each side's jobs (``cluster/job`` when the sides' clusters differ; the first five), with the hint that
    their job labels differ; empty when some job paired."""
    if result["jobs"]:
        return ""
    clusters = {c for s in result["sides"] for c, _ in s["jobs"]}
    names = []
    for s in result["sides"]:   # cluster/job when the clusters differ: a job pairs by both
        jobs = [j if len(clusters) == 1 else f"{c}/{j}" for c, j in s["jobs"]]
        names.append(", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "") or "none")
    return (f"Nothing paired: no job of the before side ({names[0]}) has a namesake on the after side ({names[1]}). "
            "The two sides' job labels differ: a report with no label is a job of its own, named after its file. "
            "Label both sides alike: compare reports with --config and a labels section, or run each side with "
            "the same labels.")


def quiet(job: dict) -> bool:
    """Whether a comparable job shows no change at all: its idle share and iteration length, and every GPU
    pair's, either read "no change detectable" or did not move, its dollars did not move, no gap vanished,
    appeared or changed width, and no GPU is unpaired (the md prints such a job on one line)."""
    if not job["verdict"]["comparable"] or "deltas" not in job or job["unpaired"] or per_gpu_withheld(job):
        return False   # a pair whose figures are withheld is not known to be still

    def still(d: dict) -> bool:
        idle = d["idle_change"] == "no change detectable" or d["idle_pct_change_pts"] == 0
        it = d["iteration_change"] == "no change detectable" or missing(d["iteration_change_pct"]) \
            or d["iteration_change_pct"] == 0
        return idle and it and (missing(d["usd_change_after_rates"]) or d["usd_change_after_rates"] == 0)

    return still(job["deltas"]) and all(still(g["deltas"]) and not shown_gaps(g["gaps"]) for g in job["gpus"])


def render_text(result: dict) -> list[str]:
    """The default ``text`` print: per job its verdict (``job: comparable`` or ``job: not comparable: …`` and whether
    its figures are withheld, ``--force`` showing them, or shown forced), then,
    where its figures are shown, the idle share's reading, the dollars of both sides (:func:`dollars_line`) and
    the saving or why none is claimed, indented, a low-confidence job's note and its unpaired GPUs; when nothing
    paired, the sentence of :func:`no_pairs_text`; after the jobs, the jobs only one side holds and each side's
    failed reports (as the Markdown says them), so the print never hides what was left out. Each line as it is
    printed."""
    lines = [no_pairs_text(result)] if not result["jobs"] else []
    for job in result["jobs"]:
        v, low = job["verdict"], job["confidence"]
        lines.append(f"{pair_title(job)}: " + ("comparable" if v["comparable"] else "not comparable: " + "; ".join(v["reasons"])
                                                + ("; shown with --force: every figure below is marked" if job["forced"]
                                                   else "; the figures are withheld (--force shows them)")))
        if job["pairing_warning"]:
            lines.append(f"  warning: {job['pairing_warning']}")
        if "deltas" in job:
            figures = summary_lines(job["deltas"], job["forced"], low["low"], ratio_withheld(low))
            lines += ["  " + figures[i][2:] for i in (0, 1, 2, 3)]   # idle, iteration (each side's), dollars, saving
        if low["low"]:
            lines.append(f"  {low['note']}")
        lines += [f"  unpaired ({u['side']} only): {u['name']} ({u['gpu_key']} in "
                  f"{os.path.basename(u['report'])})" for u in job["unpaired"]]
    for u in result["unpaired_jobs"]:
        lines.append(f"unpaired job ({u['side']} only): {u['job'][1]}, {len(u['gpus'])} GPU(s)")
    for side in result["sides"]:
        if side["failed"]:
            lines.append(f"{side['label']}: {len(side['failed'])} failed report(s) in {side['source']}, "
                         "not compared (--format md and compare.json name them)")
    if result.get("gate"):
        lines += gate_lines(result["gate"])
    return lines


def gap_line(x: dict, forced, low: bool) -> str:
    """One gap group (:func:`gap_changes`) as a Markdown line: what happened to it, its kernels (cut to
    :data:`KERNEL_CHARS`), place and category."""
    between = (f"between {md_code(_cut(x['kernel_before'] or '-'))} and {md_code(_cut(x['kernel_after'] or '-'))}, "
               f"{place_text(x['place'])}, category {x['category_before'] or x['category_after']}")
    if x["change"] == "kept":
        what = (f"kept, width changed: {x['count_before']} gap(s) of {x['ns_before'] / 1e6:,.3f} ms in all -> "
                f"{x['count_after']} of {x['ns_after'] / 1e6:,.3f} ms ({signed((x['ns_after'] - x['ns_before']) / 1e6, 3, ' ms')})")
    else:
        n, ns = (x["count_before"], x["ns_before"]) if x["change"] == "vanished" else (x["count_after"], x["ns_after"])
        what = f"{x['change']}: {n} gap(s) of {ns / 1e6:,.3f} ms in all"
    return f"- gap {what}, {between}{_mark(forced, low)}"


def render_markdown(result: dict) -> str:
    """``--format md``: the verdict and what changed, per job then per GPU pair, for chat; a job whose GPUs no rank
    paired and that holds more than one GPU on a side shows its totals only, each pair's difference withheld with the
    reason (:func:`~pipeline.compare.comparison.per_gpu_withheld`; ``--force``: shown, saying so and marked); per GPU
    pair at most :data:`~pipeline.report.medical.TOP_GAPS` (5, the seed's page) gap groups that changed, the largest
    first, then how many more; a job with no change at all (:func:`quiet`) on one line under "Jobs with no detectable change"."""
    lines = ["# Before and after", ""]
    for s in result["sides"]:
        lines.append(f"- {s['label']}: {md_text(s['source'])} ({s['gpus']} GPU(s)"
                     + (f", {len(s['failed'])} failed report(s)" if s["failed"] else "") + ")")
    if result.get("gate"):   # the verdict first: the pull-request comment's first line says pass or fail
        head, *rest = gate_lines(result["gate"])
        lines += ["", "## Gate", "", f"**{md_text(head)}**", ""] + [f"- {md_text(x.strip())}" for x in rest]
    if not result["jobs"]:
        lines += ["", md_text(no_pairs_text(result))]
    still = []
    for job in result["jobs"]:
        v, conf = job["verdict"], job["confidence"]
        title = md_text(pair_title(job))
        if quiet(job):
            d = job["deltas"]
            still.append(f"- {title}: comparable, no change: {len(job['gpus'])} GPU pair(s) paired by {job['basis']}"
                         + (" (warning: no rank pairs them)" if job["pairing_warning"] else "") + ", idle "
                         f"{_num(d['before']['idle_pct'], 2, ' %')} on both sides, "
                         f"{usd_figure(d['usd_after_after_rates'], d['assumed_gpus_after_rates'])} per month"
                         + (f"; {md_text(conf['note'])}" if conf["low"] else ""))
            continue
        lines += ["", f"## {title}", ""]
        lines.append("Comparable." if v["comparable"] else "Not comparable: " + md_text("; ".join(v["reasons"]))
                     + (". Shown with --force: every figure below is marked." if job["forced"]
                        else ". The figures are withheld (--force shows them)."))
        lines.append(f"Confidence tiers: {conf['before'] or 'unknown'} before, {conf['after'] or 'unknown'} after"
                     + (f"; {md_text(conf['note'])}" + (" (every figure below is marked)." if "deltas" in job else ".")
                        if conf["low"] else "."))
        lines += ["", f"GPUs paired by {job['basis']}:"]
        if job["pairing_warning"]:
            lines.append(f"- warning: {md_text(job['pairing_warning'])}")
        lines += [f"- {g['before']['name']} ({g['before']['seat']}) -> {g['after']['name']} ({g['after']['seat']})"
                  for g in job["gpus"]]
        lines += [f"- unpaired ({u['side']} only): {u['name']} ({md_text(u['gpu_key'])} in "
                  f"{md_text(os.path.basename(u['report']))})" for u in job["unpaired"]]
        if "deltas" in job:
            lines += ["", "Job:"] + summary_lines(job["deltas"], job["forced"], conf["low"], ratio_withheld(conf))
        said = per_gpu_withheld(job) or per_gpu_forced(job)   # pairs not known to be the same GPU
        if said and "deltas" in job:   # the job's figures shown (its verdict's withholding says the rest)
            lines += ["", "### Per GPU pair", "", f"{md_text(said)}."]
        forced = forced_why(job, pair=True)
        for g in job["gpus"]:
            if g.get("deltas") is None:
                continue
            low = g["confidence"]["low"]
            lines += ["", f"### {g['before']['name']} -> {g['after']['name']}"]
            if low:
                lines.append(f"- {md_text(g['confidence']['note'])}")
            lines += summary_lines(g["deltas"], forced, low, ratio_withheld(g["confidence"]))
            moved = shown_gaps(g["gaps"])
            lines += [gap_line(x, forced, low) for x in moved[:TOP_GAPS]] or [
                "- no gap vanished, appeared or changed width"]
            if len(moved) > TOP_GAPS:
                lines.append(f"- and {len(moved) - TOP_GAPS} more gap group(s) that changed (compare.html and "
                             "compare.json list every one)")
    if still:
        lines += ["", "## Jobs with no detectable change", ""] + still
    for u in result["unpaired_jobs"]:
        lines += ["", f"Unpaired job ({u['side']} only): {md_text(u['job'][1])}, {len(u['gpus'])} GPU(s)"]
    return "\n".join(lines) + "\n"


def seed_pages(result: dict, sides: tuple, at: str | None = None) -> list[dict]:
    """The seed's page of each job pair's two sides (docs/definitions.md#compare-records), in ``result["jobs"]``
    order: ``{"title": the pair's title, "before": Markdown, "after": Markdown}``, each side's page being its job's
    medical record (:func:`pipeline.report.medical.job_record`: the idle line, the category line, the five largest
    gaps) over that side's stored rows. ``at``: the folder the pages' GPU links are made relative to
    (:func:`page_links`; None: links left as the record writes them)."""
    fleets = [s.table for s in sides]
    pages = []
    for job in result["jobs"]:
        texts = []
        for s, fleet, key in zip(sides, fleets, (job["before"], job["after"])):
            rows = fleet[(fleet["cluster"].astype(str) == key[0]) & (fleet["job"].astype(str) == key[1])]
            roster = {k: {"device": d.get("device_roster", [])} for k, d in s.docs.items()}
            text = job_record(key[1], rows, roster)
            texts.append(page_links(text, s.folder, at) if at is not None else text)
        title = job["before"][1] if job["before"] == job["after"] else f"{job['before'][1]} -> {job['after'][1]}"
        pages.append({"title": title, "before": texts[0], "after": texts[1]})
    return pages


def stacked_record(title: str, before: str, after: str) -> str:
    """The seed's page of one job for both sides, stacked (docs/definitions.md#compare-records): the before side's
    page (:func:`seed_pages`) under ``## Before``, then the after side's under ``## After``, headings one level
    down, each page's own title line left out."""
    out = [f"# Before and after: {md_text(title)}", ""]
    for label, text in (("Before", before), ("After", after)):
        body = [("#" + line if line.startswith("#") else line) for line in text.splitlines()]
        out += [f"## {label}", ""] + body[2:] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def run_folder_reason(out_dir: str) -> str:
    """Why ``out_dir`` may not hold a comparison, or ``""``: it is a gpu-idle run or sweep output folder (it holds
    a run's manifest, :data:`~pipeline.store.results.MANIFEST`, or ``fleet.parquet``, or is a sweep state folder),
    whose own records a comparison's ``records/`` would mix with and a later ``run --out`` would keep
    (docs/definitions.md#compare-records)."""

    held = [n for n in (MANIFEST, "fleet.parquet") if os.path.lexists(os.path.join(out_dir, n))]
    if not held and not is_sweep_dir(out_dir):
        return ""
    what = f"it holds {' and '.join(held)}" if held else "it is a sweep state folder"
    return (f"{out_dir} is a gpu-idle run or sweep output folder ({what}): a comparison is not written among a "
            "run's own files; give --out a folder of its own (e.g. a new one)")


def page_links(text: str, folder: str, at: str) -> str:
    """A medical record's GPU page links (``[name](../gpu-pages/<page>)``) made to point from the folder ``at``
    into the run folder ``folder``'s own ``gpu-pages/`` when the page is there; a page that is not (compare
    renders none; ``gpu-idle report`` writes them) leaves the name unlinked, saying so
    (docs/definitions.md#compare-records)."""

    def link(m) -> str:
        page = os.path.join(folder, PAGES_DIR, m.group(2))
        if os.path.isfile(page):
            return f"[{m.group(1)}]({os.path.relpath(page, at).replace(os.sep, '/')})"
        return f"{m.group(1)} (no GPU page: `gpu-idle report` on {md_text(folder)} writes it)"

    return re.sub(r"\[([^\]]*)\]\(\.\./" + re.escape(PAGES_DIR) + r"/([^)]+)\)", link, text)


#: The comparison folder's record of the files it wrote (:func:`pipeline.store.results.read_manifest`'s format).
COMPARE_MANIFEST = ".compare-manifest.json"


class CompareNotWritten(OSError):
    """A file of the comparison is there and not one gpu-idle compare wrote (or was changed since): nothing
    was written."""


def write_compare(out_dir: str, result: dict, sides: tuple) -> list[str]:
    """Write ``compare.csv``, ``compare.json``, ``compare.html`` (:func:`render_html`, the seed's pages side by side)
    and ``records/<job>.md`` (one stacked page per job pair, :func:`stacked_record`) into ``out_dir``, each atomically (:func:`pipeline.io.write_text`),
    then :data:`COMPARE_MANIFEST` listing them (size and SHA-256). A file it would overwrite must be listed
    there with the bytes it holds (an earlier comparison's); records of an earlier comparison not written
    again are removed, files it never wrote never touched. Returns the paths written.

    Raises:
        CompareNotWritten: a target is there and not the product's (nothing written).
        OSError: a file cannot be written.
    """

    refused = run_folder_reason(out_dir)
    if refused:
        raise CompareNotWritten(refused + "; nothing written")
    records = os.path.join(out_dir, "records")
    texts = {"compare.csv": render_csv(result), "compare.json": json_result(result),
             "compare.html": render_html(result, seed_pages(result, sides))}
    for page in seed_pages(result, sides, records):
        texts[f"records/{record_stem(page['title'])}.md"] = stacked_record(page["title"], page["before"], page["after"])
    owned = (read_manifest(out_dir, COMPARE_MANIFEST) or {"files": {}})["files"]
    foreign = sorted(rel for rel in texts if os.path.lexists(os.path.join(out_dir, rel))
                     and (rel not in owned or not same_file(os.path.join(out_dir, rel), owned[rel])))
    if foreign:
        raise CompareNotWritten(f"{out_dir}: {', '.join(foreign)} there already and not written by gpu-idle compare "
                                "(or changed since): move them away and run again; nothing written")
    drop_manifest(out_dir, claim=list(texts), name=COMPARE_MANIFEST)
    real_dir(os.path.join(out_dir, "records"))
    for rel, text in texts.items():
        write_text(os.path.join(out_dir, rel), text)
    earlier = {rel[len("records/"):]: e for rel, e in owned.items() if rel.startswith("records/")}
    gone = prune(os.path.join(out_dir, "records"), {os.path.basename(r) for r in texts if r.startswith("records/")},
                 earlier)
    kept = {rel: e for rel, e in owned.items() if rel not in texts and rel[len("records/"):] not in gone
            and os.path.lexists(os.path.join(out_dir, rel))}
    write_folder_manifest(out_dir, {**kept, **{rel: file_entry(os.path.join(out_dir, rel)) for rel in texts}}, None,
                          name=COMPARE_MANIFEST)
    return [os.path.join(out_dir, rel) for rel in texts]


def remove_compare(out_dir: str) -> list[str]:
    """Remove what an earlier comparison wrote into ``out_dir`` (the files its :data:`COMPARE_MANIFEST` lists
    that still hold what it lists, then the manifest and the folders left empty); files it never wrote are
    never touched. Returns the removed paths. Raises OSError when one cannot be removed."""

    doc = read_manifest(out_dir, COMPARE_MANIFEST)
    if doc is None:
        return []
    gone = []
    for rel, entry in sorted(doc["files"].items()):
        path = os.path.join(out_dir, rel)
        if entry is not None and same_file(path, entry):
            os.unlink(path)
            gone.append(path)
    os.unlink(os.path.join(out_dir, COMPARE_MANIFEST))
    remove_if_empty(os.path.join(out_dir, "records"))
    remove_if_empty(out_dir)
    return gone


def report_style() -> str:
    """The report's ``<style>`` block, read from its template (``report.html.j2``): the comparison page
    looks like the report with no second copy of its CSS."""
    from .jinja import environment  # jinja2: only the HTML page

    env = environment()
    source = env.loader.get_source(env, "report.html.j2")[0]
    return re.search(r"<style>.*?</style>", source, re.S).group(0)


def _unlinked(text: str) -> str:
    """A seed page's Markdown with its links reduced to their text: compare.html shows the pages' GPU names, the GPU
    pages themselves are linked from each side's records (docs/definitions.md#compare-records)."""

    return re.sub(r"\[((?:[^\]]|\](?!\())*)\]\([^)]*\)", r"\1", text)


def render_html(result: dict, pages: list | None = None) -> str:
    """compare.html: the verdict, the pairing and what changed per job and per GPU pair, in the report's look
    (:func:`report_style`); self-contained, no script. ``pages``: :func:`seed_pages` (links relative to the page's
    folder), shown side by side under each job, before on the left (point 4 of docs/definitions.md#compare-records);
    None: not shown. Names (jobs, GPUs, kernels) break only at their seams (:func:`~pipeline.report.words.name_breaks`);
    a seed page's table wider than its half scrolls in it, its words never cut."""
    from markupsafe import Markup

    from .html import _record_html
    from .jinja import environment
    from .words import name_breaks

    def sfmt(x, n=2, unit=""):
        return signed(x, n, unit)

    def money(x):
        return "-" if missing(x) else usd(x)

    env = environment(fmt=_num, sfmt=sfmt, money=money, smoney=_signed_money, name_breaks=name_breaks)
    return env.get_template("compare.html.j2").render(
        r=result, style=Markup(report_style()), categories=CATEGORIES, floor_text=floor_text, usd_figure=usd_figure,
        rates_note=rates_note, shown_gaps=shown_gaps, place_text=place_text, no_pairs=no_pairs_text(result),
        ratio_withheld=ratio_withheld, per_gpu_withheld=per_gpu_withheld, per_gpu_forced=per_gpu_forced,
        forced_why=forced_why,
        seed=[{"before": Markup(_record_html(_unlinked(p["before"]))), "after": Markup(_record_html(_unlinked(p["after"])))}
              for p in pages] if pages else None)


__all__ = ["render_csv", "render_markdown", "render_text", "render_html", "json_result", "gate_lines", "stacked_record",
           "write_compare", "remove_compare", "run_folder_reason", "page_links", "dollars_line", "no_pairs_text",
           "CompareNotWritten", "COMPARE_MANIFEST"]
