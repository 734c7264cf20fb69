"""The example-fleet generator: what it plants is exactly what the analysis finds.

``pipeline.synth.generate_training_report`` writes an export and a truth JSON
computed from its own plan in plain Python; these tests run the real per-GPU
analysis (load_report -> gpu_trace -> analyse_gpu), or a real ``gpu-idle run`` and its
output files, and compare number for number.
The roster size is raised so that the roster lists every gap above the threshold.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import os
import sqlite3
import statistics

import pandas as pd
import pytest
from conftest import run_cli

from pipeline import synth
from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import Config, WindowRules, load_config
from pipeline.fleet.reduce import build_fleet
from pipeline.load.kineto import is_kineto_path, load_kineto
from pipeline.load.report import gpu_trace, load_report
from pipeline.model import GpuResult

LABELS = {"cluster": "c", "job": "j"}
SMALL = {"gpus": 4, "iterations": 8, "seed": 7}


def config(**analysis) -> Config:
    """``Config()`` with a roster long enough to hold every gap, plus ``analysis`` overrides."""
    cfg = Config()
    return dataclasses.replace(cfg, analysis=dataclasses.replace(cfg.analysis, roster_size=1_000_000, **analysis))


def analyse(path, cfg: Config) -> dict:
    """pid -> (GpuTrace, GpuResult) for every GPU of the report (an export or a PyTorch profiler trace)."""
    report = (load_kineto if is_kineto_path(str(path)) else load_report)(str(path))
    out = {}
    for key in report.gpu_keys():
        trace = gpu_trace(report, key)
        out[trace.pids[0]] = (trace, analyse_gpu(trace, cfg, LABELS))
    return out


def read_truth(report_path) -> dict:
    with open(synth.truth_path(report_path), encoding="utf-8") as fh:
        return json.load(fh)


def gap_set(gaps) -> list[tuple]:
    return sorted((g["stream_id"], g["start_ns"], g["length_ns"], g["category"]) for g in gaps)


def assert_matches(truth: dict, results: dict, window: str) -> None:
    """Every expected number equal, every gap found with its category and nothing else above 1 ms."""
    assert sorted(results) == sorted(g["pid"] for g in truth["gpus"])
    for gpu in truth["gpus"]:
        want = gpu["windows"][window]
        _, res = results[gpu["pid"]]
        row = res.row
        assert row["status"] == "ok", row["warnings"]
        assert row["window_rule"] == window
        assert {k: row[k] for k in want["expected"]} == want["expected"], f"pid {gpu['pid']}"
        assert row["gap_count"] == len(res.roster)
        found = gap_set(res.roster)
        assert found == gap_set(want["gaps"]), f"pid {gpu['pid']}"
        inside = [g for g in gpu["planted"]
                  if row["window_start_ns"] <= g["start_ns"] and g["end_ns"] <= row["window_end_ns"]]
        assert inside and set(gap_set(inside)) <= set(found)
        compute_gaps = [g for g in res.roster if g["stream_id"] == synth.COMPUTE_STREAM]
        assert gap_set(compute_gaps) == gap_set(inside)


@pytest.fixture(scope="module")
def no_checkpoint(tmp_path_factory):
    """A small balanced report without checkpoint: (path, truth)."""
    path = str(tmp_path_factory.mktemp("synth") / "train.sqlite")
    return path, synth.generate_training_report(path, checkpoint_iteration=None, **SMALL)


@pytest.fixture(scope="module")
def with_checkpoint(tmp_path_factory):
    """The same small report with the default checkpoint iteration: (path, truth)."""
    path = str(tmp_path_factory.mktemp("synth") / "train.sqlite")
    return path, synth.generate_training_report(path, **SMALL)


def test_span_window_matches_truth_exactly(no_checkpoint):
    path, truth = no_checkpoint
    assert_matches(truth, analyse(path, config(window="span")), "span")
    planted = [g for gpu in truth["gpus"] for g in gpu["planted"]]
    assert {g["category"] for g in planted} == {"sync", "data", "comm", "cpu"}
    assert {g["kind"] for g in planted} == {"sync", "data", "comm", "cpu", "warmup", "straggler"}


def test_nvtx_window_drops_warmup_and_checkpoint(with_checkpoint):
    path, truth = with_checkpoint
    assert_matches(truth, analyse(path, config(window="auto")), "nvtx")
    for gpu in truth["gpus"]:
        nvtx = gpu["windows"]["nvtx"]
        kinds = {gpu["iterations"][i]["kind"] for i in nvtx["iterations"]}
        assert kinds == {"steady"} and nvtx["expected"]["iterations"] == len(nvtx["iterations"]) >= 3
        assert {g["kind"] for g in gpu["windows"]["span"]["gaps"]} >= {"warmup", "checkpoint"}
        assert not {g["kind"] for g in nvtx["gaps"]} & {"warmup", "checkpoint"}


def run_results(path, out) -> dict:
    """pid -> (None, GpuResult) rebuilt from the per-GPU JSON files a ``gpu-idle run`` wrote in ``out``
    (``_summary`` is the fleet row): the shape :func:`assert_matches` takes."""
    results = {}
    for doc_path in sorted((out / "gpus").glob("*.json")):
        doc = json.loads(doc_path.read_text(encoding="utf-8"))
        assert doc["report"] == doc["_summary"]["report"] == str(path)
        results[doc["_summary"]["pid"]] = (None, GpuResult(row=doc["_summary"], roster=doc["roster"],
                                                           device_roster=doc["device_roster"],
                                                           timeline=doc["timeline"]))
    return results


def test_truth_json_is_what_gpu_idle_run_finds(with_checkpoint, tmp_path):
    """The truth file beside the export, field by field, against the outputs of real ``gpu-idle run``
    processes (``--window auto`` and ``--window span``, roster long enough for every gap): per GPU
    its pid, device, uuid (the GPU key), model and straggler flag; per window every expected
    fleet-row number, every per-stream gap with its category, the planted gaps inside W; for the
    NVTX window the kept iterations (the others excluded, the timeline's iterations running from
    one planned NVTX start to the next); the report's name and straggler pid. Not in any output,
    so not compared: the generator's ``params``, ``format``, each GPU's ``rank`` and ``bus``.
    The file is also the dict the generator returned."""
    path, returned = with_checkpoint
    truth = read_truth(path)
    assert truth == returned
    for window, key in (("auto", "nvtx"), ("span", "span")):
        out = tmp_path / window
        run_cli("run", path, "--out", str(out), "--window", window, "--limit", "1000000")
        results = run_results(path, out)
        assert_matches(truth, results, key)
        fleet = pd.read_parquet(out / "fleet.parquet")
        assert [os.path.basename(r) for r in fleet["report"]] == [truth["report"]] * len(truth["gpus"])
        assert fleet.loc[fleet["straggler"], "pid"].tolist() == [truth["straggler_pid"]]
        for gpu in truth["gpus"]:
            _, res = results[gpu["pid"]]
            row = res.row
            assert (row["pid"], row["device_id"], row["gpu_key"], row["gpu_model"], row["straggler"]) == \
                (gpu["pid"], gpu["device_id"], f"GPU-{gpu['uuid']}", gpu["gpu_model"], gpu["straggler"])
            kept = gpu["windows"][key]["iterations"]
            excluded = [int(item.split(":")[0]) for item in row["excluded_iterations"].split("; ") if item]
            # span detects no iterations: none kept, none excluded
            assert excluded == ([i for i in range(len(gpu["iterations"])) if i not in kept] if kept else [])
            starts = [it["nvtx_start_ns"] for it in gpu["iterations"]]
            assert res.timeline["iterations"] == [[starts[i], starts[i + 1]] for i in kept]


def test_gpus_are_named_one_per_process(with_checkpoint):
    path, truth = with_checkpoint
    results = analyse(path, config())
    uuids = set()
    for gpu in truth["gpus"]:
        trace, res = results[gpu["pid"]]
        assert trace.device_ids == (0,) and trace.gpu_model == "NVIDIA H100 80GB HBM3"
        assert gpu["uuid"] in trace.gpu_key
        uuids.add(gpu["uuid"])
    assert len(uuids) == len(truth["gpus"])


def test_unnamed_gpus_write_no_gpu_tables(tmp_path):
    path = str(tmp_path / "anon.sqlite")
    truth = synth.generate_training_report(path, gpus=2, iterations=4, seed=3, name_gpus=False,
                                           checkpoint_iteration=None)
    with sqlite3.connect(path) as con:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert not tables & {"TARGET_INFO_GPU", "TARGET_INFO_CUDA_DEVICE"}
    results = analyse(path, config(window="span"))
    assert all(trace.gpu_model == "" for trace, _ in results.values())
    assert_matches(truth, results, "span")


def test_straggler_is_the_flagged_gpu(with_checkpoint):
    path, truth = with_checkpoint
    rows = [res.row for _, res in analyse(path, config(window="auto")).values()]
    fleet = build_fleet(rows, Config().analysis.straggler_spread_pct)
    assert fleet.loc[fleet["straggler"], "pid"].tolist() == [truth["straggler_pid"]]


def test_single_checkpoint_is_not_periodic(with_checkpoint):
    """The one checkpoint pause is large enough to be a ``periodic`` candidate, but it does not
    recur, so no gap is ``periodic``: the pause is ``cpu`` in the span window (no iteration known)
    and ``boundary`` in an NVTX window that keeps the checkpoint iteration (the next iteration's
    NVTX range starts inside it, and only its few D2H copies run on the CUDA side). The NCCL
    stream's wait across the same pause is ``comm`` (its kernel before is a gradient bucket).
    Expected values come from the plan: the planted pause and the NVTX iterations in the truth."""
    path, truth = with_checkpoint
    span = analyse(path, config(window="span"))
    assert_matches(truth, span, "span")   # every number and gap of the span window as planned
    keep_all = dataclasses.replace(config(window="nvtx"), window=WindowRules(outlier_factor=4.0))
    nvtx = analyse(path, keep_all)
    checkpoint = truth["params"]["checkpoint_iteration"]
    assert checkpoint == 5   # (2 x 8 iterations) // 3
    for gpu in truth["gpus"]:
        (pause,) = [g for g in gpu["planted"] if g["kind"] == "checkpoint"]
        start, end = pause["start_ns"], pause["end_ns"]
        # A periodic candidate: >= 50 ms and >= 5 x the median gap (CategoryRules' defaults).
        median = statistics.median(g["length_ns"] for g in gpu["windows"]["span"]["gaps"])
        assert pause["length_ns"] >= 50_000_000 and pause["length_ns"] >= 5 * median
        next_start = gpu["iterations"][checkpoint + 1]["nvtx_start_ns"]
        assert start <= next_start <= end   # the next iteration begins inside the pause
        for results, want in ((span, "cpu"), (nvtx, "boundary")):
            _, res = results[gpu["pid"]]
            row = res.row
            assert row["window_start_ns"] <= start and end <= row["window_end_ns"]
            assert row["iterations"] == (0 if want == "cpu" else SMALL["iterations"] - 1)
            assert [(g["start_ns"], g["length_ns"], g["category"]) for g in res.roster
                    if g["stream_id"] == synth.COMPUTE_STREAM and g["start_ns"] == start] \
                == [(start, pause["length_ns"], want)]
            assert [(g["start_ns"], g["length_ns"], g["category"]) for g in res.device_roster
                    if g["start_ns"] == start] == [(start, pause["length_ns"], want)]
            nccl = [(g["category"], g["kernel_before"]) for g in res.roster
                    if g["stream_id"] == synth.NCCL_STREAM and g["start_ns"] < end and start < g["end_ns"]]
            assert nccl == [("comm", synth.PROFILES["balanced"].bucket_collective)]
            assert [g for g in res.roster + res.device_roster if g["category"] == "periodic"] == []
            assert row["cat_periodic_ns"] == 0
        # No other device hole above 1 ms holds an iteration start: the pause is all of boundary.
        assert nvtx[gpu["pid"]][1].row["cat_boundary_ns"] == pause["length_ns"]


def test_same_seed_same_bytes_other_seed_other_data(tmp_path):
    paths = [str(tmp_path / d / "r.sqlite") for d in ("a", "b", "c")]
    for p, seed in zip(paths, (5, 5, 6)):
        os.makedirs(os.path.dirname(p))
        synth.generate_training_report(p, gpus=2, iterations=5, seed=seed)

    a, b, c = (snapshot(tmp_path / d) for d in ("a", "b", "c"))
    assert a == b and set(a) == {"r.sqlite", "r.sqlite.truth.json"}
    assert a["r.sqlite"] != c["r.sqlite"]


def test_bad_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="unknown profile"):
        synth.generate_training_report(str(tmp_path / "x.sqlite"), profile="nope")
    with pytest.raises(ValueError, match="straggler_rank"):
        synth.generate_training_report(str(tmp_path / "x.sqlite"), gpus=2, straggler_rank=2)
    with pytest.raises(ValueError, match="checkpoint_iteration"):
        synth.generate_training_report(str(tmp_path / "x.sqlite"), iterations=4, checkpoint_iteration=0)


def snapshot(folder) -> dict:
    """Path under ``folder`` -> sha256 of every file in it (subfolders too)."""
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_example_fleet(tmp_path):
    out = tmp_path / "fleet"
    paths = synth.make_example_fleet(str(out))
    first = snapshot(out)
    assert synth.make_example_fleet(str(out)) == paths
    assert snapshot(out) == first   # idempotent, byte for byte
    traces = [p for p in paths if p.endswith(".pt.trace.json.gz")]
    assert len(paths) - len(traces) == 4 and sum(os.path.getsize(p) for p in paths) < 20 * 2 ** 20
    # one job profiled with the PyTorch profiler: a folder with one trace per rank, one job by its label
    assert [os.path.relpath(p, out) for p in traces] == ["vit-train-pytorch/rank0.pt.trace.json.gz",
                                                         "vit-train-pytorch/rank1.pt.trace.json.gz"]
    labels = load_config([str(out / "labels.yaml")])
    assert {labels.labels_for(p)["job"] for p in traces} == {"vit-train-pytorch"}

    truths = {p: read_truth(p) for p in paths}
    assert {t["params"]["profile"] for t in truths.values()} == {"balanced", "data-bound", "comm-heavy"}
    assert all(2 <= t["params"]["gpus"] <= 8 for t in truths.values())
    assert any(t["straggler_pid"] for t in truths.values())
    for path, truth in truths.items():   # status ok on every GPU, every number as planted
        assert_matches(truth, analyse(path, config(window="auto")), "nvtx")

    def planted_share(profile, category):
        gaps = [g for t in truths.values() if t["params"]["profile"] == profile
                for gpu in t["gpus"] for g in gpu["planted"] if g["kind"] == g["category"]]
        return sum(g["category"] == category for g in gaps) / len(gaps)

    assert planted_share("data-bound", "data") > 0.5
    assert planted_share("comm-heavy", "comm") > 0.5


def test_example_traces_name_their_copies_as_the_export_of_the_same_plan(tmp_path):
    """The example fleet's PyTorch profiler job (:data:`synth.EXAMPLE_KINETO_JOB`) and an Nsight export
    of the same plan: every copy of a rank is in both, with the same direction, size and host memory
    (pageable: the plan's cudaMemcpyAsync calls copy from ordinary host memory), never "unknown"; the
    traces spell it as Kineto does (``Memcpy HtoD (Pageable -> Device)``)."""
    from pipeline.analysis.attribution import gap_copies

    spec = dict(synth.EXAMPLE_KINETO_JOB)
    traces = synth.generate_training_traces(str(tmp_path / spec.pop("folder")), **spec)
    export = str(tmp_path / "same-plan.sqlite")
    spec.pop("labels")
    synth.generate_training_report(export, **spec)
    nsight = load_report(export)

    def copies(c) -> list[tuple]:
        memcpy = c[c["kind"] == "memcpy"].sort_values(["start", "end"])
        listed = gap_copies(pd.DataFrame({"start": [memcpy["start"].min()], "end": [memcpy["end"].max()]}),
                            memcpy, limit=len(memcpy))[0]["copies"]
        return [(x["start_ns"], x["end_ns"], x["direction"], x["bytes"], x["host_memory"]) for x in listed]

    seen = set()
    for rank, path in enumerate(traces):
        with gzip.open(path) as fh:
            names = {e["name"] for e in json.load(fh)["traceEvents"] if e.get("cat") == "gpu_memcpy"}
        assert names == {"Memcpy HtoD (Pageable -> Device)", "Memcpy DtoH (Device -> Pageable)"}, path
        trace = load_kineto(path)
        pid = int(trace.runtime["pid"].iloc[0])
        got = copies(trace.copies)
        assert got == copies(nsight.copies[nsight.copies["pid"] == pid]) and len(got) > 10
        seen |= {(d, h) for _, _, d, _, h in got}
    assert seen == {("HtoD", "pageable"), ("DtoH", "pageable")}



def test_synth_sizes_it_cannot_plant_are_one_line_and_nothing_written(tmp_path):
    """`synth --kernels` with too few kernels per GPU and iteration is a usage error (exit 2), one that
    cannot plant every category at its size is exit 1 with nothing left behind, and an --out folder that
    does not exist is made. Before: tracebacks (ValueError, RuntimeError with a written export left,
    sqlite3.OperationalError)."""
    from conftest import run_cli

    few = run_cli("synth", "--kernels", "100", "--gpus", "8", "--out", str(tmp_path / "few.sqlite"), check=False)
    assert few.returncode == 2 and "Traceback" not in few.stderr
    assert "Invalid value for --kernels: too few kernels per iteration (1): need at least 31" in few.stderr
    small = tmp_path / "small" / "x.sqlite"
    cut = run_cli("synth", "--kernels", "1000", "--gpus", "2", "--out", str(small), check=False)
    assert cut.returncode == 1 and "Traceback" not in cut.stderr
    assert "not as planted; nothing written: give more --kernels" in cut.stderr
    assert os.listdir(small.parent) == []
    deep = tmp_path / "a" / "b" / "x.sqlite"
    run_cli("synth", "--gpus", "1", "--iterations", "3", "--out", str(deep))
    assert sorted(os.listdir(deep.parent)) == ["x.sqlite", "x.sqlite.truth.json"]
