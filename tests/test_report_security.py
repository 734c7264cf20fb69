"""Text from profiles (NVTX ranges, kernel names, labels) is data, never markup: a hostile export run
through the real CLI (`gpu-idle run`, then `gpu-idle report`) gives a page with no script, no
`javascript:` link, no link made from profile text, and the hostile text visible as text."""
from __future__ import annotations

import html
import re

import pytest
from conftest import chromium_load, run_cli

from pipeline.report.html import _record_html
from pipeline.report.medical import record_stem
from pipeline.synth.writer import ExportWriter

MS = 1_000_000
B = 5_000_000_000
NVTX = "Iteration 1 [x](javascript:alert(1)) <script>alert(2)</script> <https://evil.example/a> *em* a|b"
KERNEL = "gemm<script>alert(3)</script>[k](javascript:alert(4))"
UUID = "1111<script>alert(8)</script>[u](javascript:alert(9))"
MODEL = "NVIDIA <img src=x onerror=alert(10)> H100"
JOB = "job <script>alert(5)</script> [j](javascript:alert(6)) ![i](javascript:alert(7)) $\\nope{x}$"


def hostile_export(path) -> None:
    """One GPU: kernels 0-10, 15-25, 30-40 ms (two 5 ms device-level gaps), one NVTX range over all."""
    w = ExportWriter(str(path))
    w.gpu(0, MODEL, uuid=UUID)
    w.cuda_device(0, 0, 10, uuid=UUID)
    for start in (0, 15, 30):
        w.kernel(pid=10, device=0, stream=7, start=B + start * MS, end=B + (start + 10) * MS, name=KERNEL)
    w.nvtx(pid=10, tid=11, start=B, end=B + 40 * MS, text=NVTX)
    w.close()


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    (root / "in").mkdir()
    hostile_export(root / "in" / "evil.sqlite")
    (root / "labels.yaml").write_text(
        f"labels:\n  - {{match: '*evil.sqlite', job: {_yaml_str(JOB)}, cluster: '<b>c</b>'}}\n", encoding="utf-8")
    run_cli("run", str(root / "in"), "--out", str(root / "out"), "--config", str(root / "labels.yaml"), "--no-cache")
    run_cli("report", str(root / "out"), "--out", str(root / "report.html"))
    return root


def _yaml_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def test_hostile_text_is_escaped_in_the_record_and_the_page(hostile_page):
    [md] = list((hostile_page / "out" / "records").iterdir())
    text = md.read_text(encoding="utf-8")
    # The Markdown page: profile text escaped, so no Markdown viewer makes it a link or HTML.
    assert text.splitlines()[0] == ("# Medical record: job \\<script\\>alert(5)\\</script\\> \\[j\\](javascript:alert(6))"
                                    " !\\[i\\](javascript:alert(7)) \\$\\\\nope{x}\\$")
    assert ("Iteration 1 \\[x\\](javascript:alert(1)) \\<script\\>alert(2)\\</script\\> \\<https://evil.example/a\\>"
            " \\*em\\* a\\|b") in text
    page = (hostile_page / "report.html").read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<b>c</b>" not in page
    # every link is an anchor of the page itself or the GPU's page beside it (a file name of safe characters)
    assert not re.search(r'href="(?!#|gpu-pages/[A-Za-z0-9_.-]+\.html")', page)
    assert re.search(r'href="gpu-pages/evil\.sqlite__[A-Za-z0-9_.-]+\.html"', page)
    assert "<em>" not in page
    # the hostile text is there, as text
    assert html.escape(NVTX, quote=False) in page
    # the GPU: its name from the model's and the key's safe characters, its full key (hostile uuid) only as a title
    assert ('<abbr title="GPU-1111&lt;script&gt;alert(8)&lt;/script&gt;[u](javascript:alert(9)) in evil.sqlite">'
            'img srcx onerroralert10 #1 1111scri</abbr>') in page
    assert "<img" not in page
    # matplotlib draws the job name as text, not as mathtext (no `$...$` formulas from profiles)
    labels = re.findall(r"<text [^>]*>([^<]*)</text>", page)
    assert html.escape(JOB, quote=False) in labels                           # the category plot
    assert html.escape(JOB, quote=False) + " (1 GPU)" in labels              # the spread plot
    assert f"<h2>Medical record: {html.escape(JOB, quote=False)}</h2>" in page
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert csp and csp.group(1) == ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                                    "script-src 'none'; base-uri 'none'; form-action 'none'")


