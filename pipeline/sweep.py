"""The nightly sweep: discover, skip what is already done, analyse the rest, keep history.

State folder ``S`` (``sweep.state_dir``):

``S/results/<content>-<config>.parquet`` + ``.json``
    the fleet rows and the per-GPU rosters/timelines of one report, analysed
    under one configuration. ``<content>`` is the SHA-256 of the report's bytes
    (for remote objects: of their ETag, size and mtime), ``<config>`` the hash of
    every setting that changes a number (analysis, categories, window, cost,
    labels). Written atomically as each report finishes, so a sweep killed
    half-way keeps what it finished and a restart does only the rest.
``S/history/run_date=YYYY-MM-DD/fleet.parquet``
    that night's whole fleet table (hive partitioning: read the history with
    ``pyarrow.dataset`` or ``pandas.read_parquet(S/history)``).
``S/nights/YYYY-MM-DD/``
    that night's outputs, as ``gpu-idle run`` writes them (fleet.csv, jobs.csv,
    clusters.csv, gpus/, records/) plus the HTML report when available.

Failed reports are not stored as results: they are tried again every night.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import sys

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .config import Config
from .discover import discover
from .export import content_key
from .fleet import atomic_path, build_fleet, error_row, write_json, write_outputs
from .report.medical import write_records


@dataclasses.dataclass
class SweepSummary:
    """What one sweep did. ``failed``: ``(report, error)`` pairs."""

    night: str
    reports: int = 0
    analysed: int = 0
    reused: int = 0
    failed: list = dataclasses.field(default_factory=list)
    out_dir: str = ""

    def line(self) -> str:
        causes = "; ".join(err for _, err in self.failed[:3])
        more = f" (+{len(self.failed) - 3} more)" if len(self.failed) > 3 else ""
        return (f"sweep {self.night}: {self.reports} report(s): {self.analysed} analysed, {self.reused} reused, "
                f"{len(self.failed)} failed" + (f": {causes}{more}" if self.failed else ""))


def config_hash(cfg: Config) -> str:
    """SHA-256 of every setting that can change a fleet number (not dask, cache or paths)."""
    relevant = {k: dataclasses.asdict(cfg)[k] for k in ("analysis", "categories", "window", "cost", "labels")}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True, default=str).encode()).hexdigest()


def report_identity(path: str, storage_options: dict | None = None) -> str:
    """Content identity of a report: SHA-256 of a local file's bytes; for a remote object,
    a hash of its ETag, size and modification time (no download needed)."""
    if "://" not in path or path.startswith("file://"):
        return content_key(path.removeprefix("file://"))
    fs, key = fsspec.core.url_to_fs(path, **(storage_options or {}))
    info = fs.info(key)
    token = json.dumps([info.get("ETag") or info.get("etag"), info.get("size"),
                        str(info.get("LastModified") or info.get("mtime") or "")], default=str)
    return hashlib.sha256(token.encode()).hexdigest()


class ResultStore:
    """Per-report results under ``S/results`` (see module docstring)."""

    def __init__(self, state_dir: str):
        self.dir = os.path.join(state_dir, "results")
        os.makedirs(self.dir, exist_ok=True)

    def remove_leftovers(self) -> int:
        """Delete temporary files a killed sweep left (``.<name>.<random>.tmp``: never read as
        results). Call only when no other sweep writes to this state folder. Returns the count."""
        stale = [f for f in os.listdir(self.dir) if f.startswith(".") and f.endswith(".tmp")]
        for name in stale:
            os.unlink(os.path.join(self.dir, name))
        return len(stale)

    def _base(self, key: str) -> str:
        return os.path.join(self.dir, key)

    def has(self, key: str) -> bool:
        return os.path.exists(self._base(key) + ".parquet") and os.path.exists(self._base(key) + ".json")

    def put(self, key: str, rows: list[dict], rosters: dict) -> None:
        """Store one report's rows and rosters; the Parquet file is renamed into place last."""
        write_json(self._base(key) + ".json", [{"gpu_key": gpu, **value} for (_, gpu), value in rosters.items()])
        with atomic_path(self._base(key) + ".parquet") as tmp:
            pq.write_table(pa.Table.from_pandas(pd.DataFrame(rows), preserve_index=False), tmp)

    def get(self, key: str, report: str) -> tuple[list[dict], dict]:
        """Rows and rosters of a stored report, relabelled with its current path."""
        rows = pq.read_table(self._base(key) + ".parquet").to_pandas().to_dict("records")
        for row in rows:
            row["report"] = report
        with open(self._base(key) + ".json", encoding="utf-8") as fh:
            docs = json.load(fh)
        rosters = {(report, d.pop("gpu_key")): d for d in docs}
        return rows, rosters


