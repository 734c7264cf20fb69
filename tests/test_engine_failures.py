"""A failure is a row in every mode of the engine, never a hang or a lost run (issue 11).

Real worker processes die here: the LocalCluster's workers are forked from this process
(``dask.start_method: fork``), so a function patched in this process before the run is
what they run, and a task can really kill the process it runs in (SIGKILL, as an
out-of-memory kill or a crash in a C extension would). The remote-scheduler test kills
the worker processes of a real ``dask scheduler`` / ``dask worker`` pair.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, scheduler_address, small_reports

from pipeline.config import load_config
from pipeline.work import tasks
from pipeline.runs.driver import RunFolder, drive


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    """Six small generated reports (2 GPUs each): ``r0.sqlite`` ... ``r5.sqlite``."""
    return small_reports(tmp_path_factory.mktemp("engine-failures"), "r", 6, seed=300)


def kill_self(attempts: Path) -> None:
    """Count one attempt, then die as an OOM kill does: SIGKILL, no cleanup, no exception."""
    with open(attempts, "a", encoding="utf-8") as fh:
        fh.write(f"{os.getpid()}\n")
    os.kill(os.getpid(), signal.SIGKILL)


#: Deaths after which Dask gives a task up: distributed.scheduler.allowed-failures (3) + 1.
FIRST_ROUND = 4


def deaths(attempts: Path) -> int:
    """Worker deaths so far (:func:`kill_self` counts each)."""
    return len(attempts.read_text().split()) if attempts.exists() else 0


def only_the_culprits_gpu_failed(fleet, attempts: Path, victim_report: str, victim_gpu: str) -> None:
    """The 4 GPUs' table: the culprit's GPU is an error row naming its 2 x :data:`FIRST_ROUND` worker deaths
    (beside others, then alone), the other 3 GPUs are ``ok``."""
    table = fleet.set_index(["report", "gpu_key"])
    assert len(table) == 4
    tries = deaths(attempts)
    assert tries == 2 * FIRST_ROUND
    row = table.loc[(victim_report, victim_gpu)]
    assert row["status"] == "error"
    assert row["error"].startswith(f"{victim_report}: GPU {victim_gpu}: the Dask worker died while analysing it "
                                   f"({tries} attempts, last on tcp://")
    others = table.drop(index=(victim_report, victim_gpu))
    assert set(others["status"]) == {"ok"} and len(others) == 3, others["error"].tolist()


def stay_beside(running: Path, attempts: Path) -> None:
    """In a bystander's task: say it runs on this worker, and stay until the culprit died :data:`FIRST_ROUND` times."""
    (running / str(os.getpid())).touch()
    while deaths(attempts) < FIRST_ROUND:
        time.sleep(0.02)


def die_beside(running: Path, attempts: Path) -> None:
    """In the culprit's task: in the first round wait until a bystander runs on this worker too, then die."""
    while deaths(attempts) < FIRST_ROUND and not (running / str(os.getpid())).exists():
        time.sleep(0.02)
    kill_self(attempts)


def run_in_process(inputs, out, **dask):
    cfg = load_config([], {"dask": {"n_workers": 2, "start_method": "fork", **dask}, "cache": {"enabled": False}})
    lines = []
    result = drive(cfg, [str(p) for p in inputs], RunFolder(str(out), log=lines.append), None, log=lines.append)
    return result, lines


@pytest.mark.slow
def test_a_task_that_kills_its_worker_every_time_is_an_error_row(fleet, tmp_path, monkeypatch):
    """Per-report mode (6 reports on one worker of 2 threads): r3 kills whichever worker runs it. It becomes
    one error row saying the worker died and after how many attempts; every other report is analysed, r0
    too, although it sat beside r3 at each of its deaths. Before: the whole run raised KilledWorker; then
    r0 was given up with r3 (Dask suspects every task on a dying worker) and the test held r3 until it was
    alone to avoid that.

    At each of r3's first deaths r0 is running on the same worker (it waits there until r3 has died
    ``allowed-failures + 1`` times), so the scheduler gives both up; the engine then runs each again
    alone: r0 finishes, r3 kills its worker as many times again."""
    attempts, running = tmp_path / "attempts", tmp_path / "running"
    running.mkdir()
    real = tasks.load_task

    def load_task(path, cfg, *args):
        if os.path.basename(path) == "r0.sqlite":
            stay_beside(running, attempts)
        if os.path.basename(path) == "r3.sqlite":
            die_beside(running, attempts)
        return real(path, cfg, *args)

    monkeypatch.setattr(tasks, "load_task", load_task)
    result, _ = run_in_process(sorted(fleet.glob("*.sqlite")), tmp_path / "out", n_workers=1, threads_per_worker=2)
    fleet_table = result.fleet
    victim = str(fleet / "r3.sqlite")
    tries = deaths(attempts)
    assert tries == 2 * FIRST_ROUND  # beside r0, then alone
    errors = fleet_table[fleet_table["status"] == "error"]
    assert errors["report"].tolist() == [victim], errors["error"].tolist()
    message = errors["error"].iloc[0]
    assert message.startswith(f"{victim}: the Dask worker died while analysing it ({tries} attempts, last on tcp://")
    assert message.endswith("): a crash in native code or an out-of-memory kill; the worker's log says which")
    ok = fleet_table[fleet_table["status"] != "error"]
    assert sorted(set(ok["report"])) == sorted(str(p) for p in fleet.glob("*.sqlite") if p.name != "r3.sqlite")
    assert len(ok) == 10 and set(ok["status"]) == {"ok"}
    assert len(list((tmp_path / "out" / "gpus").iterdir())) == 10


