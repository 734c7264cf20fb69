"""Remedies that follow the evidence: the diagnostic rules per gap pattern (docs/definitions.md#diagnosis).

A category says *what kind* of idle a gap is; the rules here say what the gaps of one GPU show about
its cause, and the remedy that follows. Each rule is a small pure function over the GPU's device-level
gaps (columns ``start``, ``end``, ``length``, ``kernel_before``, ``kernel_after``, ``category``,
``attribution``), its window's kernels, copies, CUDA runtime calls and NVTX ranges, and returns one
*finding* (a plain dict, JSON-safe):

``category``  the application category it speaks to (:data:`pipeline.model.CATEGORIES`);
``rule``      the rule (``data.copy_stream``, ``data.host_memory``, ``data.host_alloc``, ``data.volume``,
              ``sync.regularity``, ``comm.collective``, ``comm.late_rank``, ``boundary.seam``, ``cpu.host``, ``break_point``, ``launch``,
              ``archived``);
``outcome``   what it found (``compute_stream``, ``own_stream``, ``pinned``, ``pageable``, ``in_gaps``, ``none``,
              ``small_copies``, ``large_copies``, ``regular``, ``irregular``, ``waiting_for_ranks``, ``late_rank``, ``seam``,
              ``fixed``, ``scattered``, ``launch_bound``, ``in_range``, ``no_range``, ``archived``) or ``not_judged`` (``judged`` False: the
              export lacks what the rule needs: no copies, no NVTX, no iterations);
``evidence``  the counts, shares (%), streams, calls, bytes it rests on;
``text``      that evidence in one sentence; ``remedy``: what follows from it (``""``: nothing to prescribe).

:func:`diagnose` runs them all for one GPU; a category under ``analysis.actionable_pct`` of the window
is archived: one ``archived`` finding, no prescription. :func:`line` is the one way a finding is written for
people: it names the rule in words (:data:`RULE_NAMES`, :func:`rule_name`), never by its id; the ids stay in the
machine outputs (the ``diagnosis`` column's JSON, the per-GPU JSON, the pages' ``data-rule`` attributes).
"""
from __future__ import annotations

import json
import math
import re
from collections import Counter

import numpy as np
import pandas as pd

from ..config import DiagnosisConfig
from ..model import CATEGORIES, CAVEATS, HOST_MEMORY, beside_bound
from . import attribution, intervals

#: Pinned host allocations: a call of one of these inside a gap allocates pinned memory in the loop.
HOST_ALLOC_APIS = ("cudaHostAlloc", "cudaMallocHost", "cuMemHostAlloc", "cuMemAllocHost",
                   "hipHostMalloc", "hipHostAlloc", "hipMallocHost")
#: The rules' thresholds (config ``diagnosis:``, :class:`pipeline.config.DiagnosisConfig`): each rule takes its own
#: as an argument, these defaults when not given; :func:`diagnose` passes the run's.
RULES = DiagnosisConfig()

#: Which side of a copy is host memory, by direction id (one definition: attribution's).
_HOST_SIDE = attribution._HOST_SIDE


def range_name(text: str) -> str:
    """An NVTX range's text without the per-call numbers the PyTorch profiler appends (``, seq = 12``,
    ``, op_id = 317128``), so the ranges of one operator count as one."""
    return re.sub(r",\s*(seq|op_id)\s*=\s*\d+", "", str(text)).strip()


#: At most this many gaps (the first) are looked up in the NVTX ranges per rule, and for what a sync waited
#: for: those look-ups are ``O(gaps × ranges)`` and ``O(gaps × copies)``
#: (:func:`pipeline.analysis.attribution.enclosing_ranges`, :func:`pipeline.analysis.attribution.sync_waits`).
RANGE_SAMPLE = 200


def _ranges(nvtx: pd.DataFrame, starts) -> Counter:
    """The NVTX ranges (:func:`range_name`) the first :data:`RANGE_SAMPLE` gaps starting at ``starts`` fall in,
    counted (none: empty)."""
    starts = np.asarray(starts, dtype=np.int64)[:RANGE_SAMPLE]
    return Counter(range_name(r) for r in attribution.enclosing_ranges(nvtx, starts) if r)


#: Every rule's id (the findings' ``rule``, for machines) -> its name in words, the one name the views print
#: (:func:`line`, the GPU pages): a manager reads what the rule looked at, never an id.
RULE_NAMES = {
    "data.copy_stream": "which stream the copies run on",
    "data.host_memory": "pinned or pageable host memory",
    "data.host_alloc": "pinned memory allocated in the loop",
    "data.volume": "how large the copies are",
    "sync.regularity": "how regular the waits are",
    "comm.collective": "waiting for the other GPUs",
    "comm.late_rank": "the GPU the others wait for",
    "boundary.seam": "the seam between iterations",
    "cpu.host": "the host launching late",
    "break_point": "where the idle starts",
    "launch": "many tiny launches",
    "archived": "too small to act on",
}


