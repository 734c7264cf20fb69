"""Issue 26 point 6: views that lead with money (docs/outputs.md#the-printed-table, #gpu-names,
#reports-for-people).

- ``gpu-idle run`` prints its table most expensive first, in at most 120 columns (``--wide``: every column);
- one display name per GPU (model, number in its job, short id) in the printed table, the report, the GPU
  pages and the medical records, the full ``gpu_key`` beside it or on hover;
- a GPU page whose per-stream roster is its device roster says so instead of repeating the rows;
- in real headless Chromium at 1280 and 1440 px no table is wider than its container, and the report's
  first screen (1440×900) holds the fix-first list, the headline and the dollars per job.
"""
from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest

from conftest import PROFILES, chromium_load, run_cli

MS = 1_000_000


# ---- the printed table, on a small fleet worked out by hand ------------------------------------

def _row(**kw) -> dict:
    row = {"cluster": "c1", "job": "train", "node": "n1", "report": "a.sqlite", "gpu_key": "pid1/dev0",
           "gpu_model": "NVIDIA H100 80GB HBM3", "window_ns": 10 * MS, "idle_ns": 4 * MS, "idle_pct": 40.0,
           "main_category": "sync", "idle_usd_per_month": 905.2, "amdahl_speedup": 1.6667, "status": "ok",
           "confidence_tier": "medium"}
    return {**row, **kw}


SMALL = [
    _row(job="eval", report="b.sqlite", gpu_key="pid42/dev1", gpu_model=None, idle_ns=6 * MS, idle_pct=60.0,
         main_category="data", idle_usd_per_month=1000.0, amdahl_speedup=2.5, confidence_tier="toy"),
    _row(gpu_key="GPU-11111111-aaaa-bbbb-cccc-dddddddddddd"),
    _row(gpu_key="GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"),
    _row(cluster="c0", job="zeta-long-job-name-x", report="z.sqlite", gpu_key="bus-00000000:3B:00.0",
         gpu_model="NVIDIA A100-SXM4-80GB", idle_ns=1_234_567, idle_pct=12.5, main_category="comm",
         amdahl_speedup=1.142857, status="partial", confidence_tier="low"),
    _row(report="bad.sqlite", gpu_key=None, status="error", error="bad.sqlite: cannot read"),
]


def test_printed_table_is_sorted_by_money_and_narrow():
    """By tier (trusted, low, toy: issue 45 point 7), then $/month descending, so the toy $1,000.00 comes last; ties
    by job key, then report and GPU key;
    the job name cut to 18 characters; each GPU by its display name; text left, numbers right."""
    from pipeline.cli import format_fleet

    text = format_fleet(pd.DataFrame(SMALL))
    assert text.splitlines() == [
        "  $/month tier   job                GPU                 idle % idle_ms cause speed-up status",
        "  $905.20 medium train              H100 #1 00000000     40.00   4.000 sync    1.667x ok",
        "  $905.20 medium train              H100 #2 11111111     40.00   4.000 sync    1.667x ok",
        "  $905.20 low    zeta-long-job-nam… A100 #1 bus-3B:00.0  12.50   1.235 comm    1.143x partial",
        "$1,000.00 toy    eval               GPU #1 pid42/dev1    60.00   6.000 data    2.500x ok",
        "tier: how far the month can be trusted, toy < low < medium < high (docs/definitions.md#confidence-tiers)",
        "ERROR bad.sqlite: cannot read",
    ]


