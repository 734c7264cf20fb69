"""Issue 30: remedies that follow the evidence (docs/definitions.md#diagnosis).

Small Nsight-shaped exports built with :class:`pipeline.synth.ExportWriter`; every expected value is worked
out by hand in the comments from how the export is built (:func:`training`).
"""
from __future__ import annotations

import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from pipeline.analysis import diagnosis, fixfirst
from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import load_config
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import ExportWriter

MS = 1_000_000
BASE = 10 * MS         # the first iteration's first kernel
PERIOD = 20 * MS       # an iteration: 17 kernels of 1 ms and one 3 ms gap
GAP = 3 * MS
ITERATIONS = 7         # the first is warm-up: 6 kept
KEPT = 6
CFG = load_config([], {})
from conftest import PROFILES  # noqa: E402  (beside the clone, or GPU_IDLE_PROFILES)
GPU_IDLE = str(Path(sys.executable).with_name("gpu-idle"))


def training(path, positions, fill: str, copy_stream: int = 7, src_kind: int = 1, nbytes: int = 8 << 20,
             host_alloc: bool = False) -> str:
    """One process (pid 10), one GPU, kernels on stream 7. Iteration ``i`` (NVTX ``Iteration i`` on the CPU at
    [BASE + 20 i − 1, BASE + 20 i + 19) ms) runs kernels ``k0``..``k16`` of 1 ms back to back from BASE + 20 i,
    with a 3 ms gap after kernel ``positions[i]``: kernel j at BASE + 20 i + j ms (j <= p), + 3 ms after it.
    Each kernel is launched (cudaLaunchKernel, 10 µs) 0.5 ms before it starts. The gap is filled by ``fill``:
    ``sync``: a cudaStreamSynchronize over the whole gap; ``copy``: one HtoD memcpy of ``nbytes`` over the whole
    gap on ``copy_stream``, host memory ``src_kind`` (ENUM_CUDA_MEM_KIND: 0 pageable, 1 pinned). With
    ``host_alloc``, a cudaHostAlloc also covers every gap, and one more runs once before the first kernel."""
    w = ExportWriter(str(path))
    w.mem_kinds()
    if host_alloc:
        w.runtime(pid=10, tid=1, start=2 * MS, end=3 * MS, name="cudaHostAlloc_v3020")
    for i, p in enumerate(positions):
        t0 = BASE + i * PERIOD
        w.nvtx(pid=10, tid=1, start=t0 - MS, end=t0 + PERIOD - MS, text=f"Iteration {i}")
        for j in range(17):
            s = t0 + j * MS + (GAP if j > p else 0)
            c = w.correlation()
            w.runtime(pid=10, tid=1, start=s - MS // 2, end=s - MS // 2 + 10_000, name="cudaLaunchKernel_v7000",
                      correlation=c)
            w.kernel(pid=10, device=0, stream=7, start=s, end=s + MS, name=f"k{j}", correlation=c)
        g0 = t0 + (p + 1) * MS
        if fill == "sync":
            w.runtime(pid=10, tid=1, start=g0, end=g0 + GAP, name="cudaStreamSynchronize_v3020")
        else:
            c = w.correlation()
            w.runtime(pid=10, tid=1, start=g0, end=g0 + 20_000, name="cudaMemcpyAsync_v3020", correlation=c)
            w.memcpy(pid=10, device=0, stream=copy_stream, start=g0, end=g0 + GAP, nbytes=nbytes, correlation=c,
                     src_kind=src_kind, dst_kind=2)
        if host_alloc:
            w.runtime(pid=10, tid=1, start=g0, end=g0 + GAP, name="cudaHostAlloc_v3020")
    return w.close()


def findings(path) -> tuple[dict, dict]:
    """``(row, {rule: finding})`` of the export's one GPU under the default config."""
    rep = load_report(str(path))
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), CFG, {}).row
    return row, {f["rule"]: f for f in diagnosis.of_text(row["diagnosis"])}


def test_copies_on_the_compute_stream(tmp_path):
    # 6 kept iterations [BASE + 20, BASE + 140) ms, each with one 8 MiB pinned HtoD copy on stream 7 (the only
    # kernel stream, so the compute stream) over its 3 ms gap: 6 copies, 6 × 8 MiB = 50,331,648 B, all on it.
    row, f = findings(training(tmp_path / "on.sqlite", [3] * ITERATIONS, "copy"))
    assert row["iterations"] == KEPT and row["main_category"] == "data"
    s = f["data.copy_stream"]
    assert s["outcome"] == "compute_stream"
    assert {k: s["evidence"][k] for k in ("compute_stream", "copies", "on_compute", "bytes", "bytes_on_compute_pct")} \
        == {"compute_stream": 7, "copies": 6, "on_compute": 6, "bytes": 6 * (8 << 20), "bytes_on_compute_pct": 100.0}
    assert "compute stream 7" in s["text"] and "copy stream of their own" in s["remedy"]
    # bytes per iteration 8 MiB; each copy 3 ms: 8,388,608 B / 3,000,000 ns = 2.796 GB/s; median 8 MiB: large
    v = f["data.volume"]
    assert (v["outcome"], v["evidence"]["bytes_per_iteration"], v["evidence"]["gb_per_s"], v["evidence"]["copy_ns"]) \
        == ("large_copies", 8 << 20, 2.796, 6 * GAP)
    assert f["data.host_alloc"]["outcome"] == "none"


