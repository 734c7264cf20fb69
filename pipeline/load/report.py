"""Load one Nsight Systems SQLite export into tidy pandas frames (a :class:`~pipeline.model.Report`),
and cut one GPU's rows out of it (a :class:`~pipeline.model.GpuTrace`).

The pieces: :mod:`.tables` (what the export has), :mod:`.sqlite` (read-only reading),
:mod:`.columns` (string ids, typed columns), :mod:`.processes` (processes), :mod:`.gpus` (GPU
identity, MIG instances, models), :mod:`.diagnostics` (metadata, lost events).
"""
from __future__ import annotations

import functools
import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pandas as pd

from ..analysis.graphcapture import name_mask
from ..arrays import SCAN_ROWS, Positions, distinct, is_sorted, stable_order
from ..frames import codes_of, concat_rows, kept_as, rows, take_rows, taken, where
from ..memory import release as release_memory
from ..memory import small_pages
from ..model import GRAPH_TRACE_MODE, MEM_KINDS, GpuTrace, ProfileError, Report, RowWarning, WarningCode, world_size
from .ahead import taken as taken_ahead
from .caveats import LAUNCH_APIS, load_overhead, lost_launches
from .columns import decoded_text, normalise_api_name, read_strings
from .diagnostics import diagnostic_warnings, load_diagnostics, load_meta, lost_event_marks, wsl_evidence
from .graphs import counted_once, graph_query, graph_rows, has_graphs, with_graph_mode, with_graphs
from .kernel_names import alias_job, alias_query, alias_rows, aliases_of, distinct_rows
from .host import with_export_host
from .ranks import capture_world_size, with_scheduler_job, with_world_size
from .gpus import load_devices, sm_subset_warning
from .integrity import (Capture, capture_of, capture_start, disagreement_warning, dropped_warning,
    duplicates_warning, frame_duplicates, impossible_rows, untimed)
from .limits import ReadTimeout, cut_sql
from .limits import current as read_limits
from .processes import device_pairs, gpu_key_column, pair_keys, resolve_missing_pids
from .queries import (ID_COLUMNS, kernel_columns, kernel_select, name_columns, pid_column, pid_of, runtime_columns,
                      runtime_select, tid_of)
from ..snapshot import committed_state
from .sqlite import NotInteger, connect_readonly, read_columns, read_frame, readonly_uri
from .tables import (CUPTI_OVERHEAD_TABLE, GRAPH_TRACE_TABLE, KERNEL_TABLE, MEM_KIND_TABLE,
    MEMCPY_TABLE, MEMSET_TABLE, META_TABLES, NVTX_RANGE_TYPES, NVTX_TABLE, PROFILER_OVERHEAD_TABLE, RUNTIME_TABLE,
    STRING_TABLE, Schema)

KERNEL_COLUMNS = ["start", "end", "pid", "device_id", "stream_id", "correlation_id", "name"]


def _no_kernels() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="int64") for c in KERNEL_COLUMNS[:-1]} | {"name": pd.Series(dtype=object)})


def counted(n: int, one: str, many: str) -> str:
    """``n`` with the noun that fits it: ``counted(1, "memset", "memsets")`` is ``1 memset``, thousands
    separated (``1,234 memsets``)."""
    return f"{n:,} {one if n == 1 else many}"


def no_kernel_ran(traced: list[str], devices, when: str) -> str:
    """The message tail of a capture that traced GPU copies but no kernel (an Nsight export, a PyTorch
    profiler trace): ``traced``: what was traced, counted (``["5 memory copies (CUPTI_ACTIVITY_KIND_MEMCPY)",
    "1 memset (...)"]``); ``devices``: the device ids they ran on; ``when``: ``profiling``, ``the profiler
    recorded``. E.g. ``5 memory copies (…) and 1 memset (…) on 2 devices (0, 1), and no kernel ran while
    profiling: there is no kernel to measure idle time between``."""
    ids = sorted({int(d) for d in devices})
    what = traced[0] if len(traced) == 1 else ", ".join(traced[:-1]) + " and " + traced[-1]
    return (f"{what} on {counted(len(ids), 'device', 'devices')} ({', '.join(map(str, ids))}), and no kernel ran "
            f"while {when}: there is no kernel to measure idle time between")


