"""The loader's and analysis' fast paths against a plain second computation.

Each fast path (split parallel reads, lookup-table id resolution, the per-GPU call
index, shared kernel union, slicing a GPU out of grouped rows) must give exactly
what the straightforward computation gives; these tests fail on any difference.
"""
from __future__ import annotations

import sqlite3

import numpy as np
import pandas as pd
import pytest

from pipeline.analysis import attribution as at
from pipeline.analysis import gaps
from pipeline.analysis import intervals as iv
from pipeline.config import CategoryRules
from pipeline.frames import take_rows
from pipeline.load import columns, sqlite
from pipeline.load import report as load
from pipeline.load import tables as schema_tables
from pipeline.model import Report
from pipeline.synth import generate_scaled_report


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    """A generated 4-GPU report of 6,000 kernels (every category planted)."""
    path = tmp_path_factory.mktemp("fast") / "scaled.sqlite"
    generate_scaled_report(str(path), gpus=4, kernels=6_000, seed=3)
    return str(path)


def plain_kernels(path: str) -> pd.DataFrame:
    """The kernel table read row by row with Python's sqlite3 (no ADBC, no split)."""
    con = sqlite3.connect(path)
    rows = con.execute("SELECT start, end, globalPid, deviceId, streamId, correlationId, s.value "
                       "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName "
                       "ORDER BY k.rowid").fetchall()
    con.close()
    df = pd.DataFrame(rows, columns=["start", "end", "gpid", "device_id", "stream_id", "correlation_id", "name"])
    df["pid"] = (df["gpid"].to_numpy(np.int64) >> 24) & 0xFFFFFF
    return df


def test_split_reads_equal_one_plain_read(scaled, monkeypatch):
    monkeypatch.setattr(sqlite, "SPLIT_MIN_ROWS", 1_000)  # force several rowid ranges on several threads
    schema = schema_tables.Schema(sqlite.connect_readonly(scaled), sqlite.readonly_uri(scaled))
    sql = "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL"
    pieces = sqlite.split_queries(schema, schema_tables.KERNEL_TABLE, sql, 4)
    assert len(pieces) == 4 and all("rowid >=" in q for q in pieces)
    tables = sqlite.read_tables(schema, {"k": (schema_tables.KERNEL_TABLE, sql)}, threads=4)
    schema.close()
    plain = plain_kernels(scaled)
    assert tables["k"].num_rows == len(plain) == 6_000
    assert np.array_equal(tables["k"].column("start").to_numpy(), plain["start"].to_numpy())
    assert np.array_equal(tables["k"].column("end").to_numpy(), plain["end"].to_numpy())


def test_loaded_kernels_equal_plain_read_grouped_by_gpu(scaled, monkeypatch):
    monkeypatch.setattr(sqlite, "SPLIT_MIN_ROWS", 1_000)
    report = load.load_report(scaled)
    plain = plain_kernels(scaled)
    keys = report.devices.set_index(["pid", "device_id"])["gpu_key"]
    plain["gpu_key"] = keys.reindex(pd.MultiIndex.from_frame(plain[["pid", "device_id"]])).to_numpy()
    # grouped by GPU key, file order inside each GPU (a stable sort of the plain rows)
    plain = plain.sort_values("gpu_key", kind="stable").reset_index(drop=True)
    got = report.kernels
    for col in ("start", "end", "pid", "device_id", "stream_id", "correlation_id"):
        assert np.array_equal(got[col].to_numpy(np.int64), plain[col].to_numpy(np.int64)), col
    assert got["name"].astype(str).tolist() == plain["name"].tolist()
    assert got["gpu_key"].astype(str).tolist() == plain["gpu_key"].tolist()
    for key in report.gpu_keys():  # the slice is exactly the GPU's rows
        trace = load.gpu_trace(report, key)
        assert len(trace.kernels) == int((plain["gpu_key"] == key).sum())
        assert set(trace.kernels["gpu_key"].astype(str)) == {key}


