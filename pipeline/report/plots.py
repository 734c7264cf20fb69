"""The report's plots as inline SVG strings (matplotlib, no pyplot, no display, no JS).

Each function takes plain values from :mod:`pipeline.report.summary` and returns
an ``<svg>…</svg>`` string that goes straight into the HTML. Text stays text
(``svg.fonttype: none``) and ids are salted per plot, so several plots can sit
in one page, and the same input gives the same bytes.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import re
import zlib

import matplotlib
import numpy as np
from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.patches import Patch, PathPatch
from matplotlib.path import Path
from matplotlib.text import Text

from .. import categories
from ..checksums import EntryCheckFailed, note, read_checked, read_sums, seal_file, sidecar_of
from ..code_keys import module_digest
from ..io import write_text
from ..analysis.window import rule_name
from ..model import CATEGORIES, CAVEATS
from ..text import printable

#: One colour per category, the same in every plot and in the HTML legend (the registry's,
#: :attr:`pipeline.categories.Category.colour`); the causes that are not the application's in greys.
CATEGORY_COLOURS = categories.Field("colour")
SLIVER_COLOUR = "#c7c7c7"
KERNEL_COLOUR = "#2ca02c"
STRAGGLER_COLOUR = "#d62728"
#: Every plot is this wide (inches), so text has one size across the page once CSS fits it to the width.
WIDTH = 13


@functools.lru_cache(maxsize=None)
def source_digest(module_file: str, library_version: str) -> str:
    """SHA-256 of a module's meaning (:func:`pipeline.code_keys.module_digest`: docstrings and comments
    aside) and the version of the library rendering with it: what a cached rendering (:func:`cached`)
    depends on besides its arguments. Read once per process."""

    return hashlib.sha256((module_digest(module_file) + library_version).encode()).hexdigest()


def _source_digest() -> str:
    """:func:`source_digest` of this module, the category registry (the colours) and matplotlib: what else a
    plot's bytes depend on."""

    return source_digest(__file__, matplotlib.__version__ + module_digest(categories.__file__))


def cached(cache_dir: str | None, plot, *args, code: str | None = None, suffix: str = ".svg",
           inner: bool = False) -> str:
    """``plot(*args)`` (an SVG string), kept in ``cache_dir/<digest><suffix>`` and read from
    there when the same plot function was called with the same (JSON-serialisable) arguments
    by the same code (``code``: a digest of what else the result depends on; default this
    module's source and the matplotlib version); ``cache_dir=None`` always draws. Plots are
    deterministic, so a cached SVG is the same bytes as a new drawing. Cache files are
    written atomically, each with the SHA-256 of its bytes beside it (``<file>.sums.json``,
    :mod:`pipeline.checksums`), and touched when used (their mtime is the last use); a file
    whose bytes no longer match is drawn again (one line on stderr says so), never shown; an
    unreadable or unwritable cache only means drawing again. Any other deterministic text
    renderer can be kept the same way (the report's medical-record HTML and the GPU pages are). ``inner``: ``plot``
    keeps plots of its own in the cache too and is given its folder (keyword ``plot_cache``), which is not part of
    the key: where the cache lies does not change what is drawn, and a moved cache is still found.
    """
    given = {"plot_cache": cache_dir} if inner else {}
    if cache_dir is None:
        return plot(*args, **given)

    key = json.dumps([plot.__name__, args, code or _source_digest()], sort_keys=True, default=str)
    name = hashlib.sha256(key.encode()).hexdigest() + suffix
    svg = kept(cache_dir, name)
    if svg is None:
        svg = plot(*args, **given)
        keep(cache_dir, name, svg)
    return svg


def kept(cache_dir: str, name: str) -> str | None:
    """The text of the cache entry ``cache_dir/name`` (:func:`cached`), checked against its sidecar and touched (its
    mtime is its last use); None when there is none, or it cannot be read, or it fails its check (one line on
    stderr says so: it is made again, never used)."""
    path = os.path.join(cache_dir, name)
    try:
        text = read_checked(cache_dir, name, read_sums(sidecar_of(path))).decode("utf-8")
        for used in (path, sidecar_of(path)):
            os.utime(used)  # last use, for whoever prunes the cache
        return text
    except EntryCheckFailed as exc:
        if os.path.exists(path):
            note(f"plot cache entry {path} failed its check: {exc}; drawn again")
    except (OSError, UnicodeDecodeError):
        pass
    return None


