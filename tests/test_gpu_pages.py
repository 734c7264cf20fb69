"""A page per GPU (issue 14, point 1): the data in gpus/*.json (lanes, copies, iterations, the capture
start), the page built from it (gpu-pages/<stem>.html beside the report), the links to it, and its
size on a GPU with 10,000 gaps. Every expected value is worked out by hand here (comments show the
arithmetic) or recomputed from the SQLite file with sqlite3."""
from __future__ import annotations

import gzip
import html
import json
import os
import re
import sqlite3
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import KINETO, REPO, chromium_load, run_cli, vouch

from pipeline.analysis import intervals as iv
from pipeline.analysis import lanes
from pipeline.analysis.attribution import gap_copies
from pipeline.fleet.outputs import PAGES_DIR, gpu_json_name, gpu_page_name
from pipeline.load.integrity import EARLIEST_ROW
from pipeline.load.report import load_report
from pipeline.report import gpu_page
from pipeline.synth.writer import ExportWriter

MS = 1_000_000
ARTIFACTS = REPO / "tests" / "artifacts"


# ---------------------------------------------------------------- the aggregated lanes, by hand

def test_cap_runs_closes_the_shortest_holes():
    s, e = np.array([0, 10, 30, 60]), np.array([5, 20, 40, 70])   # holes 5, 10, 20
    assert [x.tolist() for x in iv.cap_runs(s, e, 4)] == [[0, 10, 30, 60], [5, 20, 40, 70]]
    assert [x.tolist() for x in iv.cap_runs(s, e, 3)] == [[0, 30, 60], [20, 40, 70]]    # the 5 closed
    assert [x.tolist() for x in iv.cap_runs(s, e, 2)] == [[0, 60], [40, 70]]            # 5 and 10 closed
    assert [x.tolist() for x in iv.cap_runs(s, e, 1)] == [[0], [70]]
    # equal holes (5, 5): the earlier one is closed first
    assert [x.tolist() for x in iv.cap_runs(np.array([0, 10, 20]), np.array([5, 15, 25]), 2)] == [[0, 20], [15, 25]]


def test_cap_runs_keeps_what_a_stable_sort_keeps():
    # a second computation: the last k of a stable ascending argsort of the holes, on many small
    # random lanes with many equal holes (the ties go to the later hole)
    rng = np.random.default_rng(16)
    for _ in range(500):
        n = int(rng.integers(2, 40))
        starts = np.cumsum(rng.integers(1, 4, n) + rng.integers(0, 3, n))
        ends = starts + 1
        cap = int(rng.integers(1, n + 1))
        holes = starts[1:] - ends[:-1]
        keep = np.sort(np.argsort(holes, kind="stable")[holes.size - (cap - 1):]) if cap > 1 else np.zeros(0, int)
        want_s, want_e = np.concatenate(([starts[0]], starts[1:][keep])), np.concatenate((ends[:-1][keep], [ends[-1]]))
        got_s, got_e = iv.cap_runs(starts, ends, cap)
        assert got_s.tolist() == (want_s.tolist() if cap < n else starts.tolist())
        assert got_e.tolist() == (want_e.tolist() if cap < n else ends.tolist())


def test_context_range():
    # W = [1000, 3000): 5 % of W = 100 ns either side, or one mean iteration when longer
    assert lanes.context_range(1000, 3000, 0, 500, 5000) == (900, 3100)
    assert lanes.context_range(1000, 3000, 300, 500, 5000) == (700, 3300)
    assert lanes.context_range(1000, 3000, 300, 950, 5000) == (950, 3300)     # the first record at 950
    assert lanes.context_range(1000, 3000, 300, 1500, 2500) == (1000, 3000)  # a trim beyond the records


def _kernels(rows):
    return pd.DataFrame(rows, columns=["start", "end", "pid", "stream_id"])


def test_stream_lanes_and_merging():
    # context [10, 105), W [20, 100)
    k = _kernels([(0, 10, 1, 7), (5, 20, 1, 7), (30, 40, 1, 7), (100, 110, 1, 7), (50, 60, 1, 8), (15, 25, 2, 7)])
    gaps = pd.DataFrame({"pid": [1, 1], "stream_id": [7, 7], "length": [10, 60]})
    got = lanes.stream_lanes(k, gaps, (10, 105), (20, 100))
    # 1:7: [0,10) ends at the context's start (dropped); [5,20) -> [10,20); [30,40); [100,110) -> [100,105).
    #      In W only [30,40) (ends at 20 and starts at 100 do not overlap [20,100)): 1 kernel, 10 ns busy.
    assert [(x["label"], x["kernels"], x["busy_ns"], x["gaps"], x["gap_ns"]) for x in got] == [
        ("1:7", 1, 10, 2, 70), ("1:8", 1, 10, 0, 0), ("2:7", 1, 5, 0, 0)]   # 2:7: [20,25) in W = 5
    assert [r.tolist() for r in got[0]["runs"]] == [[10, 30, 100], [20, 40, 105]]
    # two lanes at most: the busiest (1:7 and 1:8 tie at 10 ns: the lower stream) keeps its own
    merged = lanes.merge_quiet_streams(got, (20, 100), max_lanes=2)
    assert [x["label"] for x in merged] == ["1:7", "2 other streams"]
    other = merged[1]
    assert (other["kernels"], other["gaps"], other["streams"], other["busy_ns"]) == (2, 0, 2, 15)  # [20,25)+[50,60)
    assert [r.tolist() for r in other["runs"]] == [[15, 50], [25, 60]]
    capped = lanes.capped(got, max_runs=3, min_runs=1)   # 3 runs over 3 lanes: one run each
    assert capped[0]["runs"] == [[10, 105]] and capped[0]["runs_total"] == 3
    assert capped[2]["runs"] == [[15, 25]] and capped[2]["runs_total"] == 1
    # 4 runs: the one-run lanes take 1 each, 1:7 the 2 left: its 10 ns hole closes, the 60 ns one stays
    assert [x["runs"] for x in lanes.capped(got, max_runs=4, min_runs=1)] == [
        [[10, 40], [100, 105]], [[50, 60]], [[15, 25]]]


def test_stream_lanes_of_one_process():
    # one process: its streams are picked apart in stream order whatever the rows' order (no sort); one stream
    # is every row. 1:7: [5,20) -> [10,20) (no kernel time in W [20,100)) and [30,40); 1:8: [50,60), [70,75)
    k = _kernels([(50, 60, 1, 8), (5, 20, 1, 7), (30, 40, 1, 7), (70, 75, 1, 8)])
    gaps = pd.DataFrame({"pid": [1], "stream_id": [8], "length": [10]})
    got = lanes.stream_lanes(k, gaps, (10, 105), (20, 100))
    assert [(x["label"], x["kernels"], x["busy_ns"], x["gaps"], x["gap_ns"]) for x in got] == [
        ("1:7", 1, 10, 0, 0), ("1:8", 2, 15, 1, 10)]
    assert [[r.tolist() for r in x["runs"]] for x in got] == [[[10, 30], [20, 40]], [[50, 70], [60, 75]]]
    seven = k[k["stream_id"] == 7].reset_index(drop=True)
    one = lanes.stream_lanes(seven, gaps, (10, 105), (20, 100))
    assert [(x["label"], x["kernels"], x["busy_ns"], [r.tolist() for r in x["runs"]]) for x in one] == [
        ("1:7", 1, 10, [[10, 30], [20, 40]])]
    # one stream: its runs are the GPU's kernel union (given: [5,20) [30,40)) cut to the context
    cut = lanes.stream_lanes(seven, gaps, (10, 105), (20, 100), whole=(np.array([5, 30]), np.array([20, 40])))
    assert [r.tolist() for r in cut[0]["runs"]] == [[10, 30], [20, 40]] and cut[0]["busy_ns"] == 10


