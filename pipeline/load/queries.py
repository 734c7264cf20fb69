"""The loader's two large reads, the kernels and the CUDA API calls, as :class:`~pipeline.load.sqlite.Query`:
what columns of which table, under what names, how NULLs fill and which ids are narrowed or decoded.

Built here, with numpy and the standard library only (no pandas), so that a run of one export can start
reading those tables while it still imports its stages (:mod:`pipeline.load.ahead`); the loader
(:func:`pipeline.load.report.load_report`) builds the very same queries, from these functions.
"""
from __future__ import annotations

import numpy as np

from .limits import cut_sql
from .sqlite import Query
from .tables import KERNEL_NAME_COLUMNS, KERNEL_TABLE, RUNTIME_TABLE, Schema

#: The result columns of :func:`kernel_select` (``name`` only when the table has a name column).
KERNEL_QUERY_COLUMNS = ["start", "end", "pid", "device_id", "stream_id", "correlation_id", "context_id", "name"]
#: The result columns of :func:`runtime_select` (``name`` only when the table has a name column).
RUNTIME_QUERY_COLUMNS = ["start", "end", "gtid", "correlation_id", "name"]
#: Columns of the kernel and runtime queries kept as int32 while their values fit (:class:`Query`).
ID_COLUMNS = ("pid", "tid", "device_id", "stream_id", "correlation_id", "context_id", "name")


def pid_of(global_id) -> np.ndarray:
    """Process id from a ``globalPid``/``globalTid``: bits 24..47. Shape preserved."""
    return (np.asarray(global_id, dtype=np.int64) >> 24) & 0xFFFFFF


def tid_of(global_tid) -> np.ndarray:
    """Thread id from a ``globalTid``: bits 0..23. Shape preserved."""
    return np.asarray(global_tid, dtype=np.int64) & 0xFFFFFF


def pid_column(schema: Schema, table: str) -> tuple[str, bool]:
    """SQL for the process column of ``table`` and whether it needs decoding."""
    cols = schema.columns(table)
    for name in ("globalPid", "globalTid"):
        if name in cols:
            return name, True
    for name in ("pid", "processId"):
        if name in cols:
            return name, False
    return "-1", False  # no process column (older schema): see pipeline.load.processes.infer_pids


def name_columns(schema: Schema) -> list[str]:
    """The kernel table's name columns (:data:`~pipeline.load.tables.KERNEL_NAME_COLUMNS` it has), in that order."""
    if not schema.has(KERNEL_TABLE):
        return []
    return [c for c in KERNEL_NAME_COLUMNS if c in schema.columns(KERNEL_TABLE)]


def kernel_select(schema: Schema) -> tuple[str, bool, bool] | None:
    """``(sql, decode_pid, has_name)`` reading the kernel columns (:data:`KERNEL_QUERY_COLUMNS`): a missing id
    column read as 0, the process column as :func:`pid_column` finds it (``decode_pid``: a ``globalPid`` to
    decode), the first name column cut (:func:`~pipeline.load.limits.cut_sql`). None when the export has no
    kernel table or it lacks ``start`` or ``end`` (the loader says which)."""
    cols = schema.columns(KERNEL_TABLE)
    if not cols or "start" not in cols or "end" not in cols:
        return None
    pid_col, decode = pid_column(schema, KERNEL_TABLE)
    name_col = schema.first_column(KERNEL_TABLE, KERNEL_NAME_COLUMNS)
    dev = "deviceId" if "deviceId" in cols else "0"
    ctx = "contextId" if "contextId" in cols else "0"
    stream = "streamId" if "streamId" in cols else "0"
    corr = "correlationId" if "correlationId" in cols else "0"
    sql = (
        f"SELECT start, end, {pid_col} AS pid, {dev} AS device_id, {stream} AS stream_id, "
        f"{corr} AS correlation_id, {ctx} AS context_id{', ' + cut_sql(name_col) + ' AS name' if name_col else ''} "
        f"FROM {KERNEL_TABLE}"
    )
    return sql, decode, name_col is not None


def runtime_select(schema: Schema) -> tuple[str | None, bool]:
    """``(sql, has_name)`` reading the CUDA runtime API calls (:data:`RUNTIME_QUERY_COLUMNS`); sql is None
    without the table."""
    cols = schema.columns(RUNTIME_TABLE)
    if not cols:
        return None, False
    name_col = "nameId" if "nameId" in cols else ("name" if "name" in cols else None)
    corr = "correlationId" if "correlationId" in cols else "0"
    tid_col = "globalTid" if "globalTid" in cols else "0"
    return (f"SELECT start, end, {tid_col} AS gtid, {corr} AS correlation_id"
            f"{', ' + cut_sql(name_col) + ' AS name' if name_col else ''} FROM {RUNTIME_TABLE}"), name_col is not None


def kernel_columns(sql: str, decode_pid: bool, has_name: bool, names: list[str] = ()) -> Query:
    """The :class:`~pipeline.load.sqlite.Query` of :func:`kernel_select`'s ``sql``: names NULL as -1,
    a ``globalPid`` decoded to the process id as it is read, ids as int32. ``names``: the kernel table's name
    columns (:func:`name_columns`); with a name and others beside it, those are read
    along on the b-tree fast path (``alias_1``, ...: :attr:`~pipeline.load.sqlite.Query.also`), for the aliases
    (:func:`pipeline.load.report._kernel_work`) in the same pass over the table."""
    also = {f"alias_{i}": c for i, c in enumerate(names[1:], 1)} if has_name and len(names) > 1 else None
    return Query(KERNEL_TABLE, sql, KERNEL_QUERY_COLUMNS[:8 if has_name else 7], {"name": -1},
                 {"pid": [("pid", pid_of)]} if decode_pid else None, ID_COLUMNS, ("name",), also)


def runtime_columns(sql: str, has_name: bool) -> Query:
    """The :class:`~pipeline.load.sqlite.Query` of :func:`runtime_select`'s ``sql``: names NULL as -1,
    ``globalTid`` read as its thread and process ids, ids as int32."""
    return Query(RUNTIME_TABLE, sql, RUNTIME_QUERY_COLUMNS[:5 if has_name else 4], {"name": -1},
                 {"gtid": [("tid", tid_of), ("pid", pid_of)]}, ID_COLUMNS, ("name",))


def bulk_queries(schema: Schema) -> dict[str, Query]:
    """``{"kernels": Query, "runtime": Query}`` of an export's tables that have them: the queries
    :func:`pipeline.load.report.load_report` reads them with, when it reads them."""
    queries = {}
    kernels = kernel_select(schema)
    if kernels is not None:
        queries["kernels"] = kernel_columns(*kernels, name_columns(schema))
    sql, has_name = runtime_select(schema)
    if sql:
        queries["runtime"] = runtime_columns(sql, has_name)
    return queries
