"""Labels and prices joined to price-free rows: the reduce's first step (docs/architecture.md#how-a-run-flows);
and a finished fleet table as a reader gets it (:func:`finished`): an older table's missing columns filled, or the
whole table priced again with the rate card a reader gives (an old output folder re-prices itself).

A stored result holds ns, fractions, categories, tiers and the GPU's own model, never a label of the day, a rate or
a dollar (:func:`pipeline.analysis.analyse.measure_gpu`). Every run joins the labels its configuration gives each
report now (``cluster``, ``job``, ``node``, ``rank``, ``gpu_model``; :meth:`pipeline.config.Config.labels_for`) and
prices the rows with its rate card (:func:`pipeline.analysis.cost.price_rows`), vectorised and never cached: a rate,
``cost.hours_per_month`` or a label rule that changes re-prices a stored fleet and analyses nothing again.
"""
from __future__ import annotations

import dataclasses

import pandas as pd

from ..analysis import cost, fixfirst
from ..analysis.confidence import KindFigures
from ..config import ConfidenceConfig, CostConfig
from ..io import plain_scalar
from ..model import WarningCode
from ..schema import NOT_ANALYSED, PRICE_INPUTS, missing_value

#: The labels a price-free row takes from the configuration of the day (``kind`` is not one: it chooses the
#: window, so it is part of the result's key, :func:`pipeline.store.results.result_key`).
JOINED = ("cluster", "job", "node", "rank", "gpu_model")


def price_free(row: dict) -> bool:
    """Whether ``row`` is a price-free row still to be labelled and priced (it holds :data:`PRICE_INPUTS`)."""
    return PRICE_INPUTS[0] in row


def label(row: dict, labels: dict) -> None:
    """Give the price-free ``row`` the labels of the day (``labels``: ``cfg.labels_for(report)``), in place: its
    ``cluster``, ``job`` and ``node``; its ``rank`` (the label's, else the trace's own, ``_rank``); its ``gpu_model``
    (the label's, else the GPU's own, ``_gpu_model``)."""
    row.update(cluster=labels.get("cluster", ""), job=labels.get("job", ""), node=labels.get("node", ""),
               rank=labels.get("rank") or row.get("_rank") or "",
               gpu_model=labels.get("gpu_model") or row.get("_gpu_model") or "")


def price_in_place(rows: list[dict], cfg, labelled: bool = True) -> list[dict]:
    """Each price-free row of ``rows`` (:func:`price_free`; the others, priced already, an error, a duplicate, are
    left alone) labelled (:func:`label`) and priced with ``cfg.cost`` (:func:`~pipeline.analysis.cost.price_in_place`),
    in place: the rows a run's results and the stored rows hand to the reduce (stored before). ``labelled`` False:
    the rows keep the labels they have (a finished table priced again, :func:`repriced`). Returns ``rows``.
    Raises ``KeyError`` when the default model is not on the rate card."""
    todo = [row for row in rows if price_free(row)]
    labels: dict = {}
    for row in todo if labelled else ():
        report = row["report"]
        if report not in labels:
            labels[report] = cfg.labels_for(report)
        label(row, labels[report])
    if todo:
        cost.price_in_place(todo, cfg.cost)
    return rows


def priced(rows: list[dict], cfg) -> list[dict]:
    """:func:`price_in_place` of copies of the price-free ``rows``; the others as they are: ``rows`` stay price-free
    (a worker's per-GPU JSON is written priced while its results are stored as they are)."""
    return price_in_place([dict(row) if price_free(row) else row for row in rows], cfg)


# ---------------------------------------------------------------------------------------------------------------
# A finished table as a reader gets it (gpu-idle report, the sweep's page, compare)

#: The manifest key under which a run folder or sweep night records the settings that price its fix-first
#: columns (:func:`pricing_settings`), so a table without those columns is filled as its run priced it.
PRICING = "pricing"


def pricing_settings(cfg) -> dict:
    """The settings of the configuration ``cfg`` (a :class:`~pipeline.config.Config`) that the fix-first
    columns of a fleet row depend on besides the row itself (docs/definitions.md#fix-first): ``{
    "hours_per_month": float, "confidence": {threshold: value}}`` (the ``confidence`` section's
    thresholds, docs/definitions.md#confidence-tiers). The rate is the row's own ``rate_usd_per_hour``
    (the run's rate card, overrides and MIG share)."""
    return {"hours_per_month": float(cfg.cost.hours_per_month), "confidence": dataclasses.asdict(cfg.confidence)}


