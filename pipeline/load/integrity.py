"""Rows that cannot be real (docs/definitions.md#trusting-the-input): exact duplicates, end < start, and times
far outside the capture. Each is found, dropped (a duplicate is counted once), counted and named
in a coded warning (:class:`~pipeline.model.WarningCode`), so the row that rests on them says
``partial`` instead of printing a window of 9.2e12 ms.

The capture is what the export says it was (``ANALYSIS_DETAILS``, ``TARGET_INFO_SESSION_START_TIME``)
and, where it says nothing, what the other rows agree on (:func:`capture_of`). Each stated bound is
judged on its own: when the export's own rows run on past it without a break (an older export whose
ANALYSIS_DETAILS range starts after its first rows), that bound is wrong, not the rows: the rows' own
end on that side is the capture's, and one warning per report says so (:func:`disagreement_warning`);
a bound the rows do not run past stands, and a row isolated beyond it is dropped.

On a side with no trusted stated bound (none stated, stated on another clock than the rows', or
contradicted), the rows' own body decides, one rule everywhere: from the rows around the kernels'
median outwards while each step to the next timestamp is at most ``max(1 s, the body's extent so
far, the extent of the rows it leads to)`` (:func:`_row_extent`); rows beyond a longer step are
dropped and counted (the GPU ``partial``).
A stated capture the rows do not fit at all is said once (:func:`disagreement_warning`) and in the
timeline's zero (:data:`ROWS_START_UNFIT`). The risk: an export without trusted metadata whose real
work pauses longer than both the work before and the work after the pause loses the part beyond it,
visibly (``partial``, the rows counted), never silently.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arrays import SCAN_ROWS, is_sorted
from ..frames import codes_of
from ..model import RowWarning, WarningCode
from .tables import ANALYSIS_DETAILS_TABLE, KERNEL_TABLE, NVTX_TABLE, SESSION_START_TABLE, Schema

def untimed(table) -> np.ndarray:
    """Which rows of a :class:`~pipeline.load.sqlite.Decoded` kernel or graph-execution read cannot be timed:
    a NULL start or end, end < start, or start = end = 0 (CUPTI's mark of a record it could not time).
    Shape ``(rows,)``, bool."""
    start, end = table.ints["start"], table.ints["end"]
    missing = table.null_mask("start") | table.null_mask("end") if table.nulls else np.zeros(table.rows, dtype=bool)
    return missing | (end < start) | ((start == 0) & (end == 0))


#: Rows may stray this far (ns) outside the capture the export's metadata states (clock skew,
#: work in flight when the capture stopped) before they count as impossible.
SLACK_NS = 1_000_000_000
#: On a side of the capture the export states no trusted bound for (none stated, stated on another
#: clock, or contradicted: :func:`capture_of`), the capture ends where the rows' body does: the run of
#: timestamps around the kernels' median in which no step to the next is longer than the larger of
#: these: 1 s, or this many times the run's extent so far (:func:`_row_extent`; a stray INT64_MAX end,
#: an epoch-clock timestamp or a stale row a minute away is far beyond both).
BODY_GAP_MIN_NS = SLACK_NS
BODY_GAP_FACTOR = 1
#: ... for a PyTorch profiler trace without its profiler span (:mod:`pipeline.load.kineto`): an hour,
#: or 1,000 times the run's extent.
ROW_GAP_MIN_NS = 3_600 * 1_000_000_000
ROW_GAP_FACTOR = 1_000
#: Where a capture bound the export does not state comes from (:func:`capture_of`, :func:`_row_extent`):
#: the run of rows around the kernels' median, up to a pause longer than it and than the rows after it.
ROWS_OWN_RUN = "the rows' own run, up to a pause longer than the work on both sides of it"
#: What is said of a stated capture that the export's rows do not fit at all (:func:`capture_of`).
UNFIT = "which the rows do not fit"
#: Odd 64-bit multiplier of the row hash in :func:`duplicate_mask` (Fibonacci hashing).
_HASH_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)


def duplicate_mask(columns, key: int | None = None) -> np.ndarray:
    """True for every row equal in all ``columns`` (equal-length arrays, integer or categorical
    codes) to an earlier row: the copies to drop, never the first of them. Shape ``(n,)``.

    Copies share their first column's value (a start time, as :func:`frame_duplicates` orders them):
    only rows whose first value repeats are candidates (:func:`_candidate_rows`). Among them, a 64-bit
    hash of each row's first ``key`` columns (default: all) finds the rows whose hash repeats (one sort
    of the hashes); only those are compared exactly, on every column."""
    arrays = [np.asarray(c) for c in columns]
    n = arrays[0].size if arrays else 0
    mask = np.zeros(n, dtype=bool)
    rows = _candidate_rows(arrays[0]) if n >= 2 else None
    if rows is not None:
        mask[rows[_repeated_rows([a[rows] for a in arrays], key)]] = True
    return mask


def _candidate_rows(first: np.ndarray) -> np.ndarray | None:
    """The rows (ascending) whose value of ``first`` (at least two rows) some other row shares: when it is
    in order (as exports are), found in the pass that checks so, a piece of :data:`~pipeline.arrays.SCAN_ROWS`
    values at a time (no whole-column temporary); else by one adaptive sort of it. None when no value repeats."""
    n = first.size
    repeats = []  # positions k with first[k + 1] == first[k], while the values are in order
    for i in range(0, n - 1, SCAN_ROWS):
        piece = first[i:i + SCAN_ROWS + 1]
        later, earlier = piece[1:], piece[:-1]
        if bool((later < earlier).any()):
            break
        same = later == earlier
        if same.any():
            repeats.append(np.flatnonzero(same) + i)
    else:
        if not repeats:
            return None
        at = np.concatenate(repeats)
        return np.union1d(at, at + 1)
    order = np.argsort(first, kind="stable")
    ordered = first[order]
    same = ordered[1:] == ordered[:-1]
    del ordered
    if not same.any():
        return None
    in_run = np.zeros(n, dtype=bool)
    in_run[1:] |= same
    in_run[:-1] |= same
    return np.sort(order[in_run])


def _repeated_rows(arrays: list, key: int | None) -> np.ndarray:
    """:func:`duplicate_mask` of ``arrays`` (at least two rows) by hashing: True for every row equal in
    all of them to an earlier row."""
    n = arrays[0].size
    h = np.zeros(n, dtype=np.uint64)
    column = np.empty(n, dtype=np.int64)  # each column as int64 in turn (ids may be int32), hashed in place
    for a in arrays[:key]:
        np.copyto(column, a, casting="unsafe")
        np.bitwise_xor(h, column.view(np.uint64), out=h)
        np.multiply(h, _HASH_MULTIPLIER, out=h)
    del column
    ordered = np.sort(h)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    mask = np.zeros(n, dtype=bool)
    if repeated.size:
        candidates = np.flatnonzero(np.isin(h, repeated))
        exact = pd.DataFrame({i: a[candidates] for i, a in enumerate(arrays)}).duplicated(keep="first")
        mask[candidates[exact.to_numpy()]] = True
    return mask


#: Columns that tell rows apart best, hashed first by :func:`frame_duplicates` (:func:`duplicate_mask`'s ``key``).
KEY_COLUMNS = ("start", "end", "correlation_id", "stream_id", "tid")


def key_first(names) -> tuple[list[str], int]:
    """Column ``names`` with those of :data:`KEY_COLUMNS` first (in its order), the others after in
    their own order, and how many key columns there are (:func:`duplicate_mask`'s ``key``)."""
    names = list(names)
    first = [c for c in KEY_COLUMNS if c in names]
    return first + [c for c in names if c not in KEY_COLUMNS], len(first)


def frame_duplicates(frame: pd.DataFrame) -> np.ndarray:
    """:func:`duplicate_mask` of every column of ``frame``, those of :data:`KEY_COLUMNS` first (hashed
    first), text and categories compared as codes. Only the first column is read whole: the others
    (and the codes of text) are taken for the candidate rows alone (rows whose first value repeats:
    usually none), codes of those rows comparing as their values do. Shape ``(n,)``."""
    names, key = key_first(frame.columns)
    n = len(frame)
    mask = np.zeros(n, dtype=bool)
    rows = _candidate_rows(_codes(frame[names[0]])) if n >= 2 and names else None
    if rows is not None:
        mask[rows[_repeated_rows([_codes(frame[name], rows) for name in names], key)]] = True
    return mask


def _codes(col: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
    """Column ``col`` (at ``rows``; None: all) as an integer array that is equal where its values are:
    categories as their codes, text and bools factorized, integers as kept (int32 ids stay int32:
    :func:`_repeated_rows` widens one at a time)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        codes = codes_of(col)
        return codes if rows is None else codes[rows]
    if col.dtype == object or col.dtype == bool or pd.api.types.is_string_dtype(col.dtype):
        return pd.factorize(col if rows is None else col.iloc[rows], use_na_sentinel=False)[0]
    if pd.api.types.is_integer_dtype(col.dtype) and not isinstance(col.dtype, pd.api.extensions.ExtensionDtype):
        values = col.to_numpy()
    else:
        values = col.to_numpy(np.int64)
    return values if rows is None else values[rows]


def duplicates_warning(counts: dict[str, int], pids: tuple | None = None) -> list[RowWarning]:
    """The warning naming how many exact duplicates each table held (``counts``: table -> rows
    dropped, in the order to name them; ``pids``: their processes, the warning's scope); nothing
    when there were none."""
    counts = {table: n for table, n in counts.items() if n}
    total = sum(counts.values())
    if not total:
        return []
    each = "each counted once" if total > 1 else "counted once"
    return [RowWarning(WarningCode.DUPLICATE_ROWS,
                       f"dropped {total} exact duplicate row{'s' if total > 1 else ''} ({each}): "
                       + ", ".join(f"{n} of {table}" for table, n in counts.items()), pids)]


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:.6f}"


@dataclass(frozen=True)
class Capture:
    """What the capture's timestamps may be: rows starting before ``lo`` or ending after ``hi``
    (ns; None: no bound) are impossible. ``text`` says what the capture is and where that comes from."""

    lo: int | None
    hi: int | None
    text: str
    #: When the capture the export states does not hold its own rows (:func:`capture_of`): that stated
    #: capture (slack included; its ``text`` says where it comes from), else None.
    stated: Capture | None = None
    #: With ``stated``: ``(first, last)`` ns of the rows trusted (those inside the stated capture and
    #: those that run on past a bound of it); else None.
    run: tuple[int, int] | None = None
    #: With ``stated``: True when ``lo`` is the rows' own start, not the stated one (:func:`capture_start`).
    start_from_rows: bool = False
    #: When the rows do not fit the capture ANALYSIS_DETAILS states at all (:func:`_unfit_details`): its
    #: ``startTime`` (ns), which :func:`capture_start` names; else None.
    unfit_start: int | None = None
    #: With ``stated``: True when ``hi`` is the rows' own end, not the stated one.
    end_from_rows: bool = False

    @property
    def judged_wrong(self) -> str:
        """Which stated bound the rows judged wrong (:func:`disagreement_warning`): ``start``, ``end``,
        ``start and end``, or ``""`` (none; no ``stated``)."""
        return " and ".join(b for b, wrong in (("start", self.start_from_rows), ("end", self.end_from_rows)) if wrong)

    def outside(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """True for rows that start before ``lo`` or end after ``hi``. Shape ``(n,)``."""
        out = None  # one bool array, the second bound's test or-ed into the first's in place
        if self.lo is not None:
            out = np.asarray(starts, dtype=np.int64) < self.lo
        if self.hi is not None:
            late = np.asarray(ends, dtype=np.int64) > self.hi
            out = late if out is None else np.logical_or(out, late, out=out)
        return np.zeros(len(starts), dtype=bool) if out is None else out


def _first_row(schema: Schema, table: str, columns: tuple) -> tuple | None:
    """The first row of ``columns`` of ``table`` when it has them all (and they are not NULL)."""
    if not set(columns) <= set(schema.columns(table)):
        return None
    row = schema.con.execute(f"SELECT {', '.join(columns)} FROM {table} LIMIT 1").fetchone()
    return None if row is None or any(v is None for v in row) else tuple(int(v) for v in row)


def _details(schema: Schema) -> tuple[int, int] | None:
    """``(startTime, stopTime)`` ns of the export's ANALYSIS_DETAILS, when it states one (stop >= start)."""
    details = _first_row(schema, ANALYSIS_DETAILS_TABLE, ("startTime", "stopTime"))
    return details if details is not None and details[1] >= details[0] else None


def _stated_capture(schema: Schema, median: float | None) -> tuple[int | None, int | None, str | None]:
    """``(lo, hi, source)`` of the capture as the export states it, on the rows' own clock. Exports
    time rows on the system clock (ANALYSIS_DETAILS startTime..stopTime) or from the capture's
    start (0..duration); the one holding the rows' median (with :data:`SLACK_NS`) is theirs. When
    neither holds it, ANALYSIS_DETAILS is not the rows' (:func:`_unfit_details`) and neither is the session
    start (on ANALYSIS_DETAILS' clock): ``(None, None, None)``."""
    details = _details(schema)
    if details is not None:
        start, stop = details
        for lo, hi in ((start, stop), (0, stop - start)):
            if median is None or lo - SLACK_NS <= median <= hi + SLACK_NS:
                return lo, hi, ANALYSIS_DETAILS_TABLE
        # the rows fit it on neither clock: nor do they the session start, which Nsight Systems writes on
        # ANALYSIS_DETAILS' clock (it is its startTime): nothing stated is trusted (:func:`_unfit_details`)
        return None, None, None
    session = _first_row(schema, SESSION_START_TABLE, ("systemClockNs",))
    if session is not None:
        start = session[0]
        return (start if median is None or median >= start - SLACK_NS else 0), None, SESSION_START_TABLE
    return None, None, None


def _unfit_details(schema: Schema, median: float | None, source: str | None) -> tuple[int, int] | None:
    """ANALYSIS_DETAILS' ``(startTime, stopTime)`` when the export states it but the rows do not fit it
    at all (the kernels' ``median`` lies outside it as stated and counted from the capture's start, so
    :func:`_stated_capture` found no capture, ``source`` None, whatever session start is stated); else None."""
    return _details(schema) if source is None and median is not None else None


def _median(values: np.ndarray) -> float | None:
    """``np.median`` of ``values`` (int64 ns) as a float, None without any. When they are in order (the
    kernels' starts usually are) the middle one or two are averaged as numpy does (its mean of the middle
    slice of the partitioned values), with no copy; else numpy's own (a partition of a copy)."""
    n = values.size
    if not n:
        return None
    if is_sorted(values):
        return float(np.mean(values[(n - 1) // 2:n // 2 + 1]))
    return float(np.median(values))


#: Far more than float64's rounding of an int64 timestamp (at most 1,024 ns below 2**63): :func:`_first_at_or_after`
#: looks at float64 values only this close to the median.
_ROUNDING_NS = 1 << 12


def _first_at_or_after(s: np.ndarray, median: float) -> int:
    """``np.searchsorted(s, median)`` of sorted int64 ``s`` and a float: the first position whose value, as
    float64 (numpy's comparison of int64 with a float), is at or after ``median``. Only the values within
    :data:`_ROUNDING_NS` of it are converted to float64, not the whole array."""
    low = int(np.searchsorted(s, max(int(median) - _ROUNDING_NS, _INT64.min)))
    high = int(np.searchsorted(s, min(int(median) + _ROUNDING_NS, _INT64.max), side="right"))
    return low + int(np.searchsorted(s[low:high].astype(np.float64), median))


_INT64 = np.iinfo(np.int64)


def _sorted_pieces(arrays: list[np.ndarray], ordered: list[bool]):
    """Sorted arrays holding together the values of ``arrays``: each array in order (``ordered``) as it is,
    each other one as pieces of :data:`~pipeline.arrays.SCAN_ROWS` values, each sorted (small temporaries,
    not a sorted copy of the whole array)."""
    for s, in_order in zip(arrays, ordered):
        if in_order:
            yield s
        else:
            for i in range(0, s.size, SCAN_ROWS):
                yield np.sort(s[i:i + SCAN_ROWS], kind="stable")  # timsort: nearly sorted ends cost little


#: :func:`_table_runs` picks the steps to look at from their exact integer length, this far (ns) below the
#: threshold, then keeps those whose float64 step (:func:`_row_extent`'s rule) is above it: converting two
#: int64 timestamps to float64 moves their difference by at most a few thousand ns.
_FLOAT_MARGIN_NS = 1 << 20


def _table_runs(s: np.ndarray, gap_min: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs of one table's sorted timestamps ``s`` (non-empty) in which no step to the next is
    longer than ``gap_min`` as :func:`_row_extent` measures steps (the difference of the float64
    timestamps): ``(firsts, lasts)``, int64 arrays. One diff pass; only the few long steps are
    measured in float64."""
    threshold = np.uint64(max(0, gap_min - _FLOAT_MARGIN_NS))
    found = []
    for i in range(0, s.size - 1, SCAN_ROWS):  # a piece at a time: no temporary as long as the table
        piece = s[i:i + SCAN_ROWS + 1]
        d = np.subtract(piece[1:], piece[:-1]).view(np.uint64)  # sorted: the exact step, also past int64
        found.append(np.flatnonzero(d > threshold) + i)
    long_ = np.concatenate(found) if found else np.zeros(0, np.intp)
    if long_.size:
        long_ = long_[s[long_ + 1].astype(np.float64) - s[long_].astype(np.float64) > gap_min]
    return np.concatenate((s[:1], s[long_ + 1])), np.concatenate((s[long_], s[-1:]))


def _unsorted_runs(s: np.ndarray, gap_min: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`_table_runs` of the values of ``s`` (not in order; non-empty) without sorting them, when no
    value lies more than the threshold of :func:`_table_runs` below one before it (ends in start order lie
    out of order by at most a row's length); None when one does (then sort). A long step of the sorted
    values (above the threshold) can then only part the values before a position from those after it: it is
    the step from the largest value up to there to the smallest after, both found in passes of
    :data:`~pipeline.arrays.SCAN_ROWS` values (the second, backwards, only when some position may part)."""
    threshold = np.uint64(max(0, gap_min - _FLOAT_MARGIN_NS))
    n = s.size
    top, bottom = _INT64.min, _INT64.max
    at, tops = [], []  # positions i where s[i + 1] is above the largest value up to i by more than the threshold
    for i in range(0, n, SCAN_ROWS):
        piece = s[i:i + SCAN_ROWS]
        most = np.maximum.accumulate(piece)
        np.maximum(most, top, out=most)  # the largest value up to each position
        if bool((np.subtract(most, piece).view(np.uint64) > threshold).any()):
            return None
        bottom = min(bottom, int(piece.min()))
        nxt = s[i + 1:i + 1 + piece.size]
        head = most[:nxt.size]
        found = np.flatnonzero((nxt > head) & (np.subtract(nxt, head).view(np.uint64) > threshold))
        if found.size:
            at.append(found + i)
            tops.append(head[found])
        top = int(most[-1])
    if not at:
        return np.array([bottom], dtype=np.int64), np.array([top], dtype=np.int64)
    at, tops = np.concatenate(at), np.concatenate(tops)
    after = np.empty(at.size, dtype=np.int64)  # the smallest value after each of them, going backwards
    least, k = _INT64.max, at.size - 1
    for i in range(((n - 1) // SCAN_ROWS) * SCAN_ROWS, (int(at[0]) // SCAN_ROWS) * SCAN_ROWS - 1, -SCAN_ROWS):
        piece = s[i:i + SCAN_ROWS]
        rest = np.minimum.accumulate(piece[::-1])[::-1]  # the smallest value from each position on
        while k >= 0 and at[k] >= i:
            j = int(at[k]) - i
            after[k] = min(least, int(rest[j + 1])) if j + 1 < piece.size else least
            k -= 1
        least = min(least, int(rest[0]))
    long_ = (after > tops) & (np.subtract(after, tops).view(np.uint64) > threshold)
    long_ &= after.astype(np.float64) - tops.astype(np.float64) > gap_min
    return (np.concatenate(([bottom], after[long_])).astype(np.int64),
            np.concatenate((tops[long_], [top])).astype(np.int64))


def _least_at_or_after(s: np.ndarray, median: float) -> int | None:
    """The smallest value of ``s`` (any order) that is at or after ``median`` as :func:`_first_at_or_after`
    compares (float64, looked at only within :data:`_ROUNDING_NS` of it), None when none is; a piece of
    :data:`~pipeline.arrays.SCAN_ROWS` values at a time."""
    low = max(int(median) - _ROUNDING_NS, _INT64.min)
    high = min(int(median) + _ROUNDING_NS, _INT64.max)
    least = None
    for i in range(0, s.size, SCAN_ROWS):
        piece = s[i:i + SCAN_ROWS]
        piece = piece[piece >= low]
        close = piece <= high
        near = piece[close]
        for found in (near[near.astype(np.float64) >= median], piece[~close]):
            if found.size:
                least = int(found.min()) if least is None else min(least, int(found.min()))
    return least


def _union_runs(runs: list[tuple[np.ndarray, np.ndarray]], gap_min: int) -> tuple[np.ndarray, np.ndarray]:
    """The runs of the union of sorted, non-empty int64 arrays from the runs of each (``runs``: their
    :func:`_table_runs`): ``(firsts, lasts)`` in ascending order, each step between two runs longer than
    ``gap_min`` (float64, as in :func:`_row_extent`), none inside a run. Each array's runs are found alone
    and joined where they overlap or the step between them is not longer: two timestamps of the union next
    to each other lie in one array's run or are the end of the runs so far and the next run's start."""
    firsts, lasts = zip(*runs)
    firsts, lasts = np.concatenate(firsts), np.concatenate(lasts)
    order = np.argsort(firsts, kind="stable")
    firsts, reach = firsts[order], np.maximum.accumulate(lasts[order])
    apart = np.flatnonzero((firsts[1:] > reach[:-1])
                           & (firsts[1:].astype(np.float64) - reach[:-1].astype(np.float64) > gap_min))
    return np.concatenate((firsts[:1], firsts[apart + 1])), np.concatenate((reach[apart], reach[-1:]))


def _middle(tables: list[np.ndarray]) -> int:
    """The middle of the distinct timestamps of ``tables`` (sorted int64 arrays; the ``n // 2``-th of the
    ``n`` distinct ones): the tables merged (a stable sort of sorted runs) and their repeats skipped."""
    v = np.sort(np.concatenate(tables), kind="stable")
    first = np.flatnonzero(np.concatenate(([True], v[1:] != v[:-1])))
    return int(v[first[first.size // 2]])


#: Timestamps from which :func:`_row_extent` goes through its arrays on two threads (numpy lets go of the GIL).
PARALLEL_STAMPS = 1 << 20


def _array_runs(s: np.ndarray, in_order: bool, median: float, gap_min: int) -> tuple[list, list]:
    """:func:`_row_extent`'s look at one array of timestamps ``s`` (``in_order``: sorted): its runs between steps
    longer than ``gap_min`` (:func:`_table_runs` of it, or of each of its sorted pieces) and its first timestamp
    at or after ``median`` (of each piece; none when none is)."""
    found = None if in_order else _unsorted_runs(s, gap_min)  # no sort when nearly in order
    if found is not None:
        least = _least_at_or_after(s, median)
        return [found], ([] if least is None else [least])
    runs, after = [], []
    for piece in _sorted_pieces([s], [in_order]):
        runs.append(_table_runs(piece, gap_min))
        at = _first_at_or_after(piece, median)
        if at < piece.size:
            after.append(int(piece[at]))
    return runs, after


def _row_extent(stamps: list[np.ndarray], median: float | None, gap_min: int = BODY_GAP_MIN_NS,
                factor: int = BODY_GAP_FACTOR) -> tuple[int, int] | None:
    """The run of timestamps (int64 ns arrays) around ``median`` (None: the middle of the distinct
    timestamps), grown outwards from the median: ``(first, last)`` ns; None without any timestamp.

    A step to the next timestamp (of all the arrays together, as float64) ends the run when it is longer
    than each of: ``gap_min``, ``factor`` x the run's extent so far, and the extent of the rows it leads
    to (from the step outwards, up to the next step longer than this one). So a pause between two parts of
    real work is crossed whichever part holds the median (the pause is no longer than the part beyond it,
    or than the part before it), while a stale row or a few rows far from everything else (a step longer
    than the run and than themselves) are left out, whatever the density of the rows on either side.

    Only the steps longer than ``gap_min`` can end the run: each array in order is taken as it is, one
    nearly in order (ends in start order) as it is too when a median is given (:func:`_unsorted_runs`), any
    other as pieces of :data:`~pipeline.arrays.SCAN_ROWS` values, each sorted (no sorted copy of a whole
    table); the long steps of each are found alone and their runs between long steps joined
    (:func:`_union_runs`), never the arrays themselves (but to find the middle timestamp)."""
    arrays = [np.asarray(s, dtype=np.int64) for s in stamps if s.size]
    if not arrays:
        return None
    ordered = [is_sorted(s) for s in arrays]
    lo = min(int(s[0]) if o else int(s.min()) for s, o in zip(arrays, ordered))
    hi = max(int(s[-1]) if o else int(s.max()) for s, o in zip(arrays, ordered))
    if hi - lo <= gap_min:
        return lo, hi  # nothing can be far from the rest
    if median is None:
        tables = [s if o else np.sort(s, kind="stable") for s, o in zip(arrays, ordered)]
        start = _middle(tables)
        runs = [_table_runs(s, gap_min) for s in tables]
        del tables
    else:  # the first timestamp at or after the median (numpy's comparison of int64 with a float), else the last
        def each(s: np.ndarray, in_order: bool) -> tuple[list, list]:
            return _array_runs(s, in_order, median, gap_min)

        if sum(s.size for s in arrays) >= PARALLEL_STAMPS and len(arrays) > 1:  # the arrays two at a time
            with ThreadPoolExecutor(max_workers=2) as pool:
                found = list(pool.map(each, arrays, ordered))
        else:
            found = list(map(each, arrays, ordered))
        runs = [r for array_runs, _ in found for r in array_runs]
        after = [a for _, array_after in found for a in array_after]
        start = min(after) if after else hi
    firsts, lasts = _union_runs(runs, gap_min)
    f_first, f_last = firsts.astype(np.float64), lasts.astype(np.float64)
    d = f_first[1:] - f_last[:-1]  # d[k]: the step from run k to run k + 1, each longer than gap_min
    last_run = firsts.size - 1

    def beyond_up(k: int) -> float:  # extent of the runs after step k up to the next step longer than d[k]
        longer = np.flatnonzero(d[k + 1:] > d[k])
        return f_last[k + 1 + int(longer[0]) if longer.size else last_run] - f_first[k + 1]

    def beyond_down(k: int) -> float:  # extent of the runs before step k down to the next step longer than d[k]
        longer = np.flatnonzero(d[:k] > d[k])
        return f_last[k] - f_first[int(longer[-1]) + 1 if longer.size else 0]

    a = b = start  # the run's first and last timestamps
    run_a = run_b = int(np.searchsorted(lasts, start))  # the runs holding them
    while True:
        new_run_b = last_run
        for k in range(run_b, last_run):
            if d[k] > max(gap_min, factor * (f_last[k] - np.float64(a)), beyond_up(k)):
                new_run_b = k
                break
        new_b = int(lasts[new_run_b])
        new_run_a = 0
        for k in range(run_a - 1, -1, -1):
            if d[k] > max(gap_min, factor * (np.float64(new_b) - f_first[k + 1]), beyond_down(k)):
                new_run_a = k + 1
                break
        new_a = int(firsts[new_run_a])
        if (new_a, new_b) == (a, b):
            return a, b
        a, b, run_a, run_b = new_a, new_b, new_run_a, new_run_b


def _continuation(beyond: np.ndarray, edge: int, reach: int) -> int | None:
    """The far end of the timestamps ``beyond`` a bound (int64 ns, all on one side of ``edge``, any
    order) that continue the rows inside it: from ``edge`` (the inside timestamp nearest that side)
    outwards, each step to the next timestamp no longer than ``reach`` ns. None when the nearest is
    further than ``reach`` (the rows beyond are isolated from those inside, the bound stands)."""
    v = np.sort(beyond)  # repeats are steps of 0: never a break
    if v[0] < edge:
        v = v[::-1]
    steps = np.abs(np.diff(np.concatenate(([float(edge)], v.astype(np.float64)))))
    breaks = steps > reach
    n = int(np.argmax(breaks)) if breaks.any() else v.size  # timestamps reached before the first break
    return int(v[n - 1]) if n else None


def _run_past(stamps: list[np.ndarray], capture: Capture, judged: tuple[bool, bool]
              ) -> tuple[tuple[int, int] | None, int | None, int | None]:
    """How the rows lie against ``capture`` (the stated one, slack included): ``(inside, lo, hi)``.
    ``inside``: ``(first, last)`` ns of the timestamps inside it (None: none is). ``lo`` (``hi``): when
    ``judged[0]`` (``judged[1]``) and rows run on below ``capture.lo`` (above ``capture.hi``) as a
    contiguous continuation of the rows inside (:func:`_continuation`, ``reach`` = ``max(SLACK_NS,
    last - first)``), the furthest of them: the rows' own bound on that side; else None. Only the
    timestamps beyond the bounds are sorted (usually none); a table wholly inside costs its minimum and maximum."""
    first = last = None
    below, above = [], []
    for s in stamps:
        if not s.size:
            continue
        low, high = int(s.min()), int(s.max())
        if (capture.lo is None or low >= capture.lo) and (capture.hi is None or high <= capture.hi):
            first = low if first is None else min(first, low)
            last = high if last is None else max(last, high)
            continue
        early = s < capture.lo if capture.lo is not None else np.zeros(s.size, dtype=bool)
        late = s > capture.hi if capture.hi is not None else np.zeros(s.size, dtype=bool)
        inside = s[~(early | late)]
        if inside.size:
            first = int(inside.min()) if first is None else min(first, int(inside.min()))
            last = int(inside.max()) if last is None else max(last, int(inside.max()))
        if judged[0] and early.any():
            below.append(s[early])
        if judged[1] and late.any():
            above.append(s[late])
    if first is None:
        return None, None, None
    reach = max(SLACK_NS, last - first)
    lo = _continuation(np.concatenate(below), first, reach) if below else None
    hi = _continuation(np.concatenate(above), last, reach) if above else None
    return (first, last), lo, hi


def capture_of(schema: Schema, stamps: list[np.ndarray], reference: np.ndarray) -> Capture:
    """The capture rows must lie in.

    Args:
        schema: the export (``ANALYSIS_DETAILS``, ``TARGET_INFO_SESSION_START_TIME``).
        stamps: every row's start and end timestamps (int64 ns arrays), of every table read.
        reference: timestamps whose median places the rows on the export's clock (the kernels' starts).
    Returns:
        A :class:`Capture`: the stated bounds widened by :data:`SLACK_NS`; a bound the export does
        not state is the end of the run of rows around the median (:func:`_row_extent`). Each stated
        bound is judged on its own (:func:`_run_past`): when the timestamps beyond it form a contiguous
        continuation of those inside the stated capture (from the inside ones outwards, no step longer
        than ``max(SLACK_NS, the inside ones' extent)``), the metadata disagrees with the data and the
        data wins on that side: the bound is the furthest of them (no slack), the rows after a longer
        step are outliers (still outside). A bound no row runs past that way stands, whatever lies far
        beyond it (a stale row seconds away, an INT64_MAX end). With a bound replaced, ``stated`` is
        the export's capture, ``run`` the rows trusted; with no row inside the stated capture at all,
        both bounds are the run of rows around the median. When the kernels' median fits
        ANALYSIS_DETAILS on neither clock and no session start is stated (:func:`_unfit_details`),
        both bounds are that run, ``stated`` is ANALYSIS_DETAILS' range (slack included) and
        ``unfit_start`` its start, for the warning and the zero that say it is not trusted.
    """
    median = _median(reference)
    lo, hi, source = _stated_capture(schema, median)
    extent = _row_extent(stamps, median) if lo is None or hi is None else None
    if extent is None and (lo is None or hi is None):
        return Capture(None, None, "")
    shown_lo, shown_hi = (lo if lo is not None else extent[0]), (hi if hi is not None else extent[1])
    text = {None: ROWS_OWN_RUN + " (the export states no capture)",
            ANALYSIS_DETAILS_TABLE: ANALYSIS_DETAILS_TABLE}.get(source, f"{source} and {ROWS_OWN_RUN}, for the end")
    stated = Capture(shown_lo - SLACK_NS if lo is not None else shown_lo,
                     shown_hi + SLACK_NS if hi is not None else shown_hi,
                     f"{_seconds(shown_lo)}..{_seconds(shown_hi)} s on the report's clock, per {text}")
    unfit = _unfit_details(schema, median, source)
    if unfit is not None:  # the rows' body is the capture; say what was stated and not trusted
        said = f"{_seconds(unfit[0])}..{_seconds(unfit[1])} s"
        return Capture(shown_lo, shown_hi,
                       f"{_seconds(shown_lo)}..{_seconds(shown_hi)} s on the report's clock, per the export's own "
                       f"rows ({ANALYSIS_DETAILS_TABLE} states {said}, {UNFIT})",
                       Capture(unfit[0] - SLACK_NS, unfit[1] + SLACK_NS,
                               f"{ANALYSIS_DETAILS_TABLE} states the capture as {said}, {UNFIT} (the kernels' median "
                               f"start, {_seconds(int(median))} s, lies outside it both as stated and counted from the "
                               "capture's start)"),
                       (shown_lo, shown_hi), True, unfit[0], True)
    if source is None:
        return stated
    inside, new_lo, new_hi = _run_past(stamps, stated, (True, hi is not None))
    if inside is None:  # no row inside the stated capture: it says nothing of the rows
        if not any(s.size for s in stamps):
            return stated
        new_lo, new_hi = extent if extent is not None else _row_extent(stamps, median)  # the run, found once
        inside = (new_lo, new_hi)
    elif new_lo is None and new_hi is None:
        return stated
    said = f"{_seconds(lo)}..{_seconds(hi)} s" if hi is not None else f"a start at {_seconds(lo)} s"
    stated_text = (f"{source} states the capture as {said} on the report's clock" if hi is not None
                   else f"{source} states the capture's start as {_seconds(lo)} s on the report's clock")
    cap_lo = new_lo if new_lo is not None else stated.lo
    cap_hi = new_hi if new_hi is not None else stated.hi
    if new_lo is not None and (new_hi is not None or hi is None):
        per = "per the export's own rows"
    elif new_lo is not None:
        per = f"per the export's own rows for the start and {source} for the end"
    else:
        per = f"per {source} for the start and the export's own rows for the end"
    return Capture(cap_lo, cap_hi,
                   f"{_seconds(new_lo if new_lo is not None else lo)}.."
                   f"{_seconds(new_hi if new_hi is not None else shown_hi)} s on the report's clock, {per} "
                   f"({source} states {said})",
                   Capture(stated.lo, stated.hi if hi is not None else None, stated_text),
                   (new_lo if new_lo is not None else inside[0], new_hi if new_hi is not None else inside[1]),
                   new_lo is not None, end_from_rows=new_hi is not None and hi is not None)


#: What :func:`disagreement_warning` says of the stated bound(s) judged wrong (:attr:`Capture.judged_wrong`).
JUDGED_WRONG = {"start": "; its start is judged wrong and the capture starts where the rows do",
                "end": "; its end is judged wrong and the capture ends where the rows do",
                "start and end": "; its start and end are judged wrong and the capture is the rows' own run"}


def disagreement_warning(capture: Capture, outside: dict[str, int]) -> list[RowWarning]:
    """The one warning of a report whose stated capture does not hold its rows (``capture.stated``, from
    :func:`capture_of`): what the export states, what its rows run, and ``outside`` (table -> rows kept
    though outside the stated capture, in the order to name them); nothing when the metadata agrees or
    no row kept lies outside it (those that did were dropped anyway: end < start)."""
    counts = [(table, n) for table, n in outside.items() if n]
    if capture.stated is None or not counts:
        return []
    named = ", ".join(f"{n} row{'s' if n > 1 else ''} of {table}" if i == 0 else f"{n} of {table}"
                      for i, (table, n) in enumerate(counts))
    verb = "lies" if sum(n for _, n in counts) == 1 else "lie"
    judged = JUDGED_WRONG.get(capture.judged_wrong, "")
    return [RowWarning(WarningCode.CAPTURE_DISAGREES,
                       f"{capture.stated.text}, but the export's own rows run {_seconds(capture.run[0])}.."
                       f"{_seconds(capture.run[1])} s ({named} {verb} outside it){judged}: the rows are trusted, "
                       "none is dropped for that")]


#: Where the timeline's zero comes from when the export states no capture start (:func:`capture_start`).
EARLIEST_ROW = "the report's earliest timestamp (the export states no capture start)"
#: ... when the export's own rows start before the capture start it states (:func:`capture_of`):
#: the stated start's source and its seconds on the report's clock fill it in.
ROWS_START_WORDS = "the export's own rows' start"
ROWS_START = ROWS_START_WORDS + " ({} states {} s, after them)"
#: ... when the rows do not fit the capture ANALYSIS_DETAILS states at all (:func:`_unfit_details`).
ROWS_START_UNFIT = ROWS_START_WORDS + " ({} states {} s, " + UNFIT + ")"


def capture_start(schema: Schema, stamps: list[np.ndarray], reference: np.ndarray,
                  capture: Capture | None = None) -> tuple[int | None, str]:
    """Where the Nsight Systems timeline puts its zero, on the rows' clock (int ns), and where that
    comes from: ``ANALYSIS_DETAILS.startTime`` (or 0 when the rows count from the capture's start),
    else ``TARGET_INFO_SESSION_START_TIME.systemClockNs`` (likewise), else the earliest of ``stamps``
    (the rows kept, :data:`EARLIEST_ROW`); ``(None, "")`` with no row at all. ``reference``: the
    timestamps whose median places the rows on the export's clock (the kernels' starts), as for
    :func:`capture_of`. ``capture``: the loader's (:func:`capture_of`); when the rows run on before
    the stated start (``capture.start_from_rows``), the zero is its start, the rows' own
    (:data:`ROWS_START`), so no kept row is timed before the zero; likewise when the rows do not fit
    ANALYSIS_DETAILS at all (``capture.unfit_start``, :data:`ROWS_START_UNFIT`)."""
    if capture is not None and capture.unfit_start is not None and capture.lo is not None:
        return int(capture.lo), ROWS_START_UNFIT.format(f"{ANALYSIS_DETAILS_TABLE}.startTime",
                                                        _seconds(capture.unfit_start))
    median = _median(reference)
    lo, _, source = _stated_capture(schema, median)
    if lo is not None:
        column = "startTime" if source == ANALYSIS_DETAILS_TABLE else "systemClockNs"
        if capture is not None and capture.start_from_rows:
            return int(capture.lo), ROWS_START.format(f"{source}.{column}" if lo else source, _seconds(lo))
        return int(lo), f"{source}.{column}" if lo else f"{source} (the rows count from the capture's start)"
    stamps = [s for s in stamps if s.size]
    if not stamps:
        return None, ""
    return min(int(s.min()) for s in stamps), EARLIEST_ROW


@dataclass
class Impossible:
    """Rows of one table that cannot be real: ``reversed`` (end < start) and ``outside`` (times far
    outside the capture), boolean masks over the table's rows; :attr:`bad` is either."""

    table: str
    reversed: np.ndarray
    outside: np.ndarray

    @property
    def bad(self) -> np.ndarray:
        return self.reversed | self.outside


def impossible_rows(table: str, starts, ends, capture: Capture) -> Impossible:
    """Which rows of ``table`` (start and end arrays, ns) have end < start or lie far outside ``capture``."""
    s, e = np.asarray(starts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
    reversed_ = e < s
    outside = capture.outside(s, e)
    if reversed_.any():
        outside &= ~reversed_
    return Impossible(table, reversed_, outside)


#: Tables whose dropped rows may always change a figure, wherever they lie: a kernel is the work itself, an
#: NVTX range may make the window (its iterations) (:func:`dropped_warning`).
SHAPE_TABLES = (KERNEL_TABLE, NVTX_TABLE)


def dropped_warning(found: Impossible, starts, ends, capture: Capture, pids: tuple | None = None,
                    kernels: tuple[int, int] | None = None) -> list[RowWarning]:
    """The warning naming the rows of :func:`impossible_rows` that were dropped: how many, why, the
    capture and the first far-outside row's times; nothing when none was. Kernel rows carry
    ``DROPPED_KERNEL_ROWS``, the others ``DROPPED_ROWS``; ``pids``: the dropped rows' processes
    (the warning's scope). ``kernels``: ``(first start, last end)`` ns of the kernels kept; when every
    dropped row of a table that is not one of :data:`SHAPE_TABLES` (CUDA API calls, copies, overhead) lies
    wholly outside it (none with end < start), no figure could rest on them (gaps, their causes and
    copies are measured between kernels): ``DROPPED_STRAY_ROWS``, which says so and leaves the row ``ok``."""
    n_reversed, n_outside = int(found.reversed.sum()), int(found.outside.sum())
    if not n_reversed + n_outside:
        return []
    parts = []
    if n_reversed:
        parts.append(f"{n_reversed} with end < start")
    if n_outside:
        first = int(np.argmax(found.outside))
        parts.append(f"{n_outside} timed far outside the capture ({capture.text}; e.g. start "
                     f"{_seconds(int(np.asarray(starts)[first]))} s, end {_seconds(int(np.asarray(ends)[first]))} s)")
    total = n_reversed + n_outside
    head = f"dropped {total} row{'s' if total > 1 else ''} of {found.table}"
    text = f"{head}: {', '.join(parts)}" if len(parts) > 1 else f"{head} {parts[0].split(' ', 1)[1]}"
    code = WarningCode.DROPPED_KERNEL_ROWS if found.table == KERNEL_TABLE else WarningCode.DROPPED_ROWS
    if kernels is not None and found.table not in SHAPE_TABLES and not n_reversed:
        out = found.outside
        s, e = np.asarray(starts, dtype=np.int64)[out], np.asarray(ends, dtype=np.int64)[out]
        if not ((e > kernels[0]) & (s < kernels[1])).any():
            code = WarningCode.DROPPED_STRAY_ROWS
            text += (f": {'it lies' if total == 1 else 'they lie'} wholly outside the kernels' time "
                     f"({_seconds(kernels[0])}..{_seconds(kernels[1])} s), so no figure rests on "
                     f"{'it' if total == 1 else 'them'}")
    return [RowWarning(code, text, pids)]
