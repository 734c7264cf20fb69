"""Labels and prices joined to price-free rows: the reduce's first step (docs/architecture.md#how-a-run-flows).

A stored result holds ns, fractions, categories, tiers and the GPU's own model, never a label of the day, a rate or
a dollar (:func:`pipeline.analysis.analyse.measure_gpu`). Every run joins the labels its configuration gives each
report now (``cluster``, ``job``, ``node``, ``rank``, ``gpu_model``; :meth:`pipeline.config.Config.labels_for`) and
prices the rows with its rate card (:func:`pipeline.analysis.cost.price_rows`), vectorised and never cached: a rate,
``cost.hours_per_month`` or a label rule that changes re-prices a stored fleet and analyses nothing again.
"""
from __future__ import annotations

from ..analysis.cost import price_rows
from ..schema import PRICE_INPUTS

#: The labels a price-free row takes from the configuration of the day (``kind`` is not one: it chooses the
#: window, so it is part of the result's key, :func:`pipeline.store.results.result_key`).
JOINED = ("cluster", "job", "node", "rank", "gpu_model")


def price_free(row: dict) -> bool:
    """Whether ``row`` is a price-free row still to be labelled and priced (it holds :data:`PRICE_INPUTS`)."""
    return PRICE_INPUTS[0] in row


def labelled(row: dict, labels: dict) -> dict:
    """A copy of the price-free ``row`` with the labels of the day (``labels``: ``cfg.labels_for(report)``): its
    ``cluster``, ``job`` and ``node``; its ``rank`` (the label's, else the trace's own, ``_rank``); its ``gpu_model``
    (the label's, else the GPU's own, ``_gpu_model``)."""
    return {**row, "cluster": labels.get("cluster", ""), "job": labels.get("job", ""), "node": labels.get("node", ""),
            "rank": labels.get("rank") or row.get("_rank") or "",
            "gpu_model": labels.get("gpu_model") or row.get("_gpu_model") or ""}


def priced(rows: list[dict], cfg) -> list[dict]:
    """``rows`` with each price-free one (:func:`price_free`) labelled (:func:`labelled`) and priced with ``cfg.cost``
    (:func:`~pipeline.analysis.cost.price_rows`) as a new dict; every other row (priced already, an error, a duplicate)
    as it is, the same object. Raises ``KeyError`` when the default model is not on the rate card."""
    todo = [i for i, row in enumerate(rows) if price_free(row)]
    if not todo:
        return list(rows)
    labels: dict = {}
    for i in todo:
        report = rows[i]["report"]
        if report not in labels:
            labels[report] = cfg.labels_for(report)
    out = list(rows)
    for i, row in zip(todo, price_rows([labelled(rows[i], labels[rows[i]["report"]]) for i in todo], cfg.cost)):
        out[i] = row
    return out


def price_in_place(rows: list[dict], cfg) -> None:
    """:func:`priced` of ``rows``, each price-free dict replaced by its priced self in place (its results were stored
    before: the rows a run's results and stored rows hand to the reduce)."""
    for row, new in zip(rows, priced(rows, cfg)):
        if new is not row:
            row.clear()
            row.update(new)
