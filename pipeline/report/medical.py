"""The per-job "medical record" page (docs/outputs.md#medical-records).

Line 1: device-level idle % with the per-GPU spread (min and max GPU named).
Line 2: category shares (category time over window time, both summed over the job's GPUs).
Line 2 names the sub-threshold slivers that no category holds (unless the GPU
is launch-bound), so the shares add up to the idle. Line 3: the job's kind with its evidence, the captures'
idle beside the windows' and the share of it the windows leave out, and the start-up wait, apart
(:func:`job_capture`, docs/definitions.md#job-kind). Then the five largest
device-level gaps of the job (time when no stream runs a kernel; per-stream
gaps on a side stream are not idle GPU time): its start in seconds on the report's
clock (column ``start (report clock, s)``: export ns / 10⁹, the clock ``--trim`` takes; not the
Nsight Systems GUI's timeline, which counts from the capture start: the GPU pages give both), the
NVTX range it falls in, width in ms and category, then a link per GPU to its page (``../gpu-pages/<stem>.html``, written beside the report by
``gpu-idle report``: :mod:`pipeline.report.gpu_page`). GPUs have their one display name (model, number in the
job and short id, ``H100 #3 9b5c4f8d``: :func:`gpu_display_name`); the page ends with one
``*[H100 #3 9b5c4f8d]: <gpu_key> in <report file>`` line per GPU (Markdown Extra abbreviations: the HTML
report shows the full key on hover). The idle cost says how many GPUs are unpriced (not in it), and reads
``unpriced`` when none is priced (:func:`idle_cost_line`). After the idle cost, a job
whose collectives ran with no compute beside them gets one line with that exposed communication
(:mod:`pipeline.analysis.overlap`), its share of the windows and its price. With the scheduler's accounting, a
coverage line under the job's figures (:func:`~pipeline.report.teams.record_coverage_text`). Profile text is
escaped (:func:`~pipeline.text.md_text`: Markdown syntax, ``$`` math, control and bidirectional
characters). Deterministic (stable sort keys, fixed number formats), so
the page before and after a fix diffs cleanly.
"""
from __future__ import annotations

import hashlib
import math
import os
from collections import Counter

import numpy as np
import pandas as pd

from ..analysis import collwait, diagnosis, fixfirst
from ..analysis.confidence import TIERS
from ..analysis.cost import assumed_split, models_text, priced_sum, unpriced_models, unpriced_text
from ..analysis.meter import enough_periods, too_few_text, util_pct
from ..analysis.window import rule_name as window_rule_name
from ..analysis.names import NAME_CHARS, gpu_display_name, gpu_names, job_gpu_names, short_gpu_id, short_model  # noqa: F401
from ..fleet.crosswait import ACROSS_FILES
from ..fleet.outputs import PAGES_DIR, gpu_page_name
from ..fleet.reduce import _flag, assumed_text
from ..io import slug, write_text
from ..model import CATEGORIES, CAVEATS, WarningCode
from ..schema import DUPLICATE, JOB_KEY, NOT_ANALYSED, RECORD_GAPS, analysed_rows, conform
from ..text import md_text
from .teams import record_coverage_text
from .words import COMM_OVERLAP, PRICE_ON_PAGES, for_pages, recoverable_lines, secs, startup_cut_text

TOP_GAPS = 5


def _ms(ns) -> str:
    return f"{int(ns) / 1e6:,.3f} ms"


def timeline_s(ns) -> str:
    """Integer ns as seconds with 6 decimals (rounded to the µs, half up), e.g. ``10.599360 s`` for
    10_599_360_207 ns: export ns on the report's clock (what ``--trim`` takes), or ns from the capture
    start (what the Nsight Systems GUI's timeline shows) when given a difference."""
    us = (int(ns) + 500) // 1000
    sign, us = ("-", -us) if us < 0 else ("", us)
    return f"{sign}{us // 1_000_000}.{us % 1_000_000:06d} s"


#: Fleet columns the figures of the wait inside collectives read (:func:`collective_figures`).
COLLECTIVE_COLUMNS = ["collective_ns", "collective_wait_ns", "collective_transfer_ns", "collective_calls",
                      "collective_last_count", "collective_chronic", "collective_p2p", "collective_wait_status",
                      "collective_wait_note", "collective_wait_usd_per_month", "collective_match_basis"]

#: Fleet columns a medical record reads.
RECORD_COLUMNS = ["report", "gpu_key", "gpu_model", "status", "error", "window_ns", "idle_ns", "idle_pct", "window_rule",
                  "straggler", "launch_bound", "device_sliver_ns", "idle_usd_per_month",
                  *[f"cat_{c}_ns" for c in CATEGORIES], *[f"cat_{c}_ns" for c in CAVEATS],
                  *[f"{c}_usd_per_month" for c in CAVEATS], "comm_ns", "comm_exposed_ns", "comm_exposed_usd_per_month",
                  "rate_model", "rate_usd_per_hour", "rate_assumed", "unpriced", "job_kind", "job_kind_source", "capture_ns",
                  "capture_idle_ns", "window_left_out_idle_ns", "window_left_out_idle_pct", "startup_wait_ns", "startup_cut",
                  "graph_capture_ns", "startup_only",
                  "busy_ns", "sample_periods",
                  "sampled_busy_periods", "confidence_tier", "confidence_note", *COLLECTIVE_COLUMNS]


def _ns(value) -> int:
    """An ns column's value, 0 when missing (a fleet table from before the column existed)."""
    return 0 if value is None or pd.isna(value) else int(value)


#: The record's diagnosis lines read the findings and the dollars a fix wins back (docs/definitions.md#diagnosis,
#: :func:`diagnosis_lines`).
RECORD_COLUMNS += ["diagnosis", *[f"fix_{c}_usd_per_month" for c in CATEGORIES if c not in CAVEATS]]
#: ... and the line on copies outside the window (:func:`copies_outside_line`).
RECORD_COLUMNS += ["kernel_count", "copies_outside_count", "copies_outside_ns", "warning_codes"]
RECORD_COLUMNS += ["job_grouped_by", "dist_world_size", "dist_backend", "rank", "scheduler_job"]


