"""Two sides' jobs and GPUs paired (docs/definitions.md#compare-pairing): by rank, else CUDA device ordinal, else
process order; each GPU's name (the one its run gives it) and what a pair shares (its seat)."""
from __future__ import annotations

from ..analysis.names import job_gpu_names
from .comparison import SAME_WORKER_BASIS, SIDES
from .sides import job_of


def _order_key(row: dict) -> tuple:
    """Process order: the report, then the first process driving the GPU, then its key."""
    pid = row.get("pid")
    return (str(row["report"]), int(pid) if pid is not None else -1, str(row["gpu_key"]))


def _seats(before: list, after: list, col: str) -> bool:
    """Whether ``col`` pairs two sides' GPUs of a job: set on every GPU, no two of a side share it, and the
    values of the side with fewer GPUs are all among the other side's."""
    vals = [[str(r.get(col) or "") for r in rows] for rows in (before, after)]
    if not all(all(v) and len(set(v)) == len(v) for v in vals):
        return False
    small, large = sorted((set(v) for v in vals), key=len)
    return small <= large


def pair_gpus(before: list, after: list) -> dict:
    """Pair the analysed GPUs of two sides (docs/definitions.md#compare-pairing).

    Jobs (:data:`~pipeline.schema.JOB_KEY`) pair by name; when each side holds exactly one job they pair
    whatever their names. Inside a job pair, GPUs pair by ``rank`` when every GPU of the job on both sides
    has one, no two of a side share it and the smaller side's ranks are all among the other's; else by
    ``device_ids`` (the CUDA device ordinal) under the same condition; else in process order (:func:`_order_key`), first with first. Returns ``{"jobs": [{"before": key,
    "after": key, "basis": text, "pairs": [(row_b, row_a)], "unpaired": [(side, row)]}], "unpaired_jobs":
    [(side, key, rows)]}``.
    """
    jobs = [{}, {}]
    for rows, by in zip((before, after), jobs):
        for r in rows:
            by.setdefault(job_of(r), []).append(r)
    if len(jobs[0]) == 1 and len(jobs[1]) == 1:
        links = [(next(iter(jobs[0])), next(iter(jobs[1])))]
    else:
        links = [(k, k) for k in sorted(set(jobs[0]) & set(jobs[1]), key=lambda k: (k[1], k[0]))]
    out = {"jobs": [], "unpaired_jobs": []}
    for kb, ka in links:
        rb, ra = sorted(jobs[0][kb], key=_order_key), sorted(jobs[1][ka], key=_order_key)
        for basis, col in (("rank", "rank"), ("device ordinal", "device_ids")):
            if _seats(rb, ra, col):
                by_a = {str(r[col]): r for r in ra}
                pairs = [(r, by_a[str(r[col])]) for r in rb if str(r[col]) in by_a]
                seats = {str(r[col]) for r in rb} & set(by_a)
                unpaired = [("before", r) for r in rb if str(r[col]) not in seats] + \
                           [("after", r) for r in ra if str(r[col]) not in seats]
                break
        else:
            basis = "process order"
            pairs = list(zip(rb, ra))
            unpaired = [("before", r) for r in rb[len(pairs):]] + [("after", r) for r in ra[len(pairs):]]
        out["jobs"].append({"before": kb, "after": ka, "basis": basis, "pairs": pairs, "unpaired": unpaired})
    linked = [{kb for kb, _ in links}, {ka for _, ka in links}]
    for label, by, done in zip(SIDES, jobs, linked):
        for key in sorted(set(by) - done, key=lambda k: (k[1], k[0])):
            out["unpaired_jobs"].append((label, key, sorted(by[key], key=_order_key)))
    return out


def side_names(pairs: list, unpaired: list) -> tuple[dict, dict]:
    """Each side's ``(report, gpu_key) -> name`` for one job pair: the name every view of that side's run gives the
    GPU (:func:`~pipeline.report.medical.job_gpu_names`: numbered within the job by report, then GPU key), so a GPU
    reads the same in the comparison, its run's table, report, GPU page and records; what a pair shares is shown
    beside it (its seat: rank, device or pid; docs/definitions.md#compare-pairing)."""
    out = ({}, {})
    for i, side in enumerate(SIDES):
        rows = [p[i] for p in pairs] + [r for s, r in unpaired if s == side]
        out[i].update(job_gpu_names(rows))
    return out


#: The value each pairing basis pairs by, as it is shown beside a GPU (docs/definitions.md#compare-pairing).
BASIS_COLUMN = {"rank": "rank", "device ordinal": "device_ids", "process order": "pid"}


def seat(row: dict, basis: str) -> str:
    """What ``row``'s GPU was paired by: ``rank 3``, ``device 1``, ``pid 144``."""
    col = BASIS_COLUMN[basis]
    v = row.get(col)
    return f"{'device' if col == 'device_ids' else col} {v if v is not None else '-'}"


def pairing_warning(basis: str, pairs: list, unpaired: list) -> str:
    """The warning of a job pair whose GPUs no rank paired (docs/definitions.md#compare-pairing; ``pairs`` and
    ``unpaired`` as :func:`pair_gpus` gives them): ``""`` for ``rank``, when no GPU paired, and when each side holds
    one GPU that does not name a rank (the one pair is the whole job: nothing to mix up); else, for ``device
    ordinal`` and ``process order``, what they were paired by instead, and that a pair is then not known to be the
    same worker (label the ranks to pair by them). One GPU a side whose ranks differ (rank 0 -> rank 1) is warned."""
    alone = len(pairs) == 1 and not unpaired and not all(str(r.get("rank") or "") for r in pairs[0])
    if basis == SAME_WORKER_BASIS or not pairs or alone:
        return ""
    how = ("by CUDA device ordinal" if basis == "device ordinal"
           else "in process order (report, then first process id, then GPU key)")
    return (f"no rank pairs these GPUs, so they were paired {how}: each pair is not known to be the same worker; "
            "check the pairing, or give each GPU its rank (rank in a labels rule) to pair by rank")
