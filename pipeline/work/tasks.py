"""The unit of work of one report: stage, size check, export, load, plan, agree, analyse.

Plain functions of plain data, no scheduler in sight. :class:`ReportWork` is what the engine
maps (:func:`pipeline.engine.map.map_work`, its :class:`~pipeline.engine.map.Work` contract):
``report_task`` (one report: load, plan every GPU's iterations, let the report's GPUs agree
on them, analyse every GPU, then hand the results to the report's :class:`Sinks`) per report;
``load_task`` -> ``gpu_keys_task`` -> ``plan_task`` (per GPU) -> ``agreed_task`` (per GPU, given
every plan of its report) are the same work cut per GPU for the fan-out of a few large reports.
Whatever runs them (this process, a LocalCluster, a remote scheduler), their results are the
same values. Where the outputs go (per-GPU JSON, the result store, page timelines) is not this
module's business: the driver gives each job its sinks (:mod:`pipeline.runs.driver`).

Every failure while analysing a report is returned as a :class:`~pipeline.model.Failure`
value, with a message naming the file and the cause (:func:`describe`): bad input (a
:class:`~pipeline.model.ProfileError`) as the loader states it, and anything else too (an input
the loader did not foresee, running out of memory, nesting too deep) in plain words, so a run
in this process never stops at one report, and Dask neither retries them nor logs a traceback;
a GPU whose analysis raises gets an error row of its own. Only what the engine itself cannot
see coming (a worker that dies) is turned into a failure by the engine (:mod:`pipeline.engine.map`).
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
import threading
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from ..analysis import collwait
from ..analysis.analyse import gpu_collectives, measure_gpu, plan_calls, plan_gpu
from ..analysis.iterations import IterationPlan, agree
from ..analysis.kind import KIND_KEY, job_kind
from ..analysis.window import WindowError
from ..config import CacheConfig, Config, ExportConfig, StorageConfig
from ..inputs.discover import inflated_json_size, too_big
from ..checksums import file_source
from ..inputs.export import export_report
from ..inputs.storage import is_remote, stage
from ..load.cache import load_cached
from ..load.capture import capture_identity
from ..load.host import HOST, HOST_SOURCE
from ..load.kineto import is_kineto_path
from ..load.limits import ReadLimits, cut_text, reading_under
from ..load.report import gpu_kernels, gpu_trace, plan_trace
from ..memory import release as release_memory, reusing_heap
from ..model import Failure, GpuResult, ProfileError, Report, world_size
from ..fleet.reduce import error_row
from ..schema import NOT_ANALYSED
from ..text import printable


@dataclasses.dataclass(frozen=True)
class Sinks:
    """Where one report's outputs go when the task that analysed it makes them (given by the driver;
    picklable: they travel to the worker). Each is None when that output is not made in the task.

    ``store(results) -> bool``: keep the results (True: stored). ``write(results) -> {(report, gpu key):
    (file path, summary text)}``: write the per-GPU JSON. ``draw(file paths)``: draw the page timelines
    of the files just written."""

    store: Callable | None = None
    write: Callable | None = None
    draw: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Job:
    """One report to analyse: its ``path`` (or URL), its ``labels``, ``forced``: the agreement of its
    job's GPUs (``{source: Agreement}``) when the job spans several reports and the report's own GPUs
    alone agreed otherwise (:mod:`pipeline.work.agreement`; None: its GPUs agree among themselves),
    and its ``sinks`` (None: the task makes no output; the client stores and writes). ``gpu_progress``:
    ``callable(total) -> progress`` (``advance(n)``, ``close()``: :class:`pipeline.progress.Progress`) that
    counts the report's GPUs as they are analysed, when it runs in this process (None: not counted); called as
    ``(total, what, doing=, of=)`` it also says when a large file is read and thousands of GPU files written
    (:func:`report_task`)."""

    path: str
    labels: dict
    forced: dict | None = None
    sinks: Sinks | None = None
    gpu_progress: object = None


@dataclasses.dataclass
class ReportOutcome:
    """What one report came to: its per-GPU results, or its failure.

    ``results``: one :class:`~pipeline.model.GpuResult` per GPU (a GPU whose analysis
    failed has an error row). ``written``: the task wrote the per-GPU JSON files itself
    (its :attr:`Sinks.write`); ``results`` then hold each GPU's row and device roster only (the
    rest is in the files) and ``texts`` the :func:`~pipeline.fleet.outputs.summary_text` of each
    file's ``_summary`` by GPU key. ``stored``: the task stored the results itself (its
    :attr:`Sinks.store`).
    """

    path: str
    results: list = dataclasses.field(default_factory=list)
    failure: Failure | None = None
    written: bool = False
    texts: dict = dataclasses.field(default_factory=dict)
    stored: bool = False


def check_memory(path: str, memory_factor: float, limit: int | None) -> None:
    """Refuse a report whose local file size × ``memory_factor`` exceeds the worker memory ``limit`` (bytes);
    for a gzip trace, the size of the JSON it inflates to (from its gzip trailer:
    :func:`~pipeline.inputs.discover.inflated_json_size`).

    A clear error row beats a worker killed by its nanny in the middle of the night.
    Discovery refuses such a local report before the client reads it when the limit is
    known there (the driver's, from ``dask.memory_limit``); this check covers the
    limit only a worker knows (a remote cluster) and staged copies of remote reports.
    Raises :class:`~pipeline.model.ProfileError` naming the file, the estimate and the limit
    (:func:`~pipeline.inputs.discover.too_big`).
    """
    if not limit or not os.path.isfile(path):
        return
    try:
        inflated = inflated_json_size(path)
    except OSError:  # unreadable: the loader says so
        inflated = None
    problem = too_big(path, os.path.getsize(path), memory_factor, limit, inflated)
    if problem:
        raise ProfileError(problem)


#: This package's folder: the frames of a traceback that are gpu-idle's own (:func:`_raised_at`).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _raised_at(exc: BaseException) -> str:
    """`` (raised in pipeline/load/x.py:12, fn)``: the last frame of gpu-idle's own code in ``exc``'s
    traceback (where a developer starts), or ``""`` when it has none."""
    last = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_filename.startswith(_PACKAGE + os.sep):
            last = (frame.f_code.co_filename, line, frame.f_code.co_name)
    if last is None:
        return ""
    return f" (raised in {os.path.relpath(last[0], os.path.dirname(_PACKAGE))}:{last[1]}, {last[2]})"


def _exception_text(exc: BaseException) -> str:
    """``str(exc)`` in plain words: one that only lists the decimal module's signals
    (``[<class 'decimal.InvalidOperation'>]``) says the arithmetic on a number failed, and which signal;
    an empty one is the first line of the exception type's own description; never raises; cut like
    profile text."""
    try:
        text = str(exc).strip()
    except Exception:  # noqa: BLE001 - an exception whose message cannot be made
        text = ""
    if text.startswith("[<class "):  # the decimal module's signals, as it lists them
        signals = ", ".join(re.findall(r"<class '([^']+)'>", text))
        text = f"the arithmetic on a number failed ({signals})"
    elif not text:
        doc = (type(exc).__doc__ or "").strip().splitlines()
        text = doc[0].rstrip(".") if doc else "no message"
    return cut_text(text)


#: Exceptions whose message is the product's own statement of why a report or GPU has no figures
#: (:func:`describe` gives it as it is, never as an unexpected error to report).
STATED = (ProfileError, WindowError)


def describe(exc: BaseException, path: str, what: str = "") -> str:
    """The error text of ``exc`` raised while analysing ``path`` (``what``: the part, e.g. ``"GPU x: "``),
    starting with the path. A :class:`~pipeline.model.ProfileError` (the loader's) or a
    :class:`~pipeline.analysis.window.WindowError` (a window rule that abstains, an empty trim:
    docs/definitions.md#the-analysis-window) is the product's own statement, given as it is; any other exception is said
    in plain words, with its type, its message and where gpu-idle raised it: running out of memory and
    nesting too deep with what to do about them. Never raises."""
    message = _exception_text(exc)
    if isinstance(exc, STATED):
        if message.startswith(f"{path}:"):
            message = message[len(path) + 1:].lstrip()
        return f"{path}: {what}{message}"
    kind = type(exc).__name__
    if isinstance(exc, MemoryError):  # numpy's own (_ArrayMemoryError) says how much it asked for
        return (f"{path}: {what}ran out of memory while analysing it (MemoryError: {message}); it needs more memory "
                "than this process may use: give the workers more (dask.memory_limit) or trim the capture")
    if isinstance(exc, RecursionError):
        return (f"{path}: {what}nested too deeply to analyse (RecursionError: {message}): not a profile as a "
                "profiler writes it")
    return (f"{path}: {what}unexpected {kind} while analysing it: {message}{_raised_at(exc)}; gpu-idle could not "
            "make sense of this report (please report it, with the file)")


def load_report_for(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig, storage_cfg=None,
                    memory_factor: float | None = None, background_cache: bool | threading.Event = False,
                    memory_limit: int | None = None) -> Report:
    """Stage (remote URLs only), check memory, export (``.nsys-rep`` / ``.qdrep`` only, cached by content)
    and load one report (from the columnar cache when the same export was loaded before). A PyTorch
    profiler trace (``.json``, ``.json.gz``, ``.pt.trace.json(.gz)``) is not exported: it is read by
    :func:`pipeline.load.kineto.load_kineto` (and cached the same way).

    A remote URL (``s3://bucket/key.sqlite``, any fsspec URL) is first copied to the
    worker-local staging cache with ``storage_cfg`` (a :class:`~pipeline.config.StorageConfig`;
    ``None``: defaults), see :mod:`pipeline.inputs.storage`. With ``memory_factor``, the local file
    is checked against the memory limit of whoever runs this (:func:`check_memory`; ``memory_limit``,
    bytes: the Dask worker's, or this process's when it runs the work itself; given by the caller), and a gzip trace is
    inflated to at most that limit / ``memory_factor`` bytes whatever its trailer says. Reading is
    bounded by ``export_cfg.read_timeout_s`` (:mod:`pipeline.load.limits`). With
    ``background_cache``, a new columnar cache entry is written on a thread (an ``Event``: once it is set;
    :func:`pipeline.load.cache.load_cached`). The report keeps
    the path or URL the user gave. Raises :class:`~pipeline.model.ProfileError` (or
    :class:`~pipeline.inputs.export.ExportError`, :class:`~pipeline.inputs.storage.StageError`) naming
    that path and the cause; messages about a staged or exported copy are restated
    about the original, with the copies named in parentheses. The report's ``sources`` name the cache
    entries it was read from (the columnar cache entry, the staged copy, the cached export), for its
    stored result to record. With ``cache_cfg.enabled`` false (``--no-cache``) no cache of any kind is
    read or written: the staged copy and the export go to a temporary folder removed before this returns
    (or raises), and messages say so instead of naming them.
    """
    if cache_cfg.enabled:
        return _load_report_for(path, export_cfg, cache_cfg, storage_cfg, memory_factor, background_cache,
                                memory_limit, None)
    # --no-cache: no cache of any kind; a staged copy and an export live in a folder of this call's own
    scratch = tempfile.mkdtemp(prefix="gpu-idle-no-cache-")
    try:
        return _load_report_for(path, export_cfg, cache_cfg, storage_cfg, memory_factor, False, memory_limit,
                                scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _load_report_for(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig, storage_cfg, memory_factor,
                     background_cache: bool | threading.Event, memory_limit, scratch: str | None) -> Report:
    """:func:`load_report_for`; ``scratch``: None (caches on), or the temporary folder that the staged
    copy and the export go to (``--no-cache``: errors then name no copy, which is gone when they are read)."""

    local, cached = path, scratch is None
    if is_remote(path):
        st = storage_cfg or StorageConfig()
        local = stage(path, st.options, scratch or st.cache_dir, st.retries, st.backoff_s,
                      cached)  # StageError names the URL
    temporary = "into a temporary file, since removed"
    copies = [f"staged to {local}" if cached else f"staged {temporary}"] if local != path else []
    sqlite_path = None
    limit = memory_limit
    limits = ReadLimits(export_cfg.read_timeout_s,
                        int(limit / memory_factor) if limit and memory_factor is not None else None)
    try:
        if memory_factor is not None:
            check_memory(local, memory_factor, limit)
        sqlite_path = local if is_kineto_path(local) else export_report(
            local, export_cfg.nsys, scratch or export_cfg.cache_dir, export_cfg.timeout_s, cached)
        if sqlite_path != local:
            copies.append(f"exported to {sqlite_path}" if cached else f"exported with nsys {temporary}")
        with reading_under(limits):
            report = load_cached(sqlite_path, cache_cfg.dir, cache_cfg.enabled, background_cache, cache_cfg.max_bytes)
    except ProfileError as exc:
        if not copies:
            raise
        message = str(exc)
        for prefix in (local, sqlite_path):
            if prefix and message.startswith(prefix):
                message = message[len(prefix):].lstrip(": ")
        raise type(exc)(f"{path}: ({', '.join(copies)}) {message}") from exc
    report.path = path
    if cached:
        copies_used = [copy for copy in dict.fromkeys([local, sqlite_path]) if copy != path]
        report.sources += [src for src in map(file_source, copies_used) if src is not None]
    return report


def load_task(path: str, cfg: Config, background_cache: bool | threading.Event = False,
              memory_limit: int | None = None) -> Report | Failure:
    """:func:`load_report_for` with ``cfg``'s export, cache, storage and memory settings, within
    ``memory_limit`` bytes (None: no limit): the caller's value, the Dask worker's own limit on a worker, or
    in this process the memory a local worker would have (the limit discovery judged the report against);
    any exception comes back as a :class:`~pipeline.model.Failure` (:func:`describe`)."""
    try:
        return load_report_for(path, cfg.export, cfg.cache, cfg.storage, cfg.dask.memory_factor, background_cache,
                               memory_limit)
    except Exception as exc:  # noqa: BLE001 - every failure must become the report's row, never end the run
        return Failure(describe(exc, path))


def gpu_keys_task(report: Report | Failure) -> list[str] | Failure:
    """The report's GPU keys, never empty: its failure is passed through, and a report in
    which no GPU ran a kernel becomes a failure too (it must get a row, not vanish)."""
    if isinstance(report, Failure):
        return report
    return report.gpu_keys() or Failure(f"{report.path}: no GPU ran a kernel in this export")


def gpu_error(path: str, labels: dict, gpu_key: str, message: str) -> GpuResult:
    """The result of one GPU that could not be analysed: its error row (``message`` starts with the path)."""
    row = error_row(path, labels, message)
    row["gpu_key"] = gpu_key
    return GpuResult(row=row)


def trace_labels(report: Report, labels: dict) -> dict:
    """``labels`` with the rank a PyTorch profiler trace names (``distributedInfo.rank``, in
    ``report.meta``) where the labels give none, and its ``distributedInfo`` world size and backend
    (``dist_world_size``, ``dist_backend``: the evidence :func:`pipeline.fleet.grouping.group_jobs`
    groups per-rank traces by) and its own rank apart (``_rank``: the price-free row keeps it, the reduce joins the
    labels of the day, :mod:`pipeline.fleet.pricing`), and an Nsight export's scheduler job (``scheduler_job``,
    ``SLURM_JOB_ID=<id>`` from its capture's environment), and the host either names and where it was read
    (``host``, ``host_source``: :mod:`pipeline.load.host`); other labels and other reports: unchanged."""
    labels = {**labels, **{k: str(report.meta[k]) for k in (HOST, HOST_SOURCE) if report.meta.get(k)}}
    if report.meta.get("format") != "kineto":
        job = report.meta.get("scheduler_job")
        return {**labels, "scheduler_job": str(job)} if job else labels
    rank = report.meta.get("rank")
    out = {**labels, "rank": str(rank)} if rank is not None and not labels.get("rank") else dict(labels)
    out["_rank"] = "" if rank is None else str(rank)  # the trace's own rank: a rank label may come or go
    if report.meta.get("world_size") is not None:
        out["dist_world_size"] = int(report.meta["world_size"])
        out["dist_backend"] = str(report.meta.get("backend") or "")
    return out


def plan_task(report: Report, gpu_key: str, cfg: Config) -> IterationPlan | None:
    """One GPU's iterations before its job's GPUs agree (:func:`~pipeline.analysis.analyse.plan_gpu`);
    None when they cannot be found (the GPU's analysis then says why in its error row)."""
    try:
        return plan_gpu(plan_trace(report, gpu_key, plan_calls(cfg)), cfg)
    except Exception:  # noqa: BLE001 - analyse_task turns the same failure into the GPU's error row
        return None


def report_agreements(path: str, keys: list[str], plans: list, cfg: Config, forced: dict | None = None) -> dict:
    """``{source: Agreement, KIND_KEY: JobKind}`` of a report's GPUs (one job: its GPUs share the report's
    labels) from their ``plans`` (:func:`~pipeline.analysis.iterations.agree`, and the kind they share:
    :func:`~pipeline.analysis.kind.job_kind`), or ``forced``: the agreement of the whole job when it spans
    several reports (:mod:`pipeline.work.agreement`)."""
    if forced is not None:
        return forced
    pairs = [((path, key), plan) for key, plan in zip(keys, plans)]
    return {**agree(pairs, cfg.window), KIND_KEY: job_kind(pairs)}


def report_collectives(report: Report, keys: list[str], cfg: Config) -> collwait.Matched:
    """The collective calls of the report's GPUs ``keys`` matched across them: one report is one clock domain
    (:func:`pipeline.analysis.collwait.match` of each GPU's :func:`~pipeline.analysis.analyse.gpu_collectives`;
    docs/definitions.md#collective-wait)."""
    ws = world_size(report.meta)
    return collwait.match({key: gpu_collectives(gpu_kernels(report, key), cfg, ws, report.kernel_aliases)
                           for key in keys}, ws)


def analyse_task(report: Report, gpu_key: str, cfg: Config, labels: dict, plan: IterationPlan | None = None,
                 agreements: dict | None = None, collective: collwait.Matched | None = None,
                 release: bool = True) -> GpuResult:
    """Analyse one GPU with its ``plan`` under its job's ``agreements`` (``{source: Agreement, KIND_KEY:
    JobKind}``, :func:`report_agreements`; None: the GPU alone) and its report's matched collective calls
    (``collective``, :func:`report_collectives`; None: the GPU alone), labels completed by :func:`trace_labels`; any failure becomes an error row
    for that GPU (which keeps the plan). With ``release``, the memory its analysis freed goes back to the
    system (:func:`pipeline.memory.release`: a GPU analysed as a task of its own); without, it stays for the
    next GPU of the report (:func:`analyse_report`, which hands it back once the report is done). Every row
    carries the report's ``capture_id`` (:func:`~pipeline.load.capture.capture_identity`)."""
    try:
        try:
            agreement = (agreements or {}).get(plan.source) if plan is not None else None
            result = measure_gpu(gpu_trace(report, gpu_key), cfg, trace_labels(report, labels), plan, agreement,
                                 (agreements or {}).get(KIND_KEY), collective)
            result.sources = list(report.sources)
        except Exception as exc:  # noqa: BLE001 - every failure must become a row, never kill the sweep
            result = gpu_error(report.path, labels, gpu_key, describe(exc, report.path, f"GPU {gpu_key}: "))
            result.plan = plan
        try:  # which capture the report holds: a run analyses one file of a capture (docs/inputs.md)
            result.row["capture_id"] = capture_identity(report)
        except Exception:  # noqa: BLE001 - no identity: the report is never taken for another
            result.row["capture_id"] = None
        return result
    finally:
        if release:
            release_memory()


def agreed_task(report: Report, gpu_key: str, cfg: Config, labels: dict, keys: list[str], plans: list,
                forced: dict | None = None) -> GpuResult:
    """:func:`analyse_task` of GPU ``gpu_key`` once the ``plans`` of all the report's GPUs (``keys``,
    same order) are known: the GPUs of the report agree (:func:`report_agreements`) before any of
    them is analysed. The per-GPU fan-out's analysis task; any failure is the GPU's error row."""
    plan = plans[keys.index(gpu_key)]
    try:
        agreements = report_agreements(report.path, keys, plans, cfg, forced)
        collective = report_collectives(report, keys, cfg)
    except Exception as exc:  # noqa: BLE001 - every failure must become a row
        result = gpu_error(report.path, labels, gpu_key, describe(exc, report.path, f"GPU {gpu_key}: "))
        result.plan = plan
        return result
    return analyse_task(report, gpu_key, cfg, labels, plan, agreements, collective)


#: Bytes a GPU's analysis holds at its peak, per kernel of the GPU: 53.7 MiB for a GPU of 375k kernels (a 3M-kernel,
#: 8-GPU report; tracemalloc's peak over :func:`analyse_task`, ~150 bytes a kernel; its plan 24.7 MiB), rounded up.
ANALYSIS_BYTES_PER_KERNEL = 160
#: Bytes a process running gpu-idle holds before it loads a report (the interpreter, numpy, pandas, pyarrow and the
#: pipeline's modules: VmRSS 122 MiB measured), rounded down.
PROCESS_BYTES = 125_000_000


def gpu_threads(report: Report, keys: list[str], threads: int) -> int:
    """How many of the report's GPUs ``keys`` are analysed (and planned) at once: ``threads``, fewer when the
    analyses of that many of its largest GPUs (:data:`ANALYSIS_BYTES_PER_KERNEL` a kernel) would hold more than the
    loaded report's frames do, or than the process holds without a report (:data:`PROCESS_BYTES`) when that is more:
    analysing at once may at most double what the report (or a small report's process) holds. A 3M-kernel, 8-GPU
    report: two GPUs' 120 MB beside its 193 MB; its whole run then peaks at 486-528 MiB, against 480 one at a time."""
    if threads <= 1 or len(keys) <= 1:
        return threads
    groups = report.groups_of("kernels", "gpu_key")
    sizes = sorted((g.stop - g.start if isinstance(g, slice) else len(g) for g in (groups.get(k, ()) for k in keys)),
                   reverse=True)
    held = max(PROCESS_BYTES, sum(int(frame.memory_usage(index=False).sum()) for frame in (
        report.kernels, report.runtime, report.copies, report.nvtx, report.devices, report.overhead, report.untraced)))
    at_once = threads
    while at_once > 1 and ANALYSIS_BYTES_PER_KERNEL * sum(sizes[:at_once]) > held:
        at_once -= 1
    return at_once


def _each(fn, items: list, threads: int, done=None, pool: ThreadPoolExecutor | None = None) -> list:
    """``[fn(item) for item in items]``, on ``threads`` threads when more than one (those of ``pool`` when given, else
    of a pool of its own); ``done(1)`` after each item (None: nothing)."""
    def one(item):
        out = fn(item)
        if done is not None:
            done(1)
        return out

    if threads <= 1 or len(items) <= 1:
        return [one(item) for item in items]
    if pool is not None:
        return list(pool.map(one, items))
    with ThreadPoolExecutor(max_workers=threads) as own:
        return list(own.map(one, items))


def _each_beside(fn, items: list, threads: int, beside, apart: bool, done=None) -> tuple[list, Callable]:
    """``(_each(fn, items, threads, done), result)``: ``result()`` gives what ``beside()`` (a function of no
    argument) returned, or raises what it raised. ``beside`` runs on one of the threads the items run on when more
    than one, on a thread of its own beside the items run one at a time with ``apart``, else after them."""
    pooled = threads > 1 and len(items) > 1
    if not (pooled or apart):
        return _each(fn, items, threads, done), _later(beside)
    with ThreadPoolExecutor(max_workers=threads if pooled else 1) as pool:
        aside = pool.submit(beside)
        return _each(fn, items, threads, done, pool), aside.result


def _later(fn) -> Callable:
    """A function that gives what ``fn()`` returned, called now, or raises what it raised."""
    try:
        value = fn()
    except Exception as exc:  # noqa: BLE001 - raised when the result is asked for, as a thread's would be
        def raised(exc=exc):
            raise exc
        return raised
    return lambda: value


def analyse_report(report: Report, keys: list[str], cfg: Config, labels: dict, threads: int = 1,
                   forced: dict | None = None, gpu_progress=None) -> list[GpuResult]:
    """Every GPU of the report, in ``keys`` order: their plans (:func:`plan_task`), the report's
    agreement (:func:`report_agreements`; ``forced``: the job's) and collective calls (:func:`report_collectives`,
    matched beside the plans: they do not depend on them), then :func:`analyse_task` for each;
    each step on ``threads`` threads when more than one, fewer when the GPUs are large (:func:`gpu_threads`; one at a
    time: the collective calls on a thread beside the plans); the results are the same values, in ``keys`` order, whatever ``threads``:
    each GPU's analysis reads the loaded report and its own plan only). Memory freed while analysing stays for
    the next GPU and goes back to the system once the report is done (:func:`pipeline.memory.reusing_heap`). ``gpu_progress``: ``callable(total) -> progress`` (:class:`Job`):
    each GPU analysed is counted on it, so a report of thousands of GPUs shows how far it is; closed when done.
    A report of at least :data:`MANY_GPUS` GPUs counts their plans first (``making N GPU plans``, with the agreement
    and the collective calls matched across them: a minute or more at 10,000 GPUs)."""
    with reusing_heap():
        return _analyse_report(report, keys, cfg, labels, threads, forced, gpu_progress)


def _analyse_report(report: Report, keys: list[str], cfg: Config, labels: dict, threads: int, forced: dict | None,
                    gpu_progress) -> list[GpuResult]:
    """:func:`analyse_report`."""
    # large GPUs: fewer plans and analyses at once; one at a time, the report's collective calls matched beside the plans
    apart = threads > 1 and len(keys) > 1
    threads = gpu_threads(report, keys, threads)
    planning = (gpu_progress(len(keys), "GPU plans", doing="making")
                if gpu_progress is not None and len(keys) >= MANY_GPUS else None)
    try:
        plans, matched = _each_beside(lambda gpu: plan_task(report, gpu, cfg), keys, threads,
                                      lambda: report_collectives(report, keys, cfg), apart,
                                      planning.advance if planning is not None else None)
        agreements = report_agreements(report.path, keys, plans, cfg, forced)
        collective = matched()
    finally:
        if planning is not None:
            planning.close()
    progress = gpu_progress(len(keys)) if gpu_progress is not None and keys else None
    done = progress.advance if progress is not None else None
    try:
        return _each(lambda kp: analyse_task(report, kp[0], cfg, labels, kp[1], agreements, collective, release=False),
                     list(zip(keys, plans)), threads, done)
    finally:
        if progress is not None:
            progress.close()


#: A report file of at least this many MB (10^6 bytes) read in this process says so on the progress lines
#: (``reading 220 MB of g10000.sqlite``, then ``220/220 MB of g10000.sqlite done in 40.1 s``): a file that large
#: takes a while to read; a smaller one adds no line.
READ_LINE_MB = 100
#: A report of at least this many GPUs analysed in this process counts its GPUs' plans before it analyses them
#: (``making 10000 GPU plans``: their iterations) and its GPU files as it writes them (``writing 10000 GPU files``), and the run's
#: fleet outputs say when they are written (``writing 10000 fleet rows``); fewer take seconds and add no line.
MANY_GPUS = 1000


def _reading(path: str, progress) -> object:
    """The progress of reading the report at ``path`` (``progress``: ``callable(total, what, doing=, of=)``,
    :class:`Job`) when it is a local file of at least :data:`READ_LINE_MB` MB, else None."""
    if progress is None or "://" in path:
        return None
    try:
        mb = -(-os.path.getsize(path) // 1_000_000)   # rounded up
    except OSError:
        return None
    return progress(mb, "MB", doing="reading", of=printable(os.path.basename(path))) if mb >= READ_LINE_MB else None


def finish_report(outcome: ReportOutcome, sinks: Sinks | None, progress=None) -> ReportOutcome:
    """Hand a report's results to its ``sinks``: store them, then write its per-GPU JSON and draw
    their page timelines, each where given. ``progress``: ``callable(total, what, doing=) -> progress``
    (:class:`Job`) that counts the GPU files written when there are at least :data:`MANY_GPUS`.

    If writing fails (for any reason: the result is stored by then, so the report is not a failure),
    the full results stay in the outcome and the client writes them; otherwise only the rows and
    device rosters are kept in the outcome. Drawing ahead only saves the report time: a failure
    there is ignored (the report draws what is missing).
    """
    if outcome.failure is not None or sinks is None:
        return outcome
    if sinks.store is not None:
        outcome.stored = sinks.store(outcome.results) or outcome.stored
    if sinks.write is None:
        return outcome
    files_n = sum(r.row.get("status") not in NOT_ANALYSED for r in outcome.results)
    writing = (progress(files_n, "GPU files", doing="writing")
               if progress is not None and files_n >= MANY_GPUS else None)
    try:
        files = sinks.write(outcome.results, done=writing.advance) if writing else sinks.write(outcome.results)
    except Exception:  # noqa: BLE001 - the result is stored and analysed: the client writes its files instead
        return outcome
    finally:
        if writing is not None:
            writing.close()
    outcome.results = [GpuResult(row=r.row, device_roster=r.device_roster, plan=r.plan, sources=r.sources,
                                 code=r.code, collective_calls=r.collective_calls)
                       for r in outcome.results]
    outcome.written, outcome.texts = True, {gpu: text for (_, gpu), (_, text) in files.items()}
    if sinks.draw is not None:
        try:
            sinks.draw([path for path, _ in files.values()])
        except Exception:  # noqa: BLE001 - drawing ahead only saves the report time: it draws what is missing
            pass
    return outcome


def report_task(path: str, labels: dict, cfg: Config, sinks: Sinks | None = None, threads: int = 1,
                background_cache: bool = False, forced: dict | None = None, gpu_progress=None,
                memory_limit: int | None = None) -> ReportOutcome:
    """Load one report and analyse all its GPUs in one task (:func:`analyse_report`), then hand the
    results to its ``sinks`` (:func:`finish_report`).

    ``threads``: GPUs analysed at once (in this process: one report, several GPUs).
    ``background_cache``: write a new columnar cache entry on a thread (see :func:`load_report_for`), once the
    report is analysed (its outputs made meanwhile).
    ``forced``: the agreement of the report's job when it spans several reports (``{source:
    Agreement}``), instead of the agreement of the report's own GPUs.
    ``gpu_progress``: ``callable(total, what="GPUs", doing=, of=) -> progress`` (:class:`Job`): counts the GPUs
    analysed, and says when a large file is read (:data:`READ_LINE_MB`), and the plans and files of thousands of
    GPUs made (:data:`MANY_GPUS`).
    ``memory_limit``: the memory bound of whoever runs it, bytes (:func:`load_task`).
    Every failure comes back as ``failure`` (:func:`describe`); this never raises.
    """
    # a new columnar cache entry is written once the report is analysed: beside the outputs, not the analysis
    analysed = threading.Event() if background_cache else False
    try:
        return _report_task(path, labels, cfg, sinks, threads, analysed, forced, gpu_progress, memory_limit)
    finally:
        if analysed is not False:
            analysed.set()


def _report_task(path: str, labels: dict, cfg: Config, sinks: Sinks | None, threads: int,
                 analysed: threading.Event | bool, forced: dict | None, gpu_progress,
                 memory_limit: int | None) -> ReportOutcome:
    """:func:`report_task`; ``analysed``: the gate of the columnar cache entry's write (False: none), set here
    once the report is analysed."""
    reading = _reading(path, gpu_progress)
    try:
        report = load_task(path, cfg, analysed, memory_limit)
        if reading is not None and not isinstance(report, Failure):
            reading.advance(reading.total)
    finally:
        if reading is not None:
            reading.close()
    keys = gpu_keys_task(report)
    if isinstance(keys, Failure):
        return ReportOutcome(path=path, failure=keys)
    try:
        results = analyse_report(report, keys, cfg, labels, threads, forced, gpu_progress)
        del report
        if analysed is not False:
            analysed.set()
        return finish_report(ReportOutcome(path=path, results=results), sinks, gpu_progress)
    except Exception as exc:  # noqa: BLE001 - every failure must become the report's row, never end the run
        return ReportOutcome(path=path, failure=Failure(describe(exc, path)))


class ReportWork:
    """The report's unit of work as the engine maps it (:class:`pipeline.engine.map.Work`): whole
    (:func:`report_task`) or cut per GPU (:func:`load_task`, :func:`gpu_keys_task`, :func:`plan_task`,
    :func:`agreed_task`), over :class:`Job` items, under the run's configuration ``cfg``.

    It knows no scheduler: the engine says where a task runs (``on_worker``: on a Dask worker, whose memory
    limit is ``worker_memory`` bytes, None: none); in this process the bound is ``memory_limit``, given by
    the caller (the memory a worker of the local cluster would have)."""

    steps = ("report", "load", "gpus", "plan", "analyse")

    def __init__(self, cfg: Config, memory_limit: int | None = None):
        self.cfg = cfg
        self.memory_limit = memory_limit

    def name(self, job: Job) -> str:
        return job.path

    def whole(self, job: Job, threads: int = 1, on_worker: bool = False,
              worker_memory: int | None = None) -> ReportOutcome:
        """:func:`report_task`; a new columnar cache entry is written on a thread in this process
        (the run waits for it: :func:`pipeline.load.cache.wait_for_writes`), not on a Dask worker."""
        return report_task(job.path, job.labels, self.cfg, job.sinks, threads, background_cache=not on_worker,
                           forced=job.forced, gpu_progress=job.gpu_progress,
                           memory_limit=worker_memory if on_worker else self.memory_limit)

    def failed(self, job: Job, text: str) -> ReportOutcome:
        return ReportOutcome(path=job.path, failure=Failure(text))

    def size(self, job: Job) -> int | None:
        """The report file's size in bytes, for the engine to group small reports into one task; None for a
        remote URL or a file that cannot be looked at (it runs alone, and says why when it is analysed)."""
        if is_remote(job.path):
            return None
        try:
            return os.path.getsize(job.path)
        except OSError:
            return None

    def describe(self, exc: BaseException, name: str, what: str = "") -> str:
        return describe(exc, name, what)

    def open(self, job: Job, on_worker: bool = False, worker_memory: int | None = None) -> Report | Failure:
        return load_task(job.path, self.cfg, memory_limit=worker_memory if on_worker else self.memory_limit)

    def parts(self, report: Report | Failure) -> tuple:
        keys = gpu_keys_task(report)
        return (None, keys.message) if isinstance(keys, Failure) else (keys, None)

    def first(self, report: Report, gpu_key: str) -> IterationPlan | None:
        return plan_task(report, gpu_key, self.cfg)

    def second(self, report: Report, job: Job, gpu_key: str, keys: list, plans: list) -> GpuResult:
        return agreed_task(report, gpu_key, self.cfg, job.labels, keys, plans, job.forced)

    def part_label(self, gpu_key: str) -> str:
        return f"GPU {gpu_key}: "

    def part_failed(self, job: Job, gpu_key: str, text: str) -> GpuResult:
        return gpu_error(job.path, job.labels, gpu_key, text)

    def gather(self, job: Job, results: list) -> ReportOutcome:
        return ReportOutcome(path=job.path, results=results)