@pytest.mark.slow
def test_a_gpu_that_kills_its_worker_in_the_per_gpu_fan_out_is_that_gpus_error_row(fleet, tmp_path, monkeypatch):
    """Per-GPU fan-out (2 reports on one worker of 2 threads): the analysis of one GPU of r1 kills its worker
    every time. That GPU gets the error row; the report's other GPU and the other report are analysed,
    r1's other GPU too, although it sat beside the victim at each of its deaths. Before: the fleet-reduce
    task raised KilledWorker; then the sibling GPU was given up with the victim and the test retried the
    scenario up to 3 times, later held the victim until it was alone, for a run where the sibling escaped.

    The sibling waits on the same worker until the victim has died ``allowed-failures + 1`` times, so the
    scheduler gives both up; the engine then runs each again alone."""
    real = tasks.measure_gpu
    inputs = [fleet / "r0.sqlite", fleet / "r1.sqlite"]
    victim_report = str(fleet / "r1.sqlite")
    attempts, running = tmp_path / "attempts", tmp_path / "running"
    running.mkdir()

    def measure_gpu(trace, cfg, labels, *args, **kwargs):
        if trace.report == victim_report and trace.gpu_key == sibling_gpu:
            stay_beside(running, attempts)
        if trace.report == victim_report and trace.gpu_key == victim_gpu:
            die_beside(running, attempts)
        return real(trace, cfg, labels, *args, **kwargs)

    from pipeline.load.report import load_report

    sibling_gpu, victim_gpu = load_report(victim_report).gpu_keys()[:2]
    monkeypatch.setattr(tasks, "measure_gpu", measure_gpu)
    result, _ = run_in_process(inputs, tmp_path / "out", n_workers=1, threads_per_worker=2)
    only_the_culprits_gpu_failed(result.fleet, attempts, victim_report, victim_gpu)


@pytest.mark.slow
def test_a_report_loaded_beside_a_gpu_that_kills_its_worker_is_analysed(fleet, tmp_path, monkeypatch):
    """Per-GPU fan-out (2 reports on one worker of 2 threads): r0 is being loaded on the worker at each death
    of one GPU analysis of r1, so the scheduler gives up r0's load with it; the engine runs r0 again alone
    (whole, in one task) and both its GPUs are analysed; the culprit GPU's row says its worker died."""
    real_load, real_analyse = tasks.load_task, tasks.measure_gpu
    inputs = [fleet / "r0.sqlite", fleet / "r1.sqlite"]
    victim_report, bystander = str(fleet / "r1.sqlite"), str(fleet / "r0.sqlite")
    attempts, running = tmp_path / "attempts", tmp_path / "running"
    running.mkdir()

    def load_task(path, cfg, *args, **kwargs):
        if path == bystander:
            stay_beside(running, attempts)
        return real_load(path, cfg, *args, **kwargs)

    def measure_gpu(trace, cfg, labels, *args, **kwargs):
        if trace.report == victim_report and trace.gpu_key == victim_gpu:
            die_beside(running, attempts)
        return real_analyse(trace, cfg, labels, *args, **kwargs)

    from pipeline.load.report import load_report

    victim_gpu = load_report(victim_report).gpu_keys()[1]
    monkeypatch.setattr(tasks, "load_task", load_task)
    monkeypatch.setattr(tasks, "measure_gpu", measure_gpu)
    result, _ = run_in_process(inputs, tmp_path / "out", n_workers=1, threads_per_worker=2)
    only_the_culprits_gpu_failed(result.fleet, attempts, victim_report, victim_gpu)


