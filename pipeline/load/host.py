"""The host a capture ran on, and whether its times are on that host's clock
(docs/definitions.md#collective-wait-across-files).

Files of one job on the same host share one clock, so their collective calls can be matched as within one
report (:mod:`pipeline.fleet.crosswait`). What a file says of its host:

* an Nsight Systems export: ``TARGET_INFO_SYSTEM_ENV`` ``Hostname`` (else ``HOSTNAME=`` in the captured
  process's environment, ``META_DATA_CAPTURE``). Its rows are on the host's clock only when they are timed
  on the clock the export states its capture start on (``ANALYSIS_DETAILS.startTime`` or
  ``TARGET_INFO_SESSION_START_TIME.systemClockNs``, a positive time): rows that count from the capture's
  start (older exports) or a capture start that is not stated say no shared clock, and no host is given
  (the reason is in ``host_source``);
* a PyTorch profiler trace: its top-level ``host_name`` (or ``hostname``), as Meta's profiler writes it;
  the open-source profiler writes none, so most traces name no host. Its times are always on its host's clock
  (Unix-epoch time, :mod:`pipeline.load.kineto`).

Nothing else is guessed (a file name, a process id). A file that names no host is on the clock of the node a
``labels:`` rule gives it (the row's ``node``, :mod:`pipeline.fleet.crosswait`) unless ``host_source`` says its
rows are not timed on a host's clock (:data:`NOT_ON_HOST_CLOCK`: an export whose rows count from its capture's
start, named host or not); else it is on no known clock.
"""
from __future__ import annotations

from .integrity import EARLIEST_ROW, ROWS_START_WORDS, UNFIT
from .sqlite import text_rows
from .tables import ANALYSIS_DETAILS_TABLE, SESSION_START_TABLE, SYSTEM_ENV_TABLE, Schema

#: ``meta`` keys: the host name, and where it was read (or why no host is given).
HOST, HOST_SOURCE = "host", "host_source"
#: Longest host name kept (a longer text is cut there).
_MAX = 128
#: The capture-start sources whose time is on the host's clock (:func:`pipeline.load.integrity.capture_start`).
_HOST_CLOCK = (f"{ANALYSIS_DETAILS_TABLE}.startTime", f"{SESSION_START_TABLE}.systemClockNs")


def _clean(value) -> str:
    text = "" if value is None else str(value).strip()
    return text[:_MAX] if text and text.isprintable() else ""


def export_host(schema: Schema) -> tuple[str, str]:
    """``(host name, where read)`` of an Nsight Systems export (module doc); ``("", "")`` when it names none."""
    if {"name", "value"} <= set(schema.columns(SYSTEM_ENV_TABLE)):
        for _, value in text_rows(schema.con, f"SELECT name, value FROM {SYSTEM_ENV_TABLE} WHERE name = 'Hostname'"):
            if _clean(value):
                return _clean(value), f"{SYSTEM_ENV_TABLE} Hostname"
    if {"name", "value"} <= set(schema.columns("META_DATA_CAPTURE")):
        for _, value in text_rows(schema.con, "SELECT name, value FROM META_DATA_CAPTURE "
                                              "WHERE name LIKE '%:ENVIRONMENT_VARIABLE' AND value LIKE 'HOSTNAME=%'"):
            if _clean(str(value).partition("=")[2]):
                return _clean(str(value).partition("=")[2]), "HOSTNAME in the capture's process environment"
    return "", ""


def on_host_clock(start_ns: int | None, start_source: str) -> bool:
    """Whether an export's rows are timed on its host's clock: its timeline zero (``start_ns``,
    ``start_source``: :func:`pipeline.load.integrity.capture_start`) is a stated capture start at a positive
    time, or the rows' own start before such a stated one."""
    if not start_ns or start_ns <= 0 or start_source == EARLIEST_ROW or UNFIT in start_source:
        return False
    return start_source in _HOST_CLOCK or (start_source.startswith(ROWS_START_WORDS)
                                           and any(s in start_source for s in _HOST_CLOCK))


#: What :data:`HOST_SOURCE` says of an export whose rows are not timed on a host's clock (each file its own zero):
#: no host, and no node label, puts it on one clock with another file.
NOT_ON_HOST_CLOCK = "the rows are not timed on the host's clock"


def with_export_host(meta: dict, schema: Schema, start_ns: int | None, start_source: str) -> dict:
    """``meta`` with :data:`HOST` and :data:`HOST_SOURCE` of an export (:func:`export_host`): the host only
    when its rows are on the host's clock (:func:`on_host_clock`), else only why not in :data:`HOST_SOURCE`
    (:data:`NOT_ON_HOST_CLOCK`, whether or not the export names a host)."""
    host, source = export_host(schema)
    if not on_host_clock(start_ns, start_source):
        named = f"{source} names {host}, but" if host else "the export names no host, and"
        return {**meta, HOST_SOURCE: f"{named} {NOT_ON_HOST_CLOCK} (their zero: {start_source or 'unknown'})"}
    if not host:
        return meta
    return {**meta, HOST: host, HOST_SOURCE: source}


def trace_host(top) -> tuple[str, str]:
    """``(host name, where read)`` of a PyTorch profiler trace's top-level object (its ``host_name`` or
    ``hostname``); ``("", "")`` when it names none."""
    for key in ("host_name", "hostname"):
        value = _clean(getattr(top, key, None)) if not isinstance(getattr(top, key, None), (dict, list)) else ""
        if value:
            return value, f"the trace's {key}"
    return "", ""
