"""The picture of one GPU in and around its window, for the GPU's page (all times int ns).

One lane per stream (``pid:stream``: stream ids are per process) with its kernels, one lane per
copy direction (``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``, ``memset``, ...) with the copy-engine
work, and the detected iterations (kept, or excluded with the reason the window rule gave), over
the *context*: W widened by a margin either side (:func:`context_range`), so the page shows what
the window left out.

A GPU with 10,000 gaps must still give a small document, so lanes are aggregated: each lane is the
union of its intervals, and beyond its share of :data:`LANES_MAX_RUNS` (:func:`run_budget`) the
shortest holes between runs are closed (:func:`~pipeline.analysis.intervals.cap_runs`); more than :data:`MAX_STREAM_LANES`
streams are drawn as the busiest ones and one lane for the rest; at most :data:`MAX_MARKS`
iterations are listed. Each lane says how many runs it had before capping. Pure: frames in, plain
dicts and lists out (JSON-ready).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..arrays import distinct
from ..model import COPY_DIRECTIONS
from . import intervals as iv

#: The context either side of W: W / CONTEXT_DIVISOR (5 %) or one mean iteration, whichever is longer.
CONTEXT_DIVISOR = 20
#: At most this many runs over all lanes of one GPU (:func:`run_budget`), each lane at least LANE_MIN_RUNS.
LANES_MAX_RUNS = 2400
LANE_MIN_RUNS = 50
#: At most this many stream lanes: beyond it the busiest MAX_STREAM_LANES - 1 streams get a lane each
#: and the others share one.
MAX_STREAM_LANES = 16
#: At most this many iterations are listed (the first ones overlapping the context).
MAX_MARKS = 400
#: Copy lanes in this order; other directions (HtoH, arrays) after them, by name.
COPY_LANE_ORDER = ("HtoD", "DtoH", "DtoD", "PtoP", "memset")


def context_range(w0: int, w1: int, iteration_mean_ns: int, first_ns: int, last_ns: int) -> tuple[int, int]:
    """``(c0, c1)``: W = [w0, w1) widened either side by ``max((w1 - w0) // 20, iteration_mean_ns)``
    (5 % of W, or one mean iteration when longer), but not beyond the GPU's first and last record
    (``first_ns``, ``last_ns``) unless W itself is (an explicit ``--trim`` may be)."""
    margin = max((w1 - w0) // CONTEXT_DIVISOR, int(iteration_mean_ns))
    return max(w0 - margin, min(first_ns, w0)), min(w1 + margin, max(last_ns, w1))


def copy_directions(copies: pd.DataFrame) -> np.ndarray:
    """Per copy row its direction: ``memset``, else the ENUM_CUDA_MEMCPY_OPER name of ``copy_kind``
    (:data:`~pipeline.model.COPY_DIRECTIONS`: ``HtoD``, ``DtoH``, ``DtoD``, ``PtoP``,
    ...), ``unknown`` for an id it does not list. Shape ``(len(copies),)``, object."""
    codes = copies["copy_kind"].to_numpy(np.int64)
    ids, inverse = np.unique(codes, return_inverse=True)  # each direction named once
    names = np.array([COPY_DIRECTIONS.get(int(c), "unknown") for c in ids] + ["memset"], dtype=object)
    inverse = inverse.reshape(-1)
    inverse[copies["kind"].to_numpy(object) == "memset"] = ids.size
    return names[inverse]


def _runs(starts, ends, c0: int, c1: int, whole: tuple | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals clipped to the context ``[c0, c1)`` (their union cut to it: the same runs);
    ``whole``: their union when already computed."""
    return iv.clip_runs(*(whole if whole is not None else iv.union(starts, ends)), c0, c1)


def _in_window(starts, ends, w0: int, w1: int) -> np.ndarray:
    """True for intervals that overlap W (or, zero-length, lie in it)."""
    s, e = iv.as_ns(starts), iv.as_ns(ends)
    return ((e > w0) & (s < w1)) | ((s == e) & (s >= w0) & (s < w1))


def _lane(label: str, starts, ends, c0: int, c1: int, w0: int, w1: int, whole: tuple | None = None,
          **fields) -> dict:
    """One lane: its runs in the context (not capped yet), its busy ns inside W and ``fields``; ``whole``: the
    union of ``starts``, ``ends`` when already computed."""
    s, e = _runs(starts, ends, c0, c1, whole)
    # the runs are disjoint, and so are their parts in W: their total is their union's
    return {"label": label, **fields, "busy_ns": iv.total_length(*iv.clip(s, e, w0, w1)),
            "runs": (s, e)}


def stream_lanes(kernels: pd.DataFrame, gaps: pd.DataFrame, context: tuple[int, int],
                 window: tuple[int, int], whole: tuple | None = None) -> list[dict]:
    """One lane per (pid, stream) that runs a kernel in the context, sorted by pid, stream.

    Args:
        kernels: the GPU's kernels (start, end ns; pid, stream_id).
        gaps: its per-stream gaps in W (:func:`pipeline.analysis.gaps.stream_gaps`: pid, stream_id,
            length ns; a frame or columns): counted per lane.
        context: ``(c0, c1)`` ns; window: ``(w0, w1)`` ns.
        whole: the union of every kernel (:func:`pipeline.analysis.intervals.union`) when already computed
            (the runs of a GPU of one stream are cut out of it).
    Returns:
        dicts ``kind="stream"``, ``label`` (``"pid:stream"``), ``pid``, ``stream_id``, ``kernels`` (in W),
        ``busy_ns`` (kernel union in W), ``gaps`` and ``gap_ns`` (per-stream gaps in W), ``runs``
        (``(starts, ends)`` of the kernel union in the context, uncapped).
    """
    (c0, c1), (w0, w1) = context, window
    s, e = kernels["start"].to_numpy(np.int64), kernels["end"].to_numpy(np.int64)
    pids, streams = _ids(kernels["pid"]), _ids(kernels["stream_id"])
    near = _in_window(s, e, c0, c1)
    if not near.all():  # (every kernel, when the context holds the whole capture)
        near = np.flatnonzero(near)
        s, e, pids, streams = s[near], e[near], pids[near], streams[near]
    gap_n, gap_ns = {}, {}
    for p, st, n in zip(np.asarray(gaps["pid"], dtype=np.int64), np.asarray(gaps["stream_id"], dtype=np.int64),
                        np.asarray(gaps["length"], dtype=np.int64)):
        gap_n[(p, st)] = gap_n.get((p, st), 0) + 1
        gap_ns[(p, st)] = gap_ns.get((p, st), 0) + int(n)
    lanes = []
    for p, st, rows in _stream_rows(pids, streams):
        ls, le = (s, e) if rows is None else (s[rows], e[rows])
        lanes.append(_lane(f"{p}:{st}", ls, le, c0, c1, w0, w1, whole if rows is None else None, kind="stream",
                           pid=p, stream_id=st,
                           kernels=int(_in_window(ls, le, w0, w1).sum()),
                           gaps=gap_n.get((p, st), 0), gap_ns=gap_ns.get((p, st), 0)))
    return lanes


def _ids(column) -> np.ndarray:
    """An id column's values as its own integer array (no copy), else as int64."""
    values = column.to_numpy()
    return values if values.dtype.kind in "iu" else column.to_numpy(np.int64)


#: Streams of one process up to this many are picked out of the kernels one comparison each
#: (:func:`_stream_rows`); more are sorted.
FEW_STREAMS = 8


def _stream_rows(pids: np.ndarray, streams: np.ndarray) -> list[tuple[int, int, np.ndarray | None]]:
    """``(pid, stream_id, rows)`` of each (pid, stream) pair of the kernels, in (pid, stream) order: ``rows``
    their ascending positions, None for every row (a single pair)."""
    if not pids.size:
        return []
    if pids.min() == pids.max():  # one process, as most GPUs run
        p, ids = int(pids[0]), distinct([streams])
        if ids.size == 1:
            return [(p, int(ids[0]), None)]
        if ids.size <= FEW_STREAMS:
            return [(p, int(st), np.flatnonzero(streams == st)) for st in ids.tolist()]
    order = np.lexsort((streams, pids))
    return [(int(pids[block[0]]), int(streams[block[0]]), block)
            for block in np.split(order, np.flatnonzero(np.diff(pids[order]) | np.diff(streams[order])) + 1)]


def merge_quiet_streams(lanes: list[dict], window: tuple[int, int], max_lanes: int = MAX_STREAM_LANES) -> list[dict]:
    """At most ``max_lanes`` stream lanes: when there are more, the ``max_lanes - 1`` busiest in W
    (ties: pid, stream) keep theirs, in their order, and the others are drawn as one last lane
    (``kind="streams"``, ``label`` ``"N other streams"``, pid and stream_id -1, their runs unioned,
    kernels, gaps and gap_ns summed, ``busy_ns`` their union in W)."""
    if len(lanes) <= max_lanes:
        return lanes
    ranked = sorted(range(len(lanes)), key=lambda i: (-lanes[i]["busy_ns"], lanes[i]["pid"], lanes[i]["stream_id"]))
    keep = set(ranked[:max_lanes - 1])
    rest = [lanes[i] for i in range(len(lanes)) if i not in keep]
    s, e = iv.union(np.concatenate([lane["runs"][0] for lane in rest]),
                    np.concatenate([lane["runs"][1] for lane in rest]))
    merged = {"label": f"{len(rest)} other streams", "kind": "streams", "pid": -1, "stream_id": -1,
              "kernels": sum(lane["kernels"] for lane in rest), "gaps": sum(lane["gaps"] for lane in rest),
              "gap_ns": sum(lane["gap_ns"] for lane in rest), "streams": len(rest),
              "busy_ns": iv.union_length(*iv.clip(s, e, *window)), "runs": (s, e)}
    return [lanes[i] for i in range(len(lanes)) if i in keep] + [merged]


def copy_lanes(copies: pd.DataFrame, context: tuple[int, int], window: tuple[int, int]) -> list[dict]:
    """One lane per copy direction that runs in the context (:data:`COPY_LANE_ORDER` first).

    Args:
        copies: the GPU's memcpy/memset rows (start, end ns; kind, copy_kind, bytes).
        context: ``(c0, c1)`` ns; window: ``(w0, w1)`` ns.
    Returns:
        dicts ``kind="copy"``, ``label`` = ``direction`` (:func:`copy_directions`), ``copies`` and
        ``bytes`` (rows overlapping W), ``busy_ns`` (their union in W), ``runs`` (union in the context).
    """
    (c0, c1), (w0, w1) = context, window
    if copies.empty:
        return []
    s, e = copies["start"].to_numpy(np.int64), copies["end"].to_numpy(np.int64)
    near = np.flatnonzero(_in_window(s, e, c0, c1))
    s, e, nbytes = s[near], e[near], copies["bytes"].to_numpy(np.int64)[near]
    directions = copy_directions(copies)[near]
    rank = {d: i for i, d in enumerate(COPY_LANE_ORDER)}
    lanes = []
    for d in sorted(set(directions), key=lambda d: (rank.get(d, len(rank)), d)):
        mine = directions == d
        inside = mine & _in_window(s, e, w0, w1)
        lanes.append(_lane(d, s[mine], e[mine], c0, c1, w0, w1, kind="copy", direction=d,
                           copies=int(inside.sum()), bytes=int(nbytes[inside].sum())))
    return lanes


def run_budget(counts: list[int], max_runs: int = LANES_MAX_RUNS, min_runs: int = LANE_MIN_RUNS) -> list[int]:
    """Runs each lane may keep: ``max_runs`` shared out, smallest lanes first, each getting what it has
    up to an equal share of what is left (at least ``min_runs``), so the runs a small lane does not use
    go to the busier ones. The total is at most ``max(max_runs, min_runs × lanes)``."""
    budget = [0] * len(counts)
    left = max_runs
    for done, i in enumerate(sorted(range(len(counts)), key=lambda i: (counts[i], i))):
        budget[i] = min(counts[i], max(min_runs, left // (len(counts) - done)))
        left -= budget[i]
    return budget


def capped(lanes: list[dict], max_runs: int = LANES_MAX_RUNS, min_runs: int = LANE_MIN_RUNS) -> list[dict]:
    """The lanes as JSON-ready dicts: each lane's runs capped to its :func:`run_budget`
    (:func:`~pipeline.analysis.intervals.cap_runs`: the shortest holes closed), as ``runs``
    ``[[start, end], ...]`` with ``runs_total``, the number of runs before capping."""
    budget = run_budget([int(lane["runs"][0].size) for lane in lanes], max_runs, min_runs)
    out = []
    for lane, keep in zip(lanes, budget):
        s, e = lane["runs"]
        cs, ce = iv.cap_runs(s, e, max(keep, 1))
        out.append({**{k: v for k, v in lane.items() if k != "runs"}, "runs_total": int(s.size),
                    "runs": np.column_stack((cs, ce)).astype(np.int64, copy=False).tolist()})
    return out


def iteration_marks(extents, context: tuple[int, int], max_marks: int = MAX_MARKS) -> tuple[list, int]:
    """The iterations on the GPU timeline overlapping the context, kept or excluded.

    Args:
        extents: ``(number, start ns, end ns, status)`` of every iteration with a GPU-side extent
            (:attr:`pipeline.analysis.window.Window.extents`: NVTX ranges projected onto the GPU,
            :mod:`pipeline.analysis.iterations`), status ``"kept"`` or the reason it was left out.
        context: ``(start, end)`` ns.
    Returns:
        ``(marks, total)``: ``[[number, start, end, reason], ...]`` (``reason`` ``""`` for a kept one),
        at most ``max_marks`` of them, the first in time; ``total``: how many overlap the context.
        An iteration without a GPU extent (no kernel launched from inside it) cannot be drawn; the
        page's table of excluded iterations names it (the row's ``excluded_iterations``).
    """
    c0, c1 = context
    near = sorted([int(n), int(a), int(z), "" if st == "kept" else str(st)]
                  for n, a, z, st in extents if int(z) > c0 and int(a) < c1)
    near.sort(key=lambda m: (m[1], m[2], m[0]))
    return near[:max_marks], len(near)


def gpu_picture(kernels: pd.DataFrame, copies: pd.DataFrame, gaps: pd.DataFrame, win,
                capture_start_ns: int | None, capture_start_source: str, whole: tuple | None = None) -> dict:
    """The keys the GPU's page adds to its JSON ``timeline`` (all ns; docs/outputs.md#per-gpu-json).

    ``context`` ``[c0, c1]`` (:func:`context_range`); ``capture_start_ns`` and ``capture_start_source``
    (the timeline's zero, :func:`pipeline.load.integrity.capture_start` or for a PyTorch profiler trace
    :func:`pipeline.load.kineto.capture_start`; None and ``""`` when unknown);
    ``lanes``: stream lanes (:func:`stream_lanes`, :func:`merge_quiet_streams`) then copy lanes
    (:func:`copy_lanes`), capped (:func:`capped`); ``marks`` and ``marks_total``: the iterations
    (:func:`iteration_marks`). ``win``: the :class:`~pipeline.analysis.window.Window`; ``whole``: the union of
    every kernel when already computed (:func:`stream_lanes`).
    """
    w = (win.start_ns, win.end_ns)
    parts = [kernels] + ([copies] if len(copies) else [])
    first = min(int(p["start"].to_numpy(np.int64).min()) for p in parts if len(p))
    last = max(int(p["end"].to_numpy(np.int64).max()) for p in parts if len(p))
    context = context_range(*w, win.iteration_mean_ns, first, last)
    streams = merge_quiet_streams(stream_lanes(kernels, gaps, context, w, whole), w)
    marks, total = iteration_marks(win.extents, context)
    return {"context": [int(context[0]), int(context[1])],
            "capture_start_ns": None if capture_start_ns is None else int(capture_start_ns),
            "capture_start_source": capture_start_source,
            "lanes": capped(streams + copy_lanes(copies, context, w)),
            "marks": marks, "marks_total": total}
