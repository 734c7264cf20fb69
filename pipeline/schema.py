"""The fleet schema: every column of the fleet table and of its rollups, declared once.

docs/outputs.md#column-reference is generated from this module (:func:`column_reference`,
``python -m pipeline.schema``; tests/test_schema.py fails when the page differs). Each
:class:`Column` says its name, dtype, unit, how it rolls up to a job and a cluster, which outputs
show it and what it means. The fleet frame's columns and dtypes (:func:`pipeline.fleet.reduce.fleet_frame`),
the rollups (:func:`pipeline.fleet.reduce.rollup`), the printed table (``cli.SHOWN``) and the report's
CSV (``report.html.CSV_COLUMNS``) come from here; a row key not declared here is an error
(:func:`check_row`), and a table written before a column existed is read through one path
(:func:`conform`: the column filled with its dtype's missing value).

A job is ``(cluster, job)`` (:data:`JOB_KEY`): two clusters that each run a job called ``train`` run two
jobs, in every grouping (stragglers, rollups, fix-first, window agreement, medical records, the report).
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Callable, NamedTuple

import numpy as np
import pandas as pd

from .model import ASSUMED, CATEGORIES, CAVEATS

#: A row's ``status`` for a report that is another file of a capture analysed under another name
#: (docs/inputs.md#duplicate-captures): no GPU, no figure, never priced.
DUPLICATE = "duplicate"
#: The statuses of rows that hold no analysed GPU: every count, sum and table of GPUs leaves them out.
NOT_ANALYSED = ("error", DUPLICATE)


def analysed_rows(fleet: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``fleet`` that are analysed GPUs (``status`` ``ok`` or ``partial``: not :data:`NOT_ANALYSED`)."""
    return fleet[~fleet["status"].isin(NOT_ANALYSED)]


#: The one job key: every per-job grouping groups by these fleet columns, in this order.
JOB_KEY = ("cluster", "job")
#: The cluster rollup's key.
CLUSTER_KEY = ("cluster",)

#: dtypes: ``Int64`` (whole numbers, nullable, int64 in Arrow and Parquet, never through float64),
#: ``bool`` (False where missing), ``float`` (float64, NaN where missing), ``text`` (object, None where missing).
DTYPES = ("Int64", "bool", "float", "text")
#: units a column is measured in.
UNITS = ("ns", "%", "USD/month", "USD/h", "count", "text", "bool", "factor")
#: The outputs a column can be shown in: ``fleet`` (fleet.parquet and fleet.csv: every fleet column),
#: ``printed`` (the table ``gpu-idle run`` prints), ``printed-wide`` (``gpu-idle run --wide``), ``report-csv`` (``gpu-idle report --format csv``),
#: ``markdown`` (``--format md``'s GPU table), ``report`` (the HTML report's tables).
OUTPUTS = ("fleet", "printed", "printed-wide", "report-csv", "markdown", "report")

#: The application categories (never a caveat), in the model's order: every ``fix_<c>_*`` column.
FIXABLE = tuple(c for c in CATEGORIES if c not in CAVEATS)


@dataclasses.dataclass(frozen=True)
class Column:
    """One column: ``name``, ``dtype`` (:data:`DTYPES`), ``unit`` (:data:`UNITS`), ``meaning`` (one line) and
    ``group`` (the heading its longer note in the column reference sits under, :data:`NOTES`)."""

    name: str
    dtype: str
    unit: str
    meaning: str
    group: str = ""

    def __post_init__(self):
        if self.dtype not in DTYPES or self.unit not in UNITS:
            raise ValueError(f"column {self.name}: dtype {self.dtype!r} or unit {self.unit!r} unknown")


# ---------------------------------------------------------------------------------------------
# Figure groups: the row contract. Each group is a frozen dataclass whose fields are fleet columns, each field's
# dtype and unit in its metadata; the analysis builds the price-free row of its groups (ANALYSED_GROUPS,
# pipeline.analysis.analyse.measure_gpu), the unit of work, the reduce and the accounting add theirs. The
# columns below (FLEET) take their dtype and unit from here; their order, meaning and note are the tables'.


class Figures:
    """A figure group: a frozen dataclass whose fields are fleet columns (:func:`_f`: dtype and unit)."""

    def columns(self) -> dict:
        """``{column: value}`` of the group's fields, in field order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def _f(dtype: str, unit: str):
    """A group's field that is a fleet column of ``dtype`` (:data:`DTYPES`) and ``unit`` (:data:`UNITS`)."""
    if dtype not in DTYPES or unit not in UNITS:
        raise ValueError(f"dtype {dtype!r} or unit {unit!r} unknown")
    return dataclasses.field(metadata={"dtype": dtype, "unit": unit})


def _group(name: str, doc: str, fields) -> type:
    """A figure group of ``fields`` (``(column, dtype, unit)``; columns made per category)."""
    cls = dataclasses.make_dataclass(name, [(n, object, _f(d, u)) for n, d, u in fields], bases=(Figures,),
                                     frozen=True)
    cls.__doc__ = doc
    return cls


@dataclasses.dataclass(frozen=True)
class Identity(Figures):
    """The GPU and its report's labels, as the analysis was given them (``measure_gpu``)."""

    report: str | None = _f("text", "text")
    cluster: str | None = _f("text", "text")
    job: str | None = _f("text", "text")
    node: str | None = _f("text", "text")
    rank: str | None = _f("text", "text")
    scheduler_job: str | None = _f("text", "text")
    host: str | None = _f("text", "text")
    host_source: str | None = _f("text", "text")
    dist_world_size: int | None = _f("Int64", "count")
    dist_backend: str | None = _f("text", "text")
    gpu_key: str | None = _f("text", "text")
    pid: int | None = _f("Int64", "count")
    device_id: int | None = _f("Int64", "count")
    pids: str | None = _f("text", "text")
    device_ids: str | None = _f("text", "text")
    gpu_model: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Window(Figures):
    """The analysis window W and its stable iterations (``analysis/window.py``, ``analysis/iterations.py``)."""

    window_rule: str | None = _f("text", "text")
    untrimmed: bool = _f("bool", "bool")
    window_start_ns: int | None = _f("Int64", "ns")
    window_end_ns: int | None = _f("Int64", "ns")
    window_ns: int | None = _f("Int64", "ns")
    iterations: int | None = _f("Int64", "count")
    iteration_mean_ns: int | None = _f("Int64", "ns")
    iteration_cv: float = _f("float", "factor")
    excluded_iterations: str | None = _f("text", "text")
    kept_iterations: str | None = _f("text", "text")
    window_note: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Kind(Figures):
    """The job kind and what W keeps of the capture (``analysis/kind.py``, ``analysis/graphcapture.py``)."""

    job_kind: str | None = _f("text", "text")
    job_kind_source: str | None = _f("text", "text")
    capture_ns: int | None = _f("Int64", "ns")
    first_kernel_ns: int | None = _f("Int64", "ns")
    startup_wait_ns: int | None = _f("Int64", "ns")
    startup_cut: bool = _f("bool", "bool")
    graph_capture_ns: int | None = _f("Int64", "ns")
    startup_only: bool = _f("bool", "bool")
    capture_idle_ns: int | None = _f("Int64", "ns")
    capture_idle_pct: float = _f("float", "%")
    window_left_out_idle_ns: int | None = _f("Int64", "ns")
    window_left_out_idle_pct: float = _f("float", "%")


@dataclasses.dataclass(frozen=True)
class Idle(Figures):
    """Device-level idle in W and the copies outside it (``analysis/gaps.py``)."""

    kernel_count: int | None = _f("Int64", "count")
    stream_count: int | None = _f("Int64", "count")
    busy_ns: int | None = _f("Int64", "ns")
    idle_ns: int | None = _f("Int64", "ns")
    idle_pct: float = _f("float", "%")
    copy_only_ns: int | None = _f("Int64", "ns")
    dark_ns: int | None = _f("Int64", "ns")
    copies_outside_count: int | None = _f("Int64", "count")
    copies_outside_ns: int | None = _f("Int64", "ns")
    amdahl_speedup: float = _f("float", "factor")


@dataclasses.dataclass(frozen=True)
class Meter(Figures):
    """The sampled meter beside the truth (``analysis/meter.py``)."""

    busy_pct: float = _f("float", "%")
    sample_periods: int | None = _f("Int64", "count")
    sampled_busy_periods: int | None = _f("Int64", "count")
    sampled_util_pct: float = _f("float", "%")


@dataclasses.dataclass(frozen=True)
class Gaps(Figures):
    """Per-stream and device-level gaps, slivers and launch-boundness (``analysis/gaps.py``)."""

    gap_count: int | None = _f("Int64", "count")
    gap_total_ns: int | None = _f("Int64", "ns")
    max_gap_ns: int | None = _f("Int64", "ns")
    gaps_le_5ms: int | None = _f("Int64", "count")
    gaps_5_50ms: int | None = _f("Int64", "count")
    gaps_gt_50ms: int | None = _f("Int64", "count")
    gaps_le_5ms_ns: int | None = _f("Int64", "ns")
    gaps_5_50ms_ns: int | None = _f("Int64", "ns")
    gaps_gt_50ms_ns: int | None = _f("Int64", "ns")
    sliver_count: int | None = _f("Int64", "count")
    sliver_total_ns: int | None = _f("Int64", "ns")
    copy_overlap_ns: int | None = _f("Int64", "ns")
    device_gap_count: int | None = _f("Int64", "count")
    device_gap_ns: int | None = _f("Int64", "ns")
    device_sliver_count: int | None = _f("Int64", "count")
    device_sliver_ns: int | None = _f("Int64", "ns")
    launch_bound: bool = _f("bool", "bool")


@dataclasses.dataclass(frozen=True)
class Communication(Figures):
    """Communication overlap (``analysis/overlap.py``)."""

    comm_ns: int | None = _f("Int64", "ns")
    comm_overlapped_ns: int | None = _f("Int64", "ns")
    comm_exposed_ns: int | None = _f("Int64", "ns")
    comm_pct: float = _f("float", "%")
    comm_overlapped_pct: float = _f("float", "%")
    comm_exposed_pct: float = _f("float", "%")


@dataclasses.dataclass(frozen=True)
class Collectives(Figures):
    """Idle inside collectives (``analysis/collwait.py``), price-free."""

    collective_ns: int | None = _f("Int64", "ns")
    collective_wait_ns: int | None = _f("Int64", "ns")
    collective_transfer_ns: int | None = _f("Int64", "ns")
    collective_pct: float = _f("float", "%")
    collective_wait_pct: float = _f("float", "%")
    collective_transfer_pct: float = _f("float", "%")
    collective_calls: int | None = _f("Int64", "count")
    collective_last_count: int | None = _f("Int64", "count")
    collective_chronic: bool = _f("bool", "bool")
    collective_p2p: bool = _f("bool", "bool")
    collective_wait_status: str | None = _f("text", "text")
    collective_wait_note: str | None = _f("text", "text")
    collective_match_basis: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Diagnosis(Figures):
    """The diagnostic rules' findings (``analysis/diagnosis.py``)."""

    diagnosis: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Status(Figures):
    """What the figures rest on and the row's status (``model.row_status``); ``straggler`` False until the reduce flags it."""

    straggler: bool = _f("bool", "bool")
    warnings: str | None = _f("text", "text")
    warning_codes: str | None = _f("text", "text")
    status: str | None = _f("text", "text")
    error: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Capture(Figures):
    """The capture's identity (``load/capture.py``), set by the unit of work."""

    capture_id: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Grouping(Figures):
    """How the job was decided (``fleet/grouping.py``), at the reduce."""

    job_grouped_by: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Accounting(Figures):
    """Who held the GPU (``accounting/``), after the reduce."""

    sched_job_id: str | None = _f("text", "text")
    sched_user: str | None = _f("text", "text")
    sched_account: str | None = _f("text", "text")
    sched_partition: str | None = _f("text", "text")
    sched_gpus: int | None = _f("Int64", "count")
    sched_matched_by: str | None = _f("text", "text")


