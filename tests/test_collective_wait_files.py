"""The wait inside collectives across the files of one job on one host (issue 47 §1, second point;
docs/definitions.md#collective-wait-across-files).

Worked by hand: three ranks of one world-size-3 job, one PyTorch trace each, every trace naming host ``node-a``.
Rank r runs a gemm [S, S + 4 ms), three AllReduce calls and a last gemm [S + 30 ms, S + 32 ms), so its window W
(the whole span, no iterations) is [S, S + 32 ms), 32 ms. Call k (k = 0, 1, 2) starts at b_k = S + (5 + 10k) ms
on rank 0, at b_k + 0.5 ms on rank 1 and at b_k + 2 ms on rank 2 (the planted late rank); every rank's kernel ends
at b_k + 3 ms. So the last rank enters at b_k + 2 ms in every call:

* rank 0 waits 2 ms and transfers 1 ms per call: wait 6 ms, transfer 3 ms, collective 9 ms, last in 0 calls;
* rank 1 waits 1.5 ms, transfers 1 ms: wait 4.5 ms, transfer 3 ms, collective 7.5 ms, last in 0;
* rank 2 enters at b_k + 2 ms and ends at b_k + 3 ms: wait 0, transfer 1 ms per call, collective 3 ms; last in
  all 3 calls: the chronic late rank.

A plain second computation (:func:`second_wait`) reads the same files with the stdlib ``json`` and ``Decimal``
and matches the k-th AllReduce of each rank by hand.
"""
from __future__ import annotations

import gzip
import json
import os
from decimal import Decimal

import pytest
from conftest import KINETO
from helpers.engine import analyse_reports

from pipeline.analysis import collwait
from pipeline.config import Config, LabelRule
from pipeline.engine.map import InProcess
from pipeline.fleet.crosswait import ACROSS_FILES, match_across_files, one_clock
from pipeline.fleet.outputs import gpu_json_name, write_gpu_docs
from pipeline.fleet.reduce import reduce_outcomes, rollup
from pipeline.report.medical import collective_line
from pipeline.runs.driver import Todo, analysed
from pipeline.schema import JOB_KEY
from pipeline.store.results import ResultStore
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter

MS = 1_000_000
S = 1_733_000_000_000_000_000
ALLREDUCE = "ncclDevKernel_AllReduce_Sum_f32_RING_LL"
#: How late each rank enters every call (ns after rank 0).
DELAY = {0: 0, 1: MS // 2, 2: 2 * MS}


def rank_trace(path, rank: int, host: str | None, world_size: int | None = 3, delay: int | None = None) -> str:
    """Rank ``rank``'s trace (the module doc): gemms on stream 7, AllReduce calls on stream 20."""
    w = KinetoWriter(str(path), pid=100 + rank, devices=[(rank, "NVIDIA H100 80GB HBM3", 132)],
                     rank=None if world_size is None else rank, world_size=world_size, base_time_ns=S - 5 * MS,
                     host_name=host)
    late = DELAY[rank] if delay is None else delay
    kernels = [(S, S + 4 * MS, 7, "gemm")]
    kernels += [(S + (5 + 10 * k) * MS + late, S + (8 + 10 * k) * MS, 20, ALLREDUCE) for k in range(3)]
    kernels += [(S + 30 * MS, S + 32 * MS, 7, "gemm")]
    for i, (a, b, stream, name) in enumerate(kernels):
        w.runtime(101 + rank, a - 500, a - 100, "cudaLaunchKernel", 10 + i)
        w.kernel(rank, stream, a, b, name, 10 + i)
    return w.close()


def second_wait(paths) -> dict:
    """Plain second computation: ``{file name: (wait ns, transfer ns, last count)}`` from the traces' text
    (``ts`` relative to ``baseTimeNanoseconds``, µs with three decimals), the k-th AllReduce of each matched by
    hand, each rank's whole kernels inside its window (first to last kernel of the trace)."""
    ranks = {}
    for p in paths:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh, parse_float=Decimal)
        base = int(doc["baseTimeNanoseconds"])
        ks = [(base + int(e["ts"] * 1000), base + int((e["ts"] + e["dur"]) * 1000), e["name"])
              for e in doc["traceEvents"] if e.get("cat") == "kernel"]
        ranks[os.path.basename(p)] = sorted((s, e) for s, e, n in ks if n.startswith("nccl"))
    calls = len(next(iter(ranks.values())))
    last = [max(r[k][0] for r in ranks.values()) for k in range(calls)]
    return {name: (sum(max(0, min(e, last[k]) - s) for k, (s, e) in enumerate(r)),
                   sum(max(0, e - max(s, last[k])) for k, (s, e) in enumerate(r)),
                   sum(s == last[k] for k, (s, _) in enumerate(r))) for name, r in ranks.items()}


