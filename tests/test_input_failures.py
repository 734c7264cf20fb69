"""Inputs that are not readable regular files of acceptable size: each is its own error row, named
with its cause, in ``gpu-idle run`` and ``gpu-idle sweep``; never a hang, a traceback or a silent
skip, and every other row is the same as in a run without it.

The bad inputs are judged by discovery before anything opens, reads or hashes them, so these runs
use real processes with timeouts: a regression fails instead of hanging.
"""
from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import socket
import sys
import threading
import time

import pandas as pd
import pytest

from conftest import REPO, run_cli
from pipeline.config import load_config
from pipeline.inputs.discover import discover
from pipeline.synth import generate_training_report

#: Reports of two GPUs each; their rows must come out the same whatever bad input is beside them.
GOOD = ("good1.sqlite", "good2.sqlite")
#: A run that hangs (a regression opening a FIFO or reading a device) fails after this many seconds.
HANG_S = 120
#: Linux: ``prctl(PR_CAPBSET_DROP, cap)`` and the capabilities that let root read any file.
PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def drop_read_override() -> None:
    """``preexec_fn``: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding set, so the
    program run next (still uid 0, still the owner of the files it writes) gets EACCES on a
    chmod-000 file or folder as any user would. Raises OSError when the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))


@pytest.fixture(scope="session")
def unprivileged(tmp_path_factory):
    """``preexec_fn`` for :func:`run_cli` under which a chmod-000 file really gives EACCES: None when
    not root; as root, :func:`drop_read_override` (the venv's interpreter lives under /root, mode
    0700, so ``user="nobody"`` could not even start it). Checked with a real process; skips the
    test, with the reason, when no mechanism gives EACCES here."""
    preexec = drop_read_override if os.geteuid() == 0 else None
    locked = tmp_path_factory.mktemp("probe") / "locked"
    locked.write_text("secret")
    locked.chmod(0)
    try:
        probe = subprocess.run([sys.executable, "-c", f"import pipeline; open({str(locked)!r})"], cwd=REPO,
                               capture_output=True, text=True, timeout=60, preexec_fn=preexec)
    except subprocess.SubprocessError as exc:  # prctl refused (no CAP_SETPCAP, e.g. a user namespace)
        pytest.skip(f"cannot drop root's file-read capabilities here ({exc}): no EACCES to test")
    finally:
        locked.chmod(0o600)
    if "PermissionError" not in probe.stderr:
        pytest.skip(f"a chmod-000 file is readable here (euid {os.geteuid()}, exit {probe.returncode}): "
                    f"no EACCES to test {probe.stderr[-300:]}")
    return preexec


@pytest.fixture
def lock():
    """``lock(path)``: chmod 000 until the test ends (then 0700, so tmp_path can be removed)."""
    locked = []

    def chmod0(path):
        path.chmod(0)
        locked.append(path)
        return path

    yield chmod0
    for path in locked:
        path.chmod(0o700)


@pytest.fixture(scope="session")
def good_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("good")
    for seed, name in enumerate(GOOD):
        generate_training_report(str(folder / name), gpus=2, iterations=6, seed=seed)
    return folder


def caches(root) -> dict:
    """This test's own columnar, export and result caches (no result stored by another test is reused)."""
    return {"GPU_IDLE_CACHE": str(root / "cache"), "GPU_IDLE_EXPORT_CACHE": str(root / "exports")}


def fleet_of(out) -> pd.DataFrame:
    """fleet.csv as text, exactly as written."""
    return pd.read_csv(out / "fleet.csv", dtype=str, keep_default_na=False)


def good_rows(fleet: pd.DataFrame) -> pd.DataFrame:
    """The rows of the :data:`GOOD` reports (any folder) without their path, in a stable order."""
    rows = fleet[fleet["report"].map(os.path.basename).isin(GOOD)].drop(columns="report")
    return rows.sort_values(["job", "gpu_key"]).reset_index(drop=True)


@pytest.fixture(scope="session")
def baseline(good_dir, tmp_path_factory) -> pd.DataFrame:
    """:func:`good_rows` of a run over the good reports alone."""
    root = tmp_path_factory.mktemp("baseline")
    run_cli("run", str(good_dir), "--out", str(root / "out"), env=caches(root))
    rows = good_rows(fleet_of(root / "out"))
    assert len(rows) == 4 and set(rows["status"]) == {"ok"}
    return rows


