"""Issue 13: causes named as the field names them (docs/definitions.md#categories: data, comm, sync, boundary,
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


def test_sync_gap_says_what_it_waited_for(tmp_path):
    # one stream: gemm_a [0,2) gap [2,12) gemm_b [12,13) gap [13,23) gemm_c [23,24) gap [24,34)
    # gemm_d [34,35) gap [35,45) gemm_e [45,46) ms; every gap is sync (the copies cover <= 1/10):
    #  [2,12):  cudaStreamSynchronize [1,11) (9/10) called while gemm_a ran -> waited on gemm_a (ends 2 ms)
    #  [13,23): blocking cudaMemcpy [14,20) (6/10); a 4 B device-to-host copy into pageable memory
    #           runs [14.5,15) inside it -> waited on that copy
    #  [24,34): cudaStreamSynchronize [25,31) (6/10); a 1 MiB pinned host-to-device copy [26,27)
    #  [35,45): cudaDeviceSynchronize [36,42) (6/10) called when the GPU was already idle and no
    #           copy in flight -> the export shows nothing it waited for (None)
    # Memory kinds as Nsight Systems numbers them (ENUM_CUDA_MEM_KIND): 0 pageable, 1 pinned, 2 device.
    w = ExportWriter(str(tmp_path / "syncs.sqlite"))
    for name, (s, e) in zip("abcde", [(0, 2), (12, 13), (23, 24), (34, 35), (45, 46)]):
        w.kernel(pid=10, device=0, stream=7, start=s * MS, end=e * MS, name=f"gemm_{name}")
    w.runtime(10, 11, 1 * MS, 11 * MS, "cudaStreamSynchronize_v3020")
    w.runtime(10, 11, 14 * MS, 20 * MS, "cudaMemcpy_v3020")
    w.memcpy(10, 0, 8, 14 * MS + MS // 2, 15 * MS, copy_kind=2, nbytes=4, src_kind=2, dst_kind=0)
    w.runtime(10, 11, 25 * MS, 31 * MS, "cudaStreamSynchronize_v3020")
    w.memcpy(10, 0, 8, 26 * MS, 27 * MS, copy_kind=1, nbytes=1 << 20, src_kind=1, dst_kind=2)
    w.runtime(10, 11, 36 * MS, 42 * MS, "cudaDeviceSynchronize_v3020")
    w.close()
    rep = load_report(w.path)
    res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {})
    assert res.row["cat_sync_ns"] == 40 * MS
    want = {
        2 * MS: {"what": "kernel", "name": "gemm_a", "end_ns": 2 * MS},
        13 * MS: {"what": "memcpy", "direction": "DtoH", "bytes": 4, "host_memory": "pageable",
                  "start_ns": 14 * MS + MS // 2, "end_ns": 15 * MS},
        24 * MS: {"what": "memcpy", "direction": "HtoD", "bytes": 1 << 20, "host_memory": "pinned",
                  "start_ns": 26 * MS, "end_ns": 27 * MS},
        35 * MS: None,
    }
    for roster in (res.roster, res.device_roster):
        assert {g["start_ns"]: g["category"] for g in roster} == dict.fromkeys(want, "sync")
        assert {g["start_ns"]: g["sync_waited_for"] for g in roster} == want


def test_a_sync_gap_did_not_wait_for_a_copy_that_started_after_it(tmp_path):
    # Two exports of one shape (as in a real PyTorch trace: a cudaDeviceSynchronize of 158 ms over
    # several gaps): gemm_a [0,2) gap [2,12) gemm_b [12,30) ms on stream 7; the call [1,25) covers the
    # whole gap (sync). A 2 MiB device-to-device copy [20,21) runs after the gap, while gemm_b runs:
    #  - alone, it is not what the gap waited for: the call began while gemm_a ran -> gemm_a;
    #  - with a 4 KiB copy [5,6) inside the gap too, that one (in flight during call and gap).
    # Before: the copy that ended last during the whole call, [20,21), in both.
    for inside, want in ((False, {"what": "kernel", "name": "gemm_a", "end_ns": 2 * MS}),
                         (True, {"what": "memcpy", "direction": "DtoD", "bytes": 4096, "host_memory": None,
                                 "start_ns": 5 * MS, "end_ns": 6 * MS})):
        w = ExportWriter(str(tmp_path / f"long_sync_{inside}.sqlite"))
        w.kernel(pid=10, device=0, stream=7, start=0, end=2 * MS, name="gemm_a")
        w.kernel(pid=10, device=0, stream=7, start=12 * MS, end=30 * MS, name="gemm_b")
        w.runtime(10, 11, 1 * MS, 25 * MS, "cudaDeviceSynchronize_v3020")
        w.memcpy(10, 0, 8, 20 * MS, 21 * MS, copy_kind=8, nbytes=2 << 20, src_kind=2, dst_kind=2)
        if inside:
            w.memcpy(10, 0, 8, 5 * MS, 6 * MS, copy_kind=8, nbytes=4096, src_kind=2, dst_kind=2)
        w.close()
        rep = load_report(w.path)
        res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {})
        for roster in (res.roster, res.device_roster):
            assert [(g["start_ns"], g["category"], g["sync_waited_for"]) for g in roster] == [(2 * MS, "sync", want)]


def test_only_sync_gaps_say_what_they_waited_for(tmp_path):
    # gemm [0,1) gap [1,11) gemm [11,12): no call at all -> cpu, and no sync_waited_for
    w = ExportWriter(str(tmp_path / "cpu.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="gemm")
    w.kernel(pid=10, device=0, stream=7, start=11 * MS, end=12 * MS, name="gemm")
    w.close()
    rep = load_report(w.path)
    res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {})
    assert [(g["category"], g["sync_waited_for"]) for g in res.roster] == [("cpu", None)]
