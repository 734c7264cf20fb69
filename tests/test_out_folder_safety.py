"""Issue 23's remaining gaps, each through the real ``gpu-idle`` process: a person's ``.x.y.tmp`` is not a
leftover of the product (point 1: only ``.<name>.<12 hex>.tmp`` is); ``report`` never overwrites a file the
product cannot prove it wrote (point 1); no raw ESC from a file name reaches the terminal by the progress
bar, a WARNING line, a log record or matplotlib (point 12); a truth file saved with a UTF-8 byte order
mark is still gpu-idle's own (point 13)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import run_cli, small_reports

from pipeline.fleet.outputs import PAGES_DIR
from pipeline.io import is_leftover, temp_name

@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two small reports (2 GPUs each), jobs named after the files."""
    return small_reports(tmp_path_factory.mktemp("outsafety"), "job", 2, seed=2323)


def plant(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


def contents(folder: Path, rels) -> dict[str, str]:
    return {rel: (folder / rel).read_text() for rel in rels if (folder / rel).exists()}


# ---- point 1: the product's temporary names, and nothing else, are leftovers ----------------------

def test_the_one_temporary_name_is_dot_name_dot_12_hex_dot_tmp():
    name = temp_name("fleet.csv")
    assert name.startswith(".fleet.csv.") and name.endswith(".tmp")
    random = name[len(".fleet.csv."):-len(".tmp")]
    assert len(random) == 12 and set(random) <= set("0123456789abcdef")
    assert is_leftover(name) and is_leftover(".fleet.csv.0123456789ab.tmp")
    for theirs in [".x.y.tmp", ".important.tmp", ".notes.backup.tmp", ".fleet.csv.0123456789AB.tmp",
                   ".fleet.csv.0123456789a.tmp", ".fleet.csv.0123456789abc.tmp", ".fleet.csv.k2j3l4.tmp"]:
        assert not is_leftover(theirs), theirs


#: A person's hidden temporary-looking files, where the product writes and deeper.
THEIRS = {".x.y.tmp": "x", ".important.tmp": "important", ".notes.backup.tmp": "notes",
          "gpus/.x.y.tmp": "gpu x", "records/.notes.backup.tmp": "record notes",
          f"{PAGES_DIR}/.draft.v2.tmp": "draft", "deep/nested/.important.tmp": "deep"}


def test_a_persons_tmp_files_survive_a_run_and_the_products_leftovers_go(reports, tmp_path):
    """A run folder with a person's ``.x.y.tmp`` files and two leftovers of a killed run (the product's own
    pattern): the rerun removes exactly the two leftovers (before: every ``.a.b.tmp`` at the depths it
    writes was deleted)."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out))
    plant(out, THEIRS)
    ours = [".fleet.csv.0a1b2c3d4e5f.tmp", "gpus/.x.json.ffffffffffff.tmp"]
    plant(out, {rel: "half-written by a killed run" for rel in ours})
    run_cli("run", str(reports / "job1.sqlite"), "--out", str(out))
    assert contents(out, THEIRS) == THEIRS
    assert [rel for rel in ours if (out / rel).exists()] == []


def test_a_folder_holding_only_a_persons_tmp_file_is_not_the_products(reports, tmp_path):
    """No manifest, one person's ``.notes.backup.tmp``: refused, exit 2, named, kept (before: taken for a
    leftover, deleted, exit 0)."""
    out = tmp_path / "S"
    plant(out, {".notes.backup.tmp": "mine"})
    proc = run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{out}: holds 1 file(s) gpu-idle did not write (.notes.backup.tmp)" in proc.stderr
    assert os.listdir(out) == [".notes.backup.tmp"] and (out / ".notes.backup.tmp").read_text() == "mine"


# ---- point 1: report never overwrites what it cannot prove it wrote -------------------------------

def refused_report(results: Path, target: Path, named: list[str]) -> subprocess.CompletedProcess:
    proc = run_cli("report", str(results), "--out", str(target), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr   # README "Exit status": nothing done
    assert (f"{target.parent}: {len(named)} file(s) this report writes are there already and are not gpu-idle's, "
            f"or were changed since it wrote them ({', '.join(named)})") in proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_report_refuses_a_persons_report_html_in_a_folder_not_the_products(reports, tmp_path):
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out))
    share = tmp_path / "share"
    plant(share, {"report.html": "<p>my page</p>", "notes.txt": "mine"})
    refused_report(out, share / "report.html", ["report.html"])
    assert sorted(os.listdir(share)) == ["notes.txt", "report.html"]
    assert (share / "report.html").read_text() == "<p>my page</p>"


def test_report_refuses_a_persons_report_html_in_a_run_folder(reports, tmp_path):
    """The run folder is the product's, but its report.html is not in any record of ours."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out))
    plant(out, {"report.html": "<p>my page</p>"})
    refused_report(out, out / "report.html", ["report.html"])
    assert (out / "report.html").read_text() == "<p>my page</p>" and not (out / PAGES_DIR).exists()


def test_report_refuses_a_persons_page_under_a_name_it_writes_then_renders_again_over_its_own(reports, tmp_path):
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out))
    share = tmp_path / "share"
    run_cli("report", str(out), "--out", str(share / "report.html"))
    pages = sorted(os.listdir(share / PAGES_DIR))
    assert len(pages) == 2
    run_cli("report", str(out), "--out", str(share / "report.html"))   # its own files: rendered again
    (share / PAGES_DIR / pages[1]).write_text("<p>edited by a person</p>")   # now theirs
    before = (share / "report.html").read_bytes()
    refused_report(out, share / "report.html", [f"{PAGES_DIR}/{pages[1]}"])
    assert (share / PAGES_DIR / pages[1]).read_text() == "<p>edited by a person</p>"
    assert (share / "report.html").read_bytes() == before
