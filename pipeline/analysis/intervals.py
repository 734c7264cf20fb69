"""Pure interval math on int64 nanosecond arrays.

Every function here takes plain numpy arrays of ``int64`` nanoseconds and returns
numpy arrays or Python ints. Intervals are half-open ``[start, end)``; rows with
``end <= start`` have zero length and cover nothing. Nothing here knows about
Nsight Systems, pandas or Dask, so each function can be tested by hand.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

I64 = np.int64


def as_ns(values) -> np.ndarray:
    """Return ``values`` as a contiguous ``int64`` array (nanoseconds)."""
    return np.ascontiguousarray(np.asarray(values, dtype=I64))


def clip(starts: np.ndarray, ends: np.ndarray, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """Clip intervals to the window ``[w0, w1)`` and drop those left empty.

    Intervals that straddle an edge are cut at the edge, never dropped
    (docs/definitions.md#kernel-interval). Shapes: two ``(n,)`` int64 arrays in, two ``(m,)``
    arrays out with ``m <= n``, order preserved.
    """
    s = np.maximum(as_ns(starts), I64(w0))
    e = np.minimum(as_ns(ends), I64(w1))
    keep = e > s
    return s[keep], e[keep]


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge intervals into sorted, disjoint, non-touching ``[start, end)`` runs.

    Zero-length and negative rows are dropped. Touching intervals (``a.end ==
    b.start``) are merged. Returns two ``(k,)`` int64 arrays sorted by start.
    """
    s = as_ns(starts)
    e = as_ns(ends)
    keep = e > s
    if not keep.all():  # no copy when every row counts (the usual case)
        s, e = s[keep], e[keep]
    if s.size == 0:
        return s.copy(), e.copy()
    if s.size > 1 and bool(np.any(s[1:] < s[:-1])):
        # The order among equal starts does not change the runs, so a stable sort on
        # start alone will do (and none at all for input already in start order).
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    # A new run starts where the interval begins after everything before it ended.
    new_run = np.empty(s.size, dtype=bool)
    new_run[0] = True
    np.greater(s[1:], run_end[:-1], out=new_run[1:])
    # a run ends where the next one starts (and the last at the last row): masks, no index arrays
    run_s = s[new_run]
    run_e = np.empty_like(run_s)
    run_e[:-1] = run_end[:-1][new_run[1:]]
    run_e[-1] = run_end[-1]
    return run_s, run_e


def clip_runs(starts: np.ndarray, ends: np.ndarray, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`clip` of sorted disjoint runs (the output of :func:`union`), found by two binary searches: the
    same arrays, ``union(clip(x))`` for the runs of ``union(x)`` (one set, one way to write it)."""
    s, e = as_ns(starts), as_ns(ends)
    if w1 <= w0:
        return s[:0].copy(), e[:0].copy()
    lo = int(np.searchsorted(e, w0, side="right"))  # the first run ending after w0
    hi = max(int(np.searchsorted(s, w1, side="left")), lo)  # past the last run starting before w1
    s, e = s[lo:hi].copy(), e[lo:hi].copy()
    if s.size:
        s[0], e[-1] = max(int(s[0]), w0), min(int(e[-1]), w1)
    return s, e


def cap_runs(starts: np.ndarray, ends: np.ndarray, max_runs: int) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_runs`` (>= 1) runs covering sorted disjoint runs: when there are more, the
    shortest holes between neighbours are closed (ties: the earlier hole is closed first), so every long hole
    stays open. A picture of a lane, not a measure: the closed holes count as covered. Two ``(k,)``
    int64 arrays, ``k <= max(max_runs, 1)``; input with few enough runs comes back as it is."""
    s, e = as_ns(starts), as_ns(ends)
    if s.size <= max_runs:
        return s, e
    keep_n = max(int(max_runs), 1) - 1
    holes = s[1:] - e[:-1]
    keep = _longest(holes, keep_n)
    return np.concatenate(([s[0]], s[1:][keep])), np.concatenate((e[:-1][keep], [e[-1]]))


def _longest(values: np.ndarray, n: int) -> np.ndarray:
    """Sorted indices of the ``n`` (< ``values.size``) largest ``values``, ties going to the later
    index: the last ``n`` of a stable ascending argsort, found by one partition (linear) instead."""
    if n <= 0:
        return np.zeros(0, np.int64)
    cut = values.size - n
    threshold = np.partition(values, cut)[cut]
    keep = values > threshold
    tied = np.flatnonzero(values == threshold)
    keep[tied[tied.size - (n - int(np.count_nonzero(keep))):]] = True
    return np.flatnonzero(keep)


def total_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Sum of ``end - start`` over disjoint intervals, in ns (int)."""
    return int(np.sum(as_ns(ends) - as_ns(starts), dtype=I64))


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Length in ns of the union of possibly overlapping intervals."""
    return total_length(*union(starts, ends))


def subtract(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """Set difference ``union(a) - union(b)`` as sorted disjoint intervals.

    Used for copy-only time: copy-engine union minus kernel union. Both inputs
    may overlap internally; they are unioned first.
    """
    return difference(*union(a_starts, a_ends), *union(b_starts, b_ends))


def difference(a_s, a_e, b_s, b_e) -> tuple[np.ndarray, np.ndarray]:
    """:func:`subtract` of runs already sorted and disjoint (outputs of :func:`union`): no union again."""
    a_s, a_e, b_s, b_e = as_ns(a_s), as_ns(a_e), as_ns(b_s), as_ns(b_e)
    if a_s.size == 0 or b_s.size == 0:
        return a_s, a_e
    # Complement of b, bounded by a's extent, intersected with a.
    lo = min(int(a_s[0]), int(b_s[0]))
    hi = max(int(a_e[-1]), int(b_e[-1]))
    c_s = np.concatenate(([lo], b_e)).astype(I64)
    c_e = np.concatenate((b_s, [hi])).astype(I64)
    return intersect(a_s, a_e, c_s, c_e)


def intersect(a_starts, a_ends, b_starts, b_ends) -> tuple[np.ndarray, np.ndarray]:
    """Intersection of two sets of *disjoint sorted* intervals.

    Returns the sorted disjoint pieces covered by both. Linear in the total
    number of intervals (two-pointer sweep written with ``searchsorted``).
    """
    a_s, a_e = as_ns(a_starts), as_ns(a_ends)
    b_s, b_e = as_ns(b_starts), as_ns(b_ends)
    if a_s.size == 0 or b_s.size == 0:
        return a_s[:0], a_e[:0]
    # For each a-interval, the b-intervals that may overlap it are those with
    # b_e > a_s and b_s < a_e: a contiguous index range in sorted disjoint b.
    lo = np.searchsorted(b_e, a_s, side="right")
    hi = np.searchsorted(b_s, a_e, side="left")
    counts = np.maximum(hi - lo, 0)
    a_idx = np.repeat(np.arange(a_s.size), counts)
    if a_idx.size == 0:
        return a_s[:0], a_e[:0]
    offsets = np.arange(a_idx.size) - np.repeat(np.cumsum(counts) - counts, counts)
    b_idx = np.repeat(lo, counts) + offsets
    s = np.maximum(a_s[a_idx], b_s[b_idx])
    e = np.minimum(a_e[a_idx], b_e[b_idx])
    keep = e > s
    return s[keep], e[keep]


def overlap_with_each(query_starts, query_ends, run_starts, run_ends) -> np.ndarray:
    """For each query interval, the ns it shares with a set of disjoint runs.

    ``run_*`` must be sorted and disjoint (the output of :func:`union`). Returns
    a ``(n_query,)`` int64 array. Computed from a prefix sum of run lengths, so
    it costs ``O((n + k) log k)``.
    """
    q_s, q_e = as_ns(query_starts), as_ns(query_ends)
    r_s, r_e = as_ns(run_starts), as_ns(run_ends)
    if q_s.size == 0 or r_s.size == 0:
        return np.zeros(q_s.size, dtype=I64)
    prefix = prefix_sums(r_e - r_s)  # one for both ends
    return _covered_before(q_e, r_s, r_e, prefix) - _covered_before(q_s, r_s, r_e, prefix)


def prefix_sums(values: np.ndarray) -> np.ndarray:
    """``[0, v0, v0 + v1, ...]``: the sums of ``values`` before each position and of them all, int64 (one array,
    no temporary)."""
    out = np.empty(values.size + 1, dtype=I64)
    out[0] = 0
    np.cumsum(values, dtype=I64, out=out[1:])
    return out


def _covered_before(t: np.ndarray, r_s: np.ndarray, r_e: np.ndarray, prefix: np.ndarray) -> np.ndarray:
    """Length of the runs' coverage on ``(-inf, t)`` for each ``t`` (``prefix``: the runs' lengths summed, 0
    first)."""
    i = np.searchsorted(r_s, t, side="right")  # runs starting at or before t
    covered = prefix[i]
    # The last of those runs may extend past t: remove its part after t.
    last = i - 1
    has = last >= 0
    excess = np.zeros(t.size, dtype=I64)
    excess[has] = np.maximum(r_e[last[has]] - t[has], 0)
    return covered - excess


class Gaps(NamedTuple):
    """The gaps of one start-ordered stream (:func:`gaps_of`), positions into its rows: ``start``, ``length``
    (int64 ns) and ``after`` (the row that ends it) of each gap longer than the threshold, as :func:`stream_gaps`
    gives them; ``before``: the row that opens each of those gaps (:func:`latest_end_index` at the row before
    ``after``); ``positive``: every positive gap length, no threshold (:func:`all_gaps`); ``last``: the row holding
    the latest end (:func:`latest_end_index` at the last row; -1 for no row)."""

    start: np.ndarray
    length: np.ndarray
    after: np.ndarray
    before: np.ndarray
    positive: np.ndarray
    last: int


def gaps_of(starts, ends, min_gap_ns: int) -> Gaps:
    """:func:`stream_gaps`, :func:`all_gaps` and the rows :func:`latest_end_index` names for them, from one
    running maximum of the ends (kernels sorted by (start, end, correlationId))."""
    s, e = as_ns(starts), as_ns(ends)
    empty = np.zeros(0, dtype=I64)
    if s.size < 2:
        return Gaps(empty, empty, empty, empty, empty, s.size - 1)
    run_max = np.maximum.accumulate(e)
    length = s[1:] - run_max[:-1]
    keep = np.flatnonzero(length > min_gap_ns)
    # the rows that hold the running maximum (ties: the later row); each position's is the last of them up to it
    holders = np.flatnonzero(e >= run_max)
    before = holders[np.searchsorted(holders, keep, side="right") - 1].astype(I64, copy=False)
    return Gaps(run_max[:-1][keep], length[keep], keep + 1, before, length[length > 0], int(holders[-1]))


def stream_gaps(starts, ends, min_gap_ns: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Gaps on one stream whose kernels are already in start order.

    Kernels must be sorted by (start, end, correlationId). A gap runs from the
    latest end seen so far to the next kernel's start (docs/definitions.md#per-stream-gaps),
    so overlapping or zero-length rows never make a gap out of busy time.
    Kept when strictly longer than ``min_gap_ns``.

    Returns ``(gap_start_ns, gap_length_ns, index_after)`` where ``index_after``
    is the position of the kernel that ends the gap; the kernel before it is the
    one whose end is the latest end so far (see :func:`latest_end_index`).
    """
    found = gaps_of(starts, ends, min_gap_ns)
    return found.start, found.length, found.after


def latest_end_index(ends: np.ndarray) -> np.ndarray:
    """Index of the row holding the running maximum of ``ends`` at each row.

    Ties keep the later row (the most recent kernel that reached that end).
    Shape ``(n,)`` int64.
    """
    e = as_ns(ends)
    if e.size == 0:
        return np.zeros(0, dtype=I64)
    run_max = np.maximum.accumulate(e)
    is_new_max = e >= run_max
    idx = np.where(is_new_max, np.arange(e.size), 0)
    return np.maximum.accumulate(idx)


def all_gaps(starts, ends) -> np.ndarray:
    """Lengths (ns) of every positive gap on one start-ordered stream, no threshold.

    Used for the sub-threshold ``launch`` sliver count. Shape ``(g,)`` int64.
    """
    return gaps_of(starts, ends, np.iinfo(I64).max).positive
