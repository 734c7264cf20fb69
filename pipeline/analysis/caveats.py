"""The two causes of idle that are not the application's (docs/definitions.md#caveats), tested before every
category and never priced as the application's fixable idle:

* ``profiler``: Nsight Systems' own overhead rows (:attr:`~pipeline.model.GpuTrace.overhead`: every
  PROFILER_OVERHEAD row, and the CUPTI_ACTIVITY_KIND_OVERHEAD kinds of
  ``categories.profiler_overheads``) of the GPU's processes cover at least
  ``categories.profiler_min_fraction`` of the gap, counted where no copy engine runs either
  (a gap in which the copy engines work is the application's transfer, whatever the profiler did);
* ``untraced``: the trace lost records there (:attr:`~pipeline.model.GpuTrace.untraced`): a lost
  launch may have run in the gap, or Nsight Systems said it dropped events at a time inside it.

Pure: one GPU's frames in, int64 ns runs and :class:`~pipeline.model.RowWarning` out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..config import CategoryRules
from ..model import RowWarning, WarningCode
from . import intervals as iv


def profiler_rows(overhead: pd.DataFrame, rules: CategoryRules) -> pd.DataFrame:
    """The overhead rows that are the profiler's own work: PROFILER_OVERHEAD rows (``own``) and the
    kinds named in ``rules.profiler_overheads``."""
    return overhead[_profiler_mask(overhead, rules)]


def _profiler_mask(overhead: pd.DataFrame, rules: CategoryRules) -> np.ndarray:
    """Which rows :func:`profiler_rows` keeps: ``(n,)`` bool."""
    return overhead["own"].to_numpy(bool) | overhead["kind"].isin(rules.profiler_overheads).to_numpy()


def profiler_runs(overhead: pd.DataFrame, rules: CategoryRules, copy_runs: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint ``(starts, ends)`` ns when the profiler's own work (:func:`profiler_rows`) ran
    and no copy engine did (``copy_runs``: the union of the GPU's copies)."""
    if overhead.empty:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    mine = _profiler_mask(overhead, rules)
    return iv.subtract(overhead["start"].to_numpy(np.int64)[mine], overhead["end"].to_numpy(np.int64)[mine], *copy_runs)


