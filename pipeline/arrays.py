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
