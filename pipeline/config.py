"""Configuration: YAML files -> frozen dataclasses.

Layering: the built-in defaults below, then each ``--config`` file in order
(mappings are merged key by key; lists and scalars replace), then command-line
flags. ``configs/default.yaml`` spells the defaults out; a test keeps it equal
to these dataclasses.

Every value is checked when a config is built (:func:`config_from_dict`): the field types below
(``Count``, ``Share``, ``Positive``, ...) carry their ranges, and pydantic validates each section's
dataclass against them, so a wrong value is one :class:`ConfigError` naming the file, the key and
what is expected, before any work starts.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
import os
import re
import stat
import threading
from dataclasses import dataclass, field
from datetime import datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args, get_origin

from . import kinds

NS_PER_S = 1_000_000_000
#: Below this many seconds (2**23 s, about 97 days) neighbouring floats are less than 1 ns apart,
#: so a float still tells the nanoseconds it was written with; above it (the UTC-epoch clock of
#: ``nsys export``'s time-shift options, ~1.78e9 s) it cannot.
FLOAT_EXACT_S = 2 ** 23
#: The largest count or length in ns a setting may hold: the analysis keeps times as int64 ns.
INT64_MAX = 2**63 - 1
#: The seconds an int64 ns clock can tell (about ±292 years around its zero): a time beyond them
#: (``trim_s``, ``--trim``) has no nanosecond to land on.
CLOCK_MIN_S, CLOCK_MAX_S = Decimal(-(2**63)).scaleb(-9), Decimal(INT64_MAX).scaleb(-9)
#: The longest wait (seconds) a timeout or back-off setting may ask for: ``threading.TIMEOUT_MAX``
#: on Linux, the most a timed wait or ``time.sleep`` accepts without OverflowError.
MAX_WAIT_S = threading.TIMEOUT_MAX
#: The largest value any other number setting may hold (a factor, a rate in USD/GPU-hour, a
#: threshold): 2**53, the largest integer a float holds exactly. Far above any real setting and far
#: below where the products and sums the analysis makes of settings (dollars = rate x hours x GPUs)
#: would overflow to inf. Counts and lengths in ns are bounded by :data:`INT64_MAX`, seconds by
#: the int64 ns clock, waits by :data:`MAX_WAIT_S`, sizes in bytes by :data:`INT64_MAX`: every number
#: a config can give is finite and bounded, so a huge one is refused at load time (exit 2), naming its key.
MAX_NUMBER = 2**53


def parse_seconds(value) -> Decimal:
    """Seconds as an exact decimal, from decimal text (``"1776781226.561295056"``, ``"1e-3"``), an int,
    a :class:`~decimal.Decimal`, or a float below :data:`FLOAT_EXACT_S` (its nearest ns is the one it
    was written with). Raises ValueError for anything else: a bool, non-finite values, text that is
    not a number, a float too large to hold nanoseconds (write such seconds as text), seconds
    outside the int64 ns clock (:data:`CLOCK_MIN_S` .. :data:`CLOCK_MAX_S`)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"should be a finite number of seconds, not {value!r}")
    if isinstance(value, float):
        if abs(value) >= FLOAT_EXACT_S:
            raise ValueError(
                f"should be written as a string (quoted, with every digit): {value!r} is a float, which cannot "
                f"hold nanoseconds at this size (floats are {math.ulp(value) * NS_PER_S:.0f} ns apart here)")
        return Decimal(round(Decimal(value) * NS_PER_S)).scaleb(-9)
    if isinstance(value, (str, int, Decimal)) and not isinstance(value, bool):
        try:
            seconds = Decimal(value.strip() if isinstance(value, str) else value)
        except InvalidOperation:
            seconds = None
        if seconds is not None and seconds.is_finite():
            if seconds > CLOCK_MAX_S:
                raise ValueError(f"should be at most {CLOCK_MAX_S} s (the int64 nanosecond clock)")
            if seconds < CLOCK_MIN_S:
                raise ValueError(f"should be at least {CLOCK_MIN_S} s (the int64 nanosecond clock)")
            return seconds
    raise ValueError(f"should be seconds (a number, or decimal text like '1776781226.561295056'), got {value!r}")


def seconds_to_ns(value) -> int:
    """:func:`parse_seconds` of ``value`` as integer nanoseconds, exactly; digits finer than 1 ns are
    rounded to the nearest ns (half to even). Raises ValueError (see :func:`parse_seconds`)."""
    return int((parse_seconds(value) * NS_PER_S).to_integral_value(ROUND_HALF_EVEN))


