"""The fleet schema (issue 25 point 1; pipeline/schema.py): every column declared once, every output
column declared, a row key the schema does not declare refused, older tables read through one path, and
docs/outputs.md's column reference generated from it."""
from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import REPO, run_cli, vouch
from helpers.exports import one_h100

from pipeline import schema


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real ``gpu-idle run`` over two exports (one of them with no kernel: an error row) and the
    report's CSV of it."""
    root = tmp_path_factory.mktemp("schema")
    folder = root / "in"
    folder.mkdir()
    one_h100(folder / "one.sqlite")
    (folder / "broken.sqlite").write_bytes(b"not an export")
    out = root / "out"
    run_cli("run", str(folder), "--out", str(out), "--window", "span", "--no-cache", check=False)
    run_cli("report", str(out), "--format", "csv", "--out", str(out / "report.csv"))
    return out


def test_every_output_column_is_in_the_schema(run):
    """fleet.parquet and fleet.csv hold exactly the schema's fleet columns in order; jobs.csv and
    clusters.csv the key and :data:`schema.ROLLUP`; the report's CSV its declared headers; every header of
    every one of them names a declared column."""
    parquet = pq.read_table(run / "fleet.parquet")
    assert parquet.schema.names == schema.FLEET_COLUMNS
    assert all(parquet.schema.field(c).type == pa.int64() for c in schema.INT_COLUMNS)
    assert all(parquet.schema.field(c).type == pa.bool_() for c in schema.BOOL_COLUMNS)
    headers = {"fleet.csv": list(pd.read_csv(run / "fleet.csv").columns),
               "jobs.csv": list(pd.read_csv(run / "jobs.csv").columns),
               "clusters.csv": list(pd.read_csv(run / "clusters.csv").columns),
               "report.csv": list(pd.read_csv(run / "report.csv").columns)}
    assert headers["fleet.csv"] == schema.FLEET_COLUMNS
    assert headers["jobs.csv"] == ["cluster", "job", *schema.ROLLUP_COLUMNS]
    assert headers["clusters.csv"] == ["cluster", *schema.ROLLUP_COLUMNS]
    assert headers["report.csv"] == schema.shown("report-csv")
    for name, columns in headers.items():
        for c in columns:
            schema.source_name(c)   # raises KeyError for an undeclared column
    with pytest.raises(KeyError, match="'window_us'"):
        schema.source_name("window_us")


def test_a_row_key_not_in_the_schema_is_an_error():
    """build_fleet refused to drop a key silently: it raises naming the key (i25-merge dropped it)."""
    from pipeline.fleet.reduce import build_fleet

    row = {"report": "r.sqlite", "gpu_key": "g", "cluster": "c", "job": "j", "status": "ok", "idle_pct": 1.0,
           "idle_ns_typo": 5}
    with pytest.raises(KeyError, match="'idle_ns_typo'"):
        build_fleet([row])


def test_the_frame_and_rollups_are_typed_from_the_schema():
    """Integer ns stay exact int64 beside a missing value; flags are bool; rollups' whole numbers int64."""
    from pipeline.fleet.reduce import build_fleet, rollup

    big = 1_750_000_000_123_456_789   # not a float64 value
    rows = [{"report": "a.sqlite", "gpu_key": "g0", "cluster": "c", "job": "j", "status": "ok",
             "window_start_ns": big, "window_ns": 10, "idle_ns": 4, "idle_pct": 40.0, "iterations": 3},
            {"report": "b.sqlite", "gpu_key": "g1", "cluster": "c", "job": "j", "status": "ok",
             "window_ns": 30, "idle_ns": 6, "idle_pct": 20.0, "iterations": 7}]
    fleet = build_fleet(rows)
    assert [str(fleet[c].dtype) for c in schema.INT_COLUMNS] == ["Int64"] * len(schema.INT_COLUMNS)
    assert [str(fleet[c].dtype) for c in schema.BOOL_COLUMNS] == ["bool"] * len(schema.BOOL_COLUMNS)
    assert fleet["window_start_ns"].tolist() == [big, pd.NA]
    jobs = rollup(fleet, list(schema.JOB_KEY))
    assert list(jobs.columns) == [*schema.JOB_KEY, *schema.ROLLUP_COLUMNS]
    assert all(str(jobs[c].dtype) == "int64" for c in schema.ROLLUP_INT_COLUMNS)
    row = jobs.iloc[0]
    assert (row.gpus, row.window_ns, row.idle_ns, row.min_iterations) == (2, 40, 10, 3)
    assert (row.idle_pct, row.min_idle_pct, row.max_idle_pct) == (25.0, 20.0, 40.0)   # 100 × 10 / 40


