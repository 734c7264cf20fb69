"""The types every stage speaks, and nothing else: a loaded report, one GPU's trace, a
GPU's result, a report that failed, category names and warning codes.

Stages import from here instead of from each other (the loader, the analysis, the engine
and the drivers all know a :class:`Report`; none needs another's module for it). Times are
int64 nanoseconds on the report's own clock throughout.
"""
from __future__ import annotations

import enum
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .arrays import is_sorted, row_groups
from .frames import codes_of
from .categories import application, caveats
from .code_keys import result_code

#: Per-gap categories in the order of docs/definitions.md#categories (first match wins), then the per-GPU ``launch``
#: (all from the registry, :data:`pipeline.categories.REGISTRY`).
GAP_CATEGORIES = tuple(c.name for c in application() if c.per_gap)
#: Every category of the fleet table's ``cat_*`` columns, in the order of docs/definitions.md#categories.
CATEGORIES = tuple(c.name for c in application())
#: Causes of idle that are not the application's (docs/definitions.md#caveats): tested before every category,
#: never priced as the application's fixable idle, never ``main_category`` or ``actionable``; shown
#: apart in their own ``cat_*`` columns with their cost. ``profiler``: Nsight Systems' own overhead
#: covers the gap; ``untraced``: the trace lost the records there (launches without kernel records,
#: dropped events).
CAVEATS = tuple(c.name for c in caveats())

#: ENUM_CUDA_MEMCPY_OPER: a copy's direction id (the ``copy_kind`` column of :attr:`Report.copies`)
#: -> its name, for every input format (an Nsight export's ``copyKind``, a PyTorch profiler trace's
#: ``Memcpy HtoD (...)`` name); 0: a memcpy of unknown direction, -1: a memset.
COPY_DIRECTIONS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
                   9: "HtoH", 10: "PtoP"}
#: ENUM_CUDA_MEM_KIND as Nsight Systems exports write it (2020-2026): the ids of the ``src_kind`` and
#: ``dst_kind`` columns of :attr:`Report.copies` whatever the input format. The Nsight loader translates
#: an export's own ids by their names (:func:`pipeline.load.report.mem_kind_ids`), the PyTorch profiler
#: loader the kind names of its memcpy events (:data:`pipeline.load.kineto.KINETO_MEMORY_KINDS`);
#: consumers read these ids only (:data:`HOST_MEMORY`).
MEM_KINDS = {"PAGEABLE": 0, "PINNED": 1, "DEVICE": 2, "ARRAY": 3, "MANAGED": 4, "DEVICE_STATIC": 5,
             "MANAGED_STATIC": 6, "UNKNOWN": 7}
#: The host memory of a copy's host side, for people, by :data:`MEM_KINDS` id (any other id: ``unknown``).
HOST_MEMORY = {MEM_KINDS["PAGEABLE"]: "pageable", MEM_KINDS["PINNED"]: "pinned"}


class ProfileError(Exception):
    """A report cannot be analysed. The message names the file and the cause."""


@dataclass(frozen=True)
class Failure:
    """A report (or one GPU of it) that could not be analysed; ``message`` names the file and the cause.

    Returned (not raised) by the engine's tasks for expected failures (bad input), so Dask
    neither retries them nor logs a traceback; the reduce turns it into an error row.
    """

    message: str


