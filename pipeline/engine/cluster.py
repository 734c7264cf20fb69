"""The Dask cluster: the embedded ``distributed.LocalCluster``, a running scheduler, or Slurm worker jobs.

:func:`open_client` is the only place a cluster is started or joined; what runs on it is
:mod:`pipeline.engine.map`'s business. A LocalCluster keeps its scratch space (spilled
data, worker folders) in a temporary folder of the run's own (:func:`scratch_dir`), not under a
fixed name in ``/tmp`` nor under a cache folder that may not be writable; a cluster that cannot start its workers raises
:class:`EngineError` with the cause instead of a traceback from deep inside Dask.
"""
from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
import warnings

from ..config import Config, check_scheduler_address
from ..interrupts import while_cluster_runs
from .errors import EngineError
from .slurm import open_slurm_client


class QuietHeartbeat(logging.Filter):
    """Drops the one log record a LocalCluster worker writes, traceback and all, when its heartbeat
    finds the scheduler already gone: the cluster closing at the end of the run (a busy machine
    closes the scheduler before a worker's last heartbeat). A worker that really loses its
    scheduler mid-run is seen by the map (no worker left) and becomes rows, not a log line."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Failed to communicate with scheduler during heartbeat")


class LostScheduler(logging.Filter):
    """Drops the records, traceback and all, the Dask client (and its batched comm) logs when its connection to the
    scheduler breaks (the scheduler killed or unreachable mid-run: a connection error, or its reconnection given up):
    the map sees it (:attr:`pipeline.engine.map.OnDask.lost_scheduler`), the reports not done become rows
    and the command says it in one ``gpu-idle: ERROR:`` line."""

    def filter(self, record: logging.LogRecord) -> bool:
        import asyncio

        kind = record.exc_info[0] if record.exc_info else None
        return not (kind is not None and issubclass(kind, (OSError, asyncio.CancelledError, asyncio.TimeoutError)))


class ScratchGone(logging.Filter):
    """Drops Dask's "Failed to remove ..." error for a work folder that no longer exists: with
    the run removes its temporary scratch folder itself, and Dask's own clean-up of
    the scheduler's folder may come later (at interpreter exit) and find it gone."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.getMessage().startswith("Failed to remove") and "No such file or directory"
                    in record.getMessage())


_SCRATCH_GONE = ScratchGone()


def scheduler_address(cfg: Config, scheduler: str | None = None) -> str | None:
    """The Dask scheduler to use: the argument, else ``dask.scheduler``, else ``DASK_SCHEDULER_ADDRESS``.

    Raises:
        EngineError: the address is not one gpu-idle can connect to
            (:func:`~pipeline.config.check_scheduler_address`; the command line checks it first).
    """
    address = scheduler or cfg.dask.scheduler or os.environ.get("DASK_SCHEDULER_ADDRESS") or None
    if address is None:
        return None
    try:
        return check_scheduler_address(address)
    except ValueError as exc:
        raise EngineError(f"Dask scheduler address {exc}") from None


