"""PyTorch profiler (Kineto) traces as a second input (issue 15).

Right values: the issue's table for three real traces (span window, 1 ms), and for all six an
independent second computation in this file (the stdlib ``json`` parser with ``Decimal`` numbers
and a plain-Python union and per-stream sweep; no pipeline code), through a real ``gpu-idle run``
over the traces and the Nsight exports together. Small hand-written traces pin the loader's
reading of each format variant, the exact time arithmetic and the error rows.
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import os
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import pandas as pd
import pytest
from conftest import KINETO, run_cli

from pipeline import synth
from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.attribution import gap_copies
from pipeline.config import Config, load_config
from pipeline.work.tasks import trace_labels
from pipeline.inputs.discover import discover
from pipeline.load import cache
from pipeline.load.kineto import load_kineto
from pipeline.load.kineto_time import micros_text_to_ns, raws_to_ns
from pipeline.load.report import gpu_trace
from pipeline.model import ProfileError, WarningCode
from pipeline.synth.kineto import KinetoWriter

FILES = ("ws128_sampled_rank0", "ws128_sampled_rank1", "a100_ws2_nccl_rank0", "v100_resnet_ns_rank0",
         "mi250_rocm_minitoy", "a100_ws16_5streams_rank0")
#: The issue's table (span window, 1 ms): window, busy, idle, copy-only, dark, gaps, gap total, buckets.
ISSUE_TABLE = {
    "ws128_sampled_rank0": (1_222_818_000, 547_303_000, 675_515_000, 349_000, 675_166_000, 147, 3_425_248_000,
                            (104, 33, 10)),
    "a100_ws2_nccl_rank0": (660_551_005, 155_215_315, 505_335_690, 2_284_699, 503_050_991, 38, 794_910_418,
                            (17, 18, 3)),
    "v100_resnet_ns_rank0": (480_029_179, 468_153_602, 11_875_577, 4_300_839, 7_574_738, 1, 2_113_556, (1, 0, 0)),
}
MS = 1_000_000


@pytest.fixture(scope="module")
def kineto() -> Path:
    if not (KINETO / "ws128_sampled_rank0.json.gz").exists():
        pytest.fail(f"real PyTorch profiler traces not found in {KINETO} (set GPU_IDLE_KINETO)")
    return KINETO


# -- the independent second computation --------------------------------------------------------

def reference(path: Path, min_gap_ns: int = MS) -> dict:
    """Span-window figures of the trace's one GPU, from the stdlib json parser (numbers as Decimal)
    and plain Python: µs × 1000 rounded half to even; union by a sorted sweep; per-stream gaps from the
    latest end seen on the stream."""
    with gzip.open(path) as fh:
        doc = json.loads(fh.read(), parse_float=Decimal, parse_int=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))

    def ns(value) -> int:
        return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))

    kernels, copies = [], []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start = base + ns(e["ts"])
            item = (start, start + ns(e["dur"]), int(e["args"]["stream"]))
            (kernels if e["cat"] == "kernel" else copies).append(item)
    assert len({int(e["args"]["device"]) for e in doc["traceEvents"] if e.get("cat") == "kernel"}) == 1
    w0, w1 = min(k[0] for k in kernels), max(k[1] for k in kernels)

    def union(intervals) -> int:
        total, reach = 0, None
        for s, e in sorted(intervals):
            s, e = max(s, w0), min(e, w1)
            if e <= s:
                continue
            if reach is None or s > reach:
                total += e - s
                reach = e
            elif e > reach:
                total += e - reach
                reach = e
        return total

    busy = union((s, e) for s, e, _ in kernels)
    anything = union([(s, e) for s, e, _ in kernels] + [(s, e) for s, e, _ in copies])
    gaps = []
    for stream in {k[2] for k in kernels}:
        latest = None
        for s, e in sorted((s, e) for s, e, x in kernels if x == stream):
            if latest is not None and s - latest > min_gap_ns:
                gaps.append(s - latest)
            latest = e if latest is None else max(latest, e)
    buckets = (sum(g <= 5 * MS for g in gaps), sum(5 * MS < g <= 50 * MS for g in gaps), sum(g > 50 * MS for g in gaps))
    return {"window": w1 - w0, "busy": busy, "idle": w1 - w0 - busy, "copy_only": anything - busy,
            "dark": w1 - w0 - anything, "gaps": len(gaps), "gap_total": sum(gaps), "buckets": buckets}


def figures(row) -> tuple:
    return (int(row.window_ns), int(row.busy_ns), int(row.idle_ns), int(row.copy_only_ns), int(row.dark_ns),
            int(row.gap_count), int(row.gap_total_ns),
            (int(row.gaps_le_5ms), int(row.gaps_5_50ms), int(row.gaps_gt_50ms)))


@pytest.fixture(scope="module")
def mixed_run(kineto, profiles, tmp_path_factory) -> Path:
    """One ``gpu-idle run`` over the six traces and the Nsight exports together, then ``gpu-idle report``."""
    out = tmp_path_factory.mktemp("kineto_mixed")
    labels = tmp_path_factory.mktemp("kineto_mixed_config") / "labels.yaml"  # not in --out: not gpu-idle's file
    labels.write_text("labels:\n  - {match: '*/ws128_sampled_rank*', cluster: kineto, job: ws128}\n")
    run_cli("run", str(kineto), str(profiles), "--out", str(out), "--window", "span",
            "--config", "configs/profiles.yaml", "--config", str(labels))
    run_cli("report", str(out), "--out", str(out / "report.html"))
    return out


@pytest.fixture(scope="module")
def mixed_fleet(mixed_run) -> pd.DataFrame:
    return pd.read_csv(mixed_run / "fleet.csv", keep_default_na=False)


def trace_row(fleet: pd.DataFrame, stem: str):
    hit = fleet[fleet["report"].str.endswith(f"/{stem}.json.gz")]
    assert len(hit) == 1, f"{stem}: {len(hit)} rows"
    return hit.iloc[0]


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(ISSUE_TABLE))
def test_right_values_of_the_issue(mixed_fleet, kineto, stem):
    row = trace_row(mixed_fleet, stem)
    assert int(row.device_id) == 0 and row.window_rule == "span" and row.status == "ok"
    assert figures(row) == ISSUE_TABLE[stem]
    want = reference(kineto / f"{stem}.json.gz")   # the table is what the second computation finds too
    assert ISSUE_TABLE[stem] == (want["window"], want["busy"], want["idle"], want["copy_only"], want["dark"],
                                 want["gaps"], want["gap_total"], want["buckets"])


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["ws128_sampled_rank1", "mi250_rocm_minitoy", "a100_ws16_5streams_rank0"])
def test_other_traces_match_a_second_computation(mixed_fleet, kineto, stem):
    row = trace_row(mixed_fleet, stem)
    assert row.status == "ok" and row.window_rule == "span"
    want = reference(kineto / f"{stem}.json.gz")
    assert figures(row) == (want["window"], want["busy"], want["idle"], want["copy_only"], want["dark"],
                            want["gaps"], want["gap_total"], want["buckets"])
    # and the figures that make these traces what they are (worked out once by the second computation)
    assert {"ws128_sampled_rank1": (1_231_182_000, 146), "mi250_rocm_minitoy": (8_594_445, 1),
            "a100_ws16_5streams_rank0": (1_227_177_000, 115)}[stem] == (want["window"], want["gaps"])


def test_one_fleet_table_and_one_report_for_both_formats(mixed_run, mixed_fleet):
    assert len(mixed_fleet) == 6 + 5 and set(mixed_fleet["status"]) == {"ok"}
    nsight = mixed_fleet[mixed_fleet["report"].str.endswith(".sqlite")]
    assert len(nsight) == 5
    fastvideo = nsight[nsight["report"].str.endswith("fastvideo_h100_sp2_1s.sqlite") & (nsight["pid"] == 111)].iloc[0]
    assert int(fastvideo.idle_ns) == 938_099_846   # the Nsight rows are what they are alone (test_real_profiles)
    # identity and cost from the traces: model from deviceProperties -> rate card, rank from distributedInfo
    a100 = trace_row(mixed_fleet, "a100_ws2_nccl_rank0")
    assert (a100.gpu_model, a100.rate_model, float(a100.rate_usd_per_hour)) == ("NVIDIA A100-PG509-200", "A100", 2.5)
    assert a100.gpu_key == "pid2910249/dev0" and str(a100["rank"]) == "0"
    ws1 = trace_row(mixed_fleet, "ws128_sampled_rank1")
    assert ws1.gpu_model == "" and ws1.rate_model == "H100" and "no deviceProperties" in ws1.rate_source
    assert str(ws1["rank"]) == "1" and (ws1.cluster, ws1.job) == ("kineto", "ws128")   # the job's label: one job
    jobs = pd.read_csv(mixed_run / "jobs.csv", keep_default_na=False)
    assert int(jobs.loc[jobs["job"] == "ws128", "gpus"].iloc[0]) == 2
    page = (mixed_run / "report.html").read_text(encoding="utf-8")
    assert all(text in page for text in ("ws128", "pid2910249/dev0", "v100_resnet_ns_rank0", "fastvideo_h100_sp2_1s",
                                         "train_h100_2gpu_nccl"))


def test_ns_resolution_trace_is_exact_where_floats_are_not(kineto):
    """v100_resnet_ns: ts at epoch magnitude with 3 decimals. The loader's ns equal the decimal reading
    on every GPU event; a float64 reading (ts and dur as floats, summed, × 1000, rounded) gets the end
    of 6,078 of the 6,095 wrong."""
    path = kineto / "v100_resnet_ns_rank0.json.gz"
    report = load_kineto(str(path))
    with gzip.open(path) as fh:
        doc = json.loads(fh.read(), parse_float=str)
    exact, floats = [], []
    for e in doc["traceEvents"]:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            start = micros_text_to_ns(e["ts"])
            exact.append((start, start + micros_text_to_ns(e["dur"])))
            floats.append(round((float(e["ts"]) + float(e["dur"])) * 1000))
    got = sorted(zip(pd.concat([report.kernels["start"], report.copies["start"]]),
                     pd.concat([report.kernels["end"], report.copies["end"]])))
    assert got == sorted(exact) and len(got) == 6_095
    assert sum(f != e for f, (_, e) in zip(floats, exact)) == 6_078


def step_lengths(path: Path) -> list[int]:
    """The ``ProfilerStep#N`` iterations of a trace on the GPU timeline, worked out here from the stdlib
    json parser (no pipeline code): each step's kernels are those whose ``args.correlation`` is that of a
    ``cuda_runtime`` call the step's own thread started inside the step's range; its extent runs from
    their first start to their last end; its length from its start to the next step's start (or its own
    end when later; the last step: its own end), in ns."""
    with gzip.open(path) as fh:
        doc = json.loads(fh.read(), parse_float=Decimal, parse_int=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))

    def ns(value) -> int:
        return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))

    events = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"]), e["tid"]) for e in events
                   if str(e.get("name", "")).startswith("ProfilerStep#"))
    extents = []
    for s0, s1, tid in steps:
        corr = {int(e["args"]["correlation"]) for e in events if e.get("cat") == "cuda_runtime"
                and e["tid"] == tid and s0 <= base + ns(e["ts"]) < s1}
        mine = [(base + ns(e["ts"]), base + ns(e["ts"]) + ns(e["dur"])) for e in events
                if e.get("cat") == "kernel" and int(e["args"].get("correlation", -1)) in corr]
        extents.append((min(a for a, _ in mine), max(b for _, b in mine)))
    return [max(b, nxt[0]) - a for (a, b), nxt in zip(extents, extents[1:])] + [extents[-1][1] - extents[-1][0]]


def test_auto_window_of_a_real_trace_does_not_take_a_layer_for_an_iteration(kineto):
    """a100_ws2_nccl: its three ProfilerStep iterations are too few for the nvtx rule (warm-up leaves 2);
    the kernels' own periodicity finds a ~1.2 ms pattern (a layer), far shorter than a step: no iteration.
    `--window auto` falls back to the span, flagged untrimmed (before: an 11.8 ms `periodic` window of
    the 660 ms span, none of the step's NCCL in it)."""
    path = kineto / "a100_ws2_nccl_rank0.json.gz"
    lengths = step_lengths(path)
    assert lengths == [222_054_811, 219_732_155, 218_764_039]    # median 219.732155 ms
    _, result = analyse_one(str(path), Config())
    row = result.row
    # the span window, as the issue's table gives it (and reference() computes it)
    assert (row["window_rule"], row["untrimmed"], row["window_ns"]) == ("span", True, ISSUE_TABLE[path.name[:-8]][0])
    assert row["window_ns"] == 660_551_005 and row["iterations"] == 0
    assert row["window_note"].startswith("nvtx: only 2 usable iteration(s) of 3 (need 3); periodic: its iterations "
                                         "(median ")
    assert row["window_note"].endswith(") are shorter than the NVTX iterations (median 219.732 ms) / 1.5: a pattern "
                                       "inside a step, not an iteration")
    period = float(row["window_note"].split("(median ")[1].split(" ms")[0])
    assert period * 1.5 < 219.732     # about 1.186 ms


# -- time arithmetic ---------------------------------------------------------------------------

def test_microsecond_text_to_ns_is_exact_and_rounds_half_to_even():
    # 3 decimals: exact; the value at epoch magnitude a float64 cannot hold
    assert micros_text_to_ns("1712195495519689.047") == 1_712_195_495_519_689_047
    assert round(float("1712195495519689.047") * 1000) != 1_712_195_495_519_689_047
    assert micros_text_to_ns("68.0") == 68_000 and micros_text_to_ns("12") == 12_000
    assert micros_text_to_ns("1.5e3") == 1_500_000 and micros_text_to_ns('"7.25"') == 7_250
    # finer than 1 ns: to the nearest, ties to even: 0.5 -> 0, 1.5 -> 2, 2.5 -> 2, 1002.5 -> 1002, 1003.5 -> 1004
    assert [micros_text_to_ns(t) for t in ("0.0005", "0.0015", "0.0025", "1.0025", "1.0035", "1.00251")] == \
        [0, 2, 2, 1002, 1004, 1003]
    ns, bad = raws_to_ns([b"4458676522690.655", b"null", b"0.0015", b'"3"', b"abc"])
    assert ns.tolist() == [4_458_676_522_690_655, 0, 2, 3_000, 0] and bad.tolist() == [False, True, False, False, True]


# -- hand-written traces -----------------------------------------------------------------------

def write(path: Path, text: str, compress: bool | None = None) -> str:
    data = text.encode()
    if compress if compress is not None else str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
    return str(path)


def span_config() -> Config:
    cfg = Config()
    return dataclasses.replace(cfg, analysis=dataclasses.replace(cfg.analysis, window="span"))


def analyse_one(path: str, cfg: Config | None = None):
    report = load_kineto(path)
    (key,) = report.gpu_keys()
    return report, analyse_gpu(gpu_trace(report, key), cfg or span_config(), trace_labels(report, {}))


#: Base-relative µs text, as PyTorch 2.x writes it. Device 0, pid 500:
#:   K1 stream 7 [0, 100 µs) launched by cudaLaunchKernel (corr 1) on thread 501
#:   K2 stream 7 [2,100, 2,150 µs) with no CPU launch event (corr 2): still busy, owned by pid 500
#:   K3 stream 20 [1,000, 1,200 µs) launched by the driver (cuda_driver cuLaunchKernel, corr 3)
#:   HtoD copy stream 30 [1,500, 1,800.5 µs) after cudaMemcpyAsync [1,400, 1,850 µs) (corr 4)
TRACE = """{
  "schemaVersion": 1,
  "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB", "numSms": 108}],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
  "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#7", "pid": 500, "tid": 500, "ts": 0.000, "dur": 2150.000},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 500, "tid": 500, "ts": 0.000, "dur": 10.000, "args": {"External id": 9}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 500, "tid": 501, "ts": 0.000, "dur": 5.000, "args": {"correlation": 1}},
  {"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "pid": 500, "tid": 501, "ts": 900.000, "dur": 5.000, "args": {"correlation": 3}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 500, "tid": 501, "ts": 1400.000, "dur": 450.000, "args": {"correlation": 4}},
  {"ph": "s", "id": 1, "pid": 500, "tid": 501, "ts": 0.000, "cat": "ac2g", "name": "ac2g"},
  {"ph": "X", "cat": "kernel", "name": "K1", "pid": 0, "tid": 7, "ts": 0.000, "dur": 100.000, "args": {"device": 0, "stream": 7, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "K2", "pid": 0, "tid": 7, "ts": 2100.000, "dur": 50.000, "args": {"device": 0, "stream": 7, "correlation": 2}},
  {"ph": "X", "cat": "kernel", "name": "K3", "pid": 0, "tid": 20, "ts": 1000.000, "dur": 200.000, "args": {"device": 0, "stream": 20, "correlation": 3}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 30, "ts": 1500.000, "dur": 300.500, "args": {"device": 0, "stream": 30, "correlation": 4, "bytes": 4096}},
  {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#7", "pid": 0, "tid": 7, "ts": 0.000, "dur": 2150.000},
  {"ph": "M", "name": "process_name", "pid": 500, "tid": 0, "args": {"name": "python3"}}
  ],
  "baseTimeNanoseconds": 1700000000000000000
}"""
BASE = 1_700_000_000_000_000_000


def test_hand_trace_is_read_like_an_export(tmp_path):
    report, result = analyse_one(write(tmp_path / "t.pt.trace.json", TRACE))
    k = report.kernels.sort_values("start")
    # every time is base + µs × 1000
    assert k[["start", "end", "pid", "device_id", "stream_id", "correlation_id"]].values.tolist() == [
        [BASE, BASE + 100_000, 500, 0, 7, 1],
        [BASE + 1_000_000, BASE + 1_200_000, 500, 0, 20, 3],
        [BASE + 2_100_000, BASE + 2_150_000, 500, 0, 7, 2]]     # K2: no launch event, the trace's process
    assert k["name"].astype(str).tolist() == ["K1", "K3", "K2"]
    assert report.runtime[["start", "pid", "tid", "correlation_id"]].values.tolist() == [
        [BASE, 500, 501, 1], [BASE + 900_000, 500, 501, 3], [BASE + 1_400_000, 500, 501, 4]]
    assert report.runtime["name"].astype(str).tolist() == ["cudaLaunchKernel", "cuLaunchKernel", "cudaMemcpyAsync"]
    c = report.copies.iloc[0]
    assert (c.start, c.end, c.kind, c.copy_kind, c.bytes, c.src_kind, c.dst_kind, c.stream_id) == (
        BASE + 1_500_000, BASE + 1_800_500, "memcpy", 1, 4096, 1, 2, 30)   # HtoD, pinned (1) -> device (2)
    assert report.nvtx.values.tolist() == [[BASE, BASE + 2_150_000, 500, 500, "ProfilerStep#7"]]  # CPU side only
    assert report.devices[["gpu_key", "gpu_model", "sms"]].values.tolist() == [["pid500/dev0", "NVIDIA A100-SXM4-80GB",
                                                                                108]]
    assert report.meta == {"format": "kineto", "rank": "3", "world_size": "8", "backend": "nccl", "base_time_ns": str(BASE)}
    row = result.row
    # W = [0, 2,150 µs) = 2,150,000 ns; busy = 100,000 + 200,000 + 50,000 = 350,000; idle 1,800,000
    # copy-only: the copy [1,500, 1,800.5 µs) touches no kernel: 300,500; dark = 1,800,000 - 300,500
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"], row["dark_ns"]) == (
        2_150_000, 350_000, 1_800_000, 300_500, 1_499_500)
    # stream 7: 2,100,000 - 100,000 = 2,000,000 > 1 ms: one gap; stream 20 has one kernel
    assert (row["gap_count"], row["gap_total_ns"], row["gaps_le_5ms"]) == (1, 2_000_000, 1)
    gap = result.roster[0]
    assert (gap["stream_id"], gap["length_ns"], gap["kernel_before"], gap["kernel_after"]) == (7, 2_000_000, "K1", "K2")
    # in the gap [100, 2,100 µs): the copy call for its whole 450 µs, the driver launch for its 5 µs, the copy
    # engine for 300.5 µs; the calls cover 455 of 2,000 µs (< half: not data), nothing syncs: cpu
    assert gap["attribution"] == [{"api": "cudaMemcpyAsync", "overlap_ns": 450_000},
                                  {"api": "cuLaunchKernel", "overlap_ns": 5_000}]
    assert (gap["copy_overlap_ns"], gap["category"], gap["nvtx_range"]) == (300_500, "cpu", "ProfilerStep#7")
    assert row["rank"] == "3" and row["rate_model"] == "A100" and row["status"] == "ok"


