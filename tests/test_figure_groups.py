"""Typed figure groups (issue 46 point 5b; pipeline/schema.py ``GROUPS``): each group is a frozen dataclass whose
fields are fleet columns (dtype and unit in each field's metadata); the schema's columns take their dtype and unit
from them, the analysis builds its price-free row of them (``measure_gpu``), and a group field no column declares,
or a column no group provides, is an error."""
from __future__ import annotations

import dataclasses

import pytest
from helpers.exports import one_h100

from pipeline import schema
from pipeline.analysis.analyse import measure_gpu
from pipeline.config import load_config
from pipeline.load.report import gpu_trace, load_report

MS = 1_000_000


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One H100 with two kernels 10 ms apart on one stream, 20 ms of W: its price-free row."""
    path = tmp_path_factory.mktemp("groups") / "one.sqlite"
    rep = load_report(one_h100(path, ((0, 5), (15, 20))))
    (key,) = rep.gpu_keys()
    return measure_gpu(gpu_trace(rep, key), load_config([], {"analysis": {"window": "span"}}), {"job": "j"}).row


def test_the_schema_columns_are_the_groups_fields():
    """Every fleet column is a field of exactly one group, with that field's dtype and unit, and back."""
    assert schema.contract_problems(schema.GROUPS, schema.FLEET_COLUMNS) == ([], [])
    provided = schema.contract(schema.GROUPS)
    assert {c.name: (c.dtype, c.unit) for c in schema.FLEET} == {n: v[:2] for n, v in provided.items()}
    assert provided["idle_ns"] == ("Int64", "ns", "Idle") and provided["collective_wait_ns"][2] == "Collectives"


def test_a_field_no_column_declares_or_a_column_no_group_provides_fails():
    @dataclasses.dataclass(frozen=True)
    class Extra(schema.Figures):
        new_ns: int = schema._f("Int64", "ns")

    assert schema.contract_problems(schema.GROUPS + (Extra,), schema.FLEET_COLUMNS) == (["new_ns"], [])
    assert schema.contract_problems(schema.GROUPS, [*schema.FLEET_COLUMNS, "orphan_ns"]) == ([], ["orphan_ns"])
    with pytest.raises(KeyError, match="'orphan_ns': no figure group provides it"):
        schema._c("orphan_ns", "a column no group provides")

    @dataclasses.dataclass(frozen=True)
    class Twice(schema.Figures):
        idle_ns: int = schema._f("Int64", "ns")

    with pytest.raises(ValueError, match="idle_ns is in figure groups Idle and Twice"):
        schema.contract(schema.GROUPS + (Twice,))
    with pytest.raises(ValueError, match="unknown"):
        schema._f("Int32", "ns")


def test_the_price_free_row_is_its_groups(measured):
    """measure_gpu's row holds exactly the analysed groups' fields (and what pricing needs later), never a price
    column nor one the reduce adds."""
    fields = {f.name for g in schema.ANALYSED_GROUPS for f in dataclasses.fields(g)}
    assert set(measured) == fields | set(schema.PRICE_INPUTS)
    later = {f.name for g in schema.GROUPS if g not in schema.ANALYSED_GROUPS for f in dataclasses.fields(g)}
    assert not later & set(measured) and "idle_usd_per_month" in later and "job_grouped_by" in later
    # the figures worked by hand: W 0..20 ms, busy 10 ms, one 10 ms gap on stream 7
    assert (measured["window_ns"], measured["busy_ns"], measured["idle_ns"], measured["idle_pct"]) == (
        20 * MS, 10 * MS, 10 * MS, 50.0)
    assert (measured["gap_count"], measured["gap_total_ns"], measured["amdahl_speedup"]) == (1, 10 * MS, 2.0)


def test_a_group_is_frozen_and_gives_its_columns():
    window = schema.Window(window_rule="span", untrimmed=True, window_start_ns=0, window_end_ns=10, window_ns=10,
                           iterations=0, iteration_mean_ns=None, iteration_cv=None, excluded_iterations="",
                           kept_iterations="", window_note="")
    assert list(window.columns())[:3] == ["window_rule", "untrimmed", "window_start_ns"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        window.window_ns = 11
    with pytest.raises(TypeError):
        schema.Window(window_rule="span")   # every column of the group is given
