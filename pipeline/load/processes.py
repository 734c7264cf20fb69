"""Processes: which process each row belongs to, and the (process, device) pairs that ran kernels.

Process ids come from ``globalPid`` / ``globalTid``, which Nsight Systems encodes as
``(vmId << 56) | (pid << 24) | tid`` (:func:`~pipeline.load.queries.pid_of`); older schemas have no process
column, and each row's process is inferred (:func:`infer_pids`). Which GPU each (process,
deviceId) pair is: :mod:`.gpus` (docs/definitions.md#gpus-and-mig-instances).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ..arrays import SCAN_ROWS, Positions, distinct
from ..model import RowWarning, WarningCode
from .queries import pid_column
from .tables import CONTEXT_TABLE, KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE, Schema


def _cuda_contexts(schema: Schema) -> dict[tuple[int, int], int]:
    """(deviceId, contextId) -> processId from TARGET_INFO_CUDA_CONTEXT_INFO, where that pair
    names one process only (context ids restart in every process)."""
    cols = schema.columns(CONTEXT_TABLE)
    if not {"processId", "deviceId", "contextId"} <= set(cols):
        return {}
    seen: dict[tuple[int, int], set] = {}
    for pid, dev, ctx in schema.con.execute(f"SELECT processId, deviceId, contextId FROM {CONTEXT_TABLE}"):
        if pid is not None and dev is not None and ctx is not None:
            seen.setdefault((int(dev), int(ctx)), set()).add(int(pid))
    return {key: next(iter(pids)) for key, pids in seen.items() if len(pids) == 1}


#: A stream whose launch-matched rows come from one process at least this often belongs to it.
STREAM_OWNER_SHARE = 0.9


def infer_pids(frame: pd.DataFrame, runtime: pd.DataFrame, hints: pd.DataFrame | None,
                contexts: dict[tuple[int, int], int]) -> np.ndarray:
    """Process id of each row of a GPU-activity table that has no process column (older schema).

    ``frame`` has start, correlation_id, device_id, context_id, stream_id; ``runtime`` the CUDA
    runtime calls (start, correlation_id, pid); ``hints`` rows with known pids on the same streams
    (the kernels, when placing copies).

    1. Each row's launch: the runtime call with the same correlationId that started last
       before the row (correlation ids restart in every process, and a window cut can drop
       one process's call, so the id alone can name the wrong process).
    2. A (device, context, stream) whose launch-matched rows (and hints) come from one process
       at least :data:`STREAM_OWNER_SHARE` of the time belongs to that process: all its rows
       get it, matched or not. Streams that processes really share keep the per-row answer.
    3. Rows still open: TARGET_INFO_CUDA_CONTEXT_INFO's process of the (device, context), else
       the only process the export shows doing CUDA work.
    Returns int64 pids; -1 where nothing decides.
    """
    n = len(frame)
    pid = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return pid
    starts = frame["start"].to_numpy(np.int64)
    corr = frame["correlation_id"].to_numpy(np.int64)
    calls = runtime[["start", "correlation_id", "pid"]].astype("int64")
    if not calls.empty:
        rows = pd.DataFrame({"row": np.arange(n), "start": starts, "correlation_id": corr})
        hit = pd.merge_asof(rows.sort_values("start", kind="stable"), calls.sort_values("start", kind="stable"),
                            on="start", by="correlation_id", direction="backward").dropna(subset=["pid"])
        pid[hit["row"].to_numpy(np.int64)] = hit["pid"].to_numpy(np.int64)

    stream_cols = ["device_id", "context_id", "stream_id"]
    votes = frame.loc[pid >= 0, stream_cols].assign(pid=pid[pid >= 0])
    if hints is not None and not hints.empty:
        votes = pd.concat([votes, hints.loc[hints["pid"] >= 0, stream_cols + ["pid"]]], ignore_index=True)
    if not votes.empty:
        counts = votes.groupby(stream_cols + ["pid"]).size().rename("n").reset_index()
        counts["share"] = counts["n"] / counts.groupby(stream_cols)["n"].transform("sum")
        owners = counts[counts["share"] >= STREAM_OWNER_SHARE].set_index(stream_cols)["pid"]
        if not owners.empty:
            owner = owners.reindex(pd.MultiIndex.from_frame(frame[stream_cols])).fillna(-1).to_numpy(np.int64)
            pid = np.where(owner >= 0, owner, pid)
    todo = pid < 0
    if todo.any() and contexts:
        keys = zip(frame["device_id"].to_numpy(np.int64)[todo], frame["context_id"].to_numpy(np.int64)[todo])
        pid[todo] = [contexts.get((int(d), int(c)), -1) for d, c in keys]
    todo = pid < 0
    if todo.any():
        cuda_pids = set(runtime["pid"].unique().tolist()) | set(contexts.values()) | set(pid[pid >= 0].tolist())
        if len(cuda_pids) == 1:
            pid[todo] = next(iter(cuda_pids))
    return pid


def device_pairs(kernels) -> tuple[np.ndarray, pd.DataFrame]:
    """``(codes, pairs)``: the distinct (pid, device_id) of the kernel rows (a frame, or a mapping
    of column arrays), sorted, and for each row the index of its pair in ``pairs`` (int16 while the pairs are that
    few): through a table over the pairs' range when they lie close together (:class:`~pipeline.arrays.Positions`),
    else hashed; O(rows)."""
    pid = np.asarray(kernels["pid"])  # as kept (int32 ids): widened a piece at a time
    dev = np.asarray(kernels["device_id"])
    if pid.size == 0:
        return np.zeros(0, dtype=np.intp), pd.DataFrame({"pid": np.zeros(0, np.int64),
                                                         "device_id": np.zeros(0, np.int64)})
    # One int64 per (pid, device): pids are 24-bit, device ids small; shift keeps the order. Made and
    # looked up a piece of rows at a time (the pairs are few): no temporary as long as the rows.
    dev_low = int(dev.min())
    width = int(dev.max()) - dev_low + 1

    def combined(part: slice) -> np.ndarray:
        return pid[part].astype(np.int64) * width + (dev[part].astype(np.int64) - dev_low)

    parts = [slice(i, i + SCAN_ROWS * 4) for i in range(0, pid.size, SCAN_ROWS * 4)]
    uniques = distinct(lambda: (combined(part) for part in parts))  # sorted, as factorize's
    rank = Positions(uniques, pid.size)
    codes = np.empty(pid.size, dtype=np.int16 if uniques.size <= np.iinfo(np.int16).max else np.intp)
    for part in parts:
        codes[part] = rank(combined(part))
    pairs = pd.DataFrame({"pid": uniques // width, "device_id": uniques % width + dev_low})
    return codes, pairs


def pair_keys(devices: pd.DataFrame, pid, device_id) -> np.ndarray:
    """Per row (``pid``, ``device_id``: int arrays of one length), the ``gpu_key`` of that pair in
    ``devices`` (one row per pair); None where ``devices`` has no such pair. Object array. Each
    distinct pair is looked up once."""
    pid = np.asarray(pid, dtype=np.int64)
    dev = np.asarray(device_id, dtype=np.int64)
    if pid.size == 0:
        return np.zeros(0, dtype=object)
    known = dict(zip(zip(devices["pid"].to_numpy(np.int64).tolist(), devices["device_id"].to_numpy(np.int64).tolist()),
                     devices["gpu_key"].tolist()))
    # one int64 per pair (process ids and device ids fit in 32 bits), then each distinct one looked up
    codes, combined = pd.factorize((pid << 32) | (dev & 0xFFFFFFFF))
    first = np.zeros(combined.size, dtype=np.int64)
    first[codes[::-1]] = np.arange(codes.size - 1, -1, -1)  # the first row of each pair
    keys = np.array([known.get(pair) for pair in zip(pid[first].tolist(), dev[first].tolist())],
                    dtype=object)
    return keys[codes]


def gpu_key_column(devices: pd.DataFrame, pairs: pd.DataFrame, codes: np.ndarray) -> pd.Categorical:
    """Per kernel row, its GPU key (categorical), from its pair code (:func:`device_pairs`)."""
    keys = pair_keys(devices, pairs["pid"].to_numpy(np.int64), pairs["device_id"].to_numpy(np.int64))
    key_codes, key_names = pd.factorize(keys, sort=True)
    small = np.min_scalar_type(-max(len(key_names), 1))  # the codes' dtype: no whole-column intp temporary
    return pd.Categorical.from_codes(np.take(key_codes.astype(small), codes),
                                     categories=pd.Index(key_names, dtype="str"))


def resolve_missing_pids(schema: Schema, kernels: pd.DataFrame, copies: pd.DataFrame,
                          runtime: pd.DataFrame) -> list[RowWarning]:
    """Fill in ``pid`` (in place) where a table has no process column (older schemas lack
    ``globalPid``); returns the warning that says so, or nothing."""
    tables = [t for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)
              if schema.columns(t) and pid_column(schema, t)[0] == "-1"]
    if not tables:
        return []
    # Runtime calls identify processes only through globalTid.
    calls = runtime if "globalTid" in schema.columns(RUNTIME_TABLE) else runtime.iloc[0:0]
    contexts = _cuda_contexts(schema)
    unresolved = 0
    if KERNEL_TABLE in tables and not kernels.empty:
        kernels["pid"] = infer_pids(kernels, calls, None, contexts)
        unresolved += int((kernels["pid"] < 0).sum())
    if not copies.empty and (copies["pid"] < 0).any():
        todo = copies["pid"] < 0
        hints = kernels[["device_id", "context_id", "stream_id", "pid"]]
        copies.loc[todo, "pid"] = infer_pids(copies[todo], calls, hints, contexts)
        unresolved += int((copies["pid"] < 0).sum())
    for frame in (kernels, copies):
        frame.loc[frame["pid"] < 0, "pid"] = 0
    text = (f"older export schema: no globalPid column in {', '.join(tables)}; each row's process was taken "
            "from its CUDA runtime launch (correlationId) or its stream")
    if unresolved:
        text += f"; {unresolved} rows could not be tied to a process and count under pid 0"
    return [RowWarning(WarningCode.INFERRED_PROCESSES, text)]
