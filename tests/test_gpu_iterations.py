"""Windows on the GPU timeline, one per job (docs/definitions.md#one-choice-per-job; issue 14 point 3).

NVTX iterations are put on the GPU by correlationId (kernels launched from inside the range on
the marking thread), numbered, and all GPUs of one job keep the same numbers: GPUs of one report
agree before they are analysed, a job spread over several reports is made to agree by a second
round. Expected values are worked out by hand in the comments (ms = 1,000,000 ns).
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.iterations import (Agreement, IterationPlan, agree, compact_numbers, gpu_lengths, plan_window,
    project)
from pipeline.analysis.window import Iterations, WindowError, iteration_numbers
from pipeline.config import Config, load_config
from helpers.engine import analyse_reports
from pipeline.engine.map import InProcess, OnDask
from pipeline.runs.driver import Todo, analysed
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import ExportWriter

MS = 1_000_000


def iteration(w: ExportWriter, pid: int, number: int, cpu0: int, cpu1: int, kernels, tid: int = 11,
              launch_tid: int | None = None, graph: bool = False, text: str = "Iteration {}") -> None:
    """NVTX range ``text`` [cpu0, cpu1) ms on thread (pid, tid) and its kernels ``[(start_ms, end_ms)]`` on
    device 0, stream 7: each launched by a cudaLaunchKernel of thread (pid, ``launch_tid`` or tid) starting at
    cpu0 + 1 ms + 0.1 ms per kernel before it (inside the range); with ``graph``, one cudaGraphLaunch at
    cpu0 + 1 ms runs them all under its one correlationId."""
    w.nvtx(pid, tid, cpu0 * MS, cpu1 * MS, text.format(number))
    lt = tid if launch_tid is None else launch_tid
    if graph:
        corr = w.correlation()
        w.runtime(pid, lt, cpu0 * MS + MS, cpu0 * MS + MS + 10_000, "cudaGraphLaunch_v10000", correlation=corr)
        for s, e in kernels:
            w.kernel(pid, 0, 7, s * MS, e * MS, "gemm", correlation=corr)
        return
    for j, (s, e) in enumerate(kernels):
        corr = w.correlation()
        t = cpu0 * MS + MS + j * 100_000
        w.runtime(pid, lt, t, t + 10_000, "cudaLaunchKernel_v7000", correlation=corr)
        w.kernel(pid, 0, 7, s * MS, e * MS, "gemm", correlation=corr)


def lagging_rank(w: ExportWriter, pid: int, lag: int, iterations: int = 8, pause_at: int | None = None,
                 **kw) -> None:
    """``iterations`` NVTX iterations of 10 ms (CPU [c, c + 10) with c = 10 i ms) whose two kernels run
    ``lag`` ms after the range starts: [c + lag, c + lag + 4) and [c + lag + 4, c + lag + 7) ms. With
    ``pause_at``: that iteration's range lasts 20 ms and every later one starts 10 ms later (a pause)."""
    c = 0
    for i in range(iterations):
        long = pause_at is not None and i == pause_at
        iteration(w, pid, i, c, c + (20 if long else 10), [(c + lag, c + lag + 4), (c + lag + 4, c + lag + 7)], **kw)
        c += 20 if long else 10


def one_gpu(path) -> dict:
    rep = load_report(str(path))
    (key,) = rep.gpu_keys()
    return analyse_gpu(gpu_trace(rep, key), Config(), {})


# ------------------------------------------------------------------ numbers and pure pieces

def test_iteration_numbers_from_texts():
    assert iteration_numbers(["Iteration 12", "Iteration 13", "Iteration 15"])[0].tolist() == [12, 13, 15]
    assert iteration_numbers(["ProfilerStep#7", "ProfilerStep#8"])[0].tolist() == [7, 8]
    numbers, note = iteration_numbers(["train_step"] * 3)
    assert numbers.tolist() == [0, 1, 2] and note == ""                       # no digits: positions, nothing to say
    numbers, note = iteration_numbers(["step 3", "step 1", "step 2"])         # numbering restarts: positions
    assert numbers.tolist() == [0, 1, 2] and note.endswith("do not increase)")
    numbers, note = iteration_numbers(["Iteration 1", "train_step"])
    assert numbers.tolist() == [0, 1] and "not every iteration text has a number" in note
    numbers, note = iteration_numbers(["ProfilerStep#1", "ProfilerStep#99999999999999999999999"])  # was OverflowError
    assert numbers.tolist() == [0, 1] and note.endswith("(a number in their texts is beyond int64)")
    assert iteration_numbers(["s 1", f"s {2**63 - 1}"])[0].tolist() == [1, 2**63 - 1]


