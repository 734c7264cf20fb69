"""One self-contained HTML page per analysed GPU, for the engineer: ``<report folder>/gpu-pages/<stem>.html``.

The page is rendered from the GPU's stored JSON alone (``gpus/<stem>.json``: its ``_summary``,
``timeline``, ``roster`` and ``device_roster``; :mod:`pipeline.fleet.outputs`), so ``gpu-idle report``
can write it from any run folder or sweep night, beside the report that links it. It shows:

* the GPU's numbers (idle, copy-only, dark, category shares, cost, window rule, iterations; the
  communication split when the row has it);
* a timeline of the GPU in and around its window (:func:`timeline_view`,
  :func:`pipeline.report.plots.gpu_lanes`): one lane per stream, one per copy direction, the
  device-level gaps by category, the iterations (the excluded ones with their reason), the window's edges;
* the rosters as tables (:func:`gap_rows`): each gap's start in seconds from the capture start (the
  Nsight Systems GUI timeline's zero; for a PyTorch profiler trace the start of its profiler span), in
  seconds on the report's clock (its ns / 10⁹: the medical record's clock, what ``--trim`` takes) and in
  ns on the report's own clock (:func:`clock_words`), width, category, kernels around it, the CUDA API
  calls by overlapped time, the copies in it and the NVTX range it falls in; the gaps beyond the
  roster are counted with their total (:func:`more_gaps`);
* the iterations around the window (:func:`iteration_rows`): each one's start on both clocks, its GPU
  extent, its length to the next iteration's start (what the outlier test compares), that length over
  the median the test used, and kept or why not.

A GPU with 10,000 gaps gives a small page: the JSON holds capped lanes and the top gaps only, and
the drawing merges what lies closer than its resolution (:data:`RESOLUTION`). Same Content-Security-
Policy as the report: inline styles and SVG only, no script, nothing fetched.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os

import jinja2
import matplotlib
from jinja2 import Environment
from markupsafe import Markup

from ..analysis import diagnosis, fixfirst
from ..analysis.meter import FEW_PERIODS_PER_GPU
from ..analysis.window import rule_name as window_rule_name
from ..code_keys import rendered_code
from ..fleet.outputs import PAGES_DIR, gpu_page_name
from ..io import OutputError, file_entry, not_to_overwrite, prune, real_dir, remove_if_empty, same_file, write_text
from ..kinds import is_trace
from ..load.integrity import ROWS_START_WORDS
from ..model import CATEGORIES, CAVEATS
from ..schema import source_says_assumed
from ..store.results import read_manifest
from . import plots
from .jinja import environment
from .medical import short_model, timeline_s
from .rendered import in_pages, record, record_name
from .words import NOT_IDLE, PRICED_LIKE_IDLE, for_pages, ms, name_breaks, recoverable_lines, secs, startup_cut_text

#: Spans of one colour closer than (context length / RESOLUTION) are drawn as one: the page's
#: timeline holds at most about this many bars per lane and colour, however many gaps the GPU has.
RESOLUTION = 2000
#: Device gaps numbered on the timeline (the first rows of the device roster).
NUMBERED = 10
#: CUDA API calls and copies listed per gap (the others are counted).
CALLS_SHOWN = 5
#: Iterations listed in the page's table (the others are counted).
ITERATIONS_SHOWN = 100
#: Kernel names longer than this are cut in the tables (the full name on hover).
NAME_CHARS = 90
#: What the seconds count from when the GPU's JSON does not hold the capture start (older outputs).
NO_CAPTURE_START = "the report's clock (its ns / 10⁹): this GPU's JSON predates the capture start"
#: ... and when it holds none because the report states none and has no event to take it from.
UNKNOWN_CAPTURE_START = "the report's clock (its ns / 10⁹): the report states no capture start"
#: How the page names the report's clock and its timeline's zero, by the report's format
#: (:func:`clock_words`): ``noun`` of the ns column and clock, ``zero`` what the seconds count from,
#: ``axis`` the timeline's x label.
CLOCK_WORDS = {
    "export": {"noun": "export", "zero": "the zero of the Nsight Systems timeline",
               "axis": "seconds from the capture start (as the Nsight Systems timeline shows them)",
               "gui": " (what the Nsight Systems GUI's timeline shows)"},
    "trace": {"noun": "trace", "zero": "when the PyTorch profiler started recording this trace",
              "axis": "seconds from the capture start (the PyTorch profiler's span)", "gui": ""},
}


# ---- small pure helpers ---------------------------------------------------------------------

def merge_close(spans, tol: float) -> list[list]:
    """``spans`` (``[[start, end], ...]``, sorted by start) with every hole of at most ``tol``
    closed and every span at least ``tol`` wide: what a drawing of resolution ``tol`` shows."""
    out: list[list] = []
    for a, b in spans:
        b = max(b, a + tol)
        if out and a - out[-1][1] <= tol:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def since(ns: int, zero: int) -> str:
    """Export ns as seconds from ``zero`` (the capture start), rounded to the µs: ``120.525546 s``."""
    return timeline_s(int(ns) - int(zero))


def human_bytes(n: int) -> str:
    """Bytes for people, binary units: ``512 B``, ``4.0 KiB``, ``160.0 MiB``, ``1.5 GiB``."""
    n = int(n)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"


def more_gaps(count, total_ns, roster: list[dict]) -> tuple[int, int]:
    """``(gaps, ns)`` beyond the roster: the summary's ``count`` and ``total_ns`` of every gap minus
    the roster's own (the roster is the head of the same gaps, so both are exact)."""
    return int(count or 0) - len(roster), int(total_ns or 0) - sum(int(g["length_ns"]) for g in roster)


