"""Idle inside collectives: the time a GPU spins in a collective waiting for the last rank
(docs/definitions.md#collective-wait).

A collective cannot move data until every participant has entered it, so the ranks that arrive first wait
inside the kernel for the last one: that time is busy at the device level, yet no work is done. Within one
clock domain (one report holding several GPUs) each call is matched across its participants and split:

* a **call** is one collective kernel (:func:`pipeline.analysis.attribution.collective_mask`, the one
  definition of a collective kernel) of each participant; participants are the report's GPUs that run a
  collective; the k-th kernel of a :func:`family` on one GPU is matched with the k-th of that family on
  every other (abstaining, with the reason, when the families or their counts differ);
* calls are grouped per **communicator stream** first: NCCL runs each communicator on a stream of its own, so a
  GPU's collective streams (its (process, stream id) pairs that run a collective kernel) are numbered in
  ascending (process id, stream id) order (the order they were created in), and the k-th kernel of a family on
  the i-th collective stream of one GPU is matched with the k-th of that family on the i-th of every other: two
  communicators on the same ranks are never cross-matched (stream ids differ between processes, their order
  does not). Abstained when the GPUs' numbers of collective streams, or a stream's families or counts, differ;
* the export's NCCL NVTX ranges (``ncclGroupEnd``, ``ncclAllReduce``, ...) could name the communicator of each
  call through their payload, but the exports seen carry none (the team's 2-GPU NCCL export: 462 NCCL ranges,
  every payload column empty; PyTorch's ``nccl:all_to_all, op_id = N`` counts per process): the basis is always
  the k-th call (:data:`KTH_CALL`), said in ``collective_match_basis``;
* ``last`` = the latest start among the call's participants; a GPU's kernel [s, e) of that call waits over
  [s, min(e, last)) (empty when it is the last) and transfers over [max(s, last), e);
* each part is clipped to the GPU's own window W = [w0, w1): wait = |[s, min(e, last)) ∩ W|, transfer =
  |[max(s, last), e) ∩ W|, so ``collective_ns`` = |[s, e) ∩ W| = wait + transfer exactly, and a call straddling
  W's edge counts with the part of it inside W; a call wholly outside W counts nowhere. ``last`` is found from
  the participants' whole kernels (their starts are not clipped);
* ``calls`` counts this GPU's kernels that overlap W for a positive time, ``last_count`` those of them whose
  start is the latest of the call (a tie: every tied GPU is last).

Pure numpy on int64 ns (pandas only to factorise kernel names); no Nsight Systems.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np
import pandas as pd

from ..schema import (ABSTAINED, COLLECTIVE_WAIT, MEASURED, NO_COLLECTIVE,  # noqa: F401  (the columns' values)
                      PIPELINE_BUBBLE, job_late_rank)

#: NCCL/RCCL/MSCCL device kernel names: ``ncclDevKernel_AllReduce_Sum_f32_RING_LL``,
#: ``ncclKernel_AllReduce_RING_LL_Sum_float``, ``ncclDevKernel_SendRecv``: the word after the prefix.
_NCCL_FAMILY = re.compile(r"^(?:nccl|rccl|msccl)\w*?Kernel_([A-Za-z]+)", re.IGNORECASE)

#: The families that are point-to-point (pipeline-parallel send/recv), not collectives of the whole group.
P2P_FAMILIES = frozenset({"SendRecv", "Send", "Recv"})

#: The fix-first remedy of the wait inside collectives (its own section, never among the idle categories).
REMEDY = "find what holds the late rank back: its own idle, its data, its host"



def family(name: str) -> str:
    """The kernel family of a collective kernel ``name``: for NCCL/RCCL/MSCCL kernels the operation after the
    prefix (``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` -> ``AllReduce``; ``void ncclKernel_SendRecv_RING_SIMPLE
    (...)`` -> ``SendRecv``), for any other the name itself without ``void``, template arguments and parameters
    (``cross_device_reduce_2stage<float, 8>(...)`` -> ``cross_device_reduce_2stage``)."""
    text = str(name).strip()
    if text.startswith("void "):
        text = text[5:].lstrip()
    text = re.split(r"[(<]", text, maxsplit=1)[0].strip()
    hit = _NCCL_FAMILY.match(text)
    return hit.group(1) if hit else text


class RankCalls(NamedTuple):
    """One GPU's collective kernels in start order: ``starts``, ``ends`` (``(n,)`` int64 ns), ``families``
    (``(n,)`` object, :func:`family`) and ``streams`` (``(n,)`` int64, the kernel's collective stream numbered
    0, 1, ... on this GPU in ascending (process id, stream id) order; None: all on one stream)."""

    starts: np.ndarray
    ends: np.ndarray
    families: np.ndarray
    streams: np.ndarray | None = None

    def groups(self) -> np.ndarray:
        """``(n,)`` object: each call's matching group, ``"<family>"`` on one stream, ``"stream <i>: <family>"``
        (i from 1) when this GPU runs collectives on several streams."""
        fams = self.families.astype(str)
        if self.streams is None or not self.streams.size or int(self.streams.max()) == 0:
            return fams.astype(object)
        return np.array([f"stream {int(i) + 1}: {f}" for i, f in zip(self.streams, fams)], dtype=object)


def rank_calls(starts, ends, names, collective, pids=None, stream_ids=None) -> RankCalls:
    """:class:`RankCalls` of one GPU's kernels (``(n,)`` starts, ends in int64 ns, names, the bool
    ``collective`` mask of :func:`pipeline.analysis.attribution.collective_mask` and, where known, each kernel's
    ``pids`` and ``stream_ids``, int), sorted by (start, end). Without ``stream_ids`` every call is on one stream.
    Raises ValueError when they differ in length."""
    s = np.asarray(starts, dtype=np.int64).reshape(-1)
    e = np.asarray(ends, dtype=np.int64).reshape(-1)
    c = np.asarray(collective, dtype=bool).reshape(-1)
    if isinstance(names, pd.Series) and len(names) == c.size:  # only the collectives' names made objects
        n, n_size = np.asarray(names.iloc[np.flatnonzero(c)], dtype=object), c.size
    else:
        n = np.asarray(names, dtype=object).reshape(-1)
        n, n_size = (n[c] if n.size == c.size else n), n.size
    # ids as given (widened to int64 once only the collectives' are picked)
    st = None if stream_ids is None else np.asarray(stream_ids).reshape(-1)
    p = (np.zeros(s.size, np.int64) if pids is None else np.asarray(pids).reshape(-1))
    if not (s.size == e.size == n_size == c.size) or (st is not None and not (st.size == p.size == s.size)):
        raise ValueError(f"rank_calls: starts, ends, names, collective, pids and stream_ids differ in length "
                         f"({s.size}, {e.size}, {n_size}, {c.size}, {p.size}, {None if st is None else st.size})")
    s, e = s[c], e[c]
    order = np.lexsort((e, s))
    # each distinct name is normalised once (a long capture runs the same few NCCL kernels many times)
    codes, labels = pd.factorize(n[order], use_na_sentinel=False)
    fams = np.array([family(x) for x in labels], dtype=object)[codes] if len(labels) else np.zeros(0, object)
    streams = None
    if st is not None:
        pairs = (np.stack([p[c][order].astype(np.int64), st[c][order].astype(np.int64)], axis=1) if s.size
                 else np.zeros((0, 2), np.int64))
        # np.unique over rows sorts them lexicographically: (process id, stream id) ascending
        streams = (np.unique(pairs, axis=0, return_inverse=True)[1].reshape(-1).astype(np.int64) if s.size
                   else np.zeros(0, np.int64))
    return RankCalls(s[order], e[order], fams, streams)


class Matched(NamedTuple):
    """The calls of one clock domain matched across its participants (:func:`match`): ``calls``, the
    :class:`RankCalls` of every GPU key given (matched or not); ``last`` per GPU key, the
    ``(n,)`` int64 latest start among the participants of each of that GPU's calls (in its :class:`RankCalls`
    order); ``is_last`` per GPU key, ``(n,)`` bool, this GPU's start is that latest one; ``note``: how they were
    matched, or why not (then ``last`` is empty: abstained); ``p2p``: every call is point-to-point."""

    calls: dict
    last: dict
    is_last: dict
    note: str
    p2p: bool = False

    @property
    def abstained(self) -> bool:
        return not self.last

    @property
    def basis(self) -> str:
        """``collective_match_basis``: :data:`KTH_CALL` when matched, else ``"abstained: <note>"``."""
        return ABSTAINED_BASIS + self.note if self.abstained else KTH_CALL


#: How the note of a GPU whose peers are in other reports starts (:func:`match`): the job's step may match them
#: across files on one host (:mod:`pipeline.fleet.crosswait`).
SEPARATE_REPORTS = "ranks in separate reports"


#: ``collective_match_basis`` of a matched report (the k-th call of each family, per collective stream), and the
#: prefix of an abstained one's (its reason follows). NVTX payloads are not a basis yet (module docstring).
KTH_CALL, ABSTAINED_BASIS = "kth call of family", "abstained: "


def _counts(calls: RankCalls) -> dict:
    """``{group: calls}`` of one GPU (:meth:`RankCalls.groups`)."""
    groups = calls.groups().astype(str)
    fams, counts = np.unique(groups, return_counts=True) if groups.size else ([], [])
    return {str(f): int(c) for f, c in zip(fams, counts)}


def _counts_text(counts: dict) -> str:
    return ", ".join(f"{f} ×{n}" for f, n in sorted(counts.items()))


def match(ranks: dict, world_size: int = 0) -> Matched:
    """Match every collective call across the participants of one clock domain (one report).

    Args:
        ranks: GPU key -> :class:`RankCalls` of every GPU of the report (those with no collective are no
            participant).
        world_size: the ranks the report says its job ran on (0: it does not say); more ranks than
            participants means the others are in other reports, on clocks not known to agree: abstain.
    Returns:
        :class:`Matched`: the k-th kernel of a family on one participant's i-th collective stream is the k-th
        of that family on the i-th collective stream of every other (:meth:`RankCalls.groups`); abstained (empty ``last``, ``note`` the reason) with fewer than two participants, more ranks than
        participants, or families / counts that differ between participants.
    """
    part = {k: v for k, v in ranks.items() if v.starts.size}
    if len(part) < 2 or (world_size and world_size > len(part)):
        held = f"{len(part)} GPU(s) with collectives in this report" + (
            f" of the {int(world_size)} ranks the capture names" if world_size > len(part) else "")
        return Matched(dict(ranks), {}, {}, f"{SEPARATE_REPORTS}: their clocks are not known to agree ({held})")
    counts = {k: _counts(v) for k, v in part.items()}
    first = next(iter(part))
    for k, c in counts.items():
        if c != counts[first]:
            return Matched(dict(ranks), {}, {}, f"calls disagree between GPUs: {first} ran "
                           f"{_counts_text(counts[first])}, {k} ran {_counts_text(c)}; not matched")
    # the k-th call of each family: its position among that family's kernels on each GPU
    slots = {}
    for k, v in part.items():
        fams = v.groups().astype(str)
        slot = np.zeros(fams.size, dtype=np.int64)
        offset = 0
        for f in sorted(counts[first]):
            where = np.flatnonzero(fams == f)
            slot[where] = offset + np.arange(where.size)
            offset += where.size
        slots[k] = slot
    total = sum(counts[first].values())
    latest = np.full(total, np.iinfo(np.int64).min, dtype=np.int64)
    for k, v in part.items():
        np.maximum.at(latest, slots[k], v.starts)
    last = {k: latest[slots[k]] for k in part}
    is_last = {k: part[k].starts == last[k] for k in part}
    p2p = all(f.rsplit(": ", 1)[-1] in P2P_FAMILIES for f in counts[first])
    several = any(v.streams is not None and v.streams.size and int(v.streams.max()) > 0 for v in part.values())
    note = (f"{len(part)} GPUs in one report (one clock); calls matched by the k-th kernel of each family"
            + (" on each collective stream (numbered by process and stream id on each GPU)" if several else "")
            + f": {_counts_text(counts[first])}")
    return Matched(dict(ranks), last, is_last, note, p2p)


class Wait(NamedTuple):
    """One GPU's collective figures inside W (ints, ns / counts): ``collective_ns`` = ``wait_ns`` +
    ``transfer_ns``, ``calls`` (its calls overlapping W), ``last_count`` (of them, those it entered last)."""

    collective_ns: int
    wait_ns: int
    transfer_ns: int
    calls: int
    last_count: int


#: An NVTX range NCCL (or PyTorch's NCCL process group) opens around a collective, not a send/recv:
#: ``nccl:all_to_all``, ``nccl:all_reduce``; its SendRecv kernels implement a collective, not a pipeline stage.
_NVTX_COLLECTIVE = re.compile(r"^\s*nccl:(?!\s*(?:send|recv))", re.IGNORECASE)


def nvtx_names_collective(texts) -> bool:
    """True when some NVTX range text of ``texts`` names an NCCL collective (``nccl:all_to_all, op_id = 7``), not a
    point-to-point send/recv: then send/recv kernels are a collective's, and their wait is no pipeline bubble."""
    return any(_NVTX_COLLECTIVE.match(str(t)) for t in texts)


def _inside(a: np.ndarray, b: np.ndarray, w0: int, w1: int) -> np.ndarray:
    """``|[a, b) ∩ [w0, w1)|`` per row, never below 0."""
    return np.clip(np.minimum(b, np.int64(w1)) - np.maximum(a, np.int64(w0)), 0, None)


def gpu_wait(calls: RankCalls, last, is_last, w0: int, w1: int) -> Wait:
    """Split one GPU's matched collective kernels (``calls``; ``last``, ``is_last`` from :func:`match`, same
    order) into wait and transfer inside W = [w0, w1) (the module docstring; docs/definitions.md#collective-wait).
    Raises ValueError when ``last`` does not hold one value per call."""
    s, e = calls.starts, calls.ends
    last = np.asarray(last, dtype=np.int64)
    if last.size != s.size:
        raise ValueError(f"gpu_wait: {s.size} calls but {last.size} last starts")
    total = _inside(s, e, w0, w1)
    wait = _inside(s, np.minimum(e, last), w0, w1)
    transfer = _inside(np.maximum(s, last), e, w0, w1)
    counted = total > 0
    return Wait(int(total.sum()), int(wait.sum()), int(transfer.sum()), int(counted.sum()),
                int((counted & np.asarray(is_last, dtype=bool)).sum()))


def is_chronic(last_count: int, calls: int, chronic_share: float) -> bool:
    """A GPU that entered last in more than ``chronic_share`` (``collective.chronic_share``) of its ``calls`` is a
    chronic late rank: the same rank holds the others back in most calls (docs/definitions.md#collective-wait);
    False without calls."""
    return bool(calls and last_count / calls > chronic_share)




def gpu_columns(matched: Matched, gpu_key: str, w0: int, w1: int, chronic_share: float, nvtx_texts=()) -> dict:
    """The fleet row's ``collective_*`` columns of GPU ``gpu_key`` inside its W = [w0, w1) from its report's
    :class:`Matched` calls (docs/definitions.md#collective-wait): ``collective_ns``, ``collective_calls`` and the
    shares of W always; ``collective_wait_ns``, ``collective_transfer_ns`` and ``collective_last_count`` empty
    (None / NaN) when the match abstained (price-free: the wait's dollars, ``collective_wait_usd_per_month``, are
    the fleet's, :func:`pipeline.analysis.cost.price_in_place`); ``collective_match_basis`` (:attr:`Matched.basis`, ``""`` with no
    call in W); ``collective_wait_status`` (:data:`MEASURED`, :data:`ABSTAINED` or
    :data:`NO_COLLECTIVE` when no call of the GPU overlaps W) and ``collective_wait_note`` (how matched, or why
    not); ``collective_chronic`` (:func:`is_chronic` at ``chronic_share``) and ``collective_p2p`` (every call
    send/recv and no NVTX range of ``nvtx_texts`` names a collective: :func:`nvtx_names_collective`)."""
    window = int(w1) - int(w0)
    calls = matched.calls.get(gpu_key) or RankCalls(np.zeros(0, np.int64), np.zeros(0, np.int64),
                                                     np.zeros(0, object))
    measured = gpu_key in matched.last
    own = gpu_wait(calls, matched.last[gpu_key] if measured else calls.starts,
                   matched.is_last[gpu_key] if measured else np.zeros(calls.starts.size, bool), w0, w1)

    def pct(ns):
        return round(100.0 * ns / window, 4) if window > 0 else 0.0

    status = NO_COLLECTIVE if not own.calls else (MEASURED if measured else ABSTAINED)
    row = {"collective_ns": own.collective_ns, "collective_pct": pct(own.collective_ns),
           "collective_calls": own.calls, "collective_wait_status": status,
           "collective_wait_note": "" if status == NO_COLLECTIVE else matched.note,
           "collective_match_basis": "" if status == NO_COLLECTIVE else matched.basis,
           "collective_chronic": False, "collective_p2p": False}
    if status == ABSTAINED:
        return {**row, "collective_wait_ns": None, "collective_transfer_ns": None, "collective_last_count": None,
                "collective_wait_pct": None, "collective_transfer_pct": None}
    return {**row, "collective_wait_ns": own.wait_ns, "collective_transfer_ns": own.transfer_ns,
            "collective_last_count": own.last_count, "collective_wait_pct": pct(own.wait_ns),
            "collective_transfer_pct": pct(own.transfer_ns),
            "collective_chronic": status == MEASURED and is_chronic(own.last_count, own.calls, chronic_share),
            "collective_p2p": status == MEASURED and matched.p2p and not nvtx_names_collective(nvtx_texts)}


def calls_json(calls: RankCalls, world_size: int, nvtx_texts=()) -> dict:
    """One GPU's collective calls in a compact JSON form, for the job's step across files
    (:mod:`pipeline.fleet.crosswait`): ``starts``, ``ends`` (int ns), ``families`` (the distinct ones) and
    ``family`` (each call's index into them), ``streams`` (:attr:`RankCalls.streams`, None: one stream),
    ``world_size`` (the ranks the capture names, 0: unknown) and ``nvtx_collective``
    (:func:`nvtx_names_collective` of the GPU's NVTX texts)."""
    codes, labels = pd.factorize(calls.families.astype(str), use_na_sentinel=False) if calls.families.size \
        else (np.zeros(0, np.int64), [])
    return {"starts": calls.starts.astype(np.int64).tolist(), "ends": calls.ends.astype(np.int64).tolist(),
            "families": [str(x) for x in labels], "family": np.asarray(codes, np.int64).tolist(),
            "streams": None if calls.streams is None else calls.streams.astype(np.int64).tolist(),
            "world_size": int(world_size or 0), "nvtx_collective": bool(nvtx_names_collective(nvtx_texts))}


def calls_of_json(doc: dict) -> RankCalls:
    """The :class:`RankCalls` of :func:`calls_json`'s ``doc``. Raises KeyError, TypeError or ValueError when it is
    damaged (lengths that differ, a family index out of range)."""
    starts = np.asarray(doc["starts"], dtype=np.int64).reshape(-1)
    ends = np.asarray(doc["ends"], dtype=np.int64).reshape(-1)
    family = np.asarray(doc["family"], dtype=np.int64).reshape(-1)
    names = np.asarray([str(x) for x in doc["families"]], dtype=object)
    streams = None if doc.get("streams") is None else np.asarray(doc["streams"], dtype=np.int64).reshape(-1)
    if not (starts.size == ends.size == family.size) or (streams is not None and streams.size != starts.size) \
            or (family.size and (family.min() < 0 or family.max() >= names.size)):
        raise ValueError("damaged collective calls: lengths or family indices disagree")
    return RankCalls(starts, ends, names[family] if family.size else np.zeros(0, object), streams)
