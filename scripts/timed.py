"""Run a command and print, when it ends, its wall time and the CPU time it used (issue 43: `make check` and
`make test` say what they cost). CPU is user + system of the command and of every process it waited for
(pytest's workers, the CLI runs and Dask workers they started), as the kernel accounts it for children.

    python scripts/timed.py LABEL -- COMMAND [ARG ...] [--and-then COMMAND [ARG ...]] ...

Each ``--and-then`` command runs when the one before it exited 0 (`make check`: the tests, then the quick
performance guard), and the line covers them all. Exits with the last command's status (128 + N for a
signal N)."""
from __future__ import annotations

import resource
import signal
import subprocess
import sys
import time


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def run(command: list[str]) -> int:
    """Run ``command`` and wait for it: its exit status (negative: killed by that signal)."""
    proc = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))  # passed on, then waited for
    while True:
        try:
            return proc.wait()
        except KeyboardInterrupt:  # the command has the terminal's SIGINT too: wait for it to end
            continue


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: timed.py LABEL -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    label, commands = argv[0], [[]]
    for arg in argv[2:]:
        if arg == "--and-then":
            commands.append([])
        else:
            commands[-1].append(arg)
    start = time.perf_counter()
    for command in commands:
        status = run(command)
        if status != 0:
            break
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    print(f"{label}: wall {minutes(wall)} ({wall:.0f} s), CPU {minutes(cpu)} ({cpu:.0f} s: user {usage.ru_utime:.0f} s, "
          f"system {usage.ru_stime:.0f} s, every process it waited for)", flush=True)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