def copy_good(good_dir, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name in GOOD:
        shutil.copyfile(good_dir / name, folder / name)
    return folder


def errors_of(fleet: pd.DataFrame) -> dict:
    """``report -> error`` of the error rows."""
    bad = fleet[fleet["status"] == "error"]
    return dict(zip(bad["report"], bad["error"]))


def check(fleet: pd.DataFrame, baseline: pd.DataFrame, errors: dict) -> None:
    """The fleet is the baseline's good rows, unchanged, plus exactly one error row per ``errors`` entry."""
    assert errors_of(fleet) == errors
    assert len(fleet) == len(baseline) + len(errors)
    pd.testing.assert_frame_equal(good_rows(fleet), baseline)


# ------------------------------------------------------------------------ unreadable files and folders


def unreadable_inputs(tmp_path, good_dir, lock) -> tuple:
    """``(folder, expected errors)``: a folder holding the good reports, a chmod-000 copy of one
    (locked.sqlite) and a chmod-000 folder holding copies of both (hidden/)."""
    inputs = copy_good(good_dir, tmp_path / "in")
    locked = inputs / "locked.sqlite"
    shutil.copyfile(good_dir / GOOD[0], locked)
    hidden = copy_good(good_dir, inputs / "hidden")
    lock(locked)
    lock(hidden)
    return inputs, {str(locked): f"{locked}: cannot read: permission denied",
                    str(hidden): f"{hidden}: cannot read folder: permission denied"}


@pytest.mark.slow
def test_unreadable_report_and_folder_are_rows_in_a_fresh_and_a_cached_run(tmp_path, good_dir, baseline,
                                                                           unprivileged, lock):
    """Before: the second run (good reports' results in the result cache) ended in a PermissionError
    traceback with no output, and the unreadable folder's report was skipped silently."""
    inputs, expected = unreadable_inputs(tmp_path, good_dir, lock)
    for attempt in ("fresh", "cached"):
        proc = run_cli("run", str(inputs), "--out", str(tmp_path / "out"), check=False, env=caches(tmp_path),
                       timeout=HANG_S, preexec_fn=unprivileged)
        assert proc.returncode == 1, (attempt, proc.stderr)
        assert "Traceback" not in proc.stderr, attempt
        assert "gpu-idle: 2 report(s) found, 2 input problem(s)" in proc.stdout, attempt
        check(fleet_of(tmp_path / "out"), baseline, expected)


def test_unreadable_report_alone_is_a_row(tmp_path, good_dir, unprivileged, lock):
    """Before: a PermissionError traceback and no outputs at all."""
    locked = tmp_path / "locked.sqlite"
    shutil.copyfile(good_dir / GOOD[0], locked)
    lock(locked)
    proc = run_cli("run", str(locked), "--out", str(tmp_path / "out"), check=False, env=caches(tmp_path),
                   timeout=HANG_S, preexec_fn=unprivileged)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    fleet = fleet_of(tmp_path / "out")
    assert len(fleet) == 1
    assert errors_of(fleet) == {str(locked): f"{locked}: cannot read: permission denied"}
    assert "0 GPU(s) in the fleet table, 1 report(s) failed" in proc.stdout


@pytest.mark.slow
def test_sweep_names_unreadable_report_and_folder_every_night(tmp_path, good_dir, baseline, unprivileged, lock):
    """Before: the unreadable report's row said "cannot read ([Errno 13] ...)" and the unreadable
    folder was skipped silently. The second night reuses the first (nothing analysed)."""
    inputs, expected = unreadable_inputs(tmp_path, good_dir, lock)
    locked, hidden = expected
    state = tmp_path / "state"
    for night, analysed, reused in (("2026-11-01", 2, 0), ("2026-11-02", 0, 2)):
        proc = run_cli("sweep", str(inputs), "--state-dir", str(state), "--night", night, check=False,
                       env=caches(tmp_path), timeout=HANG_S, preexec_fn=unprivileged)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert (f"sweep {night}: 4 report(s): {analysed} analysed, {reused} reused, 2 failed: "
                f"{expected[hidden]}; {expected[locked]}") in proc.stdout
        check(fleet_of(state / "nights" / night), baseline, expected)


# ------------------------------------------------------------------------ not regular files


@pytest.mark.slow
def test_fifo_and_device_in_a_folder_are_rows_never_opened(tmp_path, good_dir, baseline):
    """Before: the run blocked for ever opening the FIFO to hash it (and /dev/zero never ends)."""
    inputs = copy_good(good_dir, tmp_path / "in")
    fifo = inputs / "pipe.sqlite"
    os.mkfifo(fifo)
    device = inputs / "zero.sqlite"
    device.symlink_to("/dev/zero")
    proc = run_cli("run", str(inputs), "--out", str(tmp_path / "out"), check=False, env=caches(tmp_path),
                   timeout=HANG_S)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    check(fleet_of(tmp_path / "out"), baseline, {str(fifo): f"{fifo}: not a regular file: a FIFO",
                                                 str(device): f"{device}: not a regular file: a character device"})


#: Discovery of a folder of three files takes well under a second; a hang fails after this many seconds.
DISCOVER_HANG_S = 30


def discover_within(inputs: list, seconds: float):
    """:func:`discover` of ``inputs`` on a thread: its result, or None when it has not returned after
    ``seconds`` (a hang fails the test instead of blocking the suite)."""
    result = {}
    thread = threading.Thread(target=lambda: result.update(found=discover(inputs)), daemon=True)
    thread.start()
    thread.join(seconds)
    return result.get("found")


def unblock(fifo) -> None:
    """Give a regression's blocked open of ``fifo`` for reading its writer, so its thread ends."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:  # no reader waits: nothing to release
        pass


@pytest.mark.parametrize("name", ["pipe.json", "pipe.json.gz", "pipe.db", "PIPE.JSON", "deep/pipe.db"])
def test_fifo_with_a_sniffed_name_is_a_row_never_opened(tmp_path, good_dir, name):
    """Issue 42 point 12. Before: discovery opened a FIFO named ``*.json``, ``*.json.gz`` or ``*.db``
    (blocking) to sniff its first bytes and waited for ever for a writer; a sweep held its lock meanwhile.
    Every try runs three times: each must end, with the FIFO an error row that names what it is."""
    inputs = copy_good(good_dir, tmp_path / "in")
    fifo = inputs / name
    fifo.parent.mkdir(exist_ok=True)
    os.mkfifo(fifo)
    for attempt in range(3):
        try:
            found = discover_within([str(inputs)], DISCOVER_HANG_S)
        finally:
            unblock(fifo)
        assert found is not None, f"attempt {attempt}: discovery hung opening the FIFO"
        assert found == ([str(inputs / g) for g in GOOD], [(str(fifo), f"{fifo}: not a regular file: a FIFO")])


def test_link_to_a_fifo_and_a_socket_with_sniffed_names_are_rows(tmp_path, good_dir):
    """Variant: a symlink named ``*.json`` to a FIFO elsewhere, and a Unix socket named ``*.db``."""
    inputs = copy_good(good_dir, tmp_path / "in")
    fifo = tmp_path / "elsewhere"
    os.mkfifo(fifo)
    link = inputs / "trace.pt.trace.json.gz.json"
    link.symlink_to(fifo)
    sock_path = inputs / "s.db"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        try:
            found = discover_within([str(inputs)], DISCOVER_HANG_S)
        finally:
            unblock(fifo)
    assert found is not None, "discovery hung opening the FIFO"
    assert found == ([str(inputs / g) for g in GOOD], [(str(sock_path), f"{sock_path}: not a regular file: a socket"),
                                                        (str(link), f"{link}: not a regular file: a FIFO")])


@pytest.mark.slow
def test_sweep_with_a_fifo_named_json_ends_and_the_next_night_runs(tmp_path, good_dir):
    """Variant, the whole sweep: before, the first night hung holding the sweep's lock (so every later
    night exited 1 on the lock); now each night ends with the FIFO its error row."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copyfile(good_dir / GOOD[0], inputs / GOOD[0])
    fifo = inputs / "pipe.json"
    os.mkfifo(fifo)
    state = tmp_path / "state"
    for night in ("2026-11-01", "2026-11-02"):
        try:
            proc = run_cli("sweep", str(inputs), "--state-dir", str(state), "--night", night, check=False,
                           env=caches(tmp_path), timeout=HANG_S)
        finally:
            unblock(fifo)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"{fifo}: not a regular file: a FIFO" in proc.stdout
        assert errors_of(fleet_of(state / "nights" / night)) == {str(fifo): f"{fifo}: not a regular file: a FIFO"}