def test_printed_columns_are_generic_over_the_schema():
    """A printed column is one ``Printed`` entry: its cells follow from the declared dtype and unit (a flag
    reads yes/no, text is cut to its width), so a new column needs no code in the printer."""
    from pipeline import schema
    from pipeline.cli import _cells

    assert _cells(pd.Series([True, False]), schema.Printed("low_confidence", "low?")) == ["yes", "no"]
    assert _cells(pd.Series(["periodic", None]), schema.Printed("window_rule", "rule", 5)) == ["peri…", "-"]
    assert _cells(pd.Series([2.0]), schema.Printed("rate_usd_per_hour", "$/h")) == ["$2.00"]
    assert [p.header for p in schema.PRINTED] == ["$/month", "tier", "job", "GPU", "idle %", "idle_ms", "cause", "speed-up",
                                                  "status"]
    # the widest a line can get: every cut text at its width, the numbers at their widest in a real fleet
    # ($99,999.99, 100.00 %, 99,999.999 ms, 9999.999x, the tier `medium`) and the assumed-rate marker `~`
    widest = {"$/month": 10, "tier": 6, "idle %": 6, "idle_ms": 10, "speed-up": 9, "status": 7}
    line = sum(max(len(p.header), p.width or widest[p.header]) for p in schema.PRINTED) + len(schema.PRINTED) - 1
    assert line + len("~") <= 120


def _expected_names(fleet: pd.DataFrame) -> dict:
    """``(report, gpu_key) -> name`` worked out here: model (the example's three model texts), the GPU's
    number in its job by report then GPU key, the first 8 hex digits of a GPU- uuid or the pid/dev key."""
    model = {"NVIDIA H100 80GB HBM3": "H100", "A100": "A100", "NVIDIA A100-SXM4-80GB": "A100"}
    ok = fleet[fleet["status"] != "error"]
    out = {}
    for _, job in ok.groupby(["cluster", "job"]):
        keys = sorted(zip(job["report"], job["gpu_key"], job["gpu_model"]))
        for i, (report, key, m) in enumerate(keys, 1):
            short = key[4:12] if key.startswith("GPU-") else key
            out[(report, key)] = f"{model[m]} #{i} {short}"
    return out


# ---- a real run of the example fleet ----------------------------------------------------------

@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """``gpu-idle run`` of the example fleet (printed table kept) and ``gpu-idle report`` into the run folder;
    returns the folder, the printed output and the run's arguments."""
    root = tmp_path_factory.mktemp("views_money")
    run_cli("synth", "--example", str(root / "ex"))
    args = ["run", str(root / "ex"), "--out", str(root / "out"), "--config", str(root / "ex" / "labels.yaml")]
    narrow = run_cli(*args).stdout
    run_cli("report", str(root / "out"), "--out", str(root / "out" / "report.html"))
    run_cli("report", str(root / "out"), "--out", str(root / "summary.md"), "--format", "md")
    return root / "out", narrow, args


def _table(stdout: str) -> list[str]:
    """The printed table's lines: from its header to the blank line before the totals."""
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith(("$/month", "idle_usd_per_month")))
    return [ln for ln in lines[start:lines.index("", start)] if not ln.startswith(("tier:", "~$:", "unpriced:", "x!:"))]


@pytest.mark.slow
def test_run_prints_the_example_fleet_most_expensive_first_in_120_columns(example):
    out, narrow, args = example
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    ok = fleet[fleet["status"] != "error"]
    names = _expected_names(ok)
    table = _table(narrow)
    assert len(table) == 1 + len(ok) == 25
    assert max(len(line) for line in table) <= 120
    usd = [float(line.split()[0].lstrip("$").replace(",", "")) for line in table[1:]]
    assert usd == sorted((round(u, 2) for u in ok["idle_usd_per_month"]), reverse=True)
    top = ok.sort_values("idle_usd_per_month", ascending=False).iloc[0]
    assert top["job"] == "llm-pretrain"
    name = names[(top["report"], top["gpu_key"])]
    assert name == "H100 #13 750df4f4"
    assert table[1].split() == [f"${top['idle_usd_per_month']:,.2f}", top["confidence_tier"], "llm-pretrain", *name.split(),
                                f"{top['idle_pct']:.2f}", f"{top['idle_ns'] / 1e6:,.3f}", top["main_category"],
                                f"{top['amdahl_speedup']:.3f}x", "ok"]
    # --wide (the same run again, its results reused): every column the table had before, the GPU's name beside
    # its full key, the same order
    wtable = _table(run_cli(*args, "--wide").stdout)
    for header in ("node", "gpu_key", "gpu_model", "window_ms", "idle_ms", "idle_pct", "device_gaps", "device_gaps_ms",
                   "copy_only_ms", "dark_ms", "main_category", "amdahl_speedup", "straggler", "status",
                   "stream_gaps (count over streams)", "stream_gaps_ms (sum over streams)"):
        assert header in wtable[0]
    assert f"{name} {top['gpu_key']} {top['gpu_model']}" in " ".join(wtable[1].split())
    assert [float(ln.split()[0].lstrip("$").replace(",", "")) for ln in wtable[1:]] == usd


