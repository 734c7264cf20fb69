"""Issue 45, the points a new-user tryout on the real exports, the real traces and the example fleet still found
wrong (docs/outputs.md#reports-for-people, docs/definitions.md#stragglers, #collective-wait):

1. a GPU that is itself the one its job waits on (the straggler, the late rank) gets a concrete prescription for its
   largest category on its page, never one that sends the reader back to itself;
2. one word per meaning: the *straggler* is the job's most idle GPU, the *late rank* the GPU that enters the job's
   collectives last most often (``collective_late_rank``);
3. untrusted figures (tier toy or low) are marked where shown, or left out of a headline card with a note;
4. names break only at separators; the fix-first remedy cell shows its whole remedy (or a visible "more");
5. the report's CSV and the timeline's title rank by tier first, then dollars, as every other view does.

Small fleets are built here with their values worked out by hand; the real inputs where the tryout saw the fault.
"""
from __future__ import annotations

import csv
import io
import math

import pandas as pd
import pytest

from conftest import KINETO, PROFILES, chromium_load, run_cli
from pipeline.model import CATEGORIES, CAVEATS

ALL_CATEGORIES = (*CATEGORIES, *CAVEATS)

MS = 1_000_000


def _row(**kw) -> dict:
    """One analysed GPU of a fleet table (the columns the views read), 40 % idle of a 10 ms window."""
    row = {"cluster": "c1", "job": "train", "node": "n1", "report": "a.sqlite", "gpu_key": "pid1/dev0",
           "gpu_model": "NVIDIA H100 80GB HBM3", "window_ns": 10 * MS, "idle_ns": 4 * MS, "idle_pct": 40.0,
           "busy_ns": 6 * MS, "device_sliver_ns": 0, "launch_bound": False, "main_category": "cpu", "idle_usd_per_month": 100.0, "amdahl_speedup": 1.6667,
           "status": "ok", "confidence_tier": "medium", "low_confidence": False, "iterations": 6}
    row.update({f"cat_{c}_ns": 0 for c in ALL_CATEGORIES}, cat_cpu_ns=4 * MS)
    row.update({f"cat_{c}_pct": 0.0 for c in ALL_CATEGORIES}, cat_cpu_pct=40.0)
    return {**row, **kw}


def _results(rows: list[dict]):
    from pipeline.report.summary import Results
    from pipeline.schema import FLEET_COLUMNS, conform

    fleet = conform(pd.DataFrame(rows), FLEET_COLUMNS)
    return Results(source="mem", kind="run", current=fleet, current_date="2026-12-06", run_dir=None,
                   history=[("2026-12-06", fleet)])


# ---- 5. the CSV and the timeline's title: tier first, then dollars ---------------------------------------------------

#: A fleet whose dearest GPUs rest on untrusted captures: by dollars alone the toy GPU ($900) and the low one ($500)
#: would lead; by tier the two medium GPUs ($100, then unpriced) lead, then low ($500, then $20), then toy ($900),
#: then the failed report.
TIERED = [
    _row(report="toy.sqlite", gpu_key="pid9/dev0", idle_usd_per_month=900.0, confidence_tier="toy", low_confidence=True),
    _row(report="low.sqlite", gpu_key="pid5/dev0", idle_usd_per_month=500.0, confidence_tier="low", low_confidence=True),
    _row(report="low.sqlite", gpu_key="pid5/dev1", idle_usd_per_month=20.0, confidence_tier="low", low_confidence=True),
    _row(report="bad.sqlite", gpu_key=None, status="error", error="bad.sqlite: cannot read", idle_usd_per_month=None,
         confidence_tier=None, low_confidence=None),
    _row(report="med.sqlite", gpu_key="pid1/dev1", idle_usd_per_month=math.nan, unpriced=True),
    _row(report="med.sqlite", gpu_key="pid1/dev0", idle_usd_per_month=100.0),
]


