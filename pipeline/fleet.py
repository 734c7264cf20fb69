"""The reduce: per-GPU rows -> fleet table, stragglers, rollups, atomic writes.

Outputs of one run in ``DIR``:
  ``fleet.parquet`` / ``fleet.csv``: one row per (report, GPU), error rows included;
  ``jobs.csv`` / ``clusters.csv``: rollups;
  ``gpus/<report>__<gpu>.json``: roster and a final ``_summary`` object per GPU.
Every file is written to a temporary name in the same folder and renamed, so a
reader never sees a half-written file.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

#: Column order of the fleet table (SPEC "Fleet table"; issue #2 names).
FLEET_COLUMNS = [
    "report", "cluster", "job", "node", "rank", "gpu_key", "pid", "device_id", "pids", "device_ids",
    "gpu_model", "window_rule", "untrimmed", "window_start_ns", "window_end_ns", "window_ns",
    "iterations", "iteration_mean_ns", "iteration_cv", "excluded_iterations", "window_note",
    "kernel_count", "stream_count", "busy_ns", "idle_ns", "idle_pct", "copy_only_ns", "dark_ns",
    "gap_count", "gap_total_ns", "max_gap_ns", "gaps_le_5ms", "gaps_5_50ms", "gaps_gt_50ms",
    "gaps_le_5ms_ns", "gaps_5_50ms_ns", "gaps_gt_50ms_ns", "sliver_count", "sliver_total_ns",
    "copy_overlap_ns", "device_gap_count", "device_gap_ns", "device_sliver_count", "device_sliver_ns",
    "launch_bound",
    "cat_sync_ns", "cat_data_ns", "cat_comm_ns", "cat_boundary_ns", "cat_periodic_ns", "cat_launch_ns", "cat_cpu_ns",
    "cat_sync_pct", "cat_data_pct", "cat_comm_pct", "cat_boundary_pct", "cat_periodic_pct", "cat_launch_pct",
    "cat_cpu_pct", "main_category", "actionable",
    "rate_model", "rate_usd_per_hour", "rate_source", "idle_usd_per_month", "amdahl_speedup",
    "straggler", "warnings", "status", "error",
]
INT_COLUMNS = [c for c in FLEET_COLUMNS if c.endswith("_ns") or c in (
    "pid", "device_id", "kernel_count", "stream_count", "gap_count", "gaps_le_5ms", "gaps_5_50ms",
    "gaps_gt_50ms", "sliver_count", "device_gap_count", "device_sliver_count", "iterations")]


def error_row(report: str, labels: dict, message: str) -> dict:
    """The fleet row of a report that could not be analysed: status ``error`` and the cause."""
    row = {c: None for c in FLEET_COLUMNS}
    row.update({"report": report, "cluster": labels.get("cluster", ""), "job": labels.get("job", ""),
                "node": labels.get("node", ""), "rank": labels.get("rank", ""),
                "status": "error", "error": message, "warnings": "", "straggler": False})
    return row


def problem_rows(problems, cfg) -> list[dict]:
    """The error rows (:func:`error_row`) of discovery's ``(input, message)`` problems;
    ``cfg`` (a :class:`~pipeline.config.Config`) labels each input."""
    return [error_row(item, cfg.labels_for(item), message) for item, message in problems]


def flag_stragglers(fleet: pd.DataFrame, spread_pct: float) -> pd.DataFrame:
    """Mark the highest-idle GPU of each job whose idle % spread exceeds ``spread_pct`` points.

    SPEC "Straggler": within one job, if max − min of device-level idle % across
    its GPUs exceeds 10 points, the GPU with the highest idle is the first
    suspect. Error rows take no part. Ties: the first row in table order.
    """
    out = fleet.copy()
    out["straggler"] = False
    ok = out[out["status"] != "error"]
    for _, group in ok.groupby("job", sort=True):
        idle = group["idle_pct"].astype(float)
        if len(group) >= 2 and idle.max() - idle.min() > spread_pct:
            out.loc[idle.idxmax(), "straggler"] = True
    return out


def build_fleet(rows: list[dict], spread_pct: float = 10.0) -> pd.DataFrame:
    """Rows -> fleet table in a stable order (report, gpu_key), stragglers flagged."""
    fleet = pd.DataFrame(rows).reindex(columns=FLEET_COLUMNS)
    for col in INT_COLUMNS:
        fleet[col] = pd.array(fleet[col], dtype="Int64")
    for col in ("straggler", "launch_bound", "untrimmed"):
        fleet[col] = fleet[col].astype(object).where(fleet[col].notna(), False).astype(bool)
    fleet = fleet.sort_values(["report", "gpu_key"], na_position="first", kind="stable").reset_index(drop=True)
    return flag_stragglers(fleet, spread_pct)


def rollup(fleet: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per-job or per-cluster totals.

    Columns: ``by``, GPUs analysed, reports that failed (distinct reports with an
    error row), window and idle ns, window-weighted idle %, min/max GPU idle %,
    per-stream gap total, idle USD per month, stragglers.
    """
    ok = fleet[fleet["status"] != "error"]
    out = ok.groupby(by, sort=True).agg(
        gpus=("gpu_key", "size"), window_ns=("window_ns", "sum"), idle_ns=("idle_ns", "sum"),
        gap_total_ns=("gap_total_ns", "sum"), idle_usd_per_month=("idle_usd_per_month", "sum"),
        min_idle_pct=("idle_pct", "min"), max_idle_pct=("idle_pct", "max"),
        stragglers=("straggler", "sum")).reset_index()
    failed = fleet[fleet["status"] == "error"].groupby(by, sort=True)["report"].nunique().rename("failed_reports")
    out = out.merge(failed.reset_index(), on=by, how="outer")
    for col in ("gpus", "window_ns", "idle_ns", "gap_total_ns", "stragglers", "failed_reports"):
        out[col] = out[col].fillna(0).astype("int64")
    out["idle_usd_per_month"] = out["idle_usd_per_month"].astype(float).fillna(0.0).round(2)
    with np.errstate(divide="ignore", invalid="ignore"):
        out["idle_pct"] = (100.0 * out["idle_ns"] / out["window_ns"].where(out["window_ns"] > 0)).round(4)
    return out.sort_values(by, kind="stable").reset_index(drop=True)