def _trim_pair(value):
    """``analysis.trim_s``: None, or ``[START, END]`` seconds -> a pair of exact :class:`Decimal`, END > START."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ValueError("should be [START, END], two times in seconds on the report's clock")
    start, end = parse_seconds(value[0]), parse_seconds(value[1])
    if end <= start:
        raise ValueError(f"END ({end} s) must be after START ({start} s)")
    return start, end


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"should be a regular expression ({exc})") from None
    return pattern


#: Dask schedulers gpu-idle connects to: plain TCP, or TLS when Dask's configuration holds the
#: certificates (:func:`check_scheduler_address`). ``inproc://`` (one process), ``ucx://`` (needs
#: ucx-py and GPUs on the client) and ``ws(s)://`` are refused.
SCHEDULER_SCHEMES = ("tcp", "tls")
_HOST = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?|\[[0-9A-Fa-f:.]+\]")


def check_scheduler_address(address: str) -> str:
    """``address`` if it is a Dask scheduler address gpu-idle can connect to: ``[tcp://]HOST:PORT``
    (a host name, an IPv4 address or an ``[IPv6]`` address; port 1..65535), or ``tls://HOST:PORT``
    when Dask's configuration names the client's TLS files (``distributed.comm.tls.ca-file`` and
    ``distributed.comm.tls.client.cert``). Raises ValueError saying what is wrong (other schemes,
    no host, no port, a path after the port, TLS without certificates)."""
    if not isinstance(address, str):
        raise ValueError(f"should be an address like tcp://HOST:8786, got {address!r}")
    scheme, sep, rest = address.strip().partition("://")
    if not sep:
        scheme, rest = "tcp", address.strip()
    scheme = scheme.lower()
    if scheme not in SCHEDULER_SCHEMES:
        raise ValueError(f"{address!r}: {scheme}:// is not supported (use tcp://HOST:PORT, HOST:PORT or tls://HOST:PORT)")
    host, colon, port = rest.rpartition(":")
    if not colon or rest.endswith("]"):
        raise ValueError(f"{address!r}: no port (write HOST:PORT, e.g. tcp://sched:8786)")
    if not host:
        raise ValueError(f"{address!r}: no host (write HOST:PORT, e.g. tcp://sched:8786)")
    if "/" in port or "?" in port or "#" in port:
        raise ValueError(f"{address!r}: nothing may follow the port")
    if not (port.isascii() and port.isdigit() and 1 <= int(port) <= 65535):
        raise ValueError(f"{address!r}: the port must be a number from 1 to 65535, got {port!r}")
    if not _HOST.fullmatch(host):
        raise ValueError(f"{address!r}: {host!r} is not a host name or IP address")
    if scheme == "tls":
        import dask.config  # dask's own configuration only (not distributed): the files a tls:// client needs

        missing = [key for key in ("distributed.comm.tls.ca-file", "distributed.comm.tls.client.cert")
                   if not dask.config.get(key, None)]
        if missing:
            raise ValueError(f"{address!r}: tls:// needs TLS certificates in Dask's configuration "
                             f"({', '.join(missing)} not set); or use tcp://")
    return address.strip()


def _scheduler_or_none(address):
    return None if address is None else check_scheduler_address(address)


def _text(value):
    """Labels are text; a YAML number (``rank: 3``) is taken as its text."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


# Value types of the settings, checked by pydantic when a config is built (:func:`config_from_dict`).
# Numbers are strict: text is never taken for a number (YAML reads ``1e6`` as text), nor a bool.
# The dataclasses below name them in their (string) annotations; they are made, with pydantic,
# only when a value has to be checked (:func:`_value_types`): a run with the defaults alone, as
# `gpu-idle run FILE --out DIR` is, or given only words of a ``Literal`` setting (``--window span``:
# :func:`_one_of_its_words`) or whole numbers in range (``--workers 2``: :data:`WHOLE_NUMBERS`), never imports
# pydantic (~0.1 s of its import and ~0.1 s to build a section's check: a sixth of a `--workers 1` start).

#: The whole-number value types, ``name -> (least, most)``: strict ints in that range (never a bool, a float, text).
#: :func:`_value_types` makes them from here, and :func:`_taken_as_is` checks a value against the same bounds.
WHOLE_NUMBERS = {"Count": (0, INT64_MAX), "AtLeastOne": (1, INT64_MAX), "Nanoseconds": (0, INT64_MAX)}


def _value_types() -> None:
    """Define the value types (``Count``, ``Share``, ...) and pydantic's ``Field`` in this module,
    where pydantic resolves the dataclasses' annotations. Idempotent."""
    if "Count" in globals():
        return
    from pydantic import AfterValidator, BeforeValidator, Field

    globals().update(
        Field=Field,
        # Nanoseconds: a length in ns, on the int64 ns clock
        **{name: Annotated[int, Field(strict=True, ge=least, le=most)] for name, (least, most) in WHOLE_NUMBERS.items()},
        Share=Annotated[float, Field(strict=True, ge=0, le=1, allow_inf_nan=False)],
        Percent=Annotated[float, Field(strict=True, ge=0, le=100, allow_inf_nan=False)],
        NonNegative=Annotated[float, Field(strict=True, ge=0, le=MAX_NUMBER, allow_inf_nan=False)],
        Positive=Annotated[float, Field(strict=True, gt=0, le=MAX_NUMBER, allow_inf_nan=False)],
        # seconds to wait or sleep: at most what a timed wait can take (threading.TIMEOUT_MAX, ~292 years)
        Timeout=Annotated[float, Field(strict=True, gt=0, le=MAX_WAIT_S, allow_inf_nan=False)],
        Delay=Annotated[float, Field(strict=True, ge=0, le=MAX_WAIT_S, allow_inf_nan=False)],
        SchedulerAddress=Annotated[str | None, AfterValidator(_scheduler_or_none)],
        Factor=Annotated[float, Field(strict=True, ge=1, le=MAX_NUMBER, allow_inf_nan=False)],
        Flag=Annotated[bool, Field(strict=True)],
        Regex=Annotated[str, AfterValidator(_regex)],
        Label=Annotated[str | None, BeforeValidator(_text)],
        TrimSeconds=Annotated[tuple[Decimal, Decimal] | None, BeforeValidator(_trim_pair)],
    )


if TYPE_CHECKING:  # the names the annotations use, for linters and type checkers; at run time :func:`_value_types` makes them
    from pydantic import Field

    Count = AtLeastOne = Nanoseconds = int
    Share = Percent = NonNegative = Positive = Factor = Timeout = Delay = float
    SchedulerAddress = str | None
    Flag = bool
    Regex = str
    Label = str | None
    TrimSeconds = tuple[Decimal, Decimal] | None


@dataclass(frozen=True)
class CategoryRules:
    """What makes a gap ``sync``, ``data`` or ``comm`` (docs/definitions.md#categories).

    ``sync_apis``/``data_apis``: exact normalised CUDA API names (and their HIP twins, for ROCm traces).
    ``*_min_fraction``: the share of the gap a witness must cover (0..1).
    ``collective_kernel``: regex (case-insensitive, ``re.search``) on the kernel name before the gap
    that marks it as a collective, by the names communication libraries give their device kernels:
    NCCL and RCCL (``ncclKernel_…``, ``ncclDevKernel_…``, older ``ncclAllReduceRingLLKernel_…``;
    RCCL keeps them under ROCm; ``rcclKernel``, ``RcclKernelScalar…``, MSCCL ``mscclKernel_…``,
    MSCCL++), NVSHMEM (``nvshmem…``), DeepEP (``deep_ep::``), TransformerEngine / TensorRT-LLM
    userbuffers (``userbuffers_…``), and the inference engines' custom all-reduce kernels
    (vLLM/SGLang/aiter ``cross_device_reduce_1stage``/``_2stage``, vLLM's quick reduce
    ``allreduce_prototype_…``, TensorRT-LLM ``oneShotAllReduceKernel``/``twoShotAllReduceKernel``/
    ``allreduce_fusion_kernel_…``, PyTorch symmetric memory ``one_shot_all_reduce_kernel``,
    ``multimem_all_gather_kernel``, ``all_to_all_vdev``; vLLM/SGLang's ``custom_all_reduce``/
    ``custom_reduce_scatter``; PyTorch intra-node comm
    ``hybridCubeMeshAllReduceKernel``). A CamelCase collective word (``AllReduce``, ``AllGather``,
    ``ReduceScatter``, ``AllToAll``, capital first letter, case-sensitive) counts anywhere: compute
    libraries do not name kernels so (cub has ``BlockReduce``/``DeviceReduce``). A lower-case one
    (``all_reduce``/``allreduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``) counts only at
    the start of an identifier component (the name's start, after ``::``, a space, ``<``, ``(``),
    never after ``_``, a letter or a digit (``block_all_reduce_layernorm_kernel``, ``warp_all_reduce``,
    ``smallreduce`` are none); a bare operator word that compute libraries also use never does: ``broadcast``, ``reduce``, ``gather``, ``scatter`` (``elementwise_kernel
    <…broadcast…>``, ``cub::DeviceReduceKernel``, ``scatter_gather_elementwise_kernel``).
    ``compute_kernel``: regex (case-insensitive, ``re.search``) on the kernel name: the kernels
    compute libraries and code generators name (Triton/Inductor ``triton_…``, named after the ops
    they fuse, e.g. ``triton_poi_fused_all_reduce_0``; ``at::native::…``; ``cub::…``; CUTLASS) are
    never collectives, whatever words their names hold; also their mangled forms (``_ZN2at6native…``,
    ``_ZN3cub…``, ``_ZN7cutlass…``). The one matcher of the two is
    :func:`pipeline.analysis.attribution.is_collective_kernel`.
    ``quiet_max_fraction``: the CUDA API side is "quiet" in a gap when all calls
    together cover less than this share of it (``boundary``).
    ``periodic_min_ns`` / ``periodic_min_factor``: a ``periodic`` candidate gap is
    at least this long and this many times the median gap.
    ``profiler_overheads``: ENUM_CUPTI_OVERHEAD_TYPE names of the CUPTI_ACTIVITY_KIND_OVERHEAD rows
    that are the profiler's (every PROFILER_OVERHEAD row is); ``profiler_min_fraction``: the share
    of a gap they must cover, where the GPU is dark (no copy engine either), for ``profiler``.
    """

    sync_apis: tuple[str, ...] = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                                  "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol",
                                  "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuCtxSynchronize",
                                  "cuEventSynchronize",
                                  # ROCm (HIP) names, as PyTorch profiler traces on AMD GPUs spell them
                                  "hipStreamSynchronize", "hipDeviceSynchronize", "hipEventSynchronize",
                                  "hipMemcpy", "hipMemcpyWithStream", "hipMemcpy2D", "hipMemcpy3D",
                                  "hipMemcpyFromSymbol", "hipMemcpyToSymbol")
    data_apis: tuple[str, ...] = ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync",
                                  "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaHostAlloc",
                                  "cudaMallocHost", "cudaHostRegister", "cuMemcpyHtoDAsync", "cuMemcpyHtoD",
                                  "cuMemHostAlloc", "cuMemAllocHost",
                                  "hipMemcpyAsync", "hipMemcpy2DAsync", "hipMemcpy3DAsync", "hipMemcpyToSymbolAsync",
                                  "hipMemcpyFromSymbolAsync", "hipHostMalloc", "hipHostAlloc", "hipMallocHost",
                                  "hipHostRegister", "hipMemcpyHtoDAsync", "hipMemcpyHtoD")
    sync_min_fraction: Share = 0.5
    data_min_fraction: Share = 0.5
    collective_kernel: Regex = (r"(?<![a-z])nccl|(?<![a-z])rccl|(?<![a-z])msccl|(?<![a-z])nvshmem|deep_ep::"
                                r"|(?<![a-z])userbuffers_|cross_device_reduce|allreduce_prototype|allreduce_fusion"
                                r"|(?:one|two)_?shot_?all_?reduce|(?:multimem_\w*|custom_)(?:all_?reduce|all_?gather|reduce_?scatter)"
                                r"|(?-i:AllReduce|AllGather|ReduceScatter|AllToAll)"
                                r"|(?<![a-z0-9_])(?:all_?reduce|all_?gather|reduce_?scatter|all_?to_?all)")
    compute_kernel: Regex = (r"^\s*(?:void\s+)?(?:triton_|at::native::|at_cuda_detail::|cub::|cutlass(?:::|_)"
                             r"|_ZN2at6native|_ZN14at_cuda_detail|_ZN3cub|_ZN7cutlass)")
    quiet_max_fraction: Share = 0.5
    periodic_min_ns: Nanoseconds = 50_000_000
    periodic_min_factor: Positive = 5.0
    profiler_overheads: tuple[str, ...] = ("OVERHEAD_CUPTI_BUFFER_FLUSH", "OVERHEAD_CUPTI_INSTRUMENTATION",
                                           "OVERHEAD_CUPTI_RESOURCE", "OVERHEAD_COMMAND_BUFFER_FULL")
    profiler_min_fraction: Share = 0.5


