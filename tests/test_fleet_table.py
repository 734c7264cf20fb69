"""The table `gpu-idle run --wide` prints gives the device-level figures first; per-stream gap totals, which
add up over streams and can exceed the window, are labelled as sums over streams and come last (the narrow
table that leads with money: tests/test_views_money.py)."""
from __future__ import annotations

import pandas as pd

from pipeline.cli import format_fleet

MS = 1_000_000


def _row(**kw) -> dict:
    row = {"job": "j", "node": "n1", "report": "r.sqlite", "gpu_key": "pid10/dev0", "gpu_model": "H100",
           "window_ns": 10 * MS, "idle_ns": 4 * MS, "idle_pct": 40.0, "device_gap_count": 2, "device_gap_ns": 4 * MS,
           "copy_only_ns": 0, "dark_ns": 4 * MS, "gap_count": 5, "gap_total_ns": 14 * MS, "main_category": "sync",
           "idle_usd_per_month": 905.2, "amdahl_speedup": 1.6667, "straggler": False, "status": "ok"}
    return {**row, **kw}


def test_device_level_first_and_stream_sums_labelled():
    """Two streams, each idle 7 ms of a 10 ms window: stream gaps sum to 14 ms > W; the device was idle 4 ms."""
    text = format_fleet(pd.DataFrame([_row()]), wide=True)
    header, line, legend = text.splitlines()
    assert legend.startswith("tier: how far the month can be trusted")
    assert header.split() == [
        "idle_usd_per_month", "confidence_tier", "job", "node", "gpu_name", "gpu_key", "gpu_model", "window_ms", "idle_ms", "idle_pct", "device_gaps", "device_gaps_ms",
        "copy_only_ms", "dark_ms", "main_category", "amdahl_speedup", "straggler", "status",
        "stream_gaps", "(count", "over", "streams)", "stream_gaps_ms", "(sum", "over", "streams)"]
    assert header.rstrip().endswith("stream_gaps (count over streams) stream_gaps_ms (sum over streams)")
    assert line.split() == ["$905.20", "-", "j", "n1", "H100", "#1", "pid10/dev0", "pid10/dev0", "H100", "10.000", "4.000",
                            "40.00", "2", "4.000", "0.000", "4.000", "sync", "1.667x", "no", "ok", "5", "14.000"]


def test_an_old_fleet_without_device_gap_columns_still_prints():
    """A fleet table from before device_gap_* existed: those cells say -, the rest as usual."""
    row = _row()
    del row["device_gap_count"], row["device_gap_ns"]
    header, line = format_fleet(pd.DataFrame([row]), wide=True).splitlines()[:2]
    assert "device_gaps_ms" in header and line.split()[11:16] == ["40.00", "-", "-", "0.000", "4.000"]


def test_control_characters_from_profiles_cannot_drive_the_terminal():
    """A job label with an ANSI escape and a carriage return is printed with them spelled out."""
    fleet = pd.DataFrame([_row(job="a\x1b[31mred\rX"), _row(report="bad.sqlite", status="error",
                                                          error="bad.sqlite: NVTX \x1b]0;title\x07")])
    text = format_fleet(fleet)
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert text.splitlines()[1].split()[2] == "a\\x1b[31mred\\x0dX"
    assert text.splitlines()[-1] == "ERROR bad.sqlite: NVTX \\x1b]0;title\\x07"
