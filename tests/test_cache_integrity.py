"""Issue 23 point 3: every cache entry carries a checksum of its content and is checked on use.

A value changed in place inside a columnar cache entry (the file still reads), a cache file replaced
by a valid Parquet of another schema, a truncated or edited export in the export cache and a changed
stored result are each a cache miss: rebuilt (with a one-line note on stderr), never a failure and
never a number from the bad entry. A stored result records the checksums of the entries it came
from and is not served once such an entry holds other content. Real files and real ``gpu-idle``
processes throughout; the truth is the same run without any cache (``--no-cache``: SQLite read
directly), compared exactly."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import KINETO, PROFILES, run_cli

from pipeline.inputs.export import export_report
from pipeline.inputs.storage import stage_info
from pipeline.load.report import load_report
from pipeline.synth import generate_scaled_report
from test_export import _write_exe, nsys, recording  # noqa: F401 - fixtures: the real nsys and a real .nsys-rep
from test_s3 import client, s3  # noqa: F401 - fixture: a real S3-compatible server on 127.0.0.1

#: The option that makes "the next run with a new config" (the stored result of the first run is not its).
NEW_CONFIG = ("--min-gap-ns", "500000")
#: The checksum sidecar of a columnar cache entry (docs/operations.md#caches).
SUMS = "checksums.json"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """One generated report, the same file for the module's tests (none changes it; each has its own caches),
    so that the truth of a run over it is made once (:func:`truth`)."""
    path = tmp_path_factory.mktemp("in") / "job.sqlite"
    generate_scaled_report(str(path), gpus=2, kernels=2000, seed=40)
    return path


def run(inputs, out, cache, *extra, check=True, process=False) -> subprocess.CompletedProcess:
    """``gpu-idle run`` in this process (``process``: a real one, whose stderr also holds its Dask workers')."""
    inputs = inputs if isinstance(inputs, list) else [inputs]
    return run_cli("run", *map(str, inputs), "--out", str(out), "--workers", "1", *extra, check=check,
                   env={"GPU_IDLE_CACHE": str(cache)}, process=process)


def fleet(out) -> pd.DataFrame:
    return pd.read_parquet(Path(out) / "fleet.parquet").sort_values(["report", "gpu_key"]).reset_index(drop=True)


#: (inputs, options) -> the output folder of their :func:`truth_dir` run, made once per module.
_TRUTHS: dict = {}


def truth_dir(inputs, tmp_path, *extra) -> Path:
    """The output folder of the same run read straight from the inputs (no cache read or written), run
    once per inputs and options: the same inputs' truth serves every test of the module."""
    key = (tuple(map(str, inputs if isinstance(inputs, list) else [inputs])), extra)
    if key not in _TRUTHS:
        out = tmp_path / f"truth{len(list(tmp_path.glob('truth*')))}"
        run(inputs, out, tmp_path / "unused-cache", "--no-cache", *extra)
        _TRUTHS[key] = out
    return _TRUTHS[key]


def truth(inputs, tmp_path, *extra) -> pd.DataFrame:
    """The fleet of :func:`truth_dir`."""
    return fleet(truth_dir(inputs, tmp_path, *extra))


def entries(cache) -> list[Path]:
    return sorted(p for p in Path(cache).iterdir() if p.is_dir() and columnar.ENTRY_RE.match(p.name))


def rewrite_parquet(path: Path, change) -> None:
    """Rewrite ``path`` with ``change(table) -> table`` applied, as the results store writes it (same options)."""
    table = change(pq.read_table(path))
    pq.write_table(table, path, compression="none", write_statistics=False)


def frame(entry: Path, name: str) -> Path:
    """The file of the columnar cache entry ``entry`` that holds the frame ``name``."""
    return entry / columnar.frame_file(name)


def rewrite_frame(path: Path, change) -> None:
    """Rewrite the columnar cache entry's frame file ``path`` with ``change(table) -> table`` applied, as the cache
    writes it."""
    table = change(columnar.read_frame(path.read_bytes()))
    columnar.write_frame(table, path)


def set_value(table: pa.Table, column: str, row: int, value) -> pa.Table:
    values = table.column(column).to_pylist()
    values[row] = value
    at = table.schema.get_field_index(column)
    return table.set_column(at, table.schema.field(at), pa.array(values, table.schema.field(at).type))


def cover_the_gpu(table: pa.Table) -> pa.Table:
    """One kernel's ``end`` moved to the last end of its GPU: that GPU is never idle after it."""
    frame = table.select(["start", "end", "gpu_key"]).to_pandas()
    gpu = sorted(frame["gpu_key"].astype(str).unique())[0]
    mine = frame[frame["gpu_key"].astype(str) == gpu]
    first = int(mine["start"].idxmin())
    return set_value(table, "end", first, int(mine["end"].max()))


def reseal(entry: Path) -> None:
    """Write the entry's checksum sidecar so that it matches its (changed) files: a change the
    checksum cannot see (a tool or an older writer that rewrote the entry and its checksums)."""
    sums = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(entry.iterdir()) if p.name != SUMS}
    (entry / SUMS).write_text(json.dumps({"sha256": sums}))


