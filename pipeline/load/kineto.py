"""Load one PyTorch profiler (Kineto) Chrome-trace JSON into the same :class:`~pipeline.model.Report`
the Nsight Systems loader makes, so every later stage (windows, gaps, attribution, categories,
cost, fleet, records, report) runs unchanged.

What is read (``ph: "X"`` complete events; anything else is skipped):

* GPU work: ``cat`` ``kernel`` / ``Kernel`` (kernels), ``gpu_memcpy`` / ``Memcpy`` and
  ``gpu_memset`` / ``Memset`` (copy-engine work). ``args.device`` is the device (else the event's
  ``pid``, which Kineto sets to the device index), ``args.stream`` the stream (else ``tid``),
  ``args.correlation`` the correlation id, ``args.bytes`` the size. A memcpy's direction and memory
  kinds come from its name, ``Memcpy HtoD (Pinned -> Device)``.
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
  ns, as it already is for traces whose ``ts`` are epoch microseconds.

Memory: the JSON text is held once (a gzip file is inflated into one buffer of its uncompressed
size), the event list is split into raw slices of it (``msgspec.Raw``: no copy, no dict), and the
events are decoded in batches into small structs that keep only the fields above; only the GPU,
runtime and annotation events become columns. Peak ≈ the JSON text plus ~70 bytes per event plus
the columns (see ``README.md``, "PyTorch profiler traces").
"""
from __future__ import annotations

import os
import re
import zlib
from typing import Any

import msgspec
import numpy as np
import pandas as pd

from ..model import NO_GPU_NAMED, ProfileError, Report, RowWarning, WarningCode, no_overhead, no_untraced
from .caveats import lost_launches
from .columns import normalise_api_name
from .gpus import DEVICE_COLUMNS, board_name
from .integrity import (SLACK_NS, Capture, _row_extent, dropped_warning, duplicate_mask, duplicates_warning,
    frame_codes, impossible_rows)
from .kineto_time import TimeTextError, raws_to_ns
from .report import _group_by_gpu, _in_start_order

#: File names read as PyTorch profiler traces (``*.pt.trace.json`` and ``*.pt.trace.json.gz`` end so too).
KINETO_SUFFIXES = (".json.gz", ".json")

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
#: Events decoded per batch: large enough that per-batch costs vanish, small enough to stay cheap.
BATCH = 20_000
#: ENUM_CUDA_MEMCPY_OPER ids of Kineto's memcpy names (``Memcpy HtoD (...)``).
COPY_KINDS = {"HtoD": 1, "DtoH": 2, "HtoA": 3, "AtoH": 4, "AtoA": 5, "AtoD": 6, "DtoA": 7, "DtoD": 8, "HtoH": 9,
              "PtoP": 10}
#: ENUM_CUDA_MEM_KIND ids of Kineto's memory kind names (``(Pinned -> Device)``); ROCm's ``Host`` is unknown.
MEMORY_KINDS = {"Pageable": 1, "Device": 2, "Array": 3, "Managed": 4, "Device Static": 5, "Managed Static": 6,
                "Pinned": 7}
_MEMCPY_NAME = re.compile(r"Memcpy\s+(\w+)(?:\s*\(\s*([^()]*?)\s*->\s*([^()]*?)\s*\))?")


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


