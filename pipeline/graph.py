"""The Dask graph: the only module that imports dask/distributed.

Per report: ``load-<report>`` (read the export once) -> ``gpus-<report>`` (its
GPU keys) -> one ``analyse-<report>-<gpu>`` task per GPU; then one
``fleet-reduce`` task builds the fleet table. Built with futures so that the
per-GPU fan-out is known only once a report is loaded, and the loaded report
stays on the worker that read it.

The task functions are plain functions of plain data; any exception in one
report becomes that report's error row and the sweep goes on.
"""
from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import os
import sys
from dataclasses import dataclass

from .analyse import GpuResult, analyse_gpu
from .cache import load_cached
from .config import CacheConfig, Config, ExportConfig
from .discover import too_big
from .export import export_report
from .fleet import build_fleet, error_row, problem_rows, write_gpu_docs
from .load import ProfileError, Report, gpu_trace
from .results import ResultSlot, rosters_of


@dataclass(frozen=True)
class LoadFailure:
    """A report that could not be exported or loaded; ``message`` names the file and the cause.

    Returned (not raised) by :func:`load_task` for the expected failures (bad
    input), so Dask neither retries them nor logs a traceback; unexpected
    exceptions still raise and become error rows all the same.
    """

    message: str


def _worker_memory_limit() -> int | None:
    """Memory limit (bytes) of the Dask worker running this task, or None (no worker, no limit)."""
    if "distributed" not in sys.modules:
        return None  # not on a Dask worker (the in-process engine): no need to import distributed
    try:
        from distributed import get_worker

        return get_worker().memory_manager.memory_limit or None
    except (ValueError, AttributeError):
        return None


def check_memory(path: str, memory_factor: float, limit: int | None) -> None:
    """Refuse a report whose local file size × ``memory_factor`` exceeds the worker memory ``limit`` (bytes).

    A clear error row beats a worker killed by its nanny in the middle of the
    night. Discovery refuses such a local report before the client reads it when
    ``dask.memory_limit`` is a size; this check covers the limit only a worker knows
    (``auto``, a remote cluster) and staged copies of remote reports. Raises
    :class:`ProfileError` naming the file, the estimate and the limit (:func:`~pipeline.discover.too_big`).
    """
    if not limit or not os.path.isfile(path):
        return
    problem = too_big(path, os.path.getsize(path), memory_factor, limit)
    if problem:
        raise ProfileError(problem)


def load_task(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig,
              memory_factor: float = 1.5, storage_cfg=None, background_cache: bool = False) -> Report | LoadFailure:
    """:func:`load_report_for` that returns a :class:`LoadFailure` instead of raising ProfileError."""
    try:
        return load_report_for(path, export_cfg, cache_cfg, storage_cfg, memory_factor, background_cache)
    except ProfileError as exc:
        return LoadFailure(_describe(exc, path))


def load_report_for(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig, storage_cfg=None,
                    memory_factor: float | None = None, background_cache: bool = False) -> Report:
    """Stage (remote URLs only), check memory, export (``.nsys-rep`` only, cached by content)
    and load one report (from the columnar cache when the same export was loaded before).

    A remote URL (``s3://bucket/key.sqlite``, any fsspec URL) is first copied to the
    worker-local staging cache with ``storage_cfg`` (a :class:`~pipeline.config.StorageConfig`;
    ``None``: defaults), see :mod:`pipeline.storage`. With ``memory_factor``, the local file
    is checked against the worker's memory limit (:func:`check_memory`). With
    ``background_cache``, a new columnar cache entry is written on a thread
    (:func:`pipeline.cache.load_cached`). The report keeps
    the path or URL the user gave. Raises :class:`ProfileError` (or
    :class:`~pipeline.export.ExportError`, :class:`~pipeline.storage.StageError`) naming
    that path and the cause; messages about a staged or exported copy are restated
    about the original, with the copies named in parentheses.
    """
    from .config import StorageConfig
    from .storage import is_remote, stage

    local = path
    if is_remote(path):
        st = storage_cfg or StorageConfig()
        local = stage(path, st.options, st.cache_dir, st.retries, st.backoff_s)  # StageError names the URL
    copies, sqlite_path = [f"staged to {local}"] if local != path else [], None
    try:
        if memory_factor is not None:
            check_memory(local, memory_factor, _worker_memory_limit())
        sqlite_path = export_report(local, export_cfg.nsys, export_cfg.cache_dir, export_cfg.timeout_s)
        if sqlite_path != local:
            copies.append(f"exported to {sqlite_path}")
        report = load_cached(sqlite_path, cache_cfg.dir, cache_cfg.enabled, background_cache)
    except ProfileError as exc:
        if not copies:
            raise
        message = str(exc)
        for prefix in (local, sqlite_path):
            if prefix and message.startswith(prefix):
                message = message[len(prefix):].lstrip(": ")
        raise type(exc)(f"{path}: ({', '.join(copies)}) {message}") from exc
    report.path = path
    return report


