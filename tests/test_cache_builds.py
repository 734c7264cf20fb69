"""The columnar cache shared by checkouts of different builds (docs/operations.md#caches): entries are named by
the loader code's digest, so each build hits its own and never reads, evicts or warns about another's; the folder
is kept within ``cache.max_gib``, least recently used entries of any build removed first, atomically; a warning
only for a real fault (a corrupt entry, a folder that cannot be written), naming the file and the cause.

In process throughout, on the tiny shared export (2 kernels on 1 GPU) and a copy of it made different by one
kernel's end; each test has its own cache folder. A "build" is :func:`pipeline.code_keys.loader_code` patched in
:mod:`pipeline.load.cache` (what names the entries and what they record)."""
from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from conftest import PROFILES, run_cli

from pipeline import kinds
from pipeline.load import cache as columnar
from pipeline.load.report import load_report

TINY = str(PROFILES / "tiny_2kernels.sqlite")
#: The loader code digests of two builds.
BUILD_A, BUILD_B = "a" * 64, "b" * 64


@pytest.fixture(scope="module")
def other(tmp_path_factory) -> str:
    """A copy of the tiny export whose first kernel ends 1 us later: other content, another entry."""
    path = tmp_path_factory.mktemp("in") / "other.sqlite"
    shutil.copyfile(TINY, path)
    con = sqlite3.connect(path)
    con.execute('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = "end" + 1000 WHERE rowid = '
                "(SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_KERNEL)")
    con.commit()
    con.close()
    return str(path)


@pytest.fixture
def loads(monkeypatch) -> list[str]:
    """The paths the SQLite loader read (not the cache), in order."""
    read, loader = [], columnar.LOADERS[kinds.SQLITE]

    def counted(path):
        read.append(path)
        return loader(path)

    monkeypatch.setitem(columnar.LOADERS, kinds.SQLITE, counted)
    return read


def as_build(monkeypatch, digest: str) -> None:
    monkeypatch.setattr(columnar, "loader_code", lambda: digest)


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if "WARNING" in line]


def kernel_ends(report) -> list[int]:
    return [int(v) for v in report.kernels["end"]]


def entry_names(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if columnar.ENTRY_RE.match(p.name))


def test_two_builds_sharing_one_folder_each_hit_their_own_entries(tmp_path, monkeypatch, loads, capsys):
    cache = tmp_path / "cache"
    want = kernel_ends(load_report(TINY))
    key = columnar.snapshot_key(TINY)
    served = []
    for digest in (BUILD_A, BUILD_B, BUILD_A, BUILD_B, BUILD_A):
        as_build(monkeypatch, digest)
        report = columnar.load_cached(TINY, cache)
        assert kernel_ends(report) == want
        served.append([Path(s["entry"]).name for s in report.sources])
    # each build read SQLite once (its first run), then its own entry every time
    assert loads == [TINY, TINY]
    a, b = f"{key}-code{'a' * 16}", f"{key}-code{'b' * 16}"
    assert served == [[], [], [a], [b], [a]]
    assert entry_names(cache) == [a, b]
    assert warnings_in(capsys.readouterr().err) == []


def test_a_first_run_beside_another_builds_entries_prints_no_warning(tmp_path, monkeypatch):
    """The new user's ``make run`` on a cache folder another checkout filled: not one WARNING line."""
    cache = tmp_path / "cache"
    with monkeypatch.context() as patch:
        as_build(patch, BUILD_A)
        columnar.load_cached(TINY, cache)
    [theirs] = entry_names(cache)
    proc = run_cli("run", TINY, "--out", str(tmp_path / "out"), "--workers", "1", env={"GPU_IDLE_CACHE": str(cache)})
    assert warnings_in(proc.stderr) == [], proc.stderr
    ours = columnar.entry_dir(TINY, cache).name
    assert entry_names(cache) == sorted([theirs, ours]) and ours != theirs
    again = run_cli("run", TINY, "--out", str(tmp_path / "again"), "--workers", "1",
                    env={"GPU_IDLE_CACHE": str(cache)})
    assert warnings_in(again.stderr) == [], again.stderr


