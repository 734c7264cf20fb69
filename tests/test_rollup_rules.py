"""Rollup rules are objects the reduce executes (issue 46 point 5a; pipeline/schema.py ``ROLLUP``): each column of
jobs.csv and clusters.csv has a rule (sum, count, min, max, weighted mean by a named weight, speed-up, distinct,
custom with its function) and ``pipeline.fleet.reduce.rollup`` runs them; no column is a label computed elsewhere.
A fleet of four rows built by hand, every rollup column's value worked out by hand."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from pipeline import schema
from pipeline.fleet.reduce import build_fleet, error_row, rollup

FIX = schema.FIXABLE


def _gpu(**kw) -> dict:
    """An analysed row: every fix column 0 (priced) unless given, the rest as given."""
    row = {"cluster": "c", "status": "ok", **{f"cat_{c}_ns": 0 for c in FIX},
           **{f"fix_{c}_usd_per_month": 0.0 for c in FIX}}
    return {**row, **kw}


# job a: two GPUs of two reports, both with their collective wait measured
G1 = _gpu(report="r1.sqlite", job="a", gpu_key="g1", gpu_model="H100", window_ns=100, idle_ns=40, idle_pct=40.0,
          gap_total_ns=50, busy_ns=60, busy_pct=60.0, idle_usd_per_month=10.0, rate_assumed=True, unpriced=False,
          straggler=True, cat_profiler_ns=5, cat_untraced_ns=1, profiler_usd_per_month=1.0,
          untraced_usd_per_month=0.5, iterations=3, low_confidence=True, confidence_tier="low", comm_ns=20,
          comm_overlapped_ns=15, comm_exposed_ns=5, comm_exposed_usd_per_month=2.0, cat_data_ns=30,
          fix_data_usd_per_month=3.0, sample_periods=10, sampled_busy_periods=7, collective_ns=8,
          collective_wait_ns=6, collective_transfer_ns=2, collective_wait_status="measured", collective_last_count=4,
          collective_chronic=True, collective_p2p=True, collective_wait_usd_per_month=1.5,
          collective_match_basis="kth call of family", sched_job_id="j1", sched_account="acct", sched_user="u1")
G2 = _gpu(report="r2.sqlite", job="a", gpu_key="g2", gpu_model="H100", window_ns=300, idle_ns=30, idle_pct=10.0,
          gap_total_ns=70, busy_ns=270, busy_pct=90.0, idle_usd_per_month=20.0, rate_assumed=False, unpriced=False,
          straggler=False, cat_profiler_ns=0, cat_untraced_ns=2, profiler_usd_per_month=0.0,
          untraced_usd_per_month=0.25, iterations=7, low_confidence=False, confidence_tier="high", comm_ns=10,
          comm_overlapped_ns=10, comm_exposed_ns=0, comm_exposed_usd_per_month=0.0, cat_data_ns=60,
          fix_data_usd_per_month=4.0, cat_sync_ns=300, sample_periods=3, sampled_busy_periods=3, collective_ns=12,
          collective_wait_ns=10, collective_transfer_ns=2, collective_wait_status="measured", collective_last_count=1,
          collective_chronic=False, collective_p2p=True, collective_wait_usd_per_month=2.5,
          collective_match_basis="kth call of family", sched_job_id="j1", sched_account="acct", sched_user="u2")
# job b: one unpriced GPU whose collective wait abstained, and a report that failed
G3 = _gpu(report="r3.sqlite", job="b", gpu_key="g3", gpu_model="Quadro GP100", window_ns=50, idle_ns=25,
          idle_pct=50.0, gap_total_ns=25, busy_ns=25, busy_pct=50.0, idle_usd_per_month=math.nan, rate_assumed=False,
          unpriced=True, straggler=False, cat_profiler_ns=0, cat_untraced_ns=0, profiler_usd_per_month=math.nan,
          untraced_usd_per_month=math.nan, iterations=9, low_confidence=False, confidence_tier="medium", comm_ns=0,
          comm_overlapped_ns=0, comm_exposed_ns=0, comm_exposed_usd_per_month=math.nan, cat_data_ns=10,
          **{f"fix_{c}_usd_per_month": math.nan for c in FIX}, sample_periods=6, sampled_busy_periods=3,
          collective_ns=4, collective_wait_ns=None, collective_transfer_ns=None, collective_wait_status="abstained",
          collective_last_count=None, collective_chronic=False, collective_p2p=False,
          collective_wait_usd_per_month=math.nan, collective_match_basis="abstained: clocks", sched_job_id=None,
          sched_account="", sched_user=None)
FAILED = error_row("r4.sqlite", {"cluster": "c", "job": "b"}, "broken")
# job x: its only report failed
ONLY_FAILED = error_row("r5.sqlite", {"cluster": "c", "job": "x"}, "broken")

NAN = math.nan
# worked by hand: (job a, job b, job x); NAN where a column is empty
EXPECTED = {
    "gpus": (2, 1, 0),
    "window_ns": (400, 50, 0), "idle_ns": (70, 25, 0), "gap_total_ns": (120, 25, 0),
    "idle_usd_per_month": (30.0, NAN, NAN),            # b: its only GPU unpriced, x: no GPU
    "assumed_usd_per_month": (10.0, 0.0, NAN),          # g1 alone is rate_assumed
    "unpriced_gpus": (0, 1, 0), "unpriced_models": ("", "Quadro GP100 (1)", ""),
    "min_idle_pct": (10.0, 50.0, NAN), "max_idle_pct": (40.0, 50.0, NAN),
    "stragglers": (1, 0, 0), "profiler_ns": (5, 0, 0), "untraced_ns": (3, 0, 0),
    "profiler_usd_per_month": (1.0, NAN, NAN), "untraced_usd_per_month": (0.75, NAN, NAN),
    "min_iterations": (3, 9, 0), "low_confidence_gpus": (1, 0, 0),
    "trusted_idle_usd_per_month": (20.0, NAN, NAN),     # a: g2 (high); b: g3 (medium) is unpriced
    "comm_ns": (30, 0, 0), "comm_overlapped_ns": (25, 0, 0), "comm_exposed_ns": (5, 0, 0),
    "comm_exposed_usd_per_month": (2.0, NAN, NAN),
    **{f"fix_{c}_usd_per_month": (7.0 if c == "data" else 0.0, NAN, NAN) for c in FIX},
    # 1 / (1 − Σ cat / Σ window): a data 90/400, sync 300/400; b data 10/50
    **{f"fix_{c}_speedup": (1.0, 1.0, NAN) for c in FIX},
    "fix_data_speedup": (round(1 / (1 - 90 / 400), 4), 1.25, NAN), "fix_sync_speedup": (4.0, 1.0, NAN),
    "failed_reports": (0, 1, 1),
    "idle_pct": (17.5, 50.0, NAN),                      # 100 × 70 / 400, 100 × 25 / 50
    "busy_ns": (330, 25, 0), "busy_pct": (82.5, 50.0, NAN),
    "sample_periods": (13, 6, 0), "sampled_busy_periods": (10, 3, 0),
    "sampled_util_pct": (70.0, 50.0, NAN),              # a: g2's 3 periods give no reading: 100 × 7 / 10
    "comm_exposed_pct": (1.25, 0.0, NAN),
    "collective_ns": (20, 4, 0), "collective_wait_ns": (16, 0, 0), "collective_transfer_ns": (4, 0, 0),
    "collective_wait_pct": (4.0, NAN, NAN),             # 100 × 16 / 400 (the measured GPUs' windows); b: none
    "collective_wait_usd_per_month": (4.0, NAN, NAN),   # b: none measured
    "collective_measured_gpus": (2, 0, 0),
    "collective_late_rank": ("g1 in r1.sqlite", "", ""), "collective_late_rank_kind": ("chronic", "", ""),
    "collective_match_basis": ("kth call of family", "abstained: clocks", ""),
    "collective_wait_kind": ("pipeline bubble", "", ""),
    "sched_jobs": ("j1", "", ""), "sched_accounts": ("acct", "", ""), "sched_users": ("u1, u2", "", ""),
}


@pytest.fixture(scope="module")
def fleet():
    return build_fleet([G1, G2, G3, FAILED, ONLY_FAILED])


def _same(got, want) -> bool:
    if isinstance(want, float) and math.isnan(want):
        return got is None or pd.isna(got)
    return got == want


def test_every_rollup_column_has_a_rule_object():
    """Each column's rule is one of the rule classes, whose computation is its own; every class is used."""
    assert all(isinstance(c.rule, schema.RULES) for c in schema.ROLLUP)
    assert {type(c.rule) for c in schema.ROLLUP} == set(schema.RULES)
    assert set(EXPECTED) == set(schema.ROLLUP_COLUMNS)


