"""Issue #2 "right values" on the real H100 exports, through the real CLI.

Expected numbers come from the issue text and, independently, from a plain
pure-Python sweep over rows read straight from SQLite (no pipeline code).
"""
from __future__ import annotations

import json
import sqlite3

import pandas as pd
import pytest

from pipeline.fleet.outputs import gpu_json_name


def row(fleet: pd.DataFrame, report: str, pid: int) -> pd.Series:
    hit = fleet[fleet["report"].str.endswith(report) & (fleet["pid"].astype(str) == str(pid))]
    assert len(hit) == 1, f"expected one row for {report} pid {pid}, got {len(hit)}"
    return hit.iloc[0]


def test_fastvideo_gpu0(span_fleet):
    r = row(span_fleet, "fastvideo_h100_sp2_1s.sqlite", 111)
    assert int(r.device_id) == 0
    assert int(r.window_ns) == 960_485_009
    assert int(r.busy_ns) == 22_385_163
    assert int(r.idle_ns) == 938_099_846
    assert float(r.idle_pct) == pytest.approx(97.67, abs=0.005)
    assert int(r.copy_only_ns) == 931_561_688
    assert int(r.dark_ns) == 6_538_158
    assert int(r.gap_count) == 56
    assert int(r.gap_total_ns) == 935_432_085
    assert (int(r.gaps_le_5ms), int(r.gaps_5_50ms), int(r.gaps_gt_50ms)) == (0, 55, 1)
    assert r.status == "ok" and r.window_rule == "span"


def test_fastvideo_gpu1(span_fleet):
    r = row(span_fleet, "fastvideo_h100_sp2_1s.sqlite", 112)
    assert int(r.device_id) == 1
    assert int(r.idle_ns) == 937_863_304
    assert int(r.dark_ns) == 6_435_713
    assert int(r.gap_count) == 56
    assert int(r.gap_total_ns) == 935_250_727


def test_train_nccl(span_fleet):
    r0 = row(span_fleet, "train_h100_2gpu_nccl.sqlite", 144)
    assert (int(r0.window_ns), int(r0.idle_ns), int(r0.copy_only_ns), int(r0.dark_ns)) == (
        299_848_812, 28_985_328, 2_954_303, 26_031_025)
    assert (int(r0.gap_count), int(r0.gap_total_ns), int(r0.gaps_le_5ms)) == (2, 6_926_371, 2)
    r1 = row(span_fleet, "train_h100_2gpu_nccl.sqlite", 145)
    assert (int(r1.idle_ns), int(r1.dark_ns), int(r1.gap_count), int(r1.gap_total_ns)) == (
        34_336_827, 31_385_635, 3, 3_179_447)
    assert int(r1.gaps_le_5ms) == 3


def test_tiny(span_fleet):
    rows = span_fleet[span_fleet["report"].str.endswith("tiny_2kernels.sqlite")]
    assert len(rows) == 1
    r = rows.iloc[0]
    assert int(r.idle_ns) == 18_250_538 and int(r.gap_count) == 1
    assert r.gpu_model == "NVIDIA GeForce RTX 3080" and r.rate_model == "RTX 3080"


def test_cost_columns(span_fleet):
    r = row(span_fleet, "fastvideo_h100_sp2_1s.sqlite", 111)
    f = 938_099_846 / 960_485_009
    assert float(r.rate_usd_per_hour) == 4.0  # H100 on the default rate card
    assert float(r.idle_usd_per_month) == pytest.approx(round(f * 4.0 * 730, 2), abs=0.005)
    assert float(r.amdahl_speedup) == pytest.approx(1 / (1 - f), abs=1e-4)


def test_roster_and_summary_json(span_run, span_fleet):
    r = row(span_fleet, "fastvideo_h100_sp2_1s.sqlite", 111)
    doc = json.loads((span_run / "gpus" / gpu_json_name(r.report, r.gpu_key)).read_text())
    assert list(doc)[-1] == "_summary"
    assert doc["_summary"]["idle_ns"] == 938_099_846
    assert len(doc["roster"]) == 20
    top = doc["roster"][0]
    assert (top["length_ns"], top["stream_id"]) == (155_872_025, 7)
    assert top["kernel_before"] == "CatArrayBatchedCopy_vectorized"
    assert top["kernel_after"] == "vectorized_gather_kernel"
    assert top["category"] == "data"
    lengths = [g["length_ns"] for g in doc["roster"]]
    assert lengths == sorted(lengths, reverse=True)


