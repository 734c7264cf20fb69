"""One place per definition (issue 25 point 2): the category order comes from the model, input
kinds from one registry, dollars from one pricing function, and re-pricing an older table uses the
run's own settings (docs/definitions.md#categories, docs/inputs.md, docs/definitions.md#cost)."""
from __future__ import annotations

import ast
import os
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
        got = fixfirst.gpu_columns({"data": cat_ns}, window_ns, 10, 5, 1)
        assert "fix_data_usd_per_month" not in got   # fix-first prices nothing: the fleet's pricing does
        usd = cost.share_usd([cat_ns], [window_ns], [rate], hours)[0]   # every dollar column's, vectorised
        share = cat_ns / window_ns
        assert usd == round(cost.idle_usd_per_month(share, rate, hours), 2)
        assert got["fix_data_speedup"] == round(cost.amdahl_speedup(share), 4)
        # worked out by hand: share × rate × hours
        assert usd == round(float(share) * float(rate) * float(hours), 2)


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


def _fix_rows(md: str) -> list:
    """``[(category, $ text, confidence text)]`` of the Markdown report's fix-first table, in rank order."""
    out = []
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and (cells[0].isdigit() or not cells[0]) and cells[1] in model.CATEGORIES:  # "": archived
            out.append((cells[1], cells[3], cells[6]))   # the idle's dollars (cells[2]: what a fix wins back)
    return out


@pytest.mark.slow
def test_an_older_table_is_repriced_with_the_runs_settings(tmp_path, profiles):
    """A real run priced at 500 hours a month, with its own confidence thresholds (a toy needs fewer than 1
    kernel or a W under 1 µs; medium from 1 stable iteration and a 1 µs window); its fleet.parquet then
    stripped of the fix-first and tier columns, as a version before them wrote it. ``gpu-idle report
    --format md`` prices the fix-first list as the run did: Σ over GPUs of round(cat_c_ns / window_ns ×
    rate × 500, 2), with the run's thresholds (tiny_2kernels is `low`, not the defaults' `toy`). On
    i25-merge it priced at the default 730 hours and thresholds."""
    import pandas as pd

    from tests.conftest import run_cli, vouch

    config = tmp_path / "run.yaml"
    config.write_text("cost:\n  hours_per_month: 500\nconfidence:\n  toy_min_kernels: 1\n  toy_max_window_ns: 1000\n"
                      "  medium_min_iterations: 1\n  medium_min_window_ns: 1000\n")
    out = tmp_path / "out"
    env = {"GPU_IDLE_CACHE": str(tmp_path / "columns")}
    run_cli("run", str(profiles / "tiny_2kernels.sqlite"), str(profiles / "train_h100_2gpu_nccl.sqlite"),
            "--config", str(config), "--out", str(out), env=env)
    written = pd.read_parquet(out / "fleet.parquet")
    run_cli("report", str(out), "--format", "md", "--out", str(tmp_path / "new.md"))
    fix_columns = [c for c in written.columns if c.startswith("fix_")] + [
        "confidence_tier", "low_confidence", "confidence_note", "implausible_speedup"]
    written.drop(columns=fix_columns).to_parquet(out / "fleet.parquet", index=False)
    vouch(out)   # as the older run wrote it: its manifest vouches for it
    run_cli("report", str(out), "--format", "md", "--out", str(tmp_path / "old.md"))
    new, old = _fix_rows((tmp_path / "new.md").read_text()), _fix_rows((tmp_path / "old.md").read_text())
    ok = written[written["status"] != "error"]
    # the two 14-iteration GPUs of ~0.24 s are medium (trusted) under any of these thresholds; tiny_2kernels'
    # GPU (2 kernels, 0 stable iterations) is low under the run's (a toy under the defaults): apart, after
    assert ok["iterations"].tolist() == [0, 14, 14] and ok["kernel_count"].tolist() == [2, 1666, 1666]
    want = []
    # (tiny_2kernels' cpu idle is 99.98 % of its W: its speed-up is flagged too)
    for part, label in ((ok[ok["iterations"] > 0], "medium"),
                        (ok[ok["iterations"] == 0], "low confidence, implausible speed-up")):
        usd = {cat: sum(round(int(n) / int(w) * float(r) * 500.0, 2)
                        for n, w, r in zip(part[f"cat_{cat}_ns"], part["window_ns"], part["rate_usd_per_hour"]))
               for cat in model.CATEGORIES if cat not in model.CAVEATS and part[f"cat_{cat}_ns"].sum() > 0}
        # the training export names no GPU model: its two GPUs are priced at the assumed H100 rate, and the md
        # list marks the entries resting on them (~$, and how much: here all of it, on both GPUs)
        assumed = part["rate_assumed"].astype(bool)
        marked = {cat: (f"~${u:,.2f} (of which ${u:,.2f} at assumed rates, "
                        f"{int((assumed & (part[f'cat_{cat}_ns'] > 0)).sum())} GPU(s))" if assumed.all() else f"${u:,.2f}")
                  for cat, u in usd.items()}   # the GPUs an entry rests on: those with idle of its category
        assert assumed.all() or not assumed.any()
        want += [(cat, marked[cat], label) for cat, u in sorted(usd.items(), key=lambda cu: (-round(cu[1], 2), cu[0]))]
    assert [c for c, _, _ in want] == ["launch", "cpu", "cpu"]
    assert want[0][1].startswith("~$") and want[2][1].startswith("$")   # tiny_2kernels' RTX 3080 is on the card
    # the trusted cpu is archived on its GPUs (under the actionable share): unranked, after the ranked (issue 45)
    assert old == new == [want[0], want[2], want[1]]
    # the HTML report's cost formula names the hours the run priced with, not the default 730 (a tryout)
    run_cli("report", str(out), "--out", str(tmp_path / "report.html"))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Idle $/month = idle fraction × rate × 500 hours." in page and "× 730 hours" not in page


