"""The committed state of an SQLite export, read without writing anything beside it.

The main file alone is not always what SQLite calls the database (docs/definitions.md#trusting-the-input):

- in WAL mode, committed transactions live in ``<file>-wal`` until a checkpoint copies them
  into the main file;
- a writer that died mid-transaction may have written pages into the main file already; its
  hot ``<file>-journal`` holds the pages to put back (the committed state is the journal
  rolled back);
- a live writer holding SQLite's PENDING or EXCLUSIVE lock is rewriting the main file now.

:func:`committed_state` gives the loader a file that holds exactly the committed state: the
export itself when no sidecar holds part of it (read while holding SQLite's SHARED lock, as
any reader does, so no writer can start rewriting it meanwhile), else a private copy of the
file and its sidecars in a temporary folder, recovered there by SQLite (WAL replayed, hot
journal rolled back) and removed afterwards. A file another process is writing is refused
with a :class:`~pipeline.model.ProfileError` saying so. Nothing is ever written beside the
export: no ``-shm``, no checkpoint, no rollback; locks are advisory ``fcntl`` locks.

:func:`snapshot_key` is the content identity of that committed state: the main file's
SHA-256 when it alone holds it, else a hash of the file and its sidecars, so an export whose
committed data lives partly in a sidecar is never served a cache entry of its main file alone.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import sqlite3
import struct
import tempfile
import time

from .hashing import content_key, hash_into
from .model import ProfileError

try:
    import fcntl
except ImportError:  # not POSIX: no advisory locks to look at
    fcntl = None

#: SQLite's lock bytes in the main file (os_unix.c): PENDING, RESERVED, then the SHARED range.
PENDING_BYTE = 0x40000000
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
#: Seconds to wait for a writer to finish (as SQLite's busy timeout) before refusing the file.
BUSY_WAIT_S = 2.0
#: Times the sidecars are copied again when the writer changed them during the copy.
COPY_ATTEMPTS = 3
#: A -wal holds frames only past its 32-byte header.
WAL_HEADER = 32
#: First bytes of a rollback journal that may be hot (a finished journal is empty or zeroed).
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")

BEING_WRITTEN = ("another process is writing it (it holds SQLite's lock for writing the file); "
                 "nothing was read: analyse it again once that process is done")


def _head(path: str, n: int) -> bytes | None:
    """The first ``n`` bytes of the sidecar ``path``, or None when there is none: absent, or a name
    too long for the file system (ENAMETOOLONG: an export whose name is within 8 bytes of the limit
    cannot have a ``-journal`` or ``-wal`` beside it, so none holds part of its state)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return None
        raise


def sidecars(path: str) -> list[str]:
    """The sidecar files beside the export ``path`` that hold part of its committed state or
    pages to put back: a ``-wal`` with at least one frame and a ``-journal`` that starts with
    the rollback-journal magic. Empty when the main file alone is the committed state (an
    empty or zeroed journal, a -wal without frames, a ``-shm`` alone)."""
    out = []
    wal = _head(f"{path}-wal", WAL_HEADER + 1)
    if wal is not None and len(wal) > WAL_HEADER:
        out.append(f"{path}-wal")
    if _head(f"{path}-journal", len(JOURNAL_MAGIC)) == JOURNAL_MAGIC:
        out.append(f"{path}-journal")
    return out


def snapshot_key(path: str) -> str:
    """Content identity (64 hex digits) of the export's committed state (see module docstring).

    Equals :func:`~pipeline.checksums.file_digest` when no sidecar holds part of it (hashed once
    per process while the file is unchanged: :func:`content_key`), else the SHA-256 of the main
    file's bytes followed, per sidecar, by its suffix (``-wal``, ``-journal``) and its bytes. Raises
    OSError when a file cannot be read.
    """
    for _ in range(COPY_ATTEMPTS):
        extra = sidecars(path)
        if not extra:
            return content_key(path)
        digest = hashlib.sha256()
        try:
            hash_into(digest, path)
            for side in extra:
                digest.update(b"\0" + side[len(path):].encode() + b"\0")
                hash_into(digest, side)
        except FileNotFoundError:
            continue  # a checkpoint or commit removed a sidecar meanwhile: look again
        return digest.hexdigest()
    _raise_busy(path)


def _raise_busy(path: str):
    """Raise the :class:`ProfileError` of a file another process is writing."""
    raise ProfileError(f"{path}: {BEING_WRITTEN}")


