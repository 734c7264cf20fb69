"""The causes of idle gpu-idle names, in one registry (docs/definitions.md#categories): each category's name,
its place in the order, whether it is decided per gap or per GPU, whether it is a caveat (a cause that is not
the application's), its gloss, its remedy and its colour. The model's category tuples
(:data:`pipeline.model.CATEGORIES`, :data:`pipeline.model.GAP_CATEGORIES`, :data:`pipeline.model.CAVEATS`),
the fix-first remedies (:data:`pipeline.analysis.fixfirst.REMEDIES`), the report's glossary
(:data:`pipeline.report.html.GLOSSARY`, :data:`pipeline.report.html.CAVEAT_MEANINGS`) and the plots' colours
(:data:`pipeline.report.plots.CATEGORY_COLOURS`) are all read from here; none keeps a list of its own.

A category's rule (which gaps it takes) and its thresholds live with the other rules, in
:mod:`pipeline.analysis.attribution` (a caveat's in :mod:`pipeline.analysis.caveats`); ``rule`` names it.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Category:
    """One cause of idle.

    ``name``: the ``cat_<name>_*`` columns' and the pages' name. ``order``: its place in the order of
    docs/definitions.md#categories (the per-gap rules are tried in this order, first match wins; the views
    list categories in it). ``per_gap``: decided gap by gap (``launch`` is decided per GPU, from the slivers).
    ``caveat``: not the application's cause (docs/definitions.md#caveats): tested before every category,
    never priced as fixable idle, never in the fix-first list. ``gloss``: its one-line meaning on the pages.
    ``remedy``: its generic fix-first remedy (``""`` for a caveat). ``colour``: its colour in every plot and
    legend. ``rule``: where its rule is decided."""

    name: str
    order: int
    gloss: str
    colour: str
    remedy: str = ""
    per_gap: bool = True
    caveat: bool = False
    rule: str = "analysis/attribution.py"


#: Every category, in :attr:`Category.order`.
REGISTRY: tuple[Category, ...] = tuple(sorted((
    Category("data", 10, "copy-engine work or host-to-device transfers / pinned allocation fill the gap: the data "
             "pipeline cannot keep up", "#ff7f0e",
             "pinned buffers allocated once, prefetch/overlap H2D with compute, more loader workers"),
    Category("comm", 20, "the kernel before the gap is a collective (NCCL, custom all-reduce): the GPU waits for its "
             "peers", "#1f77b4", "overlap communication with compute; check the straggler first"),
    Category("sync", 30, "a synchronising call (stream/device/event sync, blocking memcpy) overlaps the gap: the host "
             "waits, then relaunches", "#d62728",
             "find the .item() / progress-bar / hidden framework sync (same position every iteration = in the code)"),
    Category("boundary", 40, "the CPU side is quiet and the gap sits at an iteration boundary", "#9467bd",
             "move per-iteration host work off the critical path"),
    Category("periodic", 50, "rare, very large gaps every k iterations: checkpointing, evaluation, garbage collection",
             "#8c564b", "asynchronous checkpoint / evaluation, GC control"),
    Category("launch", 60, "the idle is many sub-threshold slivers: the CPU cannot issue kernels fast enough",
             "#e377c2", "CUDA graphs / torch.compile / larger kernels", per_gap=False),
    Category("cpu", 70, "nothing on the CUDA API side explains the gap (data loader, GIL, I/O)", "#bcbd22",
             "profile the host (data loader, GIL, I/O)"),
    Category("profiler", 80, "Nsight's own overhead (buffer flushes, command buffer full): the gap would not exist "
             "unprofiled", "#7f7f7f", caveat=True, rule="analysis/caveats.py"),
    Category("untraced", 90, "the trace is missing there (lost kernel records, dropped events); the row is partial",
             "#525252", caveat=True, rule="analysis/caveats.py"),
), key=lambda c: c.order))


def application() -> tuple[Category, ...]:
    """The application's categories (not caveats), in order."""
    return tuple(c for c in REGISTRY if not c.caveat)


def caveats() -> tuple[Category, ...]:
    """The caveats, in order."""
    return tuple(c for c in REGISTRY if c.caveat)


def by_name() -> dict[str, Category]:
    """Every category by its name, in order."""
    return {c.name: c for c in REGISTRY}


class Field(Mapping):
    """One field of every category (or of the application's, or of the caveats) by name, read from
    :data:`REGISTRY` at each look-up: a view's ``{name: text}`` that never falls behind the registry (a
    category registered later, or in a test, is there)."""

    def __init__(self, field: str, caveat: bool | None = None):
        self.field, self.caveat = field, caveat

    def _mine(self) -> dict[str, str]:
        return {c.name: getattr(c, self.field) for c in REGISTRY if self.caveat is None or c.caveat == self.caveat}

    def __getitem__(self, name: str) -> str:
        return self._mine()[name]

    def __iter__(self):
        return iter(self._mine())

    def __len__(self) -> int:
        return len(self._mine())
