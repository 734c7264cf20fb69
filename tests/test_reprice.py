"""Price-free stored results, priced at the reduce (issue 46): a changed rate, `cost.hours_per_month` or label
rule re-prices a stored fleet and analyses nothing; the new dollars are the row's ns x rate x hours; the folder
re-priced is byte for byte what a fresh analysis under the new settings writes; result keys cover exactly what a
result depends on (not the rate card, not a label but `kind`, not a column's meaning text or a docstring)."""
from __future__ import annotations

import os
import shutil

import pandas as pd
import pytest
from conftest import run_cli, small_reports

from pipeline import code_keys
from pipeline.config import config_from_dict
from pipeline.store import results as results_mod

#: The first run's settings: H100 at $2.00/h over 730 h, the report labelled west / train-a.
BEFORE = """cost:
  hours_per_month: 730
  rates:
    - {model: H100, usd_per_gpu_hour: 2.0, match: ["*H100*"]}
labels:
  - {match: "*r0*", cluster: west, job: train-a, node: n1}
"""
#: The second's: another rate, another month, other labels, and a rule that matches nothing.
AFTER = """cost:
  hours_per_month: 700
  rates:
    - {model: H100, usd_per_gpu_hour: 3.5, match: ["*H100*"]}
labels:
  - {match: "*r0*", cluster: east, job: train-b, node: n2}
  - {match: "*nothing-like-it*", cluster: nowhere}
"""


def _tree(folder) -> dict[str, bytes]:
    """Every output file's bytes by relative path (the manifest aside: it records which run wrote the folder)."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            if name != results_mod.MANIFEST:
                path = os.path.join(root, name)
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, folder)] = fh.read()
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One report (2 GPUs) run under BEFORE into ``a``, then under AFTER into the same folder (the stored result
    re-priced) and, without the result cache, into ``fresh`` (analysed again): the folders and what each printed."""
    root = tmp_path_factory.mktemp("reprice")
    (root / "in").mkdir()
    small_reports(root / "in", "r", 1, seed=7)
    (root / "before.yaml").write_text(BEFORE)
    (root / "after.yaml").write_text(AFTER)
    env = {"GPU_IDLE_CACHE": str(root / "cache")}

    def run(config, out, *extra):
        return run_cli("run", str(root / "in"), "--out", str(root / out), "--config", str(root / config), *extra,
                       env=env).stdout

    first = run("before.yaml", "a")
    before = pd.read_csv(root / "a" / "fleet.csv")
    stored = sorted(os.listdir(root / "cache" / "results"))
    second = run("after.yaml", "a")
    stored_after = sorted(os.listdir(root / "cache" / "results"))
    fresh = run("after.yaml", "fresh", "--no-cache")
    return {"root": root, "first": first, "second": second, "fresh": fresh, "before": before,
            "stored": stored, "stored_after": stored_after}


def test_a_rate_month_and_label_change_analyses_nothing(runs):
    assert "1 report(s) analysed, 0 reused" in runs["first"]
    assert "0 report(s) analysed, 1 reused" in runs["second"]
    assert runs["stored_after"] == runs["stored"]  # no result stored anew: the one stored is price-free
    assert "1 report(s) analysed" in runs["fresh"]


def test_the_new_dollars_are_ns_times_the_new_rate_and_month(runs):
    fleet = pd.read_csv(runs["root"] / "a" / "fleet.csv")
    before = runs["before"]
    assert len(fleet) == 2 and list(fleet["idle_ns"]) == list(before["idle_ns"])  # the same measurement
    assert set(fleet["cluster"]) == {"east"} and set(fleet["job"]) == {"train-b"} and set(fleet["node"]) == {"n2"}
    assert set(before["cluster"]) == {"west"} and set(before["job"]) == {"train-a"}
    assert list(fleet["rate_usd_per_hour"]) == [3.5, 3.5] and list(before["rate_usd_per_hour"]) == [2.0, 2.0]
    for row, old in zip(fleet.to_dict("records"), before.to_dict("records")):
        idle, window = int(row["idle_ns"]), int(row["window_ns"])
        assert row["idle_usd_per_month"] == round(idle / window * 3.5 * 700, 2)
        assert old["idle_usd_per_month"] == round(idle / window * 2.0 * 730, 2)
        assert row["comm_exposed_usd_per_month"] == round(int(row["comm_exposed_ns"]) / window * 3.5 * 700, 2)
        for cat in ("data", "comm", "sync"):
            assert row[f"fix_{cat}_usd_per_month"] == round(int(row[f"cat_{cat}_ns"]) / window * 3.5 * 700, 2)
    jobs = pd.read_csv(runs["root"] / "a" / "jobs.csv")
    assert list(jobs["cluster"]) == ["east"] and list(jobs["job"]) == ["train-b"]
    assert jobs["idle_usd_per_month"].iloc[0] == pytest.approx(fleet["idle_usd_per_month"].sum(), abs=0.005)