def test_copies_on_their_own_stream(tmp_path):
    # the same copies on stream 8: none on the compute stream 7
    _, f = findings(training(tmp_path / "own.sqlite", [3] * ITERATIONS, "copy", copy_stream=8))
    s = f["data.copy_stream"]
    assert s["outcome"] == "own_stream"
    assert (s["evidence"]["compute_stream"], s["evidence"]["on_compute"], s["evidence"]["copy_streams"]) == (7, 0, [8])


@pytest.mark.parametrize("src_kind, outcome, pinned, pageable", [(1, "pinned", 6, 0), (0, "pageable", 0, 6)])
def test_pinned_vs_pageable(tmp_path, src_kind, outcome, pinned, pageable):
    # the host side of an HtoD copy is its source: srcKind 1 (PINNED) or 0 (PAGEABLE) on all 6 copies
    _, f = findings(training(tmp_path / f"kind{src_kind}.sqlite", [3] * ITERATIONS, "copy", src_kind=src_kind))
    m = f["data.host_memory"]
    assert (m["outcome"], m["evidence"]["pinned"], m["evidence"]["pageable"]) == (outcome, pinned, pageable)
    assert m["evidence"][f"{outcome}_bytes"] == 6 * (8 << 20)
    assert ("already pinned" in m["text"]) == (outcome == "pinned")
    assert ("pin the host buffers" in m["remedy"]) == (outcome == "pageable")


def test_host_alloc_inside_the_gaps(tmp_path):
    # a cudaHostAlloc over each of the 6 window gaps (3 ms each: 18 ms inside them); the one before the first
    # kernel and iteration 0's (warm-up, outside the window) are in no window gap
    _, f = findings(training(tmp_path / "alloc.sqlite", [3] * ITERATIONS, "copy", host_alloc=True))
    a = f["data.host_alloc"]
    assert a["outcome"] == "in_gaps"
    assert {k: a["evidence"][k] for k in ("calls", "gaps", "of_gaps", "overlap_ns", "apis")} == \
        {"calls": 6, "gaps": 6, "of_gaps": 6, "overlap_ns": 6 * GAP, "apis": {"cudaHostAlloc": 6}}
    assert "allocate the pinned buffers once" in a["remedy"]


def test_sync_at_the_same_place_every_iteration(tmp_path):
    # the sync gap after kernel k3 in every iteration: 4 kernels (k0..k3) from the iteration's start to the gap,
    # in all 6 kept iterations
    _, f = findings(training(tmp_path / "regular.sqlite", [3] * ITERATIONS, "sync"))
    s = f["sync.regularity"]
    assert s["outcome"] == "regular"
    assert {k: s["evidence"][k] for k in ("gaps", "iterations", "recurring_in", "position", "kernel_before",
                                          "positions", "call")} == \
        {"gaps": 6, "iterations": 6, "recurring_in": 6, "position": 4, "kernel_before": "k3", "positions": 1,
         "call": "cudaStreamSynchronize"}
    assert "6 of 6 kept iterations" in s["text"] and ".item()" in s["remedy"]
    # each sync call starts at its gap's start: the GPU already idle, no copy in flight
    assert s["evidence"]["waited_for"] == {"nothing in flight": 6}
    # and one kernel before every gap: a fixed break point, k3, in NVTX range Iteration <i>
    b = f["break_point"]
    assert (b["outcome"], b["category"], b["evidence"]["kernel"], b["evidence"]["before"], b["evidence"]["gaps"]) == \
        ("fixed", "sync", "k3", 6, 6)
    assert b["evidence"]["nvtx_range"] == "Iteration 1"  # the first gap's range (each gap's own is Iteration i)


def test_sync_at_random_places(tmp_path):
    # the gap after a different kernel in each iteration (k1, k5, k2, k9, k4, k12, k7): in the 6 kept iterations
    # 6 different positions, each in 1 iteration; 6 different kernels before the 6 gaps, each 1/6 = 16.67 %
    _, f = findings(training(tmp_path / "random.sqlite", [1, 5, 2, 9, 4, 12, 7], "sync"))
    s = f["sync.regularity"]
    assert (s["outcome"], s["evidence"]["positions"], s["evidence"]["recurring_in"], s["evidence"]["iterations"]) == \
        ("irregular", 6, 1, 6)
    assert "system and its resources" in s["remedy"]
    b = f["break_point"]
    assert (b["outcome"], b["evidence"]["kernels"], b["evidence"]["share_pct"]) == ("scattered", 6, 16.67)


def test_not_judged_and_archived(tmp_path):
    # no NVTX: a boundary gap's range cannot be named; too few gaps: no break point; under 2 %: archived
    import pandas as pd
    gaps = {"start": [0], "end": [5], "length": [5], "kernel_before": ["a"], "kernel_after": ["b"],
            "category": ["boundary"], "attribution": [[]]}
    nvtx = pd.DataFrame({"start": [], "end": [], "text": []})
    got = diagnosis.diagnose(gaps, {"start": [0], "end": [1], "pid": [1], "stream_id": [7]},
                             pd.DataFrame(columns=["start", "end", "pid", "stream_id", "kind", "copy_kind", "bytes",
                                                   "src_kind", "dst_kind"]),
                             pd.DataFrame({"start": [], "end": [], "name": []}), nvtx, [],
                             {"boundary": 5.0, "cpu": 1.5}, 2.0)
    assert [(f["rule"], f["outcome"], f["judged"]) for f in got] == [
        ("boundary.seam", "not_judged", False), ("archived", "archived", True), ("break_point", "not_judged", False)]
    assert "cannot be named" in got[0]["text"] and got[1]["remedy"] == "" and "1.50 %" in got[1]["text"]
    assert diagnosis.split(got)[1] == [got[1]]


