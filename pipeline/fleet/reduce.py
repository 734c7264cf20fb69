"""The reduce: per-GPU rows -> fleet table, stragglers, rollups.

Runs on the client, once per run, over every report's rows (new, reused from the
result store, and error rows): :func:`build_fleet` orders them and flags stragglers,
:func:`rollup` sums them per job and per cluster.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from .. import kinds
from ..analysis.cost import assumed_split, unpriced_text, unpriced_total
from ..analysis.fixfirst import fix_list
from ..load.capture import export_source
from ..schema import (ANALYSED, BOOL_COLUMNS, CLUSTER_KEY, DUPLICATE, ERRORS, FLEET_COLUMNS, INT_COLUMNS, JOB_KEY, NOT_ANALYSED, ROLLUP,
                      ROLLUP_COLUMNS, ROLLUP_INT_COLUMNS, Rows, Speedup, analysed_rows, check_row, conform, missing)
from .crosswait import calls_entry, match_across_files
from .grouping import group_jobs
from .pricing import price_in_place

__all__ = ["BOOL_COLUMNS", "COMM_COLUMNS", "FLEET_COLUMNS", "INT_COLUMNS", "ROLLUP_INT_COLUMNS", "build_fleet",
           "assumed_text", "drop_duplicates", "duplicate_row", "error_row", "fleet_frame", "int_column", "one_of_each",
           "problem_rows", "rate_assumptions", "reduce_outcomes", "rollup", "Rolled", "rolled"]

#: Communication overlap columns (:mod:`pipeline.analysis.overlap`), in fleet-table order.
COMM_COLUMNS = [c for c in FLEET_COLUMNS if c.startswith("comm_") and not c.endswith("_usd_per_month")]


def int_column(values: list, name: str) -> pd.arrays.IntegerArray:
    """Nullable ``Int64`` of ``values`` (Python or numpy ints; None, NaN or ``pd.NA`` where missing; a
    whole float is taken as its value), converted one object at a time: exact for every 64-bit integer,
    where a float64 column in between (what a frame of rows infers beside a missing value) is off by up
    to 128 ns at 1.75e18. Raises ValueError naming the column ``name`` for a value that is no whole
    number (a fraction, text)."""
    try:
        return pd.array(values, dtype="Int64")
    except (TypeError, ValueError) as exc:
        bad = next((v for v in values if not _whole(v)), None)
        raise ValueError(f"fleet column {name}: {bad!r} is not a whole number") from exc


def _whole(value) -> bool:
    """Whether ``value`` is missing or a whole number (what :func:`int_column` takes)."""
    if value is None or value is pd.NA or isinstance(value, (int, np.integer)):
        return True
    try:
        return bool(value != value) or float(value).is_integer()
    except (TypeError, ValueError):
        return False


def _flag(value) -> bool:
    """A flag column's value: False when missing (None, NaN, ``pd.NA``)."""
    return False if value is None or value is pd.NA or (isinstance(value, float) and value != value) else bool(value)


def fleet_frame(rows: list[dict]) -> pd.DataFrame:
    """Fleet rows (dicts; a key a row lacks is missing there) as a frame of :data:`FLEET_COLUMNS` in
    their order (:mod:`pipeline.schema`), typed from the start: :data:`INT_COLUMNS` ``Int64``
    (:func:`int_column`), :data:`BOOL_COLUMNS` ``bool``, the others as pandas infers them from the rows.
    Raises KeyError naming a row key the schema does not declare
    (:func:`~pipeline.schema.check_row`: never dropped), ValueError for a value of an integer column
    that is no whole number."""
    check_row(dict.fromkeys(key for row in rows for key in row))  # every key once, in the order the rows give them
    typed = set(INT_COLUMNS) | set(BOOL_COLUMNS)
    others = pd.DataFrame(rows, columns=[c for c in FLEET_COLUMNS if c not in typed])
    columns = {}
    for c in FLEET_COLUMNS:
        if c in typed:
            values = [row.get(c) for row in rows]
            columns[c] = (int_column(values, c) if c in INT_COLUMNS
                          else np.fromiter(map(_flag, values), dtype=bool, count=len(values)))
        else:
            columns[c] = others[c]
    return pd.DataFrame(columns, index=others.index)


