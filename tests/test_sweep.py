"""The nightly sweep: incremental reruns, history, rebuilds, faults (issue #5)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import DASK_WORKERS, REPO, run_cli, wait_until_group_gone

from pipeline.synth import generate_training_report


def comparable(fleet: pd.DataFrame) -> pd.DataFrame:
    return fleet.sort_values(["report", "gpu_key"]).reset_index(drop=True).astype(str)


#: Generated reports in :func:`fleet_dir` (2 GPUs each), enough that a kill lands while most are still to do.
REPORTS = 12


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """:data:`REPORTS` small generated reports (2 GPUs each) plus one broken file."""
    root = tmp_path_factory.mktemp("fleet")
    for i in range(REPORTS):
        generate_training_report(str(root / f"job{i % 3}-node{i:02d}.sqlite"), gpus=2, iterations=6, seed=i,
                                 straggler_rank=None)
    (root / "broken.sqlite").write_bytes(b"\0" * 1000)
    return root


#: The night of the module's reference sweep (:func:`first_night`) and of every sweep compared with it.
NIGHT = "2026-11-27"


@pytest.fixture(scope="module")
def first_night(fleet_dir, tmp_path_factory):
    """The reference: one ``gpu-idle sweep`` of :func:`fleet_dir` on night :data:`NIGHT` into a fresh state
    folder (a LocalCluster of 2 workers, the defaults), made once for the module. Returns ``(state, the
    finished process)``; a test that sweeps on from it works on a copy (:func:`copied_state`)."""
    cfg, state = nightly(tmp_path_factory.mktemp("first-night"), fleet_dir)
    return state, run_cli("sweep", "--config", str(cfg), "--night", NIGHT, check=False)


def copied_state(first_night, state) -> None:
    """The reference sweep's state folder copied to ``state`` (for a test that changes it)."""
    shutil.copytree(first_night[0], state, symlinks=True)


def nightly(tmp_path, fleet_dir, **sweep):
    tmp_path.mkdir(parents=True, exist_ok=True)
    cfg = tmp_path / "nightly.yaml"
    state = tmp_path / "state"
    cfg.write_text(f"sweep: {{inputs: ['{fleet_dir}'], state_dir: '{state}'}}\n"
                   + "".join(f"{k}: {v}\n" for k, v in sweep.items()))
    return cfg, state


