"""Reading an SQLite export: strictly read-only, checked for truncation, tables in parallel.

The file is opened read-only and immutable (``mode=ro&immutable=1`` URI): nothing is
ever written into a user's profile, not even an index. Immutable means SQLite looks at no
sidecar and no lock, so the file opened must hold the committed state by itself: the loader
opens what :func:`pipeline.snapshot.committed_state` gives it. Large tables are read in rowid
ranges on threads, each with its own ADBC connection, straight into Arrow.

Reading has a time bound, the schema's :class:`~pipeline.load.limits.Deadline`: SQLite's progress
handler stops the queries of the schema's own sqlite3 connection; the ADBC driver cannot be cancelled,
so the bulk reads only scan tables (never a view: :class:`~pipeline.load.tables.Schema` refuses them)
and look at the clock between two batches (:class:`~pipeline.load.limits.ReadTimeout`).
"""
from __future__ import annotations

import functools
import os
import re
import sqlite3
import threading
import urllib.parse
from typing import TYPE_CHECKING

import numpy as np

from . import btree
from .limits import ReadTimeout
from .tables import Schema

if TYPE_CHECKING:  # annotations only
    import pandas as pd

# pandas and pipeline.model (which imports pandas) are imported where used: the bench's reader
# reference (bench/run.py) reads the columns with this module in a process that imports no more.


#: Values this process read out of SQLite, per table (:func:`decoded`): the bench prints them beside the
#: rows each table holds (issue 44: decode only what is used).
_DECODED: dict[str, int] = {}
_DECODED_LOCK = threading.Lock()
_FROM = re.compile(r"\bFROM\s+(\w+)", re.IGNORECASE)


@functools.lru_cache(maxsize=256)
def _table_of(sql: str) -> str:
    """The table ``sql`` reads (its first ``FROM``), ``?`` when none is found; looked up once per query."""
    found = _FROM.search(sql)
    return found.group(1) if found else "?"


def count_decoded(sql: str, values: int) -> None:
    """Add ``values`` (rows x columns a query over ``sql``'s table gave) to :func:`decoded`."""
    table = _table_of(sql)
    with _DECODED_LOCK:
        _DECODED[table] = _DECODED.get(table, 0) + values


def decoded(reset: bool = False) -> dict[str, int]:
    """Table -> values read out of SQLite by this process (rows x columns of every loader query on it; a
    query's own work inside SQLite, as the rows a ``DISTINCT`` scans, is not counted); ``reset``: start again."""
    with _DECODED_LOCK:
        out = dict(_DECODED)
        if reset:
            _DECODED.clear()
    return out


def readonly_uri(path: str) -> str:
    """SQLite URI that opens ``path`` read-only and immutable (no locks, no journal, no writes)."""
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro&immutable=1"


def connect_readonly(path: str, shown: str | None = None) -> sqlite3.Connection:
    """Open ``path`` read-only and immutable; raises :class:`ProfileError` whose message starts
    with ``shown`` (default ``path``: the name the user gave, when ``path`` is a private copy).

    Immutable means SQLite ignores sidecars and locks: open only a file that holds the committed
    state by itself (:func:`pipeline.snapshot.committed_state` gives one)."""
    from ..model import ProfileError

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
    from ..model import ProfileError

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


def text_rows(con: sqlite3.Connection, sql: str, table: str | None = None, integers: dict | None = None,
              cast: bool = False) -> list[tuple]:
    """Every row of ``sql`` on ``con``. Text that is not valid UTF-8 (real exports have it: a
    Windows user name in the export metadata) is decoded with replacement characters instead of
    failing the whole report; so is a BLOB where the export should hold text (a damaged or edited
    export: SQLite keeps any value's own type), never shown as ``b'...'``. ``integers``: result
    position -> the export's column (of ``table``, which ``sql`` reads) that must hold integers or
    NULL (ids, counts); any other value raises :class:`NotInteger` (:func:`not_integer`), as
    :func:`check_integers` does for Arrow batches. ``cast``: ``sql`` gives its texts through
    :func:`~pipeline.load.limits.cut_sql` (SQLite casts a BLOB to text itself) and its other columns
    are ids (StringIds' INTEGER PRIMARY KEY), so no row is scanned for bytes. Raises
    ``sqlite3.DatabaseError`` for anything else."""
    try:
        rows = con.execute(sql).fetchall()
    except sqlite3.OperationalError as exc:
        if "decode" not in str(exc).lower():
            raise
        saved = con.text_factory
        con.text_factory = _decoded
        try:
            rows = con.execute(sql).fetchall()
        finally:
            con.text_factory = saved
    count_decoded(sql, len(rows) * len(rows[0]) if rows else 0)
    for position, column in (integers or {}).items():
        odd = next((row[position] for row in rows if not (row[position] is None or type(row[position]) is int)), None)
        if odd is not None:   # SQLite gives int, float (REAL, any integer beyond int64), str or bytes
            raise not_integer(table, column, odd, {float: "REAL", bytes: "BLOB"}.get(type(odd), "TEXT"))
    if not cast and any(type(v) is bytes for row in rows for v in row):
        rows = [tuple(_decoded(v) if type(v) is bytes else v for v in row) for row in rows]
    return rows


