"""Window rules, window-dependent categories, stragglers and the medical record (issue #3).

Expected values are worked out by hand in the comments.
"""
from __future__ import annotations

import hashlib
import sqlite3

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.attribution import categorise
from helpers.window import choose_window, select_stable
from pipeline.analysis.window import (Iterations, WindowError, WindowRules, nvtx_iterations,
    periodic_iterations)
from pipeline.config import CategoryRules, Config, load_config
from pipeline.fleet.reduce import build_fleet
from pipeline.load.report import gpu_trace, load_report
from pipeline.report.medical import job_record
from pipeline.synth import ExportWriter

MS = 1_000_000
RULES = WindowRules()


def nvtx_frame(rows):
    """rows: (start_ms, end_ms, text[, tid]) -> NVTX frame of pid 10."""
    return pd.DataFrame({
        "start": [int(r[0] * MS) for r in rows], "end": [int(r[1] * MS) for r in rows], "pid": 10,
        "tid": [r[3] if len(r) > 3 else 11 for r in rows], "text": [r[2] for r in rows]})


def kernel_frame(rows):
    """rows: (start_ms, end_ms, name) -> kernel frame of pid 10, stream 7."""
    return pd.DataFrame({
        "start": [int(r[0] * MS) for r in rows], "end": [int(r[1] * MS) for r in rows], "pid": 10,
        "stream_id": 7, "correlation_id": range(len(rows)), "name": [r[2] for r in rows]})


# Ten iterations: 0 is a 30 ms warm-up, 5 a 50 ms checkpoint, the others 10 ms (iteration 3: 11 ms).
LENGTHS_MS = [30, 10, 10, 11, 10, 50, 10, 10, 10, 10]
STARTS_MS = np.concatenate(([0], np.cumsum(LENGTHS_MS)[:-1])).tolist()  # 0,30,40,50,61,71,121,131,141,151


def planted_iterations():
    rows = []
    for i, (s, n) in enumerate(zip(STARTS_MS, LENGTHS_MS)):
        rows.append((s, s + n, f"Iteration {i}"))
        rows.append((s + 1, s + 4, "forward"))
        rows.append((s + 1, s + 1.2, "aten::mm, op_id = 1"))  # op-level range, never an iteration
    return nvtx_frame(rows)