@pytest.mark.slow
def test_one_name_per_gpu_in_every_view(example):
    """Each analysed GPU of the example fleet has the same name in the printed table, the report's top-10 (full
    key on hover), its GPU page (full key beside it) and its job's medical record (full key in the abbreviation)."""
    from pipeline.fleet.outputs import gpu_page_name

    out, narrow, _ = example
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    names = _expected_names(fleet)
    assert len(set(names.values())) == len(names) == 24
    printed = "\n".join(_table(narrow))
    report = (out / "report.html").read_text(encoding="utf-8")
    top10 = re.search(r'<table id="top10">(.*?)</table>', report, re.S).group(1)
    in_top = 0
    for (rep, key), name in names.items():
        assert f" {name} " in printed
        page = (out / "gpu-pages" / gpu_page_name(rep, key)).read_text(encoding="utf-8")
        assert f'<h1 id="gpu-name" title="{html.escape(key)}">{html.escape(name)}</h1>' in page
        assert f'<code id="gpu-key">{html.escape(key)}</code>' in page
        cell = re.search(rf'<td class="gpu" title="{re.escape(html.escape(key))} in {re.escape(html.escape(rep))}">'
                         r'(.*?)</td>', top10, re.S)
        if cell:
            in_top += 1
            assert f">{html.escape(name)}</a>" in cell.group(1)
        job = fleet[(fleet["report"] == rep) & (fleet["gpu_key"] == key)].iloc[0]["job"]
        record = (out / "records" / f"{job}.md").read_text(encoding="utf-8")
        assert f"- [{name}](../gpu-pages/{gpu_page_name(rep, key)})" in record
        assert f"*[{name}]: {key} in {os.path.basename(rep)}" in record
        # the report's copy of the record links the page under the same name
        assert f'<a href="gpu-pages/{gpu_page_name(rep, key)}">' in report
    assert in_top == 10
    # --format md's top-5 table names each GPU the same way
    md = (out.parent / "summary.md").read_text(encoding="utf-8")
    lines = md.splitlines()
    top = lines[lines.index("| # | GPU | job | idle | main category | $/month |"):]
    cells = [ln.split(" | ")[1] for ln in top if re.match(r"\| [1-5] \| ", ln)]
    assert len(cells) == 5 and {c.removesuffix(" (straggler)") for c in cells} <= set(names.values())


def test_display_names_of_every_kind_of_gpu_key():
    """The short id of each key kind (docs/outputs.md#gpu-names), unique within a job by the number."""
    from pipeline.report.medical import gpu_display_name, gpu_names

    assert [gpu_display_name(m, n, k) for m, n, k in [
        ("NVIDIA H100 80GB HBM3", 3, "GPU-9b5c4f8d-67d7-3377-03e8-28d79c7d6be5"),
        ("NVIDIA A100-SXM4-80GB", 1, "MIG-1a2b3c4d-0000-1111-2222-333333333333"),
        ("", 2, "bus-0000:3b:00.0"), (None, 1, "pid84668/dev0"), ("AMD Instinct MI300X", 4, "id <x>;y")]] == [
        "H100 #3 9b5c4f8d", "A100 #1 MIG-1a2b3c4d", "GPU #2 bus-3b:00.0", "GPU #1 pid84668/dev0",
        "AMD Instinct MI300X #4 id xy"]
    fleet = pd.DataFrame(SMALL)
    assert gpu_names(fleet) == {("b.sqlite", "pid42/dev1"): "GPU #1 pid42/dev1",
                                ("a.sqlite", "GPU-11111111-aaaa-bbbb-cccc-dddddddddddd"): "H100 #2 11111111",
                                ("a.sqlite", "GPU-00000000-aaaa-bbbb-cccc-dddddddddddd"): "H100 #1 00000000",
                                ("z.sqlite", "bus-00000000:3B:00.0"): "A100 #1 bus-3B:00.0"}


