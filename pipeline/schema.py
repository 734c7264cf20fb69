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
import re
from typing import NamedTuple

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
#: The rollup of a USD column over the GPUs priced at an assumed rate only (``assumed_usd_per_month``).
ASSUMED_SUM = "sum where `rate_assumed`"
#: The rollup of a USD column over the GPUs whose confidence tier is trusted (``trusted_idle_usd_per_month``).
TRUSTED_SUM = "sum over trusted"
#: The rollup of a text column: its distinct non-empty values over the group's GPUs, in row order, ``, ``-joined.
DISTINCT = "distinct"
#: how a fleet column rolls up to a job and a cluster (the rollup columns that take it say it).
ROLLUPS = ("sum", ASSUMED_SUM, TRUSTED_SUM, "window-weighted mean", "min", "max", "first", "count", DISTINCT, "none")
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


@dataclasses.dataclass(frozen=True)
class RollupColumn:
    """One column of ``jobs.csv`` and ``clusters.csv``: ``name``, ``dtype``, ``unit``, the fleet column it is
    made of (``source``; empty for ``failed_reports``), ``how`` (:data:`ROLLUPS`) and ``meaning``."""

    name: str
    dtype: str
    unit: str
    source: str
    how: str
    meaning: str


def _c(name, dtype, unit, meaning, group=""):
    return Column(name, dtype, unit, meaning, group)


_CATS = [_c(f"cat_{c}_ns", "Int64", "ns", f"device-level idle of the application category `{c}`", "categories")
         for c in CATEGORIES]
_CATS += [_c(f"cat_{c}_pct", "float", "%", f"`cat_{c}_ns` as % of W", "categories") for c in CATEGORIES]
_CAVEAT_COLS = [_c(f"cat_{c}_ns", "Int64", "ns", f"device-level idle that is not the application's: `{c}`", "caveats")
                for c in CAVEATS]
_CAVEAT_COLS += [_c(f"cat_{c}_pct", "float", "%", f"`cat_{c}_ns` as % of W", "caveats") for c in CAVEATS]
_FIX = [_c(f"fix_{c}_{k}", "float", u, m.format(c=c), "fix")
        for c in FIXABLE for k, u, m in (("usd_per_month", "USD/month", "recoverable USD per month if `{c}` vanished"),
                                         ("speedup", "factor", "speed-up if `{c}` alone vanished"))]