class _LooseEvent(msgspec.Struct, gc=False):
    """:class:`_Event` for a batch whose ``args`` is not an object somewhere (read as anything)."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None
    tid: Any = None
    ts: msgspec.Raw = msgspec.Raw(b"null")
    dur: msgspec.Raw = msgspec.Raw(b"null")
    args: Any = None


class _Trace(msgspec.Struct):
    """The top-level object of a trace; the events stay raw slices of the text."""

    traceEvents: list[msgspec.Raw] | None = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    baseTimeNanoseconds: msgspec.Raw = msgspec.Raw(b"null")


_TOP = msgspec.json.Decoder(_Trace | list[msgspec.Raw])
_BATCH = msgspec.json.Decoder(list[_Event])
_LOOSE = msgspec.json.Decoder(list[_LooseEvent])


def is_kineto_path(path: str) -> bool:
    """True for a file name the Kineto loader reads (``.json``, ``.json.gz``, ``.pt.trace.json(.gz)``)."""
    return str(path).lower().endswith(KINETO_SUFFIXES)


# -- reading the text -------------------------------------------------------------------------

def _gzip_size_hint(fh) -> int:
    """The gzip trailer's ISIZE (uncompressed size mod 2**32) of an open file: a size hint only."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    if size < 18:
        return 0
    fh.seek(size - 4)
    hint = int.from_bytes(fh.read(4), "little")
    fh.seek(0)
    return hint


def _gunzip(fh, path: str) -> bytearray:
    """The whole uncompressed text of a gzip file (every member), into one buffer sized from the
    trailer when that is right (no regrowth). Raises :class:`ProfileError` for a damaged or
    truncated stream."""
    out = bytearray(_gzip_size_hint(fh))
    view, pos = memoryview(out), 0

    def put(data: bytes) -> None:
        nonlocal view, pos
        end = pos + len(data)
        if end <= len(out):
            view[pos:end] = data
        else:  # the hint was wrong (a file over 4 GiB, several members): grow
            view.release()
            out[pos:] = data
            view = memoryview(out)
        pos = end

    d = zlib.decompressobj(wbits=31)
    try:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            put(d.decompress(chunk))
            while d.eof and d.unused_data:
                rest = d.unused_data
                if not rest.strip(b"\x00"):
                    break  # zero padding after the last member
                d = zlib.decompressobj(wbits=31)
                put(d.decompress(rest))
        put(d.flush())
    except zlib.error as exc:
        view.release()
        raise ProfileError(f"{path}: damaged gzip data after {pos:,} uncompressed bytes ({exc})") from None
    view.release()
    if not d.eof:
        raise ProfileError(f"{path}: truncated gzip file: the compressed stream ends before its end marker "
                           f"({pos:,} bytes uncompressed so far); copy it again or re-save the trace")
    if pos < len(out):
        del out[pos:]
    return out


def read_text(path: str) -> bytes | bytearray:
    """The JSON text of a trace file (inflated when it is gzip, whatever its name says).
    Raises :class:`ProfileError` (empty, damaged or truncated gzip) and OSError (unreadable)."""
    with open(path, "rb") as fh:
        head = fh.read(2)
        if not head:
            raise ProfileError(f"{path}: empty file (0 bytes), not a PyTorch profiler trace")
        fh.seek(0)
        if head == b"\x1f\x8b":
            return _gunzip(fh, path)
        return fh.read()


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
            return int(digits.group()) if digits else default
    return default


class _Columns:
    """Column chunks of one kind of event, filled batch by batch (times stay raw until the end)."""

    def __init__(self) -> None:
        self.ts: list = []
        self.dur: list = []
        self.pid: list[int] = []
        self.tid: list[int] = []
        self.device: list[int] = []
        self.corr: list[int] = []
        self.nbytes: list[int] = []
        self.name: list[int] = []

    def __len__(self) -> int:
        return len(self.ts)


