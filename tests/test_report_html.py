"""The manager report (issue 6): numbers in the HTML against the fleet tables, CSV/Markdown
variants, the CLI, and the page in real headless Chromium (screenshot kept in tests/artifacts/).

The multi-night history is built here from one real run of the example fleet: three nights
derived by scaling each job's idle columns by a per-night factor and dropping a job, laid out
as the nightly sweep lays its state folder (``history/run_date=…/fleet.parquet`` and
``nights/…/``). Every expected number is computed again here with plain pandas.
"""
from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from conftest import KINETO, REPO, chromium_load, run_cli, vouch

from pipeline.config import CostConfig
from pipeline.fleet.outputs import gpu_json_name
from pipeline.report.html import write_report
from pipeline.report.medical import record_stem

ARTIFACTS = REPO / "tests" / "artifacts"
#: night -> {job: idle scale factor}; a job missing from a night was not profiled that night.
NIGHTS = {
    "2026-03-01": {"llm-pretrain": 1.30, "recsys-train": 1.20, "resnet-finetune": 0.90},
    "2026-03-02": {"llm-pretrain": 1.10, "recsys-train": 1.00},                          # resnet gone
    "2026-03-03": {"llm-pretrain": 0.80, "resnet-finetune": 1.50},                       # resnet new, recsys gone
}
SCALED = ["idle_ns", "idle_pct", "idle_usd_per_month", "dark_ns", "device_gap_ns",
          *[f"cat_{c}_{u}" for c in ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu")
            for u in ("ns", "pct")]]


@pytest.fixture(scope="module")
def example_run(tmp_path_factory) -> Path:
    """One real ``gpu-idle run`` of the built-in example fleet (22 GPUs, 3 jobs, 2 clusters)."""
    root = tmp_path_factory.mktemp("report_example")
    run_cli("synth", "--example", str(root / "ex"))
    run_cli("run", str(root / "ex"), "--out", str(root / "out"), "--config", str(root / "ex" / "labels.yaml"))
    return root / "out"


def derive_night(base: pd.DataFrame, scale: dict[str, float]) -> pd.DataFrame:
    """The base fleet restricted to the night's jobs, each job's idle columns times its factor."""
    night = base[base["job"].isin(scale)].copy().reset_index(drop=True)
    factor = night["job"].map(scale).astype(float)
    for col in SCALED:
        if col.endswith("_ns"):
            night[col] = (night[col].astype(float) * factor).round().astype("Int64")
        elif col == "idle_usd_per_month":
            night[col] = (night[col].astype(float) * factor).round(2)
        else:
            night[col] = (night[col].astype(float) * factor).round(4)
    # Nights written before the fix-first columns existed: the report computes them from cat_<c>_ns.
    return night.drop(columns=[c for c in night.columns if c.startswith("fix_")]
                      + ["low_confidence", "confidence_note", "implausible_speedup"])


@pytest.fixture(scope="module")
def sweep_state(example_run, tmp_path_factory) -> tuple[Path, dict[str, pd.DataFrame]]:
    """A sweep state folder with the three NIGHTS; returns it and ``{night: fleet}``."""
    state = tmp_path_factory.mktemp("sweep_state")
    base = pd.read_parquet(example_run / "fleet.parquet")
    fleets = {}
    for night, scale in NIGHTS.items():
        fleet = derive_night(base, scale)
        fleets[night] = fleet
        part = state / "history" / f"run_date={night}"
        part.mkdir(parents=True)
        fleet.to_parquet(part / "fleet.parquet", index=False)
        out = state / "nights" / night
        shutil.copytree(example_run, out)
        fleet.to_parquet(out / "fleet.parquet", index=False)
        for job in set(base["job"]) - set(scale):  # the night's folder holds only its jobs
            (out / "records" / f"{record_stem(job)}.md").unlink()
            for row in base[base["job"] == job].itertuples():
                (out / "gpus" / gpu_json_name(row.report, row.gpu_key)).unlink()
        vouch(out)
    return state, fleets


@pytest.fixture(scope="module")
def sweep_html(sweep_state, tmp_path_factory) -> tuple[str, Path]:
    path = tmp_path_factory.mktemp("report_html") / "report.html"
    assert write_report(sweep_state[0], path) == str(path)
    return path.read_text(encoding="utf-8"), path


def money(x: float) -> str:
    return f"${x:,.2f}"


def signed(x: float) -> str:
    return "$0.00" if round(x, 2) == 0 else ("+" if x > 0 else "−") + f"${abs(x):,.2f}"


def table(page: str, table_id: str) -> str:
    m = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S)
    assert m, f"no table {table_id}"
    return m.group(1)


def cells(row_html: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row_html, re.S)]


def rows_by(page: str, table_id: str, attr: str) -> dict[str, list[str]]:
    return {html.unescape(k): cells(v) for k, v in
            re.findall(rf'<tr {attr}="([^"]*)"[^>]*>(.*?)</tr>', table(page, table_id), re.S)}