class WarningCode(str, enum.Enum):
    """What a row warning is about. The status of a row comes from these codes, never from
    the warning's wording (:func:`row_status`)."""

    #: kernel rows the loader dropped (end < start, no timestamps): the GPU's data is incomplete.
    DROPPED_KERNEL_ROWS = "dropped-kernel-rows"
    #: a DIAGNOSTIC_EVENT saying Nsight Systems lost or dropped events: the trace is incomplete.
    LOST_EVENTS = "lost-events"
    #: any other DIAGNOSTIC_EVENT warning or error, quoted.
    DIAGNOSTIC = "diagnostic"
    #: GPUs the export lists that ran no kernel (not traced or not used): no row for them.
    GPUS_WITHOUT_KERNELS = "gpus-without-kernels"
    #: an older schema without process columns: processes were inferred from launches or streams.
    INFERRED_PROCESSES = "inferred-processes"
    #: the GPU model is not on the rate card: left unpriced (``cost.unlisted: unpriced``, the default; the warning
    #: says how to price it) or priced as the default model (``cost.unlisted: default``).
    MODEL_NOT_ON_RATE_CARD = "model-not-on-rate-card"
    #: ``gpu-idle report --config`` priced the table again with another rate card but not this GPU: the table does
    #: not hold what pricing it again needs (a MIG instance's share, why it names no model); its dollars are its
    #: run's (the warning says why). A caveat, not partial.
    NOT_REPRICED = "not-repriced"
    #: a MIG instance whose SM count (or its board's) the export does not give: priced as the whole board.
    MIG_SHARE_UNKNOWN = "mig-share-unknown"
    #: processes see fewer SMs than their board but the export names no MIG instance: they cannot
    #: be told apart (their kernels are unioned) and the row is priced as the whole board.
    MIG_UNRESOLVED = "mig-unresolved"
    #: exact duplicate rows (every column equal) the loader counted once.
    DUPLICATE_ROWS = "duplicate-rows"
    #: runtime, copy, NVTX or overhead rows the loader dropped (end < start, times far outside the capture).
    DROPPED_ROWS = "dropped-rows"
    #: runtime, copy or overhead rows the loader dropped as timed far outside the capture, every one of them
    #: wholly outside the kept kernels' time: no figure could rest on them; a caveat, not partial.
    DROPPED_STRAY_ROWS = "dropped-stray-rows"
    #: CUDA launches of the GPU's processes without a kernel record: the trace lost them (``untraced``).
    UNTRACED_LAUNCHES = "untraced-launches"
    #: Nsight Systems' own overhead covers device gaps (``profiler``): a caveat, the trace is complete.
    PROFILER_OVERHEAD = "profiler-overhead"
    #: the GPU's model is not named: the export names no GPU, or the trace names its devices' models
    #: but not this device's and the names it gives differ. The row is priced as the default model
    #: (``rate_assumed``) or left unpriced when the input says it is not an NVIDIA GPU (a ROCm/HIP trace;
    #: docs/definitions.md#cost); a caveat, not partial.
    GPU_MODEL_UNRESOLVED = "gpu-model-unresolved"
    #: the capture range the export states (ANALYSIS_DETAILS, TARGET_INFO_SESSION_START_TIME) does not hold
    #: the export's own rows: the rows are trusted (none dropped for it), the metadata is not.
    CAPTURE_DISAGREES = "capture-disagrees"
    #: the trace says its job ran on one rank yet holds kernels named like collectives (NCCL...): they
    #: were not counted as communication (no ``comm`` gap, no ``comm_ns``); a caveat, not partial.
    ONE_RANK_COLLECTIVES = "one-rank-collectives"
    #: the job's kind is unknown and the window leaves out more than ``window.max_left_out_idle_pct`` of
    #: the capture's idle (docs/definitions.md#job-kind): the dollars may miss a server's cost.
    WINDOW_LEAVES_OUT_IDLE = "window-leaves-out-idle"
    #: CUDA graphs were traced as a whole (``--cuda-graph-trace=graph``): each execution counts as busy for
    #: its whole extent, so the gaps between its nodes cannot be seen and device idle is a lower bound there
    #: (docs/definitions.md#cuda-graphs); the text gives how many ran in the window and the time they cover.
    #: A caveat, not partial: the trace is complete at the granularity it was asked for.
    GRAPHS_TRACED_WHOLE = "graphs-traced-whole"
    #: the GPU's copies and memsets outside the window take longer than the window itself (one kernel amid
    #: thousands of unified-memory migrations): the figures are the window's, most of the GPU's work is not
    #: in it (``copies_outside_count``, ``copies_outside_ns``; docs/definitions.md#copies-outside-the-window).
    #: A caveat, not partial: no row was lost.
    COPIES_OUTSIDE_WINDOW = "copies-outside-window"
    #: the GPU's processes captured CUDA/HIP graphs (``cudaStreamBeginCapture`` … ``EndCapture``) while its
    #: kernels ran: the launches inside were recorded, not run (not lost), and the time up to the last
    #: capture's end is start-up (``graph_capture_ns``, docs/definitions.md#graph-capture); a caveat, not partial.
    GRAPH_CAPTURE = "graph-capture"
    #: no kernel of the GPU runs after its last graph capture ends: the window is start-up only (capture and
    #: warm-up), not a steady state (``startup_only``, tier ``toy``; docs/definitions.md#graph-capture).
    STARTUP_ONLY = "startup-only"
    #: every kernel in the window lasts 0 ns: the trace records no kernel time, so the GPU would read 100 % idle
    #: (docs/definitions.md#device-level-idle); its idle is not measured.
    ZERO_DURATION_KERNELS = "zero-duration-kernels"
    #: ``--trim`` reaches before the GPU's first kernel or past its last one: that part of the window is no time
    #: the trace measured the GPU in, so the idle there is not measured and W is cut to the kernels
    #: (docs/definitions.md#the-analysis-window);
    #: the tier is at most ``low`` (docs/definitions.md#confidence-tiers).
    TRIM_OUTSIDE_KERNELS = "trim-outside-kernels"