@pytest.mark.slow
def test_diagnosis_shown_in_fix_first_record_and_gpu_page(tmp_path):
    # a real run and report: the data entry of fix_first.csv carries the copy-stream line; the medical record
    # and the GPU page show it
    path = training(tmp_path / "job.sqlite", [3] * ITERATIONS, "copy")
    out = tmp_path / "out"
    subprocess.run([GPU_IDLE, "run", path, "--out", str(out)], check=True, capture_output=True)
    subprocess.run([GPU_IDLE, "report", str(out), "--out", str(out / "report.html")], check=True, capture_output=True)
    with open(out / "fix_first.csv", newline="") as fh:
        data = [e for e in csv.DictReader(fh) if e["category"] == "data" and e["scope"] == "fleet"]
    assert len(data) == 1
    # the rule named in words (pipeline.analysis.diagnosis.RULE_NAMES), its id only in the machine outputs
    assert "which stream the copies run on: 6 of 6 host-device copies" in data[0]["diagnosis"]
    assert "data.copy_stream" not in data[0]["diagnosis"]
    assert "compute stream 7" in data[0]["diagnosis"]
    entries = json.loads((out / "fix_first.json").read_text())
    assert entries[0]["diagnosis"] == data[0]["diagnosis"]
    record = next((out / "records").glob("*.md")).read_text()
    assert "## Diagnosis" in record and "- which stream the copies run on: 6 of 6 host-device copies" in record
    page = next((out / "gpu-pages").glob("*.html")).read_text()
    assert 'data-rule="data.copy_stream" data-outcome="compute_stream"' in page
    assert "which stream the copies run on: 6 of 6 host-device copies" in (out / "report.html").read_text()


@pytest.mark.skipif(not (PROFILES / "fastvideo_h100_sp2_1s.sqlite").exists(), reason="needs the fastvideo export")
def test_fastvideo_copies_on_the_compute_stream_already_pinned():
    path = PROFILES / "fastvideo_h100_sp2_1s.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        # device 0's compute stream: the stream whose kernels run longest
        stream = con.execute("SELECT streamId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 GROUP BY streamId "
                             "ORDER BY SUM(end - start) DESC LIMIT 1").fetchone()[0]
        # its host-device copies (HtoD: host side src, DtoH: dst) by the name of their host memory kind
        kinds = dict(con.execute(
            "SELECT k.name, SUM(m.bytes) FROM CUPTI_ACTIVITY_KIND_MEMCPY m JOIN ENUM_CUDA_MEM_KIND k "
            "ON k.id = CASE m.copyKind WHEN 1 THEN m.srcKind ELSE m.dstKind END "
            "WHERE m.deviceId = 0 AND m.copyKind IN (1, 2) GROUP BY k.name").fetchall())
        on_stream = con.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = 0 AND "
                                "copyKind IN (1, 2) AND streamId = ?", (stream,)).fetchone()[0]
    finally:
        con.close()
    pinned = kinds.get("CUDA_MEMOPR_MEMORY_KIND_PINNED", 0)
    assert stream == 7 and pinned > 0.99 * sum(kinds.values())
    rep = load_report(str(path))
    key = next(k for k in rep.gpu_keys() if k.endswith("dev0"))
    row = analyse_gpu(gpu_trace(rep, key), CFG, {}).row
    f = {x["rule"]: x for x in diagnosis.of_text(row["diagnosis"])}
    s, m = f["data.copy_stream"], f["data.host_memory"]
    assert (s["outcome"], s["evidence"]["compute_stream"]) == ("compute_stream", stream)
    assert f"compute stream {stream}" in s["text"]
    assert s["evidence"]["on_compute"] == s["evidence"]["copies"] <= on_stream  # the window's copies: all on it
    assert m["outcome"] == "pinned" and "already pinned" in m["text"]


def test_kineto_trace_copy_stream_and_pageable(tmp_path):
    # a PyTorch profiler trace: 11 kernels of 1 ms on stream 7 every 4 ms ([4 i, 4 i + 1) ms), a pageable HtoD copy
    # of 4 MiB on stream 7 over each of the 10 gaps between them (the loader keeps the memcpy name's memory kinds
    # and its stream); span window [0, 41) ms: 10 copies, all on the compute stream 7, all pageable
    from pipeline.load.kineto import load_kineto
    from pipeline.synth.kineto import KinetoWriter
    w = KinetoWriter(str(tmp_path / "t.json"), pid=10, devices=[(0, "NVIDIA H100 80GB HBM3", 132)])
    for i in range(11):
        c = 2 * i + 1
        w.runtime(tid=1, start=4 * i * MS - MS // 2, end=4 * i * MS - MS // 2 + 10_000, name="cudaLaunchKernel",
                  correlation=c)
        w.kernel(device=0, stream=7, start=4 * i * MS, end=(4 * i + 1) * MS, name="gemm", correlation=c)
        if i < 10:
            w.runtime(tid=1, start=(4 * i + 1) * MS, end=(4 * i + 1) * MS + 20_000, name="cudaMemcpyAsync",
                      correlation=c + 1)
            w.memcpy(device=0, stream=7, start=(4 * i + 1) * MS, end=(4 * i + 4) * MS, copy_kind=1, nbytes=4 << 20,
                     correlation=c + 1, src_kind=0, dst_kind=2)
    rep = load_kineto(w.close())
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], {"analysis": {"window": "span"}}), {}).row
    f = {x["rule"]: x for x in diagnosis.of_text(row["diagnosis"])}
    s, m = f["data.copy_stream"], f["data.host_memory"]
    assert (s["outcome"], s["evidence"]["compute_stream"], s["evidence"]["copies"], s["evidence"]["on_compute"]) == \
        ("compute_stream", 7, 10, 10)
    assert (m["outcome"], m["evidence"]["pageable"], m["evidence"]["pageable_bytes"]) == ("pageable", 10, 10 * (4 << 20))


