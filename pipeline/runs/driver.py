"""The one driver of a run, shared by ``gpu-idle run`` and ``gpu-idle sweep``:

discover -> identify (content keys) -> reuse stored results -> map the rest -> reduce ->
write -> record.

What differs between the two is where the outputs go and what is kept beside them, an
:class:`OutputFolder`: ``gpu-idle run`` writes one folder (:class:`RunFolder`, this
module); the sweep writes a night into its state folder and keeps its history
(:class:`pipeline.runs.sweep.NightFolder`). Everything else, including which reports are
analysed, which are reused, how failures become rows and who stores what, is here once.
"""
from __future__ import annotations

import dataclasses
import os

import pandas as pd

from ..config import Config
from ..engine.agreement import entries_of, forced_agreements
from ..engine.cluster import EngineError, local_worker_memory, open_client, scheduler_address
from ..engine.map import InProcess, Job, OnDask, map_reports
from ..engine.outputs import PAGES_DIR, write_outputs
from ..engine.reduce import reduce_outcomes
from ..engine.tasks import ReportOutcome
from ..inputs.discover import discover
from ..io import prune, remove_if_empty, remove_leftovers, write_json
from ..load.cache import wait_for_writes
from ..model import Failure
from .results import MANIFEST, ResultCache, drop_manifest, folder_files, read_manifest


@dataclasses.dataclass
class RunResult:
    """What one run did.

    ``fleet``: the fleet table (every discovered report: reused results, new results and
    error rows). ``reports``: inputs discovered (reports and input problems); ``todo``:
    reports analysed now (failed or not); ``reused``: reports whose stored result was used; ``failed``: ``(report, error)`` of every report with an error row;
    ``kept``: the output folder was already up to date and nothing was written;
    ``engine_problem``: why reports could not be analysed at all (no cluster, no worker
    left), else ``None``; ``wrote``: what the folder wrote, for people; ``skipped``: ``(path, why)``
    of the JSON files a folder search passed over as not traces
    (:func:`~pipeline.inputs.discover.discover`, said by :func:`~pipeline.inputs.discover.skipped_note`).
    """

    fleet: pd.DataFrame
    out_dir: str
    reports: int = 0
    todo: list = dataclasses.field(default_factory=list)
    reused: int = 0
    failed: list = dataclasses.field(default_factory=list)
    kept: bool = False
    engine_problem: str | None = None
    wrote: str = ""
    skipped: list = dataclasses.field(default_factory=list)


class OutputError(Exception):
    """The output folder cannot be written; the message names it and the cause."""


class OutputFolder:
    """Where a run's outputs go, and what is kept beside them (see :class:`RunFolder`).

    ``out_dir``: the folder of fleet tables, ``gpus/`` and ``records/``. Subclasses say what
    to print when the inputs are known, how to reuse an earlier identical folder, and what
    to write besides the run's documents. ``plots``: the plot cache of the report written with
    the folder, where the tasks draw the GPU pages' timelines ahead (None: no report, nothing drawn).
    """

    out_dir: str
    plots: str | None = None

    def prepare(self) -> None:
        """Check that the folder can be written and remove the temporary files a killed run left
        in it, before any analysis. Raises :class:`OutputError` naming the folder and the cause."""
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            probe = os.path.join(self.out_dir, f".write-probe.{os.getpid()}.tmp")
            with open(probe, "w", encoding="utf-8"):
                pass
            os.unlink(probe)
            remove_leftovers(self.out_dir)
        except OSError as exc:
            raise OutputError(f"{self.out_dir}: cannot write here ({exc.strerror or exc})") from exc

    def on_found(self, paths: list[str], problems: list) -> None:
        """Called once the inputs are discovered."""

    def on_plan(self, paths: list[str], todo: list[str], reused: int) -> None:
        """Called once it is known which reports are analysed and which are reused."""

    def reuse(self, digest: str) -> pd.DataFrame | None:
        """The fleet table of an earlier folder made of exactly ``digest``
        (:func:`~pipeline.runs.results.inputs_digest`), made this run's outputs; None when there is none."""
        return None

    def write(self, fleet: pd.DataFrame, rosters: dict, cfg: Config, digest: str | None) -> str:
        """Write the run's documents (and, with ``digest``, the manifest that lets a later
        identical run keep them). Returns what was written, for people."""
        raise NotImplementedError


