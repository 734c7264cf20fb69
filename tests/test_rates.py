"""The rate card (issue 26 points 1 and 2; docs/definitions.md#cost): a rate file merges into the default
card by model, the card covers the GPUs people rent with globs fitting the names exports give, a trace
whose device ids miss its deviceProperties takes the one model they name, and a GPU priced without an
entry of its own is never silent (``rate_assumed``, a coded warning, ``cost.unlisted: assume | unpriced``,
every view and every total).

Every dollar figure is worked out by hand: idle fraction x USD per GPU-hour x 730 h.
"""
from __future__ import annotations

import math
import re
from html import escape as html_escape
from pathlib import Path

import pandas as pd
import pytest
from conftest import KINETO, PROFILES, run_cli

from pipeline.analysis import cost
from pipeline.analysis.analyse import analyse_gpu
from pipeline.analysis.cost import HOW_TO_PRICE
from pipeline.report.words import PRICE_ON_PAGES, for_pages
from pipeline.config import ConfigError, CostConfig, Rate, load_config
from pipeline.load.kineto import load_kineto
from pipeline.load.report import gpu_trace, load_report
from pipeline.synth import ExportWriter
from pipeline.synth.kineto import KinetoWriter
from helpers.fixes import read_fixes

MS = 1_000_000
TINY = PROFILES / "tiny_2kernels.sqlite"          # one NVIDIA GeForce RTX 3080
TINY_W, TINY_IDLE = 18_254_667, 18_250_538        # its span window and device-level idle (ns)


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def _export(path, model: str) -> str:
    """An Nsight export of one GPU named ``model``: kernels [0,10) and [30,40) ms, so W 40 ms, idle 20 ms (half)."""
    w = ExportWriter(str(path))
    w.gpu(0, model, uuid="aaaaaaaa-0000-0000-0000-000000000001", bus="0000:01:00.0", sm_count=80, cu_device=0)
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="k")
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=40 * MS, name="k")
    return w.close()


# ---------------------------------------------------------------- 1. a rate file merges into the card


def test_one_entry_rate_file_overrides_its_model_and_keeps_the_rest_of_the_card(tmp_path):
    # one H100 entry at $2.00, no match globs: it takes the card's H100 entry's place and its '*H100*'
    # glob; A100, L40S, RTX 3080 ... stay. main: the file replaced the card (one entry, match 'H100' only).
    cfg = load_config([_write(tmp_path / "r.yaml", "cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: 2.0}\n")])
    card = CostConfig().rates
    assert [r.model for r in cfg.cost.rates] == [r.model for r in card]
    h100 = next(r for r in cfg.cost.rates if r.model == "H100")
    assert (h100.usd_per_gpu_hour, h100.match, h100.source) == (2.0, ("*H100*",), "")
    assert [r for r in cfg.cost.rates if r.model != "H100"] == [r for r in card if r.model != "H100"]
    assert cost.find_rate("NVIDIA H100 80GB HBM3", cfg.cost)[:2] == ("H100", 2.0)
    assert cost.find_rate("NVIDIA H100 PCIe", cfg.cost)[:2] == ("H100 PCIe", 2.86)   # its own entry, kept
    assert cost.find_rate("NVIDIA A100-SXM4-80GB", cfg.cost)[:2] == ("A100", 2.5)
    assert cost.find_rate("NVIDIA L40S", cfg.cost)[:2] == ("L40S", 1.95)