def capture_zero(timeline: dict) -> tuple[int, str]:
    """``(zero ns, where it comes from)``: the timeline's capture start when the JSON holds it, else 0
    and :data:`NO_CAPTURE_START` (a JSON written before it existed) or :data:`UNKNOWN_CAPTURE_START`
    (the report gave none)."""
    start = timeline.get("capture_start_ns")
    if start is None:
        return 0, UNKNOWN_CAPTURE_START if "capture_start_ns" in timeline else NO_CAPTURE_START
    return int(start), f"{timeline.get('capture_start_source') or 'capture start'} = {int(start)} ns"


#: The export's words when its timeline zero is its own rows' start, not the capture start it states
#: (:data:`pipeline.load.integrity.ROWS_START`): the Nsight Systems timeline counts from the stated start.
ROWS_ZERO_WORDS = {"zero": "the export's first rows, not the zero of the Nsight Systems timeline (which counts from "
                           "the capture start the export states, after those rows)",
                   "axis": "seconds from the export's first rows (the Nsight Systems timeline counts from the stated "
                           "capture start)", "gui": ""}


def clock_words(report: str, zero_source: str = "") -> dict:
    """:data:`CLOCK_WORDS` of the report at path or URL ``report``: ``trace`` for a PyTorch profiler
    trace (its input kind by name: :func:`pipeline.kinds.is_trace`), else ``export``."""

    if is_trace(str(report)):
        return CLOCK_WORDS["trace"]
    if str(zero_source).startswith(ROWS_START_WORDS):
        return {**CLOCK_WORDS["export"], **ROWS_ZERO_WORDS}
    return CLOCK_WORDS["export"]


# ---- the timeline picture -------------------------------------------------------------------

def _seconds(spans, zero: int, tol: float) -> list[list]:
    """Export-ns spans as seconds from ``zero``, merged to the resolution ``tol`` (s)."""
    return merge_close([[(int(a) - zero) / 1e9, (int(b) - zero) / 1e9] for a, b in spans], tol)


def _lanes_of(timeline: dict) -> list[dict]:
    """The JSON's lanes, or for an older JSON without them one lane of the kernel union in W."""
    if "lanes" in timeline:
        return timeline["lanes"]
    return [{"label": "all streams", "kind": "stream", "runs": timeline.get("busy", [])}]


def _marks_of(timeline: dict) -> list:
    """The JSON's iterations ``[[index, start, end, reason], ...]`` (older JSON: its kept ones)."""
    if "marks" in timeline:
        return timeline["marks"]
    return [[i, a, b, ""] for i, (a, b) in enumerate(timeline.get("iterations", []))]


def timeline_view(doc: dict, title: str = "") -> dict:
    """The plain values :func:`pipeline.report.plots.gpu_lanes` draws (seconds from the capture start); ``title``
    drawn above it (the page's picture has none: the page titles it with the GPU's one name, which needs the
    fleet, while the picture is drawn by the worker that wrote the GPU's JSON, :func:`draw_timelines`).

    Every span list is merged to the drawing's resolution (context length / :data:`RESOLUTION`):
    the kernels of each lane, the device gaps per category, the stream roster's gaps per lane and
    category, so the picture's size does not grow with the number of gaps.
    """
    tl = doc.get("timeline") or {}
    zero, _ = capture_zero(tl)
    window = tl["window"]
    context = tl.get("context") or window
    tol = (int(context[1]) - int(context[0])) / 1e9 / RESOLUTION
    by_cat: dict = {}
    for a, b, cat in tl.get("gaps", []):
        by_cat.setdefault(cat, []).append([a, b])
    lane_gaps: dict = {}
    for g in doc.get("roster", []):
        lane_gaps.setdefault(f"{g['pid']}:{g['stream_id']}", {}).setdefault(g["category"], []).append(
            [g["start_ns"], g["end_ns"]])
    lanes = [{"label": lane["label"], "kind": lane["kind"], "direction": lane.get("direction", ""),
              "spans": _seconds(lane["runs"], zero, tol),
              "gaps": {c: _seconds(sorted(s), zero, tol) for c, s in sorted(lane_gaps.get(lane["label"], {}).items())}}
             for lane in _lanes_of(tl)]
    return {
        "title": title, "xlabel": clock_words(doc.get("report", ""), tl.get("capture_start_source", ""))["axis"],
        "context": [(int(context[0]) - zero) / 1e9, (int(context[1]) - zero) / 1e9],
        "window": [(int(window[0]) - zero) / 1e9, (int(window[1]) - zero) / 1e9],
        "marks": [[i, (int(a) - zero) / 1e9, (int(b) - zero) / 1e9, r] for i, a, b, r in _marks_of(tl)],
        "gaps": {c: _seconds(s, zero, tol) for c, s in sorted(by_cat.items())},
        "numbers": [[(int(g["start_ns"]) + int(g["length_ns"]) / 2 - zero) / 1e9, n]
                    for n, g in enumerate(doc.get("device_roster", [])[:NUMBERED], 1)],
        "lanes": lanes,
    }


