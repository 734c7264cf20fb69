"""Issue 41, section 5: smaller shapes.

* A capture that is mostly copies outside its window (one kernel amid thousands of unified-memory
  migrations) says so: the row counts the copies with time outside W and the union of that time
  (``copies_outside_count``, ``copies_outside_ns``), and when that time is longer than W the coded note
  ``copies-outside-window`` (a caveat: the row stays ``ok``) is on the row, the GPU's page and the job's record.

Every input is a small export in the real schema (ExportWriter); every expected number is worked out by
hand in the comments.
"""
from __future__ import annotations

import html

import pandas as pd

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import Config
from pipeline.fleet.outputs import _gpu_doc, gpu_summary
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import WarningCode
from pipeline.report import gpu_page
from pipeline.report.medical import job_record
from pipeline.synth import ExportWriter
from pipeline.synth.writer import DTOH, HTOD

MS = 1_000_000
US = 1_000
AUTO = Config()
MANAGED, DEVICE, PAGEABLE = 4, 2, 0


def analysed(path) -> dict:
    """The one GPU's result of the export at ``path``."""
    rep = load_report(str(path))
    (key,) = rep.gpu_keys()
    return analyse_gpu(gpu_trace(rep, key), AUTO, AUTO.labels_for(rep.path))


def migrations_export(path, straddle: bool = False) -> str:
    """pid 10, device 0: one kernel [1,000, 1,000.010) ms (the window: 10 us); 2,000 unified-memory
    migrations (HtoD, managed -> device) of 100 us at i + 0.5 ms (i = 0 .. 1,999); 1,000 DtoH copies
    (pageable) of 200 us at 2,000 + i + 0.5 ms (i = 0 .. 999); 5 memsets of 1 ms at 3,000 + 2 i ms. None
    touches the window: 3,005 copies, 2,000 x 0.1 + 1,000 x 0.2 + 5 x 1 = 405 ms outside it. ``straddle``:
    one more HtoD copy [999.995, 1,000.005) ms, half in the window: 5 us of it outside."""
    w = ExportWriter(str(path))
    w.kernel(pid=10, device=0, stream=7, start=1000 * MS, end=1000 * MS + 10 * US, name="gemm")
    for i in range(2000):
        w.memcpy(pid=10, device=0, stream=9, start=i * MS + 500 * US, end=i * MS + 600 * US, copy_kind=HTOD,
                 src_kind=MANAGED, dst_kind=DEVICE)
    for i in range(1000):
        w.memcpy(pid=10, device=0, stream=9, start=(2000 + i) * MS + 500 * US, end=(2000 + i) * MS + 700 * US,
                 copy_kind=DTOH, src_kind=DEVICE, dst_kind=PAGEABLE)
    for i in range(5):
        w.memset(pid=10, device=0, stream=9, start=(3000 + 2 * i) * MS, end=(3001 + 2 * i) * MS)
    if straddle:
        w.memcpy(pid=10, device=0, stream=9, start=1000 * MS - 5 * US, end=1000 * MS + 5 * US, copy_kind=HTOD)
    return w.close()


def outside_note(count: str, what: str, ms: str) -> str:
    return (f"mostly copies outside the window: {count} copies ({what}) run {ms} ms outside the 0.010 ms window of 1 "
            "kernel: the figures are the window's, most of what this GPU did in the capture is not in them")


def test_one_kernel_amid_thousands_of_migrations_says_so(tmp_path):
    res = analysed(migrations_export(tmp_path / "um.sqlite"))
    row = res.row
    assert (row["window_ns"], row["busy_ns"], row["busy_pct"]) == (10 * US, 10 * US, 100.0)
    assert (row["copies_outside_count"], row["copies_outside_ns"]) == (3005, 405 * MS)
    assert row["status"] == "ok"  # a caveat: no row was lost
    assert WarningCode.COPIES_OUTSIDE_WINDOW.value in row["warning_codes"].split(",")
    assert outside_note("3,005", "3,000 memcpy, 5 memset, 2,000 to or from unified (managed) memory",
                        "405.000") in row["warnings"].split("; ")
    # the GPU's page and the job's record say it, with the count and the time
    doc = _gpu_doc(gpu_summary(row), {"device": res.device_roster, "streams": res.roster, "timeline": res.timeline})
    page = html.unescape(gpu_page.render_gpu_page(doc, {"report": "../report.html", "record": None}))
    assert ('<dd id="copies-outside">3,005 copies ran 405.000 ms outside this 0.010 ms window '
            "(<code>copies-outside-window</code>): the figures here are the window's, most of what this GPU did in "
            "the capture is not in them</dd>") in page
    record = job_record("um", pd.DataFrame([row]), {})
    [line] = [x for x in record.splitlines() if x.startswith("Copies outside the window")]
    assert line.startswith("Copies outside the window (copies-outside-window): ")
    assert line.endswith(": 3,005 copies, 405.000 ms outside its 0.010 ms window of 1 kernel; the figures are the "
                         "window's, most of what the GPU did is not in them.")


def test_a_copy_across_the_window_edge_counts_its_part_outside(tmp_path):
    """The straddling copy adds 1 copy and its 5 us before the window (its other 5 us are inside)."""
    row = analysed(migrations_export(tmp_path / "edge.sqlite", straddle=True)).row
    assert (row["copies_outside_count"], row["copies_outside_ns"]) == (3006, 405 * MS + 5 * US)
    assert outside_note("3,006", "3,001 memcpy, 5 memset, 2,000 to or from unified (managed) memory",
                        "405.005") in row["warnings"].split("; ")


def test_copies_outside_shorter_than_the_window_are_counted_not_noted(tmp_path):
    """Kernels of 1 ms every 2 ms over [0, 19) ms (W = 19 ms, the span); 3 copies of 1 ms after it, at 30,
    32, 34 ms (3 ms outside, less than W), and 2 inside it: counted (3, 3 ms), no note, ok. Then 20 copies of
    1 ms (20 ms, longer than W): noted."""
    def export(name, n):
        w = ExportWriter(str(tmp_path / name))
        for i in range(10):
            w.kernel(pid=10, device=0, stream=7, start=2 * i * MS, end=(2 * i + 1) * MS, name="gemm")
        for i in range(n):
            w.memcpy(pid=10, device=0, stream=9, start=(30 + 2 * i) * MS, end=(31 + 2 * i) * MS)
        for t in (3, 5):
            w.memcpy(pid=10, device=0, stream=9, start=t * MS, end=t * MS + 500 * US)
        return w.close()
    few = analysed(export("few.sqlite", 3)).row
    assert few["window_ns"] == 19 * MS
    assert (few["copies_outside_count"], few["copies_outside_ns"], few["status"]) == (3, 3 * MS, "ok")
    assert WarningCode.COPIES_OUTSIDE_WINDOW.value not in few["warning_codes"].split(",")
    assert "Copies outside the window" not in job_record("few", pd.DataFrame([few]), {})
    many = analysed(export("many.sqlite", 20)).row
    assert (many["copies_outside_count"], many["copies_outside_ns"], many["status"]) == (20, 20 * MS, "ok")
    assert ("mostly copies outside the window: 20 copies run 20.000 ms outside the 19.000 ms window of 10 kernels: "
            "the figures are the window's, most of what this GPU did in the capture is not in them"
            ) in many["warnings"].split("; ")
