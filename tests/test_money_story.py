"""Issue 45's leftovers (the money story of the report views), each with figures worked out by hand: no rounded
value that contradicts its own qualifier, compare's printed iteration lengths and a toy capture's ratio withheld,
(and the other points below)."""
from __future__ import annotations

import math

import pytest

MS = 1_000_000


# ---- f. a rounded figure never contradicts its qualifier -------------------------------------------------------------

def test_a_figure_under_or_over_its_bound_never_prints_as_the_bound():
    """1.996 % under 2 % reads 1.99 (main: 2.00 % (under 2 %)); 2.004 over 2 reads 2.01; a figure far from its bound
    rounds as usual; an archived category's text, a toy window of 49,999,999 ns under 50 ms (main: 0.050000 s (under
    0.05 s)) and an iteration spread of 50.00001 % over 50 % (main: 50 % (over 50 %)) say so."""
    from pipeline.analysis import diagnosis
    from pipeline.analysis.confidence import tier
    from pipeline.model import beside_bound

    assert [beside_bound(1.996, 2), beside_bound(1.994, 2), beside_bound(2.004, 2), beside_bound(1.5, 2),
            beside_bound(2.5, 2), beside_bound(2.0, 2)] == ["1.99", "1.99", "2.01", "1.50", "2.50", "2.00"]
    assert diagnosis.archived("cpu", 1.996, 2.0)["text"] == ("cpu holds 1.99 % of the window (under 2 %): archived, "
                                                             "not prescribed")
    assert tier(window_ns=49_999_999, kernel_count=500, iterations=25, spread=1.0) == (
        "toy", ["window 0.049999 s (under 0.05 s)"])
    got = tier(window_ns=2_000 * MS, kernel_count=500, iterations=25, spread=50.00001)
    assert "iteration spread 50.0001 % (over 50 %)" in got[1], got


# ---- h, i. compare: each side's iteration length printed, a toy capture's ratio withheld -----------------------------

def _row(tier: str, iteration_ns: int, idle_ns: int = 10 * MS) -> dict:
    return {"cluster": "c", "job": "j", "report": "r.sqlite", "gpu_key": "GPU-0", "status": "ok", "rank": "0",
            "device_ids": "0", "pid": 1, "gpu_model": "NVIDIA H100", "window_rule": "periodic",
            "window_ns": 100 * MS, "idle_ns": idle_ns, "iterations": 10, "iteration_mean_ns": iteration_ns,
            "iteration_cv": 0.0, "idle_pct_sd": 0.0, "rate_usd_per_hour": 4.0, "confidence_tier": tier,
            "confidence_note": "" if tier in ("medium", "high") else f"note {tier}"}


def test_compare_prints_each_sides_iteration_and_withholds_a_toy_ratio():
    """Before 10 ms iterations, after 4 ms: the text print gives both lengths, the change (−60.00 %) and the
    speed-up 10 / 4 = 2.500x for two trusted sides (main: no iteration line in the text print). With a toy before
    side (its 10 ms from a capture too small to hold a real iteration) the speed-up is withheld in the text, the
    Markdown and compare.csv (empty cell), saying why; a low side's is shown, marked."""
    from pipeline.compare.result import compare
    from pipeline.compare.sides import Side
    from pipeline.report.compare import csv_rows, render_html, render_markdown, render_text

    def run(tier_b: str):
        sides = (Side("before", "b", "b", [_row(tier_b, 10 * MS)], [], 730.0),
                 Side("after", "a", "a", [_row("medium", 4 * MS)], [], 730.0))
        return compare(sides, force=True)

    ok = run("medium")   # forced: the kernel names are not read (rows by hand), so every figure is marked
    assert ("  iteration 10.000 ms -> 4.000 ms (\u221260.00 %); faster, by more than the noise floor of 0.00 %; "
            "speed-up 2.500x [forced: not comparable]") in render_text(ok)
    assert [r["speedup"] for r in csv_rows(ok) if r["level"] in ("gpu", "job")] == [2.5, 2.5]
    toy = run("toy")
    why = ("speed-up withheld: the before side is a toy capture (tier toy), too small for an iteration length to "
           "compare")
    assert ("  iteration 10.000 ms -> 4.000 ms (\u221260.00 %); faster, by more than the noise floor of 0.00 %; "
            f"{why} [forced: not comparable] [low confidence]") in render_text(toy)
    assert why in render_html(toy) and "2.500x" not in render_html(toy) and "2.500x" in render_html(ok)
    md = render_markdown(toy)
    assert md.count(why) == 2 and "2.500x" not in md   # the job and its one GPU pair
    assert [r["speedup"] for r in csv_rows(toy) if r["level"] in ("gpu", "job")] == [None, None]
    low = run("low")
    assert "speed-up 2.500x" in "\n".join(render_text(low)) and "[low confidence]" in "\n".join(render_text(low))