def keep(cache_dir: str, name: str, text: str) -> None:
    """Write the cache entry ``cache_dir/name`` (:func:`cached`) atomically with its sidecar; an unwritable cache
    only means making it again next time."""
    path = os.path.join(cache_dir, name)
    try:
        write_text(path, text)
        seal_file(path, hashlib.sha256(text.encode("utf-8")).hexdigest())
    except OSError:
        pass


def _plain_text(plot):
    """Draw ``plot`` with matplotlib's mathtext off: labels from profiles (job names, titles) are
    shown as written, a ``$...$`` in them is no formula (and cannot fail the report)."""
    @functools.wraps(plot)
    def drawn(*args, **kwargs):
        with rc_context({"text.parse_math": False}):
            return plot(*args, **kwargs)
    return drawn


def _printable_texts(fig: Figure) -> None:
    """Make every text of ``fig`` (titles, labels, annotations, legends, tick labels: job and file
    names from profiles) :func:`~pipeline.text.printable` before it is drawn, so no raw control or
    bidirectional character reaches the SVG, nor the terminal in matplotlib's "Glyph 27 missing" warnings."""

    def printable_ticks(format_ticks):
        return lambda values: [printable(label) for label in format_ticks(values)]

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):   # tick labels are made at draw time, by the axis' formatters
            for formatter in {id(f): f for f in (axis.get_major_formatter(), axis.get_minor_formatter())}.values():
                formatter.format_ticks = printable_ticks(formatter.format_ticks)
    for text in fig.findobj(Text):
        if text.get_text():
            text.set_text(printable(text.get_text()))


def _svg(fig: Figure, name: str, tight: bool = True) -> str:
    """``fig`` as an inline ``<svg>`` element (no XML prolog), ids salted with ``name``; ``tight``:
    cropped to what is drawn (one more drawing pass), else the figure as laid out. Its texts are made
    printable first (:func:`_printable_texts`)."""
    _printable_texts(fig)
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
        fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None, metadata={"Date": None})
    text = buf.getvalue()
    start = text.find("<svg")
    svg = text[start:]
    # Responsive: keep the viewBox, let CSS size it.
    svg = re.sub(r'^<svg([^>]*?) width="[^"]*" height="[^"]*"', r'<svg\1', svg, count=1)
    return svg.replace("<svg", f'<svg class="plot" role="img" aria-label="{name}"', 1)


@_plain_text
def _empty(name: str, message: str) -> str:
    fig = Figure(figsize=(WIDTH, 0.8), layout="constrained")
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=11, color="#666")
    return _svg(fig, name)


@_plain_text
def categories_by_job(rows: list[dict]) -> str:
    """Stacked horizontal bars: per job, each category's share of the window (%), then slivers."""
    if not rows:
        return _empty("category-breakdown", "no analysed GPU")
    fig = Figure(figsize=(WIDTH, 0.45 * len(rows) + 1.3), layout="constrained")
    ax = fig.add_subplot()
    jobs = [r["job"] for r in rows]
    y = np.arange(len(rows))[::-1]
    left = np.zeros(len(rows))
    for cat in CATEGORIES:
        vals = np.array([r["shares"][cat] for r in rows])
        if vals.sum() <= 0:
            continue
        ax.barh(y, vals, left=left, color=CATEGORY_COLOURS[cat], label=cat, height=0.6, edgecolor="white",
                linewidth=0.5)
        left += vals
    slivers = np.array([r["slivers"] for r in rows])
    if slivers.sum() > 0:
        ax.barh(y, slivers, left=left, color=SLIVER_COLOUR, label="sub-threshold slivers", height=0.6,
                hatch="//", edgecolor="white", linewidth=0.5)
        left += slivers
    for yi, r, end in zip(y, rows, left):
        ax.text(end + 0.4, yi, f"{r['idle_pct']:.1f} % idle", va="center", fontsize=9)
    ax.set_yticks(y, jobs)
    ax.set_xlabel("share of the job's analysis windows (%): category time / window time, both summed over its GPUs")
    ax.set_xlim(0, max(float(left.max()) * 1.18, 1.0))
    fig.legend(loc="outside lower center", ncol=8, frameon=False, fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "category-breakdown")


