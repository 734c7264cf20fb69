"""Workers as Slurm jobs: dask-jobqueue's ``SLURMCluster`` driven by ``dask.slurm`` (:class:`~pipeline.config.SlurmConfig`).

:func:`open_slurm_client` is what :func:`pipeline.engine.cluster.open_client` uses when the
config has a ``dask.slurm`` mapping: the Dask scheduler runs in this process (on the login node,
or inside the nightly Slurm job: ``deploy/slurm/nightly.sbatch``), ``dask.slurm.jobs`` worker jobs
are submitted with ``sbatch``, and the run starts once ``dask.slurm.min_workers`` workers joined.
The jobs are cancelled (``scancel``, by dask-jobqueue) when the run ends, however it ends.

What fails says why, as :class:`~pipeline.engine.errors.EngineError` (the run's reports become
error rows with that text, and ``gpu-idle sweep`` prints it and exits 1):

- no Slurm client commands on ``PATH``, or no controller answering ``scontrol ping``;
- Slurm refusing the worker job (``sbatch --test-only``: unknown partition, more memory or
  CPUs than any node has ...);
- no worker within ``dask.slurm.wait_timeout_s``: the jobs still pending (with Slurm's reason),
  running without their worker ever joining the scheduler, or ended (:func:`explain_no_workers`).
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time

from ..config import Config, ConfigError, SlurmConfig, load_yaml
from .errors import EngineError

#: Seconds one Slurm client command (``scontrol``, ``squeue``, ``sbatch --test-only``) may take.
COMMAND_TIMEOUT_S = 60.0
#: Seconds between two looks at the scheduler and ``squeue`` while waiting for workers.
POLL_S = 2.0


def cluster_options(slurm: SlurmConfig) -> dict:
    """``SLURMCluster`` keyword arguments: the ``jobqueue: slurm:`` mapping of ``slurm.jobqueue``
    (keys as dask config spells them, ``death-timeout`` -> ``death_timeout``; ``name`` -> ``job_name``,
    the Slurm job name; null values left to dask-jobqueue's defaults), then ``slurm.options`` over
    them. With no file, only ``slurm.options`` (dask-jobqueue reads the rest from dask's config).

    Raises:
        EngineError: the file cannot be read, is not YAML (or its aliases expand too far:
            :func:`~pipeline.config.load_yaml`), or has no ``jobqueue: slurm:`` mapping.
    """
    options: dict = {}
    if slurm.jobqueue:
        path = slurm.jobqueue
        try:
            data = load_yaml(path, "it") or {}
        except ConfigError as exc:
            raise EngineError(f"dask.slurm.jobqueue {exc}") from exc
        section = (data.get("jobqueue") or {}).get("slurm") if isinstance(data, dict) else None
        if not isinstance(section, dict):
            raise EngineError(f"dask.slurm.jobqueue {path}: no 'jobqueue: slurm:' mapping")
        for key, value in section.items():
            if value is None:
                continue
            name = key.replace("-", "_")
            options["job_name" if name == "name" else name] = value
    options.update(slurm.options)
    return options


def _run(args: list[str], timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise EngineError(f"no Slurm controller reachable: `{' '.join(args)}` did not answer in {timeout:g} s "
                          f"(SLURM_CONF={os.environ.get('SLURM_CONF', 'the default')})") from exc


def check_controller() -> None:
    """Raise :class:`EngineError` unless the Slurm client commands are on ``PATH`` and the
    controller answers ``scontrol ping`` (which returns at once when nothing listens)."""
    missing = [name for name in ("sbatch", "squeue", "scancel", "scontrol") if shutil.which(name) is None]
    if missing:
        raise EngineError(f"no Slurm here: {', '.join(missing)} not on PATH (dask.slurm submits the workers "
                          "with sbatch: run gpu-idle on a Slurm login node or inside a Slurm job)")
    proc = _run(["scontrol", "ping"])
    # Its answer, without the banner of asterisks it prints under a controller that is DOWN.
    said = " ".join(" ".join(line.split()) for line in (proc.stdout + "\n" + proc.stderr).splitlines()
                    if line.strip() and not line.strip().startswith("*"))
    if proc.returncode != 0 or " is UP" not in said:
        raise EngineError(f"no Slurm controller reachable: `scontrol ping` says: {said or f'exit {proc.returncode}'} "
                          f"(SLURM_CONF={os.environ.get('SLURM_CONF', 'the default')})")


def check_job_script(script: str) -> None:
    """``sbatch --test-only`` on a worker job script: raise :class:`EngineError` with Slurm's
    answer when it would refuse the job (unknown partition or account, more CPUs or memory
    than any node has, a walltime over the partition's limit ...). Nothing is submitted."""
    with tempfile.NamedTemporaryFile("w", suffix=".sh", prefix="gpu-idle-worker-") as fh:
        fh.write(script)
        fh.flush()
        proc = _run(["sbatch", "--test-only", fh.name])
    if proc.returncode != 0:
        said = " ".join((proc.stderr + " " + proc.stdout).split())
        raise EngineError(f"Slurm refuses the worker job (sbatch --test-only): {said}; "
                          "change what it asks for (dask.slurm.jobqueue / dask.slurm.options: queue, account, "
                          "cores, memory, walltime)")


def job_states(job_ids: list[str]) -> dict[str, tuple[str, str]]:
    """``{job id: (state, reason)}`` from ``squeue`` for the jobs it still lists (``PENDING``,
    ``RUNNING``, ``COMPLETED``, ``FAILED`` ...; reason ``None`` when it has none). A job missing
    from the answer has ended and left the controller's memory; a failed ``squeue`` gives ``{}``."""
    if not job_ids:
        return {}
    proc = _run(["squeue", "-h", "--states=all", "-o", "%i|%T|%r", "-j", ",".join(job_ids)])
    states = {}
    for line in proc.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 3 and parts[0] in job_ids:
            states[parts[0]] = (parts[1], parts[2])
    return states


def explain_no_workers(job_ids: list[str], states: dict[str, tuple[str, str]], waited_s: float,
                       address: str, joined: int, wanted: int) -> str:
    """Why fewer than ``wanted`` workers (``joined`` so far) reached the scheduler at ``address``
    after ``waited_s`` seconds, from the worker jobs' ``squeue`` states (:func:`job_states`):
    jobs pending (with Slurm's reasons), running without a worker joining, or ended (failed,
    cancelled, or gone from ``squeue``); no job at all when ``sbatch`` submitted none."""
    head = f"{joined} of {wanted} Dask worker(s) joined the scheduler at {address} in {waited_s:g} s"
    if not job_ids:
        return f"{head}: no worker job was submitted (sbatch failed; its error is in the log above)"
    pending = [j for j in job_ids if states.get(j, ("",))[0] in ("PENDING", "CONFIGURING", "REQUEUED")]
    running = [j for j in job_ids if states.get(j, ("",))[0] in ("RUNNING", "COMPLETING")]
    ended = [j for j in job_ids if j not in pending and j not in running]
    parts = []
    if pending:
        reasons = sorted({states[j][1] for j in pending})
        parts.append(f"worker job(s) {', '.join(pending)} still pending (Slurm's reason: {', '.join(reasons)}): "
                     "ask for less (cores, memory, walltime in dask.slurm.jobqueue), another queue, "
                     "or wait longer (dask.slurm.wait_timeout_s)")
    if running:
        parts.append(f"worker job(s) {', '.join(running)} running but their Dask worker never connected: "
                     "it cannot reach the scheduler (set `interface` to a network every node shares, "
                     "check firewalls) or did not start (read the job's output file)")
    if ended:
        how = ", ".join(f"{j} {states[j][0]}" if j in states else f"{j} gone from squeue" for j in ended)
        parts.append(f"worker job(s) ended before their Dask worker joined ({how}): read the job's output file "
                     "(the python of dask.slurm's job script must exist on the nodes, with gpu-idle installed)")
    return f"{head}; " + "; ".join(parts)


def wait_for_workers(cluster, client, wanted: int, timeout_s: float, poll_s: float = POLL_S,
                     clock=time.monotonic, sleep=time.sleep) -> float:
    """Wait until ``wanted`` workers joined ``client``'s scheduler; returns the seconds waited.
    Gives up early when every submitted job has ended with too few workers, else after
    ``timeout_s``. Raises :class:`EngineError` with :func:`explain_no_workers`' message."""
    start = clock()
    while True:
        joined = len(client.scheduler_info(n_workers=-1)["workers"])
        if joined >= wanted:
            return clock() - start
        job_ids = [str(job.job_id) for job in list(cluster.workers.values()) if getattr(job, "job_id", None)]
        states = job_states(job_ids)
        waited = clock() - start
        all_ended = job_ids and all(states.get(j, ("ENDED",))[0] not in
                                    ("PENDING", "CONFIGURING", "REQUEUED", "RUNNING", "COMPLETING") for j in job_ids)
        if all_ended or waited >= timeout_s:
            raise EngineError(explain_no_workers(job_ids, states, round(waited), cluster.scheduler_address,
                                                 joined, wanted))
        sleep(poll_s)


def job_script(cfg: Config) -> str:
    """The script of one worker job as ``dask.slurm`` makes it (a scheduler starts in this process
    to fill in its address; nothing is submitted)."""
    from dask_jobqueue import SLURMCluster

    with SLURMCluster(**cluster_options(cfg.dask.slurm)) as cluster:
        return cluster.job_script()


@contextlib.contextmanager
def open_slurm_client(cfg: Config, log=print):
    """A ``distributed.Client`` on a ``SLURMCluster`` built from ``cfg.dask.slurm``: check the
    controller, start the scheduler here, check the worker job (``sbatch --test-only``), submit
    ``jobs`` worker jobs, wait for ``min_workers`` workers (:func:`wait_for_workers`); on exit the
    client closes and the jobs are cancelled.

    Raises:
        EngineError: no dask-jobqueue, no Slurm, a refused job, or no worker in time (the message
            says which and what to change).
    """
    slurm = cfg.dask.slurm
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError as exc:
        raise EngineError("dask.slurm needs dask-jobqueue: pip install dask-jobqueue") from exc
    from distributed import Client

    check_controller()
    options = cluster_options(slurm)
    try:
        cluster = SLURMCluster(**options)
    except (TypeError, ValueError) as exc:
        raise EngineError(f"dask.slurm: SLURMCluster does not take these options: {exc}") from exc
    with contextlib.ExitStack() as stack:
        stack.callback(cluster.close)
        check_job_script(cluster.job_script())
        cluster.scale(jobs=slurm.jobs)
        client = stack.enter_context(Client(cluster, set_as_default=False))
        log(f"dask: SLURMCluster, scheduler {cluster.scheduler_address}, dashboard {client.dashboard_link}; "
            f"{slurm.jobs} worker job(s) submitted, waiting up to {slurm.wait_timeout_s:g} s for "
            f"{slurm.min_workers} worker(s)")
        waited = wait_for_workers(cluster, client, slurm.min_workers, slurm.wait_timeout_s)
        workers = len(client.scheduler_info(n_workers=-1)["workers"])
        log(f"dask: {workers} Slurm worker(s) joined in {waited:.0f} s")
        yield client