def _copies_traced(schema: Schema) -> str | None:
    """``but CUDA was traced: …`` (:func:`no_kernel_ran`) when the export holds memcpy or memset rows;
    None when it holds neither."""
    traced, devices = [], set()
    for table, one, many in ((MEMCPY_TABLE, "memory copy", "memory copies"), (MEMSET_TABLE, "memset", "memsets")):
        if not schema.has(table):
            continue
        rows = int(schema.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        if rows:
            traced.append(f"{counted(rows, one, many)} ({table})")
            dev = "deviceId" if "deviceId" in schema.columns(table) else "0"
            devices |= {int(d or 0) for (d,) in schema.con.execute(f"SELECT DISTINCT {dev} FROM {table}")}
    return f"but CUDA was traced: {no_kernel_ran(traced, devices, 'profiling')}" if traced else None


def _launches_called(schema: Schema) -> str | None:
    """``but N kernel launches were called (…) and no kernel record exists: …`` when the export's
    CUPTI_ACTIVITY_KIND_RUNTIME holds calls that launch kernels (:data:`~pipeline.load.caveats.LAUNCH_APIS`,
    names normalised, counted most first) though it has no kernel row: the kernel trace lost them, or
    kernel tracing was off. None when no launch was called (then no kernel ran)."""
    cols = schema.columns(RUNTIME_TABLE)
    if "nameId" in cols and {"id", "value"} <= set(schema.columns(STRING_TABLE)):
        sql = (f"SELECT s.value, count(*) FROM {RUNTIME_TABLE} r JOIN {STRING_TABLE} s ON s.id = r.nameId "
               "GROUP BY r.nameId")
    elif "name" in cols:
        sql = f"SELECT name, count(*) FROM {RUNTIME_TABLE} GROUP BY name"
    else:
        return None
    calls: dict[str, int] = {}
    for name, n in schema.con.execute(sql):
        api = normalise_api_name(str(name))
        if api in LAUNCH_APIS:
            calls[api] = calls.get(api, 0) + int(n)
    if not calls:
        return None
    total = sum(calls.values())
    named = ", ".join(f"{n:,} {api}" for api, n in sorted(calls.items(), key=lambda c: (-c[1], c[0])))
    called = f"but {counted(total, 'kernel launch was', 'kernel launches were')} called ({named}, in {RUNTIME_TABLE}) "
    wsl = wsl_evidence(schema)
    if wsl is not None:
        return (called + f"and no kernel record exists: the capture ran under WSL2 ({wsl}), the likely "
                "cause: Nsight Systems under WSL2 can trace the CUDA calls but not the kernels they launch; profile "
                "on native Linux (else the kernel trace lost them, or kernel tracing was off)")
    return called + ("and no kernel record exists: the kernel trace lost them (or kernel tracing was off while the "
                     "run was profiled)")


def _no_kernel_cause(schema: Schema) -> str | None:
    """Why a complete export holds no kernel row, when it says: launches called (:func:`_launches_called`),
    else copies traced (:func:`_copies_traced`); None when it says neither."""
    return _launches_called(schema) or _copies_traced(schema)


#: Tables whose names start so are the enumerations (``ENUM_CUDA_MEM_KIND`` ...) every export holds,
#: whatever was traced; nsys export writes them last, just before its metadata (:data:`META_TABLES`).
ENUM_PREFIX = "ENUM_"


def _cut_short(schema: Schema, path: str, empty: bool = False) -> str | None:
    """The error of an export without kernels that looks cut short: none of the tables nsys export
    writes last (the export metadata, :data:`META_TABLES`, nor an ``ENUM_*`` table), so the tables of
    captured data after the last one it has may be missing too (an export interrupted, or a copy made
    while it was written), and so may the rows of the last one. ``empty``: the kernel table is there
    but holds no row (else there is none). None when the export holds them (a complete export that
    holds no kernels)."""
    if any(schema.has(t) for t in META_TABLES) or any(t.startswith(ENUM_PREFIX) for t in schema.tables):
        return None
    return (f"{path}: incomplete export: its {counted(len(schema.tables), 'table has', 'tables have')} "
            f"{'an empty ' + KERNEL_TABLE + ' (no row)' if empty else 'no ' + KERNEL_TABLE}, no export metadata "
            f"({META_TABLES[0]}) and none of the {ENUM_PREFIX}* tables that nsys export writes last: the export "
            "looks cut short (interrupted, or copied while it was being written); export the report again with "
            "nsys export --type sqlite")


def _kernel_query(schema: Schema, path: str, required: bool = True) -> tuple[str | None, bool, bool]:
    """``(sql, decode_pid, has_name)`` that reads the kernel columns; ``sql`` is None when the
    export has no kernels and ``required`` is False. Raises :class:`ProfileError` when
    kernels are required and there is no table (the message says whether the export looks cut short,
    :func:`_cut_short`, or called launches or traced copies and no kernel, :func:`_no_kernel_cause`) or no start/end column."""
    if not required and (not schema.has(KERNEL_TABLE) or
                         not schema.con.execute(f"SELECT 1 FROM {KERNEL_TABLE} LIMIT 1").fetchone()):
        return None, False, False
    if not schema.has(KERNEL_TABLE):
        copies = _no_kernel_cause(schema)
        raise ProfileError(_cut_short(schema, path) or (
            f"{path}: no {KERNEL_TABLE} table, {copies}" if copies else
            f"{path}: no {KERNEL_TABLE} table: the export holds no CUDA kernels "
            "(was the run profiled with --trace=cuda, and did it launch any kernel?)"))
    cols = schema.columns(KERNEL_TABLE)
    for column in ("start", "end"):
        if column not in cols:
            raise ProfileError(f"{path}: {KERNEL_TABLE} has no '{column}' column")
    return kernel_select(schema)


_INT32 = np.iinfo(np.int32)


def _narrow(ints: dict, name: str) -> np.ndarray:
    """Column ``name`` taken out of ``ints`` (so its int64 array can go) as int32 when every value
    fits, else as it is. Ids (process, thread, device, stream, correlationId) nearly always fit:
    half the memory, the same values; every computation on them casts to int64 first."""
    values = ints.pop(name)
    if values.dtype == np.int32 or (values.size and (int(values.min()) < _INT32.min
                                                     or int(values.max()) > _INT32.max)):
        return values
    return values.astype(np.int32)


def _kernels_frame(table, strings: dict[int, str], path: str, decode_pid: bool,
                   has_name: bool, copies: str | None = None) -> tuple[pd.DataFrame, list]:
    """Kernel rows (``KERNEL_COLUMNS`` plus ``context_id``, dropped by the caller) from the
    :class:`~pipeline.load.sqlite.Decoded` columns of :func:`_kernel_query` (NULL read as 0, as -1
    in ``name``), and the loader's warnings. ``pid`` is -1 on every row when the table has no
    process column (older schema): :func:`infer_pids` fills it in. The decoded arrays become the
    frame's columns (no copy when every row is kept). Raises :class:`ProfileError` when no row is usable
    (``copies``: what the export says of it instead, :func:`_no_kernel_cause`, said when the table has no row)."""
    n = table.rows
    if n == 0:
        raise ProfileError(f"{path}: {KERNEL_TABLE} has zero rows, {copies}" if copies else
                           f"{path}: {KERNEL_TABLE} has zero rows: no kernel ran while profiling")
    ints = table.ints
    start, end = ints["start"], ints["end"]
    bad = untimed(table)
    warnings = []
    keep = None
    pid = ints["pid"]  # decoded from globalPid as read (:func:`~pipeline.load.queries.kernel_columns`)
    if bad.any():
        kept = int(n - bad.sum())
        if kept == 0:
            raise ProfileError(f"{path}: all {n:,} rows of {KERNEL_TABLE} have end < start or no timestamps "
                               "(start = end = 0 or NULL): no usable kernel")
        warnings.append(RowWarning(WarningCode.DROPPED_KERNEL_ROWS,
                                   f"dropped {int(bad.sum())} kernel rows with end < start or no timestamps "
                                   f"(start = end = 0 or NULL); {kept} of {n} kept", _pids_of(pid[bad])))
        keep = np.flatnonzero(~bad)
    del bad
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    ints["pid"] = pid
    columns = {"start": pick(start), "end": pick(end)}
    for name in ("pid", "device_id", "stream_id", "correlation_id"):
        columns[name] = pick(_narrow(ints, name))
    columns["context_id"] = pick(ints["context_id"])
    df = pd.DataFrame(columns, copy=False)
    if has_name:
        names = decoded_text(table, "name", strings)
        df["name"] = names if keep is None else names.iloc[keep].reset_index(drop=True)
    else:
        df["name"] = ""
    return df, warnings


def _kernel_work(strings: dict[int, str], path: str, decode_pid: bool, has_name: bool):
    """What is done with the kernel table as soon as it is read, on the thread that read it
    (:func:`~pipeline.load.sqlite.read_columns`' ``then``): a function of its
    :class:`~pipeline.load.sqlite.Decoded` giving ``(kernels, warnings, aliases, duplicates)``: :func:`_kernels_frame`,
    the name columns for :func:`~pipeline.load.kernel_names.distinct_rows` (``[(values, NULL mask or None)]``, the
    kernel name first; None when they were not read along) and the rows' exact duplicates
    (:func:`~pipeline.load.integrity.frame_duplicates`). A table without a row is given back as it is:
    why it has none is worded on the schema's thread (its connection)."""
    def work(found):
        if not found.rows:
            return found
        aliases = None
        if has_name and found.also is not None:
            aliases = [(found.ints["name"], found.nulls.get("name")), *found.also.values()]
        kernels, warnings = _kernels_frame(found, strings, path, decode_pid, has_name)
        return kernels, warnings, aliases, frame_duplicates(kernels)
    return work


def _runtime_work(strings: dict[int, str], has_name: bool):
    """What is done with the runtime table as soon as it is read, on the thread that read it (as
    :func:`_kernel_work`): ``(calls, duplicates)``: :func:`_runtime_frame` and its exact duplicates
    (:func:`~pipeline.load.integrity.frame_duplicates`)."""
    def work(found):
        calls = _runtime_frame(found, strings, has_name)
        return calls, frame_duplicates(calls)
    return work


RUNTIME_COLUMNS = ["start", "end", "pid", "tid", "correlation_id", "name"]


def _runtime_frame(table, strings: dict[int, str], has_name: bool) -> pd.DataFrame:
    """Runtime calls (``RUNTIME_COLUMNS``; ``name`` normalised, categorical) from the
    :class:`~pipeline.load.sqlite.Decoded` columns of :func:`~pipeline.load.queries.runtime_select` (NULL read as 0, as
    -1 in ``name``); ``table`` None gives an empty frame. Rows without start or end are dropped."""
    if table is None:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in RUNTIME_COLUMNS[:-1]}
                            | {"name": pd.Series(dtype=str)})
    n = table.rows
    keep = None
    if "start" in table.nulls or "end" in table.nulls:
        keep = np.flatnonzero(~(table.null_mask("start") | table.null_mask("end")))
    pick = (lambda a: a) if keep is None else (lambda a: a[keep])
    ints = table.ints
    df = pd.DataFrame({"start": pick(ints["start"]), "end": pick(ints["end"]),
                       **{c: pick(_narrow(ints, c)) for c in ("pid", "tid", "correlation_id")}}, copy=False)
    if has_name:
        # Normalise each distinct name once, not once per row (two names may normalise to one).
        names = decoded_text(table, "name", strings, each=normalise_api_name)
        df["name"] = names if keep is None else names.iloc[keep].reset_index(drop=True)
    else:
        df["name"] = pd.Series("", index=df.index, dtype="category")
    return df if n else df.iloc[0:0]


