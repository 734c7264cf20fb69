"""Analysis window rules (SPEC "The analysis window").

This module decides W = [w0, w1) for one GPU. Implemented rules, in order:
explicit trim (seconds on the report's own clock) and span (first kernel start
to last kernel end of that GPU, flagged untrimmed). The stable-iteration rules
(NVTX iterations, kernel periodicity) plug in between them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class Window:
    """W = [start_ns, end_ns) and the rule that chose it (``trim`` or ``span``)."""

    start_ns: int
    end_ns: int
    rule: str
    untrimmed: bool

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class WindowError(ValueError):
    """No window can be chosen (e.g. a trim that misses every kernel)."""


def span_window(kernel_starts, kernel_ends) -> Window:
    """First kernel start to last kernel end. Raises :class:`WindowError` when empty."""
    s = np.asarray(kernel_starts, dtype=np.int64)
    e = np.asarray(kernel_ends, dtype=np.int64)
    if s.size == 0:
        raise WindowError("no kernels on this GPU")
    return Window(int(s.min()), int(e.max()), "span", True)


def trim_window(start_s: float, end_s: float) -> Window:
    """Explicit window from seconds on the report's clock (export ns / 1e9).

    Converted with rounding to the nearest ns. Raises :class:`WindowError` if
    ``end_s <= start_s``.
    """
    w0 = int(round(float(start_s) * NS_PER_S))
    w1 = int(round(float(end_s) * NS_PER_S))
    if w1 <= w0:
        raise WindowError(f"--trim end ({end_s} s) must be after start ({start_s} s)")
    return Window(w0, w1, "trim", False)


def choose_window(kernel_starts, kernel_ends, rule: str = "span", trim_s=None) -> Window:
    """Apply the rules in order: explicit trim wins, else ``rule`` (``span``)."""
    if trim_s is not None:
        return trim_window(*trim_s)
    if rule != "span":
        raise WindowError(f"unknown window rule {rule!r} (known: span)")
    return span_window(kernel_starts, kernel_ends)