def _overlap_sql(path, pids, g0, g1):
    """Summed intersection of runtime calls of ``pids`` with [g0, g1), per API, in plain SQL."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(pids))
        return dict(con.execute(
            f"""SELECT s.value, SUM(MIN(r.end, ?) - MAX(r.start, ?)) FROM CUPTI_ACTIVITY_KIND_RUNTIME r
                JOIN StringIds s ON s.id = r.nameId
                WHERE r.end > ? AND r.start < ? AND ((r.globalTid >> 24) & 16777215) IN ({marks})
                GROUP BY s.value""", (g1, g0, g0, g1, *pids)).fetchall())
    finally:
        con.close()


def test_attribution_only_own_process(span_run, span_fleet, profiles):
    """GPU 0's attribution counts pid 111's calls only, never pid 112's (same API names)."""
    r = row(span_fleet, "fastvideo_h100_sp2_1s.sqlite", 111)
    doc = json.loads((span_run / "gpus" / gpu_json_name(r.report, r.gpu_key)).read_text())
    top = doc["roster"][0]
    g0, g1 = top["start_ns"], top["start_ns"] + top["length_ns"]
    path = profiles / "fastvideo_h100_sp2_1s.sqlite"
    own = _overlap_sql(path, [111], g0, g1)
    both = _overlap_sql(path, [111, 112], g0, g1)
    ours = {a["api"]: a["overlap_ns"] for a in top["attribution"]}
    own_normalised = {}
    for name, ns in own.items():
        base = name.split("_v")[0]
        own_normalised[base] = own_normalised.get(base, 0) + ns
    assert ours == own_normalised
    assert ours != {k.split("_v")[0]: v for k, v in both.items()}  # pid 112 overlaps this gap too


def _plain_device_idle(path, pid, device):
    """Device idle (ns) from a plain row-by-row sweep: window = span of this GPU's kernels."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE ((globalPid >> 24) & 16777215) = ?"
                           " AND deviceId = ? ORDER BY start", (pid, device)).fetchall()
    finally:
        con.close()
    busy, cur_s, cur_e = 0, None, None
    for s, e in rows:
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                busy += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    busy += cur_e - cur_s
    window = max(e for _, e in rows) - min(s for s, _ in rows)
    return window - busy


@pytest.mark.parametrize("report,pid,device", [
    ("fastvideo_h100_sp2_1s.sqlite", 111, 0), ("fastvideo_h100_sp2_1s.sqlite", 112, 1),
    ("train_h100_2gpu_nccl.sqlite", 144, 0), ("train_h100_2gpu_nccl.sqlite", 145, 1),
    ("tiny_2kernels.sqlite", 91186, 0)])
def test_idle_matches_plain_sweep(span_fleet, profiles, report, pid, device):
    assert int(row(span_fleet, report, pid).idle_ns) == _plain_device_idle(profiles / report, pid, device)


def test_profiles_untouched(profiles, span_run):
    """The run never writes into the user's files (no -wal/-shm/-journal beside them)."""
    leftovers = [p.name for p in profiles.iterdir() if p.suffix not in (".sqlite", ".md")]
    assert leftovers == []


def test_rollups(span_run, span_fleet):
    jobs = pd.read_csv(span_run / "jobs.csv")
    fv = jobs[jobs["job"] == "fastvideo-sp2"].iloc[0]
    assert int(fv.gpus) == 2
    assert int(fv.idle_ns) == 938_099_846 + 937_863_304
    clusters = pd.read_csv(span_run / "clusters.csv")
    lab = clusters[clusters["cluster"] == "lab-h100"].iloc[0]
    assert int(lab.gpus) == 4
