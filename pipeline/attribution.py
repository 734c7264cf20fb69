"""Explain each gap: CPU-side CUDA API calls and copy-engine work inside it.

SPEC "Attribution": for a gap on a GPU, the CUDA runtime API calls of the
processes that drive that GPU that overlap the gap, each counted by its
intersection with the gap (not its full length), grouped by normalised API name
and sorted by overlapped time. Copy-engine work (memcpy/memset) overlapping the
gap is reported separately.

Overlap of many calls with many gaps is computed without a join: for a set of
intervals, ``F(t) = sum_i |[s_i, e_i) ∩ (-inf, t)|`` is piecewise linear and
``F(t) = n_s(t)·t − S_s(t) − (n_e(t)·t − S_e(t))`` where ``n_s, S_s`` count and
sum the starts before ``t`` (``n_e, S_e`` the ends). The summed overlap with a
gap ``[a, b)`` is ``F(b) − F(a)``: ``O((calls + gaps) · log calls)`` per name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import intervals as iv


@dataclass(frozen=True)
class CategoryRules:
    """What makes a gap ``sync``, ``data`` or ``comm`` (SPEC "Category").

    ``sync_apis``/``data_apis``: exact normalised CUDA API names.
    ``*_min_fraction``: the share of the gap a witness must cover (0..1).
    ``collective_kernel``: regex (case-insensitive, ``re.search``) on the kernel
    name before the gap that marks it as a collective.
    """

    sync_apis: tuple = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                        "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol",
                        "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuCtxSynchronize",
                        "cuEventSynchronize")
    data_apis: tuple = ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyToSymbolAsync",
                        "cudaMemcpyFromSymbolAsync", "cudaHostAlloc", "cudaMallocHost", "cudaHostRegister",
                        "cuMemcpyHtoDAsync", "cuMemcpyHtoD", "cuMemHostAlloc", "cuMemAllocHost")
    sync_min_fraction: float = 0.5
    data_min_fraction: float = 0.5
    collective_kernel: str = r"nccl|allreduce|allgather|reducescatter|all_to_all|alltoall|broadcast"


def summed_overlap(call_starts, call_ends, gap_starts, gap_ends) -> np.ndarray:
    """For each gap, the sum over calls of |call ∩ gap| in ns. Shape ``(n_gaps,)``.

    Calls may overlap each other (several threads); each is counted by its own
    intersection with the gap.
    """
    s = np.sort(iv.as_ns(call_starts))
    e = np.sort(iv.as_ns(call_ends))
    a, b = iv.as_ns(gap_starts), iv.as_ns(gap_ends)
    if s.size == 0 or a.size == 0:
        return np.zeros(a.size, dtype=np.int64)
    # Rebase to the earliest time so prefix sums stay far from int64 overflow
    # even with epoch-based timestamps (~1.7e18 ns).
    base = min(int(s[0]), int(a.min()))
    s, e, a, b = s - base, e - base, a - base, b - base
    ps = np.concatenate(([0], np.cumsum(s, dtype=np.int64)))
    pe = np.concatenate(([0], np.cumsum(e, dtype=np.int64)))

    def F(t):
        ns = np.searchsorted(s, t, side="left")
        ne = np.searchsorted(e, t, side="left")
        # (calls started before t) * t - their starts - ((calls ended before t) * t - their ends)
        return (ns - ne) * t - (ps[ns] - pe[ne])

    return F(b) - F(a)


def api_overlap_table(runtime: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """Gap × API-name matrix of summed overlap (ns).

    Args:
        runtime: calls of the GPU's processes (start, end, name).
        gaps: frame with ``start`` and ``end`` columns (ns).
    Returns:
        Frame indexed like ``gaps``, one int64 column per normalised API name
        that overlaps at least one gap; columns sorted by total overlap,
        largest first.
    """
    g0 = gaps["start"].to_numpy(np.int64)
    g1 = gaps["end"].to_numpy(np.int64)
    cols = {}
    if len(gaps) and len(runtime):
        lo, hi = int(g0.min()), int(g1.max())
        near = runtime[(runtime["end"] > lo) & (runtime["start"] < hi)]
        for name, calls in near.groupby("name", sort=True):
            ov = summed_overlap(calls["start"].to_numpy(), calls["end"].to_numpy(), g0, g1)
            if ov.any():
                cols[name] = ov
    table = pd.DataFrame(cols, index=gaps.index, dtype="int64")
    order = table.sum().sort_values(ascending=False, kind="stable").index
    return table[order]


def coverage(starts, ends, gaps: pd.DataFrame) -> np.ndarray:
    """For each gap, the ns covered by the *union* of the given intervals."""
    us, ue = iv.union(starts, ends)
    return iv.overlap_with_each(gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64), us, ue)


def categorise(gaps: pd.DataFrame, runtime: pd.DataFrame, copies: pd.DataFrame,
               rules: CategoryRules) -> pd.DataFrame:
    """Attribute and categorise every gap (not just the roster).

    Adds columns: ``sync_ns`` (union of synchronising calls inside the gap),
    ``data_ns`` (union of transfer/pinned-alloc calls and copy-engine work),
    ``copy_ns`` (copy-engine work inside the gap), ``category`` and
    ``attribution`` (``[(api_name, ns), ...]`` by summed overlapped time, largest first).

    Category, first match wins (SPEC): ``sync`` if synchronising calls cover at
    least ``sync_min_fraction`` of the gap; ``data`` if transfers, pinned
    allocations or copy-engine work cover at least ``data_min_fraction``;
    ``comm`` if the kernel before the gap is a collective; else ``cpu``.
    """
    out = gaps.copy()
    n = len(out)
    length = out["length"].to_numpy(np.int64)
    copy_s = copies["start"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    copy_e = copies["end"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    sync_calls = runtime[runtime["name"].isin(rules.sync_apis)]
    data_calls = runtime[runtime["name"].isin(rules.data_apis)]
    out["copy_ns"] = coverage(copy_s, copy_e, out) if n else np.zeros(0, np.int64)
    out["sync_ns"] = coverage(sync_calls["start"], sync_calls["end"], out) if n else np.zeros(0, np.int64)
    out["data_ns"] = coverage(np.concatenate((data_calls["start"].to_numpy(np.int64), copy_s)),
                              np.concatenate((data_calls["end"].to_numpy(np.int64), copy_e)), out) if n else \
        np.zeros(0, np.int64)
    collective = re.compile(rules.collective_kernel, re.IGNORECASE)
    is_comm = out["kernel_before"].map(lambda k: bool(collective.search(str(k)))).to_numpy(bool) if n else \
        np.zeros(0, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        sync_frac = np.where(length > 0, out["sync_ns"].to_numpy() / length, 0.0)
        data_frac = np.where(length > 0, out["data_ns"].to_numpy() / length, 0.0)
    out["category"] = np.select(
        [sync_frac >= rules.sync_min_fraction, data_frac >= rules.data_min_fraction, is_comm],
        ["sync", "data", "comm"], default="cpu") if n else pd.Series(dtype=object)
    out["attribution"] = attribution_lists(api_overlap_table(runtime, out))
    return out


def attribution_lists(table: pd.DataFrame) -> list:
    """Per gap, ``[(api_name, overlapped_ns), ...]`` largest first, zeros dropped."""
    names = list(table.columns)
    values = table.to_numpy(np.int64) if names else np.zeros((len(table), 0), np.int64)
    lists = []
    for row in values:
        nz = np.flatnonzero(row)
        order = nz[np.argsort(-row[nz], kind="stable")]
        lists.append([(names[j], int(row[j])) for j in order])
    return lists