@dataclass(frozen=True)
class WindowRules:
    """Parameters of the window rules (see module docstring). Lengths in ns."""

    iteration_patterns: tuple[Regex, ...] = (r"[Ii]teration[ _#:]?\d+", r"ProfilerStep#\d+",
                                             r"train_step(?:[ _#]\d+)?", r"[Ss]tep[ _#]?\d+")
    min_iteration_ns: Nanoseconds = 1_000_000
    warmup_iterations: Count = 1
    outlier_factor: Factor = 1.5
    min_iterations: AtLeastOne = 3
    max_iterations: Count = 0  # 0 = keep the whole longest run
    periodic_min_regular_share: Share = 0.8
    # job kind (docs/definitions.md#job-kind): re.search, case-insensitive, on the GPU's NVTX texts / kernel names
    serving_ranges: tuple[Regex, ...] = (
        r"(?<![a-z])(?:sglang|vllm|tensorrt[_-]?llm|trt[_-]?llm|text[_-]generation[_-](?:inference|server)"
        r"|triton[_-]?server)(?![a-z])",
        r"(?<![a-z])(?:prefill|decode)(?![a-z])")
    serving_kernels: tuple[Regex, ...] = (
        r"(?<![a-z])(?:sglang|sgl_kernel|vllm|tensorrt_?llm|trtllm|flashinfer)(?![a-z])", r"paged_?attention")
    training_ranges: tuple[Regex, ...] = (r"backward", r"optimizer", r"zero_grad")
    training_kernels: tuple[Regex, ...] = (r"backward", r"_bwd(?![a-z])", r"[dw]grad",
                                           r"(?<![a-z])(?:adam|adamw|sgd|lamb|adagrad)(?![a-z])")
    max_left_out_idle_pct: Percent = 50.0  # unknown kind: a window leaving out more of the capture's idle is partial


class ConfigError(Exception):
    """A configuration file is unreadable or holds an invalid value (message names the file)."""


@dataclass(frozen=True)
class Rate:
    """One rate-card entry: USD per GPU-hour for GPUs whose model matches.

    ``match``: glob patterns (case-insensitive, ``fnmatch``) on the GPU model
    name as the export gives it, e.g. ``*H100*`` for ``NVIDIA H100 80GB HBM3``.
    ``sms``: 0 for a whole-GPU entry; for a MIG profile entry, the SMs of the instances it
    prices (e.g. 14 for an A100 ``1g.10gb``): it applies only to MIG instances of that many
    SMs on a board ``match`` fits, and never to whole GPUs.
    """

    model: str
    usd_per_gpu_hour: Positive
    match: tuple[str, ...] = ()
    source: str = ""
    sms: Count = 0


#: Sources of the default card's entries (docs/definitions.md#cost): public on-demand prices per GPU-hour as
#: listed on the date given (third-party summaries of the providers' pages, found 2026-12-01); an entry with
#: no public fixed price says "example list price". Every figure is a placeholder for your contract.
_EXAMPLE = "example list price; replace with your contract"
_RUNPOD = "RunPod on-demand, 2026-03 (deploybase.ai RunPod pricing guide); replace with your contract"
_LAMBDA = "Lambda on-demand, 2026-05-07 (techbytes.app from Lambda's pricing page); replace with your contract"
_MODAL = "Modal, 2026-05-07 (techbytes.app from Modal's pricing page); replace with your contract"
_NO_LIST = "example list price, 2026-12-01 (no public fixed on-demand price found); replace with your contract"
_SPHERON = "Spheron on-demand, 2026-03-17 (spheron.network blog 'H200 vs B200 vs GB200'); replace with your contract"
_RUNPOD_FLEX = "RunPod Serverless flex per-second rate x 3600, read 2026-12-06 (docs.runpod.io/serverless/pricing); " \
    "replace with your contract"

#: The default rate card (``cost.rates``), first fit wins: specific forms (H100 PCIe/NVL, A100 40 GB, RTX
#: 6000 Ada) before the globs that would swallow them (``*H100*``, ``*A100*``, ``*RTX 6000*``). H100 (the default
#: model) keeps $4.00, inside the public on-demand prices its source cites; RTX 3080 keeps its example price.
DEFAULT_RATES = (
    Rate("H100 NVL", 2.53, ("*H100 NVL*", "*H100NVL*"),
         "Vast.ai representative on-demand $2.525, 2026-06 (usagepricing.com); replace with your contract"),
    Rate("H100 PCIe", 2.86, ("*H100 PCIe*", "*H100-PCIE*", "*H100PCIE*"), _LAMBDA),
    Rate("H100", 4.00, ("*H100*",), "public on-demand H100 SXM 2026: Lambda $3.78, Modal $3.95 (2026-05-07, techbytes.app "
         "from their pricing pages), RunPod $4.76 (2026-03, deploybase.ai); kept at $4.00; replace with your contract"),
    Rate("H200", 4.54, ("*H200*",), _SPHERON),
    Rate("B200", 6.03, ("*B200*",), _SPHERON),
    Rate("A100 40GB", 1.48, ("*A100*40GB*", "*A100*40 GB*", "*A100*40G"), _LAMBDA),
    Rate("A100", 2.50, ("*A100*",), "Modal A100 80GB $2.4984, 2026-05-07 (techbytes.app from Modal's pricing page); "
         "replace with your contract"),  # 80 GB and unspecified
    Rate("A10G", 1.01, ("*A10G*",), "example list price, 2026-12-01 (AWS g5.xlarge: one A10G); replace with your "
         "contract"),
    Rate("A10", 0.86, ("*A10", "*A10 *", "*A10-*"), _LAMBDA),
    Rate("L40S", 1.95, ("*L40S*",), _MODAL),
    Rate("A40", 1.22, ("*A40", "*A40 *", "*A40-*"), _RUNPOD_FLEX),
    Rate("L40", 1.22, ("*L40", "*L40 *"), _RUNPOD),
    Rate("L4", 0.80, ("*L4", "*L4 *"), _MODAL),
    Rate("V100", 3.06, ("*V100*",), "example list price, 2026-12-01 (AWS p3.2xlarge: one V100, not re-checked); "
         "replace with your contract"),
    Rate("T4", 0.59, ("*T4", "*T4 *"), _MODAL),
    Rate("MI300X", 1.85, ("*MI300X*",), "Vultr on-demand, 2026-05-18 (cliffcenter.com research note); replace "
         "with your contract"),
    Rate("MI250", 1.50, ("*MI250*",), _NO_LIST),
    Rate("RTX 6000 Ada", 1.00, ("*RTX 6000 Ada*",), _NO_LIST),
    Rate("Quadro RTX 6000", 0.58, ("*RTX 6000*",), _LAMBDA),
    Rate("RTX A6000", 0.55, ("*RTX A6000*",), "Vast.ai from, 2026-05 (fairlane.systems); replace with your contract"),
    Rate("RTX A5000", 0.68, ("*RTX A5000*",), _RUNPOD_FLEX),
    Rate("RTX A4000", 0.58, ("*RTX A4000*",), _RUNPOD_FLEX),
    Rate("RTX 4000 Ada", 0.58, ("*RTX 4000 Ada*",), _RUNPOD_FLEX),
    Rate("RTX 5090", 1.22, ("*RTX 5090*",), _RUNPOD),
    Rate("RTX 4090", 0.60, ("*RTX 4090*",), _RUNPOD),
    Rate("RTX 3090", 0.39, ("*RTX 3090*",), _RUNPOD),
    Rate("RTX 3080", 0.25, ("*RTX 3080*",), _EXAMPLE),
    Rate("RTX 2080 Ti", 0.20, ("*RTX 2080 Ti*",), _NO_LIST),
    Rate("RTX 2070 SUPER", 0.15, ("*RTX 2070 SUPER*",), _NO_LIST),
    Rate("TITAN RTX", 0.30, ("*TITAN RTX*",), _NO_LIST),
)


