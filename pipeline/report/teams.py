"""Who pays for the idle, in words: the coverage sentence of the report's headline and the teams table a
manager can forward (Markdown), from a folder's ``teams.csv`` and ``coverage.csv``
(:func:`pipeline.accounting.view.read_view`; docs/definitions.md#coverage)."""
from __future__ import annotations

import pandas as pd

from ..accounting.allocations import NS_PER_S
from ..accounting.hooks import UNKNOWN
from ..accounting.joined import NOT_MEASURED, NS_PER_HOUR, measured_share
from ..text import md_text
from .words import pct, usd


def share_text(share: dict, whose: str = "the fleet's") -> str:
    """The share of the GPU spend the captures represent (``share``: :func:`~pipeline.accounting.joined.measured_share`),
    as the start of a sentence, e.g. ``The captures represent 36.51 % of the fleet's GPU spend over the
    accounting's period ($46.00 of $126.00)``; the allocations without a rate said apart."""
    if share["share_pct"] == share["share_pct"]:
        head = (f"The captures represent {pct(share['share_pct'])} of {whose} GPU spend over the accounting's "
                f"period ({usd(share['represented_usd'])} of {usd(share['held_usd'])})")
    else:
        head = "No allocation of the accounting is priced: the share of the GPU spend measured is unknown"
    if share["unpriced"]:
        head += f"; {share['unpriced']} allocation(s) without a rate are in neither sum"
    return head


def untraced_text(share: dict) -> str:
    """``N allocation(s) held GPUs without any capture (coverage.csv)``: the allocations no trace saw, counted."""
    return f"{len(share['not_measured'])} allocation(s) held GPUs without any capture (coverage.csv)"


def unknown_text(reason: str) -> str:
    """The coverage sentence when the accounting gave no allocation holding GPUs in the period (``reason``: which
    file, what cause; :func:`~pipeline.accounting.hooks.unknown_reason`): unknown, never complete."""
    return (f"Coverage unknown: no allocation holding GPUs in the period was read from the accounting ({reason}); "
            "the share of the GPU spend measured and the allocations never traced are not known")


def _unknown(cov: pd.DataFrame) -> str | None:
    """Why ``cov`` (a coverage table) says nothing: its reason, or a general one for an empty table; None when it
    has allocations."""
    return cov.attrs.get(UNKNOWN) or (UNKNOWN_FOLDER if cov.empty else None)


#: Why a folder's empty coverage.csv says nothing, when the cause is no longer known (the run's warnings said it).
UNKNOWN_FOLDER = "coverage.csv lists none; the run's `WARNING: accounting:` lines name the file and the cause"


def summary_text(cov: pd.DataFrame) -> str:
    """What ``gpu-idle run`` and ``sweep`` print under the totals when the accounting is given (``cov``: the
    coverage table, :func:`~pipeline.accounting.hooks.coverage_table`): the share of the GPU spend measured and
    the number of allocations never traced, one sentence; :func:`unknown_text` when it has no allocation."""
    if _unknown(cov):
        return unknown_text(_unknown(cov)) + "."
    share = measured_share(cov)
    return f"{share_text(share)}; {untraced_text(share)}."


def record_coverage_text(job_ids, cov: pd.DataFrame) -> str:
    """The medical record's coverage line (docs/outputs.md#medical-records): the GPU-hours the job's scheduler
    allocations (``job_ids``, from its rows' ``sched_job_id``) held, the share of their spend its captures
    represent (the seconds actually traced said beside: represented is not profiled), then the fleet's share and
    its allocations never traced (``cov``: the coverage table); :func:`unknown_text` when it has no allocation."""
    if _unknown(cov):
        return f"{unknown_text(_unknown(cov))}."
    mine = cov[cov["job_id"].astype(str).isin({str(j) for j in job_ids})]
    if len(mine):
        held = int(mine["held_gpu_ns"].sum()) / NS_PER_HOUR
        represented = int(mine["represented_gpu_ns"].sum()) / NS_PER_HOUR
        traced = int(mine["traced_ns"].sum()) / NS_PER_S
        own = share_text(measured_share(mine), "their")
        own = own[0].lower() + own[1:]
        head = (f"Coverage: scheduler job(s) {md_text(', '.join(map(str, mine['job_id'])))} held {held:,.1f} "
                f"GPU-hours in the period, {represented:,.1f} of them represented by its captures ({traced:,.2f} s "
                f"traced); {own}" + (", the rest not measured" if represented < held else ""))
    else:
        head = "Coverage: no allocation of the scheduler's accounting matched this job's reports"
    fleet = measured_share(cov)
    whole = share_text(fleet)
    return f"{head}. Over the fleet: {whole[0].lower() + whole[1:]}; {untraced_text(fleet)}."


def coverage_text(view: dict) -> str:
    """One sentence: the share of the fleet's GPU spend the sweep measured, the seconds its captures traced (the
    spend is represented by them, not profiled), and the allocations no capture saw (named; not measured, never
    priced as idle); unknown when ``view`` has no allocation (:func:`unknown_text`)."""
    if not view["allocations"]:
        return unknown_text(UNKNOWN_FOLDER) + "."
    head = (f"{share_text(view['share'])}; the captures traced {view['traced_ns'] / NS_PER_S:,.2f} s in all "
            "(represented, not profiled)")
    missing = view["not_measured"]
    if not missing:
        return head + "; every allocation holding GPUs has a capture."
    named = ", ".join(f"{m['job_id']} ({m['account'] or 'no account'}, {m['user'] or 'no user'}, "
                      f"{m['held_gpu_hours']:,.1f} GPU-hours)" for m in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return (f"{head}. {len(missing)} job(s) held GPUs without any capture: {named}{more}: not measured, "
            "not priced as idle.")


def whose_text(view: dict, markdown: bool = False, top: int = 3) -> str:
    """Whose idle it is, said first (issue 47: on the report's first screen): the ``top`` accounts (teams) with the
    most idle $/month among those measured, most first, at teams.csv's figures; empty when no account was
    measured. Ends with a space, so the coverage sentence follows it."""
    measured = [r for r in view["accounts"] if r["gpus"] and r["idle_usd_per_month"] == r["idle_usd_per_month"]]
    if not measured:
        return ""
    name = md_text if markdown else str
    named = ", ".join(f"{name(r['name'])} {usd(r['idle_usd_per_month'])}" for r in measured[:top])
    more = f" and {len(measured) - top} more" if len(measured) > top else ""
    return f"Whose idle, by account ($/month): {named}{more} (every account and user below). "


def teams_markdown(view: dict) -> list[str]:
    """The teams table (by account, then by user) as Markdown lines, names escaped."""
    lines = ["| by | name | idle $/month | of it trusted | GPUs measured | GPU-hours held | measured | not measured jobs |",
             "|---|---|---|---|---|---|---|---|"]
    for r in view["accounts"] + view["users"]:
        held = r["held_gpu_hours"]
        money = ([usd(r["idle_usd_per_month"]), usd(r["trusted_idle_usd_per_month"])] if r["gpus"]
                 else [NOT_MEASURED, NOT_MEASURED])  # no GPU captured: no idle dollars, never $0.00
        lines.append(f"| {r['by']} | {md_text(r['name'])} | {money[0]} | {money[1]} | {r['gpus']} | {held:,.1f} | "
                     f"{pct(100.0 * r['represented_gpu_hours'] / held) if held else '–'} | {r['not_measured_jobs']} |")
    return lines
