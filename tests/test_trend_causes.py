"""Issue 26 point 5: a trend that separates causes (docs/definitions.md#trend).

Three real nights of ``gpu-idle sweep`` (one worker) over small generated exports: job ``alpha`` (2 H100s)
and ``beta`` (2 A100s) in cluster ``east``. Night 2 differs from night 1 only by alpha's H100 rate (a
``cost.cluster_rates`` entry in the night's ``--config``); night 3 lowers that rate again and adds job
``gamma`` (2 H100s, cluster ``west``). The reports (``gpu-idle report``: the night's HTML, ``--format md``)
must split each change into idle, rate and fleet parts, every expected dollar worked out here from the
night tables' ``idle_ns``, ``window_ns`` and ``rate_usd_per_hour`` in exact fractions.
"""
from __future__ import annotations

import html
import re
from fractions import Fraction
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli
from test_report_html import cells, table

from pipeline.synth import generate_training_report

HOURS = 730  # cost.hours_per_month's default: no night's config changes it
NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03")
LABELS = """labels:
  - {match: "*alpha*", cluster: east, job: alpha}
  - {match: "*beta*", cluster: east, job: beta}
  - {match: "*gamma*", cluster: west, job: gamma}
"""


def cents(idle_ns: int, window_ns: int, rate) -> int:
    """One GPU's idle USD per month in whole cents: idle_ns / window_ns × rate × 730, exact, to the cent."""
    return round(Fraction(int(idle_ns), int(window_ns)) * Fraction(str(rate)) * HOURS * 100)


def usd(c: int) -> str:
    return f"${abs(c) // 100:,}.{abs(c) % 100:02d}"


def signed(c: int) -> str:
    return "$0.00" if c == 0 else ("+" if c > 0 else "−") + usd(c)


def night_table(state: Path, night: str) -> pd.DataFrame:
    return pd.read_csv(state / "nights" / night / "fleet.csv", keep_default_na=False)


@pytest.fixture(scope="module")
def nights(tmp_path_factory):
    """The sweep state after the three nights, and night 1's H100 rate (the default card's)."""
    root = tmp_path_factory.mktemp("trend_causes")
    inputs = root / "in"
    inputs.mkdir()
    generate_training_report(str(inputs / "alpha.sqlite"), gpus=2, iterations=6, seed=1, straggler_rank=None)
    generate_training_report(str(inputs / "beta.sqlite"), gpus=2, iterations=6, seed=2, straggler_rank=None,
                             cluster_model="NVIDIA A100-SXM4-80GB")
    generate_training_report(str(root / "gamma.sqlite"), gpus=2, iterations=6, seed=3, straggler_rank=None)
    state = root / "state"

    def sweep(night: str, cost: str = "", extra: tuple = ()) -> None:
        cfg = root / f"{night}.yaml"
        cfg.write_text(f"sweep: {{inputs: ['{inputs}'], state_dir: '{state}'}}\n" + LABELS + cost)
        run_cli("sweep", "--config", str(cfg), "--night", night, "--workers", "1", *extra)

    sweep(NIGHTS[0])
    first = night_table(state, NIGHTS[0])
    alpha = first[first["job"] == "alpha"]
    model, rate = alpha["rate_model"].iloc[0], float(alpha["rate_usd_per_hour"].iloc[0])
    # Night 2: the same profiles, alpha's GPU model cheaper by $0.50/h in its cluster (beta's model untouched).
    sweep(NIGHTS[1], f"cost: {{cluster_rates: {{east: {{'{model}': {rate - 0.5}}}}}}}\n")
    # Night 3: $0.50/h cheaper again, and job gamma is profiled too.
    sweep(NIGHTS[2], f"cost: {{cluster_rates: {{east: {{'{model}': {rate - 1.0}}}}}}}\n", (str(root / "gamma.sqlite"),))
    return state, model, rate


def rows_by(page: str, table_id: str, attr: str) -> dict[str, tuple[str, list[str]]]:
    """``{attr value: (the row's opening tag, its cells)}`` of a table."""
    return {html.unescape(k): (tag, cells(body)) for tag, k, body in
            re.findall(rf'(<tr[^>]* {attr}="([^"]*)"[^>]*>)(.*?)</tr>', table(page, table_id), re.S)}


