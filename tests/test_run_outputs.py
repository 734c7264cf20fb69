"""Outputs describe exactly this run (issue 11): no stale files of an earlier run in a reused folder,
--night is a date and nothing else, an unwritable --out is refused before any analysis, a killed run's
temporary files are removed, one sweep at a time per state folder, Dask's scratch space under the
project's cache, and progress lines when there is no terminal."""
from __future__ import annotations

import os
import subprocess
import sys

import pandas as pd
import pytest
from conftest import REPO, run_cli, small_reports

from pipeline.fleet.outputs import PAGES_DIR, gpu_json_name, gpu_page_name
from pipeline.report.medical import record_stem


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Four small reports (2 GPUs each), jobs named after the files (the default label)."""
    return small_reports(tmp_path_factory.mktemp("outputs"), "job", 4, seed=500)


def expected_files(fleet: pd.DataFrame) -> tuple[set, set]:
    """The per-GPU JSON and record names a fleet table calls for, worked out from its rows."""
    ok = fleet[fleet["status"] != "error"]
    gpus = {gpu_json_name(r, g) for r, g in zip(ok["report"], ok["gpu_key"])}
    records = {f"{record_stem(str(job))}.md" for job in fleet["job"].unique()}
    return gpus, records


@pytest.mark.slow
def test_rerun_into_the_same_out_with_fewer_inputs_leaves_no_stale_files(reports, tmp_path):
    """Four reports, then two of them into the same --out: gpus/ and records/ hold exactly the two
    reports' files (before: the four reports' eight per-GPU files and four records stayed), and the
    manager report rendered from the four (`make run` renders DIR/report.html) is gone."""
    out = tmp_path / "out"
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    run_cli("run", str(reports), "--out", str(out), env=env)
    assert len(os.listdir(out / "gpus")) == 8 and len(os.listdir(out / "records")) == 4
    run_cli("report", str(out), "--out", str(out / "report.html"))
    assert (out / "report.html").exists() and len(os.listdir(out / PAGES_DIR)) == 8   # a page per GPU beside it
    second = run_cli("run", str(reports / "job1.sqlite"), str(reports / "job3.sqlite"), "--out", str(out), env=env)
    # 4 per-GPU files and 2 records of job0 and job2, the report.html and the 8 GPU pages: 15 files, every one
    # counted (before: "removed 6 file(s)", and an empty gpu-pages/ stayed)
    assert ("; removed 15 file(s) of an earlier run (6 per-GPU file(s) and record(s) of other inputs; report.html "
            "and 8 GPU page(s) rendered from its outputs: `gpu-idle report DIR --out DIR/report.html` renders them "
            "again), and the emptied folder gpu-pages/\n") in second.stdout
    fleet = pd.read_parquet(out / "fleet.parquet")
    assert sorted(set(fleet["report"])) == [str(reports / "job1.sqlite"), str(reports / "job3.sqlite")]
    gpus, records = expected_files(fleet)
    assert len(gpus) == 4 and records == {"job1.md", "job3.md"}
    assert set(os.listdir(out / "gpus")) == gpus
    assert set(os.listdir(out / "records")) == records
    assert not (out / "report.html").exists()
    assert not (out / PAGES_DIR).exists()   # the GPU pages rendered beside that report went with it, and their folder
    run_cli("report", str(out), "--out", str(out / "report.html"))
    assert set(os.listdir(out / PAGES_DIR)) == {gpu_page_name(r, g) for r, g in zip(fleet["report"], fleet["gpu_key"])}
    # the same two again after the report: only what the report rendered goes (its pages, 4, and itself)
    (out / PAGES_DIR / "notes.txt").write_text("mine")   # not a page: kept, and so is the folder
    third = run_cli("run", str(reports / "job1.sqlite"), str(reports / "job3.sqlite"), "--out", str(out), "--no-cache",
                    env=env)
    assert ("; removed 5 file(s) of an earlier run (report.html and 4 GPU page(s) rendered from its outputs: "
            "`gpu-idle report DIR --out DIR/report.html` renders them again)\n") in third.stdout
    assert os.listdir(out / PAGES_DIR) == ["notes.txt"] and not (out / "report.html").exists()


@pytest.mark.slow
def test_resweeping_a_night_with_fewer_inputs_leaves_no_stale_files(reports, tmp_path):
    state = tmp_path / "state"
    night = state / "nights" / "2026-11-20"
    run_cli("sweep", str(reports), "--state-dir", str(state), "--night", "2026-11-20", "--workers", "1")
    assert len(os.listdir(night / "gpus")) == 8
    again = run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(state), "--night", "2026-11-20")
    assert "sweep 2026-11-20: removed 9 file(s) of an earlier run with other inputs" in again.stdout  # 6 + 3
    fleet = pd.read_parquet(night / "fleet.parquet")
    gpus, records = expected_files(fleet)
    assert set(os.listdir(night / "gpus")) == gpus and len(gpus) == 2
    assert set(os.listdir(night / "records")) == records == {"job0.md"}
    # the night's report.html is rendered again, its GPU pages beside it: the two of this sweep only
    assert set(os.listdir(night / PAGES_DIR)) == {gpu_page_name(r, g) for r, g in zip(fleet["report"], fleet["gpu_key"])}
    history = pd.read_parquet(state / "history" / "run_date=2026-11-20" / "fleet.parquet")
    assert set(history["report"]) == {str(reports / "job0.sqlite")}


def test_a_sweep_that_finds_no_input_says_so(tmp_path):
    """No sweep.inputs and no INPUTS (a misconfigured cron job): a warning on stderr, not a quiet night."""
    proc = run_cli("sweep", "--state-dir", str(tmp_path / "state"), "--night", "2026-11-22")
    assert "gpu-idle sweep: WARNING: no input found (check sweep.inputs in the config, or give INPUTS)" in proc.stderr
    assert "sweep 2026-11-22: 0 report(s): 0 analysed, 0 reused, 0 failed" in proc.stdout


@pytest.mark.parametrize("night", ["../../../x", "2026-13-01", "20261101", "2026-11-01/..", ""])
def test_night_is_a_date_only(reports, tmp_path, night):
    """--night names a folder under the state folder: anything but a real YYYY-MM-DD date is refused
    (exit 2) before anything is written (before: ../../../x wrote outside the state folder)."""
    work = tmp_path / "a" / "b" / "c"
    work.mkdir(parents=True)
    state = work / "state"
    proc = run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(state), "--night", night, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Invalid value for '--night'" in proc.stderr
    assert not state.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_unwritable_out_is_refused_before_any_analysis(reports, tmp_path):
    """--out under a regular file (a folder that cannot be made, even by root): exit 2 with the folder
    and the cause named, nothing analysed (no result stored, no report line)."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = tmp_path / "cache"
    proc = run_cli("run", str(reports), "--out", str(blocker / "out"), check=False, env={"GPU_IDLE_CACHE": str(cache)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"Invalid value for --out: {blocker / 'out'}: cannot write here (Not a directory)" in proc.stderr
    assert "report(s) analysed" not in proc.stdout and "dask:" not in proc.stdout
    assert not list((cache / "results").glob("*.parquet"))


def test_temporary_files_of_a_killed_run_are_removed_by_the_next(reports, tmp_path):
    out = tmp_path / "out"
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    left = [out / ".fleet.csv.0123456789ab.tmp", out / "gpus" / ".x.json.abcdef012345.tmp",
            out / "records" / ".job0.md.ffffffffffff.tmp"]
    for path in left:
        path.write_text("half-written by a run that was killed")
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    assert [p for p in left if p.exists()] == []
    assert not [n for _, _, names in os.walk(out) for n in names if n.endswith(".tmp")]


@pytest.mark.slow
def test_a_second_sweep_on_the_same_state_folder_is_refused_while_the_first_runs(reports, tmp_path):
    """The first sweep holds S/.sweep.lock (an flock); a second process is refused at once with a message
    naming the holder, and analyses and writes nothing (before: both analysed everything and the last
    writer replaced the night's history)."""
    from pipeline.runs.sweep import sweep_lock

    state = tmp_path / "state"
    with sweep_lock(str(state)):   # this test process plays the first sweep
        proc = run_cli("sweep", str(reports), "--state-dir", str(state), "--night", "2026-11-21", check=False)
    assert proc.returncode == 1
    assert f"{state}: another sweep is running on this state folder (pid {os.getpid()} on " in proc.stderr
    assert "this one did nothing: run it again when that one has ended" in proc.stderr
    assert sorted(p.name for p in state.iterdir()) == [".sweep.lock"]
    after = run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(state), "--night", "2026-11-21")
    assert "1 analysed, 0 reused, 0 failed" in after.stdout   # the lock is released with its holder


@pytest.mark.slow
def test_dask_scratch_space_is_a_temporary_folder_removed_and_progress_is_plain_lines(reports, tmp_path):
    """A LocalCluster run: the workers' scratch space is a temporary folder of the run's own, removed
    afterwards (nothing left in the temporary folder, nothing under the cache, which may not be writable:
    issue 42, point 8); with no terminal (a pipe), progress comes as a few plain lines on stderr."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    cache = tmp_path / "cache"
    env = {**os.environ, "GPU_IDLE_CACHE": str(cache), "TMPDIR": str(tmp)}
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", str(reports), "--out", str(tmp_path / "o")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "dask: LocalCluster with 2 worker processes" in proc.stdout
    assert not (cache / "dask-scratch").exists() and os.listdir(tmp) == []
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gpu-idle: progress: ")]
    assert lines[0] == "gpu-idle: progress: analysing 4 reports"
    assert lines[-1].startswith("gpu-idle: progress: 4/4 reports done in ") and lines[-1].endswith(" s")

