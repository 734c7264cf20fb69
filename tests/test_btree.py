"""pipeline.load.btree: integer columns read straight off an SQLite table's b-tree (issue 44).

Small files built here with sqlite3, each value written out by hand: every integer width SQLite stores
(1, 2, 3, 4, 6 and 8 bytes, the constants 0 and 1), signs, NULLs, an INTEGER PRIMARY KEY, b-trees
of several levels, sparse rowids, the smallest and largest page sizes; the shapes it must leave to
SQLite (REAL, TEXT, a column a record lacks, values on overflow pages, WITHOUT ROWID, a damaged page);
and the whole loader giving the same frames both ways on the real exports and a generated one.
"""
from __future__ import annotations

import shutil
import sqlite3

import numpy as np
import pytest

from pipeline.load import btree
from pipeline.load import sqlite as reader
from pipeline.load.cache import FRAMES
from pipeline.load.limits import cut_sql
from pipeline.load.report import load_report
from pipeline.load.sqlite import Query, read_columns, readonly_uri
from pipeline.load.tables import Schema

pytestmark = pytest.mark.skipif(not btree.available(), reason="the compiled part is not built (make setup)")


def test_the_compiled_part_is_built():
    """make setup builds it (setup.py): the suite must run the fast path, not only its fallback."""
    assert btree._library() is not None


def make(path, create, rows, page_size=None, table="t"):
    con = sqlite3.connect(path)
    if page_size:
        con.execute(f"PRAGMA page_size = {page_size}")
    con.execute(create)
    con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    con.commit()
    con.close()
    return path


def fast(path, sql, table="t", narrow=(), dtypes=None):
    """The fast path's answer for ``sql``: {name: (values list, NULL list)}, or None (left to SQLite); ``narrow``:
    the names to read as int32 while they fit; ``dtypes``: a dict that receives each array's dtype."""
    uri = readonly_uri(str(path))
    con = sqlite3.connect(uri, uri=True)
    try:
        job = btree.prepare(con, uri, table, sql, reader.capacity_of(Schema(con, uri), table), narrow)
        if job is None:
            return "no job"
        got = job.run()
    finally:
        con.close()
    if got is None:
        return None
    if dtypes is not None:
        dtypes.update({name: values.dtype for name, (values, _) in got.items()})
    return {name: (values.tolist(), [False] * len(values) if mask is None else mask.tolist())
            for name, (values, mask) in got.items()}


def test_plan_takes_the_loaders_shapes_and_refuses_the_rest():
    name = cut_sql("shortName")
    sql = f"SELECT start, end, globalPid AS pid, 0 AS device_id, -1 AS copy_kind, {name} AS name FROM K"
    assert btree.plan(sql, "K") == [("start", "start"), ("end", "end"), ("pid", "globalPid"), ("device_id", 0),
                                    ("copy_kind", -1), ("name", "shortName")]
    for other in ("SELECT start FROM K WHERE start > 0", "SELECT start + 1 AS s FROM K", "SELECT -1 FROM K",
                  "SELECT DISTINCT start FROM K", "SELECT start FROM L", "SELECT start, FROM K",
                  f"SELECT {cut_sql('a')} FROM K", "SELECT start  AS s FROM K", "SELECT * FROM K"):
        assert btree.plan(other, "K") is None, other


WIDTHS = [0, 1, -1, 127, -128, 128, 32767, -32768, 32768, 2**23 - 1, -2**23, 2**23, 2**31 - 1, -2**31, 2**31,
          2**47 - 1, -2**47, 2**47, 2**63 - 1, -2**63]


@pytest.mark.parametrize("page_size", [512, 65536])
def test_every_integer_width_sign_and_null_in_a_deep_tree(tmp_path, page_size):
    # 3,000 rows on 512-byte pages: a b-tree of three levels; on 64 KiB pages one interior level
    rows = [(i, WIDTHS[i % len(WIDTHS)], None if i % 7 == 3 else -i, "x" * (i % 5)) for i in range(3000)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER, d TEXT)", rows, page_size)
    got = fast(path, "SELECT c, a, b AS width, 5 AS five FROM t")
    assert got["a"] == (list(range(3000)), [False] * 3000)
    assert got["width"] == ([WIDTHS[i % len(WIDTHS)] for i in range(3000)], [False] * 3000)
    assert got["c"] == ([0 if i % 7 == 3 else -i for i in range(3000)], [i % 7 == 3 for i in range(3000)])
    assert got["five"] == ([5] * 3000, [False] * 3000)


