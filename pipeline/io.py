"""File helpers: atomic writes (temporary name, then rename) and strict, diff-friendly JSON.

Every output file of the pipeline goes through :func:`atomic_path`, so a reader (or a run
killed half-way) never sees a half-written file; a temporary file a killed run left is
named ``.<name>.<12 lowercase hex>.tmp`` beside its target (:func:`temp_name`), and only names of
exactly that form are ever removed as leftovers (:data:`LEFTOVER_RE`).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import json
import math
import os
import re
import shutil
import socket
import stat
import time

import numpy as np
import pandas as pd

from .hashing import HASH_CHUNK, file_sha256  # the one file hash (standard library only, so it can start early)


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


#: Random bytes in a temporary name (:func:`temp_name`): 6 bytes, 12 lowercase hex digits.
TEMP_RANDOM_BYTES = 6


def temp_name(name: str) -> str:
    """The one temporary-file name of the product for a file named ``name`` (a base name):
    ``.<name>.<12 lowercase hex>.tmp`` (:data:`TEMP_RANDOM_BYTES` random bytes). The only names
    :func:`is_leftover` accepts, so a person's ``.notes.backup.tmp`` is never taken for one."""
    return f".{name}.{os.urandom(TEMP_RANDOM_BYTES).hex()}.tmp"


def _exclusive_temp(path: str) -> tuple[str, int]:
    """``(temporary path beside path, its descriptor open for writing)``: a file of :func:`temp_name` created
    exclusively, 0600 (as mkstemp); the folder made first when it does not exist (looked for only then: one
    system call less for every file of a folder that does)."""
    folder = os.path.dirname(os.path.abspath(path))
    while True:
        tmp = os.path.join(folder, temp_name(os.path.basename(path)))
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:   # 2^-48 per try: draw again
            continue
        except FileNotFoundError:
            if os.path.isdir(folder):
                raise
            os.makedirs(folder, exist_ok=True)


@contextlib.contextmanager
def _replacing(path: str):
    """Yield ``(tmp, fd)``: a temporary file beside ``path`` (:func:`_exclusive_temp`) and its descriptor, which
    the caller closes; once the block ends without error, the file is made the team's to read (0666 less the
    umask) and renamed over ``path``; else it is removed. Every atomic write of the product ends so."""
    tmp, fd = _exclusive_temp(path)
    try:
        yield tmp, fd
        os.chmod(tmp, 0o666 & ~_UMASK)  # created 0600 (as mkstemp); results are for the team to read
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside ``path`` (:func:`temp_name`, created exclusively); rename it over
    ``path`` on success. Raises OSError when the folder cannot be created or written."""
    with _replacing(path) as (tmp, fd):
        os.close(fd)
        yield tmp


def write_bytes(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`_replacing`), through the descriptor the temporary file was
    created with (a small file costs its creation: no second open)."""
    with _replacing(path) as (_, fd), open(fd, "wb") as fh:
        fh.write(data)


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return str(value)


def absent(value) -> bool:
    """Whether a table cell ``value`` (a scalar) is one of pandas' missing values: None, NA, NaN, NaT."""
    return value is None or (not isinstance(value, str) and bool(pd.isna(value)))


def cell_text(value) -> str:
    """A table cell as text, empty where it is missing (:func:`absent`)."""
    return "" if absent(value) else str(value)


def plain_scalar(value):
    """JSON-safe scalar: NA, NaN and ±inf become null (strict JSON has no Infinity)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def compact_json(value) -> str:
    """Strict (no NaN/Infinity), compact JSON of ``value`` on one line (numpy scalars as numbers)."""
    return json.dumps(value, default=_json_default, allow_nan=False)


def json_text(obj) -> str:
    """Strict JSON (no NaN/Infinity) of ``obj``, ending in a newline. A dict or list gets one
    line per top-level key or item, each value compact: readable and diff-friendly, yet
    written by the C encoder (``indent=`` would switch ``json`` to its pure-Python encoder,
    ~10x slower on the large rosters and timelines of per-GPU documents)."""
    compact = compact_json
    if isinstance(obj, dict) and obj:
        return "{\n" + ",\n".join(f"  {compact(str(k))}: {compact(v)}" for k, v in obj.items()) + "\n}\n"
    if isinstance(obj, list) and obj:
        return "[\n" + ",\n".join(f"  {compact(v)}" for v in obj) + "\n]\n"
    return compact(obj) + "\n"


def write_json(path: str, obj) -> None:
    """Write ``obj`` as :func:`json_text`, atomically."""
    write_text(path, json_text(obj))


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8), atomically (:func:`write_bytes`)."""
    write_bytes(path, text.encode("utf-8"))


