"""Before and after: two sides' stored results compared GPU by GPU and job by job (docs/definitions.md#compare).

A side is a run folder (``gpu-idle run --out``) or a sweep state folder (its latest night), read as the
report reads it (:func:`pipeline.report.summary.load_results`); ``gpu-idle compare`` first runs the driver
on a side that names reports, so every figure here comes from the one analysis of ``run``. This module
pairs the GPUs (:func:`pair_gpus`), says whether each job's pair of sides can be compared at all
(:func:`verdict`), and computes what changed (:func:`gpu_deltas`, :func:`job_deltas`) with a noise floor
from each side's iteration-to-iteration spread, and which gaps vanished or appeared (:func:`gap_changes`).
The kernel names (for the same-program check and a gap's place in its iteration) are read again from the
report, through the same loader and columnar cache as the run (nothing is analysed again).

Times are int ns, shares % of W (0..100), changes in percentage points, money USD per month.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..analysis.confidence import TIERS, trusted
from ..analysis.cost import assumed_split, idle_usd_per_month, priced_sum
from ..config import ConfidenceConfig
from ..fleet.outputs import PAGES_DIR
from ..fleet.reduce import assumed_text
from ..io import file_entry, json_text, prune, real_dir, remove_if_empty, same_file, write_text
from ..model import CATEGORIES
from ..schema import JOB_KEY, analysed_rows, conform
from ..store.results import MANIFEST, drop_manifest, read_manifest, write_folder_manifest
from ..text import csv_safe, md_code, md_text
from .medical import TOP_GAPS, job_gpu_names, job_record, record_stem
from .summary import ReportError, gpu_doc, is_sweep_dir, load_results, run_hours
from .words import signed, signed_usd, usd

#: The two sides, in the order they are shown.
SIDES = ("before", "after")
#: A job's sides are comparable only when kernels of names both sides ran hold at least this share of the
#: two sides' kernel time in W (docs/definitions.md#compare).
MIN_SHARED_KERNEL_SHARE = 0.5
#: Stable iterations each side needs inside W by default (docs/definitions.md#compare-verdict): the confidence
#: tiers' ``confidence.medium_min_iterations`` (one definition, :class:`~pipeline.config.ConfidenceConfig`); the
#: command passes its config's value.
MIN_ITERATIONS = ConfidenceConfig().medium_min_iterations
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
    ``docs`` (``(report, gpu_key) -> per-GPU JSON``, missing ones absent) and ``kernels``
    (``(report, gpu_key) -> KernelTimes`` or the text saying why they could not be read)."""

    label: str
    source: str
    folder: str
    rows: list
    failed: list
    hours: float
    docs: dict = field(default_factory=dict)
    kernels: dict = field(default_factory=dict)


@dataclass
class KernelTimes:
    """One GPU's kernels inside W: ``time`` (kernel name -> the sum of its kernels' durations clipped to W,
    ns) and ``starts`` (every kernel start on the GPU, sorted, ns), for a gap's place in its iteration."""

    time: dict
    starts: np.ndarray


def _value(v):
    """A stored value with pandas' missing values as None."""
    return None if v is None or (not isinstance(v, str) and pd.isna(v)) else v