def test_int32_while_every_value_fits_then_int64(tmp_path):
    rows = [(i, -i, i) for i in range(1000)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER, c INTEGER)", rows, 512)
    dtypes = {}
    got = fast(path, "SELECT a, b, c FROM t", narrow={"a", "b"}, dtypes=dtypes)
    assert dtypes == {"a": np.int32, "b": np.int32, "c": np.int64}
    assert got["b"][0] == [-i for i in range(1000)]
    con = sqlite3.connect(path)  # one value beyond int32 in each of a (the last row) and b (the first)
    con.execute("UPDATE t SET a = 2147483648 WHERE a = 999")
    con.execute("UPDATE t SET b = -2147483649 WHERE a = 0")
    con.commit()
    con.close()
    got = fast(path, "SELECT a, b, c FROM t", narrow={"a", "b"}, dtypes=dtypes)
    assert dtypes == {"a": np.int64, "b": np.int64, "c": np.int64}
    assert got["a"][0] == list(range(999)) + [2147483648]
    assert got["b"][0] == [-2147483649] + [-i for i in range(1, 1000)]


def test_a_null_mask_only_for_a_column_that_holds_a_null(tmp_path):
    # b's only NULL is in the last row: the read stops there and runs again with a mask for b alone
    rows = [(i, i if i < 999 else None) for i in range(1000)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, b INTEGER)", rows, 512)
    got = fast(path, "SELECT a, b FROM t")
    assert got["a"] == (list(range(1000)), [False] * 1000)
    assert got["b"] == (list(range(999)) + [0], [False] * 999 + [True])


def test_an_integer_primary_key_and_sparse_rowids(tmp_path):
    # the key is the rowid itself (the record holds NULL for it); rowids 10, 20, ... 600, and 4 rows deleted
    rows = [(10 * i, i * i) for i in range(1, 61)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)", rows, 512)
    con = sqlite3.connect(path)
    con.execute("DELETE FROM t WHERE id IN (20, 30, 400, 600)")
    con.execute("INSERT INTO t VALUES (5000000000, 7)")  # a rowid span far beyond the rows: counted first
    con.commit()
    con.close()
    kept = [i for i in range(1, 61) if 10 * i not in (20, 30, 400, 600)]
    got = fast(path, "SELECT v, id FROM t")
    assert got["id"][0] == [10 * i for i in kept] + [5000000000]
    assert got["v"][0] == [i * i for i in kept] + [7]


def test_what_it_leaves_to_sqlite(tmp_path):
    base = "CREATE TABLE t (a INTEGER, b INTEGER, c TEXT)"
    assert fast(make(tmp_path / "real.sqlite", base, [(1, 2, "x"), (2, 2.5, "y")]), "SELECT a, b FROM t") is None
    # INTEGER affinity stores the text "2" as the integer 2; "2x" stays text
    assert fast(make(tmp_path / "int.sqlite", base, [(1, "2", "x")]), "SELECT a, b FROM t")["b"] == ([2], [False])
    assert fast(make(tmp_path / "text.sqlite", base, [(1, "2x", "x")]), "SELECT a, b FROM t") is None
    assert fast(make(tmp_path / "blob.sqlite", base, [(1, b"2", "x")]), "SELECT a, b FROM t") is None
    # the text column itself is never read: a TEXT there does not matter
    assert fast(tmp_path / "real.sqlite", "SELECT a FROM t") == {"a": ([1, 2], [False, False])}
    # a column added after the rows were written: its default (7) is not in their records
    path = make(tmp_path / "added.sqlite", base, [(1, 2, "x")])
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE t ADD COLUMN z INTEGER DEFAULT 7")
    con.commit()
    con.close()
    assert fast(path, "SELECT a, z FROM t") is None
    assert fast(path, "SELECT a FROM t") == {"a": ([1], [False])}
    # a record spilling onto overflow pages: a value before the spill is read, one after it is not
    path = make(tmp_path / "spill.sqlite", "CREATE TABLE t (a INTEGER, big TEXT, z INTEGER)", [(3, "y" * 5000, 4)], 512)
    assert fast(path, "SELECT a FROM t") == {"a": ([3], [False])}
    assert fast(path, "SELECT a, z FROM t") is None
    path = make(tmp_path / "norowid.sqlite", "CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER) WITHOUT ROWID",
                [(1, 2)])
    assert fast(path, "SELECT a, b FROM t") == "no job"
    path = make(tmp_path / "gen.sqlite", "CREATE TABLE t (a INTEGER, g INTEGER GENERATED ALWAYS AS (a * 2))", [(1,)])
    assert fast(path, "SELECT a FROM t") == "no job"


