"""Windows that keep the cost (issue 26 point 4; docs/definitions.md#job-kind).

Three PyTorch profiler traces built here with every expected value worked out by hand:

* a serving trace (SGLang-like: ``sglang::prefill`` / ``sglang::decode`` NVTX ranges, process
  ``sglang::scheduler``): a 200 ms start-up wait, then 10 batches of 20 ms of kernels with 30 ms waits
  between them. ``--window auto`` keeps the whole capture;
* a training trace (``ProfilerStep#N`` with ``## backward ##`` ranges): auto still trims warm-up;
* a trace of unknown kind whose kept iterations leave out most of the capture's idle: ``partial``.
"""
from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import KINETO, run_cli
from pipeline.analysis.analyse import analyse_gpu, plan_gpu
from pipeline.analysis.kind import detect_kind
from pipeline.config import AnalysisConfig, Config, ConfigError, load_config
from pipeline.load.kineto import load_kineto
from pipeline.load.report import gpu_trace
from pipeline.model import WarningCode
from pipeline.synth.kineto import KinetoWriter

MS = 1_000_000
#: The traces' clock: ``baseTimeNanoseconds``, so every ts is relative to it (exact in µs text).
T0 = 1_764_000_000_000_000_000
PID, TID, DEVICE, STREAM = 4242, 4243, 0, 7


class _Trace:
    """A KinetoWriter with one helper: a range on the main thread launching kernels back to back."""

    def __init__(self, path: str, process_name: str = "python3"):
        self.w = KinetoWriter(path, PID, devices=[(DEVICE, "NVIDIA H100 80GB HBM3", 132)], rank=0, world_size=1,
                              base_time_ns=T0, process_name=process_name)
        self.correlation = 0

    def step(self, text: str, range_start: int, range_end: int, kernels):
        """An NVTX range [range_start, range_end) (ns after T0) and, launched from inside it, ``kernels``:
        ``(name, start, end)`` ns after T0, each launch 10 µs long at the range start + 10 µs × its position."""
        self.w.annotation(TID, T0 + range_start, T0 + range_end, text)
        for i, (name, start, end) in enumerate(kernels):
            self.correlation += 1
            call = T0 + range_start + 10_000 * (i + 1)
            self.w.runtime(TID, call, call + 5_000, "cudaLaunchKernel", self.correlation)
            self.w.kernel(DEVICE, STREAM, T0 + start, T0 + end, name, self.correlation)

    def close(self) -> str:
        return self.w.close()


def serving_trace(path: str) -> str:
    """Capture start T0 (a 1 ms ``sglang::scheduler_init`` range at 0: the profiler's span starts there).
    Batch b (0..9) runs 4 kernels of 5 ms back to back from 200 ms + 50 ms × b: 20 ms busy, then 30 ms
    idle. Batch 0 is a prefill, the others decode steps."""
    t = _Trace(path, process_name="sglang::scheduler_TP0")
    t.step("sglang::scheduler_init", 0, 1 * MS, [])
    for b in range(10):
        s = 200 * MS + 50 * MS * b
        names = ("void flashinfer::BatchPrefillKernel", "void gemm_kernel", "void rms_norm_kernel",
                 "void sampling_kernel")
        t.step("sglang::prefill" if b == 0 else "sglang::decode", s - 1 * MS, s + 20 * MS,
               [(n, s + 5 * MS * i, s + 5 * MS * (i + 1)) for i, n in enumerate(names)])
    return t.close()


#: Hand-worked values of the serving trace, ns.
SERVING = {
    "window_start_ns": T0 + 200 * MS,        # first kernel start
    "window_end_ns": T0 + 670 * MS,          # last kernel end: 200 + 9 × 50 + 20 ms
    "window_ns": 470 * MS,
    "busy_ns": 200 * MS,                     # 10 batches × 20 ms
    "idle_ns": 270 * MS,                     # 9 waits × 30 ms
    "idle_pct": 57.4468,                     # 100 × 270 / 470
    "capture_idle_ns": 270 * MS,             # the capture is the window
    "capture_idle_pct": 57.4468,
    "window_left_out_idle_pct": 0.0,
    "startup_wait_ns": 200 * MS,             # capture start T0 to the first kernel at 200 ms
}


