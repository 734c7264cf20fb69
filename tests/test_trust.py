"""Issue 12 "Never silently wrong", kinds 3-5: lost kernel records (``untraced``), profiler overhead
(``profiler``) and impossible rows (exact duplicates, end < start, times far outside the capture).

Every input is a small export in the real schema (ExportWriter); every expected number is worked
out by hand in the comments, not by the code under test.
"""
from __future__ import annotations

import sqlite3

import pandas as pd
import pytest
from conftest import REPO, run_cli, without_model_warning

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import Config
from pipeline.fleet.reduce import FLEET_COLUMNS, build_fleet
from pipeline.load import caveats
from pipeline.load.report import gpu_trace, load_report
from pipeline.report.plots import gpu_timeline
from pipeline.synth import ExportWriter

MS = 1_000_000
US = 1_000
S = 1_000_000_000
INT64_MAX = 9_223_372_036_854_775_807
#: H100 (the default model: these exports name no GPU) at 4.00 USD per GPU-hour, 730 hours a month.
USD = 4.0 * 730
#: Default configuration: the auto window (these exports have no NVTX iterations and one kernel name,
#: so every rule but ``span`` abstains unless a test adds iterations).
AUTO = Config()
CUPTI_DROPPED = "CUPTI dropped 1234 records. Some CUPTI events might be missing."
INCOMPLETE_DROPPED = ("Number of incomplete CUPTI events dropped: 12. Incomplete events appear when GPU timestamp "
                      "information have not been retrieved at the time the profiling session was stopped.")
SOME_LOST = "Some events (42) were lost. Try to decrease sampling rate and start a new profiling session."


def analyse(path, cfg: Config = AUTO) -> dict:
    """GPU key -> GpuResult of every GPU of the export at ``path``."""
    rep = load_report(str(path))
    return {key: analyse_gpu(gpu_trace(rep, key), cfg, cfg.labels_for(rep.path)) for key in rep.gpu_keys()}


def write(path, *fills) -> str:
    """An export at ``path`` made by calling each of ``fills`` on one ExportWriter; returns the path."""
    w = ExportWriter(str(path))
    for fill in fills:
        fill(w)
    return w.close()


def pct(part_ns: int, window_ns: int) -> float:
    return round(100.0 * part_ns / window_ns, 4)


def usd(part_ns: int, window_ns: int) -> float:
    return round(part_ns / window_ns * USD, 2)


# ---------------------------------------------------------------- 3. lost kernel records: `untraced`

T0 = 10 * MS


def launches(w: ExportWriter, n: int = 100, lost=range(30, 70), pid: int = 10, tid: int = 11) -> None:
    """``n`` cudaLaunchKernel calls 1 ms apart (correlationIds 1000..), each 50..40 us before its kernel
    (0.9 ms, stream 7 of device 0); the kernel rows of ``lost`` are missing (the trace lost them)."""
    for i in range(n):
        t = T0 + i * MS
        w.runtime(pid=pid, tid=tid, start=t - 50 * US, end=t - 40 * US, name="cudaLaunchKernel_v7000",
                  correlation=1000 + i)
        if i not in lost:
            w.kernel(pid=pid, device=0, stream=7, start=t, end=t + 900 * US, name="gemm", correlation=1000 + i)


