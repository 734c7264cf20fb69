"""Loader checks on small synthetic exports (pipeline.synth.ExportWriter, real schema),
plus one end-to-end analyse_gpu on a two-process, one-GPU export with hand-computed numbers."""
from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat

import pytest

from pipeline.analysis.analyse import analyse_gpu
from pipeline.config import AnalysisConfig, Config
from pipeline.load.report import ProfileError, connect_readonly, gpu_trace, load_report
from pipeline.model import WarningCode
from pipeline.synth import SCHEMA, ExportWriter

MS = 1_000_000  # ns per ms
#: The window is pinned to the span rule so the hand-computed numbers do not depend on iteration detection.
SPAN = Config(analysis=AnalysisConfig(window="span"))
H100 = "NVIDIA H100 80GB HBM3"


def build(path, fill, **kw):
    w = ExportWriter(str(path), **kw)
    fill(w)
    return w.close()


def two_procs_one_gpu(w: ExportWriter):
    """pids 100 and 200 both drive physical GPU 0 (uuid aaa) as their CUDA device 0;
    pid 300 drives GPU 1 (uuid bbb). Both processes use stream number 7."""
    w.gpu(0, H100, uuid="aaa", bus="0000:01:00.0")
    w.gpu(1, H100, uuid="bbb", bus="0000:02:00.0")
    w.cuda_device(0, 0, 100)
    w.cuda_device(0, 0, 200)
    w.cuda_device(1, 0, 300)
    w.kernel(pid=100, device=0, stream=7, start=0, end=10 * MS, name="gemm_a")
    w.kernel(pid=100, device=0, stream=7, start=30 * MS, end=40 * MS, name="gemm_b")
    w.kernel(pid=200, device=0, stream=7, start=5 * MS, end=20 * MS, name="ncclKernel_AllReduce")
    w.kernel(pid=200, device=0, stream=7, start=42 * MS, end=50 * MS, name="gemm_c")
    w.memcpy(pid=200, device=0, stream=9, start=38 * MS, end=44 * MS)
    w.runtime(pid=100, tid=101, start=12 * MS, end=28 * MS, name="cudaStreamSynchronize_v3020")
    w.runtime(pid=200, tid=201, start=21 * MS, end=39 * MS, name="cudaMemcpyAsync_ptsz_v7000")
    # a third process on ANOTHER GPU, synchronising over the whole time
    w.kernel(pid=300, device=0, stream=7, start=0, end=50 * MS, name="other_gpu")
    w.runtime(pid=300, tid=301, start=0, end=50 * MS, name="cudaDeviceSynchronize_v3020")


def one_kernel(w: ExportWriter):
    w.kernel(pid=10, device=0, stream=1, start=0, end=100, name="k")


# ---------------------------------------------------------------- GPU identity

def test_two_processes_one_gpu_share_a_key(tmp_path):
    rep = load_report(build(tmp_path / "x.sqlite", two_procs_one_gpu))
    assert rep.gpu_keys() == ["GPU-aaa", "GPU-bbb"]
    t = gpu_trace(rep, "GPU-aaa")
    assert t.pids == (100, 200)
    assert t.gpu_model == H100
    assert sorted(t.kernels["name"]) == ["gemm_a", "gemm_b", "gemm_c", "ncclKernel_AllReduce"]
    # only the calls of pids 100 and 200; pid 300 drives the other GPU
    assert sorted(t.runtime["pid"].tolist()) == [100, 200]
    assert gpu_trace(rep, "GPU-bbb").pids == (300,)


#: (pid, tid, start, end, name) of calls written in this order (not start order); pids 100 and 200 share GPU 0,
#: and both call at 30 ms (pid 200's written first).
CALLS = [(200, 201, 30, 31, "cudaLaunchKernel"), (100, 101, 10, 11, "cudaMalloc"), (300, 301, 5, 6, "cudaFree"),
         (100, 102, 40, 41, "cudaLaunchKernel"), (200, 202, 20, 21, "cudaStreamBeginCapture"),
         (100, 101, 30, 32, "cudaMemcpyAsync"), (300, 301, 30, 33, "cudaLaunchKernel")]