# ---------------------------------------------------------------------------------------------
# (b) one registry of input kinds


@pytest.mark.slow
def test_a_folder_of_every_kind_is_found_and_read_by_its_loader(tmp_path, profiles):
    """``gpu-idle run FOLDER`` on a.sqlite3 and b.db (SQLite exports), c.qdrep (a report to export: nsys
    is not found here, so its row says the exporter was asked), d.pt.trace.json.gz (a PyTorch trace),
    and two files passed over by their content: e.db (not SQLite) and f.json (not a trace). a, b and d
    get the rows their originals get, read by the SQLite and the Kineto loader; the jobs are the stems.
    On i25-merge a.sqlite3 and b.db were not found in a folder (and b.db named alone failed to export)."""
    import shutil

    import pandas as pd

    from tests.conftest import run_cli

    kineto = profiles.parent / "kineto" / "mi250_rocm_minitoy.json.gz"
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(profiles / "tiny_2kernels.sqlite", folder / "a.sqlite3")
    shutil.copyfile(profiles / "train_h100_2gpu_nccl.sqlite", folder / "b.db")
    (folder / "c.qdrep").write_bytes(b"a qdrep-like report: exported by nsys first\n" * 64)
    shutil.copyfile(kineto, folder / "d.pt.trace.json.gz")
    (folder / "e.db").write_bytes(b"not an SQLite database\n")
    (folder / "f.json").write_text('{"not": "a trace"}\n')
    env = {"GPU_IDLE_CACHE": str(tmp_path / "columns"), "GPU_IDLE_EXPORT_CACHE": str(tmp_path / "exports"),
           "GPU_IDLE_NSYS": str(tmp_path / "no-nsys-here")}
    proc = run_cli("run", str(folder), "--out", str(tmp_path / "out"), env=env, check=False)
    assert proc.returncode == 1, proc.stderr  # c.qdrep's row is an error: nsys is not there
    fleet = pd.read_parquet(tmp_path / "out" / "fleet.parquet")
    names = {os.path.basename(r) for r in fleet["report"]}
    assert names == {"a.sqlite3", "b.db", "c.qdrep", "d.pt.trace.json.gz"}
    assert sorted(set(fleet["job"])) == ["a", "b", "c", "d"]
    c = fleet[fleet["job"] == "c"]
    assert c["status"].tolist() == ["error"] and "nsys" in c["error"].iloc[0]
    run_cli("run", str(profiles / "tiny_2kernels.sqlite"), str(profiles / "train_h100_2gpu_nccl.sqlite"), str(kineto),
            "--out", str(tmp_path / "direct"), env=env)
    direct = pd.read_parquet(tmp_path / "direct" / "fleet.parquet")
    columns = ["gpu_key", "window_ns", "busy_ns", "idle_ns", *[f"cat_{c}_ns" for c in model.CATEGORIES]]
    for job, original in (("a", "tiny_2kernels"), ("b", "train_h100_2gpu_nccl"), ("d", "mi250_rocm_minitoy")):
        got = fleet[fleet["job"] == job].sort_values("gpu_key")[columns].reset_index(drop=True)
        want = direct[direct["job"] == original].sort_values("gpu_key")[columns].reset_index(drop=True)
        assert len(got) and got.equals(want), job
    assert fleet.loc[fleet["job"] == "d", "gpu_key"].str.startswith("pid").all()   # Kineto: pid<P>/dev<D>
    assert fleet.loc[fleet["job"] == "a", "gpu_key"].str.startswith("GPU-").all()  # Nsight: its GPU table
    assert "e.db (not SQLite)" in proc.stderr and "f.json" in proc.stderr