def slug(text: str) -> str:
    """``text`` made safe as a file name part (at most 80 characters)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


def gpu_json_name(report: str, gpu_key: str) -> str:
    """File name of one GPU's JSON: readable report and GPU parts plus a hash of both (no collisions)."""
    digest = hashlib.sha1(f"{report}\0{gpu_key}".encode("utf-8")).hexdigest()[:10]
    return f"{slug(os.path.basename(report))}__{slug(gpu_key)}__{digest}.json"


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are for the team to read
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return str(value)


def _plain(value):
    """JSON-safe scalar: NA, NaN and ±inf become null (strict JSON has no Infinity)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def compact_json(value) -> str:
    """Strict (no NaN/Infinity), compact JSON of ``value`` on one line (numpy scalars as numbers)."""
    return json.dumps(value, default=_json_default, allow_nan=False)


def json_text(obj) -> str:
    """Strict JSON (no NaN/Infinity) of ``obj``, ending in a newline. A dict or list gets one
    line per top-level key or item, each value compact: readable and diff-friendly, yet
    written by the C encoder (``indent=`` would switch ``json`` to its pure-Python encoder,
    ~10x slower on the large rosters and timelines of per-GPU documents)."""
    compact = compact_json
    if isinstance(obj, dict) and obj:
        return "{\n" + ",\n".join(f"  {compact(str(k))}: {compact(v)}" for k, v in obj.items()) + "\n}\n"
    if isinstance(obj, list) and obj:
        return "[\n" + ",\n".join(f"  {compact(v)}" for v in obj) + "\n]\n"
    return compact(obj) + "\n"


def write_json(path: str, obj) -> None:
    """Write ``obj`` as :func:`json_text`, atomically."""
    write_text(path, json_text(obj))


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8), atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def gpu_summary(row: dict) -> dict:
    """The ``_summary`` object of a GPU's JSON: its fleet row with JSON-safe scalars (:func:`_plain`)."""
    return {k: _plain(v) for k, v in row.items()}