# ------------------------------------------------------------------------ too big


def sparse(path, size: int):
    """A file of ``size`` bytes that takes no disk space (and a lifetime to hash)."""
    with open(path, "wb") as fh:
        fh.truncate(size)
    return path


#: 1 TiB: hashing it would take minutes on any machine; judging it by its size takes a stat.
HUGE = 2**40
SMALL_WORKERS = "dask: {memory_limit: 1GiB}\n"


def too_big_message(path, limit_gib: str = "1.00") -> str:
    return (f"{path}: too big for one worker: about 1536.00 GiB needed (1048576.00 MiB file (1,099,511,627,776 "
            f"bytes) x 1.5), worker memory limit {limit_gib} GiB; raise dask.memory_limit or trim the capture")


def timed_cli(*args: str, **kwargs) -> subprocess.CompletedProcess:
    """:func:`run_cli` that asserts the run ended within 60 s (reading a huge file would take minutes)."""
    start = time.monotonic()
    proc = run_cli(*args, **kwargs)
    elapsed = time.monotonic() - start
    assert elapsed < 60, f"{elapsed:.1f} s: a huge file was read"
    return proc


def test_sizes_are_judged_against_the_local_workers_memory_limit(tmp_path):
    """Discovery refuses a report too big for the LocalCluster's workers: ``1GiB`` as set; ``auto`` as
    Dask sets it (the machine's memory x min(1, threads per worker / CPUs), worked out here from
    /proc/meminfo); ``0`` (no limit) keeps it. A remote cluster's workers check their own limit."""
    from pipeline.engine.cluster import local_worker_memory

    with open("/proc/meminfo", encoding="utf-8") as fh:
        total = int(next(line for line in fh if line.startswith("MemTotal:")).split()[1]) * 1024
    auto = int(total * min(1.0, 1 / (os.cpu_count() or 1)))
    huge = str(sparse(tmp_path / "huge.sqlite", HUGE))
    for limit, want in (("1GiB", 2**30), ("auto", auto), (0, None)):
        cfg = load_config([], {"dask": {"memory_limit": limit}})
        assert local_worker_memory(cfg) == want
        expected = ([huge], []) if want is None else ([], [(huge, too_big_message(huge, f"{want / 2**30:.2f}"))])
        assert discover([huge], memory_limit=local_worker_memory(cfg), memory_factor=cfg.dask.memory_factor) \
            == expected


