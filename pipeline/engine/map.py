"""The one map: "analyse this report" over every input, on an interchangeable backend.

:func:`map_reports` yields one :class:`~pipeline.engine.tasks.ReportOutcome` per report, as
each finishes, whatever runs the work:

- :class:`InProcess`: this process, for one report with no scheduler configured (no
  cluster to start, no data to move); its GPUs on threads.
- :class:`OnDask`: a ``distributed.Client`` on the embedded LocalCluster or a remote
  scheduler. With at least :data:`REPORTS_PER_THREAD` reports per worker thread, one
  ``report-…`` task per report; with fewer, larger reports, the same work fans out per GPU
  (``load-…`` -> ``gpus-…`` -> one ``analyse-…-<gpu>`` per GPU, the loaded report staying
  on the worker that read it) and the client puts each report's GPUs back together. That
  is a scheduling choice inside this backend; both shapes yield the same outcomes (in the
  fan-out, ``plan-…-<gpu>`` tasks find each GPU's iterations and every ``analyse-…`` task of
  the report waits for all of them, so the report's GPUs agree on the window before analysing).

Every report comes back, never an exception: bad input, and any exception while analysing a
report, is a failure value from the task (:func:`~pipeline.engine.tasks.describe`); a task that
raises all the same (its arguments cannot be unpickled, say) is retried ``dask.retries`` times and
then becomes a failure described the same way; a task
whose worker dies every time it runs (a crash in native code, an out-of-memory kill) is a
failure saying so and after how many attempts; and when no worker is left at all for
``dask.no_workers_timeout_s`` seconds, the reports not done become failures saying that, so
the run ends within a bounded time instead of waiting forever.

This module decides, in one place (:func:`map_reports`), who writes the per-GPU JSON and
stores each report's result: the task that analysed the whole report, when it runs where
the output folder is (this process, a LocalCluster); otherwise the client, as the outcome
arrives (the per-GPU documents then in the reduce).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import threading
import time
from typing import Iterator

from ..config import Config
from ..model import Failure
from .tasks import (ReportOutcome, agreed_task, describe, finish_report, gpu_error, gpu_keys_task, load_task,
    plan_task, report_task)

#: Per-report tasks when there are at least this many reports per worker thread (else per-GPU fan-out).
REPORTS_PER_THREAD = 2


@dataclasses.dataclass(frozen=True)
class Job:
    """One report to analyse: its ``path`` (or URL), its ``labels`` and where its result goes
    (``slot``: anything with ``put(results) -> bool``, or None). ``forced``: the agreement of its
    job's GPUs (``{source: Agreement}``) when the job spans several reports and the report's own
    GPUs alone agreed otherwise (:mod:`pipeline.engine.agreement`); None: its GPUs agree among
    themselves. ``plots``: a plot cache folder where the task that writes the report's per-GPU JSON
    also draws each GPU page's timeline ahead of the report (:func:`~pipeline.engine.tasks.finish_report`;
    the nightly sweep's ``S/cache/plots``), or None."""

    path: str
    labels: dict
    slot: object = None
    forced: dict | None = None
    plots: str | None = None


class InProcess:
    """Run every report in this process, one after another, its GPUs on ``threads`` threads
    (while a new columnar cache entry is written on another: :func:`pipeline.load.cache.wait_for_writes`)."""

    shares_files = True

    def __init__(self, threads: int = 1):
        self.threads = max(1, threads)

    def outcomes(self, jobs: list[Job], cfg: Config, gpu_dir: str | None) -> Iterator[ReportOutcome]:
        """One :class:`ReportOutcome` per job, in order."""
        for job in jobs:
            yield report_task(job.path, job.labels, cfg, gpu_dir, job.slot, self.threads, background_cache=True,
                              forced=job.forced, plots=job.plots)


def _token(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]


def killed_message(path: str, exc: BaseException, what: str = "") -> str:
    """The failure text of a task whose worker died every time it ran it (``distributed.KilledWorker``)."""
    attempts = getattr(exc, "allowed_failures", None)
    tries = f"{attempts + 1} attempts" if isinstance(attempts, int) else "every attempt"
    worker = getattr(getattr(exc, "last_worker", None), "address", None)
    return (f"{path}: {what}the Dask worker died while analysing it ({tries}"
            + (f", last on {worker}" if worker else "") + "): a crash in native code or an out-of-memory kill; "
            "the worker's log says which")


