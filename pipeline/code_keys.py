"""Digests of the pipeline's own code, by what each kind of stored output depends on.

A stored output is reused only while the code that made it is unchanged; which code that is, is
declared here once, per kind of output (docs/operations/stores.md lists every store and what
invalidates it):

- :data:`RESULT_CODE`: what a report's stored result (its fleet rows, rosters, timelines and plans,
  :mod:`pipeline.store.results`) is computed by: the loaders, the exports and staging, the analysis,
  the engine's per-report work, the model and configuration, and the result's own storage format.
  Not the report's rendering (``report/``), the generators (``synth/``), the CLI or the sweep.
- :data:`LOADER_CODE`: what a columnar cache entry (a loaded export, :mod:`pipeline.load.cache`) is made
  by: the loaders and what they import. The entry records its digest (:func:`loader_code`); an entry of
  other code is a cache miss.
- :data:`DOCUMENT_CODE`: what an output folder's documents (tables, ``gpus/``, ``records/``) are
  written by besides: the medical records and the driver (a folder made by other code is written
  again; nothing is analysed again).
- :func:`rendered_code`: what the HTML report and the GPU pages are rendered by: every module but
  the generators, the CLI and ``gpu-idle compare``'s own modules and page, and the report's templates (a template edit renders them again and
  analyses nothing).

Python modules are digested by their meaning, not their text (:func:`module_digest`): the parsed
syntax tree without docstrings, so that a comment, a docstring or a blank line changes no key.
Templates are digested by their bytes. Parsing every module costs about half a second of CPU, so a
module's meaning digest is remembered beside its bytecode (:func:`known_meanings`), under the SHA-256 of
its bytes: any edit is digested again, and the digests are the same as computed afresh.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import os
import platform
import sys
import tempfile

#: The ``pipeline`` package folder.
PACKAGE = os.path.dirname(os.path.abspath(__file__))

#: Paths under the package (folders: every ``*.py`` below them) that a stored result depends on.
RESULT_CODE = ("load", "analysis", "engine", "work", "fleet", "inputs", "model.py", "schema.py", "config.py",
               "arrays.py", "frames.py", "text.py", "memory.py", "io.py", "checksums.py", "snapshot.py", "store",
               "kinds.py", "categories.py", "hashing.py")
#: Every other path of the package, with why no stored result depends on it: each module is in
#: :data:`RESULT_CODE` or here (tests/test_result_keys.py holds it), so a new module is classified when added.
OUTSIDE_RESULTS = {
    "__init__.py": "the package's version and a note on its layout",
    "code_keys.py": "these digests (what they cover changes the digests themselves)",
    "cli.py": "the command line: parses options, prints tables and messages",
    "progress.py": "progress lines for people",
    "interrupts.py": "how a run ends on a signal",
    "report": "renders stored results: the report, the GPU pages, the medical records",
    "report/compare.py": "gpu-idle compare's formatter: a finished comparison written out; stores nothing",
    "compare": "gpu-idle compare: two sides' stored results paired, judged and measured; stores nothing",
    "runs/compare.py": "gpu-idle compare end to end: its sides opened or run, compared, written; stores nothing",
    "synth": "generators of example and test inputs",
    "runs/__init__.py": "the package marker",
    "runs/driver.py": "which reports are analysed and which reused; writes the output folder",
    "runs/sweep.py": "the nightly schedule, its nights and history",
    "accounting": "who held the GPUs: the scheduler's accounting joined to the fleet table after the reduce",
}
#: Paths under the package that turn an export or a trace into a :class:`~pipeline.model.Report` (the loaders and
#: every module they import): what a columnar cache entry depends on (:func:`loader_code`).
LOADER_CODE = ("load", "inputs/gzip_size.py", "model.py", "arrays.py", "frames.py", "memory.py", "snapshot.py",
               "checksums.py", "io.py", "kinds.py", "config.py", "categories.py", "analysis/__init__.py",
               "analysis/graphcapture.py", "hashing.py")
#: :data:`RESULT_CODE` and what writes an output folder's documents from results.
DOCUMENT_CODE = RESULT_CODE + ("report/medical.py", "runs/driver.py", "accounting")
#: Paths left out of :func:`rendered_code` (they draw nothing the report or a GPU page shows; the comparison's own
#: page is rendered afresh every time).
NOT_RENDERED = ("synth", "cli.py", "compare", "runs/compare.py", "report/compare.py", "report/templates/compare.html.j2")
#: Files digested by their bytes (not Python): the report's templates.
TEMPLATE_SUFFIXES = (".j2",)


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` without the docstring of its module, classes and functions (a body left empty keeps
    a ``pass``, so that the tree stays valid)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


#: Presentation text inside modules a stored result depends on: what people read, never what a result holds
#: (docs/operations/stores.md). Per module (a package path): the calls whose arguments are text for people
#: (``{function name: (positions, keywords)}``) and the module-level names bound to such text. The schema is the
#: row contract (names, dtypes, units, rollups, outputs: keyed) beside its presentation text (each column's
#: meaning, the column groups' notes, the printed headers: not keyed), so a column's meaning text changes no key.
PRESENTATION = {
    "schema.py": {"calls": {"_c": ((1, 2), ("meaning", "group")), "_group": ((1,), ("doc",)), "_r": ((4,), ("meaning",)),
                            "Printed": ((1,), ("header",)),
                            "Column": ((3,), ("meaning",)), "RollupColumn": ((4,), ("meaning",)),
                            "Where": ((2,), ("text",)), "Custom": ((4,), ("text",)), "_t": ((1,), ("meaning",)),
                            "Table": ((2,), ("holds",))},
                  "names": ("NOTES",)},
}
#: The version of :func:`source_meaning`'s rules: a remembered digest of other rules is computed again.
MEANING_RULES = 2


class _Presentation(ast.NodeTransformer):
    """Blank the presentation text :data:`PRESENTATION` declares for one module: each declared call's text
    arguments and each declared name's value become ``""``."""

    def __init__(self, spec: dict):
        self.calls, self.names = spec.get("calls", {}), set(spec.get("names", ()))

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name in self.calls:
            positions, keywords = self.calls[name]
            node.args = [ast.Constant("") if i in positions else a for i, a in enumerate(node.args)]
            for kw in node.keywords:
                if kw.arg in keywords:
                    kw.value = ast.Constant("")
        return node

    def _assigned(self, node, targets) -> ast.AST:
        if any(isinstance(t, ast.Name) and t.id in self.names for t in targets):
            node.value = ast.Constant("")
            return node
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        return self._assigned(node, node.targets)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        return self._assigned(node, [node.target])


