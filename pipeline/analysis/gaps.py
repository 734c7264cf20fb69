"""Per-GPU idle metrics over an analysis window (docs/definitions.md#device-level-idle).

* device-level idle: |W| minus the union of all kernel intervals clipped to W,
  split into copy-only (copy engines busy, no kernel) and dark time;
* per-stream gaps: on each (process, stream), the time from the latest kernel
  end seen so far to the next kernel start, kept when longer than ``min_gap_ns``;
* size buckets that always add up to the gap totals.

Inputs are pandas frames from :class:`pipeline.model.GpuTrace`; the math itself
lives in :mod:`pipeline.analysis.intervals`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..frames import codes_of, take_rows
from . import intervals as iv

#: Bucket edges in ns: [threshold, 5 ms], (5 ms, 50 ms], > 50 ms (docs/definitions.md#size-buckets).
BUCKET_5MS = 5_000_000
BUCKET_50MS = 50_000_000


@dataclass(frozen=True)
class DeviceIdle:
    """Device-level idle over W, all ints in ns.

    ``idle_ns == window_ns - busy_ns`` and ``idle_ns == copy_only_ns + dark_ns``.
    """

    window_ns: int
    busy_ns: int
    idle_ns: int
    copy_only_ns: int
    dark_ns: int


def busy_runs(kernel_starts, kernel_ends, w0: int, w1: int, whole: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel union inside W = [w0, w1): sorted disjoint ``(starts, ends)`` int64 ns runs
    (kernels clipped to W first). Shared by :func:`device_idle`, :func:`device_holes` and the
    timeline, which would otherwise each compute it. ``whole``: the union of every kernel (unclipped,
    :func:`pipeline.analysis.intervals.union`) when already computed: the runs are cut out of it."""
    if whole is not None:
        return iv.clip_runs(*whole, w0, w1)
    return iv.union(*iv.clip(kernel_starts, kernel_ends, w0, w1))


def device_idle(kernel_starts, kernel_ends, copy_starts, copy_ends, w0: int, w1: int,
                runs: tuple | None = None) -> DeviceIdle:
    """Device-level ("true") idle of one GPU inside W = [w0, w1).

    Kernel and copy intervals are clipped to W first (straddlers are cut, not
    dropped). No threshold. Copy-only time is the copy-engine union minus the
    kernel union; dark time is the rest of the idle. ``runs``: the kernel union
    (:func:`busy_runs`) when already computed.
    """
    window_ns = int(w1 - w0)
    ks, ke = runs if runs is not None else busy_runs(kernel_starts, kernel_ends, w0, w1)
    busy = iv.total_length(ks, ke)
    cs, ce = iv.clip(copy_starts, copy_ends, w0, w1)
    copy_only = iv.total_length(*iv.difference(*iv.union(cs, ce), ks, ke))  # the kernel runs are a union already
    idle = window_ns - busy
    return DeviceIdle(window_ns, busy, idle, copy_only, idle - copy_only)


def kernels_in_window(kernels: pd.DataFrame, w0: int, w1: int) -> pd.DataFrame:
    """Kernels that intersect W, clipped to it, in per-stream order.

    Order: (pid, stream_id, start, end, correlation_id) (docs/definitions.md#per-stream-gaps). Zero-
    length kernels inside W are kept (they carry names and never open a gap).
    """
    rows, columns = _in_window(kernels, w0, w1)
    return take_rows(kernels, rows, start=columns["start"], end=columns["end"])


def window_columns(kernels: pd.DataFrame, w0: int, w1: int) -> dict:
    """:func:`kernels_in_window` as columns: ``start``, ``end``, ``pid``, ``stream_id``,
    ``correlation_id`` (int64 arrays) and ``name`` (a Series with a fresh index, the frame's dtype):
    what the analysis reads of them, without making the frame."""
    rows, columns = _in_window(kernels, w0, w1)
    columns["name"] = kernels["name"].take(rows).reset_index(drop=True)
    return columns


def _in_window(kernels: pd.DataFrame, w0: int, w1: int) -> tuple[np.ndarray, dict]:
    """``(rows, columns)``: the positions of the kernels in W in per-stream order
    (:func:`kernels_in_window`) and their int64 columns, ``start`` and ``end`` clipped to W."""
    s, e = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    rows = np.flatnonzero((e > w0) & (s < w1) | ((s == e) & (s >= w0) & (s < w1)))
    start = np.maximum(s[rows], w0)
    end = np.minimum(e[rows], w1)
    pid = kernels["pid"].to_numpy(np.int64)[rows]
    stream = kernels["stream_id"].to_numpy(np.int64)[rows]
    corr = kernels["correlation_id"].to_numpy(np.int64)[rows]
    order = np.lexsort((corr, end, start, stream, pid))  # last key sorts first; stable
    return rows[order], {"start": start[order], "end": end[order], "pid": pid[order], "stream_id": stream[order],
                         "correlation_id": corr[order]}


