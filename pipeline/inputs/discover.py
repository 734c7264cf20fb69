"""Expand INPUT arguments (files, directories, globs; any fsspec URL) into report paths.

Directories (and object-storage prefixes such as ``s3://bucket/prefix``) are searched recursively for
the input kinds of :mod:`pipeline.kinds` (docs/inputs.md): Nsight Systems reports (``*.nsys-rep``,
``*.qdrep``: the name before Nsight Systems 2021.4), SQLite exports (``*.sqlite``, ``*.sqlite3``, and
``*.db`` whose first bytes are SQLite's), PyTorch profiler traces (``*.pt.trace.json(.gz)``, and any
other ``*.json`` / ``*.json.gz`` whose first bytes read as a Chrome trace:
:func:`pipeline.kinds.looks_like_trace`; other JSON, such as the truth files beside generated exports
or a run's own outputs, is not a report: :func:`discover` can list it, :func:`skipped_note` says so
for people, leaving gpu-idle's own truth files unsaid); globs
(``s3://bucket/prefix/**/*.nsys-rep``) keep the files they match. Results are
de-duplicated (the same file named twice is analysed once) and sorted, so runs
are deterministic. Local paths come back as plain paths, remote ones as URLs
(``s3://bucket/key``). Remote URLs are listed with the ``storage`` section of
the config (endpoint, profile, anonymous access, retries; see
:mod:`pipeline.inputs.storage`).

Every local report found is then judged by its ``os.stat`` before anything
opens it (:func:`local_file_problem`): a FIFO, a device, a broken symlink, a
symlink loop, a file that cannot be opened or one too big for a worker becomes a
problem, as does a folder that cannot be listed, so the later stages only see
regular, readable files of acceptable size.
"""
from __future__ import annotations

import errno
import os
import re
import stat

from .. import kinds
from ..text import printable
from .gzip_size import inflated_size
from .storage import (
    DEFAULT_RETRIES,
    bucket_problem,
    is_remote,
    missing_message,
    open_fs,
)
import glob as globbing

#: What a folder or prefix is searched for: every suffix of every input kind (:data:`pipeline.kinds.SUFFIXES`);
#: a name shared with other files (``.json``, ``.json.gz``, ``.db``) is kept only when its first bytes
#: read as its kind (:func:`pipeline.kinds.passed_over`).
REPORT_SUFFIXES = kinds.SUFFIXES
GLOB_CHARS = set("*?[")


#: How gpu-idle's own truth files begin (``<file>.truth.json`` beside each generated export and trace,
#: written by :func:`pipeline.synth.workload.write_truth`, ``"format"`` the first key): an object whose
#: first member is ``"format": "gpu-idle synth...``, with any JSON whitespace (indented or compact),
#: after a UTF-8 byte order mark or none (an editor that saved it again may add one).
#: Such a file is skipped without a word.
TRUTH_MARKER = re.compile(rb'\A(?:\xef\xbb\xbf)?\s*\{\s*"format"\s*:\s*"gpu-idle synth')
#: Why a file found in a folder is not a report (:func:`_skip`), besides its kind's ``not_it``
#: (``"not a trace"``, ``"not SQLite"``).
NOT_A_TRACE, EMPTY, TRUTH = kinds.PYTORCH_TRACE.not_it, "empty", "gpu-idle truth"
#: Why an archive a local folder holds is passed over (:data:`pipeline.kinds.ARCHIVES`): gpu-idle does not unpack it.
ARCHIVE = "an archive: not an input gpu-idle reads; unpack it"
#: Names listed in :func:`skipped_note` (the others are counted).
SKIPPED_SHOWN = 5


def _skip(name: str, read_head) -> str | None:
    """None when a file found in a folder is a report: by its name (:func:`pipeline.kinds.needs_sniff`
    False), else by its first bytes (``read_head()``; unreadable: kept, so the report's row says why);
    else why it is not: :data:`EMPTY` (0 bytes: a profiler that died before writing?), :data:`TRUTH`
    (gpu-idle's own truth file) or its kind's ``not_it`` (:data:`NOT_A_TRACE`, ``"not SQLite"``)."""
    if not kinds.needs_sniff(name):
        return None
    try:
        head = read_head()
        why = kinds.passed_over(name, head)
        if why is None:
            return None
    except (OSError, ValueError):
        return None
    if not head:
        return EMPTY
    return TRUTH if TRUTH_MARKER.match(head[:4096]) else why


