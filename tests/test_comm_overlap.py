"""Issue 14 point 2: exposed vs overlapped communication (docs/definitions.md#communication-overlap).

Per GPU inside W: ``comm_ns`` = |union of the collective kernels clipped to W|; ``comm_overlapped_ns`` =
the part of it when a compute (non-collective) kernel runs on *another* stream of the GPU;
``comm_exposed_ns`` = the rest; each also as % of W, and the exposed part priced like idle:
exposed / W × rate × 730 h (H100 on the default card: $4.00/GPU-hour, so 100 % of W = $2,920.00).

Every expected value is worked out by hand in the comments (ms on the export's clock).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, run_cli

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.attribution import categorise, collective_mask
from pipeline.analysis.overlap import CommOverlap, comm_overlap, stream_codes
from pipeline.config import CategoryRules, load_config
from pipeline.fleet.reduce import COMM_COLUMNS, FLEET_COLUMNS, rollup
from pipeline.load.report import gpu_trace, load_report
from pipeline.report.html import write_report
from pipeline.report.medical import job_record
from pipeline.synth import ExportWriter

MS = 1_000_000
SPAN = load_config([], {"analysis": {"window": "span"}})
MONTH_AT_100_PCT = 4.0 * 730  # USD per month of an H100 at $4.00/GPU-hour, whole window
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"


def comm_of(row: dict) -> tuple:
    return (row["comm_ns"], row["comm_overlapped_ns"], row["comm_exposed_ns"])


def pcts_of(row: dict) -> tuple:
    return (row["comm_pct"], row["comm_overlapped_pct"], row["comm_exposed_pct"])


def analyse(tmp_path, fill, cfg=SPAN, name="x.sqlite") -> dict:
    """Write an export with ``fill(w)``, analyse its GPUs; returns ``{gpu_key: fleet row}``."""
    w = ExportWriter(str(tmp_path / name))
    fill(w)
    w.close()
    rep = load_report(w.path)
    return {key: analyse_gpu(gpu_trace(rep, key), cfg, {}).row for key in rep.gpu_keys()}


def only(rows: dict) -> dict:
    assert len(rows) == 1
    return next(iter(rows.values()))


# ---------------------------------------------------------------- synthetic exports, by hand

def test_partial_overlap_and_a_copy_is_not_compute(tmp_path):
    # stream 7 (compute): gemm [0,10) and [20,30); stream 13: NCCL all-reduce [6,16); a copy on the
    # copy engine [10,14) (not a kernel: not compute). Span window [0,30) = 30 ms.
    # comm = [6,16) = 10 ms; overlapped = [6,10) (gemm on stream 7) = 4 ms; exposed = [10,16) = 6 ms
    # (the copy beside it does not make it overlapped). % of W: 33.3333, 13.3333, 20.0.
    # Priced: 6/30 × 4.00 × 730 = $584.00 per month.
    def fill(w):
        w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=7, start=20 * MS, end=30 * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=13, start=6 * MS, end=16 * MS, name=NCCL)
        w.memcpy(pid=10, device=0, stream=9, start=10 * MS, end=14 * MS)

    row = only(analyse(tmp_path, fill))
    assert row["window_ns"] == 30 * MS and row["busy_ns"] == 26 * MS  # [0,16) ∪ [20,30)
    assert comm_of(row) == (10 * MS, 4 * MS, 6 * MS)
    assert pcts_of(row) == (33.3333, 13.3333, 20.0)
    assert row["comm_exposed_usd_per_month"] == 584.0 == round(6 / 30 * MONTH_AT_100_PCT, 2)


def test_full_overlap_is_not_exposed(tmp_path):
    # stream 7: gemm [0,20); stream 13: NCCL [5,15). W = [0,20). comm 10 ms, all of it beside the
    # gemm: overlapped 10 ms, exposed 0, $0.00. % of W: 50, 50, 0.
    def fill(w):
        w.kernel(pid=10, device=0, stream=7, start=0, end=20 * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=13, start=5 * MS, end=15 * MS, name=NCCL)

    row = only(analyse(tmp_path, fill))
    assert comm_of(row) == (10 * MS, 10 * MS, 0)
    assert pcts_of(row) == (50.0, 50.0, 0.0)
    assert row["comm_exposed_usd_per_month"] == 0.0


def test_compute_on_the_same_stream_does_not_overlap(tmp_path):
    # stream 13: NCCL [0,10) and a gemm row [5,8) on the SAME stream (a stream runs its work in order:
    # such a row can only be a timestamp artefact); stream 7: gemm [8,12). W = [0,12).
    # comm 10 ms; overlapped only [8,10) (stream 7) = 2 ms (counting the same stream would give
    # [5,10) = 5 ms); exposed 8 ms. Priced 8/12 × 2920 = $1,946.67.
    def fill(w):
        w.kernel(pid=10, device=0, stream=13, start=0, end=10 * MS, name=NCCL)
        w.kernel(pid=10, device=0, stream=13, start=5 * MS, end=8 * MS, name="gemm_same_stream")
        w.kernel(pid=10, device=0, stream=7, start=8 * MS, end=12 * MS, name="gemm")

    row = only(analyse(tmp_path, fill))
    assert comm_of(row) == (10 * MS, 2 * MS, 8 * MS)
    assert row["comm_exposed_usd_per_month"] == 1946.67 == round(8 / 12 * MONTH_AT_100_PCT, 2)


def test_collectives_straddling_the_window_are_clipped(tmp_path):
    # stream 7: gemm [0,4) and [12,20); stream 13: NCCL [1,6) and [10,16). --trim 0.002 0.014 s:
    # W = [2,14) = 12 ms. Clipped: gemm [2,4), [12,14); NCCL [2,6), [10,14).
    # comm = 4 + 4 = 8 ms (unclipped it would be 5 + 6 = 11); overlapped = [2,4) + [12,14) = 4 ms;
    # exposed = [4,6) + [10,12) = 4 ms. % of W: 66.6667, 33.3333, 33.3333.
    # Priced 4/12 × 2920 = 973.333… -> $973.33.
    def fill(w):
        w.kernel(pid=10, device=0, stream=7, start=0, end=4 * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=7, start=12 * MS, end=20 * MS, name="gemm")
        w.kernel(pid=10, device=0, stream=13, start=1 * MS, end=6 * MS, name=NCCL)
        w.kernel(pid=10, device=0, stream=13, start=10 * MS, end=16 * MS, name=NCCL)

    trim = load_config([], {"analysis": {"trim_s": ["0.002", "0.014"]}})
    row = only(analyse(tmp_path, fill, trim))
    assert (row["window_rule"], row["window_start_ns"], row["window_end_ns"]) == ("trim", 2 * MS, 14 * MS)
    assert comm_of(row) == (8 * MS, 4 * MS, 4 * MS)
    assert pcts_of(row) == (66.6667, 33.3333, 33.3333)
    assert row["comm_exposed_usd_per_month"] == 973.33


def test_two_collectives_at_once_count_once(tmp_path):
    # stream 13: NCCL all-reduce [0,10); stream 14: NCCL all-gather [5,15); stream 7: gemm [12,20).
    # W = [0,20). comm = |[0,10) ∪ [5,15)| = 15 ms (a sum would say 20). A collective beside another
    # collective is not beside compute: overlapped = [0,10) ∩ gemm (0) ∪ [5,15) ∩ gemm ([12,15): 3 ms)
    # = 3 ms; exposed 12 ms. % of W: 75, 15, 60. Priced 12/20 × 2920 = $1,752.00.
    def fill(w):
        w.kernel(pid=10, device=0, stream=13, start=0, end=10 * MS, name=NCCL)
        w.kernel(pid=10, device=0, stream=14, start=5 * MS, end=15 * MS, name="ncclDevKernel_AllGather_RING_LL")
        w.kernel(pid=10, device=0, stream=7, start=12 * MS, end=20 * MS, name="gemm")

    row = only(analyse(tmp_path, fill))
    assert comm_of(row) == (15 * MS, 3 * MS, 12 * MS)
    assert pcts_of(row) == (75.0, 15.0, 60.0)
    assert row["comm_exposed_usd_per_month"] == 1752.0


CUSTOM_AR = "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData *, ...)"


def engine_collectives(w):
    # stream 7: gemm [0,10); stream 13: vLLM's custom all-reduce [8,12); stream 14: the site's own
    # "my_custom_ar_kernel" [11,16). W = [0,16) = 16 ms.
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="gemm")
    w.kernel(pid=10, device=0, stream=13, start=8 * MS, end=12 * MS, name=CUSTOM_AR)
    w.kernel(pid=10, device=0, stream=14, start=11 * MS, end=16 * MS, name="my_custom_ar_kernel")


def test_custom_all_reduce_by_the_default_patterns(tmp_path):
    # Default patterns: cross_device_reduce is a collective, my_custom_ar_kernel is compute.
    # comm = [8,12) = 4 ms; overlapped = [8,10) (gemm) ∪ [11,12) (my_custom_ar_kernel, compute on
    # stream 14) = 3 ms; exposed = [10,11) = 1 ms. Priced 1/16 × 2920 = $182.50.
    row = only(analyse(tmp_path, engine_collectives))
    assert comm_of(row) == (4 * MS, 3 * MS, 1 * MS)
    assert row["comm_exposed_usd_per_month"] == 182.5


def test_a_configured_extra_pattern_is_a_collective_too(tmp_path):
    # categories.collective_kernel = the default | my_custom_ar: both kernels are collectives.
    # comm = [8,12) ∪ [11,16) = [8,16) = 8 ms; overlapped = [8,12) ∩ gemm = [8,10) = 2 ms (the two
    # collectives overlapping on [11,12) is not compute); exposed 6 ms. % of W: 50, 12.5, 37.5.
    # Priced 6/16 × 2920 = $1,095.00.
    pattern = CategoryRules().collective_kernel + "|my_custom_ar"
    cfg = load_config([], {"analysis": {"window": "span"}, "categories": {"collective_kernel": pattern}})
    row = only(analyse(tmp_path, engine_collectives, cfg))
    assert comm_of(row) == (8 * MS, 2 * MS, 6 * MS)
    assert pcts_of(row) == (50.0, 12.5, 37.5)
    assert row["comm_exposed_usd_per_month"] == 1095.0


def test_a_gpu_without_collectives_is_all_zeros(tmp_path):
    # pid 10 on GPU aaa: NCCL [0,10) alone on stream 13 (exposed 10 ms of W [0,10): 100 %, $2,920.00);
    # pid 20 on GPU bbb: only gemms [0,5) and [10,15) -> zeros everywhere, $0.00.
    def fill(w):
        w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="aaa")
        w.gpu(1, "NVIDIA H100 80GB HBM3", uuid="bbb")
        w.cuda_device(0, 0, 10)
        w.cuda_device(1, 0, 20)
        w.kernel(pid=10, device=0, stream=13, start=0, end=10 * MS, name=NCCL)
        w.kernel(pid=20, device=0, stream=7, start=0, end=5 * MS, name="gemm")
        w.kernel(pid=20, device=0, stream=7, start=10 * MS, end=15 * MS, name="gemm")

    rows = analyse(tmp_path, fill)
    assert comm_of(rows["GPU-aaa"]) == (10 * MS, 0, 10 * MS)
    assert pcts_of(rows["GPU-aaa"]) == (100.0, 0.0, 100.0)
    assert rows["GPU-aaa"]["comm_exposed_usd_per_month"] == 2920.0
    assert comm_of(rows["GPU-bbb"]) == (0, 0, 0) and pcts_of(rows["GPU-bbb"]) == (0.0, 0.0, 0.0)
    assert rows["GPU-bbb"]["comm_exposed_usd_per_month"] == 0.0


def test_two_processes_on_one_gpu_are_two_streams(tmp_path):
    # pids 10 and 11 share GPU aaa (MPS), both on stream number 7: pid 10 runs NCCL [0,10), pid 11 a
    # gemm [4,20). Stream ids are per process, so these are two streams: overlapped [4,10) = 6 ms,
    # exposed [0,4) = 4 ms of W [0,20).
    def fill(w):
        w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="aaa")
        w.cuda_device(0, 0, 10)
        w.cuda_device(0, 0, 11)
        w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name=NCCL)
        w.kernel(pid=11, device=0, stream=7, start=4 * MS, end=20 * MS, name="gemm")

    row = only(analyse(tmp_path, fill))
    assert comm_of(row) == (10 * MS, 6 * MS, 4 * MS)


# ---------------------------------------------------------------- the pure function

def test_comm_overlap_by_hand_on_epoch_timestamps():
    # The same numbers as the partial-overlap export, on the UTC-epoch clock (~1.78e18 ns): exact ints.
    t0 = 1_776_781_226_561_295_056
    s = np.array([0, 20, 6, 3], dtype=np.int64) * MS + t0
    e = np.array([10, 30, 16, 3], dtype=np.int64) * MS + t0   # the last row is zero-length: covers nothing
    streams = np.array([7, 7, 13, 13])
    coll = np.array([False, False, True, True])
    got = comm_overlap(s, e, streams, coll, t0, t0 + 30 * MS)
    assert got == CommOverlap(10 * MS, 4 * MS, 6 * MS)
    assert all(isinstance(x, int) for x in got)
    # a window that holds no collective: zeros
    assert comm_overlap(s, e, streams, coll, t0 + 20 * MS, t0 + 30 * MS) == CommOverlap(0, 0, 0)
    # one ns of window edge inside the collective: 1 ns, exposed (the gemm ended at 10 ms)
    assert comm_overlap(s, e, streams, coll, t0 + 16 * MS - 1, t0 + 17 * MS) == CommOverlap(1, 0, 1)
    with pytest.raises(ValueError, match="differ in length"):
        comm_overlap(s, e, streams[:3], coll, t0, t0 + 30 * MS)


def test_stream_codes_are_per_process_pairs():
    assert stream_codes([10, 11, 10, 10], [7, 7, 13, 7]).tolist() == [0, 2, 1, 0]
    assert stream_codes([], []).tolist() == []


def test_collective_mask_is_the_comm_categorys_matcher():
    rules = CategoryRules()
    names = [NCCL, CUSTOM_AR, "reduce_scatter_kernel<float>", "gemm",
             "void at::native::reduce_kernel<512, 1>(...)", "small_reduce_kernel", None]
    assert collective_mask(names, rules).tolist() == [True, True, True, False, False, False, False]
    # a categorical Series (as the loader gives names) is matched the same
    assert collective_mask(pd.Series(names, dtype="category"), rules).tolist() == [
        True, True, True, False, False, False, False]
    # and the comm category uses it: a gap after each kernel, no CPU calls
    gaps = pd.DataFrame({"start": [0, 20], "end": [10, 30], "length": [10, 10], "pid": [1, 1], "stream_id": [1, 1],
                         "kernel_before": [CUSTOM_AR, "small_reduce_kernel"], "kernel_after": ["g", "g"]})
    empty = pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64"),
                          "name": pd.Series(dtype=object)})
    copies = pd.DataFrame({"start": pd.Series(dtype="int64"), "end": pd.Series(dtype="int64")})
    assert categorise(gaps, empty, copies, rules)["category"].tolist() == ["comm", "cpu"]


def test_fleet_columns_in_order():
    assert COMM_COLUMNS == ["comm_ns", "comm_overlapped_ns", "comm_exposed_ns", "comm_pct", "comm_overlapped_pct",
                            "comm_exposed_pct"]
    i = FLEET_COLUMNS.index("comm_ns")
    assert FLEET_COLUMNS[i:i + 6] == COMM_COLUMNS and FLEET_COLUMNS[i - 1] == "actionable"
    assert FLEET_COLUMNS[FLEET_COLUMNS.index("untraced_usd_per_month") + 1] == "comm_exposed_usd_per_month"
    readme = (REPO / "docs" / "outputs.md").read_text()
    assert all(f"`{c}`" in readme for c in COMM_COLUMNS + ["comm_exposed_usd_per_month"])
    assert "overlap.py" in readme


# ---------------------------------------------------------------- the real exports (span window)

def real(fleet: pd.DataFrame, report: str, pid: int) -> pd.Series:
    hit = fleet[fleet["report"].str.endswith(report) & (fleet["pid"].astype(str) == str(pid))]
    assert len(hit) == 1
    return hit.iloc[0]


# train_h100_2gpu_nccl: one stream per GPU (144: stream 7, 145: stream 15), 33 ncclDevKernel_SendRecv
# each; no other stream, so nothing can overlap them: exposed = comm. Windows (span): 299,848,812 and
# 298,661,551 ns. Union of the NCCL kernels (plain sweep over the SQLite rows): 17,172,652 and 8,229,100 ns.
NCCL_GPUS = {144: (17_172_652, 299_848_812), 145: (8_229_100, 298_661_551)}


@pytest.mark.parametrize("pid", [144, 145])
def test_real_nccl_training(span_fleet, pid):
    comm, window = NCCL_GPUS[pid]
    r = real(span_fleet, "train_h100_2gpu_nccl.sqlite", pid)
    assert int(r.window_ns) == window
    assert (int(r.comm_ns), int(r.comm_overlapped_ns), int(r.comm_exposed_ns)) == (comm, 0, comm)
    assert float(r.comm_overlapped_pct) == 0.0
    assert float(r.comm_pct) == float(r.comm_exposed_pct) == round(100 * comm / window, 4)
    # 144: 17,172,652 / 299,848,812 × 2920 = 167.2256… -> 167.23; 145: 8,229,100 / 298,661,551 × 2920 = 80.455… -> 80.46
    assert float(r.comm_exposed_usd_per_month) == {144: 167.23, 145: 80.46}[pid]


@pytest.mark.parametrize("report, pid", [("fastvideo_h100_sp2_1s.sqlite", 111), ("fastvideo_h100_sp2_1s.sqlite", 112),
                                         ("tiny_2kernels.sqlite", None)])
def test_real_exports_without_collectives(span_fleet, report, pid):
    r = real(span_fleet, report, pid) if pid else span_fleet[span_fleet["report"].str.endswith(report)].iloc[0]
    assert [int(r[c]) for c in ("comm_ns", "comm_overlapped_ns", "comm_exposed_ns")] == [0, 0, 0]
    assert [float(r[c]) for c in ("comm_pct", "comm_exposed_pct", "comm_exposed_usd_per_month")] == [0.0] * 3


def test_real_rollups_record_and_report(span_run, span_fleet, tmp_path):
    jobs = pd.read_csv(span_run / "jobs.csv").set_index("job")
    nccl = jobs.loc["train-2gpu-nccl"]
    exposed = 17_172_652 + 8_229_100  # 25,401,752 ns
    window = 299_848_812 + 298_661_551  # 598,510,363 ns
    assert (int(nccl.comm_ns), int(nccl.comm_overlapped_ns), int(nccl.comm_exposed_ns)) == (exposed, 0, exposed)
    assert float(nccl.comm_exposed_usd_per_month) == 247.69  # 167.23 + 80.46
    assert float(nccl.comm_exposed_pct) == round(100 * exposed / window, 4) == 4.2442
    assert int(jobs.loc["fastvideo-sp2", "comm_exposed_ns"]) == 0
    clusters = pd.read_csv(span_run / "clusters.csv").set_index("cluster")
    assert int(clusters.loc["lab-h100", "comm_exposed_ns"]) == exposed
    assert int(clusters.loc["workstation", "comm_ns"]) == 0
    # the medical record: one line after the idle cost, only where communication is exposed
    page = (span_run / "records" / "train-2gpu-nccl.md").read_text()
    assert ("Exposed communication: 25.402 ms (4.24 % of the windows) of 25.402 ms in collective kernels ran "
            "with no compute kernel on another stream: $247.69 per month (busy time, not in the idle cost; it overlaps the collective wait where "
            "both are measured (both are time inside collective kernels): never add the two).") \
        in page.splitlines()
    # after the idle cost and the collective wait (issue 45 d: the busy time after the one money headline)
    lines = page.splitlines()
    head = lines.index(next(x for x in lines if x.startswith("Idle cost:")))
    assert lines[head + 1].startswith("Collective wait: ") and lines[head + 2].startswith("Exposed")
    for job in ("fastvideo-sp2", "tiny"):
        assert "Exposed communication" not in (span_run / "records" / f"{job}.md").read_text()
    # the HTML report says it once, in the busy-time section after the idle's (issue 45 point 3), with the fleet's sum
    out = tmp_path / "report.html"
    write_report(span_run, out)
    html_text = out.read_text()
    assert html_text.count('id="exposed-comm"') == 1 and 'data-usd="247.69"' in html_text
    assert html_text.index('id="exposed-comm"') > html_text.index('<section id="breakdown">')
    # of the fleet's windows: 25,401,752 / (598,510,363 + 960,485,009 + 960,307,663 + 18,254,667) = 1.0010… %
    fleet_window = int(span_fleet["window_ns"].astype("int64").sum())
    assert fleet_window == 598_510_363 + 960_485_009 + 960_307_663 + 18_254_667
    idle = round(span_fleet.loc[span_fleet["status"] != "error", "idle_usd_per_month"].astype(float).sum(), 2)
    assert "Exposed communication: <strong>25.402 ms</strong> (1.00 % of the analysed windows) of 25.402 ms in " \
           "collective kernels ran with no compute kernel on another stream, on 2 GPU(s): not idle, not in the " \
           f"${idle:,.2f}/month idle cost; it overlaps the wait for the last rank where both are measured: never add " \
           "the two." in html_text
    assert "Priced like idle at the same rates, this busy time comes to $247.69/month, never added to the idle " \
           'cost<span id="exposed-comm-assumed"></span>.</p>' in html_text


def test_records_stay_as_they_were_without_exposed_communication(span_fleet):
    """A job with no exposed communication gets the very page it got before the columns existed;
    one with exposed communication gets exactly one line more."""
    def pages(job):
        rows = span_fleet[span_fleet["job"] == job]
        return (job_record(job, rows, {}).splitlines(),
                job_record(job, rows.drop(columns=[c for c in rows.columns if c.startswith("comm_")]), {}).splitlines())

    for job in ("fastvideo-sp2", "tiny"):
        with_cols, without = pages(job)
        assert with_cols == without
    with_cols, without = pages("train-2gpu-nccl")
    extra = [x for x in with_cols if x not in without]
    assert len(with_cols) == len(without) + 1 and len(extra) == 1 and extra[0].startswith("Exposed communication: ")


def test_rollup_of_a_table_written_before_the_columns(span_fleet):
    """An older fleet table (a sweep night from before) still rolls up: the schema's columns, those made of
    the comm columns it lacks empty (pipeline.schema.conform)."""
    old = span_fleet.drop(columns=[c for c in span_fleet.columns if c.startswith("comm_")])
    jobs = rollup(old, ["cluster", "job"])
    comm = [c for c in jobs.columns if c.startswith("comm_")]
    assert len(comm) == 5 and jobs[comm].isna().all().all()
    assert int(jobs.set_index("job").loc["train-2gpu-nccl", "gpus"]) == 2


def test_cli_fleet_csv_and_jobs(tmp_path):
    """Through the CLI on a two-GPU export: fleet.csv holds the columns, jobs.csv sums them."""
    folder = tmp_path / "in"
    folder.mkdir()
    w = ExportWriter(str(folder / "two.sqlite"))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="aaa")
    w.gpu(1, "NVIDIA H100 80GB HBM3", uuid="bbb")
    w.cuda_device(0, 0, 10)
    w.cuda_device(1, 0, 20)
    # GPU aaa: the partial-overlap case (comm 10, overlapped 4, exposed 6 ms of W 30 ms: $584.00)
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="gemm")
    w.kernel(pid=10, device=0, stream=7, start=20 * MS, end=30 * MS, name="gemm")
    w.kernel(pid=10, device=0, stream=13, start=6 * MS, end=16 * MS, name=NCCL)
    # GPU bbb: NCCL [0,10) beside gemm [0,5) on another stream, W [0,10): overlapped 5, exposed 5 ms:
    # 5/10 × 2920 = $1,460.00
    w.kernel(pid=20, device=0, stream=7, start=0, end=5 * MS, name="gemm")
    w.kernel(pid=20, device=0, stream=13, start=0, end=10 * MS, name=NCCL)
    w.close()
    out = tmp_path / "out"
    run_cli("run", str(folder), "--out", str(out), "--window", "span", "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv").set_index("gpu_key")
    assert [int(fleet.loc["GPU-aaa", c]) for c in ("comm_ns", "comm_overlapped_ns", "comm_exposed_ns")] == [
        10 * MS, 4 * MS, 6 * MS]
    assert [int(fleet.loc["GPU-bbb", c]) for c in ("comm_ns", "comm_overlapped_ns", "comm_exposed_ns")] == [
        10 * MS, 5 * MS, 5 * MS]
    assert (float(fleet.loc["GPU-aaa", "comm_exposed_usd_per_month"]),
            float(fleet.loc["GPU-bbb", "comm_exposed_usd_per_month"])) == (584.0, 1460.0)
    job = pd.read_csv(out / "jobs.csv").iloc[0]
    assert (int(job.comm_ns), int(job.comm_overlapped_ns), int(job.comm_exposed_ns)) == (20 * MS, 9 * MS, 11 * MS)
    assert float(job.comm_exposed_usd_per_month) == 2044.0  # 584.00 + 1,460.00
    assert float(job.comm_exposed_pct) == round(100 * 11 / 40, 4) == 27.5  # 11 ms of 30 + 10 ms
    # fix first stays per idle category: no entry for exposed communication
    fixes = pd.read_csv(out / "fix_first.csv")
    idle = fixes[fixes["section"] == "device idle"]
    assert set(idle["category"]) <= {"data", "comm", "sync", "boundary", "periodic", "launch", "cpu"}
    # the wait inside collectives is no idle category: apart, in its own section
    assert set(fixes.loc[fixes["section"] != "device idle", "category"]) <= {"collective wait"}
