"""Issue 24, kinds 2 and 5: shapes public PyTorch profiler traces and Nsight exports have.

Kind 2: a collective is a kernel the communication libraries name (NCCL/RCCL ``ncclKernel_…``,
``ncclDevKernel_…``, NVSHMEM, DeepEP, custom all-reduce kernels); never a compute kernel whose name
holds an operator word (``broadcast``, ``reduce``, ``gather``, ``scatter``: elementwise, cub, CUTLASS,
Triton names); a trace that says it ran on one rank has none (a PyTorch trace's
``distributedInfo.world_size`` 1; an Nsight capture whose launch says one rank: ``WORLD_SIZE=1`` in
the process environment, ``torchrun --nproc_per_node=1``).

Kind 5: a ROCm trace numbers its devices by the node's GPUs (kernels on device 2 or 9) while
``deviceProperties`` may list only id 0: when every entry names one model, that is the model; when
the entries name different models, the model stays blank and a coded warning says so.

Every expected value is worked out by hand in the comments (ms on the trace's clock).
"""
from __future__ import annotations

import gzip
import json
import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import KINETO, PROFILES, run_cli, without_model_warning

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.attribution import collective_mask, one_rank_warning
from pipeline.config import CategoryRules, load_config
from pipeline.load.cache import load_cached, wait_for_writes
from pipeline.load.kineto import load_kineto
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import WarningCode
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter

MS = 1_000_000
SPAN = load_config([], {"analysis": {"window": "span"}})
RULES = CategoryRules()
MI250_REAL = str(KINETO / "mi250_rocm_minitoy.json.gz")

#: Compute kernels whose names hold a collective's or an operator's word (real forms: PyTorch's
#: elementwise launchers on ROCm and CUDA, ATen reductions, cub, CUTLASS, Inductor/Triton).
COMPUTE = [
    "void at::native::elementwise_kernel_manual_unroll<128, 8, at::native::type_specialized_broadcast_kernel_launcher"
    "<0>::apply<at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::broadcast_op>(...)>(int)",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, "
    "float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>, "
    "unsigned int, float, 4>)",
    "void cub::DeviceReduceKernel<cub::DeviceReducePolicy<float, int, cub::Sum>::Policy600, float*, float*, int, "
    "cub::Sum>(float*, float*, int, cub::GridEvenShare<int>, cub::Sum)",
    "void at::native::_scatter_gather_elementwise_kernel<128, 8, at::native::_cuda_scatter_gather_internal_kernel"
    "<true, float>::operator()(at::TensorIterator&, long, long, long, at::native::ReduceAdd const&)::{lambda(int)#1}>"
    "(int, ...)",
    "void cutlass::Kernel<cutlass::gemm::kernel::GemmUniversal<cutlass::gemm::GemmShape<128, 128, 32>, "
    "cutlass::transform::threadblock::PredicatedTileAccessIteratorGather, cutlass::reduction::ReduceScatterEpilogue>>"
    "(cutlass::gemm::kernel::Params)",
    "triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_0",
    "triton_poi_fused_all_reduce_0",
    "void at::native::index_put_kernel_impl<at::native::OpaqueType<4> >(at::TensorIterator&, c10::ArrayRef<long>)",
    "smallreduce_splitk_kernel",
]

#: Collectives, as the communication libraries and custom all-reduce kernels name them.
COLLECTIVES = [
    "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)",                        # NCCL 2.8-2.18
    "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)",  # NCCL >= 2.19
    "ncclKernel_Broadcast_RING_LL_Sum_int8_t(ncclWorkElem)",                       # a broadcast by NCCL is one
    "ncclAllReduceRingLLKernel_sum_f32(CollectiveArgs)",                           # NCCL 2.3-2.7
    "ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)",                # RCCL under ROCm 6
    "void rcclKernel<256u>(WorkInfo*)",                                             # early RCCL
    "void RcclKernelScalarAllGather<float>(DeviceControl_t*, void*, void*, int)",
    "mscclKernel_Sum_hip_bfloat16_Simple_false",                                    # RCCL's MSCCL (ROCm)
    "void aiter::cross_device_reduce_2stage<__hip_bfloat16, 8, false>(...)",       # AMD aiter (ROCm)
    "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
    "__nv_bfloat16*, int, int)",
    "void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP, false>(...)",  # vLLM quick reduce (ROCm)
    "void tensorrt_llm::kernels::oneShotAllReduceKernel<__nv_bfloat16, 8, false>(AllReduceParams)",
    "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8>(...)",
    "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 4, 16>(...)",
    "void c10d::symmetric_memory::one_shot_all_reduce_kernel<float, 8>(...)",
    "void deep_ep::intranode::dispatch<8, 768, 8192>(int4*, float*, ...)",
    "void nvshmemi_transfer_rma_nbi<float>(...)",
    "userbuffers_fp16_sum_inplace_gpu_rr_rs(int, int, int, void**)",
]