def test_the_re_priced_folder_is_what_a_fresh_analysis_writes(runs):
    a, fresh = _tree(runs["root"] / "a"), _tree(runs["root"] / "fresh")
    assert sorted(a) == sorted(fresh) and any(name.startswith("gpus") for name in a)
    assert [name for name in a if a[name] != fresh[name]] == []


def test_result_keys_leave_out_the_rate_card_and_the_labels_but_kind():
    base = config_from_dict({})
    priced = config_from_dict({"cost": {"hours_per_month": 700, "rates": [{"model": "H100", "usd_per_gpu_hour": 9}]},
                               "labels": [{"match": "*", "cluster": "c", "job": "j", "gpu_model": "A100"}]})
    assert results_mod.config_hash(priced) == results_mod.config_hash(base)
    assert results_mod.pricing_hash(priced) != results_mod.pricing_hash(base)  # the output folder's digest
    labels = priced.labels_for("/x/r0.sqlite")
    key = results_mod.result_key("a" * 64, results_mod.config_hash(base), base.labels_for("/x/r0.sqlite"), "c" * 8)
    assert results_mod.result_key("a" * 64, results_mod.config_hash(priced), labels, "c" * 8) == key
    assert results_mod.result_key("a" * 64, results_mod.config_hash(base), {**labels, "kind": "serving"},
                                  "c" * 8) != key
    assert results_mod.config_hash(config_from_dict({"analysis": {"min_gap_ns": 7}})) != results_mod.config_hash(base)


def _module_digest(tmp_path, monkeypatch, rel: str, text: str) -> str:
    """:func:`pipeline.code_keys.module_digest` of ``text`` as the package's module ``rel`` (written into a package
    folder of its own: the digest reads the module's place in the package)."""
    monkeypatch.setattr(code_keys, "PACKAGE", str(tmp_path))
    path = tmp_path / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    code_keys.module_digest.cache_clear()
    try:
        return code_keys.module_digest(str(path))
    finally:
        code_keys.module_digest.cache_clear()


def _edited(rel: str, old: str, new: str) -> tuple[str, str]:
    """The package's module ``rel`` as it is and with ``old`` replaced by ``new`` once."""
    with open(os.path.join(code_keys.PACKAGE, rel), encoding="utf-8") as fh:
        text = fh.read()
    assert old in text
    return text, text.replace(old, new, 1)


@pytest.mark.parametrize("rel, old, new, same", [
    ("schema.py", '"idle fraction × rate × hours per month (730)"', '"the idle share, priced"', True),  # meaning
    ("schema.py", '\'caveat_usd\': "the part', '\'caveat_usd\': "the share', True),  # a column group's note
    ("schema.py", 'Printed("idle_pct", "idle %")', 'Printed("idle_pct", "idle share")', True),  # a printed header
    ("schema.py", '"GPUs flagged `straggler`"', '"GPUs marked as stragglers"', True),  # a rollup column's meaning
    ("schema.py", 'text="each model with its count, most first"', 'text="its models, counted"', True),  # a rule's text
    ("schema.py", 'Min("iterations")', 'Max("iterations")', False),  # a rollup rule
    ("schema.py", '"the entry\'s rank in its section', '"its rank in its section', True),  # an output table's meaning
    ("schema.py", '_t("category", "the category")', '_t("kind", "the category")', False),  # an output table's column
    ("analysis/cost.py", '"""Price idle time', '"""Price the idle time', True),  # a docstring
    ("schema.py", '*((f"{c}_usd_per_month", "float", "USD/month")', '*((f"{c}_usd_per_month", "text", "USD/month")',
     False),  # the contract (a figure group's field)
    ("schema.py", 'dark_ns: int | None = _f("Int64", "ns")', 'dark_ns: float = _f("float", "ns")', False),  # the same
    ("analysis/cost.py", "return float(idle_fraction) * float(usd_per_gpu_hour)",
     "return 1.0 * float(idle_fraction) * float(usd_per_gpu_hour)", False),  # the code
])
def test_presentation_text_and_docstrings_change_no_result_key(tmp_path, monkeypatch, rel, old, new, same):
    assert any(rel == p or rel.startswith(p + "/") for p in code_keys.RESULT_CODE)  # a module results depend on
    before, after = _edited(rel, old, new)
    assert (_module_digest(tmp_path, monkeypatch, rel, after)
            == _module_digest(tmp_path, monkeypatch, rel, before)) is same


