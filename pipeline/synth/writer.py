"""ExportWriter: Nsight Systems SQLite exports in the real export schema.

Tables, column names and types, ``StringIds``, globalPid/globalTid encoding, NVTX, as
Nsight Systems 2024-2026 (schema 3.x) writes them; tables are created only when they get rows.
Older layouts can be written too (:data:`SCHEMA_2020`: the GPU tables of Nsight Systems
2020.3-2021, as in real public exports of those versions; ``meta_table`` ``EXPORT_META_DATA``
or none at all; ``drop_columns`` for columns a version does not have yet).
"""
from __future__ import annotations

import os
import sqlite3

#: The high bits Nsight Systems sets on every serialized GlobalId (vmId 1 << 48 as seen in real exports).
GLOBAL_ID_BASE = 0x1000000000000

SCHEMA = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, "
        "cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, "
        "gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL, "
        "staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL, "
        "localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, "
        "sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL, callchainId INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER, srcKind INTEGER, "
        "dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, "
        "migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER"),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER"),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, "
        "color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER, domainId INTEGER, "
        "uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, "
        "floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT"),
    "TARGET_INFO_GPU": (
        "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER, "
        "l2CacheSize INTEGER, totalMemory INTEGER, smCount INTEGER, uuid TEXT, chipName TEXT, cuDevice INTEGER"),
    "TARGET_INFO_CUDA_DEVICE": (
        "gpuId INTEGER, cudaId INTEGER NOT NULL, pid INTEGER NOT NULL, uuid TEXT, numMultiprocessors INTEGER"),
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "DIAGNOSTIC_EVENT": (
        "timestamp INTEGER NOT NULL, timestampType INTEGER NOT NULL, source INTEGER NOT NULL, "
        "severity INTEGER NOT NULL, text TEXT NOT NULL, globalPid INTEGER"),
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
}
#: Tables ExportWriter writes only when a test asks for them (profiler overhead, the capture's
#: metadata); the generated fleets hold none of them.
OPTIONAL_SCHEMA = {
    "CUPTI_ACTIVITY_KIND_OVERHEAD": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER, "
        "correlationId INTEGER, nameId INTEGER, overheadType INTEGER NOT NULL"),
    "PROFILER_OVERHEAD": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, globalTid INTEGER, nameId INTEGER NOT NULL, "
        "overheadType INTEGER NOT NULL"),
    "ENUM_CUPTI_OVERHEAD_TYPE": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "ENUM_CUDA_MEM_KIND": "id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER",
    "ANALYSIS_DETAILS": (
        "globalVid INTEGER NOT NULL, duration INTEGER NOT NULL, startTime INTEGER NOT NULL, stopTime INTEGER NOT NULL"),
    #: One row per CUDA graph execution traced as a whole (``--cuda-graph-trace=graph``).
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
        "graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL"),
    #: The capture's options and the launched processes' environment (name, value rows).
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
    "TARGET_INFO_SYSTEM_ENV": (
        "globalVid INTEGER, devStateName TEXT NOT NULL, name TEXT NOT NULL, nameEnum INTEGER NOT NULL, value TEXT NOT NULL"),
}

#: ENUM_CUPTI_OVERHEAD_TYPE as Nsight Systems 2024-2026 exports write it: id -> (name, label).
OVERHEAD_TYPES = {
    0: ("OVERHEAD_UNDEFINED", "Undefined"), 1: ("OVERHEAD_UNKNOWN", "Unknown"),
    2: ("OVERHEAD_DRIVER_COMPILER", "Driver JIT compiler (CUDA)"),
    3: ("OVERHEAD_CUPTI_BUFFER_FLUSH", "Buffer flush (Profiler)"),
    4: ("OVERHEAD_CUPTI_INSTRUMENTATION", "Instrumentation (Profiler)"),
    5: ("OVERHEAD_CUPTI_RESOURCE", "Resource creation/destruction (Profiler)"),
    6: ("OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING", "Runtime module loading (CUDA)"),
    7: ("OVERHEAD_LAZY_FUNCTION_LOADING", "Lazy function loading (CUDA)"),
    8: ("OVERHEAD_COMMAND_BUFFER_FULL", "Command buffer full (CUDA)"),
}
#: eventClass of CUPTI_ACTIVITY_KIND_OVERHEAD rows in real exports.
OVERHEAD_EVENT_CLASS = 103