def test_one_entry_rate_file_through_the_cli(tmp_path):
    # `gpu-idle run` (a real process) on the RTX 3080 export and an H100 export, with the one-entry file.
    # RTX 3080: its own entry, $0.25: 18,250,538 / 18,254,667 x 0.25 x 730 = 182.46 (main: the H100
    # fallback, $2.00: 1,459.67, and no word of it). H100: 20/40 x 2.00 x 730 = 730.00.
    rates = _write(tmp_path / "r.yaml", "cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: 2.0}\n")
    h100 = _export(tmp_path / "h100.sqlite", "NVIDIA H100 80GB HBM3")
    out = tmp_path / "out"
    run_cli("run", str(TINY), h100, "--out", str(out), "--window", "span", "--config", str(rates), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv").set_index("gpu_model")
    tiny = fleet.loc["NVIDIA GeForce RTX 3080"]
    assert (int(tiny["window_ns"]), int(tiny["idle_ns"])) == (TINY_W, TINY_IDLE)
    assert (tiny["rate_model"], tiny["rate_usd_per_hour"]) == ("RTX 3080", 0.25)
    assert tiny["idle_usd_per_month"] == round(TINY_IDLE / TINY_W * 0.25 * 730, 2) == 182.46
    assert not tiny["rate_assumed"]
    h = fleet.loc["NVIDIA H100 80GB HBM3"]
    assert (h["rate_model"], h["rate_usd_per_hour"], h["idle_usd_per_month"]) == ("H100", 2.0, 730.0)
    # both on the card: nothing assumed (the RTX 3080 export's one warning is its own DIAGNOSTIC_EVENT)
    assert pd.isna(h["warnings"]) and tiny["warnings"].startswith("DIAGNOSTIC_EVENT: ")


def test_rates_replace_replaces_the_card(tmp_path):
    # rates_replace: true: only the file's entries; the RTX 3080 is then unlisted: unpriced (the default since
    # issue 41), priced (assumed) as H100 under cost.unlisted: default
    path = _write(tmp_path / "r.yaml", "cost:\n  rates_replace: true\n  rates:\n"
                                       "    - {model: H100, usd_per_gpu_hour: 2.0, match: ['*H100*']}\n")
    cfg = load_config([path])
    assert cfg.cost.rates == (Rate("H100", 2.0, ("*H100*",)),)
    choice = cost.find_rate("NVIDIA GeForce RTX 3080", cfg.cost)
    assert (choice.model, choice.assumed, choice.unlisted, choice.unpriced) == ("", False, True, True)
    cfg = load_config([path], {"cost": {"unlisted": "default"}})
    choice = cost.find_rate("NVIDIA GeForce RTX 3080", cfg.cost)
    assert (choice.model, choice.usd_per_gpu_hour, choice.assumed, choice.unlisted) == ("H100", 2.0, True, True)


def test_new_entries_go_first_and_layers_merge(tmp_path):
    # a second file's new entry comes before the card's globs (first fit wins): "H100 SXM5" fits it
    # before '*H100*'; a MIG profile entry (sms 14) is its own entry, never the whole A100's
    first = _write(tmp_path / "a.yaml", "cost:\n  rates:\n    - {model: A100, usd_per_gpu_hour: 2.0}\n"
                                        "    - {model: A100, usd_per_gpu_hour: 0.5, match: ['*A100*'], sms: 14}\n")
    second = _write(tmp_path / "b.yaml", "cost:\n  rates:\n"
                                         "    - {model: H100 SXM, usd_per_gpu_hour: 3.5, match: ['*H100*SXM*']}\n")
    cfg = load_config([first, second])
    assert [r.model for r in cfg.cost.rates[:3]] == ["H100 SXM", "A100", "H100 NVL"]
    assert cost.find_rate("NVIDIA H100 SXM5 80GB", cfg.cost)[:2] == ("H100 SXM", 3.5)
    assert cost.find_rate("NVIDIA H100 80GB HBM3", cfg.cost)[:2] == ("H100", 4.0)
    assert cost.find_rate("NVIDIA A100-SXM4-80GB", cfg.cost)[:2] == ("A100", 2.0)
    assert cost.find_rate("NVIDIA A100-SXM4-80GB", cfg.cost, mig=cost.MigShare(14, 108))[:2] == ("A100", 0.5)


def test_a_bad_entry_is_named_where_it_was_written(tmp_path):
    with pytest.raises(ConfigError, match=r"cost\.rates\.0"):
        load_config([_write(tmp_path / "r.yaml", "cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: -1}\n")])


# ---------------------------------------------------------------- 1. the default card


@pytest.mark.parametrize("name, model, usd", [
    ("NVIDIA H100 80GB HBM3", "H100", 4.0), ("NVIDIA H100 PCIe", "H100 PCIe", 2.86), ("H100 PCIe", "H100 PCIe", 2.86),
    ("NVIDIA H100 NVL", "H100 NVL", 2.53), ("NVIDIA H200", "H200", 4.54), ("NVIDIA H200 NVL", "H200", 4.54),
    ("NVIDIA B200", "B200", 6.03), ("NVIDIA A40", "A40", 1.22), ("NVIDIA RTX A5000", "RTX A5000", 0.68),
    ("NVIDIA RTX A4000", "RTX A4000", 0.58), ("NVIDIA RTX 4000 Ada Generation", "RTX 4000 Ada", 0.58),
    ("NVIDIA A100-SXM4-40GB", "A100 40GB", 1.48), ("NVIDIA A100-PCIE-40GB", "A100 40GB", 1.48),
    ("A100 40GB", "A100 40GB", 1.48), ("NVIDIA A100-SXM4-80GB", "A100", 2.5), ("NVIDIA A100 80GB PCIe", "A100", 2.5),
    ("A100", "A100", 2.5), ("NVIDIA A100-PG509-200", "A100", 2.5),
    ("NVIDIA A10G", "A10G", 1.01), ("NVIDIA A10", "A10", 0.86), ("NVIDIA L4", "L4", 0.8), ("NVIDIA L40", "L40", 1.22),
    ("NVIDIA L40S", "L40S", 1.95), ("Tesla V100-SXM2-16GB", "V100", 3.06), ("Tesla V100-SXM2-32GB", "V100", 3.06),
    ("Tesla T4", "T4", 0.59), ("AMD Instinct MI300X", "MI300X", 1.85), ("AMD Instinct MI250X", "MI250", 1.5),
    ("AMD Instinct MI250", "MI250", 1.5), ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 1.0),
    ("Quadro RTX 6000", "Quadro RTX 6000", 0.58), ("NVIDIA GeForce RTX 4090", "RTX 4090", 0.6),
    ("NVIDIA GeForce RTX 3090", "RTX 3090", 0.39), ("NVIDIA GeForce RTX 3080", "RTX 3080", 0.25),
    ("NVIDIA GeForce RTX 2070 SUPER", "RTX 2070 SUPER", 0.15), ("NVIDIA TITAN RTX", "TITAN RTX", 0.3),
    ("NVIDIA GeForce RTX 2080 Ti", "RTX 2080 Ti", 0.2),
])
def test_default_card_fits_the_names_exports_give(name, model, usd):
    # the forms Nsight exports and PyTorch traces really write (with and without "NVIDIA", memory sizes,
    # SXM/PCIe); the specific entries before the globs that would swallow them. main: all but H100, A100,
    # L40S and RTX 3080 were priced as H100 ($4.00), and A100 40 GB as any A100
    choice = cost.find_rate(name, CostConfig())
    assert (choice.model, choice.usd_per_gpu_hour, choice.assumed) == (model, usd, False)