# ---- g. a capture begun mid-run: start-up not measured ---------------------------------------------------------------

def test_startup_cut_by_hand_and_on_the_real_inputs():
    """A capture holds its process's start when a memory-allocating call comes before the first kernel (at 100):
    cudaMalloc at 10 or hipMalloc at 20 -> measured; only a launch, an allocation after the kernel, or no call at
    all -> cut. The real inputs: tiny_2kernels.sqlite (cudaMalloc 213 ms before its first kernel) measured; the two
    H100 exports (windows cut from longer captures: their rows begin 0.1–2.6 ms before the first kernel, 31.9 and
    120.1 s after the capture's start) and every PyTorch profiler trace (started inside the running process) cut.
    main: every one read as a start-up of 31.857 s, 120.104 s, 0.855 s, ..."""
    import glob

    import numpy as np
    import pandas as pd

    from conftest import KINETO, PROFILES
    from pipeline.analysis.analyse import distinct_values, startup_cut
    from pipeline.load.kineto import load_kineto
    from pipeline.load.report import load_report

    def calls(*pairs):
        return pd.DataFrame({"start": [t for t, _ in pairs], "name": [n for _, n in pairs]})

    assert startup_cut(calls((10, "cudaMalloc"), (90, "cudaLaunchKernel")), 100) is False
    assert startup_cut(calls((20, "hipMalloc")), 100) is False
    assert startup_cut(calls((90, "cudaLaunchKernel"), (150, "cudaMalloc")), 100) is True
    assert startup_cut(calls(), 100) is True
    # the names as the loader gives them (categorical; an unused category, a missing name): read by their codes
    named = calls((10, "cudaLaunchKernel"), (20, None), (150, "cudaMalloc"))
    named["name"] = pd.Categorical(named["name"], categories=["cudaHostAlloc", "cudaLaunchKernel", "cudaMalloc"])
    assert startup_cut(named, 100) is True and startup_cut(named, 151) is False
    assert sorted(map(str, distinct_values(named["name"]))) == ["cudaLaunchKernel", "cudaMalloc", "nan"]
    assert distinct_values(named["name"], np.array([True, False, False])) == ["cudaLaunchKernel"]
    got = {}
    for path in sorted(glob.glob(str(PROFILES / "*.sqlite"))) + sorted(glob.glob(str(KINETO / "*.json.gz"))):
        r = load_kineto(path) if path.endswith(".gz") else load_report(path)
        got[path.rsplit("/", 1)[1]] = startup_cut(r.runtime, int(r.kernels["start"].min()))
    assert got == {"fastvideo_h100_sp2_1s.sqlite": True, "tiny_2kernels.sqlite": False,
                   "train_h100_2gpu_nccl.sqlite": True, "a100_ws16_5streams_rank0.json.gz": True,
                   "a100_ws2_nccl_rank0.json.gz": True, "mi250_rocm_minitoy.json.gz": True,
                   "v100_resnet_ns_rank0.json.gz": True, "ws128_sampled_rank0.json.gz": True,
                   "ws128_sampled_rank1.json.gz": True}


def _capture_rows(*gpus) -> list[dict]:
    """A job's rows for :func:`pipeline.report.medical.job_capture`: ``(gpu_key, startup_wait_ns, startup_cut)``."""
    return [{"report": "r.sqlite", "gpu_key": key, "job_kind": "training",
             "job_kind_source": "NVTX range 'step' (window.training_ranges)", "capture_ns": 100 * MS,
             "capture_idle_ns": 10 * MS, "window_left_out_idle_pct": 0.0, "window_ns": 100 * MS, "idle_ns": 10 * MS,
             "startup_wait_ns": wait, "startup_cut": cut, "graph_capture_ns": 0, "startup_only": False}
            for key, wait, cut in gpus]


