"""Analysis window rules (docs/definitions.md#the-analysis-window).

Whole-profile numbers are polluted by warm-up, checkpoint and evaluation
iterations, so W should be a run of stable iterations. Rules, in order:

1. ``trim``: explicit ``--trim START END`` (seconds on the report's own clock, parsed as
   decimals into exact integer ns);
2. ``nvtx``: NVTX iteration ranges of the processes driving the GPU whose text
   matches one of the configured patterns exactly (``re.fullmatch``), at least
   ``min_iteration_ns`` long (op-level ranges never qualify);
3. ``periodic``: iterations detected from the GPU's own kernel periodicity (under ``auto``, not when
   NVTX iterations that abstained are far longer: a pattern inside a step,
   :func:`pipeline.analysis.iterations.sub_step`);
4. ``span``: first kernel start to last kernel end, flagged untrimmed.

For rules 2 and 3, warm-up iterations and outliers (longer than
``outlier_factor`` × median, or shorter than median / ``outlier_factor``) are
dropped and the longest run of consecutive similar iterations is kept (at most
``max_iterations`` of them, the latest ones). Fewer than ``min_iterations``
usable iterations: the rule abstains and the next one is tried. NVTX iterations
are put on the GPU timeline first, and the GPUs of one job keep the same
iteration numbers (:mod:`pipeline.analysis.iterations`).

Everything here is pure: arrays and frames in, a :class:`Window` out.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..config import WindowRules, seconds_to_ns

NS_PER_S = 1_000_000_000

#: Each window rule (a :class:`Window`'s ``rule``, the ids of the module docstring, in its order) in words, as the
#: views people read name it (the GPU pages, the report, the medical records); the ids stay in the machine outputs
#: (``window_rule``) and the command line's ``--window``.
RULE_NAMES = {
    "trim": "a start and end given by hand",
    "nvtx": "the iterations the job marks itself (NVTX ranges)",
    "periodic": "iterations found in the rhythm of the GPU's kernels",
    "span": "the whole run of the GPU's kernels, first to last",
}


def rule_name(rule) -> str:
    """A window rule in words (:data:`RULE_NAMES`); a rule it does not know (none, an older run's): its own text."""
    return RULE_NAMES.get(str(rule), str(rule or "unknown"))


@dataclass(frozen=True)
class Window:
    """W = [start_ns, end_ns) and how it was chosen.

    ``rule``: trim | nvtx | periodic | span. ``iterations``: iterations inside W
    (0 for span; for trim the job's stable iterations wholly inside it,
    :func:`pipeline.analysis.iterations.trim_iterations`). ``iteration_mean_ns`` and ``iteration_cv`` describe them;
    ``excluded``: ``(iteration number, reason)`` pairs; ``boundaries``: the start
    times (ns) of every detected iteration (also those outside W), used by the
    ``boundary`` and ``periodic`` categories; ``note``: why earlier rules abstained.
    ``kept``: the numbers of the iterations inside W (the same on every GPU of a job,
    :mod:`pipeline.analysis.iterations`); ``extents``: ``(number, start ns, end ns, status)``
    of every iteration with a GPU-side extent, status ``"kept"`` or the reason it was left out;
    ``lengths``: each of those iterations' length (ns) for the stability test, in ``extents``' order (from
    its extent's start to the next iteration's start, or its own end when later:
    :func:`pipeline.analysis.iterations.gpu_lengths`); ``length_median_ns``: the median length the
    outlier test compared them with (0: none).
    """

    start_ns: int
    end_ns: int
    rule: str
    untrimmed: bool
    iterations: int = 0
    iteration_mean_ns: int = 0
    iteration_cv: float = 0.0
    excluded: tuple = ()
    boundaries: tuple = ()
    note: str = ""
    kept: tuple = ()
    extents: tuple = ()
    lengths: tuple = ()
    length_median_ns: int = 0

    @property
    def length_ns(self) -> int:
        return self.end_ns - self.start_ns


class WindowError(ValueError):
    """No window can be chosen (e.g. a trim that is empty, or a strict rule that abstains)."""


@dataclass(frozen=True)
class Iterations:
    """Detected iterations: ``starts``/``ends`` int64 ns arrays in time order, and their source.

    ``numbers``: each iteration's number (int64 array; ``None``: their positions 0, 1, ...);
    ``thread``: ``(pid, tid)`` of the thread whose NVTX ranges they are (``None`` for ``periodic``);
    ``note``: what people should know about the numbering.
    """

    starts: np.ndarray
    ends: np.ndarray
    source: str
    numbers: np.ndarray | None = None
    thread: tuple | None = None
    note: str = ""

    def numbered(self) -> np.ndarray:
        """The iteration numbers (int64), positions when none were given."""
        return np.arange(self.starts.size, dtype=np.int64) if self.numbers is None else self.numbers


_DIGITS = re.compile(r"\d+")


def iteration_numbers(texts) -> tuple[np.ndarray, str]:
    """Numbers of NVTX iterations from their texts, in time order: the last run of digits of each
    text (``Iteration 12`` -> 12, ``ProfilerStep#7`` -> 7) when every text has one and they increase
    strictly; else their positions 0, 1, ... (``train_step`` ranges, or numbering that restarts,
    e.g. per epoch). Returns ``(numbers int64, note)``; the note says why digits were not used."""
    found = [_DIGITS.findall(str(t)) for t in texts]
    positions = np.arange(len(found), dtype=np.int64)
    if not found or not any(found):
        return positions, ""
    if not all(found):
        return positions, "iterations numbered by position (not every iteration text has a number)"
    values = [int(f[-1]) for f in found]
    if max(values) > np.iinfo(np.int64).max:
        return positions, "iterations numbered by position (a number in their texts is beyond int64)"
    numbers = np.array(values, dtype=np.int64)
    if numbers.size > 1 and not bool(np.all(np.diff(numbers) > 0)):
        return positions, "iterations numbered by position (their texts' numbers do not increase)"
    return numbers, ""


def span_window(kernel_starts, kernel_ends, note: str = "", after_ns: int | None = None) -> Window:
    """First kernel start to last kernel end; with ``after_ns`` (the end of the GPU's graph-capture
    start-up, :func:`pipeline.analysis.graphcapture.phase_end`), from the first kernel starting at or after
    it, when one does (docs/definitions.md#graph-capture). Raises :class:`WindowError` when empty."""
    s = np.asarray(kernel_starts, dtype=np.int64)
    e = np.asarray(kernel_ends, dtype=np.int64)
    if s.size == 0:
        raise WindowError("no kernels on this GPU")
    later = s[s >= after_ns] if after_ns is not None else s[:0]
    return Window(int(later.min() if later.size else s.min()), int(e.max()), "span", True, note=note)


def trim_window(start_s, end_s) -> Window:
    """Explicit window from seconds on the report's clock (export ns / 1e9), exactly in integer ns:
    decimal text (``"1776781226.561295056"``), :class:`~decimal.Decimal` or int seconds, or a float
    small enough to hold every ns (:func:`pipeline.config.seconds_to_ns`; a float never carries the
    value, so ns on the UTC-epoch clock of ~1.78e9 s stay exact).

    Raises :class:`WindowError` if ``end_s <= start_s`` or either is not such a number of seconds.
    """
    try:
        w0, w1 = seconds_to_ns(start_s), seconds_to_ns(end_s)
    except ValueError as exc:
        raise WindowError(f"--trim: {exc}") from None
    if w1 <= w0:
        raise WindowError(f"--trim end ({end_s} s) must be after start ({start_s} s)")
    return Window(w0, w1, "trim", False)


def nvtx_iterations(nvtx: pd.DataFrame, rules: WindowRules) -> Iterations | None:
    """Iteration ranges from NVTX: exact pattern match, long enough, top-level only.

    ``nvtx``: frame with start, end, pid, tid, text (ns). When several threads
    mark iterations, the thread with the most iterations wins (ties: lowest
    pid, tid). Nested matches (a range inside another match) are dropped. The
    iterations carry the winning thread (``thread``) and their numbers
    (:func:`iteration_numbers`). Returns ``None`` when no range matches. (numpy throughout: it runs once per
    GPU, and pandas' per-call overhead was most of its time on small reports.)
    """
    if nvtx.empty:
        return None
    pattern = re.compile("|".join(f"(?:{p})" for p in rules.iteration_patterns))
    codes, texts = pd.factorize(nvtx["text"].fillna("").astype(str), sort=False)
    matches = np.fromiter((bool(pattern.fullmatch(t.strip())) for t in texts), dtype=bool, count=len(texts))
    starts, ends = nvtx["start"].to_numpy(np.int64), nvtx["end"].to_numpy(np.int64)
    hit = matches[codes] & ((ends - starts) >= rules.min_iteration_ns)
    if not hit.any():
        return None
    pids, tids = nvtx["pid"].to_numpy(np.int64)[hit], nvtx["tid"].to_numpy(np.int64)[hit]
    _, which, counts = np.unique(np.stack([pids, tids], axis=1), axis=0, return_inverse=True,
                                 return_counts=True)
    threads = np.unique(np.stack([pids, tids], axis=1), axis=0)
    best = int(np.argmax(counts))   # threads sorted by (pid, tid): the first max wins ties
    mine = which.reshape(-1) == best
    text_of = np.asarray(texts, dtype=object)[codes[hit][mine]]
    starts, ends = starts[hit][mine], ends[hit][mine]
    order = np.lexsort((ends, starts))
    starts, ends, text_of = starts[order], ends[order], text_of[order]
    outer_end = np.maximum.accumulate(ends)
    top = np.ones(starts.size, dtype=bool)
    top[1:] = starts[1:] >= outer_end[:-1]
    numbers, note = iteration_numbers([str(t).strip() for t in text_of[top]])
    return Iterations(starts[top], ends[top], "nvtx", numbers=numbers,
                      thread=(int(threads[best][0]), int(threads[best][1])), note=note)


def periodic_iterations(kernels: pd.DataFrame, rules: WindowRules) -> Iterations | None:
    """Iterations from the kernel stream's own periodicity.

    Works on the busiest stream (the most kernels; ties: lowest pid, stream),
    in launch order, by *position*, not time: a training step launches the same
    sequence of kernels every iteration, so a kernel that runs once per
    iteration recurs every K positions even when iteration times vary. A name is
    *regular* when it occurs at least ``min_iterations + 1`` times, at least
    ``periodic_min_regular_share`` of its position spacings equal their median
    K (within ±10 %, at least ±1: planted work varies the launch count a
    little), K >= 2, and its median time spacing is at least ``min_iteration_ns``.
    The period K is the one shared by the most regular names (ties: the larger
    K); the earliest of those names anchors the iterations: iteration i runs
    from its i-th launch to its (i+1)-th. Returns ``None`` when no name is regular.
    """
    if kernels.empty:
        return None
    sizes = kernels.groupby(["pid", "stream_id"]).size().reset_index(name="n")
    top = sizes.sort_values(["n", "pid", "stream_id"], ascending=[False, True, True]).iloc[0]
    stream = kernels[(kernels["pid"] == top["pid"]) & (kernels["stream_id"] == top["stream_id"])]
    stream = stream.sort_values(["start", "end", "correlation_id"], kind="stable").reset_index(drop=True)
    starts = stream["start"].to_numpy(np.int64)
    regular = []
    for name, positions in stream.groupby("name", sort=True).indices.items():
        if positions.size < rules.min_iterations + 1:
            continue
        steps = np.diff(positions)
        period = int(np.median(steps))
        if period < 2 or float(np.mean(np.abs(steps - period) <= _slack(period))) < rules.periodic_min_regular_share:
            continue
        if float(np.median(np.diff(starts[positions]))) < rules.min_iteration_ns:
            continue
        regular.append((period, int(positions[0]), str(name), positions))
    if not regular:
        return None
    periods = [r[0] for r in regular]
    support = {k: sum(abs(q - k) <= _slack(k) for q in periods) for k in set(periods)}
    best = max(support, key=lambda k: (support[k], k))
    _, _, _, positions = min((r for r in regular if abs(r[0] - best) <= _slack(best)), key=lambda r: r[1:3])
    t = starts[positions]
    return Iterations(t[:-1], t[1:], "periodic")


def _slack(period: int) -> int:
    """Launch-count tolerance of a period of ``period`` kernels: ±10 %, at least ±1."""
    return max(1, int(round(0.1 * period)))


#: Why an iteration overlapping an untraced hole is left out of the window.
UNTRACED_REASON = "untraced (lost kernel records)"
