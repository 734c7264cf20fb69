"""How money, shares and times read in every view (the report, its Markdown, the printed table's totals, the GPU
pages): plain functions of numbers, with no page machinery, so the command line can use them without loading the
report's (docs/outputs.md)."""
from __future__ import annotations

import math

import re

from markupsafe import Markup, escape

from ..analysis.cost import HOW_TO_PRICE
from ..analysis.fixfirst import WHO_COUNT
from ..analysis.meter import FEW_PERIODS_PER_GPU, span_text
from ..analysis.window import RULE_NAMES as WINDOW_RULES
from ..analysis.window import rule_name as window_rule_name

#: What the headline says instead of a trusted dollar figure when no GPU is of a trusted tier.
NONE_TRUSTED = "none of the GPUs is on a trusted capture (tier medium or high)"

#: What every view says beside the exposed communication (docs/definitions.md#collective-wait): it and the wait
#: inside collectives are both time inside collective kernels, so they overlap and are never added.
COMM_OVERLAP = ("busy time, not in the idle cost; it overlaps the collective wait where both are measured (both are "
                "time inside collective kernels): never add the two")

#: What the report and the Markdown summary say of each busy measure inside collective kernels (the wait for the last
#: rank, the exposed communication; issue 45 point 3): time, a different measure from the idle cost ``{idle}``, never
#: part of it; their dollars, last and in words (:data:`PRICED_LIKE_IDLE`), never a figure beside the headline.
NOT_IDLE = "not idle, not in the {idle} idle cost"

#: The busy measure's dollars in words, after its time (``{money}``: the USD with its ``~`` and ``/month``).
PRICED_LIKE_IDLE = "Priced like idle at the same rates, this busy time comes to {money}, never added to the idle cost"


def comm_idle_text(c: dict | None) -> str:
    """Where communication is in the idle cost (:func:`~pipeline.report.summary.comm_idle`): the fix-first list's
    ``comm`` entries, e.g. ``communication's own idle is in it already: $6,062.13/month of gaps right after a collective
    kernel on 20 GPU(s) (the fix-first list's comm entry)``; ``""`` without comm idle."""
    if not c:
        return ""
    money = usd(c["usd"]) if c["usd"] != c["usd"] else f"{'~' if c['assumed'] else ''}{usd(c['usd'])}/month"
    return (f"communication's own idle is in it already: {money} of gaps right after a collective kernel on "
            f"{c['gpus']} GPU(s) (the fix-first list's comm entry)")


#: The minus sign of every negative figure a person reads (U+2212), never the hyphen (docs/outputs.md).
MINUS = "\u2212"


def usd(value, decimals: int = 2) -> str:
    """``$11,653.84``; negative as ``−$12.00``; a missing figure (NaN: an unpriced GPU) as ``unpriced``."""
    value = float(value)
    if value != value:
        return "unpriced"
    sign = MINUS if round(value, decimals) < 0 else ""
    return f"{sign}${abs(value):,.{decimals}f}"


def wins_back(usd_per_month, recoverable_usd, basis: str) -> str:
    """What a fix wins back, as every view says it (the fix-first list, the GPU pages, the medical records;
    docs/definitions.md#diagnosis): ``a fix wins back $584.00: <basis>`` when the evidence bounds the recoverable
    part (``recoverable_usd``, USD per month) below the idle's dollars ``usd_per_month`` (by more than half a
    cent); ``""`` when it does not, or either figure is missing (NaN: unpriced)."""
    u, r = float(usd_per_month), float(recoverable_usd)
    if u != u or r != r or not r < u - 0.005:
        return ""
    return f"a fix wins back {usd(r)}: {basis}"


#: What a fix-first entry's "wins back" figure says when no evidence bounds it (docs/definitions.md#diagnosis).
WHOLE_IDLE = "the whole idle"


def wins_back_basis(usd_per_month, recoverable_usd, basis: str) -> str:
    """The label under (HTML) or beside (Markdown) a fix-first entry's "wins back" figure: ``bounded by the evidence:
    <basis>`` when the evidence bounds it (:func:`wins_back`), else :data:`WHOLE_IDLE`."""
    return f"bounded by the evidence: {basis}" if wins_back(usd_per_month, recoverable_usd, basis) else WHOLE_IDLE