def test_the_registry_answers_for_every_kind():
    from pipeline import kinds

    assert kinds.kind_of("/x/A.SQLITE3") is kinds.SQLITE_EXPORT and kinds.kind_of("s3://b/k.db") is kinds.SQLITE_EXPORT
    assert kinds.kind_of("r.qdrep") is kinds.NSYS_REPORT and kinds.NSYS_REPORT.needs_export
    assert kinds.kind_of("r.pt.trace.json.gz").loader == kinds.KINETO and kinds.kind_of("r.txt") is None
    assert [kinds.stem(n) for n in ("j.nsys-rep", "j.sqlite3", "j.db", "j.pt.trace.json.gz", "j.json", "j.txt")] \
        == ["j", "j", "j", "j", "j", "j.txt"]
    assert not kinds.needs_sniff("r.pt.trace.json") and kinds.needs_sniff("r.json") and kinds.needs_sniff("r.db")
    assert kinds.passed_over("r.db", b"SQLite format 3\x00...") is None
    assert kinds.passed_over("r.db", b"text") == "not SQLite"


def _suffix_spellings():
    """Registry suffixes spelled outside pipeline/kinds.py where a file's kind is judged: in a tuple,
    list or set literal, or as the argument of ``endswith`` / ``removesuffix`` / an ``in`` or ``==`` test
    (``.json`` alone, an output's name as much as an input's, is not counted)."""
    from pipeline import kinds

    suffixes = set(kinds.SUFFIXES)

    def spelled(node) -> list[str]:
        return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and n.value.lower() in suffixes]

    found = []
    for path, tree in _modules():
        if path.as_posix() == "pipeline/kinds.py":
            continue
        for node in ast.walk(tree):
            judged = (isinstance(node, (ast.Tuple, ast.List, ast.Set))
                      or (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                          and node.func.attr in ("endswith", "removesuffix", "startswith"))
                      or isinstance(node, ast.Compare))
            # ".json" alone names outputs too (gpus/*.json, a stored result's rosters): not a kind test
            if judged and set(spelled(node)) - {".json"}:
                found.append(f"{path}:{node.lineno}: {sorted(set(spelled(node)))}")
    return sorted(set(found))


def test_every_suffix_list_comes_from_the_registry():
    """On i25-merge: discover's three lists, storage's KEEP_SUFFIXES, export's two, load/kineto's and
    config's labels_for each spelled their own."""
    assert _suffix_spellings() == []
