"""Text from profiles, file names and labels is shown, never obeyed (issue 23, point 12): in the terminal
table and its ERROR lines, in records/*.md and `report --format md` no escape byte, control or
bidirectional character arrives raw and `$...$` is no formula; in every CSV the product writes, a text
cell never starts as a spreadsheet formula. Real CLI runs over exports named and labelled hostilely."""
from __future__ import annotations

import csv
import io
import re
import unicodedata

import pandas as pd
import pytest
import yaml
from conftest import run_cli

from pipeline.synth.writer import ExportWriter
from pipeline.text import csv_safe, printable

MS = 1_000_000
B = 5_000_000_000
#: A file name (so a job name, the default label) that sets the terminal's title, clears the screen and
#: reverses and isolates what follows: ESC ] 0 ; ... BEL, ESC [ 2 J, U+202E, U+2066 ... U+2069, U+200F, U+061C.
EVIL = "evil\x1b]0;pwned\x07\x1b[2J\u202etxt\u2066x\u2069\u200f\u061c"
#: The same as the terminal shows it (each escape written out by hand, not by the code under test).
EVIL_SHOWN = r"evil\x1b]0;pwned\x07\x1b[2J\u202etxt\u2066x\u2069\u200f\u061c"
#: ... and as Markdown text: every backslash, [ and ] escaped.
EVIL_MD = r"evil\\x1b\]0;pwned\\x07\\x1b\[2J\\u202etxt\\u2066x\\u2069\\u200f\\u061c"
BAD = "bad\x1b[2J\u202e"            # an export that cannot be read: its error row and ERROR line
NVTX = "step \u202e $a$ \x1b[1m"     # the NVTX range the gaps fall in: in the record's gap table
JOB = '=HYPERLINK("http://evil.example/x","$x$")'   # a label: a formula and math
CLUSTER = "@SUM(1+1)"
NODE = "-2+3"
RANK = "+cmd|' /C calc'!A0"

#: Characters that must never reach a page or the terminal as themselves (new line aside).
HIDDEN = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def hidden(text: str) -> list[str]:
    """The characters of ``text`` of a :data:`HIDDEN` category, new lines aside."""
    return [c for c in text if c != "\n" and unicodedata.category(c) in HIDDEN]


def export(path, kernel: str = "gemm") -> None:
    """One GPU: kernels 0-10, 15-25, 30-40 ms (two 5 ms device-level gaps) named ``kernel`` under one NVTX range."""
    w = ExportWriter(str(path))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="1111-2222")
    w.cuda_device(0, 0, 10, uuid="1111-2222")
    for start in (0, 15, 30):
        w.kernel(pid=10, device=0, stream=7, start=B + start * MS, end=B + (start + 10) * MS, name=kernel)
    w.nvtx(pid=10, tid=11, start=B, end=B + 40 * MS, text=NVTX)
    w.close()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """`gpu-idle run` over ``EVIL.sqlite`` (its kernels named EVIL too), ``labelled.sqlite`` (job, cluster,
    node, rank labels of formulas) and ``BAD.sqlite`` (not an export), then `report --format md`, `--format
    csv` and the HTML report with its GPU pages (``html/``), and `compare` of ``EVIL.sqlite`` with itself
    (``compare/``)."""
    root = tmp_path_factory.mktemp("text-safety")
    (root / "in").mkdir()
    export(root / "in" / f"{EVIL}.sqlite", kernel=EVIL)
    export(root / "in" / "labelled.sqlite")
    (root / "in" / f"{BAD}.sqlite").write_bytes(b"not an export at all")
    (root / "labels.yaml").write_text(yaml.safe_dump({"labels": [
        {"match": "*labelled.sqlite", "job": JOB, "cluster": CLUSTER, "node": NODE, "rank": RANK}]}), encoding="utf-8")
    run = run_cli("run", str(root / "in"), "--out", str(root / "out"), "--config", str(root / "labels.yaml"),
                  "--no-cache", check=False)
    assert run.returncode == 1, run.stdout + run.stderr       # the bad export failed (its row says why)
    run_cli("report", str(root / "out"), "--out", str(root / "summary.md"), "--format", "md")
    run_cli("report", str(root / "out"), "--out", str(root / "costs.csv"), "--format", "csv")
    run_cli("report", str(root / "out"), "--out", str(root / "html" / "report.html"))
    evil = str(root / "in" / f"{EVIL}.sqlite")
    run_cli("compare", evil, evil, "--out", str(root / "compare"))
    return root, run