def copies_outside_line(ok: list[dict], names: dict) -> str:
    """The record's line on GPUs whose copies run mostly outside their window (their row's
    ``copies-outside-window`` note; docs/definitions.md#copies-outside-the-window), e.g. ``Copies outside the
    window (copies-outside-window): GPU 0: 3,000 copies, 1,500.000 ms outside its 0.010 ms window of 1 kernel; the
    figures are the window's, most of what the GPU did is not in them.``; ``""`` when no GPU has the note."""
    code = WarningCode.COPIES_OUTSIDE_WINDOW.value
    gpus = [r for r in ok if code in str(r.get("warning_codes") or "").split(",")]
    if not gpus:
        return ""
    parts = [f"{md_text(names[(r['report'], r['gpu_key'])])}: {_ns(r['copies_outside_count']):,} copies, "
             f"{_ms(_ns(r['copies_outside_ns']))} outside its {_ms(_ns(r['window_ns']))} window of "
             f"{_ns(r['kernel_count']):,} kernel{'' if _ns(r['kernel_count']) == 1 else 's'}" for r in gpus]
    return (f"Copies outside the window ({code}): " + "; ".join(parts) + "; the figures are the window's, most of "
            f"what {'the GPU' if len(gpus) == 1 else 'these GPUs'} did is not in them.")


def _plain_rows(rows: pd.DataFrame) -> list[dict]:
    """The fleet rows as dicts of the :data:`RECORD_COLUMNS` (Python scalars); a column a table written
    before it lacks as :func:`pipeline.schema.conform` gives it."""
    return conform(rows, RECORD_COLUMNS)[RECORD_COLUMNS].to_dict("records")


def diagnosis_lines(ok: list[dict], names: dict) -> list[str]:
    """The record's ``## Diagnosis`` section (docs/definitions.md#diagnosis): per GPU (``ok``: plain rows with
    ``diagnosis``; ``names``: ``(report, gpu_key) -> display name``) the findings it prescribes or could not
    judge, one :func:`pipeline.analysis.diagnosis.line` each, what a fix wins back where the evidence bounds it
    (:func:`pipeline.report.words.recoverable_lines`, as the fix-first list says it), then its archived categories
    apart; ``[]`` when no
    GPU has a finding (a table written before the column)."""
    out = []
    for r in ok:
        prescribed, archived = diagnosis.split(diagnosis.of_text(r.get("diagnosis")))
        if not (prescribed or archived):
            continue
        out += ["", f"**{md_text(names[(r['report'], r['gpu_key'])])}**", ""]
        out += [f"- {md_text(diagnosis.line(f))}" for f in prescribed]
        out += [f"- {md_text(x)}" for x in recoverable_lines(fixfirst.gpu_recoverable(r, prescribed))]
        if archived:
            out.append("- archived (under the actionable share, not prescribed): "
                       + "; ".join(md_text(f["text"]) for f in archived))
    return ["", "## Diagnosis (the rules, their evidence, the remedy)", *out] if out else []


def _assumed_lines(ok: list[dict], names: dict) -> list[str]:
    """The record's lines on the dollars that rest on no rate-card entry of the GPU's own
    (docs/definitions.md#cost), just before its idle-cost line: how much of the idle cost is at an assumed
    rate and on which GPUs, and which GPUs are unpriced (not in it); none when every GPU had its own entry."""
    out = []
    assumed = [r for r in ok if r["rate_assumed"]]
    if assumed:
        usd = float(np.nansum(np.array([r["idle_usd_per_month"] for r in assumed], dtype=float)))
        models = sorted({str(r["rate_model"]) for r in assumed})
        out.append(f"${usd:,.2f} of the idle cost below rests on assumed rates: "
                   + ", ".join(names[(r["report"], r["gpu_key"])] for r in assumed)
                   + f" (model not on the rate card or not named; priced as {', '.join(models)}, the default model).")
    unpriced = [r for r in ok if r["unpriced"]]
    if unpriced:
        out.append("Unpriced (no rate-card entry of their own), not in the idle cost: "
                   + ", ".join(names[(r["report"], r["gpu_key"])] for r in unpriced) + ".")
    return [""] + out if out else []


