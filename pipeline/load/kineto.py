"""Load one PyTorch profiler (Kineto) Chrome-trace JSON into the same :class:`~pipeline.model.Report`
the Nsight Systems loader makes, so every later stage (windows, gaps, attribution, categories,
cost, fleet, records, report) runs unchanged.

What is read (``ph: "X"`` complete events; anything else is skipped):

* GPU work: ``cat`` ``kernel`` / ``Kernel`` (kernels), ``gpu_memcpy`` / ``Memcpy`` and
  ``gpu_memset`` / ``Memset`` (copy-engine work). ``args.device`` is the device (else the event's
  ``pid``, which Kineto sets to the device index), ``args.stream`` the stream (else ``tid``),
  ``args.correlation`` the correlation id, ``args.bytes`` the size. A memcpy's direction and memory
  kinds come from its name, ``Memcpy HtoD (Pinned -> Device)`` (:func:`memcpy_kinds`), as the ids an
  Nsight export gives them (:data:`~pipeline.model.MEM_KINDS`: 0 pageable, 1 pinned, 2 device).
* CPU side: ``cuda_runtime`` / ``Runtime`` / ``cuda_driver`` events (ROCm traces use the same
  categories with HIP names, ``hipLaunchKernel``) with ``args.correlation``: the runtime table.
  Each GPU event's process is the process of the runtime call with its correlation id; GPU events
  without a CPU launch event (sampled traces, calls before the profiler started) belong to the
  trace's process (the one that made the most runtime calls) and stay in the GPU's busy time.
* NVTX: ``user_annotation`` ranges on CPU threads (``ProfilerStep#N``, ``nccl:all_reduce``,
  ``record_function`` labels) and ``ProfilerStep#N`` ``cpu_op`` events (older traces): the window
  rules find iterations among them as among NVTX ranges.
* Identity: ``deviceProperties`` (``id``, ``name``, ``numSms``) names each device's model (which the
  rate card prices); ``distributedInfo`` gives the rank and world size (``meta``); there is no uuid
  or bus id, so a GPU's key is ``pid<P>/dev<D>`` as for Nsight exports without GPU tables.
* Time: :mod:`.kineto_time` (decimal text -> exact int ns, never a float). With
  ``baseTimeNanoseconds`` every time is that base plus ``ts``; the report's clock is then Unix-epoch
  ns, as it already is for traces whose ``ts`` are epoch microseconds. The timeline's zero (the
  report's ``capture_start_ns``, from which the GPU pages count seconds) is the start of the profiler's
  own ``Trace`` span, else the earliest event (:func:`capture_start`).

Memory: the JSON text is held once (a gzip file is inflated into one buffer of its uncompressed
size), the event list is split into raw slices of it (``msgspec.Raw``: no copy, no dict), and the
events are decoded in batches into small structs that keep only the fields above; only the GPU,
runtime and annotation events become columns. Peak ≈ the JSON text plus ~70 bytes per event plus
the columns (docs/inputs.md#memory).
"""
from __future__ import annotations

import os
import re
import sys
import zlib
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from .. import kinds
from ..inputs.gzip_size import GZIP_MAGIC, inflated_size
from ..model import (COPY_DIRECTIONS, MEM_KINDS, ProfileError, Report, RowWarning, WarningCode,
    no_overhead)
from .caveats import lost_launches
from .columns import normalise_api_name, text_objects
from .gpus import board_name, devices_frame
from .host import HOST, HOST_SOURCE, trace_host
from .integrity import (ROW_GAP_FACTOR, ROW_GAP_MIN_NS, SLACK_NS, Capture, _row_extent, dropped_warning,
                        duplicate_mask, duplicates_warning, impossible_rows, key_first)
from .kineto_time import BEYOND_INT64, INT64_MAX, TimeRangeError, TimeTextError, raws_to_ns
from .limits import ReadTimeout, cut_text
from .limits import current as read_limits
from .processes import device_pairs, gpu_key_column, pair_keys
from .report import _group_by_gpu, calls_by_process, counted, no_kernel_ran


#: Event categories -> what they are. Old traces (2020-2021) spell them with capitals.
KERNEL, MEMCPY, MEMSET, RUNTIME, ANNOTATION, CPU_OP = "kernel", "memcpy", "memset", "runtime", "annotation", "cpu_op"
CATEGORIES = {
    "kernel": KERNEL, "Kernel": KERNEL,
    "gpu_memcpy": MEMCPY, "Memcpy": MEMCPY,
    "gpu_memset": MEMSET, "Memset": MEMSET,
    "cuda_runtime": RUNTIME, "Runtime": RUNTIME, "cuda_driver": RUNTIME, "Driver": RUNTIME,
    "user_annotation": ANNOTATION, "User Annotation": ANNOTATION,
    "cpu_op": CPU_OP, "Operator": CPU_OP,
}
#: Names of the table each kind is reported under in warnings (the trace's own category names).
KIND_LABELS = {KERNEL: "kernel events", RUNTIME: "cuda_runtime events", MEMCPY: "gpu_memcpy events",
               MEMSET: "gpu_memset events", ANNOTATION: "user_annotation ranges"}
STEP = re.compile(r"ProfilerStep#\d+")
#: A device's ``model_note`` (quoted in ``rate_source``) when the trace has no ``deviceProperties``: the
#: trace's own wording of :data:`pipeline.model.NO_GPU_NAMED`.
TRACE_NAMES_NO_GPU = "trace names no GPU (it has no deviceProperties)"
#: Events decoded per batch: a batch's structs (~0.5 KB an event) are its transient memory; ~2k keep that
#: to ~1 MB while per-batch costs (a few Arrow calls) stay under 0.3 µs an event.
BATCH = 2_048
#: Copy directions as memcpy event names spell them -> ENUM_CUDA_MEMCPY_OPER ids (the ``copy_kind``
#: column, named by :data:`~pipeline.model.COPY_DIRECTIONS`): Kineto's own (``Memcpy HtoD (...)``, CUDA
#: and ROCm), older ROCm traces' roctracer names (``CopyHostToDevice``, ``CopyDeviceToHost2D``) and HIP
#: API names (``hipMemcpyDtoHAsync``, ``hipMemcpyPeer``).
COPY_KINDS = {**{name: kind for kind, name in COPY_DIRECTIONS.items()},
              "HostToDevice": 1, "DeviceToHost": 2, "DeviceToDevice": 8, "HostToHost": 9, "Peer": 10}
