"""Issue 12, kind 1: the product reads what an export's committed state says, or says why it cannot.

Every situation is made for real with SQLite itself: a WAL-mode export whose last transactions
are committed but only in its ``-wal`` sidecar (a connection kept open, or a copy of the -wal);
a hot ``-journal`` left by a writer killed mid-transaction after it had already written pages
into the main file; a file another process holds SQLite's exclusive lock on while rewriting it.
Expected values are worked out by hand in the comments.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys

import pandas as pd
import pytest
from conftest import run_cli

from pipeline.inputs.export import content_key
from pipeline.load import cache
from pipeline.load.report import load_report
from pipeline.snapshot import sidecars, snapshot_key
from pipeline.synth import ExportWriter

MS = 1_000_000
KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
SHIFT_NS = 500_000_000_000  # what the rewriting writer adds to every kernel: 500 s


def export(path, kernels_ms, wal=False):
    """An export of pid 10, device 0, stream 7 with kernels ``[(start_ms, end_ms)]``; ``wal``: then
    switched to WAL mode and closed cleanly (everything in the main file, no sidecar left)."""
    w = ExportWriter(str(path))
    for s, e in kernels_ms:
        w.kernel(pid=10, device=0, stream=7, start=s * MS, end=e * MS, name="gemm")
    w.close()
    if wal:
        con = sqlite3.connect(path)
        assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
        con.close()
        assert not os.path.exists(f"{path}-wal")
    return str(path)


def add_kernels(con, kernels_ms, commit=True):
    """Append kernels (copies of row 1 with other times and correlation ids) on ``con``."""
    cols = [r[1] for r in con.execute(f"PRAGMA table_info({KERNEL})")]
    top = con.execute(f"SELECT max(correlationId) FROM {KERNEL}").fetchone()[0]
    for i, (s, e) in enumerate(kernels_ms, start=1):
        values = ", ".join({"start": "?", "end": "?", "correlationId": "?"}.get(c, c) for c in cols)
        con.execute(f"INSERT INTO {KERNEL} SELECT {values} FROM {KERNEL} WHERE rowid = 1",
                    (s * MS, e * MS, top + i))
    if commit:
        con.commit()


def wal_writer(path):
    """A connection that puts the export in WAL mode with automatic checkpoints off."""
    con = sqlite3.connect(path)
    assert con.execute("PRAGMA journal_mode=WAL").fetchone() == ("wal",)
    con.execute("PRAGMA wal_autocheckpoint=0")
    return con


def folder_state(folder):
    """Every file in ``folder`` with its size, mtime and SHA-256: what must not change."""
    out = {}
    for name in sorted(os.listdir(folder)):
        p = os.path.join(folder, name)
        with open(p, "rb") as fh:
            out[name] = (os.path.getsize(p), os.stat(p).st_mtime_ns, hashlib.sha256(fh.read()).hexdigest())
    return out


def fleet_row(out):
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert len(fleet) == 1
    return fleet.iloc[0]


def assert_five_kernels(row):
    """Kernels [0,1] [5,6] [10,11] [20,21] [30,31] ms on one stream, span window:
    W = [0, 31 ms] = 31 ms, busy 5 x 1 ms = 5 ms, idle 26 ms; per-stream gaps 4, 4, 9, 9 ms:
    4 gaps (2 <= 5 ms, 2 in (5, 50 ms]), 26 ms in all; idle $ = 26/31 x $4/h (H100) x 730 h."""
    assert row["status"] == "ok", row["error"]
    assert (int(row["kernel_count"]), int(row["window_start_ns"]), int(row["window_end_ns"])) == (5, 0, 31 * MS)
    assert (int(row["window_ns"]), int(row["busy_ns"]), int(row["idle_ns"])) == (31 * MS, 5 * MS, 26 * MS)
    assert (int(row["gap_count"]), int(row["gaps_le_5ms"]), int(row["gaps_5_50ms"]), int(row["gaps_gt_50ms"])) \
        == (4, 2, 2, 0)
    assert int(row["gap_total_ns"]) == 26 * MS
    assert float(row["idle_usd_per_month"]) == pytest.approx(26 / 31 * 4.0 * 730.0)


def assert_three_kernels(row):
    """Kernels [0,1] [5,6] [10,11] ms: W = [0, 11 ms], busy 3 ms, idle 8 ms, gaps 4 and 4 ms."""
    assert row["status"] == "ok", row["error"]
    assert (int(row["kernel_count"]), int(row["window_start_ns"]), int(row["window_end_ns"])) == (3, 0, 11 * MS)
    assert (int(row["busy_ns"]), int(row["idle_ns"]), int(row["gap_count"]), int(row["gaps_le_5ms"])) \
        == (3 * MS, 8 * MS, 2, 2)


def test_committed_data_in_the_wal_is_read_and_not_served_from_stale_caches(tmp_path):
    """A WAL-mode export: [0,1] [5,6] [10,11] ms checkpointed into the main file, [20,21] [30,31] ms
    committed but only in <file>-wal (a writer keeps its connection open, checkpoints off).
    `sqlite3` sees 5 kernels; so must gpu-idle (before: 3, W = 11 ms, idle 8 ms, from the main file
    alone opened immutable). A first run before the WAL commits filled the result cache and the
    columnar cache under the main file's hash, which the commits leave unchanged: neither may be
    served. Nothing may be written beside the export (no -shm, no checkpoint into it)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    path = export(folder / "wal.sqlite", [(0, 1), (5, 6), (10, 11)], wal=True)
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    first = tmp_path / "first"
    run_cli("run", path, "--out", str(first), "--window", "span", env=env)
    assert_three_kernels(fleet_row(first))
    main_hash = content_key(path)
    columns = tmp_path / "columns"
    assert len(cache.load_cached(path, columns).kernels) == 3

    con = wal_writer(path)
    try:
        add_kernels(con, [(20, 21), (30, 31)])
        assert content_key(path) == main_hash  # the commits are in the sidecar only
        assert os.path.getsize(f"{path}-wal") > 32 and sidecars(path) == [f"{path}-wal"]
        assert snapshot_key(path) != main_hash
        other = sqlite3.connect(f"file:{path}?mode=ro", uri=True)  # what sqlite3 itself says
        assert other.execute(f"SELECT count(*) FROM {KERNEL}").fetchone() == (5,)
        other.close()
        before = folder_state(folder)

        second = tmp_path / "second"
        proc = run_cli("run", path, "--out", str(second), "--window", "span", env=env)
        assert "1 report(s) analysed, 0 reused" in proc.stdout
        assert_five_kernels(fleet_row(second))
        assert len(cache.load_cached(path, columns).kernels) == 5  # not the 3-kernel entry
        assert len(load_report(path).kernels) == 5
        assert folder_state(folder) == before
        assert not [p for p in os.listdir(tmp_path) if "snapshot" in p]
    finally:
        con.close()