def test_records_say_startup_in_seconds_or_not_measured_and_name_no_key():
    """Issue 45 a, g, on a job's rows by hand: g1 waited 1,517,727,052 ns (measured), g2 120,104,473,000 ns of a
    capture begun mid-run: the record gives the longest measured, 1.518 s on g1 (main: 120,104.473 ms, g2's), and
    says 1 of 2 GPUs' start-up was not measured; both cut: no figure at all; the evidence names no configuration key
    (main: "(window.training\\_ranges)"), the unpriced hint says it in words (main: `cost.rates`, `cost.unlisted`)."""
    from pipeline.report.medical import capture_line, idle_cost_line, job_capture

    names = {("r.sqlite", "g1"): "GPU #1 g1", ("r.sqlite", "g2"): "GPU #2 g2"}
    c = job_capture(_capture_rows(("g1", 1_517_727_052, False), ("g2", 120_104_473_000, True)), names)
    assert (c["startup_wait_ns"], c["startup_gpu"], c["startup_cut"]) == (1_517_727_052, "GPU #1 g1", 1)
    assert capture_line(c) == (
        "Job kind: training (NVTX range 'step'). The capture (first kernel to last) was idle 10.00 % of 200.000 ms "
        "over 2 GPUs, the window 10.00 %: the window leaves out 0.00 % of the capture's idle. Start-up wait before "
        "the first kernel: 1.518 s (the longest, GPU #1 g1); apart, never priced. Start-up not measured: 1 of 2 "
        "GPUs' captures began mid-run (no memory allocated before the first kernel), so the time before the first "
        "kernel is not the job's start-up.")
    both = job_capture(_capture_rows(("g1", 31_857_164_000, True), ("g2", 120_104_473_000, True)), names)
    assert both["startup_wait_ns"] is None and both["startup_cut"] == 2
    line = capture_line(both)
    assert "Start-up not measured: their captures began mid-run" in line and " s " not in line.split("idle.")[1]
    assert "31.857" not in line and "120.104" not in line
    unpriced = idle_cost_line([{"idle_usd_per_month": float("nan"), "unpriced": True, "gpu_model": "AMD Radeon"}], "")
    assert "cost." not in unpriced and "a label, or a new rate-card entry" in unpriced


# ---- e. the sampled meter: the CSV cell is empty where the pages say "no reading" ------------------------------------