# ---- the tables -----------------------------------------------------------------------------

def _cut(name: str) -> str:
    name = str(name)
    return name if len(name) <= NAME_CHARS else name[:NAME_CHARS - 1] + "…"


def _copy_text(c: dict) -> str:
    """One copy of a gap: ``HtoD 160.0 MiB pageable, 6.070 ms in the gap`` (a memcpy by its direction,
    ``pageable`` / ``pinned`` / ``unknown`` for its host side), ``memset 1.0 MiB, ...``."""
    parts = [c.get("direction") or c.get("what", "copy"), human_bytes(c.get("bytes", 0))]
    if c.get("host_memory"):
        parts.append(c["host_memory"])
    text = " ".join(parts)
    return text + (f", {ms(c['overlap_ns'])} in the gap" if "overlap_ns" in c else "")


def _waited_text(w: dict | None) -> str:
    """What a sync gap's call waited for (``sync_waited_for``), for people; ``""`` when nothing."""
    if not w:
        return ""
    if w.get("what") == "kernel":
        return f"kernel {_cut(w.get('name', ''))}"
    return w.get("what", "copy") + " " + _copy_text({k: v for k, v in w.items() if k != "overlap_ns"})


def gap_rows(roster: list[dict], zero: int, anchor: str) -> list[dict]:
    """The rows of a roster table: ``id`` (``<anchor>-<start_ns>``, or with pid and stream for
    per-stream gaps), ``stream``, ``start_s`` (:func:`since` ``zero``), ``clock_s`` (seconds on the
    report's clock: export ns / 10⁹, as the medical record and ``--trim``), ``start_ns``, ``length_ns``,
    ``category``, kernels ``before`` / ``after`` (cut to :data:`NAME_CHARS`, full text in ``*_full``),
    ``calls`` and ``copies`` (texts, the first :data:`CALLS_SHOWN`, the rest counted in ``*_more``),
    ``copy_count`` and ``copy_bytes`` (every copy overlapping the gap), ``copy_overlap_ns``, ``nvtx``, ``waited``."""
    rows = []
    for n, g in enumerate(roster, 1):
        stream = "" if int(g["pid"]) < 0 else f"{g['pid']}:{g['stream_id']}"
        calls = g.get("attribution", [])
        copies = g.get("copies", [])
        rows.append({
            "n": n, "id": f"{anchor}-{g['start_ns']}" if not stream else f"{anchor}-{g['pid']}-{g['stream_id']}-{g['start_ns']}",
            "stream": stream, "start_s": since(g["start_ns"], zero), "clock_s": timeline_s(g["start_ns"]),
            "start_ns": int(g["start_ns"]),
            "length_ns": int(g["length_ns"]), "category": g["category"],
            "before": _cut(g["kernel_before"]), "before_full": g["kernel_before"],
            "after": _cut(g["kernel_after"]), "after_full": g["kernel_after"],
            "calls": [f"{c['api']} {ms(c['overlap_ns'])}" for c in calls[:CALLS_SHOWN]],
            "calls_more": max(len(calls) - CALLS_SHOWN, 0),
            "copies": [_copy_text(c) for c in copies[:CALLS_SHOWN]],
            "copies_more": int(g.get("copy_count", len(copies))) - len(copies[:CALLS_SHOWN]),
            "copy_count": int(g.get("copy_count", len(copies))), "copy_bytes": int(g.get("copy_bytes", 0)),
            "copy_overlap_ns": int(g.get("copy_overlap_ns", 0)),
            "nvtx": g.get("nvtx_range", ""), "waited": _waited_text(g.get("sync_waited_for")),
        })
    return rows


def _num(summary: dict, key: str, default=0):
    value = summary.get(key)
    return default if value is None else value