def write_documents(out_dir: str, fleet: pd.DataFrame, rosters: dict, cfg: Config) -> tuple[dict, list[str]]:
    """The run's documents in ``out_dir``: fleet tables, rollups, ``gpus/`` and ``records/``
    (:func:`~pipeline.engine.outputs.write_outputs`, :func:`~pipeline.report.medical.write_records`),
    nothing else: per-GPU files and records of an earlier run with other inputs are removed
    (their paths under ``"stale"``). Returns ``(written paths by name, record paths)``."""
    from ..report.medical import write_records

    written = write_outputs(out_dir, fleet, rosters)
    records = write_records(out_dir, fleet, rosters, cfg.analysis.actionable_pct)
    folder = os.path.join(out_dir, "records")
    written["stale"] += [os.path.join(folder, name)
                         for name in prune(folder, {os.path.basename(p) for p in records}, ".md")]
    return written, records


def stale_note(written: dict) -> str:
    """What a run removed of an earlier one, for people; ``""`` when nothing.

    ``written["stale"]``: the per-GPU files and records of other inputs :func:`write_documents` removed
    (alone: ``"removed N file(s) of an earlier run with other inputs"``); ``written["stale_report"]``: the
    manager report (``report.html``) and the GPU pages rendered from the folder's earlier contents that
    :meth:`RunFolder.write` removed, counted too and said apart, with ``written["stale_dirs"]``, the
    folders left empty that went with them (``gpu-pages/``)."""
    documents = written.get("stale", [])
    rendered = written.get("stale_report", [])
    count = len(documents) + len(rendered)
    if not rendered:
        return f"removed {count} file(s) of an earlier run with other inputs" if count else ""
    pages = sum(os.path.basename(os.path.dirname(p)) == PAGES_DIR for p in rendered)
    what = [x for x in ("report.html" if pages < len(rendered) else "", f"{pages} GPU page(s)" if pages else "") if x]
    parts = [f"{len(documents)} per-GPU file(s) and record(s) of other inputs"] if documents else []
    parts.append(" and ".join(what) + " rendered from its outputs: `gpu-idle report DIR --out DIR/report.html` "
                 "renders them again")
    dirs = "".join(f", and the emptied folder {os.path.basename(d)}/" for d in written.get("stale_dirs", []))
    return f"removed {count} file(s) of an earlier run ({'; '.join(parts)}){dirs}"


def write_folder_manifest(out_dir: str, digest: str, **extra) -> None:
    """Record what ``out_dir`` is made of (``digest``) and its files, written last."""
    write_json(os.path.join(out_dir, MANIFEST), {"inputs": digest, **extra, "files": folder_files(out_dir)})


class RunFolder(OutputFolder):
    """``gpu-idle run --out DIR``: the documents, and ``DIR/.manifest.json`` when every report's
    result is stored, so that an unchanged rerun into the same folder keeps it as it is."""

    def __init__(self, out_dir: str, log=print):
        self.out_dir = out_dir
        self.log = log

    def on_found(self, paths, problems) -> None:
        self.log(f"gpu-idle: {len(paths)} report(s) found"
                 + (f", {len(problems)} input problem(s)" if problems else ""))

    def reuse(self, digest: str) -> pd.DataFrame | None:
        if (read_manifest(self.out_dir) or {}).get("inputs") != digest:
            return None
        return pd.read_parquet(os.path.join(self.out_dir, "fleet.parquet"))

    def write(self, fleet, rosters, cfg, digest) -> str:
        # A manager report rendered from the folder's earlier contents (gpu-idle report DIR --out
        # DIR/report.html, as `make run` does) would describe other outputs: it goes, and so do the
        # GPU pages rendered beside it (DIR/gpu-pages/*.html).
        rendered = []
        stale_html = os.path.join(self.out_dir, "report.html")
        if os.path.exists(stale_html):
            os.unlink(stale_html)
            rendered.append(stale_html)
        pages = os.path.join(self.out_dir, PAGES_DIR)
        rendered += [os.path.join(pages, name) for name in prune(pages, set(), ".html")]
        emptied = [pages] if remove_if_empty(pages) else []   # gpu-idle report makes it again
        written, records = write_documents(self.out_dir, fleet, rosters, cfg)
        written.update(stale_report=rendered, stale_dirs=emptied)
        note = stale_note(written)
        if digest:
            write_folder_manifest(self.out_dir, digest)
        return (f"wrote {written['csv']}, {written['parquet']}, {written['jobs']}, {written['clusters']}, "
                f"{written['gpus']}/, {len(records)} medical record(s) in {self.out_dir}/records/"
                + (f"; {note}" if note else ""))


