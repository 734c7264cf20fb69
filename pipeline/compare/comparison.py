"""The finished comparison's words: what every output of ``gpu-idle compare`` reads besides the comparison itself
(docs/definitions.md#compare). The one module of :mod:`pipeline.compare` that ``report/`` may import: a view
formats a finished comparison and never pairs, judges or reads a side (tests/test_layers.py)."""
from __future__ import annotations

import math

#: The two sides, in the order they are shown.
SIDES = ("before", "after")

#: The exit status of ``gpu-idle compare`` whose gate failed (:func:`pipeline.compare.result.gate`;
#: ``pipeline.cli.EXIT_STATUSES``).
GATE_FAILED = 3

#: The pairing basis under which two GPUs are known to be the same worker (docs/definitions.md#compare-pairing).
SAME_WORKER_BASIS = "rank"


def pair_title(job: dict) -> str:
    """A job pair's title: the before side's job name, ``-> <after's>`` when the names differ."""
    return job["before"][1] + ("" if job["before"] == job["after"] else f" -> {job['after'][1]}")


def position_only(job: dict) -> bool:
    """Whether the GPU pairs of ``job`` (a job pair of the comparison) are not known to be the same GPUs
    (docs/definitions.md#compare-pairing): paired by a position only (a CUDA device ordinal, the process order) while
    a side holds more than one GPU. Not when they were paired by ``rank`` (each pair is the same worker) or each
    side holds one GPU (the one pair is the job)."""
    gpus = [len(job["gpus"]) + sum(1 for u in job["unpaired"] if u["side"] == side) for side in SIDES]
    return job["basis"] != SAME_WORKER_BASIS and gpus != [1, 1]


def _not_same(job: dict) -> str:
    return f"these GPUs were paired by {job['basis']}, so a pair is not known to be the same GPU"


def per_gpu_withheld(job: dict) -> str:
    """Why the figures of each GPU pair of ``job`` (its differences and gaps) are withheld, the one answer every
    output of the comparison asks (docs/definitions.md#compare-pairing): a sentence when its pairs are
    :func:`position_only` and ``--force`` did not show them (``job["pairs_forced"]``), so only the job's totals
    compare the sides; ``""`` when each pair's figures are shown."""
    if not position_only(job) or job.get("pairs_forced"):
        return ""
    return (f"Each pair's difference is withheld: {_not_same(job)}, and only the job's totals compare the sides "
            "(--force shows each pair's figures, marked)")


def per_gpu_forced(job: dict) -> str:
    """The sentence of a job whose :func:`position_only` pairs' figures ``--force`` showed (``job["pairs_forced"]``),
    every one marked; ``""`` else."""
    if not (position_only(job) and job.get("pairs_forced")):
        return ""
    return f"Each pair's difference is shown with --force: {_not_same(job)}; every figure of a pair is marked"


def missing(x) -> bool:
    """Whether a figure of the comparison is missing: None (read back from JSON) or NaN (unpriced, unknown)."""
    return x is None or math.isnan(x)