class _Names:
    """Interned event names: each distinct name once, rows hold its code."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}

    def code(self, name) -> int:
        text = name if isinstance(name, str) else ("" if name is None else str(name))
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.codes)
        return code

    def array(self) -> np.ndarray:
        out = np.empty(len(self.codes), dtype=object)
        for text, code in self.codes.items():
            out[code] = text
        return out


def _add_gpu(cols: _Columns, names: _Names, events: list) -> None:
    for e in events:
        a = e.args
        args = a if isinstance(a, _Args) else None
        cols.ts.append(e.ts)
        cols.dur.append(e.dur)
        device = args.device if args is not None and args.device is not None else e.pid
        cols.device.append(_int(device))
        stream = args.stream if args is not None and args.stream is not None else e.tid
        cols.tid.append(_int(stream))
        cols.corr.append(_int(args.correlation) if args is not None else 0)
        cols.nbytes.append(_int(args.bytes) if args is not None else 0)
        cols.name.append(names.code(e.name))


def _add_cpu(cols: _Columns, names: _Names, events: list, correlated: bool) -> None:
    for e in events:
        cols.ts.append(e.ts)
        cols.dur.append(e.dur)
        cols.pid.append(_int(e.pid, -1))
        cols.tid.append(_int(e.tid, -1))
        a = e.args
        cols.corr.append(_int(a.correlation) if correlated and isinstance(a, _Args) else 0)
        cols.name.append(names.code(e.name))


def _decode_batch(raws: list, path: str) -> list:
    text = b"[" + b",".join(raws) + b"]"
    try:
        return _BATCH.decode(text)
    except msgspec.ValidationError:  # an ``args`` that is not an object: read this batch loosely
        return [e for e in _LOOSE.decode(text)]


def _collect(raws: list, path: str) -> tuple[dict, _Names, int]:
    """Column chunks per kind (:data:`CATEGORIES`), the interned names, and how many events had
    ``ph: "X"``."""
    names = _Names()
    cols = {kind: _Columns() for kind in (KERNEL, MEMCPY, MEMSET, RUNTIME, ANNOTATION)}
    complete = 0
    capture = []
    for at in range(0, len(raws), BATCH):
        picked: dict[str, list] = {KERNEL: [], MEMCPY: [], MEMSET: [], RUNTIME: [], ANNOTATION: []}
        for e in _decode_batch(raws[at:at + BATCH], path):
            if e.ph != "X":
                continue
            complete += 1
            kind = CATEGORIES.get(e.cat) if isinstance(e.cat, str) else None
            if kind is None:
                if e.cat == "Trace" and e.pid == "Spans":
                    capture.append(e)  # the profiler's own span: the capture
                continue
            if kind == CPU_OP:
                if isinstance(e.name, str) and STEP.fullmatch(e.name):
                    picked[ANNOTATION].append(e)
                continue
            picked[kind].append(e)
        for kind in (KERNEL, MEMCPY, MEMSET):
            _add_gpu(cols[kind], names, picked[kind])
        _add_cpu(cols[RUNTIME], names, picked[RUNTIME], True)
        _add_cpu(cols[ANNOTATION], names, picked[ANNOTATION], False)
    cols["capture"] = capture
    return cols, names, complete


def _times(cols: _Columns, base: int, path: str, label: str) -> tuple[np.ndarray, np.ndarray, int]:
    """``(start, end, bad)`` ns of a kind's events (``bad``: rows without a usable ts or dur, dropped)."""
    try:
        ts, bad_ts = raws_to_ns(cols.ts)
        dur, bad_dur = raws_to_ns(cols.dur)
    except TimeTextError as exc:
        raise ProfileError(f"{path}: {label}: {exc}") from None
    keep = ~(bad_ts | bad_dur)
    start = ts + base if base else ts
    if base and ts.size and (int(ts.max()) + base > (1 << 63) - 1 - max(int(dur.max()), 0)):
        raise ProfileError(f"{path}: {label}: baseTimeNanoseconds + ts does not fit in 64-bit nanoseconds")
    return start, start + dur, keep


