"""``gpu-idle compare`` run end to end: each side opened (a run folder or sweep state folder as the report reads it,
or reports analysed by ``run``'s driver), compared by :mod:`pipeline.compare`, gated, and written by the report's
formatter (docs/definitions.md#compare). The command line parses its options, calls :func:`compare_sides` and prints
what it returns. Here, above ``report/``, because a side that names reports is analysed by the driver
(:func:`~pipeline.runs.driver.drive`) and a side folder is opened by the report's one reader
(:func:`~pipeline.report.summary.load_results`: the folder's manifest vouches for what is read).
"""
from __future__ import annotations

import os
import shutil
import tempfile

from ..compare.result import compare, gate
from ..compare.sides import Side, read_side as side_of, report_kernel_reader
from ..inputs.discover import discover
from ..io import OutputError, folder_lock
from ..report.compare import CompareNotWritten, run_folder_reason, write_compare
from ..report.summary import gpu_doc, is_sweep_dir, load_results, run_hours
from ..text import message
from .driver import IncompleteOutputs, RunFolder, drive


class SideNotFound(ValueError):
    """A side names nothing to compare (no such file, no report in it): ``label`` is the side's."""

    def __init__(self, label: str, text: str):
        super().__init__(text)
        self.label = label


class OutRefused(ValueError):
    """``--out`` may not hold the comparison (a run or sweep folder, files gpu-idle compare did not write, another
    writer's lock), or a side could not be run into it: nothing written."""


class NotWritten(OSError):
    """The comparison could not be written (a full disk): the message names the folder and the cause."""


def read_side(folder: str, label: str, source: str, kernel_reader=None, jobs: set | None = None) -> Side:
    """The side ``label`` from the run folder or sweep state folder ``folder`` (its current night), read as the
    report reads it (:func:`~pipeline.report.summary.load_results`), then made a side by
    :func:`pipeline.compare.sides.read_side` (``kernel_reader``, ``jobs``: as there). Raises
    :class:`~pipeline.report.summary.ReportError` when ``folder`` holds no fleet table or its manifest does not
    vouch for it."""
    res = load_results(folder)
    return side_of(res.current, res.run_dir, folder, label, source, run_hours(res.run_dir),
                   lambda report, gpu_key: gpu_doc(res.run_dir, report, gpu_key), kernel_reader, jobs)


def is_side_folder(given: str) -> bool:
    """Whether the side ``given`` is a folder of stored results (a run folder or a sweep state folder), not reports."""
    return os.path.isdir(given) and (os.path.exists(os.path.join(given, "fleet.parquet")) or is_sweep_dir(given))


def check_reports(cfg, label: str, given: str) -> None:
    """Check that the side ``label`` (``given``: a path, folder, glob or URL that is not a run or sweep folder) names
    at least one report (:func:`~pipeline.inputs.discover.discover`); else :class:`SideNotFound` naming the side and
    the path, with what the search found (e.g. no such file)."""
    paths, problems = discover([given], storage=cfg.storage, skipped=[])
    if not paths:
        found = "; ".join(dict.fromkeys(str(why) for _, why in problems)) or "no report or trace in it"
        raise SideNotFound(label, f"{label} side {given}: nothing to compare ({found})")


def check_out(out_dir: str | None) -> None:
    """:class:`OutRefused` when ``out_dir`` may not hold a comparison (:func:`~pipeline.report.compare.run_folder_reason`)."""
    refused = run_folder_reason(out_dir) if out_dir is not None else ""
    if refused:
        raise OutRefused(refused)


def compare_sides(cfg, before: str, after: str, out_dir: str | None, cache, force: bool = False,
                  fail_above: float | None = None, fail_above_total: float | None = None, strict: bool = False,
                  log=None) -> dict:
    """Compare the sides ``before`` and ``after`` (each a run folder, a sweep state folder, or reports as ``gpu-idle
    run`` takes them) and, with ``out_dir``, write the comparison there (compare.csv, compare.json, compare.html,
    records/; a side that names reports is run into ``out_dir/before`` or ``out_dir/after``, else into a temporary
    folder removed afterwards). ``cache``: the result cache of the runs (None: none). ``force``: show the figures of
    a job that is not comparable, marked. With ``fail_above`` or ``fail_above_total``, the result holds its ``gate``
    (:func:`pipeline.compare.result.gate`). ``log``: one line per side run (stderr). Returns the finished comparison.

    Every side is checked before anything is written. Raises :class:`SideNotFound` (a side names nothing),
    :class:`OutRefused` (``out_dir`` may not hold it; nothing written), :class:`~pipeline.report.summary.ReportError`
    (a side folder cannot be read) and :class:`NotWritten` (a file could not be written)."""
    check_out(out_dir)
    given_sides = (("before", before), ("after", after))
    stored = [is_side_folder(given) for _, given in given_sides]
    for (label, given), done in zip(given_sides, stored):  # every side checked before anything is written
        if not done:
            check_reports(cfg, label, given)
    scratch = None
    if out_dir is None and not all(stored):  # reports to analyse, nowhere asked for: a folder removed afterwards
        scratch = tempfile.mkdtemp(prefix="gpu-idle-compare-sides-")
    try:
        folders = []
        for (label, given), done in zip(given_sides, stored):
            if done:
                folders.append(given)
                continue
            side_out = os.path.join(out_dir or scratch, label)
            try:
                ran = drive(cfg, [given], RunFolder(side_out, log=lambda *a, **k: None), cache, None,
                            log=lambda *a, **k: None)
            except (OutputError, IncompleteOutputs) as exc:
                raise OutRefused(message(exc)) from exc
            where = f"run folder {side_out}" if scratch is None else "a temporary run folder, removed afterwards"
            if log is not None:
                log(f"gpu-idle compare: {label}: {len(ran.todo)} report(s) analysed, {ran.reused} reused ({where})")
            folders.append(side_out)
        reader = report_kernel_reader(cfg)
        sides = tuple(read_side(f, label, given, reader) for f, (label, given) in zip(folders, given_sides))
        result = compare(sides, force=force, min_iterations=cfg.confidence.medium_min_iterations)
        if fail_above is not None or fail_above_total is not None:
            result["gate"] = gate(result, fail_above, fail_above_total, strict)
        if out_dir is not None:
            try:
                with folder_lock(out_dir, command="gpu-idle compare"):
                    write_compare(out_dir, result, sides)
            except (CompareNotWritten, OutputError) as exc:  # not gpu-idle's files, another writer: nothing done
                raise OutRefused(message(exc)) from exc
            except OSError as exc:
                raise NotWritten(f"{out_dir}: not written ({message(exc)})") from exc
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    return result
