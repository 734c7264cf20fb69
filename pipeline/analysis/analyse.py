"""The per-GPU stage: window -> device idle -> gaps -> attribution -> cost -> one row.

:func:`analyse_gpu` is a plain function of a :class:`~pipeline.model.GpuTrace` and
a :class:`~pipeline.config.Config`; it knows nothing about Dask. Its result
holds the fleet-table row and the roster for the per-GPU JSON.
"""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pandas as pd

from ..config import Config
from ..frames import codes_of, where
from ..model import (CATEGORIES, CAVEATS, GAP_CATEGORIES, MEM_KINDS, GpuResult, GpuTrace, RowWarning, WarningCode,
                     row_status)
from ..schema import (Categories, Collectives, Communication, Confidence, Diagnosis, Gaps, Identity, Idle, Kind, Meter,
                      Status, Window, check_row)
from . import (attribution, caveats, collwait, confidence, cost, diagnosis, fixfirst, gaps, graphcapture, lanes, meter,
               overlap)
from . import intervals as iv
from .iterations import Agreement, IterationPlan, compact_numbers, plan_iterations, plan_window, trim_iterations
from .confidence import KindFigures
from .kind import LABEL_SOURCE, SERVING, UNKNOWN, JobKind, detect_kind, row_kind
from .window import WindowError, span_window, trim_window


#: The columns of a categorised gap a roster entry reads.
_ROSTER_COLUMNS = ("pid", "stream_id", "start", "length", "end", "kernel_before", "kernel_after", "category", "copy_ns",
                   "sync_ns", "attribution")


def _roster_records(categorised: dict, top_n: int, nvtx: pd.DataFrame, copies: pd.DataFrame, calls) -> list[dict]:
    """The per-GPU JSON's roster entries of the ``top_n`` longest of the ``categorised`` gaps (columns:
    name -> array; :func:`pipeline.analysis.gaps.roster_rows`; docs/outputs.md#per-gpu-json); the copies
    overlapping each gap: :func:`pipeline.analysis.attribution.gap_copies`."""
    rows = gaps.roster_rows(categorised, top_n)
    if not rows.size:
        return []
    top = {c: categorised[c][rows] for c in _ROSTER_COLUMNS}
    records = []
    ranges = attribution.enclosing_ranges(nvtx, top["start"])
    waits = attribution.sync_waits(top, copies, calls.sync_runs)
    in_gaps = attribution.gap_copies(top, copies)
    columns = zip(*(top[c].tolist() for c in _ROSTER_COLUMNS))
    for g, nvtx_range, waited, copied in zip(columns, ranges, waits, in_gaps):
        pid, stream_id, start, length, end, before, after, category, copy_ns, sync_ns, apis = g
        records.append({
            "pid": int(pid), "stream_id": int(stream_id), "start_ns": int(start),
            "length_ns": int(length), "end_ns": int(end),
            "kernel_before": str(before), "kernel_after": str(after),
            "category": str(category), "copy_overlap_ns": int(copy_ns),
            "sync_overlap_ns": int(sync_ns), "sync_waited_for": waited,
            "nvtx_range": nvtx_range,
            "attribution": [{"api": name, "overlap_ns": ns} for name, ns in apis],
            **copied,
        })
    return records


#: At most this many busy runs go into a timeline; beyond it the shortest holes are closed.
TIMELINE_MAX_RUNS = 4000


def timeline(kernels, device_gaps, win, runs: tuple | None = None) -> dict:
    """A compact picture of one GPU's window for plots (all times int ns).

    ``busy``: ``[[start, end], ...]`` kernel-union runs inside W (when there are
    more than :data:`TIMELINE_MAX_RUNS`, the shortest holes between runs are
    closed, so the picture keeps every long gap); ``gaps``: ``[[start, end,
    category], ...]`` device-level gaps; ``iterations``: ``[[start, end], ...]``
    from one detected iteration start (``boundaries``: the NVTX ranges' own starts for
    ``nvtx``) to the next, overlapping W; ``iteration_extents``: ``[[number, start, end,
    status], ...]`` every iteration's extent on the GPU timeline (status ``kept`` or why it
    was left out; :mod:`pipeline.analysis.iterations`); ``iteration_lengths``: ``[[number, length],
    ...]`` the same iterations' lengths for the stability test (from the extent's start to the next
    iteration's start, or its own end when later), and ``iteration_length_median_ns``, the median
    length the outlier test compared them with (None without iterations); ``window``: ``[w0, w1]``. ``runs``: the
    kernel union in W (:func:`pipeline.analysis.gaps.busy_runs`) when already computed. ``kernels`` (start, end)
    and ``device_gaps`` (start, end, category) are frames or columns (name -> array).
    """
    w0, w1 = win.start_ns, win.end_ns
    s, e = runs if runs is not None else iv.union(kernels["start"], kernels["end"])
    s, e = iv.cap_runs(s, e, TIMELINE_MAX_RUNS)  # the longest holes stay
    bounds = list(win.boundaries)
    iterations = [[int(a), int(b)] for a, b in zip(bounds, bounds[1:]) if b > w0 and a < w1]
    return {
        "window": [int(w0), int(w1)],
        "busy": np.column_stack((np.asarray(s, dtype=np.int64), np.asarray(e, dtype=np.int64))).tolist(),
        "gaps": [[int(a), int(b), str(c)] for a, b, c in zip(device_gaps["start"].tolist(), device_gaps["end"].tolist(),
                                                              device_gaps["category"].tolist())],
        "iterations": iterations,
        "iteration_extents": [[int(n), int(a), int(b), str(status)] for n, a, b, status in win.extents],
        "iteration_lengths": [[int(x[0]), int(n)] for x, n in zip(win.extents, win.lengths)],
        "iteration_length_median_ns": int(win.length_median_ns) if win.length_median_ns else None,
    }