def wait_for_results(results, count: int, proc, timeout_s: float = 120) -> None:
    """Poll until ``count`` report results are stored under ``results`` (or the sweep ended)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and stored_count(results) >= count:
            return
        time.sleep(0.01)


def stored_count(results) -> int:
    """Results stored whole: a result counts once its checksums sidecar (written last) is in place; a
    kill between the table and its sidecar leaves a table that the next sweep analyses again."""
    return len(list(results.glob("*.sums.json")))


def history(state) -> pd.DataFrame:
    return pd.read_parquet(state / "history")


@pytest.mark.slow
def test_sweep_then_unchanged_rerun_reuses_everything(tmp_path, fleet_dir, first_night, dask_cluster):
    cfg, state = nightly(tmp_path, fleet_dir)
    copied_state(first_night, state)   # the first sweep, night 2026-11-27: the module's reference
    first = first_night[1]
    assert first.returncode == 1  # broken.sqlite failed
    assert f"sweep 2026-11-27: {REPORTS + 1} report(s): {REPORTS} analysed, 0 reused, 1 failed: " in first.stdout
    # The LocalCluster's workers stored the results and wrote the per-GPU JSON into the night
    # themselves: the same bytes as the client writes when the workers are remote (--scheduler).
    ref = tmp_path / "ref"
    run_cli("run", str(fleet_dir), "--out", str(ref), "--config", str(cfg), "--no-cache", "--scheduler",
            dask_cluster, check=False)
    night_gpus = state / "nights" / "2026-11-27" / "gpus"
    assert sorted(os.listdir(night_gpus)) == sorted(os.listdir(ref / "gpus")) and len(os.listdir(night_gpus)) == 2 * REPORTS
    for name in os.listdir(ref / "gpus"):
        assert (night_gpus / name).read_bytes() == (ref / "gpus" / name).read_bytes(), name
    assert len(list((state / "results").glob("*.parquet"))) == REPORTS
    assert f"{fleet_dir / 'broken.sqlite'}: not a readable SQLite database" in first.stdout
    second = run_cli("sweep", "--config", str(cfg), "--night", "2026-11-28", check=False)
    assert f"{REPORTS + 1} report(s): 0 analysed, {REPORTS} reused, 1 failed" in second.stdout
    hist = history(state)
    assert sorted(hist["run_date"].astype(str).unique()) == ["2026-11-27", "2026-11-28"]
    a = hist[hist["run_date"].astype(str) == "2026-11-27"].drop(columns="run_date")
    b = hist[hist["run_date"].astype(str) == "2026-11-28"].drop(columns="run_date")
    pd.testing.assert_frame_equal(comparable(a), comparable(b))
    assert len(a) == REPORTS * 2 + 1 and not a.duplicated(["report", "gpu_key"]).any()
    night = state / "nights" / "2026-11-28"
    assert (night / "fleet.csv").exists() and len(list((night / "gpus").iterdir())) == 2 * REPORTS
    # a forced rerun analyses exactly that report again, with the same numbers
    forced = run_cli("sweep", "--config", str(cfg), "--night", "2026-11-28", "--force",
                     str(fleet_dir / "job0-node00.sqlite"), check=False)
    assert f"{REPORTS + 1} report(s): 1 analysed, {REPORTS - 1} reused, 1 failed" in forced.stdout
    assert "WARNING" not in forced.stdout
    typo = run_cli("sweep", "--config", str(cfg), "--night", "2026-11-28", "--force", "job0-node00.sqlite",
                   check=False)  # a bare file name is not how the inputs name it: said, not silently ignored
    assert (f"WARNING: --force {os.path.abspath('job0-node00.sqlite')}: not among the discovered reports, "
            "nothing forced") in typo.stdout
    assert f"{REPORTS + 1} report(s): 0 analysed, {REPORTS} reused, 1 failed" in typo.stdout
    c = history(state)
    c = c[c["run_date"].astype(str) == "2026-11-28"].drop(columns="run_date")
    pd.testing.assert_frame_equal(comparable(b), comparable(c))
    # make report: rebuild from stored results, nothing analysed
    (night / "fleet.csv").unlink()
    rebuilt = run_cli("sweep", "--config", str(cfg), "--report-only")
    assert "nothing analysed" in rebuilt.stdout and (night / "fleet.csv").exists()
    assert len(list((night / "gpus").iterdir())) == 2 * REPORTS
    assert json.loads((night / ".manifest.json").read_text())["inputs"] is None  # rebuilt outputs vouch for nothing: the next sweep rewrites
    earlier = run_cli("sweep", "--config", str(cfg), "--report-only", "--night", "2026-11-27")
    assert "nothing analysed" in earlier.stdout
    missing = run_cli("sweep", "--config", str(cfg), "--report-only", "--night", "2026-11-26", check=False)
    assert missing.returncode == 1
    assert f"{state}: no night 2026-11-26 in the sweep history (nights: 2026-11-27, 2026-11-28)" in missing.stderr


@pytest.mark.slow
def test_killed_sweep_restarts_to_the_same_table(tmp_path, fleet_dir, first_night):
    state_full = first_night[0]   # the same sweep, not killed
    cfg, state = nightly(tmp_path / "killed", fleet_dir)
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "sweep", "--config", str(cfg), "--night",
                             NIGHT], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    results = state / "results"
    wait_for_results(results, 3, proc)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole sweep: client and its worker processes
    proc.wait()
    wait_until_group_gone(proc.pid)  # its workers hold the state folder's lock until they are gone
    stored = stored_count(results)
    assert 3 <= stored < REPORTS, f"kill came too late ({stored} of {REPORTS} stored)"
    # SIGKILL can stop a write half-way: only under a temporary name, never under a result's name
    assert all(p.name.startswith(".") and p.name.endswith(".tmp") for p in results.glob(".*"))
    restart = run_cli("sweep", "--config", str(cfg), "--night", NIGHT, check=False)
    assert f"{REPORTS - stored} analysed, {stored} reused" in restart.stdout
    assert not list(results.glob(".*")), "the restart leaves no temporary files"
    pd.testing.assert_frame_equal(comparable(history(state)), comparable(history(state_full)))


@pytest.mark.slow
def test_worker_killed_mid_sweep_on_a_real_cluster(tmp_path, fleet_dir, first_night, dask_cluster):
    state_local = first_night[0]   # the same sweep on a LocalCluster, no worker killed
    cfg, state = nightly(tmp_path / "cluster", fleet_dir, dask="{retries: 2}")
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "sweep", "--config", str(cfg), "--night",
                             NIGHT, "--scheduler", dask_cluster], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    wait_for_results(state / "results", 2, proc)
    victim = DASK_WORKERS[dask_cluster][0]
    os.killpg(victim.pid, signal.SIGKILL)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 1, out  # only broken.sqlite fails
    assert f"{REPORTS + 1} report(s): {REPORTS} analysed, 0 reused, 1 failed" in out
    pd.testing.assert_frame_equal(comparable(history(state)), comparable(history(state_local)))


def test_report_too_big_for_a_worker_fails_cleanly(tmp_path, profiles):
    cfg = tmp_path / "small-workers.yaml"
    # 1 GiB workers (well above an idle worker's own ~0.2 GiB, so Dask never pauses them) and an
    # estimate of 1000 x the file size: fastvideo needs 2,256,896 B x 1000 = 2.10 GiB > 1 GiB -> refused;
    # tiny needs 307,200 B x 1000 = 0.29 GiB -> analysed.
    cfg.write_text("dask: {memory_limit: 1GiB, memory_factor: 1000}\n")
    out = tmp_path / "out"
    proc = run_cli("run", str(profiles / "fastvideo_h100_sp2_1s.sqlite"), str(profiles / "tiny_2kernels.sqlite"),
                   "--out", str(out), "--config", str(cfg), check=False,
                   env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})  # no stored result of an earlier test
    assert proc.returncode == 1
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    big, tiny = str(profiles / "fastvideo_h100_sp2_1s.sqlite"), str(profiles / "tiny_2kernels.sqlite")
    assert (os.stat(big).st_size, os.stat(tiny).st_size) == (2_256_896, 307_200)   # the sizes worked with here
    # 2,256,896 B = 2.15 MiB (/ 2**20 = 2.152); x 1000 = 2.10 GiB (/ 2**30 = 2.102); limit 2**30 B = 1.00 GiB.
    assert fleet.loc[big, "error"] == (f"{big}: too big for one worker: about 2.10 GiB needed "
                                       "(2.15 MiB file (2,256,896 bytes) x 1000), worker memory limit 1.00 GiB; "
                                       "raise dask.memory_limit or trim the capture")
    assert fleet.loc[tiny, "status"] == "ok"
    assert "Compute Failed" not in proc.stderr


@pytest.mark.slow
def test_local_workers_store_and_write_the_night_themselves(tmp_path, fleet_dir, monkeypatch):
    """The embedded LocalCluster (its workers see this machine's files): each report's task stores its
    result and writes its per-GPU JSON into the night itself; on a remote scheduler the client stores
    each result as it arrives and the reduce writes the JSON. The night's files are the same."""
    from distributed import LocalCluster

    from pipeline.config import load_config
    from pipeline.runs import driver
    from pipeline.runs import sweep as sweeping

    seen = []
    real = driver.analysed

    def spy(jobs, cfg, backend, gpu_dir=None):
        for outcome in real(jobs, cfg, backend, gpu_dir):
            if outcome.failure is None:
                seen.append((backend.shares_files, outcome.written))
            yield outcome

    monkeypatch.setattr(driver, "analysed", spy)
    cfg = load_config([], {"sweep": {"inputs": [str(fleet_dir)]}, "dask": {"n_workers": 1, "threads_per_worker": 2}})
    nights = {}
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://", dashboard_address=None) as remote:
        for scheduler, state in ((None, tmp_path / "local"), (remote.scheduler_address, tmp_path / "remote")):
            fleet, summary = sweeping.sweep(cfg, state_dir=str(state), night="2026-11-27", scheduler=scheduler,
                                            log=lambda *_: None)
            assert summary.analysed == REPORTS and len(summary.failed) == 1
            shared = scheduler is None
            assert seen == [(shared, shared)] * REPORTS
            seen.clear()
            assert len(list((state / "results").glob("*.parquet"))) == REPORTS
            night = state / "nights" / "2026-11-27"
            assert len(list((night / "gpus").iterdir())) == 2 * REPORTS
            nights[shared] = {p.name: p.read_bytes() for p in (night / "gpus").iterdir()}
    assert nights[True] == nights[False]