@pytest.mark.slow
def test_huge_report_is_refused_by_its_size_before_it_is_hashed(tmp_path, good_dir, baseline):
    """Before: the client hashed the whole file (for the result cache) before a worker refused it."""
    inputs = copy_good(good_dir, tmp_path / "in")
    huge = sparse(inputs / "huge.sqlite", HUGE)
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_WORKERS)
    proc = timed_cli("run", str(inputs), "--out", str(tmp_path / "out"), "--config", str(config), check=False,
                     env=caches(tmp_path), timeout=HANG_S)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    check(fleet_of(tmp_path / "out"), baseline, {str(huge): too_big_message(huge)})


# ------------------------------------------------------------------------ too big once inflated (.json.gz)

#: A trace of exactly 1,000,000 bytes of JSON (spaces pad it): gzip makes it about a thousand times smaller.
MILLION = (b'{"traceEvents": []' + b" " * (1_000_000 - 19) + b"}")


def gzip_file(path, *members: bytes):
    """``path`` holding one gzip member per item of ``members`` (mtime 0), one after the other."""
    import gzip

    path.write_bytes(b"".join(gzip.compress(m, mtime=0) for m in members))
    return str(path)


def handmade_gzip(path, size: int, isize: int):
    """A file of ``size`` bytes with a gzip header (10 bytes), nothing (a sparse hole) and a trailer whose
    ISIZE is ``isize``: what the trailer says of a member that would take hours to write."""
    with open(path, "wb") as fh:
        fh.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03")
        fh.seek(size - 8)
        fh.write(b"\x00\x00\x00\x00" + isize.to_bytes(4, "little"))
    assert os.path.getsize(path) == size
    return str(path)