def _frame(cols: _Columns, names: np.ndarray, base: int, path: str, kind: str) -> tuple[pd.DataFrame, int]:
    """The events of one kind as a frame (start, end, pid, tid, device_id, correlation_id, bytes,
    name code) and how many were dropped for a missing or unusable ts/dur."""
    start, end, keep = _times(cols, base, path, KIND_LABELS[kind])
    n = len(cols)
    frame = pd.DataFrame({
        "start": start, "end": end,
        "pid": np.asarray(cols.pid, dtype=np.int64) if cols.pid else np.full(n, -1, np.int64),
        "tid": np.asarray(cols.tid, dtype=np.int64) if n else np.zeros(0, np.int64),
        "device_id": np.asarray(cols.device, dtype=np.int64) if cols.device else np.zeros(n, np.int64),
        "correlation_id": np.asarray(cols.corr, dtype=np.int64) if n else np.zeros(0, np.int64),
        "bytes": np.asarray(cols.nbytes, dtype=np.int64) if cols.nbytes else np.zeros(n, np.int64),
        "name_code": np.asarray(cols.name, dtype=np.int64) if n else np.zeros(0, np.int64),
    })
    dropped = int(n - keep.sum())
    if dropped:
        frame = frame[keep].reset_index(drop=True)
    return frame, dropped


def _named(codes: np.ndarray, names: np.ndarray, normalise=None) -> pd.Categorical:
    """A categorical of ``names[codes]`` over the distinct names used (normalised when asked)."""
    used, inverse = np.unique(codes, return_inverse=True)
    texts = names[used] if used.size else np.zeros(0, dtype=object)
    if normalise is not None:
        texts = np.array([normalise(str(t)) for t in texts], dtype=object)
    categories, remap = np.unique(texts.astype(str), return_inverse=True)
    return pd.Categorical.from_codes(remap[inverse].reshape(-1), categories=categories)


