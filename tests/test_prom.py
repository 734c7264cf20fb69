"""Issue 48, points 1 and 2: the fleet table as Prometheus metrics (docs/outputs.md#prometheus-metrics) and the
Grafana dashboard over them (deploy/grafana/).

- the example fleet's metrics file (``gpu-idle run --prom``, a broken report added) passes the real
  ``promtool check metrics``, and every value parsed back (prometheus_client's parser) equals the fleet table's;
- assumed and unpriced dollars are marked by ``pricing``, unpriced ones never written as 0;
- hostile names (quotes, backslashes, newlines, unicode) are escaped and parse back identical;
- the file is written atomically; one that cannot be written is an error (exit 1), the table still printed;
- the dashboard's queries name only metrics the product writes.
"""
from __future__ import annotations

import json
import math
import re
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import REPO, promtool_check, run_cli
from pipeline.fleet import prom
from pipeline.accounting.joined import COVERAGE_COLUMNS, measured_share
from pipeline.fleet.prom import COVERAGE_NAMES, METRIC_NAMES, metrics_text, write_prom
from pipeline.model import CATEGORIES
from pipeline.schema import FIXABLE

GPU = ("cluster", "job", "node", "report", "gpu")
HOSTILE_JOB = 'say "hi"\\ \u00e9t\u00e9\nnext'
HOSTILE_REPORT = '/data/r\u00e9sum\u00e9 "x" \\ y\n\u6f22.sqlite'
#: The example's broken report: a file name with a quote, a backslash, a new line and unicode.
BROKEN = 'broken "x" \\ \u00e9\n\u6f22.sqlite'


def samples(text: str) -> dict:
    """``{(name, frozenset(labels.items())): value}`` of a metrics text, parsed by prometheus_client; each
    series once."""
    out: dict = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in out, key
            out[key] = s.value
    return out


def cell(value) -> str:
    return "" if value is None or (not isinstance(value, str) and pd.isna(value)) else str(value)