#: The "Fix first, in sum" chart's axis: what its bars plot (a category's idle, never what a fix wins back).
FIX_SUM_AXIS = "idle USD per month by category and tier (fleet total: what it costs, not what a fix saves)"


@_plain_text
def fix_first_usd(entries: list[dict]) -> str:
    """One bar per fix-first entry: its category's idle in USD per month over the fleet (what it costs, not what a fix
    saves; :func:`pipeline.report.summary.fix_first` entries: ``category``, ``idle_usd_per_month``, ``tier`` its
    confidence tier, if known), in the list's order, each labelled ``<category> (<tier>)`` (a category in two tier groups
    has two bars) and with its dollars."""
    if not entries:
        return _empty("fix-first-usd", "nothing to fix: no application idle in the analysed GPUs")
    fig = Figure(figsize=(WIDTH, 0.45 * len(entries) + 1.1), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(entries))[::-1]
    vals = [float(e["idle_usd_per_month"]) for e in entries]
    ax.barh(y, vals, color=[CATEGORY_COLOURS[e["category"]] for e in entries], height=0.6)
    for yi, v in zip(y, vals):
        ax.text(v, yi, f"  ${v:,.2f}", va="center", fontsize=9)
    # the category and the entry's tier (a category may have an entry in two tier groups); no tier: the category
    ax.set_yticks(y, [e["category"] + (f" ({e['tier']})" if e.get("tier") else "") for e in entries])
    ax.set_xlabel(FIX_SUM_AXIS)
    ax.set_xlim(0, max(max(vals) * 1.2, 1.0))
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "fix-first-usd")


@_plain_text
def spread_by_job(rows: list[dict]) -> str:
    """Per job: box of the GPUs' idle %, one dot per GPU, stragglers as red diamonds named."""
    if not rows:
        return _empty("idle-spread", "no analysed GPU")
    fig = Figure(figsize=(WIDTH, 0.55 * len(rows) + 1.0), layout="constrained")
    ax = fig.add_subplot()
    y = np.arange(len(rows))[::-1]
    data = [[g["idle_pct"] for g in r["gpus"]] for r in rows]
    ax.boxplot(data, positions=y, orientation="horizontal", widths=0.5, whis=(0, 100), showfliers=False,
               patch_artist=True, boxprops={"facecolor": "#dbe9f6", "edgecolor": "#4a78a8"},
               medianprops={"color": "#4a78a8"}, whiskerprops={"color": "#4a78a8"}, capprops={"color": "#4a78a8"})
    for yi, r in zip(y, rows):
        n = len(r["gpus"])
        # Deterministic jitter: the same GPU lands in the same place every night.
        jitter = [((zlib.crc32(g["gpu_key"].encode()) % 1000) / 1000.0 - 0.5) * 0.36 for g in r["gpus"]]
        xs = [g["idle_pct"] for g in r["gpus"]]
        normal = [i for i in range(n) if not r["gpus"][i]["straggler"]]
        ax.scatter([xs[i] for i in normal], [yi + jitter[i] for i in normal], s=22, color="#333", alpha=0.75,
                   zorder=3, linewidths=0)
        for i in range(n):
            if r["gpus"][i]["straggler"]:
                ax.scatter([xs[i]], [yi + jitter[i]], s=80, marker="D", color=STRAGGLER_COLOUR, zorder=4,
                           edgecolors="white")
                ax.annotate(f"straggler {r['gpus'][i]['gpu_key'][:16]}", (xs[i], yi + jitter[i]),
                            xytext=(8, 6), textcoords="offset points", fontsize=8, color=STRAGGLER_COLOUR)
    ax.set_yticks(y, [f"{r['job']} ({len(r['gpus'])} GPU)" for r in rows])
    ax.set_xlabel("device-level idle per GPU (% of its window)")
    hi = max(max(d) for d in data if d)
    ax.set_xlim(0, max(min(hi * 1.25, 105.0), 5.0))
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="x", alpha=0.3)
    return _svg(fig, "idle-spread")


