"""What to fix first, in dollars (docs/definitions.md#fix-first).

Per GPU and per application category ``c`` (:data:`~pipeline.model.CATEGORIES`; the causes that
are not the application's, :data:`~pipeline.model.CAVEATS` ``profiler`` and ``untraced``, never):

* share ``s_c = cat_c_ns / window_ns`` (device-level idle of that category, 0..1);
* recoverable USD per month ``= s_c × rate (USD per GPU-hour) × hours per month`` (default 730),
  priced by the one pricing function :func:`pipeline.analysis.cost.idle_usd_per_month`; an entry's
  ``fix_wins_back_usd_per_month`` is the part of it the evidence says a fix wins back (:func:`recoverable`,
  docs/definitions.md#diagnosis), its ``remedy`` what the rules that fired prescribe (:func:`entry_remedy`);
* speed-up if that category alone vanished ``= 1 / (1 − s_c)`` (Amdahl; ``inf`` at ``s_c = 1``):
  :func:`pipeline.analysis.cost.amdahl_speedup`.

Summed over GPUs (a job, a cluster, the fleet), the dollars add up and the share is window-weighted:
``Σ cat_c_ns / Σ window_ns``. Every figure extrapolates a short capture to a month, so it carries the
window and the stable iterations it rests on and its GPUs' ``confidence_tier``
(:mod:`pipeline.analysis.confidence`, docs/definitions.md#confidence-tiers): each list gives the
entries over the trusted GPUs (``medium``, ``high``) first, then, apart, those over the ``low`` GPUs, then those
over the ``toy`` ones (flagged ``low_confidence``), each part ranked by what a fix wins back; a speed-up of at least
:data:`IMPLAUSIBLE_SPEEDUP` is implausible (:func:`implausible`), flagged ``implausible_speedup``.

Each list has two sections (:data:`SECTIONS`, the ``section`` column): ``device idle``, the entries above, and
``inside collectives``, one entry per list over its GPUs whose wait inside collectives was measured
(:mod:`pipeline.analysis.collwait`, docs/definitions.md#collective-wait): ``category`` ``collective wait`` (or
``pipeline bubble`` when every such GPU's calls are point-to-point), dollars the sum of their
``collective_wait_usd_per_month``, the remedy :data:`pipeline.analysis.collwait.REMEDY` naming the late rank
(:func:`pipeline.analysis.collwait.job_late_rank`). That time is busy: its dollars are never in a device-idle total.

Pure functions of numbers and frames; categories are looked up by name, never by position.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from .. import categories
from ..config import ConfidenceConfig
from ..model import CATEGORIES, CAVEATS
from .confidence import TIERS, TRUSTED, KindFigures, tier_columns, trust_rank
from ..schema import FIX_FIRST, analysed_rows, conform, share
from .cost import amdahl_speedup, assumed_split, models_text, unpriced_total
from . import collwait
from . import diagnosis as dx
from .names import gpu_names

#: A speed-up at or above this is implausible (the part of the window it rests on is 90 % or more): marked wherever
#: it prints (:func:`implausible`, docs/definitions.md#fix-first).
IMPLAUSIBLE_SPEEDUP = 10.0


def implausible(speedup) -> bool:
    """Whether a speed-up (``1 / (1 − s)``, as stored: 4 decimals; ``inf`` at ``s = 1``) is implausible: at least
    :data:`IMPLAUSIBLE_SPEEDUP` (docs/definitions.md#fix-first). The one rule every view's mark follows; None or NaN
    (no speed-up) is not."""
    return speedup is not None and speedup == speedup and float(speedup) >= IMPLAUSIBLE_SPEEDUP

#: One-line remedy per application category, in the field's terms (docs/definitions.md#fix-first), from the
#: registry (:attr:`pipeline.categories.Category.remedy`).
REMEDIES = categories.Field("remedy", caveat=False)

#: The sections of a fix-first list (``section``), in order: the device-level idle categories' entries, then apart
#: the wait inside collectives (busy time, never added to the idle).
DEVICE_IDLE, INSIDE_COLLECTIVES = SECTIONS = ("device idle", "inside collectives")

#: Columns of the fix-first list (:func:`fix_list`), in order: declared in the schema (:data:`pipeline.schema.FIX_FIRST`).
FIX_COLUMNS = FIX_FIRST.columns

#: Example gaps (from the device rosters) quoted per fix-list entry.
EXAMPLE_GAPS = 3
#: GPUs whose diagnosis lines a fix-list entry quotes (the others are counted).
DIAGNOSED_GPUS = 3


def entry_diagnosis(category: str, gpus: list, findings: list, stragglers: list = (), late: list = ()) -> str:
    """The ``diagnosis`` of a fix-list entry of ``category`` (docs/definitions.md#diagnosis): for each of the
    first :data:`DIAGNOSED_GPUS` of its ``gpus`` (their display names, :func:`pipeline.analysis.names.gpu_names`)
    that have findings of the category, those with a finding not archived first (the evidence the remedy rests on),
    (``findings``: each GPU's :func:`pipeline.analysis.diagnosis.diagnose` list, same order), ``"<gpu>: <line>"``
    (:func:`pipeline.analysis.diagnosis.line`), then how many more GPUs have some; a ``comm`` entry names the job's
    ``stragglers`` (display names too) and its ``late`` ranks (the GPUs of the list that entered last in most of
    their collective calls, ``collective_chronic``: the ones the others wait for). Lines joined by a newline; ``""``
    when none."""
    diagnosed = [(g, [f for f in fs if f["category"] == category]) for g, fs in zip(gpus, findings)]
    diagnosed = [(g, fs) for g, fs in diagnosed if fs]
    # the GPUs whose findings prescribe (not archived) first, each group in list order: the lines shown are the
    # evidence the entry's remedy (:func:`entry_remedy`) rests on
    diagnosed.sort(key=lambda gf: all(f.get("archived") for f in gf[1]))
    lines = [f"{g}: {dx.line(f)}" for g, fs in diagnosed[:DIAGNOSED_GPUS] for f in fs]
    if len(diagnosed) > DIAGNOSED_GPUS:
        lines.append(f"and {len(diagnosed) - DIAGNOSED_GPUS} more GPU(s) (their fleet rows' diagnosis)")
    if category == "comm" and stragglers:
        lines.append("straggler: " + "; ".join(stragglers) + " (the job's GPU with most idle: look there first)")
    if category == "comm" and late:
        lines.append("late rank: " + "; ".join(late) + " (enters the collectives last: the others wait for it; fix its "
                     "own idle first)")
    return "\n".join(lines)


#: The rules whose remedy an entry's ``remedy`` prefers, most concrete first (docs/definitions.md#diagnosis); the
#: other rules' remedies after them, in the findings' order. ``data.host_memory`` (the copies use pageable memory: pin
#: the host buffers once at the start) before ``data.host_alloc`` (pinned buffers allocated in the loop): when the
#: copies are pageable, the pinned allocations are not what they copy from, and pinning once covers both. The late
#: rank's own remedy comes after the data rules: on that GPU it outranks the category's general rule (the others wait
#: for it).
REMEDY_ORDER = ("data.host_memory", "data.host_alloc", "data.copy_stream", "data.volume", "comm.late_rank")
#: Outcomes that find nothing wrong: their remedy (``pinning more will not help``) prescribes nothing.
NOTHING_WRONG = ("pinned", "none", "large_copies")


#: The remedy of a fix-list entry whose category is archived on its GPUs (docs/definitions.md#diagnosis).
ARCHIVED = "archived: under the actionable share of the window on its GPUs, not prescribed"
#: GPUs named per remedy of an entry whose GPUs need different remedies (the others are counted).
REMEDY_GPUS = 3


def prescribing(category: str, findings: list) -> list[dict]:
    """The judged, not archived findings of ``category`` in ``findings`` (one GPU's or several's, flattened) that
    find something wrong and prescribe (a remedy, an outcome not in :data:`NOTHING_WRONG`), the rules of
    :data:`REMEDY_ORDER` first in that order, then the others in the findings' order."""
    wrong = [f for f in findings if f["category"] == category and not f.get("archived") and f.get("judged", True)
             and f.get("remedy") and f.get("outcome") not in NOTHING_WRONG]
    return sorted(wrong, key=lambda f: REMEDY_ORDER.index(f["rule"]) if f["rule"] in REMEDY_ORDER else len(REMEDY_ORDER))


def _one_remedy(category: str, findings: list) -> str:
    """:func:`entry_remedy` over ``findings`` (each GPU's list) as if one remedy served them all."""
    mine = [f for fs in findings for f in fs if f["category"] == category]
    fired = [f for f in mine if not f.get("archived")]
    if mine and not fired:
        return ARCHIVED
    wrong = prescribing(category, mine)
    if wrong:
        return _said(category, wrong[0], mine)
    judged = [f for f in fired if f.get("judged", True)]
    why = "the rules found nothing to prescribe" if judged else "no diagnostic rule could be judged"
    return f"{REMEDIES[category]} (generic: {why})"


#: The rules whose remedy only says that the GPU is the one its job waits for (``comm.late_rank``, and the
#: ``comm.collective`` finding of a chronic late rank): right for the GPUs that wait on it, circular on its own page.
ROLE_RULES = ("comm.late_rank",)
#: The one concrete part of a ``comm`` remedy a GPU can act on itself (the registry's, :data:`REMEDIES`).
OVERLAP = "overlap communication with compute"


def own_remedy(category: str, findings: list, leads: list = ()) -> str:
    """The remedy of ``category`` for a GPU that is itself the one its job waits for (the straggler or the late rank:
    docs/outputs.md#reports-for-people), from its own ``findings`` (:func:`pipeline.analysis.diagnosis.diagnose`),
    never one that sends the reader back to it: the remedy of its findings left when the role-only ones
    (:data:`ROLE_RULES`, a chronic late rank's ``comm.collective`` finding) are set aside (:func:`entry_remedy`: the
    rule that fired, else the generic text saying why, or archived). For ``comm``: :data:`OVERLAP`, after looking
    at ``leads`` first (the words naming the GPUs of its job it waits on, e.g. ``["the late rank A100 #2 …"]``), else
    after fixing its own largest other category where a ``comm.late_rank`` finding names one (``fix its own cpu
    first (profile the host …), then overlap communication with compute``)."""
    own = [f for f in findings if f["rule"] not in ROLE_RULES
           and not (f["rule"] == "comm.collective" and (f.get("evidence") or {}).get("chronic"))]
    if category != "comm":
        return entry_remedy(category, [own])
    if leads:
        return f"look at {' and '.join(leads)} first, then {OVERLAP}"
    late = [f for f in findings if f["rule"] == "comm.late_rank"]
    if late:
        cat = late[0]["category"]
        return f"fix its own {cat} first ({entry_remedy(cat, [own])}), then {OVERLAP}"
    return f"{OVERLAP} (no other GPU of its job stands out as the one it waits for)"


def _said(category: str, finding: dict, findings: list) -> str:
    """The remedy ``finding`` gives an entry of ``category``; a role-only one (:data:`ROLE_RULES`: the late rank's
    "fix its own cpu first") followed by what that GPU's own findings prescribe for it (:func:`own_remedy`), so the
    entry never sends the reader back to itself: ``this rank is the one others wait for: fix its own cpu first:
    profile the host inside NVTX range 'Iteration N' (…)``."""
    if finding["rule"] not in ROLE_RULES:
        return finding["remedy"]
    return f"{finding['remedy']}: {own_remedy(category, findings)}"


def _who(names: list, total: int, category: str) -> str:
    """Whom a part of an entry's remedy is for: its GPUs' names (the first :data:`REMEDY_GPUS`, the others counted)
    and how many of the ``total`` GPUs the entry rests on (those with idle of its ``category``) they are:
    ``A100 #2 pid84669/dev0 (1 of the 24 GPUs with cpu idle)``."""
    shown = ", ".join(names[:REMEDY_GPUS]) + (f" and {len(names) - REMEDY_GPUS} more" if len(names) > REMEDY_GPUS else "")
    return f"{shown} ({len(names)} of the {total} GPUs with {category} idle)"


#: The count :func:`_who` closes a part's GPUs with, as a pattern: ``(k of the n GPUs with <category> idle)``, its
#: groups k, n and the category.
WHO_COUNT = r"\((\d+) of the (\d+) GPUs with (\S+) idle\)"
#: Where one part of an entry's remedy ends and the next begins (:func:`entry_remedy`'s ``; <GPUs> (k of the n GPUs
#: with <category> idle): `` and ``; the other m: ``).
_NEXT_PART = re.compile(r"; (?=[^;]*? " + re.sub(r"(?<!\\)\((?!\?)", "(?:", WHO_COUNT) + r": |the other \d+: )")


def remedy_parts(remedy: str) -> list[str]:
    """An entry's ``remedy`` (:func:`entry_remedy`) cut into its parts, one per remedy and the GPUs it is for
    (``["A100 #2 pid84669/dev0 (1 of the 24 GPUs with cpu idle): this rank is ...", "the other 23: ..."]``); a
    remedy for all its GPUs is one part."""
    return _NEXT_PART.split(str(remedy))


def entry_remedy(category: str, findings: list, names: list | None = None) -> str:
    """The remedy of a fix-list entry of ``category`` (docs/definitions.md#diagnosis), from its GPUs' findings
    (``findings``: each GPU's :func:`pipeline.analysis.diagnosis.diagnose` list). Each GPU's remedy is that of its
    first judged, not archived finding of the category that finds something wrong (its outcome not in
    :data:`NOTHING_WRONG`), the rules of :data:`REMEDY_ORDER` first in that order (the entry's ``diagnosis`` gives
    them all). When every GPU with such a finding has the same remedy, or ``names`` (the GPUs' display names, same
    order) is not given: that remedy, whichever GPUs it came from. When no rule of the category could be judged on
    them, the generic :data:`REMEDIES` text, saying so; when the rules judged but prescribe nothing, the generic
    text saying that; when the category is archived on every GPU that has a finding of it (under
    ``analysis.actionable_pct`` of its window), :data:`ARCHIVED`: nothing is prescribed.

    With ``names``, a remedy that rests on some of the GPUs only says which (a late rank's own remedy is never
    applied to the GPUs that wait for it): one part per remedy, ``<GPUs> (k of the n GPUs with <category> idle):
    <remedy>`` (n: the GPUs given, those the entry rests on), in the order of
    each part's first GPU in ``names`` (the fix list gives the role GPUs, then the costliest, first: the part of
    the GPU that matters most leads, issue 45), then ``the other m: <what serves them>``
    (archived, or the generic text) when some GPUs have no finding that prescribes."""
    if not names or len(findings) < 2:
        return _one_remedy(category, findings)
    parts: dict = {}   # remedy -> (its rank, the names of the GPUs it is each one's own for)
    rest_names, rest = [], []
    for name, fs in zip(names, findings):
        wrong = prescribing(category, fs or [])
        if not wrong:
            rest_names.append(name)
            rest.append(fs or [])
            continue
        parts.setdefault(_said(category, wrong[0], fs), []).append(name)
    if len(parts) <= 1 and not (parts and rest):
        return _one_remedy(category, findings)
    # in the order of each part's first GPU: the caller's (fix_list: the role GPUs, then the costliest, first)
    text = "; ".join(f"{_who(who, len(names), category)}: {remedy}" for remedy, who in parts.items())
    if rest:
        text += f"; the other {len(rest)}: {_one_remedy(category, rest)}"
    return text


def recoverable_part(category: str, findings: list) -> tuple[int, int] | None:
    """``(hideable_ns, idle_ns)`` of one GPU's ``category`` when its evidence says only part of that idle is
    recoverable (docs/definitions.md#diagnosis): ``data`` copies on the compute stream, of which only what a copy
    stream of their own could hide (:func:`pipeline.analysis.diagnosis.hideable_ns`) is; None when the whole idle
    is (``findings``: the GPU's :func:`pipeline.analysis.diagnosis.diagnose` list)."""
    if category != "data":   # only data's evidence bounds a part (a look at the findings for nothing otherwise)
        return None
    for f in findings:
        ev = f.get("evidence") or {}
        if (category == "data" and f.get("rule") == "data.copy_stream" and f.get("outcome") == "compute_stream"
                and "hideable_ns" in ev and ev.get("data_ns")):
            return int(ev["hideable_ns"]), int(ev["data_ns"])
    return None


def recoverable(category: str, usd: list, findings: list) -> tuple[float, str]:
    """An entry's recoverable USD per month and its basis (docs/definitions.md#diagnosis): over its GPUs (``usd``:
    each one's ``fix_<c>_usd_per_month``, NaN unpriced; ``findings``: each one's findings, same order), a GPU's
    dollars times ``hideable_ns / idle_ns`` where :func:`recoverable_part` gives a part, else its whole dollars;
    rounded to cents (NaN when every GPU is unpriced). The basis: ``"the whole idle"`` or how much of the idle
    a copy stream could hide, in ms, on how many GPUs."""
    return _recoverable_of(usd, [recoverable_part(category, fs or []) for fs in findings])


def _recoverable_of(usd: list, parts: list) -> tuple[float, str]:
    """:func:`recoverable` over each GPU's :func:`recoverable_part` (``parts``, same order as ``usd``) as given."""
    total, priced, hide, idle, parted = 0.0, False, 0, 0, 0
    for u, part in zip(usd, parts):
        if part:
            hide, idle, parted = hide + part[0], idle + part[1], parted + 1
        if u == u:
            priced = True
            total += float(u) * (part[0] / part[1] if part else 1.0)
    if not parted:
        basis = "the whole idle of the category"
    else:
        basis = (f"copies on the compute stream: only what a copy stream of their own could hide behind compute, "
                 f"{hide / 1e6:,.1f} of {idle / 1e6:,.1f} ms on {parted} of {len(usd)} GPU(s)")
    return (round(total, 2) if priced else math.nan), basis


def recoverable_ns(category: str, cat_ns: list, findings: list) -> int:
    """The ns of ``category``'s idle a fix wins back over some GPUs (``cat_ns``: each one's ``cat_<c>_ns``, None or NaN
    as 0; ``findings``: each one's findings, same order): a GPU's ns times ``hideable_ns / idle_ns`` (floored) where
    :func:`recoverable_part` gives a part, else its whole ns; the same parts as :func:`recoverable`'s dollars."""
    return _recoverable_ns_of(cat_ns, [recoverable_part(category, fs or []) for fs in findings])


def _recoverable_ns_of(cat_ns: list, parts: list) -> int:
    """:func:`recoverable_ns` over each GPU's :func:`recoverable_part` (``parts``, same order as ``cat_ns``)."""
    total = 0
    for n, part in zip(cat_ns, parts):
        n = 0 if n is None or n != n else int(n)
        total += n * part[0] // part[1] if part else n
    return total


def recoverable_speedup(category: str, cat_ns: list, window_ns: int, findings: list) -> float:
    """The speed-up if what a fix wins back went (docs/definitions.md#fix-first): ``1 / (1 − bounded / window_ns)``,
    ``bounded`` the :func:`recoverable_ns` of the GPUs, ``window_ns`` their summed windows; 4 decimals. The
    category's whole speed-up where the evidence bounds none of it."""
    return _speedup_of(cat_ns, window_ns, [recoverable_part(category, fs or []) for fs in findings])


def _speedup_of(cat_ns: list, window_ns: int, parts: list) -> float:
    """:func:`recoverable_speedup` over each GPU's :func:`recoverable_part` (``parts``, same order as ``cat_ns``)."""
    return round(amdahl_speedup(share(_recoverable_ns_of(cat_ns, parts), window_ns)), 4)


def gpu_recoverable(row: dict, findings: list) -> list[dict]:
    """The recoverable parts of one GPU (docs/definitions.md#diagnosis), what its GPU page and medical record show
    beside its diagnosis: per application category (:func:`fixable`, in order) whose idle the evidence bounds
    (:func:`recoverable_part`), ``{"category", "idle_usd_per_month"`` (the row's ``fix_<c>_usd_per_month``, NaN
    unpriced), ``"fix_wins_back_usd_per_month", "fix_wins_back_basis"}`` (:func:`recoverable` over this GPU alone);
    ``"speedup"`` (``fix_<c>_speedup``'s formula over the row's ``cat_<c>_ns`` and ``window_ns``: if all of the
    category's idle went; NaN without them) and ``"recoverable_speedup"``
    (:func:`recoverable_speedup`: if what a fix wins back went); ``row``: the GPU's fleet row (or ``_summary``),
    ``findings``: its findings. ``[]`` when the whole idle of every category is recoverable."""
    out = []
    for cat in fixable():
        part = recoverable_part(cat, findings)
        if part is None:
            continue
        u = row.get(f"fix_{cat}_usd_per_month")
        u = math.nan if u is None or u != u else float(u)
        rec, basis = _recoverable_of([u], [part])
        window, cat_ns = row.get("window_ns"), row.get(f"cat_{cat}_ns")
        known = bool(window) and window == window and cat_ns is not None and cat_ns == cat_ns
        out.append({"category": cat, "idle_usd_per_month": u, "fix_wins_back_usd_per_month": rec, "fix_wins_back_basis": basis,
                    "speedup": round(amdahl_speedup(share(int(cat_ns), int(window))), 4) if known else math.nan,
                    "recoverable_speedup": _speedup_of([cat_ns], int(window), [part]) if known else math.nan})
    return out


def fixable(categories=CATEGORIES) -> tuple:
    """The application categories of ``categories`` (never :data:`~pipeline.model.CAVEATS`), same order."""
    return tuple(c for c in categories if c not in CAVEATS)


#: The shapes of :func:`pipeline.analysis.confidence.tier`'s reasons that name a GPU's own numbers, and the
#: kind of shortfall each names without them (``{0}``: the threshold).
_REASONS = (
    (r"rests on \d+ stable iterations \(fewer than (\d+)\)", "fewer than {0} stable iterations"),
    (r"window -?[\d.]+ s \(under ([^)]+)\)", "window under {0}"),
    (r"\d+ kernels in W \(fewer than (\d+)\)", "fewer than {0} kernels"),
    (r"iteration spread [\d.e+]+ % \(over ([^)]+)\)", "iteration spread over {0}"),
    (r"rests on \d+ bursts \(fewer than (\d+)\)", "fewer than {0} bursts"),
    (r"the window leaves out [\d.e+]+ % of the capture's idle \(over ([^)]+)\) and the job's kind is unknown",
     "window leaves out over {0} of the capture's idle, kind unknown"),
    (r"the window is [\d.e+]+ % idle \(at least ([^)]+)\) and the job's kind is unknown",
     "window at least {0} idle, kind unknown"),
)


def confidence_kinds(note: str) -> list[str]:
    """The kinds of shortfall a ``confidence_note`` (:func:`pipeline.analysis.confidence.tier`'s reasons)
    names, without the GPU's own numbers: ``"fewer than 5 stable iterations"``, ``"window under 0.2 s"``,
    ``"fewer than 50 kernels"``, ``"iteration spread over 50 %"``, ``"fewer than 20 bursts"``, ``"window leaves
    out over 10 % of the capture's idle, kind unknown"``, ``"window at least 90 % idle, kind unknown"`` (a reason
    of another shape is kept as it is). ``[]`` for an empty note."""
    kinds = []
    for reason in (r for r in str(note or "").split("; ") if r):
        for shape, kind in _REASONS:
            m = re.fullmatch(shape, reason)
            if m:
                kinds.append(kind.format(m.group(1)))
                break
        else:
            kinds.append(reason)
    return kinds


def confidence_marker(note: str, window_ns: int, iterations: int, tier: str = "low") -> str:
    """A compact marker of a low-confidence figure for a table cell, from its ``confidence_note``, its
    window and its ``confidence_tier``: ``"toy capture: 8.6 ms window, 14 kernels"``, ``"low confidence: 3
    stable iterations"``, ``"low confidence: 10 bursts, 470.0 ms window"``, ``"low confidence: 29.9 % of the
    capture's idle left out, kind unknown"``, the parts joined by ``", "``; ``""`` when the note is empty.
    Windows under 1 s in ms (one decimal), else in s (two decimals)."""
    kinds = confidence_kinds(note)
    if not kinds:
        return ""
    reasons = str(note).split("; ")

    def numbers(shape: str) -> list[str]:
        return [m.group(1) for m in (re.fullmatch(shape, r) for r in reasons) if m]

    parts = []
    if any(k.startswith("fewer than ") and k.endswith(" stable iterations") for k in kinds):
        parts.append(f"{int(iterations)} stable iteration{'' if int(iterations) == 1 else 's'}")
    parts += [f"{n} burst{'' if n == '1' else 's'}" for n in numbers(r"rests on (\d+) bursts \(.*\)")]
    if any(k.startswith("window under ") for k in kinds):
        w = int(window_ns)
        parts.append((f"{w / 1e6:,.1f} ms" if w < 1_000_000_000 else f"{w / 1e9:,.2f} s") + " window")
    parts += [f"{n} kernel{'' if n == '1' else 's'}" for n in numbers(r"(\d+) kernels in W \(.*\)")]
    parts += [f"{float(p):.1f} % of the capture's idle left out, kind unknown"
              for p in numbers(r"the window leaves out ([\d.e+]+) % of the capture's idle \(.*")]
    parts += [k for k in kinds if not (k.startswith("window under ") or k.endswith((" kernels", " bursts"))
                                       or k.endswith("of the capture's idle, kind unknown")
                                       or (k.startswith("fewer than ") and k.endswith(" stable iterations")))]
    return ("toy capture: " if tier == "toy" else "low confidence: ") + ", ".join(parts)


def gpu_columns(category_ns: dict, window_ns: int, iterations: int, kernel_count: int, spread_pct,
                confidence: ConfidenceConfig = ConfidenceConfig(), figures: KindFigures = KindFigures(),
                idle_ns: int | None = None) -> dict:
    """The fix-first columns of one GPU's fleet row.

    Args:
        category_ns: category name -> device-level idle ns of that category in the window.
        window_ns, iterations: the analysis window (ns) and its stable iterations.
        kernel_count, spread_pct: the kernels in the window and the kept iterations' ``iteration_spread_pct``
            (None: none or unknown), which with the window and iterations give the tier.
        confidence: the tiers' thresholds (config ``confidence``).
        figures: what the job's kind adds to the tier (:class:`~pipeline.analysis.confidence.KindFigures`;
            none known: the iteration rule alone).
        idle_ns: the window's whole device-level idle (its ``amdahl_speedup``), judged with the categories' speed-ups.
    Returns:
        ``fix_<c>_speedup`` (4 decimals) for each application category ``c`` of ``category_ns`` (price-free: its
        ``fix_<c>_usd_per_month`` is the fleet's, :func:`pipeline.analysis.cost.price_in_place`), ``confidence_tier``, ``low_confidence`` and
        ``confidence_note`` (:func:`pipeline.analysis.confidence.tier_columns`) and ``implausible_speedup``
        (a speed-up of the row, the whole idle's or a category's, is :func:`implausible`).
    """
    out = {}
    speeds = [] if idle_ns is None else [round(amdahl_speedup(share(idle_ns, window_ns)), 4)]
    for cat in fixable(category_ns):
        out[f"fix_{cat}_speedup"] = round(amdahl_speedup(share(category_ns[cat], window_ns)), 4)
        speeds.append(out[f"fix_{cat}_speedup"])
    out.update(tier_columns(window_ns, kernel_count, iterations, spread_pct, confidence, figures))
    out["implausible_speedup"] = any(implausible(x) for x in speeds)
    return out


#: Fleet-table columns :func:`gpu_columns` adds, in order.
FLEET_FIX_COLUMNS = [f"fix_{c}_{k}" for c in fixable() for k in ("usd_per_month", "speedup")] + [
    "confidence_tier", "low_confidence", "confidence_note", "implausible_speedup"]


def _examples(tops: list, cat: str) -> str:
    """The longest :data:`EXAMPLE_GAPS` gaps of ``cat`` in the device rosters of some GPUs (``tops``: each one's
    :func:`_roster_tops`): ``report gpu_key @start_ns +length_ns [nvtx range]``, ``; ``-joined."""
    found = sorted(g for top in tops for g in top.get(cat, ()))
    return "; ".join(f"{r} {k} @{s} +{-n}" + (f" [{rng}]" if rng else "") for n, r, k, s, rng in found[:EXAMPLE_GAPS])


def _roster_tops(report, gpu_key, rosters: dict) -> dict:
    """Category -> the longest :data:`EXAMPLE_GAPS` gaps of it in the device roster of one GPU (``rosters``:
    ``(report, gpu_key) -> {"device": [...]}``), as :func:`_examples` orders them (longest first, then by report,
    GPU, start, range): ``(-length_ns, report, gpu_key, start_ns, nvtx range or "")``. An entry's examples are the
    longest of its GPUs' (the first of the sorted whole are among each GPU's first), each roster read once."""
    found: dict = {}
    for g in (rosters.get((report, gpu_key)) or {}).get("device", []):
        found.setdefault(g.get("category"), []).append(
            (-int(g["length_ns"]), str(report), str(gpu_key), int(g["start_ns"]), g.get("nvtx_range") or ""))
    return {cat: sorted(gaps)[:EXAMPLE_GAPS] for cat, gaps in found.items()}


def _group_columns(rows: pd.DataFrame, rosters: dict) -> dict:
    """The columns :func:`_entries` reads, taken out of the analysed fleet rows once as numpy arrays
    (a frame filter per group, category and column cost more than the whole list: every run makes
    one list per job). Missing values are kept as they are (``raw``) and as 0 (``filled``). Besides, once for the
    fleet's list and every job's: each GPU's texts, findings (also by category) and example gaps (from
    ``rosters``, :func:`_roster_tops`) as lists read by position."""
    cols = {"report": np.asarray(rows["report"].tolist(), dtype=object),
            "gpu_key": np.asarray(rows["gpu_key"].tolist(), dtype=object),
            "window": rows["window_ns"].fillna(0).to_numpy(),
            "iterations": rows["iterations"].fillna(0).to_numpy(),
            # a row without a tier (none computed) is not trusted: read as low
            "tier": np.asarray([TIERS.index(t if t in TIERS else "low") for t in rows["confidence_tier"].tolist()]),
            "confidence_note": np.asarray(rows["confidence_note"].tolist(), dtype=object)}
    names = gpu_names(rows)  # the one name a GPU has for people, numbered in its job (docs/outputs.md#gpu-names)
    cols["name"] = np.asarray([names.get((str(r), str(k)), f"{r} {k}") for r, k in zip(cols["report"], cols["gpu_key"])]
                              + [None], dtype=object)[:-1]
    extra = conform(rows, ["diagnosis", "straggler"])  # an older table: no findings, no straggler
    cols["findings"] = np.asarray([dx.of_text(t) for t in extra["diagnosis"].tolist()] + [None], dtype=object)[:-1]
    cols["straggler"] = extra["straggler"].fillna(False).astype(bool).to_numpy()
    cols["job"] = np.asarray([f"{c}\x00{j}" for c, j in zip(rows["cluster"].tolist(), rows["job"].tolist())],
                             dtype=object)   # the job key, for a comm entry's stragglers (:func:`job_stragglers`)
    # the late ranks (collective_chronic; an older table: none)
    cols["late"] = conform(rows, ["collective_chronic"])["collective_chronic"].fillna(False).astype(bool).to_numpy()
    rates = conform(rows, ["rate_assumed", "unpriced", "gpu_model"])  # an older table: rate_assumed from its rate_source
    cols["assumed"] = rates["rate_assumed"].astype(bool).to_numpy()
    cols["unpriced"] = rates["unpriced"].astype(bool).to_numpy()
    cols["model"] = np.asarray(rates["gpu_model"].tolist() + [None], dtype=object)[:-1]
    coll = conform(rows, COLLECTIVE_COLUMNS)  # an older table: no collective figures, no entry
    cols["coll_measured"] = (coll["collective_wait_status"] == collwait.MEASURED).to_numpy(bool)
    for c in ("collective_wait_ns", "collective_last_count", "collective_calls"):
        cols[c] = pd.to_numeric(coll[c], errors="coerce").fillna(0).astype("int64").to_numpy()
    cols["collective_wait_usd"] = pd.to_numeric(coll["collective_wait_usd_per_month"], errors="coerce").to_numpy(float)
    cols["collective_chronic"] = coll["collective_chronic"].fillna(False).astype(bool).to_numpy()
    cols["collective_p2p"] = coll["collective_p2p"].fillna(False).astype(bool).to_numpy()
    for cat in fixable():
        cols[f"cat_{cat}"] = rows[f"cat_{cat}_ns"].fillna(0).to_numpy()
        cols[f"cat_{cat}_raw"] = rows[f"cat_{cat}_ns"].to_numpy(dtype=object)
        cols[f"usd_{cat}"] = rows[f"fix_{cat}_usd_per_month"].fillna(0).to_numpy()
        cols[f"usd_{cat}_raw"] = rows[f"fix_{cat}_usd_per_month"].astype(float).to_numpy()
    reports, keys = cols["report"].tolist(), cols["gpu_key"].tolist()
    cols["tops"] = [_roster_tops(r, k, rosters) for r, k in zip(reports, keys)]
    cols["gpu_keys_list"] = [f"{r} {k}" for r, k in zip(reports, keys)]
    cols["findings_list"], cols["name_list"] = cols["findings"].tolist(), cols["name"].tolist()
    cols["findings_by_category"] = by_cat = [{} for _ in reports]   # each GPU's findings of each category
    for found, fs in zip(by_cat, cols["findings_list"]):
        for f in fs:
            found.setdefault(f["category"], []).append(f)
    # each GPU's recoverable part of each category (:func:`recoverable_part`), once: the fleet's list, its job's and
    # the order of its entry's remedy read it again
    cols["parts"] = {cat: [recoverable_part(cat, fs or []) for fs in cols["findings_list"]] for cat in fixable()}
    return cols


def asks_for_straggler(findings: list | None) -> bool:
    """Whether a GPU's own comm remedy (its first prescribing comm finding, :func:`prescribing`) asks to look at the
    straggler first (:data:`pipeline.analysis.diagnosis.STRAGGLER_FIRST`)."""
    wrong = prescribing("comm", findings or [])
    return bool(wrong) and dx.STRAGGLER_FIRST in wrong[0]["remedy"]


def job_stragglers(cols: dict, at: np.ndarray) -> list[str]:
    """The stragglers (``straggler``: the job's GPU with most idle) of the jobs of the rows ``at`` (positions in
    ``cols``, :func:`_group_columns`; a comm entry gives those of its GPUs that :func:`asks_for_straggler`), by their
    display names: with one job its straggler, else its late rank (``collective_chronic``: ``the late rank A100 #1
    pid85236``; ``[]`` when neither stands out); with several, per job in key order,
    ``H100 #13 750df4f4 of llm-pretrain`` or ``none stands out in vit-train``: whom a comm entry's remedy asks to
    look at first (:func:`pipeline.analysis.diagnosis.name_straggler`)."""
    jobs = sorted(set(cols["job"][at].tolist()))
    leads = _job_leads(cols)
    found = {j: leads[j] for j in jobs if j in leads}
    if len(jobs) == 1:
        return list(found.values())
    return [f"{found[j]} of {j.split(chr(0))[1]}" if j in found else f"none stands out in {j.split(chr(0))[1]}"
            for j in jobs]


def _job_leads(cols: dict) -> dict:
    """Job key -> whom :func:`job_stragglers` names for it over every row of ``cols``: its straggler (the last in row
    order), else ``the late rank <name>`` (``collective_chronic``, the first); worked out once per ``cols`` (kept in
    it under ``"job_leads"``), not once per entry."""
    if "job_leads" not in cols:
        job, name = cols["job"], cols["name"]
        found = {job[i]: str(name[i]) for i in np.flatnonzero(cols["straggler"])}
        # a job without a straggler by idle but with a late rank (``collective_chronic``): the GPU its others wait
        # for, as its GPU pages say (pipeline.report.summary's roles: the straggler or the late rank leads)
        for i in np.flatnonzero(cols.get("late", np.zeros(len(job), dtype=bool))):
            found.setdefault(job[i], f"{dx.LATE_RANK}{name[i]}")
        cols["job_leads"] = found
    return cols["job_leads"]


#: Fleet columns the ``inside collectives`` entry reads (:func:`collective_entry`).
COLLECTIVE_COLUMNS = ["collective_wait_status", "collective_wait_ns", "collective_last_count", "collective_calls",
                      "collective_wait_usd_per_month", "collective_chronic", "collective_p2p"]


def collective_entry(cols: dict, group: np.ndarray, where: tuple) -> dict | None:
    """The ``inside collectives`` entry of one list (``group``: positions in ``cols``, :func:`_group_columns`;
    ``where``: ``(scope, cluster, job)``), over the group's GPUs whose ``collective_wait_status`` is ``measured``;
    None when none is (docs/definitions.md#fix-first). ``collective_wait_usd_per_month`` = the sum of their
    ``collective_wait_usd_per_month`` (NaN when none is priced): busy time, a different measure, so its
    ``idle_usd_per_month``, ``fix_wins_back_usd_per_month`` and ``assumed_usd_per_month`` are NaN (a sum of those
    columns is the idle alone; ``assumed_gpus`` still counts its GPUs at assumed rates);
    ``share_pct`` = 100 × Σ ``collective_wait_ns`` / Σ ``window_ns`` of those GPUs; no ``speedup`` (NaN: the wait is
    busy time, Amdahl's formula over idle does not apply); ``remedy`` :data:`pipeline.analysis.collwait.REMEDY` and
    the straggler, ``diagnosis`` how often it entered last; ``rank`` 1 (first of its own section); the tier the lowest
    of its GPUs'. Never flagged ``implausible_speedup``."""
    scope, cluster, job = where
    at = group[cols["coll_measured"][group]]
    if not at.size:
        return None
    names = cols["name"][at].tolist()
    lasts = cols["collective_last_count"][at].tolist()
    who, kind = collwait.job_late_rank(names, lasts, cols["collective_chronic"][at].tolist())
    usd = cols["collective_wait_usd"][at]
    rates = assumed_split(usd, cols["assumed"][at], cols["unpriced"][at], cols["model"][at])
    unpriced = bool(unpriced_total(int(at.size) - rates["unpriced_gpus"], rates["unpriced_gpus"]))
    window = int(cols["window"][at].sum())
    tiers = cols["tier"][at]
    trusted = int(tiers.min()) >= _FIRST_TRUSTED
    reports, keys, notes = cols["report"][at].tolist(), cols["gpu_key"][at].tolist(), cols["confidence_note"][at]
    bubble = bool(cols["collective_p2p"][at].all())
    if who:
        i = names.index(who)
        said = f"late rank: {who} ({kind}: last in {lasts[i]} of {int(cols['collective_calls'][at][i])} calls)"
    else:
        said = "no GPU entered last (every call entered at once)"
    total = math.nan if unpriced else round(float(np.nansum(usd)), 2)
    return {
        "scope": scope, "section": INSIDE_COLLECTIVES, "cluster": cluster, "job": job, "rank": 1,
        "category": collwait.PIPELINE_BUBBLE if bubble else collwait.COLLECTIVE_WAIT,
        # busy time, a different measure: in its own column, never in the idle ones a sum adds up
        "idle_usd_per_month": math.nan, "fix_wins_back_usd_per_month": math.nan, "fix_wins_back_basis": "",
        "collective_wait_usd_per_month": total,
        "assumed_usd_per_month": math.nan, "assumed_gpus": rates["assumed_gpus"],
        "unpriced_gpus": rates["unpriced_gpus"], "unpriced_models": models_text(rates["unpriced_models"]),
        "speedup": math.nan, "recoverable_speedup": math.nan,
        "share_pct": round(100.0 * share(int(cols["collective_wait_ns"][at].sum()), window), 4),
        "remedy": collwait.REMEDY + (f"; late rank: {who}" if who else ""), "diagnosis": said,
        "gpus": int(at.size), "gpu_keys": "; ".join(f"{r} {k}" for r, k in zip(reports, keys)), "example_gaps": "",
        "window_ns": window, "iterations": int(cols["iterations"][at].min()), "trusted": trusted,
        "confidence_tier": TIERS[int(tiers.min())], "low_confidence": not trusted,
        "confidence_note": "" if trusted else "; ".join(sorted({f"{r} {k}: {n}" for r, k, n, t in
                                                                 zip(reports, keys, notes, tiers) if t < _FIRST_TRUSTED})),
        "implausible_speedup": False,
    }


#: The lowest trusted tier's position in :data:`~pipeline.analysis.confidence.TIERS` (``medium``).
_FIRST_TRUSTED = TIERS.index(TRUSTED[0])


def _entries(cols: dict, group: np.ndarray, scope: str, cluster: str, job: str) -> list[dict]:
    """The ranked entries of one group of analysed fleet rows: ``group`` holds the rows' positions in
    ``cols`` (:func:`_group_columns`), in row order; the ``device idle`` section's, then the ``inside collectives``
    one (:func:`collective_entry`), if any. The group's GPUs are cut in three parts by tier, the trusted
    (``confidence_tier`` ``medium`` or ``high``), the ``low`` and the ``toy`` ones
    (:func:`pipeline.analysis.confidence.trust_rank`); each part gives an entry per category with idle in it, over
    that part's GPUs alone (its window, fewest iterations, share). The trusted part's entries come first, then the
    low part's, then the toy part's, each part largest win first (:func:`_part_entries`): a toy capture never
    drives the rank of an entry that rests on other GPUs. The archived entries (remedy :data:`ARCHIVED`: nothing
    prescribed) come after all of them, in the same order, with no rank (None): never numbered among the fixes."""
    entries = []
    ranks = np.asarray([trust_rank(TIERS[int(t)]) for t in cols["tier"][group]], dtype=int)
    for rank in (0, 1, 2):   # trusted, then low, then toy (:func:`pipeline.analysis.confidence.trust_rank`)
        part = group[ranks == rank]
        if part.size:
            entries += _part_entries(cols, part, (scope, cluster, job), rank == 0)
    # an archived entry prescribes nothing: after every ranked one, unranked (rank None), never numbered a fix
    entries = [e for e in entries if e["remedy"] != ARCHIVED] + [e for e in entries if e["remedy"] == ARCHIVED]
    for i, e in enumerate(entries, 1):
        e["rank"] = None if e["remedy"] == ARCHIVED else i
    coll = collective_entry(cols, group, (scope, cluster, job))
    return [{c: e[c] for c in FIX_COLUMNS} for e in entries + ([coll] if coll else [])]


def _part_entries(cols: dict, part: np.ndarray, where: tuple, is_trusted: bool) -> list[dict]:
    """:func:`_entries`' entries of one part (``part``: positions in ``cols``), largest
    ``fix_wins_back_usd_per_month`` first (what a fix wins back where the evidence bounds it, else the whole idle of
    the category), then largest ``usd_per_month``, then by name, unranked; ``where``: ``(scope, cluster, job)``."""
    scope, cluster, job = where
    window = int(cols["window"][part].sum())
    iterations = int(cols["iterations"][part].min())
    stragglers = cols["name"][part[cols["straggler"][part]]].tolist()
    late = cols["name"][part[cols["late"][part]]].tolist()
    # each GPU's text columns as lists, read by position in ``cols`` (an entry's GPUs: ``rows``, below)
    findings, names, keyed, tops = cols["findings_list"], cols["name_list"], cols["gpu_keys_list"], cols["tops"]
    by_cat = cols["findings_by_category"]
    # no GPU of the part at an assumed rate or unpriced (the usual case): every entry's split is that of no GPU
    plain = None if cols["assumed"][part].any() or cols["unpriced"][part].any() else assumed_split([], [], [], [])
    entries = []
    for cat in fixable():
        filled = cols[f"cat_{cat}"][part]
        at = np.flatnonzero(filled > 0)
        if not at.size:
            continue
        rows = part[at]   # the GPUs the entry rests on (those with idle of the category), positions in ``cols``
        where_ = rows.tolist()
        # the notes of the GPUs this entry rests on, not of the whole part
        notes = [] if is_trusted else sorted({f"{keyed[i]}: {cols['confidence_note'][i]}" for i in where_})
        s = share(int(filled.sum()), window)
        usd_raw = cols[f"usd_{cat}_raw"][rows]
        # the GPUs the entry rests on: its dollars' part at assumed rates, and unpriced when none is priced
        rates = plain or assumed_split(usd_raw, cols["assumed"][rows], cols["unpriced"][rows], cols["model"][rows])
        # (with no unpriced GPU in the part, as in ``plain``, a total is never unpriced)
        unpriced = plain is None and bool(unpriced_total(int(at.size) - rates["unpriced_gpus"], rates["unpriced_gpus"]))
        mine = [findings[i] for i in where_]
        parts = [cols["parts"][cat][i] for i in where_]
        rec_usd, rec_basis = _recoverable_of(usd_raw.tolist(), parts)
        lead = _lead_order(cols, part, at, cat, parts)   # the remedy names the role GPUs, then the costliest, first
        remedy = entry_remedy(cat, [mine[j] for j in lead], [names[where_[j]] for j in lead])
        if cat == "comm":
            remedy = dx.name_straggler(remedy, job_stragglers(cols, rows[[asks_for_straggler(f) for f in mine]]))
        speedup = round(amdahl_speedup(s), 4)
        entries.append({
            "scope": scope, "section": DEVICE_IDLE, "cluster": cluster, "job": job, "category": cat,
            "idle_usd_per_month": math.nan if unpriced else round(float(cols[f"usd_{cat}"][part].sum()), 2),
            "collective_wait_usd_per_month": math.nan,
            "fix_wins_back_usd_per_month": math.nan if unpriced else rec_usd, "fix_wins_back_basis": rec_basis,
            "assumed_usd_per_month": rates["assumed_usd"], "assumed_gpus": rates["assumed_gpus"],
            "unpriced_gpus": rates["unpriced_gpus"], "unpriced_models": models_text(rates["unpriced_models"]),
            "speedup": speedup, "share_pct": round(100.0 * s, 4),
            "recoverable_speedup": _speedup_of(filled[at].tolist(), window, parts),
            "remedy": remedy,
            "diagnosis": entry_diagnosis(cat, [names[i] for i in where_], [by_cat[i].get(cat, ()) for i in where_],
                                         stragglers, late),
            "gpus": int(at.size), "gpu_keys": "; ".join([keyed[i] for i in where_]),
            "example_gaps": _examples([tops[i] for i in where_], cat),
            "window_ns": window, "iterations": iterations, "trusted": is_trusted,
            "confidence_tier": TIERS[int(cols["tier"][rows].min())],
            "low_confidence": not is_trusted, "confidence_note": "; ".join(notes),
            "implausible_speedup": implausible(speedup),
        })
    entries.sort(key=rank_key)
    return entries


def _lead_order(cols: dict, part: np.ndarray, at: np.ndarray, category: str, parts: list) -> list[int]:
    """The order an entry's remedy names its GPUs in (positions in ``at``, the part's GPUs with idle of
    ``category``; ``parts`` their :func:`recoverable_part`, same order): the job's stragglers and late ranks
    (``straggler``, ``collective_chronic``: the GPUs the others wait for) first, then by what a fix wins back on each
    (:func:`recoverable` over the GPU alone; unpriced last), largest first, then in row order: so the GPUs that
    matter most are named, never counted in "and N more" (issue 45)."""
    if len(at) == 1:
        return [0]
    rows = part[at]
    role = (cols["straggler"][rows] | cols["late"][rows]).tolist()
    back = [_recoverable_of([u], [p])[0] for u, p in zip(cols[f"usd_{category}_raw"][rows].tolist(), parts)]
    return sorted(range(len(at)), key=lambda j: (not role[j], -(back[j] if back[j] == back[j] else -1.0), j))


def rank_key(entry: dict) -> tuple:
    """The order of a part's ``device idle`` entries (docs/definitions.md#fix-first): the prescribed ones before the
    archived ones (remedy :data:`ARCHIVED`: nothing prescribed), within each the priced before the unpriced (no
    dollars), the priced by what a fix wins back (``fix_wins_back_usd_per_month``: bounded by the evidence where it
    bounds it, else the category's whole idle) descending, then by the idle's USD descending, the unpriced by what
    they would be worth: their share of the window (``share_pct``) descending; then by ``share_pct`` descending,
    then by category name."""
    usd, rec = entry["idle_usd_per_month"], entry.get("fix_wins_back_usd_per_month", math.nan)
    unpriced = usd != usd
    wins = 0.0 if unpriced else -float(rec if rec == rec else usd)
    return (entry["remedy"] == ARCHIVED, unpriced, wins, 0.0 if unpriced else -float(usd), -float(entry["share_pct"]),
            entry["category"])


def fix_list(fleet: pd.DataFrame, rosters: dict) -> pd.DataFrame:
    """The ranked fix-first list (:data:`FIX_COLUMNS`): one list for the fleet (``scope`` ``fleet``,
    blank cluster and job), then one per job (``scope`` ``job``, sorted by cluster, job).

    Each list holds the entries over its trusted GPUs first (``trusted``: ``confidence_tier`` ``medium`` or
    ``high``), then apart those over its ``low`` GPUs, then those over its ``toy`` GPUs (``low_confidence``),
    each part ranked by what a fix wins back (:func:`_entries`); an entry's ``confidence_tier`` is the lowest of its GPUs'. So a toy capture
    never leads a list that has a trusted entry, and its dollars are still there.
    Each entry is an application category with idle in the part: its recoverable USD per month
    (sum of the GPUs' ``fix_<c>_usd_per_month``), speed-up ``1 / (1 − Σ cat_ns / Σ window_ns)``, the
    remedy (:func:`entry_remedy`: from the rules that fired on its GPUs), the part of its dollars the evidence
    says is recoverable (``fix_wins_back_usd_per_month``, ``fix_wins_back_basis``: :func:`recoverable`), its ``diagnosis`` (:func:`entry_diagnosis`: what the rules found on its GPUs,
    docs/definitions.md#diagnosis), the GPUs it rests on, up to :data:`EXAMPLE_GAPS` example gaps from the
    device rosters (``rosters``: ``(report, gpu_key) -> {"device": [...]}``), the summed window and the
    fewest stable iterations of its GPUs, and the flags (``implausible_speedup``: its speed-up is :func:`implausible`;
    ``recoverable_speedup``, the one if what a fix wins back went, is never above it). The rates it rests on
    (docs/definitions.md#cost), over the GPUs with idle of the category: ``assumed_usd_per_month`` and
    ``assumed_gpus`` (:func:`~pipeline.analysis.cost.assumed_split`), ``unpriced_gpus`` and their models
    (``unpriced_models``, :func:`~pipeline.analysis.cost.models_text`); ``usd_per_month`` is NaN
    when none of them is priced (:func:`~pipeline.analysis.cost.unpriced_total`), such an entry after the priced
    ones of its part. ``profiler`` and ``untraced`` are never in it. Those entries are the ``device idle``
    section; after them each list has its ``inside collectives`` entry (:func:`collective_entry`) when a GPU's wait
    inside collectives was measured, ranked 1 in its own section, its dollars in no device-idle total.
    Error rows take no part. Deterministic: rows sorted by report and GPU first.
    """
    ok = analysed_rows(fleet).sort_values(["report", "gpu_key"], kind="stable").reset_index(drop=True)
    if not len(ok):
        return pd.DataFrame([], columns=FIX_COLUMNS)
    cols = _group_columns(ok, rosters)
    entries = _entries(cols, np.arange(len(ok)), "fleet", "", "")
    # each job's row positions (the index is reset), jobs in the groupby's sorted order: group numbers, not a
    # sub-frame of every column per job
    number = ok.groupby(["cluster", "job"], sort=True, dropna=False).ngroup().to_numpy()
    order = np.argsort(number, kind="stable")
    clusters, jobs = ok["cluster"].tolist(), ok["job"].tolist()
    for rows in np.split(order, np.flatnonzero(np.diff(number[order])) + 1) if len(order) else []:
        entries += _entries(cols, rows, "job", clusters[rows[0]], jobs[rows[0]])
    out = pd.DataFrame(entries, columns=FIX_COLUMNS)
    out["rank"] = out["rank"].astype("Int64")   # an archived entry's rank is empty, the others whole numbers
    return out
