"""The other names an Nsight Systems export gives its kernels (docs/definitions.md#categories, ``comm``).

An export names each kernel up to three ways (``shortName``, ``demangledName``, ``mangledName``);
the loader keeps the first of :data:`~pipeline.load.tables.KERNEL_NAME_COLUMNS` it has (the short
name: it reads best in a roster). The short name drops the namespace and the template arguments
(``vectorized_elementwise_kernel`` for ``void at::native::vectorized_elementwise_kernel<4, …>``),
which is what says a compute library's kernel from a collective: the collective matcher
(:func:`pipeline.analysis.attribution.is_collective_kernel`) sees every name of a kernel.
"""
from __future__ import annotations

import math
import sqlite3

import numpy as np
import pandas as pd

from . import btree
from .limits import cut_sql
from .queries import name_columns
from .sqlite import capacity_of, count_decoded, text_rows
from .tables import KERNEL_TABLE, Schema


def alias_query(schema: Schema) -> str | None:
    """The SQL of the kernel names' aliases (:func:`aliases_of`): one ``SELECT DISTINCT`` over the kernel
    table's raw name values (a few distinct rows), cut after (cutting every row first costs three times as
    much); None when the kernel table has no second name column (or there is no kernel table)."""
    present = name_columns(schema)
    if len(present) < 2:
        return None
    return (f"SELECT {', '.join(cut_sql(c) for c in present)} FROM "
            f"(SELECT DISTINCT {', '.join(present)} FROM {KERNEL_TABLE})")


def alias_job(schema: Schema) -> btree.Job | None:
    """The b-tree fast path's :class:`~pipeline.load.btree.Job` reading the kernel table's name columns (ids), for
    :func:`alias_rows`; None when it does not apply or :func:`alias_query` is None. On the schema's thread."""
    present = name_columns(schema)
    if len(present) < 2:
        return None
    return btree.prepare(schema.con, schema.uri, KERNEL_TABLE, f"SELECT {', '.join(present)} FROM {KERNEL_TABLE}",
                         capacity_of(schema, KERNEL_TABLE), set(present))  # ids: int32 while they fit


#: Rows of the name columns made distinct at a time (:func:`distinct_rows`): a piece's codes and hash tables
#: stay a few MB whatever the table's size (all rows at once took ~150 MB at 3M kernels, beside the load's own peak).
DISTINCT_PIECE = 1 << 18


def distinct_rows(columns: list[tuple[np.ndarray, np.ndarray | None]]) -> list[tuple]:
    """The distinct rows of integer columns ``[(values, NULL mask or None)]`` (NULL as None), in the order each
    first occurs: what ``SELECT DISTINCT`` gives over the same rows in rowid order. Made :data:`DISTINCT_PIECE`
    rows at a time, each piece's distinct rows in order, then the pieces' in order."""
    if not columns:
        return []
    found: dict[tuple, None] = {}
    rows = len(columns[0][0])
    for at in range(0, rows, DISTINCT_PIECE):
        found.update(dict.fromkeys(_distinct_piece([(v[at:at + DISTINCT_PIECE], None if m is None else
                                                     m[at:at + DISTINCT_PIECE]) for v, m in columns])))
    return list(found)


def _distinct_piece(columns: list[tuple[np.ndarray, np.ndarray | None]]) -> list[tuple]:
    """:func:`distinct_rows` of one piece: a row's values packed into one key as they are when they are small ids
    (:func:`_packed_piece`), else each column factorised and a row's codes packed into one key."""
    packed = _packed_piece(columns)
    if packed is not None:
        return packed
    codes, values = [], []
    for column, mask in columns:
        found, uniques = pd.factorize(column)
        found = found.astype(np.int64)
        if mask is not None:
            found[mask] = len(uniques)  # NULL: a code of its own
        codes.append(found)
        values.append(uniques.tolist() + [None])
    if math.prod(len(v) for v in values) >= 2 ** 62:  # too many names to pack a row into one key
        return list(dict.fromkeys(zip(*[[vals[c] for c in found.tolist()] for vals, found in zip(values, codes)])))
    key = codes[0]
    for found, vals in zip(codes[1:], values[1:]):
        key = key * len(vals) + found
    rows = []
    for k in pd.unique(key).tolist():
        row = []
        for vals in reversed(values[1:]):
            k, code = divmod(k, len(vals))
            row.append(vals[code])
        row.append(values[0][k])
        rows.append(tuple(reversed(row)))
    return rows


def _packed_piece(columns: list[tuple[np.ndarray, np.ndarray | None]]) -> list[tuple] | None:
    """:func:`_distinct_piece` when every value (NULLs aside) is a non-negative id below its share of 63 bits (as
    StringIds ids are): each row's values packed into one int64 key as they are (a NULL as its share's top value),
    made distinct in one hash pass; None when one is not."""
    bits = 63 // len(columns)
    null = (1 << bits) - 1
    key = np.zeros(len(columns[0][0]), dtype=np.int64)
    for column, mask in columns:
        part = column.astype(np.int64)  # a copy: the NULLs are set in it
        if mask is not None:
            part[mask] = 0
        if part.size and (int(part.min()) < 0 or int(part.max()) >= null):
            return None
        if mask is not None:
            part[mask] = null
        key <<= bits
        key |= part
    rows = []
    for k in pd.unique(key).tolist():
        row = []
        for _ in columns:
            k, value = k >> bits, k & null
            row.append(None if value == null else value)
        rows.append(tuple(reversed(row)))
    return rows


def alias_rows(schema: Schema, sql: str, job: btree.Job | None = None) -> list[tuple]:
    """The rows of :func:`alias_query`'s ``sql``, read on a connection of their own (so on any thread, beside
    the loader's work), within the schema's time bound; off the b-tree when ``job`` (:func:`alias_job`) can
    (the same rows: :func:`distinct_rows` of the name ids)."""
    if job is not None and (columns := job.run()) is not None:
        count_decoded(job.sql, job.decoded)
        return distinct_rows(list(columns.values()))
    con = sqlite3.connect(schema.uri, uri=True)
    try:
        if schema.deadline is not None:
            schema.deadline.install(con)
        return text_rows(con, sql, cast=True)
    finally:
        con.close()


def aliases_of(rows: list[tuple], strings: dict[int, str]) -> dict[str, tuple[str, ...]]:
    """Loaded kernel name -> the export's other names of the kernels so named (text, sorted, each
    different from the name), for the names that have any, from :func:`alias_query`'s ``rows``.
    ``strings``: StringIds (id -> text); a name column holding text itself (older exports) is read as it
    is. Texts are cut as the loader cuts them (:func:`~pipeline.load.limits.cut_sql`)."""
    found: dict[str, set[str]] = {}
    for row in rows:
        names = [strings.get(v) if isinstance(v, int) else v for v in row]
        if names[0] is None:
            continue
        others = {str(n) for n in names[1:] if n is not None and str(n) != str(names[0])}
        if others:
            found.setdefault(str(names[0]), set()).update(others)
    return {name: tuple(sorted(others)) for name, others in found.items()}