def test_run_budget_gives_what_small_lanes_leave_to_the_busy_ones():
    # 2,400 runs over lanes of 164, 10,000, 45 and 113 runs: the small ones keep all theirs (45 + 113 + 164 =
    # 322), the busy one the 2,078 left
    assert lanes.run_budget([164, 10_000, 45, 113], 2400, 50) == [164, 2078, 45, 113]
    assert lanes.run_budget([5000, 5000], 2400, 50) == [1200, 1200]
    assert lanes.run_budget([10, 10, 10], 20, 8) == [8, 8, 8]    # the floor wins over the total
    assert lanes.run_budget([], 2400, 50) == []


def test_copy_lanes_by_direction():
    copies = pd.DataFrame([
        (12, 30, "memcpy", 1, 100), (50, 55, "memcpy", 1, 50), (60, 70, "memset", -1, 8),
        (200, 210, "memcpy", 8, 1000), (40, 45, "memcpy", 9, 4), (41, 42, "memcpy", 99, 2)],
        columns=["start", "end", "kind", "copy_kind", "bytes"])
    got = lanes.copy_lanes(copies, (10, 105), (20, 100))
    # DtoD runs at 200: outside the context, no lane; HtoD, memset first, then the others by name
    assert [(x["label"], x["copies"], x["bytes"], x["busy_ns"]) for x in got] == [
        ("HtoD", 2, 150, 15), ("memset", 1, 8, 10), ("HtoH", 1, 4, 5), ("unknown", 1, 2, 1)]  # HtoD: [20,30)+[50,55)
    assert [r.tolist() for r in got[0]["runs"]] == [[12, 50], [30, 55]]


def test_iteration_marks():
    # extents as the window gives them: (number, start, end, status); numbers need not start at 0
    extents = ((20, 100, 200, "warm-up"), (21, 200, 300, "kept"), (22, 300, 400, "kept"), (23, 400, 520, "kept"))
    marks, total = lanes.iteration_marks(extents, (150, 450))
    # 23 starts at 400 < 450: it overlaps the context; all four do
    assert (marks, total) == ([[20, 100, 200, "warm-up"], [21, 200, 300, ""], [22, 300, 400, ""],
                               [23, 400, 520, ""]], 4)
    marks, total = lanes.iteration_marks(extents, (250, 350), max_marks=1)
    assert (marks, total) == ([[21, 200, 300, ""]], 2)          # 21 and 22 overlap [250, 350)
    assert lanes.iteration_marks((), (0, 10)) == ([], 0)

def test_gap_copies_by_hand():
    # gaps [10,20) and [30,40); memory kinds as Nsight Systems numbers them: 0 pageable, 1 pinned, 2 device
    gaps = pd.DataFrame({"start": [10, 30], "end": [20, 40]})
    copies = pd.DataFrame([(5, 12, "memcpy", 1, 100, 1, 2), (15, 25, "memcpy", 2, 200, 2, 0),
                           (16, 18, "memset", -1, 8, -1, -1), (35, 36, "memcpy", 8, 1000, 2, 2)],
                          columns=["start", "end", "kind", "copy_kind", "bytes", "src_kind", "dst_kind"])
    first, second = gap_copies(gaps, copies, limit=2)
    # in [10,20): DtoH 5 ns (15..20), HtoD 2 ns (10..12, starts at 5), memset 2 ns (16..18): top two by overlap
    assert first == {"copies": [
        {"what": "memcpy", "direction": "DtoH", "bytes": 200, "host_memory": "pageable", "start_ns": 15, "end_ns": 25,
         "overlap_ns": 5},
        {"what": "memcpy", "direction": "HtoD", "bytes": 100, "host_memory": "pinned", "start_ns": 5, "end_ns": 12,
         "overlap_ns": 2}], "copy_count": 3, "copy_bytes": 308}   # 200 + 100 + 8
    assert second == {"copies": [{"what": "memcpy", "direction": "DtoD", "bytes": 1000, "host_memory": None,
                                  "start_ns": 35, "end_ns": 36, "overlap_ns": 1}], "copy_count": 1, "copy_bytes": 1000}


def test_merge_close_and_human_units():
    assert gpu_page.merge_close([[0, 1], [1.5, 2], [5, 5.1]], 0.5) == [[0, 2], [5, 5.5]]
    assert gpu_page.since(35_255_823_190 + 120_114_662_070, 35_255_823_190) == "120.114662 s"
    assert [gpu_page.human_bytes(n) for n in (512, 4096, 167_772_160, 3 << 30)] == [
        "512 B", "4.0 KiB", "160.0 MiB", "3.0 GiB"]
    assert gpu_page.more_gaps(10_000, 20_029_994_000, [{"length_ns": 2_006_000}] * 20) == (9_980, 19_989_874_000)


# ---------------------------------------------------------------- the loader: capture start, memory kinds

def _one_kernel(path, kernel_start, **session):
    w = ExportWriter(str(path))
    w.kernel(pid=10, device=0, stream=7, start=kernel_start, end=kernel_start + MS, name="k")
    w.runtime(10, 11, kernel_start - 2 * MS, kernel_start - MS, "cudaLaunchKernel_v7000")
    if session:
        w.session(**session)
    return w


@pytest.mark.parametrize("session, kernel_start, want", [
    ({"system_clock_ns": 5_000_000_000, "duration_ns": 2_000_000_000}, 5_100_000_000,
     (5_000_000_000, "ANALYSIS_DETAILS.startTime")),
    ({"system_clock_ns": 5_000_000_000}, 5_100_000_000,
     (5_000_000_000, "TARGET_INFO_SESSION_START_TIME.systemClockNs")),
    # rows counting from the capture's start (0..duration), as some exports write them
    ({"system_clock_ns": 5_000_000_000, "duration_ns": 2_000_000_000}, 100_000_000,
     (0, "ANALYSIS_DETAILS (the rows count from the capture's start)")),
    # no statement at all: the earliest row, the runtime call 2 ms before the kernel
    ({}, 7_000_000_000, (6_998_000_000, EARLIEST_ROW)),
])
def test_capture_start(tmp_path, session, kernel_start, want):
    path = _one_kernel(tmp_path / "c.sqlite", kernel_start, **session).close()
    rep = load_report(path)
    assert (rep.capture_start_ns, rep.capture_start_source) == want


