"""Small helpers on int64 numpy arrays that both the loader and the analysis use."""
from __future__ import annotations

import numpy as np
import pandas as pd


#: :func:`stable_order` counts its way through integer codes spanning at most this many values (one pass each):
#: beyond ~8, the passes cost more than numpy's radix sort of int16 codes (2M shuffled rows: 5 ms against 15 ms at
#: 4 values, even at 8, 31 ms against 15 ms at 12).
FEW_CODES = 8


def stable_order(codes: np.ndarray) -> np.ndarray:
    """``np.argsort(codes, kind="stable")``: the rows by code, each code's rows in their own order. Integer codes
    spanning at most :data:`FEW_CODES` values (a report's GPU or process codes) are counted through, the rows of
    each value in turn (one vectorised pass per value, no sort); codes of a few thousand values, as name codes
    are, are sorted as int16 (numpy's stable sort is then a radix sort)."""
    codes = np.asarray(codes)
    if codes.size and codes.dtype.kind in "iu":
        low, high = int(codes.min()), int(codes.max())
        if high - low < FEW_CODES:
            order, at = np.empty(codes.size, dtype=np.intp), 0
            for k in range(low, high + 1):
                rows = np.flatnonzero(codes == k)
                order[at:at + rows.size] = rows
                at += rows.size
            return order
        if low >= -2**15 and high < 2**15:
            codes = codes.astype(np.int16)
    return np.argsort(codes, kind="stable")


def row_groups(codes: np.ndarray) -> list[np.ndarray]:
    """Row positions grouped by code (one group per distinct code, in code order; each group
    ascending, so in the rows' own order), from :func:`stable_order`."""
    codes = np.asarray(codes)
    if codes.size == 0:
        return []
    order = stable_order(codes)
    return np.split(order, np.flatnonzero(np.diff(codes[order])) + 1)


def pair_keys(high, low) -> np.ndarray:
    """One int64 key per (``high``, ``low``) pair of ids, ``low`` taken as 32 bits: (process, correlationId),
    correlationIds being per process; (process, thread)."""
    return (np.asarray(high, dtype=np.int64) << 32) | (np.asarray(low, dtype=np.int64) & 0xFFFFFFFF)


#: Values compared at once by :func:`is_sorted` and the loader's other whole-column scans: their
#: temporaries are this long (reused from the heap), not the column (fresh pages each time).
SCAN_ROWS = 1 << 16


def is_sorted(values: np.ndarray) -> bool:
    """True when ``values`` (1-d) never decrease, compared :data:`SCAN_ROWS` values at a time (stopping
    at the first piece out of order): no whole-column temporary."""
    n = values.size
    for i in range(0, n - 1, SCAN_ROWS):
        piece = values[i:i + SCAN_ROWS + 1]
        if bool((piece[1:] < piece[:-1]).any()):
            return False
    return True


#: :func:`distinct` and :class:`Positions` use a table over the values' range when it spans at most this
#: many values, or an eighth of the rows they are given, whichever is more (the table, 8 bytes a value, is
#: never larger than an int64 column of the rows); wider ranges are hashed. Process ids, (process, device)
#: pairs: a few values close together.
DENSE_SPAN = 1 << 16


def _dense(span: int, rows: int) -> bool:
    return span <= max(DENSE_SPAN, rows // 8)


def distinct(parts) -> np.ndarray:
    """The distinct values (int64, ascending) of the integer arrays ``parts`` (a list, or a function
    giving them anew each call: they are gone through twice): marked in a table over their range
    (:data:`DENSE_SPAN`), else hashed a part at a time. No temporary as long as all the parts together."""
    again = parts if callable(parts) else (lambda: parts)
    lo = hi = None
    rows = 0
    for part in again():
        if part.size:
            rows += part.size
            lo = int(part.min()) if lo is None else min(lo, int(part.min()))
            hi = int(part.max()) if hi is None else max(hi, int(part.max()))
    if lo is None:
        return np.zeros(0, dtype=np.int64)
    if not _dense(hi - lo + 1, rows):
        return np.unique(np.concatenate([pd.unique(p).astype(np.int64) for p in again() if p.size]))
    seen = np.zeros(hi - lo + 1, dtype=bool)
    for part in again():
        if part.size:
            seen[np.subtract(part, lo, dtype=np.intp)] = True
    return np.flatnonzero(seen).astype(np.int64) + lo


class Positions:
    """Each value's position among ``values`` (ascending, distinct integers: :func:`distinct`), or
    ``missing`` where it is none of them: through a table over their range (:data:`DENSE_SPAN`, ``rows``:
    how many values will be looked up), else a hash table."""

    def __init__(self, values: np.ndarray, rows: int = 0, missing: int = -1) -> None:
        self.values = np.asarray(values, dtype=np.int64)
        self.missing = missing
        self._table = self._index = None
        if self.values.size and _dense(int(self.values[-1]) - int(self.values[0]) + 1, rows):
            # one slot more on each side: values out of the range are clipped onto them
            self._low = int(self.values[0]) - 1
            self._table = np.full(int(self.values[-1]) - self._low + 2, missing, dtype=np.intp)
            self._table[self.values - self._low] = np.arange(self.values.size)
        else:
            self._index = pd.Index(self.values)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The positions of ``values`` (intp, one per value)."""
        if self._table is not None:
            return np.take(self._table, np.subtract(values, self._low, dtype=np.int64), mode="clip")
        at = self._index.get_indexer(np.asarray(values))
        if self.missing != -1:
            at[at < 0] = self.missing
        return at
