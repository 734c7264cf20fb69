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


def per_gpu_withheld(basis: str) -> str:
    """Why the per-GPU differences of a job pair paired by ``basis`` are withheld (docs/definitions.md#compare-pairing):
    ``""`` for ``rank`` (each pair is the same worker); else that each pair is only a position (a CUDA device ordinal,
    the process order) and not known to be the same GPU, so only the job's totals are compared."""
    if basis == SAME_WORKER_BASIS:
        return ""
    return (f"per-GPU differences withheld: these GPUs were paired by {basis}, so a pair is not known to be the "
            "same GPU; only the job's totals compare the sides (compare.json and compare.csv keep each pair's "
            "figures with its pairing)")


def missing(x) -> bool:
    """Whether a figure of the comparison is missing: None (read back from JSON) or NaN (unpriced, unknown)."""
    return x is None or math.isnan(x)
