"""Issue 41, section 5: smaller shapes.

* Capture bounds (``ANALYSIS_DETAILS``) that do not sit on the rows' clock get one rule: one
  ``capture-disagrees`` warning naming the bound judged wrong (start, end, or both), the rows judged by their
  own extent, and the GPU ``partial`` only when a dropped row could change its figures: a kernel row or an
  NVTX range (it may make the window) always could; a CUDA API call, copy or overhead row lying wholly outside
  the kernels' time could not (``dropped-stray-rows``, the row stays ``ok``). ANALYSIS_DETAILS 160 s off the
  rows (on neither clock) is said even when TARGET_INFO_SESSION_START_TIME is stated (it is on the same clock).

* A capture that is mostly copies outside its window (one kernel amid thousands of unified-memory
  migrations) says so: the row counts the copies with time outside W and the union of that time
  (``copies_outside_count``, ``copies_outside_ns``), and when that time is longer than W the coded note
  ``copies-outside-window`` (a caveat: the row stays ``ok``) is on the row, the GPU's page and the job's record.

Every input is a small export in the real schema (ExportWriter); every expected number is worked out by
hand in the comments.
"""
from __future__ import annotations

import html
import os

import pandas as pd
import pytest
from conftest import without_model_warning
from test_public_shapes_nsight import JUDGED, KERNEL_STARTS_MS, kept_and_analysed, older_export

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
S = 1_000_000_000
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


# ---------------------------------------------------------------- capture bounds: one rule

def shifted_export(path, base: int, details: tuple[int, int] | None, session: int | None, fill=None) -> str:
    """:func:`test_public_shapes_nsight.older_export`'s rows ``base`` ns later, in a 2026 export: pid 10's 5
    kernels of 40 ms at base + 0.93, 1.19, 1.45, 1.71, 1.93 s (W = 1,040 ms, 840 ms idle), each launched 5 ms
    before (1 ms calls), an NVTX range base + [0.05, 1.98) s, an overhead row base + [0.10, 0.12) s;
    ANALYSIS_DETAILS ``details`` (start, stop ns) and TARGET_INFO_SESSION_START_TIME ``session`` when given."""
    w = ExportWriter(str(path))
    if details is not None:
        w.rows["ANALYSIS_DETAILS"] = [(0x1000000000000, details[1] - details[0], details[0], details[1])]
    if session is not None:
        w.rows["TARGET_INFO_SESSION_START_TIME"] = [(1_779_000_000_000_000_000, "2026-05-26T07:58:50",
                                                     "2026-05-26T07:58:50", session)]
    for start in KERNEL_STARTS_MS:
        corr = w.correlation()
        w.runtime(pid=10, tid=11, start=base + (start - 5) * MS, end=base + (start - 4) * MS,
                  name="cudaLaunchKernel_v7000", correlation=corr)
        w.kernel(pid=10, device=0, stream=7, start=base + start * MS, end=base + (start + 40) * MS, name="gemm",
                 correlation=corr)
    w.nvtx(pid=10, tid=11, start=base + 50 * MS, end=base + 1980 * MS, text="main")
    w.overhead(pid=10, tid=11, start=base + 100 * MS, end=base + 120 * MS, kind="OVERHEAD_CUPTI_RESOURCE", name="cuInit")
    if fill:
        fill(w)
    return w.close()


BASE = 200 * S
#: Every row kept lies outside a stated capture the rows do not fit at all.
ALL_OUTSIDE = ("5 rows of CUPTI_ACTIVITY_KIND_KERNEL, 5 of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS, "
               "1 of PROFILER_OVERHEAD")