@dataclasses.dataclass(frozen=True)
class Views(Figures):
    """Columns the views add to a fleet row (never in the fleet table)."""

    run_date: str | None = _f("text", "text")
    gpu_name: str | None = _f("text", "text")

Categories = _group("Categories", "The application's device-level idle per category and the caveats' "
                    "(``analysis/attribution.py``), the main and the actionable categories.",
                    [*((f"cat_{c}_ns", "Int64", "ns") for c in CATEGORIES + CAVEATS),
                     *((f"cat_{c}_pct", "float", "%") for c in CATEGORIES + CAVEATS),
                     ("main_category", "text", "text"), ("actionable", "text", "text")])
Confidence = _group("Confidence", "What the month extrapolates from and its tier (``analysis/confidence.py``) and the "
                    "price-free fix-first figures (``analysis/fixfirst.py``).",
                    [("iteration_spread_pct", "float", "%"), ("bursts", "Int64", "count"),
                     ("idle_pct_low", "float", "%"), ("idle_pct_high", "float", "%"), ("idle_pct_sd", "float", "%"),
                     *((f"fix_{c}_speedup", "float", "factor") for c in FIXABLE),
                     ("confidence_tier", "text", "text"), ("low_confidence", "bool", "bool"),
                     ("confidence_note", "text", "text"), ("implausible_speedup", "bool", "bool")])
Price = _group("Price", "The rate and the dollars, joined at the reduce (``analysis/cost.py`` ``price_rows``).",
               [("rate_model", "text", "text"), ("rate_usd_per_hour", "float", "USD/h"), ("rate_source", "text", "text"),
                ("rate_assumed", "bool", "bool"), ("unpriced", "bool", "bool"),
                *((f"{c}_usd_per_month", "float", "USD/month")
                  for c in ("idle", *CAVEATS, "comm_exposed", "collective_wait")),
                *((f"fix_{c}_usd_per_month", "float", "USD/month") for c in FIXABLE)])

#: The groups of a price-free row (a stored result: :func:`pipeline.analysis.analyse.measure_gpu`).
ANALYSED_GROUPS = (Identity, Window, Kind, Idle, Meter, Gaps, Categories, Communication, Collectives, Confidence,
                   Diagnosis, Status)
#: The groups of a fleet row: the analysed ones, then what the unit of work, the reduce and the accounting add.
GROUPS = ANALYSED_GROUPS + (Capture, Grouping, Accounting, Price)


def contract(groups) -> dict:
    """``column -> (dtype, unit, group name)`` of every field of ``groups``. Raises ValueError naming a column two
    groups provide."""
    out = {}
    for group in groups:
        for f in dataclasses.fields(group):
            if f.name in out:
                raise ValueError(f"column {f.name} is in figure groups {out[f.name][2]} and {group.__name__}")
            out[f.name] = (f.metadata["dtype"], f.metadata["unit"], group.__name__)
    return out


def contract_problems(groups, names) -> tuple[list, list]:
    """``(fields of groups no column of names declares, columns of names no group provides)``, each sorted."""
    provided = contract(groups)
    return sorted(set(provided) - set(names)), sorted(set(names) - set(provided))


_CONTRACT = contract(GROUPS + (Views,))


def _c(name, meaning, group=""):
    """The column ``name`` of a figure group (its dtype and unit), with its ``meaning`` and note ``group`` (the
    heading of its longer note, :data:`NOTES`). Raises KeyError for a column no figure group provides."""
    try:
        dtype, unit, _ = _CONTRACT[name]
    except KeyError:
        raise KeyError(f"column {name!r}: no figure group provides it (pipeline/schema.py)") from None
    return Column(name, dtype, unit, meaning, group)


_CATS = [_c(f"cat_{c}_ns", f"device-level idle of the application category `{c}`", "categories")
         for c in CATEGORIES]
_CATS += [_c(f"cat_{c}_pct", f"`cat_{c}_ns` as % of W", "categories") for c in CATEGORIES]
_CAVEAT_COLS = [_c(f"cat_{c}_ns", f"device-level idle that is not the application's: `{c}`", "caveats")
                for c in CAVEATS]
_CAVEAT_COLS += [_c(f"cat_{c}_pct", f"`cat_{c}_ns` as % of W", "caveats") for c in CAVEATS]
_FIX = [_c(f"fix_{c}_{k}", m.format(c=c), "fix")
        for c in FIXABLE for k, m in (("usd_per_month", "recoverable USD per month if `{c}` vanished"),
                                      ("speedup", "speed-up if `{c}` alone vanished"))]

#: Every column of the fleet table (fleet.parquet, fleet.csv; docs/outputs.md#fleet-table), in table order.
FLEET = (
    _c("report", "the report's path or URL", "labels"),
    _c("cluster", "the cluster label (`default` when no rule labels the report)", "labels"),
    _c("job", "the job label (default: the file name without its suffix and the rank it names)", "labels"),
    _c("node", "the node label", "labels"),
    _c("rank", "the rank label", "labels"),
    _c("job_grouped_by", "how the job was decided: `labels` (a `labels:` rule names it), "
       "`distributedInfo` (per-rank PyTorch traces of one job), `SLURM_JOB_ID` (Nsight exports naming the same "
       "Slurm job; [job grouping](definitions.md#job-grouping)) or `file` (the file is a job of its own)", "labels"),
    _c("scheduler_job", "the scheduler job an Nsight export's capture environment names "
       "(`SLURM_JOB_ID=<id>`; empty: none)", "labels"),
    _c("host", "the host the file names, on whose clock its times are: an Nsight export's "
       "`TARGET_INFO_SYSTEM_ENV` `Hostname` (else `HOSTNAME` in its capture's environment) when its rows are timed "
       "on the host's clock, a PyTorch trace's `host_name`; empty: none ([collective wait across files]"
       "(definitions.md#collective-wait-across-files))", "labels"),
    _c("host_source", "where `host` was read, or why an export's host is not used (its rows "
       "count from the capture's start: then said whether or not it names a host, and a `node` label gives it no "
       "clock either); empty: the file names no host", "labels"),
    _c("dist_world_size", "the world size a PyTorch trace's `distributedInfo` gives (empty: none)",
       "labels"),
    _c("dist_backend", "the backend a PyTorch trace's `distributedInfo` gives (`nccl`, ...; empty: "
       "none)", "labels"),
    _c("sched_job_id", "the scheduler job the accounting matched the report to (Slurm's job id, "
       "or a pod's `namespace/name`; empty: none)", "accounting"),
    _c("sched_user", "that job's user", "accounting"),
    _c("sched_account", "that job's account (Slurm) or team label (a pod's)", "accounting"),
    _c("sched_partition", "that job's partition (Slurm) or namespace (a pod's)", "accounting"),
    _c("sched_gpus", "the GPUs that job was allocated", "accounting"),
    _c("sched_matched_by", "the source and the rule that matched it: `slurm: environment`, "
       "`slurm: path`, `kubernetes: node`, ...", "accounting"),
    _c("gpu_key", "the GPU: MIG instance, physical GPU or `pid<P>/dev<D>`", "gpu"),
    _c("pid", "the first process driving the GPU", "gpu"),
    _c("device_id", "the first device id of the GPU", "gpu"),
    _c("pids", "every process driving the GPU, comma-separated", "gpu"),
    _c("device_ids", "every device id of the GPU, comma-separated", "gpu"),
    _c("gpu_model", "the GPU model the export (or a label) names; empty when unknown", "rate"),
    _c("window_rule", "the rule that chose W (`trim`, `nvtx`, `periodic`, `span`)", "window"),
    _c("untrimmed", "W is the whole span (no rule trimmed it)", "window"),
    _c("window_start_ns", "start of W on the report's clock", "window"),
    _c("window_end_ns", "end of W on the report's clock", "window"),
    _c("window_ns", "length of W", "window"),
    _c("capture_ns", "the GPU's capture: its first kernel's start to its last kernel's end", "confidence"),
    _c("first_kernel_ns", "the start of the GPU's first kernel on the report's clock (its capture "
       "C is `first_kernel_ns` to `first_kernel_ns + capture_ns`)", "confidence"),
    _c("iterations", "stable iterations inside W", "iterations"),
    _c("iteration_mean_ns", "their mean length on the GPU timeline", "iterations"),
    _c("iteration_cv", "their lengths' coefficient of variation", "iterations"),
    _c("iteration_spread_pct", "`100 × (max − min) / median` of their lengths (empty: no iterations)",
       "confidence"),
    _c("bursts", "stretches of work in W: kernel-union runs apart by holes over "
       "`confidence.serving_burst_gap_ns` (1 ms)", "confidence"),
    _c("excluded_iterations", "every other iteration number and why", "iterations"),
    _c("kept_iterations", "the kept iterations' numbers as compact ranges", "iterations"),
    _c("window_note", "why earlier rules abstained and how the iterations were found", "iterations"),
    _c("job_kind", "`training`, `serving` or `unknown`: from the `kind` label, else the stated rule", "kind"),
    _c("job_kind_source", "`label`, or the evidence the rule found (and on which GPU); empty when unknown",
       "kind"),
    _c("startup_wait_ns", "from the capture's start (the report's timeline zero) to the GPU's first kernel",
       "kind"),
    _c("startup_cut", "the capture began mid-run (no memory-allocating CUDA/HIP call of the GPU's "
       "processes before its first kernel): `startup_wait_ns` is not the job's start-up, which was not measured",
       "kind"),
    _c("graph_capture_ns", "graph-capture start-up: from the GPU's first kernel to the end of the "
       "last CUDA/HIP graph capture of its processes (0: none); C and a `span` W start after it", "kind"),
    _c("startup_only", "no kernel runs after the last graph capture ends: W is start-up only, "
       "not a steady state (tier `toy`, `partial`)", "kind"),
    _c("capture_idle_ns", "device-level idle over the capture C: first kernel start (after the "
       "graph-capture start-up) to last kernel end", "kind"),
    _c("capture_idle_pct", "`capture_idle_ns` as % of C", "kind"),
    _c("window_left_out_idle_ns", "the part of `capture_idle_ns` outside W: idle of the capture that no month "
       "prices (the report's first screen sums it over the fleet)", "kind"),
    _c("window_left_out_idle_pct", "the share of `capture_idle_ns` outside W (0 when C has no idle)",
       "kind"),
    _c("kernel_count", "kernels inside W (a CUDA graph execution traced as a whole counts as one)"),
    _c("stream_count", "(process, stream) pairs that ran them"),
    _c("busy_ns", "union of all kernel intervals on the GPU, clipped to W"),
    _c("idle_ns", "device-level idle: `window_ns − busy_ns` (the headline, no threshold)"),
    _c("idle_pct", "`idle_ns` as % of W"),
    _c("idle_pct_low", "the least idle % of one kept iteration's slice of W (empty: no iterations)",
       "confidence"),
    _c("idle_pct_high", "the most idle % of one kept iteration's slice of W (empty: no iterations)",
       "confidence"),
    _c("idle_pct_sd", "sample standard deviation of the kept iterations' idle shares (empty: fewer "
       "than 2 iterations)", "confidence"),
    _c("copy_only_ns", "idle while copy engines are busy but no kernel runs"),
    _c("dark_ns", "idle while nothing at all runs"),
    _c("copies_outside_count", "the GPU's copies and memsets with time outside W", "copies outside"),
    _c("copies_outside_ns", "the union of their time outside W (longer than W: `copies-outside-window`)",
       "copies outside"),
    _c("busy_pct", "`busy_ns` as % of W", "meter"),
    _c("sample_periods", "the sampled meter's periods in W: `⌈window_ns / meter.sample_ns⌉`", "meter"),
    _c("sampled_busy_periods", "those in which some kernel ran for a positive time", "meter"),
    _c("sampled_util_pct",
       "what a sampled meter would read: `100 × sampled_busy_periods / sample_periods`; empty (no reading, as the "
       "views say) when W holds fewer than 6 periods (1 s at the default 1/6 s)", "meter"),
    _c("gap_count", "per-stream gaps longer than `min_gap_ns` (summed over streams)", "gaps"),
    _c("gap_total_ns", "their total (can exceed W on many-stream GPUs)", "gaps"),
    _c("max_gap_ns", "the longest of them", "gaps"),
    _c("gaps_le_5ms", "per-stream gaps up to 5 ms", "gaps"),
    _c("gaps_5_50ms", "per-stream gaps over 5 ms, up to 50 ms", "gaps"),
    _c("gaps_gt_50ms", "per-stream gaps over 50 ms", "gaps"),
    _c("gaps_le_5ms_ns", "total of the gaps up to 5 ms", "gaps"),
    _c("gaps_5_50ms_ns", "total of the gaps over 5 ms, up to 50 ms", "gaps"),
    _c("gaps_gt_50ms_ns", "total of the gaps over 50 ms", "gaps"),
    _c("sliver_count", "sub-threshold per-stream gaps (launch-bound slivers)"),
    _c("sliver_total_ns", "their total"),
    _c("copy_overlap_ns", "copy-engine time inside the kept per-stream gaps"),
    _c("device_gap_count", "device-level gaps: holes over the threshold when no stream runs a kernel"),
    _c("device_gap_ns", "their total"),
    _c("device_sliver_count", "device-level holes up to the threshold", "launch"),
    _c("device_sliver_ns", "their total", "launch"),
    _c("launch_bound", "the device slivers are most of the application's idle", "launch"),
    *_CATS, *_CAVEAT_COLS,
    _c("main_category", "the application category holding the most idle (empty: none)", "categories"),
    _c("actionable", "the categories at `actionable_pct` of W or more, largest first", "categories"),
    _c("comm_ns", "union of the collective kernels, clipped to W", "comm"),
    _c("comm_overlapped_ns", "the part of it beside a compute kernel on another stream", "comm"),
    _c("comm_exposed_ns", "`comm_ns − comm_overlapped_ns`: communication with no compute beside it", "comm"),
    _c("comm_pct", "`comm_ns` as % of W", "comm"),
    _c("comm_overlapped_pct", "`comm_overlapped_ns` as % of W", "comm"),
    _c("comm_exposed_pct", "`comm_exposed_ns` as % of W", "comm"),
    _c("collective_ns", "the GPU's collective kernels inside W, summed per call: "
       "`collective_wait_ns + collective_transfer_ns`", "collwait"),
    _c("collective_wait_ns", "of it, waiting inside the kernel for the last rank to enter the call "
       "(empty: abstained)", "collwait"),
    _c("collective_transfer_ns", "of it, after the last rank entered (empty: abstained)", "collwait"),
    _c("collective_pct", "`collective_ns` as % of W", "collwait"),
    _c("collective_wait_pct", "`collective_wait_ns` as % of W", "collwait"),
    _c("collective_transfer_pct", "`collective_transfer_ns` as % of W", "collwait"),
    _c("collective_calls", "the GPU's collective calls inside W", "collwait"),
    _c("collective_last_count", "of them, the calls this GPU entered last (empty: abstained)",
       "collwait"),
    _c("collective_chronic", "last in more than `collective.chronic_share` of its calls", "collwait"),
    _c("collective_p2p", "every matched call is point-to-point send/recv (no NVTX range names a "
       "collective): its wait is the pipeline bubble", "collwait"),
    _c("collective_wait_status", "`measured`, `abstained` or `none` (no collective in W)", "collwait"),
    _c("collective_wait_note", "how the calls were matched, or why not", "collwait"),
    _c("collective_match_basis", "what the calls were matched by: `kth call of family` (the k-th "
       "kernel of a family on the same collective stream of each GPU), `kth call of family across files on one host` "
       "(the job's files on one host: one clock) or `abstained: <reason>`; empty with no collective in W", "collwait"),
    _c("rate_model", "the rate-card entry used", "rate"),
    _c("rate_usd_per_hour", "its rate per GPU-hour", "rate"),
    _c("rate_source", "why that entry (and its `source`)", "rate"),
    _c("rate_assumed", "priced without an entry of its own: the default model's rate (no model named "
       "on an NVIDIA GPU; under `cost.unlisted: default` also a model not on the card)", "rate"),
    _c("unpriced", "no entry of its own and no rate (`cost.unlisted: unpriced`, the default: a model "
       "not on the card, or none named on a GPU its input says is not NVIDIA's): every USD column empty, left out of "
       "every USD total, its model named by every total", "rate"),
    _c("idle_usd_per_month", "idle fraction × rate × hours per month (730)"),
    _c("profiler_usd_per_month", "the part of `idle_usd_per_month` that is profiler overhead",
       "caveat_usd"),
    _c("untraced_usd_per_month", "the part of `idle_usd_per_month` that is untraced",
       "caveat_usd"),
    _c("comm_exposed_usd_per_month", "exposed communication priced like idle (busy time)",
       "comm_usd"),
    _c("collective_wait_usd_per_month", "the wait inside collectives priced like idle (busy "
       "time: beside `idle_usd_per_month`, never in it)", "collwait"),
    _c("amdahl_speedup", "`1 / (1 − idle fraction)`: the speed-up if the idle vanished"),
    *_FIX,
    _c("confidence_tier", "how far the month can be trusted: `toy`, `low`, `medium` or `high`",
       "confidence"),
    _c("low_confidence", "`confidence_tier` is `toy` or `low`", "confidence"),
    _c("confidence_note", "why the tier is not higher: the shortfalls of a `toy` or `low` row and the "
       "cap of an `unknown` kind that holds a row down (empty for an uncapped `medium` and for `high`)",
       "confidence"),
    _c("implausible_speedup", "a speed-up of the row (`amdahl_speedup` or a `fix_<c>_speedup`) is 10× or more: "
                              "[implausible](definitions.md#fix-first)"),
    _c("diagnosis", "the diagnostic rules' findings (rule, outcome, evidence, remedy) as compact "
       "JSON, one object per finding (docs/definitions.md#diagnosis; empty: none)"),
    _c("straggler", "the straggler: the highest-idle GPU of a job whose idle % spread exceeds 10 points (not the late "
       "rank of its collectives, `collective_late_rank`)", "straggler"),
    _c("warnings", "what the figures rest on that was incomplete or could not be real", "status"),
    _c("warning_codes", "the codes of `warnings`, each once, comma-separated (e.g. "
       "`gpu-model-unresolved,window-leaves-out-idle`): for filters and alerts", "status"),
    _c("capture_id", "the capture's identity, the same for every file of one capture (a report and "
       "its export, copies, a trace and its gzip): [duplicate captures](inputs.md#duplicate-captures)", "status"),
    _c("status", "`ok`, `partial`, `duplicate` or `error`", "status"),
    _c("error", "why the report could not be analysed; for a `duplicate` row, `duplicate of <file>` (and, when its labels differ from that file's, which were not used)",
       "status"),
)

