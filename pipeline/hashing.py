"""The one file hash (SHA-256 of a file's bytes) and a report's content key, with the standard library only.

A report's content key (:func:`content_key`) is its identity, its columnar cache entry's name and its export
cache key; on a 2M-kernel export it reads and hashes 214 MB (~0.2 s). ``gpu-idle run FILE`` imports pandas,
pyarrow and the pipeline first (~0.5 s on one core, the other idle), so the command line starts hashing the
reports it was given by name, and those named like reports in the folders it was given, on a thread of their own
before it imports them (:func:`hash_ahead`): SHA-256 and the file reads run without the GIL, beside the imports.
The key is then the one :func:`content_key` gives; it is kept under exactly the same rule (the file's stat before
and after, settled for :data:`SETTLE_NS`), so a file rewritten meanwhile is hashed again. The run stops the
thread once its reports are identified (:func:`stop_ahead`): on an unchanged rerun the identity index knew them.
Only the standard library is imported here: the hash must be able to start before anything else is loaded.
"""
from __future__ import annotations

import hashlib
import os
import stat
import threading
import time

#: Bytes read per step when a file is hashed without being kept (:func:`file_sha256`).
HASH_CHUNK = 1 << 20


def hash_into(digest, path: str | os.PathLike) -> int:
    """Feed a file's bytes to ``digest`` (a :mod:`hashlib` object), :data:`HASH_CHUNK` bytes at a time;
    returns how many bytes it read. Raises OSError when it cannot be read."""
    size = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(HASH_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size


def file_sha256(path: str | os.PathLike) -> tuple[str, int]:
    """``(SHA-256 hex digest, size in bytes)`` of a file's content (:func:`hash_into`): the one file hash
    of the output manifests (:func:`pipeline.io.file_entry`), the cache checksums (:mod:`pipeline.checksums`)
    and the reports' content keys (:func:`content_key`). Raises OSError when it cannot be read."""
    digest = hashlib.sha256()
    size = hash_into(digest, path)
    return digest.hexdigest(), size


#: A file whose last change is older than this (ns) when it is hashed, and whose ``stat`` is the same
#: after, keeps its content key for the rest of the process (:func:`content_key`).
SETTLE_NS = 2_000_000_000
_KEYS: dict = {}


class _Ahead:
    """One file given to :func:`hash_ahead`: whether someone started hashing it, and when that is done."""

    __slots__ = ("started", "done")

    def __init__(self):
        self.started = False
        self.done = threading.Event()


_AHEAD: dict[str, _Ahead] = {}
_CLAIM = threading.Lock()
#: The threads ahead, each with its ``stopping`` event (set by :func:`stop_ahead`: it hashes no further, not even
#: the rest of the file it is in).
_THREADS: list[threading.Thread] = []


class _Stopped(OSError):
    """A file the thread ahead stopped hashing (:func:`stop_ahead`): no key is kept; whoever asks hashes it."""


class _Stoppable:
    """A :mod:`hashlib` object fed by :func:`hash_into` that stops, between two reads, once ``stop`` is set."""

    def __init__(self, digest, stop: threading.Event):
        self.digest, self.stop = digest, stop

    def update(self, chunk: bytes) -> None:
        if self.stop.is_set():
            raise _Stopped("stopped hashing ahead")
        self.digest.update(chunk)


def _claim(entry: _Ahead) -> bool:
    """True for the one caller that is to hash ``entry``'s file (the others wait for ``entry.done``)."""
    with _CLAIM:
        if entry.started:
            return False
        entry.started = True
        return True


def _stamp(path: str, st: os.stat_result) -> tuple:
    return os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino


def _hash_and_keep(path: str, st: os.stat_result, stop: threading.Event | None = None) -> str:
    """The file's SHA-256, kept for its ``stat`` when the file had settled before and did not change while hashed.
    ``stop``: (a thread ahead's) raises :class:`_Stopped` once it is set (:func:`stop_ahead`)."""
    stamp = _stamp(path, st)
    if stop is not None:   # a thread ahead: the same hash as file_sha256, stopping between two reads
        digest = hashlib.sha256()
        hash_into(_Stoppable(digest, stop), path)
        key = digest.hexdigest()
    else:
        key = file_sha256(path)[0]
    after = os.stat(path)
    if ((after.st_size, after.st_mtime_ns, after.st_ctime_ns, after.st_ino) == stamp[1:]
            and time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) > SETTLE_NS):
        _KEYS[stamp] = key
    return key


def content_key(path: str | os.PathLike) -> str:
    """The content key of one file: the SHA-256 hex digest of its bytes (:func:`file_sha256`), read and
    hashed once per process. It is the one hash of a report's bytes: its identity (the result key,
    :class:`~pipeline.store.results.IdentityIndex`, through :func:`pipeline.snapshot.snapshot_key`), its
    columnar cache entry's name and source key (:mod:`pipeline.load.cache`), the export cache's key of an
    ``.nsys-rep`` (:mod:`pipeline.inputs.export`) and a cached export's check
    (:func:`~pipeline.checksums.content_digest`). The key is reused only while the file's size, modification
    and change times and inode are those it was hashed with, and only for a file that had not changed for
    :data:`SETTLE_NS` before it was hashed and did not while it was (the rule of the identity index), so a
    rewrite is always hashed again. A file :func:`hash_ahead` is hashing now is waited for, not hashed twice.
    Raises OSError when it cannot be read."""
    path = os.fspath(path)
    st = os.stat(path)
    stamp = _stamp(path, st)
    key = _KEYS.get(stamp)
    if key is not None:
        return key
    entry = _AHEAD.get(stamp[0])
    if entry is not None:
        if _claim(entry):   # not started ahead yet: this caller hashes it, the thread ahead skips it
            try:
                return _hash_and_keep(path, st)
            finally:
                entry.done.set()
        entry.done.wait()
        key = _KEYS.get(stamp)
        if key is not None:
            return key
    return _hash_and_keep(path, st)


