"""Bad input: each problem is that report's error row with a clear cause; the sweep goes on."""
from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3

import pandas as pd
import pytest
from conftest import run_cli, without_model_warning
from test_export import nsys  # noqa: F401  (fixture: the repository's nsys, fails when `make nsys` was not run)

from pipeline.load.diagnostics import diagnostic_warnings, reports_lost_events
from pipeline.load.report import load_report
from pipeline.model import RowWarning, WarningCode, row_status
from pipeline.synth import ExportWriter


def test_bad_files_become_error_rows_without_worker_tracebacks(tmp_path, profiles):
    empty = tmp_path / "empty.sqlite"
    empty.write_bytes(b"")
    text = tmp_path / "notes.sqlite"
    text.write_text("not a database\n" * 100)
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    out = tmp_path / "out"
    (tmp_path / "gone.sqlite").symlink_to("nowhere.sqlite")
    # a mistyped path (issue 45 point 6): exit 2, nothing written, not a failed report priced $0.00
    missing = str(tmp_path / "missing.sqlite")
    for typo in ([missing], [str(tmp_path / "*.sqlitex"), str(empty)]):
        proc = run_cli("run", *typo, "--out", str(out), check=False)
        assert proc.returncode == 2 and f"{typo[0]}: no such file or directory (matches nothing): nothing written" \
            in proc.stderr, proc.stderr
        assert not out.exists()
    proc = run_cli("run", str(empty), str(text), str(other), str(tmp_path / "gone.sqlite"),
                   str(profiles / "tiny_2kernels.sqlite"), "--out", str(out), check=False)
    assert proc.returncode == 1
    assert "Compute Failed" not in proc.stderr  # expected failures are rows, not worker tracebacks
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    assert fleet.loc[str(profiles / "tiny_2kernels.sqlite"), "status"] == "ok"
    assert fleet.loc[str(empty), "error"] == f"{empty}: empty file (0 bytes), not an SQLite export"
    assert fleet.loc[str(text), "error"].startswith(f"{text}: not a readable SQLite database (")
    assert fleet.loc[str(other), "error"] == (
        f"{other}: SQLite file is not an Nsight Systems export "
        "(no CUPTI_ACTIVITY_KIND_KERNEL, StringIds or export metadata tables)")
    gone = str(tmp_path / "gone.sqlite")   # a broken symlink: something is there, it fails as a report
    assert fleet.loc[gone, "error"] == f"{gone}: broken symlink to nowhere.sqlite"
    assert set(fleet["status"]) == {"ok", "error"}
    assert "4 report(s) failed" in proc.stdout
    assert f"ERROR {empty}: empty file" in proc.stdout  # the path is said once
    jobs = pd.read_csv(out / "jobs.csv")
    assert jobs["failed_reports"].dtype.kind == "i" and jobs["gpus"].dtype.kind == "i"
    assert int(jobs["failed_reports"].sum()) == 4 and int(jobs["gpus"].sum()) == 1


def test_trim_outside_the_data_is_an_error_not_a_priced_idle_gpu(tmp_path, profiles):
    out = tmp_path / "out"
    proc = run_cli("run", str(profiles / "train_h100_2gpu_nccl.sqlite"), "--out", str(out), "--trim", "1", "2",
                   check=False)
    assert proc.returncode == 1
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert set(fleet["status"]) == {"error"} and len(fleet) == 2
    assert fleet["error"].str.contains(
        r"no kernel of this GPU inside the trim window \[1.000000, 2.000000\) s; its kernels run 60.11").all()
    reversed_trim = run_cli("run", str(profiles / "tiny_2kernels.sqlite"), "--out", str(out), "--trim", "2", "1",
                            check=False)
    assert reversed_trim.returncode == 2 and "must be after START" in reversed_trim.stderr


def test_json_is_strict(tmp_path, profiles):
    """The per-GPU JSON parses as strict JSON (no NaN/Infinity tokens; non-finite numbers are null)."""
    out = tmp_path / "out"
    run_cli("run", str(profiles / "tiny_2kernels.sqlite"), "--out", str(out), "--trim", "1.517727", "1.5180")
    (doc_path,) = list((out / "gpus").iterdir())
    text = doc_path.read_text()
    assert "Infinity" not in text and "NaN" not in text
    json.loads(text, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))