def error_row(report: str, labels: dict, message: str) -> dict:
    """The fleet row of a report that could not be analysed: status ``error`` and the cause."""
    row = {c: None for c in FLEET_COLUMNS}
    row.update({"report": report, "cluster": labels.get("cluster", ""), "job": labels.get("job", ""),
                "node": labels.get("node", ""), "rank": labels.get("rank", ""),
                "status": "error", "error": message, "warnings": "", "warning_codes": "",
                "straggler": False})
    return row


#: The labels a duplicate's error names when they differ from the analysed file's (:func:`labels_not_used`).
LABEL_KEYS = ("cluster", "job", "node", "rank", "gpu_model", "kind")


def labels_not_used(report: str, labels: dict, kept: str, kept_labels: dict) -> str:
    """What a duplicate row's ``error`` adds when the labels of ``report`` (``labels``) differ from those of the
    file analysed in its place (``kept``, ``kept_labels``; docs/inputs.md#duplicate-captures): ``"; its labels
    cluster=west job=job-b not used (those of <kept> are)"``, each :data:`LABEL_KEYS` label of ``report`` whose
    value differs, in that order (an unset one as ``-``). A job named after each file's own name (the default:
    no rule names it) is no difference. ``""`` when none differs."""
    def value(v) -> str:
        return "-" if v is None or v == "" else str(v)

    def default_job(path: str, job) -> bool:
        return str(job) == kinds.stem(os.path.basename(path))

    differ = [f"{k}={value(labels.get(k))}" for k in LABEL_KEYS
              if value(labels.get(k)) != value(kept_labels.get(k))
              and not (k == "job" and default_job(report, labels.get(k)) and default_job(kept, kept_labels.get(k)))]
    return f"; its labels {' '.join(differ)} not used (those of {kept} are)" if differ else ""


def duplicate_row(report: str, labels: dict, kept: str, capture_id: str | None = None,
                  kept_labels: dict | None = None) -> dict:
    """The fleet row of a report that is another file of a capture analysed as ``kept``
    (docs/inputs.md#duplicate-captures): status ``duplicate``, ``error`` ``duplicate of <kept>`` and, when its
    ``labels`` differ from the kept file's (``kept_labels``), which of them are not used (:func:`labels_not_used`),
    no GPU, no figure (never priced, in no total)."""
    note = labels_not_used(report, labels, kept, kept_labels) if kept_labels is not None else ""
    row = error_row(report, labels, f"duplicate of {kept}{note}")
    row.update(status=DUPLICATE, capture_id=capture_id)
    return row


def analysed_first(path: str) -> tuple:
    """The order in which the files of one capture are preferred, the first analysed
    (docs/inputs.md#duplicate-captures): a file read as it is (an export, a trace) before one that nsys
    must export first (``.nsys-rep``, ``.qdrep``), then by path."""
    kind = kinds.kind_of(path)
    return (kind is not None and kind.needs_export, path)


def one_of_each(groups) -> dict[str, str]:
    """``path -> kept path`` over ``groups`` (collections of paths that hold one capture each): in each group,
    the path :func:`analysed_first` puts first is kept, every other maps to it."""
    out = {}
    for group in groups:
        kept, *others = sorted(group, key=analysed_first)
        out.update({other: kept for other in others})
    return out


def same_captures(rows) -> dict[str, tuple[str, str]]:
    """``report -> (kept report, capture id)`` of every report of ``rows`` (fleet rows) whose capture
    (``capture_id``, :func:`~pipeline.load.capture.capture_identity`) another report of ``rows`` holds too,
    the one :func:`analysed_first` puts first being kept."""
    holders: dict[str, set] = {}
    for row in rows:
        if row.get("capture_id"):
            holders.setdefault(row["capture_id"], set()).add(row["report"])
    return {other: (kept, capture) for capture, reports in holders.items()
            for other, kept in one_of_each([reports]).items()}


