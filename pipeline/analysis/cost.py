"""Price idle time (docs/definitions.md#cost).

idle USD per month = idle fraction × rate (USD per GPU-hour) × hours per month
(default 730, i.e. 8760 h / 12). Amdahl speed-up from removing the idle part
entirely: 1 / (1 − f) (the idle part gets infinitely faster).
"""
from __future__ import annotations

import fnmatch
import math
from typing import NamedTuple

import numpy as np

from ..config import CostConfig, Rate
from ..model import ASSUMED, CATEGORIES, CAVEATS, NO_GPU_NAMED, RowWarning, WarningCode, row_status
from ..schema import NO_MODEL, PRICE_INPUTS, amdahl_speedup, models_text, unpriced_models  # noqa: F401

#: How ``source`` begins for a GPU left unpriced (``cost.unlisted: unpriced``).
UNPRICED = "unpriced (cost.unlisted: unpriced)"
#: What prices a GPU left unpriced (docs/definitions.md#cost): every total that leaves one out says it.
HOW_TO_PRICE = ("to price them, give each a `gpu_model` label naming a model on the rate card (e.g. `gpu_model: "
                "MI250` prices it at that entry), or add a `cost.rates` entry for its model; `cost.unlisted: default` "
                "instead prices them all at the default model's rate (`cost.default_model`, H100 unless set), a "
                "wrong price for a GPU that is not that model (e.g. an AMD GPU)")


class RateChoice(NamedTuple):
    """The rate-card entry used for one GPU: ``model`` (the entry's model), ``usd_per_gpu_hour``,
    ``source`` (why, for people), ``unlisted``: the GPU names a model that is not on the
    card, so the default model was assumed (the row then carries a ``model-not-on-rate-card``
    warning), whether or not a cluster override then replaced the default model's rate; and
    ``share_unknown``: a MIG instance whose share of its board the export does not give,
    priced at the whole board's rate (the row carries a ``mig-share-unknown`` warning);
    ``assumed``: the GPU has no entry of its own (its model is not on the card or not named), so
    its rate is the default model's (``rate_assumed``); ``unpriced``: such a GPU left without a rate
    (:func:`find_rate`): ``model`` empty, ``usd_per_gpu_hour`` NaN, no dollars."""

    model: str
    usd_per_gpu_hour: float
    source: str
    unlisted: bool = False
    share_unknown: bool = False
    assumed: bool = False
    unpriced: bool = False


class MigShare(NamedTuple):
    """A MIG instance's size: ``sms`` (the instance's SMs) and ``board_sms`` (its board's); 0 = unknown."""

    sms: int
    board_sms: int


def _fits(text: str, rate: Rate) -> bool:
    """Whether a (lower-case) model name fits a rate-card entry: its model name or a ``match`` glob."""
    patterns = rate.match or (rate.model,)
    return text == rate.model.lower() or any(fnmatch.fnmatch(text, p.lower()) for p in patterns)


def _priced(chosen: Rate, cost: CostConfig, cluster: str | None, assumed: str, what: str = "rate card") -> tuple:
    """``(usd, source)`` of a chosen entry: the card's rate, or the cluster's override of it. ``source``
    names ``what`` was used (``rate card``, ``rate card MIG profile (14 SMs)``), the default model
    when ``assumed`` says why it was, and the entry's own ``source``."""
    override = (cost.cluster_rates or {}).get(cluster or "", {}) or {}
    if chosen.model in override:
        # The override replaces the rate, not the fact that the default model was assumed.
        return float(override[chosen.model]), f"cluster {cluster} override" + (f" ({assumed})" if assumed else "")
    source = f"{what} ({assumed})" if assumed else what
    return float(chosen.usd_per_gpu_hour), f"{source}: {chosen.source}" if chosen.source else source


