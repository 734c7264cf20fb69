"""The accounting joined to the fleet table: each report's scheduler identity, idle dollars per team and per
user (``teams.csv``), and the GPU-hours each allocation held against what its captures represent
(``coverage.csv``; docs/definitions.md#coverage).

Matching (``accounting.match``, tried in order, the first that names one allocation wins; docs/operations.md):

- ``environment``: the ``SLURM_JOB_ID`` an Nsight export's capture environment names (the row's ``scheduler_job``);
- ``path``: a Slurm job id in the report's path (``accounting.path_job_id``, its first group), or a pod's name
  as one part of the path or the file's stem;
- ``node``: the report's ``node`` label among an allocation's nodes; when the capture's time is on the Unix-epoch
  clock (a PyTorch trace's), only allocations holding the node at that time; more than one: not matched, named.

Dollars are the final fleet table's (``idle_usd_per_month``, never recomputed); an allocation no report
matches is ``not measured``: named in ``coverage.csv``, never priced as idle.
"""
from __future__ import annotations

import math
import os
import re

import pandas as pd

from ..analysis.confidence import TRUSTED
from ..analysis.cost import find_rate, priced_sum
from ..kinds import stem
from ..config import rfc3339_ns
from ..schema import NOT_ANALYSED
from .allocations import SLURM, Allocation

#: Times at or after this (2001-09-09 UTC in ns) are on the Unix-epoch clock: a capture there can be
#: placed among allocations in time.
WALL_CLOCK_MIN_NS = 10 ** 18
NS_PER_HOUR = 3_600_000_000_000
#: The fleet columns this module fills, per report (pipeline/schema.py declares them).
IDENTITY = ("sched_job_id", "sched_user", "sched_account", "sched_partition", "sched_gpus", "sched_matched_by")
#: What a report no allocation matches is called in teams.csv and the report.
NO_RECORD = "(no scheduler record)"
MEASURED, PARTLY, NOT_MEASURED = "measured", "partly measured", "not measured"


def _held_at(a: Allocation, node: str, start: int | None, end: int | None, last_ns: int) -> bool:
    if node not in a.nodes:
        return False
    if start is None:
        return True
    return a.start_ns < end and start < (a.end_ns if a.end_ns is not None else last_ns)


def _capture(rows: pd.DataFrame) -> tuple[int | None, int | None]:
    """The report's capture ``(start, end)`` when on the Unix-epoch clock, else ``(None, None)``."""
    first = pd.to_numeric(rows["first_kernel_ns"], errors="coerce").dropna()
    length = pd.to_numeric(rows["capture_ns"], errors="coerce").fillna(0)
    if first.empty or int(first.min()) < WALL_CLOCK_MIN_NS:
        return None, None
    ends = (pd.to_numeric(rows["first_kernel_ns"], errors="coerce") + length).dropna()
    return int(first.min()), int(ends.max())


