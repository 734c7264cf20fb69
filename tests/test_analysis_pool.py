"""One report's GPUs analysed on a pool of threads give exactly what the serial path gives (issue 44 point 2).

``gpu-idle run FILE`` analyses one local report in its own process, its GPUs on as many threads as the run has
workers (``--workers``, ``dask.n_workers``; :func:`pipeline.work.tasks.analyse_report`); ``--workers 1`` keeps it
on the command's own thread. Whatever the threads, every GPU's row, rosters, timeline, plan and collective calls
are the same values in the same order, an error row included, and the memory the analyses freed is kept for the
next GPU and handed back once when the report is done (:func:`pipeline.memory.reusing_heap`). Everything in this
process, over one small generated report of four GPUs (a few thousand kernels each, so the pool is used).
"""
from __future__ import annotations

import json
import threading

import pandas as pd
import pytest
from conftest import run_cli

from pipeline import memory
from pipeline.config import load_config
from pipeline.load.report import load_report
from pipeline.synth import generate_scaled_report
from pipeline.work import tasks


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("pool") / "job.sqlite"
    generate_scaled_report(str(path), gpus=4, kernels=12_000, seed=44)
    return load_report(str(path))


def everything(results) -> list[str]:
    """Each result as one JSON text: all it holds (the row with its warnings, the rosters, the timeline, the plan,
    the collective calls), so two lists compare equal only when every value and its order are the same."""
    return [json.dumps({"row": r.row, "roster": r.roster, "device_roster": r.device_roster, "timeline": r.timeline,
                        "plan": repr(r.plan), "calls": r.collective_calls}, sort_keys=True, default=repr)
            for r in results]


def test_the_pool_gives_the_rows_of_the_serial_path(report, monkeypatch):
    cfg = load_config([])
    keys = report.gpu_keys()
    assert len(keys) == 4
    # a GPU key the report does not have: its error row keeps its place among the others
    keys = keys[:2] + ["no-such-gpu"] + keys[2:]
    serial = tasks.analyse_report(report, keys, cfg, {"job": "j"}, threads=1)

    where: list[str] = []
    analyse = tasks.analyse_task

    def recorded(rep, key, *args, **kwargs):
        where.append(threading.current_thread().name)
        return analyse(rep, key, *args, **kwargs)

    monkeypatch.setattr(tasks, "analyse_task", recorded)
    pooled = tasks.analyse_report(report, keys, cfg, {"job": "j"}, threads=2)

    assert len(where) == 5 and threading.main_thread().name not in where   # the pool did the analyses
    assert [r.row["gpu_key"] for r in pooled] == keys
    assert [r.row["status"] for r in pooled].count("error") == 1 and pooled[2].row["status"] == "error"
    assert "no-such-gpu" in pooled[2].row["error"]
    assert everything(pooled) == everything(serial)
    # and the figures are real ones (not two empty lists alike)
    assert all(r.row["kernel_count"] > 2000 and r.row["idle_ns"] > 0 for i, r in enumerate(pooled) if i != 2)