@pytest.mark.slow
def test_report_numbers_match_the_fleet_tables(sweep_state, sweep_html):
    state, fleets = sweep_state
    page, _ = sweep_html
    nights = sorted(fleets)
    cur, prev = fleets[nights[-1]], fleets[nights[-2]]
    ok = cur[cur["status"] != "error"]

    # Headline: fleet, per cluster, per job.
    total = ok["idle_usd_per_month"].astype(float).sum()
    m = re.search(r'id="fleet-usd" data-usd="([0-9.]+)">([^<]+)<', page)
    assert m and float(m.group(1)) == pytest.approx(total, abs=0.006) and m.group(2) == money(total)
    clusters = rows_by(page, "clusters", "data-cluster")
    for cluster, usd in ok.groupby("cluster")["idle_usd_per_month"].sum().items():
        assert clusters[cluster][-1] == money(usd)
        assert clusters[cluster][1] == str(int((ok["cluster"] == cluster).sum()))
    jobs = rows_by(page, "jobs", "data-job")
    assert set(jobs) == set(cur["job"])
    for job, usd in ok.groupby("job")["idle_usd_per_month"].sum().items():
        assert money(usd) in jobs[job]
    # Rate card: every (model, rate, source) the night used.
    # (names and dates kept whole: each word with a hyphen or slash in a span the page never breaks, issue 45)
    card = re.sub(r'<span class="w">(.*?)</span>', r"\1", table(page, "rate-card"))
    for (model, rate, source), _g in ok.groupby(["rate_model", "rate_usd_per_hour", "rate_source"]):
        # (Jinja escapes ' as &#39;: the card's sources quote providers' pages since issue 41, "Modal's pricing page")
        shown = html.escape(source).replace("&#x27;", "&#39;")
        assert f"<td>{model}</td><td class=\"num\">{money(rate)}</td><td>{shown}</td>" in card
    assert f"{nights[0]} – {nights[-1]}" in page

    # Top 10: order, job, idle %, main category, link to a medical record that is in the page.
    expected = ok.assign(usd=ok["idle_usd_per_month"].astype(float)).sort_values(
        ["usd", "report", "gpu_key"], ascending=[False, True, True]).head(10)
    top = re.findall(r'<tr data-gpu="([^"]+)" data-report="([^"]+)">(.*?)</tr>', table(page, "top10"), re.S)
    assert [(g, r) for g, r, _ in top] == list(zip(expected["gpu_key"], expected["report"]))
    for (_, _, row), exp in zip(top, expected.itertuples()):
        c = cells(row)
        assert c[2] == exp.job and c[5] == f"{float(exp.idle_pct):.2f} %" and c[7] == exp.main_category
        assert c[9] == money(exp.idle_usd_per_month)
        anchor = re.search(r'href="#([^"]+)"', row).group(1)
        assert anchor == f"record-{record_stem(exp.job)}" and f'<section class="record" id="{anchor}">' in page
    # The medical records of the current night are embedded (rendered from their Markdown).
    for job in cur["job"].unique():
        md = (state / "nights" / nights[-1] / "records" / f"{record_stem(job)}.md").read_text()
        first_gap = re.search(r"^\| 1 \| ([^|]+) \| (\d+\.\d{6} s) \|", md, re.M)
        section = page.split(f'id="record-{record_stem(job)}"', 1)[1].split("</section>", 1)[0]
        assert f"<td>{first_gap.group(2)}</td>" in section and "<table>" in section
    assert 'id="record-recsys-train"' not in page  # not profiled on the current night

    # Trend: per night total and change, new / gone jobs, movers by |Δ $|.
    night_rows = rows_by(page, "nights", "data-date")
    assert list(night_rows) == nights[::-1]
    before = None
    for night in nights:
        f = fleets[night]
        usd = f.loc[f["status"] != "error", "idle_usd_per_month"].astype(float).sum()
        assert night_rows[night][4] == money(usd)
        assert night_rows[night][5] == ("–" if before is None else signed(usd - before))
        before = usd
    prev_total = prev["idle_usd_per_month"].astype(float).sum()
    assert re.search(r'id="fleet-delta">([^<]+)<', page).group(1) == signed(total - prev_total)
    changes = re.findall(r'<tr data-change="(\w+)" data-job="([^"]+)">', table(page, "job-changes"))
    assert changes == [("new", "resnet-finetune"), ("gone", "recsys-train")]
    a = ok.groupby("job")["idle_usd_per_month"].sum()
    b = prev[prev["status"] != "error"].groupby("job")["idle_usd_per_month"].sum()
    both = sorted(set(a.index) & set(b.index))
    deltas = sorted(((job, a[job] - b[job]) for job in both), key=lambda x: (-abs(x[1]), x[0]))
    movers = rows_by(page, "movers", "data-job")
    assert list(movers) == [j for j, _ in deltas]
    for job, d in deltas:
        assert movers[job][:4] == [job, money(b[job]), money(a[job]), signed(d)]

    # The four plots are inline SVG with drawn content; nothing is fetched at view time.
    svgs = re.findall(r"<svg class=\"plot\"[^>]*>(.*?)</svg>", page, re.S)
    assert len(svgs) == 5 and all(s.count("<path") >= 5 for s in svgs)
    assert not re.search(r'(src|href)="(https?:)?//', page) and "<script" not in page and "<link" not in page