def _kineto(path, names, *, devices=((0, "AMD Instinct MI300X", 304),), device=0, rank=None, world_size=None):
    """A one-stream trace: kernel i of ``names`` runs [3i, 3i+1) ms on ``device``'s stream 0, launched
    by a hipLaunchKernel call of pid 9 at 3i - 0.1 ms (so every gap [3i+1, 3i+3) is 2 ms, and nothing
    on the CPU side explains it: ``cpu`` unless the kernel before it is a collective)."""
    w = KinetoWriter(str(path), pid=9, devices=list(devices), rank=rank, world_size=world_size,
                     base_time_ns=1_700_000_000_000_000_000)
    base = 1_700_000_000_000_000_000 + 10 * MS
    for i, name in enumerate(names):
        w.runtime(9, base + 3 * i * MS - MS // 10, base + 3 * i * MS - MS // 20, "hipLaunchKernel", i + 1)
        w.kernel(device, 0, base + 3 * i * MS, base + (3 * i + 1) * MS, name, i + 1)
    return w.close()


def _rows(path) -> dict:
    rep = load_kineto(str(path))
    return {key: analyse_gpu(gpu_trace(rep, key), SPAN, {}).row for key in rep.gpu_keys()}


def _only(rows: dict) -> dict:
    assert len(rows) == 1
    return next(iter(rows.values()))


# ---------------------------------------------------------------- kind 2: the matcher


def test_compute_kernels_with_operator_words_are_not_collectives():
    # main matched the two broadcast launchers (`broadcast`) and Inductor's triton_poi_fused_all_reduce_0
    # (`(?<![a-z])all_reduce`); none of these is a collective
    assert collective_mask(COMPUTE, RULES).tolist() == [False] * len(COMPUTE)


def test_communication_libraries_kernels_are_collectives():
    # main missed RCCL's own rcclKernel / RcclKernelScalar… / mscclKernel_…, DeepEP, NVSHMEM and userbuffers kernels
    assert collective_mask(COLLECTIVES, RULES).tolist() == [True] * len(COLLECTIVES)


def test_a_trace_of_one_rank_has_no_collectives():
    assert collective_mask(COLLECTIVES, RULES, world_size=1).tolist() == [False] * len(COLLECTIVES)
    assert collective_mask(COLLECTIVES, RULES, world_size=2).tolist() == [True] * len(COLLECTIVES)


def test_default_yaml_spells_the_same_patterns():
    # one definition: configs/default.yaml holds the built-in patterns, and a config that names only
    # collective_kernel keeps the compute veto
    cfg = load_config([], {"categories": {"collective_kernel": RULES.collective_kernel + "|my_custom_ar"}})
    assert cfg.categories.compute_kernel == RULES.compute_kernel
    assert collective_mask(["my_custom_ar_kernel", "triton_poi_fused_my_custom_ar_0"], cfg.categories).tolist() \
        == [True, False]


# ---------------------------------------------------------------- kind 2: whole traces


def test_single_gpu_rocm_trace_with_broadcast_kernels_has_no_communication(tmp_path):
    # A single-GPU ROCm trace (no distributedInfo): 11 kernels, a gemm then the 10 compute kernels of
    # COMPUTE, each 1 ms, 2 ms apart: W = [10, 10 + 3*10 + 1) ms = 31 ms; busy 11 ms; 10 gaps of 2 ms,
    # all `cpu` (20 ms). No collective: comm_ns 0, cat_comm_ns 0.
    # main: the gaps after the two broadcast launchers and triton_poi_fused_all_reduce_0 were `comm`
    # (6 ms), and those 3 ms of kernels "exposed communication", priced.
    names = ["Cijk_Alik_Bljk_SB_MT64x16x32_MI16x16x1"] + COMPUTE
    row = _only(_rows(_kineto(tmp_path / "rocm.json", names)))
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (31 * MS, 11 * MS, 20 * MS)
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (0, 20 * MS)
    assert (row["comm_ns"], row["comm_exposed_ns"], row["comm_exposed_usd_per_month"]) == (0, 0, 0.0)
    assert row["main_category"] == "cpu" and row["status"] == "ok"


@pytest.mark.parametrize("world_size, comm_ns, cat_comm_ns", [(1, 0, 0), (2, 2 * MS, 4 * MS), (None, 2 * MS, 4 * MS)])
def test_distributed_info_of_one_rank_means_no_collectives(tmp_path, world_size, comm_ns, cat_comm_ns):
    # gemm [10,11), ncclDevKernel_Generic [13,14), gemm [16,17), ncclKernel_AllReduce [19,20), gemm [22,23) ms:
    # W = 13 ms, busy 5 ms, 4 gaps of 2 ms. Two ranks (or no distributedInfo): the gaps after the two
    # collectives are `comm` (4 ms), the other two `cpu` (4 ms); comm 2 ms, all exposed (one stream).
    # One rank (world_size 1): no peer to wait for: nothing is `comm` (8 ms `cpu`), comm 0.
    names = ["gemm", COLLECTIVES[4], "gemm", COLLECTIVES[0], "gemm"]
    rank = None if world_size is None else 0
    row = _only(_rows(_kineto(tmp_path / "r.json", names, rank=rank, world_size=world_size)))
    assert (row["window_ns"], row["idle_ns"]) == (13 * MS, 8 * MS)
    assert (row["comm_ns"], row["comm_exposed_ns"]) == (comm_ns, comm_ns)
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (cat_comm_ns, 8 * MS - cat_comm_ns)


def test_nsight_export_broadcast_kernels_through_the_cli(tmp_path):
    # An Nsight export, one GPU, stream 7, run by `gpu-idle run --window span` (a real process):
    #   elementwise broadcast [0,1), gap [1,3); cub::DeviceReduceKernel [3,4), gap [4,6);
    #   ncclKernel_Broadcast (NCCL's: a collective) [6,7), gap [7,9); gemm [9,10) ms.
    # W = 10 ms, busy 4 ms, idle 6 ms: `comm` 2 ms (after the NCCL broadcast), `cpu` 4 ms;
    # comm 1 ms, exposed 1 ms (priced 1/10 x $4.00 x 730 h = $292.00).
    # main: the elementwise broadcast was a collective too: comm 4 ms, comm_ns 2 ms, $584.00.
    w = ExportWriter(str(tmp_path / "n.sqlite"))
    for i, name in enumerate([COMPUTE[1], COMPUTE[3], COLLECTIVES[2], "gemm"]):
        w.kernel(pid=10, device=0, stream=7, start=3 * i * MS, end=(3 * i + 1) * MS, name=name)
    w.close()
    out = tmp_path / "out"
    run_cli("run", str(tmp_path / "n.sqlite"), "--out", str(out), "--window", "span", "--no-cache")
    row = pd.read_csv(out / "fleet.csv").iloc[0]
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (10 * MS, 4 * MS, 6 * MS)
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (2 * MS, 4 * MS)
    assert (row["comm_ns"], row["comm_exposed_ns"], row["comm_exposed_usd_per_month"]) == (MS, MS, 292.0)


# ---------------------------------------------------------------- kind 5: device ids vs deviceProperties


@pytest.mark.parametrize("device", [2, 9])
def test_one_device_entry_names_the_model_of_every_device(tmp_path, device):
    # deviceProperties: one entry, id 0, AMD Instinct MI300X (304 CUs); the kernels run on device 2 (or 9).
    # The trace names one model: that is the model, with its 304 SMs; no warning about it (the model
    # is not on the default card: that warning, as for any such model). main: model blank, silently.
    path = _kineto(tmp_path / "t.json", ["gemm", "gemm"], device=device)
    rep = load_kineto(path)
    assert rep.devices[["device_id", "gpu_model", "sms", "model_note"]].values.tolist() \
        == [[device, "AMD Instinct MI300X", 304, ""]]
    row = _only(_rows(path))
    assert row["gpu_model"] == "AMD Instinct MI300X"
    # since issue 26 the default card has an MI300X entry: priced at it, so no rate warning either
    assert (row["rate_model"], row["rate_usd_per_hour"], row["rate_assumed"], row["warnings"]) == (
        "MI300X", 1.85, False, "")


def test_entries_of_one_model_name_an_unlisted_device(tmp_path):
    # four entries (ids 0-3) all "AMD Instinct MI250X" (110 CUs), kernels on device 9: the model is MI250X
    mi250 = [(i, "AMD Instinct MI250X", 110) for i in range(4)]
    rep = load_kineto(_kineto(tmp_path / "t.json", ["gemm"], devices=mi250, device=9))
    assert rep.devices[["device_id", "gpu_model", "sms"]].values.tolist() == [[9, "AMD Instinct MI250X", 110]]
    assert rep.warnings == []


def test_entries_of_different_models_leave_the_model_blank_and_say_so(tmp_path):
    # ids 0 (MI300X) and 1 (MI250X), kernels on device 9: which of the two it is cannot be told. The model
    # stays blank and a gpu-model-unresolved warning names both; the trace's runtime calls are HIP (a ROCm GPU, not
    # an NVIDIA one), so it is unpriced, not priced as the default model H100 (issue 41). main: blank model, no warning.
    two = [(0, "AMD Instinct MI300X", 304), (1, "AMD Instinct MI250X", 110)]
    path = _kineto(tmp_path / "t.json", ["gemm", "gemm"], devices=two, device=9)
    rep = load_kineto(path)
    assert rep.devices[["device_id", "gpu_model"]].values.tolist() == [[9, ""]]
    note = ("the trace's deviceProperties do not list device 9 (ids [0, 1]) and name 2 different models "
            "('AMD Instinct MI250X', 'AMD Instinct MI300X')")
    assert [(w.code, w.text) for w in rep.warnings] == [
        (WarningCode.GPU_MODEL_UNRESOLVED, f"GPU model unknown for device 9: {note}; the trace's runtime calls are "
                                           "HIP (hipLaunchKernel): a ROCm GPU, not an NVIDIA GPU: left unpriced "
                                           "(cost.unlisted: unpriced; `default` prices it as the default model); a "
                                           "gpu_model label for this report names it")]
    row = _only(_rows(path))
    assert (row["gpu_model"], row["rate_model"], row["unpriced"], row["status"]) == ("", "", True, "ok")
    assert row["warnings"] == rep.warnings[0].text
    assert row["rate_source"] == (f"unpriced (cost.unlisted: unpriced): {note}; the trace's runtime calls are HIP "
                                  "(hipLaunchKernel): a ROCm GPU, not an NVIDIA GPU")


def test_real_rocm_trace_keeps_its_model():
    # mi250_rocm_minitoy: kernels on device 2, deviceProperties ids 0-3, all "AMD Radeon Graphics" (104 CUs):
    # device 2 is listed, so its model was named before and still is; no model warning from the loader
    with gzip.open(MI250_REAL, "rt") as fh:
        props = json.load(fh)["deviceProperties"]
    assert {(p["id"], p["name"]) for p in props} == {(i, "AMD Radeon Graphics") for i in range(4)}
    rep = load_kineto(MI250_REAL)
    assert rep.devices[["device_id", "gpu_model", "sms"]].values.tolist() == [[2, "AMD Radeon Graphics", 104]]
    assert not [w for w in rep.warnings if w.code == WarningCode.GPU_MODEL_UNRESOLVED]
    assert np.all(collective_mask(rep.kernels["name"], RULES) == False)  # noqa: E712 (a ROCm toy: no collective)


# ---------------------------------------------------------------- kind 2: Nsight exports that say their rank count


def _nsight_capture(path, capture: list[tuple[str, str]]):
    """One GPU, stream 7: gemm [0,1), ncclDevKernel_AllReduce [3,4), gemm [6,7) ms (gaps [1,3) and [4,6));
    ``capture``: the META_DATA_CAPTURE rows (name, value) as Nsight Systems writes them."""
    w = ExportWriter(str(path))
    for i, name in enumerate(["gemm", COLLECTIVES[1], "gemm"]):
        w.kernel(pid=10, device=0, stream=7, start=3 * i * MS, end=(3 * i + 1) * MS, name=name)
    w.close()
    con = sqlite3.connect(str(path))
    con.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT NOT NULL, value TEXT)")
    con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", capture)
    con.commit()
    con.close()
    return str(path)


