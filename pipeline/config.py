"""Configuration: YAML files -> frozen dataclasses.

Layering: the built-in defaults below, then each ``--config`` file in order
(mappings are merged key by key; lists and scalars replace), then command-line
flags. ``configs/default.yaml`` spells the defaults out; a test keeps it equal
to these dataclasses.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import os
from dataclasses import dataclass, field

import yaml


@dataclass(frozen=True)
class CategoryRules:
    """What makes a gap ``sync``, ``data`` or ``comm`` (SPEC "Category").

    ``sync_apis``/``data_apis``: exact normalised CUDA API names.
    ``*_min_fraction``: the share of the gap a witness must cover (0..1).
    ``collective_kernel``: regex (case-insensitive, ``re.search``) on the kernel
    name before the gap that marks it as a collective.
    ``quiet_max_fraction``: the CUDA API side is "quiet" in a gap when all calls
    together cover less than this share of it (``boundary``).
    ``periodic_min_ns`` / ``periodic_min_factor``: a ``periodic`` candidate gap is
    at least this long and this many times the median gap.
    ``profiler_overheads``: ENUM_CUPTI_OVERHEAD_TYPE names of the CUPTI_ACTIVITY_KIND_OVERHEAD rows
    that are the profiler's (every PROFILER_OVERHEAD row is); ``profiler_min_fraction``: the share
    of a gap they must cover, where the GPU is dark (no copy engine either), for ``profiler``.
    """

    sync_apis: tuple = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
                        "cudaMemcpy", "cudaMemcpy2D", "cudaMemcpy3D", "cudaMemcpyFromSymbol",
                        "cudaMemcpyToSymbol", "cuStreamSynchronize", "cuCtxSynchronize",
                        "cuEventSynchronize")
    data_apis: tuple = ("cudaMemcpyAsync", "cudaMemcpy2DAsync", "cudaMemcpy3DAsync", "cudaMemcpyToSymbolAsync",
                        "cudaMemcpyFromSymbolAsync", "cudaHostAlloc", "cudaMallocHost", "cudaHostRegister",
                        "cuMemcpyHtoDAsync", "cuMemcpyHtoD", "cuMemHostAlloc", "cuMemAllocHost")
    sync_min_fraction: float = 0.5
    data_min_fraction: float = 0.5
    collective_kernel: str = r"nccl|allreduce|allgather|reducescatter|all_to_all|alltoall|broadcast"
    quiet_max_fraction: float = 0.5
    periodic_min_ns: int = 50_000_000
    periodic_min_factor: float = 5.0
    profiler_overheads: tuple = ("OVERHEAD_CUPTI_BUFFER_FLUSH", "OVERHEAD_CUPTI_INSTRUMENTATION",
                                 "OVERHEAD_CUPTI_RESOURCE", "OVERHEAD_COMMAND_BUFFER_FULL")
    profiler_min_fraction: float = 0.5


@dataclass(frozen=True)
class WindowRules:
    """Parameters of the window rules (see module docstring). Lengths in ns."""

    iteration_patterns: tuple = (r"[Ii]teration[ _#:]?\d+", r"ProfilerStep#\d+", r"train_step(?:[ _#]\d+)?",
                                 r"[Ss]tep[ _#]?\d+")
    min_iteration_ns: int = 1_000_000
    warmup_iterations: int = 1
    outlier_factor: float = 1.5
    min_iterations: int = 3
    max_iterations: int = 0  # 0 = keep the whole longest run
    periodic_min_regular_share: float = 0.8


class ConfigError(Exception):
    """A configuration file is unreadable or holds an invalid value (message names the file)."""


@dataclass(frozen=True)
class Rate:
    """One rate-card entry: USD per GPU-hour for GPUs whose model matches.

    ``match``: glob patterns (case-insensitive, ``fnmatch``) on the GPU model
    name as the export gives it, e.g. ``*H100*`` for ``NVIDIA H100 80GB HBM3``.
    """

    model: str
    usd_per_gpu_hour: float
    match: tuple = ()
    source: str = ""


@dataclass(frozen=True)
class CostConfig:
    """Rate card and month length. ``cluster_rates``: cluster -> model -> USD/GPU-hour overrides."""

    hours_per_month: float = 730.0
    default_model: str = "H100"
    rates: tuple = (
        Rate("H100", 4.00, ("*H100*",), "example list price; replace with your contract"),
        Rate("A100", 2.50, ("*A100*",), "example list price; replace with your contract"),
        Rate("L40S", 1.50, ("*L40S*",), "example list price; replace with your contract"),
        Rate("RTX 3080", 0.25, ("*RTX 3080*",), "example list price; replace with your contract"),
    )
    cluster_rates: dict = field(default_factory=dict)


@dataclass(frozen=True)
class LabelRule:
    """Labels for reports whose path matches ``match`` (fnmatch on the full path or the file name)."""

    match: str
    cluster: str | None = None
    job: str | None = None
    node: str | None = None
    rank: str | None = None
    gpu_model: str | None = None


@dataclass(frozen=True)
class AnalysisConfig:
    """Thresholds. ``min_gap_ns``: per-stream gaps strictly longer than this are kept (ns).
    ``roster_size``: gaps in each GPU's roster. ``window``: ``auto`` (NVTX iterations, else kernel
    periodicity, else span), ``span``, ``nvtx`` or ``periodic`` (see :mod:`pipeline.analysis.window`). ``trim_s``: explicit ``(start, end)`` seconds on the report's clock.
    ``straggler_spread_pct``: max - min idle % within a job above which the highest is flagged.
    ``actionable_pct``: a category under this % of W is filed, not acted on.
    ``launch_min_share``: a GPU is ``launch``-bound when sub-threshold device-level idle
    holes make up at least this share of its idle (and are actionable)."""

    min_gap_ns: int = 1_000_000
    roster_size: int = 20
    window: str = "auto"
    trim_s: tuple | None = None
    straggler_spread_pct: float = 10.0
    actionable_pct: float = 2.0
    launch_min_share: float = 0.5


#: Smallest per-worker memory limit (bytes) accepted: below it Dask's pause threshold stalls workers.
MIN_WORKER_MEMORY = 512 * 2**20


#: Values of ``dask.start_method`` (:mod:`multiprocessing` start methods).
START_METHODS = ("fork", "spawn", "forkserver")


@dataclass(frozen=True)
class DaskConfig:
    """``scheduler``: address of a running scheduler (``tcp://host:8786``); ``None`` starts a
    ``distributed.LocalCluster`` with ``n_workers`` processes of ``threads_per_worker`` threads and
    ``memory_limit`` each. ``retries``: times a task that raised is retried (lost worker, I/O error).
    ``memory_factor``: a report is refused up front when its export's size × this factor exceeds
    the worker's memory limit (a clear error row instead of a killed worker). ``dashboard``:
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
    wait for workers forever, e.g. for a queue that may take hours to grant them)."""

    scheduler: str | None = None
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str = "auto"
    retries: int = 1
    memory_factor: float = 1.5
    dashboard: str | None = None
    start_method: str = "fork"
    no_workers_timeout_s: float | None = 120.0

    def __post_init__(self):
        if self.start_method not in START_METHODS:
            raise ConfigError(f"dask.start_method {self.start_method!r} is not one of {', '.join(START_METHODS)}")
        limit = self.memory_limit
        try:
            size = self.memory_limit_bytes
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"dask.memory_limit {limit!r} is not a size like 4GiB ({exc})") from exc
        if size is not None and size < MIN_WORKER_MEMORY:
            raise ConfigError(
                f"dask.memory_limit {limit!r} is below {MIN_WORKER_MEMORY // 2**20} MiB: an idle worker already "
                "uses about 200 MiB and Dask pauses a worker at 80 % of its limit, so its tasks would never run")

    @property
    def memory_limit_bytes(self) -> int | None:
        """``memory_limit`` in bytes (``"4GiB"`` -> 4294967296), or None for ``auto``/0 (then only a
        running worker knows its limit). Raises ValueError or TypeError when it is not a size."""
        if self.memory_limit in (None, "auto", 0, "0"):
            return None
        from dask.utils import parse_bytes

        return parse_bytes(self.memory_limit)


@dataclass(frozen=True)
class ExportConfig:
    """The ``.nsys-rep`` -> SQLite export stage. ``nsys``: path of the NVIDIA CLI (``None``: ``GPU_IDLE_NSYS``,
    then ``PATH``, then the repo's ``tools/nsys``); ``cache_dir``: where exports are kept, keyed by the report's
    content hash (``None``: ``~/.cache/gpu-idle/exports``); ``timeout_s``: seconds one export may take."""

    nsys: str | None = None
    cache_dir: str | None = None
    timeout_s: float = 1800.0


@dataclass(frozen=True)
class CacheConfig:
    """Columnar (Parquet) cache of loaded exports, keyed by content hash. ``dir``: ``None`` means
    ``$GPU_IDLE_CACHE`` or ``~/.cache/gpu-idle/columns``; ``enabled: false`` always reads SQLite."""

    enabled: bool = True
    dir: str | None = None


@dataclass(frozen=True)
class StorageConfig:
    """Reports in object storage (any fsspec URL, e.g. ``s3://bucket/prefix``); see :mod:`pipeline.inputs.storage`.
    ``options``: keyword arguments for the fsspec filesystem of every remote URL (S3: ``endpoint_url``,
    ``profile``, ``anon``, ``client_kwargs``, ``config_kwargs`` ...). ``cache_dir``: worker-local folder
    remote files are staged to before SQLite opens them, keyed by URL, size and ETag (``None``:
    ``$GPU_IDLE_STAGE_CACHE`` or ``~/.cache/gpu-idle/staged``). ``retries``: times a transient failure
    (5xx, throttling, dropped connection) is retried (for S3 by botocore/s3fs themselves);
    ``backoff_s``: first wait between retries made by gpu-idle itself (doubles each time)."""

    options: dict = field(default_factory=dict)
    cache_dir: str | None = None
    retries: int = 4
    backoff_s: float = 0.5


@dataclass(frozen=True)
class SweepConfig:
    """The nightly sweep. ``inputs``: paths, globs or URLs to discover every night;
    ``state_dir``: results, history and nightly outputs (see :mod:`pipeline.runs.sweep`)."""

    inputs: tuple = ()
    state_dir: str = "out/sweep"


@dataclass(frozen=True)
class Config:
    """The whole configuration, one frozen section per YAML key (``configs/default.yaml`` spells
    out every default): thresholds and window choice (``analysis``), category rules, window
    rules, the GPU rate card (``cost``), label rules, and where and how the work runs (``dask``,
    ``export``, ``cache``, ``storage``, ``sweep``). Built by :func:`load_config`."""

    analysis: AnalysisConfig = AnalysisConfig()
    categories: CategoryRules = CategoryRules()
    window: WindowRules = WindowRules()
    cost: CostConfig = CostConfig()
    labels: tuple = ()
    dask: DaskConfig = DaskConfig()
    export: ExportConfig = ExportConfig()
    cache: CacheConfig = CacheConfig()
    storage: StorageConfig = StorageConfig()
    sweep: SweepConfig = SweepConfig()

    def labels_for(self, report_path: str) -> dict:
        """Merge every label rule matching ``report_path`` (later rules win).

        Defaults: cluster ``default``, job = the file name without extension.
        """
        name = os.path.basename(report_path)
        stem = name
        for suffix in (".sqlite", ".nsys-rep", ".sqlite3", ".db"):
            if stem.endswith(suffix):
                stem = stem[: -len(suffix)]
                break
        out = {"cluster": "default", "job": stem, "node": "", "rank": "", "gpu_model": None}
        for rule in self.labels:
            if fnmatch.fnmatch(report_path, rule.match) or fnmatch.fnmatch(name, rule.match):
                for key in ("cluster", "job", "node", "rank", "gpu_model"):
                    value = getattr(rule, key)
                    if value is not None:
                        out[key] = str(value)
        return out


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _build(cls, data: dict, where: str):
    if data is None:
        return cls()
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    names = {f.name: f for f in dataclasses.fields(cls)}
    unknown = set(data) - set(names)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}; allowed: {sorted(names)}")
    # YAML lists become tuples so the frozen dataclasses stay hashable.
    kwargs = {key: tuple(value) if isinstance(value, list) else value for key, value in data.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ConfigError) as exc:
        raise ConfigError(f"{where}: {exc}") from exc


def config_from_dict(data: dict, where: str = "<config>") -> Config:
    """Build a :class:`Config` from a parsed YAML mapping. Raises :class:`ConfigError`."""
    data = data or {}
    allowed = {"analysis", "categories", "window", "cost", "labels", "dask", "export", "cache", "storage", "sweep"}
    unknown = set(data) - allowed
    if unknown:
        raise ConfigError(f"{where}: unknown section(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    cost = dict(data.get("cost") or {})
    if "rates" in cost:
        cost["rates"] = tuple(_build(Rate, r, f"{where}: cost.rates") for r in cost["rates"])
    labels = tuple(_build(LabelRule, r, f"{where}: labels") for r in (data.get("labels") or []))
    return Config(
        analysis=_build(AnalysisConfig, data.get("analysis"), f"{where}: analysis"),
        categories=_build(CategoryRules, data.get("categories"), f"{where}: categories"),
        window=_build(WindowRules, data.get("window"), f"{where}: window"),
        cost=_build(CostConfig, cost, f"{where}: cost"),
        labels=labels,
        dask=_build(DaskConfig, data.get("dask"), f"{where}: dask"),
        export=_build(ExportConfig, data.get("export"), f"{where}: export"),
        cache=_build(CacheConfig, data.get("cache"), f"{where}: cache"),
        storage=_build(StorageConfig, data.get("storage"), f"{where}: storage"),
        sweep=_build(SweepConfig, data.get("sweep"), f"{where}: sweep"),
    )


def load_config(paths=(), overrides: dict | None = None) -> Config:
    """Read YAML files in order over the defaults, then apply ``overrides``.

    ``overrides`` is a nested mapping like ``{"analysis": {"min_gap_ns": 500000}}``
    (command-line flags). Raises :class:`ConfigError` naming the file.
    """
    merged: dict = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                data = yaml.safe_load(fh) or {}
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config ({exc.strerror})") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: invalid YAML ({exc})") from exc
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        config_from_dict(data, path)  # validate each file on its own, so errors name it
        merged = _merge(merged, data)
    merged = _merge(merged, overrides or {})
    return config_from_dict(merged, ", ".join(map(str, paths)) or "<defaults>")
