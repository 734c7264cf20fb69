"""Start-up cost, held structurally (issue 16): which libraries a command imports, not how long
it takes (times depend on the machine; the bench measures them).

``gpu-idle --version`` (and ``--help``) imports click and nothing heavy; ``gpu-idle run`` over
one local report analyses it in its own process without the cluster (Dask, distributed), the
plotting and templating libraries of ``gpu-idle report`` (matplotlib, jinja2, markdown), object
storage (fsspec, s3fs), psutil, YAML (no config file given), pydantic (nothing to validate: the
defaults alone) or the ADBC DB-API module (which imports ``pyarrow.dataset``); given a setting to
check (``--min-gap-ns``), it validates it with pydantic; a word of a ``Literal`` setting (``--window span``) needs none. Each probe runs in a fresh interpreter and prints the top-level
packages loaded once the command is done.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from conftest import PROFILES, REPO

#: Libraries that only some paths need (import them there, never at start-up).
HEAVY = {"pandas", "numpy", "pyarrow", "dask", "distributed", "matplotlib", "jinja2", "markdown", "pydantic",
         "fsspec", "s3fs", "botocore", "aiobotocore", "psutil", "yaml", "adbc_driver_manager", "adbc_driver_sqlite",
         "tornado", "msgpack", "toolz", "tqdm", "scipy"}

PROBE = """
import json, os, sys
os.environ["GPU_IDLE_CACHE"] = {cache!r}
from pipeline.cli import main
try:
    main({args!r})
except SystemExit:
    pass
print("@@" + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r} or m in {extra!r})))
"""


def loaded(args: list[str], tmp_path, extra=()) -> set[str]:
    """Modules among :data:`HEAVY` (any depth) and ``extra`` that ``gpu-idle ARGS`` has loaded when done."""
    code = PROBE.format(cache=str(tmp_path / "cache"), args=args, heavy=HEAVY, extra=set(extra))
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("@@"))
    return set(json.loads(line[2:]))


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"]])
def test_version_and_help_import_nothing_heavy(args, tmp_path):
    assert loaded(args, tmp_path) == set()


def test_one_local_report_loads_only_what_its_analysis_needs(tmp_path):
    report = PROFILES / "tiny_2kernels.sqlite"
    assert report.exists(), f"real export not found: {report}"
    mods = loaded(["run", str(report), "--out", str(tmp_path / "out")], tmp_path,
                  extra={"pyarrow.dataset", "adbc_driver_manager.dbapi"})
    top = {m.split(".")[0] for m in mods}
    # What the analysis itself is made of ...
    assert {"pandas", "numpy", "pyarrow", "adbc_driver_sqlite"} <= top
    # ... and nothing of the cluster, the report, object storage, config validation or the DB-API layer.
    assert top & {"dask", "distributed", "tornado", "msgpack", "matplotlib", "jinja2", "markdown", "fsspec", "s3fs",
                  "botocore", "psutil", "yaml", "pydantic", "tqdm", "scipy"} == set()
    assert mods & {"pyarrow.dataset", "adbc_driver_manager.dbapi"} == set()
    assert (tmp_path / "out" / "fleet.csv").exists()


def test_a_window_word_given_needs_no_pydantic(tmp_path):
    """``--window span`` is one of the setting's words: taken as it is, without pydantic's ~0.1 s import."""
    mods = loaded(["run", str(PROFILES / "tiny_2kernels.sqlite"), "--out", str(tmp_path / "out"), "--window", "span"],
                  tmp_path)
    assert "pydantic" not in {m.split(".")[0] for m in mods}
    with open(tmp_path / "out" / "fleet.csv", newline="") as fh:
        assert [row["window_rule"] for row in csv.DictReader(fh)] == ["span"]   # the word was applied


def test_whole_numbers_in_range_need_no_pydantic(tmp_path):
    """``--min-gap-ns 500000 --workers 3``: whole numbers within their settings' bounds, taken as they are."""
    report = PROFILES / "tiny_2kernels.sqlite"
    mods = loaded(["run", str(report), "--out", str(tmp_path / "out"), "--min-gap-ns", "500000", "--workers", "3"],
                  tmp_path)
    assert "pydantic" not in {m.split(".")[0] for m in mods}
    assert (tmp_path / "out" / "fleet.csv").exists()


def test_a_setting_given_is_validated_with_pydantic(tmp_path):
    """Any other value (a share, from a config file) is checked by pydantic."""
    report = PROFILES / "tiny_2kernels.sqlite"
    config = tmp_path / "c.yaml"
    config.write_text("analysis:\n  actionable_pct: 5.0\n")
    mods = loaded(["run", str(report), "--out", str(tmp_path / "out"), "--config", str(config)], tmp_path)
    assert "pydantic" in {m.split(".")[0] for m in mods}


@pytest.mark.parametrize("item", ["rel/x.sqlite", "./x", ".", "./", "/tmp/", "/", "~/a/", "~", "file:///tmp/x",
                                  "file:rel", "local:///tmp/a/", "local:x", "a//b/", "..", "../x", "x/./y",
                                  "file://~/x"])
def test_local_paths_are_spelled_as_fsspec_spells_them(item):
    """Discovery names a local file or folder without fsspec (:func:`local_path`); the paths it
    reports must be those fsspec's local filesystem gave before."""
    import fsspec

    from pipeline.inputs.discover import local_path

    assert local_path(item) == fsspec.core.url_to_fs(item)[1]


def test_a_command_loads_its_stages_with_the_collector_paused_and_freezes_them_in_its_own_process(tmp_path, monkeypatch):
    """``run`` imports its stages with the cyclic garbage collector paused (its passes over the ~70k objects of
    pandas, pyarrow and the pipeline cost ~0.1 s of each start) and enabled again after; only in the ``gpu-idle``
    process itself (``entry``) are those objects frozen, never in a caller's process (here, the tests')."""
    import gc

    from conftest import run_cli

    from pipeline import cli

    frozen, states = [], []
    monkeypatch.setattr(cli.gc, "freeze", lambda: frozen.append(True))
    with cli._start_up():
        states.append(gc.isenabled())
    assert states == [False] and gc.isenabled() and frozen == []   # not gpu-idle's own process: nothing frozen
    gc.disable()
    try:
        with cli._start_up():
            pass
        assert not gc.isenabled()   # paused by its caller: left paused
    finally:
        gc.enable()
    monkeypatch.setattr(cli, "_OWN_PROCESS", True)
    run_cli("run", str(PROFILES / "tiny_2kernels.sqlite"), "--out", str(tmp_path / "out"),
            env={"GPU_IDLE_CACHE": str(tmp_path / "cache")})
    assert frozen == [True] and gc.isenabled()