class OnDask:
    """Run the tasks on a ``distributed.Client``.

    Args:
        client: the client (embedded LocalCluster or remote scheduler).
        shares_files: the workers see this machine's files (a LocalCluster): per-report
            tasks then write their per-GPU JSON and store their results themselves.
        no_workers_timeout_s: when the cluster has had no worker at all for this long (s),
            the reports not done become failures (``None``: wait forever).
    """

    def __init__(self, client, shares_files: bool, no_workers_timeout_s: float | None = None):
        self.client = client
        self.shares_files = shares_files
        self.no_workers_timeout_s = no_workers_timeout_s
        self.lost_all_workers = False

    def outcomes(self, jobs: list[Job], cfg: Config, gpu_dir: str | None) -> Iterator[ReportOutcome]:
        """One :class:`ReportOutcome` per job, in the order they finish."""
        threads = sum(self.client.nthreads().values()) or 1
        if len(jobs) >= REPORTS_PER_THREAD * threads:
            yield from self._per_report(jobs, cfg, gpu_dir)
        else:
            yield from self._per_gpu(jobs, cfg)

    def _name(self, job: Job, run: str) -> str:
        return f"{os.path.basename(job.path)}-{_token(job.path)}-{run}"

    def _settle(self, fut, path: str, what: str = "") -> tuple:
        """``(value, None)`` of a done future, or ``(None, failure text)``. A future whose result was
        lost with its worker after it finished is waited for while the scheduler recomputes it."""
        if fut.status not in ("error", "cancelled"):
            try:
                return fut.result(), None
            except Exception:  # noqa: BLE001 - it failed after all: described below
                pass
        return None, self._failure(fut, path, what)

    def _failure(self, fut, path: str, what: str = "") -> str:
        """The failure text of a future that did not finish."""
        if fut.status == "cancelled":
            if self.lost_all_workers:
                return (f"{path}: {what}not analysed: no Dask worker left for {self.no_workers_timeout_s:g} s "
                        "(every worker died or none could start)")
            return f"{path}: {what}task cancelled before it finished (scheduler restarted or client lost)"
        exc = fut.exception()
        from distributed.scheduler import KilledWorker

        if isinstance(exc, KilledWorker):
            return killed_message(path, exc, what)
        return describe(exc, path, what)

    def _per_report(self, jobs: list[Job], cfg: Config, gpu_dir: str | None) -> Iterator[ReportOutcome]:
        from distributed import as_completed

        run = _token(repr(([j.path for j in jobs], os.getpid(), id(cfg), os.urandom(4))))
        by_key = {f"report-{self._name(job, run)}": job for job in jobs}
        write_dir = gpu_dir if self.shares_files else None
        slots = [job.slot if self.shares_files else None for job in jobs]
        futures = self.client.map(report_task, [j.path for j in jobs], [j.labels for j in jobs], [cfg] * len(jobs),
                                  [write_dir] * len(jobs), slots, [1] * len(jobs), [False] * len(jobs),
                                  [j.forced for j in jobs], [j.plots for j in jobs], key=list(by_key), pure=False,
                                  retries=cfg.dask.retries)
        with _Watchdog(self, futures):
            for fut in as_completed(futures):
                job = by_key[fut.key]
                outcome, failure = self._settle(fut, job.path)
                fut.release()
                yield outcome if failure is None else ReportOutcome(path=job.path, failure=Failure(failure))

    def _per_gpu(self, jobs: list[Job], cfg: Config) -> Iterator[ReportOutcome]:
        from distributed import as_completed

        run = _token(repr(([j.path for j in jobs], os.getpid(), id(cfg), os.urandom(4))))
        retries = cfg.dask.retries
        loads, pending, futures = {}, {}, []
        done = as_completed()
        for job in jobs:
            name = self._name(job, run)
            loads[job.path] = self.client.submit(load_task, job.path, cfg, key=f"load-{name}", pure=False,
                                                 retries=retries)
            fut = self.client.submit(gpu_keys_task, loads[job.path], key=f"gpus-{name}", pure=False, retries=retries)
            pending[fut.key] = (job, name, None)
            futures.append(fut)
            done.add(fut)
        collected: dict[str, dict] = {}
        with _Watchdog(self, futures) as watchdog:
            for fut in done:
                job, name, gpu = pending.pop(fut.key)
                if gpu is None:  # the report's GPU keys (or its failure)
                    keys, failure = self._settle(fut, job.path)
                    keys = Failure(failure) if failure is not None else keys
                    if isinstance(keys, Failure):
                        yield ReportOutcome(path=job.path, failure=keys)
                        continue
                    # the report's GPUs agree on their iterations before any is analysed: each analysis
                    # task waits for every plan of its report (small values) and agrees on its own
                    plans = [self.client.submit(plan_task, loads[job.path], key, cfg, key=f"plan-{name}-{key}",
                                                pure=False, retries=retries) for key in keys]
                    for key in keys:
                        task = self.client.submit(agreed_task, loads[job.path], key, cfg, job.labels, list(keys),
                                                  plans, job.forced, key=f"analyse-{name}-{key}", pure=False,
                                                  retries=retries)
                        pending[task.key] = (job, name, key)
                        watchdog.add(task)
                        done.add(task)
                    collected[job.path] = dict.fromkeys(keys)
                    del loads[job.path]  # the analyses hold it now; freed on the worker when they finish
                    continue
                result, failure = self._settle(fut, job.path, f"GPU {gpu}: ")
                if failure is not None:
                    result = gpu_error(job.path, job.labels, gpu, failure)
                fut.release()
                collected[job.path][gpu] = result
                if all(r is not None for r in collected[job.path].values()):
                    results = list(collected.pop(job.path).values())
                    yield ReportOutcome(path=job.path, results=results)


