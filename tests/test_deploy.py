"""deploy/: what can be checked without Kubernetes, Slurm or Docker.

Every YAML parses and holds the kinds and fields the deployment relies on; the
Kubernetes pieces agree with each other (one image, the scheduler Service the
CronJob talks to, the mounted config, memory limits) and with the sweep's command
line; the dask-jobqueue config builds its Slurm job script (offline: the
scheduler starts in-process, nothing is submitted); deploy/slurm/launch.py
imports and drives a sweep end to end against a stand-in cluster; the
Dockerfile is coherent line by line.
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import REPO
from dask.utils import parse_bytes

DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
SLURM = DEPLOY / "slurm"


# ---------------------------------------------------------------- helpers

def k8s_docs() -> list[dict]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


def one(kind: str) -> dict:
    found = [d for d in k8s_docs() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind} in deploy/kubernetes, found {len(found)}"
    return found[0]


def quantity_bytes(value: str) -> int:
    """A Kubernetes memory quantity (``8Gi``, ``512Mi``, ``2G``) in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGTPE]i?)?", str(value))
    assert m, f"not a memory quantity: {value!r}"
    number, unit = float(m.group(1)), m.group(2) or ""
    power = "KMGTPE".index(unit[0]) + 1 if unit else 0
    return int(number * ((1024 if unit.endswith("i") else 1000) ** power))


def pod_specs() -> dict[str, dict]:
    """Every pod spec in deploy/kubernetes, by where it comes from."""
    cluster, cron = one("DaskCluster"), one("CronJob")
    return {"worker": cluster["spec"]["worker"]["spec"], "scheduler": cluster["spec"]["scheduler"]["spec"],
            "cronjob": cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]}


def option(args: list[str], name: str) -> str:
    assert name in args, f"{name} not in {args}"
    return args[args.index(name) + 1]


def load_launch():
    spec = importlib.util.spec_from_file_location("gpu_idle_slurm_launch", SLURM / "launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- YAML everywhere

def test_every_yaml_under_deploy_parses():
    paths = sorted(DEPLOY.rglob("*.yaml")) + sorted(DEPLOY.rglob("*.yml"))
    assert {p.name for p in paths} >= {"daskcluster.yaml", "nightly-config.yaml", "nightly-cronjob.yaml",
                                       "jobqueue.yaml"}
    for path in paths:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
        assert docs, f"{path} is empty"
        assert all(isinstance(d, dict) for d in docs), path


def test_kubernetes_manifests_have_kind_api_version_and_name():
    docs = k8s_docs()
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "CronJob", "DaskCluster", "PersistentVolumeClaim"]
    api = {"ConfigMap": "v1", "PersistentVolumeClaim": "v1", "CronJob": "batch/v1",
           "DaskCluster": "kubernetes.dask.org/v1"}
    for doc in docs:
        assert doc["apiVersion"] == api[doc["kind"]], doc["kind"]
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"]), doc["metadata"]
        assert "namespace" not in doc["metadata"], "the namespace is chosen at apply time (-n)"


# ---------------------------------------------------------------- Kubernetes

def test_daskcluster_workers_and_scheduler():
    cluster = one("DaskCluster")
    worker, scheduler = cluster["spec"]["worker"], cluster["spec"]["scheduler"]
    assert isinstance(worker["replicas"], int) and worker["replicas"] >= 1
    (w,) = worker["spec"]["containers"]
    assert w["command"] == ["dask", "worker"]
    assert option(w["args"], "--name") == "$(DASK_WORKER_NAME)"  # set by the operator
    assert option(w["args"], "--nthreads") == "1"
    (s,) = scheduler["spec"]["containers"]
    assert s["command"] == ["dask", "scheduler"] and option(s["args"], "--port") == "8786"
    service_ports = {p["name"]: p["port"] for p in scheduler["service"]["ports"]}
    assert service_ports["tcp-comm"] == 8786
    assert scheduler["service"]["selector"] == {"dask.org/cluster-name": cluster["metadata"]["name"],
                                                "dask.org/component": "scheduler"}
    container_ports = {p["name"] for p in s["ports"]}
    assert {p["targetPort"] for p in scheduler["service"]["ports"]} <= container_ports


def test_every_container_has_requests_and_a_memory_limit():
    for where, spec in pod_specs().items():
        for container in spec["containers"]:
            resources = container["resources"]
            assert quantity_bytes(resources["limits"]["memory"]) >= quantity_bytes(resources["requests"]["memory"]), where
            assert "cpu" in resources["requests"], where