def drop_duplicates(rows: list[dict], rosters: dict, cfg, identical: dict | None = None) -> tuple[list[dict], dict]:
    """``(rows, rosters)`` with one file of each capture (docs/inputs.md#duplicate-captures): the rows and
    rosters of every report :func:`same_captures` finds holding a capture another report holds replaced by its
    :func:`duplicate_row`, and a :func:`duplicate_row` for each report of ``identical`` (``path -> kept path``:
    byte-identical to a report analysed, never analysed itself). ``cfg`` labels the rows."""
    found = same_captures(rows)
    captures = {row["report"]: row.get("capture_id") for row in rows}
    kept_rows = [row for row in rows if row["report"] not in found]
    kept_rosters = {key: value for key, value in rosters.items() if key[0] not in found}
    # a copy of a file that is itself a duplicate names the file analysed
    dups = {**{p: found.get(kept, (kept, captures.get(kept))) for p, kept in (identical or {}).items()}, **found}
    marked = [duplicate_row(p, cfg.labels_for(p), kept, capture, cfg.labels_for(kept))
              for p, (kept, capture) in sorted(dups.items())]
    return kept_rows + marked, kept_rosters


def unconfirmed_note(path: str, analysed) -> str:
    """What to add to the error of ``path`` when it is a report nsys must export (``.nsys-rep``, ``.qdrep``)
    that could not be read while an export beside it (same folder, among ``analysed``, the reports with
    figures) names it as its source (:func:`~pipeline.load.capture.export_source`): the pair looks like one
    capture but that could not be confirmed (docs/inputs.md#duplicate-captures). ``""`` otherwise."""
    kind = kinds.kind_of(path)
    if "://" in path or kind is None or not kind.needs_export:
        return ""
    folder, name = os.path.split(path)
    for other in sorted(analysed):
        if os.path.dirname(other) == folder and kinds.kind_of(other) is kinds.SQLITE_EXPORT \
                and export_source(other) == name:
            return (f"; {other} beside it says it was exported from this report and is analysed: whether both "
                    "hold one capture could not be confirmed (docs/inputs.md#duplicate-captures)")
    return ""


def problem_rows(problems, cfg) -> list[dict]:
    """The error rows (:func:`error_row`) of discovery's ``(input, message)`` problems;
    ``cfg`` (a :class:`~pipeline.config.Config`) labels each input."""
    return [error_row(item, cfg.labels_for(item), message) for item, message in problems]


def flag_stragglers(fleet: pd.DataFrame, spread_pct: float) -> pd.DataFrame:
    """Mark the highest-idle GPU of each job whose idle % spread exceeds ``spread_pct`` points.

    docs/definitions.md#stragglers: within one job, if max − min of device-level idle % across
    its GPUs exceeds 10 points, the GPU with the highest idle is the first
    suspect. A job is a (cluster, job) pair, as in the rollups: jobs of the same
    name in different clusters are different jobs. Error rows take no part. Ties:
    the first row in table order.
    """
    out = fleet.copy()
    flags = np.zeros(len(out), dtype=bool)
    status = out["status"].tolist()
    keys = zip(*(out[c].tolist() for c in JOB_KEY))
    idle = out["idle_pct"].astype(float).tolist() if len(out) else []
    jobs: dict = {}   # (cluster, job) -> row positions; a missing key part is one key (None), as pandas groups it
    for i, key in enumerate(keys):
        if not (isinstance(status[i], str) and status[i] in NOT_ANALYSED):
            jobs.setdefault(tuple(None if missing(v) else v for v in key), []).append(i)
    for rows in jobs.values():
        known = [i for i in rows if idle[i] == idle[i]]   # NaN: no idle % to compare
        if len(rows) >= 2 and known and max(idle[i] for i in known) - min(idle[i] for i in known) > spread_pct:
            top = max(idle[i] for i in known)
            flags[next(i for i in known if idle[i] == top)] = True   # ties: the first row in table order
    out["straggler"] = flags
    return out


