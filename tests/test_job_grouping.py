"""One job across its files (issue 47 §1, first point; docs/definitions.md#job-grouping).

Per-rank PyTorch profiler traces of one job (``distributedInfo`` with the same world size and backend,
distinct ranks, captures overlapping on their own clocks) are one job without any ``labels:`` rule;
``job_grouped_by`` says how each GPU's job was decided. Worked by hand: rank r's trace holds two
kernels, [S, S + 4 ms) and [S + 6 ms, S + (10 + r) ms), so its capture is [S, S + 10 + r ms): every
rank's capture overlaps the others' when they share S; a rank started at S + 1 s does not.
"""
from __future__ import annotations

import pytest
from helpers.engine import analyse_reports

from pipeline.config import Config, LabelRule
from pipeline.engine.map import InProcess
from pipeline.fleet.grouping import file_job, group_jobs, group_name, rank_head
from pipeline.fleet.reduce import rollup
from pipeline.report.medical import grouping_line
from pipeline.schema import JOB_KEY
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter

MS = 1_000_000
S = 1_733_000_000_000_000_000  # a Unix-epoch ns start, as Kineto's baseTimeNanoseconds gives


def rank_trace(path, rank: int, world_size: int | None, start: int = S, backend: str = "nccl") -> str:
    """Rank ``rank``'s trace: process 100 + rank on device ``rank``, kernels [0, 4) and [6, 10 + rank) ms
    after ``start``; ``distributedInfo`` (rank, ``world_size``, ``backend``) unless ``world_size`` is None."""
    w = KinetoWriter(str(path), pid=100 + rank, devices=[(rank, "NVIDIA H100 80GB HBM3", 132)],
                     rank=None if world_size is None else rank, world_size=world_size, base_time_ns=start - 5 * MS,
                     backend=backend)
    for i, (a, b) in enumerate([(0, 4 * MS), (6 * MS, (10 + rank) * MS)]):
        w.runtime(101 + rank, start + a - 500, start + a - 100, "cudaLaunchKernel", 10 + i)
        w.kernel(rank, 7, start + a, start + b, "gemm", 10 + i)
    return w.close()


def fleet_of(paths, cfg=Config()):
    fleet, _ = analyse_reports([str(p) for p in paths], cfg, InProcess())
    return fleet.sort_values("report").reset_index(drop=True)


@pytest.fixture(scope="module")
def dlrm(tmp_path_factory):
    """Three ranks of one world-size-3 job: ``dlrm_rank<r>.json``, all started at S."""
    folder = tmp_path_factory.mktemp("grouping") / "night"
    folder.mkdir()
    return [rank_trace(folder / f"dlrm_rank{r}.json", r, 3) for r in range(3)]


def test_ranks_are_one_job_without_labels(dlrm):
    fleet = fleet_of(dlrm)
    assert fleet["job"].tolist() == ["dlrm"] * 3                       # the stem before "rank"
    assert fleet["job_grouped_by"].tolist() == ["distributedInfo"] * 3
    assert fleet["rank"].tolist() == ["0", "1", "2"]
    assert fleet["dist_world_size"].tolist() == [3, 3, 3]
    assert fleet["dist_backend"].tolist() == ["nccl"] * 3
    assert fleet["first_kernel_ns"].tolist() == [S] * 3
    assert fleet["capture_ns"].tolist() == [10 * MS, 11 * MS, 12 * MS]
    jobs = rollup(fleet, list(JOB_KEY))
    assert jobs["job"].tolist() == ["dlrm"] and jobs["gpus"].tolist() == [3]
    # the job's record says how it was grouped
    rows = fleet.to_dict("records")
    assert grouping_line(rows) == ("Grouped from 3 traces by their distributedInfo: ranks 0, 1, 2 of world size 3 "
                                   "(nccl), overlapping captures.")


@pytest.mark.parametrize("variant, expected", [
    # rank 1 says world size 4: another job
    ("world sizes differ", ["dlrm_rank0", "dlrm_rank1"]),
    # rank 1 starts 1 s after rank 0's capture ended
    ("captures apart", ["dlrm_rank0", "dlrm_rank1"]),
    # rank 1 starts exactly where rank 0's capture ends (S + 10 ms): touching is not overlapping
    ("captures touch", ["dlrm_rank0", "dlrm_rank1"]),
    # gloo against nccl
    ("backends differ", ["dlrm_rank0", "dlrm_rank1"]),
    # rank 1's trace has no distributedInfo
    ("no distributedInfo", ["dlrm_rank0", "dlrm_rank1"]),
])
def test_traces_that_do_not_agree_stay_apart(tmp_path, variant, expected):
    second = {"world sizes differ": dict(world_size=4), "captures apart": dict(world_size=2, start=S + 1_000 * MS),
              "captures touch": dict(world_size=2, start=S + 10 * MS),
              "backends differ": dict(world_size=2, backend="gloo"),
              "no distributedInfo": dict(world_size=None)}[variant]
    paths = [rank_trace(tmp_path / "dlrm_rank0.json", 0, 2), rank_trace(tmp_path / "dlrm_rank1.json", 1, **second)]
    fleet = fleet_of(paths)
    assert fleet["job"].tolist() == expected
    assert fleet["job_grouped_by"].tolist() == ["file", "file"]
    assert rollup(fleet, list(JOB_KEY))["gpus"].tolist() == [1, 1]


