"""What changed between a pair's two sides, read against each side's noise floor (docs/definitions.md#compare-deltas),
and which gaps of their rosters vanished, appeared or changed width (docs/definitions.md#compare-gaps).

Times are int ns, shares % of W (0..100), changes in percentage points, money USD per month. The noise floor is
twice the standard error of the difference of the two sides' means (Welch), from each side's iteration-to-iteration
spread; only a change beyond it is read as one, and only an idle share lower by more than its floor is a saving.
"""
from __future__ import annotations

import math

import numpy as np

from ..analysis.cost import assumed_split, idle_usd_per_month, priced_sum
from ..model import CATEGORIES
from .comparison import SIDES
from .sides import KernelTimes


def _pct(part, whole) -> float:
    return 100.0 * int(part) / int(whole) if whole else math.nan


def pooled_sd(parts) -> float:
    """The pooled sample standard deviation of groups given as ``(n, s)`` (count, sample SD):
    ``sqrt(Σ (n − 1) s² / Σ (n − 1))``; NaN when any group's ``s`` is unknown (None or NaN) or no group has
    two values (docs/definitions.md#compare-deltas)."""
    parts = [(int(n), s) for n, s in parts]
    if not parts or any(s is None or math.isnan(float(s)) for _, s in parts):
        return math.nan
    dof = sum(n - 1 for n, _ in parts)
    return math.sqrt(sum((n - 1) * float(s) ** 2 for n, s in parts) / dof) if dof > 0 else math.nan


def noise_floor(sd_b: float, n_b: int, sd_a: float, n_a: int) -> float:
    """Twice the standard error of the difference of two means (Welch): ``2 × sqrt(sd_b² / n_b + sd_a² / n_a)``,
    in the unit of the SDs; NaN when an SD is unknown or a count is 0 (docs/definitions.md#compare-deltas)."""
    if math.isnan(sd_b) or math.isnan(sd_a) or not n_b or not n_a:
        return math.nan
    return 2.0 * math.sqrt(sd_b ** 2 / n_b + sd_a ** 2 / n_a)


def _iteration_sd(r: dict):
    """The sample SD (ns) of one GPU's kept iterations' lengths: ``iteration_cv × iteration_mean_ns`` (a
    population SD) × ``sqrt(n / (n − 1))``; None with fewer than 2 iterations or a figure missing."""
    n, cv, mean = int(r.get("iterations") or 0), r.get("iteration_cv"), r.get("iteration_mean_ns")
    if n < 2 or cv is None or mean is None:
        return None
    return float(cv) * float(mean) * math.sqrt(n / (n - 1))


#: Why a side's noise floor is unknown when its fleet table predates ``idle_pct_sd``.
NO_SD_COLUMN = "its fleet table was written before the idle_pct_sd column (run the side again)"


def _usd(fraction: float, rate, hours: float) -> float:
    """USD per month, rounded to cents as every stored dollar figure (NaN when unpriced)."""
    if rate is None or math.isnan(float(rate)):
        return math.nan
    return round(idle_usd_per_month(fraction, float(rate), hours), 2)


def _change(delta: float, floor: float, down: str, up: str) -> str:
    """``down``/``up`` when ``|delta|`` exceeds the noise floor, else ``no change detectable`` (a floor that
    is unknown: ``unknown``)."""
    if math.isnan(floor) or math.isnan(delta):
        return "unknown"
    if abs(delta) <= floor:
        return "no change detectable"
    return down if delta < 0 else up


