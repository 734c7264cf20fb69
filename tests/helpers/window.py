"""One GPU's window on its own, in one call: what the product computes through
:mod:`pipeline.analysis.iterations` (plan, then window), cut down for the window tests."""
from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.analysis.iterations import (CAPPED_REASON, OUTSIDE_REASON, local_exclusions, longest_run,
                                          plan_iterations, plan_window)
from pipeline.analysis.window import Iterations, Window, WindowRules, span_window, trim_window


def select_stable(it: Iterations, rules: WindowRules, untraced: tuple = ()) -> tuple[np.ndarray, dict]:
    """One GPU on its own: positions of the kept iterations and ``{position: reason}`` for the others.

    Warm-up: the first ``warmup_iterations``. Untraced: iterations overlapping one of the
    ``untraced`` holes (``(starts, ends)`` ns arrays, :func:`pipeline.analysis.caveats.untraced_spans`:
    the trace lost records there, so their idle is not measured). Outliers: length > factor × median
    or < median / factor (median of the other iterations). Kept: the longest run of consecutive
    usable iterations (ties: the earliest), capped to the latest ``max_iterations`` when set.
    (:func:`pipeline.analysis.iterations.agree` makes the same choice over the GPUs of a job.)
    """
    n = it.starts.size
    excluded = local_exclusions(it.ends - it.starts, np.ones(n, dtype=bool), it.starts, it.ends, rules, untraced)
    best = longest_run([i not in excluded for i in range(n)])
    if rules.max_iterations and len(best) > rules.max_iterations:
        for i in best[:-rules.max_iterations]:
            excluded[i] = CAPPED_REASON
        best = best[-rules.max_iterations:]
    for i in range(n):
        if i not in excluded and i not in best:
            excluded[i] = OUTSIDE_REASON
    return np.array(best, dtype=np.int64), excluded


def choose_window(kernels: pd.DataFrame, nvtx: pd.DataFrame, rule: str = "auto", trim_s=None,
                  rules: WindowRules = WindowRules(), untraced: tuple = (),
                  runtime: pd.DataFrame | None = None) -> Window:
    """Apply the rules in order and return the first window that applies, for one GPU on its own.

    ``rule``: ``auto`` (nvtx → periodic → span), ``span``, or a strict ``nvtx``
    / ``periodic`` that raises :class:`WindowError` (the abstention reason)
    instead of falling back. An explicit ``trim_s`` always wins. ``untraced``: holes
    ``(starts, ends)`` where the trace lost records; iterations overlapping them are not
    stable iterations (:func:`select_stable`). ``runtime``: the CUDA calls of the GPU's
    processes, to put NVTX iterations on the GPU timeline (``None``: their CPU-side ranges).
    The GPUs of a job agree through :mod:`pipeline.analysis.iterations` instead.
    """
    if trim_s is not None:
        return trim_window(*trim_s)
    if rule == "span":
        return span_window(kernels["start"], kernels["end"])
    plan = plan_iterations(kernels, nvtx, runtime, rules, rule, untraced)
    return plan_window(plan, kernels, rule, rules)
