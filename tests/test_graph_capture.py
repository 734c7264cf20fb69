"""CUDA / HIP graph capture (issue 41, section 2; docs/definitions.md#graph-capture).

Launches between ``cudaStreamBeginCapture`` and ``EndCapture`` on a thread are recorded into a graph and
never run: no kernel by design, never a lost record. The capture phase is start-up: the capture C and a
``span`` window start at the first kernel after the last capture ends (``graph_capture_ns`` shown apart);
a GPU with no kernel after it is start-up only (tier ``toy``, ``partial``). A range meeting a capture
of its thread decides no job kind. A replayed graph's kernels (one launch's correlationId) stay busy.

Small traces written here (Kineto JSON, an Nsight export), every value worked out by hand.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from pipeline.analysis import graphcapture
from pipeline.analysis.analyse import AFTER_CAPTURE_NOTE, analyse_gpu
from pipeline.analysis.confidence import STARTUP_ONLY_REASON, KindFigures, tier
from pipeline.config import Config
from pipeline.load.kineto import load_kineto
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth.kineto import KinetoWriter
from pipeline.synth.writer import ExportWriter
from pipeline.work.tasks import trace_labels

MS = 1_000_000
PID, TID = 100, 101


def span_config() -> Config:
    cfg = Config()
    return dataclasses.replace(cfg, analysis=dataclasses.replace(cfg.analysis, window="span"))


def analyse(report, cfg: Config | None = None):
    (key,) = report.gpu_keys()
    return analyse_gpu(gpu_trace(report, key), cfg or span_config(), trace_labels(report, {}))


def serving_then_capture(path: str, other_thread_decode: bool = False) -> str:
    """Device 0, stream 7, process 100, the capture on thread 101 (ns):

    * warm-up K1 [1, 2) ms, cudaLaunchKernel corr 1 at 0.9 ms; ``warmup_32`` range [0.5, 2.1) ms;
    * ``capture_32_DECODE`` [2.5, 9.5) ms around cudaStreamBeginCapture [3, 3.01) ms (corr 2), three
      cudaLaunchKernel at 4, 5, 6 ms (corr 3, 4, 5: captured, no kernel), cudaStreamEndCapture [8, 8.01) ms
      (corr 6), then cudaGraphInstantiate at 8.1 ms (corr 7);
    * cudaGraphLaunch at 10 ms (corr 8): its replay runs G1 [11, 12) ms and G2 [12, 13) ms, both corr 8;
    * cudaLaunchKernel at 14 ms (corr 9) with no kernel: lost (records of corr 8 before, 10 after);
    * cudaLaunchKernel at 29 ms (corr 10): K10 [30, 31) ms.
    ``other_thread_decode``: a ``decode_step`` range [4, 5) ms on thread 102, which no capture meets."""
    w = KinetoWriter(path, pid=PID, devices=[(0, "NVIDIA H100 80GB HBM3", 132)])
    w.annotation(TID, 500_000, 2_100_000, "warmup_32")
    w.runtime(TID, 900_000, 910_000, "cudaLaunchKernel", 1)
    w.kernel(0, 7, 1 * MS, 2 * MS, "K1", 1)
    w.annotation(TID, 2_500_000, 9_500_000, "capture_32_DECODE")
    w.runtime(TID, 3 * MS, 3_010_000, "cudaStreamBeginCapture", 2)
    for corr, at in ((3, 4), (4, 5), (5, 6)):
        w.runtime(TID, at * MS, at * MS + 10_000, "cudaLaunchKernel", corr)
    w.runtime(TID, 8 * MS, 8_010_000, "cudaStreamEndCapture", 6)
    w.runtime(TID, 8_100_000, 8_200_000, "cudaGraphInstantiate", 7)
    w.runtime(TID, 10 * MS, 10_010_000, "cudaGraphLaunch", 8)
    w.kernel(0, 7, 11 * MS, 12 * MS, "G1", 8)
    w.kernel(0, 7, 12 * MS, 13 * MS, "G2", 8)
    w.runtime(TID, 14 * MS, 14_010_000, "cudaLaunchKernel", 9)
    w.runtime(TID, 29 * MS, 29_010_000, "cudaLaunchKernel", 10)
    w.kernel(0, 7, 30 * MS, 31 * MS, "K10", 10)
    if other_thread_decode:
        w.annotation(102, 4 * MS, 5 * MS, "decode_step")
    return w.close()


def test_captured_launches_are_not_lost_outside_ones_are(tmp_path):
    report = load_kineto(serving_then_capture(str(tmp_path / "cap.pt.trace.json")))
    # corr 3, 4, 5 lie inside [3, 8.01) ms on their thread: recorded, not lost; corr 9 is lost, and may have run
    # from its call (14 ms) to the next record's start (K10 at 30 ms)
    assert report.untraced[["name", "correlation_id", "call_start", "start", "end"]].values.tolist() == [
        ["cudaLaunchKernel", 9, 14 * MS, 14 * MS, 30 * MS]]
    # the graph's replay: both kernels carry the launch's correlationId
    assert sorted(report.kernels.loc[report.kernels["correlation_id"] == 8, "name"].astype(str)) == ["G1", "G2"]


def test_capture_phase_is_start_up_left_out_of_the_span_window(tmp_path):
    report = load_kineto(serving_then_capture(str(tmp_path / "cap.pt.trace.json")))
    row = analyse(report).row
    # start-up: from the first kernel (1 ms) to the capture's end (8.01 ms) = 7.01 ms; C and W start at the first
    # kernel after it (G1, 11 ms) and end at K10's end (31 ms): 20 ms; busy G1 + G2 + K10 = 3 ms (the replay's
    # two kernels busy), idle 17 ms, all of it in C inside W
    assert (row["graph_capture_ns"], row["startup_only"], row["window_start_ns"], row["window_ns"]) == (
        7_010_000, False, 11 * MS, 20 * MS)
    assert (row["busy_ns"], row["idle_ns"], row["kernel_count"]) == (3 * MS, 17 * MS, 3)
    assert (row["capture_ns"], row["capture_idle_ns"], row["window_left_out_idle_pct"]) == (20 * MS, 17 * MS, 0.0)
    # the profiler span starts with the first event (the warmup_32 range at 0.5 ms): 0.5 ms before K1
    assert row["startup_wait_ns"] == 500_000
    assert row["window_note"] == AFTER_CAPTURE_NOTE
    # the one hole [13, 30) ms holds the lost launch's span [14, 30) ms: untraced
    assert row["cat_untraced_ns"] == 17 * MS and row["status"] == "partial"
    assert row["warning_codes"] == "untraced-launches,graph-capture"
    assert "1 CUDA launch has no kernel record" in row["warnings"]
    assert ("graph capture: 3 launches inside 1 stream-capture range (cudaStreamBeginCapture … EndCapture) recorded "
            "into graphs, not run (no kernel by design, not lost); start-up from the first kernel to the last "
            "capture's end 7.010 ms (graph_capture_ns, shown apart), the window leaves it out") in row["warnings"]


def test_auto_window_of_a_serving_job_starts_after_the_capture_too(tmp_path):
    """A range on thread 102 meeting no capture says ``decode``: serving, W = C under auto, after the start-up."""
    report = load_kineto(serving_then_capture(str(tmp_path / "cap.pt.trace.json"), other_thread_decode=True))
    row = analyse(report, Config()).row
    assert (row["job_kind"], row["job_kind_source"]) == ("serving", "NVTX range 'decode_step' (window.serving_ranges)")
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("span", 11 * MS, 31 * MS)


def test_words_inside_a_capture_range_decide_no_kind(tmp_path):
    """``capture_32_DECODE`` meets the capture on its thread: not serving evidence; ``warmup_32`` says nothing."""
    report = load_kineto(serving_then_capture(str(tmp_path / "cap.pt.trace.json")))
    row = analyse(report, Config()).row
    assert (row["job_kind"], row["job_kind_source"]) == ("unknown", "")


def capture_only_hip(path: str, replay: bool = False) -> str:
    """A ROCm trace of start-up only (process 200, capture thread 201, device 0, ns):

    * warm-up K1 [1, 2) ms (hipLaunchKernel corr 1 at 0.9 ms);
    * hipStreamBeginCapture [3, 3.01) ms, hipLaunchKernel corr 3 at 4 ms and hipExtModuleLaunchKernel corr 4 at
      5 ms (captured), hipStreamEndCapture [6, 6.01) ms;
    * warm-up K6 [7, 8) ms (corr 6); hipStreamBeginCapture [9, 9.01) ms, hipLaunchKernel corr 8 at 10 ms
      (captured), hipStreamEndCapture [11, 11.01) ms;
    * thread 202 launches K10 [10.6, 10.8) ms on stream 9 (corr 10) during the second capture.
    Without the capture rule corr 3, 4 (between 1 and 6) and 8 (between 6 and 10) would be lost.
    ``replay``: then hipGraphLaunch at 12 ms (corr 11) replays a graph: R1 [13, 14) ms and R2 [14, 15) ms, corr 11."""
    w = KinetoWriter(path, pid=200, devices=[(0, "AMD Instinct MI250X", 110)])
    w.runtime(201, 900_000, 910_000, "hipLaunchKernel", 1)
    w.kernel(0, 7, 1 * MS, 2 * MS, "K1", 1)
    w.runtime(201, 3 * MS, 3_010_000, "hipStreamBeginCapture", 2)
    w.runtime(201, 4 * MS, 4_010_000, "hipLaunchKernel", 3)
    w.runtime(201, 5 * MS, 5_010_000, "hipExtModuleLaunchKernel", 4)
    w.runtime(201, 6 * MS, 6_010_000, "hipStreamEndCapture", 5)
    w.runtime(201, 6_500_000, 6_510_000, "hipLaunchKernel", 6)
    w.kernel(0, 7, 7 * MS, 8 * MS, "K6", 6)
    w.runtime(201, 9 * MS, 9_010_000, "hipStreamBeginCapture", 7)
    w.runtime(201, 10 * MS, 10_010_000, "hipLaunchKernel", 8)
    w.runtime(202, 10_500_000, 10_510_000, "hipLaunchKernel", 10)
    w.kernel(0, 9, 10_600_000, 10_800_000, "K10", 10)
    w.runtime(201, 11 * MS, 11_010_000, "hipStreamEndCapture", 9)
    if replay:
        w.runtime(201, 12 * MS, 12_010_000, "hipGraphLaunch", 11)
        w.kernel(0, 7, 13 * MS, 14 * MS, "R1", 11)
        w.kernel(0, 7, 14 * MS, 15 * MS, "R2", 11)
    return w.close()


def test_a_window_of_capture_and_warm_up_only_is_not_a_steady_state(tmp_path):
    report = load_kineto(capture_only_hip(str(tmp_path / "rocm.json")))
    assert report.untraced.empty
    row = analyse(report).row
    # no kernel starts at or after the start-up's end (the last capture's end 11.01 ms, clipped to the last kernel
    # end 10.8 ms): W stays the whole span [1, 10.8) ms, start-up only; busy 1 + 1 + 0.2 = 2.2 ms
    assert (row["graph_capture_ns"], row["startup_only"], row["window_start_ns"], row["window_ns"]) == (
        9_800_000, True, 1 * MS, 9_800_000)
    assert (row["busy_ns"], row["idle_ns"], row["cat_untraced_ns"]) == (2_200_000, 7_600_000, 0)
    assert (row["status"], row["warning_codes"]) == ("partial", "graph-capture,startup-only")
    assert row["confidence_tier"] == "toy" and STARTUP_ONLY_REASON in row["confidence_note"]
    assert ("graph capture: 3 launches inside 2 stream-capture ranges (hipStreamBeginCapture … EndCapture) recorded "
            "into graphs, not run (no kernel by design, not lost); start-up from the first kernel to the last "
            "capture's end 9.800 ms (graph_capture_ns, shown apart), 9.800 ms of it inside the window") in row["warnings"]
    assert "no kernel runs after the last graph capture ends (0.010800 s on the report's clock)" in row["warnings"]


def test_hip_graph_replay_after_the_capture_is_the_steady_state(tmp_path):
    """The ROCm trace with a hipGraphLaunch replay after its captures: the start-up is [1, 11.01) ms, W = C =
    [13, 15) ms (the replay's two kernels, both busy: no idle), nothing lost; the row is ok (graph-capture is
    a caveat) and not start-up only (toy only for its short window and few kernels)."""
    report = load_kineto(capture_only_hip(str(tmp_path / "rocm.json"), replay=True))
    assert report.untraced.empty
    row = analyse(report).row
    assert (row["graph_capture_ns"], row["startup_only"], row["window_start_ns"], row["window_ns"]) == (
        10_010_000, False, 13 * MS, 2 * MS)
    assert (row["busy_ns"], row["idle_ns"], row["capture_ns"], row["capture_idle_ns"]) == (2 * MS, 0, 2 * MS, 0)
    assert (row["status"], row["warning_codes"], row["confidence_tier"]) == ("ok", "graph-capture", "toy")
    assert STARTUP_ONLY_REASON not in row["confidence_note"]


def test_start_up_only_is_toy_whatever_the_window_holds():
    """A long window of many stable iterations would be high; start-up only, it is toy with the reason."""
    assert tier(10 * 1_000_000_000, 10_000, 20, 1.0, figures=KindFigures(startup_only=False)) == ("high", [])
    assert tier(10 * 1_000_000_000, 10_000, 20, 1.0, figures=KindFigures(startup_only=True)) == (
        "toy", [STARTUP_ONLY_REASON])
    assert KindFigures.of_row({"startup_only": True}).startup_only is True
    assert KindFigures.of_row({"startup_only": float("nan")}).startup_only is None


def test_capture_ranges_per_thread_nested_and_open():
    """Thread (1, 10): begin 0, begin 5 (nested), end 7, end 9 -> [0, 9]'s end call ends at 10; begin 20 never
    ended -> [20, open). Thread (1, 11): an end at [3, 4) with no begin -> (open, 4). Names with the export's
    suffixes are normalised by the loaders; here they come normalised."""
    rt = pd.DataFrame({"start": [0, 5, 7, 9, 20, 3, 2], "end": [1, 6, 8, 10, 21, 4, 3], "pid": [1] * 7,
                       "tid": [10, 10, 10, 10, 10, 11, 11],
                       "name": ["cudaStreamBeginCapture", "cuStreamBeginCapture", "cudaStreamEndCapture",
                                "cuStreamEndCapture", "cudaStreamBeginCaptureToGraph", "cudaStreamEndCapture",
                                "cudaLaunchKernel"]})
    found = graphcapture.ranges(rt)
    o0, o1 = graphcapture.OPEN_START, graphcapture.OPEN_END
    assert list(zip(*(found[c].tolist() for c in ("pid", "tid", "start", "end")))) == [
        (1, 10, 0, 10), (1, 10, 20, o1), (1, 11, o0, 4)]
    # a launch at 2 on thread 11 (inside its open range) is captured; the begin/end calls too, by their start
    assert graphcapture.captured(rt, found).tolist() == [True, True, True, True, True, True, True]
    assert graphcapture.captured_launches(rt, found).tolist() == [False] * 6 + [True]
    # NVTX: on thread 10 [10, 20) meets none (a range ends at 10, the next starts at 20); [15, 25) meets the open one
    nvtx = pd.DataFrame({"start": [10, 15, 5], "end": [20, 25, 6], "pid": [1, 1, 2], "tid": [10, 10, 10]})
    assert graphcapture.outside_capture(nvtx, found).tolist() == [False, False, True]


def test_nsight_export_captured_launches_are_not_lost(tmp_path):
    """The same rule for an Nsight export: CUPTI_ACTIVITY_KIND_RUNTIME calls with the export's suffixes on the
    capture's thread. K1 [1, 2) ms corr 1; cudaStreamBeginCapture_v10000 [3, 3.01) ms; cudaLaunchKernel_v7000 corr
    3 at 4 ms (captured); cudaStreamEndCapture_v10000 [5, 5.01) ms; cudaLaunchKernel_v7000 corr 5 at 6 ms on
    another thread (12), no kernel: lost; cudaGraphLaunch_v10000 corr 6 at 7 ms -> G1 [8, 9) ms, G2 [9, 10) ms."""
    w = ExportWriter(str(tmp_path / "cap.sqlite"))
    w.runtime(10, 11, 900_000, 910_000, "cudaLaunchKernel_v7000", 1)
    w.kernel(10, 0, 7, 1 * MS, 2 * MS, "K1", 1)
    w.runtime(10, 11, 3 * MS, 3_010_000, "cudaStreamBeginCapture_v10000", 2)
    w.runtime(10, 11, 4 * MS, 4_010_000, "cudaLaunchKernel_v7000", 3)
    w.runtime(10, 11, 5 * MS, 5_010_000, "cudaStreamEndCapture_v10000", 4)
    w.runtime(10, 12, 6 * MS, 6_010_000, "cudaLaunchKernel_v7000", 5)
    w.runtime(10, 11, 7 * MS, 7_010_000, "cudaGraphLaunch_v10000", 6)
    w.kernel(10, 0, 7, 8 * MS, 9 * MS, "G1", 6)
    w.kernel(10, 0, 7, 9 * MS, 10 * MS, "G2", 6)
    w.gpu(0, "NVIDIA H100 80GB HBM3")
    w.cuda_device(0, 0, 10)
    report = load_report(w.close())
    assert report.untraced[["name", "correlation_id", "start", "end"]].values.tolist() == [
        ["cudaLaunchKernel", 5, 6 * MS, 8 * MS]]
    row = analyse(report).row
    # start-up [1, 5.01) ms; W = [8, 10) ms after it: the replay's two kernels, no idle
    assert (row["graph_capture_ns"], row["window_start_ns"], row["window_ns"], row["idle_ns"]) == (
        4_010_000, 8 * MS, 2 * MS, 0)
    assert np.array_equal(report.kernels.sort_values("start")["correlation_id"].to_numpy(), [1, 6, 6])


def test_record_and_page_name_the_capture_phase(tmp_path):
    """The start-up-only ROCm trace through the report task (default config): the per-GPU JSON's row, the GPU
    page's kind line and the record's capture line name the graph-capture start-up. Start-up wait: the profiler
    span starts with the first event (hipLaunchKernel at 0.9 ms), 0.1 ms before K1, and no call allocates memory
    before it: the capture began mid-run, its start-up not measured (issue 45 g); capture idle 7.6 of 9.8 ms
    = 77.55 %, the window the same (W = C)."""
    import json
    import re

    from pipeline.config import load_config
    from pipeline.report import gpu_page
    from pipeline.report.medical import capture_line, job_capture
    from pipeline.runs.driver import Todo, report_sinks
    from pipeline.work.tasks import report_task

    path = capture_only_hip(str(tmp_path / "rocm.json"))
    cfg = load_config([])
    outcome = report_task(path, cfg.labels_for(path), cfg, report_sinks(Todo(path, {}), cfg, str(tmp_path / "gpus")))
    assert outcome.failure is None
    (doc_path,) = (tmp_path / "gpus").glob("*.json")
    text = doc_path.read_text()
    row = json.loads(text)["_summary"]
    assert (row["graph_capture_ns"], row["startup_only"], row["job_kind"]) == (9_800_000, True, "unknown")
    assert (row["startup_wait_ns"], row["startup_cut"]) == (100_000, True)
    page = gpu_page.page_from_json(text, {"report": "report.html", "record": ""})
    assert re.search(r'<span id="graph-capture">(.*?)</span>', page).group(1) == (
        "graph-capture start-up (first kernel to the last capture's end) 9.800 ms: nothing ran after it, the "
        "window is start-up only, not a steady state")
    assert capture_line(job_capture([row], {})) == (
        "Job kind: unknown. The capture (first kernel to last) was idle 77.55 % of 9.800 ms, the window 77.55 %: the "
        "window leaves out 0.00 % of the capture's idle. Start-up not measured: its capture began mid-run (no memory "
        "allocated before the first kernel), so the time before the first kernel is not the job's start-up. "
        "Graph-capture start-up (first kernel to the last capture's end): 9.800 ms; apart, the capture starts "
        "after it. 1 GPU ran nothing after its last graph capture: the window is that start-up, not a steady state "
        "(tier toy, partial).")


def test_iterations_over_the_capture_phase_are_left_out(tmp_path):
    """ProfilerStep#0..#7 on thread 101, step i = [10 + 10 i, 20 + 10 i) ms, each launching one kernel [+1, +5) ms
    (corr 100 + i, its call at +0.5 ms); step 2 also captures a graph: cudaStreamBeginCapture at 36 ms, a captured
    cudaLaunchKernel at 37 ms (corr 50), cudaStreamEndCapture [38, 38.01) ms. The start-up [11, 38.01) ms overlaps
    the GPU extents of steps 0-2: 0 is warm-up, 1 and 2 are graph capture; W starts at step 3's kernel (41 ms)."""
    w = KinetoWriter(str(tmp_path / "steps.pt.trace.json"), pid=PID, devices=[(0, "NVIDIA H100 80GB HBM3", 132)])
    for i in range(8):
        t = (10 + 10 * i) * MS
        w.annotation(TID, t, t + 10 * MS, f"ProfilerStep#{i}")
        w.runtime(TID, t + 500_000, t + 510_000, "cudaLaunchKernel", 100 + i)
        w.kernel(0, 7, t + 1 * MS, t + 5 * MS, "gemm", 100 + i)
    w.runtime(TID, 36 * MS, 36_010_000, "cudaStreamBeginCapture", 40)
    w.runtime(TID, 37 * MS, 37_010_000, "cudaLaunchKernel", 50)
    w.runtime(TID, 38 * MS, 38_010_000, "cudaStreamEndCapture", 41)
    report = load_kineto(w.close())
    assert report.untraced.empty
    row = analyse(report, Config()).row
    assert row["window_rule"] == "nvtx" and row["window_start_ns"] == 41 * MS
    assert row["excluded_iterations"].startswith("0: warm-up; 1: graph capture (start-up); 2: graph capture (start-up)")
    assert row["graph_capture_ns"] == 38_010_000 - 11 * MS and row["startup_only"] is False
    assert "graph capture: 1 launch inside 1 stream-capture range" in row["warnings"]
    assert row["warnings"].endswith("the window leaves it out")
