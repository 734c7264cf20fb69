"""Reading ahead: the two large tables of the one export a run is given, read while the command imports.

``gpu-idle run EXPORT.sqlite`` spends its first ~0.5 s importing pandas, pyarrow and its stages, on one core;
the other only hashes the file (:func:`pipeline.hashing.hash_ahead`). The loader then reads the kernels and the
CUDA API calls off their b-trees (:mod:`pipeline.load.btree`), which runs without the GIL. :func:`read_ahead`
starts that reading at once, on threads of its own, with the very queries the loader builds
(:func:`pipeline.load.queries.bulk_queries`) and the same b-tree jobs (:func:`pipeline.load.sqlite.fast_jobs`);
the loader takes each table read ahead instead of reading it again (:func:`taken`), and does with it what it
does with one it reads: every check and every value are the same, only read earlier.

A table read ahead is given to the loader only when it is exactly what the loader would read now:

- the same query and the same job (file, root page, columns, capacity: :meth:`~pipeline.load.btree.Job.key`,
  :meth:`~pipeline.load.sqlite.Query.key`);
- the same file, unchanged: the file's stat (device, inode, size, modification and change times) when the
  loader asks is the one it had before and after it was read ahead, and its last change was more than
  :data:`~pipeline.hashing.SETTLE_NS` ago when reading started (the rule under which a file's content key is
  kept: :func:`pipeline.hashing.content_key`). An export with a ``-wal`` or ``-journal`` beside it is not read
  ahead: the loader reads a recovered copy of it, another file.

Anything else (the table was not read ahead, reading it failed, the file changed) and the loader reads the
table itself, as it always did: reading ahead is never needed for a result and never changes one.

What is read ahead is let go (:func:`keep`, :func:`drop`, :func:`stop`) as soon as the run knows that it will
not load that export here: its result is stored, its columnar cache entry is read instead, it is analysed by
Dask workers (they are forked once the threads are done: :func:`stop`), or discovery refused it. The export is
read ahead only when its size is within the budget a local worker of the default configuration has for it
(:func:`budget`), the budget discovery checks it against: a report too big for this machine is never read
twice over.

Only the standard library is imported here: :func:`read_ahead` must start before anything else is loaded;
its threads import the reader (numpy, no pandas).
"""
from __future__ import annotations

import os
import stat
import threading
import time

from ..hashing import SETTLE_NS, yield_to_the_command

#: The default configuration's ``dask.memory_factor`` and ``dask.threads_per_worker`` (configs/default.yaml):
#: :func:`budget` is the size discovery allows a report on a local worker of it (tests/test_read_ahead.py checks
#: that they agree).
DEFAULT_MEMORY_FACTOR = 1.5
DEFAULT_THREADS_PER_WORKER = 1
#: The name of the threads reading ahead (and the prefix of those they read on).
THREAD_NAME = "gpu-idle-read-ahead"
#: Seconds :func:`stop` waits for a thread reading ahead (it stops after the table it is reading).
STOP_WAIT_S = 10.0


class _Ahead:
    """One export read ahead: its stat when reading started, the tables read (key -> Decoded), done when set."""

    __slots__ = ("path", "stamp", "tables", "done", "dropped")

    def __init__(self, path: str, stamp: tuple):
        self.path, self.stamp = path, stamp
        self.tables: dict = {}
        self.done = threading.Event()
        self.dropped = False


_LOCK = threading.Lock()
_ENTRIES: dict[tuple, _Ahead] = {}  # (device, inode) -> what is read ahead of that file
_THREADS: list[threading.Thread] = []