#: The confidence settings an older run folder's manifest records under :data:`PRICING` (before the
#: ``confidence`` section existed) -> the thresholds they became.
_OLD_CONFIDENCE = {"min_confidence_iterations": "medium_min_iterations",
                   "min_confidence_window_ns": "medium_min_window_ns"}


def filled_pricing(settings: dict | None) -> dict:
    """``settings`` (a :func:`pricing_settings` dict, possibly partial or None) with every setting it does
    not name taken from the defaults (``cost.hours_per_month``, the ``confidence`` section): ``{
    "hours_per_month": float, "confidence": {threshold: value}}``. A manifest of older code records
    ``min_confidence_iterations`` and ``min_confidence_window_ns``: read as the medium thresholds."""
    given = settings or {}
    confidence = dataclasses.asdict(ConfidenceConfig())
    confidence.update({new: given[old] for old, new in _OLD_CONFIDENCE.items() if old in given})
    recorded = given.get("confidence")
    if isinstance(recorded, dict):
        confidence.update({k: v for k, v in recorded.items() if k in confidence})
    return {"hours_per_month": float(given.get("hours_per_month", CostConfig().hours_per_month)),
            "confidence": confidence}


def settings_hours(settings: dict | None) -> float:
    """The hours per month recorded ``settings`` (:func:`pricing_settings`, a folder's manifest's) priced with; the
    default ``cost.hours_per_month`` when they name none or no number."""
    hours = (settings or {}).get("hours_per_month")
    return float(hours) if isinstance(hours, (int, float)) else filled_pricing(None)["hours_per_month"]


def with_fix_columns(fleet: pd.DataFrame, settings: dict | None = None) -> pd.DataFrame:
    """``fleet`` with the per-GPU fix-first columns (:data:`~pipeline.analysis.fixfirst.FLEET_FIX_COLUMNS`).

    A table written before they existed (an older run folder or sweep night) gets them from its
    ``cat_<c>_ns``, ``window_ns``, ``iterations``, ``kernel_count``, ``iteration_spread_pct`` (unknown in a
    table without it) and the kind's figures (:meth:`~pipeline.analysis.confidence.KindFigures.of_row`: none in a
    table without them) with :func:`~pipeline.analysis.fixfirst.gpu_columns`, their dollars at the row's
    ``rate_usd_per_hour`` (:func:`~pipeline.analysis.cost.share_usd`) with the run's ``settings``
    (:func:`pricing_settings`, as its folder's manifest records them under :data:`PRICING`); a setting they do not
    name (a folder of code that recorded none) is the default (:func:`filled_pricing`). A table that has the
    columns is returned as is."""
    if all(c in fleet.columns for c in fixfirst.FLEET_FIX_COLUMNS):
        return fleet
    full = filled_pricing(settings)
    hours, thresholds = full["hours_per_month"], ConfidenceConfig(**full["confidence"])

    def ns(value) -> int:
        return 0 if value is None or pd.isna(value) else int(value)

    def spread(value):
        return None if value is None or pd.isna(value) else float(value)

    rows = []
    for r in fleet.to_dict("records"):
        if r["status"] in NOT_ANALYSED:
            rows.append({})
            continue
        cat_ns = {c: ns(r.get(f"cat_{c}_ns")) for c in fixfirst.fixable()}
        row = fixfirst.gpu_columns(cat_ns, ns(r["window_ns"]), ns(r.get("iterations")), ns(r.get("kernel_count")),
                                   spread(r.get("iteration_spread_pct")), thresholds, KindFigures.of_row(r))
        usd = cost.share_usd(list(cat_ns.values()), [ns(r["window_ns"])] * len(cat_ns),
                             [float(r["rate_usd_per_hour"])] * len(cat_ns), hours)
        row.update((f"fix_{c}_usd_per_month", u) for c, u in zip(cat_ns, usd))
        rows.append(row)
    added = pd.DataFrame(rows, index=fleet.index, columns=fixfirst.FLEET_FIX_COLUMNS)
    return pd.concat([fleet.drop(columns=[c for c in fixfirst.FLEET_FIX_COLUMNS if c in fleet.columns]), added],
                     axis=1)


