"""pipeline.load.ahead: the kernel and CUDA API tables of the one export a run is given, read while it imports
(issue 44: the whole run at 2M kernels within 2.5x the decode floor).

What is read ahead must change nothing but when it is read: a report loaded with its tables read ahead equals the
one loaded without, value for value; the loader takes them instead of reading them again; and it reads them
itself whenever they may not be what it would read now (the file changed, another file, a recovered copy), or
nothing was read ahead (a file still being written, a sidecar beside it, too big for a local worker).
"""
from __future__ import annotations

import os
import shutil
import threading
import time

import pytest
from conftest import run_cli
from test_btree import assert_same_report

from pipeline.config import load_config
from pipeline.engine.cluster import local_worker_memory
from pipeline.load import ahead
from pipeline.load import sqlite as reader
from pipeline.load.report import load_report


@pytest.fixture(autouse=True)
def nothing_left_ahead(monkeypatch):
    """Each test starts and ends with nothing read ahead; a file copied for a test is taken as settled (its change
    time cannot be set back: the rule itself is tested below)."""
    ahead.stop()
    monkeypatch.setattr(ahead, "SETTLE_NS", 0)
    yield
    ahead.stop()


@pytest.fixture()
def reads(monkeypatch):
    """The tables decoded off their b-trees, by the thread that decoded them: [(thread name, table)]."""
    seen = []
    real = reader.decode_one

    def spy(job, along, query, *split):
        seen.append((threading.current_thread().name, query.table))
        return real(job, along, query, *split)

    monkeypatch.setattr(reader, "decode_one", spy)
    return seen


def settled_copy(profiles, tmp_path, name="train_h100_2gpu_nccl.sqlite"):
    """A copy of a real export."""
    path = tmp_path / name
    shutil.copyfile(profiles / name, path)
    return path


def wait_read():
    """Wait for the threads reading ahead."""
    for thread in list(ahead._THREADS):
        thread.join(30)


def by_ahead(reads) -> bool:
    """Whether every table in ``reads`` was decoded by a thread reading ahead."""
    return all(name.startswith(ahead.THREAD_NAME) for name, _ in reads)


BOTH = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"]


def test_a_report_read_ahead_is_the_report_loaded_without_and_its_tables_are_taken(profiles, tmp_path, reads):
    path = settled_copy(profiles, tmp_path)
    plain = load_report(str(path))
    assert sorted(t for _, t in reads) == BOTH and not by_ahead(reads)
    reads.clear()
    assert ahead.read_ahead(str(path))
    wait_read()
    assert sorted(t for _, t in reads) == BOTH and by_ahead(reads)
    reads.clear()
    quick = load_report(str(path))
    assert reads == []  # both tables taken: none read again
    assert_same_report(plain, quick)
    assert ahead._ENTRIES == {}  # given once: nothing kept after


def test_every_real_export_loads_the_same_read_ahead(profiles, tmp_path):
    for name in sorted(p.name for p in profiles.glob("*.sqlite")):
        path = settled_copy(profiles, tmp_path, name)
        plain = load_report(str(path))
        assert ahead.read_ahead(str(path))
        assert_same_report(plain, load_report(str(path)))
        assert ahead._ENTRIES == {}


def test_a_file_changed_after_it_was_read_ahead_is_read_again(profiles, tmp_path, reads):
    path = settled_copy(profiles, tmp_path)
    plain = load_report(str(path))
    assert ahead.read_ahead(str(path))
    wait_read()
    older = time.time() - 120
    os.utime(path, (older, older))  # its stat changed: what was read ahead may not be what it holds now
    reads.clear()
    again = load_report(str(path))
    assert sorted(t for _, t in reads) == BOTH and not any(n.startswith(ahead.THREAD_NAME) for n, _ in reads)
    assert_same_report(plain, again)
    assert ahead._ENTRIES == {}


def test_another_file_of_the_same_bytes_is_read_by_the_loader(profiles, tmp_path, reads):
    path = settled_copy(profiles, tmp_path)
    other = tmp_path / "other.sqlite"
    shutil.copyfile(path, other)
    assert ahead.read_ahead(str(path))
    wait_read()
    reads.clear()
    load_report(str(other))
    assert sorted(t for _, t in reads) == BOTH and not any(n.startswith(ahead.THREAD_NAME) for n, _ in reads)
    assert len(ahead._ENTRIES) == 1  # still there for its own file


