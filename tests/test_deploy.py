"""deploy/: what can be checked without Kubernetes, Slurm or Docker.

Every YAML parses and holds the kinds and fields the deployment relies on; the
Kubernetes pieces agree with each other (one image, the scheduler Service the
CronJob talks to, the mounted config, memory limits) and with the sweep's command
line; the dask-jobqueue config builds its Slurm job script (offline: the
scheduler starts in-process, nothing is submitted); the Dockerfile is coherent
line by line. tests/test_slurm.py runs deploy/slurm on a real Slurm.
"""
from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

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


# ---------------------------------------------------------------- published schemas

#: The Kubernetes versions the manifests must be valid for: the oldest deploy/README.md names
#: (1.27+, for the CronJob's timeZone) and the newest kubernetes-validate knows.
K8S_MINIMUM = "1.27.0"
#: Where `make k8s-schemas` puts dask-kubernetes' wheel (pip download --no-deps: only its CRD
#: files are read, the package is not installed); GPU_IDLE_DASK_KUBERNETES_WHEEL names another.
WHEELS = REPO / "tools" / "wheels"
CRD_IN_WHEEL = "dask_kubernetes/operator/deployment/helm/dask-kubernetes-operator/crds/daskcluster.yaml"


def k8s_versions() -> list[str]:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    return sorted({K8S_MINIMUM, kubernetes_validate.latest_version()})


def core_objects() -> list[dict]:
    return [d for d in k8s_docs() if d["kind"] != "DaskCluster"]


def validate_core(doc: dict, version: str) -> None:
    """kubernetes-validate in strict mode (an unknown field is an error, as with
    `kubectl apply --validate=strict`); raises its ValidationError."""
    import kubernetes_validate

    kubernetes_validate.validate(doc, version, strict=True)