def find_rate(model: str, cost: CostConfig, cluster: str | None = None, mig: MigShare | None = None,
              unnamed: str = "", not_nvidia: str = "") -> RateChoice:
    """Rate for a GPU model name (:class:`RateChoice`), in USD per GPU-hour.

    Lookup: the first whole-GPU rate-card entry (``sms`` 0) whose ``match`` glob
    (case-insensitive) or model name fits ``model``. A GPU with no entry of its own, under
    ``cost.unlisted: unpriced`` (the default): unpriced when it names a model (one the card does not list),
    or names none while ``not_nvidia`` says why its input is not an NVIDIA GPU (a ROCm/HIP trace); a GPU
    naming no model otherwise, and every such GPU under ``cost.unlisted: default``, uses
    ``cost.default_model``, ``assumed`` (``unnamed``: why an empty model is empty, quoted in ``source``;
    default :data:`~pipeline.model.NO_GPU_NAMED`). A
    cluster override (``cluster_rates[cluster][model]``) replaces the rate; ``source`` still
    says when the default model was assumed.

    A MIG instance (``mig``; docs/definitions.md#cost) is priced as its slice: the first MIG profile entry
    (``sms`` equal to the instance's SMs) whose globs fit the board's ``model``, else the
    board's rate × instance SMs / board SMs, else (a count unknown) the whole board's rate
    with ``share_unknown`` set. ``source`` names the rule. Raises ``KeyError`` when the
    default model is not on the card.
    """
    text = (model or "").lower()
    if mig is not None and mig.sms and text:
        profile = next((r for r in cost.rates if r.sms and r.sms == mig.sms and _fits(text, r)), None)
        if profile is not None:
            usd, source = _priced(profile, cost, cluster, "", f"rate card MIG profile ({mig.sms} SMs)")
            return RateChoice(profile.model, usd, source)
    chosen = next((r for r in cost.rates if not r.sms and _fits(text, r)), None) if text else None
    assumed = ""
    if chosen is None:
        why = f"{model!r} is not on the card" if text else (unnamed or NO_GPU_NAMED)
        if cost.unlisted == "unpriced" and (text or not_nvidia):
            why += "" if text else f"; {not_nvidia}"
            return RateChoice("", math.nan, f"{UNPRICED}: {why}", unlisted=bool(text), unpriced=True)
        chosen = next((r for r in cost.rates if r.model == cost.default_model), None)
        assumed = f"{ASSUMED} {why}"
        if chosen is None:
            raise KeyError(f"default model {cost.default_model!r} is not on the rate card")
    usd, source = _priced(chosen, cost, cluster, assumed)
    unlisted, was_assumed = bool(text) and bool(assumed), bool(assumed)
    if mig is None:
        return RateChoice(chosen.model, usd, source, unlisted, assumed=was_assumed)
    if mig.sms and mig.board_sms:
        return RateChoice(chosen.model, usd * mig.sms / mig.board_sms,
                          f"MIG instance: {mig.sms}/{mig.board_sms} SMs of the board's rate (no MIG profile entry "
                          f"for {mig.sms} SMs on the card); {source}", unlisted, assumed=was_assumed)
    sizes = f"instance SMs {mig.sms or 'unknown'}, board SMs {mig.board_sms or 'unknown'}"
    return RateChoice(chosen.model, usd, f"MIG instance of unknown size ({sizes}): priced at the whole board's "
                      f"rate; {source}", unlisted, share_unknown=True, assumed=was_assumed)


