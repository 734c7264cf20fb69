"""Issue 42 point 7: Dask workers running other code are refused before any work reaches them.

A Dask worker of another build computes other figures: here one whose analysis doubles ``idle_ns`` (a copy
of the package with that one change, put first on the worker's ``PYTHONPATH``), one of an older build (its
``pipeline.code_keys`` cannot say which build it runs) and one whose numpy says another version. Before, the
client sent them work, stored what came back under its own key and served it to later correct runs (or
waited ``dask.no_workers_timeout_s``, 120 s, blaming "no Dask worker left"). Now the client asks every
worker for its build (code digest and package versions) first: a mismatched worker is refused with a line
naming its address and what differs; with no worker of the client's build left, every report is an error row
saying why, at once. A result is stored only under a key of the code that computed it.

Real ``dask scheduler`` / ``dask worker`` processes on 127.0.0.1; the client is ``drive`` in this process.
"""
from __future__ import annotations

import shutil
import time
from importlib.metadata import version
from pathlib import Path

import pytest
from conftest import REPO, small_reports
from test_engine_failures import start_cluster, stop

from pipeline.code_keys import result_code
from pipeline.config import load_config
from pipeline.model import GpuResult
from pipeline.runs.driver import RunFolder, drive
from pipeline.store.results import ResultCache, ResultSlot, ResultStore

#: The line of the analysis an "other build" changes: its idle doubled.
IDLE_LINE = "idle_ns=dev.idle_ns,"


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> Path:
    """Four small generated reports (2 GPUs each)."""
    return small_reports(tmp_path_factory.mktemp("builds"), "b", 4, seed=420)


def other_build(root: Path, change) -> Path:
    """A copy of the package under ``root`` with ``change(package folder)`` applied; returns ``root`` (a
    ``PYTHONPATH`` entry that imports it before the installed one)."""
    shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    change(root / "pipeline")
    return root


def doubled_idle(package: Path) -> None:
    analyse = package / "analysis" / "analyse.py"
    text = analyse.read_text()
    assert text.count(IDLE_LINE) == 1, "the analysis changed: find the line that sets idle_ns"
    analyse.write_text(text.replace(IDLE_LINE, "idle_ns=2 * dev.idle_ns,"))


def older_build(package: Path) -> None:
    """A build from before the build check: its ``code_keys`` has no ``build_fingerprint``."""
    keys = package / "code_keys.py"
    text = keys.read_text()
    keys.write_text(text.replace("def build_fingerprint(", "def _not_yet_fingerprint(") + "\nOLDER = True\n")


def other_numpy(root: Path) -> Path:
    """A ``PYTHONPATH`` entry that makes ``importlib.metadata`` report numpy 0.0.1 (the code is the same)."""
    info = root / "numpy-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 0.0.1\n")
    return root


def start(tmp_path: Path, paths: list) -> tuple[str, list, list]:
    """A real scheduler and one worker per entry of ``paths`` (a folder first on its ``PYTHONPATH``: None for the
    repository's own build). Returns (address, processes, worker addresses in the same order)."""
    from distributed import Client

    address, procs = start_cluster(tmp_path, len(paths), paths)
    with Client(address) as client:
        by_name = {info["name"]: a for a, info in client.scheduler_info()["workers"].items()}
    return address, procs, [by_name[f"w{i}"] for i in range(len(paths))]


def config(cache: Path, **dask):
    return load_config([], {"dask": {"retries": 0, **dask}, "cache": {"dir": str(cache)}})


def run(cfg, inputs, out: Path, scheduler: str | None = None):
    lines: list = []
    result = drive(cfg, [str(p) for p in inputs], RunFolder(str(out), log=lines.append), ResultCache.for_run(cfg),
                   scheduler=scheduler, log=lines.append)
    return result, lines


def idle(result) -> dict:
    return {(r, g): int(v) for r, g, v in result.fleet[["report", "gpu_key", "idle_ns"]].itertuples(index=False)}


def stored(cache: Path) -> int:
    return len(list((cache / "results").glob("*.parquet")))


@pytest.fixture(scope="module")
def truth(reports, tmp_path_factory) -> dict:
    """``idle_ns`` of every GPU of the reports, each analysed in this process (one report per run: no cluster),
    its cache thrown away."""
    tmp = tmp_path_factory.mktemp("truth")
    want = {}
    for path in sorted(reports.glob("*.sqlite")):
        result, _ = run(config(tmp / "cache"), [path], tmp / path.stem)
        want.update(idle(result))
    return want


