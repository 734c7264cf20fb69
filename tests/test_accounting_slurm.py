"""Teams' dollars from a real `sacct --json` (issue 47): a single-node Slurm with its accounting
(scripts/local_slurm.py ``accounting=True``: slurmdbd and a MariaDB of its own, the node's GPUs declared
as a generic resource, no device), real jobs run through it under two accounts and two users, their
`sacct --json` read by `gpu-idle run --accounting`, and every figure checked against a plain second
computation from the sacct fields and the fleet table.

Needs root, `make slurm` (slurm-wlm, munge, slurmdbd, mariadb-server); outside CI a machine without
them skips this test; in CI (CI=true) their absence fails.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import time

import pandas as pd
import pytest
from conftest import run_cli
from test_accounting import trace
from test_slurm import load_local_slurm

local_slurm = load_local_slurm()
#: What the accounting needs besides the Slurm daemons and munge.
ACCOUNTING_PROGRAMS = ("slurmdbd", "mariadbd", "mariadb-install-db", "sacct", "sacctmgr")
NS = 1_000_000_000


@pytest.fixture(scope="module")
def slurm():
    """A running single-node Slurm with accounting; stopped and removed afterwards."""
    path = os.environ.get("PATH", "") + os.pathsep + "/usr/sbin:/sbin"
    missing = local_slurm.missing_programs() + [p for p in ACCOUNTING_PROGRAMS if shutil.which(p, path=path) is None]
    why = (f"no {', '.join(missing)}: `make slurm` installs Debian's slurm-wlm, munge, slurmdbd and mariadb-server"
           if missing else "the local Slurm runs its daemons as root" if os.geteuid() != 0 else None)
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = local_slurm.start(accounting=True, timeout_s=120)
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.folder, ignore_errors=True)


def submit(slurm, *args: str) -> str:
    return slurm.run("sbatch", "--parsable", "--output", "/dev/null", *args).stdout.strip().split(";")[0]


def sacct_jobs(slurm, ids: list[str], timeout_s: float = 120) -> dict:
    """`sacct --json -X -a -j IDS` once every job has ended: the parsed output."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = slurm.run("sacct", "--json", "-X", "-a", "-j", ",".join(ids)).stdout
        data = json.loads(out)
        states = {str(j["job_id"]): j["state"]["current"] for j in data["jobs"]}
        if all(states.get(i) == "COMPLETED" for i in ids):
            return data
        if time.monotonic() > deadline:
            pytest.fail(f"jobs {ids} did not complete in {timeout_s} s: {states}")
        time.sleep(1)


@pytest.mark.needs_slurm
@pytest.mark.slow
def test_teams_dollars_from_real_sacct(slurm, tmp_path):
    """Job A (account vision, user root, 2 GPUs) is traced (its id in the trace's path), job B (speech, nobody,
    1 GPU) is traced on the node during its run (node and time), job C (vision, 1 GPU) never is."""
    a = submit(slurm, "-A", "vision", "--gres=gpu:2", "-J", "train", "--wrap", "sleep 2")
    b = submit(slurm, "--uid=nobody", "-A", "speech", "--gres=gpu:1", "-J", "serve", "--wrap", "sleep 3")
    c = submit(slurm, "-A", "vision", "--gres=gpu:1", "-J", "idle", "--wrap", "sleep 1")
    data = sacct_jobs(slurm, [a, b, c])
    path = tmp_path / "sacct.json"
    path.write_text(json.dumps(data))
    jobs = {str(j["job_id"]): j for j in data["jobs"]}
    assert {i: (jobs[i]["account"], jobs[i]["user"]) for i in (a, b, c)} == {
        a: ("vision", "root"), b: ("speech", "nobody"), c: ("vision", "root")}

    fleet_dir = tmp_path / "fleet"
    start_b = jobs[b]["time"]["start"] * NS
    trace(fleet_dir / f"job{a}" / "rank0.pt.trace.json", jobs[a]["time"]["start"] * NS + NS // 10)
    trace(fleet_dir / "node" / "serve.pt.trace.json", start_b + NS // 10, kernels=70)
    labels = tmp_path / "labels.yaml"
    labels.write_text("labels:\n  - {match: '*/node/*', node: localhost}\n")
    out = tmp_path / "out"
    proc = run_cli("run", str(fleet_dir), "--out", str(out), "--no-cache", "--accounting", str(path),
                   "--config", str(labels), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING: accounting" not in proc.stdout + proc.stderr

    fleet = pd.read_csv(out / "fleet.csv", dtype={"sched_job_id": str})
    ids = dict(zip(fleet["report"].map(os.path.basename), fleet["sched_job_id"]))
    assert ids == {"rank0.pt.trace.json": a, "serve.pt.trace.json": b}
    usd = dict(zip(fleet["sched_job_id"], fleet["idle_usd_per_month"]))
    rate = float(fleet["rate_usd_per_hour"].iloc[0])  # no model on the card's own: H100, the default model's

    teams = pd.read_csv(out / "teams.csv").set_index(["by", "name"])
    assert teams.loc[("account", "vision"), "idle_usd_per_month"] == round(usd[a], 2)
    assert teams.loc[("account", "speech"), "idle_usd_per_month"] == round(usd[b], 2)
    assert teams.loc[("user", "root"), "idle_usd_per_month"] == round(usd[a], 2)
    assert teams.loc[("user", "nobody"), "idle_usd_per_month"] == round(usd[b], 2)
    assert teams.loc[("account", "vision"), "not_measured_jobs"] == 1

    cov = pd.read_csv(out / "coverage.csv", dtype={"job_id": str}).set_index("job_id")
    held = {i: n * (jobs[i]["time"]["end"] - jobs[i]["time"]["start"]) * NS for i, n in ((a, 2), (b, 1), (c, 1))}
    assert {i: int(cov.loc[i, "held_gpu_ns"]) for i in (a, b, c)} == held
    assert {i: cov.loc[i, "status"] for i in (a, b, c)} == {a: "partly measured", b: "measured", c: "not measured"}
    assert int(cov.loc[a, "represented_gpu_ns"]) == held[a] // 2
    assert math.isnan(cov.loc[c, "idle_usd_per_month"])
    hours = {i: held[i] / 3_600_000_000_000 for i in held}
    assert cov.loc[c, "held_usd"] == round(hours[c] * rate, 2)
