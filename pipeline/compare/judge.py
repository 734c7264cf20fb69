"""Whether a job pair can be compared at all, and how far its figures can be trusted (docs/definitions.md#compare-verdict).

The verdict's checks (the same number of GPUs, models priced alike, window rules and enough stable iterations, the
same program by its kernels' names) come before any figure; a job that fails one has its figures withheld. The
confidence tiers of each side mark a pair's figures when a side is ``toy`` or ``low``.
"""
from __future__ import annotations

from ..analysis.confidence import TIERS, trusted
from ..analysis.window import rule_name
from ..config import ConfidenceConfig
from .comparison import SIDES
from .sides import KernelTimes

#: A job's sides are comparable only when kernels of names both sides ran hold at least this share of the
#: two sides' kernel time in W (docs/definitions.md#compare).
MIN_SHARED_KERNEL_SHARE = 0.5
#: Stable iterations each side needs inside W by default (docs/definitions.md#compare-verdict): the confidence
#: tiers' ``confidence.medium_min_iterations`` (one definition, :class:`~pipeline.config.ConfidenceConfig`); the
#: command passes its config's value.
MIN_ITERATIONS = ConfidenceConfig().medium_min_iterations


def shared_kernel_share(b: KernelTimes, a: KernelTimes) -> tuple[float, float]:
    """``(share, jaccard)`` of two GPUs' kernels inside their windows: ``share`` = the kernel time of
    names both ran, both sides summed, over both sides' kernel time (0..1; 0 when neither ran a kernel);
    ``jaccard`` = |names in both| / |names in either| (docs/definitions.md#compare-verdict)."""
    shared = set(b.time) & set(a.time)
    total = sum(b.time.values()) + sum(a.time.values())
    inside = sum(b.time[n] for n in shared) + sum(a.time[n] for n in shared)
    either = set(b.time) | set(a.time)
    return (inside / total if total else 0.0), (len(shared) / len(either) if either else 0.0)


def _iterations(r: dict) -> int:
    return int(r.get("iterations") or 0)


def _per_pair(texts: list, names: list, pairs: int) -> str:
    """One check's text over ``texts`` of some of a job's ``pairs`` GPU pairs: the one text when every pair
    found the same, else each text after its pair's names (``H100 #1 … -> H100 #1 …: …``), so each figure
    names its GPU pair."""
    if len(texts) == pairs and len(set(texts)) <= 1:
        return texts[0] if texts else ""
    return "; ".join(f"{nb} -> {na}: {t}" for t, (nb, na) in zip(texts, names))