def test_comm_boundary_and_the_straggler_in_fix_first():
    # three comm gaps (2, 3, 5 ns) after nccl AllReduce twice and AllGather once; two boundary gaps at 100 and 300 ns,
    # the first inside the NVTX range "optimizer.step, seq = 4" [90, 200), the second inside "optimizer.step, seq = 9"
    # [290, 400): the range named without its seq number, 2 of 2
    import pandas as pd
    gaps = {"start": [10, 20, 30], "end": [12, 23, 35], "length": [2, 3, 5],
            "kernel_before": ["ncclAllReduce", "ncclAllGather", "ncclAllReduce"]}
    c = diagnosis.comm_rule(gaps)
    assert (c["outcome"], c["evidence"]) == ("waiting_for_ranks",
                                             {"gaps": 3, "ns": 10, "collective": "ncclAllReduce", "after_it": 2})
    nvtx = pd.DataFrame({"start": [90, 290], "end": [200, 400],
                         "text": ["optimizer.step, seq = 4", "optimizer.step, seq = 9"]})
    b = diagnosis.boundary_rule({"start": [100, 300], "kernel_after": ["embedding", "embedding"]}, nvtx)
    assert (b["outcome"], b["evidence"]) == ("seam", {"gaps": 2, "kernel_after": "embedding",
                                                      "nvtx_range": "optimizer.step", "in_range": 2})
    # a comm entry over two GPUs names the list's straggler after their lines
    text = fixfirst.entry_diagnosis("comm", ["r0 gpu0", "r1 gpu1"], [[c], []], ["r1 gpu1"])
    assert text.split("\n") == [f"r0 gpu0: {diagnosis.line(c)}",
                                 "straggler: r1 gpu1 (the job's GPU with most idle: look there first)"]


def test_an_entry_shows_the_evidence_its_remedy_rests_on_first():
    """An entry over four GPUs whose first three hold the category archived and the fourth a finding that fires:
    the diagnosis shows the fourth first (its remedy is the entry's), then two archived ones, then "1 more" (a fresh
    user saw a remedy over three lines that all read "archived, not prescribed")."""
    def finding(archived):
        return {"category": "cpu", "rule": "cpu.random", "text": "archived: cpu holds 1 %" if archived else
                "12 gaps after 9 different kernels", "remedy": "" if archived else "the system first",
                "archived": archived, "judged": True, "outcome": "random"}

    gpus = ["g1", "g2", "g3", "g4"]
    findings = [[finding(True)], [finding(True)], [finding(True)], [finding(False)]]
    assert fixfirst.entry_remedy("cpu", findings) == "the system first"
    assert fixfirst.entry_diagnosis("cpu", gpus, findings).split("\n") == [
        "g4: cpu random: 12 gaps after 9 different kernels → the system first",
        "g1: cpu random: archived: cpu holds 1 %", "g2: cpu random: archived: cpu holds 1 %",
        "and 1 more GPU(s) (their fleet rows' diagnosis)"]


def test_launch_rule_evidence():
    # 40 slivers holding 8 of 10 ms of the application's idle (80 %), the largest gap 1.5 ms; with no gap above the
    # threshold the text says so
    f = diagnosis.launch_rule(40, 8 * MS, 10 * MS, 1_500_000)
    assert (f["outcome"], f["evidence"]) == ("launch_bound", {"slivers": 40, "sliver_ns": 8 * MS, "share_pct": 80.0,
                                                              "max_gap_ns": 1_500_000})
    assert "largest gap is 1.500 ms" in f["text"] and "CUDA graphs" in f["remedy"]
    assert "no gap is above it" in diagnosis.launch_rule(40, 8 * MS, 8 * MS, 0)["text"]
    assert diagnosis.line(diagnosis.archived("cpu", 0.45, 2.0)) == \
        "too small to act on: cpu holds 0.45 % of the window (under 2 %): archived, not prescribed"


def _data_entry(rows) -> dict:
    """The fleet list's ``data`` entry of the fix-first list over ``rows`` (analysed fleet rows)."""
    from pipeline.fleet.reduce import build_fleet
    fixes = fixfirst.fix_list(build_fleet(rows), {})
    return fixes[(fixes["scope"] == "fleet") & (fixes["category"] == "data")].iloc[0].to_dict()


def part_export(tmp_path) -> str:
    """The export of :func:`test_recoverable_part_of_copies_on_the_compute_stream` (its comment works it out)."""
    w = ExportWriter(str(tmp_path / "part.sqlite"))
    w.mem_kinds()
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="9b5c4f8d-1111-2222-3333-444455556666")
    w.cuda_device(0, 0, 10, uuid="9b5c4f8d-1111-2222-3333-444455556666")
    for i, (a, b) in enumerate(((0, 2), (10, 11), (20, 30), (35, 40))):
        w.kernel(pid=10, device=0, stream=7, start=a * MS, end=b * MS, name=f"k{i}", correlation=100 + i)
    for a, b in ((2, 10), (11, 20), (30, 35)):
        w.memcpy(pid=10, device=0, stream=7, start=a * MS, end=b * MS, nbytes=8 << 20, src_kind=1, dst_kind=2)
    return w.close()