#: Columns the outputs add to the fleet's (declared here like every other): the night of a report's row, a GPU's name.
REPORT_EXTRA = (_c("run_date", "the night (or the run folder's date) the row belongs to"),
                _c("gpu_name", "the GPU's name for people: model, number in its job, short id "
                   "(`H100 #3 9b5c4f8d`; [GPU names](#gpu-names))"))


#: The longer notes of the column groups (:attr:`Column.group`), under the column reference's table.
NOTES = {
    'labels': "where the row comes from; labels from `labels:` in the config. A report no rule labels gets cluster `default` (one cluster for every unlabelled report, in `clusters.csv` and the report's tables), job = its file name without the report suffix (`.sqlite`, `.nsys-rep`, `.qdrep`, `.sqlite3`, `.db`, `.pt.trace.json.gz`, `.pt.trace.json`, `.json.gz`, `.json`) and without the rank it names (`train_rank3` -> `train`; [job grouping](definitions.md#job-grouping)), node and rank empty (a PyTorch trace's rank comes from its `distributedInfo`); `Config.labels_for` in `pipeline/config.py`. Per-rank PyTorch traces of one job (same world size and backend, distinct ranks, overlapping captures) are one job without a rule, named after what their files share, and so are Nsight exports whose capture environment names the same Slurm job (`slurm-<id>`); `job_grouped_by` says how the job was decided ([job grouping](definitions.md#job-grouping))",
    'accounting': "who held the GPU, from the scheduler's accounting (`accounting.files`: `sacct --json` and `kubectl get pods -o json` outputs), matched by the rules of `accounting.match` ([coverage](definitions.md#coverage), [feeding the accounting](operations.md#feeding-the-accounting)); empty without accounting or when no rule matched. `teams.csv` and `coverage.csv` sum them",
    'gpu': 'the GPU: a MIG instance (`MIG-<uuid>`), else the physical GPU (`GPU-<uuid>` or `bus-<PCI bus id>` when the export names it, else `pid<P>/dev<D>`; see [GPUs and MIG instances](definitions.md#gpus-and-mig-instances)) and the process(es) driving it',
    'rate': "the model the export (or a label) names, empty when unknown; the rate-card entry used and why (`rate_source` says when the default model was assumed, also under a cluster override, and quotes the entry's `source`; a model not on the card keeps its `model-not-on-rate-card` warning under an override too). A GPU with no entry of its own is, under `cost.unlisted: unpriced` (the default), `unpriced` (no rate, every USD column empty, in no total) when it names a model not on the card or names none on a GPU its input says is not NVIDIA's (a ROCm/HIP trace), and `rate_assumed` (priced at `cost.default_model`'s rate) when it names none otherwise; under `cost.unlisted: default` (or `assume`) every such GPU is `rate_assumed`; with a coded warning either way: `model-not-on-rate-card` when the model is named, `gpu-model-unresolved` when it is not (neither makes the row `partial`). An older table's `rate_assumed` comes from its `rate_source` (see [Cost](definitions.md#cost)). `gpu-idle report --config` prices a table again with another card, but a GPU whose pricing the table does not hold (a MIG instance, one naming no model) keeps its run's rate and dollars, with a `not-repriced` warning",
    'window': 'the analysis window W and the rule that chose it (`trim`, `nvtx`, `periodic`, `span`)',
    'iterations': 'the stable iterations inside W (their count, mean length on the GPU timeline and its coefficient of variation), `kept_iterations` their numbers as compact ranges (`3-16`, `1-4,7`; the same on every GPU of a job), `excluded_iterations` every other number and why (`warm-up`, `outlier (1.52x median)`, `untraced (lost kernel records)`, `graph capture (start-up)`, `no kernel of this GPU launched from inside it`, `excluded on another GPU of the job (gpu KEY[ in REPORT]: its reason)`, `outside the longest stable run`, `beyond max_iterations`), `window_note` why earlier rules abstained and how the iterations were found',
    'copies outside': "the GPU's copies and memsets (every copy direction, unified-memory migrations included) with time outside W, and the union of that time; when it is longer than W itself the row carries the coded note `copies-outside-window` (the window holds little of what the GPU did: one kernel amid thousands of migrations reads 100 % busy), also on its page and in its job's record; a caveat, not `partial` ([copies outside the window](definitions.md#copies-outside-the-window))",
    'kind': "what the window keeps of the capture's cost ([job kind](definitions.md#job-kind)): the capture C of a GPU is its `span` window, from its first kernel start to its last kernel end; `capture_idle_ns` its device-level idle; `window_left_out_idle_pct` = 100 × (idle of C outside W) / `capture_idle_ns`; `startup_wait_ns`, before C, is shown on its own and never priced; so is `graph_capture_ns`, the [graph-capture](definitions.md#graph-capture) start-up from the first kernel to the last capture's end (C starts at the first kernel after it; a GPU with no kernel after it is `startup_only`: tier `toy`, `partial` with `startup-only`). A `serving` job's window under `--window auto` is C itself. A row of `unknown` kind whose window leaves out more than `window.max_left_out_idle_pct` (50 %) of the capture's idle is `partial` (`window-leaves-out-idle`)",
    'meter': "[the sampled meter beside the truth](definitions.md#sampled-meter) (`pipeline/analysis/meter.py`): a utilisation meter such as NVML's (nvidia-smi's GPU-Util) asks, for each sample period, whether any kernel ran in it; W is cut into periods of `meter.sample_ns` (1/6 s) from its start, the last one shorter, and a period counts busy when some kernel ran in it for a positive time (a kernel ending exactly on a boundary does not touch the next period). `busy_pct` is the device-level truth beside it. A GPU whose idle gaps are shorter than a period reads near 100 % on the meter however idle it is: busy is not useful",
    'gaps': 'per-stream gaps longer than `min_gap_ns` (totals can exceed W on many-stream GPUs)',
    'launch': "device-level holes up to the threshold; `launch_bound` when they are at least half the application's idle (`idle_ns` without `cat_profiler_ns` and `cat_untraced_ns`) and 2 % of W",
    'categories': 'the application\'s device-level idle per category: each device gap gets one category; `launch` holds the slivers of a launch-bound GPU. With `cat_profiler_ns` and `cat_untraced_ns` they add up to `device_gap_ns` (+ `device_sliver_ns` when launch-bound), so on a GPU that is not launch-bound the slivers are the part of `idle_ns` no category holds. `actionable` lists the categories at 2 % of W or more; the others are "archived" (shown apart, not prescribed)',
    'caveats': "device-level idle that is not the application's, tested before the categories above and never `main_category` nor `actionable`: `profiler`, gaps at least half covered (where no copy engine runs) by Nsight Systems' own overhead of the GPU's processes (every `PROFILER_OVERHEAD` row; `CUPTI_ACTIVITY_KIND_OVERHEAD` rows of the kinds in `categories.profiler_overheads`: buffer flush, instrumentation, resources, command buffer full), which would not exist unprofiled; `untraced`, gaps where the trace lost records: a CUDA launch (`cudaLaunchKernel`, `cuLaunchKernel`, `cudaGraphLaunch`, …) of the GPU's processes with no kernel or copy record of its correlationId may have run there (from its call to the start of its process's record with the next correlationId); only launches between the process's first and last GPU record count (launches issued at the capture's edge, whose work ran after the capture stopped, are not lost records); or a `DIAGNOSTIC_EVENT` says events of the GPU trace (not CPU samples) were dropped at a time inside the gap. A gap is filed under a cause when the cause covers at least half of it; the warning gives the whole gap's length",
    'comm': "[communication overlap](definitions.md#communication-overlap) (`pipeline/analysis/overlap.py`): `comm_ns` is the union of the collective kernels (the `comm` category's own patterns, `categories.collective_kernel`: NCCL, custom all-reduce such as `cross_device_reduce_1stage`) clipped to W, so two collectives at once on two streams count once; `comm_overlapped_ns`, the part of it when a compute kernel (any kernel that is not a collective) runs on *another* stream of the GPU (a stream is one process's stream: stream 7 of two processes sharing the GPU are two streams; a compute row on the collective's own stream does not count, as a stream runs its work in order; copies are not kernels, so a collective beside a copy alone is exposed); `comm_exposed_ns = comm_ns − comm_overlapped_ns`, when the GPU only communicates or waits for its peers (an NCCL kernel's length includes waiting for the slowest one): what overlapping communication with compute can win back. Busy time (a kernel runs), never part of `idle_ns`",
    'collwait': "[idle inside collectives](definitions.md#collective-wait) (`pipeline/analysis/collwait.py`): within one report holding several GPUs (one clock), the k-th collective kernel of a family (`ncclDevKernel_AllReduce_Sum_f32_RING_LL` -> `AllReduce`) on the same collective stream of each GPU is one call (a GPU's collective streams numbered in ascending (process, stream id) order: two communicators on the same ranks, on two streams, are never cross-matched); `collective_match_basis` says so (`kth call of family`) or why not (`abstained: <reason>`), NCCL's NVTX payloads not being a basis yet (the exports seen carry none); `last` is the latest start among its participants; a GPU waits `min(end, last) − start` (never below 0) and transfers `end − max(start, last)`, each part clipped to the GPU's W (a call straddling W's edge counts with its part inside W). Ranks in separate files of one job on one host (one clock: `host`, or one `node` label where a file names none) are matched the same way at the job's level ([across files](definitions.md#collective-wait-across-files), `pipeline/fleet/crosswait.py`), `collective_match_basis` `kth call of family across files on one host`. Abstained (`collective_wait_status` `abstained`, the reason in `collective_wait_note`) when the ranks are in separate reports whose clocks are not known to agree (different hosts or labelled nodes, a host unknown) or their collective streams, families or call counts differ. Busy time: `collective_wait_usd_per_month` is priced like idle but never added to it, and its fix-first entry stands in its own section",
    'caveat_usd': "the part of `idle_usd_per_month` that is profiler overhead or untraced: shown apart, not the application's to fix",
    'comm_usd': 'exposed communication priced like idle: `comm_exposed_ns / window_ns` × rate × hours per month; busy time, so not inside `idle_usd_per_month`, and not a fix-first entry (that list is per idle category; `fix_comm_*` prices the idle gaps after collectives)',
    'fix': 'fix first, for each application category `c` (`data`, `comm`, `sync`, `boundary`, `periodic`, `launch`, `cpu`; never `profiler` or `untraced`): recoverable USD per month = `cat_<c>_ns / window_ns` × `rate_usd_per_hour` × `cost.hours_per_month`, and the speed-up if that category alone vanished, `1 / (1 − share)` (`pipeline/analysis/fixfirst.py`)',
    'confidence': "what the month extrapolates from and how far it can be trusted ([confidence tiers](definitions.md#confidence-tiers), `pipeline/analysis/confidence.py`): `toy` when W is under `confidence.toy_max_window_ns` (50 ms) or holds fewer than `confidence.toy_min_kernels` (50) kernels; `high` with at least `confidence.high_min_iterations` (20) stable iterations over at least `confidence.high_min_window_ns` (500 ms) spread at most `confidence.high_max_spread_pct` (10 %); `medium` the same at 5, 200 ms and 50 %; else `low`. A `serving` row is tiered by its `bursts` (stretches of work in W apart by holes over `confidence.serving_burst_gap_ns`, 1 ms) and W's length instead: `medium` at `confidence.serving_medium_min_bursts` (20) over `confidence.serving_medium_min_window_ns` (5 s), `high` at `confidence.serving_high_min_bursts` (100) over `confidence.serving_high_min_window_ns` (60 s). An `unknown` kind caps the tier: at most `low` when W leaves out more than `confidence.unknown_max_left_out_idle_pct` (10 %) of the capture's idle, at most `medium` when W is at least `confidence.unknown_mostly_idle_pct` (90 %) idle. `low_confidence` is `toy` or `low`, and the note names each shortfall and cap. `idle_pct_low`..`idle_pct_high` brackets `idle_pct`: each kept iteration's slice of W runs from its start to the next kept one's (the last to the end of W); `idle_pct_sd` is the sample standard deviation (divisor n − 1) of those slices' idle shares, the noise floor of [compare](definitions.md#compare-deltas)",
    'straggler': 'highest-idle GPU of a job whose idle % spread exceeds 10 points; a job is a (`cluster`, `job`) pair, as in `jobs.csv`, so jobs of the same name in different clusters are not compared',
    'status': '`ok`, `partial`, `duplicate` or `error` with the cause. `duplicate`: another file of the same capture is analysed instead ([duplicate captures](inputs.md#duplicate-captures)): one row, no GPU, no figure, never priced, in no total; `error` names it (`duplicate of <file>`). `partial`: the numbers rest on input that was incomplete or could not be real, each named in `warnings`: exact duplicate rows (counted once), rows with end < start or timed far outside the capture (dropped: kernels, CUDA API calls, copies, NVTX ranges, overhead rows; the capture is `ANALYSIS_DETAILS`\' start..stop, else `TARGET_INFO_SESSION_START_TIME` and the run of the other rows\' timestamps; each stated bound is judged on its own: when the export\'s own rows run on past it as a continuation of the rows inside (no step between them longer than 1 s or the inside rows\' extent), that bound is wrong, not the rows: the capture ends where they do on that side, the timeline\'s zero too for the start, nothing is dropped for the metadata, and one warning per report says so and names the bound judged wrong (start, end, or both), `ok`; an `ANALYSIS_DETAILS` the rows fit on neither clock is said so even beside a `TARGET_INFO_SESSION_START_TIME`; a row isolated beyond a bound, whether or not other rows contradict it, is dropped; CUDA API calls, copies or overhead rows of one table dropped so, all wholly outside the kept kernels\' time, leave the row `ok`: no figure rests on them, a `dropped-stray-rows` warning counts them), launches without kernel records, events Nsight Systems lost, a MIG instance of unknown size, processes on part of a board that cannot be told apart, kernels in the window that all last 0 ns (`zero-duration-kernels`: no kernel time recorded, so the 100 % idle is not measured), a window of a job of unknown kind that leaves out more than half of the capture\'s idle (`window-leaves-out-idle`), a `--trim` window reaching before the GPU\'s first kernel or past its last (`trim-outside-kernels`: that time is not measured idle, so W is cut to the kernels and the warning says how much; also printed on the console; the tier is at most `low`). A loader warning about some processes\' rows goes to the GPUs they drive. A GPU\'s row quotes the `DIAGNOSTIC_EVENT` warnings of its own processes and of the session (no process) that bear on the GPU trace (not CPU sampling, OS runtime, ftrace, symbols), each text once, with "(reported N times)". Profiler overhead is a warning too, but the trace is complete: `ok`; so are CUDA graphs traced as a whole (`graphs-traced-whole`: how many executions, the time they cover; device idle is a lower bound inside them) and `copies-outside-window` (the GPU\'s copies outside W take longer than W)',
}