#: Codes that make a row ``partial``: the numbers rest on an incomplete or impossible trace, or on
#: input that cannot say which GPU the kernels ran on or what share of a board they rented.
PARTIAL_CODES = frozenset({WarningCode.DROPPED_KERNEL_ROWS, WarningCode.LOST_EVENTS, WarningCode.MIG_SHARE_UNKNOWN,
                           WarningCode.MIG_UNRESOLVED, WarningCode.DUPLICATE_ROWS, WarningCode.DROPPED_ROWS,
                           WarningCode.UNTRACED_LAUNCHES, WarningCode.WINDOW_LEAVES_OUT_IDLE,
                           WarningCode.STARTUP_ONLY, WarningCode.ZERO_DURATION_KERNELS,
                           WarningCode.TRIM_OUTSIDE_KERNELS})


@dataclass(frozen=True)
class RowWarning:
    """One warning of a fleet row: its ``code`` (:class:`WarningCode`) and the ``text`` people read.
    ``pids``: the processes whose rows it is about (a loader warning then goes only to the GPUs
    they drive); None: the whole report (every GPU)."""

    code: WarningCode
    text: str
    pids: tuple | None = None


#: Why a GPU's model is blank when the export lists no GPU at all (quoted in ``rate_source``).
NO_GPU_NAMED = "export names no GPU"

#: How ``rate_source`` names the default model when it was assumed (``(default model: …``): what tells a
#: fleet table written before the ``rate_assumed`` column which rows were (docs/definitions.md#cost).
ASSUMED = "default model:"

#: Prefix of the per-GPU warning text that quotes a DIAGNOSTIC_EVENT text.
DIAGNOSTIC_PREFIX = "DIAGNOSTIC_EVENT: "


def beside_bound(value: float, bound: float, decimals: int = 2) -> str:
    """``value`` with ``decimals`` decimals, rounded so that it reads on the side of ``bound`` it is on: a figure said
    to be under a bound never prints as the bound (1.996 under 2: ``1.99``, not ``2.00``), nor one over it
    (50.001 over 50 at 2 decimals: ``50.01``); any other value rounds as usual (docs/outputs.md)."""
    value, bound, scale = float(value), float(bound), 10 ** int(decimals)
    shown = round(value, decimals)
    if value < bound <= shown:
        value = math.floor(value * scale) / scale
    elif value > bound >= shown:
        value = math.ceil(value * scale) / scale
    return f"{value:.{decimals}f}"


def row_status(warnings) -> str:
    """``partial`` when any of ``warnings`` (:class:`RowWarning`) has a code in
    :data:`PARTIAL_CODES` (rows the loader dropped or counted once, events or kernel records
    Nsight Systems lost), else ``ok``."""
    return "partial" if any(w.code in PARTIAL_CODES for w in warnings) else "ok"


#: Columns of :attr:`Report.overhead` and :attr:`Report.untraced` (int64 but ``kind``, ``name``, ``own``).
OVERHEAD_COLUMNS = ("start", "end", "pid", "kind", "own")
UNTRACED_COLUMNS = ("kind", "pid", "correlation_id", "name", "call_start", "call_end", "start", "end")


def _empty(columns, text=(), flags=()) -> pd.DataFrame:
    """An empty frame of ``columns``: int64, but object for ``text`` and bool for ``flags``. Built from
    numpy arrays (typed Series cost ~10x more: these frames are made once or more per report)."""
    return pd.DataFrame({c: np.zeros(0, dtype=object if c in text else bool if c in flags else np.int64)
                         for c in columns}, copy=False)