def side_figures(rows: list, hours: float, rate_rows: list | None = None) -> dict:
    """One side's figures over ``rows`` (one GPU, or a job's paired GPUs): ``idle_pct`` = Σidle / ΣW,
    ``iteration_ns`` = the mean of the GPUs' ``iteration_mean_ns``, ``iterations`` = Σ stable iterations,
    per category ``cat_<c>_ms_per_iteration`` = Σcat / Σiterations in ms and ``cat_<c>_pct`` = Σcat / ΣW,
    ``idle_sd_pts`` = the pooled SD (:func:`pooled_sd`) of the GPUs' ``idle_pct_sd`` over their ``iterations``,
    ``iteration_sd_ns`` = the same of their iteration lengths' sample SDs (:func:`_iteration_sd`), ``sd_note`` =
    :data:`NO_SD_COLUMN` when a GPU with at least 2 iterations has no ``idle_pct_sd`` (else ``""``);
    ``usd`` of each GPU's idle fraction
    at the rates of ``rate_rows`` (the matching GPU of the side whose rates price it; default ``rows``),
    summed over the priced ones (:func:`~pipeline.analysis.cost.priced_sum`: NaN only when none is priced), and
    each category's ``cat_<c>_usd`` (its share of W priced alike), ``gpu_month_usd`` (the priced GPUs' month at
    full idle), and of those rates ``assumed_usd``, ``assumed_gpus``, ``unpriced_gpus``
    (:func:`~pipeline.analysis.cost.assumed_split`; docs/definitions.md#compare-deltas)."""
    rate_rows = rate_rows or rows
    window = sum(int(r["window_ns"]) for r in rows)
    idle = sum(int(r["idle_ns"]) for r in rows)
    its = sum(int(r.get("iterations") or 0) for r in rows)
    means = [int(r["iteration_mean_ns"]) for r in rows if r.get("iteration_mean_ns") is not None
             and int(r.get("iterations") or 0) > 0]
    out = {"window_ns": window, "idle_ns": idle, "idle_pct": _pct(idle, window), "iterations": its,
           "iteration_ns": (sum(means) / len(means)) if means and len(means) == len(rows) else math.nan,
           "idle_sd_pts": pooled_sd((int(r.get("iterations") or 0), r.get("idle_pct_sd")) for r in rows),
           "iteration_sd_ns": pooled_sd((int(r.get("iterations") or 0), _iteration_sd(r)) for r in rows),
           "sd_note": NO_SD_COLUMN if any(int(r.get("iterations") or 0) >= 2 and r.get("idle_pct_sd") is None
                                          for r in rows) else ""}
    for c in CATEGORIES:
        ns = sum(int(r.get(f"cat_{c}_ns") or 0) for r in rows)
        out[f"cat_{c}_ms_per_iteration"] = ns / its / 1e6 if its else math.nan
        out[f"cat_{c}_pct"] = _pct(ns, window)
    usd = [_usd(int(r["idle_ns"]) / int(r["window_ns"]), q.get("rate_usd_per_hour"), hours)
           for r, q in zip(rows, rate_rows)]
    out["usd"] = round(priced_sum(usd), 2)   # the priced GPUs' sum; NaN only when every one is unpriced
    for c in CATEGORIES:   # each category's idle dollars, priced alike (the gate's figures, :func:`gate`)
        out[f"cat_{c}_usd"] = round(priced_sum([_usd(int(r.get(f"cat_{c}_ns") or 0) / int(r["window_ns"]),
                                                     q.get("rate_usd_per_hour"), hours)
                                                for r, q in zip(rows, rate_rows)]), 2)
    out["gpu_month_usd"] = round(priced_sum([_usd(1.0, q.get("rate_usd_per_hour"), hours) for q in rate_rows]), 2)
    out.update(assumed_split(usd, [bool(q.get("rate_assumed")) for q in rate_rows], [math.isnan(u) for u in usd],
                             [q.get("gpu_model") or r.get("gpu_model") for r, q in zip(rows, rate_rows)]))
    return out