#: Every column of the fleet table (fleet.parquet, fleet.csv; docs/outputs.md#fleet-table), in table order.
FLEET = (
    _c("report", "text", "text", "the report's path or URL", "labels"),
    _c("cluster", "text", "text", "the cluster label (`default` when no rule labels the report)", "labels"),
    _c("job", "text", "text", "the job label (default: the file name without its suffix)", "labels"),
    _c("node", "text", "text", "the node label", "labels"),
    _c("rank", "text", "text", "the rank label", "labels"),
    _c("job_grouped_by", "text", "text", "how the job was decided: `labels` (a `labels:` rule names it), "
       "`distributedInfo` (per-rank PyTorch traces of one job), `SLURM_JOB_ID` (Nsight exports naming the same "
       "Slurm job; [job grouping](definitions.md#job-grouping)) or `file` (the file is a job of its own)", "labels"),
    _c("scheduler_job", "text", "text", "the scheduler job an Nsight export's capture environment names "
       "(`SLURM_JOB_ID=<id>`; empty: none)", "labels"),
    _c("host", "text", "text", "the host the file names, on whose clock its times are: an Nsight export's "
       "`TARGET_INFO_SYSTEM_ENV` `Hostname` (else `HOSTNAME` in its capture's environment) when its rows are timed "
       "on the host's clock, a PyTorch trace's `host_name`; empty: none ([collective wait across files]"
       "(definitions.md#collective-wait-across-files))", "labels"),
    _c("host_source", "text", "text", "where `host` was read, or why a host an export names is not used (its rows "
       "count from the capture's start); empty: the file names no host", "labels"),
    _c("dist_world_size", "Int64", "count", "the world size a PyTorch trace's `distributedInfo` gives (empty: none)",
       "labels"),
    _c("dist_backend", "text", "text", "the backend a PyTorch trace's `distributedInfo` gives (`nccl`, ...; empty: "
       "none)", "labels"),
    _c("sched_job_id", "text", "text", "the scheduler job the accounting matched the report to (Slurm's job id, "
       "or a pod's `namespace/name`; empty: none)", "accounting"),
    _c("sched_user", "text", "text", "that job's user", "accounting"),
    _c("sched_account", "text", "text", "that job's account (Slurm) or team label (a pod's)", "accounting"),
    _c("sched_partition", "text", "text", "that job's partition (Slurm) or namespace (a pod's)", "accounting"),
    _c("sched_gpus", "Int64", "count", "the GPUs that job was allocated", "accounting"),
    _c("sched_matched_by", "text", "text", "the source and the rule that matched it: `slurm: environment`, "
       "`slurm: path`, `kubernetes: node`, ...", "accounting"),
    _c("gpu_key", "text", "text", "the GPU: MIG instance, physical GPU or `pid<P>/dev<D>`", "gpu"),
    _c("pid", "Int64", "count", "the first process driving the GPU", "gpu"),
    _c("device_id", "Int64", "count", "the first device id of the GPU", "gpu"),
    _c("pids", "text", "text", "every process driving the GPU, comma-separated", "gpu"),
    _c("device_ids", "text", "text", "every device id of the GPU, comma-separated", "gpu"),
    _c("gpu_model", "text", "text", "the GPU model the export (or a label) names; empty when unknown", "rate"),
    _c("window_rule", "text", "text", "the rule that chose W (`trim`, `nvtx`, `periodic`, `span`)", "window"),
    _c("untrimmed", "bool", "bool", "W is the whole span (no rule trimmed it)", "window"),
    _c("window_start_ns", "Int64", "ns", "start of W on the report's clock", "window"),
    _c("window_end_ns", "Int64", "ns", "end of W on the report's clock", "window"),
    _c("window_ns", "Int64", "ns", "length of W", "window"),
    _c("capture_ns", "Int64", "ns", "the GPU's capture: its first kernel's start to its last kernel's end", "confidence"),
    _c("first_kernel_ns", "Int64", "ns", "the start of the GPU's first kernel on the report's clock (its capture "
       "C is `first_kernel_ns` to `first_kernel_ns + capture_ns`)", "confidence"),
    _c("iterations", "Int64", "count", "stable iterations inside W", "iterations"),
    _c("iteration_mean_ns", "Int64", "ns", "their mean length on the GPU timeline", "iterations"),
    _c("iteration_cv", "float", "factor", "their lengths' coefficient of variation", "iterations"),
    _c("iteration_spread_pct", "float", "%", "`100 × (max − min) / median` of their lengths (empty: no iterations)",
       "confidence"),
    _c("bursts", "Int64", "count", "stretches of work in W: kernel-union runs apart by holes over "
       "`confidence.serving_burst_gap_ns` (1 ms)", "confidence"),
    _c("excluded_iterations", "text", "text", "every other iteration number and why", "iterations"),
    _c("kept_iterations", "text", "text", "the kept iterations' numbers as compact ranges", "iterations"),
    _c("window_note", "text", "text", "why earlier rules abstained and how the iterations were found", "iterations"),
    _c("job_kind", "text", "text", "`training`, `serving` or `unknown`: from the `kind` label, else the stated rule", "kind"),
    _c("job_kind_source", "text", "text", "`label`, or the evidence the rule found (and on which GPU); empty when unknown",
       "kind"),
    _c("startup_wait_ns", "Int64", "ns", "from the capture's start (the report's timeline zero) to the GPU's first kernel",
       "kind"),
    _c("startup_cut", "bool", "bool", "the capture began mid-run (no memory-allocating CUDA/HIP call of the GPU's "
       "processes before its first kernel): `startup_wait_ns` is not the job's start-up, which was not measured",
       "kind"),
    _c("graph_capture_ns", "Int64", "ns", "graph-capture start-up: from the GPU's first kernel to the end of the "
       "last CUDA/HIP graph capture of its processes (0: none); C and a `span` W start after it", "kind"),
    _c("startup_only", "bool", "bool", "no kernel runs after the last graph capture ends: W is start-up only, "
       "not a steady state (tier `toy`, `partial`)", "kind"),
    _c("capture_idle_ns", "Int64", "ns", "device-level idle over the capture C: first kernel start (after the "
       "graph-capture start-up) to last kernel end", "kind"),
    _c("capture_idle_pct", "float", "%", "`capture_idle_ns` as % of C", "kind"),
    _c("window_left_out_idle_pct", "float", "%", "the share of `capture_idle_ns` outside W (0 when C has no idle)",
       "kind"),
    _c("kernel_count", "Int64", "count", "kernels inside W (a CUDA graph execution traced as a whole counts as one)"),
    _c("stream_count", "Int64", "count", "(process, stream) pairs that ran them"),
    _c("busy_ns", "Int64", "ns", "union of all kernel intervals on the GPU, clipped to W"),
    _c("idle_ns", "Int64", "ns", "device-level idle: `window_ns − busy_ns` (the headline, no threshold)"),
    _c("idle_pct", "float", "%", "`idle_ns` as % of W"),
    _c("idle_pct_low", "float", "%", "the least idle % of one kept iteration's slice of W (empty: no iterations)",
       "confidence"),
    _c("idle_pct_high", "float", "%", "the most idle % of one kept iteration's slice of W (empty: no iterations)",
       "confidence"),
    _c("idle_pct_sd", "float", "%", "sample standard deviation of the kept iterations' idle shares (empty: fewer "
       "than 2 iterations)", "confidence"),
    _c("copy_only_ns", "Int64", "ns", "idle while copy engines are busy but no kernel runs"),
    _c("dark_ns", "Int64", "ns", "idle while nothing at all runs"),
    _c("copies_outside_count", "Int64", "count", "the GPU's copies and memsets with time outside W", "copies outside"),
    _c("copies_outside_ns", "Int64", "ns", "the union of their time outside W (longer than W: `copies-outside-window`)",
       "copies outside"),
    _c("busy_pct", "float", "%", "`busy_ns` as % of W", "meter"),
    _c("sample_periods", "Int64", "count", "the sampled meter's periods in W: `⌈window_ns / meter.sample_ns⌉`", "meter"),
    _c("sampled_busy_periods", "Int64", "count", "those in which some kernel ran for a positive time", "meter"),
    _c("sampled_util_pct", "float", "%",
       "what a sampled meter would read: `100 × sampled_busy_periods / sample_periods`; empty (no reading, as the "
       "views say) when W holds fewer than 6 periods (1 s at the default 1/6 s)", "meter"),
    _c("gap_count", "Int64", "count", "per-stream gaps longer than `min_gap_ns` (summed over streams)", "gaps"),
    _c("gap_total_ns", "Int64", "ns", "their total (can exceed W on many-stream GPUs)", "gaps"),
    _c("max_gap_ns", "Int64", "ns", "the longest of them", "gaps"),
    _c("gaps_le_5ms", "Int64", "count", "per-stream gaps up to 5 ms", "gaps"),
    _c("gaps_5_50ms", "Int64", "count", "per-stream gaps over 5 ms, up to 50 ms", "gaps"),
    _c("gaps_gt_50ms", "Int64", "count", "per-stream gaps over 50 ms", "gaps"),
    _c("gaps_le_5ms_ns", "Int64", "ns", "total of the gaps up to 5 ms", "gaps"),
    _c("gaps_5_50ms_ns", "Int64", "ns", "total of the gaps over 5 ms, up to 50 ms", "gaps"),
    _c("gaps_gt_50ms_ns", "Int64", "ns", "total of the gaps over 50 ms", "gaps"),
    _c("sliver_count", "Int64", "count", "sub-threshold per-stream gaps (launch-bound slivers)"),
    _c("sliver_total_ns", "Int64", "ns", "their total"),
    _c("copy_overlap_ns", "Int64", "ns", "copy-engine time inside the kept per-stream gaps"),
    _c("device_gap_count", "Int64", "count", "device-level gaps: holes over the threshold when no stream runs a kernel"),
    _c("device_gap_ns", "Int64", "ns", "their total"),
    _c("device_sliver_count", "Int64", "count", "device-level holes up to the threshold", "launch"),
    _c("device_sliver_ns", "Int64", "ns", "their total", "launch"),
    _c("launch_bound", "bool", "bool", "the device slivers are most of the application's idle", "launch"),
    *_CATS, *_CAVEAT_COLS,
    _c("main_category", "text", "text", "the application category holding the most idle (empty: none)", "categories"),
    _c("actionable", "text", "text", "the categories at `actionable_pct` of W or more, largest first", "categories"),
    _c("comm_ns", "Int64", "ns", "union of the collective kernels, clipped to W", "comm"),
    _c("comm_overlapped_ns", "Int64", "ns", "the part of it beside a compute kernel on another stream", "comm"),
    _c("comm_exposed_ns", "Int64", "ns", "`comm_ns − comm_overlapped_ns`: communication with no compute beside it", "comm"),
    _c("comm_pct", "float", "%", "`comm_ns` as % of W", "comm"),
    _c("comm_overlapped_pct", "float", "%", "`comm_overlapped_ns` as % of W", "comm"),
    _c("comm_exposed_pct", "float", "%", "`comm_exposed_ns` as % of W", "comm"),
    _c("collective_ns", "Int64", "ns", "the GPU's collective kernels inside W, summed per call: "
       "`collective_wait_ns + collective_transfer_ns`", "collwait"),
    _c("collective_wait_ns", "Int64", "ns", "of it, waiting inside the kernel for the last rank to enter the call "
       "(empty: abstained)", "collwait"),
    _c("collective_transfer_ns", "Int64", "ns", "of it, after the last rank entered (empty: abstained)", "collwait"),
    _c("collective_pct", "float", "%", "`collective_ns` as % of W", "collwait"),
    _c("collective_wait_pct", "float", "%", "`collective_wait_ns` as % of W", "collwait"),
    _c("collective_transfer_pct", "float", "%", "`collective_transfer_ns` as % of W", "collwait"),
    _c("collective_calls", "Int64", "count", "the GPU's collective calls inside W", "collwait"),
    _c("collective_last_count", "Int64", "count", "of them, the calls this GPU entered last (empty: abstained)",
       "collwait"),
    _c("collective_chronic", "bool", "bool", "last in more than `collective.chronic_share` of its calls", "collwait"),
    _c("collective_p2p", "bool", "bool", "every matched call is point-to-point send/recv (no NVTX range names a "
       "collective): its wait is the pipeline bubble", "collwait"),
    _c("collective_wait_status", "text", "text", "`measured`, `abstained` or `none` (no collective in W)", "collwait"),
    _c("collective_wait_note", "text", "text", "how the calls were matched, or why not", "collwait"),
    _c("collective_match_basis", "text", "text", "what the calls were matched by: `kth call of family` (the k-th "
       "kernel of a family on the same collective stream of each GPU), `kth call of family across files on one host` "
       "(the job's files on one host: one clock) or `abstained: <reason>`; empty with no collective in W", "collwait"),
    _c("rate_model", "text", "text", "the rate-card entry used", "rate"),
    _c("rate_usd_per_hour", "float", "USD/h", "its rate per GPU-hour", "rate"),
    _c("rate_source", "text", "text", "why that entry (and its `source`)", "rate"),
    _c("rate_assumed", "bool", "bool", "priced without an entry of its own: the default model's rate (no model named "
       "on an NVIDIA GPU; under `cost.unlisted: default` also a model not on the card)", "rate"),
    _c("unpriced", "bool", "bool", "no entry of its own and no rate (`cost.unlisted: unpriced`, the default: a model "
       "not on the card, or none named on a GPU its input says is not NVIDIA's): every USD column empty, left out of "
       "every USD total, its model named by every total", "rate"),
    _c("idle_usd_per_month", "float", "USD/month", "idle fraction × rate × hours per month (730)"),
    _c("profiler_usd_per_month", "float", "USD/month", "the part of `idle_usd_per_month` that is profiler overhead",
       "caveat_usd"),
    _c("untraced_usd_per_month", "float", "USD/month", "the part of `idle_usd_per_month` that is untraced",
       "caveat_usd"),
    _c("comm_exposed_usd_per_month", "float", "USD/month", "exposed communication priced like idle (busy time)",
       "comm_usd"),
    _c("collective_wait_usd_per_month", "float", "USD/month", "the wait inside collectives priced like idle (busy "
       "time: beside `idle_usd_per_month`, never in it)", "collwait"),
    _c("amdahl_speedup", "float", "factor", "`1 / (1 − idle fraction)`: the speed-up if the idle vanished"),
    *_FIX,
    _c("confidence_tier", "text", "text", "how far the month can be trusted: `toy`, `low`, `medium` or `high`",
       "confidence"),
    _c("low_confidence", "bool", "bool", "`confidence_tier` is `toy` or `low`", "confidence"),
    _c("confidence_note", "text", "text", "why the tier is not higher: the shortfalls of a `toy` or `low` row and the "
       "cap of an `unknown` kind that holds a row down (empty for an uncapped `medium` and for `high`)",
       "confidence"),
    _c("implausible_speedup", "bool", "bool", "some category holds at least 90 % of W"),
    _c("diagnosis", "text", "text", "the diagnostic rules' findings (rule, outcome, evidence, remedy) as compact "
       "JSON, one object per finding (docs/definitions.md#diagnosis; empty: none)"),
    _c("straggler", "bool", "bool", "the straggler: the highest-idle GPU of a job whose idle % spread exceeds 10 "
       "points (not the late rank of its collectives, `collective_late_rank`)", "straggler"),
    _c("warnings", "text", "text", "what the figures rest on that was incomplete or could not be real", "status"),
    _c("warning_codes", "text", "text", "the codes of `warnings`, each once, comma-separated (e.g. "
       "`gpu-model-unresolved,window-leaves-out-idle`): for filters and alerts", "status"),
    _c("capture_id", "text", "text", "the capture's identity, the same for every file of one capture (a report and "
       "its export, copies, a trace and its gzip): [duplicate captures](inputs.md#duplicate-captures)", "status"),
    _c("status", "text", "text", "`ok`, `partial`, `duplicate` or `error`", "status"),
    _c("error", "text", "text", "why the report could not be analysed; for a `duplicate` row, `duplicate of <file>` (and, when its labels differ from that file's, which were not used)",
       "status"),
)

