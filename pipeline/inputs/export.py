"""Turn Nsight Systems reports (``.nsys-rep``) into SQLite exports.

The analysis reads SQLite (docs/inputs.md#nsight-systems-reports); a ``.nsys-rep`` is first exported
with the NVIDIA CLI, ``nsys export --type sqlite``, run as an argument list (no
shell). Exports are cached by content: the key is the SHA-256 of the report's
bytes (:func:`~pipeline.hashing.content_key`: the hash its identity read already), so a report that did not change is never exported twice, whatever its
name or mtime, and an edited report gets a fresh export.

Nothing is ever written beside the user's report. Exports go to a cache
directory: the ``cache_dir`` argument, else ``$GPU_IDLE_EXPORT_CACHE``, else
``$XDG_CACHE_HOME/gpu-idle/exports`` (``~/.cache/gpu-idle/exports``). Each
export is written under a temporary name in that directory and renamed into
place only when ``nsys`` succeeded, so a crash or timeout never leaves a
half-written file where a later run would take it for a finished export. Beside
it, ``<sha256>.sqlite.sums.json`` records the SHA-256 of the whole export
(:mod:`pipeline.checksums`, written after it); a cached export is served only
when its bytes still have that digest (hashed once per process, and the same
hash keys its columnar cache entry: :func:`~pipeline.snapshot.snapshot_key`).
A truncated or changed export, or one without a checksum, is exported again,
with one line on stderr saying so. With ``--no-cache`` (``cached=False``) no cache
is read or written: the report is exported into a temporary folder that the caller
removes once the export is loaded (:func:`pipeline.work.tasks.load_report_for`).

Which ``nsys``: see :func:`find_nsys`. The project installs one for its own
tests with ``make nsys`` (``tools/nsys/``, Debian's nsight-systems 2022.4; no
GPU needed to export). An ``nsys`` cannot read reports written by a later Nsight
Systems; when an export fails, the report's own version (:func:`report_version`)
and the CLI's (:func:`nsys_version`) are compared, and a report newer than the CLI
gets an error naming both and how to point ``export.nsys`` at a newer CLI.

Errors are :class:`ExportError`, a :class:`~pipeline.model.ProfileError`, so the
pipeline turns a failed export into an error row like any unreadable report.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from .. import kinds
from ..checksums import EntryCheckFailed, check_sealed_file, note, seal_file, sidecar_of
from ..model import ProfileError
from ..hashing import content_key  # the one hash of a report's bytes, once per process (its identity's too)

#: Environment variable naming the nsys binary to use.
NSYS_ENV = "GPU_IDLE_NSYS"
#: Environment variable naming the export cache directory.
CACHE_ENV = "GPU_IDLE_EXPORT_CACHE"
#: Where ``make nsys`` (scripts/install_nsys.sh) unpacks the CLI.
REPO_NSYS = Path(__file__).resolve().parents[2] / "tools" / "nsys" / "usr" / "bin" / "nsys"
#: Seconds one ``nsys export`` may run before it is killed.
DEFAULT_TIMEOUT_S = 1800.0
#: Lines of nsys's stderr quoted in an error message.
STDERR_TAIL_LINES = 5

#: Files SQLite may leave beside an export another tool opened; removed with an export that fails its check.
SQLITE_SIDECARS = ("-wal", "-journal", "-shm")

_SQLITE_MAGIC = b"SQLite format 3\x00"
#: Bytes at the end of a report searched for its version (its trailer is about 1 KiB).
REPORT_TAIL_BYTES = 64 * 1024
#: In a report's trailer (the session information Nsight Systems 2020.3 to 2025 writes after
#: the last section, before the closing ``[END]``), the version that wrote it is protobuf field
#: 6, a string: tag 0x32, one length byte, then e.g. ``2023.1.2.43-32377213v0``.
_REPORT_VERSION = re.compile(rb"\x32([\x05-\x7f])(20\d\d\.\d+(?:\.\d+)*(?:-[0-9A-Za-z]+)?)")
#: A version as ``nsys --version`` prints it: ``NVIDIA Nsight Systems version 2022.4.2.1-df9881f``.
_CLI_VERSION = re.compile(r"\b(20\d\d\.\d+(?:\.\d+)*(?:-[0-9A-Za-z]+)?)")


class ExportError(ProfileError):
    """A report cannot be exported to SQLite. The message names the report (or
    the nsys binary, for :func:`find_nsys`) and the cause."""


def _runnable(path: str | os.PathLike) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def find_nsys(configured: str | os.PathLike | None = None) -> str:
    """Path of the ``nsys`` binary to export with.

    Looked up in this order, first hit wins:

    1. ``configured`` (e.g. from a config file or the ``nsys_path`` argument);
    2. ``$GPU_IDLE_NSYS``;
       (for 1 and 2 a bare name without a slash is looked up on ``$PATH``)
    3. ``nsys`` on ``$PATH``;
    4. the repository's own install, ``tools/nsys/usr/bin/nsys`` (``make nsys``).

    An explicitly given path (1 or 2) that does not exist or is not executable
    is an error, not a reason to fall through to the next place.

    Returns:
        The path as a string (not resolved: symlinks stay, ``nsys`` needs them).
    Raises:
        ExportError: no usable nsys; the message says where it looked and how to
        get one.
    """
    for value, origin in ((configured, "configured nsys path"), (os.environ.get(NSYS_ENV), f"${NSYS_ENV}")):
        if value:
            path = os.path.expanduser(os.fspath(value))
            if os.sep not in path:  # a bare command name: look it up on PATH
                path = shutil.which(path) or path
            if not _runnable(path):
                raise ExportError(f"{origin} {path!r} is not an executable file")
            return path
    on_path = shutil.which("nsys")
    if on_path:
        return on_path
    if _runnable(REPO_NSYS):
        return str(REPO_NSYS)
    raise ExportError(
        "nsys (NVIDIA Nsight Systems CLI) not found: no configured path, "
        f"${NSYS_ENV} unset, no 'nsys' on PATH and no {REPO_NSYS}; install Nsight Systems, "
        f"set {NSYS_ENV}=/path/to/nsys, or run `make nsys` in the gpu-idle repository"
    )


def default_cache_dir() -> Path:
    """``$GPU_IDLE_EXPORT_CACHE``, else ``$XDG_CACHE_HOME/gpu-idle/exports``
    (``~/.cache/gpu-idle/exports`` when XDG_CACHE_HOME is unset)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.path.expanduser(os.environ[CACHE_ENV]))
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-idle" / "exports"