def summary_text(summary: dict) -> str:
    """Compact JSON of a ``_summary`` object: equal texts mean equal objects, types included."""
    return compact_json(summary)


def _gpu_doc(summary: dict, both: dict) -> dict:
    return {"report": summary["report"], "gpu_key": summary["gpu_key"], "roster": both.get("streams", []),
            "device_roster": both.get("device", []), "timeline": both.get("timeline", {}), "_summary": summary}


def write_gpu_docs(gpu_dir: str, fleet: pd.DataFrame, rosters: dict) -> dict:
    """Write ``gpu_dir/<report>__<gpu>__<hash>.json`` (:func:`gpu_json_name`) for every analysed row of
    ``fleet``, atomically: ``report``, ``gpu_key``, ``roster``, ``device_roster``, ``timeline`` and the
    row as ``_summary``.

    ``rosters`` maps (report, gpu_key) -> ``{"streams": [...], "device": [...], "timeline": {...}}``; an
    entry that also holds ``"json"`` (the :func:`summary_text` of the ``_summary`` a worker already
    wrote into that file) is left alone when the row gives the same text, and only its ``_summary``
    is replaced otherwise (e.g. a straggler flag that needed the whole job). Returns
    ``(report, gpu_key) -> summary_text`` of every file written or checked.
    """
    os.makedirs(gpu_dir, exist_ok=True)
    texts = {}
    for row in fleet.to_dict("records"):
        if row["status"] == "error":
            continue
        key = (row["report"], row["gpu_key"])
        summary = gpu_summary(row)
        both = rosters.get(key, {})
        path = os.path.join(gpu_dir, gpu_json_name(row["report"], row["gpu_key"]))
        texts[key] = text = summary_text(summary)
        if "json" in both:
            if both["json"] == text:
                continue
            with open(path, encoding="utf-8") as fh:
                doc = json.load(fh)  # a JSON round trip gives back the same values, so the same text
            doc["_summary"] = summary
        else:
            doc = _gpu_doc(summary, both)
        write_json(path, doc)
    return texts


def write_outputs(out_dir: str, fleet: pd.DataFrame, rosters: dict) -> dict:
    """Write the fleet table, rollups and per-GPU JSON files (:func:`write_gpu_docs`). Returns name -> path.

    ``rosters`` maps (report, gpu_key) -> ``{"streams": [...], "device": [...], "timeline": {...}}``
    (or ``{"device": [...], "json": ...}`` for a GPU whose file a worker already wrote).
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    for name, frame in (("fleet", fleet),):
        with atomic_path(os.path.join(out_dir, f"{name}.parquet")) as tmp:
            pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
        paths["parquet"] = os.path.join(out_dir, "fleet.parquet")
    with atomic_path(os.path.join(out_dir, "fleet.csv")) as tmp:
        fleet.to_csv(tmp, index=False)
    paths["csv"] = os.path.join(out_dir, "fleet.csv")
    for name, by in (("jobs", ["cluster", "job"]), ("clusters", ["cluster"])):
        with atomic_path(os.path.join(out_dir, f"{name}.csv")) as tmp:
            rollup(fleet, by).to_csv(tmp, index=False)
        paths[name] = os.path.join(out_dir, f"{name}.csv")
    gpu_dir = os.path.join(out_dir, "gpus")
    write_gpu_docs(gpu_dir, fleet, rosters)
    paths["gpus"] = gpu_dir
    return paths
