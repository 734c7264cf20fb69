"""The YAML configs (configs/*.yaml and the one deploy/'s ConfigMap carries) parse, run every GPU, and
say what the code does."""
from __future__ import annotations

import sqlite3

import yaml
from conftest import REPO

from pipeline.config import Config, load_config


def test_default_yaml_equals_builtin_defaults():
    assert load_config([REPO / "configs" / "default.yaml"]) == Config()


def gpu_idle_configs(folder) -> list:
    """Every gpu-idle config of the repository: ``configs/*.yaml``, then each YAML file that a
    Kubernetes ConfigMap under ``deploy/`` carries (written into ``folder`` as ``<manifest>-<key>``)."""
    paths = sorted((REPO / "configs").glob("*.yaml"))
    for manifest in sorted((REPO / "deploy").rglob("*.yaml")):
        for doc in yaml.safe_load_all(manifest.read_text(encoding="utf-8")):
            if doc and doc.get("kind") == "ConfigMap":
                for key, text in sorted(doc["data"].items()):
                    if key.endswith((".yaml", ".yml")):
                        paths.append(folder / f"{manifest.stem}-{key}")
                        paths[-1].write_text(text, encoding="utf-8")
    return paths


#: Fleet-row numbers that do not depend on ``min_gap_ns`` (taken from the generator's truth).
THRESHOLD_FREE = ("window_start_ns", "window_end_ns", "window_ns", "kernel_count", "busy_ns", "idle_ns",
                  "copy_only_ns", "dark_ns", "iterations")


def kernel_holes(path: str, pid: int, w0: int, w1: int) -> tuple[list, list]:
    """``(per-stream holes, device holes)``: lengths (ns, > 0) between process ``pid``'s kernels
    clipped to [w0, w1), read straight from the export with sqlite3. Per stream: from the latest
    end so far to the next start; device-level: between runs of the union of all streams, W's
    edges included. A second computation, independent of pipeline.analysis.gaps."""
    from pipeline.synth import global_pid

    with sqlite3.connect(path) as con:
        rows = con.execute("SELECT streamId, max(start, ?), min(end, ?) FROM CUPTI_ACTIVITY_KIND_KERNEL "
                           "WHERE globalPid = ? AND end > ? AND start < ? ORDER BY start, end, correlationId",
                           (w0, w1, global_pid(pid), w0, w1)).fetchall()
    stream_holes, reach = [], {}
    for stream, start, end in rows:
        if stream in reach and start > reach[stream]:
            stream_holes.append(start - reach[stream])
        reach[stream] = max(reach.get(stream, end), end)
    device_holes, edge = [], w0
    for _, start, end in rows:
        if start > edge:
            device_holes.append(start - edge)
        edge = max(edge, end)
    return stream_holes, device_holes + ([w1 - edge] if w1 > edge else [])


def split_at(min_gap: int, stream_holes: list, device_holes: list) -> dict:
    """The fleet-row gap and sliver numbers for a threshold: holes longer than ``min_gap`` are gaps."""
    gaps, slivers = [x for x in stream_holes if x > min_gap], [x for x in stream_holes if x <= min_gap]
    device_gaps, device_slivers = [x for x in device_holes if x > min_gap], [x for x in device_holes if x <= min_gap]
    return {"gap_count": len(gaps), "gap_total_ns": sum(gaps), "max_gap_ns": max(gaps, default=0),
            "sliver_count": len(slivers), "sliver_total_ns": sum(slivers),
            "device_gap_count": len(device_gaps), "device_gap_ns": sum(device_gaps),
            "device_sliver_count": len(device_slivers), "device_sliver_ns": sum(device_slivers)}


