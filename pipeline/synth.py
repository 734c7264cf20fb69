"""Synthetic Nsight Systems SQLite exports in the real export schema.

:class:`ExportWriter` writes the tables the pipeline reads with the column
names, types and encodings of Nsight Systems 2024-2026 exports (schema 3.x):
names are ids into ``StringIds``; ``globalPid = (pid << 24)`` plus the vm bits,
``globalTid = globalPid | tid``. Like real exports, a table is only created when
it gets rows (call :meth:`ExportWriter.close` to finish the file).

Tests use it to build small exports with hand-computable answers; the example
fleet generator builds on it. :func:`generate_scaled_report` writes exports of
millions of kernels (vectorised with numpy, written in bulk) for the benchmarks.
"""
from __future__ import annotations

import bisect
import json
import os
import random
import re
import sqlite3
from dataclasses import dataclass, field

import numpy as np
import yaml

from .attribution import CategoryRules

#: The high bits Nsight Systems sets on every serialized GlobalId (vmId 1 << 48 as seen in real exports).
GLOBAL_ID_BASE = 0x1000000000000

SCHEMA = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
        "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, "
        "localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, "
        "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, "
        "dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, "
        "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"),
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, "
        "l2CacheSize INTEGER, totalMemory INTEGER, smCount INTEGER, uuid TEXT, chipName TEXT, cuDevice INTEGER"),
    "TARGET_INFO_CUDA_DEVICE": (
        "gpuId INTEGER, cudaId INTEGER NOT NULL, pid INTEGER NOT NULL, uuid TEXT, numMultiprocessors INTEGER"),
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "DIAGNOSTIC_EVENT": (
        "timestamp INTEGER NOT NULL, timestampType INTEGER NOT NULL, source INTEGER NOT NULL, "
        "severity INTEGER NOT NULL, text TEXT NOT NULL, globalPid INTEGER"),
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
}

#: ENUM_CUDA_MEMCPY_OPER ids used by the generator.
HTOD, DTOH, DTOD = 1, 2, 8
#: NVTX event types: push/pop range.
NVTX_PUSH_POP = 59
#: eventClass of CUDA runtime rows in real exports.
RUNTIME_EVENT_CLASS = 1


def global_pid(pid: int) -> int:
    """Serialized GlobalId of a process, as in ``globalPid`` columns."""
    return GLOBAL_ID_BASE | (int(pid) << 24)


def global_tid(pid: int, tid: int) -> int:
    """Serialized GlobalId of a thread, as in ``globalTid`` columns."""
    return global_pid(pid) | int(tid)


class ExportWriter:
    """Write a synthetic export. Times are int ns; every ``add_*`` returns nothing.

    Example::

        w = ExportWriter("x.sqlite")
        w.kernel(pid=10, device=0, stream=7, start=0, end=100, name="gemm")
        w.close()
    """

    def __init__(self, path: str, schema_version: str = "3.25.0", meta_table: str = "META_DATA_EXPORT"):
        if os.path.exists(path):
            os.unlink(path)
        self.path = path
        self.rows: dict[str, list[tuple]] = {}
        self.strings: dict[str, int] = {}
        self.meta_table = meta_table
        self.meta = {"EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems", "EXPORT_SCHEMA_VERSION": schema_version,
                     "EXPORT_PARAM_EXPORT_TYPE": "SQLite", "DERIVED_BY": "gpu-idle synth"}
        self._corr = 0
        self._pids: set[int] = set()

    def string(self, text: str) -> int:
        """Id of ``text`` in StringIds (interned)."""
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
        return self.strings[text]

    def correlation(self) -> int:
        """A fresh correlationId linking a runtime call to the GPU work it launched."""
        self._corr += 1
        return self._corr

    def _add(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)

    def kernel(self, pid: int, device: int, stream: int, start: int, end: int, name: str,
               correlation: int | None = None, context: int = 1) -> None:
        self._pids.add(pid)
        sid = self.string(name)
        self._add("CUPTI_ACTIVITY_KIND_KERNEL", (
            int(start), int(end), device, context, None, stream, correlation or self.correlation(),
            global_pid(pid), sid, sid, None, 0, 0, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, self._corr, 0, None, 0))

    def runtime(self, pid: int, tid: int, start: int, end: int, name: str, correlation: int | None = None) -> None:
        """One CUDA runtime API call (``name`` as exported, e.g. ``cudaStreamSynchronize_v3020``)."""
        self._pids.add(pid)
        self._add("CUPTI_ACTIVITY_KIND_RUNTIME", (
            int(start), int(end), RUNTIME_EVENT_CLASS, global_tid(pid, tid),
            correlation or self.correlation(), self.string(name), 0, None))

    def memcpy(self, pid: int, device: int, stream: int, start: int, end: int, copy_kind: int = HTOD,
               nbytes: int = 1 << 20, correlation: int | None = None) -> None:
        self._add("CUPTI_ACTIVITY_KIND_MEMCPY", (
            int(start), int(end), device, 1, None, stream, correlation or self.correlation(), global_pid(pid),
            nbytes, copy_kind, None, 0, 0, device, 1, device, 1, None, None, None, 1))

    def memset(self, pid: int, device: int, stream: int, start: int, end: int, nbytes: int = 1 << 20,
               correlation: int | None = None) -> None:
        self._add("CUPTI_ACTIVITY_KIND_MEMSET", (
            int(start), int(end), device, 1, None, stream, correlation or self.correlation(), global_pid(pid),
            0, nbytes, None, 0))

    def nvtx(self, pid: int, tid: int, start: int, end: int, text: str, registered: bool = False) -> None:
        """One push/pop range; ``registered`` stores the text through StringIds (textId)."""
        text_col, text_id = (None, self.string(text)) if registered else (text, None)
        self._add("NVTX_EVENTS", (
            int(start), int(end), NVTX_PUSH_POP, None, None, None, text_col, global_tid(pid, tid), None, text_id,
            None, None, None, None, None, None, None, None, None, None))

    def gpu(self, gpu_id: int, name: str, uuid: str = "", bus: str = "") -> None:
        """A physical GPU row (TARGET_INFO_GPU)."""
        self._add("TARGET_INFO_GPU", (0, gpu_id, name, bus, 1, None, None, None, uuid, None, gpu_id))

    def cuda_device(self, gpu_id: int, cuda_id: int, pid: int, uuid: str = "") -> None:
        """Map a process's CUDA ordinal to a physical GPU (TARGET_INFO_CUDA_DEVICE)."""
        self._add("TARGET_INFO_CUDA_DEVICE", (gpu_id, cuda_id, pid, uuid, 132))

    def diagnostic(self, timestamp: int, text: str, severity: int = 2, pid: int | None = None) -> None:
        self._add("DIAGNOSTIC_EVENT", (int(timestamp), 1, 3, severity, text,
                                       global_pid(pid) if pid is not None else None))

    def close(self) -> str:
        """Write every table that has rows (plus StringIds, PROCESSES, metadata). Returns the path."""
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)
        con = sqlite3.connect(tmp)
        try:
            self.rows["StringIds"] = [(i, s) for s, i in self.strings.items()]
            self.rows["PROCESSES"] = [(global_pid(p), p, "python3") for p in sorted(self._pids)]
            self.rows[self.meta_table] = list(self.meta.items())
            for table, rows in self.rows.items():
                if not rows:
                    continue
                ddl = SCHEMA.get(table, SCHEMA["META_DATA_EXPORT"])
                con.execute(f"CREATE TABLE {table} ({ddl})")
                marks = ",".join("?" * len(rows[0]))
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            con.commit()
        finally:
            con.close()
        os.replace(tmp, self.path)
        return self.path


# ---------------------------------------------------------------------------
# Example fleet: deterministic data-parallel training exports with planted gaps.
#
# A report is planned first as plain Python objects (one _RankTimeline per
# rank: GPU ops, CPU-side CUDA calls, NVTX ranges, planted gaps), then written
# through ExportWriter, and the "truth" is computed from the same plan with
# plain Python (sweeps and sorted lists, independent of pipeline.intervals and
# pipeline.gaps). All times are int ns on the capture clock.
# ---------------------------------------------------------------------------

