"""Medical-record file names (records/<job>.md, or <slug>__<hash>.md when the name is not a safe file name): one page per job, even when two job names
make the same slug, and the HTML report finds and links every page."""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from pipeline.analysis.window import RULE_NAMES
from pipeline.fleet.outputs import gpu_page_name
from pipeline.model import CATEGORIES
from pipeline.report.html import write_report
from pipeline.report.medical import job_record, record_stem, write_records
from pipeline.report.medical import job_keys
from pipeline.report.summary import record_anchors
from pipeline.report.summary import records as records_of


def _rosters(out: Path) -> dict:
    """``(report, gpu_key) -> {"device": [...]}`` from the run's gpus/*.json."""
    rosters = {}
    for path in glob.glob(str(out / "gpus" / "*.json")):
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
        rosters[(doc["report"], doc["gpu_key"])] = {"device": doc["device_roster"]}
    return rosters


@pytest.mark.slow
def test_jobs_whose_slugs_collide_get_a_page_each(tmp_path):
    """`a b.sqlite` and `a;b.sqlite` (job labels default to the file names) both slug to `a_b`:
    each job has its own page with its own title and numbers, and the report links both."""
    from pipeline.synth import generate_training_report

    inputs = tmp_path / "in"
    inputs.mkdir()
    generate_training_report(str(inputs / "a b.sqlite"), gpus=2, iterations=4, seed=5)
    generate_training_report(str(inputs / "a;b.sqlite"), gpus=3, iterations=5, seed=6)
    out = tmp_path / "out"
    run_cli("run", str(inputs), "--out", str(out), "--no-cache")
    fleet = pd.read_parquet(out / "fleet.parquet")
    assert sorted(fleet["job"].unique()) == ["a b", "a;b"]
    pages = sorted((out / "records").iterdir())
    assert len(pages) == 2
    rosters = _rosters(out)
    texts = {}
    for job, gpus in (("a b", 2), ("a;b", 3)):
        [page] = [p for p in pages if p.read_text(encoding="utf-8").startswith(f"# Medical record: {job}\n")]
        assert page.name.startswith("a_b__") and page.suffix == ".md"
        rows = fleet[fleet["job"] == job]
        idle = 100.0 * rows["idle_ns"].astype("int64").sum() / rows["window_ns"].astype("int64").sum()
        text = page.read_text(encoding="utf-8")
        assert text.splitlines()[2].startswith(f"Idle {idle:.2f} % device-level over {gpus} GPU(s)")
        assert text == job_record(job, rows, rosters)   # the page as it always was: only its name is new
        texts[job] = (page.stem, text)
    assert texts["a b"][1] != texts["a;b"][1]

    # The report: one section per page, each job's "medical record" link to its own section.
    html = Path(write_report(out, tmp_path / "report.html")).read_text(encoding="utf-8")
    for job, (stem, _) in texts.items():
        assert html.count(f'<section class="record" id="record-{stem}">') == 1
        row = re.search(rf'<tr data-job="{re.escape(job)}">(.*?)</tr>', html, re.S).group(1)
        assert f'<a href="#record-{stem}">medical record</a>' in row
        assert f"<h2>Medical record: {job}</h2>" in html


def test_record_stem_is_the_name_when_safe_else_a_slug_and_a_stable_hash_of_the_exact_name():
    assert record_stem("llm-pretrain") == "llm-pretrain"   # a safe name is its own stem (pages keep their names)
    assert record_stem("a b") == "a_b__7dbde93504"         # SHA-1 of the name: the same on every run
    assert record_stem("a;b") == "a_b__d1badebe6d"
    assert record_stem("x" * 80) == "x" * 80
    assert record_stem("x" * 81) == "x" * 68 + "__" + hashlib.sha1(b"x" * 81).hexdigest()[:10]  # slug cut at 80
    assert record_stem(".hidden") == "hidden__" + hashlib.sha1(b".hidden").hexdigest()[:10]   # never a dot file


