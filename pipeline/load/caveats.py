"""Where an idle gap may not be the application's (docs/definitions.md#caveats: ``profiler`` and ``untraced``).

* :func:`load_overhead`: Nsight Systems' own overhead rows (``PROFILER_OVERHEAD``: initialisation,
  buffer flushes, TLS allocation, instrumentation) and CUPTI's (``CUPTI_ACTIVITY_KIND_OVERHEAD``,
  typed by ``ENUM_CUPTI_OVERHEAD_TYPE``: buffer flush, command buffer full, module loading, ...).
  Which kinds are the profiler's is the analysis' call (``categories.profiler_overheads``).
* :func:`lost_launches`: CUDA launch calls whose correlationId has no kernel (nor copy) record
  in their process, between the first and the last record the capture kept: the trace lost them;
  not the launches recorded into a graph (:mod:`pipeline.analysis.graphcapture`), which never run.
"""
from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pandas as pd

from ..analysis.graphcapture import LAUNCH_APIS, captured, name_mask, ranges
from ..arrays import SCAN_ROWS, Positions, distinct, pair_keys
from ..model import OVERHEAD_COLUMNS, UNTRACED_COLUMNS, no_overhead, no_untraced
from .queries import pid_of
from .sqlite import read_frame
from .tables import CUPTI_OVERHEAD_TABLE, OVERHEAD_TYPE_TABLE, PROFILER_OVERHEAD_TABLE, Schema

#: ENUM_CUPTI_OVERHEAD_TYPE ids as Nsight Systems 2024-2026 number them, for exports without the table.
OVERHEAD_TYPE_NAMES = {
    0: "OVERHEAD_UNDEFINED", 1: "OVERHEAD_UNKNOWN", 2: "OVERHEAD_DRIVER_COMPILER", 3: "OVERHEAD_CUPTI_BUFFER_FLUSH",
    4: "OVERHEAD_CUPTI_INSTRUMENTATION", 5: "OVERHEAD_CUPTI_RESOURCE", 6: "OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING",
    7: "OVERHEAD_LAZY_FUNCTION_LOADING", 8: "OVERHEAD_COMMAND_BUFFER_FULL",
}



def _overhead_type_names(schema: Schema) -> dict[int, str]:
    if {"id", "name"} <= set(schema.columns(OVERHEAD_TYPE_TABLE)):
        return {int(i): str(n) for i, n in schema.con.execute(f"SELECT id, name FROM {OVERHEAD_TYPE_TABLE}")}
    return dict(OVERHEAD_TYPE_NAMES)


def load_overhead(schema: Schema, strings: dict[int, str]) -> pd.DataFrame:
    """Overhead rows of both tables (:data:`~pipeline.model.OVERHEAD_COLUMNS`): ``kind`` is the
    ENUM_CUPTI_OVERHEAD_TYPE name (the row's own name in exports without ``overheadType``), ``own``
    True for PROFILER_OVERHEAD rows. Rows without a thread (no process to tie them to) or without
    timestamps are left out; rows with end < start are kept for the loader to count."""
    types = None
    frames = []
    for table, own in ((PROFILER_OVERHEAD_TABLE, True), (CUPTI_OVERHEAD_TABLE, False)):
        cols = schema.columns(table)
        if not {"start", "end", "globalTid"} <= set(cols):
            continue
        kind = "overheadType" if "overheadType" in cols else "-1"
        name = "nameId" if "nameId" in cols else "NULL"
        df = read_frame(schema, f"SELECT start, end, globalTid AS gtid, {kind} AS type, {name} AS name_id "
                                f"FROM {table} WHERE globalTid IS NOT NULL AND start IS NOT NULL AND end IS NOT NULL", table)
        if df.empty:
            continue
        if kind != "-1":
            types = _overhead_type_names(schema) if types is None else types
            kinds = [types.get(int(t), f"OVERHEAD_{int(t)}") for t in df["type"].tolist()]
        else:
            kinds = [strings.get(int(i), "") if pd.notna(i) else "" for i in df["name_id"].tolist()]
        frames.append({"start": df["start"].to_numpy().astype(np.int64), "end": df["end"].to_numpy().astype(np.int64),
                       "pid": pid_of(df["gtid"].to_numpy().astype(np.int64)), "kind": np.array(kinds, dtype=object),
                       "own": np.full(len(df), own)})
    if not frames:
        return no_overhead()
    # kind as a Series: a frame made of an object array would infer text
    joined = {c: np.concatenate([f[c] for f in frames]) for c in OVERHEAD_COLUMNS}
    return pd.DataFrame({**joined, "kind": pd.Series(joined["kind"], dtype=object)}, copy=False)