def test_inflated_size_from_the_gzip_trailer(tmp_path):
    """One helper for the loader's buffer and the memory check: the exact size of one member; the
    smallest ISIZE + k x 2**32 not below the compressed size when ISIZE has wrapped (k = 1 and 2 here,
    on sparse files: no 4 GiB written; data that deflate made larger is no wrap); the compressed size
    less deflate's growth when that cannot be one member's size (deflate stops at 1032:1) or ISIZE is 0;
    for several members at least the last one's size."""
    from pipeline.inputs.gzip_size import file_inflated_size

    one = gzip_file(tmp_path / "one.json.gz", MILLION)
    assert file_inflated_size(one) == 1_000_000
    # incompressible: the file is larger than its data, which is no wrap of ISIZE
    noise = gzip_file(tmp_path / "noise.json.gz", random.Random(0).randbytes(200_000))
    assert os.path.getsize(noise) > 200_000 and file_inflated_size(noise) == 200_000
    # two members, 100,000 + 1,000 bytes: the trailer gives the last one's 1,000 and the head shows a
    # second member, so the size is max(1,000, the least the file's size can inflate to), a lower bound of
    # 101,000 (the least a file of n bytes inflates to: n - n // 1024 - 64, here about 100 bytes)
    two = gzip_file(tmp_path / "two.json.gz", b"x" * 100_000, b"y" * 1_000)
    assert os.path.getsize(two) < 1_000 and file_inflated_size(two) == 1_000
    three = gzip_file(tmp_path / "three.json.gz", b"x" * 10_000, b"y" * 10_000, b"z" * 7)
    assert file_inflated_size(three) == os.path.getsize(three) - 64 > 7  # (about 110 bytes: n // 1024 = 0)
    # ISIZE wrapped: 4,300,000 compressed bytes with ISIZE 1,000 are 2**32 + 1,000 = 4,294,968,296 bytes
    # inflated (4,294,968,296 <= 1032 x 4,300,000 = 4,437,600,000); 6 GiB with ISIZE 123: 2 x 2**32 + 123
    assert file_inflated_size(handmade_gzip(tmp_path / "w1.json.gz", 4_300_000, 1_000)) == 4_294_968_296
    assert file_inflated_size(handmade_gzip(tmp_path / "w2.json.gz", 6 * 2**30, 123)) == 8_589_934_715
    # 2**32 + 5,000,000 bytes with ISIZE 4,990,000 (2**32 + 4,990,000 inflated: 10,000 bytes under the file,
    # within deflate's growth of (2**32 + 5e6) // 1024 + 64 = 4,199,250 bytes) is no second wrap
    assert file_inflated_size(handmade_gzip(tmp_path / "w3.json.gz", 2**32 + 5_000_000, 4_990_000)) \
        == 2**32 + 4_990_000
    # 1,000,000 bytes cannot inflate to 2**32 + 10 (over 1032 x): not one member, at least
    # 1,000,000 - 976 - 64 = 998,960 bytes; ISIZE 0 (padding): 5,000,000 - 4,882 - 64 = 4,995,054
    assert file_inflated_size(handmade_gzip(tmp_path / "odd.json.gz", 1_000_000, 10)) == 998_960
    assert file_inflated_size(handmade_gzip(tmp_path / "pad.json.gz", 5_000_000, 0)) == 4_995_054
    (tmp_path / "plain.json.gz").write_bytes(MILLION)  # the name says gzip, the bytes do not
    assert file_inflated_size(str(tmp_path / "plain.json.gz")) is None
    (tmp_path / "stub.json.gz").write_bytes(b"\x1f\x8b\x08")
    assert file_inflated_size(str(tmp_path / "stub.json.gz")) == 0