@pytest.mark.parametrize("offset, session", [(-160 * S, True), (-160 * S, False), (160 * S, True), (160 * S, False)])
def test_bounds_160_s_off_the_rows_clock(tmp_path, offset, session):
    """Rows at 200.05 .. 201.98 s; ANALYSIS_DETAILS 160 s before (40.05 .. 41.98 s) or after (360.05 .. 361.98 s)
    them, with or without TARGET_INFO_SESSION_START_TIME at its startTime (as Nsight Systems writes it). The
    kernels' median start, 201.45 s, fits neither 40.05 .. 41.98 s (+1 s) nor 0 .. 1.93 s (+1 s): one warning
    names both bounds judged wrong, the capture is the rows' own run (no row dropped), the GPU ok with the 5
    kernels' figures, the zero the rows' start. Before issue 41, with the session start: no warning at all and
    the zero 160 s before the rows (or 0 s)."""
    lo, hi = BASE + 50 * MS + offset, BASE + 1980 * MS + offset
    path = shifted_export(tmp_path / "off.sqlite", BASE, (lo, hi), lo if session else None)
    rep, res = kept_and_analysed(path, (5, 5, 0, 1, 1))
    stated = f"{lo / 1e9:.6f}..{hi / 1e9:.6f}"
    assert res.row["status"] == "ok"
    assert without_model_warning(res.row["warnings"]) == (
        f"ANALYSIS_DETAILS states the capture as {stated} s, which the rows do not fit (the kernels' median start, "
        f"201.450000 s, lies outside it both as stated and counted from the capture's start), but the export's own "
        f"rows run 200.050000..201.980000 s ({ALL_OUTSIDE} lie outside it){JUDGED['both']}: the rows are trusted, "
        "none is dropped for that")
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES]
    assert (rep.capture_start_ns, rep.capture_start_source) == (
        BASE + 50 * MS, f"the export's own rows' start (ANALYSIS_DETAILS.startTime states {lo / 1e9:.6f} s, which the "
                        "rows do not fit)")


def test_bounds_on_the_rows_clock_are_unchanged(tmp_path):
    """ANALYSIS_DETAILS 200.04 .. 202.00 s and the session start at 200.04 s hold every row: no warning, ok, the
    zero the stated start."""
    path = shifted_export(tmp_path / "fits.sqlite", BASE, (BASE + 40 * MS, BASE + 2000 * MS), BASE + 40 * MS)
    rep, res = kept_and_analysed(path, (5, 5, 0, 1, 1))
    assert (res.row["status"], without_model_warning(res.row["warnings"]), rep.warnings) == ("ok", "", [])
    assert (rep.capture_start_ns, rep.capture_start_source) == (BASE + 40 * MS, "ANALYSIS_DETAILS.startTime")


def three_syncs(w):
    """3 cudaStreamSynchronize calls of 1 ms at 61, 62 and 63 s: 59 s after every other row."""
    for t in (61, 62, 63):
        w.runtime(pid=10, tid=11, start=t * S, end=t * S + MS, name="cudaStreamSynchronize_v3020")


#: The capture of older_export's rows under ANALYSIS_DETAILS 1.17 .. 3.44 s (the start judged wrong).
START_WRONG = ("0.050000..3.440000 s on the report's clock, per the export's own rows for the start and "
               "ANALYSIS_DETAILS for the end (ANALYSIS_DETAILS states 1.170000..3.440000 s)")
#: The start-wrong warning of older_export's rows under 1.17 .. 3.44 s.
START_WARNING = ("ANALYSIS_DETAILS states the capture as 1.170000..3.440000 s on the report's clock, but the export's "
                 "own rows run 0.050000..1.980000 s (1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD lie outside it)"
                 + JUDGED["start"] + ": the rows are trusted, none is dropped for that")


def test_three_harmless_runtime_rows_warn_but_leave_the_gpu_ok(tmp_path):
    """ANALYSIS_DETAILS 1.17 .. 3.44 s, slightly off (the rows start at 0.05 s: the start judged wrong, the end
    stands, +1 s: 4.44 s) and the 3 calls at 61 .. 63 s, a step of 59.02 s past the rows: dropped, counted, and
    said to lie wholly outside the kernels' time (0.93 .. 1.97 s): none can change a figure, the GPU is ok."""
    rep, res = kept_and_analysed(older_export(tmp_path / "syncs.sqlite", 1170, 3440, three_syncs), (5, 5, 0, 1, 1))
    assert res.row["status"] == "ok"
    assert without_model_warning(res.row["warnings"]) == "; ".join([
        START_WARNING,
        f"dropped 3 rows of CUPTI_ACTIVITY_KIND_RUNTIME timed far outside the capture ({START_WRONG}; e.g. start "
        "61.000000 s, end 61.001000 s): they lie wholly outside the kernels' time (0.930000..1.970000 s), so no "
        "figure rests on them"])
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES, WarningCode.DROPPED_STRAY_ROWS]