def test_compact_numbers():
    assert compact_numbers([3, 4, 5, 6]) == "3-6"
    assert compact_numbers([1, 2, 3, 4, 7, 9, 10]) == "1-4,7,9-10"
    assert compact_numbers([]) == "" and compact_numbers([5]) == "5"


def test_project_matches_by_pid_and_correlation_on_the_marking_thread():
    it = Iterations(np.array([0, 10 * MS]), np.array([10 * MS, 20 * MS]), "nvtx", thread=(10, 11))
    runtime = pd.DataFrame({"start": [1 * MS, 2 * MS, 12 * MS, 13 * MS, 25 * MS],
                            "pid": [10, 10, 10, 10, 10], "tid": [11, 11, 11, 99, 11],
                            "correlation_id": [1, 2, 3, 4, 5]})
    kernels = pd.DataFrame({"start": [8 * MS, 12 * MS, 18 * MS, 19 * MS, 30 * MS, 9 * MS],
                            "end": [12 * MS, 15 * MS, 19 * MS, 21 * MS, 31 * MS, 10 * MS],
                            "pid": [10, 10, 10, 10, 10, 20], "correlation_id": [1, 2, 3, 4, 5, 1]})
    g0, g1 = project(it, runtime, kernels)
    # iteration 0: correlations 1, 2 (calls at 1 and 2 ms) -> kernels [8, 12) and [12, 15) ms: extent [8, 15);
    # pid 20's correlation 1 is another process's. Iteration 1: correlation 3 -> [18, 19); correlation 4 was
    # called by thread 99, correlation 5 after the range ended.
    assert (g0 // MS).tolist() == [8, 18] and (g1 // MS).tolist() == [15, 19]
    # no extent: -1; lengths run to the next extent's start (the last: its own end), skipping -1
    s, e = np.array([0, -1, 30, 42]), np.array([7, -1, 33, 45])
    assert gpu_lengths(s, e).tolist() == [30 - 0, 0, 42 - 30, 45 - 42]


@pytest.mark.parametrize("base", [0, 2**40], ids=["dense ids (a table)", "sparse ids (binary search)"])
def test_project_takes_the_first_call_of_a_correlation_id(base):
    """Two calls of one thread with the same correlation id (the first in iteration 0, the second in iteration 1):
    a kernel of that id is the first call's, as the calls come. Ids small and dense, or far apart: the same
    extents (pipeline.analysis.iterations._first_of looks them up in a table, or by binary search)."""
    it = Iterations(np.array([0, 10 * MS]), np.array([10 * MS, 20 * MS]), "nvtx", thread=(10, 11))
    runtime = pd.DataFrame({"start": [12 * MS, 1 * MS, 13 * MS, 2 * MS], "pid": [10] * 4, "tid": [11] * 4,
                            "correlation_id": np.array([7, 7, 9, 3]) + base})
    kernels = pd.DataFrame({"start": [20 * MS, 5 * MS, 25 * MS, 40 * MS], "end": [21 * MS, 6 * MS, 27 * MS, 41 * MS],
                            "pid": [10] * 4, "correlation_id": np.array([7, 3, 9, 8]) + base})
    g0, g1 = project(it, runtime, kernels)
    # id 7: called at 12 ms (iteration 1), then at 1 ms (iteration 0): the first row (12 ms) is the one, so its kernel
    # [20, 21) goes to iteration 1 with id 9's [25, 27); id 3 (called at 2 ms) puts [5, 6) in iteration 0; id 8 has
    # no call
    assert (g0 // MS).tolist() == [5, 20] and (g1 // MS).tolist() == [6, 27]


def test_project_of_many_calls_in_start_order():
    """Calls in start order (more than 8 per iteration: counted off against the iteration starts), ascending
    correlation ids (no sort) and kernels in iteration order (each iteration's extent reduced over its run of
    rows), int32 id columns as an export gives them: the extents the general path gives."""
    it = Iterations(np.array([0, 100]), np.array([100, 200]), "nvtx", thread=(10, 11))
    calls = np.arange(0, 200, 5)  # 40 calls, one every 5 ns: ids 1..40, 20 in each iteration
    runtime = pd.DataFrame({"start": calls, "pid": np.full(40, 10, np.int32), "tid": np.full(40, 11, np.int32),
                            "correlation_id": np.arange(1, 41, dtype=np.int32)})
    kernels = pd.DataFrame({"start": [50, 60, 70, 150, 160], "end": [55, 90, 65, 300, 170],
                            "pid": np.full(5, 10, np.int32), "correlation_id": np.array([3, 4, 5, 25, 26], np.int32)})
    g0, g1 = project(it, runtime, kernels)
    # ids 3-5 were called at 10-20 ns (iteration 0): [50, 90); ids 25, 26 at 120, 125 ns (iteration 1): [150, 300)
    assert g0.tolist() == [50, 150] and g1.tolist() == [90, 300]
    # the same calls in another order, kernels out of iteration order: the same extents
    shuffled = runtime.iloc[::-1].reset_index(drop=True)
    assert [x.tolist() for x in project(it, shuffled, kernels.iloc[::-1].reset_index(drop=True))] == [[50, 150],
                                                                                                      [90, 300]]
    # a process id beyond the int32 column's range matches no call
    far = Iterations(it.starts, it.ends, "nvtx", thread=(2**40, 11))
    assert [x.tolist() for x in project(far, runtime, kernels)] == [[-1, -1], [-1, -1]]


def test_agree_keeps_numbers_usable_on_every_gpu():
    def plan(numbers, excluded=()):
        return IterationPlan("nvtx", tuple(numbers), tuple(numbers), tuple(numbers), (1,) * len(numbers),
                             tuple(excluded))
    a = plan(range(8), [(0, "warm-up")])
    b = plan(range(1, 9), [(1, "warm-up"), (5, "outlier (2.00x median)")])
    got = agree([(("r", "a"), a), (("r", "b"), b)])["nvtx"]
    # union 0..8; usable on both: 2, 3, 4, 6, 7 (0: warm-up on a, absent on b; 1: warm-up on b; 5: outlier on b;
    # 8: absent on a) -> runs 2-4 and 6-7: the longest 2-4
    assert got.kept == (2, 3, 4) and got.capped == ()
    assert got.reason(5, ("r", "a")) == "excluded on another GPU of the job (gpu b: outlier (2.00x median))"
    assert got.reason(8, ("r", "b")) == "excluded on another GPU of the job (gpu a: no such iteration there)"
    assert got.reason(6, ("r", "a")) == "outside the longest stable run"
    assert Agreement.from_json(got.to_json()) == got
    assert IterationPlan.from_json(b.to_json()) == b
    capped = agree([(("r", "a"), a)], load_config([], {"window": {"max_iterations": 4}}).window)["nvtx"]
    assert capped.kept == (4, 5, 6, 7) and capped.capped == (1, 2, 3)


def test_a_job_that_agrees_on_too_few_iterations_falls_back():
    """Usable 1-3 on one GPU and 3-5 on the other: only 3 is usable on both (need 3): span under auto
    (the note says why), an error under the strict rule."""
    def plan(excluded):
        n = tuple(range(6))
        return IterationPlan("nvtx", n, tuple(10 * x * MS for x in n), tuple((10 * x + 7) * MS for x in n),
                             (10 * MS,) * 6, tuple(excluded))
    a = plan([(0, "warm-up"), (4, "outlier (2.00x median)"), (5, "outlier (2.00x median)")])
    b = plan([(0, "warm-up"), (1, "outlier (2.00x median)"), (2, "outlier (2.00x median)")])
    agreement = agree([(("r", "a"), a), (("r", "b"), b)])["nvtx"]
    assert agreement.kept == (3,)
    kernels = pd.DataFrame({"start": [0, 40 * MS], "end": [7 * MS, 57 * MS]})
    win = plan_window(a, kernels, "auto", agreement=agreement, me=("r", "a"))
    assert (win.rule, win.start_ns, win.end_ns, win.untrimmed) == ("span", 0, 57 * MS, True)
    assert win.note == "nvtx: only 1 usable iteration(s) on every GPU of the job (2 GPUs; need 3)"
    with pytest.raises(WindowError, match="abstained: nvtx: only 1 usable iteration"):
        plan_window(a, kernels, "nvtx", agreement=agreement, me=("r", "a"))


# ------------------------------------------------------------------ one GPU: projection

def test_asynchronous_launches_put_the_window_on_the_gpu_timeline(tmp_path):
    """Kernels run 7 ms after their NVTX range started (the CPU runs ahead): W is on the GPU timeline."""
    w = ExportWriter(str(tmp_path / "async.sqlite"))
    lagging_rank(w, pid=10, lag=7)
    w.close()
    res = one_gpu(tmp_path / "async.sqlite")
    row = res.row
    # iteration i: CPU [10 i, 10 i + 10) ms, kernels [10 i + 7, 10 i + 11) and [10 i + 11, 10 i + 14):
    # extent [10 i + 7, 10 i + 14). Warm-up 0 out; 1..7 kept: W = [17, 84) ms, not the ranges' [10, 80).
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("nvtx", 17 * MS, 84 * MS)
    assert (row["kept_iterations"], row["excluded_iterations"], row["window_note"]) == ("1-7", "0: warm-up", "")
    # lengths: 1..6 to the next extent's start = 10 ms, 7 (the last) its extent 7 ms: mean 67 / 7 ms
    # = 9,571,428.57 -> 9,571,429 ns; std of (10 x 6, 7) = sqrt((6 x (3/7)^2 + (18/7)^2) / 7) = 1.0498 ms,
    # cv 1.0498 / 9.5714 = 0.1097
    assert (row["iterations"], row["iteration_mean_ns"], row["iteration_cv"]) == (7, 9_571_429, 0.1097)
    # busy 7 x 7 ms = 49 ms of the 67 ms window: idle 18 ms (6 holes of 3 ms between iterations)
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (67 * MS, 49 * MS, 18 * MS)
    assert res.timeline["iteration_extents"][:2] == [[0, 7 * MS, 14 * MS, "warm-up"], [1, 17 * MS, 24 * MS, "kept"]]
    assert res.plan.boundaries == tuple(10 * i * MS for i in range(8))  # categories keep the ranges' starts


def test_graph_launch_runs_many_kernels_under_one_correlation(tmp_path):
    w = ExportWriter(str(tmp_path / "graph.sqlite"))
    # one cudaGraphLaunch per 10 ms range, three kernels 5 ms later: [c+5,c+7), [c+7,c+9), [c+9,c+12)
    for i in range(6):
        c = 10 * i
        iteration(w, 10, i, c, c + 10, [(c + 5, c + 7), (c + 7, c + 9), (c + 9, c + 12)], graph=True)
    w.close()
    row = one_gpu(tmp_path / "graph.sqlite").row
    # extent of iteration i: [10 i + 5, 10 i + 12) (all three kernels); kept 1..5: W = [15, 62) ms
    assert (row["window_start_ns"], row["window_end_ns"], row["kept_iterations"]) == (15 * MS, 62 * MS, "1-5")
    assert (row["kernel_count"], row["busy_ns"]) == (15, 5 * 7 * MS)


def test_iteration_without_kernels_is_left_out(tmp_path):
    w = ExportWriter(str(tmp_path / "hole.sqlite"))
    for i in range(8):  # kernels [c+2, c+6) and [c+6, c+9) ms, none for iteration 4 (a CPU-only step)
        c = 10 * i
        iteration(w, 10, i, c, c + 10, [] if i == 4 else [(c + 2, c + 6), (c + 6, c + 9)])
    w.close()
    row = one_gpu(tmp_path / "hole.sqlite").row
    # extents [10 i + 2, 10 i + 9) but none for 4; lengths 10 ms, except 3: to iteration 5's start = 20 ms,
    # and 7 (last): 7 ms. Median of 1, 2, 3, 5, 6, 7 = median(10, 10, 20, 10, 10, 7) = 10: 3 is an outlier (2.00x).
    # Usable 1, 2, 5, 6, 7: runs 1-2 and 5-7 -> 5-7, W = [52, 79) ms
    assert (row["window_start_ns"], row["window_end_ns"], row["kept_iterations"]) == (52 * MS, 79 * MS, "5-7")
    assert row["excluded_iterations"] == ("0: warm-up; 1: outside the longest stable run; 2: outside the longest "
                                          "stable run; 3: outlier (2.00x median); 4: no kernel of this GPU launched "
                                          "from inside it")


def test_extent_and_length_to_the_next_start_are_both_in_the_json_and_on_the_page(tmp_path):
    """An iteration whose kernels end early and whose range runs on (a checkpoint after them): its GPU
    extent is short, its length to the next iteration's start long. The outlier test judges the second
    against the median; the JSON holds both and the median, and the GPU page shows them side by side
    (before: the page showed the extent as "length" beside "outlier (2.00x median)")."""
    import html
    import re

    from pipeline.report.gpu_page import render_gpu_page

    w = ExportWriter(str(tmp_path / "pause.sqlite"))
    lagging_rank(w, pid=10, lag=2, pause_at=5)
    w.close()
    res = one_gpu(tmp_path / "pause.sqlite")
    # CPU starts c = 0, 10, 20, 30, 40, 50 (20 ms: the pause), 70, 80; extents [c + 2, c + 9): 7 ms each.
    # Lengths to the next extent's start: 10 ms, but 5: 52 -> 72 = 20 ms, and 7 (the last): its extent, 7 ms.
    # Median after the warm-up (0): median(10, 10, 10, 10, 20, 10, 7) = 10 ms; 5: 20 / 10 = 2.00x an outlier,
    # 7: 0.70x is not (1 / 1.5 = 0.67). Runs 1-4 and 6-7: 1-4 kept.
    tl = res.timeline
    assert tl["iteration_extents"] == [[i, (c + 2) * MS, (c + 9) * MS, why] for i, c, why in [
        (0, 0, "warm-up"), (1, 10, "kept"), (2, 20, "kept"), (3, 30, "kept"), (4, 40, "kept"),
        (5, 50, "outlier (2.00x median)"), (6, 70, "outside the longest stable run"),
        (7, 80, "outside the longest stable run")]]
    assert tl["iteration_lengths"] == [[i, n * MS] for i, n in enumerate([10, 10, 10, 10, 10, 20, 10, 7])]
    assert tl["iteration_length_median_ns"] == 10 * MS
    assert (res.row["kept_iterations"], res.row["iteration_mean_ns"]) == ("1-4", 10 * MS)
    doc = {"report": str(tmp_path / "pause.sqlite"), "gpu_key": res.row["gpu_key"], "roster": res.roster,
           "device_roster": res.device_roster, "timeline": tl, "_summary": res.row}
    page = render_gpu_page(doc, {"report": "../report.html", "record": None})
    # the context: W [12, 49) ms widened by max(37 / 20, 10) = 10 ms -> [2, 59): iterations 0..5 overlap it
    body = re.search(r'<table id="iteration-table">(.*?)</table>', page, re.S).group(1)
    rows = {}
    for attrs, cells in re.findall(r"<tr (data-iteration[^>]*)>(.*?)</tr>", body, re.S):
        data = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', attrs))
        rows[data["iteration"]] = {"data": data, "cells": [" ".join(html.unescape(re.sub(r"<[^>]+>", " ", c)).split())
                                                          for c in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)]}
    assert sorted(rows, key=int) == ["0", "1", "2", "3", "4", "5"]
    five = rows["5"]
    assert (five["data"]["extent-ns"], five["data"]["length-ns"]) == (str(7 * MS), str(20 * MS))
    assert five["cells"][3:] == ["7.000 ms", "20.000 ms", "2.00×", "excluded: outlier (2.00x median)"]
    assert rows["1"]["cells"][3:] == ["7.000 ms", "10.000 ms", "1.00×", "kept"]
    assert f'<span id="iteration-median" data-median-ns="{10 * MS}">10.000 ms</span>' in page


def test_ranges_of_a_thread_that_launches_nothing_stay_cpu_side(tmp_path):
    """NVTX pushed by thread 11, kernels launched by thread 12: no projection, the CPU ranges, and a note."""
    w = ExportWriter(str(tmp_path / "other_thread.sqlite"))
    lagging_rank(w, pid=10, lag=7, iterations=6, launch_tid=12)
    w.close()
    row = one_gpu(tmp_path / "other_thread.sqlite").row
    # CPU ranges [10 i, 10 i + 10): kept 1..5, W = [10, 60) ms
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("nvtx", 10 * MS, 60 * MS)
    assert row["window_note"] == ("nvtx: the thread that marks the iterations (pid 10, tid 11) launched no kernel "
                                  "of this GPU from inside them: the window is on their CPU-side ranges")


def test_profiler_step_numbers(tmp_path):
    """ProfilerStep#N ranges keep their own numbers (here 20..25) in the row."""
    w = ExportWriter(str(tmp_path / "steps.sqlite"))
    lagging_rank(w, pid=10, lag=3, iterations=6, text="ProfilerStep#{}")
    w.close()
    row = one_gpu(tmp_path / "steps.sqlite").row
    assert (row["kept_iterations"], row["excluded_iterations"]) == ("1-5", "0: warm-up")
    w = ExportWriter(str(tmp_path / "steps20.sqlite"))
    for i in range(6):
        c = 10 * i
        iteration(w, 10, 20 + i, c, c + 10, [(c + 3, c + 7), (c + 7, c + 10)], text="ProfilerStep#{}")
    w.close()
    row = one_gpu(tmp_path / "steps20.sqlite").row
    assert (row["kept_iterations"], row["excluded_iterations"]) == ("21-25", "20: warm-up")


# ------------------------------------------------------------------ two ranks of one job

def rank0(w: ExportWriter) -> None:
    """Rank 0, pid 10: ten iterations lagging 7 ms: extents [10 i + 7, 10 i + 14) ms, all 10 ms apart."""
    lagging_rank(w, pid=10, lag=7, iterations=10)


def rank1(w: ExportWriter) -> None:
    """Rank 1, pid 20: lagging 5 ms, with a 10 ms pause in iteration 4 (its range [40, 60) ms, every later
    range 10 ms later): extents [c + 5, c + 12) with c = 10 i for i <= 4, 10 i + 10 after."""
    lagging_rank(w, pid=20, lag=5, iterations=10, pause_at=4)


# Rank 0 alone: 1..9 usable, keeps 1-9. Rank 1 alone: lengths 10 ms except 4: 65 - 45 = 20 ms (2.00x the
# median 10 ms: outlier) and 9 (last): 7 ms; keeps 5-9 (5 > the 3 of 1-3). Together: usable 1-3 and 5-9 -> 5-9.
# Rank 0's W: [57, 104) ms; rank 1's: [65 + 0, 112) ms (iteration 5 starts at 60 + 5, 9 ends at 100 + 12).
# Iteration lengths 10, 10, 10, 10, 7 ms on both: mean 9.4 ms.
WANT = {10: (57 * MS, 104 * MS), 20: (65 * MS, 112 * MS)}
OUTSIDE = "1: outside the longest stable run; 2: outside the longest stable run; 3: outside the longest stable run"


def check_two_ranks(fleet: pd.DataFrame, rank1_gpu: str) -> None:
    rows = {int(r["pid"]): r for _, r in fleet.iterrows()}
    assert sorted(rows) == [10, 20]
    for pid, (w0, w1) in WANT.items():
        r = rows[pid]
        assert (r["window_rule"], int(r["window_start_ns"]), int(r["window_end_ns"])) == ("nvtx", w0, w1), pid
        assert (r["kept_iterations"], int(r["iterations"]), int(r["iteration_mean_ns"])) == ("5-9", 5, 9_400_000)
    assert rows[20]["excluded_iterations"] == f"0: warm-up; {OUTSIDE}; 4: outlier (2.00x median)"
    assert rows[10]["excluded_iterations"] == (f"0: warm-up; {OUTSIDE}; 4: excluded on another GPU of the job "
                                               f"(gpu {rank1_gpu}: outlier (2.00x median))")


def test_two_ranks_in_one_report_keep_the_same_iterations(tmp_path):
    w = ExportWriter(str(tmp_path / "job.sqlite"))
    rank0(w)
    rank1(w)
    w.close()
    # each GPU alone (the way it was): rank 0 keeps 1-9, rank 1 5-9
    rep = load_report(str(tmp_path / "job.sqlite"))
    alone = {analyse_gpu(gpu_trace(rep, k), Config(), {}).row["pid"]: analyse_gpu(gpu_trace(rep, k), Config(), {}).row
             for k in rep.gpu_keys()}
    assert (alone[10]["kept_iterations"], alone[20]["kept_iterations"]) == ("1-9", "5-9")
    fleet, _ = analyse_reports([str(tmp_path / "job.sqlite")], Config(), InProcess())
    check_two_ranks(fleet, "pid20/dev0")


@pytest.fixture
def two_reports(tmp_path):
    """The same two ranks, one report each, put into one job by the labels."""
    for name, fill in (("rank0.sqlite", rank0), ("rank1.sqlite", rank1)):
        w = ExportWriter(str(tmp_path / name))
        fill(w)
        w.close()
    config = tmp_path / "labels.yaml"
    config.write_text("labels:\n  - {match: 'rank*.sqlite', cluster: lab, job: ddp}\n")
    return tmp_path, config


def test_two_single_gpu_reports_of_one_job_keep_the_same_iterations(two_reports):
    folder, config = two_reports
    paths = [str(folder / "rank0.sqlite"), str(folder / "rank1.sqlite")]
    cfg = load_config([config])
    # each report alone (one job per file name): rank 0 keeps 1-9
    solo, _ = analyse_reports(paths, Config(), InProcess())
    assert solo.set_index("pid")["kept_iterations"].to_dict() == {10: "1-9", 20: "5-9"}
    fleet, _ = analyse_reports(paths, cfg, InProcess())
    check_two_ranks(fleet, "pid20/dev0 in rank1.sqlite")


def test_forced_agreement_goes_through_the_same_map(two_reports):
    """The second round is a report to analyse with the job's agreement forced, on the same map."""
    folder, config = two_reports
    cfg = load_config([config])
    outcomes = list(analysed([Todo(str(folder / "rank0.sqlite"), cfg.labels_for("rank0.sqlite"))], cfg,
                                InProcess()))
    assert outcomes[0].results[0].row["kept_iterations"] == "1-9"
    plan1 = list(analysed([Todo(str(folder / "rank1.sqlite"), cfg.labels_for("rank1.sqlite"))], cfg,
                             InProcess()))[0].results[0].plan
    agreements = agree([((str(folder / "rank0.sqlite"), "pid10/dev0"), outcomes[0].results[0].plan),
                        ((str(folder / "rank1.sqlite"), "pid20/dev0"), plan1)], cfg.window)
    again = list(analysed([Todo(str(folder / "rank0.sqlite"), cfg.labels_for("rank0.sqlite"), forced=agreements)],
                             cfg, InProcess()))
    assert again[0].results[0].row["kept_iterations"] == "5-9"


def test_cli_run_agrees_across_reports_and_reuses_the_forced_result(two_reports, tmp_path, monkeypatch):
    folder, config = two_reports
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    inputs = [str(folder / "rank0.sqlite"), str(folder / "rank1.sqlite")]
    first = run_cli("run", *inputs, "--out", str(tmp_path / "a"), "--config", str(config), "--workers", "1", env=env)
    # round 1 keeps 1-9 on rank 0: its report is analysed again with the job's agreement (stored under its own key)
    assert "analysing 1 report(s) again" in first.stdout
    check_two_ranks(pd.read_csv(tmp_path / "a" / "fleet.csv", keep_default_na=False), "pid20/dev0 in rank1.sqlite")
    stored = sorted(p.name for p in (tmp_path / "cache" / "results").glob("*.parquet"))
    assert len(stored) == 3  # rank0, rank1 and rank0 under the job's agreement
    second = run_cli("run", *inputs, "--out", str(tmp_path / "b"), "--config", str(config), env=env)
    assert "0 report(s) analysed, 2 reused" in second.stdout and "again" not in second.stdout
    check_two_ranks(pd.read_csv(tmp_path / "b" / "fleet.csv", keep_default_na=False), "pid20/dev0 in rank1.sqlite")


def test_on_dask_both_shapes_agree(two_reports, tmp_path):
    """One engine: the per-GPU fan-out (one two-GPU report) and the per-report tasks (two reports) on Dask
    give the same rows as in this process."""
    from distributed import Client, LocalCluster, get_task_stream

    folder, config = two_reports
    w = ExportWriter(str(tmp_path / "job.sqlite"))
    rank0(w)
    rank1(w)
    w.close()
    cfg = load_config([config])
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        with get_task_stream(client) as ts:
            fanned, _ = analyse_reports([str(tmp_path / "job.sqlite")], Config(), OnDask(client, shares_files=False))
        keys = sorted(str(t["key"]).split("-")[0] for t in ts.data)
        assert keys == ["analyse", "analyse", "gpus", "load", "plan", "plan"]  # a plan task per GPU, then agreed
        import pipeline.engine.map as engine_map
        old, engine_map.ITEMS_PER_THREAD = engine_map.ITEMS_PER_THREAD, 1   # two reports: one task each
        try:
            per_report, _ = analyse_reports([str(folder / "rank0.sqlite"), str(folder / "rank1.sqlite")], cfg,
                                            OnDask(client, shares_files=False))
        finally:
            engine_map.ITEMS_PER_THREAD = old
    check_two_ranks(fanned, "pid20/dev0")
    check_two_ranks(per_report, "pid20/dev0 in rank1.sqlite")


# ------------------------------------------------------------------ a real export

ANCHOR = "nvjet_tst_192x208_64x4_1x1_h_bz_coopB_bias_TNT"  # the kernel that recurs once per iteration


def test_real_two_gpu_job_keeps_the_same_iterations(profiles):
    """train_h100_2gpu_nccl (no NVTX iterations: the periodic rule): pid 144 and 145 keep the same numbers.

    Expected values straight from SQLite: the anchor kernel's 17 launches t0..t16 per process make the
    iterations [t_i, t_i+1); 0 is the warm-up; an iteration is an outlier beyond 1.5x (or under 1/1.5) the
    median of the others; the GPUs keep the longest run usable on both.
    """
    path = profiles / "train_h100_2gpu_nccl.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    t = {pid: [r[0] for r in con.execute(
        "SELECT k.start FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
        "WHERE s.value = ? AND ((k.globalPid >> 24) & 16777215) = ? ORDER BY k.start", (ANCHOR, pid))]
        for pid in (144, 145)}
    con.close()
    usable = {}
    for pid, starts in t.items():
        assert len(starts) == 17
        lengths = [b - a for a, b in zip(starts, starts[1:])]
        med = float(np.median(lengths[1:]))
        usable[pid] = {i for i in range(1, 16) if 1 / 1.5 <= lengths[i] / med <= 1.5}
    assert usable[144] == set(range(1, 15)) and usable[145] == set(range(1, 16))  # 144's 15 is 1.52x its median
    kept = sorted(usable[144] & usable[145])
    assert kept == list(range(1, 15))
    fleet, _ = analyse_reports([str(path)], Config(), InProcess())
    for _, r in fleet.iterrows():
        starts = t[int(r["pid"])]
        assert (r["window_rule"], r["kept_iterations"], int(r["iterations"])) == ("periodic", "1-14", 14)
        assert (int(r["window_start_ns"]), int(r["window_end_ns"])) == (starts[1], starts[15])
        assert int(r["iteration_mean_ns"]) == round((starts[15] - starts[1]) / 14)
    rows = fleet.set_index("pid")
    # pid 145 alone kept 1-15 (its window ended at t16 = 60,405,270,197 ns); now 15 is out because of 144
    assert rows.loc[145, "excluded_iterations"] == ("0: warm-up; 15: excluded on another GPU of the job "
                                                    "(gpu pid144/dev0: outlier (1.52x median))")
    assert (int(rows.loc[145, "window_end_ns"]), int(rows.loc[144, "window_end_ns"])) == (60_383_682_191,
                                                                                          60_383_678_936)


