"""pipeline.load.sqlite.read_columns: tables decoded batch by batch straight into numpy (issue 16).

Small exports built here, with the expected arrays written out by hand: rows in rowid order
across the rowid ranges read on threads, NULLs as the fill value (and their masks), floats cut
toward zero, inline text kept as text, derived columns, int32 storage that widens to int64 at the
first value that does not fit, rowid holes closed, and a table without rowids.
"""
from __future__ import annotations

import os
import sqlite3

import numpy as np
import pytest

from pipeline.load import btree
from pipeline.load import sqlite as reader
from pipeline.load.sqlite import Query, read_columns, readonly_uri
from pipeline.load.tables import Schema


def schema_of(path) -> Schema:
    uri = readonly_uri(str(path))
    return Schema(sqlite3.connect(uri, uri=True), uri)


@pytest.fixture(autouse=True, params=["btree", "sqlite"])
def both_paths(request, monkeypatch):
    """Every test twice: with the b-tree fast path where it applies (pipeline.load.btree), and through SQLite
    alone (its rowid ranges and batches)."""
    if request.param == "sqlite":
        monkeypatch.setenv(btree.ENV_OFF, "1")
    return request.param


@pytest.fixture()
def small_pieces(monkeypatch):
    """Rowid ranges of at least 3 rowids and batches of 2 rows: a 10-row table is read as two ranges
    (threads=2), each in several batches."""
    monkeypatch.setattr(reader, "SPLIT_MIN_ROWS", 3)
    monkeypatch.setattr(reader, "BATCH_ROWS", 2)


def write(path, sql_rows, create="CREATE TABLE t (a INTEGER, b REAL, c TEXT, g INTEGER)"):
    con = sqlite3.connect(path)
    con.execute(create)
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(sql_rows[0]))})", sql_rows)
    con.commit()
    con.close()


def test_rows_in_rowid_order_nulls_filled_and_masked(tmp_path, small_pieces):
    # a: 0..9 with NULL at rows 2 and 7; b: floats cut toward zero (-1.7 -> -1, 2.9 -> 2)
    rows = [(i if i not in (2, 7) else None, [-1.7, 2.9][i % 2], None, 0) for i in range(10)]
    path = tmp_path / "t.sqlite"
    write(path, rows)
    got = read_columns(schema_of(path), {"t": Query("t", "SELECT a, b FROM t", ["a", "b"], {"a": -5})}, threads=2)["t"]
    assert got.rows == 10
    assert got.ints["a"].tolist() == [0, 1, -5, 3, 4, 5, 6, -5, 8, 9]
    assert got.null_mask("a").tolist() == [i in (2, 7) for i in range(10)]
    assert got.ints["b"].tolist() == [-1, 2] * 5
    assert "b" not in got.nulls and not got.null_mask("b").any()


def test_derived_and_int32_columns_widen_when_a_value_does_not_fit(tmp_path, small_pieces):
    # g = (pid << 24) | tid: pid 7, tids 100..109; the last row's tid-derived value is huge
    big = 2**40
    rows = [(i, 0.0, None, (7 << 24) | (100 + i)) for i in range(9)] + [(big, 0.0, None, (7 << 24) | 109)]
    path = tmp_path / "t.sqlite"
    write(path, rows)
    query = Query("t", "SELECT a, g FROM t", ["a", "g"],
                  derive={"g": [("tid", lambda v: v & 0xFFFFFF), ("pid", lambda v: (v >> 24) & 0xFFFFFF)]},
                  small={"a", "tid", "pid"})
    assert query.kept() == ["a", "tid", "pid"]
    got = read_columns(schema_of(path), {"t": query}, threads=2)["t"]
    assert set(got.ints) == {"a", "tid", "pid"}      # g itself is not kept
    assert got.ints["tid"].tolist() == list(range(100, 110)) and got.ints["tid"].dtype == np.int32
    assert got.ints["pid"].tolist() == [7] * 10 and got.ints["pid"].dtype == np.int32
    # a fits int32 until its last value (2**40): stored as int64, every value exact
    assert got.ints["a"].tolist() == list(range(9)) + [big] and got.ints["a"].dtype == np.int64