def test_nothing_is_read_ahead_of_a_file_still_being_written_or_with_a_sidecar_or_too_big(profiles, tmp_path,
                                                                                           monkeypatch):
    fresh = tmp_path / "fresh.sqlite"
    shutil.copyfile(profiles / "tiny_2kernels.sqlite", fresh)  # changed just now: it may still be written
    monkeypatch.setattr(ahead, "SETTLE_NS", 60 * 10**9)
    assert not ahead.read_ahead(str(fresh))
    monkeypatch.setattr(ahead, "SETTLE_NS", 0)
    path = settled_copy(profiles, tmp_path)
    for side in ("-wal", "-journal"):  # the loader reads a recovered copy then: another file
        (tmp_path / f"{path.name}{side}").write_bytes(b"")
        assert not ahead.read_ahead(str(path))
        (tmp_path / f"{path.name}{side}").unlink()
    assert not ahead.read_ahead(str(tmp_path / "missing.sqlite"))
    assert not ahead.read_ahead("s3://bucket/x.sqlite")
    assert not ahead.read_ahead(str(tmp_path))
    monkeypatch.setattr(ahead, "budget", lambda: os.path.getsize(path) - 1)
    assert not ahead.read_ahead(str(path))
    monkeypatch.setattr(ahead, "budget", lambda: os.path.getsize(path))
    assert ahead.read_ahead(str(path))
    assert not ahead.read_ahead(str(path))  # once at a time per file
    assert ahead._ENTRIES == {} or len(ahead._ENTRIES) == 1


def test_the_budget_is_what_a_default_local_worker_allows():
    cfg = load_config([])
    assert cfg.dask.memory_factor == ahead.DEFAULT_MEMORY_FACTOR
    assert cfg.dask.threads_per_worker == ahead.DEFAULT_THREADS_PER_WORKER
    assert cfg.dask.memory_limit == "auto"
    assert abs(ahead.budget() - local_worker_memory(cfg) / cfg.dask.memory_factor) <= 1


def test_what_the_run_will_not_load_is_let_go(profiles, tmp_path):
    one, two = settled_copy(profiles, tmp_path), settled_copy(profiles, tmp_path, "tiny_2kernels.sqlite")
    assert ahead.read_ahead(str(one)) and ahead.read_ahead(str(two))
    wait_read()
    assert len(ahead._ENTRIES) == 2
    ahead.keep([str(two)])
    assert [e.path for e in ahead._ENTRIES.values()] == [str(two)]
    ahead.drop(str(two))
    assert ahead._ENTRIES == {}
    assert ahead.read_ahead(str(one))
    ahead.stop()  # before a fork: nothing kept, no thread left reading
    assert ahead._ENTRIES == {} and ahead.reading() == 0


def test_a_read_ahead_slower_than_the_read_bound_is_not_waited_for_past_it(profiles, tmp_path, monkeypatch):
    from pipeline.load.limits import ReadLimits, reading_under
    from pipeline.model import ProfileError

    path = settled_copy(profiles, tmp_path)
    gate = threading.Event()
    real = reader.decode_one

    def stuck(job, along, query, *split):  # the threads ahead are held; the loader's own reading is not
        if threading.current_thread().name.startswith(ahead.THREAD_NAME):
            gate.wait(60)
        return real(job, along, query, *split)

    monkeypatch.setattr(reader, "decode_one", stuck)
    assert ahead.read_ahead(str(path))
    started = time.monotonic()
    try:
        with reading_under(ReadLimits(timeout_s=0.5)), pytest.raises(ProfileError, match="reading stopped after 0.5 s"):
            load_report(str(path))
        assert time.monotonic() - started < 10
    finally:
        gate.set()