def in_start_order(pids):
    """(pid, start ms) of the calls of ``pids`` (:data:`CALLS` and :func:`two_procs_one_gpu`'s own, written
    first) as a stable sort by start of the export's rows gives them."""
    own = [(100, 12), (200, 21), (300, 0)]
    return sorted([(pid, start) for pid, start in own + [(c[0], c[2]) for c in CALLS] if pid in pids],
                  key=lambda r: r[1])


@pytest.mark.parametrize("linked", [False, True])
def test_runtime_grouped_by_the_processes_of_a_gpu_in_start_order(tmp_path, linked):
    """The report keeps the runtime calls grouped by the processes that share a GPU (pids 100 and 200), each group's
    in start order (the export's order among equal starts: pid 200's call at 30 ms before pid 100's), so that each
    GPU's cut is one run in start order. ``linked``: pid 300 drives GPU 0 too, so the three are one group, and GPU 1's
    cut is pid 300's calls of it, in start order still."""
    from pipeline.analysis.analyse import plan_calls
    from pipeline.load.report import plan_trace

    def fill(w: ExportWriter):
        two_procs_one_gpu(w)
        if linked:
            w.cuda_device(0, 1, 300)
            w.kernel(pid=300, device=1, stream=3, start=45 * MS, end=46 * MS, name="gemm_d")
        for pid, tid, start, end, name in CALLS:
            w.runtime(pid=pid, tid=tid, start=start * MS, end=end * MS, name=name)

    rep = load_report(build(tmp_path / "x.sqlite", fill))
    got = [(int(p), int(s) // MS) for p, s in zip(rep.runtime["pid"], rep.runtime["start"])]
    shared, other = in_start_order((100, 200)), in_start_order((300,))
    assert shared.index((200, 30)) + 1 == shared.index((100, 30))  # the tie, in the export's order
    assert got == (in_start_order((100, 200, 300)) if linked else shared + other)
    gpu0 = in_start_order((100, 200, 300)) if linked else shared
    for trace in (gpu_trace(rep, "GPU-aaa"), plan_trace(rep, "GPU-aaa")):
        assert [(int(p), int(s) // MS) for p, s in zip(trace.runtime["pid"], trace.runtime["start"])] == gpu0
        assert trace.runtime.index.tolist() == list(range(len(gpu0)))
    alone = gpu_trace(rep, "GPU-bbb").runtime
    assert [(int(p), int(s) // MS) for p, s in zip(alone["pid"], alone["start"])] == other
    assert alone.index.tolist() == list(range(len(other)))
    # the plan's cut to the calls it reads (span: graph captures) keeps their start order
    capture = plan_trace(rep, "GPU-aaa", plan_calls(SPAN)).runtime
    assert capture["name"].astype(str).tolist() == ["cudaStreamBeginCapture"] and capture["pid"].tolist() == [200]


def test_without_gpu_tables_key_is_pid_and_device(tmp_path):
    def fill(w):
        w.kernel(pid=10, device=1, stream=7, start=0, end=100, name="a")
        w.kernel(pid=20, device=1, stream=7, start=0, end=100, name="b")
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    # no TARGET_INFO_* tables: each (pid, deviceId) is its own GPU
    assert rep.gpu_keys() == ["pid10/dev1", "pid20/dev1"]
    assert gpu_trace(rep, "pid10/dev1").gpu_model == ""


def test_cuda_device_uuid_without_gpu_id(tmp_path):
    # TARGET_INFO_CUDA_DEVICE.gpuId is nullable; the uuid there still identifies the GPU
    def fill(w):
        w.cuda_device(None, 0, 100, uuid="ccc")
        w.cuda_device(None, 1, 200, uuid="ccc")
        w.kernel(pid=100, device=0, stream=7, start=0, end=100, name="a")
        w.kernel(pid=200, device=1, stream=7, start=50, end=200, name="b")
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    assert rep.gpu_keys() == ["GPU-ccc"]
    assert gpu_trace(rep, "GPU-ccc").pids == (100, 200)


def test_bus_id_identifies_gpu_without_uuid(tmp_path):
    def fill(w):
        w.gpu(3, "NVIDIA A100-SXM4-80GB", bus="0000:81:00.0")
        w.cuda_device(3, 0, 100)
        w.cuda_device(3, 2, 200)
        w.kernel(pid=100, device=0, stream=1, start=0, end=100, name="a")
        w.kernel(pid=200, device=2, stream=1, start=0, end=100, name="b")
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    assert rep.gpu_keys() == ["bus-0000:81:00.0"]


# ---------------------------------------------------------------- bad inputs

def test_no_kernel_table(tmp_path):
    def fill(w):
        w.runtime(pid=10, tid=11, start=0, end=10, name="cudaMalloc_v3020")
    path = build(tmp_path / "nokernels.sqlite", fill)
    with pytest.raises(ProfileError) as exc:
        load_report(path)
    assert str(exc.value).startswith(path)
    assert "CUPTI_ACTIVITY_KIND_KERNEL" in str(exc.value)


def test_zero_kernel_rows(tmp_path):
    def fill(w):
        w.runtime(pid=10, tid=11, start=0, end=10, name="cudaMalloc_v3020")
    path = build(tmp_path / "empty_kernels.sqlite", fill)
    con = sqlite3.connect(path)  # the writer only creates tables with rows: add an empty one
    con.execute(f"CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL ({SCHEMA['CUPTI_ACTIVITY_KIND_KERNEL']})")
    con.commit()
    con.close()
    with pytest.raises(ProfileError) as exc:
        load_report(path)
    assert str(exc.value).startswith(path)
    assert "zero rows" in str(exc.value)


def test_zero_byte_file(tmp_path):
    path = tmp_path / "empty.sqlite"
    path.write_bytes(b"")
    with pytest.raises(ProfileError) as exc:
        load_report(str(path))
    assert str(exc.value).startswith(str(path))


def test_not_sqlite(tmp_path):
    path = tmp_path / "notes.sqlite"
    path.write_text("this is not a database\n" * 100)
    with pytest.raises(ProfileError) as exc:
        load_report(str(path))
    assert str(exc.value).startswith(str(path))


def test_sqlite_but_not_nsight(tmp_path):
    path = str(tmp_path / "other.sqlite")
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    con.execute("INSERT INTO customers VALUES (1, 'x')")
    con.commit()
    con.close()
    with pytest.raises(ProfileError) as exc:
        load_report(path)
    assert str(exc.value).startswith(path)
    assert "not an Nsight Systems export" in str(exc.value)


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.sqlite")
    with pytest.raises(ProfileError) as exc:
        load_report(path)
    assert str(exc.value).startswith(path)


def test_kernels_with_end_before_start_dropped_and_counted(tmp_path):
    def fill(w):
        w.kernel(pid=10, device=0, stream=1, start=0, end=10, name="ok1")
        w.kernel(pid=10, device=0, stream=1, start=20, end=15, name="bad1")  # end < start
        w.kernel(pid=10, device=0, stream=1, start=40, end=30, name="bad2")  # end < start
        w.kernel(pid=10, device=0, stream=1, start=50, end=50, name="zero")  # zero length: kept
        w.kernel(pid=10, device=0, stream=1, start=60, end=70, name="ok2")
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    assert rep.kernels["name"].tolist() == ["ok1", "zero", "ok2"]
    assert len(rep.warnings) == 1 and rep.warnings[0].code == WarningCode.DROPPED_KERNEL_ROWS
    assert rep.warnings[0].text.startswith("dropped 2 kernel rows")
    assert any("dropped 2" in w.text for w in gpu_trace(rep, "pid10/dev0").warnings)


# ---------------------------------------------------------------- read-only

def test_loader_opens_read_only(tmp_path):
    path = build(tmp_path / "x.sqlite", two_procs_one_gpu)
    before_bytes = open(path, "rb").read()
    before = os.stat(path)
    listing = sorted(os.listdir(tmp_path))
    load_report(path)
    after = os.stat(path)
    assert hashlib.sha256(open(path, "rb").read()).digest() == hashlib.sha256(before_bytes).digest()
    assert after.st_mtime_ns == before.st_mtime_ns
    assert after.st_size == before.st_size
    assert sorted(os.listdir(tmp_path)) == listing  # no -journal / -wal / -shm left behind


def test_loader_connection_cannot_write(tmp_path):
    # the connection the loader uses refuses writes (root ignores file modes, SQLite does not)
    path = build(tmp_path / "x.sqlite", one_kernel)
    con = connect_readonly(path)
    try:
        with pytest.raises(sqlite3.OperationalError):
            con.execute("CREATE TABLE scratch (a INTEGER)")
    finally:
        con.close()


def test_read_only_copy_loads(tmp_path):
    path = build(tmp_path / "x.sqlite", two_procs_one_gpu)
    ro_dir = tmp_path / "ro"
    ro_dir.mkdir()
    ro = ro_dir / "x.sqlite"
    shutil.copy(path, ro)
    os.chmod(ro, 0o444)
    os.chmod(ro_dir, 0o555)
    try:
        rep = load_report(str(ro))
        assert rep.gpu_keys() == ["GPU-aaa", "GPU-bbb"]
        assert stat.S_IMODE(os.stat(ro).st_mode) == 0o444
    finally:
        os.chmod(ro_dir, 0o755)


# ---------------------------------------------------------------- decoding

def test_global_tid_decoding(tmp_path):
    def fill(w):
        w.kernel(pid=4242, device=0, stream=1, start=0, end=100, name="k")
        w.runtime(pid=4242, tid=4243, start=0, end=10, name="cudaLaunchKernel_v7000")
        w.runtime(pid=0xABCDE, tid=0xFFFFF, start=5, end=10, name="cudaFree")
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    assert rep.kernels["pid"].tolist() == [4242]
    rt = rep.runtime.sort_values("start")
    # globalTid = (1 << 48) | (pid << 24) | tid  ->  pid, tid recovered exactly
    assert rt[["pid", "tid"]].values.tolist() == [[4242, 4243], [0xABCDE, 0xFFFFF]]
    assert rt["name"].tolist() == ["cudaLaunchKernel", "cudaFree"]


def test_nvtx_text_and_text_id(tmp_path):
    def fill(w):
        one_kernel(w)
        w.nvtx(pid=10, tid=11, start=0, end=50, text="Iteration 1")
        w.nvtx(pid=10, tid=11, start=50, end=100, text="Iteration 2", registered=True)
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    n = rep.nvtx.sort_values("start")
    assert n["text"].tolist() == ["Iteration 1", "Iteration 2"]
    assert n[["pid", "tid"]].values.tolist() == [[10, 11], [10, 11]]


def test_meta_data_export_and_older_name(tmp_path):
    new = load_report(build(tmp_path / "new.sqlite", one_kernel, schema_version="3.25.0"))
    assert new.meta["EXPORT_SCHEMA_VERSION"] == "3.25.0"
    old = load_report(build(tmp_path / "old.sqlite", one_kernel, schema_version="2.7.1",
                            meta_table="EXPORT_META_DATA"))
    assert old.meta["EXPORT_SCHEMA_VERSION"] == "2.7.1"


def test_diagnostics_read(tmp_path):
    def fill(w):
        one_kernel(w)
        w.diagnostic(0, "Some events were lost", severity=2)
        w.diagnostic(0, "just info", severity=1)
    rep = load_report(build(tmp_path / "x.sqlite", fill))
    assert rep.diagnostics == [{"pid": 0, "text": "Some events were lost"}]  # globalPid NULL: the session's


# ---------------------------------------------------------------- end to end on one GPU

def test_analyse_two_processes_one_gpu(tmp_path):
    rep = load_report(build(tmp_path / "job.sqlite", two_procs_one_gpu))
    cfg = SPAN
    res = analyse_gpu(gpu_trace(rep, "GPU-aaa"), cfg, cfg.labels_for(rep.path))
    row = res.row
    # window = span of this GPU's kernels: 0 .. 50 ms (pid 300's kernel is on the other GPU)
    assert (row["window_start_ns"], row["window_end_ns"], row["window_ns"]) == (0, 50 * MS, 50 * MS)
    assert row["window_rule"] == "span"
    # union over BOTH processes: [0,10) u [5,20) = [0,20) 20 ms; [30,40) 10 ms; [42,50) 8 ms -> 38 ms busy
    assert row["busy_ns"] == 38 * MS
    # idle = 50 - 38 = 12 ms: holes [20,30) and [40,42)
    assert row["idle_ns"] == 12 * MS
    assert row["idle_pct"] == pytest.approx(24.0)  # 12 / 50
    # memcpy [38,44) minus kernels [30,40) [42,50) -> [40,42) = 2 ms copy-only; dark = 12 - 2 = 10 ms
    assert row["copy_only_ns"] == 2 * MS
    assert row["dark_ns"] == 10 * MS
    assert row["kernel_count"] == 4
    assert row["stream_count"] == 2  # stream 7 of pid 100 and stream 7 of pid 200
    # per-stream gaps: pid 100: 30 - 10 = 20 ms; pid 200: 42 - 20 = 22 ms -> 2 gaps, 42 ms
    assert (row["gap_count"], row["gap_total_ns"], row["max_gap_ns"]) == (2, 42 * MS, 22 * MS)
    assert (row["gaps_5_50ms"], row["gaps_5_50ms_ns"], row["gaps_le_5ms"], row["gaps_gt_50ms"]) == \
        (2, 42 * MS, 0, 0)
    assert row["sliver_count"] == 0
    # category shares come from the device-level holes (no kernel on any stream):
    #  hole [20,30) 10 ms: memcpyAsync [21,39) covers [21,30) = 9/10 = 0.9 -> data (data comes
    #    before sync since issue 13; the sync call [12,28) covering 8/10 is only the witness)
    #  hole [40,42)  2 ms: no sync call there; copy [38,44) covers [40,42) = 2/2 -> data
    assert (row["cat_sync_ns"], row["cat_data_ns"], row["cat_comm_ns"], row["cat_cpu_ns"]) == (0, 12 * MS, 0, 0)
    assert (row["device_gap_count"], row["device_gap_ns"]) == (2, 12 * MS)
    assert row["cat_sync_pct"] == 0.0
    assert row["cat_data_pct"] == pytest.approx(24.0)  # 12 / 50
    assert row["main_category"] == "data"
    assert row["actionable"] == "data"  # 24 % >= 2 % of W; nothing else
    # the per-stream roster keeps its own categories:
    #  pid 100 gap [10,30): memcpyAsync covers [21,30) = 9/20 < 0.5 (not data), gemm_a before (not
    #  comm); sync call [12,28) covers 16/20 = 0.8 -> sync
    #  pid 200 gap [20,42): sync covers [20,28) = 8/22 < 0.5; memcpyAsync [21,39) u copy [38,44) = [21,42)
    #  21/22 -> data (the NCCL kernel before it would say comm, but data comes first)
    cats = {(g["pid"], g["length_ns"]): g["category"] for g in res.roster}
    assert cats == {(100, 20 * MS): "sync", (200, 22 * MS): "data"}
    # copy [38,44) inside pid 200's gap [20,42): [38,42) = 4 ms
    assert row["copy_overlap_ns"] == 4 * MS
    # cost: H100 at $4/h, 0.24 x 4 x 730 = 700.8; Amdahl 1 / 0.76 = 1.315789... -> 1.3158
    assert row["gpu_model"] == H100
    assert row["rate_usd_per_hour"] == 4.0
    assert row["idle_usd_per_month"] == pytest.approx(700.8)
    assert row["amdahl_speedup"] == pytest.approx(1.3158)
    assert row["pids"] == "100,200"

    roster = res.roster
    # longest first: pid 200's 22 ms gap, then pid 100's 20 ms gap
    assert [(g["pid"], g["stream_id"], g["start_ns"], g["length_ns"]) for g in roster] == [
        (200, 7, 20 * MS, 22 * MS), (100, 7, 10 * MS, 20 * MS)]
    assert (roster[0]["kernel_before"], roster[0]["kernel_after"]) == ("ncclKernel_AllReduce", "gemm_c")
    assert (roster[1]["kernel_before"], roster[1]["kernel_after"]) == ("gemm_a", "gemm_b")
    assert [g["category"] for g in roster] == ["data", "sync"]
    assert [g["copy_overlap_ns"] for g in roster] == [4 * MS, 0]
    # attribution: only pids 100 and 200; pid 300's cudaDeviceSynchronize must not appear
    #  gap [20,42): memcpyAsync [21,39) -> 18 ms; streamSync [12,28) -> [20,28) 8 ms
    #  gap [10,30): streamSync [12,28) -> 16 ms; memcpyAsync [21,39) -> [21,30) 9 ms
    assert roster[0]["attribution"] == [{"api": "cudaMemcpyAsync", "overlap_ns": 18 * MS},
                                        {"api": "cudaStreamSynchronize", "overlap_ns": 8 * MS}]
    assert roster[1]["attribution"] == [{"api": "cudaStreamSynchronize", "overlap_ns": 16 * MS},
                                        {"api": "cudaMemcpyAsync", "overlap_ns": 9 * MS}]


def test_analyse_other_gpu_is_separate(tmp_path):
    rep = load_report(build(tmp_path / "job.sqlite", two_procs_one_gpu))
    cfg = SPAN
    row = analyse_gpu(gpu_trace(rep, "GPU-bbb"), cfg, cfg.labels_for(rep.path)).row
    # pid 300's single kernel fills its span [0,50) ms: busy 50 ms, idle 0, no gaps
    assert (row["busy_ns"], row["idle_ns"], row["gap_count"]) == (50 * MS, 0, 0)
    assert row["pids"] == "300"
    assert row["idle_usd_per_month"] == 0.0


def test_device_pairs_in_pieces_are_the_sorted_distinct_pairs(monkeypatch):
    """Each kernel row's (process, device) pair: its code is its rank among the distinct pairs sorted by
    process then device (a plain second computation: the sorted set of tuples), found a few rows at a time
    (here 4) without a temporary as long as the rows; ids kept as int32 or int64."""
    import numpy as np

    from pipeline.load import processes

    from pipeline import arrays

    monkeypatch.setattr(processes, "SCAN_ROWS", 1)
    dev = np.array([1, 0, 0, 3, 0, -2, 1, 0, 7], np.int32)
    # pids far apart (the pairs hashed) and close together (looked up in a table over their range)
    for pid, table in ((np.array([70, 5, 70, 2**23, 5, 5, 70, 16_000_000, 5], np.int32), False),
                       (np.array([70, 5, 70, 71, 5, 5, 70, 72, 5], np.int32), True)):
        made = []
        monkeypatch.setattr(processes, "Positions", lambda *a, **k: made.append(arrays.Positions(*a, **k)) or made[-1])
        for kind in (np.int32, np.int64):
            codes, pairs = processes.device_pairs({"pid": pid.astype(kind), "device_id": dev})
            distinct = sorted(set(zip(pid.tolist(), dev.tolist())))
            assert list(zip(pairs["pid"].tolist(), pairs["device_id"].tolist())) == distinct
            assert codes.tolist() == [distinct.index(p) for p in zip(pid.tolist(), dev.tolist())]
            assert codes.dtype == np.int16  # a few pairs: small codes
            assert pairs["pid"].dtype == pairs["device_id"].dtype == np.int64
        assert [m._table is not None for m in made] == [table, table]


def test_distinct_values_and_their_positions_by_table_and_by_hash(monkeypatch):
    """``arrays.distinct`` is the sorted set of the parts' values and ``arrays.Positions`` each value's rank
    in it (``missing`` for any other value, below, between or above them), whether the values are close
    together (a table over their range) or far apart (hashed); a plain second computation decides."""
    import numpy as np

    from pipeline import arrays

    rng = np.random.default_rng(5)
    for spread, table in ((40, True), (2**40, False)):
        parts = [rng.integers(-spread, spread, 300), rng.integers(-spread, spread, 50).astype(np.int64), np.zeros(0)]
        if spread < 2**31:
            parts[0] = parts[0].astype(np.int32)
        found = arrays.distinct(parts)
        plain = sorted({int(v) for p in parts for v in p.tolist()})
        assert found.tolist() == plain and found.dtype == np.int64
        assert arrays.distinct(lambda: iter(parts)).tolist() == plain  # parts given anew by a function
        rank = arrays.Positions(found, 350, missing=-7)
        assert (rank._table is not None) == table
        probes = np.concatenate([parts[1], [plain[0] - 1, plain[-1] + 1, plain[-1] + 10**6, -(2**62), 2**62],
                                 [v + 1 for v in plain if v + 1 not in plain][:5]]).astype(np.int64)
        assert rank(probes).tolist() == [plain.index(v) if v in plain else -7 for v in probes.tolist()]
    assert arrays.distinct([np.zeros(0, np.int32)]).tolist() == []
    assert arrays.Positions(np.zeros(0, np.int64), missing=3)(np.array([1, 2])).tolist() == [3, 3]


@pytest.fixture(scope="module")
def lost_kernels_export(tmp_path_factory):
    """A generated export (2 GPUs) with every 97th kernel row deleted, so their launches are lost; and the
    (globalPid, correlationId) of one of them."""
    from pipeline.synth import generate_scaled_report

    path = tmp_path_factory.mktemp("lost") / "g.sqlite"
    generate_scaled_report(str(path), gpus=2, kernels=4000, seed=5)
    con = sqlite3.connect(path)
    lost = con.execute("SELECT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 975").fetchone()
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid % 97 = 5")
    con.commit()
    con.close()
    return path, lost


@pytest.mark.parametrize("change", ["duplicate call", "stray kernel"])
def test_lost_launches_are_those_of_the_rows_the_checks_keep(lost_kernels_export, tmp_path, change):
    """The loader finds the lost launches of the rows as read while it checks them; when a check drops a row,
    they are found again from the rows kept: a duplicated lost launch is counted once, and a kernel timed far
    outside the capture (dropped) does not make its launch traced."""
    source, (gpid, corr) = lost_kernels_export
    before = load_report(str(source)).untraced
    assert len(before) > 0 and ((before["pid"] == gpid >> 24 & 0xFFFFFF) & (before["correlation_id"] == corr)).sum() == 1
    path = tmp_path / "changed.sqlite"
    shutil.copy(source, path)
    con = sqlite3.connect(path)
    if change == "duplicate call":
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME "
                    "WHERE correlationId = ? AND (globalTid >> 24) = (? >> 24)", (corr, gpid))
    else:  # a copy of another kernel row, with the lost launch's correlationId, 10**6 s later
        con.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = 976")
        con.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1000000000000000, "
                    "end = end + 1000000000000000, correlationId = ? WHERE rowid = last_insert_rowid()", (corr,))
    con.commit()
    con.close()
    report = load_report(str(path))
    assert [w.code for w in report.warnings] == [WarningCode.DUPLICATE_ROWS if change == "duplicate call"
                                                 else WarningCode.DROPPED_KERNEL_ROWS]
    assert report.untraced.equals(before)