@pytest.mark.slow
def test_report_of_an_older_night_and_of_a_run_folder(sweep_state, example_run, tmp_path):
    state, fleets = sweep_state
    older = write_report(state, tmp_path / "n2.html", night="2026-03-02")
    page = Path(older).read_text()
    n2 = fleets["2026-03-02"]
    assert money(n2["idle_usd_per_month"].sum()) in re.search(r'id="fleet-usd"[^>]*>([^<]+)<', page).group(1)
    assert 'data-date="2026-03-03"' not in page
    # A plain run folder: one night, no comparison, still every section.
    # (Into a folder of its own: n2.html's GPU pages are beside it, and a second report is refused there.)
    run_html = tmp_path / "run" / "run.html"
    proc = run_cli("report", str(example_run), "--out", str(run_html))
    pages = tmp_path / "run" / "gpu-pages"
    n_pages = len(list(pages.glob("*.html")))
    assert n_pages == len(pd.read_parquet(example_run / "fleet.parquet").query("status != 'error'"))
    assert proc.stdout.strip() == f"wrote {run_html} and {n_pages} GPU page(s) in {pages}{os.sep}"
    page = run_html.read_text()
    base = pd.read_parquet(example_run / "fleet.parquet")
    assert f'>{money(base["idle_usd_per_month"].sum())}<' in page
    assert "Only one night so far" in page and page.count('<svg class="plot"') == 5
    assert "this page shows a single <code>gpu-idle run</code>" in page  # not a sweep's first night
    bad = run_cli("report", str(tmp_path), "--out", str(tmp_path / "x.html"), check=False)
    assert bad.returncode == 2 and "no fleet.parquet" in bad.stderr  # nothing done: README "Exit status"
    night = run_cli("report", str(example_run), "--out", str(tmp_path / "y.html"), "--night", "2026-01-01", check=False)
    assert night.returncode == 2 and "--night needs a sweep state folder" in night.stderr


def test_a_run_folders_html_report_goes_into_it_by_default(example_run, tmp_path):
    """`gpu-idle report DIR` with no --out: the HTML report of a run folder is DIR/report.html (where `make run`
    renders it, so the records' links resolve); another format, or a folder that is no run folder, needs --out
    (exit 2, nothing written)."""
    run = tmp_path / "run"
    shutil.copytree(example_run, run)
    proc = run_cli("report", str(run))
    n_pages = len(list((run / "gpu-pages").glob("*.html")))
    assert n_pages == len(pd.read_parquet(run / "fleet.parquet").query("status != 'error'"))
    assert proc.stdout.strip() == f"wrote {run / 'report.html'} and {n_pages} GPU page(s) in {run / 'gpu-pages'}{os.sep}"
    for args in (("--format", "md"), ()):
        folder = run if args else tmp_path
        bad = run_cli("report", str(folder), *args, check=False)
        assert bad.returncode == 2 and "--out FILE is needed: its default, RESULTS/report.html, is only for the " \
            "HTML report of a run folder" in bad.stderr
    assert not (tmp_path / "report.html").exists()


@pytest.mark.slow
def test_csv_and_markdown_variants(sweep_state, tmp_path):
    state, fleets = sweep_state
    cur = fleets["2026-03-03"]
    path = write_report(state, tmp_path / "gpus.csv", fmt="csv")
    table_ = pd.read_csv(path, keep_default_na=False)
    assert len(table_) == len(cur) and set(table_["run_date"]) == {"2026-03-03"}
    assert list(table_["idle_usd_per_month"]) == sorted(cur["idle_usd_per_month"].astype(float), reverse=True)
    assert table_["idle_usd_per_month"].sum() == pytest.approx(cur["idle_usd_per_month"].sum(), abs=0.01)
    merged = table_.merge(cur, on=["report", "gpu_key"], suffixes=("", "_f"))
    assert (merged["idle_ms"] - merged["idle_ns"].astype(float) / 1e6).abs().max() < 0.001
    md = Path(write_report(state, tmp_path / "summary.md", fmt="md")).read_text()
    prev = fleets["2026-03-02"]
    assert money(cur["idle_usd_per_month"].sum()) in next(ln for ln in md.splitlines() if ln.startswith("**GPU idle cost"))
    assert f"Since 2026-03-02: {signed(cur['idle_usd_per_month'].sum() - prev['idle_usd_per_month'].sum())}" in md
    assert "New jobs: resnet-finetune" in md and "Gone (fixed or not profiled): recsys-train" in md
    with pytest.raises(ValueError):
        write_report(state, tmp_path / "x.pdf", fmt="pdf")