def rule_name(finding: dict) -> str:
    """The rule of ``finding`` in words (:data:`RULE_NAMES`); a rule it does not know (a finding stored by other
    code) as its id's words (``data.host_memory`` -> ``data host memory``), never the id itself."""
    rule = str(finding.get("rule") or "")
    return RULE_NAMES.get(rule) or re.sub(r"[._]+", " ", rule).strip() or "finding"


def _finding(category: str, rule: str, outcome: str, evidence: dict, text: str, remedy: str = "") -> dict:
    assert rule in RULE_NAMES, f"rule {rule!r} has no name in words (RULE_NAMES)"
    return {"category": category, "rule": rule, "outcome": outcome, "judged": outcome != "not_judged",
            "archived": outcome == "archived", "evidence": evidence, "text": text, "remedy": remedy}


def _pct(part, whole) -> float:
    return round(100.0 * float(part) / float(whole), 2) if whole else 0.0


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB" if n >= 100_000 else f"{int(n):,} B"


def compute_stream(kernels) -> tuple[int, int] | None:
    """The compute stream of a GPU's window: the ``(pid, stream_id)`` whose kernels run longest
    (summed ``end - start``, ns; ties: the lowest pair); None without kernels. ``kernels``: a frame or
    columns (start, end, pid, stream_id)."""
    s = np.asarray(kernels["start"], dtype=np.int64)
    if not s.size:
        return None
    busy = pd.DataFrame({"pid": np.asarray(kernels["pid"], dtype=np.int64),
                         "stream_id": np.asarray(kernels["stream_id"], dtype=np.int64),
                         "ns": np.asarray(kernels["end"], dtype=np.int64) - s}).groupby(["pid", "stream_id"])["ns"].sum()
    top = busy[busy == busy.max()].index.min()  # ties: the lowest pair
    return int(top[0]), int(top[1])


def host_copies(copies: pd.DataFrame) -> pd.DataFrame:
    """The memcpy rows of ``copies`` that have a host side (HtoD, DtoH, HtoA, AtoH, HtoH), with a
    ``host_kind`` column (the host side's ENUM_CUDA_MEM_KIND id, :data:`pipeline.model.MEM_KINDS`)."""
    if not len(copies):
        return copies.assign(host_kind=pd.Series([], dtype=np.int64))
    kind = copies["copy_kind"].to_numpy(np.int64)
    keep = (copies["kind"].astype(str).to_numpy() == "memcpy") & np.isin(kind, list(_HOST_SIDE))
    picked = copies[keep]
    src_side = np.isin(picked["copy_kind"].to_numpy(np.int64), [k for k, side in _HOST_SIDE.items() if side == "src_kind"])
    host = np.where(src_side, picked["src_kind"].to_numpy(np.int64), picked["dst_kind"].to_numpy(np.int64))
    return picked.assign(host_kind=np.asarray(host, dtype=np.int64))