def job_capture(ok: list[dict], names: dict) -> dict | None:
    """What a job's windows keep of its captures (docs/definitions.md#job-kind), over its analysed rows ``ok``
    (dicts with the :data:`RECORD_COLUMNS`; ``names``: ``(report, gpu_key) -> display name``):

    * ``kind``: the GPUs' ``job_kind`` (one per job; kinds that differ, e.g. by a label on one report, joined by
      ``", "`` in sorted order), ``source``: the evidence, the first GPU's ``job_kind_source`` (rows in report,
      GPU key order; the job's other GPUs quote the same evidence, naming the GPU it was found on);
    * ``capture_ns``, ``capture_idle_ns``: summed; ``capture_idle_pct`` = 100 × Σ ``capture_idle_ns`` /
      Σ ``capture_ns``, beside ``idle_pct`` = 100 × Σ ``idle_ns`` / Σ ``window_ns`` (the windows');
    * ``left_out_pct``: the share of the captures' idle the windows leave out, 100 × Σ ``window_left_out_idle_ns`` /
      Σ ``capture_idle_ns`` (:func:`captured_idle`; 0 when the captures hold no idle);
    * ``startup_wait_ns``: the longest ``startup_wait_ns`` of a GPU whose capture holds its start (``startup_cut``
      false), ``startup_gpu`` its name (the first by report and GPU key among equals); shown apart, never priced;
      None when every GPU's capture began mid-run; ``startup_cut``: how many GPUs' captures began mid-run (their
      start-up not measured);
    * ``graph_capture_ns``, ``graph_capture_gpu``: the same of ``graph_capture_ns`` (docs/definitions.md#graph-capture),
      ``startup_only``: how many GPUs ran nothing after their last graph capture (0 in a table without the column).

    None when no row has a ``job_kind`` (a table written before the column). Percentages 0..100, times int ns."""
    rows = [r for r in ok if isinstance(r.get("job_kind"), str) and r["job_kind"]]
    if not rows:
        return None
    capture = sum(_ns(r["capture_ns"]) for r in rows)
    cap_idle, left = captured_idle(rows)
    window, idle = sum(_ns(r["window_ns"]) for r in rows), sum(_ns(r["idle_ns"]) for r in rows)
    measured = [r for r in rows if not _flag(r.get("startup_cut"))]   # a capture begun mid-run: not measured
    longest = max(measured or rows, key=lambda r: _ns(r["startup_wait_ns"]))   # the first of the longest, table order
    graphs = max(rows, key=lambda r: _ns(r.get("graph_capture_ns")))
    source = next((str(r["job_kind_source"]) for r in rows if isinstance(r.get("job_kind_source"), str)
                   and r["job_kind_source"]), "")
    return {"kind": ", ".join(sorted({r["job_kind"] for r in rows})), "source": source,
            "capture_ns": capture, "capture_idle_ns": cap_idle,
            "capture_idle_pct": 100.0 * cap_idle / capture if capture else 0.0,
            "idle_pct": 100.0 * idle / window if window else 0.0,
            "left_out_pct": 100.0 * left / cap_idle if cap_idle else 0.0,
            "startup_wait_ns": _ns(longest["startup_wait_ns"]) if measured else None,
            "startup_cut": len(rows) - len(measured),
            "startup_gpu": names.get((longest["report"], longest["gpu_key"]), str(longest["gpu_key"])),
            "graph_capture_ns": _ns(graphs.get("graph_capture_ns")),
            "graph_capture_gpu": names.get((graphs["report"], graphs["gpu_key"]), str(graphs["gpu_key"])),
            "startup_only": sum(1 for r in rows if _flag(r.get("startup_only"))),
            "gpus": len(rows)}


def captured_idle(rows) -> tuple[int, int]:
    """``(Σ capture_idle_ns, Σ window_left_out_idle_ns)`` over ``rows`` (dicts with ``capture_idle_ns``,
    ``window_left_out_idle_ns`` and ``window_left_out_idle_pct``; docs/definitions.md#job-kind), int ns: the
    captures' idle and the part of it outside the windows, never priced. A row of a table older than
    ``window_left_out_idle_ns`` counts its ``capture_idle_ns`` × ``window_left_out_idle_pct`` / 100, rounded to the ns
    (the share is kept to 4 decimals); one without the capture columns counts 0."""
    whole = outside = 0
    for r in rows:
        idle, left, share = (_ns(r.get("capture_idle_ns")), r.get("window_left_out_idle_ns"),
                             r.get("window_left_out_idle_pct"))
        whole += idle
        if left is not None and not pd.isna(left):
            outside += int(left)
        elif share is not None and not pd.isna(share):
            outside += round(idle * float(share) / 100.0)
    return whole, outside


def meter_line(ok: list[dict]) -> str:
    """The medical record's line on the sampled meter beside the truth (docs/definitions.md#sampled-meter), over the
    job's analysed rows ``ok`` that have the meter's columns and enough sample periods for a reading
    (:func:`~pipeline.analysis.meter.enough_periods`), e.g. ``Sampled meter: would read 100.00 % busy (10 of 10 sample
    periods had a kernel); device-level busy 2.58 %.``, the GPUs with too few said apart
    (:func:`~pipeline.analysis.meter.too_few_text`); with none enough, ``Sampled meter: no reading: only 2 sample
    period(s) per GPU on 2 GPU(s), under the 6 (1 s at the default 1/6 s) a meter reading needs.``; ``""`` when no row has the
    columns (an older table)."""
    rows = [r for r in ok if not pd.isna(r["sample_periods"]) and int(r["sample_periods"])]
    if not rows:
        return ""
    few = too_few_text([int(r["sample_periods"]) for r in rows if not enough_periods(r["sample_periods"])])
    rows = [r for r in rows if enough_periods(r["sample_periods"])]
    if not rows:
        return f"Sampled meter: no reading: {few}."
    periods = sum(int(r["sample_periods"]) for r in rows)
    busy_periods = sum(int(r["sampled_busy_periods"]) for r in rows)
    window = sum(int(r["window_ns"]) for r in rows)
    busy = sum(int(r["busy_ns"]) for r in rows)
    return (f"Sampled meter: would read {util_pct(busy_periods, periods):.2f} % busy ({busy_periods} of {periods} "
            f"sample periods had a kernel); device-level busy {100.0 * busy / window:.2f} %"
            + (f" (over the {len(rows)} GPU(s) with enough periods; not read: {few})." if few else "."))