def test_recoverable_part_of_copies_on_the_compute_stream(tmp_path):
    # span window [0, 40) ms, one stream 7: kernels [0, 2) [10, 11) [20, 30) [35, 40) ms; a pinned 8 MiB HtoD copy on
    # stream 7 (the compute stream) over each hole [2, 10) [11, 20) [30, 35): three data gaps of 8, 9, 5 = 22 ms.
    # What a copy stream could hide, per gap min(gap, compute since the previous data gap's end): gap 1: 2 ms of
    # compute before it -> 2; gap 2: [10, 11) -> 1; gap 3: [20, 30) = 10 ms -> 5 (the whole gap): 8 of 22 ms.
    # H100 at 4.00 USD/h, 730 h: data = 22/40 x 2920 = 1606.00 USD; recoverable 8/40 x 2920 = 584.00 USD
    rep = load_report(part_export(tmp_path))
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], {"analysis": {"window": "span"}}), {}).row
    f = {x["rule"]: x for x in diagnosis.of_text(row["diagnosis"])}
    s = f["data.copy_stream"]
    assert (row["cat_data_ns"], row["fix_data_usd_per_month"]) == (22 * MS, 1606.0)
    assert (s["outcome"], s["evidence"]["data_ns"], s["evidence"]["hideable_ns"]) == ("compute_stream", 22 * MS, 8 * MS)
    e = _data_entry([row])
    assert (e["idle_usd_per_month"], e["fix_wins_back_usd_per_month"]) == (1606.0, 584.0)
    assert e["fix_wins_back_basis"] == ("copies on the compute stream: only what a copy stream of their own could hide "
                                      "behind compute, 8.0 of 22.0 ms on 1 of 1 GPU(s)")
    # the remedy is the rules' (own copy stream + prefetch; already pinned), not the generic one
    assert e["remedy"] == f["data.copy_stream"]["remedy"]
    assert e["remedy"].startswith("move the copies to a copy stream of their own and prefetch")
    # its diagnosis lines name the GPU by its one display name (model, number in the job, short id), not by the
    # export's path and the GPU's UUID
    assert row["gpu_key"] == "GPU-9b5c4f8d-1111-2222-3333-444455556666"
    lines = e["diagnosis"].split("\n")
    assert len(lines) == 5 and all(x.startswith("H100 #1 9b5c4f8d: ") for x in lines)
    assert lines[0] == "H100 #1 9b5c4f8d: " + diagnosis.line(f["data.copy_stream"])
    assert str(tmp_path) not in e["diagnosis"] and "1111-2222" not in e["diagnosis"]
    # what people read first: the part a fix wins back, with its basis (md table cell); the idle's dollars apart
    from pipeline.report.html import fix_usd_text, wins_back_text
    assert wins_back_text(e) == ("$584.00 (bounded by the evidence: copies on the compute stream: only what a copy "
                                 "stream of their own could hide behind compute, 8.0 of 22.0 ms on 1 of 1 GPU(s))")
    assert fix_usd_text(e) == "$1,606.00"


@pytest.mark.skipif(not (PROFILES / "fastvideo_h100_sp2_1s.sqlite").exists(), reason="needs the fastvideo export")
def test_fastvideo_recoverable_is_what_a_copy_stream_could_hide():
    path = PROFILES / "fastvideo_h100_sp2_1s.sqlite"
    rep = load_report(str(path))
    key = next(k for k in rep.gpu_keys() if k.endswith("dev0"))
    row = analyse_gpu(gpu_trace(rep, key), CFG, {}).row
    w0, w1 = row["window_start_ns"], row["window_end_ns"]
    # a plain second computation: device 0's kernels clipped to the window, merged into runs; the holes between
    # runs over 1 ms that a host-device copy overlaps are the data gaps; per gap min(gap, the runs' ns since the
    # previous data gap's end)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ks = con.execute("SELECT max(start, ?), min(end, ?) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = 0 "
                         "AND end > ? AND start < ? ORDER BY start", (w0, w1, w0, w1)).fetchall()
        cp = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = 0 "
                         "AND copyKind IN (1, 2)").fetchall()
    finally:
        con.close()
    runs = []
    for s, e in ks:
        if runs and s <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], e)
        else:
            runs.append([s, e])
    data = [(a[1], b[0]) for a, b in zip(runs, runs[1:])
            if b[0] - a[1] > 1_000_000 and any(c0 < b[0] and c1 > a[1] for c0, c1 in cp)]
    hide, prev = 0, runs[0][0]
    for s, e in data:
        hide += min(e - s, sum(max(0, min(r1, s) - max(r0, prev)) for r0, r1 in runs))
        prev = e
    data_ns = sum(e - s for s, e in data)
    ev = {x["rule"]: x for x in diagnosis.of_text(row["diagnosis"])}["data.copy_stream"]["evidence"]
    assert (ev["data_ns"], ev["hideable_ns"]) == (row["cat_data_ns"], hide) == (data_ns, hide)
    e = _data_entry([row])
    assert e["idle_usd_per_month"] == row["fix_data_usd_per_month"]
    assert e["fix_wins_back_usd_per_month"] == round(row["fix_data_usd_per_month"] * hide / data_ns, 2)
    assert e["fix_wins_back_usd_per_month"] < 0.05 * e["idle_usd_per_month"]
    assert f"{hide / 1e6:,.1f} of {data_ns / 1e6:,.1f} ms" in e["fix_wins_back_basis"]
    assert e["remedy"].startswith("move the copies to a copy stream of their own")
    assert "pinned buffers allocated once" not in e["remedy"]
    # named by the GPU's display name (the export names no model here: "GPU"), not by the export's path
    model = "GPU" if not row["gpu_model"] else "H100"
    assert e["diagnosis"].startswith(f"{model} #1 pid111/dev0: which stream the copies run on: ") and str(path) not in e["diagnosis"]