def test_older_traces_capital_categories_string_tids_no_metadata(tmp_path):
    """PyTorch 1.8-1.9 spelling: Kernel / Runtime / Memcpy / Memset, ProfilerStep as an Operator,
    tid "stream 7" and no args.stream, integer µs, no deviceProperties / distributedInfo / base."""
    text = """{"schemaVersion": 1, "traceEvents": [
  {"ph": "X", "cat": "Operator", "name": "ProfilerStep#1", "pid": 77, "tid": "77", "ts": 100, "dur": 3000},
  {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 77, "tid": "77", "ts": 100, "dur": 5, "args": {"correlation": 11, "external id": 1}},
  {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": "stream 9", "ts": 110, "dur": 40, "args": {"device": 0, "correlation": 11}},
  {"ph": "X", "cat": "Kernel", "name": "relu", "pid": 0, "tid": "stream 9", "ts": 1300, "dur": 20, "args": {"device": 0, "correlation": 12}},
  {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 9", "ts": 200, "dur": 2, "args": {"device": 0, "correlation": 13, "bytes": 64}},
  {"ph": "X", "cat": "Memcpy", "name": "Memcpy DtoH (Device -> Pageable)", "pid": 0, "tid": "stream 9", "ts": 1320, "dur": 3, "args": {"device": 0, "correlation": 14, "bytes": 4}}
]}"""
    report, result = analyse_one(write(tmp_path / "old.json", text))
    assert report.kernels[["start", "end", "stream_id", "pid"]].values.tolist() == [
        [110_000, 150_000, 9, 77], [1_300_000, 1_320_000, 9, 77]]
    assert report.copies[["kind", "copy_kind", "src_kind", "dst_kind"]].values.tolist() == [
        ["memcpy", 2, 2, 0], ["memset", -1, -1, -1]]   # DtoH, device (2) -> pageable (0), as an export numbers them
    assert report.nvtx["text"].tolist() == ["ProfilerStep#1"] and report.runtime["tid"].tolist() == [77]
    assert report.devices["model_note"].tolist() == ["trace names no GPU (it has no deviceProperties)"]
    assert report.meta == {"format": "kineto"}
    # W = [110, 1,320 µs): 1,210,000; busy 40,000 + 20,000; the memset [200, 202) µs is copy-only: 2,000
    row = result.row
    assert (row["window_ns"], row["busy_ns"], row["copy_only_ns"], row["gap_count"], row["gap_total_ns"]) == (
        1_210_000, 60_000, 2_000, 1, 1_150_000)
    assert row["rate_model"] == "H100" and "no deviceProperties" in row["rate_source"] and row["rank"] == ""