def test_every_default_entry_states_its_source():
    assert all(r.source and "replace with your contract" in r.source for r in CostConfig().rates)
    assert all(("20" in r.source) or r.source == "example list price; replace with your contract"  # a date
               for r in CostConfig().rates)
    # issue 41: the entries the issue lists cite a public on-demand price with its date (H200, B200 were stale,
    # H100 SXM, A100 80 GB and L40S said "example list price")
    dated = re.compile(r"20\d\d-\d\d(-\d\d)?")
    listed = {"H100", "H100 PCIe", "H100 NVL", "H200", "B200", "A100 40GB", "A100", "L40S", "L4", "A10", "A10G", "T4",
              "V100", "MI300X", "RTX A6000", "RTX A5000", "RTX A4000", "RTX 4000 Ada", "A40"}
    for r in CostConfig().rates:
        if r.model in listed - {"A10G", "V100"}:   # those two quote AWS instance prices of one GPU
            assert dated.search(r.source) and "example" not in r.source, r
    assert {r.model for r in CostConfig().rates} >= listed


# ---------------------------------------------------------------- 1. device ids vs deviceProperties


def test_trace_on_device_2_takes_the_one_model_its_device_properties_name(tmp_path):
    # ROCm: kernels on device 2, deviceProperties one entry (id 0, AMD Instinct MI300X, 304 CUs).
    # Kernels [0,1) and [3,4) ms: span W 4 ms, idle 2 ms; priced at the card's MI300X entry:
    # 2/4 x 1.85 x 730 = 675.25, nothing assumed, no warning. main: the model was taken too, but priced
    # as H100 (1,460.00) with a model-not-on-rate-card warning.
    base = 1_700_000_000_000_000_000
    w = KinetoWriter(str(tmp_path / "rocm.json"), pid=9, devices=[(0, "AMD Instinct MI300X", 304)],
                     base_time_ns=base)
    for i in range(2):
        w.runtime(9, base + 3 * i * MS - MS // 10, base + 3 * i * MS - MS // 20, "hipLaunchKernel", i + 1)
        w.kernel(2, 0, base + 3 * i * MS, base + (3 * i + 1) * MS, "gemm", i + 1)
    rep = load_kineto(w.close())
    assert rep.devices[["device_id", "gpu_model", "sms"]].values.tolist() == [[2, "AMD Instinct MI300X", 304]]
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], {"analysis": {"window": "span"}}), {}).row
    assert (row["window_ns"], row["idle_ns"]) == (4 * MS, 2 * MS)
    assert (row["rate_model"], row["rate_usd_per_hour"], row["idle_usd_per_month"]) == ("MI300X", 1.85, 675.25)
    assert (row["rate_assumed"], row["unpriced"], row["warnings"]) == (False, False, "")