def match_reports(fleet: pd.DataFrame, allocations: list, cfg) -> tuple[dict, list]:
    """``({report: (Allocation, rule)}, problems)``: each report of ``fleet`` matched by the first rule of
    ``cfg.accounting.match`` that names one allocation (module doc); each problem a text naming the report,
    the rule and the cause."""
    slurm = {a.job_id: a for a in allocations if a.source == SLURM}
    pods = {a.job_id.partition("/")[2]: a for a in allocations if a.source != SLURM}
    last_ns = max([a.end_ns or a.start_ns for a in allocations], default=0)
    pattern = re.compile(cfg.accounting.path_job_id)
    files = ", ".join(sorted({a.file for a in allocations})) or "no file read"
    matched, problems = {}, []
    rows = fleet[~fleet["status"].isin(NOT_ANALYSED)] if "status" in fleet else fleet
    for report, its in rows.groupby("report", sort=True):
        failed = len(problems)  # this report's problems start here: a later rule's match is told on them
        for rule in cfg.accounting.match:
            found = None
            if rule == "environment":
                named = {str(v) for v in its["scheduler_job"].dropna() if str(v)}
                ids = {v.partition("=")[2] for v in named if v.partition("=")[2]}
                if len(ids) == 1:
                    job = ids.pop()
                    found = slurm.get(job)
                    if found is None:
                        problems.append(f"{report}: its capture environment names SLURM_JOB_ID={job}, which no "
                                        f"accounting file lists ({files})")
            elif rule == "path":
                hit = pattern.search(report)
                if hit and hit.groups() and hit.group(1):
                    found = slurm.get(hit.group(1))
                    if found is None:
                        problems.append(f"{report}: its path names job {hit.group(1)} (accounting.path_job_id), "
                                        f"which no accounting file lists ({files})")
                if found is None:
                    parts = set(report.replace("\\", "/").split("/")) | {stem(os.path.basename(report))}
                    named_pods = [pods[p] for p in sorted(parts & set(pods))]
                    found = named_pods[0] if len(named_pods) == 1 else None
            elif rule == "node":
                node = next((str(v) for v in its["node"].dropna() if str(v)), "")
                if node:
                    start, end = _capture(its)
                    held = [a for a in allocations if _held_at(a, node, start, end, last_ns)]
                    if len(held) == 1:
                        found = held[0]
                    elif len(held) > 1:
                        when = ("overlapping jobs at the capture's time" if start is not None else
                                "jobs in the accounting's period, and the capture's time is not on the wall clock")
                        problems.append(f"{report}: node {node} was held by {len(held)} {when} "
                                        f"({', '.join(a.job_id for a in held)}): which one it belongs to is not "
                                        "known, not matched by node")
            if found is not None:
                matched[report] = (found, rule)
                # an earlier rule's failure is not the end: say where the report went instead, and by what
                problems[failed:] = [f"{text}; matched instead to {found.source} job {found.job_id} by the "
                                     f"`{rule}` rule" for text in problems[failed:]]
                break
    return matched, problems


def with_identity(fleet: pd.DataFrame, matched: dict) -> pd.DataFrame:
    """``fleet`` with :data:`IDENTITY` filled for the rows of each matched report (others left empty)."""
    out = fleet.copy()
    if out.empty:
        return out
    values = {c: [] for c in IDENTITY}
    for report in out["report"]:
        a, rule = matched.get(report, (None, ""))
        values["sched_job_id"].append(a.job_id if a else None)
        values["sched_user"].append(a.user if a else None)
        values["sched_account"].append(a.account if a else None)
        values["sched_partition"].append(a.partition if a else None)
        values["sched_gpus"].append(a.gpus if a else pd.NA)
        values["sched_matched_by"].append(f"{a.source}: {rule}" if a else None)
    for c in IDENTITY:
        out[c] = pd.array(values[c], dtype="Int64") if c == "sched_gpus" else pd.Series(values[c], index=out.index,
                                                                                       dtype=object)
    return out


def _rate(a: Allocation, its: pd.DataFrame, cost) -> tuple[float, bool]:
    """USD per GPU-hour of an allocation: its matched GPUs' rate in the fleet table, else the rate card's for
    the type the scheduler names (:func:`~pipeline.analysis.cost.find_rate`; none named: the default
    model's, assumed); NaN when unpriced. ``(rate, assumed)``."""
    priced = its[pd.to_numeric(its["rate_usd_per_hour"], errors="coerce").notna()] if len(its) else its
    if len(priced):
        return float(priced["rate_usd_per_hour"].iloc[0]), bool(priced["rate_assumed"].iloc[0])
    choice = find_rate(a.gpu_type, cost)
    return (math.nan if choice.unpriced else float(choice.usd_per_gpu_hour)), bool(choice.assumed)


COVERAGE_COLUMNS = ["source", "job_id", "user", "account", "partition", "nodes", "start_ns", "end_ns", "gpus",
                    "held_gpu_ns", "captured_gpus", "represented_gpu_ns", "not_measured_gpu_ns", "traced_ns",
                    "rate_usd_per_hour", "rate_assumed", "held_usd", "represented_usd", "idle_usd_per_month",
                    "reports", "status"]