def rate_warnings(choice: RateChoice, model: str, note: str = "", others=(), not_nvidia: str = "") -> list[RowWarning]:
    """The coded warning of a GPU with no rate-card entry of its own (docs/definitions.md#cost), [] for
    one priced at its own entry: ``model-not-on-rate-card`` when it names a ``model`` the card lacks
    (priced as the default model, or left unpriced: then it says how to price it); ``gpu-model-unresolved``
    when it names none (``note``: why it names none; ``not_nvidia``: why its input is not an NVIDIA GPU),
    priced at ``cost.default_model``'s rate (``choice.assumed``) or left unpriced, unless ``others`` (the
    row's warnings so far) already has one from the loader. Neither code is partial: the row's status stays
    ``ok``."""
    if model and (choice.assumed or choice.unpriced):
        return [RowWarning(WarningCode.MODEL_NOT_ON_RATE_CARD, f"GPU model {model!r} is not on the rate card; "
                           + (f"left unpriced (cost.unlisted: unpriced): add a cost.rates entry for {model!r} to "
                              "price it" if choice.unpriced else f"priced as {choice.model}"))]
    if not (choice.assumed or choice.unpriced) or any(w.code == WarningCode.GPU_MODEL_UNRESOLVED for w in others):
        return []
    priced = (f"{not_nvidia}, so not priced at the default model's rate: left unpriced (cost.unlisted: unpriced)"
              if choice.unpriced and not_nvidia
              else "left unpriced (cost.unlisted: unpriced)" if choice.unpriced
              else f"priced at an assumed rate, {choice.model}'s (cost.default_model)")
    return [RowWarning(WarningCode.GPU_MODEL_UNRESOLVED, f"GPU model not named: {note or NO_GPU_NAMED}; {priced}; "
                       "a gpu_model label for this report names it")]


def idle_usd_per_month(idle_fraction: float, usd_per_gpu_hour: float, hours_per_month: float) -> float:
    """USD per month of a share of one GPU's time: ``idle_fraction`` (0..1, ns of the share / ``window_ns``)
    × ``usd_per_gpu_hour`` × ``hours_per_month`` (docs/definitions.md#cost), unrounded. The one pricing
    formula: the headline idle, the caveats' and the exposed communication's dollars and fix-first's
    recoverable dollars (:mod:`pipeline.analysis.fixfirst`) all come from it. Raises ValueError or
    TypeError for values that are not numbers."""
    return float(idle_fraction) * float(usd_per_gpu_hour) * float(hours_per_month)


def unpriced_total(priced, unpriced):
    """Whether a USD total over GPUs is unpriced (docs/definitions.md#cost): none of the GPUs it sums is priced
    (``priced``: their count) and some are ``unpriced`` (their count). Such a total is shown as unpriced with the
    count, never as $0.00; a total with some priced GPUs is their sum and says how many are unpriced; a total over
    no GPU is 0. Counts or integer arrays of counts (element-wise, a bool array back)."""
    return (np.asarray(priced) == 0) & (np.asarray(unpriced) > 0)


def priced_sum(values) -> float:
    """The USD total of ``values`` (one USD figure per GPU, NaN for an unpriced GPU): the sum of the priced ones,
    NaN when every one is unpriced (:func:`unpriced_total`), 0.0 for none. Raises ValueError or TypeError for
    values that are not numbers."""
    v = np.asarray(list(values), dtype=float)
    nan = np.isnan(v)
    # numpy's (pairwise) sum with NaN as 0: what the views summed before, to the last bit
    return math.nan if bool(unpriced_total(int((~nan).sum()), int(nan.sum()))) else float(np.nansum(v))


def assumed_split(usd, assumed, unpriced, models=None) -> dict:
    """How much of a USD total over GPUs rests on assumed rates (docs/definitions.md#cost), the one definition
    (the headline's, the printed total's, each fix-first entry's): ``usd`` the GPUs' USD figures (NaN where
    unpriced), ``assumed`` their ``rate_assumed`` and ``unpriced`` their ``unpriced`` flags, ``models`` their
    ``gpu_model`` (aligned sequences; ``models`` None: not told). Returns ``{"assumed_usd": the sum of the
    assumed GPUs' USD rounded to cents, "assumed_gpus": their count, "unpriced_gpus": the unpriced GPUs' count,
    "unpriced_models": which models those are (:func:`unpriced_models`; {} when ``models`` is None)}``."""
    a, u = np.asarray(assumed, dtype=bool), np.asarray(unpriced, dtype=bool)
    return {"assumed_usd": round(float(np.nansum(np.asarray(usd, dtype=float)[a])), 2), "assumed_gpus": int(a.sum()),
            "unpriced_gpus": int(u.sum()), "unpriced_models": {} if models is None else unpriced_models(models, u)}