def _flock(fd: int, kind: int, start: int, length: int) -> bool:
    """Set (``F_RDLCK``) or release (``F_UNLCK``) an advisory lock on bytes ``[start, start + length)``
    of ``fd`` without waiting; False when another process holds a conflicting lock. Open file
    description locks where the system has them (Linux): they belong to this descriptor only,
    so closing it never drops SQLite's own locks of this process. A file system without
    advisory locks counts as unlocked (nothing can be told there)."""
    if fcntl is None:
        return True
    try:
        if hasattr(fcntl, "F_OFD_SETLK"):
            fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack("hhqqixxxx", kind, os.SEEK_SET, start, length, 0))
        else:
            fcntl.lockf(fd, (fcntl.LOCK_UN if kind == fcntl.F_UNLCK else fcntl.LOCK_SH | fcntl.LOCK_NB),
                        length, start, os.SEEK_SET)
    except OSError as exc:
        # Only a conflicting lock says "held"; a file system without locks (ENOLCK, EINVAL) cannot tell.
        return exc.errno not in (errno.EAGAIN, errno.EACCES)
    return True


@contextlib.contextmanager
def _shared_lock(path: str):
    """Hold SQLite's SHARED lock on ``path`` while the block runs, taken as SQLite takes it (a
    read lock on the PENDING byte, then on the SHARED range, then the PENDING byte released):
    meanwhile no rollback-journal writer can write into the file. Waits up to
    :data:`BUSY_WAIT_S` for a writer holding PENDING or EXCLUSIVE, then raises
    :class:`ProfileError` saying another process is writing it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # unreadable: the loader says so when it opens the file
        fd = None
    if fd is None:
        yield
        return
    try:
        deadline = time.monotonic() + BUSY_WAIT_S
        rd, un = (fcntl.F_RDLCK, fcntl.F_UNLCK) if fcntl else (0, 0)
        while True:
            if _flock(fd, rd, PENDING_BYTE, 1):
                shared = _flock(fd, rd, SHARED_FIRST, SHARED_SIZE)
                _flock(fd, un, PENDING_BYTE, 1)
                if shared:
                    break
            if time.monotonic() >= deadline:
                _raise_busy(path)
            time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the locks of this descriptor


def _fingerprint(path: str, extra: list[str]) -> tuple:
    """What a writer changes while we copy: the main file's stat and each sidecar's header (a
    WAL restarted from its start gets new salts; frames appended after the copy do not matter:
    recovery stops at the last commit it has)."""
    st = os.stat(path)
    return (st.st_size, st.st_mtime_ns, st.st_ino), tuple(_head(side, WAL_HEADER) for side in extra)


def _recovered_copy(path: str, extra: list[str], folder: str) -> str:
    """Copy ``path`` and its sidecars into ``folder`` and let SQLite recover the copy (replay the
    WAL's committed frames into it, or roll the hot journal back); returns the copy, a plain
    rollback-mode database that holds the committed state and needs no sidecar. Raises
    :class:`ProfileError` when the writer keeps changing the files or the copy cannot be made
    or recovered."""
    copy = os.path.join(folder, "export.sqlite")
    suffixes = ", ".join(side[len(path):] for side in extra)
    for _ in range(COPY_ATTEMPTS):
        before = _fingerprint(path, extra)
        try:
            shutil.copyfile(path, copy)
            for side in extra:
                shutil.copyfile(side, copy + side[len(path):])
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise ProfileError(f"{path}: cannot copy it with its {suffixes} to {folder} to read its committed "
                               f"state ({exc.strerror or exc})") from exc
        if _fingerprint(path, extra) == before:
            break
    else:
        _raise_busy(path)
    con = sqlite3.connect(copy, isolation_level=None)
    try:
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()  # recovery happens on the first read
        if con.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            con.execute("PRAGMA journal_mode=DELETE").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ProfileError(f"{path}: its committed state cannot be recovered from its {suffixes} ({exc})") from exc
    finally:
        con.close()
    return copy


@contextlib.contextmanager
def committed_state(path: str):
    """Yield the path of a file that holds exactly the committed state of the export ``path``.

    That is ``path`` itself, read under SQLite's SHARED lock for as long as the block runs, when
    no sidecar holds part of the state (:func:`sidecars`; if the file changed all the same, as a
    WAL checkpoint may, leaving the block raises the error of a file being written); else a
    recovered private copy in a temporary folder (``$TMPDIR``; as large as the export and its
    sidecars), removed when the block ends. Nothing is written beside ``path``. A path that is
    not a regular file is yielded as it is (the loader names the problem).

    Raises:
        ProfileError: another process holds SQLite's lock for writing the file (or keeps
            rewriting its sidecars), or the committed state cannot be copied or recovered.
    """
    if not os.path.isfile(path):
        yield path
        return
    with _shared_lock(path):
        extra = sidecars(path)
        if not extra:
            before = _fingerprint(path, [])
            yield path
            if _fingerprint(path, []) != before:  # a WAL checkpoint ignores our lock: it wrote meanwhile
                _raise_busy(path)
            return
        folder = tempfile.mkdtemp(prefix="gpu-idle-snapshot-")
        try:
            copy = _recovered_copy(path, extra, folder)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
    try:
        yield copy
    finally:
        shutil.rmtree(folder, ignore_errors=True)
