"""A call run beside the client (pipeline.engine.beside): a forked child's result, its failures, and the
records of a run's end written that way, byte for byte as the client writes them itself."""
from __future__ import annotations

import errno
import glob
import json
import os
import threading
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli, small_reports

from pipeline.config import load_config
from pipeline.engine import beside as beside_mod
from pipeline.engine.beside import BesideFailed, beside, can_fork, here
from pipeline.runs import driver

needs_fork = pytest.mark.skipif(not can_fork(), reason="runs beside only where this process can fork")


def _pid_and(value):
    return os.getpid(), value


def _fails_with_enospc(path):
    raise OSError(errno.ENOSPC, "No space left on device", path)


def _dies():
    os._exit(7)


class _Unpicklable(Exception):
    def __init__(self, a, b):   # pickles as Exception(args) and cannot be rebuilt from them
        super().__init__(f"{a}/{b}")


def _raises_unpicklable():
    raise _Unpicklable(1, 2)


def _returns_a_lock():
    return threading.Lock()


@needs_fork
def test_the_call_runs_in_another_process_and_its_value_comes_back():
    pid, value = beside(_pid_and, {"a": [1, 2, 3]}).result()
    assert pid != os.getpid()
    assert value == {"a": [1, 2, 3]}


@needs_fork
def test_its_os_error_is_raised_here_as_it_was():
    job = beside(_fails_with_enospc, "/x/records/a.md")
    with pytest.raises(OSError) as exc:
        job.result()
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == "/x/records/a.md"
    assert type(exc.value) is OSError


@needs_fork
def test_a_child_that_dies_is_a_failure_that_says_so():
    with pytest.raises(BesideFailed, match=r"_dies: the process running it beside this one ended without a "
                                           r"result \(exit status 7\)"):
        beside(_dies).result()


@needs_fork
def test_what_cannot_come_back_is_sent_as_text():
    with pytest.raises(BesideFailed, match=r"_raises_unpicklable: .*_Unpicklable: 1/2 could not be sent back"):
        beside(_raises_unpicklable).result()
    with pytest.raises(BesideFailed, match=r"_returns_a_lock: its result could not be sent back"):
        beside(_returns_a_lock).result()


def test_without_fork_the_call_runs_here_when_asked_and_wait_does_not_run_it(monkeypatch):
    monkeypatch.setattr(beside_mod, "can_fork", lambda: False)
    ran = []
    job = beside(ran.append, 1)
    assert ran == []
    assert job.result() is None and ran == [1]
    later = here(ran.append, 2)
    later.wait()
    assert ran == [1]   # a caller that failed does not want it run any more
    with pytest.raises(OSError) as exc:
        here(_fails_with_enospc, "p").result()
    assert exc.value.errno == errno.ENOSPC


# ------------------------------------------------------------- the records of a run, written beside

@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    root = tmp_path_factory.mktemp("beside")
    os.makedirs(root / "in")
    small_reports(root / "in", "job", 3, seed=4242)
    run_cli("run", str(root / "in"), "--out", str(root / "out"), "--workers", "1",
            env={"GPU_IDLE_CACHE": str(root / "cache")})
    fleet = pd.read_parquet(root / "out" / "fleet.parquet")
    rosters = {}
    for path in glob.glob(str(root / "out" / "gpus" / "*.json")):
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        rosters[(doc["report"], doc["gpu_key"])] = {"streams": doc["roster"], "device": doc["device_roster"],
                                                    "timeline": doc["timeline"]}
    return root, fleet, rosters