def test_copied_wal_without_shm_and_an_open_transaction(tmp_path):
    """Variant: the export and its -wal copied elsewhere (no -shm, no process holding them), and in
    the WAL, after the committed [20,21] [30,31] ms, frames of a transaction still open when it was
    copied (a 40 ms kernel plus enough rows to spill them into the WAL): only the committed
    state counts, so the same 5 kernels as above. The copied folder keeps exactly its two files."""
    src = tmp_path / "src"
    src.mkdir()
    path = export(src / "live.sqlite", [(0, 1), (5, 6), (10, 11)])
    con = wal_writer(path)
    con.execute("PRAGMA cache_size=10")
    add_kernels(con, [(20, 21), (30, 31)])
    add_kernels(con, [(40, 41)], commit=False)
    con.execute("CREATE TABLE scratch (x BLOB)")
    con.executemany("INSERT INTO scratch VALUES (?)", [(os.urandom(3000),) for _ in range(200)])
    dst = tmp_path / "copied"
    dst.mkdir()
    shutil.copyfile(path, dst / "live.sqlite")
    shutil.copyfile(f"{path}-wal", dst / "live.sqlite-wal")
    con.rollback()
    con.close()
    before = folder_state(dst)
    assert sorted(before) == ["live.sqlite", "live.sqlite-wal"]
    out = tmp_path / "out"
    run_cli("run", str(dst / "live.sqlite"), "--out", str(out), "--window", "span", "--no-cache")
    assert_five_kernels(fleet_row(out))
    assert folder_state(dst) == before


#: A writer that shifts every kernel by 500 s inside an exclusive transaction and writes enough
#: other rows for SQLite to spill the changed pages into the main file before committing; then it
#: says "ready" and waits (holding the lock) until it is killed.
WRITER = f"""
import os, sqlite3, sys
con = sqlite3.connect(sys.argv[1], isolation_level=None)
con.execute("PRAGMA cache_size=10")
con.execute("BEGIN EXCLUSIVE")
con.execute("UPDATE {KERNEL} SET start = start + {SHIFT_NS}, end = end + {SHIFT_NS}")
con.execute("CREATE TABLE scratch (x BLOB)")
con.executemany("INSERT INTO scratch VALUES (?)", [(os.urandom(3000),) for _ in range(200)])
print("ready", flush=True)
sys.stdin.read()
"""


def start_writer(path):
    """The WRITER above on ``path`` as a real other process, once it holds the lock and has
    rewritten the main file in place (checked: the main file's bytes changed, a -journal exists)."""
    before = content_key(path)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    assert content_key(path) != before and os.path.getsize(f"{path}-journal") > 0
    immutable = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    assert immutable.execute(f"SELECT min(start) FROM {KERNEL}").fetchone() == (SHIFT_NS,)  # the torn view
    immutable.close()
    return proc