def test_same_rank_twice_and_world_size_one_stay_apart(tmp_path):
    """Two rank-0 traces of world size 2 overlapping (two runs, not two ranks), and two world-size-1 traces."""
    a = tmp_path / "a"
    b = tmp_path / "b"
    a.mkdir()
    b.mkdir()
    paths = [rank_trace(a / "x_rank0.json", 0, 2), rank_trace(b / "x_rank0.json", 0, 2),
             rank_trace(tmp_path / "solo_rank0.json", 0, 1)]
    fleet = fleet_of(paths)
    assert fleet["job_grouped_by"].tolist() == ["file"] * 3
    # x_rank0 in two folders: two runs, each a job of its own, named after the file whole (each would read "x");
    # solo_rank0 alone: named as a job grouped from ranks is, its stem before the rank
    assert fleet["job"].tolist() == ["x_rank0", "x_rank0", "solo"]


def test_a_labels_rule_wins(dlrm):
    """A rule naming rank 2's job takes it out; ranks 0 and 1 are still grouped. A rule naming every file's job:
    its job, for all."""
    cfg = Config(labels=(LabelRule(match="*dlrm_rank2*", job="other"),))
    fleet = fleet_of(dlrm, cfg)
    assert fleet["job"].tolist() == ["dlrm", "dlrm", "other"]
    assert fleet["job_grouped_by"].tolist() == ["distributedInfo", "distributedInfo", "labels"]
    jobs = rollup(fleet, list(JOB_KEY)).set_index("job")["gpus"].to_dict()
    assert jobs == {"dlrm": 2, "other": 1}
    fleet = fleet_of(dlrm, Config(labels=(LabelRule(match="*dlrm_rank*", job="train-7"),)))
    assert fleet["job"].tolist() == ["train-7"] * 3
    assert fleet["job_grouped_by"].tolist() == ["labels"] * 3
    assert grouping_line(fleet.to_dict("records")) == ""


# ---------------------------------------------------------------- one job name rule (issue 45 point 8, a tryout)

@pytest.mark.parametrize("name, rank, job", [
    ("train_rank0.pt.trace.json.gz", None, "train"),
    ("train_rank_1.json", "1", "train"),
    ("train-rank-2.sqlite", None, "train"),
    ("Train.Rank3.json.gz", "3", "Train"),
    ("train-r2.sqlite", "2", "train"),          # a short suffix is the file's rank: its number is its rank
    ("train-r2.sqlite", None, "train-r2"),      # ... and nothing else: no rank known, the whole stem
    ("resnet-r50.sqlite", "0", "resnet-r50"),   # r50 is no rank of rank 0
    ("train.sqlite", None, "train"),            # no suffix
    ("frank0.sqlite", None, "frank0"),          # "rank" inside a word names no rank
    ("ranking3.json", None, "ranking3"),
    ("rank0.pt.trace.json.gz", "0", "rank0"),   # nothing before the rank: the whole stem
    ("dlrm_rank3_step5.json", None, "dlrm"),    # the stem before its rank, as a group is named
])
def test_a_file_job_is_its_stem_before_its_rank(name, rank, job):
    assert file_job(f"/in/{name}", rank) == job
    # the rule itself: the part before the rank, "" when the name gives none (the whole stem is then the job)
    stem = name.split(".json")[0].split(".sqlite")[0].split(".pt.trace")[0]
    assert rank_head(stem, rank) == ("" if job == stem else job)