def training_trace(path: str) -> str:
    """Six ``ProfilerStep#N`` (N = 0..5) ranges, each with a ``## backward ##`` range inside. Step 0 (warm-up)
    runs its forward kernel at 1..11 ms, waits 60 ms (autotuning), its backward kernel at 71..81 ms. Step N
    >= 1 starts at 85 + 25 × (N − 1) ms = r: forward r+1..r+11, backward r+11..r+21 (5 ms idle to the next
    step's forward)."""
    t = _Trace(path)
    t.step("ProfilerStep#0", 0, 85 * MS, [("void gemm_fwd_kernel", 1 * MS, 11 * MS),
                                          ("void gemm_bwd_input_kernel", 71 * MS, 81 * MS)])
    t.w.annotation(TID, T0 + 60 * MS, T0 + 80 * MS, "## backward ##")
    for n in range(1, 6):
        r = 85 * MS + 25 * MS * (n - 1)
        t.step(f"ProfilerStep#{n}", r, r + 25 * MS, [("void gemm_fwd_kernel", r + 1 * MS, r + 11 * MS),
                                                       ("void gemm_bwd_input_kernel", r + 11 * MS, r + 21 * MS)])
        t.w.annotation(TID, T0 + r + 100_000, T0 + r + 200_000, "## backward ##")
    return t.close()


#: Hand-worked values of the training trace, ns. Kept: steps 1-5 (step 0 is warm-up). W runs from step 1's
#: first kernel (86 ms) to step 5's last (r = 185 ms: 206 ms). The capture C runs from step 0's first kernel
#: (1 ms) to 206 ms: 205 ms, 6 × 20 ms busy, idle 60 (step 0's wait) + 5 (81 -> 86 ms) + 4 × 5 = 85 ms.
TRAINING = {
    "window_rule": "nvtx", "kept_iterations": "1-5", "job_kind": "training",
    "job_kind_source": "NVTX range '## backward ##' (window.training_ranges)",
    "window_start_ns": T0 + 86 * MS, "window_end_ns": T0 + 206 * MS, "window_ns": 120 * MS,
    "idle_ns": 20 * MS,                      # 4 waits × 5 ms between steps 1..5
    "capture_idle_ns": 85 * MS,
    "capture_idle_pct": 41.4634,             # 100 × 85 / 205
    "window_left_out_idle_pct": 76.4706,     # 100 × (85 − 20) / 85
    "startup_wait_ns": 1 * MS,               # the span starts with step 0's range at 0; its first kernel at 1 ms
    "status": "ok",                          # training: trimming is the point, never partial for it
}


def unknown_trace(path: str) -> str:
    """Five ``Iteration N`` ranges, neutral kernel names. Iteration 0 (warm-up): a kernel at 1..11 ms, a 100 ms
    wait, a kernel at 111..121 ms. Iteration i >= 1 starts at 121 + 12 × (i − 1) ms = r: one kernel r+1..r+11."""
    t = _Trace(path)
    t.step("Iteration 0", 0, 121 * MS, [("void gemm_kernel", 1 * MS, 11 * MS),
                                        ("void elementwise_kernel", 111 * MS, 121 * MS)])
    for i in range(1, 5):
        r = 121 * MS + 12 * MS * (i - 1)
        t.step(f"Iteration {i}", r, r + 12 * MS, [("void gemm_kernel", r + 1 * MS, r + 11 * MS)])
    return t.close()


#: Hand-worked values of the unknown-kind trace, ns. Kept: iterations 1-4 (0 is warm-up); W from iteration 1's
#: kernel (122 ms) to iteration 4's end (r = 157 ms: 168 ms): 46 ms, 4 × 10 ms busy, 3 waits × 2 ms idle. C from
#: 1 ms to 168 ms: 167 ms, 6 × 10 ms busy, idle 100 (iteration 0) + 1 (121 -> 122 ms) + 3 × 2 = 107 ms.
UNKNOWN = {
    "window_rule": "nvtx", "kept_iterations": "1-4", "job_kind": "unknown", "job_kind_source": "",
    "window_start_ns": T0 + 122 * MS, "window_end_ns": T0 + 168 * MS, "window_ns": 46 * MS, "idle_ns": 6 * MS,
    "capture_idle_ns": 107 * MS,
    "capture_idle_pct": 64.0719,             # 100 × 107 / 167
    "window_left_out_idle_pct": 94.3925,     # 100 × (107 − 6) / 107
    "startup_wait_ns": 1 * MS,
    "status": "partial",
}


