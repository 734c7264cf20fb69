"""CUDA graphs traced as a whole (``--cuda-graph-trace=graph``: CUPTI_ACTIVITY_KIND_GRAPH_TRACE rows) and node by
node (``node``: kernels with ``graphNodeId``), on small synthetic exports with every figure worked out by hand
(docs/definitions.md#cuda-graphs)."""
from __future__ import annotations

import sqlite3

import numpy as np
import pytest

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.caveats import graph_executions
from pipeline.config import AnalysisConfig, Config
from pipeline.load.cache import load_cached
from pipeline.load.graphs import graph_trace_mode
from pipeline.load.report import ProfileError, gpu_trace, load_report
from pipeline.load.tables import Schema
from pipeline.model import PARTIAL_CODES, WarningCode
from pipeline.synth import SCHEMA, ExportWriter

MS = 1_000_000
#: The window is pinned to the span rule so the figures do not depend on iteration detection.
SPAN = Config(analysis=AnalysisConfig(window="span"))
GRAPH_LAUNCH = "cudaGraphLaunch_v10000"
GRAPHS = WarningCode.GRAPHS_TRACED_WHOLE.value


def launch_graph(w: ExportWriter, stream: int, start: int, end: int, graph_exec: int, pid: int = 10,
                 call_at: int | None = None) -> int:
    """A cudaGraphLaunch call (1 µs, ending 1 ms before the execution unless ``call_at`` says when it starts) and
    the execution it launched, traced as a whole; returns their correlationId."""
    corr = w.correlation()
    at = start - MS if call_at is None else call_at
    w.runtime(pid=pid, tid=pid + 1, start=at, end=at + 1000, name=GRAPH_LAUNCH, correlation=corr)
    w.graph_exec(pid=pid, device=0, stream=stream, start=start, end=end, graph_exec=graph_exec, correlation=corr)
    return corr


def analysed(path, cfg=SPAN):
    rep = load_report(str(path))
    (key,) = rep.gpu_keys()
    return rep, analyse_gpu(gpu_trace(rep, key), cfg, {})


def codes(row) -> list[str]:
    return row["warning_codes"].split(",") if row["warning_codes"] else []


def graphs_warning(row) -> str:
    (text,) = [t for t in row["warnings"].split("; ") if "CUDA graph execution" in t]
    return text


# ------------------------------------------------------------------ a graph execution covers a gap

def covering(w: ExportWriter):
    """Stream 7: kernels [0, 10) and [30, 40) ms; stream 8: graph exec 12 over [12, 28) ms, launched at 11 ms.
    Device busy: [0, 10) + [12, 28) + [30, 40) = 36 ms of the 40 ms span; idle 4 ms: [10, 12) and [28, 30).
    Stream 7 still waits 20 ms, [10, 30); stream 8 has one item, no gap."""
    w.capture("CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph")
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="gemm_a")
    launch_graph(w, stream=8, start=12 * MS, end=28 * MS, graph_exec=12)
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=40 * MS, name="gemm_b")


