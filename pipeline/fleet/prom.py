"""The fleet table as Prometheus metrics: a textfile-collector file for a node exporter
(docs/outputs.md#prometheus-metrics; ``gpu-idle run --prom FILE``, ``gpu-idle sweep --prom FILE`` or the
``sweep.prom`` setting).

Every figure is read from the final fleet table (:func:`metrics_text` takes the fleet DataFrame): nothing is
computed again here, the dollars least of all. The text is made by ``prometheus_client`` (its text format 0.0.4:
HELP and TYPE lines, label values escaped: backslash, double quote and newline) and written atomically
(:func:`pipeline.io.write_text`: a temporary name beside the file, then a rename), so a node exporter never
reads half a file. The temporary name (``.NAME.<hex>.tmp``) does not end in ``.prom``: the collector skips it.

Names follow Prometheus' conventions: the ``gpu_idle_`` prefix, base units in the names (``_seconds``,
``_ratio`` for a share 0..1), and ``_dollars_per_month`` for money (USD per month of 730 hours, the product's
unit). A GPU's series carry ``cluster``, ``job``, ``node``, ``report`` and ``gpu`` (its ``gpu_key``); every
dollar series carries ``pricing`` (``card``: the GPU's own rate-card entry; ``assumed``: the default model's
rate, ``rate_assumed``) and ``tier`` (its confidence tier), so assumed or untrusted dollars are never summed in
silently, and ``account`` and ``user`` (who held the GPU, from the scheduler's accounting; empty without). An ``unpriced`` GPU has no dollar series at all (its dollars are unknown, not 0); it is counted by
``gpu_idle_gpus{pricing="unpriced"}`` and marked on ``gpu_idle_gpu_info``. A figure the table leaves empty (a
collective wait abstained, a sampled meter with no period) has no series: absent means not measured.

With the scheduler's accounting, :data:`COVERAGE_METRICS` hold the coverage table (``coverage.csv``: one series
per allocation, labelled :data:`ALLOCATION_LABELS`) and the fleet's share of the GPU spend measured; without it,
or when it gave no allocation holding GPUs in the period (coverage unknown), none is written
(docs/definitions.md#coverage).
"""
from __future__ import annotations

import datetime as dt
import os
from typing import NamedTuple

import pandas as pd
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from ..analysis.names import gpu_names
from ..io import absent, cell_text, write_text
from ..model import CATEGORIES
from ..schema import FIXABLE, JOB_KEY, analysed_rows

#: Every metric name starts with it.
PREFIX = "gpu_idle_"
#: The labels of every per-GPU series, in order: cluster, job, node, the report's path or URL, the GPU's key.
GPU_LABELS = ("cluster", "job", "node", "report", "gpu")
#: The labels of every per-allocation series (the coverage metrics): the scheduler (slurm or kubernetes), its
#: job id (``namespace/name`` for a pod), account (team), user, partition (a pod's namespace).
ALLOCATION_LABELS = ("scheduler", "sched_job", "account", "user", "partition")
#: The labels a dollar series adds: how the GPU was priced, its confidence tier, and who held it: the account
#: (team) and user the scheduler's accounting matched (fleet columns ``sched_account``, ``sched_user``; empty
#: without accounting or when no allocation matched, which Prometheus reads as no label), so that ``sum by
#: (account)`` gives teams.csv's idle $/month.
DOLLAR_LABELS = ("pricing", "tier", "account", "user")
#: ``pricing`` values: the GPU's own rate-card entry, the default model's rate, no rate at all.
PRICINGS = ("card", "assumed", "unpriced")
#: ``gpu_idle_confidence_level``: the tier as a number, so that an alert can say ``< 2`` (below medium).
TIER_LEVELS = {"toy": 0, "low": 1, "medium": 2, "high": 3}
NS_PER_S = 1e9


class Metric(NamedTuple):
    """One metric the file holds: its full ``name``, its ``labels`` (in order) and its HELP text."""

    name: str
    labels: tuple[str, ...]
    help: str


def _m(name: str, labels: tuple[str, ...], help_: str) -> Metric:
    return Metric(PREFIX + name, labels, help_)