def fleet_of(paths, cfg=Config()):
    fleet, _ = analyse_reports([str(p) for p in paths], cfg, InProcess())
    return fleet.sort_values("report").reset_index(drop=True)


@pytest.fixture(scope="module")
def one_host(tmp_path_factory):
    """Three ranks of one job on host node-a: ``train_rank<r>.json``."""
    folder = tmp_path_factory.mktemp("crosswait")
    return [rank_trace(folder / f"train_rank{r}.json", r, "node-a") for r in range(3)]


@pytest.fixture(scope="module")
def one_host_fleet(one_host):
    return fleet_of(one_host)


def test_same_host_ranks_are_matched_across_files(one_host, one_host_fleet):
    fleet = one_host_fleet
    assert fleet["job"].tolist() == ["train"] * 3 and fleet["job_grouped_by"].tolist() == ["distributedInfo"] * 3
    assert fleet["host"].tolist() == ["node-a"] * 3
    assert fleet["host_source"].tolist() == ["the trace's host_name"] * 3
    assert fleet["window_start_ns"].tolist() == [S] * 3 and fleet["window_ns"].tolist() == [32 * MS] * 3
    assert fleet["collective_wait_status"].tolist() == [collwait.MEASURED] * 3
    assert fleet["collective_match_basis"].tolist() == [ACROSS_FILES] * 3
    # by hand (the module doc)
    assert fleet["collective_wait_ns"].tolist() == [6 * MS, 4_500_000, 0]
    assert fleet["collective_transfer_ns"].tolist() == [3 * MS] * 3
    assert fleet["collective_ns"].tolist() == [9 * MS, 7_500_000, 3 * MS]
    assert fleet["collective_calls"].tolist() == [3, 3, 3]
    assert fleet["collective_last_count"].tolist() == [0, 0, 3]
    assert fleet["collective_chronic"].tolist() == [False, False, True]
    assert fleet["collective_wait_pct"].tolist() == [18.75, 14.0625, 0.0]
    # and by the plain second computation
    plain = second_wait(one_host)
    got = {os.path.basename(r): (w, t, n) for r, w, t, n in zip(fleet["report"], fleet["collective_wait_ns"],
                                                               fleet["collective_transfer_ns"],
                                                               fleet["collective_last_count"])}
    assert got == plain
    note = fleet["collective_wait_note"].iloc[0]
    assert note == ("3 GPUs in 3 files on one host, node-a (the trace's host_name): one clock; calls matched by "
                    "the k-th kernel of each family: AllReduce ×3")
    # the wait is priced like idle at the GPU's own rate: its share of W × rate × hours per month
    rate, hours = float(fleet["rate_usd_per_hour"].iloc[0]), Config().cost.hours_per_month
    assert fleet["collective_wait_usd_per_month"].iloc[0] == round(6 / 32 * rate * hours, 2)
    job = rollup(fleet, list(JOB_KEY)).iloc[0]
    assert job["collective_measured_gpus"] == 3 and job["collective_wait_ns"] == 10_500_000
    assert job["collective_late_rank"] == "pid102/dev2 in train_rank2.json"
    assert job["collective_match_basis"] == ACROSS_FILES
    assert job["collective_late_rank_kind"] == "chronic"


def test_the_record_says_one_clock_not_a_lower_bound(one_host_fleet):
    """The job's record line: 10.5 ms of wait over 3 windows of 32 ms (10.94 %), the late rank, rank 2, last in its 3
    calls; one clock domain, so no "measured within each of its reports apart" caveat."""
    rows = one_host_fleet.to_dict("records")
    line = collective_line(rows, {(r["report"], r["gpu_key"]): f"rank {r['rank']}" for r in rows})
    assert line.startswith("Collective wait: 10.500 ms waiting for the last rank inside collectives (10.94 % of the "
                           "windows) of 19.500 ms in collective kernels on 3 GPU(s)")
    assert ("late rank rank 2 (chronic: last in 3 of 3 calls); matched across files: 3 GPUs in 3 files on one host, "
            "node-a (the trace's host\\_name): one clock.") in line
    assert "apart" not in line