def collective_figures(ok: list[dict], names: dict) -> dict | None:
    """Idle inside collectives over the analysed rows ``ok`` (dicts with :data:`COLLECTIVE_COLUMNS`, ``report``,
    ``gpu_key``, ``window_ns``; docs/definitions.md#collective-wait), the GPUs named by ``names`` (``(report,
    gpu_key) -> name``): ``{"gpus": measured GPUs, "abstained": GPUs that ran collectives but were not matched,
    "note": the first abstention's reason ("" with none), "reports": the clock domains the measured GPUs were matched in apart (each report; the files of one host matched across, docs/definitions.md#collective-wait-across-files, are one), "across": how those files share a clock ("3 GPUs in 3 files on one host, node-a (the trace's host_name): one clock"; "" with none), "wait_ns", "transfer_ns", "collective_ns", "window_ns"
    (of the measured GPUs), "wait_pct" (100 × wait / window), "usd" (their ``collective_wait_usd_per_month``
    summed; NaN when all unpriced), "late_rank", "kind" (:func:`pipeline.analysis.collwait.job_late_rank`),
    "last", "calls" (the late rank's), "wait_kind" (``pipeline bubble`` or ``collective wait``), "remedy"}``;
    None when no row ran a collective in its window (or the table predates the columns)."""
    rows = [r for r in ok if r.get("collective_wait_status") in (collwait.MEASURED, collwait.ABSTAINED)]
    if not rows:
        return None
    measured = [r for r in rows if r["collective_wait_status"] == collwait.MEASURED]
    notes = [str(r["collective_wait_note"]) for r in rows if r["collective_wait_status"] == collwait.ABSTAINED]
    out = {"gpus": len(measured), "abstained": len(rows) - len(measured), "note": notes[0] if notes else "",
           "remedy": collwait.REMEDY}
    if not measured:
        return out
    gpu_names_ = [names.get((r["report"], r["gpu_key"]), str(r["gpu_key"])) for r in measured]
    lasts = [_ns(r["collective_last_count"]) for r in measured]
    who, kind = collwait.job_late_rank(gpu_names_, lasts, [bool(r["collective_chronic"]) for r in measured])
    at = gpu_names_.index(who) if who else None
    wait = sum(_ns(r["collective_wait_ns"]) for r in measured)
    window = sum(_ns(r["window_ns"]) for r in measured)
    # the clock domains matched apart: each report on its own, and one for the files matched across on one host
    across = [str(r.get("collective_match_basis") or "") == ACROSS_FILES for r in measured]
    domains = len({r["report"] for r, a in zip(measured, across) if not a}) + (1 if any(across) else 0)
    clock = next((str(r["collective_wait_note"]).split("; calls matched", 1)[0]
                  for r, a in zip(measured, across) if a), "")
    return {**out, "reports": domains, "across": clock, "wait_ns": wait, "transfer_ns": sum(_ns(r["collective_transfer_ns"]) for r in measured),
            "collective_ns": sum(_ns(r["collective_ns"]) for r in measured), "window_ns": window,
            "wait_pct": 100.0 * wait / window if window else 0.0,
            "usd": priced_sum([r["collective_wait_usd_per_month"] for r in measured]),
            "assumed": assumed_split([r["collective_wait_usd_per_month"] for r in measured],
                                     [bool(r["rate_assumed"]) for r in measured], [bool(r["unpriced"]) for r in measured],
                                     [r.get("gpu_model") for r in measured]),
            "late_rank": who, "kind": kind, "last": lasts[at] if at is not None else 0,
            "calls": _ns(measured[at]["collective_calls"]) if at is not None else 0,
            "wait_kind": collwait.PIPELINE_BUBBLE if all(bool(r["collective_p2p"]) for r in measured)
            else collwait.COLLECTIVE_WAIT}


def collective_line(ok: list[dict], names: dict) -> str:
    """The medical record's line on the wait inside collectives (:func:`collective_figures`), e.g. ``Collective
    wait: 9.49 ms waiting for the last rank inside collectives (1.95 % of the windows) of 19.87 ms in collective
    kernels on 2 GPU(s): $113.69 per month beside the idle cost, never in it; late rank H100 #2 … (chronic: last
    in 20 of 28 calls). Fix: find what holds the late rank back: its own idle, its data, its host.``; ``""`` when no
    GPU of the job ran a collective in its window."""
    f = collective_figures(ok, names)
    if f is None:
        return ""
    if not f["gpus"]:
        return f"Collective wait: not measured ({md_text(f['note'])})."
    usd = "unpriced" if f["usd"] != f["usd"] else ("~" if f["assumed"]["assumed_gpus"] else "") + f"${f['usd']:,.2f} per month"
    what = "pipeline bubble (point-to-point send/recv)" if f["wait_kind"] == collwait.PIPELINE_BUBBLE else \
        "waiting for the last rank inside collectives"
    who = (f"; late rank {f['late_rank']} ({f['kind']}: last in {f['last']} of {f['calls']} calls)"
           if f["late_rank"] else "")
    apart = f"; matched across files: {md_text(f['across'])}" if f.get("across") else ""
    apart += f"; {f['abstained']} GPU(s) not measured ({md_text(f['note'])})" if f["abstained"] else ""
    if f["reports"] > 1:  # each report matched on its own: a call's last rank in another report is not seen
        apart += (f"; measured within each of its {f['reports']} reports apart (their clocks are not known to agree), "
                  "a lower bound when a call's last rank is in another report")
    return (f"Collective wait: {_ms(f['wait_ns'])} {what} ({f['wait_pct']:.2f} % of the windows) of "
            f"{_ms(f['collective_ns'])} in collective kernels on {f['gpus']} GPU(s): {usd} beside the idle cost, "
            f"never in it{for_pages(assumed_text(f['assumed'])) if f['usd'] == f['usd'] else ''}{who}{apart}. "
            f"Fix: {f['remedy']}.")


def fleet_collectives(fleet: pd.DataFrame) -> dict | None:
    """Idle inside collectives over the analysed rows of ``fleet`` (a table of any age), for the report's fix-first
    section and communication section (docs/definitions.md#collective-wait): ``{"fleet": collective_figures of
    every row (its late rank not shown: late ranks are per job), "jobs": [{"title": the job's title, **its
    collective_figures}, ...] (jobs with a measured GPU, most wait first)}``; None when no GPU ran a collective
    in its window."""
    ok = analysed_rows(fleet)
    if not len(ok):
        return None
    names = gpu_names(ok)
    rows = conform(ok, [*JOB_KEY, *RECORD_COLUMNS])[[*JOB_KEY, *RECORD_COLUMNS]].to_dict("records")
    total = collective_figures(rows, names)
    if total is None:
        return None
    by_job: dict = {}
    for r in rows:
        by_job.setdefault((str(r["cluster"]), str(r["job"])), []).append(r)
    titles = job_titles(list(by_job))
    jobs = [{"title": titles[key], **f} for key, job_rows in by_job.items()
            if (f := collective_figures(job_rows, names)) is not None and f["gpus"]]
    jobs.sort(key=lambda f: (-f["wait_ns"], f["title"]))
    return {"fleet": total, "jobs": jobs}