def read_side(folder: str, label: str, source: str, kernel_reader=None, jobs: set | None = None) -> Side:
    """The side ``label`` from the run folder or sweep state folder ``folder`` (its current night).

    ``kernel_reader``: ``(report, [(gpu_key, window_start_ns, window_end_ns)]) -> {that tuple: KernelTimes}``
    (:func:`report_kernel_reader`; any exception it raises is kept as the text saying why the report's kernel
    names are unknown), or None for no kernel names. ``jobs``: only these ``(cluster, job)`` (None: every job).
    A local report modified after the side's
    ``fleet.parquet`` was written is not read (its content may be a later capture under the same name).
    Raises :class:`~pipeline.report.summary.ReportError` when ``folder`` holds no fleet table.
    """
    res = load_results(folder)
    fleet = res.current
    table = conform(fleet, COLUMNS)
    ok = analysed_rows(table)
    rows = [{c: _value(v) for c, v in r.items()} for r in ok[COLUMNS].to_dict("records")]
    if jobs is not None:
        rows = [r for r in rows if _job(r) in jobs]
    errors = conform(fleet, ["error"])
    failed = [(str(r), str(e)) for r, e, s in zip(errors["report"], errors["error"], errors["status"]) if s == "error"]
    side = Side(label, source, res.run_dir or folder, rows, failed, run_hours(res.run_dir))
    windows: dict = {}
    for r in rows:
        key = (str(r["report"]), str(r["gpu_key"]))
        doc = gpu_doc(res.run_dir, *key)
        if doc is not None:
            side.docs[key] = doc
        if r["window_start_ns"] is not None:
            windows.setdefault(key[0], []).append((key[1], int(r["window_start_ns"]), int(r["window_end_ns"])))
    table = os.path.join(side.folder, "fleet.parquet")
    written = os.path.getmtime(table) if os.path.exists(table) else None
    for report, wanted in (windows.items() if kernel_reader is not None else ()):
        try:
            if written is not None and os.path.exists(report) and os.path.getmtime(report) > written:
                raise ReportError(f"{report} changed since {side.folder} was written (the side's figures are of "
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


# ---------------------------------------------------------------------------------------------- pairing

def _job(row: dict) -> tuple:
    return tuple(str(row[c]) for c in JOB_KEY)


def _order_key(row: dict) -> tuple:
    """Process order: the report, then the first process driving the GPU, then its key."""
    pid = row.get("pid")
    return (str(row["report"]), int(pid) if pid is not None else -1, str(row["gpu_key"]))


def _seats(before: list, after: list, col: str) -> bool:
    """Whether ``col`` pairs two sides' GPUs of a job: set on every GPU, no two of a side share it, and the
    values of the side with fewer GPUs are all among the other side's."""
    vals = [[str(r.get(col) or "") for r in rows] for rows in (before, after)]
    if not all(all(v) and len(set(v)) == len(v) for v in vals):
        return False
    small, large = sorted((set(v) for v in vals), key=len)
    return small <= large


def pair_gpus(before: list, after: list) -> dict:
    """Pair the analysed GPUs of two sides (docs/definitions.md#compare-pairing).

    Jobs (:data:`~pipeline.schema.JOB_KEY`) pair by name; when each side holds exactly one job they pair
    whatever their names. Inside a job pair, GPUs pair by ``rank`` when every GPU of the job on both sides
    has one, no two of a side share it and the smaller side's ranks are all among the other's; else by
    ``device_ids`` (the CUDA device ordinal) under the same condition; else in process order (:func:`_order_key`), first with first. Returns ``{"jobs": [{"before": key,
    "after": key, "basis": text, "pairs": [(row_b, row_a)], "unpaired": [(side, row)]}], "unpaired_jobs":
    [(side, key, rows)]}``.
    """
    jobs = [{}, {}]
    for rows, by in zip((before, after), jobs):
        for r in rows:
            by.setdefault(_job(r), []).append(r)
    if len(jobs[0]) == 1 and len(jobs[1]) == 1:
        links = [(next(iter(jobs[0])), next(iter(jobs[1])))]
    else:
        links = [(k, k) for k in sorted(set(jobs[0]) & set(jobs[1]), key=lambda k: (k[1], k[0]))]
    out = {"jobs": [], "unpaired_jobs": []}
    for kb, ka in links:
        rb, ra = sorted(jobs[0][kb], key=_order_key), sorted(jobs[1][ka], key=_order_key)
        for basis, col in (("rank", "rank"), ("device ordinal", "device_ids")):
            if _seats(rb, ra, col):
                by_a = {str(r[col]): r for r in ra}
                pairs = [(r, by_a[str(r[col])]) for r in rb if str(r[col]) in by_a]
                seats = {str(r[col]) for r in rb} & set(by_a)
                unpaired = [("before", r) for r in rb if str(r[col]) not in seats] + \
                           [("after", r) for r in ra if str(r[col]) not in seats]
                break
        else:
            basis = "process order"
            pairs = list(zip(rb, ra))
            unpaired = [("before", r) for r in rb[len(pairs):]] + [("after", r) for r in ra[len(pairs):]]
        out["jobs"].append({"before": kb, "after": ka, "basis": basis, "pairs": pairs, "unpaired": unpaired})
    linked = [{kb for kb, _ in links}, {ka for _, ka in links}]
    for label, by, done in zip(SIDES, jobs, linked):
        for key in sorted(set(by) - done, key=lambda k: (k[1], k[0])):
            out["unpaired_jobs"].append((label, key, sorted(by[key], key=_order_key)))
    return out


# ---------------------------------------------------------------------------------------------- verdict

def shared_kernel_share(b: KernelTimes, a: KernelTimes) -> tuple[float, float]:
    """``(share, jaccard)`` of two GPUs' kernels inside their windows: ``share`` = the kernel time of
    names both ran, both sides summed, over both sides' kernel time (0..1; 0 when neither ran a kernel);
    ``jaccard`` = |names in both| / |names in either| (docs/definitions.md#compare-verdict)."""
    shared = set(b.time) & set(a.time)
    total = sum(b.time.values()) + sum(a.time.values())
    inside = sum(b.time[n] for n in shared) + sum(a.time[n] for n in shared)
    either = set(b.time) | set(a.time)
    return (inside / total if total else 0.0), (len(shared) / len(either) if either else 0.0)


def _iterations(r: dict) -> int:
    return int(r.get("iterations") or 0)


def _per_pair(texts: list, names: list, pairs: int) -> str:
    """One check's text over ``texts`` of some of a job's ``pairs`` GPU pairs: the one text when every pair
    found the same, else each text after its pair's names (``H100 #1 … -> H100 #1 …: …``), so each figure
    names its GPU pair."""
    if len(texts) == pairs and len(set(texts)) <= 1:
        return texts[0] if texts else ""
    return "; ".join(f"{nb} -> {na}: {t}" for t, (nb, na) in zip(texts, names))


def verdict(job: dict, sides: tuple, min_iterations: int = MIN_ITERATIONS, names: list | None = None) -> dict:
    """Whether one job pair (an entry of :func:`pair_gpus`) can be compared (docs/definitions.md#compare-verdict):
    ``{"comparable": bool, "checks": [{"check", "ok", "text"}], "reasons": [text of each failed check]}``.
    Checks: the same number of analysed GPUs; each pair's GPU model the same (or, when they differ, priced by
    the same rate-card entry: the stated rate basis); each pair's window rule the same with at least
    ``min_iterations`` stable iterations on each side (the confidence tiers' ``confidence.medium_min_iterations``,
    default :data:`MIN_ITERATIONS`); each pair's shared kernel share (:func:`shared_kernel_share`) at least
    :data:`MIN_SHARED_KERNEL_SHARE` (a side whose kernel names could not be read fails it, saying why).
    ``names``: each pair's ``(before name, after name)``, to say which pair a text is of when pairs differ."""
    checks = []
    names = names or [(str(b["gpu_key"]), str(a["gpu_key"])) for b, a in job["pairs"]]
    nb = len(job["pairs"]) + sum(1 for s, _ in job["unpaired"] if s == "before")
    na = len(job["pairs"]) + sum(1 for s, _ in job["unpaired"] if s == "after")
    checks.append({"check": "gpus", "ok": nb == na, "text": f"GPUs: {nb} before, {na} after"})
    models, windows, kernels = [], [], []
    for b, a in job["pairs"]:
        mb, ma = str(b.get("gpu_model") or ""), str(a.get("gpu_model") or "")
        if mb == ma:
            models.append((True, f"model {mb or 'unknown'} both sides"))
        elif str(b.get("rate_model") or "") == str(a.get("rate_model") or "") and b.get("rate_model"):
            models.append((True, f"models differ ({mb or 'unknown'} / {ma or 'unknown'}), priced alike as "
                                 f"{b['rate_model']} (the stated rate basis)"))
        else:
            models.append((False, f"models differ: {mb or 'unknown'} before, {ma or 'unknown'} after"))
        rb, ra = str(b.get("window_rule")), str(a.get("window_rule"))
        enough = all(_iterations(r) >= min_iterations for r in (b, a))
        faults = ([] if rb == ra else [f"the window rules differ: {rb} before, {ra} after"]) + (
            [] if enough else [f"too few stable iterations: {_iterations(b)} before and {_iterations(a)} after, "
                               f"and each side needs at least {min_iterations} (confidence.medium_min_iterations)"])
        windows.append((not faults, "; ".join(faults) or (
            f"the same window rule ({rb}) on both sides, with {_iterations(b)} stable iterations before and "
            f"{_iterations(a)} after")))
        kb = sides[0].kernels.get((str(b["report"]), str(b["gpu_key"])))
        ka = sides[1].kernels.get((str(a["report"]), str(a["gpu_key"])))
        if not isinstance(kb, KernelTimes) or not isinstance(ka, KernelTimes):
            why = next((k for k in (kb, ka) if isinstance(k, str)), "kernel names not read")
            kernels.append((False, why))
        else:
            share, jac = shared_kernel_share(kb, ka)
            kernels.append((share >= MIN_SHARED_KERNEL_SHARE,
                            f"kernel time in shared names {100 * share:.2f} % (Jaccard of names {jac:.3f}; "
                            f"needs {100 * MIN_SHARED_KERNEL_SHARE:.0f} %)"))
    for name, found in (("model", models), ("window", windows), ("kernels", kernels)):
        if not found:
            continue
        bad = [i for i, (ok, _) in enumerate(found) if not ok]
        shown = bad or range(len(found))
        checks.append({"check": name, "ok": not bad,
                       "text": _per_pair([found[i][1] for i in shown], [names[i] for i in shown], len(found))})
    if not job["pairs"]:
        checks.append({"check": "pairs", "ok": False, "text": "no GPU paired"})
    reasons = [c["text"] for c in checks if not c["ok"]]
    return {"comparable": not reasons, "checks": checks, "reasons": reasons}


def confidence(rows_b: list, rows_a: list) -> dict:
    """The confidence tiers of one GPU pair or a job's pairs (docs/definitions.md#compare-verdict): ``{"before":
    the side's lowest tier (of :data:`~pipeline.analysis.confidence.TIERS`; None when no row has one), "after":
    the same, "low": either is ``toy`` or ``low``, "note": ``low confidence: <the rows' confidence_note>`` (each
    side's note once, prefixed by the side when they differ) when low, else ``""``}``. A low pair stays
    comparable when the verdict's checks pass; its figures are marked with the note."""
    def lowest(rows):
        tiers = [str(r.get("confidence_tier")) for r in rows if r.get("confidence_tier") in TIERS]
        return min(tiers, key=TIERS.index) if tiers else None

    out = {"before": lowest(rows_b), "after": lowest(rows_a)}
    out["low"] = any(t is not None and not trusted(t) for t in (out["before"], out["after"]))
    notes = {}
    for label, rows in zip(SIDES, (rows_b, rows_a)):
        found = [str(r.get("confidence_note") or "") for r in rows
                 if r.get("confidence_tier") in TIERS and not trusted(r.get("confidence_tier"))]
        found = [n or f"tier {lowest(rows)}" for n in found]
        if found:
            notes[label] = "; ".join(dict.fromkeys(found))
    if len(set(notes.values())) == 1 and len(notes) == 2:
        text = next(iter(notes.values()))
    else:
        text = "; ".join(f"{label} side: {n}" for label, n in notes.items())
    out["note"] = f"low confidence: {text}" if out["low"] else ""
    return out


# ---------------------------------------------------------------------------------------------- deltas

def _pct(part, whole) -> float:
    return 100.0 * int(part) / int(whole) if whole else math.nan


def pooled_sd(parts) -> float:
    """The pooled sample standard deviation of groups given as ``(n, s)`` (count, sample SD):
    ``sqrt(Σ (n − 1) s² / Σ (n − 1))``; NaN when any group's ``s`` is unknown (None or NaN) or no group has
    two values (docs/definitions.md#compare-deltas)."""
    parts = [(int(n), s) for n, s in parts]
    if not parts or any(s is None or math.isnan(float(s)) for _, s in parts):
        return math.nan
    dof = sum(n - 1 for n, _ in parts)
    return math.sqrt(sum((n - 1) * float(s) ** 2 for n, s in parts) / dof) if dof > 0 else math.nan


def noise_floor(sd_b: float, n_b: int, sd_a: float, n_a: int) -> float:
    """Twice the standard error of the difference of two means (Welch): ``2 × sqrt(sd_b² / n_b + sd_a² / n_a)``,
    in the unit of the SDs; NaN when an SD is unknown or a count is 0 (docs/definitions.md#compare-deltas)."""
    if math.isnan(sd_b) or math.isnan(sd_a) or not n_b or not n_a:
        return math.nan
    return 2.0 * math.sqrt(sd_b ** 2 / n_b + sd_a ** 2 / n_a)


def _iteration_sd(r: dict):
    """The sample SD (ns) of one GPU's kept iterations' lengths: ``iteration_cv × iteration_mean_ns`` (a
    population SD) × ``sqrt(n / (n − 1))``; None with fewer than 2 iterations or a figure missing."""
    n, cv, mean = int(r.get("iterations") or 0), r.get("iteration_cv"), r.get("iteration_mean_ns")
    if n < 2 or cv is None or mean is None:
        return None
    return float(cv) * float(mean) * math.sqrt(n / (n - 1))


#: Why a side's noise floor is unknown when its fleet table predates ``idle_pct_sd``.
NO_SD_COLUMN = "its fleet table was written before the idle_pct_sd column (run the side again)"


def _usd(fraction: float, rate, hours: float) -> float:
    """USD per month, rounded to cents as every stored dollar figure (NaN when unpriced)."""
    if rate is None or math.isnan(float(rate)):
        return math.nan
    return round(idle_usd_per_month(fraction, float(rate), hours), 2)


def _change(delta: float, floor: float, down: str, up: str) -> str:
    """``down``/``up`` when ``|delta|`` exceeds the noise floor, else ``no change detectable`` (a floor that
    is unknown: ``unknown``)."""
    if math.isnan(floor) or math.isnan(delta):
        return "unknown"
    if abs(delta) <= floor:
        return "no change detectable"
    return down if delta < 0 else up


def side_figures(rows: list, hours: float, rate_rows: list | None = None) -> dict:
    """One side's figures over ``rows`` (one GPU, or a job's paired GPUs): ``idle_pct`` = Σidle / ΣW,
    ``iteration_ns`` = the mean of the GPUs' ``iteration_mean_ns``, ``iterations`` = Σ stable iterations,
    per category ``cat_<c>_ms_per_iteration`` = Σcat / Σiterations in ms and ``cat_<c>_pct`` = Σcat / ΣW,
    ``idle_sd_pts`` = the pooled SD (:func:`pooled_sd`) of the GPUs' ``idle_pct_sd`` over their ``iterations``,
    ``iteration_sd_ns`` = the same of their iteration lengths' sample SDs (:func:`_iteration_sd`), ``sd_note`` =
    :data:`NO_SD_COLUMN` when a GPU with at least 2 iterations has no ``idle_pct_sd`` (else ``""``);
    ``usd`` of each GPU's idle fraction
    at the rates of ``rate_rows`` (the matching GPU of the side whose rates price it; default ``rows``),
    summed over the priced ones (:func:`~pipeline.analysis.cost.priced_sum`: NaN only when none is priced), and
    each category's ``cat_<c>_usd`` (its share of W priced alike), ``gpu_month_usd`` (the priced GPUs' month at
    full idle), and of those rates ``assumed_usd``, ``assumed_gpus``, ``unpriced_gpus``
    (:func:`~pipeline.analysis.cost.assumed_split`; docs/definitions.md#compare-deltas)."""
    rate_rows = rate_rows or rows
    window = sum(int(r["window_ns"]) for r in rows)
    idle = sum(int(r["idle_ns"]) for r in rows)
    its = sum(int(r.get("iterations") or 0) for r in rows)
    means = [int(r["iteration_mean_ns"]) for r in rows if r.get("iteration_mean_ns") is not None
             and int(r.get("iterations") or 0) > 0]
    out = {"window_ns": window, "idle_ns": idle, "idle_pct": _pct(idle, window), "iterations": its,
           "iteration_ns": (sum(means) / len(means)) if means and len(means) == len(rows) else math.nan,
           "idle_sd_pts": pooled_sd((int(r.get("iterations") or 0), r.get("idle_pct_sd")) for r in rows),
           "iteration_sd_ns": pooled_sd((int(r.get("iterations") or 0), _iteration_sd(r)) for r in rows),
           "sd_note": NO_SD_COLUMN if any(int(r.get("iterations") or 0) >= 2 and r.get("idle_pct_sd") is None
                                          for r in rows) else ""}
    for c in CATEGORIES:
        ns = sum(int(r.get(f"cat_{c}_ns") or 0) for r in rows)
        out[f"cat_{c}_ms_per_iteration"] = ns / its / 1e6 if its else math.nan
        out[f"cat_{c}_pct"] = _pct(ns, window)
    usd = [_usd(int(r["idle_ns"]) / int(r["window_ns"]), q.get("rate_usd_per_hour"), hours)
           for r, q in zip(rows, rate_rows)]
    out["usd"] = round(priced_sum(usd), 2)   # the priced GPUs' sum; NaN only when every one is unpriced
    for c in CATEGORIES:   # each category's idle dollars, priced alike (the gate's figures, :func:`gate`)
        out[f"cat_{c}_usd"] = round(priced_sum([_usd(int(r.get(f"cat_{c}_ns") or 0) / int(r["window_ns"]),
                                                     q.get("rate_usd_per_hour"), hours)
                                                for r, q in zip(rows, rate_rows)]), 2)
    out["gpu_month_usd"] = round(priced_sum([_usd(1.0, q.get("rate_usd_per_hour"), hours) for q in rate_rows]), 2)
    out.update(assumed_split(usd, [bool(q.get("rate_assumed")) for q in rate_rows], [math.isnan(u) for u in usd],
                             [q.get("gpu_model") or r.get("gpu_model") for r, q in zip(rows, rate_rows)]))
    return out


def deltas(b_rows: list, a_rows: list, hours_b: float, hours_a: float) -> dict:
    """What changed over paired rows (``b_rows[i]`` is ``a_rows[i]``'s GPU before): each side's
    :func:`side_figures`, the changes after − before, and the readings against the noise floor
    (docs/definitions.md#compare-deltas): ``noise_floor_pts`` = :func:`noise_floor` of the two sides' idle SDs
    over their iterations (points), ``iteration_noise_floor_pct`` = that of their iteration-length SDs in % of
    the before side's iteration length; ``noise_floor_note`` says why a floor is unknown (``""`` else). USD at the after side's rates (and hours): ``usd_before_after_rates``,
    ``usd_after_after_rates``, ``usd_change_after_rates``; at fixed rates (the before side's):
    ``usd_before_fixed_rates``, ``usd_after_fixed_rates``, ``usd_change_fixed_rates``;
    ``saving_usd_per_month`` = −``usd_change_after_rates`` only when the idle share fell by more than its noise
    floor (else None); ``reading`` (:data:`READINGS`): ``saving``, ``idle up``, ``no change detectable`` or
    ``unknown``, of these rows against their own floor (a job's from its pooled GPUs, never its GPUs' readings). Per rate basis (``after_rates``, ``fixed_rates``; both sides priced by one side's rows, so
    the same GPUs): ``assumed_usd_before_<basis>``, ``assumed_usd_after_<basis>`` (USD at assumed rates),
    ``assumed_gpus_<basis>`` and ``unpriced_gpus_<basis>`` (counts). For the gate (:func:`gate`):
    ``cat_<c>_usd_change_after_rates`` (each category's idle USD at the after side's rates, after − before) and
    ``noise_floor_usd`` (``noise_floor_pts`` / 100 × the after side's priced GPUs' month at full idle)."""
    fb, fa = side_figures(b_rows, hours_b), side_figures(a_rows, hours_a)
    out = {"before": fb, "after": fa}
    out["idle_pct_change_pts"] = fa["idle_pct"] - fb["idle_pct"]
    out["noise_floor_pts"] = noise_floor(fb["idle_sd_pts"], fb["iterations"], fa["idle_sd_pts"], fa["iterations"])
    out["noise_floor_note"] = "; ".join(f"{label} side: {f['sd_note']}" for label, f in zip(SIDES, (fb, fa))
                                        if f["sd_note"])
    out["idle_change"] = _change(out["idle_pct_change_pts"], out["noise_floor_pts"], "lower", "higher")
    out["iteration_change_pct"] = 100.0 * (fa["iteration_ns"] - fb["iteration_ns"]) / fb["iteration_ns"] \
        if fb["iteration_ns"] else math.nan
    floor_ns = noise_floor(fb["iteration_sd_ns"], fb["iterations"], fa["iteration_sd_ns"], fa["iterations"])
    out["iteration_noise_floor_pct"] = 100.0 * floor_ns / fb["iteration_ns"] if fb["iteration_ns"] else math.nan
    out["iteration_change"] = _change(out["iteration_change_pct"], out["iteration_noise_floor_pct"], "faster", "slower")
    out["speedup"] = fb["iteration_ns"] / fa["iteration_ns"] if fa["iteration_ns"] else math.nan
    for c in CATEGORIES:
        out[f"cat_{c}_ms_per_iteration_change"] = fa[f"cat_{c}_ms_per_iteration"] - fb[f"cat_{c}_ms_per_iteration"]
        out[f"cat_{c}_pct_change_pts"] = fa[f"cat_{c}_pct"] - fb[f"cat_{c}_pct"]
    at_after = side_figures(b_rows, hours_a, a_rows)["usd"], fa["usd"]
    fixed = fb["usd"], side_figures(a_rows, hours_b, b_rows)["usd"]
    for basis, (b_f, a_f) in (("after_rates", (side_figures(b_rows, hours_a, a_rows), fa)),
                              ("fixed_rates", (fb, side_figures(a_rows, hours_b, b_rows)))):
        out.update({f"assumed_usd_before_{basis}": b_f["assumed_usd"], f"assumed_usd_after_{basis}": a_f["assumed_usd"],
                    f"assumed_gpus_{basis}": a_f["assumed_gpus"], f"unpriced_gpus_{basis}": a_f["unpriced_gpus"],
                    f"unpriced_models_{basis}": a_f["unpriced_models"]})
    out.update(usd_before_after_rates=at_after[0], usd_after_after_rates=at_after[1],
               usd_change_after_rates=round(at_after[1] - at_after[0], 2),
               usd_before_fixed_rates=fixed[0], usd_after_fixed_rates=fixed[1],
               usd_change_fixed_rates=round(fixed[1] - fixed[0], 2))
    out["saving_usd_per_month"] = -out["usd_change_after_rates"] if out["idle_change"] == "lower" else None
    b_after = side_figures(b_rows, hours_a, a_rows)
    for c in CATEGORIES:
        out[f"cat_{c}_usd_change_after_rates"] = round(fa[f"cat_{c}_usd"] - b_after[f"cat_{c}_usd"], 2)
    out["noise_floor_usd"] = round(out["noise_floor_pts"] / 100.0 * fa["gpu_month_usd"], 2)
    out["reading"] = READINGS[out["idle_change"]]
    return out


#: A deltas' ``reading`` (docs/definitions.md#compare-deltas) by its idle share's change against its own noise floor
#: (``idle_change``): only an idle share lower by more than the floor is a saving.
READINGS = {"lower": "saving", "higher": "idle up", "no change detectable": "no change detectable",
            "unknown": "unknown"}


# ---------------------------------------------------------------------------------------------- gaps

def _place(gap: dict, doc: dict, kernels) -> tuple:
    """A device gap's place in its iteration: ``(iteration status, k)`` where ``k`` counts the GPU's kernels
    that start in the iteration before the gap; ``("outside", None)`` when no iteration holds its start,
    ``(status, None)`` when the kernels are unknown."""
    start = int(gap["start_ns"])
    for _, s, e, status in doc.get("timeline", {}).get("iteration_extents", []):
        if int(s) <= start < int(e):
            if not isinstance(kernels, KernelTimes):
                return (str(status), None)
            k = int(np.searchsorted(kernels.starts, start, "left") - np.searchsorted(kernels.starts, int(s), "left"))
            return (str(status), k)
    return ("outside", None)


def gap_changes(doc_b: dict | None, doc_a: dict | None, kb, ka) -> list[dict]:
    """The device-level gaps of one GPU pair's rosters (the longest ``roster_size`` of each side), grouped by
    the kernel before and after them and their place in the iteration (:func:`_place`)
    (docs/definitions.md#compare-gaps): one entry per group, ``{"kernel_before", "kernel_after", "place",
    "category_before", "category_after", "count_before", "count_after", "ns_before", "ns_after", "change"}``
    with ``change`` ``vanished`` (only before), ``appeared`` (only after) or ``kept``; sorted by the larger
    side's total, longest first."""
    groups: dict = {}
    for i, (doc, kern) in enumerate(((doc_b, kb), (doc_a, ka))):
        for g in (doc or {}).get("device_roster", []):
            status, k = _place(g, doc, kern)
            key = (str(g.get("kernel_before") or ""), str(g.get("kernel_after") or ""), status, k)
            e = groups.setdefault(key, {"count": [0, 0], "ns": [0, 0], "cats": [{}, {}]})
            e["count"][i] += 1
            e["ns"][i] += int(g["length_ns"])
            e["cats"][i][g["category"]] = e["cats"][i].get(g["category"], 0) + int(g["length_ns"])
    out = []
    for (before_k, after_k, status, k), e in groups.items():
        cats = [max(c, key=lambda n: (c[n], n)) if c else "" for c in e["cats"]]
        change = "kept" if all(e["count"]) else "vanished" if e["count"][0] else "appeared"
        out.append({"kernel_before": before_k, "kernel_after": after_k,
                    "place": f"{status} iteration, after kernel {k}" if k is not None else status,
                    "category_before": cats[0], "category_after": cats[1], "count_before": e["count"][0],
                    "count_after": e["count"][1], "ns_before": e["ns"][0], "ns_after": e["ns"][1], "change": change})
    out.sort(key=lambda x: (-max(x["ns_before"], x["ns_after"]), x["kernel_before"], x["kernel_after"], x["place"]))
    return out


# ---------------------------------------------------------------------------------------------- the whole

def side_names(pairs: list, unpaired: list) -> tuple[dict, dict]:
    """Each side's ``(report, gpu_key) -> name`` for one job pair: the name every view of that side's run gives the
    GPU (:func:`~pipeline.report.medical.job_gpu_names`: numbered within the job by report, then GPU key), so a GPU
    reads the same in the comparison, its run's table, report, GPU page and records; what a pair shares is shown
    beside it (its seat: rank, device or pid; docs/definitions.md#compare-pairing)."""
    out = ({}, {})
    for i, side in enumerate(SIDES):
        rows = [p[i] for p in pairs] + [r for s, r in unpaired if s == side]
        out[i].update(job_gpu_names(rows))
    return out


#: The value each pairing basis pairs by, as it is shown beside a GPU (docs/definitions.md#compare-pairing).
BASIS_COLUMN = {"rank": "rank", "device ordinal": "device_ids", "process order": "pid"}


def _seat(row: dict, basis: str) -> str:
    """What ``row``'s GPU was paired by: ``rank 3``, ``device 1``, ``pid 144``."""
    col = BASIS_COLUMN[basis]
    v = row.get(col)
    return f"{'device' if col == 'device_ids' else col} {v if v is not None else '-'}"


def pairing_warning(basis: str) -> str:
    """The warning of a job pair whose GPUs no rank paired (docs/definitions.md#compare-pairing): ``""`` for ``rank``;
    for ``device ordinal`` and ``process order`` what they were paired by instead, and that a pair is then not
    known to be the same worker (label the ranks to pair by them)."""
    if basis == "rank":
        return ""
    how = ("by CUDA device ordinal" if basis == "device ordinal"
           else "in process order (report, then first process id, then GPU key)")
    return (f"no rank pairs these GPUs, so they were paired {how}: each pair is not known to be the same worker; "
            "check the pairing, or give each GPU its rank (rank in a labels rule) to pair by rank")


def compare(sides: tuple, force: bool = False, min_iterations: int = MIN_ITERATIONS) -> dict:
    """The comparison of two :class:`Side` s as plain values (what every output renders): ``sides``, per job
    its pairing, :func:`verdict` (with ``min_iterations``: the config's ``confidence.medium_min_iterations``)
    and (comparable, or ``force``: then ``forced`` is true and every figure is marked) its :func:`deltas` and
    each GPU pair's, with the gaps of both rosters (:func:`gap_changes`); per GPU pair and per job the
    :func:`confidence` tiers; the GPUs and jobs left unpaired."""
    b, a = sides
    pairing = pair_gpus(b.rows, a.rows)
    jobs = []
    for job in pairing["jobs"]:
        names_b, names_a = side_names(job["pairs"], job["unpaired"])
        keys = [((str(rb["report"]), str(rb["gpu_key"])), (str(ra["report"]), str(ra["gpu_key"])))
                for rb, ra in job["pairs"]]
        v = verdict(job, sides, min_iterations, [(names_b[kb], names_a[ka]) for kb, ka in keys])
        shown = v["comparable"] or force
        gpus = []
        for (rb, ra), (kb, ka) in zip(job["pairs"], keys):
            entry = {"before": {"name": names_b[kb], "report": kb[0], "gpu_key": kb[1], "rank": rb.get("rank"),
                                "device_ids": rb.get("device_ids"), "seat": _seat(rb, job["basis"])},
                     "after": {"name": names_a[ka], "report": ka[0], "gpu_key": ka[1], "rank": ra.get("rank"),
                               "device_ids": ra.get("device_ids"), "seat": _seat(ra, job["basis"])},
                     "confidence": confidence([rb], [ra])}
            if shown:
                entry["deltas"] = deltas([rb], [ra], b.hours, a.hours)
                entry["gaps"] = gap_changes(b.docs.get(kb), a.docs.get(ka), b.kernels.get(kb), a.kernels.get(ka))
            gpus.append(entry)
        unpaired = [{"side": s, "name": (names_b if s == "before" else names_a)[(str(r["report"]), str(r["gpu_key"]))],
                     "report": str(r["report"]), "gpu_key": str(r["gpu_key"])} for s, r in job["unpaired"]]
        entry = {"before": list(job["before"]), "after": list(job["after"]), "basis": job["basis"],
                 "pairing_warning": pairing_warning(job["basis"]) if job["pairs"] else "", "verdict": v,
                 "forced": bool(force and not v["comparable"]), "gpus": gpus, "unpaired": unpaired,
                 "confidence": confidence([p[0] for p in job["pairs"]], [p[1] for p in job["pairs"]])}
        if shown and job["pairs"]:
            entry["deltas"] = deltas([p[0] for p in job["pairs"]], [p[1] for p in job["pairs"]], b.hours, a.hours)
        jobs.append(entry)
    return {"sides": [{"label": s.label, "source": s.source, "folder": s.folder, "gpus": len(s.rows),
                       "hours_per_month": s.hours, "failed": [{"report": r, "error": e} for r, e in s.failed],
                       "jobs": [list(k) for k in sorted({_job(r) for r in s.rows}, key=lambda k: (k[1], k[0]))]}
                      for s in sides],
            "min_iterations": int(min_iterations),
            "jobs": jobs,
            "unpaired_jobs": [{"side": s, "job": list(k), "gpus": [str(r["gpu_key"]) for r in rows]}
                              for s, k, rows in pairing["unpaired_jobs"]]}


# ---------------------------------------------------------------------------------------------- the gate

#: The exit status of ``gpu-idle compare`` whose gate failed (:func:`gate`; ``pipeline.cli.EXIT_STATUSES``).
GATE_FAILED = 3


def gate(result: dict, above: float | None = None, above_total: float | None = None, strict: bool = False) -> dict:
    """The CI gate in dollars over a :func:`compare` result (docs/operations.md#compare-as-a-ci-gate): per job pair,
    each category's idle USD per month at the after side's rates (``cat_<c>_usd_change_after_rates`` of its
    :func:`deltas`, when ``above`` is given) and the job's total (``usd_change_after_rates``, when ``above_total``
    is given) fail when their growth exceeds the job's noise floor in dollars (``noise_floor_usd``: the idle
    share's floor in points × the priced GPUs' month at full idle) by more than the threshold. A job not
    comparable, unpriced or whose floor is unknown is not gated, saying why, and fails the gate only when
    ``strict``; so does a comparison in which no job paired. Returns ``{"above_usd", "above_total_usd", "strict",
    "failed", "jobs": [{"job", "applied", "why", "checks": [{"what", "growth_usd", "floor_usd", "excess_usd",
    "threshold_usd", "reading", "failed"}]}], "verdict": text}``; ``reading`` is ``above the threshold``,
    ``below the threshold``, ``inside the noise floor`` or ``unpriced``."""
    jobs = []
    for job in result["jobs"]:
        v, d = job["verdict"], job.get("deltas")
        if not v["comparable"]:
            why = "not comparable: " + "; ".join(v["reasons"])
        elif d is None:
            why = "no GPU paired"
        elif _nan(d["usd_after_after_rates"]):
            why = "unpriced: no GPU of the job has a rate"
        elif _nan(d["noise_floor_pts"]):
            why = "the noise floor is unknown (" + (d.get("noise_floor_note") or
                                                    "no stable iterations on a side to measure it") + ")"
        else:
            why = ""
        entry = {"job": _title(job), "applied": not why, "why": why, "checks": []}
        wanted = ([(c, f"cat_{c}_usd_change_after_rates", above) for c in CATEGORIES] if above is not None else []) \
            + ([("total", "usd_change_after_rates", above_total)] if above_total is not None else [])
        for what, key, limit in (wanted if not why else []):
            growth, floor = d[key], d["noise_floor_usd"]
            if _nan(growth):
                entry["checks"].append({"what": what, "growth_usd": None, "floor_usd": floor, "excess_usd": None,
                                        "threshold_usd": limit, "reading": "unpriced", "failed": False})
                continue
            excess = round(growth - floor, 2)
            failed = excess > limit
            reading = "above the threshold" if failed else ("inside the noise floor" if growth <= floor
                                                             else "below the threshold")
            entry["checks"].append({"what": what, "growth_usd": growth, "floor_usd": floor, "excess_usd": excess,
                                    "threshold_usd": limit, "reading": reading, "failed": failed})
        jobs.append(entry)
    if not jobs:
        jobs.append({"job": "", "applied": False, "why": "nothing paired", "checks": []})
    over = [(j, c) for j in jobs for c in j["checks"] if c["failed"]]
    skipped = [j for j in jobs if not j["applied"]]
    failed = bool(over) or (strict and bool(skipped))
    if over:
        verdict = f"FAILED: {len(over)} figure(s) grew by more than the threshold beyond the noise floor"
    elif failed:
        verdict = f"FAILED (--strict): {len(skipped)} job(s) not gated"
    elif skipped and len(skipped) == len(jobs):
        verdict = "not applied: no job could be gated (--strict makes that a failure)"
    else:
        verdict = "passed" + (f"; {len(skipped)} job(s) not gated (--strict makes that a failure)" if skipped else "")
    return {"above_usd": above, "above_total_usd": above_total, "strict": bool(strict), "failed": failed,
            "jobs": jobs, "verdict": verdict}


def gate_lines(g: dict) -> list[str]:
    """The gate's verdict (:func:`gate`) as plain lines: the verdict, then per job why it was not gated, or each
    figure that failed or grew (growth, noise floor, excess over it, threshold), and how many did not grow."""
    limits = "; ".join(t for t in (f"--fail-above {usd(g['above_usd'])}" if g["above_usd"] is not None else "",
                                   f"--fail-above-total {usd(g['above_total_usd'])}"
                                   if g["above_total_usd"] is not None else "",
                                   "--strict" if g["strict"] else "") if t)
    lines = [f"gate ({limits}): {g['verdict']}"]
    for j in g["jobs"]:
        name = j["job"] or "the comparison"
        if not j["applied"]:
            lines.append(f"  {name}: not gated: {j['why']}")
            continue
        grew = [c for c in j["checks"] if c["failed"] or (c["growth_usd"] or 0) > 0]
        for c in grew:
            what = "total idle" if c["what"] == "total" else f"{c['what']} idle"
            lines.append(f"  {name}: {what} {_signed_money(c['growth_usd'])}/month against a noise floor of "
                         f"{_money(c['floor_usd'])} ({_signed_money(c['excess_usd'])} beyond it) and a threshold of "
                         f"{_money(c['threshold_usd'])}: {c['reading']}" + (" (FAILED)" if c["failed"] else ""))
        rest = len(j["checks"]) - len(grew)
        if rest:
            lines.append(f"  {name}: {rest} other figure(s) did not grow")
    return lines


# ---------------------------------------------------------------------------------------------- outputs

#: compare.csv's columns: one row per GPU pair and per job (``level``), then one per unpaired GPU.
CSV_COLUMNS = ["level", "cluster", "job", "job_after", "gpu_before", "gpu_after", "gpu_key_before", "gpu_key_after",
               "pairing", "comparable", "forced", "reasons", "idle_pct_before", "idle_pct_after", "idle_pct_change_pts",
               "noise_floor_pts", "idle_change", "reading", "iteration_ms_before", "iteration_ms_after", "iteration_change_pct",
               "iteration_noise_floor_pct", "iteration_change", "speedup",
               *(f"cat_{c}_{x}" for c in CATEGORIES for x in ("ms_per_iteration_before", "ms_per_iteration_after",
                                                              "ms_per_iteration_change", "pct_before", "pct_after",
                                                              "pct_change_pts")),
               "usd_before_after_rates", "usd_after_after_rates", "usd_change_after_rates", "usd_before_fixed_rates",
               "usd_after_fixed_rates", "usd_change_fixed_rates", "saving_usd_per_month", "rate_assumed",
               "assumed_gpus", "assumed_usd_before_after_rates", "assumed_usd_after_after_rates", "unpriced_gpus",
               "assumed_gpus_fixed_rates", "unpriced_gpus_fixed_rates", "confidence_tier_before",
               "confidence_tier_after", "low_confidence", "confidence_note", "gaps_vanished", "gaps_appeared",
               "gaps_kept_changed"]


def _r(x, n: int = 4):
    """A figure for the files: rounded to ``n`` decimals; None when missing."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return None
    return round(float(x), n) + 0.0  # + 0.0: no -0.0


def _figures(d: dict | None) -> dict:
    """The CSV cells of one :func:`deltas` (empty when withheld)."""
    if d is None:
        return {}
    fb, fa = d["before"], d["after"]
    out = {"idle_pct_before": _r(fb["idle_pct"]), "idle_pct_after": _r(fa["idle_pct"]),
           "idle_pct_change_pts": _r(d["idle_pct_change_pts"]), "noise_floor_pts": _r(d["noise_floor_pts"]),
           "idle_change": d["idle_change"], "reading": d["reading"], "iteration_ms_before": _r(fb["iteration_ns"] / 1e6, 6),
           "iteration_ms_after": _r(fa["iteration_ns"] / 1e6, 6), "iteration_change_pct": _r(d["iteration_change_pct"]),
           "iteration_noise_floor_pct": _r(d["iteration_noise_floor_pct"]), "iteration_change": d["iteration_change"],
           "speedup": _r(d["speedup"])}
    for c in CATEGORIES:
        out.update({f"cat_{c}_ms_per_iteration_before": _r(fb[f"cat_{c}_ms_per_iteration"], 6),
                    f"cat_{c}_ms_per_iteration_after": _r(fa[f"cat_{c}_ms_per_iteration"], 6),
                    f"cat_{c}_ms_per_iteration_change": _r(d[f"cat_{c}_ms_per_iteration_change"], 6),
                    f"cat_{c}_pct_before": _r(fb[f"cat_{c}_pct"]), f"cat_{c}_pct_after": _r(fa[f"cat_{c}_pct"]),
                    f"cat_{c}_pct_change_pts": _r(d[f"cat_{c}_pct_change_pts"])})
    for k in ("usd_before_after_rates", "usd_after_after_rates", "usd_change_after_rates", "usd_before_fixed_rates",
              "usd_after_fixed_rates", "usd_change_fixed_rates", "saving_usd_per_month"):
        out[k] = _r(d[k], 2)
    out.update(rate_assumed=bool(d["assumed_gpus_after_rates"]), assumed_gpus=d["assumed_gpus_after_rates"],
               assumed_usd_before_after_rates=_r(d["assumed_usd_before_after_rates"], 2),
               assumed_usd_after_after_rates=_r(d["assumed_usd_after_after_rates"], 2),
               unpriced_gpus=d["unpriced_gpus_after_rates"], assumed_gpus_fixed_rates=d["assumed_gpus_fixed_rates"],
               unpriced_gpus_fixed_rates=d["unpriced_gpus_fixed_rates"])
    return out


def _tiers(c: dict) -> dict:
    """The CSV cells of one :func:`confidence`; an empty ``speedup`` where it is withheld (:func:`ratio_withheld`)."""
    return {"confidence_tier_before": c["before"], "confidence_tier_after": c["after"], "low_confidence": c["low"],
            "confidence_note": c["note"], **({"speedup": None} if ratio_withheld(c) else {})}


def csv_rows(result: dict) -> list[dict]:
    """compare.csv's rows (:data:`CSV_COLUMNS`), per job: its GPU pairs, then the job itself, then its
    unpaired GPUs; then the GPUs of unpaired jobs."""
    rows = []
    for job in result["jobs"]:
        v = job["verdict"]
        common = {"cluster": job["before"][0], "job": job["before"][1], "job_after": job["after"][1],
                  "pairing": job["basis"], "comparable": v["comparable"], "forced": job["forced"],
                  "reasons": "; ".join(v["reasons"])}
        for g in job["gpus"]:
            gaps = g.get("gaps", [])
            rows.append({**common, "level": "gpu", "gpu_before": g["before"]["name"], "gpu_after": g["after"]["name"],
                         "gpu_key_before": g["before"]["gpu_key"], "gpu_key_after": g["after"]["gpu_key"],
                         **_figures(g.get("deltas")), **_tiers(g["confidence"]),
                         **({"gaps_vanished": sum(x["count_before"] for x in gaps if x["change"] == "vanished"),
                             "gaps_appeared": sum(x["count_after"] for x in gaps if x["change"] == "appeared"),
                             "gaps_kept_changed": sum(1 for x in gaps if _width_changed(x))}
                            if "deltas" in g else {})})
        rows.append({**common, "level": "job", **_figures(job.get("deltas")), **_tiers(job["confidence"])})
        for u in job["unpaired"]:
            rows.append({**common, "level": f"unpaired-{u['side']}", f"gpu_{u['side']}": u["name"],
                         f"gpu_key_{u['side']}": u["gpu_key"]})
    for u in result["unpaired_jobs"]:
        for key in u["gpus"]:
            rows.append({"level": f"unpaired-{u['side']}", "cluster": u["job"][0], "job": u["job"][1],
                         f"gpu_key_{u['side']}": key, "comparable": False, "reasons": f"job only {u['side']}"})
    return rows


def render_csv(result: dict) -> str:
    """compare.csv: :func:`csv_rows` under :data:`CSV_COLUMNS` (text cells made safe for spreadsheets)."""
    frame = pd.DataFrame(csv_rows(result), columns=CSV_COLUMNS, dtype=object)  # whole numbers stay whole
    return csv_safe(frame).to_csv(index=False, lineterminator="\n")


def _plain(obj):
    """``obj`` with NaN as None and numpy scalars as Python's, for JSON."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        return None if math.isnan(float(obj)) else float(obj)
    return obj


def json_result(result: dict) -> str:
    """compare.json (and ``--format json``): the :func:`compare` result, with its ``gate`` when one was asked for."""
    return json_text(_plain(result))


#: A kernel name in the Markdown is cut to this many characters (the last one ``…``).
KERNEL_CHARS = 60


def _cut(name, chars: int = KERNEL_CHARS) -> str:
    name = str(name)
    return name if len(name) <= chars else name[:chars - 1] + "…"


def _mark(forced: bool, low: bool = False) -> str:
    return (" [forced: not comparable]" if forced else "") + (" [low confidence]" if low else "")


def _money(x) -> str:
    return usd(_nn(x))


def _signed_money(x) -> str:
    """A change in USD per month (:func:`pipeline.report.words.signed_usd`); ``unpriced`` when it cannot be priced."""
    return "unpriced" if _nan(x) else signed_usd(x)


def _num(x, n: int = 2, unit: str = "") -> str:
    return "-" if x is None or math.isnan(x) else f"{x:,.{n}f}{unit}"


def _width_changed(x: dict) -> bool:
    """A ``kept`` gap group (:func:`gap_changes`) whose gaps' total width or count is not the same on both sides."""
    return x["change"] == "kept" and (x["ns_before"] != x["ns_after"] or x["count_before"] != x["count_after"])


def shown_gaps(gaps: list) -> list:
    """The gap groups a view lists: those that vanished or appeared and the kept ones whose width changed."""
    return [x for x in gaps if x["change"] != "kept" or _width_changed(x)]


def place_text(place: str) -> str:
    """A gap group's place (:func:`gap_changes`) as words: ``in a kept iteration, after kernel 3``, ``outside
    every iteration``."""
    return "outside every iteration" if place == "outside" else f"in a {place}"


def floor_text(change: str, floor: float, unit: str, note: str = "") -> str:
    """A change's reading against its noise floor (docs/definitions.md#compare-deltas) as a sentence part."""
    if change == "unknown":
        return "the noise floor is unknown (" + (note or "no stable iterations on a side to measure it") + \
            "): no change can be claimed"
    if change == "no change detectable":
        return f"within the noise floor of {_num(floor, 2, unit)}: no change detectable"
    return f"{change}, by more than the noise floor of {_num(floor, 2, unit)}"


def usd_figure(x, assumed_gpus: int) -> str:
    """A dollar figure as the product writes it (``$1,234.56``, ``−$57.99``, ``unpriced``), ``~`` before it when
    some of it rests on assumed rates (docs/definitions.md#cost)."""
    return ("~" if assumed_gpus and not _nan(x) else "") + _money(x)


def rates_note(d: dict, basis: str) -> str:
    """What the dollars of one rate basis (``after_rates``/``fixed_rates``) of a :func:`deltas` rest on, after
    them: ``; of which $X -> $Y at assumed rates (N GPU(s))``, ``; N GPU(s) unpriced, not in it (their models);
    to price them, ...``; empty when neither (the wording of :func:`~pipeline.fleet.reduce.assumed_text`)."""

    n = d[f"assumed_gpus_{basis}"]
    out = (f"; of which {_money(d[f'assumed_usd_before_{basis}'])} -> {_money(d[f'assumed_usd_after_{basis}'])} "
           f"at assumed rates ({n} GPU(s))") if n else ""
    return out + assumed_text({"assumed_gpus": 0, "assumed_usd": 0.0, "unpriced_gpus": d[f"unpriced_gpus_{basis}"],
                               "unpriced_models": d.get(f"unpriced_models_{basis}")})


def ratio_withheld(conf: dict | None) -> str:
    """Why the speed-up (the iteration lengths' ratio) of a pair or job whose tiers are ``conf``
    (:func:`confidence`) is withheld: a side of tier ``toy`` (a window or kernel count too small to measure an
    iteration: a ratio such as 4421x would read as a result); ``""`` when it is shown (a ``low`` side's is marked)."""
    sides = [label for label in SIDES if (conf or {}).get(label) == "toy"]
    if not sides:
        return ""
    return (f"speed-up withheld: the {' and the '.join(sides)} side{'s are' if len(sides) > 1 else ' is a'} toy "
            f"capture{'s' if len(sides) > 1 else ''} (tier toy), too small for an iteration length to compare")


def summary_lines(d: dict, forced: bool, low: bool = False, withheld: str = "") -> list[str]:
    """The Markdown lines of one :func:`deltas` (every figure marked when ``forced`` or ``low``): idle share,
    iteration length (each side's; the speed-up, or ``withheld``: :func:`ratio_withheld`), dollars
    (:func:`dollars_line`), the saving or why none is claimed, per category."""
    fb, fa, m = d["before"], d["after"], _mark(forced, low)
    idle = (f"idle {_num(fb['idle_pct'], 2, ' %')} -> {_num(fa['idle_pct'], 2, ' %')} "
            f"({signed(d['idle_pct_change_pts'], 2, ' pts')}); "
            f"{floor_text(d['idle_change'], d['noise_floor_pts'], ' pts', d.get('noise_floor_note', ''))}{m}")
    if _nan(fb["iteration_ns"]) or _nan(fa["iteration_ns"]):
        it = f"iteration length unknown (no stable iterations on a side){m}"
    else:
        it = (f"iteration {_num(fb['iteration_ns'] / 1e6, 3, ' ms')} -> {_num(fa['iteration_ns'] / 1e6, 3, ' ms')} "
              f"({signed(d['iteration_change_pct'], 2, ' %')}); "
              f"{floor_text(d['iteration_change'], d['iteration_noise_floor_pct'], ' %')}; "
              f"{withheld or 'speed-up ' + _num(d['speedup'], 3, 'x')}{m}")
    if d["idle_change"] == "lower":
        money = (f"saving {_money(d['saving_usd_per_month'])}/month at the after side's rates "
                 f"({_money(-d['usd_change_fixed_rates'])} at the before side's){m}")
    elif d["idle_change"] == "higher":
        money = (f"idle cost up {_money(d['usd_change_after_rates'])}/month at the after side's rates "
                 f"({_money(d['usd_change_fixed_rates'])} at the before side's){m}")
    elif d["idle_change"] == "unknown":
        money = f"no saving claimed: the noise floor is unknown{m}"
    else:
        money = f"no saving claimed: no change detectable{m}"
    cats = [f"{c} " + ("" if _nan(d[f'cat_{c}_ms_per_iteration_change']) else
                       f"{signed(d[f'cat_{c}_ms_per_iteration_change'], 3, ' ms per iteration')}, ")
            + f"{signed(d[f'cat_{c}_pct_change_pts'], 2, ' pts')} of W" for c in CATEGORIES
            if fb[f"cat_{c}_pct"] or fa[f"cat_{c}_pct"]]
    return [f"- {idle}", f"- {it}", f"- {dollars_line(d)}{m}", f"- {money}",
            f"- change per category: {'; '.join(cats) or 'none'}{m}"]


def dollars_line(d: dict) -> str:
    """Both sides' idle dollars per month of one :func:`deltas` and their change, at the after side's rates,
    then at fixed rates (the before side's) when those give other figures (docs/definitions.md#compare-deltas);
    shown whatever the reading (the saving is claimed apart, only when detectable). A total over some priced
    GPUs is their sum and says how many are unpriced; one resting partly on assumed rates reads ``~$`` and says
    how much (:func:`rates_note`)."""
    change = _signed_money
    n = d["assumed_gpus_after_rates"]
    text = (f"idle {usd_figure(d['usd_before_after_rates'], n)} -> {usd_figure(d['usd_after_after_rates'], n)} per "
            f"month at the after side's rates ({change(d['usd_change_after_rates'])}){rates_note(d, 'after_rates')}")
    after = (d["usd_before_after_rates"], d["usd_after_after_rates"])
    fixed = (d["usd_before_fixed_rates"], d["usd_after_fixed_rates"])
    if any(not (x == y or (_nan(x) and _nan(y))) for x, y in zip(after, fixed)):
        n = d["assumed_gpus_fixed_rates"]
        text += (f"; {usd_figure(fixed[0], n)} -> {usd_figure(fixed[1], n)} at fixed rates (the before side's) "
                 f"({change(d['usd_change_fixed_rates'])}){rates_note(d, 'fixed_rates')}")
    return text


def _nan(x) -> bool:
    return x is None or math.isnan(x)


def _nn(x) -> float:
    """``x`` with None as NaN (a figure read back from JSON)."""
    return math.nan if x is None else x


def _title(job: dict) -> str:
    return job["before"][1] + ("" if job["before"] == job["after"] else f" -> {job['after'][1]}")


def no_pairs_text(result: dict) -> str:
    """The sentence saying that no job of one side paired with one of the other (docs/definitions.md#compare-pairing),
    naming each side's jobs (``cluster/job`` when the sides' clusters differ; the first five), with the hint that
    their job labels differ; empty when some job paired."""
    if result["jobs"]:
        return ""
    clusters = {c for s in result["sides"] for c, _ in s["jobs"]}
    names = []
    for s in result["sides"]:   # cluster/job when the clusters differ: a job pairs by both
        jobs = [j if len(clusters) == 1 else f"{c}/{j}" for c, j in s["jobs"]]
        names.append(", ".join(jobs[:5]) + (f" and {len(jobs) - 5} more" if len(jobs) > 5 else "") or "none")
    return (f"Nothing paired: no job of the before side ({names[0]}) has a namesake on the after side ({names[1]}). "
            "The two sides' job labels differ: a report with no label is a job of its own, named after its file. "
            "Label both sides alike: compare reports with --config and a labels section, or run each side with "
            "the same labels.")


def quiet(job: dict) -> bool:
    """Whether a comparable job shows no change at all: its idle share and iteration length, and every GPU
    pair's, either read "no change detectable" or did not move, its dollars did not move, no gap vanished,
    appeared or changed width, and no GPU is unpaired (the md prints such a job on one line)."""
    if not job["verdict"]["comparable"] or "deltas" not in job or job["unpaired"]:
        return False

    def still(d: dict) -> bool:
        idle = d["idle_change"] == "no change detectable" or d["idle_pct_change_pts"] == 0
        it = d["iteration_change"] == "no change detectable" or _nan(d["iteration_change_pct"]) \
            or d["iteration_change_pct"] == 0
        return idle and it and (_nan(d["usd_change_after_rates"]) or d["usd_change_after_rates"] == 0)

    return still(job["deltas"]) and all(still(g["deltas"]) and not shown_gaps(g["gaps"]) for g in job["gpus"])


def render_text(result: dict) -> list[str]:
    """The default ``text`` print: per job its verdict (``job: comparable`` or ``job: not comparable: …``), then,
    where its figures are shown, the idle share's reading, the dollars of both sides (:func:`dollars_line`) and
    the saving or why none is claimed, indented, a low-confidence job's note and its unpaired GPUs; when nothing
    paired, the sentence of :func:`no_pairs_text`; after the jobs, the jobs only one side holds and each side's
    failed reports (as the Markdown says them), so the print never hides what was left out. Each line as it is
    printed."""
    lines = [no_pairs_text(result)] if not result["jobs"] else []
    for job in result["jobs"]:
        v, low = job["verdict"], job["confidence"]
        lines.append(f"{_title(job)}: " + ("comparable" if v["comparable"] else "not comparable: " + "; ".join(v["reasons"])))
        if job["pairing_warning"]:
            lines.append(f"  warning: {job['pairing_warning']}")
        if "deltas" in job:
            figures = summary_lines(job["deltas"], job["forced"], low["low"], ratio_withheld(low))
            lines += ["  " + figures[i][2:] for i in (0, 1, 2, 3)]   # idle, iteration (each side's), dollars, saving
        if low["low"]:
            lines.append(f"  {low['note']}")
        lines += [f"  unpaired ({u['side']} only): {u['name']} ({u['gpu_key']} in "
                  f"{os.path.basename(u['report'])})" for u in job["unpaired"]]
    for u in result["unpaired_jobs"]:
        lines.append(f"unpaired job ({u['side']} only): {u['job'][1]}, {len(u['gpus'])} GPU(s)")
    for side in result["sides"]:
        if side["failed"]:
            lines.append(f"{side['label']}: {len(side['failed'])} failed report(s) in {side['source']}, "
                         "not compared (--format md and compare.json name them)")
    if result.get("gate"):
        lines += gate_lines(result["gate"])
    return lines


def gap_line(x: dict, forced: bool, low: bool) -> str:
    """One gap group (:func:`gap_changes`) as a Markdown line: what happened to it, its kernels (cut to
    :data:`KERNEL_CHARS`), place and category."""
    between = (f"between {md_code(_cut(x['kernel_before'] or '-'))} and {md_code(_cut(x['kernel_after'] or '-'))}, "
               f"{place_text(x['place'])}, category {x['category_before'] or x['category_after']}")
    if x["change"] == "kept":
        what = (f"kept, width changed: {x['count_before']} gap(s) of {x['ns_before'] / 1e6:,.3f} ms in all -> "
                f"{x['count_after']} of {x['ns_after'] / 1e6:,.3f} ms ({signed((x['ns_after'] - x['ns_before']) / 1e6, 3, ' ms')})")
    else:
        n, ns = (x["count_before"], x["ns_before"]) if x["change"] == "vanished" else (x["count_after"], x["ns_after"])
        what = f"{x['change']}: {n} gap(s) of {ns / 1e6:,.3f} ms in all"
    return f"- gap {what}, {between}{_mark(forced, low)}"


def render_markdown(result: dict) -> str:
    """``--format md``: the verdict and what changed, per job then per GPU pair, for chat; per GPU pair at most
    :data:`~pipeline.report.medical.TOP_GAPS` (5, the seed's page) gap groups that changed, the largest first, then
    how many more; a job with no change at all (:func:`quiet`) on one line under "Jobs with no detectable change"."""
    lines = ["# Before and after", ""]
    for s in result["sides"]:
        lines.append(f"- {s['label']}: {md_text(s['source'])} ({s['gpus']} GPU(s)"
                     + (f", {len(s['failed'])} failed report(s)" if s["failed"] else "") + ")")
    if result.get("gate"):   # the verdict first: the pull-request comment's first line says pass or fail
        head, *rest = gate_lines(result["gate"])
        lines += ["", "## Gate", "", f"**{md_text(head)}**", ""] + [f"- {md_text(x.strip())}" for x in rest]
    if not result["jobs"]:
        lines += ["", md_text(no_pairs_text(result))]
    still = []
    for job in result["jobs"]:
        v, conf = job["verdict"], job["confidence"]
        title = md_text(_title(job))
        if quiet(job):
            d = job["deltas"]
            still.append(f"- {title}: comparable, no change: {len(job['gpus'])} GPU pair(s) paired by {job['basis']}"
                         + (" (warning: no rank pairs them)" if job["pairing_warning"] else "") + ", idle "
                         f"{_num(d['before']['idle_pct'], 2, ' %')} on both sides, "
                         f"{usd_figure(d['usd_after_after_rates'], d['assumed_gpus_after_rates'])} per month"
                         + (f"; {md_text(conf['note'])}" if conf["low"] else ""))
            continue
        lines += ["", f"## {title}", ""]
        lines.append("Comparable." if v["comparable"] else "Not comparable: " + md_text("; ".join(v["reasons"]))
                     + (". Shown with --force: every figure below is marked." if job["forced"]
                        else ". The figures are withheld (--force shows them)."))
        lines.append(f"Confidence tiers: {conf['before'] or 'unknown'} before, {conf['after'] or 'unknown'} after"
                     + (f"; {md_text(conf['note'])} (every figure below is marked)." if conf["low"] else "."))
        lines += ["", f"GPUs paired by {job['basis']}:"]
        if job["pairing_warning"]:
            lines.append(f"- warning: {md_text(job['pairing_warning'])}")
        lines += [f"- {g['before']['name']} ({g['before']['seat']}) -> {g['after']['name']} ({g['after']['seat']})"
                  for g in job["gpus"]]
        lines += [f"- unpaired ({u['side']} only): {u['name']} ({md_text(u['gpu_key'])} in "
                  f"{md_text(os.path.basename(u['report']))})" for u in job["unpaired"]]
        if "deltas" in job:
            lines += ["", "Job:"] + summary_lines(job["deltas"], job["forced"], conf["low"], ratio_withheld(conf))
        for g in job["gpus"]:
            if "deltas" not in g:
                continue
            low = g["confidence"]["low"]
            lines += ["", f"### {g['before']['name']} -> {g['after']['name']}"]
            if low:
                lines.append(f"- {md_text(g['confidence']['note'])}")
            lines += summary_lines(g["deltas"], job["forced"], low, ratio_withheld(g["confidence"]))
            moved = shown_gaps(g["gaps"])
            lines += [gap_line(x, job["forced"], low) for x in moved[:TOP_GAPS]] or [
                "- no gap vanished, appeared or changed width"]
            if len(moved) > TOP_GAPS:
                lines.append(f"- and {len(moved) - TOP_GAPS} more gap group(s) that changed (compare.html and "
                             "compare.json list every one)")
    if still:
        lines += ["", "## Jobs with no detectable change", ""] + still
    for u in result["unpaired_jobs"]:
        lines += ["", f"Unpaired job ({u['side']} only): {md_text(u['job'][1])}, {len(u['gpus'])} GPU(s)"]
    return "\n".join(lines) + "\n"


def seed_pages(result: dict, sides: tuple, at: str | None = None) -> list[dict]:
    """The seed's page of each job pair's two sides (docs/definitions.md#compare-records), in ``result["jobs"]``
    order: ``{"title": the pair's title, "before": Markdown, "after": Markdown}``, each side's page being its job's
    medical record (:func:`pipeline.report.medical.job_record`: the idle line, the category line, the five largest
    gaps) over that side's stored rows. ``at``: the folder the pages' GPU links are made relative to
    (:func:`page_links`; None: links left as the record writes them)."""
    fleets = [load_results(s.folder).current for s in sides]
    pages = []
    for job in result["jobs"]:
        texts = []
        for s, fleet, key in zip(sides, fleets, (job["before"], job["after"])):
            rows = fleet[(fleet["cluster"].astype(str) == key[0]) & (fleet["job"].astype(str) == key[1])]
            roster = {k: {"device": d.get("device_roster", [])} for k, d in s.docs.items()}
            text = job_record(key[1], rows, roster)
            texts.append(page_links(text, s.folder, at) if at is not None else text)
        title = job["before"][1] if job["before"] == job["after"] else f"{job['before'][1]} -> {job['after'][1]}"
        pages.append({"title": title, "before": texts[0], "after": texts[1]})
    return pages


def stacked_record(title: str, before: str, after: str) -> str:
    """The seed's page of one job for both sides, stacked (docs/definitions.md#compare-records): the before side's
    page (:func:`seed_pages`) under ``## Before``, then the after side's under ``## After``, headings one level
    down, each page's own title line left out."""
    out = [f"# Before and after: {md_text(title)}", ""]
    for label, text in (("Before", before), ("After", after)):
        body = [("#" + line if line.startswith("#") else line) for line in text.splitlines()]
        out += [f"## {label}", ""] + body[2:] + [""]
    return "\n".join(out).rstrip("\n") + "\n"


def run_folder_reason(out_dir: str) -> str:
    """Why ``out_dir`` may not hold a comparison, or ``""``: it is a gpu-idle run or sweep output folder (it holds
    a run's manifest, :data:`~pipeline.store.results.MANIFEST`, or ``fleet.parquet``, or is a sweep state folder),
    whose own records a comparison's ``records/`` would mix with and a later ``run --out`` would keep
    (docs/definitions.md#compare-records)."""

    held = [n for n in (MANIFEST, "fleet.parquet") if os.path.lexists(os.path.join(out_dir, n))]
    if not held and not is_sweep_dir(out_dir):
        return ""
    what = f"it holds {' and '.join(held)}" if held else "it is a sweep state folder"
    return (f"{out_dir} is a gpu-idle run or sweep output folder ({what}): a comparison is not written among a "
            "run's own files; give --out a folder of its own (e.g. a new one)")


def page_links(text: str, folder: str, at: str) -> str:
    """A medical record's GPU page links (``[name](../gpu-pages/<page>)``) made to point from the folder ``at``
    into the run folder ``folder``'s own ``gpu-pages/`` when the page is there; a page that is not (compare
    renders none; ``gpu-idle report`` writes them) leaves the name unlinked, saying so
    (docs/definitions.md#compare-records)."""

    def link(m) -> str:
        page = os.path.join(folder, PAGES_DIR, m.group(2))
        if os.path.isfile(page):
            return f"[{m.group(1)}]({os.path.relpath(page, at).replace(os.sep, '/')})"
        return f"{m.group(1)} (no GPU page: `gpu-idle report` on {md_text(folder)} writes it)"

    return re.sub(r"\[([^\]]*)\]\(\.\./" + re.escape(PAGES_DIR) + r"/([^)]+)\)", link, text)


#: The comparison folder's record of the files it wrote (:func:`pipeline.store.results.read_manifest`'s format).
COMPARE_MANIFEST = ".compare-manifest.json"


class CompareNotWritten(OSError):
    """A file of the comparison is there and not one gpu-idle compare wrote (or was changed since): nothing
    was written."""


def write_compare(out_dir: str, result: dict, sides: tuple) -> list[str]:
    """Write ``compare.csv``, ``compare.json``, ``compare.html`` (:func:`render_html`, the seed's pages side by side)
    and ``records/<job>.md`` (one stacked page per job pair, :func:`stacked_record`) into ``out_dir``, each atomically (:func:`pipeline.io.write_text`),
    then :data:`COMPARE_MANIFEST` listing them (size and SHA-256). A file it would overwrite must be listed
    there with the bytes it holds (an earlier comparison's); records of an earlier comparison not written
    again are removed, files it never wrote never touched. Returns the paths written.

    Raises:
        CompareNotWritten: a target is there and not the product's (nothing written).
        OSError: a file cannot be written.
    """

    refused = run_folder_reason(out_dir)
    if refused:
        raise CompareNotWritten(refused + "; nothing written")
    records = os.path.join(out_dir, "records")
    texts = {"compare.csv": render_csv(result), "compare.json": json_result(result),
             "compare.html": render_html(result, seed_pages(result, sides))}
    for page in seed_pages(result, sides, records):
        texts[f"records/{record_stem(page['title'])}.md"] = stacked_record(page["title"], page["before"], page["after"])
    owned = (read_manifest(out_dir, COMPARE_MANIFEST) or {"files": {}})["files"]
    foreign = sorted(rel for rel in texts if os.path.lexists(os.path.join(out_dir, rel))
                     and (rel not in owned or not same_file(os.path.join(out_dir, rel), owned[rel])))
    if foreign:
        raise CompareNotWritten(f"{out_dir}: {', '.join(foreign)} there already and not written by gpu-idle compare "
                                "(or changed since): move them away and run again; nothing written")
    drop_manifest(out_dir, claim=list(texts), name=COMPARE_MANIFEST)
    real_dir(os.path.join(out_dir, "records"))
    for rel, text in texts.items():
        write_text(os.path.join(out_dir, rel), text)
    earlier = {rel[len("records/"):]: e for rel, e in owned.items() if rel.startswith("records/")}
    gone = prune(os.path.join(out_dir, "records"), {os.path.basename(r) for r in texts if r.startswith("records/")},
                 earlier)
    kept = {rel: e for rel, e in owned.items() if rel not in texts and rel[len("records/"):] not in gone
            and os.path.lexists(os.path.join(out_dir, rel))}
    write_folder_manifest(out_dir, {**kept, **{rel: file_entry(os.path.join(out_dir, rel)) for rel in texts}}, None,
                          name=COMPARE_MANIFEST)
    return [os.path.join(out_dir, rel) for rel in texts]


def remove_compare(out_dir: str) -> list[str]:
    """Remove what an earlier comparison wrote into ``out_dir`` (the files its :data:`COMPARE_MANIFEST` lists
    that still hold what it lists, then the manifest and the folders left empty); files it never wrote are
    never touched. Returns the removed paths. Raises OSError when one cannot be removed."""

    doc = read_manifest(out_dir, COMPARE_MANIFEST)
    if doc is None:
        return []
    gone = []
    for rel, entry in sorted(doc["files"].items()):
        path = os.path.join(out_dir, rel)
        if entry is not None and same_file(path, entry):
            os.unlink(path)
            gone.append(path)
    os.unlink(os.path.join(out_dir, COMPARE_MANIFEST))
    remove_if_empty(os.path.join(out_dir, "records"))
    remove_if_empty(out_dir)
    return gone


def changed_jobs(before: pd.DataFrame, after: pd.DataFrame) -> set:
    """The jobs (``(cluster, job)`` as text) of both fleet tables whose analysed rows differ: their set of
    ``(report, gpu_key, window_ns, idle_ns)`` is not the same (docs/definitions.md#compare-in-the-sweep)."""
    def signatures(fleet: pd.DataFrame) -> dict:
        out: dict = {}
        table = conform(fleet, [*JOB_KEY, "report", "gpu_key", "window_ns", "idle_ns"])
        for r in analysed_rows(table).to_dict("records"):
            out.setdefault(_job(r), set()).add((str(r["report"]), str(r["gpu_key"]), _value(r["window_ns"]),
                                                _value(r["idle_ns"])))
        return out

    b, a = signatures(before), signatures(after)
    return {k for k in set(b) & set(a) if b[k] != a[k]}


def report_style() -> str:
    """The report's ``<style>`` block, read from its template (``report.html.j2``): the comparison page
    looks like the report with no second copy of its CSS."""
    from .jinja import environment  # jinja2: only the HTML page

    env = environment()
    source = env.loader.get_source(env, "report.html.j2")[0]
    return re.search(r"<style>.*?</style>", source, re.S).group(0)


def _unlinked(text: str) -> str:
    """A seed page's Markdown with its links reduced to their text: compare.html shows the pages' GPU names, the GPU
    pages themselves are linked from each side's records (docs/definitions.md#compare-records)."""

    return re.sub(r"\[((?:[^\]]|\](?!\())*)\]\([^)]*\)", r"\1", text)


def render_html(result: dict, pages: list | None = None) -> str:
    """compare.html: the verdict, the pairing and what changed per job and per GPU pair, in the report's look
    (:func:`report_style`); self-contained, no script. ``pages``: :func:`seed_pages` (links relative to the page's
    folder), shown side by side under each job, before on the left (point 4 of docs/definitions.md#compare-records);
    None: not shown."""
    from markupsafe import Markup

    from .html import _record_html
    from .jinja import environment

    def sfmt(x, n=2, unit=""):
        return signed(x, n, unit)

    def money(x):
        return "-" if _nan(x) else usd(x)

    env = environment(fmt=_num, sfmt=sfmt, money=money, smoney=_signed_money)
    return env.get_template("compare.html.j2").render(
        r=result, style=Markup(report_style()), categories=CATEGORIES, floor_text=floor_text, usd_figure=usd_figure,
        rates_note=rates_note, shown_gaps=shown_gaps, place_text=place_text, no_pairs=no_pairs_text(result),
        ratio_withheld=ratio_withheld,
        seed=[{"before": Markup(_record_html(_unlinked(p["before"]))), "after": Markup(_record_html(_unlinked(p["after"])))}
              for p in pages] if pages else None)


__all__ = ["SIDES", "Side", "KernelTimes", "ReportError", "read_side", "kernel_times", "pair_gpus", "verdict",
           "deltas", "gap_changes", "compare", "pairing_warning", "confidence", "side_names", "render_csv", "render_markdown", "render_text",
           "stacked_record", "write_compare", "run_folder_reason", "page_links", "dollars_line", "no_pairs_text",
           "GATE_FAILED", "gate", "gate_lines", "json_result"]