def test_entry_remedy_follows_the_rule_that_fired(tmp_path):
    # the same copies as test_copies_on_the_compute_stream (on the compute stream 7), pageable (src_kind 0), with a
    # cudaHostAlloc over every gap: the entry prescribes pinning (the copies are pageable: the pinned allocations are
    # not what they copy from; its own diagnosis says "pin", never contradicted), with pinned copies allocating once,
    # then the copy stream; the export with pinned copies and no allocation: the copy stream (pinned finds nothing
    # wrong)
    def remedy(**kw) -> str:
        row, f = findings(training(tmp_path / f"{len(kw)}-{kw.get('src_kind')}.sqlite", [3] * ITERATIONS, "copy", **kw))
        assert f["data.host_alloc"]["outcome"] == ("in_gaps" if kw.get("host_alloc") else "none")
        return fixfirst.entry_remedy("data", [list(f.values())])
    assert remedy(src_kind=0, host_alloc=True).startswith("pin the host buffers (pin_memory=True, cudaHostAlloc) once")
    assert remedy(src_kind=1, host_alloc=True).startswith("allocate the pinned buffers once at the start")
    assert remedy(src_kind=0).startswith("pin the host buffers")
    assert remedy(src_kind=1).startswith("move the copies to a copy stream of their own")
    # no rule judged: the generic remedy, saying so
    import pandas as pd
    unjudged = diagnosis.copy_stream_rule(pd.DataFrame(), {"start": [], "end": [], "pid": [], "stream_id": []})
    assert unjudged["outcome"] == "not_judged"
    assert fixfirst.entry_remedy("data", [[unjudged]]) == (
        "pinned buffers allocated once, prefetch/overlap H2D with compute, more loader workers "
        "(generic: no diagnostic rule could be judged)")


@pytest.mark.slow
def test_what_a_fix_wins_back_reads_the_same_in_fix_first_record_and_gpu_page(tmp_path):
    # the export of the test above (span window): 8 of the 22 ms of data idle a copy stream could hide, 584.00 of
    # 1,606.00 USD/month. The fix-first report, the medical record and the GPU page say it in the same words.
    path = part_export(tmp_path)
    cfg = tmp_path / "span.yaml"
    cfg.write_text("analysis:\n  window: span\n")
    out = tmp_path / "out"
    subprocess.run([GPU_IDLE, "run", path, "--out", str(out), "--config", str(cfg)], check=True, capture_output=True)
    subprocess.run([GPU_IDLE, "report", str(out), "--out", str(out / "report.html")], check=True, capture_output=True)
    said = ("data: a fix wins back $584.00: copies on the compute stream: only what a copy stream of their own could "
            "hide behind compute, 8.0 of 22.0 ms on 1 of 1 GPU(s)")
    with open(out / "fix_first.csv", newline="") as fh:
        data = [e for e in csv.DictReader(fh) if e["category"] == "data" and e["scope"] == "fleet"]
    assert (float(data[0]["fix_wins_back_usd_per_month"]), float(data[0]["idle_usd_per_month"])) == (584.0, 1606.0)
    # the speed-ups beside it: the bounded fix's (8 ms of the window gone) and, labelled, the category's (22 ms)
    window = int(data[0]["window_ns"])
    fast, whole = float(data[0]["recoverable_speedup"]), float(data[0]["speedup"])
    assert (fast, whole) == (round(window / (window - 8_000_000), 4), round(window / (window - 22_000_000), 4))
    assert said.removeprefix("data: ") in (out / "report.html").read_text()
    said += f"; speed-up {fast:.3f}× (if all of the category's idle went: {whole:.3f}×)"
    assert (f'{fast:.3f}×<span class="whole-speedup" title="the speed-up if all of the category' + "'" + 's idle went, '
            f'not only what a fix wins back">if all of the category&#39;s idle went: {whole:.3f}×</span>'
            ) in (out / "report.html").read_text()
    record = next((out / "records").glob("*.md")).read_text()
    section = record[record.index("## Diagnosis"):]
    escaped = said.replace("$", r"\$")  # Markdown-escaped: a $ would start TeX in some renderers
    assert "- " + escaped in section.split("\n")
    page = next((out / "gpu-pages").glob("*.html")).read_text()
    assert '<ul id="diagnosis-recoverable"><li>' + said.replace("'", "&#39;") + "</li></ul>" in page


def test_recoverable_lines_say_nothing_when_the_whole_idle_is_recoverable():
    # copies on their own stream: no part bounded, no line; a bounded part 0.50 of 1.00 USD reads; NaN: unpriced, none
    from pipeline.report.words import recoverable_lines, wins_back
    own = [{"category": "data", "rule": "data.copy_stream", "outcome": "own_stream", "evidence": {}}]
    assert fixfirst.gpu_recoverable({"fix_data_usd_per_month": 1.0}, own) == []
    on = [{"category": "data", "rule": "data.copy_stream", "outcome": "compute_stream",
           "evidence": {"hideable_ns": 1 * MS, "data_ns": 2 * MS}}]
    parts = fixfirst.gpu_recoverable({"fix_data_usd_per_month": 1.0}, on)
    assert [(p["category"], p["idle_usd_per_month"], p["fix_wins_back_usd_per_month"]) for p in parts] == [("data", 1.0, 0.5)]
    assert recoverable_lines(parts) == ["data: a fix wins back $0.50: copies on the compute stream: only what a copy "
                                        "stream of their own could hide behind compute, 1.0 of 2.0 ms on 1 of 1 GPU(s)"]
    assert recoverable_lines(fixfirst.gpu_recoverable({}, on)) == []  # unpriced: no dollars to bound
    assert wins_back(1.0, 0.996, "x") == "" and wins_back(1.0, 0.994, "x") == "a fix wins back $0.99: x"


