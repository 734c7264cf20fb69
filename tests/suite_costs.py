"""What each test costs (issue 43): wall time and CPU time per test, its fixtures' setup and teardown
included, and the CPU of every process it waited for (a CLI run, a Dask worker it stopped).

``pytest --costs FILE`` appends one JSON line per test to FILE (every xdist worker appends to the same
file; each line is one ``write``), and the run ends with the modules that cost the most CPU and the
slowest tests. ``scripts/suite_costs.py FILE`` turns the file into the Testing table of
docs/operations.md. Its hook and option are used by tests/conftest.py."""
from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict

import pytest


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it has waited for, in seconds."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def checks(item) -> str:
    """What the test checks: its docstring's first sentence (at most 200 characters), else its name in words."""
    doc = (getattr(getattr(item, "function", None), "__doc__", None) or "").strip()
    first = " ".join(doc.split("\n\n")[0].split())
    end = first.find(". ")
    first = first if end < 0 else first[:end + 1]
    if not first:
        first = getattr(item, "originalname", item.name).removeprefix("test_").replace("_", " ")
    return first if len(first) <= 200 else first[:199] + "…"


def marks(item) -> list[str]:
    """The test's markers that say why `make check` leaves it out (``needs_*``, ``slow``)."""
    return sorted({m.name for m in item.iter_markers() if m.name.startswith("needs_") or m.name == "slow"})


def add_costs_option(parser) -> None:
    parser.addoption("--costs", metavar="FILE", default=None,
                     help="append each test's wall and CPU seconds to FILE (JSON lines) and print the costliest "
                          "modules and tests at the end (tests/suite_costs.py)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = item.config.getoption("--costs")
    if not path:
        yield
        return
    wall, cpu = time.perf_counter(), cpu_seconds()
    yield
    record = {"test": item.nodeid, "module": item.nodeid.split("::")[0],
              "wall_s": round(time.perf_counter() - wall, 3), "cpu_s": round(cpu_seconds() - cpu, 3),
              "checks": checks(item), "marks": marks(item)}
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(record) + "\n").encode())
    finally:
        os.close(fd)


def read_costs(path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def by_module(records: list[dict]) -> list[tuple[str, int, float, float]]:
    """``(module, tests, wall_s, cpu_s)`` per module, costliest CPU first."""
    sums = defaultdict(lambda: [0, 0.0, 0.0])
    for r in records:
        s = sums[r["module"]]
        s[0] += 1
        s[1] += r["wall_s"]
        s[2] += r["cpu_s"]
    return sorted(((m, n, w, c) for m, (n, w, c) in sums.items()), key=lambda t: (-t[3], t[0]))


def costs_summary(terminalreporter, config) -> None:
    """With ``--costs FILE`` (xdist's controller, or a run without xdist): the costliest modules and tests."""
    path = config.getoption("--costs")
    if not path or hasattr(config, "workerinput") or not os.path.exists(path):
        return
    records = read_costs(path)
    tr = terminalreporter
    tr.section(f"costs ({path}: {len(records)} tests, {sum(r['cpu_s'] for r in records):.0f} CPU-s)")
    tr.write_line("CPU-s   wall-s  tests  module")
    for module, n, wall, cpu in by_module(records)[:15]:
        tr.write_line(f"{cpu:6.1f}  {wall:6.1f}  {n:5d}  {module}")
    tr.write_line("CPU-s   wall-s  test")
    for r in sorted(records, key=lambda r: -r["cpu_s"])[:15]:
        tr.write_line(f"{r['cpu_s']:6.1f}  {r['wall_s']:6.1f}  {r['test']}")