# ---------------------------------------------------------------- 2. assumed is never silent


UNLISTED = "Moore Threads MTT S4000"   # on no card
UNLISTED_WARNING = f"GPU model {UNLISTED!r} is not on the rate card; "


def _two_gpus(tmp_path, policy: str | None):
    """`gpu-idle run` of two one-GPU exports (idle half of a 40 ms window each): an NVIDIA L4 (on the card,
    $0.80: 0.5 x 0.8 x 730 = 292.00) and an unlisted model, under ``cost.unlisted: policy`` (None: the default)."""
    paths = [_export(tmp_path / "l4.sqlite", "NVIDIA L4"), _export(tmp_path / "mtt.sqlite", UNLISTED)]
    policy_line = "" if policy is None else f"cost:\n  unlisted: {policy}\n"
    cfg = _write(tmp_path / "c.yaml", policy_line + "labels:\n  - {match: '*.sqlite', cluster: lab, job: mixed}\n")
    out = tmp_path / "out"
    proc = run_cli("run", *paths, "--out", str(out), "--window", "span", "--config", str(cfg), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv").set_index("gpu_model")
    return out, proc.stdout, fleet


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["default", "assume"])
def test_unlisted_model_assumed(tmp_path, policy):
    # cost.unlisted: default (and `assume`, its earlier spelling; the default until issue 41): the unlisted GPU
    # is priced as H100: 0.5 x 4.00 x 730 = 1,460.00, rate_assumed,
    # a model-not-on-rate-card warning; the totals say 1,460.00 of the 1,752.00 rest on an assumed rate.
    # main: no rate_assumed column, no assumed total, an unmarked $1,460.00 in the printed table.
    out, printed, fleet = _two_gpus(tmp_path, policy)
    mtt, l4 = fleet.loc[UNLISTED], fleet.loc["NVIDIA L4"]
    assert (mtt["rate_model"], mtt["rate_usd_per_hour"], mtt["idle_usd_per_month"]) == ("H100", 4.0, 1460.0)
    assert (bool(mtt["rate_assumed"]), bool(mtt["unpriced"])) == (True, False)
    assert mtt["warnings"] == UNLISTED_WARNING + "priced as H100"
    assert (l4["rate_model"], l4["idle_usd_per_month"], bool(l4["rate_assumed"])) == ("L4", 292.0, False)
    for name in ("jobs.csv", "clusters.csv"):
        (total,) = pd.read_csv(out / name).to_dict("records")
        assert (total["idle_usd_per_month"], total["assumed_usd_per_month"], total["unpriced_gpus"]) == (
            1752.0, 1460.0, 0)
    assert "~$1,460.00" in printed and "$292.00" in printed and "~$292.00" not in printed
    assert "~$: priced at an assumed rate" in printed
    assert "fleet idle cost $1,752.00/month\n  of which $1,460.00 at assumed rates (1 GPU(s))\n" in printed
    # the table, its legend and the totals fit 120 columns (the last line names the files written, by path)
    assert max(len(line) for line in printed.splitlines() if not line.startswith("wrote ")) <= 120
    # the report's headline, the GPU page's cost card and the job's record say it too
    run_cli("report", str(out), "--out", str(out / "report.html"))
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "; of which $1,460.00 at assumed rates (1 GPU(s))" in html
    # the per-job table marks the job's dollars that rest on assumed rates
    jobs = re.search(r'<table id="jobs">(.*?)</table>', html, re.S).group(1)
    assert "~$1,752.00 <span class=\"tag rate\"" in jobs and ">$1,460.00 at assumed rates</span>" in jobs
    pages = {p.name: p.read_text(encoding="utf-8") for p in (out / "gpu-pages").glob("*.html")}
    (mtt_page,) = [t for n, t in pages.items() if n.startswith("mtt")]
    assert f"$4.00/GPU-hour (H100, assumed: model {UNLISTED} is not on the card)" in mtt_page
    (l4_page,) = [t for n, t in pages.items() if n.startswith("l4")]
    assert "$0.80/GPU-hour (L4)" in l4_page
    run_cli("report", str(out), "--format", "csv", "--out", str(out / "report.csv"))
    csv = pd.read_csv(out / "report.csv").set_index("gpu_model")
    assert (bool(csv.loc[UNLISTED, "rate_assumed"]), bool(csv.loc["NVIDIA L4", "rate_assumed"])) == (True, False)
    (record,) = (out / "records").glob("*.md")
    assert ("$1,460.00 of the idle cost below rests on assumed rates: Moore Threads MTT S4000 #2 pid10/dev0 (model not on "
            "the rate card or not named; priced as H100, the default model).") in record.read_text(encoding="utf-8")