def test_jobs_of_single_files_and_groups_follow_one_rule():
    """Hand-made rows (no analysis): a100_ws2_nccl_rank0 (one trace of a 2-rank job, its peer not here) and the
    group ws128_sampled_rank{0,1} both lose their rank: "a100_ws2_nccl" and "ws128_sampled" (the tryout printed the
    first with its rank kept, the second without). Files whose names would then read alike but are not judged one
    job keep their whole stems: x_rank0/x_rank1 (no evidence they are one job), y and y_rank0, a file z_rank0 beside
    a labelled job z; in another cluster the same name is free."""
    def row(report, cluster="c", rank="", **kw):
        return {"report": report, "cluster": cluster, "rank": rank, "status": "ok", "gpu_key": "g",
                "job": report.rsplit("/", 1)[-1].split(".")[0], **kw}   # the labels' default: the file's stem

    both = dict(dist_world_size=128, dist_backend="nccl", capture_ns=10, first_kernel_ns=0)
    rows = [row("/k/a100_ws2_nccl_rank0.json.gz", rank="0", dist_world_size=2, dist_backend="nccl", capture_ns=10,
                first_kernel_ns=0),
            row("/k/ws128_sampled_rank0.json.gz", rank="0", **both), row("/k/ws128_sampled_rank1.json.gz", rank="1",
                                                                          **both),
            row("/k/x_rank0.sqlite"), row("/k/x_rank1.sqlite"), row("/k/y.sqlite"), row("/k/y_rank0.sqlite"),
            row("/k/z_rank0.sqlite"), row("/k/w.sqlite", job="z"), row("/k/t-r3.sqlite", rank="3"),
            row("/o/x_rank0.sqlite", cluster="other")]
    cfg = Config(labels=(LabelRule(match="*/w.sqlite", job="z"),))
    jobs = {(r["cluster"], r["report"]): (r["job"], r["job_grouped_by"]) for r in group_jobs(rows, cfg)}
    assert jobs == {
        ("c", "/k/a100_ws2_nccl_rank0.json.gz"): ("a100_ws2_nccl", "file"),
        ("c", "/k/ws128_sampled_rank0.json.gz"): ("ws128_sampled", "distributedInfo"),
        ("c", "/k/ws128_sampled_rank1.json.gz"): ("ws128_sampled", "distributedInfo"),
        ("c", "/k/x_rank0.sqlite"): ("x_rank0", "file"), ("c", "/k/x_rank1.sqlite"): ("x_rank1", "file"),
        ("c", "/k/y.sqlite"): ("y", "file"), ("c", "/k/y_rank0.sqlite"): ("y_rank0", "file"),
        ("c", "/k/z_rank0.sqlite"): ("z_rank0", "file"), ("c", "/k/w.sqlite"): ("z", "labels"),
        ("c", "/k/t-r3.sqlite"): ("t", "file"), ("other", "/o/x_rank0.sqlite"): ("x", "file")}
    # idempotent: grouping the grouped rows again names every job alike
    assert {(r["cluster"], r["report"]): (r["job"], r["job_grouped_by"]) for r in group_jobs(rows, cfg)} == jobs


def test_jobs_differing_after_the_printed_width_stay_apart_in_the_table():
    """Two jobs whose names differ only after 24 characters (the printed job column holds 18): each cell reads
    differently, cut in the middle (its end kept), and a short name stays whole."""
    import pandas as pd

    from pipeline import schema
    from pipeline.cli import format_fleet

    jobs = ["imagenet_resnet50_sweep_lr0.1", "imagenet_resnet50_sweep_lr0.2", "bert"]
    reports = [f"/in/{j}_rank0.sqlite" for j in jobs]
    rows = [{"report": r, "cluster": "c", "rank": "", "status": "ok", "gpu_key": f"GPU-{i}",
             "job": r.rsplit("/", 1)[-1][:-len(".sqlite")]} for i, r in enumerate(reports)]
    grouped = group_jobs(rows, Config())
    assert [r["job"] for r in grouped] == jobs
    fleet = pd.DataFrame({p.name: [0] * 3 for p in schema.PRINTED if p.name not in ("gpu_name", "status", "job")})
    fleet["report"], fleet["gpu_key"], fleet["status"] = reports, [r["gpu_key"] for r in rows], "ok"
    fleet["job"], fleet["cluster"] = jobs, "c"
    fleet["idle_usd_per_month"] = [3.0, 2.0, 1.0]
    lines = format_fleet(fleet).splitlines()[1:4]
    assert dict((p.name, p.width) for p in schema.PRINTED)["job"] == 18
    # cut in the middle: the first 9 characters, "…", the last 8 (18 columns), never two alike
    assert [line.split()[2] for line in lines] == ["imagenet_…ep_lr0.1", "imagenet_…ep_lr0.2", "bert"]


def test_group_names():
    assert group_name(["/n/dlrm_rank1.pt.trace.json.gz", "/n/dlrm_rank0.pt.trace.json.gz"]) == "dlrm"
    assert group_name(["/n/run7/rank0.pt.trace.json.gz", "/n/run7/rank1.pt.trace.json.gz"]) == "run7"   # no stem: folder
    assert group_name(["/a/x_rank0.json", "/b/y_rank1.json"]) == "x_rank0+1"                         # neither