def test_memory_factor_applies_to_the_json_a_gzip_trace_inflates_to(tmp_path):
    """Before: a .json.gz was judged by its compressed size (here about 1,000 times smaller than the
    JSON a worker holds), so a trace that cannot fit was not refused. Now the inflated size from the
    gzip trailer x dask.memory_factor is judged, whatever the name (gzip by its magic bytes); a plain
    .json (or a gzip file that is not a trace's) by its size."""
    from pipeline.work.tasks import check_memory
    from pipeline.model import ProfileError

    gz = gzip_file(tmp_path / "rank0.pt.trace.json.gz", MILLION)
    gz_size = os.path.getsize(gz)
    assert gz_size * 1000 < 2**29  # the compressed size alone would pass
    # 1,000,000 B x 1000 = 1e9 B = 0.93 GiB (/ 2**30 = 0.9313) > 2**29 B = 0.50 GiB; 1e6 B = 0.95 MiB (0.9537)
    refused = (f"{gz}: too big for one worker: about 0.93 GiB needed (0.95 MiB of JSON once inflated (1,000,000 "
               f"bytes, per the gzip trailer of the {gz_size / 2**20:.2f} MiB ({gz_size:,} bytes) file) x 1000), "
               "worker memory limit 0.50 GiB; raise dask.memory_limit or trim the capture")
    assert discover([gz], memory_limit=2**29, memory_factor=1000) == ([], [(gz, refused)])
    with pytest.raises(ProfileError) as caught:
        check_memory(gz, 1000, 2**29)
    assert str(caught.value) == refused
    # exactly at the limit (1e6 x 1000 = 1e9 bytes) it fits; a byte less does not
    assert discover([gz], memory_limit=10**9, memory_factor=1000) == ([gz], [])
    check_memory(gz, 1000, 10**9)
    assert discover([gz], memory_limit=10**9 - 1, memory_factor=1000)[0] == []
    # gzip named .json: inflated all the same (the loader inflates it too)
    named = gzip_file(tmp_path / "named.json", MILLION)
    assert discover([named], memory_limit=2**29, memory_factor=1000)[1] == [(named, refused.replace(gz, named))]
    # plain JSON and a gzip .sqlite (not inflated by anything): their own size
    plain = tmp_path / "plain.json"
    plain.write_bytes(MILLION)
    assert discover([str(plain)], memory_limit=2**29, memory_factor=1000) == ([], [(str(plain), (
        f"{plain}: too big for one worker: about 0.93 GiB needed (0.95 MiB file (1,000,000 bytes) x 1000), worker "
        "memory limit 0.50 GiB; raise dask.memory_limit or trim the capture"))])
    packed = gzip_file(tmp_path / "packed.sqlite", MILLION)
    assert discover([packed], memory_limit=2**29, memory_factor=1000) == ([packed], [])
    check_memory(packed, 1000, 2**29)


def test_staged_gzip_trace_is_judged_by_its_inflated_size_on_the_worker(tmp_path):
    """A remote trace is judged where it is staged, by the worker (its limit; discovery does not stat
    remote files): a .json.gz too big once inflated is refused there, naming the URL and the copy."""
    import fsspec

    from pipeline.config import CacheConfig, ExportConfig, StorageConfig
    from pipeline.work import tasks
    from pipeline.model import ProfileError

    fs = fsspec.filesystem("memory")
    gz = gzip_file(tmp_path / "src.json.gz", MILLION)
    gz_size = os.path.getsize(gz)
    fs.pipe("/kmem15/rank0.pt.trace.json.gz", open(gz, "rb").read())
    url = "memory:///kmem15/rank0.pt.trace.json.gz"
    try:
        with pytest.raises(ProfileError) as caught:
            tasks.load_report_for(url, ExportConfig(), CacheConfig(dir=str(tmp_path / "columns")),
                                  StorageConfig(cache_dir=str(tmp_path / "staged")), memory_factor=1000,
                                  memory_limit=2**29)  # the worker's limit, as the engine gives it
    finally:
        fs.rm("/kmem15", recursive=True)
    (staged,) = [p for p in (tmp_path / "staged").iterdir() if not p.name.endswith(".sums.json")]  # not its checksum
    assert str(caught.value) == (
        f"{url}: (staged to {staged}) too big for one worker: about 0.93 GiB needed (0.95 MiB of JSON once "
        f"inflated (1,000,000 bytes, per the gzip trailer of the {gz_size / 2**20:.2f} MiB ({gz_size:,} bytes) "
        "file) x 1000), worker memory limit 0.50 GiB; raise dask.memory_limit or trim the capture")