#: How a speed-up resting on a category's whole idle is labelled beside a bounded one (docs/definitions.md#fix-first).
ALL_IDLE = "if all of the category's idle went"


def speedup_text(speedup, recoverable_speedup=None) -> str:
    """A fix-first entry's speed-up as every view prints it (docs/definitions.md#fix-first): ``1.024×`` (3 decimals;
    ``∞×`` at 100 %), the speed-up if what a fix wins back went (``recoverable_speedup``), followed by
    ``(if all of the category's idle went: 3.884×)`` (:data:`ALL_IDLE`) when the evidence bounds it below the
    category's whole one (``speedup``); the whole one alone when it does not or there is no bounded one (NaN, None:
    an older list). ``-`` when there is no speed-up (NaN)."""
    whole = whole_speedup_text(speedup, recoverable_speedup)
    if speedup is None or speedup != speedup:
        return "-"
    return f"{_times(recoverable_speedup)} ({whole})" if whole else _times(speedup)


def _times(v) -> str:
    return "∞×" if v == math.inf else f"{float(v):.3f}×"


def whole_speedup_text(speedup, recoverable_speedup) -> str:
    """The labelled whole speed-up :func:`speedup_text` adds after a bounded one (``if all of the category's idle
    went: 3.884×``), ``""`` when the evidence bounds none (the HTML list prints it on a line of its own)."""
    if (speedup is None or speedup != speedup or recoverable_speedup is None
            or recoverable_speedup != recoverable_speedup
            or not round(float(recoverable_speedup), 3) < round(float(speedup), 3)):
        return ""
    return f"{ALL_IDLE}: {_times(speedup)}"


def recoverable_lines(parts: list[dict]) -> list[str]:
    """One GPU's recoverable parts (:func:`pipeline.analysis.fixfirst.gpu_recoverable`) as lines for people:
    ``data: a fix wins back $584.00: <basis>`` (:func:`wins_back`), one per part it bounds, in the parts' order,
    followed by ``; speed-up 1.024× (if all of the category's idle went: 3.884×)`` (:func:`speedup_text`) when the
    part gives its speed-ups."""
    lines = [(p, wins_back(p["idle_usd_per_month"], p["fix_wins_back_usd_per_month"], p["fix_wins_back_basis"])) for p in parts]
    return [f"{p['category']}: {text}" + (f"; speed-up {speedup_text(p['speedup'], p['recoverable_speedup'])}"
                                          if p.get("speedup") == p.get("speedup") and "speedup" in p else "")
            for p, text in lines if text]


def signed_usd(value) -> str:
    """``+$1,234.56`` / ``−$1,234.56`` / ``$0.00`` for changes."""
    value = float(value)
    if round(value, 2) == 0:
        return "$0.00"
    return ("+" if value > 0 else MINUS) + f"${abs(value):,.2f}"


def signed(value, decimals: int = 2, unit: str = "") -> str:
    """A change as a person reads it: ``+1.23 pts``, ``\u22121.23 pts`` (:data:`MINUS`), ``0.00 pts`` when it rounds
    to zero at ``decimals`` (no sign, never ``-0.00``); thousands separated (``+1,234.5``). ``value``: a float;
    NaN or None reads ``-`` (no figure)."""
    if value is None or float(value) != float(value):
        return "-"
    value = float(value)
    if round(value, decimals) == 0:
        return f"{0:.{decimals}f}{unit}"
    return ("+" if value > 0 else MINUS) + f"{abs(value):,.{decimals}f}{unit}"


def secs(ns) -> str:
    """Integer ns as seconds, ``30.873 s`` (``0.200 s``): how the pages show a start-up wait (docs/outputs.md)."""
    return f"{int(ns) / 1e9:,.3f} s"