#: Kineto's memory kind names, lower case (``Memcpy HtoD (Pinned -> Device)``: CUPTI's memory kinds as
#: Kineto's ``memoryKindString`` spells them) -> :data:`~pipeline.model.MEM_KINDS` ids, the ids the
#: Nsight loader gives too. ROCm traces name the host side ``Host`` (pinned or pageable unsaid): like any
#: name not listed, unknown.
KINETO_MEMORY_KINDS = {"pageable": MEM_KINDS["PAGEABLE"], "pinned": MEM_KINDS["PINNED"],
                       "device": MEM_KINDS["DEVICE"], "array": MEM_KINDS["ARRAY"], "managed": MEM_KINDS["MANAGED"],
                       "device static": MEM_KINDS["DEVICE_STATIC"], "managed static": MEM_KINDS["MANAGED_STATIC"],
                       "unknown": MEM_KINDS["UNKNOWN"]}
#: The memory of a side a direction names (``HtoD``: host -> device) when the name gives no kinds.
_SIDE_KINDS = {"H": MEM_KINDS["UNKNOWN"], "D": MEM_KINDS["DEVICE"], "P": MEM_KINDS["DEVICE"], "A": MEM_KINDS["ARRAY"]}
_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)\s*(?:\(\s*([^()]*?)\s*->\s*([^()]*?)\s*\))?")
_DIRECTION = re.compile("|".join(sorted(COPY_KINDS, key=len, reverse=True)))


def memcpy_kinds(name: str) -> tuple[int, int, int]:
    """``(copy_kind, src_kind, dst_kind)`` of a memcpy event from its name: ENUM_CUDA_MEMCPY_OPER and
    :data:`~pipeline.model.MEM_KINDS` ids, as the Nsight loader gives them.

    ``Memcpy HtoD (Pinned -> Device)`` -> ``(1, 1, 2)``; ``Memcpy DtoH (Device -> Pageable)`` -> ``(2, 2, 0)``;
    ROCm's ``Memcpy HtoD (Host -> Device)`` -> ``(1, 7, 2)`` (the host memory's kind unsaid). A name
    without kinds (``CopyHostToDevice``, ``hipMemcpyDtoHAsync``) has its direction's sides: device 2,
    array 3, host memory 7 (unknown); a name without a direction (``hipMemcpyAsync``) is ``(0, 7, 7)``.
    """
    text = str(name)
    m = _MEMCPY_NAME.search(text)
    kind = COPY_KINDS.get(m.group(1), 0) if m else 0
    if not kind:
        d = _DIRECTION.search(text)
        kind = COPY_KINDS[d.group()] if d else 0
    if kind:
        short = COPY_DIRECTIONS[kind]
        src, dst = _SIDE_KINDS[short[0]], _SIDE_KINDS[short[-1]]
    else:
        src = dst = MEM_KINDS["UNKNOWN"]
    if m and m.group(2) is not None:
        src = KINETO_MEMORY_KINDS.get(m.group(2).lower(), MEM_KINDS["UNKNOWN"])
        dst = KINETO_MEMORY_KINDS.get(m.group(3).lower(), MEM_KINDS["UNKNOWN"])
    return kind, src, dst


class _Args(msgspec.Struct, gc=False):
    """The ``args`` fields the loader reads (any JSON type: checked when used)."""

    device: Any = None
    stream: Any = None
    correlation: Any = None
    bytes: Any = None


class _Event(msgspec.Struct, gc=False):
    """One trace event, only the fields the loader reads; ``ts``/``dur`` stay raw JSON text."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")
    args: _Args | None = None


class _LooseEvent(_Event, gc=False):
    """:class:`_Event` for a batch whose ``args`` is not an object somewhere (read as anything)."""

    args: Any = None


class _Trace(msgspec.Struct):
    """The top-level object of a trace; the events stay raw slices of the text."""

    traceEvents: list[msgspec.Raw] | None = None
    deviceProperties: Any = None
    distributedInfo: msgspec.Raw = msgspec.Raw(b"null")  # read by _distributed_info: a hint never fails a trace
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"null")
    host_name: Any = None   # the host, where the profiler writes it (:func:`pipeline.load.host.trace_host`)
    hostname: Any = None


_TOP = msgspec.json.Decoder(_Trace | list[msgspec.Raw])
_BATCH = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])


def is_kineto_path(path: str) -> bool:
    """True for a file name the Kineto loader reads: a PyTorch profiler trace by its name
    (:func:`pipeline.kinds.is_trace`: ``.json``, ``.json.gz``, ``.pt.trace.json(.gz)``)."""
    return kinds.is_trace(str(path))


# -- reading the text -------------------------------------------------------------------------

#: Bytes of text one inflate call may produce: memory is never more than this past the bound of
#: :func:`_gunzip` (deflate turns 1 MiB of input into up to 1 GiB of output).
INFLATE_STEP = 1 << 24


def _gunzip(fh, path: str, max_bytes: int | None = None) -> bytearray:
    """The whole uncompressed text of a gzip file (every member), into one buffer sized from the
    trailer (:func:`~pipeline.inputs.gzip_size.inflated_size`: exact for one member under 4 GiB, the
    case of every PyTorch trace; else an estimate, and the buffer grows). Inflating stops past
    ``max_bytes`` (None: no bound), whatever the trailer says. Raises :class:`ProfileError` for a
    damaged or truncated stream, and for text longer than ``max_bytes``."""
    expected = inflated_size(fh) or 0
    out = bytearray(expected if max_bytes is None else min(expected, max_bytes))
    view, pos = memoryview(out), 0

    def put(data: bytes) -> None:
        nonlocal view, pos
        end = pos + len(data)
        if max_bytes is not None and end > max_bytes:
            raise ProfileError(
                f"{path}: inflates to more than {max_bytes:,} bytes (stopped there), the most a worker may hold for "
                f"it (its memory limit / dask.memory_factor), though its gzip trailer gives {expected:,}: the "
                "trailer's 32-bit size wraps every 4 GiB, or the file holds several gzip members; too big for one "
                "worker: raise dask.memory_limit or trim the capture")
        if end <= len(out):
            view[pos:end] = data
        else:  # the size was an estimate (several members): grow
            view.release()
            out[pos:] = data
            view = memoryview(out)
        pos = end

    d = zlib.decompressobj(wbits=31)
    pending = b""
    try:
        while True:
            if not pending:
                pending = fh.read(1 << 20)
                if not pending:
                    break
            if d.eof:  # a member ended: what follows is another member, or zero padding
                if not pending.strip(b"\x00"):
                    pending = b""
                    continue
                d = zlib.decompressobj(wbits=31)
            put(d.decompress(pending, INFLATE_STEP))
            pending = d.unused_data if d.eof else d.unconsumed_tail
        put(d.flush())
    except zlib.error as exc:
        raise ProfileError(f"{path}: damaged gzip data after {pos:,} uncompressed bytes ({exc})") from None
    finally:
        view.release()
    if not d.eof:
        raise ProfileError(f"{path}: truncated gzip file: the compressed stream ends before its end marker "
                           f"({pos:,} bytes uncompressed so far); copy it again or re-save the trace")
    if pos < len(out):
        del out[pos:]
    return out


def read_text(path: str, max_inflated: int | None = None) -> bytes | bytearray:
    """The JSON text of a trace file (inflated when it is gzip, whatever its name says; to at most
    ``max_inflated`` bytes, None: no bound). Raises :class:`ProfileError` (empty, damaged or truncated
    gzip, inflating past ``max_inflated``) and OSError (unreadable)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        if not head:
            raise ProfileError(f"{path}: empty file (0 bytes), not a PyTorch profiler trace")
        fh.seek(0)
        if head == GZIP_MAGIC:
            return _gunzip(fh, path, max_inflated)
        return _read_plain(fh)