def _row(path: str, cfg: Config = Config(), labels: dict | None = None) -> dict:
    """The fleet row of the one GPU of the trace at ``path``, analysed alone (no job of several GPUs)."""
    report = load_kineto(path)
    (key,) = report.gpu_keys()
    return analyse_gpu(gpu_trace(report, key), cfg, labels or {"cluster": "c", "job": "j"}).row


def _subset(row, expected: dict) -> dict:
    return {k: (row[k].item() if hasattr(row[k], "item") else row[k]) for k in expected}


def _fleet(out: Path) -> pd.DataFrame:
    return pd.read_parquet(out / "fleet.parquet").sort_values(["report", "gpu_key"]).reset_index(drop=True)


def test_serving_trace_auto_window_is_the_whole_capture(tmp_path):
    """The Done-when test: ``gpu-idle run`` (a real process, ``--window auto``) on the serving-shaped trace keeps
    the whole capture: every batch wait is in the idle and its dollars, the start-up wait is shown on its own.
    (main: the periodic rule kept 8 batches, W = 250..650 ms, 240 ms idle, and the start-up wait was nowhere.)"""
    trace = serving_trace(str(tmp_path / "sglang-server.pt.trace.json"))
    out = tmp_path / "out"
    run_cli("run", trace, "--out", str(out))
    (row,) = _fleet(out).to_dict("records")
    assert _subset(row, SERVING) == SERVING
    assert (row["window_rule"], row["untrimmed"], row["iterations"]) == ("span", True, 0)
    assert row["job_kind"] == "serving"
    assert row["job_kind_source"] == "NVTX range 'sglang::decode' (window.serving_ranges)"
    assert row["window_note"] == ("serving job (NVTX range 'sglang::decode' (window.serving_ranges)): "
                                  "the window is the whole capture")
    assert (row["status"], row["warnings"]) == ("ok", "")
    # 270 / 470 of an H100 ($4.00/h) for 730 h: 0.574468... × 2920 = $1,677.45 (not the trimmed window's)
    assert row["idle_usd_per_month"] == 1677.45
    csv = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert csv.loc[0, "startup_wait_ns"] == 200 * MS and csv.loc[0, "job_kind"] == "serving"
    assert bool(csv.loc[0, "startup_cut"])   # no call allocates before the first kernel: the capture began mid-run
    # the GPU page says it too: the kind and its evidence, the capture's idle (270 of 470 ms = 57.45 %, none left
    # out) and that the start-up was not measured (issue 45 g: never its 200 ms as a start-up)
    run_cli("report", str(out), "--out", str(out / "report.html"))
    (page,) = (out / "gpu-pages").glob("*.html")
    dd = re.search(r'<dd id="job-kind">(.*?)</dd>', page.read_text(encoding="utf-8"), re.S).group(1)
    assert html.unescape(re.sub(r"<[^>]+>", "", dd)) == (
        "serving (NVTX range 'sglang::decode'); the capture (first kernel to last) was idle "
        "270.000 ms of 470.000 ms (57.45 %), of which the window leaves out 0.00 %; start-up not measured: its "
        "capture began mid-run (no memory allocated before the first kernel), so the time before the first kernel is "
        "not the job's start-up")   # no configuration key (issue 45)


def test_training_trace_auto_still_trims_warmup(tmp_path):
    """A training job (its ``## backward ##`` ranges) keeps its stable iterations under auto; the row says how
    much of the capture's idle that left out, and is not partial for it."""
    row = _row(training_trace(str(tmp_path / "train.pt.trace.json")))
    assert _subset(row, TRAINING) == TRAINING
    assert row["excluded_iterations"] == "0: warm-up"


def test_unknown_kind_leaving_out_most_idle_is_partial(tmp_path):
    """No label and no evidence either way: a window that leaves out more than half of the capture's idle
    makes the row partial, with a coded warning that names the share."""
    report = load_kineto(unknown_trace(str(tmp_path / "job.pt.trace.json")))
    (key,) = report.gpu_keys()
    result = analyse_gpu(gpu_trace(report, key), Config(), {"cluster": "c", "job": "j"})
    assert _subset(result.row, UNKNOWN) == UNKNOWN
    assert result.row["warnings"] == ("the nvtx window leaves out 94.3925 % of the capture's idle (101.000 of "
                                      "107.000 ms) and the job's kind is unknown: if it serves requests, that idle "
                                      "is its cost (label it: labels kind: serving, or training)")
    assert WarningCode("window-leaves-out-idle") is WarningCode.WINDOW_LEAVES_OUT_IDLE