@pytest.mark.slow
@pytest.mark.parametrize("build", ["doubled-idle", "older-build", "other-numpy"])
def test_a_worker_of_another_build_gets_no_work_and_the_run_ends_at_once(reports, truth, tmp_path, build):
    root = tmp_path / "other"
    first = {"doubled-idle": lambda: other_build(root, doubled_idle),
             "older-build": lambda: other_build(root, older_build),
             "other-numpy": lambda: other_numpy(root)}[build]()
    address, procs, [worker] = start(tmp_path, [first])
    cache = tmp_path / "cache"
    try:
        began = time.monotonic()
        result, lines = run(config(cache), sorted(reports.glob("*.sqlite")), tmp_path / "out", address)
        took = time.monotonic() - began
    finally:
        stop(procs)
    assert took < 30, f"{took:.0f} s: the run waited for a worker instead of refusing the only one"
    assert stored(cache) == 0
    assert set(result.fleet["status"]) == {"error"} and len(result.fleet) == 4
    why = {"doubled-idle": f"code {result_code()[:12]}", "older-build": "cannot say which build it runs",
           "other-numpy": f"packages.numpy 0.0.1 (client's {version('numpy')})"}[build]
    [said] = [line for line in lines if line.startswith(f"dask: worker {worker} refused")]
    assert (f"(client's {result_code()[:12]})" if build == "doubled-idle" else why) in said, said
    assert result.engine_problem.startswith("no Dask worker runs this build of gpu-idle: ")
    assert worker in result.engine_problem
    assert all(e.endswith(result.engine_problem) for e in result.fleet["error"])
    # the next correct run (no cluster, same cache) analyses every report and gets the true figures
    again, _ = run(config(cache), sorted(reports.glob("*.sqlite"))[:1], tmp_path / "again")
    assert again.reused == 0 and set(again.fleet["status"]) == {"ok"}
    assert idle(again) == {k: v for k, v in truth.items() if k[0] == str(sorted(reports.glob("*.sqlite"))[0])}


@pytest.mark.slow
def test_a_mixed_cluster_runs_everything_on_the_workers_of_this_build(reports, truth, tmp_path):
    """One worker of this build, one that doubles idle: every report is analysed by the first, right, and
    stored; the second is named as refused. (Four reports on two one-thread workers: one task per report, so
    without the check the second worker gets its share, and its doubled figures would show.)"""
    address, procs, [good, bad] = start(tmp_path, [None, other_build(tmp_path / "other", doubled_idle)])
    cache = tmp_path / "cache"
    try:
        result, lines = run(config(cache), sorted(reports.glob("*.sqlite")), tmp_path / "out", address)
    finally:
        stop(procs)
    assert set(result.fleet["status"]) == {"ok"}, result.fleet["error"].tolist()
    assert idle(result) == truth
    assert stored(cache) == 4 and result.engine_problem is None
    refused = f"dask: worker {bad} refused, no work sent to it: runs another build: "
    assert [line for line in lines if "refused" in line] == [line for line in lines if line.startswith(refused)]
    assert len([line for line in lines if "refused" in line]) == 1 and not any(good in line for line in lines)
    served, _ = run(config(cache), sorted(reports.glob("*.sqlite")), tmp_path / "served")
    assert served.reused == 4 and idle(served) == truth


def test_a_result_computed_by_other_code_is_not_stored_under_this_builds_key(tmp_path, capsys):
    """What a worker that joined after the check (or any other code) computed carries its code digest; the slot
    stores only results of the code its key was made with."""
    slot = ResultSlot(str(tmp_path), "k-other")
    assert slot.code == result_code()
    row = {"report": "x.sqlite", "gpu_key": "GPU-0", "idle_ns": 2}
    assert not slot.put([GpuResult(row=row, code="f" * 64)])
    assert not ResultStore(str(tmp_path)).has("k-other")
    assert "computed by other code (digest ffffffffffff" in capsys.readouterr().err
    older = GpuResult(row=row)
    del older.code  # a build before the record: the attribute is missing
    assert not slot.put([older])
    assert GpuResult(row=row).code == result_code()