def _memcpy_kinds(names: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(copy_kind, src_kind, dst_kind)`` per memcpy row from its name (ENUM ids; -1 unknown)."""
    used, inverse = np.unique(codes, return_inverse=True)
    table = np.full((max(used.size, 1), 3), -1, dtype=np.int64)
    for i, code in enumerate(used):
        m = _MEMCPY_NAME.search(str(names[code]))
        if m:
            table[i] = (COPY_KINDS.get(m.group(1), 0), MEMORY_KINDS.get(m.group(2) or "", -1),
                        MEMORY_KINDS.get(m.group(3) or "", -1))
    rows = table[inverse.reshape(-1)] if codes.size else np.zeros((0, 3), dtype=np.int64)
    return rows[:, 0], rows[:, 1], rows[:, 2]


def _owners(gpu: pd.DataFrame, runtime: pd.DataFrame, main_pid: int) -> np.ndarray:
    """The process of each GPU event: that of the runtime call with its correlation id, else ``main_pid``."""
    corr = gpu["correlation_id"].to_numpy(np.int64)
    if runtime.empty or corr.size == 0:
        return np.full(corr.size, main_pid, dtype=np.int64)
    calls = runtime[runtime["correlation_id"] != 0].drop_duplicates("correlation_id")
    owner = pd.Series(calls["pid"].to_numpy(np.int64), index=calls["correlation_id"].to_numpy(np.int64))
    found = owner.reindex(corr).to_numpy()
    return np.where(pd.isna(found), main_pid, found).astype(np.int64)


def _main_pid(runtime: pd.DataFrame, nvtx: pd.DataFrame) -> int:
    """The trace's process: the one with the most runtime calls, else annotations, else 0."""
    for frame in (runtime, nvtx):
        pids = frame["pid"].to_numpy(np.int64) if len(frame) else np.zeros(0, np.int64)
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


def _devices(pairs: pd.DataFrame, props) -> pd.DataFrame:
    """The devices frame (:data:`~pipeline.load.gpus.DEVICE_COLUMNS`) of the (pid, device) pairs."""
    table = _device_table(props)
    rows = []
    for pid, dev in pairs.itertuples(index=False):
        entry = table.get(int(dev))
        model = board_name(entry.get("name")) if entry else ""
        sms = _int(entry.get("numSms")) if entry else 0
        if model:
            note = ""
        elif props is None:
            note = f"{NO_GPU_NAMED} (the trace has no deviceProperties)"
        else:
            note = f"the trace's deviceProperties do not name device {int(dev)} (ids {sorted(table)})"
        rows.append({"pid": int(pid), "device_id": int(dev), "gpu_key": f"pid{int(pid)}/dev{int(dev)}",
                     "gpu_model": model, "uuid": "", "bus": "", "mig": False, "sms": max(sms, 0),
                     "board_sms": max(sms, 0), "model_note": note})
    return pd.DataFrame(rows, columns=DEVICE_COLUMNS).astype(
        {"pid": "int64", "device_id": "int64", "mig": bool, "sms": "int64", "board_sms": "int64"})


def _capture(spans: list, stamps: list[np.ndarray], base: int, path: str) -> Capture:
    """The capture rows must lie in: the profiler's own ``Trace`` span (± :data:`SLACK_NS`), else
    the run of the rows' timestamps (:func:`~pipeline.load.integrity._row_extent`)."""
    if spans:
        start, end, keep = _times(_span_columns(spans), base, path, "Trace span")
        if keep.any():
            lo, hi = int(start[keep].min()), int(end[keep].max())
            return Capture(lo - SLACK_NS, hi + SLACK_NS,
                           f"{lo / 1e9:.6f}..{hi / 1e9:.6f} s on the trace's clock, per its PyTorch Profiler span")
    extent = _row_extent(stamps, None)
    if extent is None:
        return Capture(None, None, "")
    return Capture(extent[0], extent[1], f"{extent[0] / 1e9:.6f}..{extent[1] / 1e9:.6f} s on the trace's clock, "
                                         "per the other events")


def _span_columns(spans: list) -> _Columns:
    cols = _Columns()
    cols.ts = [e.ts for e in spans]
    cols.dur = [e.dur for e in spans]
    return cols


def _base_ns(raw, path: str) -> int:
    """``baseTimeNanoseconds`` as an exact int (0 when absent)."""
    if raw is None:
        return 0
    text = bytes(raw).strip().strip(b'"')
    if text in (b"", b"null"):
        return 0
    try:
        return int(text)
    except ValueError:
        raise ProfileError(f"{path}: baseTimeNanoseconds is not an integer ({text[:40].decode('utf-8', 'replace')!r})") from None


def _parse(path: str, text) -> tuple[list, Any, Any, int]:
    """``(raw events, deviceProperties, distributedInfo, base ns)`` of a trace's text."""
    try:
        top = _TOP.decode(text)
    except msgspec.ValidationError as exc:
        raise ProfileError(f"{path}: not a PyTorch profiler trace: the JSON is not an object with traceEvents "
                           f"nor a list of events ({exc})") from None
    except msgspec.DecodeError as exc:
        what = "truncated JSON (the file ends inside the trace)" if "truncated" in str(exc) else f"not valid JSON ({exc})"
        raise ProfileError(f"{path}: {what}: not a readable PyTorch profiler trace") from None
    if isinstance(top, list):
        return top, None, None, 0
    if top.traceEvents is None:
        raise ProfileError(f"{path}: not a PyTorch profiler trace: the JSON object has no traceEvents list")
    return top.traceEvents, top.deviceProperties, top.distributedInfo, _base_ns(top.baseTimeNanoseconds, path)


def _dropped_rows_warning(counts: dict[str, int]) -> list[RowWarning]:
    counts = {k: n for k, n in counts.items() if n}
    if not counts:
        return []
    total = sum(counts.values())
    code = WarningCode.DROPPED_KERNEL_ROWS if counts.get(KERNEL) else WarningCode.DROPPED_ROWS
    return [RowWarning(code, f"dropped {total} event{'s' if total > 1 else ''} without a usable ts or dur: "
                       + ", ".join(f"{n} {KIND_LABELS[k]}" for k, n in counts.items()))]


def _drop_untrustworthy(frames: dict[str, pd.DataFrame], capture: Capture, path: str) -> tuple[dict, list]:
    """Exact duplicate events (counted once) and events with end < start or far outside the capture,
    dropped and named in warnings, as the Nsight loader does (:mod:`~pipeline.load.integrity`)."""
    duplicates, owners = {}, []
    for kind, frame in frames.items():
        copies = duplicate_mask(*frame_codes(frame)) if len(frame) > 1 else np.zeros(len(frame), bool)
        duplicates[KIND_LABELS[kind]] = int(copies.sum())
        owners.append(frame["pid"].to_numpy(np.int64)[copies])
        if copies.any():
            frames[kind] = frame[~copies].reset_index(drop=True)
    warnings = duplicates_warning(duplicates)
    kernels_before = len(frames[KERNEL])
    for kind, frame in frames.items():
        starts, ends = frame["start"].to_numpy(np.int64), frame["end"].to_numpy(np.int64)
        found = impossible_rows(KIND_LABELS[kind], starts, ends, capture)
        for w in dropped_warning(found, starts, ends, capture):
            code = WarningCode.DROPPED_KERNEL_ROWS if kind == KERNEL else WarningCode.DROPPED_ROWS
            warnings.append(RowWarning(code, w.text, w.pids))
        if found.bad.any():
            frames[kind] = frame[~found.bad].reset_index(drop=True)
    if kernels_before and not len(frames[KERNEL]):
        raise ProfileError(f"{path}: all {kernels_before:,} kernel events have end < start or lie far outside the "
                           f"capture ({capture.text}): no usable kernel")
    return frames, warnings


def load_kineto(path: str, require_kernels: bool = True) -> Report:
    """Load one PyTorch profiler trace (JSON, gzip or not) into a :class:`~pipeline.model.Report`.

    Args:
        path: local path of the trace (``.json``, ``.json.gz``, ``.pt.trace.json(.gz)``).
        require_kernels: when False, a trace without kernels loads with empty ``kernels`` and
            ``devices`` instead of raising.
    Returns:
        The Report the Nsight loader would make of the same evidence (see the module doc), with
        ``meta`` = ``{"format": "kineto", "rank": ..., "world_size": ..., "base_time_ns": ...}``
        (the keys the trace gives; values as text).
    Raises:
        ProfileError: empty file, damaged or truncated gzip, not JSON or truncated JSON, JSON that is
        not a trace, a time that is not a number or does not fit int64 ns, no GPU events or no
        kernels. The message starts with the path and says why.
    """
    try:
        text = read_text(path)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {(exc.strerror or str(exc)).lower()}") from None
    raws, props, dist, base = _parse(path, text)
    cols, names_seen, complete = _collect(raws, path)
    del raws
    names = names_seen.array()
    frames, missing = {}, {}
    for kind in (KERNEL, RUNTIME, MEMCPY, MEMSET, ANNOTATION):
        frames[kind], missing[kind] = _frame(cols[kind], names, base, path, kind)
    spans = cols.pop("capture")
    del cols, text
    if not sum(len(frames[k]) + missing[k] for k in (KERNEL, MEMCPY, MEMSET)):
        raise ProfileError(f"{path}: no GPU events in this trace ({complete:,} complete events, none of category "
                           "kernel, gpu_memcpy or gpu_memset): was it profiled with ProfilerActivity.CUDA, and did "
                           "the GPU run anything while the profiler recorded?")
    if require_kernels and not len(frames[KERNEL]):
        raise ProfileError(f"{path}: no usable kernel events in this trace ({missing[KERNEL]:,} without a usable "
                           "ts or dur): nothing ran on a GPU while the profiler recorded")
    warnings = _dropped_rows_warning(missing)
    stamps = [f[c].to_numpy(np.int64) for f in frames.values() for c in ("start", "end")]
    frames, trust = _drop_untrustworthy(frames, _capture(spans, stamps, base, path), path)
    warnings += trust
    runtime_raw, nvtx_raw = frames[RUNTIME], frames[ANNOTATION]
    main_pid = _main_pid(runtime_raw, nvtx_raw)

    runtime = pd.DataFrame({c: runtime_raw[c].to_numpy(np.int64) for c in ("start", "end", "pid", "tid",
                                                                             "correlation_id")})
    runtime["name"] = _named(runtime_raw["name_code"].to_numpy(np.int64), names, normalise_api_name)

    nvtx = nvtx_raw[nvtx_raw["end"] != nvtx_raw["start"]]
    nvtx = pd.DataFrame({"start": nvtx["start"].to_numpy(np.int64), "end": nvtx["end"].to_numpy(np.int64),
                         "pid": nvtx["pid"].to_numpy(np.int64), "tid": nvtx["tid"].to_numpy(np.int64),
                         "text": names[nvtx["name_code"].to_numpy(np.int64)].astype(str)
                         if len(nvtx) else np.zeros(0, dtype=str)})

    k = frames[KERNEL]
    kernels = pd.DataFrame({"start": k["start"].to_numpy(np.int64), "end": k["end"].to_numpy(np.int64),
                            "pid": _owners(k, runtime, main_pid), "device_id": k["device_id"].to_numpy(np.int64),
                            "stream_id": k["tid"].to_numpy(np.int64),
                            "correlation_id": k["correlation_id"].to_numpy(np.int64)})
    kernels["name"] = _named(k["name_code"].to_numpy(np.int64), names)

    parts = []
    for kind in (MEMCPY, MEMSET):
        c = frames[kind]
        codes = c["name_code"].to_numpy(np.int64)
        if kind == MEMCPY:
            copy_kind, src_kind, dst_kind = _memcpy_kinds(names, codes)
        else:
            copy_kind = src_kind = dst_kind = np.full(len(c), -1, dtype=np.int64)
        parts.append(pd.DataFrame({
            "start": c["start"].to_numpy(np.int64), "end": c["end"].to_numpy(np.int64),
            "pid": _owners(c, runtime, main_pid), "device_id": c["device_id"].to_numpy(np.int64),
            "stream_id": c["tid"].to_numpy(np.int64), "kind": kind, "copy_kind": copy_kind,
            "bytes": c["bytes"].to_numpy(np.int64), "src_kind": src_kind, "dst_kind": dst_kind,
            "correlation_id": c["correlation_id"].to_numpy(np.int64)}))
    copies = pd.concat(parts, ignore_index=True).astype({"kind": object})

    untraced = lost_launches(kernels, copies, runtime)
    copies = copies.drop(columns="correlation_id")
    from .processes import device_pairs, gpu_key_column

    pair_codes, pairs = device_pairs(kernels)
    devices = _devices(pairs, props)
    kernels["gpu_key"] = gpu_key_column(devices, pairs, pair_codes)
    kernels = _group_by_gpu(kernels)
    runtime = _in_start_order(runtime)
    if not copies.empty:
        keys = devices.set_index(["pid", "device_id"])["gpu_key"]
        copies["gpu_key"] = keys.reindex(pd.MultiIndex.from_frame(copies[["pid", "device_id"]])).to_numpy()
    else:
        copies["gpu_key"] = pd.Series(dtype=object)
    meta = {"format": "kineto"}
    if isinstance(dist, dict):
        for key in ("rank", "world_size"):
            if isinstance(dist.get(key), int):
                meta[key] = str(dist[key])
    if base:
        meta["base_time_ns"] = str(base)
    return Report(path=path, kernels=kernels, runtime=runtime, copies=copies, nvtx=nvtx, devices=devices,
                  overhead=no_overhead(), untraced=untraced if len(untraced) else no_untraced(), meta=meta,
                  diagnostics=[], warnings=warnings)
