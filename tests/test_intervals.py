"""Hand-computed checks of pipeline.analysis.intervals (pure int64 interval math)."""
from __future__ import annotations

import numpy as np

from pipeline.analysis import intervals as iv


def pairs(result):
    """(starts, ends) arrays -> list of (start, end) Python int tuples."""
    s, e = result
    return [(int(a), int(b)) for a, b in zip(s, e)]


# ---------------------------------------------------------------- union

def test_union_overlapping():
    # [0,10) and [5,15) overlap on [5,10) -> one run [0,15)
    assert pairs(iv.union([0, 5], [10, 15])) == [(0, 15)]


def test_union_touching_merges():
    # [0,10) ends exactly where [10,20) begins -> merged (non-touching output)
    assert pairs(iv.union([0, 10], [10, 20])) == [(0, 20)]


def test_union_nested():
    # [10,20) and [30,40) lie inside [0,100); [50,150) extends it to 150
    assert pairs(iv.union([0, 10, 30], [100, 20, 40])) == [(0, 100)]
    assert pairs(iv.union([0, 10, 30, 50], [100, 20, 40, 150])) == [(0, 150)]


def test_union_nested_then_disjoint():
    # [0,100) swallows [10,20); [200,210) is after 100 -> separate run
    assert pairs(iv.union([0, 10, 200], [100, 20, 210])) == [(0, 100), (200, 210)]


def test_union_zero_length_and_negative_dropped():
    # [15,15) is empty and [50,40) is negative: neither covers anything, so the
    # hole [10,20) stays a hole and nothing appears near 40..50
    assert pairs(iv.union([0, 15, 20, 50], [10, 15, 30, 40])) == [(0, 10), (20, 30)]
    # only empty rows -> empty result
    assert pairs(iv.union([5, 7], [5, 7])) == []


def test_union_unsorted_input():
    # sorted by start: [0,10) [5,12) [20,30) -> [0,12) [20,30)
    assert pairs(iv.union([20, 0, 5], [30, 10, 12])) == [(0, 12), (20, 30)]


def test_union_length():
    # union of [0,10) [5,15) [20,25) = [0,15) + [20,25) = 15 + 5 = 20
    assert iv.union_length([0, 5, 20], [10, 15, 25]) == 20


def test_union_empty_input():
    assert pairs(iv.union([], [])) == []


# ---------------------------------------------------------------- clip

def test_clip_straddlers_cut_outsiders_dropped():
    w0, w1 = 0, 100
    starts = [-5, 95, -10, 200, -20, 100, -5, 40]
    ends = [5, 105, 200, 300, -10, 110, 0, 60]
    # [-5,5)    straddles w0          -> [0,5)
    # [95,105)  straddles w1          -> [95,100)
    # [-10,200) covers the whole window -> [0,100)
    # [200,300) fully after           -> dropped
    # [-20,-10) fully before          -> dropped
    # [100,110) starts at w1          -> dropped (empty after clip)
    # [-5,0)    ends at w0            -> dropped (empty after clip)
    # [40,60)   inside                -> kept as is
    assert pairs(iv.clip(starts, ends, w0, w1)) == [(0, 5), (95, 100), (0, 100), (40, 60)]


# ---------------------------------------------------------------- subtract

def test_subtract_holes():
    # [0,100) minus [10,20) and [30,40) -> [0,10) [20,30) [40,100)
    assert pairs(iv.subtract([0], [100], [10, 30], [20, 40])) == [(0, 10), (20, 30), (40, 100)]


def test_subtract_b_starts_before_a():
    # [10,20) minus [0,15) -> [15,20)
    assert pairs(iv.subtract([10], [20], [0], [15])) == [(15, 20)]


def test_subtract_b_covers_a():
    # [10,20) minus [0,50) -> nothing
    assert pairs(iv.subtract([10], [20], [0], [50])) == []