def _package_imports(package: str, rel: str) -> set[str]:
    """The package's modules (paths relative to ``package``) the module ``rel`` imports, anywhere in it (a function's
    import too): ``from ..x import y`` as ``x.py`` or ``x/__init__.py`` and, when ``y`` is a module, ``x/y.py``."""
    import ast

    with open(os.path.join(package, rel), encoding="utf-8") as fh:
        tree = ast.parse(fh.read())
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        base = os.path.dirname(rel).split("/") if os.path.dirname(rel) else []
        base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
        parts = base + (node.module.split(".") if node.module else [])
        stems = ["/".join(parts)] + ["/".join(parts + [a.name]) for a in node.names]
        for stem in stems:
            for candidate in (stem + ".py", stem + "/__init__.py"):
                if stem and os.path.isfile(os.path.join(package, candidate)):
                    found.add(candidate)
    return found


def test_the_loaded_array_cache_is_keyed_by_the_loader_code(tmp_path, monkeypatch):
    """A loader edit changes the columnar cache's key (an entry records :func:`pipeline.code_keys.loader_code`: no
    hand-bumped version decides), and the loader code covers every module of the package ``load/`` imports, directly
    or through another (``code_keys.py`` aside: it computes the digest)."""
    rel, package = "load/kernel_names.py", code_keys.PACKAGE
    before, _ = _edited(rel, "", "")
    assert any(rel.startswith(p + "/") for p in code_keys.LOADER_CODE)
    assert (_module_digest(tmp_path, monkeypatch, rel, before + "\nLIMIT = 1\n")
            != _module_digest(tmp_path, monkeypatch, rel, before))
    todo = [os.path.relpath(os.path.join(folder, name), package).replace(os.sep, "/")
            for folder, _, names in os.walk(os.path.join(package, "load")) for name in names if name.endswith(".py")]
    seen = set(todo)
    while todo:
        for found in _package_imports(package, todo.pop()) - seen:
            seen.add(found)
            todo.append(found)
    covered = [r for r in seen if any(r == p or r.startswith(p + "/") for p in code_keys.LOADER_CODE)]
    assert "analysis/graphcapture.py" in seen  # load/caveats.py's: what a loaded report holds depends on it
    assert sorted(seen - set(covered)) == ["code_keys.py"]


def _stored(root) -> list[str]:
    return sorted(os.listdir(root / "cache" / "results"))


def test_an_old_folder_re_prices_itself_with_the_card_given(runs, tmp_path):
    """Folder ``a`` was written at $3.50/h over 700 h (AFTER). ``gpu-idle report a --config before.yaml`` prices its
    table again with BEFORE's card ($2.00/h over 730 h): each GPU's dollars are round(idle_ns / window_ns × 2.0 ×
    730, 2) (by hand), the exposed communication's and each fix-first category's likewise, the headline their sum;
    the report names the card that priced it; nothing is analysed (no result stored, the folder's table unchanged);
    without --config the run's own dollars stay."""
    root, a = runs["root"], runs["root"] / "a"
    stored, table = _stored(root), (a / "fleet.parquet").read_bytes()
    out = run_cli("report", str(a), "--format", "csv", "--out", str(tmp_path / "r.csv"),
                  "--config", str(root / "before.yaml"), env={"GPU_IDLE_CACHE": str(root / "cache")})
    assert out.stdout.endswith(f" (priced again with the rate card of {root / 'before.yaml'}; nothing analysed)\n")
    got = pd.read_csv(tmp_path / "r.csv").sort_values("gpu_key").to_dict("records")
    fleet = pd.read_parquet(a / "fleet.parquet").sort_values("gpu_key").to_dict("records")
    assert len(got) == 2 and [r["idle_usd_per_month"] for r in fleet] != [r["idle_usd_per_month"] for r in got]
    for row, full in zip(got, fleet):
        window = int(full["window_ns"])
        assert row["rate_usd_per_hour"] == 2.0 and full["rate_usd_per_hour"] == 3.5
        assert row["idle_usd_per_month"] == round(int(full["idle_ns"]) / window * 2.0 * 730, 2)
        assert row["comm_exposed_usd_per_month"] == round(int(full["comm_exposed_ns"]) / window * 2.0 * 730, 2)
    run_cli("report", str(a), "--format", "md", "--out", str(tmp_path / "r.md"), "--config", str(root / "before.yaml"))
    md = (tmp_path / "r.md").read_text()
    total = sum(round(int(f["idle_ns"]) / int(f["window_ns"]) * 2.0 * 730, 2) for f in fleet)
    assert f"${total:,.2f}/month idle" in md
    assert f"Priced as this report was made, with {root / 'before.yaml'}" in md and "H100 $2.00/GPU-hour" in md
    assert "730 hours per month" in md
    run_cli("report", str(a), "--format", "md", "--out", str(tmp_path / "own.md"))
    own = (tmp_path / "own.md").read_text()
    assert "Priced as this report was made" not in own
    assert f"${sum(f['idle_usd_per_month'] for f in fleet):,.2f}/month idle" in own
    assert _stored(root) == stored and (a / "fleet.parquet").read_bytes() == table   # nothing analysed or written