#: Columns the outputs add to the fleet's (declared here like every other): the night of a report's row, a GPU's name.
REPORT_EXTRA = (_c("run_date", "text", "text", "the night (or the run folder's date) the row belongs to"),
                _c("gpu_name", "text", "text", "the GPU's name for people: model, number in its job, short id "
                   "(`H100 #3 9b5c4f8d`; [GPU names](#gpu-names))"))


#: The longer notes of the column groups (:attr:`Column.group`), under the column reference's table.
NOTES = {
    'labels': "where the row comes from; labels from `labels:` in the config. A report no rule labels gets cluster `default` (one cluster for every unlabelled report, in `clusters.csv` and the report's tables), job = its file name without the report suffix (`.sqlite`, `.nsys-rep`, `.qdrep`, `.sqlite3`, `.db`, `.pt.trace.json.gz`, `.pt.trace.json`, `.json.gz`, `.json`), node and rank empty (a PyTorch trace's rank comes from its `distributedInfo`); `Config.labels_for` in `pipeline/config.py`. Per-rank PyTorch traces of one job (same world size and backend, distinct ranks, overlapping captures) are one job without a rule, named after what their files share, and so are Nsight exports whose capture environment names the same Slurm job (`slurm-<id>`); `job_grouped_by` says how the job was decided ([job grouping](definitions.md#job-grouping))",
    'accounting': "who held the GPU, from the scheduler's accounting (`accounting.files`: `sacct --json` and `kubectl get pods -o json` outputs), matched by the rules of `accounting.match` ([coverage](definitions.md#coverage), [feeding the accounting](operations.md#feeding-the-accounting)); empty without accounting or when no rule matched. `teams.csv` and `coverage.csv` sum them",
    'gpu': 'the GPU: a MIG instance (`MIG-<uuid>`), else the physical GPU (`GPU-<uuid>` or `bus-<PCI bus id>` when the export names it, else `pid<P>/dev<D>`; see [GPUs and MIG instances](definitions.md#gpus-and-mig-instances)) and the process(es) driving it',
    'rate': "the model the export (or a label) names, empty when unknown; the rate-card entry used and why (`rate_source` says when the default model was assumed, also under a cluster override, and quotes the entry's `source`; a model not on the card keeps its `model-not-on-rate-card` warning under an override too). A GPU with no entry of its own is, under `cost.unlisted: unpriced` (the default), `unpriced` (no rate, every USD column empty, in no total) when it names a model not on the card or names none on a GPU its input says is not NVIDIA's (a ROCm/HIP trace), and `rate_assumed` (priced at `cost.default_model`'s rate) when it names none otherwise; under `cost.unlisted: default` (or `assume`) every such GPU is `rate_assumed`; with a coded warning either way: `model-not-on-rate-card` when the model is named, `gpu-model-unresolved` when it is not (neither makes the row `partial`). An older table's `rate_assumed` comes from its `rate_source` (see [Cost](definitions.md#cost))",
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
    'collwait': "[idle inside collectives](definitions.md#collective-wait) (`pipeline/analysis/collwait.py`): within one report holding several GPUs (one clock), the k-th collective kernel of a family (`ncclDevKernel_AllReduce_Sum_f32_RING_LL` -> `AllReduce`) on the same collective stream of each GPU is one call (a GPU's collective streams numbered in ascending (process, stream id) order: two communicators on the same ranks, on two streams, are never cross-matched); `collective_match_basis` says so (`kth call of family`) or why not (`abstained: <reason>`), NCCL's NVTX payloads not being a basis yet (the exports seen carry none); `last` is the latest start among its participants; a GPU waits `min(end, last) − start` (never below 0) and transfers `end − max(start, last)`, each part clipped to the GPU's W (a call straddling W's edge counts with its part inside W). Ranks in separate files of one job on one host (one clock: `host`) are matched the same way at the job's level ([across files](definitions.md#collective-wait-across-files), `pipeline/fleet/crosswait.py`), `collective_match_basis` `kth call of family across files on one host`. Abstained (`collective_wait_status` `abstained`, the reason in `collective_wait_note`) when the ranks are in separate reports whose clocks are not known to agree (different hosts, a host unknown) or their collective streams, families or call counts differ. Busy time: `collective_wait_usd_per_month` is priced like idle but never added to it, and its fix-first entry stands in its own section",
    'caveat_usd': "the part of `idle_usd_per_month` that is profiler overhead or untraced: shown apart, not the application's to fix",
    'comm_usd': 'exposed communication priced like idle: `comm_exposed_ns / window_ns` × rate × hours per month; busy time, so not inside `idle_usd_per_month`, and not a fix-first entry (that list is per idle category; `fix_comm_*` prices the idle gaps after collectives)',
    'fix': 'fix first, for each application category `c` (`data`, `comm`, `sync`, `boundary`, `periodic`, `launch`, `cpu`; never `profiler` or `untraced`): recoverable USD per month = `cat_<c>_ns / window_ns` × `rate_usd_per_hour` × `cost.hours_per_month`, and the speed-up if that category alone vanished, `1 / (1 − share)` (`pipeline/analysis/fixfirst.py`)',
    'confidence': "what the month extrapolates from and how far it can be trusted ([confidence tiers](definitions.md#confidence-tiers), `pipeline/analysis/confidence.py`): `toy` when W is under `confidence.toy_max_window_ns` (50 ms) or holds fewer than `confidence.toy_min_kernels` (50) kernels; `high` with at least `confidence.high_min_iterations` (20) stable iterations over at least `confidence.high_min_window_ns` (500 ms) spread at most `confidence.high_max_spread_pct` (10 %); `medium` the same at 5, 200 ms and 50 %; else `low`. A `serving` row is tiered by its `bursts` (stretches of work in W apart by holes over `confidence.serving_burst_gap_ns`, 1 ms) and W's length instead: `medium` at `confidence.serving_medium_min_bursts` (20) over `confidence.serving_medium_min_window_ns` (5 s), `high` at `confidence.serving_high_min_bursts` (100) over `confidence.serving_high_min_window_ns` (60 s). An `unknown` kind caps the tier: at most `low` when W leaves out more than `confidence.unknown_max_left_out_idle_pct` (10 %) of the capture's idle, at most `medium` when W is at least `confidence.unknown_mostly_idle_pct` (90 %) idle. `low_confidence` is `toy` or `low`, and the note names each shortfall and cap. `idle_pct_low`..`idle_pct_high` brackets `idle_pct`: each kept iteration's slice of W runs from its start to the next kept one's (the last to the end of W); `idle_pct_sd` is the sample standard deviation (divisor n − 1) of those slices' idle shares, the noise floor of [compare](definitions.md#compare-deltas)",
    'straggler': 'highest-idle GPU of a job whose idle % spread exceeds 10 points; a job is a (`cluster`, `job`) pair, as in `jobs.csv`, so jobs of the same name in different clusters are not compared',
    'status': '`ok`, `partial`, `duplicate` or `error` with the cause. `duplicate`: another file of the same capture is analysed instead ([duplicate captures](inputs.md#duplicate-captures)): one row, no GPU, no figure, never priced, in no total; `error` names it (`duplicate of <file>`). `partial`: the numbers rest on input that was incomplete or could not be real, each named in `warnings`: exact duplicate rows (counted once), rows with end < start or timed far outside the capture (dropped: kernels, CUDA API calls, copies, NVTX ranges, overhead rows; the capture is `ANALYSIS_DETAILS`\' start..stop, else `TARGET_INFO_SESSION_START_TIME` and the run of the other rows\' timestamps; each stated bound is judged on its own: when the export\'s own rows run on past it as a continuation of the rows inside (no step between them longer than 1 s or the inside rows\' extent), that bound is wrong, not the rows: the capture ends where they do on that side, the timeline\'s zero too for the start, nothing is dropped for the metadata, and one warning per report says so and names the bound judged wrong (start, end, or both), `ok`; an `ANALYSIS_DETAILS` the rows fit on neither clock is said so even beside a `TARGET_INFO_SESSION_START_TIME`; a row isolated beyond a bound, whether or not other rows contradict it, is dropped; CUDA API calls, copies or overhead rows of one table dropped so, all wholly outside the kept kernels\' time, leave the row `ok`: no figure rests on them, a `dropped-stray-rows` warning counts them), launches without kernel records, events Nsight Systems lost, a MIG instance of unknown size, processes on part of a board that cannot be told apart, kernels in the window that all last 0 ns (`zero-duration-kernels`: no kernel time recorded, so the 100 % idle is not measured), a window of a job of unknown kind that leaves out more than half of the capture\'s idle (`window-leaves-out-idle`), a `--trim` window reaching before the GPU\'s first kernel or past its last (`trim-outside-kernels`: that time is not measured idle, so W is cut to the kernels and the warning says how much; also printed on the console; the tier is at most `low`). A loader warning about some processes\' rows goes to the GPUs they drive. A GPU\'s row quotes the `DIAGNOSTIC_EVENT` warnings of its own processes and of the session (no process) that bear on the GPU trace (not CPU sampling, OS runtime, ftrace, symbols), each text once, with "(reported N times)". Profiler overhead is a warning too, but the trace is complete: `ok`; so are CUDA graphs traced as a whole (`graphs-traced-whole`: how many executions, the time they cover; device idle is a lower bound inside them) and `copies-outside-window` (the GPU\'s copies outside W take longer than W)',
}