def _priced_columns(row: dict) -> list[str]:
    """The columns of ``row`` that :func:`~pipeline.analysis.cost.price_in_place` writes (besides its warnings and
    status): the rate's, ``unpriced`` and every dollar column."""
    return [c for c in row if c.startswith("rate_") or c.endswith("_usd_per_month") or c == "unpriced"]


def _unpriced_again(row: dict) -> dict | str:
    """The finished fleet row ``row`` (an analysed GPU's) as the price-free row it was priced from, with the labels it
    has (``_gpu_model`` its ``gpu_model``), or why the table does not hold what pricing it again needs: a MIG
    instance (its share of the board), a GPU naming no model or with a rate warning other than
    ``model-not-on-rate-card`` (why it names none, where the warning sat). The rate warning its run gave it
    (:func:`~pipeline.analysis.cost.rate_warnings`, rebuilt from its rate columns) is taken out of its warnings; its
    place splits them into those before it and the tail after it, as the reduce had them."""
    source, model = str(row.get("rate_source") or ""), str(row.get("gpu_model") or "")
    codes = [c for c in str(row.get("warning_codes") or "").split(",") if c]
    if "MIG" in source:
        return "is a MIG instance (the table does not hold its share of the board)"
    if not model or model in ("None", "nan"):
        return "names no GPU model (the table does not hold why, which its rate warning quotes)"
    if {WarningCode.GPU_MODEL_UNRESOLVED.value, WarningCode.MIG_SHARE_UNKNOWN.value} & set(codes):
        return "has a rate warning the table cannot place again"
    rate = row.get("rate_usd_per_hour")
    old = cost.RateChoice(str(row.get("rate_model") or ""), float("nan") if rate is None else float(rate), source,
                          assumed=bool(row.get("rate_assumed")), unpriced=bool(row.get("unpriced")))
    added = cost.rate_warnings(old, model)
    texts = str(row.get("warnings") or "")
    head, tail, head_codes, tail_codes = texts, "", codes, []
    if added:
        text, code = "; ".join(w.text for w in added), added[0].code.value
        at = texts.find(text)
        if at < 0 or code not in codes:
            return "has a rate warning not in its warnings"
        head, tail = texts[:at].removesuffix("; "), texts[at + len(text):].removeprefix("; ")
        head_codes, tail_codes = codes[:codes.index(code)], codes[codes.index(code) + 1:]
    out = {k: (None if v is pd.NA or (isinstance(v, float) and v != v and k == "collective_wait_ns") else v)
           for k, v in row.items() if k not in _priced_columns(row)}
    out.update(warnings=head, warning_codes=",".join(head_codes), _gpu_model=model, _rank=row.get("rank") or "",
               _mig=False, _sms=0, _board_sms=0, _model_note="", _not_nvidia="", _warnings_tail=tail,
               _codes_tail=",".join(tail_codes))
    return out


#: What :func:`repriced` writes into a finished table's analysed rows.
REPRICED = ("rate_model", "rate_usd_per_hour", "rate_source", "rate_assumed", "unpriced", "warnings", "warning_codes",
            "status")


def repriced(fleet: pd.DataFrame, cfg) -> pd.DataFrame:
    """The finished fleet table ``fleet`` priced again with the rate card of ``cfg`` (its ``cost`` section: rates,
    cluster overrides, ``hours_per_month``, ``unlisted``, ``default_model``) by the reduce's own pricing
    (:func:`price_in_place`, its labels kept: the rows' ``cluster`` and ``gpu_model`` as the table has them), every
    dollar, rate and rate-warning column of its analysed rows anew; analyses nothing. A warning the new card adds to
    a GPU whose run gave it none goes after its other warnings (the table does not say where the reduce's tail
    began). A GPU whose pricing the table does not hold in full (:func:`_unpriced_again`: a MIG instance, a GPU
    naming no model) keeps its run's rate and dollars, with a ``not-repriced`` warning saying why
    (:func:`kept_run_pricing` counts them). Raises ``KeyError`` when the default model is not on the card."""
    ok = fleet[~fleet["status"].isin(NOT_ANALYSED)]
    if not len(ok):
        return fleet
    rows = [_unpriced_again(r) for r in ok.to_dict("records")]
    kept = [i for i, why in zip(ok.index, rows) if isinstance(why, str)]
    fleet = _kept(fleet, dict(zip(kept, (why for why in rows if isinstance(why, str)))))
    ok, rows = ok.drop(index=kept), [r for r in rows if not isinstance(r, str)]
    if not rows:
        return fleet
    price_in_place(rows, cfg, labelled=False)
    new = pd.DataFrame(rows, index=ok.index)
    out = fleet.copy()
    for column in new.columns:
        source = _dollar_source(column)
        if column not in REPRICED and source is None or source is not None and source not in fleet.columns:
            continue   # not the price's; or dollars of a figure the table does not hold: left missing
        if column not in out.columns:   # a table written before the column: priced now
            out[column] = missing_value(column)
        values = new[column].astype(float) if source is not None else new[column]
        out.loc[ok.index, column] = values.to_numpy(dtype=out[column].dtype) if column in ("rate_assumed", "unpriced") \
            else values.to_numpy()
    return out