def test_nvtx_iterations_exact_names_and_top_level_only():
    frame = pd.concat([planted_iterations(), nvtx_frame([
        (200, 210, "Iteration 10 forward"),  # not an exact match
        (152, 153, "step 3"),                # matches, but nested inside Iteration 9 -> dropped
        (300, 300.5, "Iteration 11"),        # 0.5 ms < min_iteration_ns (1 ms)
    ])], ignore_index=True)
    it = nvtx_iterations(frame, RULES)
    assert it.source == "nvtx"
    assert (it.starts // MS).tolist() == STARTS_MS
    assert ((it.ends - it.starts) // MS).tolist() == LENGTHS_MS


def test_nvtx_iterations_come_from_the_thread_with_the_most():
    """Two threads mark iterations: the one with more wins; a tie goes to the lowest (pid, tid)."""
    more = nvtx_frame([(0, 5, "Iteration 0", 12), (5, 10, "Iteration 1", 12), (10, 15, "Iteration 2", 12)])
    fewer = nvtx_frame([(100, 105, "Iteration 0", 3), (105, 110, "Iteration 1", 3)])
    it = nvtx_iterations(pd.concat([fewer, more], ignore_index=True), RULES)
    assert (it.starts // MS).tolist() == [0, 5, 10]
    tie = nvtx_frame([(100, 105, "Iteration 0", 30), (105, 110, "Iteration 1", 30)])
    other = nvtx_frame([(50, 55, "Iteration 0", 30), (55, 60, "Iteration 1", 30)]).assign(pid=9)
    it = nvtx_iterations(pd.concat([tie, more.iloc[:2], other], ignore_index=True), RULES)
    assert (it.starts // MS).tolist() == [50, 55]  # three threads with two each: pid 9 first
    it = nvtx_iterations(pd.concat([tie, more.iloc[:2]], ignore_index=True), RULES)
    assert (it.starts // MS).tolist() == [0, 5] and (it.ends // MS).tolist() == [5, 10]  # (10, 12) before (10, 30)


def test_other_iteration_patterns():
    for text in ("ProfilerStep#7", "train_step", "step 4", "iteration_2"):
        it = nvtx_iterations(nvtx_frame([(0, 5, text)]), RULES)
        assert it is not None and it.starts.size == 1, text
    for text in ("aten::step", "Iteration", "optimizer.step", "ncclAllReduce"):
        assert nvtx_iterations(nvtx_frame([(0, 5, text)]), RULES) is None, text


def test_select_stable_drops_warmup_and_checkpoint():
    it = Iterations(np.array(STARTS_MS) * MS, (np.array(STARTS_MS) + np.array(LENGTHS_MS)) * MS, "nvtx")
    kept, excluded = select_stable(it, RULES)
    # median of iterations 1..9 = median(10,10,11,10,50,10,10,10,10) = 10 -> 50/10 = 5.00x is an outlier;
    # runs 1..4 and 6..9 both hold 4 iterations: the earliest wins.
    assert kept.tolist() == [1, 2, 3, 4]
    assert excluded == {0: "warm-up", 5: "outlier (5.00x median)", 6: "outside the longest stable run",
                        7: "outside the longest stable run", 8: "outside the longest stable run",
                        9: "outside the longest stable run"}
    kept, excluded = select_stable(it, WindowRules(max_iterations=3))
    assert kept.tolist() == [2, 3, 4] and excluded[1] == "beyond max_iterations"


def test_auto_window_from_nvtx():
    kernels = kernel_frame([(s + 1, s + 4, "gemm") for s in STARTS_MS])
    win = choose_window(kernels, planted_iterations(), "auto")
    # iterations 1..4: [30, 71) ms
    assert (win.rule, win.start_ns, win.end_ns, win.untrimmed) == ("nvtx", 30 * MS, 71 * MS, False)
    assert win.iterations == 4
    # lengths 10, 10, 11, 10 ms: mean 10.25 ms; population std sqrt((3 x 0.25^2 + 0.75^2) / 4) = 0.4330 ms
    assert win.iteration_mean_ns == 10_250_000
    assert win.iteration_cv == pytest.approx(0.0423, abs=1e-4)
    assert dict(win.excluded)[0] == "warm-up" and dict(win.excluded)[5] == "outlier (5.00x median)"
    assert win.boundaries == tuple(s * MS for s in STARTS_MS)


def periodic_kernels():
    # "fwd" launches at 0, 20, 30, ..., 100 ms (iteration 0 is a 20 ms warm-up, then 10 ms each),
    # "bwd" 5 ms after each "fwd", "opt" 8 ms after; all 2 ms long.
    fwd = [0] + list(range(20, 101, 10))
    rows = []
    for t in fwd:
        rows += [(t, t + 2, "fwd"), (t + 5, t + 7, "bwd"), (t + 8, t + 9, "opt")]
    return kernel_frame(rows)


def test_periodic_iterations_from_kernels():
    it = periodic_iterations(periodic_kernels(), RULES)
    # fwd, bwd and opt all share the 10 ms period (8 of 9 intervals at 10 ms = 0.89 >= 0.8);
    # the earliest-starting of them, fwd, anchors: iterations [0,20), [20,30), ..., [90,100)
    assert (it.starts // MS).tolist() == [0, 20, 30, 40, 50, 60, 70, 80, 90]
    assert (it.ends // MS).tolist() == [20, 30, 40, 50, 60, 70, 80, 90, 100]
    win = choose_window(periodic_kernels(), nvtx_frame([]), "auto")
    # warm-up [0,20) dropped; 8 iterations [20, 100) ms
    assert (win.rule, win.start_ns, win.end_ns, win.iterations) == ("periodic", 20 * MS, 100 * MS, 8)
    assert win.note == "nvtx: no iterations found"


def test_abstain_and_fallback_to_span():
    kernels = kernel_frame([(0, 2, "a"), (3, 4, "b"), (7, 9, "c")])  # nothing periodic
    two = nvtx_frame([(0, 5, "Iteration 0"), (5, 10, "Iteration 1")])
    win = choose_window(kernels, two, "auto")
    assert (win.rule, win.untrimmed, win.start_ns, win.end_ns) == ("span", True, 0, 9 * MS)
    assert win.note == ("nvtx: only 1 usable iteration(s) of 2 (need 3); periodic: no iterations found")
    with pytest.raises(WindowError, match="abstained: nvtx: only 1 usable"):
        choose_window(kernels, two, "nvtx")


def test_periodic_shorter_than_the_nvtx_steps_is_a_sub_step_pattern():
    """NVTX steps exist but are too few (2, one of them warm-up): a kernel period much shorter than
    those steps repeats inside a step (a layer), not an iteration: ``periodic`` abstains and the window
    is the span, flagged untrimmed (the a100_ws2 PyTorch trace's case, issue 14 tryout point 8)."""
    # periodic_kernels(): fwd every 10 ms from 20 ms (20 ms warm-up at 0), iterations
    # [0,20), [20,30), ..., [90,100): lengths 20, 10 x 8 -> median 10 ms. The last kernel, opt, ends at 109 ms.
    steps = nvtx_frame([(0, 50, "Iteration 0"), (50, 100, "Iteration 1")])   # CPU-side: 50 ms each, median 50 ms
    win = choose_window(periodic_kernels(), steps, "auto")
    # 10 ms x outlier_factor 1.5 = 15 ms < 50 ms: a sub-step pattern
    assert (win.rule, win.untrimmed, win.start_ns, win.end_ns, win.iterations) == ("span", True, 0, 109 * MS, 0)
    assert win.note == ("nvtx: only 1 usable iteration(s) of 2 (need 3); periodic: its iterations (median "
                        "10.000 ms) are shorter than the NVTX iterations (median 50.000 ms) / 1.5: a pattern inside "
                        "a step, not an iteration")
    # steps of 15 ms: 10 ms x 1.5 = 15 ms is not below 15 ms -> the period is an iteration, as before
    win = choose_window(periodic_kernels(), nvtx_frame([(0, 15, "Iteration 0"), (15, 30, "Iteration 1")]), "auto")
    assert (win.rule, win.start_ns, win.end_ns, win.iterations) == ("periodic", 20 * MS, 100 * MS, 8)
    assert win.note == "nvtx: only 1 usable iteration(s) of 2 (need 3)"
    # steps of 15.1 ms: 15 ms < 15.1 ms -> abstains; three steps of 15.1, 16, 17 ms: median 16 ms
    win = choose_window(periodic_kernels(), nvtx_frame([(0, 15.1, "step 0"), (20, 36, "step 1"),
                                                        (40, 57, "step 2")]), "auto")
    assert win.rule == "span" and "(median 16.000 ms) / 1.5: a pattern inside a step" in win.note
    # a strict --window periodic never looks at NVTX: the period is the window
    win = choose_window(periodic_kernels(), steps, "periodic")
    assert (win.rule, win.start_ns, win.end_ns) == ("periodic", 20 * MS, 100 * MS)


def test_trim_wins():
    win = choose_window(periodic_kernels(), planted_iterations(), "auto", trim_s=(0.0215, 0.05))
    assert (win.rule, win.start_ns, win.end_ns) == ("trim", 21_500_000, 50_000_000)
    with pytest.raises(WindowError):
        choose_window(periodic_kernels(), planted_iterations(), "auto", trim_s=(2, 1))


# ------------------------------------------------------------------ categories that need iterations

def gap_frame(rows):
    """rows: (start_ms, length_ms, kernel_before)."""
    return pd.DataFrame({"pid": 1, "stream_id": 7, "start": [int(r[0] * MS) for r in rows],
                         "length": [int(r[1] * MS) for r in rows],
                         "end": [int((r[0] + r[1]) * MS) for r in rows],
                         "kernel_before": [r[2] for r in rows], "kernel_after": "k"})


EMPTY_CALLS = pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64"),
                            "name": pd.Series(dtype=object)})
EMPTY_COPIES = pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64")})


def test_boundary_needs_iteration_start_and_quiet_cpu():
    gaps = gap_frame([(8, 3, "gemm"),    # [8, 11): iteration starts at 10 -> boundary
                      (13, 2, "gemm"),   # [13, 15): no boundary inside -> cpu
                      (28, 4, "gemm")])  # [28, 32): boundary 30, but a cudaLaunchKernel covers 3 of 4 ms -> cpu
    calls = pd.DataFrame({"start": [28 * MS], "end": [31 * MS], "name": ["cudaLaunchKernel"]})
    out = categorise(gaps, calls, EMPTY_COPIES, CategoryRules(), boundaries=(0, 10 * MS, 20 * MS, 30 * MS))
    assert out["category"].tolist() == ["boundary", "cpu", "cpu"]


def test_periodic_with_iterations_every_third():
    # 12 iterations of 100 ms; 2 ms gaps in each, and 80 ms gaps in iterations 2, 5 and 8 (every 3rd)
    bounds = tuple(i * 100 * MS for i in range(12))
    rows = [(i * 100 + 50, 2, "gemm") for i in range(12)]
    rows += [(i * 100 + 10, 80, "gemm") for i in (2, 5, 8)]
    out = categorise(gap_frame(rows), EMPTY_CALLS, EMPTY_COPIES, CategoryRules(), boundaries=bounds)
    big = out[out["length"] == 80 * MS]
    assert big["category"].tolist() == ["periodic"] * 3
    assert set(out[out["length"] == 2 * MS]["category"]) == {"cpu"}
    # in 3 of 12 iterations (<= half) with a constant spacing of 3 iterations; two every 1 would not be rare
    rows_dense = [(i * 100 + 50, 2, "gemm") for i in range(12)] + [(i * 100 + 10, 80, "gemm") for i in range(8)]
    dense = categorise(gap_frame(rows_dense), EMPTY_CALLS, EMPTY_COPIES, CategoryRules(), boundaries=bounds)
    assert "periodic" not in set(dense["category"])


def test_launch_bound_gpu(tmp_path):
    # 100 kernels of 0.5 ms, each followed by a 0.5 ms hole (sub-threshold), one 2 ms gap at the end.
    w = ExportWriter(str(tmp_path / "launch.sqlite"))
    t = 0
    for i in range(100):
        w.kernel(pid=10, device=0, stream=7, start=t, end=t + MS // 2, name="tiny")
        t += MS
    w.kernel(pid=10, device=0, stream=7, start=t - MS // 2 + 2 * MS, end=t + 2 * MS, name="tiny")
    w.close()
    rep = load_report(str(tmp_path / "launch.sqlite"))
    res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], {"analysis": {"window": "span"}}), {})
    row = res.row
    # kernels [i, i + 0.5) ms for i = 0..99, the last one [101.5, 102) ms: window [0, 102 ms),
    # busy 101 x 0.5 = 50.5 ms, idle 51.5 ms = 99 holes of 0.5 ms + one 2 ms hole [99.5, 101.5)
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (102_000_000, 50_500_000, 51_500_000)
    assert (row["device_sliver_count"], row["device_sliver_ns"]) == (99, 49_500_000)
    # 49.5 / 51.5 = 0.96 >= 0.5 of the idle and 48.5 % of W >= 2 % -> launch-bound
    assert row["launch_bound"] is True
    assert row["cat_launch_ns"] == 49_500_000 and row["main_category"] == "launch"
    assert (row["gap_count"], row["gap_total_ns"]) == (1, 2 * MS)


# ------------------------------------------------------------------ stragglers and the medical record

def fleet_rows(idle_pcts, job="j"):
    rows = []
    for i, pct in enumerate(idle_pcts):
        rows.append({"report": "r.sqlite", "job": job, "cluster": "c", "gpu_key": f"g{i}", "idle_pct": pct,
                     "status": "ok", "window_ns": 100 * MS, "idle_ns": int(pct * MS)})
    return rows


def test_straggler_spread():
    fleet = build_fleet(fleet_rows([10.0, 15.0, 25.0]))  # spread 15 > 10 points -> g2
    assert fleet["straggler"].tolist() == [False, False, True]
    fleet = build_fleet(fleet_rows([10.0, 15.0, 20.0]))  # spread exactly 10 -> nobody
    assert fleet["straggler"].tolist() == [False, False, False]


def test_medical_record_format():
    rows = []
    for i, (idle, sync, data) in enumerate([(20, 12, 6), (40, 30, 1)]):
        row = {c: 0 for c in ("cat_comm_ns", "cat_boundary_ns", "cat_periodic_ns", "cat_launch_ns", "cat_cpu_ns")}
        row.update({"report": "r.sqlite", "job": "train", "gpu_key": f"gpu{i}", "status": "ok",
                    "window_ns": 100 * MS, "idle_ns": idle * MS, "idle_pct": float(idle), "straggler": i == 1,
                    "window_rule": "nvtx", "cat_sync_ns": sync * MS, "cat_data_ns": data * MS,
                    "idle_usd_per_month": 100.0 * (i + 1)})
        rows.append(row)
    fleet = pd.DataFrame(rows)
    rosters = {("r.sqlite", "gpu0"): {"device": [{"pid": -1, "stream_id": -1, "start_ns": 5, "length_ns": 3 * MS,
                                                  "category": "sync", "nvtx_range": "Iteration 3"}]},
               ("r.sqlite", "gpu1"): {"device": [{"pid": -1, "stream_id": -1, "start_ns": 9, "length_ns": 7 * MS,
                                                  "category": "data", "nvtx_range": ""}],
                                      "streams": [{"pid": 2, "stream_id": 23, "start_ns": 1, "length_ns": 50 * MS,
                                                   "category": "comm", "nvtx_range": ""}]}}
    page = job_record("train", fleet, rosters)
    lines = page.splitlines()
    # idle (20 + 40) / 200 = 30 %; sync (12 + 30) / 200 = 21 %, data 7 / 200 = 3.5 %, the rest none (left out)
    # no model known: the GPUs are "GPU #1 gpu0" and "GPU #2 gpu1" (docs/outputs.md#gpu-names), their keys in
    # the last lines
    assert lines[2] == ("Idle 30.00 % device-level over 2 GPU(s) (min 20.00 % GPU #1 gpu0, max 40.00 % GPU #2 gpu1, "
                        "straggler suspect GPU #2 gpu1; window: the iterations the job marks itself (NVTX ranges))")
    assert lines[3] == "Categories: sync 21.00 % · data 3.50 %"
    # the page lists device-level gaps only: the 50 ms per-stream gap on a side stream is not idle GPU time
    # starts in seconds on the report's clock (the column says so), to the µs: 9 ns and 5 ns are 0.000000 s
    assert lines[7] == "| # | GPU | start (report clock, s) | NVTX range | width | category |"
    assert lines[9] == "| 1 | GPU #2 gpu1 | 0.000000 s | - | 7.000 ms | data |"
    assert lines[10] == "| 2 | GPU #1 gpu0 | 0.000000 s | Iteration 3 | 3.000 ms | sync |"
    # a link per GPU to its page, named <report>__<gpu>__<first 10 hex of sha1("report\0gpu")>.html
    pages = {g: hashlib.sha1(f"r.sqlite\0{g}".encode()).hexdigest()[:10] for g in ("gpu0", "gpu1")}
    assert lines[12] == "## GPU pages"
    assert lines[16:18] == [f"- [GPU #1 gpu0](../gpu-pages/r.sqlite__gpu0__{pages['gpu0']}.html)",
                            f"- [GPU #2 gpu1](../gpu-pages/r.sqlite__gpu1__{pages['gpu1']}.html)"]
    assert len(lines) == 23 and lines[19] == ("Idle cost: $300.00 per month for these GPUs. Basis: 60.000 ms idle of 200.000 ms "
                                          "of windows over 2 GPU(s), each GPU's idle share × its rate × hours per month.")
    assert lines[20:] == ["", "*[GPU #1 gpu0]: gpu0 in r.sqlite", "*[GPU #2 gpu1]: gpu1 in r.sqlite"]
    assert job_record("train", fleet, rosters) == page  # deterministic
    # a category with 1 ns of idle stays (0.00 %, archived: under the actionable share); with none, every one is left out
    # and the line says so once
    small = fleet.assign(cat_comm_ns=[1, 0])
    assert job_record("train", small, rosters).splitlines()[3] == \
        "Categories: sync 21.00 % · data 3.50 % · comm 0.00 % (archived)"
    none = fleet.assign(cat_sync_ns=0, cat_data_ns=0)
    assert job_record("train", none, rosters).splitlines()[3] == "Categories: no idle in any category"


# ------------------------------------------------------------------ real exports

def _plain_trimmed_idle(path, pid, w0, w1):
    """Device idle in [w0, w1) by a plain sweep over clipped rows (no pipeline code)."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE ((globalPid >> 24) & 16777215) = ?"
                       " ORDER BY start", (pid,)).fetchall()
    con.close()
    busy, cur_s, cur_e = 0, None, None
    for s, e in rows:
        s, e = max(s, w0), min(e, w1)
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            busy += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += (cur_e - cur_s) if cur_e is not None else 0
    return (w1 - w0) - busy


def test_trim_on_real_export_clips_both_edges(profiles, tmp_path):
    # train_h100_2gpu_nccl: kernels run 60.111..60.411 s; trim to [60.2 s, 60.3 s)
    out = tmp_path / "trim"
    run_cli("run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(out), "--trim", "60.2", "60.3")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    w0, w1 = 60_200_000_000, 60_300_000_000
    for pid in (144, 145):
        r = fleet[fleet["pid"] == pid].iloc[0]
        assert (r.window_rule, int(r.window_start_ns), int(r.window_end_ns), int(r.window_ns)) == \
            ("trim", w0, w1, 100_000_000)
        assert int(r.idle_ns) == _plain_trimmed_idle(profiles / "train_h100_2gpu_nccl.sqlite", pid, w0, w1)


def test_auto_window_on_op_ranges_is_not_nvtx(profiles, tmp_path):
    """aten::/NCCL NVTX op ranges are not iterations: auto says which rule it used instead."""
    out = tmp_path / "auto"
    run_cli("run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(out), "--window", "auto")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert len(fleet) == 2
    for r in fleet.itertuples():
        assert r.window_rule in ("periodic", "span")
        assert r.window_note.startswith("nvtx: no iterations found")
    strict = tmp_path / "strict"
    proc = run_cli("run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(strict), "--window", "nvtx",
                   check=False)
    assert proc.returncode == 1
    errors = pd.read_csv(strict / "fleet.csv", keep_default_na=False)
    assert set(errors["status"]) == {"error"}
    assert errors["error"].str.contains("abstained: nvtx: no iterations found").all()
    # The rule's own statement, not an unexpected error to report (issue 23's catch-all must keep it).
    for error, gpu in zip(errors["error"], errors["gpu_key"]):
        assert error.startswith(f"{profiles / 'train_h100_2gpu_nccl.sqlite'}: GPU {gpu}: abstained: nvtx: ")
        assert "unexpected" not in error and "please report it" not in error


def test_nvtx_less_export_uses_kernel_periodicity(tmp_path):
    """An export without NVTX: iterations come from the kernels' own periodicity (rule ``periodic``)."""
    w = ExportWriter(str(tmp_path / "no_nvtx.sqlite"))
    starts = [0] + [20 + 10 * i for i in range(9)]  # iteration 0 is a 20 ms warm-up, then 10 ms each
    for t in starts:
        for offset, name in ((0, "embed"), (2, "gemm"), (4, "gemm"), (6, "gemm"), (8, "opt")):
            w.kernel(pid=10, device=0, stream=7, start=(t + offset) * MS, end=(t + offset + 1) * MS, name=name)
    w.close()
    rep = load_report(str(tmp_path / "no_nvtx.sqlite"))
    assert rep.nvtx.empty
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), Config(), {}).row
    # embed and opt recur every 5 launches (gemm every 1-3: not regular); embed comes first and anchors:
    # iterations [0,20), [20,30), ..., [90,100) ms; the warm-up is dropped -> 8 iterations, W = [20, 100) ms
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("periodic", 20 * MS, 100 * MS)
    assert (row["iterations"], row["iteration_mean_ns"], row["iteration_cv"]) == (8, 10 * MS, 0.0)
    assert row["excluded_iterations"] == "0: warm-up"
    assert row["window_note"] == "nvtx: no iterations found"
    # 5 kernels of 1 ms per 10 ms iteration: busy 8 x 5 = 40 ms, idle 40 ms in 40 holes of exactly 1 ms
    # (= the threshold, so no gap is kept) -> the idle is all slivers: launch-bound
    assert (row["busy_ns"], row["idle_ns"], row["gap_count"]) == (40 * MS, 40 * MS, 0)
    assert (row["device_sliver_count"], row["device_sliver_ns"], row["launch_bound"]) == (40, 40 * MS, True)
    assert (row["cat_launch_ns"], row["cat_launch_pct"], row["main_category"]) == (40 * MS, 50.0, "launch")


def test_timeline_keeps_long_gaps_when_compacting():
    from pipeline.analysis.analyse import timeline
    from pipeline.analysis.window import Window
    # 6 kernels of 1 ms with holes 1, 5, 1, 9, 1 ms; keep at most 3 runs -> the two longest holes (9, 5) stay
    starts = [0, 2, 8, 10, 20, 22]
    kernels = kernel_frame([(t, t + 1, "k") for t in starts])
    gaps = gap_frame([(3, 5, "k"), (11, 9, "k")]).assign(category=["cpu", "sync"])
    win = Window(0, 23 * MS, "nvtx", False, boundaries=(0, 10 * MS, 20 * MS, 30 * MS))
    import pipeline.analysis.analyse as analyse
    old, analyse.TIMELINE_MAX_RUNS = analyse.TIMELINE_MAX_RUNS, 3
    try:
        t = timeline(kernels, gaps, win)
    finally:
        analyse.TIMELINE_MAX_RUNS = old
    assert t["busy"] == [[0, 3 * MS], [8 * MS, 11 * MS], [20 * MS, 23 * MS]]
    assert t["gaps"] == [[3 * MS, 8 * MS, "cpu"], [11 * MS, 20 * MS, "sync"]]
    assert t["iterations"] == [[0, 10 * MS], [10 * MS, 20 * MS], [20 * MS, 30 * MS]]
    assert t["window"] == [0, 23 * MS]