def _env(*pairs: str) -> list[tuple[str, str]]:
    return [("PROCESS_0:COMMAND", "python3"), ("PROCESS_0:ARGUMENT_0", "train.py")] + \
        [("PROCESS_0:ENVIRONMENT_VARIABLE", p) for p in ("HOME=/root", *pairs)]


def _torchrun(*args: str) -> list[tuple[str, str]]:
    return [("PROCESS_0:COMMAND", "/usr/local/bin/torchrun")] + \
        [(f"PROCESS_0:ARGUMENT_{i}", a) for i, a in enumerate(args)] + [("PROCESS_0:ENVIRONMENT_VARIABLE", "")]


@pytest.mark.parametrize("capture, world", [
    (_env("WORLD_SIZE=1", "RANK=0"), "1"),                         # a rank wrapped in nsys by its launcher
    (_env("OMPI_COMM_WORLD_SIZE=1"), "1"),                         # Open MPI
    (_torchrun("--nnodes=1", "--nproc_per_node=1", "t.py"), "1"),  # nsys wrapping torchrun
    (_torchrun("--nproc-per-node", "1", "t.py"), "1"),             # one node by default
    (_env("WORLD_SIZE=8"), "8"),
    (_torchrun("--nnodes=2", "--nproc_per_node=4", "t.py"), "8"),
    (_torchrun("--nnodes=1:4", "--nproc_per_node=1", "t.py"), None),  # elastic: no number
    (_torchrun("t.py"), None),                                     # says nothing
    (_torchrun("--nproc_per_node=2", "t.py") + [("PROCESS_0:ENVIRONMENT_VARIABLE", "WORLD_SIZE=1")], None),  # disagree
    (_env(), None),
])
def test_nsight_capture_of_one_rank_has_no_collectives(tmp_path, capture, world):
    # W = [0,7) ms, idle 4 ms. One rank: the gap after the all-reduce is `cpu` like the other (4 ms
    # cpu), comm 0. Otherwise (several ranks, or unknown): that gap is `comm` (2 ms), comm 1 ms exposed.
    # main: always comm (it read no rank count from an export).
    rep = load_report(_nsight_capture(tmp_path / "n.sqlite", capture))
    assert rep.meta.get("world_size") == world
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {}).row
    one = world == "1"
    assert (row["window_ns"], row["idle_ns"]) == (7 * MS, 4 * MS)
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == ((0, 4 * MS) if one else (2 * MS, 2 * MS))
    assert (row["comm_ns"], row["comm_exposed_ns"]) == ((0, 0) if one else (MS, MS))