def test_every_config_file_analyses_every_gpu_with_its_settings(tmp_path):
    """Each config, layered over the defaults as ``--config`` does, runs a small generated 2-GPU
    H100 report through the in-process engine (what ``gpu-idle run`` uses for one report): every
    GPU gets an ``ok`` row, and the settings the file makes (read here from the raw YAML, else
    from configs/default.yaml) are the ones used: the window rule (window and iterations as the
    generator's truth says), ``min_gap_ns`` (gap and sliver numbers, per stream and device-level,
    recomputed from the export's kernel rows for that threshold), the rate card's H100 entry
    (model, rate, source) and ``hours_per_month`` (idle $/month recomputed from the truth's idle
    and window). The caches the file points to (e.g. /scratch on the cluster) are redirected
    into tmp_path."""
    from helpers.engine import analyse_reports
    from pipeline.engine.map import InProcess
    from pipeline.synth import generate_training_report

    defaults = yaml.safe_load((REPO / "configs" / "default.yaml").read_text(encoding="utf-8"))
    paths = gpu_idle_configs(tmp_path)
    assert {p.name for p in paths} >= {"default.yaml", "nightly.yaml", "profiles.yaml",
                                       "nightly-config-nightly.yaml"}
    report = str(tmp_path / "train.sqlite")
    truth = generate_training_report(report, gpus=2, iterations=5, seed=4, straggler_rank=None,
                                     checkpoint_iteration=None)
    holes = {}
    for gpu in truth["gpus"]:   # the second computation gives the truth's numbers at its threshold
        for rule, window in gpu["windows"].items():
            want = window["expected"]
            holes[gpu["pid"], rule] = kernel_holes(report, gpu["pid"], want["window_start_ns"], want["window_end_ns"])
            split = split_at(truth["params"]["min_gap_ns"], *holes[gpu["pid"], rule])
            assert split == {k: want[k] for k in split}
    local = {"cache": {"dir": str(tmp_path / "columns")}, "export": {"cache_dir": str(tmp_path / "exports")},
             "storage": {"cache_dir": str(tmp_path / "staged")}}
    for path in paths:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}

        def setting(section, key):
            return (raw.get(section) or {}).get(key, defaults[section][key])

        window = setting("analysis", "window")
        rule = {"auto": "nvtx"}.get(window, window)   # the generated report has NVTX iterations
        (h100,) = [r for r in setting("cost", "rates") if r["model"] == "H100"]
        rate, hours = h100["usd_per_gpu_hour"], setting("cost", "hours_per_month")
        fleet, _ = analyse_reports([report], load_config([path], local), InProcess())
        rows = fleet.to_dict("records")
        assert [(r["status"], r["error"], r["warnings"]) for r in rows] == [("ok", "", "")] * len(truth["gpus"]), \
            path.name
        for row, gpu in zip(rows, sorted(truth["gpus"], key=lambda g: f"GPU-{g['uuid']}")):
            want = gpu["windows"][rule]["expected"]
            expected = {"pid": gpu["pid"], "window_rule": rule, **{k: want[k] for k in THRESHOLD_FREE},
                        **split_at(setting("analysis", "min_gap_ns"), *holes[gpu["pid"], rule]),
                        "rate_model": "H100", "rate_usd_per_hour": rate, "rate_source": f"rate card: {h100['source']}",
                        "idle_usd_per_month": round(want["idle_ns"] / want["window_ns"] * rate * hours, 2)}
            assert {k: row[k] for k in expected} == expected, path.name


def test_profiles_labels():
    cfg = load_config([REPO / "configs" / "profiles.yaml"])
    labels = cfg.labels_for("/x/fastvideo_h100_sp2_1s.sqlite")
    assert (labels["cluster"], labels["job"], labels["gpu_model"]) == ("lab-h100", "fastvideo-sp2", "H100")
    assert cfg.labels_for("/x/other.sqlite")["job"] == "other"


def test_columnar_cache_roundtrip_and_rerun(tmp_path, profiles, monkeypatch):
    """The second load of the same bytes comes from the entry's Arrow files (SQLite not read) and is identical."""
    import shutil

    import pandas as pd

    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.load import cache
    from pipeline.load.report import gpu_trace

    src = tmp_path / "a.sqlite"
    shutil.copy(profiles / "train_h100_2gpu_nccl.sqlite", src)
    first = cache.load_cached(str(src), tmp_path / "cache")
    entries = list((tmp_path / "cache").iterdir())
    assert len(entries) == 1 and entries[0].name == f"{cache.snapshot_key(str(src))}-code{cache.loader_code()[:16]}"
    assert sorted(p.name for p in entries[0].iterdir()) == sorted(
        [f"{n}.arrow" for n in cache.FRAMES] + ["report.json", cache.SUMS])

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
    with pytest.raises(ConfigError, match=r"small.yaml: dask.memory_limit '300MiB' is below 512 MiB"):
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
    assert [p.name for p in entries] == [f"{cache.snapshot_key(src)}-code{cache.loader_code()[:16]}"]
    assert sorted(p.name for p in entries[0].iterdir()) == sorted(
        [f"{n}.arrow" for n in cache.FRAMES] + ["report.json", cache.SUMS])
    second = cache._read_entry(entries[0], src)
    for name in cache.FRAMES:
        pd.testing.assert_frame_equal(getattr(first, name).reset_index(drop=True),
                                      getattr(second, name).reset_index(drop=True), check_dtype=False)