def os_cause(exc: OSError) -> str:
    """The cause of an OSError for people: its ``strerror`` (``No space left on device``), also for the
    errors of pyarrow, which carry the errno only in their text (``... [errno 28] ...``)."""
    found = re.search(r"\[errno (\d+)\]", str(exc))
    code = exc.errno if isinstance(exc.errno, int) else (int(found.group(1)) if found else None)
    return os.strerror(code) if code else (exc.strerror or str(exc))


class OutputError(Exception):
    """An output folder cannot be written, or is not the product's to write; the message names it and the cause."""


class FolderBusy(OutputError):
    """Another process holds the folder's lock (:func:`folder_lock`); the message names it."""


#: The lock file a ``gpu-idle run`` or ``gpu-idle report`` holds in the folder it writes (:func:`folder_lock`).
LOCK = ".gpu-idle.lock"


@contextlib.contextmanager
def folder_lock(folder: str, name: str = LOCK, what: str = "another gpu-idle process is writing this folder",
                command: str = "gpu-idle", keep: bool = False):
    """Hold ``folder/name`` (an exclusive ``flock``) while the body runs: one writer per folder. The file
    names its holder (``pid N on HOST, <command>, started <UTC time>``); only a running process holds
    the lock, so a killed one never blocks the next. Never waits. The file is removed when the body
    ends (a file whose lock was taken after it was removed is never trusted: the path is checked to
    still be the locked file), unless ``keep`` (it then stays, naming the last holder).

    Raises:
        FolderBusy: another process holds it (``<folder>: <what> (<holder>); this one did nothing: ...``).
        OutputError: the folder or the lock file cannot be created.
    """

    path = os.path.join(folder, name)
    while True:
        try:
            os.makedirs(folder, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o666)
        except OSError as exc:
            raise OutputError(f"{folder}: cannot write here ({os_cause(exc)})") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 300, 0).decode("utf-8", "replace").strip() or "another process"
            os.close(fd)
            raise FolderBusy(f"{folder}: {what} ({holder}); this one did nothing: run it again when that one "
                             "has ended") from None
        try:
            same = os.path.samestat(os.fstat(fd), os.lstat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)   # its holder removed it between our open and our lock: take the new one
    try:
        stamp = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}, {command}, started {stamp}".encode(), 0)
        except OSError:
            pass  # a full disk: the lock holds all the same, only its holder goes unnamed
        yield
    finally:
        if not keep:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)  # closing the descriptor releases the lock


def real_dir(path: str) -> str:
    """Make sure ``path`` is a real folder (created when missing), never a symbolic link: the product
    writes and deletes only in folders it can see are what they look like. Returns ``path``.

    Raises:
        OutputError: ``path`` is a symbolic link, or not a folder, or cannot be created.
    """
    if os.path.islink(path):
        raise OutputError(f"{path}: a symbolic link (not followed: gpu-idle writes only into real folders); "
                          "replace it with a folder, or choose another output folder")
    try:
        os.makedirs(path, exist_ok=True)
    except FileExistsError as exc:
        raise OutputError(f"{path}: not a folder") from exc
    return path


