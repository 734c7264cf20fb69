"""The example-fleet generator: small deterministic data-parallel training exports with
planted gaps, and their truth computed with plain Python from the same plan."""
from __future__ import annotations

import bisect
import os
import random
import re
from dataclasses import dataclass, field

import yaml

from ..config import CategoryRules
from ..model import GAP_CATEGORIES
from .kineto import KinetoWriter
from .workload import (ADAM_OPTIMIZER, API_EXPORT_NAMES, BUCKET_5MS, BUCKET_50MS, CAPTURE_START_NS, COMPUTE_STREAM,
    CONVNET_BACKWARD, CONVNET_FORWARD, CONVNET_HEAD, COPY_STREAM, DEVICE_WINDOW_START,
    H2D_BYTES_PER_NS, HGX_BUS_IDS, LAUNCH_CALL_NS, LAUNCH_LEAD_NS, MIN_STABLE_ITERATIONS, MS, NCCL_STREAM,
    NOT_APPLICATION_CAUSES, SLIVER_NS, TRANSFORMER_BACKWARD, TRANSFORMER_FORWARD, TRANSFORMER_HEAD, US,
    WITNESS_MARGIN_NS, is_collective, write_truth)
from .writer import DTOH, HTOD, ExportWriter

# ---------------------------------------------------------------------------
# Example fleet: deterministic data-parallel training exports with planted gaps.
#
# A report is planned first as plain Python objects (one _RankTimeline per
# rank: GPU ops, CPU-side CUDA calls, NVTX ranges, planted gaps), then written
# through ExportWriter, and the "truth" is computed from the same plan with
# plain Python (sweeps and sorted lists, independent of pipeline.analysis.intervals and
# pipeline.analysis.gaps). All times are int ns on the capture clock.
# ---------------------------------------------------------------------------


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
    eligible = [j for j, (name, _, _) in enumerate(seq) if not is_collective(name, rules)]
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
    """The category of one gap (docs/definitions.md#categories), first match wins: data, comm, sync, boundary, else cpu.

    ``periodic`` is not modelled: a report holds at most one checkpoint, which does not recur.
    """
    end = gap_start + length
    if w.data.covered(gap_start, end) / length >= rules.data_min_fraction:
        return "data"
    if is_collective(before, rules):
        return "comm"
    if w.sync.covered(gap_start, end) / length >= rules.sync_min_fraction:
        return "sync"
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
    cat_ns = dict.fromkeys(GAP_CATEGORIES, 0)
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
    for cat in GAP_CATEGORIES:
        expected[f"cat_{cat}_ns"] = cat_ns[cat]
        expected[f"cat_{cat}_pct"] = round(100.0 * cat_ns[cat] / window, 4)
    if any(c.api == "cudaLaunchKernel" and c.op is None for c in r.calls):
        raise RuntimeError(f"synth: rank {r.rank}: a launch without GPU work (the export would lose a record)")
    for cat in NOT_APPLICATION_CAUSES:  # no overhead rows, no lost records: nothing is not the application's
        expected[f"cat_{cat}_ns"], expected[f"cat_{cat}_pct"] = 0, 0.0
    return {"expected": expected, "gaps": gaps}


def _stable_run(kinds: list[str]) -> list[int]:
    """Indices of the longest run of consecutive steady iterations (ties: the earliest)."""
    best, run = [], []
    for i, kind in enumerate(kinds):
        run = run + [i] if kind == "steady" else []
        if len(run) > len(best):
            best = run
    return best


def _gpu_extents(r: _RankTimeline) -> list[tuple[int, int]]:
    """Each NVTX iteration on the GPU timeline: ``(first start, last end)`` of the kernels launched by the
    calls its marking thread (the main thread, tid = pid) made inside the range (start in [range start,
    range end)); plain loops over the plan (every iteration of the plan launches kernels)."""
    out = []
    for it in r.iterations:
        mine = [c.op for c in r.calls if c.tid == r.pid and c.op is not None and c.op.kind == "kernel"
                and it["nvtx_start_ns"] <= c.start < it["nvtx_end_ns"]]
        out.append((min(k.start for k in mine), max(k.end for k in mine)))
    return out