# ---- the example fleet -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``gpu-idle run --prom`` on the example fleet with one broken report added, its file and job named with a
    quote, a backslash, a new line and unicode: ``(fleet table, metrics file, run arguments)``."""
    root = tmp_path_factory.mktemp("prom")
    run_cli("synth", "--example", str(root / "ex"))
    (root / "ex" / BROKEN).write_bytes(b"not a database")
    labels = yaml.safe_load((root / "ex" / "labels.yaml").read_text(encoding="utf-8"))
    labels["labels"].append({"match": "*broken*", "cluster": "c\\1", "job": HOSTILE_JOB})
    (root / "ex" / "labels.yaml").write_text(yaml.safe_dump(labels), encoding="utf-8")
    (root / "metrics").mkdir()   # --prom's folder must exist (a misspelt one is an error)
    args = ["run", str(root / "ex"), "--out", str(root / "out"), "--config", str(root / "ex" / "labels.yaml")]
    proc = run_cli(*args, "--prom", str(root / "metrics" / "gpu_idle.prom"), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr   # the broken report: exit status unchanged
    fleet = pd.read_parquet(root / "out" / "fleet.parquet")
    return fleet, root / "metrics" / "gpu_idle.prom", args


@pytest.mark.needs_promtool
def test_the_example_fleets_metrics_pass_promtool(example):
    _, path, _ = example
    promtool_check(path)


def test_the_example_fleets_metrics_equal_the_fleet_table(example):
    """Each value parsed back equals the table's, worked out here from its columns; nothing else is written."""
    fleet, path, _ = example
    got = samples(path.read_text(encoding="utf-8"))
    want: dict = {}

    def put(name, labels, value):
        if value is not None and not pd.isna(value):
            want[("gpu_idle_" + name, frozenset(labels.items()))] = float(value)

    ok = fleet[fleet["status"].isin(["ok", "partial"])]
    assert len(ok) >= 8 and (fleet["status"] == "error").sum() == 1
    for r in ok.to_dict("records"):
        gpu = dict(zip(GPU, (cell(r["cluster"]), cell(r["job"]), cell(r["node"]), r["report"], r["gpu_key"])))
        priced = "unpriced" if r["unpriced"] else "assumed" if r["rate_assumed"] else "card"
        info = [v for (n, k), v in got.items() if n == "gpu_idle_gpu_info" and gpu.items() <= dict(k).items()]
        assert info == [1.0]
        name = next(dict(k)["gpu_name"] for n, k in got if n == "gpu_idle_gpu_info" and gpu.items() <= dict(k).items())
        put("gpu_info", {**gpu, "gpu_name": name, "model": cell(r["gpu_model"]), "pricing": priced,
                         "tier": r["confidence_tier"], "status": r["status"]}, 1)
        put("window_seconds", gpu, r["window_ns"] / 1e9)
        put("idle_seconds", gpu, r["idle_ns"] / 1e9)
        put("idle_ratio", gpu, r["idle_pct"] / 100)
        put("busy_ratio", gpu, r["busy_pct"] / 100)
        put("sampled_util_ratio", gpu, r["sampled_util_pct"] / 100)
        put("comm_exposed_seconds", gpu, r["comm_exposed_ns"] / 1e9)
        put("comm_exposed_ratio", gpu, r["comm_exposed_pct"] / 100)
        measured = r["collective_wait_status"] == "measured"
        if measured:
            put("collective_wait_seconds", gpu, r["collective_wait_ns"] / 1e9)
        put("confidence_level", {**gpu, "tier": r["confidence_tier"]},
            ["toy", "low", "medium", "high"].index(r["confidence_tier"]))
        usd = {**gpu, "pricing": priced, "tier": r["confidence_tier"], "account": "", "user": ""}  # no accounting
        for c in CATEGORIES:
            put("category_idle_seconds", {**gpu, "category": c}, r[f"cat_{c}_ns"] / 1e9)
            put("category_idle_ratio", {**gpu, "category": c}, r[f"cat_{c}_pct"] / 100)
            if priced != "unpriced":
                put("category_idle_dollars_per_month", {**usd, "category": c},
                    r[f"fix_{c}_usd_per_month"] if c in FIXABLE else r[f"{c}_usd_per_month"])
        if priced != "unpriced":
            put("idle_dollars_per_month", usd, r["idle_usd_per_month"])
            put("comm_exposed_dollars_per_month", usd, r["comm_exposed_usd_per_month"])
            if measured:
                put("collective_wait_dollars_per_month", usd, r["collective_wait_usd_per_month"])
    for (cluster, job), rows in fleet.groupby(["cluster", "job"]):
        good = rows[rows["status"].isin(["ok", "partial"])]
        for priced, n in (("card", (~good["unpriced"] & ~good["rate_assumed"]).sum()),
                          ("assumed", good["rate_assumed"].sum()), ("unpriced", good["unpriced"].sum())):
            put("gpus", {"cluster": cluster, "job": job, "pricing": priced}, n)
        bad = rows.loc[rows["status"] == "error", "report"].unique()
        put("failed_reports", {"cluster": cluster, "job": job}, len(bad))
        for report in bad:
            put("failed_report_info", {"cluster": cluster, "job": job, "report": report}, 1)
    assert got == want
    # the broken report's hostile file and job names, parsed back identical
    assert want[("gpu_idle_failed_report_info", frozenset({"cluster": "c\\1", "job": HOSTILE_JOB,
                                                           "report": str(path.parent.parent / "ex" / BROKEN)}.items()))]
    # the fleet's total, read back: the dollar series sum to the table's
    total = sum(v for (n, _), v in got.items() if n == "gpu_idle_idle_dollars_per_month")
    assert math.isclose(total, fleet["idle_usd_per_month"].astype(float).sum(), rel_tol=1e-12)
    assert sum(v for (n, _), v in got.items() if n == "gpu_idle_failed_reports") == 1
    # every metric but the night's (a run) and the coverage ones (no accounting); the sampled meter only where a
    # GPU's cell holds a reading (the example's windows are under the 6 periods one needs: none; metered below)
    no_reading = ok["sampled_util_pct"].isna().all()
    assert {n for n, _ in got} == set(METRIC_NAMES) - {"gpu_idle_night_timestamp_seconds"} - set(COVERAGE_NAMES) - (
        {"gpu_idle_sampled_util_ratio"} if no_reading else set())


def test_an_unwritable_metrics_file_is_an_error_and_the_table_still_printed(example, tmp_path):
    """The second run reuses every result; its metrics file's folder is a file: exit 1, one ERROR line."""
    _, _, args = example
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    proc = run_cli(*args, "--prom", str(tmp_path / "taken" / "gpu_idle.prom"), check=False)
    assert proc.returncode == 1
    assert f"gpu-idle: ERROR: metrics file {tmp_path / 'taken' / 'gpu_idle.prom'} not written" in proc.stderr
    assert "$/month" in proc.stdout
    # no accounting: the summary and the records say nothing of coverage
    assert "GPU spend" not in proc.stdout and "allocation" not in proc.stdout
    records = list((Path(args[args.index("--out") + 1]) / "records").glob("*.md"))
    assert records and not [p for p in records if "Coverage:" in p.read_text(encoding="utf-8")]