def test_runtime_cut_equals_filter_then_stable_sort(scaled):
    report = load.load_report(scaled)
    for key in report.gpu_keys():
        trace = load.gpu_trace(report, key)
        plain = report.runtime[report.runtime["pid"].isin(trace.pids)].sort_values("start", kind="stable")
        assert np.array_equal(trace.runtime["start"].to_numpy(), plain["start"].to_numpy())
        assert np.array_equal(trace.runtime["correlation_id"].to_numpy(), plain["correlation_id"].to_numpy())
    assert not report.runtime.empty


@pytest.mark.parametrize("ids", [
    [5, 3, 5, 9, 3, 0],            # dense: lookup table
    [7, -1, 7, 2],                 # NULL (-1): np.unique fallback
    [10**12, 4, 10**12],           # sparse: fallback
    [],
])
def test_distinct_codes_equal_np_unique(ids):
    ids = np.array(ids, dtype=np.int64)
    uniques, inverse = columns.distinct_codes(ids)
    expect_u, expect_i = np.unique(ids, return_inverse=True)
    assert uniques.tolist() == expect_u.tolist()
    assert inverse.tolist() == expect_i.tolist()


def test_call_index_equals_per_gap_set_computation():
    rng = np.random.default_rng(7)
    n = 400
    start = np.sort(rng.integers(0, 1_000_000, n))
    runtime = pd.DataFrame({
        "start": start, "end": start + rng.integers(0, 40_000, n),
        "name": pd.Categorical(rng.choice(["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync",
                                           "cudaHostAlloc"], n)),
        "pid": 1, "tid": 1, "correlation_id": np.arange(n)})
    g0 = np.sort(rng.integers(0, 1_000_000, 60))
    gap_rows = pd.DataFrame({"start": g0, "end": g0 + rng.integers(1, 50_000, 60)})
    gap_rows["length"] = gap_rows["end"] - gap_rows["start"]
    gap_rows["kernel_before"] = "k"
    gap_rows["kernel_after"] = "k"
    copy_start = np.sort(rng.integers(0, 1_000_000, 30))
    copies = pd.DataFrame({"start": copy_start, "end": copy_start + 10_000})
    rules = CategoryRules()
    calls = at.index_calls(runtime, copies, rules)
    g1 = gap_rows["end"].to_numpy()
    # Plain reference: every call against every gap, |call ∩ gap| summed per name; columns by
    # total overlap, largest first, ties by name (api_overlap_table's contract).
    plain = {}
    for name in sorted(runtime["name"].unique()):
        c = runtime[runtime["name"] == name]
        cs, ce = c["start"].to_numpy()[:, None], c["end"].to_numpy()[:, None]
        plain[name] = np.maximum(0, np.minimum(ce, g1[None, :]) - np.maximum(cs, g0[None, :])).sum(axis=0)
    order = sorted(plain, key=lambda k: -int(plain[k].sum()))
    for fast in (at.overlap_by_name(calls, gap_rows), at.api_overlap_table(runtime, gap_rows)):
        assert list(fast.columns) == order and len(order) == 4
        assert np.array_equal(fast.to_numpy(), np.column_stack([plain[k] for k in order]))

    # The unions against a plain per-nanosecond coverage of the calls each one should hold.
    def covered(starts, ends) -> np.ndarray:
        busy = np.zeros(1_200_000, dtype=bool)
        for a, b in zip(starts, ends):
            busy[a:b] = True
        return np.array([int(busy[a:b].sum()) for a, b in zip(g0, g1)])

    sync = runtime[runtime["name"] == "cudaStreamSynchronize"]
    expect_sync = covered(sync["start"], sync["end"])
    assert np.array_equal(iv.overlap_with_each(g0, g1, *calls.sync_runs), expect_sync)
    data = runtime[runtime["name"].isin(["cudaMemcpyAsync", "cudaHostAlloc"])]
    expect_data = covered(np.concatenate((data["start"], copies["start"])),
                          np.concatenate((data["end"], copies["end"])))
    assert np.array_equal(iv.overlap_with_each(g0, g1, *calls.data_runs), expect_data)
    assert expect_sync.any() and expect_data.any()


def test_union_unsorted_input_equals_sorted():
    s = np.array([50, 10, 30, 10, 70], dtype=np.int64)
    e = np.array([60, 20, 45, 35, 71], dtype=np.int64)
    got = iv.union(s, e)
    order = np.lexsort((e, s))
    expect = iv.union(s[order], e[order])
    assert got[0].tolist() == expect[0].tolist() == [10, 50, 70]
    assert got[1].tolist() == expect[1].tolist() == [45, 60, 71]