def test_gpu_files_written_by_the_task_get_the_job_figures(one_host, tmp_path):
    """Where the task writes each GPU's JSON itself (a worker that sees this machine's files) its result keeps only
    the row, the device roster and the calls: the job's step still matches them, and the GPU's file gets the
    measured figures in its ``_summary`` when the outputs are written."""
    gpus = tmp_path / "gpus"
    fleet, rosters = analyse_reports(list(one_host), Config(), InProcess(), gpu_dir=str(gpus))
    fleet = fleet.sort_values("report").reset_index(drop=True)
    assert all("json" in rosters[(r, g)] for r, g in zip(fleet["report"], fleet["gpu_key"]))  # written by the task
    assert fleet["collective_wait_ns"].tolist() == [6 * MS, 4_500_000, 0]
    write_gpu_docs(str(gpus), fleet, rosters)
    with open(gpus / gpu_json_name(fleet["report"][0], fleet["gpu_key"][0]), encoding="utf-8") as fh:
        doc = json.load(fh)
    assert (doc["_summary"]["collective_wait_ns"], doc["_summary"]["collective_match_basis"]) == (6 * MS, ACROSS_FILES)
    assert "collective_calls" not in doc


def test_stored_results_are_matched_across_files(one_host, tmp_path):
    """The calls travel with each GPU's stored result: a later run that reuses all three stored results (nothing
    analysed now) matches them as the first did. One report's calls stored alone would not be enough: each
    GPU of the three keeps its own."""
    cfg = Config()
    outcomes = list(analysed([Todo(p, cfg.labels_for(p), None) for p in one_host], cfg, InProcess()))
    store = ResultStore(str(tmp_path))
    for i, o in enumerate(outcomes):
        assert [r.collective_calls["starts"] for r in o.results] == [
            [S + (5 + 10 * k) * MS + DELAY[int(o.path[-6])] for k in range(3)]]
        assert store.put_results(f"k{i}", o.results)
    rows, rosters = [], {}
    for i, o in enumerate(outcomes):
        got_rows, got_rosters, _ = store.get(f"k{i}", o.path)
        rows += got_rows
        rosters.update(got_rosters)
    fleet, _ = reduce_outcomes([], cfg, stored_rows=rows, stored_rosters=rosters)
    fleet = fleet.sort_values("report").reset_index(drop=True)
    assert fleet["collective_wait_ns"].tolist() == [6 * MS, 4_500_000, 0]
    assert fleet["collective_match_basis"].tolist() == [ACROSS_FILES] * 3


def test_no_late_rank_waits_nothing(tmp_path):
    """Two ranks entering every call together: no wait, all transfer; both last in every call (a tie)."""
    paths = [rank_trace(tmp_path / f"even_rank{r}.json", r, "node-a", world_size=2, delay=0) for r in range(2)]
    fleet = fleet_of(paths)
    assert fleet["collective_wait_ns"].tolist() == [0, 0]
    assert fleet["collective_transfer_ns"].tolist() == [9 * MS, 9 * MS]
    assert fleet["collective_last_count"].tolist() == [3, 3]


def test_different_hosts_abstain(tmp_path):
    paths = [rank_trace(tmp_path / f"split_rank{r}.json", r, host, world_size=2)
             for r, host in ((0, "node-a"), (1, "node-b"))]
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == ["split"] * 2
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_ns"].isna().all() and fleet["collective_wait_usd_per_month"].isna().all()
    assert fleet["collective_wait_note"].tolist() == [
        "ranks in separate reports: the files are on different hosts (node-a: split_rank0.json; node-b: "
        "split_rank1.json): their clocks are not known to agree"] * 2
    assert fleet["collective_ns"].tolist() == [9 * MS, 7_500_000]   # still measured: no match needed


def test_host_unknown_abstains(tmp_path):
    paths = [rank_trace(tmp_path / f"nohost_rank{r}.json", r, "node-a" if r else None, world_size=2)
             for r in range(2)]
    fleet = fleet_of(paths)
    assert fleet["host"].fillna("").tolist() == ["", "node-a"]
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].tolist() == [
        "ranks in separate reports: host unknown for nohost_rank0.json (the file names no host and no label names "
        "its node): the files' clocks are not known to agree"] * 2


