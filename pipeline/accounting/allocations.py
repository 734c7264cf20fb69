"""The scheduler's allocations, read from the files ``accounting.files`` names (docs/operations.md#feeding-the-accounting).

A file is told apart by its content: a mapping with a ``jobs`` list is ``sacct --json`` output (Slurm), one
with an ``items`` list (``kubectl get pods -o json``) or one ``Pod`` is Kubernetes'. Each allocation that
held at least one GPU is an :class:`Allocation`; a job that never started (``time.start`` 0) or holds no GPU
is not one. A file that cannot be used (unreadable, not JSON, of neither shape) and an entry that cannot be
read give a problem naming the file and the cause; the other files and entries are read all the same.

Slurm (``sacct --json``, every version since 21.08): ``jobs[]`` with ``job_id``, ``user``, ``account`` (or
``association.account``), ``partition``, ``nodes`` (a host list, ``gpu[01-02]``), ``time.start`` and
``time.end`` (Unix seconds; 0: not started / still running; a ``{"set", "number"}`` object in newer
versions) and ``tres.allocated[]`` (``type`` ``gres``, ``name`` ``gpu`` or ``gpu:<type>``, ``count``).
Kubernetes: ``items[]`` pods with ``metadata.name``, ``namespace``, ``labels``, ``spec.nodeName``,
``spec.containers[].resources.limits["nvidia.com/gpu"]`` (else ``requests``), ``status.startTime`` and the
containers' ``state.terminated.finishedAt`` (RFC 3339).
"""
from __future__ import annotations

import json
import re
from typing import NamedTuple

from ..config import rfc3339_ns as _epoch_ns

SLURM, KUBERNETES = "slurm", "kubernetes"
#: The pod resource that counts GPUs, and the node-selector label naming their product.
POD_GPU = "nvidia.com/gpu"
POD_GPU_PRODUCT = "nvidia.com/gpu.product"
NS_PER_S = 1_000_000_000


class Allocation(NamedTuple):
    """One scheduler job or pod that held GPUs. ``job_id``: Slurm's job id, or ``namespace/name``; ``account``:
    the Slurm account, or the pod's team label; ``partition``: the partition, or the namespace; times in
    Unix-epoch ns (``end_ns`` None: still running when the file was written); ``gpu_type``: what the
    scheduler calls the GPUs (``a100`` of ``gres/gpu:a100``, a pod's ``nvidia.com/gpu.product``), '' if nothing."""

    source: str
    file: str
    job_id: str
    user: str
    account: str
    partition: str
    nodes: tuple
    start_ns: int
    end_ns: int | None
    gpus: int
    gpu_type: str = ""


def expand_hosts(text: str) -> tuple:
    """A Slurm host list as names: ``gpu[01-03,07],cpu1`` -> ``gpu01 gpu02 gpu03 gpu07 cpu1`` (zero padding
    kept); ``None assigned`` and '' -> none."""
    text = (text or "").strip()
    if not text or text.lower().startswith("none"):
        return ()
    out = []
    for prefix, ranges, plain in re.findall(r"([^,\[\]]+)\[([^\]]*)\]|([^,\[\]]+)", text):
        if plain:
            out.append(plain.strip())
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if hi and lo.isdigit() and hi.isdigit():
                out += [f"{prefix}{i:0{len(lo)}d}" for i in range(int(lo), int(hi) + 1)]
            else:
                out.append(prefix + lo)
    return tuple(out)


def _number(value) -> int | None:
    """An integer of sacct's JSON: a plain number, or ``{"set": bool, "number": n}`` (None when not set)."""
    if isinstance(value, dict):
        return _number(value.get("number")) if value.get("set", True) and not value.get("infinite") else None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return int(value)
    except ValueError:
        return None


def _slurm_gpus(tres: list) -> tuple[int, str]:
    """GPUs allocated and their type from ``tres.allocated``: the untyped ``gres/gpu`` count, else the sum of
    the typed ones (``gres/gpu:a100``)."""
    plain, typed, kinds = None, 0, []
    for entry in tres or []:
        if not isinstance(entry, dict) or entry.get("type") != "gres":
            continue
        name, count = str(entry.get("name") or ""), _number(entry.get("count")) or 0
        if name == "gpu":
            plain = count
        elif name.startswith("gpu:"):
            typed += count
            kinds.append(name[4:])
    return (typed if plain is None else plain), ",".join(sorted(set(kinds)))