def test_real_torchrun_capture_names_two_ranks():
    # train_h100_2gpu_nccl was captured as `torchrun --nnodes=1 --nproc_per_node=2 …`: two ranks, its
    # NCCL kernels stay collectives; the other real exports do not say (python -c, bash -c pytest)
    assert load_report(str(PROFILES / "train_h100_2gpu_nccl.sqlite")).meta["world_size"] == "2"
    assert "world_size" not in load_report(str(PROFILES / "tiny_2kernels.sqlite")).meta


# ---------------------------------------------------------------- kind 2, review: word boundaries, CamelCase, vetoes

#: Compute kernels whose collective word follows ``_``, a letter or a digit (not an identifier's start),
#: and compute libraries' mangled names (the veto holds for them too). main matched every one.
AFTER_UNDERSCORE = [
    "void (anonymous namespace)::block_all_reduce_layernorm_kernel<float>(float*)",
    "void fused_all_gather_matmul_epilogue<float>(float*)",      # async-TP's op name, inside a kernel name
    "void warp_all_reduce<float, 32>(float*)",
    "rms_norm_reduce_scatter_fused_kernel",
    "my_all_to_all_permute_kernel",
    "_ZN2at6native18all_reduce_kernelIfEEvPT_",                 # mangled at::native::all_reduce_kernel<float>
    "_ZN7cutlass6KernelINS_9reduction21ReduceScatterEpilogueEEEvNT_6ParamsE",  # mangled cutlass::Kernel<…>
    "_ZN3cub18CUB_200200_890_NS16AllReduceAdapterIfEEvPf",       # mangled cub name holding a CamelCase word
]