#: The empty frames, built once; :func:`no_overhead` and :func:`no_untraced` hand out copies (a
#: caller may add columns to its frame).
_NO_OVERHEAD = _empty(OVERHEAD_COLUMNS, text=("kind",), flags=("own",))
_NO_UNTRACED = _empty(UNTRACED_COLUMNS, text=("kind", "name"))


#: The columns every loader gives each frame of a :class:`Report` (its docstring says what they hold), and
#: the columns some give (:data:`OPTIONAL_FRAME_COLUMNS`); a frame may hold more. Each column's kind follows from
#: its name: text (:data:`TEXT_COLUMNS`: object, str or categorical), flag (:data:`FLAG_COLUMNS`: bool), else
#: an integer (signed). :func:`frame_problem` checks a frame against them (a columnar cache entry on read).
FRAME_COLUMNS = {
    "kernels": ("start", "end", "pid", "device_id", "stream_id", "correlation_id", "name", "gpu_key"),
    "runtime": ("start", "end", "pid", "tid", "correlation_id", "name"),
    "copies": ("start", "end", "pid", "device_id", "stream_id", "kind", "copy_kind", "bytes", "src_kind", "dst_kind"),
    "nvtx": ("start", "end", "pid", "tid", "text"),
    "devices": ("pid", "device_id", "gpu_key", "gpu_model", "uuid", "bus", "mig", "sms", "board_sms", "model_note"),
    "overhead": OVERHEAD_COLUMNS,
    "untraced": UNTRACED_COLUMNS,
}
OPTIONAL_FRAME_COLUMNS = {"kernels": ("graph",), "copies": ("gpu_key",)}
TEXT_COLUMNS = frozenset({"name", "gpu_key", "kind", "text", "gpu_model", "uuid", "bus", "model_note"})
FLAG_COLUMNS = frozenset({"graph", "mig", "own"})


def _column_kind(dtype) -> str:
    """``text``, ``flag``, ``integer`` or ``other`` (a float, a date, ...) of a pandas column's dtype."""
    if isinstance(dtype, pd.CategoricalDtype):
        dtype = dtype.categories.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return "flag"
    if pd.api.types.is_integer_dtype(dtype) and getattr(dtype, "kind", "") == "i":
        return "integer"
    if pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype):
        return "text"
    return "other"


def frame_problem(name: str, frame) -> str | None:
    """What makes ``frame`` not a :class:`Report` frame ``name`` (:data:`FRAME_COLUMNS`): a missing column or a
    column of another kind (``"column end is text, not integer"``), or None when it is one."""
    if not isinstance(frame, pd.DataFrame):
        return f"is a {type(frame).__name__}, not a table"
    for column in FRAME_COLUMNS[name] + OPTIONAL_FRAME_COLUMNS.get(name, ()):
        if column not in frame.columns:
            if column in FRAME_COLUMNS[name]:
                return f"has no column {column}"
            continue
        want = "text" if column in TEXT_COLUMNS else "flag" if column in FLAG_COLUMNS else "integer"
        got = _column_kind(frame[column].dtype)
        if got != want:
            return f"column {column} is {got} ({frame[column].dtype}), not {want}"
    return None


def no_overhead() -> pd.DataFrame:
    """An empty :attr:`Report.overhead` frame (an export without overhead tables)."""
    return _NO_OVERHEAD.copy()


def no_untraced() -> pd.DataFrame:
    """An empty :attr:`Report.untraced` frame (nothing lost)."""
    return _NO_UNTRACED.copy()


#: Integer columns whose values span fewer than this many numbers (process ids of one capture) are coded as
#: the value less the smallest (:func:`_value_codes`): no hash table as large as the column.
CODED_RANGE = 1 << 15


def _value_codes(values: np.ndarray) -> tuple[np.ndarray, list]:
    """``(codes, seen)`` of a column's values: ``seen[codes[i]] == values[i]`` (``seen``: Python values). Integers
    spanning fewer than :data:`CODED_RANGE` numbers are coded as ``value - min`` (two passes, a small int code;
    ``seen`` may name values no row has), others by :func:`pandas.factorize`, whose hash table is as large as the
    column (~50 ms of page faults at 2M rows for a handful of process ids)."""
    if values.size and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        if hi - lo < CODED_RANGE:
            return (values - values.dtype.type(lo)).astype(np.int16), list(range(lo, hi + 1))
    codes, seen = pd.factorize(values)
    return codes, seen.tolist()