# ``src_kind`` and ``dst_kind`` get :data:`pipeline.model.MEM_KINDS` ids (shared with the PyTorch profiler
# loader), whatever ids the export itself uses (it names them in its table).


def mem_kind_ids(schema: Schema) -> dict[int, int]:
    """The export's ENUM_CUDA_MEM_KIND ids -> :data:`MEM_KINDS` ids, by the names it gives them
    (``CUDA_MEMOPR_MEMORY_KIND_PINNED`` -> 1); an id whose name is not known maps to 7 (unknown). Empty
    when the export has no such table: its ids are then read as :data:`MEM_KINDS` ids."""
    if not {"id", "name"} <= set(schema.columns(MEM_KIND_TABLE)):
        return {}
    out = {}
    for kind_id, name in schema.con.execute(f"SELECT id, name FROM {MEM_KIND_TABLE}").fetchall():
        if kind_id is not None:
            suffix = str(name or "").upper().removeprefix("CUDA_MEMOPR_MEMORY_KIND_")
            out[int(kind_id)] = MEM_KINDS.get(suffix, MEM_KINDS["UNKNOWN"])
    return out


def _canonical_kinds(values: np.ndarray, ids: dict[int, int]) -> np.ndarray:
    """``src_kind`` / ``dst_kind`` values (int64 array) as :data:`MEM_KINDS` ids (``ids``:
    :func:`mem_kind_ids`); -1 (no such column, a memset) stays; an id the table does not list becomes
    7 (unknown)."""
    if not ids:
        return values
    out = np.where(values == -1, -1, MEM_KINDS["UNKNOWN"]).astype(np.int64)
    for export_id, kind in ids.items():
        out[values == export_id] = kind
    return out


def _filled(values: np.ndarray, fill: int | None) -> np.ndarray:
    """A column read from SQLite as int64 (NULL read as ``fill``; None: there is none)."""
    if fill is not None and values.dtype.kind in "fO":
        values = np.where(pd.isna(values), fill, values)
    return values.astype(np.int64)


#: The columns of :func:`_load_copies` (``kind`` text, the others int64), in order.
COPY_COLUMNS = ["start", "end", "pid", "device_id", "stream_id", "kind", "copy_kind", "bytes", "src_kind", "dst_kind",
                "context_id", "correlation_id"]


def _load_copies(schema: Schema) -> pd.DataFrame:
    """memcpy and memset rows, plus ``context_id`` (dropped by the caller); ``pid`` is -1 on
    the rows of a table without a process column (older schema); ``src_kind`` and ``dst_kind`` as
    :data:`MEM_KINDS` ids (:func:`mem_kind_ids`), -1 for a memset or a schema without them."""
    frames = []
    for table, kind in ((MEMCPY_TABLE, "memcpy"), (MEMSET_TABLE, "memset")):
        cols = schema.columns(table)
        if not cols:
            continue
        pid_col, decode = pid_column(schema, table)
        copy_kind = "copyKind" if (kind == "memcpy" and "copyKind" in cols) else "-1"
        nbytes = "bytes" if "bytes" in cols else "0"
        src_kind, dst_kind = (c if (kind == "memcpy" and c in cols) else "-1" for c in ("srcKind", "dstKind"))
        dev = "deviceId" if "deviceId" in cols else "0"
        stream = "streamId" if "streamId" in cols else "0"
        ctx = "contextId" if "contextId" in cols else "0"
        corr = "correlationId" if "correlationId" in cols else "0"
        df = read_frame(schema, f"SELECT start, end, {pid_col} AS pid, {dev} AS device_id, "
                   f"{stream} AS stream_id, {copy_kind} AS copy_kind, {nbytes} AS bytes, "
                   f"{src_kind} AS src_kind, {dst_kind} AS dst_kind, "
                   f"{ctx} AS context_id, {corr} AS correlation_id FROM {table}", table)
        keep = ~(pd.isna(df["start"].to_numpy()) | pd.isna(df["end"].to_numpy()))  # rows without times: dropped
        fills = {"device_id": 0, "stream_id": 0, "copy_kind": -1, "bytes": 0, "src_kind": -1, "dst_kind": -1,
                 "context_id": 0, "correlation_id": 0, "pid": -1 if pid_col == "-1" else 0}
        columns = {c: _filled(df[c].to_numpy()[keep], fills.get(c)) for c in COPY_COLUMNS if c != "kind"}
        if decode:
            columns["pid"] = pid_of(columns["pid"])
        columns["kind"] = np.full(int(keep.sum()), kind, dtype=object)
        frames.append(columns)
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in COPY_COLUMNS}).astype({"kind": str})
    df = {c: np.concatenate([f[c] for f in frames]) for c in COPY_COLUMNS}
    df["kind"] = pd.array(df["kind"], dtype="str")
    ids = mem_kind_ids(schema)
    for column in ("src_kind", "dst_kind"):
        df[column] = _canonical_kinds(df[column], ids)
    return pd.DataFrame(df, copy=False)