def hideable_ns(gaps, kernels) -> np.ndarray:
    """What a copy stream of their own could hide of each ``gaps`` (start, end ns; the GPU's ``data`` gaps) when the
    copies run on the compute stream (docs/definitions.md#diagnosis): per gap ``i`` in start order,
    ``min(length_i, busy_i)`` ns, ``busy_i`` the ns of the union of the window's ``kernels`` (start, end; all
    streams) between the previous data gap's end (the first gap: from the first kernel) and gap ``i``'s start: the
    compute a copy issued there on its own stream, as the previous copy finished, could run behind. Returns one int64
    per gap, in the gaps' order (0 for a gap with no compute before it)."""
    g0 = np.asarray(gaps["start"], dtype=np.int64)
    g1 = np.asarray(gaps["end"], dtype=np.int64)
    out = np.zeros(g0.size, dtype=np.int64)
    if not g0.size:
        return out
    rs, re_ = intervals.union(np.asarray(kernels["start"], dtype=np.int64), np.asarray(kernels["end"], dtype=np.int64))
    done = np.concatenate([[0], np.cumsum(re_ - rs)])  # busy ns of the runs before run k

    def busy_at(t: np.ndarray) -> np.ndarray:  # busy ns of the union before time t
        if not rs.size:
            return np.zeros_like(t)
        k = np.searchsorted(rs, t, "right")  # runs starting at or before t
        prev = np.maximum(k - 1, 0)
        return np.where(k > 0, done[prev] + np.minimum(t, re_[prev]) - rs[prev], 0)
    order = np.argsort(g0, kind="stable")
    s, e = g0[order], g1[order]
    since = np.concatenate([[np.iinfo(np.int64).min // 2], e[:-1]])  # the first gap: from before any kernel
    busy = busy_at(s) - busy_at(since)
    out[order] = np.minimum(e - s, np.maximum(busy, 0))
    return out


def copy_stream_rule(copies: pd.DataFrame, kernels, gaps=None, share: float = RULES.copy_stream_share) -> dict:
    """``data.copy_stream``: do the host-side copies of the window run on the compute stream
    (:func:`compute_stream`) or on a stream of their own? ``compute_stream`` when the copies on it carry
    at least ``share`` (0..1, ``diagnosis.copy_stream_share``) of the copied bytes (a copy there queues behind the kernels and cannot
    hide behind them), else ``own_stream``; ``not_judged`` without host-side copies or kernels."""
    hc = host_copies(copies)
    main = compute_stream(kernels)
    if not len(hc) or main is None:
        return _finding("data", "data.copy_stream", "not_judged", {"copies": int(len(hc))},
                        "no host-device copies in the window: where copies run cannot be judged")
    on = (hc["pid"].to_numpy(np.int64) == main[0]) & (hc["stream_id"].to_numpy(np.int64) == main[1])
    nbytes = hc["bytes"].to_numpy(np.int64)
    ev = {"compute_stream": main[1], "compute_pid": main[0], "copies": int(len(hc)), "on_compute": int(on.sum()),
          "bytes": int(nbytes.sum()), "bytes_on_compute": int(nbytes[on].sum()),
          "bytes_on_compute_pct": _pct(nbytes[on].sum(), nbytes.sum()),
          "copy_streams": sorted({int(x) for x in hc["stream_id"].tolist()})}
    if nbytes.sum() and nbytes[on].sum() >= share * nbytes.sum():
        if gaps is not None:  # what a copy stream of their own could hide: the recoverable part
            ev["data_ns"] = int(np.asarray(gaps["length"], dtype=np.int64).sum())
            ev["hideable_ns"] = int(hideable_ns(gaps, kernels).sum())
        return _finding("data", "data.copy_stream", "compute_stream", ev,
                        f"{ev['on_compute']} of {ev['copies']} host-device copies ({ev['bytes_on_compute_pct']:g} % of "
                        f"{_mb(ev['bytes'])}) run on the compute stream {main[1]}: they queue behind its kernels and "
                        "cannot overlap them",
                        "move the copies to a copy stream of their own and prefetch the next batch there "
                        "(non_blocking copies on a side stream, an event for the compute stream to wait on)")
    return _finding("data", "data.copy_stream", "own_stream", ev,
                    f"{ev['copies'] - ev['on_compute']} of {ev['copies']} host-device copies run off the compute "
                    f"stream {main[1]} (streams {', '.join(map(str, ev['copy_streams']))})",
                    "the copies already have their own stream: start them earlier (prefetch) so they hide behind "
                    "compute, and wait on an event rather than a synchronize")


def host_memory_rule(copies: pd.DataFrame, share: float = RULES.pageable_share) -> dict:
    """``data.host_memory``: the host side of the window's host-device copies, pinned or pageable (its
    ENUM_CUDA_MEM_KIND, :data:`pipeline.model.HOST_MEMORY`). ``pageable`` when pageable memory holds at least
    ``share`` (0..1, ``diagnosis.pageable_share``) of the bytes whose kind is known, else ``pinned``; ``not_judged`` without host-side
    copies or when no copy's kind is known."""
    hc = host_copies(copies)
    mem = np.asarray([HOST_MEMORY.get(int(k), "unknown") for k in hc["host_kind"].tolist()], dtype=object)
    nbytes = hc["bytes"].to_numpy(np.int64) if len(hc) else np.zeros(0, np.int64)
    ev = {"copies": int(len(hc))}
    for m in ("pinned", "pageable", "unknown"):
        ev[m] = int((mem == m).sum())
        ev[f"{m}_bytes"] = int(nbytes[mem == m].sum())
    known = ev["pinned_bytes"] + ev["pageable_bytes"]
    if not (ev["pinned"] + ev["pageable"]):
        return _finding("data", "data.host_memory", "not_judged", ev,
                        "no host-device copy whose host memory kind the export gives: pinned or pageable cannot "
                        "be judged")
    ev["pinned_bytes_pct"] = _pct(ev["pinned_bytes"], known)
    if known and ev["pageable_bytes"] >= share * known:
        return _finding("data", "data.host_memory", "pageable", ev,
                        f"{ev['pageable']} of {ev['copies']} host-device copies ({_pct(ev['pageable_bytes'], known):g} % "
                        "of the bytes) use pageable host memory: each goes through a staging buffer and cannot run "
                        "asynchronously",
                        "pin the host buffers (pin_memory=True, cudaHostAlloc) once at the start and reuse them")
    return _finding("data", "data.host_memory", "pinned", ev,
                    f"the copies are already pinned: {ev['pinned']} of {ev['copies']} host-device copies "
                    f"({ev['pinned_bytes_pct']:g} % of the bytes) use pinned host memory",
                    "pinning more will not help: look at where the copies run and when they start")


def host_alloc_rule(gaps, runtime: pd.DataFrame, apis=HOST_ALLOC_APIS) -> dict:
    """``data.host_alloc``: pinned host allocations (``apis``: :data:`HOST_ALLOC_APIS`) overlapping the
    ``gaps`` (start, end ns). ``in_gaps`` (the calls, the gaps they fall in, their overlap ns) or ``none``."""
    g0 = np.asarray(gaps["start"], dtype=np.int64)
    g1 = np.asarray(gaps["end"], dtype=np.int64)
    names = runtime["name"].astype(str).to_numpy() if len(runtime) else np.zeros(0, dtype=object)
    hit = np.isin(names, list(apis))
    cs = runtime["start"].to_numpy(np.int64)[hit] if len(runtime) else np.zeros(0, np.int64)
    ce = runtime["end"].to_numpy(np.int64)[hit] if len(runtime) else np.zeros(0, np.int64)
    calls, gap_hit, ns, by_name = 0, np.zeros(g0.size, bool), 0, Counter()
    for s, e, name in zip(cs.tolist(), ce.tolist(), names[hit].tolist()):
        ov = np.minimum(g1, e) - np.maximum(g0, s)
        if (ov > 0).any():
            calls += 1
            by_name[name] += 1
            gap_hit |= ov > 0
            ns += int(ov[ov > 0].sum())
    ev = {"calls": calls, "gaps": int(gap_hit.sum()), "of_gaps": int(g0.size), "overlap_ns": ns,
          "apis": dict(sorted(by_name.items()))}
    if not calls:
        return _finding("data", "data.host_alloc", "none", ev, "no pinned host allocation inside the gaps")
    names_text = ", ".join(f"{n} ×{c}" for n, c in ev["apis"].items())
    return _finding("data", "data.host_alloc", "in_gaps", ev,
                    f"pinned memory is allocated inside {ev['gaps']} of {ev['of_gaps']} gaps ({names_text}, "
                    f"{ns / 1e6:,.3f} ms): someone allocates it in the loop",
                    "allocate the pinned buffers once at the start and reuse them")


def volume_rule(copies: pd.DataFrame, iterations: int, small_bytes: int = RULES.small_copy_bytes) -> dict:
    """``data.volume``: the window's host-device copies' bytes per kept iteration (``iterations``; none: not
    given) and effective bandwidth (bytes over the copies' summed duration, GB/s = bytes/ns). ``small_copies``
    when their median size is under ``small_bytes`` (``diagnosis.small_copy_bytes``), else ``large_copies``; ``not_judged`` without
    host-side copies."""
    hc = host_copies(copies)
    if not len(hc):
        return _finding("data", "data.volume", "not_judged", {"copies": 0},
                        "no host-device copies in the window: their volume cannot be judged")
    nbytes = hc["bytes"].to_numpy(np.int64)
    dur = int((hc["end"].to_numpy(np.int64) - hc["start"].to_numpy(np.int64)).sum())
    ev = {"copies": int(len(hc)), "bytes": int(nbytes.sum()), "median_bytes": int(np.median(nbytes)),
          "copy_ns": dur, "gb_per_s": round(nbytes.sum() / dur, 3) if dur > 0 else None,
          "iterations": int(iterations),
          "bytes_per_iteration": int(nbytes.sum() // iterations) if iterations else None}
    per = f", {_mb(ev['bytes_per_iteration'])} per iteration" if iterations else ""
    bw = f" at {ev['gb_per_s']:g} GB/s effective" if ev["gb_per_s"] is not None else ""
    text = f"{ev['copies']} host-device copies move {_mb(ev['bytes'])}{per}{bw} (median {_mb(ev['median_bytes'])})"
    if ev["median_bytes"] < small_bytes:
        return _finding("data", "data.volume", "small_copies", ev, text,
                        "fewer, larger copies: batch the small transfers into one buffer")
    return _finding("data", "data.volume", "large_copies", ev, text)


def sync_regularity_rule(gaps, kernels, iterations, waits=None, share: float = RULES.sync_regular_share) -> dict:
    """``sync.regularity``: do the ``gaps`` (the GPU's ``sync`` gaps: start, kernel_before, attribution) recur
    at the same position in the kept ``iterations`` (``[(start, end), ...]`` ns)? A gap's position: the
    number of window ``kernels`` (start) from its iteration's start to the gap, and the kernel before it.
    ``regular`` when one position recurs in at least ``share`` (0..1, ``diagnosis.sync_regular_share``) of the
    iterations (and in two): the
    sync is written in the code; else ``irregular`` (system, resources). ``waits``: what each gap's sync waited
    for (:func:`pipeline.analysis.attribution.sync_waits`), counted; the synchronising call most gaps show is
    named. ``not_judged`` without kept iterations."""
    g0 = np.asarray(gaps["start"], dtype=np.int64)
    before = [str(x) for x in gaps["kernel_before"]]
    calls = Counter(a[0][0] for a in gaps["attribution"] if len(a))
    waited = Counter(_waited(w) for w in (waits or []))
    ev = {"gaps": int(g0.size), "call": calls.most_common(1)[0][0] if calls else "",
          "waited_for": dict(sorted(waited.items()))}
    its = sorted((int(a), int(b)) for a, b in iterations)
    if len(its) < 2:
        return _finding("sync", "sync.regularity", "not_judged", {**ev, "iterations": len(its)},
                        "fewer than two kept iterations: whether the sync recurs at the same place cannot be judged")
    ks = np.sort(np.asarray(kernels["start"], dtype=np.int64))
    where = {}
    it_start = np.asarray([a for a, _ in its], dtype=np.int64)
    for t, name in zip(g0.tolist(), before):
        i = int(np.searchsorted(it_start, t, "right")) - 1
        if i >= 0 and t < its[i][1]:
            ordinal = int(np.searchsorted(ks, t, "left") - np.searchsorted(ks, its[i][0], "left"))
            where[(ordinal, name)] = where.get((ordinal, name), set()) | {i}
    top = max(where, key=lambda k: (len(where[k]), -k[0]), default=None)
    n = len(where[top]) if top else 0
    ev.update(iterations=len(its), recurring_in=n, position=top[0] if top else None, kernel_before=top[1] if top else "",
              positions=len(where))
    wait_text = (" (waited for " + ", ".join(f"{k} ×{v}" for k, v in ev["waited_for"].items()) + ")"
                 if waited else "")
    call = f" {ev['call']}" if ev["call"] else ""
    if top and n >= 2 and n >= math.ceil(share * len(its)):
        return _finding("sync", "sync.regularity", "regular", ev,
                        f"the same{call} sync gap recurs in {n} of {len(its)} kept iterations at the same place "
                        f"(after kernel {top[0]} of the iteration, {top[1]}){wait_text}: it is written in the code",
                        "find it in the code: .item() reading the loss, a progress bar syncing each step, a hidden "
                        "framework sync after that kernel")
    return _finding("sync", "sync.regularity", "irregular", ev,
                    f"the sync gaps fall at {len(where)} different places; the most frequent recurs in {n} of "
                    f"{len(its)} kept iterations{wait_text}",
                    "irregular: the system and its resources first (other processes, memory, I/O)")


def _waited(w) -> str:
    """One wait of :func:`pipeline.analysis.attribution.sync_waits` as a word: ``kernel``, ``memcpy HtoD``, ``nothing``."""
    if not w:
        return "nothing in flight"
    return " ".join(str(x) for x in (w.get("what"), w.get("direction")) if x)


#: What the comm rule's remedy asks first; the views name the straggler after it (:func:`name_straggler`).
STRAGGLER_FIRST = "look at the straggler first"
#: The comm rule's remedy for a GPU waiting on the others; the straggler's and the late rank's own pages replace it
#: whole (:func:`pipeline.report.gpu_page.role_line`: that GPU can fix it).
CANNOT_FIX_ALONE = f"one GPU cannot fix it: {STRAGGLER_FIRST}"


#: How :func:`pipeline.analysis.fixfirst.job_stragglers` words a job's late rank where it has no straggler by idle.
LATE_RANK = "the late rank "


def name_straggler(remedy: str, stragglers: list[str]) -> str:
    """``remedy`` with the straggler(s) it asks to look at first named (docs/definitions.md#diagnosis): ``look at
    the straggler first`` becomes ``look at the straggler H100 #13 750df4f4 first``, or with several (the jobs of a
    fleet entry) ``look at each job's straggler first (A of job1; B of job2)``; with none known, that no GPU captured
    here stands out as one (its job's other ranks were not captured, or their idle is even); unchanged without the
    phrase."""
    if STRAGGLER_FIRST not in remedy:
        return remedy
    named = ("look at the straggler first (no GPU captured here stands out as one)" if not stragglers else
             f"look at {stragglers[0]} first" if len(stragglers) == 1 and stragglers[0].startswith(LATE_RANK) else
             f"look at the straggler {stragglers[0]} first" if len(stragglers) == 1 else
             f"look at each job's straggler first ({'; '.join(stragglers)})")
    return remedy.replace(STRAGGLER_FIRST, named)


#: The row's collective-wait columns (docs/definitions.md#collective-wait) the comm rules read.
COLLECTIVE_KEYS = ("collective_wait_status", "collective_wait_ns", "collective_wait_pct", "collective_calls",
                   "collective_last_count", "collective_chronic")


def _measured(collective: dict | None) -> bool:
    return bool(collective) and collective.get("collective_wait_status") == "measured"


def comm_rule(gaps, collective: dict | None = None) -> dict:
    """``comm.collective``: the ``gaps`` (the GPU's ``comm`` gaps: length, kernel_before) follow a collective:
    waiting for the other ranks, which one GPU cannot fix. Evidence: the gaps, their ns, the collective most
    of them follow; where the collective-wait figures were measured (``collective``: the GPU's
    :data:`COLLECTIVE_KEYS` columns, docs/definitions.md#collective-wait, status ``measured``), the wait inside
    the collectives (ns, % of the window), the calls and in how many this GPU entered last, and whether that makes
    it the chronic late rank: then the others wait for it, and its remedy is its own idle (:func:`late_rank_rule`)."""
    before = Counter(str(x) for x in gaps["kernel_before"])
    name, n = before.most_common(1)[0] if before else ("", 0)
    ev = {"gaps": int(sum(before.values())), "ns": int(np.asarray(gaps["length"], dtype=np.int64).sum()),
          "collective": name, "after_it": n}
    text = f"{ev['gaps']} gaps follow a collective ({n} after {name}): this GPU waits for the other ranks"
    remedy = f"{CANNOT_FIX_ALONE}, then overlap communication with compute"
    if _measured(collective):
        ev.update(wait_ns=int(collective["collective_wait_ns"]), wait_pct=float(collective["collective_wait_pct"]),
                  calls=int(collective["collective_calls"]), last_count=int(collective["collective_last_count"]),
                  chronic=bool(collective["collective_chronic"]))
        text += (f"; inside the collectives it waited {ev['wait_ns'] / 1e6:,.3f} ms for the last rank "
                 f"({ev['wait_pct']:g} % of the window) and entered last in {ev['last_count']} of {ev['calls']} calls")
        if ev["chronic"]:
            text += ": it is the late rank itself, the one the others wait for"
            remedy = "this rank is the one others wait for: fix its own idle first (its other categories' findings)"
    return _finding("comm", "comm.collective", "waiting_for_ranks", ev, text, remedy)


def late_rank_rule(collective: dict | None, category_pct: dict, actionable_pct: float) -> dict | None:
    """``comm.late_rank``: the GPU entered last in more than ``collective.chronic_share`` of its collective calls
    (``collective_chronic``, measured: ``collective`` as for :func:`comm_rule`), so the other ranks wait for it; the
    finding speaks to its largest own application category other than ``comm`` with at least ``actionable_pct`` %
    of the window (``category_pct``; ties: :data:`pipeline.model.CATEGORIES` order): fix that first. None when the
    GPU is not the late rank or has no such category."""
    if not (_measured(collective) and collective.get("collective_chronic")):
        return None
    own = [(float(category_pct.get(c) or 0.0), -i, c) for i, c in enumerate(CATEGORIES)
           if c not in CAVEATS and c != "comm" and float(category_pct.get(c) or 0.0) >= actionable_pct]
    if not own:
        return None
    pct, _, cat = max(own)
    ev = {"last_count": int(collective["collective_last_count"]), "calls": int(collective["collective_calls"]),
          "category": cat, "pct": round(pct, 4)}
    return _finding(cat, "comm.late_rank", "late_rank", ev,
                    f"this GPU entered last in {ev['last_count']} of {ev['calls']} collective calls: the other ranks "
                    f"wait for it; its own {cat} idle is {pct:.2f} % of the window",
                    f"this rank is the one others wait for: fix its own {cat} first")


def _numbered(ranges: Counter) -> Counter:
    """``ranges`` (range name -> gaps) with the names that differ only in their numbers counted as one, each run of
    digits read ``N`` (``Iteration 2``, ``Iteration 4`` -> ``Iteration N``: a range per step names one place in the
    code); a name no other shares keeps its numbers."""
    groups: dict = {}
    for name in ranges:
        groups.setdefault(re.sub(r"\d+", "N", name), []).append(name)
    out = Counter()
    for key, names in groups.items():
        for name in names:
            out[key if len(names) > 1 else name] += ranges[name]
    return out


def cpu_rule(gaps, nvtx: pd.DataFrame) -> dict:
    """``cpu.host``: the ``gaps`` (the GPU's ``cpu`` gaps: start, length) are explained by no copy, synchronising
    call, collective or iteration boundary (docs/definitions.md#categories): the host was busy elsewhere and launched
    late. Evidence: the gaps, their ns, the largest, and
    the NVTX range most of them fall in (:func:`pipeline.analysis.attribution.enclosing_ranges` at their start), which
    names where to profile the host (``in_range``; ranges that differ only in their numbers count as one, read with
    ``N``: :func:`_numbered`); ``no_range`` when none falls in a range. Always judged: the
    category itself is the evidence that the host, not the GPU or the CUDA calls, holds the time."""
    lengths = np.asarray(gaps["length"], dtype=np.int64)
    ev = {"gaps": int(lengths.size), "ns": int(lengths.sum()), "max_ns": int(lengths.max()) if lengths.size else 0}
    text = (f"{ev['gaps']} gaps ({ev['ns'] / 1e6:,.3f} ms, the largest {ev['max_ns'] / 1e6:,.3f} ms) that no copy, "
            "synchronising call, collective or iteration seam explains: the host was busy elsewhere and launched late")
    how = "py-spy, or the PyTorch profiler with CPU activities: data loading, the GIL, I/O, logging"
    ranges = _numbered(_ranges(nvtx, gaps["start"]))
    if not ranges:
        return _finding("cpu", "cpu.host", "no_range", ev, text + " (in no NVTX range)",
                        f"profile the host at these gaps ({how}); NVTX ranges around the steps would name the code")
    rng, n = ranges.most_common(1)[0]
    ev.update(nvtx_range=rng, in_range=n)
    return _finding("cpu", "cpu.host", "in_range", ev, text + f"; {n} of them in NVTX range {rng!r}",
                    f"profile the host inside NVTX range {rng!r} ({how})")


def boundary_rule(gaps, nvtx: pd.DataFrame) -> dict:
    """``boundary.seam``: the ``gaps`` (the GPU's ``boundary`` gaps: start, kernel_after) are the seam between
    iterations; names the NVTX range most of them fall in (:func:`pipeline.analysis.attribution.enclosing_ranges`
    at their start) and the kernel after them. ``not_judged`` when no gap falls in an NVTX range."""
    after = Counter(str(x) for x in gaps["kernel_after"])
    ev = {"gaps": int(sum(after.values())), "kernel_after": after.most_common(1)[0][0] if after else ""}
    ranges = _ranges(nvtx, gaps["start"])
    if not ranges:
        return _finding("boundary", "boundary.seam", "not_judged", ev,
                        f"{ev['gaps']} gaps at the seam between iterations, in no NVTX range: the range cannot be named",
                        "move per-iteration host work (logging, the next batch, the optimizer's host side) off the "
                        "critical path")
    rng, n = ranges.most_common(1)[0]
    ev.update(nvtx_range=rng, in_range=n)
    return _finding("boundary", "boundary.seam", "seam", ev,
                    f"{ev['gaps']} gaps at the seam between iterations ({n} in NVTX range {rng!r}, then "
                    f"{ev['kernel_after']})",
                    f"move the per-iteration host work of {rng!r} off the critical path")


def break_point_rule(gaps, nvtx: pd.DataFrame, share: float = RULES.break_point_share,
                     min_gaps: int = RULES.break_point_min_gaps) -> dict:
    """``break_point``: the same kernel before at least ``share`` (0..1, ``diagnosis.break_point_share``) of the
    ``gaps`` (the GPU's
    application gaps: start, kernel_before, category) is a fixed break point: a stage finishes and nobody takes
    over (``fixed``: that kernel, its NVTX range at the gaps' start, the category most of its gaps have); many
    different kernels read as random waiting (``scattered``). ``not_judged`` under ``min_gaps``
    (``diagnosis.break_point_min_gaps``) gaps. The finding's category: that of most of the gaps it rests on."""
    before = [str(x) for x in gaps["kernel_before"]]
    cats = [str(x) for x in gaps["category"]]
    if len(before) < min_gaps:
        return _finding(Counter(cats).most_common(1)[0][0] if cats else "cpu", "break_point", "not_judged",
                        {"gaps": len(before)}, f"{len(before)} gaps: too few to judge a fixed break point")
    counts = Counter(before)
    name, n = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ev = {"gaps": len(before), "kernel": name, "before": n, "share_pct": _pct(n, len(before)),
          "kernels": len(counts)}
    if n >= share * len(before):
        mine = [i for i, b in enumerate(before) if b == name]
        cat = Counter(cats[i] for i in mine).most_common(1)[0][0]
        starts = np.asarray(gaps["start"], dtype=np.int64)[mine]
        ranges = _ranges(nvtx, starts)
        ev["nvtx_range"] = ranges.most_common(1)[0][0] if ranges else ""
        where = f" in NVTX range {ev['nvtx_range']!r}" if ranges else " (no NVTX range)"
        return _finding(cat, "break_point", "fixed", ev,
                        f"{n} of {len(before)} gaps ({ev['share_pct']:g} %) come after the same kernel {name}{where}: "
                        "a stage finishes and nobody takes over",
                        f"look downstream of that stage: what should start after {name}")
    return _finding(Counter(cats).most_common(1)[0][0], "break_point", "scattered", ev,
                    f"the gaps come after {len(counts)} different kernels (the most frequent, {name}, before "
                    f"{ev['share_pct']:g} %): random waiting",
                    "the system and its resources first (other processes, memory, I/O)")


def launch_rule(sliver_count: int, sliver_ns: int, app_idle_ns: int, max_gap_ns: int) -> dict:
    """``launch``: the small-gap bucket overflowing with no large gap (the GPU is ``launch_bound``,
    docs/definitions.md#categories): the CPU does not launch fast enough. Evidence: the device slivers
    (count, ns), their share of the application's idle, the largest gap (ns)."""
    ev = {"slivers": int(sliver_count), "sliver_ns": int(sliver_ns), "share_pct": _pct(sliver_ns, app_idle_ns),
          "max_gap_ns": int(max_gap_ns)}
    largest = f"the largest gap is {max_gap_ns / 1e6:,.3f} ms" if max_gap_ns else "no gap is above it"
    return _finding("launch", "launch", "launch_bound", ev,
                    f"{ev['slivers']} holes under the gap threshold hold {ev['share_pct']:g} % of the idle and "
                    f"{largest}: launch-bound",
                    "CUDA graphs / torch.compile / larger (fused) kernels")


def archived(category: str, pct: float, threshold_pct: float) -> dict:
    """``archived``: ``category`` holds ``pct`` % of the window, under ``threshold_pct``
    (``analysis.actionable_pct``): archived, not prescribed."""
    return _finding(category, "archived", "archived", {"pct": round(float(pct), 4), "threshold_pct": threshold_pct},
                    f"{category} holds {beside_bound(pct, threshold_pct)} % of the window (under {threshold_pct:g} %): "
                    "archived, not prescribed")


def _select(gaps: dict, mask) -> dict:
    return {k: np.asarray(v)[mask] if not isinstance(v, list) else [x for x, m in zip(v, mask) if m]
            for k, v in gaps.items()}


def diagnose(gaps: dict, kernels, copies: pd.DataFrame, runtime: pd.DataFrame, nvtx: pd.DataFrame,
             iterations, category_pct: dict, actionable_pct: float, launch: dict | None = None,
             sync_runs: tuple | None = None, rules: DiagnosisConfig = RULES,
             collective: dict | None = None) -> list[dict]:
    """Every finding of one GPU (docs/definitions.md#diagnosis), in :data:`pipeline.model.CATEGORIES` order, the
    break point after them.

    Args:
        gaps: the GPU's categorised device-level gaps (columns: name -> array; start, end, length,
            kernel_before, kernel_after, category, attribution).
        kernels: the window's kernels (start, end, pid, stream_id); copies: the window's copy rows
            (:attr:`pipeline.model.Report.copies` columns); runtime, nvtx: the GPU's calls and ranges.
        iterations: the kept iterations ``[(start, end), ...]`` ns.
        category_pct: category -> its idle as % of the window; a category with idle under ``actionable_pct``
            gets one :func:`archived` finding and no rule; one without idle, none.
        launch: ``{"sliver_count", "sliver_ns", "app_idle_ns", "max_gap_ns"}`` when the GPU is launch-bound.
        sync_runs: the union of synchronising calls (``CallIndex.sync_runs``), for what the first
            :data:`RANGE_SAMPLE` sync gaps waited for.
        rules: the rules' thresholds (config ``diagnosis:``).
        collective: the GPU's collective-wait columns (:data:`COLLECTIVE_KEYS`; None: not known), for
            :func:`comm_rule` and :func:`late_rank_rule` (after the findings of the category it speaks to).
    Returns:
        A list of findings (dicts, see the module docstring).
    """
    cats = np.asarray(gaps["category"], dtype=object)
    out = []
    late = late_rank_rule(collective, category_pct, actionable_pct)
    for cat in (c for c in CATEGORIES if c not in CAVEATS):
        pct = float(category_pct.get(cat) or 0.0)
        if pct <= 0:
            continue
        if pct < actionable_pct:
            out.append(archived(cat, pct, actionable_pct))
            continue
        mine = _select(gaps, cats == cat)
        if cat == "data":
            out += [copy_stream_rule(copies, kernels, mine, rules.copy_stream_share),
                    host_memory_rule(copies, rules.pageable_share), host_alloc_rule(mine, runtime),
                    volume_rule(copies, len(iterations), rules.small_copy_bytes)]
        elif cat == "sync":
            # what the first RANGE_SAMPLE syncs waited for (the look-up is O(gaps × copies))
            first = pd.DataFrame({k: mine[k][:RANGE_SAMPLE] for k in ("start", "end", "category", "kernel_before")})
            waits = attribution.sync_waits(first, copies, sync_runs) if sync_runs is not None else None
            out.append(sync_regularity_rule(mine, kernels, iterations, waits, rules.sync_regular_share))
        elif cat == "comm":
            out.append(comm_rule(mine, collective))
        elif cat == "boundary":
            out.append(boundary_rule(mine, nvtx))
        elif cat == "cpu":
            out.append(cpu_rule(mine, nvtx))
        elif cat == "launch" and launch:
            out.append(launch_rule(**launch))
        if late and late["category"] == cat:
            out.append(late)
    app = _select(gaps, np.isin(cats, [c for c in CATEGORIES if c not in CAVEATS]))
    if len(app["start"]):
        found = break_point_rule(app, nvtx, rules.break_point_share, rules.break_point_min_gaps)
        if float(category_pct.get(found["category"]) or 0.0) >= actionable_pct:
            out.append(found)
    return out


def line(finding: dict) -> str:
    """One finding as a line for people: ``<rule in words>: evidence → remedy`` (:func:`rule_name`; ``(not
    judged)`` after it when so; no arrow without a remedy; an archived one reads ``too small to act on: <category>
    holds ...``)."""
    tag = " (not judged)" if not finding.get("judged", True) else ""
    remedy = f" → {finding['remedy']}" if finding.get("remedy") else ""
    return f"{rule_name(finding)}{tag}: {finding['text']}{remedy}"


def split(findings: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(prescribed, archived)``: ``findings`` without the archived ones (what the page prescribes or could
    not judge, in order), and the archived ones apart (docs/definitions.md#diagnosis)."""
    return [f for f in findings if not f.get("archived")], [f for f in findings if f.get("archived")]


def to_text(findings: list[dict]) -> str:
    """``findings`` as the fleet column ``diagnosis``: compact JSON (``""`` for none)."""
    return json.dumps(findings, separators=(",", ":"), sort_keys=True) if findings else ""


def of_text(text) -> list[dict]:
    """The findings of a ``diagnosis`` column value (:func:`to_text`); ``[]`` for an empty or missing value."""
    if not isinstance(text, str) or not text:
        return []
    return json.loads(text)
