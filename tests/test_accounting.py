"""The scheduler's accounting joined to the fleet table (issue 47, sections 2 and 3): sacct --json and pod JSON
read, reports matched (environment, path, node and time), idle dollars per team and per user, the GPU-hours
held against those measured, and bad accounting input named with the run going on. Every figure by hand."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from conftest import promtool_check, run_cli

from pipeline.accounting import hooks
from pipeline.accounting.allocations import Allocation, read_file, read_files
from pipeline.accounting.joined import (NO_RECORD, NOT_MEASURED, PARTLY, MEASURED, coverage, match_reports,
                                        measured_share, period, teams, with_identity)
from pipeline.config import load_config
from pipeline.fleet.prom import COVERAGE_NAMES, metrics_text
from pipeline.fleet.reduce import fleet_frame
from pipeline.report.teams import record_coverage_text, summary_text
from pipeline.synth.kineto import KinetoWriter

H = 3_600_000_000_000  # ns per hour
T0 = 1_796_000_000  # a Unix time (s), 2026-11-30
S = 1_000_000_000


def sacct(*jobs) -> dict:
    """``sacct --json`` output of the shape Slurm 22.05 writes (tests/test_accounting_slurm.py reads a real one)."""
    return {"meta": {}, "errors": [], "jobs": list(jobs)}


def job(job_id, user, account, nodes, start, end, gpus, name="gpu", partition="debug") -> dict:
    tres = [{"type": "cpu", "name": None, "id": 1, "count": 8}]
    if gpus:
        tres.append({"type": "gres", "name": name, "id": 1001, "count": gpus})
    return {"job_id": job_id, "user": user, "account": account, "partition": partition, "nodes": nodes,
            "association": {"account": account, "user": user, "cluster": "c", "partition": None},
            "time": {"start": start, "end": end, "elapsed": end - start if end else 0},
            "tres": {"allocated": tres, "requested": tres}, "state": {"current": "COMPLETED"}, "steps": []}


def pod(name, node, gpus, start, end=None, team="vision", user="alice", namespace="ml") -> dict:
    """One pod as the API returns it (`kubectl get pods -o json`'s items: the fields around the ones read too)."""
    state = ({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": start, "finishedAt": end,
                             "containerID": "containerd://3f2a"}} if end else {"running": {"startedAt": start}})
    limits = {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": str(gpus)} if gpus else {"cpu": "1"}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"7c9e6679-{name}", "resourceVersion": "48213",
                     "creationTimestamp": start, "labels": {"team": team, "user": user, "app": name.split("-")[0]},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name.rsplit("-", 1)[0],
                                          "uid": "a1", "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"nodeName": node, "restartPolicy": "Never", "schedulerName": "default-scheduler",
                 "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                                 "resources": {"limits": limits, "requests": limits}}],
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "status": {"phase": "Succeeded" if end else "Running", "hostIP": "10.0.0.7", "podIP": "10.244.1.9",
                   "qosClass": "Guaranteed", "startTime": start,
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": start}],
                   "containerStatuses": [{"name": "main", "ready": not end, "restartCount": 0, "started": not end,
                                          "image": "nvcr.io/nvidia/pytorch:24.05-py3", "state": state}]},
    }


def write(path, data) -> str:
    path.write_text(json.dumps(data))
    return str(path)


def test_sacct_json_read(tmp_path):
    """A host list expands; a typed GRES gives the GPU type; a running job (end 0) has no end; a job that never
    started, and one without GPUs, held none: left out."""
    path = write(tmp_path / "sacct.json", sacct(
        job(101, "alice", "vision", "gpu[01-02]", T0, T0 + 36000, 8, name="gpu:h100"),
        job(102, "bob", "speech", "gpu03", T0 + 10, 0, 1),
        job(103, "carol", "vision", "None assigned", 0, 0, 2),
        job(104, "dave", "vision", "cpu1", T0, T0 + 5, 0)))
    got, problems = read_file(path)
    assert problems == []
    assert got == [Allocation("slurm", path, "101", "alice", "vision", "debug", ("gpu01", "gpu02"), T0 * S,
                              (T0 + 36000) * S, 8, "h100"),
                   Allocation("slurm", path, "102", "bob", "speech", "debug", ("gpu03",), (T0 + 10) * S, None, 1, "")]