def skipped_note(skipped) -> str | None:
    """One line naming the JSON files a folder search passed over (``skipped``: ``(path, why)`` from
    :func:`discover`), or None when there is none to mention: gpu-idle's own truth files are not
    mentioned. ``skipped 2 .json file(s) that are not PyTorch profiler traces: /d/a.json (empty),
    /d/b.json``; at most :data:`SKIPPED_SHOWN` names (terminal-safe: :func:`~pipeline.text.printable`),
    the others counted (``... and 3 more``). Archives a local folder holds are named too (``(an archive: …)``)."""
    listed = [(p, why) for p, why in skipped if why != TRUTH]
    if not listed:
        return None
    traces = all(kinds.kind_of(p) is kinds.PYTORCH_TRACE for p, _ in listed)
    names = ", ".join(printable(p) + ("" if why == NOT_A_TRACE else f" ({why})")
                      for p, why in listed[:SKIPPED_SHOWN])
    more = f" and {len(listed) - SKIPPED_SHOWN} more" if len(listed) > SKIPPED_SHOWN else ""
    what = ".json file(s) that are not PyTorch profiler traces" if traces else "file(s) that are not reports"
    return f"skipped {len(listed)} {what}: {names}{more}"


def _local_head(path: str) -> bytes:
    """The first bytes of the local file ``path``, read to sniff its kind. Never opens a file that is
    not a regular one (opening a FIFO blocks until a writer comes; a device may never end): judged by
    ``os.stat`` first, then opened non-blocking and judged again by ``os.fstat`` (it may have been
    replaced since). Raises OSError for one that is not (it is kept: :func:`local_file_problem` says
    what it is) or cannot be read."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        raise OSError(errno.EINVAL, "not a regular file", path)
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        return fh.read(kinds.SNIFF_BYTES)


#: What a file that is not a regular file is, by its type bits (``stat.S_IFMT``).
FILE_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
              stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory"}


def file_kind(mode: int) -> str:
    """What a file of ``os.stat`` mode ``mode`` is, for a message: ``"a FIFO"``, ``"a character device"``..."""
    return FILE_KINDS.get(stat.S_IFMT(mode), f"a file of type {stat.S_IFMT(mode):#o}")


def reason(exc: OSError) -> str:
    """The cause of an OSError in a message's words: ``"permission denied"``, ``"no such file or directory"``."""
    return (exc.strerror or str(exc)).lower()


def too_big(path: str, size: int, memory_factor: float, limit: int | None, inflated: int | None = None) -> str | None:
    """The problem of a report of ``size`` bytes at ``path`` whose memory estimate exceeds a worker's
    memory ``limit`` (bytes; None or 0: no limit); None when it fits. The estimate is ``size`` ×
    ``memory_factor``, or for a gzip trace ``inflated`` (the bytes of JSON it inflates to, from its
    gzip trailer: :func:`inflated_json_size`) × ``memory_factor``: the loader holds the inflated text.
    The message starts with ``path`` and says which size was used."""
    need = (size if inflated is None else inflated) * memory_factor
    if not limit or need <= limit:
        return None
    # The file in MiB and bytes: a small file with a large factor would read "0.00 GiB".
    if inflated is None:
        what = f"{size / 2**20:.2f} MiB file ({size:,} bytes)"
    else:
        what = (f"{inflated / 2**20:,.2f} MiB of JSON once inflated ({inflated:,} bytes, per the gzip trailer of "
                f"the {size / 2**20:,.2f} MiB ({size:,} bytes) file)")
    return (f"{path}: too big for one worker: about {need / 2**30:.2f} GiB needed "
            f"({what} x {memory_factor:g}), worker memory limit "
            f"{limit / 2**30:.2f} GiB; raise dask.memory_limit or trim the capture")


def inflated_json_size(path: str, fh=None) -> int | None:
    """The bytes of JSON a PyTorch trace at ``path`` (a ``.json`` or ``.json.gz`` name) inflates to when
    it is gzip data (by its magic bytes, whatever the name says): the gzip trailer's size
    (:func:`~pipeline.inputs.gzip_size.inflated_size`: exact for one member under 4 GiB, else a lower
    bound). None for another name or a file that is not gzip: its own size is what a worker holds.
    ``fh``: the file already open (binary, seekable), else it is opened. Raises OSError (unreadable)."""
    if not kinds.is_trace(path):
        return None
    if fh is not None:
        return inflated_size(fh)
    with open(path, "rb") as own:
        return inflated_size(own)