# ---------------------------------------------------------------- the bad-input corpus (issue 5)
#
# One real CLI run (``gpu-idle run CORPUS ... --out OUT``) over every file below, each test
# checking its own rows of fleet.csv: the full status, error and warnings strings.


MS = 1_000_000
H100 = "NVIDIA H100 80GB HBM3"
TRAIN = "train_h100_2gpu_nccl.sqlite"
TINY = "tiny_2kernels.sqlite"
#: A name with spaces, both quote characters and non-ASCII letters.
ODD_NAME = "run 'ü' \"x\" — 東京.sqlite"
NO_KERNEL_TABLE = ("no CUPTI_ACTIVITY_KIND_KERNEL table: the export holds no CUDA kernels "
                   "(was the run profiled with --trace=cuda, and did it launch any kernel?)")
UNTRACED = "not traced or not used, so no row and not counted as idle"
OLD_SCHEMA = ("older export schema: no globalPid column in CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, "
              "CUPTI_ACTIVITY_KIND_MEMSET; each row's process was taken from its CUDA runtime launch "
              "(correlationId) or its stream")
#: Real DIAGNOSTIC_EVENT texts (as in the nsys binaries; the info-level "events produced" one is in
#: the real tiny export too).
CUPTI_DROPPED = "CUPTI dropped 1234 records. Some CUPTI events might be missing."
INCOMPLETE_DROPPED = ("Number of incomplete CUPTI events dropped: 12. Incomplete events appear when GPU timestamp "
                      "information have not been retrieved at the time the profiling session was stopped.")
EVENTS_PRODUCED = "Number of CUPTI events produced: \t43, CUPTI buffers: 50."
UNIFIED_MEMORY = ("CUDA device 0: Unified Memory cannot be traced on devices that don't support peer-to-peer "
                  "transfers.Please verify that SLI/NVLink is functioning properly.")


#: The profiler-overhead warning of GPU 0 of the real training export (see test_older_schema_export).
TRAIN_FLUSH = ("profiler overhead covers 1 device gap, 2.434 ms of idle in the window (OVERHEAD_CUPTI_BUFFER_FLUSH): "
               "Nsight Systems' own work, not the application's idle")


NUMBER_COLUMNS = ("pid", "window_ns", "busy_ns", "idle_ns", "kernel_count")


def _steady(w: ExportWriter, pid: int, device: int = 0, n: int = 5) -> None:
    """``n`` 6 ms kernels every 10 ms on stream 7: W = 46 ms, 16 ms idle in four 4 ms gaps."""
    for i in range(n):
        w.kernel(pid=pid, device=device, stream=7, start=i * 10 * MS, end=i * 10 * MS + 6 * MS, name="gemm")


def _older_schema_copy(src, dst) -> None:
    """A copy of a real export in an older schema: meta table EXPORT_META_DATA, no globalPid
    column in the GPU-activity tables."""
    shutil.copyfile(src, dst)
    con = sqlite3.connect(dst)
    try:
        for table in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"):
            con.execute(f"ALTER TABLE {table} DROP COLUMN globalPid")
        con.execute("ALTER TABLE META_DATA_EXPORT RENAME TO EXPORT_META_DATA")
        con.commit()
    finally:
        con.close()