def _discard_export(final: Path) -> None:
    """Remove what SQLite left beside a cached export that failed its check, and its sidecar (the export
    itself is replaced atomically by the new one: a run still reading it never finds it gone)."""
    for extra in [Path(f"{final}{suffix}") for suffix in SQLITE_SIDECARS] + [Path(sidecar_of(final))]:
        extra.unlink(missing_ok=True)


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def _tail(text: str, lines: int = STDERR_TAIL_LINES) -> str:
    """Last non-empty lines of a tool's output (progress bars redraw with '\\r')."""
    parts = [p.strip() for p in text.replace("\r", "\n").splitlines()]
    return " | ".join([p for p in parts if p][-lines:])


def report_version(path: str | os.PathLike) -> str | None:
    """The Nsight Systems version that wrote a ``.nsys-rep`` / ``.qdrep`` report, e.g.
    ``2023.1.2.43-32377213v0``, read from the report's trailer (see ``_REPORT_VERSION``:
    the last :data:`REPORT_TAIL_BYTES` bytes are searched); None when it cannot be read
    (unreadable, truncated, not a report). Raises nothing."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - REPORT_TAIL_BYTES))
            tail = fh.read()
    except OSError:
        return None
    hits = [m.group(2) for m in _REPORT_VERSION.finditer(tail) if m.group(1)[0] == len(m.group(2))]
    return hits[-1].decode("ascii") if hits else None


@functools.lru_cache(maxsize=8)
def nsys_version(nsys: str) -> str | None:
    """The version of the ``nsys`` binary at ``nsys`` (``nsys --version``), e.g. ``2022.4.2.1-df9881f``;
    None when it cannot be run or says no version. Raises nothing."""
    try:
        code, out, err = _run([nsys, "--version"], 60.0)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _CLI_VERSION.search(out + err) if code == 0 else None
    return match.group(1) if match else None


def version_key(version: str) -> tuple[int, ...]:
    """``"2023.1.2.43-32377213v0"`` -> ``(2023, 1, 2, 43)``, for comparing versions."""
    return tuple(int(part) for part in version.split("-", 1)[0].split("."))


def _newer_report_message(rep: str, nsys: str, code: int, detail: str) -> str | None:
    """The error of an export that failed because the report is newer than ``nsys`` (both
    versions known, the report's later), else None."""
    written, cli = report_version(rep), nsys_version(nsys)
    if not written or not cli or version_key(written) <= version_key(cli):
        return None
    release = ".".join(map(str, version_key(written)[:2]))
    return (f"{rep}: written by Nsight Systems {written}, newer than the nsys that exports it ({nsys}, version "
            f"{cli}), which cannot read it: point export.nsys in the config (or ${NSYS_ENV}) at the nsys of "
            f"Nsight Systems {release} or newer (nsys export failed, exit {code}: {detail})")


def _run(cmd: list[str], timeout_s: float) -> tuple[int, str, str]:
    """Run ``cmd`` in its own process group; on timeout kill the whole group
    (nsys starts helpers) and re-raise :class:`subprocess.TimeoutExpired`."""
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        raise
    return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")


def export_report(rep_path: str | os.PathLike, nsys_path: str | os.PathLike | None = None,
                  cache_dir: str | os.PathLike | None = None,
                  timeout_s: float = DEFAULT_TIMEOUT_S, cached: bool = True) -> str:
    """SQLite export of one Nsight Systems report; exports at most once per content.

    Args:
        rep_path: local path of a ``.nsys-rep`` (or legacy ``.qdrep``) report. A
            ``.sqlite`` export is returned unchanged, without looking for nsys.
        nsys_path: nsys binary to use; ``None`` looks it up with :func:`find_nsys`.
        cache_dir: directory for exports; ``None`` means :func:`default_cache_dir`.
            Created if missing. Nothing is ever written beside the report.
        timeout_s: seconds ``nsys export`` may run before it is killed.
        cached: False (``--no-cache``): ``cache_dir`` is a temporary folder of the caller's (which
            removes it when done), not a cache: no earlier export is looked for, the export is
            written there as ``export.sqlite`` without a checksum sidecar, and no message names a cache.
    Returns:
        Path (string) of the SQLite export: ``<cache_dir>/<sha256>.sqlite`` where
        ``<sha256>`` is the hash of the report's bytes. When that file already
        exists (same content exported before, under any name) and its bytes still
        match the checksum recorded when it was written (:func:`~pipeline.checksums.check_sealed_file`), it is
        reused and nsys is not run; otherwise it is exported again (a line on stderr
        says why), never served. Not ``cached``: ``<cache_dir>/export.sqlite``, exported now.
    Raises:
        ExportError: every message starts with the report path and names the
        cause: file missing or empty, unknown suffix, remote URL, nsys not found, nsys
        exited non-zero (a report written by a newer Nsight Systems than ``nsys``: both
        versions and how to configure a newer ``nsys``; else a corrupt or truncated
        report; the message quotes the last lines of nsys's stderr), nsys timed out,
        nsys produced no SQLite file, or the cache directory (the temporary folder) cannot be written.
    """
    rep = os.fspath(rep_path)
    kind = kinds.kind_of(rep)  # the registry says which kinds need exporting (docs/inputs.md)
    if kind is kinds.SQLITE_EXPORT:
        return rep
    if "://" in rep:
        raise ExportError(f"{rep}: nsys exports local files only; copy the report to local disk first")
    if kind is None:
        raise ExportError(f"{rep}: {kinds.not_an_input(rep)}")
    if not kind.needs_export:
        raise ExportError(f"{rep}: not an Nsight Systems report (expected {' or '.join(kinds.NSYS_REPORT.named)} "
                          f"or an SQLite export)")
    if not os.path.isfile(rep):
        raise ExportError(f"{rep}: file not found")
    if os.path.getsize(rep) == 0:
        raise ExportError(f"{rep}: empty file (0 bytes), not an Nsight Systems report")

    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    folder = f"export cache {cache}" if cached else f"temporary folder {cache}"
    try:
        key = content_key(rep) if cached else "export"
    except OSError as exc:
        raise ExportError(f"{rep}: cannot read the report ({exc})") from exc
    final = cache / f"{key}.sqlite"
    # A sidecar without its export is one being written right now (sealed before the rename): exported
    # here too, nothing discarded.
    if cached and final.exists():
        try:
            check_sealed_file(final)  # its whole content (and a -wal or hot -journal beside it)
            return str(final)
        except EntryCheckFailed as exc:
            _discard_export(final)
            note(f"{rep}: cached export {final} failed its check: {exc}; exported again")

    try:
        nsys = find_nsys(nsys_path)
    except ExportError as exc:
        raise ExportError(f"{rep}: cannot export to SQLite: {exc}") from None

    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp.sqlite", dir=cache)
        os.close(fd)
    except OSError as exc:
        raise ExportError(f"{rep}: cannot write to {folder} ({exc})") from exc
    tmp = Path(tmp_name)
    cmd = [nsys, "export", "--type", "sqlite", "--output", str(tmp), "--force-overwrite", "true", rep]
    try:
        try:
            code, out, err = _run(cmd, timeout_s)
        except subprocess.TimeoutExpired:
            raise ExportError(f"{rep}: nsys export timed out after {timeout_s:g} s (killed)") from None
        except OSError as exc:
            raise ExportError(f"{rep}: cannot run nsys {nsys!r} ({exc})") from exc
        if code != 0:
            detail = _tail(err) or _tail(out) or "no output"
            raise ExportError(_newer_report_message(rep, nsys, code, detail) or
                              f"{rep}: nsys export failed (exit {code}; corrupt or truncated report?): {detail}")
        if not tmp.is_file() or not _is_sqlite(tmp):
            detail = _tail(err) or _tail(out) or "no output"
            raise ExportError(f"{rep}: nsys export exited 0 but wrote no SQLite file ({detail})")
        if cached:
            seal_file(final, content_key(tmp))  # first: an export in place is never without its checksum
        os.replace(tmp, final)
    except OSError as exc:
        raise ExportError(f"{rep}: cannot write export to {final} ({exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    return str(final)