def _package_path(name: str) -> str | None:
    """``name`` (a file path) relative to :data:`PACKAGE`, ``/``-separated; None outside it."""
    rel = os.path.relpath(os.path.abspath(name), PACKAGE).replace(os.sep, "/") if name != "<module>" else ".."
    return None if rel.startswith("..") else rel


def source_meaning(source: str | bytes, name: str = "<module>") -> str:
    """The meaning of Python ``source``: ``ast.dump`` of its syntax tree without docstrings, comments,
    layout or line numbers, and, for a module :data:`PRESENTATION` names (``name``: its path), without its
    presentation text. Raises SyntaxError when it does not parse."""
    tree = _strip_docstrings(ast.parse(source, filename=name))
    spec = PRESENTATION.get(_package_path(name) or "")
    if spec:
        tree = _Presentation(spec).visit(tree)
    return ast.dump(tree)


#: The file, in the package's ``__pycache__`` (as Python's bytecode), that remembers the modules' meaning
#: digests between processes (:func:`known_meanings`).
MEANINGS_FILE = os.path.join(PACKAGE, "__pycache__", f"code-meanings.{sys.implementation.cache_tag}.json")


@functools.lru_cache(maxsize=1)
def known_meanings() -> dict:
    """``{path: [SHA-256 of the file's bytes, its meaning digest]}`` remembered in :data:`MEANINGS_FILE`
    by earlier processes of this Python version (empty when there is none or it cannot be read); this
    process adds to it (:func:`remember_meanings`). Only a speed-up: an entry serves only the bytes it
    was computed from."""
    try:
        with open(MEANINGS_FILE, encoding="utf-8") as fh:
            doc = json.load(fh)
        if doc.get("python") == sys.version and doc.get("rules") == MEANING_RULES and isinstance(doc.get("modules"),
                                                                                                 dict):
            return dict(doc["modules"])
    except (OSError, ValueError, AttributeError):
        pass
    return {}


_NEW_MEANINGS: set[str] = set()


