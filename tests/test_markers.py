"""Every test that needs a system package says so (issue 25, point 6).

`make check` skips the tests marked ``needs_nsys``, ``needs_chromium``, ``needs_slurm`` or ``needs_promtool``
(``pytest --quick``, tests/conftest.py), so a test that needs one of them without its marker would
fail there. The conftest finds what each collected test reaches (the fixtures and helpers of
``SYSTEM_NEEDS``, through its fixtures and the module functions it calls); these tests collect the
suite in a real pytest process and compare that with the markers.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, SYSTEM_NEEDS


def collect(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """``pytest --collect-only --list-system-needs`` (and ``args``) on ``folder``, as a new process."""
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                           "--collect-only", "--list-system-needs", *args], cwd=folder, capture_output=True,
                          text=True, timeout=600, check=False)


def needs(proc: subprocess.CompletedProcess) -> dict[str, tuple[set, set]]:
    """``nodeid -> (markers, needs found)`` from ``--list-system-needs`` lines."""
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split("\t") for line in proc.stdout.splitlines() if line.startswith("NEEDS\t")]
    return {node: (set(filter(None, marks.split(","))), set(filter(None, found.split(","))))
            for _, node, marks, found in rows}


@pytest.mark.slow
def test_every_test_that_needs_a_system_package_is_marked():
    got = needs(collect(REPO))
    wrong = {node: pair for node, pair in got.items() if pair[0] != pair[1]}
    assert not wrong, "marker (left) differs from what the test needs (right): " + "; ".join(
        f"{node}: {sorted(m)} != {sorted(f)}" for node, (m, f) in sorted(wrong.items()))
    for marker in SYSTEM_NEEDS:  # the suite has tests of each kind: the finding works on the real suite
        assert any(marker in found for _, found in got.values()), marker


PLANTED = '''
import pytest
from conftest import chromium_load


@pytest.fixture
def nsys():
    pytest.fail("not run here")


@pytest.fixture
def slurm():
    pytest.fail("not run here")


@pytest.fixture
def recording(nsys):
    return nsys


def look(page):
    return chromium_load(page, page, "1,1")


def test_page_through_a_helper(tmp_path):
    look(tmp_path)


def test_export_through_a_fixture(recording):
    pass


@pytest.mark.needs_slurm
def test_marked(slurm):
    pass


@pytest.mark.needs_chromium
def test_marked_chromium(tmp_path):
    look(tmp_path)


def test_plain(tmp_path):
    pass
'''


def planted(tmp_path: Path) -> Path:
    """A folder with the suite's conftest and pytest settings and a test file of planted cases."""
    shutil.copy(REPO / "tests" / "conftest.py", tmp_path / "conftest.py")
    shutil.copy(REPO / "tests" / "suite_costs.py", tmp_path / "suite_costs.py")  # the conftest imports its hooks
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "test_planted.py").write_text(PLANTED, encoding="utf-8")
    return tmp_path


def test_a_test_reaching_a_system_package_unmarked_is_found(tmp_path):
    """Reached through a module helper, through a fixture's fixture, or directly: each is found."""
    got = {node.split("::")[1]: pair for node, pair in needs(collect(planted(tmp_path), "--rootdir", str(tmp_path),
                                                                      "test_planted.py")).items()}
    assert got == {"test_page_through_a_helper": (set(), {"needs_chromium"}),
                   "test_export_through_a_fixture": (set(), {"needs_nsys"}),
                   "test_marked": ({"needs_slurm"}, {"needs_slurm"}),
                   "test_marked_chromium": ({"needs_chromium"}, {"needs_chromium"}),
                   "test_plain": (set(), set())}


def test_quick_skips_the_marked_tests_saying_why(tmp_path):
    folder = planted(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs",
                           "--quick", "--rootdir", str(folder), "test_planted.py", "-k", "marked or plain"],
                          cwd=folder, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "1 passed, 2 skipped" in proc.stdout, proc.stdout[-3000:]
    skipped = [line for line in proc.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 2, proc.stdout[-3000:]
    assert any("make check: needs Debian's slurm-wlm and munge (`make slurm`, as root); `make test` runs it" in line
               for line in skipped), skipped
    assert any("make check: needs Debian's chromium (`make chromium`, as root)" in line for line in skipped), skipped


def test_no_test_names_a_machines_own_path():
    """The real profiles are found beside the clone (conftest.PROFILES, ``GPU_IDLE_PROFILES``), never at
    a path of one machine: CI clones elsewhere, and a test reading ``/work/shared/...`` fails there
    (one did)."""
    here = Path(__file__).resolve().parent
    named = [f"{p.name}:{n}" for p in sorted(here.glob("*.py")) if p.name != Path(__file__).name
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"""["'](/work|/home|/root|/tmp/pytest)/""", line)]
    assert named == []