@dataclass(frozen=True)
class CostConfig:
    """Rate card and month length (docs/definitions.md#cost). ``cluster_rates``: cluster -> model ->
    USD/GPU-hour overrides. ``rates``: the card after layering (a file's entries merge into the card
    below it by model and ``sms``, :func:`merge_rates`, unless it sets ``rates_replace``). ``unlisted``:
    what a GPU without its own entry gets (docs/definitions.md#cost): ``unpriced`` (the default): a GPU naming
    a model not on the card has no dollars, one naming none the default model's rate (``rate_assumed``) unless
    its input says it is not an NVIDIA GPU (then no dollars); ``default``: every such GPU the default model's
    rate (``rate_assumed``; ``assume``, the earlier spelling, is read as ``default``)."""

    hours_per_month: Annotated[Positive, Field(le=744)] = 730.0  # a month has at most 31 x 24 hours
    default_model: str = "H100"
    rates: tuple[Rate, ...] = DEFAULT_RATES
    rates_replace: bool = False
    unlisted: Literal["unpriced", "default", "assume"] = "unpriced"
    cluster_rates: dict[str, dict[str, Positive]] = field(default_factory=dict)

    def __post_init__(self):
        if self.unlisted == "assume":  # the earlier spelling of `default`: one value, one config hash
            object.__setattr__(self, "unlisted", "default")


@dataclass(frozen=True)
class LabelRule:
    """Labels for reports whose path matches ``match`` (fnmatch on the full path or the file name)."""

    match: str
    cluster: Label = None
    job: Label = None
    node: Label = None
    rank: Label = None
    gpu_model: Label = None
    kind: Literal["training", "serving", "unknown"] | None = None  # the job kind (docs/definitions.md#job-kind)

    def fits(self, report_path: str) -> bool:
        """Whether the rule applies to the report ``report_path``: ``match`` fits its path or its file name."""
        return (fnmatch.fnmatch(report_path, self.match)
                or fnmatch.fnmatch(os.path.basename(report_path), self.match))


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds. ``min_gap_ns``: per-stream gaps strictly longer than this are kept (ns).
    ``roster_size``: gaps in each GPU's roster. ``window``: ``auto`` (NVTX iterations, else kernel
    periodicity, else span), ``span``, ``nvtx`` or ``periodic`` (see :mod:`pipeline.analysis.window`).
    ``trim_s``: explicit ``(start, end)`` seconds on the report's clock, exact (:class:`~decimal.Decimal`,
    from text, ints or small floats: :func:`parse_seconds`).
    ``straggler_spread_pct``: max - min idle % within a job above which the highest is flagged.
    ``actionable_pct``: a category under this % of W is archived, not prescribed.
    ``launch_min_share``: a GPU is ``launch``-bound when sub-threshold device-level idle
    holes make up at least this share of its idle (and are actionable). How far the dollar figures can be
    trusted is :class:`ConfidenceConfig`'s (the ``confidence:`` section)."""

    min_gap_ns: Nanoseconds = 1_000_000
    roster_size: Count = 20
    window: Literal["auto", "span", "nvtx", "periodic"] = "auto"
    trim_s: TrimSeconds = None
    straggler_spread_pct: Percent = 10.0
    actionable_pct: Percent = 2.0
    launch_min_share: Share = 0.5


@dataclass(frozen=True)
class ConfidenceConfig:
    """``confidence:``: the thresholds of a row's ``confidence_tier`` (docs/definitions.md#confidence-tiers;
    :func:`pipeline.analysis.confidence.tier`). ``toy``: W shorter than ``toy_max_window_ns`` (ns) or holding
    fewer than ``toy_min_kernels`` kernels. ``high``: at least ``high_min_iterations`` stable iterations over
    a W of at least ``high_min_window_ns`` whose ``iteration_spread_pct`` is at most ``high_max_spread_pct``;
    ``medium`` the same with the ``medium_*`` thresholds; ``low`` every other row. ``toy`` and ``low`` are
    ``low_confidence``. A row of ``unknown`` job kind whose W leaves out more than
    ``unknown_max_left_out_idle_pct`` % of the capture's idle is at most ``low``; one whose W is at least
    ``unknown_mostly_idle_pct`` % idle at most ``medium``. A ``serving`` row is tiered by its bursts of work
    (holes of the kernel union longer than ``serving_burst_gap_ns`` separate them) and W's length instead of
    iterations: ``medium`` at ``serving_medium_min_bursts`` over ``serving_medium_min_window_ns``, ``high`` at
    ``serving_high_min_bursts`` over ``serving_high_min_window_ns``."""

    toy_max_window_ns: Nanoseconds = 50_000_000
    toy_min_kernels: Count = 50
    medium_min_iterations: Count = 5
    medium_min_window_ns: Nanoseconds = 200_000_000
    medium_max_spread_pct: Percent = 50.0
    high_min_iterations: Count = 20
    high_min_window_ns: Nanoseconds = 500_000_000
    high_max_spread_pct: Percent = 10.0
    unknown_max_left_out_idle_pct: Percent = 10.0
    unknown_mostly_idle_pct: Percent = 90.0
    serving_burst_gap_ns: Nanoseconds = 1_000_000
    serving_medium_min_bursts: Count = 20
    serving_medium_min_window_ns: Nanoseconds = 5_000_000_000
    serving_high_min_bursts: Count = 100
    serving_high_min_window_ns: Nanoseconds = 60_000_000_000


@dataclass(frozen=True)
class MeterConfig:
    """``meter:``: the sampled meter shown beside the device-level truth (docs/definitions.md#sampled-meter;
    :func:`pipeline.analysis.meter.sampled_periods`). ``sample_ns``: its sample period (ns); the default,
    166,666,667 ns (1/6 s), is the shortest period NVML's utilisation counter averages over."""

    sample_ns: AtLeastOne = 166_666_667


@dataclass(frozen=True)
class CollectiveConfig:
    """``collective:``: idle inside collectives, waiting for the last rank (docs/definitions.md#collective-wait;
    :mod:`pipeline.analysis.collwait`). ``chronic_share``: a GPU that entered last in more than this share of its
    collective calls is a chronic late rank (``collective_chronic``); the job's late rank (the GPU last most often,
    ``collective_late_rank``: never called its straggler, the most idle GPU) is ``chronic`` when it is, else
    ``transient``."""

    chronic_share: Share = 0.5


