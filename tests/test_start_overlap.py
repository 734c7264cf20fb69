"""The run's start: Dask imported beside the reports' hashing (pipeline.engine.cluster.import_ahead, called by
pipeline.store.results.identities when the first file is to be hashed), and joined before any cluster starts."""
from __future__ import annotations

import contextlib
import os
import threading

import pytest

from pipeline.config import load_config


def test_identities_say_once_when_they_hash(tmp_path, monkeypatch):
    """identities' ``hashing`` is called once, before the first file is hashed, however many are and on
    whichever thread; never when the index knows every file (an unchanged rerun hashes nothing)."""
    from pipeline.store import results
    from pipeline.store.results import IdentityIndex, identities

    monkeypatch.setattr(IdentityIndex, "SETTLE_NS", 0)  # as if written long ago: the index keeps them
    paths = []
    for i in range(5):
        p = tmp_path / f"r{i}.sqlite"
        p.write_bytes(bytes([i]) * 1000)
        paths.append(str(p))
    hashed, events = [], []
    real = results.snapshot_key
    monkeypatch.setattr(results, "snapshot_key", lambda path: hashed.append(path) or real(path))
    index = IdentityIndex(str(tmp_path / "state"))
    first = identities(index, paths, hashing=lambda: events.append(len(hashed)))
    assert events == [0] and sorted(hashed) == sorted(os.path.abspath(p) for p in paths)
    index.entries = dict(index.seen)  # as the next run reads the saved index
    events.clear()
    assert identities(index, paths, hashing=lambda: events.append(len(hashed))) == first
    assert events == [] and len(hashed) == 5


def test_identify_passes_hashing_on(tmp_path, monkeypatch):
    """ResultCache.identify calls ``hashing`` once for a first run over several reports."""
    from pipeline.store.results import ResultCache

    paths = []
    for i in range(3):
        p = tmp_path / f"r{i}.sqlite"
        p.write_bytes(bytes([i]) * 1000)
        paths.append(str(p))
    cache = ResultCache(str(tmp_path / "cache"), load_config([]), keep_unseen=False, leftover_age_s=0.0)
    calls = []
    assert cache.identify(paths, lambda: calls.append(1)) == []
    assert calls == [1] and sorted(cache.keys) == sorted(paths)


def test_import_ahead_is_joined_before_a_cluster_starts(monkeypatch):
    """cluster.import_ahead imports Dask on one thread, once per process, and open_client waits for it before
    anything else (nothing is forked while a thread imports)."""
    from pipeline.engine import cluster

    started, release = threading.Event(), threading.Event()
    order = []

    def slow_import():
        started.set()
        release.wait(5)
        order.append("imported")

    monkeypatch.setattr(cluster, "_IMPORTS", [])
    monkeypatch.setattr(cluster, "_import_dask", slow_import)
    cluster.import_ahead()
    cluster.import_ahead()   # once per process
    assert started.wait(5) and len(cluster._IMPORTS) == 1

    def check(address, timeout_s):
        order.append("scheduler checked")
        raise cluster.EngineError("stop here")

    monkeypatch.setattr(cluster, "check_scheduler", check)
    timer = threading.Timer(0.2, release.set)
    timer.start()
    with pytest.raises(cluster.EngineError, match="stop here"):
        with cluster._open_client(load_config([]), "tcp://127.0.0.1:1"):
            pass
    timer.join()
    assert order == ["imported", "scheduler checked"]


def test_hashing_ahead_is_stopped_before_a_cluster_starts(tmp_path, monkeypatch):
    """The run stops the threads hashing ahead (pipeline.hashing.stop_ahead) before it opens a cluster, whose
    LocalCluster forks its workers; a report analysed in this process (one report, no scheduler) forks nothing
    and stops nothing."""
    from pipeline.engine.errors import EngineError
    from pipeline.runs import driver

    order = []
    monkeypatch.setattr(driver, "stop_ahead", lambda: order.append("stopped"))

    @contextlib.contextmanager
    def no_cluster(cfg, scheduler=None, log=print):
        order.append("cluster")
        raise EngineError("no cluster here")
        yield

    monkeypatch.setattr(driver, "open_client", no_cluster)
    cfg = load_config([])
    jobs = [driver.Todo(str(tmp_path / f"r{i}.sqlite"), {}) for i in range(2)]
    outcomes, problem = driver._analyse(jobs, cfg, None, str(tmp_path / "gpus"), lambda line: None, None)
    assert order == ["stopped", "cluster"] and problem == "no cluster here"
    assert [o.failure.message for o in outcomes] == [f"{j.path}: not analysed: no cluster here" for j in jobs]
    order.clear()
    missing = driver.Todo(str(tmp_path / "one.sqlite"), {})
    (outcome,), problem = driver._analyse([missing], cfg, None, str(tmp_path / "gpus"), lambda line: None, None)
    assert order == [] and problem is None and outcome.failure is not None


def test_hashing_ahead_is_stopped_once_the_reports_are_identified(tmp_path, monkeypatch):
    """Once every report's key is known the run stops the threads hashing ahead: on an unchanged rerun the identity
    index knew every file, and a thread ahead would only hash them again for nothing."""
    from pipeline.runs import driver
    from pipeline.store.results import ResultCache

    order = []
    real = ResultCache.identify
    monkeypatch.setattr(ResultCache, "identify", lambda self, *a, **k: order.append("identified") or real(self, *a, **k))
    monkeypatch.setattr(driver, "stop_ahead", lambda: order.append("stopped"))

    class Planned(Exception):
        pass

    class Folder(driver.OutputFolder):
        out_dir = str(tmp_path / "out")

        def on_plan(self, paths, todo, reused):
            order.append("planned")
            raise Planned

    (tmp_path / "a.sqlite").write_bytes(b"not really")
    cfg = load_config([])
    cache = ResultCache(str(tmp_path / "cache"), cfg, keep_unseen=False, leftover_age_s=0.0)
    with pytest.raises(Planned):
        driver.drive(cfg, [str(tmp_path / "a.sqlite")], Folder(), cache, log=lambda line: None)
    assert order == ["identified", "stopped", "planned"]