_GPU, _USD = GPU_LABELS, GPU_LABELS + DOLLAR_LABELS
#: Every metric written, in file order (docs/outputs.md#prometheus-metrics; the dashboard's queries name only these).
METRICS = (
    _m("gpu_info", _GPU + ("gpu_name", "model", "pricing", "tier", "status"),
       "An analysed GPU of the fleet table (always 1): its name for people, model, pricing (card, assumed or "
       "unpriced), confidence tier and status (ok or partial)."),
    _m("window_seconds", _GPU, "Length of the analysis window W (window_ns)."),
    _m("idle_seconds", _GPU, "Device-level idle in W: no kernel runs (idle_ns)."),
    _m("idle_ratio", _GPU, "Device-level idle share of W, 0..1 (idle_pct / 100)."),
    _m("busy_ratio", _GPU, "Device-level busy share of W, 0..1 (busy_pct / 100): the truth beside the sampled meter."),
    _m("sampled_util_ratio", _GPU, "What a utilisation meter sampling every meter.sample_ns would read, 0..1 "
       "(sampled_util_pct / 100)."),
    _m("comm_exposed_seconds", _GPU, "Communication with no compute beside it in W (comm_exposed_ns): busy time."),
    _m("comm_exposed_ratio", _GPU, "Exposed communication as a share of W, 0..1 (comm_exposed_pct / 100)."),
    _m("collective_wait_seconds", _GPU, "Waiting inside collectives for the last rank in W (collective_wait_ns; "
       "only where measured): busy time."),
    _m("category_idle_seconds", _GPU + ("category",), "Device-level idle of one category in W (cat_<category>_ns; "
       "the caveats profiler and untraced included)."),
    _m("category_idle_ratio", _GPU + ("category",), "Device-level idle of one category as a share of W, 0..1 "
       "(cat_<category>_pct / 100)."),
    _m("confidence_level", _GPU + ("tier",), "The confidence tier as a number: 0 toy, 1 low, 2 medium, 3 high "
       "(confidence_tier)."),
    _m("idle_dollars_per_month", _USD, "Idle cost in USD per month of 730 hours (idle_usd_per_month); priced "
       "GPUs only, pricing says whether the rate was assumed."),
    _m("category_idle_dollars_per_month", _USD + ("category",), "The part of the idle cost held by one category, "
       "USD per month (fix_<category>_usd_per_month; profiler_usd_per_month and untraced_usd_per_month for the "
       "caveats)."),
    _m("comm_exposed_dollars_per_month", _USD, "Exposed communication priced like idle, USD per month "
       "(comm_exposed_usd_per_month): beside the idle cost, never in it."),
    _m("collective_wait_dollars_per_month", _USD, "The wait inside collectives priced like idle, USD per month "
       "(collective_wait_usd_per_month; only where measured): beside the idle cost, never in it."),
    _m("gpus", ("cluster", "job", "pricing"), "GPUs analysed (status ok or partial), by pricing: card, assumed, "
       "unpriced (no dollars)."),
    _m("failed_reports", ("cluster", "job"), "Distinct reports of the job with an error row (could not be "
       "analysed)."),
    _m("failed_report_info", ("cluster", "job", "report"), "A report that could not be analysed (always 1)."),
    _m("night_timestamp_seconds", (), "The sweep's night (its date at 00:00 UTC) as a Unix time; a sweep's file "
       "only."),
)
_ALLOC = ALLOCATION_LABELS
_NO_ACCOUNTING = " Written only when the scheduler's accounting is given (--accounting, accounting.files): none without."
#: The coverage metrics (docs/definitions.md#coverage), one series per allocation of the accounting, from the
#: coverage table (``coverage.csv``); none without accounting.
COVERAGE_METRICS = (
    _m("allocation_info", _ALLOC + ("pricing", "status"),
       "An allocation of the scheduler's accounting that held GPUs (always 1): its pricing (card, assumed or "
       "unpriced) and status (measured, partly measured, not measured: no capture saw it, never priced as idle)."
       + _NO_ACCOUNTING),
    _m("held_gpu_seconds", _ALLOC, "GPU-seconds the allocation held in the accounting's period: GPUs × its time "
       "(coverage.csv held_gpu_ns)." + _NO_ACCOUNTING),
    _m("represented_gpu_seconds", _ALLOC, "GPU-seconds of the allocation its captures represent: captured GPUs × "
       "its time (coverage.csv represented_gpu_ns); the rest is not measured." + _NO_ACCOUNTING),
    _m("held_dollars", _ALLOC + ("pricing",), "The allocation's GPU spend in USD over its time at its rate "
       "(coverage.csv held_usd); priced allocations only." + _NO_ACCOUNTING),
    _m("represented_dollars", _ALLOC + ("pricing",), "The part of the allocation's GPU spend its captures "
       "represent, USD (coverage.csv represented_usd); priced allocations only." + _NO_ACCOUNTING),
    _m("gpu_spend_measured_ratio", (), "The share of the fleet's GPU spend the captures represent, 0..1: "
       "represented over held USD of the priced allocations (the report's coverage sentence); absent when none "
       "is priced." + _NO_ACCOUNTING),
    _m("untraced_allocations", (), "Allocations that held GPUs without any capture (status not measured; "
       "gpu_idle_allocation_info names them)." + _NO_ACCOUNTING),
)
#: Every metric name written (the coverage metrics only with accounting).
METRIC_NAMES = tuple(m.name for m in METRICS + COVERAGE_METRICS)
COVERAGE_NAMES = tuple(m.name for m in COVERAGE_METRICS)
_BY_NAME = {m.name: m for m in METRICS + COVERAGE_METRICS}