@dataclass(frozen=True)
class DiagnosisConfig:
    """``diagnosis:``: the thresholds of the diagnostic rules (docs/definitions.md#diagnosis;
    :mod:`pipeline.analysis.diagnosis`). ``copy_stream_share``: the copies run on the compute stream
    (``data.copy_stream`` ``compute_stream``) when those on it carry at least this share of the copied bytes.
    ``pageable_share``: they are pageable (``data.host_memory``) when pageable memory holds at least this share of
    the bytes of known kind. ``small_copy_bytes``: copies whose median size is under this many bytes are small
    (``data.volume``). ``sync_regular_share``: a sync gap position recurring in at least this share of the kept
    iterations (and in two) is ``regular``. ``break_point_share``: the same kernel before at least this share of a
    GPU's application gaps is a ``fixed`` break point; ``break_point_min_gaps``: fewest gaps it judges. The
    ``launch`` rule rests on ``analysis.launch_min_share`` (the small-gap bucket's share of the idle)."""

    copy_stream_share: Share = 0.5
    pageable_share: Share = 0.5
    small_copy_bytes: Count = 1 << 20
    sync_regular_share: Share = 0.8
    break_point_share: Share = 0.5
    break_point_min_gaps: AtLeastOne = 3


#: Smallest per-worker memory limit (bytes) accepted: below it Dask's pause threshold stalls workers.
MIN_WORKER_MEMORY = 512 * 2**20


@dataclass(frozen=True)
class SlurmConfig:
    """``dask.slurm``: the run's workers are Slurm jobs that dask-jobqueue's ``SLURMCluster``
    submits (:mod:`pipeline.engine.slurm`); the scheduler runs in the gpu-idle process.

    ``jobqueue``: a dask-jobqueue file in dask config format whose ``jobqueue: slurm:`` mapping
    gives the ``SLURMCluster`` options (what one worker job asks for: cores, memory, processes,
    walltime, queue ...; ``deploy/slurm/jobqueue.yaml``), relative to the working directory;
    ``None``: dask's own configuration (``~/.config/dask/jobqueue.yaml``). ``options``:
    ``SLURMCluster`` keyword arguments over the file's. ``jobs``: worker jobs submitted.
    ``min_workers``: Dask workers that must have joined before the reports are sent.
    ``wait_timeout_s``: seconds to wait for them; then the run stops with a message that says
    why none came (jobs pending and Slurm's reason, jobs running whose worker never joined, jobs
    that ended)."""

    # pydantic reads this when it checks a value (a plain dict: pydantic is not imported here).
    __pydantic_config__ = {"extra": "forbid"}

    jobqueue: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    jobs: AtLeastOne = 4
    min_workers: AtLeastOne = 1
    wait_timeout_s: Timeout = 1800.0


#: Values of ``dask.start_method`` (:mod:`multiprocessing` start methods).
START_METHODS = ("fork", "spawn", "forkserver")


@dataclass(frozen=True)
class DaskConfig:
    """``scheduler``: address of a running scheduler (``tcp://host:8786``); ``None`` starts a
    ``distributed.LocalCluster`` with ``n_workers`` processes of ``threads_per_worker`` threads and
    ``memory_limit`` each. ``retries``: times a task that raised is retried (lost worker, I/O error).
    ``memory_factor``: a report is refused up front when its export's size × this factor exceeds
    the worker's memory limit (a clear error row instead of a killed worker); for a gzip PyTorch
    trace the size is that of the JSON it inflates to, read from its gzip trailer (exact for one
    gzip member under 4 GiB, else a lower bound: :mod:`pipeline.inputs.gzip_size`). ``dashboard``:
    where the LocalCluster serves its dashboard (``":8787"``, ``":0"`` for any free port);
    ``None``: none (starting it costs ~0.3 s and it takes CPU from the workers while it runs).
    ``start_method``: how the LocalCluster starts its worker processes (:data:`START_METHODS`):
    ``fork`` (the default; used on Linux only, elsewhere ``spawn``) copies this process, modules
    already imported, so a worker is ready in milliseconds instead of re-importing numpy, pandas,
    pyarrow and the pipeline (~0.6 s of CPU per worker, serial before the first report); ``spawn``
    starts clean interpreters with Dask's worker environment (see
    :func:`pipeline.engine.cluster.worker_start_method` for the trade-offs). ``no_workers_timeout_s``:
    when the cluster has had no worker at all for this many seconds (every worker died, or none
    could start or join), the reports not yet done become error rows and the run ends (``None``:
    wait for workers forever, e.g. for a queue that may take hours to grant them). ``slurm``:
    start the workers as Slurm jobs (:class:`SlurmConfig`); ``None``: no Slurm (a ``scheduler``
    address wins over it). ``scheduler`` is ``tcp://HOST:PORT`` or ``HOST:PORT`` (``tls://`` when
    Dask's configuration holds the TLS files; :func:`check_scheduler_address`); ``connect_timeout_s``:
    seconds to connect to it and complete Dask's handshake, after which the run stops with a
    message saying what the peer did (:func:`pipeline.engine.cluster.check_scheduler`). ``batch_bytes``,
    ``batch_reports``: with many reports, those of at most ``batch_bytes`` bytes are analysed in batches, one task
    of at most ``batch_bytes`` bytes and ``batch_reports`` reports each (the scheduler's cost is per task; each
    report still its own row, a failure its own: :func:`pipeline.engine.map.batches`); ``0`` or ``1``: one task
    per report."""

    scheduler: SchedulerAddress = None
    n_workers: AtLeastOne = 2
    threads_per_worker: AtLeastOne = 1
    memory_limit: str | Count = "auto"
    retries: Count = 1
    memory_factor: Positive = 1.5
    dashboard: str | None = None
    start_method: str = "fork"
    no_workers_timeout_s: Timeout | None = 120.0
    connect_timeout_s: Timeout = 30.0
    slurm: SlurmConfig | None = None
    batch_bytes: Count = 16_000_000
    batch_reports: AtLeastOne = 32

    def __post_init__(self):
        if self.start_method not in START_METHODS:
            raise ConfigError(f"dask.start_method {self.start_method!r} is not one of {', '.join(START_METHODS)}")
        limit = self.memory_limit
        try:
            size = self.memory_limit_bytes
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"dask.memory_limit {limit!r} is not a size like 4GiB ({exc})") from None
        if size is not None and size < MIN_WORKER_MEMORY:
            raise ConfigError(
                f"dask.memory_limit {limit!r} is below {MIN_WORKER_MEMORY // 2**20} MiB: an idle worker already "
                "uses about 200 MiB and Dask pauses a worker at 80 % of its limit, so its tasks would never run")

    @property
    def memory_limit_bytes(self) -> int | None:
        """``memory_limit`` in bytes (``"4GiB"`` -> 4294967296), or None for ``auto``/0 (then only a
        running worker knows its limit). Raises ValueError or TypeError when it is not a size, or
        one beyond :data:`INT64_MAX` bytes (``"1e400"``, ``"1e30"``: no machine's memory)."""
        if self.memory_limit in (None, "auto", 0, "0"):
            return None
        from dask.utils import parse_bytes

        try:
            size = parse_bytes(self.memory_limit)
        except OverflowError:  # dask turns "1e400" into float inf, then int() of it
            raise ValueError("not a finite number of bytes") from None
        if size > INT64_MAX:
            raise ValueError(f"more than {INT64_MAX:,} bytes, beyond any machine's memory")
        return size