def name_lookup(names: pd.Series):
    """A function from row positions (int array) to the kernel names at them (object array),
    without turning a whole categorical column into Python strings first."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes = codes_of(names)
        categories = np.asarray(names.cat.categories, dtype=object)
        return lambda idx: categories[codes[idx]]
    values = names.to_numpy(object)
    return lambda idx: values[idx]


def stream_gaps(kernels: pd.DataFrame, min_gap_ns: int) -> tuple[pd.DataFrame, np.ndarray]:
    """Per-stream gaps longer than ``min_gap_ns`` and every positive gap length.

    Args:
        kernels: output of :func:`kernels_in_window` (sorted per stream), or
            :func:`window_columns`.
        min_gap_ns: keep gaps strictly longer than this (default config 1 ms).
    Returns:
        ``(gaps, all_lengths)``: ``gaps`` has one row per kept gap with pid,
        stream_id, start (ns, the latest end before it), length (ns), end,
        kernel_before, kernel_after; ``all_lengths`` holds every positive
        gap length on every stream (for the sub-threshold sliver count).
    """
    gaps, lengths = stream_gap_columns(kernels, min_gap_ns)
    return pd.DataFrame(gaps), lengths


def stream_gap_columns(kernels, min_gap_ns: int) -> tuple[dict, np.ndarray]:
    """:func:`stream_gaps` with the gaps as columns (name -> array; the names object arrays)."""
    all_lengths = []
    starts = np.asarray(kernels["start"], dtype=np.int64)
    ends = np.asarray(kernels["end"], dtype=np.int64)
    pids = np.asarray(kernels["pid"], dtype=np.int64)
    streams = np.asarray(kernels["stream_id"], dtype=np.int64)
    edges = stream_edges(pids, streams)
    found = {c: [] for c in ("pid", "stream_id", "start", "length", "before", "after")}
    for lo, hi in zip(edges[:-1], edges[1:]):
        stream = iv.gaps_of(starts[lo:hi], ends[lo:hi], min_gap_ns)
        all_lengths.append(stream.positive)
        n = stream.length.size
        if n == 0:
            continue
        for column, values in (("pid", np.full(n, pids[lo])), ("stream_id", np.full(n, streams[lo])),
                               ("start", stream.start), ("length", stream.length), ("before", lo + stream.before),
                               ("after", lo + stream.after)):
            found[column].append(values)
    joined = {c: np.concatenate(parts).astype(np.int64, copy=False) if parts else np.zeros(0, np.int64)
              for c, parts in found.items()}
    names = name_lookup(kernels["name"]) if joined["start"].size else (lambda idx: np.zeros(0, dtype=object))
    gaps = {"pid": joined["pid"], "stream_id": joined["stream_id"], "start": joined["start"],
            "length": joined["length"], "end": joined["start"] + joined["length"],
            "kernel_before": names(joined["before"]), "kernel_after": names(joined["after"])}
    lengths = np.concatenate(all_lengths) if all_lengths else np.zeros(0, dtype=np.int64)
    return gaps, lengths


def stream_edges(pids: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Where each stream's rows begin in rows grouped per (pid, stream) (:func:`kernels_in_window`'s
    order), and the row count last: ``[0, b1, ..., n]`` (``[0]`` for no rows)."""
    if pids.size == 0:
        return np.array([0])
    bounds = np.flatnonzero((pids[1:] != pids[:-1]) | (streams[1:] != streams[:-1])) + 1
    return np.concatenate(([0], bounds, [pids.size]))



def buckets(lengths: np.ndarray) -> dict:
    """Count and total (ns) of gaps per size bucket.

    Buckets: ``le_5ms`` (length <= 5 ms), ``5_50ms`` (5 ms < length <= 50 ms),
    ``gt_50ms`` (> 50 ms). Applied to already-thresholded gaps, so the three
    always add up to the gap count and total for any threshold.
    """
    x = iv.as_ns(lengths)
    masks = {
        "le_5ms": x <= BUCKET_5MS,
        "5_50ms": (x > BUCKET_5MS) & (x <= BUCKET_50MS),
        "gt_50ms": x > BUCKET_50MS,
    }
    out = {}
    for name, m in masks.items():
        out[f"gaps_{name}"] = int(m.sum())
        out[f"gaps_{name}_ns"] = int(x[m].sum())
    return out


