"""One job across its files: per-rank PyTorch profiler traces grouped by what they say themselves
(docs/definitions.md#job-grouping).

A report no ``labels:`` rule gives a job is a job of its own (named after its file, :func:`file_job`: its stem
without the rank it names, ``a100_ws2_nccl_rank0`` -> ``a100_ws2_nccl``, as a job grouped from several ranks is
named; the whole stem where another file's job would then read the same) unless it is a
PyTorch profiler trace whose ``distributedInfo`` names a world size above 1 (the row's
``dist_world_size``, ``dist_backend`` and ``rank``): such traces of one cluster with the same world
size and backend whose captures overlap in time (each report's capture: its GPUs' first kernel start
to last kernel end, on its own clock; overlapping chains join) and whose ranks are all distinct are
one job, ``job_grouped_by`` ``distributedInfo``. A set with a rank twice (two runs of one job), or of
one trace, is not grouped. Nsight Systems exports of one cluster whose capture environment names the
same Slurm job (the row's ``scheduler_job``, ``SLURM_JOB_ID=<id>``) are one job, ``slurm-<id>``,
``job_grouped_by`` ``SLURM_JOB_ID`` (one export alone keeps its file's job). A ``labels:`` rule naming
the job always wins (``labels``); every other row says ``file``.
"""
from __future__ import annotations

import os
import re

from .. import kinds
from ..schema import NOT_ANALYSED

LABELS, DISTRIBUTED, SLURM, FILE = "labels", "distributedInfo", "SLURM_JOB_ID", "file"
#: A rank in a file's stem: ``rank`` and its number (``rank0``, ``rank_1``, ``rank-2``, ``Rank3``), at the start or
#: after a separator (``ranking3`` or ``frank0`` name none).
_RANK = re.compile(r"(?:^|[_\-. ])rank[_\-. ]?\d+", re.IGNORECASE)
#: A short rank suffix: ``-r2`` (``_r2``, ``.r2``) at the stem's end, a rank only where the file's rank is that number.
_R_SUFFIX = re.compile(r"[_\-.]r(\d+)$", re.IGNORECASE)


def rank_head(stem: str, rank=None) -> str:
    """The part of a file's ``stem`` before the rank it names, the one rule every job name follows: before a
    ``rank<N>`` (:data:`_RANK`: ``dlrm_rank3`` -> ``dlrm``, ``train_rank_1`` -> ``train``, ``rank-0.Apr_03`` ->
    ``""``), else before a trailing ``-r<N>`` (``_r<N>``, ``.r<N>``) when ``N`` is the file's own ``rank`` (its
    trace's or its label's: ``train-r2`` of rank 2 -> ``train``; of no rank or another, ``resnet-r50`` stays whole);
    ``""`` when it names no rank."""
    m = _RANK.search(stem)
    if m:
        return stem[:m.start()].rstrip("_-. ")
    m, own = _R_SUFFIX.search(stem), _whole(rank)
    return stem[:m.start()] if m and own is not None and int(m.group(1)) == own else ""


def _stem(report: str) -> str:
    """The file name of ``report`` (a path or URL) without its input kind's suffix (:func:`pipeline.kinds.stem`)."""
    return kinds.stem(os.path.basename(str(report).rstrip("/")))


def file_job(report: str, rank=None) -> str:
    """The job of a file that is a job of its own: its stem (:func:`_stem`) without the rank it names
    (:func:`rank_head`; ``rank``: the file's own), else the whole stem (no rank named, or nothing before it)."""
    stem = _stem(report)
    return rank_head(stem, rank) or stem


def _whole(value) -> int | None:
    try:
        return None if value is None or value != value else int(value)
    except (TypeError, ValueError):
        return None


def _evidence(rows: list[dict]) -> tuple | None:
    """``(world size, backend, rank, start, end)`` of one report from its analysed rows, or None when
    they say no world size above 1, or no rank, or no capture, or disagree among themselves."""
    seen = set()
    start = end = None
    for r in rows:
        first, length = _whole(r.get("first_kernel_ns")), _whole(r.get("capture_ns"))
        size = _whole(r.get("dist_world_size"))
        if size is None or first is None or length is None:
            continue
        seen.add((size, str(r.get("dist_backend") or ""), str(r.get("rank") or "")))
        start = first if start is None else min(start, first)
        end = first + length if end is None else max(end, first + length)
    if len(seen) != 1:
        return None
    size, backend, rank = seen.pop()
    return (size, backend, rank, start, end) if size > 1 and rank else None


