"""The one name a GPU has for people (docs/outputs.md#gpu-names): model, number in its job, short id.

Here, below the report, so the analysis (the fix-first entries' diagnosis lines) names GPUs as every view does;
:mod:`pipeline.report.medical` gives the same functions.
"""
from __future__ import annotations

import functools
import re

import pandas as pd

from ..schema import JOB_KEY, analysed_rows, conform


@functools.lru_cache(maxsize=1024, typed=True)   # a fleet has a few models and thousands of GPUs
def short_model(model) -> str:
    """A GPU model for people: without the ``NVIDIA`` prefix, up to its first word holding a
    digit (``NVIDIA H100 80GB HBM3`` -> ``H100``, ``GeForce RTX 4090``), that word cut at its first ``-``
    after a digit (``NVIDIA A100-SXM4-80GB`` -> ``A100``), only letters, digits, ``.``, ``_``, ``-`` and
    spaces kept; ``GPU`` when nothing is left (model unknown: empty, None or NaN)."""
    text = "" if model is None or (not isinstance(model, str) and pd.isna(model)) else str(model)
    words = [re.sub(r"[^A-Za-z0-9._-]", "", w) for w in text.split()]
    words = [w for w in words if w]
    if words and words[0].upper() == "NVIDIA":
        words = words[1:]
    for i, w in enumerate(words):
        if any(c.isdigit() for c in w):
            words = words[:i] + [re.sub(r"^([^-]*\d[^-]*)-.*$", r"\1", w)]
            break
    return " ".join(words) or "GPU"


#: The characters a GPU's display name is made of (:func:`gpu_display_name`): safe in Markdown link text,
#: table cells and abbreviations, and in a terminal, with nothing to escape.
NAME_CHARS = "A-Za-z0-9._ #:/-"


def _safe(text: str) -> str:
    return re.sub(f"[^{NAME_CHARS}]", "", text)


def short_gpu_id(gpu_key) -> str:
    """The short part of a GPU key that a person can match with a tool's output
    (docs/outputs.md#gpu-names): the first 8 hex digits of a ``GPU-<uuid>`` (``7a2a3240``), ``MIG-`` and
    the first 8 of a MIG instance's, ``bus-`` and the PCI bus id without its domain (``bus-3b:00.0``),
    ``pid<P>/dev<D>`` as it is; any other key, its first 16 characters of :data:`NAME_CHARS`."""
    key = str(gpu_key)
    prefix = key[:4].upper()
    if prefix in ("GPU-", "MIG-"):
        digits = re.sub(r"[^0-9A-Za-z]", "", key[4:])[:8]
        return digits if prefix == "GPU-" else "MIG-" + digits
    if key.startswith("bus-"):
        return "bus-" + _safe(re.sub(r"^[0-9A-Fa-f]{4,8}:(?=[0-9A-Fa-f]{2}:)", "", key[4:]))[:16]
    if re.fullmatch(r"pid\d+/dev\d+", key):
        return key
    return _safe(key)[:16]


def gpu_display_name(model, number: int, gpu_key) -> str:
    """The one name a GPU has for people, in every view (the printed table, the report, the GPU pages, the
    medical records; docs/outputs.md#gpu-names): its model (:func:`short_model`), its number in its job
    (``#1`` ..) and its short id (:func:`short_gpu_id`), e.g. ``H100 #3 9b5c4f8d`` or
    ``A100 #1 pid84668/dev0``. Only :data:`NAME_CHARS`. The number makes it unique within the job; the
    views give the full ``gpu_key`` beside it or on hover."""
    return f"{short_model(model)} #{int(number)} {short_gpu_id(gpu_key)}"


def job_gpu_names(rows) -> dict:
    """``(report, gpu_key) -> name`` (:func:`gpu_display_name`) for one job's analysed rows (dicts with
    ``report``, ``gpu_key``, ``gpu_model``), numbered 1.. by report, then GPU key."""
    ordered = sorted(rows, key=lambda r: (str(r["report"]), str(r["gpu_key"])))
    return {(str(r["report"]), str(r["gpu_key"])): gpu_display_name(r.get("gpu_model"), i, r["gpu_key"])
            for i, r in enumerate(ordered, 1)}


def gpu_names(fleet: pd.DataFrame) -> dict:
    """``(report, gpu_key) -> name`` (:func:`gpu_display_name`) for every analysed row (status not
    ``error``) of ``fleet``, numbered within its job (:data:`~pipeline.schema.JOB_KEY`) as
    :func:`job_gpu_names` numbers them. A fleet table of any age (it needs only the job key, ``report``,
    ``gpu_key`` and ``gpu_model``, which every fleet table has)."""
    ok = analysed_rows(fleet)
    out: dict = {}
    if not len(ok):
        return out
    plain = conform(ok, ["gpu_model"])[[*JOB_KEY, "report", "gpu_key", "gpu_model"]].to_dict("records")
    by_job: dict = {}
    for r in plain:
        by_job.setdefault((str(r["cluster"]), str(r["job"])), []).append(r)
    for rows in by_job.values():
        out.update(job_gpu_names(rows))
    return out