#: The GPU tables as Nsight Systems 2020.3-2021 exports have them (column for column from real
#: public exports): TARGET_INFO_GPU keyed by ``deviceId`` (no ``id``, uuid, SM count or CUDA
#: ordinal yet), and TARGET_INFO_CUDA_GPU, one row per (process, CUDA device) with its name,
#: PCI bus id (``<UNKNOWN_BUS_ID>`` when unknown) and SM count. No TARGET_INFO_CUDA_DEVICE.
SCHEMA_2020 = {
    "TARGET_INFO_GPU": "vmId INTEGER NOT NULL, deviceId INTEGER NOT NULL, name TEXT, busLocation TEXT, isDiscrete INTEGER",
    "TARGET_INFO_CUDA_GPU": (
        "vmId INTEGER NOT NULL, name TEXT NOT NULL, pciBusId TEXT, globalMemoryBandwidth INTEGER NOT NULL, "
        "globalMemorySize INTEGER NOT NULL, constantMemorySize INTEGER NOT NULL, l2CacheSize INTEGER NOT NULL, "
        "numThreadsPerWarp INTEGER NOT NULL, coreClockRate INTEGER NOT NULL, numMemcpyEngines INTEGER NOT NULL, "
        "numMultiprocessors INTEGER NOT NULL, maxIPC INTEGER NOT NULL, maxWarpsPerMultiprocessor INTEGER NOT NULL, "
        "maxBlocksPerMultiprocessor INTEGER NOT NULL, maxRegistersPerBlock INTEGER NOT NULL, "
        "maxSharedMemoryPerBlock INTEGER NOT NULL, maxThreadsPerBlock INTEGER NOT NULL, maxBlockDimX INTEGER NOT NULL, "
        "maxBlockDimY INTEGER NOT NULL, maxBlockDimZ INTEGER NOT NULL, maxGridDimX INTEGER NOT NULL, "
        "maxGridDimY INTEGER NOT NULL, maxGridDimZ INTEGER NOT NULL, computeCapabilityMajor INTEGER NOT NULL, "
        "computeCapabilityMinor INTEGER NOT NULL, deviceId INTEGER NOT NULL, pid INTEGER, "
        "maxSharedMemoryPerMultiprocessor INTEGER, maxRegistersPerMultiprocessor INTEGER"),
}
#: Kernel-table columns Nsight Systems 2020.3 does not have yet.
KERNEL_COLUMNS_AFTER_2020 = ("greenContextId", "mangledName", "sharedMemoryLimitConfig")

#: ENUM_CUDA_MEM_KIND as Nsight Systems 2024-2026 exports write it: id -> name suffix.
NSYS_MEM_KINDS = {0: "PAGEABLE", 1: "PINNED", 2: "DEVICE", 3: "ARRAY", 4: "MANAGED", 5: "DEVICE_STATIC",
                  6: "MANAGED_STATIC", 7: "UNKNOWN"}
#: ENUM_CUDA_MEMCPY_OPER ids used by the generator.
HTOD, DTOH, DTOD = 1, 2, 8
#: NVTX event types: push/pop range.
NVTX_PUSH_POP = 59
#: eventClass of CUDA runtime rows in real exports.
RUNTIME_EVENT_CLASS = 1


def global_pid(pid: int) -> int:
    """Serialized GlobalId of a process, as in ``globalPid`` columns."""
    return GLOBAL_ID_BASE | (int(pid) << 24)


def global_tid(pid: int, tid: int) -> int:
    """Serialized GlobalId of a thread, as in ``globalTid`` columns."""
    return global_pid(pid) | int(tid)


