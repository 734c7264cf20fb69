"""The run's documents: the fleet tables (Parquet, CSV, rollups) and one JSON per GPU.

Outputs of one run in ``DIR``:
  ``fleet.parquet`` / ``fleet.csv``: one row per (report, GPU), error rows included;
  ``jobs.csv`` / ``clusters.csv``: rollups (:func:`~pipeline.fleet.reduce.rollup`);
  ``fix_first.csv`` / ``fix_first.json``: the ranked fix-first lists of the fleet and of each job
  (:func:`~pipeline.analysis.fixfirst.fix_list`);
  ``gpus/<report>__<gpu>__<hash>.json``: rosters, timeline and a final ``_summary`` per GPU.
Every file is written to a temporary name in the same folder and renamed
(:mod:`pipeline.io`), so a reader never sees a half-written file. Who writes the per-GPU
files (the task that analysed the report, or the client) is decided in one place,
:func:`pipeline.runs.driver.analysed`; this module only writes them.
"""
from __future__ import annotations

import hashlib
import json
import math
import os

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis.fixfirst import fix_list
from ..io import atomic_path, compact_json, plain_scalar, prune, real_dir, slug, write_json
from ..schema import CLUSTER_KEY, JOB_KEY, NOT_ANALYSED, analysed_rows
from ..text import csv_safe
from .reduce import rollup


def gpu_json_name(report: str, gpu_key: str) -> str:
    """File name of one GPU's JSON: readable report and GPU parts plus a hash of both (no collisions)."""
    digest = hashlib.sha1(f"{report}\0{gpu_key}".encode("utf-8")).hexdigest()[:10]
    return f"{slug(os.path.basename(report))}__{slug(gpu_key)}__{digest}.json"


def proven_gpu_doc(path: str) -> bool:
    """Whether ``path`` is a per-GPU JSON the product wrote, proven by its own content: a regular file
    whose first two lines (:func:`~pipeline.io.json_text` puts ``report`` and ``gpu_key`` there, see
    :func:`write_gpu_docs`) name the report and GPU whose :func:`gpu_json_name` is its name (a hash of
    both). What a run killed before its manifest listed them left in ``gpus/`` is known as ours by this;
    a person's file is not (it would have to name itself by that hash). Reads at most 64 KiB."""
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return False
        with open(path, "rb") as fh:
            head = fh.read(65536).decode("utf-8", "replace").split("\n")
        first = json.loads("{" + ",".join(line.rstrip(",") for line in head[1:3]) + "}")
        return gpu_json_name(str(first["report"]), str(first["gpu_key"])) == os.path.basename(path)
    except (OSError, ValueError, KeyError, TypeError):
        return False


#: Folder of the per-GPU HTML pages, beside the report that links them (:mod:`pipeline.report.gpu_page`).
PAGES_DIR = "gpu-pages"


def gpu_page_name(report: str, gpu_key: str) -> str:
    """File name of one GPU's HTML page: its JSON's stem (:func:`gpu_json_name`) with ``.html``; only
    ``[A-Za-z0-9_.-]`` characters, so it is safe in a link."""
    return gpu_json_name(report, gpu_key)[:-len(".json")] + ".html"


def gpu_summary(row: dict) -> dict:
    """The ``_summary`` object of a GPU's JSON: its fleet row with JSON-safe scalars (:func:`~pipeline.io.plain_scalar`)."""
    return {k: plain_scalar(v) for k, v in row.items()}


def gpu_summaries(fleet: pd.DataFrame) -> list[dict]:
    """:func:`gpu_summary` of every row of ``fleet`` (any table with unique column names: also the fix-first list's
    JSON), in order: the same dicts as
    ``[gpu_summary(row) for row in fleet.to_dict("records")]``, made a column at a time (a whole numpy column of
    whole numbers, flags or floats, an ``Int64`` or text column at once: what the rows' dicts cost cell by cell)."""
    columns = {}
    for name, series in fleet.items():
        dtype = series.dtype
        if isinstance(dtype, np.dtype) and dtype.kind in "iub":
            columns[name] = series.to_numpy().tolist()
        elif isinstance(dtype, np.dtype) and dtype.kind == "f":
            columns[name] = [v if math.isfinite(v) else None for v in series.to_numpy().tolist()]
        elif dtype == pd.Int64Dtype() or isinstance(dtype, pd.StringDtype):
            columns[name] = series.to_numpy(dtype=object, na_value=None).tolist()
    rest = [name for name in fleet.columns if name not in columns]
    if rest:  # anything else (object columns): as the rows' dicts give it, cell by cell
        rows = fleet[rest].to_dict("records")
        columns.update({name: [plain_scalar(row[name]) for row in rows] for name in rest})
    names = list(fleet.columns)
    return [dict(zip(names, values)) for values in zip(*(columns[name] for name in names))]