#: The nice value of the threads that work ahead of the command (:func:`yield_to_the_command`).
AHEAD_NICE = 10


def yield_to_the_command() -> None:
    """Lower the calling thread's scheduling priority to :data:`AHEAD_NICE` (Linux: a thread's own nice value):
    a thread working ahead (hashing, reading: :func:`hash_ahead`, :mod:`pipeline.load.ahead`) then takes the
    core the command's own thread leaves, never half of the one it is importing on (two cores, and the command
    with two or three threads ahead of it, were shared out evenly before); with nothing else to run it runs
    as fast as ever. Does nothing where a thread's priority cannot be set."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), AHEAD_NICE)
    except (AttributeError, OSError):
        pass


def _ahead(entries: list[tuple[str, _Ahead]], folders: list[str], in_folders, stop: threading.Event) -> None:
    yield_to_the_command()
    entries = entries + _in_folders(folders, in_folders, stop)
    for path, entry in entries:
        if stop.is_set() or not _claim(entry):
            continue   # stopped, or a caller got to it first and hashes it itself
        try:
            st = os.stat(path)
            if stat.S_ISREG(st.st_mode):   # never opened: a FIFO (opening it blocks), a device (reading never ends)
                _hash_and_keep(path, st, stop)
        except OSError:
            pass   # the caller's own content_key raises it, naming the file (or hashes one stopped)
        finally:
            entry.done.set()


def _entry(path: str) -> tuple[str, _Ahead] | None:
    """``(path, its new entry)`` for a file not yet given to a thread ahead, else None."""
    absolute = os.path.abspath(path)
    if absolute in _AHEAD:
        return None
    _AHEAD[absolute] = entry = _Ahead()
    return path, entry


def _in_folders(folders: list[str], in_folders, stop: threading.Event) -> list[tuple[str, _Ahead]]:
    """The entries of the files under ``folders`` (symlinked folders not entered, as discovery does) whose
    names ``in_folders(name)`` accepts, each folder's in the order of their paths."""
    entries = []
    for top in folders:
        for folder, _, files in os.walk(top):
            if stop.is_set():
                return entries
            found = (_entry(os.path.join(folder, name)) for name in sorted(files) if in_folders(name))
            entries += [e for e in found if e is not None]
    return entries


def hash_ahead(paths, in_folders=None) -> None:
    """Start hashing, on one thread of their own, the regular local files among ``paths`` and, with
    ``in_folders`` (a function of a file name: whether it is to be hashed ahead, e.g. named like a report), those
    it accepts under the local folders among ``paths`` (listed on that thread; anything else is left alone: a glob,
    a URL, a folder without ``in_folders``), one after the other, so their :func:`content_key` is known or under
    way when asked for. A file not yet started when a caller asks for it is hashed by that caller; one being
    hashed is waited for. The thread only keeps keys in memory: the process may end without waiting for it
    (:func:`running_ahead`); before this process forks, :func:`stop_ahead` stops it."""
    entries, folders = [], []
    for path in paths:
        path = os.fspath(path)
        if "://" in path:
            continue
        if os.path.isfile(path):
            entry = _entry(path)
            if entry is not None:
                entries.append(entry)
        elif in_folders is not None and os.path.isdir(path):
            folders.append(path)
    if entries or folders:
        stop = threading.Event()
        thread = threading.Thread(target=_ahead, args=(entries, folders, in_folders, stop), name="gpu-idle-hash-ahead",
                                  daemon=True)
        thread.stopping = stop
        _THREADS.append(thread)
        thread.start()


#: Seconds :func:`stop_ahead` waits for a thread ahead (it stops within one read): a read that takes longer (a
#: stalled network folder) is left to finish alone rather than hold the run up.
STOP_WAIT_S = 5.0


def stop_ahead() -> None:
    """Stop the :func:`hash_ahead` threads and wait for them (within one read of :data:`HASH_CHUNK` bytes, at most
    :data:`STOP_WAIT_S` each): what they did not hash is hashed by whoever asks for it. Called once the run's
    reports are identified and before this process forks (the Dask workers of a LocalCluster), so that no child
    inherits a file of theirs half-hashed by a thread it does not have (a report's is done by then: identifying
    it waited for its hash; one a thread may still be in is no report of the run)."""
    for thread in _THREADS:
        thread.stopping.set()
    for thread in _THREADS:
        thread.join(STOP_WAIT_S)


def running_ahead() -> int:
    """How many :func:`hash_ahead` threads are still running (they hold nothing that must be written: a
    process may end without them)."""
    return sum(t.is_alive() for t in _THREADS)
