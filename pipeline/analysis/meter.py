"""The sampled meter beside the truth (docs/definitions.md#sampled-meter).

A utilisation meter such as NVML's (what ``nvidia-smi`` shows as GPU-Util) does not measure how much of the
time a kernel ran: it asks, for each sample period, whether any kernel ran at all during it. Gaps of a few
milliseconds to tens of milliseconds hide between the samples, so a GPU idle most of the time can read close
to 100 %. :func:`sampled_periods` computes what such a meter would read over a window W, exactly, from the
kernel union's runs; ``busy_pct`` (device level) stands beside it.

Pure functions of int64 ns numbers and arrays.
"""
from __future__ import annotations

import numpy as np

from ..schema import FEW_PERIODS_PER_GPU  # noqa: F401  (no reading under it)


def sample_count(window_ns: int, sample_ns: int) -> int:
    """How many sample periods a window of ``window_ns`` ns holds at ``sample_ns`` ns each: periods are counted
    from the window's start, the last one shorter when ``sample_ns`` does not divide ``window_ns``, so
    ``ceil(window_ns / sample_ns)`` (0 for an empty window). Raises ValueError for ``sample_ns`` < 1."""
    window_ns, sample_ns = int(window_ns), int(sample_ns)
    if sample_ns < 1:
        raise ValueError(f"sample period {sample_ns} ns: must be at least 1 ns")
    return max(0, -(-window_ns // sample_ns))


def sampled_periods(run_starts, run_ends, w0: int, w1: int, sample_ns: int) -> tuple[int, int]:
    """``(periods, busy_periods)`` of the sampled meter over W = [w0, w1) (docs/definitions.md#sampled-meter).

    Args:
        run_starts, run_ends: the kernel union inside W, sorted disjoint int64 ns runs
            (:func:`pipeline.analysis.gaps.busy_runs`); runs of zero length are no kernel time.
        w0, w1: W's bounds (ns).
        sample_ns: the meter's sample period P (ns, ``meter.sample_ns``).
    Returns:
        ``periods`` = :func:`sample_count` of ``w1 - w0``: period i is [w0 + i·P, min(w0 + (i+1)·P, w1));
        ``busy_periods``: how many of them some kernel ran in for a positive time (a run [s, e) touches
        periods ⌊(s − w0)/P⌋ … ⌊(e − 1 − w0)/P⌋, so a kernel ending exactly on a boundary does not touch the
        period after it). The meter reads ``100 × busy_periods / periods`` %.
    Raises:
        ValueError: ``sample_ns`` < 1.
    """
    periods = sample_count(int(w1) - int(w0), sample_ns)
    s = np.asarray(run_starts, dtype=np.int64)
    e = np.asarray(run_ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if not s.size:
        return periods, 0
    p = np.int64(sample_ns)
    first = (s - np.int64(w0)) // p
    last = (e - 1 - np.int64(w0)) // p
    # the runs are sorted and disjoint, so ``first`` and ``last`` never decrease: each run adds the periods
    # after the last one an earlier run touched
    before = np.concatenate(([np.int64(-1)], last[:-1]))
    added = last - np.maximum(first, before + 1) + 1
    return periods, int(np.clip(added, 0, None).sum())




def enough_periods(periods) -> bool:
    """Whether a GPU's window of ``periods`` sample periods gives a meter reading (:data:`FEW_PERIODS_PER_GPU`)."""
    return int(periods) >= FEW_PERIODS_PER_GPU


def span_text(low: int, high: int) -> str:
    """``2`` or ``2–3``: a range of counts as the views write it."""
    return f"{int(low)}" if int(low) == int(high) else f"{int(low)}–{int(high)}"


def too_few_text(periods: list[int]) -> str:
    """What the views say of the GPUs whose windows hold too few sample periods for a reading (``periods``: each
    one's, all under :data:`FEW_PERIODS_PER_GPU`): ``only 2–3 sample period(s) per GPU on 24 GPU(s), under the 6 (1 s
    at the default 1/6 s) a meter reading needs``; ``""`` for none."""
    if not periods:
        return ""
    return (f"only {span_text(min(periods), max(periods))} sample period(s) per GPU on {len(periods)} GPU(s), under "
            f"the {FEW_PERIODS_PER_GPU} (1 s at the default 1/6 s) a meter reading needs")


def util_pct(busy_periods, periods) -> float:
    """What the sampled meter reads, % (0..100, 4 decimals): ``100 × busy_periods / periods``; NaN with no
    period."""
    return round(100.0 * int(busy_periods) / int(periods), 4) if int(periods) > 0 else float("nan")
