"""The stages keep their layers (issue 25): each imports only the stages below it, with no cycle.

The contract is pyproject.toml's ``[tool.importlinter]`` (import-linter's ``layers`` contract over
``pipeline``, exhaustive: a new module must be placed in a stage), checked here by running
``lint-imports`` as a real process; it lists no exception. A module of ``pipeline/`` that nothing in
``pipeline/`` imports is a module only tests use (or dead code): only the command's entry point may be one.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
from conftest import REPO

LINT = Path(sys.executable).parent / "lint-imports"


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the ``pipeline`` package in ``root`` with ``root/pyproject.toml``'s contract."""
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          timeout=300)


def contract() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def test_the_stages_import_only_the_stages_below_them():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Contracts: 1 kept, 0 broken." in proc.stdout


def test_the_contract_lists_no_exception_and_every_stage():
    (stages,) = contract()["contracts"]
    assert stages["type"] == "layers" and stages["containers"] == ["pipeline"] and stages["exhaustive"] is True
    assert set(stages) == {"id", "name", "type", "containers", "exhaustive", "layers"}  # no ignore_imports
    listed = {name.strip() for layer in stages["layers"] for name in layer.replace(":", "|").split("|")}
    on_disk = {p.stem for p in (REPO / "pipeline").glob("*.py") if p.stem != "__init__"}
    on_disk |= {p.parent.name for p in (REPO / "pipeline").glob("*/__init__.py")}
    assert listed == on_disk


def test_an_import_from_a_higher_stage_or_a_sibling_breaks_the_contract(tmp_path):
    """The check can fail: the engine importing the report (upward, even inside a function) and the
    fleet importing the engine (siblings that must not know each other) are each reported."""
    for case, (module, line) in {
        "upward": ("pipeline/engine/map.py", "    from ..report import html  # noqa\n"),
        "sideways": ("pipeline/fleet/reduce.py", "    from ..engine import map  # noqa\n"),
    }.items():
        root = tmp_path / case
        shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
        path = root / module
        path.write_text(path.read_text() + "\n\ndef _stray():\n" + line)
        proc = lint(root)
        assert proc.returncode == 1, (case, proc.stdout)
        assert "Contracts: 0 kept, 1 broken." in proc.stdout, proc.stdout


def cycles(imports: dict) -> list[list[str]]:
    """The strongly connected components of more than one module of ``imports`` (module -> modules it
    imports): each is an import cycle (Tarjan's algorithm, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(imports):
        if root in index:
            continue
        work = [(root, iter(sorted(imports[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(imports.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        out.append(sorted(group))
    return out


def test_cycles_finds_a_loop():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    """No import cycle between modules, inside a stage too (the layers contract sees only stages)."""
    graph = grimp.build_graph("pipeline", include_external_packages=False)
    assert cycles({m: graph.find_modules_directly_imported_by(m) for m in graph.modules}) == []


def test_every_module_is_used_by_the_product():
    """Every module of ``pipeline/`` is imported by another module of it, but the command's entry point:
    a module only tests import belongs in tests/helpers."""
    graph = grimp.build_graph("pipeline", include_external_packages=False)
    packages = {p.parent.relative_to(REPO).as_posix().replace("/", ".") for p in (REPO / "pipeline").rglob("__init__.py")}
    entry = {spec.split(":")[0] for spec in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
             ["scripts"].values()}
    unused = sorted(m for m in graph.modules
                    if m not in packages | entry and not graph.find_modules_that_directly_import(m))
    assert unused == []
