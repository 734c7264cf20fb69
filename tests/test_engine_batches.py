"""Small reports in batches (issue 44 point 2): one Dask task per batch, each report still its own outcome.

One module-scoped in-process LocalCluster (1 worker of 1 thread) serves every test: the engine's map directly on
a toy work whose values are worked out by hand, and the driver (``drive``, given the cluster's address) on a small
generated fleet with one broken file.
"""
from __future__ import annotations

import pytest
from conftest import small_reports

from pipeline.config import load_config
from pipeline.engine import map as engine_map
from pipeline.engine.map import BATCH_SHARE, batches
from pipeline.runs import driver
from pipeline.runs.driver import RunFolder, drive
from pipeline.store.results import ResultCache


@pytest.fixture(scope="module")
def cluster():
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp", dashboard_address=None) \
            as local, \
            Client(local, set_as_default=False) as client:
        yield local, client


def test_the_batches_fill_by_bytes_and_count_and_shrink_at_the_end():
    """Worked by hand (:data:`BATCH_SHARE` 4, one thread): a batch closes at ``budget`` bytes, at ``cap`` items,
    or at ``ceil(left / 4)`` items when it starts; an item above the budget, or of unknown size, is alone."""
    assert BATCH_SHARE == 4
    sizes = [30, 20, 20, 5] * 4
    assert batches(sizes, 45, 3) == [[0], [1, 2, 3], [4], [5, 6, 7], [8], [9, 10], [11, 12], [13], [14], [15]]
    # 50 > 40 and None: alone, met in order; the 5 small ones: ceil(5/4) = 2, then ceil(3/4) = 1 ...
    assert batches([20, 20, 50, 20, None, 10, 10], 40, 8) == [[2], [0, 1], [4], [3], [5], [6]]
    # two threads: ceil(left / 8), the cap 4 above 24 left: 40, 36, 32, 28 -> 4; 24, 21, 18 -> 3; 15, 13, 11, 9 -> 2
    assert [len(g) for g in batches([1] * 40, 100, 4, threads=2)] == [4] * 4 + [3] * 3 + [2] * 4 + [1] * 7
    assert batches([1] * 5, 0, 8) == batches([1] * 5, 100, 1) == [[0], [1], [2], [3], [4]]
    # fewer than BATCH_SHARE small items per thread: none grouped
    assert batches([1] * 8, 100, 8, threads=2) == [[i] for i in range(8)]


class Squares:
    """A toy work: item ``i``'s outcome is ``"i=i*i"``; item 3 raises (every attempt counted in ``tries``)."""

    steps = ("whole", "open", "parts", "first", "second")
    tries: list = []

    def name(self, item):
        return f"item{item}"

    def size(self, item):
        return 1

    def whole(self, item, threads=1, on_worker=False, worker_memory=None):
        assert on_worker
        if item == 3:
            Squares.tries.append(item)
            raise ValueError("no 3")
        return f"{item}={item * item}"

    def failed(self, item, text):
        return text

    def describe(self, exc, name, what=""):
        return f"{name}: {what}{type(exc).__name__}: {exc}"


def test_a_batch_with_a_failing_item_gives_each_item_its_own_outcome(cluster):
    """8 items, 1 thread, batches of at most 4: [0, 1] [2, 3] [4] [5] [6] [7] (ceil(8/4) = 2, ceil(6/4) = 2, then 1):
    6 tasks. Item 3 raises: it is run again once in its batch (``retries`` 1), then is its own failure; item 2 in
    the same batch, and every other item, has its value."""
    _, client = cluster
    Squares.tries.clear()
    backend = engine_map.OnDask(client, shares_files=True, retries=1, batch_bytes=100, batch_reports=4)
    got = sorted(engine_map.map_work(Squares(), list(range(8)), backend))
    assert got == sorted(["0=0", "1=1", "2=4", "item3: ValueError: no 3", "4=16", "5=25", "6=36", "7=49"])
    assert backend.submitted == 6
    assert Squares.tries == [3, 3]
    # batching off: one task per item, the same outcomes
    off = engine_map.OnDask(client, shares_files=True, retries=1, batch_bytes=100, batch_reports=1)
    assert sorted(engine_map.map_work(Squares(), list(range(8)), off)) == got
    assert off.submitted == 8