def make_corpus(folder, profiles) -> dict:
    """Write every bad input into ``folder``; returns name -> path (str)."""
    folder.mkdir(parents=True, exist_ok=True)
    p = {}

    def path(name):
        p[name] = str(folder / name)
        return p[name]

    open(path("empty.sqlite"), "wb").close()
    real = (profiles / TRAIN).read_bytes()
    with open(path("truncated.sqlite"), "wb") as fh:
        fh.write(real[: len(real) // 2])
    con = sqlite3.connect(path("not_nsight.sqlite"))
    con.execute("CREATE TABLE measurements (t INTEGER, value REAL)")
    con.execute("INSERT INTO measurements VALUES (1, 2.5)")
    con.commit()
    con.close()

    w = ExportWriter(path("no_kernel_table.sqlite"))  # CUDA API calls and NVTX, but no kernel ever ran
    w.runtime(pid=10, tid=11, start=0, end=5 * MS, name="cudaMalloc_v3020")
    w.nvtx(pid=10, tid=11, start=0, end=9 * MS, text="setup")
    w.close()

    w = ExportWriter(path("zero_kernel_rows.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="gemm")
    w.close()
    con = sqlite3.connect(p["zero_kernel_rows.sqlite"])
    con.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()

    # TARGET_INFO_GPU lists 4 GPUs of the node; only the processes on GPUs 0 and 2 ran kernels.
    w = ExportWriter(path("some_gpus.sqlite"))
    for gpu in range(4):
        w.gpu(gpu, H100, uuid=f"node-gpu-{gpu}", bus=f"0000:{0x18 + gpu:02x}:00.0")
        w.cuda_device(gpu, 0, 100 + gpu)
    _steady(w, pid=100)
    _steady(w, pid=102)
    w.close()
    # The same without TARGET_INFO_CUDA_DEVICE: the GPUs are not mapped to processes.
    w = ExportWriter(path("some_gpus_unmapped.sqlite"))
    for gpu in range(4):
        w.gpu(gpu, H100, uuid=f"node-gpu-{gpu}")
    _steady(w, pid=100)
    _steady(w, pid=102)
    w.close()

    w = ExportWriter(path("bad_kernel_rows.sqlite"))
    _steady(w, pid=10)
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=20 * MS, name="end_before_start")
    w.kernel(pid=10, device=0, stream=7, start=0, end=0, name="no_timestamps")
    w.kernel(pid=10, device=0, stream=7, start=0, end=0, name="no_timestamps")
    w.close()
    w = ExportWriter(path("only_bad_kernel_rows.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=20 * MS, name="end_before_start")
    w.kernel(pid=10, device=0, stream=7, start=0, end=0, name="no_timestamps")
    w.close()

    w = ExportWriter(path("lost_events.sqlite"))
    _steady(w, pid=10)
    w.diagnostic(1_000, CUPTI_DROPPED, severity=2, pid=10)
    w.diagnostic(2_000, INCOMPLETE_DROPPED, severity=1, pid=10)  # info level, still a loss
    w.diagnostic(3_000, EVENTS_PRODUCED, severity=1, pid=10)     # info, no loss: not a warning
    w.close()

    _older_schema_copy(profiles / TRAIN, path("older_schema.sqlite"))

    with open(path("corrupt.nsys-rep"), "wb") as fh:
        fh.write(random.Random(20260429).randbytes(64 * 1024))  # seeded: nsys's complaint is reproducible

    shutil.copyfile(profiles / TINY, path(ODD_NAME))
    return p


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, profiles):
    return make_corpus(tmp_path_factory.mktemp("corpus") / "bad inputs", profiles)


@pytest.fixture(scope="module")
def corpus_run(corpus, profiles, nsys, tmp_path_factory):  # noqa: F811 (nsys: the imported fixture)
    """``gpu-idle run`` over the corpus folder, some of its files named again (same file twice,
    three spellings) and the real export the older-schema copy was made from."""
    out = tmp_path_factory.mktemp("corpus_out")
    folder = os.path.dirname(corpus["empty.sqlite"])
    again = corpus["some_gpus.sqlite"]
    spelled = os.path.join(folder, "..", os.path.basename(folder), ".", "some_gpus.sqlite")
    proc = run_cli("run", folder, again, spelled, corpus[ODD_NAME], str(profiles / TRAIN), "--out", str(out),
                   check=False, env={"GPU_IDLE_NSYS": str(nsys)})
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    return proc, fleet, out


def rows_of(fleet: pd.DataFrame, path: str) -> pd.DataFrame:
    """The rows of one report, as fleet.csv holds them (strings; numbers of ok rows made numbers again)."""
    rows = fleet[fleet["report"] == path].reset_index(drop=True)
    if (rows["status"] != "error").all():
        for col in NUMBER_COLUMNS:
            rows[col] = pd.to_numeric(rows[col])
    return rows


def error_of(fleet: pd.DataFrame, path: str) -> str:
    """The one error row of ``path``: asserts it has no GPU and status ``error``; returns the message."""
    rows = rows_of(fleet, path)
    assert len(rows) == 1, rows
    row = rows.iloc[0]
    assert (row["status"], row["gpu_key"], row["warnings"]) == ("error", "", ""), row.to_dict()
    return row["error"]


@pytest.mark.needs_nsys
def test_corpus_run_finishes_with_every_report_accounted_for(corpus, corpus_run, profiles):
    proc, fleet, out = corpus_run
    assert proc.returncode == 1  # some reports failed; the sweep still finished
    assert "Traceback" not in proc.stderr and "Compute Failed" not in proc.stderr
    assert f"gpu-idle: {len(corpus) + 1} report(s) found" in proc.stdout  # duplicates counted once
    assert set(fleet["report"]) == set(corpus.values()) | {str(profiles / TRAIN)}  # no report lost, none invented
    failed = {"empty.sqlite", "truncated.sqlite", "not_nsight.sqlite", "no_kernel_table.sqlite",
              "zero_kernel_rows.sqlite", "only_bad_kernel_rows.sqlite", "corrupt.nsys-rep"}
    assert set(fleet.loc[fleet["status"] == "error", "report"]) == {corpus[n] for n in failed}
    assert f"{len(failed)} report(s) failed" in proc.stdout
    jobs = pd.read_csv(out / "jobs.csv", keep_default_na=False)
    assert int(jobs["failed_reports"].sum()) == len(failed)


@pytest.mark.needs_nsys
def test_zero_byte_file(corpus, corpus_run):
    path = corpus["empty.sqlite"]
    assert error_of(corpus_run[1], path) == f"{path}: empty file (0 bytes), not an SQLite export"


@pytest.mark.needs_nsys
def test_truncated_sqlite(corpus, corpus_run, profiles):
    path = corpus["truncated.sqlite"]
    size = (profiles / TRAIN).stat().st_size
    pages = size // 4096
    assert error_of(corpus_run[1], path) == (
        f"{path}: truncated SQLite file ({size // 2:,} bytes, but its header says {size:,}: {pages:,} pages of "
        "4,096 bytes); the copy or download was cut short")


@pytest.mark.needs_nsys
def test_sqlite_that_is_not_an_nsight_export(corpus, corpus_run):
    path = corpus["not_nsight.sqlite"]
    assert error_of(corpus_run[1], path) == (
        f"{path}: SQLite file is not an Nsight Systems export "
        "(no CUPTI_ACTIVITY_KIND_KERNEL, StringIds or export metadata tables)")


@pytest.mark.needs_nsys
def test_export_without_kernel_table(corpus, corpus_run):
    path = corpus["no_kernel_table.sqlite"]
    assert error_of(corpus_run[1], path) == f"{path}: {NO_KERNEL_TABLE}"


@pytest.mark.needs_nsys
def test_kernel_table_with_zero_rows(corpus, corpus_run):
    path = corpus["zero_kernel_rows.sqlite"]
    assert error_of(corpus_run[1], path) == (
        f"{path}: CUPTI_ACTIVITY_KIND_KERNEL has zero rows: no kernel ran while profiling")


@pytest.mark.needs_nsys
def test_gpus_without_kernels_are_not_idle_gpus(corpus, corpus_run):
    """4 GPUs listed, kernels on 2: two rows (not four, no 100 %-idle rows), each saying so."""
    fleet = corpus_run[1]
    rows = rows_of(fleet, corpus["some_gpus.sqlite"])
    assert rows["gpu_key"].tolist() == ["GPU-node-gpu-0", "GPU-node-gpu-2"]
    assert rows["pid"].tolist() == [100, 102]
    assert rows["idle_ns"].tolist() == [16 * MS, 16 * MS] and rows["window_ns"].tolist() == [46 * MS, 46 * MS]
    assert set(rows["status"]) == {"ok"} and set(rows["error"]) == {""}
    assert set(rows["warnings"]) == {
        f"2 of 4 GPUs listed in TARGET_INFO_GPU ran no kernel in this export "
        f"(GPU-node-gpu-1, GPU-node-gpu-3): {UNTRACED}"}
    unmapped = rows_of(fleet, corpus["some_gpus_unmapped.sqlite"])
    assert unmapped["gpu_key"].tolist() == ["pid100/dev0", "pid102/dev0"]
    assert set(unmapped["status"]) == {"ok"} and set(unmapped["error"]) == {""}
    assert set(unmapped["warnings"]) == {
        f"2 of 4 GPUs listed in TARGET_INFO_GPU ran no kernel in this export (kernels identify 2): {UNTRACED}"}


@pytest.mark.needs_nsys
def test_kernels_with_end_before_start_or_no_timestamps(corpus, corpus_run):
    fleet = corpus_run[1]
    rows = rows_of(fleet, corpus["bad_kernel_rows.sqlite"])
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["status"], row["error"]) == ("partial", "")
    assert without_model_warning(row["warnings"]) == ("dropped 3 kernel rows with end < start or no timestamps "
                               "(start = end = 0 or NULL); 5 of 8 kept")
    # the dropped rows take no part: the numbers are those of the five good kernels
    assert (row["kernel_count"], row["window_ns"], row["busy_ns"], row["idle_ns"]) == (5, 46 * MS, 30 * MS, 16 * MS)
    path = corpus["only_bad_kernel_rows.sqlite"]
    assert error_of(fleet, path) == (
        f"{path}: all 2 rows of CUPTI_ACTIVITY_KIND_KERNEL have end < start or no timestamps "
        "(start = end = 0 or NULL): no usable kernel")


@pytest.mark.needs_nsys
def test_diagnostic_events_reporting_lost_events(corpus, corpus_run):
    rows = rows_of(corpus_run[1], corpus["lost_events.sqlite"])
    assert len(rows) == 1
    row = rows.iloc[0]
    assert (row["status"], row["error"]) == ("partial", "")
    assert without_model_warning(row["warnings"]) == (
        f"DIAGNOSTIC_EVENT: {CUPTI_DROPPED}; DIAGNOSTIC_EVENT: {INCOMPLETE_DROPPED}")
    assert row["idle_ns"] == 16 * MS


def test_lost_event_texts():
    """Real Nsight Systems diagnostics that mean lost data, and some that do not."""
    lost = [CUPTI_DROPPED, INCOMPLETE_DROPPED,
            "Couldn't allocate CUPTI buffers 3 times.Some CUPTI events might be missing.",
            "Some events (\t42) were lost. Certain charts (including CPU utilization) on the timeline may display "
            "incorrect data. Try to decrease sampling rate and start a new profiling session.",
            "Reading events from qdstrm: cpu : Lost events = 7"]
    fine = [EVENTS_PRODUCED, UNIFIED_MEMORY, "Profiling has stopped.",
            "CUPTI dropped 0 records.", "Some events (0) were lost.", "Reading events from qdstrm: cpu : Lost events = 0"]
    assert [reports_lost_events(t) for t in lost] == [True] * len(lost)
    assert [reports_lost_events(t) for t in fine] == [False] * len(fine)
    # A row's status comes from its warnings' codes: lost events and dropped rows make it partial.
    assert [(w.code, w.text) for w in diagnostic_warnings([CUPTI_DROPPED, UNIFIED_MEMORY])] == [
        (WarningCode.LOST_EVENTS, f"DIAGNOSTIC_EVENT: {CUPTI_DROPPED}"),
        (WarningCode.DIAGNOSTIC, f"DIAGNOSTIC_EVENT: {UNIFIED_MEMORY}")]
    assert row_status(diagnostic_warnings([CUPTI_DROPPED])) == "partial"
    assert row_status(diagnostic_warnings([UNIFIED_MEMORY])) == "ok"
    assert row_status([RowWarning(WarningCode.DROPPED_KERNEL_ROWS, "any wording")]) == "partial"
    # loader notes that are not data loss leave the row ok, whatever words they use
    assert row_status([RowWarning(WarningCode.GPUS_WITHOUT_KERNELS, f"2 of 4 GPUs ... (a, b): {UNTRACED}"),
                       RowWarning(WarningCode.INFERRED_PROCESSES, OLD_SCHEMA + "; 3 rows dropped or lost"),
                       RowWarning(WarningCode.MODEL_NOT_ON_RATE_CARD, "events were lost")]) == "ok"


@pytest.mark.needs_nsys
def test_older_schema_export(corpus, corpus_run, profiles):
    """EXPORT_META_DATA and no globalPid: processes come from the CUDA runtime launches, and
    every number equals the analysis of the original export."""
    fleet = corpus_run[1]
    old = rows_of(fleet, corpus["older_schema.sqlite"])
    new = rows_of(fleet, str(profiles / TRAIN))
    assert old["gpu_key"].tolist() == ["pid144/dev0", "pid145/dev1"] == new["gpu_key"].tolist()
    assert old["pid"].tolist() == [144, 145] and old["pids"].tolist() == ["144", "145"]
    assert set(old["status"]) == {"ok"} and set(old["error"]) == {""}
    # GPU 0's device gap [60.362816, 60.365249) s is 62 % covered by pid 144's CUPTI buffer flushes
    # (PROFILER_OVERHEAD, 1,507,495 of 2,433,526 ns): Nsight Systems' own work, a caveat (still ok)
    assert [without_model_warning(w) for w in old["warnings"]] == [f"{OLD_SCHEMA}; {TRAIN_FLUSH}", OLD_SCHEMA]
    assert [without_model_warning(w) for w in new["warnings"]] == [TRAIN_FLUSH, ""]
    # their codes, each once in order (warning_codes): the loader's note, the flush caveat, the unnamed model
    assert old["warning_codes"].tolist() == ["inferred-processes,profiler-overhead,gpu-model-unresolved",
                                             "inferred-processes,gpu-model-unresolved"]
    assert new["warning_codes"].tolist() == ["profiler-overhead,gpu-model-unresolved", "gpu-model-unresolved"]
    # capture_id too: the loader's finding (inferred processes) is part of it, so both are analysed
    same = [c for c in fleet.columns if c not in ("report", "job", "warnings", "warning_codes", "capture_id")]
    pd.testing.assert_frame_equal(old[same], new[same])
    # the per-GPU rosters too: the gaps are explained by the same CUDA API calls (found through the pids)
    docs = {}
    for doc_path in (corpus_run[2] / "gpus").iterdir():
        doc = json.loads(doc_path.read_text(encoding="utf-8"))
        docs[(doc["report"], doc["gpu_key"])] = doc
    for key in old["gpu_key"]:
        old_doc, new_doc = docs[(corpus["older_schema.sqlite"], key)], docs[(str(profiles / TRAIN), key)]
        assert old_doc["roster"] == new_doc["roster"] and old_doc["device_roster"] == new_doc["device_roster"]
        assert any(gap["attribution"] for gap in old_doc["roster"]), "no CUDA API call attributed"
    report = load_report(corpus["older_schema.sqlite"])
    assert report.meta["EXPORT_PRODUCT_NAME"] == "NVIDIA Nsight Systems"  # read from EXPORT_META_DATA


def test_older_schema_processes_sharing_a_stream_triple(tmp_path):
    """No globalPid, two processes whose kernels run on the same (device 0, context 1, stream 7)
    with the same correlation ids (ranks in lockstep): each kernel belongs to the process whose
    launch preceded it."""
    path = str(tmp_path / "lockstep.sqlite")
    w = ExportWriter(path, meta_table="EXPORT_META_DATA")
    for k in range(3):
        corr = 1 + k
        for pid, offset in ((100, 0), (200, 3 * MS)):
            t = k * 20 * MS + offset
            w.runtime(pid=pid, tid=pid + 1, start=t, end=t + MS, name="cudaLaunchKernel_v7000", correlation=corr)
            w.kernel(pid=pid, device=0, stream=7, start=t + 2 * MS, end=t + 10 * MS, name=f"k{pid}", correlation=corr)
    w.close()
    con = sqlite3.connect(path)
    con.execute("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN globalPid")
    con.commit()
    con.close()
    report = load_report(path)
    by_pid = report.kernels.groupby("pid")["name"].agg(set).to_dict()
    assert by_pid == {100: {"k100"}, 200: {"k200"}}
    assert report.warnings == [RowWarning(
        WarningCode.INFERRED_PROCESSES,
        "older export schema: no globalPid column in CUPTI_ACTIVITY_KIND_KERNEL; each row's process was taken "
        "from its CUDA runtime launch (correlationId) or its stream")]


@pytest.mark.needs_nsys
def test_corrupt_nsys_rep(corpus, corpus_run):
    path = corpus["corrupt.nsys-rep"]
    assert error_of(corpus_run[1], path) == (
        f"{path}: nsys export failed (exit 1; corrupt or truncated report?): "
        "Exportation error: Version tag is not found in the stream.")


@pytest.mark.needs_nsys
def test_file_name_with_spaces_quotes_and_non_ascii(corpus, corpus_run, profiles):
    fleet, out = corpus_run[1], corpus_run[2]
    path = corpus[ODD_NAME]
    rows = rows_of(fleet, path)
    assert len(rows) == 1
    row = rows.iloc[0]
    assert row["report"] == path and os.path.basename(row["report"]) == ODD_NAME  # the exact name
    assert (row["status"], row["error"], row["warnings"]) == ("ok", "", f"DIAGNOSTIC_EVENT: {UNIFIED_MEMORY}")
    assert row["job"] == ODD_NAME[: -len(".sqlite")]
    assert (row["gpu_key"], row["kernel_count"]) == ("GPU-554a6988-03dd-6206-3dd1-f43fb60a3ed0", 2)
    parquet = pd.read_parquet(out / "fleet.parquet")
    assert path in set(parquet["report"])
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in (out / "gpus").iterdir()]
    assert [d["report"] for d in docs if d["report"] == path] == [path]


@pytest.mark.needs_nsys
def test_same_file_named_twice_is_analysed_once(corpus, corpus_run):
    """some_gpus.sqlite came in three times (in its folder, by name, and as DIR/../DIR/./NAME)."""
    rows = rows_of(corpus_run[1], corpus["some_gpus.sqlite"])
    assert rows["gpu_key"].tolist() == ["GPU-node-gpu-0", "GPU-node-gpu-2"]
    assert not corpus_run[1]["report"].str.contains(r"/\.\./|/\./", regex=True).any()


def test_symlink_to_a_listed_file_is_analysed_once(tmp_path, profiles):
    from pipeline.inputs.discover import discover

    real = tmp_path / "tiny.sqlite"
    real.write_bytes((profiles / "tiny_2kernels.sqlite").read_bytes())
    (tmp_path / "link.sqlite").symlink_to(real)
    paths, problems = discover([str(real), str(tmp_path / "link.sqlite")])
    assert (paths, problems) == ([str(real)], [])


def test_real_paths_resolve_each_folder_once_as_realpath_would(tmp_path, monkeypatch):
    """Discovery tells the same file named twice apart by its real path, each folder's resolved once
    (``_RealPaths``): every path here (a symlinked folder, a symlinked file, a broken link, a link to a link, a
    relative name, ``..``, a missing file) gets exactly ``os.path.realpath``'s answer, and a folder of 3 plain
    files is resolved once, not 3 times."""
    from pipeline.inputs import discover as disc

    real_dir = tmp_path / "real"
    real_dir.mkdir()
    for name in ("a.sqlite", "b.sqlite", "c.sqlite"):
        (real_dir / name).write_bytes(b"x")
    (tmp_path / "via").symlink_to(real_dir)
    (real_dir / "link.sqlite").symlink_to(tmp_path / "via" / "a.sqlite")
    (real_dir / "link2.sqlite").symlink_to(real_dir / "link.sqlite")
    (real_dir / "broken.sqlite").symlink_to(tmp_path / "nowhere.sqlite")
    monkeypatch.chdir(real_dir)
    paths = [str(tmp_path / "via" / n) for n in ("a.sqlite", "b.sqlite", "link.sqlite", "link2.sqlite",
                                                 "broken.sqlite", "missing.sqlite")]
    paths += ["c.sqlite", str(real_dir / "sub" / ".."), str(real_dir / "a.sqlite"), "./b.sqlite", str(tmp_path) + "/"]
    real = disc._RealPaths()
    assert [real(p) for p in paths] == [os.path.realpath(p) for p in paths]
    resolved = []
    monkeypatch.setattr(disc.os.path, "realpath", lambda p: resolved.append(p) or os.path.abspath(p))
    once = disc._RealPaths()
    for name in ("a.sqlite", "b.sqlite", "c.sqlite"):
        once(str(real_dir / name))
    assert resolved == [str(real_dir)]
