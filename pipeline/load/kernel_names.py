"""The other names an Nsight Systems export gives its kernels (docs/definitions.md#categories, ``comm``).

An export names each kernel up to three ways (``shortName``, ``demangledName``, ``mangledName``);
the loader keeps the first of :data:`~pipeline.load.tables.KERNEL_NAME_COLUMNS` it has (the short
name: it reads best in a roster). The short name drops the namespace and the template arguments
(``vectorized_elementwise_kernel`` for ``void at::native::vectorized_elementwise_kernel<4, …>``),
which is what says a compute library's kernel from a collective: the collective matcher
(:func:`pipeline.analysis.attribution.is_collective_kernel`) sees every name of a kernel.
"""
from __future__ import annotations

import sqlite3

from .limits import cut_sql
from .sqlite import text_rows
from .tables import KERNEL_NAME_COLUMNS, KERNEL_TABLE, Schema


def alias_query(schema: Schema) -> str | None:
    """The SQL of the kernel names' aliases (:func:`aliases_of`): one ``SELECT DISTINCT`` over the kernel
    table's raw name values (a few distinct rows), cut after (cutting every row first costs three times as
    much); None when the kernel table has no second name column (or there is no kernel table)."""
    if not schema.has(KERNEL_TABLE):
        return None
    present = [c for c in KERNEL_NAME_COLUMNS if c in schema.columns(KERNEL_TABLE)]
    if len(present) < 2:
        return None
    return (f"SELECT {', '.join(cut_sql(c) for c in present)} FROM "
            f"(SELECT DISTINCT {', '.join(present)} FROM {KERNEL_TABLE})")


def alias_rows(schema: Schema, sql: str) -> list[tuple]:
    """The rows of :func:`alias_query`'s ``sql``, read on a connection of their own (so on any thread, beside
    the loader's work), within the schema's time bound."""
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