def startup_cut_text(cut: int, gpus: int) -> str:
    """What every view says of the start-up of ``cut`` of ``gpus`` GPUs whose capture began mid-run
    (``startup_cut``, docs/definitions.md#job-kind): not measured, and why, never a start-up figure."""
    which = "its capture" if gpus == 1 else ("their captures" if cut == gpus else f"{cut} of {gpus} GPUs' captures")
    return (f"start-up not measured: {which} began mid-run (no memory allocated before the first kernel), so the "
            "time before the first kernel is not the job's start-up")


def pct(value, decimals: int = 2) -> str:
    """``23.21 %``."""
    return f"{float(value):,.{decimals}f} %"


def ms(ns) -> str:
    """Integer ns as ``1,234.567 ms``."""
    return f"{int(ns) / 1e6:,.3f} ms"


def trust_text(trust: dict) -> str:
    """One sentence cutting the headline by confidence tier (:func:`~pipeline.report.summary.trust_split`):
    the trusted dollars first, the toy and low ones apart; with no trusted GPU, :data:`NONE_TRUSTED` and no
    trusted dollar figure (docs/definitions.md#confidence-tiers). A part whose GPUs are all unpriced (NaN dollars)
    has $0.00 priced and says its GPUs are unpriced (never "unpriced rests on"); a part with some unpriced says how
    many of its GPUs its dollars leave out."""
    tiers = trust["tiers"]

    def some(n: int) -> str:   # a priced part's unpriced GPUs, left out of its dollars
        return f", {n} of them unpriced, not in it" if n else ""

    toy_low = f"tier toy ({tiers['toy']['gpus']}) or low ({tiers['low']['gpus']})"
    if trust["other_usd"] != trust["other_usd"]:   # every toy or low GPU unpriced: no dollars apart
        other = f"$0.00: its {trust['other_gpus']} GPU(s) of {toy_low} are unpriced"
    else:
        other = f"{usd(trust['other_usd'])}/month on {trust['other_gpus']} GPU(s) of {toy_low}{some(trust['other_unpriced'])}"
    if not trust["trusted_gpus"]:   # none trusted: say so, never "$0.00 on trusted captures"
        return f"{NONE_TRUSTED[0].upper()}{NONE_TRUSTED[1:]}: all of it, {other}."
    if trust["trusted_usd"] != trust["trusted_usd"]:   # every trusted GPU unpriced: $0.00 of the priced total
        trusted = (f"Of it, $0.00 rests on trusted captures; its {trust['trusted_gpus']} trusted GPU(s) (tier medium "
                   f"or high) are unpriced")
    else:
        trusted = (f"Of it, {usd(trust['trusted_usd'])}/month rests on trusted captures ({trust['trusted_gpus']} "
                   f"GPU(s) of tier medium or high{some(trust['trusted_unpriced'])})")
    return trusted + "; " + (f"apart, {other}." if trust["other_gpus"] else "none apart (no GPU of tier toy or low).")


def seconds(ns) -> str:
    """A window's length for people: ``0.21 s`` from 0.1 s on, else ``8.6 ms``."""
    ns = int(ns)
    return f"{ns / 1e9:,.2f} s" if ns >= 100_000_000 else f"{ns / 1e6:,.1f} ms"


#: The most distinct stable-iteration counts :func:`iterations_text` names one by one; more read as a range.
ITERATION_COUNTS_NAMED = 3


def iterations_text(basis: dict) -> str:
    """How many stable iterations the GPUs' windows hold, always with how many GPUs each (of
    :func:`~pipeline.report.summary.extrapolation_basis`, with a GPU whose window holds some):
    ``2 GPUs with 4 stable iterations, 4 with none (a window not made of iterations)``; each distinct count up to
    :data:`ITERATION_COUNTS_NAMED` of them (``1 GPU with 5 stable iterations, 2 with 7``), else their range
    (``4 GPUs with 5–9 stable iterations``)."""
    counts = basis.get("iteration_counts") or [[span_text(basis["iterations_min"], basis["iterations_max"]),
                                                basis["gpus"] - basis["no_iterations"]]]
    if len(counts) > ITERATION_COUNTS_NAMED:
        counts = [[span_text(counts[0][0], counts[-1][0]), sum(k for _, k in counts)]]
    parts = [f"{k} with {n}" for n, k in counts]
    first_gpus = counts[0][1]
    parts[0] = f"{first_gpus} GPU{'' if first_gpus == 1 else 's'} with {counts[0][0]} stable iterations"
    if basis["no_iterations"]:
        parts.append(f"{basis['no_iterations']} with none (a window not made of iterations)")
    return ", ".join(parts)