def test_memory_kinds_follow_the_exports_own_table(tmp_path):
    """srcKind / dstKind are ids of the export's ENUM_CUDA_MEM_KIND: without the table Nsight Systems'
    numbering (0 pageable, 1 pinned, 2 device), with it the names it gives, whatever the ids."""
    def export(name, kinds):
        w = _one_kernel(tmp_path / name, 50 * MS)
        w.memcpy(10, 0, 8, 10 * MS, 11 * MS, copy_kind=1, src_kind=kinds[0], dst_kind=2)
        w.memcpy(10, 0, 8, 12 * MS, 13 * MS, copy_kind=2, src_kind=2, dst_kind=kinds[1])
        w.memcpy(10, 0, 8, 14 * MS, 15 * MS, copy_kind=1, src_kind=kinds[2], dst_kind=2)
        return w

    plain = export("plain.sqlite", (1, 0, 7)).close()
    nsys = export("nsys.sqlite", (1, 0, 7))
    nsys.mem_kinds()
    shuffled = export("shuffled.sqlite", (5, 3, 9))
    shuffled.mem_kinds({5: "PINNED", 3: "PAGEABLE", 2: "DEVICE", 9: "SOMETHING_NEW"})
    for path in (plain, nsys.close(), shuffled.close()):
        c = load_report(path).copies.sort_values("start")
        # as the loader gives them: 1 pinned, 0 pageable, 7 unknown (an id or name it does not know)
        assert (c["src_kind"].tolist(), c["dst_kind"].tolist()) == ([1, 2, 7], [2, 0, 2]), path
        gaps = pd.DataFrame({"start": [10 * MS, 12 * MS, 14 * MS], "end": [11 * MS, 13 * MS, 15 * MS]})
        assert [g["copies"][0]["host_memory"] for g in gap_copies(gaps, c)] == ["pinned", "pageable", "unknown"]


def test_memory_kinds_of_a_real_export(profiles):
    """fastvideo's host-to-device copies: srcKind 1 is Pinned by the export's own ENUM_CUDA_MEM_KIND
    (446 copies), srcKind 0 Pageable (4); counted again here with sqlite3."""
    path = profiles / "fastvideo_h100_sp2_1s.sqlite"
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    names = dict(con.execute("SELECT id, name FROM ENUM_CUDA_MEM_KIND"))
    want = {}
    for kind, n in con.execute("SELECT srcKind, count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE copyKind = 1 "
                               "GROUP BY srcKind"):
        key = {"CUDA_MEMOPR_MEMORY_KIND_PAGEABLE": 0, "CUDA_MEMOPR_MEMORY_KIND_PINNED": 1}[names[kind]]
        want[key] = n
    con.close()
    assert want == {0: 4, 1: 446}
    c = load_report(str(path)).copies
    assert c.loc[c["copy_kind"] == 1, "src_kind"].value_counts().to_dict() == want


# ---------------------------------------------------------------- pages of a run: links, Chromium