def test_a_metrics_file_whose_folder_does_not_exist_is_an_error_and_no_folder_is_made(example, tmp_path):
    """A misspelt ``--prom`` folder is not created (a node exporter would never read it): exit 1, the path named."""
    _, _, args = example
    path = tmp_path / "nonexistent" / "dir" / "x.prom"
    proc = run_cli(*args, "--prom", str(path), check=False)
    assert proc.returncode == 1
    assert (f"gpu-idle: ERROR: metrics file {path} not written: its folder {path.parent} does not exist"
            in proc.stderr), proc.stderr
    assert not (tmp_path / "nonexistent").exists()
    assert "$/month" in proc.stdout


@pytest.mark.slow
def test_a_sweep_writes_its_nights_metrics_where_its_setting_says(example, tmp_path):
    """``sweep.prom`` (relative: under the state folder) gets the night's table and its date; ``--prom`` wins."""
    _, _, args = example
    ex = Path(args[1])
    (tmp_path / "sweep.yaml").write_text(f"sweep:\n  state_dir: {tmp_path / 'state'}\n  prom: metrics/gpu_idle.prom\n",
                                         encoding="utf-8")
    sweep = ["sweep", str(ex / "resnet-finetune.sqlite"), "--config", str(ex / "labels.yaml"), "--config",
             str(tmp_path / "sweep.yaml"), "--night", "2026-12-05"]
    run_cli(*sweep)
    got = samples((tmp_path / "state" / "metrics" / "gpu_idle.prom").read_text(encoding="utf-8"))
    assert got[("gpu_idle_night_timestamp_seconds", frozenset())] == 1796515200.0 - 86400
    night = pd.read_parquet(tmp_path / "state" / "history" / "run_date=2026-12-05" / "fleet.parquet")
    dollars = sorted(v for (n, _), v in got.items() if n == "gpu_idle_idle_dollars_per_month")
    assert dollars == sorted(night["idle_usd_per_month"].dropna().astype(float))
    assert len(dollars) == 4
    run_cli(*sweep, "--prom", str(tmp_path / "other.prom"))
    assert samples((tmp_path / "other.prom").read_text(encoding="utf-8")) == got


@pytest.fixture(scope="module")
def metered(tmp_path_factory):
    """A GPU whose window holds a meter reading: 10 kernels of 10 ms back to back (W = 100 ms, all busy), sampled
    every 10 ms: 10 periods (at least the 6 a reading needs), each busy: 100 %. ``(fleet table, metrics text)``."""
    from test_meter import steady_trace

    root = tmp_path_factory.mktemp("prom_meter")
    (root / "in").mkdir()
    steady_trace(str(root / "in" / "steady_rank0.json"))
    (root / "c.yaml").write_text("meter:\n  sample_ns: 10000000\nlabels:\n  - {match: '*', cluster: lab, job: "
                                 "steady}\n", encoding="utf-8")
    run_cli("run", str(root / "in"), "--out", str(root / "out"), "--window", "span", "--config", str(root / "c.yaml"),
            "--prom", str(root / "m.prom"))
    return pd.read_parquet(root / "out" / "fleet.parquet"), (root / "m.prom").read_text(encoding="utf-8")


def test_a_window_with_a_meter_reading_writes_it(metered):
    fleet, text = metered
    (r,) = fleet.to_dict("records")
    assert (r["sample_periods"], r["sampled_busy_periods"], r["sampled_util_pct"]) == (10, 10, 100.0)
    got = {n: v for (n, _), v in samples(text).items() if n in ("gpu_idle_sampled_util_ratio", "gpu_idle_busy_ratio")}
    assert got == {"gpu_idle_sampled_util_ratio": 1.0, "gpu_idle_busy_ratio": 1.0}


# ---- small fleets worked out by hand ------------------------------------------------------------------

