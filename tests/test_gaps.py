"""Hand-computed checks of pipeline.analysis.gaps: device idle, per-stream gaps, buckets, roster."""
from __future__ import annotations

import pandas as pd
import pytest

from pipeline.analysis import gaps

MS = 1_000_000  # ns per ms


def kframe(rows):
    """rows: (pid, stream_id, start, end, correlation_id, name)."""
    return pd.DataFrame(rows, columns=["pid", "stream_id", "start", "end", "correlation_id", "name"])


def gaps_of(rows, min_gap_ns, w0=None, w1=None):
    k = kframe(rows)
    w0 = int(k["start"].min()) if w0 is None else w0
    w1 = int(k["end"].max()) if w1 is None else w1
    return gaps.stream_gaps(gaps.kernels_in_window(k, w0, w1), min_gap_ns)


# ---------------------------------------------------------------- device_idle

def test_device_idle_copy_only_and_dark():
    w0, w1 = 0, 100
    k_s = [-10, 10, 20, 60, 95]
    k_e = [5, 30, 40, 70, 130]
    # kernels clipped to [0,100): [0,5) [10,30) [20,40) [60,70) [95,100)
    # union: [0,5)=5, [10,40)=30, [60,70)=10, [95,100)=5 -> busy 50
    # idle = 100 - 50 = 50  (holes [5,10)=5, [40,60)=20, [70,95)=25)
    c_s = [35, 65, 90, 92, 150, -50]
    c_e = [50, 80, 120, 95, 200, -10]
    # copies clipped: [35,50) [65,80) [90,100) [92,95) ; [150,200) and [-50,-10) are outside W
    # copy-only = copies minus kernels:
    #   [35,50) - [10,40) -> [40,50) = 10
    #   [65,80) - [60,70) -> [70,80) = 10
    #   [90,100) u [92,95) = [90,100) - [95,100) -> [90,95) = 5
    #   total 25
    # dark = 50 - 25 = 25  ([5,10)=5 + [50,60)=10 + [80,90)=10)
    d = gaps.device_idle(k_s, k_e, c_s, c_e, w0, w1)
    assert (d.window_ns, d.busy_ns, d.idle_ns, d.copy_only_ns, d.dark_ns) == (100, 50, 50, 25, 25)


def test_device_idle_no_copies_all_dark():
    # W [0,1000), one kernel [100,400): busy 300, idle 700, all dark
    d = gaps.device_idle([100], [400], [], [], 0, 1000)
    assert (d.busy_ns, d.idle_ns, d.copy_only_ns, d.dark_ns) == (300, 700, 0, 700)


def test_device_idle_copies_only_outside_window():
    # copies [-100,-1) and [1000,2000) never touch W [0,1000)
    d = gaps.device_idle([0], [500], [-100, 1000], [-1, 2000], 0, 1000)
    # busy 500, idle 1000 - 500 = 500, copy-only 0
    assert (d.busy_ns, d.idle_ns, d.copy_only_ns, d.dark_ns) == (500, 500, 0, 500)


def test_device_idle_copy_fully_under_kernel_is_not_copy_only():
    # copy [10,20) runs while kernel [0,50) runs: busy time, not copy-only
    d = gaps.device_idle([0], [50], [10], [20], 0, 100)
    # busy 50, idle 50, copy-only 0, dark 50
    assert (d.busy_ns, d.idle_ns, d.copy_only_ns, d.dark_ns) == (50, 50, 0, 50)


# ---------------------------------------------------------------- kernels_in_window

