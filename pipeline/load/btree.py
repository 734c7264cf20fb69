"""The loader's fast path: a large table's integer columns read straight off the file's b-tree.

An export's kernel and CUDA API tables hold small integers in every column the loader reads (times in
ns, ids, StringIds ids). Decoding them row by row through SQLite's VM and an Arrow driver costs several
times the reading itself; ``_btree.c`` (built by ``make setup``, through setup.py) walks the table's
b-tree in rowid order and writes each wanted value into numpy arrays, with the GIL released.

It is a fast path only: :func:`read` gives None, and the loader reads the table through SQLite as
before (:func:`pipeline.load.sqlite.read_columns`), whenever the query is not a plain projection of
columns and integer constants (:func:`plan`), the table is not an ordinary rowid table, any wanted value
is not an integer or NULL (a REAL, TEXT or BLOB: SQLite's path names it), a record lacks a column or
spills onto overflow pages, the file is not what the format says (SQLite's path reports the damage), or
the compiled part is missing. When it answers, the values are those SQLite gives for the same query, in
the same order (tests/test_btree.py compares both paths on every real export and on edge cases).
"""
from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import os
import re
import urllib.parse

import numpy as np

from .limits import cut_sql

_OK, _GIVE_UP, _MALFORMED, _OS_ERROR, _FULL, _WIDEN, _NULLS = 0, 1, 2, 3, 4, 100, 400
#: Set (to anything) to read every table through SQLite (a check of the fast path, or a way round it).
ENV_OFF = "GPU_IDLE_NO_BTREE"


@functools.lru_cache(maxsize=1)
def _compiled():
    """The compiled part (ctypes), None when it was not built."""
    here = os.path.dirname(os.path.abspath(__file__))
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(here, "_btree" + suffix)
        if os.path.exists(path):
            try:
                lib = ctypes.CDLL(path)
                part, children = lib.gi_read_part, lib.gi_children
            except (OSError, AttributeError):  # (another build's, without them: not this one's)
                return None
            part.restype = children.restype = ctypes.c_int
            part.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int, ctypes.POINTER(ctypes.c_int32),
                             ctypes.c_int, ctypes.c_int64, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.POINTER(ctypes.c_int8), ctypes.POINTER(ctypes.c_void_p), ctypes.c_int,
                             ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int64),
                             ctypes.POINTER(ctypes.c_int64)]
            children.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int64)]
            return lib
    return None


def _library():
    """``gi_read_part`` of the compiled part (the rows under a range of the root's children), None when it was
    not built."""
    lib = _compiled()
    return None if lib is None else lib.gi_read_part


def _children():
    """``gi_children`` of the compiled part: how many children the root page has (0: a leaf)."""
    return _compiled().gi_children


def available() -> bool:
    """True when the compiled part is built and not switched off (:data:`ENV_OFF`)."""
    return not os.environ.get(ENV_OFF) and _library() is not None


_CUT = re.compile(r"CASE WHEN typeof\((\w+)\) = 'integer' THEN \1 WHEN .*? ELSE \(CASE WHEN typeof\(\1\) = 'blob' "
                  r"THEN CAST\(\1 AS TEXT\) ELSE \1 END\) END")
_ITEM = re.compile(r"(-?\d+|\w+)(?: AS (\w+))?")


def plan(sql: str, table: str) -> list[tuple[str, str | int]] | None:
    """``sql`` as ``[(result name, source)]`` when it is ``SELECT item, ... FROM table`` whose items are
    columns (``c`` or ``c AS name``), integer constants (``-1 AS name``) or a column through
    :func:`~pipeline.load.limits.cut_sql` (``cut_sql(c) AS name``: an integer comes out as it is, and a text
    sends the table to SQLite's path): source is the column's name, or the constant. None for any other
    shape. The plan is accepted only when writing it back gives ``sql`` exactly."""
    head, tail = "SELECT ", f" FROM {table}"
    if not (sql.startswith(head) and sql.endswith(tail)):
        return None
    body = _CUT.sub(lambda m: f"\x00{m.group(1)}", sql[len(head):-len(tail)])
    items = []
    for part in body.split(", "):
        cut = part.startswith("\x00")
        found = _ITEM.fullmatch(part[1:] if cut else part)
        if found is None:
            return None
        source, name = found.group(1), found.group(2) or found.group(1)
        constant = re.fullmatch(r"-?\d+", source) is not None
        if constant and (cut or found.group(2) is None):
            return None
        items.append((name, int(source) if constant else source, cut))
    rebuilt = ", ".join((f"{cut_sql(s)} AS {n}" if cut else f"{s} AS {n}" if n != s else s)
                        for n, s, cut in items)
    if head + rebuilt + tail != sql:
        return None
    return [(n, s) for n, s, _ in items]