@_plain_text
def gpu_timeline(doc: dict | None, title: str) -> str:
    """One GPU's window: NVTX iterations, kernel busy runs, device gaps coloured by category (ms from W start)."""
    tl = (doc or {}).get("timeline") or {}
    if not tl.get("window"):
        return _empty("gpu-timeline", "no timeline for this GPU in the run folder")
    w0, w1 = tl["window"]
    ms = lambda ns: (ns - w0) / 1e6  # noqa: E731
    fig = Figure(figsize=(WIDTH, 2.9), layout="constrained")
    ax = fig.add_subplot()
    its = tl.get("iterations") or []
    for i, (a, b) in enumerate(its):
        ax.broken_barh([(ms(a), ms(b) - ms(a))], (2.15, 0.7), facecolors="#e8e8e8" if i % 2 else "#cfd8e3",
                       edgecolor="white", linewidth=0.8)
        if (ms(b) - ms(a)) > (ms(w1) - ms(w0)) / 40:
            ax.text((ms(a) + ms(b)) / 2, 2.5, f"it {i + 1}", ha="center", va="center", fontsize=7, color="#333")
    busy = tl.get("busy") or []
    # A thin edge keeps sub-pixel kernel runs visible on a long window.
    ax.broken_barh([(ms(a), ms(b) - ms(a)) for a, b in busy], (1.15, 0.7), facecolors=KERNEL_COLOUR,
                   edgecolor=KERNEL_COLOUR, linewidth=0.4)
    if not its:
        rule = rule_name(((doc or {}).get("_summary") or {}).get("window_rule"))
        ax.text(ms(w1) / 2, 2.5, f"no iterations in the window (window: {rule})",
                ha="center", va="center", fontsize=8, color="#666")
    seen = []
    gaps = tl.get("gaps") or []
    by_cat = {}
    for a, b, cat in gaps:
        by_cat.setdefault(cat, []).append((ms(a), ms(b) - ms(a)))
    for cat in (*CATEGORIES, *CAVEATS):
        if cat in by_cat:
            ax.broken_barh(by_cat[cat], (0.15, 0.7), facecolors=CATEGORY_COLOURS[cat])
            seen.append(cat)
    ax.set_yticks([0.5, 1.5, 2.5], ["gaps", "kernels", "iterations"])
    ax.set_xlim(0, ms(w1))
    ax.set_ylim(0, 3)
    ax.set_xlabel("ms from the start of the analysis window")
    ax.set_title(title, fontsize=10, loc="left")
    handles = [Patch(color=KERNEL_COLOUR, label="kernels")] + [
        Patch(color=CATEGORY_COLOURS[c], label=f"{c} gap") for c in seen]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False, fontsize=9)
    ax.spines[["top", "right"]].set_visible(False)
    return _svg(fig, "gpu-timeline")


