"""Issue 45's leftovers (the money story of the report views), each with figures worked out by hand: no rounded
value that contradicts its own qualifier, compare's printed iteration lengths and a toy capture's ratio withheld,
(and the other points below)."""
from __future__ import annotations

import math

import pytest

MS = 1_000_000


# ---- f. a rounded figure never contradicts its qualifier -------------------------------------------------------------

def test_a_figure_under_or_over_its_bound_never_prints_as_the_bound():
    """1.996 % under 2 % reads 1.99 (main: 2.00 % (under 2 %)); 2.004 over 2 reads 2.01; a figure far from its bound
    rounds as usual; an archived category's text, a toy window of 49,999,999 ns under 50 ms (main: 0.050000 s (under
    0.05 s)) and an iteration spread of 50.00001 % over 50 % (main: 50 % (over 50 %)) say so."""
    from pipeline.analysis import diagnosis
    from pipeline.analysis.confidence import tier
    from pipeline.model import beside_bound

    assert [beside_bound(1.996, 2), beside_bound(1.994, 2), beside_bound(2.004, 2), beside_bound(1.5, 2),
            beside_bound(2.5, 2), beside_bound(2.0, 2)] == ["1.99", "1.99", "2.01", "1.50", "2.50", "2.00"]
    assert diagnosis.archived("cpu", 1.996, 2.0)["text"] == ("cpu holds 1.99 % of the window (under 2 %): archived, "
                                                             "not prescribed")
    assert tier(window_ns=49_999_999, kernel_count=500, iterations=25, spread=1.0) == (
        "toy", ["window 0.049999 s (under 0.05 s)"])
    got = tier(window_ns=2_000 * MS, kernel_count=500, iterations=25, spread=50.00001)
    assert "iteration spread 50.0001 % (over 50 %)" in got[1], got


# ---- h, i. compare: each side's iteration length printed, a toy capture's ratio withheld ------------------------------

def _row(tier: str, iteration_ns: int, idle_ns: int = 10 * MS) -> dict:
    return {"cluster": "c", "job": "j", "report": "r.sqlite", "gpu_key": "GPU-0", "status": "ok", "rank": "0",
            "device_ids": "0", "pid": 1, "gpu_model": "NVIDIA H100", "window_rule": "periodic",
            "window_ns": 100 * MS, "idle_ns": idle_ns, "iterations": 10, "iteration_mean_ns": iteration_ns,
            "iteration_cv": 0.0, "idle_pct_sd": 0.0, "rate_usd_per_hour": 4.0, "confidence_tier": tier,
            "confidence_note": "" if tier in ("medium", "high") else f"note {tier}"}


def test_compare_prints_each_sides_iteration_and_withholds_a_toy_ratio():
    """Before 10 ms iterations, after 4 ms: the text print gives both lengths, the change (−60.00 %) and the
    speed-up 10 / 4 = 2.500x for two trusted sides (main: no iteration line in the text print). With a toy before
    side (its 10 ms from a capture too small to hold a real iteration) the speed-up is withheld in the text, the
    Markdown and compare.csv (empty cell), saying why; a low side's is shown, marked."""
    from pipeline.report.compare import Side, compare, csv_rows, render_markdown, render_text

    def run(tier_b: str):
        sides = (Side("before", "b", "b", [_row(tier_b, 10 * MS)], [], 730.0),
                 Side("after", "a", "a", [_row("medium", 4 * MS)], [], 730.0))
        return compare(sides, force=True)

    ok = run("medium")   # forced: the kernel names are not read (rows by hand), so every figure is marked
    assert ("  iteration 10.000 ms -> 4.000 ms (\u221260.00 %); faster, by more than the noise floor of 0.00 %; "
            "speed-up 2.500x [forced: not comparable]") in render_text(ok)
    assert [r["speedup"] for r in csv_rows(ok) if r["level"] in ("gpu", "job")] == [2.5, 2.5]
    toy = run("toy")
    why = ("speed-up withheld: the before side is a toy capture (tier toy), too small for an iteration length to "
           "compare")
    assert ("  iteration 10.000 ms -> 4.000 ms (\u221260.00 %); faster, by more than the noise floor of 0.00 %; "
            f"{why} [forced: not comparable] [low confidence]") in render_text(toy)
    md = render_markdown(toy)
    assert md.count(why) == 2 and "2.500x" not in md   # the job and its one GPU pair
    assert [r["speedup"] for r in csv_rows(toy) if r["level"] in ("gpu", "job")] == [None, None]
    low = run("low")
    assert "speed-up 2.500x" in "\n".join(render_text(low)) and "[low confidence]" in "\n".join(render_text(low))
