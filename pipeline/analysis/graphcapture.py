"""CUDA / HIP graph capture: where launches are recorded into a graph and never run
(docs/definitions.md#graph-capture), one definition for both loaders and the analysis.

A thread's capture range runs from a ``cudaStreamBeginCapture`` (``cuStreamBeginCapture``,
``hipStreamBeginCapture``, their ``…ToGraph`` forms) call's start to the end of the next
``cudaStreamEndCapture`` (``cuStreamEndCapture``, ``hipStreamEndCapture``) call on the same thread
(process and thread id). Nested begins on one thread (several streams captured at once) stay in one
range until the thread's captures are all ended. An end with no begin before it (the profiler started
mid-capture) closes a range open since before the trace; a begin never ended (it stopped mid-capture)
opens one to the end of the trace.

* Launch calls on a thread inside one of its capture ranges (:func:`captured`) are recorded into a
  graph: no kernel by design, never a lost record (:func:`pipeline.load.caveats.lost_launches`).
* A capture phase is start-up: from a GPU's first kernel to the end of the last capture range that
  overlaps its kernels' span (:func:`phase_end`: the captures and the warm-up runs before and between
  them). The capture C and a ``span`` window start at the first kernel after it; a GPU with no kernel
  after it has no steady state (docs/definitions.md#graph-capture).
* NVTX ranges that overlap a capture range of their thread (``capture_32_DECODE``) do not decide the
  job's kind (:func:`outside_capture`).

A graph replayed (``cudaGraphLaunch``, ``hipGraphLaunch``: its kernels share the launch's
correlationId) runs: its kernels are busy time like any other.

Pure: runtime-call and range columns in, int64 ns arrays and the row's warnings out.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..arrays import pair_keys
from ..frames import codes_of
from ..model import RowWarning, WarningCode

#: CUDA runtime and driver API calls that launch kernels (names normalised: no ``_v…``/``_ptsz`` suffix),
#: and their HIP twins. A graph launch may run many kernels under its one correlationId (or only copies).
LAUNCH_APIS = frozenset({
    "cudaLaunch", "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cudaGraphLaunch",
    "cuLaunch", "cuLaunchGrid", "cuLaunchGridAsync", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "cuLaunchCooperativeKernelMultiDevice", "cuGraphLaunch",
    # ROCm (HIP), as PyTorch profiler traces on AMD GPUs name them
    "hipLaunchKernel", "hipExtLaunchKernel", "hipModuleLaunchKernel", "hipExtModuleLaunchKernel",
    "hipHccModuleLaunchKernel", "hipLaunchCooperativeKernel", "hipLaunchCooperativeKernelMultiDevice",
    "hipExtLaunchMultiKernelMultiDevice", "hipGraphLaunch",
})
#: Calls that begin a stream capture (names normalised), CUDA runtime, driver and HIP.
BEGIN_APIS = frozenset({"cudaStreamBeginCapture", "cudaStreamBeginCaptureToGraph", "cuStreamBeginCapture",
                        "cuStreamBeginCaptureToGraph", "hipStreamBeginCapture", "hipStreamBeginCaptureToGraph"})
#: Calls that end one.
END_APIS = frozenset({"cudaStreamEndCapture", "cuStreamEndCapture", "hipStreamEndCapture"})
#: A range's open side: before or after every time of a trace.
OPEN_START, OPEN_END = np.iinfo(np.int64).min, np.iinfo(np.int64).max

_EMPTY = np.zeros(0, dtype=np.int64)


#: :func:`name_mask` compares the codes of up to this many matching names one by one (no gather).
FEW_NAMES = 4


def name_mask(names, apis: frozenset) -> np.ndarray:
    """Which of ``names`` (a Series, categorical or not, of normalised API names) are in ``apis``: ``(n,)`` bool."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        hit = np.array([str(c) in apis for c in names.cat.categories] + [False], dtype=bool)
        wanted = np.flatnonzero(hit)
        codes = codes_of(names)
        if wanted.size > FEW_NAMES:
            return hit[codes]  # codes -1 (no name): the last slot, False
        mask = np.zeros(codes.size, dtype=bool)  # a few names (one launch API, no capture call): compared
        for code in wanted.tolist():
            mask |= codes == code
        return mask
    return names.astype(str).isin(apis).to_numpy()


def ranges(runtime) -> dict[str, np.ndarray]:
    """The capture ranges of ``runtime`` (a frame with start, end, pid, tid, name): columns ``pid``,
    ``tid``, ``start``, ``end`` (int64; :data:`OPEN_START` / :data:`OPEN_END` for an open side), sorted by
    thread then start. Empty columns when no call begins or ends a capture."""
    names = runtime["name"]
    begin, end = name_mask(names, BEGIN_APIS), name_mask(names, END_APIS)
    rows = np.flatnonzero(begin | end)
    if not rows.size:
        return {"pid": _EMPTY, "tid": _EMPTY, "start": _EMPTY, "end": _EMPTY}
    pid = np.asarray(runtime["pid"])[rows].astype(np.int64)
    tid = np.asarray(runtime["tid"])[rows].astype(np.int64)
    t0 = np.asarray(runtime["start"])[rows].astype(np.int64)
    t1 = np.asarray(runtime["end"])[rows].astype(np.int64)
    opens = begin[rows]
    order = np.lexsort((~opens, t0, tid, pid))  # a begin and an end at one instant: the begin first
    out = []
    thread, depth, since = None, 0, 0
    for i in order.tolist():
        me = (int(pid[i]), int(tid[i]))
        if me != thread:
            if depth:
                out.append((*thread, since, OPEN_END))
            thread, depth = me, 0
        if opens[i]:
            if not depth:
                since = int(t0[i])
            depth += 1
        elif depth:
            depth -= 1
            if not depth:
                out.append((*me, since, int(t1[i])))
        else:  # ended with no begin seen: open since before the trace (or a range just closed goes on)
            if out and out[-1][:2] == me:
                out[-1] = (*me, out[-1][2], int(t1[i]))
            else:
                out.append((*me, OPEN_START, int(t1[i])))
    if depth:
        out.append((*thread, since, OPEN_END))
    cols = np.array(out, dtype=np.int64).reshape(-1, 4)
    return {"pid": cols[:, 0], "tid": cols[:, 1], "start": cols[:, 2], "end": cols[:, 3]}