def test_inline_text_stays_text_in_order(tmp_path, small_pieces):
    rows = [(i, 0.0, None if i == 4 else f"k{i}", 0) for i in range(10)]
    path = tmp_path / "t.sqlite"
    write(path, rows)
    got = read_columns(schema_of(path), {"t": Query("t", "SELECT a, c FROM t", ["a", "c"])}, threads=2)["t"]
    assert "c" not in got.ints
    assert got.texts["c"].to_pylist() == [None if i == 4 else f"k{i}" for i in range(10)]


def test_rowid_holes_are_closed(tmp_path, small_pieces):
    # rowids 1..10 with 3, 4 and 8 deleted: 7 rows, a = their rowids
    path = tmp_path / "t.sqlite"
    write(path, [(i, 0.0, None, 0) for i in range(1, 11)])
    con = sqlite3.connect(path)
    con.execute("DELETE FROM t WHERE rowid IN (3, 4, 8)")
    con.commit()
    con.close()
    got = read_columns(schema_of(path), {"t": Query("t", "SELECT a FROM t", ["a"], small={"a"})}, threads=2)["t"]
    assert got.rows == 7
    assert got.ints["a"].tolist() == [1, 2, 5, 6, 7, 9, 10]


def test_a_table_without_rowid_and_an_empty_table(tmp_path, small_pieces):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE w (k INTEGER PRIMARY KEY, v INTEGER) WITHOUT ROWID")
    con.executemany("INSERT INTO w VALUES (?, ?)", [(k, None if k == 3 else 10 * k) for k in range(1, 6)])
    con.execute("CREATE TABLE e (v INTEGER)")
    con.commit()
    con.close()
    got = read_columns(schema_of(path), {"w": Query("w", "SELECT k, v FROM w", ["k", "v"], {"v": -1}, small={"v"}),
                                         "e": Query("e", "SELECT v FROM e", ["v"])}, threads=2)
    assert got["w"].ints["k"].tolist() == [1, 2, 3, 4, 5]
    assert got["w"].ints["v"].tolist() == [10, 20, -1, 40, 50] and got["w"].ints["v"].dtype == np.int32
    assert got["w"].null_mask("v").tolist() == [False, False, True, False, False]
    assert got["e"].rows == 0 and got["e"].ints["v"].tolist() == []


def test_an_unchanged_export_is_hashed_once_per_process(tmp_path, monkeypatch):
    """The run hashes each export for its result and again for its columnar cache entry: the second
    time the key is remembered (same stat, file settled); a rewritten file is hashed again, and a
    file changed within SETTLE_NS of hashing is hashed every time."""
    import hashlib

    from pipeline import hashing, snapshot

    path = tmp_path / "e.sqlite"
    path.write_bytes(b"abc")
    calls = []
    real = hashing.file_sha256
    monkeypatch.setattr(hashing, "file_sha256", lambda p: calls.append(p) or real(p))
    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)   # every file counts as settled
    abc, abcd = hashlib.sha256(b"abc").hexdigest(), hashlib.sha256(b"abcd").hexdigest()
    assert [snapshot.snapshot_key(str(path)) for _ in range(3)] == [abc] * 3
    assert len(calls) == 1
    path.write_bytes(b"abcd")          # rewritten (another size: a new stamp even within one clock tick)
    assert [snapshot.snapshot_key(str(path)) for _ in range(2)] == [abcd] * 2
    assert len(calls) == 2
    monkeypatch.setattr(hashing, "SETTLE_NS", 10**18)    # nothing counts as settled
    path.write_bytes(b"abc")
    assert [snapshot.snapshot_key(str(path)) for _ in range(2)] == [abc] * 2
    assert len(calls) == 4


