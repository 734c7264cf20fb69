"""What the two generators share: time units, stream ids, CUDA API export names, kernel
catalogs of transformer and convnet training steps, and small truth helpers."""
from __future__ import annotations

import json
import os

from ..analysis.attribution import is_collective_kernel
from ..config import CategoryRules
from ..model import CAVEATS

US = 1_000                 #: ns per microsecond
MS = 1_000_000             #: ns per millisecond
CAPTURE_START_NS = 10_000_000_000   #: the first iteration starts about 10 s into the capture

#: Per-process stream ids (PyTorch's default stream shows as 7 in Nsight Systems).
COMPUTE_STREAM, COPY_STREAM, NCCL_STREAM = 7, 16, 23

#: Exported names (with version suffix) of the CUDA runtime APIs the generator emits; plans use the base names.
API_EXPORT_NAMES = {
    "cudaLaunchKernel": "cudaLaunchKernel_v7000",
    "cudaMemcpyAsync": "cudaMemcpyAsync_v3020",
    "cudaMemsetAsync": "cudaMemsetAsync_v3020",
    "cudaStreamSynchronize": "cudaStreamSynchronize_v3020",
    "cudaEventSynchronize": "cudaEventSynchronize_v3020",
    "cudaDeviceSynchronize": "cudaDeviceSynchronize_v3020",
    "cudaHostAlloc": "cudaHostAlloc_v3020",
    "cudaMalloc": "cudaMalloc_v3020",
}

SLIVER_NS = (3 * US, 40 * US)          #: launch gap between back-to-back kernels on one stream
LAUNCH_LEAD_NS = (4 * US, 9 * US)      #: launch call end -> kernel start
LAUNCH_CALL_NS = (3 * US, 7 * US)      #: duration of one cudaLaunchKernel call
#: Witness calls inside a planted gap end this long before the gap ends, leaving room for
#: the next kernel's launch call (at most LEAD + CALL = 16 us before the kernel).
WITNESS_MARGIN_NS = 25 * US
H2D_BYTES_PER_NS = 25                  #: ~25 GB/s pinned host-to-device bandwidth
BUCKET_5MS, BUCKET_50MS = 5 * MS, 50 * MS   #: size buckets (ns), docs/definitions.md#size-buckets
#: Causes of idle that are not the application's (fleet columns ``cat_profiler_*``, ``cat_untraced_*``:
#: :data:`pipeline.model.CAVEATS`): the generators write no profiler-overhead rows and a GPU record for
#: every launch, so none holds any.
NOT_APPLICATION_CAUSES = CAVEATS
#: The kernel before a device-level hole that opens W (a window edge: never a collective).
DEVICE_WINDOW_START = "(window start)"
MIN_STABLE_ITERATIONS = 3   #: the nvtx window needs this many stable iterations (pipeline default)

#: PCIe bus ids of the eight GPUs of an HGX node.
HGX_BUS_IDS = ("0000:18:00.0", "0000:2a:00.0", "0000:3a:00.0", "0000:5d:00.0",
               "0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0")

