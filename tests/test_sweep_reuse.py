"""An unchanged nightly sweep reuses the last night's outputs instead of rebuilding them (issue 4:
unchanged rerun <= 5 % of a full run); anything that changed makes it rebuild."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pandas as pd
import pytest
from conftest import run_cli

from pipeline.snapshot import snapshot_key
from pipeline.report.html import write_report
from pipeline.store import results as results_mod
from pipeline.store import results as sweeping
from pipeline.synth import generate_training_report

REPORTS = 6


def make_fleet(root):
    root.mkdir()
    for i in range(REPORTS):
        generate_training_report(str(root / f"job{i % 2}-node{i}.sqlite"), gpus=2, iterations=6, seed=70 + i,
                                 straggler_rank=None)
    return root


@pytest.fixture
def fleet_dir(tmp_path):
    """:data:`REPORTS` generated reports of this test's own (it may change them)."""
    return make_fleet(tmp_path / "fleet")


@pytest.fixture(scope="module")
def shared_fleet(tmp_path_factory):
    """:data:`REPORTS` generated reports no test changes, and the first night swept from them into a fresh
    state folder (night 2026-12-01, the defaults): ``(fleet folder, state folder, the sweep's stdout)``, made
    once for the module (a test copies the state folder: :func:`copy_first_night`)."""
    root = tmp_path_factory.mktemp("shared")
    fleet = make_fleet(root / "fleet")
    return fleet, root / "state", sweep(fleet, root / "state", "2026-12-01")


def copy_first_night(shared_fleet, state) -> str:
    """The module's first night copied to ``state``; returns the stdout of the sweep that made it."""
    shutil.copytree(shared_fleet[1], state, symlinks=True)
    return shared_fleet[2]


def sweep(fleet_dir, state, night, *extra):
    proc = run_cli("sweep", str(fleet_dir), "--state-dir", str(state), "--night", night, "--workers", "1", *extra)
    return proc.stdout


def night_files(folder) -> dict[str, os.stat_result]:
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            out[os.path.relpath(path, folder)] = os.stat(path)
    return out


