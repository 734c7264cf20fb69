"""The scaled generator: distributed-training exports of a few hundred to millions of
kernels with planted gaps of every category, and their truth computed with plain numpy."""
from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass

import numpy as np

from ..config import AnalysisConfig, CategoryRules, WindowRules
from ..model import CATEGORIES, GAP_CATEGORIES
from .workload import (ADAM_OPTIMIZER, API_EXPORT_NAMES, BUCKET_5MS, BUCKET_50MS, CAPTURE_START_NS, COMPUTE_STREAM,
    COPY_STREAM, H2D_BYTES_PER_NS, HGX_BUS_IDS, MS, NCCL_STREAM, NOT_APPLICATION_CAUSES,
    TRANSFORMER_BACKWARD,
    TRANSFORMER_FORWARD, TRANSFORMER_HEAD, US, WITNESS_MARGIN_NS, is_collective, write_truth)
from .writer import DTOH, GLOBAL_ID_BASE, HTOD, NVTX_PUSH_POP, RUNTIME_EVENT_CLASS, SCHEMA, global_pid, global_tid

# ---------------------------------------------------------------------------
# Scaled generator: distributed-training exports of up to millions of kernels.
#
# Everything per kernel is planned with numpy arrays (durations, slivers,
# starts, launch calls), the few per-iteration events (planted gaps and their
# witnesses, NVTX ranges, checkpoint, transfers) in a short loop over
# iterations, and the rows go to SQLite in bulk (constant columns inlined in the
# INSERT, journal and fsync off on a temporary file that is renamed at the end).
# The truth is computed from the plan with plain numpy written here (a sweep-line
# union, prefix-sum coverage, the rules of docs/definitions.md), never with pipeline.analysis.intervals,
# pipeline.analysis.gaps or pipeline.analysis.attribution. A gap is ``periodic`` when it is one of
# the pauses planted as periodic: what was planted, not a second copy of the
# product's detection rule (which may disagree: see tests/test_synth_scale.py).
# ---------------------------------------------------------------------------

SCALED_ITERATION_NS = 180 * MS          #: compute work of one steady iteration (kernels only)
SCALED_KERNELS_PER_ITERATION = 3_000    #: per GPU, when ``iterations`` is not given
SCALED_MIN_ITERATIONS = 10              #: warm-up + 2 periodic events + checkpoint + stable run
SCALED_MIN_COMPUTE_KERNELS = 30         #: compute-stream kernels per iteration at least
SCALED_MIN_KERNEL_NS = 20 * US
SCALED_PERIOD, SCALED_PERIOD_FIRST = 4, 2   #: a periodic pause in iterations 2, 6, 10, ...
SCALED_PLANTS_PER_ITERATION = 3         #: planted sync/data/comm/cpu gaps per steady iteration
#: The planted gaps' pool, drawn in this order before it is shuffled: (category, weight) pairs.
SCALED_PLANT_MIX = (("sync", 1), ("data", 1), ("comm", 1), ("cpu", 1))
SCALED_BOUNDARY_SHARE = 0.3             #: share of iteration starts preceded by a planted boundary gap
SCALED_GAP_NS = {
    "sync": (1_500 * US, 4 * MS), "data": (2 * MS, 5 * MS), "comm": (1_200 * US, 3 * MS),
    "cpu": (1_500 * US, 4 * MS), "boundary": (2 * MS, 5 * MS), "periodic": (55 * MS, 65 * MS),
    "warmup": (4 * MS, 8 * MS), "checkpoint": (200 * MS, 260 * MS),
}
SCALED_NORMAL_SLIVER_NS = (1 * US, 4 * US)          #: launch gap between back-to-back kernels
SCALED_LAUNCH_SLIVER_SHARE = (0.5, 0.9)             #: launch-bound GPU: sliver = share x previous kernel
SCALED_LAUNCH_SLIVER_NS = (5 * US, 900 * US)        #: ... clipped to this (always sub-threshold)
SCALED_ITERATION_GAP_NS = (60 * US, 150 * US)       #: ordinary gap between two iterations
SCALED_BUCKET_COLLECTIVE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
SCALED_COMM_COLLECTIVE = "ncclDevKernel_AllGather_RING_LL"
_SCALED_CATALOGS = (TRANSFORMER_FORWARD + TRANSFORMER_HEAD, TRANSFORMER_BACKWARD, ADAM_OPTIMIZER)
_SCALED_SYNC_APIS = ("cudaStreamSynchronize",) * 3 + ("cudaEventSynchronize", "cudaDeviceSynchronize")
#: TARGET_INFO_GPU as Nsight Systems 2026 writes it (every column; ``SCHEMA`` keeps the ones the pipeline reads).
SCALED_TARGET_INFO_GPU = (
    "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, "
    "l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER, "
    "pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, ctxswDevPath TEXT, "
    "ctrlDevPath TEXT, revision INTEGER, nodeMask INTEGER, constantMemory INTEGER, maxIPC INTEGER, "
    "maxRegistersPerBlock INTEGER, maxShmemPerBlock INTEGER, maxShmemPerBlockOptin INTEGER, "
    "maxShmemPerSm INTEGER, maxRegistersPerSm INTEGER, threadsPerWarp INTEGER, asyncEngines INTEGER, "
    "maxWarpsPerSm INTEGER, maxBlocksPerSm INTEGER, maxThreadsPerBlock INTEGER, maxBlockDimX INTEGER, "
    "maxBlockDimY INTEGER, maxBlockDimZ INTEGER, maxGridDimX INTEGER, maxGridDimY INTEGER, maxGridDimZ INTEGER, "
    "computeMajor INTEGER, computeMinor INTEGER, smMajor INTEGER, smMinor INTEGER")
#: The H100 SXM values of the columns after ``name``/``busLocation`` that are not per GPU.
_H100_INFO = dict(isDiscrete=1, l2CacheSize=52_428_800, totalMemory=85_045_280_768, memoryBandwidth=3_352_320_000_000,
                  clockRate=1_980_000_000, smCount=132, luid=0, chipName="GH100", ctxswDevPath="", ctrlDevPath="",
                  revision=161, nodeMask=0, constantMemory=65_536, maxIPC=4, maxRegistersPerBlock=65_536,
                  maxShmemPerBlock=49_152, maxShmemPerBlockOptin=232_448, maxShmemPerSm=233_472,
                  maxRegistersPerSm=65_536, threadsPerWarp=32, asyncEngines=3, maxWarpsPerSm=64, maxBlocksPerSm=32,
                  maxThreadsPerBlock=1024, maxBlockDimX=1024, maxBlockDimY=1024, maxBlockDimZ=64,
                  maxGridDimX=2_147_483_647, maxGridDimY=65_535, maxGridDimZ=65_535, computeMajor=9, computeMinor=0,
                  smMajor=9, smMinor=0)