# ---- the per-stream roster of a one-stream GPU -----------------------------------------------

def test_one_stream_gpu_page_says_its_stream_roster_is_the_device_roster(example, tmp_path):
    """tiny_2kernels.sqlite (a real export: one GPU, one stream, one gap): its page gives the device roster's one
    row and, for the per-stream roster, one line saying it is the same; a two-stream GPU of the example keeps
    both tables."""
    out = tmp_path / "tiny"
    run_cli("run", str(PROFILES / "tiny_2kernels.sqlite"), "--out", str(out))
    run_cli("report", str(out), "--out", str(out / "report.html"))
    (page_path,) = (out / "gpu-pages").iterdir()
    page = page_path.read_text(encoding="utf-8")
    doc = json.loads(next((out / "gpus").iterdir()).read_text(encoding="utf-8"))
    assert doc["_summary"]["stream_count"] == 1
    assert [(g["start_ns"], g["length_ns"]) for g in doc["roster"]] == [
        (g["start_ns"], g["length_ns"]) for g in doc["device_roster"]] and len(doc["roster"]) == 1
    device = re.search(r'<table id="device-roster">(.*?)</table>', page, re.S).group(1)
    assert len(re.findall(r'<tr id="d-', device)) == 1
    assert '<table id="stream-roster">' not in page
    same = re.search(r'<p class="note" id="stream-roster" data-same-as="device-roster">(.*?)</p>', page, re.S)
    assert same and "Same as the" in same.group(1) and f"{doc['roster'][0]['pid']}:{doc['roster'][0]['stream_id']}" \
        in same.group(1)
    two = next(p for p in (example[0] / "gpu-pages").iterdir() if p.name.startswith("resnet-finetune"))
    text = two.read_text(encoding="utf-8")
    assert '<table id="stream-roster">' in text and "data-same-as" not in text


# ---- layout in real headless Chromium --------------------------------------------------------

#: Measures the page after load: every table's container (scrollWidth, clientWidth), the page's, and where
#: the first screen's blocks end; written into the DOM (the copy measured has no CSP, the page itself runs no script).
_MEASURE = """<script>(function () {
  var out = {page: [document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth], tables: [], ends: {}};
  document.querySelectorAll("table").forEach(function (t, i) {
    var c = t.parentElement;
    out.tables.push([t.id || ("table " + i), c.scrollWidth, c.clientWidth]);
  });
  ["fix-list", "fleet-usd", "jobs"].forEach(function (id) {
    var e = document.getElementById(id);
    if (e) { out.ends[id] = e.getBoundingClientRect().bottom + window.scrollY; }
  });
  var p = document.createElement("pre"); p.id = "layout-measured"; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();</script>"""


