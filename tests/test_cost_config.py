"""Hand-computed checks of pipeline.analysis.cost and pipeline.config."""
from __future__ import annotations

import math

import pytest

from pipeline.analysis import cost
from pipeline.config import Config, ConfigError, CostConfig, LabelRule, Rate, load_config

# ---------------------------------------------------------------- cost

def test_idle_usd_per_month():
    # 0.2 idle x $4/h x 730 h = 0.8 x 730 = 584.0
    assert cost.idle_usd_per_month(0.2, 4.0, 730) == pytest.approx(584.0)
    # article: 8 GPUs x 20 % idle at $1300/day/node -> $260/day; per GPU-hour 1300/8/24 = 6.7708...
    # one GPU: 0.2 x (1300/192) x 730 = 0.2 x 6.770833 x 730 = 988.54 per GPU, x8 = 7908.3 per node
    per_gpu = cost.idle_usd_per_month(0.2, 1300 / 192, 730)
    assert per_gpu * 8 == pytest.approx(7908.33, abs=0.01)
    assert cost.idle_usd_per_month(0.0, 4.0, 730) == 0.0


def test_amdahl():
    assert cost.amdahl_speedup(0.2) == pytest.approx(1.25)  # 1 / 0.8
    assert cost.amdahl_speedup(0.5) == pytest.approx(2.0)   # 1 / 0.5
    assert cost.amdahl_speedup(0.0) == 1.0                  # 1 / 1
    assert math.isinf(cost.amdahl_speedup(1.0))


def test_find_rate_glob_on_export_model_name():
    model, usd, source = cost.find_rate("NVIDIA H100 80GB HBM3", CostConfig())[:3]
    # default card: H100 at $4.00 via '*H100*'; rate_source quotes the entry's public prices and their dates
    assert (model, usd, source) == ("H100", 4.0, "rate card: public on-demand H100 SXM 2026: Lambda $3.78, Modal $3.95 "
                                    "(2026-05-07, techbytes.app from their pricing pages), RunPod $4.76 (2026-03, "
                                    "deploybase.ai); kept at $4.00; replace with your contract")
    model, usd = cost.find_rate("NVIDIA A100-SXM4-80GB", CostConfig())[:2]
    assert (model, usd) == ("A100", 2.5)
    model, usd = cost.find_rate("nvidia geforce rtx 3080", CostConfig())[:2]  # case-insensitive
    assert (model, usd) == ("RTX 3080", 0.25)


@pytest.mark.parametrize("name", ["", None, "Moore Threads MTT S4000"])  # V100 is on the card since issue 26
def test_find_rate_default_model(name):
    # cost.unlisted: default (issue 41: the default is now unpriced for a named model off the card): every GPU
    # without an entry of its own gets the default model's rate
    card = CostConfig(default_model="A100", unlisted="default")
    model, usd, source = cost.find_rate(name, card)[:3]
    assert (model, usd) == ("A100", 2.5)
    assert source.startswith("rate card (default model: ")
    assert ("not on the card" in source) == bool(name)  # says why: no model, or a model not on the card
    # the default (unpriced): only a GPU naming no model gets the default model's rate
    choice = cost.find_rate(name, CostConfig(default_model="A100"))
    assert (choice.model, choice.assumed, choice.unpriced) == (("", False, True) if name else ("A100", True, False))


def test_find_rate_first_match_wins():
    card = CostConfig(rates=(Rate("H100-SXM", 5.0, ("*H100*SXM*",)), Rate("H100", 4.0, ("*H100*",))),
                      default_model="H100")
    assert cost.find_rate("NVIDIA H100 80GB HBM3", card)[:2] == ("H100", 4.0)      # no 'SXM' in the name
    assert cost.find_rate("NVIDIA H100 SXM5 80GB", card)[:2] == ("H100-SXM", 5.0)  # both match, first wins


def test_find_rate_cluster_override():
    card = CostConfig(cluster_rates={"east": {"H100": 3.25}})
    model, usd, source = cost.find_rate("NVIDIA H100 80GB HBM3", card, cluster="east")[:3]
    assert (model, usd) == ("H100", 3.25)
    assert "east" in source
    # other clusters and models keep the card rate
    assert cost.find_rate("NVIDIA H100 80GB HBM3", card, cluster="west")[1] == 4.0
    assert cost.find_rate("NVIDIA A100", card, cluster="east")[1] == 2.5


def test_find_rate_missing_default_model():
    with pytest.raises(KeyError):
        cost.find_rate("", CostConfig(default_model="GH200"))  # B200 is on the card since issue 26


# ---------------------------------------------------------------- config

