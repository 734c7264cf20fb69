"""The wait inside collectives across the files of one job on one host
(docs/definitions.md#collective-wait-across-files).

Within one report the GPUs share a clock, so their collective calls are matched there
(:mod:`pipeline.analysis.collwait`). A GPU whose peers are in other files (one trace per rank, one export per
process) abstains there (``ranks in separate reports``) and keeps its calls in a compact form
(:func:`pipeline.analysis.collwait.calls_json`, with its rosters: stored with its result). Once the files are
grouped into jobs (:mod:`pipeline.fleet.grouping`), :func:`match_across_files` takes each job with such a GPU:

* the files whose GPUs ran a collective must name one host (the rows' ``host``, :mod:`pipeline.load.host`:
  one host, one clock), or, where a file names none, carry one ``node`` label (a ``labels:`` rule) with their rows
  on a host's clock (:func:`one_clock`), and their captures must overlap in time (one run); the evidence is named
  in the note (``host_source``, or the node their labels give);
* every GPU of the job that ran a collective is then matched with the others exactly as within one report
  (:func:`pipeline.analysis.collwait.match`: the k-th call of a family on the same collective stream) and its
  ``collective_*`` columns recomputed (:func:`pipeline.analysis.collwait.gpu_columns`, inside its own window,
  at its own rate), ``collective_match_basis`` :data:`ACROSS_FILES`;
* otherwise the GPUs that abstained keep abstaining, with the reason in words: the files are on different hosts
  (or labelled nodes), a file names no host and no label names its node (or its rows are not on its host's
  clock), the captures do not overlap, fewer ranks than
  the captures name, a GPU's calls were not kept, or the calls disagree.
"""
from __future__ import annotations

import os

from ..analysis import collwait
from ..analysis.cost import share_usd
from ..io import cell_text
from ..load.host import NOT_ON_HOST_CLOCK
from ..schema import JOB_KEY, NOT_ANALYSED
from .grouping import _whole

#: Key of a GPU's compact collective calls in its rosters entry (stored with its result).
CALLS = "collective_calls"
#: ``collective_match_basis`` of the GPUs matched across the files of a job on one host.
ACROSS_FILES = collwait.KTH_CALL + " across files on one host"


def calls_entry(result) -> dict:
    """``{CALLS: calls}`` of a :class:`~pipeline.model.GpuResult` that kept its collective calls, else ``{}``."""
    calls = getattr(result, "collective_calls", None)
    return {CALLS: calls} if calls is not None else {}


def _names(rows: list[dict]) -> list[str]:
    """Each GPU of ``rows`` as ``<gpu key> in <file name>``, or with the file's whole path when two GPUs would read
    the same (one file name in two folders)."""
    short = [f"{r['gpu_key']} in {os.path.basename(str(r['report']).replace(chr(92), '/').rstrip('/'))}"
             for r in rows]
    return short if len(set(short)) == len(short) else [f"{r['gpu_key']} in {r['report']}" for r in rows]


def _clock_known(row: dict) -> bool:
    """Whether the times of ``row``'s file are on its host's clock when it names no host: a node label then gives
    its host, unless its ``host_source`` says its rows are not timed on a host's clock
    (:data:`pipeline.load.host.NOT_ON_HOST_CLOCK`: an export whose rows count from its capture's start)."""
    return NOT_ON_HOST_CLOCK not in cell_text(row.get("host_source"))


def one_clock(ran: list[dict]) -> tuple[str, str, str]:
    """``(host, evidence, "")`` when the files of ``ran`` (the job's rows that ran a collective) are on one host,
    else ``("", "", reason)`` in words. One host: every file names the same host in its capture (``host``, read
    where ``host_source`` says); else, when some file names none, every file has the same ``node`` label (a
    ``labels:`` rule: the user's word that they ran on one node) and those that name no host have rows timed on a
    host's clock (:func:`_clock_known`), and the hosts the others name do not differ among themselves. Reasons: a
    file with neither (its ``host_source`` says why when it named a host whose rows are not on its clock), the
    hosts or the labelled nodes that differ."""
    by_report: dict[str, dict] = {}
    for r in ran:
        by_report.setdefault(str(r["report"]), r)

    def grouped(key) -> dict:
        out: dict[str, list] = {}
        for p, r in sorted(by_report.items()):
            out.setdefault(cell_text(r.get(key)), []).append(os.path.basename(p))
        return out

    def differ(groups: dict, what: str) -> str:
        listed = "; ".join(f"{h}: {', '.join(files)}" for h, files in sorted(groups.items()))
        return f"the files are on different {what} ({listed}): their clocks are not known to agree"

    hosts = grouped("host")
    if "" not in hosts:
        if len(hosts) > 1:
            return "", "", differ(hosts, "hosts")
        evidence = ", ".join(sorted({cell_text(r.get("host_source")) for r in by_report.values()} - {""}))
        return next(iter(hosts)), evidence, ""
    named = {h: f for h, f in hosts.items() if h}
    if len(named) > 1:
        return "", "", differ(named, "hosts")
    unknown = sorted(p for p, r in by_report.items()
                     if not cell_text(r.get("host")) and not (cell_text(r.get("node")) and _clock_known(r)))
    if unknown:
        why = (cell_text(by_report[unknown[0]].get("host_source"))
               or "the file names no host and no label names its node")
        more = f" and {len(unknown) - 1} more file(s)" if len(unknown) > 1 else ""
        return "", "", (f"host unknown for {os.path.basename(unknown[0])}{more} ({why}): the files' clocks are not "
                        "known to agree")
    unlabelled = sorted(p for p, r in by_report.items() if not cell_text(r.get("node")))
    if unlabelled:
        r = by_report[unlabelled[0]]
        return "", "", (f"{os.path.basename(unlabelled[0])} names host {cell_text(r.get('host'))} and no node label, "
                        f"the others only their node label ({', '.join(h for h in grouped('node') if h)}): the files' "
                        "clocks are not known to agree")
    nodes = grouped("node")
    if len(nodes) > 1:
        return "", "", differ(nodes, "nodes by their labels")
    return next(iter(nodes)), "the node their labels give" + (", the host some name" if named else ""), ""