def expected(state: Path, before: str, after: str) -> dict:
    """Per job and in total, by hand: each GPU's cents both nights from its own idle_ns, window_ns and rate
    (checked against the stored dollars); GPUs of both nights split into idle (``U1 − C``) and rate
    (``C − U0``), ``C`` = last night's idle at tonight's rate; GPUs of one night are fleet change."""
    t0, t1 = night_table(state, before), night_table(state, after)
    for t in (t0, t1):
        for r in t.itertuples():
            assert round(float(r.idle_usd_per_month) * 100) == cents(r.idle_ns, r.window_ns, r.rate_usd_per_hour)
    key = ["cluster", "job", "report", "gpu_key"]
    cols = key + ["idle_ns", "window_ns", "rate_usd_per_hour"]
    both = t0[cols].merge(t1[cols], on=key, how="outer", suffixes=("0", "1"), indicator=True)
    out = {"jobs": {}, "idle": 0, "rate": 0, "fleet": 0}
    for r in both.to_dict("records"):
        side = r["_merge"]
        job = out["jobs"].setdefault(r["job"], {"idle": 0, "rate": 0, "fleet": 0, "before": 0, "after": 0})
        u0 = cents(r["idle_ns0"], r["window_ns0"], r["rate_usd_per_hour0"]) if side != "right_only" else 0
        u1 = cents(r["idle_ns1"], r["window_ns1"], r["rate_usd_per_hour1"]) if side != "left_only" else 0
        if side == "both":
            c = cents(r["idle_ns0"], r["window_ns0"], r["rate_usd_per_hour1"])
            parts = {"idle": u1 - c, "rate": c - u0, "fleet": 0}
        else:
            parts = {"idle": 0, "rate": 0, "fleet": u1 - u0}
        for p, v in parts.items():
            job[p] += v
            out[p] += v
        job["before"] += u0
        job["after"] += u1
    out["total"] = out["idle"] + out["rate"] + out["fleet"]
    return out


def check_html(page: str, exp: dict, model: str, rate_from: float, rate_to: float, gpus_came: int) -> None:
    """The report's trend section: the three parts and their total, the changed price, the movers."""
    parts = rows_by(page, "change-causes", "data-part")
    for part in ("idle", "rate", "fleet", "total"):
        tag, row = parts[part]
        assert f'data-usd="{exp[part] / 100:.2f}"' in tag and row[-1] == signed(exp[part]), (part, row)
    assert re.search(r'id="fleet-delta">([^<]+)<', page).group(1) == signed(exp["total"])
    assert f"idle {signed(exp['idle'])} · rates {signed(exp['rate'])}" in page
    assert f"came or went ({gpus_came} GPU(s) came, 0 went)" in parts["fleet"][1][0]
    prices = rows_by(page, "rate-changes", "data-model")
    alpha = exp["jobs"]["alpha"]
    assert list(prices) == [model]
    assert prices[model][1] == [model, f"${rate_from:,.2f}/h", f"${rate_to:,.2f}/h", "2", signed(alpha["rate"])]
    movers = rows_by(page, "movers", "data-job")
    assert list(movers) == ["alpha"]  # beta's cost did not move; gamma is new
    tag, row = movers["alpha"]
    assert row == ["alpha", usd(alpha["before"]), usd(alpha["after"]), signed(alpha["after"] - alpha["before"]),
                   "$0.00", "rates"]
    assert 'data-idle="0.00"' in tag and f'data-rate="{alpha["rate"] / 100:.2f}"' in tag


def test_a_night_that_differs_only_by_rates(nights, tmp_path):
    """Night 2 vs night 1: idle exactly $0.00, the whole change is the rate change, named H100 $r → $r − 0.5."""
    state, model, rate = nights
    t0, t1 = night_table(state, NIGHTS[0]), night_table(state, NIGHTS[1])
    key = ["report", "gpu_key"]
    same = t0.sort_values(key).reset_index(drop=True), t1.sort_values(key).reset_index(drop=True)
    assert (same[0][["idle_ns", "window_ns"]] == same[1][["idle_ns", "window_ns"]]).all().all()  # same profiles
    exp = expected(state, NIGHTS[0], NIGHTS[1])
    assert exp["idle"] == 0 and exp["fleet"] == 0 and exp["rate"] < 0 and exp["jobs"]["beta"]["rate"] == 0
    # The rate change is last night's idle × the change of the rate (to a cent per GPU).
    alpha = t0[t0["job"] == "alpha"]
    exact = sum(Fraction(int(i), int(w)) * Fraction("-0.5") * HOURS * 100 for i, w in zip(alpha["idle_ns"], alpha["window_ns"]))
    assert abs(exact - exp["rate"]) <= len(alpha)
    # The night's own report (the sweep renders it with `gpu-idle report`'s code).
    page = (state / "nights" / NIGHTS[1] / "report.html").read_text(encoding="utf-8")
    check_html(page, exp, model, rate, rate - 0.5, gpus_came=0)
    assert "same jobs both nights</td>" in table(page, "job-changes")
    md = tmp_path / "n2.md"
    run_cli("report", str(state), "--night", NIGHTS[1], "--format", "md", "--out", str(md))
    text = md.read_text()
    assert (f"Why: idle change $0.00 (at tonight's rates), rate change {signed(exp['rate'])} (at last night's idle), "
            f"fleet change $0.00 (GPUs and jobs that came or went: 0 GPU(s) came, 0 went).") in text
    assert (f"Prices changed: {model} ${rate:,.2f} → ${rate - 0.5:,.2f}/GPU-hour (2 GPU(s), "
            f"{signed(exp['rate'])}).") in text
    assert f"Biggest movers: alpha {signed(exp['rate'])} (rates {signed(exp['rate'])})." in text