@pytest.mark.slow
def test_a_gpu_planned_beside_a_gpu_that_kills_its_worker_is_analysed(fleet, tmp_path, monkeypatch):
    """Per-GPU fan-out (2 reports on one worker of 2 threads): one GPU of r0 is being planned at each death of
    one GPU analysis of r1, so the scheduler gives up that plan, and the analyses waiting for it, with the
    culprit; the engine runs them again alone (the plans first) and every GPU of r0 is analysed."""
    real_plan, real_analyse = tasks.plan_gpu, tasks.measure_gpu
    inputs = [fleet / "r0.sqlite", fleet / "r1.sqlite"]
    victim_report, bystander = str(fleet / "r1.sqlite"), str(fleet / "r0.sqlite")
    attempts, running = tmp_path / "attempts", tmp_path / "running"
    running.mkdir()

    def plan_gpu(trace, cfg):
        if trace.report == bystander and trace.gpu_key == planned_gpu:
            stay_beside(running, attempts)
        return real_plan(trace, cfg)

    def measure_gpu(trace, cfg, labels, *args, **kwargs):
        if trace.report == victim_report and trace.gpu_key == victim_gpu:
            die_beside(running, attempts)
        return real_analyse(trace, cfg, labels, *args, **kwargs)

    from pipeline.load.report import load_report

    victim_gpu, planned_gpu = load_report(victim_report).gpu_keys()[1], load_report(bystander).gpu_keys()[0]
    monkeypatch.setattr(tasks, "plan_gpu", plan_gpu)
    monkeypatch.setattr(tasks, "measure_gpu", measure_gpu)
    result, _ = run_in_process(inputs, tmp_path / "out", n_workers=1, threads_per_worker=2)
    table = result.fleet.set_index(["report", "gpu_key"])
    assert len(table) == 4
    assert deaths(attempts) == 2 * FIRST_ROUND
    assert table.loc[(victim_report, victim_gpu), "status"] == "error"
    others = table.drop(index=(victim_report, victim_gpu))
    assert set(others["status"]) == {"ok"} and len(others) == 3, others["error"].tolist()


def start_cluster(tmp_path: Path, workers: int = 1, first_paths: list | None = None):
    """A real scheduler and ``workers`` worker processes (each in its own process group), worker ``i`` named
    ``w<i>``; ``first_paths[i]``: a folder put before the repository on that worker's ``PYTHONPATH`` (None: none)."""
    bindir = Path(sys.executable).parent
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", ":0", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)]
    address = scheduler_address(sched_file)
    for i in range(workers):
        first = first_paths[i] if first_paths else None
        procs.append(subprocess.Popen([str(bindir / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1",
                                       "--name", f"w{i}", "--no-dashboard",
                                       "--local-directory", str(tmp_path / f"w{i}")],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      env={**env, "PYTHONPATH": os.pathsep.join(
                                          [str(first), str(REPO)] if first else [str(REPO)])},
                                      cwd=tmp_path, start_new_session=True))
    from distributed import Client

    with Client(address) as client:
        client.wait_for_workers(workers, timeout=60)
    return address, procs


def stop(procs) -> None:
    for p in procs[::-1]:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)


@pytest.mark.slow
def test_every_worker_gone_ends_the_run_with_rows_and_a_message(tmp_path):
    """A remote cluster whose only worker is killed (nanny and all) mid-run: within
    ``dask.no_workers_timeout_s`` the reports not done become error rows saying so, the outputs are
    written, stderr says why, exit status 1. Before: the run waited forever with no message."""
    slow = tmp_path / "slow"
    slow.mkdir()
    # enough work that the worker dies in the middle of it: twelve captures (copies would be analysed once)
    small_reports(slow, "s", 12, seed=400)
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text("dask: {no_workers_timeout_s: 3, retries: 0}\n")
    address, procs = start_cluster(tmp_path)
    out = tmp_path / "out"
    env = {**os.environ, "GPU_IDLE_CACHE": str(tmp_path / "cache")}
    try:
        proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", str(slow), "--out", str(out),
                                 "--config", str(cfg), "--scheduler", address], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        results = tmp_path / "cache" / "results"
        deadline = time.time() + 120
        while time.time() < deadline and proc.poll() is None and len(list(results.glob("*.parquet"))) < 1:
            time.sleep(0.01)
        os.killpg(procs[1].pid, signal.SIGKILL)  # the worker and its nanny
        killed_at = time.time()
        stdout, stderr = proc.communicate(timeout=120)
        took = time.time() - killed_at
    finally:
        stop(procs)
    assert proc.returncode == 1, stdout + stderr
    assert took < 60
    assert "gpu-idle: ERROR: no Dask worker left for 3 s: the reports not done are error rows" in stderr
    table = pd.read_parquet(out / "fleet.parquet")
    errors = table[table["status"] == "error"]
    assert len(errors) >= 1 and len(table[table["status"] == "ok"]) >= 2
    assert all(e == f"{r}: not analysed: no Dask worker left for 3 s (every worker died or none could start)"
               for r, e in zip(errors["report"], errors["error"]))
    assert set(table["report"]) == {str(p) for p in slow.glob("*.sqlite")}


