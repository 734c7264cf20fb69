"""Columnar cache of loaded reports: Arrow IPC files keyed by the export's content hash (with its
``-wal`` / hot ``-journal`` sidecars when they hold part of its committed state) and by the loader's code.

The first load of an export reads SQLite (only the columns the analysis needs)
and writes each table of the :class:`~pipeline.model.Report` as an uncompressed Arrow IPC file (Feather v2,
:data:`FRAME_SUFFIX`) into
``<cache dir>/<sha256 of the export>-code<loader digest>/`` (:func:`entry_name`; the loader digest is the
first :data:`NAME_DIGEST` hex digits of :func:`pipeline.code_keys.loader_code`, the meaning of the loaders'
code, ``LOADER_VERSION`` included); a rerun on the same bytes by the same loader code reads the Arrow files
instead, whatever the file is called now. Checkouts of different builds sharing one cache folder each find
their own entries and never look at the others' (no eviction, no warning): another build's entry is not a
miss of this one, only another name. The folder is written under a temporary name and renamed when
complete, so a killed run never leaves a half cache that a later run would trust; an entry is removed by
renaming it away first, so a reader never sees half of one.

Each entry holds :data:`SUMS` (the SHA-256 of each of its files, hashed as each is written and recorded last:
:mod:`pipeline.checksums`), checked as the files are read: an entry whose bytes changed
since (a value edited in place, a file replaced by another Arrow file, a truncated or
missing file) or that has no checksums is a cache miss: removed,
read again from the export and written anew, with one line on stderr naming the entry, the file and the
cause, never a failure and never a number from the bad entry.

Checksums vouch only that the bytes are the ones written; what they hold is checked too. Each file of an
entry records (an Arrow file's schema metadata; ``report.json`` keys) the content key of the export it was
loaded from (:data:`SOURCE_KEY`) and the whole digest of the loader code that wrote it (:data:`LOADER_KEY`).
An entry whose source is not the export being loaded (two entries swapped or renamed), written by other
loader code (renamed into this build's name), recording neither, or with a frame that is not what a loader
gives (:func:`pipeline.model.frame_problem`: a missing column, times as text ...) is a miss like a changed
one. A report read from an entry records it in ``Report.sources`` (its stored result then records it too:
:mod:`pipeline.store.results`).

The folder is bounded (``cache.max_gib``, :func:`prune`): after writing entries, a process removes the least
recently used entries of any build (a hit marks its entry used: the folder's modification time) until the
entries hold no more than the bound, and temporary folders a killed writer left (older than
:data:`~pipeline.io.LEFTOVER_AGE_S`). One process prunes a folder at a time; a process prunes on its first
entry written and again after writing a tenth of the bound (:data:`PRUNE_EVERY`), so the entries may exceed
the bound by about that much between prunes. A reader whose entry was pruned (or replaced) while it read
it takes that as a miss, silently.

Cache dir: the ``cache.dir`` config value, else ``$GPU_IDLE_CACHE``, else
``$XDG_CACHE_HOME/gpu-idle/columns`` (``~/.cache/gpu-idle/columns``).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.ipc as ipc

from .. import kinds
from .ahead import drop as drop_ahead
from ..code_keys import loader_code
from ..checksums import EntryCheckFailed, note, read_checked, read_sums, source, write_sums, written_digest
from ..io import LEFTOVER_AGE_S, LEFTOVER_RE, FolderBusy, OutputError, folder_lock, os_cause, temp_name
from ..model import Report, RowWarning, WarningCode, frame_problem
from .kineto import load_kineto
from .report import load_report
from ..snapshot import snapshot_key

#: Bump when the loader's output changes meaning. It is part of the loader code's digest that names the entries
#: (:func:`entry_name`), as every other change of the loaders' code is, so old entries are not reused.
LOADER_VERSION = 24  # 24: the runtime calls grouped by the processes of a GPU (each group in start order), not in start order; 23: meta's host_source says when an export naming no host has rows not timed on a host's clock (a node label then gives it no clock); 22: meta holds the export's host (TARGET_INFO_SYSTEM_ENV Hostname) when its rows are on the host's clock; 21: meta holds the scheduler job (SLURM_JOB_ID) the capture's environment names; 20: launches inside a graph capture range (cudaStreamBeginCapture … EndCapture) are not lost; 19: ANALYSIS_DETAILS the rows fit on neither clock is said even beside a session start; the capture-disagrees warning names the bound judged wrong; dropped rows wholly outside the kernels' time are dropped-stray-rows (ok); 18: CUDA graph executions (CUPTI_ACTIVITY_KIND_GRAPH_TRACE) are kernel rows with graph True, meta holds the capture's --cuda-graph-trace mode; 17: a time or id column holding REAL, TEXT or BLOB is an error row (not an integer), BLOB text is decoded; 12: meta holds the world size the capture's launch gives (pipeline.load.ranks); 13: diagnostics carry their process; a stated capture the rows do not fit is not trusted; 14: meta names where the world size was read (world_size_source), an unreadable one says nothing; kernel_aliases (an export's other kernel names); 15: without a trusted stated bound the rows' body decides (steps <= max(1 s, its extent)), a stated capture the rows do not fit is said; torchrun's own options only; 16: a pause no longer than the work on both sides of it stays in the rows' own run
#: Bump when the PyTorch profiler (Kineto) loader's output changes meaning (part of the loader code's digest too);
#: its entries are named ``<sha256>-kineto-code<loader digest>``.
KINETO_LOADER_VERSION = 7  # 7: the runtime calls grouped by the processes of a GPU (as LOADER_VERSION 24); 6: meta holds the trace's host_name (host, host_source); 5: meta["backend"] is distributedInfo.backend (grouping per-rank traces into one job); 4: meta["not_nvidia"] says a ROCm (HIP) trace's GPUs are not NVIDIA GPUs; 3: a device deviceProperties do not list gets the one model they name, else a warning
CACHE_ENV = "GPU_IDLE_CACHE"
FRAMES = ("kernels", "runtime", "copies", "nvtx", "devices", "overhead", "untraced")
#: How an entry keeps a frame: an Arrow IPC file (Feather v2), uncompressed. Writing one is close to a copy of the
#: frame's columns and reading one back is a slice of its checked bytes (for a 2M-kernel entry Parquet cost ~0.15 CPU-s
#: more to write and ~0.05 more to read, for a file about two thirds the size). This module's code is loader code
#: (:func:`~pipeline.code_keys.loader_code`), so another format is another entry name and another recorded digest:
#: an entry of the earlier format (Parquet, ``<frame>.parquet``) is never read as this one.
FRAME_SUFFIX = ".arrow"


def frame_file(name: str) -> str:
    """The file of an entry that holds the frame ``name``: ``<name>.arrow`` (:data:`FRAME_SUFFIX`)."""
    return name + FRAME_SUFFIX


#: The files of an entry besides its checksums: one Arrow IPC file per frame, and the report's other fields.
ENTRY_FILES = tuple(frame_file(name) for name in FRAMES) + ("report.json",)
#: The entry's checksum sidecar (:func:`pipeline.checksums.write_sums`), written after :data:`ENTRY_FILES`.
SUMS = "checksums.json"
#: What every file of an entry records (an Arrow file's schema metadata, a key of ``report.json``): the
#: content key of the export it was loaded from (:func:`~pipeline.snapshot.snapshot_key`), the digest of the
#: loader code that wrote it (:func:`~pipeline.code_keys.loader_code`), and, in an Arrow file, its frame's name.
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
    return root / entry_name(key, kinds.kind_of(path) is kinds.PYTORCH_TRACE)


#: Hex digits of the loader code's digest in an entry's name (the whole digest is recorded inside it).
NAME_DIGEST = 16


def entry_name(key: str, kineto: bool = False) -> str:
    """The name of the entry of content key ``key`` written by this build's loader code:
    ``<key>-code<digest>`` (a PyTorch profiler trace: ``<key>-kineto-code<digest>``), ``<digest>`` the first
    :data:`NAME_DIGEST` hex digits of :func:`~pipeline.code_keys.loader_code`."""
    return f"{key}-{'kineto-' if kineto else ''}code{loader_code()[:NAME_DIGEST]}"


#: The name of a columnar cache entry of any build: :func:`entry_name`'s, or an earlier version's
#: (``<sha256>-v<N>``, ``<sha256>-kineto<K>-v<N>``, named by the loader version alone). Nothing else in the
#: folder (``results/``, ``identity-index.json``) is one.
ENTRY_RE = re.compile(r"^[0-9a-f]{64}-(?:(?:kineto-)?code[0-9a-f]{%d}|(?:kineto[0-9]+-)?v[0-9]+)$" % NAME_DIGEST)


#: The loader of each :data:`pipeline.kinds.InputKind.loader` (a report to export reaches here as its SQLite export).
LOADERS = {kinds.SQLITE: load_report, kinds.KINETO: load_kineto}


def _load(path: str) -> Report:
    """``path`` read by the loader of its input kind (:func:`pipeline.kinds.kind_of`): a PyTorch profiler
    trace by :func:`~pipeline.load.kineto.load_kineto`, an SQLite export (any other name: the loader
    says what it is not) by :func:`~pipeline.load.report.load_report`."""
    kind = kinds.kind_of(path)
    return LOADERS[kind.loader if kind is not None else kinds.SQLITE](path)


def write_frame(table: pa.Table, path: str | os.PathLike) -> str:
    """Write ``table`` as an entry's frame file ``path`` (an Arrow IPC file, uncompressed: :data:`FRAME_SUFFIX`)
    and return the SHA-256 of its bytes, hashed as they are written
    (:func:`~pipeline.checksums.written_digest`). Raises OSError or ``pyarrow.ArrowException``."""
    def write(fh) -> None:
        with ipc.new_file(pa.PythonFile(fh, mode="w"), table.schema) as writer:
            writer.write_table(table)
    return written_digest(path, write)


def read_frame(data: bytes) -> pa.Table:
    """The table of an entry's frame file whose (checked) bytes are ``data`` (:func:`write_frame`), read in place
    (its columns are slices of ``data``) but for those pandas would keep as they are (:func:`_kept_by_pandas`), copied
    so that the frame made of it keeps none of ``data`` alive (the whole file). Raises ``pyarrow.ArrowException``
    when ``data`` is not an Arrow IPC file."""
    table = ipc.open_file(pa.py_buffer(data)).read_all()
    memory = pa.default_cpu_memory_manager()
    for at, field in enumerate(table.schema):
        if _kept_by_pandas(field.type):
            copied = pa.chunked_array([chunk.copy_to(memory) for chunk in table.column(at).chunks], field.type)
            table = table.set_column(at, field, copied)
    return table


def _kept_by_pandas(kind: pa.DataType) -> bool:
    """Whether ``Table.to_pandas`` keeps a column of Arrow type ``kind`` as it is rather than copying it: text (an
    Arrow-backed ``str`` column) and dictionaries (a categorical's codes and categories)."""
    return (pa.types.is_dictionary(kind) or pa.types.is_string(kind) or pa.types.is_large_string(kind)
            or pa.types.is_string_view(kind) or pa.types.is_binary(kind) or pa.types.is_large_binary(kind))


def _write_entry(report: Report, target: Path, source_key: str) -> int:
    """Write ``report`` (loaded from the export of content key ``source_key``) as the entry ``target``: into a
    temporary folder (:func:`~pipeline.io.temp_name`) renamed to ``target`` when complete, each file hashed as it is
    written and the checksums (:data:`SUMS`) written last. Returns the bytes written (0 when another process wrote
    the same entry first: theirs is kept). Raises OSError, ``pyarrow.ArrowException`` or ValueError (a frame Arrow
    cannot hold)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(temp_name(target.name))
    tmp.mkdir()
    vouch = {SOURCE_KEY: source_key, LOADER_KEY: loader_code()}
    try:
        digests = {}
        for name in FRAMES:
            table = pa.Table.from_pandas(getattr(report, name), preserve_index=False)
            table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                                  **{k.encode(): v.encode() for k, v in vouch.items()},
                                                  FRAME_KEY.encode(): name.encode()})
            digests[frame_file(name)] = write_frame(table, tmp / frame_file(name))
        fields = json.dumps(
            {**vouch, "meta": report.meta, "diagnostics": report.diagnostics,
             "capture_start": [report.capture_start_ns, report.capture_start_source],
             "kernel_aliases": {name: list(others) for name, others in report.kernel_aliases.items()},
             "warnings": [[w.code.value, w.text, None if w.pids is None else [int(p) for p in w.pids]]
                          for w in report.warnings]}).encode()
        digests["report.json"] = written_digest(tmp / "report.json", lambda fh: fh.write(fields))
        write_sums(tmp / SUMS, digests)
        size = _folder_bytes(tmp)
        try:
            os.rename(tmp, target)
        except OSError:  # another worker finished the same entry first: keep theirs
            return 0
        return size
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _folder_bytes(folder: str | os.PathLike) -> int:
    """The bytes of the files directly in ``folder`` (an entry has no sub-folders); 0 when it is gone."""
    total = 0
    try:
        with os.scandir(folder) as found:
            for item in found:
                try:
                    total += item.stat(follow_symlinks=False).st_size
                except FileNotFoundError:
                    pass
    except (FileNotFoundError, NotADirectoryError):
        pass
    return total


def _discard(entry: Path) -> bool:
    """Remove the entry folder ``entry`` as one step for its readers: renamed to a temporary name
    (:func:`~pipeline.io.temp_name`) first, then deleted (a removal cut short leaves a temporary folder
    :func:`prune` removes later). Returns False when it was gone already (another process removed it)."""
    parked = entry.with_name(temp_name(entry.name))
    try:
        os.rename(entry, parked)
    except FileNotFoundError:
        return False
    if parked.is_dir() and not parked.is_symlink():
        shutil.rmtree(parked, ignore_errors=True)
    else:  # a file or a link in an entry's place
        parked.unlink(missing_ok=True)
    return True


#: A process prunes a cache folder again (:func:`prune`) after writing this share of its bound since its last prune.
PRUNE_EVERY = 0.1
#: The lock file held in a cache folder while one process prunes it (another skips its prune meanwhile).
PRUNE_LOCK = ".prune.lock"
#: Bytes of entries written into each cache folder (its absolute path) since this process last pruned it.
_WRITTEN: dict[str, int] = {}
_WRITTEN_LOCK = threading.Lock()


def prune(cache_dir: str | os.PathLike, max_bytes: int, keep: tuple[str, ...] = ()) -> list[Path]:
    """Keep the cache folder ``cache_dir`` within ``max_bytes``: remove its least recently used entries
    (:data:`ENTRY_RE`, every build's; the last use is the entry folder's modification time, set by each hit)
    until the others hold at most ``max_bytes``, never one named in ``keep``, and the temporary folders a
    killed writer left there (older than :data:`~pipeline.io.LEFTOVER_AGE_S`). Each removal is atomic for
    readers (:func:`_discard`). Does nothing while another process prunes the folder (:data:`PRUNE_LOCK`) or
    when it cannot be written. Returns the entries removed, oldest first."""
    root = Path(cache_dir)
    removed: list[Path] = []
    try:
        with folder_lock(str(root), PRUNE_LOCK, what="another gpu-idle process is pruning this cache"):
            found, stale = [], time.time() - LEFTOVER_AGE_S
            with os.scandir(root) as items:
                for item in items:
                    try:
                        if not item.is_dir(follow_symlinks=False):
                            continue
                        used = item.stat(follow_symlinks=False).st_mtime
                    except FileNotFoundError:
                        continue
                    left = LEFTOVER_RE.match(item.name)
                    if ENTRY_RE.match(item.name):
                        found.append((used, item.name))
                    elif left and ENTRY_RE.match(left.group(1)) and used < stale:
                        shutil.rmtree(item.path, ignore_errors=True)
            sizes = {name: _folder_bytes(root / name) for _, name in found}
            total = sum(sizes.values())
            for _, name in sorted(found):
                if total <= max_bytes:
                    break
                if name not in keep and _discard(root / name):
                    removed.append(root / name)
                    total -= sizes[name]
    except (FolderBusy, FileNotFoundError):
        pass
    except (OutputError, OSError) as exc:
        note(f"columnar cache {root} not pruned: {os_cause(exc) if isinstance(exc, OSError) else exc}")
    return removed


def _pruned_after(entry: Path, size: int, max_bytes: int | None) -> None:
    """Count the ``size`` bytes of ``entry`` just written; :func:`prune` its folder (keeping ``entry``) on this
    process's first write there and after :data:`PRUNE_EVERY` of ``max_bytes`` written since (None: no bound)."""
    if max_bytes is None:
        return
    root = os.path.abspath(entry.parent)
    with _WRITTEN_LOCK:
        first = root not in _WRITTEN
        _WRITTEN[root] = _WRITTEN.get(root, 0) + size
        due = first or _WRITTEN[root] >= PRUNE_EVERY * max_bytes
        if due:
            _WRITTEN[root] = 0
    if due:
        prune(root, max_bytes, keep=(entry.name,))


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


#: What parsing checked bytes raises when they are not what the loader writes.
PARSE_ERRORS = (OSError, ValueError, KeyError, TypeError, pa.ArrowException)


def _parsed(file: str, parse):
    """``parse()`` (of the checked bytes of the entry's ``file``); what it raises (:data:`PARSE_ERRORS`) becomes
    :class:`~pipeline.checksums.EntryCheckFailed` naming ``file`` and the cause."""
    try:
        return parse()
    except EntryCheckFailed:
        raise
    except PARSE_ERRORS as exc:
        raise EntryCheckFailed(f"{file} does not parse ({type(exc).__name__}: {exc})") from None


def _read_frame(entry: Path, name: str, sums: dict, source_key: str):
    """The frame ``name`` of ``entry``, its bytes checked (:data:`SUMS`), then what it records
    (:func:`_vouched`) and its columns (:func:`pipeline.model.frame_problem`)."""
    file = frame_file(name)
    data = read_checked(entry, file, sums)
    table = _parsed(file, lambda: read_frame(data))
    recorded = {k.decode(errors="replace"): v.decode(errors="replace")
                for k, v in (table.schema.metadata or {}).items()}
    _vouched(file, recorded, source_key, name)
    frame = _parsed(file, table.to_pandas)
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
    missing or no checksums, another file's or loader's entry, a wrong schema, a file that does not parse:
    each naming the file), or OSError (the entry's folder cannot be read)."""
    source_key = snapshot_key(path) if source_key is None else source_key
    sums = read_sums(entry / SUMS)
    raw = read_checked(entry, "report.json", sums)
    extra = _parsed("report.json", lambda: json.loads(raw))
    _vouched("report.json", extra if isinstance(extra, dict) else {}, source_key)
    frames = {name: _read_frame(entry, name, sums, source_key) for name in FRAMES}

    def fields() -> dict:
        warnings = [RowWarning(WarningCode(code), text, None if pids is None else tuple(pids))
                    for code, text, pids in extra["warnings"]]
        start_ns, start_source = extra["capture_start"]
        return dict(meta=extra["meta"], diagnostics=extra["diagnostics"], warnings=warnings,
                    capture_start_ns=start_ns, capture_start_source=start_source,
                    kernel_aliases={name: tuple(others) for name, others in extra["kernel_aliases"].items()})

    return Report(path=path, **_parsed("report.json", fields), sources=[source(entry, entry / SUMS, sums)], **frames)


#: Cache entries being written on background threads, each with the gate it writes behind (:func:`load_cached`;
#: :func:`wait_for_writes` opens the gates and joins the threads).
_PENDING: list[tuple[threading.Thread, threading.Event]] = []


#: Cache folders (absolute paths) where this process failed to write an entry and said so (once per folder).
_UNWRITTEN: set[str] = set()


def _write_quietly(report: Report, entry: Path, source_key: str, max_bytes: int | None = None) -> None:
    """Write the entry (:func:`_write_entry`), then prune its folder when due (:func:`_pruned_after`). A failure
    never fails the analysis: the first in a folder is one line on stderr naming the entry and the cause."""
    try:
        size = _write_entry(report, entry, source_key)
    except (OSError, pa.ArrowException, ValueError) as exc:
        root = os.path.abspath(entry.parent)
        if root not in _UNWRITTEN:
            _UNWRITTEN.add(root)
            cause = os_cause(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
            note(f"{report.path}: columnar cache entry {entry} not written ({cause}); the report is read from its "
                 "file (further entries this process cannot write there are not reported)")
        return
    _pruned_after(entry, size, max_bytes)


def _write_after(gate: threading.Event, report: Report, entry: Path, source_key: str, max_bytes: int | None) -> None:
    """:func:`_write_quietly` once ``gate`` is set."""
    gate.wait()
    _write_quietly(report, entry, source_key, max_bytes)


def wait_for_writes() -> None:
    """Block until every background cache write (``load_cached(..., background=...)``) is done, those still
    waiting behind their gate started now."""
    while _PENDING:
        writer, gate = _PENDING.pop()
        gate.set()
        writer.join()


def load_cached(sqlite_path: str, cache_dir: str | os.PathLike | None = None, enabled: bool = True,
                background: bool | threading.Event = False, max_bytes: int | None = None) -> Report:
    """Load an export, from the columnar cache when its content was loaded before.

    Args:
        sqlite_path: local SQLite export, or a PyTorch profiler trace (``.json``, ``.json.gz``:
            :func:`pipeline.load.kineto.load_kineto`).
        cache_dir: cache root (``None``: :func:`default_cache_dir`).
        enabled: ``False`` reads SQLite and writes nothing.
        background: write a new cache entry on a thread while the caller analyses the
            report (it only reads the frames); call :func:`wait_for_writes` before
            exiting. The thread is not a daemon, so the interpreter waits for it too,
            and the entry appears under its final name only when complete. An
            ``Event``: the thread writes once it is set (the caller sets it when its
            analysis is done, so that the write, ~0.15 CPU-s at 2M kernels, takes
            nothing from the analysis's threads but runs beside the outputs), or
            when :func:`wait_for_writes` is called.
        max_bytes: the bound of the cache folder (``cache.max_gib``; None: none), kept by :func:`prune`
            after writing entries.
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
    try:
        found = os.stat(entry)
    except OSError:
        found = None  # a miss: no entry of this content by this build's loader code (other builds' are other names)
    if found is not None:
        drop_ahead(sqlite_path)  # the entry is read instead (one that fails its check: the export is read as usual)
        try:
            report = _read_entry(entry, sqlite_path, key)
        except EntryCheckFailed as exc:
            problem = str(exc)
        except PARSE_ERRORS as exc:
            problem = f"cannot be read ({type(exc).__name__}: {exc})"
        else:
            _used(entry)
            return report
        if _same_folder(entry, found) and _discard(entry):
            note(f"{sqlite_path}: columnar cache entry {entry} failed its check: {problem}; removed, and rebuilt "
                 "from the file itself")
        # else: pruned or replaced by another process while this one read it: a plain miss
    report = _load(sqlite_path)
    if background is not False:
        gate = background if isinstance(background, threading.Event) else threading.Event()
        if background is True:
            gate.set()
        writer = threading.Thread(target=_write_after, args=(gate, report, entry, key, max_bytes),
                                  name="gpu-idle-cache-write")
        writer.start()
        _PENDING.append((writer, gate))
    else:
        _write_quietly(report, entry, key, max_bytes)
    return report


def _same_folder(path: Path, was: os.stat_result) -> bool:
    """Whether ``path`` is still the folder ``was`` describes (not removed or replaced since)."""
    try:
        return os.path.samestat(os.stat(path), was)
    except OSError:
        return False


def _used(entry: Path) -> None:
    """Mark ``entry`` used now (its folder's modification time: :func:`prune` removes the least recently used
    first); a folder this process may not touch keeps its time."""
    try:
        os.utime(entry)
    except OSError:
        pass