def kill(proc):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_a_file_another_process_is_writing_is_an_error_row(tmp_path):
    """Another process holds SQLite's exclusive lock on the export while it shifts every kernel by
    500 s (pages already rewritten in the main file). Before: a row priced from the torn file
    (kernels at 500 s, status ok). Right: an error row saying another process is writing it, exit
    status 1, nothing cached; once that writer is gone (killed: its journal is hot) the committed
    state is read: the three original kernels."""
    path = export(tmp_path / "locked.sqlite", [(0, 1), (5, 6), (10, 11)])
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    writer = start_writer(path)
    try:
        out = tmp_path / "out"
        proc = run_cli("run", path, "--out", str(out), "--window", "span", env=env, check=False)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        row = fleet_row(out)
        assert row["status"] == "error"
        assert row["error"] == (f"{path}: another process is writing it (it holds SQLite's lock for writing the "
                                "file); nothing was read: analyse it again once that process is done")
        assert not list((tmp_path / "cache" / "results").glob("*.parquet"))
    finally:
        kill(writer)
    after = tmp_path / "after"
    run_cli("run", path, "--out", str(after), "--window", "span", env=env)
    assert_three_kernels(fleet_row(after))


def test_hot_journal_of_a_killed_writer_is_rolled_back_in_a_private_copy(tmp_path):
    """A writer killed mid-transaction (every kernel of a 4-kernel export shifted by 500 s, pages
    already in the main file) leaves a hot -journal. Before: 4 kernels at 500 s read as the truth.
    Right: the committed state, i.e. the journal rolled back: [0,2] [4,6] [8,10] [100,101] ms, span
    W = [0, 101 ms], busy 7 ms, idle 94 ms; gaps 2, 2, 90 ms (2 <= 5 ms, 1 > 50 ms). The journal
    stays where it is, untouched (rolled back in a private copy only)."""
    folder = tmp_path / "profiles"
    folder.mkdir()
    path = export(folder / "crashed.sqlite", [(0, 2), (4, 6), (8, 10), (100, 101)])
    kill(start_writer(path))
    assert sidecars(path) == [f"{path}-journal"]
    before = folder_state(folder)
    report = load_report(path)
    assert sorted(report.kernels["start"].tolist()) == [0, 4 * MS, 8 * MS, 100 * MS]
    out = tmp_path / "out"
    run_cli("run", path, "--out", str(out), "--window", "span", env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})
    row = fleet_row(out)
    assert row["status"] == "ok", row["error"]
    assert (int(row["kernel_count"]), int(row["window_start_ns"]), int(row["window_end_ns"])) == (4, 0, 101 * MS)
    assert (int(row["busy_ns"]), int(row["idle_ns"])) == (7 * MS, 94 * MS)
    assert (int(row["gap_count"]), int(row["gaps_le_5ms"]), int(row["gaps_5_50ms"]), int(row["gaps_gt_50ms"])) \
        == (3, 2, 0, 1)
    assert folder_state(folder) == before


def test_identity_of_an_export_without_sidecars_is_its_content_hash(tmp_path):
    """No sidecar (or only a finished, zeroed journal, or a -wal holding no frame): the identity is
    the main file's SHA-256, as before, so existing caches stay valid."""
    path = export(tmp_path / "plain.sqlite", [(0, 1)])
    assert sidecars(path) == [] and snapshot_key(path) == content_key(path)
    with open(f"{path}-journal", "wb") as fh:
        fh.write(b"\0" * 512)  # journal_mode=PERSIST after a commit: header zeroed, nothing to roll back
    with open(f"{path}-wal", "wb") as fh:
        fh.write(b"\0" * 32)  # a header and no frame
    assert sidecars(path) == [] and snapshot_key(path) == content_key(path)


FIVE_KERNELS_MS = [(0, 1), (5, 6), (10, 11), (20, 21), (30, 31)]


@pytest.mark.parametrize("wal", [False, True], ids=["rollback", "wal-mode"])
@pytest.mark.parametrize("length", [248, 252, 255])
def test_a_name_too_long_for_a_sidecar_is_read_with_none(tmp_path, length, wal):
    """Issue 42 point 15. An export whose name is 248 to 255 bytes cannot have a ``-journal`` (8 bytes
    more) or, from 252, a ``-wal`` (4 more) beside it: the file system refuses such a name
    (ENAMETOOLONG). Before: that refusal of the sidecar's stat made a readable export an error row.
    Now no sidecar is its state: its identity is its content hash, and a fresh and a cached run read
    its five kernels (:func:`assert_five_kernels`)."""
    from click.testing import CliRunner

    from pipeline.cli import main

    short = export(tmp_path / "s.sqlite", FIVE_KERNELS_MS, wal=wal)
    path = tmp_path / ("k" * (length - len(".sqlite")) + ".sqlite")
    os.rename(short, path)
    assert len(path.name) == length
    with pytest.raises(OSError, match="too long"):
        os.stat(f"{path}-journal")
    assert sidecars(str(path)) == [] and snapshot_key(str(path)) == content_key(str(path))
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache"), "GPU_IDLE_EXPORT_CACHE": str(tmp_path / "exports")}
    for attempt in ("fresh", "cached"):
        out = tmp_path / attempt
        result = CliRunner().invoke(main, ["run", str(path), "--out", str(out)], env=env)
        assert result.exit_code == 0, (attempt, result.output)
        assert_five_kernels(fleet_row(out))