def test_kernels_in_window_clips_and_filters():
    rows = [
        (1, 1, 50, 150, 1, "straddle_w0"),    # -> [100,150)
        (1, 1, 150, 250, 2, "straddle_w1"),   # -> [150,200)
        (1, 1, 0, 50, 3, "before"),           # dropped
        (1, 1, 250, 300, 4, "after"),         # dropped
        (1, 1, 0, 100, 5, "ends_at_w0"),      # dropped: shares no ns with W
        (1, 1, 200, 210, 6, "starts_at_w1"),  # dropped
        (1, 1, 120, 120, 7, "zero_inside"),   # kept (zero length, inside W)
        (1, 1, 100, 100, 8, "zero_at_w0"),    # kept (start >= w0)
        (1, 1, 200, 200, 9, "zero_at_w1"),    # dropped (start == w1, outside [w0,w1))
        (1, 1, 0, 300, 10, "covers"),         # -> [100,200)
    ]
    out = gaps.kernels_in_window(kframe(rows), 100, 200)
    got = list(zip(out["name"], out["start"], out["end"]))
    # ordered by (start, end, correlation_id):
    # (100,100) zero_at_w0, (100,150) straddle_w0, (100,200) covers, (120,120) zero_inside, (150,200) straddle_w1
    assert got == [
        ("zero_at_w0", 100, 100),
        ("straddle_w0", 100, 150),
        ("covers", 100, 200),
        ("zero_inside", 120, 120),
        ("straddle_w1", 150, 200),
    ]


def test_kernels_in_window_order_ties_end_then_correlation():
    rows = [
        (1, 1, 0, 10, 3, "long"),
        (1, 1, 0, 2, 2, "b2"),
        (1, 1, 0, 2, 1, "c1"),
    ]
    out = gaps.kernels_in_window(kframe(rows), 0, 10)
    # start ties -> by end (2 before 10), end ties -> by correlationId (1 before 2)
    assert out["name"].tolist() == ["c1", "b2", "long"]


# ---------------------------------------------------------------- stream_gaps

def test_stream_gaps_two_processes_same_stream_number():
    rows = [
        (100, 7, 0 * MS, 10 * MS, 1, "a1"),
        (100, 7, 30 * MS, 40 * MS, 2, "a2"),
        (200, 7, 15 * MS, 25 * MS, 3, "b1"),
        (200, 7, 45 * MS, 50 * MS, 4, "b2"),
    ]
    g, _ = gaps_of(rows, 1 * MS)
    got = sorted(zip(g["pid"], g["stream_id"], g["start"], g["length"], g["kernel_before"], g["kernel_after"]))
    # pid 100 stream 7: 30 - 10 = 20 ms from a1 to a2
    # pid 200 stream 7: 45 - 25 = 20 ms from b1 to b2
    # (one merged "stream 7" would instead give three 5 ms gaps: 10->15, 25->30, 40->45)
    assert got == [
        (100, 7, 10 * MS, 20 * MS, "a1", "a2"),
        (200, 7, 25 * MS, 20 * MS, "b1", "b2"),
    ]


def test_stream_gaps_latest_end_long_kernel_then_short_inside():
    rows = [
        (1, 3, 0, 40 * MS, 1, "long"),
        (1, 3, 10 * MS, 20 * MS, 2, "short"),
        (1, 3, 50 * MS, 60 * MS, 3, "later"),
    ]
    g, lengths = gaps_of(rows, 1 * MS)
    # the gap opens at the long kernel's end (40 ms), not the short one's (20 ms): 50 - 40 = 10 ms
    assert g[["start", "length", "end"]].values.tolist() == [[40 * MS, 10 * MS, 50 * MS]]
    assert g["kernel_before"].tolist() == ["long"]
    assert g["kernel_after"].tolist() == ["later"]
    assert lengths.tolist() == [10 * MS]


def test_stream_gaps_equal_starts_tie_broken_by_correlation():
    # two kernels with equal start and end; input order b2 then c1
    rows = [
        (1, 1, 0, 2 * MS, 2, "b2"),
        (1, 1, 0, 2 * MS, 1, "c1"),
        (1, 1, 5 * MS, 6 * MS, 3, "next"),
    ]
    g, _ = gaps_of(rows, 1 * MS)
    # sorted (start, end, corr): c1 (corr 1), b2 (corr 2), next
    # both end at 2 ms; the later row holding the latest end is b2 -> kernel_before b2
    # gap 5 - 2 = 3 ms
    assert g[["start", "length"]].values.tolist() == [[2 * MS, 3 * MS]]
    assert g["kernel_before"].tolist() == ["b2"]