def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_load_config_defaults():
    cfg = load_config()
    assert cfg.analysis.min_gap_ns == 1_000_000
    assert cfg.analysis.roster_size == 20
    assert cfg.cost.hours_per_month == 730.0


def test_load_config_layering(tmp_path):
    first = write(tmp_path / "a.yaml", """
analysis:
  min_gap_ns: 500000
  roster_size: 5
cost:
  hours_per_month: 720
  cluster_rates:
    east: {H100: 3.0}
labels:
  - {match: "*", cluster: first}
""")
    second = write(tmp_path / "b.yaml", """
analysis:
  roster_size: 10
cost:
  cluster_rates:
    west: {A100: 2.0}
  rates:
    - {model: B200, usd_per_gpu_hour: 9.5, match: ["*B200*"]}
  default_model: B200
labels:
  - {match: "*.sqlite", job: second}
""")
    cfg = load_config([first, second])
    assert cfg.analysis.min_gap_ns == 500_000          # only in the first file
    assert cfg.analysis.roster_size == 10              # second file wins
    assert cfg.analysis.straggler_spread_pct == 10.0   # built-in default
    assert cfg.cost.hours_per_month == 720             # first file
    # mappings merge key by key
    assert cfg.cost.cluster_rates == {"east": {"H100": 3.0}, "west": {"A100": 2.0}}
    # lists replace (the label rules); the rate card merges by model (issue 26): the B200 entry takes the
    # card's B200 entry's place, every other card entry stays (tests/test_rates.py has the rule's cases)
    card = CostConfig().rates
    assert cfg.cost.rates == tuple(Rate("B200", 9.5, ("*B200*",)) if r.model == "B200" else r for r in card)
    assert cfg.labels == (LabelRule(match="*.sqlite", job="second"),)
    assert cost.find_rate("NVIDIA B200", cfg.cost)[:2] == ("B200", 9.5)


def test_load_config_overrides_win(tmp_path):
    f = write(tmp_path / "a.yaml", "analysis:\n  min_gap_ns: 500000\n")
    cfg = load_config([f], overrides={"analysis": {"min_gap_ns": 2_000_000}})
    assert cfg.analysis.min_gap_ns == 2_000_000


def test_unknown_key_names_the_file(tmp_path):
    good = write(tmp_path / "good.yaml", "analysis:\n  roster_size: 3\n")
    bad = write(tmp_path / "bad.yaml", "analysis:\n  min_gap: 5\n")
    with pytest.raises(ConfigError) as exc:
        load_config([good, bad])
    assert str(exc.value).startswith(str(bad))
    assert "min_gap" in str(exc.value)


def test_unknown_section_names_the_file(tmp_path):
    bad = write(tmp_path / "bad.yaml", "analysys:\n  roster_size: 3\n")
    with pytest.raises(ConfigError) as exc:
        load_config([bad])
    assert str(exc.value).startswith(str(bad))


def test_unknown_rate_key_names_the_file(tmp_path):
    bad = write(tmp_path / "bad.yaml", "cost:\n  rates:\n    - {model: X, usd: 1}\n")
    with pytest.raises(ConfigError) as exc:
        load_config([bad])
    assert str(exc.value).startswith(str(bad))


def test_bad_yaml_and_missing_file(tmp_path):
    bad = write(tmp_path / "bad.yaml", "analysis: [unclosed\n")
    with pytest.raises(ConfigError) as exc:
        load_config([bad])
    assert str(exc.value).startswith(str(bad))
    missing = tmp_path / "missing.yaml"
    with pytest.raises(ConfigError) as exc:
        load_config([missing])
    assert str(exc.value).startswith(str(missing))


def test_labels_for_defaults():
    labels = Config().labels_for("/data/run1.sqlite")
    assert labels == {"cluster": "default", "job": "run1", "node": "", "rank": "", "gpu_model": None, "kind": None}


def test_labels_for_rules_merge_later_wins():
    cfg = Config(labels=(
        LabelRule(match="*/clusterA/*", cluster="A", node="n1"),
        LabelRule(match="job7*", job="seven", rank=0),
        LabelRule(match="*rank0*", cluster="A-override", gpu_model="NVIDIA H100 80GB HBM3"),
    ))
    labels = cfg.labels_for("/data/clusterA/job7_rank0.sqlite")
    # rule 1 (full path) sets cluster + node; rule 2 (file name) job + rank; rule 3 overrides cluster
    assert labels == {"cluster": "A-override", "job": "seven", "node": "n1", "rank": "0",
                      "gpu_model": "NVIDIA H100 80GB HBM3", "kind": None}
    # a path matching none of them gets the defaults
    assert cfg.labels_for("/other/x.sqlite")["cluster"] == "default"
