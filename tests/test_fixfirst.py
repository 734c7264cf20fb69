"""Fix first (docs/definitions.md#fix-first): recoverable USD per category, speed-ups, the ranked list, confidence.

Expected values are worked out by hand here (share x rate x hours), never with pipeline.analysis.fixfirst.
"""
from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd

from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.fixfirst import fix_list
from pipeline.config import ConfidenceConfig, Config
from pipeline.fleet.outputs import write_outputs
from pipeline.fleet.reduce import build_fleet, rollup, rosters_of
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import CAVEATS
from pipeline.synth import ExportWriter
from helpers.fixes import read_fixes

MS = 1_000_000
#: H100 (the default model: these exports name no GPU) at 4.00 USD per GPU-hour, 730 hours a month.
USD = 4.0 * 730
SPAN = Config(analysis=dataclasses.replace(Config().analysis, window="span"))


def analyse(path, cfg: Config = SPAN) -> list:
    rep = load_report(str(path))
    return [analyse_gpu(gpu_trace(rep, key), cfg, cfg.labels_for(rep.path)) for key in rep.gpu_keys()]


def three_causes(path) -> str:
    """Kernels [0,10) [30,40) [55,65) [75,85) [105,115) ms on stream 7: gap 10..30 under a
    cudaStreamSynchronize (sync, 20 ms), 40..55 with nothing (cpu, 15 ms), 65..75 with a memcpy 66..74
    (data, 10 ms), 85..105 under Nsight's own buffer flush (profiler, 20 ms: never in the list)."""
    w = ExportWriter(str(path))
    for i, (a, b) in enumerate(((0, 10), (30, 40), (55, 65), (75, 85), (105, 115))):
        w.kernel(pid=10, device=0, stream=7, start=a * MS, end=b * MS, name=f"k{i}", correlation=100 + i)
    w.runtime(pid=10, tid=11, start=10 * MS + 100_000, end=30 * MS - 100_000, name="cudaStreamSynchronize_v3020")
    w.memcpy(pid=10, device=0, stream=8, start=66 * MS, end=74 * MS)
    w.overhead(pid=10, tid=11, start=85 * MS + 500_000, end=105 * MS - 500_000)
    return w.close()


def test_gpu_columns_by_hand(tmp_path):
    (res,) = analyse(three_causes(tmp_path / "three.sqlite"))
    row = res.row
    assert (row["window_ns"], row["cat_sync_ns"], row["cat_cpu_ns"], row["cat_data_ns"], row["cat_profiler_ns"]) == (
        115 * MS, 20 * MS, 15 * MS, 10 * MS, 20 * MS)
    # 20/115 x 4 x 730 = 507.826..; 15/115 x 2920 = 380.869..; 10/115 x 2920 = 253.913..
    assert (row["fix_sync_usd_per_month"], row["fix_cpu_usd_per_month"], row["fix_data_usd_per_month"]) == (
        507.83, 380.87, 253.91)
    # 1 / (1 - 20/115) = 115/95; 115/100; 115/105
    assert (row["fix_sync_speedup"], row["fix_cpu_speedup"], row["fix_data_speedup"]) == (1.2105, 1.15, 1.0952)
    assert (row["fix_comm_usd_per_month"], row["fix_comm_speedup"]) == (0.0, 1.0)
    assert not any(k.startswith(("fix_profiler", "fix_untraced")) for k in row)
    # span window: 0 stable iterations, 0.115 s, 5 kernels: a toy (fewer than 50 kernels; 115 ms is not under 50 ms)
    assert (row["iterations"], row["low_confidence"], row["implausible_speedup"]) == (0, True, False)
    assert (row["confidence_tier"], row["confidence_note"]) == ("toy", "5 kernels in W (fewer than 50)")