@pytest.mark.slow
def test_a_cluster_that_cannot_start_workers_is_a_clear_message_and_rows(fleet, tmp_path):
    """A LocalCluster whose workers cannot start (here a worker preload that exits): every report is an error
    row naming the cause, stderr says the cluster could not start, exit status 1, within a bounded time."""
    preload = tmp_path / "die.py"
    preload.write_text("import os\nos._exit(3)\n")
    out = tmp_path / "out"
    env = {**os.environ, "GPU_IDLE_CACHE": str(tmp_path / "cache"),
           "DASK_DISTRIBUTED__WORKER__PRELOAD": json.dumps([str(preload)])}
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", str(fleet / "r0.sqlite"),
                           str(fleet / "r1.sqlite"), "--out", str(out)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert time.time() - started < 120
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu-idle: ERROR: the LocalCluster could not start its 2 worker(s): " in proc.stderr
    table = pd.read_parquet(out / "fleet.parquet")
    assert len(table) == 2 and set(table["status"]) == {"error"}
    assert all(e.startswith(f"{r}: not analysed: the LocalCluster could not start its 2 worker(s): ")
               for r, e in zip(table["report"], table["error"]))



def test_a_cluster_that_does_not_close_in_time_has_its_workers_killed(monkeypatch):
    """The full suite once hung in LocalCluster.close: a worker its Nanny had forked again after a crash
    never got the stop message, and close waits for it without a limit. close_cluster bounds the wait:
    when the cluster's close does not finish in time (here it is made to time out at once), the real
    worker processes are killed and close_cluster returns."""
    from distributed import LocalCluster

    from pipeline.engine.cluster import _worker_pids, close_cluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    pids = _worker_pids(cluster)
    assert len(pids) == 2 and all(alive(pid, wait_s=0) for pid in pids)
    real_close, calls = cluster.close, []

    def close(timeout=None):
        calls.append(timeout)
        if len(calls) == 1:
            raise TimeoutError("as if a worker never answered")
        return real_close(timeout=timeout)

    monkeypatch.setattr(cluster, "close", close)
    close_cluster(cluster, timeout_s=3)
    assert calls == [3, 5]
    assert [pid for pid in pids if alive(pid)] == []