def same_file(path: str, entry: dict | None) -> bool:
    """Whether ``path`` is a regular file (not a link) holding what ``entry`` (:func:`file_entry`) says;
    ``None`` (a file claimed by name only) matches any regular file."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if entry is None:
        return True
    return st.st_size == entry.get("size") and file_entry(path)["sha256"] == entry.get("sha256")


def file_entry(path: str) -> dict:
    """``{"size": bytes, "sha256": hex}`` of a file's content (:func:`file_sha256`). Raises OSError when it
    cannot be read."""
    sha, size = file_sha256(path)
    return {"size": size, "sha256": sha}


def prune(folder: str, keep: set[str], owned: dict) -> list[str]:
    """Remove the files of ``folder`` that the product wrote and this run does not: every name of
    ``owned`` (``name -> entry``, from the folder's manifest: :func:`file_entry` or None) not in ``keep``
    whose file still holds what the entry says (a file changed since is someone's now: kept). Nothing
    else is ever removed; a symbolic link is never followed. Returns the removed names, sorted; a missing
    folder removes nothing. Raises OSError when a file cannot be removed."""
    if not os.path.isdir(folder) or os.path.islink(folder):
        return []
    stale = sorted(n for n in owned if n not in keep and "/" not in n and same_file(os.path.join(folder, n), owned[n]))
    for name in stale:
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    return stale


def not_to_overwrite(folder: str, paths: list[str], after: str = "", writer: str = "run") -> OutputError:
    """The refusal of a ``writer`` (``run``, ``report``) that would overwrite ``paths`` (relative to
    ``folder``, sorted): files there already that the product cannot prove hold what it wrote (not in the
    folder's manifest, or changed since). The first five are named, ``after`` said after "run again"."""
    shown = ", ".join(paths[:5]) + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
    return OutputError(f"{folder}: {len(paths)} file(s) this {writer} writes are there already and are not "
                       f"gpu-idle's, or were changed since it wrote them ({shown}): move them away and run "
                       f"again{after}; gpu-idle never overwrites a file it cannot prove holds what it wrote")


def remove_if_empty(folder: str) -> bool:
    """Remove ``folder`` when it exists and holds nothing (what :func:`prune` may leave); True when it was
    removed. A missing folder, one that still holds a file, or one that cannot be removed is left as it is."""
    try:
        os.rmdir(folder)
    except OSError:   # missing, not empty, or not ours to remove
        return False
    return True


#: A temporary file of :func:`atomic_path` or :func:`copy_file` (:func:`temp_name`):
#: ``.<name>.<12 lowercase hex>.tmp``; group 1 is the target's name.
LEFTOVER_RE = re.compile(r"^\.(.+)\.[0-9a-f]{%d}\.tmp$" % (2 * TEMP_RANDOM_BYTES))


#: Temporary files and folders (:func:`temp_name`) in a folder several processes write that are older than this (s)
#: are a killed run's, removed by whoever tidies it (a living writer's are younger).
LEFTOVER_AGE_S = 3600


def is_leftover(name: str) -> bool:
    """Whether a file name is a temporary file of :func:`atomic_path` or :func:`copy_file`
    (:func:`temp_name`, :data:`LEFTOVER_RE`): a person's ``.x.y.tmp`` is not."""
    return bool(LEFTOVER_RE.match(name))


def remove_leftovers(folder: str, older_than_s: float = 0.0, recursive: bool = False) -> list[str]:
    """Delete the temporary files (:func:`is_leftover`) a killed run left in ``folder`` (and, with
    ``recursive``, in its real sub-folders: symbolic links are never followed), regular files only, last
    modified more than ``older_than_s`` seconds ago (0: all; only when no other process writes there).
    Returns their paths; a missing folder or a symbolic link has none."""

    before = time.time() - older_than_s
    removed = []
    if os.path.islink(folder):
        return removed
    for root, dirs, files in os.walk(folder):
        if not recursive:
            dirs[:] = []
        for name in files:
            if not is_leftover(name):
                continue
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if stat.S_ISREG(st.st_mode) and (older_than_s <= 0 or st.st_mtime < before):
                    os.unlink(path)
                    removed.append(path)
            except FileNotFoundError:
                pass  # its writer renamed or removed it meanwhile
    return removed


#: Linux's FICLONE ioctl: ``dst`` shares ``src``'s blocks copy-on-write (a reflink: btrfs, XFS, bcachefs).
FICLONE = 0x40049409


def copy_file(src: str, dst: str) -> None:
    """Make ``dst`` a file of its own holding ``src``'s bytes: a reflink where the file system offers one
    (blocks shared copy-on-write, so an edit of either never reaches the other), else a plain copy; never a
    hard link (one inode in two folders: editing one edits both). Created under a temporary name and renamed
    into place. Raises OSError when ``src`` is unreadable, :class:`OutputError` when ``dst``'s folder is a
    symbolic link."""

    real_dir(os.path.dirname(os.path.abspath(dst)))
    with open(src, "rb") as fin, _replacing(dst) as (_, fd), open(fd, "wb") as fout:
        try:
            fcntl.ioctl(fout.fileno(), FICLONE, fin.fileno())
        except OSError:   # no reflinks here (ext4, tmpfs, another file system): a copy
            _copy_bytes(fin, fout)


def _copy_bytes(fin, fout) -> None:
    """Copy the rest of ``fin`` to ``fout`` (files open in binary) in the kernel (``copy_file_range``: no bytes
    through Python), or through Python where the kernel cannot (another file system pair, an old kernel)."""
    try:
        while os.copy_file_range(fin.fileno(), fout.fileno(), 1 << 30):
            pass
    except OSError:
        fin.seek(0)
        fout.seek(0)
        fout.truncate()
        shutil.copyfileobj(fin, fout, HASH_CHUNK)


def slug(text: str) -> str:
    """``text`` made safe as a file name part (at most 80 characters)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


#: A night's date in folder names (``nights/YYYY-MM-DD``, ``history/run_date=YYYY-MM-DD``).
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def dated_dirs(parent: str, prefix: str = "") -> dict[str, str]:
    """``{date: path}`` for the sub-folders of ``parent`` named ``<prefix>YYYY-MM-DD`` (none when
    ``parent`` does not exist)."""
    out = {}
    if os.path.isdir(parent):
        for name in os.listdir(parent):
            date = name[len(prefix):] if name.startswith(prefix) else ""
            if DATE_RE.match(date) and os.path.isdir(os.path.join(parent, name)):
                out[date] = os.path.join(parent, name)
    return out


def unwritable_reason(folder: str | os.PathLike) -> str | None:
    """Why files cannot be created in ``folder`` (made with its parents if missing), or None when they can:
    the nearest part of the path that exists is a file, not a folder (``a file in its place``), or the
    process may not write it (read-only, or a read-only file system). Creates nothing."""
    path = os.path.abspath(os.fspath(folder))
    while not os.path.lexists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if os.path.lexists(path) and not os.path.isdir(path):
        return f"{path} is a file, not a folder"
    if not os.access(path, os.W_OK | os.X_OK):
        return f"{path} cannot be written"
    return None


#: A night more than this many days after today's date (UTC) is in the future: the clock of a machine in
#: any time zone (UTC+14 at most) is on today or tomorrow's date in UTC.
FUTURE_NIGHT_DAYS = 1


def today_utc() -> str:
    """Today's date, UTC, written ``YYYY-MM-DD``: the default night of a sweep."""

    return dt.datetime.now(dt.timezone.utc).date().isoformat()


def in_future(night: str, today: str | None = None) -> bool:
    """Whether the night ``night`` (``YYYY-MM-DD``) is more than :data:`FUTURE_NIGHT_DAYS` after ``today``
    (default: :func:`today_utc`)."""

    limit = dt.date.fromisoformat(today or today_utc()) + dt.timedelta(days=FUTURE_NIGHT_DAYS)
    return night > limit.isoformat()


def current_night(dates) -> str | None:
    """The current night of a sweep: the latest of ``dates`` (``YYYY-MM-DD``) not in the future
    (:func:`in_future`), so that a night written ahead of the clock (``--night 2062-12-03 --future-night``,
    a clock that ran ahead) does not stay the current one for years; None when every one is."""
    today = today_utc()
    return max((d for d in dates if not in_future(d, today)), default=None)