@dataclass(frozen=True)
class ExportConfig:
    """The ``.nsys-rep`` -> SQLite export stage. ``nsys``: path of the NVIDIA CLI (``None``: ``GPU_IDLE_NSYS``,
    then ``PATH``, then the repo's ``tools/nsys``); ``cache_dir``: where exports are kept, keyed by the report's
    content hash (``None``: ``~/.cache/gpu-idle/exports``); ``timeout_s``: seconds one export may take;
    ``read_timeout_s``: seconds reading one report (SQLite export or trace) may take, after which it is an
    error row saying so (:mod:`pipeline.load.limits`)."""

    nsys: str | None = None
    cache_dir: str | None = None
    timeout_s: Timeout = 1800.0
    read_timeout_s: Timeout = 600.0


@dataclass(frozen=True)
class CacheConfig:
    """Columnar (Parquet) cache of loaded exports, keyed by content hash and the loader's code. ``dir``: ``None``
    means ``$GPU_IDLE_CACHE`` or ``~/.cache/gpu-idle/columns``; ``enabled: false`` always reads SQLite;
    ``max_gib``: the most its entries (of every build sharing the folder) may hold, in GiB, the least recently
    used removed first (:func:`pipeline.load.cache.prune`); ``None``: no bound."""

    enabled: Flag = True
    dir: str | None = None
    max_gib: Positive | None = 20.0

    @property
    def max_bytes(self) -> int | None:
        """``max_gib`` in bytes (None: no bound)."""
        return None if self.max_gib is None else int(self.max_gib * 2**30)


@dataclass(frozen=True)
class StorageConfig:
    """Reports in object storage (any fsspec URL, e.g. ``s3://bucket/prefix``); see :mod:`pipeline.inputs.storage`.
    ``options``: keyword arguments for the fsspec filesystem of every remote URL (S3: ``endpoint_url``,
    ``profile``, ``anon``, ``client_kwargs``, ``config_kwargs`` ...). ``cache_dir``: worker-local folder
    remote files are staged to before SQLite opens them, keyed by URL, size and ETag (``None``:
    ``$GPU_IDLE_STAGE_CACHE`` or ``~/.cache/gpu-idle/staged``). ``retries``: times a transient failure
    (5xx, throttling, dropped connection) is retried (for S3 by botocore/s3fs themselves);
    ``backoff_s``: first wait between retries made by gpu-idle itself (doubles each time)."""

    options: dict[str, Any] = field(default_factory=dict)
    cache_dir: str | None = None
    retries: Count = 4
    backoff_s: Delay = 0.5


@dataclass(frozen=True)
class SweepConfig:
    """The nightly sweep. ``inputs``: paths, globs or URLs to discover every night;
    ``state_dir``: results, history and nightly outputs (see :mod:`pipeline.runs.sweep`); ``prom``: the
    Prometheus metrics file each night writes (:mod:`pipeline.fleet.prom`; relative: under ``state_dir``;
    empty: none)."""

    inputs: tuple[str, ...] = ()
    state_dir: str = "out/sweep"
    prom: str = ""


def rfc3339_ns(text) -> int | None:
    """RFC 3339 (``2026-12-01T10:00:00Z``) as Unix-epoch ns; None when absent, not a time or without a zone."""
    try:
        moment = datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return int(moment.timestamp()) * 1_000_000_000 + moment.microsecond * 1000


@dataclass(frozen=True)
class AccountingConfig:
    """Who held the GPUs (docs/operations.md#feeding-the-accounting, docs/definitions.md#coverage).
    ``files``: ``sacct --json`` outputs (Slurm) and ``kubectl get pods -o json`` outputs (Kubernetes), told
    apart by their content; ``match``: the rules that join a report to an allocation, tried in this order
    (``environment``: the ``SLURM_JOB_ID`` its capture environment names; ``path``: a Slurm job id in its
    path (``path_job_id``, the first group) or a pod's name as a part of it; ``node``: its ``node`` label
    among the allocation's nodes, one allocation there at the capture's time); ``team_label`` and
    ``user_label``: the pod labels that name a pod's team and user; ``period``: the coverage's period, two
    RFC 3339 times ``[start, end]`` (empty: the accounting's own span; docs/definitions.md#coverage)."""

    files: tuple[str, ...] = ()
    match: tuple[Literal["environment", "path", "node"], ...] = ("environment", "path", "node")
    path_job_id: Regex = r"(?:slurm|job)[-_]?([0-9]+)"
    team_label: str = "team"
    user_label: str = "user"
    period: tuple[str, ...] = ()

    def __post_init__(self):
        times = [rfc3339_ns(t) for t in self.period]
        if self.period and (len(times) != 2 or None in times or times[0] >= times[1]):
            raise ConfigError(f"accounting.period {list(self.period)!r} is not two RFC 3339 times [start, end], "
                              "the start first (e.g. [2026-12-01T00:00:00Z, 2026-12-02T00:00:00Z])")


@dataclass(frozen=True)
class Config:
    """The whole configuration, one frozen section per YAML key (``configs/default.yaml`` spells
    out every default): thresholds and window choice (``analysis``), category rules, window
    rules, the GPU rate card (``cost``), label rules, and where and how the work runs (``dask``,
    ``export``, ``cache``, ``storage``, ``sweep``). Built by :func:`load_config`."""

    analysis: AnalysisConfig = AnalysisConfig()
    confidence: ConfidenceConfig = ConfidenceConfig()
    meter: MeterConfig = MeterConfig()
    collective: CollectiveConfig = CollectiveConfig()
    diagnosis: DiagnosisConfig = DiagnosisConfig()
    categories: CategoryRules = CategoryRules()
    window: WindowRules = WindowRules()
    cost: CostConfig = CostConfig()
    labels: tuple = ()
    dask: DaskConfig = DaskConfig()
    export: ExportConfig = ExportConfig()
    cache: CacheConfig = CacheConfig()
    storage: StorageConfig = StorageConfig()
    sweep: SweepConfig = SweepConfig()
    accounting: AccountingConfig = AccountingConfig()

    def labels_for(self, report_path: str) -> dict:
        """Merge every label rule matching ``report_path`` (later rules win).

        Defaults: cluster ``default``, job = the file name without its input kind's suffix
        (:func:`pipeline.kinds.stem`: ``job7.nsys-rep``, ``job7.sqlite3``, ``job7.pt.trace.json.gz`` -> ``job7``).
        """
        name = os.path.basename(report_path)
        out = {"cluster": "default", "job": kinds.stem(name), "node": "", "rank": "", "gpu_model": None, "kind": None}
        for rule in self.labels:
            if rule.fits(report_path):
                for key in ("cluster", "job", "node", "rank", "gpu_model", "kind"):
                    value = getattr(rule, key)
                    if value is not None:
                        out[key] = str(value)
        return out

    def job_labelled(self, report_path: str) -> bool:
        """A label rule fitting ``report_path`` names its job: that job stands, whatever the files say
        (:func:`pipeline.fleet.grouping.group_jobs`)."""
        return any(rule.job is not None and rule.fits(report_path) for rule in self.labels)

    def unused_rules(self, report_paths) -> list[str]:
        """What in the label rules and the cluster rates matches nothing, one text each naming it: a
        label rule that fits none of ``report_paths`` (the run's reports; none found: not judged), a ``cost.cluster_rates``
        cluster that no label rule gives (nor ``default``), a model there that names no rate-card
        entry (an override applies to the entry of that exact model name). Such a setting changes no
        price: a typo, or a rule for reports that are gone."""
        out = [f"labels.{i} (match {rule.match!r}) fits none of the {len(report_paths)} report(s): it labels nothing"
               for i, rule in enumerate(self.labels) if report_paths and not any(rule.fits(p) for p in report_paths)]
        clusters = {"default"} | {str(rule.cluster) for rule in self.labels if rule.cluster is not None}
        models = {r.model for r in self.cost.rates}
        for cluster, rates in (self.cost.cluster_rates or {}).items():
            if cluster not in clusters:
                out.append(f"cost.cluster_rates.{cluster}: no label rule gives cluster {cluster!r} "
                           f"(clusters: {', '.join(sorted(clusters))}): its rates price nothing")
            for model in rates or {}:
                if model not in models:
                    out.append(f"cost.cluster_rates.{cluster}.{model}: no rate-card entry is named {model!r} "
                               "(an override names a cost.rates model exactly): it prices nothing")
        return out