def _measured(page: Path, width: int, tmp: Path, script: str, what: str) -> dict:
    """What ``script`` (one of the measuring scripts here, which leaves its JSON in ``<pre id="<what>-measured">``)
    finds in ``page`` loaded in real Chromium in a ``width`` x 900 window (the page's CSP taken out so it runs)."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", text).replace("</body>", script + "</body>")
    copy = page.with_name(f"{what}-{width}-{page.name}")
    copy.write_text(text, encoding="utf-8")
    try:
        dom = chromium_load(copy, tmp / f"{page.parent.name}-{page.stem}-{width}-{what}.png", f"{width},900")
    finally:
        copy.unlink()
    return json.loads(html.unescape(re.search(rf'<pre id="{what}-measured">(.*?)</pre>', dom, re.S).group(1)))


def _layout(page: Path, width: int, tmp: Path) -> dict:
    """What :data:`_MEASURE` finds in ``page`` (:func:`_measured`)."""
    return _measured(page, width, tmp, _MEASURE, "layout")


@pytest.mark.needs_chromium
@pytest.mark.parametrize("width", [1280, 1440])
def test_no_table_wider_than_its_container(example, tmp_path, width):
    """The report and the GPU page of each job's most expensive GPU (the pages with the widest rosters: long
    kernel names, API calls, copies, NVTX ranges), at 1280 and 1440 px: the page and every table's container
    scroll no wider than they are."""
    from pipeline.fleet.outputs import gpu_page_name

    out = example[0]
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    tops = fleet.sort_values("idle_usd_per_month", ascending=False).groupby("job").head(1)
    pages = [out / "report.html"] + [out / "gpu-pages" / gpu_page_name(r, g) for r, g in zip(tops["report"], tops["gpu_key"])]
    assert len(pages) == 5
    for page in pages:
        got = _layout(page, width, tmp_path)
        assert got["page"][0] <= got["page"][1], (page.name, got["page"])
        assert len(got["tables"]) >= 4
        wide = [t for t in got["tables"] if t[1] > t[2]]
        assert not wide, (page.name, wide)


@pytest.mark.needs_chromium
def test_first_screen_leads_with_money(example, tmp_path):
    """At 1440×900 the report's first screen holds the whole fix-first list, the fleet's idle cost and the whole
    per-job table (each ends above 900 px), in that order."""
    got = _layout(example[0] / "report.html", 1440, tmp_path)
    ends = got["ends"]
    assert set(ends) == {"fix-list", "fleet-usd", "jobs"}
    assert ends["fix-list"] < ends["fleet-usd"] < ends["jobs"] <= 900, ends


def test_each_fix_first_entry_counts_the_gpus_it_does_not_link(example):
    """A fix-first entry links at most its three most expensive GPUs; the cell says how many more it rests on, so
    the count and the links agree (a tryout read `6:` beside three links)."""
    out, _, _ = example
    report = (out / "report.html").read_text(encoding="utf-8")
    rows = re.findall(r'<td class="num gpus">(\d+):(.*?)</td>', re.search(r'<table id="fix-list">(.*?)</table>', report,
                                                                          re.S).group(1), re.S)
    assert rows
    for count, cell in rows:
        links = cell.count('<a class="gpu-page"')
        more = re.search(r" and (\d+) more \(fix_first.csv lists them\)", cell)
        assert links + (int(more.group(1)) if more else 0) == int(count), cell
    assert any(int(c) > 3 for c, _ in rows)   # the example fleet's entries rest on more GPUs than they link


def test_unpriced_gpus_after_the_priced_ones_most_idle_first():
    """Unpriced GPUs (no dollars: a model off the rate card) list after the priced ones of their tier group, the
    most idle first, in the printed table and in the report's top GPUs; the priced ones keep their dollar order."""
    from pipeline.cli import format_fleet
    from pipeline.report.summary import top_gpus

    rows = [_row(report="u1.sqlite", gpu_model="Quadro GP100", idle_pct=10.0, idle_usd_per_month=float("nan"),
                 unpriced=True),
            _row(report="u2.sqlite", gpu_model="Quadro GP100", idle_pct=70.0, idle_usd_per_month=float("nan"),
                 unpriced=True),
            _row(report="p1.sqlite", idle_pct=5.0, idle_usd_per_month=100.0, unpriced=False),
            _row(report="p2.sqlite", idle_pct=1.0, idle_usd_per_month=300.0, unpriced=False)]
    fleet = pd.DataFrame(rows)
    assert top_gpus(fleet)["report"].tolist() == ["p2.sqlite", "p1.sqlite", "u2.sqlite", "u1.sqlite"]
    lines = format_fleet(fleet).splitlines()[1:5]
    assert [line.split()[0] for line in lines] == ["$300.00", "$100.00", "unpriced", "unpriced"]
    assert [line.split()[-5] for line in lines[2:]] == ["70.00", "10.00"]
# ---- layout and contrast in real headless Chromium, on the real exports and traces -------------