#: ``confidence_tier``'s values, least trusted first (docs/definitions.md#confidence-tiers).
TIERS = ("toy", "low", "medium", "high")
#: The tiers whose dollars are totalled first (the "trusted" figures); the others are shown apart.
TRUSTED = ("medium", "high")
#: ``collective_wait_status``'s values: the GPU's wait inside collectives measured, abstained, or no collective in W.
MEASURED, ABSTAINED, NO_COLLECTIVE = "measured", "abstained", "none"
#: ``collective_wait_kind`` of a job whose measured GPUs' calls are all point-to-point, and of any other.
PIPELINE_BUBBLE, COLLECTIVE_WAIT = "pipeline bubble", "collective wait"
#: A GPU whose window holds fewer sample periods than this (1 s at the default 1/6 s) gives no sampled-meter reading
#: in any view: a meter's reading over a handful of samples says nothing of a run, so the views say how few periods
#: there were instead (docs/definitions.md#sampled-meter). A total (a job, the fleet) reads over its GPUs with enough.
FEW_PERIODS_PER_GPU = 6
#: How a total names its unpriced GPUs that name no model (:func:`unpriced_models`).
NO_MODEL = "no model named"


def share(part_ns: int, window_ns: int) -> float:
    """``part_ns / window_ns`` (0..1); 0.0 for an empty window."""
    return float(part_ns) / float(window_ns) if window_ns and window_ns > 0 else 0.0


def amdahl_speedup(idle_fraction: float) -> float:
    """1 / (1 − f); ``inf`` for a GPU idle the whole window."""
    f = float(idle_fraction)
    return math.inf if f >= 1.0 else 1.0 / (1.0 - f)


def unpriced_models(models, unpriced) -> dict:
    """The models of the ``unpriced`` GPUs (``models``: their ``gpu_model``, aligned) with each one's count, most
    GPUs first (ties by name): ``{"Quadro GP100": 2, "no model named": 1}`` (:data:`NO_MODEL` for a GPU whose
    model is empty or missing)."""
    counts: dict = {}
    for model, u in zip(models, np.asarray(unpriced, dtype=bool)):
        if u:
            name = model.strip() if isinstance(model, str) and model.strip() else NO_MODEL
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def models_text(counts: dict) -> str:
    """:func:`unpriced_models`'s counts as one text: ``Quadro GP100 (2), no model named (1)``; "" for none."""
    return ", ".join(f"{m} ({n})" for m, n in counts.items())


