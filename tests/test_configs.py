"""The YAML files in configs/ parse and say what the code does."""
from __future__ import annotations

from pipeline.config import Config, load_config

from conftest import REPO


def test_default_yaml_equals_builtin_defaults():
    assert load_config([REPO / "configs" / "default.yaml"]) == Config()


def test_every_config_file_loads():
    for path in sorted((REPO / "configs").glob("*.yaml")):
        load_config([path])


def test_profiles_labels():
    cfg = load_config([REPO / "configs" / "profiles.yaml"])
    labels = cfg.labels_for("/x/fastvideo_h100_sp2_1s.sqlite")
    assert (labels["cluster"], labels["job"], labels["gpu_model"]) == ("lab-h100", "fastvideo-sp2", "H100")
    assert cfg.labels_for("/x/other.sqlite")["job"] == "other"