def gpu_keys_task(report: Report | LoadFailure) -> list[str] | LoadFailure:
    """The report's GPU keys, never empty: its failure is passed through, and a report in
    which no GPU ran a kernel becomes a failure too (it must get a row, not vanish)."""
    if isinstance(report, LoadFailure):
        return report
    return report.gpu_keys() or LoadFailure(f"{report.path}: no GPU ran a kernel in this export")


def analyse_task(report: Report, gpu_key: str, cfg: Config, labels: dict) -> GpuResult:
    """Analyse one GPU; any failure becomes an error row for that GPU."""
    try:
        return analyse_gpu(gpu_trace(report, gpu_key), cfg, labels)
    except Exception as exc:  # noqa: BLE001 - every failure must become a row, never kill the sweep
        row = error_row(report.path, labels, f"{report.path}: GPU {gpu_key}: {type(exc).__name__}: {exc}")
        row["gpu_key"] = gpu_key
        return GpuResult(row=row)


def reduce_task(results: list[GpuResult], error_rows: list[dict], spread_pct: float):
    """Fleet table and rosters from every per-GPU result and every error row."""
    rows = [r.row for r in results] + list(error_rows)
    return build_fleet(rows, spread_pct), rosters_of(results)


def _token(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def _describe(exc: BaseException, path: str) -> str:
    message = str(exc)
    if isinstance(exc, ProfileError) and message.startswith(path):
        return message
    return f"{path}: {type(exc).__name__}: {message}"


def run_inline(paths: list[str], cfg: Config, problems=(), threads: int = 2, slots: dict | None = None) -> tuple:
    """The same task functions as :func:`run_graph`, called in this process, for a single
    report with no scheduler configured: no cluster to start, no data to move. The GPUs
    are analysed on ``threads`` threads while a new columnar cache entry is written on
    another (:func:`pipeline.cache.wait_for_writes` waits for it). ``slots``: as in
    :func:`run_graph`. Returns ``(fleet DataFrame, rosters dict)``."""
    from concurrent.futures import ThreadPoolExecutor

    error_rows = problem_rows(problems, cfg)
    results = []
    for path in paths:
        report = load_task(path, cfg.export, cfg.cache, cfg.dask.memory_factor, cfg.storage, background_cache=True)
        keys = gpu_keys_task(report)
        if isinstance(keys, LoadFailure):
            error_rows.append(error_row(path, cfg.labels_for(path), keys.message))
            continue
        labels = cfg.labels_for(path)
        with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
            done = list(pool.map(lambda gpu: analyse_task(report, gpu, cfg, labels), keys))
        if slots and path in slots:
            slots[path].put(done)
        results += done
    return reduce_task(results, error_rows, cfg.analysis.straggler_spread_pct)


#: Fleet mode (one task per report) when there are at least this many reports per worker thread.
REPORTS_PER_THREAD = 2


@dataclass
class ReportOutcome:
    """What :func:`report_task` sends back for one report: its per-GPU results, or its failure.

    ``written``: the per-GPU JSON files were written by the worker into the output
    folder; ``results`` then hold each GPU's row and device roster only (the rest is
    in the files) and ``texts`` the :func:`~pipeline.fleet.summary_text` of each
    file's ``_summary`` by GPU key.
    """

    results: list = dataclasses.field(default_factory=list)
    failure: LoadFailure | None = None
    written: bool = False
    texts: dict = dataclasses.field(default_factory=dict)


def report_task(path: str, labels: dict, cfg: Config, gpu_dir: str | None = None,
                slot: ResultSlot | None = None) -> ReportOutcome:
    """Load one report and analyse all its GPUs in one task (fleet mode: many small reports).

    With ``gpu_dir`` (a folder the worker can write, e.g. that of a LocalCluster on
    this machine), each GPU's JSON document is written there by the worker,
    atomically, with the fleet row as ``_summary`` as the report's own rows give it
    (stragglers flagged among the report's GPUs of each job; the client rewrites the
    ``_summary`` of a file whose final fleet row differs), and only the rows and
    device rosters travel back. If writing fails, the full results travel back and
    the client writes them. With ``slot`` (the worker sees its filesystem too), the
    results are stored there (:meth:`~pipeline.results.ResultSlot.put`). Expected
    failures come back as ``failure``.
    """
    report = load_task(path, cfg.export, cfg.cache, cfg.dask.memory_factor, cfg.storage)
    keys = gpu_keys_task(report)
    if isinstance(keys, LoadFailure):
        return ReportOutcome(failure=keys)
    results = [analyse_task(report, gpu, cfg, labels) for gpu in keys]
    del report
    if slot is not None:
        slot.put(results)
    if gpu_dir is None:
        return ReportOutcome(results=results)
    try:
        texts = write_gpu_docs(gpu_dir, build_fleet([r.row for r in results], cfg.analysis.straggler_spread_pct),
                               rosters_of(results))
    except OSError:
        return ReportOutcome(results=results)
    slim = [GpuResult(row=r.row, device_roster=r.device_roster) for r in results]
    return ReportOutcome(results=slim, written=True, texts={gpu: text for (_, gpu), text in texts.items()})


def _roster_entry(result: GpuResult, outcome: ReportOutcome) -> dict:
    gpu = result.row["gpu_key"]
    if outcome.written and gpu in outcome.texts:
        return {"device": result.device_roster, "json": outcome.texts[gpu]}
    return {"streams": result.roster, "device": result.device_roster, "timeline": result.timeline}


def run_graph(client, paths: list[str], cfg: Config, problems=(), on_report=None, gpu_dir: str | None = None,
              slots: dict | None = None) -> tuple:
    """Run the whole graph on ``client``. Returns ``(fleet DataFrame, rosters dict)``.

    Args:
        paths: report paths or URLs (already discovered).
        problems: ``(input, message)`` pairs from discovery, recorded as error rows.
        on_report: optional ``callback(path, results, error_row)`` called on the
            client as soon as one report is finished: ``results`` is its list of
            :class:`GpuResult` (empty when it failed), ``error_row`` the failure's
            row or ``None``. The nightly sweep stores each report's results there,
            so a sweep killed half-way keeps what it finished.
        gpu_dir: fleet mode only: the folder the workers write the per-GPU JSON
            documents into (they must see the same filesystem); the rosters of those
            GPUs are then ``{"device": [...], "json": <summary text>}``, ready for
            :func:`~pipeline.fleet.write_outputs`. Ignored with ``on_report`` (which needs every result).
        slots: optional ``path -> ResultSlot`` (:mod:`pipeline.results`): each finished
            report's results are stored there, by the worker that analysed it when it
            writes into ``gpu_dir`` (same filesystem), else on the client.
    Two shapes: with at least :data:`REPORTS_PER_THREAD` reports per worker thread
    (fleet mode), one ``report-…`` task per report loads and analyses it (few tasks,
    little for the scheduler and the client to do, reports spread over the workers);
    otherwise per report ``load-…`` -> ``gpus-…`` -> one ``analyse-…-<gpu>`` task per
    GPU -> ``fleet-reduce``, so the GPUs of a few big reports spread over the workers.
    Each task is retried ``cfg.dask.retries`` times when it raises (a lost
    worker, an I/O hiccup); bad input is returned as a value and never retried.
    """
    threads = sum(client.nthreads().values()) or 1
    fleet_mode = len(paths) >= REPORTS_PER_THREAD * threads
    if fleet_mode and gpu_dir and not on_report:
        return _run_fleet(client, paths, cfg, problems, None, gpu_dir, slots)  # the workers store
    on_report = _storing(on_report, slots)
    if fleet_mode:
        return _run_fleet(client, paths, cfg, problems, on_report, None)
    return _run_fanout(client, paths, cfg, problems, on_report)


def _storing(on_report, slots: dict | None):
    """``on_report`` that first stores each successful report into its slot (``slots``: path -> ResultSlot)."""
    if not slots:
        return on_report

    def callback(path, results, error):
        if error is None and path in slots:
            slots[path].put(results)
        if on_report:
            on_report(path, results, error)
    return callback


def _run_fleet(client, paths: list[str], cfg: Config, problems, on_report, gpu_dir, slots=None) -> tuple:
    """Fleet mode of :func:`run_graph`: one task per report, the fleet table built on the client."""
    from distributed import as_completed

    error_rows = problem_rows(problems, cfg)
    run = _token(repr((paths, os.getpid(), id(cfg), os.urandom(4))))
    names = {f"report-{os.path.basename(path)}-{_token(path)}-{run}": path for path in paths}
    n = len(paths)
    futures = client.map(report_task, paths, [cfg.labels_for(p) for p in paths], [cfg] * n, [gpu_dir] * n,
                         [(slots or {}).get(p) for p in paths], key=list(names), pure=False,
                         retries=cfg.dask.retries)
    results, rosters = [], {}
    # with_results: results are gathered on the client's event loop, not by one blocking call each
    for fut, outcome in as_completed(futures, with_results=True, raise_errors=False):
        path = names[fut.key]
        message = None
        if fut.status == "cancelled" or not isinstance(outcome, (ReportOutcome, BaseException)):
            message = f"{path}: task cancelled before it finished (scheduler restarted or client lost)"
        elif isinstance(outcome, BaseException):
            message = _describe(outcome, path)
        elif outcome.failure is not None:
            message = outcome.failure.message
        fut.release()
        if message is not None:
            row = error_row(path, cfg.labels_for(path), message)
            error_rows.append(row)
            if on_report:
                on_report(path, [], row)
            continue
        results += outcome.results
        for r in outcome.results:
            rosters[(r.row["report"], r.row["gpu_key"])] = _roster_entry(r, outcome)
        if on_report:
            on_report(path, outcome.results, None)
    return build_fleet([r.row for r in results] + error_rows, cfg.analysis.straggler_spread_pct), rosters


def _run_fanout(client, paths: list[str], cfg: Config, problems=(), on_report=None) -> tuple:
    """Per-GPU mode of :func:`run_graph` (few reports): load -> gpus -> analyse per GPU -> fleet-reduce."""
    error_rows = problem_rows(problems, cfg)
    from distributed import as_completed

    run = _token(repr((paths, os.getpid(), id(cfg), os.urandom(4))))
    retries = cfg.dask.retries
    loads, pending = {}, {}
    done = as_completed()
    for path in paths:
        name = f"{os.path.basename(path)}-{_token(path)}-{run}"
        loads[path] = client.submit(load_task, path, cfg.export, cfg.cache, cfg.dask.memory_factor, cfg.storage,
                                    key=f"load-{name}", pure=False, retries=retries)
        fut = client.submit(gpu_keys_task, loads[path], key=f"gpus-{name}", pure=False, retries=retries)
        pending[fut.key] = ("keys", path, name)
        done.add(fut)
    analyses, collected, expected = [], {}, {}

    def fail(path: str, message: str) -> None:
        row = error_row(path, cfg.labels_for(path), message)
        error_rows.append(row)
        if on_report:
            on_report(path, [], row)

    for fut in done:
        kind, path, name = pending.pop(fut.key)
        if fut.status == "error":
            fail(path, _describe(fut.exception(), path))
            continue
        if fut.status == "cancelled":
            fail(path, f"{path}: task cancelled before it finished (scheduler restarted or client lost)")
            continue
        # "finished", or "lost" with a worker that died after computing it: result() waits while
        # the scheduler computes it again from its recipe.
        if kind == "keys":
            keys = fut.result()
            if isinstance(keys, LoadFailure):
                fail(path, keys.message)
                continue
            labels = cfg.labels_for(path)
            expected[path], collected[path] = len(keys), []
            for gpu in keys:
                job = client.submit(analyse_task, loads[path], gpu, cfg, labels, key=f"analyse-{name}-{gpu}",
                                    pure=False, retries=retries)
                analyses.append(job)
                pending[job.key] = ("analyse", path, name)
                done.add(job)
            del loads[path]  # the analyses hold it now; freed on the worker when they finish
        else:
            collected[path].append(fut.result())
            if len(collected[path]) == expected[path] and on_report:
                on_report(path, collected[path], None)
    reduce = client.submit(reduce_task, analyses, error_rows, cfg.analysis.straggler_spread_pct,
                           key=f"fleet-reduce-{run}", pure=False)
    return reduce.result()


def scheduler_address(cfg: Config, scheduler: str | None = None) -> str | None:
    """The Dask scheduler to use: the argument, else ``dask.scheduler``, else ``DASK_SCHEDULER_ADDRESS``."""
    return scheduler or cfg.dask.scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None


#: Dask settings of the embedded LocalCluster (its workers inherit them when spawned). The
#: defaults suit a long-lived shared cluster watched on a dashboard; a batch run pays for
#: them in CPU taken from the analysis: the statistical profiler walks every worker's stack
#: every 10 ms, the event-loop tick and system monitor wake every process 50 and 2 times a
#: second. On the 200-report benchmark fleet (2 CPUs) they cost ~10 % of the worker CPU and
#: 0.4 s of the client's. With ``dask.dashboard`` set, the profiler stays on.
LOCAL_CLUSTER_SETTINGS = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",
    "distributed.scheduler.work-stealing-interval": "500ms",
}


