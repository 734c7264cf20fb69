"""Labels and prices joined to price-free rows: the reduce's first step (docs/architecture.md#how-a-run-flows).

A stored result holds ns, fractions, categories, tiers and the GPU's own model, never a label of the day, a rate or
a dollar (:func:`pipeline.analysis.analyse.measure_gpu`). Every run joins the labels its configuration gives each
report now (``cluster``, ``job``, ``node``, ``rank``, ``gpu_model``; :meth:`pipeline.config.Config.labels_for`) and
prices the rows with its rate card (:func:`pipeline.analysis.cost.price_rows`), vectorised and never cached: a rate,
``cost.hours_per_month`` or a label rule that changes re-prices a stored fleet and analyses nothing again.
"""
from __future__ import annotations

from ..analysis import cost
from ..schema import PRICE_INPUTS

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


def price_in_place(rows: list[dict], cfg) -> list[dict]:
    """Each price-free row of ``rows`` (:func:`price_free`; the others, priced already, an error, a duplicate, are
    left alone) labelled (:func:`label`) and priced with ``cfg.cost`` (:func:`~pipeline.analysis.cost.price_in_place`),
    in place: the rows a run's results and the stored rows hand to the reduce (stored before). Returns ``rows``.
    Raises ``KeyError`` when the default model is not on the rate card."""
    todo = [row for row in rows if price_free(row)]
    labels: dict = {}
    for row in todo:
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