def test_graph_execution_is_busy_in_the_device_union(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    covering(w)
    rep, res = analysed(w.close())
    row = res.row
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"]) == (40 * MS, 36 * MS, 4 * MS)
    # the device-level gaps: the two 2 ms holes either side of the execution (each > the 1 ms threshold)
    assert [(g["start_ns"], g["length_ns"]) for g in res.device_roster] == [(10 * MS, 2 * MS), (28 * MS, 2 * MS)]
    assert {(g["kernel_before"], g["kernel_after"]) for g in res.device_roster} == {
        ("gemm_a", "graph exec 12"), ("graph exec 12", "gemm_b")}
    # per stream: stream 7's own 20 ms wait; the execution is one item of stream 8
    assert [(g["stream_id"], g["start_ns"], g["length_ns"]) for g in res.roster] == [(7, 10 * MS, 20 * MS)]
    assert row["kernel_count"] == 3 and row["stream_count"] == 2
    # the launch that has its record is matched: nothing is lost, the row is ok but says what it cannot see
    assert rep.untraced.empty
    assert row["status"] == "ok" and GRAPHS in codes(row)
    assert WarningCode.GRAPHS_TRACED_WHOLE not in PARTIAL_CODES
    text = graphs_warning(row)
    assert text.startswith("1 CUDA graph execution traced as a whole (--cuda-graph-trace=graph per the capture's "
                           "metadata) covers 16.000 ms of the window")
    assert "device idle is a lower bound" in text and "--cuda-graph-trace=node" in text


def test_launch_call_in_the_gap_before_the_execution_is_attributed(tmp_path):
    """The device gap [10, 12) ms holds the execution's own cudaGraphLaunch (11 ms, 1 µs): attribution sees it."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    covering(w)
    _, res = analysed(w.close())
    first = res.device_roster[0]
    assert first["attribution"] == [{"api": "cudaGraphLaunch", "overlap_ns": 1000}]
    assert res.device_roster[1]["attribution"] == []


# ------------------------------------------------------------------ same stream, other streams, overlap

def mixed(w: ExportWriter):
    """Stream 7: kernel a [0, 10), graph exec 5 [15, 25), kernel b [27, 40) ms. Stream 8: graph exec 6
    [5, 12) ms, overlapping a. Device union: [0, 12) + [15, 25) + [27, 40) = 35 ms of 40; idle 5 ms:
    [12, 15) 3 ms and [25, 27) 2 ms. Stream 7's gaps: [10, 15) 5 ms (a -> graph exec 5) and [25, 27) 2 ms
    (graph exec 5 -> b); stream 8: none."""
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="a")
    launch_graph(w, stream=7, start=15 * MS, end=25 * MS, graph_exec=5)
    w.kernel(pid=10, device=0, stream=7, start=27 * MS, end=40 * MS, name="b")
    launch_graph(w, stream=8, start=5 * MS, end=12 * MS, graph_exec=6, call_at=4 * MS)


def test_graphs_and_kernels_on_the_same_and_on_other_streams(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    mixed(w)
    _, res = analysed(w.close())
    row = res.row
    assert (row["busy_ns"], row["idle_ns"]) == (35 * MS, 5 * MS)
    assert sorted((g["stream_id"], g["start_ns"], g["length_ns"], g["kernel_before"], g["kernel_after"])
                  for g in res.roster) == [(7, 10 * MS, 5 * MS, "a", "graph exec 5"),
                                           (7, 25 * MS, 2 * MS, "graph exec 5", "b")]
    assert sorted((g["start_ns"], g["length_ns"]) for g in res.device_roster) == [(12 * MS, 3 * MS),
                                                                                  (25 * MS, 2 * MS)]
    assert (row["gap_count"], row["gap_total_ns"], row["device_gap_ns"]) == (2, 7 * MS, 5 * MS)
    # two executions, 10 + 7 ms, disjoint: they cover 17 ms; the export states no mode
    assert graphs_warning(row).startswith("2 CUDA graph executions traced as a whole (the export does not state "
                                          "its --cuda-graph-trace mode) cover 17.000 ms of the window")
    assert row["comm_ns"] == 0  # an execution has no kernel name: never a collective


def test_graph_executions_counted_in_the_window_only():
    """Executions [0, 10) and [5, 20) (overlapping) and [30, 40); W = [8, 32): three overlap it; their union inside
    W is [8, 20) + [30, 32) = 14 ms. A plain second computation: the covered ns per 1 ns step."""
    cols = {"start": np.array([0, 5, 30, 0]), "end": np.array([10, 20, 40, 50]),
            "graph": np.array([True, True, True, False])}
    assert graph_executions(cols, 8, 32) == (3, 14)
    covered = sum(1 for t in range(8, 32) if any(s <= t < e for s, e, g in zip(cols["start"], cols["end"],
                                                                                cols["graph"]) if g))
    assert covered == 14
    assert graph_executions({"start": cols["start"], "end": cols["end"]}, 0, 50) == (0, 0)  # no graph column


# ------------------------------------------------------------------ a graph-only report

def graph_only(w: ExportWriter):
    """Graph exec 3 three times on stream 7: [0, 10), [12, 20), [30, 40) ms. Busy 28 ms of 40; idle 12 ms;
    stream gaps [10, 12) 2 ms and [20, 30) 10 ms."""
    w.capture("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph")
    for a, b in ((0, 10), (12, 20), (30, 40)):
        launch_graph(w, stream=7, start=a * MS, end=b * MS, graph_exec=3, call_at=a * MS - MS // 2)


def check_graph_only(res):
    row = res.row
    assert (row["busy_ns"], row["idle_ns"], row["kernel_count"]) == (28 * MS, 12 * MS, 3)
    assert sorted((g["start_ns"], g["length_ns"]) for g in res.roster) == [(10 * MS, 2 * MS), (20 * MS, 10 * MS)]
    assert {g["kernel_before"] for g in res.roster} == {"graph exec 3"}
    assert graphs_warning(row).startswith("3 CUDA graph executions traced as a whole (--cuda-graph-trace=graph per "
                                          "the capture's metadata) cover 28.000 ms")
    assert row["status"] == "ok"


def test_graph_only_report_without_a_kernel_table(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    graph_only(w)
    path = w.close()
    with sqlite3.connect(path) as con:
        assert not con.execute("SELECT 1 FROM sqlite_master WHERE name = 'CUPTI_ACTIVITY_KIND_KERNEL'").fetchone()
    rep, res = analysed(path)
    assert rep.untraced.empty  # three cudaGraphLaunch calls, each with its record
    check_graph_only(res)


def test_graph_only_report_with_an_empty_kernel_table(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    graph_only(w)
    path = w.close()
    with sqlite3.connect(path) as con:
        con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({SCHEMA['CUPTI_ACTIVITY_KIND_KERNEL']})")
    _, res = analysed(path)
    check_graph_only(res)


def test_untimed_graph_rows_are_dropped_and_counted(tmp_path):
    """CUPTI writes start = end = 0 for an execution it could not time: dropped, the row partial; when nothing
    else is left the report is an error, not an empty analysis."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    graph_only(w)
    w.graph_exec(pid=10, device=0, stream=7, start=0, end=0, graph_exec=3)
    rep, res = analysed(w.close())
    assert [x.code for x in rep.warnings] == [WarningCode.DROPPED_KERNEL_ROWS]
    assert "dropped 1 CUDA graph execution rows (CUPTI_ACTIVITY_KIND_GRAPH_TRACE)" in rep.warnings[0].text
    assert res.row["status"] == "partial" and res.row["kernel_count"] == 3

    w = ExportWriter(str(tmp_path / "bad.sqlite"))
    w.graph_exec(pid=10, device=0, stream=7, start=0, end=0, graph_exec=3)
    with pytest.raises(ProfileError, match="no usable GPU work"):
        load_report(w.close())


# ------------------------------------------------------------------ the mode

@pytest.mark.parametrize("rows, mode", [
    ([("CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph")], "graph"),
    ([("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Node")], "node"),
    ([("PROCESS_0:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Node"), ("PROCESS_1:CUDA_GRAPH_TRACE_OPTIONS:MODE", "Graph")],
     "graph, node"),
    ([("CUDA_GRAPH_TRACE_OPTIONS:TRACE_DEVICE_GRAPH_LAUNCH", "true")], ""),
    ([], ""),
])
def test_mode_as_the_capture_states_it(tmp_path, rows, mode):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="k")
    for name, value in rows:
        w.capture(name, value)
    path = w.close()
    with sqlite3.connect(path) as con:
        assert graph_trace_mode(Schema(con)) == mode
    rep = load_report(path)
    assert rep.meta.get("cuda_graph_trace", "") == mode
    assert gpu_trace(rep, rep.gpu_keys()[0]).graph_trace_mode == mode


