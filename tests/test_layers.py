"""The stages keep their layers (issue 25) and the contracts that say what each stage is (issue 46).

The contracts are pyproject.toml's ``[tool.importlinter]``: import-linter's ``layers`` contract over
``pipeline`` (exhaustive: a new module must be placed in a stage), and the ``forbidden`` and ``protected``
contracts the order alone does not say (``engine/`` maps a given function and knows nothing of what it
computes; ``analysis/`` is the math; ``synth/`` is for the command line and the tests; ``work/`` is
mapped and knows no Dask; ``report/`` formats a finished comparison, which ``compare/`` below it makes). They are checked here by running ``lint-imports`` as a real process, and each
is shown able to fail on the import graph with one import planted (import-linter's own contract classes,
in this process). No contract lists an exception. A module of ``pipeline/`` that nothing in ``pipeline/``
imports is a module only tests use (or dead code): only the command's entry point may be one.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import grimp
import pytest
from conftest import REPO

LINT = Path(sys.executable).parent / "lint-imports"

#: What the stages held by a ``forbidden`` contract may import of ``pipeline`` (the contract forbids every
#: other stage): their own modules, these, and nothing else, directly or through another module.
MAY_IMPORT = {
    "engine": {"config", "interrupts", "kinds"},  # its Dask settings, stopping on signals; kinds: config's
    "analysis": {"schema", "model", "config", "arrays", "frames", "code_keys", "kinds", "categories"},  # code_keys: model's
}

#: What ``report/`` may import of ``compare/`` (issue 46 point 4): the finished comparison's words. Every other
#: module of ``compare/`` (a side read, the pairing, the verdict, the deltas, the comparison's making) is forbidden
#: to it by the ``report-formats`` contract, a new one too until it is placed here.
REPORT_MAY_IMPORT_OF_COMPARE = {"comparison"}


def lint(root: Path) -> subprocess.CompletedProcess:
    """``lint-imports`` over the ``pipeline`` package in ``root`` with ``root/pyproject.toml``'s contract."""
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
                          timeout=300)


def settings() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def contracts() -> dict:
    """The contracts by id."""
    return {c["id"]: c for c in settings()["contracts"]}


def stages() -> set[str]:
    """Every stage of ``pipeline/``: its top-level modules and packages."""
    on_disk = {p.stem for p in (REPO / "pipeline").glob("*.py") if p.stem != "__init__"}
    return on_disk | {p.parent.name for p in (REPO / "pipeline").glob("*/__init__.py")}


