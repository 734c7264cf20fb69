"""The numbers of the manager report, computed once from the result files (no rendering here).

RESULTS is either

* a run output dir (``gpu-idle run ... --out DIR``): ``DIR/fleet.parquet``,
  ``DIR/gpus/*.json``, ``DIR/records/<stem>.md`` (one per job,
  :func:`~pipeline.report.medical.record_stems`); one night, no trend; or
* a nightly-sweep state dir ``S``: ``S/history/run_date=YYYY-MM-DD/fleet.parquet``
  (each night's full fleet table) and ``S/nights/YYYY-MM-DD/`` (that night's run
  output dir). The latest night not in the future is the current one (:func:`pipeline.io.current_night`);
  the history gives the trend.

:func:`load_results` reads the files, :func:`summarise` turns them into plain
Python values (dicts, lists, floats) that the HTML, Markdown and CSV renderers
format. Money is USD per month, percentages 0..100, times int ns.
"""
from __future__ import annotations

import datetime as dt
import glob
import json
import math
import os
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..analysis import fixfirst
from ..analysis.confidence import TIERS, TRUSTED, trust_rank
from ..analysis.cost import assumed_split, priced_sum, unpriced_total
from ..analysis.meter import FEW_PERIODS_PER_GPU, util_pct
from ..fleet.outputs import gpu_json_name
from ..fleet.pricing import PRICING, finished, kept_run_pricing, settings_hours
from ..fleet.reduce import Rolled, rolled
from ..io import current_night, dated_dirs, same_file
from ..model import CATEGORIES
from ..schema import DUPLICATE, JOB_KEY, analysed_rows, conform, source_says_assumed
from ..store.results import MANIFEST, pricing_hash, read_manifest
from ..fleet.changes import CHANGE_COLUMNS, split
from .medical import captured_idle, fleet_collectives, gpu_names, job_captures, job_confidences, job_keys, job_titles, record_stems
from .words import wins_back, wins_back_basis

#: A sweep night's comparison with the last earlier night, in the night's folder (docs/definitions.md#compare-in-the-sweep).
NIGHT_COMPARISON = os.path.join("compare", "compare.html")

#: Rows in the "most expensive idle GPUs" table.
TOP_GPUS = 10
#: Rows in the "biggest movers since the previous night" table.
TOP_MOVERS = 10


class ReportError(Exception):
    """RESULTS holds nothing a report can be made of (the message says what is missing)."""


@dataclass
class Results:
    """What a report is made of.

    Attributes:
        source: the RESULTS path as given.
        kind: ``"run"`` (one run output dir) or ``"sweep"`` (a nightly-sweep state dir).
        current: the current fleet table (the latest night of a sweep).
        current_date: ``YYYY-MM-DD`` of the current night (a run: the date fleet.parquet was written).
        run_dir: the current night's run output dir (gpus/, records/), None when absent.
        history: ``[(date, fleet), ...]`` oldest first; a run dir has one entry (the whole
            table); a sweep's nights hold only :data:`HISTORY_COLUMNS`.
        lacking: the nights the history lacks because a file of theirs is damaged (truncated, empty,
            not a fleet table): ``[{"date", "file" (relative to the state folder), "why"}]``, by date
            (:func:`history_part`); the trend says so.
        priced_with: None when the current table is as its run priced it; else what priced it again as it
            was read (:func:`priced_with`: the configuration files, their rate card's digest, the rates).
        rolled: (a property) the current table's roll-ups, fix-first lists and rate assumptions, made by the fleet
            stage (:func:`pipeline.fleet.reduce.rolled`): the report formats them.
    """

    source: str
    kind: str
    current: pd.DataFrame
    current_date: str
    run_dir: str | None
    history: list[tuple[str, pd.DataFrame]] = field(default_factory=list)
    lacking: list[dict] = field(default_factory=list)
    priced_with: dict | None = None
    _rolled: tuple = field(default=(None, None), repr=False, compare=False)

    @property
    def rolled(self) -> Rolled:
        """The current table's :class:`~pipeline.fleet.reduce.Rolled`, made by the fleet stage once per table (again
        when :attr:`current` is replaced), with every column there as :func:`summarise` reads it."""
        table, made = self._rolled
        if table is not self.current:
            made = rolled(conform(self.current))
            self._rolled = (self.current, made)
        return made


def priced_with(cfg, configs=(), fleet: pd.DataFrame | None = None, run_table: pd.DataFrame | None = None,
                run_folder: str | None = None) -> dict | None:
    """What prices a report's current table (docs/outputs.md#reports-for-people), None without ``cfg`` (the table as
    its run priced it): ``{"configs": the configuration files given (their paths; none: the defaults), "hash": the
    first 12 hex digits of the digest of the settings that price (:func:`pipeline.store.results.pricing_hash`),
    "hours_per_month", "rates": [{model, usd_per_gpu_hour}] of the card, "cluster_rates": {cluster: {model:
    rate}}, "kept": {why: GPUs} the GPUs of ``fleet`` (the table priced again) that kept their run's pricing
    (:func:`pipeline.fleet.pricing.kept_run_pricing`),
    "run_rates": [{model, usd_per_gpu_hour}] the run's own table ``run_table`` priced its analysed GPUs at,
    "run_hours": the hours per month its folder ``run_folder`` records (:func:`run_hours`)}``: what the parts a
    re-priced report withholds (:func:`withheld`) are priced at."""
    if cfg is None:
        return None
    own = conform(ok_rows(run_table), ["rate_model", "rate_usd_per_hour"]) if run_table is not None and len(run_table) \
        else pd.DataFrame(columns=["rate_model", "rate_usd_per_hour"])
    pairs = sorted({(str(m or "unknown"), float(r)) for m, r in zip(own["rate_model"], own["rate_usd_per_hour"])
                    if r is not None and r == r})
    return {"configs": [os.fspath(c) for c in configs], "hash": pricing_hash(cfg)[:12],
            "hours_per_month": float(cfg.cost.hours_per_month),
            "rates": [{"model": r.model, "usd_per_gpu_hour": float(r.usd_per_gpu_hour)} for r in cfg.cost.rates],
            "cluster_rates": {c: dict(m) for c, m in (cfg.cost.cluster_rates or {}).items()},
            "kept": kept_run_pricing(fleet) if fleet is not None else {},
            "run_rates": [{"model": m, "usd_per_gpu_hour": r} for m, r in pairs], "run_hours": run_hours(run_folder)}


def withheld(res: "Results") -> bool:
    """Whether the report of ``res`` withholds what holds its run's own dollars and cannot be priced again from the
    table: the medical records (``records/*.md``, written with the run's dollars), the teams table (the scheduler's
    accounting, at the run's rates) and the earlier nights of the trend (each at its own night's rates): a report
    priced again as it was read (:attr:`Results.priced_with`) shows one price, the card given, or none."""
    return bool(res.priced_with)


def shown_records(res: "Results", keys) -> dict[str, str]:
    """:func:`records` of the current night's folder, ``{}`` when the report withholds them (:func:`withheld`)."""
    return {} if withheld(res) else records(res.run_dir, keys)


#: The columns the history of earlier nights is read with (:func:`trend` needs no more); the
#: current night's table is read whole. A year of nights stays a few column reads per night.
HISTORY_COLUMNS = ["report", "job", "cluster", "status", "idle_usd_per_month",
                   *(c for c in CHANGE_COLUMNS if c not in ("report", "job", "cluster", "idle_usd_per_month"))]


def _read_fleet(path: str, columns: list[str] | None = None) -> pd.DataFrame:
    """A fleet table from Parquet without the ``run_date`` partition column; with ``columns``,
    only those of them the file has."""
    if columns is not None:
        names = set(pq.read_schema(path).names)
        return pq.read_table(path, columns=[c for c in columns if c in names]).to_pandas()
    frame = pd.read_parquet(path)
    return frame.drop(columns=[c for c in ("run_date",) if c in frame.columns])


#: What a reader reads of a run folder (or sweep night): its fleet table, per-GPU JSON and medical records
#: (:func:`vouched_folder` checks them against the folder's manifest).
READ_FILES = ("fleet.parquet",)
READ_DIRS = ("gpus/", "records/")