@pytest.mark.slow
def test_the_terminal_table_and_error_lines_show_escapes(hostile):
    root, run = hostile
    assert hidden(run.stdout) == [] and hidden(run.stderr) == []
    rows = {line.split()[2]: line for line in run.stdout.splitlines() if len(line.split()) > 2}
    assert EVIL_SHOWN[:17] + "…" in rows     # the narrow table cuts a job name to 18 characters
    from pipeline.cli import format_fleet

    wide = format_fleet(pd.read_parquet(root / "out" / "fleet.parquet"), wide=True)
    assert hidden(wide) == [] and EVIL_SHOWN in {line.split()[2] for line in wide.splitlines() if len(line.split()) > 2}
    errors = [line for line in run.stdout.splitlines() if line.startswith("ERROR ")]
    assert len(errors) == 1
    assert errors[0].startswith(f"ERROR {root / 'in'}/bad\\x1b[2J\\u202e.sqlite: ")


@pytest.mark.slow
def test_records_hold_no_raw_control_or_bidi_character_and_no_math(hostile):
    root, _ = hostile
    pages = {p.name: p.read_text(encoding="utf-8") for p in (root / "out" / "records").iterdir()}
    assert len(pages) == 3
    for name, text in pages.items():
        assert hidden(text) == [], name
    titles = sorted(text.splitlines()[0] for text in pages.values())
    assert titles == sorted([f"# Medical record: {EVIL_MD}", r"# Medical record: bad\\x1b\[2J\\u202e",
                             r'# Medical record: =HYPERLINK("http://evil.example/x","\$x\$")'])
    [evil] = [text for text in pages.values() if text.startswith(f"# Medical record: {EVIL_MD}\n")]
    assert r"| step \\u202e \$a\$ \\x1b\[1m |" in evil       # the NVTX range of the largest gaps
    [bad] = [text for text in pages.values() if "bad" in text.splitlines()[0]]
    folder = str(root / "in").replace("_", "\\_")                  # a pytest folder: no other special
    assert f"- failed: {folder}/bad\\\\x1b\\[2J\\\\u202e.sqlite: " in bad


def test_the_markdown_summary_holds_no_raw_control_or_bidi_character_and_no_math(hostile):
    root, _ = hostile
    text = (root / "summary.md").read_text(encoding="utf-8")
    assert hidden(text) == []
    assert r'=HYPERLINK("http://evil.example/x","\$x\$")' in text
    assert EVIL_MD in text
    assert "$x$" not in text and "$a$" not in text


def test_no_html_page_holds_a_raw_control_or_bidi_character(hostile):
    """Every HTML file written (the report, each GPU page, the comparison) holds no character of a hidden
    category but the new line, in any byte of it (text, attributes, SVG text); the file name, kernel name
    and NVTX range are there in their visible escaped form."""
    root, _ = hostile
    pages = sorted(root.rglob("*.html"))
    names = sorted(str(p.relative_to(root)) for p in pages)
    assert names[0] == "compare/compare.html" and names[-1] == "html/report.html"
    assert len([n for n in names if n.startswith("html/gpu-pages/")]) == 2     # EVIL.sqlite's GPU, labelled's
    for page in pages:
        text = page.read_bytes().decode("utf-8")
        assert hidden(text) == [], (page, sorted(set(hidden(text))))
    shown = {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in pages}
    nvtx = r"step \u202e $a$ \x1b[1m"
    report = shown["html/report.html"]
    assert EVIL_SHOWN in report and nvtx in report
    labels = re.findall(r"<text [^>]*>([^<]*)</text>", report)                 # the plots' SVG text
    assert EVIL_SHOWN in labels and f"{EVIL_SHOWN} (1 GPU)" in labels
    [gpu] = [t for n, t in shown.items() if n.startswith("html/gpu-pages/") and "evil" in n]
    assert f"job {EVIL_SHOWN} · cluster" in gpu and nvtx in gpu                # job name, NVTX range
    # kernels around both gaps (their names may wrap at their seams: <wbr>, never a character of the text)
    assert gpu.replace("<wbr>", "").count(f'<span title="{EVIL_SHOWN}">{EVIL_SHOWN}</span>') == 4
    assert EVIL_SHOWN in shown["compare/compare.html"]


#: Every CSV the product writes in a run folder, and the report's.
CSVS = ["out/fleet.csv", "out/jobs.csv", "out/clusters.csv", "out/fix_first.csv", "costs.csv"]