#: Measures, after load: the fix-first table's container (scrollWidth, clientWidth), each fix-first row's
#: "wins back" basis line (shown, its rect), and every visible element of its own text outside an <svg> whose text
#: colour has a WCAG contrast ratio under 3 against the first opaque background behind it.
_CONTRAST = """<script>(function () {
  function rgb(s) { var m = s.match(/[\\d.]+/g) || []; return m.map(Number); }
  function lum(c) { return c.slice(0, 3).map(function (v) { v /= 255; return v <= 0.03928 ? v / 12.92 :
    Math.pow((v + 0.055) / 1.055, 2.4); }).reduce(function (a, v, i) { return a + v * [0.2126, 0.7152, 0.0722][i]; }, 0); }
  function back(e) {
    for (; e; e = e.parentElement) { var c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length >= 3 && (c.length < 4 || c[3] > 0)) { return c; } }
    return [255, 255, 255];
  }
  function ratio(a, b) { var x = lum(a), y = lum(b); return (Math.max(x, y) + 0.05) / (Math.min(x, y) + 0.05); }
  var out = {fix: null, basis: [], low: [], checked: 0};
  var t = document.getElementById("fix-list");
  if (t) { out.fix = [t.parentElement.scrollWidth, t.parentElement.clientWidth, t.scrollWidth]; }
  document.querySelectorAll("#fix-list .basis").forEach(function (e) {
    var r = e.getBoundingClientRect();
    out.basis.push([e.textContent, r.width, r.height, ratio(rgb(getComputedStyle(e).color), back(e))]);
  });
  document.querySelectorAll("body *").forEach(function (e) {
    if (e.closest("svg") || ["SCRIPT", "STYLE", "PRE"].indexOf(e.tagName) >= 0) { return; }
    var own = Array.prototype.some.call(e.childNodes, function (n) { return n.nodeType === 3 && n.textContent.trim(); });
    var r = e.getBoundingClientRect();
    if (!own || !r.width || !r.height || getComputedStyle(e).visibility !== "visible") { return; }
    out.checked += 1;
    var k = ratio(rgb(getComputedStyle(e).color), back(e));
    if (k < 3) { out.low.push([e.tagName, e.className, e.textContent.slice(0, 80), k]); }
  });
  var p = document.createElement("pre"); p.id = "contrast-measured"; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();</script>"""


@pytest.fixture(scope="module")
def real_reports(tmp_path_factory, profiles):
    """``gpu-idle run`` and ``gpu-idle report`` of the real exports (configs/profiles.yaml) and of the real traces;
    returns their two run folders."""
    from conftest import KINETO

    root = tmp_path_factory.mktemp("views_real")
    outs = []
    for name, src, extra in (("exports", profiles, ["--config", "configs/profiles.yaml"]), ("traces", KINETO, [])):
        run_cli("run", str(src), "--out", str(root / name), *extra)
        run_cli("report", str(root / name), "--out", str(root / name / "report.html"))
        outs.append(root / name)
    return outs


def _contrast(page: Path, width: int, tmp: Path) -> dict:
    """What :data:`_CONTRAST` finds in ``page`` (:func:`_measured`)."""
    return _measured(page, width, tmp, _CONTRAST, "contrast")