def _files(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@needs_fork
def test_records_written_beside_are_the_ones_written_here(analysed, tmp_path, monkeypatch):
    root, fleet, rosters = analysed
    cfg = load_config([])
    assert len(fleet["job"].unique()) == 3
    real = driver.write_records

    def watched(*args, **kwargs):
        paths = real(*args, **kwargs)
        with open(tmp_path / f"pid-{os.getpid()}", "w"):
            pass
        return paths

    monkeypatch.setattr(driver, "write_records", watched)
    monkeypatch.setattr(driver, "RECORDS_BESIDE", 3)
    os.makedirs(tmp_path / "forked")
    written, records = driver.write_documents(str(tmp_path / "forked"), fleet, rosters, cfg)
    pids = [p.name for p in tmp_path.glob("pid-*")]
    assert pids and pids != [f"pid-{os.getpid()}"]   # written by the child
    monkeypatch.setattr(driver, "RECORDS_BESIDE", 4)   # 3 jobs: below it, written here
    os.makedirs(tmp_path / "here")
    written_here, records_here = driver.write_documents(str(tmp_path / "here"), fleet, rosters, cfg)
    assert f"pid-{os.getpid()}" in [p.name for p in tmp_path.glob("pid-*")]
    assert [os.path.relpath(p, tmp_path / "forked") for p in records] == \
           [os.path.relpath(p, tmp_path / "here") for p in records_here]
    assert len(records) == 3
    assert written["files"] == written_here["files"]
    assert _files(tmp_path / "forked") == _files(tmp_path / "here")
    assert _files(tmp_path / "forked" / "records") == _files(root / "out" / "records")


@needs_fork
def test_a_failure_of_the_tables_waits_for_the_records_beside(analysed, tmp_path, monkeypatch):
    """The tables fail (a full disk) while the child writes the records: write_documents raises only once the
    child has ended, so nothing is written after it returned, and no temporary file is left."""
    root, fleet, rosters = analysed
    monkeypatch.setattr(driver, "RECORDS_BESIDE", 1)
    real = driver.write_records

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return real(*args, **kwargs)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(driver, "write_records", slow)
    monkeypatch.setattr(driver, "write_outputs", full)
    out = tmp_path / "out"
    os.makedirs(out)
    with pytest.raises(OSError, match="No space left"):
        driver.write_documents(str(out), fleet, rosters, load_config([]))
    before = _files(out / "records")
    assert sorted(before) == sorted(os.listdir(root / "out" / "records"))   # all three, finished
    time.sleep(0.7)
    assert _files(out / "records") == before


@needs_fork
def test_records_beside_that_fail_fail_the_run_with_their_cause(analysed, tmp_path, monkeypatch):
    root, fleet, rosters = analysed
    monkeypatch.setattr(driver, "RECORDS_BESIDE", 1)
    monkeypatch.setattr(driver, "write_records", lambda out_dir, *a, **k: _fails_with_enospc(out_dir + "/records/x.md"))
    out = tmp_path / "out"
    os.makedirs(out)
    with pytest.raises(OSError) as exc:
        driver.write_documents(str(out), fleet, rosters, load_config([]))
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(out) + "/records/x.md"
    assert (out / "fleet.csv").exists()   # the tables were written meanwhile


@needs_fork
def test_what_the_client_printed_before_is_printed_once(tmp_path):
    """Text the client printed but had not flushed (stdout to a file or pipe is block-buffered) when the child
    was forked is not printed a second time by the child."""
    import subprocess
    import sys
    script = ("import sys; from pipeline.engine.beside import beside\n"
              "print('before the fork'); sys.stderr.write('err before\\n')\n"
              "print(beside(len, [1, 2]).result())\n")
    with open(tmp_path / "out", "w") as out, open(tmp_path / "err", "w") as err:
        subprocess.run([sys.executable, "-c", script], stdout=out, stderr=err, check=True,
                       cwd=Path(__file__).resolve().parent.parent)
    assert (tmp_path / "out").read_text() == "before the fork\n2\n"
    assert (tmp_path / "err").read_text() == "err before\n"


@needs_fork
def test_a_partial_is_named_by_its_function():
    import functools
    with pytest.raises(BesideFailed, match=r"^_dies: the process running it"):
        beside(functools.partial(_dies)).result()


def test_run_here_the_call_runs_once_however_often_its_result_is_asked(monkeypatch):
    monkeypatch.setattr(beside_mod, "can_fork", lambda: False)
    ran = []
    job = beside(ran.append, 1)
    job.result()
    job.result()
    assert ran == [1]
    failing = here(_fails_with_enospc, "p")
    for _ in range(2):
        with pytest.raises(OSError):
            failing.result()