#: Collectives named with CamelCase words (main missed three of them): PyTorch intra-node comm (c10d/intra_node_comm.cu), NCCL's own pre-2.3
#: kernel names, MORI's SDMA kernels: CamelCase communication words inside an identifier.
CAMEL_CASE = [
    "void c10d::intra_node_comm::hybridCubeMeshAllReduceKernel<true>(c10::BFloat16*, unsigned long, ...)",
    "void c10d::intra_node_comm::oneShotAllReduceKernel<true>(c10::BFloat16*, unsigned long, ...)",
    "void c10d::intra_node_comm::twoShotAllReduceKernel<true>(c10::BFloat16*, unsigned long, ...)",
    "void ReduceScatterKernel<256, 8, FuncSum<float>, float>(KernelArgs<float>)",
    "void mori::SdmaReduceScatterKernel<float>(int, int, float*)",
    "void customAllGatherKernel<__nv_bfloat16>(...)",
]


def test_collective_words_after_an_underscore_or_in_mangled_compute_names_are_not_collectives():
    # main: (?<![a-z]) let `_` and digits precede the word, and the veto only knew demangled prefixes
    assert collective_mask(AFTER_UNDERSCORE, RULES, world_size=2).tolist() == [False] * len(AFTER_UNDERSCORE)


