"""Load one Nsight Systems SQLite export into tidy pandas frames.

Schema resolution: tables appear only when they hold data and columns change
between Nsight Systems versions, so every table and column is looked up by its
exact name in what the file actually has (``sqlite_master`` and
``PRAGMA table_info``), never by substring. String columns that hold ids into
``StringIds`` are resolved through it.

The file is opened strictly read-only (``mode=ro&immutable=1`` URI): nothing is
ever written into a user's profile, not even an index.

Process ids come from ``globalPid`` / ``globalTid``, which Nsight Systems encodes
as ``(vmId << 56) | (pid << 24) | tid``; see :func:`pid_of`.
"""
from __future__ import annotations

import os
import re
import sqlite3
import urllib.parse
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
NVTX_TABLE = "NVTX_EVENTS"
GPU_TABLE = "TARGET_INFO_GPU"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
DIAGNOSTIC_TABLE = "DIAGNOSTIC_EVENT"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
STRING_TABLE = "StringIds"

#: Kernel name columns in order of preference (short names read best in a roster).
KERNEL_NAME_COLUMNS = ("shortName", "demangledName", "mangledName", "name")
#: NVTX event types that are ranges: NvtxPushPopRange (59), NvtxStartEndRange (60).
NVTX_RANGE_TYPES = (59, 60)
CONTEXT_TABLE = "TARGET_INFO_CUDA_CONTEXT_INFO"
#: DIAGNOSTIC_EVENT severity levels that are warnings or errors (ENUM_DIAGNOSTIC_SEVERITY_LEVEL).
DIAGNOSTIC_WARNING_LEVELS = (2, 3)
#: Prefix of the per-GPU warnings that quote a DIAGNOSTIC_EVENT text.
DIAGNOSTIC_PREFIX = "DIAGNOSTIC_EVENT: "
#: DIAGNOSTIC_EVENT texts saying the trace itself is incomplete. Nsight Systems writes, e.g.,
#: "CUPTI dropped 1234 records. Some CUPTI events might be missing.", "Couldn't allocate CUPTI
#: buffers 3 times.Some CUPTI events might be missing.", "Number of incomplete CUPTI events
#: dropped: 12. ...", "Some events (42) were lost. ...", "Reading events from qdstrm: ... : Lost
#: events = 7" (texts from the nsys binaries), at warning or info severity.
LOST_EVENTS = re.compile(r"\blost\b|\bdropped\b|\bmissing\b|overflow|discard", re.IGNORECASE)
#: ... unless the count it names is zero ("dropped 0 records", "Lost events = 0", "(0) were lost").
_NO_LOSS = re.compile(r"(?:dropped|lost(?: events)?)\s*[:=]?\s*0\b|\(\s*0\s*\)\s*were lost", re.IGNORECASE)
#: Start of the loader's warning about dropped kernel rows ("dropped N kernel rows ...").
_DROPPED_ROWS = re.compile(r"dropped \d+ kernel rows\b")

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds)+$")


class ProfileError(Exception):
    """A report cannot be analysed. The message names the file and the cause."""


@dataclass
class Report:
    """One export, loaded. All times are int64 ns on the report's own clock.

    Frames (one row per event):
      ``kernels``: start, end, pid, device_id, stream_id, correlation_id, name, gpu_key;
      grouped by GPU key (the export's row order within a GPU)
      ``runtime``: start, end, pid, tid, correlation_id, name (normalised API name),
      sorted by start (stable)
      ``copies``: start, end, pid, device_id, stream_id, kind ('memcpy'|'memset'),
      copy_kind (ENUM_CUDA_MEMCPY_OPER id, -1 for memset), bytes
      ``nvtx``: start, end, pid, tid, text (ranges only)
      ``devices``: pid, device_id, gpu_key, gpu_model, uuid, bus
    ``meta``: export metadata (name -> value); ``diagnostics``: warning/error
    texts from DIAGNOSTIC_EVENT; ``warnings``: what the loader itself noticed.
    """

    path: str
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    copies: pd.DataFrame
    nvtx: pd.DataFrame
    devices: pd.DataFrame
    meta: dict = field(default_factory=dict)
    diagnostics: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    _runtime_by_pid: dict | None = field(default=None, repr=False, compare=False)

    def runtime_rows(self, pids) -> np.ndarray:
        """Row positions in ``runtime`` of the calls of ``pids``, ascending (so in the frame's
        order). The per-process grouping is built once per report (:func:`row_groups`), so
        each GPU's cut costs its own rows, not a pass over every call."""
        if self._runtime_by_pid is None:
            codes, pids_seen = pd.factorize(self.runtime["pid"].to_numpy(np.int64))
            self._runtime_by_pid = {int(pids_seen[codes[g[0]]]): g for g in row_groups(codes)}
        parts = [self._runtime_by_pid[int(p)] for p in pids if int(p) in self._runtime_by_pid]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        return parts[0] if len(parts) == 1 else np.sort(np.concatenate(parts))

    def gpu_keys(self) -> list[str]:
        """Sorted keys of every GPU that ran at least one kernel."""
        return sorted(self.devices["gpu_key"].unique().tolist())