def test_a_dropped_kernel_row_that_could_change_the_figures_makes_it_partial(tmp_path):
    """The same, plus a kernel at 61.5 s: dropped too, and a kernel is the work itself: partial (the stray calls'
    warning stays as it was; the kernels' time is that of the 5 kept)."""
    def fill(w):
        three_syncs(w)
        w.kernel(pid=10, device=0, stream=7, start=61_500 * MS, end=61_540 * MS, name="gemm", correlation=w.correlation())
    rep, res = kept_and_analysed(older_export(tmp_path / "kernel.sqlite", 1170, 3440, fill), (5, 5, 0, 1, 1))
    assert res.row["status"] == "partial"
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES, WarningCode.DROPPED_KERNEL_ROWS,
                                              WarningCode.DROPPED_STRAY_ROWS]
    assert without_model_warning(res.row["warnings"]) == "; ".join([
        START_WARNING,
        f"dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL timed far outside the capture ({START_WRONG}; e.g. start "
        "61.500000 s, end 61.540000 s)",
        f"dropped 3 rows of CUPTI_ACTIVITY_KIND_RUNTIME timed far outside the capture ({START_WRONG}; e.g. start "
        "61.000000 s, end 61.001000 s): they lie wholly outside the kernels' time (0.930000..1.970000 s), so no "
        "figure rests on them"])


def test_a_dropped_call_over_the_kernels_time_makes_it_partial(tmp_path):
    """A cudaStreamSynchronize from -2^62 ns to 1.50 s (inside the kernels' time, 0.93 .. 1.97 s: it could have
    covered a gap) is dropped: partial; a memcpy at 61 s is dropped too, wholly outside the kernels' time: its
    table's warning is stray (each table's dropped rows are judged together)."""
    def fill(w):
        w.runtime(pid=10, tid=11, start=-(2 ** 62), end=1500 * MS, name="cudaStreamSynchronize_v3020")
        w.memcpy(pid=10, device=0, stream=9, start=61 * S, end=61 * S + MS)
    rep, res = kept_and_analysed(older_export(tmp_path / "over.sqlite", 1170, 3440, fill), (5, 5, 0, 1, 1))
    assert res.row["status"] == "partial"
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES, WarningCode.DROPPED_ROWS,
                                              WarningCode.DROPPED_STRAY_ROWS]


@pytest.mark.parametrize("stop_ms, wrong, rows, outside", [
    # start wrong: 1.17 .. 3.44 s (above; the calls at 2.5 and 3.0 s lie inside it)
    (3440, "start", "0.050000..3.001000", "1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD"),
    # both: 1.17 .. 1.30 s (+1 s: 0.17 .. 2.30 s); calls at 2.5 and 3.0 s run on past the end (steps of 0.52 and
    # 0.5 s, under max(1 s, 1.055 s)) and the NVTX range and overhead row before the start
    (1300, "both", "0.050000..3.001000",
     "2 rows of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS, 1 of PROFILER_OVERHEAD"),
])
def test_the_warning_names_the_bound_judged_wrong(tmp_path, stop_ms, wrong, rows, outside):
    """The end-wrong variant (0.05 .. 0.50 s) is test_public_shapes_nsight's; every variant: one warning, ok."""
    def later(w):
        for t in (2500, 3000):
            w.runtime(pid=10, tid=11, start=t * MS, end=(t + 1) * MS, name="cudaStreamSynchronize_v3020")
    rep, res = kept_and_analysed(older_export(tmp_path / "b.sqlite", 1170, stop_ms, later), (5, 7, 0, 1, 1))
    assert res.row["status"] == "ok"
    assert without_model_warning(res.row["warnings"]) == (
        f"ANALYSIS_DETAILS states the capture as 1.170000..{stop_ms / 1000:.6f} s on the report's clock, but the "
        f"export's own rows run {rows} s ({outside} lie outside it){JUDGED[wrong]}: the rows are trusted, none is "
        "dropped for that")
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES]
