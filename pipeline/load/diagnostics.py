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
from .processes import pid_of
from .sqlite import text_rows
from .tables import DIAGNOSTIC_TABLE, META_TABLES, Schema

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


def load_diagnostics(schema: Schema) -> list[str]:
    cols = schema.columns(DIAGNOSTIC_TABLE)
    if not cols or "severity" not in cols or "text" not in cols:
        return []
    rows = text_rows(schema.con, f"SELECT severity, text FROM {DIAGNOSTIC_TABLE} ORDER BY rowid")
    texts = [(severity, str(text).strip()) for severity, text in rows if text is not None]
    # Warnings and errors; and lost-event reports at any severity (they make the trace incomplete).
    return [text for severity, text in texts if severity in DIAGNOSTIC_WARNING_LEVELS or reports_lost_events(text)]


def diagnostic_warnings(texts: list[str]) -> list[RowWarning]:
    """One row warning per DIAGNOSTIC_EVENT text (as :func:`load_diagnostics` keeps them), quoted
    after :data:`~pipeline.model.DIAGNOSTIC_PREFIX`: code ``LOST_EVENTS`` when the text says events
    were lost or dropped (:func:`reports_lost_events`; the row becomes ``partial``), else ``DIAGNOSTIC``."""
    return [RowWarning(WarningCode.LOST_EVENTS if reports_lost_events(text) else WarningCode.DIAGNOSTIC,
                       f"{DIAGNOSTIC_PREFIX}{text}") for text in texts]


def lost_event_marks(schema: Schema) -> pd.DataFrame:
    """Where Nsight Systems said it lost events: one :data:`~pipeline.model.UNTRACED_COLUMNS` row
    (kind ``lost-events``, ``start``..``end`` = the 1 ns at its timestamp) per DIAGNOSTIC_EVENT whose
    text reports lost or dropped events (:func:`reports_lost_events`) and whose timestamp is on the
    trace's clock; ``pid`` is its process, -1 when it names none or only the session (then it concerns
    every GPU)."""
    cols = schema.columns(DIAGNOSTIC_TABLE)
    if not {"timestamp", "text"} <= set(cols):
        return no_untraced()
    kind = "timestampType" if "timestampType" in cols else str(TARGET_TIMESTAMP)
    pid = "globalPid" if "globalPid" in cols else "NULL"
    # pid 0: the session's own diagnostics (globalPid names no process), about every GPU like no pid at all
    rows = [(int(t), (int(pid_of(g)) or -1) if g is not None else -1, str(text)) for t, g, text in schema.con.execute(
        f"SELECT timestamp, {pid}, text FROM {DIAGNOSTIC_TABLE} WHERE timestamp IS NOT NULL AND text IS NOT NULL "
        f"AND {kind} = {TARGET_TIMESTAMP} ORDER BY rowid") if reports_lost_events(str(text).strip())]
    if not rows:
        return no_untraced()
    t = np.array([r[0] for r in rows], dtype=np.int64)
    return pd.DataFrame({"kind": "lost-events", "pid": np.array([r[1] for r in rows], dtype=np.int64),
                         "correlation_id": np.zeros(t.size, np.int64), "name": DIAGNOSTIC_TABLE,
                         "call_start": t, "call_end": t, "start": t, "end": t + 1})[list(UNTRACED_COLUMNS)]