def _hrefs(text: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', text)]


def _ids(path: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', path.read_text(encoding="utf-8")))


def assert_links_resolve(page: Path) -> list[Path]:
    """Every link of ``page`` names an existing file (relative to it) and, with ``#id``, an element
    there; returns the files it links (other than itself)."""
    files = []
    for href in _hrefs(page.read_text(encoding="utf-8")):
        assert "://" not in href and not href.startswith(("/", "javascript:")), (page, href)
        name, _, anchor = href.partition("#")
        target = (page.parent / name).resolve() if name else page
        assert target.is_file(), (page, href)
        if anchor:
            assert anchor in _ids(target), (page, href)
        if name:
            files.append(target)
    return files


def page_rows(page: str, table_id: str) -> list[dict]:
    """The roster rows of a GPU page's table: their data attributes and cell texts."""
    body = re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S).group(1)
    rows = []
    for attrs, cells in re.findall(r'<tr id="[^"]+" ([^>]*)>(.*?)</tr>', body, re.S):
        data = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', attrs))
        texts = [html.unescape(re.sub(r"<[^>]+>", " ", c.replace("<wbr>", ""))).split()   # a wrap opportunity: no space
                 for c in re.findall(r"<td[^>]*>(.*?)</td>", cells, re.S)]
        rows.append({"data": data, "cells": [" ".join(t) for t in texts]})
    return rows


#: GPUs of the example fleet: 22 in its four Nsight exports, one in each of its two PyTorch profiler traces.
EXAMPLE_GPUS = 22 + 2


@pytest.fixture(scope="module")
def example_folder(tmp_path_factory) -> Path:
    """The example fleet (:data:`EXAMPLE_GPUS` GPUs): `gpu-idle run`, then `gpu-idle report DIR --out DIR/report.html`."""
    root = tmp_path_factory.mktemp("gpu_pages_example")
    run_cli("synth", "--example", str(root / "ex"))
    run_cli("run", str(root / "ex"), "--out", str(root / "out"), "--config", str(root / "ex" / "labels.yaml"))
    run_cli("report", str(root / "out"), "--out", str(root / "out" / "report.html"))
    return root / "out"


@pytest.mark.slow
def test_every_gpu_has_a_page_and_every_link_resolves(example_folder):
    """One page per analysed GPU, named as its JSON; the report links each GPU of its tables, the
    medical records link each GPU of their job, and every link of the report, the records and the
    pages lands on an existing file and element."""
    out = example_folder
    fleet = pd.read_parquet(out / "fleet.parquet")
    ok = fleet[fleet["status"] != "error"]
    names = {gpu_page_name(r, g) for r, g in zip(ok["report"], ok["gpu_key"])}
    assert len(names) == EXAMPLE_GPUS and set(os.listdir(out / PAGES_DIR)) == names
    assert {n[:-5] for n in names} == {n[:-5] for n in os.listdir(out / "gpus")}  # the JSON's stems
    linked = {p.name for p in assert_links_resolve(out / "report.html") if p.parent.name == PAGES_DIR}
    report = (out / "report.html").read_text(encoding="utf-8")
    # the top-10 table links its GPUs; the fix-first list and the stragglers link theirs; the records all of them
    for row in re.findall(r'<tr data-gpu="([^"]+)" data-report="([^"]+)">(.*?)</tr>', report, re.S):
        gpu, rep, cells = html.unescape(row[0]), html.unescape(row[1]), row[2]
        assert f'href="{PAGES_DIR}/{gpu_page_name(rep, gpu)}"' in cells
    assert re.search(r'<table id="fix-list">.*?class="gpu-page" href="gpu-pages/', report, re.S)
    for s in ok[ok["straggler"].astype(bool)].itertuples():
        row = re.search(rf'<tr data-job="{s.job}">(.*?)</tr>', report, re.S).group(1)
        assert f'href="{PAGES_DIR}/{gpu_page_name(s.report, s.gpu_key)}"' in row
    assert re.search(r'<p id="worst-page"><a class="gpu-page" href="gpu-pages/', report)
    assert linked == names          # the embedded records link every GPU
    for md in (out / "records").iterdir():
        text = md.read_text(encoding="utf-8")
        targets = re.findall(r"\]\((\.\./gpu-pages/[^)]+)\)", text)
        job = fleet[fleet["job"] == md.stem]
        assert len(targets) == len(job) and all((md.parent / t).is_file() for t in targets)
    for name in names:
        files = assert_links_resolve(out / PAGES_DIR / name)
        assert (out / "report.html").resolve() in files


@pytest.mark.needs_chromium
def test_example_pages_in_headless_chromium(example_folder, tmp_path):
    """Real Chromium loads every GPU page of the example fleet: no console message, the timeline
    drawn; one screenshot kept in tests/artifacts/."""
    ARTIFACTS.mkdir(exist_ok=True)
    pages = sorted((example_folder / PAGES_DIR).iterdir())
    assert len(pages) == EXAMPLE_GPUS
    for i, page in enumerate(pages):
        shot = ARTIFACTS / "gpu-page.png" if i == 0 else tmp_path / (page.stem + ".png")
        dom = chromium_load(page, shot, "1400,2400")
        assert shot.stat().st_size > 30_000
        svg = re.search(r'<svg class="plot"[^>]*aria-label="gpu-lanes"[^>]*>(.*?)</svg>', dom, re.S)
        assert svg and svg.group(1).count("<path") >= 5 and "<text" in svg.group(1)
        assert 'id="device-roster"' in dom and 'id="stream-roster"' in dom
    os.chmod(ARTIFACTS / "gpu-page.png", 0o644)


@pytest.mark.slow
def test_iterations_on_the_pages(example_folder):
    """Each page lists the GPU's iterations: the kept ones are as many as the row's `iterations`,
    the excluded ones carry the reason the row's `excluded_iterations` gives; each shows its GPU extent
    and its length to the next iteration's start (the one the outlier test divides by the median: the
    example's checkpoint iterations have a short extent and a long length, e.g. 36.398 ms and 144.184 ms)."""
    fleet = pd.read_parquet(example_folder / "fleet.parquet")
    seen_warmup = seen_outlier = False
    for r in fleet[fleet["status"] != "error"].itertuples():
        page = (example_folder / PAGES_DIR / gpu_page_name(r.report, r.gpu_key)).read_text(encoding="utf-8")
        body = re.search(r'<table id="iteration-table">(.*?)</table>', page, re.S).group(1)
        rows = re.findall(r'<tr data-iteration="(\d+)"[^>]*>.*?<td>([^<]*)</td></tr>', body, re.S)
        kept = [i for i, what in rows if what == "kept"]
        assert len(kept) == int(r.iterations), r.gpu_key
        reasons = dict(part.split(": ", 1) for part in str(r.excluded_iterations).split("; ") if part)
        for i, what in rows:
            if what != "kept":
                assert what == "excluded: " + html.escape(reasons[i], quote=False)
                seen_warmup |= reasons[i] == "warm-up"
        # both lengths, from the JSON's extents: the extent (end - start) and the length the outlier test
        # uses, to the next iteration's start (or the own end when later; the last: its own end)
        doc = json.loads((example_folder / "gpus" / gpu_json_name(r.report, r.gpu_key)).read_text(encoding="utf-8"))
        ext = doc["timeline"]["iteration_extents"]
        want = {str(n): (b - a, max(b, nxt[1]) - a) for (n, a, b, _), nxt in zip(ext, ext[1:] + [[0, 0, 0, ""]])}
        median = doc["timeline"]["iteration_length_median_ns"]
        for attrs, cells in re.findall(r'<tr (data-iteration="\d+"[^>]*)>(.*?)</tr>', body, re.S):
            data = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', attrs))
            extent, length = want[data["iteration"]]
            assert (int(data["extent-ns"]), int(data["length-ns"])) == (extent, length), (r.gpu_key, data)
            texts = re.findall(r"<td[^>]*>([^<]*)</td>", cells)
            assert texts[3:6] == [f"{extent / 1e6:,.3f} ms", f"{length / 1e6:,.3f} ms", f"{length / median:.2f}×"]
            m = re.fullmatch(r"excluded: outlier \((\d+\.\d\d)x median\)", texts[6])
            if m:   # the reason's ratio is this length over this median
                seen_outlier = m.group(1) == f"{length / median:.2f}" and length > 1.5 * median > extent
                assert seen_outlier, (r.gpu_key, texts)
    assert seen_warmup and seen_outlier


@pytest.mark.slow
def test_stale_pages_are_pruned(example_folder, tmp_path):
    """A report rendered again after a GPU left the fleet removes that GPU's page, which the earlier
    report wrote (the folder's manifest lists it); a page no manifest lists (someone's) is kept."""
    import shutil

    out = tmp_path / "out"
    shutil.copytree(example_folder, out)
    (out / PAGES_DIR / "gone.sqlite__GPU-x__0123456789.html").write_text("old", encoding="utf-8")
    run_cli("report", str(out), "--out", str(out / "report.html"))
    fleet = pd.read_parquet(out / "fleet.parquet")
    ok = fleet[fleet["status"] != "error"]
    left = gpu_page_name(ok["report"].iloc[0], ok["gpu_key"].iloc[0])
    assert (out / PAGES_DIR / left).exists()
    fleet.drop(index=ok.index[0]).to_parquet(out / "fleet.parquet", index=False)   # that GPU left the fleet
    vouch(out)   # as a run would have written it (a reader reads only what the manifest vouches for)
    run_cli("report", str(out), "--out", str(out / "report.html"))
    pages = {n for n in os.listdir(out / PAGES_DIR) if n.endswith(".html")}
    now = {gpu_page_name(r, g) for r, g in zip(ok["report"].iloc[1:], ok["gpu_key"].iloc[1:])}
    assert len(now) == EXAMPLE_GPUS - 1 and pages == now | {"gone.sqlite__GPU-x__0123456789.html"}
    assert (out / PAGES_DIR / "gone.sqlite__GPU-x__0123456789.html").read_text(encoding="utf-8") == "old"


# ---------------------------------------------------------------- the real exports

@pytest.mark.needs_chromium
def test_real_pages_in_headless_chromium(span_run, tmp_path):
    """Every GPU of the real exports (--window span) gets a page that Chromium loads without a console message."""
    run_cli("report", str(span_run), "--out", str(tmp_path / "report.html"))
    fleet = pd.read_parquet(span_run / "fleet.parquet")
    ok = fleet[fleet["status"] != "error"]
    assert set(os.listdir(tmp_path / PAGES_DIR)) == {gpu_page_name(r, g) for r, g in zip(ok["report"], ok["gpu_key"])}
    assert len(ok) == 5
    for page in sorted((tmp_path / PAGES_DIR).iterdir()):
        dom = chromium_load(page, tmp_path / (page.stem + ".png"), "1400,2000")
        assert re.search(r'<svg class="plot"[^>]*aria-label="gpu-lanes"', dom)


def _real_longest_hole(path: Path, pid: int, device: int) -> dict:
    """The longest device-level hole (no kernel of ``pid`` on ``device``) between the first kernel start
    and the last kernel end (the span window), worked out here from SQLite with plain Python."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT k.start, k.end, s.value, k.correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                       "JOIN StringIds s ON s.id = k.shortName WHERE (k.globalPid >> 24) & 16777215 = ? "
                       "AND k.deviceId = ? ORDER BY k.start, k.end, k.correlationId", (pid, device)).fetchall()
    zero = con.execute("SELECT startTime FROM ANALYSIS_DETAILS").fetchone()[0]
    copies = con.execute("SELECT c.start, c.end, c.bytes, o.name, m.name FROM CUPTI_ACTIVITY_KIND_MEMCPY c "
                         "JOIN ENUM_CUDA_MEMCPY_OPER o ON o.id = c.copyKind JOIN ENUM_CUDA_MEM_KIND m ON m.id = c.srcKind "
                         "WHERE (c.globalPid >> 24) & 16777215 = ? AND c.deviceId = ? UNION ALL "
                         "SELECT start, end, bytes, 'memset', '' FROM CUPTI_ACTIVITY_KIND_MEMSET "
                         "WHERE (globalPid >> 24) & 16777215 = ? AND deviceId = ?", (pid, device, pid, device)).fetchall()
    con.close()
    best, run_end, before = None, None, None
    for start, end, name, _ in rows:
        if run_end is not None and start - run_end > 1_000_000 and (best is None or start - run_end > best[1]):
            best = (run_end, start - run_end, before, name)
        if run_end is None or end > run_end:
            run_end, before = end, name
    g0, length, before, after = best
    inside = [(min(e, g0 + length) - max(s, g0), -s, b, op, kind) for s, e, b, op, kind in copies
              if s < g0 + length and e > g0]
    top = max(inside, default=None)   # the copy overlapping the gap most (ties: the earlier start)
    return {"zero": zero, "start": g0, "length": length, "before": before, "after": after,
            "copies": len(inside), "bytes": sum(c[2] for c in inside), "top_copy": top,
            "window": (rows[0][0], max(e for _, e, _, _ in rows))}


#: Copy directions and host-memory names as the page writes them, by the export's own enum names.
_DIRECTIONS = {"CUDA_MEMCPY_KIND_HTOD": "HtoD", "CUDA_MEMCPY_KIND_DTOH": "DtoH", "CUDA_MEMCPY_KIND_DTOD": "DtoD"}
_HOST = {"CUDA_MEMOPR_MEMORY_KIND_PAGEABLE": "pageable", "CUDA_MEMOPR_MEMORY_KIND_PINNED": "pinned"}


@pytest.mark.slow
@pytest.mark.parametrize("name, pid, zero", [("train_h100_2gpu_nccl.sqlite", 144, 28_254_349_605),
                                             ("fastvideo_h100_sp2_1s.sqlite", 111, 35_255_823_190)])
def test_real_gpu_page_values(span_run, profiles, tmp_path, name, pid, zero):
    """The page's longest device gap of a real GPU, its start in seconds from the capture start
    (ANALYSIS_DETAILS.startTime, as the Nsight Systems timeline counts), its width, kernels and copies
    (the one overlapping it most: direction, size, pageable/pinned by the export's ENUM_CUDA_MEM_KIND),
    against the same numbers worked out from the SQLite file here."""
    run_cli("report", str(span_run), "--out", str(tmp_path / "report.html"))
    report = str(profiles / name)
    page = (tmp_path / PAGES_DIR / gpu_page_name(report, f"pid{pid}/dev0")).read_text(encoding="utf-8")
    want = _real_longest_hole(profiles / name, pid, 0)
    assert want["zero"] == zero
    first = page_rows(page, "device-roster")[0]
    us = (want["start"] - want["zero"] + 500) // 1000     # seconds from the capture start, to the µs
    clock = (want["start"] + 500) // 1000                  # seconds on the report's clock (export ns / 10⁹)
    assert first["data"]["start-ns"] == str(want["start"]) and first["data"]["length-ns"] == str(want["length"])
    assert first["cells"][:5] == ["1", f"{us // 1_000_000}.{us % 1_000_000:06d} s",
                                  f"{clock // 1_000_000}.{clock % 1_000_000:06d} s", str(want["start"]),
                                  f"{want['length'] / 1e6:,.3f} ms"]
    assert first["cells"][6].split(" → ") == [want["before"], want["after"]]
    assert (int(first["data"]["copies"]), int(first["data"]["copy-bytes"])) == (want["copies"], want["bytes"])
    if want["top_copy"]:
        overlap, _, nbytes, op, kind = want["top_copy"]
        size = next((f"{nbytes / 2**p:,.1f} {u}" for p, u in ((30, "GiB"), (20, "MiB"), (10, "KiB")) if nbytes >= 2**p),
                    f"{nbytes} B")
        direction = _DIRECTIONS[op] if op != "memset" else "memset"
        text = " ".join(x for x in (direction, size, _HOST.get(kind, "")) if x)
        assert first["cells"][8].startswith(f"{text}, {overlap / 1e6:,.3f} ms in the gap"), first["cells"][8]
    w0, w1 = want["window"]   # the span window, from the capture start
    a, b = (w0 - want["zero"] + 500) // 1000, (w1 - want["zero"] + 500) // 1000
    assert (f"{a // 1_000_000}.{a % 1_000_000:06d} s – {b // 1_000_000}.{b % 1_000_000:06d} s from the capture start "
            f"({w0} – {w1} ns on the export's clock)") in page
    a, b = (w0 + 500) // 1000, (w1 + 500) // 1000           # the same window on the report's clock
    assert (f'<span id="window-clock">{a // 1_000_000}.{a % 1_000_000:06d} s – {b // 1_000_000}.{b % 1_000_000:06d} s '
            "on the report's clock (the clock a window chosen by hand is given in)</span>") in page
    assert f"ANALYSIS_DETAILS.startTime = {zero} ns" in page
    z = (zero + 500) // 1000
    assert f": report clock = s from capture start + {z // 1_000_000}.{z % 1_000_000:06d} s." in page


# ---------------------------------------------------------------- the real PyTorch profiler traces

#: A ROCm trace relative to baseTimeNanoseconds, and one with epoch-µs integer ts.
TRACES = ("mi250_rocm_minitoy.json.gz", "ws128_sampled_rank0.json.gz")


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory) -> Path:
    """``gpu-idle run`` (--window span) over two real traces, then ``gpu-idle report`` into the folder."""
    if not (KINETO / TRACES[0]).exists():
        pytest.fail(f"real PyTorch profiler traces not found in {KINETO} (set GPU_IDLE_KINETO)")
    out = tmp_path_factory.mktemp("trace_pages") / "out"
    run_cli("run", *[str(KINETO / t) for t in TRACES], "--out", str(out), "--window", "span")
    run_cli("report", str(out), "--out", str(out / "report.html"))
    return out


def _trace_facts(path: Path) -> dict:
    """The profiler span's start (the Trace event) and the span window (first kernel start, last kernel
    end) in ns on the trace's clock, read here with the stdlib json parser, numbers as Decimal:
    baseTimeNanoseconds + µs × 1000 (exact for these 0-3 decimal values)."""
    with gzip.open(path) as fh:
        doc = json.loads(fh.read(), parse_float=Decimal, parse_int=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))

    def ns(value) -> int:
        return base + int(Decimal(value) * 1000)

    (span,) = [e for e in doc["traceEvents"] if e.get("cat") == "Trace" and e.get("ph") == "X"]
    kernels = [(ns(e["ts"]), ns(e["ts"]) + int(Decimal(e["dur"]) * 1000)) for e in doc["traceEvents"]
               if e.get("cat") == "kernel"]
    return {"zero": ns(span["ts"]), "name": span["name"], "window": (min(k[0] for k in kernels),
                                                                      max(k[1] for k in kernels))}


def _seconds_text(ns: int) -> str:
    us = (ns + 500) // 1000        # to the µs, half up
    return f"{us // 1_000_000}.{us % 1_000_000:06d} s"


@pytest.mark.slow
@pytest.mark.parametrize("name", TRACES)
def test_trace_pages_count_seconds_from_the_profiler_span(trace_run, name):
    """A PyTorch profiler trace's page counts seconds from its profiler span's start (the Trace event
    "PyTorch Profiler (0)"), says so, and calls the ns the trace's (never the export's); its JSON holds
    the same zero. Values from the trace itself, read here with json + Decimal."""
    want = _trace_facts(KINETO / name)
    fleet = pd.read_csv(trace_run / "fleet.csv", keep_default_na=False)
    row = fleet[fleet["report"] == str(KINETO / name)].iloc[0]
    doc = json.loads((trace_run / "gpus" / gpu_json_name(row.report, row.gpu_key)).read_text(encoding="utf-8"))
    source = f'the trace\'s profiler span ("{want["name"]}" Trace event)'
    assert (doc["timeline"]["capture_start_ns"], doc["timeline"]["capture_start_source"]) == (want["zero"], source)
    assert want["name"] == "PyTorch Profiler (0)"
    page = html.unescape((trace_run / PAGES_DIR / gpu_page_name(row.report, row.gpu_key)).read_text(encoding="utf-8"))
    assert f'<dd id="zero">{source} = {want["zero"]} ns: when the PyTorch profiler started recording this trace</dd>' in page
    w0, w1 = want["window"]
    assert (f"{_seconds_text(w0 - want['zero'])} – {_seconds_text(w1 - want['zero'])} from the capture start "
            f"({w0} – {w1} ns on the trace's clock)") in page
    first = page_rows(page, "device-roster")[0]
    start = int(first["data"]["start-ns"])
    assert first["cells"][1:4] == [_seconds_text(start - want["zero"]), _seconds_text(start), str(start)]
    assert '<th class="num">start (ns, trace)</th>' in page
    assert "export" not in page.lower() and "predates" not in page
    # seconds from the span's start, not from 1970: the span lasts seconds, the window lies inside it
    assert 0 <= w0 - want["zero"] < w1 - want["zero"] < 10 * 10**9


# ---------------------------------------------------------------- 10,000 gaps: a small page

N_GAPS = 10_000
B = 1_000_000_000
US = 1_000


def big_export(path) -> None:
    """One stream: N_GAPS + 1 kernels of 1 ms, gap i (0..N_GAPS-1) 2 ms + (i % 7) µs wide; a
    cudaStreamSynchronize over gap i when i % 3 == 0 (sync), else a 64 MiB pinned HtoD copy when
    i % 5 == 0 (data), else nothing (cpu). The capture starts 500 ms before the first kernel."""
    w = ExportWriter(str(path))
    w.session(system_clock_ns=B - 500 * MS, duration_ns=60_000 * MS)
    t = B
    for i in range(N_GAPS + 1):
        w.kernel(pid=10, device=0, stream=7, start=t, end=t + MS, name=f"gemm_{i % 3}")
        t += MS
        if i == N_GAPS:
            break
        gap = 2 * MS + (i % 7) * US
        if i % 3 == 0:
            w.runtime(10, 11, t + 10 * US, t + gap - 10 * US, "cudaStreamSynchronize_v3020")
        elif i % 5 == 0:
            w.memcpy(10, 0, 8, t + 10 * US, t + gap - 10 * US, copy_kind=1, nbytes=64 << 20, src_kind=1, dst_kind=2)
        t += gap
    w.close()


@pytest.mark.slow
def test_ten_thousand_gaps_give_a_small_page(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    big_export(inputs / "big.sqlite")
    out = tmp_path / "out"
    run_cli("run", str(inputs), "--out", str(out), "--window", "span", "--no-cache")
    run_cli("report", str(out), "--out", str(out / "report.html"))
    report = str(inputs / "big.sqlite")
    doc = json.loads((out / "gpus" / gpu_json_name(report, "pid10/dev0")).read_text(encoding="utf-8"))
    s = doc["_summary"]
    assert (s["device_gap_count"], s["gap_count"]) == (N_GAPS, N_GAPS)
    # every gap: 10,000 × 2 ms + Σ (i % 7) µs = 20,000 ms + (1,428 × 21 + 0+1+2+3) µs = 20,029.994 ms
    assert s["device_gap_ns"] == s["gap_total_ns"] == 20_029_994_000
    # the roster: the 20 longest, 2.006 ms each (i % 7 == 6); beyond it 9,980 gaps of
    # 20,029,994,000 - 20 × 2,006,000 = 19,989,874,000 ns
    page = (out / PAGES_DIR / gpu_page_name(report, "pid10/dev0")).read_text(encoding="utf-8")
    more = re.findall(r'<tr class="more" data-more-gaps="(\d+)" data-more-ns="(\d+)"><td[^>]*>([^<]*)<', page)
    assert [(n, ns) for n, ns, _ in more] == [("9980", "19989874000")]    # device-level; one stream: the per-stream
    assert 'id="stream-roster" data-same-as="device-roster"' in page         # roster is the same, said in one line
    assert more[0][2].startswith("9980 more gap(s), 19,989.874 ms in all, not listed")
    assert [r["data"]["length-ns"] for r in page_rows(page, "device-roster")] == ["2006000"] * 20
    # The JSON's lanes are capped: 2,400 runs over its two lanes (kernels, HtoD copies), 1,200 each.
    tl = doc["timeline"]
    assert [(x["label"], x["runs_total"], len(x["runs"])) for x in tl["lanes"]] == [
        ("10:7", N_GAPS + 1, 1200), ("HtoD", 1333, 1200)]          # 10,000 gaps: i % 5 == 0 and i % 3 != 0
    added = {k: tl[k] for k in ("context", "capture_start_ns", "capture_start_source", "lanes", "marks", "marks_total")}
    assert len(json.dumps(added)) < 100_000   # 2,400 runs of ~27 characters, and the lanes' counts
    # The page's bound, whatever the number of gaps: its SVG holds at most the lanes' 2,400 runs, the
    # device gaps merged to the drawing's resolution (RESOLUTION = 2,000: runs closer than 1/2,000 of the
    # picture merge, so a category draws at most 1,001 bars; 3 categories here) and the roster's 20 gaps
    # under their lane: (2,400 + 3 × 1,001 + 20) × 70 bytes a bar (a compound path's 5 vertices) =
    # 379,610 bytes; the tables hold 2 × 20 roster rows (~1.5 KB each) and the fixed text ~30 KB.
    # The page is measured at about 110 KB.
    size = len(page.encode("utf-8"))
    assert size < 379_610 + 2 * 20 * 1_500 + 30_000, size
    assert "1200 of 10001 (shortest holes closed)" in page


def test_a_json_without_the_page_keys_still_renders():
    """A per-GPU JSON written before the page existed (no lanes, marks, capture start, copies): the page
    draws the kernel union as one lane and counts seconds on the report's clock, saying so."""
    doc = {"report": "/x/old.sqlite", "gpu_key": "GPU-old", "roster": [], "device_roster": [
        {"pid": -1, "stream_id": -1, "start_ns": 3_000_000_000, "length_ns": 2 * MS, "end_ns": 3_002_000_000,
         "kernel_before": "a", "kernel_after": "b", "category": "cpu", "copy_overlap_ns": 0, "sync_overlap_ns": 0,
         "sync_waited_for": None, "nvtx_range": "", "attribution": []}],
        "timeline": {"window": [2_990_000_000, 3_010_000_000], "busy": [[2_990_000_000, 3_000_000_000],
                                                                      [3_002_000_000, 3_010_000_000]],
                     "gaps": [[3_000_000_000, 3_002_000_000, "cpu"]], "iterations": []},
        "_summary": {"gpu_key": "GPU-old", "device_gap_count": 1, "device_gap_ns": 2 * MS, "gap_count": 0,
                     "gap_total_ns": 0, "idle_pct": 10.0}}
    page = gpu_page.render_gpu_page(doc, {"report": "../report.html", "record": None})
    assert gpu_page.NO_CAPTURE_START.replace("'", "&#39;") in page
    [row] = page_rows(page, "device-roster")
    assert row["cells"][1:4] == ["3.000000 s", "3.000000 s", "3000000000"]     # both on the report's clock
    assert "this GPU's JSON predates the lanes" in page and 'data-more-gaps' not in page
    # h53 (c): the category table's header says the window in words, as its heading does ("% of the window"), no W
    header = page.split('<table id="categories">')[1].split("</tr>")[0]
    assert '<th class="num">share of the window</th>' in header and "share of W" not in page


