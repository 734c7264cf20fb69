"""Issue 13: causes named as the field names them (SPEC "Category": data, comm, sync, boundary,
periodic, launch, cpu; profiler/untraced before them) and collectives that are not NCCL.

Expected values are worked out by hand in the comments.
"""
from __future__ import annotations

import pytest

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import load_config
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import CATEGORIES, GAP_CATEGORIES
from pipeline.synth import ExportWriter

MS = 1_000_000
SPAN = load_config([], {"analysis": {"window": "span"}})


def one_stream(tmp_path, names: list[str]) -> dict:
    """Kernels of 1 ms on one stream: ``gemm`` at [12 i, 12 i + 1) ms and ``names[i]`` at
    [12 i + 1, 12 i + 2) ms, then a 10 ms gap; a last ``gemm`` after the last gap. No CPU
    calls at all. Returns the span-window fleet row and the device-level gaps' categories."""
    w = ExportWriter(str(tmp_path / "collectives.sqlite"))
    for i, name in enumerate(names):
        w.kernel(pid=10, device=0, stream=7, start=12 * i * MS, end=(12 * i + 1) * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=7, start=(12 * i + 1) * MS, end=(12 * i + 2) * MS, name=name)
    last = 12 * len(names) * MS
    w.kernel(pid=10, device=0, stream=7, start=last, end=last + MS, name="gemm")
    w.close()
    rep = load_report(w.path)
    res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {})
    return res.row, [g[2] for g in res.timeline["gaps"]]


def test_order_constants():
    assert GAP_CATEGORIES == ("data", "comm", "sync", "boundary", "periodic", "cpu")
    assert CATEGORIES == ("data", "comm", "sync", "boundary", "periodic", "launch", "cpu")


def test_custom_all_reduce_is_comm(tmp_path):
    # gemm [0,1] AR [1,2] gap [2,12]; gemm [12,13] AR [13,14] gap [14,24]; gemm [24,25] nccl [25,26]
    # gap [26,36]; gemm [36,37]. Window [0, 37) ms, three 10 ms gaps, each after a collective -> comm 30 ms.
    row, cats = one_stream(tmp_path, ["void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)",
                                      "void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(...)",
                                      "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"])
    assert (row["window_ns"], row["idle_ns"], row["device_gap_count"]) == (37 * MS, 30 * MS, 3)
    assert cats == ["comm", "comm", "comm"]
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (30 * MS, 0)
    assert row["main_category"] == "comm"


def test_other_collective_spellings_and_plain_reductions(tmp_path):
    # eight 10 ms gaps; the first five follow an engine's own collective (comm), the last three a
    # plain reduction kernel that merely contains 'reduce' (not a collective: CPU quiet -> cpu).
    names = ["custom_all_reduce_kernel", "sglang::allgather_kernel", "reduce_scatter_kernel<float>",
             "trtllm::all_gather_into_tensor", "tensorrt_llm::kernels::oneShotAllReduceKernel<half>",
             "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(...)",
             "cub::DeviceReduceKernel<float>", "small_reduce_kernel"]
    row, cats = one_stream(tmp_path, names)
    assert (row["window_ns"], row["device_gap_count"]) == ((12 * 8 + 1) * MS, 8)
    assert cats == ["comm"] * 5 + ["cpu"] * 3
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (50 * MS, 30 * MS)


@pytest.fixture(scope="module")
def fastvideo(profiles):
    return load_report(str(profiles / "fastvideo_h100_sp2_1s.sqlite"))


# Every one of the 56 device-level gaps of each fastvideo GPU is >= 99 % covered by H2D copies
# (copy-only idle 931.6 ms of 938.1 ms): data comes first, so every gap is data and none is sync;
# data = the GPU's device-level gap total at the 1 ms threshold (= its per-stream gap total, one
# stream: 935,432,085 ns for pid 111, 935,250,727 ns for pid 112).
@pytest.mark.parametrize("pid, data_ns", [(111, 935_432_085), (112, 935_250_727)])
def test_fastvideo_h2d_gaps_are_data_not_sync(fastvideo, pid, data_ns):
    key = fastvideo.devices.loc[fastvideo.devices["pid"] == pid, "gpu_key"].iloc[0]
    row = analyse_gpu(gpu_trace(fastvideo, key), SPAN, {}).row
    assert (row["device_gap_count"], row["device_gap_ns"]) == (56, data_ns)
    assert (row["cat_data_ns"], row["cat_sync_ns"], row["cat_comm_ns"], row["cat_cpu_ns"]) == (data_ns, 0, 0, 0)
    assert row["main_category"] == "data"


@pytest.mark.parametrize("pid", [111, 112])
def test_fastvideo_headline_cause_does_not_flip_with_window_rule(fastvideo, pid):
    key = fastvideo.devices.loc[fastvideo.devices["pid"] == pid, "gpu_key"].iloc[0]
    auto = load_config([], {"analysis": {"window": "auto"}})
    span_row = analyse_gpu(gpu_trace(fastvideo, key), SPAN, {}).row
    auto_row = analyse_gpu(gpu_trace(fastvideo, key), auto, {}).row
    assert span_row["window_rule"] == "span" and auto_row["window_rule"] != "span"
    assert (span_row["main_category"], auto_row["main_category"]) == ("data", "data")