def _aged(entry: Path, seconds_ago: float) -> None:
    when = time.time() - seconds_ago
    os.utime(entry, (when, when))


def _bytes(entry: Path) -> int:
    return sum(os.path.getsize(entry / name) for name in os.listdir(entry))


def _three_entries(tmp_path, monkeypatch, other) -> tuple[Path, list[Path]]:
    """A folder with three entries used 300 s, 200 s and 100 s ago: build A's and build B's of the tiny export
    and build A's of the other, and what is not an entry (the results store, the identity index)."""
    cache = tmp_path / "cache"
    made = []
    for digest, path, age in ((BUILD_A, TINY, 300), (BUILD_B, TINY, 200), (BUILD_A, other, 100)):
        as_build(monkeypatch, digest)
        columnar.load_cached(path, cache)
        made.append(columnar.entry_dir(path, cache))
        _aged(made[-1], age)
    (cache / "results").mkdir()
    (cache / "results" / "r.parquet").write_bytes(b"x" * 10_000_000)
    (cache / "identity-index.json").write_text("{}")
    return cache, made


def test_pruning_removes_the_least_recently_used_entries_first(tmp_path, monkeypatch, other):
    cache, (oldest, middle, newest) = _three_entries(tmp_path, monkeypatch, other)
    sizes = [_bytes(e) for e in (oldest, middle, newest)]
    assert all(s > 0 for s in sizes)
    # one byte over what the two newest hold: the oldest goes, and only it (results/ is not an entry)
    assert columnar.prune(cache, sizes[1] + sizes[2] + 1) == [oldest]
    assert entry_names(cache) == sorted([middle.name, newest.name])
    assert columnar.prune(cache, sizes[1] + sizes[2]) == []
    assert columnar.prune(cache, sizes[2]) == [middle]
    assert entry_names(cache) == [newest.name]
    assert (cache / "results" / "r.parquet").exists() and (cache / "identity-index.json").exists()
    assert not [n for n in os.listdir(cache) if n.startswith(".")]  # no removal left behind, no lock file


def test_a_hit_marks_its_entry_used(tmp_path, monkeypatch, other):
    cache, (oldest, middle, newest) = _three_entries(tmp_path, monkeypatch, other)
    as_build(monkeypatch, BUILD_A)
    assert columnar.load_cached(TINY, cache).sources  # a hit on the oldest: now the most recently used
    assert columnar.prune(cache, _bytes(oldest) + _bytes(newest)) == [middle]


def test_an_earlier_versions_entries_and_a_killed_writers_folders_are_pruned(tmp_path, monkeypatch, other):
    cache, (oldest, middle, newest) = _three_entries(tmp_path, monkeypatch, other)
    earlier = cache / f"{'c' * 64}-v22"
    shutil.copytree(newest, earlier)
    _aged(earlier, 400)
    stale, fresh = cache / f".{newest.name}.{'1' * 12}.tmp", cache / f".{newest.name}.{'2' * 12}.tmp"
    person = cache / ".notes.tmp"
    for folder in (stale, fresh, person):
        folder.mkdir()
        _aged(folder, 7200)
    _aged(fresh, 60)
    keep = _bytes(middle) + _bytes(newest)
    assert columnar.prune(cache, keep) == [earlier, oldest]
    assert not stale.exists() and fresh.exists() and person.exists()


def test_writing_prunes_to_the_bound_and_keeps_the_new_entry(tmp_path, monkeypatch, other):
    """Through ``load_cached(max_bytes=)``: the process's first entry written into the folder prunes it."""
    cache, (oldest, middle, newest) = _three_entries(tmp_path, monkeypatch, other)
    as_build(monkeypatch, BUILD_B)
    columnar.load_cached(other, cache, max_bytes=2 * _bytes(newest))
    written = columnar.entry_dir(other, cache)
    assert _bytes(written) == _bytes(newest)  # the same tables, recording a digest as long
    assert entry_names(cache) == sorted([newest.name, written.name])
    # a bound smaller than the entry just written keeps that entry all the same
    as_build(monkeypatch, "d" * 64)
    monkeypatch.setattr(columnar, "_WRITTEN", {})
    columnar.load_cached(other, cache, max_bytes=1)
    assert entry_names(cache) == [columnar.entry_dir(other, cache).name]