def test_capture_zero_says_why_seconds_are_on_the_reports_clock():
    """No capture start: a JSON written before the key existed says it predates it; a JSON whose report
    gave none (the key is there, null) says the report states none; either way the zero is 0."""
    assert gpu_page.capture_zero({}) == (0, gpu_page.NO_CAPTURE_START)
    assert gpu_page.capture_zero({"capture_start_ns": None, "capture_start_source": ""}) == (
        0, "the report's clock (its ns / 10⁹): the report states no capture start")
    assert gpu_page.capture_zero({"capture_start_ns": 7, "capture_start_source": "x"}) == (7, "x = 7 ns")
    assert gpu_page.clock_words("/a/rank0.pt.trace.json.gz")["noun"] == "trace"
    assert gpu_page.clock_words("s3://b/k/x.JSON")["noun"] == "trace"
    assert gpu_page.clock_words("/a/x.sqlite")["noun"] == gpu_page.clock_words("/a/x.nsys-rep")["noun"] == "export"



def test_the_report_task_draws_the_page_timelines_ahead(profiles, tmp_path):
    """A per-report task given a plot cache (the nightly sweep's) draws each written GPU's page
    timeline there from the file it just wrote; the page rendered later finds exactly that drawing,
    and it is the drawing made without any cache."""
    from pipeline.config import load_config
    from pipeline.runs.driver import Todo, report_sinks
    from pipeline.work.tasks import report_task
    from pipeline.report import plots

    cfg = load_config([])
    path = str(profiles / "train_h100_2gpu_nccl.sqlite")
    gpu_dir, cache = tmp_path / "gpus", tmp_path / "plots"
    outcome = report_task(path, cfg.labels_for(path), cfg,
                          report_sinks(Todo(path, {}, plots=str(cache)), cfg, str(gpu_dir)))
    assert outcome.failure is None and outcome.written
    docs = [json.loads(p.read_text()) for p in sorted(gpu_dir.glob("*.json"))]
    assert len(docs) == 2                      # pid 144 and pid 145, each with a window
    drawn = sorted(p.read_text() for p in cache.glob("*.svg"))
    # untitled: the page titles it with the GPU's one name, which the worker cannot know (it needs the fleet)
    fresh = sorted(plots.gpu_lanes(gpu_page.timeline_view(d)) for d in docs)
    assert drawn == fresh and len(drawn) == 2
    before = {p.name: p.stat().st_mtime_ns for p in cache.glob("*.svg")}
    for d in docs:   # the page takes the drawing from the cache: nothing new is drawn there
        assert gpu_page.timeline_svg(d, str(cache)) in drawn
    assert sorted(p.name for p in cache.glob("*.svg")) == sorted(before)


