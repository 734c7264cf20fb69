"""The per-job "medical record" page (SPEC "The medical record page").

Line 1: device-level idle % with the per-GPU spread (min and max GPU named).
Line 2: category shares (category time over window time, both summed over the job's GPUs).
Line 2 names the sub-threshold slivers that no category holds (unless the GPU
is launch-bound), so the shares add up to the idle. Then the five largest
device-level gaps of the job (time when no stream runs a kernel; per-stream
gaps on a side stream are not idle GPU time): start ns, the NVTX range it falls
in, width and category. Deterministic (stable sort keys, fixed number formats), so
the page before and after a fix diffs cleanly.
"""
from __future__ import annotations

import pandas as pd

from ..analyse import CATEGORIES

TOP_GAPS = 5


def _ms(ns) -> str:
    return f"{int(ns) / 1e6:,.3f} ms"


def job_record(job: str, rows: pd.DataFrame, rosters: dict, actionable_pct: float = 2.0) -> str:
    """Markdown page for one job.

    Args:
        job: the job label.
        rows: the job's fleet rows (error rows included: they are listed, not counted).
        rosters: ``(report, gpu_key) -> {"streams": [...], "device": [...]}`` from the run.
        actionable_pct: categories under this share of W are marked "filed".
    """
    ok = rows[rows["status"] != "error"].sort_values(["report", "gpu_key"], kind="stable")
    lines = [f"# Medical record: {job}", ""]
    if ok.empty:
        lines.append("No GPU of this job could be analysed.")
    else:
        window = int(ok["window_ns"].astype("int64").sum())
        idle = int(ok["idle_ns"].astype("int64").sum())
        lo = ok.loc[ok["idle_pct"].astype(float).idxmin()]
        hi = ok.loc[ok["idle_pct"].astype(float).idxmax()]
        rules = ", ".join(sorted(set(ok["window_rule"].astype(str))))
        lines.append(
            f"Idle {100.0 * idle / window:.2f} % device-level over {len(ok)} GPU(s) "
            f"(min {float(lo.idle_pct):.2f} % {lo.gpu_key}, max {float(hi.idle_pct):.2f} % {hi.gpu_key}"
            f"{', straggler suspect ' + str(hi.gpu_key) if bool(hi.straggler) else ''}; window: {rules})")
        shares = []
        for cat in CATEGORIES:
            pct = 100.0 * int(ok[f"cat_{cat}_ns"].astype("int64").sum()) / window
            shares.append((pct, cat))
        shares.sort(key=lambda x: (-x[0], CATEGORIES.index(x[1])))
        slivers = 0 if "launch_bound" not in ok else int(
            ok.loc[~ok["launch_bound"].astype(bool), "device_sliver_ns"].astype("int64").sum())
        lines.append("Categories: " + " · ".join(
            f"{cat} {pct:.2f} %" + ("" if pct >= actionable_pct else " (filed)") for pct, cat in shares)
            + (f" · sub-threshold slivers {100.0 * slivers / window:.2f} %" if slivers else ""))
        lines += ["", f"## {TOP_GAPS} largest gaps (device-level: no kernel on any stream)", "",
                  "| # | GPU | start ns | NVTX range | width | category |",
                  "|---|---|---|---|---|---|"]
        gaps = []
        for row in ok.itertuples():
            for g in rosters.get((row.report, row.gpu_key), {}).get("device", []):
                gaps.append((-g["length_ns"], g["start_ns"], row.gpu_key, g))
        gaps.sort(key=lambda x: (x[0], x[1], x[2]))
        for i, (_, _, gpu, g) in enumerate(gaps[:TOP_GAPS], 1):
            where = (g.get("nvtx_range") or "-").replace("|", "\\|")
            lines.append(f"| {i} | {gpu} | {g['start_ns']} | {where} | {_ms(g['length_ns'])} | {g['category']} |")
        if not gaps:
            lines.append("| - | no gap above the threshold in the roster | | | | |")
        usd = float(ok["idle_usd_per_month"].astype(float).sum())
        lines += ["", f"Idle cost: ${usd:,.2f} per month for these GPUs."]
    for row in rows[rows["status"] == "error"].sort_values("report").itertuples():
        lines.append(f"- failed: {row.error}")  # the message starts with the report
    return "\n".join(lines) + "\n"


def write_records(out_dir: str, fleet: pd.DataFrame, rosters: dict, actionable_pct: float = 2.0) -> list[str]:
    """Write ``out_dir/records/<job>.md`` for every job; returns the paths (sorted by job)."""
    import os

    from ..fleet import slug, write_text

    paths = []
    for job, rows in fleet.groupby("job", sort=True, dropna=False):
        path = os.path.join(out_dir, "records", f"{slug(str(job))}.md")
        write_text(path, job_record(str(job), rows, rosters, actionable_pct))
        paths.append(path)
    return paths
