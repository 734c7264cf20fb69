"""What changed between two nights, split by cause (docs/definitions.md#trend).

The change of the fleet's idle USD per month from one night to the next is split into three parts
that add up to it exactly, in whole cents:

* ``idle``: the change in idle, priced at tonight's rates;
* ``rate``: the change in price (rate card, cluster override, hours per month), at last night's idle;
* ``fleet``: the whole dollars of the GPUs and jobs that came (tonight only) or went (last night only).

Per GPU (matched by its seat in its job, :func:`match_keys`), from the stored rows of both nights:
``U`` its ``idle_usd_per_month`` (in cents, as stored), ``f`` = ``idle_ns / window_ns``, ``r`` its
``rate_usd_per_hour`` and ``H`` its night's hours per month. For a GPU present both nights, ``C`` = last
night's idle at tonight's price = ``f0 × r1 × H1`` rounded to cents as every stored dollar figure is (the
price unchanged: ``C = U0``; the idle fraction unchanged: ``C = U1``). Then ``idle = U1 − C`` and
``rate = C − U0``: ``(f1 − f0)·r1·H1 + f0·(r1·H1 − r0·H0)`` to the cent. A night whose rates alone changed
has an idle part of exactly 0, one whose idle alone changed a rate part of exactly 0.
"""
from __future__ import annotations

import math

import pandas as pd

from ..analysis.cost import idle_usd_per_month
from ..io import absent
from ..schema import JOB_KEY

#: Where a GPU sits in its job (:data:`~pipeline.schema.JOB_KEY`) when its key names no physical GPU: its
#: node, its rank and its CUDA device ordinal(s) (docs/definitions.md#trend).
SEAT = ("node", "rank", "device_ids")
#: ``gpu_key`` prefixes that name the GPU itself (docs/definitions.md#gpus-and-mig-instances): the same on
#: every night it is profiled, whichever file and process. A PCI bus id (``bus-``) is unique on its node only.
UUID_KEYS = ("GPU-", "MIG-")
#: How a GPU whose seat is ambiguous is matched instead: inside its job, by its file and GPU key.
FILE_MATCH = ("report", "gpu_key")
#: The columns a GPU is matched across two nights by (:func:`match_keys`).
GPU_MATCH = (*JOB_KEY, *SEAT, *FILE_MATCH)
#: The columns of a night's fleet table the split reads (besides ``status``).
CHANGE_COLUMNS = (*GPU_MATCH, "idle_ns", "window_ns", "idle_usd_per_month", "rate_model", "rate_usd_per_hour",
                  "rate_source")
#: The three parts, in the order they are shown.
PARTS = ("idle", "rate", "fleet")


def cents(usd) -> int:
    """``usd`` (a dollar figure as stored: a whole number of cents) as int cents; missing (None, NaN): 0."""
    if usd is None or pd.isna(usd):
        return 0
    return int(round(float(usd) * 100))


def _value(row: dict, name: str):
    """``row[name]`` with pandas' missing values (NA, NaN, NaT) as None."""
    value = row.get(name)
    return None if absent(value) else value


def _same(a, b) -> bool:
    """Whether two stored values are the same (both missing: the same; numbers compared exactly)."""
    if a is None or b is None:
        return a is None and b is None
    return float(a) == float(b)


def _fraction_same(before: dict, after: dict) -> bool:
    """Whether the two rows have the same idle fraction ``idle_ns / window_ns`` (exact integer test;
    either unknown: False)."""
    i0, w0, i1, w1 = (_value(r, c) for r, c in ((before, "idle_ns"), (before, "window_ns"),
                                                 (after, "idle_ns"), (after, "window_ns")))
    if None in (i0, w0, i1, w1):
        return False
    return int(i0) * int(w1) == int(i1) * int(w0)


def _counterfactual(before: dict, after: dict, hours_before: float, hours_after: float) -> int:
    """``C`` of one GPU present both nights, in cents: last night's idle fraction priced at tonight's rate
    and hours, rounded to cents (:func:`~pipeline.analysis.cost.idle_usd_per_month`); ``U0`` when the
    price did not change (same rate, same hours, or both rates unknown), ``U1`` when the idle fraction
    did not; 0 when tonight's rate is unknown (the GPU is not priced tonight)."""
    u0, u1 = cents(_value(before, "idle_usd_per_month")), cents(_value(after, "idle_usd_per_month"))
    r0, r1 = _value(before, "rate_usd_per_hour"), _value(after, "rate_usd_per_hour")
    if _same(r0, r1) and float(hours_before) == float(hours_after):
        return u0
    if _fraction_same(before, after):
        return u1
    if r1 is None or math.isnan(float(r1)):
        return 0
    idle, window = _value(before, "idle_ns"), _value(before, "window_ns")
    fraction = int(idle) / int(window) if idle is not None and window else 0.0
    return cents(round(idle_usd_per_month(fraction, float(r1), float(hours_after)), 2))