def test_missing_rank_abstains(one_host):
    """Two of the three ranks' files: the third rank may be the late one, so no wait is measured."""
    fleet = fleet_of(one_host[:2])
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: 2 GPU(s) with collectives in 2 files of the 3 ranks the captures name (host "
        "node-a): the others' files are not here")


def test_two_runs_on_one_host_abstain(tmp_path):
    """A labels rule puts two traces of one host into one job, but rank 1's capture starts 1 s after rank 0's
    ended: two runs, not one; matching their k-th calls would pair calls a second apart."""
    paths = [rank_trace(tmp_path / "runs_a.json", 0, "node-a", world_size=None)]
    w = KinetoWriter(str(tmp_path / "runs_b.json"), pid=101, devices=[(1, "NVIDIA H100 80GB HBM3", 132)],
                     base_time_ns=S, host_name="node-a")
    for i, (a, b, stream, name) in enumerate([(0, 4 * MS, 7, "gemm"), (5 * MS, 8 * MS, 20, ALLREDUCE)]):
        w.kernel(1, stream, S + 1_000 * MS + a, S + 1_000 * MS + b, name, 10 + i)
        w.runtime(102, S + 1_000 * MS + a - 500, S + 1_000 * MS + a - 100, "cudaLaunchKernel", 10 + i)
    paths.append(w.close())
    fleet = fleet_of(paths, Config(labels=(LabelRule(match="*runs_*", cluster="lab", job="runs"),)))
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: the 2 files on host node-a hold captures that do not overlap in time (not one run)")


def test_calls_that_disagree_across_files_abstain(tmp_path):
    """Same host, one run, but rank 1's trace lost its last AllReduce: 3 calls against 2, not matched."""
    paths = [rank_trace(tmp_path / "lost_rank0.json", 0, "node-a", world_size=2)]
    w = KinetoWriter(str(tmp_path / "lost_rank1.json"), pid=101, devices=[(1, "NVIDIA H100 80GB HBM3", 132)],
                     rank=1, world_size=2, base_time_ns=S - 5 * MS, host_name="node-a")
    kernels = [(S, S + 4 * MS, 7, "gemm")] + [(S + (5 + 10 * k) * MS, S + (8 + 10 * k) * MS, 20, ALLREDUCE)
                                              for k in range(2)] + [(S + 30 * MS, S + 32 * MS, 7, "gemm")]
    for i, (a, b, stream, name) in enumerate(kernels):
        w.runtime(102, a - 500, a - 100, "cudaLaunchKernel", 10 + i)
        w.kernel(1, stream, a, b, name, 10 + i)
    paths.append(w.close())
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == ["lost"] * 2
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: 2 files on host node-a; calls disagree between GPUs: pid100/dev0 in "
        "lost_rank0.json ran AllReduce ×3, pid101/dev1 in lost_rank1.json ran AllReduce ×2; not matched")


def test_a_labels_rule_groups_and_is_matched(tmp_path):
    """Traces without distributedInfo, put into one job by a labels rule, on one host: matched across files."""
    paths = [rank_trace(tmp_path / f"part{r}.json", r, "node-a", world_size=None) for r in range(3)]
    cfg = Config(labels=(LabelRule(match="*part*", cluster="lab", job="pipeline"),))
    fleet = fleet_of(paths, cfg)
    assert fleet["job"].tolist() == ["pipeline"] * 3 and fleet["job_grouped_by"].tolist() == ["labels"] * 3
    assert fleet["collective_wait_status"].tolist() == [collwait.MEASURED] * 3
    assert fleet["collective_wait_ns"].tolist() == [6 * MS, 4_500_000, 0]


T0 = 10_000_000_000   # the host's clock at the capture's start (TARGET_INFO_SESSION_START_TIME.systemClockNs)