def test_an_older_table_lacking_price_columns_is_priced_with_the_card_given(runs, tmp_path):
    """A copy of folder ``a`` whose table lacks the fix-first dollars, the exposed communication's and the rate
    flags (a version before them wrote it): priced with BEFORE's card as it is read, through the fleet's pricing
    (:func:`pipeline.fleet.pricing.finished`), every one of them round(ns / window_ns × 2.0 × 730, 2) (by hand)."""
    import shutil

    from conftest import vouch

    from pipeline.config import load_config
    from pipeline.fleet.pricing import finished

    old = tmp_path / "old"
    shutil.copytree(runs["root"] / "a", old)
    gone = ["comm_exposed_usd_per_month", "rate_assumed", "unpriced",
            *(c for c in pd.read_parquet(old / "fleet.parquet").columns if c.startswith("fix_"))]
    pd.read_parquet(old / "fleet.parquet").drop(columns=gone).to_parquet(old / "fleet.parquet")
    vouch(old)
    table = pd.read_parquet(old / "fleet.parquet")
    got = finished(table, None, load_config([str(runs["root"] / "before.yaml")]))
    for row in got.to_dict("records"):
        window = int(row["window_ns"])
        assert row["idle_usd_per_month"] == round(int(row["idle_ns"]) / window * 2.0 * 730, 2)
        assert row["comm_exposed_usd_per_month"] == round(int(row["comm_exposed_ns"]) / window * 2.0 * 730, 2)
        for cat in ("data", "comm", "sync"):
            assert row[f"fix_{cat}_usd_per_month"] == round(int(row[f"cat_{cat}_ns"]) / window * 2.0 * 730, 2)
        assert row["rate_assumed"] is False or row["rate_assumed"] == False  # noqa: E712 (numpy bool)
    run_cli("report", str(old), "--format", "csv", "--out", str(tmp_path / "r.csv"),
            "--config", str(runs["root"] / "before.yaml"))
    csv = pd.read_csv(tmp_path / "r.csv")
    assert sorted(csv["idle_usd_per_month"]) == sorted(got["idle_usd_per_month"])