def basis_text(basis: dict | None, meter: dict | None) -> str:
    """What every month of the report is extrapolated from, in one sentence for its first screen
    (:func:`~pipeline.report.summary.extrapolation_basis`, :func:`~pipeline.report.summary.meter_summary`;
    docs/outputs.md#reports-for-people): the GPUs, their windows (each one's range and the sum), their stable
    iterations, and the sampled meter's periods per GPU with whether they are enough for a reading. ``""`` without
    an analysed GPU."""

    if not basis:
        return ""
    text = (f"Every month here extrapolates short captures: {basis['gpus']} GPU(s), windows of "
            f"{seconds_span(basis['window_min_ns'], basis['window_max_ns'])} each ({seconds(basis['window_ns'])} in all)")
    if basis.get("capture_gpus"):
        text += (f" cut from captures of {seconds_span(basis['capture_min_ns'], basis['capture_max_ns'])} each "
                 f"({seconds(basis['capture_ns'])} in all, first kernel to last"
                 + (f", on the {basis['capture_gpus']} GPU(s) whose capture is known" if
                    basis["capture_gpus"] != basis["gpus"] else "") + ")")
    if basis["iterations_min"] is not None:
        text += ", " + iterations_text(basis)
    else:
        text += ", no window made of stable iterations"
    if basis["periods_min"] is not None:
        text += (f"; the sampled meter: {span_text(basis['periods_min'], basis['periods_max'])} sample period(s) "
                 "per GPU")
        if meter and not meter["gpus"]:
            text += f", under the {FEW_PERIODS_PER_GPU} a reading needs: no meter reading shown"
        elif meter and meter["short"]:
            text += (f", the reading over the {meter['gpus']} GPU(s) with at least {FEW_PERIODS_PER_GPU} "
                     f"({len(meter['short'])} with fewer left out)")
    return text + "." + left_out_idle_text(basis)


def seconds_span(lo: int, hi: int) -> str:
    """Two lengths (int ns) as one range for people: ``0.21–0.39 s``, ``8.6 ms–1.23 s``, ``0.21 s`` when equal."""
    if lo == hi:
        return seconds(lo)
    a, b = seconds(lo), seconds(hi)
    return f"{a.split(' ')[0]}–{b}" if a.split(" ")[1] == b.split(" ")[1] else f"{a}–{b}"


def left_out_idle_text(basis: dict) -> str:
    """How much of the captures' idle the windows leave out, never priced (:func:`basis_text`'s last sentence, from
    :func:`~pipeline.report.summary.extrapolation_basis`), e.g. `` 69.79 % of the captures' idle (2.77 of 3.97 s)
    lies outside the windows and is not priced.``; ``""`` when the captures hold no idle (or are not known)."""
    whole, left = basis.get("capture_idle_ns"), basis.get("left_out_idle_ns")
    if not whole:
        return ""
    return (f" {pct(100.0 * left / whole)} of the captures' idle ({seconds(left)} of {seconds(whole)}) lies outside "
            "the windows and is not priced.")


#: How the pages (the report, the GPU pages) say to price an unpriced GPU: in words, no configuration key (the
#: command line's hints and docs/definitions.md#cost give the keys: :data:`pipeline.analysis.cost.HOW_TO_PRICE`).
PRICE_ON_PAGES = ("to price them, name the rate-card model of each (a label, or a new rate-card entry: "
                  "docs/definitions.md#cost says how)")

#: A configuration key in a text of the analysis: ``(window.training_ranges)``, `` `cost.default_model` ``,
#: ``cost.unlisted: default`` (the sections of the config, :mod:`pipeline.config`).
_CONFIG_KEY = (r"`?(?:analysis|confidence|meter|collective|diagnosis|categories|window|cost|labels|dask|export|cache|"
               r"storage|sweep)\.[a-z_]+(?:: [a-z]+)?`?")