def findings_under(path, overrides: dict) -> dict:
    """``{rule: finding}`` of the export's one GPU under the defaults with ``overrides`` (config sections)."""
    rep = load_report(str(path))
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], overrides), {}).row
    return {f["rule"]: f for f in diagnosis.of_text(row["diagnosis"])}


def test_the_rule_thresholds_are_the_configs(tmp_path):
    # kept iterations 1..6 sync after k3 (5 times) and after k9 (once): 6 sync gaps of 3 ms, 5 of them at the same
    # place (4 kernels into the iteration, after k3) and after the same kernel.
    path = training(tmp_path / "five.sqlite", [3, 3, 3, 3, 3, 3, 9], "sync")
    f = findings_under(path, {})
    # defaults: regular when it recurs in >= ceil(0.8 x 6) = 5 kept iterations: 5 -> regular;
    # break point when one kernel is before >= 0.5 x 6 = 3 gaps: k3 before 5 -> fixed (83.33 %)
    assert (f["sync.regularity"]["outcome"], f["sync.regularity"]["evidence"]["recurring_in"]) == ("regular", 5)
    assert (f["sync.regularity"]["evidence"]["position"], f["sync.regularity"]["evidence"]["kernel_before"]) == (4, "k3")
    assert (f["break_point"]["outcome"], f["break_point"]["evidence"]["before"],
            f["break_point"]["evidence"]["share_pct"]) == ("fixed", 5, 83.33)
    # diagnosis.sync_regular_share 0.9: ceil(5.4) = 6 iterations needed, 5 found -> irregular
    f = findings_under(path, {"diagnosis": {"sync_regular_share": 0.9}})
    assert f["sync.regularity"]["outcome"] == "irregular" and f["break_point"]["outcome"] == "fixed"
    # diagnosis.break_point_share 0.9: 5 of 6 < 5.4 -> scattered (2 kernels before the gaps)
    f = findings_under(path, {"diagnosis": {"break_point_share": 0.9}})
    assert (f["break_point"]["outcome"], f["break_point"]["evidence"]["kernels"]) == ("scattered", 2)
    assert f["sync.regularity"]["outcome"] == "regular"
    # diagnosis.break_point_min_gaps 7: 6 gaps are too few -> not judged
    f = findings_under(path, {"diagnosis": {"break_point_min_gaps": 7}})
    assert (f["break_point"]["outcome"], f["break_point"]["judged"]) == ("not_judged", False)


def test_the_copy_thresholds_are_the_configs(tmp_path):
    # 6 pinned 8 MiB copies (8,388,608 B each, median the same): large at the default 1 MiB, small at 16 MiB
    path = training(tmp_path / "big.sqlite", [3] * ITERATIONS, "copy", copy_stream=8)
    assert findings_under(path, {})["data.volume"]["outcome"] == "large_copies"
    assert findings_under(path, {"diagnosis": {"small_copy_bytes": 16 << 20}})["data.volume"]["outcome"] == "small_copies"
    # on stream 8, none of the bytes on the compute stream 7: own stream at 0.5; at share 0, 0 >= 0 x bytes: on it
    assert findings_under(path, {})["data.copy_stream"]["outcome"] == "own_stream"
    assert findings_under(path, {"diagnosis": {"copy_stream_share": 0.0}})["data.copy_stream"]["outcome"] == \
        "compute_stream"


ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"


def late_rank_export(path) -> str:
    """Two ranks (pid 10 + r on device r) of one export, 5 iterations of 10 ms from 0: a ``gemm`` on each rank over
    [10i, 10i + 4) ms; rank 0 enters the all-reduce at 10i + 4 ms, rank 1 (late) syncs over [10i + 4, 10i + 6) ms
    (cudaStreamSynchronize) and enters at 10i + 6 ms; both all-reduces end at 10i + 8 ms."""
    w = ExportWriter(str(path))
    for i in range(5):
        t = 10 * i * MS
        for r in range(2):
            enter = t + (6 if r == 1 else 4) * MS
            w.kernel(pid=10 + r, device=r, stream=7, start=t, end=t + 4 * MS, name="gemm")
            if r == 1:
                w.runtime(pid=11, tid=1, start=t + 4 * MS, end=enter, name="cudaStreamSynchronize_v3020")
            w.kernel(pid=10 + r, device=r, stream=20, start=enter, end=t + 8 * MS, name=ALLREDUCE)
    return w.close()