def test_an_older_table_is_read_through_one_path(tmp_path):
    """A table written before some columns existed gets each of them as the schema's missing value, in
    the column's dtype (``conform``); the rollup columns made of a column it lacks are empty."""
    from pipeline.fleet.reduce import rollup

    old = pd.DataFrame({"report": ["a.sqlite"], "gpu_key": ["g"], "cluster": ["c"], "job": ["j"], "status": ["ok"],
                        "window_ns": pd.array([10], dtype="Int64"), "idle_ns": pd.array([5], dtype="Int64"),
                        "idle_pct": [50.0]})
    full = schema.conform(old)
    assert list(full.columns[:len(old.columns)]) == list(old.columns) and set(full.columns) == set(schema.FLEET_COLUMNS)
    assert str(full["comm_exposed_ns"].dtype) == "Int64" and full["comm_exposed_ns"].isna().all()
    assert full["launch_bound"].tolist() == [False] and full["warnings"].tolist() == [None]
    assert schema.conform(full) is full
    # derived where the definition gives it from what the table has (schema.DERIVED)
    older = old.assign(idle_usd_per_month=[10.0], cat_profiler_ns=pd.array([1], dtype="Int64"),
                       cat_launch_ns=pd.array([2], dtype="Int64"))
    derived = schema.conform(older)
    assert derived["launch_bound"].tolist() == [True]
    assert derived["profiler_usd_per_month"].tolist() == [2.0] and derived["untraced_usd_per_month"].isna().all()
    jobs = rollup(old, ["cluster", "job"])
    assert jobs["comm_exposed_ns"].isna().all() and int(jobs["idle_ns"].iloc[0]) == 5


def test_the_outputs_lists_come_from_the_schema():
    from pipeline import cli
    from pipeline.report import html

    assert cli.SHOWN == schema.shown("printed") and cli.SHOWN[5] == "idle_ms"
    assert schema.shown("printed-wide")[7] == "window_ms"
    assert html.CSV_COLUMNS == schema.shown("report-csv")
    assert all(schema.column(n) for names in ([p.name for p in schema.PRINTED], [p.name for p in schema.PRINTED_WIDE],
                                              schema.REPORT_CSV, schema.MARKDOWN, schema.REPORT) for n in names)


def test_the_column_reference_is_generated_from_the_schema():
    """docs/outputs.md between the two marker comments is what the schema generates
    (run ``python -m pipeline.schema`` after changing a column)."""
    text = (REPO / "docs" / "outputs.md").read_text(encoding="utf-8")
    assert schema.with_column_reference(text) == text, "docs/outputs.md is stale: run python -m pipeline.schema"
    reference = schema.column_reference()
    assert all(f"| `{c}` |" in reference for c in schema.FLEET_COLUMNS + schema.ROLLUP_COLUMNS)


@pytest.mark.slow
def test_a_report_of_an_older_folder_leaves_its_missing_columns_empty(run, tmp_path):
    """A run folder whose fleet.parquet was written before the comm and launch columns: the report's CSV,
    Markdown and HTML still render (real ``gpu-idle report`` processes), the CSV's missing columns empty."""
    import shutil

    folder = tmp_path / "older"
    shutil.copytree(run, folder)
    table = pq.read_table(folder / "fleet.parquet")
    gone = [c for c in table.schema.names if c.startswith("comm_") or c in ("launch_bound", "device_gap_count")]
    pq.write_table(table.drop_columns(gone), folder / "fleet.parquet")
    vouch(folder)   # as the older run wrote it: its manifest vouches for it
    for fmt in ("csv", "md", "html"):
        run_cli("report", str(folder), "--format", fmt, "--out", str(tmp_path / f"r.{fmt}"))
    csv = pd.read_csv(tmp_path / "r.csv")
    ok = csv[csv.status != "error"]
    assert ok["comm_exposed_ms"].isna().all() and ok["comm_exposed_usd_per_month"].isna().all()
    assert ok["idle_ms"].tolist() == [10.0]