_SCALED_APIS = tuple(API_EXPORT_NAMES)   #: call api codes index this tuple (base names)
_OP_NONE, _OP_KERNEL, _OP_MEMCPY, _OP_MEMSET = 0, 1, 2, 3


def _api(name: str) -> int:
    return _SCALED_APIS.index(name)


class _Rows:
    """Columns accumulated as lists of numpy chunks (or scalars), concatenated once."""

    def __init__(self, *names):
        self.cols = {n: [] for n in names}

    def add(self, **values) -> None:
        """Append equal-length arrays (or scalars, broadcast to the arrays' length)."""
        n = max((np.size(v) for v in values.values() if np.ndim(v)), default=1)
        for name, chunk in self.cols.items():
            chunk.append(np.broadcast_to(np.asarray(values[name]), (n,)))

    def arrays(self, dtypes: dict | None = None) -> dict:
        out = {}
        for name, chunks in self.cols.items():
            dtype = (dtypes or {}).get(name, np.int64)
            out[name] = np.concatenate(chunks).astype(dtype) if chunks else np.zeros(0, dtype)
        return out


@dataclass
class _ScaledRank:
    """One rank's plan: a process driving one GPU. Times are int64 ns."""

    rank: int
    pid: int
    comm_tid: int
    launch_bound: bool
    kernels: dict          # start, end, stream, name (index into names), call (index into calls)
    calls: dict            # start, end, tid, api, op_kind, op_index
    memcpy: dict           # start, end, stream, kind, bytes
    memset: dict           # start, end, stream, bytes
    nvtx: list             # (start, end, text, registered)
    iterations: list       # [{"index", "kind", "nvtx_start_ns", "nvtx_end_ns"}]
    planted: list          # [{"stream_id", "start_ns", "length_ns", "end_ns", "category", "kind"}]


def _scaled_durations(it, phase, phase_pos, c, rng, names: list) -> tuple[np.ndarray, np.ndarray]:
    """Kernel names (indices into ``names``) and durations of the compute stream, by catalog and phase."""
    name_idx = np.zeros(it.size, np.int64)
    weight = np.zeros(it.size, np.float64)
    for k, catalog in enumerate(_SCALED_CATALOGS):
        sel = phase == k
        ids = np.array([names.index(n) for n, _, _ in catalog], np.int64)
        w = np.array([(lo + hi) / 2 for _, lo, hi in catalog], np.float64)
        name_idx[sel] = ids[phase_pos[sel] % len(catalog)]
        weight[sel] = w[phase_pos[sel] % len(catalog)]
    scale = SCALED_ITERATION_NS / np.bincount(it, weights=weight, minlength=c.size)
    dur = weight * scale[it] * rng.uniform(0.85, 1.15, it.size)
    dur[it == 0] *= 1.6   # warm-up: cold caches, lazy init
    return name_idx, np.maximum(np.rint(dur), SCALED_MIN_KERNEL_NS).astype(np.int64)


def _draw(rng, lo_hi) -> int:
    return int(rng.integers(lo_hi[0], lo_hi[1] + 1))