def slurm_export(path, pid: int, job_id: str | None) -> str:
    """An Nsight export of one H100 driven by ``pid``: kernels [0, 10) and [20, 30) ms; its capture's process
    environment names ``SLURM_JOB_ID=<job_id>`` (None: no Slurm variable, only HOME)."""
    w = ExportWriter(str(path))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid=f"u{pid}")
    w.cuda_device(0, 0, pid)
    for start, end in ((0, 10), (20, 30)):
        w.kernel(pid=pid, device=0, stream=7, start=start * MS, end=end * MS, name="gemm")
    w.capture("PROCESS_0:ENVIRONMENT_VARIABLE", "HOME=/root")
    if job_id is not None:
        w.capture("PROCESS_0:ENVIRONMENT_VARIABLE", f"SLURM_JOB_ID={job_id}")
    w.close()
    return str(path)


def test_exports_of_one_slurm_job_are_one_job(tmp_path):
    """node01 and node02 name Slurm job 4242: job slurm-4242 of 2 GPUs; node03 names 77 (alone: its file's job);
    node04 names none; node05 names 4242 but a rule names its job (the rule wins)."""
    paths = [slurm_export(tmp_path / f"node0{i}.sqlite", 10 + i, job)
             for i, job in ((1, "4242"), (2, "4242"), (3, "77"), (4, None), (5, "4242"))]
    fleet = fleet_of(paths, Config(labels=(LabelRule(match="*node05*", job="eval"),)))
    assert fleet["job"].tolist() == ["slurm-4242", "slurm-4242", "node03", "node04", "eval"]
    assert fleet["job_grouped_by"].tolist() == ["SLURM_JOB_ID", "SLURM_JOB_ID", "file", "file", "labels"]
    assert fleet["scheduler_job"].fillna("").tolist() == ["SLURM_JOB_ID=4242"] * 2 + ["SLURM_JOB_ID=77", "",
                                                                                         "SLURM_JOB_ID=4242"]
    assert rollup(fleet, list(JOB_KEY)).set_index("job")["gpus"].to_dict() == {
        "eval": 1, "node03": 1, "node04": 1, "slurm-4242": 2}
    assert grouping_line(fleet[fleet["job"] == "slurm-4242"].to_dict("records")) == (
        "Grouped from 2 exports naming SLURM\\_JOB\\_ID=4242 in their capture's environment.")


def test_a_name_taken_gets_its_rank_count_and_grouping_is_idempotent():
    """Rows alone: ranks 0-1 of world size 2 in a/ and ranks 0-2 of world size 3 in b/, all named dlrm_rank<r>,
    captures [0, 10) ns overlapping: two jobs; the one decided second (world size 3, sorted after 2) finds `dlrm`
    taken and is `dlrm (3 ranks)`. A second pass changes nothing."""
    def row(folder, rank, size):
        return {"report": f"/{folder}/dlrm_rank{rank}.json", "cluster": "default", "job": f"dlrm_rank{rank}",
                "rank": str(rank), "status": "ok", "dist_world_size": size, "dist_backend": "nccl",
                "first_kernel_ns": 0, "capture_ns": 10}
    rows = [row("a", r, 2) for r in range(2)] + [row("b", r, 3) for r in range(3)]
    group_jobs(rows, Config())
    assert [r["job"] for r in rows] == ["dlrm", "dlrm", "dlrm (3 ranks)", "dlrm (3 ranks)", "dlrm (3 ranks)"]
    group_jobs(rows, Config())
    assert [r["job"] for r in rows] == ["dlrm", "dlrm", "dlrm (3 ranks)", "dlrm (3 ranks)", "dlrm (3 ranks)"]
    assert {r["job_grouped_by"] for r in rows} == {"distributedInfo"}


def test_a_lone_report_s_gpu_files_are_written_once(tmp_path, monkeypatch):
    """The per-GPU JSON a lone report's work writes already holds the job grouping its rows alone give (``file``),
    the reduce's too, so the reduce leaves the file as it is (issue 44: no read and write again per GPU)."""
    import json
    import os

    from conftest import run_cli

    import pipeline.fleet.outputs as outputs

    writes = []
    real = outputs.write_json
    monkeypatch.setattr(outputs, "write_json", lambda path, doc: (writes.append(path), real(path, doc)))
    out = tmp_path / "out"
    run_cli("run", rank_trace(tmp_path / "alone.json", 0, None), "--out", str(out),
            env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})
    (name,) = os.listdir(out / "gpus")
    assert [os.path.basename(p) for p in writes if os.path.basename(os.path.dirname(p)) == "gpus"] == [name]
    assert json.loads((out / "gpus" / name).read_text())["_summary"]["job_grouped_by"] == "file"