def _merge(base: dict, over: dict) -> dict:
    """``over`` layered over ``base``: mappings merge key by key, lists and scalars replace, except the
    rate card (``cost.rates``), which merges by entry (:func:`merge_rates`) unless ``over`` sets
    ``cost.rates_replace``."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    cost, below = over.get("cost"), base.get("cost")
    if (isinstance(cost, dict) and isinstance(below, dict) and not cost.get("rates_replace")
            and isinstance(cost.get("rates"), list) and isinstance(below.get("rates"), list)):
        out["cost"]["rates"] = merge_rates(below["rates"], cost["rates"])
    return out


def _rate_key(entry) -> tuple:
    """What makes two rate-card entries (mappings) the same entry: the model (case and spaces aside)
    and the MIG profile's ``sms`` (0: a whole GPU); an entry that is no mapping is never the same."""
    if not isinstance(entry, dict):
        return (id(entry),)
    return str(entry.get("model", "")).strip().casefold(), str(entry.get("sms") or 0)


def merge_rates(card: list, entries: list) -> list:
    """A rate file's ``entries`` layered over the rate ``card`` below it (both lists of mappings, as
    written in YAML; docs/definitions.md#cost): an entry of the same model and ``sms`` as a card entry
    takes that entry's place, keeping its ``match`` globs when it gives none; the other entries come
    first, in the file's order (so they fit before the card's globs, first fit wins); every other card
    entry stays. Returns the new list; raises nothing (values are checked when the card is built)."""
    own = {_rate_key(e): e for e in entries}
    merged = []
    for entry in card:
        over = own.pop(_rate_key(entry), None)
        if over is None:
            merged.append(entry)
        else:
            keep = {"match": entry["match"]} if isinstance(entry, dict) and "match" in entry else {}
            merged.append({**keep, **over})
    return [e for e in entries if _rate_key(e) in own] + merged


def _card_dicts() -> list:
    """The built-in rate card (:data:`DEFAULT_RATES`) as the mappings a YAML file writes."""
    return [{"model": r.model, "usd_per_gpu_hour": r.usd_per_gpu_hour, "match": list(r.match), "source": r.source,
             "sms": r.sms} for r in DEFAULT_RATES]


@functools.lru_cache(maxsize=None)
def _adapter(cls):
    from pydantic import TypeAdapter

    _value_types()
    return TypeAdapter(cls)


def _number_hint(value) -> str:
    """For a setting given as text that reads as a number: say so, and how to write it."""
    try:
        number = Decimal(value.strip()) if isinstance(value, str) else None
    except InvalidOperation:
        return ""
    if number is None or not number.is_finite():
        return ""
    return f" (text, not a number; write it with digits only: {format(number.normalize(), 'f')})"


def _problem(error: dict, section: str) -> str:
    """One pydantic error as ``section.key: what is expected, got value``."""
    key = ".".join(str(part) for part in (section, *error["loc"]))
    expected = error["msg"].removeprefix("Value error, ").replace("Input should be", "should be")
    if "input" not in error or error["type"] == "missing":
        return f"{key}: {expected}"
    return f"{key}: {expected}, got {error['input']!r}{_number_hint(error['input'])}"


def _one_of_its_words(field: dataclasses.Field, value) -> bool:
    """Whether ``value`` is, exactly, one of the words of a field declared ``Literal[...]`` (as ``--window
    span`` gives ``analysis.window``): a value pydantic would take as it is, so :func:`_build` needs no
    pydantic for it. Any other declaration (a value type :func:`_value_types` makes, a union, a tuple)
    says False, and pydantic checks the value."""
    try:
        declared = eval(field.type, globals()) if isinstance(field.type, str) else field.type  # noqa: S307 - our text
    except Exception:  # noqa: BLE001 - a value type not made yet (NameError): pydantic's to check
        return False
    return (get_origin(declared) is Literal
            and any(type(value) is type(word) and value == word for word in get_args(declared)))


def _taken_as_is(field: dataclasses.Field, value) -> bool:
    """Whether ``value`` is one pydantic would take as it is for ``field``, so that :func:`_build` needs no
    pydantic: a whole number (an ``int``, never a bool) within the bounds of a field declared as one of
    :data:`WHOLE_NUMBERS` (``--workers 2``), or one of the words of a ``Literal`` field (:func:`_one_of_its_words`).
    Anything else says False, and pydantic checks the value."""
    bounds = WHOLE_NUMBERS.get(field.type) if isinstance(field.type, str) else None
    if bounds is not None:
        return type(value) is int and bounds[0] <= value <= bounds[1]
    return _one_of_its_words(field, value)


