"""Iterations on the GPU timeline, numbered, and one choice per job (docs/definitions.md#the-analysis-window).

NVTX ranges are CPU-side: with asynchronous launches the GPU runs an iteration's kernels later
than its range. :func:`project` puts each NVTX iteration on the GPU, as Nsight Systems' own
projection does: its kernels are those launched (matched by ``(pid, correlationId)``) by CUDA
calls that the marking thread made from inside the range (the call's start in [range start,
range end)); its extent runs from the first such kernel's start to the last one's end (a graph
launch's one correlationId may run many kernels: all count). An iteration that launched no
kernel of this GPU has no extent and is left out (:data:`NO_KERNEL_REASON`). When the marking
thread launched no kernel of this GPU from inside any of its ranges (ranges pushed by another
thread than the one that launches), the ranges are used as they are, CPU-side, and the window
note says so.

Choosing the window is split so that the GPUs of one job can agree:

1. :func:`plan_iterations` (per GPU, cheap): the iterations of the first rule that finds enough
   of them (``nvtx``, then ``periodic``; :mod:`pipeline.analysis.window`), on the GPU timeline,
   numbered (:func:`~pipeline.analysis.window.iteration_numbers`; ``periodic``: positions), and
   what this GPU alone leaves out (warm-up, untraced, outliers, no kernel) ->
   :class:`IterationPlan`; ``periodic`` iterations far shorter than NVTX iterations that were too few
   are a pattern inside a step, not iterations (:func:`sub_step`);
2. :func:`agree` (per job, over the plans of its GPUs): an iteration number is usable only if it
   is usable on every GPU of the job whose plan uses the same rule; the kept run is the longest
   run of consecutive usable numbers (consecutive in the sorted numbers any of those GPUs has;
   ties: the earliest; at most ``max_iterations``, the latest) -> :class:`Agreement`;
3. :func:`decide` / :func:`agreed_window` (per GPU): W spans this GPU's own extents of the kept
   numbers.

Stability is judged on each iteration's length on the GPU. For projected NVTX iterations that
is from its extent's start to the next projected iteration's start (or its own end, whichever
is later; the last one: its own end), so idle time after an iteration's last kernel (a
checkpoint save, an evaluation) counts against that iteration, as it did in its NVTX range;
CPU-side ranges and ``periodic`` iterations (launch to launch) already hold it.

Pure: arrays and frames in, plain values out.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..arrays import is_sorted
from ..config import WindowRules
from .intervals import overlap_with_each
from .window import (UNTRACED_REASON, Iterations, Window, WindowError, nvtx_iterations, periodic_iterations,
    span_window)

#: Why an iteration without a kernel on this GPU is left out.
NO_KERNEL_REASON = "no kernel of this GPU launched from inside it"
WARMUP_REASON = "warm-up"
#: Why an iteration over the GPU's graph-capture start-up is left out (docs/definitions.md#graph-capture).
STARTUP_REASON = "graph capture (start-up)"
OUTSIDE_REASON = "outside the longest stable run"
CAPPED_REASON = "beyond max_iterations"
#: What an agreement says of a GPU that lacks a number other GPUs of its job have.
ABSENT_REASON = "no such iteration there"


def project(it: Iterations, runtime: pd.DataFrame, kernels: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """GPU-side extents of NVTX iterations: ``(starts, ends)`` int64 ns, -1 where none.

    ``it``: iterations of one thread (``it.thread`` = (pid, tid)), disjoint, in time order.
    ``runtime``: CUDA calls with start, pid, tid, correlation_id; ``kernels``: this GPU's kernels
    with start, end, pid, correlation_id. A kernel belongs to iteration i when the call with its
    (pid, correlationId) on thread ``it.thread`` started inside [start_i, end_i); iteration i's
    extent runs from the earliest start to the latest end of its kernels. CorrelationId 0 (an
    export without them) never matches.
    """
    n = it.starts.size
    g0, g1 = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    if it.thread is None or runtime is None or runtime.empty or kernels.empty or n == 0:
        return g0, g1
    pid, tid = it.thread
    mine = _equal(runtime["pid"], pid) & _equal(runtime["tid"], tid)
    call_start = runtime["start"].to_numpy(np.int64)[mine]
    call_corr = _int64_at(runtime["correlation_id"], mine)
    at = _at_or_before(it.starts, call_start)
    inside = (at >= 0) & (call_corr != 0)
    inside[inside] = call_start[inside] < it.ends[at[inside]]
    call_corr, at = call_corr[inside], at[inside]
    if call_corr.size == 0:
        return g0, g1
    if not is_sorted(call_corr):  # (launches in time order: ascending correlationIds, as a stable sort leaves them)
        order = np.argsort(call_corr, kind="stable")
        call_corr, at = call_corr[order], at[order]
    theirs = _equal(kernels["pid"], pid)
    k_corr = kernels["correlation_id"].to_numpy(np.int64)
    k_start = kernels["start"].to_numpy(np.int64)
    k_end = kernels["end"].to_numpy(np.int64)
    if not theirs.all():  # (a GPU of one process: every kernel is)
        k_corr, k_start, k_end = k_corr[theirs], k_start[theirs], k_end[theirs]
    found = _first_of(call_corr, at, k_corr)
    hit = (found >= 0) & (k_corr != 0)
    which = found[hit]
    if which.size == 0:
        return g0, g1
    lo = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    hi = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    if is_sorted(which):  # each iteration's kernels one run of rows, as kernels in start order are: reduced per run
        heads = np.concatenate(([0], np.flatnonzero(which[1:] != which[:-1]) + 1))
        lo[which[heads]] = np.minimum.reduceat(k_start[hit], heads)
        hi[which[heads]] = np.maximum.reduceat(k_end[hit], heads)
    else:
        np.minimum.at(lo, which, k_start[hit])
        np.maximum.at(hi, which, k_end[hit])
    has = hi > np.iinfo(np.int64).min
    g0[has], g1[has] = lo[has], hi[has]
    return g0, g1


def _equal(column: pd.Series, value: int) -> np.ndarray:
    """``column == value`` of an integer id column (bool array), on its own integer type (no int64 copy)."""
    values = column.to_numpy()
    if values.dtype.kind != "i":
        return column.to_numpy(np.int64) == value
    info = np.iinfo(values.dtype)
    return values == value if info.min <= value <= info.max else np.zeros(values.size, dtype=bool)


def _int64_at(column: pd.Series, mask: np.ndarray) -> np.ndarray:
    """An integer id column's values where ``mask`` holds, as int64 (picked first, then widened)."""
    values = column.to_numpy()
    if values.dtype.kind != "i":
        return column.to_numpy(np.int64)[mask]
    return values[mask].astype(np.int64, copy=False)


