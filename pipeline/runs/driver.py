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

import contextlib
import dataclasses
import functools
import os

import pandas as pd

from ..code_keys import build_fingerprint
from ..config import Config
from ..engine.cluster import EngineError, import_ahead, local_worker_memory, open_client, scheduler_address
from ..engine.beside import beside, here
from ..engine.map import InProcess, OnDask, map_work
from ..fleet.outputs import (PAGES_DIR, TABLE_FILES, gpu_json_name, planned_outputs, proven_gpu_doc, unrewritten,
                             write_csv_tables, write_gpu_docs, write_outputs)
from ..fleet.grouping import group_jobs
from ..accounting import hooks as accounting
from ..fleet.pricing import price_in_place, priced
from ..fleet.reduce import build_fleet, reduce_outcomes, rosters_of
from ..hashing import stop_ahead
from ..inputs.discover import discover
from ..io import (LEFTOVER_RE, LOCK, OutputError, folder_lock, is_leftover, not_to_overwrite, os_cause, prune, real_dir,
                  remove_leftovers, same_file, temp_name)
from ..load.ahead import keep as keep_ahead, stop as stop_reading_ahead
from ..load.cache import wait_for_writes
from ..memory import collector_paused
from ..model import Failure
from ..report.medical import job_keys, record_stems, write_records
from ..report.rendered import remove_rendered, rendered_files
from ..fleet.pricing import PRICING, pricing_settings  # what fills an older table as this run priced it
from ..schema import DUPLICATE
from ..store.results import (MANIFEST, ResultCache, drop_manifest, foreign_code, identical_copies, manifest_holds,
                             read_manifest, write_folder_manifest)
from ..text import printable
from ..work.agreement import entries_of, forced_agreements
from ..work import tasks as work_tasks
from ..work.tasks import Job, ReportOutcome, ReportWork, Sinks

__all__ = ["OutputError", "IncompleteOutputs", "OutputFolder", "RunFolder", "drive", "write_documents"]

#: The sub-folders a run writes into (and the only ones where it removes its temporary files).
SUBDIRS = ("gpus", "records", PAGES_DIR)


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


class IncompleteOutputs(Exception):
    """Writing the outputs failed part-way (a full disk, an I/O error): the message names the folder, the
    cause and every file missing; the folder's manifest vouches for nothing (it is never kept as is)."""


def incomplete(out_dir: str, targets: list[str], since_ns: int, exc: OSError, extra: str = "",
               unfinished: set[str] = frozenset()) -> IncompleteOutputs:
    """The :class:`IncompleteOutputs` of a write of ``targets`` (relative paths) into ``out_dir`` that
    failed with ``exc``: a target is missing unless it is a regular file modified at or after
    ``since_ns`` (the folder's manifest was marked as changing then, on the same clock) and not in
    ``unfinished`` (written during the run but still to be replaced:
    :func:`~pipeline.fleet.outputs.unrewritten`)."""
    def written(rel: str) -> bool:
        if rel in unfinished:
            return False
        try:
            st = os.lstat(os.path.join(out_dir, rel))
        except OSError:
            return False
        return st.st_mtime_ns >= since_ns and os.path.isfile(os.path.join(out_dir, rel))

    missing = sorted(rel for rel in targets if not written(rel))
    where = ""
    if isinstance(exc.filename, str):   # a temporary file (.<name>.<random>.tmp) is named by its target
        name = os.path.basename(exc.filename)
        found = LEFTOVER_RE.match(name)
        target = os.path.join(os.path.dirname(exc.filename), found.group(1) if found else name)
        where = f" writing {os.path.relpath(target, out_dir)}"
    shown = ", ".join(missing[:20]) + (f" and {len(missing) - 20} more" if len(missing) > 20 else "")
    what = (f"missing {len(missing)} of {len(targets)} file(s): {shown}" if missing
            else f"every file written but not the folder's manifest ({MANIFEST})")
    return IncompleteOutputs(f"{out_dir}: the outputs are incomplete ({os_cause(exc)}{where}): {what}{extra}; "
                             "the folder vouches for nothing until a run completes it (free space, run again)")