def test_capture_start_is_the_profiler_span_else_the_earliest_event(tmp_path):
    """The timeline's zero: the start of the profiler's own Trace span (the earliest, named as it is,
    when there are several), else the earliest event read; base + ts × 1000 as every time."""
    base = 1_000_000_000_000_000_000
    events = [
        '{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 4, "tid": 4, "ts": 5.250, "dur": 2, "args": {"correlation": 1}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 20.000, "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 1}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 2000.000, "dur": 10, "args": {"device": 0, "stream": 7, "correlation": 2}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 4, "tid": 4, "ts": 1.000, "dur": 1}',   # not read
    ]
    span0 = ('{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", '
             '"ts": 3.125, "dur": 3000}')
    span1 = ('{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (1)", "pid": "Spans", "tid": "PyTorch Profiler", '
             '"ts": 4.000, "dur": 5000}')

    def start(name: str, evs: list) -> tuple:
        text = '{"traceEvents": [%s], "baseTimeNanoseconds": %d}' % (",".join(evs), base)
        r = load_kineto(write(tmp_path / name, text))
        return r.capture_start_ns, r.capture_start_source

    # no span: the runtime call at 5.250 µs is the earliest event read (the cpu_op at 1 µs is not read)
    assert start("none.json", events) == (base + 5_250, "the trace's earliest event (it has no profiler span)")
    assert start("one.json", events + [span0]) == (
        base + 3_125, 'the trace\'s profiler span ("PyTorch Profiler (0)" Trace event)')
    assert start("two.json", [span1] + events + [span0]) == (
        base + 3_125, 'the trace\'s profiler span ("PyTorch Profiler (0)" Trace event)')


