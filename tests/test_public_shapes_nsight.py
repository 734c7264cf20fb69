"""Issue 24, kinds 3 and 4: shapes of public Nsight Systems exports that were silently wrong.

3. Other processes' capture diagnostics on a GPU's row: a GPU row carries the DIAGNOSTIC_EVENT
   messages of its own processes and the session-wide ones that bear on the GPU trace (not CPU
   sampling, OS runtime, ftrace...), each distinct text once, with a count.
4. A capture range (ANALYSIS_DETAILS) that the export's own rows do not fit: the rows are trusted,
   not dropped as "far outside the capture", and one coded warning says so; INT64_MAX and other
   impossible timestamps are still dropped and counted. Each stated bound is judged on its own: a bound
   the rows do not run past stands, and a row isolated beyond a bound (a stale row 59 s away, a row
   after a step longer than the rows' extent) is dropped; the timeline's zero is the rows' start when
   they start before the stated one. On a side with no trusted stated bound (none stated, stated on
   another clock, or the rows not fitting it at all) the rows' body decides: from the kernels' median
   outwards, steps of at most max(1 s, its extent so far); a row after a longer step is dropped and
   counted, and a stated capture the rows do not fit is said, in the warning and the zero.

Every input is a small export in the real schema (ExportWriter); every expected number is worked out
by hand in the comments.
"""
from __future__ import annotations

import html
import json
import re

import pandas as pd
import pytest
from conftest import run_cli, without_model_warning

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import Config
from pipeline.fleet.outputs import PAGES_DIR, gpu_json_name, gpu_page_name
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import WarningCode
from pipeline.synth import ExportWriter

MS = 1_000_000
S = 1_000_000_000
INT64_MAX = 9_223_372_036_854_775_807
AUTO = Config()


def analyse(path, cfg: Config = AUTO) -> dict:
    """GPU key -> GpuResult of every GPU of the export at ``path``."""
    rep = load_report(str(path))
    return {key: analyse_gpu(gpu_trace(rep, key), cfg, cfg.labels_for(rep.path)) for key in rep.gpu_keys()}


# ---------------------------------------------------------------- 3. diagnostics of other processes

#: Texts as Nsight Systems writes them (format strings of the nsys 2025 binaries, filled in).
NO_CUDA = "No CUDA events collected. Does the process use CUDA?"
NO_NVTX = "No NVTX events collected. Does the process use NVTX?"
NO_OSRT = "No OS runtime libraries events collected. Does the process use OS runtime libraries?"
SAMPLING_LOST = ("Sampling events were lost in the interval 5000000 - 6000000 (1000000) ns. Thread states and CPU "
                 "utilization on the timeline might be incorrect. Try reducing the sampling rate.")
SOME_LOST_CPU = ("Some events (42) were lost. Certain charts (including CPU utilization) on the timeline may display "
                 "incorrect data. Try to decrease sampling rate and start a new profiling session.")
PARANOID = ("Collection of CPU IP/backtrace samples or context switch data disabled. perf event paranoid level is 4. "
            "Change the paranoid level to 2 to enable CPU IP/backtrace sample or context switch data collection.")
FTRACE_LOST = "FTrace: Cpu3 lost event field: lost value: 12"
UNIFIED_MEMORY = ("CUDA device 0: Unified Memory cannot be traced on devices that don't support peer-to-peer "
                  "transfers.Please verify that SLI/NVLink is functioning properly.")
CUPTI_DROPPED = "CUPTI dropped 5 records. Some CUPTI events might be missing."
GPU_DISCARDED = ("12 GPU events were discarded as their timestamps could not be converted. Note that nsys cannot "
                 "convert GPU timestamps coming from non-NVIDIA devices.")
QDSTRM_LOST = "Reading events from qdstrm: session 1: Lost events = 7"


def one_gpu_nine_helpers(w: ExportWriter) -> None:
    """pid 10 runs 1,536 kernels of 1 ms every 3 ms on device 0: W = [0, 4606) ms, 1,536 ms busy,
    3,070 ms idle (1,535 gaps of 2 ms). Helper pids 101..109 each say 3 things (27 messages); the
    session (globalPid of no process) says CPU sampling lost events at 5.5 ms, in the gap [4, 6) ms,
    and that perf is paranoid; pid 10 itself says twice that Unified Memory cannot be traced."""
    for i in range(1536):
        w.kernel(pid=10, device=0, stream=7, start=3 * i * MS, end=(3 * i + 1) * MS, name="gemm")
    for pid in range(101, 110):
        for text in (NO_CUDA, NO_NVTX, NO_OSRT):
            w.diagnostic(MS, text, severity=2, pid=pid)
    w.diagnostic(5_500_000, SAMPLING_LOST, severity=2, pid=0)
    w.diagnostic(0, PARANOID, severity=2, pid=None)
    w.diagnostic(MS, UNIFIED_MEMORY, severity=2, pid=10)
    w.diagnostic(3 * MS, UNIFIED_MEMORY, severity=2, pid=10)


