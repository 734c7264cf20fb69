"""Explain each gap: CPU-side CUDA API calls and copy-engine work inside it.

docs/definitions.md#attribution: for a gap on a GPU, the CUDA runtime API calls of the
processes that drive that GPU that overlap the gap, each counted by its
intersection with the gap (not its full length), grouped by normalised API name
and sorted by overlapped time. Copy-engine work (memcpy/memset) overlapping the
gap is reported separately.

Overlap of many calls with many gaps is computed without a join: for a set of
intervals, ``F(t) = sum_i |[s_i, e_i) ∩ (-inf, t)|`` is piecewise linear and
``F(t) = n_s(t)·t − S_s(t) − (n_e(t)·t − S_e(t))`` where ``n_s, S_s`` count and
sum the starts before ``t`` (``n_e, S_e`` the ends). The summed overlap with a
gap ``[a, b)`` is ``F(b) − F(a)``: ``O((calls + gaps) · log calls)`` per name.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..arrays import row_groups
from ..config import CategoryRules
from ..frames import codes_of, with_columns
from ..model import COPY_DIRECTIONS, GAP_CATEGORIES, HOST_MEMORY, RowWarning, WarningCode
from . import caveats
from . import intervals as iv

_NO_RUNS = (np.zeros(0, np.int64), np.zeros(0, np.int64))


@dataclass(frozen=True)
class OverlapPrefix:
    """A set of calls prepared for summed overlaps: starts and ends, each sorted and rebased to
    ``base`` (the earliest start, so prefix sums stay far from int64 overflow even with
    epoch-based timestamps, ~1.7e18 ns), and their prefix sums. Built by :meth:`of`."""

    starts: np.ndarray
    ends: np.ndarray
    start_prefix: np.ndarray
    end_prefix: np.ndarray
    base: int

    @classmethod
    def of(cls, call_starts, call_ends) -> "OverlapPrefix":
        # stable: an adaptive sort, near free on calls already in start order (as a GPU's are)
        s = np.sort(iv.as_ns(call_starts), kind="stable")
        e = np.sort(iv.as_ns(call_ends), kind="stable")
        base = int(s[0]) if s.size else 0
        s -= base  # (sorted copies: rebased in place)
        e -= base
        return cls(s, e, iv.prefix_sums(s), iv.prefix_sums(e), base)

    def summed(self, gap_starts, gap_ends) -> np.ndarray:
        """For each gap ``[a, b)``, the sum over the calls of |call ∩ gap| in ns: ``F(b) - F(a)``
        with ``F(t)`` as in the module docstring. Shape ``(n_gaps,)``."""
        a, b = iv.as_ns(gap_starts), iv.as_ns(gap_ends)
        if self.starts.size == 0 or a.size == 0:
            return np.zeros(a.size, dtype=np.int64)
        s, e, ps, pe = self.starts, self.ends, self.start_prefix, self.end_prefix

        def F(t):
            ns = np.searchsorted(s, t, side="left")
            ne = np.searchsorted(e, t, side="left")
            # (calls started before t) * t - their starts - ((calls ended before t) * t - their ends)
            return (ns - ne) * t - (ps[ns] - pe[ne])

        return F(b - self.base) - F(a - self.base)


def summed_overlap(call_starts, call_ends, gap_starts, gap_ends) -> np.ndarray:
    """For each gap, the sum over calls of |call ∩ gap| in ns. Shape ``(n_gaps,)``.

    Calls may overlap each other (several threads); each is counted by its own
    intersection with the gap.
    """
    return OverlapPrefix.of(call_starts, call_ends).summed(gap_starts, gap_ends)


@dataclass
class CallIndex:
    """One GPU's CUDA runtime calls (and copy-engine work), prepared once for every gap set.

    ``per_name``: normalised API name (sorted) -> its calls' :class:`OverlapPrefix`.
    ``all_runs``, ``sync_runs``, ``data_runs``, ``copy_runs``: unions
    (:func:`pipeline.analysis.intervals.union`) of all calls, synchronising calls, transfer /
    pinned-allocation calls plus copy-engine work, and copy-engine work alone.
    ``profiler_runs``: the profiler's own work where no copy engine runs
    (:func:`pipeline.analysis.caveats.profiler_runs`); ``untraced_runs``: when lost records may
    have run (:func:`pipeline.analysis.caveats.untraced_runs`).
    Built by :func:`index_calls`; gives the same figures as preparing them per gap set.
    """

    per_name: dict
    all_runs: tuple
    sync_runs: tuple
    data_runs: tuple
    copy_runs: tuple
    profiler_runs: tuple = field(default=_NO_RUNS)
    untraced_runs: tuple = field(default=_NO_RUNS)


def _name_codes(runtime: pd.DataFrame) -> tuple[np.ndarray, list]:
    """``(codes, names)``: each call's code into the list of distinct API names (-1: no name)."""
    names = runtime["name"]
    if isinstance(names.dtype, pd.CategoricalDtype):
        return codes_of(names), [str(x) for x in names.cat.categories]
    codes, uniques = pd.factorize(names.to_numpy(object))
    return codes, [str(x) for x in uniques]