def test_shared_busy_runs_equal_separate_unions(scaled):
    report = load.load_report(scaled)
    trace = load.gpu_trace(report, report.gpu_keys()[0])
    k = trace.kernels
    w0 = int(k["start"].min()) + 1_000_000
    w1 = int(k["end"].max()) - 1_000_000
    runs = gaps.busy_runs(k["start"], k["end"], w0, w1)
    kw = gaps.kernels_in_window(k, w0, w1)
    expect = iv.union(kw["start"], kw["end"])
    assert runs[0].tolist() == expect[0].tolist() and runs[1].tolist() == expect[1].tolist()
    assert gaps.device_holes(k["start"], k["end"], w0, w1, runs).tolist() == \
        gaps.device_holes(k["start"], k["end"], w0, w1).tolist()


def test_threaded_identities_equal_one_by_one(tmp_path):
    """results.identities hashes on threads: same digests, in order, as one call per path; an
    unreadable path gives its exception in its place."""
    from pipeline.inputs.export import content_key
    from pipeline.store.results import IdentityIndex, identities

    paths = []
    for i in range(6):
        p = tmp_path / f"r{i}.sqlite"
        p.write_bytes(bytes([i]) * (100_000 + i))
        paths.append(str(p))
    paths.insert(3, str(tmp_path / "missing.sqlite"))
    got = identities(IdentityIndex(str(tmp_path / "state")), paths)
    assert isinstance(got[3], OSError)
    assert [g for i, g in enumerate(got) if i != 3] == [content_key(p) for i, p in enumerate(paths) if i != 3]


@pytest.mark.parametrize("ids", [
    [5, 3, 5, 9, 3, 0],            # dense: one lookup table of category codes
    [7, -1, 7, 2],                 # NULL (-1): distinct_codes
    [10**12, 4, 10**12],           # sparse: distinct_codes
])
def test_resolve_ids_equals_plain_lookup(ids):
    """Each row's text (``""`` for an id StringIds lacks), normalised when asked (two ids may become one
    text), as a categorical of the sorted distinct texts: the same as looking each row up by hand."""
    strings = {0: "cudaLaunchKernel_v7000", 3: "cudaLaunchKernel", 5: "cudaStreamSynchronize_v3020", 9: None,
               2: "b", 4: "a", 10**12: "z"}
    for each in (None, columns.normalise_api_name):
        got = columns.resolve_ids(np.array(ids, dtype=np.int32 if max(ids) < 2**31 else np.int64), strings, each=each)
        plain = [strings.get(i) or "" for i in ids]
        plain = [each(t) for t in plain] if each else plain
        assert got.tolist() == plain
        assert got.cat.categories.tolist() == sorted(set(plain))
        assert got.cat.codes.dtype == np.int8


def mixed_frame() -> pd.DataFrame:
    """Six rows of every column kind the loaders make: int64, int32, bool, categorical, text, object."""
    return pd.DataFrame({
        "start": np.array([10, 20, 30, 40, 50, 60], dtype=np.int64),
        "pid": np.array([7, 7, 8, 8, 7, 9], dtype=np.int32),
        "graph": np.array([True, False, True, False, False, True]),
        "name": pd.Categorical(["a", "b", "a", "c", "b", "a"], categories=["c", "a", "b", "unused"]),
        "text": pd.Series(["u", "v", "w", "x", "y", "z"], dtype="str"),
        "kind": pd.Series(["k", None, "k", "m", "n", "k"], dtype=object),
    })