def test_a_damaged_page_is_left_to_sqlite_which_says_so(tmp_path):
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER)", [(i,) for i in range(50)], 512)
    con = sqlite3.connect(path)
    root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 't'").fetchone()[0]
    con.close()
    damaged = tmp_path / "damaged.sqlite"
    shutil.copy(path, damaged)
    with open(damaged, "r+b") as fh:  # the root (a leaf: 50 small rows) is no b-tree page any more
        fh.seek((root - 1) * 512)
        fh.write(b"\x07")
    assert fast(path, "SELECT a FROM t")["a"][0] == list(range(50))
    assert fast(damaged, "SELECT a FROM t") is None
    uri = readonly_uri(str(damaged))
    with pytest.raises(sqlite3.DatabaseError):
        read_columns(Schema(sqlite3.connect(uri, uri=True), uri), {"t": Query("t", "SELECT a FROM t", ["a"])})


def test_a_file_cut_short_while_it_is_read_is_left_to_sqlite(tmp_path):
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, pad TEXT)", [(i, "p" * 40) for i in range(3000)], 512)
    uri = readonly_uri(str(path))
    con = sqlite3.connect(uri, uri=True)
    job = btree.prepare(con, uri, "t", "SELECT a FROM t", reader.capacity_of(Schema(con, uri), "t"))
    con.close()
    assert job.run()["a"][0].tolist() == list(range(3000))
    with open(path, "r+b") as fh:  # cut after the job was prepared: pages it needs are gone (read, never mapped)
        fh.truncate(path.stat().st_size // 2)
    assert job.run() is None


def test_read_columns_gives_the_same_either_way(tmp_path, monkeypatch):
    rows = [(i, None if i % 4 == 0 else (9 << 24) | i, WIDTHS[i % len(WIDTHS)]) for i in range(2000)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER, g INTEGER, w INTEGER)", rows, 1024)
    query = Query("t", "SELECT a, g AS gtid, w, 0 AS zero FROM t", ["a", "gtid", "w", "zero"], {"gtid": -1},
                  derive={"gtid": [("tid", lambda v: v & 0xFFFFFF), ("pid", lambda v: (v >> 24) & 0xFFFFFF)]},
                  small={"a", "tid", "pid", "w", "zero"})
    uri = readonly_uri(str(path))

    def read(off):
        monkeypatch.setenv(btree.ENV_OFF, "1") if off else monkeypatch.delenv(btree.ENV_OFF, raising=False)
        return read_columns(Schema(sqlite3.connect(uri, uri=True), uri), {"t": query}, threads=2)["t"]

    a, b = read(True), read(False)
    assert a.rows == b.rows == 2000
    assert set(a.ints) == set(b.ints) == {"a", "tid", "pid", "w", "zero"}
    for name in a.ints:
        assert a.ints[name].dtype == b.ints[name].dtype and np.array_equal(a.ints[name], b.ints[name]), name
        assert np.array_equal(a.null_mask(name), b.null_mask(name)), name
    assert b.ints["tid"].tolist() == [-1 & 0xFFFFFF if i % 4 == 0 else i for i in range(2000)]
    assert b.ints["w"].dtype == np.int64 and b.ints["a"].dtype == np.int32


def loaded_both_ways(path, monkeypatch):
    monkeypatch.setenv(btree.ENV_OFF, "1")
    slow = load_report(str(path))
    monkeypatch.delenv(btree.ENV_OFF)
    return slow, load_report(str(path))


def assert_same_report(slow, quick):
    for name in FRAMES:
        x, y = getattr(slow, name), getattr(quick, name)
        assert list(x.columns) == list(y.columns), name
        for column in x.columns:
            assert x[column].dtype == y[column].dtype and x[column].equals(y[column]), (name, column)
    for field in ("meta", "diagnostics", "warnings", "capture_start_ns", "capture_start_source"):
        assert getattr(slow, field) == getattr(quick, field), field
    assert list(slow.kernel_aliases.items()) == list(quick.kernel_aliases.items())


def test_the_real_exports_load_the_same_either_way(profiles, monkeypatch):
    for path in sorted(profiles.glob("*.sqlite")):
        assert_same_report(*loaded_both_ways(path, monkeypatch))


def test_a_generated_export_loads_the_same_either_way(tmp_path, monkeypatch):
    from pipeline.synth import generate_scaled_report

    path = tmp_path / "g.sqlite"
    generate_scaled_report(str(path), gpus=2, kernels=20_000, seed=3)
    slow, quick = loaded_both_ways(path, monkeypatch)
    assert len(quick.kernels) == 20_000
    assert_same_report(slow, quick)


class Beside:
    """An executor for Job.run's ``beside`` that counts what it is given (a real thread runs it)."""

    def __init__(self, pool):
        self.pool, self.given = pool, 0

    def submit(self, fn, *args):
        self.given += 1
        return self.pool.submit(fn, *args)


@pytest.mark.parametrize("share", [0.05, 0.3, 0.5, 0.75])
def test_a_table_read_in_two_parts_at_once_is_the_table_read_in_one(tmp_path, monkeypatch, share):
    """Job.run with a thread beside: the rows under the root's last children read there, put after the first
    ones; values, types and NULL masks exactly as one read gives them, whichever part holds the value beyond int32
    (the whole column int64), the NULLs (a mask for the whole column) or the gaps in the rowids."""
    from concurrent.futures import ThreadPoolExecutor

    n = 3000
    rows = [(i * 3 + 7,  # sparse rowids (an INTEGER PRIMARY KEY): every third
             i, None if i % 7 == 0 else i,  # NULLs all along
             2**40 if i == n - 5 else i,  # beyond int32 in the last rows only
             None if i == n - 9 else -i,  # a NULL in the last rows only
             None if i == 3 else 5,  # a NULL in the first rows only
             2**35 + i if i == 4 else 1) for i in range(n)]
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, c INTEGER, "
                "d INTEGER, e INTEGER, f INTEGER)", rows, 512)
    uri = readonly_uri(str(path))
    sql = "SELECT id, a, b, c, d, e, f, -1 AS k FROM t"
    narrow = {"a", "b", "c", "d", "e", "f"}

    def run(beside=None):
        con = sqlite3.connect(uri, uri=True)
        try:
            job = btree.prepare(con, uri, "t", sql, reader.capacity_of(Schema(con, uri), "t"), narrow)
            return job.run(beside, share) if beside is not None else job.run(), job.decoded
        finally:
            con.close()

    whole, decoded = run()
    monkeypatch.setattr(btree, "SPLIT_ROWS", 1)
    with ThreadPoolExecutor(max_workers=1) as pool:
        beside = Beside(pool)
        parts, parts_decoded = run(beside)
    assert beside.given == 1  # read in two parts
    assert decoded == parts_decoded == n * 7
    assert list(parts) == list(whole) == ["id", "a", "b", "c", "d", "e", "f", "k"]
    for name, (values, mask) in whole.items():
        got, got_mask = parts[name]
        assert got.dtype == values.dtype and got.tolist() == values.tolist(), name
        assert (mask is None) == (got_mask is None) and (mask is None or got_mask.tolist() == mask.tolist()), name
    assert whole["id"][0].tolist() == [i * 3 + 7 for i in range(n)]
    assert whole["c"][0].dtype == np.int64 and whole["a"][0].dtype == np.int32  # (by hand: c's 2**40, a fits)
    assert whole["d"][1].tolist() == [i == n - 9 for i in range(n)] and whole["a"][1] is None