def _read_plain(fh) -> bytearray:
    """The whole file into one buffer of its size (``read()`` would join chunks: twice the memory)."""
    size = os.fstat(fh.fileno()).st_size
    out = bytearray(size)
    view, pos = memoryview(out), 0
    while pos < size:
        n = fh.readinto(view[pos:])
        if not n:
            break
        pos += n
    view.release()
    if pos < size:  # the file shrank meanwhile
        del out[pos:]
    else:
        rest = fh.read()  # ... or grew
        out += rest
    return out


# -- events -> columns ------------------------------------------------------------------------

def _int(value, default: int = 0) -> int:
    """An int from a JSON value: ints as they are, text in any base Python reads (``"7"``,
    ``"0x0"``) or with a number inside (``"stream 7"``); ``default`` otherwise."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return int(value, 0)
        except ValueError:
            digits = re.search(r"-?\d+", value)
            try:
                return int(digits.group()) if digits else default
            except ValueError:  # more digits than Python converts (4,300): no id of a trace
                return default
    return default


#: The columns every kind of event gets (``ok``: its ts and dur were usable numbers).
COLUMNS = ("start", "end", "ok", "pid", "tid", "device_id", "correlation_id", "bytes", "name_code")
#: The trace fields the id columns of GPU and of CPU events come from (for messages).
ID_FIELDS_GPU = {"device_id": "device id (args.device, else pid)", "tid": "stream (args.stream, else tid)",
                 "correlation_id": "correlation id (args.correlation)", "bytes": "size (args.bytes)"}
ID_FIELDS_CPU = {"pid": "process id (pid)", "tid": "thread id (tid)",
                 "correlation_id": "correlation id (args.correlation)"}


def _times(ts: list, dur: list, base: int, path: str, label: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start, end, ok)`` ns of events from their raw ``ts``/``dur`` texts (``ok`` False: dropped later).
    Raises :class:`ProfileError` naming the field and value when a time, or ``base + ts + dur``, does not
    fit in 64-bit nanoseconds."""
    try:
        values, bad = raws_to_ns(ts + dur)  # one conversion for both
    except TimeRangeError as exc:
        field = "a time" if exc.index is None else ("ts" if exc.index < len(ts) else "dur")
        raise ProfileError(f"{path}: {label}: {field} {exc}") from None
    except TimeTextError as exc:
        raise ProfileError(f"{path}: {label}: {exc}") from None
    start, length, bad_ts, bad_dur = values[:len(ts)], values[len(ts):], bad[:len(ts)], bad[len(ts):]
    if start.size and not (-INT64_MAX <= int(start.min()) + base + min(int(length.min()), 0)
                           and int(start.max()) + base + max(int(length.max()), 0) <= INT64_MAX):
        begins = start.astype(object) + base  # exact (Python ints): which events overflow, if any
        if any(not -INT64_MAX <= t <= INT64_MAX for t in (*begins, *(begins + length.astype(object)))):
            what = "baseTimeNanoseconds + ts + dur" if base else "ts + dur"
            raise ProfileError(f"{path}: {label}: {what} of an event {BEYOND_INT64}")
    if base:
        start += base
    return start, start + length, ~(bad_ts | bad_dur)