def _slurm_job(job: dict, path: str) -> Allocation | None:
    time = job.get("time") or {}
    start = _number(time.get("start"))
    if not start:
        return None
    end = _number(time.get("end"))
    gpus, kind = _slurm_gpus((job.get("tres") or {}).get("allocated"))
    if gpus <= 0:
        return None
    association = job.get("association") or {}
    return Allocation(SLURM, path, str(job["job_id"]), str(job.get("user") or association.get("user") or ""),
                      str(job.get("account") or association.get("account") or ""), str(job.get("partition") or ""),
                      expand_hosts(str(job.get("nodes") or "")), start * NS_PER_S,
                      end * NS_PER_S if end and end >= start else None, gpus, kind)


def _pod(pod: dict, path: str, team_label: str, user_label: str) -> Allocation | None:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    gpus = 0
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(POD_GPU, (resources.get("requests") or {}).get(POD_GPU, 0))
        gpus += _number(value) or 0
    start = _epoch_ns(status.get("startTime"))
    if gpus <= 0 or start is None:
        return None
    ends = [_epoch_ns(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
            for c in status.get("containerStatuses") or []]
    ended = status.get("phase") in ("Succeeded", "Failed") and ends and None not in ends
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "default")
    return Allocation(KUBERNETES, path, f"{namespace}/{meta['name']}", str(labels.get(user_label, "")),
                      str(labels.get(team_label, "")), namespace,
                      (str(spec["nodeName"]),) if spec.get("nodeName") else (), start,
                      max(ends) if ended else None, gpus, str((spec.get("nodeSelector") or {}).get(POD_GPU_PRODUCT, "")))


def read_file(path: str, team_label: str = "team", user_label: str = "user") -> tuple[list, list]:
    """``(allocations, problems)`` of one accounting file (module doc); each problem a text naming ``path``."""
    try:
        with open(path, "rb") as handle:
            data = json.loads(handle.read())
    except OSError as exc:
        return [], [f"{path}: cannot read ({exc.strerror or exc}): no allocation read from it"]
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return [], [f"{path}: not JSON ({exc}): no allocation read from it"]
    if isinstance(data, dict) and isinstance(data.get("jobs"), list):
        entries, read, what = data["jobs"], lambda e: _slurm_job(e, path), "sacct job"
    elif isinstance(data, dict) and (isinstance(data.get("items"), list) or data.get("kind") == "Pod"):
        entries = data["items"] if isinstance(data.get("items"), list) else [data]
        read, what = (lambda e: _pod(e, path, team_label, user_label)), "pod"
    else:
        return [], [f"{path}: neither `sacct --json` output (a `jobs` list) nor `kubectl get pods -o json` output "
                    "(an `items` list): no allocation read from it"]
    allocations, problems = [], []
    for i, entry in enumerate(entries):
        try:
            allocation = read(entry) if isinstance(entry, dict) else None
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            allocation = None
            problems.append(f"{path}: {what} {i} cannot be read ({type(exc).__name__}: {exc}): left out")
        if allocation is not None:
            allocations.append(allocation)
    return allocations, problems


def read_files(paths, team_label: str = "team", user_label: str = "user") -> tuple[list, list]:
    """Every file's :func:`read_file`, in order: ``(allocations, problems)``. A job listed by two files (the
    same source and id) is kept once (the first file's), the second named as a problem."""
    allocations, problems, seen = [], [], {}
    for path in paths:
        found, trouble = read_file(str(path), team_label, user_label)
        problems += trouble
        for a in found:
            key = (a.source, a.job_id)
            if key in seen:
                problems.append(f"{path}: job {a.job_id} is listed by {seen[key]} too: the first is kept")
                continue
            seen[key] = path
            allocations.append(a)
    return allocations, problems