def test_the_work_is_bounded_by_the_memory_its_runner_gives_it(tmp_path, monkeypatch):
    """work/ knows no Dask (issue 46): in this process a report is judged against the bound the caller gave
    ``ReportWork`` (the driver's: what a local worker would have); on a Dask worker against the limit the
    engine read from that worker (:func:`pipeline.engine.map.on_worker`), none when it has none. A 1,000,000
    byte trace x 1000 = 1e9 bytes needs 0.93 GiB: refused under 2**29 bytes (0.50 GiB), not under 2**30."""
    import distributed

    from pipeline.engine.map import on_worker
    from pipeline.work.tasks import Job, ReportWork

    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_bytes(MILLION)
    cfg = load_config([], {"dask": {"memory_factor": 1000}, "cache": {"dir": str(tmp_path / "columns")}})
    refused = (f"{trace}: too big for one worker: about 0.93 GiB needed (0.95 MiB file (1,000,000 bytes) x 1000), "
               "worker memory limit 0.50 GiB; raise dask.memory_limit or trim the capture")
    job = Job(str(trace), {})
    assert ReportWork(cfg, memory_limit=2**29).whole(job).failure.message == refused
    assert ReportWork(cfg, memory_limit=2**29).open(job).message == refused
    # on a worker the engine's figure counts, never the in-process bound
    assert ReportWork(cfg, memory_limit=2**30).whole(job, on_worker=True, worker_memory=2**29).failure.message == refused
    fits = ReportWork(cfg, memory_limit=2**29).whole(job, on_worker=True, worker_memory=2**30)
    assert "too big" not in fits.failure.message  # judged fit; its empty trace then has no GPU
    assert "too big" not in ReportWork(cfg, memory_limit=2**29).whole(job, on_worker=True).failure.message

    class Worker:  # what on_worker reads from distributed.get_worker()
        def __init__(self, limit):
            self.memory_manager = type("MemoryManager", (), {"memory_limit": limit})()

    seen = []
    for limit, want in ((2**29, 2**29), (0, None), (None, None)):
        monkeypatch.setattr(distributed, "get_worker", lambda limit=limit: Worker(limit))
        seen.append(on_worker(lambda *args, **kwargs: (args, kwargs), job, threads=2))
        assert seen[-1] == ((job,), {"threads": 2, "on_worker": True, "worker_memory": want})


# ------------------------------------------------------------------------ symlinks


@pytest.mark.slow
def test_symlink_loop_and_broken_symlink_in_a_folder_are_named(tmp_path, good_dir, baseline):
    """Before: both were "no such file or directory", as if the user had mistyped a name."""
    inputs = copy_good(good_dir, tmp_path / "in")
    (inputs / "loop.sqlite").symlink_to("loop.sqlite")
    (inputs / "broken.sqlite").symlink_to("gone/report.sqlite")
    proc = run_cli("run", str(inputs), "--out", str(tmp_path / "out"), check=False, env=caches(tmp_path),
                   timeout=HANG_S)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    check(fleet_of(tmp_path / "out"), baseline, {
        str(inputs / "loop.sqlite"): f"{inputs / 'loop.sqlite'}: symlink loop",
        str(inputs / "broken.sqlite"): f"{inputs / 'broken.sqlite'}: broken symlink to gone/report.sqlite"})


# ------------------------------------------------------------------------ the sweep, inputs named directly


@pytest.mark.slow
def test_sweep_names_device_fifo_huge_loop_and_broken_link_named_directly(tmp_path, good_dir, baseline):
    """Before: the sweep blocked for ever hashing /dev/zero (and the FIFO), and the links were
    "no such file or directory"."""
    inputs = copy_good(good_dir, tmp_path / "in")
    odd = tmp_path / "odd"
    odd.mkdir()
    fifo = odd / "pipe.sqlite"
    os.mkfifo(fifo)
    huge = sparse(odd / "huge.sqlite", HUGE)
    loop = odd / "loop.sqlite"
    loop.symlink_to("loop.sqlite")
    broken = odd / "broken.sqlite"
    broken.symlink_to(odd / "gone.sqlite")
    config = tmp_path / "small.yaml"
    config.write_text(SMALL_WORKERS)
    proc = timed_cli("sweep", str(inputs), "/dev/zero", str(fifo), str(huge), str(loop), str(broken),
                     "--config", str(config), "--state-dir", str(tmp_path / "state"), "--night", "2026-11-01",
                     check=False, env=caches(tmp_path), timeout=HANG_S)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "sweep 2026-11-01: 7 report(s): 2 analysed, 0 reused, 5 failed" in proc.stdout
    check(fleet_of(tmp_path / "state" / "nights" / "2026-11-01"), baseline, {
        "/dev/zero": "/dev/zero: not a regular file: a character device",
        str(fifo): f"{fifo}: not a regular file: a FIFO",
        str(huge): too_big_message(huge),
        str(loop): f"{loop}: symlink loop",
        str(broken): f"{broken}: broken symlink to {odd / 'gone.sqlite'}"})
