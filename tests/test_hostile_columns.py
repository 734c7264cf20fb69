"""Values of the wrong SQLite type in an Nsight Systems export (issue 23): SQLite keeps every value's
own type whatever a column declares, so a damaged or edited export can hold a BLOB where the export
writes text, or REAL/TEXT/out-of-int64 values where it writes integers (times in ns, ids).

* A BLOB text (a kernel name in StringIds, the GPU's name) is read as the text its bytes spell (UTF-8,
  replacement characters for the rest, cut at the text limit like any text): never ``b'...'`` or a size.
* A time or id column holding anything but integers makes the report an error row naming the table,
  the column, the value and the cause ("not an integer"); before, a REAL was truncated silently (a
  figure computed from a time that is not the export's) and TEXT gave ``unexpected KeyError``.

Each export is a copy of ``tiny_2kernels.sqlite`` (2 kernels on 1 GPU) changed with sqlite3.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from conftest import PROFILES, run_cli

TINY = PROFILES / "tiny_2kernels.sqlite"
KERNELS = "CUPTI_ACTIVITY_KIND_KERNEL"
#: The text the loader keeps of a longer one (pipeline.load.limits.MAX_TEXT_CHARS), stated independently.
TEXT_CAP = 4096
ACTION = ("not an integer: Nsight Systems writes integers there (ns or ids), so the export was damaged or "
          "edited; export the report again (nsys export --type sqlite) from its .nsys-rep")

pytestmark = pytest.mark.skipif(not TINY.exists(), reason="needs tiny_2kernels.sqlite in GPU_IDLE_PROFILES")


def altered(tmp_path: Path, name: str, *sql: str) -> str:
    """A copy of the tiny export in ``tmp_path`` with ``sql`` run on it (never the shared file)."""
    path = tmp_path / name
    shutil.copyfile(TINY, path)
    con = sqlite3.connect(path)
    for statement in sql:
        con.execute(statement)
    con.commit()
    con.close()
    return str(path)


def gpu_page_json(out: Path) -> str:
    """Every per-GPU file of a run, as one text."""
    return "".join(p.read_text(encoding="utf-8") for p in sorted((out / "gpus").rglob("*")) if p.is_file())


def kernel_names(out: Path) -> set:
    """The kernel names the per-GPU files name as the kernel before a gap."""
    names = set()
    for p in (out / "gpus").rglob("*.json"):
        def walk(v):
            if isinstance(v, dict):
                for k, x in v.items():
                    if k == "kernel_before":
                        names.add(x)
                    walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
        walk(json.loads(p.read_text(encoding="utf-8")))
    return names


# -- BLOB where the export writes text --------------------------------------------------------------

def test_blob_kernel_name_and_gpu_name_are_read_as_their_text(tmp_path):
    """StringIds.value of the first kernel's short name (id 139) and TARGET_INFO_GPU.name as BLOBs: the
    outputs name ``vectorized_elementwise_kernel`` and ``NVIDIA GeForce RTX 3080`` exactly as with TEXT.
    Before: ``b'vectorized_elementwise_kernel'`` and ``b'NVIDIA GeForce RTX 3080'``."""
    path = altered(tmp_path, "blob.sqlite", "UPDATE StringIds SET value = CAST(value AS BLOB) WHERE id = 139",
                   "UPDATE TARGET_INFO_GPU SET name = CAST(name AS BLOB)")
    out = tmp_path / "out"
    run_cli("run", path, "--out", str(out))
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert fleet["status"].tolist() == ["ok"]
    assert fleet["gpu_model"].tolist() == ["NVIDIA GeForce RTX 3080"]
    assert "vectorized_elementwise_kernel" in kernel_names(out)
    assert "b'" not in gpu_page_json(out) and "b'" not in (out / "fleet.csv").read_text()


def test_blob_text_that_is_not_utf8_or_too_long_is_decoded_and_cut(tmp_path):
    """A BLOB name with a byte that is no UTF-8 (0xFF) reads with a replacement character; a 6,000-byte
    BLOB name is cut at the text limit with its full length said, as a TEXT one is."""
    bad = altered(tmp_path, "bad.sqlite", "UPDATE StringIds SET value = X'6B65726E656CFF4E' WHERE id = 139")
    out = tmp_path / "bad"
    run_cli("run", bad, "--out", str(out))
    assert "kernel\ufffdN" in kernel_names(out)
    long = altered(tmp_path, "long.sqlite",
                   f"UPDATE StringIds SET value = CAST('{'ab' * 3000}' AS BLOB) WHERE id = 139")
    out = tmp_path / "long"
    run_cli("run", long, "--out", str(out))
    expected = ("ab" * 3000)[:TEXT_CAP] + "\u2026 (6000 characters, cut at 4096)"
    assert expected in kernel_names(out)


# -- time and id columns that hold no integer ---------------------------------------------------------

CASES = {
    # name: (UPDATE of the kernel table, the column named, the value shown, how it is stored)
    "start_real": ("start = start + 0.5 WHERE rowid = 1", "start", "1517727052.5", "REAL"),
    "end_real_second_row": ('"end" = "end" + 0.25 WHERE rowid = 2', "end", "1535981719.25", "REAL"),
    "end_1e30": ('"end" = 1e30 WHERE rowid = 1', "end", "1e+30", "REAL"),
    "stream_beyond_int64": ("streamId = 18446744073709551616 WHERE rowid = 2", "streamId",
                            "1.8446744073709552e+19", "REAL"),
    "device_real": ("deviceId = 0.5 WHERE rowid = 1", "deviceId", "0.5", "REAL"),
    "device_text_second_row": ("deviceId = 'zero' WHERE rowid = 2", "deviceId", "'zero'", "TEXT"),
    "stream_text": ("streamId = 'x7' WHERE rowid = 1", "streamId", "'x7'", "TEXT"),
    "correlation_real": ("correlationId = 132.7 WHERE rowid = 1", "correlationId", "132.7", "REAL"),
    "start_text": ("start = 'abc' WHERE rowid = 1", "start", "'abc'", "TEXT"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_time_or_id_that_is_not_an_integer_is_the_reports_error_row(tmp_path, name):
    """The report is its error row naming the table, the column, the value and the cause; exit 1, no
    traceback. Before: REAL values truncated silently (exit 0, a window computed from a time that is not
    the export's: ``end`` 1e30 gave $0.00), TEXT ones ``unexpected KeyError: 'start'``."""
    update, column, value, stored = CASES[name]
    path = altered(tmp_path, f"{name}.sqlite", f"UPDATE {KERNELS} SET {update}")
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", str(out), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    error = f"{path}: {KERNELS}.{column} holds {value} (stored as {stored}), {ACTION}"
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    assert fleet[["status", "error"]].values.tolist() == [["error", error]]
    assert f"ERROR {error}" in proc.stdout


OTHER_TABLES = {
    # name: (table, SET ... WHERE, the column named, the value shown, how it is stored)
    "runtime_tid_text": ("CUPTI_ACTIVITY_KIND_RUNTIME", "globalTid = 'x' WHERE rowid = 3", "globalTid", "'x'", "TEXT"),
    "memcpy_start_real": ("CUPTI_ACTIVITY_KIND_MEMCPY", "start = start + 0.5 WHERE rowid = 1", "start",
                          "1540178479.5", "REAL"),
    "memcpy_start_text": ("CUPTI_ACTIVITY_KIND_MEMCPY", "start = 'x' WHERE rowid = 1", "start", "'x'", "TEXT"),
    "overhead_end_text": ("CUPTI_ACTIVITY_KIND_OVERHEAD", '"end" = \'late\' WHERE rowid = 1', "end", "'late'", "TEXT"),
}

DEVICE_TABLES = {
    # name: (table, SET ... WHERE, the column named, the value shown, how it is stored). The tiny export's one
    # TARGET_INFO_GPU row (id 0, smCount 68, cuDevice 0) and TARGET_INFO_CUDA_DEVICE row (gpuId 0, cudaId 0,
    # pid 91186, numMultiprocessors 68).
    "gpu_sm_count_real": ("TARGET_INFO_GPU", "smCount = 68.5", "smCount", "68.5", "REAL"),
    "gpu_id_text": ("TARGET_INFO_GPU", "id = 'zero'", "id", "'zero'", "TEXT"),
    "gpu_cu_device_text": ("TARGET_INFO_GPU", "cuDevice = '0x'", "cuDevice", "'0x'", "TEXT"),
    "cuda_device_sms_text": ("TARGET_INFO_CUDA_DEVICE", "numMultiprocessors = 'x'", "numMultiprocessors", "'x'", "TEXT"),
    "cuda_device_gpu_id_1e30": ("TARGET_INFO_CUDA_DEVICE", "gpuId = 1e30", "gpuId", "1e+30", "REAL"),
    "cuda_device_pid_blob": ("TARGET_INFO_CUDA_DEVICE", "pid = CAST(pid AS BLOB)", "pid", "b'91186'", "BLOB"),
    "cuda_device_cuda_id_real": ("TARGET_INFO_CUDA_DEVICE", "cudaId = 0.25", "cudaId", "0.25", "REAL"),
}


@pytest.mark.parametrize("name", [*OTHER_TABLES, *DEVICE_TABLES])
def test_the_other_tables_times_and_ids_are_checked_alike(tmp_path, name):
    """The runtime, memcpy and overhead tables, and the device tables' ids and SM counts (TARGET_INFO_GPU:
    id, smCount, cuDevice; TARGET_INFO_CUDA_DEVICE: pid, cudaId, gpuId, numMultiprocessors) go through the
    same check, each named with its table. Before: the runtime's and overhead's TEXT were ``unexpected
    ValueError``/KeyError rows, the memcpy's REAL start was truncated silently (exit 0); a device table's
    REAL was cut toward zero or a huge id matched no GPU (exit 0, a number from a value that is not the
    export's), digits as a BLOB were taken as the integer, TEXT was ``unexpected ValueError``. (Digits as
    TEXT or an integral REAL in an INTEGER column are stored as integers by SQLite itself.)"""
    table, update, column, value, stored = {**OTHER_TABLES, **DEVICE_TABLES}[name]
    path = altered(tmp_path, f"{name}.sqlite", f"UPDATE {table} SET {update}")
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", str(out), check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    error = f"{path}: {table}.{column} holds {value} (stored as {stored}), {ACTION}"
    assert pd.read_csv(out / "fleet.csv", keep_default_na=False)["error"].tolist() == [error]


def test_stringids_blobs_leave_sqlite_as_text(tmp_path):
    """StringIds is read without scanning its rows for bytes in Python (``text_rows(cast=True)``): the
    CAST of :func:`~pipeline.load.limits.cut_sql` makes every BLOB value text inside SQLite, UTF-8 or
    not (replacement characters), long or not (cut with its full length). Every value is a ``str``,
    each as stated here by hand."""
    from pipeline.load import sqlite as load_sqlite
    from pipeline.load.columns import read_strings
    from pipeline.load.tables import Schema

    path = altered(tmp_path, "blobs.sqlite", "UPDATE StringIds SET value = CAST(value AS BLOB)",
                   "UPDATE StringIds SET value = X'6B65726E656CFF4E' WHERE id = 139",
                   f"UPDATE StringIds SET value = CAST('{'ab' * 3000}' AS BLOB) WHERE id = 140")
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    plain = dict(con.execute("SELECT id, CAST(value AS TEXT) FROM StringIds WHERE id NOT IN (139, 140)").fetchall())
    strings = read_strings(Schema(load_sqlite.connect_readonly(path), load_sqlite.readonly_uri(path)))
    assert {type(v) for v in strings.values()} == {str}
    assert strings[139] == "kernel\ufffdN"
    assert strings[140] == ("ab" * 3000)[:TEXT_CAP] + "\u2026 (6000 characters, cut at 4096)"
    assert {k: v for k, v in strings.items() if k not in (139, 140)} == plain and len(plain) > 100