@pytest.mark.needs_chromium
def test_report_in_headless_chromium(sweep_html, sweep_state):
    """Real Chromium loads the file: no console error, every plot's SVG drawn, the fix-first list
    first; screenshot kept."""
    page, path = sweep_html
    check_fix_first_page(page, sweep_state[1]["2026-03-03"])
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report.png"
    if shot.exists():
        shot.unlink()
    dom = chromium_load(path, shot, "1400,3000")
    assert shot.exists() and shot.stat().st_size > 50_000
    with open(shot, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")) == (1400, 3000)
    # The DOM after load: four plots, each with drawn paths and text, and the headline filled in.
    svgs = re.findall(r'<svg class="plot"[^>]*>(.*?)</svg>', dom, re.S)
    assert len(svgs) == 5
    for svg in svgs:
        assert svg.count("<path") >= 5 and "<text" in svg
    assert re.search(r'id="fleet-usd"[^>]*>\$[0-9,]+\.\d\d<', dom)
    assert re.search(r'<table id="fix-list">.*?<tr data-category=', dom, re.S)
    os.chmod(shot, 0o644)


def test_report_formats_constant_matches():
    """Both copies of the format list (the CLI's, kept apart so that loading the CLI does not
    import the renderer, and the renderer's) are the three formats docs/outputs.md documents
    (``--format html|csv|md``, html the default): what ``gpu-idle report --format`` accepts and
    what ``write_report`` renders; any other format is refused by both."""
    from click.testing import CliRunner

    from pipeline.report import command, html

    documented = ("html", "csv", "md")
    option = next(p for p in command.report.params if p.name == "fmt")
    assert (tuple(option.type.choices), option.default) == (documented, "html")
    assert tuple(command.FORMATS) == tuple(html.FORMATS) == documented
    refused = CliRunner().invoke(command.report, [str(REPO), "--out", "x.pdf", "--format", "pdf"])
    assert refused.exit_code == 2 and "'pdf' is not one of 'html', 'csv', 'md'" in refused.output
    with pytest.raises(ValueError, match=r"^unknown report format 'pdf'; one of html, csv, md$"):
        write_report(REPO, "x.pdf", "pdf")


@pytest.mark.slow
def test_cached_render_is_identical_and_reuses_records(sweep_state, tmp_path):
    """With a plot cache, the page is the same bytes as without; the medical records' HTML is
    kept there (one file per record) and read back on the next render."""
    import hashlib

    from pipeline.checksums import seal_file
    from pipeline.report.html import render_html
    from pipeline.report.summary import load_results

    cache = tmp_path / "plots"
    res = load_results(str(sweep_state[0]))
    first = render_html(res, str(cache))
    kept = sorted(p.name for p in cache.iterdir() if p.suffix == ".html")
    assert len(kept) == len(re.findall(r'id="record-', first)) > 0
    for p in cache.iterdir():  # a kept record is what the next render shows (its checksum rewritten to match)
        if p.suffix == ".html":
            p.write_text(p.read_text(encoding="utf-8").replace("<p>", "<p>KEPT ", 1), encoding="utf-8")
            seal_file(p, hashlib.sha256(p.read_bytes()).hexdigest())
    second = render_html(res, str(cache))
    assert second.count("<p>KEPT ") == len(kept)
    assert first == render_html(res, None)


# ---- issue 13: the fix-first list opens the page --------------------------------------------

FIXABLE = ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu")


def expected_fixes(fleet: pd.DataFrame) -> list[tuple[str, float]]:
    """(category, USD/month) of the fleet, largest first (ties by name), recomputed from the raw
    columns: per GPU round(cat_<c>_ns / window_ns × rate × 730, 2), summed per category; only
    categories with idle on some GPU; never profiler / untraced."""
    ok = fleet[fleet["status"] != "error"]
    out = []
    for c in FIXABLE:
        ns = ok[f"cat_{c}_ns"].fillna(0).astype("int64")
        if (ns > 0).sum() == 0:
            continue
        per_gpu = [round(int(n) / int(w) * float(r) * 730.0, 2)
                   for n, w, r in zip(ns, ok["window_ns"], ok["rate_usd_per_hour"])]
        out.append((c, round(sum(per_gpu), 2)))
    return sorted(out, key=lambda e: (-e[1], e[0]))


def first_section(page: str) -> str:
    m = re.search(r"<main>\s*<section id=\"([^\"]+)\">(.*?)</section>", page, re.S)
    assert m, "no section in <main>"
    assert m.group(1) == "fix-first"
    return m.group(2)


def check_fix_first_page(page: str, fleet: pd.DataFrame) -> None:
    sec = first_section(page)
    rows = re.findall(r'<tr data-category="([^"]+)"[^>]*>(.*?)</tr>', sec, re.S)
    want = expected_fixes(fleet)
    assert want, "the example fleet has application idle"
    # what a fix wins back (the example's evidence bounds none: the category's whole idle), then the idle's dollars;
    # an archived category (nothing prescribed: under analysis.actionable_pct on its GPUs) after every prescribed one
    from pipeline.analysis.fixfirst import ARCHIVED
    archived = {c for c, r in rows if ARCHIVED in html.unescape(r)}
    want = sorted(want, key=lambda e: e[0] in archived)   # stable: dollars order kept within each group
    from pipeline.report.words import WHOLE_IDLE   # said under the figure (issue 45), as the Markdown says it
    assert [(c, cells(r)[0], cells(r)[2], cells(r)[3]) for c, r in rows] == [
        (c, str(i), money(u) + WHOLE_IDLE, money(u)) for i, (c, u) in enumerate(want, 1)]
    assert not {c for c, _ in rows} & {"profiler", "untraced"}
    fix_sum = re.search(r'<section id="fix-sum">(.*?)</section>', page, re.S).group(1)   # below the per-job table
    assert '<svg class="plot" role="img" aria-label="fix-first-usd"' in fix_sum
    gloss = re.search(r'<section id="glossary">(.*?)</section>', page, re.S).group(1)
    assert [c for c in re.findall(r'<tr data-category="([^"]+)"', gloss)] == [
        "data", "comm", "sync", "boundary", "periodic", "launch", "cpu"]
    assert 'data-category="profiler"' in gloss and 'data-category="untraced"' in gloss
    assert "extrapolat" in gloss and "at least 5 stable iterations" in gloss and "<code>toy</code>" in gloss


@pytest.mark.slow
def test_fix_first_list_opens_the_page(example_run, tmp_path):
    """A real run: the first section is the fix-first list, dollars recomputed from fleet.parquet."""
    fleet = pd.read_parquet(example_run / "fleet.parquet")
    page = Path(write_report(example_run, tmp_path / "r.html")).read_text(encoding="utf-8")
    check_fix_first_page(page, fleet)


@pytest.mark.slow
def test_fix_first_list_of_an_older_run_folder(example_run, tmp_path):
    """A run folder written before the fix columns and fix_first.* existed: the same list,
    computed from the cat_<c>_ns columns."""
    old = tmp_path / "old"
    shutil.copytree(example_run, old)
    fleet = pd.read_parquet(old / "fleet.parquet")
    fleet = fleet.drop(columns=[c for c in fleet.columns if c.startswith("fix_")]
                       + ["low_confidence", "confidence_note", "implausible_speedup"])
    fleet.to_parquet(old / "fleet.parquet", index=False)
    for name in ("fix_first.csv", "fix_first.json"):
        (old / name).unlink(missing_ok=True)
    vouch(old)
    page = Path(write_report(old, tmp_path / "r.html")).read_text(encoding="utf-8")
    check_fix_first_page(page, fleet)


def test_markdown_leads_with_the_fix_first_list(example_run, tmp_path):
    fleet = pd.read_parquet(example_run / "fleet.parquet")
    md = Path(write_report(example_run, tmp_path / "s.md", fmt="md")).read_text(encoding="utf-8")
    want = expected_fixes(fleet)
    lines = md.splitlines()
    assert lines[0].startswith("**Fix first**")
    table_rows = [ln for ln in lines[1:] if ln.startswith("| ")][1:1 + min(5, len(want))]
    assert [[c.strip() for c in ln.strip("|").split("|")][:4] for ln in table_rows] == [
        [str(i), c, money(u) + " (the whole idle)", money(u)] for i, (c, u) in enumerate(want[:5], 1)]
    # the caveats are never an entry (a remedy may name the PyTorch profiler)
    assert not {ln.strip("|").split("|")[1].strip() for ln in table_rows} & {"profiler", "untraced"}
    assert lines.index("") < next(i for i, ln in enumerate(lines) if ln.startswith("**GPU idle cost"))


@pytest.mark.slow
def test_fix_first_list_of_the_real_profiles(span_run, tmp_path):
    """The real exports (--window span): the page's list is the run's own fix_first.json fleet list,
    and its dollars are recomputed from fleet.parquet; the profiler / untraced idle these exports
    hold stays out of it."""
    fleet = pd.read_parquet(span_run / "fleet.parquet")
    ok = fleet[fleet["status"] != "error"]
    assert (ok["cat_profiler_ns"].fillna(0).sum() + ok["cat_untraced_ns"].fillna(0).sum()) > 0
    page = Path(write_report(span_run, tmp_path / "r.html")).read_text(encoding="utf-8")
    every = [e for e in json.loads((span_run / "fix_first.json").read_text()) if e["scope"] == "fleet"]
    written = [e for e in every if e["section"] == "device idle"]
    # per category the entries' idle dollars (one per tier part) add up to the plain computation from the fleet
    sums: dict = {}
    for e in written:
        sums[e["category"]] = round(sums.get(e["category"], 0.0) + e["idle_usd_per_month"], 2)
    assert sorted((c, money(u)) for c, u in sums.items()) == sorted((c, money(u)) for c, u in expected_fixes(fleet))
    # ranked by tier part (trusted, low, toy), then by what a fix wins back (issue 45 points 2 and 7)
    # the archived entries (rank null: nothing prescribed) after every ranked one (issue 45)
    keys = [(e["rank"] is None, {"medium": 0, "high": 0, "low": 1, "toy": 2}[e["confidence_tier"]],
             -e["fix_wins_back_usd_per_month"]) for e in written]
    assert keys == sorted(keys)
    # the page shows that list: what a fix wins back first (and on what basis when bounded), then the idle
    rows = re.findall(r'<tr data-category="([^"]+)"[^>]*>(.*?)</tr>', first_section(page), re.S)
    assert [(c, cells(r)[0], cells(r)[2], cells(r)[3]) for c, r in rows] == [
        (e["category"], "" if e["rank"] is None else str(e["rank"]), money(e["fix_wins_back_usd_per_month"]) + (
            f"bounded by the evidence: {e['fix_wins_back_basis']}" if e["fix_wins_back_usd_per_month"] < e["idle_usd_per_month"]
            else "the whole idle"), money(e["idle_usd_per_month"])) for e in written]
    # the wait inside collectives (the NCCL export's two GPUs) follows, in its own section: never in the page's list
    [coll] = [e for e in every if e["section"] == "inside collectives"]
    assert every[-1] is coll and coll["category"] == "collective wait"
    sec = first_section(page)
    for e in written:
        if e["low_confidence"]:   # the hover names how many GPUs and the first few; the file, every one and why
            low = e["confidence_note"].count(": ")
            assert f'title="low confidence on {low} of the {e["gpus"]} GPU(s) with {e["category"]} idle (' in sec
    # the list, the slivers, and the profiler and untraced time these exports hold add up to the headline
    got = check_reconciliation(page, fleet)
    assert got["profiler"] + got["untraced"] > 0


# ---- issue 14 tryout: markers, reconciliation, short hover texts, CSV columns ------------------

def reconcile_on_page(page: str) -> dict:
    m = re.search(r'<p class="note" id="fix-reconcile" ([^>]*)>(.*?)</p>', page, re.S)
    assert m, "no reconciliation under the fix-first list"
    return {k: float(v) for k, v in re.findall(r'data-([a-z]+)="([-0-9.]+)"', m.group(1))} | {"text": m.group(2)}


def check_reconciliation(page: str, fleet: pd.DataFrame) -> dict:
    """The figures under the fix-first list, recomputed from the fleet table: headline = Σ idle_usd_per_month,
    list = the expected fix-first sum, slivers = Σ idle_usd × device_sliver_ns / idle_ns over GPUs that are
    not launch-bound, profiler and untraced their columns; they add up to the headline within the cents
    that rounding every GPU's figures leaves (at most 10 rounded figures a GPU, ½ cent each). In ns the
    identity is exact."""
    ok = fleet[fleet["status"] != "error"]
    got = reconcile_on_page(page)
    idle = ok["idle_ns"].astype("int64")
    app = sum(ok[f"cat_{c}_ns"].fillna(0).astype("int64") for c in FIXABLE)
    slivers = ok["device_sliver_ns"].astype("int64").where(~ok["launch_bound"].astype(bool), 0)
    prof, untr = ok["cat_profiler_ns"].astype("int64"), ok["cat_untraced_ns"].astype("int64")
    assert int(idle.sum()) == int(app.sum() + slivers.sum() + prof.sum() + untr.sum())
    usd = ok["idle_usd_per_month"].astype(float)
    want = {"headline": round(usd.sum(), 2), "fixes": round(sum(u for _, u in expected_fixes(fleet)), 2),
            "slivers": round(float((usd * slivers / idle).sum()), 2),
            "profiler": round(ok["profiler_usd_per_month"].astype(float).sum(), 2),
            "untraced": round(ok["untraced_usd_per_month"].astype(float).sum(), 2), "other": 0.0}
    assert {k: got[k] for k in want} == want
    rounding = round(want["headline"] - want["fixes"] - want["slivers"] - want["profiler"] - want["untraced"], 2)
    assert got["rounding"] == rounding and abs(rounding) <= 0.05 * len(ok)
    text = html.unescape(re.sub(r"<[^>]+>", "", got["text"]))
    assert f"The list adds up to {money(want['fixes'])} of the {money(want['headline'])} idle cost per month" in text
    assert text.endswith("are in the list.") and f"= {money(want['headline'])}." in text
    return want | {"rounding": rounding}


@pytest.mark.slow
def test_fix_first_total_is_reconciled_with_the_headline(example_run, tmp_path):
    """The example fleet: list $11,164.96 of the $12,224.40 headline; the rest is the slivers of the GPUs
    that are not launch-bound ($1,059.39) and five cents of rounding; no profiler or untraced time."""
    fleet = pd.read_parquet(example_run / "fleet.parquet")
    page = Path(write_report(example_run, tmp_path / "r.html")).read_text(encoding="utf-8")
    got = check_reconciliation(page, fleet)
    assert got == {"headline": 12224.40, "fixes": 11164.96, "slivers": 1059.39, "profiler": 0.0, "untraced": 0.0,
                   "other": 0.0, "rounding": 0.05}
    md = Path(write_report(example_run, tmp_path / "s.md", fmt="md")).read_text(encoding="utf-8")
    assert ("How the list adds up to the headline: $12,224.40/month idle = $11,164.96 (the fix-first list) + "
            "$1,059.39 of sub-threshold slivers on GPUs that are not launch-bound (no category holds them) + $0.00 "
            "of profiler overhead + $0.00 of untraced time + $0.05 of rounding to cents.") in md


@pytest.mark.slow
def test_low_confidence_hover_text_is_short(example_run, tmp_path):
    """The fix-first list's low-confidence hover: how many GPUs, each kind of shortfall with its count, the
    first three by the short names of the medical records, how many more; not every absolute path (before:
    a multi-KB title). The full list stays in fix_first.json. The example fleet's GPUs are medium under the
    defaults; under a 1 s medium window (``confidence.medium_min_window_ns``) every one is low."""
    fleet = pd.read_parquet(example_run / "fleet.parquet")
    strict = tmp_path / "strict.yaml"
    strict.write_text("confidence:\n  medium_min_window_ns: 1000000000\n")
    labels = example_run.parent / "ex" / "labels.yaml"
    run_cli("run", str(example_run.parent / "ex"), "--out", str(tmp_path / "out"), "--config", str(labels),
            "--config", str(strict))
    example_run = tmp_path / "out"
    fleet = pd.read_parquet(example_run / "fleet.parquet")
    assert set(fleet["confidence_tier"]) == {"low"}
    page = Path(write_report(example_run, tmp_path / "r.html")).read_text(encoding="utf-8")
    rows = dict(re.findall(r'<tr data-category="([^"]+)"[^>]*>(.*?)</tr>', table(page, "fix-list"), re.S))
    ok = fleet[fleet["status"] != "error"].sort_values(["report", "gpu_key"])
    written = {e["category"]: e for e in json.loads((example_run / "fix_first.json").read_text()) if e["scope"] == "fleet"}
    for cat, row in rows.items():
        title = html.unescape(re.search(r'class="tag lowconf" title="([^"]*)"', row).group(1))
        part = ok[ok[f"cat_{cat}_ns"] > 0]
        low = part[part["low_confidence"]]
        # every GPU of the example fleet rests on a window under 1 s (about 0.25-0.39 s), none on too few iterations
        assert all(n.startswith("window 0.") and n.endswith(" s (under 1 s)") for n in low["confidence_note"])
        names = []
        for r in low.head(3).itertuples():   # the record's numbering: the job's GPUs by report and GPU key
            job = ok[ok["job"] == r.job]
            number = list(zip(job["report"], job["gpu_key"])).index((r.report, r.gpu_key)) + 1
            model = {"NVIDIA H100 80GB HBM3": "H100", "A100": "A100", "NVIDIA A100-SXM4-80GB": "A100"}[r.gpu_model]
            short = r.gpu_key[4:12] if r.gpu_key.startswith("GPU-") else r.gpu_key
            names.append(f"{model} #{number} {short} in {r.job}")
        more = len(low) - 3
        assert title == (f"low confidence on {len(low)} of the {len(part)} GPU(s) with {cat} idle (window under 1 s: "
                         f"{len(low)}): " + ", ".join(names) + (f" and {more} more" if more > 0 else "")
                         + ". Every GPU and why: fix_first.json")
        assert len(title) < 300 and not re.search(r"\.sqlite|\.json\b", title.replace("fix_first.json", ""))  # no path
        assert len(written[cat]["confidence_note"]) > 1000    # the full list, kept in the file
    assert rows["comm"] and ("H100 #1 7a2a3240 in llm-pretrain, H100 #2 885383d1 in llm-pretrain, H100 #3 9b5c4f8d in "
                             "llm-pretrain") in html.unescape(
        rows["comm"])


@pytest.mark.slow
def test_top_gpus_mark_assumed_rates_and_low_confidence(tmp_path):
    """A toy ROCm trace ("AMD Radeon Graphics", not on the rate card: under `cost.unlisted: default` priced as the
    default model H100; unpriced by default since issue 41, test_rates covers that) over
    an 8,594,445 ns span with no stable iteration: the top-10 row, the Markdown top 5 and the CSV say so; an H100
    export beside it (low) is priced at its own rate (no rate marker) and leads the top 10 and the Markdown top 5
    although the toy costs more (by tier, then dollars: issue 45)."""
    from pipeline.synth import generate_training_report

    inputs = tmp_path / "in"
    inputs.mkdir()
    generate_training_report(str(inputs / "train.sqlite"), gpus=1, iterations=8, seed=3, straggler_rank=None)
    toy = KINETO / "mi250_rocm_minitoy.json.gz"
    out = tmp_path / "out"
    cfg = tmp_path / "default.yaml"
    cfg.write_text("cost:\n  unlisted: default\n", encoding="utf-8")
    run_cli("run", str(toy), str(inputs), "--out", str(out), "--config", str(cfg))
    fleet = pd.read_parquet(out / "fleet.parquet")
    t = fleet[fleet["report"] == str(toy)].iloc[0]
    h = fleet[fleet["report"] != str(toy)].iloc[0]
    assert (t.gpu_model, t.rate_model, int(t.window_ns), int(t.iterations)) == ("AMD Radeon Graphics", "H100", 8_594_445, 0)
    assert (h.gpu_model, h.rate_model, bool(h.low_confidence)) == ("NVIDIA H100 80GB HBM3", "H100", True)
    page = Path(write_report(out, tmp_path / "r.html")).read_text(encoding="utf-8")
    top = re.findall(r'<tr data-gpu="([^"]+)" data-report="([^"]+)">(.*?)</tr>', table(page, "top10"), re.S)
    assert [html.unescape(r[1]) for r in top] == [str(h.report), str(toy)]
    assert float(t.idle_usd_per_month) > float(h.idle_usd_per_month)
    mark = re.search(r'<td class="caveats">(.*?)</td>', top[1][2], re.S).group(1)
    tags = [(html.unescape(a), html.unescape(b)) for a, b in re.findall(r'title="([^"]*)">([^<]*)</span>', mark)]
    h100 = next(r.source for r in CostConfig().rates if r.model == "H100")
    source = f"rate card (default model: 'AMD Radeon Graphics' is not on the card): {h100}"
    assert t.rate_source == source
    # 8,594,445 ns = 8.6 ms (under 50 ms), 14 kernels (fewer than 50): a toy
    assert tags == [(f"AMD Radeon Graphics is not on the rate card: priced as H100, the default model ({source})",
                     "≈ H100 rate"),
                    ("window 0.008594 s (under 0.05 s); 14 kernels in W (fewer than 50)",
                     "toy capture: 8.6 ms window, 14 kernels"),
                    ("a speed-up of 10× or more: the idle holds 90 % or more of the window "
                     "(docs/definitions.md#fix-first)", "implausible speed-up")]   # its speed-up: 77.51× (10× or more)
    assert float(t.amdahl_speedup) >= 10 > float(h.amdahl_speedup)
    other = re.search(r'<td class="caveats">(.*?)</td>', top[0][2], re.S).group(1)
    assert "≈" not in other      # on the card: its own rate
    # the export: 4 stable iterations (fewer than 5) over 169,023,922 ns = 169.0 ms
    assert (int(h.iterations), int(h.window_ns)) == (4, 169_023_922)
    assert ">low confidence: 4 stable iterations, 169.0 ms window</span>" in other
    legend = html.unescape(re.sub(r"<[^>]+>", "", re.search(r'<p class="note" id="top10-legend">(.*?)</p>', page, re.S).group(1)))
    assert legend.startswith("≈ H100 rate the GPU's model is not on the rate card") and "low confidence the figure" in legend

    md = Path(write_report(out, tmp_path / "s.md", fmt="md")).read_text(encoding="utf-8")
    lines = md.splitlines()
    gpus = lines.index("| # | GPU | job | idle | main category | $/month |")  # after the fix-first table
    first = next(ln for ln in lines[gpus:] if ln.startswith("| 2 | AMD Radeon Graphics #1 "))  # by its name
    assert first.endswith(f"| {money(t.idle_usd_per_month)} (≈ H100 rate) (toy capture: 8.6 ms window, 14 kernels) |")
    assert ("(≈ H100 rate): the GPU's model is not on the rate card or not named, priced at the default model's "
            "rate.") in md  # in words, no configuration key (issue 45)

    csv = pd.read_csv(write_report(out, tmp_path / "g.csv", fmt="csv"), keep_default_na=False)
    for col in ("iterations", "kept_iterations", "low_confidence", "confidence_note", "comm_exposed_ms",
                "comm_exposed_pct", "comm_exposed_usd_per_month"):
        assert col in csv.columns, col
    rows = csv.set_index("report")
    for r in (t, h):
        c = rows.loc[r.report]
        assert (int(c.iterations), str(c.kept_iterations), bool(c.low_confidence), c.confidence_note) == (
            int(r.iterations), r.kept_iterations, bool(r.low_confidence), r.confidence_note)
        assert (c.comm_exposed_ms, c.comm_exposed_pct, c.comm_exposed_usd_per_month) == (
            round(int(r.comm_exposed_ns) / 1e6, 3), r.comm_exposed_pct, r.comm_exposed_usd_per_month)


def test_markdown_fix_list_sets_the_untrusted_entries_apart_as_the_page_does():
    """The Markdown fix-first list marks where the entries resting on toy or low-confidence captures begin, as the
    HTML list's "Apart" row does (a fresh user read "1 launch, 2 cpu, 3 data, 4 cpu" as misranked)."""
    from pipeline.report.html import FIX_APART, _markdown_fixes

    def entry(rank, cat, usd, tier):
        return {"rank": rank, "category": cat, "idle_usd_per_month": usd, "speedup": 1.5, "remedy": "r",
                "trusted": tier in ("medium", "high"), "confidence_tier": tier, "low_confidence": tier in ("toy", "low"),
                "implausible_speedup": False, "assumed_usd_per_month": 0.0, "assumed_gpus": 0, "unpriced_gpus": 0,
                "fix_wins_back_usd_per_month": usd, "fix_wins_back_basis": ""}

    rows = [ln for ln in _markdown_fixes([entry(1, "launch", 503.21, "medium"), entry(2, "cpu", 13.17, "high"),
                                          entry(1, "data", 5673.41, "low"), entry(2, "cpu", 182.46, "toy")])
            if ln.startswith("| ") and not ln.startswith("| #")]
    assert [r.split(" | ")[1] for r in rows] == ["launch", "cpu", FIX_APART, "data", "cpu"]
    # none trusted: the row comes first; all trusted: no row
    untrusted = [ln for ln in _markdown_fixes([entry(1, "cpu", 1.0, "toy")]) if ln.startswith("| ")]
    assert untrusted[1] == f"| | {FIX_APART} | | | | | |"          # after the header row
    assert not any(FIX_APART in ln for ln in _markdown_fixes([entry(1, "cpu", 1.0, "high")]))


def test_a_re_priced_sweep_report_shows_tonight_alone(sweep_state, tmp_path):
    """The sweep state priced again with another card (every rate doubled): the earlier nights, each at its own
    night's rates, are not in the trend (tonight's alone, said in a note), and no dollar of tonight's own pricing
    is on the page unless the doubled card gives it too."""
    import re

    from pipeline.config import config_from_dict
    from pipeline.report.summary import load_results

    state, fleets = sweep_state
    tonight = fleets["2026-03-03"]
    ok = tonight[tonight["status"].isin(["ok", "partial"])]
    rates = sorted({(str(m), float(r)) for m, r in zip(ok["rate_model"], ok["rate_usd_per_hour"])})
    cfg = config_from_dict({"cost": {"rates": [{"model": m, "usd_per_gpu_hour": 2 * r, "match": [m]} for m, r in rates]}})
    res = load_results(str(state), cfg=cfg, configs=["doubled.yaml"])
    assert [d for d, _ in res.history] == ["2026-03-03"] and res.lacking == []
    path = tmp_path / "report.html"
    write_report(state, path, cfg=cfg, configs=["doubled.yaml"])
    page = path.read_text(encoding="utf-8")
    assert 'id="trend-withheld"' in page and 'id="records-withheld"' in page
    shown = set(re.findall(r"\$[0-9][0-9,]*\.[0-9]{2}", re.sub(r'<p class="note" id="priced-with">.*?</p>', "", page,
                                                                    flags=re.S)))
    for night, fleet in fleets.items():   # each night's own total, as the report without --config shows it
        total = fleet.loc[fleet["status"].isin(["ok", "partial"]), "idle_usd_per_month"].astype(float).sum()
        assert money(total) not in shown, night
    doubled = res.current.loc[res.current["status"].isin(["ok", "partial"]), "idle_usd_per_month"].astype(float).sum()
    assert money(doubled) in shown