def test_a_report_hashed_ahead_is_hashed_once_and_a_rewrite_again(tmp_path, monkeypatch):
    """``gpu-idle run FILE`` starts hashing FILE on a thread before it imports its stages
    (:func:`pipeline.hashing.hash_ahead`): the content key asked for later waits for that hash instead of
    reading the file again; a file rewritten after it was hashed ahead gets its new bytes' key; a folder, a
    missing path and a URL are not hashed ahead."""
    import hashlib

    from pipeline import hashing

    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)   # every file counts as settled
    monkeypatch.setattr(hashing, "_KEYS", {})
    monkeypatch.setattr(hashing, "_AHEAD", {})
    read = []
    real = hashing.hash_into
    monkeypatch.setattr(hashing, "hash_into", lambda digest, p: read.append(os.fspath(p)) or real(digest, p))
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    a.write_bytes(b"A" * 3_000_000)
    b.write_bytes(b"B" * 10)
    hashing.hash_ahead([str(a), str(tmp_path), str(tmp_path / "none.sqlite"), "s3://bucket/c.sqlite", str(b)])
    assert sorted(hashing._AHEAD) == sorted([str(a), str(b)])
    assert hashing.content_key(str(a)) == hashlib.sha256(a.read_bytes()).hexdigest()
    assert hashing.content_key(str(b)) == hashlib.sha256(b"B" * 10).hexdigest()
    assert sorted(read) == sorted([str(a), str(b)])   # once each, whoever hashed it
    b.write_bytes(b"C" * 11)
    assert hashing.content_key(str(b)) == hashlib.sha256(b"C" * 11).hexdigest()
    assert read.count(str(b)) == 2


def test_a_file_the_thread_ahead_has_not_reached_is_hashed_by_its_caller(tmp_path, monkeypatch):
    """The thread ahead hashes its files one after the other; a caller that asks for a file it has not started
    hashes that file itself (a run over several files is not held to one thread's pace) and the thread then
    skips it; a caller that asks for the file being hashed waits for it. Each file is read once. The process may
    end while the thread still runs (:func:`pipeline.hashing.running_ahead`: :func:`pipeline.cli.end_process`
    does not count it)."""
    import hashlib
    import threading

    from pipeline import hashing

    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)
    monkeypatch.setattr(hashing, "_KEYS", {})
    monkeypatch.setattr(hashing, "_AHEAD", {})
    monkeypatch.setattr(hashing, "_THREADS", [])
    first, second = tmp_path / "first.sqlite", tmp_path / "second.sqlite"
    first.write_bytes(b"1" * 100)
    second.write_bytes(b"2" * 100)
    entered, release, read = threading.Event(), threading.Event(), []
    real = hashing.hash_into

    def hash_into(digest, p):
        read.append((os.fspath(p), threading.current_thread().name))
        if os.fspath(p) == str(first):
            entered.set()
            assert release.wait(30)
        return real(digest, p)

    monkeypatch.setattr(hashing, "hash_into", hash_into)
    hashing.hash_ahead([str(first), str(second)])
    assert entered.wait(30) and hashing.running_ahead() == 1   # the thread is inside the first file
    assert hashing.content_key(str(second)) == hashlib.sha256(b"2" * 100).hexdigest()   # not waited for
    waiter = threading.Thread(target=lambda: read.append(("key", hashing.content_key(str(first)))))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()   # waits for the thread ahead's hash of the first file
    release.set()
    waiter.join(30)
    hashing._THREADS[0].join(30)
    assert read == [(str(first), "gpu-idle-hash-ahead"), (str(second), "MainThread"),
                    ("key", hashlib.sha256(b"1" * 100).hexdigest())]
    assert hashing.running_ahead() == 0


def test_a_folder_is_hashed_ahead_by_the_names_it_accepts(tmp_path, monkeypatch):
    """``gpu-idle run FOLDER`` hashes ahead the files under FOLDER named like reports (``in_folders``), sub-folders
    too but not a symlinked one (discovery does not enter it either); each file is read once, whoever asks."""
    import hashlib

    from pipeline import hashing

    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)
    monkeypatch.setattr(hashing, "_KEYS", {})
    monkeypatch.setattr(hashing, "_AHEAD", {})
    monkeypatch.setattr(hashing, "_THREADS", [])
    read = []
    real = hashing.hash_into
    monkeypatch.setattr(hashing, "hash_into", lambda digest, p: read.append(os.fspath(p)) or real(digest, p))
    top, other = tmp_path / "top", tmp_path / "other"
    (top / "sub").mkdir(parents=True)
    other.mkdir()
    (top / "a.sqlite").write_bytes(b"a" * 5000)
    (top / "sub" / "b.SQLITE").write_bytes(b"b")
    (top / "a.sqlite.truth.json").write_bytes(b"{}")
    (other / "c.sqlite").write_bytes(b"c")
    (top / "linked").symlink_to(other)
    hashing.hash_ahead([str(top)])   # no in_folders: a folder is left alone
    assert hashing._AHEAD == {} and hashing._THREADS == []
    hashing.hash_ahead([str(top)], lambda name: name.lower().endswith(".sqlite"))
    hashing._THREADS[0].join(30)
    assert sorted(hashing._AHEAD) == [str(top / "a.sqlite"), str(top / "sub" / "b.SQLITE")]
    assert sorted(read) == sorted(hashing._AHEAD)
    for path, data in ((top / "a.sqlite", b"a" * 5000), (top / "sub" / "b.SQLITE", b"b"), (other / "c.sqlite", b"c")):
        assert hashing.content_key(str(path)) == hashlib.sha256(data).hexdigest()
    assert sorted(read) == sorted([str(top / "a.sqlite"), str(top / "sub" / "b.SQLITE"), str(other / "c.sqlite")])