def test_each_rule_gives_the_value_worked_by_hand(fleet):
    jobs = rollup(fleet, list(schema.JOB_KEY))
    assert jobs["job"].tolist() == ["a", "b", "x"] and list(jobs.columns) == [*schema.JOB_KEY, *schema.ROLLUP_COLUMNS]
    wrong = {name: (jobs[name].tolist(), want) for name, want in EXPECTED.items()
             if not all(_same(g, w) for g, w in zip(jobs[name].tolist(), want))}
    assert wrong == {}


def test_the_cluster_rollup_runs_the_same_rules(fleet):
    """One cluster of the three jobs: the same rules over all of its rows."""
    clusters = rollup(fleet, list(schema.CLUSTER_KEY))
    row = clusters.iloc[0]
    assert len(clusters) == 1 and row.cluster == "c"
    assert (row.gpus, row.failed_reports, row.window_ns, row.idle_usd_per_month) == (3, 2, 450, 30.0)
    assert (row.idle_pct, row.unpriced_models, row.sched_users) == (round(100 * 95 / 450, 4), "Quadro GP100 (1)",
                                                                    "u1, u2")
    assert (row.sampled_util_pct, row.collective_match_basis) == (round(100 * 10 / 16, 4),
                                                                  "kth call of family; abstained: clocks")
    assert row.fix_data_speedup == round(1 / (1 - 100 / 450), 4)


def test_a_rule_runs_on_its_own_rows():
    """A rule object is executable alone: the weighted mean by a named weight over the rows of its test."""
    rule = schema.WeightedMean("sampled_busy_periods", "sample_periods", where=schema.A_READING)
    rows = schema.Rows(pd.DataFrame({"sampled_busy_periods": [7, 3, 5], "sample_periods": [10, 3, 6]}),
                       rule.reads())
    # rows 0 and 2 have a reading (10 and 6 periods): 100 × (7 + 5) / 16; row 1 alone has none
    assert (rule.value(rows, [0, 1, 2]), rule.value(rows, [0]), rule.value(rows, [1])) == (75.0, 70.0, None)
    assert rule.reads() == ("sampled_busy_periods", "sample_periods")
    assert "weighted by `sample_periods`" in rule.text