def row(**kw) -> dict:
    base = {"report": "a.sqlite", "cluster": "c1", "job": "train", "node": "n1", "gpu_key": "pid1/dev0",
            "gpu_model": "H100", "status": "ok", "window_ns": 2_000_000_000, "idle_ns": 500_000_000,
            "idle_pct": 25.0, "busy_pct": 75.0, "sampled_util_pct": 100.0, "comm_exposed_ns": 0,
            "comm_exposed_pct": 0.0, "collective_wait_status": "none", "collective_wait_ns": None,
            "rate_assumed": False, "unpriced": False, "idle_usd_per_month": 500.0,
            "comm_exposed_usd_per_month": 0.0, "collective_wait_usd_per_month": None, "confidence_tier": "medium",
            **{f"cat_{c}_ns": 0 for c in CATEGORIES}, **{f"cat_{c}_pct": 0.0 for c in CATEGORIES},
            **{f"fix_{c}_usd_per_month": 0.0 for c in FIXABLE},
            "profiler_usd_per_month": 0.0, "untraced_usd_per_month": 0.0}
    return {**base, **kw}




def test_assumed_and_unpriced_dollars_are_marked_never_mixed():
    """Three GPUs: on the card ($100), assumed ($40), unpriced (no dollars: no series, counted apart)."""
    fleet = pd.DataFrame([row(gpu_key="g0", idle_usd_per_month=100.0),
                          row(gpu_key="g1", idle_usd_per_month=40.0, rate_assumed=True),
                          row(gpu_key="g2", idle_usd_per_month=None, comm_exposed_usd_per_month=None, unpriced=True,
                              **{f"fix_{c}_usd_per_month": None for c in FIXABLE})])
    got = samples(metrics_text(fleet))
    dollars = {dict(k)["gpu"]: (dict(k)["pricing"], v) for (n, k), v in got.items()
               if n == "gpu_idle_idle_dollars_per_month"}
    assert dollars == {"g0": ("card", 100.0), "g1": ("assumed", 40.0)}
    assert not [k for (n, k) in got if n.endswith("_dollars_per_month") and dict(k)["gpu"] == "g2"]
    gpus = {dict(k)["pricing"]: v for (n, k), v in got.items() if n == "gpu_idle_gpus"}
    assert gpus == {"card": 1.0, "assumed": 1.0, "unpriced": 1.0}
    assert {dict(k)["gpu"]: dict(k)["pricing"] for n, k in got if n == "gpu_idle_gpu_info"} == {
        "g0": "card", "g1": "assumed", "g2": "unpriced"}


def allocation(job_id, held_gpu_ns, represented_gpu_ns, held_usd, represented_usd, status, **kw) -> dict:
    base = {c: None for c in COVERAGE_COLUMNS}
    return {**base, "source": "slurm", "job_id": job_id, "user": "alice", "account": "vision", "partition": "gpu",
            "held_gpu_ns": held_gpu_ns, "represented_gpu_ns": represented_gpu_ns, "held_usd": held_usd,
            "represented_usd": represented_usd, "rate_assumed": False, "status": status, **kw}


H = 3_600_000_000_000
#: Four allocations by hand: 101 on the card (8 GPU-h held, $16.00, 2 GPU-h captured, $4.00), 102 at an assumed
#: rate (1 GPU-h, $3.00, captured), 103 unpriced and never traced (5 GPU-h), 104 never traced, its account and
#: job id hostile (2 GPU-h, $6.00). Share measured: (4 + 3) / (16 + 3 + 6); 2 allocations never traced.
HOSTILE_ACCOUNT = 'team "a"\\ b\n\u00e9'
_SMALL = pd.DataFrame([allocation("101", 8 * H, 2 * H, 16.0, 4.0, "partly measured"),
                       allocation("102", H, H, 3.0, 3.0, "measured", rate_assumed=True, user="bob"),
                       allocation("103", 5 * H, 0, math.nan, math.nan, "not measured", user="carol"),
                       allocation('ns/"x"\\', 2 * H, 0, 6.0, 0.0, "not measured", source="kubernetes",
                                  account=HOSTILE_ACCOUNT, partition="ns")], columns=COVERAGE_COLUMNS)
SMALL_COVERAGE = (pd.DataFrame([row()]), None, _SMALL, measured_share(_SMALL))