def rank_export(path, rank: int, host: str | None, on_host_clock: bool = True) -> str:
    """Rank ``rank`` of a 2-rank Slurm job (``SLURM_JOB_ID=4242``, ``WORLD_SIZE=2``), one Nsight export per rank on
    ``host``: gemms [0, 4) and [30, 32) ms, AllReduce calls at (5 + 10k) ms (k = 0, 1), rank 1 entering 1 ms late,
    both ending at (8 + 10k) ms; times on the host's clock (T0 + ...), or counting from the capture's start."""
    w = ExportWriter(str(path))
    pid, zero = 200 + rank, (T0 if on_host_clock else 0)
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid=f"u{rank}")
    w.cuda_device(0, 0, pid)
    w.session(T0, 100 * MS)
    if host:
        w.system_env("Hostname", host, 619)
    for var in ("SLURM_JOB_ID=4242", "WORLD_SIZE=2"):
        w.capture("PROCESS_0:ENVIRONMENT_VARIABLE", var)
    w.kernel(pid=pid, device=0, stream=7, start=zero, end=zero + 4 * MS, name="gemm")
    for k in range(2):
        w.kernel(pid=pid, device=0, stream=20, start=zero + (5 + 10 * k) * MS + rank * MS,
                 end=zero + (8 + 10 * k) * MS, name=ALLREDUCE)
    w.kernel(pid=pid, device=0, stream=7, start=zero + 30 * MS, end=zero + 32 * MS, name="gemm")
    w.close()
    return str(path)


def test_nsight_exports_on_one_host_are_matched(tmp_path):
    """By hand: rank 0 waits 1 ms and transfers 2 ms in each of 2 calls (wait 2 ms, transfer 4 ms); rank 1 is last
    in both and transfers 2 ms each (wait 0, transfer 4 ms)."""
    paths = [rank_export(tmp_path / f"node{r}.sqlite", r, "node-a") for r in range(2)]
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == ["slurm-4242"] * 2
    assert fleet["host"].tolist() == ["node-a"] * 2
    assert fleet["host_source"].tolist() == ["TARGET_INFO_SYSTEM_ENV Hostname"] * 2
    assert fleet["collective_wait_ns"].tolist() == [2 * MS, 0]
    assert fleet["collective_transfer_ns"].tolist() == [4 * MS, 4 * MS]
    assert fleet["collective_last_count"].tolist() == [0, 2]
    assert fleet["collective_match_basis"].tolist() == [ACROSS_FILES] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "2 GPUs in 2 files on one host, node-a (TARGET_INFO_SYSTEM_ENV Hostname): one clock; calls matched by the "
        "k-th kernel of each family: AllReduce ×2")


def test_nsight_rows_counting_from_the_capture_start_abstain(tmp_path):
    """The same exports with rows counting from each capture's start: the host is named but its clock is not the
    rows', so no shared clock is known."""
    paths = [rank_export(tmp_path / f"rel{r}.sqlite", r, "node-a", on_host_clock=False) for r in range(2)]
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == ["slurm-4242"] * 2
    assert fleet["host"].fillna("").tolist() == ["", ""]
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: host unknown for rel0.sqlite and 1 more file(s) (TARGET_INFO_SYSTEM_ENV Hostname "
        "names node-a, but the rows are not timed on the host's clock (their zero: ANALYSIS_DETAILS (the rows count "
        "from the capture's start))): the files' clocks are not known to agree")


def test_one_file_name_in_two_folders(tmp_path):
    """Two processes' traces of one host in two folders, both named ``trace.json`` and both GPU pid100/dev0 (one
    entering every call 1 ms late): each GPU is named by its whole path, never taken for the other."""
    paths = []
    for r in range(2):
        (tmp_path / f"r{r}").mkdir()
        paths.append(rank_trace(tmp_path / f"r{r}" / "trace.json", 0, "node-a", world_size=None, delay=r * MS))
    fleet = fleet_of(paths, Config(labels=(LabelRule(match="*trace.json", cluster="lab", job="two"),)))
    assert fleet["collective_wait_ns"].tolist() == [3 * MS, 0]
    assert fleet["collective_last_count"].tolist() == [0, 3]