def untraced_runs(untraced: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Sorted disjoint ``(starts, ends)`` ns when lost work may have run (each at least 1 ns long,
    so a dropped-events timestamp marks the gap it falls in)."""
    if untraced.empty:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = untraced["start"].to_numpy(np.int64)
    return iv.union(starts, np.maximum(untraced["end"].to_numpy(np.int64), starts + 1))


def untraced_spans(kernel_starts, kernel_ends, untraced: pd.DataFrame, min_gap_ns: int) -> tuple:
    """The device-level holes of the whole trace (between the GPU's kernel runs, longer than
    ``min_gap_ns``) that overlap :func:`untraced_runs`: ``(starts, ends)`` ns. The window rules leave
    out the iterations that overlap them (:func:`pipeline.analysis.iterations.local_exclusions`)."""
    empty = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if untraced.empty:
        return empty
    s, e = iv.union(kernel_starts, kernel_ends)
    h0, h1 = e[:-1], s[1:]
    long = (h1 - h0) > min_gap_ns
    h0, h1 = h0[long], h1[long]
    hit = iv.overlap_with_each(h0, h1, *untraced_runs(untraced)) > 0
    return h0[hit], h1[hit]


def _id_runs(ids, most: int = 5) -> str:
    """``1030..1069`` for consecutive ids, ``3, 5`` otherwise; at most ``most`` runs, then ``...``."""
    ids = np.unique(np.asarray(ids, dtype=np.int64))
    breaks = np.flatnonzero(np.diff(ids) != 1) + 1
    runs = [f"{r[0]}..{r[-1]}" if r.size > 1 else str(r[0]) for r in np.split(ids, breaks)]
    return ", ".join(runs[:most] + (["..."] if len(runs) > most else []))


def untraced_warning(untraced: pd.DataFrame, untraced_ns: int) -> list[RowWarning]:
    """The warning naming the GPU's lost launches (kind ``launch`` rows of ``untraced``): how many,
    per process their correlationIds and APIs, when they were issued, and ``untraced_ns`` (the
    device idle in the window that is ``untraced``). Nothing when no launch was lost."""
    if untraced.empty:
        return []
    lost = untraced[(untraced["kind"] == "launch").to_numpy(bool)]
    if lost.empty:
        return []
    n = len(lost)
    who = "; ".join(f"pid {pid}, correlationIds {_id_runs(g['correlation_id'])} ({', '.join(sorted(set(g['name'])))})"
                    for pid, g in lost.groupby("pid", sort=True))
    issued = f"{int(lost['call_start'].min()) / 1e9:.6f}..{int(lost['call_end'].max()) / 1e9:.6f}"
    return [RowWarning(WarningCode.UNTRACED_LAUNCHES,
                       f"{n} CUDA launch{'es have' if n > 1 else ' has'} no kernel record (the trace lost "
                       f"{'them' if n > 1 else 'it'}): {who}, issued {issued} s on the report's clock; "
                       f"{untraced_ns / 1e6:.3f} ms of device idle in the window is untraced")]


def profiler_warning(device_gaps: pd.DataFrame, overhead: pd.DataFrame, rules: CategoryRules) -> list[RowWarning]:
    """The warning naming the device gaps categorised ``profiler`` (rows of ``device_gaps``, a frame or
    columns, with start, end, length, category): how many, their idle ns and the overhead kinds inside them."""
    hit = np.asarray(device_gaps["category"], dtype=object) == "profiler"
    if not hit.any():
        return []
    rows = profiler_rows(overhead, rules)
    g0, g1 = np.asarray(device_gaps["start"], dtype=np.int64)[hit], np.asarray(device_gaps["end"], dtype=np.int64)[hit]
    kinds = sorted({str(kind) for kind, s, e in zip(rows["kind"], rows["start"], rows["end"])
                    if bool(np.any((g0 < e) & (g1 > s)))})
    n, ns = int(hit.sum()), int(np.asarray(device_gaps["length"], dtype=np.int64)[hit].sum())
    return [RowWarning(WarningCode.PROFILER_OVERHEAD,
                       f"profiler overhead covers {n} device gap{'s' if n > 1 else ''}, {ns / 1e6:.3f} ms of idle in "
                       f"the window ({', '.join(kinds)}): Nsight Systems' own work, not the application's idle")]


def graph_executions(kernels, w0: int, w1: int) -> tuple[int, int]:
    """``(count, covered_ns)`` of the CUDA graph executions traced as a whole (rows with ``graph`` True;
    none when ``kernels``, a frame or columns with start, end, has no such column) that overlap the window
    W = [w0, w1): how many, and the time their union covers inside W (ns)."""
    if "graph" not in kernels:
        return 0, 0
    graph = np.asarray(kernels["graph"], dtype=bool)
    if not graph.any():
        return 0, 0
    s, e = iv.clip(np.asarray(kernels["start"], dtype=np.int64)[graph],
                   np.asarray(kernels["end"], dtype=np.int64)[graph], w0, w1)
    return int(s.size), iv.total_length(*iv.union(s, e))


def graph_warning(kernels, w0: int, w1: int, mode: str = "") -> list[RowWarning]:
    """The warning of a GPU whose window holds CUDA graph executions traced as a whole
    (:func:`graph_executions`): how many, the time they cover, that the gaps between their nodes cannot
    be seen (device idle is a lower bound inside them) and the capture's stated ``--cuda-graph-trace``
    ``mode`` ("": the export does not state it). Nothing when the window holds none."""
    n, covered = graph_executions(kernels, w0, w1)
    if not n:
        return []
    said = f"--cuda-graph-trace={mode} per the capture's metadata" if mode else \
        "the export does not state its --cuda-graph-trace mode"
    return [RowWarning(WarningCode.GRAPHS_TRACED_WHOLE,
                       f"{n} CUDA graph execution{'s' if n > 1 else ''} traced as a whole ({said}) "
                       f"cover{'' if n > 1 else 's'} {covered / 1e6:.3f} ms of the window: the GPU counts as busy for "
                       "the whole of each, so gaps between a graph's nodes cannot be seen and device idle is a lower "
                       "bound there (--cuda-graph-trace=node shows them)")]