class _Watchdog:
    """While the map runs: when the cluster has had no worker for ``backend.no_workers_timeout_s``
    seconds, cancel every future not done (the map then reports them as not analysed)."""

    POLL_S = 1.0

    def __init__(self, backend: OnDask, futures: list):
        self.backend = backend
        self.futures = list(futures)
        self.stop = threading.Event()
        self.thread = None

    def add(self, future) -> None:
        self.futures.append(future)

    def __enter__(self):
        if self.backend.no_workers_timeout_s is not None:
            self.thread = threading.Thread(target=self._watch, name="gpu-idle-no-workers", daemon=True)
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()

    def _workers(self) -> int | None:
        try:
            return len(self.backend.client.scheduler_info(n_workers=1).get("workers", {}))  # one is enough
        except TypeError:  # older distributed: no n_workers argument
            return len(self.backend.client.scheduler_info().get("workers", {}))
        except Exception:  # noqa: BLE001 - the scheduler itself is unreachable: count as no worker
            return 0

    def _watch(self) -> None:
        since = None
        while not self.stop.wait(self.POLL_S):
            if self._workers():
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= self.backend.no_workers_timeout_s:
                self.backend.lost_all_workers = True
                todo = [f for f in self.futures if not f.done()]
                if todo:
                    self.backend.client.cancel(todo, force=True)
                since = None


def map_reports(jobs: list[Job], cfg: Config, backend, gpu_dir: str | None = None) -> Iterator[ReportOutcome]:
    """Analyse every job on ``backend`` (:class:`InProcess` or :class:`OnDask`): one
    :class:`~pipeline.engine.tasks.ReportOutcome` per job, as each finishes.

    Who writes and stores: when the backend runs where ``gpu_dir`` is (``backend.shares_files``)
    and a report is analysed in one task, that task writes the report's per-GPU JSON into
    ``gpu_dir`` and stores its result in ``job.slot``; otherwise the result is stored here, on
    the client, as the outcome arrives (a run killed half-way keeps what it finished), and the
    per-GPU documents are written by the reduce (:func:`pipeline.engine.outputs.write_outputs`).
    """
    slots = {job.path: job.slot for job in jobs}
    for outcome in backend.outcomes(jobs, cfg, gpu_dir if backend.shares_files else None):
        slot = slots.get(outcome.path)
        if not outcome.stored and outcome.failure is None and slot is not None:
            finish_report(outcome, cfg, None, slot)
        yield outcome


def analyse_reports(paths: list[str], cfg: Config, backend, problems=(), gpu_dir: str | None = None,
                    slots: dict | None = None) -> tuple:
    """:func:`map_reports` over ``paths`` (labels from ``cfg``, ``slots``: path -> result slot),
    then :func:`~pipeline.engine.reduce.reduce_outcomes` with the discovery ``problems``:
    ``(fleet DataFrame, rosters dict)``. The whole engine in one call, for callers that keep no
    result store (tests, notebooks). The reports of a job spread over several reports whose GPUs
    kept other iterations than their job's agreement are analysed again with it forced
    (:func:`~pipeline.engine.agreement.rerun_disagreeing`; not stored)."""
    from .agreement import rerun_disagreeing
    from .reduce import reduce_outcomes

    jobs = [Job(p, cfg.labels_for(p), (slots or {}).get(p)) for p in paths]
    outcomes = list(map_reports(jobs, cfg, backend, gpu_dir))
    outcomes, _ = rerun_disagreeing(outcomes, cfg, lambda again: list(map_reports(again, cfg, backend, gpu_dir)))
    return reduce_outcomes(outcomes, cfg, problems)