def test_difference_of_runs_is_subtract_without_the_unions():
    # runs [0,10) [20,100) minus runs [5,25) [30,40): [0,5) [25,30) [40,100)
    assert pairs(iv.difference([0, 20], [10, 100], [5, 30], [25, 40])) == [(0, 5), (25, 30), (40, 100)]
    assert pairs(iv.difference([0, 20], [10, 100], [], [])) == [(0, 10), (20, 100)]


def test_clip_runs_cuts_the_runs_to_the_window():
    # runs [0,10) [20,30) [40,50) in W [5,45): [5,10) [20,30) [40,45) -- as union(clip(...)) of the kernels
    runs = ([0, 20, 40], [10, 30, 50])
    assert pairs(iv.clip_runs(*runs, 5, 45)) == [(5, 10), (20, 30), (40, 45)]
    # W edges on the runs' edges: [10, 20) holds none, [10, 21) the first ns of [20,30)
    assert pairs(iv.clip_runs(*runs, 10, 20)) == [] and pairs(iv.clip_runs(*runs, 10, 21)) == [(20, 21)]
    assert pairs(iv.clip_runs(*runs, 25, 25)) == [] and pairs(iv.clip_runs(*runs, 30, 25)) == []
    assert pairs(iv.clip_runs(*runs, 22, 28)) == [(22, 28)] and pairs(iv.clip_runs(*runs, -5, 99)) == pairs(runs)


def test_subtract_empty_sides():
    # nothing to subtract -> a (unioned)
    assert pairs(iv.subtract([0, 5], [10, 20], [], [])) == [(0, 20)]
    # nothing to subtract from -> nothing
    assert pairs(iv.subtract([], [], [0], [10])) == []


def test_subtract_overlapping_a_unioned_first():
    # a = [0,50) u [40,60) = [0,60); minus [45,55) -> [0,45) [55,60)
    assert pairs(iv.subtract([0, 40], [50, 60], [45], [55])) == [(0, 45), (55, 60)]


def test_subtract_b_ends_after_a():
    # [0,100) minus [90,200) -> [0,90)
    assert pairs(iv.subtract([0], [100], [90], [200])) == [(0, 90)]


# ---------------------------------------------------------------- intersect

def test_intersect_basic():
    # a = [0,10) [20,30); b = [5,25) -> [5,10) [20,25)
    assert pairs(iv.intersect([0, 20], [10, 30], [5], [25])) == [(5, 10), (20, 25)]


def test_intersect_touching_is_empty():
    # [0,10) and [10,20) share no ns
    assert pairs(iv.intersect([0], [10], [10], [20])) == []


def test_intersect_one_a_many_b():
    # a = [0,100); b = [10,20) [30,40) [90,120) -> [10,20) [30,40) [90,100)
    assert pairs(iv.intersect([0], [100], [10, 30, 90], [20, 40, 120])) == [(10, 20), (30, 40), (90, 100)]


def test_intersect_empty():
    assert pairs(iv.intersect([], [], [0], [10])) == []
    assert pairs(iv.intersect([0], [10], [], [])) == []


# ---------------------------------------------------------------- overlap_with_each

def test_overlap_with_each():
    runs_s, runs_e = [10, 30], [20, 40]  # disjoint runs [10,20) [30,40)
    q_s = [0, 15, 20, 12, 0, 35, 40]
    q_e = [100, 35, 30, 18, 5, 100, 50]
    expected = [
        20,  # [0,100)  covers both runs: 10 + 10
        10,  # [15,35)  [15,20)=5 + [30,35)=5
        0,   # [20,30)  exactly the hole between the runs
        6,   # [12,18)  inside the first run: 18 - 12
        0,   # [0,5)    before everything
        5,   # [35,100) tail of the second run: 40 - 35
        0,   # [40,50)  starts where the last run ends
    ]
    assert iv.overlap_with_each(q_s, q_e, runs_s, runs_e).tolist() == expected


def test_overlap_with_each_no_runs():
    assert iv.overlap_with_each([0, 5], [10, 6], [], []).tolist() == [0, 0]


# ---------------------------------------------------------------- stream_gaps

