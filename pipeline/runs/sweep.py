"""The nightly sweep: discover, skip what is already done, analyse the rest, keep history.

State folder ``S`` (``sweep.state_dir``):

``S/results/<content>-<settings>-<code>.parquet`` + ``.json`` + ``.sums.json``
    the fleet rows and the per-GPU rosters/timelines of one report (and their checksums, with those of
    the cache entries they came from: :mod:`pipeline.checksums`), analysed
    under one configuration by one version of the code (:mod:`pipeline.store.results`:
    ``<content>`` is the SHA-256 of the report's bytes, or for remote objects of
    their ETag, size and mtime; ``<settings>`` the hash of every setting that
    changes a number and of the report's labels; ``<code>`` the pipeline's
    source). Written atomically as each report finishes, so a sweep killed
    half-way keeps what it finished and a restart does only the rest.
``S/history/run_date=YYYY-MM-DD/fleet.parquet``
    that night's whole fleet table (hive partitioning: read the history with
    ``pyarrow.dataset`` or ``pandas.read_parquet(S/history)``).
``S/nights/YYYY-MM-DD/``
    that night's outputs, as ``gpu-idle run`` writes them (fleet.csv, jobs.csv,
    clusters.csv, gpus/, records/) plus the HTML report when available, and
    ``.manifest.json``, written last: the digest of what the night was made of
    (configuration, every report's content key, discovery problems, the code),
    the files it holds (only those the product wrote: a file a person added is
    never listed, never replaced), what its report.html was rendered from and,
    under ``not_written``, what the night should hold and does not.
``S/identity-index.json``
    the content hash of each local report with the (size, mtime, ctime, inode)
    it had when hashed, so an untouched file is not read again
    (:class:`~pipeline.store.results.IdentityIndex`).

A night whose every report is already stored and whose inputs digest equals
that of a complete earlier night (or of an earlier run of the same night)
analyses nothing and writes nothing new: the tables, gpus/ and records/ of that
night are copied (reflinked where the file system offers it; never hard-linked:
no two nights share a writable file) into the new night's folder, the history
partition likewise, and only report.html is
rendered again when the history it shows has changed. No cluster is started
and the stored results are not read.

Failed reports are not stored as results: they are tried again every night.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import stat
import sys
import time

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..accounting import hooks as accounting
from ..code_keys import rendered_code
from ..config import Config
from ..inputs.discover import skipped_note
from ..io import (DATE_RE, FolderBusy, OutputError, atomic_path, copy_file, current_night, dated_dirs, file_entry,
                  folder_lock, in_future, not_to_overwrite, os_cause, plain_scalar, real_dir, same_file, today_utc)
from ..compare.result import compare
from ..compare.sides import changed_jobs, report_kernel_reader
from ..report.compare import COMPARE_MANIFEST, CompareNotWritten, remove_compare, write_compare
from .compare import read_side
from .driver import (IncompleteOutputs, OutputFolder, drive, foreign_targets, incomplete, planned_files,
                     refuse_foreign, stale_note, write_documents)
from ..fleet.outputs import unrewritten
from ..schema import NOT_ANALYSED
from ..fleet.pricing import PRICING, pricing_settings
from ..report.summary import NIGHT_COMPARISON, DamagedPart, ReportError, history_part, vouched_folder
from ..store.results import (MANIFEST, ResultCache, ResultStore, code_digest, config_hash, drop_manifest,
    manifest_holds, read_manifest, report_identity, result_key, write_folder_manifest)


@dataclasses.dataclass
class SweepSummary:
    """What one sweep did. ``failed``: ``(report, error)`` pairs."""

    night: str
    reports: int = 0
    analysed: int = 0
    reused: int = 0
    failed: list = dataclasses.field(default_factory=list)
    out_dir: str = ""
    engine_problem: str | None = None
    #: What the night should hold and does not (``{"report.html": why}``; its manifest says the same).
    not_written: dict = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        causes = "; ".join(err for _, err in self.failed[:3])
        more = f" (+{len(self.failed) - 3} more)" if len(self.failed) > 3 else ""
        return (f"sweep {self.night}: {self.reports} report(s): {self.analysed} analysed, {self.reused} reused, "
                f"{len(self.failed)} failed" + (f": {causes}{more}" if self.failed else ""))


def _html_inputs(state_dir: str, night: str, inputs: str) -> str:
    """Digest of what a night's report.html shows and is rendered by: the night's inputs, the history up
    to the night (each partition file's and night table's size, mtime and inode) and the code and
    templates that render it (:func:`pipeline.code_keys.rendered_code`)."""

    stamps = []
    for sub, prefix in (("history", "run_date="), ("nights", "")):
        for date, folder in sorted(dated_dirs(os.path.join(state_dir, sub), prefix).items()):
            if date > night:
                continue
            files = ([os.path.join(folder, "fleet.parquet")] if sub == "nights"
                     else [os.path.join(folder, f) for f in sorted(os.listdir(folder)) if f.endswith(".parquet")])
            for path in files:
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                stamps.append([os.path.relpath(path, state_dir), st.st_size, st.st_mtime_ns, st.st_ino])
    doc = {"inputs": inputs, "night": night, "history": stamps, "code": rendered_code()}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def product_files(night_dir: str, known: dict | None = None) -> dict:
    """The files of the night folder ``night_dir`` the product can prove it wrote, ``relative path -> entry``
    (size and SHA-256): those its manifest lists (claimed by name: as they are now; with an entry: only while
    they still hold it, a file a person changed since is theirs) and those the night's comparison lists
    (:data:`~pipeline.report.compare.COMPARE_MANIFEST`, and that record itself). A file a person added is
    never listed (never the product's to replace or remove). ``known``: ``relative path -> entry`` of files this
    sweep has proven to hold that entry (copied from a night whose manifest held, or that night's own files as it
    held: :func:`reuse_night`): taken as they are, unhashed, while the manifest lists the file by name or with that
    entry (a file the sweep wrote again since is listed with its new one) and it is a regular file of that size.
    Every reader checks what it reads against the manifest (a file changed since is never taken as the product's)."""

    def proven(doc: dict | None, prefix: str) -> dict:
        out = {}
        for rel, entry in ((doc or {}).get("files") or {}).items():
            path = os.path.join(night_dir, prefix + rel)
            given = (known or {}).get(prefix + rel)
            if given is not None and entry in (None, given) and _regular_of_size(path, given["size"]):
                out[prefix + rel] = given
            elif entry is None and same_file(path, None):
                out[prefix + rel] = file_entry(path)
            elif entry is not None and same_file(path, entry):
                out[prefix + rel] = entry
        return out

    compared = os.path.dirname(NIGHT_COMPARISON)
    files = proven(read_manifest(night_dir), "")
    files = {rel: e for rel, e in files.items() if not rel.startswith(compared + "/")}
    record = read_manifest(os.path.join(night_dir, compared), COMPARE_MANIFEST)
    if record is not None:
        files.update(proven(record, compared + "/"))
        files[f"{compared}/{COMPARE_MANIFEST}"] = file_entry(os.path.join(night_dir, compared, COMPARE_MANIFEST))
    return files


def write_manifest(state_dir: str, night: str, inputs: str | None, html: str | None, pricing: dict | None,
                   not_written: dict | None = None, known: dict | None = None) -> None:
    """Record the night's inputs digest (None: never reused), its files (:func:`product_files`, with their sizes
    and SHA-256; ``known``: see there), its report.html's inputs (``None``: not rendered), the settings that priced
    its fix-first columns (:func:`pipeline.fleet.pricing.pricing_settings`; None: not known) and, under
    ``not_written``, what the night should hold and does not (``{"report.html": why}``; absent when nothing).
    Raises OSError when it cannot be written."""
    out = os.path.join(state_dir, "nights", night)
    report = "report.html" if os.path.exists(os.path.join(out, "report.html")) else None
    extra = {"not_written": dict(not_written)} if not_written else {}
    write_folder_manifest(out, product_files(out, known), inputs, html=html, report=report, **{PRICING: pricing},
                          **extra)


def _regular_of_size(path: str, size: int) -> bool:
    """Whether ``path`` is a regular file (not a link) of ``size`` bytes."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == size


def reuse_night(state_dir: str, night: str, inputs: str, not_written: dict | None = None) -> tuple[str, str] | None:
    """Make ``nights/<night>`` from a complete earlier night with the same ``inputs`` digest, analysing nothing.

    Looks at the night itself first (an unchanged rerun of the same night: nothing to
    write unless the history its report shows changed), then the other nights, latest
    first. The source night's files (report.html excepted) are copied into the
    night's folder and its history partition into ``history/run_date=<night>``, and the files an
    earlier sweep of this night wrote that the source has not are removed (as its manifest lists them,
    unchanged since); report.html is rendered again unless the manifest shows it was rendered from the
    same history (what could not be, ``{"report.html": why}``, goes into ``not_written`` and the manifest). The
    source's files are copied (reflinked where the file system can): no two nights share a writable inode.
    A file of this night's folder the copy would replace and the product cannot prove it wrote (a person's)
    is never replaced: :class:`~pipeline.io.OutputError` naming it, nothing written. Returns ``(the night's folder, the night it was made from)``, or None when no
    night matches (nothing is written then).
    """
    nights_dir = os.path.join(state_dir, "nights")
    names = sorted(os.listdir(nights_dir), reverse=True) if os.path.isdir(nights_dir) else []
    for source in [night] + [n for n in names if n != night]:
        manifest = read_manifest(os.path.join(nights_dir, source))
        if (manifest is not None and manifest.get("inputs") == inputs
                and manifest_holds(os.path.join(nights_dir, source), manifest)):
            break
    else:
        return None
    out = os.path.join(nights_dir, night)
    history = os.path.join(state_dir, "history", f"run_date={night}", "fleet.parquet")
    proven = set(manifest["files"])   # the night's own files, as its manifest held
    if source != night:
        earlier = drop_manifest(out)   # what this night's earlier sweep wrote (its manifest lists it)
        compared = os.path.dirname(NIGHT_COMPARISON) + "/"   # the source's comparison is not this night's
        linked = [rel for rel in manifest["files"] if rel != "report.html" and not rel.startswith(compared)]
        taken = foreign_targets(out, linked, time.time_ns())
        if taken:
            raise not_to_overwrite(out, taken, writer="sweep")
        for rel in linked:
            copy_file(os.path.join(nights_dir, source, rel), os.path.join(out, rel))
        drop_manifest(out, claim=linked)   # ours now: the report renders its GPU pages over them
        # The night is the source's now: files of its earlier sweep the source has not (records of other
        # jobs, per-GPU files and pages of other GPUs) go, when they still hold what that sweep wrote.
        for rel, entry in sorted(earlier.items()):
            path = os.path.join(out, rel)
            if (rel not in manifest["files"] or rel.startswith(compared)) and rel != "report.html" \
                    and same_file(path, entry):
                os.unlink(path)
        manifest = dict(manifest, html=None)
        proven = set(linked)   # copies of the source's files, as its manifest held
    if source != night or not os.path.exists(history):
        copy_file(os.path.join(out, "fleet.parquet"), history)
    html = _html_inputs(state_dir, night, inputs)
    if manifest.get("html") != html or not os.path.exists(os.path.join(out, "report.html")):
        # its documents whole (the report reads them through their manifest), not yet to be reused; the files just
        # proven to hold the source's entries (its manifest held, checked above) are not hashed again
        known = {rel: e for rel, e in manifest["files"].items() if rel in proven}
        write_manifest(state_dir, night, None, None, manifest.get(PRICING), known=known)
        problems: dict = {}
        try:
            drawn = write_html(state_dir, out, night, problems)
        except OSError as exc:  # a full disk: the night stays without a manifest, and says so
            raise IncompleteOutputs(f"{out}: the outputs are incomplete ({os_cause(exc)}): missing report.html; "
                                    "the folder vouches for nothing until a run completes it (free space, "
                                    "run again)") from exc
        write_manifest(state_dir, night, inputs, html if drawn else None, manifest.get(PRICING), problems, known)
        if not_written is not None:
            not_written.update(problems)
    return out, source


class NightFolder(OutputFolder):
    """One night of the sweep: ``S/nights/<night>/`` (the documents, report.html and the
    manifest) and ``S/history/run_date=<night>/fleet.parquet``; an unchanged night is made
    from an earlier one with the same inputs (:func:`reuse_night`)."""

    def __init__(self, state_dir: str, night: str, log=print):
        self.state_dir, self.night, self.log = state_dir, night, log
        self.out_dir = os.path.join(state_dir, "nights", night)
        self.plots = plot_cache_dir(state_dir)
        #: What the night should hold and does not (``{"report.html": why}``): said by the exit status.
        self.not_written: dict = {}

    def prepare(self) -> None:
        """As :meth:`OutputFolder.prepare`, after refusing a night folder holding files the product cannot
        prove it wrote where it writes (the rule of ``run --out``: :func:`~pipeline.runs.driver.refuse_foreign`)."""
        refuse_foreign(self.out_dir, writer="sweep")
        super().prepare()

    def on_plan(self, paths, todo, reused) -> None:
        self.log(f"sweep {self.night}: {len(paths)} report(s) found, {reused} unchanged, {len(todo)} to analyse")

    def reuse(self, digest: str) -> pd.DataFrame | None:
        try:
            found = reuse_night(self.state_dir, self.night, digest, self.not_written)
        except OSError as exc:
            raise IncompleteOutputs(f"{self.out_dir}: the outputs are incomplete ({os_cause(exc)}): the night "
                                    "could not be made from an earlier one with the same inputs; no history row "
                                    f"for the night (history/run_date={self.night}) unless its files were all "
                                    "in place; free space and run again") from exc
        if found is None:
            return None
        out, source = found
        self.log(f"sweep {self.night}: nothing changed since " + (
            "this night's last sweep: its files kept" if source == self.night else
            f"night {source}: its files copied into {out}, its report rendered for this night"))
        return pd.read_parquet(os.path.join(out, "fleet.parquet"))

    def write(self, fleet, rosters, cfg, digest) -> str:
        return write_night(self.state_dir, self.night, fleet, rosters, cfg, digest, log=self.log,
                           since_ns=self.changing_ns, not_written=self.not_written)


#: The sweep's lock file in its state folder (:func:`sweep_lock`).
SWEEP_LOCK = ".sweep.lock"

#: Another sweep holds the state folder; the message says which process and since when.
SweepBusy = FolderBusy


def sweep_lock(state_dir: str):
    """Hold ``S/.sweep.lock`` (:func:`pipeline.io.folder_lock`, the one lock of every writer) while a sweep
    runs, so that two sweeps on one state folder never analyse the same reports twice and overwrite each
    other's night.

    Raises:
        SweepBusy: another process holds it (its pid and start time are named).
        OutputError: the state folder cannot be created.
    """
    return folder_lock(state_dir, SWEEP_LOCK, "another sweep is running on this state folder", "gpu-idle sweep",
                       keep=True)


class FutureNight(ValueError):
    """A ``--night`` far ahead of the clock (:func:`pipeline.io.in_future`), not forced: it would stay the
    latest night of the state folder for years, every real night's report showing a change against it."""


def sweep(cfg: Config, inputs=(), state_dir: str | None = None, night: str | None = None, force=(),
          scheduler: str | None = None, log=print, progress_factory=None,
          future: bool = False) -> tuple[pd.DataFrame, SweepSummary]:
    """Run one nightly sweep (:func:`pipeline.runs.driver.drive` into a :class:`NightFolder`).

    Args:
        cfg: configuration (``cfg.sweep`` gives the default inputs and state folder).
        inputs: extra inputs on top of ``cfg.sweep.inputs``.
        state_dir: overrides ``cfg.sweep.state_dir``.
        night: ``YYYY-MM-DD`` of this run (default: today, UTC).
        force: report paths to analyse again even if a result exists (``make rerun``).
        scheduler: a Dask scheduler address (else the config's, else a LocalCluster; a
            night with nothing new to analyse starts none).
        progress_factory: see :func:`~pipeline.runs.driver.drive`.
        future: write ``night`` even when it is in the future (:func:`pipeline.io.in_future`).
    Returns:
        ``(fleet table of the night, summary)``. The night's table holds every
        discovered report: reused results, new results and error rows. When every
        report is stored and an earlier night was made of the same inputs, that
        night's outputs are reused (:func:`reuse_night`) and the table is read
        back from the night's ``fleet.parquet``.
    Raises:
        ValueError: ``night`` is not a date ``YYYY-MM-DD``; :class:`FutureNight` (a ValueError): it is
            in the future and ``future`` is not set (checked before anything is written).
        SweepBusy: another sweep is running on the same state folder.
        OutputError: the state folder or the night's folder cannot be written (found before
            any analysis; a report's result that cannot be stored later is only warned about
            on stderr: that report is analysed again next night).
    """
    state = state_dir or cfg.sweep.state_dir
    night = check_night(night) if night else today_utc()
    if in_future(night) and not future:
        raise FutureNight(f"--night {night} is in the future (today is {today_utc()}, UTC): it would stay the "
                          "state folder's latest night; give --future-night to write it anyway")
    with sweep_lock(state):
        cache = ResultCache.for_sweep(state, cfg)
        if cache.removed_leftovers:
            log(f"sweep {night}: removed temporary files of an interrupted sweep in {cache.store.dir}")
        folder = NightFolder(state, night, log)
        result = drive(cfg, list(cfg.sweep.inputs) + list(inputs), folder, cache, scheduler,
                       lambda text: log(f"sweep {night}: {text}" if text.startswith("WARNING") else text),
                       force, progress_factory)
    note = skipped_note(result.skipped)
    if note:
        log(f"sweep {night}: {note}")
    fleet = result.fleet
    new = fleet[fleet["report"].isin(result.todo) & ~fleet["status"].isin(NOT_ANALYSED)] if len(fleet) else fleet
    summary = SweepSummary(night=night, reports=result.reports, reused=result.reused,
                           analysed=int(new["report"].nunique()) if len(new) else 0,
                           failed=result.failed, out_dir=result.out_dir, engine_problem=result.engine_problem,
                           not_written=dict(folder.not_written))
    return fleet, summary


def check_night(night: str) -> str:
    """``night`` when it is a real date written ``YYYY-MM-DD`` (it names folders under the state
    folder: nothing else may reach them, e.g. ``../../x``). Raises ValueError otherwise."""
    if not DATE_RE.match(night or ""):
        raise ValueError(f"--night {night!r}: not a date written YYYY-MM-DD")
    try:
        dt.date.fromisoformat(night)
    except ValueError as exc:
        raise ValueError(f"--night {night!r}: not a real date ({exc})") from exc
    return night


def write_night(state_dir: str, night: str, fleet: pd.DataFrame, rosters: dict, cfg: Config,
                inputs: str | None = None, log=None, since_ns: int = 0, not_written: dict | None = None) -> str:
    """Write the night's history partition and output folder; returns the folder.

    The folder's manifest is marked as changing first (it vouches for nothing) and written again last,
    with ``inputs`` (the night's :func:`inputs_digest`; None: a rebuilt night, never reused), so a later
    sweep with the same inputs can reuse the night (:func:`reuse_night`); a night written half-way is
    never reused. The history partition is written only once the night's documents are: a night whose
    outputs could not be completed has none. ``log``: where to say that files of an earlier
    sweep of the night with other inputs were removed (None: nowhere). ``since_ns``: when the folder
    was marked as changing (:meth:`~pipeline.runs.driver.OutputFolder.begin`; 0: now), so that the
    files written since count as written when some are missing. A file the night would write that the
    product cannot prove it wrote (a person's, or one of ours a person changed since:
    :func:`~pipeline.runs.driver.foreign_targets`) is never replaced: nothing is written then. Once its
    documents are written the night's manifest vouches for them (complete, no inputs digest yet), so that
    its report and comparison read them as every reader does; what could not be written of those
    (``{"report.html": why}``) goes into ``not_written`` (when given) and the manifest.

    Raises:
        IncompleteOutputs: a file could not be written (a full disk): the message says what is missing.
        OutputError: a file the night writes is not the product's (:func:`~pipeline.io.not_to_overwrite`).
    """
    out = os.path.join(state_dir, "nights", night)
    history = os.path.join(state_dir, "history", f"run_date={night}", "fleet.parquet")
    row = f"no history row for the night (history/run_date={night})"
    targets = planned_files(fleet) + ["report.html"]
    try:
        os.makedirs(out, exist_ok=True)
        drop_manifest(out)
        since = since_ns or os.lstat(os.path.join(out, MANIFEST)).st_mtime_ns
    except OSError as exc:
        raise incomplete(out, targets, since_ns or time.time_ns(), exc, f"; {row}",
                         unrewritten(out, fleet)) from exc
    taken = foreign_targets(out, planned_files(fleet), since)
    if taken:
        raise not_to_overwrite(out, taken, " (the results are stored: nothing is analysed again)", writer="sweep")
    problems: dict = {}
    try:
        written, _ = write_documents(out, fleet, rosters, cfg)
        write_manifest(state_dir, night, None, None, pricing_settings(cfg))   # the documents whole
    except OSError as exc:
        raise incomplete(out, targets, since, exc, f"; {row}", unrewritten(out, fleet)) from exc
    note = stale_note(written)
    if log is not None and note:
        log(f"sweep {night}: {note}")
    try:
        compare_with_last_night(state_dir, night, cfg, log, problems)
        # The history row only once the night's documents are complete (its report reads the history).
        real_dir(os.path.dirname(history))
        with atomic_path(history) as tmp:
            pq.write_table(pa.Table.from_pandas(fleet, preserve_index=False), tmp)
        html = write_html(state_dir, out, night, problems)
        write_manifest(state_dir, night, inputs, _html_inputs(state_dir, night, inputs) if html and inputs else None,
                       pricing_settings(cfg), problems)
    except BaseException as exc:  # a full disk, or an interruption (SIGINT, SIGTERM): no row for a half night
        with contextlib.suppress(FileNotFoundError):
            os.unlink(history)
        with contextlib.suppress(OSError):
            drop_manifest(out)   # the night vouches for nothing until a sweep completes it
        if isinstance(exc, OSError):
            raise incomplete(out, targets, since, exc, f"; {row}") from exc
        raise
    if not_written is not None:
        not_written.update(problems)
    else:
        for what, why in problems.items():
            _said(what, why, None)
    return out


def compare_with_last_night(state_dir: str, night: str, cfg: Config, log=None, problems: dict | None = None) -> str | None:
    """``nights/<night>/compare/``: the jobs whose figures changed since the last earlier night, compared
    with it by ``gpu-idle compare``'s machinery (:mod:`pipeline.compare`, written by :mod:`pipeline.report.compare`;
    the same verdict, figures
    withheld when not comparable), or an earlier comparison of this night removed when no job changed
    (docs/definitions.md#compare-in-the-sweep). Returns the comparison's folder, or None. A comparison that
    fails for another reason than a file not written leaves the night as it is and is said in ``problems``
    (``{"compare/compare.html": why}``; None: on stderr)."""

    out = os.path.join(state_dir, "nights", night)
    folder = os.path.join(out, os.path.dirname(NIGHT_COMPARISON))
    earlier = {d: p for d, p in dated_dirs(os.path.join(state_dir, "nights")).items()
               if d < night and os.path.exists(os.path.join(p, "fleet.parquet"))}
    jobs = set()
    if earlier:
        last = max(earlier)
        try:   # the last night's table read only as its manifest vouches for it (the comparison itself, when
            # a job changed, reads the night as every reader does: its per-GPU files and records too)
            vouched_folder(earlier[last], dirs=())
        except ReportError as exc:
            remove_compare(folder)
            _said(NIGHT_COMPARISON, str(exc), problems)
            return None
        jobs = changed_jobs(pd.read_parquet(os.path.join(earlier[last], "fleet.parquet")),
                                pd.read_parquet(os.path.join(out, "fleet.parquet")))
    if not jobs:
        remove_compare(folder)
        return None
    def make():
        reader = report_kernel_reader(cfg)
        sides = (read_side(earlier[last], "before", f"night {last}", reader, jobs),
                 read_side(out, "after", f"night {night}", reader, jobs))
        result = compare(sides, min_iterations=cfg.confidence.medium_min_iterations)
        try:
            return write_compare(folder, result, sides)
        except CompareNotWritten as exc:   # files of someone else's in compare/: kept, the night goes on
            _said(NIGHT_COMPARISON, str(exc), problems)
            return None

    if _unless_broken(NIGHT_COMPARISON, make, problems) is None:
        return None
    if log is not None:
        log(f"sweep {night}: {len(jobs)} changed job(s) compared with night {last} in {folder}")
    return folder


def write_html(state_dir: str, night_dir: str, night: str | None = None, problems: dict | None = None) -> str | None:
    """The manager report of the state folder into the night's folder (``night``: the
    night it reports, its history up to it; default the latest).

    The night's tables are already written when this runs; a failure here is
    said in ``problems`` (``{"report.html": why}``; None: on stderr) and leaves them in place (returns ``None``), except a file that cannot be
    written (OSError: a full disk), raised so that the night is not sealed without it. Plots whose
    inputs did not change are taken from ``S/cache/plots`` (kept
    :data:`PLOT_CACHE_DAYS` days after their last use).
    """
    def make():
        from ..report.html import write_report  # jinja2, markdown, matplotlib: only the night's HTML

        cache = plot_cache_dir(state_dir)
        start = time.time()
        path = write_report(state_dir, os.path.join(night_dir, "report.html"), night=night, plot_cache=cache)
        _prune(cache, start - PLOT_CACHE_DAYS * 86400)
        return path

    return _unless_broken("report.html", make, problems)


def _unless_broken(what: str, make, problems: dict | None = None):
    """``make()``; when it fails for another reason than a file not written (OSError: raised, so that the night
    is not sealed without it), None and why, in ``problems[what]`` (None: one ``gpu-idle sweep: <what> not
    written: …`` line on stderr): the night's tables must survive a broken page."""

    try:
        return make()
    except OSError:
        raise
    except Exception as exc:  # noqa: BLE001 - any other failure is said, not raised
        why = str(exc) if isinstance(exc, OutputError) else f"{type(exc).__name__}: {exc}"
        _said(what, why, problems)
        return None


def _said(what: str, why: str, problems: dict | None) -> None:
    """``why`` ``what`` was not written: into ``problems`` (the exit status and the manifest say it), else on stderr."""
    if problems is not None:
        problems[what] = why
    else:
        print(f"gpu-idle sweep: {what} not written: {why}", file=sys.stderr)


#: Days a cached plot (``S/cache/plots``) is kept after it was last used.
PLOT_CACHE_DAYS = 7


def plot_cache_dir(state_dir: str) -> str:
    """``S/cache/plots``: the report's plots and GPU-page timelines kept by their inputs across nights
    (:func:`pipeline.report.plots.cached`); the workers draw new GPUs' timelines into it."""
    return os.path.join(state_dir, "cache", "plots")


def _prune(folder: str, before: float) -> None:
    """Delete the files in ``folder`` last modified before ``before`` (a Unix time)."""
    for entry in os.scandir(folder) if os.path.isdir(folder) else ():
        try:
            if entry.is_file() and entry.stat().st_mtime < before:
                os.unlink(entry.path)
        except OSError:
            pass


#: Fleet columns that tell a report's results under its job's forced agreement from its own.
_WINDOW_COLUMNS = ("gpu_key", "window_start_ns", "window_end_ns", "kept_iterations", "excluded_iterations")


def _night_rosters(store: ResultStore, key: str, report: str, rows: pd.DataFrame) -> dict:
    """The rosters of ``report`` stored under ``key``, or under one of its forced-agreement variants
    (``<key>-<agreement>``: a job spread over several reports, :mod:`pipeline.work.agreement`)
    whose rows have the night's windows (``rows``: the night's fleet rows of the report)."""
    cols = [c for c in _WINDOW_COLUMNS if c in rows]

    def windows(records: list[dict]) -> list:
        # compared as Python values (exact ints, None where missing), never through a frame's float64
        return sorted(tuple(str(plain_scalar(r.get(c))) for c in cols) for r in records)

    got_rows, got_rosters, _ = store.get(key, report)
    want = windows(rows.to_dict("records"))
    if windows(got_rows) == want:
        return got_rosters
    for name in sorted(n[: -len(".parquet")] for n in os.listdir(store.dir)
                       if n.startswith(key + "-") and n.endswith(".parquet")):
        if store.has(name):
            other_rows, other_rosters, _ = store.get(name, report)
            if windows(other_rows) == want:
                return other_rosters
    return got_rosters


def rebuild(cfg: Config, state_dir: str | None = None, night: str | None = None,
            not_written: dict | None = None) -> str:
    """``make report``: rebuild a night's outputs from stored results, analysing nothing.

    Uses the night's history table (default: the latest night) and the stored
    rosters of its reports, holding the state folder's lock (:func:`sweep_lock`) as a sweep does.
    Returns the night's folder. The folder's manifest has no inputs digest (see
    :func:`write_night`): a later sweep rewrites it rather than reusing it. ``not_written``: see
    :func:`write_night`.

    Raises:
        FileNotFoundError: there is no history yet, or no such night.
        SweepBusy: a sweep (or another rebuild) holds the state folder.
    """
    state = state_dir or cfg.sweep.state_dir
    with sweep_lock(state):
        return _rebuild(cfg, state, night, not_written)


def _rebuild(cfg: Config, state: str, night: str | None, not_written: dict | None = None) -> str:
    """:func:`rebuild`, with the state folder held."""
    nights = sorted(d.split("=", 1)[1] for d in os.listdir(os.path.join(state, "history")) if "=" in d)
    if not nights:
        raise FileNotFoundError(f"{state}: no sweep history yet (run `gpu-idle sweep` first)")
    if night and night not in nights:
        raise FileNotFoundError(f"{state}: no night {night} in the sweep history (nights: {', '.join(nights)})")
    night = night or current_night(nights)
    if night is None:
        raise FileNotFoundError(f"{state}: every night in the sweep history is in the future ({', '.join(nights)}); "
                                "--night names one")
    part = os.path.join(state, "history", f"run_date={night}", "fleet.parquet")
    try:   # the night's own history file, read as the trend reads every part: a damaged one is named, no traceback
        fleet = history_part(part)
    except DamagedPart as exc:
        raise FileNotFoundError(f"{part}: night {night}'s history file is damaged ({exc}): nothing rebuilt; run the "
                                f"sweep for that night again (gpu-idle sweep --night {night} --force ...)") from None
    store = ResultStore(state)
    rosters: dict = {}
    chash, code = config_hash(cfg), code_digest()
    for report in fleet.loc[~fleet["status"].isin(NOT_ANALYSED), "report"].unique():
        try:
            key = result_key(report_identity(report, cfg.storage.options), chash, cfg.labels_for(report), code)
        except OSError:
            continue  # the report is gone: its rows stay, its rosters cannot be found again
        # The night's table may come from earlier code: then so may its rosters.
        key = key if store.has(key) else store.find(key.rsplit("-", 1)[0] + "-")
        if key is not None:
            rosters.update(_night_rosters(store, key, report, fleet[fleet["report"] == report]))
    fleet = accounting.attach(fleet, cfg)  # who held the GPUs, from the accounting as configured now
    return write_night(state, night, fleet, rosters, cfg, not_written=not_written)