def test_the_report_csv_ranks_by_tier_then_dollars():
    """`gpu-idle report --format csv`: medium $100, medium unpriced, low $500, low $20, toy $900, the failed report
    last (main: toy $900 first, then low $500, by dollars alone)."""
    from pipeline.report.html import render_csv

    rows = list(csv.DictReader(io.StringIO(render_csv(_results(TIERED)))))
    got = [(r["report"], r["gpu_key"], r["confidence_tier"], r["idle_usd_per_month"]) for r in rows]
    assert got == [("med.sqlite", "pid1/dev0", "medium", "100.0"), ("med.sqlite", "pid1/dev1", "medium", ""),
                   ("low.sqlite", "pid5/dev0", "low", "500.0"), ("low.sqlite", "pid5/dev1", "low", "20.0"),
                   ("toy.sqlite", "pid9/dev0", "toy", "900.0"), ("bad.sqlite", "", "", "")], got


def test_the_timeline_title_names_the_tier_it_leads():
    """The timeline shows the first GPU of the top 10 (tier first): its title says it is the most expensive on a
    trusted capture (not the fleet's most expensive: the toy GPU's $900 is more); with no trusted GPU, the best tier
    there is, marked not to be trusted (main: "most expensive idle GPU: …" either way)."""
    from pipeline.report.html import timeline_title
    from pipeline.report.summary import summarise

    s = summarise(_results(TIERED))
    assert (s["worst_gpu"]["report"], s["worst_gpu"]["gpu_key"]) == ("med.sqlite", "pid1/dev0")
    assert timeline_title(s["worst_gpu"], "H100 #1 pid1/dev0") == (
        "most expensive idle GPU on a trusted capture (medium): H100 #1 pid1/dev0 (train, med.sqlite)")
    s = summarise(_results([r for r in TIERED if r["report"] != "med.sqlite"]))
    assert (s["worst_gpu"]["report"], s["worst_gpu"]["gpu_key"]) == ("low.sqlite", "pid5/dev0")
    assert timeline_title(s["worst_gpu"], "H100 #1 pid5/dev0") == (
        "most expensive idle GPU of the best tier here, low (no trusted capture; not to be trusted): H100 #1 pid5/dev0 "
        "(train, low.sqlite)")


# ---- 1. the page of the GPU its job waits on prescribes, never refers back to itself --------------------------------