def for_pages(text) -> str:
    """A text of the analysis as the pages show it to people who do not edit the configuration (issue 45): the
    engineers' pricing hint (:data:`pipeline.analysis.cost.HOW_TO_PRICE`) as :data:`PRICE_ON_PAGES`, a bracketed
    configuration key after a piece of evidence (``NVTX range 'x' (window.training_ranges)``) left out, and any
    other key in it said as ``a setting``. The medical records use it too (their kind's evidence, their pricing hint);
    the CSV files and the command line keep the keys."""


    text = str(text).replace(HOW_TO_PRICE, PRICE_ON_PAGES)
    text = re.sub(r"\s*\(" + _CONFIG_KEY + r"\)", "", text)
    text = re.sub(_CONFIG_KEY, "a setting", text)
    for said, words in _IN_WORDS:
        text = re.sub(said, words, text)
    # a window rule's id opening a clause of a window note (``nvtx: only 1 usable iteration(s) ...``): its words
    return re.sub(r"(^|; )(" + "|".join(WINDOW_RULES) + r"): ", lambda m: f"{m.group(1)}{window_rule_name(m.group(2))}: ",
                  text)


#: Labels and command-line options as the analysis' texts name them, and how the pages say them (:func:`for_pages`).
_IN_WORDS = (
    (r"a gpu_model label for this report names it", "a label naming this report's GPU model prices it at that model's rate"),
    (r"\b(?:cluster|job|node|rank|gpu_model|kind) label", "label"),
    (r"\bgpu_model\b", "GPU model"),
    (r"(?:\b(?:a|the) )?`?--trim`?(?: window)?", "the window chosen by hand"),
)


def keep_words(text):
    """``text`` as HTML (escaped) whose words holding a hyphen or a slash (``A100-SXM4-80GB``, ``2026-12-01``,
    ``pid145/dev1``) are each one ``<span class="w">``, which the pages never break (``white-space: nowrap``): a
    name or a date is never cut across two lines (docs/outputs.md#reports-for-people)."""


    return Markup(re.sub(r"\S*[-/\u2013]\S*", lambda m: f'<span class="w">{m.group(0)}</span>', str(escape(str(text)))))


def remedy_summary(part: str) -> str:
    """One part of a fix-first remedy (:func:`pipeline.analysis.fixfirst.remedy_parts`) as the report's cell shows it
    closed: a part for several GPUs by their count (``17 of the 20 GPUs with cpu idle: <remedy>``; the names are in
    the opened list and fix_first.csv), a part for one GPU by its name (``A100 #2 pid84669/dev0 (1 of the 24 GPUs
    with cpu idle): <remedy>``), any other text as it is."""
    m = re.fullmatch(r"(.*?) " + WHO_COUNT + r": (.*)", str(part), re.S)
    if not m or m.group(2) == "1":
        return str(part)
    return f"{m.group(2)} of the {m.group(3)} GPUs with {m.group(4)} idle: {m.group(5)}"


#: The seams of a name (a job, a report's file, a kernel, an API call) where :func:`name_breaks` lets it break: after
#: a run of separators ``_ / . :`` (``at::``, ``rank0_``, ``.sqlite``) between a letter or digit (or ``) > ]``) and a
#: letter or digit, and at a signature's brackets (:data:`_OPENERS`). A hyphen needs no mark (browsers break after it).
_SEPARATORS = re.compile(r"[_/.:]+")

#: The seams of a C++ or Python signature (``Kernel<float>(int, at::Tensor)``): before ``( < [`` that follow a
#: letter, a digit or a closing bracket and open at least three characters (never ``GPU(s)``, ``x[3]``), after ``) > ] , ; =`` that a letter, a digit or an opening bracket follows.
_OPENERS = re.compile(r"(?<=[A-Za-z0-9)>\]])[(<\[](?=[^)>\]]{3})")
_CLOSERS = re.compile(r"[)>\],;=](?=[A-Za-z(<\[])")