def _text(row: dict, name: str) -> str:
    """``row[name]`` as text ("" when missing)."""
    return "" if row.get(name) is None else str(row[name])


def seat(row: dict) -> tuple | None:
    """Where one GPU (a fleet row as a dict; a column it lacks: missing) sits in its job, the same on every
    night it is profiled (docs/definitions.md#trend): ``(cluster, job, "gpu", gpu_key)`` when the key is a
    physical GPU or MIG instance uuid (:data:`UUID_KEYS`); ``(cluster, job, "bus", node, gpu_key)`` for a PCI
    bus id; else ``(cluster, job, "device", node, rank, device_ids)`` (rank "" when unknown); None when it
    has no device ids either (it is matched by :data:`FILE_MATCH`)."""
    job, key = tuple(_text(row, c) for c in JOB_KEY), _text(row, "gpu_key")
    if key.startswith(UUID_KEYS):
        return (*job, "gpu", key)
    if key.startswith("bus-"):
        return (*job, "bus", _text(row, "node"), key)
    if not _text(row, "device_ids"):
        return None
    return (*job, "device", *(_text(row, c) for c in SEAT))


def match_keys(before: list[dict], after: list[dict]) -> tuple[list[tuple], list[tuple]]:
    """The key each row of last night (``before``) and tonight (``after``) is matched by: a row and a row
    of the other night with the same key are one GPU (docs/definitions.md#trend).

    A row's key is its :func:`seat` when that seat is held by this one row on each night it appears in;
    when two or more rows of either night share a seat (e.g. two exports of one node, each with device 0
    and no rank), those rows on both nights (and a row without a seat) are matched by their job and
    :data:`FILE_MATCH` instead, and rows of the same job, file and GPU key in table order. Returns the two
    lists of keys, in the rows' order, each unique within its night."""
    counts: list[dict] = [{}, {}]
    seats = [[seat(r) for r in rows] for rows in (before, after)]
    for night, night_seats in zip(counts, seats):
        for s in night_seats:
            night[s] = night.get(s, 0) + 1
    out = []
    for rows, night_seats in zip((before, after), seats):
        keys, seen = [], {}
        for r, s in zip(rows, night_seats):
            if s is not None and max(c.get(s, 0) for c in counts) == 1:
                keys.append(("seat", *s))
                continue
            key = ("file", *(_text(r, c) for c in (*JOB_KEY, *FILE_MATCH)))
            seen[key] = seen.get(key, -1) + 1
            keys.append((*key, seen[key]))
        out.append(keys)
    return out[0], out[1]


def _rows(fleet: pd.DataFrame) -> list[dict]:
    """The rows of ``fleet`` as dicts of :data:`CHANGE_COLUMNS` (a column the table lacks: None)."""
    return [{c: _value(r, c) for c in CHANGE_COLUMNS} for r in fleet.to_dict("records")]


def gpu_changes(before: pd.DataFrame, after: pd.DataFrame, hours_before: float, hours_after: float) -> list[dict]:
    """The change of every GPU of either night, split by cause.

    Args:
        before, after: the analysed rows (no error rows) of last night's and tonight's fleet tables;
            the columns of :data:`CHANGE_COLUMNS` they have (one lacking is unknown).
        hours_before, hours_after: the hours per month each night priced with (``cost.hours_per_month``
            as its manifest records it).
    Returns:
        one dict per GPU (matched by :func:`match_keys`), last night's order then tonight's new ones:
        :data:`GPU_MATCH` values (tonight's when it is there: a GPU matched by its seat may have a new
        ``report`` and ``gpu_key``), ``side``
        (``both``, ``came``, ``went``), ``before`` / ``after`` (its idle USD per month each night, int
        cents; 0 where absent), ``idle``, ``rate``, ``fleet`` (int cents, ``idle + rate + fleet = after −
        before``), ``repriced`` (present both nights and its price changed), and both nights'
        ``rate_model``, ``rate_usd_per_hour``, ``rate_source`` (``before_…`` / ``after_…``; None where absent).
    """
    rows0, rows1 = _rows(before), _rows(after)
    keys0, keys1 = match_keys(rows0, rows1)
    tonight = dict(zip(keys1, rows1))
    out = []

    def entry(b: dict | None, a: dict | None) -> dict:
        one = a if a is not None else b
        e = {c: one[c] for c in GPU_MATCH}
        e.update({f"{side}_{c}": (row or {}).get(c) for side, row in (("before", b), ("after", a))
                  for c in ("rate_model", "rate_usd_per_hour", "rate_source")})
        u0 = cents(b["idle_usd_per_month"]) if b is not None else 0
        u1 = cents(a["idle_usd_per_month"]) if a is not None else 0
        e.update(before=u0, after=u1, idle=0, rate=0, fleet=0, repriced=False)
        if b is None or a is None:
            e.update(side="came" if b is None else "went", fleet=u1 - u0)
        else:
            c = _counterfactual(b, a, hours_before, hours_after)
            e.update(side="both", idle=u1 - c, rate=c - u0, repriced=not (
                _same(b["rate_usd_per_hour"], a["rate_usd_per_hour"]) and float(hours_before) == float(hours_after)))
        return e

    for key, b in zip(keys0, rows0):
        out.append(entry(b, tonight.pop(key, None)))
    for key, a in zip(keys1, rows1):
        if key in tonight:
            out.append(entry(None, a))
    return out


