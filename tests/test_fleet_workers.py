"""Fleet mode of the graph (one task per report; issue 4): workers write the per-GPU JSON, the client
only the small tables, and every output is byte for byte what the client-side writer makes."""
from __future__ import annotations

import contextlib
import json
import os

import pandas as pd
import pytest
from conftest import run_cli
from distributed import Client, LocalCluster, get_task_stream

from pipeline.config import load_config
from helpers.engine import analyse_reports
from pipeline.engine.map import OnDask
from pipeline.fleet.outputs import gpu_json_name, write_outputs
from pipeline.fleet.reduce import build_fleet
from pipeline.inputs.discover import discover
from pipeline.report.medical import write_records
from pipeline.synth import generate_training_report

REPORTS = 4


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """Four small reports with a straggler rank each (2 GPUs), all labelled job ``train``, plus a broken file."""
    root = tmp_path_factory.mktemp("fleet-workers")
    for i in range(REPORTS):
        generate_training_report(str(root / f"node{i}.sqlite"), gpus=2, iterations=6, seed=40 + i,
                                 straggler_rank=i % 2)
    (root / "broken.sqlite").write_bytes(b"\0" * 1000)
    (root / "labels.yaml").write_text("labels:\n  - {match: '*.sqlite', cluster: lab, job: train}\n")
    return root


