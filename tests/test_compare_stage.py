"""Issue 46 point 4: ``gpu-idle compare`` as a stage of its own (``pipeline/compare/``) below ``report/``, whose
formatter only formats a finished comparison; and issue 45's finding on ``compare --format md``: a job whose GPUs
no rank paired (paired by device ordinal or process order, positions only) shows its totals, each GPU pair's
difference withheld with the reason; and h53: every output alike (compare.html, compare.json, compare.csv), ``--force``
showing them, marked.

The fleets are built by hand, all in process: two GPUs of one job, each window 100 ms, 10 stable iterations of
10 ms with no spread (a noise floor of 0), priced at $4.00/h over 730 h. Before: the first GPU in process order idles
10 ms (10 %), the second 30 ms (30 %); after, the other way round. Per pair that is +20.00 and −20.00 pts and
±$584.00 a month (0.2 × $4.00 × 730); the job's totals are 40 of 200 ms (20.00 %) and $1,168.00 a month
((0.1 + 0.3) × $4.00 × 730) on both sides: no change. Only a rank says that a pair is the same GPU; a job of one
GPU on each side needs none (its one pair is the job). All of a GPU's idle is category sync.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline.compare.comparison import per_gpu_withheld
from pipeline.compare.result import compare
from pipeline.compare.sides import KernelTimes, Side
from pipeline.report.compare import render_html, render_markdown, render_text

MS = 1_000_000


def _row(key: str, pid: int, idle_ms: int, rank=None, device=None) -> dict:
    return {"cluster": "c", "job": "j", "report": "r.sqlite", "gpu_key": key, "status": "ok", "rank": rank,
            "device_ids": device, "pid": pid, "gpu_model": "NVIDIA H100", "window_rule": "periodic",
            "window_start_ns": 0, "window_end_ns": 100 * MS, "window_ns": 100 * MS, "idle_ns": idle_ms * MS,
            "iterations": 10, "iteration_mean_ns": 10 * MS, "iteration_cv": 0.0, "idle_pct_sd": 0.0,
            "rate_usd_per_hour": 4.0, "rate_model": "H100", "confidence_tier": "high", "confidence_note": "",
            "cat_sync_ns": idle_ms * MS}


def _sides(seat: str, gpus: int = 2) -> tuple:
    """The pair of fleets; ``seat``: what the GPUs name (``rank``, ``device`` or nothing: process order); ``gpus``:
    the first ``gpus`` GPUs of each side."""
    def rows(idle_first: int, idle_second: int, keys: tuple) -> list:
        return [_row(keys[i], 10 + i, idle, rank=str(i) if seat == "rank" else None,
                     device=str(i) if seat == "device" else None)
                for i, idle in enumerate((idle_first, idle_second))][:gpus]

    same = KernelTimes({"fwd": 60 * MS}, np.array([], dtype=np.int64))   # one program: the verdict passes
    before = Side("before", "b", "b", rows(10, 30, ("GPU-a", "GPU-b")), [], 730.0)
    after = Side("after", "a", "a", rows(30, 10, ("GPU-c", "GPU-d")), [], 730.0)
    for side in (before, after):
        side.kernels = {(r["report"], r["gpu_key"]): same for r in side.rows}
    return before, after


@pytest.fixture(scope="module")
def results() -> dict:
    return {**{seat: compare(_sides(seat)) for seat in ("rank", "device", "process")},
            "one GPU": compare(_sides("process", gpus=1))}


@pytest.mark.parametrize("seat, basis", [("device", "device ordinal"), ("process", "process order")])
def test_the_md_withholds_each_pair_not_known_to_be_the_same_gpu_and_compares_the_totals(results, seat, basis):
    result = results[seat]
    [job] = result["jobs"]
    assert job["basis"] == basis and job["verdict"]["comparable"]
    md = render_markdown(result)
    reason = (f"Each pair's difference is withheld: these GPUs were paired by {basis}, so a pair is not known to be "
              "the same GPU, and only the job's totals compare the sides (--force shows each pair's figures, marked).")
    assert f"\n### Per GPU pair\n\n{reason}\n" in md
    # the totals, compared: 20.00 % and $1,168.00 on both sides
    assert "- idle 20.00 % -> 20.00 % (0.00 pts); within the noise floor of 0.00 pts: no change detectable\n" in md
    assert "- idle $1,168.00 -> $1,168.00 per month at the after side's rates ($0.00)\n" in md
    # no pair's figures: no pair heading, no ±20 points, no $584.00 saving or rise
    assert "### GPU" not in md and "### H100" not in md
    assert "20.00 pts" not in md and "584.00" not in md and "saving $" not in md
    # the finished comparison holds none of them (h53: compare.json, compare.csv and compare.html kept them), only
    # the reason, beside the basis and its warning
    assert [(g["deltas"], g["gaps"], g["withheld"] + ".") for g in job["gpus"]] == [(None, None, reason)] * 2
    assert job["pairs_forced"] is False
    assert job["pairing_warning"].startswith("no rank pairs these GPUs, so they were paired ")


def test_the_md_shows_each_pair_paired_by_rank(results):
    """The same fleets with ranks: each pair is the same worker, its difference shown (the withholding is the
    basis's, not every pair's)."""
    [job] = results["rank"]["jobs"]
    assert job["basis"] == "rank" and per_gpu_withheld(job) == ""
    md = render_markdown(results["rank"])
    assert "### Per GPU pair" not in md
    assert md.count("\n### H100 #") == 2
    assert "- idle 10.00 % -> 30.00 % (+20.00 pts); higher, by more than the noise floor of 0.00 pts\n" in md
    assert "- saving $584.00/month at the after side's rates ($584.00 at the before side's)\n" in md


def test_a_job_of_one_gpu_on_each_side_shows_its_pair(results):
    """One GPU on each side, no rank: paired by process order, but the one pair is the job (nothing to mix up): its
    figures and gaps are shown, 10 % -> 30 % as planted, +$584.00 a month."""
    [job] = results["one GPU"]["jobs"]
    assert job["basis"] == "process order" and per_gpu_withheld(job) == ""
    md = render_markdown(results["one GPU"])
    assert "### Per GPU pair" not in md and "\n### H100 #1 a -> H100 #1 c\n" in md
    assert md.count("- idle 10.00 % -> 30.00 % (+20.00 pts); higher, by more than the noise floor of 0.00 pts\n") == 2
    assert md.count("- idle $292.00 -> $876.00 per month at the after side's rates (+$584.00)\n") == 2
    assert md.endswith("- no gap vanished, appeared or changed width\n")


def test_the_printed_text_shows_only_the_totals_and_the_warning(results):
    lines = render_text(results["process"])
    assert lines[0] == "j: comparable" and lines[1].startswith("  warning: no rank pairs these GPUs")
    assert "  idle 20.00 % -> 20.00 % (0.00 pts); within the noise floor of 0.00 pts: no change detectable" in lines


@pytest.mark.parametrize("seat", ["rank", "process"])
def test_the_formatter_needs_only_the_finished_comparison(results, seat):
    """report/compare.py formats the comparison as compare.json holds it (plain values: NaN as null, tuples as
    lists) exactly as the comparison made in this process: it reads, pairs, judges and prices nothing itself."""
    from pipeline.report.compare import json_result, render_csv

    result = results[seat]
    again = json.loads(json_result(result))
    assert render_markdown(again) == render_markdown(result)
    assert render_text(again) == render_text(result)
    assert render_csv(again) == render_csv(result)


def test_the_command_parses_calls_and_says_why_in_process(tmp_path):
    """``gpu-idle compare`` through click in this process: a side that names nothing is exit status 2 naming the side
    and the path (raised by ``runs/compare.py``'s ``check_reports``, said by the CLI), and an ``--out`` that is a run
    folder is refused before either side is looked at; nothing written either way."""
    from click.testing import CliRunner

    from pipeline.cli import main

    missing_side = tmp_path / "no-such"
    got = CliRunner().invoke(main, ["compare", str(missing_side), str(missing_side)])
    assert got.exit_code == 2
    assert got.output.endswith(f"Error: Invalid value for BEFORE: before side {missing_side}: nothing to compare "
                               f"({missing_side}: no such file or directory)\n")
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    (run_folder / "fleet.parquet").write_bytes(b"")
    got = CliRunner().invoke(main, ["compare", str(missing_side), str(missing_side), "--out", str(run_folder)])
    assert got.exit_code == 2
    assert got.output.endswith(f"Error: Invalid value for --out: {run_folder} is a gpu-idle run or sweep output folder "
                               "(it holds fleet.parquet): a comparison is not written among a run's own files; give "
                               "--out a folder of its own (e.g. a new one)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"] and [p.name for p in run_folder.iterdir()] == [
        "fleet.parquet"]


def test_a_job_of_one_gpu_on_each_side_has_no_pairing_warning(results):
    """One GPU on each side, no rank (``mi250``, ``tiny`` among the real traces): the one pair is the whole job, so
    nothing warns that a pair is not known to be the same worker; two GPUs on a side still warn."""
    [one] = results["one GPU"]["jobs"]
    assert one["pairing_warning"] == ""
    assert render_text(results["one GPU"])[:2] == ["j: comparable", "  idle 10.00 % -> 30.00 % (+20.00 pts); higher, "
                                                   "by more than the noise floor of 0.00 pts"]
    assert "warning" not in render_markdown(results["one GPU"])
    assert "Warning:" not in render_html(results["one GPU"])
    # two GPUs a side: warned in every view
    [two] = results["device"]["jobs"]
    warned = ("no rank pairs these GPUs, so they were paired by CUDA device ordinal: each pair is not known to be the "
              "same worker; check the pairing, or give each GPU its rank (rank in a labels rule) to pair by rank")
    assert two["pairing_warning"] == warned
    assert f"GPUs paired by device ordinal:\n- warning: {warned}\n" in render_markdown(results["device"])
    assert f'<p class="note"><strong>Warning:</strong> {warned}.</p>' in render_html(results["device"])
    assert f"  warning: {warned}" in render_text(results["device"])
    # one GPU a side whose ranks differ (rank 0 -> rank 1): the one pair is two workers, warned
    before, after = _sides("rank", gpus=1)
    after.rows[0]["rank"] = "1"
    [ranked] = compare((before, after))["jobs"]
    assert ranked["basis"] == "process order"
    assert ranked["pairing_warning"].startswith("no rank pairs these GPUs, so they were paired in process order")


@pytest.fixture(scope="module")
def too_short() -> dict:
    """The one-GPU fleets with 4 stable iterations a GPU (each side needs 5) and tier low: not comparable."""
    sides = _sides("process", gpus=1)
    for side in sides:
        for r in side.rows:
            r.update(iterations=4, confidence_tier="low", confidence_note="4 stable iterations")
    return {"plain": compare(sides), "forced": compare(sides, force=True)}


def test_a_job_too_short_to_compare_says_force_shows_its_figures(too_short):
    """The text print says what the md says: the figures are withheld and --force shows them; the md's
    low-confidence line promises marked figures only when figures follow."""
    why = ("too few stable iterations: 4 before and 4 after, and each side needs at least 5 "
           "(the least a medium-confidence GPU has)")
    assert render_text(too_short["plain"]) == [
        f"j: not comparable: {why}; the figures are withheld (--force shows them)",
        "  low confidence: 4 stable iterations"]
    md = render_markdown(too_short["plain"])
    md_why = why.replace("_", "\\_")   # the md escapes the key's underscores
    assert f"Not comparable: {md_why}. The figures are withheld (--force shows them).\n" in md
    assert "Confidence tiers: low before, low after; low confidence: 4 stable iterations.\n" in md
    assert "every figure below is marked" not in md
    forced_text = render_text(too_short["forced"])
    assert forced_text[0] == f"j: not comparable: {why}; shown with --force: every figure below is marked"
    assert forced_text[1].startswith("  idle 10.00 % -> 30.00 % (+20.00 pts)")
    forced = render_markdown(too_short["forced"])
    assert "low confidence: 4 stable iterations (every figure below is marked).\n" in forced
    assert f"Not comparable: {md_why}. Shown with --force: every figure below is marked.\n" in forced


# ---- h53: compare.html, compare.json and compare.csv withhold a position-only pair's figures as the md does --------

#: The sentence every output gives for the fleets' pairs paired in process order (per_gpu_withheld), and with --force.
WITHHELD = ("Each pair's difference is withheld: these GPUs were paired by process order, so a pair is not known to be "
            "the same GPU, and only the job's totals compare the sides (--force shows each pair's figures, marked)")
FORCED = ("Each pair's difference is shown with --force: these GPUs were paired by process order, so a pair is not "
          "known to be the same GPU; every figure of a pair is marked")


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict:
    """``gpu-idle compare B A --out C --format md`` through click in this process, its two sides the hand-built
    fleets (``runs/compare.py``'s ``read_side`` answers with them; each side folder holds an empty fleet.parquet, a
    side folder's mark): ``process`` (no rank: paired in process order), ``forced`` (the same with ``--force``) and
    ``rank``. Per case: the exit status, the md printed, compare.json, compare.csv's rows and compare.html."""
    import csv

    import pandas as pd
    from click.testing import CliRunner

    import pipeline.runs.compare as runs_compare
    from pipeline.cli import main
    from pipeline.model import CATEGORIES

    root = tmp_path_factory.mktemp("written")
    for folder in ("b", "a"):
        (root / folder).mkdir()
        (root / folder / "fleet.parquet").write_bytes(b"")
    out = {}
    for case, seat, extra in (("process", "process", []), ("forced", "process", ["--force"]), ("rank", "rank", [])):
        sides = {s.label: s for s in _sides(seat)}
        for side in sides.values():   # the table the seed's pages read (each GPU's idle, all of it sync)
            side.table = pd.DataFrame([{**{f"cat_{c}_ns": 0 for c in CATEGORIES}, **r,
                                        "idle_pct": 100 * r["idle_ns"] / r["window_ns"]} for r in side.rows])
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(runs_compare, "read_side", lambda folder, label, given, reader=None, jobs=None: sides[label])
            got = CliRunner().invoke(main, ["compare", str(root / "b"), str(root / "a"), "--out", str(root / case),
                                            "--format", "md", *extra])
        with open(root / case / "compare.csv", newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        out[case] = {"exit": got.exit_code, "md": got.output,
                     "json": json.loads((root / case / "compare.json").read_text(encoding="utf-8")),
                     "csv": rows, "html": (root / case / "compare.html").read_text(encoding="utf-8")}
    return out


def _figure_cells(row: dict) -> dict:
    """compare.csv's figure cells of one row: every column from ``idle_pct_before`` to ``unpriced_gpus_fixed_rates``."""
    names = list(row)
    return {k: row[k] for k in names[names.index("idle_pct_before"):names.index("unpriced_gpus_fixed_rates") + 1]}


def _pair_sections(page: str) -> list:
    """compare.html's GPU pair sections (their headings: ``H100 #1 a → H100 #1 c``)."""
    import re

    return re.findall(r"<h3>(H100[^<]*)</h3>", page)


def test_the_files_withhold_each_pair_paired_in_process_order(written):
    """No --force: compare.json's pairs hold null figures and gaps with the reason; compare.csv's GPU rows empty figure
    cells, ``withheld`` the reason, ``forced`` false; compare.html no pair's section and no ±20.00 pts, no $584.00,
    the reason under the pairing table; the job's totals stay everywhere (20.00 %, $1,168.00 a side). On main the
    three files held each pair's +20.00 / −20.00 pts and ±$584.00 with only the pairing's warning."""
    from markupsafe import escape

    w = written["process"]
    assert w["exit"] == 0
    [job] = w["json"]["jobs"]
    assert [(g["deltas"], g["gaps"], g["withheld"]) for g in job["gpus"]] == [(None, None, WITHHELD)] * 2
    assert job["pairs_forced"] is False and job["deltas"]["before"]["idle_pct"] == job["deltas"]["after"]["idle_pct"] == 20.0
    assert job["deltas"]["usd_after_after_rates"] == 1168.0
    gpu_rows = [r for r in w["csv"] if r["level"] == "gpu"]
    assert [(r["withheld"], r["forced"], set(_figure_cells(r).values())) for r in gpu_rows] == [
        (WITHHELD, "False", {""})] * 2
    assert [r[k] for r in gpu_rows for k in ("gaps_vanished", "gaps_appeared", "gaps_kept_changed")] == [""] * 6
    [job_row] = [r for r in w["csv"] if r["level"] == "job"]
    assert (job_row["withheld"], job_row["idle_pct_before"], job_row["idle_pct_after"],
            job_row["usd_after_after_rates"]) == ("", "20.0", "20.0", "1168.0")
    page = w["html"]
    assert f'<p class="note" id="pairs-withheld-1">{escape(WITHHELD)}.</p>' in page
    assert _pair_sections(page) == [] and "Gaps in the rosters" not in page
    assert "20.00 pts" not in page and "584.00" not in page and "$1,168.00" in page
    assert "\n### Per GPU pair\n\n" + WITHHELD + ".\n" in w["md"] and "### H100" not in w["md"]


def test_force_shows_each_pair_in_every_file_marked(written):
    """--force: each pair's figures in every file, as planted (pair 1: 10 -> 30 %, +20.00 pts, $292.00 -> $876.00,
    +$584.00; pair 2 the other way), marked forced: compare.json ``pairs_forced`` and each pair's figures with an
    empty ``withheld``; compare.csv's GPU rows ``forced`` true; compare.html and the md each pair's figures tagged
    forced (not known to be the same GPU), the sentence saying so in place of the reason."""
    from markupsafe import escape

    w = written["forced"]
    assert w["exit"] == 0
    [job] = w["json"]["jobs"]
    assert job["pairs_forced"] is True and job["forced"] is False   # comparable: only the pairs are forced
    assert [(g["withheld"], g["deltas"]["idle_pct_change_pts"], g["deltas"]["usd_before_after_rates"],
             g["deltas"]["usd_after_after_rates"]) for g in job["gpus"]] == [("", 20.0, 292.0, 876.0),
                                                                              ("", -20.0, 876.0, 292.0)]
    gpu_rows = [r for r in w["csv"] if r["level"] == "gpu"]
    assert [(r["withheld"], r["forced"], r["idle_pct_before"], r["idle_pct_change_pts"], r["usd_change_after_rates"])
            for r in gpu_rows] == [("", "True", "10.0", "20.0", "584.0"), ("", "True", "30.0", "-20.0", "-584.0")]
    [job_row] = [r for r in w["csv"] if r["level"] == "job"]
    assert job_row["forced"] == "False" and job_row["idle_pct_change_pts"] == "0.0"
    page = w["html"]
    assert f'<p class="note" id="pairs-forced-1">{escape(FORCED)}.</p>' in page and escape(WITHHELD) not in page
    assert _pair_sections(page) == ["H100 #1 a → H100 #1 c", "H100 #2 b → H100 #2 d"]
    pairs = page.split("<h3>H100 #1 a")[1].split("<h3>The seed")[0]
    tag = '<span class="tag implausible" title="shown with --force: not known to be the same GPU">forced</span>'
    assert "+20.00 pts" in pairs and "\u221220.00 pts" in pairs and "+$584.00" in pairs and "\u2212$584.00" in pairs
    assert pairs.count(tag) == 2 * 5   # each pair: idle, iteration, two dollar rows, its one category (sync)
    assert tag not in page.split("<h3>The job</h3>")[1].split("<h3>Pairing</h3>")[0]   # the job's figures: not forced
    assert "\n### Per GPU pair\n\n" + FORCED + ".\n" in w["md"]
    assert ("- idle 10.00 % -> 30.00 % (+20.00 pts); higher, by more than the noise floor of 0.00 pts "
            "[forced: not known to be the same GPU]\n") in w["md"]


def test_a_pair_by_rank_is_shown_without_force(written):
    """Ranks pair the same workers: each pair's figures in every file, unmarked, no reason and no sentence."""
    w = written["rank"]
    assert w["exit"] == 0
    [job] = w["json"]["jobs"]
    assert job["basis"] == "rank" and job["pairs_forced"] is False
    assert [(g["withheld"], g["deltas"]["idle_pct_change_pts"]) for g in job["gpus"]] == [("", 20.0), ("", -20.0)]
    assert [(r["withheld"], r["forced"], r["idle_pct_change_pts"], r["usd_change_after_rates"])
            for r in w["csv"] if r["level"] == "gpu"] == [("", "False", "20.0", "584.0"), ("", "False", "-20.0", "-584.0")]
    page = w["html"]
    assert _pair_sections(page) == ["H100 #1 a → H100 #1 c", "H100 #2 b → H100 #2 d"]
    assert "+20.00 pts" in page and ">forced<" not in page and "Each pair&#39;s difference" not in page
    assert "### Per GPU pair" not in w["md"] and "[forced" not in w["md"]


def test_the_category_rows_say_the_measured_window_not_w(written):
    """h53 (c): compare.html's category row reads "ms per iteration · share of the measured window" (the report's
    "measured windows"), the md's category change "pts of the measured window"; no "of W" a manager cannot read."""
    page, md = written["rank"]["html"], written["rank"]["md"]
    assert "<td>sync: ms per iteration · share of the measured window</td>" in page and "of W<" not in page
    assert "sync +2.000 ms per iteration, +20.00 pts of the measured window" in md and " of W" not in md
