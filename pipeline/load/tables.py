"""The Nsight Systems export's tables, and :class:`Schema`: what one export really has.

Tables appear only when they hold data and columns change between Nsight Systems
versions, so every table and column is looked up by its exact name in what the file
actually has (``sqlite_master`` and ``PRAGMA table_info``), never by substring.
"""
from __future__ import annotations

import sqlite3

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
#: One row per CUDA graph execution traced as a whole (``--cuda-graph-trace=graph``): :mod:`pipeline.load.graphs`.
GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
NVTX_TABLE = "NVTX_EVENTS"
GPU_TABLE = "TARGET_INFO_GPU"
CUDA_DEVICE_TABLE = "TARGET_INFO_CUDA_DEVICE"
#: Nsight Systems 2020.3-2021: per process and CUDA device, its name, PCI bus id and SM count.
CUDA_GPU_TABLE = "TARGET_INFO_CUDA_GPU"
DIAGNOSTIC_TABLE = "DIAGNOSTIC_EVENT"
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
STRING_TABLE = "StringIds"
#: Kernel name columns in order of preference (short names read best in a roster).
KERNEL_NAME_COLUMNS = ("shortName", "demangledName", "mangledName", "name")
#: NVTX event types that are ranges: NvtxPushPopRange (59), NvtxStartEndRange (60).
NVTX_RANGE_TYPES = (59, 60)
CONTEXT_TABLE = "TARGET_INFO_CUDA_CONTEXT_INFO"
#: CUPTI's overhead records (driver, CUPTI and CUDA overheads, typed by ENUM_CUPTI_OVERHEAD_TYPE).
CUPTI_OVERHEAD_TABLE = "CUPTI_ACTIVITY_KIND_OVERHEAD"
#: Nsight Systems' own overhead (initialisation, buffer flushes, TLS allocation, instrumentation).
PROFILER_OVERHEAD_TABLE = "PROFILER_OVERHEAD"
OVERHEAD_TYPE_TABLE = "ENUM_CUPTI_OVERHEAD_TYPE"
#: Memory kinds of a copy's two sides (``srcKind``, ``dstKind``): id -> name (``CUDA_MEMOPR_MEMORY_KIND_PINNED``).
MEM_KIND_TABLE = "ENUM_CUDA_MEM_KIND"
#: The capture's start: ``systemClockNs`` (2024+ exports) on the clock of the rows' timestamps.
SESSION_START_TABLE = "TARGET_INFO_SESSION_START_TIME"
#: The capture host's properties (name, value): OsDescription, SoftwareReleaseVersion (the kernel release), ...
SYSTEM_ENV_TABLE = "TARGET_INFO_SYSTEM_ENV"
#: The capture's extent: ``startTime``, ``stopTime``, ``duration`` (ns).
ANALYSIS_DETAILS_TABLE = "ANALYSIS_DETAILS"


class Schema:
    """What tables and columns one export really has (exact names).

    ``con`` (Python sqlite3) answers the small questions; the tables themselves are read
    through ADBC on the same read-only ``uri`` (:func:`read_tables`, :func:`read_frame`).
    ``shown``: the report's name in messages (default: the file ``uri`` names). ``deadline``: the
    time bound of reading it (a :class:`~pipeline.load.limits.Deadline`; None: none), installed on
    ``con`` and kept for the bulk reads.

    A view is never read: Nsight Systems writes tables only, and a view in place of one can expand
    itself or recurse forever. Asking about a table that is a view (:meth:`has`, :meth:`columns`)
    raises :class:`~pipeline.model.ProfileError` naming it (table names are matched as SQLite
    matches them, ignoring case).
    """

    def __init__(self, con: sqlite3.Connection, uri: str | None = None, shown: str | None = None, deadline=None):
        self.con = con
        self.uri = uri
        self.shown = shown or uri or "export"
        self.deadline = deadline
        if deadline is not None:
            deadline.install(con)
        rows = con.execute("SELECT name, type FROM sqlite_master WHERE type IN ('table','view')").fetchall()
        self.tables = {r[0] for r in rows}
        self.views = {r[0].lower() for r in rows if r[1] == "view"}
        self._columns: dict[str, dict[str, str]] = {}

    def _refuse_view(self, table: str) -> None:
        if table.lower() in self.views:
            from ..model import ProfileError  # imports pandas: only when refusing

            raise ProfileError(f"{self.shown}: {table} is a view, not a table as Nsight Systems writes it (a view "
                               "can expand itself or recurse without end, so gpu-idle never reads one); export the "
                               "report again with nsys export")

    def has(self, table: str) -> bool:
        """True when the export has ``table``. Raises ProfileError when it is a view."""
        self._refuse_view(table)
        return table in self.tables

    def close(self) -> None:
        self.con.close()

    def columns(self, table: str) -> dict[str, str]:
        """Column name -> declared type (upper case) for ``table``; {} if absent. Raises ProfileError
        when it is a view."""
        self._refuse_view(table)
        if table not in self.tables:
            return {}
        if table not in self._columns:
            info = self.con.execute(f'PRAGMA table_info("{table}")').fetchall()
            self._columns[table] = {r[1]: (r[2] or "").upper() for r in info}
        return self._columns[table]

    def first_column(self, table: str, candidates) -> str | None:
        cols = self.columns(table)
        return next((c for c in candidates if c in cols), None)