def pid_of(global_id) -> np.ndarray:
    """Process id from a ``globalPid``/``globalTid``: bits 24..47. Shape preserved."""
    return (np.asarray(global_id, dtype=np.int64) >> 24) & 0xFFFFFF


def tid_of(global_tid) -> np.ndarray:
    """Thread id from a ``globalTid``: bits 0..23. Shape preserved."""
    return np.asarray(global_tid, dtype=np.int64) & 0xFFFFFF


def row_groups(codes: np.ndarray) -> list[np.ndarray]:
    """Row positions grouped by code (one group per distinct code, in code order; each group
    ascending, so in the rows' own order). Codes of a few thousand values at most, as
    process or name codes are, are sorted as int16: numpy's stable sort is then a radix sort."""
    codes = np.asarray(codes)
    if codes.size == 0:
        return []
    small = codes.astype(np.int16) if codes.min() >= -2**15 and codes.max() < 2**15 else codes
    order = np.argsort(small, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(small[order])) + 1)


def reports_lost_events(text: str) -> bool:
    """True when a DIAGNOSTIC_EVENT text says events were lost or dropped (a non-zero count)."""
    return bool(LOST_EVENTS.search(text)) and not _NO_LOSS.search(text)


def marks_partial(warning: str) -> bool:
    """True when a row warning means the GPU's data is incomplete (status ``partial``):
    kernel rows the loader dropped, or a DIAGNOSTIC_EVENT that reports lost events.
    Other warnings (GPUs without kernels, inferred processes, rate card) leave it ``ok``."""
    if warning.startswith(DIAGNOSTIC_PREFIX):
        return reports_lost_events(warning[len(DIAGNOSTIC_PREFIX):])
    return bool(_DROPPED_ROWS.match(warning))


def normalise_api_name(name: str) -> str:
    """``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize``; also drops
    ``_ptsz``/``_ptds`` (per-thread default stream) suffixes."""
    return _API_SUFFIX.sub("", name or "")