def test_small_coverage_by_hand():
    got = {(n, dict(k).get("sched_job"), dict(k).get("pricing"), dict(k).get("status")): v
           for (n, k), v in samples(metrics_text(*SMALL_COVERAGE)).items() if n in COVERAGE_NAMES}
    hostile = 'ns/"x"\\'
    assert got == {
        ("gpu_idle_allocation_info", "101", "card", "partly measured"): 1.0,
        ("gpu_idle_allocation_info", "102", "assumed", "measured"): 1.0,
        ("gpu_idle_allocation_info", "103", "unpriced", "not measured"): 1.0,
        ("gpu_idle_allocation_info", hostile, "card", "not measured"): 1.0,
        **{("gpu_idle_held_gpu_seconds", j, None, None): h for j, h in (("101", 28800.0), ("102", 3600.0),
                                                                         ("103", 18000.0), (hostile, 7200.0))},
        **{("gpu_idle_represented_gpu_seconds", j, None, None): h for j, h in (("101", 7200.0), ("102", 3600.0),
                                                                                ("103", 0.0), (hostile, 0.0))},
        # the unpriced allocation has no dollars (unknown, not $0); the assumed rate is marked
        ("gpu_idle_held_dollars", "101", "card", None): 16.0, ("gpu_idle_held_dollars", "102", "assumed", None): 3.0,
        ("gpu_idle_held_dollars", hostile, "card", None): 6.0,
        ("gpu_idle_represented_dollars", "101", "card", None): 4.0,
        ("gpu_idle_represented_dollars", "102", "assumed", None): 3.0,
        ("gpu_idle_represented_dollars", hostile, "card", None): 0.0,
        ("gpu_idle_gpu_spend_measured_ratio", None, None, None): 7 / 25,
        ("gpu_idle_untraced_allocations", None, None, None): 2.0}
    text = metrics_text(*SMALL_COVERAGE)
    assert 'account="team \\"a\\"\\\\ b\\n\u00e9"' in text   # escaped as the format says
    assert any(dict(k).get("account") == HOSTILE_ACCOUNT for n, k in samples(text))
    # without accounting: none of them
    assert not set(COVERAGE_NAMES) & {n for n, _ in samples(metrics_text(pd.DataFrame([row()])))}
    # nothing priced: no share (unknown), the rest as before
    unpriced = _SMALL.iloc[[2]]
    names = {n for n, _ in samples(metrics_text(pd.DataFrame([row()]), None, unpriced, measured_share(unpriced)))}
    assert "gpu_idle_gpu_spend_measured_ratio" not in names and "gpu_idle_held_dollars" not in names
    assert "gpu_idle_untraced_allocations" in names


def test_dollar_series_say_who_pays_and_sum_to_the_teams_table():
    """Four priced GPUs: vision/alice $100 on the card, vision/bob $40 assumed, nlp/carol $7.50, one no allocation
    matched $10; one unpriced (vision/alice: no dollars). By account: vision 140, nlp 7.50, the unmatched 10 (no
    account label); by user: alice 100, bob 40, carol 7.50. Each equals teams.csv's (joined.teams)."""
    from pipeline.accounting.joined import NO_RECORD, teams

    def held(key, account, user, job_id, **kw):
        return row(gpu_key=key, sched_account=account, sched_user=user, sched_job_id=job_id, **kw)

    fleet = pd.DataFrame([held("g0", "vision", "alice", "101", idle_usd_per_month=100.0),
                          held("g1", "vision", "bob", "102", idle_usd_per_month=40.0, rate_assumed=True),
                          held("g2", "nlp", "carol", "103", idle_usd_per_month=7.5),
                          held("g3", None, None, None, idle_usd_per_month=10.0),
                          held("g4", "vision", "alice", "101", idle_usd_per_month=None, unpriced=True,
                               comm_exposed_usd_per_month=None, **{f"fix_{c}_usd_per_month": None for c in FIXABLE})])
    got = samples(metrics_text(fleet))
    dollars = {dict(k)["gpu"]: (dict(k)["account"], dict(k)["user"], dict(k)["pricing"], v)
               for (n, k), v in got.items() if n == "gpu_idle_idle_dollars_per_month"}
    assert dollars == {"g0": ("vision", "alice", "card", 100.0), "g1": ("vision", "bob", "assumed", 40.0),
                       "g2": ("nlp", "carol", "card", 7.5), "g3": ("", "", "card", 10.0)}
    # every dollar series of a GPU carries the same account and user
    assert {(dict(k)["gpu"], dict(k)["account"], dict(k)["user"]) for n, k in got if n.endswith("_dollars_per_month")
            } == {("g0", "vision", "alice"), ("g1", "vision", "bob"), ("g2", "nlp", "carol"), ("g3", "", "")}
    for by in ("account", "user"):
        summed: dict = {}
        for (n, k), v in got.items():
            if n == "gpu_idle_idle_dollars_per_month":
                name = dict(k)[by] or NO_RECORD
                summed[name] = summed.get(name, 0.0) + v
        table = teams(fleet, _SMALL)
        want = {r["name"]: r["idle_usd_per_month"] for r in table[table["by"] == by].to_dict("records")
                if not pd.isna(r["idle_usd_per_month"])}
        assert {k: round(v, 2) for k, v in summed.items()} == want
    assert want == {"alice": 100.0, "bob": 40.0, "carol": 7.5, NO_RECORD: 10.0}


