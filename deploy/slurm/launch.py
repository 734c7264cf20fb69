#!/usr/bin/env python3
"""Run the nightly gpu-idle sweep on Slurm workers started by dask-jobqueue.

    python deploy/slurm/launch.py --config configs/nightly.yaml [--jobqueue deploy/slurm/jobqueue.yaml]
                                  [--jobs 4] [--min-workers 1] [--wait-timeout 1800] [SWEEP OPTIONS...]
    python deploy/slurm/launch.py --print-job-script     # show the worker job script, submit nothing

Builds ``SLURMCluster(**options)`` from the ``jobqueue: slurm:`` section of the
jobqueue file (the Dask scheduler runs inside this process, i.e. inside the
nightly Slurm job), submits ``--jobs`` worker jobs, waits for the first
workers, then runs ``gpu-idle sweep --config FILE --scheduler <this cluster>``
in-process. The worker jobs are cancelled when the sweep ends, however it ends.
Options this script does not know are passed on to ``gpu-idle sweep``.
The exit status is the sweep's (1 when any report failed); 3 when no worker
started in time.

Meant to be started by ``deploy/slurm/nightly.sbatch``; see ``deploy/README.md``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from dask_jobqueue import SLURMCluster

HERE = Path(__file__).resolve().parent
DEFAULT_JOBQUEUE = HERE / "jobqueue.yaml"
NO_WORKERS = 3


def cluster_options(path: str | Path = DEFAULT_JOBQUEUE) -> dict:
    """``SLURMCluster`` keyword arguments from a dask-config-format jobqueue file.

    Keys of ``jobqueue: slurm:`` are spelled as in dask config (``death-timeout``);
    they become keyword names (``death_timeout``), ``name`` becomes ``job_name``
    (the Slurm job name), and null values are left to dask-jobqueue's defaults.
    """
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    section = (data.get("jobqueue") or {}).get("slurm") if isinstance(data, dict) else None
    if not isinstance(section, dict):
        raise ValueError(f"{path}: no 'jobqueue: slurm:' mapping")
    options = {}
    for key, value in section.items():
        if value is None:
            continue
        name = key.replace("-", "_")
        options["job_name" if name == "name" else name] = value
    return options


def build_cluster(path: str | Path = DEFAULT_JOBQUEUE, **overrides) -> SLURMCluster:
    """A ``SLURMCluster`` (scheduler started, no job submitted yet) from the jobqueue file."""
    return SLURMCluster(**{**cluster_options(path), **overrides})


def run_sweep(config: str | Path, scheduler_address: str, extra_args=()) -> int:
    """``gpu-idle sweep --config CONFIG --scheduler ADDRESS [extra_args]`` in this process; its exit status."""
    from pipeline.cli import main as cli

    args = ["sweep", "--config", str(config), "--scheduler", scheduler_address, *extra_args]
    try:
        cli.main(args=args, prog_name="gpu-idle")
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return 1
    return 0


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="launch.py", description=__doc__.split("\n\n")[0],
        epilog="Unknown options are passed on to `gpu-idle sweep`.")
    parser.add_argument("--config", help="gpu-idle config with a sweep: section (required unless --print-job-script)")
    parser.add_argument("--jobqueue", default=str(DEFAULT_JOBQUEUE), help="dask-jobqueue file (default: %(default)s)")
    parser.add_argument("--jobs", type=int, default=4, help="worker jobs to submit (default: %(default)s)")
    parser.add_argument("--min-workers", type=int, default=1,
                        help="start the sweep once this many workers are up (default: %(default)s)")
    parser.add_argument("--wait-timeout", type=float, default=1800.0,
                        help="seconds to wait for --min-workers before giving up (default: %(default)s)")
    parser.add_argument("--print-job-script", action="store_true", help="print the worker job script and exit")
    args, sweep_args = parser.parse_known_args(argv)
    if not args.print_job_script and not args.config:
        parser.error("--config is required")
    if args.jobs < 1 or args.min_workers < 0:
        parser.error("--jobs must be >= 1 and --min-workers >= 0")
    return args, sweep_args


def main(argv=None) -> int:
    args, sweep_args = parse_args(argv)
    from distributed import Client

    with build_cluster(args.jobqueue) as cluster:
        if args.print_job_script:
            print(cluster.job_script())
            return 0
        print(f"launch: scheduler {cluster.scheduler_address}, dashboard {cluster.dashboard_link}", flush=True)
        cluster.scale(jobs=args.jobs)
        print(f"launch: submitted {args.jobs} worker job(s); waiting for {args.min_workers} worker(s)", flush=True)
        with Client(cluster.scheduler_address) as client:
            try:
                client.wait_for_workers(args.min_workers, timeout=args.wait_timeout)
            except TimeoutError:
                print(f"launch: no {args.min_workers} worker(s) within {args.wait_timeout:.0f} s; "
                      "check `squeue --me` and the worker logs in logs/slurm/", file=sys.stderr, flush=True)
                return NO_WORKERS
        return run_sweep(args.config, cluster.scheduler_address, sweep_args)


if __name__ == "__main__":
    sys.exit(main())