@pytest.mark.parametrize("where", ["first", "second"])
def test_a_part_that_gives_up_leaves_the_table_to_sqlite_without_reading_it_again(tmp_path, monkeypatch, where):
    """A REAL value in either part: that part gives up (the fast path reads integers only), and so would one read
    of the whole table, so Job.run answers None (SQLite reads the table) after the two parts, with no third read."""
    from concurrent.futures import ThreadPoolExecutor

    n = 3000
    odd = 5 if where == "first" else n - 5
    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER)", [(0.5 if i == odd else i,) for i in range(n)], 512)
    uri = readonly_uri(str(path))
    reads = []
    real_read = btree.Job._read

    def counted(self, first, end, capacity):
        reads.append((first, end))
        return real_read(self, first, end, capacity)

    monkeypatch.setattr(btree.Job, "_read", counted)
    monkeypatch.setattr(btree, "SPLIT_ROWS", 1)
    con = sqlite3.connect(uri, uri=True)
    try:
        job = btree.prepare(con, uri, "t", "SELECT a FROM t", reader.capacity_of(Schema(con, uri), "t"))
        with ThreadPoolExecutor(max_workers=1) as pool:
            beside = Beside(pool)
            assert job.run(beside, 0.5) is None
        assert beside.given == 1 and len(reads) == 2 and -1 not in {end for _, end in reads}  # two parts, no whole
        reads.clear()
        assert job.run() is None and reads == [(0, -1)]  # (one read gives up too)
    finally:
        con.close()


