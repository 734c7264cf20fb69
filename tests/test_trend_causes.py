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


@pytest.mark.slow
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


@pytest.mark.slow
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
    from pipeline.fleet.changes import split

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


# -- matching a GPU across nights by its seat in its job ---------------------------------------------
# A real nightly sweep profiles the same job again: each night's captures are new files (a date or a job
# id in the name) and a process id is new every run, so a GPU keyed ``pid<P>/dev<D>`` has a new key.

SEAT_LABELS = """labels:
  - {match: "*alpha-*", cluster: east, job: alpha}
  - {match: "*beta-node01-*", cluster: east, job: beta, node: node01}
  - {match: "*beta-node02-*", cluster: east, job: beta, node: node02}
  - {match: "*gamma-*", cluster: west, job: gamma, node: node05}
"""
SEAT_NIGHTS = ("2026-11-10", "2026-11-11", "2026-11-12")
PID_SHIFT = 1000


def _shift_ids(gid, pids: set[int], shift: int):
    """A serialized globalPid / globalTid with its process id (bits 24..47) shifted, and its thread id when
    it is a process's main thread (tid = pid)."""
    if gid is None:
        return None
    pid, tid = (gid >> 24) & 0xFFFFFF, gid & 0xFFFFFF
    tid = tid + shift if tid in pids else tid
    return (gid & ~0xFFFFFFFFFFFF) | ((pid + shift) << 24) | tid


def copy_export_new_pids(src: Path, dst: Path, shift: int) -> None:
    """``src`` (a generated Nsight export) copied to ``dst`` as if captured by another run: every process id
    ``+ shift`` (PROCESSES, every globalPid / globalTid / endGlobalTid, the CUDA device map's pid)."""
    import shutil
    import sqlite3
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    pids = {int(p) for (p,) in con.execute("SELECT pid FROM PROCESSES")}
    con.create_function("shift_ids", 1, lambda g: _shift_ids(g, pids, shift))
    for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
        columns = {c[1] for c in con.execute(f'PRAGMA table_info("{name}")')}
        for col in columns & {"globalPid", "globalTid", "endGlobalTid"}:
            con.execute(f'UPDATE "{name}" SET {col} = shift_ids({col})')
        if "pid" in columns:
            con.execute(f'UPDATE "{name}" SET pid = pid + ?', (shift,))
    con.commit()
    con.close()
    (dst.parent / (dst.name + ".truth.json")).unlink(missing_ok=True)


def copy_trace_new_pids(src: Path, dst: Path, shift: int) -> None:
    """A generated PyTorch profiler trace copied to ``dst`` with its CPU process id ``+ shift`` (the GPU
    events' ``pid`` is the device index and stays)."""
    import gzip
    import json
    doc = json.loads(gzip.decompress(src.read_bytes()))
    cpu = {e["pid"] for e in doc["traceEvents"] if e.get("cat") in ("cpu_op", "cuda_runtime", "user_annotation")}
    for e in doc["traceEvents"]:
        if e.get("pid") in cpu:
            e["pid"] = e["pid"] + shift
        if e.get("tid") in cpu:
            e["tid"] = e["tid"] + shift
    dst.write_bytes(gzip.compress(json.dumps(doc).encode()))