def test_pod_json_read(tmp_path):
    """``kubectl get pods -o json``: team and user from the labels, the namespace as the partition, GPUs from the
    limits, the end from the terminated containers; a pod without GPUs is left out."""
    path = write(tmp_path / "pods.json", {"apiVersion": "v1", "kind": "List", "items": [
        pod("train-0", "n1", 2, "2026-12-01T10:00:00Z", "2026-12-01T12:30:00Z"),
        pod("serve-0", "n2", 1, "2026-12-01T11:00:00.5Z", team="search", user="bob"),
        pod("cpu-0", "n3", 0, "2026-12-01T10:00:00Z")]})
    got, problems = read_file(path)
    start = 1_796_119_200 * S  # 2026-12-01T10:00:00Z
    assert problems == []
    assert got == [Allocation("kubernetes", path, "ml/train-0", "alice", "vision", "ml", ("n1",), start,
                              start + 9000 * S, 2, ""),
                   Allocation("kubernetes", path, "ml/serve-0", "bob", "search", "ml", ("n2",),
                              start + 3600 * S + S // 2, None, 1, "")]


def test_bad_accounting_files_are_named_and_the_rest_is_read(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text('{"jobs": [')
    other = write(tmp_path / "other.json", {"hello": 1})
    good = write(tmp_path / "good.json", sacct(job(7, "a", "t", "n1", T0, T0 + 60, 1), {"job_id": 8, "time": "x"}))
    again = write(tmp_path / "again.json", sacct(job(7, "a", "t", "n1", T0, T0 + 60, 1)))
    got, problems = read_files([str(bad), other, str(tmp_path / "gone.json"), good, again])
    assert [a.job_id for a in got] == ["7"]
    assert problems[0].startswith(f"{bad}: not JSON (") and problems[0].endswith("no allocation read from it")
    assert problems[1] == (f"{other}: neither `sacct --json` output (a `jobs` list) nor `kubectl get pods -o json` "
                           "output (an `items` list): no allocation read from it")
    assert problems[2].startswith(f"{tmp_path / 'gone.json'}: cannot read (")
    assert problems[3].startswith(f"{good}: sacct job 1 cannot be read (AttributeError")
    assert problems[4] == f"{again}: job 7 is listed by {good} too: the first is kept"


def gpu_row(report, gpu, usd, rate=2.0, tier="high", node="", job_env=None, first=1_000, capture=1_000,
            window=500_000_000, status="ok"):
    return {"report": report, "cluster": "default", "job": report.rsplit("/", 1)[-1], "node": node, "rank": "",
            "gpu_key": gpu, "idle_usd_per_month": usd, "rate_usd_per_hour": rate, "rate_assumed": False,
            "confidence_tier": tier, "scheduler_job": job_env, "first_kernel_ns": first, "capture_ns": capture,
            "window_ns": window, "status": status}


@pytest.fixture(scope="module")
def cfg():
    return load_config([], {"cost": {"rates": [{"model": "H100", "usd_per_gpu_hour": 4.0}], "rates_replace": True}})


#: Job 101: vision/alice, 4 GPUs for 10 h, two of them captured (an export naming SLURM_JOB_ID=101);
#: job 102: speech/bob, 1 GPU for 2 h on node n2, its PyTorch trace captured at T0 + 1 h (epoch clock, node n2);
#: job 103: vision/carol, 2 H100s for 5 h, never captured. A third report (c.sqlite) matches nothing.
ALLOCATIONS = [Allocation("slurm", "s.json", "101", "alice", "vision", "debug", ("n1",), T0 * S, T0 * S + 10 * H, 4),
               Allocation("slurm", "s.json", "102", "bob", "speech", "debug", ("n2",), T0 * S, T0 * S + 2 * H, 1),
               Allocation("slurm", "s.json", "103", "carol", "vision", "debug", ("n3",), T0 * S, T0 * S + 5 * H, 2,
                          "h100")]


@pytest.fixture(scope="module")
def joined(cfg):
    fleet = fleet_frame([
        gpu_row("/x/a.sqlite", "GPU-0", 100.0, job_env="SLURM_JOB_ID=101"),
        gpu_row("/x/a.sqlite", "GPU-1", 50.0, tier="low", job_env="SLURM_JOB_ID=101"),
        gpu_row("/x/b.pt.trace.json", "GPU-2", 30.0, rate=3.0, node="n2", first=T0 * S + H, capture=60 * S),
        gpu_row("/x/c.sqlite", "GPU-3", 7.0),
        gpu_row("/x/d.sqlite", "", math.nan, status="error")])
    matched, problems = match_reports(fleet, ALLOCATIONS, cfg)
    return with_identity(fleet, matched), matched, problems


def test_reports_matched_by_environment_and_by_node_at_the_capture_time(joined):
    fleet, matched, problems = joined
    assert {r: (a.job_id, rule) for r, (a, rule) in matched.items()} == {
        "/x/a.sqlite": ("101", "environment"), "/x/b.pt.trace.json": ("102", "node")}
    assert problems == []
    assert list(fleet["sched_account"]) == ["vision", "vision", "speech", None, None]
    assert list(fleet["sched_user"]) == ["alice", "alice", "bob", None, None]
    assert list(fleet["sched_gpus"].astype(object).where(fleet["sched_gpus"].notna(), None)) == [4, 4, 1, None, None]
    assert list(fleet["sched_matched_by"])[:3] == ["slurm: environment", "slurm: environment", "slurm: node"]


def test_coverage_by_hand(joined, cfg):
    """Held GPU-hours × rate (the rows' rate, else the card's for the scheduler's type); captured GPUs stand
    for their share of the allocation; the never-traced job is named, its idle never priced."""
    cov = coverage(joined[0], ALLOCATIONS, cfg.cost).set_index("job_id")
    assert list(cov["held_gpu_ns"]) == [40 * H, 2 * H, 10 * H]
    assert list(cov["captured_gpus"]) == [2, 1, 0]
    assert list(cov["represented_gpu_ns"]) == [20 * H, 2 * H, 0]
    assert list(cov["not_measured_gpu_ns"]) == [20 * H, 0, 10 * H]
    assert list(cov["traced_ns"]) == [1_000_000_000, 500_000_000, 0]
    assert list(cov["rate_usd_per_hour"]) == [2.0, 3.0, 4.0]
    assert list(cov["held_usd"]) == [80.0, 6.0, 40.0]
    assert list(cov["represented_usd"]) == [40.0, 6.0, 0.0]
    assert cov["idle_usd_per_month"].tolist()[:2] == [150.0, 30.0] and math.isnan(cov.loc["103", "idle_usd_per_month"])
    assert list(cov["status"]) == [PARTLY, MEASURED, NOT_MEASURED]
    share = measured_share(cov.reset_index())
    assert share == {"held_usd": 126.0, "represented_usd": 46.0, "share_pct": round(100 * 46 / 126, 2),
                     "not_measured": ["103"], "unpriced": 0}


def test_teams_by_hand(joined, cfg):
    fleet = joined[0]
    got = teams(fleet, coverage(fleet, ALLOCATIONS, cfg.cost))
    rows = {(r.by, r.name): r for r in got.itertuples()}
    assert list(zip(got["by"], got["name"])) == [("account", "vision"), ("account", "speech"), ("account", NO_RECORD),
                                                 ("user", "alice"), ("user", "bob"), ("user", NO_RECORD),
                                                 ("user", "carol")]
    vision = rows[("account", "vision")]
    assert (vision.gpus, vision.jobs, vision.idle_usd_per_month, vision.trusted_idle_usd_per_month) == (2, 1, 150.0, 100.0)
    assert (vision.held_gpu_ns, vision.represented_gpu_ns, vision.not_measured_jobs) == (50 * H, 20 * H, 1)
    assert rows[("account", "speech")].idle_usd_per_month == 30.0
    assert (rows[("account", NO_RECORD)].gpus, rows[("account", NO_RECORD)].idle_usd_per_month) == (1, 7.0)
    carol = rows[("user", "carol")]  # never captured: no idle dollars at all, never $0.00
    assert (carol.gpus, carol.held_gpu_ns, carol.not_measured_jobs) == (0, 10 * H, 1)
    assert math.isnan(carol.idle_usd_per_month) and math.isnan(carol.trusted_idle_usd_per_month)


def test_a_job_id_matching_nothing_and_overlapping_jobs_on_a_node_are_named(cfg):
    fleet = fleet_frame([gpu_row("/x/job555/e.sqlite", "GPU-0", 1.0, job_env="SLURM_JOB_ID=999"),
                         gpu_row("/x/f.sqlite", "GPU-1", 1.0, node="n1")])
    both = ALLOCATIONS + [Allocation("slurm", "s.json", "104", "eve", "vision", "debug", ("n1",), T0 * S + H,
                                     T0 * S + 3 * H, 1)]
    matched, problems = match_reports(fleet, both, cfg)
    assert matched == {}
    assert problems == [  # reports in path order
        "/x/f.sqlite: node n1 was held by 2 jobs in the accounting's period, and the capture's time is not on the "
        "wall clock (101, 104): which one it belongs to is not known, not matched by node",
        "/x/job555/e.sqlite: its capture environment names SLURM_JOB_ID=999, which no accounting file lists (s.json)",
        "/x/job555/e.sqlite: its path names job 555 (accounting.path_job_id), which no accounting file lists (s.json)"]


def test_path_rule_and_pod_names(cfg, tmp_path):
    pods = Allocation("kubernetes", "p.json", "ml/train-0", "alice", "vision", "ml", ("n9",), T0 * S, None, 2)
    fleet = fleet_frame([gpu_row("/runs/slurm-101/rank0.sqlite", "GPU-0", 1.0),
                         gpu_row("/traces/train-0/worker.pt.trace.json", "GPU-0", 2.0)])
    matched, problems = match_reports(fleet, ALLOCATIONS + [pods], cfg)
    assert {r: (a.job_id, rule) for r, (a, rule) in matched.items()} == {
        "/runs/slurm-101/rank0.sqlite": ("101", "path"), "/traces/train-0/worker.pt.trace.json": ("ml/train-0", "path")}
    assert problems == []


def test_attach_logs_bad_input_and_goes_on(tmp_path):
    """The run's hook: a malformed file and a job id matching nothing are logged, the good file still joins."""
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    good = write(tmp_path / "sacct.json", sacct(job(101, "alice", "vision", "n1", T0, T0 + 3600, 4)))
    cfg = load_config([], {"accounting": {"files": [str(bad), good]}})
    fleet = fleet_frame([gpu_row("/x/a.sqlite", "GPU-0", 10.0, job_env="SLURM_JOB_ID=101"),
                         gpu_row("/x/b.sqlite", "GPU-0", 5.0, job_env="SLURM_JOB_ID=77")])
    lines = []
    out = hooks.attach(fleet, cfg, lines.append)
    assert lines[0].startswith(f"WARNING: accounting: {bad}: not JSON (")
    assert lines[1] == (f"WARNING: accounting: /x/b.sqlite: its capture environment names SLURM_JOB_ID=77, which no "
                        f"accounting file lists ({good})")
    assert len(lines) == 2
    assert list(out["sched_job_id"]) == ["101", None] and out.attrs[hooks.JOINED]
    assert hooks.planned(out) == ["teams.csv", "coverage.csv"] and hooks.planned(fleet) == []
    written = hooks.write_tables(str(tmp_path), out, cfg)
    assert written == ["teams.csv", "coverage.csv"]
    cov = pd.read_csv(tmp_path / "coverage.csv")
    assert list(cov["held_gpu_ns"]) == [4 * H] and list(cov["represented_gpu_ns"]) == [H]
    assert hooks.digest("abc", cfg) != hooks.digest("abc", load_config([])) == "abc"


def trace(path, base_ns: int, kernels: int = 60) -> str:
    """A one-GPU PyTorch profiler trace on the Unix-epoch clock from ``base_ns``: ``kernels`` 1 ms kernels 2 ms apart."""
    path.parent.mkdir(parents=True, exist_ok=True)
    w = KinetoWriter(str(path), pid=11, devices=[(0, "NVIDIA H100 80GB HBM3", 132)], base_time_ns=base_ns)
    for i in range(kernels):
        start = base_ns + i * 2_000_000
        w.runtime(11, start, start + 10_000, "cudaLaunchKernel", i + 1)
        w.kernel(0, 7, start + 20_000, start + 1_020_000, "gemm_kernel", i + 1)
    return w.close()


def run_with_accounting(folder, sacct_file: str, labels: str = "", *more: str) -> tuple:
    """``gpu-idle run`` (in process) over ``folder`` with ``--accounting sacct_file`` (and ``more`` arguments):
    (result, out folder)."""
    out = folder.parent / f"{folder.name}-out"
    args = ["run", str(folder), "--out", str(out), "--no-cache", "--accounting", sacct_file, *more]
    if labels:
        args += ["--config", labels]
    return run_cli(*args, check=False), out


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """`gpu-idle run --accounting` (in process): job 101's trace (its id in the path), a trace on node n2 during
    job 102 (node and time, the node from a label), job 103 never traced; its metrics file (``--prom``).
    ``(run folder, its report in Markdown, its report in HTML, what the run printed, the metrics file)``."""
    tmp_path = tmp_path_factory.mktemp("accounting-run")
    fleet_dir = tmp_path / "fleet"
    trace(fleet_dir / "job101" / "rank0.pt.trace.json", T0 * S + H)
    trace(fleet_dir / "n2" / "serve.pt.trace.json", T0 * S + 90 * 60 * S, kernels=70)
    accounting = write(tmp_path / "sacct.json", sacct(
        job(101, "alice", "vision", "n1", T0, T0 + 10 * 3600, 4),
        job(102, "bob", "speech", "n2", T0, T0 + 2 * 3600, 1),
        job(103, "carol", "vision", "n3", T0, T0 + 5 * 3600, 2, name="gpu:h100")))
    labels = tmp_path / "labels.yaml"
    labels.write_text("labels:\n  - {match: '*/n2/*', node: n2}\n")
    proc, out = run_with_accounting(fleet_dir, accounting, str(labels), "--prom", str(tmp_path / "gpu_idle.prom"))
    assert proc.returncode == 0, proc.stderr
    run_cli("report", str(out), "--out", str(tmp_path / "r.md"), "--format", "md")
    run_cli("report", str(out), "--out", str(tmp_path / "r.html"))
    return (out, (tmp_path / "r.md").read_text(), (tmp_path / "r.html").read_text(), proc.stdout,
            tmp_path / "gpu_idle.prom")


def test_run_writes_teams_and_coverage(ran):
    """Teams' dollars are the fleet table's, summed by hand; job 103 is named in coverage.csv, not priced."""
    out = ran[0]
    fleet = pd.read_csv(out / "fleet.csv")
    by_report = dict(zip(fleet["report"].map(lambda p: p.split("/fleet/")[1]), fleet["sched_job_id"]))
    assert by_report == {"job101/rank0.pt.trace.json": 101, "n2/serve.pt.trace.json": 102}
    assert list(fleet["sched_matched_by"]) == ["slurm: path", "slurm: node"]
    usd = dict(zip(fleet["sched_job_id"], fleet["idle_usd_per_month"]))
    teams_csv = pd.read_csv(out / "teams.csv").set_index(["by", "name"])
    assert teams_csv.loc[("account", "vision"), "idle_usd_per_month"] == round(usd[101], 2)
    assert teams_csv.loc[("account", "speech"), "idle_usd_per_month"] == round(usd[102], 2)
    assert teams_csv.loc[("user", "carol"), "not_measured_jobs"] == 1
    jobs_csv = pd.read_csv(out / "jobs.csv", dtype=str).set_index("job")
    assert jobs_csv.loc["rank0", ["sched_jobs", "sched_accounts", "sched_users"]].tolist() == ["101", "vision", "alice"]
    assert jobs_csv.loc["serve", ["sched_jobs", "sched_accounts", "sched_users"]].tolist() == ["102", "speech", "bob"]
    cov = pd.read_csv(out / "coverage.csv").set_index("job_id")
    assert list(cov["status"]) == [PARTLY, MEASURED, NOT_MEASURED]
    assert list(cov["held_gpu_ns"]) == [40 * H, 2 * H, 10 * H]
    assert math.isnan(cov.loc[103, "idle_usd_per_month"])
    h100 = fleet["rate_usd_per_hour"].iloc[0]
    assert list(cov["held_usd"]) == [round(40 * h100, 2), round(2 * h100, 2), round(10 * h100, 2)]


def test_report_shows_teams_and_coverage_on_its_headline(ran):
    """`gpu-idle report`: the coverage sentence and the teams table in the HTML headline section and in the
    Markdown a manager forwards, with the figures of teams.csv and coverage.csv."""
    out, text, page = ran[:3]
    rate = float(pd.read_csv(out / "fleet.csv")["rate_usd_per_hour"].iloc[0])
    usd = float(pd.read_csv(out / "teams.csv").set_index(["by", "name"]).loc[("account", "vision"), "idle_usd_per_month"])
    held, represented = (40 + 2 + 10) * rate, (10 + 2) * rate  # GPU-hours held; 1 of job 101's 4 GPUs and job 102's
    # traced: 119 ms + 139 ms (60 and 70 kernels 2 ms apart, 1 ms each) = 0.258 s
    assert (f"The captures represent {100 * represented / held:.2f} % of the fleet's GPU spend over the accounting's "
            f"period (${represented:,.2f} of ${held:,.2f}); the captures traced 0.26 s in all (represented, not "
            "profiled). 1 job(s) held GPUs without any capture: 103 (vision, "
            "carol, 10.0 GPU-hours): not measured, not priced as idle.") in text.replace("\u202f", " ")
    assert f"| account | vision | ${usd:,.2f} |" in text
    assert "| user | carol | not measured | not measured | 0 | 10.0 | 0.00 % | 1 |" in text
    teams = pd.read_csv(out / "teams.csv")
    accounts = teams[(teams["by"] == "account") & (teams["gpus"] > 0)].sort_values("idle_usd_per_month", ascending=False)
    whose = ", ".join(f"{n} ${v:,.2f}" for n, v in zip(accounts["name"], accounts["idle_usd_per_month"]))
    assert f"Whose idle, by account ($/month): {whose} (every account and user below). The captures" in text
    headline = page[page.index('<section id="headline">'):page.index('<section id="job-costs">')]
    assert f"Whose idle, by account ($/month): {whose} (every account and user below). The captures" in headline
    assert 'id="coverage"' in headline and f'data-usd="{usd:.2f}"' in headline and 'data-not-measured="1"' in headline


def test_sweep_writes_teams_and_coverage_into_the_night(tmp_path):
    """`gpu-idle sweep --accounting`: the night folder holds teams.csv and coverage.csv; the accounting file's
    content is in the night's digest: changed, the night is written again with the new figures."""
    fleet_dir = tmp_path / "fleet"
    trace(fleet_dir / "job101" / "rank0.pt.trace.json", T0 * S + H)
    accounting = write(tmp_path / "sacct.json", sacct(job(101, "alice", "vision", "n1", T0, T0 + 3600, 2)))
    broken = tmp_path / "broken.json"
    broken.write_text('{"items": [{"metadata": ')
    state = tmp_path / "state"
    args = ["sweep", str(fleet_dir), "--state-dir", str(state), "--night", "2026-12-01", "--accounting", accounting,
            "--accounting", str(broken), "--prom", str(tmp_path / "night.prom")]
    proc = run_cli(*args, check=False)
    assert proc.returncode == 0, proc.stderr
    assert f"WARNING: accounting: {broken}: not JSON (" in proc.stdout + proc.stderr  # named; the sweep went on
    # printed as run prints it, and in the night's metrics: 1 of job 101's 2 GPUs captured for its hour, $4/GPU-h
    assert ("\n  The captures represent 50.00 % of the fleet's GPU spend over the accounting's period ($4.00 of "
            "$8.00); 0 allocation(s)\n  held GPUs without any capture (coverage.csv).\n") in proc.stdout
    prom_text = (tmp_path / "night.prom").read_text(encoding="utf-8")
    assert ('gpu_idle_held_gpu_seconds{account="vision",partition="debug",sched_job="101",scheduler="slurm",'
            'user="alice"} 7200.0\n') in prom_text and "gpu_idle_gpu_spend_measured_ratio 0.5\n" in prom_text
    night = state / "nights" / "2026-12-01"
    assert list(pd.read_csv(night / "coverage.csv")["held_gpu_ns"]) == [2 * H]
    write(tmp_path / "sacct.json", sacct(job(101, "alice", "vision", "n1", T0, T0 + 3600, 4)))
    assert run_cli(*args, check=False).returncode == 0
    assert list(pd.read_csv(night / "coverage.csv")["held_gpu_ns"]) == [4 * H]
    assert pd.read_csv(night / "teams.csv").set_index(["by", "name"]).loc[("account", "vision"), "gpus"] == 1
    (night / "coverage.csv").unlink()  # a night rebuilt from its stored results joins the accounting too
    write(tmp_path / "sacct.json", sacct(job(101, "alice", "vision", "n1", T0, T0 + 3600, 8)))
    assert run_cli(*args, "--report-only", check=False).returncode == 0
    assert list(pd.read_csv(night / "coverage.csv")["held_gpu_ns"]) == [8 * H]


def test_pods_on_one_node_told_apart_by_the_capture_time(cfg, tmp_path):
    """Two pods on node n5 one after the other, a third overlapping both: a capture on the epoch clock during
    the first alone matches it; one during the overlap is named, not matched."""
    path = write(tmp_path / "pods.json", {"kind": "List", "items": [
        pod("a-0", "n5", 1, "2026-12-01T10:00:00Z", "2026-12-01T11:00:00Z"),
        pod("b-0", "n5", 1, "2026-12-01T11:00:00Z", "2026-12-01T12:00:00Z", team="search", user="bob"),
        pod("c-0", "n5", 1, "2026-12-01T11:30:00Z", "2026-12-01T13:00:00Z")]})
    allocations, problems = read_file(path)
    ten = 1_796_119_200 * S  # 2026-12-01T10:00:00Z
    fleet = fleet_frame([gpu_row("/t/x.pt.trace.json", "GPU-0", 1.0, node="n5", first=ten + H // 2, capture=S),
                         gpu_row("/t/y.pt.trace.json", "GPU-0", 1.0, node="n5", first=ten + 7 * H // 4, capture=S)])
    matched, problems = match_reports(fleet, allocations, cfg)
    assert {r: (a.job_id, a.account, rule) for r, (a, rule) in matched.items()} == {
        "/t/x.pt.trace.json": ("ml/a-0", "vision", "node")}
    assert problems == ["/t/y.pt.trace.json: node n5 was held by 2 overlapping jobs at the capture's time (ml/b-0, "
                        "ml/c-0): which one it belongs to is not known, not matched by node"]



# ---- coverage where people look: the metrics file, the printed summary, the records (issue 48, issue 47 §3) ----

def test_the_metrics_file_holds_coverage_csvs_figures(ran):
    """``run --accounting --prom``: one series per allocation, parsed back (prometheus_client) equal to
    coverage.csv's and to the hand figures: job 101 held 4 GPUs × 10 h, one GPU captured; job 102 1 GPU × 2 h,
    captured; job 103 2 GPUs × 5 h, never traced; every GPU an H100 of the card (the fleet's rate)."""
    from prometheus_client.parser import text_string_to_metric_families

    out, prom_file = ran[0], ran[4]
    got = {}
    for family in text_string_to_metric_families(prom_file.read_text(encoding="utf-8")):
        for s in family.samples:
            if s.name in COVERAGE_NAMES:
                labels = dict(s.labels)
                got[(s.name, labels.pop("sched_job", None), tuple(sorted(labels.items())))] = s.value
    rate = float(pd.read_csv(out / "fleet.csv")["rate_usd_per_hour"].iloc[0])
    who = {"101": ("vision", "alice"), "102": ("speech", "bob"), "103": ("vision", "carol")}

    def labels(job_id, **more):
        return tuple(sorted({"scheduler": "slurm", "account": who[job_id][0], "user": who[job_id][1],
                             "partition": "debug", **more}.items()))

    by_hand = {"101": (4 * 10, 1 * 10, PARTLY), "102": (1 * 2, 1 * 2, MEASURED), "103": (2 * 5, 0, NOT_MEASURED)}
    want = {("gpu_idle_gpu_spend_measured_ratio", None, ()): (10 + 2) / (40 + 2 + 10),
            ("gpu_idle_untraced_allocations", None, ()): 1.0}
    for job_id, (held_h, represented_h, status) in by_hand.items():
        want[("gpu_idle_allocation_info", job_id, labels(job_id, pricing="card", status=status))] = 1.0
        want[("gpu_idle_held_gpu_seconds", job_id, labels(job_id))] = held_h * 3600.0
        want[("gpu_idle_represented_gpu_seconds", job_id, labels(job_id))] = represented_h * 3600.0
        want[("gpu_idle_held_dollars", job_id, labels(job_id, pricing="card"))] = round(held_h * rate, 2)
        want[("gpu_idle_represented_dollars", job_id, labels(job_id, pricing="card"))] = round(represented_h * rate, 2)
    assert {k: v for k, v in got.items() if k[0] != "gpu_idle_gpu_spend_measured_ratio"} == {
        k: v for k, v in want.items() if k[0] != "gpu_idle_gpu_spend_measured_ratio"}
    ratio = ("gpu_idle_gpu_spend_measured_ratio", None, ())
    assert math.isclose(got[ratio], want[ratio], rel_tol=1e-12)
    # the same figures as coverage.csv's, column by column
    cov = pd.read_csv(out / "coverage.csv", dtype={"job_id": str})
    for r in cov.to_dict("records"):
        key = labels(r["job_id"])
        assert got[("gpu_idle_held_gpu_seconds", r["job_id"], key)] == r["held_gpu_ns"] / 1e9
        assert got[("gpu_idle_represented_gpu_seconds", r["job_id"], key)] == r["represented_gpu_ns"] / 1e9
        assert got[("gpu_idle_held_dollars", r["job_id"], labels(r["job_id"], pricing="card"))] == r["held_usd"]
        assert got[("gpu_idle_represented_dollars", r["job_id"], labels(r["job_id"], pricing="card"))] == \
            r["represented_usd"]
    assert math.isclose(got[ratio], cov["represented_usd"].sum() / cov["held_usd"].sum(), rel_tol=1e-12)


@pytest.mark.needs_promtool
def test_the_metrics_file_with_coverage_passes_promtool(ran):
    promtool_check(ran[4])


def test_the_printed_summary_says_the_share_measured_and_the_allocations_never_traced(ran):
    """Under the totals, two spaces in, within 120 columns: the share of the spend measured, the untraced count."""
    out, printed = ran[0], ran[3]
    rate = float(pd.read_csv(out / "fleet.csv")["rate_usd_per_hour"].iloc[0])
    assert rate == 4.0  # the H100's card rate: $48.00 of $208.00 below
    assert ("  The captures represent 23.08 % of the fleet's GPU spend over the accounting's period ($48.00 of "
            "$208.00); 1\n  allocation(s) held GPUs without any capture (coverage.csv).\n") in printed
    assert max(len(line) for line in printed.splitlines() if not line.startswith("wrote ")) <= 120


def test_the_records_say_the_coverage(ran):
    """Each job's record: its scheduler job's GPU-hours held and captured, the share of their spend measured,
    then the fleet's share and the allocations never traced."""
    records = ran[0] / "records"
    fleet_part = ("Over the fleet: the captures represent 23.08 % of the fleet's GPU spend over the accounting's "
                  "period ($48.00 of $208.00); 1 allocation(s) held GPUs without any capture (coverage.csv).")
    # represented, not profiled: the seconds traced are said beside (60 kernels 2 ms apart, 1 ms each: 59 × 2 + 1
    # = 119 ms; 70 kernels: 139 ms)
    assert ("\nCoverage: scheduler job(s) 101 held 40.0 GPU-hours in the period, 10.0 of them represented by its "
            "captures (0.12 s traced); the captures represent 25.00 % of their GPU spend over the accounting's "
            "period ($40.00 of $160.00), the rest not measured. "
            + fleet_part + "\n") in (records / "rank0.md").read_text(encoding="utf-8")
    assert ("\nCoverage: scheduler job(s) 102 held 2.0 GPU-hours in the period, 2.0 of them represented by its "
            "captures (0.14 s traced); the captures represent 100.00 % of their GPU spend over the accounting's "
            "period ($8.00 of $8.00). "
            + fleet_part + "\n") in (records / "serve.md").read_text(encoding="utf-8")



def test_a_kept_run_still_says_and_writes_its_coverage(tmp_path):
    """A second `run` with nothing changed keeps the folder: its summary and metrics say the same coverage
    (2 GPUs held for 1 h by job 101, 1 captured: $4.00 of $8.00 at the H100's $4/GPU-h); without the accounting
    the folder is written again, and says none: its coverage.csv and teams.csv are removed."""
    fleet_dir = tmp_path / "fleet"
    trace(fleet_dir / "job101" / "rank0.pt.trace.json", T0 * S + H)
    accounting = write(tmp_path / "sacct.json", sacct(job(101, "alice", "vision", "n1", T0, T0 + 3600, 2)))
    args = ["run", str(fleet_dir), "--out", str(tmp_path / "out"), "--accounting", accounting]
    first = run_cli(*args, "--prom", str(tmp_path / "1.prom"))
    kept = run_cli(*args, "--prom", str(tmp_path / "2.prom"))
    assert "the outputs in" in kept.stdout and "are up to date" in kept.stdout
    said = ("  The captures represent 50.00 % of the fleet's GPU spend over the accounting's period ($4.00 of $8.00); "
            "0 allocation(s)\n  held GPUs without any capture (coverage.csv).\n")
    assert said in first.stdout and said in kept.stdout
    assert (tmp_path / "1.prom").read_text() == (tmp_path / "2.prom").read_text()
    assert "gpu_idle_represented_dollars{" in (tmp_path / "2.prom").read_text()
    plain = run_cli("run", str(fleet_dir), "--out", str(tmp_path / "out"), "--prom", str(tmp_path / "3.prom"))
    assert "GPU spend" not in plain.stdout and "allocation" not in (tmp_path / "3.prom").read_text()
    assert "Coverage:" not in (tmp_path / "out" / "records" / "rank0.md").read_text()
    # nor does the folder keep the accounting's tables of the run before (the report would show them)
    assert not (tmp_path / "out" / "coverage.csv").exists() and not (tmp_path / "out" / "teams.csv").exists()
    # ... named, with the reason, and the run with the accounting said it wrote them
    out = tmp_path / "out"
    assert f"fix_first.json, {out / 'teams.csv'}, {out / 'coverage.csv'}, {out / 'gpus'}/, 1 medical" in first.stdout
    assert "teams.csv" not in plain.stdout.partition("wrote ")[2].partition(";")[0]
    assert plain.stdout.rstrip().endswith(
        "; removed coverage.csv, teams.csv of an earlier run with the scheduler's accounting (this run has none: they "
        "would describe other inputs)")
    assert (tmp_path / "out" / "fleet.csv").exists()


def test_a_fall_through_match_names_the_job_it_went_to_and_the_rule():
    """A job id in the path that no accounting lists, then the node rule matching: the warning says where the
    report went instead (job 102 holds n2 at the capture's time), and by which rule."""
    cfg = load_config([])
    fleet = fleet_frame([gpu_row("/x/job555/e.pt.trace.json", "GPU-0", 1.0, node="n2", first=T0 * S + H,
                                 capture=60 * S)])
    matched, problems = match_reports(fleet, ALLOCATIONS, cfg)
    assert {r: (a.job_id, rule) for r, (a, rule) in matched.items()} == {"/x/job555/e.pt.trace.json": ("102", "node")}
    assert problems == ["/x/job555/e.pt.trace.json: its path names job 555 (accounting.path_job_id), which no "
                        "accounting file lists (s.json); matched instead to slurm job 102 by the `node` rule"]


def test_coverage_counts_the_period_only_and_a_running_job_up_to_its_end(joined):
    """accounting.period from T0 + 1 h to T0 + 6 h: job 101 (4 GPUs, T0..T0 + 10 h) held 4 × 5 h there, job 102
    (T0..T0 + 2 h) 1 × 1 h, job 103 (2 GPUs to T0 + 5 h) 2 × 4 h, a job still running since T0 + 4 h 1 × 2 h (to the
    period's end, not 0), a job ended before the period nothing (left out)."""
    cfg = load_config([], {"cost": {"rates": [{"model": "H100", "usd_per_gpu_hour": 4.0}], "rates_replace": True},
                           "accounting": {"period": ["2026-11-30T01:53:20Z", "2026-11-30T06:53:20Z"]}})
    running = Allocation("slurm", "s.json", "105", "dan", "speech", "debug", ("n5",), T0 * S + 4 * H, None, 1)
    before = Allocation("slurm", "s.json", "106", "dan", "speech", "debug", ("n5",), T0 * S - 2 * H, T0 * S - H, 1)
    allocations = ALLOCATIONS + [running, before]
    within = period(allocations, cfg.accounting.period)
    assert within == (T0 * S + H, T0 * S + 6 * H, "accounting.period")  # T0 is 2026-11-30T00:53:20Z
    cov = coverage(joined[0], allocations, cfg.cost, within).set_index("job_id")
    assert list(cov.index) == ["101", "102", "103", "105"]
    assert list(cov["held_gpu_ns"]) == [20 * H, 1 * H, 8 * H, 2 * H]
    assert list(cov["represented_gpu_ns"]) == [10 * H, 1 * H, 0, 0]  # 2 of 101's 4 GPUs captured, 102's one


def test_without_a_period_a_running_job_runs_until_its_file_was_written(tmp_path, cfg):
    """The accounting's own span: a job still running (end 0) counts up to the time sacct wrote the file (its
    modification time, T0 + 3 h here): 2 GPUs × 3 h, not 0."""
    path = write(tmp_path / "s.json", sacct(job(9, "a", "t", "n1", T0, 0, 2)))
    os.utime(path, (T0 + 3 * 3600, T0 + 3 * 3600))
    got, _ = read_file(path)
    assert period(got) == (T0 * S, T0 * S + 3 * H, "the accounting's own span")
    cov = coverage(fleet_frame([gpu_row("/x/a.sqlite", "GPU-0", 1.0)]).assign(sched_job_id=None,
                                                                                 sched_matched_by=None), got, cfg.cost)
    assert list(cov["held_gpu_ns"]) == [6 * H]


def unknown_cfg(*files, period_=()):
    return load_config([], {"accounting": {"files": [str(f) for f in files], "period": list(period_)}})


def test_coverage_unknown_when_nothing_usable_was_read(tmp_path):
    """Truncated JSON, a file of neither shape, one without a GPU job, and GPU jobs all outside the period: the
    coverage is unknown, and why (which file, what cause) is said by the summary and the record, never
    "complete"; the metrics file holds no coverage figure."""
    fleet = hooks.attach(fleet_frame([gpu_row("/x/a.sqlite", "GPU-0", 1.0)]), unknown_cfg(), print)
    truncated = tmp_path / "cut.json"
    truncated.write_text('{"jobs": [{"job_id": 1')
    shape = write(tmp_path / "shape.json", [1, 2])
    no_gpu = write(tmp_path / "nogpu.json", sacct(job(4, "a", "t", "n1", T0, T0 + 60, 0)))
    late = write(tmp_path / "late.json", sacct(job(5, "a", "t", "n1", T0, T0 + 3600, 1)))
    cases = {
        (truncated,): f"{truncated}: not JSON (Expecting ',' delimiter: line 1 column 23 (char 22)): no allocation "
                      "read from it",
        (shape,): f"{shape}: neither `sacct --json` output (a `jobs` list) nor `kubectl get pods -o json` output (an "
                  "`items` list): no allocation read from it",
        (no_gpu,): f"{no_gpu}: lists no allocation holding GPUs (no started job or pod with a GPU)",
        (truncated, no_gpu): f"{truncated}: not JSON (Expecting ',' delimiter: line 1 column 23 (char 22)): no "
                             f"allocation read from it; {no_gpu}: lists no allocation holding GPUs (no started job or "
                             "pod with a GPU)",
    }
    for files, reason in cases.items():
        fleet.attrs[hooks.JOINED] = True
        cov = hooks.coverage_table(fleet.assign(sched_job_id=None, sched_matched_by=None), unknown_cfg(*files))
        assert cov.empty and cov.attrs[hooks.UNKNOWN] == reason, files
    cov = hooks.coverage_table(fleet.assign(sched_job_id=None, sched_matched_by=None),
                               unknown_cfg(late, period_=("2026-12-01T00:00:00Z", "2026-12-02T00:00:00Z")))
    reason = (f"none of the 1 allocation(s) holding GPUs in {late} falls in the period 2026-12-01T00:00:00Z to "
              "2026-12-02T00:00:00Z (accounting.period)")
    assert cov.attrs[hooks.UNKNOWN] == reason
    said = (f"Coverage unknown: no allocation holding GPUs in the period was read from the accounting ({reason}); the "
            "share of the GPU spend measured and the allocations never traced are not known.")
    assert summary_text(cov) == said
    assert record_coverage_text(["5"], cov) == said
    prom = metrics_text(fleet, None, cov, measured_share(cov))
    assert not [name for name in COVERAGE_NAMES if name in prom]


def test_an_unreadable_accounting_says_unknown_in_every_view(tmp_path):
    """`gpu-idle run --accounting` with a truncated sacct output: the printed summary, the record, the report and
    the metrics file say the coverage is unknown (the report: the run's warnings name the file), never
    "every allocation holding GPUs has a capture" nor 0 untraced allocations."""
    fleet_dir = tmp_path / "fleet"
    trace(fleet_dir / "job101" / "rank0.pt.trace.json", T0 * S + H)
    cut = tmp_path / "sacct.json"
    cut.write_text('{"jobs": [{"job_id": 1')
    proc, out = run_with_accounting(fleet_dir, str(cut), "", "--prom", str(tmp_path / "m.prom"))
    assert proc.returncode == 0, proc.stderr
    reason = f"{cut}: not JSON (Expecting ',' delimiter: line 1 column 23 (char 22)): no allocation read from it"
    assert f"WARNING: accounting: {reason}" in proc.stdout + proc.stderr
    flat = " ".join(proc.stdout.split())
    assert (f"Coverage unknown: no allocation holding GPUs in the period was read from the accounting ({reason}); "
            "the share of the GPU spend measured and the allocations never traced are not known.") in flat
    assert "without any capture" not in flat
    assert "Coverage unknown:" in (out / "records" / "rank0.md").read_text()
    assert not [name for name in COVERAGE_NAMES if name in (tmp_path / "m.prom").read_text()]
    run_cli("report", str(out), "--out", str(tmp_path / "r.md"), "--format", "md")
    md = (tmp_path / "r.md").read_text()
    assert ("Coverage unknown: no allocation holding GPUs in the period was read from the accounting (coverage.csv "
            "lists none; the run's `WARNING: accounting:` lines name the file and the cause); the share of the GPU "
            "spend measured and the allocations never traced are not known.") in md
    assert "has a capture" not in md


def test_the_operations_pages_examples_are_read_as_they_say(tmp_path):
    """docs/operations.md#feeding-the-accounting shows a sacct and a pod JSON: each is read into the allocation
    its fields say (8 GPUs on gpu01-02 for 10 h; 4 GPUs on gpu01 for 2 h, team vision)."""
    page = (Path(__file__).parent.parent / "docs" / "operations.md").read_text()
    section = page.split("## Feeding the accounting", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```json\n")[1:]]
    assert len(blocks) == 2
    got = [read_file(write(tmp_path / f"{i}.json", json.loads(b)))[0] for i, b in enumerate(blocks)]
    slurm, pods = got[0][0], got[1][0]
    assert (slurm.job_id, slurm.user, slurm.account, slurm.nodes, slurm.gpus) == ("101", "alice", "vision",
                                                                               ("gpu01", "gpu02"), 8)
    assert (slurm.end_ns - slurm.start_ns) == 10 * H
    assert (pods.job_id, pods.user, pods.account, pods.partition, pods.nodes, pods.gpus, pods.gpu_type) == (
        "ml/train-0", "alice", "vision", "ml", ("gpu01",), 4, "NVIDIA-H100-80GB-HBM3")
    assert pods.end_ns - pods.start_ns == 2 * H


def test_a_re_priced_report_withholds_who_pays(ran, tmp_path):
    """The run's report priced again with another card (each rate doubled): the teams table and coverage sentence
    (teams.csv's dollars, at the run's rates) are not on the HTML page nor in the Markdown, and none of teams.csv's
    dollars is; the note says they are not shown."""
    out = ran[0]
    fleet = pd.read_csv(out / "fleet.csv")
    rates = sorted({(str(m), float(r)) for m, r in zip(fleet["rate_model"], fleet["rate_usd_per_hour"])})
    card = tmp_path / "doubled.yaml"
    card.write_text("cost:\n  rates:\n" + "".join(f"    - {{model: {m}, usd_per_gpu_hour: {2 * r}, match: ['{m}']}}\n"
                                                     for m, r in rates))
    assert 'id="teams"' in ran[2] and "Whose idle" in ran[1]   # the run's own report shows them
    run_cli("report", str(out), "--config", str(card), "--out", str(tmp_path / "x" / "r.html"))
    run_cli("report", str(out), "--config", str(card), "--format", "md", "--out", str(tmp_path / "r.md"))
    page, md = (tmp_path / "x" / "r.html").read_text(), (tmp_path / "r.md").read_text()
    assert 'id="teams"' not in page and 'id="coverage"' not in page and "Whose idle" not in md
    teams = pd.read_csv(out / "teams.csv")["idle_usd_per_month"].dropna()
    assert len(teams) and not [u for u in teams if f"${u:,.2f}" in page or f"${u:,.2f}" in md]
    assert "the teams table (who pays, from the scheduler's accounting)" in " ".join(md.split())
