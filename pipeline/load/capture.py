"""A capture's identity: the same for every file that holds one capture, whatever its name or format
(a ``.nsys-rep`` and its ``.sqlite`` export, a re-export, byte-identical copies, a PyTorch profiler
trace and its gzip), different for two captures (docs/inputs.md#duplicate-captures).

One function, :func:`capture_identity`, computed from a loaded :class:`~pipeline.model.Report` (once per
report: the value is kept on it): the capture's start on the rows' clock (``capture_start_ns``, from
``ANALYSIS_DETAILS`` / ``TARGET_INFO_SESSION_START_TIME``, or a trace's profiler span), its GPUs (every
field of ``devices``: process, device, key, model, uuid, bus, MIG, SMs), the kernels (their count, the first
start, the last end, the sums of every start, end and stream id: order-free, one pass each; the processes
and the names that ran), the CUDA API calls, copies and NVTX ranges (count, start sum, the names and texts
they hold), the profiler's own ``DIAGNOSTIC_EVENT`` texts and the codes of what the loader found wrong in
the rows (dropped rows, inferred processes). Two runs of one program differ in those to the nanosecond;
two files of one capture load to the same rows and so agree on all of them.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd

from ..frames import codes_of
from ..model import Report

#: Hex digits of :func:`capture_identity`.
DIGITS = 20
#: Where a report keeps its identity once computed (every GPU of a report asks for it).
_KEPT = "_capture_identity"


def capture_identity(report: Report) -> str | None:
    """The identity of the capture ``report`` was loaded from (:data:`DIGITS` hex digits), or None when it
    ran no kernel (nothing to tell it by: such a report is never taken for another)."""
    kept = report.__dict__.get(_KEPT, False)
    if kept is not False:
        return kept
    kernels = report.kernels
    identity = None
    if len(kernels):
        starts = kernels["start"].to_numpy(np.int64)
        ends = kernels["end"].to_numpy(np.int64)
        devices = report.devices
        doc = {"start": report.capture_start_ns,
               "devices": sorted(json.dumps([str(v) for v in row]) for row in devices.itertuples(index=False)),
               "kernels": [int(len(kernels)), int(starts.min()), int(ends.max()), _sum(starts), _sum(ends),
                           _sum(kernels["stream_id"].to_numpy(np.int64)), _observed(kernels["pid"]),
                           _observed(kernels["name"])],
               "rows": [[int(len(frame)), _sum(frame["start"].to_numpy(np.int64)) if len(frame) else 0,
                         _observed(frame[column]) if column in frame else []]
                        for frame, column in ((report.runtime, "name"), (report.copies, "kind"),
                                              (report.nvtx, "text"))],
               "diagnostics": sorted(str(d.get("text", "")) for d in report.diagnostics),
               "loader": sorted({str(getattr(w.code, "value", w.code)) for w in report.warnings})}
        identity = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:DIGITS]
    report.__dict__[_KEPT] = identity
    return identity


def _sum(values: np.ndarray) -> int:
    """The sum of int64 ``values`` modulo 2**64 (exact, never overflowing: an identity, not a figure)."""
    return int(values.sum(dtype=np.uint64))


def _observed(column: pd.Series) -> list[str]:
    """The distinct values ``column`` holds, as sorted text (a categorical column's used categories only: those its
    codes count, without a pass that hashes every row)."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        codes = codes_of(column)
        used = np.bincount(codes[codes >= 0], minlength=len(column.cat.categories)) > 0
        return sorted(str(v) for v in column.cat.categories[used])
    return sorted(str(v) for v in pd.unique(column.dropna()))


def export_source(path: str) -> str | None:
    """The file name of the report the local SQLite export ``path`` says it was exported from (its export
    metadata's ``EXPORT_PARAM_INPUT_FILE``, as ``nsys export`` writes it), or None: none said, a remote
    export, a file that cannot be read. A name only: it proves no capture identity (the report may have been
    recorded again since), so it is said, never used to take one file for another."""
    if "://" in path:
        return None
    from .diagnostics import load_meta  # the export's reader: fleet/reduce.py imports this module, reads no export
    from .sqlite import connect_readonly
    from .tables import Schema

    try:
        con = connect_readonly(path)
        try:
            meta = load_meta(Schema(con))
        finally:
            con.close()
    except Exception:  # noqa: BLE001 - an export that cannot be read names nothing
        return None
    value = meta.get("EXPORT_PARAM_INPUT_FILE") or meta.get("EXPORT_PARAM_INPUT_PATH")
    return os.path.basename(value.replace("\\", "/")) if value else None