class ExportWriter:
    """Write a synthetic export. Times are int ns; every ``add_*`` returns nothing.

    Example::

        w = ExportWriter("x.sqlite")
        w.kernel(pid=10, device=0, stream=7, start=0, end=100, name="gemm")
        w.close()
    """

    def __init__(self, path: str, schema_version: str = "3.25.0", meta_table: str | None = "META_DATA_EXPORT",
                 drop_columns: dict | None = None):
        """``meta_table``: ``META_DATA_EXPORT``, the older ``EXPORT_META_DATA``, or None for no
        metadata table (Nsight Systems 2020.x). ``drop_columns``: table -> column names the
        written table leaves out (a version without them, or a shape to test)."""
        if os.path.exists(path):
            os.unlink(path)
        self.path = path
        self.rows: dict[str, list[tuple]] = {}
        self.strings: dict[str, int] = {}
        self.meta_table = meta_table
        self.drop_columns = {table: set(cols) for table, cols in (drop_columns or {}).items()}
        self.ddl = dict(SCHEMA)
        self.meta = {"EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems", "EXPORT_SCHEMA_VERSION": schema_version,
                     "EXPORT_PARAM_EXPORT_TYPE": "SQLite", "DERIVED_BY": "gpu-idle synth"}
        self._corr = 0
        self._pids: set[int] = set()

    def string(self, text: str) -> int:
        """Id of ``text`` in StringIds (interned)."""
        if text not in self.strings:
            self.strings[text] = len(self.strings) + 1
        return self.strings[text]

    def correlation(self) -> int:
        """A fresh correlationId linking a runtime call to the GPU work it launched."""
        self._corr += 1
        return self._corr

    def _add(self, table: str, row: tuple) -> None:
        self.rows.setdefault(table, []).append(row)

    def kernel(self, pid: int, device: int, stream: int, start: int, end: int, name: str,
               correlation: int | None = None, context: int = 1, graph_node: int | None = None) -> None:
        """One kernel; ``graph_node``: its ``graphNodeId`` when a graph launched it, traced node by node
        (``--cuda-graph-trace=node``; it then carries the graph launch's ``correlation``)."""
        self._pids.add(pid)
        sid = self.string(name)
        self._add("CUPTI_ACTIVITY_KIND_KERNEL", (
            int(start), int(end), device, context, None, stream, correlation or self.correlation(),
            global_pid(pid), sid, sid, None, 0, 0, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, self._corr, 0, graph_node, 0))

    def graph_exec(self, pid: int, device: int, stream: int, start: int, end: int, graph_exec: int,
                   graph: int | None = None, correlation: int | None = None, context: int = 1) -> None:
        """One CUDA graph execution traced as a whole (a CUPTI_ACTIVITY_KIND_GRAPH_TRACE row): executable
        graph ``graph_exec`` (``graphExecId``) of graph ``graph`` (``graphId``; default the same number),
        launched by the call of ``correlation`` (a ``cudaGraphLaunch``: :meth:`runtime`)."""
        self._pids.add(pid)
        self._add("CUPTI_ACTIVITY_KIND_GRAPH_TRACE", (
            int(start), int(end), device, context, None, stream, correlation or self.correlation(), global_pid(pid),
            graph_exec if graph is None else graph, graph_exec))

    def capture(self, name: str, value: str) -> None:
        """One META_DATA_CAPTURE row (``CUDA_GRAPH_TRACE_OPTIONS:MODE`` = ``Graph``, ...)."""
        self._add("META_DATA_CAPTURE", (name, value))

    def runtime(self, pid: int, tid: int, start: int, end: int, name: str, correlation: int | None = None) -> None:
        """One CUDA runtime API call (``name`` as exported, e.g. ``cudaStreamSynchronize_v3020``)."""
        self._pids.add(pid)
        self._add("CUPTI_ACTIVITY_KIND_RUNTIME", (
            int(start), int(end), RUNTIME_EVENT_CLASS, global_tid(pid, tid),
            correlation or self.correlation(), self.string(name), 0, None))

    def memcpy(self, pid: int, device: int, stream: int, start: int, end: int, copy_kind: int = HTOD,
               nbytes: int = 1 << 20, correlation: int | None = None, src_kind: int = 0, dst_kind: int = 0) -> None:
        """One copy; ``copy_kind``: ENUM_CUDA_MEMCPY_OPER (1 HtoD, 2 DtoH, 8 DtoD);
        ``src_kind``/``dst_kind``: ENUM_CUDA_MEM_KIND as Nsight Systems numbers it (0 pageable, 1 pinned,
        2 device, 7 unknown)."""
        self._add("CUPTI_ACTIVITY_KIND_MEMCPY", (
            int(start), int(end), device, 1, None, stream, correlation or self.correlation(), global_pid(pid),
            nbytes, copy_kind, None, src_kind, dst_kind, device, 1, device, 1, None, None, None, 1))

    def memset(self, pid: int, device: int, stream: int, start: int, end: int, nbytes: int = 1 << 20,
               correlation: int | None = None) -> None:
        self._add("CUPTI_ACTIVITY_KIND_MEMSET", (
            int(start), int(end), device, 1, None, stream, correlation or self.correlation(), global_pid(pid),
            0, nbytes, None, 0))

    def nvtx(self, pid: int, tid: int, start: int, end: int, text: str, registered: bool = False) -> None:
        """One push/pop range; ``registered`` stores the text through StringIds (textId)."""
        text_col, text_id = (None, self.string(text)) if registered else (text, None)
        self._add("NVTX_EVENTS", (
            int(start), int(end), NVTX_PUSH_POP, None, None, None, text_col, global_tid(pid, tid), None, text_id,
            None, None, None, None, None, None, None, None, None, None))

    def gpu(self, gpu_id: int, name: str, uuid: str = "", bus: str = "", sm_count: int | None = None,
            cu_device: int | None = -1) -> None:
        """A GPU row (TARGET_INFO_GPU): ``uuid`` as exports write it (no ``GPU-`` prefix; ``MIG-...``
        for a MIG instance listed as a GPU), ``sm_count`` (``smCount``), ``cu_device`` (the CUDA
        ordinal, ``cuDevice``; -1: same as ``gpu_id``, None: NULL)."""
        cu = gpu_id if cu_device == -1 else cu_device
        self._add("TARGET_INFO_GPU", (0, gpu_id, name, bus, 1, None, None, sm_count, uuid, None, cu))

    def cuda_device(self, gpu_id: int | None, cuda_id: int, pid: int, uuid: str = "", sms: int | None = 132) -> None:
        """Map a process's CUDA ordinal to a GPU (TARGET_INFO_CUDA_DEVICE): ``gpu_id`` (nullable),
        ``uuid`` (``MIG-...`` on a MIG instance), ``sms``: the SMs the process sees
        (``numMultiprocessors``: a MIG instance's own)."""
        self._add("TARGET_INFO_CUDA_DEVICE", (gpu_id, cuda_id, pid, uuid, sms))

    def gpu_2020(self, device_id: int, name: str, bus: str = "") -> None:
        """A TARGET_INFO_GPU row in the Nsight Systems 2020.3-2021 layout (:data:`SCHEMA_2020`)."""
        self.ddl["TARGET_INFO_GPU"] = SCHEMA_2020["TARGET_INFO_GPU"]
        self._add("TARGET_INFO_GPU", (0x1000000000000, device_id, name, bus, 1))

    def cuda_gpu_2020(self, device_id: int, pid: int, name: str, bus: str = "<UNKNOWN_BUS_ID>", sms: int = 72) -> None:
        """A TARGET_INFO_CUDA_GPU row (Nsight Systems 2020.3-2021): process ``pid``'s CUDA device
        ``device_id`` is a ``name`` GPU on ``bus`` with ``sms`` SMs."""
        self.ddl["TARGET_INFO_CUDA_GPU"] = SCHEMA_2020["TARGET_INFO_CUDA_GPU"]
        self._add("TARGET_INFO_CUDA_GPU", (0x1000000000000, name, bus, 4026531840, 48601, 65536, 6291456, 32,
                                           1770000, 3, sms, 4, 32, 16, 65536, 49152, 1024, 1024, 1024, 64,
                                           2147483647, 65535, 65535, 7, 5, device_id, pid, 65536, 65536))

    def diagnostic(self, timestamp: int, text: str, severity: int = 2, pid: int | None = None,
                   timestamp_type: int = 1) -> None:
        """One DIAGNOSTIC_EVENT row; ``timestamp_type`` 1 is a target timestamp (the trace's clock), 2 a host one."""
        self._add("DIAGNOSTIC_EVENT", (int(timestamp), int(timestamp_type), 3, severity, text,
                                       global_pid(pid) if pid is not None else None))

    def overhead(self, pid: int, tid: int, start: int, end: int, kind: str = "OVERHEAD_CUPTI_BUFFER_FLUSH",
                 name: str = "CUPTI Buffer flush", table: str = "PROFILER_OVERHEAD") -> None:
        """One profiler-overhead row on thread ``tid`` of ``pid``: ``kind`` is an ENUM_CUPTI_OVERHEAD_TYPE
        name (:data:`OVERHEAD_TYPES`), ``name`` the function name (StringIds), ``table``
        ``PROFILER_OVERHEAD`` or ``CUPTI_ACTIVITY_KIND_OVERHEAD``."""
        type_id = next(i for i, (n, _) in OVERHEAD_TYPES.items() if n == kind)
        if table == "PROFILER_OVERHEAD":
            row = (int(start), int(end), global_tid(pid, tid), self.string(name), type_id)
        else:
            row = (int(start), int(end), OVERHEAD_EVENT_CLASS, global_tid(pid, tid), 0, self.string(name), type_id)
        self._add(table, row)
        self.rows["ENUM_CUPTI_OVERHEAD_TYPE"] = [(i, n, label) for i, (n, label) in OVERHEAD_TYPES.items()]

    def mem_kinds(self, names: dict | None = None) -> None:
        """The ENUM_CUDA_MEM_KIND table (id -> ``CUDA_MEMOPR_MEMORY_KIND_<NAME>``): ``names`` maps ids to
        the ``<NAME>`` part (``PINNED``); default Nsight Systems' own numbering (:data:`NSYS_MEM_KINDS`)."""
        names = NSYS_MEM_KINDS if names is None else names
        self.rows["ENUM_CUDA_MEM_KIND"] = [(int(i), f"CUDA_MEMOPR_MEMORY_KIND_{n}", n.replace("_", " ").title())
                                           for i, n in sorted(names.items())]

    def system_env(self, name: str, value: str, name_enum: int = 0) -> None:
        """A property of the capture host (TARGET_INFO_SYSTEM_ENV, as Nsight Systems 2026 writes it:
        ``SoftwareReleaseVersion`` is the kernel release, ``OsDescription`` the distribution)."""
        self._add("TARGET_INFO_SYSTEM_ENV", (GLOBAL_ID_BASE, "Local (CLI)", name, int(name_enum), value))

    def session(self, system_clock_ns: int, duration_ns: int | None = None,
                utc_epoch_ns: int = 1_779_000_000_000_000_000) -> None:
        """The capture's start (TARGET_INFO_SESSION_START_TIME, ``systemClockNs`` as in 2026 exports) and,
        with ``duration_ns``, its extent (ANALYSIS_DETAILS: startTime = ``system_clock_ns``, stopTime =
        startTime + duration). Rows may then lie on that clock or on one relative to the start (0..duration),
        as real exports do."""
        self.rows["TARGET_INFO_SESSION_START_TIME"] = [(int(utc_epoch_ns), "2026-05-26T07:58:50",
                                                        "2026-05-26T07:58:50", int(system_clock_ns))]
        if duration_ns is not None:
            self.rows["ANALYSIS_DETAILS"] = [(GLOBAL_ID_BASE, int(duration_ns), int(system_clock_ns),
                                              int(system_clock_ns) + int(duration_ns))]

    def close(self) -> str:
        """Write every table that has rows (plus StringIds, PROCESSES, metadata). Returns the path."""
        tmp = self.path + ".tmp"
        if os.path.exists(tmp):
            os.unlink(tmp)
        con = sqlite3.connect(tmp)
        try:
            self.rows["StringIds"] = [(i, s) for s, i in self.strings.items()]
            self.rows["PROCESSES"] = [(global_pid(p), p, "python3") for p in sorted(self._pids)]
            if self.meta_table:
                self.rows[self.meta_table] = list(self.meta.items())
            for table, rows in self.rows.items():
                if not rows:
                    continue
                ddl = self.ddl.get(table) or OPTIONAL_SCHEMA.get(table) or SCHEMA["META_DATA_EXPORT"]
                columns = ddl.split(", ")
                keep = [i for i, c in enumerate(columns) if c.split()[0] not in self.drop_columns.get(table, ())]
                con.execute(f"CREATE TABLE {table} ({', '.join(columns[i] for i in keep)})")
                marks = ",".join("?" * len(keep))
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", [tuple(r[i] for i in keep) for r in rows])
            con.commit()
        finally:
            con.close()
        os.replace(tmp, self.path)
        return self.path