def test_a_table_on_one_page_or_small_is_read_in_one_part(tmp_path, monkeypatch):
    """A root page that is a leaf has no children to share; a table below SPLIT_ROWS rows is not worth a second
    read: nothing is given to the thread beside, and the values are those of one read."""
    from concurrent.futures import ThreadPoolExecutor

    path = make(tmp_path / "t.sqlite", "CREATE TABLE t (a INTEGER)", [(i,) for i in range(5)])
    uri = readonly_uri(str(path))
    con = sqlite3.connect(uri, uri=True)
    try:
        job = btree.prepare(con, uri, "t", "SELECT a FROM t", reader.capacity_of(Schema(con, uri), "t"))
        with ThreadPoolExecutor(max_workers=1) as pool:
            beside = Beside(pool)
            assert job.run(beside, 0.5)["a"][0].tolist() == list(range(5))  # below SPLIT_ROWS
            monkeypatch.setattr(btree, "SPLIT_ROWS", 1)
            assert job.run(beside, 0.5)["a"][0].tolist() == list(range(5))  # a leaf root
            assert beside.given == 0
    finally:
        con.close()


def test_the_largest_table_shared_so_that_both_read_threads_end_together():
    """read_columns' share of the largest table read on its own thread: (K + R) / 2K, costs rows x (columns +
    ROW_COST); worked out by hand for the 2M-kernel export's two tables (10 and 5 columns, same rows)."""
    class J:
        def __init__(self, capacity, columns):
            self.capacity, self.sources = capacity, list(range(columns))

    assert reader.ROW_COST == 8
    name, share = reader._shares({"kernels": (J(2_000_000, 7), J(2_000_000, 10)), "runtime": (J(2_004_448, 5), None)})
    assert name == "kernels" and share == (2_000_000 * 18 + 2_004_448 * 13) / (2 * 2_000_000 * 18)
    assert reader._shares({"one": (J(10, 3), None)}) == ("one", 0.5)  # alone: half each
    assert reader._shares({"a": (J(None, 3), None), "b": (J(None, 3), None)})[1] == 1.0


def test_the_real_exports_load_the_same_read_in_parts(profiles, monkeypatch):
    """Every real export loads as through SQLite with its largest table read in two parts (SPLIT_ROWS 1)."""
    monkeypatch.setattr(btree, "SPLIT_ROWS", 1)
    for path in sorted(profiles.glob("*.sqlite")):
        assert_same_report(*loaded_both_ways(path, monkeypatch))


@pytest.mark.parametrize("piece", [2, 3, 1 << 18])
def test_distinct_rows_keep_first_occurrence_order_and_nulls(monkeypatch, piece):
    from pipeline.load import kernel_names

    monkeypatch.setattr(kernel_names, "DISTINCT_PIECE", piece)  # rows made distinct a few at a time, or all at once
    a = np.array([5, 5, 3, 5, 0, 3, 0], np.int64)
    b = np.array([1, 1, 2, 9, 0, 2, 0], np.int64)
    nulls = np.array([False, False, False, False, True, False, True])
    assert kernel_names.distinct_rows([(a, None), (b, nulls)]) == [(5, 1), (3, 2), (5, 9), (0, None)]
    assert kernel_names.distinct_rows([]) == []


def test_distinct_rows_of_small_ids_packed_as_they_are_or_factorised():
    from pipeline.load import kernel_names

    a = np.array([5, 5, 3, 5, 0, 3, 0, 7], np.int32)
    b = np.array([1, 1, 2, 9, -1, 2, -1, 2**40], np.int64)  # -1 where NULL (the loader's fill)
    nulls = np.array([False, False, False, False, True, False, True, False])
    # 2**40 is beyond two columns' share (31 bits): the piece is factorised; without that row, packed
    assert kernel_names._packed_piece([(a, None), (b, nulls)]) is None
    assert kernel_names._packed_piece([(a[:7], None), (b[:7], nulls[:7])]) == [(5, 1), (3, 2), (5, 9), (0, None)]
    assert kernel_names.distinct_rows([(a, None), (b, nulls)]) == [(5, 1), (3, 2), (5, 9), (0, None), (7, 2**40)]
    assert kernel_names._packed_piece([(np.array([-3, 4]), None)]) is None  # a negative value: factorised
    assert kernel_names.distinct_rows([(np.array([-3, 4, -3]), None)]) == [(-3,), (4,)]
