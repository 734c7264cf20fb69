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
import hashlib
import os
from dataclasses import dataclass

from distributed import Client, LocalCluster, as_completed

from .analyse import GpuResult, analyse_gpu
from .cache import load_cached
from .config import CacheConfig, Config, ExportConfig
from .export import export_report
from .fleet import build_fleet, error_row
from .load import ProfileError, Report, gpu_trace


@dataclass(frozen=True)
class LoadFailure:
    """A report that could not be exported or loaded; ``message`` names the file and the cause.

    Returned (not raised) by :func:`load_task` for the expected failures (bad
    input), so Dask neither retries them nor logs a traceback; unexpected
    exceptions still raise and become error rows all the same.
    """

    message: str


def load_task(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig) -> Report | LoadFailure:
    """:func:`load_report_for` that returns a :class:`LoadFailure` instead of raising ProfileError."""
    try:
        return load_report_for(path, export_cfg, cache_cfg)
    except ProfileError as exc:
        return LoadFailure(_describe(exc, path))


def load_report_for(path: str, export_cfg: ExportConfig, cache_cfg: CacheConfig) -> Report:
    """Export (``.nsys-rep`` only, cached by content) and load one report
    (from the columnar cache when the same export was loaded before).

    The report keeps the path the user gave. Raises :class:`ProfileError` (or
    :class:`~pipeline.export.ExportError`) naming that path and the cause.
    """
    sqlite_path = export_report(path, export_cfg.nsys, export_cfg.cache_dir, export_cfg.timeout_s)
    if sqlite_path == path:
        return load_cached(path, cache_cfg.dir, cache_cfg.enabled)
    try:
        report = load_cached(sqlite_path, cache_cfg.dir, cache_cfg.enabled)
    except ProfileError as exc:
        raise ProfileError(f"{path}: (exported to {sqlite_path}) {exc}") from exc
    report.path = path
    return report


def gpu_keys_task(report: Report | LoadFailure) -> list[str] | LoadFailure:
    """The report's GPU keys (or its failure, passed through)."""
    return report if isinstance(report, LoadFailure) else report.gpu_keys()


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
    rosters = {(r.row["report"], r.row["gpu_key"]): {"streams": r.roster, "device": r.device_roster,
                                                    "timeline": r.timeline} for r in results}
    return build_fleet(rows, spread_pct), rosters


def _token(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def _describe(exc: BaseException, path: str) -> str:
    message = str(exc)
    if isinstance(exc, ProfileError) and message.startswith(path):
        return message
    return f"{path}: {type(exc).__name__}: {message}"


def run_graph(client: Client, paths: list[str], cfg: Config, problems=()) -> tuple:
    """Run the whole graph on ``client``. Returns ``(fleet DataFrame, rosters dict)``.

    ``problems``: ``(input, message)`` pairs from discovery, recorded as error rows.
    """
    error_rows = [error_row(item, cfg.labels_for(item), message) for item, message in problems]
    run = _token(repr((paths, os.getpid(), id(cfg), os.urandom(4))))
    loads, keys_futures = {}, {}
    for path in paths:
        name = f"{os.path.basename(path)}-{_token(path)}-{run}"
        loads[path] = client.submit(load_task, path, cfg.export, cfg.cache, key=f"load-{name}", pure=False)
        keys_futures[client.submit(gpu_keys_task, loads[path], key=f"gpus-{name}", pure=False)] = (path, name)
    analyses = []
    for fut in as_completed(list(keys_futures)):
        path, name = keys_futures[fut]
        labels = cfg.labels_for(path)
        if fut.status != "finished":
            error_rows.append(error_row(path, labels, _describe(fut.exception(), path)))
            continue
        keys = fut.result()
        if isinstance(keys, LoadFailure):
            error_rows.append(error_row(path, labels, keys.message))
            continue
        for gpu in keys:
            analyses.append(client.submit(analyse_task, loads[path], gpu, cfg, labels,
                                          key=f"analyse-{name}-{gpu}", pure=False))
        del loads[path]
    reduce = client.submit(reduce_task, analyses, error_rows, cfg.analysis.straggler_spread_pct,
                           key=f"fleet-reduce-{run}", pure=False)
    return reduce.result()


@contextlib.contextmanager
def open_client(cfg: Config, scheduler: str | None = None, log=print, n_reports: int | None = None):
    """A client on ``scheduler`` (or ``cfg.dask.scheduler`` / ``DASK_SCHEDULER_ADDRESS``),
    else on a new ``distributed.LocalCluster`` that is closed on exit: worker processes
    for a fleet, or, for a single report, one in-process worker with threads (no
    process pool to start, no data to move between processes)."""
    address = scheduler or cfg.dask.scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS")
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
    with LocalCluster(memory_limit=cfg.dask.memory_limit, dashboard_address=":0", **options) as cluster, \
            Client(cluster) as client:
        log(f"dask: {what}, dashboard {client.dashboard_link}")
        yield client

