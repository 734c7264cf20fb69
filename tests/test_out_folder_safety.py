"""Issue 23's remaining gaps, each through the real ``gpu-idle`` process: a person's ``.x.y.tmp`` is not a
leftover of the product (point 1: only ``.<name>.<12 hex>.tmp`` is); ``report`` never overwrites a file the
product cannot prove it wrote (point 1); no raw ESC from a file name reaches the terminal by the progress
bar, a WARNING line, a log record or matplotlib (point 12); a truth file saved with a UTF-8 byte order
mark is still gpu-idle's own (point 13)."""
from __future__ import annotations

import fcntl
import json
import os
import select
import shutil
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from conftest import PROFILES, REPO, run_cli, small_reports

from pipeline.fleet.outputs import PAGES_DIR
from pipeline.io import is_leftover, temp_name

#: A file name that sets the terminal's title and rings its bell when printed raw.
ESC_NAME = "a\x1b]0;pwned\x07.sqlite"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Two small reports (2 GPUs each), jobs named after the files."""
    return small_reports(tmp_path_factory.mktemp("outsafety"), "job", 2, seed=2323)


@pytest.fixture
def esc_dir(tmp_path):
    """A folder holding one real export under :data:`ESC_NAME`."""
    src = PROFILES / "tiny_2kernels.sqlite"
    assert src.exists(), f"real export not found: {src}"
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(src, folder / ESC_NAME)
    return folder


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


@pytest.mark.slow
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


# ---- point 12: no raw control character from a file name reaches the terminal ---------------------

def run_in_terminal(args: list[str], timeout_s: float = 300) -> tuple[int, bytes]:
    """``gpu-idle ARGS`` with stdin, stdout and stderr on a pseudo-terminal (160 columns, so the progress
    bar is drawn): its exit status and every byte it wrote."""
    leader, follower = os.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO, stdin=follower,
                            stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    out = b""
    try:
        while select.select([leader], [], [], timeout_s)[0]:
            try:
                chunk = os.read(leader, 65536)
            except OSError:   # the terminal closed with the process
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(leader)
    return proc.wait(timeout=timeout_s), out


def test_a_file_name_with_escapes_reaches_the_progress_bar_escaped(esc_dir, tmp_path):
    code, out = run_in_terminal(["run", str(esc_dir), "--out", str(tmp_path / "out"), "--no-cache"])
    assert code == 0, out
    assert b"gpu-idle: 100%" in out   # the bar was drawn ...
    assert b"a\\x1b]0;pwned\\x07.sqlite]" in out   # ... with the file name as its label, escaped
    assert b"\x1b" not in out and b"\x07" not in out


def test_a_warning_line_quoting_a_name_with_escapes_is_escaped(esc_dir, tmp_path):
    proc = run_cli("sweep", str(esc_dir), "--state-dir", str(tmp_path / "state"), "--night", "2026-12-01",
                   "--force", "b\x1b[2J.sqlite")
    assert "WARNING: --force " in proc.stdout and "/b\\x1b[2J.sqlite: not among the discovered reports" in proc.stdout
    assert "\x1b" not in proc.stdout + proc.stderr


def test_the_report_of_a_name_with_escapes_prints_none_and_draws_none(esc_dir, tmp_path):
    """matplotlib warned "Glyph 27 (\\x1b) missing" with the raw byte on stderr, and drew it in the SVG."""
    out = tmp_path / "out"
    run_cli("run", str(esc_dir), "--out", str(out))
    proc = run_cli("report", str(out), "--out", str(out / "report.html"))
    assert "\x1b" not in proc.stdout + proc.stderr and "Glyph" not in proc.stderr
    html = (out / "report.html").read_text()
    svgs = [html[i:html.index("</svg>", i)] for i in range(len(html)) if html.startswith("<svg", i)]
    assert svgs and not [s for s in svgs if "\x1b" in s or "\x07" in s]
    assert any("a\\x1b]0;pwned\\x07" in s for s in svgs)   # the job's label, drawn escaped


def test_log_records_and_warnings_of_the_cli_process_are_escaped(tmp_path):
    """What the CLI's process installs (:func:`pipeline.text.printable_diagnostics`), in a real process:
    a library's WARNING record and a Python warning that quote the name print it escaped."""
    code = ("import logging, warnings\n"
            "from pipeline.text import printable_diagnostics\n"
            "printable_diagnostics(); printable_diagnostics()\n"
            f"logging.getLogger('lib').warning('%s: staged', {ESC_NAME!r})\n"
            f"warnings.warn({ESC_NAME!r} + ' \\u202e')\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == "a\\x1b]0;pwned\\x07.sqlite: staged"
    assert "UserWarning: a\\x1b]0;pwned\\x07.sqlite \\u202e" in lines[1]
    assert "\x1b" not in proc.stderr and "\u202e" not in proc.stderr


# ---- point 13: a truth file with a byte order mark is gpu-idle's own ------------------------------

def test_a_truth_file_saved_with_a_bom_and_compact_is_not_listed_as_skipped(reports, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copyfile(reports / "job0.sqlite", folder / "job0.sqlite")
    truth = json.loads((reports / "job0.sqlite.truth.json").read_text())
    assert next(iter(truth)) == "format" and truth["format"].startswith("gpu-idle synth")
    compact = json.dumps(truth, separators=(",", ":")).encode()
    (folder / "job0.sqlite.truth.json").write_bytes(b"\xef\xbb\xbf" + compact + b"\n")
    (folder / "other.json").write_text('{"not": "a trace"}')   # a JSON of someone's: still listed
    proc = run_cli("run", str(folder), "--out", str(tmp_path / "out"))
    said = proc.stdout + proc.stderr
    assert f"skipped 1 .json file(s) that are not PyTorch profiler traces: {folder / 'other.json'}" in said
    assert "truth.json" not in said


def test_write_text_makes_its_folder_and_leaves_no_temporary(tmp_path):
    """``write_text`` (every record, JSON and page): the folder made when missing, the bytes exactly the UTF-8 of
    the text (newlines as given), the file readable as the team's (0666 less the umask, as ``atomic_path`` leaves
    its files), an older file replaced whole; where it cannot write (the folder is a file), the error raised and
    no temporary file left anywhere."""
    from pipeline import io as pio

    umask = os.umask(0)
    os.umask(umask)
    target = tmp_path / "new" / "deeper" / "rec.md"
    text = "line one → two\r\nthree\n"
    pio.write_text(str(target), text)
    assert target.read_bytes() == text.encode("utf-8")
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~umask
    pio.write_text(str(target), "short\n")
    assert target.read_bytes() == b"short\n"
    (tmp_path / "plain").write_text("a file, not a folder")
    with pytest.raises(NotADirectoryError):
        pio.write_text(str(tmp_path / "plain" / "rec.md"), text)
    with pytest.raises(IsADirectoryError):   # a folder where the file goes: the rename fails, the temporary goes
        pio.write_text(str(tmp_path / "new"), text)
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    assert left == ["new", "new/deeper", "new/deeper/rec.md", "plain"]
