"""One side of a comparison: its analysed fleet rows, per-GPU JSON and kernel names (docs/definitions.md#compare).

A side is a run folder (``gpu-idle run --out``) or a sweep state folder (its latest night), whose fleet table
``pipeline.runs.compare.read_side`` reads as the report reads it; every figure comes from the one analysis of
``run``. The kernel names (for the same-program check and a gap's place in its iteration) are read again from the
report, through the same loader and columnar cache as the run (nothing is analysed again).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..model import CATEGORIES
from ..schema import JOB_KEY, analysed_rows, conform

#: The columns a side's fleet rows are read with (a column an older table lacks: missing).
COLUMNS = [*JOB_KEY, "report", "gpu_key", "status", "rank", "device_ids", "pid", "pids", "gpu_model", "window_rule",
           "window_start_ns", "window_end_ns", "window_ns", "idle_ns", "iterations", "iteration_mean_ns",
           "iteration_cv", "idle_pct_sd", "rate_model", "rate_usd_per_hour", "rate_assumed", "unpriced",
           "confidence_tier", "confidence_note",
           *(f"cat_{c}_ns" for c in CATEGORIES)]


@dataclass
class Side:
    """One side of a comparison: ``label`` (``before``/``after``), ``source`` (what the user named),
    ``folder`` (the run folder read), ``rows`` (its analysed fleet rows as dicts of :data:`COLUMNS`),
    ``failed`` (its error rows' ``(report, error)``), ``hours`` (hours per month it priced with),
    ``docs`` (``(report, gpu_key) -> per-GPU JSON``, missing ones absent), ``kernels``
    (``(report, gpu_key) -> KernelTimes`` or the text saying why they could not be read) and ``table`` (the
    side's whole fleet table as read, for its pages; None for a side made by hand)."""

    label: str
    source: str
    folder: str
    rows: list
    failed: list
    hours: float
    docs: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)
    table: pd.DataFrame | None = None


class SideChanged(Exception):
    """A side's report changed since the side's fleet table was written (its kernel names are not read)."""


@dataclass
class KernelTimes:
    """One GPU's kernels inside W: ``time`` (kernel name -> the sum of its kernels' durations clipped to W,
    ns) and ``starts`` (every kernel start on the GPU, sorted, ns), for a gap's place in its iteration."""

    time: dict
    starts: np.ndarray


def job_of(row: dict) -> tuple:
    """A fleet row's job, :data:`~pipeline.schema.JOB_KEY` as text."""
    return tuple(str(row[c]) for c in JOB_KEY)


def _value(v):
    """A stored value with pandas' missing values as None."""
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v


def read_side(fleet: pd.DataFrame, run_dir: str | None, folder: str, label: str, source: str, hours: float,
              doc_reader, kernel_reader=None, jobs: set | None = None) -> Side:
    """The side ``label`` from ``fleet``, the fleet table read from the run folder or sweep state folder ``folder``
    (``pipeline.runs.compare.read_side`` opens it as the report does), ``run_dir`` its run folder (the current night's;
    None when absent) and ``hours`` the hours per month its run priced with.

    ``doc_reader``: ``(report, gpu_key) -> the GPU's per-GPU JSON document`` of the side's run folder, or None when
    absent (:func:`pipeline.report.summary.gpu_doc`).
    ``kernel_reader``: ``(report, [(gpu_key, window_start_ns, window_end_ns)]) -> {that tuple: KernelTimes}``
    (:func:`report_kernel_reader`; any exception it raises is kept as the text saying why the report's kernel
    names are unknown), or None for no kernel names. ``jobs``: only these ``(cluster, job)`` (None: every job).
    A local report modified after the side's
    ``fleet.parquet`` was written is not read (its content may be a later capture under the same name).
    """
    table = conform(fleet, COLUMNS)
    ok = analysed_rows(table)
    rows = [{c: _value(v) for c, v in r.items()} for r in ok[COLUMNS].to_dict("records")]
    if jobs is not None:
        rows = [r for r in rows if job_of(r) in jobs]
    errors = conform(fleet, ["error"])
    failed = [(str(r), str(e)) for r, e, s in zip(errors["report"], errors["error"], errors["status"]) if s == "error"]
    side = Side(label, source, run_dir or folder, rows, failed, hours, table=fleet)
    windows: dict = {}
    for r in rows:
        key = (str(r["report"]), str(r["gpu_key"]))
        doc = doc_reader(*key)
        if doc is not None:
            side.docs[key] = doc
        if r["window_start_ns"] is not None:
            windows.setdefault(key[0], []).append((key[1], int(r["window_start_ns"]), int(r["window_end_ns"])))
    table = os.path.join(side.folder, "fleet.parquet")
    written = os.path.getmtime(table) if os.path.exists(table) else None
    for report, wanted in (windows.items() if kernel_reader is not None else ()):
        try:
            if written is not None and os.path.exists(report) and os.path.getmtime(report) > written:
                raise SideChanged(f"{report} changed since {side.folder} was written (the side's figures are of "
                                  "what it held then; run the side again)")
            found = kernel_reader(report, wanted)
        except Exception as exc:  # noqa: BLE001 - any reason the report cannot be read is stated, not raised
            found = {w: f"kernel names not read: {exc}" for w in wanted}
        for w in wanted:
            side.kernels[(report, w[0])] = found[w]
    return side


def kernel_times(kernels: pd.DataFrame, start_ns: int, end_ns: int) -> KernelTimes:
    """:class:`KernelTimes` of one GPU's kernel frame (``start``, ``end``, ``name``; int ns) inside W =
    [``start_ns``, ``end_ns``): each kernel's duration clipped to W, summed per name (kernels wholly outside
    W count nothing and their names are left out)."""
    s = kernels["start"].to_numpy(np.int64)
    e = kernels["end"].to_numpy(np.int64)
    clipped = np.minimum(e, end_ns) - np.maximum(s, start_ns)
    inside = clipped > 0
    names = kernels["name"].astype(str).to_numpy()[inside]
    sums = pd.Series(clipped[inside]).groupby(names).sum() if inside.any() else pd.Series(dtype=np.int64)
    return KernelTimes({str(k): int(v) for k, v in sums.items()}, np.sort(s))


def report_kernel_reader(cfg):
    """A ``kernel_reader`` for :func:`read_side`: ``(report, [(gpu_key, start_ns, end_ns)]) -> {(gpu_key,
    start_ns, end_ns): KernelTimes}``, the report loaded once per call through the run's loader and its
    columnar cache (:func:`pipeline.work.tasks.load_report_for`, with ``cfg``'s export, cache and storage
    settings) and let go after; each GPU's :func:`kernel_times` (:func:`pipeline.load.report.gpu_trace`).
    Windows asked for before are answered from memory (a report on both sides is read once). Raises what
    loading raises (:class:`~pipeline.model.ProfileError` and the like)."""
    from ..load.report import gpu_trace  # the loader (~0.25 s): only when a side's kernels are read
    from ..work.tasks import load_report_for

    known: dict = {}

    def read(report: str, windows: list) -> dict:
        todo = [w for w in windows if (report, *w) not in known]
        if todo:
            rep = load_report_for(report, cfg.export, cfg.cache, cfg.storage)
            for key, start, end in todo:
                known[(report, key, start, end)] = kernel_times(gpu_trace(rep, key).kernels, start, end)
            del rep
        return {w: known[(report, *w)] for w in windows}

    return read


def changed_jobs(before: pd.DataFrame, after: pd.DataFrame) -> set:
    """The jobs (``(cluster, job)`` as text) of both fleet tables whose analysed rows differ: their set of
    ``(report, gpu_key, window_ns, idle_ns)`` is not the same (docs/definitions.md#compare-in-the-sweep)."""
    def signatures(fleet: pd.DataFrame) -> dict:
        out: dict = {}
        table = conform(fleet, [*JOB_KEY, "report", "gpu_key", "window_ns", "idle_ns"])
        for r in analysed_rows(table).to_dict("records"):
            out.setdefault(job_of(r), set()).add((str(r["report"]), str(r["gpu_key"]), _value(r["window_ns"]),
                                                _value(r["idle_ns"])))
        return out

    b, a = signatures(before), signatures(after)
    return {k for k in set(b) & set(a) if b[k] != a[k]}
