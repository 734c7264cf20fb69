"""Reading an SQLite export: strictly read-only, checked for truncation, tables in parallel.

The file is opened read-only and immutable (``mode=ro&immutable=1`` URI): nothing is
ever written into a user's profile, not even an index. Immutable means SQLite looks at no
sidecar and no lock, so the file opened must hold the committed state by itself: the loader
opens what :func:`pipeline.load.snapshot.committed_state` gives it. Large tables are read in rowid
ranges on threads, each with its own ADBC connection, straight into Arrow.
"""
from __future__ import annotations

import os
import sqlite3
import urllib.parse

import pandas as pd

from ..model import ProfileError
from .tables import Schema


def readonly_uri(path: str) -> str:
    """SQLite URI that opens ``path`` read-only and immutable (no locks, no journal, no writes)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def connect_readonly(path: str, shown: str | None = None) -> sqlite3.Connection:
    """Open ``path`` read-only and immutable; raises :class:`ProfileError` whose message starts
    with ``shown`` (default ``path``: the name the user gave, when ``path`` is a private copy).

    Immutable means SQLite ignores sidecars and locks: open only a file that holds the committed
    state by itself (:func:`pipeline.load.snapshot.committed_state` gives one)."""
    name = shown or path
    if not os.path.exists(path):
        raise ProfileError(f"{name}: file not found")
    if os.path.getsize(path) == 0:
        raise ProfileError(f"{name}: empty file (0 bytes), not an SQLite export")
    _check_not_truncated(path, name)
    try:
        con = sqlite3.connect(readonly_uri(path), uri=True)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{name}: not a readable SQLite database ({exc})") from exc
    return con


_SQLITE_MAGIC = b"SQLite format 3\x00"


def _check_not_truncated(path: str, name: str) -> None:
    """Raise :class:`ProfileError` when an SQLite file is shorter than its own header says.

    The 100-byte database header holds the page size (offset 16) and, when the
    "version-valid-for" number (offset 92) equals the change counter (offset 24),
    the database size in pages (offset 28). A copy or download cut short is
    shorter than ``page size x pages``; SQLite itself would only say "database
    disk image is malformed", or nothing until a query reaches a missing page.
    Files that do not start with the SQLite magic are left to SQLite to reject. Messages name ``name``.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        header = fh.read(100)
    if not header.startswith(_SQLITE_MAGIC):
        return
    if len(header) < 100:
        raise ProfileError(f"{name}: truncated SQLite file ({size:,} bytes, shorter than the 100-byte "
                           "SQLite header); the copy or download was cut short")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    change_counter = int.from_bytes(header[24:28], "big")
    pages = int.from_bytes(header[28:32], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    if pages and valid_for == change_counter and size < page_size * pages:
        raise ProfileError(
            f"{name}: truncated SQLite file ({size:,} bytes, but its header says {page_size * pages:,}: "
            f"{pages:,} pages of {page_size:,} bytes); the copy or download was cut short")


def text_rows(con: sqlite3.Connection, sql: str) -> list[tuple]:
    """Every row of ``sql`` on ``con``. Text that is not valid UTF-8 (real exports have it: a
    Windows user name in the export metadata) is decoded with replacement characters instead of
    failing the whole report. Raises ``sqlite3.DatabaseError`` for anything else."""
    try:
        return con.execute(sql).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
    saved = con.text_factory
    con.text_factory = lambda raw: raw.decode("utf-8", "replace")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.text_factory = saved


def read_frame(schema: "Schema", sql: str) -> pd.DataFrame:
    """Run one (small) query through :func:`_fetch` and return a frame."""
    return _fetch(schema.uri, sql).to_pandas()


#: Tables with fewer rows than this are read by one query (splitting would cost more than it saves).
SPLIT_MIN_ROWS = 250_000


def read_threads() -> int:
    """Threads for bulk reads: the CPUs this process may use, at most 4."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return max(1, min(4, cpus))


def _rowid_range(schema: Schema, table: str) -> tuple[int, int] | None:
    """``(min rowid, max rowid)`` of ``table`` (two b-tree lookups, no scan); None when empty
    or the table has no rowid."""
    try:
        low = schema.con.execute(f"SELECT min(rowid) FROM {table}").fetchone()[0]
        high = schema.con.execute(f"SELECT max(rowid) FROM {table}").fetchone()[0]
    except sqlite3.DatabaseError:
        return None  # WITHOUT ROWID table: read it whole
    return None if low is None or high is None else (int(low), int(high))


def split_queries(schema: Schema, table: str, sql: str, parts: int) -> list[str]:
    """``sql`` (a ``SELECT ... FROM table`` without WHERE) as up to ``parts`` queries over
    consecutive rowid ranges, each of at least :data:`SPLIT_MIN_ROWS` rowids. Their results,
    concatenated in order, are the rows of ``sql`` in the same (rowid) order."""
    span = _rowid_range(schema, table) if parts > 1 else None
    if span is None:
        return [sql]
    low, high = span
    parts = max(1, min(parts, (high - low + 1) // SPLIT_MIN_ROWS))
    if parts == 1:
        return [sql]
    edges = [low + (high - low + 1) * i // parts for i in range(parts)] + [high + 1]
    return [f"{sql} WHERE rowid >= {a} AND rowid < {b}" for a, b in zip(edges, edges[1:])]


def _fetch(uri: str, sql: str):
    """One query on its own ADBC connection, as an Arrow table (the driver fills Arrow
    columns in C without holding the GIL, so several run at once on threads).

    The driver manager's low-level objects are used, not its DB-API module: that one imports
    ``pyarrow.dataset`` (and looks for polars) on first use, ~40 ms of every run's start-up."""
    import adbc_driver_manager
    import adbc_driver_sqlite
    import pyarrow as pa

    try:
        with adbc_driver_sqlite.connect(uri) as db, adbc_driver_manager.AdbcConnection(db) as con, \
                adbc_driver_manager.AdbcStatement(con) as statement:
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            return pa.RecordBatchReader.from_stream(stream).read_all()
    except Exception as exc:  # the ADBC driver's own DatabaseError/OperationalError
        raise sqlite3.DatabaseError(f"{type(exc).__name__}: {exc}") from exc


def read_tables(schema: Schema, jobs: dict[str, tuple[str, str]], threads: int | None = None) -> dict:
    """Read several tables at once: ``{name: (table, sql)}`` -> ``{name: pyarrow.Table}``.

    Each large table is split by rowid (:func:`split_queries`) and every piece runs on a
    thread with its own read-only connection; pieces are concatenated in rowid order, so
    the rows are those of ``sql`` in the same order. Raises ``sqlite3.DatabaseError``.
    """
    import pyarrow as pa

    threads = threads or read_threads()
    pieces = [(name, q) for name, (table, sql) in jobs.items() for q in split_queries(schema, table, sql, threads)]
    if len(pieces) <= 1 or threads == 1:
        results = [_fetch(schema.uri, q) for _, q in pieces]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(pieces))) as pool:
            results = list(pool.map(lambda piece: _fetch(schema.uri, piece[1]), pieces))
    out: dict = {}
    for (name, _), table in zip(pieces, results):
        out.setdefault(name, []).append(table)
    return {name: (tables[0] if len(tables) == 1 else pa.concat_tables(tables)) for name, tables in out.items()}