def test_helpers_diagnostics_stay_off_the_gpu_row(tmp_path):
    """Through the CLI: the GPU row says its own process's message once, with its count; the helpers'
    27 messages and the session's CPU-sampling ones are not on it, and the CPU-sampling loss inside a
    gap neither makes the row partial nor the gap untraced."""
    folder = tmp_path / "in"
    folder.mkdir()
    w = ExportWriter(str(folder / "helpers.sqlite"))
    one_gpu_nine_helpers(w)
    w.close()
    out = tmp_path / "out"
    run_cli("run", str(folder), "--out", str(out), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    (row,) = fleet.to_dict("records")
    assert (row["gpu_key"], int(row["kernel_count"]), int(row["window_ns"]), int(row["idle_ns"])) == (
        "pid10/dev0", 1536, 4606 * MS, 3070 * MS)
    assert (row["status"], int(row["cat_untraced_ns"]), int(row["cat_cpu_ns"])) == ("ok", 0, 3070 * MS)
    assert without_model_warning(row["warnings"]) == f"DIAGNOSTIC_EVENT: {UNIFIED_MEMORY} (reported 2 times)"


def test_each_gpu_gets_its_own_and_the_sessions_gpu_diagnostics(tmp_path):
    """Two GPU processes (pid 10 dev 0, pid 20 dev 1), 5 kernels of 6 ms every 10 ms each (W = 46 ms,
    4 gaps of 4 ms: [6,10) [16,20) [26,30) [36,40)). pid 10's CUPTI loss (at 17 ms) is pid 10's only;
    the session's GPU-event loss (globalPid NULL, at 27 ms) is both GPUs'; the session's CPU-side losses
    (at 7 and 37 ms) and ftrace's are nobody's. Untraced: pid 10 [16,20) + [26,30) = 8 ms; pid 20
    [26,30) = 4 ms."""
    path = tmp_path / "two.sqlite"
    w = ExportWriter(str(path))
    for pid, device in ((10, 0), (20, 1)):
        for i in range(5):
            w.kernel(pid=pid, device=device, stream=7, start=i * 10 * MS, end=i * 10 * MS + 6 * MS, name="gemm")
    w.diagnostic(17 * MS, CUPTI_DROPPED, severity=2, pid=10)
    w.diagnostic(7 * MS, SOME_LOST_CPU, severity=2, pid=0)
    w.diagnostic(27 * MS, GPU_DISCARDED, severity=2, pid=None)
    w.diagnostic(37 * MS, FTRACE_LOST, severity=2, pid=0)
    w.diagnostic(MS, NO_CUDA, severity=2, pid=30)
    w.close()
    results = analyse(path)
    first, second = results["pid10/dev0"].row, results["pid20/dev1"].row
    assert (first["status"], first["idle_ns"], first["cat_untraced_ns"]) == ("partial", 16 * MS, 8 * MS)
    assert (second["status"], second["idle_ns"], second["cat_untraced_ns"]) == ("partial", 16 * MS, 4 * MS)
    assert without_model_warning(first["warnings"]) == (
        f"DIAGNOSTIC_EVENT: {CUPTI_DROPPED}; DIAGNOSTIC_EVENT: {GPU_DISCARDED}")
    assert without_model_warning(second["warnings"]) == f"DIAGNOSTIC_EVENT: {GPU_DISCARDED}"


def test_processes_sharing_a_gpu_count_one_message_once(tmp_path):
    """pids 10 and 11 share device 0 (one UUID): both report the same CUPTI loss; the GPU's row names it
    once, 'reported 2 times', and is partial; a third process on another GPU has its own row, clean."""
    path = tmp_path / "shared.sqlite"
    w = ExportWriter(str(path))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="GPU-aaaa")
    w.gpu(1, "NVIDIA H100 80GB HBM3", uuid="GPU-bbbb")
    for pid, device, gpu_id, uuid in ((10, 0, 0, "GPU-aaaa"), (11, 0, 0, "GPU-aaaa"), (12, 1, 1, "GPU-bbbb")):
        w.cuda_device(gpu_id, device, pid, uuid=uuid)
        for i in range(3):
            w.kernel(pid=pid, device=device, stream=7, start=i * 10 * MS, end=i * 10 * MS + 4 * MS, name="gemm")
    w.diagnostic(MS, CUPTI_DROPPED, severity=2, pid=10)
    w.diagnostic(MS, CUPTI_DROPPED, severity=2, pid=11)
    w.close()
    rows = {key: res.row for key, res in analyse(path).items()}
    assert len(rows) == 2
    shared = next(r for r in rows.values() if r["kernel_count"] == 6)
    alone = next(r for r in rows.values() if r["kernel_count"] == 3)
    assert (shared["status"], shared["warnings"]) == ("partial",
                                                      f"DIAGNOSTIC_EVENT: {CUPTI_DROPPED} (reported 2 times)")
    assert (alone["status"], alone["warnings"]) == ("ok", "")


def test_diagnostics_without_a_process_column(tmp_path):
    """An older DIAGNOSTIC_EVENT without globalPid: every message is the session's; the CPU-sampling ones
    stay off, the GPU one is kept once with its count."""
    path = tmp_path / "old.sqlite"
    w = ExportWriter(str(path), drop_columns={"DIAGNOSTIC_EVENT": {"globalPid"}})
    for i in range(3):
        w.kernel(pid=10, device=0, stream=7, start=i * 10 * MS, end=i * 10 * MS + 4 * MS, name="gemm")
    w.diagnostic(MS, SAMPLING_LOST, severity=2)
    w.diagnostic(MS, UNIFIED_MEMORY, severity=2)
    w.diagnostic(2 * MS, UNIFIED_MEMORY, severity=3)
    w.diagnostic(3 * MS, UNIFIED_MEMORY, severity=2)
    w.close()
    (res,) = analyse(path).values()
    assert (res.row["status"], without_model_warning(res.row["warnings"])) == (
        "ok", f"DIAGNOSTIC_EVENT: {UNIFIED_MEMORY} (reported 3 times)")


