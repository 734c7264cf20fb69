"""The kind of a job, training, serving or unknown, and what it found (docs/definitions.md#job-kind).

A label (``labels: [{match: ..., kind: serving}]``) says it; otherwise a stated rule finds it on each
GPU (:func:`detect_kind`, patterns in :class:`~pipeline.config.WindowRules`) and the GPUs of one job
share one kind (:func:`job_kind`): ``serving`` when any of them found serving evidence, else
``training`` when any found training evidence, else ``unknown``. A serving job's window under
``--window auto`` is the whole capture (:mod:`pipeline.analysis.analyse`).

Pure: names and texts in, plain values out.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

import numpy as np

TRAINING, SERVING, UNKNOWN = "training", "serving", "unknown"
#: Every value of ``job_kind``.
KINDS = (TRAINING, SERVING, UNKNOWN)
#: ``job_kind_source`` of a kind a label gives.
LABEL_SOURCE = "label"
#: The key of the job's :class:`JobKind` in an agreement mapping (``{source: Agreement, KIND_KEY: JobKind}``,
#: :func:`pipeline.work.tasks.report_agreements`); never an iteration rule's name.
KIND_KEY = "job_kind"
#: Evidence text is cut to this many characters (kernel names run to hundreds).
_EVIDENCE_CHARS = 80


def _first_match(values, patterns) -> str | None:
    """The first of ``values`` (sorted, unique) that any of ``patterns`` finds (``re.search``, case-insensitive)."""
    if not patterns:
        return None
    pattern = re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)
    for value in sorted({str(v) for v in values}):
        if pattern.search(value):
            return value
    return None


def detect_kind(kernel_names, nvtx_texts, rules) -> tuple[str, str]:
    """``(kind, evidence)`` of one GPU from its kernel names and the NVTX range texts of its processes
    (iterables of text), by the rule of docs/definitions.md#job-kind: ``serving`` when a text matches
    ``rules.serving_ranges`` or a kernel name ``rules.serving_kernels``; else ``training`` when a text
    matches ``rules.training_ranges`` or a name ``rules.training_kernels``; else ``unknown`` (evidence
    ``""``). The evidence names the first match (in sorted order) and the setting it matched, e.g.
    ``NVTX range 'sglang::prefill' (window.serving_ranges)``. ``rules``: a
    :class:`~pipeline.config.WindowRules`."""
    texts = [t for t in np.asarray(nvtx_texts, dtype=object).tolist() if t is not None]
    names = [n for n in np.asarray(kernel_names, dtype=object).tolist() if n is not None]
    for kind, what, key, values in ((SERVING, "NVTX range", "serving_ranges", texts),
                                    (SERVING, "kernel", "serving_kernels", names),
                                    (TRAINING, "NVTX range", "training_ranges", texts),
                                    (TRAINING, "kernel", "training_kernels", names)):
        hit = _first_match(values, getattr(rules, key))
        if hit is not None:
            shown = hit if len(hit) <= _EVIDENCE_CHARS else hit[:_EVIDENCE_CHARS - 1] + "…"
            return kind, f"{what} {shown!r} (window.{key})"
    return UNKNOWN, ""


@dataclass(frozen=True)
class JobKind:
    """The kind of one job's GPUs agreed on: ``kind`` (:data:`KINDS`), the ``evidence`` that decided it
    (:func:`detect_kind`; ``""`` for unknown) and ``gpu``, ``(report, gpu key)`` where it was found."""

    kind: str = UNKNOWN
    evidence: str = ""
    gpu: tuple = ("", "")

    def source(self, me: tuple) -> str:
        """``job_kind_source`` of GPU ``me`` = ``(report, gpu key)``: the evidence, naming the GPU (and its
        report when another) it was found on when that is not ``me``; ``""`` when unknown."""
        if not self.evidence:
            return ""
        report, gpu = self.gpu
        if (report, gpu) == tuple(me):
            return self.evidence
        where = gpu if report == me[0] else f"{gpu} in {os.path.basename(str(report))}"
        return f"{self.evidence} on gpu {where}"

    def to_json(self) -> dict:
        """A JSON-able dict (part of a forced agreement's token, :func:`pipeline.work.agreement.agreement_token`)."""
        return {"kind": self.kind, "evidence": self.evidence, "gpu": list(self.gpu)}


def job_kind(plans) -> JobKind:
    """The :class:`JobKind` of one job from its GPUs' plans: ``((report, gpu key), IterationPlan)`` pairs
    (a plan None, or one read before plans had a kind, has no evidence). ``serving`` when any plan found
    serving evidence, else ``training`` when any found training evidence, else ``unknown``; the evidence
    is that of the first such GPU in ``(report, gpu key)`` order."""
    found = sorted((tuple(str(x) for x in me), plan.kind, plan.kind_evidence) for me, plan in plans
                   if plan is not None and plan.kind in (SERVING, TRAINING))
    for kind in (SERVING, TRAINING):
        for me, k, evidence in found:
            if k == kind:
                return JobKind(kind, evidence, me)
    return JobKind()


def row_kind(label: str | None, job: JobKind | None, plan, me: tuple) -> tuple[str, str]:
    """``(job_kind, job_kind_source)`` of GPU ``me`` = ``(report, gpu key)``: its ``label`` (``kind`` of its
    labels) wins, with source :data:`LABEL_SOURCE`; else its job's ``job`` (None: this GPU alone, from its own
    ``plan``'s evidence)."""
    if label:
        return str(label), LABEL_SOURCE
    if job is None:
        job = job_kind([(me, plan)])
    return job.kind, job.source(me)