def unpriced_text(gpus: int, counts: dict | None = None) -> str:
    """What a total says of the GPUs it leaves out (docs/definitions.md#cost): ``2 GPU(s) unpriced, not in it
    (Quadro GP100 (2)); to price them, add a `cost.rates` entry ...`` (``gpus``: how many; ``counts``: which
    models, :func:`unpriced_models`, named when given); "" for none."""
    if not gpus:
        return ""
    named = f" ({models_text(counts)})" if counts else ""
    return f"{gpus} GPU(s) unpriced, not in it{named}; {HOW_TO_PRICE}"


def _rounded(values: np.ndarray) -> list:
    """Each value rounded to cents as Python's ``round`` does (not numpy's, which differs on ties)."""
    return [round(v, 2) for v in values.tolist()]


def _fraction(part, window) -> np.ndarray:
    """``part / window`` per row (int ns, exact below 2**53 as the analysis divides them), 0.0 where the window is
    not positive."""
    part, window = np.asarray(part, dtype=np.float64), np.asarray(window, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(window > 0, part / np.where(window > 0, window, 1.0), 0.0)


def price_rows(rows: list[dict], cost: CostConfig) -> list[dict]:
    """:func:`price_in_place` of copies of ``rows``: new dicts, ``rows`` left price-free."""
    return price_in_place([dict(row) for row in rows], cost)


def price_in_place(rows: list[dict], cost: CostConfig) -> list[dict]:
    """The price-free fleet rows ``rows`` (each holding :data:`PRICE_INPUTS`, its labels already joined: ``cluster``
    and ``gpu_model`` as they stand now) priced with the rate card ``cost`` (docs/definitions.md#cost), in place
    (returned), without :data:`PRICE_INPUTS` after: the rate (:func:`find_rate`, once per distinct GPU model,
    cluster and MIG share), its columns (``rate_model``, ``rate_usd_per_hour``, ``rate_source``,
    ``rate_assumed``, ``unpriced``), the rate warnings in their place among the row's warnings
    (:func:`rate_warnings`, ``mig-share-unknown`` last) and the status they make, and every dollar column by the
    one formula (:func:`idle_usd_per_month`, rounded to cents): the idle, each caveat's, the exposed
    communication's, the wait inside collectives' (missing where not measured) and each fix-first category's.
    Vectorised over the rows; nothing is cached. Raises ``KeyError`` when the default model is not on the card."""
    if not rows:
        return []
    n = len(rows)

    def col(name, default=None) -> list:
        return [r.get(name, default) for r in rows]

    # the rate of each distinct GPU (model, cluster, MIG share, why unnamed, not NVIDIA, a loader's own warning)
    keys = list(zip(col("gpu_model", ""), col("cluster", ""), col("_mig", False), col("_sms", 0), col("_board_sms", 0),
                    col("_model_note", ""), col("_not_nvidia", ""),
                    [WarningCode.GPU_MODEL_UNRESOLVED.value in str(c or "").split(",") for c in col("warning_codes")]))
    chosen: dict = {}
    for key in dict.fromkeys(keys):
        model, cluster, mig, sms, board_sms, note, not_nvidia, unresolved = key
        share = MigShare(int(sms or 0), int(board_sms or 0)) if mig else None
        choice = find_rate(model or "", cost, cluster, share, note or "", not_nvidia or "")
        others = [RowWarning(WarningCode.GPU_MODEL_UNRESOLVED, "")] if unresolved else []
        added = rate_warnings(choice, model or "", note or "", others, not_nvidia or "")
        tail = [RowWarning(WarningCode.MIG_SHARE_UNKNOWN,
                           "MIG instance of unknown size: the export gives no SM count for it, so its share of the "
                           "board is unknown and it is priced as the whole board (an upper bound)")
                ] if choice.share_unknown else []
        chosen[key] = (choice, added, tail)
    rate = np.fromiter((chosen[k][0].usd_per_gpu_hour for k in keys), dtype=np.float64, count=n)
    hours = float(cost.hours_per_month)
    window = np.asarray(col("window_ns", 0), dtype=np.float64)

    def usd(part) -> list:
        return share_usd(part, window, rate, hours)

    priced = {"idle_usd_per_month": usd(col("idle_ns", 0)),
              "comm_exposed_usd_per_month": usd(col("comm_exposed_ns", 0))}
    for cat in CAVEATS:
        priced[f"{cat}_usd_per_month"] = usd(col(f"cat_{cat}_ns", 0))
    for cat in CATEGORIES:
        priced[f"fix_{cat}_usd_per_month"] = usd(col(f"cat_{cat}_ns", 0))
    wait = col("collective_wait_ns")
    measured = np.array([w is not None and w == w for w in wait], dtype=bool)
    span = np.asarray(col("window_end_ns", 0), dtype=np.float64) - np.asarray(col("window_start_ns", 0), np.float64)
    waited = np.asarray([w if m else 0 for w, m in zip(wait, measured)], dtype=np.float64)
    wait_usd = share_usd(waited, span, rate, hours)
    priced["collective_wait_usd_per_month"] = [u if m else None for u, m in zip(wait_usd, measured)]
    for i, (row, key) in enumerate(zip(rows, keys)):
        choice, added, tail = chosen[key]
        new = {"rate_model": choice.model, "rate_usd_per_hour": choice.usd_per_gpu_hour, "rate_source": choice.source,
               "rate_assumed": choice.assumed, "unpriced": choice.unpriced}
        new.update((name, values[i]) for name, values in priced.items())
        if added or tail or row.get("_warnings_tail") or row.get("_codes_tail"):
            texts = [row.get("warnings") or "", *(w.text for w in added), row.get("_warnings_tail") or "",
                     *(w.text for w in tail)]
            codes = [*str(row.get("warning_codes") or "").split(","), *(w.code.value for w in added),
                     *str(row.get("_codes_tail") or "").split(","), *(w.code.value for w in tail)]
            new["warnings"] = "; ".join(t for t in texts if t)
            new["warning_codes"] = ",".join(dict.fromkeys(c for c in codes if c))
        if row.get("status") == "ok" and (added or tail) and row_status(added + tail) == "partial":
            new["status"] = "partial"
        for name in PRICE_INPUTS:
            row.pop(name, None)
        row.update(new)
    return rows


def share_usd(part_ns, window_ns, usd_per_gpu_hour, hours_per_month: float) -> list:
    """USD per month of shares of GPU windows, element-wise and rounded to cents: ``part_ns / window_ns`` (0 where
    the window is not positive) × ``usd_per_gpu_hour`` (NaN: unpriced, NaN dollars) × ``hours_per_month``
    (:func:`idle_usd_per_month`'s products, vectorised). Every dollar column of a fleet row comes from it: the
    reduce's (:func:`price_in_place`), the wait inside collectives matched across files and an older table's
    fix-first columns filled as it is read (:mod:`pipeline.fleet.pricing`)."""
    rate = np.asarray(usd_per_gpu_hour, dtype=np.float64)
    return _rounded(idle_usd_per_month_array(_fraction(part_ns, window_ns), rate, hours_per_month))


def idle_usd_per_month_array(idle_fraction: np.ndarray, usd_per_gpu_hour: np.ndarray, hours_per_month: float):
    """:func:`idle_usd_per_month` of arrays, element-wise, unrounded: the same products in the same order."""
    return idle_fraction * usd_per_gpu_hour * float(hours_per_month)