def _number(value) -> float | None:
    """A sample's value, or None where the table has none (no series then)."""
    return None if absent(value) else float(value)


def pricing(row) -> str:
    """``card``, ``assumed`` or ``unpriced`` (:data:`PRICINGS`) for a fleet row."""
    if bool(row.get("unpriced")):
        return "unpriced"
    return "assumed" if bool(row.get("rate_assumed")) else "card"


def _category_dollars_column(category: str) -> str:
    """The fleet column holding the dollars of ``category``'s idle."""
    return f"fix_{category}_usd_per_month" if category in FIXABLE else f"{category}_usd_per_month"


class _Families:
    """The metric families being filled, one per :data:`METRICS` entry."""

    def __init__(self):
        self.families = {m.name: GaugeMetricFamily(m.name, m.help, labels=list(m.labels))
                         for m in METRICS + COVERAGE_METRICS}

    def add(self, name: str, labels: tuple, value) -> None:
        """One sample of ``name`` (its full name), unless ``value`` is missing."""
        number = _number(value)
        if number is not None:
            assert len(labels) == len(_BY_NAME[name].labels), name
            self.families[name].add_metric(list(labels), number)


def _gpu_samples(fam: _Families, row: dict, name: str) -> None:
    gpu = tuple(cell_text(row.get(c)) for c in ("cluster", "job", "node", "report", "gpu_key"))
    tier, priced = cell_text(row.get("confidence_tier")), pricing(row)
    p = PREFIX
    fam.add(p + "gpu_info", gpu + (name, cell_text(row.get("gpu_model")), priced, tier, cell_text(row.get("status"))), 1)
    for metric, column, scale in (("window_seconds", "window_ns", NS_PER_S), ("idle_seconds", "idle_ns", NS_PER_S),
                                  ("idle_ratio", "idle_pct", 100), ("busy_ratio", "busy_pct", 100),
                                  ("sampled_util_ratio", "sampled_util_pct", 100),
                                  ("comm_exposed_seconds", "comm_exposed_ns", NS_PER_S),
                                  ("comm_exposed_ratio", "comm_exposed_pct", 100)):
        value = _number(row.get(column))
        fam.add(p + metric, gpu, None if value is None else value / scale)
    measured = row.get("collective_wait_status") == "measured"
    wait = _number(row.get("collective_wait_ns")) if measured else None
    fam.add(p + "collective_wait_seconds", gpu, None if wait is None else wait / NS_PER_S)
    for c in CATEGORIES:
        ns, pct = _number(row.get(f"cat_{c}_ns")), _number(row.get(f"cat_{c}_pct"))
        fam.add(p + "category_idle_seconds", gpu + (c,), None if ns is None else ns / NS_PER_S)
        fam.add(p + "category_idle_ratio", gpu + (c,), None if pct is None else pct / 100)
    if tier in TIER_LEVELS:
        fam.add(p + "confidence_level", gpu + (tier,), TIER_LEVELS[tier])
    if priced == "unpriced":  # no dollars: unknown, never 0 (the table's USD cells are empty too)
        return
    usd = gpu + (priced, tier, cell_text(row.get("sched_account")), cell_text(row.get("sched_user")))
    fam.add(p + "idle_dollars_per_month", usd, row.get("idle_usd_per_month"))
    for c in CATEGORIES:
        fam.add(p + "category_idle_dollars_per_month", usd + (c,), row.get(_category_dollars_column(c)))
    fam.add(p + "comm_exposed_dollars_per_month", usd, row.get("comm_exposed_usd_per_month"))
    if measured:
        fam.add(p + "collective_wait_dollars_per_month", usd, row.get("collective_wait_usd_per_month"))


def night_timestamp(night: str) -> float:
    """A night ``YYYY-MM-DD`` as the Unix time of its 00:00 UTC."""
    return dt.datetime.combine(dt.date.fromisoformat(night), dt.time(), dt.timezone.utc).timestamp()


