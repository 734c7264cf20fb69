"""Where a run meets the accounting: the identity joined to the fleet table after the reduce, the folder's
digest, and ``teams.csv`` / ``coverage.csv`` beside the other tables (only when ``accounting.files`` names
some file: a run without accounting writes what it always wrote)."""
from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone

import pandas as pd

from ..io import atomic_path, file_sha256
from ..text import csv_safe
from .allocations import NS_PER_S, read_files
from .joined import coverage, match_reports, period, teams, with_identity

#: The files a run with accounting writes beside the fleet tables.
ACCOUNTING_FILES = ("teams.csv", "coverage.csv")
#: ``fleet.attrs`` key set on a fleet table joined to the accounting (its files are then written).
JOINED = "accounting"
#: The coverage table's ``attrs`` key holding why its coverage is unknown (no allocation in the period was read).
UNKNOWN = "unknown"


def _read(cfg) -> tuple[list, list]:
    acct = cfg.accounting
    return read_files(acct.files, acct.team_label, acct.user_label)


def attach(fleet: pd.DataFrame, cfg, log=print) -> pd.DataFrame:
    """``fleet`` with each report's scheduler identity (:func:`~pipeline.accounting.joined.with_identity`);
    every problem of the accounting's files and of the matching logged as a ``WARNING: accounting: …`` line
    (the run goes on). ``fleet`` itself when no accounting file is configured."""
    if not cfg.accounting.files:
        return fleet
    allocations, problems = _read(cfg)
    matched, unmatched = match_reports(fleet, allocations, cfg)
    for problem in problems + unmatched:
        log(f"WARNING: accounting: {problem}")
    out = with_identity(fleet, matched)
    out.attrs[JOINED] = True
    return out


def planned(fleet: pd.DataFrame) -> list[str]:
    """The accounting files a run writes for ``fleet``: :data:`ACCOUNTING_FILES` when it was joined."""
    return list(ACCOUNTING_FILES) if fleet.attrs.get(JOINED) else []


def digest(base: str | None, cfg) -> str | None:
    """An output folder's inputs digest ``base`` with the accounting files' content mixed in (a changed
    ``sacct`` output rewrites the folder); ``base`` itself without accounting; None stays None."""
    if base is None or not cfg.accounting.files:
        return base
    h = hashlib.sha256(base.encode())
    for path in cfg.accounting.files:
        try:
            h.update(f"{path}\0{file_sha256(path)[0]}\0".encode())
        except OSError as exc:
            h.update(f"{path}\0{type(exc).__name__}\0".encode())
    return h.hexdigest()


def coverage_table(fleet: pd.DataFrame, cfg) -> pd.DataFrame | None:
    """The coverage of ``fleet`` (:func:`~pipeline.accounting.joined.coverage`: one row per allocation, what
    ``coverage.csv`` holds) from the accounting files ``cfg`` names; None when it names none (no accounting: no
    coverage at all). ``fleet`` is a table joined by :func:`attach`, or one read back from a folder it wrote."""
    if not cfg.accounting.files or "sched_job_id" not in fleet:
        return None
    allocations, problems = _read(cfg)
    within = period(allocations, cfg.accounting.period)
    cov = coverage(fleet, allocations, cfg.cost, within)
    if cov.empty:  # nothing usable was read: the coverage is unknown, never complete
        cov.attrs[UNKNOWN] = unknown_reason(cfg.accounting.files, allocations, problems, within)
    return cov


def unknown_reason(files, allocations: list, problems: list, within: tuple) -> str:
    """Why no allocation holding GPUs in the period ``within`` was read from ``files`` (``allocations`` and
    ``problems``: :func:`~pipeline.accounting.allocations.read_files`'): each file's cause, one clause."""
    if allocations:
        start, end, whence = within
        return (f"none of the {len(allocations)} allocation(s) holding GPUs in {', '.join(map(str, files))} falls "
                f"in the period {_utc(start)} to {_utc(end)} ({whence})")
    used = {p.partition(": ")[0] for p in problems}
    quiet = [f"{f}: lists no allocation holding GPUs (no started job or pod with a GPU)" for f in map(str, files)
             if f not in used]
    return "; ".join(problems + quiet)


def _utc(ns: int) -> str:
    return datetime.fromtimestamp(ns // NS_PER_S, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_tables(out_dir: str, fleet: pd.DataFrame, cfg, cov: pd.DataFrame | None = None) -> list[str]:
    """``teams.csv`` and ``coverage.csv`` in ``out_dir`` for a joined ``fleet`` (:func:`planned`); the
    relative paths written. The dollars are ``fleet``'s own; ``cov``: its :func:`coverage_table`, when known."""
    if not planned(fleet):
        return []
    cov = cov if cov is not None else coverage_table(fleet, cfg)
    for name, frame in (("coverage.csv", cov), ("teams.csv", teams(fleet, cov))):
        with atomic_path(os.path.join(out_dir, name)) as tmp:
            csv_safe(frame).to_csv(tmp, index=False)
    return list(ACCOUNTING_FILES)