def assert_same_fleet(got: pd.DataFrame, want: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(got, want)


def notes(proc: subprocess.CompletedProcess) -> list[str]:
    return [line for line in proc.stderr.splitlines() if "failed its check" in line]


def run_on_changed_entry(inputs, tmp_path, change, *options) -> tuple[Path, subprocess.CompletedProcess]:
    """Run once (filling the caches), apply ``change(entry)`` to the columnar cache entry, run again with
    :data:`NEW_CONFIG` into ``tmp_path/second``; that run must exit 0. Returns (entry, second run)."""
    cache = tmp_path / "cache"
    run(inputs, tmp_path / "first", cache, *options)
    [entry] = entries(cache)
    change(entry)
    second = run(inputs, tmp_path / "second", cache, *options, *NEW_CONFIG, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    return entry, second


# -- (a) a value changed inside a columnar cache entry -------------------------------------------------------

def _more_warnings(entry: Path) -> None:
    doc = json.loads((entry / "report.json").read_text())
    doc["warnings"].append(["dropped-kernel-rows", "dropped 1 kernel row", None])
    (entry / "report.json").write_text(json.dumps(doc))


def _other_model(entry: Path) -> None:
    rewrite_frame(frame(entry, "devices"), lambda t: set_value(t, "gpu_model", 0, "NVIDIA A100-SXM4-80GB"))


CHANGES = {
    "kernel-end": lambda entry: rewrite_frame(frame(entry, "kernels"), cover_the_gpu),
    "gpu-model": _other_model,
    "report-json": _more_warnings,
    "truncated": lambda entry: frame(entry, "kernels").write_bytes(frame(entry, "kernels").read_bytes()[:500]),
    "missing": lambda entry: frame(entry, "copies").unlink(),
}


@pytest.mark.slow
@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changed_column_entry_is_rebuilt_and_gives_the_true_numbers(report, tmp_path, change):
    cache = tmp_path / "cache"
    entry, second = run_on_changed_entry(report, tmp_path, CHANGES[change])
    want = truth(report, tmp_path, *NEW_CONFIG)
    assert_same_fleet(fleet(tmp_path / "second"), want)
    assert set(want["status"]) == {"ok"}
    [note] = notes(second)
    assert note.startswith("gpu-idle: WARNING: ") and str(report) in note and entry.name in note and "rebuilt" in note
    assert "Traceback" not in second.stderr
    # the entry was rebuilt whole, and the stored result of that run is the true one
    third = run(report, tmp_path / "third", cache, *NEW_CONFIG)
    assert "0 report(s) analysed, 1 reused" in third.stdout and not notes(third)
    assert_same_fleet(fleet(tmp_path / "third"), want)
    fourth = run(report, tmp_path / "fourth", cache, "--min-gap-ns", "250000")  # read from the rebuilt entry
    assert not notes(fourth)
    assert_same_fleet(fleet(tmp_path / "fourth"), truth(report, tmp_path, "--min-gap-ns", "250000"))


def test_changed_entry_of_a_pytorch_trace_is_rebuilt(tmp_path):
    trace = tmp_path / "in" / "rank0.json.gz"
    trace.parent.mkdir()
    shutil.copyfile(KINETO / "ws128_sampled_rank0.json.gz", trace)
    entry, second = run_on_changed_entry(trace, tmp_path, CHANGES["kernel-end"], "--window", "span")
    assert "-kineto" in entry.name
    assert_same_fleet(fleet(tmp_path / "second"), truth(trace, tmp_path, "--window", "span", *NEW_CONFIG))
    assert len(notes(second)) == 1


@pytest.mark.slow
def test_changed_entries_on_a_local_cluster_are_rebuilt(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    for i in range(2):
        generate_scaled_report(str(folder / f"job{i}.sqlite"), gpus=2, kernels=2000, seed=50 + i)
    cache = tmp_path / "cache"
    run(folder, tmp_path / "first", cache)
    for entry in entries(cache):
        rewrite_frame(frame(entry, "kernels"), cover_the_gpu)
    second = run(folder, tmp_path / "second", cache, *NEW_CONFIG, process=True)
    assert "dask:" in second.stdout  # two reports: analysed on the workers
    assert_same_fleet(fleet(tmp_path / "second"), truth(folder, tmp_path, *NEW_CONFIG))
    assert len(notes(second)) == 2, second.stderr  # said by the workers, on the run's stderr


# -- (b) a cache file with a valid but wrong schema ---------------------------------------------------------

def _renamed_column(entry: Path) -> None:
    rewrite_frame(frame(entry, "kernels"), lambda t: t.rename_columns(["stop" if n == "end" else n
                                                                           for n in t.column_names]))


def _text_times(entry: Path) -> None:
    rewrite_frame(frame(entry, "kernels"), lambda t: t.set_column(
        t.schema.get_field_index("end"), "end", pa.array([str(v) for v in t.column("end").to_pylist()])))


def _other_table(entry: Path) -> None:
    shutil.copyfile(frame(entry, "kernels"), frame(entry, "devices"))


SCHEMAS = {"renamed-column": _renamed_column, "text-times": _text_times, "other-table": _other_table}


@pytest.mark.slow
@pytest.mark.parametrize("schema", sorted(SCHEMAS))
def test_wrong_schema_in_a_column_entry_is_a_miss_not_a_failure(report, tmp_path, schema):
    cache = tmp_path / "cache"
    _, second = run_on_changed_entry(report, tmp_path, SCHEMAS[schema])
    assert_same_fleet(fleet(tmp_path / "second"), truth(report, tmp_path, *NEW_CONFIG))
    assert len(notes(second)) == 1
    third = run(report, tmp_path / "third", cache, "--min-gap-ns", "250000")
    assert not notes(third)


# -- (c) the export cache ---------------------------------------------------------------------------------------

def _truncated(export: Path) -> None:
    with open(export, "r+b") as fh:  # the 16-byte SQLite header stays
        fh.truncate(export.stat().st_size // 2)


def _byte_changed(export: Path) -> None:
    data = bytearray(export.read_bytes())
    data[len(data) // 2] ^= 0xFF
    export.write_bytes(bytes(data))


def _no_checksum(export: Path) -> None:
    """An export cached by a version that recorded no checksum: only the export is left."""
    for other in export.parent.iterdir():
        if other != export:
            other.unlink()


DAMAGE = {"truncated": _truncated, "byte-changed": _byte_changed, "no-checksum": _no_checksum}


def _nvtx(path) -> pd.DataFrame:
    return load_report(str(path), require_kernels=False).nvtx


@pytest.mark.needs_nsys
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_export_in_the_export_cache_is_exported_again(recording, nsys, tmp_path, capsys, damage):
    calls = tmp_path / "calls.log"
    wrapper = _write_exe(tmp_path / "nsys-counting", f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{nsys}" "$@"\n')
    cache = tmp_path / "exports"
    first = Path(export_report(recording, nsys_path=wrapper, cache_dir=cache))
    good = tmp_path / "good.sqlite"
    shutil.copyfile(first, good)
    capsys.readouterr()
    DAMAGE[damage](first)
    again = export_report(recording, nsys_path=wrapper, cache_dir=cache)
    assert len(calls.read_text().splitlines()) == 2, "the damaged export was served"
    assert again == str(first)
    pd.testing.assert_frame_equal(_nvtx(again), _nvtx(good))
    [note] = [line for line in capsys.readouterr().err.splitlines() if "failed its check" in line]
    assert str(recording) in note and first.name in note and "exported again" in note
    assert export_report(recording, nsys_path=wrapper, cache_dir=cache) == again
    assert len(calls.read_text().splitlines()) == 2, "the new export is served from then on"
    assert not capsys.readouterr().err


@pytest.mark.parametrize("damage", ["byte-changed", "no-checksum"])
def test_changed_staged_copy_of_a_remote_report_is_downloaded_again(s3, profiles, tmp_path, capsys, damage):
    """The staging cache of remote reports: a copy whose bytes changed in place (same size, so the size
    check passes) or that has no checksum is downloaded again, not analysed."""
    bucket, source = f"integrity-{damage}", profiles / "tiny_2kernels.sqlite"
    client(s3).create_bucket(Bucket=bucket)
    client(s3).upload_file(str(source), bucket, "run.sqlite")
    url, options, cache = f"s3://{bucket}/run.sqlite", {"endpoint_url": s3}, tmp_path / "staged"
    first = stage_info(url, options, cache)
    assert first.downloaded
    capsys.readouterr()
    (_byte_changed if damage == "byte-changed" else _no_checksum)(Path(first.path))
    again = stage_info(url, options, cache)
    assert again.downloaded and again.path == first.path
    assert Path(again.path).read_bytes() == source.read_bytes()
    [note] = [line for line in capsys.readouterr().err.splitlines() if "failed its check" in line]
    assert url in note and "downloaded again" in note
    assert not stage_info(url, options, cache).downloaded


# -- (d) stored results --------------------------------------------------------------------------------------

@pytest.mark.slow
def test_result_of_an_entry_that_later_holds_other_content_is_not_served(report, tmp_path):
    """The issue's sequence: a changed entry gives a result that is stored; the entry is restored; the
    stored result must not be served. The change here is one the checksum cannot see (the entry's
    checksums rewritten to match), so the result it gives is stored; its recorded source checksum
    then differs from the restored entry's."""
    cache = tmp_path / "cache"
    run(report, tmp_path / "first", cache)
    [entry] = entries(cache)
    original = tmp_path / "original-entry"
    shutil.copytree(entry, original)
    rewrite_frame(frame(entry, "kernels"), cover_the_gpu)
    reseal(entry)
    run(report, tmp_path / "forged", cache, *NEW_CONFIG)
    want = truth(report, tmp_path, *NEW_CONFIG)
    forged = fleet(tmp_path / "forged")
    assert not forged["idle_pct"].equals(want["idle_pct"]), "the change must matter for the test to mean anything"
    shutil.rmtree(entry)
    shutil.copytree(original, entry)  # restored
    again = run(report, tmp_path / "again", cache, *NEW_CONFIG)
    assert "1 report(s) analysed, 0 reused" in again.stdout
    assert_same_fleet(fleet(tmp_path / "again"), want)
    assert any("stored result" in line and str(report) in line for line in notes(again)), again.stderr


def _stored(cache) -> tuple[Path, Path]:
    [parquet] = sorted((Path(cache) / "results").glob("*.parquet"))
    return parquet, parquet.with_suffix(".json")


def _idle_pct_changed(cache) -> None:
    parquet, _ = _stored(cache)
    rewrite_parquet(parquet, lambda t: set_value(t, "idle_pct", 0, 0.0))


def _roster_changed(cache) -> None:
    _, rosters = _stored(cache)
    doc = json.loads(rosters.read_text())
    doc[0]["device"][0]["length_ns"] += 1000
    rosters.write_text(json.dumps(doc))


def _no_result_checksum(cache) -> None:
    """A result stored by a version that recorded no checksums: only its rows and rosters are left."""
    parquet, rosters = _stored(cache)
    for other in parquet.parent.iterdir():
        if other not in (parquet, rosters):
            other.unlink()


@pytest.mark.slow
@pytest.mark.parametrize("change", [_idle_pct_changed, _roster_changed, _no_result_checksum],
                         ids=["fleet-row", "roster", "no-checksum"])
def test_changed_stored_result_is_not_served(report, tmp_path, change):
    cache = tmp_path / "cache"
    run(report, tmp_path / "first", cache)
    change(cache)
    second = run(report, tmp_path / "second", cache)
    assert "1 report(s) analysed, 0 reused" in second.stdout
    assert_same_fleet(fleet(tmp_path / "second"), truth(report, tmp_path))
    if change is not _no_result_checksum:  # that one is a plain miss: it may be a result being stored now
        assert any("stored result" in line for line in notes(second)), second.stderr
    gpus = sorted((tmp_path / "second" / "gpus").glob("*.json"))
    want = sorted((truth_dir(report, tmp_path) / "gpus").glob("*.json"))
    assert [json.loads(p.read_text())["device_roster"] for p in gpus] == \
        [json.loads(p.read_text())["device_roster"] for p in want]


def test_changed_identity_index_entry_does_not_serve_another_reports_result(tmp_path):
    """The identity index is a cache of content hashes: an entry whose hash was changed in place to
    another report's must not make that report's result be served (relabelled) for this one."""
    from pipeline.store.results import IdentityIndex

    a, b = tmp_path / "x" / "job.sqlite", tmp_path / "y" / "job.sqlite"  # same labels: same result key per content
    a.parent.mkdir()
    b.parent.mkdir()
    generate_scaled_report(str(a), gpus=2, kernels=2000, seed=60)
    generate_scaled_report(str(b), gpus=2, kernels=2000, seed=61)
    settled = max(os.stat(p).st_ctime_ns for p in (a, b)) + IdentityIndex.SETTLE_NS
    while time.time_ns() <= settled:  # the index records only files that have settled
        time.sleep(0.1)
    cache = tmp_path / "cache"
    run(a, tmp_path / "a", cache)
    run(b, tmp_path / "b", cache)
    path = cache / IdentityIndex.NAME
    index = json.loads(path.read_text())
    index[str(a)][4] = index[str(b)][4]
    path.write_text(json.dumps(index))
    again = run(a, tmp_path / "again", cache)
    assert_same_fleet(fleet(tmp_path / "again"), fleet(tmp_path / "a"))
    assert "1 reused" in again.stdout  # its own stored result, found by its real hash
    assert any(str(path) in line for line in notes(again)), again.stderr


@pytest.mark.parametrize("kind", [".html", ".svg"], ids=["gpu-page", "timeline"])
def test_changed_plot_cache_entry_is_drawn_again(profiles, tmp_path, capsys, kind):
    """The report's plot cache keeps GPU pages (with their numbers) and the timelines the workers draw
    ahead of them: one changed in place is rendered again, so the page written is the one rendered
    without any cache."""
    from pipeline.config import load_config
    from pipeline.runs.driver import Todo, report_sinks
    from pipeline.work.tasks import report_task
    from pipeline.report import gpu_page

    cfg = load_config([])
    path = str(profiles / "train_h100_2gpu_nccl.sqlite")
    report_task(path, cfg.labels_for(path), cfg, report_sinks(Todo(path, {}), cfg, str(tmp_path / "gpus")))
    texts = {(json.loads(p.read_text())["report"], json.loads(p.read_text())["gpu_key"]): p.read_text()
             for p in (tmp_path / "gpus").glob("*.json")}
    rows = [(r, g, None) for r, g in sorted(texts)]
    cache = tmp_path / "plots"

    def pages(night: str, plot_cache) -> dict:
        written = gpu_page.write_gpu_pages(rows, lambda r, g: texts[(r, g)], str(tmp_path / night / "report.html"),
                                           plot_cache)
        return {key: (tmp_path / night / name).read_text() for key, name in written.items()}

    if kind == ".html":
        pages("n1", str(cache))
    else:
        gpu_page.draw_timelines([str(p) for p in sorted((tmp_path / "gpus").glob("*.json"))], str(cache))
    [changed, *_] = sorted(cache.glob(f"*{kind}"))
    text = changed.read_text()
    digit = next(i for i, ch in enumerate(text) if ch.isdigit() and i > len(text) // 2)
    changed.write_text(text[:digit] + str((int(text[digit]) + 1) % 10) + text[digit + 1:])
    capsys.readouterr()
    assert pages("n2", str(cache)) == pages("fresh", None)
    [note] = [line for line in capsys.readouterr().err.splitlines() if "failed its check" in line]
    assert changed.name in note and "drawn again" in note


# -- (e) issue 42 points 6 and 17: an entry is checked against what it claims to hold ---------------------------
# Checksums only say the bytes are those written. An entry renamed or swapped with another (every checksum
# matches), an entry of other loader code (a hand-bumped version that another build bumped alike), and a frame
# of the wrong schema whose checksums were rewritten to match are each a cache miss: rebuilt from the file.

from pipeline import kinds  # noqa: E402 - the section's own imports
from pipeline.load import cache as columnar  # noqa: E402
from pipeline.model import ProfileError  # noqa: E402


def _gpus(report) -> list:
    return sorted(report.devices["gpu_key"].astype(str))


def _two_exports(tmp_path) -> tuple[str, str]:
    """Two generated exports with different GPUs: a 2-GPU job and a 3-GPU one."""
    a, b = tmp_path / "in" / "a.sqlite", tmp_path / "in" / "b.sqlite"
    a.parent.mkdir(exist_ok=True)
    generate_scaled_report(str(a), gpus=2, kernels=2000, seed=70)
    generate_scaled_report(str(b), gpus=3, kernels=3000, seed=71)
    return str(a), str(b)


def _swap(one: Path, other: Path) -> None:
    parked = one.with_name(".parked")
    one.rename(parked)
    other.rename(one)
    parked.rename(other)


def _check_notes(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if "failed its check" in line]


def test_swapped_column_entries_are_misses_not_each_others_gpus(tmp_path, capsys):
    a, b = _two_exports(tmp_path)
    cache = tmp_path / "cache"
    want = {a: _gpus(load_report(a)), b: _gpus(load_report(b))}
    assert len(want[a]) == 2 and len(want[b]) == 3
    for path in (a, b):
        columnar.load_cached(path, cache)
    entry_a, entry_b = columnar.entry_dir(a, cache), columnar.entry_dir(b, cache)
    _swap(entry_a, entry_b)  # every checksum still matches its own files
    capsys.readouterr()
    got = {path: _gpus(columnar.load_cached(path, cache)) for path in (a, b)}
    assert got == want
    said = _check_notes(capsys)
    assert len(said) == 2 and all("renamed or swapped" in line for line in said), said
    # rebuilt: read from the entries from now on, silently
    again = {path: columnar.load_cached(path, cache) for path in (a, b)}
    assert {p: _gpus(r) for p, r in again.items()} == want and all(r.sources for r in again.values())
    assert not _check_notes(capsys)


def test_a_frame_from_another_entry_with_checksums_rewritten_is_a_miss(tmp_path, capsys):
    """The variant of one file: the kernels of the other report copied into this entry, its checksums rewritten."""
    a, b = _two_exports(tmp_path)
    cache = tmp_path / "cache"
    for path in (a, b):
        columnar.load_cached(path, cache)
    entry = columnar.entry_dir(a, cache)
    shutil.copyfile(frame(columnar.entry_dir(b, cache), "kernels"), frame(entry, "kernels"))
    reseal(entry)
    capsys.readouterr()
    got = columnar.load_cached(a, cache)
    assert sorted(got.kernels["gpu_key"].astype(str).unique()) == _gpus(load_report(a))
    [said] = _check_notes(capsys)
    assert columnar.frame_file("kernels") in said and "renamed or swapped" in said


@pytest.mark.slow
def test_swapped_entries_give_each_run_its_own_reports_numbers(tmp_path):
    """Through ``gpu-idle run``: the swapped entry's numbers are neither shown nor stored."""
    a, b = _two_exports(tmp_path)
    cache = tmp_path / "cache"
    run(a, tmp_path / "a1", cache)
    run(b, tmp_path / "b1", cache)
    _swap(*(columnar.entry_dir(p, cache) for p in (a, b)))
    second = run(a, tmp_path / "a2", cache, *NEW_CONFIG)
    want = truth(a, tmp_path, *NEW_CONFIG)
    assert_same_fleet(fleet(tmp_path / "a2"), want)
    assert len(want) == 2 and len(notes(second)) == 1
    third = run(a, tmp_path / "a3", cache, *NEW_CONFIG)  # the stored result is the true one
    assert "0 report(s) analysed, 1 reused" in third.stdout
    assert_same_fleet(fleet(tmp_path / "a3"), want)


def _older_loader_entry(monkeypatch, path: str, cache: Path) -> Path:
    """The entry an older build wrote for ``path`` (returned): its loader read the export's REAL kernel end as a
    time (the tiny export's own rows), and its code was other code. The version constant is this build's (bumped
    alike)."""
    loader = columnar.LOADERS[kinds.SQLITE]
    with monkeypatch.context() as patch:
        patch.setattr(columnar, "loader_code", lambda: "0" * 64, raising=False)
        patch.setitem(columnar.LOADERS, kinds.SQLITE, lambda p: loader(str(TINY_EXPORT)))
        assert len(columnar.load_cached(path, cache).kernels) == 2
        older = columnar.entry_dir(path, cache)
    assert older.is_dir() and older.name.endswith("-code" + "0" * columnar.NAME_DIGEST)
    assert older != columnar.entry_dir(path, cache)  # another name than this build's
    return older


#: The tiny shared export (2 kernels on 1 GPU) and a copy of it whose kernel end is REAL: an error row since
#: loader version 17 (tests/test_hostile_columns.py).
TINY_EXPORT = PROFILES / "tiny_2kernels.sqlite"


def _real_end(tmp_path) -> str:
    import sqlite3

    path = tmp_path / "in" / "real-end.sqlite"
    path.parent.mkdir(exist_ok=True)
    shutil.copyfile(TINY_EXPORT, path)
    con = sqlite3.connect(path)
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + 0.5 WHERE rowid = '
                "(SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.commit()
    con.close()
    return str(path)


def test_an_older_loaders_entry_is_not_read_so_the_error_stays_an_error(tmp_path, monkeypatch, capsys):
    """Another build's entry is not this build's name: never read, left to its build, and no warning."""
    path, cache = _real_end(tmp_path), tmp_path / "cache"
    with pytest.raises(ProfileError, match="not an integer"):
        load_report(path)
    older = _older_loader_entry(monkeypatch, path, cache)
    capsys.readouterr()
    with pytest.raises(ProfileError, match="not an integer"):
        columnar.load_cached(path, cache)
    assert "WARNING" not in capsys.readouterr().err
    assert entries(cache) == [older]


def test_an_older_loaders_entry_renamed_to_this_builds_name_is_a_miss(tmp_path, monkeypatch, capsys):
    """What the entry records of its loader code is checked, whatever its name says."""
    path, cache = _real_end(tmp_path), tmp_path / "cache"
    older = _older_loader_entry(monkeypatch, path, cache)
    older.rename(columnar.entry_dir(path, cache))
    capsys.readouterr()
    with pytest.raises(ProfileError, match="not an integer"):
        columnar.load_cached(path, cache)
    [said] = _check_notes(capsys)
    assert "other loader code" in said and path in said and "report.json" in said
    assert entries(cache) == []


def test_an_older_loaders_entry_does_not_turn_the_error_row_into_ok(tmp_path, monkeypatch):
    path, cache = _real_end(tmp_path), tmp_path / "cache"
    _older_loader_entry(monkeypatch, path, cache)
    proc = run(path, tmp_path / "out", cache, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a report failed
    rows = fleet(tmp_path / "out")
    assert list(rows["status"]) == ["error"], rows.to_dict("records")
    assert "not an integer" in rows["error"].iloc[0]
    assert "WARNING" not in proc.stderr


def _entry_written_by_earlier_version(entry: Path) -> None:
    """An entry of an earlier version: the same frames, no record of its source or loader (checksums rewritten)."""
    for name in columnar.FRAMES:
        rewrite_frame(frame(entry, name), lambda t: t.replace_schema_metadata(
            {k: v for k, v in (t.schema.metadata or {}).items() if not k.startswith(b"gpu_idle.")}))
    doc = json.loads((entry / "report.json").read_text())
    (entry / "report.json").write_text(json.dumps({k: v for k, v in doc.items() if not k.startswith("gpu_idle.")}))
    reseal(entry)


def test_an_entry_that_records_no_source_or_loader_is_a_miss(tmp_path, capsys):
    a, _ = _two_exports(tmp_path)
    cache = tmp_path / "cache"
    columnar.load_cached(a, cache)
    _entry_written_by_earlier_version(columnar.entry_dir(a, cache))
    capsys.readouterr()
    assert _gpus(columnar.load_cached(a, cache)) == _gpus(load_report(a))
    [said] = _check_notes(capsys)
    assert "records no source or loader digest" in said
    assert columnar.load_cached(a, cache).sources and not _check_notes(capsys)


# point 17: a wrong schema under matching checksums (and a true record of source and loader)

def _kept(change):
    """``change`` of a frame's table keeping its schema metadata (what the entry records of itself)."""
    return lambda t: change(t).replace_schema_metadata(t.schema.metadata)


def _float_times(entry: Path) -> None:
    rewrite_frame(frame(entry, "kernels"), _kept(lambda t: t.set_column(
        t.schema.get_field_index("start"), "start", t.column("start").cast(pa.float64()))))


def _no_gpu_model(entry: Path) -> None:
    rewrite_frame(frame(entry, "devices"), _kept(lambda t: t.drop_columns(["gpu_model"])))


def _text_flag(entry: Path) -> None:
    rewrite_frame(frame(entry, "devices"), _kept(lambda t: t.set_column(
        t.schema.get_field_index("mig"), "mig", pa.array([str(v) for v in t.column("mig").to_pylist()]))))


RESEALED_SCHEMAS = {
    "renamed-column": lambda e: rewrite_frame(frame(e, "kernels"), _kept(lambda t: t.rename_columns(
        ["stop" if n == "end" else n for n in t.column_names]))),
    "text-times": _text_times,
    "float-times": _float_times,
    "no-gpu-model": _no_gpu_model,
    "text-flag": _text_flag,
}


@pytest.mark.parametrize("schema", sorted(RESEALED_SCHEMAS))
def test_wrong_schema_under_a_matching_checksum_is_a_miss(tmp_path, capsys, schema):
    a, _ = _two_exports(tmp_path)
    cache = tmp_path / "cache"
    columnar.load_cached(a, cache)
    entry = columnar.entry_dir(a, cache)
    RESEALED_SCHEMAS[schema](entry)
    reseal(entry)
    capsys.readouterr()
    got = columnar.load_cached(a, cache)
    want = load_report(a)
    assert got.kernels["end"].tolist() == want.kernels["end"].tolist()
    assert got.kernels["start"].dtype.kind == "i"
    assert got.devices["gpu_model"].tolist() == want.devices["gpu_model"].tolist()
    [said] = _check_notes(capsys)
    assert "as the loader writes it" in said and str(entry) in said and "rebuilt" in said
    assert columnar.load_cached(a, cache).sources and not _check_notes(capsys)


def test_wrong_schema_under_a_matching_checksum_fails_no_run(report, tmp_path):
    """Through ``gpu-idle run``: the report's row is the true one, not an error blaming the export, and the
    next run reads the rebuilt entry."""
    cache = tmp_path / "cache"

    def change(entry):
        RESEALED_SCHEMAS["renamed-column"](entry)  # its record of its source and loader kept: only the schema is wrong
        reseal(entry)

    _, second = run_on_changed_entry(report, tmp_path, change)
    assert_same_fleet(fleet(tmp_path / "second"), truth(report, tmp_path, *NEW_CONFIG))
    assert [n for n in notes(second) if "as the loader writes it" in n] == notes(second) and len(notes(second)) == 1
    third = run(report, tmp_path / "third", cache, "--min-gap-ns", "250000")
    assert not notes(third)
    assert set(fleet(tmp_path / "third")["status"]) == {"ok"}
