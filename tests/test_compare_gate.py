"""Issue 48, section 3: ``gpu-idle compare BEFORE AFTER --fail-above USD`` as a gate in dollars for CI
(docs/operations.md#compare-as-a-ci-gate), through the command in process on run folders of generated exports.

Every export is that of tests/test_compare.py (``_export``): per iteration a 4 ms kernel, a 2 ms sync, a 3 ms
kernel and a data stall; the periodic window keeps iterations 1-10 of 12. Rate H100 $4.00/h, 730 h a month
(configs/default.yaml): a GPU's month at full idle is $2,920.00, and each figure is that times its share of W,
rounded to cents.
"""
from __future__ import annotations

import json
import math

import pytest

from conftest import run_cli
from test_compare import _alternating_sd, _export

from pipeline.model import CATEGORIES

MONTH = 4.0 * 730   # $2,920.00: one H100 GPU's month


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Run folders: ``base`` (stall 4 ms: 13 ms iterations), ``regressed`` (stall 8 ms: 17 ms), ``calm`` and
    ``noisy`` (stalls alternating 4/4.6 and 4/5 ms), ``other`` (another program's kernel names, stall 8 ms)."""
    tmp = tmp_path_factory.mktemp("gate")
    plans = {"base": dict(sync_ms=2, data_ms=4), "regressed": dict(sync_ms=2, data_ms=8),
             "calm": dict(sync_ms=2, data_ms=(4, 4.6)), "noisy": dict(sync_ms=2, data_ms=(4, 5)),
             "other": dict(sync_ms=2, data_ms=8, names=("a", "b"))}
    out = {}
    for name, plan in plans.items():
        _export(tmp / f"{name}.sqlite", **plan)
        run_cli("run", str(tmp / f"{name}.sqlite"), "--out", str(tmp / name))
        out[name] = str(tmp / name)
    return out


def _gate(runs, before, after, *extra):
    proc = run_cli("compare", runs[before], runs[after], "--format", "json", *extra, check=False)
    assert proc.returncode in (0, 3), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["gate"]


# the planted regression, by hand: data 4/13 -> 8/17 of W, sync 2/13 -> 2/17, idle 6/13 -> 10/17; floor 0
# (every kept iteration alike)
DATA_B, DATA_A = round(4 / 13 * MONTH, 2), round(8 / 17 * MONTH, 2)      # 898.46, 1374.12
IDLE_B, IDLE_A = round(6 / 13 * MONTH, 2), round(10 / 17 * MONTH, 2)     # 1347.69, 1717.65
DATA_GROWTH = round(DATA_A - DATA_B, 2)
TOTAL_GROWTH = round(IDLE_A - IDLE_B, 2)


def test_the_figures_by_hand():
    assert (DATA_B, DATA_A, DATA_GROWTH) == (898.46, 1374.12, 475.66)
    assert (IDLE_B, IDLE_A, TOTAL_GROWTH) == (1347.69, 1717.65, 369.96)


def test_a_planted_regression_above_the_threshold_fails_with_status_3_and_says_which_category(runs):
    code, g = _gate(runs, "base", "regressed", "--fail-above", "400")
    assert code == 3 and g["failed"] and g["verdict"].startswith("FAILED: 1 figure(s)")
    [job] = g["jobs"]
    assert job["applied"] and job["why"] == ""
    checks = {c["what"]: c for c in job["checks"]}
    assert list(checks) == list(CATEGORIES)   # every category, no total (not asked for)
    assert checks["data"] == {"what": "data", "growth_usd": 475.66, "floor_usd": 0.0, "excess_usd": 475.66,
                              "threshold_usd": 400.0, "reading": "above the threshold", "failed": True}
    assert checks["sync"]["growth_usd"] == round(round(2 / 17 * MONTH, 2) - round(2 / 13 * MONTH, 2), 2) == -105.7
    assert not checks["sync"]["failed"]
    assert [c for c in checks if checks[c]["failed"]] == ["data"]
    # the text and the md say it: which category, by how much, against what
    text = run_cli("compare", runs["base"], runs["regressed"], "--fail-above", "400", check=False)
    assert text.returncode == 3
    assert ("gate (--fail-above $400.00): FAILED: 1 figure(s) grew by more than the threshold beyond the noise "
            "floor") in text.stdout
    assert ("  base -> regressed: data idle +$475.66/month against a noise floor of $0.00 (+$475.66 beyond it) and a "
            "threshold of $400.00: above the threshold (FAILED)") in text.stdout
    md = run_cli("compare", runs["base"], runs["regressed"], "--fail-above", "400", "--format", "md", check=False)
    assert md.returncode == 3
    assert md.stdout.startswith("# Before and after\n")
    head = md.stdout.split("## Gate\n\n")[1]
    assert head.startswith("**gate (--fail-above \\$400.00): FAILED: 1 figure(s) grew by more than the threshold")
    assert ("- base -\\> regressed: data idle +\\$475.66/month against a noise floor of \\$0.00 (+\\$475.66 beyond "
            "it) and a threshold of \\$400.00: above the threshold (FAILED)\n") in head
    assert head.index("(FAILED)") < head.index("## base -\\> regressed")   # the verdict before the figures


def test_below_the_threshold_passes(runs):
    code, g = _gate(runs, "base", "regressed", "--fail-above", "475.66")   # not MORE than 475.66 beyond 0
    assert code == 0 and not g["failed"] and g["verdict"] == "passed"
    [data] = [c for c in g["jobs"][0]["checks"] if c["what"] == "data"]
    assert data["excess_usd"] == 475.66 and data["reading"] == "below the threshold" and not data["failed"]
    code, g = _gate(runs, "base", "regressed", "--fail-above", "500")
    assert code == 0


def test_the_total_variant(runs):
    code, g = _gate(runs, "base", "regressed", "--fail-above-total", "369.95")
    assert code == 3
    [total] = g["jobs"][0]["checks"]   # only the total is gated without --fail-above
    assert total == {"what": "total", "growth_usd": 369.96, "floor_usd": 0.0, "excess_usd": 369.96,
                     "threshold_usd": 369.95, "reading": "above the threshold", "failed": True}
    code, g = _gate(runs, "base", "regressed", "--fail-above-total", "369.96")
    assert code == 0 and g["jobs"][0]["checks"][0]["reading"] == "below the threshold"
    # both thresholds: the data category alone fails
    code, g = _gate(runs, "base", "regressed", "--fail-above", "400", "--fail-above-total", "400")
    assert code == 3 and [c["what"] for c in g["jobs"][0]["checks"] if c["failed"]] == ["data"]


def test_growth_inside_the_noise_floor_passes_and_says_so(runs):
    """Stalls 4/4.6 ms before, 4/5 after: W 5 x 13 + 5 x 13.6 = 133 ms -> 135 ms; data 43 -> 45 ms: $944.06 ->
    $973.33 (+$29.27); idle 63 -> 65 ms: $1,383.16 -> $1,405.93 (+$22.77). Idle SDs of 10 alternating values
    1.2520 and 2.0271 pts (the fleet's idle_pct_sd, 4 decimals): floor 2 sqrt((s_b² + s_a²) / 10) = 1.5069
    pts = $44.00 of one GPU's month. Both growths are inside it: even a threshold of $0 passes."""
    s_b, s_a = round(_alternating_sd(600 / 13, 660 / 13.6), 4), round(_alternating_sd(600 / 13, 700 / 14), 4)
    floor = round(2 * math.sqrt((s_b ** 2 + s_a ** 2) / 10) / 100 * MONTH, 2)
    assert (s_b, s_a, floor) == (1.2520, 2.0271, 44.0)
    code, g = _gate(runs, "calm", "noisy", "--fail-above", "0", "--fail-above-total", "0")
    assert code == 0 and g["verdict"] == "passed"
    checks = {c["what"]: c for c in g["jobs"][0]["checks"]}
    assert checks["data"]["growth_usd"] == round(round(45 / 135 * MONTH, 2) - round(43 / 133 * MONTH, 2), 2) == 29.27
    assert checks["total"]["growth_usd"] == round(round(65 / 135 * MONTH, 2) - round(63 / 133 * MONTH, 2), 2) == 22.77
    for c in (checks["data"], checks["total"]):
        assert c["floor_usd"] == floor and c["reading"] == "inside the noise floor" and not c["failed"]
    text = run_cli("compare", runs["calm"], runs["noisy"], "--fail-above", "0").stdout
    assert ("  calm -> noisy: data idle +$29.27/month against a noise floor of $44.00 (\u2212$14.73 beyond it) and a threshold "
            "of $0.00: inside the noise floor") in text


def test_not_comparable_fails_only_with_strict(runs):
    code, g = _gate(runs, "base", "other", "--fail-above", "0")
    assert code == 0 and not g["failed"]
    assert g["verdict"] == "not applied: no job could be gated (--strict makes that a failure)"
    [job] = g["jobs"]
    assert not job["applied"] and job["checks"] == []
    assert job["why"].startswith("not comparable: kernel time in shared names 0.00 %")
    code, g = _gate(runs, "base", "other", "--fail-above", "0", "--strict")
    assert code == 3 and g["failed"] and g["verdict"] == "FAILED (--strict): 1 job(s) not gated"
    text = run_cli("compare", runs["base"], runs["other"], "--fail-above", "0").stdout
    assert "  base -> other: not gated: not comparable: kernel time in shared names 0.00 %" in text


def test_without_a_gate_nothing_changes(runs):
    proc = run_cli("compare", runs["base"], runs["regressed"], "--format", "json")
    assert "gate" not in json.loads(proc.stdout)
    assert "gate" not in run_cli("compare", runs["base"], runs["regressed"], "--strict").stdout


def test_exit_status_3_is_documented_with_the_others():
    from pipeline.cli import EXIT_HELP, EXIT_STATUSES
    from pipeline.compare.comparison import GATE_FAILED

    assert GATE_FAILED == 3 and "gate" in EXIT_STATUSES[3] and "\n  3    compare's gate failed" in EXIT_HELP
