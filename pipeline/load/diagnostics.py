"""What the export says about itself: metadata and DIAGNOSTIC_EVENT texts (lost events).

Whether a diagnostic says the trace is incomplete is read from Nsight Systems' own text
(the export has no code for it); the warning the loader then attaches carries a
:class:`~pipeline.model.WarningCode`, and a row's status comes from that code.
"""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..model import DIAGNOSTIC_PREFIX, UNTRACED_COLUMNS, RowWarning, WarningCode, no_untraced
from .queries import pid_of
from .sqlite import text_rows
from .tables import DIAGNOSTIC_TABLE, META_TABLES, SYSTEM_ENV_TABLE, Schema

#: DIAGNOSTIC_EVENT severity levels that are warnings or errors (ENUM_DIAGNOSTIC_SEVERITY_LEVEL).
DIAGNOSTIC_WARNING_LEVELS = (2, 3)
#: DIAGNOSTIC_EVENT texts saying the trace itself is incomplete. Nsight Systems writes, e.g.,
#: "CUPTI dropped 1234 records. Some CUPTI events might be missing.", "Couldn't allocate CUPTI
#: buffers 3 times.Some CUPTI events might be missing.", "Number of incomplete CUPTI events
#: dropped: 12. ...", "Some events (42) were lost. ...", "Reading events from qdstrm: ... : Lost
#: events = 7" (texts from the nsys binaries), at warning or info severity.
LOST_EVENTS = re.compile(r"\blost\b|\bdropped\b|\bmissing\b|overflow|discard", re.IGNORECASE)
#: ENUM_DIAGNOSTIC_TIMESTAMP_SOURCE id of timestamps on the trace's own clock (2 is the host's).
TARGET_TIMESTAMP = 1
#: ... unless the count it names is zero ("dropped 0 records", "Lost events = 0", "(0) were lost").
_NO_LOSS = re.compile(r"(?:dropped|lost(?: events)?)\s*[:=]?\s*0\b|\(\s*0\s*\)\s*were lost", re.IGNORECASE)


def reports_lost_events(text: str) -> bool:
    """True when a DIAGNOSTIC_EVENT text says events were lost or dropped (a non-zero count)."""
    return bool(LOST_EVENTS.search(text)) and not _NO_LOSS.search(text)


def load_meta(schema: Schema) -> dict:
    """Export metadata (name -> value) from META_DATA_EXPORT or the older EXPORT_META_DATA; {} when
    the export has neither (Nsight Systems 2020.x). Text that is not UTF-8 is kept, with
    replacement characters."""
    for table in META_TABLES:
        cols = schema.columns(table)
        if {"name", "value"} <= set(cols):
            return {str(k): str(v) for k, v in text_rows(schema.con, f"SELECT name, value FROM {table}")}
    return {}


#: How a capture host running under Windows' WSL2 names itself: its kernel release
#: (``6.6.87.2-microsoft-standard-WSL2``, Nsight Systems' SoftwareReleaseVersion), or ``WSL2`` in words.
WSL = re.compile(r"microsoft-standard-WSL|\bWSL2?\b", re.IGNORECASE)


def wsl_evidence(schema: Schema) -> str | None:
    """Where the export says its capture ran under WSL2: ``TARGET_INFO_SYSTEM_ENV SoftwareReleaseVersion
    6.6.87.2-microsoft-standard-WSL2`` (the first property of TARGET_INFO_SYSTEM_ENV, then of the export
    metadata, whose value :data:`WSL` matches); None when it says nothing of it."""
    for table in (SYSTEM_ENV_TABLE, *META_TABLES):
        if {"name", "value"} <= set(schema.columns(table)):
            for name, value in text_rows(schema.con, f"SELECT name, value FROM {table} WHERE value LIKE '%wsl%'"):
                if WSL.search(str(value)):
                    value = str(value)
                    return f"{table} {name} {value if len(value) <= 80 else value[:79] + '…'}"
    return None


#: Topics of DIAGNOSTIC_EVENT texts about what gpu-idle never reads (CPU IP/backtrace sampling, context
#: switches, perf, OS runtime libraries, ftrace, symbol resolution): "Sampling events were lost in the
#: interval ...", "Some events (42) were lost. Certain charts (including CPU utilization) ... decrease
#: sampling rate", "FTrace: Cpu3 lost event field ...", "perf event paranoid level is 4", "No OS runtime
#: libraries events collected. ...", "Number of used Debuginfod cached files: 0." (texts from the nsys
#: binaries). ENUM_DIAGNOSTIC_SOURCE_TYPE (Injection, Daemon, Analysis) names the part of Nsight Systems
#: that wrote a text, not what it is about, so the text decides.
OTHER_TRACES = re.compile(r"\bsampl(?:e|es|ing)\b|\bCPU\b|context switch|\bperf\b|paranoid|OS runtime|\bOSRT\b|"
                          r"ftrace|debuginfod|\bsymbols?\b|backtrace|thread states?", re.IGNORECASE)
#: Topics of the GPU trace gpu-idle reads (CUDA kernels, copies and API calls, CUPTI, NVTX, NCCL).
GPU_TRACE = re.compile(r"\bCUDA\b|CUPTI|\bGPUs?\b|NVTX|NCCL|Unified Memory", re.IGNORECASE)