def _one_line(exc: BaseException) -> str:
    """``Type: first line of the message`` (Dask's messages may run over several lines)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def check_scheduler(address: str, timeout_s: float) -> None:
    """Open one connection to the Dask scheduler at ``address`` and do Dask's handshake (the
    scheduler speaks first), all within ``timeout_s`` seconds, then close it: what
    ``distributed.Client`` would meet, without its unbounded wait for the handshake (a peer that
    accepts and never answers) or its tracebacks (a peer speaking another protocol makes Dask
    read a frame length from its bytes: an HTTP answer asks numpy for 3 EiB).

    Raises:
        EngineError: one line: the address cannot be reached (refused, unknown host, no TCP
            connection in time), the peer accepted but sent nothing in ``timeout_s`` (told apart from
            one that sent bytes without completing the handshake in time: a peer that trickles), or
            what it sent is not Dask's protocol.
    """
    import asyncio

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    start = time.monotonic()
    scheme, location = parse_address(address)
    host, port = parse_host_port(location)
    try:  # the TCP connection first, so that "refused" or "no route" is not taken for a silent peer
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except socket.timeout:
        raise EngineError(f"cannot reach the Dask scheduler at {address}: no TCP connection in {timeout_s:g} s "
                          "(dask.connect_timeout_s)") from None
    except OSError as exc:  # refused, no route, unknown host
        raise EngineError(f"cannot reach the Dask scheduler at {address}: {exc.strerror or _one_line(exc)}") from None
    heard = None  # over TLS the client speaks first: whether the peer says anything is not known here
    try:
        if scheme == "tcp":  # a Dask scheduler speaks first: its first byte, peeked at, in what is left of the time
            sock.settimeout(max(timeout_s - (time.monotonic() - start), 0.001))
            try:
                sock.recv(1, socket.MSG_PEEK)  # b"": it closed the connection, which the handshake then says
                heard = True
            except socket.timeout:
                heard = False
            except OSError:
                heard = True
    finally:
        sock.close()
    if heard is False:
        raise EngineError(f"the Dask scheduler at {address} accepted the connection but sent nothing in "
                          f"{timeout_s:g} s (dask.connect_timeout_s): is it a Dask scheduler, and alive?")
    left = max(timeout_s - (time.monotonic() - start), 0.001)

    from distributed.security import Security

    tls = Security().get_connection_args("client")  # what Client itself would use (tls:// needs it)

    async def handshake():
        comm = await asyncio.wait_for(connect(address, timeout=left, **tls), left)
        await comm.close()

    not_dask = f"the peer at {address} is not a Dask scheduler: it does not speak Dask's protocol"
    # Dask logs what it cannot deserialize (CRITICAL, with a traceback): here that is the answer, said once below.
    protocol_log = logging.getLogger("distributed.protocol.core")
    was_disabled, protocol_log.disabled = protocol_log.disabled, True
    try:
        asyncio.run(handshake())
    except asyncio.TimeoutError:
        sent = "sent bytes but " if heard else ""
        raise EngineError(f"the Dask scheduler at {address} accepted the connection but {sent}did not complete "
                          f"Dask's handshake in {timeout_s:g} s (dask.connect_timeout_s): is it a Dask scheduler, "
                          "and alive?") from None
    except MemoryError:  # the first 8 bytes it sent, read as Dask's frame length, are an impossible size
        raise EngineError(f"{not_dask} (what it sent reads as a message of an impossible size)") from None
    except OSError as exc:  # closed the connection at once, or during the handshake
        raise EngineError(f"cannot reach the Dask scheduler at {address}: {_one_line(exc)}") from None
    except Exception as exc:  # noqa: BLE001 - a garbage frame: ValueError, msgpack's errors ...
        raise EngineError(f"{not_dask} ({_one_line(exc)})") from None
    finally:
        protocol_log.disabled = was_disabled


#: Dask settings of the embedded LocalCluster (its workers inherit them when spawned). The
#: defaults suit a long-lived shared cluster watched on a dashboard; a batch run pays for
#: them in CPU taken from the analysis: the statistical profiler walks every worker's stack
#: every 10 ms, the event-loop tick and system monitor wake every process 50 and 2 times a
#: second. On the 200-report benchmark fleet (2 CPUs) they cost ~10 % of the worker CPU and
#: 0.4 s of the client's. With ``dask.dashboard`` set, the profiler stays on.
LOCAL_CLUSTER_SETTINGS = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.worker.memory.monitor-interval": "500ms",
    "distributed.scheduler.work-stealing-interval": "500ms",
}


#: Scheduler options without a dashboard: its HTTP server (health and metrics routes only, no
#: bokeh) on a free local port, not Dask's default 8787, which a second run on the machine
#: would find taken (a warning on stderr).
NO_DASHBOARD = {"dashboard": False, "dashboard_address": "127.0.0.1:0"}


def worker_start_method(wanted: str) -> str:
    """The :mod:`multiprocessing` start method for the LocalCluster's worker processes:
    ``wanted`` (``dask.start_method``), except that ``fork`` is used on Linux only (macOS has
    ``fork`` but its system libraries may crash in a forked child, which is why Python itself
    spawns there) and a method the platform lacks becomes ``spawn``.

    With ``fork`` the workers are copies of this process, taken from the cluster's event-loop
    thread with the pipeline, numpy, pandas and pyarrow already imported: a worker is ready in
    milliseconds, where ``spawn`` re-imports everything (~0.6 s of CPU per worker before its first
    report; on the 200-report benchmark fleet the cluster is up 0.3-0.4 s sooner and closes 0.2 s
    sooner). What the client holds at that moment is safe to copy: no SQLite connection is open
    (reports are loaded only in workers), and pyarrow and fsspec re-create their thread pools and
    event loop in a forked child. A Nanny restarting a dead worker forks again later, from the
    same thread. Caveats of ``fork``, where ``spawn`` is the choice: Dask's
    ``distributed.nanny.pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``, ``OMP_NUM_THREADS=1``, ...)
    takes effect only in a new interpreter, so forked workers keep this process's allocator and
    thread settings; and a worker's RSS, which Dask's memory limit watches, includes the pages it
    shares with the client (:func:`open_client` freezes the client's objects so that the workers'
    garbage collector does not copy them). Python 3.12+ warns on any fork of a process with threads;
    that one warning is filtered out for the rest of this process.
    """

    method = wanted if wanted in multiprocessing.get_all_start_methods() else "spawn"
    if method == "fork" and not sys.platform.startswith("linux"):
        method = "spawn"
    if method == "fork":
        warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                category=DeprecationWarning)
    return method


def local_worker_memory(cfg: Config) -> int | None:
    """Bytes of memory each worker of the embedded LocalCluster may use: ``dask.memory_limit`` when it
    is a size; for ``auto``, Dask's own rule (the machine's memory × min(1, threads per worker /
    CPUs)); None for no limit (``0``/``null``). Discovery refuses a local report too big for it
    before reading it (:func:`pipeline.inputs.discover.too_big`)."""
    if cfg.dask.memory_limit_bytes:
        return cfg.dask.memory_limit_bytes
    if cfg.dask.memory_limit != "auto":
        return None
    share = min(1.0, cfg.dask.threads_per_worker / (os.cpu_count() or 1))
    return int(total_memory() * share)


def total_memory() -> int:
    """The machine's memory in bytes, as ``psutil.virtual_memory().total`` gives it (Dask's figure):
    on Linux ``sysconf`` answers the same (both are the kernel's ``totalram``) without importing psutil."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        import psutil

        return int(psutil.virtual_memory().total)


#: Seconds a LocalCluster may take to close before its remaining worker processes are killed.
CLOSE_TIMEOUT_S = 30.0
#: The same when the run was interrupted (SIGINT, SIGTERM): a worker busy in code that holds the
#: GIL cannot act on the stop message, and nothing it computes is wanted any more.
INTERRUPTED_CLOSE_TIMEOUT_S = 2.0
#: Seconds the cluster may take to close once its remaining workers were killed; when interrupted, a
#: fraction of a second: nothing is wanted from it any more, and the docs promise the run ends about
#: :data:`INTERRUPTED_CLOSE_TIMEOUT_S` after the signal (docs/operations.md#interruption).
AFTER_KILL_CLOSE_TIMEOUT_S, INTERRUPTED_AFTER_KILL_S = 5.0, 0.3


def _worker_pids(cluster) -> set[int]:
    """Process ids of a LocalCluster's worker processes (each under its Nanny), as it holds them now."""
    pids = set()
    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(getattr(getattr(nanny, "process", None), "process", None), "pid", None)
        if pid:
            pids.add(pid)
    return pids


def close_cluster(cluster, timeout_s: float = CLOSE_TIMEOUT_S,
                  after_kill_s: float = AFTER_KILL_CLOSE_TIMEOUT_S) -> None:
    """Close a LocalCluster within ``timeout_s`` seconds; worker processes still there then are
    killed (SIGKILL) and the cluster is given ``after_kill_s`` more to close. A run must never hang on
    its own cleanup: a worker forked again by its Nanny while the cluster closes (after a crash) can
    miss the stop message and wait forever."""

    pids = _worker_pids(cluster)
    try:
        cluster.close(timeout=timeout_s)
        return
    except Exception:  # noqa: BLE001 - a timeout, or a cluster half-closed already: kill what is left
        pass
    for pid in pids | _worker_pids(cluster):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        cluster.close(timeout=after_kill_s)
    except Exception:  # noqa: BLE001 - nothing more can be done; its processes are gone
        pass


def close_client(client, interrupted: bool = False) -> None:
    """Close the client of a LocalCluster; when the run was ``interrupted``, within
    :data:`INTERRUPTED_AFTER_KILL_S`, its failure ignored. The signal's exception is raised wherever the main
    thread is, which may be inside Dask holding a lock its event loop then waits for (the condition of the map's
    ``as_completed``): the client's close, run on that loop, would wait Dask's whole timeout (60 s) before the
    cluster is closed and its workers killed (:func:`close_cluster`)."""
    if not interrupted:
        client.close()
        return
    try:
        client.close(timeout=INTERRUPTED_AFTER_KILL_S)
    except Exception:  # noqa: BLE001 - a timeout (its loop is held up): the cluster's close ends the rest
        pass


@contextlib.contextmanager
def scratch_dir():
    """Where the LocalCluster keeps its scratch space while it runs: a new temporary folder of this
    run's own, removed afterwards, whatever the caches' folders are (one that cannot be written, a
    file in their place, must not stop the cluster). Raises OSError when it cannot be created."""

    folder = tempfile.mkdtemp(prefix="gpu-idle-dask-scratch-")
    logging.getLogger("distributed.diskutils").addFilter(_SCRATCH_GONE)  # the same filter once, kept
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


_IMPORTS: list[threading.Thread] = []


def import_ahead() -> None:
    """Start importing Dask (``distributed``: ~0.4 s of one CPU) on a thread of its own, so that it runs beside
    other work of the client that leaves the interpreter free (the reports' hashing, :func:`pipeline.store.results.identities`)
    instead of after it. :func:`open_client` waits for it before it starts or joins anything: nothing is forked
    while a thread imports. Once per process (a thread that finds Dask imported ends at once). An import that
    fails is said by the cluster's own import."""
    if _IMPORTS:
        return
    thread = threading.Thread(target=_import_dask, name="gpu-idle-import-dask", daemon=True)
    _IMPORTS.append(thread)
    thread.start()


def _import_dask() -> None:
    try:
        import distributed  # noqa: F401 - imported for open_client, which imports it again by name
    except Exception:  # noqa: BLE001 - open_client's own import raises it where it is said
        pass


@contextlib.contextmanager
def open_client(cfg: Config, scheduler: str | None = None, log=print):
    """A ``distributed.Client`` on ``scheduler`` (or ``cfg.dask.scheduler`` / ``DASK_SCHEDULER_ADDRESS``),
    else on Slurm worker jobs when ``cfg.dask.slurm`` is set (:func:`pipeline.engine.slurm.open_slurm_client`),
    else on a new ``distributed.LocalCluster`` of ``dask.n_workers`` processes that is closed on
    exit. The LocalCluster serves a dashboard only when ``cfg.dask.dashboard`` names an address,
    runs with :data:`LOCAL_CLUSTER_SETTINGS` and keeps its scratch space in :func:`scratch_dir`.

    While the cluster is open, SIGTERM raises :class:`~pipeline.interrupts.Interrupted` (in the
    ``gpu-idle`` command: :func:`~pipeline.interrupts.while_cluster_runs`), so a terminated run
    closes it: a LocalCluster within :data:`INTERRUPTED_CLOSE_TIMEOUT_S`, its workers killed after.

    A scheduler address is checked first (:func:`check_scheduler`, within ``dask.connect_timeout_s``).

    Raises:
        EngineError: the scheduler cannot be reached, the LocalCluster cannot start its
            workers (the message gives Dask's reason), or Slurm gives no worker (the message
            says why: no controller, a refused job, jobs pending, workers that never connect).
    """
    # the client's own records, and its batched comm's ("Batched Comm Closed", traceback and all, when the scheduler
    # goes first: which of the two notices is the machine's timing)
    logs, lost = [logging.getLogger("distributed.client"), logging.getLogger("distributed.batched")], LostScheduler()
    for one in logs:
        one.addFilter(lost)
    try:
        with while_cluster_runs(), _open_client(cfg, scheduler, log) as client:
            yield client
    finally:
        for one in logs:
            one.removeFilter(lost)


@contextlib.contextmanager
def _open_client(cfg: Config, scheduler: str | None = None, log=print):
    """:func:`open_client` without the signal handling."""
    for thread in _IMPORTS:  # Dask imported ahead (import_ahead): done before anything forks
        thread.join()
    import dask
    from distributed import Client, LocalCluster

    address = scheduler_address(cfg, scheduler)
    if address:
        timeout_s = cfg.dask.connect_timeout_s
        check_scheduler(address, timeout_s)
        try:
            client = Client(address, timeout=timeout_s, set_as_default=False)
        except Exception as exc:  # noqa: BLE001 - whatever Dask raises, it means "no scheduler to run on"
            raise EngineError(f"cannot connect to the Dask scheduler at {address}: {_one_line(exc)}") from exc
        with client:
            log(f"dask: scheduler {address}, dashboard {client.dashboard_link}")
            yield client
        return
    if cfg.dask.slurm is not None:
        with open_slurm_client(cfg, log=log) as client:
            yield client
        return
    settings = dict(LOCAL_CLUSTER_SETTINGS)
    if cfg.dask.dashboard:
        settings.pop("distributed.worker.profile.enabled")  # the dashboard's profile pages need it
    method = worker_start_method(cfg.dask.start_method)
    settings["distributed.worker.multiprocessing-method"] = method
    if method == "fork":
        gc.freeze()  # forked workers share the client's objects: their GC must not touch (copy) them
    quiet = QuietHeartbeat()
    worker_log = logging.getLogger("distributed.worker")
    worker_log.addFilter(quiet)  # forked workers inherit it
    try:
        with scratch_dir() as scratch, dask.config.set({**settings, "temporary-directory": scratch}):
            try:
                cluster = LocalCluster(n_workers=cfg.dask.n_workers, threads_per_worker=cfg.dask.threads_per_worker,
                                       processes=True, memory_limit=cfg.dask.memory_limit,
                                       dashboard_address=cfg.dask.dashboard, local_directory=scratch,
                                       scheduler_kwargs=None if cfg.dask.dashboard else NO_DASHBOARD)
            except Exception as exc:  # noqa: BLE001 - Dask raises many kinds here; all mean "no cluster"
                raise EngineError(f"the LocalCluster could not start its {cfg.dask.n_workers} worker(s): "
                                  f"{type(exc).__name__}: {exc}") from exc
            interrupted = False
            try:
                client = Client(cluster, set_as_default=False)
                try:
                    log(f"dask: LocalCluster with {cfg.dask.n_workers} worker processes, "
                        + (f"dashboard {client.dashboard_link}" if cfg.dask.dashboard
                           else "no dashboard (--dashboard :8787 serves one)"))
                    yield client
                except BaseException as exc:
                    # A signal (pipeline.interrupts.Interrupted, KeyboardInterrupt), not a failure: the run
                    # is over, its workers are ended at once, busy or not.
                    interrupted = not isinstance(exc, Exception)
                    raise
                finally:
                    close_client(client, interrupted)
            finally:
                if interrupted:
                    close_cluster(cluster, INTERRUPTED_CLOSE_TIMEOUT_S, INTERRUPTED_AFTER_KILL_S)
                else:
                    close_cluster(cluster)
                # Let Dask's own clean-up of its folders (finalizers of the closed scheduler's and
                # workers' work dirs) run now, while the scratch folder still exists.
                del cluster
                gc.collect()
    finally:
        worker_log.removeFilter(quiet)
        if method == "fork":
            gc.unfreeze()