def test_a_gpu_with_its_calls_outside_its_window_still_sets_the_last_start():
    """By hand, on fleet rows: GPU a's one call [10, 20) is inside its W [0, 100); GPU b's call of it starts at 15
    but b's W is [50, 100) (status none: no call in W). b entered last, so a waits [10, 15): 5 ns, transfers 5."""
    def row(report, w0, status):
        return {"report": report, "gpu_key": "g", "cluster": "c", "job": "j", "status": "ok", "host": "h",
                "host_source": "the trace's host_name", "first_kernel_ns": 0, "capture_ns": 100,
                "window_start_ns": w0, "window_end_ns": 100, "window_ns": 100 - w0, "rate_usd_per_hour": 1.0,
                "collective_wait_status": status,
                "collective_wait_note": "ranks in separate reports: …" if status == collwait.ABSTAINED else ""}
    rows = [row("/x/a.json", 0, collwait.ABSTAINED), row("/x/b.json", 50, collwait.NO_COLLECTIVE)]
    rosters = {("/x/a.json", "g"): {"collective_calls": collwait.calls_json(calls_of([(10, 20)]), 0)},
               ("/x/b.json", "g"): {"collective_calls": collwait.calls_json(calls_of([(15, 20)]), 0)}}
    match_across_files(rows, rosters, Config())
    a, b = rows
    assert (a["collective_wait_status"], a["collective_wait_ns"], a["collective_transfer_ns"]) == (
        collwait.MEASURED, 5, 5)
    assert (b["collective_wait_status"], b["collective_calls"]) == (collwait.NO_COLLECTIVE, 0)


def calls_of(spans) -> collwait.RankCalls:
    s, e = zip(*spans)
    return collwait.rank_calls(s, e, [ALLREDUCE] * len(s), [True] * len(s))


def test_one_clock_rule():
    rows = [{"report": "/a/x.json", "host": "h", "host_source": "the trace's host_name"},
            {"report": "/a/y.json", "host": "h", "host_source": "TARGET_INFO_SYSTEM_ENV Hostname"}]
    assert one_clock(rows) == ("h", "TARGET_INFO_SYSTEM_ENV Hostname, the trace's host_name", "")
    rows[1]["host"] = None
    rows[1]["host_source"] = "TARGET_INFO_SYSTEM_ENV Hostname names h, but the rows are not timed on the host's clock"
    assert one_clock(rows)[2].startswith("host unknown for y.json (TARGET_INFO_SYSTEM_ENV Hostname names h, but")


@pytest.mark.skipif(not (KINETO / "ws128_sampled_rank0.json.gz").exists(), reason="real traces not present")
def test_real_ws128_ranks_still_abstain():
    """The real ws128 rank 0 and rank 1 traces (one job, ws128_sampled) name no host: their clocks are not known
    to agree, so the wait still abstains, now saying why, and that they are 2 of the 128 ranks. Their figures that
    need no match stay what each file gives (collective_ns, calls)."""
    paths = [str(KINETO / f"ws128_sampled_rank{r}.json.gz") for r in range(2)]
    for p in paths:
        with gzip.open(p, "rt", encoding="utf-8") as fh:
            doc = json.load(fh)
        assert "host_name" not in doc and "hostname" not in doc
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == ["ws128_sampled"] * 2
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_calls"].tolist() == [10, 10]
    assert fleet["collective_wait_ns"].isna().all()
    assert fleet["collective_wait_note"].tolist() == [
        "ranks in separate reports: host unknown for ws128_sampled_rank0.json.gz and 1 more file(s) (the file names "
        "no host and no label names its node): the files' clocks are not known to agree; and 2 GPU(s) with collectives in 2 files of the 128 "
        "ranks the captures name"] * 2


# ---------------------------------------------------------------- one node by the labels (issue 45, the vit-train tryout)

def node_labels(prefix: str, nodes: dict) -> Config:
    """Labels giving each file ``<prefix><r>`` its node ``nodes[r]`` (and nothing else: the job stays the files')."""
    return Config(labels=tuple(LabelRule(match=f"*{prefix}{r}*", node=n) for r, n in nodes.items()))