def category_rows(summary: dict) -> list[dict]:
    """Per category (the application's, then the caveats): ``ns``, ``pct`` of W, ``usd`` the category's idle in USD
    per month (``fix_<c>_usd_per_month``, None for caveats or an older row), ``back`` what a fix wins back per month
    (docs/definitions.md#diagnosis): the part the evidence bounds (:func:`pipeline.analysis.fixfirst.gpu_recoverable`,
    as the fix-first list and the diagnosis block say it) where it does, else ``usd``; ``bounded`` whether it does;
    ``apart`` (a caveat)."""
    parts = {p["category"]: p for p in fixfirst.gpu_recoverable(summary, diagnosis.of_text(summary.get("diagnosis")))}
    rows = []
    for cat in (*CATEGORIES, *CAVEATS):
        usd = summary.get(f"fix_{cat}_usd_per_month")
        part = parts.get(cat)
        bounded = bool(part and recoverable_lines([part]))
        rows.append({"category": cat, "ns": int(_num(summary, f"cat_{cat}_ns")),
                     "pct": float(_num(summary, f"cat_{cat}_pct", 0.0)), "usd": usd,
                     "back": part["fix_wins_back_usd_per_month"] if bounded else usd, "bounded": bounded,
                     "apart": cat in CAVEATS})
    return rows


def lane_rows(timeline: dict) -> list[dict]:
    """The lanes table: label, kind, kernels or copies and bytes in W, busy ns in W, per-stream gaps
    and their ns in W, runs drawn of runs total."""
    return [{"label": lane["label"], "kind": lane["kind"], "kernels": lane.get("kernels"),
             "copies": lane.get("copies"), "bytes": lane.get("bytes"), "busy_ns": lane.get("busy_ns"),
             "gaps": lane.get("gaps"), "gap_ns": lane.get("gap_ns"), "drawn": len(lane.get("runs", [])),
             "total": lane.get("runs_total", len(lane.get("runs", [])))}
            for lane in timeline.get("lanes", [])]


def iteration_rows(timeline: dict, zero: int) -> tuple[list[dict], int]:
    """The iterations table (at most :data:`ITERATIONS_SHOWN`) and how many more there are.

    Each row: ``index`` (the iteration's number), ``start_s`` (:func:`since` ``zero``), ``clock_s`` (seconds
    on the report's clock, export ns / 10⁹), ``start_ns``, ``extent_ns`` (its GPU extent: first kernel start
    to last kernel end), ``length_ns`` (its length for the stability test, from the extent's start to the
    next iteration's start or its own end when later: the JSON's ``iteration_lengths``; None in a JSON
    written before them), ``ratio`` (``length_ns`` / the JSON's ``iteration_length_median_ns``, None
    without), ``reason`` (``""`` when kept)."""
    marks = _marks_of(timeline)
    total = int(timeline.get("marks_total", len(marks)))
    lengths = {int(n): int(x) for n, x in timeline.get("iteration_lengths") or []}
    median = timeline.get("iteration_length_median_ns")
    rows = []
    for i, a, b, r in marks[:ITERATIONS_SHOWN]:
        length = lengths.get(int(i))
        rows.append({"index": i, "start_s": since(a, zero), "clock_s": timeline_s(a), "start_ns": int(a),
                     "extent_ns": int(b) - int(a), "length_ns": length,
                     "ratio": length / int(median) if length is not None and median else None, "reason": r})
    return rows, total - len(rows)


# ---- the page -------------------------------------------------------------------------------

COMM_COLUMNS = ("comm_ns", "comm_overlapped_ns", "comm_exposed_ns", "comm_exposed_pct", "comm_exposed_usd_per_month")


@functools.lru_cache(maxsize=None)
def _env() -> Environment:
    """The page's Jinja environment, made once per process: it keeps its compiled templates
    (compiling the template again for each of a fleet's GPU pages cost more than drawing it)."""
    env = environment(ms=ms, secs=secs, bytes=human_bytes, since=since, clock=timeline_s, for_pages=for_pages,
                      name_breaks=name_breaks)
    env.globals["startup_cut_text"] = startup_cut_text
    env.globals["implausible"] = fixfirst.implausible
    env.globals["rule_name"] = window_rule_name
    env.globals["not_idle"], env.globals["priced_like_idle"] = NOT_IDLE, PRICED_LIKE_IDLE
    return env


def page_names(doc: dict) -> tuple[str, str]:
    """``(GPU name, report file name)`` of the GPU's JSON ``doc``, as the page and its timeline's title
    show them (e.g. ``("H100 GPU-0e66...", "job000.sqlite")``)."""
    return (f"{short_model((doc.get('_summary') or {}).get('gpu_model'))} {doc['gpu_key']}",
            os.path.basename(str(doc["report"]).rstrip("/")))


def rate_assumed(s: dict) -> bool:
    """Whether a GPU's ``_summary`` ``s`` was priced at an assumed rate, the default model's (no rate-card entry of
    its own, docs/definitions.md#cost): its ``rate_assumed``, or for a summary written before that column what its
    ``rate_source`` says; False for an unpriced GPU (it has no dollars to mark)."""
    if s.get("unpriced"):
        return False
    return bool(s["rate_assumed"]) if "rate_assumed" in s else source_says_assumed(s.get("rate_source"))