def period(allocations: list, setting: tuple = ()) -> tuple[int, int, str]:
    """The period coverage counts (docs/definitions.md#coverage), ``(start_ns, end_ns, whence)``:
    ``accounting.period`` when set (``setting``, two RFC 3339 times); else the accounting's own span, from its
    earliest start to the latest of its starts, its ends and, when a job is still running, the time its file was
    last written (``sacct`` and ``kubectl`` were run then); ``(0, 0, …)`` without allocations."""
    if setting:
        start, end = (rfc3339_ns(t) for t in setting)
        return start, end, "accounting.period"
    times = [a.start_ns for a in allocations] + [a.end_ns for a in allocations if a.end_ns is not None]
    for path in sorted({a.file for a in allocations if a.end_ns is None}):
        try:
            times.append(os.stat(path).st_mtime_ns)
        except OSError:
            pass
    return min((a.start_ns for a in allocations), default=0), max(times, default=0), "the accounting's own span"


def held_span(a: Allocation, within: tuple) -> int:
    """The ns of ``a`` inside the period ``within`` (:func:`period`): its start to its end (still running: the
    period's end), clipped to the period; 0 when outside it."""
    end = a.end_ns if a.end_ns is not None else within[1]
    return max(0, min(end, within[1]) - max(a.start_ns, within[0]))


def coverage(fleet: pd.DataFrame, allocations: list, cost, within: tuple | None = None) -> pd.DataFrame:
    """One row per allocation that held GPUs in the period ``within`` (:func:`period`; None: the accounting's own
    span) (:data:`COVERAGE_COLUMNS`, docs/definitions.md#coverage): the GPU-ns it held there (``gpus × t``,
    ``t`` its time clipped to the period, a running one up to the period's end), the GPUs of it that
    some report captured, the GPU-ns those represent (``min(captured, gpus) × t``), the rest
    ``not_measured_gpu_ns``, the time traced (Σ ``window_ns``), its spend at its rate (``held_usd``) and the
    part represented, its idle USD/month from the fleet table (empty when not measured: never priced) and
    ``status`` (``measured``, ``partly measured``, ``not measured``)."""
    within = within or period(allocations)
    ok = fleet[~fleet["status"].isin(NOT_ANALYSED)] if len(fleet) else fleet
    rows = []
    for a in allocations:
        span = held_span(a, within)
        if span <= 0:
            continue  # not in the period: no GPU time of it counts
        its = ok[(ok["sched_job_id"] == a.job_id) & ok["sched_matched_by"].astype(str).str.startswith(a.source)] \
            if len(ok) else ok
        captured = int(its[["report", "gpu_key"]].drop_duplicates().shape[0]) if len(its) else 0
        held, represented = a.gpus * span, min(captured, a.gpus) * span
        rate, assumed = _rate(a, its, cost)
        rows.append({
            "source": a.source, "job_id": a.job_id, "user": a.user, "account": a.account, "partition": a.partition,
            "nodes": ",".join(a.nodes), "start_ns": a.start_ns, "end_ns": a.end_ns if a.end_ns is not None else pd.NA,
            "gpus": a.gpus, "held_gpu_ns": held, "captured_gpus": captured, "represented_gpu_ns": represented,
            "not_measured_gpu_ns": held - represented,
            "traced_ns": int(pd.to_numeric(its["window_ns"], errors="coerce").fillna(0).sum()) if captured else 0,
            "rate_usd_per_hour": rate, "rate_assumed": assumed,
            "held_usd": round(held / NS_PER_HOUR * rate, 2) if not math.isnan(rate) else math.nan,
            "represented_usd": round(represented / NS_PER_HOUR * rate, 2) if not math.isnan(rate) else math.nan,
            "idle_usd_per_month": round(priced_sum(its["idle_usd_per_month"]), 2) if captured else math.nan,
            "reports": int(its["report"].nunique()) if captured else 0,
            "status": NOT_MEASURED if not captured else MEASURED if represented == held else PARTLY,
        })
    out = pd.DataFrame(rows, columns=COVERAGE_COLUMNS)
    out.attrs["period"] = within
    for c in ("start_ns", "end_ns", "gpus", "held_gpu_ns", "captured_gpus", "represented_gpu_ns",
              "not_measured_gpu_ns", "traced_ns", "reports"):
        out[c] = out[c].astype("Int64")
    return out


