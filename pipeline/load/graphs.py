"""CUDA graphs traced as a whole (docs/definitions.md#cuda-graphs, docs/inputs.md#cuda-graphs).

``nsys profile --cuda-graph-trace=graph`` (the default where the driver supports it) records each
graph launch as one row of ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` (start, end, globalPid, deviceId,
contextId, streamId, correlationId, graphId, graphExecId; ``greenContextId`` in newer exports), and
the kernels inside it are not in ``CUPTI_ACTIVITY_KIND_KERNEL``. The loader reads each execution as
one row of the kernel frame (:func:`graph_rows`): GPU work on its stream named ``graph exec <graphExecId>``,
with ``graph`` True, so that every measure (the device union, per-stream gaps and their roster,
attribution, iterations, the launch that has a record) sees it; inside one the GPU counts as busy
for its whole extent. With ``--cuda-graph-trace=node`` the kernels of a graph are ordinary kernel
rows (``graphNodeId`` set), carrying the launch's correlationId; an execution also recorded node by
node is counted once, by its kernels (:func:`counted_once`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from pandas.api.types import union_categoricals

from ..arrays import pair_keys
from ..model import GRAPH_TRACE_MODE, RowWarning, WarningCode
from .columns import categorical
from .integrity import untimed
from .queries import pid_column, pid_of
from .ranks import CAPTURE_TABLE
from .sqlite import Query, text_rows
from .tables import GRAPH_TRACE_TABLE, Schema

#: The result columns of :func:`graph_query`.
GRAPH_QUERY_COLUMNS = ["start", "end", "pid", "device_id", "stream_id", "correlation_id", "context_id", "exec_id",
                       "graph_id"]
#: ``META_DATA_CAPTURE`` names ending so (``CUDA_GRAPH_TRACE_OPTIONS:MODE``, or
#: ``PROCESS_<n>:CUDA_GRAPH_TRACE_OPTIONS:MODE``) state the capture's ``--cuda-graph-trace`` mode.
MODE_NAME = "CUDA_GRAPH_TRACE_OPTIONS:MODE"


def has_graphs(schema: Schema) -> bool:
    """True when the export holds at least one row of ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` with both times."""
    if not {"start", "end"} <= set(schema.columns(GRAPH_TRACE_TABLE)):
        return False
    return schema.con.execute(f"SELECT 1 FROM {GRAPH_TRACE_TABLE} LIMIT 1").fetchone() is not None


def graph_query(schema: Schema, id_columns) -> Query | None:
    """The :class:`~pipeline.load.sqlite.Query` reading the graph executions (:data:`GRAPH_QUERY_COLUMNS`;
    a ``globalPid`` decoded to its process; a missing id column read as 0, a missing or NULL
    ``graphExecId``/``graphId`` as -1; ``id_columns`` kept as int32 while they fit). None without the table."""
    cols = schema.columns(GRAPH_TRACE_TABLE)
    if not {"start", "end"} <= set(cols):
        return None
    pid_col, decode = pid_column(schema, GRAPH_TRACE_TABLE)
    pick = {c: (c if c in cols else default) for c, default in (
        ("deviceId", "0"), ("streamId", "0"), ("correlationId", "0"), ("contextId", "0"), ("graphExecId", "-1"),
        ("graphId", "-1"))}
    sql = (f"SELECT start, end, {pid_col} AS pid, {pick['deviceId']} AS device_id, {pick['streamId']} AS stream_id, "
           f"{pick['correlationId']} AS correlation_id, {pick['contextId']} AS context_id, "
           f"{pick['graphExecId']} AS exec_id, {pick['graphId']} AS graph_id FROM {GRAPH_TRACE_TABLE}")
    return Query(GRAPH_TRACE_TABLE, sql, GRAPH_QUERY_COLUMNS, {"exec_id": -1, "graph_id": -1},
                 {"pid": [("pid", pid_of)]} if decode else None, id_columns, ())


def _names(exec_id: np.ndarray, graph_id: np.ndarray) -> pd.Series:
    """Each execution's name, categorical: ``graph exec <graphExecId>``, else ``graph <graphId>``, else
    ``graph`` (a row without either id). One text per distinct pair, not per row."""
    pairs, inverse = np.unique(np.stack([exec_id, graph_id], axis=1), axis=0, return_inverse=True)
    texts = np.array([f"graph exec {e}" if e >= 0 else f"graph {g}" if g >= 0 else "graph"
                      for e, g in pairs.tolist()], dtype=object)
    return categorical(texts, np.asarray(inverse).reshape(-1))


def graph_rows(table, narrow) -> tuple[pd.DataFrame, list]:
    """The graph executions as kernel-frame rows (start, end, pid, device_id, stream_id, correlation_id,
    context_id, name, ``graph`` True) from the :class:`~pipeline.load.sqlite.Decoded` columns of
    :func:`graph_query`, and the warning naming rows dropped because they cannot be timed (no timestamps,
    start = end = 0: CUPTI could not time the graph, or end < start). ``narrow``: the loader's
    id narrowing (name, taking it out of ``ints``)."""
    n = table.rows
    ints = table.ints
    start, end = ints["start"], ints["end"]
    bad = untimed(table)
    warnings = []
    keep = np.flatnonzero(~bad)
    if bad.any():
        pids = np.unique(ints["pid"][bad]).tolist()
        warnings.append(RowWarning(WarningCode.DROPPED_KERNEL_ROWS,
                                   f"dropped {int(bad.sum())} CUDA graph execution rows ({GRAPH_TRACE_TABLE}) with "
                                   f"end < start or no timestamps (start = end = 0 or NULL); {keep.size} of {n} kept",
                                   None if min(pids) < 0 else tuple(int(p) for p in pids)))
    columns = {"start": start[keep], "end": end[keep]}
    for name in ("pid", "device_id", "stream_id", "correlation_id", "context_id"):
        columns[name] = narrow(ints, name)[keep]
    df = pd.DataFrame(columns, copy=False)
    df["name"] = _names(ints["exec_id"][keep], ints["graph_id"][keep])
    df["graph"] = np.ones(keep.size, dtype=bool)
    return df, warnings


def with_graphs(kernels: pd.DataFrame, graphs: pd.DataFrame | None) -> pd.DataFrame:
    """``kernels`` with a ``graph`` column (False), followed by the rows of ``graphs`` (:func:`graph_rows`;
    None: none). Names stay categorical (their categories joined)."""
    kernels["graph"] = np.zeros(len(kernels), dtype=bool)
    if graphs is None or not len(graphs):
        return kernels
    if not len(kernels):
        return graphs
    names = [n if isinstance(n.dtype, pd.CategoricalDtype) else n.astype(str).astype("category")
             for n in (kernels["name"], graphs["name"])]
    joined = pd.concat([kernels.drop(columns="name"), graphs.drop(columns="name")], ignore_index=True)
    joined["name"] = pd.Series(union_categoricals(names, ignore_order=True), index=joined.index)
    return joined


def counted_once(kernels: pd.DataFrame) -> pd.DataFrame:
    """``kernels`` without the graph executions whose launch was also recorded node by node: a ``graph`` row
    whose (process, correlationId) some kernel record carries (``--cuda-graph-trace=node`` records the kernels
    of a launch under its correlationId). Its kernels are kept: they show the gaps the whole execution hides.
    Copy records never drop an execution (a copy is not busy time, so the two never count twice, and a graph's
    kernels may be in it). Rows without a correlationId (0) are never matched. No work without graph rows."""
    graph = kernels["graph"].to_numpy(bool)
    if not graph.any():
        return kernels
    corr = kernels["correlation_id"].to_numpy(np.int64)
    keys = pair_keys(kernels["pid"].to_numpy(np.int64), corr)
    twice = graph & (corr != 0) & np.isin(keys, keys[~graph & (corr != 0)])
    if not twice.any():
        return kernels
    return kernels.iloc[np.flatnonzero(~twice)].reset_index(drop=True)


def graph_trace_mode(schema: Schema) -> str:
    """The ``--cuda-graph-trace`` mode the capture's ``META_DATA_CAPTURE`` states (its
    ``…CUDA_GRAPH_TRACE_OPTIONS:MODE`` rows, lower case: ``graph``, ``node``; several different ones
    joined by ``, ``); "" when the export does not say (no table, no such row)."""
    if not {"name", "value"} <= set(schema.columns(CAPTURE_TABLE)):
        return ""
    rows = text_rows(schema.con, f"SELECT name, value FROM {CAPTURE_TABLE}")
    modes = {str(v).strip().lower() for k, v in rows if str(k).endswith(MODE_NAME) and v is not None and str(v).strip()}
    return ", ".join(sorted(modes))


def with_graph_mode(meta: dict, schema: Schema) -> dict:
    """``meta`` with :data:`GRAPH_TRACE_MODE` set to :func:`graph_trace_mode` when the capture states it."""
    mode = graph_trace_mode(schema)
    return {**meta, GRAPH_TRACE_MODE: mode} if mode else meta