@pytest.mark.needs_chromium
@pytest.mark.parametrize("width", [1280, 1920])
def test_real_reports_fit_and_every_text_shows(real_reports, tmp_path, width):
    """Issue 45 point 1, on the reports of the real exports (their data entry is bounded by the evidence: a fix wins
    back $148.89 of $5,673.41) and of the real traces, at 1280 and 1920 px: no table (the fix-first one first)
    scrolls wider than its container, nor the page; each fix-first entry's basis line (what the figure a fix wins
    back rests on) is shown at least 12 em wide (never one word per line) in readable contrast; and every visible
    text of each report and of its most expensive GPU's page has a contrast ratio of at least 3 with the background
    behind it (the old wins-back tag was white on white: 1.0)."""
    from pipeline.fleet.outputs import gpu_page_name

    exports, traces = real_reports
    fixes = pd.read_csv(exports / "fix_first.csv", keep_default_na=False)
    data = fixes[(fixes["scope"] == "fleet") & (fixes["category"] == "data")].iloc[0]
    assert (float(data["usd_per_month"]), float(data["recoverable_usd_per_month"])) == (5673.41, 148.89)
    for out in (exports, traces):
        fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
        top = fleet[fleet["status"] != "error"].sort_values("idle_usd_per_month", ascending=False).iloc[0]
        for page in (out / "report.html", out / "gpu-pages" / gpu_page_name(top["report"], top["gpu_key"])):
            got = _layout(page, width, tmp_path)
            assert got["page"][0] <= got["page"][1], (page, got["page"])
            assert not [t for t in got["tables"] if t[1] > t[2]], (page, got["tables"])
            seen = _contrast(page, width, tmp_path)
            assert seen["checked"] > 50 and not seen["low"], (page, seen["low"])
            if page.name != "report.html":
                continue
            assert seen["fix"][0] <= seen["fix"][1], seen["fix"]
            assert seen["basis"] or out == traces, page   # the exports' data entry is bounded by the evidence
            for text, w, h, k in seen["basis"]:
                assert w >= 12 * 12 and h > 0 and k >= 4.5, (text, w, h, k)
    report = (exports / "report.html").read_text(encoding="utf-8")
    assert "bounded by the evidence: copies on the compute stream" in report


@pytest.mark.slow
def test_one_idle_headline_and_busy_time_apart(real_reports, tmp_path):
    """Issue 45 point 3, on the real exports: the idle cost is the one headline; the wait for the last rank and the
    exposed communication (busy time, overlapping each other) are two items of one block after it, headed as a
    different measure naming the headline they are not in, never siblings of it. Their dollars are the plain sums
    of fleet.csv's columns; the HTML report holds both in its one busy-time section, none in the clusters section."""
    from pipeline.report.html import write_report

    exports = real_reports[0]
    fleet = pd.read_csv(exports / "fleet.csv", keep_default_na=False)
    ok = fleet[fleet["status"] != "error"]
    idle = round(ok["idle_usd_per_month"].astype(float).sum(), 2)
    wait = round(pd.to_numeric(ok["collective_wait_usd_per_month"], errors="coerce").sum(), 2)
    exposed = round(pd.to_numeric(ok["comm_exposed_usd_per_month"], errors="coerce").sum(), 2)
    assert wait > 0 and exposed > 0
    write_report(exports, tmp_path / "s.md", "md")
    md = (tmp_path / "s.md").read_text(encoding="utf-8").splitlines()
    head = next(i for i, ln in enumerate(md) if ln.startswith("**GPU idle cost, "))
    assert f"${idle:,.2f}/month idle" in md[head]
    busy = next(i for i, ln in enumerate(md) if ln.startswith("**Busy time inside collective kernels**"))
    assert busy > head and f"none of it is in the ${idle:,.2f}/month idle above, nor ever added to it" in md[busy]
    items = md[busy + 2:md.index("", busy + 2)]
    assert items[0].startswith(f"- Waiting for the last rank (fix first, inside collectives): collective wait "
                               f"${wait:,.2f}/month: ")
    assert items[-1].startswith("- Exposed communication: ") and f": ${exposed:,.2f}/month (busy time" in items[-1]
    assert sum(f"${wait:,.2f}" in ln for ln in md) == 1 and sum(f"${exposed:,.2f}" in ln for ln in md) == 1
    page = (exports / "report.html").read_text(encoding="utf-8")
    section = re.search(r'<section id="fix-collective">(.*?)</section>', page, re.S).group(1)
    assert "a different measure, not in the idle cost" in section and f"(${idle:,.2f}/month)" in section
    assert 'id="collective-wait-list"' in section and 'id="exposed-comm"' in section
    clusters = re.search(r'<section id="fleet">(.*?)</section>', page, re.S).group(1)
    assert "exposed-comm" not in clusters and "collective-wait" not in clusters