def job_tiers(ok: list[dict]) -> dict | None:
    """The confidence tiers of a job's analysed rows ``ok`` (dicts with the :data:`RECORD_COLUMNS`;
    docs/definitions.md#confidence-tiers): ``tiers``: ``{tier: GPUs}`` of the tiers present, in the order of
    :data:`~pipeline.analysis.confidence.TIERS` (lowest first); ``lowest``: the lowest tier; ``notes``: the rows'
    ``confidence_note`` reasons (``"; "``-separated in a note), each once, in row order; ``title``: the counts as
    text, e.g. ``1 GPU(s) toy, 2 GPU(s) low``. None when no row has a tier (a table written before the column)."""
    rows = [r for r in ok if r.get("confidence_tier") in TIERS]
    if not rows:
        return None
    counts = {t: n for t in TIERS if (n := sum(1 for r in rows if r["confidence_tier"] == t))}
    notes = list(dict.fromkeys(part for r in rows if isinstance(r.get("confidence_note"), str)
                               for part in r["confidence_note"].split("; ") if part))
    return {"tiers": counts, "lowest": next(iter(counts)), "notes": notes,
            "title": ", ".join(f"{n} GPU(s) {t}" for t, n in counts.items())}


def confidence_line(c: dict) -> str:
    """The medical record's line on the job's confidence tiers (:func:`job_tiers`'s ``c``), e.g. ``Confidence: 2
    GPU(s) low — the window leaves out 29.9221 % of the capture's idle (over 10 %) and the job's kind is
    unknown.``: the GPUs per tier, lowest first, then the reasons, each once (profile text in them escaped)."""
    notes = "; ".join(md_text(n) for n in c["notes"])
    return f"Confidence: {c['title']}" + (f" — {notes}" if notes else "") + "."


def _per_job(fleet: pd.DataFrame, of) -> dict:
    """``(cluster, job) -> of(rows, names)`` over each job's analysed rows of ``fleet`` (a table of any age:
    :func:`pipeline.schema.conform`; plain rows sorted by report and GPU key), the GPUs named as every view names
    them (:func:`gpu_names`); a job for which ``of`` gives None is left out."""
    ok = analysed_rows(fleet)
    if not len(ok):
        return {}
    names = gpu_names(ok)
    by_job: dict = {}
    for (cluster, job), row in zip(zip(*(ok[c].tolist() for c in JOB_KEY)), _plain_rows(ok)):
        by_job.setdefault((str(cluster), str(job)), []).append(row)
    out = {}
    for key, rows in by_job.items():
        c = of(sorted(rows, key=lambda r: (str(r["report"]), str(r["gpu_key"]))), names)
        if c is not None:
            out[key] = c
    return out


def job_captures(fleet: pd.DataFrame) -> dict:
    """``(cluster, job) ->`` :func:`job_capture` of each job's analysed rows of ``fleet`` (:func:`_per_job`); a job
    whose rows have no kind is left out."""
    return _per_job(fleet, job_capture)


def job_confidences(fleet: pd.DataFrame) -> dict:
    """``(cluster, job) ->`` :func:`job_tiers` of each job's analysed rows of ``fleet`` (:func:`_per_job`); a job
    whose rows have no tier is left out."""
    return _per_job(fleet, lambda rows, _names: job_tiers(rows))


def capture_line(c: dict) -> str:
    """The medical record's line on the job's kind and captures (:func:`job_capture`'s ``c``), e.g. ``Job kind:
    serving (NVTX range 'sglang::decode' (window.serving_ranges)). The capture (first kernel to last) was idle
    50.10 % of 2,464.000 ms, the window 0.00 %: the window leaves out 99.99 % of the capture's idle. Start-up wait
    before the first kernel: 1,234.567 ms (apart, never priced).``; the evidence is profile text, escaped."""
    kind = f"Job kind: {md_text(c['kind'])}" + (f" ({md_text(for_pages(c['source']))})" if c["source"] else "") + "."
    gpus = "" if c["gpus"] == 1 else f" over {c['gpus']} GPUs"
    text = (f"{kind} The capture (first kernel to last) was idle {c['capture_idle_pct']:.2f} % of {_ms(c['capture_ns'])}"
            f"{gpus}, the window {c['idle_pct']:.2f} %: the window leaves out {c['left_out_pct']:.2f} % of the "
            "capture's idle.")
    if c["startup_wait_ns"]:
        text += (f" Start-up wait before the first kernel: {secs(c['startup_wait_ns'])}"
                 + (f" (the longest, {c['startup_gpu']})" if c["gpus"] > 1 else "") + "; apart, never priced.")
    if c.get("startup_cut"):
        cut = startup_cut_text(c["startup_cut"], c["gpus"])
        text += f" {cut[0].upper()}{cut[1:]}."
    if c.get("graph_capture_ns"):
        text += (f" Graph-capture start-up (first kernel to the last capture's end): {_ms(c['graph_capture_ns'])}"
                 + (f" (the longest, {c['graph_capture_gpu']})" if c["gpus"] > 1 else "") + "; apart, the capture starts after it.")
    if c.get("startup_only"):
        n = c["startup_only"]
        text += (f" {n} GPU{'s' if n > 1 else ''} ran nothing after {'their' if n > 1 else 'its'} last graph capture: "
                 "the window is that start-up, not a steady state (tier toy, partial).")
    return text


def idle_cost_line(ok: list[dict], of_which: str) -> str:
    """The record's idle-cost line over the job's analysed rows ``ok``: ``Idle cost: $X per month for these GPUs``
    (``of_which``: its profiler and untraced parts, e.g. ``$1.00 profiler``), saying how many GPUs are unpriced and
    not in it, of which models and how to price them (:func:`~pipeline.analysis.cost.unpriced_text`); ``Idle cost:
    unpriced (N GPU(s) ...)`` when none is priced (:func:`~pipeline.analysis.cost.priced_sum`),
    never $0.00."""
    usd = priced_sum([r["idle_usd_per_month"] for r in ok])
    unpriced = sum(1 for r in ok if r["unpriced"])
    models = unpriced_models([r.get("gpu_model") for r in ok], [bool(r["unpriced"]) for r in ok])
    if usd != usd:
        return (f"Idle cost: unpriced ({unpriced} GPU(s) with no rate-card entry of their own: {models_text(models)}; "
                f"{PRICE_ON_PAGES}).")
    return (f"Idle cost: ${usd:,.2f} per month for these GPUs"
            + (f" (of which {of_which}: not the application's)" if of_which else "")
            + (f"; {for_pages(unpriced_text(unpriced, models))}." if unpriced else ".") + untrusted_words(ok)
            + f" {cost_basis(ok)}")