def test_gpus_at_once_hold_at_most_what_the_report_holds(report, monkeypatch):
    """:func:`~pipeline.work.tasks.gpu_threads`: as many GPUs at once as their analyses' working sets (their
    kernels times :data:`~pipeline.work.tasks.ANALYSIS_BYTES_PER_KERNEL`, the largest GPUs counted) fit in the
    bytes of the report's frames (here more than the process's own, :data:`~pipeline.work.tasks.PROCESS_BYTES`),
    or in the process's own when more."""
    held = sum(int(getattr(report, f).memory_usage(index=False).sum())
               for f in ("kernels", "runtime", "copies", "nvtx", "devices", "overhead", "untraced"))
    monkeypatch.setattr(tasks, "PROCESS_BYTES", held - 1)
    sizes = sorted(report.kernels["gpu_key"].value_counts().tolist(), reverse=True)
    keys = report.gpu_keys()
    for per_kernel, expected in ((held // sum(sizes), 4), (held // sum(sizes[:3]), 3), (held // sum(sizes[:2]), 2),
                                 (held // sizes[0], 1), (held // sizes[0] + 1, 1)):
        monkeypatch.setattr(tasks, "ANALYSIS_BYTES_PER_KERNEL", per_kernel)
        assert tasks.gpu_threads(report, keys, 4) == expected
        assert tasks.gpu_threads(report, keys, 2) == min(2, expected)
    assert tasks.gpu_threads(report, keys[:1], 2) == 2  # one GPU: nothing at once
    assert tasks.gpu_threads(report, keys, 1) == 1
    monkeypatch.setattr(tasks, "PROCESS_BYTES", held * 2)  # a small report: the process's own bytes bound it
    monkeypatch.setattr(tasks, "ANALYSIS_BYTES_PER_KERNEL", 2 * held // sum(sizes[:2]))
    assert tasks.gpu_threads(report, keys, 4) == 2


def test_large_gpus_are_analysed_one_at_a_time(report, monkeypatch):
    """When two GPUs' analyses would hold more than the report (:func:`~pipeline.work.tasks.gpu_threads`) the
    analyses run on the calling thread, whatever ``threads``."""
    monkeypatch.setattr(tasks, "ANALYSIS_BYTES_PER_KERNEL", 10**9)
    where: list[str] = []
    analyse = tasks.analyse_task
    monkeypatch.setattr(tasks, "analyse_task",
                        lambda *a, **k: where.append(threading.current_thread().name) or analyse(*a, **k))
    matched_on: list[str] = []
    collectives = tasks.report_collectives
    monkeypatch.setattr(tasks, "report_collectives",
                        lambda *a: matched_on.append(threading.current_thread().name) or collectives(*a))
    large = tasks.analyse_report(report, report.gpu_keys(), load_config([]), {}, threads=2)
    assert where == [threading.current_thread().name] * 4
    # the collective calls (small: the collectives alone) are matched on a thread beside the plans
    assert len(matched_on) == 1 and matched_on[0] != threading.current_thread().name
    assert everything(large) == everything(tasks.analyse_report(report, report.gpu_keys(), load_config([]), {}, 1))


@pytest.mark.parametrize("threads, apart", [(1, False), (1, True), (2, False)])
def test_what_runs_beside_the_items_gives_its_value_or_its_error_when_asked(threads, apart):
    """:func:`pipeline.work.tasks._each_beside` (the report's collective calls beside its GPUs' plans):
    the items' results in order, then ``beside``'s value, or its exception raised only when the value is asked
    for (a report's agreement is made first, and its failure is the one said, as when they ran one after the
    other), on the items' threads, on a thread apart, or after the items."""
    ran: list[str] = []

    def item(x):
        ran.append(threading.current_thread().name)
        return x * 10

    out, value = tasks._each_beside(item, [1, 2, 3], threads, lambda: "matched", apart)
    assert out == [10, 20, 30] and value() == "matched"

    def failing():
        raise ValueError("no match")

    out, value = tasks._each_beside(item, [4, 5], threads, failing, apart)
    assert out == [40, 50]
    with pytest.raises(ValueError, match="no match"):
        value()
    assert (threading.current_thread().name in ran) == (threads == 1)


def test_freed_memory_is_kept_for_the_next_gpu_and_handed_back_once(report, monkeypatch):
    calls: list = []
    monkeypatch.setattr(memory, "_mallopt", lambda: (lambda param, value: calls.append(("mallopt", param, value))))
    monkeypatch.setattr(memory, "_trim", lambda: (lambda pad: calls.append(("trim", pad))))
    tasks.analyse_report(report, report.gpu_keys(), load_config([]), {}, threads=1)
    assert calls == [("mallopt", memory.M_MMAP_THRESHOLD, 32 << 20), ("mallopt", memory.M_TRIM_THRESHOLD, 1 << 30),
                     # once the report is done, not after each of its 4 GPUs: the heap's top as glibc keeps it, and
                     # every free page handed back
                     ("mallopt", memory.M_TRIM_THRESHOLD, 64 << 20), ("trim", 0)]
    # a GPU analysed as a task of its own still hands its memory back
    calls.clear()
    tasks.analyse_task(report, report.gpu_keys()[0], load_config([]), {})
    assert calls == [("trim", 0)]


def test_reusing_heap_hands_memory_back_when_the_analysis_raises(monkeypatch):
    calls: list = []
    monkeypatch.setattr(memory, "_mallopt", lambda: None)   # not glibc: nothing to set, still released
    monkeypatch.setattr(memory, "_trim", lambda: (lambda pad: calls.append(pad)))
    with pytest.raises(RuntimeError):
        with memory.reusing_heap():
            raise RuntimeError("analysis failed")
    assert calls == [0]


@pytest.mark.parametrize("workers, pools", [(["--workers", "1"], 0), ([], 2)])
def test_one_worker_analyses_a_report_on_the_command_thread(report, tmp_path, monkeypatch, workers, pools):
    """``gpu-idle run FILE --workers 1``: the user asked for one worker, so no thread pool is started; with the
    default two workers the report's plans and analyses each run on a pool of two threads."""
    started: list[int] = []
    pool = tasks.ThreadPoolExecutor

    def recording(max_workers):
        started.append(max_workers)
        return pool(max_workers=max_workers)

    monkeypatch.setattr(tasks, "ThreadPoolExecutor", recording)
    run_cli("run", report.path, "--out", str(tmp_path / "out"), *workers, "--no-cache")
    assert started == [2] * pools
    fleet = pd.read_parquet(tmp_path / "out" / "fleet.parquet")
    assert sorted(fleet["gpu_key"]) == sorted(report.gpu_keys()) and set(fleet["status"]) <= {"ok", "partial"}