def _fleet(jobs: dict[str, float]) -> pd.DataFrame:
    """One analysed GPU per job, ``idle_pct`` as given, every category empty."""
    rows = []
    for i, (job, pct) in enumerate(jobs.items()):
        rows.append({"cluster": "lab", "job": job, "report": f"r{i}.sqlite", "gpu_key": "gpu0", "status": "ok", "error": "",
                     "window_ns": 1_000_000, "idle_ns": int(pct * 10_000), "idle_pct": pct, "window_rule": "span",
                     "straggler": False, "launch_bound": False, "device_sliver_ns": 0, "idle_usd_per_month": 1.0,
                     **{f"cat_{c}_ns": 0 for c in CATEGORIES}})
    return pd.DataFrame(rows)


def test_every_job_page_is_read_and_linked(tmp_path):
    """write_records names each page by record_stem; the report reads every page and links each job's."""
    records = tmp_path / "records"
    fleet = _fleet({"a b": 10.0, ".hidden": 20.0, "plain": 5.0})
    paths = write_records(str(tmp_path), fleet, {})
    assert paths == [str(records / f"{record_stem(j)}.md") for j in (".hidden", "a b", "plain")]
    assert sorted(os.listdir(records)) == sorted(os.path.basename(p) for p in paths)
    recs = records_of(str(tmp_path), job_keys(fleet))
    assert set(recs) == {record_stem(".hidden"), "a_b__7dbde93504", "plain"}
    cluster = fleet["cluster"].iloc[0]
    anchors = record_anchors(job_keys(fleet) + [(cluster, "c")], recs)
    assert anchors[(cluster, "a b")] == "record-a_b__7dbde93504"
    assert anchors[(cluster, "plain")] == "record-plain"
    assert (cluster, "c") not in anchors


# ---------------------------------------------------------------- human units (issue 13)

MS = 1_000_000
B = 5_001_234_567   # the report's clock: timestamps are export ns on it
START = 4_000_000_000   # the capture starts 1,001,234,567 ns before the first kernel (ANALYSIS_DETAILS.startTime)


def _two_gpu_export(path) -> None:
    """One process on two A100s, 40 ms of kernels each (window: their span).
    GPU-aaaa (device 0): kernels 0-10, 15-25, 32-40 ms: gaps of 5 ms at 10 ms and 7 ms at 25 ms, idle 12/40 = 30 %.
    GPU-bbbb (device 1): kernels 0-18, 21-40 ms: a 3 ms gap at 18 ms, idle 3/40 = 7.5 %.
    The capture starts at START (4 s on the report's clock) and lasts 2 s."""
    from pipeline.synth.writer import ExportWriter

    w = ExportWriter(str(path))
    w.session(system_clock_ns=START, duration_ns=2_000_000_000)
    for dev, uuid in ((0, "aaaa"), (1, "bbbb")):
        w.gpu(dev, "NVIDIA A100-SXM4-80GB", uuid=uuid)
        w.cuda_device(dev, dev, 10, uuid=uuid)
    for dev, spans in ((0, ((0, 10), (15, 25), (32, 40))), (1, ((0, 18), (21, 40)))):
        for start, end in spans:
            w.kernel(pid=10, device=dev, stream=7, start=B + start * MS, end=B + end * MS, name="gemm")
    w.close()


