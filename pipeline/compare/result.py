"""The whole comparison of two sides as plain values (what every output of ``gpu-idle compare`` formats), and the
CI gate in dollars over it (docs/definitions.md#compare, docs/operations.md#compare-as-a-ci-gate)."""
from __future__ import annotations

from ..model import CATEGORIES
from .comparison import missing, pair_title, per_gpu_withheld, position_only
from .deltas import deltas, gap_changes
from .judge import MIN_ITERATIONS, confidence, verdict
from .pairing import pair_gpus, pairing_warning, seat, side_names
from .sides import job_of


def compare(sides: tuple, force: bool = False, min_iterations: int = MIN_ITERATIONS) -> dict:
    """The comparison of two :class:`Side` s as plain values (what every output renders): ``sides``, per job
    its pairing, :func:`verdict` (with ``min_iterations``: the config's ``confidence.medium_min_iterations``)
    and (comparable, or ``force``: then ``forced`` is true and every figure is marked) its :func:`deltas` and
    each GPU pair's, with the gaps of both rosters (:func:`gap_changes`); per GPU pair and per job the
    :func:`confidence` tiers; the GPUs and jobs left unpaired. A pair's ``withheld``: why its figures are withheld
    (:func:`~pipeline.compare.comparison.per_gpu_withheld`: its GPUs were paired by a position only), its ``deltas``
    and ``gaps`` then None; ``force`` shows them, the job's ``pairs_forced`` true (``""``: shown)."""
    b, a = sides
    pairing = pair_gpus(b.rows, a.rows)
    jobs = []
    for job in pairing["jobs"]:
        names_b, names_a = side_names(job["pairs"], job["unpaired"])
        keys = [((str(rb["report"]), str(rb["gpu_key"])), (str(ra["report"]), str(ra["gpu_key"])))
                for rb, ra in job["pairs"]]
        v = verdict(job, sides, min_iterations, [(names_b[kb], names_a[ka]) for kb, ka in keys])
        shown = v["comparable"] or force
        unpaired = [{"side": s, "name": (names_b if s == "before" else names_a)[(str(r["report"]), str(r["gpu_key"]))],
                     "report": str(r["report"]), "gpu_key": str(r["gpu_key"])} for s, r in job["unpaired"]]
        probe = {"basis": job["basis"], "gpus": job["pairs"], "unpaired": unpaired}
        pairs_forced = bool(force and position_only(probe))
        withheld = per_gpu_withheld({**probe, "pairs_forced": pairs_forced})
        gpus = []
        for (rb, ra), (kb, ka) in zip(job["pairs"], keys):
            entry = {"before": {"name": names_b[kb], "report": kb[0], "gpu_key": kb[1], "rank": rb.get("rank"),
                                "device_ids": rb.get("device_ids"), "seat": seat(rb, job["basis"])},
                     "after": {"name": names_a[ka], "report": ka[0], "gpu_key": ka[1], "rank": ra.get("rank"),
                               "device_ids": ra.get("device_ids"), "seat": seat(ra, job["basis"])},
                     "confidence": confidence([rb], [ra]), "withheld": withheld}
            if withheld:   # a position only: no figure of the pair, in any output (docs/definitions.md#compare-pairing)
                entry.update(deltas=None, gaps=None)
            elif shown:
                entry["deltas"] = deltas([rb], [ra], b.hours, a.hours)
                entry["gaps"] = gap_changes(b.docs.get(kb), a.docs.get(ka), b.kernels.get(kb), a.kernels.get(ka))
            gpus.append(entry)
        entry = {"before": list(job["before"]), "after": list(job["after"]), "basis": job["basis"],
                 "pairing_warning": pairing_warning(job["basis"], job["pairs"], job["unpaired"]), "verdict": v,
                 "forced": bool(force and not v["comparable"]), "pairs_forced": pairs_forced, "gpus": gpus,
                 "unpaired": unpaired,
                 "confidence": confidence([p[0] for p in job["pairs"]], [p[1] for p in job["pairs"]])}
        if shown and job["pairs"]:
            entry["deltas"] = deltas([p[0] for p in job["pairs"]], [p[1] for p in job["pairs"]], b.hours, a.hours)
        jobs.append(entry)
    return {"sides": [{"label": s.label, "source": s.source, "folder": s.folder, "gpus": len(s.rows),
                       "hours_per_month": s.hours, "failed": [{"report": r, "error": e} for r, e in s.failed],
                       "jobs": [list(k) for k in sorted({job_of(r) for r in s.rows}, key=lambda k: (k[1], k[0]))]}
                      for s in sides],
            "min_iterations": int(min_iterations),
            "jobs": jobs,
            "unpaired_jobs": [{"side": s, "job": list(k), "gpus": [str(r["gpu_key"]) for r in rows]}
                              for s, k, rows in pairing["unpaired_jobs"]]}