def deltas(b_rows: list, a_rows: list, hours_b: float, hours_a: float) -> dict:
    """What changed over paired rows (``b_rows[i]`` is ``a_rows[i]``'s GPU before): each side's
    :func:`side_figures`, the changes after − before, and the readings against the noise floor
    (docs/definitions.md#compare-deltas): ``noise_floor_pts`` = :func:`noise_floor` of the two sides' idle SDs
    over their iterations (points), ``iteration_noise_floor_pct`` = that of their iteration-length SDs in % of
    the before side's iteration length; ``noise_floor_note`` says why a floor is unknown (``""`` else). USD at the after side's rates (and hours): ``usd_before_after_rates``,
    ``usd_after_after_rates``, ``usd_change_after_rates``; at fixed rates (the before side's):
    ``usd_before_fixed_rates``, ``usd_after_fixed_rates``, ``usd_change_fixed_rates``;
    ``saving_usd_per_month`` = −``usd_change_after_rates`` only when the idle share fell by more than its noise
    floor (else None); ``reading`` (:data:`READINGS`): ``saving``, ``idle up``, ``no change detectable`` or
    ``unknown``, of these rows against their own floor (a job's from its pooled GPUs, never its GPUs' readings). Per rate basis (``after_rates``, ``fixed_rates``; both sides priced by one side's rows, so
    the same GPUs): ``assumed_usd_before_<basis>``, ``assumed_usd_after_<basis>`` (USD at assumed rates),
    ``assumed_gpus_<basis>`` and ``unpriced_gpus_<basis>`` (counts). For the gate (:func:`gate`):
    ``cat_<c>_usd_change_after_rates`` (each category's idle USD at the after side's rates, after − before) and
    ``noise_floor_usd`` (``noise_floor_pts`` / 100 × the after side's priced GPUs' month at full idle)."""
    fb, fa = side_figures(b_rows, hours_b), side_figures(a_rows, hours_a)
    out = {"before": fb, "after": fa}
    out["idle_pct_change_pts"] = fa["idle_pct"] - fb["idle_pct"]
    out["noise_floor_pts"] = noise_floor(fb["idle_sd_pts"], fb["iterations"], fa["idle_sd_pts"], fa["iterations"])
    out["noise_floor_note"] = "; ".join(f"{label} side: {f['sd_note']}" for label, f in zip(SIDES, (fb, fa))
                                        if f["sd_note"])
    out["idle_change"] = _change(out["idle_pct_change_pts"], out["noise_floor_pts"], "lower", "higher")
    out["iteration_change_pct"] = 100.0 * (fa["iteration_ns"] - fb["iteration_ns"]) / fb["iteration_ns"] \
        if fb["iteration_ns"] else math.nan
    floor_ns = noise_floor(fb["iteration_sd_ns"], fb["iterations"], fa["iteration_sd_ns"], fa["iterations"])
    out["iteration_noise_floor_pct"] = 100.0 * floor_ns / fb["iteration_ns"] if fb["iteration_ns"] else math.nan
    out["iteration_change"] = _change(out["iteration_change_pct"], out["iteration_noise_floor_pct"], "faster", "slower")
    out["speedup"] = fb["iteration_ns"] / fa["iteration_ns"] if fa["iteration_ns"] else math.nan
    for c in CATEGORIES:
        out[f"cat_{c}_ms_per_iteration_change"] = fa[f"cat_{c}_ms_per_iteration"] - fb[f"cat_{c}_ms_per_iteration"]
        out[f"cat_{c}_pct_change_pts"] = fa[f"cat_{c}_pct"] - fb[f"cat_{c}_pct"]
    at_after = side_figures(b_rows, hours_a, a_rows)["usd"], fa["usd"]
    fixed = fb["usd"], side_figures(a_rows, hours_b, b_rows)["usd"]
    for basis, (b_f, a_f) in (("after_rates", (side_figures(b_rows, hours_a, a_rows), fa)),
                              ("fixed_rates", (fb, side_figures(a_rows, hours_b, b_rows)))):
        out.update({f"assumed_usd_before_{basis}": b_f["assumed_usd"], f"assumed_usd_after_{basis}": a_f["assumed_usd"],
                    f"assumed_gpus_{basis}": a_f["assumed_gpus"], f"unpriced_gpus_{basis}": a_f["unpriced_gpus"],
                    f"unpriced_models_{basis}": a_f["unpriced_models"]})
    out.update(usd_before_after_rates=at_after[0], usd_after_after_rates=at_after[1],
               usd_change_after_rates=round(at_after[1] - at_after[0], 2),
               usd_before_fixed_rates=fixed[0], usd_after_fixed_rates=fixed[1],
               usd_change_fixed_rates=round(fixed[1] - fixed[0], 2))
    out["saving_usd_per_month"] = -out["usd_change_after_rates"] if out["idle_change"] == "lower" else None
    b_after = side_figures(b_rows, hours_a, a_rows)
    for c in CATEGORIES:
        out[f"cat_{c}_usd_change_after_rates"] = round(fa[f"cat_{c}_usd"] - b_after[f"cat_{c}_usd"], 2)
    out["noise_floor_usd"] = round(out["noise_floor_pts"] / 100.0 * fa["gpu_month_usd"], 2)
    out["reading"] = READINGS[out["idle_change"]]
    return out