def test_overlapping_iterations_are_drawn_in_two_bands():
    """A pipelined job's iterations overlap on the GPU (N+1 starts before N ends): the page's
    iterations row splits into two half bands, alternate iterations in start order, so none hides
    another; iterations that only touch keep the one full band."""
    from pipeline.report import plots

    touching = [[1, 0.0, 1.0, ""], [2, 1.0, 2.0, ""], [3, 2.0, 3.0, "outlier x"]]
    assert not plots.overlapping(touching)
    assert plots._iteration_rows(touching, 10) == [(touching, 10.15, 0.7)]
    pipelined = [[2, 0.8, 2.0, ""], [1, 0.0, 1.0, "warm-up"], [3, 1.9, 3.0, ""]]   # 1|2 and 2|3 overlap
    assert plots.overlapping(pipelined)
    assert plots._iteration_rows(pipelined, 10) == [
        ([[1, 0.0, 1.0, "warm-up"], [3, 1.9, 3.0, ""]], 10.5, 0.35), ([[2, 0.8, 2.0, ""]], 10.12, 0.35)]
    svg = plots.gpu_lanes({"title": "t", "context": [0.0, 3.0], "window": [0.0, 3.0], "marks": pipelined,
                           "gaps": {}, "numbers": [], "lanes": []})
    assert svg.count(">#2<") == 1 and svg.count(">#1 warm-up<") == 1