def test_the_contracts_hold():
    proc = lint(REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"Contracts: {len(contracts())} kept, 0 broken." in proc.stdout


def test_the_contracts_list_no_exception_and_every_stage():
    held = contracts()
    assert set(held) == {"stages", "engine", "analysis", "report-formats", "synth", "work-maps-nothing", "dask",
                         "prometheus"}
    assert not [i for i, c in held.items() if {"ignore_imports", "allow_indirect_imports"} & set(c)]
    layers = held["stages"]
    assert layers["type"] == "layers" and layers["containers"] == ["pipeline"] and layers["exhaustive"] is True
    assert set(layers) == {"id", "name", "type", "containers", "exhaustive", "layers"}
    listed = {name.strip() for layer in layers["layers"] for name in layer.replace(":", "|").split("|")}
    assert listed == stages()


@pytest.mark.parametrize("stage", sorted(MAY_IMPORT))
def test_a_stage_held_to_what_it_may_import_is_forbidden_every_other_stage(stage):
    """The ``forbidden`` lists of engine/ and analysis/ are :data:`MAY_IMPORT`'s complement: a new stage is
    forbidden to them until it is added to one list or the other."""
    held = contracts()[stage]
    assert held["type"] == "forbidden" and held["source_modules"] == [f"pipeline.{stage}"]
    forbidden = {m.removeprefix("pipeline.") for m in held["forbidden_modules"] if m.startswith("pipeline.")}
    assert forbidden == stages() - MAY_IMPORT[stage] - {stage}
    assert not forbidden & MAY_IMPORT[stage]


def test_the_report_is_forbidden_every_module_of_compare_but_its_words():
    """``report-formats`` forbids ``report/`` every module of ``compare/`` but :data:`REPORT_MAY_IMPORT_OF_COMPARE`
    (a new module of ``compare/`` is forbidden until placed), and the stage order puts ``compare`` right below
    ``report`` (``report/`` may format it; ``compare/`` imports nothing of ``report/``, ``runs/`` or the CLI)."""
    held = contracts()["report-formats"]
    assert held["type"] == "forbidden" and held["source_modules"] == ["pipeline.report"]
    modules = {p.stem for p in (REPO / "pipeline" / "compare").glob("*.py") if p.stem != "__init__"}
    assert {m.removeprefix("pipeline.compare.") for m in held["forbidden_modules"]} == \
        modules - REPORT_MAY_IMPORT_OF_COMPARE
    order = [layer.strip() for layer in contracts()["stages"]["layers"]]
    assert order.index("compare") == order.index("report") + 1


@pytest.fixture(scope="module")
def checked():
    """``check(planted=None) -> {contract id: kept}``: every contract of pyproject.toml checked by
    import-linter's own contract classes on the import graph of ``pipeline`` (one graph built for the
    module), with the import ``planted`` (``(importer, imported)``) added for that check only."""
    from importlinter import configuration
    from importlinter.application.use_cases import _get_built_in_contract_types, read_user_options

    configuration.configure()
    options = read_user_options(str(REPO / "pyproject.toml"))
    types = dict(_get_built_in_contract_types())
    held = {c["id"]: types[c["type"]](name=c["name"], session_options=options.session_options, contract_options=c)
            for c in options.contracts_options}
    graph = grimp.build_graph("pipeline", include_external_packages=True, cache_dir=None)

    def check(planted: tuple | None = None) -> dict:
        if planted is None:
            return {i: c.check(graph, verbose=False).kept for i, c in held.items()}
        importer, imported = planted
        assert not graph.direct_import_exists(importer=importer, imported=imported)
        graph.add_import(importer=importer, imported=imported, line_number=1, line_contents="planted")
        try:
            return {i: c.check(graph, verbose=False).kept for i, c in held.items()}
        finally:
            graph.remove_import(importer=importer, imported=imported)

    return check


#: One planted import per way each contract can break, and the contracts it breaks (the others hold).
PLANTED = {
    # the order alone lets the engine import a stage below it: its own contract does not
    "engine imports the loader": (("pipeline.engine.map", "pipeline.load.report"), {"engine"}),
    "engine imports the math": (("pipeline.engine.cluster", "pipeline.analysis.intervals"), {"engine"}),
    "engine imports a data library": (("pipeline.engine.map", "numpy"), {"engine"}),
    "engine imports a utility not listed": (("pipeline.engine.map", "pipeline.io"), {"engine"}),
    "analysis imports the terminal's text": (("pipeline.analysis.cost", "pipeline.text"), {"analysis"}),
    "analysis imports the loader": (("pipeline.analysis.gaps", "pipeline.load.report"), {"analysis", "stages"}),
    "the loader imports synth": (("pipeline.load.report", "pipeline.synth.writer"), {"synth"}),
    "the report imports synth": (("pipeline.report.html", "pipeline.synth"), {"synth"}),
    "work calls the cluster": (("pipeline.work.tasks", "pipeline.engine.cluster"), {"work-maps-nothing"}),
    "work reaches the engine through the fleet": (("pipeline.fleet.reduce", "pipeline.engine.map"),
                                                  {"work-maps-nothing", "stages"}),
    "work asks Dask for its worker": (("pipeline.work.tasks", "distributed"), {"dask"}),
    "the store imports Dask": (("pipeline.store.results", "dask"), {"dask"}),
    "the driver imports dask-jobqueue": (("pipeline.runs.driver", "dask_jobqueue"), {"dask"}),
    "the report writes metrics of its own": (("pipeline.report.summary", "prometheus_client"), {"prometheus"}),
    # compare/ below report/: the view formats a finished comparison, never judges or reads a side itself
    "the report judges a comparison": (("pipeline.report.compare", "pipeline.compare.judge"), {"report-formats"}),
    "the report reads a side": (("pipeline.report.html", "pipeline.compare.sides"), {"report-formats"}),
    "the report makes the comparison": (("pipeline.report.compare", "pipeline.compare.result"), {"report-formats"}),
    "the comparison imports a view": (("pipeline.compare.deltas", "pipeline.report.words"), {"stages"}),
    "the comparison runs a side": (("pipeline.compare.sides", "pipeline.runs.driver"), {"stages"}),
}


def test_every_contract_holds_on_the_graph_the_plants_are_added_to(checked):
    assert checked() == dict.fromkeys(contracts(), True)


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_each_contract_breaks_on_an_import_it_forbids(checked, case):
    planted, broken = PLANTED[case]
    assert checked(planted) == {i: i not in broken for i in contracts()}


def test_every_contract_is_shown_broken():
    assert set().union(*(broken for _, broken in PLANTED.values())) == set(contracts())


def test_an_import_planted_in_a_copy_of_the_package_breaks_the_contract(tmp_path):
    """The check can fail in the real process too, on source text, an import inside a function included: the
    engine importing the report (upward), the fleet importing the engine (siblings that must not know each
    other; through the fleet, work would reach the engine too), work asking Dask for its worker and compare's
    formatter judging a comparison itself (report/ importing compare/'s verdict: downward, but not allowed)."""
    n = len(contracts())
    for case, (module, line, broken) in {
        "upward": ("pipeline/engine/map.py", "    from ..report import html  # noqa\n", 2),  # stages, engine
        "sideways": ("pipeline/fleet/reduce.py", "    from ..engine import map  # noqa\n", 2),  # + work's
        "dask": ("pipeline/work/tasks.py", "    from distributed import get_worker  # noqa\n", 1),
        "the view judges": ("pipeline/report/compare.py", "    from ..compare import judge  # noqa\n", 1),
    }.items():
        root = tmp_path / case
        shutil.copytree(REPO / "pipeline", root / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
        path = root / module
        path.write_text(path.read_text() + "\n\ndef _stray():\n" + line)
        proc = lint(root)
        assert proc.returncode == 1, (case, proc.stdout)
        assert f"Contracts: {n - broken} kept, {broken} broken." in proc.stdout, proc.stdout


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
    graph = grimp.build_graph("pipeline", include_external_packages=False, cache_dir=None)
    assert cycles({m: graph.find_modules_directly_imported_by(m) for m in graph.modules}) == []


def test_every_module_is_used_by_the_product():
    """Every module of ``pipeline/`` is imported by another module of it, but the command's entry point:
    a module only tests import belongs in tests/helpers."""
    graph = grimp.build_graph("pipeline", include_external_packages=False, cache_dir=None)
    packages = {p.parent.relative_to(REPO).as_posix().replace("/", ".") for p in (REPO / "pipeline").rglob("__init__.py")}
    entry = {spec.split(":")[0] for spec in tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
             ["scripts"].values()}
    unused = sorted(m for m in graph.modules
                    if m not in packages | entry and not graph.find_modules_that_directly_import(m))
    assert unused == []


#: Every import inside a function of ``pipeline/`` (file -> reason -> the modules so imported, as written):
#: the only two reasons are start-up (a module ``gpu-idle --help`` imports: cli.py, text.py,
#: report/command.py; or a reader that must stay light) and a heavy dependency a module's other callers do
#: not need (tests/test_startup.py holds which libraries each command loads). Every other import is at the
#: top of its module, where a reader sees the edge.
FUNCTION_IMPORTS = {
    "pipeline/cli.py": {
        "start-up: `gpu-idle --help` imports cli.py alone; each command imports the stages it runs": {
            ".accounting.hooks", ".accounting.joined", ".analysis.analyse", ".analysis.cost", ".analysis.fixfirst", ".config",
            ".engine.cluster", ".engine.slurm", ".fleet.prom", ".fleet.reduce", ".hashing", ".kinds", ".load.ahead",
            ".memory",
            ".inputs.discover", ".inputs.export", ".io", ".load.cache", ".progress", ".report.compare",
            ".report.medical", ".report.summary", ".report.teams", ".report.words", ".runs.compare", ".runs.driver",
            ".runs.sweep", ".schema", ".store.results", ".synth", ".compare.comparison"},
        "start-up: modules `gpu-idle --help` does not load (pandas ~0.3 s; dataclasses)": {
            "pandas", "dataclasses"},
    },
    "pipeline/report/command.py": {
        "start-up: cli.py imports this command at its top; the report's stages wait for the command": {
            "..config", "..io", "..text", ".html", ".rendered"},
    },
    "pipeline/text.py": {"start-up: cli.py imports text.py at its top; pandas only to make a CSV cell safe": {
        "pandas"}},
    "pipeline/load/sqlite.py": {
        "light reader: bench/run.py's reader reference imports this module alone, without pandas (model's)": {
            "..model"},
        "ADBC, pyarrow, threads: only to read columns (`gpu-idle report` imports this module, reads none)": {
            "pyarrow", "pyarrow.compute", "adbc_driver_manager", "adbc_driver_sqlite", "concurrent.futures"},
    },
    "pipeline/load/tables.py": {"light reader: load/sqlite.py imports it (see there)": {"..model"}},
    "pipeline/load/ahead.py": {
        "start-up: cli.py starts reading ahead before it imports numpy or the stages; the thread imports the reader":
            {"sqlite3", "..memory", ".queries", ".sqlite", ".tables"}},
    "pipeline/memory.py": {"start-up: cli.py imports its collector pause before the stages (and numpy, which it pauses for)": {
        "numpy"}},
    "pipeline/load/limits.py": {"light reader: load/sqlite.py imports it (see there)": {"..config"}},
    "pipeline/code_keys.py": {"importlib.metadata (~10 ms): only the build fingerprint a Dask run checks": {
        "importlib.metadata"}},
    "pipeline/config.py": {
        "Dask (~0.1 s): only a scheduler address or a memory size to parse": {"dask.config", "dask.utils"},
        "pydantic, yaml (~40 ms): only a config file read; Config() defaults need neither": {"pydantic", "yaml"},
    },
    "pipeline/engine/cluster.py": {
        "Dask (~0.5 s): a report analysed in this process never starts a cluster": {
            "dask", "distributed", "distributed.comm", "distributed.comm.addressing", "distributed.security"},
        "asyncio (~10 ms): only to probe a scheduler address, or filter its log": {"asyncio"},
        "psutil: only where sysconf cannot tell the machine's memory": {"psutil"},
    },
    "pipeline/engine/map.py": {"Dask (~0.5 s): only the OnDask backend and its tasks": {
        "distributed", "distributed.scheduler"}},
    "pipeline/engine/slurm.py": {"dask-jobqueue, Dask (~0.5 s): only with dask.slurm": {
        "dask_jobqueue", "distributed"}},
    "pipeline/inputs/storage.py": {"fsspec (~40 ms): only a remote URL": {"fsspec"}},
    "pipeline/store/results.py": {
        "fsspec (~40 ms): only a remote report's identity": {"fsspec"},
        "the loader (~0.17 s) and the agreement (~80 ms): `gpu-idle report` reads manifests without them": {
            "..load.cache", "..work.agreement"},
        "the reader's threads, stored plans (~35 ms): a run's, not `gpu-idle report`'s, which imports this module": {
            "..load.sqlite", "..analysis.iterations"},
    },
    "pipeline/load/capture.py": {
        "the export's reader: only export_source; fleet/reduce.py imports this module (`gpu-idle report` too)": {
            ".diagnostics", ".sqlite", ".tables"},
    },
    "pipeline/report/html.py": {
        "the GPU pages and their record: only the report; compare.py renders with this module": {
            ".gpu_page", ".rendered"}},
    "pipeline/progress.py": {"tqdm (~15 ms): only a bar on a terminal": {"tqdm"}},
    "pipeline/compare/sides.py": {
        "the loader (~0.25 s): only when a side's kernels are read": {"..load.report", "..work.tasks"}},
    "pipeline/report/compare.py": {
        "jinja2, markupsafe, the report's templates: only compare.html": {".html", ".jinja", ".words", "markupsafe"},
    },
    "pipeline/runs/driver.py": {"matplotlib, jinja2 (~0.1 s): only when the run draws page timelines": {
        "..report.gpu_page"}},
    "pipeline/runs/sweep.py": {"jinja2, markdown, matplotlib (~0.1 s): only the night's HTML": {"..report.html"}},
}


def function_imports() -> dict:
    """``{file: {module as written}}`` of every ``import`` inside a function of ``pipeline/`` (``ast``)."""
    import ast

    found: dict = {}
    for path in sorted((REPO / "pipeline").rglob("*.py")):
        for fn in ast.walk(ast.parse(path.read_text())):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.ImportFrom):
                        name = "." * node.level + (node.module or node.names[0].name)
                    elif isinstance(node, ast.Import):
                        name = node.names[0].name
                    else:
                        continue
                    found.setdefault(path.relative_to(REPO).as_posix(), set()).add(name)
    return found


def test_every_import_inside_a_function_is_listed_with_its_reason():
    """The imports inside functions are exactly :data:`FUNCTION_IMPORTS` (one listed there and gone fails too)."""
    listed = {f: set().union(*reasons.values()) for f, reasons in FUNCTION_IMPORTS.items()}
    assert function_imports() == listed


def test_function_imports_finds_an_import_inside_a_function(tmp_path, monkeypatch):
    """The finder sees imports nested in methods and inner functions, relative ones with their dots."""
    package = tmp_path / "pipeline"
    package.mkdir()
    (package / "m.py").write_text("import os\n\nclass A:\n    def f(self):\n        def g():\n"
                                  "            from ..x import y\n        import json\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert function_imports() == {"pipeline/m.py": {"..x", "json"}}