def _overlapping(spans: list[tuple]) -> list[list]:
    """``(start, end, report)`` spans in chains of overlapping ones (each overlaps the chain so far)."""
    chains, reach = [], None
    for start, end, report in sorted(spans):
        if chains and start < reach:
            chains[-1].append(report)
            reach = max(reach, end)
        else:
            chains.append([report])
            reach = end
    return chains


def group_name(reports: list[str], ranks: dict | None = None) -> str:
    """The grouped job's name: the file names' common stem before their rank (:func:`rank_head`, ``ranks``: report ->
    its rank; ``dlrm_rank3.pt.trace.json`` -> ``dlrm``), else their folder's name when they share one, else the
    first file's stem and how many more."""
    stems = sorted(_stem(p) for p in reports)
    heads = {rank_head(_stem(p), (ranks or {}).get(p)) for p in reports}
    if len(heads) == 1 and (head := heads.pop()):
        return head
    folders = {os.path.basename(os.path.dirname(p.rstrip("/"))) for p in reports}
    if len(folders) == 1 and (folder := folders.pop()):
        return folder
    return f"{stems[0]}+{len(stems) - 1}"


def group_jobs(rows: list[dict], cfg) -> list[dict]:
    """Set every row's ``job_grouped_by`` and, for per-rank traces of one job, its ``job``
    (the module doc), in place; returns ``rows``. Deterministic and idempotent (the evidence, not the
    current job name, decides)."""
    by_report: dict[str, list[dict]] = {}
    for r in rows:
        by_report.setdefault(str(r.get("report") or ""), []).append(r)
    labelled = {p for p in by_report if cfg.job_labelled(p)}
    candidates: dict[tuple, list] = {}
    for report, its in by_report.items():
        ok = [r for r in its if r.get("status") not in NOT_ANALYSED]
        ev = _evidence(ok) if report not in labelled and ok else None
        if ev is not None:
            candidates.setdefault((str(its[0].get("cluster") or ""), ev[0], ev[1]), []).append((ev[3], ev[4], report, ev[2]))
    ranks = {c[2]: c[3] for group in candidates.values() for c in group}
    grouped: dict[str, str] = {}
    for (cluster, _size, _backend), spans in sorted(candidates.items()):
        for chain in _overlapping([s[:3] for s in spans]):
            if len(chain) < 2 or len({ranks[p] for p in chain}) != len(chain):
                continue
            name = group_name(chain, ranks)
            taken = {str(r.get("job")) for p, its in by_report.items() if p not in chain and p not in grouped
                     for r in its if str(its[0].get("cluster") or "") == cluster}
            if name in taken or name in {grouped[p] for p in grouped}:
                name = f"{name} ({len(chain)} ranks)"
            grouped.update({p: name for p in chain})
    slurm = _slurm_jobs(by_report, labelled | set(grouped))
    own = _file_jobs(by_report, labelled | set(grouped) | set(slurm))
    for report, its in by_report.items():
        how = (LABELS if report in labelled else DISTRIBUTED if report in grouped else SLURM if report in slurm
               else FILE)
        for r in its:
            r["job_grouped_by"] = how
            if how in (DISTRIBUTED, SLURM):
                r["job"] = grouped.get(report) or slurm[report]
            elif how == FILE:
                r["job"] = own[report]
    return rows


def _file_jobs(by_report: dict, decided: set) -> dict[str, str]:
    """``report -> job`` of the reports not in ``decided`` (each a job of its own): :func:`file_job`, unless that
    name is another such report's of the same cluster too, or a job the others of that cluster have: then the
    file's whole stem (two files not judged one job never read as one)."""
    def cluster(its) -> str:
        return str(its[0].get("cluster") or "")

    mine = {p: (cluster(its), file_job(p, its[0].get("rank"))) for p, its in by_report.items() if p not in decided}
    taken = {(cluster(its), str(r.get("job"))) for p, its in by_report.items() if p in decided for r in its}
    count: dict = {}
    for key in mine.values():
        count[key] = count.get(key, 0) + 1
    return {p: name if count[(c, name)] == 1 and (c, name) not in taken else _stem(p) for p, (c, name) in mine.items()}


def _slurm_jobs(by_report: dict, decided: set) -> dict[str, str]:
    """``report -> slurm-<id>`` for the reports not in ``decided`` whose rows name one Slurm job
    (``scheduler_job``) that another such report of the same cluster names too."""
    sets: dict[tuple, list] = {}
    for report, its in by_report.items():
        jobs = {str(r.get("scheduler_job") or "") for r in its} - {"", "None", "nan"}
        if report not in decided and len(jobs) == 1:
            sets.setdefault((str(its[0].get("cluster") or ""), jobs.pop()), []).append(report)
    return {p: f"slurm-{job.partition('=')[2]}" for (_, job), reports in sets.items() if len(reports) > 1
            for p in reports}