def _pct(part_ns: int, window_ns: int) -> float:
    """``part_ns`` as % of the window (4 decimals); 0 for an empty window."""
    return round(100.0 * part_ns / window_ns, 4) if window_ns else 0.0


def gpu_collectives(kernels, cfg: Config, world_size: int = 0, aliases: dict | None = None) -> collwait.RankCalls:
    """One GPU's collective kernels, every one of them (not only W's: ``kernels``, a frame or columns with start,
    end, name), as the wait inside collectives matches them across the GPUs of its report
    (:func:`pipeline.analysis.collwait.rank_calls` with the one collective matcher,
    :func:`pipeline.analysis.attribution.collective_mask`, given the report's ``world_size`` and kernel
    ``aliases``; grouped per collective stream by the kernels' ``pid`` and ``stream_id``; docs/definitions.md#collective-wait)."""
    return collwait.rank_calls(kernels["start"], kernels["end"], kernels["name"],
                               attribution.collective_mask(kernels["name"], cfg.categories, world_size, aliases),
                               kernels["pid"], kernels["stream_id"])


def graph_capture(trace: GpuTrace) -> tuple[dict, int | None]:
    """``(ranges, end)``: the graph-capture ranges of the GPU's processes
    (:func:`~pipeline.analysis.graphcapture.ranges`) and the end of its graph-capture start-up
    (:func:`~pipeline.analysis.graphcapture.phase_end` over its kernels' span; None: no capture meets it;
    docs/definitions.md#graph-capture)."""
    found = graphcapture.ranges(trace.runtime)
    k = trace.kernels
    if not found["start"].size or not len(k):
        return found, None
    return found, graphcapture.phase_end(found, int(k["start"].min()), int(k["end"].max()))


def plan_calls(cfg: Config) -> frozenset | None:
    """The CUDA API calls :func:`plan_gpu` reads of a GPU's runtime calls under ``cfg``: under the ``span`` rule
    without ``--trim`` (no iterations: the plan is the job kind) only those that begin or end a graph capture
    (:func:`graph_capture`), so a plan's trace need hold no other; None: every call (iterations may be
    projected through them, :func:`~pipeline.analysis.iterations.project`)."""
    a = cfg.analysis
    return graphcapture.BEGIN_APIS | graphcapture.END_APIS if a.trim_s is None and a.window == "span" else None


def plan_gpu(trace: GpuTrace, cfg: Config) -> IterationPlan:
    """This GPU's iterations before its job's GPUs agree (:func:`~pipeline.analysis.iterations.plan_iterations`
    with the configured rule; iterations over holes where the trace lost records, or over its graph-capture
    start-up (:func:`graph_capture`), are left out), with the
    job kind its own kernel names and NVTX texts show (:func:`~pipeline.analysis.kind.detect_kind`, for
    every rule). A plan without source for the ``span`` rule, which needs no iterations; under ``--trim`` the
    ``auto`` rule's iterations (the trim window counts those inside it, :func:`gpu_window`).
    Raises :class:`~pipeline.analysis.window.WindowError` for an unknown rule."""
    a = cfg.analysis
    k = trace.kernels
    found, after = graph_capture(trace)
    texts = trace.nvtx["text"]  # a range meeting a graph capture of its thread decides no kind
    if found["start"].size:
        texts = texts[graphcapture.outside_capture(trace.nvtx, found)]
    kind, evidence = detect_kind(distinct_values(k["name"]), texts.unique(), cfg.window)
    if plan_calls(cfg) is not None:
        return IterationPlan(kind=kind, kind_evidence=evidence)
    lost_holes = caveats.untraced_spans(k["start"], k["end"], trace.untraced, a.min_gap_ns)
    startup = () if after is None else (np.array([int(k["start"].min())], np.int64), np.array([after], np.int64))
    plan = plan_iterations(k, trace.nvtx, trace.runtime, cfg.window, "auto" if a.window == "span" else a.window,
                           lost_holes, startup)
    return dataclasses.replace(plan, kind=kind, kind_evidence=evidence)


