"""Dask really runs the graph: one analyse task per GPU, locally and on a real scheduler + 2 workers."""
from __future__ import annotations

import socket
import time
import warnings

import pandas as pd
import pytest
from conftest import REPO, run_cli
from distributed import Client, LocalCluster, get_task_stream

from pipeline.config import load_config
from helpers.engine import analyse_reports
from pipeline.engine.map import OnDask
from pipeline.inputs.discover import discover

EXPECTED_GPUS = 5  # fastvideo 2 + train 2 + tiny 1


def _analyse_keys(stream) -> list[str]:
    return sorted({t["key"] for t in stream if str(t["key"]).startswith("analyse-")})


@pytest.mark.slow
def test_local_cluster_one_task_per_gpu(profiles, span_fleet):
    cfg = load_config([REPO / "configs" / "profiles.yaml"], {"analysis": {"window": "span"}})
    paths, problems = discover([str(profiles)])
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client, get_task_stream(client) as ts:
        fleet, rosters = analyse_reports(paths, cfg, OnDask(client, shares_files=False), problems)
    keys = _analyse_keys(ts.data)
    assert len(keys) == EXPECTED_GPUS
    assert sum(str(t["key"]).startswith("load-") for t in ts.data) == 3
    assert len(fleet) == EXPECTED_GPUS and set(fleet["status"]) == {"ok"}
    # Same numbers as the CLI run.
    assert sorted(fleet["idle_ns"].astype(int)) == sorted(span_fleet["idle_ns"].astype(int))


@pytest.mark.slow
def test_external_scheduler_two_workers(dask_cluster, profiles, span_fleet, tmp_path):
    out = tmp_path / "out"
    with Client(dask_cluster) as client:
        client.get_task_stream()  # installs the scheduler's task-stream plugin before the run
        t0 = time.time()
        proc = run_cli("run", str(profiles), "--out", str(out), "--window", "span",
                       "--config", "configs/profiles.yaml", "--scheduler", dask_cluster,
                       env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})  # span_run's results are not reused
        stream = client.get_task_stream(start=t0 - 1)
        workers = set(client.scheduler_info()["workers"])
    assert f"scheduler {dask_cluster}" in proc.stdout
    assert len(_analyse_keys(stream)) == EXPECTED_GPUS
    assert len(workers) == 2
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    cols = ["report", "gpu_key", "window_ns", "busy_ns", "idle_ns", "copy_only_ns", "dark_ns", "gap_count",
            "gap_total_ns", "cat_sync_ns", "cat_data_ns", "cat_comm_ns", "cat_cpu_ns", "idle_usd_per_month"]
    pd.testing.assert_frame_equal(fleet[cols].reset_index(drop=True), span_fleet[cols].reset_index(drop=True))


@pytest.mark.slow
def test_env_scheduler_address(dask_cluster, profiles, tmp_path):
    """DASK_SCHEDULER_ADDRESS sends the same graph to the running cluster."""
    proc = run_cli("run", str(profiles / "tiny_2kernels.sqlite"), "--out", str(tmp_path / "o"),
                   env={"DASK_SCHEDULER_ADDRESS": dask_cluster, "GPU_IDLE_CACHE": str(tmp_path / "cache")})
    assert f"scheduler {dask_cluster}" in proc.stdout


def test_local_cluster_settings_reach_the_worker_processes():
    """open_client's LocalCluster runs its spawned workers with LOCAL_CLUSTER_SETTINGS (no
    statistical profiler, slow ticks) and without a dashboard unless one is asked for."""
    import dask

    from pipeline.engine.cluster import LOCAL_CLUSTER_SETTINGS, open_client

    def worker_settings():
        import dask as d

        return {k: d.config.get(k) for k in LOCAL_CLUSTER_SETTINGS}

    cfg = load_config([], {"dask": {"n_workers": 1, "memory_limit": "1GiB"}})
    lines = []
    taken = socket.socket()  # Dask's default dashboard port held, as by another run on the machine
    try:
        taken.bind(("127.0.0.1", 8787))
        taken.listen()
    except OSError:
        pass  # already held by something else: the same situation
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with open_client(cfg, log=lines.append) as client:
                seen = list(client.run(worker_settings).values())
                assert ":8787/" not in client.dashboard_link
    finally:
        taken.close()
    assert not [w for w in caught if "8787" in str(w.message)]  # no "Port 8787 is already in use"
    assert seen == [dict(LOCAL_CLUSTER_SETTINGS)]
    assert "no dashboard" in lines[0]
    assert dask.config.get("distributed.worker.profile.enabled") is True  # this process keeps its own config
