"""Columnar cache of loaded reports: Parquet files keyed by the export's content hash (with its
``-wal`` / hot ``-journal`` sidecars when they hold part of its committed state).

The first load of an export reads SQLite (only the columns the analysis needs)
and writes each table of the :class:`~pipeline.model.Report` as Parquet into
``<cache dir>/<sha256 of the export>-v<LOADER_VERSION>/``; a rerun on the same
bytes reads the Parquet files instead, whatever the file is called now. The
folder is written under a temporary name and renamed when complete, so a
killed run never leaves a half cache that a later run would trust.

Each entry holds :data:`SUMS` (the SHA-256 of each of its files, written last:
:mod:`pipeline.checksums`), checked as the files are read: an entry whose bytes changed
since (a value edited in place, a file replaced by another Parquet, a truncated or
missing file) or that has no checksums (an earlier version's) is a cache miss: removed,
read again from the export and written anew, with one line on stderr saying so, never a
failure and never a number from the bad entry.

Checksums vouch only that the bytes are the ones written; what they hold is checked too. Each file of an
entry records (Parquet key-value metadata; ``report.json`` keys) the content key of the export it was
loaded from (:data:`SOURCE_KEY`) and the digest of the loader code that wrote it (:data:`LOADER_KEY`:
:func:`pipeline.code_keys.loader_code`). An entry whose source is not the export being loaded (two entries
swapped or renamed), written by other loader code (an older or newer build, whatever
:data:`LOADER_VERSION` says), recording neither, or with a frame that is not what a loader gives
(:func:`pipeline.model.frame_problem`: a missing column, times as text ...) is a miss like a changed one.
:data:`LOADER_VERSION` stays in the entry's name (a bump still starts new entries) but no longer decides
alone whether an entry is served. A report read from an entry records it in
``Report.sources`` (its stored result then records it too: :mod:`pipeline.store.results`).

Cache dir: the ``cache.dir`` config value, else ``$GPU_IDLE_CACHE``, else
``$XDG_CACHE_HOME/gpu-idle/columns`` (``~/.cache/gpu-idle/columns``).
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .. import kinds
from ..code_keys import loader_code
from ..checksums import EntryCheckFailed, note, read_checked, read_sums, seal, source
from ..model import Report, RowWarning, WarningCode, frame_problem
from .kineto import load_kineto
from .report import load_report
from ..snapshot import snapshot_key

#: Bump when the loader's output changes meaning, so old caches are not reused.
LOADER_VERSION = 23  # 23: meta's host_source says when an export naming no host has rows not timed on a host's clock (a node label then gives it no clock); 22: meta holds the export's host (TARGET_INFO_SYSTEM_ENV Hostname) when its rows are on the host's clock; 21: meta holds the scheduler job (SLURM_JOB_ID) the capture's environment names; 20: launches inside a graph capture range (cudaStreamBeginCapture … EndCapture) are not lost; 19: ANALYSIS_DETAILS the rows fit on neither clock is said even beside a session start; the capture-disagrees warning names the bound judged wrong; dropped rows wholly outside the kernels' time are dropped-stray-rows (ok); 18: CUDA graph executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) are kernel rows with graph True, meta holds the capture's --cuda-graph-trace mode; 17: a time or id column holding REAL, TEXT or BLOB is an error row (not an integer), BLOB text is decoded; 12: meta holds the world size the capture's launch gives (pipeline.load.ranks); 13: diagnostics carry their process; a stated capture the rows do not fit is not trusted; 14: meta names where the world size was read (world_size_source), an unreadable one says nothing; kernel_aliases (an export's other kernel names); 15: without a trusted stated bound the rows' body decides (steps <= max(1 s, its extent)), a stated capture the rows do not fit is said; torchrun's own options only; 16: a pause no longer than the work on both sides of it stays in the rows' own run
#: Bump when the PyTorch profiler (Kineto) loader's output changes meaning; its entries are named
#: ``<sha256>-kineto<K>-v<LOADER_VERSION>`` (it shares code with the Nsight loader).
KINETO_LOADER_VERSION = 6  # 6: meta holds the trace's host_name (host, host_source); 5: meta["backend"] is distributedInfo.backend (grouping per-rank traces into one job); 4: meta["not_nvidia"] says a ROCm (HIP) trace's GPUs are not NVIDIA GPUs; 3: a device deviceProperties do not list gets the one model they name, else a warning
CACHE_ENV = "GPU_IDLE_CACHE"
FRAMES = ("kernels", "runtime", "copies", "nvtx", "devices", "overhead", "untraced")
#: The files of an entry besides its checksums: one Parquet file per frame, and the report's other fields.
ENTRY_FILES = tuple(f"{name}.parquet" for name in FRAMES) + ("report.json",)
#: The entry's checksum sidecar (:func:`pipeline.checksums.seal`), written after :data:`ENTRY_FILES`.
SUMS = "checksums.json"
#: What every file of an entry records (a Parquet file's key-value metadata, a key of ``report.json``): the
#: content key of the export it was loaded from (:func:`~pipeline.snapshot.snapshot_key`), the digest of the
#: loader code that wrote it (:func:`~pipeline.code_keys.loader_code`), and, in a Parquet file, its frame's name.
SOURCE_KEY, LOADER_KEY, FRAME_KEY = "gpu_idle.source", "gpu_idle.loader", "gpu_idle.frame"


def default_cache_dir() -> Path:
    """``$GPU_IDLE_CACHE``, else ``$XDG_CACHE_HOME/gpu-idle/columns``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.path.expanduser(os.environ[CACHE_ENV]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-idle" / "columns"


def entry_dir(sqlite_path: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder of one export (reads the whole file, and its sidecars, to hash it): keyed by
    :func:`~pipeline.snapshot.snapshot_key`, so committed data in a ``-wal`` or hot ``-journal``
    beside the file gets its own entry. Raises OSError (unreadable) or ProfileError (being written)."""
    return _entry_of(sqlite_path, snapshot_key(sqlite_path), cache_dir)


def _entry_of(path: str, key: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The cache folder of ``path`` whose content key is ``key`` (:func:`entry_dir`)."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    kineto = kinds.kind_of(path) is kinds.PYTORCH_TRACE
    tag = f"kineto{KINETO_LOADER_VERSION}-v{LOADER_VERSION}" if kineto else f"v{LOADER_VERSION}"
    return root / f"{key}-{tag}"


#: The loader of each :data:`pipeline.kinds.InputKind.loader` (a report to export reaches here as its SQLite export).
LOADERS = {kinds.SQLITE: load_report, kinds.KINETO: load_kineto}


def _load(path: str) -> Report:
    """``path`` read by the loader of its input kind (:func:`pipeline.kinds.kind_of`): a PyTorch profiler
    trace by :func:`~pipeline.load.kineto.load_kineto`, an SQLite export (any other name: the loader
    says what it is not) by :func:`~pipeline.load.report.load_report`."""
    kind = kinds.kind_of(path)
    return LOADERS[kind.loader if kind is not None else kinds.SQLITE](path)


#: Columns with few distinct values (names, GPU keys, process/device/stream/thread ids) are
#: dictionary-encoded; timestamps and correlation ids are not (nearly every value differs, so
#: trying costs CPU for nothing). No compression and no statistics: writing a 3M-kernel
#: report's entry takes ~0.2 s of CPU instead of ~0.5 s with the defaults, for a cache
#: about half the size of the SQLite export (the defaults give ~30 %).
DICTIONARY_COLUMNS = ("name", "gpu_key", "pid", "device_id", "stream_id", "tid", "kind", "text", "gpu_model",
                      "uuid", "bus", "model_note")


def _write_entry(report: Report, target: Path, source_key: str) -> None:
    """Write ``report`` (loaded from the export of content key ``source_key``) as the entry ``target``."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    vouch = {SOURCE_KEY: source_key, LOADER_KEY: loader_code()}
    try:
        for name in FRAMES:
            frame = getattr(report, name)
            table = pa.Table.from_pandas(frame, preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                  **{k.encode(): v.encode() for k, v in vouch.items()},
                                                  FRAME_KEY.encode(): name.encode()})
            pq.write_table(table, tmp / f"{name}.parquet",
                           use_dictionary=[c for c in DICTIONARY_COLUMNS if c in frame.columns],
                           compression="none", write_statistics=False)
        (tmp / "report.json").write_text(json.dumps(
            {**vouch, "meta": report.meta, "diagnostics": report.diagnostics,
             "capture_start": [report.capture_start_ns, report.capture_start_source],
             "kernel_aliases": {name: list(others) for name, others in report.kernel_aliases.items()},
             "warnings": [[w.code.value, w.text, None if w.pids is None else [int(p) for p in w.pids]]
                          for w in report.warnings]}))
        seal(tmp / SUMS, tmp, ENTRY_FILES)
        try:
            os.rename(tmp, target)
        except OSError:  # another worker finished the same entry first: keep theirs
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _vouched(what: str, recorded: dict, source_key: str, frame: str | None = None) -> None:
    """Raise :class:`~pipeline.checksums.EntryCheckFailed` unless ``recorded`` (a file's :data:`SOURCE_KEY`,
    :data:`LOADER_KEY` and :data:`FRAME_KEY`) says it holds ``frame`` of the export of content key ``source_key``,
    written by this loader's code."""
    source, loader = recorded.get(SOURCE_KEY), recorded.get(LOADER_KEY)
    if not isinstance(source, str) or not isinstance(loader, str):
        raise EntryCheckFailed(f"{what} records no source or loader digest (written by an earlier version)")
    if source != source_key:
        raise EntryCheckFailed(f"{what} holds what was loaded from other content (source {source[:16]}, this "
                               f"file's {source_key[:16]}): an entry renamed or swapped")
    if loader != loader_code():
        raise EntryCheckFailed(f"{what} was written by other loader code (digest {loader[:16]}, this "
                               f"loader's {loader_code()[:16]}): another build's entry")
    if frame is not None and recorded.get(FRAME_KEY) != frame:
        raise EntryCheckFailed(f"{what} holds the {recorded.get(FRAME_KEY)} table, not {frame}")


def _read_frame(entry: Path, name: str, sums: dict, source_key: str):
    """The frame ``name`` of ``entry``, its bytes checked (:data:`SUMS`), then what it records
    (:func:`_vouched`) and its columns (:func:`pipeline.model.frame_problem`)."""
    file = f"{name}.parquet"
    table = pq.read_table(pa.BufferReader(read_checked(entry, file, sums)))
    recorded = {k.decode(errors="replace"): v.decode(errors="replace")
                for k, v in (table.schema.metadata or {}).items()}
    _vouched(file, recorded, source_key, name)
    frame = table.to_pandas()
    problem = frame_problem(name, frame)
    if problem is not None:
        raise EntryCheckFailed(f"{file} is not a {name} table as the loader writes it: it {problem}")
    return frame


def _read_entry(entry: Path, path: str, source_key: str | None = None) -> Report:
    """The report kept in ``entry`` (its path set to ``path``, whose content key is ``source_key``; None:
    computed), each file checked against the entry's :data:`SUMS` as it is read (one read of its bytes,
    hashed, then parsed), then against ``path``'s content key and this loader's code (see the module
    docstring) and, for a frame, its columns; ``Report.sources`` names the entry
    (:func:`pipeline.checksums.source`). Raises :class:`~pipeline.checksums.EntryCheckFailed` (changed,
    missing or no checksums, another file's or loader's entry, a wrong schema), or OSError, ValueError,
    KeyError, TypeError or ``pyarrow.ArrowException`` when checked bytes do not parse."""
    source_key = snapshot_key(path) if source_key is None else source_key
    sums = read_sums(entry / SUMS)
    extra = json.loads(read_checked(entry, "report.json", sums))
    _vouched("report.json", extra if isinstance(extra, dict) else {}, source_key)
    frames = {name: _read_frame(entry, name, sums, source_key) for name in FRAMES}
    warnings = [RowWarning(WarningCode(code), text, None if pids is None else tuple(pids))
                for code, text, pids in extra["warnings"]]
    start_ns, start_source = extra["capture_start"]
    return Report(path=path, meta=extra["meta"], diagnostics=extra["diagnostics"], warnings=warnings,
                  capture_start_ns=start_ns, capture_start_source=start_source,
                  kernel_aliases={name: tuple(others) for name, others in extra["kernel_aliases"].items()},
                  sources=[source(entry, entry / SUMS, sums)], **frames)


#: Cache entries being written on background threads (:func:`wait_for_writes` joins them).
_PENDING: list[threading.Thread] = []


def _write_quietly(report: Report, entry: Path, source_key: str) -> None:
    try:
        _write_entry(report, entry, source_key)
    except (OSError, pa.ArrowException, ValueError):
        pass  # a read-only or full cache must never fail the analysis


def wait_for_writes() -> None:
    """Block until every background cache write (``load_cached(..., background=True)``) is done."""
    while _PENDING:
        _PENDING.pop().join()


def load_cached(sqlite_path: str, cache_dir: str | os.PathLike | None = None, enabled: bool = True,
                background: bool = False) -> Report:
    """Load an export, from the columnar cache when its content was loaded before.

    Args:
        sqlite_path: local SQLite export, or a PyTorch profiler trace (``.json``, ``.json.gz``:
            :func:`pipeline.load.kineto.load_kineto`).
        cache_dir: cache root (``None``: :func:`default_cache_dir`).
        enabled: ``False`` reads SQLite and writes nothing.
        background: write a new cache entry on a thread while the caller analyses the
            report (it only reads the frames); call :func:`wait_for_writes` before
            exiting. The thread is not a daemon, so the interpreter waits for it too,
            and the entry appears under its final name only when complete.
    Returns:
        The :class:`Report`, identical to :func:`pipeline.load.report.load_report`'s
        (:func:`~pipeline.load.kineto.load_kineto`'s for a trace).
    An entry that fails its check is a miss (see the module docstring).

    Raises:
        pipeline.model.ProfileError: as :func:`~pipeline.load.report.load_report`.
    """
    if not enabled:
        return _load(sqlite_path)
    try:
        key = snapshot_key(sqlite_path)
    except OSError:
        return _load(sqlite_path)  # unreadable file: let the loader name the cause
    entry = _entry_of(sqlite_path, key, cache_dir)
    if entry.exists():
        try:
            return _read_entry(entry, sqlite_path, key)
        except EntryCheckFailed as exc:
            problem = str(exc)
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            problem = f"does not parse ({type(exc).__name__}: {exc})"
        shutil.rmtree(entry, ignore_errors=True)
        note(f"{sqlite_path}: columnar cache entry {entry} failed its check: {problem}; removed, and rebuilt "
             "from the file itself")
    report = _load(sqlite_path)
    if background:
        writer = threading.Thread(target=_write_quietly, args=(report, entry, key), name="gpu-idle-cache-write")
        writer.start()
        _PENDING.append(writer)
    else:
        _write_quietly(report, entry, key)
    return report