def sweep(cfg: Config, open_client, inputs=(), state_dir: str | None = None, night: str | None = None,
          force=(), log=print) -> tuple[pd.DataFrame, SweepSummary]:
    """Run one nightly sweep.

    Args:
        cfg: configuration (``cfg.sweep`` gives the default inputs and state folder).
        open_client: a zero-argument context manager factory yielding a
            ``distributed.Client``; called only when some report needs analysing,
            so an unchanged night starts no cluster at all.
        inputs: extra inputs on top of ``cfg.sweep.inputs``.
        state_dir: overrides ``cfg.sweep.state_dir``.
        night: ``YYYY-MM-DD`` of this run (default: today, UTC).
        force: report paths to analyse again even if a result exists (``make rerun``).
    Returns:
        ``(fleet table of the night, summary)``. The night's table holds every
        discovered report: reused results, new results and error rows.
    """
    from .graph import run_graph  # the only module that talks to Dask

    state = state_dir or cfg.sweep.state_dir
    night = night or dt.datetime.now(dt.timezone.utc).date().isoformat()
    store = ResultStore(state)
    if store.remove_leftovers():
        log(f"sweep {night}: removed temporary files of an interrupted sweep in {store.dir}")
    paths, problems = discover(list(cfg.sweep.inputs) + list(inputs), storage=cfg.storage)
    chash = config_hash(cfg)[:12]
    summary = SweepSummary(night=night, reports=len(paths) + len(problems))
    forced = {os.path.abspath(p) if "://" not in p else p for p in force}
    rows: list[dict] = []
    rosters: dict = {}
    keys: dict[str, str] = {}
    todo = []
    for path in paths:
        try:
            keys[path] = f"{report_identity(path, cfg.storage.options)[:20]}-{chash}"
        except OSError as exc:
            problems.append((path, f"{path}: cannot read ({exc})"))
            continue
        if store.has(keys[path]) and path not in forced:
            got_rows, got_rosters = store.get(keys[path], path)
            rows += got_rows
            rosters.update(got_rosters)
            summary.reused += 1
        else:
            todo.append(path)

    def stored(path, results, error):
        if error is None:
            store.put(keys[path], [r.row for r in results],
                      {(path, r.row["gpu_key"]): {"streams": r.roster, "device": r.device_roster,
                                                  "timeline": r.timeline} for r in results})

    log(f"sweep {night}: {len(paths)} report(s) found, {summary.reused} unchanged, {len(todo)} to analyse")
    if todo:
        with open_client() as client:
            fleet_new, rosters_new = run_graph(client, todo, cfg, problems, on_report=stored)
    else:
        fleet_new = build_fleet([error_row(item, cfg.labels_for(item), message) for item, message in problems],
                                cfg.analysis.straggler_spread_pct) if problems else pd.DataFrame()
        rosters_new = {}
    rosters.update(rosters_new)
    all_rows = rows + fleet_new.to_dict("records")
    fleet = build_fleet(all_rows, cfg.analysis.straggler_spread_pct)
    summary.analysed = int(fleet_new[fleet_new["status"] != "error"]["report"].nunique()) if len(fleet_new) else 0
    errors = fleet[fleet["status"] == "error"].drop_duplicates("report")
    summary.failed = list(zip(errors["report"], errors["error"]))
    summary.out_dir = write_night(state, night, fleet, rosters, cfg)
    return fleet, summary


def write_night(state_dir: str, night: str, fleet: pd.DataFrame, rosters: dict, cfg: Config) -> str:
    """Write the night's history partition and output folder; returns the folder."""
    history = os.path.join(state_dir, "history", f"run_date={night}", "fleet.parquet")
    os.makedirs(os.path.dirname(history), exist_ok=True)
    with atomic_path(history) as tmp:
        pq.write_table(pa.Table.from_pandas(fleet, preserve_index=False), tmp)
    out = os.path.join(state_dir, "nights", night)
    write_outputs(out, fleet, rosters)
    write_records(out, fleet, rosters, cfg.analysis.actionable_pct)
    write_html(state_dir, out)
    return out


def write_html(state_dir: str, night_dir: str) -> str | None:
    """The manager report of the state folder into the night's folder.

    The night's tables are already written when this runs; a failure here is
    reported on stderr and leaves them in place (returns ``None``).
    """
    try:
        from .report.html import write_report

        return write_report(state_dir, os.path.join(night_dir, "report.html"))
    except Exception as exc:  # noqa: BLE001 - the tables of the night must survive a broken report
        print(f"gpu-idle sweep: report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None


def rebuild(cfg: Config, state_dir: str | None = None, night: str | None = None) -> str:
    """``make report``: rebuild a night's outputs from stored results, analysing nothing.

    Uses the night's history table (default: the latest night) and the stored
    rosters of its reports. Returns the night's folder.
    """
    state = state_dir or cfg.sweep.state_dir
    nights = sorted(d.split("=", 1)[1] for d in os.listdir(os.path.join(state, "history")) if "=" in d)
    if not nights:
        raise FileNotFoundError(f"{state}: no sweep history yet (run `gpu-idle sweep` first)")
    night = night or nights[-1]
    fleet = pd.read_parquet(os.path.join(state, "history", f"run_date={night}", "fleet.parquet"))
    store = ResultStore(state)
    rosters: dict = {}
    chash = config_hash(cfg)[:12]
    for report in fleet.loc[fleet["status"] != "error", "report"].unique():
        try:
            key = f"{report_identity(report, cfg.storage.options)[:20]}-{chash}"
        except OSError:
            continue  # the report is gone: its rows stay, its rosters cannot be found again
        if store.has(key):
            rosters.update(store.get(key, report)[1])
    return write_night(state, night, fleet, rosters, cfg)