@pytest.mark.slow
def test_unlisted_model_unpriced(tmp_path):
    # unpriced (the default since issue 41): the unlisted GPU has no rate and no dollars (empty in fleet.csv), is
    # counted (unpriced_gpus 1) and is in no USD total: 292.00, the L4's alone. Every total names the model it
    # leaves out and says how to price it. main: priced as H100 ($1,460.00, ~$) by default.
    out, printed, fleet = _two_gpus(tmp_path, None)
    mtt = fleet.loc[UNLISTED]
    assert pd.isna(mtt["rate_usd_per_hour"]) and pd.isna(mtt["idle_usd_per_month"]) and pd.isna(mtt["rate_model"])
    assert pd.isna(mtt["fix_cpu_usd_per_month"]) and int(mtt["idle_ns"]) == 20 * MS   # its idle shows
    assert (bool(mtt["rate_assumed"]), bool(mtt["unpriced"])) == (False, True)
    assert mtt["warnings"] == UNLISTED_WARNING + (f"left unpriced (cost.unlisted: unpriced): add a cost.rates entry "
                                                  f"for {UNLISTED!r} to price it")
    assert mtt["rate_source"] == f"unpriced (cost.unlisted: unpriced): {UNLISTED!r} is not on the card"
    named = f"1 GPU(s) unpriced, not in it ({UNLISTED} (1)); {HOW_TO_PRICE}"
    for name in ("jobs.csv", "clusters.csv"):
        (total,) = pd.read_csv(out / name).to_dict("records")
        assert (total["idle_usd_per_month"], total["assumed_usd_per_month"], total["unpriced_gpus"],
                total["unpriced_models"]) == (292.0, 0.0, 1, f"{UNLISTED} (1)")
    # fix_first.csv: the one cpu entry of the fleet (and of the job) rests on both GPUs, names the unpriced one
    fixes = read_fixes(out / "fix_first.csv")
    assert set(zip(fixes["idle_usd_per_month"], fixes["unpriced_gpus"], fixes["unpriced_models"])) == {
        (292.0, 1, f"{UNLISTED} (1)")}
    assert "unpriced" in printed and "$292.00" in printed
    total = printed[printed.index("fleet idle cost"):]
    assert total.startswith("fleet idle cost $292.00/month\n  1 GPU(s) unpriced, not in it")
    assert " ".join(total.split("\n  None of the GPUs")[0].split()) == f"fleet idle cost $292.00/month {named}"
    assert max(len(line) for line in printed.splitlines() if not line.startswith("wrote ")) <= 120
    run_cli("report", str(out), "--format", "md", "--out", str(out / "summary.md"))
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "$292.00/month idle" in md and "; " + for_pages(named) in md   # the summary's headline, in words
    assert f"By cluster: lab $292.00 (1 GPU(s) unpriced: {UNLISTED} (1))." in md
    assert f"$292.00 (1 GPU(s) unpriced: {UNLISTED} (1))" in md   # the Markdown fix-first list
    # the top-GPU table's legend says the unpriced GPU was not priced (a tryout read "priced at the default model's
    # rate" under it), and its dollars say "unpriced" once
    assert ("unpriced: the GPU has no rate-card entry of its own (its model is not on the card, or it names none and "
            f"is not an NVIDIA GPU): it has no rate and is in no dollar total; {PRICE_ON_PAGES}.") in md
    assert "priced at the default model's rate" not in md and "unpriced (unpriced)" not in md
    assert "$nan" not in md and "Rates: unpriced (" in md   # the unpriced GPU's rate-card line says it has no rate
    assert "~$: priced at an assumed rate" not in printed and "unpriced: no rate (a model not on the rate card" in printed
    run_cli("report", str(out), "--out", str(out / "report.html"))
    html = (out / "report.html").read_text(encoding="utf-8")
    # the headline, its pricing hint in words (the pages name no configuration key: words.for_pages)
    assert 'data-usd="292.00"' in html and "; " + html_escape(for_pages(named)).replace("&#x27;", "&#39;") in html
    assert PRICE_ON_PAGES in html and HOW_TO_PRICE not in html.replace("&#39;", "'").replace("&#x27;", "'")
    jobs = re.search(r'<table id="jobs">(.*?)</table>', html, re.S).group(1)
    assert "$292.00" in jobs and f">1 GPU(s) unpriced: {UNLISTED} (1)</span>" in jobs and "at assumed rates</span>" not in jobs
    fix = re.search(r'<table id="fix-list">(.*?)</table>', html, re.S).group(1)
    assert f">1 GPU(s) unpriced: {UNLISTED} (1)</span>" in fix
    legend = re.search(r'<p class="note" id="top10-legend">(.*?)</p>', html, re.S).group(1)
    assert "it has no rate and is in no dollar total" in legend and "priced at the rate card" not in legend
    (page,) = [p for p in (out / "gpu-pages").glob("mtt*.html")]
    text = page.read_text(encoding="utf-8")
    assert '<div class="value" id="usd">unpriced</div>' in text
    assert f"per month: no rate (unpriced: model {UNLISTED} is not on the card; " in text
    # the job's record: its idle cost names the model left out and how to price it, in words (issue 45 a: a record is
    # read by managers too, so no configuration key)
    (record,) = (out / "records").glob("*.md")
    assert f"Idle cost: $292.00 per month for these GPUs; {for_pages(named)}." in record.read_text(encoding="utf-8")