def summary_text(summary: dict) -> str:
    """Compact JSON of a ``_summary`` object: equal texts mean equal objects, types included."""
    return compact_json(summary)


def _gpu_doc(summary: dict, both: dict) -> dict:
    return {"report": summary["report"], "gpu_key": summary["gpu_key"], "roster": both.get("streams", []),
            "device_roster": both.get("device", []), "timeline": both.get("timeline", {}), "_summary": summary}


def unrewritten(out_dir: str, fleet: pd.DataFrame) -> set[str]:
    """The per-GPU JSON files (``gpus/<name>``) in ``out_dir`` whose ``_summary`` is not ``fleet``'s final row:
    a worker wrote them before the reduce had the whole job (a straggler flag, the job's grouping) and a write
    failed before :func:`write_gpu_docs` replaced it. Such a file is there, written during the run, but is not
    this run's output. Read only on that failure path."""
    left = set()
    for row in fleet.to_dict("records"):
        if row["status"] in NOT_ANALYSED:
            continue
        rel = f"gpus/{gpu_json_name(row['report'], row['gpu_key'])}"
        try:
            with open(os.path.join(out_dir, rel), encoding="utf-8") as fh:
                done = summary_text(json.load(fh)["_summary"]) == summary_text(gpu_summary(row))
        except FileNotFoundError:
            continue
        except (OSError, ValueError, KeyError, TypeError):
            done = False
        if not done:
            left.add(rel)
    return left


def write_gpu_docs(gpu_dir: str, fleet: pd.DataFrame, rosters: dict, done=None) -> dict:
    """Write ``gpu_dir/<report>__<gpu>__<hash>.json`` (:func:`gpu_json_name`) for every analysed row of
    ``fleet``, atomically: ``report``, ``gpu_key``, ``roster``, ``device_roster``, ``timeline`` and the
    row as ``_summary``.

    ``rosters`` maps (report, gpu_key) -> ``{"streams": [...], "device": [...], "timeline": {...}}``; an
    entry that also holds ``"json"`` (the :func:`summary_text` of the ``_summary`` a worker already
    wrote into that file) is left alone when the row gives the same text, and only its ``_summary``
    is replaced otherwise (e.g. a straggler flag that needed the whole job). ``done(1)`` after each file
    written (None: nothing). Returns ``(report, gpu_key) -> summary_text`` of every file written or checked.
    """
    real_dir(gpu_dir)
    texts = {}
    for summary in gpu_summaries(fleet):
        if summary["status"] in NOT_ANALYSED:
            continue
        key = (summary["report"], summary["gpu_key"])
        both = rosters.get(key, {})
        path = os.path.join(gpu_dir, gpu_json_name(summary["report"], summary["gpu_key"]))
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
        if done is not None:
            done(1)
    return texts


#: The fleet tables every run writes at the top of its folder (:func:`write_outputs`).
TABLE_FILES = ("fleet.parquet", "fleet.csv", "jobs.csv", "clusters.csv", "fix_first.csv", "fix_first.json")


def planned_outputs(fleet: pd.DataFrame) -> list[str]:
    """The relative paths :func:`write_outputs` writes for ``fleet``: :data:`TABLE_FILES` and
    ``gpus/<name>`` (:func:`gpu_json_name`) of every analysed row."""
    ok = analysed_rows(fleet) if len(fleet) else fleet
    gpus = [f"gpus/{gpu_json_name(r, g)}" for r, g in zip(ok["report"], ok["gpu_key"])] if len(ok) else []
    return list(TABLE_FILES) + sorted(set(gpus))