@pytest.mark.needs_promtool
def test_small_coverage_passes_promtool(tmp_path):
    write_prom(str(tmp_path / "cov.prom"), *SMALL_COVERAGE)
    promtool_check(tmp_path / "cov.prom")


def test_hostile_names_are_escaped_and_parse_back_identical():
    fleet = pd.DataFrame([row(job=HOSTILE_JOB, report=HOSTILE_REPORT, cluster="c\\1", node='n"1'),
                          row(job=HOSTILE_JOB, report=HOSTILE_REPORT + ".2", status="error", cluster="c\\1")])
    text = metrics_text(fleet)
    # the format's escapes: backslash, double quote and newline; unicode as UTF-8; no raw newline inside a value
    assert 'job="say \\"hi\\"\\\\ \u00e9t\u00e9\\nnext"' in text
    assert 'cluster="c\\\\1"' in text and 'node="n\\"1"' in text
    assert all(line.startswith(("# HELP", "# TYPE", "gpu_idle_")) for line in text.splitlines())
    got = samples(text)
    assert got[("gpu_idle_idle_ratio", frozenset({"cluster": "c\\1", "job": HOSTILE_JOB, "node": 'n"1',
                                                   "report": HOSTILE_REPORT, "gpu": "pid1/dev0"}.items()))] == 0.25
    assert got[("gpu_idle_failed_report_info", frozenset({"cluster": "c\\1", "job": HOSTILE_JOB,
                                                          "report": HOSTILE_REPORT + ".2"}.items()))] == 1.0


@pytest.mark.needs_promtool
def test_hostile_names_pass_promtool(tmp_path):
    path = tmp_path / "hostile.prom"
    write_prom(str(path), pd.DataFrame([row(job=HOSTILE_JOB, report=HOSTILE_REPORT)]), night="2026-12-06")
    promtool_check(path)


def test_a_night_is_its_date_at_midnight_utc():
    got = samples(metrics_text(pd.DataFrame([row()]), night="2026-12-06"))
    assert got[("gpu_idle_night_timestamp_seconds", frozenset())] == 1796515200.0  # date -d 2026-12-06Z +%s


def test_the_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    """Written under a temporary name in the same folder, then renamed: a rename that fails leaves the old
    file as it was and no temporary file behind."""
    path = tmp_path / "gpu_idle.prom"
    path.write_text("old\n", encoding="utf-8")
    renamed = []

    def failing_replace(src, dst):
        renamed.append((Path(src).parent, Path(src).name, dst))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(prom.write_text.__globals__["os"], "replace", failing_replace)
    with pytest.raises(OSError):
        write_prom(str(path), pd.DataFrame([row()]))
    assert path.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["gpu_idle.prom"]
    (folder, name, dst), = renamed
    assert folder == tmp_path and not name.endswith(".prom") and dst == str(path)


# ---- the dashboard --------------------------------------------------------------------------------------

DASHBOARDS = sorted((REPO / "deploy" / "grafana").glob("*.json"))
#: PromQL words that are not metric names: keywords and operators written as words.
PROMQL_WORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
                "group_right", "inf", "nan"}


