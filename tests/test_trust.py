"""Issue 12 "Never silently wrong": impossible rows (exact duplicates, end < start, times far outside
the capture).

Every input is a small export in the real schema (ExportWriter); every expected number is worked
out by hand in the comments, not by the code under test.
"""
from __future__ import annotations

import sqlite3


from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import Config
from pipeline.engine.reduce import build_fleet
from pipeline.load.report import gpu_trace, load_report
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


T0 = 10 * MS


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
    assert row["warnings"] == ("dropped 7 exact duplicate rows (each counted once): 3 of CUPTI_ACTIVITY_KIND_KERNEL, "
                               "4 of CUPTI_ACTIVITY_KIND_RUNTIME")
    first = res.roster[0]
    assert (first["start_ns"], first["length_ns"]) == (T0 + MS, 4 * MS)
    # each call counted once by its overlap with the gap: 3 ms of sync, 0.1 ms of the launch at [4.8, 4.9)
    assert first["attribution"] == [{"api": "cudaStreamSynchronize", "overlap_ns": 3 * MS},
                                    {"api": "cudaLaunchKernel", "overlap_ns": 100 * US}]


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
    assert row["warnings"] == ("dropped 10 exact duplicate rows (each counted once): 7 of CUPTI_ACTIVITY_KIND_KERNEL, "
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
    assert (bad["status"], good["status"], good["warnings"]) == ("partial", "ok", "")
    assert bad["warnings"] == (
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
    assert row["warnings"] == "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(
        "5.000000..5.056000 s on the report's clock, per TARGET_INFO_SESSION_START_TIME and the other rows",
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
    assert row["warnings"] == "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(
        "0.000000..1.000000 s on the report's clock, per ANALYSIS_DETAILS", "2.500000", "2.501000")


def test_impossible_rows_of_every_table_are_dropped(tmp_path):
    """No capture metadata: the capture is what the other rows agree on (5.010 .. 5.056 s). Runtime, copy
    and NVTX rows with end < start or an end at INT64_MAX would skew attribution (a sync call over every
    gap, copy-only idle everywhere, an NVTX range around every gap): each is dropped and counted."""
    path = tmp_path / "impossible.sqlite"
    w = ExportWriter(str(path))
    steady(w, pid=10)
    w.kernel(pid=10, device=0, stream=7, start=B + 41 * MS, end=INT64_MAX, name="broken")
    w.runtime(pid=10, tid=11, start=B + MS, end=INT64_MAX, name="cudaStreamSynchronize_v3020")
    w.runtime(pid=10, tid=11, start=B + 17 * MS, end=B + 16 * MS, name="cudaMemcpyAsync_v3020")
    w.memcpy(pid=10, device=0, stream=9, start=B + 20 * MS, end=INT64_MAX)
    w.memset(pid=10, device=0, stream=9, start=B + 27 * MS, end=B + 26 * MS)
    w.nvtx(pid=10, tid=11, start=B, end=INT64_MAX, text="setup")
    w.close()
    res = analyse(path)["pid10/dev0"]
    row = res.row
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"]) == (46 * MS, 30 * MS, 16 * MS, 0)
    # four 4 ms gaps, nothing on the CUDA API side left in them
    assert (row["cat_cpu_ns"], row["cat_sync_ns"], row["cat_data_ns"]) == (16 * MS, 0, 0)
    assert row["status"] == "partial"
    capture = "5.010000..5.056000 s on the report's clock, per the other rows"
    assert row["warnings"] == "; ".join([
        "dropped 1 row of CUPTI_ACTIVITY_KIND_KERNEL " + far_outside(capture, "5.051000", "9223372036.854776"),
        "dropped 2 rows of CUPTI_ACTIVITY_KIND_RUNTIME: 1 with end < start, 1 "
        + far_outside(capture, "5.011000", "9223372036.854776"),
        "dropped 1 row of CUPTI_ACTIVITY_KIND_MEMCPY " + far_outside(capture, "5.030000", "9223372036.854776"),
        "dropped 1 row of CUPTI_ACTIVITY_KIND_MEMSET with end < start",
        "dropped 1 row of NVTX_EVENTS " + far_outside(capture, "5.010000", "9223372036.854776"),
    ])
    assert {g["nvtx_range"] for g in res.device_roster} == {""}
    assert all(g["attribution"] == [] for g in res.device_roster)
