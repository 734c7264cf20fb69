"""One call run beside this process's own work, on the machine's other CPU: a forked child of the
client (Linux), for the end of a run, when the analysis is over and the client alone would write every
output one after the other (:func:`pipeline.runs.driver.write_documents` writes the CSV tables and the
jobs' records this way while it writes the other files).

A forked child starts in milliseconds and holds what the client holds (the fleet table, the rosters):
nothing is pickled on the way in; only the call's return value (or its exception) comes back, through a
pipe. The child gets the system's actions for SIGINT and SIGTERM and dies with this process
(:mod:`pipeline.interrupts`). Where fork is not the platform's (macOS, Windows), or with one CPU, the
call runs here when :meth:`Beside.result` asks for it.
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import traceback
import warnings


def can_fork() -> bool:
    """True when :func:`beside` runs its call in a forked child: Linux, fork available, and a second CPU."""
    return (sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()
            and len(os.sched_getaffinity(0)) > 1)


class BesideFailed(OSError):
    """The child running a call beside this process ended without giving its result (killed, out of memory),
    or its exception could not be sent back as it was (the text says it)."""


def _name(call) -> str:
    """How messages name ``call``: its name (a ``functools.partial``: its function's)."""
    while not hasattr(call, "__name__") and hasattr(call, "func"):
        call = call.func
    return getattr(call, "__name__", repr(call))


def _child(conn, call, args, kwargs) -> None:
    try:
        value = ("ok", call(*args, **kwargs))
    except Exception as exc:  # noqa: BLE001 - every failure goes back to the parent, which raises it
        value = ("error", exc)
    except BaseException as exc:  # noqa: BLE001 - SystemExit and the like: a failure of the call, not the parent's
        value = ("error", BesideFailed(f"{_name(call)}: {exc!r}"))
    try:
        try:
            data = pickle.dumps(value)
            pickle.loads(data)  # what the parent could not read back is sent as text
        except Exception as exc:  # noqa: BLE001 - an unpicklable result or exception: its text instead
            what = "".join(traceback.format_exception_only(value[1])).strip() if value[0] == "error" else "its result"
            data = pickle.dumps(("error", BesideFailed(f"{_name(call)}: {what} could not be sent back ({exc})")))
        conn.send_bytes(data)  # pickled once: the bytes just read back
    finally:
        conn.close()


class Beside:
    """A call running beside this process (:func:`beside`); :meth:`result` waits for it."""

    def __init__(self, call, args: tuple, kwargs: dict, fork: bool = True):
        self._call, self._args, self._kwargs = call, args, kwargs
        self._done = None
        self._proc = None
        if not (fork and can_fork()):
            return  # run by result(), here
        ctx = multiprocessing.get_context("fork")
        self._conn, theirs = ctx.Pipe(duplex=False)
        with warnings.catch_warnings():  # Python 3.12+: fork with threads (the child runs only this call)
            warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            self._proc = ctx.Process(target=_child, args=(theirs, call, args, kwargs), daemon=True,
                                     name=f"gpu-idle {_name(call)}")
            self._proc.start()
        theirs.close()  # the child's end: closed here, so that its death reads as the end of the pipe

    def result(self):
        """The call's return value, once it has finished (run here and now when no child runs it); raises
        its exception, or :class:`BesideFailed` when the child ended without a result."""
        if self._done is None and self._proc is None:
            try:
                self._done = ("ok", self._call(*self._args, **self._kwargs))
            except Exception as exc:  # noqa: BLE001 - raised below, and again if asked again
                self._done = ("error", exc)
        elif self._done is None:
            try:
                self._done = pickle.loads(self._conn.recv_bytes())
            except (EOFError, OSError):
                self._proc.join()
                self._done = ("error", BesideFailed(
                    f"{_name(self._call)}: the process running it beside this one ended without a result "
                    f"(exit status {self._proc.exitcode})"))
            finally:
                self._conn.close()
            self._proc.join()
        kind, value = self._done
        if kind == "error":
            raise value
        return value

    def wait(self) -> None:
        """Let a child running the call end, whatever it gives (the caller's own work failed: nothing may be
        written once it has returned); a call not started (no child) is not run."""
        if self._proc is None:
            return
        try:
            self.result()
        except Exception:  # noqa: BLE001 - the caller's own failure is the one raised
            pass


def beside(call, *args, **kwargs) -> Beside:
    """Start ``call(*args, **kwargs)`` beside this process (a forked child, :func:`can_fork`; else it runs
    here when its result is asked for) and return its :class:`Beside`. The call must not need this process's
    threads or locks (it runs alone in the child) and must return something picklable."""
    return Beside(call, args, kwargs)


def here(call, *args, **kwargs) -> Beside:
    """``call(*args, **kwargs)`` as a :class:`Beside` that runs it here when its result is asked for (what
    :func:`beside` does where it cannot fork): for a caller that runs a call beside itself only when it is
    worth a fork."""
    return Beside(call, args, kwargs, fork=False)