US = 1_000                 #: ns per microsecond
MS = 1_000_000             #: ns per millisecond
CAPTURE_START_NS = 10_000_000_000   #: the first iteration starts about 10 s into the capture

#: Per-process stream ids (PyTorch's default stream shows as 7 in Nsight Systems).
COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM = 7, 16, 23

#: Exported names (with version suffix) of the CUDA runtime APIs the generator emits; plans use the base names.
API_EXPORT_NAMES = {
    "cudaLaunchKernel": "cudaLaunchKernel_v7000",
    "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
    "cudaMemsetAsync": "cudaMemsetAsync_v3020",
    "cudaStreamSynchronize": "cudaStreamSynchronize_v3020",
    "cudaEventSynchronize": "cudaEventSynchronize_v3020",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize_v3020",
    "cudaHostAlloc": "cudaHostAlloc_v3020",
    "cudaMalloc": "cudaMalloc_v3020",
}

SLIVER_NS = (3 * US, 40 * US)          #: launch gap between back-to-back kernels on one stream
LAUNCH_LEAD_NS = (4 * US, 9 * US)      #: launch call end -> kernel start
LAUNCH_CALL_NS = (3 * US, 7 * US)      #: duration of one cudaLaunchKernel call
#: Witness calls inside a planted gap end this long before the gap ends, leaving room for
#: the next kernel's launch call (at most LEAD + CALL = 16 us before the kernel).
WITNESS_MARGIN_NS = 25 * US
H2D_BYTES_PER_NS = 25                  #: ~25 GB/s pinned host-to-device bandwidth
BUCKET_5MS, BUCKET_50MS = 5 * MS, 50 * MS   #: SPEC size buckets (ns)
#: Categories the truth assigns (SPEC order); ``periodic`` never: a report holds at most one checkpoint.
TRUTH_CATEGORIES = ("sync", "data", "comm", "boundary", "cpu")
#: Per-gap categories of the fleet columns ``cat_*_ns`` (SPEC order); ``launch`` is per GPU, not per gap.
FLEET_GAP_CATEGORIES = ("sync", "data", "comm", "boundary", "periodic", "cpu")
#: The kernel before a device-level hole that opens W (a window edge: never a collective).
DEVICE_WINDOW_START = "(window start)"
MIN_STABLE_ITERATIONS = 3   #: the nvtx window needs this many stable iterations (pipeline default)

#: PCIe bus ids of the eight GPUs of an HGX node.
HGX_BUS_IDS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
               "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")

