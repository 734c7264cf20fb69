"""Issue 24, kind 1: integer columns stay exact 64-bit integers whatever other rows hold.

A PyTorch trace's times are ns since 1970 (~1.75e18, above 2**53): a float64 holds them only to
256 ns. A column of integers beside a missing value (an error row, a blank in an older stored result)
must never pass through float: ``fleet.csv``, ``fleet.parquet``, the rollups, the per-GPU JSON, the
sweep's history and rows reused from the result store all keep the exact ns. Every start below is
odd, so none is a float64 (at 1.75e18 a float64 is a multiple of 256).
"""
from __future__ import annotations

import csv
import json
import os

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import run_cli

from pipeline.fleet.reduce import INT_COLUMNS, build_fleet, error_row
from pipeline.store.results import ResultStore, rows_table
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter

# Trace A (Kineto, pid 4242, device 0, stream 7): kernels at S_A + [0, 1_000_001), [3_000_007, 4_000_011),
# [9_000_013, 12_000_017) ns. Span window [S_A, S_A + 12_000_017); busy 1_000_001 + 1_000_004 + 3_000_004
# = 5_000_009; idle 7_000_008 in 2 gaps: at S_A + 1_000_001 (2_000_006 ns) and S_A + 4_000_011 (5_000_002 ns).
S_A = 1_752_829_952_234_460_955
A = {"window_start_ns": 1_752_829_952_234_460_955, "window_end_ns": 1_752_829_952_246_460_972,
     "window_ns": 12_000_017, "busy_ns": 5_000_009, "idle_ns": 7_000_008, "gap_count": 2,
     "gap_total_ns": 7_000_008, "max_gap_ns": 5_000_002, "kernel_count": 3, "stream_count": 1,
     "pid": 4242, "device_id": 0, "device_gap_count": 2, "device_gap_ns": 7_000_008}
A_GAPS = [1_752_829_952_235_460_956, 1_752_829_952_238_460_966]  # device-level gap starts

# Trace B (Kineto, pid 5151, device 1): kernels at S_B + [0, 2_000_003), [5_000_005, 6_000_007).
# Window [S_B, S_B + 6_000_007); busy 2_000_003 + 1_000_002 = 3_000_005; idle 3_000_002, one gap at S_B + 2_000_003.
S_B = 1_752_916_352_777_000_333
B = {"window_start_ns": 1_752_916_352_777_000_333, "window_end_ns": 1_752_916_352_783_000_340,
     "window_ns": 6_000_007, "busy_ns": 3_000_005, "idle_ns": 3_000_002, "gap_count": 1,
     "max_gap_ns": 3_000_002, "kernel_count": 2, "pid": 5151, "device_id": 1}
B_GAPS = [1_752_916_352_779_000_336]

# Export N (Nsight, UTC-epoch clock, pid 10, device 0): kernels at S_N + [0, 4_000_001), [10_000_003, 13_000_005).
# Window [S_N, S_N + 13_000_005); busy 4_000_001 + 3_000_002 = 7_000_003; idle 6_000_002, one gap at S_N + 4_000_001.
S_N = 1_776_781_226_561_295_057
N = {"window_start_ns": 1_776_781_226_561_295_057, "window_end_ns": 1_776_781_226_574_295_062,
     "window_ns": 13_000_005, "busy_ns": 7_000_003, "idle_ns": 6_000_002, "gap_count": 1,
     "max_gap_ns": 6_000_002, "kernel_count": 2, "pid": 10, "device_id": 0}
N_GAPS = [1_776_781_226_565_295_058]


def kineto_trace(path, start: int, pid: int, device: int, kernels: list[tuple[int, int]]) -> str:
    """A Kineto trace of ``kernels`` (ns offsets from ``start``) on ``device`` stream 7, each launched
    by a ``cudaLaunchKernel`` of thread ``pid + 1``; ``baseTimeNanoseconds`` 1_000_003 ns before ``start``."""
    w = KinetoWriter(str(path), pid=pid, devices=[(device, "NVIDIA H100 80GB HBM3", 132)],
                     base_time_ns=start - 1_000_003)
    for i, (a, b) in enumerate(kernels):
        w.runtime(pid + 1, start + a - 500, start + a - 100, "cudaLaunchKernel", 100 + i)
        w.kernel(device, 7, start + a, start + b, "gemm", 100 + i)
    return w.close()