def test_worker_memory_limit_fits_its_pod():
    """Dask's --memory-limit is what makes a too-big report fail cleanly; it must sit below the
    container limit, or the kernel's OOM killer strikes first and takes the worker with it."""
    (w,) = pod_specs()["worker"]["containers"]
    dask_limit = parse_bytes(option(w["args"], "--memory-limit"))
    pod_limit = quantity_bytes(w["resources"]["limits"]["memory"])
    assert 0.5 * pod_limit <= dask_limit < pod_limit


def test_one_image_and_non_root_everywhere():
    images = {c["image"] for spec in pod_specs().values() for c in spec["containers"]}
    assert len(images) == 1, f"scheduler, workers and the sweep's client must run one image: {images}"
    for where, spec in pod_specs().items():
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        assert spec["securityContext"]["runAsUser"] == 10001, where  # the Dockerfile's USER


def test_cronjob_runs_the_nightly_sweep_against_the_daskcluster():
    cron, cluster, config_map = one("CronJob"), one("DaskCluster"), one("ConfigMap")
    fields = cron["spec"]["schedule"].split()
    assert len(fields) == 5 and fields[2:] == ["*", "*", "*"], "every night"
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] in ("Never", "OnFailure")
    (c,) = pod["containers"]
    command = c["command"] + c.get("args", [])
    assert " ".join(command).startswith("gpu-idle sweep ")
    assert option(command, "--scheduler") == f"tcp://{cluster['metadata']['name']}-scheduler:8786"

    # --config names a key of the ConfigMap, mounted where the command looks for it.
    config_path = Path(option(command, "--config"))
    volumes = {v["name"]: v for v in pod["volumes"]}
    (mount,) = [m for m in c["volumeMounts"] if Path(m["mountPath"]) == config_path.parent]
    assert volumes[mount["name"]]["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_path.name in config_map["data"]

    # The state folder lives on the PersistentVolumeClaim, mounted in the same pod.
    nightly = yaml.safe_load(config_map["data"][config_path.name])
    state_dir = Path(nightly["sweep"]["state_dir"])
    state_mounts = [m for m in c["volumeMounts"] if "persistentVolumeClaim" in volumes[m["name"]]]
    assert any(state_dir.is_relative_to(m["mountPath"]) for m in state_mounts), state_dir
    claims = {volumes[m["name"]]["persistentVolumeClaim"]["claimName"] for m in state_mounts}
    assert claims == {one("PersistentVolumeClaim")["metadata"]["name"]}


def test_cronjob_command_options_exist_on_the_sweep_command():
    from pipeline.cli import main as cli

    sweep = cli.commands["sweep"]
    known = {opt for param in sweep.params for opt in getattr(param, "opts", [])}
    (c,) = one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    used = {arg for arg in c["command"][2:] if arg.startswith("--")}
    assert used <= known, f"options the sweep does not have: {used - known}"


def test_nightly_config_in_the_configmap_loads(tmp_path):
    from pipeline.config import load_config

    config_map = one("ConfigMap")
    (name, text), = config_map["data"].items()
    path = tmp_path / name
    path.write_text(text)
    cfg = load_config([path])
    assert cfg.sweep.inputs and all(str(i).startswith("s3://") for i in cfg.sweep.inputs)
    assert cfg.sweep.state_dir.startswith("/")
    assert cfg.cost.rates and cfg.labels


def test_s3_credentials_only_by_secret_reference():
    """No secret values in the repository: AWS_* variables come from the Secret gpu-idle-s3,
    which deploy/README.md tells how to create; no manifest defines a Secret."""
    assert all(d["kind"] != "Secret" for d in k8s_docs())
    for where, spec in pod_specs().items():
        if where == "scheduler":
            continue  # the scheduler never touches the data
        env = {e["name"]: e for c in spec["containers"] for e in c.get("env", [])}
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "gpu-idle-s3", "key": name}, (where, ref)
        for name, item in env.items():
            if name.startswith("AWS_"):
                assert "value" not in item and item["valueFrom"]["secretKeyRef"]["name"] == "gpu-idle-s3"
    text = "\n".join(p.read_text() for p in DEPLOY.rglob("*") if p.is_file() and p.suffix != ".pyc")
    assert not re.search(r"AKIA[0-9A-Z]{16}", text), "an AWS access key id is committed"