#: ``window_note`` of a serving job's window under ``--window auto`` (docs/definitions.md#job-kind).
SERVING_NOTE = "serving job ({}): the window is the whole capture"
#: ``window_note`` of a ``span`` window that starts after the graph-capture start-up
#: (docs/definitions.md#graph-capture).
AFTER_CAPTURE_NOTE = "the window starts at the first kernel after the last graph capture (start-up left out)"


def gpu_window(trace: GpuTrace, cfg: Config, plan: IterationPlan | None = None, agreement: Agreement | None = None,
               serving: str = ""):
    """The analysis window W of ``trace`` (docs/definitions.md#the-analysis-window): ``--trim``, the ``span`` rule,
    under ``auto`` the whole capture (the span) of a serving job (``serving``: its ``job_kind_source``, ``""``:
    not serving; docs/definitions.md#job-kind), or the iterations of ``plan`` (:func:`plan_gpu` when None) that
    ``agreement`` (the agreement of its job's GPUs on ``plan.source``; None: this GPU alone) keeps. Raises
    :class:`~pipeline.analysis.window.WindowError` when no window can be chosen."""
    a = cfg.analysis
    k = trace.kernels
    if a.trim_s is not None:   # W as given; its stable iterations those of the plan wholly inside it
        plan = plan if plan is not None else plan_gpu(trace, cfg)
        return trim_iterations(trim_window(*a.trim_s), plan, agreement, cfg.window, (trace.report, trace.gpu_key))
    if a.window == "span":
        win = span_window(k["start"], k["end"])
    elif a.window == "auto" and serving:
        win = span_window(k["start"], k["end"], note=SERVING_NOTE.format(serving))
    else:
        plan = plan if plan is not None else plan_gpu(trace, cfg)
        win = plan_window(plan, k, a.window, cfg.window, agreement, (trace.report, trace.gpu_key))
    if win.rule != "span":
        return win
    start = span_window(k["start"], k["end"], after_ns=graph_capture(trace)[1]).start_ns  # after the start-up
    if start == win.start_ns:
        return win
    return dataclasses.replace(win, start_ns=start, note="; ".join(n for n in (win.note, AFTER_CAPTURE_NOTE) if n))


def capture_idle(kernel_starts, kernel_ends, w0: int, w1: int, window_idle_ns: int,
                 after_ns: int | None = None, whole: tuple | None = None) -> tuple[int, int, int]:
    """``(capture_ns, capture_idle_ns, left_out_ns)`` of one GPU (docs/definitions.md#job-kind): its capture
    C = [first kernel start, last kernel end) (the ``span`` rule's window), the device-level idle in C (the
    kernel union's holes, no threshold) and the idle of C outside W = [w0, w1) (``window_idle_ns``: the idle
    in W, used as is when W lies inside C). C starts after the graph-capture start-up ending at ``after_ns``
    (:func:`graph_capture`; None: none), as a ``span`` window does. Kernel arrays: int64 ns; ``whole``: their
    union when already computed (:func:`pipeline.analysis.gaps.busy_runs`). Raises
    :class:`~pipeline.analysis.window.WindowError` when there is no kernel."""
    s = np.asarray(kernel_starts, dtype=np.int64)
    e = np.asarray(kernel_ends, dtype=np.int64)
    capture = span_window(s, e, after_ns=after_ns)  # one definition of the capture: the span rule's window
    c0, c1 = capture.start_ns, capture.end_ns

    def idle(lo: int, hi: int) -> int:
        return (hi - lo) - iv.total_length(*gaps.busy_runs(s, e, lo, hi, whole)) if hi > lo else 0

    whole = window_idle_ns if (w0, w1) == (c0, c1) else idle(c0, c1)
    inside = window_idle_ns if c0 <= w0 and w1 <= c1 else idle(max(w0, c0), min(w1, c1))
    return c1 - c0, whole, whole - inside


#: Memory kinds of unified memory (:data:`pipeline.model.MEM_KINDS`): a copy to or from them is a migration.
MANAGED_KINDS = (MEM_KINDS["MANAGED"], MEM_KINDS["MANAGED_STATIC"])