def _build(cls, data: dict, where: str, section: str):
    """``cls`` (a section's dataclass) from its YAML mapping, every value checked against the field's
    type (pydantic; a mapping whose every value pydantic would take as it is, :func:`_taken_as_is`, such as the
    command line's ``--window`` and ``--workers``, needs no check: built as given, without importing pydantic, ~0.2 s).
    Raises :class:`ConfigError` ``<where>: <section>.<key>: <what is expected>, got <value>``
    (every problem of the section, joined by ``; ``)."""
    if data is None or data == {}:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: {section}: expected a mapping, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ConfigError(f"{where}: {section}: unknown key(s) {sorted(unknown)}; allowed: {sorted(names)}")
    required = {n for n, f in names.items() if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    if required <= set(data) and all(_taken_as_is(names[key], value) for key, value in data.items()):
        return _built(lambda: cls(**data), (), where, section)  # nothing for pydantic to say
    return _build_checked(cls, data, where, section)


def _build_checked(cls, data: dict, where: str, section: str):
    """:func:`_build` with every value checked by pydantic."""
    from pydantic import ValidationError

    return _built(lambda: _adapter(cls).validate_python(data), ValidationError, where, section)


def _built(build, invalid, where: str, section: str):
    """``build()``, its errors (pydantic's ``invalid``, a dataclass's own check) as :class:`ConfigError`."""
    try:
        return build()
    except invalid as exc:
        raise ConfigError(f"{where}: " + "; ".join(_problem(e, section) for e in exc.errors())) from None
    except ConfigError as exc:  # a dataclass's own check (__post_init__); its text may name the key already
        named = str(exc).startswith(f"{section}.")
        raise ConfigError(f"{where}: {exc}" if named else f"{where}: {section}: {exc}") from exc


def _check_unique_rates(entries: list, where: str) -> None:
    """Raise ConfigError when one file's ``cost.rates`` prices one model (and ``sms``) twice, naming both
    places: only one of them would be used (:func:`merge_rates` keeps one entry per model)."""
    seen: dict = {}
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "model" not in entry:
            continue  # its own check names what is wrong with it
        first = seen.setdefault(_rate_key(entry), i)
        if first != i:
            sms = f" (sms {entry.get('sms')})" if entry.get("sms") else ""
            raise ConfigError(f"{where}: cost.rates.{first} and cost.rates.{i} both price {entry['model']!r}{sms} "
                              f"(at {entries[first].get('usd_per_gpu_hour')!r} and {entry.get('usd_per_gpu_hour')!r} "
                              "USD/GPU-hour): only one would be used; keep one entry per model")


def check_default_model(cost: CostConfig, where: str) -> None:
    """Raise ConfigError unless ``cost.default_model`` has a whole-GPU entry (``sms`` 0) on the rate card:
    every GPU with no entry of its own is priced at it (``cost.unlisted: assume``), so a card that lacks
    it (a rate file with ``rates_replace`` and no such entry) would fail every such GPU at run time."""
    if any(r.model == cost.default_model and not r.sms for r in cost.rates):
        return
    models = ", ".join(dict.fromkeys(r.model for r in cost.rates if not r.sms)) or "none"
    replaced = " (cost.rates_replace: the card is the file's entries alone)" if cost.rates_replace else ""
    raise ConfigError(f"{where}: cost.default_model: {cost.default_model!r} has no whole-GPU entry on the rate "
                      f"card{replaced}; its models: {models}. Add an entry for it, or name one of them")


def config_from_dict(data: dict, where: str = "<config>") -> Config:
    """Build a :class:`Config` from a parsed YAML mapping, checking every value (types, ranges,
    patterns). Raises :class:`ConfigError` naming ``where``, the key and what is expected."""
    data = data or {}
    allowed = {"analysis", "confidence", "meter", "collective", "diagnosis", "categories", "window", "cost", "labels", "dask", "export", "cache", "storage", "sweep", "accounting"}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    cost = data.get("cost")
    if isinstance(cost, dict) and isinstance(cost.get("rates"), list):
        _check_unique_rates(cost["rates"], where)
        rates = cost["rates"] if cost.get("rates_replace") else merge_rates(_card_dicts(), cost["rates"])
        for i, r in enumerate(cost["rates"]):  # each entry checked as written, so errors name its place
            _build(Rate, r, where, f"cost.rates.{i}")
        cost = {**cost, "rates": tuple(_build(Rate, r, where, "cost.rates") for r in rates)}
    labels = data.get("labels") or []
    if not isinstance(labels, list):
        raise ConfigError(f"{where}: labels: expected a list of rules, got {type(labels).__name__}")
    sections = {name: _build(cls, data.get(name), where, name) for name, cls in (
        ("analysis", AnalysisConfig), ("confidence", ConfidenceConfig), ("meter", MeterConfig), ("collective", CollectiveConfig), ("diagnosis", DiagnosisConfig), ("categories", CategoryRules), ("window", WindowRules), ("dask", DaskConfig),
        ("export", ExportConfig), ("cache", CacheConfig), ("storage", StorageConfig), ("sweep", SweepConfig),
        ("accounting", AccountingConfig))}
    return Config(cost=_build(CostConfig, cost, where, "cost"),
                  labels=tuple(_build(LabelRule, r, where, f"labels.{i}") for i, r in enumerate(labels)),
                  **sections)


#: The most nodes (values, keys, list items) that YAML aliases may add to a file when expanded:
#: an anchor shared a few times is fine, a "billion laughs" (9 levels of 9 aliases: 387 million
#: strings from 10 lines) is refused before anything expands it.
MAX_ALIAS_NODES = 10_000


def _expanded_size(node, sizes: dict, open_: set) -> int:
    """Nodes of the YAML ``node`` with every alias expanded (aliases are the same node object met
    again); ``sizes``: memo by ``id``; ``open_``: nodes being counted (a node met inside itself is
    an alias that refers to itself). Raises ValueError for such a loop."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_:
        raise ValueError("an alias refers to itself (its anchor's own value contains it)")
    open_.add(key)
    total = 1
    if isinstance(node.value, list):
        for item in node.value:
            for child in (item if isinstance(item, tuple) else (item,)):
                total += _expanded_size(child, sizes, open_)
    open_.discard(key)
    sizes[key] = total
    return total


#: The largest config file read (bytes): a real one is a few KiB; a trace or a device given by mistake
#: (``--config /dev/zero``, a 26 MB trace) is refused before YAML parses it.
MAX_CONFIG_BYTES = 1 << 20


def _read_bounded(path, what: str) -> bytes:
    """The bytes of the regular file ``path``, at most :data:`MAX_CONFIG_BYTES`. Opened without waiting
    (a FIFO with no writer would block ``open``). Raises ConfigError when it is not a regular file (a
    device, a FIFO, a folder) or is larger; OSError when it cannot be read."""

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a device" if stat.S_ISCHR(st.st_mode)
                    or stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket"
                    if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise ConfigError(f"{path}: cannot read {what}: {kind}, not a regular file")
        raw = fh.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: cannot read {what}: {max(st.st_size, len(raw)):,} bytes, more than the "
                          f"{MAX_CONFIG_BYTES:,} a config file may hold (is it a config file?)")
    return raw


def _check_unique_keys(loader, node, path) -> None:
    """Raise ConfigError when the YAML mapping ``node`` holds one key twice, naming both lines (YAML
    would keep the last silently). Keys merged in with ``<<`` may be overridden; the mapping's own may not."""
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not hasattr(key_node.value, "strip"):
            continue  # a merge, or a key that is no scalar (YAML itself refuses it as unhashable)
        key = loader.construct_object(key_node, deep=True)
        try:
            first = seen.setdefault(key, key_node)
        except TypeError:
            continue
        if first is not key_node:
            raise ConfigError(f"{path}: duplicate key {key!r} at line {first.start_mark.line + 1} and line "
                              f"{key_node.start_mark.line + 1}: YAML would keep only the last; write it once")


def load_yaml(path, what: str = "config"):
    """The data of the YAML file ``path`` (safe types only): a ``--config`` file, or one a config
    names (``dask.slurm.jobqueue``); ``what`` names it in the message ``cannot read <what>``.

    Aliases may not add more than :data:`MAX_ALIAS_NODES` nodes when expanded, nor refer to
    themselves: checked on the composed document, before anything is built from it.

    Raises:
        ConfigError: ``<path>: <why>``: the file cannot be read, is not a regular file (a device, a
            FIFO), holds more than :data:`MAX_CONFIG_BYTES`, is not UTF-8 text (a binary file), is not
            valid YAML, holds one key twice in a mapping (both lines named), nests too deeply, or its
            aliases expand too far.
    """
    import yaml  # only config files need it (the defaults are in code)

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            _check_unique_keys(self, node, path)
            return super().construct_mapping(node, deep=deep)

        def compose_document(self):
            node = super().compose_document()
            sizes: dict = {}  # id -> expanded size, for every distinct node: the nodes written in the file
            try:
                expanded = _expanded_size(node, sizes, set()) if node is not None else 0
            except ValueError as exc:
                raise ConfigError(f"{path}: YAML aliases: {exc}") from None
            if expanded - len(sizes) > MAX_ALIAS_NODES:
                raise ConfigError(
                    f"{path}: YAML aliases would expand its {len(sizes):,} node(s) to {expanded:,}: more than "
                    f"{MAX_ALIAS_NODES:,} added by aliases are refused (write the values out, or share fewer)")
            return node

    try:
        raw = _read_bounded(path, what)
        return yaml.load(raw.decode("utf-8"), Loader=Loader)  # noqa: S506 - Loader is a SafeLoader
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what} ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a YAML text file (byte {exc.start} is not UTF-8 text: {exc.reason}); "
                          f"is it a binary file?") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML ({exc})") from exc
    except RecursionError:
        raise ConfigError(f"{path}: invalid YAML (nested too deeply)") from None


def load_config(paths=(), overrides: dict | None = None) -> Config:
    """Read YAML files in order over the defaults, then apply ``overrides``.

    ``overrides`` is a nested mapping like ``{"analysis": {"min_gap_ns": 500000}}``
    (command-line flags). Raises :class:`ConfigError` naming the file.
    """
    merged: dict = {}
    datas = []
    for path in paths:
        data = load_yaml(path, "config") or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        config_from_dict(data, path)  # validate each file on its own, so errors name it
        merged = _merge(merged, data)
        datas.append(data)
    merged = _merge(merged, overrides or {})
    cfg = config_from_dict(merged, ", ".join(map(str, paths)) or "<defaults>")
    # The card as layered: the last file that shapes it (its entries, their replacement, the default model) is named.
    shaping = [p for p, d in zip(paths, datas) if isinstance(d.get("cost"), dict)
               and {"rates", "rates_replace", "default_model"} & set(d["cost"])]
    check_default_model(cfg.cost, str(shaping[-1]) if shaping else ", ".join(map(str, paths)) or "<defaults>")
    return cfg