def test_real_export_states_graph_mode_and_has_no_execution(profiles):
    """The real captures say ``CUDA_GRAPH_TRACE_OPTIONS:MODE`` = ``Graph`` and launched no graph: no warning."""
    rep = load_report(str(profiles / "tiny_2kernels.sqlite"))
    assert rep.meta["cuda_graph_trace"] == "graph"
    assert not rep.kernels["graph"].any()
    res = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), SPAN, {})
    assert GRAPHS not in codes(res.row)


# ------------------------------------------------------------------ lost launches

@pytest.mark.parametrize("api", [GRAPH_LAUNCH, "cuGraphLaunch"])
def test_graph_launch_with_its_execution_is_not_lost(tmp_path, api):
    """Kernels of correlationIds 1 and 5 bound the process's records; the graph launch of 3 has its GRAPH_TRACE
    row, that of 4 has none: only 4 is lost."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="k", correlation=1)
    w.runtime(pid=10, tid=11, start=2 * MS, end=2 * MS + 10, name=api, correlation=3)
    w.graph_exec(pid=10, device=0, stream=7, start=3 * MS, end=4 * MS, graph_exec=1, correlation=3)
    w.runtime(pid=10, tid=11, start=5 * MS, end=5 * MS + 10, name=api, correlation=4)
    w.kernel(pid=10, device=0, stream=7, start=9 * MS, end=10 * MS, name="k", correlation=5)
    rep = load_report(w.close())
    assert rep.untraced["correlation_id"].tolist() == [4]


def test_iterations_find_the_executions_their_launches_started(tmp_path):
    """Decode steps: NVTX ``step_<i>`` [10i, 10i + 2) ms, each launching graph exec 4 (cuGraphLaunch at 10i + 1)
    that runs [10i + 3, 10i + 9), i = 0..7, no kernel row. The NVTX rule projects each step onto the execution
    its launch started (by correlationId): step 0 is the warm-up; 1..6 are 10 ms long (to the next step's
    start); 7, the last, only its own 6 ms (an outlier). W = [13, 69) ms: 6 executions, busy 36 ms, idle 20 ms
    (five 4 ms holes)."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    for i in range(8):
        t = 10 * i * MS
        w.nvtx(pid=10, tid=11, start=t, end=t + 2 * MS, text=f"step_{i}")
        launch_graph(w, stream=7, start=t + 3 * MS, end=t + 9 * MS, graph_exec=4, call_at=t + MS)
    _, res = analysed(w.close(), Config())
    row = res.row
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("nvtx", 13 * MS, 69 * MS)
    assert (row["iterations"], row["kept_iterations"]) == (6, "1-6")
    assert (row["busy_ns"], row["idle_ns"], row["kernel_count"]) == (36 * MS, 20 * MS, 6)
    assert "6 CUDA graph executions" in graphs_warning(row) and "covers" not in graphs_warning(row)


