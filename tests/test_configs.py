"""The YAML files in configs/ parse and say what the code does."""
from __future__ import annotations

from conftest import REPO

from pipeline.config import Config, load_config


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


def test_columnar_cache_roundtrip_and_rerun(tmp_path, profiles, monkeypatch):
    """The second load of the same bytes comes from Parquet (SQLite not read) and is identical."""
    import shutil

    import pandas as pd

    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.load import cache
    from pipeline.load.report import gpu_trace

    src = tmp_path / "a.sqlite"
    shutil.copy(profiles / "train_h100_2gpu_nccl.sqlite", src)
    first = cache.load_cached(str(src), tmp_path / "cache")
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1 and entries[0].name.endswith(f"-v{cache.LOADER_VERSION}")
    assert sorted(p.name for p in entries[0].iterdir()) == sorted(
        [f"{n}.parquet" for n in cache.FRAMES] + ["report.json"])

    def no_sqlite(path, *a, **k):
        raise AssertionError("SQLite read on a cache hit")

    monkeypatch.setattr(cache, "load_report", no_sqlite)
    renamed = tmp_path / "renamed.sqlite"
    shutil.copy(src, renamed)  # same content, other name: same entry
    second = cache.load_cached(str(renamed), tmp_path / "cache")
    assert second.path == str(renamed)
    for name in cache.FRAMES:
        pd.testing.assert_frame_equal(getattr(first, name).reset_index(drop=True),
                                      getattr(second, name).reset_index(drop=True), check_dtype=False)
    assert (first.meta, first.diagnostics, first.warnings) == (second.meta, second.diagnostics, second.warnings)
    cfg = load_config([], {"analysis": {"window": "span"}})
    for key in first.gpu_keys():
        a = analyse_gpu(gpu_trace(first, key), cfg, {}).row
        b = analyse_gpu(gpu_trace(second, key), cfg, {}).row
        a.pop("report"), b.pop("report")
        assert a == b


def test_worker_memory_limit_too_small_is_refused(tmp_path):
    import pytest

    from pipeline.config import ConfigError
    path = tmp_path / "small.yaml"
    path.write_text("dask: {memory_limit: 300MiB}\n")
    with pytest.raises(ConfigError, match=r"small.yaml: dask: dask.memory_limit '300MiB' is below 512 MiB"):
        load_config([path])
    assert load_config([], {"dask": {"memory_limit": "4GiB"}}).dask.memory_limit == "4GiB"


def test_columnar_cache_written_in_background(tmp_path, profiles):
    """``background=True``: the report comes back at once; the entry appears, complete, after
    wait_for_writes, and a rerun reads it (equal frames)."""
    import pandas as pd

    from pipeline.load import cache

    src = str(profiles / "train_h100_2gpu_nccl.sqlite")
    first = cache.load_cached(src, tmp_path / "cache", background=True)
    cache.wait_for_writes()
    assert not cache._PENDING
    entries = [p for p in (tmp_path / "cache").iterdir()]
    assert [p.name for p in entries] == [f"{cache.content_key(src)}-v{cache.LOADER_VERSION}"]
    assert sorted(p.name for p in entries[0].iterdir()) == sorted(
        [f"{n}.parquet" for n in cache.FRAMES] + ["report.json"])
    second = cache._read_entry(entries[0], src)
    for name in cache.FRAMES:
        pd.testing.assert_frame_equal(getattr(first, name).reset_index(drop=True),
                                      getattr(second, name).reset_index(drop=True), check_dtype=False)


def test_json_text_is_strict_one_line_per_key():
    import json
    import math

    import pytest

    from pipeline.io import json_text

    doc = {"report": "a.sqlite", "roster": [{"start_ns": 1, "api": "cudaMemcpyAsync"}], "timeline": {}}
    text = json_text(doc)
    assert text == ('{\n  "report": "a.sqlite",\n  "roster": [{"start_ns": 1, "api": "cudaMemcpyAsync"}],\n'
                    '  "timeline": {}\n}\n')
    assert json.loads(text) == doc
    assert json_text([1, {"b": None}]) == '[\n  1,\n  {"b": null}\n]\n'
    with pytest.raises(ValueError):
        json_text({"x": math.nan})  # strict JSON: no NaN


def test_dashboard_off_by_default_and_cli_flag(tmp_path):
    from pipeline.cli import _dask_overrides

    assert load_config([]).dask.dashboard is None
    assert load_config([], {"dask": _dask_overrides(None, ":8787")}).dask.dashboard == ":8787"
    assert _dask_overrides(3, None) == {"n_workers": 3}


def test_terminal_table_shows_the_most_expensive_gpus_of_a_large_fleet():
    import pandas as pd

    from pipeline.cli import SHOWN, format_fleet

    n = 5
    fleet = pd.DataFrame({c: [0] * n for c in SHOWN if c not in ("gpu_key", "report", "status")})
    fleet["report"] = [f"r{i}.sqlite" for i in range(n)]
    fleet["gpu_key"] = [f"GPU-{i}" for i in range(n)]
    fleet["status"] = "ok"
    for col in ("window_ns", "idle_ns", "copy_only_ns", "dark_ns", "gap_total_ns"):
        fleet[col] = 1_000_000
    fleet["idle_usd_per_month"] = [5.0, 50.0, 1.0, 50.0, 20.0]
    text = format_fleet(fleet, max_rows=3)
    assert [k for k in ("GPU-1", "GPU-3", "GPU-4") if k in text] == ["GPU-1", "GPU-3", "GPU-4"]
    assert "GPU-0" not in text and "GPU-2" not in text
    assert text.splitlines()[-1] == "... 2 more GPU row(s) in fleet.csv (above: the 3 with the highest idle cost)"
    assert "more GPU row" not in format_fleet(fleet, max_rows=5)
