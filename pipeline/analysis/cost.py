"""Price idle time (SPEC "Cost").

idle USD per month = idle fraction × rate (USD per GPU-hour) × hours per month
(default 730, i.e. 8760 h / 12). Amdahl speed-up from removing the idle part
entirely: 1 / (1 − f) (the idle part gets infinitely faster).
"""
from __future__ import annotations

import fnmatch
import math
from typing import NamedTuple

from ..config import CostConfig, Rate


class RateChoice(NamedTuple):
    """The rate-card entry used for one GPU: ``model`` (the entry's model), ``usd_per_gpu_hour``,
    ``source`` (why, for people) and ``unlisted``: the GPU names a model that is not on the
    card, so the default model was assumed (the row then carries a ``model-not-on-rate-card``
    warning), whether or not a cluster override then replaced the default model's rate."""

    model: str
    usd_per_gpu_hour: float
    source: str
    unlisted: bool = False


def find_rate(model: str, cost: CostConfig, cluster: str | None = None) -> RateChoice:
    """Rate for a GPU model name (:class:`RateChoice`).

    Lookup: the first rate-card entry whose ``match`` glob (case-insensitive)
    or model name fits ``model``; an empty or unmatched model uses
    ``cost.default_model``. A cluster override (``cluster_rates[cluster][model]``)
    replaces the rate; ``source`` still says when the default model was assumed. Raises
    ``KeyError`` when the default model is not on the card.
    """
    chosen: Rate | None = None
    text = (model or "").lower()
    if text:
        for rate in cost.rates:
            patterns = rate.match or (rate.model,)
            if text == rate.model.lower() or any(fnmatch.fnmatch(text, p.lower()) for p in patterns):
                chosen = rate
                break
    assumed = ""
    unlisted = False
    if chosen is None:
        unlisted = bool(text)
        chosen = next((r for r in cost.rates if r.model == cost.default_model), None)
        assumed = ("default model: export names no GPU" if not text else
                   f"default model: {model!r} is not on the card")
        if chosen is None:
            raise KeyError(f"default model {cost.default_model!r} is not on the rate card")
    usd = float(chosen.usd_per_gpu_hour)
    override = (cost.cluster_rates or {}).get(cluster or "", {}) or {}
    if chosen.model in override:
        # The override replaces the rate, not the fact that the default model was assumed.
        usd = float(override[chosen.model])
        source = f"cluster {cluster} override" + (f" ({assumed})" if assumed else "")
    else:
        source = f"rate card ({assumed})" if assumed else "rate card"
        if chosen.source:
            source = f"{source}: {chosen.source}"
    return RateChoice(chosen.model, usd, source, unlisted)


def idle_usd_per_month(idle_fraction: float, usd_per_gpu_hour: float, hours_per_month: float) -> float:
    """USD per month wasted by one GPU idle ``idle_fraction`` (0..1) of the time."""
    return float(idle_fraction) * float(usd_per_gpu_hour) * float(hours_per_month)


def amdahl_speedup(idle_fraction: float) -> float:
    """1 / (1 − f); ``inf`` for a GPU idle the whole window."""
    f = float(idle_fraction)
    return math.inf if f >= 1.0 else 1.0 / (1.0 - f)