def test_stop_ahead_stops_a_file_half_hashed_and_its_caller_hashes_it(tmp_path, monkeypatch):
    """Before the LocalCluster forks its workers the run stops the threads ahead (:func:`pipeline.hashing.stop_ahead`):
    the thread leaves the file it is in at its next read, keeps no key for it, and ends (joined); whoever asks for
    that file then hashes it whole. A later :func:`~pipeline.hashing.hash_ahead` hashes again."""
    import hashlib
    import threading

    from pipeline import hashing

    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)
    monkeypatch.setattr(hashing, "_KEYS", {})
    monkeypatch.setattr(hashing, "_AHEAD", {})
    monkeypatch.setattr(hashing, "_THREADS", [])
    monkeypatch.setattr(hashing, "HASH_CHUNK", 10)
    big, later = tmp_path / "big.sqlite", tmp_path / "later.sqlite"
    big.write_bytes(bytes(range(256)) * 4)
    later.write_bytes(b"later")
    entered, release, read = threading.Event(), threading.Event(), []
    real = hashing.hash_into

    def hash_into(digest, p):
        read.append(os.fspath(p))
        if threading.current_thread().name == "gpu-idle-hash-ahead" and os.fspath(p) == str(big):
            entered.set()
            assert release.wait(30)
        return real(digest, p)

    monkeypatch.setattr(hashing, "hash_into", hash_into)
    hashing.hash_ahead([str(big), str(later)])
    assert entered.wait(30)
    stopper = threading.Thread(target=hashing.stop_ahead)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive() and hashing._THREADS[0].stopping.is_set()   # waits for the thread ahead
    release.set()
    stopper.join(30)
    assert not stopper.is_alive() and hashing.running_ahead() == 0
    assert hashing._KEYS == {} and read == [str(big)]   # stopped in the big file, the later one never started
    assert hashing.content_key(str(big)) == hashlib.sha256(big.read_bytes()).hexdigest()
    assert hashing.content_key(str(later)) == hashlib.sha256(b"later").hexdigest()
    assert read == [str(big), str(big), str(later)]
    again = tmp_path / "again.sqlite"
    again.write_bytes(b"again")
    hashing.hash_ahead([str(again)])
    hashing._THREADS[-1].join(30)
    assert read[-1] == str(again) and len(hashing._KEYS) == 3