def test_threshold_is_config(tmp_path):
    """``window.max_left_out_idle_pct`` decides: at 95 % the same window (94.3925 % left out) is ok."""
    cfg = dataclasses.replace(Config(), window=dataclasses.replace(Config().window, max_left_out_idle_pct=95.0))
    row = _row(unknown_trace(str(tmp_path / "job.pt.trace.json")), cfg)
    assert (row["window_left_out_idle_pct"], row["status"], row["warnings"]) == (94.3925, "ok", "")


def test_kind_label_wins(tmp_path):
    """A ``kind`` label decides the kind: ``serving`` makes the unknown trace's window its whole capture
    (C = 1..168 ms, 107 ms idle), ``training`` keeps the iterations and is not partial."""
    path = unknown_trace(str(tmp_path / "job.pt.trace.json"))
    served = _row(path, labels={"cluster": "c", "job": "j", "kind": "serving"})
    assert _subset(served, {"window_rule": 0, "window_start_ns": 0, "window_end_ns": 0, "idle_ns": 0,
                            "capture_idle_ns": 0, "window_left_out_idle_pct": 0, "job_kind": 0,
                            "job_kind_source": 0, "status": 0}) == {
        "window_rule": "span", "window_start_ns": T0 + 1 * MS, "window_end_ns": T0 + 168 * MS, "idle_ns": 107 * MS,
        "capture_idle_ns": 107 * MS, "window_left_out_idle_pct": 0.0, "job_kind": "serving",
        "job_kind_source": "label", "status": "ok"}
    assert served["window_note"] == "serving job (label): the window is the whole capture"
    trained = _row(path, labels={"cluster": "c", "job": "j", "kind": "training"})
    assert (trained["window_rule"], trained["kept_iterations"], trained["job_kind"], trained["job_kind_source"],
            trained["status"]) == ("nvtx", "1-4", "training", "label", "ok")


def test_kind_label_in_config(tmp_path):
    """``labels: [{match, kind}]`` reaches the row through ``gpu-idle run --config``; a kind that is not one
    of training, serving, unknown is refused before any work."""
    path = unknown_trace(str(tmp_path / "job.pt.trace.json"))
    cfg = tmp_path / "labels.yaml"
    cfg.write_text("labels:\n  - {match: 'job*', job: api, kind: serving}\n")
    out = tmp_path / "out"
    run_cli("run", path, "--out", str(out), "--config", str(cfg))
    (row,) = _fleet(out).to_dict("records")
    assert (row["job"], row["job_kind"], row["job_kind_source"], row["window_rule"], row["idle_ns"]) == (
        "api", "serving", "label", "span", 107 * MS)
    bad = tmp_path / "bad.yaml"
    bad.write_text("labels:\n  - {match: 'job*', kind: inference}\n")
    with pytest.raises(ConfigError, match="labels.0.kind"):
        load_config([bad])