def _plan_scaled_rank(rank: int, pid: int, comm_tid: int, t0: int, n_kernels: int, iterations: int,
                      checkpoint: int, launch_bound: bool, rng: np.random.Generator, names: list) -> _ScaledRank:
    """Plan one rank: compute stream 7, NCCL stream 23, copy stream 16, CUDA calls, NVTX, planted gaps."""
    m = np.full(iterations, n_kernels // iterations, np.int64)
    m[: n_kernels % iterations] += 1
    buckets = np.clip(m // 25, 1, 4)
    c = m - buckets
    if c.min() < SCALED_MIN_COMPUTE_KERNELS:
        raise ValueError(f"too few kernels per iteration ({int(m.min())}): need at least "
                         f"{SCALED_MIN_COMPUTE_KERNELS + 1} per GPU and iteration")
    f = np.rint(0.4 * c).astype(np.int64)                       # forward
    o = np.maximum(2, np.rint(0.08 * c)).astype(np.int64)        # optimizer
    b = c - f - o                                               # backward
    n = int(c.sum())
    first = np.concatenate(([0], np.cumsum(c)[:-1]))
    it = np.repeat(np.arange(iterations), c)
    pos = np.arange(n) - first[it]
    phase = np.where(pos < f[it], 0, np.where(pos < (f + b)[it], 1, 2))
    phase_pos = pos - np.select([phase == 0, phase == 1], [0, f[it]], (f + b)[it])
    name, dur = _scaled_durations(it, phase, phase_pos, c, rng, names)

    # Gap before each kernel: a launch sliver, an iteration gap, or a planted gap.
    if launch_bound:
        share = rng.uniform(*SCALED_LAUNCH_SLIVER_SHARE, n)
        pre = np.clip(np.rint(share * np.roll(dur, 1)), *SCALED_LAUNCH_SLIVER_NS).astype(np.int64)
    else:
        pre = rng.integers(SCALED_NORMAL_SLIVER_NS[0], SCALED_NORMAL_SLIVER_NS[1] + 1, n)
    pre[0] = 0
    steady = [i for i in range(1, iterations) if i != checkpoint]
    rounds = len(steady) * SCALED_PLANTS_PER_ITERATION // sum(w for _, w in SCALED_PLANT_MIX) + 1
    pool = [cat for _ in range(rounds) for cat, weight in SCALED_PLANT_MIX for _ in range(weight)]
    rng.shuffle(pool)
    plants = []   # (kernel index before the gap, length, category, kind)
    comm_name = names.index(SCALED_COMM_COLLECTIVE)
    for i in range(iterations):
        if i == 0:
            wanted = [("cpu", "warmup")]
        elif i == checkpoint:
            wanted = []
        else:
            wanted = [(cat, cat) for cat in pool[:SCALED_PLANTS_PER_ITERATION]]
            del pool[:SCALED_PLANTS_PER_ITERATION]
            if i % SCALED_PERIOD == SCALED_PERIOD_FIRST:
                wanted.append(("periodic", "periodic"))
        at = rng.choice(int(f[i]) - 1, size=len(wanted), replace=False)
        for p, (cat, kind) in zip(sorted(int(x) for x in at), sorted(wanted, key=lambda w: rng.random())):
            j = int(first[i]) + p
            length = _draw(rng, SCALED_GAP_NS[kind])
            pre[j + 1] = length
            if cat == "comm":
                name[j] = comm_name
            plants.append((j, length, cat, kind))
    boundary_at = set()
    for i in range(1, iterations):
        gap = _draw(rng, SCALED_ITERATION_GAP_NS)
        if i >= 2 and i != checkpoint + 1 and (i == 3 or rng.random() < SCALED_BOUNDARY_SHARE):
            gap = _draw(rng, SCALED_GAP_NS["boundary"])
            boundary_at.add(i)
        pre[first[i]] = gap
    ckpt_len = _draw(rng, SCALED_GAP_NS["checkpoint"]) if checkpoint is not None else 0
    if checkpoint is not None:
        pre[first[checkpoint + 1]] += ckpt_len
    start = t0 + np.concatenate(([0], np.cumsum(dur[:-1] + pre[1:])))
    end = start + dur
    last = first + c - 1

    kernels = _Rows("start", "end", "stream", "name", "call")
    calls = _Rows("start", "end", "tid", "api", "op_kind", "op_index")
    memcpy = _Rows("start", "end", "stream", "kind", "bytes")
    memset = _Rows("start", "end", "stream", "bytes")
    nvtx, iters, planted = [], [], []

    def call(s, e, api, tid=pid, op_kind=_OP_NONE, op_index=-1):
        calls.add(start=s, end=e, tid=tid, api=api, op_kind=op_kind, op_index=op_index)

    def launched(s, e, stream, names_, tid, base):
        """Kernels [s, e) and their cudaLaunchKernel calls just before them."""
        lead = rng.integers(4 * US, 9 * US + 1, s.size)
        call_ns = rng.integers(3 * US, 7 * US + 1, s.size)
        kernels.add(start=s, end=e, stream=stream, name=names_, call=-1)
        call(s - lead - call_ns, s - lead, _api("cudaLaunchKernel"), tid, _OP_KERNEL, base + np.arange(s.size))

    launched(start, end, COMPUTE_STREAM, name, pid, 0)
    # Gradient buckets on the NCCL stream, overlapping backward, ending before its last kernel ends.
    a = end[first + f + b // 4] + rng.integers(5 * US, 20 * US + 1, iterations)
    z = end[first + f + b - 1] - US
    width = (z - a) // buckets
    bi = np.repeat(np.arange(iterations), buckets)
    k = np.arange(int(buckets.sum())) - np.repeat(np.cumsum(buckets) - buckets, buckets)
    b_start = a[bi] + k * width[bi] + np.where(k > 0, rng.integers(20 * US, 60 * US + 1, bi.size), 0)
    b_end = np.where(k == buckets[bi] - 1, z[bi], a[bi] + (k + 1) * width[bi])
    if np.any(b_end - b_start < 30 * US):
        raise RuntimeError(f"synth: rank {rank}: backward too short for its gradient buckets")
    launched(b_start, b_end, NCCL_STREAM, names.index(SCALED_BUCKET_COLLECTIVE), comm_tid, n)

    # Planted gaps and their witnesses.
    for j, length, cat, kind in plants:
        g0, g1 = int(end[j]), int(end[j]) + length
        if kind == "sync":
            api = _SCALED_SYNC_APIS[int(rng.integers(len(_SCALED_SYNC_APIS)))]
            call(g0 - _draw(rng, (5 * US, 10 * US)), g1 - WITNESS_MARGIN_NS, _api(api))
        elif kind == "data":
            t, stop = g0 + _draw(rng, (3 * US, 10 * US)), g1 - WITNESS_MARGIN_NS
            pieces = int(rng.integers(1, 5))
            cuts = [t] + [t + int((stop - t) * (q + rng.uniform(-0.3, 0.3)) / pieces) for q in range(1, pieces)]
            cuts.append(stop)
            for q, (c0, c1) in enumerate(zip(cuts[:-1], cuts[1:])):
                c0 += US if q else 0
                if q == 0 and rng.random() < 0.2:      # pinned buffer allocated inside the loop
                    call(c0, c1, _api("cudaHostAlloc"))
                    continue
                memcpy.add(start=c0 + 2 * US, end=c1 - US, stream=COPY_STREAM, kind=HTOD,
                           bytes=(c1 - c0 - 3 * US) * H2D_BYTES_PER_NS)
                call(c0, c1, _api("cudaMemcpyAsync"), op_kind=_OP_MEMCPY, op_index=len(memcpy.cols["start"]) - 1)
        elif kind == "warmup":   # caching-allocator growth: neither sync nor data
            t = g0 + 20 * US
            for _ in range(3):
                d = _draw(rng, (50 * US, 300 * US))
                call(t, t + d, _api("cudaMalloc"))
                t += d + _draw(rng, (20 * US, 200 * US))
        planted.append({"stream_id": COMPUTE_STREAM, "start_ns": g0, "length_ns": length, "end_ns": g1,
                        "category": cat if kind != "warmup" else None, "kind": kind})

    # Per iteration: hidden prefetch / memset under long kernels, loss.item(), checkpoint, NVTX.
    for i in range(iterations):
        for lo, cnt, what in ((first[i], f[i], "memcpy"), (first[i] + f[i], b[i], "memset")):
            j = int(lo + np.argmax(dur[lo:lo + cnt]))
            if dur[j] < 40 * US:
                continue
            c0 = int(start[j]) - 3 * US   # just after its launch call returned
            c1 = c0 + _draw(rng, (5 * US, 10 * US))
            s0 = max(c1 + 3 * US, int(start[j]) + 2 * US)
            s1 = min(s0 + int(dur[j] * rng.uniform(0.2, 0.6)), int(end[j]) - 2 * US)
            if what == "memcpy":
                memcpy.add(start=s0, end=s1, stream=COPY_STREAM, kind=HTOD, bytes=(s1 - s0) * H2D_BYTES_PER_NS)
                call(c0, c1, _api("cudaMemcpyAsync"), op_kind=_OP_MEMCPY, op_index=len(memcpy.cols["start"]) - 1)
            else:
                memset.add(start=s0, end=s1, stream=COPY_STREAM, bytes=(s1 - s0) * H2D_BYTES_PER_NS)
                call(c0, c1, _api("cudaMemsetAsync"), op_kind=_OP_MEMSET, op_index=len(memset.cols["start"]) - 1)
        e_last = int(end[last[i]])
        memcpy.add(start=e_last + 10 * US, end=e_last + 13 * US, stream=COMPUTE_STREAM, kind=DTOH, bytes=4)
        call(e_last + 2 * US, e_last + 8 * US, _api("cudaMemcpyAsync"), op_kind=_OP_MEMCPY,
             op_index=len(memcpy.cols["start"]) - 1)
        call(e_last + 9 * US, e_last + 15 * US, _api("cudaStreamSynchronize"))
        extra = 0
        if i == checkpoint:
            extra = ckpt_len
            t = e_last + 20 * US
            for _ in range(4):   # weights to host, then file writes (no CUDA calls)
                d = _draw(rng, (500 * US, 1 * MS))
                memcpy.add(start=t + 2 * US, end=t + d - US, stream=COPY_STREAM, kind=DTOH,
                           bytes=(d - 3 * US) * H2D_BYTES_PER_NS)
                call(t, t + d, _api("cudaMemcpyAsync"), op_kind=_OP_MEMCPY, op_index=len(memcpy.cols["start"]) - 1)
                t += d + US
            nvtx.append((e_last + 18 * US, e_last + ckpt_len - _draw(rng, (100 * US, 300 * US)),
                         "save_checkpoint", True))
        it_start = int(start[first[i]]) - 40 * US if i == 0 else iters[-1]["nvtx_end_ns"] + 3 * US
        it_end = e_last + extra + 20 * US
        kind = "warmup" if i == 0 else "checkpoint" if i == checkpoint else "steady"
        iters.append({"index": i, "kind": kind, "nvtx_start_ns": it_start, "nvtx_end_ns": it_end})
        nvtx.append((it_start, it_end, f"Iteration {i}", False))
        fwd_end, bwd0, bwd1 = first[i] + f[i] - 1, first[i] + f[i], first[i] + f[i] + b[i] - 1
        nvtx.append((int(start[first[i]]) - 20 * US, int(start[fwd_end]) - 2 * US, "forward", True))
        nvtx.append((int(start[bwd0]) - 20 * US, int(start[bwd1]) - 2 * US, "backward", True))
        if i in boundary_at:
            j = int(first[i])
            planted.append({"stream_id": COMPUTE_STREAM, "start_ns": int(end[j - 1]), "length_ns": int(pre[j]),
                            "end_ns": int(start[j]), "category": "boundary", "kind": "boundary"})
        if i == checkpoint:
            j = int(first[i + 1])
            planted.append({"stream_id": COMPUTE_STREAM, "start_ns": e_last, "length_ns": int(start[j]) - e_last,
                            "end_ns": int(start[j]), "category": None, "kind": "checkpoint"})
    # Allocations before the first kernel (outside every window).
    t = t0 - 30 * MS
    for api, lo_hi in (("cudaMalloc", (200 * US, 2 * MS)), ("cudaHostAlloc", (1 * MS, 4 * MS)),
                       ("cudaMalloc", (100 * US, 1 * MS)), ("cudaHostAlloc", (1 * MS, 4 * MS))):
        d = _draw(rng, lo_hi)
        call(t, t + d, _api(api))
        t += d + _draw(rng, (100 * US, 2 * MS))
    planted.sort(key=lambda g: g["start_ns"])
    return _ScaledRank(rank, pid, comm_tid, launch_bound, kernels.arrays(), calls.arrays(), memcpy.arrays(),
                       memset.arrays(), nvtx, iters, planted)


# -- scaled truth: plain numpy reference of docs/definitions.md ---

def _ref_runs(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals by a sweep line: +1 at each start, -1 at each end.

    At equal times starts come first, so touching intervals merge. Returns sorted disjoint runs.
    """
    keep = ends > starts
    n = int(keep.sum())
    t = np.concatenate((starts[keep], ends[keep]))
    step = np.concatenate((np.ones(n, np.int64), -np.ones(n, np.int64)))
    order = np.lexsort((-step, t))
    t, step = t[order], step[order]
    depth = np.cumsum(step)
    return t[(step == 1) & (depth == 1)], t[depth == 0]


def _ref_covered(runs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ns of each [a, b) covered by the disjoint sorted ``runs``."""
    rs, re_ = runs
    if rs.size == 0 or a.size == 0:
        return np.zeros(a.size, np.int64)
    prefix = np.concatenate(([0], np.cumsum(re_ - rs)))

    def upto(t):
        i = np.searchsorted(rs, t, side="right")
        spill = np.where(i > 0, np.maximum(re_[np.maximum(i - 1, 0)] - t, 0), 0)
        return prefix[i] - spill

    return upto(b) - upto(a)


def _ref_categories(g0, length, before_collective, witnesses: dict, bounds, rules: CategoryRules,
                    planted_periodic) -> np.ndarray:
    """Category of each gap, first match wins (docs/definitions.md#categories): data .. periodic, cpu.

    ``periodic`` is what was planted (``planted_periodic``: the gap is one of the pauses planted
    every ``SCALED_PERIOD`` iterations), not a copy of the product's detection rule."""
    g0 = np.asarray(g0, np.int64)
    length = np.asarray(length, np.int64)
    if g0.size == 0:
        return np.zeros(0, object)
    g1 = g0 + length
    frac = {k: _ref_covered(runs, g0, g1) / length for k, runs in witnesses.items()}
    sync = frac["sync"] >= rules.sync_min_fraction
    data = frac["data"] >= rules.data_min_fraction
    comm = np.asarray(before_collective, bool)
    periodic = np.asarray(planted_periodic, bool) & ~(sync | data | comm)
    nxt = np.searchsorted(bounds, g0, side="left")
    at_boundary = (nxt < bounds.size) & (bounds[np.minimum(nxt, max(bounds.size - 1, 0))] <= g1) \
        if bounds.size else np.zeros(g0.size, bool)
    quiet = frac["api"] < rules.quiet_max_fraction
    holds = {"data": data, "comm": comm, "sync": sync, "boundary": at_boundary & quiet & ~periodic,
             "periodic": periodic}
    *ruled, fallback = GAP_CATEGORIES  # the model's order: first match wins, the last one when none holds
    return np.select([holds[c] for c in ruled], ruled, fallback).astype(object)


def _ref_window(r: _ScaledRank, w0: int, w1: int, bounds: np.ndarray, names: list, collective: np.ndarray,
                min_gap_ns: int, rules: CategoryRules, analysis) -> dict:
    """Expected fleet-row numbers and every per-stream / device gap of rank ``r`` for W = [w0, w1)."""
    k = r.kernels
    inside = (k["end"] > w0) & (k["start"] < w1)
    ks, ke = np.maximum(k["start"][inside], w0), np.minimum(k["end"][inside], w1)
    kstream, kname = k["stream"][inside], k["name"][inside]
    kcorr = r.calls["corr"][k["call"][inside]]
    window = w1 - w0
    busy_runs = _ref_runs(ks, ke)
    busy = int(np.sum(busy_runs[1] - busy_runs[0]))
    idle = window - busy
    cs = np.concatenate((r.memcpy["start"], r.memset["start"]))
    ce = np.concatenate((r.memcpy["end"], r.memset["end"]))
    cin = (ce > w0) & (cs < w1)
    copy_runs = _ref_runs(np.maximum(cs[cin], w0), np.minimum(ce[cin], w1))
    copy_only = int(np.sum(copy_runs[1] - copy_runs[0]) - _ref_covered(busy_runs, *copy_runs).sum())
    api = np.asarray(_SCALED_APIS, object)[r.calls["api"]]
    is_sync = np.isin(api, rules.sync_apis)
    is_data = np.isin(api, rules.data_apis)
    witnesses = {
        "sync": _ref_runs(r.calls["start"][is_sync], r.calls["end"][is_sync]),
        "data": _ref_runs(np.concatenate((r.calls["start"][is_data], cs[cin])),
                          np.concatenate((r.calls["end"][is_data], ce[cin]))),
        "api": _ref_runs(r.calls["start"], r.calls["end"]),
    }
    copy_only_runs = _ref_runs(cs[cin], ce[cin])

    # Per-stream gaps: streams here never overlap themselves, so a gap is next start - previous end.
    gaps, slivers = [], []
    for stream in np.unique(kstream):
        sel = np.flatnonzero(kstream == stream)
        sel = sel[np.lexsort((kcorr[sel], ke[sel], ks[sel]))]
        s, e = ks[sel], ke[sel]
        if np.any(s[1:] < e[:-1]):
            raise RuntimeError(f"synth: rank {r.rank}: stream {stream} overlaps itself")
        length = s[1:] - e[:-1]
        slivers.append(length[(length > 0) & (length <= min_gap_ns)])
        kept = np.flatnonzero(length > min_gap_ns)
        gaps.append((np.full(kept.size, stream), e[:-1][kept], length[kept], kname[sel][:-1][kept]))
    g_stream, g0, g_len, g_before = (np.concatenate(x) for x in zip(*gaps)) if gaps else [np.zeros(0, np.int64)] * 4
    slivers = np.concatenate(slivers) if slivers else np.zeros(0, np.int64)
    pauses = {(g["start_ns"], g["length_ns"]) for g in r.planted if g["kind"] == "periodic"}
    g_cat = _ref_categories(g0, g_len, collective[g_before], witnesses, bounds, rules,
                            [s == COMPUTE_STREAM and (a, x) in pauses
                             for s, a, x in zip(g_stream.tolist(), g0.tolist(), g_len.tolist())])

    # Device holes: the complement of the kernel union in W, edges included.
    hs = np.concatenate(([w0], busy_runs[1]))
    he = np.concatenate((busy_runs[0], [w1]))
    hole = he - hs
    pos = hole > 0
    hs, hole = hs[pos], hole[pos]
    dev = hole > min_gap_ns
    d0, d_len = hs[dev], hole[dev]
    # The kernel before a device hole: the last one, in (start, end, correlation) order, ending where it opens.
    order = np.lexsort((kcorr, ke, ks))
    rank_in_order = np.empty(order.size, np.int64)
    rank_in_order[order] = np.arange(order.size)
    by_end = np.lexsort((rank_in_order, ke))
    idx = np.searchsorted(ke[by_end], d0, side="right") - 1
    opens_w = d0 == w0
    before = kname[by_end[np.maximum(idx, 0)]]
    d_coll = np.where(opens_w, False, collective[before])
    holes_above = set(zip(d0.tolist(), d_len.tolist()))
    if any(w0 <= a and a + x <= w1 and (a, x) not in holes_above for a, x in pauses):
        raise RuntimeError(f"synth: rank {r.rank}: a planted periodic pause is not a device-level gap")
    d_cat = _ref_categories(d0, d_len, d_coll, witnesses, bounds, rules,
                            [(a, x) in pauses for a, x in zip(d0.tolist(), d_len.tolist())])
    dsl = hole[~dev]

    cat_ns = {cat: int(d_len[d_cat == cat].sum()) for cat in GAP_CATEGORIES}
    # no overhead rows and a GPU record for every launch (checked when writing): nothing is not the application's
    not_app = dict.fromkeys(NOT_APPLICATION_CAUSES, 0)
    dsl_ns = int(dsl.sum())
    app_idle = idle - sum(not_app.values())
    launch = bool(app_idle > 0 and dsl_ns >= analysis.launch_min_share * app_idle
                  and 100.0 * dsl_ns / window >= analysis.actionable_pct)
    cat_ns["launch"] = dsl_ns if launch else 0
    lengths = g_len
    expected = {
        "window_start_ns": int(w0), "window_end_ns": int(w1), "window_ns": int(window),
        "kernel_count": int(inside.sum()), "stream_count": int(np.unique(kstream).size),
        "busy_ns": busy, "idle_ns": int(idle), "idle_pct": round(100.0 * (idle / window), 4),
        "copy_only_ns": copy_only, "dark_ns": int(idle - copy_only),
        "gap_count": int(lengths.size), "gap_total_ns": int(lengths.sum()),
        "max_gap_ns": int(lengths.max()) if lengths.size else 0,
        **{key: int(v) for key, v in _np_buckets(lengths).items()},
        "sliver_count": int(slivers.size), "sliver_total_ns": int(slivers.sum()),
        "copy_overlap_ns": int(_ref_covered(copy_only_runs, g0, g0 + g_len).sum()),
        "device_sliver_count": int(dsl.size), "device_sliver_ns": dsl_ns,
        "device_gap_count": int(d_len.size), "device_gap_ns": int(d_len.sum()),
        "launch_bound": launch,
    }
    for cat in CATEGORIES:
        expected[f"cat_{cat}_ns"] = cat_ns[cat]
        expected[f"cat_{cat}_pct"] = round(100.0 * cat_ns[cat] / window, 4)
    for cat in NOT_APPLICATION_CAUSES:
        expected[f"cat_{cat}_ns"], expected[f"cat_{cat}_pct"] = not_app[cat], round(100.0 * not_app[cat] / window, 4)
    if expected["device_gap_ns"] + dsl_ns != idle:
        raise RuntimeError(f"synth: rank {r.rank}: device holes do not add up to the idle time")
    planted = {(g["stream_id"], g["start_ns"]): g for g in r.planted}
    gap_list = []
    for stream, start, length, before_name, cat in zip(g_stream.tolist(), g0.tolist(), g_len.tolist(),
                                                       g_before.tolist(), g_cat.tolist()):
        p = planted.get((stream, start))
        gap_list.append({"stream_id": stream, "start_ns": start, "length_ns": length, "category": cat,
                         "kind": p["kind"] if p else "incidental", "kernel_before": names[before_name]})
    device_list = [{"start_ns": s, "length_ns": x, "category": c}
                   for s, x, c in zip(d0.tolist(), d_len.tolist(), d_cat.tolist())]
    return {"expected": expected, "gaps": gap_list, "device_gaps": device_list}


def _np_buckets(lengths: np.ndarray) -> dict:
    out = {}
    for key, sel in (("le_5ms", lengths <= BUCKET_5MS), ("5_50ms", (lengths > BUCKET_5MS) & (lengths <= BUCKET_50MS)),
                     ("gt_50ms", lengths > BUCKET_50MS)):
        out[f"gaps_{key}"], out[f"gaps_{key}_ns"] = int(sel.sum()), int(lengths[sel].sum())
    return out


def _ref_gpu_extents(r: _ScaledRank) -> np.ndarray:
    """``(iterations, 2)`` int64: each NVTX iteration on the GPU timeline, from the first start to the last
    end of the kernels launched by calls of the marking thread (tid = pid) that started inside its range."""
    c = r.calls
    mine = (c["tid"] == r.pid) & (c["op_kind"] == _OP_KERNEL)
    call_start, k = c["start"][mine], c["op_index"][mine]
    k_start, k_end = r.kernels["start"][k], r.kernels["end"][k]
    out = np.zeros((len(r.iterations), 2), np.int64)
    for i, it in enumerate(r.iterations):
        inside = (call_start >= it["nvtx_start_ns"]) & (call_start < it["nvtx_end_ns"])
        out[i] = k_start[inside].min(), k_end[inside].max()
    return out


def _ref_lengths(extents: np.ndarray) -> np.ndarray:
    """Each iteration's length on the GPU: to the later of its own end and the next one's start."""
    nxt = np.append(extents[1:, 0], extents[-1, 1])
    return np.maximum(extents[:, 1], nxt) - extents[:, 0]


def _ref_usable(lengths: np.ndarray, window_rules) -> np.ndarray:
    """One GPU's usable iterations under the nvtx rule (docs/definitions.md#stable-iterations)."""
    usable = np.ones(lengths.size, bool)
    usable[:window_rules.warmup_iterations] = False
    med = float(np.median(lengths[window_rules.warmup_iterations:]))
    ratio = lengths / med
    usable &= (ratio <= window_rules.outlier_factor) & (ratio >= 1.0 / window_rules.outlier_factor)
    return usable


def _ref_nvtx_window(usable: np.ndarray, window_rules) -> list:
    """Kept iteration indices: the longest run of iterations usable on every GPU of the job."""
    best, run = [], []
    for i, ok in enumerate(usable):
        run = run + [i] if ok else []
        if len(run) > len(best):
            best = run
    if window_rules.max_iterations:
        best = best[-window_rules.max_iterations:]
    return best


def _check_planted(r: _ScaledRank, truth: dict, window: str) -> None:
    """Planted gaps inside W come out with the category they were planted for (generator self-check)."""
    w0, w1 = truth["expected"]["window_start_ns"], truth["expected"]["window_end_ns"]
    found = {(g["stream_id"], g["start_ns"]): g for g in truth["gaps"]}
    for p in r.planted:
        if not (w0 <= p["start_ns"] and p["end_ns"] <= w1):
            continue
        g = found.get((p["stream_id"], p["start_ns"]))
        want = p["category"]
        if window == "span" and p["kind"] == "boundary":
            want = None   # no iteration boundaries in span
        if g is None or g["length_ns"] != p["length_ns"] or (want is not None and g["category"] != want):
            raise RuntimeError(f"synth: rank {r.rank}: planted {p} came out as {g} ({window} window)")
    compute = [g for g in truth["gaps"] if g["stream_id"] == COMPUTE_STREAM and g["kind"] == "incidental"]
    if compute:
        raise RuntimeError(f"synth: rank {r.rank}: unplanned compute-stream gaps {compute[:3]}")


# -- scaled writing -------------------------------------------------------------

def _insert(con: sqlite3.Connection, table: str, values_sql: str, columns: list, chunk: int = 250_000) -> None:
    """executemany over numpy columns in big chunks; ``values_sql`` inlines the constant columns."""
    con.execute(f"CREATE TABLE {table} ({SCHEMA[table]})")
    n = len(columns[0]) if columns else 0
    for lo in range(0, n, chunk):
        rows = zip(*(c[lo:lo + chunk].tolist() for c in columns))
        con.executemany(f"INSERT INTO {table} VALUES ({values_sql})", rows)


def _write_scaled(path: str, ranks: list, identities: list, names: list, cluster_model: str,
                  device_per_rank: bool) -> None:
    """Correlation ids in call start order (like CUPTI's), rows in time order, one bulk insert per table."""
    strings = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    name_sid = np.array([sid(n) for n in names], np.int64)
    api_sid = np.array([sid(API_EXPORT_NAMES[a]) for a in _SCALED_APIS], np.int64)
    # Correlation ids: every call of every rank, ordered by (start, pid, tid).
    starts = np.concatenate([r.calls["start"] for r in ranks])
    pids = np.concatenate([np.full(r.calls["start"].size, r.pid) for r in ranks])
    tids = np.concatenate([r.calls["tid"] for r in ranks])
    order = np.lexsort((tids, pids, starts))
    corr = np.empty(order.size, np.int64)
    corr[order] = np.arange(1, order.size + 1)
    offset = 0
    for r in ranks:
        r.calls["corr"] = corr[offset:offset + r.calls["start"].size]
        offset += r.calls["start"].size
        for kind, table in ((_OP_KERNEL, r.kernels), (_OP_MEMCPY, r.memcpy), (_OP_MEMSET, r.memset)):
            sel = r.calls["op_kind"] == kind
            table["corr"] = np.zeros(table["start"].size, np.int64)
            table["corr"][r.calls["op_index"][sel]] = r.calls["corr"][sel]
            if kind == _OP_KERNEL:
                table["call"][r.calls["op_index"][sel]] = np.flatnonzero(sel)
            if np.any(table["corr"] == 0):
                raise RuntimeError(f"synth: rank {r.rank}: GPU work without a launching call")
        launches = np.asarray(_SCALED_APIS, object)[r.calls["api"]] == "cudaLaunchKernel"
        if np.any(launches & (r.calls["op_kind"] == _OP_NONE)):
            raise RuntimeError(f"synth: rank {r.rank}: a launch without GPU work (the export would lose a record)")

    def gather(table: str, cols: list, sort=("start",)) -> list:
        parts = [getattr(r, table) for r in ranks]
        out = {c: np.concatenate([p[c] for p in parts]) for c in cols if c not in ("gpid", "dev")}
        out["gpid"] = np.concatenate([np.full(p["start"].size, global_pid(r.pid)) for r, p in zip(ranks, parts)])
        out["dev"] = np.concatenate([np.full(p["start"].size, r.rank if device_per_rank else 0)
                                     for r, p in zip(ranks, parts)])
        o = np.lexsort((out.get("stream", out["gpid"]), out["gpid"], out["start"]))
        return [out[c][o] for c in cols]

    tmp = path + ".tmp"
    for p in (tmp, path):
        if os.path.exists(p):
            os.unlink(p)
    con = sqlite3.connect(tmp)
    try:
        for pragma in ("journal_mode=OFF", "synchronous=OFF", "locking_mode=EXCLUSIVE", "cache_size=-262144",
                       "temp_store=MEMORY"):
            con.execute(f"PRAGMA {pragma}")
        con.execute(f"CREATE TABLE TARGET_INFO_GPU ({SCALED_TARGET_INFO_GPU})")
        con.execute(f"CREATE TABLE TARGET_INFO_CUDA_DEVICE ({SCHEMA['TARGET_INFO_CUDA_DEVICE']})")
        gpu_cols = [c.split()[0] for c in SCALED_TARGET_INFO_GPU.split(", ")]
        for r, (uuid, bus) in zip(ranks, identities):
            row = dict(_H100_INFO, vmId=GLOBAL_ID_BASE, id=r.rank, name=cluster_model, busLocation=bus,
                       pwGpuId=r.rank, uuid=uuid, cuDevice=r.rank)
            con.execute(f"INSERT INTO TARGET_INFO_GPU VALUES ({','.join('?' * len(gpu_cols))})",
                        [row[c] for c in gpu_cols])
            con.execute("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?,?,?,?,?)",
                        (r.rank, r.rank if device_per_rank else 0, r.pid, uuid, _H100_INFO["smCount"]))
        start, end, dev, stream, kcorr, gpid, name = gather("kernels", ["start", "end", "dev", "stream", "corr",
                                                                        "gpid", "name"])
        _insert(con, "CUPTI_ACTIVITY_KIND_KERNEL",
                "?1,?2,?3,1,NULL,?4,?5,?6,?7,?7,NULL,0,0,32,1,1,1,128,1,1,0,0,0,0,?5,0,NULL,0",
                [start, end, dev, stream, kcorr, gpid, name_sid[name]])
        del start, end, dev, stream, kcorr, gpid, name
        c_start = np.concatenate([r.calls["start"] for r in ranks])
        o = np.argsort(corr, kind="stable")   # corr follows (start, pid, tid)
        c_end = np.concatenate([r.calls["end"] for r in ranks])[o]
        c_gtid = np.concatenate([global_pid(r.pid) | r.calls["tid"] for r in ranks])[o]
        c_api = api_sid[np.concatenate([r.calls["api"] for r in ranks])][o]
        _insert(con, "CUPTI_ACTIVITY_KIND_RUNTIME", f"?,?,{RUNTIME_EVENT_CLASS},?,?,?,0,NULL",
                [c_start[o], c_end, c_gtid, corr[o], c_api])
        del c_start, c_end, c_gtid, c_api
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMCPY", "?1,?2,?3,1,NULL,?4,?5,?6,?7,?8,NULL,0,0,?3,1,?3,1,NULL,NULL,NULL,1",
                gather("memcpy", ["start", "end", "dev", "stream", "corr", "gpid", "bytes", "kind"]))
        _insert(con, "CUPTI_ACTIVITY_KIND_MEMSET", "?1,?2,?3,1,NULL,?4,?5,?6,0,?7,NULL,0",
                gather("memset", ["start", "end", "dev", "stream", "corr", "gpid", "bytes"]))
        nv = sorted((s, r.pid, e, text, reg) for r in ranks for s, e, text, reg in r.nvtx)
        con.execute(f"CREATE TABLE NVTX_EVENTS ({SCHEMA['NVTX_EVENTS']})")
        con.executemany(f"INSERT INTO NVTX_EVENTS VALUES (?,?,{NVTX_PUSH_POP},NULL,NULL,NULL,?,?,NULL,?,"
                        "NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL,NULL)",
                        [(s, e, None if reg else text, global_tid(pid, pid), sid(text) if reg else None)
                         for s, pid, e, text, reg in nv])
        _insert(con, "StringIds", "?,?", [np.array(list(strings.values())), np.array(list(strings), object)])
        con.execute(f"CREATE TABLE PROCESSES ({SCHEMA['PROCESSES']})")
        con.executemany("INSERT INTO PROCESSES VALUES (?,?,?)",
                        [(global_pid(r.pid), r.pid, "python3") for r in sorted(ranks, key=lambda r: r.pid)])
        con.execute(f"CREATE TABLE META_DATA_EXPORT ({SCHEMA['META_DATA_EXPORT']})")
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?,?)", [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", "3.25.0"),
            ("EXPORT_PARAM_EXPORT_TYPE", "SQLite"), ("DERIVED_BY", "gpu-idle synth (scaled)")])
        con.commit()
    finally:
        con.close()
    os.replace(tmp, path)