def stat_failure(exc: OSError, link_target: str | None) -> str:
    """Why ``os.stat`` of a path failed, in a message's words; ``link_target``: what the path
    itself points to when it is a symlink (``os.readlink``), else None."""
    if exc.errno == errno.ELOOP:
        return "symlink loop"
    if exc.errno == errno.ENOENT:
        return f"broken symlink to {link_target}" if link_target is not None else "no such file or directory"
    return f"cannot read: {reason(exc)}"


def _link_target(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:  # not a symlink
        return None


def local_file_problem(path: str, memory_limit: int | None = None, memory_factor: float = 1.5) -> str | None:
    """Why the local report ``path`` cannot be analysed, or None when it is a regular, readable
    file that fits a worker. Judged by ``os.stat`` (following symlinks) before anything opens it:
    a FIFO or a device is never opened (opening a FIFO blocks, reading /dev/zero never ends); a
    regular file is opened to check it can be (nothing read, except for a gzip trace: its first
    bytes and its trailer, :func:`inflated_json_size`); its size (a gzip trace's: the JSON it
    inflates to) × ``memory_factor`` is checked against ``memory_limit`` (bytes; None: not checked,
    see :func:`too_big`). The message starts
    with ``path``: ``<path>: symlink loop``, ``<path>: broken symlink to <target>``,
    ``<path>: not a regular file: a FIFO``, ``<path>: cannot read: permission denied``... Raises nothing."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"{path}: {stat_failure(exc, _link_target(path))}"
    if not stat.S_ISREG(st.st_mode):
        return f"{path}: not a regular file: {file_kind(st.st_mode)}"
    try:  # O_NONBLOCK: should it have become a FIFO since the stat, the open still returns at once
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"{path}: {stat_failure(exc, None)}"
    try:
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):  # replaced since the stat: never read
                return f"{path}: not a regular file: {file_kind(st.st_mode)}"
            inflated = inflated_json_size(path, fh) if memory_limit else None
    except OSError as exc:
        return f"{path}: {stat_failure(exc, None)}"
    return too_big(path, st.st_size, memory_factor, memory_limit, inflated)


def _walk_local(top: str, suffixes, skipped: list) -> tuple[list[str], list[tuple[str, str]]]:
    """The files under the local folder ``top`` whose names end with one of ``suffixes``, sorted
    (symlinked folders are not entered), and a ``(folder, message)`` problem per folder that
    cannot be listed (``<folder>: cannot read folder: permission denied``). JSON files that are not
    reports (:func:`_skip`) are added to ``skipped`` as ``(path, why)``."""
    found: list[str] = []
    problems: list[tuple[str, str]] = []

    def unlisted(exc: OSError) -> None:
        folder = exc.filename or top
        problems.append((folder, f"{folder}: cannot read folder: {reason(exc)}"))

    for folder, _, files in os.walk(top, onerror=unlisted):
        for path in (os.path.join(folder, name) for name in files if name.lower().endswith(kinds.ARCHIVES)):
            skipped.append((path, ARCHIVE))
        for path in (os.path.join(folder, name) for name in files if name.lower().endswith(suffixes)):
            why = _skip(path, lambda p=path: _local_head(p))
            if why is None:
                found.append(path)
            else:
                skipped.append((path, why))
    return sorted(found), problems


def _cause(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"


def _expand(item: str, suffixes, storage, skipped: list) -> tuple[list[str], list[tuple[str, str]]]:
    """Reports of one INPUT and ``(input, message)`` problems (see :func:`_match`)."""
    remote = is_remote(item)
    if remote:
        options = getattr(storage, "options", None) or {}
        retries = getattr(storage, "retries", DEFAULT_RETRIES)
        fs, path = open_fs(item, options, retries, fresh=True)
    elif os.sep == "/" and not any(c in GLOB_CHARS for c in item) and "::" not in item \
            and not item.startswith("data:"):
        fs, path = _PLAIN_LOCAL, local_path(item)  # a file or folder: no need to import fsspec
    else:
        fs, path = open_fs(item)

    def render(p: str) -> str:
        return fs.unstrip_protocol(p) if remote else p

    try:
        return _match(fs, path, item, remote, suffixes, render, skipped)
    except FileNotFoundError:  # e.g. listing a bucket that does not exist
        if remote:
            return [], [(item, missing_message(fs, item, path))]
        return [], [(item, f"{item}: no such file or directory")]


def unmatched(inputs) -> list[str]:
    """The local INPUTS that match nothing at all (docs/outputs.md#the-output-folder): a path with no glob characters at
    which nothing is (not even a broken symlink, :func:`_absent`), or a glob no path matches; a mistyped path, which
    ``gpu-idle run`` refuses with exit status 2 before it writes anything. Remote inputs (:func:`is_remote`) and
    other fsspec forms are never judged here (discovery says what it finds of them)."""

    out = []
    for item in inputs:
        if is_remote(item) or "::" in item or item.startswith("data:") or os.sep != "/":
            continue
        path = local_path(item)
        if any(c in GLOB_CHARS for c in item):
            if not globbing.glob(path, recursive=True):
                out.append(item)
        elif _absent(path):
            out.append(item)
    return out


def local_path(item: str) -> str:
    """The absolute path fsspec's local filesystem makes of ``item`` (POSIX): a ``file://``,
    ``file:``, ``local://`` or ``local:`` prefix dropped, ``~`` expanded, a relative path put
    under the working folder (``./`` and ``.`` dropped, nothing else normalised), trailing
    ``/`` removed. Kept equal to ``fsspec.core.url_to_fs(item)[1]`` (tests/test_startup.py)."""
    for prefix in ("file://", "file:", "local://", "local:"):
        if item.startswith(prefix):
            item = item[len(prefix):]
            break
    if item.startswith("~"):
        item = os.path.expanduser(item)
    elif not item.startswith("/"):
        item = f"{os.getcwd()}/{'' if item == '.' else item[2:] if item.startswith('./') else item}"
    return item.rstrip("/") or "/"


class _PlainLocal:
    """The two questions :func:`_match` asks of a local file or folder named without glob
    characters, answered as fsspec's ``LocalFileSystem`` answers them (symlinks followed)."""

    @staticmethod
    def isdir(path: str) -> bool:
        return os.path.isdir(path)

    @staticmethod
    def exists(path: str) -> bool:
        return os.path.exists(path)


_PLAIN_LOCAL = _PlainLocal()


def _absent(path: str) -> bool:
    """True when nothing at all is at the local ``path``, not even a broken symlink; False when
    something is, or when that cannot be told (a folder on the way cannot be searched)."""
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return True
    except OSError:
        pass
    return False


def _match(fs, path: str, item: str, remote: bool, suffixes, render,
           skipped: list) -> tuple[list[str], list[tuple[str, str]]]:
    """Reports of one INPUT and ``(input, message)`` problems: why it gave none, and (local
    folders) each folder under it that cannot be listed. Locally, whatever is not a folder is
    kept (a FIFO, a broken symlink...): :func:`discover` then says what it is. JSON files of a
    folder or prefix that are not reports go to ``skipped`` (``(path or URL, why)``)."""
    if any(c in GLOB_CHARS for c in path):
        matches = sorted(m for m in fs.glob(path) if (fs.isfile(m) if remote else not fs.isdir(m)))
        if not matches:
            return [], [(item, (remote and bucket_problem(fs, item, path)) or f"{item}: no file matches this pattern")]
        return [render(m) for m in matches], []
    if fs.isdir(path):
        if remote:
            matches, problems = [], []
            for m in sorted(m for m in fs.find(path) if m.lower().endswith(suffixes)):
                why = _skip(m, lambda m=m: fs.cat_file(m, start=0, end=kinds.SNIFF_BYTES))
                if why is None:
                    matches.append(m)
                else:
                    skipped.append((render(m), why))
        else:
            matches, problems = _walk_local(path, suffixes, skipped)
        if not matches and not problems:
            archives = [p for p, why in skipped if why == ARCHIVE and p.startswith(path.rstrip(os.sep) + os.sep)]
            held = (f"; it holds {len(archives)} archive(s) ({', '.join(printable(os.path.basename(p)) for p in archives[:SKIPPED_SHOWN])}"
                    f"{', ...' if len(archives) > SKIPPED_SHOWN else ''}), not an input gpu-idle reads ({kinds.READS}): "
                    "unpack them and name their files or folder") if archives else ""
            return [], [(item, f"{item}: {'prefix' if remote else 'directory'} holds no {' or '.join(suffixes)} file"
                               + held)]
        return [render(m) for m in matches], problems
    if fs.exists(path) or not (remote or _absent(path)):
        return [render(path)], []
    if remote:
        return [], [(item, missing_message(fs, item, path))]
    return [], [(item, f"{item}: no such file or directory")]


class _RealPaths:
    """``os.path.realpath`` of local paths, each folder's resolved once: a file that is not itself a symbolic link
    (one ``lstat``) is its folder's real path and its name, as ``realpath`` would find it component by component
    (~75 µs a file, 0.15 s at 2,000 reports); a symlink, or a name such as ``..``, is resolved whole."""

    def __init__(self):
        self.folders: dict[str, str] = {}

    def __call__(self, path: str) -> str:
        folder, name = os.path.split(path)
        if name in ("", ".", "..") or os.path.islink(path):
            return os.path.realpath(path)
        real = self.folders.get(folder)
        if real is None:
            real = self.folders[folder] = os.path.realpath(folder)
        return os.path.join(real, name)


def discover(inputs, suffixes=REPORT_SUFFIXES, storage=None, memory_limit: int | None = None,
             memory_factor: float = 1.5, skipped: list | None = None) -> tuple[list[str], list[tuple[str, str]]]:
    """Return ``(report_paths, problems)``.

    Args:
        inputs: paths, directories, globs or fsspec URLs.
        suffixes: report file suffixes searched for in directories and prefixes.
        storage: the config's :class:`~pipeline.config.StorageConfig` (or anything
            with ``options`` and ``retries``) used for remote URLs; ``None``: defaults.
        memory_limit: a worker's memory limit in bytes (``dask.memory_limit``); a local
            report whose size in bytes × ``memory_factor`` exceeds it is a problem
            (:func:`too_big`). None: sizes are not judged here (a worker still refuses
            a report too big for its own limit).
        memory_factor: ``dask.memory_factor``, the memory a report needs per byte of file.
        skipped: a list to which ``(path, why)`` is added for every ``.json`` / ``.json.gz`` a
            folder or prefix search passed over after reading its first bytes (:func:`_skip`:
            ``empty``, ``not a trace``, ``gpu-idle truth``; :func:`skipped_note` says it for people),
            sorted by path; None: not collected.
    ``problems`` lists ``(input, message)``, each message starting with the input (the
    report path, for a report found but refused), so ``run`` and the sweep can record them
    as error rows and go on with the rest: inputs that matched nothing or could not be
    listed (missing bucket, access denied, unreachable endpoint), local folders that cannot
    be listed, and local reports that are not regular, readable files of acceptable size
    (:func:`local_file_problem`; judged after de-duplication, by ``os.stat``, so none of
    them is ever opened, read or hashed). Remote reports are not judged here. Raises nothing
    for a bad input.
    """
    found: list[str] = []
    problems: list[tuple[str, str]] = []
    passed_over: list[tuple[str, str]] = []
    for item in inputs:
        item = str(item)
        try:
            paths, item_problems = _expand(item, suffixes, storage, passed_over)
        except Exception as exc:  # noqa: BLE001 - one bad input must not stop the sweep
            paths, item_problems = [], [(item, f"{item}: cannot list ({_cause(exc)})")]
        found.extend(paths)
        problems.extend(item_problems)
    # The same file named twice (other spelling, a symlink) is analysed once, under its first name.
    by_identity: dict[str, str] = {}
    real = _RealPaths()
    for p in found:
        local = "://" not in p
        by_identity.setdefault(real(p) if local else p, os.path.normpath(p) if local else p)
    if skipped is not None:  # a file reached twice (two inputs, a symlink) is said once
        seen = set()
        for path, why in sorted(passed_over):
            key = real(path) if "://" not in path else path
            if key not in seen:
                seen.add(key)
                skipped.append((path, why))
    reports = []
    for path in sorted(by_identity.values()):
        problem = None if "://" in path else local_file_problem(path, memory_limit, memory_factor)
        if problem:
            problems.append((path, problem))
        else:
            reports.append(path)
    return reports, list(dict.fromkeys(problems))  # a folder reached twice is one problem