@pytest.fixture(scope="module")
def seat_nights(tmp_path_factory):
    """Three real sweeps of one fleet whose every capture is a new file each night: job alpha (one export,
    2 H100s named by uuid), beta (one export per node, node01 and node02, each one GPU keyed by process and
    device), gamma (two PyTorch profiler traces, rank 0 and 1 on devices 0 and 1 of node05). Nights 2 and
    3 hold copies of night 1's captures under new names (job 907, 933 instead of 881) with new process ids;
    night 3 prices every GPU model $0.50/h below night 1 (``cost.cluster_rates``)."""
    from pipeline.synth.training import generate_training_traces
    root = tmp_path_factory.mktemp("trend_seats")
    state = root / "state"
    first = root / "881"
    first.mkdir()
    generate_training_report(str(first / "alpha-881.sqlite"), gpus=2, iterations=6, seed=11, straggler_rank=None)
    for node, seed in (("node01", 12), ("node02", 13)):
        generate_training_report(str(first / f"beta-{node}-881.sqlite"), gpus=1, iterations=6, seed=seed,
                                 straggler_rank=None, name_gpus=False)
    generate_training_traces(str(first / "gamma-881"), gpus=2, iterations=6, seed=14)
    folders = {SEAT_NIGHTS[0]: first}
    for night, job, shift in ((SEAT_NIGHTS[1], "907", PID_SHIFT), (SEAT_NIGHTS[2], "933", 2 * PID_SHIFT)):
        folder = root / job
        (folder / f"gamma-{job}").mkdir(parents=True)
        for src in first.glob("*.sqlite"):
            copy_export_new_pids(src, folder / src.name.replace("881", job), shift)
        for src in (first / "gamma-881").glob("*.json.gz"):
            copy_trace_new_pids(src, folder / f"gamma-{job}" / src.name, shift)
        folders[night] = folder

    def sweep(night: str, cost: str = "") -> None:
        cfg = root / f"{night}.yaml"
        cfg.write_text(f"sweep: {{inputs: ['{folders[night]}'], state_dir: '{state}'}}\n" + SEAT_LABELS + cost)
        run_cli("sweep", "--config", str(cfg), "--night", night, "--workers", "1")

    sweep(SEAT_NIGHTS[0])
    t0 = night_table(state, SEAT_NIGHTS[0])
    sweep(SEAT_NIGHTS[1])
    cheaper = {}
    for r in t0.itertuples():
        cheaper.setdefault(r.cluster, {})[r.rate_model] = float(r.rate_usd_per_hour) - 0.5
    rates = ", ".join(f"{c}: {{{', '.join(f'{m!r}: {v}' for m, v in sorted(models.items()))}}}"
                      for c, models in sorted(cheaper.items()))
    sweep(SEAT_NIGHTS[2], f"cost: {{cluster_rates: {{{rates}}}}}\n")
    return state


SEAT = ["cluster", "job", "node", "rank", "device_ids"]


def seat_table(state: Path, night: str) -> pd.DataFrame:
    """A night's rows by seat in the job (alpha's by GPU uuid: its two GPUs share node, rank and device 0)."""
    t = night_table(state, night)
    t["seat"] = [k if k.startswith("GPU-") else f"{n}/{r}/{d}" for k, n, r, d in
                 zip(t["gpu_key"], t["node"], t["rank"], t["device_ids"].astype(str))]
    assert not t.duplicated(["cluster", "job", "seat"]).any()
    return t.sort_values(["cluster", "job", "seat"]).reset_index(drop=True)


def why_line(state: Path, night: str, tmp_path: Path) -> str:
    md = tmp_path / f"{night}.md"
    run_cli("report", str(state), "--night", night, "--format", "md", "--out", str(md))
    return next(line for line in md.read_text().splitlines() if line.startswith("Why:"))


@pytest.mark.slow
def test_new_files_and_process_ids_of_the_same_gpus_are_no_fleet_change(seat_nights, tmp_path):
    """Night 2 vs 1: every capture is a new file, every process id new, the idle the same: the GPUs are
    matched by their seat (GPU uuid; else node, rank, device): idle, rate and fleet change exactly $0.00."""
    state = seat_nights
    t0, t1 = seat_table(state, SEAT_NIGHTS[0]), seat_table(state, SEAT_NIGHTS[1])
    assert len(t0) == 6 and list(t0["seat"]) == list(t1["seat"])
    assert not set(t0["report"]) & set(t1["report"])                      # new files
    pid_keyed = ~t0["gpu_key"].str.startswith("GPU-")
    assert pid_keyed.sum() == 4 and not set(t0["gpu_key"][pid_keyed]) & set(t1["gpu_key"][pid_keyed])  # new pids
    assert (t0[["idle_ns", "window_ns", "idle_usd_per_month"]] == t1[["idle_ns", "window_ns", "idle_usd_per_month"]]).all().all()
    assert set(t0["rank"]) == {"", "0", "1"}
    assert why_line(state, SEAT_NIGHTS[1], tmp_path) == (
        "Why: idle change $0.00 (at tonight's rates), rate change $0.00 (at last night's idle), "
        "fleet change $0.00 (GPUs and jobs that came or went: 0 GPU(s) came, 0 went).")