def _per_name(runtime: pd.DataFrame, codes: np.ndarray, labels: list) -> dict:
    """API name (sorted) -> :class:`OverlapPrefix` of its calls."""
    starts = runtime["start"].to_numpy(np.int64)
    ends = runtime["end"].to_numpy(np.int64)
    per_name = {labels[codes[g[0]]]: OverlapPrefix.of(starts[g], ends[g])
                for g in row_groups(codes) if codes[g[0]] >= 0}
    return dict(sorted(per_name.items()))


def index_calls(runtime: pd.DataFrame, copies: pd.DataFrame, rules: "CategoryRules",
                overhead: pd.DataFrame | None = None, untraced: pd.DataFrame | None = None) -> CallIndex:
    """Prepare ``runtime`` (start, end, name) and ``copies`` (start, end) once per GPU; with them
    the GPU's ``overhead`` and ``untraced`` rows (:class:`~pipeline.model.GpuTrace`), for the
    ``profiler`` and ``untraced`` causes (none when None)."""
    starts = runtime["start"].to_numpy(np.int64)
    ends = runtime["end"].to_numpy(np.int64)
    codes, labels = _name_codes(runtime)

    # Name lists are checked once per distinct name, then spread to the calls by code.
    def by_name(api_names) -> np.ndarray:
        wanted = set(api_names)
        hit = np.array([x in wanted for x in labels] + [False], dtype=bool)  # code -1: no name
        return hit[codes]

    sync = by_name(rules.sync_apis)
    data = by_name(rules.data_apis)
    copy_s = copies["start"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    copy_e = copies["end"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    copy_runs = iv.union(copy_s, copy_e)
    return CallIndex(
        per_name=_per_name(runtime, codes, labels),
        all_runs=iv.union(starts, ends),
        sync_runs=iv.union(starts[sync], ends[sync]),
        data_runs=iv.union(np.concatenate((starts[data], copy_s)), np.concatenate((ends[data], copy_e))),
        copy_runs=copy_runs,
        profiler_runs=caveats.profiler_runs(overhead, rules, copy_runs) if overhead is not None else _NO_RUNS,
        untraced_runs=caveats.untraced_runs(untraced) if untraced is not None else _NO_RUNS,
    )


def _overlap_matrix(per_name: dict, g0: np.ndarray, g1: np.ndarray) -> tuple[list, np.ndarray]:
    """``(names, matrix)``: the gap × API-name matrix of summed overlap (ns, int64, shape ``(gaps,
    names)``) from :class:`OverlapPrefix` per name, only the names that overlap a gap, ordered by
    total overlap, largest first (ties: in ``per_name``'s order, sorted by name)."""
    names, cols = [], []
    for name, prefix in per_name.items() if g0.size else ():
        ov = prefix.summed(g0, g1)
        if ov.any():
            names.append(name)
            cols.append(ov)
    if not cols:
        return [], np.zeros((g0.size, 0), np.int64)
    matrix = np.column_stack(cols).astype(np.int64, copy=False)
    order = np.argsort(-matrix.sum(axis=0), kind="stable")
    return [names[j] for j in order], matrix[:, order]


def _overlap_table(per_name: dict, gaps: pd.DataFrame) -> pd.DataFrame:
    """Gap × API-name matrix from :class:`OverlapPrefix` per name (see :func:`api_overlap_table`)."""
    names, matrix = _overlap_matrix(per_name, gaps["start"].to_numpy(np.int64), gaps["end"].to_numpy(np.int64))
    return pd.DataFrame(matrix, index=gaps.index, columns=names, dtype="int64")


def overlap_by_name(calls: CallIndex, gaps: pd.DataFrame) -> pd.DataFrame:
    """:func:`api_overlap_table` from a prepared :class:`CallIndex`: the same frame."""
    return _overlap_table(calls.per_name, gaps)


def api_overlap_table(runtime: pd.DataFrame, gaps: pd.DataFrame) -> pd.DataFrame:
    """Gap × API-name matrix of summed overlap (ns).

    Args:
        runtime: calls of the GPU's processes (start, end, name).
        gaps: frame with ``start`` and ``end`` columns (ns).
    Returns:
        Frame indexed like ``gaps``, one int64 column per normalised API name
        that overlaps at least one gap; columns sorted by total overlap,
        largest first (ties: by name).
    """
    return _overlap_table(_per_name(runtime, *_name_codes(runtime)), gaps)


def periodic_mask(gap_starts, lengths, boundaries, rules: CategoryRules, eligible=None) -> np.ndarray:
    """Which gaps are rare, very large and recurring (checkpoint, evaluation, GC).

    Candidates: ``eligible`` gaps (default: all; the caller passes those not
    already explained as sync, data or comm) at least ``periodic_min_ns`` long
    and ``periodic_min_factor`` × the median gap length. Overlapping candidates
    (one checkpoint seen on several streams) form one *event*. Events are
    ``periodic`` when they are rare and recur regularly: with iteration
    boundaries, at least two events, in no more than half the iterations, every
    ``k >= 2`` iterations (each spacing within ±1 of the median spacing);
    without boundaries, at least three events whose start spacings lie within
    ±25 % of their median (two events give one spacing, which proves nothing).
    """
    g = iv.as_ns(gap_starts)
    x = iv.as_ns(lengths)
    mask = np.zeros(x.size, dtype=bool)
    if x.size < 2:
        return mask
    ok = np.ones(x.size, dtype=bool) if eligible is None else np.asarray(eligible, dtype=bool)
    cand = np.flatnonzero(ok & (x >= rules.periodic_min_ns) & (x >= rules.periodic_min_factor * np.median(x)))
    if cand.size < 2:
        return mask
    event_starts, _ = iv.union(g[cand], g[cand] + x[cand])
    if event_starts.size < 2:
        return mask
    bounds = np.asarray(boundaries, dtype=np.int64)
    if bounds.size >= 2:
        iteration = np.unique(np.searchsorted(bounds, event_starts, side="right"))
        steps = np.diff(iteration)
        if steps.size == 0 or iteration.size > max(1, bounds.size // 2):
            return mask
        k = float(np.median(steps))
        regular = k >= 2 and bool(np.all(np.abs(steps - k) <= 1))
    else:
        if event_starts.size < 3:
            return mask
        d = np.diff(event_starts).astype(float)
        med = float(np.median(d))
        regular = med > 0 and bool(np.all(np.abs(d - med) <= 0.25 * med))
    if regular:
        mask[cand] = True
    return mask


def collective_mask(names, rules: CategoryRules, world_size: int = 0, aliases: dict | None = None) -> np.ndarray:
    """Which kernel ``names`` are collectives (:func:`is_collective_kernel`: NCCL/RCCL and the other
    communication libraries' device kernels, the inference engines' own all-reduce / all-gather /
    reduce-scatter kernels; docs/definitions.md#categories, ``comm``). The one matcher of the ``comm`` category
    and of communication overlap (:mod:`pipeline.analysis.overlap`).

    Args:
        names: a sequence or Series of kernel names (a categorical Series is matched once per category).
        rules: the category rules (``collective_kernel``, ``compute_kernel``).
        world_size: the ranks the trace says its job ran on (0: unknown). A trace of one rank has no
            collectives: a communication kernel there has no peer to wait for (all False).
        aliases: name -> the export's other names of the kernels so named
            (:attr:`pipeline.model.GpuTrace.kernel_aliases`; None: none), seen by the matcher too.
    Returns:
        ``(n,)`` bool array, in ``names``' order.
    """
    if isinstance(names, pd.Series) and isinstance(names.dtype, pd.CategoricalDtype):
        codes = codes_of(names)
        labels = list(names.cat.categories)
    else:
        codes, labels = pd.factorize(np.asarray(names, dtype=object), use_na_sentinel=False)
    if world_size == 1 or not len(codes):
        return np.zeros(len(codes), dtype=bool)
    # each distinct name is matched once, then spread to the rows by its code (-1: a missing name)
    aliases = aliases or {}
    hit = np.array([is_collective_kernel(str(x), rules, aliases.get(str(x), ())) for x in labels] + [False],
                   dtype=bool)
    return hit[codes]


def one_rank_warning(names, rules: CategoryRules, world_size: int, aliases: dict | None = None) -> list[RowWarning]:
    """A :attr:`~pipeline.model.WarningCode.ONE_RANK_COLLECTIVES` warning when the trace says its job
    ran on one rank (``world_size`` 1, a :class:`~pipeline.model.RankCount` naming its source) while
    kernels of ``names`` (one per kernel row, e.g. the window's) are named like collectives
    (:func:`is_collective_kernel`, also by their ``aliases``): :func:`collective_mask` counted none of
    them; else ``[]``."""
    if world_size != 1:
        return []
    n = int(collective_mask(names, rules, 0, aliases).sum())
    if not n:
        return []
    source = getattr(world_size, "source", "") or "the trace's metadata"
    return [RowWarning(WarningCode.ONE_RANK_COLLECTIVES,
                       f"{n} kernel{'s' if n != 1 else ''} named like collectives (NCCL, all-reduce...) not counted "
                       f"as communication: {source} says the job ran on one rank")]


def is_collective_kernel(name: str, rules: CategoryRules, aliases=()) -> bool:
    """True when the kernel ``name`` is a collective: ``rules.collective_kernel`` is found in it or in
    one of its ``aliases`` (the export's other names of that kernel: an Nsight export's
    ``demangledName``/``mangledName`` beside its ``shortName``), and ``rules.compute_kernel`` (a compute
    library's or code generator's name: ``triton_…``, ``at::native::…``, ``cub::…``, CUTLASS, also
    mangled) is found in none of them (both regexes, case-insensitive, ``re.search``). The one
    definition of a collective kernel (also for :mod:`pipeline.synth`)."""
    names = (name, *aliases)
    return (any(_found(rules.collective_kernel, n) for n in names)
            and not any(_found(rules.compute_kernel, n) for n in names))


@functools.lru_cache(maxsize=8192)
def _found(pattern: str, name: str) -> bool:
    """``pattern`` (case-insensitive) found in the kernel ``name``. Remembered for the last 8192
    (pattern, name) pairs: the same names come back on every GPU and in every gap set, and a long
    C++ name takes ~50 µs to search."""
    return re.search(pattern, name, re.IGNORECASE) is not None


def _object_array(items: list) -> np.ndarray:
    """``items`` (lists, tuples, ...) as a 1-D object array, one item per element (``np.array`` would
    make a 2-D array of equal-length lists)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out


def categorise(gaps: pd.DataFrame, runtime: pd.DataFrame, copies: pd.DataFrame,
               rules: CategoryRules, boundaries=(), calls: CallIndex | None = None,
               world_size: int = 0, aliases: dict | None = None) -> pd.DataFrame:
    """Attribute and categorise every gap (not just the roster).

    Args:
        gaps: per-stream gaps (start, end, length ns; kernel_before, kernel_after).
        runtime: CUDA runtime calls of the processes driving this GPU.
        copies: this GPU's memcpy/memset rows.
        rules: thresholds and API name lists.
        boundaries: start times (ns) of detected iterations, for ``boundary`` and
            ``periodic``; empty when the window rule found no iterations.
        calls: ``runtime`` and ``copies`` already prepared by :func:`index_calls`
            (a GPU's stream and device gaps share one); built here when None.
        world_size: the ranks the trace says its job ran on (0: unknown; 1: no gap is ``comm``,
            :func:`collective_mask`).
        aliases: the kernels' other names (:func:`collective_mask`).
    Returns:
        ``gaps`` plus ``copy_ns`` (copy-engine work inside the gap), ``sync_ns``
        (union of synchronising calls inside it), ``data_ns`` (union of
        transfer/pinned-alloc calls and copy-engine work), ``cpu_api_ns`` (union of
        all CUDA API calls inside it), ``category`` and ``attribution``
        (``[(api_name, ns), ...]`` by summed overlapped time, largest first).

    Category, first match wins (docs/definitions.md#categories); first the two causes that are not the
    application's (:mod:`pipeline.analysis.caveats`), then the application's categories:
      ``profiler``: the profiler's own work covers >= ``profiler_min_fraction`` of the gap where
      no copy engine runs (``calls.profiler_runs``);
      ``untraced``: lost records may have run in the gap (``calls.untraced_runs`` overlap it);
      ``data``: transfers, pinned allocations or copy engines cover >= ``data_min_fraction``;
      ``comm``: the kernel before the gap is a collective (:func:`is_collective_kernel`: NCCL/RCCL
      and the other communication libraries' kernels, the inference engines' own all-reduce /
      all-gather / reduce-scatter kernels; none on a trace of one rank);
      ``sync``: synchronising calls cover >= ``sync_min_fraction`` of the gap (the witness: a
      full copy bar is ``data`` and a wait after a collective is ``comm``);
      ``boundary``: an iteration starts inside the gap (``g0 <= b <= g1``) and the
      CUDA API side is quiet (all calls cover < ``quiet_max_fraction``), unless the
      gap is one of the rare large recurring ones;
      ``periodic``: :func:`periodic_mask`;
      ``cpu``: nothing on the CUDA API side explains it.
    (``launch`` is per GPU, not per gap: see :mod:`pipeline.analysis.analyse`.)
    """
    calls = calls if calls is not None else index_calls(runtime, copies, rules)
    return with_columns(gaps, categorised_columns(gaps, rules, boundaries, calls, world_size, aliases))


def first_match(conditions: dict, n: int) -> np.ndarray:
    """Each of ``n`` gaps' application category: the first of :data:`pipeline.model.GAP_CATEGORIES` (the
    order of docs/definitions.md#categories, first match wins) whose condition holds, else the last one
    (``cpu``: nothing explains the gap). ``conditions``: category -> bool array of length ``n`` for every
    category but the last. Returns a ``<U`` string array of length ``n`` (an empty object array for
    ``n == 0``). Raises ValueError when ``conditions`` does not name exactly those categories."""
    *ruled, fallback = GAP_CATEGORIES
    if set(conditions) != set(ruled):
        raise ValueError(f"conditions for {sorted(conditions)}, expected one for each of {ruled}")
    if not n:
        return np.zeros(0, dtype=object)
    return np.select([conditions[c] for c in ruled], ruled, default=fallback)


def categorised_columns(gaps, rules: CategoryRules, boundaries, calls: CallIndex, world_size: int = 0,
                        aliases: dict | None = None) -> dict:
    """The columns :func:`categorise` adds to ``gaps`` (a frame, or columns: name -> array), as
    name -> array: ``copy_ns``, ``sync_ns``, ``data_ns``, ``cpu_api_ns``, ``category`` and
    ``attribution`` (object arrays the last two). ``world_size``, ``aliases``: as for :func:`categorise`."""
    length = np.asarray(gaps["length"], dtype=np.int64)
    g0 = np.asarray(gaps["start"], dtype=np.int64)
    g1 = np.asarray(gaps["end"], dtype=np.int64)
    n = length.size
    zeros = np.zeros(n, np.int64)
    added = {col: iv.overlap_with_each(g0, g1, *runs) if n else zeros
             for col, runs in (("copy_ns", calls.copy_runs), ("sync_ns", calls.sync_runs),
                               ("data_ns", calls.data_runs), ("cpu_api_ns", calls.all_runs))}
    profiler_ns = iv.overlap_with_each(g0, g1, *calls.profiler_runs) if n else zeros
    untraced = (iv.overlap_with_each(g0, g1, *calls.untraced_runs) > 0) if n else zeros.astype(bool)
    is_comm = collective_mask(gaps["kernel_before"], rules, world_size, aliases)
    bounds = np.sort(np.asarray(boundaries, dtype=np.int64))
    # An iteration boundary b lies in [g0, g1] when the first boundary >= g0 is <= g1.
    first = np.searchsorted(bounds, g0, side="left")
    at_boundary = (first < bounds.size) & (bounds[np.minimum(first, max(bounds.size - 1, 0))] <= g1) \
        if bounds.size else np.zeros(n, bool)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = {name: np.where(length > 0, added[col] / np.maximum(length, 1), 0.0)
                for name, col in (("sync", "sync_ns"), ("data", "data_ns"), ("api", "cpu_api_ns"))}
        profiler = np.where(length > 0, profiler_ns / np.maximum(length, 1), 0.0) >= rules.profiler_min_fraction
    explained = (frac["sync"] >= rules.sync_min_fraction) | (frac["data"] >= rules.data_min_fraction) | is_comm
    explained |= profiler | untraced  # neither is a candidate for periodic
    periodic = periodic_mask(g0, length, bounds, rules, eligible=~explained)
    quiet = frac["api"] < rules.quiet_max_fraction
    application = first_match({"data": frac["data"] >= rules.data_min_fraction, "comm": is_comm,
                               "sync": frac["sync"] >= rules.sync_min_fraction,
                               "boundary": at_boundary & quiet & ~periodic, "periodic": periodic}, n)
    # profiler and untraced are tested before the application's categories (docs/definitions.md#caveats)
    added["category"] = np.select([profiler, untraced], ["profiler", "untraced"], default=application).astype(object) \
        if n else np.zeros(0, dtype=object)
    added["attribution"] = _object_array(_attribution_lists(*_overlap_matrix(calls.per_name, g0, g1)))
    return added


#: Which side of a copy is host memory, by ENUM_CUDA_MEMCPY_OPER id (:data:`pipeline.model.COPY_DIRECTIONS`
#: names them); its memory kind is named by :data:`pipeline.model.HOST_MEMORY` (the ids both loaders give).
_HOST_SIDE = {1: "src_kind", 3: "src_kind", 9: "src_kind", 2: "dst_kind", 4: "dst_kind"}


def _copy_waited_for(c: dict) -> dict:
    """What a sync waited for when a copy row ``c`` (a row of a GPU's copies, column -> value) was in flight."""
    out = {"what": str(c["kind"])}
    if c["kind"] == "memcpy":
        kind = int(c["copy_kind"])
        out["direction"] = COPY_DIRECTIONS.get(kind, "unknown")
    out["bytes"] = int(c["bytes"])
    if c["kind"] == "memcpy":  # no host side: None; a direction the input does not say: it may have one
        side = _HOST_SIDE.get(kind)
        out["host_memory"] = (HOST_MEMORY.get(int(c[side]), "unknown") if side
                              else None if kind in COPY_DIRECTIONS else "unknown")
    out.update(start_ns=int(c["start"]), end_ns=int(c["end"]))
    return out


def _copies_waited_for(copies: pd.DataFrame, rows) -> dict[int, dict]:
    """:func:`_copy_waited_for` of the copy rows at positions ``rows`` (any order, repeats allowed):
    position -> its dict. The rows are taken out of ``copies`` at once, then read as plain values."""
    rows = np.unique(np.asarray(rows, dtype=np.int64))
    if not rows.size:
        return {}
    picked = copies.iloc[rows]
    columns = {c: picked[c].tolist() for c in picked.columns}
    return {i: _copy_waited_for({c: values[j] for c, values in columns.items()})
            for j, i in enumerate(rows.tolist())}


#: Copies listed per roster gap (the ones overlapping it most); the others are counted.
COPIES_PER_GAP = 5


def gap_copies(gaps: pd.DataFrame, copies: pd.DataFrame, limit: int = COPIES_PER_GAP) -> list[dict]:
    """For each gap, the copy-engine rows (memcpy/memset) overlapping it. Meant for the roster (a
    Python loop over its rows, numpy over the copies).

    Args:
        gaps: gap rows (start, end ns): a frame, or columns (name -> array).
        copies: the GPU's memcpy/memset rows as :class:`pipeline.model.Report` holds them (start, end
            ns; kind, copy_kind, bytes, src_kind, dst_kind).
        limit: copies listed per gap.
    Returns:
        Per gap ``{"copies": [...], "copy_count": n, "copy_bytes": b}``: the ``limit`` rows overlapping
        the gap most (ties: earlier start), each as in ``sync_waited_for`` (``what``, ``direction``,
        ``bytes``, ``host_memory`` ``pageable``/``pinned``/``unknown``/None, ``start_ns``, ``end_ns``)
        plus ``overlap_ns`` (its time inside the gap); ``copy_count`` and ``copy_bytes``: every
        overlapping row, counted and its bytes summed.
    """
    g0 = np.asarray(gaps["start"], dtype=np.int64).tolist()
    g1 = np.asarray(gaps["end"], dtype=np.int64).tolist()
    if not len(copies):
        return [{"copies": [], "copy_count": 0, "copy_bytes": 0} for _ in g0]
    cs = copies["start"].to_numpy(np.int64)
    ce = copies["end"].to_numpy(np.int64)
    nbytes = copies["bytes"].to_numpy(np.int64)
    found = []  # per gap: (the rows listed, their overlap, how many overlap, their bytes)
    for a, b in zip(g0, g1):
        overlap = np.minimum(ce, b) - np.maximum(cs, a)
        hit = np.flatnonzero(overlap > 0)
        top = hit[np.lexsort((cs[hit], -overlap[hit]))][:limit]
        found.append((top.tolist(), overlap[top].tolist(), int(hit.size), int(nbytes[hit].sum())))
    rows = _copies_waited_for(copies, [i for top, _, _, _ in found for i in top])
    return [{"copies": [dict(rows[i], overlap_ns=int(ns)) for i, ns in zip(top, ns_each)], "copy_count": count,
             "copy_bytes": total} for top, ns_each, count, total in found]


def sync_waits(gaps: pd.DataFrame, copies: pd.DataFrame, sync_runs: tuple) -> list:
    """For each gap, what the synchronising call in it waited for, when the export shows it
    (docs/definitions.md#attribution, ``sync``); None for gaps that are not ``sync``. Meant for the roster (a
    Python loop over the rows).

    Args:
        gaps: categorised gaps (start, end ns; kernel_before; category): a frame, or columns.
        copies: the GPU's memcpy/memset rows (start, end ns; kind, copy_kind, bytes, src_kind,
            dst_kind as :class:`pipeline.model.Report` holds them).
        sync_runs: the union of synchronising calls (``CallIndex.sync_runs``: sorted, disjoint
            starts and ends in ns).
    Returns:
        Per gap: None, or for the sync run overlapping the gap most ``[s0, s1)``: the copy in
        flight during both that run and the gap that ends last (``{"what": "memcpy", "direction": "HtoD"|"DtoH"|...,
        "bytes", "host_memory": "pageable"|"pinned"|"unknown"|None (no host side), "start_ns",
        "end_ns"}``, or ``{"what": "memset", "bytes", "start_ns", "end_ns"}``); else, when the call
        began before the gap (while the GPU still ran), the kernel before the gap
        (``{"what": "kernel", "name", "end_ns"}``: the gap's start); else None (the GPU was
        already idle and nothing was in flight).
    """
    run_s, run_e = (np.asarray(x, np.int64) for x in sync_runs)
    cs = copies["start"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    ce = copies["end"].to_numpy(np.int64) if len(copies) else np.zeros(0, np.int64)
    out, waited = [], {}  # waited: gap position -> the copy row it waited for
    for at, (g0, g1, category, before) in enumerate(zip(
            np.asarray(gaps["start"], dtype=np.int64).tolist(), np.asarray(gaps["end"], dtype=np.int64).tolist(),
            gaps["category"].tolist(), gaps["kernel_before"].tolist())):
        out.append(None)
        if category != "sync":
            continue
        overlap = np.minimum(run_e, g1) - np.maximum(run_s, g0)
        if not (overlap > 0).any():
            continue
        i = int(np.argmax(overlap))
        s0, s1 = int(run_s[i]), int(run_e[i])
        # in flight while the call waited *and* the stream was idle: a copy that only starts after the
        # gap ended (the call outlived the gap) is not what this gap waited for
        in_flight = np.flatnonzero((cs < min(s1, g1)) & (ce > max(s0, g0)))
        if in_flight.size:
            waited[at] = int(in_flight[np.argmax(ce[in_flight])])  # the first of the latest-ending ones
        elif s0 < g0:
            out[at] = {"what": "kernel", "name": str(before), "end_ns": g0}
    rows = _copies_waited_for(copies, list(waited.values()))
    for at, row in waited.items():
        out[at] = dict(rows[row])
    return out


def attribution_lists(table: pd.DataFrame) -> list:
    """Per gap, ``[(api_name, overlapped_ns), ...]`` largest first (ties: in the table's column
    order), zeros dropped."""
    names = list(table.columns)
    values = table.to_numpy(np.int64) if names else np.zeros((len(table), 0), np.int64)
    return _attribution_lists(names, values)


def _attribution_lists(names: list, values: np.ndarray) -> list:
    """:func:`attribution_lists` of a matrix (rows: gaps, columns: ``names``)."""
    if not names:
        return [[] for _ in range(values.shape[0])]
    # every row's columns by overlap, largest first (stable: ties in column order), in one sort; zeros dropped after
    order = np.argsort(-values, axis=1, kind="stable")
    ranked = np.take_along_axis(values, order, axis=1)
    return [[(names[j], v) for j, v in zip(cols, vals) if v != 0] for cols, vals in zip(order.tolist(), ranked.tolist())]


def enclosing_ranges(nvtx: pd.DataFrame, times) -> list[str]:
    """For each time ``t`` (ns), the text of the innermost NVTX range containing it, or ``""``.

    Innermost = the latest-starting range with ``start <= t < end`` (ties: the
    shortest). ``nvtx``: start, end, text of the GPU's processes. ``O(len(times) × ranges)``
    numpy work: meant for the roster, not for every gap.
    """
    times = [int(t) for t in times]
    if nvtx.empty or not times:
        return [""] * len(times)
    starts = nvtx["start"].to_numpy(np.int64)
    ends = nvtx["end"].to_numpy(np.int64)
    texts = nvtx["text"].to_numpy(object)
    order = np.lexsort((ends - starts, -starts))  # latest start first, then shortest
    starts, ends, texts = starts[order], ends[order], texts[order]
    out = []
    for t in times:
        hit = np.flatnonzero((starts <= t) & (ends > t))
        out.append(str(texts[hit[0]]) if hit.size else "")
    return out
