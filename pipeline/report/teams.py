"""Who pays for the idle, in words: the coverage sentence of the report's headline and the teams table a
manager can forward (Markdown), from a folder's ``teams.csv`` and ``coverage.csv``
(:func:`pipeline.accounting.view.read_view`; docs/definitions.md#coverage)."""
from __future__ import annotations

from ..accounting.joined import NOT_MEASURED
from ..text import md_text
from .words import pct, usd


def coverage_text(view: dict) -> str:
    """One sentence: the share of the fleet's GPU spend the sweep measured, and the allocations no capture saw
    (named; not measured, never priced as idle)."""
    share = view["share"]
    if share["share_pct"] == share["share_pct"]:
        head = (f"The captures represent {pct(share['share_pct'])} of the fleet's GPU spend over the accounting's "
                f"period ({usd(share['represented_usd'])} of {usd(share['held_usd'])})")
    else:
        head = "No allocation of the accounting is priced: the share of the GPU spend measured is unknown"
    if share["unpriced"]:
        head += f"; {share['unpriced']} allocation(s) without a rate are in neither sum"
    missing = view["not_measured"]
    if not missing:
        return head + "; every allocation holding GPUs has a capture."
    named = ", ".join(f"{m['job_id']} ({m['account'] or 'no account'}, {m['user'] or 'no user'}, "
                      f"{m['held_gpu_hours']:,.1f} GPU-hours)" for m in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    return (f"{head}. {len(missing)} job(s) held GPUs without any capture: {named}{more}: not measured, "
            "not priced as idle.")


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