def vouched_folder(folder: str, dirs: tuple = READ_DIRS) -> None:
    """Check that the run folder (or sweep night) ``folder`` is one its manifest vouches for, before any
    reader (``report``, ``compare``, the sweep's page and comparison) reads it: the manifest
    (:data:`~pipeline.store.results.MANIFEST`) is there and says complete, and every file a reader reads
    (:data:`READ_FILES`, and every file it lists under ``dirs``: :data:`READ_DIRS` unless the reader reads
    fewer, e.g. the table alone) is listed with the size and SHA-256 it still has. The one check of every reader of a run folder. Raises :class:`ReportError` saying plainly
    what is missing or changed (nothing of the folder is read then)."""

    doc = read_manifest(folder)
    again = "run it again (gpu-idle run --out, or the sweep) to make it whole"
    if doc is None:
        raise ReportError(f"{folder}: not read: no manifest of gpu-idle's ({MANIFEST}) vouches for its files; {again}")
    read = [rel for rel in doc["files"] if rel in READ_FILES or (dirs and rel.startswith(tuple(dirs)))]
    missing = sorted([rel for rel in READ_FILES if rel not in doc["files"]]
                     + [rel for rel in read if not os.path.lexists(os.path.join(folder, rel))])
    unsure = sorted(rel for rel in read if doc["files"][rel] is None and rel not in missing)
    changed = sorted(rel for rel in read if rel not in missing and rel not in unsure
                     and not same_file(os.path.join(folder, rel), doc["files"][rel]))

    def named(rels: list) -> str:
        return ", ".join(rels[:5]) + (f" and {len(rels) - 5} more" if len(rels) > 5 else "")

    why = ([f"its manifest ({MANIFEST}) says it is incomplete (a run did not finish writing it)"]
           if not doc["complete"] else [])
    why += [f"missing {named(missing)}"] if missing else []
    why += [f"not vouched for (written by a run that did not finish): {named(unsure)}"] if unsure else []
    why += [f"changed since gpu-idle wrote them (size or SHA-256 not the manifest's): {named(changed)}"] \
        if changed else []
    if why:
        raise ReportError(f"{folder}: not read: " + "; ".join(why) + f"; {again}")


#: The columns without which a history file is no fleet table (:func:`history_part`).
HISTORY_NEEDS = ("report", "job", "cluster", "status", "idle_usd_per_month")


class DamagedPart(Exception):
    """A history file that is no readable fleet table; the message says why."""