@dataclass
class Report:
    """One export, loaded. All times are int64 ns on the report's own clock.

    Frames (one row per event):
      ``kernels``: start, end, pid, device_id, stream_id, correlation_id, name, gpu_key, and in Nsight
      exports ``graph`` (True: a CUDA graph execution traced as a whole, one row named ``graph exec <id>``:
      :mod:`pipeline.load.graphs`); grouped by GPU key (the export's row order within a GPU)
      ``runtime``: start, end, pid, tid, correlation_id, name (normalised API name), grouped by process (the
      processes that share a GPU in one group), each group's calls sorted by start (stable): a GPU's calls are
      one run (:func:`pipeline.load.report.calls_by_process`)
      ``copies``: start, end, pid, device_id, stream_id, kind ('memcpy'|'memset'),
      copy_kind (ENUM_CUDA_MEMCPY_OPER id, -1 for memset), bytes, src_kind, dst_kind
      (memory kinds of the two sides as Nsight Systems' ENUM_CUDA_MEM_KIND numbers them: 0 pageable,
      1 pinned, 2 device, 7 unknown (:data:`MEM_KINDS`, for every input format: an export numbering
      them otherwise is translated by the names in its own table, a PyTorch profiler trace's kind
      names by :data:`pipeline.load.kineto.KINETO_MEMORY_KINDS`); -1 for memset or when the export
      lacks the column)
      ``nvtx``: start, end, pid, tid, text (ranges only)
      ``devices``: pid, device_id, gpu_key, gpu_model, uuid, bus, mig, sms, board_sms, model_note
      (:func:`pipeline.load.gpus.load_devices`)
      ``overhead``: Nsight Systems / CUPTI overhead rows: start, end, pid, kind (ENUM_CUPTI_OVERHEAD_TYPE
      name), own (True for PROFILER_OVERHEAD rows: the profiler's own work by definition)
      ``untraced``: where the trace lost records (:mod:`pipeline.load.caveats`): kind ('launch' |
      'lost-events'), pid (-1: any process), correlation_id, name, call_start, call_end, and
      start, end: when the lost work may have run
    ``meta``: export metadata (name -> value); ``diagnostics``: warning/error
    texts from DIAGNOSTIC_EVENT with the process that said them
    (:func:`pipeline.load.diagnostics.load_diagnostics`); ``warnings``: what the loader itself noticed
    (:class:`RowWarning`, each with its code).
    ``capture_start_ns``: where the Nsight Systems timeline puts its zero, on the rows' clock (ns;
    None when unknown), and ``capture_start_source`` where that comes from
    (:func:`pipeline.load.integrity.capture_start`; for a PyTorch profiler trace the start of its
    profiler span, else its earliest event: :func:`pipeline.load.kineto.capture_start`).
    ``kernel_aliases``: kernel name (as in ``kernels``) -> the export's other names of the kernels so
    named (an Nsight export's ``demangledName``/``mangledName`` beside the ``shortName`` it keeps:
    :func:`pipeline.load.kernel_names.aliases_of`; {} when it has one name column, and for PyTorch traces).
    ``sources``: the cache entries the report was read from (:func:`pipeline.checksums.source`
    dicts: the columnar cache entry, the export cache's export), for its stored result to record.
    """

    path: str
    kernels: pd.DataFrame
    runtime: pd.DataFrame
    copies: pd.DataFrame
    nvtx: pd.DataFrame
    devices: pd.DataFrame
    overhead: pd.DataFrame = field(default_factory=no_overhead)
    untraced: pd.DataFrame = field(default_factory=no_untraced)
    meta: dict = field(default_factory=dict)
    diagnostics: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    capture_start_ns: int | None = None
    capture_start_source: str = ""
    sources: list = field(default_factory=list)
    kernel_aliases: dict = field(default_factory=dict)
    _groups: dict = field(default_factory=dict, repr=False, compare=False)

    def groups_of(self, frame: str, column: str) -> dict:
        """The rows of the frame ``frame`` (``"kernels"``, ``"runtime"``, ``"copies"``...) grouped by
        ``column``: value (pids as ints, GPU keys as text) -> its rows: a ``slice`` when the frame is in the
        column's order (its codes never decrease: the loaders group kernels by GPU key and runtime calls by
        process), so that each value's rows are one run (no array), else their positions, ascending
        (:func:`row_groups`). Built once per report and column, so each GPU's cut costs its own rows, not a pass
        over every row: a report of thousands of GPUs is cut in time linear in its rows, not in rows x GPUs."""
        groups = self._groups.get((frame, column))
        if groups is None:
            col = getattr(self, frame)[column]
            categorical = isinstance(col.dtype, pd.CategoricalDtype)
            if categorical:
                codes, named = codes_of(col), col.cat.categories.tolist().__getitem__
                in_order = is_sorted(codes)
            else:  # integers in order: their runs, named as they are; other values coded first
                codes, named = col.to_numpy(), int
                in_order = codes.dtype.kind in "iu" and is_sorted(codes)
                if not in_order:
                    codes, seen = _value_codes(codes)
                    named, in_order = seen.__getitem__, is_sorted(codes)
            if codes.size and in_order:
                bounds = [0, *(np.flatnonzero(codes[1:] != codes[:-1]) + 1).tolist(), codes.size]
                runs = [(codes[a], slice(a, b)) for a, b in zip(bounds, bounds[1:])]
            else:
                runs = [(codes[g[0]], g) for g in row_groups(codes)]
            groups = {named(code): rows for code, rows in runs if not categorical or code >= 0}  # -1: no category
            self._groups[(frame, column)] = groups
        return groups

    def rows_of(self, frame: str, column: str, values) -> np.ndarray | slice:
        """The rows of the frame ``frame`` whose ``column`` is one of ``values``, in the frame's order, from
        :meth:`groups_of`: the ``slice`` of a single value's run, else row positions, ascending."""
        groups = self.groups_of(frame, column)
        parts = [groups[v] for v in dict.fromkeys(values) if v in groups]
        if not parts:
            return np.zeros(0, dtype=np.int64)
        if len(parts) == 1:
            return parts[0]
        return np.sort(np.concatenate([np.arange(p.start, p.stop) if isinstance(p, slice) else p for p in parts]))

    def runtime_rows(self, pids) -> np.ndarray | slice:
        """The rows of ``runtime`` holding the calls of ``pids`` (:meth:`rows_of`)."""
        return self.rows_of("runtime", "pid", [int(p) for p in pids])

    def gpu_keys(self) -> list[str]:
        """Sorted keys of every GPU that ran at least one kernel."""
        return sorted(self.devices["gpu_key"].unique().tolist())