def path_of(uri: str) -> str:
    """The file a :func:`~pipeline.load.sqlite.readonly_uri` names."""
    return urllib.parse.unquote(uri[len("file:"):].split("?", 1)[0])


def _layout(con, table: str) -> tuple[int, dict[str, int], int] | None:
    """``(root page, column -> record position, the INTEGER PRIMARY KEY's position or -1)`` of an ordinary
    rowid table; None for anything else (no such table, WITHOUT ROWID, generated or hidden columns)."""
    row = con.execute("SELECT rootpage, sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (table,)).fetchone()
    if row is None or not row[0] or re.search(r"WITHOUT\s+ROWID", row[1] or "", re.IGNORECASE):
        return None
    info = con.execute(f'PRAGMA table_xinfo("{table}")').fetchall()  # cid, name, type, notnull, dflt, pk, hidden
    if any(r[6] for r in info):
        return None
    keys = [r for r in info if r[5]]
    ipk = keys[0][0] if len(keys) == 1 and (keys[0][2] or "").upper() == "INTEGER" else -1
    return int(row[0]), {r[1]: r[0] for r in info}, ipk


class Job:
    """One table to read off its b-tree (:func:`prepare`); :meth:`run` may run on any thread."""

    def __init__(self, sql: str, path: bytes, root: int, ipk: int, sources: list[str], positions: list[int],
                 items: list, capacity: int | None, narrow: set):
        self.sql, self.path, self.root, self.ipk, self.capacity = sql, path, root, ipk, capacity
        self.narrow = narrow  # the sources read as int32 while every value fits
        self.decoded = 0  # values the last run read (rows x sources), for pipeline.load.sqlite.count_decoded
        self.sources, self.positions, self.items = sources, positions, items

    def key(self) -> tuple:
        """What makes two jobs read the same values (of the same file, while it is unchanged)."""
        return (self.sql, self.path, self.root, self.ipk, tuple(self.sources), tuple(self.positions),
                tuple(self.items), self.capacity, frozenset(self.narrow))

    def run(self, beside=None, share: float = 1.0) -> dict | None:
        """The query's result columns as ``{name: (int64 values, bool NULL mask or None)}`` (NULL read as 0 in
        the values), in rowid order; None when the fast path does not apply to what the table holds (the
        caller reads it through SQLite). Raises OSError when the file cannot be read.

        ``beside``: an executor (``submit``) whose thread will be free while this one reads: with ``share`` below
        :data:`SPLIT_BELOW` and at least :data:`SPLIT_ROWS` rows, the rows under the last ``1 - share`` of the
        root page's children are read there (:meth:`_split`), beside the first ones here, and put after them."""
        if beside is not None and share < SPLIT_BELOW and (self.capacity or 0) >= SPLIT_ROWS:
            parts = self._split(beside, share)
            if parts is GAVE_UP:  # what a part holds (a REAL or TEXT value, damage) one read would meet too
                return None
            if parts is not None:
                return self._columns(*parts)
        read = self._read(0, -1, self.capacity)
        return None if read is None else self._columns(*read[:3])

    def _split(self, beside, share: float) -> tuple | None:
        """``(values, masks, rows)`` of the whole table read in two parts at once: the rows under the root's first
        children (``share`` of them) on this thread, the rest on ``beside``'s, end to end (the second part's rows
        written after the first's, in the first part's arrays when they have room); None when the root has fewer
        than two children or the parts' rowids are out of order (the caller reads the table in one part);
        :data:`GAVE_UP` when a part found what the fast path does not read (so would one read: the caller reads
        the table through SQLite)."""
        children = ctypes.c_int64(0)
        if _children()(self.path, self.root, ctypes.byref(children)) != _OK or children.value < 2:
            return None
        at = min(children.value - 1, max(1, round(children.value * share)))
        second = beside.submit(self._read, at, children.value, None)
        try:
            first = self._read(0, at, self.capacity)
        finally:
            second = second.result()
        if first is None or second is None:
            return GAVE_UP
        if first[2] and second[2] and first[3][1] >= second[3][0]:
            return None
        (va, ma, na, _), (vb, mb, nb, _) = first, second
        values = [_end_to_end(a, b, na, nb) for a, b in zip(va, vb)]
        masks = [None if a is None and b is None else _end_to_end(
            np.zeros(na, np.uint8) if a is None else a, np.zeros(nb, np.uint8) if b is None else b, na, nb)
            for a, b in zip(ma, mb)]
        return values, masks, na + nb

    def _read(self, first: int, end: int, capacity: int | None) -> tuple | None:
        """``(values, NULL masks, rows, (first rowid, last rowid))`` of the rows under the root's children ``first``
        to ``end`` (exclusive; ``end`` -1: every row), each column int32 while its values fit (:attr:`narrow`),
        a mask (uint8) only for a column found to hold a NULL; ``capacity``: the rows to make room for, None to
        count them first; None when the fast path does not apply. Raises OSError when the file cannot be read."""
        fn = _library()
        k = len(self.sources)
        cids = (ctypes.c_int32 * max(1, k))(*self.positions)
        wide = [s not in self.narrow for s in self.sources]
        masked = [False] * k  # a NULL mask only for a column found to hold a NULL (read again with one)
        rows, span = ctypes.c_int64(0), (ctypes.c_int64 * 2)()
        rc, values, masks = _OK, [], []
        for _ in range(2 * k + 2):  # room for the rowid span (one pass), else as many rows as a count finds
            if capacity is None:
                rc = fn(self.path, self.root, k, cids, self.ipk, 0, None, None, None, 1, first, end,
                        ctypes.byref(rows), span)
                if rc != _OK:
                    break
                capacity = rows.value
            values = [np.empty(capacity, np.int64 if w else np.int32) for w in wide]
            masks = [np.empty(capacity, np.uint8) if m else None for m in masked]
            outs = (ctypes.c_void_p * max(1, k))(*[v.ctypes.data for v in values])
            widths = (ctypes.c_int8 * max(1, k))(*[8 if w else 4 for w in wide])
            nulls = (ctypes.c_void_p * max(1, k))(*[None if m is None else m.ctypes.data for m in masks])
            rc = fn(self.path, self.root, k, cids, self.ipk, capacity, outs, widths, nulls, 0, first, end,
                    ctypes.byref(rows), span)
            if rc == _FULL:
                capacity = None
            elif _WIDEN <= rc < _WIDEN + k:
                wide[rc - _WIDEN] = True  # a value beyond int32: that column as int64, and again
            elif _NULLS <= rc < _NULLS + k:
                masked[rc - _NULLS] = True
            else:
                break
            values = masks = []  # freed before the next try
        if rc == _OS_ERROR:
            raise OSError(f"{os.fsdecode(self.path)}: cannot be read")
        if rc != _OK:
            return None
        n = rows.value
        return [v[:n] for v in values], [None if m is None else m[:n] for m in masks], n, (span[0], span[1])

    def _columns(self, values: list, masks: list, n: int) -> dict:
        """:meth:`run`'s result from the columns read (:meth:`_read`)."""
        self.decoded = n * len(self.sources)
        read = {s: (v, m.view(bool) if m is not None and m.any() else None)
                for s, v, m in zip(self.sources, values, masks)}
        return {name: (np.full(n, source, np.int64), None) if isinstance(source, int) else read[source]
                for name, source in self.items}


#: :meth:`Job.run` reads a table in two parts at once only when the part beside is at least this large a share
#: (``share`` below this), and the table has at least :data:`SPLIT_ROWS` rows: smaller, the second read's own cost
#: (opening the file, counting its rows) outweighs it.
SPLIT_BELOW = 0.9
SPLIT_ROWS = 1 << 18
#: What :meth:`Job._split` returns when a part gave up (:meth:`Job._read` None).
GAVE_UP = object()


def _end_to_end(a: np.ndarray, b: np.ndarray, na: int, nb: int) -> np.ndarray:
    """The ``na`` values of ``a`` (a view of the start of a larger array when the read made room for more) and
    the ``nb`` of ``b`` after them: written into ``a``'s own array when it has room and the same type, else a new
    array (the wider type when one part needed int64)."""
    whole = a.base if isinstance(a.base, np.ndarray) and a.base.ndim == 1 and a.base.ctypes.data == a.ctypes.data \
        else a
    if whole.dtype == b.dtype and whole.size >= na + nb:
        whole[na:na + nb] = b
        return whole[:na + nb]
    return np.concatenate([a, b])


def prepare(con, uri: str, table: str, sql: str, capacity: int | None, narrow=()) -> Job | None:
    """The :class:`Job` reading ``sql`` over ``table`` of the file ``uri`` names off its b-tree, or None when
    the fast path cannot (see the module): not built or switched off, not a plain projection (:func:`plan`),
    not an ordinary rowid table. ``con``: a connection to the same file (asked about its schema, on the
    caller's thread). ``capacity``: the rows to make room for (:func:`pipeline.load.sqlite.capacity_of`: the rowid
    span, read in one pass), None to count them first. ``narrow``: result names to
    read as int32 while every value fits (int64 from the first that does not), as the caller would store them."""
    if not available():
        return None
    items = plan(sql, table)
    layout = _layout(con, table) if items is not None else None
    if layout is None:
        return None
    root, positions, ipk = layout
    sources = list(dict.fromkeys(s for _, s in items if isinstance(s, str)))
    if any(s not in positions for s in sources):
        return None
    narrowed = {s for s in sources if all(n in narrow for n, source in items if source == s)}
    return Job(sql, os.fsencode(path_of(uri)), root, ipk, sources, [positions[s] for s in sources], items, capacity,
               narrowed)