def measured_share(cov: pd.DataFrame) -> dict:
    """The fleet's GPU spend over the accounting's period and the part the sweep measured: ``{"held_usd",
    "represented_usd", "share_pct" (NaN: no priced allocation), "not_measured" (job ids held without any
    capture), "unpriced" (allocations without a rate, left out of both sums)}``."""
    priced = cov[cov["held_usd"].notna()]
    held, represented = float(priced["held_usd"].sum()), float(priced["represented_usd"].sum())
    return {"held_usd": round(held, 2), "represented_usd": round(represented, 2),
            "share_pct": round(100.0 * represented / held, 2) if held > 0 else math.nan,
            "not_measured": list(cov.loc[cov["status"] == NOT_MEASURED, "job_id"]),
            "unpriced": int(cov["held_usd"].isna().sum())}


TEAM_COLUMNS = ["by", "name", "gpus", "jobs", "idle_usd_per_month", "trusted_idle_usd_per_month", "held_gpu_ns",
                "represented_gpu_ns", "not_measured_jobs"]


def teams(fleet: pd.DataFrame, cov: pd.DataFrame) -> pd.DataFrame:
    """Idle USD/month per account (team) and per user (:data:`TEAM_COLUMNS`; ``by`` ``account`` or ``user``),
    most first: the fleet table's ``idle_usd_per_month`` of its analysed GPUs summed (unpriced left out; all
    unpriced, or no GPU measured: empty, never $0.00), the part of trusted tiers, its scheduler jobs with a capture, and from ``cov`` the GPU-ns
    its allocations held and represented and its jobs never measured. GPUs no allocation matched are one row
    named :data:`NO_RECORD`."""
    ok = fleet[~fleet["status"].isin(NOT_ANALYSED)] if len(fleet) else fleet
    out = []
    for by, column in (("account", "sched_account"), ("user", "sched_user")):
        names = ok[column].fillna(NO_RECORD).astype(str) if len(ok) else pd.Series(dtype=object)
        held: dict = {}  # Python ints: a big team's GPU-ns over a month passes int64 (3,500 GPUs)
        for name, h, r, status in zip(cov[by].astype(str), cov["held_gpu_ns"], cov["represented_gpu_ns"], cov["status"]):
            total = held.setdefault(name, [0, 0, 0])
            total[0], total[1], total[2] = total[0] + int(h), total[1] + int(r), total[2] + (status == NOT_MEASURED)
        for name in sorted(set(names) | set(cov[by].astype(str) if len(cov) else ())):
            its = ok[names == name] if len(ok) else ok
            trusted = its[its["confidence_tier"].isin(TRUSTED)] if len(its) else its
            out.append({"by": by, "name": name, "gpus": int(len(its)),
                        "jobs": int(its["sched_job_id"].nunique()) if len(its) else 0,
                        # no GPU measured: no idle dollars at all (empty), never $0.00
                        "idle_usd_per_month": round(priced_sum(its["idle_usd_per_month"]), 2) if len(its) else math.nan,
                        "trusted_idle_usd_per_month": round(priced_sum(trusted["idle_usd_per_month"]), 2)
                        if len(trusted) else (0.0 if len(its) else math.nan),
                        "held_gpu_ns": held.get(name, [0])[0], "represented_gpu_ns": held.get(name, [0, 0])[1],
                        "not_measured_jobs": held.get(name, [0, 0, 0])[2]})
    frame = pd.DataFrame(out, columns=TEAM_COLUMNS)
    order = frame.assign(_usd=frame["idle_usd_per_month"].fillna(-1.0), _by=frame["by"].map({"account": 0, "user": 1}))
    return frame.loc[order.sort_values(["_by", "_usd", "name"], ascending=[True, False, True], kind="stable").index
                     ].reset_index(drop=True)