def verdict(job: dict, sides: tuple, min_iterations: int = MIN_ITERATIONS, names: list | None = None) -> dict:
    """Whether one job pair (an entry of :func:`pair_gpus`) can be compared (docs/definitions.md#compare-verdict):
    ``{"comparable": bool, "checks": [{"check", "ok", "text"}], "reasons": [text of each failed check]}``.
    Checks: the same number of analysed GPUs; each pair's GPU model the same (or, when they differ, priced by
    the same rate-card entry: the stated rate basis); each pair's window rule the same with at least
    ``min_iterations`` stable iterations on each side (the confidence tiers' ``confidence.medium_min_iterations``,
    default :data:`MIN_ITERATIONS`); each pair's shared kernel share (:func:`shared_kernel_share`) at least
    :data:`MIN_SHARED_KERNEL_SHARE` (a side whose kernel names could not be read fails it, saying why).
    ``names``: each pair's ``(before name, after name)``, to say which pair a text is of when pairs differ."""
    checks = []
    names = names or [(str(b["gpu_key"]), str(a["gpu_key"])) for b, a in job["pairs"]]
    nb = len(job["pairs"]) + sum(1 for s, _ in job["unpaired"] if s == "before")
    na = len(job["pairs"]) + sum(1 for s, _ in job["unpaired"] if s == "after")
    checks.append({"check": "gpus", "ok": nb == na, "text": f"GPUs: {nb} before, {na} after"})
    models, windows, kernels = [], [], []
    for b, a in job["pairs"]:
        mb, ma = str(b.get("gpu_model") or ""), str(a.get("gpu_model") or "")
        if mb == ma:
            models.append((True, f"model {mb or 'unknown'} both sides"))
        elif str(b.get("rate_model") or "") == str(a.get("rate_model") or "") and b.get("rate_model"):
            models.append((True, f"models differ ({mb or 'unknown'} / {ma or 'unknown'}), priced alike as "
                                 f"{b['rate_model']} (the stated rate basis)"))
        else:
            models.append((False, f"models differ: {mb or 'unknown'} before, {ma or 'unknown'} after"))
        rb, ra = str(b.get("window_rule")), str(a.get("window_rule"))
        enough = all(_iterations(r) >= min_iterations for r in (b, a))
        faults = ([] if rb == ra else [f"the window rules differ: {rule_name(rb)} before, {rule_name(ra)} after"]) + (
            [] if enough else [f"too few stable iterations: {_iterations(b)} before and {_iterations(a)} after, "
                               f"and each side needs at least {min_iterations} (the least a medium-confidence GPU has)"])
        windows.append((not faults, "; ".join(faults) or (
            f"the same window rule ({rule_name(rb)}) on both sides, with {_iterations(b)} stable iterations before and "
            f"{_iterations(a)} after")))
        kb = sides[0].kernels.get((str(b["report"]), str(b["gpu_key"])))
        ka = sides[1].kernels.get((str(a["report"]), str(a["gpu_key"])))
        if not isinstance(kb, KernelTimes) or not isinstance(ka, KernelTimes):
            why = next((k for k in (kb, ka) if isinstance(k, str)), "kernel names not read")
            kernels.append((False, why))
        else:
            share, jac = shared_kernel_share(kb, ka)
            kernels.append((share >= MIN_SHARED_KERNEL_SHARE,
                            f"kernel time in shared names {100 * share:.2f} % (Jaccard of names {jac:.3f}; "
                            f"needs {100 * MIN_SHARED_KERNEL_SHARE:.0f} %)"))
    for name, found in (("model", models), ("window", windows), ("kernels", kernels)):
        if not found:
            continue
        bad = [i for i, (ok, _) in enumerate(found) if not ok]
        shown = bad or range(len(found))
        checks.append({"check": name, "ok": not bad,
                       "text": _per_pair([found[i][1] for i in shown], [names[i] for i in shown], len(found))})
    if not job["pairs"]:
        checks.append({"check": "pairs", "ok": False, "text": "no GPU paired"})
    reasons = [c["text"] for c in checks if not c["ok"]]
    return {"comparable": not reasons, "checks": checks, "reasons": reasons}


def confidence(rows_b: list, rows_a: list) -> dict:
    """The confidence tiers of one GPU pair or a job's pairs (docs/definitions.md#compare-verdict): ``{"before":
    the side's lowest tier (of :data:`~pipeline.analysis.confidence.TIERS`; None when no row has one), "after":
    the same, "low": either is ``toy`` or ``low``, "note": ``low confidence: <the rows' confidence_note>`` (each
    side's note once, prefixed by the side when they differ) when low, else ``""``}``. A low pair stays
    comparable when the verdict's checks pass; its figures are marked with the note."""
    def lowest(rows):
        tiers = [str(r.get("confidence_tier")) for r in rows if r.get("confidence_tier") in TIERS]
        return min(tiers, key=TIERS.index) if tiers else None

    out = {"before": lowest(rows_b), "after": lowest(rows_a)}
    out["low"] = any(t is not None and not trusted(t) for t in (out["before"], out["after"]))
    notes = {}
    for label, rows in zip(SIDES, (rows_b, rows_a)):
        found = [str(r.get("confidence_note") or "") for r in rows
                 if r.get("confidence_tier") in TIERS and not trusted(r.get("confidence_tier"))]
        found = [n or f"tier {lowest(rows)}" for n in found]
        if found:
            notes[label] = "; ".join(dict.fromkeys(found))
    if len(set(notes.values())) == 1 and len(notes) == 2:
        text = next(iter(notes.values()))
    else:
        text = "; ".join(f"{label} side: {n}" for label, n in notes.items())
    out["note"] = f"low confidence: {text}" if out["low"] else ""
    return out