@pytest.mark.slow
def test_new_files_with_new_rates_are_all_rate_change(seat_nights, tmp_path):
    """Night 3 vs 2: new files and process ids again, every model $0.50/h cheaper: the whole change is the
    rate change, Σ (cents(f × (r − 0.5) × 730) − cents(f × r × 730)) over the six GPUs, worked out here."""
    state = seat_nights
    t1, t2 = seat_table(state, SEAT_NIGHTS[1]), seat_table(state, SEAT_NIGHTS[2])
    assert list(t1["seat"]) == list(t2["seat"]) and not set(t1["report"]) & set(t2["report"])
    assert (t2["rate_usd_per_hour"].astype(float) == t1["rate_usd_per_hour"].astype(float) - 0.5).all()
    rate = sum(cents(i, w, Fraction(str(r)) - Fraction(1, 2)) - cents(i, w, r)
               for i, w, r in zip(t1["idle_ns"], t1["window_ns"], t1["rate_usd_per_hour"]))
    total = sum(round(float(u) * 100) for u in t2["idle_usd_per_month"]) - sum(
        round(float(u) * 100) for u in t1["idle_usd_per_month"])
    assert rate == total < 0
    assert why_line(state, SEAT_NIGHTS[2], tmp_path) == (
        f"Why: idle change $0.00 (at tonight's rates), rate change {signed(rate)} (at last night's idle), "
        "fleet change $0.00 (GPUs and jobs that came or went: 0 GPU(s) came, 0 went).")


def test_an_ambiguous_seat_falls_back_to_file_and_gpu_key():
    """Hand-made rows ($/h × 730 h): two exports of node n1 each with device 0 and no rank share a seat, so
    they are matched by report and GPU key (a new file is a GPU that came, the old one went); a seat shared
    only tonight (n2) does the same on both nights; a seat held once each night (n3, rank 0, device 0) and a
    GPU uuid match whatever the file and process."""
    from pipeline.fleet.changes import gpu_changes, split

    def night(rows):
        return pd.DataFrame([{"cluster": "c", "job": "j", "node": n, "rank": k, "device_ids": d, "report": f,
                              "gpu_key": g, "status": "ok", "idle_ns": i, "window_ns": 100,
                              "idle_usd_per_month": round(i / 100 * r * 730, 2), "rate_model": "H100",
                              "rate_usd_per_hour": r, "rate_source": "card"} for n, k, d, f, g, i, r in rows])

    before = night([("n1", "", "0", "a-881.sqlite", "pid100/dev0", 10, 2.0),   # $146.00
                    ("n1", "", "0", "b-881.sqlite", "pid200/dev0", 20, 2.0),   # $292.00
                    ("n2", "", "0", "c-881.sqlite", "pid300/dev0", 30, 2.0),   # $438.00
                    ("n3", "0", "0", "d-881.sqlite", "pid400/dev0", 40, 2.0),  # $584.00
                    ("", "", "", "e-881.sqlite", "GPU-0a1b", 50, 2.0)])        # $730.00
    after = night([("n1", "", "0", "a-881.sqlite", "pid100/dev0", 10, 3.0),    # $219.00: same file, repriced
                   ("n1", "", "0", "b-907.sqlite", "pid250/dev0", 20, 2.0),    # $292.00: a new file
                   ("n2", "", "0", "c-907a.sqlite", "pid310/dev0", 30, 2.0),   # $438.00
                   ("n2", "", "0", "c-907b.sqlite", "pid320/dev0", 5, 2.0),    # $73.00
                   ("n3", "0", "0", "d-907.sqlite", "pid410/dev0", 40, 3.0),   # $876.00: repriced
                   ("", "", "", "e-907.sqlite", "GPU-0a1b", 60, 2.0)])         # $876.00: more idle
    sides = {(g["side"], g["report"]): (g["idle"], g["rate"], g["fleet"]) for g in gpu_changes(before, after, 730, 730)}
    assert sides == {("both", "a-881.sqlite"): (0, 7300, 0), ("went", "b-881.sqlite"): (0, 0, -29200),
                     ("went", "c-881.sqlite"): (0, 0, -43800), ("both", "d-907.sqlite"): (0, 29200, 0),
                     ("both", "e-907.sqlite"): (14600, 0, 0), ("came", "b-907.sqlite"): (0, 0, 29200),
                     ("came", "c-907a.sqlite"): (0, 0, 43800), ("came", "c-907b.sqlite"): (0, 0, 7300)}
    s = split(before, after, 730.0, 730.0)
    assert (s["idle"], s["rate"], s["fleet"], s["total"]) == (146.0, 365.0, 73.0, 584.0)
    assert s["total"] == round((219 + 292 + 438 + 73 + 876 + 876) - (146 + 292 + 438 + 584 + 730), 2)
    assert s["gpus"] == {"both": 3, "repriced": 2, "came": 3, "went": 2}
