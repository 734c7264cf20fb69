"""One place per definition (issue 25 point 2): the category order comes from the model, input
kinds from one registry, dollars from one pricing function, and re-pricing an older table uses the
run's own settings (docs/definitions.md#categories, docs/inputs.md, docs/definitions.md#cost)."""
from __future__ import annotations

import ast
import itertools
import pathlib

import numpy as np
import pytest

from pipeline import model
from pipeline.analysis import attribution, cost, fixfirst

REPO = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = REPO / "pipeline"


def _modules():
    """Every module of the package but model.py, with its syntax tree."""
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != PACKAGE / "model.py":
            yield path.relative_to(REPO), ast.parse(path.read_text(encoding="utf-8"))


def _strings(node) -> list[str]:
    return [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]


# ---------------------------------------------------------------------------------------------
# (a) the category order


def test_no_module_spells_the_category_names_as_a_sequence():
    """A tuple, list or set literal of three or more category names outside model.py is a second
    copy of the order (i25-merge: attribution's np.select, synth/workload.FLEET_GAP_CATEGORIES,
    synth/scaled's reference categories and its cat_* loop, 5 in all)."""
    names = set(model.CATEGORIES) | set(model.CAVEATS)
    found = [f"{path}:{node.lineno}: {_strings(node)}" for path, tree in _modules() for node in ast.walk(tree)
             if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and sum(s in names for s in _strings(node)) >= 3]
    assert found == []


def test_the_per_gap_order_is_the_models():
    """GAP_CATEGORIES is CATEGORIES without the per-GPU ``launch``, in the same order."""
    assert model.GAP_CATEGORIES == tuple(c for c in model.CATEGORIES if c != "launch")


@pytest.mark.parametrize("first", range(len(model.GAP_CATEGORIES)))
def test_attribution_picks_the_first_category_of_the_models_order(first):
    """Attribution's np.select follows model.GAP_CATEGORIES: with the conditions of category ``first``
    and of every later one true on the gap, the gap gets ``first``; with none true, the last (cpu)."""
    *ruled, fallback = model.GAP_CATEGORIES
    # gap k: every condition from ruled[k] on holds (k == len(ruled): none holds)
    n = len(ruled) + 1
    conditions = {c: np.arange(n) <= i for i, c in enumerate(ruled)}
    got = attribution.first_match(conditions, n)
    assert got.tolist() == [*ruled, fallback]
    assert got[min(first, n - 1)] == model.GAP_CATEGORIES[first]


def test_attribution_refuses_conditions_of_another_set_of_categories():
    *ruled, _ = model.GAP_CATEGORIES
    with pytest.raises(ValueError):
        attribution.first_match({c: np.zeros(1, bool) for c in ruled[:-1]}, 1)
    assert attribution.first_match({c: np.zeros(0, bool) for c in ruled}, 0).tolist() == []


# ---------------------------------------------------------------------------------------------
# (c) one pricing function


GRID = list(itertools.product([0, 1, 7, 499_999, 1_000_000, 123_456_789], [1, 1_000_000, 999_999_937],
                              [0.0, 0.37, 2.5, 4.0, 1300 / 192], [1.0, 500.0, 730.0, 744.0]))


def test_fix_first_prices_with_the_cost_function():
    """On a grid of (category ns, window ns, rate, hours), fix-first's recoverable dollars and speed-ups
    are the cost module's, rounded: one formula (docs/definitions.md#cost). On i25-merge fix-first had
    its own ``recoverable_usd`` and ``speedup``."""
    assert not hasattr(fixfirst, "recoverable_usd") and not hasattr(fixfirst, "speedup")
    for cat_ns, window_ns, rate, hours in GRID:
        if cat_ns > window_ns:
            continue
        got = fixfirst.gpu_columns({"data": cat_ns}, window_ns, 10, rate, hours, 5, 1)
        share = cat_ns / window_ns
        assert got["fix_data_usd_per_month"] == round(cost.idle_usd_per_month(share, rate, hours), 2)
        assert got["fix_data_speedup"] == round(cost.amdahl_speedup(share), 4)
        # worked out by hand: share × rate × hours
        assert got["fix_data_usd_per_month"] == round(float(share) * float(rate) * float(hours), 2)