def overlapping(pid, tid, start, end, found: dict) -> np.ndarray:
    """Which items (``pid``, ``tid``, ``start``, ``end``: int arrays, [start, end) or a point when
    ``end`` is ``start``) meet a capture range of their own thread (``found``: :func:`ranges`): the item
    starts before the range ends and ends at or after it starts. ``(n,)`` bool."""
    start = np.asarray(start, dtype=np.int64)
    hit = np.zeros(start.size, dtype=bool)
    if not found["start"].size or not start.size:
        return hit
    end = np.asarray(end, dtype=np.int64)
    keys = pair_keys(pid, tid)
    range_keys = pair_keys(found["pid"], found["tid"])
    for key in np.unique(range_keys).tolist():
        mine = np.flatnonzero(keys == key)
        if not mine.size:
            continue
        r0, r1 = found["start"][range_keys == key], found["end"][range_keys == key]  # sorted, disjoint
        # the last range starting at or before each item's end: the only one it can meet past its start
        at = np.searchsorted(r0, end[mine], side="right") - 1
        ok = at >= 0
        hit[mine[ok]] = start[mine[ok]] < r1[at[ok]]
    return hit


def captured(runtime, found: dict | None = None) -> np.ndarray:
    """Which calls of ``runtime`` (start, end, pid, tid, name) start inside a capture range of their
    thread (``found``: :func:`ranges` of ``runtime`` when None). ``(n,)`` bool."""
    found = ranges(runtime) if found is None else found
    if not found["start"].size:
        return np.zeros(len(runtime["start"]), dtype=bool)
    start = np.asarray(runtime["start"], dtype=np.int64)
    return overlapping(runtime["pid"], runtime["tid"], start, start, found)


def captured_launches(runtime, found: dict | None = None) -> np.ndarray:
    """Which calls of ``runtime`` are launches (:data:`LAUNCH_APIS`) recorded into a graph (:func:`captured`)."""
    return name_mask(runtime["name"], LAUNCH_APIS) & captured(runtime, found)


def outside_capture(nvtx, found: dict) -> np.ndarray:
    """Which NVTX ranges of ``nvtx`` (start, end, pid, tid) meet no capture range of their thread. ``(n,)`` bool."""
    return ~overlapping(nvtx["pid"], nvtx["tid"], nvtx["start"], nvtx["end"], found)


def phase_end(found: dict, c0: int, c1: int) -> int | None:
    """The end of a GPU's graph-capture start-up: the end of the last capture range (``found``:
    :func:`ranges`, any thread of its processes) that overlaps its kernels' span [c0, c1), clipped to
    ``c1``; None when none does (docs/definitions.md#graph-capture)."""
    ends = meeting(found, c0, c1)["end"]
    return int(min(int(ends.max()), c1)) if ends.size else None


def meeting(found: dict, c0: int, c1: int) -> dict:
    """The capture ranges of ``found`` that overlap [c0, c1)."""
    keep = (found["start"] < c1) & (found["end"] > c0)
    return {k: v[keep] for k, v in found.items()}


def warnings(runtime, found: dict, c0: int, end_ns: int | None, startup_only: bool, w0: int,
             w1: int) -> list[RowWarning]:
    """The warnings of a GPU whose kernels' span starts at ``c0`` and whose graph-capture start-up ends at
    ``end_ns`` (:func:`phase_end`; None: no capture, no warning), window [w0, w1): ``graph-capture`` naming
    the launches recorded into graphs inside the ranges (``found``, of ``runtime``'s calls) that overlap the
    start-up, the start-up's length and how much of W it holds; ``startup-only`` when no kernel runs after it."""
    if end_ns is None:
        return []
    mine = meeting(found, c0, end_ns)
    n = int(captured_launches(runtime, mine).sum())
    begins = sorted({str(x) for x in runtime["name"][name_mask(runtime["name"], BEGIN_APIS)]}) or ["a begin"]
    ranges_n = int(mine["start"].size)
    inside = max(0, min(w1, end_ns) - max(w0, c0))
    where = f"{inside / 1e6:,.3f} ms of it inside the window" if inside else "the window leaves it out"
    out = [RowWarning(WarningCode.GRAPH_CAPTURE,
                      f"graph capture: {n} launch{'es' if n != 1 else ''} inside {ranges_n} stream-capture "
                      f"range{'s' if ranges_n != 1 else ''} ({', '.join(begins)} … EndCapture) recorded into graphs, "
                      f"not run (no kernel by design, not lost); start-up from the first kernel to the last capture's "
                      f"end {(end_ns - c0) / 1e6:,.3f} ms (graph_capture_ns, shown apart), {where}")]
    if startup_only:
        out.append(RowWarning(WarningCode.STARTUP_ONLY,
                              f"no kernel runs after the last graph capture ends ({end_ns / 1e9:.6f} s on the report's "
                              "clock): the window is start-up only (capture and warm-up), not a steady state; its "
                              "month is not the job's"))
    return out