@pytest.mark.parametrize("policy", ["assume", "default", "unpriced"])
def test_unnamed_gpu(tmp_path, policy):
    # an Nsight export (an NVIDIA GPU) that names no GPU, idle half of a 40 ms window: under every policy priced as
    # the default model, 0.5 x 4.00 x 730 = 1,460.00, rate_assumed (rate_source says why) and a
    # gpu-model-unresolved warning (status ok). main (before issue 41): unpriced under `unpriced`.
    w = ExportWriter(str(tmp_path / "n.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="k")
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=40 * MS, name="k")
    rep = load_report(w.close())
    cfg = load_config([], {"analysis": {"window": "span"}, "cost": {"unlisted": policy}})
    assert cfg.cost.unlisted == ("default" if policy == "assume" else policy)   # assume is read as default
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), cfg, {}).row
    assert (row["gpu_model"], row["rate_model"], row["idle_usd_per_month"]) == ("", "H100", 1460.0)
    assert (row["rate_assumed"], row["unpriced"], row["status"]) == (True, False, "ok")
    assert row["warnings"] == ("GPU model not named: export names no GPU; priced at an assumed rate, H100's "
                               "(cost.default_model); a gpu_model label for this report names it")
    h100 = next(r.source for r in CostConfig().rates if r.model == "H100")
    assert row["rate_source"] == f"rate card (default model: export names no GPU): {h100}"


