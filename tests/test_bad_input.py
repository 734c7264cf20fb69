"""Bad input: each problem is that report's error row with a clear cause; the sweep goes on."""
from __future__ import annotations

import json
import sqlite3

import pandas as pd

from conftest import run_cli


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
    proc = run_cli("run", str(empty), str(text), str(other), str(tmp_path / "missing.sqlite"),
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
    missing = str(tmp_path / "missing.sqlite")
    assert fleet.loc[missing, "error"] == f"{missing}: no such file or directory"
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