class _Columns:
    """Column chunks of one kind of event, one chunk of int64 arrays per batch: times are converted
    batch by batch, so no event keeps its batch's JSON text alive."""

    def __init__(self, label: str, gpu: bool, path: str = "") -> None:
        self.label = label
        self.gpu = gpu
        self.path = path
        self.chunks: dict[str, list] = {c: [] for c in COLUMNS}

    def _ids(self, name: str, values: list) -> np.ndarray:
        """``values`` (ints) as int64. Raises :class:`ProfileError` naming the field and the value when
        one does not fit in 64 bits (a device id of 2**70 is no device a profiler numbers)."""
        try:
            return np.asarray(values, dtype=np.int64)
        except OverflowError:
            value = next(v for v in values if not -INT64_MAX - 1 <= v <= INT64_MAX)
            field = (ID_FIELDS_GPU if self.gpu else ID_FIELDS_CPU).get(name, name)
            raise ProfileError(f"{self.path}: {self.label}: {field} {value} does not fit in 64 bits: not an id a "
                               "profiler writes") from None

    def add(self, events: list, names: "_Names", times: tuple) -> None:
        """Append one batch's ``events`` (GPU events read device/stream from ``args``, CPU ones pid/tid)
        and their ``(start, end, ok)`` (:func:`_times`)."""
        if not events:
            return
        gpu = self.gpu
        start, end, ok = times
        pid, tid, device, corr, nbytes = [], [], [], [], []
        for e in events:  # ints as they come (the usual case) without a call; anything else through _int
            args = e.args if type(e.args) is _Args else None
            if gpu:
                pid.append(-1)
                v = e.pid if args is None or args.device is None else args.device
                device.append(v if type(v) is int else _int(v))
                v = e.tid if args is None or args.stream is None else args.stream
                tid.append(v if type(v) is int else _int(v))
                v = 0 if args is None else args.bytes
                nbytes.append(v if type(v) is int else _int(v))
            else:
                v = e.pid
                pid.append(v if type(v) is int else _int(v, -1))
                v = e.tid
                tid.append(v if type(v) is int else _int(v, -1))
                device.append(-1)
                nbytes.append(0)
            v = 0 if args is None else args.correlation
            corr.append(v if type(v) is int else _int(v))
        for name, values in (("start", start), ("end", end), ("ok", ok)):
            self.chunks[name].append(np.asarray(values, dtype=bool if name == "ok" else np.int64))
        for name, values in (("pid", pid), ("tid", tid), ("device_id", device), ("correlation_id", corr),
                             ("bytes", nbytes)):
            self.chunks[name].append(self._ids(name, values))
        known, code = names.codes.get, names.code
        self.chunks["name_code"].append(np.fromiter(
            (c if type(e.name) is str and (c := known(e.name)) is not None else code(e.name) for e in events),
            dtype=np.int64,
            count=len(events)))

    def table(self) -> tuple[dict[str, np.ndarray], int]:
        """The events as a table (:data:`COLUMNS` but ``ok``: name -> int64 array, one value per event)
        and how many were dropped for a missing or unusable ts or dur."""
        cols = {c: (np.concatenate(chunks) if chunks else np.zeros(0, dtype=bool if c == "ok" else np.int64))
                for c, chunks in self.chunks.items()}
        self.chunks = {c: [] for c in COLUMNS}
        ok = cols.pop("ok")
        dropped = int(ok.size - ok.sum())
        return (_kept(cols, ok) if dropped else cols), dropped


def _kept(table: dict[str, np.ndarray], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The rows of a table (name -> array) where ``keep`` (one bool per row) is True."""
    return {c: values[keep] for c, values in table.items()}


def _rows(table: dict[str, np.ndarray]) -> int:
    """The number of rows of a table (name -> array, ``start`` among them)."""
    return int(table["start"].size)


class _Names:
    """Interned event names: each distinct name once (cut to :data:`~pipeline.load.limits.MAX_TEXT_CHARS`
    characters, :func:`~pipeline.load.limits.cut_text`), rows hold its code."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, name) -> int:
        text = cut_text(name if isinstance(name, str) else ("" if name is None else str(name)))
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.codes)
        return code

    def array(self) -> np.ndarray:
        out = np.empty(len(self.codes), dtype=object)
        for text, code in self.codes.items():
            out[code] = text
        return out


#: JSON types by the Python type msgspec decodes them to, for messages.
_JSON_TYPES = {int: "a number", float: "a number", str: "a string", list: "a list"}


def _not_an_event(raws: list, at: int, path: str, where: str) -> ProfileError:
    """The error for a batch (``raws``, item ``at`` on) holding an item that is not a JSON object."""
    for i, raw in enumerate(raws):
        text = bytes(raw).strip()
        if not text.startswith(b"{"):
            shown = text[:40].decode("utf-8", "replace")
            what = _JSON_TYPES.get(type(msgspec.json.decode(text)))
            return ProfileError(f"{path}: not a PyTorch profiler trace: item {at + i:,} of {where} is "
                                f"{f'{what} ({shown})' if what else shown}, not an event object")
    return ProfileError(f"{path}: not a PyTorch profiler trace: {where} holds items that are not event objects")


def _decode_batch(raws: list, at: int, path: str, where: str) -> list:
    """The events of ``raws`` (items ``at``... of ``where``, the trace's event list). Raises
    :class:`ProfileError` when one is not a JSON object (``[1, 2, 3]`` is JSON, not a trace)."""
    text = b"[" + b",".join(raws) + b"]"
    try:
        return _BATCH.decode(text)
    except msgspec.ValidationError:  # an ``args`` that is not an object: read this batch loosely
        try:
            return _LOOSE.decode(text)
        except msgspec.ValidationError:  # an item that is not an object at all
            raise _not_an_event(raws, at, path, where) from None


def _batch_times(cols: dict, picked: dict, base: int, path: str) -> list[tuple]:
    """``[(kind, events, (start, end, ok))]`` for one batch's events of each kind (``picked``): the
    times of every kind converted at once (:func:`_times`); kind by kind when that fails, so the
    error names the kind, as it is for a trace whose kinds are converted apart."""
    groups = [(kind, events) for kind, events in picked.items() if events]
    if not groups:
        return []
    every = [e for _, events in groups for e in events]
    try:
        start, end, ok = _times([e.ts for e in every], [e.dur for e in every], base, path, "")
    except ProfileError:  # the kind that fails says so (or none does: each fits on its own)
        return [(kind, events, _times([e.ts for e in events], [e.dur for e in events], base, path,
                                      cols[kind].label)) for kind, events in groups]
    out, at = [], 0
    for kind, events in groups:
        n = len(events)
        out.append((kind, events, (start[at:at + n], end[at:at + n], ok[at:at + n])))
        at += n
    return out


