"""The rows' own run (pipeline/load/integrity.py ``_row_extent``, issue 44 point 1): found table by table
(one sortedness check, a sort only of a table out of order, one diff), never from the unique of the union
of every table, with exactly the result of the plain definition kept here (:func:`reference_extent`, the
implementation before issue 44: ``np.unique`` of every timestamp, then the run grown from the median)."""
from __future__ import annotations

import numpy as np
import pytest

from pipeline.load import integrity
from pipeline.load.integrity import (BODY_GAP_FACTOR, BODY_GAP_MIN_NS, ROW_GAP_FACTOR, ROW_GAP_MIN_NS,
                                     _continuation, _row_extent)

INT64_MAX = np.iinfo(np.int64).max


def reference_extent(stamps, median, gap_min=BODY_GAP_MIN_NS, factor=BODY_GAP_FACTOR):
    """The plain definition: the distinct timestamps of every array together, sorted, and the run grown
    outwards from the first at or after ``median`` (None: the middle one) while each step is no longer
    than ``gap_min``, ``factor`` x the run so far, or the extent of the rows it leads to."""
    stamps = [s for s in stamps if s.size]
    if not stamps:
        return None
    lo, hi = min(int(s.min()) for s in stamps), max(int(s.max()) for s in stamps)
    if hi - lo <= gap_min:
        return lo, hi
    v = np.unique(np.concatenate(stamps))
    f = v.astype(np.float64)
    d = np.diff(f)
    cand = np.flatnonzero(d > gap_min)

    def beyond_up(j):
        longer = cand[(cand > j) & (d[cand] > d[j])]
        return f[int(longer[0]) if longer.size else v.size - 1] - f[j + 1]

    def beyond_down(j):
        longer = cand[(cand < j) & (d[cand] > d[j])]
        return f[j] - f[int(longer[-1]) + 1 if longer.size else 0]

    a = b = int(np.clip(np.searchsorted(v, median if median is not None else v[v.size // 2]), 0, v.size - 1))
    while True:
        new_b = v.size - 1
        for j in cand[cand >= b]:
            if d[j] > max(gap_min, factor * (f[j] - f[a]), beyond_up(int(j))):
                new_b = int(j)
                break
        new_a = 0
        for j in cand[cand < a][::-1]:
            if d[j] > max(gap_min, factor * (f[new_b] - f[j + 1]), beyond_down(int(j))):
                new_a = int(j) + 1
                break
        if (new_a, new_b) == (a, b):
            return int(v[a]), int(v[b])
        a, b = new_a, new_b


def random_tables(rng: np.random.Generator, gap_min: int) -> list[np.ndarray]:
    """A few tables of timestamps in bursts: steps inside a burst mostly below ``gap_min``, between bursts
    anything from below it to far beyond (equal to it, one ns either side, hours, an INT64_MAX end); on a
    small clock or an epoch clock (where float64 rounds the steps); duplicates within and across tables;
    some tables shuffled or nearly sorted (ends); some empty."""
    base = int(rng.choice([0, 10**10, 1_700_000_000 * 10**9, -5 * 10**12]))
    bursts, t = [], base
    for _ in range(int(rng.integers(1, 7))):
        n = int(rng.integers(1, 40))
        inner = rng.integers(0, max(2, gap_min // int(rng.choice([1, 3, 50]))), n).astype(object)
        if rng.random() < 0.2:
            inner[int(rng.integers(0, n))] = gap_min + int(rng.integers(-600, 600))  # at the threshold
        burst = np.minimum(t + np.cumsum(inner), 4 * 10**18).astype(np.int64)
        bursts.append(burst)
        step = [int(rng.integers(0, gap_min + 1)), gap_min, gap_min + 1, gap_min + int(rng.integers(-2000, 2000)),
                int(rng.integers(gap_min, 5 * gap_min + 1)), int(rng.integers(5 * gap_min, 1000 * gap_min + 1)),
                int(rng.integers(1, 3_600_000)) * gap_min][int(rng.integers(0, 7))]
        t = min(int(burst[-1]) + step, 4 * 10**18)  # far, within int64
    pool = np.concatenate(bursts).astype(np.int64)
    tables = []
    for _ in range(int(rng.integers(1, 6))):
        if rng.random() < 0.15:
            tables.append(np.empty(0, dtype=np.int64))
            continue
        s = np.sort(rng.choice(pool, int(rng.integers(1, pool.size + 5))))
        kind = rng.random()
        if kind < 0.25:
            s = rng.permutation(s)
        elif kind < 0.5:  # ends: starts plus durations, nearly sorted
            s = s + rng.integers(0, max(1, gap_min // 2), s.size)
        if rng.random() < 0.1:
            s = np.append(s, INT64_MAX)  # a stray end
        if rng.random() < 0.05:
            s = np.append(s, np.iinfo(np.int64).min + int(rng.integers(0, 10)))
        tables.append(s.astype(np.int64))
    return tables


def random_median(rng: np.random.Generator, tables: list[np.ndarray]) -> float | None:
    values = np.concatenate(tables)
    if rng.random() < 0.3 or not values.size:
        return None
    kind = rng.random()
    if kind < 0.4:
        return float(np.median(rng.choice(values, max(1, values.size // 2))))
    if kind < 0.7:
        return float(rng.choice(values))
    if kind < 0.8:
        return float(values.min()) - 1e12
    if kind < 0.9:
        return float(values.max()) + 1e12
    return float(rng.uniform(float(values.min()), float(values.max())))


@pytest.mark.parametrize(("gap_min", "factor"), [(BODY_GAP_MIN_NS, BODY_GAP_FACTOR), (ROW_GAP_MIN_NS, ROW_GAP_FACTOR),
                                                 (10, 1), (1_000, 2), (0, 1)])
def test_row_extent_is_the_plain_definition(gap_min, factor):
    rng = np.random.default_rng(44 + gap_min)
    grown = 0
    for case in range(700):
        tables = random_tables(rng, max(gap_min, 1))
        median = random_median(rng, tables)
        want = reference_extent(tables, median, gap_min, factor)
        got = _row_extent([t.copy() for t in tables], median, gap_min, factor)
        assert got == want, (case, median, tables)
        if want is not None and want != (min(int(t.min()) for t in tables if t.size),
                                         max(int(t.max()) for t in tables if t.size)):
            grown += 1
    assert grown > 100  # the cases reach the rule (the run is not always everything)


@pytest.mark.parametrize("piece", [1, 3, 16])
def test_row_extent_in_pieces_is_the_plain_definition(monkeypatch, piece):
    """Tables out of order are sorted piece by piece (:data:`pipeline.arrays.SCAN_ROWS` values each, here a
    few) and long steps found piece by piece, never a sorted copy of the whole table: the same result."""
    from pipeline import arrays

    monkeypatch.setattr(arrays, "SCAN_ROWS", piece)
    monkeypatch.setattr(integrity, "SCAN_ROWS", piece)
    sorted_sizes = []
    real_sort = np.sort

    def watch(a, *args, **kwargs):
        sorted_sizes.append(np.asarray(a).size)
        return real_sort(a, *args, **kwargs)

    rng = np.random.default_rng(53 + piece)
    for case in range(300):
        tables = random_tables(rng, BODY_GAP_MIN_NS)
        median = random_median(rng, tables)
        want = reference_extent(tables, median)
        monkeypatch.setattr(integrity.np, "sort", watch)
        got = _row_extent([t.copy() for t in tables], median)
        monkeypatch.setattr(integrity.np, "sort", real_sort)
        assert got == want, (case, median, tables)
        if median is not None:  # with a median (Nsight exports) no table is sorted whole
            assert max(sorted_sizes, default=0) <= piece, case
        sorted_sizes.clear()


def test_median_and_first_at_or_after_are_numpys():
    """The kernels' median read in place when they are in order, and the first timestamp at or after it
    found with only the values near it in float64: numpy's ``np.median`` and ``np.searchsorted`` (which
    compares in float64, where epoch-clock timestamps round)."""
    rng = np.random.default_rng(11)
    for case in range(2000):
        base = int(rng.choice([0, 10**9, 1_700_000_000 * 10**9, 2**62, INT64_MAX - 10**6, -2**63]))
        values = np.sort(base + rng.integers(0, int(rng.choice([10, 3_000, 10**7])), int(rng.integers(1, 60))))
        values = values.astype(np.int64)
        assert integrity._median(values) == float(np.median(values)), case
        shuffled = rng.permutation(values)
        assert integrity._median(shuffled) == float(np.median(shuffled)), case
        median = float(np.median(values)) + float(rng.choice([0, 0.5, -0.5, 1024, -2048, 5000]))
        assert integrity._first_at_or_after(values, median) == int(np.searchsorted(values, median)), case
    assert integrity._median(np.empty(0, np.int64)) is None


def test_row_extent_on_hand_made_tables():
    s = 1_000_000_000
    kernels = np.array([10 * s, 11 * s, 12 * s], dtype=np.int64)
    ends = np.array([11 * s + 5, 10 * s + 7, 12 * s + 3, 12 * s + 3], dtype=np.int64)  # out of order, repeated
    stale = np.array([2 * s, 12 * s + 3], dtype=np.int64)  # 8 s before everything else; a shared end
    stray = np.array([INT64_MAX], dtype=np.int64)
    stamps = [kernels, ends, stale, stray, np.empty(0, dtype=np.int64)]
    assert _row_extent(stamps, 11e9) == (10 * s, 12 * s + 3) == reference_extent(stamps, 11e9)
    # the middle of the 8 distinct timestamps (2 s, 10 s, 10 s + 7, 11 s, 11 s + 5, 12 s, 12 s + 3, INT64_MAX),
    # the 5th, 11 s + 5, is in the body
    assert _row_extent(stamps, None) == (10 * s, 12 * s + 3) == reference_extent(stamps, None)
    # a pause no longer than the work after it is crossed: 10..12 s, a 5 s pause, 17..25 s (steps of 1 s)
    later = np.arange(17, 26, dtype=np.int64) * s  # every second
    assert _row_extent([kernels, later], 11e9) == (10 * s, 25 * s) == reference_extent([kernels, later], 11e9)
    # ... not a pause longer than the work on both sides: 10..12 s, 5 s, then 2 timestamps 1 s apart
    assert _row_extent([kernels, later[:2]], 11e9) == (10 * s, 12 * s) == reference_extent([kernels, later[:2]], 11e9)
    assert _row_extent([], 1.0) is None and _row_extent([np.empty(0, dtype=np.int64)], None) is None
    # the input arrays are not changed (an out-of-order table is sorted into a copy)
    assert ends.tolist() == [11 * s + 5, 10 * s + 7, 12 * s + 3, 12 * s + 3]


def test_row_extent_never_takes_the_unique_of_the_union(monkeypatch):
    """The cost of issue 44: ``np.unique`` over every table's timestamps (hash-based in numpy 2, seconds on
    millions of timestamps). With a median (Nsight exports), nothing is merged across tables at all."""
    rng = np.random.default_rng(7)
    starts = np.cumsum(rng.integers(1, 50_000, 200_000)).astype(np.int64) + 10**10
    ends = starts + rng.integers(1, 200_000, starts.size)
    stale = np.array([10**9], dtype=np.int64)
    want = reference_extent([starts, ends, stale], float(np.median(starts)))

    def refuse(*args, **kwargs):
        raise AssertionError("np.unique called")

    concatenated = []
    real_concatenate = np.concatenate

    def watch(arrays, *args, **kwargs):
        out = real_concatenate(arrays, *args, **kwargs)
        concatenated.append(out.size)
        return out

    monkeypatch.setattr(np, "unique", refuse)
    monkeypatch.setattr(integrity.np, "concatenate", watch)
    assert _row_extent([starts, ends, stale], float(np.median(starts))) == want
    assert max(concatenated) < 100  # only the runs' bounds are ever put together


def test_continuation_is_unchanged_by_repeats_and_order():
    s = 1_000_000_000
    beyond = np.array([5 * s, 3 * s, 4 * s, 3 * s, 9 * s], dtype=np.int64)
    assert _continuation(beyond, 2 * s, s) == 5 * s  # 3, 4, 5 continue from 2; 9 is 4 s away
    assert _continuation(-beyond, -2 * s, s) == -5 * s  # the other side
    assert _continuation(np.array([9 * s], dtype=np.int64), 2 * s, s) is None


@pytest.mark.parametrize("base", [10**10, 1_700_000_000 * 10**9])
def test_runs_of_a_table_nearly_in_order_are_found_without_sorting_it(monkeypatch, base):
    """A table out of order by less than the threshold (ends in start order) has its runs and its first
    value at or after the median found without a sort (:func:`integrity._unsorted_runs`,
    :func:`integrity._least_at_or_after`), here a few values at a time: exactly those of the sorted table
    (:func:`integrity._table_runs`, :func:`integrity._first_at_or_after`, a plain second computation), with
    steps just below, at and just above the threshold and the float64 margin, on a small clock and on an
    epoch clock where float64 rounds them. A table out of order by more is left to the sort (None)."""
    monkeypatch.setattr(integrity, "SCAN_ROWS", 4)
    gap = BODY_GAP_MIN_NS
    rng = np.random.default_rng(base % 1000)
    margin = integrity._FLOAT_MARGIN_NS
    for case in range(300):
        steps = rng.choice([1, 1000, gap // 3, gap - margin, gap - margin + 1, gap - 1, gap, gap + 1, gap + 300,
                            gap + margin, 5 * gap], int(rng.integers(1, 30)))
        starts = base + np.cumsum(np.concatenate(([0], steps))).astype(np.int64)
        ends = starts + rng.integers(0, gap // 2, starts.size)  # out of order by less than half a second
        ordered = np.sort(ends)
        assert integrity._unsorted_runs(ends, gap) is not None or integrity.is_sorted(ends)
        found = integrity._unsorted_runs(ends, gap)
        want = integrity._table_runs(ordered, gap)
        assert [a.tolist() for a in found] == [a.tolist() for a in want], case
        for median in (float(rng.choice(ends)), float(rng.choice(ends)) + 0.5, float(ends.min()) - 1e3,
                       float(ends.max()) + 1e3, float(rng.choice(ends)) - 100):
            at = integrity._first_at_or_after(ordered, median)
            assert integrity._least_at_or_after(ends, median) == (int(ordered[at]) if at < ordered.size else None)
    late = np.array([base, base + 3 * gap, base + gap // 2], np.int64)  # back by 2.5 s: not nearly in order
    assert integrity._unsorted_runs(late, gap) is None