def test_stream_gaps_equal_starts_different_ends():
    rows = [
        (1, 1, 0, 10 * MS, 1, "long"),
        (1, 1, 0, 1 * MS, 2, "short"),
        (1, 1, 20 * MS, 21 * MS, 3, "next"),
    ]
    g, _ = gaps_of(rows, 1 * MS)
    # order: short (end 1 ms), long (end 10 ms); gap from 10 ms to 20 ms = 10 ms, before = long
    assert g[["start", "length"]].values.tolist() == [[10 * MS, 10 * MS]]
    assert g["kernel_before"].tolist() == ["long"]


def test_zero_length_kernels_never_open_a_gap():
    rows = [
        (1, 1, 0, 10 * MS, 1, "busy"),
        (1, 1, 5 * MS, 5 * MS, 2, "zero"),   # zero-length inside busy time
        (1, 1, 10 * MS, 20 * MS, 3, "busy2"),
    ]
    g, lengths = gaps_of(rows, 0)
    # latest end stays 10 ms after the zero row; 10 - 10 = 0 -> no gap at all
    # (a previous-row rule would give 10 - 5 = 5 ms)
    assert len(g) == 0
    assert lengths.tolist() == []


def test_gap_at_threshold_not_kept_one_more_ns_kept():
    rows = [
        (1, 1, 0, 1 * MS, 1, "k0"),
        (1, 1, 2 * MS, 3 * MS, 2, "k1"),                 # gap 2 ms - 1 ms = 1,000,000 ns
        (1, 1, 4 * MS + 1, 5 * MS, 3, "k2"),             # gap 4,000,001 - 3,000,000 = 1,000,001 ns
    ]
    g, lengths = gaps_of(rows, 1_000_000)
    assert g["length"].tolist() == [1_000_001]
    assert g["kernel_before"].tolist() == ["k1"]
    # every positive gap is in all_lengths, kept or not
    assert sorted(lengths.tolist()) == [1_000_000, 1_000_001]


def test_stream_gaps_empty_frame():
    g, lengths = gaps.stream_gaps(gaps.kernels_in_window(kframe([]), 0, 10), 0)
    assert len(g) == 0 and lengths.size == 0
    assert list(g.columns) == ["pid", "stream_id", "start", "length", "end", "kernel_before", "kernel_after"]


# ---------------------------------------------------------------- buckets

def test_buckets_boundaries():
    lengths = [1_000_001, 5 * MS, 5 * MS + 1, 50 * MS, 50 * MS + 1]
    b = gaps.buckets(lengths)
    # <= 5 ms: 1,000,001 and 5,000,000 -> 2 gaps, 6,000,001 ns
    # (5, 50]: 5,000,001 and 50,000,000 -> 2 gaps, 55,000,001 ns
    # > 50 ms: 50,000,001 -> 1 gap
    assert b == {
        "gaps_le_5ms": 2, "gaps_le_5ms_ns": 6_000_001,
        "gaps_5_50ms": 2, "gaps_5_50ms_ns": 55_000_001,
        "gaps_gt_50ms": 1, "gaps_gt_50ms_ns": 50_000_001,
    }


# one stream, 1 ms kernels separated by gaps of 0.5, 1, 2, 5, 7, 50, 60 ms
BUCKET_STREAM = [
    (1, 1, 0, 1_000_000, 1, "k0"),
    (1, 1, 1_500_000, 2_500_000, 2, "k1"),        # gap 1.5 - 1.0 = 0.5 ms
    (1, 1, 3_500_000, 4_500_000, 3, "k2"),        # gap 3.5 - 2.5 = 1 ms
    (1, 1, 6_500_000, 7_500_000, 4, "k3"),        # gap 6.5 - 4.5 = 2 ms
    (1, 1, 12_500_000, 13_500_000, 5, "k4"),      # gap 12.5 - 7.5 = 5 ms
    (1, 1, 20_500_000, 21_500_000, 6, "k5"),      # gap 20.5 - 13.5 = 7 ms
    (1, 1, 71_500_000, 72_500_000, 7, "k6"),      # gap 71.5 - 21.5 = 50 ms
    (1, 1, 132_500_000, 133_500_000, 8, "k7"),    # gap 132.5 - 72.5 = 60 ms
]