@pytest.mark.parametrize("positions", [
    [2, 3, 4],            # one contiguous run: a slice
    [0, 2, 5],            # ascending, apart
    [5, 0, 3, 3],         # any order, repeated
    [1],
    [],
    [0, 1, 2, 3, 4, 5],
])
def test_take_rows_equals_pandas_take(positions):
    frame = mixed_frame()
    at = np.array(positions, dtype=np.int64)
    got = take_rows(frame, at)
    expect = frame.take(at).reset_index(drop=True)
    pd.testing.assert_frame_equal(got, expect, check_exact=True, check_index_type=True, check_column_type=True)
    assert got.dtypes.tolist() == frame.dtypes.tolist()
    assert got["name"].cat.categories.tolist() == ["c", "a", "b", "unused"]
    # a new column given in place keeps its place; the source frame is left as it was
    replaced = take_rows(frame, at, start=np.arange(at.size, dtype=np.int64) * 3)
    assert replaced.columns.tolist() == frame.columns.tolist()
    assert replaced["start"].tolist() == [3 * i for i in range(at.size)]
    assert frame["start"].tolist() == [10, 20, 30, 40, 50, 60]


@pytest.mark.parametrize("values", [
    [86150, 86146, 86150, 86153, 86146],   # a few process ids: coded as value - min
    [-1, 5, -1, 3],                        # no process (-1) among them
    [10**12, 4, 10**12, 4],                # too wide a range: factorized
    [],
])
def test_groups_of_equals_plain_grouping(values):
    frame = pd.DataFrame({"pid": np.array(values, dtype=np.int64)})
    report = Report(path="x", kernels=frame, runtime=frame.astype(np.int32) if values and max(map(abs, values)) < 2**31
                    else frame, copies=frame, nvtx=frame, devices=frame)
    for name in ("kernels", "runtime"):
        got = report.groups_of(name, "pid")
        plain = {v: np.flatnonzero(np.array(values) == v) for v in dict.fromkeys(values)}
        assert sorted(got) == sorted(plain) and all(type(v) is int for v in got)
        assert all(got[v].tolist() == plain[v].tolist() for v in plain)
    assert report.rows_of("kernels", "pid", list(dict.fromkeys(values))[::-1]).tolist() == list(range(len(values)))


def test_groups_of_a_column_in_order_are_slices():
    """A frame in the column's order (as the loaders keep kernels by GPU key and runtime calls by process) has each
    value's rows as one run: a slice (no positions array); several values' rows are their positions, ascending."""
    pids = np.array([-1, 3, 3, 7, 7, 7], dtype=np.int32)
    frame = pd.DataFrame({"pid": pids, "start": np.arange(6, dtype=np.int64)})
    report = Report(path="x", kernels=frame, runtime=frame, copies=frame, nvtx=frame, devices=frame)
    assert report.groups_of("runtime", "pid") == {-1: slice(0, 1), 3: slice(1, 3), 7: slice(3, 6)}
    assert report.runtime_rows([7]) == slice(3, 6)
    assert report.runtime_rows([7, 3]).tolist() == [1, 2, 3, 4, 5]
    cut = take_rows(frame, report.runtime_rows([7]))
    assert cut["start"].tolist() == [3, 4, 5] and cut.index.tolist() == [0, 1, 2]
    assert np.shares_memory(cut["start"].to_numpy(), frame["start"].to_numpy())


def test_plan_cut_to_capture_calls_gives_the_same_plan(tmp_path):
    """Under ``span`` the plan reads only the calls that begin or end a graph capture: its cut holds those two of the
    ten calls, and the plan (the kind: ``capture_32_DECODE`` meets the capture, so no serving evidence) is the
    full cut's. A cut without them would find no capture and call the job serving."""
    from pipeline.analysis.analyse import plan_calls, plan_gpu
    from pipeline.config import Config
    from pipeline.load.kineto import load_kineto
    from tests.test_graph_capture import serving_then_capture, span_config

    report = load_kineto(serving_then_capture(str(tmp_path / "cap.pt.trace.json")))
    (key,) = report.gpu_keys()
    cfg = span_config()
    calls = plan_calls(cfg)
    cut = load.plan_trace(report, key, calls)
    assert cut.runtime["name"].astype(str).tolist() == ["cudaStreamBeginCapture", "cudaStreamEndCapture"]
    assert len(load.plan_trace(report, key).runtime) == 10
    assert plan_gpu(cut, cfg) == plan_gpu(load.plan_trace(report, key), cfg)
    assert plan_gpu(cut, cfg).kind == "unknown"
    assert plan_gpu(load.plan_trace(report, key, frozenset()), cfg).kind == "serving"
    assert plan_calls(Config()) is None  # auto: iterations may be projected through any call