def _next_record_start(corr: np.ndarray, start: np.ndarray, after: np.ndarray) -> np.ndarray:
    """For each correlationId in ``after``, the start of the earliest record (``corr``, ``start``:
    one process's kernel and copy rows) with the smallest correlationId above it (there is one)."""
    order = np.lexsort((start, corr))
    corr, start = corr[order], start[order]
    first = np.ones(corr.size, dtype=bool)
    first[1:] = corr[1:] != corr[:-1]
    corr, start = corr[first], start[first]   # the earliest record of each correlationId
    return start[np.searchsorted(corr, after, side="right")]


#: A process's correlationIds are looked up in a bitmap over their range when all the ranges together
#: hold at most this many ids per record, plus :data:`BITMAP_SLACK` (one byte each); else by sorted keys.
BITMAP_IDS_PER_RECORD = 32
BITMAP_SLACK = 1 << 24


#: Rows handled at once by :func:`_untraced_calls` (its temporaries are this long, not the tables).
CHUNK_ROWS = 1 << 18


def _chunks(n: int):
    return (slice(i, min(i + CHUNK_ROWS, n)) for i in range(0, n, CHUNK_ROWS))


def _record_chunks(records: list) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(pid, correlationId)`` arrays of :data:`CHUNK_ROWS` rows of each ``(pid, corr)`` table of
    ``records`` in turn, the rows of correlationId 0 (tied to no call) left out."""
    for w_pid, w_corr in records:
        for part in _chunks(w_corr.size):
            pid, corr = w_pid[part], w_corr[part]
            tied = corr != 0
            if not tied.all():
                pid, corr = pid[tied], corr[tied]
            yield pid, corr


def _process_ranges(records: list, positions: Positions, processes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, hi)``: the smallest and largest correlationId of the records of each of ``processes`` processes
    (``positions``: their codes), each piece of rows grouped by process with one radix sort of its codes (up
    to 32,768 processes: 16-bit codes). For when the bitmap of :func:`_untraced_calls` would be too large."""
    lo = np.full(processes, np.iinfo(np.int64).max)
    hi = np.full(processes, np.iinfo(np.int64).min)
    for w_pid, w_corr in _record_chunks(records):
        if not w_corr.size:
            continue
        codes = positions(w_pid)
        order = np.argsort(codes.astype(np.int16) if processes <= 1 << 15 else codes, kind="stable")
        ordered = w_corr[order]
        del order
        counts = np.bincount(codes, minlength=processes)
        there = np.flatnonzero(counts)
        first = (np.cumsum(counts) - counts)[there]
        lo[there] = np.minimum(lo[there], np.minimum.reduceat(ordered, first))
        hi[there] = np.maximum(hi[there], np.maximum.reduceat(ordered, first))
    return lo, hi


def _first_last(row: np.ndarray) -> tuple[int, int]:
    """The first and the last position of a True in ``row`` (bool, holding one), the last found from the
    end a piece at a time (no pass over the whole row)."""
    first = int(np.argmax(row))
    for end in range(row.size, first, -SCAN_ROWS):
        hits = np.flatnonzero(row[max(first, end - SCAN_ROWS):end])
        if hits.size:
            return first, max(first, end - SCAN_ROWS) + int(hits[-1])
    return first, first