def test_a_fifo_named_like_a_report_is_never_opened_ahead_and_stopping_is_bounded(tmp_path, monkeypatch):
    """The thread ahead opens only regular files: a FIFO named like a report in a folder given (opening it would
    block until a writer comes) is passed over, the thread ends, and its caller's own content_key says what it is.
    Stopping waits at most STOP_WAIT_S for a thread stuck in a read (a stalled network folder): the run goes on."""
    import threading

    from pipeline import hashing

    monkeypatch.setattr(hashing, "_KEYS", {})
    monkeypatch.setattr(hashing, "_AHEAD", {})
    monkeypatch.setattr(hashing, "_THREADS", [])
    (tmp_path / "in").mkdir()
    os.mkfifo(tmp_path / "in" / "fifo.sqlite")
    (tmp_path / "in" / "ok.sqlite").write_bytes(b"ok")
    hashing.hash_ahead([str(tmp_path / "in")], lambda name: name.endswith(".sqlite"))
    hashing._THREADS[0].join(30)
    assert not hashing._THREADS[0].is_alive() and len(hashing._KEYS) <= 1
    assert all(key[0] == str(tmp_path / "in" / "ok.sqlite") for key in hashing._KEYS)

    stuck, release = threading.Event(), threading.Event()

    def hash_into(digest, p):
        stuck.set()
        release.wait(30)
        raise OSError("stalled")

    monkeypatch.setattr(hashing, "hash_into", hash_into)
    monkeypatch.setattr(hashing, "STOP_WAIT_S", 0.2)
    (tmp_path / "slow.sqlite").write_bytes(b"slow")
    hashing.hash_ahead([str(tmp_path / "slow.sqlite")])
    assert stuck.wait(30)
    hashing.stop_ahead()   # returns although the thread is still in its read
    assert hashing.running_ahead() == 1
    release.set()
    hashing._THREADS[-1].join(30)
    assert hashing.running_ahead() == 0


def test_no_query_at_all_reads_nothing_on_any_thread_count(tmp_path):
    """A capture whose export has none of the tables asked for (CPU only) gives no query: an empty
    result, not a thread pool of zero workers (the real nsys capture of tests/test_export.py)."""
    path = tmp_path / "t.sqlite"
    sqlite3.connect(path).close()
    for threads in (1, 2, 4):
        assert read_columns(schema_of(path), {}, threads=threads) == {}


def test_loading_asks_numpy_for_plain_pages_and_gives_its_setting_back():
    """While an export loads (also two at once on threads), numpy advises no transparent huge pages for its
    arrays (their on-the-spot compaction cost seconds of system time); the last load to finish puts back
    numpy's own setting, whichever it was."""
    import threading

    from numpy._core import multiarray

    from pipeline import memory

    seen, original = [], multiarray._get_madvise_hugepage()
    for before in (True, False):
        multiarray._set_madvise_hugepage(before)
        inside, leave = threading.Event(), threading.Event()

        def hold():
            with memory.small_pages():
                inside.set()
                leave.wait(5)

        other = threading.Thread(target=hold)
        other.start()
        inside.wait(5)
        with memory.small_pages():
            seen.append(multiarray._get_madvise_hugepage())
        seen.append(multiarray._get_madvise_hugepage())  # the other load is still inside
        leave.set()
        other.join(5)
        seen.append(multiarray._get_madvise_hugepage())
    multiarray._set_madvise_hugepage(original)
    assert seen == [False, False, True, False, False, False]


def test_a_derived_column_widens_from_the_piece_that_does_not_fit(tmp_path, monkeypatch):
    # derived two values at a time: h = g * 10**9 fits int32 for g = 0, 1, 2 (2e9 < 2**31 - 1) and not for g = 3
    monkeypatch.setattr(reader, "DERIVE_ROWS", 2)
    path = tmp_path / "t.sqlite"
    write(path, [(0, 0.0, None, g) for g in (1, 0, 2, 1, 3, 0, 1)])
    times = {"g": [("h", lambda v: v * 10**9)]}
    got = read_columns(schema_of(path), {"t": Query("t", "SELECT g FROM t", ["g"], derive=times, small={"h"})})["t"]
    assert got.ints["h"].tolist() == [10**9, 0, 2 * 10**9, 10**9, 3 * 10**9, 0, 10**9]
    assert got.ints["h"].dtype == np.int64
    fits = read_columns(schema_of(path), {"t": Query("t", "SELECT g FROM t", ["g"], derive={"g": [("h", lambda v: v * 7)]},
                                                     small={"h"})})["t"]
    assert fits.ints["h"].tolist() == [7, 0, 14, 7, 21, 0, 7] and fits.ints["h"].dtype == np.int32


