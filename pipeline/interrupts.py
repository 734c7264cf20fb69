"""SIGINT and SIGTERM as an exception, so that an interrupted run closes what it started.

:func:`install` (the ``gpu-idle`` command, :func:`pipeline.cli.entry`) makes SIGINT raise
:class:`Interrupted` in the main thread; :func:`while_cluster_runs` does the same for SIGTERM while
a Dask cluster is open (:func:`pipeline.engine.cluster.open_client`), so the ``with`` blocks unwind,
the cluster closes and its worker processes end (Slurm jobs are cancelled), and the command exits
with 128 + the signal's number. Outside a cluster SIGTERM keeps the system's action (the process
ends at once), because a Python handler runs only when the main thread gets the GIL, and a thread
analysing a report in this process may hold it for as long as it likes (a catastrophic regular
expression). Processes forked from this one (LocalCluster workers) get the system's actions back
for both signals: a worker must die of SIGTERM (its Nanny's, the clean-up's) even while one of its
threads holds the GIL; on Linux they also die when this process dies unannounced (SIGKILL).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading

#: The signals that interrupt a run.
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_installed = False


class Interrupted(BaseException):
    """A signal (``signum``) interrupted the run. A ``BaseException``, so that no ``except
    Exception`` of the pipeline takes it for one report's failure: it unwinds every ``with`` up to
    the command, which exits with ``128 + signum`` (130 for SIGINT, 143 for SIGTERM)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum

    @property
    def status(self) -> int:
        """The exit status: 128 + the signal's number, as a shell shows a process the signal ended."""
        return 128 + self.signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name


def _ignore(signum, frame) -> None:
    pass


def _raise(signum, frame) -> None:
    """The handler: raise :class:`Interrupted` once; a signal that comes while the run cleans up
    after it is ignored (the clean-up is bounded: :data:`pipeline.engine.cluster.INTERRUPTED_CLOSE_TIMEOUT_S`)."""
    for sig in SIGNALS:
        if signal.getsignal(sig) is _raise:
            signal.signal(sig, _ignore)
    raise Interrupted(signum)


#: Linux's prctl option that has the kernel send a process a signal when its parent dies.
PR_SET_PDEATHSIG = 1
_forked_by = 0  # the pid of the process that forks, recorded just before (os.register_at_fork)
_prctl = None  # libc's prctl, found by install()


def _before_fork() -> None:
    global _forked_by
    _forked_by = os.getpid()


def _defaults_in_child() -> None:
    """In a forked child: the system's actions for SIGINT and SIGTERM, and (Linux) SIGKILL from
    the kernel when the parent dies, however it dies (SIGKILL, an out-of-memory kill): Dask's own
    watch of the parent is a thread of the worker, which cannot run while another holds the GIL.
    The kernel sends it when the thread that forked the child ends; Dask forks a worker from a
    thread that lives as long as that worker (the process's watcher)."""
    for sig in SIGNALS:
        try:
            signal.signal(sig, signal.SIG_DFL)
        except ValueError:  # not the main thread: cannot happen right after fork, where only it runs
            pass
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != _forked_by:  # the parent died between the fork and prctl
            os._exit(1)


def _find_prctl():
    """libc's ``prctl`` (Linux), looked up before any fork (a child must not load libraries), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # no prctl in this libc: Dask's own watch remains
        return None


def install() -> None:
    """For the ``gpu-idle`` process: SIGINT raises :class:`Interrupted` (not KeyboardInterrupt,
    which click turns into ``Aborted!`` and exit 1), :func:`while_cluster_runs` takes SIGTERM too,
    and forked processes get the system's actions for both back and die with this process
    (:func:`_defaults_in_child`). Call it from the main thread."""
    global _installed, _prctl
    signal.signal(signal.SIGINT, _raise)
    if not _installed:
        _prctl = _find_prctl()
        os.register_at_fork(before=_before_fork, after_in_child=_defaults_in_child)
    _installed = True


@contextlib.contextmanager
def while_cluster_runs():
    """While the block runs (a Dask cluster is open), SIGTERM raises :class:`Interrupted` in the main
    thread; afterwards it has its earlier action again. Does nothing unless :func:`install` was
    called (the command; not a library caller or an in-process test) and this is the main thread."""
    if not _installed or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) in (_raise, _ignore):
            signal.signal(signal.SIGTERM, previous)