def exprs(dashboard: dict) -> list[str]:
    """Every PromQL expression of a Grafana dashboard: its panels' (rows' panels included) targets' ``expr`` and
    its query variables' queries."""
    out, panels = [], list(dashboard.get("panels", []))
    while panels:
        panel = panels.pop()
        panels += panel.get("panels", [])
        out += [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        query = query.get("query") if isinstance(query, dict) else query
        if var.get("type") == "query" and query:
            m = re.fullmatch(r"label_values\((.*),\s*\w+\)", query.strip())   # label_values(SERIES, label)
            assert m, query
            out.append(m.group(1))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: its identifiers less label matchers (``{...}``), strings,
    ranges (``[...]``), the labels of ``by``/``without``/``on``/``ignoring``/``group_*`` (``(...)``), function
    calls (a name before ``(``) and keywords; numbers and Grafana's ``$variables`` are not identifiers."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', "", expr)
    text = re.sub(r"\{[^{}]*\}|\[[^\]]*\]", " ", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", text)
    text = re.sub(r"\$\{?\w+\}?", " ", text)
    names = set()
    for m in re.finditer(r"(?<![\w.])([A-Za-z_:][\w:]*)(\s*\()?", text):
        if not m.group(2) and m.group(1).lower() not in PROMQL_WORDS:
            names.add(m.group(1))
    return names


def test_the_metric_name_finder_finds_what_a_query_reads():
    """It can fail: a misspelt name and a name beside functions, matchers and groupings are each found."""
    assert metric_names('sum by (cluster) (gpu_idle_idle_dollars_per_month{pricing=~"card|assumed", '
                        'cluster=~"$cluster"}) / ignoring(x) group_left(tier) gpu_idle_gpus') == {
        "gpu_idle_idle_dollars_per_month", "gpu_idle_gpus"}
    assert metric_names("topk(10, gpu_idle_idel_ratio) > 0.5 and on(gpu) rate(node_up[5m])") == {
        "gpu_idle_idel_ratio", "node_up"}


@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_the_dashboards_queries_name_only_metrics_the_product_writes(path, example, metered):
    dashboard = json.loads(path.read_text(encoding="utf-8"))
    found = [(e, metric_names(e)) for e in exprs(dashboard)]
    assert len(found) >= 10 and all(names for _, names in found)
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in dashboard["panels"]
               if p["type"] != "row")
    used = set().union(*(names for _, names in found))
    assert used <= set(METRIC_NAMES), sorted(used - set(METRIC_NAMES))
    assert used & set(COVERAGE_NAMES) == set(COVERAGE_NAMES) - {"gpu_idle_represented_gpu_seconds"}  # the coverage panels
    # what the issue asks it to show: $ by cluster, job and category, top GPUs, the meter beside the truth,
    # coverage (GPUs analysed) and failures
    queries = [re.sub(r"\s+", " ", e) for e, _ in found]
    for want in ("sum by (cluster) (gpu_idle_idle_dollars_per_month", "sum by (cluster, job) (gpu_idle_idle_dollars",
                 "sum by (category) (gpu_idle_category_idle_dollars_per_month", "topk(10, gpu_idle_idle_dollars",
                 "gpu_idle_sampled_util_ratio", "gpu_idle_busy_ratio", "sum by (pricing) (gpu_idle_gpus",
                 "gpu_idle_failed_reports", "gpu_idle_failed_report_info", "max(gpu_idle_gpu_spend_measured_ratio)",
                 "max(gpu_idle_untraced_allocations)", 'gpu_idle_allocation_info{status="not measured"}'):
        assert any(want in q for q in queries), want
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    top = {p["title"]: p for p in panels if p["gridPos"]["y"] < 12}   # the first screen
    # the lead stat is the total the CLI prints (card + assumed), the card-only part beside it
    lead = min(panels, key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"]))
    assert lead["type"] == "stat" and "card + assumed" in lead["title"], lead["title"]
    assert re.sub(r"\s+", " ", lead["targets"][0]["expr"]) == (
        'sum(gpu_idle_idle_dollars_per_month{pricing=~"card|assumed", cluster=~"$cluster", job=~"$job"})')
    beside = [p for p in panels if p["gridPos"]["y"] == lead["gridPos"]["y"] and p is not lead]
    assert any('pricing="card"' in t["expr"] for p in beside for t in p["targets"])
    # who pays and the coverage, on the first screen
    assert any(t["expr"].startswith("sum by (account) (gpu_idle_idle_dollars_per_month") for p in top.values()
               for t in p["targets"]), sorted(top)
    assert {"gpu_idle_gpu_spend_measured_ratio", "gpu_idle_untraced_allocations"} <= {
        n for p in top.values() for t in p["targets"] for n in metric_names(t["expr"])}
    # the meter table: the three values of a GPU on one row (merged), not three tables
    meter = next(p for p in panels if p["title"].startswith("Sampled meter vs true busy"))
    assert [t["id"] for t in meter.get("transformations", [])][:1] == ["merge"]
    assert all(t.get("format") == "table" and t.get("instant") for t in meter["targets"])
    written = {f.name for f in text_string_to_metric_families(example[1].read_text(encoding="utf-8"))}
    # the product writes each of them: the example's file (its windows too short for a meter reading: the sampled
    # meter from a window with one, metered), the coverage ones a file with accounting, the night's a sweep's
    assert "gpu_idle_sampled_util_ratio" in {n for n, _ in samples(metered[1])}
    assert used - {"gpu_idle_night_timestamp_seconds", "gpu_idle_sampled_util_ratio"} - set(COVERAGE_NAMES) <= written
    assert set(COVERAGE_NAMES) <= {n.removesuffix("_total") for n, _ in samples(metrics_text(*SMALL_COVERAGE))}


def readme_scrape_configs() -> list[dict]:
    """The Prometheus scrape configs of deploy/README.md's YAML blocks (``scrape_configs`` entries)."""
    text = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    blocks = [yaml.safe_load(textwrap.dedent(b)) for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]
    return [c for b in blocks if isinstance(b, dict) for c in b.get("scrape_configs", [])]


def test_the_readmes_scrape_config_keeps_the_files_job_label():
    """Without ``honor_labels: true`` Prometheus renames the file's ``job`` label ``exported_job`` (its target's
    ``job`` wins): the dashboard's job variable would list the scrape job. Every scrape config deploy/README.md
    shows keeps the file's labels."""
    text = (REPO / "deploy" / "README.md").read_text(encoding="utf-8")
    scrapes = readme_scrape_configs()
    assert scrapes and all(c.get("honor_labels") is True for c in scrapes), scrapes
    assert "honor_labels: true" in text and "exported_job" in text   # and says why


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
@pytest.mark.needs_promtool
def test_a_real_prometheus_keeps_the_files_job_with_the_readmes_scrape_config(tmp_path):
    """The real Prometheus (Debian's, beside promtool) scrapes a file served as a node exporter serves it, twice:
    with the README's scrape config (honor_labels) the series keep ``job="train"``; without it, the same series
    read ``job`` of the scrape job and ``exported_job="train"`` (what the README warns of)."""
    import http.server
    import json as json_
    import shutil
    import subprocess
    import threading
    import time
    import urllib.parse
    import urllib.request

    write_prom(str(tmp_path / "gpu_idle.prom"), pd.DataFrame([row()]))
    promtool_check(tmp_path / "gpu_idle.prom")
    body = (tmp_path / "gpu_idle.prom").read_bytes()

    class Exporter(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Exporter)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    target = f"127.0.0.1:{server.server_address[1]}"
    (scrape,) = readme_scrape_configs()
    scrape = {**scrape, "static_configs": [{"targets": [target]}]}
    plain = {k: v for k, v in scrape.items() if k != "honor_labels"} | {"job_name": "plain"}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({"global": {"scrape_interval": "1s"},
                                                             "scrape_configs": [scrape, plain]}), encoding="utf-8")
    binary = shutil.which("prometheus")
    assert binary, "prometheus not found: `make promtool` installs Debian's prometheus package"
    web = f"127.0.0.1:{_free_port()}"
    proc = subprocess.Popen([binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--web.listen-address={web}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}"], stdout=subprocess.DEVNULL,
                            stderr=open(tmp_path / "prometheus.log", "w"))
    try:
        query = urllib.parse.urlencode({"query": "gpu_idle_idle_ratio"})
        got: list = []
        deadline = time.monotonic() + 60
        while len(got) < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
            try:
                with urllib.request.urlopen(f"http://{web}/api/v1/query?{query}", timeout=5) as resp:
                    got = json_.load(resp)["data"]["result"]
            except OSError:
                continue
        assert len(got) == 2, (tmp_path / "prometheus.log").read_text(encoding="utf-8")[-2000:]
        jobs = sorted((r["metric"]["job"], r["metric"].get("exported_job")) for r in got)
        assert jobs == [("plain", "train"), ("train", None)]   # honoured: the file's; plain: renamed
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        server.shutdown()


@pytest.mark.needs_promtool
@pytest.mark.parametrize("path", DASHBOARDS, ids=[p.name for p in DASHBOARDS])
def test_the_dashboards_queries_are_promql(path, tmp_path):
    """Each query, its Grafana variables given a value, parses as PromQL: promtool checks it as a recording rule."""
    found = exprs(json.loads(path.read_text(encoding="utf-8")))
    rules = [{"record": f"dashboard:query_{i}", "expr": re.sub(r"\$\{?\w+\}?", ".*", e)} for i, e in enumerate(found)]
    (tmp_path / "rules.yml").write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}),
                                        encoding="utf-8")
    assert f"SUCCESS: {len(rules)} rules found" in promtool_check(tmp_path / "rules.yml", kind="rules")