def test_explicit_window_and_trim_win_for_serving(tmp_path):
    """``--window periodic`` and ``--trim`` keep winning for a serving job (the user asked for that window);
    the row still says what it left out. Periodic: the batches' first kernel recurs every 4 launches, 9
    launch-to-launch iterations, warm-up (batch 0) dropped: W = 250..650 ms, 8 waits × 30 = 240 ms idle,
    30 of the capture's 270 ms left out (11.1111 %). ``--trim`` 0.3 .. 0.4 s after T0: W = [300, 400) ms holds
    batches 2 (300..320) and 3 (350..370): 40 ms busy, 60 ms idle; 270 − 60 = 210 ms of the capture's idle left
    out = 77.7778 %, not partial (the kind is serving, not unknown)."""
    trace = serving_trace(str(tmp_path / "srv.pt.trace.json"))
    base = Config()
    periodic = _row(trace, dataclasses.replace(base, analysis=dataclasses.replace(base.analysis, window="periodic")))
    assert _subset(periodic, {"window_rule": 0, "window_start_ns": 0, "window_end_ns": 0, "idle_ns": 0,
                              "capture_idle_ns": 0, "window_left_out_idle_pct": 0, "job_kind": 0, "status": 0}) == {
        "window_rule": "periodic", "window_start_ns": T0 + 250 * MS, "window_end_ns": T0 + 650 * MS,
        "idle_ns": 240 * MS, "capture_idle_ns": 270 * MS, "window_left_out_idle_pct": 11.1111,
        "job_kind": "serving", "status": "ok"}
    t0 = T0 // 1_000_000_000
    frac = T0 % 1_000_000_000
    trim = (f"{t0}.{frac + 300 * MS:09d}", f"{t0}.{frac + 400 * MS:09d}")
    trimmed = _row(trace, dataclasses.replace(base, analysis=AnalysisConfig(trim_s=trim)))
    assert _subset(trimmed, {"window_rule": 0, "window_ns": 0, "idle_ns": 0, "capture_idle_ns": 0,
                             "window_left_out_idle_pct": 0, "status": 0}) == {
        "window_rule": "trim", "window_ns": 100 * MS, "idle_ns": 60 * MS, "capture_idle_ns": 270 * MS,
        "window_left_out_idle_pct": 77.7778, "status": "ok"}
    # a trim past the capture (0 .. 0.7 s: the start-up wait before 200 ms and 30 ms after the last batch's end at
    # 670 ms are outside the kernels): W is cut to them, 200 .. 670 ms = the capture C, its 270 ms idle; nothing is
    # left out (never a negative share), the time outside is no idle (issue 45)
    wide = (f"{t0}.{frac:09d}", f"{t0}.{frac + 700 * MS:09d}")
    past = _row(trace, dataclasses.replace(base, analysis=AnalysisConfig(trim_s=wide)))
    assert (past["window_ns"], past["idle_ns"], past["capture_idle_ns"], past["window_left_out_idle_pct"]) == (
        470 * MS, 270 * MS, 270 * MS, 0.0)


def _batches(t: _Trace, text: str | None):
    """The serving trace's 10 batches on ``t``: NVTX ranges named ``text`` (None: the same launches inside an
    unnamed-looking ``batch N`` range, which is no evidence)."""
    names = ("void attention_kernel", "void gemm_kernel", "void rms_norm_kernel", "void sampling_kernel")
    for b in range(10):
        s = 200 * MS + 50 * MS * b
        t.step(text or f"batch {b}", s - 1 * MS, s + 20 * MS,
               [(n, s + 5 * MS * i, s + 5 * MS * (i + 1)) for i, n in enumerate(names)])


def test_serving_job_reports_agree(tmp_path):
    """A serving job spread over two reports (one per rank, one job by the labels): only rank 0's trace shows
    SGLang ranges, yet both ranks are serving and both windows are the whole capture (200..670 ms, 270 ms
    idle); rank 1 names where the evidence was found. (main: rank 1 kept 8 periodic batches.)"""
    root = tmp_path / "in"
    root.mkdir()
    t = _Trace(str(root / "srv_rank0.pt.trace.json"))
    t.step("sglang::scheduler_init", 0, 1 * MS, [])
    _batches(t, "sglang::decode")
    t.close()
    t = _Trace(str(root / "srv_rank1.pt.trace.json"))
    t.step("init", 0, 1 * MS, [])
    _batches(t, None)
    t.close()
    cfg = tmp_path / "labels.yaml"
    cfg.write_text("labels:\n  - {match: 'srv_rank*', cluster: inference, job: sglang-api}\n")
    out = tmp_path / "out"
    run_cli("run", str(root), "--out", str(out), "--config", str(cfg))
    rows = _fleet(out).to_dict("records")
    assert [(Path(r["report"]).name, r["job_kind"], r["window_rule"], r["window_start_ns"], r["window_end_ns"],
             r["idle_ns"], r["capture_idle_ns"], r["window_left_out_idle_pct"], r["startup_wait_ns"]) for r in rows] == [
        (f"srv_rank{n}.pt.trace.json", "serving", "span", T0 + 200 * MS, T0 + 670 * MS, 270 * MS, 270 * MS, 0.0,
         200 * MS) for n in (0, 1)]
    key = rows[0]["gpu_key"]
    assert rows[0]["job_kind_source"] == "NVTX range 'sglang::decode' (window.serving_ranges)"
    assert rows[1]["job_kind_source"] == (f"NVTX range 'sglang::decode' (window.serving_ranges) on gpu {key} in "
                                          "srv_rank0.pt.trace.json")


@pytest.mark.parametrize("name", ["a100_ws2_nccl_rank0.json.gz", "v100_resnet_ns_rank0.json.gz",
                                  "mi250_rocm_minitoy.json.gz"])