# Kernel catalogs: (short name, min ns, max ns).
_GEMM_QKV = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
_GEMM_PROJ = "nvjet_tst_96x64_64x10_1x2_h_bz_bias_TNN"
_GEMM_MLP = "nvjet_tst_192x208_64x4_1x1_h_bz_coopB_bias_TNT"
TRANSFORMER_FORWARD = (
    ("vectorized_layer_norm_kernel", 60 * US, 120 * US),
    (_GEMM_QKV, 900 * US, 1_600 * US),
    ("flash_fwd_kernel", 700 * US, 1_300 * US),
    (_GEMM_PROJ, 400 * US, 800 * US),
    ("vectorized_elementwise_kernel", 40 * US, 110 * US),
    (_GEMM_MLP, 1_200 * US, 1_900 * US),
    ("vectorized_elementwise_kernel", 80 * US, 180 * US),
    (_GEMM_QKV, 1_200 * US, 1_900 * US),
)
TRANSFORMER_HEAD = (
    (_GEMM_MLP, 1_500 * US, 2_200 * US),
    ("cunn_SoftMaxForward", 150 * US, 300 * US),
    ("nll_loss_forward_reduce_cuda_kernel_2d", 40 * US, 90 * US),
)
TRANSFORMER_BACKWARD = (
    (_GEMM_QKV, 1_300 * US, 2_200 * US),
    (_GEMM_MLP, 1_300 * US, 2_200 * US),
    ("elementwise_kernel", 90 * US, 200 * US),
    (_GEMM_MLP, 1_300 * US, 2_200 * US),
    ("reduce_kernel", 60 * US, 150 * US),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 1_800 * US, 3_000 * US),
    (_GEMM_PROJ, 700 * US, 1_300 * US),
    ("layer_norm_grad_input_kernel", 80 * US, 160 * US),
    ("GammaBetaBackwardCUDAKernel", 60 * US, 120 * US),
)
ADAM_OPTIMIZER = (
    ("reduce_kernel", 80 * US, 150 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
)
_CONV_FPROP = ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
_CONV_DGRAD = ("sm80_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
_CONV_WGRAD = ("sm80_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
CONVNET_FORWARD = (
    (_CONV_FPROP, 600 * US, 1_200 * US),
    ("bn_fw_tr_1C11_kernel_NCHW", 120 * US, 260 * US),
    ("vectorized_elementwise_kernel", 50 * US, 120 * US),
    (_CONV_FPROP, 900 * US, 1_600 * US),
    ("bn_fw_tr_1C11_kernel_NCHW", 120 * US, 260 * US),
)
CONVNET_HEAD = (
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 200 * US, 400 * US),
    ("cunn_SoftMaxForward", 60 * US, 120 * US),
    ("nll_loss_forward_reduce_cuda_kernel_2d", 30 * US, 70 * US),
)
CONVNET_BACKWARD = (
    ("bn_bw_1C11_kernel_new", 150 * US, 300 * US),
    (_CONV_DGRAD, 900 * US, 1_700 * US),
    (_CONV_WGRAD, 900 * US, 1_700 * US),
    ("elementwise_kernel", 60 * US, 140 * US),
    ("bn_bw_1C11_kernel_new", 150 * US, 300 * US),
    (_CONV_DGRAD, 700 * US, 1_300 * US),
    (_CONV_WGRAD, 700 * US, 1_300 * US),
)


@dataclass(frozen=True)
class TrainingProfile:
    """The shape of one synthetic training job. Durations in ns; ranges are ``(lo, hi)`` inclusive.

    Every iteration runs ``layers`` x ``forward`` kernels (with a ``tp_collective``
    after each layer when set) and the ``head`` on the compute stream, then the
    ``main_collective`` on the compute stream in lockstep across ranks (the peers of
    a late rank wait inside it: busy, not idle), then ``layers`` x ``backward``
    kernels with ``buckets`` gradient collectives on the NCCL stream, then the
    ``optimizer`` kernels. Steady iterations get ``gaps_per_iteration`` planted
    forward gaps, categories drawn from ``gap_mix`` (category, weight), lengths
    from ``gap_ns`` (category, (lo, hi)).
    """

    name: str
    forward: tuple = TRANSFORMER_FORWARD
    head: tuple = TRANSFORMER_HEAD
    backward: tuple = TRANSFORMER_BACKWARD
    optimizer: tuple = ADAM_OPTIMIZER
    layers: int = 2
    tp_collective: str | None = None
    main_collective: str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
    comm_collective: str = "ncclDevKernel_AllGather_RING_LL"   #: the collective before a planted comm gap
    collective_ns: tuple = (150 * US, 400 * US)                #: a compute-stream collective nobody waits in
    bucket_collective: str = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"
    buckets: int = 3
    bucket_ns: tuple = (600 * US, 1_800 * US)
    last_bucket_ns: tuple = (200 * US, 550 * US)   #: the optimizer waits for it: keep it well under 1 ms
    gaps_per_iteration: int = 2
    gap_mix: tuple = (("sync", 1), ("data", 1), ("comm", 1), ("cpu", 1))
    gap_ns: tuple = (("sync", (1_500 * US, 4 * MS)), ("data", (2 * MS, 5 * MS)),
                     ("comm", (1_200 * US, 3 * MS)), ("cpu", (1_500 * US, 4 * MS)))
    host_alloc_share: float = 0.0     #: share of data gaps that start with an in-loop cudaHostAlloc
    straggler_gaps: int = 2           #: extra cpu gaps per steady iteration on the straggler rank
    straggler_ns: tuple = (5 * MS, 8 * MS)
    warmup_slowdown: float = 1.6      #: kernel durations x this in the first iteration
    warmup_gap_ns: tuple = (4 * MS, 8 * MS)
    checkpoint_ns: tuple = (70 * MS, 110 * MS)


PROFILES = {
    "balanced": TrainingProfile("balanced"),
    "data-bound": TrainingProfile(
        "data-bound", forward=CONVNET_FORWARD, head=CONVNET_HEAD, backward=CONVNET_BACKWARD, layers=3,
        buckets=2, gaps_per_iteration=2, gap_mix=(("data", 4), ("sync", 1), ("cpu", 1)),
        gap_ns=(("data", (3 * MS, 9 * MS)), ("sync", (1_500 * US, 3 * MS)), ("cpu", (1_200 * US, 3 * MS))),
        host_alloc_share=0.3),
    "comm-heavy": TrainingProfile(
        "comm-heavy", tp_collective="ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
        bucket_collective="ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", buckets=4,
        bucket_ns=(1_500 * US, 3_500 * US), gaps_per_iteration=3,
        gap_mix=(("comm", 4), ("sync", 1), ("cpu", 1)),
        gap_ns=(("comm", (1_500 * US, 5 * MS)), ("sync", (1_500 * US, 3 * MS)), ("cpu", (1_200 * US, 3 * MS)))),
}


@dataclass
class _Op:
    """GPU work: a kernel, memcpy or memset on one stream, [start, end) ns."""

    kind: str
    stream: int
    start: int
    end: int
    name: str = ""
    copy_kind: int = HTOD
    nbytes: int = 0
    correlation: int = 0


@dataclass
class _Call:
    """A CUDA runtime call on one CPU thread, [start, end) ns; ``op`` is the GPU work it issued."""

    tid: int
    start: int
    end: int
    api: str
    op: _Op | None = None


@dataclass
class _Gap:
    """A planted compute-stream gap: [start, start + length) ns."""

    stream: int
    start: int
    length: int
    category: str
    kind: str

    @property
    def end(self) -> int:
        return self.start + self.length


@dataclass
class _RankTimeline:
    """One rank: a process driving device 0 of its own GPU, planned event by event.

    ``gpu_t`` is the end of the last compute-stream op; ``cpu`` holds, per thread,
    the end of its last CUDA call, so calls on one thread never overlap and a
    kernel never starts before its launch call could have been made.
    """

    rank: int
    pid: int
    comm_tid: int
    rng: random.Random
    gpu_t: int
    nccl_t: int = 0
    exact_next: bool = False
    cpu: dict = field(default_factory=dict)
    ops: list = field(default_factory=list)
    calls: list = field(default_factory=list)
    nvtx: list = field(default_factory=list)      # (start, end, text, registered)
    gaps: list = field(default_factory=list)
    iterations: list = field(default_factory=list)

    def draw(self, lo_hi, scale: float = 1.0) -> int:
        """A random int in [lo, hi] ns, times ``scale``."""
        return int(self.rng.randint(*lo_hi) * scale)

    def call(self, tid: int, start: int, end: int, api: str, op: _Op | None = None) -> _Call:
        """Record a CUDA call; raises if it would overlap the thread's previous call."""
        if start < self.cpu.get(tid, 0) or end < start:
            raise RuntimeError(f"synth: {api} at {start} overlaps thread {tid} (free at {self.cpu.get(tid)})")
        c = _Call(tid, int(start), int(end), api, op)
        self.calls.append(c)
        self.cpu[tid] = c.end
        return c

    def gpu_op(self, kind: str, stream: int, start: int, end: int, **kw) -> _Op:
        op = _Op(kind, stream, int(start), int(end), **kw)
        self.ops.append(op)
        return op

    # -- kernels -------------------------------------------------------------

    def launch_slot(self, tid: int, earliest: int) -> tuple[int, int, int]:
        """``(start, lead, call_ns)``: the first start >= ``earliest`` the thread can still launch for."""
        lead, call_ns = self.draw(LAUNCH_LEAD_NS), self.draw(LAUNCH_CALL_NS)
        return max(earliest, self.cpu.get(tid, 0) + US + call_ns + lead), lead, call_ns

    def launched_kernel(self, stream: int, slot: tuple, end: int, name: str, tid: int) -> _Op:
        """A kernel [slot start, end) and its cudaLaunchKernel call just before it."""
        start, lead, call_ns = slot
        op = self.gpu_op("kernel", stream, start, end, name=name)
        self.call(tid, start - lead - call_ns, start - lead, "cudaLaunchKernel", op)
        return op

    def compute_slot(self, not_before: int = 0) -> tuple[int, int, int]:
        """Launch slot of the next compute-stream kernel: exactly at the end of a planted gap, else after a sliver."""
        if self.exact_next:
            slot = self.launch_slot(self.pid, self.gpu_t)
            if slot[0] != self.gpu_t:
                raise RuntimeError(f"synth: rank {self.rank}: CPU calls spill past the planted gap at {self.gpu_t}")
            self.exact_next = False
            return slot
        return self.launch_slot(self.pid, max(self.gpu_t + self.draw(SLIVER_NS), not_before))

    def compute(self, name: str, duration: int, not_before: int = 0) -> _Op:
        """Next kernel on the compute stream, ``duration`` ns long."""
        slot = self.compute_slot(not_before)
        op = self.launched_kernel(COMPUTE_STREAM, slot, slot[0] + duration, name, self.pid)
        self.gpu_t = op.end
        return op

    def bucket(self, ready: int, duration: int, name: str) -> _Op:
        """A gradient collective on the NCCL stream, launched by the comm thread once ``ready``."""
        earliest = max(ready, self.nccl_t) + self.draw(SLIVER_NS)
        slot = self.launch_slot(self.comm_tid, earliest)
        op = self.launched_kernel(NCCL_STREAM, slot, slot[0] + duration, name, self.comm_tid)
        self.nccl_t = op.end
        return op

    # -- copies hidden under kernels -----------------------------------------

    def hidden_transfer(self, under: _Op, kind: str) -> None:
        """An async H2D copy (``memcpy``) or memset on the copy stream, running inside ``under``."""
        api = "cudaMemcpyAsync" if kind == "memcpy" else "cudaMemsetAsync"
        c0 = self.cpu[self.pid] + US
        c = self.call(self.pid, c0, c0 + self.draw((5 * US, 12 * US)), api)
        start = max(c.start + 3 * US, under.start + 2 * US)
        end = min(start + int((under.end - under.start) * self.rng.uniform(0.2, 0.6)), under.end - 2 * US)
        c.op = self.gpu_op(kind, COPY_STREAM, start, end, nbytes=(end - start) * H2D_BYTES_PER_NS)

    # -- planted gaps --------------------------------------------------------

    def gap(self, length: int, category: str, kind: str) -> _Gap:
        """Leave the compute stream idle for exactly ``length`` ns after its last op."""
        g = _Gap(COMPUTE_STREAM, self.gpu_t, int(length), category, kind)
        self.gaps.append(g)
        self.gpu_t = g.end
        self.exact_next = True
        return g

    def witness_sync(self, g: _Gap) -> None:
        """A synchronising call issued just before the gap, returning just before it ends."""
        api = self.rng.choice(("cudaStreamSynchronize",) * 3 + ("cudaEventSynchronize", "cudaDeviceSynchronize"))
        start = max(self.cpu[self.pid] + US, g.start - self.draw((5 * US, 20 * US)))
        self.call(self.pid, start, g.end - WITNESS_MARGIN_NS, api)

    def witness_data(self, g: _Gap, host_alloc_share: float) -> None:
        """Host-to-device transfers filling the gap: pageable cudaMemcpyAsync calls, each spanning its copy."""
        t = max(self.cpu[self.pid] + US, g.start + self.draw((3 * US, 10 * US)))
        stop = g.end - WITNESS_MARGIN_NS
        if self.rng.random() < host_alloc_share:
            alloc = min(self.draw((300 * US, 1_200 * US)), (stop - t) // 3)
            t = self.call(self.pid, t, t + alloc, "cudaHostAlloc").end + US
        grid = range(t + 50 * US, stop - 50 * US, 50 * US)   # chunks of at least 50 us
        cuts = sorted(self.rng.sample(grid, min(self.rng.randint(1, 4), len(grid))))
        for c0, c1 in zip([t] + [c + US for c in cuts], cuts + [stop]):
            c = self.call(self.pid, c0, c1, "cudaMemcpyAsync")
            c.op = self.gpu_op("memcpy", COPY_STREAM, c0 + 2 * US, c1 - US, copy_kind=HTOD,
                               nbytes=(c1 - c0 - 3 * US) * H2D_BYTES_PER_NS)

    def witness_warmup(self, g: _Gap) -> None:
        """Caching-allocator growth during warm-up: cudaMalloc calls (neither sync nor data)."""
        t = max(self.cpu[self.pid] + US, g.start + 20 * US)
        for _ in range(self.rng.randint(2, 3)):
            t = self.call(self.pid, t, t + self.draw((50 * US, 300 * US)), "cudaMalloc").end
            t += self.draw((20 * US, 200 * US))
        if self.cpu[self.pid] > g.end - WITNESS_MARGIN_NS:
            raise RuntimeError(f"synth: rank {self.rank}: warm-up calls spill past the gap at {g.start}")

    # -- iteration frame -----------------------------------------------------

    def setup(self, first_kernel_ns: int) -> None:
        """Allocations before the first kernel (outside every window): pinned buffers once, device memory."""
        t = first_kernel_ns - 30 * MS
        for api, lo_hi in (("cudaMalloc", (200 * US, 2 * MS)), ("cudaHostAlloc", (1 * MS, 4 * MS)),
                           ("cudaMalloc", (100 * US, 1 * MS)), ("cudaHostAlloc", (1 * MS, 4 * MS))):
            t = self.call(self.pid, t, t + self.draw(lo_hi), api).end + self.draw((100 * US, 2 * MS))

    def begin_iteration(self, index: int, kind: str) -> None:
        start = self.cpu[self.pid] + self.draw((2 * US, 6 * US))
        self.cpu[self.pid] = start
        self.iterations.append({"index": index, "kind": kind, "nvtx_start_ns": start})

    def end_iteration(self, checkpoint_ns: int | None) -> None:
        """``loss.item()`` (D2H copy + stream sync), an optional checkpoint save, then the NVTX pop."""
        last_end = self.gpu_t
        g = self.gap(checkpoint_ns, "cpu", "checkpoint") if checkpoint_ns else None
        c0 = self.cpu[self.pid] + US
        c = self.call(self.pid, c0, c0 + self.draw((6 * US, 10 * US)), "cudaMemcpyAsync")
        d2h0 = max(last_end, c.end) + 2 * US
        c.op = self.gpu_op("memcpy", COMPUTE_STREAM, d2h0, d2h0 + 3 * US, copy_kind=DTOH, nbytes=4)
        self.call(self.pid, c.end + US, max(c.op.end, c.end) + 3 * US, "cudaStreamSynchronize")
        if g is not None:
            self.save_checkpoint(g)
        it = self.iterations[-1]
        it["nvtx_end_ns"] = self.cpu[self.pid] + self.draw((2 * US, 5 * US))
        self.cpu[self.pid] = it["nvtx_end_ns"]
        self.nvtx.append((it["nvtx_start_ns"], it["nvtx_end_ns"], f"Iteration {it['index']}", False))

    def save_checkpoint(self, g: _Gap) -> None:
        """Inside the checkpoint gap: D2H copies of the weights, then file writes (no CUDA calls)."""
        start = self.cpu[self.pid] + 2 * US
        t = start + US
        for _ in range(4):
            c = self.call(self.pid, t, t + self.draw((500 * US, 1 * MS)), "cudaMemcpyAsync")
            c.op = self.gpu_op("memcpy", COPY_STREAM, c.start + 2 * US, c.end - US, copy_kind=DTOH,
                               nbytes=(c.end - c.start - 3 * US) * H2D_BYTES_PER_NS)
            t = c.end + US
        end = g.end - self.draw((100 * US, 300 * US))
        self.nvtx.append((start, end, "save_checkpoint", True))
        self.cpu[self.pid] = end


def _is_collective(name: str, rules: CategoryRules) -> bool:
    return re.search(rules.collective_kernel, name, re.IGNORECASE) is not None


def _forward_sequence(profile: TrainingProfile) -> list[tuple]:
    """The forward kernels of one iteration: layers (each closed by the TP collective if any), then the head."""
    seq = []
    for _ in range(profile.layers):
        seq.extend(profile.forward)
        if profile.tp_collective:
            seq.append((profile.tp_collective, *profile.collective_ns))
    return seq + list(profile.head)


def _category_pool(profile: TrainingProfile, slots: int, rng: random.Random) -> list[str]:
    """``slots`` categories in ``gap_mix`` proportions, every category once before any twice, shuffled."""
    most = max(weight for _, weight in profile.gap_mix)
    rounds = [cat for k in range(most) for cat, weight in profile.gap_mix if weight > k]
    pool = [rounds[i % len(rounds)] for i in range(slots)]
    rng.shuffle(pool)
    return pool


def _plant(r: _RankTimeline, profile: TrainingProfile, category: str, kind: str) -> None:
    """Plant one gap after the compute stream's last kernel, with the witness its category needs."""
    gap_ns = dict(profile.gap_ns)
    if kind == "warmup":
        r.witness_warmup(r.gap(r.draw(profile.warmup_gap_ns), category, kind))
    elif kind == "straggler":
        r.gap(r.draw(profile.straggler_ns), category, kind)
    elif category == "comm":
        r.compute(profile.comm_collective, r.draw(profile.collective_ns))
        r.gap(r.draw(gap_ns["comm"]), category, kind)
    elif category == "sync":
        r.witness_sync(r.gap(r.draw(gap_ns["sync"]), category, kind))
    elif category == "data":
        r.witness_data(r.gap(r.draw(gap_ns["data"]), category, kind), profile.host_alloc_share)
    else:
        r.gap(r.draw(gap_ns["cpu"]), category, kind)


def _run_forward(r: _RankTimeline, profile: TrainingProfile, seq: list, plants: list, slow: float,
                 rules: CategoryRules) -> None:
    """Forward kernels with ``plants`` [(category, kind)] at random positions (never right after a collective)."""
    eligible = [j for j, (name, _, _) in enumerate(seq) if not _is_collective(name, rules)]
    at = dict(zip(r.rng.sample(eligible, len(plants)), plants))
    copy_host = next(j for j, (name, lo, _) in enumerate(seq) if lo >= 400 * US)
    for j, (name, lo, hi) in enumerate(seq):
        op = r.compute(name, r.draw((lo, hi), slow))
        if j == copy_host:
            r.hidden_transfer(op, "memcpy")   # the next batch, prefetched under a GEMM
        if j in at:
            _plant(r, profile, *at[j])


def _run_lockstep_collective(ranks: list, name: str, duration: int) -> None:
    """A compute-stream collective that ends together on every rank: early ranks wait inside it."""
    slots = [r.compute_slot() for r in ranks]
    end = max(s[0] for s in slots) + duration
    for r, slot in zip(ranks, slots):
        r.gpu_t = r.launched_kernel(COMPUTE_STREAM, slot, end, name, r.pid).end


def _run_backward_and_step(r: _RankTimeline, profile: TrainingProfile, slow: float) -> None:
    """Backward kernels with gradient buckets on the NCCL stream, then the optimizer once the last bucket is done.

    A bucket lasts at most 80 % of the backward work until the next bucket is ready,
    so buckets never queue and the optimizer waits only for the short last one.
    """
    seq = list(profile.backward) * profile.layers
    durations = [r.draw((lo, hi), slow) for _, lo, hi in seq]
    n = len(seq)
    after = sorted({max(0, round((b + 1) * n / profile.buckets) - 1) for b in range(profile.buckets)})
    bucket_cap = {j: int(0.8 * sum(durations[j + 1:nxt + 1])) for j, nxt in zip(after, after[1:])}
    last_bucket = None
    for j, ((name, _, _), duration) in enumerate(zip(seq, durations)):
        op = r.compute(name, duration)
        if j == 0:
            r.hidden_transfer(op, "memset")
        if j in after:
            if j == n - 1:   # not slowed down in warm-up: the optimizer waits for it
                length = r.draw(profile.last_bucket_ns)
            else:
                length = min(r.draw(profile.bucket_ns, slow), bucket_cap[j])
            last_bucket = r.bucket(op.end, length, profile.bucket_collective)
    not_before = last_bucket.end + r.draw(SLIVER_NS) if last_bucket else 0
    for k, (name, lo, hi) in enumerate(profile.optimizer):
        r.compute(name, r.draw((lo, hi), slow), not_before if k == 0 else 0)


def _make_ranks(gpus: int, rng: random.Random) -> list[_RankTimeline]:
    """One process per rank with realistic pids, a comm thread each, staggered start times."""
    base_pid = rng.randint(20_000, 90_000)
    t0 = CAPTURE_START_NS + rng.randint(0, 500 * MS)
    ranks, pid = [], base_pid
    for rank in range(gpus):
        pid += rng.randint(1, 4)
        r = _RankTimeline(rank, pid, base_pid + 200 + 7 * rank, rng, t0 + rng.randint(0, 3 * MS))
        r.setup(r.gpu_t)
        r.cpu[r.comm_tid] = r.gpu_t - 10 * MS
        ranks.append(r)
    return ranks


def _plan_report(profile: TrainingProfile, gpus: int, iterations: int, rng: random.Random,
                 straggler: int | None, checkpoint: int | None) -> list[_RankTimeline]:
    """Simulate every rank iteration by iteration (ranks meet in the main collective)."""
    rules = CategoryRules()
    ranks = _make_ranks(gpus, rng)
    kinds = ["warmup" if i == 0 else "checkpoint" if i == checkpoint else "steady" for i in range(iterations)]
    steady = kinds.count("steady")
    pools = [_category_pool(profile, steady * profile.gaps_per_iteration, rng) for _ in ranks]
    checkpoint_base = rng.randint(*profile.checkpoint_ns)
    seq = _forward_sequence(profile)
    for index, kind in enumerate(kinds):
        slow = profile.warmup_slowdown if kind == "warmup" else 1.0
        for r in ranks:
            r.begin_iteration(index, kind)
            plants = []
            if kind == "warmup":
                plants = [("cpu", "warmup")]
            elif kind == "steady":
                plants = [(c, c) for c in pools[r.rank][:profile.gaps_per_iteration]]
                del pools[r.rank][:profile.gaps_per_iteration]
                if r.rank == straggler:
                    plants += [("cpu", "straggler")] * profile.straggler_gaps
            _run_forward(r, profile, seq, plants, slow, rules)
        first_collective = 20 if kind == "warmup" else 1   # NCCL sets up its connections lazily
        _run_lockstep_collective(ranks, profile.main_collective,
                                 rng.randint(*profile.collective_ns) * first_collective)
        for r in ranks:
            _run_backward_and_step(r, profile, slow)
            r.end_iteration(checkpoint_base + r.draw((0, 2 * MS)) if kind == "checkpoint" else None)
    return ranks


# -- writing -------------------------------------------------------------------

def _gpu_identity(rank: int, rng: random.Random) -> tuple[str, str]:
    """``(uuid, bus id)`` of rank's GPU; the uuid as TARGET_INFO_GPU stores it (no ``GPU-`` prefix)."""
    bits = rng.getrandbits(128)
    h = f"{bits:032x}"
    uuid = f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
    bus = HGX_BUS_IDS[rank] if rank < len(HGX_BUS_IDS) else f"0000:{0x18 + 16 * rank:02x}:00.0"
    return uuid, bus


def _write_export(path: str, ranks: list, identities: list, cluster_model: str, name_gpus: bool) -> None:
    """Write the plan through :class:`ExportWriter`: correlation ids follow call start order, like CUPTI's."""
    w = ExportWriter(path)
    if name_gpus:
        for r, (uuid, bus) in zip(ranks, identities):
            w.gpu(r.rank, cluster_model, uuid=uuid, bus=bus)
            w.cuda_device(r.rank, 0, r.pid, uuid=uuid)
    calls = sorted(((r, c) for r in ranks for c in r.calls), key=lambda rc: (rc[1].start, rc[0].pid, rc[1].tid))
    for r, c in calls:
        corr = w.correlation()
        w.runtime(r.pid, c.tid, c.start, c.end, API_EXPORT_NAMES[c.api], correlation=corr)
        if c.op is not None:
            c.op.correlation = corr
    ops = sorted(((r, op) for r in ranks for op in r.ops), key=lambda ro: (ro[1].start, ro[0].pid, ro[1].stream))
    for r, op in ops:
        if not op.correlation:
            raise RuntimeError(f"synth: {op.kind} at {op.start} has no launching call")
        if op.kind == "kernel":
            w.kernel(r.pid, 0, op.stream, op.start, op.end, op.name, correlation=op.correlation)
        elif op.kind == "memcpy":
            w.memcpy(r.pid, 0, op.stream, op.start, op.end, op.copy_kind, op.nbytes, correlation=op.correlation)
        else:
            w.memset(r.pid, 0, op.stream, op.start, op.end, op.nbytes, correlation=op.correlation)
    for r, (start, end, text, registered) in sorted(((r, n) for r in ranks for n in r.nvtx),
                                                     key=lambda rn: (rn[1][0], rn[0].pid)):
        w.nvtx(r.pid, r.pid, start, end, text, registered=registered)
    w.close()


# -- truth: plain-Python reference computation from the plan ------------------

class _Union:
    """The union of [(start, end)] ns intervals, as sorted disjoint runs."""

    def __init__(self, intervals):
        runs: list[list[int]] = []
        for start, end in sorted((s, e) for s, e in intervals if e > s):
            if runs and start <= runs[-1][1]:
                runs[-1][1] = max(runs[-1][1], end)
            else:
                runs.append([start, end])
        self.runs = runs
        self.starts = [r[0] for r in runs]

    def covered(self, a: int, b: int) -> int:
        """ns of [a, b) inside the union."""
        total = 0
        for start, end in self.runs[max(bisect.bisect_right(self.starts, a) - 1, 0):]:
            if start >= b:
                break
            total += max(0, min(end, b) - max(start, a))
        return total

    def holes(self, a: int, b: int) -> list[int]:
        """Lengths of the pieces of [a, b) outside the union, edges included."""
        out, reach = [], a
        for start, end in self.runs:
            start, end = max(start, a), min(end, b)
            if end <= start:
                continue
            if start > reach:
                out.append(start - reach)
            reach = max(reach, end)
        return out + ([b - reach] if b > reach else [])


def _stream_gaps(kernels, min_gap_ns: int) -> tuple[list, list]:
    """Per stream, in (start, end, correlation) order: gaps from the latest end so far to the next start.

    Returns ``(kept, slivers)``: kept = [(stream, start, length, kernel_before)] longer than
    ``min_gap_ns``; slivers = lengths of the positive gaps up to it.
    """
    kept, slivers = [], []
    for stream in sorted({k.stream for k in kernels}):
        latest = None
        for k in sorted((k for k in kernels if k.stream == stream), key=lambda k: (k.start, k.end, k.correlation)):
            if latest is not None and k.start > latest.end:
                length = k.start - latest.end
                if length > min_gap_ns:
                    kept.append((stream, latest.end, length, latest.name))
                else:
                    slivers.append(length)
            if latest is None or k.end >= latest.end:
                latest = k
    return kept, slivers


def _device_gaps(kernels, w0: int, w1: int, min_gap_ns: int) -> list:
    """Device-level holes in W: every kernel of the GPU (all streams) merged in (start, end, correlation) order.

    A hole runs from the latest end so far (W's start before the first kernel) to the
    next kernel's start, plus one from the latest end to W's end. Returns
    [(start, length, kernel_before)] for holes longer than ``min_gap_ns``; the kernel
    before is the one that reached the latest end (ties: the later one), or
    :data:`DEVICE_WINDOW_START` for a hole that opens W.
    """
    kept, reach, before = [], w0, DEVICE_WINDOW_START
    for k in sorted(kernels, key=lambda k: (k.start, k.end, k.correlation)):
        if k.start - reach > min_gap_ns:
            kept.append((reach, k.start - reach, before))
        if k.end >= reach:
            reach, before = k.end, k.name
    if w1 - reach > min_gap_ns:
        kept.append((reach, w1 - reach, before))
    return kept


@dataclass(frozen=True)
class _Witnesses:
    """What can explain gaps on one GPU, split as the category rules need."""

    sync: _Union
    data: _Union     # transfer / pinned-alloc calls and copy-engine work
    calls: _Union    # every CUDA call (is the API side quiet?)
    copies: _Union

    @classmethod
    def of(cls, calls, copy_iv, rules: CategoryRules) -> "_Witnesses":
        return cls(_Union((c.start, c.end) for c in calls if c.api in rules.sync_apis),
                   _Union([(c.start, c.end) for c in calls if c.api in rules.data_apis] + copy_iv),
                   _Union((c.start, c.end) for c in calls), _Union(copy_iv))


def _categorise(gap_start: int, length: int, before: str, w: _Witnesses, boundaries, rules: CategoryRules) -> str:
    """SPEC category of one gap, first match wins: sync, data, comm, boundary, else cpu.

    ``periodic`` is not modelled: a report holds at most one checkpoint, which does not recur.
    """
    end = gap_start + length
    if w.sync.covered(gap_start, end) / length >= rules.sync_min_fraction:
        return "sync"
    if w.data.covered(gap_start, end) / length >= rules.data_min_fraction:
        return "data"
    if _is_collective(before, rules):
        return "comm"
    quiet = w.calls.covered(gap_start, end) / length < rules.quiet_max_fraction
    if quiet and any(gap_start <= b <= end for b in boundaries):
        return "boundary"
    return "cpu"


def _size_buckets(lengths: list) -> dict:
    out = {}
    for name, keep in (("le_5ms", lambda x: x <= BUCKET_5MS), ("5_50ms", lambda x: BUCKET_5MS < x <= BUCKET_50MS),
                       ("gt_50ms", lambda x: x > BUCKET_50MS)):
        sel = [x for x in lengths if keep(x)]
        out[f"gaps_{name}"], out[f"gaps_{name}_ns"] = len(sel), sum(sel)
    return out


def _window_truth(r: _RankTimeline, w0: int, w1: int, boundaries, min_gap_ns: int, rules: CategoryRules) -> dict:
    """What the analysis of rank ``r``'s GPU must report for W = [w0, w1).

    ``boundaries``: iteration start times the window rule knows (none for span).
    Returns ``{"expected": fleet-row numbers, "gaps": every per-stream gap above
    ``min_gap_ns`` in W}``. The ``cat_*`` shares and ``device_gap_*`` come from the
    device-level holes above ``min_gap_ns`` (all streams merged, W's edges included);
    each per-stream gap keeps its own category. Raises RuntimeError when a planted gap
    inside W does not come out as planted, a compute-stream gap was not planted, or
    the device holes do not add up to the idle time (generator bugs).
    """
    kernels = [_Op(k.kind, k.stream, max(k.start, w0), min(k.end, w1), k.name, correlation=k.correlation)
               for k in r.ops if k.kind == "kernel" and k.end > w0 and k.start < w1]
    copy_iv = [(op.start, op.end) for op in r.ops if op.kind != "kernel" and op.end > w0 and op.start < w1]
    window = w1 - w0
    busy_union = _Union((k.start, k.end) for k in kernels)
    busy = busy_union.covered(w0, w1)
    copy_runs = [(max(s, w0), min(e, w1)) for s, e in _Union(copy_iv).runs]
    copy_only = sum(e - s - busy_union.covered(s, e) for s, e in copy_runs if e > s)
    found, slivers = _stream_gaps(kernels, min_gap_ns)
    planted = {(g.stream, g.start): g for g in r.gaps if w0 <= g.start and g.end <= w1}
    witnesses = _Witnesses.of(r.calls, copy_iv, rules)
    gaps, copy_overlap = [], 0
    for stream, start, length, before in found:
        category = _categorise(start, length, before, witnesses, boundaries, rules)
        p = planted.pop((stream, start), None)
        if p is not None and (p.length, p.category) != (length, category):
            raise RuntimeError(f"synth: planted {p} came out as a {category} gap of {length} ns")
        if p is None and stream == COMPUTE_STREAM:
            raise RuntimeError(f"synth: rank {r.rank}: unplanned compute-stream gap at {start} ({length} ns)")
        copy_overlap += witnesses.copies.covered(start, start + length)
        gaps.append({"stream_id": stream, "start_ns": start, "length_ns": length, "end_ns": start + length,
                     "category": category, "planted": p is not None, "kind": p.kind if p else "incidental",
                     "kernel_before": before})
    if planted:
        raise RuntimeError(f"synth: rank {r.rank}: planted gaps not found: {list(planted.values())}")
    lengths = [g["length_ns"] for g in gaps]
    holes = [h for h in busy_union.holes(w0, w1) if h <= min_gap_ns]
    idle = window - busy
    # The category shares come from device-level holes (no kernel on any stream), not per-stream gaps.
    device_gaps = _device_gaps(kernels, w0, w1, min_gap_ns)
    cat_ns = dict.fromkeys(FLEET_GAP_CATEGORIES, 0)
    for start, length, before in device_gaps:
        cat_ns[_categorise(start, length, before, witnesses, boundaries, rules)] += length
    device_gap_ns = sum(length for _, length, _ in device_gaps)
    if device_gap_ns + sum(holes) != idle:
        raise RuntimeError(f"synth: rank {r.rank}: device holes ({device_gap_ns} + {sum(holes)} ns) "
                           f"do not add up to the idle time ({idle} ns)")
    expected = {
        "window_start_ns": w0, "window_end_ns": w1, "window_ns": window,
        "kernel_count": len(kernels), "stream_count": len({k.stream for k in kernels}),
        "busy_ns": busy, "idle_ns": idle, "idle_pct": round(100.0 * (idle / window), 4),
        "copy_only_ns": copy_only, "dark_ns": idle - copy_only,
        "gap_count": len(lengths), "gap_total_ns": sum(lengths), "max_gap_ns": max(lengths, default=0),
        **_size_buckets(lengths),
        "sliver_count": len(slivers), "sliver_total_ns": sum(slivers), "copy_overlap_ns": copy_overlap,
        "device_gap_count": len(device_gaps), "device_gap_ns": device_gap_ns,
        "device_sliver_count": len(holes), "device_sliver_ns": sum(holes),
    }
    for cat in FLEET_GAP_CATEGORIES:
        expected[f"cat_{cat}_ns"] = cat_ns[cat]
        expected[f"cat_{cat}_pct"] = round(100.0 * cat_ns[cat] / window, 4)
    return {"expected": expected, "gaps": gaps}


def _stable_run(kinds: list[str]) -> list[int]:
    """Indices of the longest run of consecutive steady iterations (ties: the earliest)."""
    best, run = [], []
    for i, kind in enumerate(kinds):
        run = run + [i] if kind == "steady" else []
        if len(run) > len(best):
            best = run
    return best


def _rank_truth(r: _RankTimeline, min_gap_ns: int, rules: CategoryRules) -> dict:
    """Truth of one rank's GPU for the ``span`` window and, with 3+ stable iterations, the ``nvtx`` window."""
    kernels = [op for op in r.ops if op.kind == "kernel"]
    span = _window_truth(r, min(k.start for k in kernels), max(k.end for k in kernels), (), min_gap_ns, rules)
    windows = {"span": {"rule": "span", "iterations": [], **span}}
    kept = _stable_run([it["kind"] for it in r.iterations])
    if len(kept) >= MIN_STABLE_ITERATIONS:
        its = [r.iterations[i] for i in kept]
        w0, w1 = its[0]["nvtx_start_ns"], its[-1]["nvtx_end_ns"]
        nvtx = _window_truth(r, w0, w1, [it["nvtx_start_ns"] for it in r.iterations], min_gap_ns, rules)
        nvtx["expected"]["iterations"] = len(kept)
        nvtx["expected"]["iteration_mean_ns"] = round(sum(it["nvtx_end_ns"] - it["nvtx_start_ns"] for it in its)
                                                      / len(its))
        windows["nvtx"] = {"rule": "nvtx", "iterations": kept, **nvtx}
    planted = [{"stream_id": g.stream, "start_ns": g.start, "length_ns": g.length, "end_ns": g.end,
                "category": g.category, "kind": g.kind} for g in r.gaps]
    return {"planted": planted, "iterations": r.iterations, "windows": windows}


def truth_path(report_path: str) -> str:
    """Where :func:`generate_training_report` writes the truth of ``report_path``."""
    return str(report_path) + ".truth.json"


def _resolve_options(profile, gpus: int, iterations: int, straggler_rank, checkpoint_iteration,
                     rng: random.Random) -> tuple:
    """Validate the options; resolve ``"auto"`` choices. Returns ``(profile, straggler, checkpoint)``."""
    if isinstance(profile, str):
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r} (known: {', '.join(PROFILES)})")
        profile = PROFILES[profile]
    if gpus < 1 or iterations < 1:
        raise ValueError("gpus and iterations must be at least 1")
    if straggler_rank == "auto":
        straggler_rank = rng.randrange(gpus) if gpus >= 2 else None
    if straggler_rank is not None and not 0 <= straggler_rank < gpus:
        raise ValueError(f"straggler_rank {straggler_rank} is not a rank of {gpus} GPUs")
    if checkpoint_iteration == "auto":
        checkpoint_iteration = (2 * iterations) // 3 if iterations >= 4 else None
    if checkpoint_iteration is not None and not 1 <= checkpoint_iteration < iterations:
        raise ValueError(f"checkpoint_iteration must be in 1..{iterations - 1} (0 is the warm-up)")
    return profile, straggler_rank, checkpoint_iteration


def generate_training_report(path: str, *, gpus: int = 8, iterations: int = 12, seed: int = 0,
                             cluster_model: str = "NVIDIA H100 80GB HBM3", name_gpus: bool = True,
                             profile: str | TrainingProfile = "balanced", straggler_rank: int | str | None = "auto",
                             checkpoint_iteration: int | str | None = "auto", min_gap_ns: int = 1_000_000,
                             labels: dict | None = None) -> dict:
    """Write one synthetic data-parallel training export and its truth (``<path>.truth.json``).

    ``gpus`` processes (one per rank, pid = main thread id, plus a comm thread),
    each driving device 0 of its own GPU: compute stream 7, NCCL stream 23, copy
    stream 16. Iteration 0 is a slow warm-up, ``checkpoint_iteration`` ends with a
    long checkpoint save; the others ("steady") carry the planted forward gaps of
    ``profile`` ("balanced", "data-bound", "comm-heavy" or a :class:`TrainingProfile`).
    ``straggler_rank`` ("auto": drawn from the seed; None: no straggler) gets extra
    cpu gaps. With ``name_gpus`` every GPU gets a TARGET_INFO_GPU row (distinct
    uuid, model ``cluster_model``) and a TARGET_INFO_CUDA_DEVICE mapping; without,
    no GPU tables. Everything is deterministic from ``seed``; times are int ns,
    starting about 10 s into the capture.

    Returns the truth dict (also written as JSON beside the export). Per GPU
    (``gpus[i]``, keyed by ``pid``): every ``planted`` gap (stream, start, length,
    SPEC category, kind), the NVTX ``iterations`` (warmup/steady/checkpoint), and
    per window rule (``windows["span"]``: first kernel start to last kernel end;
    ``windows["nvtx"]``: the longest run of steady iterations, present with 3+)
    the ``expected`` fleet-row numbers for a ``min_gap_ns`` threshold (keys named
    like the fleet columns) and every per-stream ``gaps`` entry above it with its
    category, planted ones marked. Computed from the plan in plain Python.
    """
    rng = random.Random(seed)
    profile, straggler, checkpoint = _resolve_options(profile, gpus, iterations, straggler_rank,
                                                      checkpoint_iteration, rng)
    ranks = _plan_report(profile, gpus, iterations, rng, straggler, checkpoint)
    identities = [_gpu_identity(r.rank, rng) for r in ranks]
    _write_export(path, ranks, identities, cluster_model, name_gpus)
    rules = CategoryRules()
    gpu_truths = []
    for r, (uuid, bus) in zip(ranks, identities):
        gpu_truths.append({
            "rank": r.rank, "pid": r.pid, "device_id": 0,
            "uuid": uuid if name_gpus else "", "bus": bus if name_gpus else "",
            "gpu_model": cluster_model if name_gpus else "", "straggler": r.rank == straggler,
            **_rank_truth(r, min_gap_ns, rules),
        })
    truth = {
        "format": "gpu-idle synth truth v1",
        "report": os.path.basename(path),
        "params": {"gpus": gpus, "iterations": iterations, "seed": seed, "profile": profile.name,
                   "cluster_model": cluster_model, "name_gpus": name_gpus, "straggler_rank": straggler,
                   "checkpoint_iteration": checkpoint, "min_gap_ns": min_gap_ns},
        "labels": dict(labels or {}),
        "straggler_pid": ranks[straggler].pid if straggler is not None else None,
        "gpus": gpu_truths,
    }
    tmp = truth_path(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(truth, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, truth_path(path))
    return truth


#: The built-in example fleet: one job over two 8-GPU nodes (comm-heavy, a straggler on node02),
#: a data-bound 4-GPU fine-tune, a balanced 2-GPU job whose export names no GPU.
EXAMPLE_FLEET = (
    {"file": "llm-pretrain-node01.sqlite", "gpus": 8, "iterations": 10, "seed": 101, "profile": "comm-heavy",
     "straggler_rank": None, "labels": {"cluster": "h100-east", "job": "llm-pretrain", "node": "node01"}},
    {"file": "llm-pretrain-node02.sqlite", "gpus": 8, "iterations": 10, "seed": 102, "profile": "comm-heavy",
     "straggler_rank": 5, "labels": {"cluster": "h100-east", "job": "llm-pretrain", "node": "node02"}},
    {"file": "resnet-finetune.sqlite", "gpus": 4, "iterations": 12, "seed": 201, "profile": "data-bound",
     "cluster_model": "NVIDIA A100-SXM4-80GB", "straggler_rank": None,
     "labels": {"cluster": "a100-west", "job": "resnet-finetune", "node": "node07"}},
    {"file": "recsys-train.sqlite", "gpus": 2, "iterations": 12, "seed": 301, "profile": "balanced",
     "name_gpus": False, "straggler_rank": "auto",
     "labels": {"cluster": "a100-west", "job": "recsys-train", "node": "node11", "gpu_model": "A100"}},
)
EXAMPLE_LABELS_FILE = "labels.yaml"


def make_example_fleet(out_dir: str) -> list[str]:
    """Write the :data:`EXAMPLE_FLEET` reports (+ truths) and a ``labels.yaml`` config into ``out_dir``.

    Deterministic: the same bytes on every call. Returns the report paths in
    fleet order. ``labels.yaml`` (``gpu-idle run DIR --config DIR/labels.yaml``)
    puts both llm-pretrain nodes into one job and names the GPU model of the
    export that has no GPU tables.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths, rules = [], []
    for spec in EXAMPLE_FLEET:
        spec = dict(spec)
        path = os.path.join(out_dir, spec.pop("file"))
        generate_training_report(path, **spec)
        paths.append(path)
        rules.append({"match": f"*{os.path.basename(path)}", **spec["labels"]})
    with open(os.path.join(out_dir, EXAMPLE_LABELS_FILE), "w", encoding="utf-8") as fh:
        fh.write("# Labels of the gpu-idle example fleet (written by pipeline.synth.make_example_fleet).\n")
        yaml.safe_dump({"labels": rules}, fh, sort_keys=False)
    return paths


# ---------------------------------------------------------------------------
# Scaled generator: distributed-training exports of up to millions of kernels.
#
# Everything per kernel is planned with numpy arrays (durations, slivers,
# starts, launch calls), the few per-iteration events (planted gaps and their
# witnesses, NVTX ranges, checkpoint, transfers) in a short loop over
# iterations, and the rows go to SQLite in bulk (constant columns inlined in the
# INSERT, journal and fsync off on a temporary file that is renamed at the end).
# The truth is computed from the plan with plain numpy written here (a sweep-line
# union, prefix-sum coverage, the SPEC rules), never with pipeline.intervals,
# pipeline.gaps or pipeline.attribution.
# ---------------------------------------------------------------------------

SCALED_ITERATION_NS = 180 * MS          #: compute work of one steady iteration (kernels only)
SCALED_KERNELS_PER_ITERATION = 3_000    #: per GPU, when ``iterations`` is not given
SCALED_MIN_ITERATIONS = 10              #: warm-up + 2 periodic events + checkpoint + stable run
SCALED_MIN_COMPUTE_KERNELS = 30         #: compute-stream kernels per iteration at least
SCALED_MIN_KERNEL_NS = 20 * US
SCALED_PERIOD, SCALED_PERIOD_FIRST = 4, 2   #: a periodic pause in iterations 2, 6, 10, ...
SCALED_PLANTS_PER_ITERATION = 3         #: planted sync/data/comm/cpu gaps per steady iteration
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
    pool = [cat for _ in range(len(steady) * SCALED_PLANTS_PER_ITERATION // 4 + 1)
            for cat in ("sync", "data", "comm", "cpu")]
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


# -- scaled truth: plain numpy reference of the SPEC definitions ---------------

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


def _ref_periodic(g0: np.ndarray, x: np.ndarray, eligible: np.ndarray, bounds: np.ndarray,
                  rules: CategoryRules) -> np.ndarray:
    """SPEC ``periodic``: rare very large gaps (events = overlapping candidates) recurring every k >= 2
    iterations (with iteration bounds), or at regular times (without: 3+ events, spacing within 25 %)."""
    mask = np.zeros(x.size, bool)
    if x.size < 2:
        return mask
    cand = np.flatnonzero(eligible & (x >= rules.periodic_min_ns) & (x >= rules.periodic_min_factor * np.median(x)))
    if cand.size < 2:
        return mask
    events, _ = _ref_runs(g0[cand], g0[cand] + x[cand])
    if events.size < 2:
        return mask
    if bounds.size >= 2:
        hit = np.unique(np.searchsorted(bounds, events, side="right"))
        steps = np.diff(hit)
        if steps.size == 0 or hit.size > max(1, bounds.size // 2):
            return mask
        k = float(np.median(steps))
        regular = k >= 2 and bool(np.all(np.abs(steps - k) <= 1))
    else:
        if events.size < 3:
            return mask
        d = np.diff(events).astype(float)
        med = float(np.median(d))
        regular = med > 0 and bool(np.all(np.abs(d - med) <= 0.25 * med))
    mask[cand] = regular
    return mask


def _ref_categories(g0, length, before_collective, witnesses: dict, bounds, rules: CategoryRules) -> np.ndarray:
    """SPEC category of each gap, first match wins: sync, data, comm, boundary, periodic, cpu."""
    g0 = np.asarray(g0, np.int64)
    length = np.asarray(length, np.int64)
    if g0.size == 0:
        return np.zeros(0, object)
    g1 = g0 + length
    frac = {k: _ref_covered(runs, g0, g1) / length for k, runs in witnesses.items()}
    sync = frac["sync"] >= rules.sync_min_fraction
    data = frac["data"] >= rules.data_min_fraction
    comm = np.asarray(before_collective, bool)
    periodic = _ref_periodic(g0, length, ~(sync | data | comm), bounds, rules)
    nxt = np.searchsorted(bounds, g0, side="left")
    at_boundary = (nxt < bounds.size) & (bounds[np.minimum(nxt, max(bounds.size - 1, 0))] <= g1) \
        if bounds.size else np.zeros(g0.size, bool)
    quiet = frac["api"] < rules.quiet_max_fraction
    return np.select([sync, data, comm, at_boundary & quiet & ~periodic, periodic],
                     ["sync", "data", "comm", "boundary", "periodic"], "cpu").astype(object)


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
    g_cat = _ref_categories(g0, g_len, collective[g_before], witnesses, bounds, rules)

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
    d_cat = _ref_categories(d0, d_len, d_coll, witnesses, bounds, rules)
    dsl = hole[~dev]

    cat_ns = {cat: int(d_len[d_cat == cat].sum()) for cat in FLEET_GAP_CATEGORIES}
    dsl_ns = int(dsl.sum())
    launch = bool(idle > 0 and dsl_ns >= analysis.launch_min_share * idle
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
    for cat in ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu"):
        expected[f"cat_{cat}_ns"] = cat_ns[cat]
        expected[f"cat_{cat}_pct"] = round(100.0 * cat_ns[cat] / window, 4)
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


def _ref_nvtx_window(iterations: list, window_rules) -> list:
    """Kept iteration indices of the SPEC nvtx rule: drop warm-up and outliers, keep the longest stable run."""
    lengths = np.array([it["nvtx_end_ns"] - it["nvtx_start_ns"] for it in iterations], np.int64)
    usable = np.ones(lengths.size, bool)
    usable[:window_rules.warmup_iterations] = False
    med = float(np.median(lengths[window_rules.warmup_iterations:]))
    ratio = lengths / med
    usable &= (ratio <= window_rules.outlier_factor) & (ratio >= 1.0 / window_rules.outlier_factor)
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
        if window == "span" and p["kind"] in ("boundary", "periodic"):
            want = None   # no iteration boundaries in span; periodicity is judged on the whole span
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
    by category (SPEC): ``sync`` (a synchronising call spans it), ``data`` (H2D copies
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
    window rule (``span``, and ``nvtx`` = what ``--window auto`` picks), the
    expected fleet-row numbers, every per-stream gap above ``min_gap_ns`` with its
    category, and every device-level gap with its category.
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
    collective = np.array([_is_collective(n, rules) for n in names], bool)
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

    from .config import AnalysisConfig
    from .window import WindowRules
    analysis, window_rules = AnalysisConfig(), WindowRules()
    gpu_truths = []
    for r, (uuid, bus) in zip(ranks, identities):
        k = r.kernels
        span = _ref_window(r, int(k["start"].min()), int(k["end"].max()), np.zeros(0, np.int64), names,
                           collective, min_gap_ns, rules, analysis)
        span["expected"].update(iterations=0, iteration_mean_ns=0)
        kept = _ref_nvtx_window(r.iterations, window_rules)
        if len(kept) < window_rules.min_iterations:
            raise RuntimeError(f"synth: rank {r.rank}: only {len(kept)} stable iterations")
        its = [r.iterations[i] for i in kept]
        bounds = np.array([it["nvtx_start_ns"] for it in r.iterations], np.int64)
        nvtx = _ref_window(r, its[0]["nvtx_start_ns"], its[-1]["nvtx_end_ns"], bounds, names, collective,
                           min_gap_ns, rules, analysis)
        lengths = [it["nvtx_end_ns"] - it["nvtx_start_ns"] for it in its]
        nvtx["expected"].update(iterations=len(kept), iteration_mean_ns=int(round(float(np.mean(lengths)))))
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
    tmp = truth_path(path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(truth, fh, separators=(",", ":"))
        fh.write("\n")
    os.replace(tmp, truth_path(path))
    return truth