def test_confidence_thresholds_from_config_and_implausible(tmp_path):
    cfg = dataclasses.replace(SPAN, confidence=ConfidenceConfig(toy_max_window_ns=0, toy_min_kernels=2,
                                                                medium_min_iterations=0, medium_min_window_ns=100 * MS))
    (res,) = analyse(three_causes(tmp_path / "three.sqlite"), cfg)
    assert (res.row["confidence_tier"], res.row["low_confidence"], res.row["confidence_note"]) == ("medium", False, "")
    # one 95 ms cpu gap in a 100 ms window: 95 % idle -> speed-up 20, flagged implausible
    w = ExportWriter(str(tmp_path / "empty.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=1 * MS, name="a", correlation=1)
    w.kernel(pid=10, device=0, stream=7, start=96 * MS, end=100 * MS, name="b", correlation=2)
    (res,) = analyse(w.close(), cfg)
    assert (res.row["cat_cpu_ns"], res.row["fix_cpu_speedup"], res.row["implausible_speedup"]) == (95 * MS, 20.0, True)
    assert res.row["fix_cpu_usd_per_month"] == round(0.95 * USD, 2) == 2774.0
    assert (res.row["window_ns"], res.row["low_confidence"]) == (100 * MS, False)  # exactly 0.1 s is not under


def test_ranked_list_and_rollups(tmp_path):
    results = analyse(three_causes(tmp_path / "three.sqlite"))
    fleet = build_fleet([r.row for r in results])
    out = tmp_path / "out"
    write_outputs(str(out), fleet, rosters_of(results))
    fixes = read_fixes(out / "fix_first.csv")
    assert list(fixes["scope"]) == ["fleet"] * 3 + ["job"] * 3
    fleet_list = fixes[fixes["scope"] == "fleet"]
    assert list(fleet_list["category"]) == ["sync", "cpu", "data"]  # profiler (20 ms, tied largest) never
    assert list(fleet_list["rank"]) == [1, 2, 3]
    assert list(fleet_list["idle_usd_per_month"]) == [507.83, 380.87, 253.91]
    assert list(fleet_list["speedup"]) == [1.2105, 1.15, 1.0952]
    # the remedies follow the rules that fired (docs/definitions.md#diagnosis): 0 kept iterations leave the sync rule
    # unjudged, the 3 gaps after 3 different kernels are scattered (the break point, its category sync: the first of
    # the tied); cpu's rule (cpu.host, issue 45 point 5) finds its gap in no NVTX range: profile the host there; the
    # copy runs on stream 8, off the compute stream 7, and the export's default host memory kind is pageable: pinning
    # comes first
    assert fleet_list["remedy"].iloc[0] == "the system and its resources first (other processes, memory, I/O)"
    assert fleet_list["remedy"].iloc[1] == ("profile the host at these gaps (py-spy, or the PyTorch profiler with CPU "
                                            "activities: data loading, the GIL, I/O, logging); NVTX ranges around the "
                                            "steps would name the code")
    assert fleet_list["remedy"].iloc[2] == "pin the host buffers (pin_memory=True, cudaHostAlloc) once at the start and reuse them"
    # nothing says only part of that idle is recoverable: the whole of it
    assert list(fleet_list["fix_wins_back_usd_per_month"]) == [507.83, 380.87, 253.91]
    assert set(fleet_list["fix_wins_back_basis"]) == {"the whole idle of the category"}
    report = str(tmp_path / "three.sqlite")
    gpu = fleet["gpu_key"].iloc[0]
    assert fleet_list["example_gaps"].iloc[0] == f"{report} {gpu} @{10 * MS} +{20 * MS}"
    assert list(fleet_list["window_ns"]) == [115 * MS] * 3 and list(fleet_list["iterations"]) == [0] * 3
    assert list(fleet_list["low_confidence"]) == [True] * 3
    assert json.loads((out / "fix_first.json").read_text())[0]["category"] == "sync"
    # the JSON (made a column at a time) is each entry of the list as plain scalars, row by row, keys in column order
    from pipeline.analysis.fixfirst import fix_list
    from pipeline.io import json_text, plain_scalar
    entries = fix_list(fleet, rosters_of(results)).to_dict("records")
    assert (out / "fix_first.json").read_text() == json_text([{k: plain_scalar(v) for k, v in e.items()} for e in entries])
    jobs = pd.read_csv(out / "jobs.csv", keep_default_na=False)
    assert (jobs["fix_sync_usd_per_month"].iloc[0], jobs["fix_cpu_speedup"].iloc[0]) == (507.83, 1.15)
    assert (jobs["min_iterations"].iloc[0], jobs["low_confidence_gpus"].iloc[0]) == (0, 1)


def test_rollup_sums_two_gpus():
    """Two GPUs of one job: dollars add up, the speed-up is window-weighted (hand-made rows)."""
    rows = []
    for i, (cat_ns, usd) in enumerate(((30 * MS, 100.0), (10 * MS, 50.0))):
        row = {"report": "r", "gpu_key": f"g{i}", "cluster": "c", "job": "j", "status": "ok", "window_ns": 100 * MS,
               "iterations": 6 + i, "idle_ns": cat_ns, "idle_pct": 0.0, "low_confidence": False}
        row.update({"cat_comm_ns": cat_ns, "fix_comm_usd_per_month": usd})
        rows.append(row)
    jobs = rollup(build_fleet(rows), ["cluster", "job"])
    # (30 + 10) / 200 = 0.2 -> 1 / 0.8 = 1.25
    assert (jobs["fix_comm_usd_per_month"].iloc[0], jobs["fix_comm_speedup"].iloc[0]) == (150.0, 1.25)
    assert (jobs["min_iterations"].iloc[0], jobs["fix_sync_speedup"].iloc[0]) == (6, 1.0)


def test_real_profile_fix_first(span_run):
    """train_h100_2gpu_nccl with --window span: dollars from the fleet row's cat_*_ns, window_ns, rate, 730."""
    fleet = pd.read_csv(span_run / "fleet.csv", keep_default_na=False)
    rows = fleet[fleet["report"].str.endswith("train_h100_2gpu_nccl.sqlite")]
    assert len(rows) == 2
    cats = ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu")
    for row in rows.to_dict("records"):
        for cat in cats:
            share = row[f"cat_{cat}_ns"] / row["window_ns"]
            assert row[f"fix_{cat}_usd_per_month"] == round(share * row["rate_usd_per_hour"] * 730, 2)
            assert row[f"fix_{cat}_speedup"] == round(1 / (1 - share), 4)
    every = read_fixes(span_run / "fix_first.csv")
    assert set(every["section"]) == {"device idle", "inside collectives"}
    fixes = every[every["section"] == "device idle"]
    job = rows["job"].iloc[0]
    mine = fixes[(fixes["scope"] == "job") & (fixes["job"] == job)]
    expected = sorted(((round(sum(r[f"fix_{c}_usd_per_month"] for r in rows.to_dict("records")), 2), c)
                       for c in cats if rows[f"cat_{c}_ns"].sum() > 0), key=lambda t: (-t[0], t[1]))
    assert [(u, c) for u, c in zip(mine["idle_usd_per_month"], mine["category"])] == expected
    assert not set(fixes["category"]) & {"profiler", "untraced"}
    fleet_list = fixes[fixes["scope"] == "fleet"]
    # trusted, then low, then toy; in each part what a fix wins back, largest first (issue 45 points 2 and 7)
    part = [{"medium": 0, "high": 0, "low": 1, "toy": 2}[t] for t in fleet_list["confidence_tier"]]
    # the archived entries (no rank: nothing prescribed) after every ranked one (issue 45)
    keys = [(k != k, p, -float(r), -float(u)) for k, p, r, u in zip(fleet_list["rank"], part,
                                                                    fleet_list["fix_wins_back_usd_per_month"],
                                                                    fleet_list["idle_usd_per_month"])]
    assert keys == sorted(keys)
    # the job's wait inside collectives, its own section, after its device-idle entries: each GPU's wait share of its
    # window priced at its rate for 730 h, rounded to cents, summed (a plain second computation)
    [coll] = every[(every["scope"] == "job") & (every["job"] == job) & (every["section"] == "inside collectives")
                   ].to_dict("records")
    by_hand = round(sum(round(r["collective_wait_ns"] / r["window_ns"] * r["rate_usd_per_hour"] * 730, 2)
                        for r in rows.to_dict("records")), 2)
    assert (coll["category"], coll["rank"], coll["gpus"]) == ("collective wait", 1, 2)
    assert coll["collective_wait_usd_per_month"] == by_hand > 0
    # busy time in its own column: none of it in the idle ones a sum adds up (issue 45)
    assert all(math.isnan(coll[c]) for c in ("idle_usd_per_month", "fix_wins_back_usd_per_month", "assumed_usd_per_month"))
    assert coll["share_pct"] == round(100 * rows["collective_wait_ns"].sum() / rows["window_ns"].sum(), 4)
    assert coll["remedy"].startswith("find what holds the late rank back: its own idle, its data, its host; late rank: ")


def test_fix_list_per_job_ties_errors_and_caveats():
    """Hand-made rows: job a has two GPUs (comm 30 + 10 ms, $100 + $50; sync $150 on one, a tie with comm
    broken by name), g1 low confidence, job b one GPU whose idle is all untraced/profiler (no entry); an error row takes no part."""
    from pipeline.analysis.fixfirst import fix_list

    def row(job, gpu, iterations, window_ns=100 * MS, **cats):
        r = {"report": f"{job}.sqlite", "gpu_key": gpu, "cluster": "c", "job": job, "status": "ok",
             "window_ns": window_ns, "iterations": iterations, "idle_ns": 0, "idle_pct": 0.0,
             "confidence_tier": "low" if iterations < 5 else "medium", "low_confidence": iterations < 5,
             "confidence_note": "few" if iterations < 5 else ""}
        for cat, (ns, usd) in cats.items():
            r[f"cat_{cat}_ns"] = ns
            if cat not in CAVEATS:  # a caveat has no fix_ column (the schema refuses one)
                r[f"fix_{cat}_usd_per_month"] = usd
        return r

    rows = [row("a", "g0", 6, comm=(30 * MS, 100.0), sync=(20 * MS, 100.0)),
            row("a", "g1", 4, comm=(10 * MS, 50.0)),
            row("b", "g0", 8, untraced=(50 * MS, 999.0), profiler=(40 * MS, 888.0)),
            {"report": "bad.sqlite", "cluster": "c", "job": "a", "status": "error", "error": "boom"}]
    rosters = {("a.sqlite", "g0"): {"device": [{"category": "comm", "start_ns": 5, "length_ns": 30 * MS},
                                               {"category": "sync", "start_ns": 7, "length_ns": 20 * MS,
                                                "nvtx_range": "step 3"}]},
               ("a.sqlite", "g1"): {"device": [{"category": "comm", "start_ns": 9, "length_ns": 10 * MS}]}}
    fixes = fix_list(build_fleet(rows), rosters)
    # g0 (6 iterations, medium) and b's g0 are trusted, g1 (4, low) apart: its comm is an entry of its own, after;
    # g0's comm and sync tie at $100: by name
    assert list(zip(fixes["scope"], fixes["job"], fixes["rank"], fixes["category"], fixes["idle_usd_per_month"],
                    fixes["trusted"])) == [
        ("fleet", "", 1, "comm", 100.0, True), ("fleet", "", 2, "sync", 100.0, True), ("fleet", "", 3, "comm", 50.0, False),
        ("job", "a", 1, "comm", 100.0, True), ("job", "a", 2, "sync", 100.0, True), ("job", "a", 3, "comm", 50.0, False)]
    job = fixes[fixes["scope"] == "job"]
    comm, apart = job.iloc[0], job.iloc[2]
    # trusted part of a: g0 alone, 30 / 100 ms = 30 % -> 1 / 0.7; apart: g1 alone, 10 / 100 ms -> 1 / 0.9
    assert (comm["speedup"], comm["share_pct"], comm["window_ns"], comm["iterations"]) == (1.4286, 30.0, 100 * MS, 6)
    assert (apart["speedup"], apart["share_pct"], apart["window_ns"], apart["iterations"]) == (1.1111, 10.0, 100 * MS, 4)
    assert (comm["gpus"], comm["gpu_keys"], comm["confidence_tier"], comm["low_confidence"], comm["confidence_note"]) == (
        1, "a.sqlite g0", "medium", False, "")
    assert (apart["gpus"], apart["gpu_keys"], apart["confidence_tier"], apart["low_confidence"],
            apart["confidence_note"]) == (1, "a.sqlite g1", "low", True, "a.sqlite g1: few")
    assert (comm["example_gaps"], apart["example_gaps"]) == (f"a.sqlite g0 @5 +{30 * MS}", f"a.sqlite g1 @9 +{10 * MS}")
    sync = job.iloc[1]
    assert sync["example_gaps"] == f"a.sqlite g0 @7 +{20 * MS} [step 3]"
    # sync rests on g0 alone (6 stable iterations): confident, whatever g1 of the same job is
    assert (sync["gpus"], sync["low_confidence"], sync["confidence_note"]) == (1, False, "")
    # rows without findings (no diagnosis column): the generic remedy, saying no rule could be judged
    assert fixes["remedy"].iloc[0] == ("overlap communication with compute; check the straggler first "
                                       "(generic: no diagnostic rule could be judged)")


def test_collective_wait_has_its_own_section_and_leaves_the_idle_totals_alone():
    """Hand-made rows, one job of two GPUs (window 100 ms each, comm idle 30 + 10 ms, $100 + $50): g0 waited 10 ms
    inside collectives ($120.00), g1 0 ms ($0.00) but entered last in 4 of its 5 calls (chronic). The device-idle
    entries are those of the same rows without collective figures; the collective entry comes after them, ranked 1
    in its section: $120.00 + $0.00 = $120.00, share 10 / 200 ms = 5 %, the straggler g1."""
    from pipeline.analysis.fixfirst import fix_list

    def row(gpu, comm_ns, usd, **coll):
        return {"report": "a.sqlite", "gpu_key": gpu, "cluster": "c", "job": "j", "status": "ok",
                "window_ns": 100 * MS, "iterations": 9, "idle_ns": comm_ns, "idle_pct": 0.0,
                "confidence_tier": "medium", "low_confidence": False, "confidence_note": "",
                "cat_comm_ns": comm_ns, "fix_comm_usd_per_month": usd, **coll}

    plain = [row("g0", 30 * MS, 100.0), row("g1", 10 * MS, 50.0)]
    waits = [dict(collective_wait_status="measured", collective_wait_ns=10 * MS, collective_calls=5,
                  collective_last_count=1, collective_chronic=False, collective_p2p=False,
                  collective_wait_usd_per_month=120.0),
             dict(collective_wait_status="measured", collective_wait_ns=0, collective_calls=5,
                  collective_last_count=4, collective_chronic=True, collective_p2p=False,
                  collective_wait_usd_per_month=0.0)]
    before = fix_list(build_fleet(plain), {})
    after = fix_list(build_fleet([{**r, **w} for r, w in zip(plain, waits)]), {})
    idle = after[after["section"] == "device idle"].reset_index(drop=True)
    # the device-idle rows, and so their totals, unchanged; only the comm entry's diagnosis gains the late rank
    # (g1, chronic: the others wait for it), which the collective figures tell (docs/definitions.md#diagnosis)
    pd.testing.assert_frame_equal(idle.drop(columns="diagnosis"), before.drop(columns="diagnosis"))
    assert list(before["diagnosis"]) == ["", ""]
    assert list(idle["diagnosis"]) == ["late rank: GPU #2 g1 (enters the collectives last: the others wait for it; "
                                       "fix its own idle first)"] * 2
    assert list(before["idle_usd_per_month"]) == [150.0, 150.0]   # fleet, then job: comm $100 + $50
    assert list(zip(after["scope"], after["section"], after["rank"], after["category"])) == [
        ("fleet", "device idle", 1, "comm"), ("fleet", "inside collectives", 1, "collective wait"),
        ("job", "device idle", 1, "comm"), ("job", "inside collectives", 1, "collective wait")]
    coll = after[(after["scope"] == "job") & (after["section"] == "inside collectives")].iloc[0]
    assert (coll["collective_wait_usd_per_month"], coll["share_pct"], coll["gpus"]) == (120.0, 5.0, 2)
    assert math.isnan(coll["idle_usd_per_month"]) and math.isnan(coll["fix_wins_back_usd_per_month"])
    # the device-idle entries carry no collective-wait dollars: each dollar column sums one measure
    assert after.loc[after["section"] == "device idle", "collective_wait_usd_per_month"].isna().all()
    assert math.isnan(coll["speedup"]) and coll["window_ns"] == 200 * MS and coll["gpu_keys"] == "a.sqlite g0; a.sqlite g1"
    g1 = "GPU #2 g1"   # its display name (docs/outputs.md#gpu-names): no model known, the 2nd GPU of its job, its key
    assert coll["remedy"] == f"find what holds the late rank back: its own idle, its data, its host; late rank: {g1}"
    assert coll["diagnosis"] == f"late rank: {g1} (chronic: last in 4 of 5 calls)"
    # send/recv only: the same entry is named the pipeline bubble
    bubble = fix_list(build_fleet([{**r, **w, "collective_p2p": True} for r, w in zip(plain, waits)]), {})
    assert set(bubble.loc[bubble["section"] == "inside collectives", "category"]) == {"pipeline bubble"}
    # an unpriced GPU's wait is in no dollar sum; every GPU unpriced: no dollars
    unpriced = [{**r, **w, "collective_wait_usd_per_month": math.nan, "unpriced": True} for r, w in zip(plain, waits)]
    none = fix_list(build_fleet(unpriced), {})
    assert math.isnan(none.loc[none["section"] == "inside collectives", "collective_wait_usd_per_month"].iloc[0])


def test_implausible_flag_is_per_category():
    """One GPU: cpu 95 ms of 100 (implausible), data 2 ms (not): only the cpu entry is flagged."""
    from pipeline.analysis.fixfirst import fix_list

    row = {"report": "r", "gpu_key": "g", "cluster": "c", "job": "j", "status": "ok", "window_ns": 100 * MS,
           "iterations": 9, "idle_ns": 97 * MS, "idle_pct": 97.0, "confidence_tier": "medium", "low_confidence": False,
           "confidence_note": "",
           "implausible_speedup": True, "cat_cpu_ns": 95 * MS, "fix_cpu_usd_per_month": 2774.0,
           "cat_data_ns": 2 * MS, "fix_data_usd_per_month": 58.4}
    fixes = fix_list(build_fleet([row]), {})
    job = fixes[fixes["scope"] == "job"]
    assert list(zip(job["category"], job["speedup"], job["implausible_speedup"])) == [
        ("cpu", 20.0, True), ("data", round(100 / 98, 4), False)]


# ---- how the list adds up to the headline (issue 14 tryout, point 4) -------------------------

def test_reconcile_by_hand_on_a_real_analysis(tmp_path):
    """three_causes (span, 115 ms): idle 65 ms = sync 20 + cpu 15 + data 10 (the list) + profiler 20 ms, no
    slivers. Headline 65/115 x 2920 = 1,650.434.. -> $1,650.43; list 507.83 + 380.87 + 253.91 = $1,142.61;
    profiler 20/115 x 2920 = $507.83; 1,142.61 + 507.83 = 1,650.44: one cent of rounding (-$0.01)."""
    from pipeline.report.summary import fix_first, reconcile

    results = analyse(three_causes(tmp_path / "three.sqlite"))
    fleet = build_fleet([r.row for r in results])
    assert fleet["idle_usd_per_month"].tolist() == [1650.43]
    rc = reconcile(fleet, fix_first(fleet, fix_list(fleet, {})))
    assert {k: v for k, v in rc.items() if k != "ns"} == {
        "headline": 1650.43, "fixes": 1142.61, "slivers": 0.0, "profiler": 507.83, "untraced": 0.0, "other": 0.0,
        "rounding": -0.01}
    assert rc["ns"] == {"idle": 65 * MS, "fixes": 45 * MS, "slivers": 0, "profiler": 20 * MS, "untraced": 0,
                        "other": 0}


def reconcile_fleet() -> pd.DataFrame:
    """Two hand-made GPUs (730 hours a month).
    g0: W 1 s, idle 300 ms = sync 100 + cpu 50 + profiler 20 + untraced 10 + 120 ms of slivers (not
        launch-bound); $2/h: idle 0.3 x 2 x 730 = $438.00; sync 0.1 x 1460 = $146.00, cpu $73.00,
        profiler 0.02 x 1460 = $29.20, untraced $14.60; slivers 120/300 x 438 = $175.20.
    g1: W 2 s, idle 500 ms = launch 400 (its slivers: launch-bound) + data 100; $3/h: idle 0.25 x 3 x 730 =
        $547.50; launch 0.2 x 2190 = $438.00, data 0.05 x 2190 = $109.50.
    An error row takes no part."""
    base = {c: 0 for c in ("cat_data_ns", "cat_comm_ns", "cat_sync_ns", "cat_boundary_ns", "cat_periodic_ns",
                           "cat_launch_ns", "cat_cpu_ns", "cat_profiler_ns", "cat_untraced_ns")}
    g0 = {**base, "report": "a.sqlite", "gpu_key": "g0", "cluster": "c", "job": "j", "status": "ok",
          "gpu_model": "H100", "window_ns": 1000 * MS, "iterations": 10, "rate_usd_per_hour": 2.0,
          "idle_ns": 300 * MS, "cat_sync_ns": 100 * MS, "cat_cpu_ns": 50 * MS, "cat_profiler_ns": 20 * MS,
          "cat_untraced_ns": 10 * MS, "device_sliver_ns": 120 * MS, "launch_bound": False,
          "idle_usd_per_month": 438.0, "profiler_usd_per_month": 29.2, "untraced_usd_per_month": 14.6}
    g1 = {**base, "report": "b.sqlite", "gpu_key": "g1", "cluster": "c", "job": "j", "status": "ok",
          "gpu_model": "H100", "window_ns": 2000 * MS, "iterations": 10, "rate_usd_per_hour": 3.0,
          "idle_ns": 500 * MS, "cat_launch_ns": 400 * MS, "cat_data_ns": 100 * MS, "device_sliver_ns": 400 * MS,
          "launch_bound": True, "idle_usd_per_month": 547.5, "profiler_usd_per_month": 0.0,
          "untraced_usd_per_month": 0.0}
    bad = {"report": "c.sqlite", "gpu_key": "", "cluster": "c", "job": "j", "status": "error", "error": "broken"}
    return pd.DataFrame([g0, g1, bad])


def test_reconcile_by_hand_on_a_synthetic_fleet():
    from pipeline.fleet.pricing import with_fix_columns
    from pipeline.report.summary import fix_first, reconcile

    # a table without the fix columns gets them as it is read (load_results), from cat_<c>_ns at 730 hours; the
    # views format that finished fleet
    fleet = with_fix_columns(reconcile_fleet())
    fixes = fix_first(fleet, fix_list(fleet, {}))
    assert [(e["category"], e["idle_usd_per_month"]) for e in fixes] == [
        ("launch", 438.0), ("sync", 146.0), ("data", 109.5), ("cpu", 73.0)]
    rc = reconcile(fleet, fixes)
    # 438.00 + 547.50 = 985.50 = (438 + 146 + 109.50 + 73) + 175.20 + 29.20 + 14.60 = 766.50 + 219.00
    assert {k: v for k, v in rc.items() if k != "ns"} == {
        "headline": 985.5, "fixes": 766.5, "slivers": 175.2, "profiler": 29.2, "untraced": 14.6, "other": 0.0,
        "rounding": 0.0}
    assert rc["ns"] == {"idle": 800 * MS, "fixes": 650 * MS, "slivers": 120 * MS, "profiler": 20 * MS,
                        "untraced": 10 * MS, "other": 0}
    # a table without the caveats' dollar columns: their share of the GPU's idle dollars, 20/300 x 438 = 29.20
    older = fleet.drop(columns=["profiler_usd_per_month", "untraced_usd_per_month"])
    assert reconcile(older, fixes)["profiler"] == 29.2 and reconcile(older, fixes)["untraced"] == 14.6
    # ... and without launch_bound: a GPU with launch idle is the launch-bound one (its slivers are that idle)
    assert reconcile(fleet.drop(columns=["launch_bound"]), fixes) == rc
    # idle no part holds (a hand-made inconsistency: 30 ms more idle on g0): said apart, never hidden
    odd = fleet.copy()
    odd.loc[0, "idle_ns"] = 330 * MS    # g0's $438.00 now over 330 ms: slivers 120/330 x 438 = 159.27..
    rc = reconcile(odd, fixes)
    assert rc["ns"]["other"] == 30 * MS and (rc["other"], rc["slivers"]) == (39.82, 159.27)   # 30/330 x 438 = 39.818..


def test_compact_markers_of_a_gpu_figure():
    """The top-10 table's markers: from the confidence note's kinds and the window / iterations, and from
    rate_source saying the default model was assumed; nothing for a confident GPU on the card."""
    from pipeline.analysis.confidence import tier
    from pipeline.analysis.fixfirst import confidence_kinds, confidence_marker
    from pipeline.report.summary import figure_caveats

    # the ROCm toy trace: 8.6 ms, 14 kernels
    name, reasons = tier(8_594_445, 14, 0, None)
    note = "; ".join(reasons)
    assert (name, note) == ("toy", "window 0.008594 s (under 0.05 s); 14 kernels in W (fewer than 50)")
    assert confidence_kinds(note) == ["window under 0.05 s", "fewer than 50 kernels"]
    assert confidence_marker(note, 8_594_445, 0, name) == "toy capture: 8.6 ms window, 14 kernels"
    # 1 iteration of a 3 s window, thresholds 2 iterations and 5 s
    cfg = ConfidenceConfig(medium_min_iterations=2, medium_min_window_ns=5_000_000_000)
    name, reasons = tier(3_000_000_000, 500, 1, 0.0, cfg)
    assert (name, reasons) == ("low", ["rests on 1 stable iterations (fewer than 2)", "window 3.000000 s (under 5 s)"])
    assert confidence_marker("; ".join(reasons), 3_000_000_000, 1) == "low confidence: 1 stable iteration, 3.00 s window"
    assert confidence_marker("", 1, 1) == ""
    card = "rate card: example list price; replace with your contract"
    fine = {"low_confidence": False, "confidence_note": "", "rate_source": card, "rate_model": "H100",
            "gpu_model": "NVIDIA H100 80GB HBM3", "window_ns": 2_000_000_000, "iterations": 9}
    assert figure_caveats(fine) == {"low_confidence": False, "confidence_note": "", "confidence_marker": "",
                                    "rate_assumed": False, "rate_marker": "", "rate_title": ""}
    unnamed = dict(fine, gpu_model="", rate_source="cluster spot override (default model: export names no GPU)")
    got = figure_caveats(unnamed)
    assert (got["rate_assumed"], got["rate_marker"], got["rate_title"]) == (
        True, "≈ H100 rate", "the GPU's model is not named: priced as H100, the default model (cluster spot override "
        "(default model: export names no GPU))")


def test_unpriced_entries_rank_by_share_and_archived_never_leads():
    """A fresh user's export labelled with a GPU off the rate card (every GPU unpriced): cpu (0.5 ms of a 100 ms
    window, archived: nothing prescribed) was ranked #1 by name over launch (9 ms); unpriced, an entry ranks by its
    share (launch 9 % > data 3 %), and an archived category after every prescribed one (cpu last, even though it
    sorts first by name). Priced, an archived category also ranks after a prescribed one with fewer dollars."""
    from pipeline.analysis import diagnosis as dx
    from pipeline.analysis.fixfirst import ARCHIVED, fix_list

    archived = [{"category": "cpu", "rule": "cpu.random", "text": "archived: cpu holds 0.5 %", "remedy": "",
                 "archived": True, "judged": True, "outcome": "archived"}]

    def row(gpu, priced, cats):
        r = {"report": "x.sqlite", "gpu_key": gpu, "cluster": "c", "job": "j", "status": "ok", "window_ns": 100 * MS,
             "iterations": 9, "idle_ns": 0, "idle_pct": 0.0, "confidence_tier": "medium", "low_confidence": False,
             "confidence_note": "", "unpriced": not priced, "gpu_model": "Quadro GP100",
             "diagnosis": dx.to_text(archived)}
        for cat, (ns, usd) in cats.items():
            r[f"cat_{cat}_ns"] = ns
            r[f"fix_{cat}_usd_per_month"] = usd if priced else math.nan
        return r

    cats = {"cpu": (MS // 2, 500.0), "launch": (9 * MS, 90.0), "data": (3 * MS, 30.0)}
    fixes = fix_list(build_fleet([row("g0", False, cats)]), {})
    fleet = fixes[(fixes["scope"] == "fleet") & (fixes["section"] == "device idle")]
    # the archived entry takes no rank (issue 45: "archived… not prescribed" was fix #2 of a real list)
    assert list(zip(_ranks(fleet), fleet["category"], fleet["share_pct"])) == [
        (1, "launch", 9.0), (2, "data", 3.0), (None, "cpu", 0.5)]
    assert fleet["idle_usd_per_month"].isna().all() and fleet["remedy"].iloc[2] == ARCHIVED
    # priced: cpu's $500 is archived (not prescribed): after launch $90 and data $30
    fixes = fix_list(build_fleet([row("g0", True, cats)]), {})
    fleet = fixes[(fixes["scope"] == "fleet") & (fixes["section"] == "device idle")]
    assert list(zip(fleet["category"], fleet["idle_usd_per_month"])) == [("launch", 90.0), ("data", 30.0), ("cpu", 500.0)]
    assert _ranks(fleet) == [1, 2, None]
    # a trusted archived entry comes after the ranked entries of a low GPU too: never numbered among the fixes
    low = {**row("g1", True, {"sync": (4 * MS, 40.0)}), "confidence_tier": "low", "low_confidence": True,
           "confidence_note": "rests on 3 stable iterations (fewer than 5)", "diagnosis": ""}
    fixes = fix_list(build_fleet([row("g0", True, cats), low]), {})
    fleet = fixes[(fixes["scope"] == "fleet") & (fixes["section"] == "device idle")]
    assert list(zip(_ranks(fleet), fleet["category"])) == [(1, "launch"), (2, "data"), (3, "sync"), (None, "cpu")]
    # the Markdown list: no number, under a row saying why
    from pipeline.report.html import FIX_ARCHIVED, _markdown_fixes
    from pipeline.report.summary import fix_first
    md = _markdown_fixes(fix_first(build_fleet([row("g0", True, cats), low]), fixes))
    at = md.index(f"| | {FIX_ARCHIVED} | | | | | |")
    assert md[at + 1].startswith("|  | cpu | $500.00 (the whole idle) | $500.00 |") and md[at - 1].startswith("| 3 | sync |")


def _ranks(entries) -> list:
    """The ``rank`` column as ints, None where empty (an archived entry)."""
    return [None if pd.isna(r) else int(r) for r in entries["rank"]]
def _tiered_rows() -> list[dict]:
    """Hand-made rows, window 100 ms each (issue 45 points 2 and 7): trusted g0 (medium) has data $400 of which the
    evidence bounds a fix to 10 of 40 ms ($100.00) and launch $150 (whole); low g1 has cpu $300; toy g2 (an
    8.6 ms-like toy at an assumed rate) has cpu $900, more dollars than anything else."""
    def row(gpu, tier, window_ns=100 * MS, diagnosis="", **cats):
        r = {"report": f"{gpu}.sqlite", "gpu_key": gpu, "cluster": "c", "job": gpu, "status": "ok",
             "window_ns": window_ns, "iterations": 0 if tier == "toy" else 9, "idle_ns": 0, "idle_pct": 0.0,
             "confidence_tier": tier, "low_confidence": tier in ("toy", "low"),
             "confidence_note": {"toy": "tiny", "low": "few"}.get(tier, ""), "diagnosis": diagnosis}
        for cat, (ns, usd) in cats.items():
            r[f"cat_{cat}_ns"], r[f"fix_{cat}_usd_per_month"] = ns, usd
        return r

    bound = json.dumps([{"category": "data", "rule": "data.copy_stream", "outcome": "compute_stream",
                         "remedy": "copy stream", "text": "copies on 7",
                         "evidence": {"hideable_ns": 10 * MS, "data_ns": 40 * MS}}])
    return [row("g0", "medium", diagnosis=bound, data=(40 * MS, 400.0), launch=(15 * MS, 150.0)),
            row("g1", "low", cpu=(30 * MS, 300.0)),
            row("g2", "toy", cpu=(90 * MS, 900.0))]


def test_fix_list_ranks_by_what_a_fix_wins_back_then_tier():
    """Point 2: g0's data entry idles $400 but a fix wins back 10/40 of it = $100.00, so launch ($150, all of it)
    ranks first; point 7: the low cpu entry ($300) ranks before the toy one ($900) and neither mixes the other's
    GPU (the low entry rests on g1 alone: share 30/100 ms, speed-up 1/0.7; the toy one on g2: 90/100, 1/0.1)."""
    from pipeline.analysis.fixfirst import fix_list

    fixes = fix_list(build_fleet(_tiered_rows()), {})
    fleet = fixes[(fixes["scope"] == "fleet") & (fixes["section"] == "device idle")]
    assert list(zip(fleet["rank"], fleet["category"], fleet["idle_usd_per_month"], fleet["fix_wins_back_usd_per_month"],
                    fleet["confidence_tier"], fleet["gpu_keys"])) == [
        (1, "launch", 150.0, 150.0, "medium", "g0.sqlite g0"), (2, "data", 400.0, 100.0, "medium", "g0.sqlite g0"),
        (3, "cpu", 300.0, 300.0, "low", "g1.sqlite g1"), (4, "cpu", 900.0, 900.0, "toy", "g2.sqlite g2")]
    assert list(fleet["speedup"]) == [round(1 / 0.85, 4), round(1 / 0.6, 4), round(1 / 0.7, 4), round(1 / 0.1, 4)]
    assert fleet.iloc[1]["fix_wins_back_basis"] == ("copies on the compute stream: only what a copy stream of their own "
                                                  "could hide behind compute, 10.0 of 40.0 ms on 1 of 1 GPU(s)")


def test_printed_table_orders_by_tier_then_dollars():
    """Point 7: the printed table lists the trusted GPU first, then the low one, then the toy one, though the toy one
    costs most ($900 > $300 > $550)."""
    from pipeline.cli import format_fleet

    rows = _tiered_rows()
    for r in rows:
        r["idle_usd_per_month"] = sum(v for k, v in r.items() if k.startswith("fix_"))
    text = format_fleet(build_fleet(rows))
    order = [ln.split()[0] for ln in text.splitlines() if ln.strip().startswith("$") and "/month" not in ln]
    assert order == ["$550.00", "$300.00", "$900.00"], text


def test_a_job_whose_reports_all_failed_is_unknown_not_free():
    """Issue 45 point 6 (hand-made rows): job j has one analysed GPU ($100 idle, comm 30 of 100 ms), job f only a
    failed report. f's row in jobs.csv: 0 GPUs, 1 failed report, every dollar and speed-up empty (unknown), never
    $0.00; the cluster's total is j's $100.00 and its failed report is counted."""
    ok = {"report": "r", "gpu_key": "g0", "cluster": "c", "job": "j", "status": "ok", "window_ns": 100 * MS,
          "iterations": 6, "idle_ns": 30 * MS, "idle_pct": 30.0, "low_confidence": False, "cat_comm_ns": 30 * MS,
          "fix_comm_usd_per_month": 100.0, "idle_usd_per_month": 100.0}
    bad = {"report": "bad.sqlite", "cluster": "c", "job": "f", "status": "error", "error": "boom"}
    fleet = build_fleet([ok, bad])
    jobs = rollup(fleet, ["cluster", "job"]).set_index("job")
    assert (jobs.loc["f", "gpus"], jobs.loc["f", "failed_reports"]) == (0, 1)
    usd = [c for c in jobs.columns if c.endswith("_usd_per_month") or c.endswith("_speedup")]
    assert usd and jobs.loc["f", usd].isna().all(), jobs.loc["f", usd]
    assert (jobs.loc["j", "idle_usd_per_month"], jobs.loc["j", "fix_comm_speedup"]) == (100.0, round(1 / 0.7, 4))
    assert jobs.reset_index()[["job", "idle_usd_per_month"]].to_csv(index=False) == "job,idle_usd_per_month\nf,\nj,100.0\n"
    clusters = rollup(fleet, ["cluster"]).set_index("cluster")
    assert (clusters.loc["c", "idle_usd_per_month"], clusters.loc["c", "failed_reports"]) == (100.0, 1)


# ---- issue 45 point 2 (h52): the speed-up beside a bounded saving is the bounded fix's; one implausible rule ----

def test_bounded_speedup_by_hand():
    """g0 (window 100 ms): data 40 ms, of which the evidence bounds a fix to 10 ms. The bounded speed-up is
    1 / (1 − 10/100) = 1.1111, the whole category's 1 / (1 − 40/100) = 1.6667; launch (15 ms, unbounded) has one
    speed-up, 1 / 0.85 = 1.1765, both columns. Every view prints the bounded one first, the whole one labelled."""
    from pipeline.analysis.fixfirst import gpu_recoverable, recoverable_ns
    from pipeline.analysis import diagnosis as dx
    from pipeline.report.html import _markdown_fixes
    from pipeline.report.words import recoverable_lines, speedup_text

    rows = _tiered_rows()
    fixes = fix_list(build_fleet(rows), {})
    fleet = fixes[(fixes["scope"] == "fleet") & (fixes["section"] == "device idle")]
    assert list(zip(fleet["category"], fleet["speedup"], fleet["recoverable_speedup"])) == [
        ("launch", 1.1765, 1.1765), ("data", 1.6667, 1.1111), ("cpu", round(1 / 0.7, 4), round(1 / 0.7, 4)),
        ("cpu", 10.0, 10.0)]
    findings = dx.of_text(rows[0]["diagnosis"])
    assert recoverable_ns("data", [40 * MS], [findings]) == 10 * MS
    assert speedup_text(1.6667, 1.1111) == "1.111× (if all of the category's idle went: 1.667×)"
    assert speedup_text(1.1765, 1.1765) == speedup_text(1.1765) == "1.177×"
    assert speedup_text(math.inf, math.nan) == "∞×" and speedup_text(math.nan, math.nan) == "-"
    md = "\n".join(_markdown_fixes(fleet.to_dict("records")))
    assert "| 2 | data | $100.00 (bounded by the evidence: " in md
    assert "| $400.00 | 1.111× (if all of the category's idle went: 1.667×) |" in md
    assert "| 1 | launch | $150.00 (the whole idle) | $150.00 | 1.177× |" in md
    # the GPU page's and medical record's line: the same two speed-ups
    gpu = {"window_ns": 100 * MS, "cat_data_ns": 40 * MS, "fix_data_usd_per_month": 400.0}
    [part] = gpu_recoverable(gpu, findings)
    assert (part["speedup"], part["recoverable_speedup"]) == (1.6667, 1.1111)
    assert recoverable_lines([part]) == [
        "data: a fix wins back $100.00: copies on the compute stream: only what a copy stream of their own could hide "
        "behind compute, 10.0 of 40.0 ms on 1 of 1 GPU(s); speed-up 1.111× (if all of the category's idle went: "
        "1.667×)"]


def test_implausible_is_the_speedup_itself_at_the_boundary():
    """10× (90 % of the window) is implausible, 9.999× (89.99 %) is not; a GPU row judges its whole idle's speed-up
    too: cpu 77 ms of 100 (4.3478×) with 99 ms idle (100×) is marked, as the printed table's x! and the entry."""
    from pipeline.analysis.fixfirst import gpu_columns, implausible
    from pipeline.cli import _speedup_marked

    assert (implausible(10.0), implausible(9.9999), implausible(math.inf), implausible(math.nan),
            implausible(None)) == (True, False, True, False, False)
    at = gpu_columns({"cpu": 90 * MS}, 100 * MS, 9, 100, 1.0)
    below = gpu_columns({"cpu": 89_990_000}, 100 * MS, 9, 100, 1.0)   # 1 / 0.1001 = 9.9900
    assert (at["fix_cpu_speedup"], at["implausible_speedup"]) == (10.0, True)
    assert (below["fix_cpu_speedup"], below["implausible_speedup"]) == (9.99, False)
    mostly = gpu_columns({"cpu": 77 * MS}, 100 * MS, 9, 100, 1.0, idle_ns=99 * MS)
    assert (mostly["fix_cpu_speedup"], mostly["implausible_speedup"]) == (4.3478, True)
    assert gpu_columns({"cpu": 77 * MS}, 100 * MS, 9, 100, 1.0)["implausible_speedup"] is False
    ok = pd.DataFrame({"amdahl_speedup": [100.0, 10.0, 9.999], "implausible_speedup": [False, False, True]})
    assert _speedup_marked(ok, ["100.000x", "10.000x", "9.999x"]) == ["100.000x!", "10.000x!", "9.999x"]

    def entry(cpu_ns):
        row = {"report": "r", "gpu_key": "g", "cluster": "c", "job": "j", "status": "ok", "window_ns": 100 * MS,
               "iterations": 9, "idle_ns": cpu_ns, "idle_pct": cpu_ns / MS, "confidence_tier": "medium",
               "low_confidence": False, "confidence_note": "", "cat_cpu_ns": cpu_ns, "fix_cpu_usd_per_month": 1.0}
        e = fix_list(build_fleet([row]), {}).iloc[0]
        return e["speedup"], e["implausible_speedup"]
    assert entry(90 * MS) == (10.0, True) and entry(89_990_000) == (9.99, False)


def test_remedy_names_the_role_gpus_and_the_costliest_first():
    """Issue 45 (tryout): a fleet entry's remedy names the stragglers and late ranks first, then its GPUs by what a
    fix wins back, largest first, never hiding them in "and N more". Four GPUs with cpu idle: A $10, B $50,
    C $30 (the straggler), D unpriced, E $40 (a late rank), F $20: by hand E, C (the roles, by dollars), B, F, A, D."""
    import numpy as np

    from pipeline.analysis.fixfirst import _lead_order, entry_remedy

    n = 6
    cols = {"straggler": np.asarray([False, False, True, False, False, False]),
            "late": np.asarray([False, False, False, False, True, False]),
            "usd_cpu_raw": np.asarray([10.0, 50.0, 30.0, math.nan, 40.0, 20.0])}
    part, at = np.arange(n), np.arange(n)
    order = _lead_order(cols, part, at, "cpu", [None] * n)   # no part of the idle bounded: each GPU's whole dollars
    assert [("ABCDEF")[j] for j in order] == ["E", "C", "B", "F", "A", "D"]
    # one remedy part resting on 4 of them: named in that order, 3 shown, the cheapest counted
    finding = {"category": "cpu", "rule": "cpu.host", "outcome": "host_bound", "remedy": "profile the host",
               "judged": True}
    names = ["A", "B", "C", "D", "E", "F"]
    found = [[finding], [finding], [finding], [], [], [finding]]
    text = entry_remedy("cpu", [found[j] for j in order], [names[j] for j in order])
    assert text.startswith("C, B, F and 1 more (4 of the 6 GPUs with cpu idle): profile the host; the other 2: ")
    # two remedies: the part of the GPU named first leads (tryout 2: the fleet's cpu entry led with the late rank's
    # 1-GPU part, a rule earlier in REMEDY_ORDER, and the straggler, the costliest GPU, came second)
    late = {"category": "cpu", "rule": "comm.late_rank", "outcome": "late_rank", "remedy": "fix this rank's host",
            "judged": True}
    two = entry_remedy("cpu", [[finding], [late]], ["C", "E"])
    assert two == ("C (1 of the 2 GPUs with cpu idle): profile the host; "
                   "E (1 of the 2 GPUs with cpu idle): fix this rank's host: profile the host (data loader, GIL, I/O) "
                   "(generic: no diagnostic rule could be judged)"), two
    assert entry_remedy("cpu", [[late], [finding]], ["E", "C"]).startswith("E (1 of the 2 GPUs with cpu idle): fix")