def remember_meanings() -> None:
    """Write :func:`known_meanings` back to :data:`MEANINGS_FILE` when this process digested a module it did
    not hold (atomically; a folder that cannot be written is no error: the digests are computed again next
    time)."""
    if not _NEW_MEANINGS:
        return
    _NEW_MEANINGS.clear()
    folder = os.path.dirname(MEANINGS_FILE)
    try:
        os.makedirs(folder, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".code-meanings.", suffix=".tmp", dir=folder)
        try:
            os.chmod(tmp, 0o644)   # as Python's bytecode beside it
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"python": sys.version, "rules": MEANING_RULES, "modules": known_meanings()}, fh,
                          sort_keys=True)
            os.replace(tmp, MEANINGS_FILE)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


@functools.lru_cache(maxsize=None)
def module_digest(path: str) -> str:
    """SHA-256 hex digest of the Python file ``path``'s :func:`source_meaning` (a file that does not
    parse: of its bytes). Read once per process; the meaning of bytes digested before (by any process)
    is taken from :func:`known_meanings`. Raises OSError when it cannot be read."""
    with open(path, "rb") as fh:
        data = fh.read()
    known, content = known_meanings(), hashlib.sha256(data).hexdigest()
    entry = known.get(path)
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == content:
        return entry[1]
    try:
        data = source_meaning(data, path).encode()
    except (SyntaxError, ValueError):
        pass
    digest = hashlib.sha256(data).hexdigest()
    known[path] = [content, digest]
    _NEW_MEANINGS.add(path)
    return digest


def _under(rel: str, parts: tuple[str, ...]) -> bool:
    """Whether the package path ``rel`` is one of ``parts`` or in one of those folders."""
    return any(rel == p or rel.startswith(p + "/") for p in parts)


def _files(parts: tuple[str, ...] | None, excluded: tuple[str, ...] = ()) -> list[str]:
    """The ``*.py``, C (the loader's ``load/_btree.c``) and template files (relative to :data:`PACKAGE`, ``/``-separated, sorted) under
    ``parts`` (None: the whole package) and not under ``excluded``."""
    found = []
    for folder, dirs, files in os.walk(PACKAGE):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            rel = os.path.relpath(os.path.join(folder, name), PACKAGE).replace(os.sep, "/")
            if (name.endswith((".py", ".c") + TEMPLATE_SUFFIXES) and (parts is None or _under(rel, parts))
                    and not _under(rel, excluded)):
                found.append(rel)
    return sorted(found)


def code_digest_of(parts: tuple[str, ...] | None, excluded: tuple[str, ...] = ()) -> str:
    """SHA-256 hex digest of the code under ``parts`` (None: the whole package) but not ``excluded``:
    each file's path and its :func:`module_digest` (a template or C source: its bytes' SHA-256)."""
    digest = hashlib.sha256()
    for rel in _files(parts, excluded):
        path = os.path.join(PACKAGE, rel)
        if rel.endswith(".py"):
            one = module_digest(path)
        else:
            with open(path, "rb") as fh:
                one = hashlib.sha256(fh.read()).hexdigest()
        digest.update(f"{rel}\0{one}\n".encode())
    remember_meanings()
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def result_code() -> str:
    """Digest of :data:`RESULT_CODE` (:func:`code_digest_of`); once per process."""
    return code_digest_of(RESULT_CODE)


@functools.lru_cache(maxsize=1)
def document_code() -> str:
    """Digest of :data:`DOCUMENT_CODE`; once per process."""
    return code_digest_of(DOCUMENT_CODE)


@functools.lru_cache(maxsize=1)
def rendered_code() -> str:
    """Digest of what renders the report and the GPU pages: the whole package but :data:`NOT_RENDERED`, templates
    included; once per process."""
    return code_digest_of(None, NOT_RENDERED)


@functools.lru_cache(maxsize=1)
def loader_code() -> str:
    """Digest of :data:`LOADER_CODE`; once per process."""
    return code_digest_of(LOADER_CODE)


#: Packages whose version a result computed on a Dask worker may depend on (the arrays, the tables, their
#: files, and how the task and its result travel): a worker must have the client's (:func:`build_fingerprint`).
BUILD_PACKAGES = ("numpy", "pandas", "pyarrow", "dask", "distributed", "cloudpickle", "msgpack")


def build_fingerprint() -> dict:
    """What a process computing results must share with the one that stores them: ``{"code":``
    :func:`result_code` ``, "python": version, "packages": {name: version}}`` (:data:`BUILD_PACKAGES`; a
    package that is not installed: ``None``). The Dask client runs it on every worker before sending work
    (:mod:`pipeline.engine.map`)."""
    from importlib.metadata import PackageNotFoundError, version

    def installed(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    return {"code": result_code(), "python": platform.python_version(),
            "packages": {name: installed(name) for name in BUILD_PACKAGES}}