def test_a_template_edit_changes_no_result_key(tmp_path, monkeypatch):
    """The report's and the GPU page's templates are presentation: editing one leaves the result code's digest (every
    stored result's key, :func:`pipeline.code_keys.result_code`) as it was; a code edit under the result code
    changes it (the check can fail). tests/test_result_keys.py holds the same for every key on a whole run."""
    import shutil

    copy = tmp_path / "pipeline"
    shutil.copytree(code_keys.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(code_keys, "PACKAGE", str(copy))

    def digest() -> str:
        code_keys.module_digest.cache_clear()
        return code_keys.code_digest_of(code_keys.RESULT_CODE)

    before = digest()
    templates = sorted((copy / "report" / "templates").glob("*.j2"))
    assert {t.name for t in templates} >= {"report.html.j2", "gpu.html.j2"}
    for template in templates:
        template.write_text(template.read_text(encoding="utf-8").replace("<p", "<p data-edited", 1) + "\n<!-- edited -->\n",
                            encoding="utf-8")
    assert digest() == before
    with open(copy / "analysis" / "cost.py", "a", encoding="utf-8") as fh:
        fh.write("\n_EDITED = 1\n")
    assert digest() != before
    code_keys.module_digest.cache_clear()


def test_the_gpu_pages_of_a_folder_priced_again_show_the_new_dollars(runs, tmp_path):
    """``gpu-idle report a --config before.yaml`` (HTML): the report says which card priced it, and each GPU page
    beside it shows that GPU's dollars at $2.00/h over 730 h (by hand), not the run's $3.50/h over 700 h."""
    root = runs["root"]
    run_cli("report", str(root / "a"), "--out", str(tmp_path / "r.html"), "--config", str(root / "before.yaml"))
    assert 'id="priced-with"' in (tmp_path / "r.html").read_text()
    from pipeline.fleet.outputs import gpu_page_name

    fleet = pd.read_parquet(root / "a" / "fleet.parquet").to_dict("records")
    assert sorted(p.name for p in (tmp_path / "gpu-pages").glob("*.html")) == sorted(
        gpu_page_name(r["report"], r["gpu_key"]) for r in fleet)
    for row in fleet:
        text = (tmp_path / "gpu-pages" / gpu_page_name(row["report"], row["gpu_key"])).read_text()
        new = round(int(row["idle_ns"]) / int(row["window_ns"]) * 2.0 * 730, 2)
        assert f"${new:,.2f}" in text and f"${row['idle_usd_per_month']:,.2f}" not in text


def test_pricing_a_table_again_moves_its_rate_warnings_or_abstains(runs):
    """Folder ``a``'s table priced again (:func:`pipeline.fleet.pricing.repriced`) with a card that lacks its GPUs'
    model: left unpriced (NaN dollars, ``unpriced``) with the ``model-not-on-rate-card`` warning; that table priced
    again with BEFORE's card: the warning gone, the warnings and codes as the table had them, the dollars by hand. A
    GPU naming no model cannot be priced again from the table (the note its warning quotes is not there): it is
    kept with its run's dollars and a `not-repriced` warning naming why (never a guess at the new card)."""
    from pipeline.config import load_config
    from pipeline.fleet.pricing import kept_run_pricing, repriced

    table = pd.read_parquet(runs["root"] / "a" / "fleet.parquet")
    assert not table["warning_codes"].fillna("").str.contains("model-not-on-rate-card").any()
    lacking = repriced(table, config_from_dict({"cost": {"rates": [   # the card's H100 entry fits no GPU here
        {"model": "H100", "usd_per_gpu_hour": 2.0, "match": ["no-such-gpu*"]}]}}))
    assert lacking["unpriced"].tolist() == [True, True] and lacking["idle_usd_per_month"].isna().all()
    assert all(c.split(",")[-1] == "model-not-on-rate-card" for c in lacking["warning_codes"])
    assert all("is not on the rate card; left unpriced" in w for w in lacking["warnings"])
    back = repriced(lacking, load_config([str(runs["root"] / "before.yaml")]))
    assert back["warnings"].fillna("").tolist() == table["warnings"].fillna("").tolist()
    assert back["warning_codes"].fillna("").tolist() == table["warning_codes"].fillna("").tolist()
    assert back["unpriced"].tolist() == [False, False] and back["rate_usd_per_hour"].tolist() == [2.0, 2.0]
    assert back["idle_usd_per_month"].tolist() == [round(int(i) / int(w) * 2.0 * 730, 2)
                                                   for i, w in zip(table["idle_ns"], table["window_ns"])]
    assert kept_run_pricing(back) == {}


NO_MODEL = "names no GPU model (the table does not hold why, which its rate warning quotes)"


@pytest.fixture(scope="module")
def unnamed(runs, tmp_path_factory):
    """A copy of folder ``a`` (written at $3.50/h over 700 h) whose first GPU names no model, as a run of an export
    naming none wrote it: the table does not hold why it names none."""
    import shutil

    from conftest import vouch

    folder = tmp_path_factory.mktemp("unnamed") / "a"
    shutil.copytree(runs["root"] / "a", folder)
    table = pd.read_parquet(folder / "fleet.parquet").sort_values("gpu_key").reset_index(drop=True)
    table.loc[0, "gpu_model"] = ""
    table.to_parquet(folder / "fleet.parquet")
    vouch(folder)
    return folder, table


def test_a_gpu_naming_no_model_keeps_its_runs_dollars_and_says_why(runs, unnamed):
    """Folder ``a``'s table (AFTER's $3.50/h over 700 h) with its first GPU naming no model, priced again with
    BEFORE's card: the unnamed GPU keeps its run's rate and dollars (round(idle_ns / window_ns × 3.5 × 700, 2), by
    hand) with a `not-repriced` warning saying why after its others; the other GPU is at $2.00/h over 730 h."""
    from pipeline.config import load_config
    from pipeline.fleet.pricing import kept_run_pricing, repriced

    _, table = unnamed
    got = repriced(table, load_config([str(runs["root"] / "before.yaml")])).to_dict("records")
    old, new = got
    assert old["rate_usd_per_hour"] == 3.5 and new["rate_usd_per_hour"] == 2.0
    assert old["idle_usd_per_month"] == round(int(old["idle_ns"]) / int(old["window_ns"]) * 3.5 * 700, 2)
    assert new["idle_usd_per_month"] == round(int(new["idle_ns"]) / int(new["window_ns"]) * 2.0 * 730, 2)
    assert old["warning_codes"].split(",")[-1] == "not-repriced"
    assert "not-repriced" not in str(new["warning_codes"])
    assert old["warnings"].endswith(f"not priced again with the rate card given, as this GPU {NO_MODEL}; its rate "
                                    "and dollars are its run's")
    assert kept_run_pricing(pd.DataFrame(got)) == {NO_MODEL: 1}
    again = repriced(pd.DataFrame(got), load_config([str(runs["root"] / "before.yaml")]))   # warned once, not twice
    assert again["warning_codes"].tolist() == [old["warning_codes"], new["warning_codes"]]


def test_the_report_of_a_folder_with_an_unnamed_gpu_prices_the_rest_and_says_how_many_kept(runs, unnamed, tmp_path):
    """``gpu-idle report`` of that folder with BEFORE's card exits 0: the headline is the kept GPU's run dollars
    plus the other's at $2.00/h over 730 h (by hand), and the note under the rate card says 1 GPU kept the run's
    pricing and why."""
    folder, table = unnamed
    out = run_cli("report", str(folder), "--format", "md", "--out", str(tmp_path / "r.md"),
                  "--config", str(runs["root"] / "before.yaml"))
    assert out.returncode == 0
    md = (tmp_path / "r.md").read_text()
    rows = table.to_dict("records")
    total = round(int(rows[0]["idle_ns"]) / int(rows[0]["window_ns"]) * 3.5 * 700, 2) + round(
        int(rows[1]["idle_ns"]) / int(rows[1]["window_ns"]) * 2.0 * 730, 2)
    assert f"${total:,.2f}/month idle" in md
    assert ("but for 1 GPU that kept the run's rate and dollars (a `not-repriced` warning on each), as each "
            f"{NO_MODEL} (1 GPU)") in " ".join(md.replace("\\`", "`").split())


def _amounts(page) -> list[float]:
    """Every dollar amount on the HTML page ``page`` (entities unescaped), the note that says what priced it
    (``id="priced-with"``: the card given and the run's own rates) left out, as numbers."""
    import html
    import re

    text = re.sub(r'<p class="note" id="priced-with">.*?</p>', "", page.read_text(), flags=re.S)
    return [float(a.replace(",", "")) for a in re.findall(r"\$([0-9][0-9,]*(?:\.[0-9]+)?)", html.unescape(text))]


def _pages(folder) -> dict:
    """``{name: page}`` of the report ``folder/report.html`` and its GPU pages."""
    return {"report.html": folder / "report.html", **{p.name: p for p in (folder / "gpu-pages").glob("*.html")}}


def test_a_re_priced_page_shows_no_dollar_of_the_run_card(runs, tmp_path):
    """Folder ``a`` (AFTER: $3.50/h over 700 h) re-priced with BEFORE's card ($2.00/h over 730 h): every dollar
    amount on the report and its GPU pages is one that the same fleet priced with BEFORE from the start shows
    (a second computation: `gpu-idle run --config before.yaml`, nothing analysed), each GPU's idle dollars by
    hand among them; none of the run's own figures (its medical records, written at $3.50 over 700 h, are
    withheld with a note naming where they are and the run's rate)."""
    root, env = runs["root"], {"GPU_IDLE_CACHE": str(runs["root"] / "cache")}
    run_cli("run", str(root / "in"), "--out", str(tmp_path / "b"), "--config", str(root / "before.yaml"), env=env)
    run_cli("report", str(tmp_path / "b"), env=env)
    run_cli("report", str(root / "a"), "--out", str(tmp_path / "own" / "report.html"), env=env)
    run_cli("report", str(root / "a"), "--out", str(tmp_path / "x" / "report.html"),
            "--config", str(root / "before.yaml"), env=env)
    fleet = pd.read_parquet(root / "a" / "fleet.parquet")
    new = {round(int(i) / int(w) * 2.0 * 730, 2) for i, w in zip(fleet["idle_ns"], fleet["window_ns"])}
    old = {round(int(i) / int(w) * 3.5 * 700, 2) for i, w in zip(fleet["idle_ns"], fleet["window_ns"])}
    assert not new & old
    fresh, own, got = _pages(tmp_path / "b"), _pages(tmp_path / "own"), _pages(tmp_path / "x")
    assert sorted(got) == sorted(fresh) == sorted(own) and len(got) == 3
    shown = {name: _amounts(page) for name, page in got.items()}
    for name, amounts in shown.items():
        assert amounts and [a for a in amounts if a not in set(_amounts(fresh[name]))] == [], name
        assert not set(amounts) & (set(_amounts(own[name])) - set(_amounts(fresh[name]))), name
        assert not set(amounts) & old, name
    assert new <= set(shown["report.html"])
    page = (tmp_path / "x" / "report.html").read_text()
    assert 'id="records-withheld"' in page and "Idle cost:" not in page and 'href="#record-' not in page
    assert "Idle cost:" in (tmp_path / "own" / "report.html").read_text()   # the records hold the run's dollars
    import html
    import re

    words = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert "(at its rates: H100 $3.50/GPU-hour; 700 hours per month): the medical records (the run folder's records/" \
        in words


def test_the_help_says_where_a_re_priced_report_goes_and_it_does(runs, tmp_path):
    """`gpu-idle report --help`: a report priced again goes into a folder of its own, by default repriced-<card> in
    the run folder; an explicit --out in the run folder only takes the place of the run's own report.html. So it
    is: beside the run's report it is refused (2, nothing written), into another folder it is written (no link into
    the run folder: no records), without --out into repriced-before/ (the run's report.html kept), as the run's
    report.html when --out says so."""
    import re
    import shutil

    help_text = " ".join(run_cli("report", "--help").stdout.split())
    assert ("A report priced again (--config) shows no medical records (they keep the run's dollars) and goes into a "
            "folder of its own: by default RESULTS/repriced-<card>/report.html (<card>: the config files' names, e.g. "
            "repriced-before for --config before.yaml), so the run's own report.html is never replaced; an explicit "
            "--out wins (in the run folder it can only take the place of the run's own report.html") in help_text
    c, card = tmp_path / "c", str(runs["root"] / "before.yaml")
    shutil.copytree(runs["root"] / "a", c)
    run_cli("report", str(c))
    beside = run_cli("report", str(c), "--config", card, "--out", str(c / "priced.html"), check=False)
    assert beside.returncode == 2 and "holds the GPU pages of another report" in beside.stderr
    assert not (c / "priced.html").exists()
    run_cli("report", str(c), "--config", card, "--out", str(tmp_path / "other" / "report.html"))
    links = re.findall(r'href="([^"#]+)', (tmp_path / "other" / "report.html").read_text())
    assert links and all(h.startswith("gpu-pages/") or h.startswith("http") for h in links)
    run_cli("report", str(c), "--config", card)
    assert 'id="records-withheld"' not in (c / "report.html").read_text()
    assert 'id="records-withheld"' in (c / "repriced-before" / "report.html").read_text()
    run_cli("report", str(c), "--config", card, "--out", str(c / "report.html"))
    assert 'id="records-withheld"' in (c / "report.html").read_text()


@pytest.fixture(scope="module")
def profiles_repriced(profiles, tmp_path_factory):
    """The tryout's case: ``gpu-idle run ../shared/profiles --config configs/profiles.yaml --out R`` (the default
    card: H100 $4.00/h), then R's report priced again with a copy of configs/profiles.yaml whose H100 rate is $2.00
    (X), and the same exports run with that copy from the start (N, the second computation; nothing analysed)."""
    root = tmp_path_factory.mktemp("profiles_reprice")
    with open("configs/profiles.yaml", encoding="utf-8") as fh:
        (root / "new.yaml").write_text(fh.read() + "\ncost:\n  rates:\n"
                                       "    - {model: H100, usd_per_gpu_hour: 2.0, match: [\"*H100*\"]}\n")
    run_cli("run", str(profiles), "--config", "configs/profiles.yaml", "--out", str(root / "R"))
    run_cli("run", str(profiles), "--config", str(root / "new.yaml"), "--out", str(root / "N"))
    for folder in ("R", "N"):
        run_cli("report", str(root / folder))
    run_cli("report", str(root / "R"), "--config", str(root / "new.yaml"), "--out", str(root / "X" / "report.html"))
    return root


def test_the_profiles_re_priced_at_2_dollars_show_one_price(profiles_repriced):
    root = profiles_repriced
    fleet = pd.read_parquet(root / "R" / "fleet.parquet")
    ok = fleet[fleet["rate_model"] == "H100"]
    assert len(ok) == 4 and set(ok["rate_usd_per_hour"]) == {4.0}
    x, n, r = _pages(root / "X"), _pages(root / "N"), _pages(root / "R")
    assert sorted(x) == sorted(n) == sorted(r) and len(x) == 6
    for name in x:
        got = _amounts(x[name])
        assert got and [a for a in got if a not in set(_amounts(n[name]))] == [], name
        assert not set(got) & (set(_amounts(r[name])) - set(_amounts(n[name]))), name
    page = (root / "X" / "report.html").read_text()
    for i, w in zip(ok["idle_ns"], ok["window_ns"]):   # each H100's idle dollars at $2.00 over 730 h, by hand
        assert f"${round(int(i) / int(w) * 2.0 * 730, 2):,.2f}" in page
    assert "Idle cost:" not in page and "rate: $4.00/GPU-hour" not in page and 'id="records-withheld"' in page
    assert "Idle cost:" in (root / "R" / "report.html").read_text()


def test_the_default_folder_of_a_report_priced_again_names_the_card(tmp_path):
    from pipeline.report.command import default_out

    run = str(tmp_path / "run")
    assert default_out(run) == os.path.join(run, "report.html")
    assert default_out(run, ("cards/before.yaml",)) == os.path.join(run, "repriced-before", "report.html")
    # several cards (layered): each file's name; a name unsafe in a path made safe
    assert default_out(run, ("a/east.yaml", "b/h100 deal.yml")) == \
        os.path.join(run, "repriced-east+h100_deal", "report.html")


def test_a_report_priced_again_never_replaces_the_runs_own(runs, tmp_path):
    """``gpu-idle report DIR --config before.yaml`` without --out (issue 45 point 8, a new user's tryout: it used to
    replace DIR/report.html, the run's own dollars, without a word): the report priced again goes to
    DIR/repriced-before/report.html with its own GPU pages; the run's report.html and gpu-pages/ stay byte for byte;
    a second `gpu-idle run` into DIR still works beside it; an explicit --out still wins."""
    root, env = runs["root"], {"GPU_IDLE_CACHE": str(runs["root"] / "cache")}
    folder = tmp_path / "a"
    shutil.copytree(root / "a", folder)
    run_cli("report", str(folder), env=env)
    own = {p.relative_to(folder): p.read_bytes() for p in [folder / "report.html", *(folder / "gpu-pages").glob("*")]}
    assert len(own) == 3  # the report and its 2 GPU pages

    out = run_cli("report", str(folder), "--config", str(root / "before.yaml"), env=env)
    again = folder / "repriced-before" / "report.html"
    assert out.stdout.startswith(f"wrote {again} and 2 GPU page(s) in {again.parent / 'gpu-pages'}{os.sep} (priced "
                                 f"again with the rate card of {root / 'before.yaml'}; nothing analysed)")
    assert {p: (folder / p).read_bytes() for p in own} == own
    page = again.read_text()
    assert 'id="priced-with"' in page and f"with {root / 'before.yaml'}" in html_words(page)
    assert len(list((again.parent / "gpu-pages").glob("*.html"))) == 2
    # the run folder stays the run's: an unchanged run into it reuses it, the report priced again beside it
    assert "0 report(s) analysed" in run_cli("run", str(root / "in"), "--out", str(folder), "--config",
                                             str(root / "after.yaml"), env=env).stdout
    assert again.is_file()
    # an explicit --out wins: the run's own report.html priced again, as asked
    run_cli("report", str(folder), "--config", str(root / "before.yaml"), "--out", str(folder / "report.html"), env=env)
    assert 'id="priced-with"' in (folder / "report.html").read_text()


def html_words(page: str) -> str:
    """The text of an HTML page, tags removed and entities decoded."""
    import html
    import re

    return html.unescape(re.sub(r"<[^>]+>", "", page))