def test_camel_case_collective_words_are_collectives():
    # main missed hybridCubeMeshAllReduceKernel, SdmaReduceScatterKernel, customAllGatherKernel (a letter
    # precedes the word); one/twoShot… matched via `(one|two)_?shot`, ReduceScatterKernel at the start.
    # A lower-case word at an identifier's start still counts
    assert collective_mask(CAMEL_CASE, RULES, world_size=2).tolist() == [True] * len(CAMEL_CASE)
    assert collective_mask(["c10d::all_reduce_kernel<float>", "all_gather_into_tensor_kernel", "allToAllV"],
                           RULES).tolist() == [True, True, True]
    # a bare operator word or a lower-case word glued to another never
    assert collective_mask(["BlockReduceKernel", "DeviceReduceSingleTileKernel", "blockallreduce"],
                           RULES).tolist() == [False, False, False]


def test_block_all_reduce_layernorm_is_compute_in_a_two_rank_trace(tmp_path):
    # gemm [10,11), ncclDevKernel_AllReduce [13,14), block_all_reduce_layernorm [16,17), gemm [19,20) ms,
    # world_size 2: W = 10 ms, busy 4 ms, idle 6 ms. Gaps [11,13) after gemm: cpu; [14,16) after NCCL:
    # comm; [17,19) after the layer norm: cpu (main: comm, 4 ms; comm_ns 2 ms). comm_ns: the NCCL 1 ms.
    names = ["gemm", COLLECTIVES[1], AFTER_UNDERSCORE[0], "gemm"]
    row = _only(_rows(_kineto(tmp_path / "t.json", names, rank=0, world_size=2)))
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (10 * MS, 4 * MS, 6 * MS)
    assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (2 * MS, 4 * MS)
    assert (row["comm_ns"], row["comm_exposed_ns"]) == (MS, MS)


# ---------------------------------------------------------------- kind 2, review: one rank says so

@pytest.mark.parametrize("world_size", [1, 2])
def test_one_rank_trace_with_collective_names_warns(tmp_path, world_size):
    # gemm, ncclDevKernel_Generic, gemm, ncclKernel_AllReduce, gemm (as above): one rank: both NCCL
    # kernels uncounted, one coded warning naming them (2) and the source; not partial. Two ranks: none.
    names = ["gemm", COLLECTIVES[4], "gemm", COLLECTIVES[0], "gemm"]
    rep = load_kineto(str(_kineto(tmp_path / "r.json", names, rank=0, world_size=world_size)))
    trace = gpu_trace(rep, rep.gpu_keys()[0])
    row = analyse_gpu(trace, SPAN, {}).row
    assert row["status"] == "ok" and row["comm_ns"] == (0 if world_size == 1 else 2 * MS)
    text = ("2 kernels named like collectives (NCCL, all-reduce...) not counted as communication: "
            "the trace's distributedInfo.world_size says the job ran on one rank")
    assert (text in row["warnings"]) == (world_size == 1)
    codes = [w.code for w in one_rank_warning(trace.kernels["name"], RULES, trace.world_size)]
    assert codes == ([WarningCode.ONE_RANK_COLLECTIVES] if world_size == 1 else [])