def test_columnar_cache_written_once_the_report_is_analysed(tmp_path, profiles, monkeypatch):
    """``report_task`` with a background cache write: the entry is written behind a gate the task opens once the
    report is analysed (beside its outputs, not the analysis's threads): no entry while the GPUs are analysed, the
    entry once the task returns and the write is joined; a gate never opened (a load given one that nobody opens)
    is opened by ``wait_for_writes``, so no run waits on it for ever."""
    import threading

    from pipeline.config import load_config
    from pipeline.load import cache
    from pipeline.work import tasks

    src = str(profiles / "train_h100_2gpu_nccl.sqlite")
    cfg = load_config([], {"cache": {"dir": str(tmp_path / "cache")}})
    root = tmp_path / "cache"
    seen = []
    analyse = tasks.analyse_report

    def watched(*args, **kwargs):
        seen.append(sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else [])
        out = analyse(*args, **kwargs)
        seen.append(sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else [])
        return out

    monkeypatch.setattr(tasks, "analyse_report", watched)
    outcome = tasks.report_task(src, cfg.labels_for(src), cfg, background_cache=True)
    assert outcome.failure is None and len(outcome.results) == 2
    cache.wait_for_writes()
    name = f"{cache.snapshot_key(src)}-code{cache.loader_code()[:16]}"
    assert seen == [[], []] and sorted(p.name for p in root.iterdir()) == [name]
    gate = threading.Event()   # opened by nobody but wait_for_writes
    other = tmp_path / "other"
    cache.load_cached(src, other, background=gate)
    assert not gate.is_set() and not other.exists()
    cache.wait_for_writes()
    assert gate.is_set() and not cache._PENDING and sorted(p.name for p in other.iterdir()) == [name]


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


def _printed_fleet(n: int):
    """``n`` analysed rows holding every printed column (0, 1 ms for the ns ones), reports r<i>.sqlite, GPU-<i>."""
    import pandas as pd

    from pipeline import schema

    fleet = pd.DataFrame({p.name: [0] * n for p in schema.PRINTED_WIDE
                          if p.name not in ("gpu_key", "report", "status", "gpu_name")})
    fleet["report"] = [f"r{i}.sqlite" for i in range(n)]
    fleet["gpu_key"] = [f"GPU-{i}" for i in range(n)]
    fleet["status"] = "ok"
    for col in ("window_ns", "idle_ns", "copy_only_ns", "dark_ns", "gap_total_ns", "device_gap_ns"):
        fleet[col] = 1_000_000
    return fleet


def test_terminal_table_shows_the_most_expensive_gpus_of_a_large_fleet():
    from pipeline.cli import format_fleet

    fleet = _printed_fleet(5)
    fleet["idle_usd_per_month"] = [5.0, 50.0, 1.0, 50.0, 20.0]
    text = format_fleet(fleet, max_rows=3, wide=True)
    assert [k for k in ("GPU-1", "GPU-3", "GPU-4") if k in text] == ["GPU-1", "GPU-3", "GPU-4"]
    assert "GPU-0" not in text and "GPU-2" not in text
    assert text.splitlines()[-1] == "... 2 more GPU row(s) in fleet.csv (above: the 3 with the highest idle cost)"
    assert "more GPU row" not in format_fleet(fleet, max_rows=5)
    assert [line.split()[0] for line in format_fleet(fleet, max_rows=3).splitlines()[1:4]] == [
        "$50.00", "$50.00", "$20.00"]


def test_terminal_table_puts_toy_and_low_captures_after_the_trusted_ones():
    """A toy capture at an assumed rate never heads the table: trusted GPUs (tier medium/high) first, then low,
    then toy (issue 45 point 7: order by tier, then dollars), each group most expensive first
    (docs/outputs.md#the-printed-table)."""
    from pipeline.cli import format_fleet

    fleet = _printed_fleet(4)
    fleet["idle_usd_per_month"] = [2882.33, 10.0, 500.0, 40.0]
    fleet["confidence_tier"] = ["toy", "high", "low", "medium"]
    fleet["low_confidence"] = [True, False, True, False]
    lines = format_fleet(fleet).splitlines()[1:5]
    assert [line.split()[:2] for line in lines] == [["$40.00", "medium"], ["$10.00", "high"],
                                                    ["$500.00", "low"], ["$2,882.33", "toy"]]