def test_real_training_traces_are_training(name):
    """The team's real PyTorch training traces are found to be training by the stated rule (their
    ``## backward ##`` / ``Optimizer.step#SGD.step`` ranges), never serving."""
    report = load_kineto(str(KINETO / name))
    kinds = {plan_gpu(gpu_trace(report, key), Config()).kind for key in report.gpu_keys()}
    assert kinds == {"training"}


def test_detect_kind_rule():
    """The rule's order and boundaries: serving before training; ``decode``/``prefill`` as words only (a
    ``TransformerDecoderLayer`` range is no evidence); kernel patterns on kernel names only."""
    rules = Config().window
    assert detect_kind(["void gemm_bwd_kernel"], ["vllm::generate"], rules) == (
        "serving", "NVTX range 'vllm::generate' (window.serving_ranges)")
    assert detect_kind(["sgl_kernel::fused_add_rmsnorm"], [], rules) == (
        "serving", "kernel 'sgl_kernel::fused_add_rmsnorm' (window.serving_kernels)")
    assert detect_kind(["void gemm_kernel"], ["TransformerDecoderLayer", "Iteration 3"], rules) == ("unknown", "")
    assert detect_kind(["void softmax_warp_backward<float>"], ["decoder"], rules) == (
        "training", "kernel 'void softmax_warp_backward<float>' (window.training_kernels)")
    assert detect_kind([], ["decode"], rules)[0] == "serving"
    assert detect_kind(["void flashinfer::BatchDecodeWithPagedKVCacheKernel<128>"], ["Iteration 1"], rules) == (
        "serving", "kernel 'void flashinfer::BatchDecodeWithPagedKVCacheKernel<128>' (window.serving_kernels)")


# ---------------------------------------------------------------- how far a serving month is trusted

def served(path: str, batches: int, period_ns: int, hole_ns: int = 0) -> str:
    """A serving trace like :func:`serving_trace` (SGLang ranges, a 1 ms ``sglang::scheduler_init`` range at 0)
    with ``batches`` batches, batch b from s = 200 ms + ``period_ns`` × b: 4 kernels of 5 ms, ``hole_ns`` apart.
    So each batch is 20 ms busy, W = C runs from 200 ms to (batches − 1) × period + 20 ms + 3 × hole later, and
    every batch is one burst while ``hole_ns`` is at most 1 ms and the wait between batches longer."""
    t = _Trace(path, process_name="sglang::scheduler_TP0")
    t.step("sglang::scheduler_init", 0, 1 * MS, [])
    names = ("void flashinfer::BatchPrefillKernel", "void gemm_kernel", "void rms_norm_kernel", "void sampling_kernel")
    for b in range(batches):
        s = 200 * MS + period_ns * b
        kernels = [(n, s + (5 * MS + hole_ns) * i, s + (5 * MS + hole_ns) * i + 5 * MS) for i, n in enumerate(names)]
        t.step("sglang::prefill" if b == 0 else "sglang::decode", s - 1 * MS, kernels[-1][2], kernels)
    return t.close()


#: (batches, period ms) -> (bursts, window ns, tier, note) by hand under the defaults: toy under 50 kernels;
#: serving medium at ≥ 20 bursts over ≥ 5 s, high at ≥ 100 bursts over ≥ 60 s; W = (batches − 1) × period + 20 ms.
SERVING_TIERS = {
    (12, 300): (12, 3_320 * MS, "toy", "48 kernels in W (fewer than 50)"),                 # 4 × 12 = 48 kernels
    (19, 300): (19, 5_420 * MS, "low", "rests on 19 bursts (fewer than 20)"),              # 18 × 300 + 20
    (20, 250): (20, 4_770 * MS, "low", "window 4.770000 s (under 5 s)"),                   # 19 × 250 + 20
    (13, 250): (13, 3_020 * MS, "low", "rests on 13 bursts (fewer than 20); window 3.020000 s (under 5 s)"),
    (20, 300): (20, 5_720 * MS, "medium", ""),                                             # exactly 20 bursts
    (21, 249): (21, 5_000 * MS, "medium", ""),                                             # 20 × 249 + 20: exactly 5 s
    (99, 620): (99, 60_780 * MS, "medium", ""),                                            # 98 × 620 + 20; 99 < 100
    (100, 610): (100, 60_410 * MS, "high", ""),                                            # exactly 100 bursts
}