def _rank_truth(r: _RankTimeline, min_gap_ns: int, rules: CategoryRules) -> dict:
    """Truth of one rank's GPU for the ``span`` window and, with 3+ stable iterations, the ``nvtx`` window
    (on the GPU timeline: from the first kept iteration's first kernel to the last one's last kernel; an
    iteration's length runs to the next iteration's first kernel)."""
    kernels = [op for op in r.ops if op.kind == "kernel"]
    span = _window_truth(r, min(k.start for k in kernels), max(k.end for k in kernels), (), min_gap_ns, rules)
    span["expected"]["kept_iterations"] = ""
    windows = {"span": {"rule": "span", "iterations": [], **span}}
    kept = _stable_run([it["kind"] for it in r.iterations])
    if len(kept) >= MIN_STABLE_ITERATIONS:
        extents = _gpu_extents(r)
        lengths = [max(e, extents[i + 1][0] if i + 1 < len(extents) else e) - s for i, (s, e) in enumerate(extents)]
        w0, w1 = min(extents[i][0] for i in kept), max(extents[i][1] for i in kept)
        nvtx = _window_truth(r, w0, w1, [it["nvtx_start_ns"] for it in r.iterations], min_gap_ns, rules)
        nvtx["expected"]["iterations"] = len(kept)
        nvtx["expected"]["iteration_mean_ns"] = round(sum(lengths[i] for i in kept) / len(kept))
        nvtx["expected"]["kept_iterations"] = f"{kept[0]}-{kept[-1]}"
        windows["nvtx"] = {"rule": "nvtx", "iterations": kept, **nvtx}
    planted = [{"stream_id": g.stream, "start_ns": g.start, "length_ns": g.length, "end_ns": g.end,
                "category": g.category, "kind": g.kind} for g in r.gaps]
    return {"planted": planted, "iterations": r.iterations, "windows": windows}


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


def _planned(gpus: int, iterations: int, seed: int, profile, straggler_rank, checkpoint_iteration) -> tuple:
    """``(profile, straggler, checkpoint, ranks, identities)``: the plan of every rank and each GPU's
    (uuid, bus), drawn from ``seed`` in one fixed order (so a report's bytes depend on its options only)."""
    rng = random.Random(seed)
    profile, straggler, checkpoint = _resolve_options(profile, gpus, iterations, straggler_rank,
                                                      checkpoint_iteration, rng)
    ranks = _plan_report(profile, gpus, iterations, rng, straggler, checkpoint)
    identities = [_gpu_identity(r.rank, rng) for r in ranks]
    return profile, straggler, checkpoint, ranks, identities


def _gpu_truth(r: _RankTimeline, identity: tuple, device_id: int, model: str, straggler, min_gap_ns: int,
               rules: CategoryRules) -> dict:
    uuid, bus = identity
    return {"rank": r.rank, "pid": r.pid, "device_id": device_id, "uuid": uuid, "bus": bus, "gpu_model": model,
            "straggler": r.rank == straggler, **_rank_truth(r, min_gap_ns, rules)}


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
    category, kind), the NVTX ``iterations`` (warmup/steady/checkpoint), and
    per window rule (``windows["span"]``: first kernel start to last kernel end;
    ``windows["nvtx"]``: the longest run of steady iterations, present with 3+, on the GPU
    timeline: from the first kernel the first kept iteration launched to the last kernel the
    last one launched)
    the ``expected`` fleet-row numbers for a ``min_gap_ns`` threshold (keys named
    like the fleet columns) and every per-stream ``gaps`` entry above it with its
    category, planted ones marked. Computed from the plan in plain Python.
    """
    profile, straggler, checkpoint, ranks, identities = _planned(gpus, iterations, seed, profile, straggler_rank,
                                                                 checkpoint_iteration)
    _write_export(path, ranks, identities, cluster_model, name_gpus)
    rules = CategoryRules()
    gpu_truths = [_gpu_truth(r, identity if name_gpus else ("", ""), 0, cluster_model if name_gpus else "",
                             straggler, min_gap_ns, rules) for r, identity in zip(ranks, identities)]
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
    write_truth(path, truth)
    return truth


#: ``baseTimeNanoseconds`` of generated PyTorch profiler traces: the traces' times are written relative
#: to it, and it plus ``ts`` is the plan's own clock again (real traces use the Unix epoch).
KINETO_BASE_TIME_NS = 9_000_000_000
#: The NVTX texts of the plan as a PyTorch training loop's ``record_function`` ranges are named.
_ITERATION_TEXT = re.compile(r"Iteration (\d+)")


def _write_kineto(path: str, r: _RankTimeline, world: int, model: str, style: str) -> None:
    """One rank's trace through :class:`~pipeline.synth.kineto.KinetoWriter`: the process drives device
    ``rank`` (its LOCAL_RANK); correlation ids count its own calls in start order, as CUPTI's do."""

    w = KinetoWriter(path, pid=r.pid, devices=[(r.rank, model, 108)] if model else [], rank=r.rank,
                     world_size=world, base_time_ns=KINETO_BASE_TIME_NS, style=style)
    for corr, c in enumerate(sorted(r.calls, key=lambda c: (c.start, c.tid)), start=1):
        w.runtime(c.tid, c.start, c.end, c.api, corr)
        if c.op is not None:
            c.op.correlation = corr
    for op in sorted(r.ops, key=lambda op: (op.start, op.stream)):
        if not op.correlation:
            raise RuntimeError(f"synth: {op.kind} at {op.start} has no launching call")
        if op.kind == "kernel":
            w.kernel(r.rank, op.stream, op.start, op.end, op.name, op.correlation)
        elif op.kind == "memcpy":  # host side pageable, as the plan's copies are (and its Nsight export says)
            w.memcpy(r.rank, op.stream, op.start, op.end, op.copy_kind, op.nbytes, op.correlation)
        else:
            w.memset(r.rank, op.stream, op.start, op.end, op.nbytes, op.correlation)
    for start, end, text, _ in sorted(r.nvtx):
        w.annotation(r.pid, start, end, _ITERATION_TEXT.sub(r"ProfilerStep#\1", text))
    w.close()