def _usd(c: int) -> float:
    """Int cents as USD."""
    return c / 100


def rate_changes(gpus: list[dict]) -> list[dict]:
    """The rate changes behind the rate part (``gpus``: :func:`gpu_changes`): per (last night's rate-card
    model and rate, tonight's) pair of the GPUs present both nights whose rate changed, ``{before_model,
    before_rate, after_model, after_rate, before_source, after_source, gpus, usd}`` (``usd``: their rate
    part, USD per month; rates USD per GPU-hour, None when unknown), largest ``|usd|`` first (ties: the models
    and rates). A change of the hours per month alone is not one (see :func:`split`'s ``hours``)."""
    groups: dict = {}
    for g in gpus:
        if g["side"] != "both" or _same(g["before_rate_usd_per_hour"], g["after_rate_usd_per_hour"]):
            continue
        key = tuple(g[f"{s}_{c}"] for s in ("before", "after") for c in ("rate_model", "rate_usd_per_hour"))
        e = groups.setdefault(key, {"before_model": key[0], "before_rate": key[1], "after_model": key[2],
                                    "after_rate": key[3], "before_source": set(), "after_source": set(),
                                    "gpus": 0, "cents": 0})
        e["gpus"] += 1
        e["cents"] += g["rate"]
        e["before_source"].add(str(g["before_rate_source"] or ""))
        e["after_source"].add(str(g["after_rate_source"] or ""))
    out = [dict(e, before_source="; ".join(sorted(e["before_source"])),
                after_source="; ".join(sorted(e["after_source"])), usd=_usd(e.pop("cents")))
           for e in groups.values()]
    return sorted(out, key=lambda e: (-abs(e["usd"]), str(e["before_model"]), str(e["after_model"]),
                                      -1.0 if e["before_rate"] is None else float(e["before_rate"]),
                                      -1.0 if e["after_rate"] is None else float(e["after_rate"])))


def cause_names(parts: dict) -> list[str]:
    """The parts of ``parts`` (``{idle, rate, fleet}`` in USD) that are not zero to the cent, in
    :data:`PARTS` order: what a job's or the fleet's change is made of."""
    return [p for p in PARTS if round(float(parts[p]), 2) != 0]


def split(before: pd.DataFrame, after: pd.DataFrame, hours_before: float, hours_after: float) -> dict:
    """Last night's and tonight's analysed rows (see :func:`gpu_changes`) -> the fleet's change split by cause.

    Returns (money in USD per month, whole cents; ``total = idle + rate + fleet`` exactly):
        ``total``, ``idle``, ``rate``, ``fleet``, ``causes`` (:func:`cause_names`);
        ``jobs``: ``{(cluster, job): {before, after, delta, idle, rate, fleet, causes}}`` for every job
        (:data:`~pipeline.schema.JOB_KEY`, as text) of either night (a job of one night only is all fleet);
        ``rates``: :func:`rate_changes`; ``hours``: ``{before, after}`` when the hours per month changed,
        else None; ``gpus``: counts ``{both, repriced, came, went}``.
    """
    gpus = gpu_changes(before, after, hours_before, hours_after)
    jobs: dict = {}
    for g in gpus:
        key = tuple("" if g[c] is None else str(g[c]) for c in JOB_KEY)
        j = jobs.setdefault(key, dict.fromkeys(("before", "after", *PARTS), 0))
        for k in ("before", "after", *PARTS):
            j[k] += g[k]
    total = {p: sum(g[p] for g in gpus) for p in PARTS}
    out = {"total": _usd(sum(total.values())), **{p: _usd(c) for p, c in total.items()}}
    out["causes"] = cause_names(out)
    out["jobs"] = {}
    for key, j in sorted(jobs.items()):
        usd = {k: _usd(v) for k, v in j.items()}
        out["jobs"][key] = dict(usd, delta=_usd(j["after"] - j["before"]), causes=cause_names(usd))
    out["rates"] = rate_changes(gpus)
    out["hours"] = (None if float(hours_before) == float(hours_after)
                    else {"before": float(hours_before), "after": float(hours_after)})
    out["gpus"] = {"both": sum(g["side"] == "both" for g in gpus), "repriced": sum(g["repriced"] for g in gpus),
                   "came": sum(g["side"] == "came" for g in gpus), "went": sum(g["side"] == "went" for g in gpus)}
    return out