def roster(gaps: pd.DataFrame, top_n: int) -> pd.DataFrame:
    """The ``top_n`` longest gaps (ties: earlier start first, then stream).

    The roster is the head, not the whole: totals come from the summary.
    """
    if gaps.empty:
        return gaps.reset_index(drop=True)
    return gaps.iloc[roster_rows(gaps, top_n)].reset_index(drop=True)


def roster_rows(gaps, top_n: int) -> np.ndarray:
    """The row positions of :func:`roster` (``gaps``: a frame or columns with length, start, pid,
    stream_id), longest first."""
    order = np.lexsort(tuple(np.asarray(gaps[c], dtype=np.int64) for c in ("stream_id", "pid", "start"))
                       + (-np.asarray(gaps["length"], dtype=np.int64),))  # the last key sorts first; stable
    return order[:max(top_n, 0)]


def device_holes(kernel_starts, kernel_ends, w0: int, w1: int, runs: tuple | None = None) -> np.ndarray:
    """Lengths (ns) of the device-level idle holes in W: the complement of the
    kernel union, edges included. They sum to ``DeviceIdle.idle_ns``.

    Used for ``launch``: idle made of many sub-threshold slivers means the CPU
    cannot issue kernels fast enough. ``runs``: :func:`busy_runs` when already computed.
    """
    ks, ke = runs if runs is not None else busy_runs(kernel_starts, kernel_ends, w0, w1)
    hole_starts = np.concatenate(([w0], ke)).astype(np.int64)
    hole_ends = np.concatenate((ks, [w1])).astype(np.int64)
    lengths = hole_ends - hole_starts
    return lengths[lengths > 0]


#: Stand-ins for the kernel before/after a device gap that touches an edge of W.
WINDOW_START = "(window start)"
WINDOW_END = "(window end)"


def device_gaps(kernels: pd.DataFrame, w0: int, w1: int, min_gap_ns: int) -> pd.DataFrame:
    """Device-level idle holes longer than ``min_gap_ns`` as gap rows.

    The vertical cut: all streams of all processes on the GPU merged, so a hole
    is time when no kernel runs at all. Rows look like :func:`stream_gaps` rows
    (pid and stream_id are -1); holes at the edges of W name
    :data:`WINDOW_START` / :data:`WINDOW_END` instead of a kernel. Together with
    the sub-threshold holes of :func:`device_holes` they add up to the
    device-level idle. These rows carry the category shares (% of W).

    ``kernels``: output of :func:`kernels_in_window` (clipped to W), or :func:`window_columns`.
    """
    return pd.DataFrame(device_gap_columns(kernels, w0, w1, min_gap_ns))


def device_gap_columns(kernels, w0: int, w1: int, min_gap_ns: int) -> dict:
    """:func:`device_gaps` as columns (name -> array; the names object arrays)."""
    # Zero-length kernels cover nothing; dropping them keeps device gaps + device slivers == idle
    # (the holes of :func:`device_holes`).
    s = np.asarray(kernels["start"], dtype=np.int64)
    e = np.asarray(kernels["end"], dtype=np.int64)
    rows = np.flatnonzero(e > s)
    rows = rows[np.lexsort((np.asarray(kernels["correlation_id"], dtype=np.int64)[rows], e[rows], s[rows]))]
    s, e = s[rows], e[rows]
    kernel_names = name_lookup(kernels["name"])

    def names(idx):
        return kernel_names(rows[np.asarray(idx, dtype=np.int64)])
    starts, lengths, before, after = [], [], [], []
    if s.size == 0:
        if w1 - w0 > min_gap_ns:
            starts, lengths, before, after = [w0], [w1 - w0], [WINDOW_START], [WINDOW_END]
    else:
        if s[0] - w0 > min_gap_ns:
            starts.append(w0), lengths.append(int(s[0] - w0)), before.append(WINDOW_START), after.append(names(0))
        found = iv.gaps_of(s, e, min_gap_ns)
        starts.extend(found.start.tolist()), lengths.extend(found.length.tolist())
        before.extend(names(found.before).tolist()), after.extend(names(found.after).tolist())
        last_end = int(e.max())
        if w1 - last_end > min_gap_ns:
            starts.append(last_end), lengths.append(w1 - last_end)
            before.append(names(found.last)), after.append(WINDOW_END)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    return {
        "pid": np.full(starts.size, -1, np.int64), "stream_id": np.full(starts.size, -1, np.int64),
        "start": starts[order], "length": lengths[order], "end": (starts + lengths)[order],
        "kernel_before": np.asarray(before, dtype=object)[order], "kernel_after": np.asarray(after, dtype=object)[order],
    }
