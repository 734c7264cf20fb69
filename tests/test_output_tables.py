"""Every output table declares its columns (issue 46 point 5c; pipeline/schema.py ``TABLES``): fix_first.csv and
fix_first.json, the sweep's history, the medical records' gap table and compare.csv, each written file read back
against its declaration; docs/outputs.md's table of each is generated from it (tests/test_schema.py)."""
from __future__ import annotations

import csv
import json

import pyarrow.parquet as pq
import pytest
from conftest import run_cli
from helpers.exports import one_h100

from pipeline import schema
NIGHT = "2026-12-01"


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One export (one H100, a 10 ms gap between two kernels) run into a folder, compared with itself and swept
    for one night (one report: all in this process)."""
    root = tmp_path_factory.mktemp("tables")
    folder = root / "in"
    folder.mkdir()
    one_h100(folder / "one.sqlite")
    run_cli("run", str(folder), "--out", str(root / "out"), "--window", "span", "--no-cache")
    run_cli("compare", str(root / "out"), str(root / "out"), "--out", str(root / "cmp"), check=False)
    cfg = root / "nightly.yaml"
    cfg.write_text(f"sweep: {{inputs: ['{folder}'], state_dir: '{root / 'state'}'}}\nanalysis: {{window: span}}\n")
    run_cli("sweep", "--config", str(cfg), "--night", NIGHT)
    return root


def _header(path) -> list[str]:
    with open(path, newline="", encoding="utf-8") as fh:
        return next(csv.reader(fh))


def test_fix_first_csv_and_json_hold_the_declared_columns(written):
    assert _header(written / "out" / "fix_first.csv") == schema.FIX_FIRST.columns
    entries = json.loads((written / "out" / "fix_first.json").read_text(encoding="utf-8"))
    assert entries and all(list(e) == schema.FIX_FIRST.columns for e in entries)


def test_the_history_holds_the_declared_columns(written):
    part = written / "state" / "history" / f"run_date={NIGHT}" / "fleet.parquet"
    assert pq.read_schema(part).names == schema.HISTORY.columns == schema.FLEET_COLUMNS


def test_a_records_gap_table_holds_the_declared_columns(written):
    (record,) = (written / "out" / "records").glob("*.md")
    lines = record.read_text(encoding="utf-8").splitlines()
    at = lines.index("| " + " | ".join(schema.RECORD_GAPS.columns) + " |")
    assert lines[at + 1] == "|---" * len(schema.RECORD_GAPS.columns) + "|"
    cells = lines[at + 2].strip("|").split("|")   # the one 10 ms gap
    assert len(cells) == len(schema.RECORD_GAPS.columns) and cells[4].strip() == "10.000 ms"


def test_compare_csv_holds_the_declared_columns(written):
    assert _header(written / "cmp" / "compare.csv") == schema.COMPARE_CSV.columns


def test_each_table_names_each_column_once():
    for table in schema.TABLES:
        assert len(table.columns) == len(set(table.columns)), table.name
    assert len(schema.TABLES) == len({t.name for t in schema.TABLES})