def _collect(raws: list, base: int, path: str, where: str = "traceEvents",
             deadline=None) -> tuple[dict, _Names, int, tuple | None]:
    """Per kind (:data:`CATEGORIES`), its :class:`_Columns`; the interned names; how many events had
    ``ph: "X"``; and ``(start, end, name)`` of the profiler's own ``Trace`` span (ns; several: from the
    earliest start, named as it is, to the latest end; None: absent). ``where``: what ``raws`` are
    (for messages). ``deadline``: the time bound (:class:`~pipeline.load.limits.Deadline`, looked at
    between batches; None: the current limits'). Raises :class:`ProfileError` when an item is not an
    event object, or when no item has a ``ph`` (objects, but not trace events);
    :class:`~pipeline.load.limits.ReadTimeout` once the deadline has passed."""
    names = _Names()
    cols = {kind: _Columns(KIND_LABELS[kind], kind in (KERNEL, MEMCPY, MEMSET), path)
            for kind in (KERNEL, MEMCPY, MEMSET, RUNTIME, ANNOTATION)}
    complete = phased = 0
    span = None
    deadline = read_limits().deadline() if deadline is None else deadline
    for at in range(0, len(raws), BATCH):
        deadline.check()
        picked: dict[str, list] = {kind: [] for kind in cols}
        for e in _decode_batch(raws[at:at + BATCH], at, path, where):
            if e.ph != "X":
                phased += e.ph is not None
                continue
            complete += 1
            kind = CATEGORIES.get(e.cat) if isinstance(e.cat, str) else None
            if kind is None:
                if e.cat == "Trace" and e.pid == "Spans":  # the profiler's own span: the capture
                    start, end, ok = _times([e.ts], [e.dur], base, path, "Trace span")
                    if ok[0]:
                        lo, hi, name = int(start[0]), int(end[0]), str(e.name)
                        if span is not None:
                            lo, name = (lo, name) if lo < span[0] else (span[0], span[2])
                            hi = max(hi, span[1])
                        span = (lo, hi, name)
                continue
            if kind == CPU_OP:
                if isinstance(e.name, str) and STEP.fullmatch(e.name):
                    picked[ANNOTATION].append(e)
                continue
            picked[kind].append(e)
        for kind, events, times in _batch_times(cols, picked, base, path):
            cols[kind].add(events, names, times)
    if raws and not complete + phased:
        raise ProfileError(f"{path}: not a PyTorch profiler trace: none of the {len(raws):,} objects of {where} "
                           'is a trace event (none has a "ph")')
    return cols, names, complete, span


def _named(codes: np.ndarray, names: np.ndarray, normalise=None) -> pd.Categorical:
    """A categorical of ``names[codes]`` over the distinct names used (normalised when asked)."""
    used, inverse = np.unique(codes, return_inverse=True)
    texts = names[used] if used.size else np.zeros(0, dtype=object)
    if normalise is not None:
        texts = np.array([normalise(str(t)) for t in texts], dtype=object)
    categories, remap = np.unique(text_objects(texts), return_inverse=True)
    return pd.Categorical.from_codes(remap[inverse].reshape(-1), categories=categories)