def rate_note(s: dict) -> str:
    """What the cost card says beside the rate model of a GPU's ``_summary`` ``s`` when it had no rate-card
    entry of its own (docs/definitions.md#cost): ``assumed: 'X' is not on the card`` (or ``… the model is
    not named``), ``unpriced: …``; empty for a GPU priced at its own entry. A summary written before the
    ``rate_assumed`` column: what its ``rate_source`` says."""
    if not (rate_assumed(s) or s.get("unpriced")):
        return ""
    model = s.get("gpu_model") or ""
    why = f"model {model} is not on the card" if model else "the GPU model is not named"
    return f"{'unpriced' if s.get('unpriced') else 'assumed'}: {why}"


def same_rosters(device: list[dict], streams: list[dict], device_more: tuple, streams_more: tuple) -> bool:
    """Whether the per-stream roster says nothing the device-level one does not (rows of :func:`gap_rows`
    and their :func:`more_gaps`): the same gaps, start, width and category, in the same order, with as many
    left out. So it is on a GPU whose kernels ran on one stream: its page says so instead of repeating
    the rows (docs/outputs.md#reports-for-people)."""
    def key(rows):
        return [(g["start_ns"], g["length_ns"], g["category"]) for g in rows]
    return bool(device) and key(device) == key(streams) and tuple(device_more) == tuple(streams_more)


def prescription(summary: dict, role: dict | None = None) -> dict | None:
    """What the page prescribes for the GPU's largest category (``main_category``) and on what evidence
    (docs/outputs.md#reports-for-people): ``{"category", "pct", "remedy", "rules"}``, the remedy its own findings give
    (:func:`pipeline.analysis.fixfirst.entry_remedy` over this GPU alone: the rule that fired, else the generic
    remedy saying why, or archived) and the rules it rests on; None when the GPU has no application idle.

    ``role`` (:func:`_role_links`): a remedy that asks to look at the straggler first names the GPUs it waits on
    (its ``leads``: ``look at the straggler H100 #13 750df4f4 first``; none: that no GPU captured here stands out,
    :func:`pipeline.analysis.diagnosis.name_straggler`). On the page of the GPU its job waits on (role ``straggler``
    or ``late rank``) the remedy is its own, never one sending the reader back to it
    (:func:`pipeline.analysis.fixfirst.own_remedy`)."""
    main = str(summary.get("main_category") or "")
    if main not in fixfirst.fixable() or not summary.get(f"cat_{main}_ns"):
        return None
    findings = diagnosis.of_text(summary.get("diagnosis"))
    leads = list((role or {}).get("leads") or [])
    if role and role["role"] in ("straggler", "late rank"):
        remedy = fixfirst.own_remedy(main, findings, leads)
        findings = [f for f in findings if f["rule"] not in fixfirst.ROLE_RULES]
    else:
        remedy = diagnosis.name_straggler(role_line(fixfirst.entry_remedy(main, [findings]), role), [])
    rules = [f["rule"] for f in fixfirst.prescribing(main, findings)]
    return {"category": main, "pct": float(_num(summary, f"cat_{main}_pct", 0.0)), "remedy": remedy, "rules": rules[:1]}


def untrusted_marker(s: dict) -> dict | None:
    """How a GPU page marks its figures when its capture is not trusted (``_summary`` ``s`` of tier ``toy`` or
    ``low``, docs/definitions.md#confidence-tiers): ``{"tier", "marker": "toy capture: not to be trusted" | "low
    confidence: not to be trusted", "title": the shortfalls (``confidence_note``)}``; None for a trusted one (or a
    summary written before the tiers that is not ``low_confidence``)."""
    tier = str(s.get("confidence_tier") or "")
    if tier not in ("toy", "low"):
        if tier or not s.get("low_confidence"):
            return None
        tier = "low"
    what = "toy capture" if tier == "toy" else "low confidence"
    return {"tier": tier, "marker": f"{what}: not to be trusted",
            "title": str(s.get("confidence_note") or f"tier {tier}")}


def page_context(doc: dict, links: dict, name: str | None = None, role: dict | None = None) -> dict:
    """Everything the page template shows, from the GPU's JSON ``doc``. ``links``: ``report`` (href of
    the report), ``record`` (href of the job's medical record, or None). ``name``: the GPU's display
    name (:func:`~pipeline.report.medical.gpu_display_name`, which needs the fleet: the report gives
    it); None: its model and key (:func:`page_names`). ``role``: its role in its job (:func:`_role_links`; None: no
    line). ``picture_title``: the timeline's title, that name and the
    report's file name (``H100 #3 9b5c4f8d in job000.sqlite``)."""
    s = doc.get("_summary") or {}
    tl = doc.get("timeline") or {}
    zero, zero_text = capture_zero(tl)
    own, report_name = page_names(doc)
    name = name or own
    device = gap_rows(doc.get("device_roster", []), zero, "d")
    streams = gap_rows(doc.get("roster", []), zero, "s")
    device_more = more_gaps(s.get("device_gap_count"), s.get("device_gap_ns"), doc.get("device_roster", []))
    streams_more = more_gaps(s.get("gap_count"), s.get("gap_total_ns"), doc.get("roster", []))
    iterations, more_iterations = iteration_rows(tl, zero)
    return {
        "s": s, "doc": doc, "name": name, "gpu_key": doc["gpu_key"], "report_name": report_name, "rate_note": rate_note(s),
        "rate_assumed": rate_assumed(s), "untrusted": untrusted_marker(s),
        "picture_title": f"{name} in {report_name}",
        "same_rosters": same_rosters(device, streams, device_more, streams_more),
        "zero": zero, "zero_text": zero_text, "clock": clock_words(doc["report"], tl.get("capture_start_source", "")),
        "links": links,
        "window": tl.get("window"), "context": tl.get("context"),
        "device": device, "device_more": device_more, "streams": streams, "streams_more": streams_more,
        "categories": category_rows(s), "lanes": lane_rows(tl), "iterations": iterations,
        "more_iterations": more_iterations, "median_ns": tl.get("iteration_length_median_ns"),
        "comm": {k: s[k] for k in COMM_COLUMNS if s.get(k) is not None},
        "colours": plots.CATEGORY_COLOURS, "resolution": RESOLUTION, "diagnosis": diagnosis_view(s, role),
        "role": role, "prescription": prescription(s, role),
        "few_periods": FEW_PERIODS_PER_GPU,
    }


