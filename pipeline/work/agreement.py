"""The GPUs of one job keep the same iterations, also when the job spans several reports.

Inside one report the GPUs agree before any is analysed (:func:`pipeline.work.tasks.analyse_report`:
every GPU of a report shares its labels, so its job). A job spread over several reports (one
export per rank or per node, put into one job by the labels: the same ``(cluster, job)``, as for
stragglers) is checked after the map: :func:`forced_agreements` computes the job's agreement
(:func:`pipeline.analysis.iterations.agree`) from the iteration plans of all its GPUs, analysed
now or stored, and names the reports one of whose GPUs kept something else than the job's
agreement gives it; those reports are analysed again with the job's agreement forced (a second
round through the same map, usually empty: :mod:`pipeline.runs.driver`). The plans do not depend
on the agreement, so the second round never changes the agreement: one round is enough.

The job's kind is agreed the same way (:func:`pipeline.analysis.kind.job_kind`, from the same plans): a
report whose rows name another kind than the job's, or whose window is not the whole capture when the job
serves (``--window auto``), is analysed again with the job's kind forced (``KIND_KEY`` in its agreement),
so every report of a serving job is whole-capture (docs/definitions.md#job-kind).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json

from ..analysis.iterations import IterationPlan, agree, compact_numbers, decide
from ..analysis.kind import KIND_KEY, LABEL_SOURCE, SERVING, job_kind
from ..schema import JOB_KEY


@dataclasses.dataclass(frozen=True)
class GpuEntry:
    """One GPU's part in its job's agreement: ``report`` (path), ``gpu`` (key), ``job``
    (``(cluster, job)``), its ``plan`` (None: unknown) and its fleet ``row``."""

    report: str
    gpu: str
    job: tuple
    plan: IterationPlan | None
    row: dict


def _job(row: dict) -> tuple:
    """The row's job: its :data:`~pipeline.schema.JOB_KEY` values as text (missing: empty)."""
    return tuple(str(row.get(c) or "") for c in JOB_KEY)


def entries_of(outcomes, rows=(), plans: dict | None = None) -> list[GpuEntry]:
    """The :class:`GpuEntry` of every GPU result in ``outcomes``
    (:class:`~pipeline.work.tasks.ReportOutcome`) and of stored ``rows`` with their ``plans``
    (``(report, gpu key) -> IterationPlan``). Rows without a GPU key (a report's error row) take no part."""
    out = []
    for outcome in outcomes:
        if outcome.failure is not None:
            continue
        for r in outcome.results:
            if r.row.get("gpu_key"):
                out.append(GpuEntry(str(r.row["report"]), str(r.row["gpu_key"]), _job(r.row), r.plan, r.row))
    for row in rows:
        if row.get("gpu_key"):
            key = (str(row["report"]), str(row["gpu_key"]))
            out.append(GpuEntry(key[0], key[1], _job(row), (plans or {}).get(key), row))
    return out


def expected_columns(plan: IterationPlan, agreement, cfg, me: tuple, serving: bool = False) -> tuple:
    """``(window_rule, kept_iterations, excluded_iterations)`` the fleet row of GPU ``me`` =
    ``(report, gpu key)`` gets from ``plan`` under ``agreement``, as
    :func:`pipeline.analysis.analyse.analyse_gpu` writes them (an abstention: ``("span", "", "")``
    under ``auto``; ``("", "", "")``, an error row, under a strict rule). ``serving``: the job serves and
    the window rule is ``auto`` (no ``--trim``), so its window is the whole capture, ``("span", "", "")``,
    whatever the plan."""
    if serving:
        return ("span", "", "")
    d = decide(plan, agreement, cfg.window, me)
    if d.rule:
        return (d.rule, compact_numbers(d.kept), "; ".join(f"{n}: {why}" for n, why in d.excluded))
    return ("span", "", "") if cfg.analysis.window == "auto" else ("", "", "")


def _actual_columns(row: dict) -> tuple:
    if row.get("status") == "error":
        return ("", "", "")
    return tuple(str(row.get(c) or "") for c in ("window_rule", "kept_iterations", "excluded_iterations"))


def forced_agreements(entries: list[GpuEntry], cfg) -> dict[str, dict]:
    """``{report: {source: Agreement, KIND_KEY: JobKind}}`` for each report of a job that spans several
    reports one of whose GPUs kept other iterations than the job's agreement gives it
    (:func:`expected_columns` against its row), or names another kind than the job's
    (:func:`~pipeline.analysis.kind.job_kind`; a ``kind`` label wins, so a labelled row is compared with its
    label). GPUs without a plan take no part, nor any under ``--trim``; the iterations of a plan without any
    (``span``, no rule applies) are compared only when the job serves; a GPU whose row is an error for another cause than
    the window is not compared (analysing it again would not help)."""
    by_job: dict[tuple, list] = {}
    for e in entries:
        by_job.setdefault(e.job, []).append(e)
    out = {}
    for _, group in sorted(by_job.items()):
        if len({e.report for e in group}) < 2:
            continue
        pairs = [((e.report, e.gpu), e.plan) for e in group]
        agreements = agree(pairs, cfg.window)
        kind = job_kind(pairs)
        for e in group:
            if e.plan is None:
                continue
            if e.row.get("status") == "error":
                if "abstained" not in str(e.row.get("error") or ""):
                    continue
            elif e.row.get("job_kind_source") != LABEL_SOURCE and e.row.get("job_kind") != kind.kind:
                out[e.report] = {**agreements, KIND_KEY: kind}
                continue
            labelled = e.row.get("job_kind_source") == LABEL_SOURCE
            serving = (e.row.get("job_kind") if labelled else kind.kind) == SERVING \
                and cfg.analysis.window == "auto" and cfg.analysis.trim_s is None
            if (not e.plan.source and not serving) or cfg.analysis.trim_s is not None:
                continue   # a --trim window is the user's, whatever the job keeps (its iterations counted inside it)
            want = expected_columns(e.plan, agreements.get(e.plan.source), cfg, (e.report, e.gpu), serving)
            if want != _actual_columns(e.row):
                out[e.report] = {**agreements, KIND_KEY: kind}
    return out


def agreement_token(agreements: dict) -> str:
    """12 hex digits naming a forced agreement (``{source: Agreement}``): part of the result key of
    a report analysed under it (:meth:`pipeline.store.results.ResultCache.slot`)."""
    doc = {source: a.to_json() for source, a in sorted(agreements.items())}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