def alive(pid: int, wait_s: float = 10.0) -> bool:
    """Whether process ``pid`` still runs after up to ``wait_s`` seconds (a zombie waiting to be reaped
    does not count)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with open(f"/proc/{pid}/status", encoding="utf-8") as fh:
                state = next(line for line in fh if line.startswith("State:")).split()[1]
        except FileNotFoundError:
            return False
        if state == "Z":
            return False
        if time.monotonic() >= deadline:
            return True
        time.sleep(0.1)


class _Sums:
    """A :class:`pipeline.engine.map.Work` of plain numbers, for the re-run rounds below: item ``n`` opens to
    ``n``, has parts ``a`` and ``b``, first steps ``10`` and ``20``, and part ``p``'s result is
    ``f"{p}={n + sum(firsts)}"``; a failed part is ``f"{p}: {text}"``."""

    steps = ("whole", "open", "parts", "first", "second")

    def name(self, item):
        return f"item{item}"

    def open(self, item, on_worker=False, worker_memory=None):
        return item

    def first(self, opened, part):
        return {"a": 10, "b": 20}[part]

    def second(self, opened, item, part, keys, firsts):
        return f"{part}={opened + sum(firsts)}"

    def part_label(self, part):
        return f"part {part}: "

    def part_failed(self, item, part, text):
        return f"{part}: {text}"


def test_a_rerun_that_is_cancelled_is_its_own_row_and_the_next_still_runs():
    """The round that runs suspects again alone: a re-run cancelled while it is awaited (here before it
    could start; in a run: the no-worker watchdog or a lost scheduler) is settled with the engine's own
    text, and the next suspect still runs. Before: ``distributed.wait`` raised ``FuturesCancelledError``
    ("cancelled for reason: unknown") out of the round, so neither suspect got its row."""
    from distributed import Client, LocalCluster

    from pipeline.engine import map as engine_map

    settled = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        backend = engine_map.OnDask(client, shares_files=True)

        def held_then_cancelled():
            fut = client.submit(time.sleep, 2, key="again-held", pure=False)  # cancelled long before it ends
            client.cancel([fut])
            return fut

        suspects = [engine_map._Suspect(None, held_then_cancelled, lambda v, f: settled.append((v, f)), "item0"),
                    engine_map._Suspect(None, lambda: client.submit(sum, [1, 2], key="again-sum", pure=False),
                                        lambda v, f: settled.append((v, f)), "item1", "part b: ")]
        with engine_map._Watchdog(backend, []) as watchdog:
            backend._alone(suspects, watchdog, _Sums())
    assert settled == [(None, "item0: task cancelled before it finished (scheduler restarted or client lost)"),
                       (3, None)]


def test_a_part_rerun_whose_opened_item_was_cancelled_opens_it_again():
    """A part given up with its worker runs again on what it waited for; when that (the opened item, a first
    step) was cancelled meanwhile, it is computed again for the re-run, as when it was given up: item 5's part
    ``b`` is ``5 + 10 + 20``. Before: the re-run was submitted on the cancelled future and Dask cancelled it
    at once ("lost dependencies"), a row blaming a restarted scheduler."""
    from distributed import Client, LocalCluster, wait

    from pipeline.engine import map as engine_map

    work, results = _Sums(), {}
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        backend = engine_map.OnDask(client, shares_files=True)
        opened = client.submit(work.open, 5, key="open-item5", pure=False)
        firsts = [client.submit(work.first, opened, k, key=f"first-item5-{k}", pure=False) for k in ("a", "b")]
        wait([opened, *firsts])
        client.cancel([opened, *firsts])
        suspect = backend._suspect_part(work, [5], 0, "b", None, "again-second-item5-b", opened, ["a", "b"], firsts,
                                        lambda i, part, result: results.setdefault(part, result), [])
        with engine_map._Watchdog(backend, []) as watchdog:
            backend._alone([suspect], watchdog, work)
    assert results == {"b": "b=35"}


def test_the_map_waits_on_its_own_client_whatever_the_process_default_is():
    """Issue 42 point 11: ``compare`` runs each side that names reports on its own LocalCluster, two clients in
    one process. The map's waits are bound to its own client's event loop, not to Dask's default client: here
    the map's client is not the default and the only other client's cluster is closed (a side before), and
    every item still comes back, in both shapes (per part, one task per item). Before:
    ``as_completed()`` took ``default_client().loop`` ("No clients found" here; in ``compare``, a loop that
    could be the other side's, where the futures were never tracked: the run waited forever)."""
    import functools

    from distributed import Client, LocalCluster

    got = {}
    run = functools.partial(_run_until, got)
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as before:
            Client(before).close()  # the other side: its client and cluster made and closed first
        for items in ([1], [1, 2, 3]):  # 1 item < 2 per thread: per part; 3: one task per item
            run(client, items)
    assert got == {1: ["1:a=31,b=31"], 3: ["whole1", "whole2", "whole3"]}
    got.clear()
    # A side's client left as Dask's current one (``with Client(...)`` sets it and only its exit resets it)
    # after its cluster and loop are gone: before, the next side's map tracked its futures on that dead loop.
    from distributed.client import _current_client

    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster, set_as_default=False) as client:
        with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as before:
            stale = Client(before)
        stale.close()
        token = _current_client.set(stale)
        try:
            for items in ([1], [1, 2, 3]):
                run(client, items)
        finally:
            _current_client.reset(token)
    assert got == {1: ["1:a=31,b=31"], 3: ["whole1", "whole2", "whole3"]}


def _run_until(got: dict, client, items: list, timeout_s: float = 60) -> None:
    """Map a :class:`_Sums` work over ``items`` on ``client`` (on a thread, in this context), its sorted outcomes
    in ``got[len(items)]``; fails when the map has not ended in ``timeout_s`` seconds."""
    from pipeline.engine import map as engine_map

    class Work(_Sums):
        def whole(self, item, threads=1, on_worker=False, worker_memory=None):
            return f"whole{item}"

        def parts(self, opened):
            return ("a", "b"), None

        def gather(self, item, results):
            return f"{item}:" + ",".join(results)

        def failed(self, item, text):
            return text

    import contextvars
    import threading

    backend = engine_map.OnDask(client, shares_files=True)
    context = contextvars.copy_context()  # the caller's current Dask client, if any, as a run in one thread sees it
    thread = threading.Thread(target=lambda: context.run(lambda: got.update({len(items): sorted(
        engine_map.map_work(Work(), items, backend))})), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"the map of {items} still waits after {timeout_s:g} s"