def job_late_rank(names, last_counts, chronic) -> tuple[str, str]:
    """The job's late rank over its measured GPUs (``names``, their ``last_counts`` and ``chronic`` flags, same
    order): ``(name, "chronic" | "transient")`` of the GPU that entered last most often (ties: the first in
    ``names``' order), chronic when its own flag says so (``collective_chronic``); ``("", "")`` when none was last."""
    counts = [int(c) for c in last_counts]
    if not counts or max(counts) <= 0:
        return "", ""
    best = counts.index(max(counts))
    return str(list(names)[best]), ("chronic" if bool(list(chronic)[best]) else "transient")


# ---------------------------------------------------------------------------------------------
# Rollup rules: how a fleet column rolls up to a job and a cluster, each an object the reduce executes
# (pipeline.fleet.reduce.rollup) on the rows of one group at a time (:class:`Rows`: each column read once, as a
# list; a fleet has a handful of rows per job, where one pandas operation per column cost more than the rows).


def missing(value) -> bool:
    """Whether a fleet value is missing (None, NaN, ``pd.NA``): what pandas' ``isna`` says of it."""
    return value is None or value is pd.NA or (isinstance(value, float) and value != value)


def _compensated_sum(values) -> float:
    """The sum of floats ``values`` in their order, compensated (Kahan) exactly as pandas' grouped ``sum`` adds a
    float64 column, so that a total is the same to the last bit as the frames summed before."""
    total = comp = 0.0
    for v in values:
        y = v - comp
        t = total + y
        comp = t - total - y
        if comp != comp:   # an infinite value: pandas resets the compensation
            comp = 0.0
        total = t
    return total


class Rows:
    """A fleet table's rows as the rollup rules read them: ``values`` (column -> list of its values in row order)
    of the columns ``names``, and which of them are float64 columns (``floats``: summed as pandas sums them)."""

    def __init__(self, frame: pd.DataFrame, names):
        names = list(dict.fromkeys(names))
        self.values = {n: frame[n].tolist() for n in names}
        self.floats = {n for n in names if frame[n].dtype.kind == "f"}

    def take(self, where, rows) -> list:
        """The row numbers of ``rows`` a rule's ``where`` takes (all when None)."""
        return list(rows) if where is None else [i for i in rows if where.holds(self, i)]

    def present(self, name: str, rows) -> list:
        """The values of column ``name`` at ``rows`` that are not missing, in row order."""
        column = self.values[name]
        return [column[i] for i in rows if not missing(column[i])]

    def total(self, name: str, rows):
        """The sum of column ``name`` over ``rows`` (missing values count 0): exact for whole numbers, compensated
        for a float64 column (:func:`_compensated_sum`)."""
        values = self.present(name, rows)
        return _compensated_sum(values) if name in self.floats else sum(values)


def _truthy(value) -> bool:
    return bool(value)


def _one_of(*texts):
    return lambda value: isinstance(value, str) and value in texts


def _at_least(n):
    def test(value) -> bool:
        if missing(value):
            return False
        try:
            return float(value) >= n
        except (TypeError, ValueError):
            return False
    return test


@dataclasses.dataclass(frozen=True)
class Where:
    """Which rows of a group a rule takes: ``columns`` it reads, ``test`` (the values of those columns in one row ->
    bool), ``text`` for people."""

    columns: tuple
    test: Callable
    text: str = ""

    def holds(self, rows: Rows, i: int) -> bool:
        """Whether row ``i`` of ``rows`` passes the test."""
        return bool(self.test(*(rows.values[c][i] for c in self.columns)))


#: The GPUs priced at an assumed rate only (``assumed_usd_per_month``).
RATE_ASSUMED = Where(("rate_assumed",), _truthy, text="`rate_assumed`")
#: The GPUs whose confidence tier is trusted (``trusted_idle_usd_per_month``).
TRUSTED_TIER = Where(("confidence_tier",), _one_of(*TRUSTED), text="`confidence_tier` `medium` or `high`")
#: The GPUs flagged ``unpriced``.
UNPRICED = Where(("unpriced",), _truthy, text="`unpriced`")
#: The GPUs whose wait inside collectives was measured.
WAIT_MEASURED = Where(("collective_wait_status",), _one_of(MEASURED), text="`collective_wait_status` `measured`")
#: The GPUs that ran a collective in W (measured or abstained).
RAN_COLLECTIVE = Where(("collective_wait_status",), _one_of(MEASURED, ABSTAINED),
                       text="`collective_wait_status` `measured` or `abstained`")
#: The GPUs whose window holds a sampled-meter reading (:data:`FEW_PERIODS_PER_GPU` periods or more).
A_READING = Where(("sample_periods",), _at_least(FEW_PERIODS_PER_GPU), text="at least 6 `sample_periods`")