#: One copy-engine event per way traces name copies, each 100 µs in the gap [100, 10,000 µs) of device 0:
#: (cat, name, (copy_kind, src_kind, dst_kind) as an Nsight export numbers them (ENUM_CUDA_MEMCPY_OPER:
#: 1 HtoD, 2 DtoH, 8 DtoD, 10 PtoP, 0 unknown; ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned, 2 device, 7 unknown),
#: what the roster says: direction, host memory).
COPY_VARIANTS = [
    ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", (1, 1, 2), "HtoD", "pinned"),
    ("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", (1, 0, 2), "HtoD", "pageable"),
    ("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", (2, 2, 1), "DtoH", "pinned"),
    ("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", (2, 2, 0), "DtoH", "pageable"),
    ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", (8, 2, 2), "DtoD", None),          # no host side
    ("gpu_memcpy", "Memcpy PtoP (Device -> Device)", (10, 2, 2), "PtoP", None),
    ("Memcpy", "Memcpy HtoD (Pinned -> Device)", (1, 1, 2), "HtoD", "pinned"),          # PyTorch 1.8-1.9 category
    ("Memcpy", "Memcpy DtoH (Device -> Pageable)", (2, 2, 0), "DtoH", "pageable"),
    ("gpu_memcpy", "Memcpy HtoD (Managed -> Device)", (1, 4, 2), "HtoD", "unknown"),    # managed: neither
    # ROCm: Kineto names the host side "Host" (pinned or pageable unsaid); older ROCm traces name copies
    # by roctracer's operation (CopyHostToDevice) or the HIP call (hipMemcpyDtoHAsync): direction only
    ("gpu_memcpy", "Memcpy HtoD (Host -> Device)", (1, 7, 2), "HtoD", "unknown"),
    ("gpu_memcpy", "Memcpy DtoH (Device -> Host)", (2, 2, 7), "DtoH", "unknown"),
    ("gpu_memcpy", "CopyHostToDevice", (1, 7, 2), "HtoD", "unknown"),
    ("gpu_memcpy", "CopyDeviceToHost2D", (2, 2, 7), "DtoH", "unknown"),
    ("gpu_memcpy", "CopyDeviceToDevice", (8, 2, 2), "DtoD", None),
    ("gpu_memcpy", "hipMemcpyDtoHAsync", (2, 2, 7), "DtoH", "unknown"),
    ("gpu_memcpy", "hipMemcpyHtoD", (1, 7, 2), "HtoD", "unknown"),
    ("gpu_memcpy", "hipMemcpyAsync", (0, 7, 7), "unknown", "unknown"),                 # no direction named
    ("gpu_memcpy", "Memcpy <unknown> (? -> ?)", (0, 7, 7), "unknown", "unknown"),
    ("gpu_memset", "Memset (Device)", (-1, -1, -1), None, None),
    ("Memset", "Memset (Unknown)", (-1, -1, -1), None, None),
    ("gpu_memset", "FillBuffer", (-1, -1, -1), None, None),                            # ROCm's memset
]