# ------------------------------------------------------------------ node mode, and both shapes of one launch

def test_node_mode_kernels_are_ordinary_kernels(tmp_path):
    """Node by node: the launch's two kernels carry its correlationId and their graph node ids; the 5 ms between
    them is a gap like any other; no warning."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.capture("CUDA_GRAPH_TRACE_OPTIONS:MODE", "Node")
    corr = w.correlation()
    w.runtime(pid=10, tid=11, start=0, end=1000, name=GRAPH_LAUNCH, correlation=corr)
    w.kernel(pid=10, device=0, stream=7, start=MS, end=5 * MS, name="n1", correlation=corr, graph_node=101)
    w.kernel(pid=10, device=0, stream=7, start=10 * MS, end=20 * MS, name="n2", correlation=corr, graph_node=102)
    rep, res = analysed(w.close())
    assert not rep.kernels["graph"].any() and rep.untraced.empty
    assert (res.row["idle_ns"], res.row["kernel_count"]) == (5 * MS, 2)
    assert GRAPHS not in codes(res.row)


def test_both_shapes_of_one_launch_count_once(tmp_path):
    """Launch C1 is recorded whole (graph exec 1 over [0, 20) ms) and node by node (n1 [0, 5), n2 [10, 20), its
    correlationId): its nodes count, the whole row not. Launch C2 is recorded whole only, [30, 40). Work: n1, n2,
    graph exec 2; busy 5 + 10 + 10 = 25 ms of 40, idle 15 ms; stream 7's gaps [5, 10) and [20, 30); the warning
    counts one execution of 10 ms."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    c1 = launch_graph(w, stream=7, start=0, end=20 * MS, graph_exec=1, call_at=0)
    w.kernel(pid=10, device=0, stream=7, start=0, end=5 * MS, name="n1", correlation=c1, graph_node=101)
    w.kernel(pid=10, device=0, stream=7, start=10 * MS, end=20 * MS, name="n2", correlation=c1, graph_node=102)
    launch_graph(w, stream=7, start=30 * MS, end=40 * MS, graph_exec=2)
    rep, res = analysed(w.close())
    assert sorted(rep.kernels["name"].astype(str)) == ["graph exec 2", "n1", "n2"]
    row = res.row
    assert (row["busy_ns"], row["idle_ns"], row["kernel_count"]) == (25 * MS, 15 * MS, 3)
    assert sorted((g["start_ns"], g["length_ns"]) for g in res.roster) == [(5 * MS, 5 * MS), (20 * MS, 10 * MS)]
    assert graphs_warning(row).startswith("1 CUDA graph execution traced as a whole")
    assert "covers 10.000 ms" in graphs_warning(row)


