"""`gpu-idle run`'s per-report result cache: an unchanged rerun analyses nothing, starts no cluster
and writes the same files; a changed report, configuration or code is analysed again; --no-cache
neither reads nor writes it; failed reports are never stored."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from conftest import run_cli

from pipeline.cli import main
from pipeline.store import results as results_mod
from pipeline.synth import generate_scaled_report

REPORTS = 3  # several: analysed on a LocalCluster (one report alone runs in this process)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setenv("GPU_IDLE_CACHE", str(root))
    return root


@pytest.fixture
def fleet_dir(tmp_path):
    root = tmp_path / "fleet"
    root.mkdir()
    for i in range(REPORTS):
        generate_scaled_report(str(root / f"job{i}.sqlite"), gpus=2, kernels=2000, seed=40 + i)
    return root


def run(inputs, out, *extra, check=True):
    return run_cli("run", *map(str, inputs), "--out", str(out), "--workers", "1", *extra, check=check)


def tree(folder) -> dict[str, bytes]:
    """Every output file's bytes by relative path (the folder's manifest excepted: it is not an output)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            if name == results_mod.MANIFEST:
                continue
            path = os.path.join(root, name)
            with open(path, "rb") as fh:
                out[os.path.relpath(path, folder)] = fh.read()
    return out


def stored(cache) -> list[str]:
    folder = cache / "results"
    return sorted(os.listdir(folder)) if folder.exists() else []


@pytest.mark.slow
def test_unchanged_rerun_analyses_nothing_and_writes_the_same_files(fleet_dir, cache, tmp_path):
    first = run([fleet_dir], tmp_path / "a").stdout
    assert f"{REPORTS} report(s) analysed, 0 reused" in first
    assert "dask:" in first
    assert len(stored(cache)) == 3 * REPORTS  # .parquet + .json + .sums.json each, stored by the workers
    second = run([fleet_dir], tmp_path / "b").stdout
    assert f"0 report(s) analysed, {REPORTS} reused" in second
    assert "dask:" not in second and "engine:" not in second  # no cluster, nothing analysed in-process
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert len([f for f in a if f.startswith("gpus")]) == 2 * REPORTS
    assert any(f.startswith("records") for f in a)
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


@pytest.mark.slow
def test_changed_report_is_analysed_again_and_the_others_reused(fleet_dir, cache, tmp_path):
    run([fleet_dir], tmp_path / "a")
    changed = fleet_dir / "job0.sqlite"
    changed.unlink()
    generate_scaled_report(str(changed), gpus=2, kernels=2000, seed=99)
    second = run([fleet_dir], tmp_path / "b").stdout
    assert f"1 report(s) analysed, {REPORTS - 1} reused" in second
    assert "engine: in this process" in second  # one report left to analyse
    fresh = run([fleet_dir], tmp_path / "fresh", "--no-cache").stdout
    assert f"{REPORTS} report(s) analysed, 0 reused" in fresh
    b, ref = tree(tmp_path / "b"), tree(tmp_path / "fresh")
    assert sorted(b) == sorted(ref)
    for name in ref:
        assert b[name] == ref[name], name
    assert b["fleet.csv"] != tree(tmp_path / "a")["fleet.csv"]


@pytest.mark.slow
def test_changed_configuration_misses_the_cache(fleet_dir, cache, tmp_path):
    run([fleet_dir], tmp_path / "a")
    other = run([fleet_dir], tmp_path / "b", "--min-gap-ns", "500000").stdout
    assert f"{REPORTS} report(s) analysed, 0 reused" in other
    again = run([fleet_dir], tmp_path / "c", "--min-gap-ns", "500000").stdout
    assert f"0 report(s) analysed, {REPORTS} reused" in again
    assert tree(tmp_path / "b") == tree(tmp_path / "c")
    assert tree(tmp_path / "a")["fleet.csv"] != tree(tmp_path / "b")["fleet.csv"]


@pytest.mark.slow
def test_no_cache_neither_reads_nor_writes(fleet_dir, cache, tmp_path):
    off = run([fleet_dir], tmp_path / "a", "--no-cache").stdout
    assert f"{REPORTS} report(s) analysed, 0 reused (result cache off)" in off
    assert not cache.exists()
    run([fleet_dir], tmp_path / "b")
    before = {name: os.stat(cache / "results" / name).st_mtime_ns for name in stored(cache)}
    index = (cache / "identity-index.json").read_bytes() if (cache / "identity-index.json").exists() else None
    again = run([fleet_dir], tmp_path / "c", "--no-cache").stdout
    assert f"{REPORTS} report(s) analysed, 0 reused (result cache off)" in again and "dask:" in again
    assert {name: os.stat(cache / "results" / name).st_mtime_ns for name in stored(cache)} == before
    assert ((cache / "identity-index.json").read_bytes() if index is not None else None) == index


@pytest.mark.slow
def test_failed_report_is_not_stored(fleet_dir, cache, tmp_path):
    bad = fleet_dir / "broken.sqlite"
    bad.write_bytes(b"this is not an SQLite database" * 10)
    first = run([fleet_dir], tmp_path / "a", check=False)
    assert first.returncode == 1
    assert f"{REPORTS + 1} report(s) analysed (1 failed), 0 reused" in first.stdout
    assert len(stored(cache)) == 3 * REPORTS
    second = run([fleet_dir], tmp_path / "b", check=False)
    assert second.returncode == 1
    assert f"1 report(s) analysed (1 failed), {REPORTS} reused" in second.stdout
    assert "broken.sqlite" in second.stdout
    assert len(stored(cache)) == 3 * REPORTS
    a, b = tree(tmp_path / "a"), tree(tmp_path / "b")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], name