def read(path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


@pytest.mark.slow
def test_unchanged_sweep_reuses_the_last_night(shared_fleet, tmp_path):
    fleet_dir, state = shared_fleet[0], tmp_path / "state"
    first = copy_first_night(shared_fleet, state)
    assert f"{REPORTS} report(s): {REPORTS} analysed, 0 reused, 0 failed" in first
    a, b = state / "nights" / "2026-12-01", state / "nights" / "2026-12-02"
    before = night_files(a)
    assert ".manifest.json" in before and "report.html" in before
    assert len([f for f in before if f.startswith("gpus")]) == REPORTS * 2

    second = sweep(fleet_dir, state, "2026-12-02")
    assert f"{REPORTS} report(s): 0 analysed, {REPORTS} reused, 0 failed" in second
    assert "dask:" not in second  # no cluster started
    assert f"sweep 2026-12-02: nothing changed since night 2026-12-01: its files copied into {b}" in second
    after = night_files(b)
    assert sorted(after) == sorted(before)
    for name in before:
        if name in ("report.html", ".manifest.json"):
            continue
        # the night before's bytes, in a file of its own (a copy: editing one night never edits the other)
        assert after[name].st_ino != before[name].st_ino, name
        assert read(b / name) == read(a / name), name
    hist = pd.read_parquet(state / "history")
    first_night = hist[hist["run_date"].astype(str) == "2026-12-01"].drop(columns="run_date")
    second_night = hist[hist["run_date"].astype(str) == "2026-12-02"].drop(columns="run_date")
    pd.testing.assert_frame_equal(first_night.reset_index(drop=True), second_night.reset_index(drop=True))
    # report.html is the one a fresh render of the second night gives (its trend has two nights)
    write_report(state, tmp_path / "fresh.html", night="2026-12-02")
    assert read(b / "report.html") == read(tmp_path / "fresh.html")
    assert b"<title>GPU idle cost 2026-12-02</title>" in read(b / "report.html")

    # The same night again: nothing is written at all.
    third = sweep(fleet_dir, state, "2026-12-02")
    assert f"{REPORTS} report(s): 0 analysed, {REPORTS} reused, 0 failed" in third
    assert "sweep 2026-12-02: nothing changed since this night's last sweep: its files kept" in third
    again = night_files(b)
    assert {k: (v.st_ino, v.st_mtime_ns) for k, v in again.items()} == \
           {k: (v.st_ino, v.st_mtime_ns) for k, v in after.items()}

    # Every report's hash is recorded with its stat, and it is the SHA-256 of the file.
    index = json.loads(read(state / "identity-index.json"))
    assert len(index) == REPORTS
    for path, (size, _, _, inode, digest, _) in index.items():
        assert digest == hashlib.sha256(read(path)).hexdigest()
        assert (size, inode) == (os.stat(path).st_size, os.stat(path).st_ino)


@pytest.mark.slow
def test_a_changed_report_or_a_damaged_night_is_rebuilt(fleet_dir, tmp_path):
    state = tmp_path / "state"
    sweep(fleet_dir, state, "2026-12-01")
    a = state / "nights" / "2026-12-01"
    # A damaged night (a file deleted) is not reused: the next night is written in full.
    victim = sorted((a / "records").iterdir())[0]
    victim_text = read(victim)
    victim.unlink()
    out = sweep(fleet_dir, state, "2026-12-02")
    assert f"0 analysed, {REPORTS} reused" in out
    b = state / "nights" / "2026-12-02"
    assert read(b / "records" / victim.name) == victim_text
    assert os.stat(b / "fleet.csv").st_ino != os.stat(a / "fleet.csv").st_ino  # written, not linked

    # One report changes: it is analysed again and the night equals a fresh sweep of the same inputs.
    changed = fleet_dir / "job1-node3.sqlite"
    changed.unlink()
    generate_training_report(str(changed), gpus=2, iterations=7, seed=999, straggler_rank=None)
    out = sweep(fleet_dir, state, "2026-12-03")
    assert f"{REPORTS} report(s): 1 analysed, {REPORTS - 1} reused, 0 failed" in out
    fresh = tmp_path / "fresh"
    sweep(fleet_dir, fresh, "2026-12-03")
    c, f = night_files(state / "nights" / "2026-12-03"), night_files(fresh / "nights" / "2026-12-03")
    # issue 27 point 5: the night that has an earlier one compares the changed job with it; the fresh one cannot
    compared = {k for k in c if k.startswith("compare/")}
    assert "compare/compare.html" in compared and not any(k.startswith("compare/") for k in f)
    assert sorted(set(c) - compared) == sorted(f)
    for name in f:
        if name in ("report.html", ".manifest.json", "fleet.parquet"):
            continue
        assert read(state / "nights" / "2026-12-03" / name) == read(fresh / "nights" / "2026-12-03" / name), name
    old = pd.read_csv(b / "fleet.csv")
    new = pd.read_csv(state / "nights" / "2026-12-03" / "fleet.csv")
    diff = old.compare(new)
    assert set(old.loc[diff.index, "report"]) == {str(changed)}


def test_identity_index_trusts_only_untouched_files(tmp_path, monkeypatch):
    state = tmp_path / "state"
    state.mkdir()
    report = tmp_path / "r.sqlite"
    report.write_bytes(b"a" * 64)
    monkeypatch.setattr(sweeping.IdentityIndex, "SETTLE_NS", 0)   # as if written long ago
    index = sweeping.IdentityIndex(str(state))
    assert index.identity(str(report)) == hashlib.sha256(b"a" * 64).hexdigest()
    index.save()

    # Untouched: the recorded hash, the file is not read.
    def no_read(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(results_mod, "snapshot_key", no_read)
    assert sweeping.IdentityIndex(str(state)).identity(str(report)) == hashlib.sha256(b"a" * 64).hexdigest()
    monkeypatch.setattr(results_mod, "snapshot_key", snapshot_key)

    # Same size, mtime put back: the ctime still tells, and the new content is hashed.
    stamp = os.stat(report)
    with open(report, "r+b") as fh:
        fh.write(b"b")
    os.utime(report, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    index = sweeping.IdentityIndex(str(state))
    assert index.identity(str(report)) == hashlib.sha256(b"b" + b"a" * 63).hexdigest()
    # Changed just now (its ctime is fresh): hashed, but not recorded until it settles.
    monkeypatch.undo()
    assert sweeping.IdentityIndex.SETTLE_NS == 2_000_000_000
    index = sweeping.IdentityIndex(str(state))
    assert index.identity(str(report)) == hashlib.sha256(b"b" + b"a" * 63).hexdigest()
    index.save()
    assert json.loads(read(state / "identity-index.json")) == {}


@pytest.mark.slow
def test_a_night_made_from_another_keeps_nothing_of_its_own_earlier_sweep(shared_fleet, tmp_path):
    """Night A swept without labels, night B with labels that rename the jobs, then A again with B's
    labels: A is made from B (same inputs) and holds exactly B's files, report.html aside; the records
    of A's unlabelled jobs are gone (before: they stayed beside B's, listed in A's new manifest, and its
    report showed both sets)."""
    labels = tmp_path / "labels.yaml"
    labels.write_text("labels:\n  - {match: '*job0-*', job: train-a}\n  - {match: '*job1-*', job: train-b}\n")
    fleet_dir, state = shared_fleet[0], tmp_path / "state"
    copy_first_night(shared_fleet, state)
    a, b = state / "nights" / "2026-12-01", state / "nights" / "2026-12-02"
    assert sorted(os.listdir(a / "records")) == sorted(f"job{i % 2}-node{i}.md" for i in range(REPORTS))
    sweep(fleet_dir, state, "2026-12-02", "--config", str(labels))
    out = sweep(fleet_dir, state, "2026-12-01", "--config", str(labels))
    assert "nothing changed since night 2026-12-02" in out
    assert sorted(os.listdir(a / "records")) == ["train-a.md", "train-b.md"]
    files_a = {k for k in night_files(a) if k not in ("report.html", ".manifest.json")}
    files_b = {k for k in night_files(b) if k not in ("report.html", ".manifest.json")}
    assert files_a == files_b
    listed = set(json.loads((a / ".manifest.json").read_text())["files"])
    assert listed - {"report.html"} == files_a


def test_known_entries_are_taken_unhashed_only_from_regular_files_of_their_size(tmp_path, monkeypatch):
    """The manifests of a night made from an earlier one (while its report is rendered, and its last) take the entries
    of the files just copied from a night whose manifest held (``known``) as they are, without hashing them again,
    while each is a regular file of its size; any other file is hashed, and without ``known`` every file is."""
    from pipeline.io import file_entry
    from pipeline.runs import sweep as night_mod
    from pipeline.store.results import write_folder_manifest

    night = tmp_path / "night"
    night.mkdir()
    for name, text in (("a.csv", "aaaa"), ("b.csv", "bbbb"), ("c.csv", "cc")):
        (night / name).write_text(text)
    os.symlink(night / "a.csv", night / "d.csv")
    write_folder_manifest(str(night), {n: None for n in ("a.csv", "b.csv", "c.csv", "d.csv")}, None, False)
    real = {n: file_entry(str(night / n)) for n in ("a.csv", "b.csv", "c.csv")}
    hashed = []
    monkeypatch.setattr(night_mod, "file_entry", lambda path: hashed.append(os.path.basename(path)) or file_entry(path))
    known = {"a.csv": real["a.csv"], "c.csv": {"size": 3, "sha256": real["c.csv"]["sha256"]},
             "d.csv": real["a.csv"]}
    got = night_mod.product_files(str(night), known)
    assert got == {"a.csv": real["a.csv"], "b.csv": real["b.csv"], "c.csv": real["c.csv"]}   # no link
    assert sorted(hashed) == ["b.csv", "c.csv"]    # a.csv as known; c.csv is not of its known size
    hashed.clear()
    assert night_mod.product_files(str(night)) == got and sorted(hashed) == ["a.csv", "b.csv", "c.csv"]


@pytest.mark.parametrize("kernel_copy", [True, False])
def test_copy_file_gives_a_file_of_its_own_with_the_same_bytes(tmp_path, monkeypatch, kernel_copy):
    """``copy_file`` (a night's files carried to the next): the same bytes, in a file of its own (another inode,
    the source untouched by an edit of the copy), through the kernel's copy or, where the kernel cannot, through
    Python from the start (a kernel copy that fails part way leaves nothing of its own in the result)."""
    from pipeline import io as pio

    if not kernel_copy:
        def refused(fin, fout, count):
            os.write(fout, b"junk")  # what a copy cut short may have written: overwritten by the fallback
            raise OSError(18, "Invalid cross-device link")
        monkeypatch.setattr(pio.os, "copy_file_range", refused)
    payload = os.urandom(3 * (1 << 20) + 12345)
    for name, data in (("big.bin", payload), ("empty.bin", b"")):
        src, dst = tmp_path / name, tmp_path / f"copy-{name}"
        src.write_bytes(data)
        dst.write_bytes(b"an older, longer file in the copy's place" * 10)
        pio.copy_file(str(src), str(dst))
        assert hashlib.sha256(dst.read_bytes()).hexdigest() == hashlib.sha256(data).hexdigest()
        assert os.stat(src).st_ino != os.stat(dst).st_ino
        dst.write_bytes(b"edited")
        assert src.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.bin", "copy-big.bin", "copy-empty.bin", "empty.bin"]