def _memcpy_kinds(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(copy_kind, src_kind, dst_kind)`` per memcpy row (:func:`memcpy_kinds` of its name, once per name)."""
    used, inverse = np.unique(codes, return_inverse=True)
    table = np.array([memcpy_kinds(names[code]) for code in used] or [(0, 0, 0)], dtype=np.int64)
    rows = table[inverse.reshape(-1)] if codes.size else np.zeros((0, 3), dtype=np.int64)
    return rows[:, 0], rows[:, 1], rows[:, 2]


def _owners(corr: np.ndarray, runtime: dict[str, np.ndarray], main_pid: int) -> np.ndarray:
    """The process of each GPU event (``corr``: their correlation ids): that of the first runtime call
    (``runtime``: a table with ``correlation_id`` and ``pid``) with its correlation id, else ``main_pid``."""
    corr = np.asarray(corr, dtype=np.int64)
    call_corr = runtime["correlation_id"]
    if not call_corr.size or corr.size == 0:
        return np.full(corr.size, main_pid, dtype=np.int64)
    calls = np.flatnonzero(call_corr != 0)
    ids, first = np.unique(call_corr[calls], return_index=True)  # the first call of each id
    if not ids.size:
        return np.full(corr.size, main_pid, dtype=np.int64)
    at = np.minimum(np.searchsorted(ids, corr), ids.size - 1)
    return np.where(ids[at] == corr, runtime["pid"][calls[first[at]]], main_pid).astype(np.int64)


def _main_pid(runtime: dict[str, np.ndarray], nvtx: dict[str, np.ndarray]) -> int:
    """The trace's process: the one with the most runtime calls, else annotations, else 0 (``runtime``,
    ``nvtx``: tables with a ``pid`` column)."""
    for table in (runtime, nvtx):
        pids = np.asarray(table["pid"], dtype=np.int64)
        pids = pids[pids >= 0]
        if pids.size:
            values, counts = np.unique(pids, return_counts=True)
            return int(values[np.argmax(counts)])
    return 0


def _device_table(props) -> dict[int, dict]:
    """``deviceProperties`` as device id -> its entry (entries without an int ``id`` are skipped)."""
    out = {}
    if isinstance(props, list):
        for entry in props:
            if isinstance(entry, dict) and isinstance(entry.get("id"), int):
                out[entry["id"]] = entry
    return out


def _sms(entry: dict | None) -> int:
    """A ``deviceProperties`` entry's ``numSms`` (0: none, or not a plausible count: no GPU has a
    million SMs)."""
    sms = _int(entry.get("numSms")) if entry else 0
    return sms if 0 <= sms <= 1 << 20 else 0


def _entries(props) -> list[dict]:
    """The ``deviceProperties`` entries that are objects (with an ``id`` or not)."""
    return [e for e in props if isinstance(e, dict)] if isinstance(props, list) else []


def _models(props) -> list[str]:
    """The board models the ``deviceProperties`` entries name, sorted, each once."""
    return sorted({board_name(e.get("name")) for e in _entries(props)} - {""})


def _sole_model(props) -> tuple[str, int]:
    """The model (and SM count, 0 when the entries differ) every ``deviceProperties`` entry names,
    when they name one (a single entry, or all entries the same board); ``("", 0)`` when they name
    none or several."""
    models = _models(props)
    if len(models) != 1:
        return "", 0
    counts = {_sms(e) for e in _entries(props)}
    return models[0], counts.pop() if len(counts) == 1 else 0


def not_nvidia(api_names) -> str:
    """Why a trace's GPUs are not NVIDIA GPUs (``Report.meta["not_nvidia"]``, docs/definitions.md#cost), from its
    runtime calls' (normalised) ``api_names``: HIP calls (``hipLaunchKernel``) and no CUDA one (``cuda*``/``cu*``)
    make a ROCm trace, of AMD GPUs; ``""`` when the calls do not say (none, CUDA, or both)."""
    names = {str(n) for n in api_names}
    hip = sorted(n for n in names if n.startswith("hip"))
    if not hip or any(n.startswith("cu") for n in names):
        return ""
    shown = "hipLaunchKernel" if "hipLaunchKernel" in names else hip[0]
    return f"the trace's runtime calls are HIP ({shown}): a ROCm GPU, not an NVIDIA GPU"


def _devices(pairs: pd.DataFrame, props, vendor: str = "") -> tuple[pd.DataFrame, list[RowWarning]]:
    """The devices frame (:data:`~pipeline.load.gpus.DEVICE_COLUMNS`) of the (pid, device) pairs, and
    the warnings of the devices whose model cannot be told.

    A device's model is its ``deviceProperties`` entry's name (by ``id``). A device the entries do
    not list (kernels on device 2 or 9 while the one entry has id 0: ROCm traces number devices by
    the node's visible GPUs) gets the model every entry names, when they name one (a single entry,
    or all the same); else its model is blank, ``model_note`` says why, and a ``gpu-model-unresolved``
    warning (:class:`~pipeline.model.WarningCode`) goes to its process's rows. A trace without
    ``deviceProperties`` names no GPU (:data:`TRACE_NAMES_NO_GPU`, no loader warning: nothing contradicts;
    the row's ``gpu-model-unresolved`` comes from :func:`pipeline.analysis.cost.rate_warnings`). ``vendor``:
    why the trace's GPUs are not NVIDIA GPUs (:func:`not_nvidia`), for the warning's pricing.
    """
    table = _device_table(props)
    sole, sole_sms = _sole_model(props)
    rows, warnings = [], []
    for pid, dev in zip(pairs["pid"].to_numpy(np.int64).tolist(), pairs["device_id"].to_numpy(np.int64).tolist()):
        entry = table.get(dev)
        model, sms = (board_name(entry.get("name")), _sms(entry)) if entry else ("", 0)
        if not model and sole:
            model, sms = sole, sms or sole_sms
        if model:
            note = ""
        elif props is None:
            note = TRACE_NAMES_NO_GPU
        else:
            note = _unresolved_note(dev, table, props)
            priced = (f"{vendor}: left unpriced (cost.unlisted: unpriced; `default` prices it as the default model)"
                      if vendor else "priced as the default model (cost.default_model)")
            warnings.append(RowWarning(WarningCode.GPU_MODEL_UNRESOLVED,
                                       f"GPU model unknown for device {dev}: {note}; {priced}; a gpu_model label for "
                                       "this report names it", (pid,)))
        rows.append({"pid": pid, "device_id": dev, "gpu_key": f"pid{pid}/dev{dev}", "gpu_model": model, "uuid": "",
                     "bus": "", "mig": False, "sms": sms, "board_sms": sms, "model_note": note})
    return devices_frame(rows), warnings


def _unresolved_note(dev: int, table: dict, props) -> str:
    """Why device ``dev``'s model cannot be told from ``deviceProperties`` (``table``: by id)."""
    models = _models(props)
    listed = f"device {dev} (ids {sorted(table)})"
    if dev in table:
        return f"the trace's deviceProperties entry of device {dev} names no model"
    if len(models) > 1:
        return (f"the trace's deviceProperties do not list {listed} and name {len(models)} different models "
                f"({', '.join(map(repr, models))})")
    return f"the trace's deviceProperties do not name {listed}"


def _copies(memcpy: dict, memset: dict, names: np.ndarray, runtime: dict, main_pid: int) -> dict[str, np.ndarray]:
    """The columns of :attr:`~pipeline.model.Report.copies` but ``gpu_key``, plus ``correlation_id``, from
    the memcpy and memset events (tables; ``names``: the interned event names; ``runtime``: the runtime
    calls' table, for each copy's process, :func:`_owners`). Memcpy rows first."""
    copy_kind, src_kind, dst_kind = _memcpy_kinds(names, memcpy["name_code"])
    unset = np.full(_rows(memset), -1, dtype=np.int64)  # a memset has no direction nor memory kinds

    def both(column: str) -> np.ndarray:
        return np.concatenate((memcpy[column], memset[column]))
    return {"start": both("start"), "end": both("end"),
            "pid": _owners(both("correlation_id"), runtime, main_pid), "device_id": both("device_id"),
            "stream_id": both("tid"),
            "kind": pd.array(np.repeat(np.array([MEMCPY, MEMSET], dtype=object), [_rows(memcpy), _rows(memset)]),
                             dtype="str"),
            "copy_kind": np.concatenate((copy_kind, unset)), "bytes": both("bytes"),
            "src_kind": np.concatenate((src_kind, unset)), "dst_kind": np.concatenate((dst_kind, unset)),
            "correlation_id": both("correlation_id")}


def _capture(span: tuple | None, stamps: list[np.ndarray]) -> Capture:
    """The capture rows must lie in: the profiler's own ``Trace`` span (± :data:`SLACK_NS`), else
    the run of the rows' timestamps (:func:`~pipeline.load.integrity._row_extent`)."""
    if span is not None:
        lo, hi = span[:2]
        return Capture(lo - SLACK_NS, hi + SLACK_NS,
                       f"{lo / 1e9:.6f}..{hi / 1e9:.6f} s on the trace's clock, per its PyTorch Profiler span")
    extent = _row_extent(stamps, None, ROW_GAP_MIN_NS, ROW_GAP_FACTOR)
    if extent is None:
        return Capture(None, None, "")
    return Capture(extent[0], extent[1], f"{extent[0] / 1e9:.6f}..{extent[1] / 1e9:.6f} s on the trace's clock, "
                                         "per the other events")


#: Where a trace's timeline zero comes from when it has no profiler span (:func:`capture_start`).
EARLIEST_EVENT = "the trace's earliest event (it has no profiler span)"


def capture_start(span: tuple | None, frames: dict) -> tuple[int | None, str]:
    """The trace's timeline zero (int ns on the report's clock) and where it comes from: the start of
    the profiler's own span (the ``Trace`` event, ``"PyTorch Profiler (0)"``: when the profiler started
    recording), else the earliest start of the events read (``frames``: kind -> its events, a frame or
    a table of column arrays with ``start``, after the untrustworthy ones are dropped;
    :data:`EARLIEST_EVENT`); ``(None, "")`` without any. The Nsight loader's counterpart is
    :func:`pipeline.load.integrity.capture_start`."""
    if span is not None:
        return int(span[0]), f'the trace\'s profiler span ("{span[2]}" Trace event)'
    starts = [s for s in (np.asarray(f["start"], dtype=np.int64) for f in frames.values()) if s.size]
    if not starts:
        return None, ""
    return min(int(s.min()) for s in starts), EARLIEST_EVENT


def _distributed_info(raw: msgspec.Raw):
    """The trace's ``distributedInfo`` object (rank, world size: hints), or None when it is none or
    unreadable (an integer beyond 64 bits): a hint never fails the trace."""
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, ValueError):
        return None