def build_fleet(rows: list[dict], spread_pct: float = 10.0) -> pd.DataFrame:
    """Rows (dicts, :func:`fleet_frame`) -> fleet table in a stable order (report, gpu_key), stragglers
    flagged. Raises ValueError for a value of an integer column that is no whole number."""
    fleet = fleet_frame(rows)
    fleet = fleet.sort_values(["report", "gpu_key"], na_position="first", kind="stable").reset_index(drop=True)
    return flag_stragglers(fleet, spread_pct)


def _groups(rows: Rows, by: list[str], which) -> dict:
    """``key -> row numbers`` (in row order) of the rows ``which`` of ``rows``, keyed by the values of ``by`` (a row
    with a key value missing is in no group)."""
    keys = [rows.values[b] for b in by]
    groups: dict = {}
    for i in which:
        key = tuple(k[i] for k in keys)
        if not any(missing(v) for v in key):
            groups.setdefault(key, []).append(i)
    return groups


def _unpriced_empty(c, rows: Rows, group) -> bool:
    """Whether the USD column ``c``'s total over ``group`` (analysed row numbers) is unpriced
    (:func:`pipeline.analysis.cost.unpriced_total`): none of the GPUs its rule takes is priced and some are
    ``unpriced``. Such a total is empty, never $0.00."""
    taken = rows.take(c.rule.where, group)
    source, flags = rows.values[c.rule.source], rows.values["unpriced"]
    priced = sum(not missing(source[i]) for i in taken)
    return bool(unpriced_total(priced, sum(bool(flags[i]) for i in taken)))


def _column(c, values: list) -> np.ndarray | list:
    """A rollup column's cells as its type gives them: whole numbers ``int64`` (0 where missing), text ``""`` where
    missing, the others float (NaN where missing); USD per month rounded to cents, 0.0 where missing."""
    if c.dtype == "Int64":
        return np.array([0 if missing(v) else int(v) for v in values], dtype=np.int64)
    if c.dtype == "text":
        return pd.Series(["" if missing(v) else v for v in values], dtype=object)
    out = np.array([math.nan if missing(v) else float(v) for v in values], dtype=float)
    if c.unit == "USD/month":
        out = np.round(np.where(np.isnan(out), 0.0, out), 2)
    return out