def test_a_job_added_the_same_night_is_fleet_change_only(nights, tmp_path):
    """Night 3 vs night 2: rates again, and job gamma added: gamma's whole dollars are the fleet change."""
    state, model, rate = nights
    exp = expected(state, NIGHTS[1], NIGHTS[2])
    t2 = night_table(state, NIGHTS[2])
    gamma = t2[t2["job"] == "gamma"]
    assert len(gamma) == 2
    assert exp["fleet"] == sum(cents(i, w, r) for i, w, r in zip(gamma["idle_ns"], gamma["window_ns"],
                                                                  gamma["rate_usd_per_hour"])) > 0
    assert exp["idle"] == 0 and exp["jobs"]["gamma"] == {"idle": 0, "rate": 0, "fleet": exp["fleet"], "before": 0,
                                                         "after": exp["fleet"]}
    out = tmp_path / "report.html"
    run_cli("report", str(state), "--out", str(out))
    page = out.read_text(encoding="utf-8")
    check_html(page, exp, model, rate - 0.5, rate - 1.0, gpus_came=2)
    changes = rows_by(page, "job-changes", "data-job")
    assert list(changes) == ["gamma"] and changes["gamma"][1] == ["new", "gamma", "west", usd(exp["fleet"])]
    md = tmp_path / "n3.md"
    run_cli("report", str(state), "--format", "md", "--out", str(md))
    text = md.read_text()
    assert (f"Why: idle change $0.00 (at tonight's rates), rate change {signed(exp['rate'])} (at last night's idle), "
            f"fleet change {signed(exp['fleet'])} (GPUs and jobs that came or went: 2 GPU(s) came, 0 went).") in text
    assert f"New jobs: gamma ({usd(exp['fleet'])})." in text


def test_idle_and_rate_changing_together_split_to_the_cent():
    """The split itself on hand-made rows (730 h then, as noted, 720 h): per GPU, idle = U1 − C and
    rate = C − U0 with C = f0 × r1 × H1 rounded to cents; a GPU gone is fleet change; a change of the
    hours per month alone is a rate change, named."""
    from pipeline.report.changes import split

    def night(rows):
        return pd.DataFrame([{"cluster": "c", "job": j, "report": f"{j}.sqlite", "gpu_key": g, "status": "ok",
                              "idle_ns": i, "window_ns": w, "idle_usd_per_month": u, "rate_model": m,
                              "rate_usd_per_hour": r, "rate_source": "card"} for j, g, i, w, u, m, r in rows])

    # a: 25 % idle at $4/h ($730.00) -> 30 % at $3/h ($657.00); C = 0.25 × 3 × 730 = $547.50.
    # d: 1/3 idle at $4/h ($973.33) -> 1/7 at $3.5/h ($365.00); C = 1/3 × 3.5 × 730 = $851.666… -> $851.67.
    # b: gone ($40.00: 8/73 × 0.5 × 730).
    before = night([("a", "g0", 25, 100, 730.00, "H100", 4.0), ("d", "g0", 1, 3, 973.33, "H100", 4.0),
                    ("b", "g0", 8, 73, 40.0, "A100", 0.5)])
    after = night([("a", "g0", 30, 100, 657.00, "H100", 3.0), ("d", "g0", 1, 7, 365.00, "H100", 3.5)])
    s = split(before, after, 730.0, 730.0)
    assert s["jobs"][("c", "a")] == {"before": 730.0, "after": 657.0, "delta": -73.0, "idle": 109.5, "rate": -182.5,
                                     "fleet": 0.0, "causes": ["idle", "rate"]}
    assert (s["jobs"][("c", "d")]["idle"], s["jobs"][("c", "d")]["rate"]) == (-486.67, -121.66)
    assert s["jobs"][("c", "b")]["fleet"] == -40.0 and s["gpus"] == {"both": 2, "repriced": 2, "came": 0, "went": 1}
    assert (s["idle"], s["rate"], s["fleet"], s["total"]) == (-377.17, -304.16, -40.0, -721.33)
    assert round((657.00 + 365.00) - (730.00 + 973.33 + 40.0), 2) == s["total"]
    assert [(r["before_rate"], r["after_rate"], r["gpus"], r["usd"]) for r in s["rates"]] == [
        (4.0, 3.0, 1, -182.5), (4.0, 3.5, 1, -121.66)]
    # Hours per month 730 -> 720 with the same idle and rate: all rate change, no rate-card entry changed.
    same = night([("a", "g0", 50, 100, 1460.00, "H100", 4.0)])
    s = split(same, night([("a", "g0", 50, 100, 1440.00, "H100", 4.0)]), 730.0, 720.0)
    assert (s["idle"], s["rate"], s["fleet"]) == (0.0, -20.0, 0.0) and s["rates"] == []
    assert s["hours"] == {"before": 730.0, "after": 720.0} and s["gpus"]["repriced"] == 1