@pytest.mark.parametrize("text, bears", [
    (CUPTI_DROPPED, True), (UNIFIED_MEMORY, True), (GPU_DISCARDED, True), (NO_CUDA, True),
    (QDSTRM_LOST, True),  # names no subsystem: it may be the GPU trace's loss
    (SAMPLING_LOST, False), (SOME_LOST_CPU, False), (PARANOID, False), (FTRACE_LOST, False), (NO_OSRT, False),
    ("Failed to write raw CPU sampling data to the /tmp directory. Check if the /tmp directory is full.", False),
    ("Number of used Debuginfod cached files: 0.", False),
])
def test_which_texts_bear_on_the_gpu_trace(text, bears):
    from pipeline.load.diagnostics import bears_on_gpu_trace
    assert bears_on_gpu_trace(text) is bears


# ---------------------------------------------------------------- 4. capture range the rows do not fit

#: Kernels as in the issue's export: 0.93 .. 1.97 s on the report's clock, 5 of 40 ms:
#: [930, 970) [1190, 1230) [1450, 1490) [1710, 1750) [1930, 1970) ms. W = 1,040 ms, 200 ms busy,
#: 840 ms idle in 4 gaps of 220, 220, 220, 180 ms.
KERNEL_STARTS_MS = (930, 1190, 1450, 1710, 1930)


def older_export(path, start_ms: int, stop_ms: int, fill=None, launches: bool = True) -> str:
    """A Nsight Systems 2022.2 export (schema 2.9.1, no TARGET_INFO_SESSION_START_TIME) whose
    ANALYSIS_DETAILS says the capture ran ``start_ms`` .. ``stop_ms`` on the rows' clock. pid 10: the
    kernels of :data:`KERNEL_STARTS_MS`, each launched 5 ms before it starts (cudaLaunchKernel of 1 ms;
    none with ``launches`` False);
    an NVTX range "main" over the whole run, [50, 1980) ms; a profiler-overhead row (CUDA initialisation)
    at [100, 120) ms; then ``fill(w)``."""
    w = ExportWriter(str(path), schema_version="2.9.1")
    w.rows["ANALYSIS_DETAILS"] = [(0x1000000000000, (stop_ms - start_ms) * MS, start_ms * MS, stop_ms * MS)]
    for start in KERNEL_STARTS_MS:
        corr = w.correlation()
        if launches:
            w.runtime(pid=10, tid=11, start=(start - 5) * MS, end=(start - 4) * MS, name="cudaLaunchKernel_v7000",
                      correlation=corr)
        w.kernel(pid=10, device=0, stream=7, start=start * MS, end=(start + 40) * MS, name="gemm", correlation=corr)
    w.nvtx(pid=10, tid=11, start=50 * MS, end=1980 * MS, text="main")
    w.overhead(pid=10, tid=11, start=100 * MS, end=120 * MS, kind="OVERHEAD_CUPTI_RESOURCE", name="cuInit")
    if fill:
        fill(w)
    return w.close()


#: What the capture-disagrees warning says of the stated bound(s) the rows judged wrong (issue 41).
JUDGED = {"start": "; its start is judged wrong and the capture starts where the rows do",
          "end": "; its end is judged wrong and the capture ends where the rows do",
          "both": "; its start and end are judged wrong and the capture is the rows' own run"}


#: What a dropped-rows warning adds when its one row lies wholly outside the 5 kernels' time (0.93 .. 1.97 s):
#: no figure rests on it, the row stays ok (``dropped-stray-rows``, issue 41).
STRAY = ": it lies wholly outside the kernels' time (0.930000..1.970000 s), so no figure rests on it"


def disagrees(stated: str, rows: str, outside: str, wrong: str = "start") -> str:
    return (f"ANALYSIS_DETAILS states the capture as {stated} s on the report's clock, but the export's own rows "
            f"run {rows} s ({outside} lie outside it){JUDGED[wrong]}: the rows are trusted, none is dropped for that")