def role_line(line: str, role: dict | None) -> str:
    """A diagnosis ``line`` on a GPU's page with its job's role said (``role``: :func:`_role_links`' entry): a line
    asking to "look at the straggler first" on the straggler's or the late rank's own page says it is this GPU
    (issue 45: H100 #13's own page sent the reader to "the straggler"); on a GPU waiting on them it names them
    (their ``leads``); unchanged otherwise."""
    if diagnosis.STRAGGLER_FIRST not in line or not role:
        return line
    if role.get("role") in ("straggler", "late rank"):
        own = f"this GPU is the {role['role']} its job's other GPUs wait for: fix its own idle first"
        return line.replace(diagnosis.CANNOT_FIX_ALONE, own).replace(diagnosis.STRAGGLER_FIRST, own)
    leads = list(role.get("leads") or [])
    return line.replace(diagnosis.STRAGGLER_FIRST, f"look at {' and '.join(leads)} first") if leads else line


def diagnosis_view(summary: dict, role: dict | None = None) -> dict:
    """The page's diagnosis block from a GPU's ``_summary`` (docs/definitions.md#diagnosis): ``prescribed`` and
    ``archived`` (:func:`pipeline.analysis.diagnosis.split`), each finding with its ``line`` and its rule's ``name`` in
    words (:func:`pipeline.analysis.diagnosis.rule_name`: the page never prints a rule's id); ``recoverable``: what a
    fix wins back where the evidence bounds it (:func:`pipeline.report.words.recoverable_lines`, as the fix-first
    list says it); all empty for a summary without the column. ``role`` (:func:`_role_links`): each line says the
    GPU's own role where it asks to look at the straggler first (:func:`role_line`), and so does its ``remedy``."""
    findings = diagnosis.of_text(summary.get("diagnosis"))
    prescribed, archived = diagnosis.split(findings)
    return {"prescribed": [dict(f, line=role_line(diagnosis.line(f), role), name=diagnosis.rule_name(f),
                                **({"remedy": role_line(str(f["remedy"]), role)} if f.get("remedy") else {}))
                           for f in prescribed],
            "archived": [dict(f, line=diagnosis.line(f), name=diagnosis.rule_name(f)) for f in archived],
            "recoverable": recoverable_lines(fixfirst.gpu_recoverable(summary, findings))}


def timeline_svg(doc: dict, plot_cache: str | None = None) -> str:
    """The page's timeline (an ``<svg>`` string, :func:`pipeline.report.plots.gpu_lanes`, untitled: the page
    titles it, :func:`page_context`'s ``picture_title``) of the GPU's JSON ``doc``, "" when it has no window; ``plot_cache``: where it is kept by its inputs
    (:func:`pipeline.report.plots.cached`), None draws it."""
    if not (doc.get("timeline") or {}).get("window"):
        return ""
    # no title in the picture: it is drawn from the JSON alone (ahead, by the worker), and the GPU's one name
    # needs its number in the job; the page puts that name above it (picture_title)
    return plots.cached(plot_cache, plots.gpu_lanes, timeline_view(doc))


def draw_timelines(doc_paths: list[str], plot_cache: str) -> int:
    """Draw the timeline of each GPU JSON file in ``doc_paths`` into ``plot_cache`` (:func:`timeline_svg`),
    ahead of the report that shows it: what a worker does after writing a report's files. A file
    that cannot be read or drawn is skipped (the report draws it again and says what is wrong).
    Returns how many were drawn or found drawn."""
    done = 0
    for path in doc_paths:
        try:
            with open(path, encoding="utf-8") as fh:
                timeline_svg(json.load(fh), plot_cache)
            done += 1
        except Exception:  # noqa: BLE001 - only a head start: the report draws (and fails) for real
            continue
    return done


