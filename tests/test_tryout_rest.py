"""Issue 45, the points a new-user tryout on the real exports, the real traces and the example fleet still found
wrong (docs/outputs.md#reports-for-people, docs/definitions.md#stragglers, #collective-wait):

1. a GPU that is itself the one its job waits on (the straggler, the late rank) gets a concrete prescription for its
   largest category on its page, never one that sends the reader back to itself;
2. one word per meaning: the *straggler* is the job's most idle GPU, the *late rank* the GPU that enters the job's
   collectives last most often (``collective_late_rank``);
3. untrusted figures (tier toy or low) are marked where shown, or left out of a headline card with a note;
4. names break only at separators; the fix-first remedy cell shows its whole remedy (or a visible "more");
5. the report's CSV and the timeline's title rank by tier first, then dollars, as every other view does.

Small fleets are built here with their values worked out by hand; the real inputs where the tryout saw the fault.
"""
from __future__ import annotations

import csv
import io
import math

import pandas as pd

from pipeline.model import CATEGORIES, CAVEATS

ALL_CATEGORIES = (*CATEGORIES, *CAVEATS)

MS = 1_000_000


def _row(**kw) -> dict:
    """One analysed GPU of a fleet table (the columns the views read), 40 % idle of a 10 ms window."""
    row = {"cluster": "c1", "job": "train", "node": "n1", "report": "a.sqlite", "gpu_key": "pid1/dev0",
           "gpu_model": "NVIDIA H100 80GB HBM3", "window_ns": 10 * MS, "idle_ns": 4 * MS, "idle_pct": 40.0,
           "busy_ns": 6 * MS, "device_sliver_ns": 0, "launch_bound": False, "main_category": "cpu", "idle_usd_per_month": 100.0, "amdahl_speedup": 1.6667,
           "status": "ok", "confidence_tier": "medium", "low_confidence": False, "iterations": 6}
    row.update({f"cat_{c}_ns": 0 for c in ALL_CATEGORIES}, cat_cpu_ns=4 * MS)
    row.update({f"cat_{c}_pct": 0.0 for c in ALL_CATEGORIES}, cat_cpu_pct=40.0)
    return {**row, **kw}


def _results(rows: list[dict]):
    from pipeline.report.summary import Results
    from pipeline.schema import FLEET_COLUMNS, conform

    fleet = conform(pd.DataFrame(rows), FLEET_COLUMNS)
    return Results(source="mem", kind="run", current=fleet, current_date="2026-12-06", run_dir=None,
                   history=[("2026-12-06", fleet)])


# ---- 5. the CSV and the timeline's title: tier first, then dollars ---------------------------------------------------

#: A fleet whose dearest GPUs rest on untrusted captures: by dollars alone the toy GPU ($900) and the low one ($500)
#: would lead; by tier the two medium GPUs ($100, then unpriced) lead, then low ($500, then $20), then toy ($900),
#: then the failed report.
TIERED = [
    _row(report="toy.sqlite", gpu_key="pid9/dev0", idle_usd_per_month=900.0, confidence_tier="toy", low_confidence=True),
    _row(report="low.sqlite", gpu_key="pid5/dev0", idle_usd_per_month=500.0, confidence_tier="low", low_confidence=True),
    _row(report="low.sqlite", gpu_key="pid5/dev1", idle_usd_per_month=20.0, confidence_tier="low", low_confidence=True),
    _row(report="bad.sqlite", gpu_key=None, status="error", error="bad.sqlite: cannot read", idle_usd_per_month=None,
         confidence_tier=None, low_confidence=None),
    _row(report="med.sqlite", gpu_key="pid1/dev1", idle_usd_per_month=math.nan, unpriced=True),
    _row(report="med.sqlite", gpu_key="pid1/dev0", idle_usd_per_month=100.0),
]


def test_the_report_csv_ranks_by_tier_then_dollars():
    """`gpu-idle report --format csv`: medium $100, medium unpriced, low $500, low $20, toy $900, the failed report
    last (main: toy $900 first, then low $500, by dollars alone)."""
    from pipeline.report.html import render_csv

    rows = list(csv.DictReader(io.StringIO(render_csv(_results(TIERED)))))
    got = [(r["report"], r["gpu_key"], r["confidence_tier"], r["idle_usd_per_month"]) for r in rows]
    assert got == [("med.sqlite", "pid1/dev0", "medium", "100.0"), ("med.sqlite", "pid1/dev1", "medium", ""),
                   ("low.sqlite", "pid5/dev0", "low", "500.0"), ("low.sqlite", "pid5/dev1", "low", "20.0"),
                   ("toy.sqlite", "pid9/dev0", "toy", "900.0"), ("bad.sqlite", "", "", "")], got


def test_the_timeline_title_names_the_tier_it_leads():
    """The timeline shows the first GPU of the top 10 (tier first): its title says it is the most expensive on a
    trusted capture (not the fleet's most expensive: the toy GPU's $900 is more); with no trusted GPU, the best tier
    there is, marked not to be trusted (main: "most expensive idle GPU: …" either way)."""
    from pipeline.report.html import timeline_title
    from pipeline.report.summary import summarise

    s = summarise(_results(TIERED))
    assert (s["worst_gpu"]["report"], s["worst_gpu"]["gpu_key"]) == ("med.sqlite", "pid1/dev0")
    assert timeline_title(s["worst_gpu"], "H100 #1 pid1/dev0") == (
        "most expensive idle GPU on a trusted capture (medium): H100 #1 pid1/dev0 (train, med.sqlite)")
    s = summarise(_results([r for r in TIERED if r["report"] != "med.sqlite"]))
    assert (s["worst_gpu"]["report"], s["worst_gpu"]["gpu_key"]) == ("low.sqlite", "pid5/dev0")
    assert timeline_title(s["worst_gpu"], "H100 #1 pid5/dev0") == (
        "most expensive idle GPU of the best tier here, low (no trusted capture; not to be trusted): H100 #1 pid5/dev0 "
        "(train, low.sqlite)")