def _load_nvtx(schema: Schema, strings: dict[int, str]) -> pd.DataFrame:
    """NVTX ranges (start, end, pid, tid: int64; text): rows without both times or of zero length are
    left out."""
    columns = ["start", "end", "pid", "tid", "text"]
    cols = schema.columns(NVTX_TABLE)
    if not cols or "end" not in cols:
        return pd.DataFrame({c: pd.Series(dtype="int64") for c in columns[:-1]} | {"text": pd.Series(dtype=str)})
    text = cut_sql("text") if "text" in cols else "NULL"
    text_id = "textId" if "textId" in cols else "NULL"
    where = f"WHERE eventType IN {NVTX_RANGE_TYPES}" if "eventType" in cols else ""
    gtid = "globalTid" if "globalTid" in cols else "0"
    df = read_frame(schema, f"SELECT start, end, {gtid} AS gtid, {text} AS text, {text_id} AS text_id "
               f"FROM {NVTX_TABLE} {where}", NVTX_TABLE, ("text",))
    start, end = df["start"].to_numpy(), df["end"].to_numpy()
    keep = ~(pd.isna(start) | pd.isna(end))
    keep[keep] = end[keep] != start[keep]  # zero-length ranges mark nothing; end < start is counted by the loader
    threads = _filled(df["gtid"].to_numpy()[keep], 0)
    # the inline text, else the StringIds text of its id, else ""
    texts = [str(inline) if pd.notna(inline) else strings.get(int(ref), "") if pd.notna(ref) else ""
             for inline, ref in zip(df["text"].to_numpy(object)[keep].tolist(),
                                    df["text_id"].to_numpy(object)[keep].tolist())]
    return pd.DataFrame({"start": start[keep].astype(np.int64), "end": end[keep].astype(np.int64),
                         "pid": pid_of(threads), "tid": tid_of(threads), "text": pd.array(texts, dtype="str")})