def test_hostile_text_in_the_markdown_summary(hostile_page):
    """`--format md` (for chat or e-mail): the job, cluster and GPU key are escaped Markdown text."""
    out = hostile_page / "summary.md"
    run_cli("report", str(hostile_page / "out"), "--out", str(out), "--format", "md")
    text = out.read_text(encoding="utf-8")
    assert "By cluster: \\<b\\>c\\</b\\> $730.00." in text
    lines = text.splitlines()
    gpus = lines.index("| # | GPU | job | idle | main category | $/month |")  # after the fix-first table
    row = [line for line in lines[gpus:] if line.startswith("| 1 |")]
    # the GPU by its display name (docs/outputs.md#gpu-names: model and short id made of plain characters)
    assert row == [("| 1 | img srcx onerroralert10 #1 1111scri | job \\<script\\>alert(5)"
                   "\\</script\\> \\[j\\](javascript:alert(6)) !\\[i\\](javascript:alert(7)) \\$\\\\nope{x}\\$ | 25.00 % | cpu | $730.00 "
                   "(toy capture: 40.0 ms window, 3 kernels) |")]   # a 40 ms span window of 3 kernels
    assert not re.search(r"(?<!\\)[<\[]", text)   # every < and [ in the page is escaped


def test_old_records_with_link_syntax_render_as_text():
    """A record written before the fix (unescaped profile text) still renders without links or HTML."""
    body = _record_html("# Medical record: x\n\n[a](javascript:alert(1)) <script>x</script> <https://e.x/> "
                        "<b@e.x> ![i](javascript:y)\n\n[r]: javascript:z\n[s][r] `c`\n")
    assert "<a" not in body and "<script" not in body and "<img" not in body
    assert "[a](javascript:alert(1)) &lt;script&gt;x&lt;/script&gt; &lt;https://e.x/&gt;" in body


@pytest.mark.needs_chromium
def test_hostile_page_in_headless_chromium(hostile_page):
    path = hostile_page / "report.html"
    shot = hostile_page / "hostile.png"
    dom = chromium_load(path, shot, "1200,2000")
    assert shot.exists() and shot.stat().st_size > 10_000
    assert "<script" not in dom.lower()
    hrefs = re.findall(r'href="([^"]*)"', dom)
    assert hrefs and all(h.startswith("#") or re.fullmatch(r"gpu-pages/[A-Za-z0-9_.-]+\.html", h) for h in hrefs)
    assert "javascript:" not in " ".join(hrefs)
    assert html.escape(NVTX, quote=False) in dom and html.escape(JOB, quote=False) in dom


@pytest.mark.needs_chromium
def test_hostile_gpu_page(hostile_page):
    """The GPU's own page: the kernel name, NVTX range, GPU key and job are text; its only links are
    its own anchors and the report beside it; same Content-Security-Policy; real Chromium loads it."""
    [page_path] = list((hostile_page / "gpu-pages").iterdir())
    page = page_path.read_text(encoding="utf-8")
    assert "<script" not in page.lower() and "<img" not in page and "<b>c</b>" not in page
    assert html.escape(KERNEL, quote=False) in page and html.escape(NVTX, quote=False) in page
    assert html.escape(JOB, quote=False) in page and html.escape("GPU-" + UUID, quote=False) in page
    hrefs = re.findall(r'href="([^"]*)"', page)
    assert hrefs and all(h.startswith("#") or h in ("../report.html", "../report.html#record-" + record_stem(JOB))
                         for h in hrefs), hrefs
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert csp and csp.group(1) == ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
                                    "script-src 'none'; base-uri 'none'; form-action 'none'")
    # the timeline's title (above the picture, the GPU's one name; its full key on hover) names the GPU as text
    caption = re.search(r'<figcaption id="timeline-title" title="([^"]*)">([^<]*)</figcaption>', page)
    assert caption and html.unescape(caption.group(1)) == "GPU-" + UUID and "<" not in caption.group(1)
    name = re.search(r'<h1 id="gpu-name" title="[^"]*">([^<]*)</h1>', page).group(1)   # only NAME_CHARS
    assert caption.group(2) == f"{name} in evil.sqlite" and name.endswith(" #1 1111scri")
    dom = chromium_load(page_path, hostile_page / "hostile-gpu.png", "1200,1600")
    assert "<script" not in dom.lower() and html.escape(KERNEL, quote=False) in dom
