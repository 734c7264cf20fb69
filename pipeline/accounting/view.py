"""What a folder's ``teams.csv`` and ``coverage.csv`` say, for the report (docs/definitions.md#coverage)."""
from __future__ import annotations

import os

import pandas as pd

from .hooks import ACCOUNTING_FILES
from .joined import NOT_MEASURED, NS_PER_HOUR, measured_share




def read_view(folder: str | None) -> dict | None:
    """``{"allocations" (coverage.csv's rows; 0: the coverage is unknown), "traced_ns" (Σ of its
    ``traced_ns``), "accounts", "users" (teams.csv rows by account and by user, as dicts, most dollars first), "share"
    (:func:`~pipeline.accounting.joined.measured_share`), "not_measured" (coverage rows of the allocations
    no capture saw, most GPU-hours first, with ``held_gpu_hours``)}``; None when ``folder`` holds no such
    files (a run without accounting) or they cannot be read."""
    if not folder or not all(os.path.exists(os.path.join(folder, f)) for f in ACCOUNTING_FILES):
        return None
    try:
        teams = pd.read_csv(os.path.join(folder, "teams.csv"), dtype={"name": str}, keep_default_na=False,
                            na_values={"idle_usd_per_month": [""], "trusted_idle_usd_per_month": [""]})
        cov = pd.read_csv(os.path.join(folder, "coverage.csv"), dtype={"job_id": str, "user": str, "account": str},
                          keep_default_na=False, na_values={c: [""] for c in ("held_usd", "represented_usd",
                                                                                "idle_usd_per_month", "end_ns")})
    except (OSError, ValueError, pd.errors.ParserError):
        return None
    teams = teams.assign(held_gpu_hours=teams["held_gpu_ns"] / NS_PER_HOUR,
                         represented_gpu_hours=teams["represented_gpu_ns"] / NS_PER_HOUR)
    missing = cov[cov["status"] == NOT_MEASURED].assign(held_gpu_hours=lambda f: f["held_gpu_ns"] / NS_PER_HOUR)
    return {"allocations": len(cov), "traced_ns": int(cov["traced_ns"].sum()), "accounts": teams[teams["by"] == "account"].to_dict("records"),
            "users": teams[teams["by"] == "user"].to_dict("records"),
            "share": measured_share(cov),
            "not_measured": missing.sort_values("held_gpu_ns", ascending=False, kind="stable").to_dict("records")}