#: Three cpu gaps of 2 ms in NVTX range 'Iteration 1'/'Iteration 2' (read 'Iteration N'); four comm gaps after an
#: all-reduce; the collective figures of a chronic late rank (last in 20 of 28 calls) and of a GPU that is not one.
CPU_GAPS = {"start": [10 * MS, 30 * MS, 50 * MS], "length": [2 * MS] * 3}
COMM_GAPS = {"length": [MS] * 4, "kernel_before": ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"] * 4}
CHRONIC = {"collective_wait_status": "measured", "collective_wait_ns": 3 * MS, "collective_wait_pct": 3.0,
           "collective_calls": 28, "collective_last_count": 20, "collective_chronic": True}
PROFILE_HOST = ("profile the host inside NVTX range 'Iteration N' (py-spy, or the PyTorch profiler with CPU "
                "activities: data loading, the GIL, I/O, logging)")


def _findings(*, cpu: bool = True, comm: bool = False, chronic: bool = False, largest_own: str = "cpu") -> str:
    """One GPU's ``diagnosis`` text (as its JSON's ``_summary`` holds it) made by the real rules."""
    from pipeline.analysis import diagnosis as dx

    nvtx = pd.DataFrame({"start": [0, 20 * MS, 40 * MS], "end": [20 * MS, 40 * MS, 60 * MS],
                         "text": ["Iteration 1", "Iteration 2", "Iteration 3"]})
    out = []
    if comm:
        out.append(dx.comm_rule(COMM_GAPS, CHRONIC if chronic else None))
    if chronic:
        out.append(dx.late_rank_rule(CHRONIC, {largest_own: 6.0, "comm": 20.0}, 2.0))
    if cpu:
        out.append(dx.cpu_rule(CPU_GAPS, nvtx))
    return dx.to_text(out)


def _summary(main: str, text: str) -> dict:
    return {"main_category": main, f"cat_{main}_ns": 6 * MS, f"cat_{main}_pct": 20.0, "diagnosis": text}


def test_the_late_rank_and_the_straggler_get_their_own_remedy_by_hand():
    """main: the late rank's page (cpu its largest) read "this rank is the one others wait for: fix its own cpu
    first", the straggler's (comm its largest) "look at the straggler <itself> (this GPU) first": both send the
    reader back to the GPU whose page it is. Now each gets what its own findings prescribe."""
    from pipeline.report.gpu_page import prescription

    late = {"role": "late rank", "text": "", "others": [], "leads": []}
    strag = {"role": "straggler", "text": "", "others": [], "leads": []}
    # the late rank, cpu largest: its cpu.host finding, not the late-rank rule that points at itself
    rx = prescription(_summary("cpu", _findings(comm=True, chronic=True)), late)
    assert (rx["remedy"], rx["rules"]) == (PROFILE_HOST, ["cpu.host"])
    # the same GPU seen by one that waits on it: unchanged, the late-rank remedy outranks (fix-first entries)
    waiting = {"role": "waiting", "text": "", "others": [], "leads": ["the late rank A100 #2 pid84669/dev0"]}
    assert prescription(_summary("cpu", _findings(comm=True, chronic=True)), waiting)["remedy"] == (
        f"this rank is the one others wait for: fix its own cpu first: {PROFILE_HOST}")
    # the late rank, comm largest: its own largest other category first, then the overlap
    rx = prescription(_summary("comm", _findings(comm=True, chronic=True)), late)
    assert rx["remedy"] == f"fix its own cpu first ({PROFILE_HOST}), then overlap communication with compute"
    # the straggler, comm largest, no late rank elsewhere in its job
    rx = prescription(_summary("comm", _findings(comm=True)), strag)
    assert rx["remedy"] == ("overlap communication with compute (no other GPU of its job stands out as the one it "
                            "waits for)") and rx["rules"] == ["comm.collective"]
    # the straggler, comm largest, its job's late rank another GPU: look there
    rx = prescription(_summary("comm", _findings(comm=True)), {**strag, "leads": ["the late rank H100 #2 pid145/dev1"]})
    assert rx["remedy"] == "look at the late rank H100 #2 pid145/dev1 first, then overlap communication with compute"
    # a GPU waiting on both: both named, once each
    both = {"role": "waiting", "text": "", "others": [], "leads": ["the straggler S", "the late rank L"]}
    assert prescription(_summary("comm", _findings(comm=True)), both)["remedy"] == (
        "one GPU cannot fix it: look at the straggler S and the late rank L first, then overlap communication with "
        "compute")
    # no role known (a page rendered without the fleet): says none stands out
    assert prescription(_summary("comm", _findings(comm=True)), None)["remedy"] == (
        "one GPU cannot fix it: look at the straggler first (no GPU captured here stands out as one), then overlap "
        "communication with compute")
    for role in (late, strag):   # never a remedy naming the page's own role
        for main, kw in (("cpu", {"comm": True, "chronic": True}), ("comm", {"comm": True, "chronic": True}),
                         ("comm", {"comm": True})):
            remedy = prescription(_summary(main, _findings(**kw)), role)["remedy"]
            assert "the straggler" not in remedy and "others wait for" not in remedy, (role["role"], main, remedy)


def test_roles_name_the_other_lead_of_the_job():
    """Job train: S the straggler (40 % idle, not late), L the late rank (12 % idle, chronic: last in 20 of 28
    calls), W neither. S's role names L as the one it waits on inside collectives, L's names S; W waits on both."""
    from pipeline.report.summary import gpu_roles
    from pipeline.schema import FLEET_COLUMNS, conform

    rows = [_row(gpu_key="pid1/dev0", idle_pct=40.0, straggler=True),
            _row(gpu_key="pid1/dev1", idle_pct=12.0, collective_chronic=True, collective_last_count=20,
                 collective_calls=28, collective_wait_status="measured", collective_wait_ns=0),
            _row(gpu_key="pid1/dev2", idle_pct=10.0)]
    roles = gpu_roles(conform(pd.DataFrame(rows), FLEET_COLUMNS))
    s, late, w = (roles[("a.sqlite", f"pid1/dev{i}")] for i in range(3))
    assert s == {"role": "straggler", "others": [("a.sqlite", "pid1/dev1", "H100 #2 pid1/dev1")],
                 "leads": ["the late rank H100 #2 pid1/dev1"], "text": (
        "H100 #1 pid1/dev0 is the straggler of job train: the most idle of its 3 GPUs (40.00 %; the job's GPUs range "
        "10.00–40.00 %). Fix this GPU first. Inside collectives it waits on the late rank H100 #2 pid1/dev1.")}
    assert late == {"role": "late rank", "others": [("a.sqlite", "pid1/dev0", "H100 #1 pid1/dev0")],
                    "leads": ["the straggler H100 #1 pid1/dev0"], "text": (
        "H100 #2 pid1/dev1 is the late rank of job train: it entered the collectives last in 20 of 28 calls: the other "
        "ranks wait for it there. Fix its own idle first. Its job's straggler is H100 #1 pid1/dev0.")}
    assert w["role"] == "waiting" and w["leads"] == ["the straggler H100 #1 pid1/dev0", "the late rank H100 #2 pid1/dev1"]


# ---- 3. untrusted figures marked, or left out of the headline with a note ------------------------------------------

#: Two trusted GPUs (idle 2 of 10 ms, 3 of 20 ms), one low (9 of 10 ms) and one toy (10 of 10 ms). Over the trusted:
#: 5 / 30 ms = 16.67 % idle, speed-up 1 / (1 − 1/6) = 1.20×; over all four: 24 / 50 ms = 48.00 %.
MIXED = [
    _row(gpu_key="pid1/dev0", idle_ns=2 * MS, idle_pct=20.0, idle_usd_per_month=10.0),
    _row(gpu_key="pid1/dev1", window_ns=20 * MS, idle_ns=3 * MS, idle_pct=15.0, idle_usd_per_month=20.0),
    _row(report="b.sqlite", gpu_key="pid2/dev0", idle_ns=9 * MS, idle_pct=90.0, idle_usd_per_month=300.0,
         confidence_tier="low", low_confidence=True),
    _row(report="c.sqlite", gpu_key="pid3/dev0", idle_ns=10 * MS, idle_pct=100.0, idle_usd_per_month=400.0,
         confidence_tier="toy", low_confidence=True),
]


def test_the_headline_leaves_untrusted_gpus_out_of_its_idle_and_marks_its_dollars():
    """main: the idle card read 48.00 % and the speed-up 1.92× over all four GPUs (the toy one 100 % idle), the fleet's
    $730.00 unmarked; now 16.67 % and 1.20× over the two trusted GPUs, the two others counted as left out, and the
    dollars marked as including them. With no trusted GPU, the pooled figures (19 of 20 ms: 95.00 %, 20.00×) are
    marked as resting on toy or low captures only."""
    import html as html_lib
    import re

    from pipeline.report.html import render_html, render_markdown
    from pipeline.report.summary import headline_idle

    res = _results(MIXED)
    h = headline_idle(res.current)
    assert (round(h["idle_pct"], 4), round(h["speedup"], 4), h["gpus"], h["left_out"], h["left_out_tiers"],
            round(h["all_idle_pct"], 4), h["untrusted_only"]) == (16.6667, 1.2, 2, 2, "toy 1, low 1", 48.0, False)
    page = html_lib.unescape(re.sub(r"\s+", " ", render_html(res)))
    card = page.split('id="headline"')[1].split("</section>")[0]
    assert re.search(r'id="fleet-idle-pct"[^>]*>16\.67 %<', card) and re.search(r'id="fleet-speedup">1\.20×<', card)
    assert ('<span id="idle-left-out">, over the 2 GPU(s) on trusted captures: 2 on toy or low-confidence ones left '
            "out (toy 1, low 1; 48.00 % with them)</span>") in card
    assert re.search(r'id="fleet-usd-untrusted"[^>]*>includes 2 toy or low-confidence GPU\(s\)<', card)
    assert "idle-untrusted" not in card and "speedup-untrusted" not in card
    md = render_markdown(res)
    assert ("$730.00/month idle (16.67 % device-level idle over 2 GPU(s) on trusted captures; 2 on toy or "
            "low-confidence ones left out (toy 1, low 1; 48.00 % with them))") in md

    res = _results(MIXED[2:])
    h = headline_idle(res.current)
    assert (round(h["idle_pct"], 4), round(h["speedup"], 4), h["gpus"], h["left_out"], h["untrusted_only"]) == (
        95.0, 20.0, 2, 0, True)
    card = html_lib.unescape(re.sub(r"\s+", " ", render_html(res))).split('id="headline"')[1].split("</section>")[0]
    assert re.search(r'id="fleet-idle-pct"[^>]*>95\.00 %<', card) and "idle-left-out" not in card
    for marker in ("fleet-usd-untrusted", "idle-untrusted", "speedup-untrusted"):
        assert re.search(rf'id="{marker}"[^>]*>toy or low-confidence captures only<', card), marker
    assert "(95.00 % device-level idle over 2 GPU(s), all on toy or low-confidence captures: not to be trusted)" \
        in render_markdown(res)
    # the sampled meter beside the idle % reads the same GPUs: the two trusted ones (6 periods each, 5 and 4 of them
    # busy: 9 of 12 = 75.00 %), not the toy one's 8 of 8 (main: 17 of 20 = 85.00 % over all three)
    meter = [dict(r, sample_periods=p, sampled_busy_periods=b) for r, (p, b) in zip(MIXED, [(6, 5), (6, 4), (2, 2), (8, 8)])]
    res = _results(meter)
    assert (headline_idle(res.current)["meter"]["sampled_util_pct"], headline_idle(res.current)["meter"]["gpus"]) == (
        75.0, 2)
    card = html_lib.unescape(re.sub(r"\s+", " ", render_html(res))).split('id="headline"')[1].split("</section>")[0]
    assert re.search(r'id="sampled-meter" data-sampled="75\.0000"[^>]*data-gpus="2"', card), card
    # every GPU trusted: nothing marked, nothing left out (the example fleet's headline is unchanged)
    card = render_html(_results(MIXED[:2])).split('id="headline"')[1].split("</section>")[0]
    assert not re.findall(r'id="(?:fleet-usd-untrusted|idle-untrusted|speedup-untrusted|idle-left-out)"', card)
    assert 'data-left-out="0">16.67 %<' in card


def test_the_markdown_basis_and_meter_cover_the_headlines_gpus():
    """The Markdown summary's basis and meter sentences count the GPUs its headline counts: MIXED with meter periods
    (6 and 6 on the trusted GPUs, 5 and 4 busy; 2 and 8 on the low and toy ones). main: "4 GPU(s), windows of
    10.0–20.0 ms each (50.0 ms in all)", "2–8 sample period(s)", the meter at 85.00 % (17 of 20 periods over 3 GPUs) and
    $730.00/month; now, by hand, over the 2 trusted GPUs: windows of 10 and 20 ms (30 ms in all), 6 iterations and 6
    periods each, the meter at 9 of 12 = 75.00 % busy, idle 5 of 30 ms = 16.67 %, their $10 + $20 = $30.00/month; each
    sentence says the 2 others were left out. A fleet all trusted: no such note."""
    from pipeline.report.html import render_markdown

    meter = [dict(r, sample_periods=p, sampled_busy_periods=b) for r, (p, b) in zip(MIXED, [(6, 5), (6, 4), (2, 2), (8, 8)])]
    md = render_markdown(_results(meter))
    left = (" Over the 2 GPU(s) on trusted captures, as the headline: 2 on toy or low-confidence ones left out (toy 1, "
            "low 1).")
    assert ("Every month here extrapolates short captures: 2 GPU(s), windows of 10.0–20.0 ms each (30.0 ms in all), 2 GPUs "
            "with 6 stable iterations; the sampled meter: 6 sample period(s) per GPU." + left) in md
    assert ("would read 75.00 % busy (12 period(s) over 2 GPU(s)); the GPUs were idle 16.67 % of the time: "
            "$30.00/month." + left) in md
    assert md.count("as the headline") == 2
    md = render_markdown(_results(meter[:2]))
    assert "as the headline" not in md and "$30.00/month. " not in md and "of the time: $30.00/month." in md


def test_a_toy_capture_page_and_record_mark_their_figures(tmp_path):
    """The real tiny_2kernels.sqlite (tier toy: an 18.255 ms window, 2 kernels): its page's idle cost and its
    4421.087× speed-up are marked "toy capture: not to be trusted", and so is its record's idle cost (main: both
    unmarked, the tier said only further down)."""
    import re

    from pipeline.report.gpu_page import untrusted_marker

    assert untrusted_marker({"confidence_tier": "medium"}) is None and untrusted_marker({}) is None
    assert untrusted_marker({"low_confidence": True, "confidence_note": "n"}) == {
        "tier": "low", "marker": "low confidence: not to be trusted", "title": "n"}
    out = tmp_path / "out"
    run_cli("run", str(PROFILES / "tiny_2kernels.sqlite"), "--out", str(out), "--config", "configs/profiles.yaml")
    run_cli("report", str(out))
    page = next((out / "gpu-pages").glob("tiny_2kernels*.html")).read_text(encoding="utf-8")
    assert re.search(r'id="usd-untrusted"[^>]*>toy capture: not to be trusted<', page)
    assert "speed-up if the idle vanished 4421.087× (toy capture: not to be trusted)" in page
    assert re.search(r'4421.087× \(toy capture: not to be trusted\) <span class="tag implausible" '
                     r'id="speedup-implausible"[^>]*>implausible speed-up<', page)   # 10× or more
    assert 'id="categories-untrusted"' in page
    record = (out / "records" / "tiny.md").read_text(encoding="utf-8")
    assert ("Idle cost: $182.46 per month for these GPUs. All on toy or low-confidence captures: not to be trusted. "
            "Basis: ") in record


# ---- 4. names break at their seams only; the remedy cell shows a visible "more" --------------------------------------

#: Measures, after load, each fix-first remedy that opens (a ``details``): whether its closed text is cut (the
#: clamped ``.rx`` scrolls), whether its "more" label shows inside its cell, and with ``open`` set on every one
#: whether the whole remedy shows (nothing cut) and the label hides.
_REMEDY = """<script>(function () {
  var out = [];
  document.querySelectorAll("#fix-list tr[data-category] td.remedy details").forEach(function (d) {
    var row = d.closest("tr"); if (row.getBoundingClientRect().height === 0) { return; }
    var rx = d.querySelector("summary .rx"), more = d.querySelector("summary .open-more");
    var cell = d.closest("td").getBoundingClientRect(), m = more ? more.getBoundingClientRect() : null;
    out.push({open: d.open, cut: rx.scrollHeight > rx.clientHeight + 1,
              more: !!(m && m.height > 0 && m.left >= cell.left - 1 && m.right <= cell.right + 1 && m.bottom <= cell.bottom + 1),
              text: more ? more.innerText : null});
  });
  var p = document.createElement("pre"); p.id = "remedy-measured"; p.textContent = JSON.stringify(out);
  document.body.appendChild(p);
})();</script>"""


def _in_chromium(page, width: int, tmp, script: str, what: str) -> dict:
    """What ``script`` finds in ``page`` loaded in real Chromium (``chromium_load``) at ``width`` px: the views'
    measuring helper, :func:`test_views_money._measured`."""
    from test_views_money import _measured

    assert chromium_load is not None
    return _measured(page, width, tmp, script, what)


@pytest.mark.needs_chromium
def test_names_break_at_seams_and_every_remedy_opens_whole(tmp_path):
    """The real traces at 1280 px (their long kernel names, NVTX ranges and remedies in narrow cells): no word of the
    report, nor of the GPU page with the longest kernel names (a100_ws16_5streams), is cut across two lines in any
    table cell, list item or remedy (main: 321 words cut in the report, `PyTorch` and `profiler` among them, 202 on
    the page, `FillFunctor<long>` and `cudaDeviceSynchronize`: every cell read `overflow-wrap: anywhere`); the report
    and the page fit their window; each closed remedy shows a "more" in its cell, and opened it shows whole (main: cut
    at two lines, nothing said)."""
    from test_views_money import _MEASURE, _WORDS

    out = tmp_path / "traces"
    run_cli("run", str(KINETO), "--out", str(out))
    run_cli("report", str(out))
    words = _WORDS.replace('e.closest(".name, .w, a.gpu-page, #gpu-name")', 'e.closest("td, li, summary, dd, code, .name")')
    page = next((out / "gpu-pages").glob("a100_ws16_5streams*.html"))
    for p in (out / "report.html", page):
        got = _in_chromium(p, 1280, tmp_path, words, "words")
        assert got["words"] > 2000 and not got["broken"], (p.name, got["broken"][:10])
        fit = _in_chromium(p, 1280, tmp_path, _MEASURE, "layout")
        assert fit["page"][0] <= fit["page"][1] and not [t for t in fit["tables"] if t[1] > t[2]], (p.name, fit)
    closed = _in_chromium(out / "report.html", 1280, tmp_path, _REMEDY, "remedy")
    assert len(closed) == 5 and all(r["more"] and r["text"] == "more" and not r["open"] for r in closed), closed
    assert any(r["cut"] for r in closed)   # some remedy is longer than its two lines: the "more" is what says so
    opened = out / "opened.html"
    opened.write_text((out / "report.html").read_text(encoding="utf-8").replace(
        '<details class="diagnosis"', '<details open class="diagnosis"'), encoding="utf-8")
    whole = _in_chromium(opened, 1280, tmp_path, _REMEDY, "remedy")
    assert len(whole) == 5 and all(r["open"] and not r["cut"] and not r["more"] for r in whole), whole


@pytest.mark.needs_chromium
def test_compare_page_names_break_at_seams(tmp_path):
    """compare.html of two real traces with long kernel names (a100_ws2_nccl against a100_ws16_5streams, labelled one
    job with a long name, --force so every figure and gap shows) at 1280 px: no word of a job, GPU or kernel name, in
    a heading, a table cell, a list item or the seed pages, is cut across two lines (main: the gap table's kernel
    names, `FillFunctor<long>` and `cutlass_80_tensorop_s1688gemm_256x128_32x3_nt_align1` among them, broke mid-word:
    nothing marked their seams); the page fits its window; compare.csv and compare.json keep the names as they are."""
    from test_views_money import _MEASURE, _WORDS

    labels = tmp_path / "labels.yaml"
    job = "DistributedDataParallel_resnet50_ws16_training_nightly_regression"
    labels.write_text(f'labels:\n  - {{match: "*", cluster: lab, job: {job}}}\n', encoding="utf-8")
    out = tmp_path / "c"
    run_cli("compare", str(KINETO / "a100_ws2_nccl_rank0.json.gz"), str(KINETO / "a100_ws16_5streams_rank0.json.gz"),
            "--out", str(out), "--config", str(labels), "--force")
    words = _WORDS.replace('e.closest(".name, .w, a.gpu-page, #gpu-name")',
                           'e.closest("td, li, summary, dd, code, .name, h2, h3, h4")')
    page = out / "compare.html"
    got = _in_chromium(page, 1280, tmp_path, words, "words")
    assert got["words"] > 1000 and not got["broken"], got["broken"][:10]
    fit = _in_chromium(page, 1280, tmp_path, _MEASURE, "layout")
    assert fit["page"][0] <= fit["page"][1], fit
    import json

    doc = json.loads((out / "compare.json").read_text(encoding="utf-8"))
    assert doc["jobs"][0]["before"][1] == job and "<wbr>" not in (out / "compare.json").read_text(encoding="utf-8")
    csv_text = (out / "compare.csv").read_text(encoding="utf-8")
    assert job in csv_text and "<wbr>" not in csv_text


# ---- 2. one word per meaning: the straggler (most idle) and the late rank (last into the collectives) ----------------

def _coll(key: str, last: int, chronic: bool) -> dict:
    """A measured GPU of one report: 28 calls, 2 ms waited, 4 ms in collectives, $10.00 of wait, of a 100 ms window."""
    return {"report": "t.sqlite", "gpu_key": key, "window_ns": 100 * MS, "collective_wait_status": "measured",
            "collective_wait_note": "", "collective_last_count": last, "collective_chronic": chronic,
            "collective_calls": 28, "collective_wait_ns": 2 * MS, "collective_transfer_ns": 2 * MS,
            "collective_ns": 4 * MS, "collective_wait_usd_per_month": 10.0, "rate_assumed": False, "unpriced": False,
            "gpu_model": "NVIDIA H100 80GB HBM3", "collective_p2p": False, "collective_match_basis": "kth call of family"}


def test_the_late_rank_is_never_called_the_straggler():
    """The GPU last into most collective calls is the late rank in the jobs table's header, the record and the fix-first
    remedy; "straggler" names only the most idle GPU (main: `collective_straggler`, "straggler H100 #2 … (chronic: last
    in 20 of 28 calls)", "find why the last rank is late: its own idle, data, stragglers"). Record line by hand: 4 ms
    waited of 200 ms of windows (2.00 %), 8 ms in collectives, $20.00."""
    import pathlib
    import re

    from pipeline import schema
    from pipeline.analysis import collwait
    from pipeline.report.medical import collective_line

    rollup = set(schema.ROLLUP_COLUMNS)
    assert {"collective_late_rank", "collective_late_rank_kind"} <= rollup
    assert not {"collective_straggler", "collective_straggler_kind"} & rollup
    line = collective_line([_coll("pid1/dev0", 8, False), _coll("pid1/dev1", 20, True)],
                           {("t.sqlite", "pid1/dev0"): "H100 #1 a", ("t.sqlite", "pid1/dev1"): "H100 #2 b"})
    assert line == ("Collective wait: 4.000 ms waiting for the last rank inside collectives (2.00 % of the windows) of "
                    "8.000 ms in collective kernels on 2 GPU(s): $20.00 per month beside the idle cost, never in it; late "
                    "rank H100 #2 b (chronic: last in 20 of 28 calls). Fix: find what holds the late rank back: its own "
                    "idle, its data, its host.")
    assert collwait.job_late_rank(["a", "b"], [8, 20], [False, True]) == ("b", "chronic")
    # no view words the late rank as a straggler: "straggler <name> (chronic|transient …", "chronic straggler"
    mixed = re.compile(r"straggler \S+ [^\n(]{0,30}\((?:chronic|transient)|chronic straggler|collective_straggler|"
                       r"late: its own idle, data, stragglers")
    root = pathlib.Path(__file__).resolve().parents[1]
    files = [*(root / "pipeline").rglob("*.py"), *(root / "pipeline").rglob("*.j2"), *(root / "docs").glob("*.md")]
    found = [(f.name, m.group(0)) for f in files for m in mixed.finditer(f.read_text(encoding="utf-8"))]
    assert not found, found


def test_the_idle_cost_card_says_failed_reports_and_assumed_rates():
    """Issue 45 (tryout): the headline idle-cost card said nothing of the failed reports (only a banner did): it says
    how many failed and that they are not in the figure; and how much of the figure rests on assumed rates. Two
    medium GPUs, $100 (on the rate card) and $60 (rate assumed), and two failed reports: $160.00, of which $60.00 at
    assumed rates (1 GPU(s)); 2 report(s) failed."""
    import html as html_lib
    import re

    from pipeline.report.html import render_html

    rows = [_row(report="med.sqlite", gpu_key="pid1/dev0", idle_usd_per_month=100.0, rate_assumed=False),
            _row(report="med.sqlite", gpu_key="pid1/dev1", idle_usd_per_month=60.0, rate_assumed=True),
            *[_row(report=f"bad{i}.sqlite", gpu_key=None, status="error", error="cannot read", idle_usd_per_month=None,
                   confidence_tier=None, low_confidence=None) for i in (1, 2)]]
    card = html_lib.unescape(re.sub(r"\s+", " ", render_html(_results(rows)))).split('id="headline"')[1].split(
        "</div></div>")[0]
    assert 'data-usd="160.00"' in card
    assert "; of which $60.00 at assumed rates (1 GPU(s))" in card
    assert re.search(r'id="fleet-usd-failed" data-failed="2">; 2 report\(s\) failed and are not in this figure '
                     r'\(their cost is unknown, not \$0\.00\)<', card), card
    ok = html_lib.unescape(render_html(_results(rows[:2]))).split('id="headline"')[1].split("</section>")[0]
    assert "fleet-usd-failed" not in ok