#: Scheduler options without a dashboard: its HTTP server (health and metrics routes only, no
#: bokeh) on a free local port, not Dask's default 8787, which a second run on the machine
#: would find taken (a warning on stderr).
NO_DASHBOARD = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}


def worker_start_method(wanted: str) -> str:
    """The :mod:`multiprocessing` start method for the LocalCluster's worker processes:
    ``wanted`` (``dask.start_method``), except that ``fork`` is used on Linux only (macOS has
    ``fork`` but its system libraries may crash in a forked child, which is why Python itself
    spawns there) and a method the platform lacks becomes ``spawn``.

    With ``fork`` the workers are copies of this process, taken from the cluster's event-loop
    thread with the pipeline, numpy, pandas and pyarrow already imported: a worker is ready in
    milliseconds, where ``spawn`` re-imports everything (~0.6 s of CPU per worker before its first
    report; on the 200-report benchmark fleet the cluster is up 0.3-0.4 s sooner and closes 0.2 s
    sooner). What the client holds at that moment is safe to copy: no SQLite connection is open
    (reports are loaded only in workers), and pyarrow and fsspec re-create their thread pools and
    event loop in a forked child. A Nanny restarting a dead worker forks again later, from the
    same thread. Caveats of ``fork``, where ``spawn`` is the choice: Dask's
    ``distributed.nanny.pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``, ``OMP_NUM_THREADS=1``, ...)
    takes effect only in a new interpreter, so forked workers keep this process's allocator and
    thread settings; and a worker's RSS, which Dask's memory limit watches, includes the pages it
    shares with the client (:func:`open_client` freezes the client's objects so that the workers'
    garbage collector does not copy them). Python 3.12+ warns on any fork of a process with threads;
    that one warning is filtered out for the rest of this process.
    """
    import multiprocessing
    import warnings

    method = wanted if wanted in multiprocessing.get_all_start_methods() else "spawn"
    if method == "fork" and not sys.platform.startswith("linux"):
        method = "spawn"
    if method == "fork":
        warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)
    return method