def _decoded(raw: bytes) -> str:
    """``raw`` as UTF-8 text, replacement characters for what is not."""
    return raw.decode("utf-8", "replace")


def read_frame(schema: "Schema", sql: str, table: str | None = None, texts=()) -> "pd.DataFrame":
    """Run one (small) query through :func:`_fetch` and return a frame. With ``table`` (the table
    ``sql`` reads), every result column but ``texts`` must hold integers or NULL (times in ns, ids):
    anything else raises :class:`NotInteger` (:func:`check_integers`), as :func:`read_columns` does."""
    result = _fetch(schema.uri, sql, schema.deadline)
    if table is not None:
        for name, column in zip(result.column_names, result.columns):
            if name not in texts:
                for chunk in column.chunks:
                    check_integers(table, sql, name, chunk)
    return result.to_pandas()


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


def rowid_ranges(schema: Schema, table: str, parts: int) -> list[tuple[int, int]] | None:
    """Up to ``parts`` consecutive ``[first, past)`` rowid ranges covering ``table``, each of at
    least :data:`SPLIT_MIN_ROWS` rowids; None when the table is empty or has no rowid."""
    span = _rowid_range(schema, table)
    if span is None:
        return None
    low, high = span
    parts = max(1, min(parts, (high - low + 1) // SPLIT_MIN_ROWS))
    edges = [low + (high - low + 1) * i // parts for i in range(parts)] + [high + 1]
    return list(zip(edges, edges[1:]))


def split_queries(schema: Schema, table: str, sql: str, parts: int) -> list[str]:
    """``sql`` (a ``SELECT ... FROM table`` without WHERE) as up to ``parts`` queries over
    consecutive rowid ranges (:func:`rowid_ranges`). Their results, concatenated in order, are
    the rows of ``sql`` in the same (rowid) order."""
    ranges = rowid_ranges(schema, table, parts) if parts > 1 else None
    if ranges is None or len(ranges) == 1:
        return [sql]
    return [f"{sql} WHERE rowid >= {a} AND rowid < {b}" for a, b in ranges]


def _fetch(uri: str, sql: str, deadline=None):
    """One query on its own ADBC connection, as an Arrow table (the driver fills Arrow
    columns in C without holding the GIL, so several run at once on threads). ``deadline``
    (a :class:`~pipeline.load.limits.Deadline`, or None) is looked at before and between batches.

    The driver manager's low-level objects are used, not its DB-API module: that one imports
    ``pyarrow.dataset`` (and looks for polars) on first use, ~40 ms of every run's start-up.
    Raises ``sqlite3.DatabaseError``, :class:`~pipeline.load.limits.ReadTimeout`."""
    import pyarrow as pa

    batches = []
    schema = _stream(uri, sql, deadline, lambda seq, batch: batches.append(batch))
    return pa.Table.from_batches(batches, schema=schema)


def _stream(uri: str, sql: str, deadline, each, batch_rows: int | None = None):
    """Run ``sql`` on its own ADBC connection and call ``each(seq, batch)`` for every Arrow batch
    (``batch_rows`` rows each; None: the driver's default), looking at ``deadline`` before and
    between batches. Returns the result's schema. Raises ``sqlite3.DatabaseError`` (the driver's
    errors restated), :class:`~pipeline.load.limits.ReadTimeout`."""
    import adbc_driver_manager
    import adbc_driver_sqlite
    import pyarrow as pa

    if deadline is not None:
        deadline.check()
    try:
        with adbc_driver_sqlite.connect(uri) as db, adbc_driver_manager.AdbcConnection(db) as con, \
                adbc_driver_manager.AdbcStatement(con) as statement:
            if batch_rows:
                statement.set_options(**{"adbc.sqlite.query.batch_rows": str(batch_rows)})
            statement.set_sql_query(sql)
            stream, _ = statement.execute_query()
            reader = pa.RecordBatchReader.from_stream(stream)
            for seq, batch in enumerate(reader):
                if deadline is not None:
                    deadline.check()
                count_decoded(sql, batch.num_rows * batch.num_columns)
                each(seq, batch)
            return reader.schema
    except (sqlite3.DatabaseError, ReadTimeout):
        raise
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
        results = [_fetch(schema.uri, q, schema.deadline) for _, q in pieces]
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(pieces))) as pool:
            results = list(pool.map(lambda piece: _fetch(schema.uri, piece[1], schema.deadline), pieces))
    out: dict = {}
    for (name, _), table in zip(pieces, results):
        out.setdefault(name, []).append(table)
    return {name: (tables[0] if len(tables) == 1 else pa.concat_tables(tables)) for name, tables in out.items()}



#: Rows per Arrow batch the SQLite driver hands over (its default is 1,024): fewer, larger
#: batches cost less Python per row; one batch of a kernel query is then ~4 MiB.
BATCH_ROWS = 65_536


class Decoded:
    """The columns of one query, decoded batch by batch straight into numpy (no Arrow table of
    the whole result is ever held: memory is the result's columns plus one batch per thread).

    ``rows``: how many rows. ``ints``: column name -> int64 array of ``rows`` values, NULL as the
    column's fill value (:func:`read_columns`), floating values truncated toward zero as
    ``CAST(x AS INTEGER)`` would. ``nulls``: name -> bool array, True where the value was NULL (only
    columns that had a NULL). ``texts``: name -> ``pyarrow.ChunkedArray`` of the columns whose
    values are not numbers (inline text of older schemas); those are in neither ``ints`` nor ``nulls``.
    ``also``: the :class:`Query`'s ``also`` columns as the b-tree fast path read them along, name ->
    ``(values, NULL mask or None)``; None when SQLite's path read the table (it reads none of them).
    """

    def __init__(self, rows: int, ints: dict, nulls: dict, texts: dict, also: dict | None = None):
        self.rows, self.ints, self.nulls, self.texts, self.also = rows, ints, nulls, texts, also

    def null_mask(self, name: str) -> np.ndarray:
        """Bool array, True where ``name`` was NULL (all False when it never was)."""
        mask = self.nulls.get(name)
        return np.zeros(self.rows, dtype=bool) if mask is None else mask


def _is_number(kind) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_null(kind) \
        or pa.types.is_boolean(kind)


def _as_int64(col, fill: int) -> np.ndarray | None:
    """One batch's numeric column as int64 numpy, NULL as ``fill`` (None for a column of NULLs only)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_null(col.type):
        return None
    if not pa.types.is_int64(col.type):
        col = pc.cast(col, pa.int64(), safe=False)
    values = _view(col, np.int64)
    if col.null_count:
        values = values.copy()
        values[_null_mask(col)] = fill
    return values


def _view(col, dtype) -> np.ndarray:
    """A numpy view of a primitive Arrow array without NULLs (its values buffer; ``to_numpy``
    would import pandas)."""
    return np.frombuffer(col.buffers()[1], dtype=dtype, count=len(col), offset=col.offset * np.dtype(dtype).itemsize)


def _null_mask(col) -> np.ndarray:
    """True where one batch's column is NULL, as numpy bools."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return _view(pc.cast(col.is_null(), pa.uint8()), np.uint8).view(bool)


_INT32 = np.iinfo(np.int32)


def source_column(sql: str, name: str) -> str:
    """The export's column that result column ``name`` of ``sql`` reads (``x AS name``), else ``name``."""
    found = re.search(rf"(\w+) AS {re.escape(name)}\b", sql)
    return found.group(1) if found else name


class NotInteger(sqlite3.DatabaseError):
    """A column that must hold integers (times in ns, ids) holds something else; the message names the
    table, the column, the first such value and what to do (:func:`check_integers`)."""


def check_integers(table: str, sql: str, name: str, col) -> None:
    """Raise :class:`NotInteger` unless one batch's Arrow column ``col`` (result column ``name`` of ``sql``,
    which reads ``table``) holds only integers or NULL; the message names the export's column
    (:func:`source_column`, looked up only then: this runs on every batch of the kernel table). SQLite keeps a value's own type whatever the column's declared type, so an
    export that was damaged or edited can hold REAL (also every integer beyond int64), TEXT or BLOB
    where Nsight Systems writes integers; reading such a value as an integer would truncate it (a
    time off by up to 1 ns, an id merged with another) or fail far from the cause."""
    import pyarrow as pa

    kind = col.type
    if pa.types.is_integer(kind) or pa.types.is_null(kind) or pa.types.is_boolean(kind):
        return
    values = [v for v in col.to_pylist() if v is not None]
    if pa.types.is_floating(kind):
        odd = [v for v in values if v != v or v in (float("inf"), float("-inf")) or v != int(v)
               or not -2 ** 63 <= int(v) < 2 ** 63]
        value, stored = (odd or values)[0], "REAL"
    else:  # a column with any text in it comes as text whole: name the first value that is no integer
        odd = [v for v in values if not (isinstance(v, str) and re.fullmatch(r"-?[0-9]+", v))]
        value = (odd or values)[0]
        stored = "BLOB" if pa.types.is_binary(kind) or pa.types.is_large_binary(kind) else "TEXT"
    raise not_integer(table, source_column(sql, name), value, stored)


def not_integer(table: str, column: str, value, stored: str) -> NotInteger:
    """The :class:`NotInteger` of ``table.column`` holding ``value`` (its ``repr``, cut at 60 characters),
    stored as ``stored`` (``REAL``, ``TEXT`` or ``BLOB``): the one message of :func:`check_integers` and
    :func:`text_rows`."""
    shown = repr(value if len(repr(value)) <= 60 else repr(value)[:60] + "\u2026")
    return NotInteger(f"{table}.{column} holds {shown} (stored as {stored}), not an integer: Nsight Systems "
                      "writes integers there (ns or ids), so the export was damaged or edited; export the "
                      "report again (nsys export --type sqlite) from its .nsys-rep")


class Query:
    """One table to read with :func:`read_columns`.

    ``table``, ``sql``: the table and the ``SELECT ... FROM table`` (no WHERE) that reads it;
    ``columns``: the names ``sql`` gives its result columns; ``fills``: column -> the value a
    NULL becomes (default 0); ``derive``: column -> ``[(name, function), ...]``: instead of the
    column itself, each ``function`` of its int64 values (batch by batch) is kept under ``name``
    (e.g. the process and thread ids of a ``globalTid``); ``small``: the kept columns (derived or
    not) stored as int32 while every value fits (int64 from the first one that does not); ``texts``:
    the columns that may hold inline text (older schemas' kernel names), every other column then
    must hold integers or NULL: a REAL, TEXT or BLOB value, or one beyond int64 (SQLite stores it as
    REAL), raises :class:`NotInteger` (:func:`check_integers`; the loader's kernel and runtime
    queries). None (a generic table): any column may be text, floats are cut toward zero. ``also``: result
    name -> a column of ``table`` (integer ids) that the b-tree fast path reads in the same pass, as int32
    while they fit, given as they are (:attr:`Decoded.also`; no fill, no derivation); SQLite's path reads
    none of them, nor does the fast path when reading them along fails where the query alone would not."""

    def __init__(self, table: str, sql: str, columns: list, fills: dict | None = None,
                 derive: dict | None = None, small=(), texts=None, also: dict | None = None):
        self.table, self.sql, self.columns = table, sql, list(columns)
        self.fills, self.derive, self.small = dict(fills or {}), dict(derive or {}), frozenset(small)
        self.texts = None if texts is None else frozenset(texts)
        self.also = dict(also or {})

    def key(self) -> tuple:
        """What makes two queries give the same arrays from the same table (:mod:`pipeline.load.ahead`)."""
        return (self.table, self.sql, tuple(self.columns), tuple(sorted(self.fills.items())),
                tuple((c, tuple(d)) for c, d in sorted(self.derive.items())), self.small, self.texts,
                tuple(sorted(self.also.items())))

    def kept(self) -> list[str]:
        """The names of the arrays :func:`read_columns` gives for this query."""
        return [d for c in self.columns for d in ([n for n, _ in self.derive[c]] if c in self.derive else [c])]


class _Sink:
    """Where the batches of every piece (rowid range) of one :class:`Query` land (:func:`read_columns`).

    With ``ranges`` (dense rowids), each kept column is one array of ``capacity`` values allocated on
    first use, and the piece of ``[first, past)`` writes its rows from ``first - low`` on;
    :meth:`finish` then moves the pieces down over rowids no row used (none, in an export).
    Without, each piece keeps its batches and :meth:`finish` joins them."""

    def __init__(self, query: Query, ranges: list[tuple[int, int]] | None, pieces: int):
        self.query, self.fills = query, query.fills
        self.low = ranges[0][0] if ranges else 0
        self.bounds = [(a - self.low, b - self.low) for a, b in ranges] if ranges else None
        self.capacity = self.bounds[-1][1] if ranges else None
        self.lock = threading.Lock()
        self.ints: dict = {}
        self.nulls: dict = {}
        self.texts: dict = {}                        # name -> [(piece, seq, arrow array)]
        self.null_batches: dict = {}                 # name -> [(piece, seq, rows)]: batches of NULLs only
        self.counts = [0] * pieces
        self.batches = [[] for _ in range(pieces)]  # without ranges: per piece, [(n, {name: (values, mask)})]

    def _fill(self, name: str) -> int:
        return self.fills.get(name, 0)

    def _write(self, name: str, at: int, values: np.ndarray | None, n: int) -> None:
        """``values`` (``n`` of them) into column ``name`` from row ``at`` (None: ``n`` times the column's
        fill); an int32 column becomes int64 when a value does not fit. The column is allocated empty:
        every row a piece reads is written, the rest are never read (:meth:`finish`)."""
        fits = values is None or not values.size or name not in self.query.small or \
            (_INT32.min <= int(values.min()) and int(values.max()) <= _INT32.max)
        with self.lock:
            out = self.ints.get(name)
            if out is None:
                small = name in self.query.small and fits
                out = self.ints[name] = np.empty(self.capacity, np.int32 if small else np.int64)
            elif out.dtype == np.int32 and not fits:
                out = self.ints[name] = out.astype(np.int64)
            out[at:at + n] = self._fill(name) if values is None else values

    def _mask(self, name: str, at: int, mask: np.ndarray) -> None:
        with self.lock:
            if name not in self.nulls:
                self.nulls[name] = np.zeros(self.capacity, dtype=bool)
            self.nulls[name][at:at + mask.size] = mask

    def add(self, piece: int, seq: int, batch) -> None:
        n = batch.num_rows
        kept = {}
        at = 0
        if self.bounds is not None:
            first, past = self.bounds[piece]
            at = first + self.counts[piece]
            if at + n > past:
                raise sqlite3.DatabaseError("a rowid range gave more rows than it has rowids")
        for name, col in zip(batch.schema.names, batch.columns):
            if self.query.texts is not None and name not in self.query.texts:
                check_integers(self.query.table, self.query.sql, name, col)
            if name in self.texts or not _is_number(col.type):
                with self.lock:
                    self.texts.setdefault(name, []).append((piece, seq, col))
                continue
            values = _as_int64(col, self._fill(name))
            if values is None:  # NULLs only: as text, should other batches of the column be text
                with self.lock:
                    self.null_batches.setdefault(name, []).append((piece, seq, n))
            mask = None if not col.null_count else (np.ones(n, bool) if values is None else _null_mask(col))
            derived = [(name, values)]
            if name in self.query.derive:
                full = np.full(n, self._fill(name), np.int64) if values is None else values
                derived = [(d, fn(full)) for d, fn in self.query.derive[name]]
            for out_name, out_values in derived:
                if self.bounds is None:
                    kept[out_name] = (np.full(n, self._fill(out_name), np.int64) if out_values is None
                                      else np.array(out_values, dtype=np.int64), mask)
                    continue
                self._write(out_name, at, out_values, n)
                if mask is not None:
                    self._mask(out_name, at, mask)
        if self.bounds is None:
            self.batches[piece].append((n, kept))
        self.counts[piece] += n

    def add_arrays(self, columns: dict) -> None:
        """The whole result as one piece, already in numpy: ``{name: (int64 values with NULL as 0, bool NULL
        mask or None)}`` (the b-tree fast path, :mod:`pipeline.load.btree`); the sink has one range of them.
        The arrays are kept, not copied (an id column that fits becomes int32, as :meth:`_write` makes it);
        ``columns`` is emptied."""
        n = len(next(iter(columns.values()))[0]) if columns else 0
        for name, (values, mask) in columns.items():
            if mask is not None:
                values[mask] = self._fill(name)
            derived = self.query.derive.get(name, [(name, None)])
            for out_name, fn in derived:  # one derived column at a time
                if fn is not None:
                    out = _derived(fn, values, out_name in self.query.small)
                elif values.dtype == np.int64 and out_name in self.query.small and \
                        (not n or (_INT32.min <= int(values.min()) and int(values.max()) <= _INT32.max)):
                    out = values.astype(np.int32)
                else:
                    out = values
                self.ints[out_name] = out
                if mask is not None:
                    self.nulls[out_name] = mask
                del out
            del values
        columns.clear()  # consumed: the int64 columns a derivation or int32 replaced go now, not with the caller
        self.counts[0] += n

    def finish(self) -> Decoded:
        import pyarrow as pa

        rows = sum(self.counts)
        names = [c for c in self.query.kept() if c not in self.texts]
        ints, nulls = {}, {}
        if self.bounds is None:
            batches = [b for piece in self.batches for b in piece]
            for name in names:
                parts = [kept[name][0] if name in kept else np.full(n, self._fill(name), np.int64)
                         for n, kept in batches]
                values = np.concatenate(parts) if parts else np.zeros(0, np.int64)
                if name in self.query.small and (not values.size or _INT32.min <= values.min() <= values.max()
                                                 <= _INT32.max):
                    values = values.astype(np.int32)
                ints[name] = values
                masks = [kept[name][1] if name in kept else None for n, kept in batches]
                if any(m is not None for m in masks):
                    nulls[name] = np.concatenate([np.zeros(n, bool) if m is None else m
                                                  for (n, _), m in zip(batches, masks)])
        else:
            moves, to = [], 0
            for (first, _), count in zip(self.bounds, self.counts):
                moves.append((first, to, count))
                to += count
            for store, out in ((self.ints, ints), (self.nulls, nulls)):
                for name in names:
                    arr = store.get(name)
                    if arr is None:
                        if store is self.ints:
                            small = name in self.query.small and _INT32.min <= self._fill(name) <= _INT32.max
                            out[name] = np.full(rows, self._fill(name), dtype=np.int32 if small else np.int64)
                        continue
                    for src, dst, count in moves:
                        if src != dst and count:
                            arr[dst:dst + count] = arr[src:src + count]
                    out[name] = arr[:rows]
        texts = {}
        for name, chunks in self.texts.items():
            kind = chunks[0][2].type
            chunks = chunks + [(p, q, pa.nulls(n, kind)) for p, q, n in self.null_batches.get(name, ())]
            texts[name] = pa.chunked_array([c for _, _, c in sorted(chunks, key=lambda t: (t[0], t[1]))], kind)
        return Decoded(rows, ints, nulls, texts)


#: Values a derivation (:func:`_derived`) is made of at a time: its temporaries stay a few hundred KB.
DERIVE_ROWS = 1 << 16


def _derived(fn, values: np.ndarray, small: bool) -> np.ndarray:
    """``fn`` (a :class:`Query`'s derivation: value by value) of int64 ``values``, made :data:`DERIVE_ROWS` values at a
    time into one array (no temporary as long as the column): int32 while every value fits when ``small``, else
    int64 (from the first piece that does not fit on)."""
    out = np.empty(values.size, np.int32 if small else np.int64)
    for i in range(0, values.size, DERIVE_ROWS):
        piece = np.asarray(fn(values[i:i + DERIVE_ROWS]), dtype=np.int64)
        if out.dtype == np.int32 and piece.size and (int(piece.min()) < _INT32.min or int(piece.max()) > _INT32.max):
            out = out.astype(np.int64)
        out[i:i + piece.size] = piece
    return out


def _stream_into(uri: str, sql: str, sink: _Sink, piece: int, deadline=None) -> None:
    """Run ``sql`` on its own connection and hand each batch to ``sink`` as piece ``piece`` (:func:`_stream`)."""
    _stream(uri, sql, deadline, lambda seq, batch: sink.add(piece, seq, batch), BATCH_ROWS)


def _is_dense(schema: Schema, low: int, high: int) -> bool:
    """Whether rowids ``low..high`` are dense enough to size a result by them (an export inserts its rows in
    order, so max - min + 1 is the row count): at most one rowid per 4 bytes of the database."""
    page_size = schema.con.execute("PRAGMA page_size").fetchone()[0]
    pages = schema.con.execute("PRAGMA page_count").fetchone()[0]
    return high - low + 1 <= max(page_size * pages // 4, 1)


def _dense_ranges(schema: Schema, table: str, parts: int) -> list[tuple[int, int]] | None:
    """:func:`rowid_ranges` when the rowids are dense (:func:`_is_dense`); None otherwise (no rowid, empty, or
    sparse rowids)."""
    ranges = rowid_ranges(schema, table, parts)
    if ranges is None:
        return None
    return ranges if _is_dense(schema, ranges[0][0], ranges[-1][1] - 1) else None


def capacity_of(schema: Schema, table: str) -> int | None:
    """The rows to make room for when ``table`` is read in one pass (the b-tree fast path,
    :func:`pipeline.load.btree.prepare`): its rowid span when dense (:func:`_is_dense`), 0 when it has no row
    (or no rowid: the fast path reads no such table); None when sparse (the rows are counted first)."""
    span = _rowid_range(schema, table)
    if span is None:
        return 0
    return span[1] - span[0] + 1 if _is_dense(schema, *span) else None


def read_columns(schema: Schema, queries: dict[str, Query], threads: int | None = None,
                 then: dict | None = None, meanwhile=None, ahead=None) -> dict:
    """Read several tables at once, straight into numpy: ``{name: Query}`` -> ``{name: Decoded}``
    (:class:`Query`, :class:`Decoded`).

    Each table is read in consecutive rowid ranges (at least :data:`SPLIT_MIN_ROWS` rowids each, up
    to ``threads`` of them), each range on its own read-only connection, all on ``threads`` threads
    (default :func:`read_threads`): the driver decodes with the GIL released, so the tables and
    ranges decode at once. Each batch is written into its columns' final arrays as it comes, so
    memory is the result plus a batch per thread. Rows are those of the query in rowid order.
    ``then``: name -> a function of that table's :class:`Decoded`, called as soon as the table is read, on
    the thread that read it off its b-tree (so a table's own work overlaps the reading of the others), else
    on the caller's; its result is given instead of the Decoded. An error it raises is raised once every
    table is read (an error of the reading itself comes first, as it would without ``then``). ``meanwhile``: a
    function (of nothing) called once on the caller's thread while the others read (the caller's own work, which
    should keep any error it meets for later: one it raises is raised once the threads are done). ``ahead``: a
    function ``(job, along, query, deadline)`` giving the :class:`Decoded` of a table the b-tree fast path would
    read, when it was read already, else None (:func:`pipeline.load.ahead.taken`).
    Raises ``sqlite3.DatabaseError``, :class:`~pipeline.load.limits.ReadTimeout` (``schema.deadline``).
    """
    threads = threads or read_threads()
    then = then or {}
    meanwhile = [meanwhile] if meanwhile is not None else []  # emptied once called
    done = _read_fast(schema, queries, threads, then, meanwhile, ahead)
    sinks, work = {}, []
    for name, query in queries.items():
        if name in done:
            continue
        ranges = _dense_ranges(schema, query.table, threads)
        sqls = [query.sql] if ranges is None or len(ranges) == 1 else \
            [f"{query.sql} WHERE rowid >= {a} AND rowid < {b}" for a, b in ranges]
        sinks[name] = _Sink(query, ranges, len(sqls))
        work += [(i, name, q) for i, q in enumerate(sqls)]
    work.sort(key=lambda w: w[0])  # every table's first range first: they decode side by side
    if threads == 1 or len(work) <= 1:  # no query at all (a CPU-only capture): nothing to decode
        for i, name, q in work:
            _stream_into(schema.uri, q, sinks[name], i, schema.deadline)
    else:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(threads, len(work))) as pool:
            futures = [pool.submit(_stream_into, schema.uri, q, sinks[name], i, schema.deadline) for i, name, q in work]
            while meanwhile:
                meanwhile.pop()()
            for future in futures:
                future.result()
    while meanwhile:
        meanwhile.pop()()
    for name, sink in sinks.items():
        done[name] = _then(then.get(name), sink.finish())
    out = {}
    for name in queries:
        result, error = done[name]
        if error is not None:
            raise error
        out[name] = result
    return out


def _then(after, decoded: Decoded) -> tuple:
    """``(after(decoded), None)``, or ``(None, the error it raised)``; ``(decoded, None)`` without ``after``."""
    if after is None:
        return decoded, None
    try:
        return after(decoded), None
    except Exception as exc:  # raised by read_columns once every table is read
        return None, exc


def _with_also(query: Query) -> str:
    """``query.sql`` reading its :attr:`Query.also` columns too (a plain projection still: :func:`btree.plan`)."""
    tail = f" FROM {query.table}"
    return query.sql[:-len(tail)] + "".join(f", {source} AS {name}" for name, source in query.also.items()) + tail


def decode_one(job, along, query: Query, beside=None, share: float = 1.0) -> Decoded | None:
    """One table off its b-tree (on any thread): its :class:`Decoded`; None when the fast path does not apply
    (SQLite's path reads it). ``along``: the job reading the query's :attr:`Query.also` columns too (None: none),
    tried first; when it does not apply, ``job`` reads the query's own columns. ``beside``, ``share``: part of the
    table read on another thread (:meth:`~pipeline.load.btree.Job.run`)."""
    columns = also = None
    if along is not None and (columns := along.run(beside, share)) is not None:
        also, job = {name: columns.pop(name) for name in query.also}, along
    if columns is None and (columns := job.run(beside, share)) is None:
        return None
    rows = len(next(iter(columns.values()))[0]) if columns else 0
    sink = _Sink(query, [(0, rows)], 1)
    sink.add_arrays(columns)
    count_decoded(query.sql, job.decoded)
    decoded = sink.finish()
    decoded.also = also
    return decoded


def _read_one(job, along, query: Query, after, ahead=None, deadline=None, beside=None, share: float = 1.0) -> tuple | None:
    """:func:`_then` of one table's :class:`Decoded`: as ``ahead`` gives it (:func:`read_columns`), else
    :func:`decode_one` (``beside``, ``share``: as its); None when the fast path does not apply."""
    decoded = ahead(job, along, query, deadline) if ahead is not None else None
    if decoded is None and (decoded := decode_one(job, along, query, beside, share)) is None:
        return None
    return _then(after, decoded)


def fast_jobs(schema: Schema, queries: dict[str, Query]) -> dict[str, tuple]:
    """name -> ``(job, along)``: the :class:`~pipeline.load.btree.Job` reading each query the b-tree fast path
    can read, and the one reading its :attr:`Query.also` columns along (None: none); on the schema's thread."""
    if not btree.available():
        return {}
    jobs = {}
    for name, query in queries.items():
        capacity = capacity_of(schema, query.table)
        narrow = {n for n in query.small - set(query.derive) if _INT32.min <= query.fills.get(n, 0) <= _INT32.max}
        job = btree.prepare(schema.con, schema.uri, query.table, query.sql, capacity, narrow)
        if job is not None:
            along = btree.prepare(schema.con, schema.uri, query.table, _with_also(query), capacity,
                                  narrow | set(query.also)) if query.also else None
            jobs[name] = (job, along)
    return jobs


#: What reading a row off its b-tree costs besides its values, in values read (:func:`_shares`): 3M rows of 10
#: values (kernels) took 0.35-0.40 s, of 5 values (CUDA API calls) 0.25-0.30 s: ~55 ns a row, ~7 ns a value.
ROW_COST = 8


def _shares(jobs: dict[str, tuple]) -> tuple[str | None, float]:
    """``(name, share)``: the table of ``jobs`` (name -> ``(job, along)``, :func:`fast_jobs`) whose reading costs
    most, and the share of it its own thread reads when the two read threads are to finish together, the rest read
    by the other after the other tables (:meth:`~pipeline.load.btree.Job.run`): ``(K + R) / 2K``, ``K`` the largest
    table's reading cost, ``R`` the others', a table's cost its rows (the rowid span) x (the columns read +
    :data:`ROW_COST`; one table alone: 0.5); 1.0 (one part) when the sizes are not known."""
    costs = {name: (job.capacity or 0) * (len((along or job).sources) + ROW_COST) for name, (job, along) in jobs.items()}
    if not costs:
        return None, 1.0
    largest = max(costs, key=costs.get)
    most, rest = costs[largest], sum(costs.values()) - costs[largest]
    return largest, (min(1.0, (most + rest) / (2 * most)) if most else 1.0)


def _read_fast(schema: Schema, queries: dict[str, Query], threads: int, then: dict, meanwhile: list,
               ahead=None) -> dict[str, tuple]:
    """The queries the b-tree fast path answers (:mod:`pipeline.load.btree`), read on ``threads`` threads, each
    followed on its thread by its ``then`` (:func:`read_columns`): name -> :func:`_then`'s pair; the others are
    left to SQLite (:func:`read_columns`). ``meanwhile``: the caller's work (a list of it, emptied when done),
    done while the threads read."""
    jobs = fast_jobs(schema, queries)
    if not jobs:
        return {}
    deadline = schema.deadline
    if deadline is not None:
        deadline.check()
    if threads == 1 or len(jobs) == 1:
        results = {name: _read_one(job, along, queries[name], then.get(name), ahead, deadline)
                   for name, (job, along) in jobs.items()}
    else:
        from concurrent.futures import ThreadPoolExecutor

        largest, share = _shares(jobs)
        with ThreadPoolExecutor(max_workers=min(threads, len(jobs))) as pool:
            # the largest table's last rows read by the thread the others leave free first (share: its first part)
            futures = {name: pool.submit(_read_one, job, along, queries[name], then.get(name), ahead, deadline,
                                         *((pool, share) if name == largest else ()))
                       for name, (job, along) in jobs.items()}
            while meanwhile:
                meanwhile.pop()()
            results = {name: future.result() for name, future in futures.items()}
    if schema.deadline is not None:
        schema.deadline.check()
    return {name: result for name, result in results.items() if result is not None}