def _r(name, dtype, unit, source, how, meaning):
    return RollupColumn(name, dtype, unit, source, how, meaning)


#: Every column of ``jobs.csv`` (per :data:`JOB_KEY`) and ``clusters.csv`` (per :data:`CLUSTER_KEY`, without
#: ``job``) after the key, in file order, over the rows that are not errors (:func:`pipeline.fleet.reduce.rollup`).
ROLLUP = (
    _r("gpus", "Int64", "count", "gpu_key", "count", "GPUs analysed"),
    _r("window_ns", "Int64", "ns", "window_ns", "sum", "summed"),
    _r("idle_ns", "Int64", "ns", "idle_ns", "sum", "summed"),
    _r("gap_total_ns", "Int64", "ns", "gap_total_ns", "sum", "summed"),
    _r("idle_usd_per_month", "float", "USD/month", "idle_usd_per_month", "sum", "summed (unpriced GPUs left out)"),
    _r("assumed_usd_per_month", "float", "USD/month", "idle_usd_per_month", ASSUMED_SUM,
       "the part of `idle_usd_per_month` priced at an assumed rate (0 when none of the job's GPUs is assumed)"),
    _r("unpriced_gpus", "Int64", "count", "unpriced", "sum", "GPUs flagged `unpriced` (no dollars)"),
    _r("unpriced_models", "text", "text", "gpu_model", "none",
       "the models of its `unpriced` GPUs, each with its count, most first (`Quadro GP100 (2), no model named (1)`; "
       "empty: none): the `cost.rates` entries that would price them"),
    _r("min_idle_pct", "float", "%", "idle_pct", "min", "the least idle % of a GPU"),
    _r("max_idle_pct", "float", "%", "idle_pct", "max", "the most idle % of a GPU"),
    _r("stragglers", "Int64", "count", "straggler", "sum", "GPUs flagged `straggler`"),
    _r("profiler_ns", "Int64", "ns", "cat_profiler_ns", "sum", "profiler overhead, summed, apart"),
    _r("untraced_ns", "Int64", "ns", "cat_untraced_ns", "sum", "untraced time, summed, apart"),
    _r("profiler_usd_per_month", "float", "USD/month", "profiler_usd_per_month", "sum", "summed, apart"),
    _r("untraced_usd_per_month", "float", "USD/month", "untraced_usd_per_month", "sum", "summed, apart"),
    _r("min_iterations", "Int64", "count", "iterations", "min", "the fewest stable iterations of a GPU"),
    _r("low_confidence_gpus", "Int64", "count", "low_confidence", "sum", "GPUs flagged `low_confidence`"),
    _r("trusted_idle_usd_per_month", "float", "USD/month", "idle_usd_per_month", TRUSTED_SUM,
       "summed over the GPUs whose `confidence_tier` is `medium` or `high` (0 when none of the job's GPUs is "
       "trusted)"),
    _r("comm_ns", "Int64", "ns", "comm_ns", "sum", "summed"),
    _r("comm_overlapped_ns", "Int64", "ns", "comm_overlapped_ns", "sum", "summed"),
    _r("comm_exposed_ns", "Int64", "ns", "comm_exposed_ns", "sum", "summed"),
    _r("comm_exposed_usd_per_month", "float", "USD/month", "comm_exposed_usd_per_month", "sum", "summed"),
    *[_r(f"fix_{c}_usd_per_month", "float", "USD/month", f"fix_{c}_usd_per_month", "sum", "summed") for c in FIXABLE],
    *[_r(f"fix_{c}_speedup", "float", "factor", f"cat_{c}_ns", "window-weighted mean",
         f"`1 / (1 − Σ cat_{c}_ns / Σ window_ns)`") for c in FIXABLE],
    _r("failed_reports", "Int64", "count", "", "count", "distinct reports with an error row"),
    _r("idle_pct", "float", "%", "idle_pct", "window-weighted mean", "`100 × Σ idle_ns / Σ window_ns`"),
    _r("busy_ns", "Int64", "ns", "busy_ns", "sum", "summed"),
    _r("busy_pct", "float", "%", "busy_pct", "window-weighted mean", "`100 × Σ busy_ns / Σ window_ns`"),
    _r("sample_periods", "Int64", "count", "sample_periods", "sum", "summed"),
    _r("sampled_busy_periods", "Int64", "count", "sampled_busy_periods", "sum", "summed"),
    _r("sampled_util_pct", "float", "%", "sampled_util_pct", "period-weighted mean",
       "`100 × Σ sampled_busy_periods / Σ sample_periods` over the GPUs with at least 6 periods (a reading); empty "
       "when none has"),
    _r("comm_exposed_pct", "float", "%", "comm_exposed_ns", "window-weighted mean",
       "`100 × Σ comm_exposed_ns / Σ window_ns`"),
    _r("collective_ns", "Int64", "ns", "collective_ns", "sum", "summed"),
    _r("collective_wait_ns", "Int64", "ns", "collective_wait_ns", "sum", "summed over the measured GPUs"),
    _r("collective_transfer_ns", "Int64", "ns", "collective_transfer_ns", "sum", "summed over the measured GPUs"),
    _r("collective_wait_pct", "float", "%", "collective_wait_ns", "window-weighted mean",
       "`100 × Σ collective_wait_ns / Σ window_ns` (the measured GPUs' windows)"),
    _r("collective_wait_usd_per_month", "float", "USD/month", "collective_wait_usd_per_month", "sum",
       "summed; beside `idle_usd_per_month`, never in it; empty when no GPU of the group was measured"),
    _r("collective_measured_gpus", "Int64", "count", "collective_wait_status", "none",
       "GPUs whose `collective_wait_status` is `measured`"),
    _r("collective_late_rank", "text", "text", "collective_last_count", "none",
       "the late rank: the GPU (`gpu_key`, with its report's file name when the job has several) that entered last "
       "most often (not the `straggler`, the most idle GPU)"),
    _r("collective_late_rank_kind", "text", "text", "collective_chronic", "none",
       "`chronic` when that GPU was last in more than `collective.chronic_share` of its calls, else `transient`"),
    _r("collective_match_basis", "text", "text", "collective_match_basis", "none",
       "the distinct `collective_match_basis` of its GPUs with a collective, in row order, `; `-joined (empty: none)"),
    _r("collective_wait_kind", "text", "text", "collective_p2p", "none",
       "`pipeline bubble` when every measured GPU's calls are point-to-point send/recv, else `collective wait`"),
    _r("sched_jobs", "text", "text", "sched_job_id", DISTINCT, "the scheduler jobs its GPUs were matched to, "
       "`, `-joined (empty: none; [coverage](definitions.md#coverage))"),
    _r("sched_accounts", "text", "text", "sched_account", DISTINCT, "their accounts or teams, `, `-joined: whose "
       "idle dollars these are"),
    _r("sched_users", "text", "text", "sched_user", DISTINCT, "their users, `, `-joined"),
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
assert all(c.source in _BY_NAME or not c.source for c in ROLLUP)
assert len(_BY_NAME) == len(FLEET) + len(REPORT_EXTRA)


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
    parts = [f"{r.how} (`{r.name}`)" for r in ROLLUP if r.source == name]
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
        lines.append(f"| `{r.name}` | {r.dtype} | {r.unit} | {f'`{r.source}`' if r.source else 'error rows'} | "
                     f"{r.how} | {_cell(r.meaning)} |")
    return "\n".join(lines + ["", END_MARK])


def with_column_reference(text: str) -> str:
    """``text`` (docs/outputs.md) with the part between the markers replaced by :func:`column_reference`.
    Raises ValueError when the markers are not there once each, in order."""
    start, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if start < 0 or end < start or text.count(BEGIN_MARK) != 1 or text.count(END_MARK) != 1:
        raise ValueError("docs/outputs.md: the column reference's marker comments are missing or repeated")
    return text[:start] + column_reference() + text[end + len(END_MARK):]


if __name__ == "__main__":  # python -m pipeline.schema [docs/outputs.md]: rewrite the generated column reference
    import sys
    from pathlib import Path

    path = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "docs" / "outputs.md")
    path.write_text(with_column_reference(path.read_text(encoding="utf-8")), encoding="utf-8")