def _coverage_samples(fam: _Families, cov: pd.DataFrame, share: dict) -> None:
    """The :data:`COVERAGE_METRICS` of the coverage table ``cov`` (one row per allocation), its values as they are,
    and of ``share``, its fleet's figures (:func:`~pipeline.accounting.joined.measured_share`); none when ``cov``
    has no allocation (the coverage is unknown, docs/definitions.md#coverage)."""
    p = PREFIX
    if cov.empty:  # no allocation read in the period: the coverage is unknown, no figure of it is written
        return
    for r in cov.to_dict("records"):
        alloc = tuple(cell_text(r.get(c)) for c in ("source", "job_id", "account", "user", "partition"))
        priced = "unpriced" if _number(r.get("held_usd")) is None else "assumed" if bool(r.get("rate_assumed")) \
            else "card"
        fam.add(p + "allocation_info", alloc + (priced, cell_text(r.get("status"))), 1)
        held, represented = _number(r.get("held_gpu_ns")), _number(r.get("represented_gpu_ns"))
        fam.add(p + "held_gpu_seconds", alloc, None if held is None else held / NS_PER_S)
        fam.add(p + "represented_gpu_seconds", alloc, None if represented is None else represented / NS_PER_S)
        if priced != "unpriced":
            fam.add(p + "held_dollars", alloc + (priced,), r.get("held_usd"))
            fam.add(p + "represented_dollars", alloc + (priced,), r.get("represented_usd"))
    if share["held_usd"] > 0:
        fam.add(p + "gpu_spend_measured_ratio", (), share["represented_usd"] / share["held_usd"])
    fam.add(p + "untraced_allocations", (), len(share["not_measured"]))


def metrics_text(fleet: pd.DataFrame, night: str | None = None, coverage: pd.DataFrame | None = None,
                 share: dict | None = None) -> str:
    """The Prometheus text (format 0.0.4) of the final fleet table ``fleet``: every :data:`METRICS` family that
    has a sample, in that order, rows in table order. ``night``: the sweep's night (``YYYY-MM-DD``), written as
    ``gpu_idle_night_timestamp_seconds``; None for ``gpu-idle run``. ``coverage``: the accounting's coverage
    table (:func:`~pipeline.accounting.hooks.coverage_table`) and ``share`` its
    :func:`~pipeline.accounting.joined.measured_share`, written as the :data:`COVERAGE_METRICS`; None without
    accounting (none written)."""
    fam = _Families()
    rows = analysed_rows(fleet)
    names = gpu_names(fleet)
    for row in rows.to_dict("records"):
        _gpu_samples(fam, row, names.get((str(row["report"]), str(row["gpu_key"])), ""))
    keyed = fleet.assign(**{k: fleet[k].map(cell_text) for k in JOB_KEY}, pricing=[pricing(r) for r in
                                                                              fleet.to_dict("records")])
    analysed = set(analysed_rows(keyed).index)
    for (cluster, job), rows in keyed.groupby(list(JOB_KEY), sort=False):
        counts = rows.loc[rows.index.isin(analysed), "pricing"].value_counts()
        for priced in PRICINGS:
            fam.add(PREFIX + "gpus", (cluster, job, priced), int(counts.get(priced, 0)))
        reports = list(dict.fromkeys(cell_text(r) for r in rows.loc[rows["status"] == "error", "report"]))
        fam.add(PREFIX + "failed_reports", (cluster, job), len(reports))
        for report in reports:
            fam.add(PREFIX + "failed_report_info", (cluster, job, report), 1)
    if night is not None:
        fam.add(PREFIX + "night_timestamp_seconds", (), night_timestamp(night))
    if coverage is not None:
        _coverage_samples(fam, coverage, share)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector([f for f in fam.families.values() if f.samples]))
    return generate_latest(registry).decode("utf-8")


class _Collector:
    """The filled families, handed to ``prometheus_client``'s registry as one collector."""

    def __init__(self, families):
        self._families = families

    def collect(self):
        return iter(self._families)


def write_prom(path: str, fleet: pd.DataFrame, night: str | None = None, coverage: pd.DataFrame | None = None,
               share: dict | None = None, create_folder: bool = False) -> None:
    """Write :func:`metrics_text` of ``fleet`` (and ``coverage``, ``share``) to ``path`` atomically (a temporary
    file beside it, renamed over it). Raises OSError when it cannot be written, and when its folder does not exist
    unless ``create_folder`` (the sweep's ``sweep.prom`` setting, under the state folder the sweep owns): a
    misspelt ``--prom`` folder is an error, never a new folder the node exporter does not read."""
    folder = os.path.dirname(os.path.abspath(path))
    if not create_folder and not os.path.exists(folder):
        raise FileNotFoundError(f"its folder {folder} does not exist")
    write_text(path, metrics_text(fleet, night, coverage, share))