def _canonical(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


def _analyse(jobs: list[Job], cfg: Config, scheduler: str | None, gpu_dir: str, log, progress):
    """Map the jobs on the right backend and collect their outcomes: one report with no scheduler
    in this process, else on Dask. Returns ``(outcomes, engine problem or None)``."""
    outcomes: list[ReportOutcome] = []
    if not jobs:
        return outcomes, None
    address = scheduler_address(cfg, scheduler)
    if len(jobs) == 1 and not address and cfg.dask.slurm is None:
        log("engine: in this process (one report, no scheduler configured: no cluster to start"
            + (", so no dashboard" if cfg.dask.dashboard else "") + ")")
        backend = InProcess(cfg.dask.n_workers * cfg.dask.threads_per_worker)
        outcomes = list(_tracked(map_reports(jobs, cfg, backend, gpu_dir), progress))
        return outcomes, None
    try:
        with open_client(cfg, scheduler, log=log) as client:
            # Workers on other machines (a scheduler's, Slurm jobs') may not see this one's folders:
            # the client writes the outputs and stores the results.
            remote = bool(address) or cfg.dask.slurm is not None
            backend = OnDask(client, shares_files=not remote, no_workers_timeout_s=cfg.dask.no_workers_timeout_s)
            outcomes = list(_tracked(map_reports(jobs, cfg, backend, gpu_dir), progress))
            problem = (f"no Dask worker left for {cfg.dask.no_workers_timeout_s:g} s: "
                       "the reports not done are error rows") if backend.lost_all_workers else None
    except EngineError as exc:
        done = {o.path for o in outcomes}
        message = str(exc)
        outcomes += [ReportOutcome(path=j.path, failure=Failure(f"{j.path}: not analysed: {message}"))
                     for j in jobs if j.path not in done]
        return outcomes, message
    return outcomes, problem


def _agree_across_reports(outcomes: list, rows: list, rosters: dict, plans: dict, cfg: Config,
                          cache: ResultCache | None, scheduler: str | None, gpu_dir: str, log) -> tuple:
    """The reports of jobs spread over several reports whose GPUs did not keep what their job's
    agreement gives them (:func:`~pipeline.engine.agreement.forced_agreements`, over the results
    analysed now and the stored ones): their result under the job's agreement, from the store when
    it is there, else analysed again now with the agreement forced (and stored under its own key).
    Returns ``(outcomes, rows, rosters, paths analysed again)`` with those reports replaced."""
    forced = forced_agreements(entries_of(outcomes, rows, plans), cfg)
    if not forced:
        return outcomes, rows, rosters, []
    slots = {p: cache.slot(p, a) if cache is not None else None for p, a in forced.items()}
    kept = [p for p in sorted(forced) if slots[p] is not None and cache.store.has(slots[p].key)]
    got_rows, got_rosters, damaged, _ = cache.read(kept, slots) if kept else ([], {}, [], {})
    redo = [p for p in sorted(forced) if p not in kept or p in damaged]
    if redo:
        log(f"engine: analysing {len(redo)} report(s) again so that every GPU of their job keeps the same "
            "iterations (a job spread over several reports)")
    jobs = [Job(p, cfg.labels_for(p), slots[p], forced[p]) for p in redo]
    again, _ = _analyse(jobs, cfg, scheduler, gpu_dir, log, None)
    done = set(forced)
    outcomes = [o for o in outcomes if o.path not in done] + again
    rows = [r for r in rows if r.get("report") not in done] + got_rows
    rosters = {k: v for k, v in rosters.items() if k[0] not in done}
    rosters.update(got_rosters)
    return outcomes, rows, rosters, redo


def _tracked(outcomes, progress):
    for outcome in outcomes:
        if progress is not None:
            progress.advance(1, os.path.basename(outcome.path))
        yield outcome


def drive(cfg: Config, inputs, folder: OutputFolder, cache: ResultCache | None, scheduler: str | None = None,
          log=print, force=(), progress_factory=None) -> RunResult:
    """Run once over ``inputs`` into ``folder``.

    Args:
        cfg: the configuration.
        inputs: paths, folders, globs or fsspec URLs (:func:`~pipeline.inputs.discover.discover`).
        folder: where the outputs go (:class:`RunFolder`, :class:`~pipeline.runs.sweep.NightFolder`).
        cache: the result store and identity index (``None``: ``--no-cache``, everything is
            analysed and nothing is stored).
        scheduler: a Dask scheduler address (else ``dask.scheduler``, ``DASK_SCHEDULER_ADDRESS``,
            else a LocalCluster; one report with none of them runs in this process).
        force: reports to analyse again even when their result is stored.
        progress_factory: ``callable(total) -> progress`` with ``advance(n, label)`` and
            ``close()`` (:class:`pipeline.progress.Progress`), or None for no progress display.
    Returns:
        :class:`RunResult`.
    Raises:
        OutputError: the output folder cannot be written (raised before any analysis).
    """
    folder.prepare()
    # Workers of a LocalCluster have a known memory limit: a local report too big for it is
    # refused by its size before anything reads (or hashes) it. A remote worker checks its own.
    limit = None if scheduler_address(cfg, scheduler) or cfg.dask.slurm is not None else local_worker_memory(cfg)
    skipped: list = []
    paths, problems = discover(list(inputs), storage=cfg.storage, memory_limit=limit,
                               memory_factor=cfg.dask.memory_factor, skipped=skipped)
    folder.on_found(paths, problems)
    n_problems = len(problems)
    forced = {_canonical(p) for p in force}
    for missing in sorted(forced - {_canonical(p) for p in paths}):
        log(f"WARNING: --force {missing}: not among the discovered reports, nothing forced "
            "(give the report's path as the inputs name it)")
    todo, stored = list(paths), []
    if cache is not None:
        for path, exc in cache.identify(paths):
            problems.append((path, f"{path}: cannot read ({exc})"))
        readable = [p for p in paths if p in cache.keys]
        stored = [p for p in readable if cache.stored(p) and _canonical(p) not in forced]
        stored_set = set(stored)
        todo = [p for p in readable if p not in stored_set]
        cache.save_index()
    folder.on_plan(paths, todo, len(stored))
    identified = [p for p in paths if cache is not None and p in cache.keys]
    digest = cache.digest(identified, problems) if cache is not None else None
    if cache is not None and not todo:
        kept = folder.reuse(digest)
        if kept is not None:
            return RunResult(fleet=kept, out_dir=folder.out_dir, reports=len(paths) + n_problems,
                             reused=len(stored), kept=True, failed=_failures(kept), skipped=skipped)
    drop_manifest(folder.out_dir)  # the folder is about to change: no old manifest may vouch for it
    jobs = [Job(p, cfg.labels_for(p), cache.slot(p) if cache is not None else None, plots=folder.plots) for p in todo]
    progress = progress_factory(len(jobs)) if progress_factory and jobs else None
    try:
        outcomes, engine_problem = _analyse(jobs, cfg, scheduler, os.path.join(folder.out_dir, "gpus"), log,
                                            progress)
    finally:
        if progress is not None:
            progress.close()
    # Stored results are read only now: forked workers would otherwise carry them too.
    rows, rosters, damaged, plans = cache.read(stored) if cache is not None else ([], {}, [], {})
    if damaged:  # unreadable stored results: analyse those reports again
        more = [Job(p, cfg.labels_for(p), cache.slot(p)) for p in damaged]
        again, _ = _analyse(more, cfg, scheduler, os.path.join(folder.out_dir, "gpus"), log, None)
        outcomes += again
        todo += damaged
    # A job spread over several reports: its GPUs keep the same iterations (a second round, usually empty).
    outcomes, rows, rosters, redone = _agree_across_reports(outcomes, rows, rosters, plans, cfg, cache, scheduler,
                                                             os.path.join(folder.out_dir, "gpus"), log)
    todo += [p for p in redone if p not in todo]
    fleet, rosters = reduce_outcomes(outcomes, cfg, problems, rows, rosters)
    if cache is not None and not all(cache.stored(p) for p in identified):
        digest = None  # a report without a stored result is analysed again next time: nothing to keep
    wrote = folder.write(fleet, rosters, cfg, digest)
    wait_for_writes()  # the in-process engine's columnar cache entry, written while analysing
    return RunResult(fleet=fleet, out_dir=folder.out_dir, reports=len(paths) + n_problems, todo=todo,
                     reused=len(stored) - len(damaged), failed=_failures(fleet), engine_problem=engine_problem,
                     wrote=wrote, skipped=skipped)


def _failures(fleet: pd.DataFrame) -> list:
    """``(report, error)`` of each report with an error row (its first)."""
    if fleet.empty or "status" not in fleet:
        return []
    errors = fleet[fleet["status"] == "error"].drop_duplicates("report")
    return list(zip(errors["report"], errors["error"]))