@pytest.mark.parametrize("threshold, count, total", [
    (0, 7, 125_500_000),          # all: 0.5+1+2+5+7+50+60 = 125.5 ms
    (1 * MS, 5, 124_000_000),     # > 1 ms: 2+5+7+50+60 = 124 ms
    (5 * MS, 3, 117_000_000),     # > 5 ms: 7+50+60 = 117 ms
    (50 * MS, 1, 60_000_000),     # > 50 ms: 60 ms
    (100 * MS, 0, 0),             # none
])
def test_buckets_sum_to_totals_for_any_threshold(threshold, count, total):
    g, _ = gaps_of(BUCKET_STREAM, threshold)
    assert len(g) == count
    assert int(g["length"].sum()) == total
    b = gaps.buckets(g["length"].to_numpy())
    assert b["gaps_le_5ms"] + b["gaps_5_50ms"] + b["gaps_gt_50ms"] == count
    assert b["gaps_le_5ms_ns"] + b["gaps_5_50ms_ns"] + b["gaps_gt_50ms_ns"] == total


def test_buckets_at_1ms_threshold_by_hand():
    g, _ = gaps_of(BUCKET_STREAM, 1 * MS)
    # kept: 2, 5 | 7, 50 | 60 ms
    assert gaps.buckets(g["length"].to_numpy()) == {
        "gaps_le_5ms": 2, "gaps_le_5ms_ns": 7_000_000,     # 2 + 5 ms
        "gaps_5_50ms": 2, "gaps_5_50ms_ns": 57_000_000,    # 7 + 50 ms
        "gaps_gt_50ms": 1, "gaps_gt_50ms_ns": 60_000_000,  # 60 ms
    }


def test_buckets_empty():
    assert gaps.buckets([]) == {"gaps_le_5ms": 0, "gaps_le_5ms_ns": 0, "gaps_5_50ms": 0, "gaps_5_50ms_ns": 0,
                                "gaps_gt_50ms": 0, "gaps_gt_50ms_ns": 0}


# ---------------------------------------------------------------- roster

def test_roster_order_and_top_n():
    g = pd.DataFrame({
        "pid": [1, 1, 2, 1],
        "stream_id": [1, 2, 1, 1],
        "start": [100, 10, 5, 300],
        "length": [50, 70, 50, 20],
    })
    g["end"] = g["start"] + g["length"]
    top = gaps.roster(g, 3)
    # longest first: 70; then the two 50s, earlier start (5, pid 2) before 100
    assert list(zip(top["length"], top["start"])) == [(70, 10), (50, 5), (50, 100)]
    assert gaps.roster(g, 1)["length"].tolist() == [70]
    # N larger than the number of gaps returns them all: 70, 50, 50, 20
    assert gaps.roster(g, 20)["length"].tolist() == [70, 50, 50, 20]


def test_roster_is_head_of_stream_gaps():
    g, _ = gaps_of(BUCKET_STREAM, 0)
    top = gaps.roster(g, 2)
    # two longest gaps: 60 ms (after k6) and 50 ms (after k5)
    assert top["length"].tolist() == [60 * MS, 50 * MS]
    assert top["kernel_before"].tolist() == ["k6", "k5"]


def test_json_scalars_non_finite_become_null():
    import math

    import numpy as np

    from pipeline.io import plain_scalar as _plain
    assert [_plain(v) for v in (math.inf, -math.inf, math.nan, np.float64("inf"), np.int64(3), 2.5)] == \
        [None, None, None, None, 3, 2.5]