@pytest.mark.parametrize("name", CSVS)
def test_no_csv_cell_starts_a_formula(hostile, name):
    root, _ = hostile
    rows = list(csv.DictReader(io.StringIO((root / name).read_text(encoding="utf-8"))))
    assert rows
    cells = [v for row in rows for v in row.values()]
    assert [v for v in cells if v[:1] in ("=", "+", "-", "@", "\t", "\r")] == []
    jobs = {row["job"] for row in rows if "job" in row}
    clusters = {row["cluster"] for row in rows if "cluster" in row}
    assert "'" + CLUSTER in clusters
    if name != "out/clusters.csv":
        assert "'" + JOB in jobs
    if "node" in rows[0]:
        assert "'" + NODE in {row["node"] for row in rows} and "'" + RANK in {row["rank"] for row in rows}


@pytest.mark.parametrize("name", CSVS + ["compare/compare.csv"])
def test_no_csv_cell_holds_a_raw_control_or_bidi_character(hostile, name):
    """Issue 42 point 19. Before: ESC, BEL and U+202E of a file name, kernel name or error reached the CSV
    cells raw (``cat fleet.csv`` retitled the terminal and cleared it). Now every CSV holds no character of a
    hidden category but the new line, and the file name's job is spelled as the pages spell it."""
    root, _ = hostile
    text = (root / name).read_text(encoding="utf-8")
    assert hidden(text) == [], sorted(set(hidden(text)))
    rows = list(csv.DictReader(io.StringIO(text)))
    if "job" in rows[0]:
        assert EVIL_SHOWN in {row["job"] for row in rows}


def test_csv_cells_spell_hidden_characters_as_pages_do():
    """Variant, the cell rule alone: each hidden character as :func:`~pipeline.text.visible` writes it (written
    out by hand here), tab and new line kept (quoted by the CSV writer), a formula behind a hidden character is
    no formula (its cell starts with a backslash), one after a tab still gets its quote."""
    frame = pd.DataFrame({"t": ["a\x1b]0;x\x07b", "\u202e=1+1", "\t=1", "l1\nl2", "\u2028z\x9b", "plain"]})
    out = csv_safe(frame).to_csv(index=False, lineterminator="\n")
    assert out == 't\na\\x1b]0;x\\x07b\n\\u202e=1+1\n\'\t=1\n"l1\nl2"\n\\u2028z\\x9b\nplain\n'
    assert list(frame["t"]) == ["a\x1b]0;x\x07b", "\u202e=1+1", "\t=1", "l1\nl2", "\u2028z\x9b", "plain"]


def test_csv_safe_touches_text_cells_only():
    """Numbers (a negative one too), booleans and missing values stay as they are; text cells starting
    with = + - @ or tab get a leading quote, a CR is spelled out (``\\x0d``, so no quote is needed), other
    text is unchanged; the frame given is not changed."""
    frame = pd.DataFrame({"n": [-1, 2, 3, 4, 5, 6, 7], "x": [-0.5, 1.0, 2.0, 3.0, 4.0, 5.0, float("nan")],
                          "ok": [True, False, True, True, False, True, False],
                          "text": ["-1", "=A1", "+B", "@C", "\tD", "\rE", None],
                          "plain": ["a-b", "x=1", "", "'q", "é", "1", "z"]})
    before = frame.copy()
    out = csv_safe(frame).to_csv(index=False, lineterminator="\n")
    assert out == ("n,x,ok,text,plain\n-1,-0.5,True,'-1,a-b\n2,1.0,False,'=A1,x=1\n3,2.0,True,'+B,\n"
                   "4,3.0,True,'@C,'q\n5,4.0,False,'\tD,é\n6,5.0,True,\\x0dE,1\n7,,False,,z\n")
    pd.testing.assert_frame_equal(frame, before)
    numbers = pd.DataFrame({"n": [-1], "s": ["ok"]})
    assert csv_safe(numbers) is numbers