def _at_or_before(starts: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``np.searchsorted(starts, times, side="right") - 1`` (``starts`` ascending): for each time, the last of
    ``starts`` at or before it (-1: none). Many times in ascending order (calls in start order) are counted off
    instead: each start found among them once, the counts summed."""
    if times.size > 8 * starts.size and is_sorted(times):
        first = np.searchsorted(times, starts, side="left")  # from here on, a time is at or after that start
        return np.cumsum(np.bincount(first, minlength=times.size + 1)[:times.size]) - 1
    return np.searchsorted(starts, times, side="right") - 1


#: Correlation ids up to this many times the calls' count (plus a million) are looked up in a table indexed by id
#: (:func:`_first_of`); sparser ones by binary search.
DENSE_IDS = 4


def _first_of(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each of ``wanted``, the value of the first of the equal ``keys`` (``keys`` sorted, stably: the first in
    the calls' order), -1 where no key is equal: a table indexed by id when the ids are dense enough
    (:data:`DENSE_IDS`), else a binary search. ``values`` >= 0. Int64 arrays; ``keys`` not empty."""
    lo, hi = int(keys[0]), int(keys[-1])
    if lo < 0 or hi >= DENSE_IDS * keys.size + (1 << 20):
        j = np.searchsorted(keys, wanted)
        out = np.full(wanted.size, -1, dtype=np.int64)
        hit = j < keys.size
        hit[hit] = keys[j[hit]] == wanted[hit]
        out[hit] = values[j[hit]]
        return out
    first = np.empty(keys.size, dtype=bool)
    first[0] = True
    np.not_equal(keys[1:], keys[:-1], out=first[1:])
    small = np.int32 if int(values.max()) < 2**31 else np.int64   # (iteration numbers: a table half the size)
    table = np.full(hi + 2, -1, dtype=small)   # the last slot: every id outside [0, hi]
    table[keys[first]] = values[first]
    return table[np.where((wanted >= 0) & (wanted <= hi), wanted, hi + 1)].astype(np.int64)


def gpu_lengths(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Length (ns) of each projected iteration for the stability test: from its start to the later
    of its own end and the next projected iteration's start (the last one: to its own end).
    Entries with start -1 (no extent) are skipped over and get length 0."""
    has = np.flatnonzero(starts >= 0)
    out = np.zeros(starts.size, dtype=np.int64)
    if has.size == 0:
        return out
    nxt = np.append(starts[has][1:], ends[has][-1])
    out[has] = np.maximum(ends[has], nxt) - starts[has]
    return out


def local_exclusions(lengths: np.ndarray, has: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray,
                     rules: WindowRules, untraced: tuple = ()) -> dict[int, str]:
    """``{position: reason}`` of the iterations one GPU leaves out on its own
    (:func:`exclusions_and_median` without the median)."""
    return exclusions_and_median(lengths, has, span_starts, span_ends, rules, untraced)[0]


def median_ns(values) -> int:
    """The median of int ns ``values``, exactly, rounded to the ns (a half ns, of an even count, to the
    even ns); 0 for none."""
    v = sorted(int(x) for x in values)
    if not v:
        return 0
    if len(v) % 2:
        return v[len(v) // 2]
    q, r = divmod(v[len(v) // 2 - 1] + v[len(v) // 2], 2)
    return q + 1 if r and q % 2 else q


def exclusions_and_median(lengths: np.ndarray, has: np.ndarray, span_starts: np.ndarray, span_ends: np.ndarray,
                          rules: WindowRules, untraced: tuple = (), startup: tuple = ()) -> tuple[dict[int, str], int]:
    """``({position: reason}, median ns)``: the iterations one GPU leaves out on its own, and the median
    length the outlier test compared them with (:func:`median_ns` of the iterations left after
    warm-up, untraced and no-kernel ones; 0 when none is left).

    Untraced: the iteration's span [``span_starts``, ``span_ends``) overlaps one of the
    ``untraced`` holes (``(starts, ends)`` ns, :func:`pipeline.analysis.caveats.untraced_spans`: the
    trace lost kernel records there); for an iteration without an extent on the GPU (``has``
    False) the span is its NVTX range, and it is untraced when that range overlaps a hole (its
    kernels were probably lost), else :data:`NO_KERNEL_REASON`. Warm-up: the first
    ``warmup_iterations`` of those with an extent (checked before untraced). Graph capture: an iteration
    with an extent whose span overlaps ``startup`` (``(starts, ends)`` ns: the GPU's graph-capture start-up,
    docs/definitions.md#graph-capture) is :data:`STARTUP_REASON` (after warm-up and untraced). Outliers:
    ``lengths`` > factor x median or < median / factor (median of the others left).
    """
    n = lengths.size
    hit: set[int] = set()
    if len(untraced) and len(untraced[0]):
        hit = {int(i) for i in np.flatnonzero(overlap_with_each(span_starts, span_ends, *untraced) > 0)}
    excluded: dict[int, str] = {int(i): UNTRACED_REASON if int(i) in hit else NO_KERNEL_REASON
                                for i in np.flatnonzero(~has)}
    for i in [int(i) for i in np.flatnonzero(has)][:rules.warmup_iterations]:
        excluded[i] = WARMUP_REASON
    excluded.update({i: UNTRACED_REASON for i in sorted(hit) if i not in excluded})
    if len(startup) and len(startup[0]):
        during = np.flatnonzero(has & (overlap_with_each(span_starts, span_ends, *startup) > 0))
        excluded.update({int(i): STARTUP_REASON for i in during if int(i) not in excluded})
    rest = [i for i in range(n) if i not in excluded]
    if rest:
        med = float(np.median(lengths[rest]))
        for i in rest:
            ratio = lengths[i] / med if med > 0 else 1.0
            if ratio > rules.outlier_factor or ratio < 1.0 / rules.outlier_factor:
                excluded[i] = f"outlier ({ratio:.2f}x median)"
    return excluded, median_ns(lengths[rest])


def longest_run(usable) -> list[int]:
    """Positions of the longest run of consecutive True entries of ``usable`` (ties: the earliest)."""
    best: list[int] = []
    run: list[int] = []
    for i, ok in enumerate(usable):
        if not ok:
            run = []
            continue
        run.append(i)
        if len(run) > len(best):
            best = list(run)
    return best


def compact_numbers(numbers) -> str:
    """``"3-16"`` for consecutive numbers, runs joined by commas (``"1-4,7,9-10"``); ``""`` for none."""
    nums = sorted(int(n) for n in numbers)
    parts, i = [], 0
    while i < len(nums):
        j = i
        while j + 1 < len(nums) and nums[j + 1] == nums[j] + 1:
            j += 1
        parts.append(str(nums[i]) if i == j else f"{nums[i]}-{nums[j]}")
        i = j + 1
    return ",".join(parts)


@dataclass(frozen=True)
class IterationPlan:
    """One GPU's iterations before the GPUs of its job agree (all tuples of int, ns; time order).

    ``source``: the rule that found them (``nvtx`` | ``periodic``), ``""`` when none applies (then
    only ``note`` says why). ``numbers``: each iteration's number; ``starts``/``ends``: its
    GPU-side extent (-1 when it has none); ``lengths``: the ns the stability test compared (0 for
    none); ``excluded``: ``(number, reason)`` this GPU leaves out on its own; ``boundaries``: the
    iteration start times the ``boundary`` and ``periodic`` categories use (the NVTX ranges' own
    starts for ``nvtx``); ``note``: earlier rules' abstentions and how the iterations were found;
    ``median_ns``: the median length the outlier test compared ``lengths`` with (0: none).
    ``kind``, ``kind_evidence``: the job kind this GPU's own names and ranges show, and why
    (:func:`pipeline.analysis.kind.detect_kind`; ``""``: not looked for); the GPUs of a job share one kind
    (:func:`pipeline.analysis.kind.job_kind`).
    """

    source: str = ""
    numbers: tuple = ()
    starts: tuple = ()
    ends: tuple = ()
    lengths: tuple = ()
    excluded: tuple = ()
    boundaries: tuple = ()
    note: str = ""
    median_ns: int = 0
    kind: str = ""
    kind_evidence: str = ""

    def usable(self) -> set:
        """The numbers this GPU can keep."""
        out = dict(self.excluded)
        return {n for n in self.numbers if n not in out}

    def to_json(self) -> dict:
        """A JSON-able dict (:meth:`from_json` reads it back)."""
        return {f.name: [list(x) for x in getattr(self, f.name)] if f.name == "excluded"
                else list(getattr(self, f.name)) if isinstance(getattr(self, f.name), tuple)
                else getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_json(cls, doc: dict) -> "IterationPlan":
        """The plan :meth:`to_json` wrote. Raises KeyError/TypeError/ValueError on another shape."""
        return cls(source=str(doc["source"]), numbers=tuple(int(x) for x in doc["numbers"]),
                   starts=tuple(int(x) for x in doc["starts"]), ends=tuple(int(x) for x in doc["ends"]),
                   lengths=tuple(int(x) for x in doc["lengths"]),
                   excluded=tuple((int(n), str(r)) for n, r in doc["excluded"]),
                   boundaries=tuple(int(x) for x in doc["boundaries"]), note=str(doc["note"]),
                   median_ns=int(doc.get("median_ns", 0)), kind=str(doc.get("kind", "")),
                   kind_evidence=str(doc.get("kind_evidence", "")))


def _plan_of(it: Iterations, runtime: pd.DataFrame | None, kernels: pd.DataFrame, rules: WindowRules,
             untraced: tuple, startup: tuple = ()) -> tuple[IterationPlan, int]:
    """The plan of detected iterations ``it`` and the length of this GPU's own stable run (capped)."""
    numbers = it.numbered()
    notes = [f"{it.source}: {it.note}"] if it.note else []
    starts, ends = it.starts, it.ends
    lengths = ends - starts
    span_starts, span_ends = starts, ends
    if it.source == "nvtx" and runtime is not None:
        g0, g1 = project(it, runtime, kernels)
        if (g0 >= 0).any():
            starts, ends, lengths = g0, g1, gpu_lengths(g0, g1)
            # on the GPU: from its extent's start over its length; without an extent: its NVTX range
            span_starts = np.where(g0 >= 0, g0, it.starts)
            span_ends = np.where(g0 >= 0, g0 + lengths, it.ends)
        else:
            notes.append(f"nvtx: the thread that marks the iterations (pid {it.thread[0]}, tid {it.thread[1]}) "
                         "launched no kernel of this GPU from inside them: the window is on their CPU-side ranges")
    has = starts >= 0
    excluded, median = exclusions_and_median(lengths, has, span_starts, span_ends, rules, untraced, startup)
    run = longest_run([i not in excluded for i in range(numbers.size)])
    if rules.max_iterations:
        run = run[-rules.max_iterations:]
    plan = IterationPlan(
        source=it.source, numbers=tuple(int(x) for x in numbers), starts=tuple(int(x) for x in starts),
        ends=tuple(int(x) for x in ends), lengths=tuple(int(x) for x in lengths),
        excluded=tuple(sorted((int(numbers[i]), why) for i, why in excluded.items())),
        boundaries=tuple(int(x) for x in it.starts), note="; ".join(notes), median_ns=median)
    return plan, len(run)


def plan_iterations(kernels: pd.DataFrame, nvtx: pd.DataFrame, runtime: pd.DataFrame | None = None,
                    rules: WindowRules = WindowRules(), rule: str = "auto", untraced: tuple = (),
                    startup: tuple = ()) -> IterationPlan:
    """One GPU's :class:`IterationPlan` under window ``rule`` (``auto``: nvtx, then periodic; or a
    strict ``nvtx`` / ``periodic``): the first rule whose iterations hold a run of at least
    ``min_iterations`` that this GPU alone could keep; else a plan without source whose note says
    why each rule abstained. Under ``auto``, ``periodic`` also abstains when NVTX iterations were found
    but too few and its iterations are far shorter than theirs (:func:`sub_step`).

    ``kernels``: this GPU's kernels (start, end, pid, stream_id, correlation_id, name); ``nvtx``:
    the ranges of its processes (start, end, pid, tid, text); ``runtime``: their CUDA calls
    (start, pid, tid, correlation_id; ``None``: no projection, the NVTX ranges are used as they
    are); ``untraced``: holes where the trace lost records (iterations over them are left out);
    ``startup``: the GPU's graph-capture start-up (iterations over it are left out, :func:`exclusions_and_median`).
    Raises :class:`~pipeline.analysis.window.WindowError` for an unknown rule.
    """
    if rule not in ("auto", "nvtx", "periodic"):
        raise WindowError(f"unknown window rule {rule!r} (known: auto, span, nvtx, periodic)")
    detectors = {"nvtx": lambda: nvtx_iterations(nvtx, rules),
                 "periodic": lambda: periodic_iterations(kernels, rules)}
    notes = []
    steps: IterationPlan | None = None   # the NVTX iterations, when they abstained
    for name in (("nvtx", "periodic") if rule == "auto" else (rule,)):
        it = detectors[name]()
        if it is None:
            notes.append(f"{name}: no iterations found")
            continue
        plan, run = _plan_of(it, runtime, kernels, rules, untraced, startup)
        if plan.note:
            notes.append(plan.note)
        too_short = sub_step(plan, steps, rules) if name == "periodic" else ""
        if too_short:
            notes.append(too_short)
            continue
        if run >= rules.min_iterations:
            return dataclasses.replace(plan, note="; ".join(notes))
        notes.append(f"{it.source}: only {run} usable iteration(s) of {it.starts.size} "
                     f"(need {rules.min_iterations})")
        steps = plan if name == "nvtx" else steps
    return IterationPlan(note="; ".join(notes))


def median_length(plan: IterationPlan) -> float:
    """Median (ns) of the lengths of ``plan``'s iterations that have one (> 0; an NVTX iteration
    without a kernel on the GPU has none); 0.0 when none has."""
    lengths = [x for x in plan.lengths if x > 0]
    return float(np.median(lengths)) if lengths else 0.0


def sub_step(periodic: IterationPlan, steps: IterationPlan | None, rules: WindowRules) -> str:
    """Why the ``periodic`` iterations are a pattern inside a step rather than iterations, or ``""``.

    When the NVTX iterations (``steps``: their plan, which abstained: too few usable ones) exist, a
    kernel period whose median length is below their median length / ``outlier_factor`` (what the
    outlier test would call far too short an iteration) repeats within a step (a layer, a micro-batch),
    so its window would cut a step apart: the rule abstains. ``steps`` None (no NVTX iterations), or
    periodic iterations as long as the steps: ``""``. Lengths: :func:`median_length`.
    """
    if steps is None:
        return ""
    step, period = median_length(steps), median_length(periodic)
    if step <= 0 or period <= 0 or period * rules.outlier_factor >= step:
        return ""
    return (f"periodic: its iterations (median {period / 1e6:,.3f} ms) are shorter than the NVTX iterations "
            f"(median {step / 1e6:,.3f} ms) / {rules.outlier_factor:g}: a pattern inside a step, not an iteration")


@dataclass(frozen=True)
class Agreement:
    """What the GPUs of one job whose plans use rule ``source`` keep (numbers, tuples of int).

    ``kept``: the kept run; ``capped``: usable numbers of the run left out by ``max_iterations``;
    ``blame``: ``(number, report, gpu key, reason)`` for every GPU on which a number of the union
    is not usable (its own reason, or :data:`ABSENT_REASON`); ``gpus``: ``(report, gpu key)`` of
    the GPUs that agreed.
    """

    source: str
    kept: tuple = ()
    capped: tuple = ()
    blame: tuple = ()
    gpus: tuple = ()

    def reason(self, number: int, me: tuple) -> str:
        """Why GPU ``me`` = ``(report, gpu key)`` leaves out ``number``, which it could keep itself."""
        if number in self.capped:
            return CAPPED_REASON
        others = [b for b in self.blame if b[0] == number and (b[1], b[2]) != tuple(me)]
        if others:
            mine = [b for b in others if b[1] == me[0]]
            _, report, gpu, why = (mine or others)[0]
            where = gpu if report == me[0] else f"{gpu} in {os.path.basename(str(report))}"
            return f"excluded on another GPU of the job (gpu {where}: {why})"
        return OUTSIDE_REASON

    def to_json(self) -> dict:
        """A JSON-able dict (:meth:`from_json` reads it back)."""
        return {"source": self.source, "kept": list(self.kept), "capped": list(self.capped),
                "blame": [list(b) for b in self.blame], "gpus": [list(g) for g in self.gpus]}

    @classmethod
    def from_json(cls, doc: dict) -> "Agreement":
        return cls(source=str(doc["source"]), kept=tuple(int(x) for x in doc["kept"]),
                   capped=tuple(int(x) for x in doc["capped"]),
                   blame=tuple((int(n), str(r), str(g), str(w)) for n, r, g, w in doc["blame"]),
                   gpus=tuple((str(r), str(g)) for r, g in doc["gpus"]))


def agree(plans, rules: WindowRules = WindowRules()) -> dict[str, Agreement]:
    """The :class:`Agreement` of each rule among the plans of one job's GPUs.

    ``plans``: ``((report, gpu key), IterationPlan)`` pairs (plans without source take no part).
    For each rule, over the GPUs whose plan uses it: the union of their numbers, sorted; a number
    is usable when every one of them has it and can keep it; the kept run is the longest run of
    usable numbers adjacent in that union (ties: the earliest), capped to the latest
    ``max_iterations`` when set. Returns ``{source: Agreement}``.
    """
    groups: dict[str, list] = {}
    for me, plan in plans:
        if plan is not None and plan.source:
            groups.setdefault(plan.source, []).append((tuple(str(x) for x in me), plan))
    out = {}
    for source, group in sorted(groups.items()):
        group.sort(key=lambda g: g[0])
        union = sorted(set().union(*(p.numbers for _, p in group)))
        usable = [(me, p.usable(), dict(p.excluded), set(p.numbers)) for me, p in group]
        blame = []
        for n in union:
            for me, ok, why, has in usable:
                if n not in ok:
                    blame.append((n, me[0], me[1], why.get(n, ABSENT_REASON) if n in has else ABSENT_REASON))
        run = [union[i] for i in longest_run([all(n in ok for _, ok, _, _ in usable) for n in union])]
        capped: list[int] = []
        if rules.max_iterations and len(run) > rules.max_iterations:
            capped, run = run[:-rules.max_iterations], run[-rules.max_iterations:]
        out[source] = Agreement(source, kept=tuple(run), capped=tuple(capped), blame=tuple(blame),
                                gpus=tuple(me for me, _ in group))
    return out


@dataclass(frozen=True)
class Decision:
    """How one GPU's window follows from its plan and its job's agreement.

    ``rule``: the plan's source when at least ``min_iterations`` numbers are kept, else ``""``
    (the iteration rules abstain; ``why`` says so); ``kept``: the kept numbers (empty when
    abstaining); ``excluded``: ``(number, reason)`` of every other number of this GPU.
    """

    rule: str
    kept: tuple
    excluded: tuple
    why: str = ""


def decide(plan: IterationPlan, agreement: Agreement, rules: WindowRules, me: tuple) -> Decision:
    """:class:`Decision` of GPU ``me`` = ``(report, gpu key)`` with ``plan`` under ``agreement``
    (the agreement of ``plan.source`` among its job's GPUs)."""
    mine = set(plan.numbers)
    kept = tuple(n for n in agreement.kept if n in mine)
    if len(kept) < rules.min_iterations:
        many = len(agreement.gpus) > 1
        return Decision("", (), (), f"{plan.source}: only {len(kept)} usable iteration(s) "
                        + (f"on every GPU of the job ({len(agreement.gpus)} GPUs; " if many else "(")
                        + f"need {rules.min_iterations})")
    own = dict(plan.excluded)
    keep = set(kept)
    excluded = tuple((n, own[n] if n in own else agreement.reason(n, me))
                     for n in plan.numbers if n not in keep)
    return Decision(plan.source, kept, excluded)


def agreed_window(plan: IterationPlan, agreement: Agreement, rules: WindowRules,
                  me: tuple = ("", "")) -> tuple[Window | None, str]:
    """The window of GPU ``me`` over its own extents of the numbers ``agreement`` keeps, or
    ``(None, reason)`` when fewer than ``min_iterations`` are kept (:func:`decide`)."""
    d = decide(plan, agreement, rules, me)
    if not d.rule:
        return None, d.why
    at = {n: i for i, n in enumerate(plan.numbers)}
    idx = np.array([at[n] for n in d.kept], dtype=np.int64)
    starts, ends = np.array(plan.starts, dtype=np.int64), np.array(plan.ends, dtype=np.int64)
    lengths = np.array(plan.lengths, dtype=np.int64)[idx].astype(float)
    mean = float(lengths.mean())
    cv = float(lengths.std() / mean) if mean > 0 else 0.0
    status = dict(d.excluded)
    status.update({n: "kept" for n in d.kept})
    drawn = [i for i, s in enumerate(plan.starts) if s >= 0]
    extents = tuple((plan.numbers[i], plan.starts[i], plan.ends[i], status[plan.numbers[i]]) for i in drawn)
    return Window(int(starts[idx].min()), int(ends[idx].max()), plan.source, False, iterations=int(idx.size),
                  iteration_mean_ns=int(round(mean)), iteration_cv=round(cv, 4), excluded=d.excluded,
                  boundaries=plan.boundaries, note=plan.note, kept=d.kept, extents=extents,
                  lengths=tuple(int(plan.lengths[i]) for i in drawn), length_median_ns=int(plan.median_ns)), ""


#: An iteration's status in a ``--trim`` window's extents when its job kept it but it does not lie wholly inside
#: the trim window (docs/definitions.md#the-analysis-window).
OUTSIDE_TRIM = "outside the --trim window"


def trim_iterations(win: Window, plan: IterationPlan, agreement: Agreement | None = None,
                    rules: WindowRules = WindowRules(), me: tuple = ("", "")) -> Window:
    """The ``--trim`` window ``win`` with its stable iterations counted inside it only
    (docs/definitions.md#the-analysis-window): of the iterations ``agreement`` keeps for ``plan``
    (:func:`agreed_window`; None: this GPU alone), those whose GPU-side extent lies wholly inside
    ``[win.start_ns, win.end_ns)`` are ``kept`` (``iterations``, ``iteration_mean_ns``, ``iteration_cv`` over
    their stability-test lengths, as :func:`agreed_window`), the others kept by the job read
    :data:`OUTSIDE_TRIM`. W itself, its rule (``trim``) and its boundaries (none) are unchanged. ``win`` as it
    is when the plan has no iterations or the job keeps none."""
    if not plan.source:
        return win
    if agreement is None:
        agreement = agree([(me, plan)], rules)[plan.source]
    agreed, _ = agreed_window(plan, agreement, rules, me)
    if agreed is None:
        return win
    extents, kept, lengths = [], [], []
    for (n, s, e, status), length in zip(agreed.extents, agreed.lengths):
        if status == "kept":
            if s >= win.start_ns and e <= win.end_ns:
                kept.append(n)
                lengths.append(length)
            else:
                status = OUTSIDE_TRIM
        extents.append((n, s, e, status))
    if not kept:
        return dataclasses.replace(win, extents=tuple(extents), lengths=agreed.lengths,
                                   length_median_ns=agreed.length_median_ns)
    values = np.array(lengths, dtype=float)
    mean = float(values.mean())
    return dataclasses.replace(win, iterations=len(kept), iteration_mean_ns=int(round(mean)),
                               iteration_cv=round(float(values.std() / mean), 4) if mean > 0 else 0.0,
                               kept=tuple(kept), extents=tuple(extents), lengths=agreed.lengths,
                               length_median_ns=agreed.length_median_ns)


def plan_window(plan: IterationPlan, kernels: pd.DataFrame, rule: str = "auto", rules: WindowRules = WindowRules(),
                agreement: Agreement | None = None, me: tuple = ("", "")) -> Window:
    """The window of a GPU with ``plan`` under its job's ``agreement`` (``None``: this GPU alone):
    :func:`agreed_window`, else (``auto``) the span of ``kernels`` with the abstentions in its note.
    A strict ``nvtx`` / ``periodic`` ``rule`` raises :class:`~pipeline.analysis.window.WindowError`
    instead of falling back."""
    notes = [plan.note] if plan.note else []
    if plan.source:
        if agreement is None:
            agreement = agree([(me, plan)], rules)[plan.source]
        win, why = agreed_window(plan, agreement, rules, me)
        if win is not None:
            return win
        notes.append(why)
    if rule != "auto":
        raise WindowError("abstained: " + "; ".join(notes))
    return span_window(kernels["start"], kernels["end"], note="; ".join(notes))