def rollup(fleet: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Per-job or per-cluster totals: the key ``by`` (:data:`pipeline.schema.JOB_KEY` or ``["cluster"]``) and the
    columns of :data:`pipeline.schema.ROLLUP`, each made by its rule (:data:`pipeline.schema.RULES`) over the
    group's analysed rows (error rows for ``failed_reports``), in that order, sorted by the key.

    What every column gets by its type: whole numbers ``int64``, 0 where a group has none; text ``""``; USD
    per month rounded to cents, and empty (not $0.00) when none of the GPUs it sums is priced and some are
    ``unpriced`` (:func:`_unpriced_empty`). A group with no analysed GPU (every report of it failed:
    ``failed_reports``) has every USD and speed-up column empty: unknown, not $0.00 (docs/outputs.md). A rule's
    ``empty_without`` empties its column in a group with no row of that test. A table written before a source
    column existed reads it empty (those rollup columns empty).

    The rules run on plain lists of the few columns they read (:class:`~pipeline.schema.Rows`), one group at a
    time: a fleet has a handful of rows per job, where a pandas operation per column costs more than the rows."""
    lacking = [c for c in ROLLUP if any(s not in fleet.columns for s in c.rule.sources)]
    fleet = conform(fleet, [*dict.fromkeys(s for c in ROLLUP for s in c.rule.reads()), "unpriced"])
    rows = Rows(fleet, [*by, "status", "unpriced", *(s for c in ROLLUP for s in c.rule.reads())])
    status = rows.values["status"]
    every = range(len(status))
    analysed = [i for i in every if not (isinstance(status[i], str) and status[i] in NOT_ANALYSED)]
    groups = {ANALYSED: _groups(rows, by, analysed),
              ERRORS: _groups(rows, by, [i for i in every if isinstance(status[i], str) and status[i] == "error"])}
    keys = sorted(set(groups[ANALYSED]) | set(groups[ERRORS]))
    ok = [groups[ANALYSED].get(k, []) for k in keys]
    any_unpriced = any(bool(rows.values["unpriced"][i]) for i in analysed)
    out = {b: pd.Series([k[n] for k in keys], dtype=fleet[b].dtype) for n, b in enumerate(by)}
    for c in ROLLUP:
        rule = c.rule
        values = [rule.value(rows, groups[rule.rows].get(k, [])) for k in keys]
        cells = _column(c, values)
        usd = c.unit == "USD/month"
        empty = [(usd and any_unpriced and _unpriced_empty(c, rows, group))
                 # a group none of whose reports was analysed (each failed): its dollars and speed-ups are unknown,
                 # empty, never $0.00 or 1.0 (a sum over it would read "free"); its failed_reports says why
                 or ((usd or isinstance(rule, Speedup)) and not group)
                 # e.g. no measured GPU: the wait's dollars were not measured, empty, never $0.00
                 or (getattr(rule, "empty_without", None) is not None
                     and not any(rule.empty_without.holds(rows, i) for i in group))
                 for group in ok]
        if any(empty):
            cells = np.where(empty, math.nan, np.asarray(cells, dtype=float))
        out[c.name] = cells
    frame = pd.DataFrame(out, columns=[*by, *ROLLUP_COLUMNS])
    for c in lacking:
        frame[c.name] = pd.array([pd.NA] * len(frame), dtype="Int64") if c.dtype == "Int64" else np.nan
    return frame


def rate_assumptions(fleet: pd.DataFrame) -> dict:
    """How much of the fleet's idle USD per month rests on assumed rates (docs/definitions.md#cost), over the
    analysed rows of ``fleet`` (an older table's ``rate_assumed`` comes from its ``rate_source``,
    :func:`~pipeline.schema.conform`): ``{"assumed_usd": USD/month of the rate_assumed GPUs, "assumed_gpus":
    their count, "unpriced_gpus": GPUs left out of the dollars, "unpriced_models": their models and counts}``
    (:func:`pipeline.analysis.cost.assumed_split`)."""
    ok = conform(analysed_rows(fleet), ["rate_assumed", "unpriced", "idle_usd_per_month", "gpu_model"])
    return assumed_split(ok["idle_usd_per_month"].astype(float).to_numpy(), ok["rate_assumed"].astype(bool).to_numpy(),
                         ok["unpriced"].astype(bool).to_numpy(), ok["gpu_model"].tolist())


@dataclass(frozen=True)
class Rolled:
    """A finished fleet table rolled up once by the fleet stage for its readers (the report formats these, never
    rolls or prices again): ``clusters`` and ``jobs`` (:func:`rollup` per :data:`~pipeline.schema.CLUSTER_KEY` and
    per :data:`~pipeline.schema.JOB_KEY`; an empty frame for an empty table), ``fixes`` (the ranked fix-first lists,
    :func:`~pipeline.analysis.fixfirst.fix_list`, without example gaps; an empty frame without an analysed GPU) and
    ``rates_assumed`` (:func:`rate_assumptions`)."""

    clusters: pd.DataFrame
    jobs: pd.DataFrame
    fixes: pd.DataFrame
    rates_assumed: dict


def rolled(fleet: pd.DataFrame) -> Rolled:
    """:class:`Rolled` of the finished fleet table ``fleet`` (every column there: :func:`~pipeline.schema.conform`)."""
    empty = pd.DataFrame()
    return Rolled(rollup(fleet, list(CLUSTER_KEY)) if len(fleet) else empty,
                  rollup(fleet, list(JOB_KEY)) if len(fleet) else empty,
                  fix_list(fleet, {}) if len(analysed_rows(fleet)) else empty, rate_assumptions(fleet))


def assumed_text(ra: dict) -> str:
    """What part of a total rests on assumed rates, after the total (:func:`rate_assumptions`'s ``ra``):
    ``; of which $X at assumed rates (N GPU(s))``, ``; N GPU(s) unpriced, not in it (Quadro GP100 (1)); to price
    them, add a `cost.rates` entry ...`` (:func:`~pipeline.analysis.cost.unpriced_text`; the models named when
    ``ra`` has its ``unpriced_models``); empty when neither. The printed run's total, the report's headline, its
    Markdown, the record's and the fix-first lists' totals say it."""
    out = ""
    if ra["assumed_gpus"]:
        out += f"; of which ${ra['assumed_usd']:,.2f} at assumed rates ({ra['assumed_gpus']} GPU(s))"
    if ra["unpriced_gpus"]:
        out += "; " + unpriced_text(ra["unpriced_gpus"], ra.get("unpriced_models"))
    return out


def rosters_of(results: list) -> dict:
    """``(report, gpu_key) -> {"streams", "device", "timeline"}`` of per-GPU results
    (:class:`~pipeline.model.GpuResult`)."""
    return {(r.row["report"], r.row["gpu_key"]): {"streams": r.roster, "device": r.device_roster,
                                                 "timeline": r.timeline, **calls_entry(r)} for r in results}


def roster_entry(result, written_text: str | None) -> dict:
    """The rosters entry of one GPU's result for :func:`~pipeline.fleet.outputs.write_outputs`: the
    full rosters, or, when its JSON file was already written (``written_text``: the
    :func:`~pipeline.fleet.outputs.summary_text` of its ``_summary``), the device roster and that text."""
    if written_text is not None:
        return {"device": result.device_roster, "json": written_text, **calls_entry(result)}
    return {"streams": result.roster, "device": result.device_roster, "timeline": result.timeline,
            **calls_entry(result)}


def reduce_outcomes(outcomes, cfg, problems=(), stored_rows=(), stored_rosters=None,
                    identical: dict | None = None) -> tuple[pd.DataFrame, dict]:
    """The one reduce of a run, on the client: ``(fleet table, rosters)``.

    Args:
        outcomes: :class:`~pipeline.work.tasks.ReportOutcome` of every report analysed now
            (a failure becomes that report's error row).
        cfg: the configuration (the labels and the rate card every price-free row is joined to and priced with,
            :mod:`pipeline.fleet.pricing`; labels of error rows, straggler spread).
        problems: ``(input, message)`` pairs of inputs that never reached the analysis
            (discovery, identification), each an error row.
        stored_rows, stored_rosters: rows and rosters of reports reused from the result store.
        identical: ``path -> kept path`` of reports byte-identical to another, not analysed.
    One file of each capture stays (:func:`drop_duplicates`): the others are ``duplicate`` rows. Per-rank
    traces of one job become one job (:func:`~pipeline.fleet.grouping.group_jobs`).
    Returns:
        The fleet table (:func:`build_fleet` over every row) and ``(report, gpu_key) -> entry``
        (:func:`roster_entry`).
    """
    rows = list(stored_rows)
    rosters = dict(stored_rosters or {})
    errors = problem_rows(problems, cfg)
    failed = []
    for outcome in outcomes:
        if outcome.failure is not None:
            failed.append(outcome)
            continue
        for result in outcome.results:
            rows.append(result.row)
            gpu = result.row["gpu_key"]
            text = outcome.texts.get(gpu) if outcome.written else None
            rosters[(result.row["report"], gpu)] = roster_entry(result, text)
    price_in_place(rows, cfg)  # labels and prices of the day (stored results are price-free)
    rows, rosters = drop_duplicates(rows, rosters, cfg, identical)
    analysed = {row["report"] for row in rows if row.get("status") not in NOT_ANALYSED}
    errors += [error_row(o.path, cfg.labels_for(o.path), o.failure.message + unconfirmed_note(o.path, analysed))
               for o in failed]
    rows = match_across_files(group_jobs(rows + errors, cfg), rosters, cfg)
    return build_fleet(rows, cfg.analysis.straggler_spread_pct), rosters