@contextlib.contextmanager
def in_process_client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def files(folder) -> dict[str, bytes]:
    """Every output file's bytes by relative path (the folder's manifest excepted: it is not an output)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            if name == ".manifest.json":
                continue
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = open(path, "rb").read()
    return out


@pytest.mark.slow
def test_workers_write_the_same_gpu_json_as_the_client(fleet_dir, tmp_path):
    cfg = load_config([fleet_dir / "labels.yaml"])
    paths, problems = discover([str(fleet_dir)])
    assert len(paths) == REPORTS + 1
    with in_process_client() as client, get_task_stream(client) as ts:
        # full rosters back to the client, then the workers writing the per-GPU JSON themselves
        ref_fleet, ref_rosters = analyse_reports(paths, cfg, OnDask(client, shares_files=False), problems)
        new_fleet, new_rosters = analyse_reports(paths, cfg, OnDask(client, shares_files=True), problems,
                                                 gpu_dir=str(tmp_path / "new" / "gpus"))
    keys = {str(t["key"]).split("-", 1)[0] for t in ts.data}
    assert keys == {"report"}  # 5 reports on one worker thread: one task per report, no per-GPU fan-out
    ref, new = tmp_path / "ref", tmp_path / "new"
    write_outputs(str(ref), ref_fleet, ref_rosters)
    write_records(str(ref), ref_fleet, ref_rosters)
    write_outputs(str(new), new_fleet, new_rosters)
    write_records(str(new), new_fleet, new_rosters)
    pd.testing.assert_frame_equal(ref_fleet, new_fleet)
    assert len(new_fleet) == REPORTS * 2 + 1
    broken = new_fleet[new_fleet["status"] == "error"]
    assert broken["error"].tolist() == [f"{fleet_dir / 'broken.sqlite'}: not a readable SQLite database "
                                        f"(file is not a database)"]
    # The client got only rows and device rosters, plus the text of the summary each worker wrote.
    assert all(set(v) == {"device", "json"} for v in new_rosters.values()) and len(new_rosters) == REPORTS * 2
    assert all(set(v) == {"streams", "device", "timeline"} for v in ref_rosters.values())
    # One straggler for the whole job: each worker, seeing one report, flagged its own slower GPU, and the
    # client replaced those summaries; the files are the same bytes as the client-side writer's.
    local = [json.loads(v["json"])["straggler"] for v in new_rosters.values()]
    assert sum(local) == REPORTS and int(new_fleet["straggler"].sum()) == 1
    ref_files, new_files = files(ref), files(new)
    assert sorted(ref_files) == sorted(new_files)
    assert len([f for f in new_files if f.startswith("gpus")]) == REPORTS * 2
    assert [f for f in ref_files if ref_files[f] != new_files[f]] == []
    row = new_fleet[new_fleet["straggler"]].iloc[0]
    doc = json.loads(new_files[os.path.join("gpus", gpu_json_name(row["report"], row["gpu_key"]))])
    assert doc["_summary"]["straggler"] is True and doc["timeline"]["window"] and doc["roster"]
    assert not [f for f in os.listdir(new / "gpus") if f.startswith(".")]  # no temporary files left


@pytest.mark.slow
def test_cli_run_in_fleet_mode_matches_the_client_writer(fleet_dir, tmp_path):
    out = tmp_path / "cli"
    proc = run_cli("run", str(fleet_dir), "--out", str(out), "--config", str(fleet_dir / "labels.yaml"),
                   "--workers", "1", check=False)
    assert proc.returncode == 1  # broken.sqlite
    cfg = load_config([fleet_dir / "labels.yaml"])
    paths, problems = discover([str(fleet_dir)])
    with in_process_client() as client:
        fleet, rosters = analyse_reports(paths, cfg, OnDask(client, shares_files=False), problems)
    ref = tmp_path / "ref"
    write_outputs(str(ref), fleet, rosters)
    write_records(str(ref), fleet, rosters, cfg.analysis.actionable_pct)
    got, want = files(out), files(ref)
    assert sorted(got) == sorted(want)
    for name in want:
        if name == "fleet.parquet":   # same table; the file's own metadata may differ
            continue
        assert got[name] == want[name], name


def test_a_failing_worker_write_falls_back_to_the_client(fleet_dir, tmp_path):
    """A gpu_dir the worker cannot write: the full results travel back, nothing is lost."""
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the gpus folder should be")
    cfg = load_config([fleet_dir / "labels.yaml"])
    paths = [p for p in discover([str(fleet_dir)])[0] if not p.endswith("broken.sqlite")]
    with in_process_client() as client:
        fleet, rosters = analyse_reports(paths, cfg, OnDask(client, shares_files=True), [],
                                         gpu_dir=str(blocker / "gpus"))
    assert len(fleet) == REPORTS * 2 and set(fleet["status"]) == {"ok"}
    assert all(set(v) == {"streams", "device", "timeline"} for v in rosters.values())
    assert build_fleet(fleet.to_dict("records"))["straggler"].sum() == 1


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_local_cluster_workers_start_as_configured(method, monkeypatch):
    """dask.start_method: forked workers are copies of the client process (an attribute set here is
    there, without importing anything); spawned ones are fresh interpreters (it is not)."""
    import pipeline
    from pipeline.engine.cluster import open_client

    monkeypatch.setattr(pipeline, "_start_method_probe", 42, raising=False)
    cfg = load_config([], {"dask": {"n_workers": 1, "start_method": method}})

    def probe():
        import sys
        return getattr(sys.modules.get("pipeline"), "_start_method_probe", None)

    with open_client(cfg, log=lambda *_: None) as client:
        seen = list(client.run(probe).values())
    assert seen == ([42] if method == "fork" else [None])


def test_start_method_falls_back_to_spawn_where_fork_is_missing(monkeypatch):
    import multiprocessing

    from pipeline.config import ConfigError
    from pipeline.engine.cluster import worker_start_method

    assert worker_start_method("fork") == "fork"   # Linux
    assert worker_start_method("spawn") == "spawn"
    monkeypatch.setattr("sys.platform", "darwin")  # has fork, but Python itself spawns there
    assert worker_start_method("fork") == "spawn"
    monkeypatch.setattr("sys.platform", "linux")
    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])
    assert worker_start_method("fork") == "spawn"
    assert worker_start_method("forkserver") == "spawn"
    with pytest.raises(ConfigError, match="dask.start_method 'thread' is not one of fork, spawn, forkserver"):
        load_config([], {"dask": {"start_method": "thread"}})


def test_gpu_summaries_are_the_row_by_row_summaries():
    """gpu_summaries (a column at a time) gives what gpu_summary gives over to_dict("records"), value and type:
    numpy whole numbers, flags and floats (NaN and ±inf null), Int64 with a missing value, text with a missing
    value, and an object column holding numpy scalars, None and NaN."""
    from pipeline.fleet.outputs import gpu_summaries, gpu_summary, summary_text

    import numpy as np
    frame = pd.DataFrame({
        "report": pd.array(["a.sqlite", None, "c.sqlite"], dtype="str"),
        "window_ns": pd.array([1_750_000_000_123_456_789, None, 3], dtype="Int64"),
        "idle_pct": np.array([12.5, np.nan, np.inf]),
        "count": np.array([1, -2, 3], dtype=np.int64),
        "straggler": np.array([True, False, True]),
        "note": pd.Series([np.float64(2.5), None, np.int64(7)], dtype=object),
        "other": pd.Series([np.nan, np.bool_(True), "x"], dtype=object),
    })
    want = [gpu_summary(row) for row in frame.to_dict("records")]
    got = gpu_summaries(frame)
    assert got == want
    assert [[type(v) for v in row.values()] for row in got] == [[type(v) for v in row.values()] for row in want]
    assert [summary_text(s) for s in got] == [summary_text(s) for s in want]
    assert got[0] == {"report": "a.sqlite", "window_ns": 1_750_000_000_123_456_789, "idle_pct": 12.5, "count": 1,
                      "straggler": True, "note": 2.5, "other": None}
    assert got[1]["report"] is None and got[1]["window_ns"] is None and got[1]["idle_pct"] is None
    assert got[2]["idle_pct"] is None and got[2]["note"] == 7 and type(got[2]["note"]) is int


def test_the_collector_is_paused_only_while_the_documents_are_made():
    import gc

    from pipeline.memory import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(OSError), collector_paused():
        raise OSError("disk full")
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()   # it stays as the caller had it
    finally:
        gc.enable()