#: A deltas' ``reading`` (docs/definitions.md#compare-deltas) by its idle share's change against its own noise floor
#: (``idle_change``): only an idle share lower by more than the floor is a saving.
READINGS = {"lower": "saving", "higher": "idle up", "no change detectable": "no change detectable",
            "unknown": "unknown"}


# ---------------------------------------------------------------------------------------------- gaps

def _place(gap: dict, doc: dict, kernels) -> tuple:
    """A device gap's place in its iteration: ``(iteration status, k)`` where ``k`` counts the GPU's kernels
    that start in the iteration before the gap; ``("outside", None)`` when no iteration holds its start,
    ``(status, None)`` when the kernels are unknown."""
    start = int(gap["start_ns"])
    for _, s, e, status in doc.get("timeline", {}).get("iteration_extents", []):
        if int(s) <= start < int(e):
            if not isinstance(kernels, KernelTimes):
                return (str(status), None)
            k = int(np.searchsorted(kernels.starts, start, "left") - np.searchsorted(kernels.starts, int(s), "left"))
            return (str(status), k)
    return ("outside", None)


def gap_changes(doc_b: dict | None, doc_a: dict | None, kb, ka) -> list[dict]:
    """The device-level gaps of one GPU pair's rosters (the longest ``roster_size`` of each side), grouped by
    the kernel before and after them and their place in the iteration (:func:`_place`)
    (docs/definitions.md#compare-gaps): one entry per group, ``{"kernel_before", "kernel_after", "place",
    "category_before", "category_after", "count_before", "count_after", "ns_before", "ns_after", "change"}``
    with ``change`` ``vanished`` (only before), ``appeared`` (only after) or ``kept``; sorted by the larger
    side's total, longest first."""
    groups: dict = {}
    for i, (doc, kern) in enumerate(((doc_b, kb), (doc_a, ka))):
        for g in (doc or {}).get("device_roster", []):
            status, k = _place(g, doc, kern)
            key = (str(g.get("kernel_before") or ""), str(g.get("kernel_after") or ""), status, k)
            e = groups.setdefault(key, {"count": [0, 0], "ns": [0, 0], "cats": [{}, {}]})
            e["count"][i] += 1
            e["ns"][i] += int(g["length_ns"])
            e["cats"][i][g["category"]] = e["cats"][i].get(g["category"], 0) + int(g["length_ns"])
    out = []
    for (before_k, after_k, status, k), e in groups.items():
        cats = [max(c, key=lambda n: (c[n], n)) if c else "" for c in e["cats"]]
        change = "kept" if all(e["count"]) else "vanished" if e["count"][0] else "appeared"
        out.append({"kernel_before": before_k, "kernel_after": after_k,
                    "place": f"{status} iteration, after kernel {k}" if k is not None else status,
                    "category_before": cats[0], "category_after": cats[1], "count_before": e["count"][0],
                    "count_after": e["count"][1], "ns_before": e["ns"][0], "ns_after": e["ns"][1], "change": change})
    out.sort(key=lambda x: (-max(x["ns_before"], x["ns_after"]), x["kernel_before"], x["kernel_after"], x["place"]))
    return out