@pytest.mark.parametrize("char, shown", [
    ("\x1b", r"\x1b"), ("\x07", r"\x07"), ("\r", r"\x0d"), ("\n", r"\x0a"), ("\x7f", r"\x7f"),
    ("\x9b", r"\x9b"),                                         # C1 CSI: an escape sequence in one byte
    ("\u202a", r"\u202a"), ("\u202b", r"\u202b"), ("\u202c", r"\u202c"), ("\u202d", r"\u202d"),
    ("\u202e", r"\u202e"), ("\u2066", r"\u2066"), ("\u2067", r"\u2067"), ("\u2068", r"\u2068"),
    ("\u2069", r"\u2069"), ("\u200e", r"\u200e"), ("\u200f", r"\u200f"), ("\u061c", r"\u061c"),
    ("\u200b", r"\u200b"), ("\ufeff", r"\ufeff"), ("\u2028", r"\u2028"), ("\u2029", r"\u2029"),
    ("\U000e0041", r"\U000e0041"),                             # a tag character (invisible)
    ("\udcff", r"\udcff"),                                     # a lone surrogate: a file name not in UTF-8
])
def test_printable_writes_each_hidden_character_as_its_escape(char, shown):
    assert printable(f"a{char}b") == f"a{shown}b"


def test_printable_keeps_visible_text():
    text = "H100 — 日本語 é ß 🚀 [x] $y$ <z> a_b"
    assert printable(text) == text


def test_printable_looks_at_each_character_as_its_definition_says():
    """printable escapes the characters of HIDDEN_CATEGORIES one by one, whatever text surrounds them: beside a
    character that is not ASCII (a diagnosis line's arrow, which takes it off its ASCII-only shortcut), each code
    point of the first two planes and the tag characters is its escape exactly when its Unicode category is hidden,
    else itself (the categories read here from unicodedata, not from printable)."""
    import unicodedata

    from pipeline.text import HIDDEN_CATEGORIES, escape_code

    for code in [*range(0x20000), *range(0xE0000, 0xE0080)]:
        char = chr(code)
        want = escape_code(char) if unicodedata.category(char) in HIDDEN_CATEGORIES else char
        assert printable(f"a → {char}b") == f"a → {want}b", hex(code)


def test_a_page_value_shows_hidden_characters_escaped_and_markup_stays_markup():
    """The pages' finalize (pipeline.report.jinja.shown): text and markup alike get each hidden character
    as its escape but tab and new line (HTML whitespace); markup stays markup (not escaped again), numbers
    and None stay as they are; a template renders a value the same way in text and in an attribute."""
    from markupsafe import Markup

    from pipeline.report.jinja import environment, shown
    from pipeline.text import visible

    assert visible("<b>\ta\n\x1b\u202e\r</b> é 日") == "<b>\ta\n\\x1b\\u202e\\x0d</b> é 日"
    out = shown(Markup("<i>\x07</i>\n"))
    assert isinstance(out, Markup) and out == "<i>\\x07</i>\n"
    assert shown(3) == 3 and shown(None) is None and shown(1.5) == 1.5
    page = environment().from_string('<p title="{{ x }}">{{ x }} {{ m }} {{ n }}</p>').render(
        x="a<\x1b\u2066", m=Markup("<br>\x9b"), n=7)
    assert page == '<p title="a&lt;\\x1b\\u2066">a&lt;\\x1b\\u2066 <br>\\x9b 7</p>'


def test_csv_safe_columns_looked_at_once_give_what_each_cell_gives():
    """csv_safe looks at a text column's cells one by one only when the column may hold a cell to change: the frame
    it gives writes the CSV csv_cell gives cell by cell, whatever the column (plain ASCII, a formula at a cell's start
    or only at a line's start inside one, a hidden character, an accent, tab and new line, missing values)."""
    import pandas as pd

    from pipeline.text import csv_cell, csv_safe

    columns = {
        "plain": ["a", "b c", "x=1", None, " +"],
        "formula": ["a", "=SUM(A1)", "b", "c", "d"],
        "inner_line": ["a\n-1", "b", "c", "d", "e"],
        "hidden": ["a", "b\x1b[2J", "c", "d", "e"],
        "accent": ["é", "b", "c", "d", "e"],
        "tab_newline": ["a\tb", "c\nd", "e", "\tf", "g"],
        "number": [1, 2, 3, 4, 5],
        "string_dtype": pd.array(["-2", "a", None, "b", "c"], dtype="string"),
    }
    frame = pd.DataFrame(columns)
    by_cell = pd.DataFrame({k: [csv_cell(v) for v in frame[k].astype(object).tolist()] for k in frame.columns})
    assert csv_safe(frame).to_csv(index=False) == by_cell.to_csv(index=False)
    assert csv_safe(frame)["tab_newline"].tolist() == ["a\tb", "c\nd", "e", "'\tf", "g"]
    plain = frame[["plain", "number", "inner_line"]]
    assert csv_safe(plain) is plain   # nothing to change: the frame itself
