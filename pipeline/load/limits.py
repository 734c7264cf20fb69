"""What reading one report may cost, stated once: how much text a profile may hand over, how long
reading it may take, and how many bytes a gzip trace may inflate to.

* Text: a kernel name, NVTX text or trace event name longer than :data:`MAX_TEXT_CHARS` characters is
  cut to its first :data:`MAX_TEXT_CHARS` characters followed by ``… (N characters, cut at 4096)``
  (:func:`cut_text`; in SQL, :func:`cut_sql`, so the full text never leaves SQLite). A real name is a
  few hundred characters at most (C++ templates reach a few thousand); a 10 MB one is an attack or
  damage, and would otherwise be copied into every page, table and record that names the kernel.
* Time: reading an export stops after ``export.read_timeout_s`` seconds (:class:`Deadline`): the
  queries on the loader's own sqlite3 connection through SQLite's progress handler, the bulk reads
  (ADBC, whose SQLite driver cannot be cancelled: they only ever scan real tables, views being
  refused first, :class:`~pipeline.load.tables.Schema`) between two batches, a trace between two
  batches of events. The report then is an error row saying so (:class:`ReadTimeout`).
* Inflating: a gzip trace is inflated to at most ``max_inflated`` bytes (the worker's memory limit /
  ``dask.memory_factor``, the budget its size was checked against), whatever its trailer says.

The engine states the limits of the report it loads with :func:`reading_under`
(:func:`pipeline.work.tasks.load_report_for`); a loader called directly gets the configuration's
defaults (:func:`current`).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time

#: Characters of one text from a profile (kernel name, NVTX text, trace event name) kept as read.
MAX_TEXT_CHARS = 4096
ELLIPSIS = "\u2026"
#: SQLite virtual-machine steps between two looks at the clock (:meth:`Deadline.install`): a few
#: microseconds of work each, so the check costs nothing measurable and fires within milliseconds.
PROGRESS_STEPS = 20_000


def cut_note(length: int) -> str:
    """What follows the kept characters of a text of ``length`` characters that was cut."""
    return f"{ELLIPSIS} ({length} characters, cut at {MAX_TEXT_CHARS})"


def cut_text(text: str) -> str:
    """``text`` as the loader keeps it: unchanged up to :data:`MAX_TEXT_CHARS` characters, else its
    first :data:`MAX_TEXT_CHARS` characters and :func:`cut_note` (its full length)."""
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + cut_note(len(text))


def cut_sql(expr: str) -> str:
    """An SQL expression giving column (or expression) ``expr`` as :func:`cut_text` gives a text, and
    any other value (an integer StringIds id, NULL) unchanged: SQLite cuts the text, so a long one is
    never copied out of the database whole. A BLOB (a damaged or edited export) is read as the text
    its bytes spell (cut alike; bytes that are not UTF-8 become replacement characters as they are
    read, :func:`pipeline.load.sqlite.text_rows`), never as its size or its bytes' ``repr``. An integer (the
    StringIds id of nearly every row) is given at once: one ``typeof`` per row, not the nested cases' five."""
    head, tail = cut_note(0).split("0", 1)
    text = f"(CASE WHEN typeof({expr}) = 'blob' THEN CAST({expr} AS TEXT) ELSE {expr} END)"
    return (f"CASE WHEN typeof({expr}) = 'integer' THEN {expr} "
            f"WHEN typeof({text}) = 'text' AND length({text}) > {MAX_TEXT_CHARS} "
            f"THEN substr({text}, 1, {MAX_TEXT_CHARS}) || '{head}' || length({text}) || '{tail}' ELSE {text} END")


class ReadTimeout(Exception):
    """Reading a report took longer than its time bound (the message says which, and what to do)."""


class Deadline:
    """The time bound of reading one report: ``seconds`` from now (None: no bound).

    :meth:`check` raises :class:`ReadTimeout` once it has passed; :meth:`install` makes SQLite stop a
    query of a ``sqlite3`` connection then (it raises ``sqlite3.OperationalError: interrupted``, which
    the loader restates with :meth:`error` when :meth:`expired`)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.at = None if seconds is None else time.monotonic() + seconds

    def expired(self) -> bool:
        """True once the bound has passed."""
        return self.at is not None and time.monotonic() >= self.at

    def error(self) -> ReadTimeout:
        """The :class:`ReadTimeout` of this bound (its message, without the report's path)."""
        return ReadTimeout(f"reading stopped after {self.seconds:g} s (export.read_timeout_s): the export takes "
                           "longer than that to read: a table made never to end, or a very large export on a slow "
                           "disk; for a real export that needs longer, raise export.read_timeout_s")

    def check(self) -> None:
        """Raise :class:`ReadTimeout` when the bound has passed."""
        if self.expired():
            raise self.error()

    def install(self, con) -> None:
        """Make SQLite interrupt any query of ``con`` (a ``sqlite3.Connection``) once the bound has passed."""
        if self.at is not None:
            con.set_progress_handler(self._progress, PROGRESS_STEPS)

    def _progress(self) -> int:
        return 1 if self.expired() else 0


@dataclasses.dataclass(frozen=True)
class ReadLimits:
    """The limits of reading one report: ``timeout_s`` (seconds; None: no bound) and ``max_inflated``
    (bytes a gzip trace may inflate to; None: no bound)."""

    timeout_s: float | None = None
    max_inflated: int | None = None

    def deadline(self) -> Deadline:
        """A :class:`Deadline` of ``timeout_s`` from now."""
        return Deadline(self.timeout_s)


_LIMITS: contextvars.ContextVar[ReadLimits | None] = contextvars.ContextVar("gpu_idle_read_limits", default=None)


@contextlib.contextmanager
def reading_under(limits: ReadLimits):
    """Within the block, the loaders on this thread read under ``limits`` (:func:`current`)."""
    token = _LIMITS.set(limits)
    try:
        yield
    finally:
        _LIMITS.reset(token)


def current() -> ReadLimits:
    """The limits stated by the innermost :func:`reading_under` on this thread, else the configuration's
    defaults (``export.read_timeout_s``; no inflate bound: no worker memory limit is known)."""
    limits = _LIMITS.get()
    if limits is None:
        from ..config import ExportConfig

        limits = ReadLimits(timeout_s=ExportConfig.read_timeout_s)
    return limits