def _overlap(ran: list[dict]) -> bool:
    """Whether every file's capture (``first_kernel_ns`` .. ``+ capture_ns``) shares a common stretch of time."""
    lo, hi = None, None
    for r in ran:
        first, length = _whole(r.get("first_kernel_ns")), _whole(r.get("capture_ns"))
        if first is None or length is None:
            return False
        lo = first if lo is None else max(lo, first)
        hi = first + length if hi is None else min(hi, first + length)
    return lo is not None and lo < hi


def _abstain(rows: list[dict], reason: str) -> None:
    note = f"{collwait.SEPARATE_REPORTS}: {reason}"
    for r in rows:
        r["collective_wait_note"] = note
        r["collective_match_basis"] = collwait.ABSTAINED_BASIS + note


def _rate(value) -> float:
    try:
        return float("nan") if value is None else float(value)
    except (TypeError, ValueError):
        return float("nan")


def match_job(ran: list[dict], rosters: dict, cfg) -> None:
    """Match the collective calls of one job's GPUs that ran a collective (``ran``, fleet rows of two or more
    files; a GPU whose calls all lie outside its W among them) across its files when they share one host (module doc), updating their ``collective_*`` columns in
    place; else the GPUs that abstained say why."""
    separate = [r for r in ran if r.get("collective_wait_status") == collwait.ABSTAINED
                and cell_text(r.get("collective_wait_note")).startswith(collwait.SEPARATE_REPORTS)]
    files = len({r["report"] for r in ran})
    names = _names(ran)
    docs = {k: rosters.get((r["report"], r["gpu_key"]), {}).get(CALLS) for k, r in zip(names, ran)}
    size = max((int(d.get("world_size") or 0) for d in docs.values() if isinstance(d, dict)), default=0)
    short = (f"{len(docs)} GPU(s) with collectives in {files} files of the {size} ranks the captures name"
             if size > len(docs) else "")
    host, evidence, reason = one_clock(ran)
    if reason:
        return _abstain(separate, reason + (f"; and {short}" if short else ""))
    if not _overlap(ran):
        return _abstain(separate, f"the {files} files on host {host} hold captures that do not overlap in time "
                                  "(not one run)")
    missing = [k for k, d in docs.items() if d is None]
    if missing:
        return _abstain(separate, f"the calls of {missing[0]} were matched within its own report, not kept for "
                                  "the job")
    try:
        calls = {k: collwait.calls_of_json(d) for k, d in docs.items()}
    except (KeyError, TypeError, ValueError):
        return _abstain(separate, "the kept calls of a GPU are damaged")
    if short:
        return _abstain(separate, f"{short} (host {host}): the others' files are not here")
    matched = collwait.match(calls)
    if matched.abstained:
        return _abstain(separate, f"{files} files on host {host}; {matched.note}")
    several = " on each collective stream" if "collective stream" in matched.note else ""
    counts = matched.note.rsplit(": ", 1)[-1]
    note = (f"{len(calls)} GPUs in {files} files on one host, {host} ({evidence}): one clock; calls matched by the "
            f"k-th kernel of each family{several}: {counts}")
    matched = matched._replace(note=note)
    for key, r in zip(names, ran):
        nvtx = ("nccl:collective",) if docs[key].get("nvtx_collective") else ()
        w0, w1 = int(r["window_start_ns"]), int(r["window_end_ns"])
        r.update(collwait.gpu_columns(matched, key, w0, w1, cfg.collective.chronic_share, nvtx))
        # the row is priced (the reduce's first step): the wait measured now priced at its rate; not measured: empty
        r["collective_wait_usd_per_month"] = (None if r["collective_wait_ns"] is None else
                                              share_usd([r["collective_wait_ns"]], [w1 - w0],
                                                        [_rate(r.get("rate_usd_per_hour"))], cfg.cost.hours_per_month)[0])
        if r["collective_wait_status"] == collwait.MEASURED:
            r["collective_match_basis"] = ACROSS_FILES


def match_across_files(rows: list[dict], rosters: dict, cfg) -> list[dict]:
    """Every job of ``rows`` (fleet rows, jobs already grouped) with a GPU whose peers are in other files:
    :func:`match_job` over its analysed GPUs that ran a collective; ``rosters``: ``(report, gpu key) ->``
    entry holding :data:`CALLS`. In place; returns ``rows``."""
    jobs: dict[tuple, list] = {}
    for r in rows:
        # a GPU whose calls all lie outside its W (status none) still takes part: its start may be a call's last
        if r.get("status") not in NOT_ANALYSED and (
                r.get("collective_wait_status") in (collwait.MEASURED, collwait.ABSTAINED)
                or CALLS in rosters.get((r.get("report"), r.get("gpu_key")), {})):
            jobs.setdefault(tuple(cell_text(r.get(c)) for c in JOB_KEY), []).append(r)
    for _, ran in sorted(jobs.items()):
        if len({r["report"] for r in ran}) > 1 and any(
                r["collective_wait_status"] == collwait.ABSTAINED
                and cell_text(r.get("collective_wait_note")).startswith(collwait.SEPARATE_REPORTS) for r in ran):
            match_job(ran, rosters, cfg)
    return rows