def test_environment_variables_are_ones_the_pipeline_reads():
    """A GPU_IDLE_* variable set by a manifest or the Dockerfile is read somewhere in pipeline/."""
    source = "\n".join(p.read_text() for p in (REPO / "pipeline").rglob("*.py"))
    deploy = "\n".join(p.read_text() for p in [*K8S.glob("*.yaml"), DEPLOY / "Dockerfile"])
    names = set(re.findall(r"\bGPU_IDLE_[A-Z_]+", deploy))
    assert names >= {"GPU_IDLE_CACHE", "GPU_IDLE_EXPORT_CACHE", "GPU_IDLE_STAGE_CACHE"}
    assert {n for n in names if n not in source} == set()


# ---------------------------------------------------------------- Slurm

@pytest.fixture(scope="module")
def launch():
    pytest.importorskip("dask_jobqueue", reason="pip install -e '.[test]' installs dask-jobqueue")
    return load_launch()


def test_launch_imports_and_reads_the_jobqueue_config(launch, tmp_path):
    options = launch.cluster_options(SLURM / "jobqueue.yaml")
    assert options["job_name"] == "gpu-idle-worker"
    assert "death_timeout" in options and "job_extra_directives" in options
    assert None not in options.values() and "name" not in options
    raw = yaml.safe_load((SLURM / "jobqueue.yaml").read_text())
    assert set(raw) == {"jobqueue"} and set(raw["jobqueue"]) == {"slurm"}
    bad = tmp_path / "other.yaml"
    bad.write_text("jobqueue:\n  pbs: {cores: 1}\n")
    with pytest.raises(ValueError, match="jobqueue: slurm"):
        launch.cluster_options(bad)