def test_lost_kernel_records_are_untraced_not_cpu(tmp_path):
    (res,) = analyse(write(tmp_path / "lost.sqlite", launches)).values()
    row = res.row
    # span: first kernel at T0, last (i = 99) ends at T0 + 99.9 ms; 60 kernels of 0.9 ms are busy
    assert (row["window_rule"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == (
        "span", 99_900_000, 54 * MS, 45_900_000)
    # one device gap: kernel 29 ends at T0 + 29.9 ms, kernel 70 starts at T0 + 70 ms -> 40.1 ms, untraced
    assert (row["device_gap_count"], row["device_gap_ns"]) == (1, 40_100_000)
    assert (row["cat_untraced_ns"], row["cat_untraced_pct"]) == (40_100_000, pct(40_100_000, 99_900_000))
    assert (row["cat_cpu_ns"], row["cat_profiler_ns"], row["cat_profiler_pct"]) == (0, 0, 0.0)
    assert row["untraced_usd_per_month"] == usd(40_100_000, 99_900_000)
    assert row["profiler_usd_per_month"] == 0.0
    assert row["idle_usd_per_month"] == usd(45_900_000, 99_900_000)  # the headline keeps its meaning
    # what is left is the application's own: 2 x 29 slivers of 0.1 ms between traced kernels = 5.8 ms,
    # all of the 45.9 - 40.1 ms that is not untraced: launch-bound
    assert (row["device_sliver_count"], row["device_sliver_ns"], row["launch_bound"]) == (58, 5_800_000, True)
    assert (row["cat_launch_ns"], row["main_category"], row["actionable"]) == (5_800_000, "launch", "launch")
    assert row["status"] == "partial"
    # launches 30..69: the first issued at T0 + 30 ms - 50 us, the last ends at T0 + 69 ms - 40 us
    assert without_model_warning(row["warnings"]) == (
        "40 CUDA launches have no kernel record (the trace lost them): pid 10, correlationIds 1030..1069 "
        "(cudaLaunchKernel), issued 0.039950..0.078960 s on the report's clock; 40.100 ms of device idle in "
        "the window is untraced")
    assert (res.device_roster[0]["category"], res.device_roster[0]["length_ns"]) == ("untraced", 40_100_000)
    assert (res.roster[0]["category"], res.roster[0]["length_ns"]) == ("untraced", 40_100_000)
    assert res.timeline["gaps"] == [[T0 + 29_900_000, T0 + 70 * MS, "untraced"]]
    assert "untraced gap" in gpu_timeline({"timeline": res.timeline}, "lost records")  # drawn, in its own colour


def test_window_leaves_out_iterations_of_lost_records(tmp_path):
    """12 NVTX iterations of 10 launches; iterations 3..6 lost their kernels. The NVTX window keeps the
    longest stable run without the hole (7..11 on the GPU timeline), not 1..11 with the hole inside."""
    path = tmp_path / "lost_iterations.sqlite"
    w = ExportWriter(str(path))
    launches(w, n=120)
    for k in range(12):
        w.nvtx(pid=10, tid=11, start=T0 + 10 * k * MS - 100 * US, end=T0 + 10 * (k + 1) * MS - 100 * US,
               text=f"Iteration {k}")
    w.close()
    (res,) = analyse(path).values()
    row = res.row
    # On the GPU timeline (the launches of iteration k are those of kernels 10k..10k+9): iteration k runs
    # [T0 + 10k, T0 + 10k + 9.9) ms; 3..6 have no kernel left, and their NVTX ranges overlap the hole
    # [T0 + 29.9, T0 + 70) ms: untraced. Iteration 2's length runs to the next iteration on the GPU (7, at
    # T0 + 70 ms) over the hole: untraced too. 7 starts on the GPU at T0 + 70 ms, where the hole ends, so it
    # is clean (its NVTX range, from T0 + 69.9 ms, touched the hole). 0 is warm-up; the longest run left is
    # 7..11: [T0 + 70, T0 + 119.9) ms.
    untraced = "untraced (lost kernel records)"
    assert (row["window_rule"], row["iterations"], row["kept_iterations"]) == ("nvtx", 5, "7-11")
    assert (row["window_start_ns"], row["window_end_ns"], row["window_ns"]) == (80 * MS, 129_900_000, 49_900_000)
    assert row["excluded_iterations"] == "; ".join(
        ["0: warm-up", "1: outside the longest stable run"] + [f"{k}: {untraced}" for k in range(2, 7)])
    # kernels 70..119 inside W: 45 ms busy, 49 slivers of 0.1 ms between them
    assert (row["kernel_count"], row["busy_ns"], row["idle_ns"], row["cat_untraced_ns"]) == (50, 45 * MS, 4_900_000, 0)
    assert row["status"] == "partial"  # the trace lost records, even if not inside this window
    assert without_model_warning(row["warnings"]) == (
        "40 CUDA launches have no kernel record (the trace lost them): pid 10, correlationIds 1030..1069 "
        "(cudaLaunchKernel), issued 0.039950..0.078960 s on the report's clock; 0.000 ms of device idle in "
        "the window is untraced; "
        # the job's kind is unknown: C = 80 kernels of 0.9 ms over [T0 + 10, T0 + 129.9) ms holds 119.9 − 72 =
        # 47.9 ms of idle, 4.9 of it in W: 43 ms (89.7704 %) left out, most of it the hole the trace lost
        "the nvtx window leaves out 89.7704 % of the capture's idle (43.000 of 47.900 ms) and the job's kind is "
        "unknown: if it serves requests, that idle is its cost (label it: labels kind: serving, or training)")


@pytest.mark.parametrize("lookup", ["bitmap", "sorted keys", "bitmap in pieces", "sorted keys in pieces"])
def test_lost_launches_across_launch_apis_graphs_and_processes(tmp_path, monkeypatch, lookup):
    """Which launches count as lost: every launch API (suffixes dropped), a graph launch with several
    kernels or only a memset is traced, correlationIds are per process, and launches after the last
    kernel of their process (the capture's edge) are not lost. Both ways of looking correlationIds
    up (a bitmap over dense ranges, sorted keys for sparse ones) give the same answer, also when the
    records (kernels, then copies, never joined) and the calls are gone through 2 rows at a time."""
    if lookup.endswith("in pieces"):
        monkeypatch.setattr(caveats, "CHUNK_ROWS", 2)
    if lookup.startswith("sorted keys"):
        monkeypatch.setattr(caveats, "BITMAP_IDS_PER_RECORD", 0)
        monkeypatch.setattr(caveats, "BITMAP_SLACK", 0)
    path = tmp_path / "apis.sqlite"
    w = ExportWriter(str(path))
    p, q = 10, 20

    def call(pid, corr, at_ms, name):
        w.runtime(pid=pid, tid=pid + 1, start=int(at_ms * MS), end=int(at_ms * MS) + 100 * US, name=name,
                  correlation=corr)

    def kernel(pid, corr, start_ms, end_ms):
        w.kernel(pid=pid, device=0, stream=7, start=start_ms * MS, end=end_ms * MS, name="k", correlation=corr)

    call(p, 1, 1, "cudaLaunchKernel_v7000"), kernel(p, 1, 2, 3)
    call(p, 2, 3, "cudaGraphLaunch_v10000"), kernel(p, 2, 4, 5), kernel(p, 2, 5, 6)  # a graph: two kernels
    call(p, 3, 6, "cuLaunchKernel")                                                      # lost
    call(p, 4, 7, "cudaLaunchKernel_ptsz"), kernel(p, 4, 10, 11)
    call(p, 5, 12, "cudaLaunchCooperativeKernel_v9000")                                  # lost
    call(p, 6, 13, "cudaGraphLaunch_v10000")                                             # a graph of one memset
    w.memset(pid=p, device=0, stream=7, start=14 * MS, end=15 * MS, correlation=6)
    call(p, 7, 16, "cudaLaunchKernelExC_v11060"), kernel(p, 7, 17, 18)
    call(p, 8, 19, "cudaLaunchKernel_v7000")        # after the last kernel: ran after the capture, not lost
    call(p, 9, 20, "cudaMemcpyAsync_v3020")         # not a launch
    for corr, at in ((1, 1), (3, 2), (5, 5)):       # another process reuses correlationIds 1, 3, 5
        call(q, corr, at, "cudaLaunchKernel_v7000"), kernel(q, corr, at + 1, at + 2)
    w.close()
    rep = load_report(str(path))
    lost = rep.untraced[["kind", "pid", "correlation_id", "name", "call_start", "call_end", "start", "end"]]
    # each lost launch may have run from its call to the next traced GPU work of its process
    # (corr 3: the kernel of corr 4 at 10 ms; corr 5: the memset of corr 6 at 14 ms)
    assert lost.to_dict("records") == [
        {"kind": "launch", "pid": 10, "correlation_id": 3, "name": "cuLaunchKernel", "call_start": 6 * MS,
         "call_end": 6 * MS + 100 * US, "start": 6 * MS, "end": 10 * MS},
        {"kind": "launch", "pid": 10, "correlation_id": 5, "name": "cudaLaunchCooperativeKernel",
         "call_start": 12 * MS, "call_end": 12 * MS + 100 * US, "start": 12 * MS, "end": 14 * MS}]
    assert gpu_trace(rep, "pid20/dev0").untraced.empty
    results = analyse(path)
    assert results["pid20/dev0"].row["status"] == "ok" and results["pid20/dev0"].row["cat_untraced_ns"] == 0
    row = results["pid10/dev0"].row
    # W = [2, 18) ms; busy [2,3) [4,6) [10,11) [17,18) = 5 ms; holes [3,4) (a sliver), [6,10) and [11,17)
    # (both overlap a lost launch's interval) -> 10 ms untraced; the memset [14,15) is copy-only time
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"]) == (16 * MS, 5 * MS, 11 * MS, MS)
    assert (row["cat_untraced_ns"], row["cat_cpu_ns"], row["cat_data_ns"]) == (10 * MS, 0, 0)
    assert without_model_warning(row["warnings"]) == (
        "2 CUDA launches have no kernel record (the trace lost them): pid 10, correlationIds 3, 5 "
        "(cuLaunchKernel, cudaLaunchCooperativeKernel), issued 0.006000..0.012100 s on the report's clock; "
        "10.000 ms of device idle in the window is untraced")


@pytest.mark.parametrize("lookup", ["bitmap", "sorted keys", "bitmap in pieces", "sorted keys in pieces"])
@pytest.mark.parametrize("pids", [(10, 11, 14, 20), (3, 900_000, 2**23, 16_000_000)])
def test_untraced_calls_are_those_a_plain_lookup_finds(monkeypatch, lookup, pids):
    """Many calls against records of several processes (correlationIds per process, their ranges overlapping,
    some records of correlationId 0, calls of a process without records, outside its range, or of id 0): the
    lost calls are exactly those a plain computation over Python sets finds (the process has records with
    smaller and with larger ids, none with the call's own), by either lookup (a bitmap with a row per process,
    sorted keys), a few rows at a time or not, processes close together (a table over their ids) or far apart
    (hashed)."""
    import numpy as np

    if lookup.endswith("in pieces"):
        monkeypatch.setattr(caveats, "CHUNK_ROWS", 7)
    if lookup.startswith("sorted keys"):
        monkeypatch.setattr(caveats, "BITMAP_IDS_PER_RECORD", 0)
        monkeypatch.setattr(caveats, "BITMAP_SLACK", 0)
    rng = np.random.default_rng(11)
    with_records = pids[:3]  # the last process has calls only
    tables = []
    for size in (400, 60):  # kernels, then copies
        pid = rng.choice(with_records, size).astype(np.int32)
        corr = (rng.integers(1, 300, size) + 100 * (pid == pids[1])).astype(np.int32)  # pids[1]: 101..399
        corr[rng.random(size) < 0.05] = 0
        tables.append((pid, corr))
    call_pid = rng.choice(pids, 900).astype(np.int32)
    call_corr = rng.integers(-5, 420, 900).astype(np.int32)
    held = {p: set() for p in pids}
    for pid, corr in tables:
        for p, c in zip(pid.tolist(), corr.tolist()):
            if c:
                held[p].add(c)
    plain = [bool(held[p]) and min(held[p]) < c < max(held[p]) and c not in held[p]
             for p, c in zip(call_pid.tolist(), call_corr.tolist())]
    assert 20 < sum(plain) < 900
    assert caveats._untraced_calls(tables, call_pid, call_corr).tolist() == plain


def test_launch_names_are_found_by_code_whether_few_or_many_names_match():
    """``name_mask`` of categorical names (one or more launch APIs among them, rows without a name) is the
    plain membership test of each row's text, whether the matching names are compared one by one or
    looked up (more than FEW_NAMES of them)."""
    import numpy as np

    from pipeline.analysis import graphcapture

    apis = sorted(caveats.LAUNCH_APIS)
    for matching in (0, 1, graphcapture.FEW_NAMES, graphcapture.FEW_NAMES + 3):
        names = apis[:matching] + ["cudaMemcpyAsync", "cudaStreamSynchronize"]
        rows = np.random.default_rng(matching).choice(names + [None], 200).tolist()
        mask = graphcapture.name_mask(pd.Series(pd.Categorical(rows, categories=names)), caveats.LAUNCH_APIS)
        assert mask.tolist() == [r in caveats.LAUNCH_APIS for r in rows] and mask.sum() >= (matching > 0)


def test_dropped_events_inside_a_gap_make_it_untraced(tmp_path):
    """A DIAGNOSTIC_EVENT saying events were lost, timed (target clock) inside a gap, of a process of
    this GPU or of the session itself (globalPid with no process), makes that gap untraced; one of
    another process, or on the host clock, places nothing."""
    path = tmp_path / "dropped.sqlite"
    w = ExportWriter(str(path))
    for i in range(5):  # 6 ms kernels every 10 ms: W = 46 ms, gaps [6,10) [16,20) [26,30) [36,40)
        w.kernel(pid=10, device=0, stream=7, start=i * 10 * MS, end=i * 10 * MS + 6 * MS, name="gemm")
    w.diagnostic(17 * MS, CUPTI_DROPPED, severity=2, pid=10)
    w.diagnostic(27 * MS, SOME_LOST, severity=2, pid=99)
    w.diagnostic(7 * MS, INCOMPLETE_DROPPED, severity=1, pid=10, timestamp_type=2)
    w.diagnostic(37 * MS, INCOMPLETE_DROPPED, severity=1, pid=0)  # the session's own (globalPid of no process)
    w.close()
    (res,) = analyse(path).values()
    row = res.row
    assert (row["idle_ns"], row["cat_untraced_ns"], row["cat_cpu_ns"]) == (16 * MS, 8 * MS, 8 * MS)
    assert row["untraced_usd_per_month"] == usd(8 * MS, 46 * MS)
    assert row["status"] == "partial"
    # pid 99's message is not this GPU's (issue 24); the same text twice is named once, with its count
    assert without_model_warning(row["warnings"]) == (f"DIAGNOSTIC_EVENT: {CUPTI_DROPPED}; "
                               f"DIAGNOSTIC_EVENT: {INCOMPLETE_DROPPED} (reported 2 times)")
    assert [g["category"] for g in res.device_roster] == ["cpu", "untraced", "cpu", "untraced"]


# ---------------------------------------------------------------- 4. profiler overhead: `profiler`

def profiled(w: ExportWriter, overheads=(("PROFILER_OVERHEAD", "OVERHEAD_CUPTI_BUFFER_FLUSH", "CUPTI Buffer flush"),
                                         ("CUPTI_ACTIVITY_KIND_OVERHEAD", "OVERHEAD_COMMAND_BUFFER_FULL",
                                          "Command Buffer Full")), overhead_pid: int = 10) -> None:
    """Kernels [0,1] [2,3] [4,5] [26,27] [28,29] ms after T0 (pid 10, stream 7), each launched by thread 11
    before 5 ms; overhead rows on the launching thread: [5.1, 17] and [17, 25.9] ms (the first and second
    of ``overheads``: (table, kind, name)); no application call in the gap [5, 26) ms."""
    launch_at = {0: -0.2, 2: 1.8, 4: 3.8, 26: 4.6, 28: 4.7}
    for start_ms, at_ms in launch_at.items():
        corr = w.correlation()
        w.runtime(pid=10, tid=11, start=T0 + int(at_ms * MS), end=T0 + int(at_ms * MS) + 100 * US,
                  name="cudaLaunchKernel_v7000", correlation=corr)
        w.kernel(pid=10, device=0, stream=7, start=T0 + start_ms * MS, end=T0 + (start_ms + 1) * MS, name="gemm",
                 correlation=corr)
    for (table, kind, name), (a, b) in zip(overheads, ((5.1, 17), (17, 25.9))):
        w.overhead(pid=overhead_pid, tid=overhead_pid + 1, start=T0 + int(a * MS), end=T0 + int(b * MS), kind=kind,
                   name=name, table=table)


def test_profiler_overhead_gap_is_profiler_not_priced_as_the_applications(tmp_path):
    (res,) = analyse(write(tmp_path / "flush.sqlite", profiled)).values()
    row = res.row
    assert (row["window_rule"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == ("span", 29 * MS, 5 * MS, 24 * MS)
    # the gap [5, 26) ms: the overhead rows cover [5.1, 25.9) = 20.8 of its 21 ms -> profiler
    assert (row["device_gap_count"], row["device_gap_ns"]) == (1, 21 * MS)
    assert (row["cat_profiler_ns"], row["cat_profiler_pct"]) == (21 * MS, pct(21 * MS, 29 * MS))
    assert (row["cat_cpu_ns"], row["cat_untraced_ns"]) == (0, 0)
    assert (row["profiler_usd_per_month"], row["untraced_usd_per_month"]) == (usd(21 * MS, 29 * MS), 0.0)
    # the application's idle: three 1 ms slivers, all of the 24 - 21 ms left: launch-bound
    assert (row["device_sliver_ns"], row["launch_bound"], row["cat_launch_ns"]) == (3 * MS, True, 3 * MS)
    assert (row["main_category"], row["actionable"]) == ("launch", "launch")
    assert row["status"] == "ok"  # the trace is complete; the overhead is a caveat, not a loss
    assert without_model_warning(row["warnings"]) == (
        "profiler overhead covers 1 device gap, 21.000 ms of idle in the window (OVERHEAD_COMMAND_BUFFER_FULL, "
        "OVERHEAD_CUPTI_BUFFER_FLUSH): Nsight Systems' own work, not the application's idle")
    assert res.device_roster[0]["category"] == "profiler" and res.roster[0]["category"] == "profiler"


FLUSH = ("PROFILER_OVERHEAD", "OVERHEAD_CUPTI_BUFFER_FLUSH", "CUPTI Buffer flush")
FULL = ("CUPTI_ACTIVITY_KIND_OVERHEAD", "OVERHEAD_COMMAND_BUFFER_FULL", "Command Buffer Full")


@pytest.mark.parametrize("variant,category", [
    ("both in PROFILER_OVERHEAD", "profiler"),
    ("both in CUPTI_ACTIVITY_KIND_OVERHEAD", "profiler"),
    ("no ENUM_CUPTI_OVERHEAD_TYPE table", "profiler"),
    ("CUDA's own overhead (module loading)", "cpu"),
    ("overhead of a process that does not drive this GPU", "cpu"),
    ("copy engines busy in the gap", "data"),
])
def test_profiler_overhead_variants(tmp_path, variant, category):
    path = tmp_path / "variant.sqlite"
    w = ExportWriter(str(path))
    if variant == "both in PROFILER_OVERHEAD":
        profiled(w, overheads=(FLUSH, ("PROFILER_OVERHEAD", "OVERHEAD_COMMAND_BUFFER_FULL", "Command Buffer Full")))
    elif variant == "both in CUPTI_ACTIVITY_KIND_OVERHEAD":
        profiled(w, overheads=(("CUPTI_ACTIVITY_KIND_OVERHEAD",) + FLUSH[1:], FULL))
    elif variant == "CUDA's own overhead (module loading)":
        loading = ("CUPTI_ACTIVITY_KIND_OVERHEAD", "OVERHEAD_RUNTIME_TRIGGERED_MODULE_LOADING",
                   "Runtime Triggered Module Loading")
        profiled(w, overheads=(loading, loading))
    elif variant == "overhead of a process that does not drive this GPU":
        profiled(w, overhead_pid=20)
        w.kernel(pid=20, device=0, stream=7, start=T0, end=T0 + MS, name="other")  # pid 20 drives its own GPU
    else:
        profiled(w)
        if variant == "copy engines busy in the gap":  # the copy engines work through the whole gap
            w.memcpy(pid=10, device=0, stream=9, start=T0 + 5 * MS, end=T0 + 26 * MS)
    w.close()
    if variant == "no ENUM_CUPTI_OVERHEAD_TYPE table":  # ids as Nsight Systems 2024-2026 number them
        con = sqlite3.connect(path)
        con.execute("DROP TABLE ENUM_CUPTI_OVERHEAD_TYPE")
        con.commit()
        con.close()
    row = analyse(path)["pid10/dev0"].row
    assert (row["device_gap_ns"], row[f"cat_{category}_ns"]) == (21 * MS, 21 * MS)
    assert row["status"] == "ok"
    assert row["warnings"].startswith("profiler overhead covers 1 device gap") == (category == "profiler")


# ---------------------------------------------------------------- 5. impossible rows

def duplicate_tables(path, tables) -> None:
    """Write every row of ``tables`` a second time (an exporter or a merge that wrote it twice)."""
    con = sqlite3.connect(path)
    for table in tables:
        con.execute(f"INSERT INTO {table} SELECT * FROM {table}")
    con.commit()
    con.close()


def test_exact_duplicate_rows_count_once(tmp_path):
    """Kernels [0,1] [5,6] [10,11] ms after T0, each launched 0.2..0.1 ms before it; a cudaStreamSynchronize
    [1.5, 4.5] ms in the first gap. Every kernel and runtime row is written twice."""
    path = tmp_path / "twice.sqlite"
    w = ExportWriter(str(path))
    for start in (0, 5, 10):
        corr = w.correlation()
        w.runtime(pid=10, tid=11, start=T0 + start * MS - 200 * US, end=T0 + start * MS - 100 * US,
                  name="cudaLaunchKernel_v7000", correlation=corr)
        w.kernel(pid=10, device=0, stream=7, start=T0 + start * MS, end=T0 + (start + 1) * MS, name="gemm",
                 correlation=corr)
    w.runtime(pid=10, tid=11, start=T0 + 1500 * US, end=T0 + 4500 * US, name="cudaStreamSynchronize_v3020")
    w.close()
    duplicate_tables(path, ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"))
    (res,) = analyse(path).values()
    row = res.row
    assert (row["kernel_count"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == (3, 11 * MS, 3 * MS, 8 * MS)
    # gap [1,5): the sync covers 3 of 4 ms -> sync; gap [6,10): only a launch call -> cpu
    assert (row["cat_sync_ns"], row["cat_cpu_ns"]) == (4 * MS, 4 * MS)
    assert row["status"] == "partial"
    assert without_model_warning(row["warnings"]) == (
        "dropped 7 exact duplicate rows (each counted once): 3 of CUPTI_ACTIVITY_KIND_KERNEL, "
        "4 of CUPTI_ACTIVITY_KIND_RUNTIME")
    first = res.roster[0]
    assert (first["start_ns"], first["length_ns"]) == (T0 + MS, 4 * MS)
    # each call counted once by its overlap with the gap: 3 ms of sync, 0.1 ms of the launch at [4.8, 4.9)
    assert first["attribution"] == [{"api": "cudaStreamSynchronize", "overlap_ns": 3 * MS},
                                    {"api": "cudaLaunchKernel", "overlap_ns": 100 * US}]


def test_duplicate_mask_marks_every_later_copy_only_among_rows_whose_first_value_repeats():
    """Rows (start, end, stream); copies share their start, in order or not; the first of them is kept."""
    import numpy as np

    from pipeline.load.integrity import duplicate_mask

    starts = np.array([5, 5, 5, 7, 9], np.int64)      # in start order: rows 0..2 share start 5
    ends = np.array([6, 8, 6, 8, 10], np.int64)       # row 2 is row 0 again; row 1 differs in end
    streams = np.array([1, 1, 1, 1, 1], np.int32)
    assert duplicate_mask([starts, ends, streams]).tolist() == [False, False, True, False, False]
    assert not duplicate_mask([starts, ends, streams + np.arange(5, dtype=np.int32)]).any()
    # out of start order: row 4 copies row 0, rows 2 and 5 copy row 1 (three copies: two dropped)
    starts = np.array([9, 3, 3, 1, 9, 3], np.int64)
    ends = np.array([10, 4, 4, 2, 10, 4], np.int64)
    assert duplicate_mask([starts, ends]).tolist() == [False, False, True, False, True, True]
    # the same as a plain computation on many repeated small values (hashes of the key columns only)
    rng = np.random.default_rng(3)
    cols = [rng.integers(0, 4, 2000), rng.integers(0, 3, 2000), rng.integers(0, 5, 2000).astype(np.int32)]
    plain = pd.DataFrame({i: c for i, c in enumerate(cols)}).duplicated(keep="first").to_numpy()
    assert 0 < plain.sum() < 2000 and (duplicate_mask(cols, key=1) == plain).all()
    assert (duplicate_mask(cols) == plain).all()


def test_frame_duplicates_reads_other_columns_only_for_rows_whose_start_repeats(monkeypatch):
    """A frame's duplicates (every column compared: text, categories and bools as values) are those of a
    plain ``DataFrame.duplicated``; only the start column is read whole: the other columns, and the codes
    of text, are taken for the rows whose start repeats (here rows 0, 1, 2, 3, 5 of 6)."""
    import numpy as np

    from pipeline.load import integrity

    frame = pd.DataFrame({
        "name": pd.Categorical(["a", "b", "a", "a", "c", "b"]),
        "start": np.array([5, 1, 5, 5, 9, 1], np.int64),
        "end": np.array([6, 2, 6, 6, 10, 3], np.int64),
        "graph": np.array([False, False, False, True, False, False]),
        "kind": pd.array(["x", "y", "x", "x", "y", "y"], dtype="str"),
        "stream_id": np.array([7, 7, 7, 7, 7, 7], np.int32),
    })
    plain = frame.duplicated(keep="first").to_numpy()
    assert plain.tolist() == [False, False, True, False, False, False]  # row 3 differs in graph, row 5 in end
    taken = []
    real_codes = integrity._codes

    def watch(col, rows=None):
        taken.append((col.name, None if rows is None else rows.tolist()))
        return real_codes(col, rows)

    monkeypatch.setattr(integrity, "_codes", watch)
    assert integrity.frame_duplicates(frame).tolist() == plain.tolist()
    assert taken[0] == ("start", None) and all(rows == [0, 1, 2, 3, 5] for _, rows in taken[1:])
    assert sorted(name for name, _ in taken[1:]) == sorted(frame.columns)
    # no start repeats: nothing but the start is read
    taken.clear()
    assert not integrity.frame_duplicates(frame.iloc[[0, 1, 4]].reset_index(drop=True)).any()
    assert taken == [("start", None)]


def test_rows_whose_start_repeats_are_found_in_order_or_not_a_few_values_at_a_time(monkeypatch):
    """The candidates of ``frame_duplicates`` (rows whose first value some other row shares) are those of a
    plain count, found in the pass that checks the order (here 3 values at a time, repeats across the pieces'
    edges), and by a sort when the values turn out of order in a later piece; none when nothing repeats."""
    import numpy as np

    from pipeline.load import integrity

    monkeypatch.setattr(integrity, "SCAN_ROWS", 3)
    rng = np.random.default_rng(2)
    ordered = np.sort(rng.integers(0, 60, 40))
    shuffled = ordered.copy()
    shuffled[30], shuffled[31] = shuffled[31] + 1, shuffled[30]  # in order up to row 30 only
    for first in (ordered, shuffled, np.array([4, 4]), np.array([1, 2, 3, 3, 3, 9, 9])):
        counts = {v: first.tolist().count(v) for v in first.tolist()}
        plain = [i for i, v in enumerate(first.tolist()) if counts[v] > 1]
        assert integrity._candidate_rows(first).tolist() == plain and plain
    assert integrity._candidate_rows(np.arange(10)) is None
    assert integrity._candidate_rows(np.arange(10)[::-1].copy()) is None


def test_duplicates_in_every_table_and_graph_kernels_are_not_duplicates(tmp_path):
    path = tmp_path / "twice_all.sqlite"
    w = ExportWriter(str(path))
    for i in range(5):
        w.kernel(pid=10, device=0, stream=7, start=i * 10 * MS, end=i * 10 * MS + 6 * MS, name="gemm")
    # one graph launch: two kernels with one correlationId, at different times (not copies of each other)
    w.kernel(pid=10, device=0, stream=8, start=50 * MS, end=52 * MS, name="node", correlation=77)
    w.kernel(pid=10, device=0, stream=8, start=52 * MS, end=54 * MS, name="node", correlation=77)
    w.memcpy(pid=10, device=0, stream=9, start=6 * MS, end=8 * MS)
    w.memset(pid=10, device=0, stream=9, start=16 * MS, end=17 * MS)
    w.nvtx(pid=10, tid=11, start=0, end=54 * MS, text="setup")
    w.close()
    duplicate_tables(path, ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
                            "NVTX_EVENTS"))
    rep = load_report(str(path))
    assert (len(rep.kernels), len(rep.copies), len(rep.nvtx)) == (7, 2, 1)
    row = analyse(path)["pid10/dev0"].row
    # W = [0, 54) ms: kernels 5 x 6 ms + [50, 54) = 34 ms busy; copy-only [6,8) and [16,17)
    assert (row["kernel_count"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"]) == (7, 34 * MS, 20 * MS, 3 * MS)
    assert without_model_warning(row["warnings"]) == (
        "dropped 10 exact duplicate rows (each counted once): 7 of CUPTI_ACTIVITY_KIND_KERNEL, "
        "1 of CUPTI_ACTIVITY_KIND_MEMCPY, 1 of CUPTI_ACTIVITY_KIND_MEMSET, 1 of NVTX_EVENTS")
    assert row["status"] == "partial"


B = 5 * S + 10 * MS  # kernels start 10 ms into a capture that starts at 5 s on the report's clock


def steady(w: ExportWriter, pid: int, base: int = B) -> None:
    """5 kernels of 6 ms every 10 ms on stream 7 of device 0: W = 46 ms, 30 ms busy, 16 ms idle."""
    for i in range(5):
        w.kernel(pid=pid, device=0, stream=7, start=base + i * 10 * MS, end=base + i * 10 * MS + 6 * MS, name="gemm")


def far_outside(capture: str, start: str, end: str) -> str:
    return f"timed far outside the capture ({capture}; e.g. start {start} s, end {end} s)"


def test_kernel_ending_at_int64_max_is_dropped_and_the_gpu_computed_from_the_rest(tmp_path):
    """Two GPUs of one job, the same 5 kernels each; GPU pid 10 has one more kernel ending at INT64_MAX
    and one ending before it starts. Capture: 5 s .. 6 s (ANALYSIS_DETAILS). The warnings about
    pid 10's rows go to its GPU only."""
    path = tmp_path / "int64max.sqlite"
    w = ExportWriter(str(path))
    w.session(5 * S, duration_ns=1 * S)
    steady(w, pid=10)
    steady(w, pid=20)
    w.kernel(pid=10, device=0, stream=7, start=B + 41 * MS, end=INT64_MAX, name="broken")
    w.kernel(pid=10, device=0, stream=7, start=B + 45 * MS, end=B + 44 * MS, name="reversed")
    w.close()
    results = analyse(path)
    fleet = build_fleet([r.row for r in results.values()]).set_index("gpu_key")
    bad, good = fleet.loc["pid10/dev0"], fleet.loc["pid20/dev0"]
    for row in (bad, good):  # the same figures: 46 ms window, 30 busy, 16 idle (34.7826 %)
        assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["kernel_count"]) == (46 * MS, 30 * MS, 16 * MS, 5)
        assert row["idle_pct"] == pct(16 * MS, 46 * MS)
        assert row["idle_usd_per_month"] == usd(16 * MS, 46 * MS)
    assert fleet["straggler"].tolist() == [False, False]
    assert (bad["status"], good["status"], without_model_warning(good["warnings"])) == ("partial", "ok", "")
    assert without_model_warning(bad["warnings"]) == (
        "dropped 1 kernel rows with end < start or no timestamps (start = end = 0 or NULL); 11 of 12 kept; "
        "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(
            "5.000000..6.000000 s on the report's clock, per ANALYSIS_DETAILS", "5.051000", "9223372036.854776"))


def test_kernel_before_the_session_start_is_dropped(tmp_path):
    """TARGET_INFO_SESSION_START_TIME only (no ANALYSIS_DETAILS): the capture starts at 5 s; a kernel at
    0..1 ms cannot be in it. Its end comes from the other rows (the last kernel ends at 5.056 s)."""
    path = tmp_path / "stale.sqlite"
    w = ExportWriter(str(path))
    w.session(5 * S)
    steady(w, pid=10)
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="stale")
    w.close()
    row = analyse(path)["pid10/dev0"].row
    assert (row["window_start_ns"], row["window_ns"], row["idle_ns"], row["kernel_count"]) == (B, 46 * MS, 16 * MS, 5)
    assert row["status"] == "partial"
    assert without_model_warning(row["warnings"]) == "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(
        "5.000000..5.056000 s on the report's clock, per TARGET_INFO_SESSION_START_TIME and the rows' own run, "
        "up to a pause longer than the work on both sides of it, for the end",
        "0.000000", "0.001000")


def test_relative_clock_capture(tmp_path):
    """ANALYSIS_DETAILS on a clock whose rows count from the capture's start (as some exports do):
    the capture is 0..1 s, so a kernel at 2.5 s is far outside it."""
    path = tmp_path / "relative.sqlite"
    w = ExportWriter(str(path))
    w.session(515_396_806_359_142, duration_ns=1 * S)
    steady(w, pid=10, base=10 * MS)
    w.kernel(pid=10, device=0, stream=7, start=2500 * MS, end=2501 * MS, name="late")
    w.close()
    row = analyse(path)["pid10/dev0"].row
    assert (row["window_start_ns"], row["window_ns"], row["idle_ns"]) == (10 * MS, 46 * MS, 16 * MS)
    assert without_model_warning(row["warnings"]) == "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(
        "0.000000..1.000000 s on the report's clock, per ANALYSIS_DETAILS", "2.500000", "2.501000")


def test_impossible_rows_of_every_table_are_dropped(tmp_path):
    """No capture metadata: the capture is what the other rows agree on (5.010 .. 5.056 s). Runtime, copy
    and NVTX rows with end < start or an end at INT64_MAX would skew attribution (a sync call over every
    gap, copy-only idle everywhere, an NVTX range around every gap, profiler overhead over every gap):
    each is dropped and counted."""
    path = tmp_path / "impossible.sqlite"
    w = ExportWriter(str(path))
    steady(w, pid=10)
    w.kernel(pid=10, device=0, stream=7, start=B + 41 * MS, end=INT64_MAX, name="broken")
    w.runtime(pid=10, tid=11, start=B + MS, end=INT64_MAX, name="cudaStreamSynchronize_v3020")
    w.runtime(pid=10, tid=11, start=B + 17 * MS, end=B + 16 * MS, name="cudaMemcpyAsync_v3020")
    w.memcpy(pid=10, device=0, stream=9, start=B + 20 * MS, end=INT64_MAX)
    w.memset(pid=10, device=0, stream=9, start=B + 27 * MS, end=B + 26 * MS)
    w.nvtx(pid=10, tid=11, start=B, end=INT64_MAX, text="setup")
    w.overhead(pid=10, tid=11, start=B + 7 * MS, end=INT64_MAX)  # a CUPTI buffer flush over every gap
    w.close()
    res = analyse(path)["pid10/dev0"]
    row = res.row
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"]) == (46 * MS, 30 * MS, 16 * MS, 0)
    # four 4 ms gaps, nothing on the CUDA API side (nor profiler overhead) left in them
    assert (row["cat_cpu_ns"], row["cat_sync_ns"], row["cat_data_ns"], row["cat_profiler_ns"]) == (16 * MS, 0, 0, 0)
    assert row["status"] == "partial"
    capture = ("5.010000..5.056000 s on the report's clock, per the rows' own run, up to a pause longer than "
               "the work on both sides of it (the export states no capture)")
    assert without_model_warning(row["warnings"]) == "; ".join([
        "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(capture, "5.051000", "9223372036.854776"),
        "dropped 2 rows of CUPTI_ACTIVITY_KIND_RUNTIME: 1 with end < start, 1 "
        + far_outside(capture, "5.011000", "9223372036.854776"),
        "dropped 1 row of CUPTI_ACTIVITY_KIND_MEMCPY " + far_outside(capture, "5.030000", "9223372036.854776"),
        "dropped 1 row of CUPTI_ACTIVITY_KIND_MEMSET with end < start",
        "dropped 1 row of NVTX_EVENTS " + far_outside(capture, "5.010000", "9223372036.854776"),
        "dropped 1 row of PROFILER_OVERHEAD " + far_outside(capture, "5.017000", "9223372036.854776"),
    ])
    assert {g["nvtx_range"] for g in res.device_roster} == {""}
    assert all(g["attribution"] == [] for g in res.device_roster)


# ---------------------------------------------------------------- the fleet table, end to end

def test_fleet_table_shows_the_causes_apart(tmp_path):
    """Through the CLI: the new columns are in fleet.csv (and its docs/outputs.md table), the rollups show the
    caveats' time and cost apart, and the application's columns do not hold them."""
    folder = tmp_path / "in"
    folder.mkdir()
    write(folder / "lost.sqlite", launches)
    write(folder / "flush.sqlite", profiled)
    out = tmp_path / "out"
    run_cli("run", str(folder), "--out", str(out), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("job")
    new = ["cat_profiler_ns", "cat_untraced_ns", "cat_profiler_pct", "cat_untraced_pct", "profiler_usd_per_month",
           "untraced_usd_per_month"]
    assert [c for c in FLEET_COLUMNS if c in new] == new and set(new) <= set(fleet.columns)
    readme = (REPO / "docs" / "outputs.md").read_text()
    assert all(f"`{c}`" in readme for c in new if not c.endswith("_pct"))
    lost, flush = fleet.loc["lost"], fleet.loc["flush"]
    assert (int(lost["cat_untraced_ns"]), lost["status"], int(lost["cat_cpu_ns"])) == (40_100_000, "partial", 0)
    assert (int(flush["cat_profiler_ns"]), flush["status"], int(flush["cat_cpu_ns"])) == (21 * MS, "ok", 0)
    assert float(lost["untraced_usd_per_month"]) == usd(40_100_000, 99_900_000)
    assert float(flush["profiler_usd_per_month"]) == usd(21 * MS, 29 * MS)
    # the medical records show them apart too, with their cost inside the idle cost
    lost_page = (out / "records" / "lost.md").read_text().splitlines()
    assert lost_page[3].endswith(" · not the application's: untraced 40.14 %")  # 40.1 of 99.9 ms
    assert lost_page[-3] == (f"Idle cost: ${usd(45_900_000, 99_900_000):,.2f} per month for these GPUs (of which "
                             f"${usd(40_100_000, 99_900_000):,.2f} untraced: not the application's). All on toy or low-confidence captures: "
                             "not to be trusted. Basis: 45.900 ms idle of "
                             "99.900 ms of windows over 1 GPU(s), each GPU's idle share × its rate × hours per month; "
                             "rate: $4.00/GPU-hour (H100, assumed, 1 GPU(s)).")
    flush_page = (out / "records" / "flush.md").read_text().splitlines()
    assert flush_page[3].endswith(" · not the application's: profiler 72.41 %")  # 21 of 29 ms
    jobs = pd.read_csv(out / "jobs.csv").set_index("job")
    assert (int(jobs.loc["lost", "untraced_ns"]), int(jobs.loc["lost", "profiler_ns"])) == (40_100_000, 0)
    assert float(jobs.loc["flush", "profiler_usd_per_month"]) == usd(21 * MS, 29 * MS)