def untrusted_words(ok: list[dict]) -> str:
    """The sentence after a record's idle cost when it rests on toy or low-confidence captures (``confidence_tier``,
    docs/definitions.md#confidence-tiers): `` All on toy or low-confidence captures: not to be trusted.`` or `` 1 of
    its 3 GPUs on a toy or low-confidence capture.``; ``""`` when every GPU is trusted."""
    n = sum(1 for r in ok if str(r.get("confidence_tier") or "") in ("toy", "low"))
    if not n:
        return ""
    if n == len(ok):
        return " All on toy or low-confidence captures: not to be trusted."
    return f" {n} of its {len(ok)} GPUs on a toy or low-confidence capture."


def cost_basis(ok: list[dict]) -> str:
    """Where the idle cost of a job's analysed rows ``ok`` comes from (docs/definitions.md#cost), so a reader of the
    record can trace it without the tables: the summed device-level idle (``idle_ns``) and windows (``window_ns``)
    of the priced GPUs (the unpriced ones are not in the cost), in ms, and every rate used (``rate_model`` at ``rate_usd_per_hour`` USD per GPU-hour, with how many GPUs and
    ``assumed`` for a rate the card does not give the model), e.g. ``Basis: 283.352 ms idle of 675.212 ms of
    windows over 1 GPU(s), each GPU's idle share × its rate × hours per month; rate: $4.00/GPU-hour (H100, 1
    GPU(s)).``"""
    priced = [r for r in ok if not r.get("unpriced")]
    idle = sum(_ns(r["idle_ns"]) for r in priced)
    window = sum(_ns(r["window_ns"]) for r in priced)
    rates: dict = {}
    for r in priced:
        if pd.isna(r.get("rate_usd_per_hour")):  # a table from before the rate's column
            continue
        key = (str(r.get("rate_model") or "-"), float(r["rate_usd_per_hour"]), bool(r.get("rate_assumed")))
        rates[key] = rates.get(key, 0) + 1
    listed = "; ".join(f"${usd:,.2f}/GPU-hour ({md_text(model)}{', assumed' if assumed else ''}, {n} GPU(s))"
                       for (model, usd, assumed), n in sorted(rates.items()))
    return (f"Basis: {_ms(idle)} idle of {_ms(window)} of windows over {len(priced)} GPU(s), each GPU's idle share × "
            f"its rate × hours per month" + (f"; rate: {listed}." if listed else "."))


def exposed_line(ok: list[dict], window: int) -> str:
    """The record's line on the job's exposed communication (:mod:`pipeline.analysis.overlap`) over its analysed
    rows ``ok`` (``window``: their summed ``window_ns``), e.g. ``Exposed communication: 12.000 ms (1.20 % of the
    windows) of 30.000 ms in collective kernels ran with no compute kernel on another stream: ~$804.69 per month
    (busy time, not in the idle cost; it overlaps the collective wait where both are measured (both are time inside collective kernels): never add the two); of which $804.69 at assumed rates (1 GPU(s)).``: ``~`` and the part at
    assumed rates, or the GPUs unpriced, over the GPUs with exposed communication
    (:func:`~pipeline.analysis.cost.assumed_split`, :func:`~pipeline.fleet.reduce.assumed_text`;
    docs/definitions.md#cost); ``unpriced`` when none of them is priced, never $0.00."""
    exposed = sum(_ns(r["comm_exposed_ns"]) for r in ok)
    comm = sum(_ns(r["comm_ns"]) for r in ok)
    at = [r for r in ok if _ns(r["comm_exposed_ns"])]
    rates = assumed_split([r["comm_exposed_usd_per_month"] for r in at], [bool(r["rate_assumed"]) for r in at],
                          [bool(r["unpriced"]) for r in at], [r.get("gpu_model") for r in at])
    comm_usd = priced_sum([r["comm_exposed_usd_per_month"] for r in at])
    priced = "unpriced" if comm_usd != comm_usd else (
        ("~" if rates["assumed_gpus"] else "")
        + f"${float(np.nansum(np.array([r['comm_exposed_usd_per_month'] for r in ok], dtype=float))):,.2f} per month")
    return (f"Exposed communication: {_ms(exposed)} ({100.0 * exposed / window:.2f} % of the windows) "
            f"of {_ms(comm)} in collective kernels ran with no compute kernel on another stream: "
            f"{priced} ({COMM_OVERLAP}){for_pages(assumed_text(rates))}.")


def grouping_line(ok: list[dict]) -> str:
    """The record's line on a job grouped from per-rank traces by what they say (``job_grouped_by``
    ``distributedInfo``, docs/definitions.md#job-grouping), e.g. ``Grouped from 2 traces by their
    distributedInfo: ranks 0, 1 of world size 8 (nccl), overlapping captures.``), or from Nsight exports naming one
    Slurm job (``SLURM_JOB_ID``: ``Grouped from 2 exports naming SLURM_JOB_ID=4242 in their capture's
    environment.``); ``""`` for any other job."""
    hows = {r.get("job_grouped_by") for r in ok}
    if hows == {"SLURM_JOB_ID"}:
        return (f"Grouped from {len({r['report'] for r in ok})} exports naming {md_text(str(ok[0]['scheduler_job']))} "
                "in their capture's environment.")
    if hows != {"distributedInfo"}:
        return ""
    ranks = sorted({str(r["rank"]) for r in ok}, key=lambda v: (len(v), v))
    backend = str(ok[0].get("dist_backend") or "")
    return (f"Grouped from {len({r['report'] for r in ok})} traces by their distributedInfo: ranks {', '.join(ranks)} "
            f"of world size {int(ok[0]['dist_world_size'])}" + (f" ({md_text(backend)})" if backend else "")
            + ", overlapping captures.")