@pytest.mark.parametrize("capture, source", [
    (_env("WORLD_SIZE=1"), "WORLD_SIZE=1 in the capture's process environment"),
    (_torchrun("--nproc_per_node=1", "t.py"), "the captured torchrun --nnodes=1 --nproc_per_node=1"),
])
def test_nsight_one_rank_capture_with_nccl_warns_naming_its_source(tmp_path, capture, source):
    # the _nsight_capture export: one ncclDevKernel_AllReduce in W, not counted (cat_comm 0, comm 0)
    rep = load_report(_nsight_capture(tmp_path / "n.sqlite", capture))
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {}).row
    assert (row["cat_comm_ns"], row["comm_ns"], row["status"]) == (0, 0, "ok")
    assert (f"1 kernel named like collectives (NCCL, all-reduce...) not counted as communication: {source} "
            "says the job ran on one rank") in row["warnings"]


# ---------------------------------------------------------------- kind 2, review: unreadable rank counts

@pytest.mark.parametrize("capture", [
    _env("WORLD_SIZE=²"),                                  # main: ValueError in int(), an error row
    _env("WORLD_SIZE=١"),                                  # Arabic-Indic one: main read it as 1 rank
    _env("WORLD_SIZE=" + "9" * 5000),                      # main: int() refuses > 4300 digits
    _torchrun("--nproc_per_node=²", "t.py"),               # main: ValueError
    [("PROCESS_0:COMMAND", "torchrun"), ("PROCESS_0:ARGUMENT_²", "--nproc_per_node=1")],  # main: ValueError
])
def test_unreadable_world_size_in_a_capture_says_nothing(tmp_path, capture):
    # unreadable: rank count unknown, so the all-reduce's gap is `comm` (2 ms), comm 1 ms; no error
    rep = load_report(_nsight_capture(tmp_path / "n.sqlite", capture))
    assert "world_size" not in rep.meta
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {}).row
    assert (row["cat_comm_ns"], row["comm_ns"], row["status"]) == (2 * MS, MS, "ok")


@pytest.mark.parametrize("value", ['"²"', '"1.0"', "true", "-1", "1" + "0" * 30, "9" * 5000])
def test_unreadable_world_size_in_a_kineto_trace_says_nothing(tmp_path, value):
    # distributedInfo.world_size of no positive ASCII integer: unknown, the NCCL gaps are `comm` (4 ms).
    # main: "True" / "-1" / the 31-digit number landed in meta, and 5000 digits failed the whole trace.
    names = ["gemm", COLLECTIVES[4], "gemm", COLLECTIVES[0], "gemm"]
    path = _kineto(tmp_path / "r.json", names, rank=0, world_size=1)
    text = open(path).read()
    assert '"world_size": 1' in text
    open(path, "w").write(text.replace('"world_size": 1', f'"world_size": {value}'))
    rep = load_kineto(str(path))
    assert "world_size" not in rep.meta
    row = _only({k: analyse_gpu(gpu_trace(rep, k), SPAN, {}).row for k in rep.gpu_keys()})
    assert (row["cat_comm_ns"], row["comm_ns"], row["status"]) == (4 * MS, 2 * MS, "ok")


# ---------------------------------------------------------------- kind 2, review: every name of an Nsight kernel

#: (shortName, demangledName, mangledName) of kernels whose short name alone misleads: the loader keeps
#: the short name (KERNEL_NAME_COLUMNS), the matcher sees all three.
NAMED_THREE_WAYS = [
    ("all_reduce_kernel", "void at::native::all_reduce_kernel<float>(float*)",        # ATen: compute
     "_ZN2at6native17all_reduce_kernelIfEEvPT_"),
    ("AllGatherKernel", "AllGatherKernel", "_ZN7cutlass15AllGatherKernelEv"),          # mangled CUTLASS: compute
    ("dispatch", "void deep_ep::intranode::dispatch<8, 768>(int4*, float*)", None),     # DeepEP: a collective
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL",
     "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", None),  # NCCL
]


