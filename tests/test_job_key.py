"""One job key, (cluster, job), in every grouping (issue 25 point 1; pipeline.schema.JOB_KEY).

Two clusters that each run a job called ``train`` run two jobs: ``jobs.csv`` has two rows, and so do
the medical records and the report's per-job tables, each with its own figures. A job name that only
one cluster runs keeps its record's name (``records/<job>.md``); a name two clusters share gets
``records/<cluster>--<job>.md`` for each of them, and is shown as ``<cluster>/<job>``.

Figures (span window, H100 at 4 USD per GPU-hour × 730 hours = 2920 USD per GPU-month):
cluster A ``train``: kernels [0, 10) and [20, 30) ms, W = 30 ms, idle 10 ms = 33.33 %, 2920 / 3 = $973.33;
cluster B ``train``: kernels [0, 10) and [30, 40) ms, W = 40 ms, idle 20 ms = 50.00 %, $1,460.00;
cluster C ``solo``: kernels [0, 10) and [15, 20) ms, W = 20 ms, idle 5 ms = 25.00 %, $730.00.
"""
from __future__ import annotations

import re

import pandas as pd
import pytest
from conftest import run_cli

from pipeline.report.summary import load_results, summarise
from pipeline.synth import ExportWriter

MS = 1_000_000

#: (file, cluster, job, kernels as (start, end) ms, idle %, idle USD/month)
EXPORTS = [("a_train.sqlite", "A", "train", [(0, 10), (20, 30)], 33.3333, 973.33),
           ("b_train.sqlite", "B", "train", [(0, 10), (30, 40)], 50.0, 1460.0),
           ("c_solo.sqlite", "C", "solo", [(0, 10), (15, 20)], 25.0, 730.0)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A real ``gpu-idle run`` over the three exports, labelled by a --config, and its HTML report."""
    root = tmp_path_factory.mktemp("jobkey")
    folder = root / "in"
    folder.mkdir()
    labels = []
    for i, (name, cluster, job, kernels, _, _) in enumerate(EXPORTS):
        w = ExportWriter(str(folder / name))
        w.gpu(0, "NVIDIA H100 80GB HBM3", uuid=f"u{i}")
        w.cuda_device(0, 0, 10 + i)
        for start, end in kernels:
            w.kernel(pid=10 + i, device=0, stream=7, start=start * MS, end=end * MS, name="gemm")
        w.close()
        labels.append(f"  - {{match: '*{name}', cluster: {cluster}, job: {job}}}")
    config = root / "labels.yaml"
    config.write_text("labels:\n" + "\n".join(labels) + "\n")
    out = root / "out"
    printed = run_cli("run", str(folder), "--out", str(out), "--config", str(config), "--window", "span",
                      "--no-cache").stdout
    (root / "printed.txt").write_text(printed)
    run_cli("report", str(out), "--out", str(out / "report.html"))
    return out


@pytest.mark.slow
def test_the_printed_table_tells_the_two_trains_apart(run):
    """The fleet table `run` prints shows a job name two clusters run as <cluster>/<job> (a tryout saw three
    rows all saying `train`), a name one cluster runs as it is."""
    printed = (run.parent / "printed.txt").read_text()
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["$/month", "tier", "job"])
    jobs = [line.split()[2] for line in lines[header + 1:header + 1 + len(EXPORTS)]]
    assert sorted(jobs) == ["A/train", "B/train", "solo"]


def test_the_job_key_is_cluster_and_job():
    from pipeline.schema import JOB_KEY

    assert JOB_KEY == ("cluster", "job")


@pytest.mark.slow
def test_jobs_csv_has_a_row_per_cluster_and_job(run):
    jobs = pd.read_csv(run / "jobs.csv")
    assert [(c, j, round(u, 2)) for c, j, u in zip(jobs.cluster, jobs.job, jobs.idle_usd_per_month)] == [
        (c, j, u) for _, c, j, _, _, u in EXPORTS]


def test_a_medical_record_per_cluster_and_job(run):
    """Two records for the two ``train`` jobs (names qualified by the cluster), the unique name kept."""
    names = sorted(p.name for p in (run / "records").iterdir())
    assert names == ["A--train.md", "B--train.md", "solo.md"]
    for stem, (_, cluster, job, _, pct, usd) in zip(["A--train", "B--train", "solo"], EXPORTS):
        text = (run / "records" / f"{stem}.md").read_text()
        title = job if job == "solo" else f"{cluster}/{job}"
        assert text.startswith(f"# Medical record: {title}\n")
        assert f"Idle {pct:.2f} % device-level over 1 GPU(s)" in text
        assert f"Idle cost: ${usd:,.2f} per month for these GPUs." in text


def test_the_report_shows_each_job_with_its_own_figures(run):
    s = summarise(load_results(str(run)))
    assert [(c["job"], round(c["idle_pct"], 4)) for c in s["categories"]] == [
        ("solo", 25.0), ("A/train", 33.3333), ("B/train", 50.0)]
    assert [(g["job"], [round(x["idle_pct"], 4) for x in g["gpus"]]) for g in s["spread"]] == [
        ("solo", [25.0]), ("A/train", [33.3333]), ("B/train", [50.0])]
    html = (run / "report.html").read_text()
    assert sorted(re.findall(r'<section class="record" id="([^"]+)"', html)) == [
        "record-A--train", "record-B--train", "record-solo"]
    jobs = re.search(r'<table id="jobs">(.*?)</table>', html, re.S).group(1)
    links = re.findall(r'<tr data-job="([^"]*)"><td[^>]*>[^<]*</td><td[^>]*>([^<]*)</td>.*?(?:href="#([^"]+)">'
                       r'medical record|</tr>)', jobs, re.S)
    assert sorted(links) == [("solo", "C", "record-solo"), ("train", "A", "record-A--train"),
                             ("train", "B", "record-B--train")]
    top = {r["gpu_key"]: (r["job"], r["anchor"], round(r["usd"], 2)) for r in s["top"]}
    assert top == {"GPU-u0": ("A/train", "record-A--train", 973.33), "GPU-u1": ("B/train", "record-B--train", 1460.0),
                   "GPU-u2": ("solo", "record-solo", 730.0)}


def test_the_trend_compares_jobs_by_cluster_and_job():
    """Night 1: cluster x and y each run ``a`` ($1, $2). Night 2: x's ``a`` $1, y's ``a`` $5, z's ``b`` $3.
    The trend counts 2 then 3 jobs; y's ``a`` moved by +$3 (x's did not move); z's ``b`` is new."""
    from pipeline.report.summary import trend

    def night(rows):
        return pd.DataFrame([{"report": f"{c}-{j}.sqlite", "cluster": c, "job": j, "status": "ok",
                              "idle_usd_per_month": u} for c, j, u in rows])

    t = trend([("2026-01-01", night([("x", "a", 1.0), ("y", "a", 2.0)])),
               ("2026-01-02", night([("x", "a", 1.0), ("y", "a", 5.0), ("z", "b", 3.0)]))])
    assert [n["jobs"] for n in t["nights"]] == [2, 3]
    assert t["new_jobs"] == [{"job": "b", "cluster": "z", "usd": 3.0}] and t["gone_jobs"] == []
    assert [{k: m[k] for k in ("job", "cluster", "before", "after", "delta")} for m in t["movers"]] == [
        {"job": "y/a", "cluster": "y", "before": 2.0, "after": 5.0, "delta": 3.0}]