@_plain_text
def fleet_trend(nights: list[dict]) -> str:
    """Fleet idle USD/month per night (one point per night of the history)."""
    if not nights:
        return _empty("fleet-trend", "no history")
    fig = Figure(figsize=(WIDTH, 2.6), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(nights))
    usd = [n["usd"] for n in nights]
    ax.plot(x, usd, marker="o", color="#1f4e79", linewidth=2)
    ax.fill_between(x, usd, color="#1f4e79", alpha=0.08)
    for xi, n in zip(x, nights):
        ax.annotate(f"${n['usd']:,.0f}", (xi, n["usd"]), xytext=(0, 8), textcoords="offset points",
                    ha="center", fontsize=8)
    step = max(1, len(nights) // 14)
    ax.set_xticks(x[::step], [n["date"] for n in nights][::step], fontsize=8)
    ax.set_ylabel("fleet idle $/month")
    ax.set_ylim(0, max(usd) * 1.25 if max(usd) > 0 else 1)
    ax.set_xlim(-0.5, len(nights) - 0.5)
    ax.yaxis.set_major_formatter(lambda v, _: f"${v:,.0f}")
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", alpha=0.3)
    return _svg(fig, "fleet-trend")


#: Colours of the GPU page's copy lanes, by direction; other directions are grey.
COPY_COLOURS = {"HtoD": "#17becf", "DtoH": "#aec7e8", "DtoD": "#98df8a", "PtoP": "#c49c94", "memset": "#dbdb8d"}
OTHER_COPY_COLOUR = "#b0b0b0"
#: The GPU page's timeline: height of a lane, width of a lane label's character at 8 pt (DejaVu Sans'
#: widest common glyphs, so a label is never cut), legend columns (inches, inches, count).
LANE_INCH = 0.34
LANE_LABEL_INCH = 0.075
LEGEND_COLUMNS = 8
#: Kept and excluded iterations on the GPU page.
KEPT_COLOURS = ("#cfd8e3", "#e8e8e8")
EXCLUDED_COLOUR = "#f4c7c3"


def _spans_path(spans, y: float, height: float) -> Path:
    """One compound path of rectangles ``[x0, x1]`` × ``[y, y + height]``: a lane of any number of
    bars is one SVG element (about 60 bytes a bar), not one element per bar."""
    verts, codes = [], []
    for x0, x1 in spans:
        verts += [(x0, y), (x1, y), (x1, y + height), (x0, y + height), (x0, y)]
        codes += [Path.MOVETO, Path.LINETO, Path.LINETO, Path.LINETO, Path.CLOSEPOLY]
    return Path(verts, codes)


def _bars(ax, spans, y: float, height: float, colour: str, **kw) -> None:
    """Draw ``spans`` (``[[x0, x1], ...]`` in axis units) as bars of one colour on one row."""
    if spans:
        # add_artist, not add_patch: the limits are set by the caller, so the bars need not update
        # the data limits (a third of the drawing's time on a page with many lanes).
        ax.add_artist(PathPatch(_spans_path(spans, y, height), facecolor=colour, edgecolor="none", **kw))


def overlapping(marks) -> bool:
    """Whether any two iterations ``[[index, x0, x1, reason], ...]`` overlap on the GPU timeline (a
    pipelined job: iteration N+1's kernels start before N's last one ends)."""
    spans = sorted((m[1], m[2]) for m in marks)
    return any(b0 < a1 for (_, a1), (b0, _) in zip(spans, spans[1:]))


def _iteration_rows(marks, bottom: float) -> list[tuple[list, float, float]]:
    """The iterations' row of the GPU page as ``[(marks, y, height), ...]``: one band of the whole row;
    when iterations overlap, two half-height bands, alternate iterations (in start order) in each, so
    no iteration is drawn over another."""
    if not overlapping(marks):
        return [(list(marks), bottom + 0.15, 0.7)]
    ordered = sorted(marks, key=lambda m: (m[1], m[0]))
    return [(ordered[0::2], bottom + 0.5, 0.35), (ordered[1::2], bottom + 0.12, 0.35)]


@_plain_text
def gpu_lanes(view: dict) -> str:
    """The GPU page's timeline: one row per lane, x in seconds from the capture start.

    ``view`` (plain values, :func:`pipeline.report.gpu_page.timeline_view`; times already in seconds
    from the capture start, spans merged to the drawing's resolution): ``context`` and ``window``
    ``[x0, x1]``; ``marks`` ``[[index, x0, x1, reason], ...]`` (iterations, ``reason`` ``""`` when
    kept); ``gaps`` ``{category: [[x0, x1], ...]}`` (device-level gaps); ``numbers`` ``[[x, n], ...]``
    (the longest device gaps, numbered as in the page's table; one band per category present, in
    category order); ``lanes`` ``[{label, kind, direction,
    spans, gaps: {category: spans}}]`` (kernels of a stream, or copies of a direction, with the
    stream's longest gaps by category); ``title`` (none or empty: no title, the page gives it); ``xlabel`` what
    the seconds count from (default:
    the Nsight Systems timeline's zero).
    """
    lanes = view["lanes"]
    rows = ["iterations", "device gaps"] + [lane["label"] for lane in lanes]
    n = len(rows)
    # the legend's entries, known before drawing: the figure's margins depend on how many rows it has
    bands = [cat for cat in (*CATEGORIES, *CAVEATS) if view["gaps"].get(cat)]  # one band each, category order
    seen, directions = list(bands), []
    for lane in lanes:
        if lane["kind"] == "copy" and lane["direction"] not in (d for d, _ in directions):
            directions.append((lane["direction"], COPY_COLOURS.get(lane["direction"], OTHER_COPY_COLOUR)))
        seen += [cat for cat in lane.get("gaps", {}) if cat not in seen]
    handles = [Patch(color=KERNEL_COLOUR, label="kernels")] + [
        Patch(color=colour, label=direction) for direction, colour in directions] + [
        Patch(color=CATEGORY_COLOURS[c], label=f"{c} gap") for c in seen if c in CATEGORY_COLOURS] + [
        Patch(facecolor=EXCLUDED_COLOUR, hatch="//", label="excluded iteration")]
    # A fixed layout (margins from the labels' lengths; no layout engine, no tight crop): the figure
    # is drawn once, not three times, and a page per GPU of the whole fleet is drawn every night.
    left = LANE_LABEL_INCH * max(len(r) for r in rows) + 0.25
    bottom = 0.75 + 0.24 * -(-len(handles) // LEGEND_COLUMNS)
    above = 0.4 if view.get("title") else 0.15  # the title, if any
    height = LANE_INCH * n + bottom + above
    fig = Figure(figsize=(WIDTH, height))
    fig.subplots_adjust(left=min(left, WIDTH / 2) / WIDTH, right=1 - 0.35 / WIDTH, bottom=bottom / height,
                        top=1 - above / height)
    ax = fig.add_subplot()
    (c0, c1), (w0, w1) = view["context"], view["window"]
    top = lambda i: n - 1 - i  # noqa: E731 - row i's bottom, first row on top
    for x0, x1 in ((c0, w0), (w1, c1)):
        if x1 > x0:
            ax.axvspan(x0, x1, color="#f0f0f0", zorder=0)
    for lane, y, h in _iteration_rows(view["marks"], top(0)):
        kept = [m for m in lane if not m[3]]
        for parity in (0, 1):
            _bars(ax, [[m[1], m[2]] for j, m in enumerate(kept) if j % 2 == parity], y, h, KEPT_COLOURS[parity])
        _bars(ax, [[m[1], m[2]] for m in lane if m[3]], y, h, EXCLUDED_COLOUR, hatch="//")
        for index, x0, x1, reason in lane:
            if (x1 - x0) > (c1 - c0) / 25:
                ax.text((x0 + x1) / 2, y + h / 2, f"#{index}" + (f" {reason.split(' ')[0]}" if reason else ""),
                        ha="center", va="center", fontsize=7, color="#333", clip_on=True)
    # one band per category present, so a category is seen wherever it is, however dense the gaps
    band = 0.7 / max(len(bands), 1)
    for j, cat in enumerate(bands):
        _bars(ax, view["gaps"][cat], top(1) + 0.85 - (j + 1) * band, band, CATEGORY_COLOURS[cat])
    for x, number in view["numbers"]:
        ax.text(x, top(1) + 0.5, str(number), ha="center", va="center", fontsize=7, fontweight="bold", color="#111",
                clip_on=True)
    for i, lane in enumerate(lanes, 2):
        colour = COPY_COLOURS.get(lane["direction"], OTHER_COPY_COLOUR) if lane["kind"] == "copy" else KERNEL_COLOUR
        for cat, spans in lane.get("gaps", {}).items():
            _bars(ax, spans, top(i) + 0.05, 0.2, CATEGORY_COLOURS.get(cat, SLIVER_COLOUR))
        _bars(ax, lane["spans"], top(i) + 0.25, 0.6, colour)
    for x in (w0, w1):
        ax.axvline(x, color="#1f4e79", linestyle="--", linewidth=1)
    ax.set_yticks([top(i) + 0.5 for i in range(n)], rows, fontsize=8)
    ax.set_xlim(c0, c1)
    ax.set_ylim(0, n + 0.2)
    ax.ticklabel_format(axis="x", useOffset=False, style="plain")
    ax.set_xlabel(view.get("xlabel", "seconds from the capture start (as the Nsight Systems timeline shows them)")
                  + "; dashed lines: the analysis window, grey: the context around it")
    if view.get("title"):
        ax.set_title(view["title"], fontsize=10, loc="left")
    fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(0.5, 0.05 / height),
               ncol=min(len(handles), LEGEND_COLUMNS), frameon=False, fontsize=8)
    ax.spines[["top", "right"]].set_visible(False)
    return _svg(fig, "gpu-lanes", tight=False)