def test_stream_gaps_latest_end_semantics():
    # kernels in start order: long [0,40), short [10,20) inside it, later [50,60)
    # latest end before row 1 = 40, before row 2 = max(40,20) = 40
    # gaps: 10 - 40 = -30 (none), 50 - 40 = 10 (from the LONG kernel's end; a
    # previous-row rule would wrongly say 50 - 20 = 30)
    g_start, g_len, after = iv.stream_gaps([0, 10, 50], [40, 20, 60], 5)
    assert g_start.tolist() == [40]
    assert g_len.tolist() == [10]
    assert after.tolist() == [2]


def test_stream_gaps_threshold_is_strict():
    # same stream: the only gap is 50 - 40 = 10
    assert iv.stream_gaps([0, 10, 50], [40, 20, 60], 10)[1].tolist() == []  # 10 > 10 is false
    assert iv.stream_gaps([0, 10, 50], [40, 20, 60], 9)[1].tolist() == [10]  # 10 > 9


def test_stream_gaps_zero_length_inside_busy_time():
    # [0,100), zero-length [50,50), [100,200): the zero-length row ends at 50
    # but the latest end stays 100, and 100 - 100 = 0 -> no gap
    assert iv.stream_gaps([0, 50, 100], [100, 50, 200], 0)[1].tolist() == []


def test_stream_gaps_short_input():
    for s, e in (([], []), ([0], [10])):
        g_start, g_len, after = iv.stream_gaps(s, e, 0)
        assert g_start.size == g_len.size == after.size == 0


# ---------------------------------------------------------------- latest_end_index

def test_latest_end_index():
    # ends 40, 20, 60: running max 40, 40, 60 held by rows 0, 0, 2
    assert iv.latest_end_index([40, 20, 60]).tolist() == [0, 0, 2]
    # ties keep the later row: ends 10, 10, 5 -> rows 0, 1, 1
    assert iv.latest_end_index([10, 10, 5]).tolist() == [0, 1, 1]
    assert iv.latest_end_index([]).tolist() == []


# ---------------------------------------------------------------- gaps_of

def test_gaps_of_gives_the_gaps_the_rows_around_them_and_every_positive_gap():
    # [0,40), [10,20) inside it, [50,55), [60,70): running max 40, 40, 55, 70, held by rows 0, (0), 2, 3
    # differences to the next start: 10-40=-30, 50-40=10, 60-55=5 -> over 5: the gap [40, 50) only,
    # opened by row 0 (the long kernel, not row 1), closed by row 2
    found = iv.gaps_of([0, 10, 50, 60], [40, 20, 55, 70], 5)
    assert (found.start.tolist(), found.length.tolist(), found.after.tolist()) == ([40], [10], [2])
    assert found.before.tolist() == [0] and found.positive.tolist() == [10, 5] and found.last == 3
    # ties keep the later row (as latest_end_index): ends 10, 10, 5 then a start at 30 -> the gap [10, 30)
    # opened by row 1, and row 1 holds the latest end of all but the last row, row 3 that of all
    found = iv.gaps_of([0, 0, 2, 30], [10, 10, 5, 31], 0)
    assert found.before.tolist() == [1] and found.after.tolist() == [3] and found.last == 3
    assert iv.gaps_of([0, 0, 2], [10, 10, 5], 0).last == 1
    assert iv.gaps_of([7], [9], 0).last == 0 and iv.gaps_of([], [], 0).last == -1


# ---------------------------------------------------------------- all_gaps

def test_all_gaps_positive_only_no_threshold():
    starts = [0, 5, 20, 20, 30]
    ends = [10, 8, 25, 20, 31]
    # latest end before rows 1..4: 10, 10, 25, 25
    # differences: 5-10=-5, 20-10=10, 20-25=-5, 30-25=5 -> positives [10, 5]
    assert iv.all_gaps(starts, ends).tolist() == [10, 5]
    assert iv.all_gaps([0], [1]).tolist() == []


def test_as_ns_dtype():
    assert iv.as_ns([1, 2]).dtype == np.int64