def test_a_batch_whose_task_fails_whole_is_a_failure_per_item(cluster, monkeypatch):
    """A batch task that fails as a whole (here the batch runner itself raises, as a batch whose arguments cannot be
    unpickled would) gives each of its items the failure, naming that item; the items alone are unaffected."""
    _, client = cluster

    def broken(work, items, retries=0):
        raise RuntimeError("lost")

    monkeypatch.setattr(engine_map, "run_batch", broken)
    Squares.tries.clear()
    backend = engine_map.OnDask(client, shares_files=True, batch_bytes=100, batch_reports=4)
    got = sorted(engine_map.map_work(Squares(), list(range(8)), backend))
    assert got == sorted([f"item{i}: RuntimeError: lost" for i in range(4)] + ["4=16", "5=25", "6=36", "7=49"])
    assert backend.submitted == 6


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Eight small generated reports (2 GPUs each) and one file that is no export (``bad.sqlite``)."""
    root = small_reports(tmp_path_factory.mktemp("engine-batches"), "b", 8, seed=440)
    (root / "bad.sqlite").write_bytes(b"this is not an SQLite file" * 10)
    return root


def _run(cluster, fleet, out, batch_reports: int, tasks: list, cache_dir=None):
    """``drive`` over the fleet on the module's cluster: its result, the tasks its engine submitted (in ``tasks``)
    and every progress step (reports)."""
    local, _ = cluster

    class Counted(driver.OnDask):
        def __init__(self, client, shares_files, **kwargs):  # the in-process cluster sees this machine's files
            super().__init__(client, True, **kwargs)

        def outcomes(self, work, items):
            yield from super().outcomes(work, items)
            tasks.append(self.submitted)

    steps = []

    class Progress:
        def __init__(self, total, what="reports", **words):
            steps.append((what, total))

        def advance(self, n, label=""):
            steps.append(n)

        def close(self):
            pass

    cfg = load_config([], {"dask": {"batch_reports": batch_reports},
                           "cache": {"enabled": cache_dir is not None, "dir": cache_dir}})
    original = driver.OnDask
    driver.OnDask = Counted
    try:
        cache = ResultCache.for_run(cfg) if cache_dir is not None else None
        result = drive(cfg, [str(fleet)], RunFolder(str(out), log=lambda line: None), cache,
                       local.scheduler_address, log=lambda line: None, progress_factory=Progress)
    finally:
        driver.OnDask = original
    return result, steps


def test_batching_on_or_off_gives_the_same_fleet_table(cluster, fleet, tmp_path):
    """The 9 files (8 reports, 1 broken), 1 thread: batched, ceil(9/4) = 3, ceil(6/4) = 2, then 4 alone: 6 tasks;
    unbatched 9. The fleet tables are identical, the broken file is its own error row in both, and the progress
    counts 9 reports either way. A second batched run finds every report's result in the store (stored per
    report)."""
    on_tasks, off_tasks = [], []
    on, on_steps = _run(cluster, fleet, tmp_path / "on", 32, on_tasks, str(tmp_path / "cache"))
    off, off_steps = _run(cluster, fleet, tmp_path / "off", 1, off_tasks)
    assert on_tasks == [6] and off_tasks == [9]
    assert on_steps == off_steps == [("reports", 9)] + [1] * 9
    table_on = on.fleet.sort_values(["report", "gpu_key"]).reset_index(drop=True)
    table_off = off.fleet.sort_values(["report", "gpu_key"]).reset_index(drop=True)
    assert len(table_on) == 8 * 2 + 1
    bad = table_on[table_on["report"] == str(fleet / "bad.sqlite")]
    assert bad["status"].tolist() == ["error"] and bad["error"].iloc[0].startswith(f"{fleet / 'bad.sqlite'}: ")
    assert set(table_on[table_on["report"] != str(fleet / "bad.sqlite")]["status"]) <= {"ok", "partial"}
    import pandas as pd

    pd.testing.assert_frame_equal(table_on, table_off)
    again_tasks = []
    again, _ = _run(cluster, fleet, tmp_path / "again", 32, again_tasks, str(tmp_path / "cache"))
    assert again.reused == 8 and again.todo == [str(fleet / "bad.sqlite")]


class KillsOnThree(Squares):
    """Item 3 kills the worker process running it (SIGKILL, as an out-of-memory kill), counting each death in the
    file ``attempts``; every other item is its square."""

    def __init__(self, attempts: str):
        self.attempts = attempts

    def whole(self, item, threads=1, on_worker=False, worker_memory=None):
        import os
        import signal

        if item == 3:
            with open(self.attempts, "a", encoding="utf-8") as fh:
                fh.write(f"{os.getpid()}\n")
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{item}={item * item}"


@pytest.mark.slow
def test_a_worker_killed_mid_batch_loses_no_finished_item(tmp_path):
    """Batches [0, 1] [2, 3] [4] [5] [6] [7] on one worker process of one thread: item 3 kills the worker after item
    2 finished in the same batch. Dask gives the batch up after 4 deaths; the engine runs each of its items again
    alone: item 2 stands, item 3 kills its worker 4 more times and is its own failure saying so (8 attempts); every
    other item has its value."""
    import dask
    from distributed import Client, LocalCluster

    from pipeline.engine.cluster import close_cluster

    attempts = tmp_path / "attempts"
    # closed by the product's close_cluster, not the context manager: LocalCluster.close waits without a limit for
    # a worker its Nanny forked again after a kill (the full suite once hung there, test_engine_failures)
    with dask.config.set({"distributed.worker.multiprocessing-method": "fork"}):
        local = LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
        try:
            with Client(local, set_as_default=False) as client:
                backend = engine_map.OnDask(client, shares_files=True, batch_bytes=100, batch_reports=4)
                got = sorted(engine_map.map_work(KillsOnThree(str(attempts)), list(range(8)), backend))
        finally:
            close_cluster(local, timeout_s=5)  # then its worker processes are killed
    assert backend.submitted == 6
    assert len(attempts.read_text().split()) == 8
    failure = [g for g in got if g.startswith("item3")]
    assert failure and failure[0].startswith("item3: the Dask worker died while analysing it (8 attempts, last on "
                                             "tcp://"), got
    assert [g for g in got if not g.startswith("item3")] == sorted(f"{i}={i * i}" for i in range(8) if i != 3)