def job_record(job: str, rows: pd.DataFrame, rosters: dict, actionable_pct: float = 2.0) -> str:
    """Markdown page for one job.

    Args:
        job: the job's title (:func:`job_titles`).
        rows: the job's fleet rows (error rows included: they are listed, not counted).
        rosters: ``(report, gpu_key) -> {"streams": [...], "device": [...]}`` from the run.
        actionable_pct: categories under this share of W are marked "archived".
    Raises:
        TypeError, ValueError: an analysed row without its window, idle or category ns.
    """
    return _record(job, _plain_rows(rows), rosters, actionable_pct)


def _record(job: str, rows: list[dict], rosters: dict, actionable_pct: float, covered: str | None = None) -> str:
    """:func:`job_record` on plain rows (dicts with the :data:`RECORD_COLUMNS`), in table order; ``covered``: the
    coverage line (accounting given), under the job's figures."""
    ok = sorted((r for r in rows if r["status"] not in NOT_ANALYSED), key=lambda r: (r["report"], r["gpu_key"]))
    lines = [f"# Medical record: {md_text(job)}", ""]
    if not ok and rows and all(r["status"] == DUPLICATE for r in rows):
        lines.append("Every report of this job is another file of a capture analysed under another name "
                     "(docs/inputs.md#duplicate-captures): its GPUs are counted there.")
    elif not ok:
        lines.append("No GPU of this job could be analysed.")
    else:
        window = sum(int(r["window_ns"]) for r in ok)
        idle = sum(int(r["idle_ns"]) for r in ok)
        pcts = [float(r["idle_pct"]) for r in ok]
        valid = [i for i, v in enumerate(pcts) if not math.isnan(v)]
        if not valid:
            raise ValueError(f"job {job}: no analysed GPU has an idle %")
        lo = ok[min(valid, key=lambda i: pcts[i])]   # the first minimum, as pandas' idxmin
        hi = ok[max(valid, key=lambda i: pcts[i])]   # the first maximum, as pandas' idxmax
        rules = "; ".join(window_rule_name(r) for r in sorted({str(r["window_rule"]) for r in ok}))
        names = job_gpu_names(ok)
        lo_name, hi_name = names[(lo["report"], lo["gpu_key"])], names[(hi["report"], hi["gpu_key"])]
        lines.append(
            f"Idle {100.0 * idle / window:.2f} % device-level over {len(ok)} GPU(s) "
            f"(min {float(lo['idle_pct']):.2f} % {lo_name}, max {float(hi['idle_pct']):.2f} % "
            f"{hi_name}{', straggler suspect ' + hi_name if bool(hi['straggler']) else ''}; window: {rules})")
        shares = []
        for cat in CATEGORIES:   # a category with no idle on any GPU is left out (all none: "no idle", once)
            ns = sum(int(r[f"cat_{cat}_ns"]) for r in ok)
            if ns:
                shares.append((100.0 * ns / window, cat))
        shares.sort(key=lambda x: (-x[0], CATEGORIES.index(x[1])))
        slivers = sum(_ns(r["device_sliver_ns"]) for r in ok if not bool(r["launch_bound"]))
        apart = [(cat, sum(_ns(r[f"cat_{cat}_ns"]) for r in ok)) for cat in CAVEATS]
        apart = ", ".join(f"{cat} {100.0 * ns / window:.2f} %" for cat, ns in apart if ns)
        lines.append("Categories: " + (" · ".join(
            f"{cat} {pct:.2f} %" + ("" if pct >= actionable_pct else " (archived)") for pct, cat in shares) or "no idle in any category")
            + (f" · sub-threshold slivers {100.0 * slivers / window:.2f} %" if slivers else "")
            + (f" · not the application's: {apart}" if apart else ""))
        grouped = grouping_line(ok)
        if grouped:
            lines.append(grouped)
        capture = job_capture(ok, names)
        if capture is not None:
            lines.append(capture_line(capture))
        meter = meter_line(ok)
        if meter:
            lines.append(meter)
        tiers = job_tiers(ok)
        if tiers is not None:
            lines.append(confidence_line(tiers))
        outside = copies_outside_line(ok, names)
        if outside:
            lines.append(outside)
        if covered:
            lines.append(covered)
        lines += ["", f"## {TOP_GAPS} largest gaps (device-level: no kernel on any stream)", "",
                  f"| {' | '.join(RECORD_GAPS.columns)} |", "|---" * len(RECORD_GAPS.columns) + "|"]
        gaps = []
        for row in ok:
            for g in rosters.get((row["report"], row["gpu_key"]), {}).get("device", []):
                gaps.append((-g["length_ns"], g["start_ns"], row["gpu_key"], names[(row["report"], row["gpu_key"])], g))
        gaps.sort(key=lambda x: (x[0], x[1], x[2], x[3]))
        for i, (_, _, _, gpu, g) in enumerate(gaps[:TOP_GAPS], 1):
            where = md_text(g.get("nvtx_range") or "-")
            lines.append(f"| {i} | {gpu} | {timeline_s(g['start_ns'])} | {where} | {_ms(g['length_ns'])} | "
                         f"{g['category']} |")
        if not gaps:
            lines.append("| - | no gap above the threshold in the roster | | | | |")
        lines += diagnosis_lines(ok, names)
        lines += ["", "## GPU pages", "",
                  f"Each GPU's timeline and gap rosters (`{PAGES_DIR}/`, written beside the report by `gpu-idle report`):",
                  ""]
        lines += [f"- [{name}](../{PAGES_DIR}/{gpu_page_name(str(report), str(key))})"
                  for (report, key), name in names.items()]
        # numpy's (pairwise) sum with NaN as 0, exactly as pandas sums the column
        caveat_usd = [(cat, float(np.nansum(np.array([r[f"{cat}_usd_per_month"] for r in ok], dtype=float))))
                      for cat in CAVEATS]
        of_which = " and ".join(f"${x:,.2f} {cat}" for cat, x in caveat_usd if x)
        lines += _assumed_lines(ok, names)
        lines += ["", idle_cost_line(ok, of_which)]
        # the busy time inside collective kernels after the idle cost, each said to be a different measure, not in it
        collective = collective_line(ok, names)
        if collective:
            lines.append(collective)
        exposed = sum(_ns(r["comm_exposed_ns"]) for r in ok)
        if exposed:  # only jobs with exposed communication get the line (others' pages stay as they were)
            lines.append(exposed_line(ok, window))
        lines += [""] + [f"*[{name}]: {md_text(key)} in {md_text(os.path.basename(str(report).rstrip('/')))}"
                  for (report, key), name in names.items()]
    for row in sorted((r for r in rows if r["status"] == "error"), key=lambda r: r["report"]):
        lines.append(f"- failed: {md_text(row['error'])}")  # the message starts with the report
    for row in sorted((r for r in rows if r["status"] == DUPLICATE), key=lambda r: r["report"]):
        lines.append(f"- {md_text(row['report'])}: {md_text(row['error'])} (not analysed again, not priced)")
    return "\n".join(lines) + "\n"