#: The fleet's CSV tables (:func:`write_csv_tables`): name -> file.
CSV_TABLES = {"csv": "fleet.csv", "jobs": "jobs.csv", "clusters": "clusters.csv"}


def csv_table_paths(out_dir: str) -> dict:
    """Name -> path of the fleet's CSV tables in ``out_dir`` (:data:`CSV_TABLES`)."""
    return {name: os.path.join(out_dir, file) for name, file in CSV_TABLES.items()}


def write_csv_tables(out_dir: str, fleet: pd.DataFrame) -> dict:
    """Write ``fleet`` as ``fleet.csv`` and its rollups by job and by cluster (``jobs.csv``, ``clusters.csv``).
    Returns name -> path (:func:`csv_table_paths`)."""
    paths = csv_table_paths(out_dir)
    for name, frame in (("csv", fleet), ("jobs", rollup(fleet, list(JOB_KEY))),
                        ("clusters", rollup(fleet, list(CLUSTER_KEY)))):
        with atomic_path(paths[name]) as tmp:
            csv_safe(frame).to_csv(tmp, index=False)
    return paths


def write_outputs(out_dir: str, fleet: pd.DataFrame, rosters: dict, owned: dict | None = None,
                  csv_tables: bool = True) -> dict:
    """Write the fleet table (Parquet), its CSV tables (:func:`write_csv_tables`; ``csv_tables=False``: the
    caller writes them, as :func:`~pipeline.runs.driver.write_documents` does beside), the fix-first list and
    the per-GPU JSON files (:func:`write_gpu_docs`). Returns name -> path, under ``"stale"`` the paths of the
    per-GPU files of an earlier run that were removed, and under ``"files"`` the relative paths written
    (:func:`planned_outputs`).

    ``gpus/`` ends up holding one file per analysed row of ``fleet``, and of the files an earlier run
    wrote there (``owned``: ``name -> entry`` of ``gpus/`` in the folder's manifest,
    :func:`~pipeline.io.prune`, and the files :func:`proven_gpu_doc` proves ours) only those: the JSON files of GPUs not in this fleet (an earlier run
    into the same folder, with other inputs) are removed; files no manifest lists are never touched.

    ``rosters`` maps (report, gpu_key) -> ``{"streams": [...], "device": [...], "timeline": {...}}``
    (or ``{"device": [...], "json": ...}`` for a GPU whose file a worker already wrote).
    """
    os.makedirs(out_dir, exist_ok=True)
    paths = {}
    with atomic_path(os.path.join(out_dir, "fleet.parquet")) as tmp:
        pq.write_table(pa.Table.from_pandas(fleet, preserve_index=False), tmp)
    paths["parquet"] = os.path.join(out_dir, "fleet.parquet")
    paths.update(write_csv_tables(out_dir, fleet) if csv_tables else csv_table_paths(out_dir))
    fixes = fix_list(fleet, rosters)
    with atomic_path(os.path.join(out_dir, "fix_first.csv")) as tmp:
        csv_safe(fixes).to_csv(tmp, index=False)
    paths["fix_first"] = os.path.join(out_dir, "fix_first.csv")
    paths["fix_first_json"] = os.path.join(out_dir, "fix_first.json")
    # each entry's JSON-safe scalars a column at a time (gpu_summaries: what plain_scalar gives over its dict)
    write_json(paths["fix_first_json"], gpu_summaries(fixes))
    gpu_dir = os.path.join(out_dir, "gpus")
    texts = write_gpu_docs(gpu_dir, fleet, rosters)
    names = {gpu_json_name(report, gpu) for report, gpu in texts}
    owned = dict(owned or {})
    for name in sorted(os.listdir(gpu_dir)):  # a killed run's files no manifest lists: ours by their content
        if name.endswith(".json") and name not in names and name not in owned \
                and proven_gpu_doc(os.path.join(gpu_dir, name)):
            owned[name] = None
    paths["stale"] = [os.path.join(gpu_dir, name) for name in prune(gpu_dir, names, owned)]
    paths["gpus"] = gpu_dir
    paths["files"] = list(TABLE_FILES) + sorted(f"gpus/{n}" for n in names)
    return paths