def test_the_comm_rule_points_at_the_late_rank_and_its_own_idle(tmp_path):
    # span window [0, 48) ms on both. Both ranks: 4 comm gaps after the all-reduce, [10i + 8, 10i + 10) ms, 8 ms =
    # 16.6667 %. Rank 0 waits 2 ms in each of the 5 calls (10 ms = 20.8333 % of 48 ms), last in none; rank 1 is last
    # in all 5 (chronic) and its own sync idle is the 5 holes [10i + 4, 10i + 6): 10 ms = 20.8333 %.
    path = late_rank_export(tmp_path / "ranks.sqlite")
    out = tmp_path / "out"
    subprocess.run([GPU_IDLE, "run", path, "--out", str(out), "--window", "span", "--no-cache"], check=True,
                   capture_output=True)
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).sort_values("device_id").reset_index(drop=True)
    assert fleet["collective_chronic"].tolist() == [False, True]
    assert [float(x) for x in fleet["cat_comm_pct"]] == [16.6667, 16.6667]
    assert [float(x) for x in fleet["cat_sync_pct"]] == [0.0, 20.8333]
    f0 = {x["rule"]: x for x in diagnosis.of_text(fleet.loc[0, "diagnosis"])}
    f1 = {x["rule"]: x for x in diagnosis.of_text(fleet.loc[1, "diagnosis"])}
    c0 = f0["comm.collective"]
    assert {k: c0["evidence"][k] for k in ("gaps", "ns", "wait_ns", "wait_pct", "calls", "last_count", "chronic")} == \
        {"gaps": 4, "ns": 8 * MS, "wait_ns": 10 * MS, "wait_pct": 20.8333, "calls": 5, "last_count": 0, "chronic": False}
    assert "waited 10.000 ms for the last rank (20.8333 % of the window) and entered last in 0 of 5 calls" in c0["text"]
    # not the late rank: the straggler first (the page's fix-first list names it: the job's collective_late_rank)
    assert c0["remedy"] == "one GPU cannot fix it: look at the straggler first, then overlap communication with compute"
    assert "comm.late_rank" not in f0
    c1 = f1["comm.collective"]
    assert (c1["evidence"]["last_count"], c1["evidence"]["chronic"]) == (5, True)
    assert c1["text"].endswith("it is the late rank itself, the one the others wait for")
    late = f1["comm.late_rank"]
    assert (late["category"], late["outcome"], late["evidence"]) == \
        ("sync", "late_rank", {"last_count": 5, "calls": 5, "category": "sync", "pct": 20.8333})
    assert late["remedy"] == "this rank is the one others wait for: fix its own sync first"
    # the late rank's sync entry in the fix-first list prescribes that
    # (and its own sync finding's remedy after it), and the comm entry names the late rank
    with open(out / "fix_first.csv", newline="") as fh:
        fleet_entries = {e["category"]: e for e in csv.DictReader(fh) if e["scope"] == "fleet"}
    # ... and goes on to what its own sync finding prescribes (the gaps follow one kernel: the stage after it)
    assert fleet_entries["sync"]["remedy"] == (
        "this rank is the one others wait for: fix its own sync first: look downstream of that stage: what should "
        "start after gemm")
    assert "the GPU the others wait for: this GPU entered last in 5 of 5 collective calls" in fleet_entries["sync"]["diagnosis"]
    last = fleet_entries["comm"]["diagnosis"].split("\n")[-1]
    assert last.startswith("late rank: ") and last.endswith(" (enters the collectives last: the others wait for it; "
                                                            "fix its own idle first)")


@pytest.mark.slow
def test_an_archived_category_is_shown_apart_and_not_prescribed(tmp_path):
    # the regular sync export: 6 kept iterations over [BASE + 20, BASE + 140) ms = 120 ms, one 3 ms sync gap each:
    # sync 18 / 120 = 15.00 % of the window, the only idle. Under analysis.actionable_pct 20 it is archived: one
    # archived finding, no rule (no sync.regularity, no break point), and no remedy in any of the three views.
    path = training(tmp_path / "arch.sqlite", [3] * ITERATIONS, "sync")
    cfg = tmp_path / "arch.yaml"
    cfg.write_text("analysis:\n  actionable_pct: 20\n")
    out = tmp_path / "out"
    subprocess.run([GPU_IDLE, "run", path, "--out", str(out), "--config", str(cfg)], check=True, capture_output=True)
    subprocess.run([GPU_IDLE, "report", str(out), "--out", str(out / "report.html")], check=True, capture_output=True)
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert float(fleet.loc[0, "cat_sync_pct"]) == 15.0
    got = diagnosis.of_text(fleet.loc[0, "diagnosis"])
    assert [(f["rule"], f["category"], f["evidence"]) for f in got] == \
        [("archived", "sync", {"pct": 15.0, "threshold_pct": 20.0})]
    text = "sync holds 15.00 % of the window (under 20 %): archived, not prescribed"
    # fix-first: the entry is still listed (its dollars), its remedy says it is archived, its diagnosis the line
    with open(out / "fix_first.csv", newline="") as fh:
        (entry,) = [e for e in csv.DictReader(fh) if e["scope"] == "fleet"]
    assert (entry["category"], entry["remedy"]) == ("sync", fixfirst.ARCHIVED)
    assert entry["remedy"] == "archived: under the actionable share of the window on its GPUs, not prescribed"
    assert entry["diagnosis"].endswith(f": too small to act on: {text}")
    # the record: apart, after the (empty) prescribed lines, as one "archived" line
    record = next((out / "records").glob("*.md")).read_text()
    section = record[record.index("## Diagnosis"):].split("\n## ")[0]
    assert [x for x in section.split("\n") if x.startswith("- ")] == \
        [f"- archived (under the actionable share, not prescribed): {text}"]
    # the GPU page: no prescribed line, the archived paragraph
    page = next((out / "gpu-pages").glob("*.html")).read_text()
    block = page[page.index('<section id="diagnosis">'):page.index("</section>", page.index('<section id="diagnosis">'))]
    assert "<li " not in block and "remedy:" not in block
    assert (f'<p class="note" id="diagnosis-archived">Archived (under the actionable share of the window, not '
            f'prescribed): {text}</p>') in block
