"""deploy/slurm on a real Slurm: a single-node cluster on this machine (scripts/local_slurm.py:
Debian's slurmctld, slurmd and munged, everything in a temporary folder), the nightly sweep
submitted exactly as deploy/README.md says (`sbatch deploy/slurm/nightly.sbatch`, workers
started by dask-jobqueue's SLURMCluster from deploy/slurm/jobqueue.yaml), compared byte for
byte with the embedded LocalCluster's run of the same fleet; a worker job cancelled mid-sweep;
and what the product says when Slurm gives no worker.

Needs root and `make slurm` (slurm-wlm, munge); `make test` does both. Outside CI a machine
without them skips these tests; in CI (CI=true) their absence fails.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import REPO, run_cli

NIGHT = "2026-01-02"
#: Bounded waits (s): a nightly sweep of the example fleet takes ~20 s on 2 busy cores.
SWEEP_TIMEOUT_S = 300
SCHEDULER_TIMEOUT_S = 120


def load_local_slurm():
    spec = importlib.util.spec_from_file_location("local_slurm", REPO / "scripts" / "local_slurm.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


local_slurm = load_local_slurm()


@pytest.fixture(scope="module")
def slurm():
    """A running single-node Slurm; SLURM_CONF points at it for this process and its children
    while the module's tests run. Stopped (jobs cancelled, daemons ended) and removed afterwards;
    the job output files its jobs wrote into the checkout are removed too."""
    pytest.importorskip("dask_jobqueue", reason="pip install -e '.[test]' installs dask-jobqueue")
    missing = local_slurm.missing_programs()
    why = None
    if missing:
        why = f"no {', '.join(missing)}: `make slurm` installs Debian's slurm-wlm and munge"
    elif os.geteuid() != 0:
        why = "the local Slurm runs its daemons as root"
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    cluster = local_slurm.start()
    before = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        yield cluster
    finally:
        ids = cluster.run("squeue", "-h", "--states=all", "-o", "%i", check=False).stdout.split()
        cluster.stop()
        if before is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = before
        for job_id in ids:
            for path in (REPO / f"gpu-idle-nightly-{job_id}.out", REPO / "logs" / "slurm" / f"gpu-idle-worker-{job_id}.out"):
                path.unlink(missing_ok=True)
        for folder in (REPO / "logs" / "slurm", REPO / "logs"):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        shutil.rmtree(cluster.folder, ignore_errors=True)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """The example fleet (`gpu-idle synth --example DIR`): Nsight exports and PyTorch profiler traces,
    and its labels.yaml."""
    folder = tmp_path_factory.mktemp("slurm-fleet") / "fleet"
    run_cli("synth", "--example", str(folder))
    return folder


def report_count(fleet: Path) -> int:
    """How many reports the example fleet holds (Nsight exports and PyTorch profiler traces)."""
    return sum(1 for p in fleet.rglob("*") if p.name.endswith((".sqlite", ".pt.trace.json.gz")))


def night_config(folder: Path, fleet: Path, state: Path, **dask) -> Path:
    """The site's sweep config (GPU_IDLE_CONFIG): the fleet, a state folder, and for Slurm the
    site's network (`interface: lo`: scheduler and workers talk over this machine's loopback)."""
    data = {"sweep": {"inputs": [str(fleet)], "state_dir": str(state)}}
    if dask:
        data["dask"] = dask
    path = folder / f"{state.name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def local_night(fleet, tmp_path_factory) -> Path:
    """The same sweep on the embedded LocalCluster (`gpu-idle sweep`, no Slurm); its night folder."""
    folder = tmp_path_factory.mktemp("slurm-local")
    config = night_config(folder, fleet, folder / "state-local")
    run_cli("sweep", "--config", str(config), "--config", str(fleet / "labels.yaml"), "--night", NIGHT)
    return folder / "state-local" / "nights" / NIGHT


def submit_nightly(slurm, config: Path, fleet: Path, **extra_env: str) -> str:
    """`cd CHECKOUT && sbatch deploy/slurm/nightly.sbatch --config labels.yaml --night NIGHT` with
    GPU_IDLE_CONFIG=config (as deploy/README.md says); the job id. GPU_IDLE_PYTHON names this
    test's interpreter (a fresh clone's .venv/bin/python under `make test`). ``extra_env`` is added
    to the job's environment, which the worker jobs it submits inherit (sbatch exports it all)."""
    env = {**os.environ, **slurm.env, "GPU_IDLE_CONFIG": str(config), "GPU_IDLE_PYTHON": sys.executable,
           "PYTHONPATH": str(REPO), **extra_env}
    proc = subprocess.run(["sbatch", "--parsable", "deploy/slurm/nightly.sbatch", "--config",
                           str(fleet / "labels.yaml"), "--night", NIGHT],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, f"sbatch failed: {proc.stderr}"
    return proc.stdout.strip().split(";")[0]


def job_state(slurm, job_id: str) -> tuple[str, str]:
    """(JobState, ExitCode) of a job from `scontrol show job` ('' when Slurm forgot it)."""
    out = slurm.run("scontrol", "show", "job", job_id, check=False).stdout
    state = re.search(r"JobState=(\S+)", out)
    code = re.search(r"ExitCode=(\S+)", out)
    return (state.group(1) if state else "", code.group(1) if code else "")


def nightly_output(job_id: str) -> str:
    path = REPO / f"gpu-idle-nightly-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def wait_for_job(slurm, job_id: str, timeout_s: float = SWEEP_TIMEOUT_S) -> str:
    """Wait (bounded) until the job has ended; its final state. Fails with the job's output."""
    deadline = time.monotonic() + timeout_s
    state = ""
    while time.monotonic() < deadline:
        state, _ = job_state(slurm, job_id)
        if state in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"):
            return state
        time.sleep(1)
    pytest.fail(f"the nightly job {job_id} did not end within {timeout_s} s (state {state}); squeue:\n"
                + slurm.run("squeue", check=False).stdout + "\noutput:\n" + nightly_output(job_id))


#: Slurm states of a job that has not ended yet: a cancelled worker passes through COMPLETING for a moment
#: after the sweep that cancelled it has ended (seen once: the check raced it).
NOT_ENDED = {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "STOPPED", "RESIZING", "REQUEUED"}


def settled_worker_jobs(slurm, job_id: str, timeout_s: float = 60) -> dict:
    """``{job id: state}`` of the worker jobs (named ``gpu-idle-worker``) submitted after ``job_id``, once none
    of them is in a :data:`NOT_ENDED` state any more (bounded: their states as they stand at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = slurm.run("squeue", "-h", "--states=all", "-n", "gpu-idle-worker", "-o", "%i %T").stdout.split("\n")
        states = {j: s for j, s in (line.split() for line in out if line.strip()) if int(j) > int(job_id)}
        if not set(states.values()) & NOT_ENDED or time.monotonic() >= deadline:
            return states
        time.sleep(0.5)


def assert_same_night(local: Path, slurm_night: Path) -> None:
    """The fleet table byte for byte, and every other table and document of the night too (only the
    HTML report and the folder manifest name the state folder, which differs)."""
    assert (slurm_night / "fleet.csv").read_bytes() == (local / "fleet.csv").read_bytes()
    names = sorted(p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file())
    assert names == sorted(p.relative_to(slurm_night).as_posix() for p in slurm_night.rglob("*") if p.is_file())
    for name in names:
        if name in ("report.html", ".manifest.json"):
            continue
        assert (slurm_night / name).read_bytes() == (local / name).read_bytes(), name


@pytest.mark.needs_slurm
def test_local_slurm_runs_a_job(slurm, tmp_path):
    """The cluster itself: one node, idle, a batch job runs on it and writes its output."""
    assert slurm.node_state() == "idle"
    out = tmp_path / "hello.out"
    proc = slurm.run("sbatch", "--parsable", "--output", str(out), "--wrap", "echo hello from $SLURM_JOB_ID")
    job_id = proc.stdout.strip()
    assert wait_for_job(slurm, job_id, 60) == "COMPLETED"
    assert out.read_text() == f"hello from {job_id}\n"


@pytest.mark.needs_slurm
def test_nightly_sweep_on_slurm_equals_the_local_run(slurm, fleet, local_night, tmp_path):
    """`sbatch deploy/slurm/nightly.sbatch`: the nightly job runs the scheduler and the sweep, the
    SLURMCluster submits worker jobs from deploy/slurm/jobqueue.yaml (4 workers of 8 GiB each,
    the node has room for 2 such jobs at a time), and the night's tables equal the LocalCluster's."""
    config = night_config(tmp_path, fleet, tmp_path / "state-slurm", slurm={"options": {"interface": "lo"}})
    job_id = submit_nightly(slurm, config, fleet)
    state = wait_for_job(slurm, job_id)
    out = nightly_output(job_id)
    assert state == "COMPLETED", out
    assert job_state(slurm, job_id)[1] == "0:0", out
    n = report_count(fleet)
    assert f"sweep {NIGHT}: {n} report(s): {n} analysed, 0 reused, 0 failed" in out, out
    assert re.search(r"dask: SLURMCluster, scheduler tcp://127\.0\.0\.1:\d+", out), out
    joined = int(re.search(r"dask: (\d+) Slurm worker\(s\) joined", out).group(1))
    assert joined >= 1, out  # min_workers: 1 (the job's other workers join as they start)
    assert_same_night(local_night, tmp_path / "state-slurm" / "nights" / NIGHT)
    # The worker jobs were Slurm jobs named as jobqueue.yaml says; all gone once the sweep ended.
    states = settled_worker_jobs(slurm, job_id)
    assert len(states) == 4, states  # slurm.yaml: jobs: 4
    assert set(states.values()) <= {"CANCELLED", "COMPLETED"}, states
    assert any((REPO / "logs" / "slurm" / f"gpu-idle-worker-{j}.out").exists() for j in states), "worker logs"


#: A Dask worker preload (``distributed.worker.preload``) for :func:`test_a_worker_job_cancelled_mid_sweep`:
#: on the worker, every report's load (``pipeline.work.tasks.load_task``, whichever task calls it) first
#: writes ``held-*`` (the worker's address) into FOLDER and then waits until FOLDER/release exists. So no
#: report can finish before the test has cancelled a worker job and seen its worker leave the scheduler.
HOLD_PRELOAD = '''
import os
import threading
import time
from pathlib import Path

FOLDER = Path({folder!r})


def dask_setup(worker):
    from pipeline.work import tasks

    real = tasks.load_task

    def load_task(*args, **kwargs):
        release = FOLDER / "release"
        if not release.exists():
            held = FOLDER / f"held-{{os.getpid()}}-{{threading.get_ident()}}"
            held.write_text(worker.address)
            deadline = time.monotonic() + 600  # bounded: a test that never releases fails, it does not hang
            while not release.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return real(*args, **kwargs)

    tasks.load_task = load_task
'''


@pytest.mark.needs_slurm
def test_a_worker_job_cancelled_mid_sweep(slurm, fleet, local_night, tmp_path):
    """`scancel` of a worker job while one of its workers is computing: its tasks are recomputed
    on the other job's workers and the night is still complete and identical to the local run.

    Deterministic: every worker runs :data:`HOLD_PRELOAD`, so each report's task holds until the
    test releases it, which it does only once the cancelled job's worker has left the scheduler;
    the tasks the victim held were certainly still processing when the cancel took effect (before,
    the chosen task could finish first: 3 failures in 6 runs)."""
    from distributed import Client

    def rescheduled(keys, dask_scheduler=None) -> dict:  # nested: pickled by value
        """On the scheduler: for each key, whether its story has it leave ``processing`` when its worker
        was cleaned up (``handle-worker-cleanup-*``) and go back to ``processing`` afterwards."""
        out = {}
        for key in keys:
            story = [(t[1], t[2], str(t[4])) for t in dask_scheduler.story(key)]
            lost = [i for i, (start, finish, why) in enumerate(story)
                    if start == "processing" and why.startswith("handle-worker-cleanup")]
            out[key] = bool(lost) and any(finish == "processing" for _, finish, _ in story[lost[0]:])
        return out

    hold = tmp_path / "hold"
    hold.mkdir()
    preload = tmp_path / "hold_preload.py"
    preload.write_text(HOLD_PRELOAD.format(folder=str(hold)))
    config = night_config(tmp_path, fleet, tmp_path / "state-cancel", slurm={"options": {"interface": "lo"}})
    job_id = submit_nightly(slurm, config, fleet, DASK_DISTRIBUTED__WORKER__PRELOAD=json.dumps([str(preload)]))
    deadline = time.monotonic() + SCHEDULER_TIMEOUT_S
    address = None
    while address is None and time.monotonic() < deadline:
        found = re.search(r"dask: SLURMCluster, scheduler (tcp://[\d.]+:\d+)", nightly_output(job_id))
        address = found.group(1) if found else None
        time.sleep(0.2)
    assert address, f"the nightly job {job_id} printed no scheduler address in {SCHEDULER_TIMEOUT_S} s:\n" \
                    + nightly_output(job_id)
    try:
        with Client(address, timeout=30) as client:
            victim = None
            while victim is None and time.monotonic() < deadline:
                for held in sorted(hold.glob("held-*")):
                    worker = held.read_text()
                    keys = client.processing().get(worker) if worker else None
                    if keys:  # a worker holding a report's task: its tasks cannot finish before the release
                        # (a lambda travels by value: os.environ.get would carry this process's environ)
                        job = client.run(lambda: __import__("os").environ["SLURM_JOB_ID"], workers=[worker])[worker]
                        slurm.run("scancel", job)
                        victim = (worker, job, list(keys))
                        break
                time.sleep(0.05)
            assert victim, f"no worker held a task within {SCHEDULER_TIMEOUT_S} s:\n" + nightly_output(job_id)
            worker, victim_job, keys = victim
            # The scheduler sees the job's workers go and sends their tasks elsewhere: a task that was
            # processing on the victim goes processing -> released (worker clean-up) -> processing again.
            while worker in client.scheduler_info(n_workers=-1)["workers"] and time.monotonic() < deadline:
                time.sleep(0.1)
            assert worker not in client.scheduler_info(n_workers=-1)["workers"], f"{worker} did not leave"
            # The sweep was not over when its worker went: every report's task was still held.
            still_running = job_state(slurm, job_id)[0]
            (hold / "release").touch()
            deadline = time.monotonic() + SCHEDULER_TIMEOUT_S
            stories = client.run_on_scheduler(rescheduled, keys)
            while not any(stories.values()) and time.monotonic() < deadline:
                time.sleep(0.2)  # the clean-up's transitions may still be on their way
                stories = client.run_on_scheduler(rescheduled, keys)
    finally:
        (hold / "release").touch()  # whatever failed above, the night's tasks go on
    assert still_running == "RUNNING", nightly_output(job_id)
    assert any(stories.values()), f"no task of the cancelled worker {worker} (job {victim_job}) was rescheduled: {keys}"
    state = wait_for_job(slurm, job_id)
    out = nightly_output(job_id)
    assert state == "COMPLETED", out
    assert job_state(slurm, victim_job)[0] == "CANCELLED"
    n = report_count(fleet)
    assert f"sweep {NIGHT}: {n} report(s): {n} analysed, 0 reused, 0 failed" in out, out
    assert_same_night(local_night, tmp_path / "state-cancel" / "nights" / NIGHT)


# ---------------------------------------------------------------- what the product says when Slurm gives no worker

def slurm_config(tmp_path: Path, wait_timeout_s: float = 6.0, **options):
    """A config whose dask.slurm asks for one small worker job (1 CPU, 1 GiB), output in tmp_path."""
    from pipeline.config import config_from_dict

    options = {"cores": 1, "memory": "1GiB", "processes": 1, "interface": "lo",
               "scheduler_options": {"dashboard_address": ":0"},
               "job_extra_directives": [f"--output={tmp_path}/%x-%j.out"], **options}
    return config_from_dict({"dask": {"slurm": {"options": options, "jobs": 1, "min_workers": 1,
                                                "wait_timeout_s": wait_timeout_s}}})


def open_fails(cfg) -> str:
    """The EngineError text of open_client(cfg); the time it took is bounded by the caller's timeout."""
    from pipeline.engine.cluster import EngineError, open_client

    with pytest.raises(EngineError) as caught:
        with open_client(cfg, log=lambda message: None):
            pass
    return str(caught.value)


def worker_jobs_left(slurm, timeout_s: float = 30) -> list[str]:
    """Jobs named dask-worker (SLURMCluster's default) still pending, running or completing
    ``timeout_s`` seconds after the run gave up (the cancelled jobs leave within KillWait, 5 s)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = slurm.run("squeue", "-h", "-n", "dask-worker", "-t", "PD,R,CG", "-o", "%i").stdout.split()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.needs_slurm
def test_no_controller_reachable(slurm, fleet, tmp_path):
    """SLURM_CONF naming a controller port nothing listens on: `gpu-idle sweep` stops at once with
    the cause, every report is an error row saying it, exit status 1."""
    conf = tmp_path / "slurm.conf"
    port = local_slurm.free_port()
    conf.write_text(re.sub(r"(?m)^SlurmctldPort=\d+$", f"SlurmctldPort={port}", slurm.conf.read_text()))
    config = night_config(tmp_path, fleet, tmp_path / "state", slurm={"options": {"interface": "lo"}})
    start = time.monotonic()
    proc = run_cli("sweep", "--config", str(config), "--config", "deploy/slurm/slurm.yaml", "--night", NIGHT,
                   check=False, env={"SLURM_CONF": str(conf)}, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    message = "no Slurm controller reachable: `scontrol ping` says: Slurmctld(primary) at"
    assert f"gpu-idle: ERROR: {message}" in proc.stderr, proc.stderr
    assert f"is DOWN (SLURM_CONF={conf})" in proc.stderr, proc.stderr
    assert time.monotonic() - start < 60
    fleet_rows = (tmp_path / "state" / "nights" / NIGHT / "fleet.csv").read_text().splitlines()[1:]
    assert len(fleet_rows) == report_count(fleet) and all(message in row and ",error," in row for row in fleet_rows), fleet_rows


@pytest.mark.needs_slurm
def test_slurm_refuses_the_worker_job(slurm, tmp_path):
    """A partition that does not exist: sbatch --test-only's answer, before anything is submitted."""
    message = open_fails(slurm_config(tmp_path, queue="nosuchqueue"))
    assert message.startswith("Slurm refuses the worker job (sbatch --test-only): "), message
    assert "invalid partition specified: nosuchqueue" in message, message
    assert worker_jobs_left(slurm) == []


@pytest.mark.needs_slurm
def test_worker_jobs_stuck_pending(slurm, tmp_path):
    """A job Slurm holds back (--begin an hour from now): after the bounded wait, the jobs pending
    and Slurm's reason; the job is cancelled on the way out."""
    start = time.monotonic()
    message = open_fails(slurm_config(tmp_path, wait_timeout_s=5, job_extra_directives=[
        f"--output={tmp_path}/%x-%j.out", "--begin=now+3600"]))
    assert time.monotonic() - start < 60
    assert re.fullmatch(r"0 of 1 Dask worker\(s\) joined the scheduler at tcp://127\.0\.0\.1:\d+ in \d+ s; "
                        r"worker job\(s\) \d+ still pending \(Slurm's reason: BeginTime\): ask for less .*"
                        r"or wait longer \(dask\.slurm\.wait_timeout_s\)", message), message
    assert worker_jobs_left(slurm) == []


@pytest.mark.needs_slurm
def test_worker_job_running_but_never_connecting(slurm, tmp_path):
    """A job that runs but whose worker never reaches the scheduler (here it sleeps before starting):
    after the bounded wait, which job and where to look."""
    message = open_fails(slurm_config(tmp_path, wait_timeout_s=8, job_script_prologue=["sleep 600"]))
    assert re.fullmatch(r"0 of 1 Dask worker\(s\) joined the scheduler at tcp://127\.0\.0\.1:\d+ in \d+ s; "
                        r"worker job\(s\) \d+ running but their Dask worker never connected: it cannot reach "
                        r"the scheduler \(set `interface` .*read the job's output file\)", message), message
    assert worker_jobs_left(slurm) == []


@pytest.mark.needs_slurm
def test_worker_job_that_ends_without_a_worker(slurm, tmp_path):
    """A job whose python does not exist on the node ends at once: the wait stops then (not at the
    timeout) and names the job and its state."""
    start = time.monotonic()
    message = open_fails(slurm_config(tmp_path, wait_timeout_s=120, python="/nonexistent/bin/python"))
    assert time.monotonic() - start < 60, "waited for the timeout although the job had ended"
    assert re.search(r"worker job\(s\) ended before their Dask worker joined \(\d+ FAILED\): read the job's "
                     r"output file", message), message
    (log,) = tmp_path.glob("dask-worker-*.out")
    assert "/nonexistent/bin/python: No such file or directory" in log.read_text()


def test_explain_no_workers_names_each_job_by_its_state():
    """The message from squeue's states alone (no Slurm needed): pending with their reasons,
    running without a worker, ended (state, or gone from squeue), in the order of the jobs."""
    from pipeline.engine.slurm import explain_no_workers

    states = {"11": ("PENDING", "Resources"), "12": ("PENDING", "Priority"), "13": ("RUNNING", "None"),
              "14": ("FAILED", "NonZeroExitCode")}
    message = explain_no_workers(["11", "12", "13", "14", "15"], states, 30, "tcp://10.0.0.1:8786", 0, 2)
    assert message == (
        "0 of 2 Dask worker(s) joined the scheduler at tcp://10.0.0.1:8786 in 30 s; "
        "worker job(s) 11, 12 still pending (Slurm's reason: Priority, Resources): ask for less (cores, memory, "
        "walltime in dask.slurm.jobqueue), another queue, or wait longer (dask.slurm.wait_timeout_s); "
        "worker job(s) 13 running but their Dask worker never connected: it cannot reach the scheduler "
        "(set `interface` to a network every node shares, check firewalls) or did not start (read the job's "
        "output file); worker job(s) ended before their Dask worker joined (14 FAILED, 15 gone from squeue): "
        "read the job's output file (the python of dask.slurm's job script must exist on the nodes, with "
        "gpu-idle installed)")
    assert explain_no_workers([], {}, 5, "tcp://h:1", 0, 1) == (
        "0 of 1 Dask worker(s) joined the scheduler at tcp://h:1 in 5 s: no worker job was submitted "
        "(sbatch failed; its error is in the log above)")


def test_dask_slurm_config_is_checked():
    """dask.slurm keys and values are checked when the config loads; deploy/slurm/slurm.yaml loads."""
    from pipeline.config import ConfigError, SlurmConfig, config_from_dict, load_config

    cfg = load_config([REPO / "deploy" / "slurm" / "slurm.yaml"])
    assert cfg.dask.slurm == SlurmConfig(jobqueue="deploy/slurm/jobqueue.yaml", jobs=4, min_workers=1,
                                         wait_timeout_s=1800.0)
    assert config_from_dict({}).dask.slurm is None
    with pytest.raises(ConfigError, match=r"dask\.slurm\.job: Unexpected keyword argument"):
        config_from_dict({"dask": {"slurm": {"job": 2}}})
    with pytest.raises(ConfigError, match=r"dask\.slurm\.min_workers: should be greater than or equal to 1, got 0"):
        config_from_dict({"dask": {"slurm": {"min_workers": 0}}})