def not_ours(out_dir: str) -> list[str]:
    """The files under ``out_dir`` (relative paths, sorted) that the product cannot prove it wrote: not
    listed in its manifest or in the record of a report rendered there
    (:func:`~pipeline.report.rendered.rendered_files`), not its lock file, not one of its temporary files in a folder it writes. Symbolic links count as
    files (never followed)."""

    doc = read_manifest(out_dir)
    owned = set(doc["files"]) | {MANIFEST} if doc else set()
    owned |= rendered_files(out_dir)
    ours_dirs = {""} | set(SUBDIRS)
    out = []
    for folder, dirs, files in os.walk(out_dir):
        rel_dir = os.path.relpath(folder, out_dir)
        rel_dir = "" if rel_dir == "." else rel_dir
        entries = files + [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        for name in entries:
            rel = os.path.join(rel_dir, name)
            if rel in owned or (rel_dir == "" and name == LOCK) or (rel_dir in ours_dirs and is_leftover(name)):
                continue
            out.append(rel)
    return sorted(out)


def foreign_targets(out_dir: str, targets: list[str], since_ns: int) -> list[str]:
    """The paths of ``targets`` (relative to ``out_dir``) that a run would overwrite although the product
    cannot prove they hold what it wrote: present (a file or a link), not written by this run (modified
    before ``since_ns``, when :meth:`OutputFolder.begin` marked the folder as changing; its tasks' per-GPU
    files come after), and either listed nowhere (not in the folder's manifest, not in the record of a
    report rendered there: :func:`not_ours`' proofs; nor a per-GPU file proven ours by its content,
    :func:`~pipeline.fleet.outputs.proven_gpu_doc`, a killed run's) or listed with a size and SHA-256
    it no longer has (a person edited it since). Sorted."""

    doc = read_manifest(out_dir)
    entries = dict(doc["files"]) if doc else {}
    named = rendered_files(out_dir)
    out = []
    for rel in targets:
        path = os.path.join(out_dir, rel)
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if st.st_mtime_ns >= since_ns:
            continue
        if rel in entries:
            if not same_file(path, entries[rel]):   # None (claimed by name) matches any regular file
                out.append(rel)
        elif rel not in named and not (rel.startswith("gpus/") and proven_gpu_doc(path)):
            out.append(rel)
    return sorted(out)


def edited_outputs(out_dir: str, doc: dict) -> list[str]:
    """The run's documents (fleet tables, ``gpus/``, ``records/``: what a run writes again) that the
    manifest ``doc`` lists with a size and SHA-256 they no longer have: a person changed them since, so
    they are theirs now and a run refuses to overwrite them (checked before any analysis: the tasks write
    ``gpus/`` as they go). Files missing or claimed by name only are not. Sorted relative paths."""

    out = []
    for rel, entry in doc["files"].items():
        documents = rel in TABLE_FILES + accounting.ACCOUNTING_FILES or rel.startswith(("gpus/", "records/"))
        if documents and entry is not None and os.path.lexists(os.path.join(out_dir, rel)) \
                and not same_file(os.path.join(out_dir, rel), entry):
            out.append(rel)
    return sorted(out)


def refuse_foreign(out_dir: str, writer: str = "run") -> None:
    """Refuse, before any analysis, an output folder (a ``run --out`` folder, a sweep night) a run would write
    files of someone else's in: a symlinked sub-folder; with a manifest, a document of ours a person changed
    since (:func:`edited_outputs`); without one, any file the product cannot prove it wrote (:func:`not_ours`).
    A missing folder is fine. Raises OutputError naming them (``writer``: who says it)."""
    if not os.path.isdir(out_dir):
        return
    for sub in SUBDIRS:   # a symlinked sub-folder is said as such, with or without a manifest
        if os.path.islink(os.path.join(out_dir, sub)):
            real_dir(os.path.join(out_dir, sub))  # raises, naming it
    doc = read_manifest(out_dir)
    if doc is not None:
        edited = edited_outputs(out_dir, doc)
        if edited:
            raise not_to_overwrite(out_dir, edited, writer=writer)
        return
    foreign = not_ours(out_dir)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise OutputError(f"{out_dir}: holds {len(foreign)} file(s) gpu-idle did not write ({shown}) and no "
                          f"manifest of its own ({MANIFEST}): give a new or empty folder, or move those "
                          "files away (gpu-idle never deletes or overwrites a file it cannot prove it wrote)")


class OutputFolder:
    """Where a run's outputs go, and what is kept beside them (see :class:`RunFolder`).

    ``out_dir``: the folder of fleet tables, ``gpus/`` and ``records/``. Subclasses say what
    to print when the inputs are known, how to reuse an earlier identical folder, and what
    to write besides the run's documents. ``plots``: the plot cache of the report written with
    the folder, where the tasks draw the GPU pages' timelines ahead (None: no report, nothing drawn).
    ``changing_ns``: when :meth:`begin` marked the folder as changing (file-system clock, ns).
    """

    out_dir: str
    plots: str | None = None
    changing_ns: int = 0

    def holding(self):
        """A context held for the whole run (:class:`RunFolder`: the folder's lock); none by default."""
        return contextlib.nullcontext()

    def prepare(self) -> None:
        """Check that the folder can be written and that its sub-folders are real folders (never a
        symbolic link), and remove the temporary files a killed run left in the folders it writes (its
        top level, ``gpus/``, ``records/``, ``gpu-pages/``: nowhere else), before any analysis.
        Raises :class:`OutputError` naming the folder and the cause."""
        try:
            os.makedirs(self.out_dir, exist_ok=True)   # the folder itself may be a link the user made
            for sub in SUBDIRS:
                path = os.path.join(self.out_dir, sub)
                if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
                    real_dir(path)  # raises, naming it
            probe = os.path.join(self.out_dir, temp_name("write-probe"))
            with open(probe, "w", encoding="utf-8"):
                pass
            os.unlink(probe)
            for folder in (self.out_dir, *(os.path.join(self.out_dir, sub) for sub in SUBDIRS)):
                remove_leftovers(folder)
        except OSError as exc:
            raise OutputError(f"{self.out_dir}: cannot write here ({os_cause(exc)})") from exc

    def begin(self) -> None:
        """Mark the folder as changing before anything in it does (its manifest vouches for nothing, yet
        still lists the product's files: :func:`~pipeline.store.results.drop_manifest`). Raises
        :class:`OutputError` when that cannot be written (nothing has changed then)."""
        try:
            drop_manifest(self.out_dir)
            self.changing_ns = os.lstat(os.path.join(self.out_dir, MANIFEST)).st_mtime_ns
        except OSError as exc:
            raise OutputError(f"{self.out_dir}: cannot write here ({os_cause(exc)})") from exc

    def on_found(self, paths: list[str], problems: list) -> None:
        """Called once the inputs are discovered."""

    def on_plan(self, paths: list[str], todo: list[str], reused: int) -> None:
        """Called once it is known which reports are analysed and which are reused."""

    def reuse(self, digest: str) -> pd.DataFrame | None:
        """The fleet table of an earlier folder made of exactly ``digest``
        (:func:`~pipeline.store.results.inputs_digest`), made this run's outputs; None when there is none."""
        return None

    def write(self, fleet: pd.DataFrame, rosters: dict, cfg: Config, digest: str | None) -> str:
        """Write the run's documents and, last, the manifest listing them (with ``digest``, the one that
        lets a later identical run keep them). Returns what was written, for people. Raises
        :class:`IncompleteOutputs` when a file cannot be written (what is missing is named)."""
        raise NotImplementedError


def _csv_and_records(out_dir: str, fleet: pd.DataFrame, rosters: dict, actionable_pct: float,
                     coverage: pd.DataFrame | None) -> list[str]:
    """What :func:`write_documents` writes beside the other tables: the fleet's CSV tables
    (:func:`~pipeline.fleet.outputs.write_csv_tables`), then the jobs' records; returns the records' paths."""
    write_csv_tables(out_dir, fleet)
    return write_records(out_dir, fleet, rosters, actionable_pct, coverage)


def planned_files(fleet: pd.DataFrame) -> list[str]:
    """Every file :func:`write_documents` writes for ``fleet`` (relative paths): the tables and per-GPU
    files (:func:`~pipeline.fleet.outputs.planned_outputs`) and a record per job."""

    return (planned_outputs(fleet) + accounting.planned(fleet)
            + sorted(f"records/{stem}.md" for stem in record_stems(job_keys(fleet)).values()))


#: Jobs from which :func:`write_documents` writes the CSV tables and records beside the other files (a forked
#: child, :func:`~pipeline.engine.beside.beside`): ~1.5 ms of CPU a record, against ~10 ms to fork the client.
RECORDS_BESIDE = 64


def write_documents(out_dir: str, fleet: pd.DataFrame, rosters: dict, cfg: Config) -> tuple[dict, list[str]]:
    """The run's documents in ``out_dir``: fleet tables, rollups, ``gpus/`` and ``records/``
    (:func:`~pipeline.fleet.outputs.write_outputs`, :func:`~pipeline.report.medical.write_records`),
    nothing else: the per-GPU files and records an earlier run wrote there (its manifest lists them) for
    other inputs are removed (their paths under ``"stale"``); files no manifest lists are never touched.
    The manifest claims every file about to be written first (:func:`planned_files`), so that a run
    killed half-way leaves them known as the product's. Returns ``(written paths by name, record paths)``,
    the relative paths of every file written under ``"files"``. Raises OSError when a file cannot be
    written, :class:`OutputError` when a sub-folder is a symbolic link."""

    owned = drop_manifest(out_dir, claim=planned_files(fleet))

    def owned_in(sub: str) -> dict:
        return {rel[len(sub) + 1:]: e for rel, e in owned.items() if rel.startswith(sub + "/")}

    real_dir(os.path.join(out_dir, "records"))
    cov = accounting.coverage_table(fleet, cfg) if accounting.planned(fleet) else None
    # Many jobs: the CSV tables and the records are written beside the other files, on the other CPU
    # (engine.beside), which the analysis used and nothing else uses now.
    side = (beside if len(job_keys(fleet)) >= RECORDS_BESIDE else here)(
        _csv_and_records, out_dir, fleet, rosters, cfg.analysis.actionable_pct, cov)
    try:
        written = write_outputs(out_dir, fleet, rosters, owned_in("gpus"), csv_tables=False)
        written["files"] += accounting.write_tables(out_dir, fleet, cfg, cov)
        # a run without accounting leaves no teams.csv / coverage.csv of an earlier one with it (the report would say them)
        earlier = {rel: owned[rel] for rel in accounting.ACCOUNTING_FILES if rel in owned}
        written["stale_accounting"] = [os.path.join(out_dir, name)
                                       for name in prune(out_dir, set(accounting.planned(fleet)), earlier)]
    except BaseException:
        side.wait()  # nothing is written once this has returned
        raise
    records = side.result()
    folder = os.path.join(out_dir, "records")
    written["stale"] += [os.path.join(folder, name)
                         for name in prune(folder, {os.path.basename(p) for p in records}, owned_in("records"))]
    written["files"] += sorted(os.path.relpath(p, out_dir) for p in records)
    return written, records


def stale_note(written: dict) -> str:
    """What a run removed of an earlier one, for people; ``""`` when nothing.

    ``written["stale"]``: the per-GPU files and records of other inputs :func:`write_documents` removed
    (alone: ``"removed N file(s) of an earlier run with other inputs"``); ``written["stale_report"]``: the
    manager report (``report.html``) and the GPU pages rendered from the folder's earlier contents that
    :meth:`RunFolder.write` removed, counted too and said apart, with ``written["stale_dirs"]``, the
    folders left empty that went with them (``gpu-pages/``); ``written["stale_accounting"]``: the ``teams.csv`` and
    ``coverage.csv`` of an earlier run with the scheduler's accounting, when this run has none, named with that
    reason."""
    gone = written.get("stale_accounting", [])
    said = (f"removed {', '.join(os.path.basename(p) for p in gone)} of an earlier run with the scheduler's "
            "accounting (this run has none: they would describe other inputs)") if gone else ""
    others = _stale_others(written)
    return "; ".join(x for x in (others, said) if x)


def _stale_others(written: dict) -> str:
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


class RunFolder(OutputFolder):
    """``gpu-idle run --out DIR``: the documents and ``DIR/.manifest.json``, the product's proof of
    what it wrote there (every file's size and SHA-256), and, when every report's result is stored, of
    what the folder was made of, so that an unchanged rerun into the same folder keeps it as it is.

    The folder must be new, empty, or the product's (its manifest, or only files the product can
    prove it wrote); one run or report at a time writes it (``DIR/.gpu-idle.lock``, :meth:`holding`)."""

    def __init__(self, out_dir: str, log=print):
        self.out_dir = out_dir
        self.log = log

    def holding(self):
        """Refuse a folder that holds files the product did not write (:func:`not_ours`), then hold its lock.
        Raises OutputError (naming those files), or :class:`~pipeline.io.FolderBusy` naming the holder."""
        @contextlib.contextmanager
        def held():
            self._refuse_foreign()
            with folder_lock(self.out_dir, command="gpu-idle run"):
                self._refuse_foreign()   # again, now that no other writer can change it
                yield
        return held()

    def _refuse_foreign(self) -> None:
        refuse_foreign(self.out_dir)

    def on_found(self, paths, problems) -> None:
        self.log(f"gpu-idle: {len(paths)} report(s) found"
                 + (f", {len(problems)} input problem(s)" if problems else ""))

    def reuse(self, digest: str) -> pd.DataFrame | None:
        doc = read_manifest(self.out_dir)
        if (doc or {}).get("inputs") != digest or not manifest_holds(self.out_dir, doc):
            return None
        return pd.read_parquet(os.path.join(self.out_dir, "fleet.parquet"))

    def write(self, fleet, rosters, cfg, digest) -> str:
        targets = planned_files(fleet)
        taken = foreign_targets(self.out_dir, targets, self.changing_ns)
        if taken:
            with contextlib.suppress(OSError):  # what this run's tasks wrote stays known as the product's
                drop_manifest(self.out_dir, claim=[rel for rel in targets if rel not in taken
                                                   and os.path.lexists(os.path.join(self.out_dir, rel))])
            raise not_to_overwrite(self.out_dir, taken, " (the results are stored: nothing is analysed again)")
        try:
            # A manager report rendered from the folder's earlier contents (gpu-idle report DIR --out
            # DIR/report.html, as `make run` does) would describe other outputs: it goes, and so do the
            # GPU pages rendered beside it (DIR/gpu-pages/*.html), as far as the folder's record of them proves
            # (rendered.remove_rendered).
            rendered, emptied = remove_rendered(self.out_dir)
            with collector_paused():
                written, records = write_documents(self.out_dir, fleet, rosters, cfg)
            written.update(stale_report=rendered, stale_dirs=emptied)
            write_folder_manifest(self.out_dir, written["files"], digest, **{PRICING: pricing_settings(cfg)})
        except OSError as exc:
            raise incomplete(self.out_dir, targets, self.changing_ns, exc,
                             unfinished=unrewritten(self.out_dir, fleet)) from exc
        note = stale_note(written)
        return (f"wrote {written['csv']}, {written['parquet']}, {written['jobs']}, {written['clusters']}, "
                f"{written['fix_first']}, {written['fix_first_json']}, "
                + "".join(f"{os.path.join(self.out_dir, name)}, " for name in accounting.ACCOUNTING_FILES
                          if name in written["files"])
                + f"{written['gpus']}/, {len(records)} medical record(s) in {self.out_dir}/records/"
                + (f"; {note}" if note else ""))


def _canonical(path: str) -> str:
    return path if "://" in path else os.path.abspath(path)


@dataclasses.dataclass(frozen=True)
class Todo:
    """One report to analyse and where its result goes: its ``path`` (or URL), its ``labels``, its
    result ``slot`` (anything with ``put(results) -> bool``, e.g. a
    :class:`~pipeline.store.results.ResultSlot`; None: not stored), ``forced``: its job's agreement
    (:class:`~pipeline.work.tasks.Job`), and ``plots``: a plot cache folder where the task that writes
    the report's per-GPU JSON also draws each GPU page's timeline ahead of the report (the nightly
    sweep's ``S/cache/plots``), or None."""

    path: str
    labels: dict
    slot: object = None
    forced: dict | None = None
    plots: str | None = None


def write_report_docs(gpu_dir: str, spread_pct: float, results: list, done=None, cfg: Config | None = None) -> dict:
    """Write one report's per-GPU JSON into ``gpu_dir`` (atomically), with the fleet row as
    ``_summary`` as the report's own rows give it (stragglers flagged among the report's GPUs of each
    job, ``spread_pct``: ``analysis.straggler_spread_pct``; the reduce rewrites the ``_summary`` of a
    file whose final fleet row differs). ``done(1)`` after each file (None: nothing); ``cfg``: the labels and rate
    card its price-free rows are priced with (:func:`pipeline.fleet.pricing.priced`: copies, the results stay
    price-free), and its job grouping as the report's rows alone give it (:func:`~pipeline.fleet.grouping.group_jobs`:
    what the reduce finds for any report that is not one file of a job spread over several). Returns ``{(report, gpu key): (file path, summary text)}``. Raises OSError."""
    rows = [r.row for r in results]
    if cfg is not None:  # copies, grouped as the reduce groups a report of no multi-file job (``file``, ``labels``):
        rows = group_jobs([dict(r) for r in priced(rows, cfg)], cfg)  # its files then need no second write
    texts = write_gpu_docs(gpu_dir, build_fleet(rows, spread_pct), rosters_of(results), done)
    return {key: (os.path.join(gpu_dir, gpu_json_name(*key)), text) for key, text in texts.items()}


def draw_report_timelines(plot_cache: str, doc_paths: list[str]) -> None:
    """Draw the page timelines of the GPU JSON files ``doc_paths`` into ``plot_cache``
    (:func:`pipeline.report.gpu_page.draw_timelines`; imported here only: it needs matplotlib)."""
    from ..report.gpu_page import draw_timelines

    draw_timelines(doc_paths, plot_cache)


def report_sinks(todo: Todo, cfg: Config, gpu_dir: str | None) -> Sinks:
    """The sinks of a task that analyses ``todo`` where ``gpu_dir`` is (this process, a LocalCluster):
    store in its slot, write its per-GPU JSON into ``gpu_dir``, draw its pages' timelines into its
    plot cache (each where given)."""
    return Sinks(store=todo.slot.put if todo.slot is not None else None,
                 write=(functools.partial(write_report_docs, gpu_dir, cfg.analysis.straggler_spread_pct, cfg=cfg)
                        if gpu_dir is not None else None),
                 draw=(functools.partial(draw_report_timelines, todo.plots)
                       if gpu_dir is not None and todo.plots is not None else None))


def analysed(todos: list[Todo], cfg: Config, backend, gpu_dir: str | None = None, gpu_progress=None):
    """Analyse every report on ``backend`` (:class:`~pipeline.engine.map.InProcess` or
    :class:`~pipeline.engine.map.OnDask`): one :class:`~pipeline.work.tasks.ReportOutcome` per report,
    as each finishes.

    Who writes and stores: when the backend runs where ``gpu_dir`` is (``backend.shares_files``)
    and a report is analysed in one task, that task writes the report's per-GPU JSON into
    ``gpu_dir`` and stores its result in ``todo.slot`` (its :func:`report_sinks`); otherwise the
    result is stored here, on the client, as the outcome arrives (a run killed half-way keeps what it
    finished), and the per-GPU documents are written by the reduce (:func:`write_outputs`).
    ``gpu_progress``: ``callable(total) -> progress`` counting the GPUs of a report analysed in this process
    (:class:`~pipeline.work.tasks.Job`), or None.
    """
    here = gpu_dir if backend.shares_files else None
    jobs = [Job(t.path, t.labels, t.forced, report_sinks(t, cfg, here) if backend.shares_files else None,
                gpu_progress) for t in todos]
    slots = {t.path: t.slot for t in todos}
    # a report analysed in this process is bounded by the memory a worker of the local cluster would have
    # (on Dask, the engine gives each task its worker's own limit)
    for outcome in map_work(ReportWork(cfg, local_worker_memory(cfg)), jobs, backend):
        why = foreign_code(outcome.results) if outcome.failure is None else None
        if why is not None:  # a worker of another build: its figures are neither shown nor stored
            outcome = ReportOutcome(path=outcome.path, failure=Failure(
                f"{outcome.path}: not analysed: the results a Dask worker sent were {why}"))
        slot = slots.get(outcome.path)
        if not outcome.stored and outcome.failure is None and slot is not None:
            outcome.stored = slot.put(outcome.results) or outcome.stored
        yield outcome


def in_process_threads(cfg: Config) -> int:
    """The threads one report analysed in this process (no scheduler) runs its GPUs on: as many as the
    LocalCluster would have had, ``dask.n_workers`` (``--workers``) × ``dask.threads_per_worker``; ``--workers 1``
    keeps the analysis on the command's own thread (:func:`pipeline.work.tasks.analyse_report`)."""
    return cfg.dask.n_workers * cfg.dask.threads_per_worker


def _analyse(jobs: list[Todo], cfg: Config, scheduler: str | None, gpu_dir: str, log, progress, gpu_progress=None):
    """Map the jobs on the right backend and collect their outcomes: one report with no scheduler
    in this process (its GPUs counted on ``gpu_progress(total)`` when given: a report of thousands of GPUs
    says how far it is), else on Dask. Returns ``(outcomes, engine problem or None)``."""
    outcomes: list[ReportOutcome] = []
    if not jobs:
        return outcomes, None
    address = scheduler_address(cfg, scheduler)
    if len(jobs) == 1 and not address and cfg.dask.slurm is None:
        log("engine: in this process (one report, no scheduler configured: no cluster to start"
            + (", so no dashboard" if cfg.dask.dashboard else "") + ")")
        backend = InProcess(in_process_threads(cfg))
        outcomes = list(_tracked(analysed(jobs, cfg, backend, gpu_dir, gpu_progress), progress))
        return outcomes, None
    stop_ahead()  # the LocalCluster forks its workers: no thread may be hashing a file then
    stop_reading_ahead()  # nor reading one (the workers load their reports themselves)
    try:
        with open_client(cfg, scheduler, log=log) as client:
            # Workers on other machines (a scheduler's, Slurm jobs') may not see this one's folders:
            # the client writes the outputs and stores the results.
            remote = bool(address) or cfg.dask.slurm is not None
            backend = OnDask(client, shares_files=not remote, no_workers_timeout_s=cfg.dask.no_workers_timeout_s,
                             retries=cfg.dask.retries, fingerprint=build_fingerprint,
                             check_timeout_s=cfg.dask.connect_timeout_s, log=log,
                             batch_bytes=cfg.dask.batch_bytes, batch_reports=cfg.dask.batch_reports)
            outcomes = list(_tracked(analysed(jobs, cfg, backend, gpu_dir), progress))
            problem = (f"no Dask worker left for {cfg.dask.no_workers_timeout_s:g} s: "
                       "the reports not done are error rows") if backend.lost_all_workers else None
            if problem is None and backend.lost_scheduler:
                problem = (f"the Dask scheduler{' at ' + address if address else ''} was lost during the run (killed "
                           "or unreachable): the reports not done are error rows")
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
    agreement gives them (:func:`~pipeline.work.agreement.forced_agreements`, over the results
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
    jobs = [Todo(p, cfg.labels_for(p), slots[p], forced[p]) for p in redo]
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
            progress.advance(1, printable(os.path.basename(outcome.path)))  # a file name: no raw ESC on the bar
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
        progress_factory: ``callable(total, what="reports", doing=..., of=...) -> progress`` with ``advance(n,
            label)`` and ``close()`` (:class:`pipeline.progress.Progress`), or None for no progress display;
            ``what="GPUs"``: the GPUs inside a report analysed in this process; ``"MB"``, ``"GPU plans"``, ``"GPU
            files"``: reading a large report, planning and writing thousands of GPUs (:func:`~pipeline.work.tasks.report_task`);
            ``"fleet rows"``: writing the outputs of thousands of rows (:data:`~pipeline.work.tasks.MANY_GPUS`).
    Returns:
        :class:`RunResult`.
    Raises:
        OutputError: the output folder cannot be written, or is not the product's (raised before any
            analysis), or a file the run would write is there and not the product's
            (:func:`foreign_targets`: raised before anything is written, the results stored);
            :class:`~pipeline.io.FolderBusy` (an OutputError): another process writes it.
        IncompleteOutputs: writing the outputs failed part-way (a full disk): the message says what is missing.
    """
    with folder.holding():
        return _drive(cfg, inputs, folder, cache, scheduler, log, force, progress_factory)


def _drive(cfg: Config, inputs, folder: OutputFolder, cache: ResultCache | None, scheduler, log, force,
           progress_factory) -> RunResult:
    """:func:`drive`, with the folder held."""
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
    for unused in cfg.unused_rules(paths):
        log(f"WARNING: {unused}")
    for missing in sorted(forced - {_canonical(p) for p in paths}):
        log(f"WARNING: --force {missing}: not among the discovered reports, nothing forced "
            "(give the report's path as the inputs name it)")
    todo, stored, identical = list(paths), [], {}
    if cache is not None:
        # several reports to hash: Dask, which will analyse them, is imported beside the hashing
        for path, exc in cache.identify(paths, import_ahead if len(paths) > 1 else None):
            problems.append((path, f"{path}: cannot read ({exc})"))
        stop_ahead()  # every key wanted is known: a file hashed ahead now would be one the index knew (a rerun)
        # byte-identical copies: one is analysed, the others are its duplicates (docs/inputs.md#duplicate-captures)
        identical = identical_copies([p for p in paths if p in cache.keys], cache.keys)
        readable = [p for p in paths if p in cache.keys and p not in identical]
        stored = [p for p in readable if cache.stored(p) and _canonical(p) not in forced]
        stored_set = set(stored)
        todo = [p for p in readable if p not in stored_set]
        cache.save_index()
    keep_ahead(todo)  # an export read ahead (pipeline.load.ahead) whose result is stored, or refused, is let go
    folder.on_plan(paths, todo, len(stored))
    identified = [p for p in paths if cache is not None and p in cache.keys]
    digest = accounting.digest(cache.digest(identified, problems) if cache is not None else None, cfg)
    if cache is not None and not todo:
        kept = folder.reuse(digest)
        if kept is not None:
            return RunResult(fleet=kept, out_dir=folder.out_dir, reports=len(paths) + n_problems,
                             reused=len(stored), kept=True, failed=_failures(kept), skipped=skipped)
    folder.begin()  # the folder is about to change: no old manifest may vouch for it
    jobs = [Todo(p, cfg.labels_for(p), cache.slot(p) if cache is not None else None, plots=folder.plots) for p in todo]
    progress = progress_factory(len(jobs)) if progress_factory and jobs else None
    try:
        gpu_progress = ((lambda total, what="GPUs", **words: progress_factory(total, what, **words))
                        if progress else None)
        outcomes, engine_problem = _analyse(jobs, cfg, scheduler, os.path.join(folder.out_dir, "gpus"), log,
                                            progress, gpu_progress)
    finally:
        if progress is not None:
            progress.close()
    # Stored results are read only now: forked workers would otherwise carry them too.
    rows, rosters, damaged, plans = cache.read(stored) if cache is not None else ([], {}, [], {})
    if damaged:  # unreadable stored results: analyse those reports again
        more = [Todo(p, cfg.labels_for(p), cache.slot(p)) for p in damaged]
        again, _ = _analyse(more, cfg, scheduler, os.path.join(folder.out_dir, "gpus"), log, None)
        outcomes += again
        todo += damaged
    # The reports whose own result is stored, as this run knows it: stored by its task (checked as it was written)
    # or read from the store (checked as it was read); the forced agreements' results, stored under other keys,
    # are not among them. Only the others are checked again before the folder may be kept.
    kept_now = {o.path for o in outcomes if o.stored} | (set(stored) - set(damaged))
    # The labels and prices of the day (stored results are price-free), then per-rank traces of one job are one
    # job (their rows' job, in place) before its GPUs agree.
    price_in_place([r.row for o in outcomes if o.failure is None for r in o.results] + rows, cfg)
    group_jobs([r.row for o in outcomes if o.failure is None for r in o.results] + rows, cfg)
    # A job spread over several reports: its GPUs keep the same iterations (a second round, usually empty).
    outcomes, rows, rosters, redone = _agree_across_reports(outcomes, rows, rosters, plans, cfg, cache, scheduler,
                                                             os.path.join(folder.out_dir, "gpus"), log)
    todo += [p for p in redone if p not in todo]
    with collector_paused():
        fleet, rosters = reduce_outcomes(outcomes, cfg, problems, rows, rosters, identical)
        fleet = accounting.attach(fleet, cfg, log)  # who held each report's GPUs (docs/definitions.md#coverage)
    failed_now = set(fleet.loc[fleet["status"] == "error", "report"]) if "status" in fleet else set()
    if cache is not None and (not all(p in kept_now or cache.stored(p) for p in identified if p not in identical)
                              or failed_now & set(identified)):
        # A report without a stored result is analysed again next time, and so is one that failed now
        # although a result of it is stored (a read time bound, memory, a lost worker): nothing to keep.
        digest = None
    # thousands of rows take a while to write (the fleet tables, the job records): the progress lines say so
    writing = (progress_factory(len(fleet), "fleet rows", doing="writing")
               if progress_factory and len(fleet) >= work_tasks.MANY_GPUS else None)
    try:
        wrote = folder.write(fleet, rosters, cfg, digest)
        if writing is not None:
            writing.advance(writing.total)
    finally:
        if writing is not None:
            writing.close()
    wait_for_writes()  # the in-process engine's columnar cache entry, written while analysing
    return RunResult(fleet=fleet, out_dir=folder.out_dir, reports=len(paths) + n_problems, todo=todo,
                     reused=len(stored) - len(damaged), failed=_failures(fleet), engine_problem=engine_problem,
                     wrote=wrote, skipped=skipped)


def duplicates(fleet: pd.DataFrame) -> list:
    """``(report, "duplicate of <file>")`` of each ``duplicate`` row of ``fleet`` (docs/inputs.md#duplicate-captures)."""
    if fleet.empty or "status" not in fleet:
        return []
    rows = fleet[fleet["status"] == DUPLICATE]
    return list(zip(rows["report"], rows["error"]))


def _failures(fleet: pd.DataFrame) -> list:
    """``(report, error)`` of each report with an error row (its first)."""
    if fleet.empty or "status" not in fleet:
        return []
    errors = fleet[fleet["status"] == "error"].drop_duplicates("report")
    return list(zip(errors["report"], errors["error"]))
