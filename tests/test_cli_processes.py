"""Issue 43: the suite runs the ``gpu-idle`` command in the test's own process (conftest ``run_cli``), so each
command is also run here once as a real process, on the same inputs, and the two must agree: the exit
status, every output file byte for byte, and stdout and stderr line for line (a line that states a duration
compared without its seconds). What only a real process does (its signals, its exit, locks between
processes, hangs) is tested where that behaviour is (test_engine_hardening, test_process_exit, test_sweep)."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from pipeline.synth import generate_training_report

pytestmark = pytest.mark.slow

#: A duration in a progress line (``done in 0.1 s``, ``after 3 s``): differs between any two runs.
SECONDS = re.compile(r"\d+(\.\d+)? s\b")


def same_lines(text: str, out: Path, caches: Path) -> list[str]:
    return [SECONDS.sub("N s", line.replace(str(out), "OUT").replace(str(caches), "CACHES"))
            for line in text.splitlines()]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but a lock (it names its holder's pid), a cache's (``cache/``: what a
    cache holds may differ, e.g. a plot a process drew before is not drawn again; no output depends on it)
    and the sweep's identity index (it records only files older than 2 s: timing); a night's manifest
    without its ``html`` stamp (a digest of its history files' mtimes and inodes)."""
    got = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not path.name.endswith(".lock") and rel.parts[0] != "cache" \
                and path.name != "identity-index.json":
            got[str(rel)] = path.read_bytes()
            if path.name == ".manifest.json":
                got[str(rel)] = json.dumps({k: v for k, v in json.loads(got[str(rel)]).items() if k != "html"})
    return got


def both(tmp_path: Path, make_args, *, env=None) -> None:
    """Run ``make_args(out)`` once as a process and once in this process, each into the same ``out`` with
    the same empty caches (moved aside / removed between the two: a page names its folder); assert the two
    agree."""
    got = {}
    out, caches = tmp_path / "out", tmp_path / "cache"
    for how in ("process", "in-process"):
        run_env = {"GPU_IDLE_CACHE": str(caches / "columns"), "GPU_IDLE_EXPORT_CACHE": str(caches / "exports"),
                   **(env or {})}
        proc = run_cli(*make_args(out), check=False, env=run_env, process=how == "process")
        got[how] = (proc.returncode, same_lines(proc.stdout, out, caches), same_lines(proc.stderr, out, caches),
                    files(out) if out.is_dir() else {})
        if out.exists():
            out.rename(tmp_path / how)
        shutil.rmtree(caches, ignore_errors=True)
    process, in_process = got["process"], got["in-process"]
    assert process[0] == in_process[0]
    assert process[1] == in_process[1]
    assert process[2] == in_process[2]
    assert process[3].keys() == in_process[3].keys()
    differ = [name for name in process[3] if process[3][name] != in_process[3][name]]
    assert differ == [], differ


@pytest.fixture(scope="module")
def two_reports(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("two")
    for i in range(2):
        generate_training_report(str(folder / f"job{i}.sqlite"), gpus=2, iterations=5, seed=70 + i)
    return folder


def test_run_of_one_report(tmp_path, profiles):
    both(tmp_path, lambda out: ["run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(out)])


def test_run_of_two_reports_on_a_local_cluster(tmp_path, two_reports):
    both(tmp_path, lambda out: ["run", str(two_reports), "--out", str(out), "--workers", "1"])


def test_a_failing_run_exits_1_saying_why(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"not a database")
    both(tmp_path, lambda out: ["run", str(bad), "--out", str(out)])


def test_a_usage_error_exits_2(tmp_path):
    both(tmp_path, lambda out: ["run", str(tmp_path / "nothing-here"), "--out", str(out)])


def test_report_and_compare_of_a_run(tmp_path, profiles):
    run = tmp_path / "run"
    run_cli("run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(run))

    def report(out):
        out.mkdir(parents=True, exist_ok=True)
        return ["report", str(run), "--out", str(out / "report.md"), "--format", "md"]

    both(tmp_path / "report", report)
    both(tmp_path / "compare", lambda out: ["compare", str(run), str(run), "--out", str(out)])


def test_a_sweep_night(tmp_path, two_reports):
    inputs = tmp_path / "inputs"
    shutil.copytree(two_reports, inputs)

    def sweep(out):
        return ["sweep", str(inputs), "--state-dir", str(out), "--night", "2026-12-01"]

    both(tmp_path, sweep)


def test_running_in_this_process_gives_every_log_handler_its_stream_back():
    """``run_cli`` in this process (conftest ``in_process``) points the stderr log handlers at the captured stderr
    for the call, then back. One handler on several loggers (Dask puts its one handler on ``distributed``,
    ``tornado``, ...) was listed once per logger: told the same stream twice, the second ``setStream`` said
    "unchanged" (None), and putting things back then left that handler with no stream at all; every later record
    through it printed a "--- Logging error ---" traceback in the middle of the suite."""
    import logging
    import sys

    shared = logging.StreamHandler(sys.stderr)
    first, second = logging.getLogger("gpu-idle-test-one"), logging.getLogger("gpu-idle-test-two")
    for logger in (first, second):
        logger.addHandler(shared)
    try:
        assert run_cli("--version").returncode == 0
        assert shared.stream is sys.stderr
    finally:
        for logger in (first, second):
            logger.removeHandler(shared)
