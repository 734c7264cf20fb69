"""Result keys change when results can, and only then (issue 25, point 4).

Each case edits a copy of the ``pipeline`` package in a temporary folder (never the worktree) and
computes, in a fresh interpreter importing that copy, the keys the product stores outputs under:
a report's result key (:func:`pipeline.store.results.result_key` with the code digest), an output
folder's inputs digest (:meth:`pipeline.store.results.ResultCache.digest`) and a GPU page's cache key
(``pipeline.report.gpu_page._page_code``). The same computation on the unedited copy is the baseline.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

KEYS = r"""
import json, sys, tempfile
import pipeline
from pipeline.config import Config
from pipeline.report.gpu_page import _page_code
from pipeline.store.results import ResultCache, code_digest, config_hash, result_key

cfg = Config()
with tempfile.TemporaryDirectory() as root:
    folder = ResultCache(root, cfg, keep_unseen=False, leftover_age_s=0.0).digest([])
print(json.dumps({"package": pipeline.__file__,
                  "result": result_key("ab" * 32, config_hash(cfg), {"job": "train"}, code_digest()),
                  "folder": folder, "page": _page_code()}))
"""


def keys(package_parent: Path) -> dict:
    """The keys computed by the ``pipeline`` package in ``package_parent``, in a new interpreter."""
    env = {**os.environ, "PYTHONPATH": str(package_parent), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", KEYS], cwd=package_parent, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got.pop("package")).resolve() == (package_parent / "pipeline" / "__init__.py").resolve()
    return got


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> dict:
    """The keys of an unedited copy of the package."""
    return keys(copy_package(tmp_path_factory.mktemp("baseline")))


def copy_package(parent: Path) -> Path:
    """A copy of the worktree's ``pipeline`` package in ``parent``; returns ``parent``."""
    shutil.copytree(REPO / "pipeline", parent / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    return parent


def docstring_edit(path: Path) -> None:
    """Rewrite the module docstring of ``path`` and the first function docstring, and add a comment."""
    text = path.read_text(encoding="utf-8")
    assert text.startswith('"""'), path
    text = '"""A rewritten module docstring,\n\nover three lines."""\n# a new comment\n' + text.split('"""', 2)[2]
    marker = '    """'
    at = text.index(marker) + len(marker)  # the first docstring inside a function or class
    text = text[:at] + "A new first line of this docstring.\n\n    " + text[at:]
    path.write_text(text + "\n# a trailing comment\n", encoding="utf-8")


# (what is edited, how) -> which keys must change; every other key must stay the same.
CASES = {
    "docstrings under report/": (lambda p: [docstring_edit(p / "pipeline/report" / n)
                                            for n in ("summary.py", "gpu_page.py", "medical.py", "plots.py")],
                                 set()),
    "docstrings under analysis/": (lambda p: [docstring_edit(p / "pipeline/analysis" / n)
                                              for n in ("gaps.py", "cost.py")], set()),
    "docstrings under load/": (lambda p: docstring_edit(p / "pipeline/load/sqlite.py"), set()),
    "a code change in analysis/": (lambda p: (p / "pipeline/analysis/gaps.py").open("a").write("\n_EDITED = 1\n"),
                                   {"result", "folder", "page"}),
    "a template edit": (lambda p: (p / "pipeline/report/templates/gpu.html.j2").open("a").write("\n<!-- edited -->\n"),
                        {"page"}),
    "a code change in the report": (lambda p: (p / "pipeline/report/summary.py").open("a").write("\n_EDITED = 1\n"),
                                    {"page"}),
    "a code change in the medical records": (
        lambda p: (p / "pipeline/report/medical.py").open("a").write("\n_EDITED = 1\n"), {"folder", "page"}),
    "a code change in the generators": (lambda p: (p / "pipeline/synth/writer.py").open("a").write("\n_EDITED = 1\n"),
                                        set()),
    "a code change in the CLI": (lambda p: (p / "pipeline/cli.py").open("a").write("\n_EDITED = 1\n"), set()),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
def test_keys_change_only_with_what_they_depend_on(case, baseline, tmp_path):
    change, changed = CASES[case]
    parent = copy_package(tmp_path)
    change(parent)
    got = keys(parent)
    assert {k for k in got if got[k] != baseline[k]} == changed, (case, got, baseline)
    assert set(got) == {"result", "folder", "page"}


def test_every_module_is_declared_in_or_outside_the_result_code():
    """A module added to the package (a new loader, a new stage) must be declared as something results
    depend on or not (pipeline/code_keys.py), never left out of the key by omission."""
    from pipeline import code_keys

    modules = [rel for rel in code_keys._files(None) if rel.endswith(".py")]
    inside = set(code_keys._files(code_keys.RESULT_CODE))
    outside = set(code_keys._files(tuple(code_keys.OUTSIDE_RESULTS)))
    assert not inside & outside, sorted(inside & outside)
    assert sorted(set(modules) - inside - outside) == []
    assert {"analysis/gaps.py", "load/sqlite.py", "work/tasks.py", "config.py"} <= inside


def test_remembered_module_meanings_serve_only_the_bytes_they_were_digested_from(tmp_path, monkeypatch):
    """A module's meaning digest is remembered between processes (pipeline/code_keys.py MEANINGS_FILE) under
    the SHA-256 of its bytes: the same bytes get the remembered digest (the same as computed afresh), edited
    bytes are digested again."""
    from pipeline import code_keys

    def fresh(text: str) -> str:
        return hashlib.sha256(code_keys.source_meaning(text).encode()).hexdigest()

    def new_process() -> None:
        code_keys.known_meanings.cache_clear()
        code_keys.module_digest.cache_clear()

    module = tmp_path / "m.py"
    module.write_text('"""A docstring."""\nX = 1\n')
    monkeypatch.setattr(code_keys, "MEANINGS_FILE", str(tmp_path / "__pycache__" / "meanings.json"))
    try:
        new_process()
        assert code_keys.module_digest(str(module)) == fresh("X = 1\n")
        code_keys.remember_meanings()
        new_process()
        sha = hashlib.sha256(module.read_bytes()).hexdigest()
        assert code_keys.known_meanings() == {str(module): [sha, fresh("X = 1\n")]}
        # the remembered digest is what is served for these bytes (made recognisable here) ...
        code_keys.known_meanings()[str(module)] = [sha, "remembered"]
        assert code_keys.module_digest(str(module)) == "remembered"
        # ... and edited bytes are digested again
        new_process()
        module.write_text('"""A docstring."""\nX = 2\n')
        assert code_keys.module_digest(str(module)) == fresh("X = 2\n") != fresh("X = 1\n")
    finally:
        monkeypatch.undo()
        new_process()