def gate(result: dict, above: float | None = None, above_total: float | None = None, strict: bool = False) -> dict:
    """The CI gate in dollars over a :func:`compare` result (docs/operations.md#compare-as-a-ci-gate): per job pair,
    each category's idle USD per month at the after side's rates (``cat_<c>_usd_change_after_rates`` of its
    :func:`deltas`, when ``above`` is given) and the job's total (``usd_change_after_rates``, when ``above_total``
    is given) fail when their growth exceeds the job's noise floor in dollars (``noise_floor_usd``: the idle
    share's floor in points × the priced GPUs' month at full idle) by more than the threshold. A job not
    comparable, unpriced or whose floor is unknown is not gated, saying why, and fails the gate only when
    ``strict``; so does a comparison in which no job paired. Returns ``{"above_usd", "above_total_usd", "strict",
    "failed", "jobs": [{"job", "applied", "why", "checks": [{"what", "growth_usd", "floor_usd", "excess_usd",
    "threshold_usd", "reading", "failed"}]}], "verdict": text}``; ``reading`` is ``above the threshold``,
    ``below the threshold``, ``inside the noise floor`` or ``unpriced``."""
    jobs = []
    for job in result["jobs"]:
        v, d = job["verdict"], job.get("deltas")
        if not v["comparable"]:
            why = "not comparable: " + "; ".join(v["reasons"])
        elif d is None:
            why = "no GPU paired"
        elif missing(d["usd_after_after_rates"]):
            why = "unpriced: no GPU of the job has a rate"
        elif missing(d["noise_floor_pts"]):
            why = "the noise floor is unknown (" + (d.get("noise_floor_note") or
                                                    "no stable iterations on a side to measure it") + ")"
        else:
            why = ""
        entry = {"job": pair_title(job), "applied": not why, "why": why, "checks": []}
        wanted = ([(c, f"cat_{c}_usd_change_after_rates", above) for c in CATEGORIES] if above is not None else []) \
            + ([("total", "usd_change_after_rates", above_total)] if above_total is not None else [])
        for what, key, limit in (wanted if not why else []):
            growth, floor = d[key], d["noise_floor_usd"]
            if missing(growth):
                entry["checks"].append({"what": what, "growth_usd": None, "floor_usd": floor, "excess_usd": None,
                                        "threshold_usd": limit, "reading": "unpriced", "failed": False})
                continue
            excess = round(growth - floor, 2)
            failed = excess > limit
            reading = "above the threshold" if failed else ("inside the noise floor" if growth <= floor
                                                             else "below the threshold")
            entry["checks"].append({"what": what, "growth_usd": growth, "floor_usd": floor, "excess_usd": excess,
                                    "threshold_usd": limit, "reading": reading, "failed": failed})
        jobs.append(entry)
    if not jobs:
        jobs.append({"job": "", "applied": False, "why": "nothing paired", "checks": []})
    over = [(j, c) for j in jobs for c in j["checks"] if c["failed"]]
    skipped = [j for j in jobs if not j["applied"]]
    failed = bool(over) or (strict and bool(skipped))
    if over:
        verdict = f"FAILED: {len(over)} figure(s) grew by more than the threshold beyond the noise floor"
    elif failed:
        verdict = f"FAILED (--strict): {len(skipped)} job(s) not gated"
    elif skipped and len(skipped) == len(jobs):
        verdict = "not applied: no job could be gated (--strict makes that a failure)"
    else:
        verdict = "passed" + (f"; {len(skipped)} job(s) not gated (--strict makes that a failure)" if skipped else "")
    return {"above_usd": above, "above_total_usd": above_total, "strict": bool(strict), "failed": failed,
            "jobs": jobs, "verdict": verdict}