def test_a_run_of_one_export_takes_what_it_read_ahead_and_writes_the_same_outputs(profiles, tmp_path, reads,
                                                                                  monkeypatch):
    path = settled_copy(profiles, tmp_path)
    run_cli("run", str(path), "--out", str(tmp_path / "a"), "--no-cache")
    assert sorted(t for _, t in reads) == BOTH and by_ahead(reads)  # the loader read neither table itself
    reads.clear()
    monkeypatch.setattr(ahead, "read_ahead", lambda *a, **k: False)
    run_cli("run", str(path), "--out", str(tmp_path / "b"), "--no-cache")
    assert sorted(t for _, t in reads) == BOTH and not by_ahead(reads)
    for name in ("fleet.csv", "jobs.csv", "fix_first.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
    assert ahead._ENTRIES == {}


def test_a_run_that_reads_the_columnar_cache_lets_the_read_ahead_go_before_it_reads(profiles, tmp_path, reads,
                                                                                   monkeypatch):
    from pipeline.load import cache

    path = settled_copy(profiles, tmp_path)
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    run_cli("run", str(path), "--out", str(tmp_path / "a"), env=env)
    dropped = []
    real_drop, real_read = cache.drop_ahead, cache._read_entry
    monkeypatch.setattr(cache, "drop_ahead", lambda p=None: (dropped.append(p), real_drop(p)))
    monkeypatch.setattr(cache, "_read_entry", lambda *a: (dropped.append("read"), real_read(*a))[1])
    reads.clear()
    run_cli("run", str(path), "--out", str(tmp_path / "b"), "--window", "span", env=env)  # other settings: analysed
    assert dropped == [str(path), "read"]  # let go before the entry is read
    assert by_ahead(reads)  # the loader decoded nothing (the thread ahead may have)
    assert ahead._ENTRIES == {}


def test_an_unchanged_rerun_lets_the_read_ahead_go(profiles, tmp_path, monkeypatch):
    from pipeline.runs import driver

    path = settled_copy(profiles, tmp_path)
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    run_cli("run", str(path), "--out", str(tmp_path / "a"), env=env)
    kept = []
    real = driver.keep_ahead
    monkeypatch.setattr(driver, "keep_ahead", lambda todo: (kept.append(list(todo)), real(todo)))
    run_cli("run", str(path), "--out", str(tmp_path / "a"), env=env)
    assert kept == [[]] and ahead._ENTRIES == {}


def test_the_threads_ahead_yield_the_core_to_the_command(profiles, tmp_path, monkeypatch):
    """Hashing and reading ahead run at nice AHEAD_NICE: while the command imports on one core they share the
    other, instead of taking half of the command's (the command's own thread keeps its priority)."""
    from pipeline import hashing

    mine = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    want = max(mine, hashing.AHEAD_NICE)
    seen = []

    def spy(*args, **kwargs):
        seen.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, threading.get_native_id())))
        return real(*args, **kwargs)

    real = reader.decode_one
    monkeypatch.setattr(reader, "decode_one", spy)
    path = settled_copy(profiles, tmp_path)
    assert ahead.read_ahead(str(path))
    wait_read()
    real = hashing._hash_and_keep
    monkeypatch.setattr(hashing, "_hash_and_keep", spy)
    other = settled_copy(profiles, tmp_path, "tiny_2kernels.sqlite")
    hashing.hash_ahead([str(other)])
    for thread in list(hashing._THREADS):
        thread.join(30)
    assert len(seen) == 3 and {nice for _, nice in seen} == {want}, seen
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == mine


def test_the_threads_reading_ahead_are_daemons_the_command_need_not_wait_for(profiles, tmp_path, monkeypatch):
    """``gpu-idle`` ends with os._exit when no other thread runs than those ahead (cli.end_process): every thread
    reading ahead, the one per table too, is a daemon and counted by ahead.reading()."""
    path = settled_copy(profiles, tmp_path)
    gate, inside = threading.Event(), []
    real = reader.decode_one

    def held(job, along, query):
        inside.append(threading.current_thread())
        gate.wait(60)
        return real(job, along, query)

    monkeypatch.setattr(reader, "decode_one", held)
    before = threading.active_count()
    assert ahead.read_ahead(str(path))
    try:
        for _ in range(3000):
            if len(inside) == 2:
                break
            time.sleep(0.01)
        assert len(inside) == 2 and len(set(inside)) == 2  # both tables, each on a thread of its own
        assert all(t.daemon and t.name == ahead.THREAD_NAME for t in inside)
        assert ahead.reading() == threading.active_count() - before == 2
    finally:
        gate.set()
    wait_read()
    assert ahead.reading() == 0