def test_only_the_cost_module_multiplies_by_the_month():
    """No function of the package but cost.idle_usd_per_month multiplies by ``hours_per_month``."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
                text = ast.unparse(node)
                if "hours_per_month" in text and path.as_posix() != "pipeline/analysis/cost.py":
                    found.append(f"{path}:{node.lineno}: {text}")
    assert found == []


# ---------------------------------------------------------------------------------------------
# (d) re-pricing an older table uses the run's settings


def _fix_rows(md: str) -> dict:
    """``category -> ($ text, confidence text)`` of the Markdown report's fix-first table."""
    out = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].isdigit() and cells[1] in model.CATEGORIES:
            out[cells[1]] = (cells[2], cells[5])
    return out


def test_an_older_table_is_repriced_with_the_runs_settings(tmp_path, profiles):
    """A real run priced at 500 hours a month, confident from 1 stable iteration and a 1 µs window; its
    fleet.parquet then stripped of the fix-first columns, as a version before them wrote it.
    ``gpu-idle report --format md`` prices the fix-first list as the run did: Σ over GPUs of
    round(cat_c_ns / window_ns × rate × 500, 2), with the run's confidence thresholds. On i25-merge it
    priced at the default 730 hours and thresholds (5 iterations, 1 s): every entry low confidence."""
    import pandas as pd

    from tests.conftest import run_cli

    config = tmp_path / "run.yaml"
    config.write_text("cost:\n  hours_per_month: 500\nanalysis:\n  min_confidence_iterations: 1\n"
                      "  min_confidence_window_ns: 1000\n")
    out = tmp_path / "out"
    env = {"GPU_IDLE_CACHE": str(tmp_path / "columns")}
    run_cli("run", str(profiles / "tiny_2kernels.sqlite"), str(profiles / "train_h100_2gpu_nccl.sqlite"),
            "--config", str(config), "--out", str(out), env=env)
    written = pd.read_parquet(out / "fleet.parquet")
    run_cli("report", str(out), "--format", "md", "--out", str(tmp_path / "new.md"))
    fix_columns = [c for c in written.columns if c.startswith("fix_")] + ["low_confidence", "confidence_note",
                                                                           "implausible_speedup"]
    written.drop(columns=fix_columns).to_parquet(out / "fleet.parquet", index=False)
    run_cli("report", str(out), "--format", "md", "--out", str(tmp_path / "old.md"))
    new, old = _fix_rows((tmp_path / "new.md").read_text()), _fix_rows((tmp_path / "old.md").read_text())
    assert old == new and set(old) == {"launch", "cpu"}
    ok = written[written["status"] != "error"]
    for cat in old:
        want = sum(round(int(n) / int(w) * float(r) * 500.0, 2)
                   for n, w, r in zip(ok[f"cat_{cat}_ns"], ok["window_ns"], ok["rate_usd_per_hour"]))
        at_730 = sum(round(int(n) / int(w) * float(r) * 730.0, 2)
                     for n, w, r in zip(ok[f"cat_{cat}_ns"], ok["window_ns"], ok["rate_usd_per_hour"]))
        assert want > 0 and f"${at_730:,.2f}" != f"${want:,.2f}"
        assert old[cat][0] == f"${want:,.2f}"
    # launch rests on the two 14-iteration GPUs of ~0.24 s: confident under the run's thresholds;
    # cpu also on tiny_2kernels' GPU (0 stable iterations): low confidence under any
    assert ok.loc[ok["cat_launch_ns"] > 0, "iterations"].tolist() == [14, 14]
    assert old["launch"][1] == "ok" and old["cpu"][1].startswith("low confidence")