def test_then_works_on_each_table_as_read_and_its_error_waits_for_the_reads(tmp_path, both_paths):
    import threading

    path = tmp_path / "t.sqlite"
    write(path, [(i, 0.5 if i == 3 else 0.0, None, i) for i in range(5)])  # b holds REAL values (0.5 at row 3)
    good = Query("t", "SELECT a, g FROM t", ["a", "g"], texts=())
    bad = Query("t", "SELECT b FROM t", ["b"], texts=())  # REAL where integers must be: NotInteger
    callers = []
    got = read_columns(schema_of(path), {"one": good}, threads=2,
                       then={"one": lambda found: found.ints["a"].tolist() + found.ints["g"].tolist()},
                       meanwhile=lambda: callers.append(threading.current_thread()))
    assert got == {"one": [0, 1, 2, 3, 4] * 2}
    assert callers == [threading.current_thread()]  # once, on the caller's thread

    def fails(found):
        raise ValueError("made from the table")

    with pytest.raises(ValueError, match="made from the table"):
        read_columns(schema_of(path), {"one": good}, threads=2, then={"one": fails})
    # a table's read error comes first, whichever table's work failed
    with pytest.raises(reader.NotInteger, match=r"t\.b holds 0\.5"):
        read_columns(schema_of(path), {"one": good, "two": bad}, threads=2, then={"one": fails})


def test_columns_read_along_on_the_fast_path_only(tmp_path, both_paths):
    path = tmp_path / "t.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE k (a INTEGER, n INTEGER, m INTEGER, x TEXT)")
    con.executemany("INSERT INTO k VALUES (?, ?, ?, ?)",
                    [(i, 10 + i % 3, None if i == 4 else 2**40 * (i == 5) + i, "text") for i in range(7)])
    con.commit()
    con.close()
    got = read_columns(schema_of(path), {"k": Query("k", "SELECT a FROM k", ["a"], small={"a"},
                                                    also={"alias_1": "n", "alias_2": "m"})}, threads=2)["k"]
    assert got.ints["a"].tolist() == list(range(7)) and set(got.ints) == {"a"}
    if both_paths == "sqlite":
        assert got.also is None  # SQLite's path reads none of them
    else:
        (n, n_nulls), (m, m_nulls) = got.also["alias_1"], got.also["alias_2"]
        assert n.tolist() == [10, 11, 12, 10, 11, 12, 10] and n.dtype == np.int32 and n_nulls is None
        assert m[m_nulls == False].tolist() == [0, 1, 2, 3, 2**40 + 5, 6] and m.dtype == np.int64  # noqa: E712
        assert m_nulls.tolist() == [i == 4 for i in range(7)]
    # a column read along that holds text: the query's own columns are read without it
    alone = read_columns(schema_of(path), {"k": Query("k", "SELECT a FROM k", ["a"], also={"alias_1": "x"})})["k"]
    assert alone.ints["a"].tolist() == list(range(7)) and alone.also is None


def test_rows_grouped_by_a_few_codes_by_counting_as_a_stable_sort_would():
    import pandas as pd

    from pipeline.arrays import stable_order
    from pipeline.load.report import _group_by_gpu

    keys = np.array([2, -1, 0, 2, 2, 0, -1, 1], dtype=np.int8)
    assert stable_order(keys).tolist() == [1, 6, 2, 5, 7, 0, 3, 4]  # -1 first, file order within a code
    many = np.array([40, 3, 17, 3, 0], dtype=np.int64)  # beyond FEW_CODES values apart: a sort
    assert stable_order(many).tolist() == [4, 1, 3, 2, 0]
    frame = pd.DataFrame({"start": np.arange(8, dtype=np.int64) * 10, "id": np.arange(8, dtype=np.int32),
                          "name": pd.Categorical(list("abcabcab")), "kind": pd.array(list("xyzxyzxy"), dtype="str"),
                          "gpu_key": pd.Categorical.from_codes(keys, categories=["g0", "g1", "g2"])})
    got = _group_by_gpu(frame)
    assert got["start"].tolist() == [10, 60, 20, 50, 70, 0, 30, 40] and got["id"].dtype == np.int32
    assert got["name"].tolist() == list("baccbaab") and list(got["name"].cat.categories) == ["a", "b", "c"]
    assert got["kind"].tolist() == list("yxzzyxxy") and got.index.tolist() == list(range(8))
    assert got["gpu_key"].cat.codes.tolist() == [-1, -1, 0, 0, 1, 2, 2, 2]
    assert _group_by_gpu(got) is got  # grouped already: no work