@pytest.mark.slow
def test_single_report_in_process_is_reused(fleet_dir, cache, tmp_path):
    report = fleet_dir / "job1.sqlite"
    first = run([report], tmp_path / "a").stdout
    assert "engine: in this process" in first and "1 report(s) analysed, 0 reused" in first
    assert "dashboard" not in first
    assert len(stored(cache)) == 3
    asked = run([report], tmp_path / "c", "--no-cache", "--dashboard", ":0").stdout
    assert "no cluster to start, so no dashboard)" in asked  # --dashboard not silently dropped
    second = run([report], tmp_path / "b").stdout
    assert "0 report(s) analysed, 1 reused" in second and "engine:" not in second
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


@pytest.mark.slow
def test_other_code_is_not_served(fleet_dir, cache, tmp_path, monkeypatch):
    """Results are keyed by the pipeline's code digest too: a changed pipeline analyses again."""
    report = str(fleet_dir / "job2.sqlite")
    runner = CliRunner()

    def invoke(out):
        got = runner.invoke(main, ["run", report, "--out", str(tmp_path / out)])
        assert got.exit_code == 0, got.output
        return got.output

    assert "1 report(s) analysed, 0 reused" in invoke("a")
    assert "0 report(s) analysed, 1 reused" in invoke("b")
    monkeypatch.setattr(results_mod, "code_digest", lambda: "f" * 64)
    assert "1 report(s) analysed, 0 reused" in invoke("c")
    assert "0 report(s) analysed, 1 reused" in invoke("d")
    labels = {"cluster": "default", "job": "x"}
    assert (results_mod.result_key("a" * 64, "b" * 64, labels, "c" * 64)
            != results_mod.result_key("a" * 64, "b" * 64, labels, "d" * 64))
    # labels are joined at the reduce (pipeline/fleet/pricing.py), only a kind label changes what is analysed
    assert (results_mod.result_key("a" * 64, "b" * 64, labels, "c" * 64)
            == results_mod.result_key("a" * 64, "b" * 64, {**labels, "job": "y", "cluster": "z"}, "c" * 64))
    assert (results_mod.result_key("a" * 64, "b" * 64, labels, "c" * 64)
            != results_mod.result_key("a" * 64, "b" * 64, {**labels, "kind": "serving"}, "c" * 64))


@pytest.mark.slow
def test_rerun_into_the_same_folder_keeps_its_files(fleet_dir, cache, tmp_path):
    """Same inputs, same settings, same code, same --out: nothing is analysed or written (the
    folder's manifest vouches for it); a listed file gone, or a changed setting, rewrites."""
    out = tmp_path / "out"
    run([fleet_dir], out)
    before = {p: os.stat(out / p).st_mtime_ns for p in tree(out)}
    again = run([fleet_dir], out).stdout
    assert f"0 report(s) analysed, {REPORTS} reused: the outputs in {out} are up to date" in again
    assert f"{2 * REPORTS} GPU(s) in the fleet table, 0 report(s) failed" in again
    assert {p: os.stat(out / p).st_mtime_ns for p in tree(out)} == before  # not one file rewritten
    (out / "fleet.csv").unlink()
    third = run([fleet_dir], out).stdout
    assert "are up to date" not in third and f"0 report(s) analysed, {REPORTS} reused" in third
    assert (out / "fleet.csv").exists()
    fourth = run([fleet_dir], out, "--min-gap-ns", "500000").stdout
    assert "are up to date" not in fourth and f"{REPORTS} report(s) analysed" in fourth



def test_a_result_that_cannot_be_stored_is_warned_about(tmp_path, capsys):
    """A full or read-only result cache does not stop the run, but it is said: every later run
    would analyse that report again."""
    from pipeline.model import GpuResult
    from pipeline.store.results import ResultSlot

    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    result = GpuResult(row={"report": "/data/job7.sqlite", "gpu_key": "GPU-0", "status": "ok"})
    assert ResultSlot(str(blocker), "k1").put([result]) is False
    err = capsys.readouterr().err
    assert f"gpu-idle: WARNING: result of /data/job7.sqlite not stored in {blocker}: " in err
    assert "(it will be analysed again next time)" in err


def test_rows_table_keeps_every_key_and_falls_back_for_mixed_columns():
    import math

    from pipeline.store.results import rows_table

    table = rows_table([{"report": "a", "idle_ns": 5}, {"report": "b", "idle_ns": None, "error": "boom"}])
    assert table.column_names == ["report", "idle_ns", "error"]
    assert table.to_pylist() == [{"report": "a", "idle_ns": 5, "error": None},
                                 {"report": "b", "idle_ns": None, "error": "boom"}]
    mixed = rows_table([{"warnings": "late"}, {"warnings": math.nan}])  # Arrow alone refuses text + NaN
    assert mixed.column("warnings").to_pylist() == ["late", None]