def test_pages_are_kept_by_their_json_text(profiles, tmp_path):
    """With a plot cache, a GPU page is kept there by its JSON's text, its links and the code: the
    next night renders none of an unchanged GPU's pages again and writes the same bytes as a page
    rendered without any cache; a changed JSON gives a new page."""
    from pipeline.config import load_config
    from pipeline.runs.driver import Todo, report_sinks
    from pipeline.work.tasks import report_task

    cfg = load_config([])
    path = str(profiles / "train_h100_2gpu_nccl.sqlite")
    gpu_dir = tmp_path / "gpus"
    report_task(path, cfg.labels_for(path), cfg, report_sinks(Todo(path, {}), cfg, str(gpu_dir)))
    texts = {(json.loads(p.read_text())["report"], json.loads(p.read_text())["gpu_key"]): p.read_text()
             for p in gpu_dir.glob("*.json")}
    rows = [(r, g, None) for r, g in sorted(texts)]
    cache = tmp_path / "plots"
    night1 = gpu_page.write_gpu_pages(rows, lambda r, g: texts[(r, g)], str(tmp_path / "n1" / "report.html"), str(cache))
    kept = {p.name: p.stat().st_mtime_ns for p in cache.iterdir()}
    assert sorted(p.suffix for p in cache.iterdir() if not p.name.endswith(".sums.json")) == \
        [".html", ".html", ".svg", ".svg"]
    renders = []
    real = gpu_page.render_gpu_page
    gpu_page.render_gpu_page = lambda *a, **k: renders.append(1) or real(*a, **k)
    try:
        night2 = gpu_page.write_gpu_pages(rows, lambda r, g: texts[(r, g)], str(tmp_path / "n2" / "report.html"),
                                          str(cache))
        assert renders == []                                   # every page came from the cache
        fresh = gpu_page.write_gpu_pages(rows, lambda r, g: texts[(r, g)], str(tmp_path / "n3" / "report.html"))
        assert len(renders) == 2                               # no cache: both rendered
    finally:
        gpu_page.render_gpu_page = real
    assert sorted(p.name for p in cache.iterdir()) == sorted(kept)
    for key in night1:
        pages = [(tmp_path / n / night[key]).read_text() for n, night in (("n1", night1), ("n2", night2), ("n3", fresh))]
        assert pages[0] == pages[1] == pages[2]
    # the same GPU with another number in its JSON: a new page, not the kept one
    (r, g), text = sorted(texts.items())[0]
    doc = json.loads(text)
    doc["_summary"]["idle_pct"] = 12.5
    changed = json.dumps(doc)
    out = gpu_page.write_gpu_pages([(r, g, None)], lambda *_: changed, str(tmp_path / "n4" / "report.html"), str(cache))
    before, after = (tmp_path / "n1" / night1[(r, g)]).read_text(), (tmp_path / "n4" / out[(r, g)]).read_text()
    assert after != before and after == gpu_page.render_gpu_page(doc, {"report": "../report.html", "record": None})