def test_long_columns_reordered_in_place_unless_something_else_holds_them():
    """_reordered writes a long column's rows back into its own memory (no fresh pages) only when nothing else
    refers to that memory: a view held elsewhere keeps its values, and that column gets a new array; every column's
    values are those of a plain take, whatever the path; one scratch buffer serves both tables."""
    import pandas as pd

    from pipeline.frames import codes_of
    from pipeline.load.report import SPLIT_TAKE_ROWS, _reordered

    n = SPLIT_TAKE_ROWS + 1001  # long enough to be reordered in place
    rng = np.random.default_rng(3)
    order = rng.permutation(n)
    start = rng.integers(0, 2**40, n)
    ident = rng.integers(-2**31, 2**31, n).astype(np.int32)
    codes = rng.integers(0, 3, n).astype(np.int8)
    held = rng.integers(0, 2**40, n)  # this one is also held by the test: must not be written
    expected = {"start": start[order], "id": ident[order], "name": codes[order], "held": held[order]}
    kept_copy = held.copy()
    frame = pd.DataFrame({"start": start.copy(), "id": ident.copy(),
                          "name": pd.Categorical.from_codes(codes.copy(), categories=["a", "b", "c"]),
                          "held": held, "text": pd.array([str(i % 7) for i in range(n)], dtype="str")}, copy=False)
    where = {c: frame[c].to_numpy().ctypes.data for c in ("start", "id")}
    where["name"] = codes_of(frame["name"]).ctypes.data
    scratch = []
    got = _reordered(frame, order, scratch)
    assert got["start"].to_numpy().tolist() == expected["start"].tolist()
    assert got["id"].to_numpy().tolist() == expected["id"].tolist() and got["id"].dtype == np.int32
    assert codes_of(got["name"]).tolist() == expected["name"].tolist()
    assert list(got["name"].cat.categories) == ["a", "b", "c"]
    assert got["held"].to_numpy().tolist() == expected["held"].tolist()
    assert got["text"].tolist() == [str(i % 7) for i in order] and got.index.tolist() == list(range(n))
    # in place: the same memory as before (no new pages); the held column: a new array, the test's left as it was
    assert got["start"].to_numpy().ctypes.data == where["start"] and got["id"].to_numpy().ctypes.data == where["id"]
    assert codes_of(got["name"]).ctypes.data == where["name"]
    assert got["held"].to_numpy().ctypes.data != held.ctypes.data and held.tolist() == kept_copy.tolist()
    assert len(scratch) == 1 and scratch[0].nbytes == n * 8  # made once, for the widest column
    buffer = scratch[0]
    again = _reordered(pd.DataFrame({"start": start.copy()}), order, scratch)
    assert scratch[0] is buffer and again["start"].to_numpy().tolist() == expected["start"].tolist()


def test_the_kernels_grouped_by_gpu_in_place_the_gpu_key_too():
    """_group_by_gpu lets go of the gpu_key codes it orders by before the rows are reordered: every long column,
    gpu_key's codes included, is then reordered in its own memory (no new pages)."""
    import pandas as pd

    from pipeline.frames import codes_of
    from pipeline.load.report import SPLIT_TAKE_ROWS, _group_by_gpu

    n = SPLIT_TAKE_ROWS + 7
    keys = (np.arange(n) % 3).astype(np.int8)[::-1].copy()  # 0, 2, 1, 0, ... from the end: by hand, stable
    start = np.arange(n, dtype=np.int64)
    frame = pd.DataFrame({"start": start.copy(), "gpu_key": pd.Categorical.from_codes(keys, categories=["a", "b", "c"])},
                         copy=False)
    where = {"start": frame["start"].to_numpy().ctypes.data, "gpu_key": codes_of(frame["gpu_key"]).ctypes.data}
    del keys
    got = _group_by_gpu(frame)
    expected = [i for code in range(3) for i in range(n) if (n - 1 - i) % 3 == code]
    assert got["start"].to_numpy().tolist() == expected
    assert codes_of(got["gpu_key"]).tolist() == sorted((n - 1 - i) % 3 for i in range(n))
    assert got["start"].to_numpy().ctypes.data == where["start"]
    assert codes_of(got["gpu_key"]).ctypes.data == where["gpu_key"]