def _base_ns(raw, path: str) -> int:
    """``baseTimeNanoseconds`` as an exact int (0 when absent)."""
    if raw is None:
        return 0
    text = bytes(raw).strip().strip(b'"')
    if text in (b"", b"null"):
        return 0
    shown = text[:40].decode("utf-8", "replace")
    try:
        base = int(text)
    except ValueError:
        raise ProfileError(f"{path}: baseTimeNanoseconds is not an integer ({shown!r})") from None
    if not -INT64_MAX <= base <= INT64_MAX:
        raise ProfileError(f"{path}: baseTimeNanoseconds {shown} {BEYOND_INT64}")
    return base


def _parse(path: str, text) -> tuple[list, Any, Any, int, str, tuple]:
    """``(raw events, deviceProperties, distributedInfo, base ns, where, (host, where read))`` of a trace's text;
    ``where`` names the event list for messages (``traceEvents`` or ``the JSON list``)."""
    try:
        top = _TOP.decode(text)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"{path}: not a PyTorch profiler trace: the JSON is not an object with traceEvents "
                           f"nor a list of events ({exc})") from None
    except msgspec.DecodeError as exc:
        what = "truncated JSON (the file ends inside the trace)" if "truncated" in str(exc) else f"not valid JSON ({exc})"
        raise ProfileError(f"{path}: {what}: not a readable PyTorch profiler trace") from None
    if isinstance(top, list):
        return top, None, None, 0, "the JSON list", ("", "")
    if top.traceEvents is None:
        raise ProfileError(f"{path}: not a PyTorch profiler trace: the JSON object has no traceEvents list")
    return (top.traceEvents, top.deviceProperties, _distributed_info(top.distributedInfo), _base_ns(top.baseTimeNanoseconds, path),
            "traceEvents", trace_host(top))


def _dropped_rows_warning(counts: dict[str, int]) -> list[RowWarning]:
    counts = {k: n for k, n in counts.items() if n}
    if not counts:
        return []
    total = sum(counts.values())
    code = WarningCode.DROPPED_KERNEL_ROWS if counts.get(KERNEL) else WarningCode.DROPPED_ROWS
    return [RowWarning(code, f"dropped {total} event{'s' if total > 1 else ''} without a usable ts or dur: "
                       + ", ".join(f"{n} {KIND_LABELS[k]}" for k, n in counts.items()))]


def _drop_untrustworthy(tables: dict[str, dict], capture: Capture, path: str) -> tuple[dict, list]:
    """Exact duplicate events (counted once) and events with end < start or far outside the capture,
    dropped and named in warnings, as the Nsight loader does (:mod:`~pipeline.load.integrity`).
    ``tables``: kind -> its events (name -> int64 array)."""
    duplicates = {}
    for kind, table in tables.items():
        names, key = key_first(table)
        copies = duplicate_mask([table[c] for c in names], key) if _rows(table) > 1 else np.zeros(_rows(table), bool)
        duplicates[KIND_LABELS[kind]] = int(copies.sum())
        if copies.any():
            tables[kind] = _kept(table, ~copies)
    warnings = duplicates_warning(duplicates)
    kernels_before = _rows(tables[KERNEL])
    for kind, table in tables.items():
        starts, ends = table["start"], table["end"]
        found = impossible_rows(KIND_LABELS[kind], starts, ends, capture)
        for w in dropped_warning(found, starts, ends, capture):
            code = WarningCode.DROPPED_KERNEL_ROWS if kind == KERNEL else WarningCode.DROPPED_ROWS
            warnings.append(RowWarning(code, w.text, w.pids))
        if found.bad.any():
            tables[kind] = _kept(table, ~found.bad)
    if kernels_before and not _rows(tables[KERNEL]):
        raise ProfileError(f"{path}: all {kernels_before:,} kernel events have end < start or lie far outside the "
                           f"capture ({capture.text}): no usable kernel")
    return tables, warnings