def test_cache_max_gib_bounds_the_folder_of_a_run(tmp_path, monkeypatch, other):
    """``cache.max_gib`` reaches the workers' writes: a bound below one entry leaves only the run's own."""
    cache, _ = _three_entries(tmp_path, monkeypatch, other)
    monkeypatch.undo()
    config = tmp_path / "small.yaml"
    config.write_text("cache: {max_gib: 1.0e-9}\n")
    monkeypatch.setattr(columnar, "_WRITTEN", {})
    proc = run_cli("run", TINY, "--out", str(tmp_path / "out"), "--workers", "1", "--config", str(config),
                   env={"GPU_IDLE_CACHE": str(cache)})
    assert warnings_in(proc.stderr) == [], proc.stderr
    assert entry_names(cache) == [columnar.entry_dir(TINY, cache).name]


def test_a_corrupt_entry_is_a_miss_with_one_warning_naming_the_file(tmp_path, loads, capsys):
    cache = tmp_path / "cache"
    want = kernel_ends(load_report(TINY))
    columnar.load_cached(TINY, cache)
    entry = columnar.entry_dir(TINY, cache)
    kernels = entry / columnar.frame_file("kernels")
    kernels.write_bytes(kernels.read_bytes()[:-100])
    capsys.readouterr()
    got = columnar.load_cached(TINY, cache)
    assert kernel_ends(got) == want and got.sources == []
    [said] = warnings_in(capsys.readouterr().err)
    assert str(entry) in said and f"{kernels.name} does not match its recorded checksum" in said
    assert loads == [TINY, TINY]  # the first load and the rebuild
    assert columnar.load_cached(TINY, cache).sources and warnings_in(capsys.readouterr().err) == []


def test_an_entry_whose_checked_bytes_do_not_parse_names_the_file(tmp_path, capsys):
    from pipeline.checksums import seal

    cache = tmp_path / "cache"
    columnar.load_cached(TINY, cache)
    entry = columnar.entry_dir(TINY, cache)
    (entry / columnar.frame_file("copies")).write_bytes(b"not an Arrow file")
    seal(entry / columnar.SUMS, entry, columnar.ENTRY_FILES)
    capsys.readouterr()
    assert kernel_ends(columnar.load_cached(TINY, cache)) == kernel_ends(load_report(TINY))
    [said] = warnings_in(capsys.readouterr().err)
    assert str(entry) in said and f"{columnar.frame_file('copies')} does not parse (ArrowInvalid" in said


def test_an_entry_pruned_while_it_is_read_is_a_plain_miss(tmp_path, monkeypatch, loads, capsys):
    """Another process prunes the entry between two of this reader's files: no warning, the true report."""
    cache = tmp_path / "cache"
    columnar.load_cached(TINY, cache)
    entry = columnar.entry_dir(TINY, cache)
    checked = columnar.read_checked

    def pruned_meanwhile(folder, name, sums):
        if name == columnar.frame_file("kernels") and Path(folder) == entry:
            assert columnar._discard(entry)
        return checked(folder, name, sums)

    monkeypatch.setattr(columnar, "read_checked", pruned_meanwhile)
    capsys.readouterr()
    assert kernel_ends(columnar.load_cached(TINY, cache)) == kernel_ends(load_report(TINY))
    assert warnings_in(capsys.readouterr().err) == []
    assert loads == [TINY, TINY] and entry.is_dir()  # read again and written anew


def test_a_folder_that_cannot_be_written_is_one_warning_naming_the_entry_and_cause(tmp_path, other, capsys):
    cache = tmp_path / "cache"
    cache.write_text("a file where the folder should be")
    for path in (TINY, other):
        assert kernel_ends(columnar.load_cached(path, cache)) == kernel_ends(load_report(path))
    [said] = warnings_in(capsys.readouterr().err)
    assert str(columnar.entry_dir(TINY, cache)) in said and "not written (" in said and TINY in said