def test_copy_memory_kinds_as_an_export_numbers_them(tmp_path):
    """Every naming of a copy gives copy_kind / src_kind / dst_kind in the Nsight export's numbering
    (the one the roster's consumers read), so the gap's copies say pinned where the trace says Pinned
    and pageable where it says Pageable, never the other way round; ROCm's Host side is unknown."""
    kernel = ('{"ph": "X", "cat": "kernel", "name": "K%d", "pid": 0, "tid": 7, "ts": %d, "dur": 100, '
              '"args": {"device": 0, "stream": 7, "correlation": %d}}')
    copy = ('{"ph": "X", "cat": "%s", "name": "%s", "pid": 0, "tid": 30, "ts": %d, "dur": 100, '
            '"args": {"device": 0, "stream": 30, "correlation": %d, "bytes": %d}}')
    events = [kernel % (1, 0, 1), kernel % (2, 10_000, 2)]
    events += [copy % (cat, name, 200 + 400 * i, 10 + i, 1000 + i) for i, (cat, name, *_) in enumerate(COPY_VARIANTS)]
    report = load_kineto(write(tmp_path / "copies.json", '{"traceEvents": [%s]}' % ",\n".join(events)))
    c = report.copies.sort_values("start")
    assert [tuple(r) for r in c[["copy_kind", "src_kind", "dst_kind"]].values.tolist()] == [v[2] for v in COPY_VARIANTS]
    assert c["bytes"].tolist() == [1000 + i for i in range(len(COPY_VARIANTS))]
    # the gap [100, 10,000 µs) between K1 and K2 holds every copy, each 100 µs inside it
    (got,) = gap_copies(pd.DataFrame({"start": [100_000], "end": [10_000_000]}), c, limit=len(COPY_VARIANTS))
    assert [(x["what"], x.get("direction"), x.get("host_memory"), x["overlap_ns"]) for x in got["copies"]] == [
        ("memset" if v[2][0] == -1 else "memcpy", v[3], v[4], 100_000) for v in COPY_VARIANTS]
    # and through the analysis: the roster's gap lists the five first (equal overlaps: earlier first)
    _, result = analyse_one(str(tmp_path / "copies.json"))
    gap = result.device_roster[0]
    assert (gap["start_ns"], gap["length_ns"], gap["copy_count"]) == (100_000, 9_900_000, len(COPY_VARIANTS))
    assert [x.get("host_memory") for x in gap["copies"]] == ["pinned", "pageable", "pinned", "pageable", None]


def test_the_real_traces_copies_say_pinned_and_pageable(kineto):
    """ws128_sampled_rank0 names 8 copies ``Memcpy HtoD (Pinned -> Device)``, 16 ``Memcpy HtoD (Pageable ->
    Device)``, 8 ``Memcpy DtoH (Device -> Pageable)`` and 8 DtoD (counted by the stdlib json parser here);
    the loader gives them the export's ids (pinned 1, pageable 0, device 2) and the roster's words."""
    path = kineto / "ws128_sampled_rank0.json.gz"
    with gzip.open(path) as fh:
        doc = json.load(fh)
    names = pd.Series([e["name"] for e in doc["traceEvents"] if e.get("cat") == "gpu_memcpy"]).value_counts().to_dict()
    assert names == {"Memcpy HtoD (Pageable -> Device)": 16, "Memcpy HtoD (Pinned -> Device)": 8,
                     "Memcpy DtoH (Device -> Pageable)": 8, "Memcpy DtoD (Device -> Device)": 8}
    c = load_kineto(str(path)).copies
    memcpy = c[c["kind"] == "memcpy"]
    assert memcpy.groupby(["copy_kind", "src_kind", "dst_kind"]).size().to_dict() == {
        (1, 0, 2): 16, (1, 1, 2): 8, (2, 2, 0): 8, (8, 2, 2): 8}
    words = [x["host_memory"] for x in
             gap_copies(pd.DataFrame({"start": [c["start"].min()], "end": [c["end"].max()]}), memcpy, limit=40)[0]["copies"]]
    assert pd.Series(words, dtype=object).value_counts(dropna=False).to_dict() == {"pageable": 24, "pinned": 8, None: 8}