def load_kineto(path: str, require_kernels: bool = True) -> Report:
    """Load one PyTorch profiler trace (JSON, gzip or not) into a :class:`~pipeline.model.Report`.

    Args:
        path: local path of the trace (``.json``, ``.json.gz``, ``.pt.trace.json(.gz)``).
        require_kernels: when False, a trace without kernels loads with empty ``kernels`` and
            ``devices`` instead of raising.
    Returns:
        The Report the Nsight loader would make of the same evidence (see the module doc), with
        ``meta`` = ``{"format": "kineto", "rank": ..., "world_size": ..., "backend": ..., "base_time_ns": ..., "not_nvidia": ...}``
        (the keys the trace gives; values as text; ``not_nvidia``: why its GPUs are not NVIDIA GPUs,
        :func:`not_nvidia`, only when its runtime calls say so) and the timeline's zero in ``capture_start_ns`` /
        ``capture_start_source`` (:func:`capture_start`).
    Raises:
        ProfileError: empty file, damaged or truncated gzip, not JSON or truncated JSON, JSON that is
        not a trace (not an object with traceEvents nor a list; an item of the event list that is not
        an object, ``[1, 2, 3]``; objects none of which has a ``ph``; nested too deeply to read), a time
        that is not a number or does not fit int64 ns, an id beyond 64 bits, no GPU events or no
        kernels; a gzip file inflating past the current limits' ``max_inflated`` bytes, or reading past
        their time bound (:mod:`pipeline.load.limits`). The message starts with the path and says why.

    Event names longer than :data:`~pipeline.load.limits.MAX_TEXT_CHARS` characters are cut
    (:func:`~pipeline.load.limits.cut_text`).
    """
    limits = read_limits()
    deadline = limits.deadline()
    try:
        text = read_text(path, limits.max_inflated)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    try:
        raws, props, dist, base, where, (host, host_source) = _parse(path, text)
        cols, names_seen, complete, span = _collect(raws, base, path, where, deadline)
    except RecursionError:
        raise ProfileError(f"{path}: JSON nested deeper than it can be read (about {sys.getrecursionlimit():,} "
                           "levels; a PyTorch profiler trace nests a few): not a trace as the profiler writes it"
                           ) from None
    except ReadTimeout as exc:
        raise ProfileError(f"{path}: {exc}") from None
    del raws, text
    names = names_seen.array()
    tables, missing = {}, {}
    for kind in (KERNEL, RUNTIME, MEMCPY, MEMSET, ANNOTATION):
        tables[kind], missing[kind] = cols.pop(kind).table()
    if not sum(_rows(tables[k]) + missing[k] for k in (KERNEL, MEMCPY, MEMSET)):
        raise ProfileError(f"{path}: no GPU events in this trace ({complete:,} complete events, none of category "
                           "kernel, gpu_memcpy or gpu_memset): was it profiled with ProfilerActivity.CUDA, and did "
                           "the GPU run anything while the profiler recorded?")
    copied = [k for k in (MEMCPY, MEMSET) if _rows(tables[k])]
    if require_kernels and not _rows(tables[KERNEL]) and not missing[KERNEL] and copied:
        traced = [counted(_rows(tables[k]), KIND_LABELS[k][:-1], KIND_LABELS[k]) for k in copied]
        devices = np.concatenate([tables[k]["device_id"] for k in copied]).tolist()
        raise ProfileError(f"{path}: no kernel events in this trace, but "
                           f"{no_kernel_ran(traced, devices, 'the profiler recorded')}")
    if require_kernels and not _rows(tables[KERNEL]):
        raise ProfileError(f"{path}: no usable kernel events in this trace ({missing[KERNEL]:,} without a usable "
                           "ts or dur): nothing ran on a GPU while the profiler recorded")
    warnings = _dropped_rows_warning(missing)
    stamps = [t[c] for t in tables.values() for c in ("start", "end")]
    tables, trust = _drop_untrustworthy(tables, _capture(span, stamps), path)
    warnings += trust
    start_ns, start_source = capture_start(span, tables)
    rt, annotations = tables[RUNTIME], tables[ANNOTATION]
    main_pid = _main_pid(rt, annotations)

    runtime = pd.DataFrame({**{c: rt[c] for c in ("start", "end", "pid", "tid", "correlation_id")},
                            "name": _named(rt["name_code"], names, normalise_api_name)}, copy=False)
    ranges = _kept(annotations, annotations["end"] != annotations["start"])
    nvtx = pd.DataFrame({**{c: ranges[c] for c in ("start", "end", "pid", "tid")},
                         "text": pd.array(names[ranges["name_code"]], dtype="str")},
                        copy=False)

    k = tables[KERNEL]
    kernel_pid = _owners(k["correlation_id"], rt, main_pid)
    pair_codes, pairs = device_pairs({"pid": kernel_pid, "device_id": k["device_id"]})
    vendor = not_nvidia(pd.unique(runtime["name"]))
    devices, model_warnings = _devices(pairs, props, vendor)
    warnings += model_warnings
    kernels = pd.DataFrame({"start": k["start"], "end": k["end"], "pid": kernel_pid, "device_id": k["device_id"],
                            "stream_id": k["tid"], "correlation_id": k["correlation_id"],
                            "name": _named(k["name_code"], names),
                            "gpu_key": gpu_key_column(devices, pairs, pair_codes)}, copy=False)
    copies = _copies(tables[MEMCPY], tables[MEMSET], names, rt, main_pid)
    untraced = lost_launches(kernels, copies, runtime)  # an empty no_untraced() when nothing was lost
    del copies["correlation_id"]
    copies["gpu_key"] = pair_keys(devices, copies["pid"], copies["device_id"]) if _rows(copies) \
        else np.zeros(0, dtype=object)
    copies = pd.DataFrame(copies, copy=False)
    kernels = _group_by_gpu(kernels)
    runtime = calls_by_process(runtime, devices)
    meta = {"format": "kineto"}
    if isinstance(dist, dict):
        for key in ("rank", "world_size"):
            if type(dist.get(key)) is int and 0 <= dist[key] < 10 ** 9:  # not True, not absurd
                meta[key] = str(dist[key])
        backend = dist.get("backend")
        if isinstance(backend, str) and backend.strip():
            meta["backend"] = cut_text(backend.strip())
    if base:
        meta["base_time_ns"] = str(base)
    if vendor:
        meta["not_nvidia"] = vendor
    if host:
        meta.update({HOST: host, HOST_SOURCE: host_source})
    return Report(path=path, kernels=kernels, runtime=runtime, copies=copies, nvtx=nvtx, devices=devices,
                  overhead=no_overhead(), untraced=untraced, meta=meta,
                  diagnostics=[], warnings=warnings, capture_start_ns=start_ns, capture_start_source=start_source)