def test_jobqueue_config_builds_its_slurm_job_script(launch):
    """SLURMCluster(**config).job_script() offline: the scheduler starts in this process,
    no job is submitted, no Slurm installation is needed."""
    from dask_jobqueue import SLURMCluster

    options = launch.cluster_options(SLURM / "jobqueue.yaml")
    with SLURMCluster(**{**options, "scheduler_options": {"dashboard_address": ":0"}}) as cluster:
        script = cluster.job_script()
        address = cluster.scheduler_address
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    mem_gb = math.ceil(parse_bytes(options["memory"]) / 2**30)
    for expected in ("#SBATCH -J gpu-idle-worker", f"#SBATCH --cpus-per-task={options['cores']}",
                     f"#SBATCH --mem={mem_gb}G", f"#SBATCH -t {options['walltime']}",
                     "#SBATCH --output=logs/slurm/%x-%j.out"):
        assert expected in directives, f"{expected!r} not in {directives}"
    (command,) = [line for line in script.splitlines() if "dask_worker" in line or "dask worker" in line]
    assert "distributed.cli.dask_worker" in command and address in command
    args = shlex.split(command)
    processes = options["processes"]
    assert option(args, "--nworkers") == str(processes)
    assert option(args, "--nthreads") == str(options["cores"] // processes)
    per_worker = parse_bytes(option(args, "--memory-limit"))
    assert abs(per_worker - parse_bytes(options["memory"]) / processes) < 2**20
    assert option(args, "--lifetime") == "230m"
    assert "export OMP_NUM_THREADS=1" in script


def test_launch_print_job_script(launch, capsys):
    assert launch.main(["--print-job-script"]) == 0
    assert "#SBATCH --cpus-per-task=" in capsys.readouterr().out


def test_launch_requires_a_config(launch):
    with pytest.raises(SystemExit):
        launch.parse_args([])
    args, sweep_args = launch.parse_args(["--config", "c.yaml", "--jobs", "3", "--force", "r.sqlite"])
    assert (args.config, args.jobs, sweep_args) == ("c.yaml", 3, ["--force", "r.sqlite"])


class StandInCluster:
    """What launch.main uses of a SLURMCluster, backed by an in-process LocalCluster on TCP."""

    def __init__(self):
        from distributed import LocalCluster

        self.local = LocalCluster(n_workers=1, threads_per_worker=1, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=":0")
        self.scaled = []

    scheduler_address = property(lambda self: self.local.scheduler_address)
    dashboard_link = property(lambda self: self.local.dashboard_link)

    def scale(self, jobs):
        self.scaled.append(jobs)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.local.close()


def test_launch_runs_the_sweep_on_its_cluster(launch, tmp_path, monkeypatch, capsys):
    """launch.main: scale, wait for a worker, then the real `gpu-idle sweep` in-process
    against that cluster's address; the exit status is the sweep's."""
    from pipeline.synth import generate_training_report

    report = tmp_path / "in" / "night.sqlite"
    report.parent.mkdir()
    generate_training_report(str(report), gpus=1, iterations=4, seed=3)
    config = tmp_path / "nightly.yaml"
    state = tmp_path / "state"
    config.write_text(yaml.safe_dump({"sweep": {"inputs": [str(report.parent)], "state_dir": str(state)}}))
    stand_in = StandInCluster()
    monkeypatch.setattr(launch, "build_cluster", lambda path: stand_in)
    calls = []
    real_run_sweep = launch.run_sweep
    monkeypatch.setattr(launch, "run_sweep", lambda *a: calls.append(a) or real_run_sweep(*a))

    status = launch.main(["--config", str(config), "--jobs", "2", "--wait-timeout", "60", "--night", "2026-01-02"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert stand_in.scaled == [2]
    assert calls == [(str(config), stand_in.scheduler_address, ["--night", "2026-01-02"])]
    fleet = pd.read_csv(state / "nights" / "2026-01-02" / "fleet.csv", keep_default_na=False)
    assert set(fleet["status"]) == {"ok"} and fleet["report"].str.endswith("night.sqlite").all(), out


def test_sbatch_script(launch):
    path = SLURM / "nightly.sbatch"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives and all(lines.index(d) < first_command for d in directives), "#SBATCH after a command is ignored"
    assert any(d.startswith("#SBATCH --time=") for d in directives)
    assert "deploy/slurm/launch.py" in text and "deploy/slurm/jobqueue.yaml" in text and '"$@"' in text
    assert re.search(r"^#\s+0 2 \* \* \* .*nightly\.sbatch", text, re.M), "the nightly scrontab/cron line"
    subprocess.run(["bash", "-n", str(path)], check=True)


# ---------------------------------------------------------------- Dockerfile

def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for raw in (DEPLOY / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, rest = line.partition(" ")
        out.append((keyword.upper(), rest.strip()))
    assert not pending, "Dockerfile ends in a continuation"
    return out


def test_dockerfile():
    steps = dockerfile_instructions()
    keywords = [k for k, _ in steps]
    assert set(keywords) <= {"ARG", "FROM", "ENV", "WORKDIR", "COPY", "RUN", "USER", "EXPOSE", "ENTRYPOINT",
                             "CMD", "LABEL"}
    assert keywords[: keywords.index("FROM")] == ["ARG"] * keywords.index("FROM"), "only ARG before FROM"
    (base,) = [a for k, a in steps if k == "FROM"]
    assert re.fullmatch(r"python:\$\{PYTHON_VERSION\}-slim(-\w+)?", base), base

    # Every COPY source exists in the build context (the repository root) and is not ignored.
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().split()
    for _, args in (s for s in steps if s[0] == "COPY"):
        *sources, _dest = args.split()
        for src in sources:
            assert (REPO / src).exists(), f"COPY {src}: not in the repository"
            assert f"!{src.rstrip('/')}" in [i.rstrip("/") for i in ignore], f"{src} excluded by the .dockerignore"

    runs = " ".join(a for k, a in steps if k == "RUN")
    assert "pip install ." in runs
    assert "scripts/install_nsys.sh" in runs and (REPO / "scripts" / "install_nsys.sh").exists()
    assert '"$INSTALL_NSYS" = "1"' in runs, "nsys stays optional"

    users = [i for i, (k, _) in enumerate(steps) if k == "USER"]
    assert users, "no USER: the image would run as root"
    user = steps[users[-1]][1]
    assert user.split(":")[0] not in ("root", "0") and user.split(":")[0] == "10001"
    assert all(k != "RUN" for k, _ in steps[users[-1]:]), "RUN after USER would need root"

    assert keywords[-2:] == ["ENTRYPOINT", "CMD"] or keywords[-1] == "ENTRYPOINT"
    (entrypoint,) = [a for k, a in steps if k == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["dask", "worker"], "exec form, so signals reach the worker"
    cmd = [a for k, a in steps if k == "CMD"]
    assert all(isinstance(json.loads(c), list) for c in cmd)


# ---------------------------------------------------------------- docs

def test_docs_name_only_files_that_exist():
    readme = (REPO / "README.md").read_text()
    assert "## From one laptop to a cluster in three steps" in readme
    docs = readme + (DEPLOY / "README.md").read_text()
    for ref in set(re.findall(r"\bdeploy/[\w./-]+\w", docs)):
        assert (REPO / ref).exists(), f"docs name {ref}, which does not exist"
