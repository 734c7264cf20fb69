"""Exposed vs overlapped communication of one GPU (docs/definitions.md#communication-overlap).

Per GPU inside the window W = [w0, w1), with every kernel interval clipped to W (straddlers are
cut at the edge, not dropped; docs/definitions.md#kernel-interval):

* **collective** kernels are those :func:`pipeline.analysis.attribution.collective_mask` names,
  the same configurable patterns (``categories.collective_kernel``, less ``categories.compute_kernel``)
  as the ``comm`` category, none on a trace of one rank; every other kernel is **compute**. Copy-engine work (memcpy/memset) is neither: it is not a
  kernel, so a collective beside a copy alone is exposed;
* ``comm_ns = |C|``, ``C`` the union of the collective intervals (two collectives running at once
  on two streams count once: a union, not a sum). An NCCL kernel's length is communication plus
  waiting for the slowest peer (docs/definitions.md#communication-overlap), so ``comm_ns`` holds both;
* ``overlapped_ns = |⋃_s (C_s ∩ K_{≠s})|``: the instants when a collective runs on some stream
  ``s`` while a compute kernel runs on *another* stream of the same GPU. ``C_s`` is the union of
  the collectives on stream ``s``, ``K_{≠s}`` the union of the compute kernels on every other
  stream. A stream is a (process, stream id) pair: stream ids are per process, and two processes
  sharing one GPU (MPS) run on different streams. A compute kernel on the *same* stream does not
  count: a stream runs its work in order, so a same-stream overlap in the trace can only be a
  timestamp artefact, not work done while communicating ("some compute kernel runs on
  another stream");
* ``exposed_ns = comm_ns − overlapped_ns``: collective time with no compute kernel on another
  stream, when the GPU only communicates (or waits for its peers). This is what overlapping
  communication with compute can win back.

Both are busy time (a kernel runs), never part of the idle: exposed communication is priced apart
(``comm_exposed_usd_per_month``, :func:`pipeline.analysis.cost.idle_usd_per_month` of the exposed
share of W), not inside ``idle_usd_per_month``.

Pure numpy on int64 ns (:mod:`pipeline.analysis.intervals`); no pandas, no Nsight Systems.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import intervals as iv


class CommOverlap(NamedTuple):
    """One GPU's communication inside W, all int ns: ``comm_ns`` (union of the collectives),
    ``overlapped_ns`` (of it, with compute on another stream) and ``exposed_ns`` (the rest);
    ``comm_ns == overlapped_ns + exposed_ns``."""

    comm_ns: int
    overlapped_ns: int
    exposed_ns: int


def comm_overlap(starts, ends, streams, collective, w0: int, w1: int) -> CommOverlap:
    """Split one GPU's collective kernel time inside W = [w0, w1) into overlapped and exposed.

    Definitions in the module docstring (docs/definitions.md#communication-overlap).

    Args:
        starts, ends: ``(n,)`` int64 ns, every kernel of the GPU (any order; half-open intervals;
            rows with ``end <= start`` after clipping cover nothing).
        streams: ``(n,)`` integer stream identity of each kernel, unique per (process, stream id)
            pair on this GPU (e.g. the codes of :func:`stream_codes`).
        collective: ``(n,)`` bool, the kernel is a collective
            (:func:`pipeline.analysis.attribution.collective_mask`).
        w0, w1: the window, int ns.
    Returns:
        :class:`CommOverlap` (ints, ns). All zeros when no collective runs inside W.
    Raises:
        ValueError: the four arrays differ in length.
    """
    s, e = iv.as_ns(starts), iv.as_ns(ends)
    st = np.asarray(streams, dtype=np.int64)
    coll = np.array(collective, dtype=bool)  # a copy: changed below
    if not (s.size == e.size == st.size == coll.size):
        raise ValueError(f"comm_overlap: starts, ends, streams and collective differ in length "
                         f"({s.size}, {e.size}, {st.size}, {coll.size})")
    # clip to W keeping the rows aligned (iv.clip drops rows, which would lose streams and flags); the rows left
    # empty cover nothing in a union
    s = np.maximum(s, np.int64(w0))
    e = np.minimum(e, np.int64(w1))
    coll &= e > s
    comm_s, comm_e = iv.union(s[coll], e[coll])
    comm_ns = iv.total_length(comm_s, comm_e)
    if comm_ns == 0:
        return CommOverlap(0, 0, 0)
    compute = ~coll
    piece_s, piece_e = [], []
    for stream in np.unique(st[coll]):
        mine = coll & (st == stream)
        c_s, c_e = iv.union(s[mine], e[mine])
        other = compute & (st != stream)
        k_s, k_e = iv.union(s[other], e[other])
        a, b = iv.intersect(c_s, c_e, k_s, k_e)
        piece_s.append(a)
        piece_e.append(b)
    overlapped_ns = iv.union_length(np.concatenate(piece_s), np.concatenate(piece_e))
    return CommOverlap(comm_ns, overlapped_ns, comm_ns - overlapped_ns)


def stream_codes(pids, stream_ids) -> np.ndarray:
    """``(n,)`` int64 code per kernel, one per distinct (process id, stream id) pair (stream ids are
    per process: stream 7 of two processes are two streams)."""
    p = np.asarray(pids, dtype=np.int64).reshape(-1)
    st = np.asarray(stream_ids, dtype=np.int64).reshape(-1)
    if p.size == 0:
        return np.zeros(0, dtype=np.int64)
    same_p = p[1:] == p[:-1]
    if not bool(np.any((p[1:] < p[:-1]) | (same_p & (st[1:] < st[:-1])))):
        # already in (process, stream) order, as the window's kernels come: a pair's code is the number of
        # pair changes before it (the same codes as below, without the sorts)
        codes = np.empty(p.size, dtype=np.int64)
        codes[0] = 0
        np.cumsum(~same_p | (st[1:] != st[:-1]), out=codes[1:])
        return codes
    # codes of each column, then of the pair (process major): 1-D sorts only, fast on millions of kernels
    p_code = np.unique(p, return_inverse=True)[1].reshape(-1).astype(np.int64)
    s_values, s_code = np.unique(st, return_inverse=True)
    pair = p_code * np.int64(s_values.size) + s_code.reshape(-1).astype(np.int64)
    return np.unique(pair, return_inverse=True)[1].reshape(-1).astype(np.int64)