def copies_outside(copies, w0: int, w1: int, window_ns: int, kernel_count: int) -> tuple[dict, list]:
    """The GPU's copies and memsets outside its window W = [w0, w1) (docs/definitions.md#copies-outside-the-window):
    ``copies_outside_count``, those with any time outside W, and ``copies_outside_ns``, the union of their time
    outside W; and, when that time is longer than W itself (``window_ns``: a capture that is mostly copies the
    window leaves out, e.g. one kernel amid thousands of unified-memory migrations), the coded note that says
    so (:attr:`~pipeline.model.WarningCode.COPIES_OUTSIDE_WINDOW`; ``kernel_count``: the kernels in W).
    ``copies``: the GPU's copies frame (start, end, kind, src_kind, dst_kind)."""
    s, e = copies["start"].to_numpy(np.int64), copies["end"].to_numpy(np.int64)
    out = (s < w0) | (e > w1)
    total = iv.union_length(s[out], e[out])
    outside_ns = total - iv.union_length(*iv.clip(s[out], e[out], w0, w1))
    cols = {"copies_outside_count": int(out.sum()), "copies_outside_ns": int(outside_ns)}
    if outside_ns <= window_ns:
        return cols, []
    memsets = int((copies["kind"].to_numpy(object)[out] == "memset").sum())
    managed = int((np.isin(copies["src_kind"].to_numpy(np.int64)[out], MANAGED_KINDS)
                   | np.isin(copies["dst_kind"].to_numpy(np.int64)[out], MANAGED_KINDS)).sum())
    n = cols["copies_outside_count"]
    what = [f"{n - memsets:,} memcpy", f"{memsets:,} memset"] if memsets else []
    if managed:
        what.append(f"{managed:,} to or from unified (managed) memory")
    return cols, [RowWarning(
        WarningCode.COPIES_OUTSIDE_WINDOW,
        f"mostly copies outside the window: {n:,} cop{'y' if n == 1 else 'ies'}"
        + (f" ({', '.join(what)})" if what else "")
        + f" run {outside_ns / 1e6:,.3f} ms outside the {window_ns / 1e6:,.3f} ms window of "
        f"{kernel_count:,} kernel{'' if kernel_count == 1 else 's'}: the figures are the window's, most of what this "
        "GPU did in the capture is not in them")]


def trim_outside(kernel_starts, kernel_ends, w0: int, w1: int) -> int:
    """ns of the window W = [w0, w1) outside the GPU's kernels: before its first kernel's start and after its last
    kernel's end (docs/definitions.md#the-analysis-window); 0 when W lies within them. Kernel arrays: int64 ns."""
    first, last = int(np.min(kernel_starts)), int(np.max(kernel_ends))
    return max(0, min(w1, first) - w0) + max(0, w1 - max(w0, last))


def cut_to_kernels(win, kernel_starts, kernel_ends):
    """A ``--trim`` window ``win`` cut to the GPU's kernels, [first kernel start, last kernel end)
    (docs/definitions.md#the-analysis-window): the time outside them (:func:`trim_outside`) is not measured, so it is
    no idle, no category and no dollar. ``win`` as it is when it holds no kernel time (the run then says no kernel
    lies inside it)."""
    first, last = int(np.min(kernel_starts)), int(np.max(kernel_ends))
    w0, w1 = max(win.start_ns, first), min(win.end_ns, last)
    return dataclasses.replace(win, start_ns=w0, end_ns=w1) if w1 > w0 else win


#: The end of the ``trim-outside-kernels`` warning (:func:`trim_outside_text`); the console finds the warning by it.
TRIM_CUT_END = "the tier is at most low"


def trim_outside_text(outside_ns: int, trim_ns: int, first_ns: int, last_ns: int, window_ns: int) -> str:
    """The text of the ``trim-outside-kernels`` warning: how much of the ``trim_ns`` long trim lies outside the GPU's
    kernels (``first_ns``..``last_ns``), and the ``window_ns`` W is cut to."""
    return (f"--trim reaches {outside_ns / 1e6:,.3f} of its {trim_ns / 1e6:,.3f} ms outside this GPU's kernels (they "
            f"run {first_ns / 1e9:.6f}..{last_ns / 1e9:.6f} s on the report's clock): that time is not measured idle, "
            f"so W is cut to the kernels ({window_ns / 1e6:,.3f} ms) and it is neither counted, categorised nor "
            f"priced, and {TRIM_CUT_END}")


def startup_wait(first_kernel_ns: int, capture_start_ns: int | None) -> int:
    """``startup_wait_ns`` (docs/definitions.md#job-kind): from the report's capture start (its timeline zero,
    :attr:`pipeline.model.GpuTrace.capture_start_ns`) to this GPU's first kernel start, ns; 0 when the start is
    unknown or not before the kernel."""
    return max(0, int(first_kernel_ns) - int(capture_start_ns)) if capture_start_ns is not None else 0


#: CUDA/HIP calls that allocate device (or pinned host) memory: a process that starts makes one before its first kernel
#: can read anything, so one before the first kernel shows the capture holds the process's start
#: (:func:`startup_cut`).
ALLOCATION_CALL = re.compile(r"^(?:cuda|hip)(?:Malloc|ExtMalloc|HostAlloc)|^cuMem(?:Alloc|Create|HostAlloc)")


def startup_cut(runtime: pd.DataFrame, first_kernel_ns: int) -> bool:
    """``startup_cut`` (docs/definitions.md#job-kind): whether the capture began after the GPU's processes started
    (mid-run), so the wait before the first kernel (``startup_wait_ns``) is not the job's start-up: no runtime call
    of its processes that allocates memory (:data:`ALLOCATION_CALL`) starts before ``first_kernel_ns`` (a PyTorch
    profiler started inside the running process; an export cut to a window of a longer capture). ``runtime``: the
    GPU's processes' calls (start, name)."""
    if runtime is None or not len(runtime):
        return True
    before = runtime["start"].to_numpy(np.int64) < int(first_kernel_ns)
    return not any(ALLOCATION_CALL.match(str(n)) for n in distinct_values(runtime["name"], before))