def test_writer_names_copies_as_kineto_does(tmp_path):
    """KinetoWriter spells a copy's sides by the ids both loaders give (0 pageable, 1 pinned, 2 device):
    the host side is pageable unless told, and what it writes loads back to the same ids."""
    path = str(tmp_path / "w.json")
    w = KinetoWriter(path, pid=1, devices=[(0, "NVIDIA A100-SXM4-80GB", 108)])
    w.runtime(1, 0, 1_000, "cudaLaunchKernel", 1)
    w.kernel(0, 7, 2_000, 3_000, "k", 1)
    w.memcpy(0, 20, 4_000, 5_000, 1, 64, 2)                             # HtoD, default
    w.memcpy(0, 20, 6_000, 7_000, 2, 64, 3)                             # DtoH, default
    w.memcpy(0, 20, 8_000, 9_000, 1, 64, 4, src_kind=1, dst_kind=2)     # HtoD from pinned memory
    w.memcpy(0, 20, 10_000, 11_000, 8, 64, 5)                           # DtoD
    w.close()
    with open(path, encoding="utf-8") as fh:
        names = [e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    assert names == ["Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)",
                     "Memcpy HtoD (Pinned -> Device)", "Memcpy DtoD (Device -> Device)"]
    c = load_kineto(path).copies.sort_values("start")
    assert c[["copy_kind", "src_kind", "dst_kind"]].values.tolist() == [[1, 0, 2], [2, 2, 0], [1, 1, 2], [8, 2, 2]]


ROCM = """{"traceEvents": [
  {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 9, "tid": 9, "ts": 0.000, "dur": 2.000, "args": {"correlation": 1, "stream": "0x0"}},
  {"ph": "X", "cat": "cuda_runtime", "name": "hipDeviceSynchronize", "pid": 9, "tid": 9, "ts": 200.000, "dur": 2800.000, "args": {"correlation": 2}},
  %s
  {"ph": "X", "cat": "cuda_runtime", "name": "hipLaunchKernel", "pid": 9, "tid": 9, "ts": 3060.000, "dur": 2.000, "args": {"correlation": 4}},
  {"ph": "X", "cat": "kernel", "name": "k0", "pid": 2, "tid": 0, "ts": 10.000, "dur": 90.000, "args": {"device": 2, "stream": 0, "correlation": 1}},
  {"ph": "X", "cat": "kernel", "name": "k1", "pid": 2, "tid": 0, "ts": 3100.000, "dur": 100.000, "args": {"device": 2, "stream": 0, "correlation": 4}}
]}"""
LOST = ('{"ph": "X", "cat": "cuda_runtime", "name": "hipExtModuleLaunchKernel", "pid": 9, "tid": 9, "ts": 3050.000, '
        '"dur": 2.000, "args": {"correlation": 3}},')


def test_rocm_hip_sync_is_a_sync_witness(tmp_path):
    """HIP runtime names under cuda_runtime (ROCm traces; ``args.stream`` "0x0" is text): the gap
    [100, 3,100 µs) = 3,000,000 ns on device 2 is covered by hipDeviceSynchronize [200, 3,000 µs),
    2.8 of 3.0 ms >= half: ``sync``, as cudaDeviceSynchronize would make it."""
    report, result = analyse_one(write(tmp_path / "rocm.json", ROCM % ""))
    assert report.devices[["device_id", "gpu_key"]].values.tolist() == [[2, "pid9/dev2"]]
    row = result.row
    assert (row["cat_sync_ns"], row["status"], result.device_roster[0]["category"]) == (3_000_000, "ok", "sync")
    assert result.device_roster[0]["attribution"][0] == {"api": "hipDeviceSynchronize", "overlap_ns": 2_800_000}


def test_rocm_lost_hip_launch_is_untraced(tmp_path):
    """A hipExtModuleLaunchKernel (corr 3) with no kernel, between kernels of corr 1 and 4: a launch
    the trace lost (as a cudaLaunchKernel would be); the gap is untraced and the row partial."""
    report, result = analyse_one(write(tmp_path / "rocm.json", ROCM % LOST))
    assert report.untraced[["name", "correlation_id", "call_start", "end"]].values.tolist() == [
        ["hipExtModuleLaunchKernel", 3, 3_050_000, 3_100_000]]
    row = result.row
    assert (row["cat_untraced_ns"], row["cat_sync_ns"], row["status"]) == (3_000_000, 0, "partial")
    assert "correlationIds 3 (hipExtModuleLaunchKernel)" in row["warnings"]


def test_list_form_duplicates_and_events_without_times(tmp_path):
    """A trace may be a bare list of events; an exact duplicate kernel counts once; an event without
    ``dur`` or with a ``ts`` that is not a number is dropped and said; both make the row partial."""
    ev = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": %s, "dur": %s, "args": {"device": 0, "stream": 7, "correlation": %d}}'
    text = "[" + ",".join([ev % ("0", "10", 1), ev % ("0", "10", 1), ev % ("5000", "10", 2),
                           ev % ("6000", "null", 3), ev % ('"soon"', "10", 4)]) + "]"
    report = load_kineto(write(tmp_path / "list.json.gz", text))
    assert report.kernels[["start", "end"]].values.tolist() == [[0, 10_000], [5_000_000, 5_010_000]]
    texts = {w.code: w.text for w in report.warnings}
    assert texts[WarningCode.DROPPED_KERNEL_ROWS] == "dropped 2 events without a usable ts or dur: 2 kernel events"
    assert texts[WarningCode.DUPLICATE_ROWS] == "dropped 1 exact duplicate row (counted once): 1 of kernel events"
    _, result = analyse_one(str(tmp_path / "list.json.gz"))
    assert result.row["status"] == "partial" and result.row["busy_ns"] == 20_000


def test_writer_styles_round_trip_exactly(tmp_path):
    """What KinetoWriter writes (both styles) loads back to the same ns."""
    for style, base in (("2024", 1_780_000_000_000_000_000), ("2021", None)):
        path = str(tmp_path / f"w{style}.json.gz")
        w = KinetoWriter(path, pid=42, devices=[(1, "NVIDIA H100 80GB HBM3", 132)], rank=1, world_size=2,
                         base_time_ns=base, style=style)
        t0 = 1_780_000_000_123_456_789
        w.runtime(42, t0, t0 + 4_001, "cudaLaunchKernel", 5)
        w.kernel(1, 7, t0 + 10_003, t0 + 2_010_007, "gemm", 5)
        w.annotation(42, t0 - 1, t0 + 3_000_000, "ProfilerStep#0")
        w.close()
        r = load_kineto(path)
        assert r.kernels[["start", "end", "device_id", "stream_id", "pid"]].values.tolist() == [
            [t0 + 10_003, t0 + 2_010_007, 1, 7, 42]]
        assert r.nvtx[["start", "end"]].values.tolist() == [[t0 - 1, t0 + 3_000_000]]
        assert r.devices["gpu_model"].tolist() == (["NVIDIA H100 80GB HBM3"] if style == "2024" else [""])


# -- the command line --------------------------------------------------------------------------

def test_help_texts_name_traces_and_gpu_pages():
    """``--help`` says what the README says: the tool reads PyTorch profiler traces too, ``run`` takes
    their file names, ``report`` writes the GPU pages beside the report, ``synth --example`` writes traces."""
    from click.testing import CliRunner

    from pipeline.cli import main

    def help_of(*command: str) -> str:
        result = CliRunner().invoke(main, [*command, "--help"], terminal_width=100)
        assert result.exit_code == 0, result.output
        return " ".join(result.output.split())

    assert "in Nsight Systems profiles and PyTorch profiler (Kineto) traces" in help_of()
    run = help_of("run")
    assert ".sqlite exports, or PyTorch profiler traces (.json, .json.gz, *.pt.trace.json(.gz))" in run
    assert "the others are skipped, and stderr says which" in run
    assert "(and every trace from its JSON)" in help_of("run")
    report = help_of("report")
    assert "one page per analysed GPU, written beside it in gpu-pages/" in report
    assert "html also writes gpu-pages/ beside it" in report
    synth = help_of("synth")
    assert "--example also writes a job's PyTorch profiler (Kineto) traces, one per rank" in synth
    assert "vit-train-pytorch/rank{0,1}.pt.trace.json.gz" in synth.replace("vit- train", "vit-train")
    # the README says the same
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    assert "NVIDIA Nsight Systems profiles and PyTorch profiler (Kineto) traces" in readme
    assert "PyTorch profiler traces (`.json`, `.json.gz`, `*.pt.trace.json(.gz)`" in readme
    assert "`vit-train-pytorch/rank{0,1}.pt.trace.json.gz`" in readme and "`gpu-pages/" in readme


# -- discovery and the cache -------------------------------------------------------------------

def test_folders_find_traces_beside_exports_but_not_other_json(tmp_path, profiles):
    folder = tmp_path / "mixed"
    (folder / "job").mkdir(parents=True)
    os.symlink(profiles / "tiny_2kernels.sqlite", folder / "tiny.sqlite")
    write(folder / "job" / "rank0.pt.trace.json.gz", TRACE)
    write(folder / "job" / "rank1.json", TRACE)                       # sniffed: a trace
    write(folder / "plain.json.gz", TRACE)
    write(folder / "job" / "rank0.pt.trace.json.gz.truth.json", '{"format": "truth", "gpus": []}')
    write(folder / "settings.json", '{"x": 1}')
    (folder / "broken.json.gz").write_bytes(b"\x1f\x8b\x08\x00garbage")  # damaged gzip: a report with an error row
    (folder / "job" / "crashed.json").write_bytes(b"")                   # a profiler that died: 0 bytes
    (folder / "job" / "gone.json.gz").write_bytes(b"")
    write(folder / "job" / "rank1.json.truth.json", '{\n "format": "gpu-idle synth truth v1",\n "gpus": []\n}')
    skipped = []
    found, problems = discover([str(folder), str(folder / "job")], skipped=skipped)   # job/ reached twice
    assert [os.path.relpath(p, folder) for p in found] == [
        "broken.json.gz", "job/rank0.pt.trace.json.gz", "job/rank1.json", "plain.json.gz", "tiny.sqlite"]
    assert problems == []
    assert load_config([]).labels_for(str(folder / "job" / "rank0.pt.trace.json.gz"))["job"] == "rank0"
    # what the search passed over, each once, sorted: empty files, JSON that is not a trace, gpu-idle's truth
    assert [(os.path.relpath(p, folder), why) for p, why in skipped] == [
        ("job/crashed.json", "empty"), ("job/gone.json.gz", "empty"),
        ("job/rank0.pt.trace.json.gz.truth.json", "not a trace"), ("job/rank1.json.truth.json", "gpu-idle truth"),
        ("settings.json", "not a trace")]
    assert discover([str(folder)])[0] == found          # without the list: the same reports


def test_skipped_json_is_said_on_stderr_but_not_gpu_idles_truth_files(tmp_path):
    """A folder's empty or non-trace .json files are named on stderr (5 at most, the rest counted); the
    truth files gpu-idle writes beside its generated traces are not reports and not mentioned."""
    folder = tmp_path / "in"
    synth.generate_training_traces(str(folder / "job"), gpus=1, iterations=4, seed=3)   # rank0 + its truth
    run = run_cli("run", str(folder), "--out", str(tmp_path / "quiet"), "--no-cache")
    assert "not PyTorch profiler traces" not in run.stderr + run.stdout
    (folder / "a-crashed.json").write_bytes(b"")
    for name in ("b.json", "c.json", "d.json", "e.json", "f.json", "g.json.gz"):
        write(folder / name, '{"x": 1}')
    run = run_cli("run", str(folder), "--out", str(tmp_path / "noisy"), "--no-cache")
    f = str(folder)
    assert f"gpu-idle: skipped 7 .json file(s) that are not PyTorch profiler traces: {f}/a-crashed.json (empty), " \
           f"{f}/b.json, {f}/c.json, {f}/d.json, {f}/e.json and 2 more\n" in run.stderr
    assert "1 GPU(s) in the fleet table, 0 report(s) failed" in run.stdout


def test_columnar_cache_serves_the_same_report(tmp_path):
    path = write(tmp_path / "t.json.gz", TRACE)
    first = cache.load_cached(path, tmp_path / "cache")
    (entry,) = list((tmp_path / "cache").iterdir())
    assert entry.name == f"{cache.snapshot_key(path)}-kineto-code{cache.loader_code()[:cache.NAME_DIGEST]}"
    second = cache.load_cached(path, tmp_path / "cache")
    for name in cache.FRAMES:
        pd.testing.assert_frame_equal(getattr(first, name).reset_index(drop=True),
                                      getattr(second, name).reset_index(drop=True), check_categorical=False)
    assert (first.meta, first.warnings) == (second.meta, second.warnings)


def test_gzip_text_is_every_member_inflated_into_one_buffer(tmp_path):
    """The loader sizes its buffer from the gzip trailer (``pipeline.inputs.gzip_size``, shared with the
    memory check) and still reads every member: several small ones (seen in the head: the buffer starts
    at the file's size and grows), a first member too long to look past (the buffer starts at the last
    member's size and grows), zero padding after the last member; the same report as one member."""
    import random

    from pipeline.load.kineto import read_text

    text = TRACE.encode()
    noise = random.Random(0).randbytes(200_000)  # incompressible: a first member of 200 KB compressed
    cases = {"one": [text], "three": [text[:100], text[100:-50], text[-50:]], "long": [noise, text],
             "padded": [text]}
    for name, members in cases.items():
        data = b"".join(gzip.compress(m, mtime=0) for m in members) + (bytes(512) if name == "padded" else b"")
        (tmp_path / f"{name}.json.gz").write_bytes(data)
        assert bytes(read_text(str(tmp_path / f"{name}.json.gz"))) == b"".join(members), name
    one, three = load_kineto(str(tmp_path / "one.json.gz")), load_kineto(str(tmp_path / "three.json.gz"))
    pd.testing.assert_frame_equal(one.kernels, three.kernels)


# -- broken input ------------------------------------------------------------------------------

KERNEL_EVENT = (b'{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, '
                b'"args": {"device": 0, "stream": 7}}')


@pytest.mark.slow
def test_broken_traces_are_error_rows_naming_file_and_cause(tmp_path, kineto):
    real = (kineto / "ws128_sampled_rank0.json.gz").read_bytes()
    bad = tmp_path / "bad"
    bad.mkdir()
    cases = {
        "truncated.json.gz": real[: len(real) // 2],
        "damaged.json.gz": real[:20] + bytes(64) + real[84:],
        "empty.json": b"",
        "notjson.json": b"SQLite format 3\x00" + bytes(100),
        "cut.json": TRACE[: len(TRACE) // 2].encode(),
        "object.json": b'{"schemaVersion": 1, "runs": []}',
        "scalar.json": b'"hello"',
        "cpu_only.json": b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, '
                         b'"ts": 1.0, "dur": 2.0}]}',
        "copies_only.json": b'{"traceEvents": [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)",'
                            b' "pid": 0, "tid": 7, "ts": 1.0, "dur": 2.0, "args": {"device": 0, "stream": 7}}]}',
        # JSON, but not a trace: a list of numbers, of strings, of objects that are not events; a trace
        # with a stray number; one whose 2,051st item (in the second batch of 2,048) is null
        "numbers.json": b"[1, 2, 3]",
        "strings.json.gz": gzip.compress(b'["a", "b"]', mtime=0),
        "objects.json": b'[{"a": 1}, {"b": 2}]',
        "stray.json": b'{"traceEvents": [' + KERNEL_EVENT + b', 7]}',
        "late.json": b'{"traceEvents": [' + b", ".join([KERNEL_EVENT] * 2_050) + b", null]}",
    }
    for name, data in cases.items():
        (bad / name).write_bytes(data)
    out = tmp_path / "out"
    proc = run_cli("run", *[str(bad / n) for n in cases], str(kineto / "mi250_rocm_minitoy.json.gz"),
                   "--out", str(out), check=False)
    # (several reports: a LocalCluster ran them) bad input is a row, never an exception a worker logs or
    # Dask retries
    assert proc.returncode == 1 and "Traceback" not in proc.stderr and "Compute Failed" not in proc.stderr
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    assert fleet.loc[str(kineto / "mi250_rocm_minitoy.json.gz"), "status"] == "ok"
    error = {name: fleet.loc[str(bad / name), "error"] for name in cases}
    p = {name: str(bad / name) for name in cases}
    assert error["truncated.json.gz"].startswith(f"{p['truncated.json.gz']}: truncated gzip file: the compressed "
                                                 "stream ends before its end marker (")
    assert error["damaged.json.gz"].startswith(f"{p['damaged.json.gz']}: damaged gzip data after ")
    assert error["empty.json"] == f"{p['empty.json']}: empty file (0 bytes), not a PyTorch profiler trace"
    assert error["notjson.json"] == (f"{p['notjson.json']}: not valid JSON (JSON is malformed: invalid character "
                                     "(byte 0)): not a readable PyTorch profiler trace")
    assert error["cut.json"] == (f"{p['cut.json']}: truncated JSON (the file ends inside the trace): not a readable "
                                 "PyTorch profiler trace")
    assert error["object.json"] == (f"{p['object.json']}: not a PyTorch profiler trace: the JSON object has no "
                                    "traceEvents list")
    assert error["scalar.json"].startswith(f"{p['scalar.json']}: not a PyTorch profiler trace: the JSON is not an "
                                           "object with traceEvents nor a list of events (")
    assert error["cpu_only.json"].startswith(f"{p['cpu_only.json']}: no GPU events in this trace (1 complete events, "
                                             "none of category kernel, gpu_memcpy or gpu_memset)")
    assert error["copies_only.json"] == (f"{p['copies_only.json']}: no kernel events in this trace, but 1 gpu_memcpy "
                                         "event on 1 device (0), and no kernel ran while the profiler recorded: there "
                                         "is no kernel to measure idle time between")
    assert error["numbers.json"] == (f"{p['numbers.json']}: not a PyTorch profiler trace: item 0 of the JSON list "
                                     "is a number (1), not an event object")
    assert error["strings.json.gz"] == (f"{p['strings.json.gz']}: not a PyTorch profiler trace: item 0 of the JSON "
                                        'list is a string ("a"), not an event object')
    assert error["objects.json"] == (f"{p['objects.json']}: not a PyTorch profiler trace: none of the 2 objects of "
                                     'the JSON list is a trace event (none has a "ph")')
    assert error["stray.json"] == (f"{p['stray.json']}: not a PyTorch profiler trace: item 1 of traceEvents is a "
                                   "number (7), not an event object")
    assert error["late.json"] == (f"{p['late.json']}: not a PyTorch profiler trace: item 2,050 of traceEvents is "
                                  "null, not an event object")
    assert set(fleet["status"]) == {"ok", "error"} and (fleet["status"] == "error").sum() == len(cases)


def test_loader_errors_direct(tmp_path):
    with pytest.raises(ProfileError, match=r": cannot read: no such file or directory$"):
        load_kineto(str(tmp_path / "missing.json"))
    big = write(tmp_path / "big.json", '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, '
                                       '"ts": 1e20, "dur": 1}]}')
    with pytest.raises(ProfileError, match="does not fit in 64-bit nanoseconds"):
        load_kineto(big)


def test_fsspec_urls_are_discovered_staged_and_loaded(tmp_path):
    """Any fsspec URL (here fsspec's in-memory filesystem): a prefix lists the traces (a non-trace JSON
    beside them is left out), and a trace is staged with its suffix kept and loaded like a local one."""
    import fsspec

    from pipeline.config import CacheConfig, ExportConfig, StorageConfig
    from pipeline.work.tasks import load_report_for

    fs = fsspec.filesystem("memory")
    fs.pipe("/kineto15/job/rank0.pt.trace.json.gz", gzip.compress(TRACE.encode(), mtime=0))
    fs.pipe("/kineto15/job/plain.json", TRACE.encode())
    fs.pipe("/kineto15/job/notes.json", b'{"x": 1}')
    try:
        skipped = []
        found, problems = discover(["memory://kineto15"], skipped=skipped)
        # (fsspec renders in-memory paths with a leading slash)
        assert found == ["memory:///kineto15/job/plain.json", "memory:///kineto15/job/rank0.pt.trace.json.gz"]
        assert problems == [] and skipped == [("memory:///kineto15/job/notes.json", "not a trace")]
        url = found[1]
        report = load_report_for(url, ExportConfig(), CacheConfig(dir=str(tmp_path / "columns")),
                                 StorageConfig(cache_dir=str(tmp_path / "staged")))
        assert report.path == url and report.kernels["start"].min() == BASE
        assert [p.name[-len(".json.gz"):] for p in (tmp_path / "staged").iterdir()
                if not p.name.endswith(".sums.json")] == [".json.gz"]  # (beside it: its checksum)
    finally:
        fs.rm("/kineto15", recursive=True)