def generate_training_traces(folder: str, *, gpus: int = 2, iterations: int = 10, seed: int = 0,
                             cluster_model: str = "NVIDIA A100-SXM4-80GB", profile: str | TrainingProfile = "balanced",
                             straggler_rank: int | str | None = None, checkpoint_iteration: int | str | None = "auto",
                             min_gap_ns: int = 1_000_000, labels: dict | None = None, style: str = "2024",
                             suffix: str = ".pt.trace.json.gz") -> list[str]:
    """The same training job as :func:`generate_training_report`, profiled with the PyTorch profiler:
    one trace per rank, ``<folder>/rank<R><suffix>``, each with its truth beside it.

    Rank R's process drives device R; its trace has ``distributedInfo`` (rank R of ``gpus``),
    ``deviceProperties`` naming ``cluster_model`` (empty: none), times relative to
    :data:`KINETO_BASE_TIME_NS`, the NVTX iterations as ``ProfilerStep#N`` ranges and its CUDA calls as
    ``cuda_runtime`` events (``style``: see :mod:`pipeline.synth.kineto`). Each truth is that of
    :func:`generate_training_report` for the one GPU of its file (``device_id`` R; no uuid or bus: a
    trace names none). Returns the trace paths in rank order.
    """
    profile, straggler, checkpoint, ranks, _ = _planned(gpus, iterations, seed, profile, straggler_rank,
                                                        checkpoint_iteration)
    os.makedirs(folder, exist_ok=True)
    rules = CategoryRules()
    model = cluster_model if style == "2024" else ""
    paths = []
    for r in ranks:
        path = os.path.join(folder, f"rank{r.rank}{suffix}")
        _write_kineto(path, r, gpus, model, style)
        write_truth(path, {
            "format": "gpu-idle synth truth v1",
            "report": os.path.basename(path),
            "params": {"gpus": gpus, "iterations": iterations, "seed": seed, "profile": profile.name,
                       "cluster_model": model, "name_gpus": bool(model), "straggler_rank": straggler,
                       "checkpoint_iteration": checkpoint, "min_gap_ns": min_gap_ns, "trace": "kineto",
                       "style": style, "rank": r.rank},
            "labels": dict(labels or {}),
            "straggler_pid": r.pid if straggler == r.rank else None,
            "gpus": [_gpu_truth(r, ("", ""), r.rank, model, straggler, min_gap_ns, rules)],
        })
        paths.append(path)
    return paths


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
#: The example fleet's job profiled with the PyTorch profiler instead: one trace per rank in its own folder.
EXAMPLE_KINETO_JOB = {"folder": "vit-train-pytorch", "gpus": 2, "iterations": 10, "seed": 401, "profile": "balanced",
                      "cluster_model": "NVIDIA A100-SXM4-80GB", "straggler_rank": None,
                      "labels": {"cluster": "a100-west", "job": "vit-train-pytorch", "node": "node15"}}
EXAMPLE_LABELS_FILE = "labels.yaml"


def make_example_fleet(out_dir: str) -> list[str]:
    """Write the :data:`EXAMPLE_FLEET` reports (+ truths), the :data:`EXAMPLE_KINETO_JOB` traces (one
    folder, one PyTorch profiler trace per rank, + truths) and a ``labels.yaml`` config into ``out_dir``.

    Deterministic: the same bytes on every call. Returns the report paths in
    fleet order (the traces last). ``labels.yaml`` (``gpu-idle run DIR --config DIR/labels.yaml``)
    puts both llm-pretrain nodes into one job, the traces' folder into one job, and names the GPU
    model of the export that has no GPU tables.
    """
    os.makedirs(out_dir, exist_ok=True)
    paths, rules = [], []
    for spec in EXAMPLE_FLEET:
        spec = dict(spec)
        path = os.path.join(out_dir, spec.pop("file"))
        generate_training_report(path, **spec)
        paths.append(path)
        rules.append({"match": f"*{os.path.basename(path)}", **spec["labels"]})
    spec = dict(EXAMPLE_KINETO_JOB)
    folder = spec.pop("folder")
    paths += generate_training_traces(os.path.join(out_dir, folder), **spec)
    rules.append({"match": f"*/{folder}/*", **spec["labels"]})
    with open(os.path.join(out_dir, EXAMPLE_LABELS_FILE), "w", encoding="utf-8") as fh:
        fh.write("# Labels of the gpu-idle example fleet (written by pipeline.synth.make_example_fleet).\n")
        yaml.safe_dump({"labels": rules}, fh, sort_keys=False)
    return paths