def _untraced_calls(records: list, call_pid, call_corr) -> np.ndarray:
    """Which calls (process, correlationId) have no record of their own correlationId while their process
    has records with smaller and with larger ones (``records``: ``(pid, corr)`` arrays of each table of
    records; those of correlationId 0 count for nothing). Shape ``(calls,)``.

    CUPTI counts correlationIds up, so each process's range is dense: one bitmap, a row per process over
    the range of all the records' correlationIds, is set in one pass over the records; each process's
    range is where its row starts and ends, and the calls are looked up in it in one pass. When that
    bitmap would be too large (:data:`BITMAP_IDS_PER_RECORD`), the ranges come from the records grouped
    by process and the calls are answered from the sorted (process, correlationId) keys. Each pass goes
    :data:`CHUNK_ROWS` rows at a time, table by table, so its temporaries stay small (the tables are never
    joined). Processes are told apart through a table over their ids (:class:`~pipeline.arrays.Positions`)
    when those lie close together, else a hash table."""
    pids = distinct(lambda: (pid for pid, _ in _record_chunks(records)))
    positions = Positions(pids, sum(p.size for p, _ in records) + call_pid.size, missing=pids.size)
    held, low, high = 0, np.iinfo(np.int64).max, np.iinfo(np.int64).min  # records with a correlationId, their range
    for _, w_corr in _record_chunks(records):
        if w_corr.size:
            held += w_corr.size
            low, high = min(low, int(w_corr.min())), max(high, int(w_corr.max()))
    width = max(0, high - low + 1)  # a row of the bitmap: every correlationId of the records
    bitmap = pids.size * width <= BITMAP_IDS_PER_RECORD * held + BITMAP_SLACK
    if bitmap:
        total = pids.size * width
        base = np.arange(pids.size + 1, dtype=np.int64) * width - low  # a record's slot: base[process] + corr
        base[-1] = total  # calls of no process: the last slot, never set
        present = np.zeros(total + 1, dtype=bool)
        for w_pid, w_corr in _record_chunks(records):
            at = np.take(base, positions(w_pid)) if pids.size > 1 else np.full(w_corr.size, base[0])
            at += w_corr
            present[at] = True
        ends = [_first_last(present[p * width:(p + 1) * width]) for p in range(pids.size)]
        lo = np.array([low + a for a, _ in ends] + [np.iinfo(np.int64).max], dtype=np.int64)
        hi = np.array([low + b for _, b in ends] + [np.iinfo(np.int64).min], dtype=np.int64)
    else:
        lo, hi = _process_ranges(records, positions, pids.size)
        lo, hi = np.append(lo, np.iinfo(np.int64).max), np.append(hi, np.iinfo(np.int64).min)  # the last slot:
    lost = np.zeros(call_pid.size, dtype=bool)                                                  # no process
    for part in _chunks(call_pid.size):
        code = positions(call_pid[part])
        corr = call_corr[part]
        inside = corr > np.take(lo, code)
        inside &= corr < np.take(hi, code)
        if bitmap:
            at = np.take(base, code)
            at += corr
            at[~inside] = total
            inside &= ~present[at]
        lost[part] = inside
    if bitmap:
        return lost
    rows = np.flatnonzero(lost)
    keys = np.sort(np.concatenate([pair_keys(w_pid, w_corr) for w_pid, w_corr in _record_chunks(records)]
                                  or [np.zeros(0, np.int64)]))
    wanted = pair_keys(call_pid[rows], call_corr[rows])
    order = np.argsort(wanted, kind="stable")
    at = np.minimum(np.searchsorted(keys, wanted[order]), keys.size - 1)
    lost[rows[order]] = keys[at] != wanted[order]
    return lost


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The integer arrays ``parts`` end to end, as int32 when every value fits (else int64); the
    one array itself when there is one."""
    if len(parts) == 1:
        return parts[0]
    small = all(p.size == 0 or (np.iinfo(np.int32).min <= p.min() and p.max() <= np.iinfo(np.int32).max)
                for p in parts)
    return np.concatenate(parts, dtype=np.int32 if small else np.int64, casting="unsafe")


def lost_launches(kernels: pd.DataFrame, copies: pd.DataFrame, runtime: pd.DataFrame,
                  by_process: bool = True) -> pd.DataFrame:
    """Launch calls the trace kept no GPU record of (:data:`~pipeline.model.UNTRACED_COLUMNS`, kind
    ``launch``), in (pid, correlationId) order.

    A launch call (:data:`LAUNCH_APIS`; correlationId not 0) is lost when no kernel and no copy of
    its process carries its correlationId (correlationIds are per process), and the process has
    records with both smaller and larger correlationIds (launches before the first or after the
    last record ran outside the capture: not lost). A launch inside a graph capture range of its
    thread (:func:`pipeline.analysis.graphcapture.captured`: ``cudaStreamBeginCapture`` …
    ``EndCapture``) was recorded into a graph, never run: not lost. The lost work may have run from the call's
    start (``start``) to the start of the next GPU record its process launched after it (``end``).

    Args:
        kernels, copies: start, pid, correlation_id of every kernel and copy row (frames, or
            mappings of column arrays).
        runtime: CUDA API calls (start, end, pid, tid, correlation_id, name normalised).
        by_process: False when the runtime calls name no process (older schemas without
            ``globalTid``): correlationIds are then matched over the whole export and the lost
            launches get pid -1 (every GPU).
    """
    is_launch = name_mask(runtime["name"], LAUNCH_APIS)
    call_corr = runtime["correlation_id"].to_numpy()  # ids as the loader keeps them (int32 when they fit)
    is_launch = is_launch & (call_corr != 0)  # (name_mask may give a read-only array)
    work = [f for f in (kernels, copies) if len(f["start"])]
    if not is_launch.any() or not work:
        return no_untraced()
    found = ranges(runtime)
    if found["start"].size:
        is_launch &= ~captured(runtime, found)  # recorded into a graph: no kernel by design
        if not is_launch.any():
            return no_untraced()
    call_pid = runtime["pid"].to_numpy() if by_process else np.zeros(call_corr.size, np.int64)
    records = [(np.asarray(f["pid"]) if by_process else np.zeros(len(f["start"]), np.int32),
                np.asarray(f["correlation_id"])) for f in work]
    # Every call is looked up (one call's answer does not depend on the others), so the columns are
    # used as they are, not copied to the launches first; the launches are kept after.
    lost = _untraced_calls(records, call_pid, call_corr)
    lost &= is_launch
    lost = np.flatnonzero(lost)
    if not lost.size:
        return no_untraced()
    w_corr = _joined([np.asarray(f["correlation_id"]) for f in work])
    w_pid = _joined([pid for pid, _ in records])
    keep = w_corr != 0  # records without a correlationId tie to no call
    w_corr, w_pid = w_corr[keep], w_pid[keep]
    w_start = np.concatenate([np.asarray(f["start"], dtype=np.int64) for f in work])[keep]
    ends = np.zeros(lost.size, dtype=np.int64)
    for pid in np.unique(call_pid[lost]):  # the few processes that lost records
        mine, gone = w_pid == pid, call_pid[lost] == pid
        ends[gone] = _next_record_start(w_corr[mine], w_start[mine], call_corr[lost][gone])
    sel = runtime.iloc[lost]
    call_start = sel["start"].to_numpy(np.int64)
    call_end = sel["end"].to_numpy(np.int64)
    out = pd.DataFrame({
        "kind": "launch", "pid": sel["pid"].to_numpy(np.int64) if by_process else -1,
        "correlation_id": call_corr[lost].astype(np.int64), "name": sel["name"].astype(str).to_numpy(object),
        "call_start": call_start, "call_end": call_end, "start": call_start, "end": np.maximum(ends, call_end)})
    return out.sort_values(["pid", "correlation_id"], kind="stable").reset_index(drop=True)[list(UNTRACED_COLUMNS)]