def _hip_trace(path, devices, device: int, launch: str = "hipLaunchKernel") -> str:
    """A ROCm PyTorch trace: :func:`_trace`'s kernels launched by ``launch`` (HIP runtime calls)."""
    base = 1_700_000_000_000_000_000
    w = KinetoWriter(str(path), pid=9, devices=devices, base_time_ns=base)
    for i in range(2):
        w.runtime(9, base + 3 * i * MS - MS // 10, base + 3 * i * MS - MS // 20, launch, i + 1)
        w.kernel(device, 0, base + 3 * i * MS, base + (3 * i + 1) * MS, "gemm", i + 1)
    return w.close()


HIP = "the trace's runtime calls are HIP (hipLaunchKernel): a ROCm GPU, not an NVIDIA GPU"


@pytest.mark.parametrize("policy", [None, "default", "assume"])
def test_rocm_trace_naming_no_model_is_unpriced(tmp_path, policy):
    # a ROCm trace (HIP runtime calls) with no deviceProperties: the input says it is not an NVIDIA GPU, so by
    # default it is not priced as the default (NVIDIA H100) model: unpriced, with a gpu-model-unresolved warning
    # saying why. cost.unlisted: default (or assume) prices it as H100 as before: 2/4 x 4.00 x 730 = 1,460.00.
    # main: priced as H100 under every policy.
    rep = load_kineto(_hip_trace(tmp_path / "rocm.json", (), 0))
    assert rep.meta["not_nvidia"] == HIP
    trace = gpu_trace(rep, rep.gpu_keys()[0])
    assert trace.not_nvidia == HIP
    cfg = load_config([], {"analysis": {"window": "span"}, **({"cost": {"unlisted": policy}} if policy else {})})
    row = analyse_gpu(trace, cfg, {}).row
    assert (row["gpu_model"], row["window_ns"], row["idle_ns"], row["status"]) == ("", 4 * MS, 2 * MS, "ok")
    if policy is None:
        assert (row["rate_model"], row["rate_assumed"], row["unpriced"]) == ("", False, True)
        assert math.isnan(row["idle_usd_per_month"]) and math.isnan(row["rate_usd_per_hour"])
        assert row["rate_source"] == ("unpriced (cost.unlisted: unpriced): trace names no GPU (it has no "
                                      f"deviceProperties); {HIP}")
        assert row["warnings"] == ("GPU model not named: trace names no GPU (it has no deviceProperties); "
                                   f"{HIP}, so not priced at the default model's rate: left unpriced (cost.unlisted: "
                                   "unpriced); a gpu_model label for this report names it")
    else:
        assert (row["rate_model"], row["idle_usd_per_month"], row["rate_assumed"], row["unpriced"]) == (
            "H100", 1460.0, True, False)


def test_rocm_trace_whose_device_is_unknown_is_unpriced_and_the_loader_says_so(tmp_path):
    # ROCm, kernels on device 2 while deviceProperties list devices 0 and 1 of two models: the device's model is
    # unknown (the loader's gpu-model-unresolved warning, which now says it is left unpriced), the row unpriced.
    rep = load_kineto(_hip_trace(tmp_path / "two.json", [(0, "AMD Instinct MI300X", 304), (1, "AMD Instinct MI250X", 110)],
                                 2, "hipExtModuleLaunchKernel"))
    hip = HIP.replace("hipLaunchKernel", "hipExtModuleLaunchKernel")
    row = analyse_gpu(gpu_trace(rep, rep.gpu_keys()[0]), load_config([], {"analysis": {"window": "span"}}), {}).row
    assert (row["gpu_model"], row["unpriced"], row["rate_assumed"]) == ("", True, False)
    assert row["warnings"] == (
        "GPU model unknown for device 2: the trace's deviceProperties do not list device 2 (ids [0, 1]) and name 2 "
        "different models ('AMD Instinct MI250X', 'AMD Instinct MI300X'); "
        f"{hip}: left unpriced (cost.unlisted: unpriced; `default` prices it as the default model); a gpu_model label "
        "for this report names it")


@pytest.mark.parametrize("names, said", [
    (["hipLaunchKernel", "hipMemcpyWithStream"], HIP), (["hipMemcpyAsync"], HIP.replace("hipLaunchKernel", "hipMemcpyAsync")),
    (["cudaLaunchKernel"], ""), (["hipLaunchKernel", "cudaLaunchKernel"], ""), (["cuLaunchKernel", "hipFree"], ""),
    ([], "")])
def test_not_nvidia_only_when_every_runtime_call_is_hip(names, said):
    from pipeline.load.kineto import not_nvidia
    assert not_nvidia(names) == said


def test_real_rocm_trace_naming_an_off_card_model_is_unpriced():
    # /work/shared/kineto/mi250_rocm_minitoy.json.gz names "AMD Radeon Graphics" (not on the card): unpriced by
    # default (main: priced as H100 with a model-not-on-rate-card warning), its idle still shown
    path = KINETO / "mi250_rocm_minitoy.json.gz"
    if not path.exists():
        pytest.skip("the real ROCm trace is not here")
    rep = load_kineto(str(path))
    assert rep.meta["not_nvidia"] == HIP
    for key in rep.gpu_keys():
        row = analyse_gpu(gpu_trace(rep, key), load_config([], {}), {}).row
        assert (row["gpu_model"], row["unpriced"], row["rate_assumed"]) == ("AMD Radeon Graphics", True, False)
        assert math.isnan(row["idle_usd_per_month"]) and row["idle_ns"] > 0
        assert row["warnings"].startswith("GPU model 'AMD Radeon Graphics' is not on the rate card; left unpriced")


def _trace(path, devices, device: int) -> str:
    """A PyTorch trace of pid 9 whose kernels run on ``device`` ([0,1) and [3,4) ms: span W 4 ms, idle 2 ms),
    its ``deviceProperties`` ``devices`` (none: no deviceProperties)."""
    base = 1_700_000_000_000_000_000
    w = KinetoWriter(str(path), pid=9, devices=devices, base_time_ns=base)
    for i in range(2):
        w.runtime(9, base + 3 * i * MS - MS // 10, base + 3 * i * MS - MS // 20, "cudaLaunchKernel", i + 1)
        w.kernel(device, 0, base + 3 * i * MS, base + (3 * i + 1) * MS, "gemm", i + 1)
    return w.close()


def test_unnamed_gpu_priced_at_the_default_rate_says_so_in_a_coded_warning(tmp_path):
    # `gpu-idle run` of an Nsight export with no GPU table, a trace without deviceProperties, a trace whose
    # two entries name different models while its kernels run on device 2, and the first export again with a
    # gpu_model label (run again 1 ms later). Each unnamed GPU is idle half its window, priced at H100's $4.00
    # (the default model): 0.5 x 4.00 x 730 = 1,460.00, rate_assumed, status ok (the code is not partial), and ONE
    # gpu-model-unresolved warning: the first two get the rate's (quoting why no model is named), the third
    # keeps the loader's alone. The labelled one is priced at its own H100 entry: no warning, not assumed.
    # i26-merge: the first two had empty warnings.
    export = tmp_path / "nsight"
    export.mkdir()
    w = ExportWriter(str(export / "none.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=10 * MS, name="k")
    w.kernel(pid=10, device=0, stream=7, start=30 * MS, end=40 * MS, name="k")
    w.close()
    w = ExportWriter(str(tmp_path / "named.sqlite"))  # the same work run again 1 ms later (a copy is one capture)
    w.kernel(pid=10, device=0, stream=7, start=MS, end=11 * MS, name="k")
    w.kernel(pid=10, device=0, stream=7, start=31 * MS, end=41 * MS, name="k")
    w.close()
    paths = [str(export / "none.sqlite"), _trace(tmp_path / "noprops.json", (), 0),
             _trace(tmp_path / "two.json", [(0, "NVIDIA A100-SXM4-80GB", 108), (1, "NVIDIA L4", 58)], 2),
             str(tmp_path / "named.sqlite")]
    cfg = _write(tmp_path / "c.yaml", "labels:\n  - {match: named.sqlite, gpu_model: NVIDIA H100 80GB HBM3}\n")
    out = tmp_path / "out"
    run_cli("run", *paths, "--out", str(out), "--window", "span", "--config", str(cfg), "--no-cache")
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    fleet.index = [Path(r).stem for r in fleet["report"]]
    assert sorted(fleet.index) == ["named", "none", "noprops", "two"]
    tail = "a gpu_model label for this report names it"
    assert fleet.loc["none", "warnings"] == ("GPU model not named: export names no GPU; priced at an assumed rate, "
                                             f"H100's (cost.default_model); {tail}")
    assert fleet.loc["noprops", "warnings"] == (
        "GPU model not named: trace names no GPU (it has no deviceProperties); priced at an assumed rate, H100's "
        f"(cost.default_model); {tail}")
    assert fleet.loc["two", "warnings"] == (
        "GPU model unknown for device 2: the trace's deviceProperties do not list device 2 (ids [0, 1]) and name 2 "
        "different models ('NVIDIA A100-SXM4-80GB', 'NVIDIA L4'); priced as the default model (cost.default_model); "
        f"{tail}")
    for report in ("none", "noprops", "two"):
        row = fleet.loc[report]
        assert (row["gpu_model"], row["rate_model"], row["idle_usd_per_month"]) == ("", "H100", 1460.0)
        assert (str(row["rate_assumed"]), row["status"]) == ("True", "ok")
        assert row["warning_codes"] == "gpu-model-unresolved"   # the code, for filters (docs/outputs.md)
    named = fleet.loc["named"]
    assert (named["gpu_model"], named["rate_model"], named["idle_usd_per_month"]) == (
        "NVIDIA H100 80GB HBM3", "H100", 1460.0)
    assert (str(named["rate_assumed"]), named["status"], named["warnings"], named["warning_codes"]) == (
        "False", "ok", "", "")


def test_the_pricing_hint_first_names_a_gpu_model_label_and_it_prices_an_amd_gpu(tmp_path):
    # the hint a fresh user read under an AMD GPU offered `cost.unlisted: default` alone, pricing it at the H100 rate.
    # It first says a gpu_model label naming a model on the card prices the GPU at that entry, and says the default
    # policy prices at the default model's (H100's) rate. Followed, on a ROCm trace naming no model: the MI250 entry,
    # 2/4 x 1.50 x 730 = 547.50, not assumed, not unpriced.
    hint = cost.unpriced_text(1, {"no model named": 1})
    assert hint.index("`gpu_model: MI250` prices it at that entry") < hint.index("`cost.unlisted: default`")
    assert "at the default model's rate (`cost.default_model`, H100 unless set)" in hint
    trace = gpu_trace(rep := load_kineto(_hip_trace(tmp_path / "rocm.json", (), 0)), rep.gpu_keys()[0])
    cfg = load_config([], {"analysis": {"window": "span"}})
    row = analyse_gpu(trace, cfg, {"gpu_model": "MI250"}).row
    assert (row["rate_model"], row["idle_usd_per_month"], row["rate_assumed"], row["unpriced"]) == (
        "MI250", 547.5, False, False)