def generate_scaled_report(path: str, *, gpus: int = 8, kernels: int = 100_000, seed: int = 0,
                           iterations: int | None = None, launch_ranks=None, device_per_rank: bool = False,
                           cluster_model: str = "NVIDIA H100 80GB HBM3", min_gap_ns: int = 1_000_000) -> dict:
    """Write a distributed-training export of about ``kernels`` kernels (all GPUs) and its truth, fast.

    ``gpus`` processes, each driving one GPU (CUDA device 0 of its own process, or
    device ``rank`` with ``device_per_rank``, mapped to the physical GPU by
    TARGET_INFO_GPU / TARGET_INFO_CUDA_DEVICE rows): compute stream 7, NCCL stream 23
    (gradient buckets overlapping backward), copy stream 16 (H2D prefetch and memset
    under kernels, H2D transfers in data gaps, D2H checkpoint copies), a
    cudaLaunchKernel / cudaMemcpyAsync / cudaMemsetAsync call with a correlation id
    for every kernel and copy, NVTX ``Iteration N`` ranges (plus ``forward``,
    ``backward``, ``save_checkpoint``). Iteration 0 is a slow warm-up, iteration
    ``iterations - 2`` ends with a checkpoint save. Planted gaps on the compute stream,
    by category (docs/definitions.md#categories): ``sync`` (a synchronising call spans it), ``data`` (H2D copies
    and their cudaMemcpyAsync / cudaHostAlloc calls fill it), ``comm`` (after an
    NCCL AllGather), ``cpu`` (nothing), ``boundary`` (a quiet gap before an iteration
    starts), ``periodic`` (a ~60 ms pause every 4 iterations); ``launch_ranks``
    (default: the last rank, with 2+ GPUs) are launch-bound: sub-threshold launch
    slivers make up most of their idle.

    ``kernels`` is the total over all GPUs (exact: ``truth["kernel_count"]``);
    ``iterations`` defaults to about 3,000 kernels per GPU and iteration (at least
    10). Deterministic from ``seed``. Returns the truth (also written to
    ``<path>.truth.json``): per GPU the planted gaps (category as planted for the
    ``nvtx`` window; ``None`` for the warm-up and checkpoint pauses) and, per
    window rule (``span``, and ``nvtx`` = what ``--window auto`` picks: the iterations
    usable on every GPU of the report, on each GPU's own timeline), the
    expected fleet-row numbers, every per-stream gap above ``min_gap_ns`` with its
    category, and every device-level gap with its category (``periodic``: the planted
    periodic pauses, in both windows; the other categories by the rules of docs/definitions.md#categories).
    """
    if gpus < 1:
        raise ValueError("gpus must be at least 1")
    if iterations is None:
        iterations = max(SCALED_MIN_ITERATIONS, round(kernels / gpus / SCALED_KERNELS_PER_ITERATION))
    if iterations < SCALED_MIN_ITERATIONS:
        raise ValueError(f"iterations must be at least {SCALED_MIN_ITERATIONS}")
    if launch_ranks is None:
        launch_ranks = (gpus - 1,) if gpus >= 2 else ()
    launch_ranks = tuple(sorted(set(int(x) for x in launch_ranks)))
    if any(not 0 <= x < gpus for x in launch_ranks):
        raise ValueError(f"launch_ranks {launch_ranks} are not ranks of {gpus} GPUs")
    per_gpu = [kernels // gpus + (r < kernels % gpus) for r in range(gpus)]
    rng = np.random.default_rng(seed)
    names = sorted({n for catalog in _SCALED_CATALOGS for n, _, _ in catalog}
                   | {SCALED_BUCKET_COLLECTIVE, SCALED_COMM_COLLECTIVE})
    rules = CategoryRules()
    collective = np.array([is_collective(n, rules) for n in names], bool)
    checkpoint = iterations - 2
    base_pid = int(rng.integers(20_000, 90_000))
    t0 = CAPTURE_START_NS + int(rng.integers(0, 500 * MS))
    ranks, identities, pid = [], [], base_pid
    for rank in range(gpus):
        pid += int(rng.integers(1, 5))
        start = t0 + int(rng.integers(0, 3 * MS))
        ranks.append(_plan_scaled_rank(rank, pid, base_pid + 200 + 7 * rank, start, per_gpu[rank], iterations,
                                       checkpoint, rank in launch_ranks, rng, names))
        bits = int(rng.integers(0, 2 ** 63)) << 64 | int(rng.integers(0, 2 ** 63))
        h = f"{bits:032x}"
        identities.append((f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}",
                           HGX_BUS_IDS[rank] if rank < len(HGX_BUS_IDS) else f"0000:{(0x18 + 16 * rank) % 256:02x}:00.0"))
    _write_scaled(path, ranks, identities, names, cluster_model, device_per_rank)

    analysis, window_rules = AnalysisConfig(), WindowRules()
    # the GPUs of the job keep the same iterations: those usable on every one of them
    extents = [_ref_gpu_extents(r) for r in ranks]
    lengths = [_ref_lengths(e) for e in extents]
    kept = _ref_nvtx_window(np.logical_and.reduce([_ref_usable(x, window_rules) for x in lengths]), window_rules)
    gpu_truths = []
    for r, (uuid, bus), ext, length in zip(ranks, identities, extents, lengths):
        k = r.kernels
        span = _ref_window(r, int(k["start"].min()), int(k["end"].max()), np.zeros(0, np.int64), names,
                           collective, min_gap_ns, rules, analysis)
        span["expected"].update(iterations=0, iteration_mean_ns=0, kept_iterations="")
        if len(kept) < window_rules.min_iterations:
            raise RuntimeError(f"synth: rank {r.rank}: only {len(kept)} stable iterations")
        bounds = np.array([it["nvtx_start_ns"] for it in r.iterations], np.int64)
        nvtx = _ref_window(r, int(ext[kept, 0].min()), int(ext[kept, 1].max()), bounds, names, collective,
                           min_gap_ns, rules, analysis)
        nvtx["expected"].update(iterations=len(kept), iteration_mean_ns=int(round(float(np.mean(length[kept])))),
                                kept_iterations=f"{kept[0]}-{kept[-1]}")
        _check_planted(r, span, "span")
        _check_planted(r, nvtx, "nvtx")
        if nvtx["expected"]["launch_bound"] != r.launch_bound:
            raise RuntimeError(f"synth: rank {r.rank}: launch-bound {r.launch_bound} not as planted")
        gpu_truths.append({
            "rank": r.rank, "pid": r.pid, "device_id": r.rank if device_per_rank else 0, "uuid": uuid, "bus": bus,
            "gpu_model": cluster_model, "launch_bound": r.launch_bound, "kernel_count": int(k["start"].size),
            "planted": r.planted, "iterations": r.iterations,
            "windows": {"span": {"rule": "span", "iterations": [], **span},
                        "nvtx": {"rule": "nvtx", "iterations": kept, **nvtx}},
        })
    truth = {
        "format": "gpu-idle synth scaled truth v1",
        "report": os.path.basename(path),
        "params": {"gpus": gpus, "kernels": kernels, "seed": seed, "iterations": iterations,
                   "checkpoint_iteration": checkpoint, "launch_ranks": list(launch_ranks),
                   "device_per_rank": device_per_rank, "cluster_model": cluster_model, "min_gap_ns": min_gap_ns},
        "kernel_count": int(sum(g["kernel_count"] for g in gpu_truths)),
        "gpus": gpu_truths,
    }
    write_truth(path, truth, compact=True)
    return truth