def test_unchanged_pages_are_neither_rendered_nor_read(example_folder, tmp_path, monkeypatch):
    """A report rendered again beside the same vouched files (the fleet table, its pricing, every GPU's JSON, the
    records' anchors) with a plot cache renders, reads and writes none of its GPU pages again (nor works out the
    GPUs' roles): the plot cache records which pages that rendering wrote, and the folder still holds each of them
    as its record lists it; the report and the pages are the same bytes. A page gone, or a JSON changed (its
    manifest vouching for the new bytes), and they are rendered again as without the record."""
    import functools
    import shutil

    from conftest import vouch
    from pipeline.report import html as report_html

    out = tmp_path / "out"
    shutil.copytree(example_folder, out)
    cache = str(tmp_path / "plots")

    def files() -> dict:
        return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*")
                if p.is_file() and p.name != ".manifest.json"}

    report_html.write_report(out, out / "report.html", plot_cache=cache)
    first = files()
    assert len(list(Path(cache).glob("*.pages.json"))) == 1
    calls = []
    for module, name in ((gpu_page, "page_from_json"), (report_html, "gpu_roles"), (report_html, "gpu_json_text")):
        real = getattr(module, name)
        counted = functools.wraps(real)(lambda *a, _real=real, _name=name, **k: calls.append(_name) or _real(*a, **k))
        monkeypatch.setattr(module, name, counted)   # its name kept: the per-page cache keys on it
    report_html.write_report(out, out / "report.html", plot_cache=cache)
    assert calls == [] and files() == first
    gone = sorted((out / PAGES_DIR).iterdir())[0]
    gone.unlink()
    report_html.write_report(out, out / "report.html", plot_cache=cache)
    assert calls.count("gpu_json_text") == EXAMPLE_GPUS and calls.count("gpu_roles") == 1
    assert calls.count("page_from_json") == 0 and files() == first   # every page from the per-page cache
    calls.clear()
    doc_path = out / "gpus" / (gone.name[:-len(".html")] + ".json")
    doc = json.loads(doc_path.read_text(encoding="utf-8"))
    doc["_summary"]["idle_pct"] = 12.5
    doc_path.write_text(json.dumps(doc), encoding="utf-8")
    vouch(out)
    report_html.write_report(out, out / "report.html", plot_cache=cache)
    assert calls.count("page_from_json") == 1 and calls.count("gpu_roles") == 1
    changed = {rel for rel, data in files().items() if first.get(rel) != data}
    assert changed == {f"gpus/{doc_path.name}", f"{PAGES_DIR}/{gone.name}"}
    assert "12.50" in (out / PAGES_DIR / gone.name).read_text(encoding="utf-8")


def test_a_moved_plot_cache_still_gives_every_page(example_folder, tmp_path, monkeypatch):
    """The per-page cache keys a page on what it shows, not on where the cache lies: a state folder moved elsewhere
    (its plot cache with it) renders no page again; here a page removed from the folder comes back from the moved
    cache, the same bytes, without rendering."""
    import functools
    import shutil

    from pipeline.report import html as report_html

    out = tmp_path / "out"
    shutil.copytree(example_folder, out)
    report_html.write_report(out, out / "report.html", plot_cache=str(tmp_path / "plots"))
    gone = sorted((out / PAGES_DIR).iterdir())[0]
    page = gone.read_bytes()
    gone.unlink()
    moved = tmp_path / "elsewhere" / "plots"
    shutil.move(str(tmp_path / "plots"), str(moved))
    calls = []
    real = gpu_page.page_from_json
    monkeypatch.setattr(gpu_page, "page_from_json",
                        functools.wraps(real)(lambda *a, **k: calls.append(1) or real(*a, **k)))
    report_html.write_report(out, out / "report.html", plot_cache=str(moved))
    assert calls == [] and gone.read_bytes() == page
    shutil.rmtree(moved)
    os.makedirs(moved)
    gone.unlink()
    report_html.write_report(out, out / "report.html", plot_cache=str(moved))
    assert len(calls) == EXAMPLE_GPUS and gone.read_bytes() == page   # an empty cache: every page rendered