def history_part(path: str, columns: list[str] | None = None) -> pd.DataFrame:
    """One history file (``history/run_date=…/*.parquet``) as :func:`_read_fleet` reads it. Raises
    :class:`DamagedPart` saying why when it is not a readable fleet table: truncated, empty, not Parquet, or
    without a column of :data:`HISTORY_NEEDS` (or with one that is not a number where money is)."""

    try:
        frame = _read_fleet(path, columns)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise DamagedPart(f"not a readable Parquet file ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
    missing = [c for c in HISTORY_NEEDS if c not in frame.columns]
    if missing:
        raise DamagedPart(f"not a fleet table (no column {', '.join(missing)})")
    try:
        frame["idle_usd_per_month"].astype(float)
    except (TypeError, ValueError) as exc:
        raise DamagedPart(f"not a fleet table (idle_usd_per_month is not a number: {exc})") from exc
    return frame


def is_sweep_dir(path: str) -> bool:
    """True when ``path`` looks like a nightly-sweep state dir (``history/`` or ``nights/``)."""
    return os.path.isdir(os.path.join(path, "history")) or os.path.isdir(os.path.join(path, "nights"))


def load_results(results_dir: str, night: str | None = None, cfg=None, configs=()) -> Results:
    """Read a run output dir or a sweep state dir (see the module docstring).

    Args:
        results_dir: the folder.
        night: for a sweep state dir, the night to report as current (``YYYY-MM-DD``; the
            history after it is ignored); default the latest not in the future.
        cfg: a configuration (:class:`~pipeline.config.Config`) whose rate card prices the current table again
            (:func:`pipeline.fleet.pricing.repriced`; the history stays as each night priced it); None: the table
            as its run priced it. ``configs``: the files it was read from, for :attr:`Results.priced_with`.
    Raises:
        ReportError: no fleet table found or ``night`` is not in the history.
    """
    results_dir = os.fspath(results_dir)
    if not is_sweep_dir(results_dir):
        if night is not None:
            raise ReportError(f"{results_dir}: a run output folder has no nights; --night needs a sweep state folder")
        path = os.path.join(results_dir, "fleet.parquet")
        if not os.path.exists(path):
            raise ReportError(f"{results_dir}: no fleet.parquet (not a `gpu-idle run --out` folder) and no "
                              f"history/ or nights/ (not a sweep state folder)")
        vouched_folder(results_dir)
        own = _read_fleet(path)
        fleet = _finished(own, results_dir, cfg)  # an older table: its fix columns as its run priced
        date = dt.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%Y-%m-%d")
        return Results(results_dir, "run", fleet, date, results_dir, [(date, fleet)],
                       priced_with=priced_with(cfg, configs, fleet, own, results_dir))

    nights = {d: p for d, p in dated_dirs(os.path.join(results_dir, "nights")).items()
              if os.path.exists(os.path.join(p, "fleet.parquet"))}
    parts = {}
    for date, part in dated_dirs(os.path.join(results_dir, "history"), "run_date=").items():
        files = sorted(glob.glob(os.path.join(part, "*.parquet")))
        if files:
            parts[date] = files
    dates = sorted(set(parts) | set(nights))
    if night is not None:
        if night not in dates:
            raise ReportError(f"{results_dir}: no night {night} (nights: {', '.join(dates) or 'none'})")
    elif dates:
        night = current_night(dates)  # the latest not in the future
        if night is None:
            raise ReportError(f"{results_dir}: every night is in the future ({', '.join(dates)}); --night names one")
    dates = [d for d in dates if night is None or d <= night]
    if not dates:
        raise ReportError(f"{results_dir}: sweep state folder without any night "
                          f"(no history/run_date=YYYY-MM-DD/*.parquet, no nights/YYYY-MM-DD/fleet.parquet)")

    lacking: list[dict] = []

    def night_table(date: str, columns: list[str] | None) -> pd.DataFrame | None:
        """The night's history (None, and said in ``lacking``, when a file of it is damaged)."""
        if date not in parts:   # the night's run finished but its history partition is not written (yet)
            return _read_fleet(os.path.join(nights[date], "fleet.parquet"), columns)
        frames = []
        for f in parts[date]:
            try:
                frames.append(history_part(f, columns))
            except DamagedPart as exc:
                lacking.append({"date": date, "file": os.path.relpath(f, results_dir), "why": str(exc)})
                return None
        return pd.concat(frames, ignore_index=True)

    date = dates[-1]
    run_dir = nights.get(date)
    if run_dir is not None:
        vouched_folder(run_dir)
    history = [(d, t) for d in dates if (t := night_table(d, HISTORY_COLUMNS)) is not None]
    if run_dir is not None:
        fleet = _read_fleet(os.path.join(run_dir, "fleet.parquet"))
    elif history and history[-1][0] == date:
        fleet = night_table(date, None)
    else:
        raise ReportError(f"{results_dir}: night {date} cannot be read: "
                          + "; ".join(f"{x['file']}: {x['why']}" for x in lacking if x["date"] == date))
    own, fleet = fleet, _finished(fleet, run_dir, cfg)
    if cfg is not None:   # the earlier nights at their own rates: withheld, the trend is tonight's alone (withheld)
        history, lacking = [(date, fleet)], []
    return Results(results_dir, "sweep", fleet, date, run_dir, history, lacking,
                   priced_with(cfg, configs, fleet, own, run_dir))


def ok_rows(fleet: pd.DataFrame) -> pd.DataFrame:
    """The analysed rows (status ok or partial); error rows carry no numbers."""
    return analysed_rows(fleet)


def fleet_usd(fleet: pd.DataFrame) -> float:
    """Fleet idle USD per month: the sum over the analysed GPUs."""
    return float(ok_rows(fleet)["idle_usd_per_month"].astype(float).sum())


def tier_ranks(rows: pd.DataFrame) -> list[int]:
    """Each row's place in every ranked list by its tier (:func:`pipeline.analysis.confidence.trust_rank`: 0 trusted,
    1 low, 2 toy); a row of no tier (a table written before the column) by its ``low_confidence`` flag (1 when
    low, else 0). Order by this, then by dollars: the printed table, the top GPUs, the timeline and the jobs."""
    rows = conform(rows, ["confidence_tier", "low_confidence"])
    return [trust_rank(t) if t in TIERS else int(bool(lc))
            for t, lc in zip(rows["confidence_tier"], rows["low_confidence"].fillna(False))]


def top_gpus(fleet: pd.DataFrame, n: int = TOP_GPUS) -> pd.DataFrame:
    """The ``n`` analysed GPUs ranked by tier (:func:`tier_ranks`: trusted, then low, then toy), then by the highest
    idle USD/month (ties: report, then GPU key); in each tier the unpriced GPUs (no dollars: NaN) after the priced
    ones, the most idle (``idle_pct``) first. The first is the GPU whose timeline the report shows."""
    ok = ok_rows(fleet).copy()
    ok["_usd"] = ok["idle_usd_per_month"].astype(float)
    ok["_tier"] = tier_ranks(ok)
    share = pd.to_numeric(conform(ok, ["idle_pct"])["idle_pct"], errors="coerce").fillna(0.0)
    ok["_share"] = share.where(ok["_usd"].isna(), 0.0)  # ranks the unpriced GPUs only
    ok["_usd"] = ok["_usd"].fillna(-math.inf)  # unpriced last within its tier (na_position acts across tiers)
    ok = ok.sort_values(["_tier", "_usd", "_share", "report", "gpu_key"], ascending=[True, False, False, True, True],
                        kind="stable")
    return ok.drop(columns=["_usd", "_share", "_tier"]).head(n)


def rate_card(fleet: pd.DataFrame) -> list[dict]:
    """The rate-card entries the current night used: model, USD per GPU-hour, source, GPU count."""
    ok = ok_rows(fleet)
    rows = []
    keys = ["rate_model", "rate_usd_per_hour", "rate_source"]
    for (model, rate, source), group in ok.groupby(keys, sort=True, dropna=False):
        models = sorted(m for m in set(group["gpu_model"].astype(str)) if m and m not in ("None", "nan"))
        rows.append({"model": str(model), "rate": float(rate), "source": str(source), "gpus": int(len(group)),
                     "gpu_models": ", ".join(models) or "unknown"})
    return rows


def job_categories(fleet: pd.DataFrame) -> list[dict]:
    """Per job: each category's share of the job's summed window (%), and the uncategorised slivers.

    Same definition as the medical record's line 2: category ns summed over the
    job's GPUs / summed window; ``slivers`` = sub-threshold holes of GPUs that are
    not launch-bound (the part of the idle that no category holds). Jobs in sorted
    order; a job whose summed window is not positive is left out. Sums are of
    int64 ns (exact), so one grouped sum gives the same numbers as a sum per job.
    """
    ok = ok_rows(fleet)
    if ok.empty:
        return []
    columns = ["window_ns", "idle_ns"] + [f"cat_{c}_ns" for c in CATEGORIES]
    frame = pd.DataFrame({c: ok[c].astype("int64") for c in columns}, index=ok.index)
    frame["slivers_ns"] = ok["device_sliver_ns"].astype("int64").where(~ok["launch_bound"].astype(bool), 0)
    for c in JOB_KEY:
        frame[c] = ok[c].astype(str)
    out = []
    for job, sums in zip(*_grouped_sums(frame)):
        window = float(sums["window_ns"])
        if window <= 0:
            continue
        shares = {c: 100.0 * float(sums[f"cat_{c}_ns"]) / window for c in CATEGORIES}
        out.append({"job": str(job), "shares": shares, "slivers": 100.0 * float(sums["slivers_ns"]) / window,
                    "idle_pct": 100.0 * float(sums["idle_ns"]) / window})
    return out


def _grouped_sums(frame: pd.DataFrame) -> tuple[list, list[dict]]:
    """``(job titles, [column -> int sum])`` of ``frame`` grouped by its :data:`~pipeline.schema.JOB_KEY`
    columns (text), by job name then cluster; titles: :func:`~pipeline.report.medical.job_titles`."""
    sums = frame.groupby(list(JOB_KEY), sort=True).sum()
    keys = list(sums.index)
    titles = job_titles(keys)
    at = sorted(range(len(keys)), key=lambda i: (keys[i][1], keys[i][0]))
    records = sums.to_dict("records")
    return [titles[keys[i]] for i in at], [records[i] for i in at]


def job_spread(fleet: pd.DataFrame) -> list[dict]:
    """Per job (:data:`~pipeline.schema.JOB_KEY`, by job name then cluster; ``job``: its title,
    :func:`~pipeline.report.medical.job_titles`): every GPU's idle % (GPU key, straggler flag), by report then GPU key."""
    ok = ok_rows(fleet)[["cluster", "job", "report", "gpu_key", "idle_pct", "straggler"]]
    ok = ok.assign(cluster=ok["cluster"].astype(str), job=ok["job"].astype(str))
    ok = ok.sort_values(["job", "cluster", "report", "gpu_key"], kind="stable")  # stable: ties keep table order
    titles = job_titles(job_keys(ok))
    out = []
    for key, g in ok.groupby(["job", "cluster"], sort=True):
        out.append({"job": titles[(key[1], key[0])], "gpus": [
            {"gpu_key": str(key), "idle_pct": float(idle), "straggler": bool(flag)}
            for key, idle, flag in zip(g["gpu_key"].tolist(), g["idle_pct"].tolist(), g["straggler"].tolist())]})
    return out


def gpu_doc(run_dir: str | None, report: str, gpu_key: str) -> dict | None:
    """The GPU's ``gpus/*.json`` document (roster, timeline, summary), None when absent."""
    text = gpu_json_text(run_dir, report, gpu_key)
    return None if text is None else json.loads(text)


def gpu_json_text(run_dir: str | None, report: str, gpu_key: str) -> str | None:
    """The text of the GPU's ``gpus/*.json`` file, None when absent."""
    if not run_dir:
        return None
    try:
        with open(os.path.join(run_dir, "gpus", gpu_json_name(report, gpu_key)), encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def records(run_dir: str | None, keys) -> dict[str, str]:
    """``{file stem: Markdown}`` of the medical-record pages of the jobs ``keys`` (the fleet's
    ``(cluster, job)`` pairs, :func:`~pipeline.report.medical.job_keys`): ``records/<stem>.md``
    (:func:`~pipeline.report.medical.record_stems`), by stem, those that exist. Only these: another file in
    ``records/`` (a person's notes) is no record of this fleet and is never shown."""
    folder = os.path.join(run_dir, "records") if run_dir else None
    out = {}
    if not folder or not os.path.isdir(folder):
        return out
    for stem in sorted(set(record_stems(keys).values())):
        try:
            with open(os.path.join(folder, stem + ".md"), encoding="utf-8") as fh:
                out[stem] = fh.read()
        except FileNotFoundError:
            pass
    return out


def record_anchors(keys, recs: dict[str, str]) -> dict:
    """``(cluster, job) -> HTML id`` of each job's medical-record section (its page's file stem, prefixed)
    among ``keys``, for the jobs whose page :func:`records` ``recs`` has."""
    return {key: "record-" + stem for key, stem in record_stems(keys).items() if stem in recs}


def trend(history: list[tuple[str, pd.DataFrame]], hours: dict | None = None) -> dict:
    """Fleet idle USD per night, and what changed between the last two nights, split by cause.

    Args:
        history: ``[(date, fleet)]`` oldest first (:attr:`Results.history`).
        hours: ``{date: hours per month}`` each night priced with (:func:`night_hours`); a night it does
            not name: the default ``cost.hours_per_month``.
    Returns:
        ``nights``: ``[{date, usd, delta, gpus, failed_reports, jobs}]`` oldest first
        (``delta`` against the night before, None for the first);
        ``previous`` / ``current``: the two dates compared (``previous`` None with one night);
        ``new_jobs``: jobs only in the current night ``[{job, cluster, usd}]``;
        ``gone_jobs``: jobs only in the previous night (fixed, or no longer profiled);
        ``causes``: the change of the last two nights split into idle, rate and fleet parts
        (:func:`~pipeline.fleet.changes.split`, docs/definitions.md#trend), None with one night;
        ``movers``: jobs in both nights with a non-zero change, by |idle part| descending, then |Δ USD|
        (ties: job), at most :data:`TOP_MOVERS`: ``[{job, cluster, before, after, delta, idle, rate, fleet,
        causes}]`` (``causes``: the parts that are not zero, :func:`~pipeline.fleet.changes.cause_names`).
    """
    nights, prev_usd = [], None
    for date, fleet in history:
        usd = fleet_usd(fleet)
        err = fleet[fleet["status"] == "error"]
        nights.append({"date": date, "usd": usd, "delta": None if prev_usd is None else usd - prev_usd,
                       "gpus": int(len(ok_rows(fleet))), "failed_reports": int(err["report"].nunique()),
                       "jobs": len(job_keys(fleet))})
        prev_usd = usd
    out = {"nights": nights, "previous": None, "current": history[-1][0] if history else None,
           "new_jobs": [], "gone_jobs": [], "movers": [], "causes": None}
    if len(history) < 2:
        return out
    (d0, f0), (d1, f1) = history[-2], history[-1]
    default = settings_hours(None)
    causes = split(ok_rows(f0), ok_rows(f1), (hours or {}).get(d0, default), (hours or {}).get(d1, default))
    before, after = set(job_keys(f0)), set(job_keys(f1))
    parts = {k: causes["jobs"].get(k) or dict.fromkeys(("before", "after", "delta", "idle", "rate", "fleet"), 0.0)
             for k in before | after}
    titles = job_titles(before | after)

    def order(keys) -> list:
        return sorted(keys, key=lambda k: (k[1], k[0]))

    out["previous"], out["causes"] = d0, causes
    out["new_jobs"] = [{"job": titles[k], "cluster": k[0], "usd": parts[k]["after"]} for k in order(after - before)]
    out["gone_jobs"] = [{"job": titles[k], "cluster": k[0], "usd": parts[k]["before"]} for k in order(before - after)]
    movers = [{"job": titles[k], "cluster": k[0], **{p: parts[k][p] for p in ("before", "after", "delta", "idle",
                                                                               "rate", "fleet")},
               "causes": parts[k].get("causes", [])}
              for k in order(before & after) if round(parts[k]["delta"], 2) != 0]
    movers.sort(key=lambda m: (-abs(m["idle"]), -abs(m["delta"]), m["job"]))
    out["movers"] = movers[:TOP_MOVERS]
    return out


def night_hours(res: Results) -> dict:
    """``{date: hours per month}`` of the last two nights of ``res`` (:func:`run_hours` of each night's
    folder: the current night's run folder, an earlier night's ``nights/<date>/`` of the sweep state)."""
    dates = [d for d, _ in res.history][-2:]
    folders = {d: os.path.join(res.source, "nights", d) for d in dates} if res.kind == "sweep" else {}
    folders[res.current_date] = res.run_dir
    hours = {d: run_hours(folders.get(d)) for d in dates}
    if res.priced_with and res.current_date in hours:   # the current night priced again as it was read
        hours[res.current_date] = res.priced_with["hours_per_month"]
    return hours


def comm_exposure(fleet: pd.DataFrame) -> dict | None:
    """The fleet's exposed communication (:mod:`pipeline.analysis.overlap`), summed over the analysed
    GPUs: ``comm_ns``, ``overlapped_ns``, ``exposed_ns``, ``window_ns`` (int ns), ``exposed_pct``
    (of the summed windows, 0..100), ``usd`` (sum of ``comm_exposed_usd_per_month``) and ``gpus``
    (those with exposed communication). None when no GPU has any (a table written before the columns
    existed has none: :func:`pipeline.schema.conform`); ``usd`` is NaN when those GPUs are all unpriced
    (:func:`~pipeline.analysis.cost.priced_sum`). How much of ``usd`` rests on assumed rates, over those GPUs
    (docs/definitions.md#cost): ``assumed_usd``, ``assumed_gpus``, ``unpriced_gpus`` and ``unpriced_models``
    (:func:`~pipeline.analysis.cost.assumed_split`)."""
    ok = conform(ok_rows(fleet))
    if not len(ok):
        return None
    exposed = ok["comm_exposed_ns"].fillna(0).astype("int64")
    if int(exposed.sum()) == 0:
        return None
    window = int(ok["window_ns"].astype("int64").sum())
    at = ok[exposed > 0]   # the GPUs with exposed communication
    rates = assumed_split(at["comm_exposed_usd_per_month"].astype(float).to_numpy(),
                          at["rate_assumed"].astype(bool).to_numpy(), at["unpriced"].astype(bool).to_numpy(),
                          at["gpu_model"].tolist())
    return {"comm_ns": int(ok["comm_ns"].fillna(0).astype("int64").sum()),
            "overlapped_ns": int(ok["comm_overlapped_ns"].fillna(0).astype("int64").sum()),
            "exposed_ns": int(exposed.sum()), "window_ns": window,
            "exposed_pct": 100.0 * float(exposed.sum()) / float(window) if window else 0.0,
            "usd": priced_sum(at["comm_exposed_usd_per_month"].astype(float)), "gpus": int((exposed > 0).sum()),
            **rates}


def comm_idle(fleet: pd.DataFrame) -> dict | None:
    """The part of the fleet's idle cost that is communication: the ``comm`` category's idle (device-level gaps after
    a collective kernel, docs/definitions.md#categories), summed over the analysed GPUs: ``ns`` (Σ ``cat_comm_ns``),
    ``usd`` (Σ ``fix_comm_usd_per_month``, the comm entries of the fix-first list; NaN when those GPUs are all
    unpriced), ``gpus`` (those with comm idle) and ``assumed`` (how many of them are priced at an assumed rate).
    Part of ``idle_usd_per_month``, unlike the busy time inside collectives beside it. None without comm idle."""
    ok = conform(ok_rows(fleet), ["cat_comm_ns", "fix_comm_usd_per_month", "rate_assumed"])
    ns = ok["cat_comm_ns"].fillna(0).astype("int64") if len(ok) else pd.Series([], dtype="int64")
    if not int(ns.sum()):
        return None
    at = ok[ns > 0]
    return {"ns": int(ns.sum()), "usd": priced_sum(at["fix_comm_usd_per_month"].astype(float)),
            "gpus": int(len(at)), "assumed": int(at["rate_assumed"].astype(bool).sum())}


#: Entries of the fleet's fix-first list shown in the Markdown variant.
TOP_FIXES = 5


def recorded_pricing(folder: str | None) -> dict | None:
    """The pricing settings the manifest of ``folder`` (a run folder or sweep night) records under
    :data:`~pipeline.fleet.pricing.PRICING`; None when it records none (a folder written before it did) or there is
    no folder."""
    doc = read_manifest(folder) if folder else None
    settings = doc.get(PRICING) if doc else None
    return settings if isinstance(settings, dict) else None


def _finished(fleet: pd.DataFrame, folder: str | None, cfg) -> pd.DataFrame:
    """The fleet table of ``folder`` (the run folder or the night's) as the fleet stage finishes it
    (:func:`pipeline.fleet.pricing.finished`: priced as its run priced it, with the settings :func:`recorded_pricing`
    finds; with ``cfg``, priced again with its rate card: a GPU whose pricing the table does not hold keeps its
    run's, :func:`pipeline.fleet.pricing.kept_run_pricing`)."""
    return finished(fleet, recorded_pricing(folder), cfg)


def run_hours(folder: str | None) -> float:
    """The hours per month the run whose folder (or sweep night) is ``folder`` priced its dollars with
    (:func:`recorded_pricing`, docs/definitions.md#cost); the default ``cost.hours_per_month`` when it
    records none or no number."""
    return settings_hours(recorded_pricing(folder))


#: GPUs named (linked to their pages) per fix-first entry of the report.
FIX_GPUS = 3


def meter_summary(fleet: pd.DataFrame) -> dict | None:
    """The sampled meter beside the truth over the analysed GPUs of ``fleet`` (docs/definitions.md#sampled-meter),
    over those whose window holds enough sample periods for a reading
    (:func:`~pipeline.analysis.meter.enough_periods`): ``{"sampled_util_pct": 100 × Σ sampled_busy_periods / Σ
    sample_periods (%, period-weighted), "busy_pct": 100 × Σ busy_ns / Σ window_ns, "idle_pct": 100 × Σ idle_ns / Σ
    window_ns (%, window-weighted), "gpus": those GPUs, "periods": their Σ sample_periods}`` (the figures None when
    no GPU has enough), and ``"short"``: the periods of each GPU with too few, ``"all_gpus"``: every GPU with the
    meter's columns. None when none has them (a table written before the meter existed) or they hold no period."""
    ok = conform(analysed_rows(fleet), ["sample_periods", "sampled_busy_periods", "busy_ns"])
    ok = ok[ok["sample_periods"].notna()]
    if not len(ok) or not int(ok["sample_periods"].astype("int64").sum()):
        return None
    periods_each = ok["sample_periods"].astype("int64")
    enough = ok[periods_each >= FEW_PERIODS_PER_GPU]
    short = sorted(int(p) for p in periods_each[periods_each < FEW_PERIODS_PER_GPU])
    out = {"sampled_util_pct": None, "busy_pct": None, "idle_pct": None, "gpus": int(len(enough)), "periods": 0,
           "short": short, "all_gpus": int(len(ok))}
    if len(enough):
        periods = int(enough["sample_periods"].astype("int64").sum())
        window = int(enough["window_ns"].astype("int64").sum())
        out.update(sampled_util_pct=util_pct(int(enough["sampled_busy_periods"].astype("int64").sum()), periods),
                   busy_pct=round(100.0 * int(enough["busy_ns"].astype("int64").sum()) / window, 4),
                   idle_pct=round(100.0 * int(enough["idle_ns"].astype("int64").sum()) / window, 4), periods=periods)
    return out


def extrapolation_basis(fleet: pd.DataFrame) -> dict | None:
    """What every month of the fleet is extrapolated from, for the report's first screen
    (docs/outputs.md#reports-for-people): over the analysed GPUs, ``gpus``, ``window_ns`` (Σ), ``window_min_ns`` and
    ``window_max_ns`` (one GPU's), ``iterations_min`` and ``iterations_max`` over the GPUs whose window is made of
    stable iterations (``iterations`` > 0; None without one), ``iteration_counts`` (``[[iterations, GPUs], …]`` over
    those GPUs, fewest iterations first) and ``no_iterations`` (how many GPUs' windows hold none: a span, a trim),
    ``periods_min`` and ``periods_max`` (the sampled meter's periods per GPU; None without the
    column); over the GPUs whose row has a capture (``capture_ns``; docs/definitions.md#job-kind), ``capture_gpus``,
    ``capture_ns`` (Σ), ``capture_min_ns`` and ``capture_max_ns`` (one GPU's, first kernel to last),
    ``capture_idle_ns`` (Σ) and ``left_out_idle_ns``: the captures' idle outside the windows, never priced
    (:func:`~pipeline.report.medical.captured_idle`; 0 GPUs and None without the columns). None without an analysed
    GPU."""
    ok = conform(ok_rows(fleet), ["iterations", "sample_periods", "capture_ns", "capture_idle_ns",
                                  "window_left_out_idle_ns", "window_left_out_idle_pct"])
    if not len(ok):
        return None
    captured = ok[ok["capture_ns"].notna()]
    capture = captured["capture_ns"].astype("int64")
    cap_idle, left = captured_idle(captured[["capture_idle_ns", "window_left_out_idle_ns",
                                             "window_left_out_idle_pct"]].to_dict("records"))
    window = ok["window_ns"].astype("int64")
    its = pd.to_numeric(ok["iterations"], errors="coerce").fillna(0).astype("int64")
    periods = pd.to_numeric(ok["sample_periods"], errors="coerce").dropna().astype("int64")
    with_its = its[its > 0]
    return {"gpus": int(len(ok)), "window_ns": int(window.sum()), "window_min_ns": int(window.min()),
            "window_max_ns": int(window.max()),
            "iterations_min": int(with_its.min()) if len(with_its) else None,
            "iterations_max": int(with_its.max()) if len(with_its) else None,
            "no_iterations": int((its <= 0).sum()),
            "iteration_counts": [[int(n), int(k)] for n, k in with_its.value_counts().sort_index().items()],
            "periods_min": int(periods.min()) if len(periods) else None,
            "periods_max": int(periods.max()) if len(periods) else None,
            "capture_gpus": int(len(captured)), "capture_ns": int(capture.sum()) if len(capture) else None,
            "capture_min_ns": int(capture.min()) if len(capture) else None,
            "capture_max_ns": int(capture.max()) if len(capture) else None,
            "capture_idle_ns": cap_idle if len(capture) else None, "left_out_idle_ns": left if len(capture) else None}


def trust_split(fleet: pd.DataFrame) -> dict:
    """The headline's idle USD per month cut by ``confidence_tier`` (docs/definitions.md#confidence-tiers),
    over the analysed GPUs: ``trusted_usd`` and ``trusted_gpus`` (tiers ``medium`` and ``high``),
    ``other_usd`` and ``other_gpus`` (``toy``, ``low``, and a row without a tier), and per tier of
    :data:`~pipeline.analysis.confidence.TIERS` ``tiers[tier] = {"gpus", "usd"}``. ``trusted_usd +
    other_usd`` is :func:`fleet_usd` (to rounding). A part whose GPUs are all unpriced has NaN dollars (unpriced,
    :func:`~pipeline.analysis.cost.unpriced_total`), never 0; ``trusted_unpriced``, ``other_unpriced`` and each
    tier's ``unpriced`` count the unpriced GPUs."""
    ok = conform(ok_rows(fleet), ["unpriced"])
    usd = ok["idle_usd_per_month"].astype(float).fillna(0.0)
    unpriced = ok["unpriced"].astype(bool)
    tier = ok["confidence_tier"].astype(object)

    def total(part: pd.Series) -> float:   # unpriced when none of the part's GPUs is priced
        n = int(unpriced[part].sum())
        return math.nan if unpriced_total(int(part.sum()) - n, n) else float(usd[part].sum())

    tiers = {t: {"gpus": int((tier == t).sum()), "usd": total(tier == t), "unpriced": int(unpriced[tier == t].sum())}
             for t in TIERS}
    good = tier.isin(TRUSTED)
    return {"trusted_usd": total(good), "trusted_gpus": int(good.sum()), "trusted_unpriced": int(unpriced[good].sum()),
            "other_usd": total(~good), "other_gpus": int((~good).sum()), "other_unpriced": int(unpriced[~good].sum()),
            "tiers": tiers}


def headline_idle(fleet: pd.DataFrame) -> dict:
    """The headline's device-level idle % and speed-up (docs/outputs.md#reports-for-people), never pooling untrusted
    captures unmarked: over the analysed GPUs of a trusted tier (:func:`tier_ranks` 0: ``medium``, ``high``) when
    there are some, the others left out and counted; with none, over every GPU, flagged ``untrusted_only``.
    ``{"idle_pct": 100 × Σ idle_ns / Σ window_ns of those GPUs, "speedup": 1 / (1 − idle fraction) (0 at 100 %),
    "gpus", "left_out": the toy or low GPUs left out, "left_out_tiers": ``toy 1, low 2``, "all_idle_pct": the
    figure over every GPU, "untrusted_only", "meter": the sampled meter beside it over the same GPUs
    (:func:`meter_summary`), "basis": what their months are extrapolated from (:func:`extrapolation_basis`)}``."""
    ok = ok_rows(fleet)
    ranks = pd.Series(tier_ranks(ok), index=ok.index, dtype="int64") if len(ok) else pd.Series([], dtype="int64")
    trusted = ok[ranks == 0]
    used = trusted if len(trusted) else ok

    def idle(rows) -> float:
        window = int(rows["window_ns"].astype("int64").sum()) if len(rows) else 0
        return 100.0 * int(rows["idle_ns"].astype("int64").sum()) / window if window > 0 else 0.0

    pct = idle(used)
    left = ok[ranks > 0] if len(trusted) else ok.iloc[0:0]
    tiers = conform(left, ["confidence_tier"])["confidence_tier"].astype(object)
    counts = [f"{t} {int((tiers == t).sum())}" for t in ("toy", "low") if int((tiers == t).sum())]
    return {"idle_pct": pct, "speedup": 100.0 / (100.0 - pct) if pct < 100 else 0.0, "gpus": int(len(used)),
            "left_out": int(len(left)), "left_out_tiers": ", ".join(counts), "all_idle_pct": idle(ok),
            "untrusted_only": bool(len(ok)) and not len(trusted), "meter": meter_summary(used) if len(used) else None,
            "basis": extrapolation_basis(used)}


def fix_gpus(fleet: pd.DataFrame, category: str, n: int = FIX_GPUS, part: int | None = None,
             analysed: pd.DataFrame | None = None) -> list[dict]:
    """The ``n`` analysed GPUs with the most recoverable USD per month in ``category``
    (``fix_<category>_usd_per_month`` > 0; ties: report, GPU key), then the unpriced GPUs with idle of the category
    (``unpriced``, ``cat_<category>_ns`` > 0; most idle first, ties: report, GPU key; their ``usd`` NaN, as an
    unpriced entry's GPUs are named too, docs/definitions.md#cost): ``[{report, gpu_key, usd}]``. ``part``:
    only the GPUs of that part of the list (:func:`pipeline.analysis.confidence.trust_rank` of their tier: 0 the
    trusted, 1 ``low``, 2 ``toy``; docs/definitions.md#confidence-tiers), as each fix-first entry rests on one part;
    None: every GPU. ``analysed``: ``fleet``'s analysed rows with those two columns (:func:`_fix_rows`), when
    already made."""
    ok = _fix_rows(fleet) if analysed is None else analysed
    if part is not None:
        ok = ok[ok["confidence_tier"].map(trust_rank) == int(part)]
    column = f"fix_{category}_usd_per_month"
    usd = ok[column].astype(float).fillna(0.0)
    rows = ok.assign(_usd=usd)[usd > 0].sort_values(["_usd", "report", "gpu_key"], ascending=[False, True, True],
                                                    kind="stable").head(n)
    out = [{"report": str(r), "gpu_key": str(g), "usd": float(u)}
           for r, g, u in zip(rows["report"], rows["gpu_key"], rows["_usd"])]
    idle = ok[f"cat_{category}_ns"].fillna(0).astype("int64")
    unpriced = ok.assign(_ns=idle)[ok["unpriced"].astype(bool) & (idle > 0)].sort_values(
        ["_ns", "report", "gpu_key"], ascending=[False, True, True], kind="stable").head(n - len(out))
    return out + [{"report": str(r), "gpu_key": str(g), "usd": math.nan}
                  for r, g in zip(unpriced["report"], unpriced["gpu_key"])]


def fix_first(fleet: pd.DataFrame, fixes: pd.DataFrame) -> list[dict]:
    """The fleet-level fix-first list of ``fixes`` (the fleet's ranked lists, :attr:`Rolled.fixes
    <pipeline.fleet.reduce.Rolled>`: :func:`~pipeline.analysis.fixfirst.fix_list`; scope ``fleet``),
    largest recoverable USD per month first: dicts of :data:`~pipeline.analysis.fixfirst.FIX_COLUMNS`
    (no example gaps: the page quotes none), its ``device idle`` section only (the wait inside collectives has its
    own section: :func:`pipeline.report.medical.collective_summary`), ``top_gpus``, the GPUs with the most of it
    (:func:`fix_gpus`), ``wins_back`` (:func:`pipeline.report.words.wins_back`: what a fix wins back, ``""``
    when the whole idle) and ``wins_back_basis``, the label of that figure (:func:`~pipeline.report.words.wins_back_basis`). Never ``profiler`` or ``untraced``; empty without an analysed GPU."""
    analysed = _fix_rows(fleet)   # once for every entry
    if not len(analysed):
        return []
    by_gpu = analysed.sort_values(["report", "gpu_key"], kind="stable")
    return [dict(e, rank=None if pd.isna(e["rank"]) else int(e["rank"]),   # archived: unranked
                 top_gpus=fix_gpus(fleet, e["category"], part=trust_rank(e["confidence_tier"]), analysed=analysed),
                 confidence_title=confidence_title(fleet, e["category"], rank=trust_rank(e["confidence_tier"]),
                                                   analysed=by_gpu),
                 wins_back=wins_back(e["idle_usd_per_month"], e["fix_wins_back_usd_per_month"], e["fix_wins_back_basis"]),
                 wins_back_basis=wins_back_basis(e["idle_usd_per_month"], e["fix_wins_back_usd_per_month"],
                                                 e["fix_wins_back_basis"]),
                 remedy_parts=fixfirst.remedy_parts(e["remedy"]))
            for e in fixes[(fixes["scope"] == "fleet") & (fixes["section"] == fixfirst.DEVICE_IDLE)].to_dict("records")]


#: GPUs named in a fix-first entry's low-confidence hover text (the others are counted).
TITLE_GPUS = 3


def gpu_names_in_jobs(fleet: pd.DataFrame) -> dict:
    """``(report, gpu_key) -> "H100 #3 9b5c4f8d in llm-pretrain"`` for the analysed rows: the GPU's display
    name (:func:`~pipeline.report.medical.gpu_names`) and its job's title."""
    titles = job_titles(job_keys(fleet))
    jobs = {(str(r), str(g)): titles.get((str(c), str(j)), str(j))
            for c, j, r, g in zip(fleet["cluster"], fleet["job"], fleet["report"], fleet["gpu_key"])}
    return {key: f"{name} in {jobs[key]}" for key, name in gpu_names(fleet).items()}


def _fix_rows(fleet: pd.DataFrame) -> pd.DataFrame:
    """The analysed rows of ``fleet`` with ``unpriced`` and ``confidence_tier`` (None where the table has neither)."""
    return conform(ok_rows(fleet), ["unpriced", "confidence_tier"])


def confidence_title(fleet: pd.DataFrame, category: str, n: int = TITLE_GPUS, rank: int | None = None,
                     analysed: pd.DataFrame | None = None) -> str:
    """The hover text of a fix-first entry's low-confidence marker, short whatever the fleet's size: how
    many of the entry's GPUs (those with idle of ``category`` whose tier is not trusted: the entry apart; ``rank``:
    only those of that :func:`pipeline.analysis.confidence.trust_rank`, the entry's own part) are
    low confidence, each kind of shortfall
    with its count (:func:`~pipeline.analysis.fixfirst.confidence_kinds`), the first ``n`` of them by
    display name (:func:`gpu_names_in_jobs`; by report and GPU key) and how many more; the full list (report, GPU
    key and note of each) stays in ``fix_first.json`` / ``fix_first.csv``. ``""`` when none is low. ``analysed``:
    :func:`_fix_rows` of ``fleet`` by report and GPU key, when already made."""
    ok = _fix_rows(fleet).sort_values(["report", "gpu_key"], kind="stable") if analysed is None else analysed
    part = ok[(ok[f"cat_{category}_ns"].fillna(0) > 0) & ~ok["confidence_tier"].isin(TRUSTED)]   # the apart entry's
    if rank is not None:
        part = part[part["confidence_tier"].map(trust_rank) == int(rank)]
    low = part[part["low_confidence"].fillna(False).astype(bool)]
    if low.empty:
        return ""
    kinds: dict = {}
    for note in low["confidence_note"]:
        for kind in fixfirst.confidence_kinds(note):
            kinds[kind] = kinds.get(kind, 0) + 1
    names = gpu_names_in_jobs(fleet)
    shown = [names[(str(r), str(g))] for r, g in zip(low["report"].head(n), low["gpu_key"].head(n))]
    more = len(low) - len(shown)
    return (f"low confidence on {len(low)} of the {len(part)} GPU(s) with {category} idle ("
            + "; ".join(f"{k}: {c}" for k, c in sorted(kinds.items(), key=lambda kc: (-kc[1], kc[0])))
            + "): " + ", ".join(shown) + (f" and {more} more" if more else "")
            + ". Every GPU and why: fix_first.json")


def figure_caveats(row: dict) -> dict:
    """What qualifies one GPU's dollar figure (the top-10 table's and ``--format md``'s markers):
    ``low_confidence`` (bool) with ``confidence_marker`` (:func:`~pipeline.analysis.fixfirst.confidence_marker`,
    e.g. ``toy capture: 8.6 ms window, 14 kernels``, ``low confidence: 4 stable iterations``) and
    ``confidence_note``; ``rate_assumed`` (the row's ``rate_assumed`` or ``unpriced``: the GPU's model is not on
    the rate card or not named, so it is priced at the default model's rate, or not priced) with ``rate_marker``
    (``≈ H100 rate``, or ``unpriced``) and ``rate_title`` (why, quoting ``rate_source``). A row from before the
    confidence columns: not low; from before the ``rate_assumed`` column: what its ``rate_source`` says
    (:data:`pipeline.schema.DERIVED`)."""
    low = bool(row.get("low_confidence")) and not pd.isna(row.get("low_confidence"))
    note = "" if not low else str(row.get("confidence_note") or "")
    tier = str(row.get("confidence_tier") or "")
    model, rate = str(row.get("rate_model") or ""), str(row.get("rate_source") or "")
    assumed = bool(row["rate_assumed"]) if "rate_assumed" in row else source_says_assumed(rate)
    unpriced = bool(row.get("unpriced")) and not pd.isna(row.get("unpriced"))
    named = str(row.get("gpu_model") or "")
    named = "" if named in ("None", "nan") else named
    why = f"{named} is not on the rate card" if named else "the GPU's model is not named"
    marker = "unpriced" if unpriced else f"≈ {model} rate" if assumed else ""
    title = (f"{why}: left unpriced ({rate})" if unpriced else
             f"{why}: priced as {model}, the default model ({rate})" if assumed else "")
    return {"low_confidence": low, "confidence_note": note,
            "confidence_marker": fixfirst.confidence_marker(note, int(row.get("window_ns") or 0),
                                                            int(row.get("iterations") or 0), tier) if low else "",
            "rate_assumed": assumed or unpriced, "rate_marker": marker, "rate_title": title}


def reconcile(fleet: pd.DataFrame, fixes: list[dict]) -> dict:
    """How the fix-first list adds up to the headline idle USD per month, in whole cents.

    Every device-level idle ns of a GPU is in exactly one of: an application category (the list, filed
    categories under 2 % included), the sub-threshold slivers of a GPU that is not launch-bound (no
    category holds them; on a launch-bound GPU they are ``launch``), ``profiler``, ``untraced``
    (``idle_ns = Σ cat_<c>_ns + slivers + cat_profiler_ns + cat_untraced_ns``). Each GPU's dollars are
    shares of its ``idle_usd_per_month`` in proportion to those ns (profiler and untraced: their own
    ``*_usd_per_month`` columns, derived that way for a table written before them: :data:`pipeline.schema.DERIVED`), so::

        headline = fix-first sum + slivers + profiler + untraced + other + rounding

    with ``other`` the idle ns no part holds (0 for tables this pipeline writes) and ``rounding`` what
    rounding every GPU's figures to cents leaves (a few cents). Returns ``{headline, fixes, slivers,
    profiler, untraced, other, rounding}`` in USD (each a whole number of cents) and the same parts in
    ns summed over the analysed GPUs under ``ns`` (``idle``, ``fixes``, ``slivers``, ``profiler``,
    ``untraced``, ``other``)."""
    ok = conform(ok_rows(fleet))  # a table written before some column: pipeline.schema.conform (DERIVED)

    def ns(col: str) -> pd.Series:
        return ok[col].fillna(0).astype("int64")

    idle = ns("idle_ns")
    app = sum((ns(f"cat_{c}_ns") for c in fixfirst.fixable()), pd.Series(0, index=ok.index, dtype="int64"))
    launch = ok["launch_bound"].fillna(False).astype(bool)   # launch-bound: its slivers are cat_launch_ns
    slivers = ns("device_sliver_ns").where(~launch, 0)
    prof, untr = ns("cat_profiler_ns"), ns("cat_untraced_ns")
    other = idle - app - slivers - prof - untr
    usd = ok["idle_usd_per_month"].astype(float).fillna(0.0)
    per_ns = (usd / idle.where(idle > 0)).fillna(0.0)      # each GPU's USD per month per idle ns

    def share(part: pd.Series) -> float:
        return float((per_ns * part).sum())

    def caveat(cat: str) -> float:
        return float(ok[f"{cat}_usd_per_month"].astype(float).fillna(0.0).sum())

    def cents(x: float) -> int:
        return int(round(x * 100))

    c = {"headline": cents(fleet_usd(fleet)),   # an unpriced entry (NaN) has no dollars: nothing to add
         "fixes": sum(cents(e["idle_usd_per_month"]) for e in fixes if e["idle_usd_per_month"] == e["idle_usd_per_month"]),
         "slivers": cents(share(slivers)), "profiler": cents(caveat("profiler")),
         "untraced": cents(caveat("untraced")), "other": cents(share(other))}
    c["rounding"] = c["headline"] - sum(v for k, v in c.items() if k != "headline")
    out = {k: v / 100 for k, v in c.items()}
    out["ns"] = {"idle": int(idle.sum()), "fixes": int(app.sum()), "slivers": int(slivers.sum()),
                 "profiler": int(prof.sum()), "untraced": int(untr.sum()), "other": int(other.sum())}
    return out


def stragglers(fleet: pd.DataFrame) -> list[dict]:
    """The straggler suspects of the analysed rows: ``[{cluster, job, report, gpu_key, idle_pct}]``,
    by cluster, job, report, GPU key."""
    ok = ok_rows(fleet)
    rows = ok[ok["straggler"].fillna(False).astype(bool)].sort_values(["cluster", "job", "report", "gpu_key"], kind="stable")
    return [{"cluster": str(c), "job": str(j), "report": str(r), "gpu_key": str(g), "idle_pct": float(p)}
            for c, j, r, g, p in zip(rows["cluster"], rows["job"], rows["report"], rows["gpu_key"], rows["idle_pct"])]


def gpu_roles(fleet: pd.DataFrame) -> dict:
    """Each analysed GPU's role in its job, as its page says it (docs/outputs.md#reports-for-people):
    ``(report, gpu_key) -> {"role", "text", "others": [(report, gpu_key, name)]}``. ``role`` is one of

    - ``alone``: the only analysed GPU of its job: no rank to wait on or to hold up;
    - ``straggler``: the job's straggler (``straggler``, docs/definitions.md#stragglers: the most idle GPU of a job
      whose GPUs' idle spreads over the threshold), and the late rank too when it entered most of its collective
      calls last (``collective_chronic``);
    - ``late rank``: not the straggler by idle, but the rank the others wait for inside collectives
      (``collective_chronic``);
    - ``waiting``: the job has a straggler or a late rank and this GPU is neither: it waits on them (``others``,
      those GPUs, named and linked by the page); its own wait inside collectives and comm idle are said where
      measured;
    - ``none``: a job of several GPUs with neither (the idle spreads within the threshold).

    ``text`` says it in words with the numbers (idle %, calls entered last); ``leads`` the words naming the GPUs it
    waits on (``the straggler H100 #13 750df4f4``, ``the late rank …``: the others that are one), which its page's
    prescription names (:func:`pipeline.report.gpu_page.prescription`); a straggler or late rank names and links
    the other one of its job, if any, too."""
    ok = conform(ok_rows(fleet), ["straggler", "collective_chronic", "collective_last_count", "collective_calls",
                                  "collective_wait_ns", "collective_wait_status", "cat_comm_ns"])
    names = gpu_names(fleet)
    titles = job_titles(job_keys(fleet))
    out: dict = {}
    # every column converted once, then each job's rows picked by position (a pandas step per job and column
    # cost ~1 s for 200 jobs)
    report, gpu = [str(r) for r in ok["report"]], [str(g) for g in ok["gpu_key"]]
    cols = {"idle": ok["idle_pct"].astype(float).tolist(),
            "strag": ok["straggler"].fillna(False).astype(bool).tolist(),
            "late": ok["collective_chronic"].fillna(False).astype(bool).tolist(),
            "last": pd.to_numeric(ok["collective_last_count"], errors="coerce").fillna(0).astype(int).tolist(),
            "calls": pd.to_numeric(ok["collective_calls"], errors="coerce").fillna(0).astype(int).tolist(),
            "wait": pd.to_numeric(ok["collective_wait_ns"], errors="coerce").fillna(0).astype("int64").tolist(),
            "measured": (ok["collective_wait_status"].astype(object) == "measured").tolist(),
            "comm": pd.to_numeric(ok["cat_comm_ns"], errors="coerce").fillna(0).astype("int64").tolist()}
    by_job: dict = {}
    for i, job_key in enumerate(zip(*(ok[c].tolist() for c in JOB_KEY))):
        by_job.setdefault(job_key, []).append(i)
    for (cluster, job), at in by_job.items():
        job = titles.get((str(cluster), str(job)), str(job))
        at = sorted(at, key=lambda i: (report[i], gpu[i]))
        keys = [(report[i], gpu[i]) for i in at]
        idle, strag, late, last, calls, wait, measured, comm = (
            dict(zip(keys, (col[i] for i in at))) for col in cols.values())
        n = len(keys)
        low, high = min(idle.values()), max(idle.values())
        leads = [k for k in keys if strag[k] or late[k]]

        def late_text(k) -> str:
            return f"entered the collectives last in {last[k]} of {calls[k]} calls: the other ranks wait for it there"

        def lead_words(x) -> str:
            return ("the straggler" if strag[x] else "the late rank") + f" {names.get(x, x[1])}"

        for k in keys:
            name = names.get(k, k[1])
            others = [x for x in leads if x != k]   # the GPUs it waits on
            linked = [(x[0], x[1], names.get(x, x[1])) for x in others]
            if n == 1:
                out[k] = {"role": "alone", "others": [], "leads": [],
                          "text": f"{name} is the only analysed GPU of job {job}: no other rank to wait on or hold up."}
            elif strag[k]:
                text = (f"{name} is the straggler of job {job}: the most idle of its {n} GPUs ({idle[k]:.2f} %; the "
                        f"job's GPUs range {low:.2f}–{high:.2f} %). Fix this GPU first")
                text += f"; it also {late_text(k)}." if late[k] else "."
                if others:
                    text += f" Inside collectives it waits on {' and '.join(lead_words(x) for x in others)}."
                out[k] = {"role": "straggler", "others": linked, "leads": [lead_words(x) for x in others], "text": text}
            elif late[k]:
                text = f"{name} is the late rank of job {job}: it {late_text(k)}. Fix its own idle first."
                if others:
                    text += f" Its job's straggler is {names.get(others[0], others[0][1])}."
                out[k] = {"role": "late rank", "others": linked, "leads": [lead_words(x) for x in others], "text": text}
            elif leads:
                waits = []
                if comm[k]:
                    waits.append(f"{comm[k] / 1e6:,.3f} ms of comm idle after collectives")
                if measured[k]:
                    waits.append(f"{wait[k] / 1e6:,.3f} ms waiting for the last rank inside collectives")
                who = " and ".join(lead_words(x) for x in leads)
                out[k] = {"role": "waiting", "others": linked, "leads": [lead_words(x) for x in leads],
                          "text": f"{name} is not the straggler of job {job}: it waits on {who}"
                                  + (f" ({'; '.join(waits)})" if waits else "") + ". Fix that GPU first, then this one."}
            else:
                out[k] = {"role": "none", "others": [], "leads": [],
                          "text": f"job {job} has no straggler: the idle of its {n} GPUs ranges {low:.2f}–{high:.2f} %, "
                                  "within the straggler threshold."}
    return out


def by_cost(jobs: list[dict]) -> list[dict]:
    """The rollup rows ``jobs`` ranked by their best tier (``tiers``: :func:`pipeline.report.medical.job_tiers`,
    ranked by :func:`~pipeline.analysis.confidence.trust_rank`; a job of no tier read as low), then most expensive
    first (``idle_usd_per_month``; ties keep their order), in each tier those whose dollars are unpriced (NaN) last."""
    def key(j: dict) -> tuple:
        usd = j["idle_usd_per_month"]
        tier = min((trust_rank(t) for t in (j.get("tiers") or {}).get("tiers", {})), default=trust_rank(None))
        return tier, math.inf if usd != usd else -float(usd)
    return sorted(jobs, key=key)


def summarise(res: Results) -> dict:
    """Every number the report shows, as plain values (see the renderers in ``html.py``)."""
    # a finished fleet: priced by its run's reduce (an older table's fix columns filled as it is read,
    # load_results), then every column it lacks
    fleet = conform(res.current)
    ok = ok_rows(fleet)
    clusters, jobs = res.rolled.clusters, res.rolled.jobs
    dates = [d for d, _ in res.history]
    keys = job_keys(fleet)
    titles, recs = job_titles(keys), shown_records(res, keys)
    anchors = record_anchors(keys, recs)
    top = top_gpus(fleet)
    fixes = fix_first(fleet, res.rolled.fixes)
    captures, confidences = job_captures(fleet), job_confidences(fleet)
    ra = res.rolled.rates_assumed
    top_rows, names = [], gpu_names(fleet)
    for rank, r in enumerate(top.itertuples(), 1):
        top_rows.append({
            "rank": rank, "report": str(r.report), "report_name": os.path.basename(str(r.report)),
            "gpu_key": str(r.gpu_key), "gpu_name": names.get((str(r.report), str(r.gpu_key)), str(r.gpu_key)), "job": titles[(str(r.cluster), str(r.job))], "cluster": str(r.cluster),
            "node": str(r.node),
            "gpu_model": str(r.gpu_model or ""), "idle_pct": float(r.idle_pct), "idle_ns": int(r.idle_ns),
            "window_ns": int(r.window_ns), "main_category": str(r.main_category),
            "usd": float(r.idle_usd_per_month), "amdahl": float(r.amdahl_speedup), "straggler": bool(r.straggler),
            "anchor": anchors.get((str(r.cluster), str(r.job))), **figure_caveats(r._asdict())})
    worst = top.iloc[0] if len(top) else None
    return {
        "source": res.source, "kind": res.kind, "current_date": res.current_date,
        "hours_per_month": res.priced_with["hours_per_month"] if res.priced_with else run_hours(res.run_dir or res.source),
        "priced_with": res.priced_with,
        "first_date": dates[0] if dates else res.current_date, "last_date": dates[-1] if dates else res.current_date,
        "nights_count": len(dates),
        # all unpriced: the headline reads unpriced (NaN), never $0.00 (the trend keeps fleet_usd's 0)
        "fleet_usd": math.nan if unpriced_total(len(ok) - ra["unpriced_gpus"], ra["unpriced_gpus"]) else fleet_usd(fleet),
        "rates_assumed": ra, "trust": trust_split(fleet), "meter": meter_summary(fleet), "headline": headline_idle(fleet),
        "basis": extrapolation_basis(fleet),
        "gpus": int(len(ok)), "reports": int(fleet["report"].nunique()),
        "failed_reports": int(fleet.loc[fleet["status"] == "error", "report"].nunique()),
        "errors": [{"report": str(r.report), "error": str(r.error)}
                   for r in fleet[fleet["status"] == "error"].itertuples()],
        "duplicates": [{"report": str(r.report), "error": str(r.error)}   # docs/inputs.md#duplicate-captures
                       for r in fleet[fleet["status"] == DUPLICATE].itertuples()],
        "fleet_idle_pct": (100.0 * float(ok["idle_ns"].astype("int64").sum())
                           / float(ok["window_ns"].astype("int64").sum())) if len(ok) else 0.0,
        "clusters": clusters.to_dict("records"),
        "jobs": by_cost([dict(j, anchor=anchors.get((str(j["cluster"]), str(j["job"]))),
                              capture=captures.get((str(j["cluster"]), str(j["job"]))),
                              tiers=confidences.get((str(j["cluster"]), str(j["job"]))))
                         for j in jobs.to_dict("records")]),
        "rate_card": rate_card(fleet), "top": top_rows,
        "categories": job_categories(fleet), "spread": job_spread(fleet),
        "worst_gpu": None if worst is None else {"report": str(worst["report"]), "gpu_key": str(worst["gpu_key"]),
                                                 "job": titles[(str(worst["cluster"]), str(worst["job"]))],
                                                 "tier": tier_ranks(top.head(1))[0],
                                                 "tier_name": str(conform(top.head(1), ["confidence_tier"])
                                                                  ["confidence_tier"].iloc[0] or "")},
        "worst_doc": None if worst is None else gpu_doc(res.run_dir, str(worst["report"]), str(worst["gpu_key"])),
        "trend": dict(trend(res.history, night_hours(res)), lacking=res.lacking), "records": recs, "fixes": fixes, "comm": comm_exposure(fleet),
        "comm_idle": comm_idle(fleet),
        "collective": fleet_collectives(fleet),
        "stragglers": stragglers(fleet), "reconcile": reconcile(fleet, fixes) if len(ok) else None,
        "gpu_names": names,
        "comparison": NIGHT_COMPARISON.replace(os.sep, "/") if res.kind == "sweep" and res.run_dir
        and os.path.exists(os.path.join(res.run_dir, NIGHT_COMPARISON)) else None,
    }