#: The rows a rule runs over: the analysed GPUs (:func:`analysed_rows`) or the error rows.
ANALYSED, ERRORS = "analysed", "errors"


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rollup rule: the fleet columns it rolls up (``sources``; a table lacking one has the rollup column empty),
    which rows (``where``: all the group's rows when None; ``rows``: :data:`ANALYSED` or :data:`ERRORS`) and, for
    a total that says nothing without some row, ``empty_without``: the column is empty (NaN) in a group with no
    row of that test. ``value(rows, group)``: the rule's value over one group's row numbers ``group`` of ``rows``
    (:class:`Rows`); None where it has none."""

    def reads(self) -> tuple:
        """Every column the rule reads (its sources and its tests')."""
        tests = (self.where, getattr(self, "empty_without", None))
        return tuple(dict.fromkeys([*self.sources, *(c for t in tests if t is not None for c in t.columns)]))

    def _over(self) -> str:
        return f" over {self.where.text}" if self.where is not None else ""


@dataclasses.dataclass(frozen=True)
class Sum(Rule):
    """``Σ source`` over the rows (missing values count 0)."""

    source: str
    where: Where | None = None
    empty_without: Where | None = None
    rows: str = ANALYSED
    how = "sum"

    @property
    def sources(self):
        return (self.source,)

    @property
    def text(self):
        return f"{self.how}{self._over()}"

    def value(self, rows: Rows, group):
        return rows.total(self.source, rows.take(self.where, group))


@dataclasses.dataclass(frozen=True)
class Min(Sum):
    """The least ``source`` of the rows."""

    how = "min"

    def value(self, rows: Rows, group):
        values = rows.present(self.source, rows.take(self.where, group))
        return min(values) if values else None


@dataclasses.dataclass(frozen=True)
class Max(Sum):
    """The greatest ``source`` of the rows."""

    how = "max"

    def value(self, rows: Rows, group):
        values = rows.present(self.source, rows.take(self.where, group))
        return max(values) if values else None


@dataclasses.dataclass(frozen=True)
class Count(Rule):
    """How many rows (of ``where``)."""

    where: Where | None = None
    rows: str = ANALYSED

    @property
    def sources(self):
        return () if self.where is None else self.where.columns

    @property
    def text(self):
        return f"count{self._over()}"

    def value(self, rows: Rows, group):
        return len(rows.take(self.where, group))


@dataclasses.dataclass(frozen=True)
class WeightedMean(Rule):
    """``part`` as % of ``weight`` over the rows: ``100 × Σ part / Σ weight`` (4 decimals), the mean of
    ``part / weight`` weighted by the named ``weight``; empty where ``Σ weight`` is 0."""

    part: str
    weight: str
    where: Where | None = None
    rows: str = ANALYSED

    @property
    def sources(self):
        return (self.part, self.weight)

    @property
    def text(self):
        return f"`100 × Σ {self.part} / Σ {self.weight}` (weighted by `{self.weight}`){self._over()}"

    def totals(self, rows: Rows, group) -> tuple:
        """``(Σ part, Σ weight)`` over the rows it takes of ``group``."""
        taken = rows.take(self.where, group)
        return rows.total(self.part, taken), rows.total(self.weight, taken)

    def value(self, rows: Rows, group):
        part, weight = self.totals(rows, group)
        if not float(weight) > 0:
            return None
        return float(np.round(100.0 * float(part) / float(weight), 4))


@dataclasses.dataclass(frozen=True)
class Speedup(WeightedMean):
    """The speed-up if ``part`` vanished from the rows' ``weight``: ``1 / (1 − Σ part / Σ weight)``
    (:func:`amdahl_speedup` of :func:`share`, 4 decimals)."""

    @property
    def text(self):
        return f"`1 / (1 − Σ {self.part} / Σ {self.weight})`{self._over()}"

    def value(self, rows: Rows, group):
        return round(amdahl_speedup(share(*self.totals(rows, group))), 4)


@dataclasses.dataclass(frozen=True)
class Distinct(Rule):
    """The distinct values of ``source`` over the rows, in row order, ``sep``-joined; ``skip_empty``: missing and
    empty values left out (else each value as text)."""

    source: str
    sep: str = ", "
    where: Where | None = None
    skip_empty: bool = True
    rows: str = ANALYSED

    @property
    def sources(self):
        return (self.source,)

    @property
    def text(self):
        return f"distinct, `{self.sep}`-joined{self._over()}"

    def value(self, rows: Rows, group):
        taken = rows.take(self.where, group)
        if not taken:
            return None
        column = rows.values[self.source]
        values = [column[i] for i in taken if not (self.skip_empty and missing(column[i]))]
        return self.sep.join(dict.fromkeys(str(v) for v in values if str(v) or not self.skip_empty))


@dataclasses.dataclass(frozen=True)
class Custom(Rule):
    """``function(group)`` over each group's rows (of ``where``; ``group``: column -> its values in those rows, for
    each of ``sources``): a value no other rule gives; ``text`` says how."""

    sources: tuple
    function: Callable
    where: Where | None = None
    rows: str = ANALYSED
    text: str = "custom"

    def value(self, rows: Rows, group):
        taken = rows.take(self.where, group)
        if not taken:
            return None
        return self.function({c: [rows.values[c][i] for i in taken] for c in self.sources})


def _distinct_count(values) -> int:
    """How many distinct values ``values`` holds, the missing ones left out (pandas' ``nunique``)."""
    return len({v for v in values if not missing(v)})


def _unpriced_group_models(group: dict) -> str:
    """``unpriced_models`` of a group's unpriced GPUs: their models and counts (:func:`models_text`)."""
    return models_text(unpriced_models(group["gpu_model"], [True] * len(group["gpu_model"])))


def _collective_late_rank(group: dict) -> tuple[str, str]:
    """The group's measured GPUs' late rank and its kind (:func:`job_late_rank`), the GPU named by its ``gpu_key``,
    with its report's file name when they come from several reports."""
    several = _distinct_count(group["report"]) > 1
    names = [f"{g} in {str(r).replace(chr(92), '/').rsplit('/', 1)[-1]}" if several else str(g)
             for g, r in zip(group["gpu_key"], group["report"])]
    return job_late_rank(names, [0 if missing(c) else int(c) for c in group["collective_last_count"]],
                         [bool(c) for c in group["collective_chronic"]])


def _wait_kind(group: dict) -> str:
    return PIPELINE_BUBBLE if all(bool(p) for p in group["collective_p2p"]) else COLLECTIVE_WAIT


#: The rule classes a rollup column can have.
RULES = (Sum, Count, Min, Max, WeightedMean, Speedup, Distinct, Custom)


@dataclasses.dataclass(frozen=True)
class RollupColumn:
    """One column of ``jobs.csv`` and ``clusters.csv``: ``name``, ``dtype``, ``unit``, its ``rule`` (one of
    :data:`RULES`) and ``meaning``."""

    name: str
    dtype: str
    unit: str
    rule: Rule
    meaning: str

    def __post_init__(self):
        if self.dtype not in DTYPES or self.unit not in UNITS or not isinstance(self.rule, RULES):
            raise ValueError(f"rollup column {self.name}: dtype, unit or rule unknown")


def _r(name, dtype, unit, rule, meaning):
    return RollupColumn(name, dtype, unit, rule, meaning)


#: Every column of ``jobs.csv`` (per :data:`JOB_KEY`) and ``clusters.csv`` (per :data:`CLUSTER_KEY`, without
#: ``job``) after the key, in file order, over the rows that are not errors (:func:`pipeline.fleet.reduce.rollup`).
ROLLUP = (
    _r("gpus", "Int64", "count", Count(), "GPUs analysed"),
    _r("window_ns", "Int64", "ns", Sum("window_ns"), "summed"),
    _r("idle_ns", "Int64", "ns", Sum("idle_ns"), "summed"),
    _r("gap_total_ns", "Int64", "ns", Sum("gap_total_ns"), "summed"),
    _r("idle_usd_per_month", "float", "USD/month", Sum("idle_usd_per_month"), "summed (unpriced GPUs left out)"),
    _r("assumed_usd_per_month", "float", "USD/month", Sum("idle_usd_per_month", where=RATE_ASSUMED),
       "the part of `idle_usd_per_month` priced at an assumed rate (0 when none of the job's GPUs is assumed)"),
    _r("unpriced_gpus", "Int64", "count", Sum("unpriced"), "GPUs flagged `unpriced` (no dollars)"),
    _r("unpriced_models", "text", "text",
       Custom(("gpu_model",), _unpriced_group_models, where=UNPRICED, text="each model with its count, most first"),
       "the models of its `unpriced` GPUs, each with its count, most first (`Quadro GP100 (2), no model named (1)`; "
       "empty: none): the `cost.rates` entries that would price them"),
    _r("min_idle_pct", "float", "%", Min("idle_pct"), "the least idle % of a GPU"),
    _r("max_idle_pct", "float", "%", Max("idle_pct"), "the most idle % of a GPU"),
    _r("stragglers", "Int64", "count", Sum("straggler"), "GPUs flagged `straggler`"),
    _r("profiler_ns", "Int64", "ns", Sum("cat_profiler_ns"), "profiler overhead, summed, apart"),
    _r("untraced_ns", "Int64", "ns", Sum("cat_untraced_ns"), "untraced time, summed, apart"),
    _r("profiler_usd_per_month", "float", "USD/month", Sum("profiler_usd_per_month"), "summed, apart"),
    _r("untraced_usd_per_month", "float", "USD/month", Sum("untraced_usd_per_month"), "summed, apart"),
    _r("min_iterations", "Int64", "count", Min("iterations"), "the fewest stable iterations of a GPU"),
    _r("low_confidence_gpus", "Int64", "count", Sum("low_confidence"), "GPUs flagged `low_confidence`"),
    _r("trusted_idle_usd_per_month", "float", "USD/month", Sum("idle_usd_per_month", where=TRUSTED_TIER),
       "summed over the GPUs whose `confidence_tier` is `medium` or `high` (0 when none of the job's GPUs is "
       "trusted)"),
    _r("comm_ns", "Int64", "ns", Sum("comm_ns"), "summed"),
    _r("comm_overlapped_ns", "Int64", "ns", Sum("comm_overlapped_ns"), "summed"),
    _r("comm_exposed_ns", "Int64", "ns", Sum("comm_exposed_ns"), "summed"),
    _r("comm_exposed_usd_per_month", "float", "USD/month", Sum("comm_exposed_usd_per_month"), "summed"),
    *[_r(f"fix_{c}_usd_per_month", "float", "USD/month", Sum(f"fix_{c}_usd_per_month"), "summed") for c in FIXABLE],
    *[_r(f"fix_{c}_speedup", "float", "factor", Speedup(f"cat_{c}_ns", "window_ns"),
         f"the speed-up if `{c}` vanished from the group's windows") for c in FIXABLE],
    _r("failed_reports", "Int64", "count", Custom(("report",), lambda g: _distinct_count(g["report"]), rows=ERRORS,
                                                  text="distinct values over the error rows"),
       "distinct reports with an error row"),
    _r("idle_pct", "float", "%", WeightedMean("idle_ns", "window_ns"), "the window-weighted mean of `idle_pct`"),
    _r("busy_ns", "Int64", "ns", Sum("busy_ns"), "summed"),
    _r("busy_pct", "float", "%", WeightedMean("busy_ns", "window_ns"), "the window-weighted mean of `busy_pct`"),
    _r("sample_periods", "Int64", "count", Sum("sample_periods"), "summed"),
    _r("sampled_busy_periods", "Int64", "count", Sum("sampled_busy_periods"), "summed"),
    _r("sampled_util_pct", "float", "%", WeightedMean("sampled_busy_periods", "sample_periods", where=A_READING),
       "the sampled meter's reading over the GPUs with at least 6 periods (a reading); empty when none has"),
    _r("comm_exposed_pct", "float", "%", WeightedMean("comm_exposed_ns", "window_ns"),
       "the window-weighted mean of `comm_exposed_pct`"),
    _r("collective_ns", "Int64", "ns", Sum("collective_ns"), "summed"),
    _r("collective_wait_ns", "Int64", "ns", Sum("collective_wait_ns"), "summed over the measured GPUs"),
    _r("collective_transfer_ns", "Int64", "ns", Sum("collective_transfer_ns"), "summed over the measured GPUs"),
    _r("collective_wait_pct", "float", "%", WeightedMean("collective_wait_ns", "window_ns", where=WAIT_MEASURED),
       "the wait as % of the measured GPUs' windows"),
    _r("collective_wait_usd_per_month", "float", "USD/month",
       Sum("collective_wait_usd_per_month", empty_without=WAIT_MEASURED),
       "summed; beside `idle_usd_per_month`, never in it; empty when no GPU of the group was measured"),
    _r("collective_measured_gpus", "Int64", "count", Count(where=WAIT_MEASURED),
       "GPUs whose `collective_wait_status` is `measured`"),
    _r("collective_late_rank", "text", "text",
       Custom(("gpu_key", "report", "collective_last_count", "collective_chronic"),
              lambda g: _collective_late_rank(g)[0], where=WAIT_MEASURED,
              text="the GPU with the most `collective_last_count` (ties: the first)"),
       "the late rank: the GPU (`gpu_key`, with its report's file name when the job has several) that entered last "
       "most often (not the `straggler`, the most idle GPU)"),
    _r("collective_late_rank_kind", "text", "text",
       Custom(("gpu_key", "report", "collective_last_count", "collective_chronic"),
              lambda g: _collective_late_rank(g)[1], where=WAIT_MEASURED,
              text="that GPU's `collective_chronic`: `chronic` or `transient`"),
       "`chronic` when that GPU was last in more than `collective.chronic_share` of its calls, else `transient`"),
    _r("collective_match_basis", "text", "text",
       Distinct("collective_match_basis", sep="; ", where=RAN_COLLECTIVE, skip_empty=False),
       "the distinct `collective_match_basis` of its GPUs with a collective, in row order, `; `-joined (empty: none)"),
    _r("collective_wait_kind", "text", "text",
       Custom(("collective_p2p",), _wait_kind, where=WAIT_MEASURED, text="`pipeline bubble` when every one is "
              "`collective_p2p`, else `collective wait`"),
       "`pipeline bubble` when every measured GPU's calls are point-to-point send/recv, else `collective wait`"),
    _r("sched_jobs", "text", "text", Distinct("sched_job_id"), "the scheduler jobs its GPUs were matched to, "
       "`, `-joined (empty: none; [coverage](definitions.md#coverage))"),
    _r("sched_accounts", "text", "text", Distinct("sched_account"), "their accounts or teams, `, `-joined: whose "
       "idle dollars these are"),
    _r("sched_users", "text", "text", Distinct("sched_user"), "their users, `, `-joined"),
)

class Printed(NamedTuple):
    """One column of the printed table: the declared column ``name``, its short ``header`` and, for text, the
    ``width`` its cells are cut to (with ``…``; None: whole). How a cell reads follows from the column's dtype and
    unit (``pipeline.cli.format_fleet``: ns as ms, ``$`` for USD, ``yes``/``no`` for a flag), so a new column is
    one entry here."""

    name: str
    header: str
    width: int | None = None


#: The table ``gpu-idle run`` prints (docs/outputs.md#the-printed-table), in order: money first, one line per GPU
#: sorted by ``idle_usd_per_month``, at most 120 characters wide (about 100 today: room for a few more short
#: columns, e.g. ``Printed("confidence_tier", "tier")``).
PRINTED = (Printed("idle_usd_per_month", "$/month"), Printed("confidence_tier", "tier"), Printed("job", "job", 18),
           Printed("gpu_name", "GPU", 30),
           Printed("idle_pct", "idle %"), Printed("idle_ns", "idle_ms"), Printed("main_category", "cause", 8),
           Printed("amdahl_speedup", "speed-up"), Printed("status", "status"))
#: ``gpu-idle run --wide``: every column the table had before it led with money (device-level figures first, per-stream
#: gap sums last, named as sums over the GPU's streams: they can exceed the window on a multi-stream GPU), the
#: GPU's name first.
PRINTED_WIDE = (Printed("idle_usd_per_month", "idle_usd_per_month"), Printed("confidence_tier", "confidence_tier"),
                Printed("job", "job"), Printed("node", "node"),
                Printed("gpu_name", "gpu_name"), Printed("gpu_key", "gpu_key"), Printed("gpu_model", "gpu_model"),
                Printed("window_ns", "window_ms"), Printed("idle_ns", "idle_ms"), Printed("idle_pct", "idle_pct"),
                Printed("device_gap_count", "device_gaps"), Printed("device_gap_ns", "device_gaps_ms"),
                Printed("copy_only_ns", "copy_only_ms"), Printed("dark_ns", "dark_ms"),
                Printed("main_category", "main_category"), Printed("amdahl_speedup", "amdahl_speedup"),
                Printed("straggler", "straggler"), Printed("status", "status"),
                Printed("gap_count", "stream_gaps (count over streams)"),
                Printed("gap_total_ns", "stream_gaps_ms (sum over streams)"))
#: The report's CSV variant (``gpu-idle report --format csv``; ns as ms, named ``*_ms``), in order.
REPORT_CSV = ("run_date", "cluster", "job", "node", "rank", "report", "gpu_key", "gpu_model", "rate_model",
              "rate_usd_per_hour", "rate_source", "rate_assumed", "unpriced", "window_ns", "iterations", "kept_iterations",
              "busy_ns", "idle_ns", "idle_pct", "job_kind", "startup_wait_ns", "startup_cut", "capture_idle_pct",
              "window_left_out_idle_pct", "copy_only_ns", "dark_ns", "main_category", "actionable",
              *[f"cat_{c}_pct" for c in CATEGORIES], "idle_usd_per_month", "amdahl_speedup", "confidence_tier",
              "low_confidence", "confidence_note", "comm_exposed_ns", "comm_exposed_pct", "comm_exposed_usd_per_month", "straggler",
              "warning_codes", "status", "error")
#: The fleet columns the Markdown variant's GPU table shows.
MARKDOWN = ("gpu_key", "job", "idle_pct", "main_category", "idle_usd_per_month")
#: The fleet columns the HTML report's per-GPU, per-job and per-cluster tables show.
REPORT = ("cluster", "job", "node", "report", "gpu_key", "gpu_model", "idle_pct", "idle_ns", "main_category",
          "amdahl_speedup", "idle_usd_per_month", "straggler", "status", "rate_model", "rate_usd_per_hour",
          "rate_source", "low_confidence", "confidence_note")
_SHOWN = {"printed": tuple(p.name for p in PRINTED), "printed-wide": tuple(p.name for p in PRINTED_WIDE),
          "report-csv": REPORT_CSV, "markdown": MARKDOWN, "report": REPORT}

_BY_NAME = {c.name: c for c in FLEET + REPORT_EXTRA}
#: The fleet table's column names, in order.
FLEET_COLUMNS = [c.name for c in FLEET]
#: Fleet columns of whole numbers: nullable ``Int64`` in every fleet frame, ``int64`` in Arrow and Parquet,
#: plain digits in CSV and JSON, never through float64 (which holds ns at the UTC-epoch scale only to 256 ns).
INT_COLUMNS = [c.name for c in FLEET if c.dtype == "Int64"]
#: Fleet columns of flags: ``bool``, False where a row has none (an error row).
BOOL_COLUMNS = [c.name for c in FLEET if c.dtype == "bool"]
#: The rollups' columns after the key, in file order.
ROLLUP_COLUMNS = [c.name for c in ROLLUP]
#: Rollup columns of whole numbers: ``int64``, 0 where a group has none.
ROLLUP_INT_COLUMNS = [c.name for c in ROLLUP if c.dtype == "Int64"]

for _names in _SHOWN.values():
    assert all(n in _BY_NAME for n in _names), [n for n in _names if n not in _BY_NAME]
assert all(s in _BY_NAME for c in ROLLUP for s in c.rule.reads())
assert len(_BY_NAME) == len(FLEET) + len(REPORT_EXTRA)
assert contract_problems(GROUPS, FLEET_COLUMNS) == ([], []), contract_problems(GROUPS, FLEET_COLUMNS)


def column(name: str) -> Column:
    """The declared :class:`Column` ``name`` (a fleet column or :data:`REPORT_EXTRA`). Raises KeyError naming it."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"column {name!r} is not in the fleet schema (pipeline/schema.py)") from None


def shown_in(name: str) -> tuple:
    """The :data:`OUTPUTS` that show column ``name``, in that order."""
    fleet = ("fleet",) if any(c.name == name for c in FLEET) else ()
    return fleet + tuple(out for out, names in _SHOWN.items() if name in names)


def display_name(name: str) -> str:
    """The header a printed or report-CSV column gets: an ns column shown as ms is ``*_ms``."""
    return name[:-3] + "_ms" if column(name).unit == "ns" and name.endswith("_ns") else name


def shown(output: str) -> list:
    """The headers of ``output`` (an :data:`OUTPUTS` entry but ``fleet``) in order: the printed tables' own
    (:class:`Printed`), the others' :func:`display_name`."""
    printed = {"printed": PRINTED, "printed-wide": PRINTED_WIDE}.get(output)
    return [p.header for p in printed] if printed else [display_name(n) for n in _SHOWN[output]]


def source_name(header: str) -> str:
    """The declared column an output's ``header`` shows (``window_ms`` -> ``window_ns``); raises KeyError
    naming a header the schema does not declare."""
    if header in _BY_NAME or header in ROLLUP_COLUMNS or header in JOB_KEY:
        return header
    if header.endswith("_ms") and header[:-3] + "_ns" in _BY_NAME:
        return header[:-3] + "_ns"
    raise KeyError(f"output column {header!r} is not in the fleet schema (pipeline/schema.py)")


# ---------------------------------------------------------------------------------------------
# The other output tables: each declares its columns, in file order, with what each holds (docs/outputs.md's table
# of each is generated from here, between its own marker comments; tests/test_output_tables.py reads each written
# file against its declaration).


class TableEntry(NamedTuple):
    """One line of an output table's declaration: its column ``names`` (one or several, adjacent in the file) and
    what they hold (``meaning``, for people)."""

    names: tuple
    meaning: str


def _t(names, meaning) -> TableEntry:
    return TableEntry((names,) if isinstance(names, str) else tuple(names), meaning)


@dataclasses.dataclass(frozen=True)
class Table:
    """An output table beside the fleet table and the rollups: its ``name`` (docs/outputs.md's marker comments name
    it), the ``files`` it is written to, the heading of its docs table's second column (``holds``) and its
    ``entries`` (:class:`TableEntry`), whose names in order are its columns."""

    name: str
    files: tuple
    holds: str
    entries: tuple

    @property
    def columns(self) -> list:
        """The table's columns, in file order."""
        return [n for e in self.entries for n in e.names]


#: fix_first.csv and fix_first.json (the same entries as a list of objects): the ranked fix-first lists of the
#: fleet and of each job (pipeline/analysis/fixfirst.py ``fix_list``; docs/outputs.md#fix-first-list).
FIX_FIRST = Table("fix_first", ("fix_first.csv", "fix_first.json"), "meaning", (
    _t("scope", "the list: `fleet` (its `cluster` and `job` blank) or `job`"),
    _t("section", "`device idle` (the idle categories' entries) or `inside collectives` (the wait for the last rank: "
                  "its `remedy` names the late rank, its `diagnosis` how often it entered last, no `speedup`)"),
    _t(("cluster", "job"), "the job of a `job` list"),
    _t("rank", "the entry's rank in its section (1.., trusted entries first, ties by category name); empty for an "
               "archived entry (`remedy` `archived: …, not prescribed`): no fix, listed after the ranked ones"),
    _t("category", "the category"),
    _t("idle_usd_per_month", "the category's idle in dollars (the views' \"idle $/month\"): sum of the GPUs' "
                             "`fix_<c>_usd_per_month`; empty when none of its GPUs is priced "
                             "([unpriced](definitions.md#cost))"),
    _t(("fix_wins_back_usd_per_month", "fix_wins_back_basis"),
       "what a fix wins back (the views' \"a fix wins back $/month\"): the part of `idle_usd_per_month` the evidence "
       "says a fix recovers (copies on the compute stream: what a copy stream could hide, "
       "[Diagnosis](definitions.md#diagnosis)), else all of it, and that basis in words"),
    _t("collective_wait_usd_per_month", "the `inside collectives` entry's wait for the last rank in dollars (the sum "
                                        "of its GPUs' `collective_wait_usd_per_month`): busy time, a different measure "
                                        "from the idle, never added to it; empty on the `device idle` entries (and the "
                                        "idle columns empty on the `inside collectives` entry)"),
    _t(("assumed_usd_per_month", "assumed_gpus"), "the part of `idle_usd_per_month` on its `rate_assumed` GPUs (USD; "
                                                  "empty on the `inside collectives` entry), and their count"),
    _t("unpriced_gpus", "its GPUs that are `unpriced` (no dollars in it)"),
    _t("unpriced_models", "those GPUs' models with each one's count (`Quadro GP100 (2), no model named (1)`; empty: "
                          "none): a `cost.rates` entry for each prices them"),
    _t(("speedup", "share_pct"), "window-weighted: `1 / (1 − share)`, 100 × share: the speed-up if all of the "
                                 "category's idle went"),
    _t("recoverable_speedup", "the speed-up if what a fix wins back went: `1 / (1 − bounded ns / window_ns)` over "
                              "the same GPUs, bounded ns the part of the category's ns the evidence says is recoverable "
                              "(as `fix_wins_back_usd_per_month`); equal to `speedup` where it bounds none"),
    _t("remedy", "what the [diagnostic rules](definitions.md#diagnosis) that fired on its GPUs prescribe; the generic "
                 "one-line remedy, saying so, when none could be judged; `archived: …, not prescribed` when the "
                 "category is archived (under `analysis.actionable_pct` of W) on its GPUs"),
    _t("diagnosis", "what the [diagnostic rules](definitions.md#diagnosis) found for the category on 3 of its GPUs "
                    "(those with a finding not archived first: the evidence the remedy rests on, then in list order): "
                    "`<GPU name>: <rule in words>: evidence → remedy` (its display name, [GPU names](#gpu-names); the rule's "
                    "name in words, [Diagnosis](definitions.md#diagnosis), its id in the fleet's `diagnosis` JSON), one line each "
                    "(newline-separated), how many more GPUs have some; for `comm` the list's stragglers and its late "
                    "ranks (`collective_chronic`)"),
    _t(("gpus", "gpu_keys"), "the GPUs with that idle (`report gpu_key`)"),
    _t("example_gaps", "the 3 longest of that category in the device rosters: `report gpu_key @start_ns +length_ns "
                       "[nvtx range]`"),
    _t(("window_ns", "iterations"), "summed over the part's GPUs; the fewest of a GPU"),
    _t(("trusted", "confidence_tier"), "the entry rests on trusted GPUs (`medium`, `high`); the lowest tier of its "
                                       "GPUs"),
    _t(("low_confidence", "confidence_note"), "not `trusted`, and each of its GPUs' notes"),
    _t("implausible_speedup", "`speedup` is 10× or more (the category holds ≥ 90 % of the window: "
                              "[implausible](definitions.md#fix-first))"),
))

#: The sweep's history: one part per night, that night's fleet table (pipeline/runs/sweep.py).
HISTORY = Table("history", ("history/run_date=<night>/fleet.parquet",), "holds", (
    _t(tuple(FLEET_COLUMNS), "the night's fleet table, in its order and dtypes; the night is the folder's `run_date` "
                             "(a Hive partition: `pandas.read_parquet(S/history)` reads it as a column)"),
))

#: The gap table of a job's medical record (``records/<job>.md``, pipeline/report/medical.py).
RECORD_GAPS = Table("record gaps", ("records/<job>.md",), "holds", (
    _t("#", "the gap's rank, longest first (ties: earlier start, then `gpu_key`)"),
    _t("GPU", "the GPU's [name](#gpu-names)"),
    _t("start (report clock, s)", "the gap's start: seconds on the report's clock (export ns / 10⁹, as `--trim` takes "
                                  "them), which does not depend on where the capture started"),
    _t("NVTX range", "the NVTX range the gap lies in (`-`: none)"),
    _t("width", "the gap's length (`6.838 ms`)"),
    _t("category", "its category"),
))

#: compare.csv (``gpu-idle compare --out``; pipeline/report/compare.py writes these columns, in this order).
COMPARE_CSV = Table("compare.csv", ("compare.csv",), "holds", (
    _t("level", "`gpu`, `job`, `unpaired-before` or `unpaired-after`"),
    _t("cluster", "the job's cluster (the before side's)"),
    _t("job", "the before side's job"),
    _t("job_after", "the after side's job it was paired with"),
    _t("gpu_before", "the before GPU's name (numbered in pair order)"),
    _t("gpu_after", "the after GPU's name (numbered in pair order)"),
    _t("gpu_key_before", "the before GPU's `gpu_key`"),
    _t("gpu_key_after", "the after GPU's `gpu_key`"),
    _t("pairing", "the basis the job's GPUs were paired by: `rank`, `device ordinal` or `process order`"),
    _t("comparable", "the verdict: every check passed"),
    _t("forced",
       "the row's figures are shown only because of `--force` (every figure marked): the job is not comparable, or "
       "(a `gpu` row) its GPUs were paired by a position only, not known to be the same GPU"),
    _t("reasons", "the failed checks' texts, `; `-separated"),
    _t("withheld",
       "a `gpu` row whose GPUs were paired by a position only (`device ordinal` or `process order`, a side holding "
       "more than one GPU), so the pair is not known to be the same GPU: its figure cells are empty and this says "
       "why, in the words of the other views (`--force` shows them, `forced` true); empty when the pair's figures "
       "are shown and on other rows"),
    _t("idle_pct_before", "device-level idle share before, % of W"),
    _t("idle_pct_after", "the same after"),
    _t("idle_pct_change_pts", "after − before, points"),
    _t("noise_floor_pts", "the idle share's noise floor, points (empty: unknown)"),
    _t("idle_change", "`lower`, `higher`, `no change detectable` or `unknown`"),
    _t("reading",
       "what the row's change is, read against its own noise floor (a GPU pair's from its two GPUs, a job's from "
       "its pooled GPUs): `saving` (idle lower by more than the floor), `idle up` (higher by more), `no change "
       "detectable` (at most the floor: no saving) or `unknown` (no floor)"),
    _t("iteration_ms_before", "mean iteration length before, ms"),
    _t("iteration_ms_after", "the same after"),
    _t("iteration_change_pct", "100 × (after − before) / before"),
    _t("iteration_noise_floor_pct", "the iteration length's noise floor, % of the before length"),
    _t("iteration_change", "`faster`, `slower`, `no change detectable` or `unknown`"),
    _t("speedup",
       "before / after iteration length; empty when a side is of tier `toy` (withheld: such a capture is too small "
       "for an iteration length to compare; the views say `speed-up withheld: …`)"),
    *(_t(f"cat_{c}_{k}", m.format(c=c)) for c in CATEGORIES for k, m in (
        ("ms_per_iteration_before", "category `{c}`'s ms per stable iteration before"),
        ("ms_per_iteration_after", "the same after"), ("ms_per_iteration_change", "after − before, ms"),
        ("pct_before", "category `{c}`'s share of W before, %"), ("pct_after", "the same after"),
        ("pct_change_pts", "after − before, points"))),
    _t("usd_before_after_rates",
       "the before side's idle USD per month at the after side's rates and hours (priced GPUs summed)"),
    _t("usd_after_after_rates", "the after side's, the same rates"),
    _t("usd_change_after_rates", "after − before at the after side's rates"),
    _t("usd_before_fixed_rates",
       "the before side's idle USD per month at fixed rates (the before side's rates and hours)"),
    _t("usd_after_fixed_rates", "the after side's, the same fixed rates"),
    _t("usd_change_fixed_rates", "after − before at fixed rates"),
    _t("saving_usd_per_month",
       "−`usd_change_after_rates` when the idle share fell by more than its noise floor; else empty"),
    _t("rate_assumed", "some of the GPUs are priced at an assumed rate at the after side's rates (`~$` in the views)"),
    _t("assumed_gpus", "how many, at the after side's rates"),
    _t("assumed_usd_before_after_rates", "of `usd_before_after_rates`, the USD at assumed rates"),
    _t("assumed_usd_after_after_rates", "of `usd_after_after_rates`, the USD at assumed rates"),
    _t("unpriced_gpus", "GPUs unpriced at the after side's rates, left out of its dollar cells"),
    _t("assumed_gpus_fixed_rates", "GPUs at an assumed rate at fixed rates"),
    _t("unpriced_gpus_fixed_rates", "GPUs unpriced at fixed rates"),
    _t("confidence_tier_before", "the before side's lowest `confidence_tier` (a job: over its paired GPUs)"),
    _t("confidence_tier_after", "the same after"),
    _t("low_confidence", "either is `toy` or `low`: the figures are marked"),
    _t("confidence_note", "`low confidence: ` and the rows' `confidence_note` (each side's when they differ)"),
    _t("gaps_vanished", "gaps (a GPU row: count) only in the before roster"),
    _t("gaps_appeared", "gaps only in the after roster"),
    _t("gaps_kept_changed", "groups of gaps in both rosters whose total width or count changed"),
))

#: Every output table declared here beside the fleet table and the rollups.
TABLES = (FIX_FIRST, HISTORY, RECORD_GAPS, COMPARE_CSV)


#: What a price-free fleet row (a stored result, :func:`pipeline.analysis.analyse.measure_gpu`) holds besides its
#: fleet columns so that it can be priced later (:func:`pipeline.analysis.cost.price_rows`), never an output
#: column: the GPU's own model (before a ``gpu_model`` label), its own rank (a trace's, before a ``rank`` label),
#: its MIG share, why its model is empty (``_model_note``), why it is not an NVIDIA GPU (``_not_nvidia``) and the
#: warnings that follow the rate warnings in the row's order (``_warnings_tail``, ``_codes_tail``: the row's
#: ``warnings`` and ``warning_codes`` hold those before them).
PRICE_INPUTS = ("_gpu_model", "_rank", "_mig", "_sms", "_board_sms", "_model_note", "_not_nvidia", "_warnings_tail",
                "_codes_tail")


def check_row(row: dict) -> dict:
    """``row`` itself when each of its keys is a fleet column (or, in a price-free row, one of
    :data:`PRICE_INPUTS`); raises KeyError naming the first key the schema does not declare (a key is never
    dropped silently)."""
    for key in row:
        if key in PRICE_INPUTS:
            continue
        if key not in _BY_NAME or any(key == c.name for c in REPORT_EXTRA):
            raise KeyError(f"fleet row key {key!r} is not in the fleet schema (pipeline/schema.py)")
    return row


def missing_value(name: str):
    """What a row or an older table lacking column ``name`` holds there: ``pd.NA`` (Int64), False (bool),
    NaN (float), None (text)."""
    return {"Int64": pd.NA, "bool": False, "float": np.nan, "text": None}[column(name).dtype]


def _ns(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name].fillna(0).astype("int64")


def source_says_assumed(rate_source) -> bool:
    """Whether a ``rate_source`` text says the default model was assumed (``(default model: …``): the
    ``rate_assumed`` of a row written before that column existed (docs/definitions.md#cost)."""
    return f"({ASSUMED} " in str(rate_source or "")


def _caveat_usd(cat: str):
    """An older table's ``<cat>_usd_per_month``: the GPU's idle USD in proportion of ``cat_<cat>_ns`` to ``idle_ns``."""
    def derive(frame: pd.DataFrame) -> pd.Series:
        idle = _ns(frame, "idle_ns")
        per_ns = (frame["idle_usd_per_month"].astype(float).fillna(0.0) / idle.where(idle > 0)).fillna(0.0)
        return per_ns * _ns(frame, f"cat_{cat}_ns")
    return (("idle_usd_per_month", "idle_ns", f"cat_{cat}_ns"), derive)


#: Columns an older table lacks that are derived from the columns it has (what their definition gives
#: there) instead of left missing: ``name -> (columns it needs, frame -> values)``. ``launch_bound``: the
#: GPUs with launch idle (``cat_launch_ns`` holds the slivers of a launch-bound GPU only); ``rate_assumed``:
#: what ``rate_source`` says (:func:`source_says_assumed`).
DERIVED = {
    "launch_bound": (("cat_launch_ns",), lambda frame: _ns(frame, "cat_launch_ns") > 0),
    "rate_assumed": (("rate_source",), lambda frame: frame["rate_source"].map(source_says_assumed).astype(bool)),
    **{f"{c}_usd_per_month": _caveat_usd(c) for c in CAVEATS},
}


def conform(frame: pd.DataFrame, names=None) -> pd.DataFrame:
    """``frame`` (a fleet table as read, maybe written before some column existed) with every column of
    ``names`` (default: :data:`FLEET_COLUMNS`) it lacks added: derived from the columns it has
    (:data:`DERIVED`) or filled with :func:`missing_value` in its dtype; its own columns untouched (no copy
    when nothing lacks). The one path older tables take."""
    lacking = [n for n in (FLEET_COLUMNS if names is None else names) if n not in frame.columns]
    if not lacking:
        return frame
    added = {}
    for n in lacking:
        dtype = column(n).dtype
        needs, derive = DERIVED.get(n, ((), None))
        if derive is not None and all(c in frame.columns for c in needs):
            added[n] = derive(frame)
            continue
        added[n] = pd.Series(pd.array([pd.NA] * len(frame), dtype="Int64") if dtype == "Int64" else
                             [missing_value(n)] * len(frame),
                             index=frame.index, dtype={"Int64": "Int64", "bool": bool, "float": float,
                                                       "text": object}[dtype])
    return pd.concat([frame, pd.DataFrame(added, index=frame.index)], axis=1)

#: The marker comments around the generated part of docs/outputs.md.
BEGIN_MARK = "<!-- column reference: generated by `python -m pipeline.schema` from pipeline/schema.py; do not edit -->"
END_MARK = "<!-- end of the generated column reference -->"


def _rollup_of(name: str) -> str:
    """How fleet column ``name`` rolls up: the rollup columns made of it and how (``none`` when none is)."""
    if name in JOB_KEY:
        return "the key" if name == "job" else "the key (of both)"
    parts = [f"{r.rule.text} (`{r.name}`)" for r in ROLLUP if name in r.rule.sources]
    return ", ".join(parts) or "none"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def column_reference() -> str:
    """The Markdown of docs/outputs.md's fleet-table and rollup column reference, between (and with)
    :data:`BEGIN_MARK` and :data:`END_MARK`: one row per column (dtype, unit, how it rolls up, which
    :data:`OUTPUTS` show it, meaning), then the groups' :data:`NOTES`."""
    lines = [BEGIN_MARK, "", "### Fleet table", "",
             "`fleet.parquet` and `fleet.csv`: one row per (report, GPU), these columns in this order. `Int64`: whole "
             "numbers, int64 in Parquet even beside a missing value; ns on the report's clock.", "",
             "| column | dtype | unit | job and cluster rollup | shown in | meaning |", "|---|---|---|---|---|---|"]
    for c in FLEET + REPORT_EXTRA:
        lines.append(f"| `{c.name}` | {c.dtype} | {c.unit} | {_rollup_of(c.name)} | {', '.join(shown_in(c.name))} | "
                     f"{_cell(c.meaning)} |")
    lines += ["", "Shown in: `fleet` (fleet.parquet, fleet.csv), `printed` (the table `gpu-idle run` prints), "
              "`printed-wide` (`gpu-idle run --wide`), "
              "`report-csv` (`gpu-idle report --format csv`), `markdown` (`--format md`), `report` (the HTML "
              "report's tables). The printed table and the report's CSV show ns as ms (`window_ns` as `window_ms`).",
              "", "| columns | notes |", "|---|---|"]
    for group, note in NOTES.items():
        names = ", ".join(f"`{c.name}`" for c in FLEET if c.group == group)
        lines.append(f"| {names} | {_cell(note)} |")
    lines += ["", "### Rollups", "",
              f"`jobs.csv` (per `{'`, `'.join(JOB_KEY)}`) and `clusters.csv` (per `cluster`), over the rows that are "
              "not errors (`pipeline/fleet/reduce.py`, `rollup`), the key then these columns in this order:", "",
              "| column | dtype | unit | from | how | meaning |", "|---|---|---|---|---|---|"]
    for r in ROLLUP:
        made_of = ", ".join(f"`{c}`" for c in r.rule.sources) or "the rows"
        lines.append(f"| `{r.name}` | {r.dtype} | {r.unit} | {made_of}{' (error rows)' if r.rule.rows == ERRORS else ''} "
                     f"| {_cell(r.rule.text)} | {_cell(r.meaning)} |")
    return "\n".join(lines + ["", END_MARK])


def table_marks(table: Table) -> tuple[str, str]:
    """The marker comments around ``table``'s generated column table in docs/outputs.md."""
    return (f"<!-- table {table.name}: generated by `python -m pipeline.schema` from pipeline/schema.py; do not edit -->",
            f"<!-- end of table {table.name} -->")


def table_reference(table: Table) -> str:
    """The Markdown of ``table``'s columns (:class:`Table`), one line per entry, between (and with) its
    :func:`table_marks`; the whole fleet table's columns named as such."""
    begin, end = table_marks(table)
    lines = [begin, "", f"| column | {table.holds} |", "|---|---|"]
    for e in table.entries:
        names = ("every [fleet table](#fleet-table) column" if e.names == tuple(FLEET_COLUMNS)
                 else ", ".join(f"`{n}`" for n in e.names))
        lines.append(f"| {names} | {_cell(e.meaning)} |")
    return "\n".join(lines + ["", end])


def _between(text: str, begin: str, end: str, content: str) -> str:
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start or text.count(begin) != 1 or text.count(end) != 1:
        raise ValueError(f"docs/outputs.md: the marker comments {begin!r} and {end!r} are missing or repeated")
    return text[:start] + content + text[stop + len(end):]


def with_column_reference(text: str) -> str:
    """``text`` (docs/outputs.md) with the part between the markers replaced by :func:`column_reference`, and each
    output table's (:data:`TABLES`) by its :func:`table_reference`. Raises ValueError when a pair of markers is not
    there once each, in order."""
    text = _between(text, BEGIN_MARK, END_MARK, column_reference())
    for table in TABLES:
        text = _between(text, *table_marks(table), table_reference(table))
    return text


if __name__ == "__main__":  # python -m pipeline.schema [docs/outputs.md]: rewrite the generated column reference
    import sys
    from pathlib import Path

    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs" / "outputs.md")
    path.write_text(with_column_reference(path.read_text(encoding="utf-8")), encoding="utf-8")