@pytest.mark.parametrize("batches, period_ms", list(SERVING_TIERS), ids=[f"{b}x{p}ms" for b, p in SERVING_TIERS])
def test_each_serving_tier_by_its_bursts_and_length(tmp_path, batches, period_ms):
    """A serving row is tiered by its bursts of work and its W (the whole capture), not by iterations (it has
    none): every tier is reached, at the thresholds' edges, with the bursts counted exactly. (main: every
    serving row that is not a toy was low, ``rests on 0 stable iterations (fewer than 5)``, and no row had
    ``bursts``.)"""
    row = _row(served(str(tmp_path / "srv.pt.trace.json"), batches, period_ms * MS))
    bursts, window_ns, tier, note = SERVING_TIERS[(batches, period_ms)]
    assert (row["job_kind"], row["window_rule"], row["iterations"], row["kernel_count"]) == (
        "serving", "span", 0, 4 * batches)
    assert (row["confidence_tier"], row["confidence_note"], row["low_confidence"]) == (
        tier, note, tier in ("toy", "low"))
    assert (row["bursts"], row["window_ns"], row["capture_ns"]) == (bursts, window_ns, window_ns)


def test_serving_window_edge_and_burst_gap(tmp_path):
    """At exactly 60 s (101 batches every 599.8 ms: 100 × 599.8 + 20 = 60,000 ms) with 101 bursts: high. Kernels
    1 ms apart inside a batch stay one burst (1 ms is not over ``confidence.serving_burst_gap_ns``), 1 ms + 1 ns
    apart make each kernel a burst of its own; the serving trace's 30 ms waits separate its 10 batches under a
    gap of 29,999,999 ns and none under one of 30 ms."""
    row = _row(served(str(tmp_path / "edge.pt.trace.json"), 101, 599_800_000))
    assert (row["window_ns"], row["confidence_tier"], row["confidence_note"], row["bursts"]) == (
        60_000 * MS, "high", "", 101)
    one_ms = _row(served(str(tmp_path / "one.pt.trace.json"), 20, 300 * MS, hole_ns=1 * MS))
    assert (one_ms["window_ns"], one_ms["bursts"], one_ms["confidence_tier"]) == (5_723 * MS, 20, "medium")
    over = _row(served(str(tmp_path / "over.pt.trace.json"), 20, 300 * MS, hole_ns=1 * MS + 1))
    assert (over["window_ns"], over["bursts"], over["confidence_tier"]) == (5_723 * MS + 3, 80, "medium")
    path = serving_trace(str(tmp_path / "srv.pt.trace.json"))

    def bursts(gap_ns: int) -> int:
        cfg = dataclasses.replace(Config(), confidence=dataclasses.replace(Config().confidence,
                                                                           serving_burst_gap_ns=gap_ns))
        return _row(path, cfg)["bursts"]

    assert (bursts(30 * MS - 1), bursts(30 * MS)) == (10, 1)


def test_a_serving_month_reaches_a_trusted_tier_in_the_outputs(tmp_path):
    """``gpu-idle run`` (a real process) on a minute of serving, 100 batches every 610 ms: the row is high by the
    serving rule, its dollars are trusted (``trusted_idle_usd_per_month`` of its job = its idle dollars), and the
    GPU page explains the tier. 100 batches × 20 ms = 2,000 ms busy of W = 60,410 ms: idle 58,410 ms =
    96.6893 %, × $4.00 × 730 h = $2,823.33. (main: low, ``rests on 0 stable iterations (fewer than 5)``.)"""
    trace = served(str(tmp_path / "sglang-minute.pt.trace.json"), 100, 610 * MS)
    out = tmp_path / "out"
    run_cli("run", trace, "--out", str(out))
    (row,) = _fleet(out).to_dict("records")
    assert (row["confidence_tier"], row["low_confidence"], row["confidence_note"]) == ("high", False, "")
    assert (row["job_kind"], row["bursts"], row["window_ns"], row["idle_ns"], row["idle_pct"]) == (
        "serving", 100, 60_410 * MS, 58_410 * MS, 96.6893)
    assert row["idle_usd_per_month"] == 2823.33
    jobs = pd.read_csv(out / "jobs.csv", keep_default_na=False)
    assert jobs["trusted_idle_usd_per_month"].tolist() == [2823.33]
    csv = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert (csv.loc[0, "bursts"], csv.loc[0, "confidence_tier"]) == (100, "high")