def render_gpu_page(doc: dict, links: dict, plot_cache: str | None = None, name: str | None = None,
                    role: dict | None = None) -> str:
    """The GPU's page (a complete HTML document) from its JSON ``doc``; ``links``, ``name`` and ``role``: see
    :func:`page_context`; ``plot_cache``: see :func:`timeline_svg`."""
    ctx = page_context(doc, links, name, role)
    return _env().get_template("gpu.html.j2").render(svg=Markup(timeline_svg(doc, plot_cache)), **ctx)


def page_from_json(text: str, links: dict, name: str | None = None, role: dict | None = None,
                   plot_cache: str | None = None) -> str:
    """:func:`render_gpu_page` of the GPU JSON ``text`` (what the page cache keys on)."""
    return render_gpu_page(json.loads(text), links, plot_cache, name, role)


def _role_links(role: dict | None) -> dict | None:
    """``role`` (:func:`~pipeline.report.summary.gpu_roles`) with each GPU it names as ``{"name", "href"}``: the
    href of that GPU's page beside this one (plain values: a page's cache key)."""
    if not role:
        return None
    return {"role": role["role"], "text": role["text"], "leads": list(role.get("leads") or []),
            "others": [{"name": n, "href": gpu_page_name(r, g)} for r, g, n in role["others"]]}


@functools.lru_cache(maxsize=1)
def _page_code() -> str:
    """What a page depends on besides its JSON and links: the code and templates that render it
    (:func:`pipeline.code_keys.rendered_code`) and the versions of matplotlib and Jinja."""

    return f"{rendered_code()}-{matplotlib.__version__}-{jinja2.__version__}"


class PagesIncomplete(OSError):
    """Writing the GPU pages failed part-way (a full disk): ``written`` of ``total`` pages are in ``folder``
    (each whole: they are written atomically); ``cause``: the error."""

    def __init__(self, folder: str, written: int, total: int, cause: OSError):
        super().__init__(cause.errno, cause.strerror or str(cause))
        self.folder, self.written, self.total, self.cause = folder, written, total, cause