#: The start of the ``not-repriced`` warning of a GPU that keeps its run's pricing (:func:`repriced`).
KEPT = "not priced again with the rate card given, as this GPU "


def _kept(fleet: pd.DataFrame, why: dict) -> pd.DataFrame:
    """``fleet`` with each row ``why`` names (index -> the reason, :func:`_unpriced_again`) given a ``not-repriced``
    warning after its others: its rate and dollars stay its run's."""
    if not why:
        return fleet
    out = fleet.copy()
    code = WarningCode.NOT_REPRICED.value
    for i, reason in why.items():
        if code in str(out.at[i, "warning_codes"]).split(","):
            continue   # kept already (a table priced again twice)
        texts, codes = ("" if pd.isna(v) else str(v or "") for v in (out.at[i, "warnings"], out.at[i, "warning_codes"]))
        text = f"{KEPT}{reason}; its rate and dollars are its run's"
        out.at[i, "warnings"] = f"{texts}; {text}" if texts else text
        out.at[i, "warning_codes"] = f"{codes},{code}" if codes else code
    return out


def kept_run_pricing(fleet: pd.DataFrame) -> dict[str, int]:
    """The GPUs of a table priced again (:func:`repriced`) that kept their run's pricing, counted by why: ``{reason:
    GPUs}`` (the reason as their ``not-repriced`` warning gives it), {} when every GPU was priced again."""
    if "warning_codes" not in fleet.columns:
        return {}
    code = WarningCode.NOT_REPRICED.value
    counts: dict[str, int] = {}
    for codes, texts in zip(fleet["warning_codes"].fillna(""), fleet["warnings"].fillna("")):
        if code in str(codes).split(","):
            reason = str(texts)[str(texts).find(KEPT) + len(KEPT):].split("; its rate and dollars")[0]
            counts[reason] = counts.get(reason, 0) + 1
    return counts


def _dollar_source(column: str) -> str | None:
    """The ns column a dollar column of :func:`~pipeline.analysis.cost.price_in_place` prices (None: no dollar
    column)."""
    if not column.endswith("_usd_per_month"):
        return None
    stem = column[:-len("_usd_per_month")]
    return {"idle": "idle_ns", "comm_exposed": "comm_exposed_ns", "collective_wait": "collective_wait_ns"}.get(
        stem, f"cat_{stem[len('fix_'):] if stem.startswith('fix_') else stem}_ns")


def repriced_summary(summary: dict, row: dict) -> dict:
    """A GPU JSON's ``_summary`` (its run's fleet row, :func:`pipeline.fleet.outputs.gpu_summary`) with what
    :func:`repriced` wrote into that GPU's row ``row`` (its rate, dollar, rate-warning and status columns; JSON-safe
    scalars), the rest as the run wrote it: the GPU's page then prices as the report does."""
    return {**summary, **{k: plain_scalar(row[k]) for k in row
                          if (k in REPRICED or k.endswith("_usd_per_month")) and k in summary}}


def finished(fleet: pd.DataFrame, settings: dict | None, cfg=None) -> pd.DataFrame:
    """A finished fleet table as a reader gets it: without ``cfg``, as its run priced it (the fix-first columns of
    an older table filled at its rows' rates and the run's recorded ``settings``, :func:`with_fix_columns`); with
    ``cfg``, priced again with that configuration's rate card (:func:`repriced`; an older table's fix-first columns
    filled first, their dollars then priced again too; a GPU whose pricing the table does not hold keeps its run's)."""
    if not len(fleet):
        return fleet
    fleet = with_fix_columns(fleet, settings)
    return fleet if cfg is None else repriced(fleet, cfg)
