"""Small helpers on int64 numpy arrays that both the loader and the analysis use."""
from __future__ import annotations

import numpy as np


def row_groups(codes: np.ndarray) -> list[np.ndarray]:
    """Row positions grouped by code (one group per distinct code, in code order; each group
    ascending, so in the rows' own order). Codes of a few thousand values at most, as
    process or name codes are, are sorted as int16: numpy's stable sort is then a radix sort."""
    codes = np.asarray(codes)
    if codes.size == 0:
        return []
    small = codes.astype(np.int16) if codes.min() >= -2**15 and codes.max() < 2**15 else codes
    order = np.argsort(small, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(small[order])) + 1)


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