def test_the_meter_cell_is_empty_where_the_page_says_no_reading(tmp_path):
    """tiny_2kernels.sqlite's window (18.3 ms) holds 1 sample period, under the 6 a reading needs: its fleet.csv and
    report CSV cells are empty and its GPU page says "no reading" (main: 100.0 in the CSV beside "no reading" on the
    page). Its start-up is measured (a cudaMalloc before its first kernel): 1.518 s on the page and in the record.
    The rollup by hand: GPU a 8 periods, 6 busy; GPU b 2 periods, 2 busy: 100 × 6 / 8 = 75.0 over a alone (main:
    100 × 8 / 10 = 80.0 over both)."""
    import pandas as pd
    from click.testing import CliRunner

    from conftest import PROFILES
    from pipeline.cli import main
    from pipeline.fleet.reduce import rollup
    from pipeline.schema import FLEET_COLUMNS, conform

    out = tmp_path / "o"
    for args in (["run", str(PROFILES / "tiny_2kernels.sqlite"), "--out", str(out), "--no-cache"],
                 ["report", str(out), "--out", str(out / "report.html")],
                 ["report", str(out), "--out", str(tmp_path / "r.csv"), "--format", "csv"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
    (row,) = pd.read_csv(out / "fleet.csv", keep_default_na=False).to_dict("records")
    assert (row["sample_periods"], row["sampled_util_pct"], row["startup_cut"]) == (1, "", False)
    (csv_row,) = pd.read_csv(tmp_path / "r.csv", keep_default_na=False).to_dict("records")
    assert "sampled_util_pct" not in csv_row and csv_row["startup_cut"] is False   # the report CSV has no meter column
    (page,) = (out / "gpu-pages").iterdir()
    text = page.read_text(encoding="utf-8")
    assert "no reading: only 1 sample period(s) in this window" in text
    assert "start-up wait before the first kernel 1.518 s" in text and "startup-cut" not in text
    assert "Start-up wait before the first kernel: 1.518 s; apart, never priced." in (
        out / "records" / "tiny_2kernels.md").read_text(encoding="utf-8")
    rows = [{"cluster": "c", "job": "j", "report": r, "gpu_key": "g", "status": "ok", "window_ns": 10 * MS,
             "idle_ns": MS, "sample_periods": p, "sampled_busy_periods": b, "confidence_tier": "medium"}
            for r, p, b in (("a.sqlite", 8, 6), ("b.sqlite", 2, 2))]
    got = rollup(conform(pd.DataFrame(rows), FLEET_COLUMNS), ["cluster"]).iloc[0]
    assert (int(got["sample_periods"]), float(got["sampled_util_pct"])) == (10, 75.0)


# ---- b. the comm remedy names the straggler ------------------------------------------------------------------------

def test_the_comm_remedy_names_the_straggler():
    """The comm rule asks to look at the straggler first: a fix-first entry names it (one job: its straggler; several:
    each job's, or that none stands out in one; none known: says so), and a GPU page names the GPU it waits on (the
    straggler's own page prescribes its own remedy). main: "look at the straggler first" on every one, naming none."""
    import numpy as np

    from pipeline.analysis import diagnosis as dx
    from pipeline.analysis.fixfirst import asks_for_straggler, job_stragglers
    from pipeline.report.gpu_page import prescription

    remedy = dx.comm_rule({"length": [MS], "kernel_before": ["nccl"]})["remedy"]
    assert remedy == "one GPU cannot fix it: look at the straggler first, then overlap communication with compute"
    assert dx.name_straggler(remedy, ["H100 #13 750df4f4"]) == (
        "one GPU cannot fix it: look at the straggler H100 #13 750df4f4 first, then overlap communication with compute")
    assert dx.name_straggler(remedy, ["H100 #13 750df4f4 of llm", "none stands out in vit"]) == (
        "one GPU cannot fix it: look at each job's straggler first (H100 #13 750df4f4 of llm; none stands out in vit), "
        "then overlap communication with compute")
    assert dx.name_straggler(remedy, []) == ("one GPU cannot fix it: look at the straggler first (no GPU captured here "
                                             "stands out as one), then overlap communication with compute")
    assert dx.name_straggler("CUDA graphs", ["x"]) == "CUDA graphs"
    # rows: llm's g1 (straggler) and g2, vit's v1 and v2 (no straggler)
    cols = {"job": np.asarray(["c\x00llm", "c\x00llm", "c\x00vit", "c\x00vit"], dtype=object),
            "name": np.asarray(["G1", "G2", "V1", "V2"], dtype=object),
            "straggler": np.asarray([True, False, False, False])}
    assert job_stragglers(cols, np.asarray([1])) == ["G1"]
    assert job_stragglers(cols, np.asarray([2, 3])) == []
    assert job_stragglers(cols, np.asarray([1, 2])) == ["G1 of llm", "none stands out in vit"]
    finding = dx.comm_rule({"length": [MS], "kernel_before": ["nccl"]})
    assert asks_for_straggler([finding]) and not asks_for_straggler([{**finding, "archived": True}])
    summary = {"main_category": "comm", "cat_comm_ns": MS, "cat_comm_pct": 11.86, "diagnosis": dx.to_text([finding])}
    waiting = {"role": "waiting", "text": "", "others": [{"name": "H100 #13 750df4f4", "href": "p.html"}],
               "leads": ["the straggler H100 #13 750df4f4"]}
    assert prescription(summary, waiting)["remedy"] == (
        "one GPU cannot fix it: look at the straggler H100 #13 750df4f4 first, then overlap communication with compute")
    # the straggler's own page: its own remedy, never "look at the straggler (this GPU)" (tests/test_tryout_rest.py)
    assert prescription(summary, {"role": "straggler", "text": "", "others": [], "leads": []})["remedy"] == (
        "overlap communication with compute (no other GPU of its job stands out as the one it waits for)")


# ---- d. one money headline in the record; the busy time after it, a different measure --------------------------------

def test_the_record_heads_with_the_idle_cost_and_puts_the_busy_time_after_it(tmp_path):
    """train_h100_2gpu_nccl.sqlite's record: the idle cost ($545.53, the sum of its two rows) is its one money line
    among the record's figures; the wait inside collectives ($113.69) and the exposed communication ($237.94) follow
    it, on the two lines right after it, each saying it is not in the idle cost (main: the wait sat among the idle
    figures at the top, two sections before the idle cost it is not part of)."""
    import pandas as pd
    from click.testing import CliRunner

    from conftest import PROFILES
    from pipeline.cli import main

    out = tmp_path / "o"
    result = CliRunner().invoke(main, ["run", str(PROFILES / "train_h100_2gpu_nccl.sqlite"), "--out", str(out),
                                       "--config", "configs/profiles.yaml"])
    assert result.exit_code == 0, result.output
    fleet = pd.read_csv(out / "fleet.csv")
    idle, wait = round(fleet["idle_usd_per_month"].sum(), 2), round(fleet["collective_wait_usd_per_month"].sum(), 2)
    exposed = round(fleet["comm_exposed_usd_per_month"].sum(), 2)
    assert (idle, wait, exposed) == (545.53, 113.69, 237.94)
    lines = (out / "records" / "train-2gpu-nccl.md").read_text(encoding="utf-8").splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("Idle cost: "))
    assert lines[head].startswith(f"Idle cost: ${idle:,.2f} per month for these GPUs")
    assert lines[head + 1].startswith("Collective wait: ") and (
        f": ${wait:,.2f} per month beside the idle cost, never in it;" in lines[head + 1])
    assert lines[head + 2].startswith("Exposed communication: ") and (
        f": ${exposed:,.2f} per month (busy time, not in the idle cost;" in lines[head + 2])
    assert sum(ln.startswith("Collective wait: ") for ln in lines) == 1
    assert not any("$" in ln for ln in lines[:head] if not ln.startswith(("- ", "| ")))   # no dollar figure before it


# ---- issue 45 point 4: the first screen says how much of the captures' idle the windows leave out -------------------

def test_the_basis_counts_the_captures_idle_outside_the_windows_by_hand():
    """Three GPUs: a capture of 1,000 ms idle 400 ms, its window leaving out 75 % of it (300 ms); one of 500 ms idle
    100 ms, 40 % left out (40 ms: a row of a table older than `window_left_out_idle_ns`, its share × its idle); one of
    an older table with no capture columns (counted in the windows, not in the captures). The fleet: 340 of 500 ms of captured idle outside the windows = 68.00 %, a plain second computation
    over the rows; captures of 0.50–1.00 s (1.50 s in all) on the 2 GPUs whose capture is known. main: the first
    screen said only the windows' lengths, never how much of the captures they leave out."""
    import pandas as pd

    from pipeline.report.summary import extrapolation_basis
    from pipeline.report.words import basis_text, left_out_idle_text
    from pipeline.schema import FLEET_COLUMNS, conform

    base = {"cluster": "c", "job": "j", "status": "ok", "gpu_model": "NVIDIA H100", "iterations": 5,
            "idle_usd_per_month": 1.0, "confidence_tier": "medium"}
    rows = [{**base, "report": "a.sqlite", "gpu_key": "a", "window_ns": 250 * MS, "idle_ns": 100 * MS,
             "capture_ns": 1000 * MS, "capture_idle_ns": 400 * MS, "window_left_out_idle_ns": 300 * MS,
             "window_left_out_idle_pct": 75.0},
            {**base, "report": "b.sqlite", "gpu_key": "b", "window_ns": 300 * MS, "idle_ns": 60 * MS,
             "capture_ns": 500 * MS, "capture_idle_ns": 100 * MS, "window_left_out_idle_pct": 40.0},
            {**base, "report": "c.sqlite", "gpu_key": "c", "window_ns": 400 * MS, "idle_ns": 40 * MS}]
    fleet = conform(pd.DataFrame(rows), FLEET_COLUMNS)
    basis = extrapolation_basis(fleet)
    assert {k: basis[k] for k in ("capture_gpus", "capture_ns", "capture_min_ns", "capture_max_ns", "capture_idle_ns",
                                  "left_out_idle_ns")} == {
        "capture_gpus": 2, "capture_ns": 1500 * MS, "capture_min_ns": 500 * MS, "capture_max_ns": 1000 * MS,
        "capture_idle_ns": 500 * MS, "left_out_idle_ns": 340 * MS}
    known = [r for r in rows if "capture_ns" in r]   # the plain second computation
    plain = 100 * sum(r["capture_idle_ns"] * r["window_left_out_idle_pct"] / 100 for r in known) / sum(
        r["capture_idle_ns"] for r in known)
    assert plain == 68.0
    assert left_out_idle_text(basis) == (f" {plain:.2f} % of the captures' idle (0.34 s of 0.50 s) lies outside the "
                                         "windows and is not priced.")
    assert basis_text(basis, None) == (
        "Every month here extrapolates short captures: 3 GPU(s), windows of 0.25–0.40 s each (0.95 s in all) cut from "
        "captures of 0.50–1.00 s each (1.50 s in all, first kernel to last, on the 2 GPU(s) whose capture is known), "
        "3 GPUs with 5 stable iterations. 68.00 % of the captures' idle (0.34 s of 0.50 s) lies outside the windows "
        "and is not priced.")
    # no capture known (a table older than the columns): the sentence as before, nothing about captures
    old = extrapolation_basis(fleet[fleet["report"] == "c.sqlite"])
    assert (old["capture_gpus"], old["left_out_idle_ns"]) == (0, None) and left_out_idle_text(old) == ""
    assert basis_text(old, None) == ("Every month here extrapolates short captures: 1 GPU(s), windows of 0.40 s each "
                                     "(0.40 s in all), 1 GPU with 5 stable iterations.")


def test_the_first_screen_says_what_the_windows_leave_out_of_a_synthetic_fleet(tmp_path):
    """tests/test_serving_window.py's two traces, worked out there: serving (its window the capture, 470 ms idle
    270 ms: nothing left out) and training (the capture 205 ms idle 85 ms, the window 120 ms idle 20 ms: 65 ms of the
    capture's idle outside it). The fleet: 65 of 355 ms = 18.31 % of the captures' idle outside the windows, said on
    the report's first screen (the basis under the fix-first heading, the headline's idle-cost card) and in the
    Markdown summary; the same figure as a plain second computation over fleet.csv's columns."""
    import re

    import pandas as pd
    from click.testing import CliRunner
    from test_rates import _write
    from test_serving_window import serving_trace, training_trace

    from pipeline.cli import main

    paths = [serving_trace(str(tmp_path / "srv.json")), training_trace(str(tmp_path / "trn.json"))]
    cfg = _write(tmp_path / "c.yaml", "labels:\n  - {match: 'srv.json', job: srv}\n  - {match: 'trn.json', job: trn}\n")
    out = tmp_path / "out"
    runner = CliRunner()
    for args in (["run", *paths, "--out", str(out), "--config", str(cfg), "--no-cache"],
                 ["report", str(out), "--out", str(out / "report.html")],
                 ["report", str(out), "--out", str(tmp_path / "s.md"), "--format", "md"]):
        result = runner.invoke(main, args)
        assert result.exit_code == 0, result.output
    fleet = pd.read_csv(out / "fleet.csv")
    assert (list(fleet["window_left_out_idle_ns"]), int(fleet["capture_idle_ns"].sum())) == ([0, 65 * MS], 355 * MS)
    left = (fleet["capture_idle_ns"] * fleet["window_left_out_idle_pct"] / 100).sum() / fleet["capture_idle_ns"].sum()
    assert round(100 * left, 2) == round(100 * 65 / 355, 2) == 18.31
    text = "18.31 % of the captures' idle (65.0 ms of 0.35 s) lies outside the windows and is not priced."
    page = (out / "report.html").read_text(encoding="utf-8")
    fix = re.search(r'<section id="fix-first">(.*?)</section>', page, re.S).group(1)
    assert re.search(r'<span id="basis"[^>]*>(.*?)</span>', fix, re.S).group(1).endswith(text.replace("'", "&#39;"))
    card = re.search(r'<span id="fleet-usd-windows" data-left-out-ns="(\d+)" data-capture-idle-ns="(\d+)">(.*?)</span>',
                     page, re.S)
    assert (int(card.group(1)), int(card.group(2))) == (65 * MS, 355 * MS)
    assert card.group(3) == "; from the windows only: 18.31 % of the captures' idle lies outside them, not priced"
    assert text in (tmp_path / "s.md").read_text(encoding="utf-8")


def test_comm_entry_names_the_late_rank_where_no_straggler_stands_out():
    """Issue 45 (tryout): a job with no straggler by idle but a chronic late rank (vit-train-pytorch's A100 #1
    pid85236) is named by the comm entry as its GPU pages name it, never "none stands out" (one determination: the
    straggler, else the late rank). Rows: llm's G1 (straggler) and G2; vit's V1 (late rank) and V2."""
    import numpy as np

    from pipeline.analysis import diagnosis as dx
    from pipeline.analysis.fixfirst import job_stragglers

    cols = {"job": np.asarray(["c\x00llm", "c\x00llm", "c\x00vit", "c\x00vit"], dtype=object),
            "name": np.asarray(["G1", "G2", "V1", "V2"], dtype=object),
            "straggler": np.asarray([True, False, False, False]), "late": np.asarray([False, False, True, False])}
    assert job_stragglers(cols, np.asarray([3])) == ["the late rank V1"]
    assert job_stragglers(cols, np.asarray([1, 3])) == ["G1 of llm", "the late rank V1 of vit"]
    remedy = dx.comm_rule({"length": [MS], "kernel_before": ["nccl"]})["remedy"]
    assert dx.name_straggler(remedy, ["the late rank V1"]) == (
        "one GPU cannot fix it: look at the late rank V1 first, then overlap communication with compute")
    # a straggler by idle comes first where a job has both
    both = dict(cols, late=np.asarray([False, True, True, False]))
    assert job_stragglers(both, np.asarray([0, 1])) == ["G1"]


def test_straggler_own_page_diagnosis_says_it_is_this_gpu():
    """Issue 45 (tryout): the straggler's own page (H100 #13) said in its Diagnosis "look at the straggler first"; on
    its own page (role straggler or late rank) the line says it is this GPU; on a GPU waiting on it, the line names
    it; with no role known, unchanged."""
    from pipeline.analysis import diagnosis as dx
    from pipeline.report.gpu_page import diagnosis_view

    finding = dx.comm_rule({"length": [MS], "kernel_before": ["nccl"]})
    summary = {"diagnosis": dx.to_text([finding])}
    plain = dx.line(finding)
    assert dx.STRAGGLER_FIRST in plain
    mine = diagnosis_view(summary, {"role": "straggler", "text": "", "others": [], "leads": []})["prescribed"][0]
    own = "this GPU is the straggler its job's other GPUs wait for: fix its own idle first"
    assert mine["line"] == plain.replace("one GPU cannot fix it: look at the straggler first", own)
    assert "one GPU cannot fix it: look at the straggler first" in plain and "straggler first" not in mine["line"]
    # the page prints the finding's remedy too (tryout 2: H100 #13's evidence still sent it to "the straggler")
    assert mine["remedy"] == f"{own}, then overlap communication with compute"
    late = diagnosis_view(summary, {"role": "late rank", "leads": ["the straggler H100 #13 750df4f4"]})
    assert "this GPU is the late rank its job's other GPUs wait for" in late["prescribed"][0]["line"]
    assert late["prescribed"][0]["remedy"].startswith("this GPU is the late rank its job's other GPUs wait for")
    waiting = diagnosis_view(summary, {"role": "waiting", "leads": ["the straggler H100 #13 750df4f4"]})
    assert waiting["prescribed"][0]["line"] == plain.replace("look at the straggler first",
                                                             "look at the straggler H100 #13 750df4f4 first")
    assert diagnosis_view(summary)["prescribed"][0]["line"] == plain
