"""Words, not ids (issue 45 point 8, a new user's tryout): the views a manager reads (report.html, the GPU pages, the
Markdown summary and records) name each diagnostic rule in words (pipeline/analysis/diagnosis.py ``RULE_NAMES``) and
each window rule (pipeline/analysis/window.py ``RULE_NAMES``), and print no rule id, no configuration key, no label
name and no command-line option; the ids stay in the machine outputs (the ``diagnosis`` column's JSON,
the per-GPU JSON, the pages' ``data-rule`` attributes). The ids are read from the rules' own code and the keys from
the configuration's own classes, so the lists cannot go stale."""
from __future__ import annotations

import ast
import dataclasses
import html
import inspect
import json
import re

import click
import pandas as pd
import pytest
from conftest import KINETO, run_cli

from pipeline import config as config_mod
from pipeline.analysis import diagnosis, window
from pipeline.cli import main
from pipeline.report.html import write_report
from pipeline.report.words import name_breaks


def rule_ids() -> set[str]:
    """Every rule id the rules themselves give: the second argument of each ``_finding(...)`` call in
    diagnosis.py (a literal string), read from its syntax tree."""
    tree = ast.parse(inspect.getsource(diagnosis))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "_finding":
            arg = node.args[1]
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), ast.dump(arg)
            out.add(arg.value)
    return out


def config_keys() -> set[str]:
    """Every key of the configuration (pipeline/config.py): each section's keys as ``section.key`` (nested ones
    ``section.sub.key``), the keys of a rate-card entry and of a label rule (``cost.rates.usd_per_gpu_hour``,
    ``labels.gpu_model``), from the classes' own fields."""
    def walk(value, prefix: str) -> set[str]:
        out = set()
        for f in dataclasses.fields(value):
            path = f"{prefix}{f.name}"
            out.add(path)
            v = getattr(value, f.name)
            if dataclasses.is_dataclass(v):
                out |= walk(v, path + ".")
            elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
                out |= walk(v[0], path + ".")
        return out
    return walk(config_mod.Config(), "") | walk(config_mod.LabelRule(match="*"), "labels.")


def options() -> set[str]:
    """Every long option of every command (``--trim``, ``--config``, ...), from click's own command definitions."""
    def walk(cmd) -> set[str]:
        out = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
        for sub in getattr(cmd, "commands", {}).values():
            out |= walk(sub)
        return out
    return walk(main)


def window_rule_ids() -> set[str]:
    """The window rules, from the command line's own definition: ``run --window``'s choices but ``auto`` (which
    picks among them), and ``trim`` (``run --trim``)."""
    run = main.commands["run"]
    choice = next(p for p in run.params if p.name == "window").type
    assert isinstance(choice, click.Choice) and any(p.name == "trim" for p in run.params)
    return set(choice.choices) - {"auto"} | {"trim"}


def label_names() -> set[str]:
    """The labels a ``labels:`` rule of the configuration gives (its class's fields but ``match``): ``gpu_model``..."""
    return {f.name for f in dataclasses.fields(config_mod.LabelRule)} - {"match"}