@pytest.mark.slow
def test_record_in_human_units(tmp_path):
    """Starts as seconds on the report's clock (export ns / 10⁹, rounded to the µs: 5_011_234_567 ns ->
    5.011235 s; the column says so), widths in ms, GPUs by their display name (model, number, short id) with
    their full key at the end;
    the HTML shows the key on hover only. The GPU page gives the same start on the report's clock beside
    the seconds from the capture start that the Nsight Systems GUI shows."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    _two_gpu_export(inputs / "two.sqlite")
    out = tmp_path / "out"
    run_cli("run", str(inputs), "--out", str(out), "--no-cache")
    fleet = pd.read_parquet(out / "fleet.parquet")
    assert sorted(fleet["gpu_key"]) == ["GPU-aaaa", "GPU-bbbb"]
    rule = fleet["window_rule"].iloc[0]
    text = (out / "records" / "two.md").read_text(encoding="utf-8")
    a, b = "A100 #1 aaaa", "A100 #2 bbbb"   # model (cut at its "-"), number in the job, short id
    assert text.splitlines()[2] == (f"Idle 18.75 % device-level over 2 GPU(s) (min 7.50 % {b}, max 30.00 % {a}, "
                                    f"straggler suspect {a}; window: {RULE_NAMES[rule]})")
    table = text.split("|---|---|---|---|---|---|\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert text.count("| # | GPU | start (report clock, s) | NVTX range | width | category |") == 1
    assert table == [f"| 1 | {a} | 5.026235 s | - | 7.000 ms | cpu |",
                     f"| 2 | {a} | 5.011235 s | - | 5.000 ms | cpu |",
                     f"| 3 | {b} | 5.019235 s | - | 3.000 ms | cpu |"]
    assert text.splitlines()[-2:] == [f"*[{a}]: GPU-aaaa in two.sqlite", f"*[{b}]: GPU-bbbb in two.sqlite"]
    # deterministic: the same run again gives the same page byte for byte
    run_cli("run", str(inputs), "--out", str(tmp_path / "again"), "--no-cache")
    assert (tmp_path / "again" / "records" / "two.md").read_text(encoding="utf-8") == text

    page = Path(write_report(out, tmp_path / "report.html")).read_text(encoding="utf-8")
    section = page.split('id="record-two"', 1)[1].split("</section>", 1)[0]
    assert f'<td><abbr title="GPU-aaaa in two.sqlite">{a}</abbr></td>' in section
    assert f'<abbr title="GPU-bbbb in two.sqlite">{b}</abbr>' in section
    assert "GPU-aaaa" not in re.sub(r'(title|href)="[^"]*"', "", section)   # the full key only on hover
    # the record's GPU list links each GPU's page, written beside the report
    for key, name in (("GPU-aaaa", a), ("GPU-bbbb", b)):
        href = f"gpu-pages/{gpu_page_name(str(inputs / 'two.sqlite'), key)}"
        assert f'<li><a href="{href}">{name}</a></li>' in section and (tmp_path / href).is_file()
        assert f"- [{name}](../{href})" in text
    assert "<td>5.026235 s</td>" in section
    # the GPU page of GPU-aaaa: its longest gap (B + 25 ms = 5,026,234,567 ns) at 5.026235 s on the report's
    # clock, as in the record, and at 5,026,234,567 - 4,000,000,000 = 1,026,234,567 ns = 1.026235 s from the
    # capture start
    gpu_page = (tmp_path / "gpu-pages" / gpu_page_name(str(inputs / "two.sqlite"), "GPU-aaaa")).read_text("utf-8")
    row = re.search(r'<tr id="d-5026234567"[^>]*>(.*?)</tr>', gpu_page, re.S).group(1)
    assert re.findall(r'<td class="num"[^>]*>([^<]*)</td>', row)[:5] == [
        "1", "1.026235 s", "5.026235 s", "5026234567", "7.000 ms"]


def test_timeline_seconds_and_short_models():
    from pipeline.report.medical import short_model, timeline_s

    assert [timeline_s(n) for n in (0, 499, 500, 10_599_360_207, 1_999_999_500, 123)] == [
        "0.000000 s", "0.000000 s", "0.000001 s", "10.599360 s", "2.000000 s", "0.000000 s"]
    assert [short_model(m) for m in ("NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "A100", "", None,
                                     "<b>x</b> 9")] == ["H100", "GeForce RTX 4090", "A100", "GPU", "GPU", "bxb 9"]