def _nsight_three_names(path) -> str:
    """Stream 7: gemm [0,1), then per NAMED_THREE_WAYS entry i its kernel [6i+3, 6i+4) and gemm
    [6i+6, 6i+7) ms; every gap 2 ms. Each kernel's three name columns as the entry gives them."""
    w = ExportWriter(str(path))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="gemm")
    for i, (short, _, _) in enumerate(NAMED_THREE_WAYS):
        w.kernel(pid=10, device=0, stream=7, start=(6 * i + 3) * MS, end=(6 * i + 4) * MS, name=short)
        w.kernel(pid=10, device=0, stream=7, start=(6 * i + 6) * MS, end=(6 * i + 7) * MS, name="gemm")
    ids = [(w.string(short), w.string(full), None if mangled is None else w.string(mangled))
           for short, full, mangled in NAMED_THREE_WAYS]
    w.close()
    con = sqlite3.connect(str(path))
    con.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET demangledName = ?, mangledName = ? WHERE shortName = ?",
                    [(full, mangled, short) for short, full, mangled in ids])
    con.commit()
    con.close()
    return str(path)


def test_nsight_kernels_are_matched_by_all_their_names(tmp_path):
    # W = [0,25) ms, busy 9 ms, idle 16 ms (8 gaps of 2 ms). Collectives: DeepEP's dispatch (by its
    # demangled name) and NCCL: the gaps after them are comm (4 ms), the other six cpu (12 ms); comm_ns 2 ms.
    # main matched short names only: all_reduce_kernel and AllGatherKernel were collectives (their
    # vetoes live in the other names), dispatch was not: cat_comm 6 ms, comm_ns 3 ms.
    path = _nsight_three_names(tmp_path / "three.sqlite")
    reports = [load_report(path), load_cached(path, cache_dir=tmp_path / "c")]
    wait_for_writes()
    reports.append(load_cached(path, cache_dir=tmp_path / "c"))
    assert reports[2].sources  # read from the cache entry
    for rep in reports:
        assert rep.kernel_aliases["dispatch"] == (NAMED_THREE_WAYS[2][1],)
        row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {}).row
        assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (25 * MS, 9 * MS, 16 * MS)
        assert (row["cat_comm_ns"], row["cat_cpu_ns"]) == (4 * MS, 12 * MS)
        assert (row["comm_ns"], row["comm_exposed_ns"]) == (2 * MS, 2 * MS)


def test_every_name_is_matched_and_any_veto_wins():
    names = [short for short, _, _ in NAMED_THREE_WAYS]
    aliases = {short: tuple(n for n in (full, mangled) if n and n != short) for short, full, mangled in NAMED_THREE_WAYS}
    assert collective_mask(names, RULES, 2, aliases).tolist() == [False, False, True, True]


def _python_m(*args: str) -> list[tuple[str, str]]:
    return [("PROCESS_0:COMMAND", "/usr/bin/python3.11")] + \
        [(f"PROCESS_0:ARGUMENT_{i}", a) for i, a in enumerate(args)] + [("PROCESS_0:ENVIRONMENT_VARIABLE", "")]


@pytest.mark.parametrize("capture, world", [
    # the training script's own --nproc_per_node=1 is its argument, not torchrun's: 2 ranks
    # (main: read as 1 rank, the all-reduce dropped and a false one-rank-collectives warning)
    (_torchrun("--nproc_per_node=2", "train.py", "--nproc_per_node=1"), "2"),
    (_torchrun("--nproc-per-node", "2", "-m", "pkg.train", "--nproc_per_node", "1"), "2"),
    (_torchrun("--standalone", "--nproc_per_node=2", "train.py", "--nnodes=3"), "2"),
    (_torchrun("train.py", "--nproc_per_node=1"), None),  # torchrun itself says nothing
    # torchrun run as a module of python
    (_python_m("-m", "torch.distributed.run", "--nproc_per_node=2", "train.py", "--nproc_per_node=1"), "2"),
    (_python_m("-u", "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "4", "t.py"), "8"),
    (_python_m("train.py", "--nproc_per_node=1"), None),  # a script of python, not torchrun
])
def test_torchrun_reads_its_own_arguments_not_the_scripts(tmp_path, capture, world):
    # W = [0,7) ms, idle 4 ms; several ranks (or unknown): the gap after the all-reduce is comm (2 ms)
    rep = load_report(_nsight_capture(tmp_path / "n.sqlite", capture))
    assert rep.meta.get("world_size") == world
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {}).row
    assert (row["window_ns"], row["idle_ns"], row["cat_comm_ns"], row["comm_exposed_ns"]) == (7 * MS, 4 * MS,
                                                                                           2 * MS, MS)
    assert without_model_warning(row["warnings"]) == ""  # main: "one-rank-collectives" for the 1 rank it read