def test_a_copy_of_the_launch_never_drops_the_execution(tmp_path):
    """A copy carrying the launch's correlationId does not stand for the execution (its kernels may have no row):
    the execution [10, 20) ms stays busy and the copy inside it is no copy-only time (the two never count twice).
    Kernels [0, 5) and [25, 30) bound the window [0, 30): busy 5 + 10 + 5 = 20 ms, idle 10 ms, all dark."""
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=5 * MS, name="k1")
    c1 = launch_graph(w, stream=7, start=10 * MS, end=20 * MS, graph_exec=1)
    w.memcpy(pid=10, device=0, stream=7, start=10 * MS, end=20 * MS, correlation=c1)
    w.kernel(pid=10, device=0, stream=7, start=25 * MS, end=30 * MS, name="k2")
    _, res = analysed(w.close())
    row = res.row
    assert (row["window_ns"], row["busy_ns"], row["idle_ns"], row["copy_only_ns"]) == (30 * MS, 20 * MS, 10 * MS, 0)
    assert "1 CUDA graph execution traced as a whole" in graphs_warning(row)


# ------------------------------------------------------------------ the columnar cache

def test_cache_keeps_graph_rows_and_mode(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    covering(w)
    path = w.close()
    first = load_cached(path, tmp_path / "cache")
    again = load_cached(path, tmp_path / "cache")
    assert again.sources and not first.sources
    assert again.kernels["graph"].tolist() == first.kernels["graph"].tolist() == [False, False, True]
    assert again.meta["cuda_graph_trace"] == "graph"
    assert analyse_gpu(gpu_trace(again, again.gpu_keys()[0]), SPAN, {}).row["idle_ns"] == 4 * MS


# ------------------------------------------------------------------ table shapes

def test_without_graph_exec_id_the_graph_id_names_the_execution(tmp_path):
    """An export whose GRAPH_TRACE has no graphExecId column: executions read ``graph <graphId>``."""
    w = ExportWriter(str(tmp_path / "x.sqlite"), drop_columns={"CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("graphExecId",)})
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="k")
    w.graph_exec(pid=10, device=0, stream=7, start=3 * MS, end=4 * MS, graph_exec=9, graph=2)
    rep = load_report(w.close())
    assert rep.kernels["name"].astype(str).tolist() == ["k", "graph 2"]
    assert rep.kernels["graph"].tolist() == [False, True]


def test_text_in_an_id_column_of_graph_trace_is_an_error(tmp_path):
    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="k")
    w.graph_exec(pid=10, device=0, stream=7, start=3 * MS, end=4 * MS, graph_exec=9)
    path = w.close()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET streamId = 'seven'")
    with pytest.raises(ProfileError, match="CUPTI_ACTIVITY_KIND_GRAPH_TRACE"):
        load_report(path)