def kept_and_analysed(path, counts: tuple):
    """The report at ``path``, after checking how many rows it kept of each kind (kernels, runtime calls,
    copies, NVTX ranges, overhead), and its one GPU's result, after checking the kernels' figures are the
    5 kernels' (W = 1,040 ms, 200 ms busy, 840 ms idle)."""
    rep = load_report(path)
    assert (len(rep.kernels), len(rep.runtime), len(rep.copies), len(rep.nvtx), len(rep.overhead)) == counts
    (res,) = analyse(path).values()
    row = res.row
    assert (row["kernel_count"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == (5, 1040 * MS, 200 * MS,
                                                                                       840 * MS)
    return rep, res


@pytest.mark.parametrize("start_ms, stop_ms, outside, wrong", [
    # the export: the capture 1.17 .. 3.44 s starts after the first rows (NVTX at 50 ms, overhead at
    # 100 ms: both before 1.17 s - 1 s of slack); the kernels at 0.93 s are inside the slack: the start is wrong
    (1170, 3440, "1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD", "start"),
    # a capture shorter than the data, inside it (1.40 .. 1.50 s: slack 0.40 .. 2.50 s): the start is wrong, the
    # end (2.50 s with the slack) holds the last row (1.98 s)
    (1400, 1500, "1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD", "start"),
    # a capture earlier than the data (0.05 .. 0.50 s: slack up to 1.50 s): the last 2 kernels, their
    # launches and the NVTX range end after it: the end is wrong
    (50, 500, "2 rows of CUPTI_ACTIVITY_KIND_KERNEL, 2 of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS", "end"),
])
def test_capture_range_that_the_rows_do_not_fit(tmp_path, start_ms, stop_ms, outside, wrong):
    rep, res = kept_and_analysed(older_export(tmp_path / "old.sqlite", start_ms, stop_ms), (5, 5, 0, 1, 1))
    row = res.row
    assert row["status"] == "ok"
    stated = f"{start_ms / 1000:.6f}..{stop_ms / 1000:.6f}"
    assert without_model_warning(row["warnings"]) == disagrees(stated, "0.050000..1.980000", outside, wrong)
    assert [w.code for w in rep.warnings] == [WarningCode.CAPTURE_DISAGREES]
    assert {g["nvtx_range"] for g in res.device_roster} == {"main"}  # every gap lies in the kept NVTX range


def test_only_the_kernels_fit_the_stated_capture(tmp_path):
    """ANALYSIS_DETAILS 1.93 .. 2.50 s (with 1 s of slack: from 0.93 s) holds the kernels and nothing
    else: a cudaMalloc at 0.20 s, a 100 ms copy at 0.30 s, the NVTX range and the overhead row; the rows
    run on from the kernels back to 0.05 s without a break (no gap over 1 s), so the stated capture is
    wrong, not they: all kept, said once."""
    def before(w):
        w.runtime(pid=10, tid=11, start=200 * MS, end=210 * MS, name="cudaMalloc_v3020")
        w.memcpy(pid=10, device=0, stream=9, start=300 * MS, end=400 * MS)
    _, res = kept_and_analysed(older_export(tmp_path / "kernels_only.sqlite", 1930, 2500, before, launches=False),
                               (5, 1, 1, 1, 1))
    assert res.row["status"] == "ok"
    assert without_model_warning(res.row["warnings"]) == disagrees(
        "1.930000..2.500000", "0.050000..1.980000",
        "1 row of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of CUPTI_ACTIVITY_KIND_MEMCPY, 1 of NVTX_EVENTS, "
        "1 of PROFILER_OVERHEAD")


def test_garbage_is_still_dropped_when_the_capture_range_disagrees(tmp_path):
    """The issue's shape plus impossible rows: an NVTX range ending at INT64_MAX, a runtime call starting
    at -2^62 ns, an overhead row starting 200 years later. They are dropped and counted against the
    rows' own start (0.05 s: the stated start is contradicted) and the stated end (3.44 s, which the real
    rows do not run past; 4.44 s with the slack); the real rows stay; the row is partial for the dropped NVTX
    range (it may make the window); the runtime call (ending at 0.90 s) and the overhead row lie wholly outside
    the kernels' time, 0.93 .. 1.97 s: no figure rests on them (issue 41)."""
    future = 200 * 365 * 86400 * S

    def garbage(w):
        w.nvtx(pid=10, tid=11, start=60 * MS, end=INT64_MAX, text="broken")
        w.runtime(pid=10, tid=11, start=-(2 ** 62), end=900 * MS, name="cudaStreamSynchronize_v3020")
        w.overhead(pid=10, tid=11, start=future, end=future + MS)
    _, res = kept_and_analysed(older_export(tmp_path / "garbage.sqlite", 1170, 3440, garbage), (5, 5, 0, 1, 1))
    row = res.row
    assert row["status"] == "partial"
    capture = ("0.050000..3.440000 s on the report's clock, per the export's own rows for the start and "
               "ANALYSIS_DETAILS for the end (ANALYSIS_DETAILS states 1.170000..3.440000 s)")
    assert without_model_warning(row["warnings"]) == "; ".join([
        disagrees("1.170000..3.440000", "0.050000..1.980000", "1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD"),
        f"dropped 1 row of CUPTI_ACTIVITY_KIND_RUNTIME timed far outside the capture ({capture}; e.g. start "
        f"{-(2 ** 62) / 1e9:.6f} s, end 0.900000 s){STRAY}",
        f"dropped 1 row of NVTX_EVENTS timed far outside the capture ({capture}; e.g. start 0.060000 s, "
        "end 9223372036.854776 s)",
        f"dropped 1 row of PROFILER_OVERHEAD timed far outside the capture ({capture}; e.g. start "
        f"{future / 1e9:.6f} s, end {(future + MS) / 1e9:.6f} s){STRAY}",
    ])
    codes = [c for c in row["warning_codes"].split(",") if c != "gpu-model-unresolved"]
    assert codes == ["capture-disagrees", "dropped-stray-rows", "dropped-rows"]  # the NVTX range makes it partial


def test_a_capture_the_rows_fit_is_unchanged(tmp_path):
    """ANALYSIS_DETAILS 0.04 .. 2.00 s holds every row: no warning, nothing dropped, status ok."""
    _, res = kept_and_analysed(older_export(tmp_path / "fits.sqlite", 40, 2000), (5, 5, 0, 1, 1))
    assert (res.row["status"], without_model_warning(res.row["warnings"])) == ("ok", "")


def test_session_start_after_the_first_rows(tmp_path):
    """No ANALYSIS_DETAILS, only TARGET_INFO_SESSION_START_TIME at 1.17 s (slack: from 0.17 s): the NVTX range
    (0.05 s) and the overhead row (0.10 s) run on before it, 0.05 s from the rows after it: kept, said once."""
    def session_only(w):
        del w.rows["ANALYSIS_DETAILS"]
        w.session(1170 * MS)
    _, res = kept_and_analysed(older_export(tmp_path / "session.sqlite", 0, 1, session_only), (5, 5, 0, 1, 1))
    assert res.row["status"] == "ok"
    assert without_model_warning(res.row["warnings"]) == (
        "TARGET_INFO_SESSION_START_TIME states the capture's start as 1.170000 s on the report's clock, but the "
        "export's own rows run 0.050000..1.980000 s (1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD lie outside it)"
        + JUDGED["start"] + ": the rows are trusted, none is dropped for that")


# ---- each stated bound judged on its own: a bound the rows do not run past stands

def per_rows_and_details(stated: str, shown: str) -> str:
    """The capture's text when the rows replace the stated start and ANALYSIS_DETAILS' end stands."""
    return (f"{shown} s on the report's clock, per the export's own rows for the start and ANALYSIS_DETAILS for "
            f"the end (ANALYSIS_DETAILS states {stated} s)")


def stale_kernel(w):
    w.kernel(pid=10, device=0, stream=7, start=61 * S, end=61 * S + 1000, name="gemm", correlation=w.correlation())


def stale_nvtx(w):
    w.nvtx(pid=10, tid=11, start=61 * S, end=61 * S + 1000, text="stale")


def stale_runtime(w):
    w.runtime(pid=10, tid=11, start=61 * S, end=61 * S + 1000, name="cudaStreamSynchronize_v3020")


@pytest.mark.parametrize("fill, table, status, tail", [
    (stale_kernel, "CUPTI_ACTIVITY_KIND_KERNEL", "partial", ""), (stale_nvtx, "NVTX_EVENTS", "partial", ""),
    # a CUDA API call 59 s after every kernel: no figure rests on it (issue 41)
    (stale_runtime, "CUPTI_ACTIVITY_KIND_RUNTIME", "ok", STRAY)])
def test_a_stale_row_beyond_the_end_the_rows_agree_with_is_dropped(tmp_path, fill, table, status, tail):
    """The issue's export (ANALYSIS_DETAILS 1.17 .. 3.44 s, rows from the NVTX range at 0.05 s to its end at
    1.98 s) plus one row at 61.000000 .. 61.000001 s. The start is contradicted: the rows inside the stated
    capture with its slack (0.17 .. 4.44 s) run 0.925 .. 1.98 s (the first launch at 0.925 s), reach
    max(1 s, 1.055 s) = 1.055 s; below 0.17 s lie 0.12, 0.10, 0.05 s, steps of 0.805, 0.02, 0.05 s: all
    continue them, the start is the rows' 0.05 s. The end is not: the nearest row beyond 4.44 s is 59.02 s
    after 1.98 s, so the end stands at 3.44 s (+ 1 s) and the stale row is dropped and counted: the GPU is
    partial, the 5 kernels' figures stay (W = 1,040 ms, 840 ms idle, not 60.07 s and 60.03 s idle); the
    timeline's zero is the rows' start, 0.05 s, not ANALYSIS_DETAILS' 1.17 s."""
    rep, res = kept_and_analysed(older_export(tmp_path / "stale.sqlite", 1170, 3440, fill), (5, 5, 0, 1, 1))
    row = res.row
    assert row["status"] == status
    capture = per_rows_and_details("1.170000..3.440000", "0.050000..3.440000")
    assert without_model_warning(row["warnings"]) == "; ".join([
        disagrees("1.170000..3.440000", "0.050000..1.980000", "1 row of NVTX_EVENTS, 1 of PROFILER_OVERHEAD"),
        f"dropped 1 row of {table} timed far outside the capture ({capture}; e.g. start 61.000000 s, "
        f"end 61.000001 s){tail}"])
    assert (rep.capture_start_ns, rep.capture_start_source) == (
        50 * MS, "the export's own rows' start (ANALYSIS_DETAILS.startTime states 1.170000 s, after them)")


@pytest.mark.parametrize("fill, table, status, tail", [(stale_nvtx, "NVTX_EVENTS", "partial", ""),
                                                       (stale_runtime, "CUPTI_ACTIVITY_KIND_RUNTIME", "ok", STRAY)])
def test_an_isolated_row_beyond_a_contradicted_end_is_dropped(tmp_path, fill, table, status, tail):
    """ANALYSIS_DETAILS 0.05 .. 0.50 s (slack: -0.95 .. 1.50 s; it holds the kernels' median start, 1.45 s,
    so it is the rows' clock) and a stale row at 61 s (not a kernel: it would move the median). Inside: 0.05 ..
    1.49 s (the third kernel's end), reach max(1 s, 1.44 s) = 1.44 s. Beyond 1.50 s: 1.705 s (the fourth
    launch), ... 1.97 s (the last kernel's end), 1.98 s (the NVTX range's end), no step over 0.215 s: they
    continue the rows, the end is the rows' 1.98 s; then 61 s, a step of 59.02 s: an outlier, dropped. The
    start (0.05 s, -0.95 s with the slack) holds every row: it stands, and so does the timeline's zero."""
    rep, res = kept_and_analysed(older_export(tmp_path / "late.sqlite", 50, 500, fill), (5, 5, 0, 1, 1))
    row = res.row
    assert row["status"] == status
    capture = ("0.050000..1.980000 s on the report's clock, per ANALYSIS_DETAILS for the start and the export's own "
               "rows for the end (ANALYSIS_DETAILS states 0.050000..0.500000 s)")
    assert without_model_warning(row["warnings"]) == "; ".join([
        disagrees("0.050000..0.500000", "0.050000..1.980000",
                  "2 rows of CUPTI_ACTIVITY_KIND_KERNEL, 2 of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS", "end"),
        f"dropped 1 row of {table} timed far outside the capture ({capture}; e.g. start 61.000000 s, "
        f"end 61.000001 s){tail}"])
    assert (rep.capture_start_ns, rep.capture_start_source) == (50 * MS, "ANALYSIS_DETAILS.startTime")


def test_rows_beyond_a_bound_must_continue_without_a_longer_step(tmp_path):
    """ANALYSIS_DETAILS 1.17 .. 3.44 s (slack: 0.17 .. 4.44 s) and cudaStreamSynchronize calls of 1 ms at
    4.2, 6.2, 8.2 and 12.0 s. Inside: 0.925 .. 4.201 s, reach max(1 s, 3.276 s) = 3.276 s. Beyond 4.44 s:
    6.2 s (a step of 1.999 s from 4.201 s: longer than 1 s, shorter than the reach), 6.201, 8.2, 8.201 s,
    then 12.0 s, a step of 3.799 s: the end is the rows' 8.201 s, the call at 12.0 s an outlier (the
    nearest row alone would keep it). The start is the rows' 0.05 s, as in the issue's export."""
    def syncs(w):
        for start_ms in (4200, 6200, 8200, 12000):
            w.runtime(pid=10, tid=11, start=start_ms * MS, end=(start_ms + 1) * MS, name="cudaStreamSynchronize_v3020")
    rep, res = kept_and_analysed(older_export(tmp_path / "syncs.sqlite", 1170, 3440, syncs), (5, 8, 0, 1, 1))
    row = res.row
    assert row["status"] == "ok"  # the call dropped lies wholly after every kernel (issue 41)
    capture = ("0.050000..8.201000 s on the report's clock, per the export's own rows "
               "(ANALYSIS_DETAILS states 1.170000..3.440000 s)")
    assert without_model_warning(row["warnings"]) == "; ".join([
        disagrees("1.170000..3.440000", "0.050000..8.201000",
                  "2 rows of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS, 1 of PROFILER_OVERHEAD", "both"),
        f"dropped 1 row of CUPTI_ACTIVITY_KIND_RUNTIME timed far outside the capture ({capture}; e.g. start "
        "12.000000 s, end 12.001000 s)" + STRAY])
    assert sorted(rep.runtime["start"].tolist())[-3:] == [4200 * MS, 6200 * MS, 8200 * MS]
    assert rep.capture_start_ns == 50 * MS


def test_the_gpu_page_counts_seconds_from_the_rows_start(tmp_path):
    """The real CLI on the issue's export with the stale kernel at 61 s: the GPU's JSON and page count
    seconds from the rows' start, 0.05 s (the zero the loader judged the rows by), not from
    ANALYSIS_DETAILS' 1.17 s, which put the NVTX range and the first kernels at negative seconds. The
    window 0.93 .. 1.97 s shows as 0.880000 .. 1.920000 s; the first gap of the roster (the longest, 220 ms,
    earliest first) starts at 0.97 s: 0.920000 s."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    report = older_export(inputs / "stale.sqlite", 1170, 3440, stale_kernel)
    out = tmp_path / "out"
    run_cli("run", str(inputs), "--out", str(out), "--window", "span", "--no-cache")
    run_cli("report", str(out), "--out", str(out / "report.html"))
    doc = json.loads((out / "gpus" / gpu_json_name(report, "pid10/dev0")).read_text(encoding="utf-8"))
    source = "the export's own rows' start (ANALYSIS_DETAILS.startTime states 1.170000 s, after them)"
    assert (doc["timeline"]["capture_start_ns"], doc["timeline"]["capture_start_source"]) == (50 * MS, source)
    assert (doc["_summary"]["status"], doc["_summary"]["window_ns"]) == ("partial", 1040 * MS)
    page = html.unescape((out / PAGES_DIR / gpu_page_name(report, "pid10/dev0")).read_text(encoding="utf-8"))
    assert f'<dd id="zero">{source} = {50 * MS} ns: ' in page
    # the zero is not the Nsight Systems timeline's (that counts from the stated start, 1.17 s): said so
    assert (f'<dd id="zero">{source} = {50 * MS} ns: ' + "the export's first rows, not the zero of the Nsight "
            "Systems timeline") in page
    assert "the Nsight Systems GUI" not in page
    assert "0.880000 s – 1.920000 s from the capture start (930000000 – 1970000000 ns" in page
    body = re.search(r'<table id="device-roster">(.*?)</table>', page, re.S).group(1)
    first = re.search(r"<tr id=[^>]*>(.*?)</tr>", body, re.S).group(1)
    cells = [html.unescape(re.sub(r"<[^>]+>", " ", c)).split() for c in re.findall(r"<td[^>]*>(.*?)</td>", first, re.S)]
    assert [" ".join(c) for c in cells[1:4]] == ["0.920000 s", "0.970000 s", str(970 * MS)]


# ---- no trusted stated bound: the rows' own body decides (steps of at most max(1 s, its extent so far))

def unfit(stated: str, median: str, rows: str, outside: str) -> str:
    """The capture-disagrees warning of an export whose rows do not fit its ANALYSIS_DETAILS at all."""
    return (f"ANALYSIS_DETAILS states the capture as {stated} s, which the rows do not fit (the kernels' median start, "
            f"{median} s, lies outside it both as stated and counted from the capture's start), but the export's own "
            f"rows run {rows} s ({outside} lie outside it){JUDGED['both']}: the rows are trusted, none is dropped for that")


def per_rows_unfit(shown: str, stated: str) -> str:
    return f"{shown} s on the report's clock, per the export's own rows (ANALYSIS_DETAILS states {stated} s, which " \
           "the rows do not fit)"


@pytest.mark.parametrize("stop_ms, fill, table, median, outside", [
    # the tryout's repro: ANALYSIS_DETAILS 0.05 .. 0.50 s and the stale kernel at 61 s. The 6 kernels' median start
    # is (1.45 + 1.71) / 2 = 1.58 s, outside 0.05 .. 0.50 s + 1 s and 0 .. 0.45 s + 1 s: no stated bound is trusted.
    # Outside 0.50 + 1 s among the rows kept: the 4th and 5th kernels, their launches (1.705, 1.925 s), the NVTX end.
    # main: the stale kernel kept by the one-hour rule (W 60.07 s, 59.87 s idle), ok, no warning.
    (500, stale_kernel, "CUPTI_ACTIVITY_KIND_KERNEL", "1.580000",
     "2 rows of CUPTI_ACTIVITY_KIND_KERNEL, 2 of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS"),
    # ANALYSIS_DETAILS 0.05 .. 0.40 s (+1 s: 1.40 s) and a stale NVTX range at 61 s: the 5 kernels' median start,
    # 1.45 s, lies outside. Outside 1.40 s: kernels 3-5 (ends 1.49, 1.75, 1.97 s), launches 1.445, 1.705, 1.925 s
    # and the NVTX range's end. main: the range kept, ok.
    (400, stale_nvtx, "NVTX_EVENTS", "1.450000",
     "3 rows of CUPTI_ACTIVITY_KIND_KERNEL, 3 of CUPTI_ACTIVITY_KIND_RUNTIME, 1 of NVTX_EVENTS"),
])
def test_an_isolated_row_is_dropped_when_no_stated_bound_is_trusted(tmp_path, stop_ms, fill, table, median, outside):
    """The body from the median outwards: down 1.45 .. 0.05 s (steps up to 0.26 s), up to the NVTX end 1.98 s; the
    next timestamp, 61 s, is 59.02 s on, over max(1 s, 1.93 s): dropped and counted, the GPU partial, the 5 kernels'
    figures (W 1,040 ms, 840 ms idle). The zero is the rows' start, 0.05 s, and says why."""
    rep, res = kept_and_analysed(older_export(tmp_path / "unfit.sqlite", 50, stop_ms, fill), (5, 5, 0, 1, 1))
    row = res.row
    assert row["status"] == "partial"
    stated = f"0.050000..{stop_ms / 1000:.6f}"
    assert without_model_warning(row["warnings"]) == "; ".join([
        unfit(stated, median, "0.050000..1.980000", outside),
        f"dropped 1 row of {table} timed far outside the capture ({per_rows_unfit('0.050000..1.980000', stated)}; "
        "e.g. start 61.000000 s, end 61.000001 s)"])
    assert [w.code for w in rep.warnings][0] == WarningCode.CAPTURE_DISAGREES
    assert (rep.capture_start_ns, rep.capture_start_source) == (
        50 * MS, "the export's own rows' start (ANALYSIS_DETAILS.startTime states 0.050000 s, which the rows do not fit)")


#: 5 kernels of 50 ms at 2.0, 2.3, 2.6, 2.9, 3.2 s (offsets from the run's base, ms): W = 1.25 s, 0.25 s busy,
#: 1.0 s idle in 4 gaps of 250 ms; an NVTX range 1.5 .. 3.4 s; one stale kernel 70 s after the last, at 73.2 s.
BODY_KERNELS_MS = (2000, 2300, 2600, 2900, 3200)


def body_export(path, base_ms: int, metadata) -> str:
    """:data:`BODY_KERNELS_MS` and the NVTX range, ``base_ms`` later, plus the stale kernel; ``metadata(w)``."""
    w = ExportWriter(str(path))
    for start in BODY_KERNELS_MS:
        w.kernel(pid=10, device=0, stream=7, start=(base_ms + start) * MS, end=(base_ms + start + 50) * MS, name="gemm")
    w.kernel(pid=10, device=0, stream=7, start=(base_ms + 73_200) * MS, end=(base_ms + 73_250) * MS, name="gemm")
    w.nvtx(pid=10, tid=11, start=(base_ms + 1500) * MS, end=(base_ms + 3400) * MS, text="main")
    metadata(w)
    return w.close()


def body_analysed(path):
    rep = load_report(path)
    assert (len(rep.kernels), len(rep.nvtx)) == (5, 1)
    (res,) = analyse(path).values()
    row = res.row
    assert (row["status"], row["kernel_count"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == (
        "partial", 5, 1250 * MS, 250 * MS, 1000 * MS)
    return rep, row


def details(start_ms: int, stop_ms: int):
    def write(w):
        w.rows["ANALYSIS_DETAILS"] = [(0x1000000000000, (stop_ms - start_ms) * MS, start_ms * MS, stop_ms * MS)]
    return write


def test_only_a_session_start_the_end_is_the_rows_body(tmp_path):
    """Only TARGET_INFO_SESSION_START_TIME, at 1.4 s (no end stated; median start 2.75 s fits it): the end is the
    body's, 1.5 .. 3.4 s from 2.75 s (steps up to 0.5 s); the kernel at 73.2 s is 69.8 s on: dropped, partial.
    main: kept by the one-hour rule, W 71.25 s, ok."""
    rep, row = body_analysed(body_export(tmp_path / "session.sqlite", 0, lambda w: w.session(1400 * MS)))
    assert without_model_warning(row["warnings"]) == (
        "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL timed far outside the capture (1.400000..3.400000 s on the "
        "report's clock, per TARGET_INFO_SESSION_START_TIME and the rows' own run, up to a pause longer than "
        "the work on both sides of it, for the end; e.g. start 73.200000 s, end "
        "73.250000 s)")
    assert (rep.capture_start_ns, rep.capture_start_source) == (1400 * MS, "TARGET_INFO_SESSION_START_TIME.systemClockNs")


@pytest.mark.parametrize("base_ms, start_ms, stop_ms, outside", [
    # rows counted from the capture's start (1.5 .. 3.4 s) but ANALYSIS_DETAILS on the system clock, 5000 .. 5000.5 s,
    # and 0 .. 0.5 s from its start: the median 2.75 s fits neither (+1 s). Every row kept lies outside it.
    (0, 5_000_000, 5_000_500, "5 rows of CUPTI_ACTIVITY_KIND_KERNEL, 1 of NVTX_EVENTS"),
    # rows on the system clock from 5001.5 s, ANALYSIS_DETAILS 5000.5 .. 5001.2 s (+1 s: 5002.2 s): the median
    # 5002.75 s lies outside; outside: kernels 2-5 (from 5002.3 s) and the NVTX end 5003.4 s.
    (5_000_000, 5_000_500, 5_001_200, "4 rows of CUPTI_ACTIVITY_KIND_KERNEL, 1 of NVTX_EVENTS"),
])
def test_rows_on_another_clock_than_the_stated_capture(tmp_path, base_ms, start_ms, stop_ms, outside):
    """The body (1.5 .. 3.4 s after the base) is the capture; the stale kernel is dropped; the zero is the
    body's start and names the stated start. main: kept (one-hour rule), ok, no warning, the zero "the report's
    earliest timestamp (the export states no capture start)"."""
    rep, row = body_analysed(body_export(tmp_path / "clock.sqlite", base_ms, details(start_ms, stop_ms)))
    stated = f"{start_ms / 1000:.6f}..{stop_ms / 1000:.6f}"
    rows = f"{(base_ms + 1500) / 1000:.6f}..{(base_ms + 3400) / 1000:.6f}"
    median = f"{(base_ms + 2750) / 1000:.6f}"
    assert without_model_warning(row["warnings"]) == "; ".join([
        unfit(stated, median, rows, outside),
        f"dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL timed far outside the capture ({per_rows_unfit(rows, stated)}; "
        f"e.g. start {(base_ms + 73_200) / 1000:.6f} s, end {(base_ms + 73_250) / 1000:.6f} s)"])
    assert (rep.capture_start_ns, rep.capture_start_source) == (
        (base_ms + 1500) * MS,
        f"the export's own rows' start (ANALYSIS_DETAILS.startTime states {start_ms / 1000:.6f} s, which the rows do "
        "not fit)")


def test_no_metadata_the_body_decides_and_keeps_a_pause_no_longer_than_it(tmp_path):
    """No metadata at all: the same rule. The body 1.5 .. 3.4 s (extent 1.9 s) keeps a kernel 1.8 s after it
    (5.2 s: a step of 1.8 s <= 1.9 s; extent then 3.75 s), and drops the one at 73.2 s (a step of 68 s), partial.
    W = 2.0 .. 5.25 s = 3.25 s, busy 0.3 s."""
    def later(w):
        w.kernel(pid=10, device=0, stream=7, start=5200 * MS, end=5250 * MS, name="gemm")
    path = body_export(tmp_path / "bare.sqlite", 0, later)
    rep = load_report(path)
    (res,) = analyse(path).values()
    row = res.row
    assert (row["status"], row["kernel_count"], row["window_ns"], row["busy_ns"]) == ("partial", 6, 3250 * MS,
                                                                                       300 * MS)
    assert without_model_warning(row["warnings"]) == (
        "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL timed far outside the capture (1.500000..5.250000 s on the "
        "report's clock, per the rows' own run, up to a pause longer than "
        "the work on both sides of it (the export states no capture); e.g. start 73.200000 s, end 73.250000 s)")
    assert rep.capture_start_source == "the report's earliest timestamp (the export states no capture start)"


#: Kernels (50 ms each) of exports with no metadata at all: two parts of real work and a pause.
EARLY_6 = (1000, 1190, 1380, 1570, 1760, 1950)     # 1.00 .. 2.00 s: extent 1.0 s
EARLY_4 = (1000, 1316, 1633, 1950)
LATE_4 = (3500, 3983, 4466, 4950)                 # 3.50 .. 5.00 s: extent 1.5 s, after a 1.5 s pause
LATE_6 = (3500, 3790, 4080, 4370, 4660, 4950)
SHORT_LATE = (4500, 4950)                         # 4.50 .. 5.00 s: extent 0.5 s, after a 2.5 s pause
STALE = (61_000, 200_000)                         # two stale kernels, 59 s and 198 s on


@pytest.mark.parametrize("starts, kept", [
    # a 1.5 s pause, no longer than the 1.5 s of work after it: kept whichever part holds the kernels' median
    # (6 early: the median 1.665 s is early, and the body so far is 1.0 s: the first rule dropped the late part)
    (EARLY_6 + LATE_4, 10),
    (EARLY_4 + LATE_6, 10),
    # a 2.5 s pause, longer than the 1.0 s before it and the 0.5 s after it: the 2 rows after it are dropped
    (EARLY_6 + SHORT_LATE, 6),
    # stale rows 59 s and 198 s on: the step to 61 s leads to 0.05 s of rows (up to the longer step to 200 s)
    (EARLY_6 + STALE, 6),
    # the pause kept, the stale rows after the late part dropped
    (EARLY_6 + LATE_4 + STALE, 10),
], ids=["dense-early", "dense-late", "short-late", "two-stale", "pause-and-stale"])
def test_a_pause_between_two_parts_of_work_is_kept_whatever_their_density(tmp_path, starts, kept):
    """No metadata at all: the rows' body decides, and a step ends it only when it is longer than 1 s, the
    body so far and the rows it leads to (up to the next longer step). Found by a tryout: with 6 kernels
    before a 1.5 s pause and 4 after it, the late part (real work) was dropped; with 4 and 6, kept."""
    w = ExportWriter(str(tmp_path / "bare.sqlite"))
    for start in starts:
        w.kernel(pid=10, device=0, stream=7, start=start * MS, end=(start + 50) * MS, name="gemm")
    rep = load_report(w.close())
    assert sorted(rep.kernels["start"].tolist()) == sorted(s * MS for s in starts)[:kept]
    dropped = [x for x in rep.warnings if x.code == WarningCode.DROPPED_KERNEL_ROWS]
    assert len(dropped) == (kept < len(starts))
    if dropped:
        n = len(starts) - kept
        assert f"dropped {n} row{'s' if n > 1 else ''} of CUPTI_ACTIVITY_KIND_KERNEL timed far outside" in dropped[0].text