@dataclass
class GpuTrace:
    """Everything one GPU (a physical GPU or a MIG instance) needs for analysis, as plain arrays (ns).

    ``kernels``: frame with start, end, pid, stream_id, correlation_id, name, in the
    export's row order (:func:`pipeline.analysis.gaps.kernels_in_window` puts them in per-stream
    order).
    ``copies``: frame of this GPU's memcpy/memset rows (start, end, kind, copy_kind, bytes).
    ``runtime``: CUDA runtime API calls of the processes that drive this GPU
    (start, end, pid, tid, name) sorted by start.
    ``nvtx``: NVTX ranges of those processes.
    ``overhead``, ``untraced``: the rows of :attr:`Report.overhead` and :attr:`Report.untraced` of
    those processes (``untraced`` also those of no process, pid -1).
    ``warnings``: the report's :class:`RowWarning`, one per DIAGNOSTIC_EVENT text, and this GPU's own.
    ``gpu_model``: "" when the export does not say (``model_note`` says why, for ``rate_source``).
    ``mig``: a MIG instance; ``sms``: the SMs its processes see, ``board_sms``: its board's (0: unknown).
    ``capture_start_ns``, ``capture_start_source``: the report's timeline zero (:attr:`Report.capture_start_ns`).
    ``world_size``: the ranks the report says its job ran on (:func:`world_size`; 0: it does not say).
    ``kernel_aliases``: the report's (:attr:`Report.kernel_aliases`), for the collective matcher.
    ``graph_trace_mode``: the ``--cuda-graph-trace`` mode the capture states (``meta[GRAPH_TRACE_MODE]``; "" when
    it does not say).
    ``not_nvidia``: why the input says this GPU is not an NVIDIA GPU (a ROCm/HIP trace's ``meta["not_nvidia"]``;
    "" when it does not say), so that naming no model does not price it as the default (NVIDIA) model.
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
    model_note: str = ""
    mig: bool = False
    sms: int = 0
    board_sms: int = 0
    overhead: pd.DataFrame = field(default_factory=no_overhead)
    untraced: pd.DataFrame = field(default_factory=no_untraced)
    capture_start_ns: int | None = None
    capture_start_source: str = ""
    world_size: int = 0
    kernel_aliases: dict = field(default_factory=dict)
    graph_trace_mode: str = ""
    not_nvidia: str = ""


class RankCount(int):
    """A job's number of ranks (an ``int``; 0: unknown) and ``source``, where it was read, as people
    read it (``"the trace's distributedInfo.world_size"``, ``"WORLD_SIZE=1 in the capture's process
    environment"``; "" when unknown)."""

    source: str

    def __new__(cls, value: int = 0, source: str = ""):
        self = super().__new__(cls, value)
        self.source = source
        return self


#: A rank count as metadata text gives it: 1 to 9 ASCII decimal digits (``str.isdigit`` also accepts
#: ``²`` and other Unicode digits ``int()`` refuses; more digits are no plausible job size).
_RANK_COUNT_TEXT = re.compile(r"[0-9]{1,9}")


def rank_count(text) -> int:
    """The positive number of ranks ``text`` (a metadata string, surrounding blanks ignored) spells
    in ASCII decimal digits (:data:`_RANK_COUNT_TEXT`), else 0 (anything else: ``²``, ``1.0``,
    ``-1``, ``True``, a non-string, a number of ten digits or more). Never raises: a metadata hint
    never fails a report."""
    if not isinstance(text, str) or not _RANK_COUNT_TEXT.fullmatch(text.strip()):
        return 0
    return int(text.strip())


#: ``meta`` key of the ``--cuda-graph-trace`` mode an Nsight capture states (``graph``, ``node``; absent when it
#: does not say: :func:`pipeline.load.graphs.graph_trace_mode`).
GRAPH_TRACE_MODE = "cuda_graph_trace"

#: ``meta`` key naming where ``meta["world_size"]`` was read (Nsight exports: :mod:`pipeline.load.ranks`).
WORLD_SIZE_SOURCE = "world_size_source"


def world_size(meta: dict) -> RankCount:
    """The ranks a report's ``meta`` says its job ran on (:func:`rank_count` of ``meta["world_size"]``,
    text: a PyTorch profiler trace's ``distributedInfo.world_size``, or what an Nsight capture's launch
    says, :mod:`pipeline.load.ranks`), with its source (``meta[WORLD_SIZE_SOURCE]``; a PyTorch trace's
    ``distributedInfo``). 0 when it does not say or the value is not a positive ASCII integer."""
    n = rank_count(meta.get("world_size", ""))
    if not n:
        return RankCount(0)
    source = meta.get(WORLD_SIZE_SOURCE) or ("the trace's distributedInfo.world_size"
                                             if meta.get("format") == "kineto" else "the report's metadata")
    return RankCount(n, str(source))


@dataclass
class GpuResult:
    """``row``: one fleet-table row (dict of scalars). ``roster``: the longest per-stream gaps
    (which queue broke: for fixing work). ``device_roster``: the longest device-level gaps
    (no kernel on any stream: true idle; pid and stream_id are -1). ``timeline``: the
    compact picture of the window for plots (:func:`pipeline.analysis.analyse.timeline`).
    ``plan``: the GPU's iterations before its job's GPUs agreed
    (:class:`pipeline.analysis.iterations.IterationPlan`; None when unknown, e.g. an error row
    of a GPU that could not be planned): kept with the result so that the GPUs of a job spread
    over several reports can agree later. ``sources``: the cache entries the GPU's report was read from
    (:attr:`Report.sources`), recorded with its stored result. ``code``: the
    digest of the code that computed it (:func:`pipeline.code_keys.result_code` of the process that made it, a
    Dask worker's own): a result is stored only under a key of that same code (:mod:`pipeline.store.results`).
    ``collective_calls``: the GPU's collective calls in compact form
    (:func:`pipeline.analysis.collwait.calls_json`) when its peers are in other reports, for the job's step across
    files (:mod:`pipeline.fleet.crosswait`); None otherwise."""

    row: dict
    roster: list = field(default_factory=list)
    device_roster: list = field(default_factory=list)
    timeline: dict = field(default_factory=dict)
    plan: object = None
    sources: list = field(default_factory=list)
    code: str = field(default_factory=result_code)
    collective_calls: dict | None = None