def record_stem(job: str) -> str:
    """File stem of ``job``'s page (``records/<stem>.md``): the job name itself when it is already a
    safe file name (:func:`~pipeline.io.slug` leaves it as it is, e.g. ``llm-pretrain``, and it does
    not start with a dot); otherwise its slug (leading dots dropped, at most 68 characters), ``__``
    and the first 10 hex digits of the SHA-1 of the exact name (UTF-8), so two jobs whose slugs are
    the same (``a b`` and ``a;b``) still get a page each. The same name gives the same stem on every
    run, whatever other jobs there are."""

    safe = slug(job)
    if safe == job and not job.startswith("."):
        return safe
    digest = hashlib.sha1(job.encode("utf-8", "surrogatepass")).hexdigest()[:10]
    return f"{safe.lstrip('.')[:68]}__{digest}"


def job_keys(fleet: pd.DataFrame) -> list[tuple]:
    """The fleet's jobs: its distinct :data:`~pipeline.schema.JOB_KEY` pairs ``(cluster, job)`` (as text),
    sorted by job name, then cluster."""
    if not len(fleet):
        return []
    pairs = zip(*(fleet[c].tolist() for c in JOB_KEY))
    return sorted({(str(c), str(j)) for c, j in pairs}, key=lambda k: (k[1], k[0]))


def job_titles(keys) -> dict:
    """``(cluster, job) -> title`` for people: the job name when only one cluster runs a job of that name,
    else ``<cluster>/<job>`` (two clusters that each run ``train`` run two jobs)."""
    names = Counter(job for _, job in keys)
    return {(cluster, job): job if names[job] == 1 else f"{cluster}/{job}" for cluster, job in keys}


def record_stems(keys) -> dict:
    """``(cluster, job) -> file stem`` of each job's page (``records/<stem>.md``): :func:`record_stem` of the
    job name when only one cluster runs a job of that name (the name a record always had), else
    ``<record_stem(cluster)>--<record_stem(job)>``; a stem two jobs would still share (a job literally named
    ``A--train`` beside cluster A's ``train``) gets ``__`` and 10 hex digits of the SHA-1 of the key."""
    names = Counter(job for _, job in keys)
    stems = {(c, j): record_stem(j) if names[j] == 1 else f"{record_stem(c)}--{record_stem(j)}" for c, j in keys}
    taken = Counter(stems.values())
    for (c, j), stem in list(stems.items()):
        if taken[stem] > 1:
            digest = hashlib.sha1(f"{c}\0{j}".encode("utf-8", "surrogatepass")).hexdigest()[:10]
            stems[(c, j)] = f"{stem}__{digest}"
    return stems


def write_records(out_dir: str, fleet: pd.DataFrame, rosters: dict, actionable_pct: float = 2.0,
                  coverage: pd.DataFrame | None = None) -> list[str]:
    """Write ``out_dir/records/<stem>.md`` for every job (:data:`~pipeline.schema.JOB_KEY`: one page per
    ``(cluster, job)``, named by :func:`record_stems`, titled by :func:`job_titles`); returns the paths
    (sorted by job name, then cluster). ``coverage``: the accounting's coverage table
    (:func:`~pipeline.accounting.hooks.coverage_table`), None without accounting; given, each record of a job
    with an analysed GPU says it (:func:`~pipeline.report.teams.record_coverage_text`) under its figures.

    ``rosters`` needs only the ``"device"`` roster of each ``(report, gpu_key)``.
    """

    keys = job_keys(fleet)
    stems, titles = record_stems(keys), job_titles(keys)
    by_job: dict = {k: [] for k in keys}
    pairs = zip(*(fleet[c].tolist() for c in JOB_KEY)) if len(fleet) else []
    for (cluster, job), row in zip(pairs, _plain_rows(fleet)):
        by_job[(str(cluster), str(job))].append(row)
    sched: dict = {k: [] for k in keys}
    if coverage is not None and "sched_job_id" in fleet:
        ok = analysed_rows(fleet)
        for cluster, job, held_by in zip(ok["cluster"], ok["job"], ok["sched_job_id"]):
            if isinstance(held_by, str) and held_by and held_by not in sched[(str(cluster), str(job))]:
                sched[(str(cluster), str(job))].append(held_by)
    paths = []
    for key in keys:
        path = os.path.join(out_dir, "records", f"{stems[key]}.md")
        covered = record_coverage_text(sched[key], coverage) if coverage is not None else None
        write_text(path, _record(titles[key], by_job[key], rosters, actionable_pct, covered))
        paths.append(path)
    return paths
