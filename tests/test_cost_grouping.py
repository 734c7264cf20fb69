"""Issue 12, kind 8: cost and grouping details that must not hide anything.

A cluster rate override replaces the rate, not the fact that the export's GPU model is not
on the rate card; stragglers are judged within (cluster, job), as the rollups are.
"""
from __future__ import annotations

import pytest

from pipeline.analysis import cost
from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import AnalysisConfig, Config, CostConfig, LabelRule
from pipeline.fleet.reduce import build_fleet
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import ExportWriter

MS = 1_000_000
NOT_LISTED = "Quadro GP100"


# ---------------------------------------------------------------- override + model not on the card

def test_override_keeps_the_unlisted_flag_and_says_the_default_was_assumed():
    # cost.unlisted: default (the default model assumed for a model off the card, as before issue 41)
    card = CostConfig(cluster_rates={"spot": {"H100": 1.8}}, unlisted="default")  # default model H100
    choice = cost.find_rate(NOT_LISTED, card, cluster="spot")
    assert (choice.model, choice.usd_per_gpu_hour, choice.unlisted) == ("H100", 1.8, True)
    assert choice.source == "cluster spot override (default model: 'Quadro GP100' is not on the card)"
    # by default (unpriced) the override of the default model does not price a model off the card
    choice = cost.find_rate(NOT_LISTED, CostConfig(cluster_rates={"spot": {"H100": 1.8}}), cluster="spot")
    assert (choice.model, choice.unpriced, choice.unlisted) == ("", True, True)


def test_override_of_a_blank_model_says_the_export_names_no_gpu():
    card = CostConfig(cluster_rates={"spot": {"H100": 1.8}})
    choice = cost.find_rate("", card, cluster="spot")
    # a blank model is not "unlisted" (nothing to warn about a name), but the default is still named
    assert (choice.model, choice.usd_per_gpu_hour, choice.unlisted) == ("H100", 1.8, False)
    assert choice.source == "cluster spot override (default model: export names no GPU)"


def test_override_of_a_listed_model_is_just_the_override():
    card = CostConfig(cluster_rates={"spot": {"H100": 1.8}})
    choice = cost.find_rate("NVIDIA H100 80GB HBM3", card, cluster="spot")
    assert (choice.model, choice.usd_per_gpu_hour, choice.unlisted, choice.source) == \
        ("H100", 1.8, False, "cluster spot override")


def test_row_under_an_override_still_warns_about_the_model(tmp_path):
    w = ExportWriter(str(tmp_path / "old.sqlite"))
    w.gpu(0, NOT_LISTED, uuid="g0")
    w.cuda_device(0, 0, 10)
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="a")
    w.kernel(pid=10, device=0, stream=7, start=20 * MS, end=40 * MS, name="b")
    rep = load_report(w.close())
    cfg = Config(analysis=AnalysisConfig(window="span"),   # unlisted: default (the default since issue 41: unpriced)
                 cost=CostConfig(cluster_rates={"spot": {"H100": 1.8}}, unlisted="default"),
                 labels=(LabelRule(match="*old.sqlite", cluster="spot"),))
    row = analyse_gpu(gpu_trace(rep, "GPU-g0"), cfg, cfg.labels_for(rep.path)).row
    assert (row["gpu_model"], row["rate_model"], row["rate_usd_per_hour"]) == (NOT_LISTED, "H100", 1.8)
    assert row["rate_source"] == "cluster spot override (default model: 'Quadro GP100' is not on the card)"
    assert row["warnings"] == "GPU model 'Quadro GP100' is not on the rate card; priced as H100"
    assert row["status"] == "ok"
    # idle: window [0, 40) ms, busy 30 ms, idle 10 ms = 0.25; 0.25 x 1.8 x 730 = 328.5
    assert row["idle_usd_per_month"] == pytest.approx(328.5)


# ---------------------------------------------------------------- stragglers within (cluster, job)

def _row(report, cluster, job, gpu, idle_pct):
    return {"report": report, "cluster": cluster, "job": job, "gpu_key": gpu, "idle_pct": idle_pct,
            "status": "ok", "error": "", "warnings": ""}


def test_one_gpu_jobs_of_the_same_name_in_two_clusters_are_not_compared():
    fleet = build_fleet([_row("a.sqlite", "east", "train", "GPU-a", 50.0),
                         _row("b.sqlite", "west", "train", "GPU-b", 10.0)])
    # each (cluster, job) has one GPU: nothing to compare, no straggler
    assert fleet["straggler"].tolist() == [False, False]


def test_straggler_is_named_within_its_own_cluster():
    fleet = build_fleet([_row("a.sqlite", "east", "train", "GPU-a0", 50.0),
                         _row("a.sqlite", "east", "train", "GPU-a1", 30.0),
                         _row("b.sqlite", "west", "train", "GPU-b0", 90.0)])
    flagged = fleet.loc[fleet["straggler"], ["cluster", "gpu_key"]].values.tolist()
    # east/train: 50 - 30 = 20 > 10 points -> GPU-a0; west/train has one GPU (90 %): not compared
    assert flagged == [["east", "GPU-a0"]]