def _copies_by_table(copies: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows of :func:`_load_copies` split by the table they came from (memcpy rows first)."""
    is_memcpy = (copies["kind"] == "memcpy").to_numpy(bool)
    return {MEMCPY_TABLE: where(copies, is_memcpy), MEMSET_TABLE: where(copies, ~is_memcpy)}


def _overhead_by_table(overhead: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """The rows of :func:`~pipeline.load.caveats.load_overhead` split by the table they came from."""
    own = overhead["own"].to_numpy(bool)
    return {PROFILER_OVERHEAD_TABLE: where(overhead, own), CUPTI_OVERHEAD_TABLE: where(overhead, ~own)}


#: Tables whose exact duplicate rows are counted once (overhead rows only ever count as a union).
DEDUPLICATED = (KERNEL_TABLE, RUNTIME_TABLE, MEMCPY_TABLE, MEMSET_TABLE, NVTX_TABLE)


def _pids_of(pids: np.ndarray) -> tuple | None:
    """The distinct processes of some rows, for a warning's scope; None (the whole report) when a
    row's process is not known yet (older schemas: -1 until :func:`resolve_missing_pids`)."""
    return None if (pids < 0).any() else tuple(int(p) for p in np.unique(pids))


def _records(*frames: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns :func:`~pipeline.load.caveats.lost_launches` reads of a table of GPU records (``start``, ``pid``,
    ``correlation_id``) as arrays, the rows of ``frames`` (same columns and dtypes) end to end, so that it can run on
    another thread while the frames are changed."""
    return {c: frames[0][c].to_numpy() if len(frames) == 1 else np.concatenate([f[c].to_numpy() for f in frames])
            for c in ("start", "pid", "correlation_id")}


def _drop_rows(frame: pd.DataFrame, drop: np.ndarray) -> pd.DataFrame:
    return frame.iloc[np.flatnonzero(~drop)].reset_index(drop=True) if drop.any() else frame


def _kernel_span(kernels: pd.DataFrame) -> tuple[int, int] | None:
    """``(first start, last end)`` ns of ``kernels``; None without any."""
    return (int(kernels["start"].min()), int(kernels["end"].max())) if len(kernels) else None


def _drop_untrustworthy(schema: Schema, path: str, frames: dict[str, pd.DataFrame],
                        known: dict[str, np.ndarray] | None = None) -> tuple[dict, list, Capture]:
    """Rows that cannot be real, dropped from ``frames`` (table name -> rows with start and end):
    exact duplicates (counted once; :data:`DEDUPLICATED` tables), end < start, and times far outside
    the capture (:func:`~pipeline.load.integrity.capture_of`). Returns the frames left, the
    warnings naming what was dropped (and, once, a stated capture the rows do not fit) and the capture. Raises
    :class:`ProfileError` when no kernel is left. ``known``: table -> its duplicates
    (:func:`~pipeline.load.integrity.frame_duplicates`) where they were found already (on the thread that read it)."""
    duplicates, owners = {}, []
    for table in DEDUPLICATED:
        frame = frames[table]
        copies = (known or {}).get(table)
        copies = frame_duplicates(frame) if copies is None else copies
        duplicates[table] = int(copies.sum())
        owners.append(frame["pid"].to_numpy()[copies].astype(np.int64))
        frames[table] = _drop_rows(frame, copies)
    warnings = duplicates_warning(duplicates, _pids_of(np.concatenate(owners)))
    stamps = [frame[c].to_numpy(np.int64) for frame in frames.values() for c in ("start", "end")]
    kernels = frames[KERNEL_TABLE]
    reference = (kernels if len(kernels) else frames[RUNTIME_TABLE])["start"].to_numpy(np.int64)
    capture = capture_of(schema, stamps, reference)
    dropped, kept_outside = [], {}
    for table, frame in frames.items():  # the kernel table first: the others' drops are judged by its kept rows
        starts, ends = frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64)
        found = impossible_rows(table, starts, ends, capture)
        bad = found.bad
        if bad.any():  # (usually none: no warning to word, no row to drop)
            dropped += dropped_warning(found, starts, ends, capture, _pids_of(frame["pid"].to_numpy()[bad].astype(np.int64)),
                                       _kernel_span(frames[KERNEL_TABLE]) if found.outside.any() else None)
            frames[table] = _drop_rows(frame, bad)
        if capture.stated is not None:  # the export's stated capture does not hold its rows: kept, counted
            kept_outside[table] = int((capture.stated.outside(starts, ends) & ~bad).sum())
    warnings += disagreement_warning(capture, kept_outside) + dropped
    if len(kernels) and not len(frames[KERNEL_TABLE]):
        raise ProfileError(f"{path}: all {len(kernels):,} usable rows of {KERNEL_TABLE} are timed far outside the "
                           f"capture ({capture.text}): no usable kernel")
    return frames, warnings, capture


def _capture_start(schema: Schema, frames: dict[str, pd.DataFrame], capture: Capture) -> tuple[int | None, str]:
    """The timeline's zero of the export (int ns on the rows' clock) and its source
    (:func:`~pipeline.load.integrity.capture_start`), from the rows ``frames`` kept and the ``capture``
    they were judged by (:func:`_drop_untrustworthy`)."""
    kernels = frames[KERNEL_TABLE]
    reference = (kernels if len(kernels) else frames[RUNTIME_TABLE])["start"].to_numpy(np.int64)
    return capture_start(schema, [f["start"].to_numpy(np.int64) for f in frames.values()], reference, capture)


def _reordered(frame: pd.DataFrame, order: np.ndarray, scratch: list | None = None) -> pd.DataFrame:
    """``frame``'s rows in ``order`` (row positions, each once), a fresh index; ``frame`` is consumed (nothing else
    may use it after): its columns are taken out of it one at a time, each old column let go as its new one is
    made, so memory grows by one column (none in place), not by a copy of the frame. A column whose memory nothing else
    refers to (:func:`_sole_owner`) is reordered in place: taken into one scratch buffer, then copied back, so that
    its rows stay in pages the process already has (first touching fresh pages costs more than the take itself:
    ~3 us a 4 KiB page on a virtual machine, 2M kernels' columns ~26k pages); any other column is taken into a new
    array (:func:`~pipeline.frames.taken`). ``scratch``: a list holding that buffer (made at the first in-place
    reorder when empty), for the caller to pass on to the next table's reorder."""
    columns = {}
    scratch = [] if scratch is None else scratch
    with ThreadPoolExecutor(max_workers=1) as pool:  # each long column taken in two halves, one on each core
        split = functools.partial(_split_take, pool=pool)
        for name in list(frame.columns):  # (in a list: the column's only reference is then the callee's)
            columns[name] = _reordered_column([frame.pop(name)], order, split, scratch, pool)
    return pd.DataFrame(columns, copy=False)


def _reordered_column(box: list, order: np.ndarray, split, scratch: list, pool: ThreadPoolExecutor) -> pd.Series:
    """The column in ``box`` (a list holding the only reference the caller keeps: a column taken out of its frame)
    in ``order``: in place when :func:`_sole_owner` finds its values' memory free to write (``scratch``: the buffer
    they are taken into first, made on first use), else a new array."""
    col = box.pop()
    categorical = isinstance(col.dtype, pd.CategoricalDtype)
    if col.dtype == object or not (categorical or isinstance(col.dtype, np.dtype)):
        return pd.Series(taken(col, order, split), copy=False)  # pandas 3 copies by default
    dtype = col.dtype
    values = [codes_of(col) if categorical else col.to_numpy()]
    del col
    target = _sole_owner(values) if order.size >= SPLIT_TAKE_ROWS and values[0].size == order.size else None
    if target is None:
        new = split(values[0], order)
    else:
        if not scratch or scratch[0].nbytes < target.nbytes:
            scratch[:] = [np.empty(target.nbytes, np.uint8)]
        out = scratch[0][:target.nbytes].view(target.dtype)
        split(target, order, out=out)
        _split_copy(target, out, pool)
        new = target
    return pd.Series(kept_as(dtype, new), copy=False)


def _sole_owner(values: list) -> np.ndarray | None:
    """The array holding the memory of ``values[0]`` (a column's values, in a list the caller gives up: emptied
    here), writable, when nothing else refers to it (CPython's reference count: no other array is a view of it,
    no frame holds it) and it is exactly that column (the same memory, contiguous, length and type); else
    None, ``values`` left as it was."""
    view = values[0]
    owner = view if view.base is None else view.base
    if not isinstance(owner, np.ndarray) or not owner.flags.owndata or not owner.flags.c_contiguous \
            or not view.flags.c_contiguous or owner.shape != view.shape or owner.dtype != view.dtype \
            or owner.ctypes.data != view.ctypes.data:
        return None
    values.clear()
    del view
    # the references now: ``owner`` here and getrefcount's argument; a view of it still held elsewhere adds one
    if sys.getrefcount(owner) != 2:
        values.append(owner)
        return None
    if not owner.flags.writeable:
        owner.flags.writeable = True  # (allowed: it owns its memory)
    return owner


def _split_copy(target: np.ndarray, source: np.ndarray, pool: ThreadPoolExecutor) -> None:
    """``target[:] = source`` in two halves at once (one on ``pool``'s thread): numpy lets go of the GIL."""
    half = target.size // 2
    first = pool.submit(np.copyto, target[:half], source[:half])
    np.copyto(target[half:], source[half:])
    first.result()


#: Rows from which :func:`_split_take` takes in two halves on two threads.
SPLIT_TAKE_ROWS = 1 << 18


def _split_take(values: np.ndarray, order: np.ndarray, pool: ThreadPoolExecutor,
                out: np.ndarray | None = None) -> np.ndarray:
    """``values[order]`` (``np.take``, which lets go of the GIL) into ``out`` (default: a new array), in two
    halves at once (one on ``pool``'s thread) when long (:data:`SPLIT_TAKE_ROWS`). ``order`` holds row positions
    of ``values`` only: taken with ``mode="clip"``, since with the default ``"raise"`` numpy writes into a
    temporary as long as ``out`` and copies it over."""
    if order.size < SPLIT_TAKE_ROWS:
        return np.take(values, order, out=out, mode="clip")
    out = np.empty(order.size, values.dtype) if out is None else out
    half = order.size // 2
    first = pool.submit(np.take, values, order[:half], None, out[:half], "clip")
    np.take(values, order[half:], out=out[half:], mode="clip")
    first.result()
    return out


def _group_by_gpu(kernels: pd.DataFrame, scratch: list | None = None) -> pd.DataFrame:
    """Kernel rows grouped by GPU key (stable: file order within a GPU), so that one GPU's
    rows are one contiguous slice (:func:`gpu_trace`). Codes are small ints: a radix sort.
    ``kernels`` is consumed (:func:`_reordered`, ``scratch`` as its), no work when they are grouped already."""
    keys = codes_of(kernels["gpu_key"])
    if is_sorted(keys):
        return kernels
    order = stable_order(keys)
    del keys  # (a view of the gpu_key column's codes: let go, that column is reordered in place too)
    return _reordered(kernels, order, scratch)


def calls_by_process(calls: pd.DataFrame, devices: pd.DataFrame, scratch: list | None = None) -> pd.DataFrame:
    """A report's runtime calls as :class:`~pipeline.model.Report` keeps them: grouped by process, the processes
    that share a GPU (``devices``: its rows of pid and gpu_key; linked through any GPU they share) in one group,
    each group's calls in start order (stable: the export's order among equal starts); groups in the order of
    their smallest pid. A GPU's calls are then one contiguous run in start order (:func:`gpu_trace`: a slice, no
    copy), or some calls of one group (a process that drives another GPU too), in start order as they are.
    ``calls`` is consumed (:func:`_reordered`; ``scratch`` as its); no work when they are so already (the calls of one process, in
    start order)."""
    starts, pids = calls["start"].to_numpy(np.int64), calls["pid"].to_numpy()
    order = None if is_sorted(starts) else np.argsort(starts, kind="stable")
    del starts
    if order is not None:
        pids = pids[order]
    if not is_sorted(pids):
        groups = _group_codes(pids, devices)
        if not is_sorted(groups):
            grouped = stable_order(groups)
            order = grouped if order is None else order[grouped]
        del groups
    del pids
    return calls if order is None else _reordered(calls, order, scratch)


def _group_codes(pids: np.ndarray, devices: pd.DataFrame) -> np.ndarray:
    """The group of each call's process (``pids``) as :func:`calls_by_process` orders them: small ints (int16 for
    fewer than 2**15 processes), made :data:`~pipeline.arrays.SCAN_ROWS` rows at a time (no temporary as long as
    the calls but the codes)."""
    values = distinct([pids])
    position = Positions(values, pids.size)
    group = _process_groups(values, devices)
    group = group.astype(np.int16) if values.size < 2 ** 15 else group
    codes = np.empty(pids.size, dtype=group.dtype)
    for i in range(0, pids.size, SCAN_ROWS):
        codes[i:i + SCAN_ROWS] = np.take(group, position(pids[i:i + SCAN_ROWS]))
    return codes


def _process_groups(pids: np.ndarray, devices: pd.DataFrame) -> np.ndarray:
    """For each of ``pids`` (distinct, ascending), its group: the position among them of the smallest process it
    is linked to by GPUs they share (``devices``: pid, gpu_key rows), its own when it shares none."""
    at = {int(p): i for i, p in enumerate(pids.tolist())}
    group = np.arange(pids.size)
    for _, shared in devices.groupby("gpu_key", sort=False)["pid"]:
        roots = {_root(group, at[p]) for p in shared.astype(np.int64).tolist() if p in at}
        if len(roots) > 1:
            group[list(roots)] = min(roots)  # each root below joins the smallest
    return np.array([_root(group, i) for i in range(pids.size)], dtype=np.int64)


def _root(group: np.ndarray, i: int) -> int:
    """The root of ``i`` in the forest ``group`` (each entry: its parent, roots their own)."""
    while group[i] != i:
        i = group[i]
    return int(i)


def load_report(path: str, require_kernels: bool = True) -> Report:
    """Load one SQLite export.

    Args:
        path: local path of a ``.sqlite`` export.
        require_kernels: when False, an export without kernels (a CPU-only
            capture) loads with empty ``kernels`` and ``devices`` instead of raising.
    Returns:
        A :class:`Report` with kernels, runtime calls, copies, NVTX ranges,
        device identities, metadata and diagnostics, as the export's committed state
        holds them (with what a ``-wal`` or hot ``-journal`` beside it says).
    Raises:
        ProfileError: the file is missing, empty, not SQLite, not an Nsight
        export, or holds no kernels; another process is writing it, or its committed
        state (part of it in a ``-wal`` or hot ``-journal`` sidecar) cannot be recovered
        (:func:`pipeline.snapshot.committed_state`); a table it reads is a view
        (:class:`~pipeline.load.tables.Schema`); reading took longer than the time bound
        (``export.read_timeout_s``, :mod:`pipeline.load.limits`). The message starts with the path.

    Text longer than :data:`~pipeline.load.limits.MAX_TEXT_CHARS` characters (kernel and API names,
    NVTX text, StringIds) is cut where SQLite reads it (:func:`~pipeline.load.limits.cut_sql`).
    """
    deadline = read_limits().deadline()
    with committed_state(path) as readable, small_pages():
        return _load_committed(path, readable, require_kernels, deadline)


def _load_committed(path: str, readable: str, require_kernels: bool, deadline=None) -> Report:
    """:func:`load_report` of ``path`` from ``readable``, a file holding its committed state by itself,
    within ``deadline`` (a :class:`~pipeline.load.limits.Deadline`; None: no time bound)."""
    con = connect_readonly(readable, shown=path)
    try:
        schema = Schema(con, readonly_uri(readable), path, deadline)
    except sqlite3.DatabaseError as exc:
        con.close()
        raise _read_error(path, exc, deadline) from exc
    aside = None  # the kernel names' other names, read on a thread while this one goes on
    try:
        if not schema.has(KERNEL_TABLE) and not any(schema.has(t) for t in (*META_TABLES, STRING_TABLE)):
            raise ProfileError(f"{path}: SQLite file is not an Nsight Systems export "
                               f"(no {KERNEL_TABLE}, StringIds or export metadata tables)")
        strings = read_strings(schema)
        graphs = has_graphs(schema)  # graph executions are GPU work: a graph-only capture needs no kernel row
        kernel_sql, decode_pid, kernel_names = _kernel_query(schema, path, require_kernels and not graphs)
        runtime_sql, runtime_names = runtime_select(schema)
        queries, then = {}, {}
        alias_sql = alias_query(schema)
        if kernel_sql:
            queries["kernels"] = kernel_columns(kernel_sql, decode_pid, kernel_names, name_columns(schema))
            then["kernels"] = _kernel_work(strings, path, decode_pid, kernel_names)
        if runtime_sql:
            queries["runtime"] = runtime_columns(runtime_sql, runtime_names)
            then["runtime"] = _runtime_work(strings, runtime_names)
        if graphs:
            queries["graphs"] = graph_query(schema, ID_COLUMNS)
        aside_frames: dict = {}  # the other tables, read by this thread while the threads read those above

        def small_tables() -> None:
            try:
                aside_frames["frames"] = {**_copies_by_table(_load_copies(schema)), NVTX_TABLE: _load_nvtx(schema, strings),
                                          **_overhead_by_table(load_overhead(schema, strings))}
            except Exception as exc:  # raised below, where these tables were read before (after the kernels' errors)
                aside_frames["error"] = exc

        # each table's frame made on the thread that read it, as soon as it is read
        tables = read_columns(schema, queries, then=then, meanwhile=small_tables, ahead=taken_ahead)
        kernel_aliases, known = None, {}  # known: the exact duplicates found as each table was read
        if kernel_sql:
            found = tables.pop("kernels")
            if isinstance(found, tuple):
                kernels, warnings, kernel_aliases, known[KERNEL_TABLE] = found
                del found
            else:  # no row: why is worded here, on the schema's thread
                if cut := _cut_short(schema, path, empty=True):
                    raise ProfileError(cut)
                kernels, warnings = _kernels_frame(found, strings, path, decode_pid, kernel_names,
                                                   _no_kernel_cause(schema))
        else:
            kernels, warnings = _no_kernels().assign(context_id=pd.Series(dtype="int64")), []
        if alias_sql:  # made distinct (or read: the b-tree, else SQLite) beside the work on the columns below
            aside = ThreadPoolExecutor(max_workers=1)
            aliases = aside.submit(distinct_rows, kernel_aliases) if kernel_aliases is not None else \
                aside.submit(alias_rows, schema, alias_sql, alias_job(schema))
        del kernel_aliases  # the name columns go once made distinct
        executions, graph_warnings = graph_rows(tables.pop("graphs"), _narrow) if graphs else (None, [])
        warnings += graph_warnings
        if executions is not None and len(executions):  # other rows: their duplicates found with them
            known.pop(KERNEL_TABLE, None)
        kernels = with_graphs(kernels, executions)
        if graphs and not len(kernels):
            raise ProfileError(f"{path}: all rows of {GRAPH_TRACE_TABLE} have end < start or no timestamps "
                               f"(start = end = 0 or NULL) and no {KERNEL_TABLE} row is usable: no usable GPU work")
        if runtime_sql:
            runtime, known[RUNTIME_TABLE] = tables.pop("runtime")
        else:
            runtime = _runtime_frame(None, strings, runtime_names)
        del tables
        if "error" in aside_frames:
            raise aside_frames["error"]
        frames = {KERNEL_TABLE: kernels, RUNTIME_TABLE: runtime, **aside_frames.pop("frames")}
        by_process = "globalTid" in schema.columns(RUNTIME_TABLE)
        with ThreadPoolExecutor(max_workers=1) as beside:
            # The lost launches of the rows as read, found while they are checked: they stand when the checks
            # (and the steps after them) keep every kernel, copy and call as it is, as they nearly always do.
            read = {t: frames[t] for t in (KERNEL_TABLE, MEMCPY_TABLE, MEMSET_TABLE, RUNTIME_TABLE)}
            launches = beside.submit(lost_launches, _records(read[KERNEL_TABLE]),
                                     _records(read[MEMCPY_TABLE], read[MEMSET_TABLE]), read[RUNTIME_TABLE], by_process)
            frames, trust_warnings, capture = _drop_untrustworthy(schema, path, frames, known)
            warnings += trust_warnings
            start_ns, start_source = _capture_start(schema, frames, capture)
            kernels, runtime, nvtx = frames[KERNEL_TABLE], frames[RUNTIME_TABLE], frames[NVTX_TABLE]
            copies = concat_rows([frames[MEMCPY_TABLE], frames[MEMSET_TABLE]])
            overhead = concat_rows([frames[PROFILER_OVERHEAD_TABLE], frames[CUPTI_OVERHEAD_TABLE]])
            kept = all(frames[t] is read[t] for t in read)
            del frames, read  # the frames above are the only references left: columns dropped below are freed
            inferred = resolve_missing_pids(schema, kernels, copies, runtime)
            warnings += inferred
            counted = counted_once(kernels)
            if not kept or inferred or counted is not kernels:  # rows changed: their lost launches found again
                launches.cancel() or launches.exception()  # (the first guess let go)
                launches = beside.submit(lost_launches, _records(counted), _records(copies), runtime, by_process)
            kernels = counted
            del counted
            marks = lost_event_marks(schema)
            del kernels["context_id"]  # kernels and copies are this function's own frames
            del copies["context_id"], copies["correlation_id"]
            pair_codes, pairs = device_pairs(kernels)
            devices, device_warnings = load_devices(schema, pairs)
            warnings += device_warnings
            kernels["gpu_key"] = gpu_key_column(devices, pairs, pair_codes)
            untraced = pd.concat([launches.result(), marks], ignore_index=True)  # (its columns let go before the grouping)
            del launches
        release_memory()  # what the frames freed, on every thread's heap: the grouping below is the peak
        scratch: list = []  # the buffer both groupings reorder their columns through (_reordered)
        kernels = _group_by_gpu(kernels, scratch)
        release_memory()  # what the kernels' grouping freed: not kept beside the calls' grouping (a peak too)
        runtime = calls_by_process(runtime, devices, scratch)
        del scratch
        if not copies.empty:
            copies["gpu_key"] = pair_keys(devices, copies["pid"], copies["device_id"])
        else:
            copies["gpu_key"] = pd.Series(dtype=object)
        release_memory()  # what reading and sorting freed: back to the system before the analysis
        return Report(
            path=path,
            kernels=kernels,
            runtime=runtime,
            copies=copies,
            nvtx=nvtx,
            devices=devices,
            overhead=overhead,
            untraced=untraced,
            meta=with_export_host(with_scheduler_job(with_graph_mode(with_world_size(load_meta(schema),
                                                                                      capture_world_size(schema)),
                                                                      schema), schema), schema, start_ns, start_source),
            diagnostics=load_diagnostics(schema),
            warnings=warnings,
            capture_start_ns=start_ns,
            capture_start_source=start_source,
            kernel_aliases=aliases_of(aliases.result(), strings) if aside is not None else {},
        )
    except (sqlite3.DatabaseError, ReadTimeout) as exc:
        raise _read_error(path, exc, deadline) from exc
    finally:
        if aside is not None:
            aside.shutdown(wait=True)
        schema.close()


def _read_error(path: str, exc: Exception, deadline) -> ProfileError:
    """The :class:`ProfileError` of an SQLite error or :class:`~pipeline.load.limits.ReadTimeout` while
    reading ``path``: the time bound's message when ``deadline`` has passed (SQLite says only
    "interrupted" when its progress handler stopped a query)."""
    if isinstance(exc, ReadTimeout) or (deadline is not None and deadline.expired()):
        return ProfileError(f"{path}: {exc if isinstance(exc, ReadTimeout) else deadline.error()}")
    if isinstance(exc, NotInteger):
        return ProfileError(f"{path}: {exc}")
    return ProfileError(f"{path}: SQLite error while reading ({exc})")


def _gpu_rows(report: Report, gpu_key: str) -> pd.DataFrame:
    """The kernel rows of one GPU (the frame's order): a slice when they are contiguous (the rows are
    grouped by GPU key), else a take; found through the report's grouping (:meth:`Report.rows_of`)."""
    at = report.rows_of("kernels", "gpu_key", [gpu_key])
    if not isinstance(at, slice) and at.size and at[-1] - at[0] + 1 == at.size:
        at = slice(int(at[0]), int(at[-1]) + 1)
    return report.kernels.iloc[at]


def gpu_kernels(report: Report, gpu_key: str) -> pd.DataFrame:
    """The kernel rows of one GPU of ``report`` (all columns, the export's order): those :func:`gpu_trace` cuts,
    without the rest of its trace (for what reads every GPU's kernels at once: the wait inside collectives)."""
    return _gpu_rows(report, gpu_key)


def _gpu_devices(report: Report, gpu_key: str) -> pd.DataFrame:
    """The ``devices`` rows of one GPU. Raises ``KeyError`` for a GPU key the report does not have."""
    devs = rows(report.devices, report.rows_of("devices", "gpu_key", [gpu_key]))
    if not len(devs):
        raise KeyError(f"{report.path}: no GPU {gpu_key!r}")
    return devs


def _of_processes(report: Report, frame: str, pids: tuple, anyone: bool = False) -> pd.DataFrame:
    """The rows of the report's frame ``frame`` whose ``pid`` is one of ``pids`` (``anyone``: and those of
    no process, pid < 0), in the frame's order, with a fresh index (:meth:`Report.rows_of`)."""
    table = getattr(report, frame)
    if table.empty:
        return table.reset_index(drop=True)
    wanted = [int(p) for p in pids]
    if anyone:
        wanted += [p for p in report.groups_of(frame, "pid") if p < 0]
    return rows(table, report.rows_of(frame, "pid", wanted))


def _calls_of(report: Report, pids: tuple, calls: frozenset | None = None) -> pd.DataFrame:
    """The report's runtime calls of processes ``pids`` (only those named in ``calls`` when given), in start order
    (stable: the export's order among equal starts), with a fresh index: one run of the calls as
    :func:`calls_by_process` groups them (a slice, no copy), else the rows of ``pids`` in their order (a
    take); sorted by start (stable) only if a report not so grouped holds them out of order."""
    at = report.runtime_rows(pids)
    if calls is not None:
        wanted = name_mask(report.runtime["name"].iloc[at], calls)
        at = np.flatnonzero(wanted) + at.start if isinstance(at, slice) else at[wanted]
    cut = take_rows(report.runtime, at)
    starts = cut["start"].to_numpy()
    return cut if is_sorted(starts) else take_rows(cut, np.argsort(starts, kind="stable"))


def plan_trace(report: Report, gpu_key: str, calls: frozenset | None = None) -> GpuTrace:
    """The part of :func:`gpu_trace` that finding one GPU's iterations reads (kernels, NVTX,
    runtime calls and untraced rows of its processes; no copies, overhead or warnings), cut
    cheaply: the runtime calls in start order (:func:`_calls_of`), only those named in
    ``calls`` when given (:func:`~pipeline.analysis.analyse.plan_calls`: what the plan reads). Raises
    ``KeyError`` for an unknown GPU key."""
    devs = _gpu_devices(report, gpu_key)
    pids = tuple(sorted(set(devs["pid"].to_numpy(np.int64).tolist())))
    return GpuTrace(report=report.path, gpu_key=gpu_key, pids=pids, device_ids=(), gpu_model="",
                    kernels=_gpu_rows(report, gpu_key), copies=report.copies.iloc[:0],
                    runtime=_calls_of(report, pids, calls),
                    nvtx=report.nvtx.iloc[report.rows_of("nvtx", "pid", pids)],
                    untraced=_of_processes(report, "untraced", pids, True))


def gpu_trace(report: Report, gpu_key: str) -> GpuTrace:
    """Cut one GPU's rows out of a loaded report (docs/definitions.md#gpus-and-mig-instances: processes that
    share the physical GPU are unioned, a MIG instance is its own GPU; streams stay per
    process). Raises ``KeyError`` for a GPU key the report does not have."""
    devs = _gpu_devices(report, gpu_key)
    pids = tuple(sorted(set(devs["pid"].to_numpy(np.int64).tolist())))
    kernels = _gpu_rows(report, gpu_key)
    copies = rows(report.copies, report.rows_of("copies", "gpu_key", [gpu_key])) \
        if not report.copies.empty else report.copies.reset_index(drop=True)
    runtime = _calls_of(report, pids)
    models = sorted({m for m in devs["gpu_model"].tolist() if m})
    notes = sorted({n for n in devs["model_note"].tolist() if n})
    return GpuTrace(
        report=report.path, gpu_key=gpu_key, pids=pids,
        device_ids=tuple(sorted(set(devs["device_id"].to_numpy(np.int64).tolist()))),
        gpu_model=models[0] if models else "",
        kernels=kernels.reset_index(drop=True), copies=copies,
        runtime=runtime, nvtx=_of_processes(report, "nvtx", pids),
        warnings=[w for w in report.warnings if w.pids is None or set(w.pids) & set(pids)]
        + diagnostic_warnings(report.diagnostics, pids) + sm_subset_warning(devs),
        model_note="" if models else "; ".join(notes), mig=bool(devs["mig"].to_numpy(bool).all()),
        sms=int(devs["sms"].to_numpy(np.int64).max()), board_sms=int(devs["board_sms"].to_numpy(np.int64).max()),
        overhead=_of_processes(report, "overhead", pids), untraced=_of_processes(report, "untraced", pids, True),
        capture_start_ns=report.capture_start_ns, capture_start_source=report.capture_start_source,
        world_size=world_size(report.meta), kernel_aliases=report.kernel_aliases,
        graph_trace_mode=str(report.meta.get(GRAPH_TRACE_MODE, "")),
        not_nvidia=str(report.meta.get("not_nvidia") or ""),
    )