@pytest.mark.slow
def test_sweep_rebuild_uses_the_forced_result(two_reports, tmp_path):
    """A night's rebuild (``--report-only``) takes each report's rosters from the stored result its rows came
    from: rank 0's under the job's agreement (its timeline's window is the agreed one)."""
    import json

    folder, config = two_reports
    cfg = tmp_path / "nightly.yaml"
    state = tmp_path / "state"
    cfg.write_text(f"sweep: {{inputs: ['{folder}/rank0.sqlite', '{folder}/rank1.sqlite'], state_dir: '{state}'}}\n"
                   + config.read_text())
    run_cli("sweep", "--config", str(cfg), "--night", "2026-11-30", "--workers", "1")
    night = state / "nights" / "2026-11-30"

    def windows() -> dict:
        docs = [json.loads(p.read_text()) for p in (night / "gpus").glob("*.json")]
        return {d["_summary"]["pid"]: (d["timeline"]["window"], d["_summary"]["kept_iterations"]) for d in docs}

    want = {10: ([57 * MS, 104 * MS], "5-9"), 20: ([65 * MS, 112 * MS], "5-9")}
    assert windows() == want
    check_two_ranks(pd.read_csv(night / "fleet.csv", keep_default_na=False), "pid20/dev0 in rank1.sqlite")
    for doc in (night / "gpus").glob("*.json"):
        doc.unlink()
    rebuilt = run_cli("sweep", "--config", str(cfg), "--report-only")
    assert "nothing analysed" in rebuilt.stdout
    assert windows() == want