@contextlib.contextmanager
def open_client(cfg: Config, scheduler: str | None = None, log=print, n_reports: int | None = None):
    """A client on ``scheduler`` (or ``cfg.dask.scheduler`` / ``DASK_SCHEDULER_ADDRESS``),
    else on a new ``distributed.LocalCluster`` that is closed on exit: worker processes
    for a fleet, or, for a single report, one in-process worker with threads (no
    process pool to start, no data to move between processes). The LocalCluster serves a
    dashboard only when ``cfg.dask.dashboard`` names an address, and runs with
    :data:`LOCAL_CLUSTER_SETTINGS`."""
    from distributed import Client, LocalCluster

    address = scheduler_address(cfg, scheduler)
    if address:
        with Client(address) as client:
            log(f"dask: scheduler {address}, dashboard {client.dashboard_link}")
            yield client
        return
    single = n_reports is not None and n_reports <= 1
    if single:
        options = dict(n_workers=1, threads_per_worker=max(cfg.dask.n_workers * cfg.dask.threads_per_worker, 1),
                       processes=False)
        what = f"in-process LocalCluster ({options['threads_per_worker']} threads, one report)"
    else:
        options = dict(n_workers=cfg.dask.n_workers, threads_per_worker=cfg.dask.threads_per_worker, processes=True)
        what = f"LocalCluster with {cfg.dask.n_workers} worker processes"
    import dask

    settings = dict(LOCAL_CLUSTER_SETTINGS)
    if cfg.dask.dashboard:
        settings.pop("distributed.worker.profile.enabled")  # the dashboard's profile pages need it
    method = None if single else worker_start_method(cfg.dask.start_method)
    if method:
        settings["distributed.worker.multiprocessing-method"] = method
    if method == "fork":
        gc.freeze()  # forked workers share the client's objects: their GC must not touch (copy) them
    try:
        with dask.config.set(settings), \
                LocalCluster(memory_limit=cfg.dask.memory_limit, dashboard_address=cfg.dask.dashboard,
                             scheduler_kwargs=None if cfg.dask.dashboard else NO_DASHBOARD, **options) as cluster, \
                Client(cluster) as client:
            log(f"dask: {what}, " + (f"dashboard {client.dashboard_link}" if cfg.dask.dashboard
                                     else "no dashboard (--dashboard :8787 serves one)"))
            yield client
    finally:
        if method == "fork":
            gc.unfreeze()