def readonly_uri(path: str) -> str:
    """SQLite URI that opens ``path`` read-only and immutable (no locks, no journal, no writes)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def connect_readonly(path: str) -> sqlite3.Connection:
    """Open ``path`` read-only and immutable; raises :class:`ProfileError`."""
    if not os.path.exists(path):
        raise ProfileError(f"{path}: file not found")
    if os.path.getsize(path) == 0:
        raise ProfileError(f"{path}: empty file (0 bytes), not an SQLite export")
    _check_not_truncated(path)
    try:
        con = sqlite3.connect(readonly_uri(path), uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{path}: not a readable SQLite database ({exc})") from exc
    return con


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_not_truncated(path: str) -> None:
    """Raise :class:`ProfileError` when an SQLite file is shorter than its own header says.

    The 100-byte database header holds the page size (offset 16) and, when the
    "version-valid-for" number (offset 92) equals the change counter (offset 24),
    the database size in pages (offset 28). A copy or download cut short is
    shorter than ``page size x pages``; SQLite itself would only say "database
    disk image is malformed", or nothing until a query reaches a missing page.
    Files that do not start with the SQLite magic are left to SQLite to reject.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        header = fh.read(100)
    if not header.startswith(_SQLITE_MAGIC):
        return
    if len(header) < 100:
        raise ProfileError(f"{path}: truncated SQLite file ({size:,} bytes, shorter than the 100-byte "
                           "SQLite header); the copy or download was cut short")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = int.from_bytes(header[24:28], "big")
    pages = int.from_bytes(header[28:32], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    if pages and valid_for == change_counter and size < page_size * pages:
        raise ProfileError(
            f"{path}: truncated SQLite file ({size:,} bytes, but its header says {page_size * pages:,}: "
            f"{pages:,} pages of {page_size:,} bytes); the copy or download was cut short")


class Schema:
    """What tables and columns one export really has (exact names).

    ``con`` (Python sqlite3) answers the small questions; the tables themselves are read
    through ADBC on the same read-only ``uri`` (:func:`read_tables`, :func:`_read`).
    """

    def __init__(self, con: sqlite3.Connection, uri: str | None = None):
        self.con = con
        self.uri = uri
        rows = con.execute("SELECT name FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        self.tables = {r[0] for r in rows}
        self._columns: dict[str, dict[str, str]] = {}

    def has(self, table: str) -> bool:
        return table in self.tables

    def close(self) -> None:
        self.con.close()

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> declared type (upper case) for ``table``; {} if absent."""
        if table not in self.tables:
            return {}
        if table not in self._columns:
            info = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = {r[1]: (r[2] or "").upper() for r in info}
        return self._columns[table]

    def first_column(self, table: str, candidates) -> str | None:
        cols = self.columns(table)
        return next((c for c in candidates if c in cols), None)


def _strings(schema: Schema) -> dict[int, str]:
    if not schema.has(STRING_TABLE):
        return {}
    return dict(schema.con.execute(f"SELECT id, value FROM {STRING_TABLE}").fetchall())


def distinct_codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniques, inverse)`` of an int64 array, like ``np.unique(ids, return_inverse=True)``.

    StringIds ids are small and dense, so a lookup table of ``max(ids) + 1`` slots
    does it in O(n) instead of sorting n ids; other inputs (negative or sparse ids)
    fall back to ``np.unique``. ``uniques`` is sorted; ``ids == uniques[inverse]``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return ids[:0], np.zeros(0, dtype=np.intp)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high > 4 * ids.size + (1 << 20):
        return np.unique(ids, return_inverse=True)
    present = np.zeros(high + 1, dtype=bool)
    present[ids] = True
    uniques = np.flatnonzero(present)
    slot = np.zeros(high + 1, dtype=np.intp)
    slot[uniques] = np.arange(uniques.size)
    return uniques.astype(np.int64), slot[ids]


def resolve_ids(ids: np.ndarray, strings: dict[int, str], index=None) -> pd.Series:
    """Categorical text of StringIds ``ids`` (int64, -1 for NULL); unknown ids give ``""``."""
    uniques, inverse = distinct_codes(ids)
    texts = np.array([strings.get(int(u), "") for u in uniques], dtype=object)
    return categorical(texts, inverse, index)


def categorical(texts: np.ndarray, codes: np.ndarray, index=None) -> pd.Series:
    """A categorical Series whose row i is ``texts[codes[i]]`` (``texts`` may repeat)."""
    categories, remap = np.unique(texts.astype(str), return_inverse=True)
    return pd.Series(pd.Categorical.from_codes(remap[codes], categories=categories), index=index)


def _pid_expr(schema: Schema, table: str) -> tuple[str, bool]:
    """SQL for the process column of ``table`` and whether it needs decoding."""
    cols = schema.columns(table)
    for name in ("globalPid", "globalTid"):
        if name in cols:
            return name, True
    for name in ("pid", "processId"):
        if name in cols:
            return name, False
    return "-1", False  # no process column (older schema): see _infer_pids


def _read(schema: "Schema", sql: str) -> pd.DataFrame:
    """Run one (small) query through :func:`_fetch` and return a frame."""
    return _fetch(schema.uri, sql).to_pandas()


#: Tables with fewer rows than this are read by one query (splitting would cost more than it saves).
SPLIT_MIN_ROWS = 250_000


def read_threads() -> int:
    """Threads for bulk reads: the CPUs this process may use, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _rowid_range(schema: Schema, table: str) -> tuple[int, int] | None:
    """``(min rowid, max rowid)`` of ``table`` (two b-tree lookups, no scan); None when empty
    or the table has no rowid."""
    try:
        low = schema.con.execute(f"SELECT min(rowid) FROM {table}").fetchone()[0]
        high = schema.con.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    except sqlite3.DatabaseError:
        return None  # WITHOUT ROWID table: read it whole
    return None if low is None or high is None else (int(low), int(high))


def split_queries(schema: Schema, table: str, sql: str, parts: int) -> list[str]:
    """``sql`` (a ``SELECT ... FROM table`` without WHERE) as up to ``parts`` queries over
    consecutive rowid ranges, each of at least :data:`SPLIT_MIN_ROWS` rowids. Their results,
    concatenated in order, are the rows of ``sql`` in the same (rowid) order."""
    span = _rowid_range(schema, table) if parts > 1 else None
    if span is None:
        return [sql]
    low, high = span
    parts = max(1, min(parts, (high - low + 1) // SPLIT_MIN_ROWS))
    if parts == 1:
        return [sql]
    edges = [low + (high - low + 1) * i // parts for i in range(parts)] + [high + 1]
    return [f"{sql} WHERE rowid >= {a} AND rowid < {b}" for a, b in zip(edges, edges[1:])]


def _fetch(uri: str, sql: str):
    """One query on its own ADBC connection, as an Arrow table (the driver fills Arrow
    columns in C without holding the GIL, so several run at once on threads)."""
    import adbc_driver_sqlite.dbapi as adbc

    try:
        with adbc.connect(uri) as con, con.cursor() as cursor:
            cursor.execute(sql)
            return cursor.fetch_arrow_table()
    except Exception as exc:  # the ADBC driver's own DatabaseError/OperationalError
        raise sqlite3.DatabaseError(f"{type(exc).__name__}: {exc}") from exc


def read_tables(schema: Schema, jobs: dict[str, tuple[str, str]], threads: int | None = None) -> dict:
    """Read several tables at once: ``{name: (table, sql)}`` -> ``{name: pyarrow.Table}``.

    Each large table is split by rowid (:func:`split_queries`) and every piece runs on a
    thread with its own read-only connection; pieces are concatenated in rowid order, so
    the rows are those of ``sql`` in the same order. Raises ``sqlite3.DatabaseError``.
    """
    import pyarrow as pa

    threads = threads or read_threads()
    pieces = [(name, q) for name, (table, sql) in jobs.items() for q in split_queries(schema, table, sql, threads)]
    if len(pieces) <= 1 or threads == 1:
        results = [_fetch(schema.uri, q) for _, q in pieces]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(pieces))) as pool:
            results = list(pool.map(lambda piece: _fetch(schema.uri, piece[1]), pieces))
    out: dict = {}
    for (name, _), table in zip(pieces, results):
        out.setdefault(name, []).append(table)
    return {name: (tables[0] if len(tables) == 1 else pa.concat_tables(tables)) for name, tables in out.items()}


def int_column(table, name: str, fill: int = 0) -> np.ndarray:
    """Column ``name`` of an Arrow table as int64 numpy, NULLs replaced by ``fill``
    (zero-copy when the column is one chunk of int64 without NULLs)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    col = table.column(name)
    if pa.types.is_null(col.type):
        return np.full(len(col), fill, dtype=np.int64)
    if col.null_count:
        col = pc.fill_null(col, pa.scalar(fill, col.type) if pa.types.is_integer(col.type) else fill)
    if not pa.types.is_int64(col.type):
        col = pc.cast(col, pa.int64(), safe=False)
    return col.to_numpy()


def text_column(table, name: str, strings: dict[int, str], index=None) -> pd.Series:
    """Column ``name`` (StringIds ids, or inline text in older schemas) as categorical text."""
    import pyarrow as pa

    col = table.column(name)
    if pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_null(col.type):
        return resolve_ids(int_column(table, name, -1), strings, index)
    return pd.Series(col.to_pandas(), index=index).fillna("").astype(str).astype("category")


KERNEL_COLUMNS = ["start", "end", "pid", "device_id", "stream_id", "correlation_id", "name"]


def _no_kernels() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in KERNEL_COLUMNS[:-1]} | {"name": pd.Series(dtype=object)})


def _kernel_query(schema: Schema, path: str, required: bool = True) -> tuple[str | None, bool, bool]:
    """``(sql, decode_pid, has_name)`` that reads the kernel columns; ``sql`` is None when the
    export has no kernels and ``required`` is False. Raises :class:`ProfileError` when
    kernels are required and there is no table or no start/end column."""
    if not required and (not schema.has(KERNEL_TABLE) or
                         not schema.con.execute(f"SELECT 1 FROM {KERNEL_TABLE} LIMIT 1").fetchone()):
        return None, False, False
    if not schema.has(KERNEL_TABLE):
        raise ProfileError(
            f"{path}: no {KERNEL_TABLE} table: the export holds no CUDA kernels "
            "(was the run profiled with --trace=cuda, and did it launch any kernel?)"
        )
    cols = schema.columns(KERNEL_TABLE)
    for column in ("start", "end"):
        if column not in cols:
            raise ProfileError(f"{path}: {KERNEL_TABLE} has no '{column}' column")
    pid_col, decode = _pid_expr(schema, KERNEL_TABLE)
    name_col = schema.first_column(KERNEL_TABLE, KERNEL_NAME_COLUMNS)
    dev = "deviceId" if "deviceId" in cols else "0"
    ctx = "contextId" if "contextId" in cols else "0"
    stream = "streamId" if "streamId" in cols else "0"
    corr = "correlationId" if "correlationId" in cols else "0"
    sql = (
        f"SELECT start, end, {pid_col} AS pid, {dev} AS device_id, {stream} AS stream_id, "
        f"{corr} AS correlation_id, {ctx} AS context_id{', ' + name_col + ' AS name' if name_col else ''} "
        f"FROM {KERNEL_TABLE}"
    )
    return sql, decode, name_col is not None


def _kernels_frame(table, strings: dict[int, str], path: str, decode_pid: bool,
                   has_name: bool) -> tuple[pd.DataFrame, list]:
    """Kernel rows (``KERNEL_COLUMNS`` plus ``context_id``, dropped by the caller) from the
    Arrow table of :func:`_kernel_query`, and the loader's warnings. ``pid`` is -1 on every
    row when the table has no process column (older schema): :func:`_infer_pids` fills it in.
    Raises :class:`ProfileError` when no row is usable."""
    n = table.num_rows
    if n == 0:
        raise ProfileError(f"{path}: {KERNEL_TABLE} has zero rows: no kernel ran while profiling")
    missing = table.column("start").is_null().to_numpy(zero_copy_only=False) \
        if table.column("start").null_count else np.zeros(n, dtype=bool)
    if table.column("end").null_count:
        missing = missing | table.column("end").is_null().to_numpy(zero_copy_only=False)
    start, end = int_column(table, "start"), int_column(table, "end")
    bad = missing | (end < start) | ((start == 0) & (end == 0))
    warnings = []
    keep = None
    if bad.any():
        kept = int(n - bad.sum())
        if kept == 0:
            raise ProfileError(f"{path}: all {n:,} rows of {KERNEL_TABLE} have end < start or no timestamps "
                               "(start = end = 0 or NULL): no usable kernel")
        warnings.append(f"dropped {int(bad.sum())} kernel rows with end < start or no timestamps "
                        f"(start = end = 0 or NULL); {kept} of {n} kept")
        keep = np.flatnonzero(~bad)
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    pid_raw = int_column(table, "pid")
    columns = {
        "start": pick(start), "end": pick(end),
        "pid": pick(pid_of(pid_raw) if decode_pid else pid_raw),
        "device_id": pick(int_column(table, "device_id")),
        "stream_id": pick(int_column(table, "stream_id")),
        "correlation_id": pick(int_column(table, "correlation_id")),
        "context_id": pick(int_column(table, "context_id")),
    }
    df = pd.DataFrame(columns, copy=False)
    if has_name:
        names = text_column(table, "name", strings)
        df["name"] = names if keep is None else names.iloc[keep].reset_index(drop=True)
    else:
        df["name"] = ""
    return df, warnings


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


def _infer_pids(frame: pd.DataFrame, runtime: pd.DataFrame, hints: pd.DataFrame | None,
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


RUNTIME_COLUMNS = ["start", "end", "pid", "tid", "correlation_id", "name"]


def _runtime_query(schema: Schema) -> tuple[str | None, bool]:
    """``(sql, has_name)`` reading the CUDA runtime API calls; sql is None without the table."""
    cols = schema.columns(RUNTIME_TABLE)
    if not cols:
        return None, False
    name_col = "nameId" if "nameId" in cols else ("name" if "name" in cols else None)
    corr = "correlationId" if "correlationId" in cols else "0"
    tid_col = "globalTid" if "globalTid" in cols else "0"
    return (f"SELECT start, end, {tid_col} AS gtid, {corr} AS correlation_id"
            f"{', ' + name_col + ' AS name' if name_col else ''} FROM {RUNTIME_TABLE}"), name_col is not None


def _runtime_frame(table, strings: dict[int, str], has_name: bool) -> pd.DataFrame:
    """Runtime calls (``RUNTIME_COLUMNS``; ``name`` normalised, categorical) from the Arrow
    table of :func:`_runtime_query`; ``table`` None gives an empty frame. Rows without
    start or end are dropped."""
    if table is None:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in RUNTIME_COLUMNS[:-1]}
                            | {"name": pd.Series(dtype=str)})
    n = table.num_rows
    keep = None
    if table.column("start").null_count or table.column("end").null_count:
        ok = ~(table.column("start").is_null().to_numpy(zero_copy_only=False)
               | table.column("end").is_null().to_numpy(zero_copy_only=False))
        keep = np.flatnonzero(ok)
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    gtid = pick(int_column(table, "gtid"))
    df = pd.DataFrame({"start": pick(int_column(table, "start")), "end": pick(int_column(table, "end")),
                       "pid": pid_of(gtid), "tid": tid_of(gtid),
                       "correlation_id": pick(int_column(table, "correlation_id"))}, copy=False)
    if has_name:
        names = text_column(table, "name", strings)
        if keep is not None:
            names = names.iloc[keep].reset_index(drop=True)
        # Normalise each distinct name once, not once per row (two names may normalise to one).
        normal = np.array([normalise_api_name(x) for x in names.cat.categories], dtype=object)
        df["name"] = categorical(normal, names.cat.codes.to_numpy(), df.index)
    else:
        df["name"] = pd.Series("", index=df.index, dtype="category")
    return df if n else df.iloc[0:0]


def _load_copies(schema: Schema) -> pd.DataFrame:
    """memcpy and memset rows, plus ``context_id`` (dropped by the caller); ``pid`` is -1 on
    the rows of a table without a process column (older schema)."""
    frames = []
    for table, kind in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
        cols = schema.columns(table)
        if not cols:
            continue
        pid_col, decode = _pid_expr(schema, table)
        copy_kind = "copyKind" if (kind == "memcpy" and "copyKind" in cols) else "-1"
        nbytes = "bytes" if "bytes" in cols else "0"
        dev = "deviceId" if "deviceId" in cols else "0"
        stream = "streamId" if "streamId" in cols else "0"
        ctx = "contextId" if "contextId" in cols else "0"
        corr = "correlationId" if "correlationId" in cols else "0"
        df = _read(schema, f"SELECT start, end, {pid_col} AS pid, {dev} AS device_id, "
                   f"{stream} AS stream_id, {copy_kind} AS copy_kind, {nbytes} AS bytes, "
                   f"{ctx} AS context_id, {corr} AS correlation_id FROM {table}")
        df = df.dropna(subset=["start", "end"])
        df = df.fillna({"device_id": 0, "stream_id": 0, "copy_kind": -1, "bytes": 0, "context_id": 0,
                        "correlation_id": 0, "pid": -1 if pid_col == "-1" else 0})
        df["pid"] = pid_of(df["pid"]) if decode else df["pid"]
        df["kind"] = kind
        frames.append(df)
    columns = ["start", "end", "pid", "device_id", "stream_id", "kind", "copy_kind", "bytes", "context_id",
               "correlation_id"]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns}).astype({"kind": str})
    df = pd.concat(frames, ignore_index=True)
    df = df.astype({c: "int64" for c in columns if c != "kind"})
    return df[columns]


def _load_nvtx(schema: Schema, strings: dict[int, str]) -> pd.DataFrame:
    columns = ["start", "end", "pid", "tid", "text"]
    cols = schema.columns(NVTX_TABLE)
    if not cols or "end" not in cols:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns[:-1]} | {"text": pd.Series(dtype=str)})
    text = "text" if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    where = f"WHERE eventType IN {NVTX_RANGE_TYPES}" if "eventType" in cols else ""
    gtid = "globalTid" if "globalTid" in cols else "0"
    df = _read(schema, f"SELECT start, end, {gtid} AS gtid, {text} AS text, {text_id} AS text_id "
               f"FROM {NVTX_TABLE} {where}")
    df = df.dropna(subset=["start", "end"])
    df = df[df["end"] > df["start"]]
    by_id = df["text_id"].map(lambda v: strings.get(int(v), "") if pd.notna(v) else None)
    df["text"] = df["text"].where(df["text"].notna(), by_id).fillna("").astype(str)
    df["pid"] = pid_of(df["gtid"].fillna(0))
    df["tid"] = tid_of(df["gtid"].fillna(0))
    df = df.astype({"start": "int64", "end": "int64"})
    return df[columns].reset_index(drop=True)


def _device_pairs(kernels: pd.DataFrame) -> tuple[np.ndarray, pd.DataFrame]:
    """``(codes, pairs)``: the distinct (pid, device_id) of the kernel rows, sorted, and for
    each row the index of its pair in ``pairs`` (hash-based, O(rows))."""
    pid = kernels["pid"].to_numpy(np.int64)
    dev = kernels["device_id"].to_numpy(np.int64)
    if pid.size == 0:
        return np.zeros(0, dtype=np.intp), pd.DataFrame({"pid": pd.Series(dtype="int64"),
                                                         "device_id": pd.Series(dtype="int64")})
    # One int64 per (pid, device): pids are 24-bit, device ids small; shift keeps the order.
    dev_low = int(dev.min())
    width = int(dev.max()) - dev_low + 1
    combined = pid * width + (dev - dev_low)
    codes, uniques = pd.factorize(combined, sort=True)
    pairs = pd.DataFrame({"pid": uniques // width, "device_id": uniques % width + dev_low})
    return codes, pairs


def _gpu_key_column(devices: pd.DataFrame, pairs: pd.DataFrame, codes: np.ndarray) -> pd.Categorical:
    """Per kernel row, its GPU key (categorical), from its pair code (:func:`_device_pairs`)."""
    keys = devices.set_index(["pid", "device_id"])["gpu_key"].reindex(pd.MultiIndex.from_frame(pairs))
    key_codes, key_names = pd.factorize(keys.to_numpy(), sort=True)
    return pd.Categorical.from_codes(key_codes[codes], categories=key_names)


def _stably_sorted(frame: pd.DataFrame, keys: np.ndarray) -> pd.DataFrame:
    """``frame``'s rows stably sorted by ``keys`` (one per row); no work when they already are."""
    if keys.size < 2 or not bool(np.any(keys[1:] < keys[:-1])):
        return frame
    return frame.iloc[np.argsort(keys, kind="stable")].reset_index(drop=True)


def _group_by_gpu(kernels: pd.DataFrame) -> pd.DataFrame:
    """Kernel rows grouped by GPU key (stable: file order within a GPU), so that one GPU's
    rows are one contiguous slice (:func:`gpu_trace`). Codes are small ints: a radix sort."""
    return _stably_sorted(kernels, kernels["gpu_key"].cat.codes.to_numpy())


def _in_start_order(calls: pd.DataFrame) -> pd.DataFrame:
    """Rows stably sorted by start (no work when they already are, as exports usually are)."""
    return _stably_sorted(calls, calls["start"].to_numpy(np.int64))


def _load_devices(schema: Schema, pairs: pd.DataFrame) -> tuple[pd.DataFrame, list]:
    """One row per (pid, device_id) in ``pairs`` (those that ran kernels), with its physical
    GPU, and warnings.

    The physical GPU comes from TARGET_INFO_CUDA_DEVICE (pid, cudaId -> gpuId)
    and TARGET_INFO_GPU (id -> uuid, busLocation, name) when present; else the
    key is ``pid<P>/dev<D>`` (SPEC "GPU").

    GPUs that TARGET_INFO_GPU lists but that ran no kernel get no row: a GPU that
    was never traced (or not used) is not an idle GPU. A warning says how many.
    """
    gpu_info: dict[int, dict] = {}
    gcols = schema.columns(GPU_TABLE)
    if gcols and "id" in gcols:
        wanted = [c for c in ("id", "name", "uuid", "busLocation") if c in gcols]
        for row in schema.con.execute(f"SELECT {', '.join(wanted)} FROM {GPU_TABLE}").fetchall():
            gpu_info[int(row[0])] = dict(zip(wanted, row))
    # (pid, cudaId) -> (gpuId or None, uuid as TARGET_INFO_CUDA_DEVICE gives it); gpuId is nullable.
    cuda_map: dict[tuple[int, int], tuple] = {}
    dcols = schema.columns(CUDA_DEVICE_TABLE)
    if dcols and {"gpuId", "cudaId", "pid"} <= set(dcols):
        uuid_col = "uuid" if "uuid" in dcols else "NULL"
        for gpu_id, cuda_id, pid, dev_uuid in schema.con.execute(
                f"SELECT gpuId, cudaId, pid, {uuid_col} FROM {CUDA_DEVICE_TABLE}").fetchall():
            cuda_map[(int(pid), int(cuda_id))] = (None if gpu_id is None else int(gpu_id), dev_uuid)
    rows = []
    used_ids = set()
    for pid, dev in pairs.itertuples(index=False):
        gpu_id, dev_uuid = cuda_map.get((int(pid), int(dev)), (None, None))
        if gpu_id is not None:
            used_ids.add(gpu_id)
        info = gpu_info.get(gpu_id, {}) if gpu_id is not None else {}
        uuid = (info.get("uuid") or dev_uuid or "").strip()
        bus = (info.get("busLocation") or "").strip()
        key = f"GPU-{uuid}" if uuid else (f"bus-{bus}" if bus else f"pid{pid}/dev{dev}")
        rows.append({"pid": int(pid), "device_id": int(dev), "gpu_key": key,
                     "gpu_model": (info.get("name") or "").strip(), "uuid": uuid, "bus": bus})
    devices = pd.DataFrame(rows, columns=["pid", "device_id", "gpu_key", "gpu_model", "uuid", "bus"])
    return devices, _untraced_gpus(gpu_info, used_ids, devices)


def _untraced_gpus(gpu_info: dict[int, dict], used_ids: set, devices: pd.DataFrame) -> list[str]:
    """The warning about GPUs TARGET_INFO_GPU lists that ran no kernel (none when all ran some)."""
    listed = len(gpu_info)
    if not listed or devices.empty:
        return []
    if used_ids:  # processes map to physical GPUs: name the ones without kernels
        idle = [gpu_info[i] for i in sorted(gpu_info) if i not in used_ids]
        if not idle:
            return []
        names = []
        for info in idle:
            uuid = (info.get("uuid") or "").strip()
            bus = (info.get("busLocation") or "").strip()
            names.append(f"GPU-{uuid}" if uuid else (f"bus-{bus}" if bus else f"id {info.get('id')}"))
        return [f"{len(idle)} of {listed} GPUs listed in {GPU_TABLE} ran no kernel in this export "
                f"({', '.join(names)}): not traced or not used, so no row and not counted as idle"]
    traced = devices["gpu_key"].nunique()
    if traced >= listed:
        return []
    return [f"{listed - traced} of {listed} GPUs listed in {GPU_TABLE} ran no kernel in this export "
            f"(kernels identify {traced}): not traced or not used, so no row and not counted as idle"]


def _load_meta(schema: Schema) -> dict:
    for table in META_TABLES:
        cols = schema.columns(table)
        if {"name", "value"} <= set(cols):
            return {str(k): str(v) for k, v in schema.con.execute(f"SELECT name, value FROM {table}").fetchall()}
    return {}


def _load_diagnostics(schema: Schema) -> list[str]:
    cols = schema.columns(DIAGNOSTIC_TABLE)
    if not cols or "severity" not in cols or "text" not in cols:
        return []
    rows = schema.con.execute(f"SELECT severity, text FROM {DIAGNOSTIC_TABLE} ORDER BY rowid").fetchall()
    texts = [(severity, str(text).strip()) for severity, text in rows if text is not None]
    # Warnings and errors; and lost-event reports at any severity (they make the trace incomplete).
    return [text for severity, text in texts if severity in DIAGNOSTIC_WARNING_LEVELS or reports_lost_events(text)]


def _resolve_missing_pids(schema: Schema, kernels: pd.DataFrame, copies: pd.DataFrame,
                          runtime: pd.DataFrame) -> list[str]:
    """Fill in ``pid`` (in place) where a table has no process column (older schemas lack
    ``globalPid``); returns the warning that says so, or nothing."""
    tables = [t for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE)
              if schema.columns(t) and _pid_expr(schema, t)[0] == "-1"]
    if not tables:
        return []
    # Runtime calls identify processes only through globalTid.
    calls = runtime if "globalTid" in schema.columns(RUNTIME_TABLE) else runtime.iloc[0:0]
    contexts = _cuda_contexts(schema)
    unresolved = 0
    if KERNEL_TABLE in tables and not kernels.empty:
        kernels["pid"] = _infer_pids(kernels, calls, None, contexts)
        unresolved += int((kernels["pid"] < 0).sum())
    if not copies.empty and (copies["pid"] < 0).any():
        todo = copies["pid"] < 0
        hints = kernels[["device_id", "context_id", "stream_id", "pid"]]
        copies.loc[todo, "pid"] = _infer_pids(copies[todo], calls, hints, contexts)
        unresolved += int((copies["pid"] < 0).sum())
    for frame in (kernels, copies):
        frame.loc[frame["pid"] < 0, "pid"] = 0
    text = (f"older export schema: no globalPid column in {', '.join(tables)}; each row's process was taken "
            "from its CUDA runtime launch (correlationId) or its stream")
    if unresolved:
        text += f"; {unresolved} rows could not be tied to a process and count under pid 0"
    return [text]


def load_report(path: str, require_kernels: bool = True) -> Report:
    """Load one SQLite export.

    Args:
        path: local path of a ``.sqlite`` export.
        require_kernels: when False, an export without kernels (a CPU-only
            capture) loads with empty ``kernels`` and ``devices`` instead of raising.
    Returns:
        A :class:`Report` with kernels, runtime calls, copies, NVTX ranges,
        device identities, metadata and diagnostics.
    Raises:
        ProfileError: the file is missing, empty, not SQLite, not an Nsight
        export, or holds no kernels. The message starts with the path.
    """
    con = connect_readonly(path)
    schema = Schema(con, readonly_uri(path))
    try:
        if not schema.has(KERNEL_TABLE) and not any(schema.has(t) for t in (*META_TABLES, STRING_TABLE)):
            raise ProfileError(f"{path}: SQLite file is not an Nsight Systems export "
                               f"(no {KERNEL_TABLE}, StringIds or export metadata tables)")
        strings = _strings(schema)
        kernel_sql, decode_pid, kernel_names = _kernel_query(schema, path, require_kernels)
        runtime_sql, runtime_names = _runtime_query(schema)
        jobs = {}
        if kernel_sql:
            jobs["kernels"] = (KERNEL_TABLE, kernel_sql)
        if runtime_sql:
            jobs["runtime"] = (RUNTIME_TABLE, runtime_sql)
        tables = read_tables(schema, jobs)
        if kernel_sql:
            kernels, warnings = _kernels_frame(tables.pop("kernels"), strings, path, decode_pid, kernel_names)
        else:
            kernels, warnings = _no_kernels().assign(context_id=pd.Series(dtype="int64")), []
        runtime = _runtime_frame(tables.pop("runtime", None), strings, runtime_names)
        del tables
        copies = _load_copies(schema)
        warnings += _resolve_missing_pids(schema, kernels, copies, runtime)
        kernels = kernels.drop(columns="context_id")
        copies = copies.drop(columns=["context_id", "correlation_id"])
        pair_codes, pairs = _device_pairs(kernels)
        devices, device_warnings = _load_devices(schema, pairs)
        warnings += device_warnings
        kernels["gpu_key"] = _gpu_key_column(devices, pairs, pair_codes)
        kernels = _group_by_gpu(kernels)
        runtime = _in_start_order(runtime)
        if not copies.empty:
            keys = devices.set_index(["pid", "device_id"])["gpu_key"]
            copies["gpu_key"] = keys.reindex(pd.MultiIndex.from_frame(copies[["pid", "device_id"]])).to_numpy()
        else:
            copies["gpu_key"] = pd.Series(dtype=object)
        return Report(
            path=path,
            kernels=kernels,
            runtime=runtime,
            copies=copies,
            nvtx=_load_nvtx(schema, strings),
            devices=devices,
            meta=_load_meta(schema),
            diagnostics=_load_diagnostics(schema),
            warnings=warnings,
        )
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{path}: SQLite error while reading ({exc})") from exc
    finally:
        schema.close()


@dataclass
class GpuTrace:
    """Everything one physical GPU needs for analysis, as plain arrays (ns).

    ``kernels``: frame with start, end, pid, stream_id, correlation_id, name, in the
    export's row order (:func:`pipeline.gaps.kernels_in_window` puts them in per-stream
    order).
    ``copies``: frame of this GPU's memcpy/memset rows (start, end, kind, copy_kind, bytes).
    ``runtime``: CUDA runtime API calls of the processes that drive this GPU
    (start, end, pid, tid, name) sorted by start.
    ``nvtx``: NVTX ranges of those processes.
    """

    report: str
    gpu_key: str
    pids: tuple
    device_ids: tuple
    gpu_model: str
    kernels: pd.DataFrame
    copies: pd.DataFrame
    runtime: pd.DataFrame
    nvtx: pd.DataFrame
    warnings: list = field(default_factory=list)


def _gpu_rows(kernels: pd.DataFrame, gpu_key: str) -> pd.DataFrame:
    """The kernel rows of one GPU: a slice when the rows are grouped by GPU key, else a filter."""
    col = kernels["gpu_key"]
    if isinstance(col.dtype, pd.CategoricalDtype) and gpu_key in col.cat.categories:
        where = np.flatnonzero(col.cat.codes.to_numpy() == col.cat.categories.get_loc(gpu_key))
        if where.size and where[-1] - where[0] + 1 == where.size:
            return kernels.iloc[where[0]:where[-1] + 1]
    return kernels[col == gpu_key]


def gpu_trace(report: Report, gpu_key: str) -> GpuTrace:
    """Cut one GPU's rows out of a loaded report (SPEC "GPU": processes that
    share the physical GPU are unioned; streams stay per process)."""
    devs = report.devices[report.devices["gpu_key"] == gpu_key]
    if devs.empty:
        raise KeyError(f"{report.path}: no GPU {gpu_key!r}")
    pids = tuple(sorted(set(int(p) for p in devs["pid"])))
    kernels = _gpu_rows(report.kernels, gpu_key)
    copies = report.copies[report.copies["gpu_key"] == gpu_key] if not report.copies.empty else report.copies
    runtime = _in_start_order(report.runtime.iloc[report.runtime_rows(pids)])
    nvtx = report.nvtx[report.nvtx["pid"].isin(pids)]
    models = sorted({m for m in devs["gpu_model"] if m})
    return GpuTrace(
        report=report.path, gpu_key=gpu_key, pids=pids,
        device_ids=tuple(sorted(set(int(d) for d in devs["device_id"]))),
        gpu_model=models[0] if models else "",
        kernels=kernels.reset_index(drop=True), copies=copies.reset_index(drop=True),
        runtime=runtime.reset_index(drop=True), nvtx=nvtx.reset_index(drop=True),
        warnings=list(report.warnings) + [f"{DIAGNOSTIC_PREFIX}{d}" for d in report.diagnostics],
    )