def _stamp(st: os.stat_result) -> tuple:
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def budget() -> int:
    """Bytes of export a local worker of the default configuration may take (``memory_limit: auto``: the machine's
    memory × min(1, threads per worker / CPUs), :func:`pipeline.engine.cluster.local_worker_memory`, over
    ``memory_factor``)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return 0
    share = min(1.0, DEFAULT_THREADS_PER_WORKER / (os.cpu_count() or 1))
    return int(total * share / DEFAULT_MEMORY_FACTOR)


def read_ahead(path: str, threads: int = 2) -> bool:
    """Start reading the kernel and CUDA API tables of the local SQLite export ``path`` (``threads`` > 1: each on a
    thread of its own, else one after the other), when it may be (see the module); True when it started."""
    if "://" in path:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    if (not stat.S_ISREG(st.st_mode) or any(os.path.exists(f"{path}{side}") for side in ("-wal", "-journal"))
            or time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) <= SETTLE_NS or not 0 < st.st_size <= budget()
            or os.environ.get("GPU_IDLE_NO_BTREE")):
        return False
    entry = _Ahead(os.path.abspath(path), _stamp(st))
    with _LOCK:
        if (st.st_dev, st.st_ino) in _ENTRIES:
            return False
        _ENTRIES[(st.st_dev, st.st_ino)] = entry
    _THREADS[:] = [t for t in _THREADS if t.is_alive()]
    thread = threading.Thread(target=_read, args=(entry, threads), name=THREAD_NAME, daemon=True)
    _THREADS.append(thread)
    thread.start()
    return True


def _read(entry: _Ahead, threads: int) -> None:
    """Read ahead (on its own thread): every table the loader would read off its b-tree, kept by its keys; nothing
    kept when anything fails or the file changed meanwhile (the loader then reads and names the problem)."""
    import sqlite3

    from ..memory import small_pages
    from .queries import bulk_queries
    from .sqlite import decode_one, fast_jobs, readonly_uri
    from .tables import Schema

    yield_to_the_command()
    tables = {}
    try:
        with small_pages():
            uri = readonly_uri(entry.path)
            con = sqlite3.connect(uri, uri=True)
            try:
                schema = Schema(con, uri, entry.path)
                queries = bulk_queries(schema)
                jobs = fast_jobs(schema, queries)
            finally:
                con.close()

            failed = []

            def one(name: str) -> None:
                yield_to_the_command()
                job, along = jobs[name]
                try:
                    decoded = None if entry.dropped else decode_one(job, along, queries[name])
                except Exception as exc:  # noqa: BLE001 - kept nothing; the loader reads it and names the problem
                    failed.append(exc)
                    return
                if decoded is not None:
                    tables[_key(job, along, queries[name])] = decoded

            # the other tables each on a daemon thread of its own (:func:`reading` counts them: the command may
            # end without waiting for them), the first on this one
            names = list(jobs)
            helpers = [threading.Thread(target=one, args=(name,), name=THREAD_NAME, daemon=True)
                       for name in (names[1:] if threads > 1 else [])]
            for helper in helpers:
                _THREADS.append(helper)
                helper.start()
            for name in names[:1] if helpers else names:
                one(name)
            for helper in helpers:
                helper.join()
            if failed:
                tables = {}
        if _stamp(os.stat(entry.path)) != entry.stamp:
            tables = {}
    except Exception:  # noqa: BLE001 - the loader reads the file itself and says what is wrong with it
        tables = {}
    with _LOCK:
        if not entry.dropped:
            entry.tables = tables
    entry.done.set()


def _key(job, along, query) -> tuple:
    return job.key(), None if along is None else along.key(), query.key()


def taken(job, along, query, deadline=None):
    """The :class:`~pipeline.load.sqlite.Decoded` of ``query`` read ahead by ``job`` (and ``along``) from the file
    ``job`` reads, as it is now (see the module), given once; None when there is none (the caller reads it).
    Waits for a read under way, within ``deadline`` (a :class:`~pipeline.load.limits.Deadline`, or None)."""
    if not _ENTRIES:
        return None
    try:
        st = os.stat(job.path)
    except OSError:
        return None
    entry = _ENTRIES.get((st.st_dev, st.st_ino))
    if entry is None:
        return None
    left = None if deadline is None or deadline.at is None else max(0.0, deadline.at - time.monotonic())
    if not entry.done.wait(left):
        return None  # the caller reads it and stops at the same bound
    with _LOCK:
        if _stamp(st) != entry.stamp or entry.dropped:
            _forget(entry)
            return None
        decoded = entry.tables.pop(_key(job, along, query), None)
        if not entry.tables:
            _forget(entry)
    return decoded


def _forget(entry: _Ahead) -> None:
    """Let ``entry`` and its tables go (under the lock)."""
    entry.dropped = True
    entry.tables = {}
    if _ENTRIES.get(entry.stamp[:2]) is entry:  # keyed by (device, inode), the stamp's first two
        del _ENTRIES[entry.stamp[:2]]


def _files(paths) -> set:
    """The ``(device, inode)`` of each of ``paths`` that exists."""
    found = set()
    for path in paths:
        try:
            st = os.stat(path)
        except (OSError, TypeError, ValueError):
            continue
        found.add((st.st_dev, st.st_ino))
    return found


def _forget_where(gone) -> None:
    """:func:`_forget` every entry whose ``(device, inode)`` ``gone`` accepts."""
    with _LOCK:
        for key, entry in list(_ENTRIES.items()):
            if gone(key):
                _forget(entry)


def keep(paths) -> None:
    """Let go of what was read ahead of any file but ``paths`` (the reports this process is about to load)."""
    if _ENTRIES:
        wanted = _files(paths)
        _forget_where(lambda key: key not in wanted)


def drop(path: str | None = None) -> None:
    """Let go of what was read ahead of ``path`` (None: of every file); a read under way keeps nothing."""
    if _ENTRIES:
        files = None if path is None else _files([path])
        _forget_where(lambda key: files is None or key in files)


def stop() -> None:
    """:func:`drop` everything and wait for the threads reading ahead (each within :data:`STOP_WAIT_S`): before this
    process forks (the Dask workers of a LocalCluster), no thread may be inside a read whose memory a child would
    inherit."""
    drop()
    for thread in list(_THREADS):
        thread.join(STOP_WAIT_S)


def reading() -> int:
    """How many threads are reading ahead now (they hold nothing that must be written: a process may end
    without them)."""
    return sum(t.is_alive() for t in _THREADS)