def ids_shown(text: str) -> set[str]:
    """The window rule ids, label names (as code, or as ``<name> label``) and options ``text`` shows: an id that is not
    an English word (``nvtx``) anywhere as a token; one that is (``span``, ``trim``, ``periodic``, also a category)
    where it stands as an id: after ``rule``, after ``window:``, or opening a clause with a colon (``span: ...``)."""
    out = set()
    for rule in window_rule_ids():
        shapes = [r"\brule:?\s+" + rule + r"\b", r"\bwindow:\s+" + rule + r"\b", r"(?:^|[;(]\s*)" + rule + r": "]
        if not re.fullmatch(r"[a-z]+", rule) or rule == "nvtx":
            shapes.append(r"(?<![\w.])" + rule + r"(?![\w])")
        out |= {rule for shape in shapes if re.search(shape, text, re.M)}
    out |= shown(as_code(label_names()), text)
    out |= {f"{name} label" for name in label_names() if re.search(rf"\b{name} labels?\b", text)}
    out |= {"labels rule"} if re.search(r"\blabels? rule", text) else set()
    out |= {o for o in options() if re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", text)}
    return out


def as_code(keys: set[str]) -> set[str]:
    """The texts of ``keys`` that read as code, not as English: a dotted path, or a name with an underscore
    (``analysis.actionable_pct``, ``actionable_pct``, ``data.host_memory``, ``break_point``); the one-word ones
    (``launch``, ``window``) are words a sentence may use."""
    out = set()
    for k in keys:
        out |= {t for t in (k, k.rsplit(".", 1)[-1]) if "." in t or "_" in t}
    return out


def visible(page: str) -> str:
    """What a reader of an HTML page sees: its text without tags, scripts, styles and comments, entities
    decoded, and the hover texts (``title``) and image texts (``alt``) too."""
    hover = " ".join(html.unescape(m) for m in re.findall(r'\b(?:title|alt)="([^"]*)"', page))
    text = re.sub(r"(?is)<(script|style)\b.*?</\1>", " ", page)
    text = re.sub(r"(?s)<!--.*?-->", " ", text)
    return html.unescape(re.sub(r"<[^>]+>", " ", text)) + " " + hover


def shown(texts: set[str], text: str) -> set[str]:
    """The members of ``texts`` that ``text`` holds as a whole token (not inside a longer name)."""
    return {t for t in texts if re.search(r"(?<![\w.])" + re.escape(t) + r"(?![\w])", text)}


# ---------------------------------------------------------------- the one mapping, by the rules' own code

def test_every_rule_has_a_distinct_name_in_words():
    ids = rule_ids()
    # the rules of the module docstring, each found in the code (a second computation of the list)
    assert ids == {"data.copy_stream", "data.host_memory", "data.host_alloc", "data.volume", "sync.regularity",
                   "comm.collective", "comm.late_rank", "boundary.seam", "cpu.host", "break_point", "launch",
                   "archived"}
    assert set(diagnosis.RULE_NAMES) == ids
    names = list(diagnosis.RULE_NAMES.values())
    assert len(set(names)) == len(names)                                   # distinguishable
    assert all(re.fullmatch(r"[A-Za-z][A-Za-z ]+[A-Za-z]", n) for n in names)       # words: no dot, no underscore
    assert not shown(as_code(ids) | as_code(config_keys()), " ".join(names))


def test_every_window_rule_has_a_distinct_name_in_words():
    ids = window_rule_ids()
    assert ids == {"trim", "nvtx", "periodic", "span"}       # the module docstring's rules (a second list)
    assert set(window.RULE_NAMES) == ids
    names = list(window.RULE_NAMES.values())
    assert len(set(names)) == len(names)
    assert not any(ids_shown(n) for n in names)
    assert window.rule_name("span") == "the whole run of the GPU's kernels, first to last"
    assert window.rule_name(None) == "unknown"


def test_ids_shown_finds_ids_in_their_shapes():
    """The check below can fail: each shape a tryout found on the pages is caught, prose is not."""
    assert ids_shown("rule nvtx") == {"nvtx"}
    assert ids_shown("no iterations (window rule: span)") == {"span"}
    assert ids_shown("nvtx: only 1 usable iteration(s); periodic: no iterations found") == {"nvtx", "periodic"}
    assert ids_shown("on the report's clock (what --trim takes)") == {"--trim"}
    assert ids_shown("a gpu_model label for this report names it") == {"gpu_model", "gpu_model label"}
    assert ids_shown("no labels rule gives its node") == {"labels rule"}
    assert ids_shown("the whole span of the kernels, periodic idle 2.00 %, trim the run") == set()


def test_a_line_names_its_rule_in_words():
    f = diagnosis.archived("cpu", 0.45, 2.0)
    assert f["rule"] == "archived"                                   # the id stays in the finding (JSON)
    assert diagnosis.line(f) == "too small to act on: cpu holds 0.45 % of the window (under 2 %): archived, not prescribed"
    c = diagnosis.comm_rule({"length": [2, 3], "kernel_before": ["ncclAllReduce", "ncclAllReduce"]})
    assert c["rule"] == "comm.collective"
    assert diagnosis.line(c) == ("waiting for the other GPUs: 2 gaps follow a collective (2 after ncclAllReduce): "
                                 "this GPU waits for the other ranks → one GPU cannot fix it: look at the straggler "
                                 "first, then overlap communication with compute")
    # not judged: said after the name; a rule the mapping does not know (other code's finding): its id's words
    assert diagnosis.line({"rule": "data.volume", "judged": False, "text": "no copies"}) == \
        "how large the copies are (not judged): no copies"
    assert diagnosis.line({"rule": "cpu.random_wait", "text": "t", "remedy": "r"}) == "cpu random wait: t → r"


# ---------------------------------------------------------------- the example fleet's views

@pytest.fixture(scope="module")
def views(tmp_path_factory) -> dict:
    """The example fleet run (in process), its HTML report with its GPU pages, its Markdown summary and records:
    ``{"run": folder, "pages": {name: text}}``."""
    root = tmp_path_factory.mktemp("words")
    run_cli("synth", "--example", str(root / "ex"))
    run_cli("run", str(root / "ex"), "--out", str(root / "out"), "--config", str(root / "ex" / "labels.yaml"))
    out = root / "out"
    write_report(out, out / "report.html")
    write_report(out, root / "summary.md", fmt="md")
    pages = {"report.html": visible((out / "report.html").read_text(encoding="utf-8")),
             "summary.md": (root / "summary.md").read_text(encoding="utf-8")}
    pages.update({f"gpu-pages/{p.name}": visible(p.read_text(encoding="utf-8"))
                  for p in sorted((out / "gpu-pages").glob("*.html"))})
    pages.update({f"records/{p.name}": p.read_text(encoding="utf-8") for p in sorted((out / "records").glob("*.md"))})
    return {"run": out, "pages": pages}


def test_views_show_no_rule_id_and_no_config_key(views):
    pages = views["pages"]
    fleet = pd.read_parquet(views["run"] / "fleet.parquet")
    assert sum(name.startswith("gpu-pages/") for name in pages) == len(fleet.query("status != 'error'")) == 24
    fired = {f["rule"] for text in fleet["diagnosis"].dropna() for f in diagnosis.of_text(text)}
    # the example's findings use most rules: the check below reads their lines on every view
    assert {"data.copy_stream", "data.host_memory", "comm.collective", "cpu.host", "sync.regularity",
            "break_point"} <= fired
    ids, keys = as_code(rule_ids()), as_code(config_keys())
    assert {"data.host_memory", "break_point", "analysis.actionable_pct", "actionable_pct", "cost.rates",
            "usd_per_gpu_hour", "labels.gpu_model", "diagnosis.break_point_share"} <= ids | keys
    leaks = {name: sorted(shown(ids | keys, text) | ids_shown(text)) for name, text in pages.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    # each rule that prescribes is named in words where the views show its findings: the GPU pages, the report's
    # fix-first details (an archived finding is shown by its text alone, apart)
    prescribing = fired - {"archived"}
    for where in ("gpu-pages/", "report.html"):
        text = " ".join(t for n, t in pages.items() if n.startswith(where))
        assert {r: diagnosis.RULE_NAMES[r] in text for r in prescribing} == dict.fromkeys(prescribing, True), where


def test_machine_outputs_keep_the_ids(views):
    run = views["run"]
    fleet = pd.read_csv(run / "fleet.csv")
    ids = {f["rule"] for text in fleet["diagnosis"].dropna() for f in diagnosis.of_text(text)}
    assert "data.host_memory" in ids and ids <= set(diagnosis.RULE_NAMES)
    doc = json.loads(next((run / "gpus").glob("resnet-finetune*.json")).read_text())
    assert "data.host_memory" in {f["rule"] for f in diagnosis.of_text(doc["_summary"]["diagnosis"])}
    # the GPU page keeps it in an attribute (for tests and tools), never in its text
    page = next((run / "gpu-pages").glob("resnet-finetune*.html")).read_text()
    assert 'data-rule="data.host_memory"' in page and "data.host_memory" not in visible(page)


# ---------------------------------------------------------------- the real exports and traces

def rendered_pages(out) -> dict:
    """A run folder's views for people, as :func:`views` reads them: report.html, the GPU pages and the records."""
    write_report(out, out / "report.html")
    pages = {"report.html": visible((out / "report.html").read_text(encoding="utf-8"))}
    pages.update({f"gpu-pages/{p.name}": visible(p.read_text(encoding="utf-8"))
                  for p in sorted((out / "gpu-pages").glob("*.html"))})
    pages.update({f"records/{p.name}": p.read_text(encoding="utf-8") for p in sorted((out / "records").glob("*.md"))})
    return pages


def test_real_views_show_no_ids(profiles, tmp_path_factory):
    """The README's run on the team's exports and the PyTorch traces (``--window auto``: the periodic rule, notes on
    the NVTX rule abstaining; ws128 traces that name no GPU model): every page in words."""
    out = tmp_path_factory.mktemp("words_real") / "out"
    run_cli("run", str(profiles), str(KINETO), "--out", str(out), "--config", "configs/profiles.yaml")
    pages = rendered_pages(out)
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False)
    # what the tryout saw is in the run: the rules and notes, the unnamed model (so the check reads them)
    assert {"periodic", "span"} <= set(fleet["window_rule"])
    assert fleet["window_note"].str.contains("nvtx: no iterations found").any()
    assert fleet["warnings"].str.contains("a gpu_model label for this report names it").any()
    ids, keys = as_code(rule_ids()), as_code(config_keys())
    leaks = {name: sorted(shown(ids | keys, text) | ids_shown(text)) for name, text in pages.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    page = " ".join(t for n, t in pages.items() if n.startswith("gpu-pages/"))
    assert window.RULE_NAMES["periodic"] in page and "the iterations the job marks itself (NVTX ranges): no " \
        "iterations found" in page
    assert "a label naming this report's GPU model prices it at that model's rate" in page


# ---------------------------------------------------------------- where a name may break (issue 45 point 8)

NOWRAP = '<span style="white-space: nowrap">{}</span>'


@pytest.mark.parametrize("text, want", [
    # the tryout's mid-word breaks: none inside a word, a number, an id's letters and digits, or after an option's dashes
    ("GPU-885383d1-1199", "GPU-885383d1-1199"),
    ("PyTorch", "PyTorch"),
    ("mean length 38.697 ms", "mean length 38.697 ms"),
    ("(what --trim takes)", "(what " + NOWRAP.format("--trim") + " takes)"),
    ("ncclDevKernel_AllGather_RING_LL", "ncclDevKernel_<wbr>AllGather_<wbr>RING_<wbr>LL"),
    # after each separator inside an identifier, once
    ("train_h100_2gpu_nccl.sqlite", "train_<wbr>h100_<wbr>2gpu_<wbr>nccl.<wbr>sqlite"),
    ("at::native::FillFunctor<long>", "at::<wbr>native::<wbr>FillFunctor<wbr>&lt;long&gt;"),
    ("Kernel<float>(int,x) on 2 GPU(s), x[3]", "Kernel<wbr>&lt;float&gt;<wbr>(int,<wbr>x) on 2 GPU(s), x[3]"),
    ("pid145/dev1", "pid145/<wbr>dev1"),
    # one word of 16 letters or more with no seam: at its camelCase humps, so a roster cell never widens the page
    ("cudaStreamSynchronize and cudaMalloc", "cuda<wbr>Stream<wbr>Synchronize and cudaMalloc"),
    ("triton_poi_fused_0d1d2de3", "triton_<wbr>poi_<wbr>fused_<wbr>0d<wbr>1d<wbr>2de<wbr>3"),
    ("rank0.pt.trace.json.gz", "rank0.<wbr>pt.<wbr>trace.<wbr>json.<wbr>gz"),
    # numbers, prose and leading separators: never
    ("1_000_000 GPUs, 1/6 s, 1,311.1 ms, v1.2.3", "1_000_000 GPUs, 1/6 s, 1,311.1 ms, v1.2.3"),
    ("e.g. the __init__ call", "e.g. the __init__ call"),
    ("gpu-idle run -o out --no-cache", "gpu-idle run " + NOWRAP.format("-o") + " out " + NOWRAP.format("--no-cache")),
    # escaped
    ("<b>_x&", "&lt;b&gt;_<wbr>x&amp;"),
])
def test_name_breaks_only_at_seams(text, want):
    got = str(name_breaks(text))
    assert got == want
    assert html.unescape(re.sub(r"<[^>]+>", "", got)) == text          # no character added or lost