def bears_on_gpu_trace(text: str) -> bool:
    """True unless a DIAGNOSTIC_EVENT text is only about traces gpu-idle does not read: it names one of
    :data:`OTHER_TRACES` and none of :data:`GPU_TRACE`. A text naming neither ("Lost events = 7") may be
    about the GPU trace and is kept."""
    return bool(GPU_TRACE.search(text)) or not OTHER_TRACES.search(text)


def load_diagnostics(schema: Schema) -> list[dict]:
    """The DIAGNOSTIC_EVENT rows a GPU's row may quote, in file order: warnings and errors, and
    lost-event reports at any severity (they make the trace incomplete). Each is a dict ``{"pid": int,
    "text": str}`` (JSON as it is: the columnar cache keeps it); ``pid`` is the process that said it,
    0 for the session itself (a globalPid of no process, NULL, or an export without the column).
    :func:`diagnostic_warnings` picks a GPU's."""
    cols = schema.columns(DIAGNOSTIC_TABLE)
    if not cols or "severity" not in cols or "text" not in cols:
        return []
    pid = "globalPid" if "globalPid" in cols else "NULL"
    rows = text_rows(schema.con, f"SELECT severity, {pid}, text FROM {DIAGNOSTIC_TABLE} ORDER BY rowid")
    return [{"pid": int(pid_of(g)) if g is not None else 0, "text": text}
            for severity, g, text in ((s, g, str(t).strip()) for s, g, t in rows if t is not None)
            if severity in DIAGNOSTIC_WARNING_LEVELS or reports_lost_events(text)]


def _concerns(diagnostic_pid: int, pids) -> bool:
    """Whether a diagnostic of process ``diagnostic_pid`` (0: the session) is about a GPU of ``pids``
    (None: any GPU)."""
    return pids is None or diagnostic_pid == 0 or diagnostic_pid in pids


def diagnostic_warnings(diagnostics: list, pids: tuple | None = None) -> list[RowWarning]:
    """The row warnings of one GPU quoting DIAGNOSTIC_EVENT texts (as :func:`load_diagnostics` keeps them;
    a plain text counts as the session's): those of its processes ``pids`` (None: every process) and of
    the session, that bear on the GPU trace (:func:`bears_on_gpu_trace`); each distinct text once, in the
    order first said, after :data:`~pipeline.model.DIAGNOSTIC_PREFIX`, with "(reported N times)" when said
    N > 1 times. Code ``LOST_EVENTS`` when the text says events were lost or dropped
    (:func:`reports_lost_events`; the row becomes ``partial``), else ``DIAGNOSTIC``."""
    counts: dict[str, int] = {}
    for d in diagnostics:
        pid, text = (d["pid"], d["text"]) if isinstance(d, dict) else (0, str(d))
        if _concerns(pid, pids) and bears_on_gpu_trace(text):
            counts[text] = counts.get(text, 0) + 1
    return [RowWarning(WarningCode.LOST_EVENTS if reports_lost_events(text) else WarningCode.DIAGNOSTIC,
                       f"{DIAGNOSTIC_PREFIX}{text}" + (f" (reported {n} times)" if n > 1 else ""))
            for text, n in counts.items()]


def lost_event_marks(schema: Schema) -> pd.DataFrame:
    """Where Nsight Systems said it lost events: one :data:`~pipeline.model.UNTRACED_COLUMNS` row
    (kind ``lost-events``, ``start``..``end`` = the 1 ns at its timestamp) per DIAGNOSTIC_EVENT whose
    text reports lost or dropped events (:func:`reports_lost_events`) of the GPU trace
    (:func:`bears_on_gpu_trace`: not lost CPU samples) and whose timestamp is on the trace's clock;
    ``pid`` is its process, -1 when it names none or only the session (then it concerns every GPU)."""
    cols = schema.columns(DIAGNOSTIC_TABLE)
    if not {"timestamp", "text"} <= set(cols):
        return no_untraced()
    kind = "timestampType" if "timestampType" in cols else str(TARGET_TIMESTAMP)
    pid = "globalPid" if "globalPid" in cols else "NULL"
    # pid 0: the session's own diagnostics (globalPid names no process), about every GPU like no pid at all
    rows = [(int(t), (int(pid_of(g)) or -1) if g is not None else -1, str(text)) for t, g, text in schema.con.execute(
        f"SELECT timestamp, {pid}, text FROM {DIAGNOSTIC_TABLE} WHERE timestamp IS NOT NULL AND text IS NOT NULL "
        f"AND {kind} = {TARGET_TIMESTAMP} ORDER BY rowid")
        if reports_lost_events(str(text).strip()) and bears_on_gpu_trace(str(text).strip())]
    if not rows:
        return no_untraced()
    t = np.array([r[0] for r in rows], dtype=np.int64)
    return pd.DataFrame({"kind": "lost-events", "pid": np.array([r[1] for r in rows], dtype=np.int64),
                         "correlation_id": np.zeros(t.size, np.int64), "name": DIAGNOSTIC_TABLE,
                         "call_start": t, "call_end": t, "start": t, "end": t + 1})[list(UNTRACED_COLUMNS)]