def write_gpu_pages(rows: list[tuple[str, str, str | None]], docs, out_path: str,
                    plot_cache: str | None = None, display=None, roles=None, made_of: str | None = None) -> dict:
    """Write one page per GPU into ``gpu-pages/`` beside ``out_path`` (the report), atomically (a page
    whose file already holds the same text is left alone), and remove the pages there that an earlier
    report wrote (the folder's record lists them: :func:`~pipeline.report.rendered.record_name`) and this
    one does not. Files there that no record of ours lists are never touched. The record then lists this
    report's pages (size, SHA-256) and claims the report file itself (its content is recorded by
    :func:`~pipeline.report.rendered.record_report`); it claims them before any is written, so a report
    killed half-way leaves them known as ours.

    Args:
        rows: ``(report, gpu_key, record anchor or None)`` of the analysed GPUs.
        docs: ``callable(report, gpu_key) -> str | None``, the text of the GPU's JSON (None: no page).
        out_path: the report's path; pages link back to it (``../<its name>``) and to the job's
            medical record there (``../<its name>#<anchor>``).
        plot_cache: see :func:`render_gpu_page`; the whole page is kept there too, by the JSON's text,
            its links and the pipeline's code (:func:`page_from_json`): a night whose GPUs did not
            change renders none of their pages again.
        display: ``(report, gpu_key) -> display name`` (:func:`~pipeline.report.medical.gpu_names`); a GPU
            it lacks is named by its model and key.
        roles: ``(report, gpu_key) -> role`` (:func:`~pipeline.report.summary.gpu_roles`): the GPU's role in its
            job, which needs the fleet; a GPU it lacks has no role line. ``display`` and ``roles`` may be given as
            callables returning them: called only when a page is rendered.
        made_of: a digest of everything the pages are made of besides the code (their JSON texts, names, roles and
            links: :func:`pipeline.report.html.write_pages` derives it from the files the folder's manifest vouches
            for), or None (unknown). With ``plot_cache``, the pages rendered from it are recorded there
            (:func:`pages_entry`): when the folder already holds exactly those pages (the record's size and SHA-256,
            checked against the files), none is rendered, read or written again.
    Returns:
        ``(report, gpu_key) -> href`` of every page written, relative to the report's folder.
    Raises:
        OutputError: ``gpu-pages/`` is a symbolic link or not a folder, or holds the pages of another
            report file beside it (one that still exists: its links would break), or the report file or a
            page this report writes is there already and no record of ours proves it holds what the
            product wrote (a person's file: never overwritten, nothing is written).
        PagesIncomplete: a page could not be written (the pages before it are in place).
    """

    report_dir = os.path.dirname(os.path.abspath(out_path))
    created = not os.path.lexists(os.path.join(report_dir, PAGES_DIR))
    folder = real_dir(os.path.join(report_dir, PAGES_DIR))
    report_name = os.path.basename(out_path)
    back = "../" + report_name
    name = record_name(report_dir)
    doc = read_manifest(report_dir, name)
    other = (doc or {}).get("report")
    if other and other != report_name and os.path.isfile(os.path.join(report_dir, other)):
        # gpu-pages/ holds one report's pages: this one's would replace them under the other's links.
        raise OutputError(f"{folder}: holds the GPU pages of another report beside it ({other}), which link "
                          f"to them; render {report_name} into another folder, or remove {other} first")
    owned = dict(doc["files"]) if doc else {}
    entry = pages_entry(report_name, made_of) if plot_cache is not None and made_of is not None else None
    known = _known_pages(plot_cache, entry) if entry is not None else None
    # The pages rendering from the same inputs wrote (which rows have one: no JSON read), when the folder holds
    # every one of them as its record lists it and as that rendering recorded it (each file checked): none is
    # rendered, read or written again.
    todo = [] if known is None else [(report, gpu_key, anchor, None) for report, gpu_key, anchor in rows
                                     if gpu_page_name(report, gpu_key) in known]
    held = known is not None and len(todo) == len(known) and all(
        owned.get(f"{PAGES_DIR}/{n}") == e and same_file(os.path.join(folder, n), e) for n, e in known.items())
    if not held:
        todo = [(report, gpu_key, anchor, text) for report, gpu_key, anchor in rows
                if (text := docs(report, gpu_key)) is not None]
    names = [gpu_page_name(report, gpu_key) for report, gpu_key, _, _ in todo]
    claims = {f"{PAGES_DIR}/{n}": None for n in names}
    foreign = sorted(rel for rel in ([report_name] if held else [*claims, report_name])
                     if os.path.lexists(os.path.join(report_dir, rel))
                     and not (rel in owned and same_file(os.path.join(report_dir, rel), owned[rel])))
    if foreign:   # a person's file under a name this report writes: never overwritten, nothing written
        if created:
            remove_if_empty(folder)
        raise not_to_overwrite(report_dir, foreign, writer="report")
    record(report_dir, name, {**owned, **claims, report_name: None}, doc, report_name)
    hrefs = {(report, gpu_key): f"{PAGES_DIR}/{page_name}" for (report, gpu_key, _, _), page_name in zip(todo, names)
             } if held else {}
    if not held:
        display, roles = (display() if callable(display) else display), (roles() if callable(roles) else roles)
    try:
        for (report, gpu_key, anchor, text), page_name in ([] if held else zip(todo, names)):
            links = {"report": back, "record": f"{back}#{anchor}" if anchor else None}
            path = os.path.join(folder, page_name)
            page = plots.cached(plot_cache, page_from_json, text, links, (display or {}).get((report, gpu_key)),
                                _role_links((roles or {}).get((report, gpu_key))), code=_page_code(), suffix=".html",
                                inner=True)
            if _write_if_changed(path, page):
                _shareable(path)
            hrefs[(report, gpu_key)] = f"{PAGES_DIR}/{page_name}"
    except OSError as exc:
        raise PagesIncomplete(folder, len(hrefs), len(todo), exc) from exc
    prune(folder, set(names), in_pages(owned))
    kept = {rel: e for rel, e in owned.items() if not rel.startswith(PAGES_DIR + "/") and rel != report_name}
    pages = ({f"{PAGES_DIR}/{n}": known[n] for n in names} if held
             else {rel: file_entry(os.path.join(report_dir, rel)) for rel in claims})
    record(report_dir, name, {**kept, **pages, report_name: None}, doc, report_name)
    if entry is not None and not held:
        plots.keep(plot_cache, entry, json.dumps({n: pages[f"{PAGES_DIR}/{n}"] for n in names}, sort_keys=True))
    return hrefs


def pages_entry(report_name: str, made_of: str) -> str:
    """The plot cache entry (a file name) recording which GPU pages, of what size and SHA-256, rendering the pages of
    the report file ``report_name`` from ``made_of`` (see :func:`write_gpu_pages`) by this code wrote."""
    key = json.dumps(["gpu-pages", report_name, made_of, _page_code()])
    return hashlib.sha256(key.encode()).hexdigest() + ".pages.json"


def _known_pages(plot_cache: str, entry: str) -> dict | None:
    """``page name -> {"size", "sha256"}`` as the plot cache entry ``entry`` records (:func:`pages_entry`); None when
    there is none (or it fails its check, or is malformed)."""
    text = plots.kept(plot_cache, entry)
    try:
        doc = json.loads(text) if text is not None else None
    except ValueError:
        return None
    if not isinstance(doc, dict) or not all(isinstance(e, dict) and set(e) == {"size", "sha256"} for e in doc.values()):
        return None
    return doc


def _write_if_changed(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` atomically unless the file already holds exactly it (a night made
    from an earlier one keeps its hard-linked pages). Returns whether it wrote."""
    try:
        with open(path, encoding="utf-8") as fh:
            if fh.read() == text:
                return False
    except (OSError, UnicodeDecodeError):
        pass
    write_text(path, text)
    return True


def _shareable(path: str) -> None:
    """Make a written page readable as any new file would be (write_text's temporary file is 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)