def distinct_values(column: pd.Series, mask: np.ndarray | None = None) -> list:
    """The distinct values of ``column`` (where ``mask`` holds; None: every row), in no set order; a missing value
    as NaN. A categorical column is read by its codes: each category used once, none turned into text first."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return list(pd.unique(column if mask is None else column[mask]))
    codes = codes_of(column)
    used = np.bincount((codes if mask is None else codes[mask]) + 1, minlength=1)  # -1 (missing) first
    return list(column.cat.categories[np.flatnonzero(used[1:])]) + ([np.nan] if used[0] else [])


def _window_columns(trace: GpuTrace, cfg: Config, kind: str, source: str, win, window_idle_ns: int,
                    k, whole: tuple | None = None) -> tuple[dict, list]:
    """The row's job-kind (``kind``, ``source``: :func:`~pipeline.analysis.kind.row_kind`), capture and
    graph-capture columns (docs/definitions.md#job-kind, docs/definitions.md#graph-capture), the graph-capture
    warnings and the warning of a window that leaves out most of an unknown job's capture idle. ``k``: the
    GPU's kernels; ``window_idle_ns``: the device-level idle in ``win``; ``whole``: the union of the kernels
    (:func:`capture_idle`)."""
    found, after = graph_capture(trace)
    first = int(k["start"].min())
    only = after is not None and not bool((k["start"].to_numpy(np.int64) >= after).any())
    capture_ns, cap_idle, left_out = capture_idle(k["start"], k["end"], win.start_ns, win.end_ns, window_idle_ns,
                                                  after, whole)
    left_pct = _pct(left_out, cap_idle)
    cols = {"job_kind": kind, "job_kind_source": source, "capture_ns": capture_ns, "capture_idle_ns": cap_idle,
            "capture_idle_pct": _pct(cap_idle, capture_ns), "window_left_out_idle_ns": left_out,
            "window_left_out_idle_pct": left_pct,
            "first_kernel_ns": first, "startup_wait_ns": startup_wait(first, trace.capture_start_ns),
            "startup_cut": startup_cut(trace.runtime, first),
            "graph_capture_ns": 0 if after is None else after - first, "startup_only": only}
    warnings = graphcapture.warnings(trace.runtime, found, first, after, only, win.start_ns, win.end_ns)
    if kind == UNKNOWN and left_pct > cfg.window.max_left_out_idle_pct:
        warnings.append(RowWarning(
            WarningCode.WINDOW_LEAVES_OUT_IDLE,
            f"the {win.rule} window leaves out {left_pct:g} % of the capture's idle ({left_out / 1e6:,.3f} of "
            f"{cap_idle / 1e6:,.3f} ms) and the job's kind is unknown: if it serves requests, that idle is its cost "
            f"(label it: labels kind: serving, or training)"))
    return cols, warnings


def analyse_gpu(trace: GpuTrace, cfg: Config, labels: dict, plan: IterationPlan | None = None,
                agreement: Agreement | None = None, job: JobKind | None = None,
                collective: collwait.Matched | None = None) -> GpuResult:
    """:func:`measure_gpu` priced with ``cfg.cost`` at once (:func:`pipeline.analysis.cost.price_rows`; ``labels``
    as given): one GPU's whole fleet row, dollars included, as the reduce makes it. The run stores the price-free
    result and prices it at the reduce (docs/architecture.md#how-a-run-flows)."""
    result = measure_gpu(trace, cfg, labels, plan, agreement, job, collective)
    return dataclasses.replace(result, row=cost.price_rows([result.row], cfg.cost)[0])


def _size_and_total(lengths: np.ndarray, most: int) -> tuple[int, int]:
    """``(how many, their total)`` of the ``lengths`` (int64 ns) no longer than ``most``: the slivers."""
    short = lengths[lengths <= most]
    return int(short.size), int(short.sum())


def measure_gpu(trace: GpuTrace, cfg: Config, labels: dict, plan: IterationPlan | None = None,
                agreement: Agreement | None = None, job: JobKind | None = None,
                collective: collwait.Matched | None = None) -> GpuResult:
    """Compute every price-free per-GPU number of the fleet table (docs/definitions.md): ns, fractions, categories,
    tiers and the GPU's model, never a rate or a dollar; what pricing needs later is in the row too
    (:data:`pipeline.schema.PRICE_INPUTS`, :func:`pipeline.analysis.cost.price_rows`).

    Args:
        trace: one physical GPU's kernels, copies, runtime calls and NVTX.
        cfg: thresholds, category rules and rate card.
        labels: cluster, job, node, rank and optional gpu_model for this report.
        plan: this GPU's iterations (:func:`plan_gpu`; None: computed here).
        agreement: what the GPUs of its job keep for ``plan.source``
            (:func:`pipeline.analysis.iterations.agree`; None: this GPU alone).
        job: the kind its job's GPUs share (:func:`pipeline.analysis.kind.job_kind`; None: this GPU alone);
            a ``kind`` label wins over it (docs/definitions.md#job-kind).
        collective: the collective calls of every GPU of its report matched across them
            (:func:`pipeline.analysis.collwait.match` of :func:`gpu_collectives`; None: this GPU alone, so its
            wait inside collectives abstains; docs/definitions.md#collective-wait).
    Returns:
        :class:`GpuResult` with the row (times in int ns, percentages 0..100,
        money in USD), the top ``roster_size`` gaps and ``plan``.
    Raises:
        pipeline.analysis.window.WindowError: no window can be chosen.
    """
    a = cfg.analysis
    k = trace.kernels
    plan = plan if plan is not None else plan_gpu(trace, cfg)
    kind, kind_source = row_kind(labels.get("kind"), job, plan, (trace.report, trace.gpu_key))
    win = gpu_window(trace, cfg, plan, agreement, (kind_source or LABEL_SOURCE) if kind == SERVING else "")
    trim0, trim1 = win.start_ns, win.end_ns   # the trim as given (before the cut to the kernels)
    outside = trim_outside(k["start"], k["end"], trim0, trim1) if win.rule == "trim" else 0
    if outside:
        win = cut_to_kernels(win, k["start"], k["end"])
    w0, w1 = win.start_ns, win.end_ns
    whole = iv.union(k["start"], k["end"])  # every kernel's: W's runs and the capture's idle are cut out of it
    runs = gaps.busy_runs(k["start"], k["end"], w0, w1, whole)
    dev = gaps.device_idle(k["start"], k["end"], trace.copies["start"], trace.copies["end"], w0, w1, runs)
    kw = gaps.window_columns(k, w0, w1)
    if not kw["start"].size:
        raise WindowError(
            f"no kernel of this GPU inside the {win.rule} window [{w0 / 1e9:.6f}, {w1 / 1e9:.6f}) s; its kernels run "
            f"{int(k['start'].min()) / 1e9:.6f}..{int(k['end'].max()) / 1e9:.6f} s on the report's clock")
    gap_frame, all_lengths = gaps.stream_gap_columns(kw, a.min_gap_ns)
    # What holds a GPU's memory longest is figured first (the steps with the largest temporaries running while the
    # least is held: peak RSS of analysing several GPUs at once): its sub-threshold gaps (sizes, totals), the
    # communication overlap, the page's picture and the window's kind figures (which read the union of every kernel).
    slivers = _size_and_total(all_lengths, a.min_gap_ns)
    del all_lengths
    device_slivers = _size_and_total(gaps.device_holes(k["start"], k["end"], w0, w1, runs), a.min_gap_ns)
    comm = overlap.comm_overlap(kw["start"], kw["end"], overlap.stream_codes(kw["pid"], kw["stream_id"]),
                                attribution.collective_mask(kw["name"], cfg.categories, trace.world_size,
                                                            trace.kernel_aliases), w0, w1)
    picture = lanes.gpu_picture(k, trace.copies, gap_frame, win, trace.capture_start_ns, trace.capture_start_source,
                                whole)
    kind_columns, kind_warnings = _window_columns(trace, cfg, kind, kind_source, win, dev.idle_ns, k, whole)
    del whole
    copies_in = where(trace.copies, (trace.copies["end"].to_numpy(np.int64) > w0)
                      & (trace.copies["start"].to_numpy(np.int64) < w1))
    calls = attribution.index_calls(trace.runtime, copies_in, cfg.categories, trace.overhead, trace.untraced)
    categorised = {**gap_frame, **attribution.categorised_columns(gap_frame, cfg.categories, win.boundaries, calls,
                                                                         trace.world_size, trace.kernel_aliases)}
    # Category shares come from device-level holes (time when no stream runs a kernel), so they
    # add up to at most the device idle and read as % of W; the per-stream roster is for fixing.
    device_gaps = gaps.device_gap_columns(kw, w0, w1, a.min_gap_ns)
    device_categorised = {**device_gaps,
                          **attribution.categorised_columns(device_gaps, cfg.categories, win.boundaries, calls,
                                                             trace.world_size, trace.kernel_aliases)}
    device_lengths = device_categorised["length"]
    device_cats = device_categorised["category"]
    caveat_ns = {cat: int(device_lengths[device_cats == cat].sum()) for cat in CAVEATS}

    lengths = categorised["length"]
    idle_fraction = dev.idle_ns / dev.window_ns if dev.window_ns > 0 else 0.0
    # what the month extrapolates from (docs/definitions.md#confidence-tiers)
    kept_starts, kept_lengths = confidence.kept_iterations(win)
    spread = confidence.spread_pct(kept_lengths)
    idle_low, idle_high, idle_sd = confidence.idle_spread(kept_starts, w1, *runs)
    bursts = confidence.bursts(*runs, cfg.confidence.serving_burst_gap_ns)
    sampled = meter.sampled_periods(*runs, w0, w1, cfg.meter.sample_ns)  # (periods, busy periods)
    model = labels.get("gpu_model") or trace.gpu_model
    warnings = list(trace.warnings)
    warnings += caveats.untraced_warning(trace.untraced, caveat_ns["untraced"])
    warnings += caveats.profiler_warning(device_categorised, trace.overhead, cfg.categories)
    warnings += caveats.graph_warning(k, w0, w1, trace.graph_trace_mode)
    warnings += attribution.one_rank_warning(kw["name"], cfg.categories, trace.world_size, trace.kernel_aliases)
    head = len(warnings)  # the rate's warnings go here when the row is priced (cost.price_rows)
    warnings += kind_warnings
    if kw["start"].size and not np.any(kw["end"] > kw["start"]):
        warnings.append(RowWarning(WarningCode.ZERO_DURATION_KERNELS,
                                   f"all {kw['start'].size:,} kernels in the window last 0 ns: the trace records no "
                                   "kernel time, so the GPU reads 100 % idle; its idle and cost are not measured"))
    outside_columns, outside_warnings = copies_outside(trace.copies, w0, w1, dev.window_ns, int(kw["start"].size))
    warnings += outside_warnings
    if outside:
        warnings.append(RowWarning(WarningCode.TRIM_OUTSIDE_KERNELS, trim_outside_text(
            outside, trim1 - trim0, int(k["start"].min()), int(k["end"].max()), dev.window_ns)))

    # the row is its figure groups (pipeline.schema.ANALYSED_GROUPS), each built here from its analyser's figures
    identity = Identity(
        report=trace.report, cluster=labels.get("cluster", ""), job=labels.get("job", ""),
        node=labels.get("node", ""), rank=labels.get("rank", ""),
        dist_world_size=labels.get("dist_world_size"), dist_backend=labels.get("dist_backend"),
        scheduler_job=labels.get("scheduler_job"), host=labels.get("host"), host_source=labels.get("host_source"),
        gpu_key=trace.gpu_key, pid=int(trace.pids[0]), device_id=int(trace.device_ids[0]),
        pids=",".join(map(str, trace.pids)), device_ids=",".join(map(str, trace.device_ids)), gpu_model=model or "")
    window = Window(
        window_rule=win.rule, untrimmed=win.untrimmed, window_start_ns=w0, window_end_ns=w1, window_ns=dev.window_ns,
        iterations=win.iterations, iteration_mean_ns=win.iteration_mean_ns, iteration_cv=win.iteration_cv,
        excluded_iterations="; ".join(f"{i}: {why}" for i, why in win.excluded),
        kept_iterations=compact_numbers(win.kept), window_note=win.note)
    idle = Idle(
        kernel_count=int(kw["start"].size), stream_count=int(gaps.stream_edges(kw["pid"], kw["stream_id"]).size - 1),
        busy_ns=dev.busy_ns, idle_ns=dev.idle_ns, idle_pct=round(100.0 * idle_fraction, 4),
        copy_only_ns=dev.copy_only_ns, dark_ns=dev.dark_ns, **outside_columns,
        amdahl_speedup=round(cost.amdahl_speedup(idle_fraction), 4))
    metered = Meter(
        busy_pct=_pct(dev.busy_ns, dev.window_ns), sample_periods=sampled[0], sampled_busy_periods=sampled[1],
        # no reading from a window too short for one (the views say "no reading"): empty, as they say
        sampled_util_pct=meter.util_pct(sampled[1], sampled[0]) if meter.enough_periods(sampled[0]) else math.nan)
    device_sliver_ns = device_slivers[1]
    # launch (per GPU): sub-threshold device-level holes make up most of the application's idle
    # (the idle without the profiler's and the untraced time, which are not the application's).
    app_idle_ns = dev.idle_ns - sum(caveat_ns.values())
    launch_bound = bool(app_idle_ns > 0 and device_sliver_ns >= a.launch_min_share * app_idle_ns
                        and 100.0 * device_sliver_ns / dev.window_ns >= a.actionable_pct)
    gapped = Gaps(
        gap_count=int(lengths.size), gap_total_ns=int(lengths.sum()), max_gap_ns=int(lengths.max()) if lengths.size else 0,
        **gaps.buckets(lengths), sliver_count=slivers[0], sliver_total_ns=slivers[1],
        copy_overlap_ns=int(categorised["copy_ns"].sum()) if lengths.size else 0,
        device_gap_count=int(device_lengths.size), device_gap_ns=int(device_lengths.sum()),
        device_sliver_count=device_slivers[0], device_sliver_ns=device_sliver_ns, launch_bound=launch_bound)
    category_ns = {cat: int(device_lengths[device_cats == cat].sum()) for cat in GAP_CATEGORIES}
    category_ns["launch"] = device_sliver_ns if launch_bound else 0
    category_pct = {cat: _pct(category_ns[cat], dev.window_ns) for cat in CATEGORIES}
    ranked = sorted(CATEGORIES, key=lambda c: (-category_ns[c], CATEGORIES.index(c)))
    # the causes that are not the application's (caveats): shown apart, never main_category or actionable
    categories = Categories(
        **{f"cat_{cat}_ns": category_ns[cat] for cat in CATEGORIES}, **{f"cat_{cat}_ns": caveat_ns[cat] for cat in CAVEATS},
        **{f"cat_{cat}_pct": category_pct[cat] for cat in CATEGORIES},
        **{f"cat_{cat}_pct": _pct(caveat_ns[cat], dev.window_ns) for cat in CAVEATS},
        main_category=ranked[0] if category_ns[ranked[0]] > 0 else "",
        actionable=",".join(c for c in ranked if category_pct[c] >= a.actionable_pct))
    # communication overlap (docs/definitions.md#communication-overlap): collective time with / without compute
    # on another stream; busy time, so priced apart from the idle below
    communication = Communication(
        comm_ns=comm.comm_ns, comm_overlapped_ns=comm.overlapped_ns, comm_exposed_ns=comm.exposed_ns,
        comm_pct=_pct(comm.comm_ns, dev.window_ns), comm_overlapped_pct=_pct(comm.overlapped_ns, dev.window_ns),
        comm_exposed_pct=_pct(comm.exposed_ns, dev.window_ns))
    # idle inside collectives (docs/definitions.md#collective-wait): busy time, priced beside the idle, never in it
    if collective is None:  # this GPU alone: no peer in its clock domain
        collective = collwait.match({trace.gpu_key: gpu_collectives(k, cfg, trace.world_size, trace.kernel_aliases)},
                                    trace.world_size)
    nvtx_texts = trace.nvtx["text"].unique()
    collectives = Collectives(**collwait.gpu_columns(collective, trace.gpu_key, w0, w1,
                                                     cfg.collective.chronic_share, nvtx_texts))
    # peers in other reports: its calls (also those outside W) kept for the job's step across files
    # (pipeline.fleet.crosswait)
    own_calls = collective.calls.get(trace.gpu_key)
    calls_doc = (collwait.calls_json(own_calls, trace.world_size, nvtx_texts)
                 if collective.abstained and collective.note.startswith(collwait.SEPARATE_REPORTS)
                 and own_calls is not None and own_calls.starts.size else None)
    kind_figures = KindFigures.of_row({**kind_columns, **idle.columns(), "bursts": bursts})
    confident = Confidence(
        iteration_spread_pct=spread, bursts=bursts, idle_pct_low=idle_low, idle_pct_high=idle_high, idle_pct_sd=idle_sd,
        **fixfirst.gpu_columns(category_ns, dev.window_ns, win.iterations, idle.kernel_count, spread,
                               cfg.confidence, dataclasses.replace(kind_figures, outside_ns=outside), dev.idle_ns))
    diagnosed = Diagnosis(diagnosis=diagnosis.to_text(diagnosis.diagnose(
        device_categorised, kw, copies_in, trace.runtime, trace.nvtx,
        [(int(x[1]), int(x[2])) for x in win.extents if x[3] == "kept"],
        category_pct, a.actionable_pct,
        {"sliver_count": gapped.device_sliver_count, "sliver_ns": device_sliver_ns, "app_idle_ns": app_idle_ns,
         "max_gap_ns": int(device_lengths.max()) if device_lengths.size else 0} if launch_bound else None,
        calls.sync_runs, cfg.diagnosis, {k: getattr(collectives, k) for k in diagnosis.COLLECTIVE_KEYS})))
    # partial: rows the loader dropped or events Nsight Systems lost (model.PARTIAL_CODES).
    status = Status(straggler=False, warnings="; ".join(w.text for w in warnings[:head]),
                    warning_codes=",".join(dict.fromkeys(w.code.value for w in warnings[:head])),  # each once, in order
                    status=row_status(warnings), error="")
    row = {}
    for group in (identity, window, Kind(**kind_columns), idle, metered, gapped, categories, communication, collectives,
                  confident, diagnosed, status):
        row.update(group.columns())
    row.update(_gpu_model=trace.gpu_model or "", _rank=labels.get("_rank", ""), _mig=bool(trace.mig),
               _sms=int(trace.sms or 0), _board_sms=int(trace.board_sms or 0), _model_note=trace.model_note or "",
               _not_nvidia=trace.not_nvidia or "", _warnings_tail="; ".join(w.text for w in warnings[head:]),
               _codes_tail=",".join(dict.fromkeys(w.code.value for w in warnings[head:])))
    check_row(row)  # every key is a declared fleet column (docs/outputs.md#column-reference)
    return GpuResult(row=row, roster=_roster_records(categorised, a.roster_size, trace.nvtx, copies_in, calls),
                     device_roster=_roster_records(device_categorised, a.roster_size, trace.nvtx, copies_in, calls),
                     timeline={**timeline(kw, device_categorised, win, runs), **picture},
                     plan=plan, collective_calls=calls_doc)