def trace_a(folder) -> str:
    return kineto_trace(folder / "a.json", S_A, 4242, 0,
                        [(0, 1_000_001), (3_000_007, 4_000_011), (9_000_013, 12_000_017)])


def trace_b(folder) -> str:
    return kineto_trace(folder / "b.json", S_B, 5151, 1, [(0, 2_000_003), (5_000_005, 6_000_007)])


def export_n(folder) -> str:
    w = ExportWriter(str(folder / "n.sqlite"))
    for a, b in [(0, 4_000_001), (10_000_003, 13_000_005)]:
        w.kernel(pid=10, device=0, stream=7, start=S_N + a, end=S_N + b, name="gemm")
    return w.close()


def broken(folder) -> None:
    (folder / "broken.sqlite").write_bytes(b"this file is not a database\n" * 20)


def ok_rows_text(path) -> dict:
    """``fleet.csv``'s analysed rows by report file name, as the text written (no float parsing)."""
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert any(r["status"] == "error" for r in rows), "the run should hold an error row"
    return {os.path.basename(r["report"]): r for r in rows if r["status"] != "error"}


def assert_exact(out, expected: dict, gaps: dict) -> None:
    """Every output of the run in ``out`` holds ``expected`` (report file name -> column -> int) and the
    device-level gap starts ``gaps`` (report file name -> ints) exactly."""
    text = ok_rows_text(out / "fleet.csv")
    assert sorted(text) == sorted(expected)
    for name, want in expected.items():
        assert {c: text[name][c] for c in want} == {c: str(v) for c, v in want.items()}, name
    table = pq.read_table(out / "fleet.parquet")
    for col in INT_COLUMNS:
        assert table.schema.field(col).type == pa.int64(), col
    parquet = {os.path.basename(r["report"]): r for r in table.to_pylist() if r["status"] != "error"}
    frame = pd.read_parquet(out / "fleet.parquet")
    assert all(str(frame[c].dtype) == "Int64" for c in INT_COLUMNS)
    for name, want in expected.items():
        assert {c: parquet[name][c] for c in want} == want, name
    docs = {}
    for doc_name in os.listdir(out / "gpus"):
        with open(out / "gpus" / doc_name, encoding="utf-8") as fh:
            doc = json.load(fh)
        docs[os.path.basename(doc["report"])] = doc
    assert sorted(docs) == sorted(expected)
    for name, want in expected.items():
        doc = docs[name]
        assert {c: doc["_summary"][c] for c in want} == want, name
        assert all(type(doc["_summary"][c]) is int for c in INT_COLUMNS if doc["_summary"][c] is not None)
        assert doc["timeline"]["window"] == [want["window_start_ns"], want["window_end_ns"]]
        assert sorted(g["start_ns"] for g in doc["device_roster"]) == gaps[name]
    with open(out / "jobs.csv", newline="", encoding="utf-8") as fh:
        jobs = {r["job"]: r for r in csv.DictReader(fh)}
    with open(out / "fix_first.csv", newline="", encoding="utf-8") as fh:
        fixes = {r["job"]: r for r in csv.DictReader(fh) if r["scope"] == "job"}
    with open(out / "fix_first.json", encoding="utf-8") as fh:
        fix_json = {e["job"]: e for e in json.load(fh) if e["scope"] == "job"}
    for name, want in expected.items():
        job = name.split(".")[0]
        assert (jobs[job]["gpus"], jobs[job]["window_ns"], jobs[job]["idle_ns"], jobs[job]["failed_reports"]) == (
            "1", str(want["window_ns"]), str(want["idle_ns"]), "0")
        assert (fixes[job]["window_ns"], fixes[job]["iterations"]) == (str(want["window_ns"]), "0")
        assert (fix_json[job]["window_ns"], fix_json[job]["iterations"]) == (want["window_ns"], 0)
        for start in gaps[name]:  # the example gaps name each gap's start on the report's clock
            assert f"{name} {docs[name]['gpu_key']} @{start} +" in fixes[job]["example_gaps"]
            assert f"@{start} +" in fix_json[job]["example_gaps"]
            # the medical record gives it in seconds, to the microsecond (half up)
            assert f"| {(start + 500) // 1000 // 10**6}.{(start + 500) // 1000 % 10**6:06d} s |" in (
                out / "records" / f"{job}.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_epoch_scale_kineto_beside_an_error_row_keeps_exact_ns(tmp_path):
    """Trace A and a broken .sqlite in one run: window_start_ns 1752829952234460955 everywhere (before:
    1752829952234460928 in fleet.csv, fleet.parquet and the JSON ``_summary``); a second run serves A
    from the result store and is as exact."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    trace_a(inputs)
    broken(inputs)
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    first = run_cli("run", str(inputs), "--out", str(tmp_path / "out1"), env=env, check=False)
    assert first.returncode == 1, first.stdout + first.stderr
    assert_exact(tmp_path / "out1", {"a.json": A}, {"a.json": A_GAPS})
    assert ok_rows_text(tmp_path / "out1" / "fleet.csv")["a.json"]["window_rule"] == "span"
    assert len(list((tmp_path / "cache" / "results").glob("*.sums.json"))) == 1
    run_cli("report", str(tmp_path / "out1"), "--out", str(tmp_path / "out1" / "report.html"))
    page = next((tmp_path / "out1" / "gpu-pages").glob("a.json__*.html")).read_text(encoding="utf-8")
    assert all(str(start) in page for start in A_GAPS) and str(S_A) in page
    second = run_cli("run", str(inputs), "--out", str(tmp_path / "out2"), env=env, check=False)
    assert second.returncode == 1, second.stdout + second.stderr
    assert_exact(tmp_path / "out2", {"a.json": A}, {"a.json": A_GAPS})


def test_utc_epoch_nsight_export_beside_an_error_row_keeps_exact_ns(tmp_path):
    """The same with an Nsight export on the UTC-epoch clock (export N) and the Kineto trace A."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    export_n(inputs)
    trace_a(inputs)
    broken(inputs)
    run_cli("run", str(inputs), "--out", str(tmp_path / "out"), "--no-cache", check=False)
    assert_exact(tmp_path / "out", {"n.sqlite": N, "a.json": A}, {"n.sqlite": N_GAPS, "a.json": A_GAPS})


@pytest.mark.slow
def test_sweep_nights_mixing_reused_and_fresh_rows_keep_exact_ns(tmp_path):
    """Night 1: trace A and a broken .sqlite. Night 2: A (reused from the store), trace B (fresh) and the
    broken file. Both nights' outputs and history partitions hold the exact ns, and so does night 2
    rebuilt from its history and the stored rosters (``--report-only``)."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    trace_a(inputs)
    broken(inputs)
    state = tmp_path / "state"
    cfg = tmp_path / "nightly.yaml"
    cfg.write_text(f"sweep: {{inputs: ['{inputs}'], state_dir: '{state}'}}\n")
    first = run_cli("sweep", "--config", str(cfg), "--night", "2026-11-27", check=False)
    assert "2 report(s): 1 analysed, 0 reused, 1 failed" in first.stdout, first.stdout + first.stderr
    trace_b(inputs)
    second = run_cli("sweep", "--config", str(cfg), "--night", "2026-11-28", check=False)
    assert "3 report(s): 1 analysed, 1 reused, 1 failed" in second.stdout, second.stdout + second.stderr
    assert_exact(state / "nights" / "2026-11-27", {"a.json": A}, {"a.json": A_GAPS})
    assert_exact(state / "nights" / "2026-11-28", {"a.json": A, "b.json": B}, {"a.json": A_GAPS, "b.json": B_GAPS})
    for night, expected in (("2026-11-27", {"a.json": A}), ("2026-11-28", {"a.json": A, "b.json": B})):
        table = pq.read_table(state / "history" / f"run_date={night}" / "fleet.parquet")
        assert all(table.schema.field(c).type == pa.int64() for c in INT_COLUMNS)
        rows = {os.path.basename(r["report"]): r for r in table.to_pylist() if r["status"] != "error"}
        for name, want in expected.items():
            assert {c: rows[name][c] for c in want} == want, (night, name)
    history = pd.read_parquet(state / "history")
    assert str(history["window_start_ns"].dtype) == "Int64"
    assert sorted(history["window_start_ns"].dropna().tolist()) == [S_A, S_A, S_B]
    # make report: the night rebuilt from its history row and the stored rosters, as exact
    (state / "nights" / "2026-11-28" / "fleet.csv").unlink()
    rebuilt = run_cli("sweep", "--config", str(cfg), "--report-only")
    assert "nothing analysed" in rebuilt.stdout, rebuilt.stdout + rebuilt.stderr
    assert_exact(state / "nights" / "2026-11-28", {"a.json": A, "b.json": B}, {"a.json": A_GAPS, "b.json": B_GAPS})


def row(report: str, **values) -> dict:
    """A fleet row of ``report`` analysed (``status`` ok) with ``values``, every other column missing."""
    return {**error_row(report, {"job": "j"}, ""), "status": "ok", "error": "", **values}


def test_build_fleet_types_integer_columns_without_float():
    """Missing values (an error row, a blank) beside epoch-scale ns: Int64 with the exact values."""
    rows = [row("a", gpu_key="g", window_start_ns=S_A, pid=2**62 + 1, iteration_mean_ns=None),
            error_row("b", {"job": "j"}, "broken"),
            row("c", gpu_key="g", window_start_ns=float("nan"), pid=7, iteration_mean_ns=S_B)]
    fleet = build_fleet(rows)
    assert str(fleet["window_start_ns"].dtype) == "Int64"
    assert fleet["window_start_ns"].tolist()[:1] + fleet["pid"].tolist()[:1] == [S_A, 2**62 + 1]
    assert fleet["iteration_mean_ns"].tolist()[2] == S_B and pd.isna(fleet["window_start_ns"].tolist()[2])


def test_build_fleet_refuses_a_fraction_in_an_integer_column():
    """A whole number is expected; a fraction is a bug upstream, not a value to round quietly."""
    with pytest.raises(ValueError, match="window_start_ns.*2.5"):
        build_fleet([row("a", gpu_key="g", window_start_ns=2.5)])


@pytest.mark.parametrize("missing", [None, float("nan")])
def test_result_store_round_trip_keeps_exact_ns_beside_missing_values(tmp_path, missing):
    """Two GPUs of one stored report, one with a blank (None, or in the variant a float NaN, also in a
    text column, which Arrow cannot type straight from Python) where the other holds epoch-scale ns:
    read back as the same Python ints (before: through float64, 1752916352777000333 came back
    1752916352777000448)."""
    rows = [{"report": "r", "gpu_key": "g0", "window_start_ns": S_A, "iteration_mean_ns": missing, "warnings": missing},
            {"report": "r", "gpu_key": "g1", "window_start_ns": S_N, "iteration_mean_ns": S_B, "warnings": "w"}]
    assert rows_table(rows).column("iteration_mean_ns").to_pylist() == [None, S_B]
    store = ResultStore(str(tmp_path))
    store.put("k", rows, {("r", "g0"): {"streams": []}, ("r", "g1"): {"streams": []}})
    got, _, _ = store.get("k", "r2")
    assert [(r["report"], r["window_start_ns"], r["iteration_mean_ns"]) for r in got] == [
        ("r2", S_A, None), ("r2", S_N, S_B)]
    assert all(type(r["window_start_ns"]) is int for r in got)
