"""Run a command and print, when it ends, its wall time and the CPU time it used (issue 43: `make check` and
`make test` say what they cost). CPU is user + system of the command and of every process it waited for
(pytest's workers, the CLI runs and Dask workers they started), as the kernel accounts it for children.

    python scripts/timed.py LABEL -- COMMAND [ARG ...]

Exits with the command's own status (128 + N for a signal N)."""
from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{seconds % 60:04.1f}"


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: timed.py LABEL -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    label, command = argv[0], argv[2:]
    start = time.perf_counter()
    proc = subprocess.Popen(command)
    signal.signal(signal.SIGTERM, lambda signum, frame: proc.send_signal(signum))  # passed on, then waited for
    while True:
        try:
            status = proc.wait()
            break
        except KeyboardInterrupt:  # the command has the terminal's SIGINT too: wait for it to end
            continue
    wall = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    print(f"{label}: wall {minutes(wall)} ({wall:.0f} s), CPU {minutes(cpu)} ({cpu:.0f} s: user {usage.ru_utime:.0f} s, "
          f"system {usage.ru_stime:.0f} s, every process it waited for)", flush=True)
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