def test_ranks_labelled_on_one_node_are_matched(tmp_path):
    """Two ranks' traces naming no host (the open-source profiler's), a labels rule putting both on node n15: one
    clock (a trace's times are the host's epoch time). By hand (:func:`rank_trace`, world size 2): rank 1 enters
    each of the 3 calls 0.5 ms after rank 0, both end at b_k + 3 ms: rank 0 waits 0.5 ms and transfers 2.5 ms per
    call (1.5 ms, 7.5 ms), rank 1 waits 0 and transfers 2.5 ms (0, 7.5 ms), last in all 3 calls."""
    paths = [rank_trace(tmp_path / f"lab_rank{r}.json", r, None, world_size=2) for r in range(2)]
    fleet = fleet_of(paths, node_labels("lab_rank", {0: "n15", 1: "n15"}))
    assert fleet["job"].tolist() == ["lab"] * 2 and fleet["host"].fillna("").tolist() == ["", ""]
    assert fleet["node"].tolist() == ["n15"] * 2
    assert fleet["collective_wait_status"].tolist() == [collwait.MEASURED] * 2
    assert fleet["collective_match_basis"].tolist() == [ACROSS_FILES] * 2
    assert fleet["collective_wait_ns"].tolist() == [1_500_000, 0]
    assert fleet["collective_transfer_ns"].tolist() == [7_500_000, 7_500_000]
    assert fleet["collective_last_count"].tolist() == [0, 3]
    got = {os.path.basename(r): (w, t, n) for r, w, t, n in zip(fleet["report"], fleet["collective_wait_ns"],
                                                               fleet["collective_transfer_ns"],
                                                               fleet["collective_last_count"])}
    assert got == second_wait(paths)
    assert fleet["collective_wait_note"].iloc[0] == (
        "2 GPUs in 2 files on one host, n15 (the node their labels give): one clock; calls matched by the k-th kernel "
        "of each family: AllReduce ×3")


def test_ranks_labelled_on_two_nodes_abstain_saying_so(tmp_path):
    paths = [rank_trace(tmp_path / f"far_rank{r}.json", r, None, world_size=2) for r in range(2)]
    fleet = fleet_of(paths, node_labels("far_rank", {0: "n15", 1: "n16"}))
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_ns"].isna().all()
    assert fleet["collective_wait_note"].tolist() == [
        "ranks in separate reports: the files are on different nodes by their labels (n15: far_rank0.json; n16: "
        "far_rank1.json): their clocks are not known to agree"] * 2
    # one file labelled, the other not: its clock unknown, in words
    fleet = fleet_of(paths, node_labels("far_rank", {0: "n15"}))
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: host unknown for far_rank1.json (the file names no host and no label names "
        "its node): the files' clocks are not known to agree")


def test_a_node_label_gives_no_clock_to_rows_counting_from_the_capture_start(tmp_path):
    """Two exports naming no host whose rows count from each capture's start (each its own zero), labelled on one
    node: the label says where they ran, not that their times agree; still abstained, saying why."""
    paths = [rank_export(tmp_path / f"zero{r}.sqlite", r, None, on_host_clock=False) for r in range(2)]
    fleet = fleet_of(paths, node_labels("zero", {0: "n15", 1: "n15"}))
    assert fleet["host_source"].tolist() == [
        "the export names no host, and the rows are not timed on the host's clock (their zero: ANALYSIS_DETAILS (the "
        "rows count from the capture's start))"] * 2
    assert fleet["collective_wait_status"].tolist() == [collwait.ABSTAINED] * 2
    assert fleet["collective_wait_note"].iloc[0] == (
        "ranks in separate reports: host unknown for zero0.sqlite and 1 more file(s) (the export names no host, and "
        "the rows are not timed on the host's clock (their zero: ANALYSIS_DETAILS (the rows count from the capture's "
        "start))): the files' clocks are not known to agree")
    # the same exports on the host's clock, naming no host, labelled on one node: matched (rank_export's figures)
    paths = [rank_export(tmp_path / f"abs{r}.sqlite", r, None) for r in range(2)]
    fleet = fleet_of(paths, node_labels("abs", {0: "n15", 1: "n15"}))
    assert fleet["host_source"].fillna("").tolist() == ["", ""]
    assert fleet["collective_wait_ns"].tolist() == [2 * MS, 0]
    assert fleet["collective_match_basis"].tolist() == [ACROSS_FILES] * 2


def test_one_clock_rule_with_node_labels():
    rows = [{"report": "/a/x.json", "host": "", "node": "n1", "host_source": ""},
            {"report": "/a/y.json", "host": "h", "node": "n1", "host_source": "the trace's host_name"}]
    assert one_clock(rows) == ("n1", "the node their labels give, the host some name", "")
    rows[1]["node"] = ""
    assert one_clock(rows)[2] == ("y.json names host h and no node label, the others only their node label (n1): "
                                  "the files' clocks are not known to agree")