#: A Triton kernel's argument specialisation suffix after an underscore (``_0d1d2de3``: three or more digit runs each
#: marked ``d`` or ``e``), which may break after each mark; a hex id such as ``885383d1`` is none.
_TRITON = re.compile(r"(?<=_)(?:\d+(?:de|[de])){3,}\d*")

#: An identifier of :data:`LONG_WORD` or more letters and digits with no other seam (``cudaStreamWaitEvent``,
#: ``KJTAllToAllTensorsAwaitable``): the one kind that may break at a camelCase boundary, so that a roster's cell
#: never widens its table past the page; a shorter word (``PyTorch``, ``AllGather``) never does.
LONG_WORD = 16
_LONG_WORD = re.compile(r"(?<![A-Za-z0-9])[A-Za-z0-9]{%d,}(?![A-Za-z0-9])" % LONG_WORD)

#: A command-line option in a text (``--trim``, ``-o``): kept whole, never broken after its dashes.
_OPTION = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


def _seams(text: str) -> list[int]:
    """Where :func:`name_breaks` marks a break in ``text``: after each separator run (:data:`_SEPARATORS`) inside an
    identifier; never inside a number (digits on both sides, those before it a number of their own: ``38.697``,
    ``1_000``, ``1/6``; ``h100_2gpu`` may break), never inside a word
    (no break at a camelCase or letter-digit boundary: ``PyTorch``, ``885383d1``; but an identifier of
    :data:`LONG_WORD` letters and digits or more may break at its humps), never in a prose abbreviation
    (a dot followed by fewer than two letters or digits: ``e.g.``)."""
    out = [m.start() for m in _OPENERS.finditer(text)] + [m.end() for m in _CLOSERS.finditer(text)]
    for m in _LONG_WORD.finditer(text):   # a camelCase identifier too long for a narrow cell: at its humps
        out += [m.start() + h.start() for h in re.finditer(r"(?<=[a-z])(?=[A-Z])", m.group())]
    for m in _TRITON.finditer(text):   # a Triton kernel's argument suffix: after each of its d / e marks
        out += [m.start() + d.end() for d in re.finditer(r"\d+(?:de|[de])", m.group()) if m.start() + d.end() < m.end()]
    for m in _SEPARATORS.finditer(text):
        before, after = text[m.start() - 1:m.start()], text[m.end():m.end() + 2]
        if not (re.match(r"[A-Za-z0-9)>\]]", before) and re.match(r"[A-Za-z0-9]", after)):
            continue
        if after[0].isdigit() and re.search(r"(?<![A-Za-z0-9])[0-9]+$", text[:m.start()]):
            continue                                               # digits on both sides, the first not in a name
        if m.group() == "." and not re.fullmatch(r"[A-Za-z0-9]{2}", after):
            continue
        out.append(m.end())
    return sorted(set(out))


def name_breaks(text):
    """A name (a job, a cluster, a report's file, a kernel, an API call) or a text that holds them, as HTML
    (escaped), that may break at its seams (:func:`_seams`, each a ``<wbr>``) and nowhere else but its spaces and
    hyphens: ``ncclDevKernel_AllGather_RING_LL`` may read ``ncclDevKernel_`` / ``AllGather_RING_LL``, never
    ``ncclDevKernel_All`` / ``Gather_RING_LL``; ``at::native::FillFunctor<long>`` may read ``at::native::`` /
    ``FillFunctor<long>``; a number (``38.697``), a word (``PyTorch``) and an option (``--trim``, kept in one
    ``white-space: nowrap`` span) never break (docs/outputs.md#reports-for-people)."""
    text = str(text)
    options = [m.span() for m in _OPTION.finditer(text)]
    seams = {c for c in _seams(text) if c < len(text) and not any(a < c < b for a, b in options)}
    cuts = sorted({0, len(text), *(a for span in options for a in span), *seams})
    parts = []
    for a, b in zip(cuts, cuts[1:]):
        piece = str(escape(text[a:b]))
        parts.append(f'<span style="white-space: nowrap">{piece}</span>' if (a, b) in options else piece)
        if b in seams:
            parts.append("<wbr>")
    return Markup("".join(parts))