# Kernel catalogs: (short name, min ns, max ns).
_GEMM_QKV = "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_bias_TNN"
_GEMM_PROJ = "nvjet_tst_96x64_64x10_1x2_h_bz_bias_TNN"
_GEMM_MLP = "nvjet_tst_192x208_64x4_1x1_h_bz_coopB_bias_TNT"
TRANSFORMER_FORWARD = (
    ("vectorized_layer_norm_kernel", 60 * US, 120 * US),
    (_GEMM_QKV, 900 * US, 1_600 * US),
    ("flash_fwd_kernel", 700 * US, 1_300 * US),
    (_GEMM_PROJ, 400 * US, 800 * US),
    ("vectorized_elementwise_kernel", 40 * US, 110 * US),
    (_GEMM_MLP, 1_200 * US, 1_900 * US),
    ("vectorized_elementwise_kernel", 80 * US, 180 * US),
    (_GEMM_QKV, 1_200 * US, 1_900 * US),
)
TRANSFORMER_HEAD = (
    (_GEMM_MLP, 1_500 * US, 2_200 * US),
    ("cunn_SoftMaxForward", 150 * US, 300 * US),
    ("nll_loss_forward_reduce_cuda_kernel_2d", 40 * US, 90 * US),
)
TRANSFORMER_BACKWARD = (
    (_GEMM_QKV, 1_300 * US, 2_200 * US),
    (_GEMM_MLP, 1_300 * US, 2_200 * US),
    ("elementwise_kernel", 90 * US, 200 * US),
    (_GEMM_MLP, 1_300 * US, 2_200 * US),
    ("reduce_kernel", 60 * US, 150 * US),
    ("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", 1_800 * US, 3_000 * US),
    (_GEMM_PROJ, 700 * US, 1_300 * US),
    ("layer_norm_grad_input_kernel", 80 * US, 160 * US),
    ("GammaBetaBackwardCUDAKernel", 60 * US, 120 * US),
)
ADAM_OPTIMIZER = (
    ("reduce_kernel", 80 * US, 150 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
    ("multi_tensor_apply_kernel", 250 * US, 500 * US),
)
_CONV_FPROP = ("sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
_CONV_DGRAD = ("sm80_xmma_dgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
_CONV_WGRAD = ("sm80_xmma_wgrad_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_"
               "warpsize2x2x1_g1_tensor16x8x16_kernel")
CONVNET_FORWARD = (
    (_CONV_FPROP, 600 * US, 1_200 * US),
    ("bn_fw_tr_1C11_kernel_NCHW", 120 * US, 260 * US),
    ("vectorized_elementwise_kernel", 50 * US, 120 * US),
    (_CONV_FPROP, 900 * US, 1_600 * US),
    ("bn_fw_tr_1C11_kernel_NCHW", 120 * US, 260 * US),
)
CONVNET_HEAD = (
    ("ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_tn", 200 * US, 400 * US),
    ("cunn_SoftMaxForward", 60 * US, 120 * US),
    ("nll_loss_forward_reduce_cuda_kernel_2d", 30 * US, 70 * US),
)
CONVNET_BACKWARD = (
    ("bn_bw_1C11_kernel_new", 150 * US, 300 * US),
    (_CONV_DGRAD, 900 * US, 1_700 * US),
    (_CONV_WGRAD, 900 * US, 1_700 * US),
    ("elementwise_kernel", 60 * US, 140 * US),
    ("bn_bw_1C11_kernel_new", 150 * US, 300 * US),
    (_CONV_DGRAD, 700 * US, 1_300 * US),
    (_CONV_WGRAD, 700 * US, 1_300 * US),
)


def is_collective(name: str, rules: CategoryRules) -> bool:
    """True when ``name`` is a collective kernel by the category rules (docs/definitions.md#categories, ``comm``): the analysis' own
    matcher, :func:`pipeline.analysis.attribution.is_collective_kernel`."""
    return is_collective_kernel(name, rules)


def truth_path(report_path: str) -> str:
    """Where a generator writes the truth (JSON) of ``report_path``: beside it, ``.truth.json`` added."""
    return str(report_path) + ".truth.json"


def write_truth(report_path: str, truth: dict, compact: bool = False) -> None:
    """Write ``truth`` (a dict whose first key is ``"format"``, ``"gpu-idle synth ..."``) to
    :func:`truth_path` of ``report_path``, atomically (a temporary file renamed): indented one space,
    or with ``compact`` without any whitespace (fleet-scale truths). The folder search knows the file
    as gpu-idle's own either way (:data:`pipeline.inputs.discover.TRUTH_MARKER`).

    Raises:
        ValueError: ``truth`` does not start with a ``format`` naming gpu-idle synth.
        OSError: the file cannot be written.
    """
    if not str(next(iter(truth), "")) == "format" or not str(truth["format"]).startswith("gpu-idle synth"):
        raise ValueError("a truth's first key is its format, 'gpu-idle synth ...'")
    tmp = truth_path(report_path) + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(truth, fh, **({"separators": (",", ":")} if compact else {"indent": 1}))
        fh.write("\n")
    os.replace(tmp, truth_path(report_path))