def strict(schema):
    """The CRD's OpenAPI schema with ``additionalProperties: false`` on every object that lists its
    properties and does not keep unknown fields: what the API server's strict field validation does
    (by default it would silently prune an unknown field, so a misspelt one would vanish)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if "properties" in out and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def daskcluster_crd() -> dict:
    """The DaskCluster CustomResourceDefinition that the Dask operator ships (in dask-kubernetes'
    wheel, its Helm chart's crds/ folder)."""
    import os
    import zipfile

    named = os.environ.get("GPU_IDLE_DASK_KUBERNETES_WHEEL")
    wheels = [Path(named)] if named else sorted(WHEELS.glob("dask_kubernetes-*.whl"))
    if not wheels:
        message = f"no dask-kubernetes wheel in {WHEELS}: `make k8s-schemas` downloads it"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    with zipfile.ZipFile(wheels[-1]) as wheel:
        crd = yaml.safe_load(wheel.read(CRD_IN_WHEEL))
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == "DaskCluster"
    return crd


def validate_daskcluster(doc: dict, crd: dict) -> None:
    """A DaskCluster against the CRD: apiVersion group/version served by it, and the object against
    that version's openAPIV3Schema made :func:`strict`; raises jsonschema's ValidationError."""
    import jsonschema

    group, _, version = doc["apiVersion"].partition("/")
    assert group == crd["spec"]["group"] and doc["kind"] == crd["spec"]["names"]["kind"]
    (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    schema = strict(served["schema"]["openAPIV3Schema"])
    schema["properties"] = {**schema["properties"], "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                            "metadata": {"type": "object"}}
    jsonschema.Draft7Validator(schema).validate(doc)


@pytest.mark.parametrize("version", k8s_versions() if importlib.util.find_spec("kubernetes_validate") else [K8S_MINIMUM])
def test_core_objects_valid_for_kubernetes(version):
    """ConfigMap, PersistentVolumeClaim and CronJob against Kubernetes' own schemas."""
    kinds = sorted(d["kind"] for d in core_objects())
    assert kinds == ["ConfigMap", "CronJob", "PersistentVolumeClaim"]
    for doc in core_objects():
        validate_core(doc, version)


def test_daskcluster_valid_for_the_operator_crd(daskcluster_crd):
    validate_daskcluster(one("DaskCluster"), daskcluster_crd)


@pytest.mark.parametrize("where, mutate", [
    ("CronJob", lambda d: d["spec"].update(concurencyPolicy=d["spec"].pop("concurrencyPolicy"))),  # misspelt key
    ("CronJob", lambda d: d["spec"]["jobTemplate"]["spec"].update(backoffLimit="two")),            # wrong type
    ("PersistentVolumeClaim", lambda d: d["spec"].update(accessMode=d["spec"].pop("accessModes"))),
    ("ConfigMap", lambda d: d.update(datas=d.pop("data"))),
])
def test_a_wrong_field_fails_kubernetes_validation(where, mutate):
    import copy

    import kubernetes_validate

    doc = copy.deepcopy(one(where))
    validate_core(doc, K8S_MINIMUM)
    mutate(doc)
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(doc, K8S_MINIMUM)


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"]["worker"].update(replica=d["spec"]["worker"].pop("replicas")),       # misspelt key
    lambda d: d["spec"]["worker"].update(replicas="4"),                                        # wrong type
    lambda d: d["spec"]["worker"]["spec"]["containers"][0].update(imagePullPolicyy="Always"),  # in the pod spec
    lambda d: d["spec"]["scheduler"]["service"]["ports"][0].update(port="8786"),
    lambda d: d["spec"]["scheduler"].pop("spec"),                                              # required
])
def test_a_wrong_field_fails_the_daskcluster_crd(daskcluster_crd, mutate):
    import copy

    import jsonschema

    doc = copy.deepcopy(one("DaskCluster"))
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate_daskcluster(doc, daskcluster_crd)


# ---------------------------------------------------------------- Slurm (offline; tests/test_slurm.py runs it on a real Slurm)

@pytest.fixture(scope="module")
def jobqueue_options():
    pytest.importorskip("dask_jobqueue", reason="pip install -e '.[test]' installs dask-jobqueue")
    from pipeline.config import load_config
    from pipeline.engine.slurm import cluster_options

    cfg = load_config([SLURM / "slurm.yaml"])
    assert cfg.dask.slurm.jobqueue == "deploy/slurm/jobqueue.yaml"
    return cluster_options(cfg.dask.slurm.__class__(jobqueue=str(REPO / cfg.dask.slurm.jobqueue)))


def test_product_reads_the_jobqueue_config(jobqueue_options, tmp_path):
    from pipeline.config import SlurmConfig
    from pipeline.engine.cluster import EngineError
    from pipeline.engine.slurm import cluster_options

    options = jobqueue_options
    assert options["job_name"] == "gpu-idle-worker"
    assert "death_timeout" in options and "job_extra_directives" in options
    assert None not in options.values() and "name" not in options
    raw = yaml.safe_load((SLURM / "jobqueue.yaml").read_text())
    assert set(raw) == {"jobqueue"} and set(raw["jobqueue"]) == {"slurm"}
    bad = tmp_path / "other.yaml"
    bad.write_text("jobqueue:\n  pbs: {cores: 1}\n")
    with pytest.raises(EngineError, match="jobqueue: slurm"):
        cluster_options(SlurmConfig(jobqueue=str(bad)))
    # dask.slurm.options win over the file's
    over = cluster_options(SlurmConfig(jobqueue=str(SLURM / "jobqueue.yaml"), options={"cores": 2, "queue": "gpu"}))
    assert (over["cores"], over["queue"], over["processes"]) == (2, "gpu", options["processes"])


def test_jobqueue_config_builds_its_slurm_job_script(jobqueue_options):
    """SLURMCluster(**config).job_script() offline: the scheduler starts in this process,
    no job is submitted, no Slurm installation is needed."""
    from dask_jobqueue import SLURMCluster

    options = jobqueue_options
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


def test_slurm_job_command_prints_the_worker_job_script(jobqueue_options):
    """`gpu-idle slurm-job --config deploy/slurm/slurm.yaml` (from the checkout, as the docs say)."""
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "slurm-job", "--config", "deploy/slurm/slurm.yaml"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "#SBATCH -J gpu-idle-worker" in proc.stdout and "#SBATCH --cpus-per-task=4" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "slurm-job"], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "no dask.slurm section in the config" in proc.stderr


def test_sbatch_script():
    path = SLURM / "nightly.sbatch"
    text = path.read_text()
    lines = text.splitlines()
    assert lines[0] == "#!/usr/bin/env bash"
    first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    directives = [line for line in lines if line.startswith("#SBATCH")]
    assert directives and all(lines.index(d) < first_command for d in directives), "#SBATCH after a command is ignored"
    assert any(d.startswith("#SBATCH --time=") for d in directives)
    assert "-m pipeline.cli sweep" in text and "deploy/slurm/slurm.yaml" in text and '"$@"' in text
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
    # the loader's C reader is built (gcc for the install only) and checked outside the source tree
    assert "setup.py" in " ".join(a for k, a in steps if k == "COPY") and "btree.available()" in runs
    assert runs.index("install -y --no-install-recommends gcc") < runs.index("pip install .") \
        < runs.index("cd / && python -c") < runs.index("apt-get purge -y gcc")
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
    readme = (REPO / "README.md").read_text() + (REPO / "docs" / "operations.md").read_text()
    assert "## From one laptop to a cluster in three steps" in readme
    docs = readme + (DEPLOY / "README.md").read_text()
    for ref in set(re.findall(r"\bdeploy/[\w./-]+\w", docs)):
        assert (REPO / ref).exists(), f"docs name {ref}, which does not exist"
