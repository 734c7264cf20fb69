"""How far a row's month can be trusted (docs/definitions.md#confidence-tiers).

Every dollar figure extrapolates one GPU's window W to a month. A row states what it extrapolates
from: the GPU's capture (``capture_ns``), W (``window_ns``), the stable iterations kept in W
(``iterations``) and how much their lengths spread (``iteration_spread_pct``), the bursts of work in W
(``bursts``, :func:`bursts`); and, where W is made of iterations, the range its idle share takes from one
iteration to the next (``idle_pct_low``, ``idle_pct_high``, ``idle_pct_sd``). From those and the job's kind
(:class:`KindFigures`), one tier (:data:`TIERS`): ``toy``, ``low``, ``medium`` or ``high`` (:func:`tier`,
thresholds in :class:`~pipeline.config.ConfidenceConfig`); ``low_confidence`` and ``confidence_note`` are
derived from it here and nowhere else (:func:`tier_columns`).

Pure functions of int64 ns numbers and arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..config import ConfidenceConfig
from ..model import beside_bound
from ..schema import TIERS, TRUSTED  # noqa: F401  (the tiers: confidence_tier's values)
from . import intervals as iv
from .kind import SERVING, UNKNOWN



def trusted(tier_name) -> bool:
    """True when ``tier_name`` is one of :data:`TRUSTED` (a missing tier, from a table written before
    the column, is not)."""
    return str(tier_name) in TRUSTED


def trust_rank(tier_name) -> int:
    """Where rows of ``tier_name`` come in every ranked list (docs/definitions.md#confidence-tiers): 0 for the
    trusted tiers (:data:`TRUSTED`, ranked together), 1 for ``low`` (and a missing or unknown tier, read as low),
    2 for ``toy``: order by this, then by dollars, so a toy capture never leads a low one, nor a low one a trusted."""
    name = str(tier_name)
    return 0 if name in TRUSTED else (2 if name == "toy" else 1)


def kept_iterations(win) -> tuple[list[int], list[int]]:
    """``(starts, lengths)`` (int ns) of the iterations ``win`` (a :class:`~pipeline.analysis.window.Window`)
    kept, sorted by start: each kept extent's start and its stability-test length (``win.lengths``, from
    the extent's start to the next iteration's start or its own end when later). ``([], [])`` for a
    window of no iterations (span, a trim holding none)."""
    kept = sorted((int(x[1]), int(n)) for x, n in zip(win.extents, win.lengths) if x[3] == "kept")
    return [s for s, _ in kept], [n for _, n in kept]


def spread_pct(lengths) -> float | None:
    """``iteration_spread_pct`` of the kept iterations' ``lengths`` (int ns): ``100 × (max − min) / median``
    (the median of an even count is the mean of the two middle lengths), 4 decimals; None without
    iterations or with a median of 0."""
    a = np.asarray(lengths, dtype=np.int64)
    if not a.size:
        return None
    med = float(np.median(a))
    return round(100.0 * float(a.max() - a.min()) / med, 4) if med > 0 else None


def iteration_idle_pcts(starts, w1: int, run_starts, run_ends) -> list[float]:
    """Each kept iteration's device-level idle share of its own slice of W, in % (not rounded).

    Iteration ``i``'s slice is ``[starts[i], starts[i + 1])``, the last one's ``[starts[-1], w1)``: the
    slices tile W (which starts at the first kept start), so their idle adds up to ``idle_ns``. Idle of a
    slice = its length − the kernel union (``run_starts``, ``run_ends``: sorted disjoint runs,
    :func:`pipeline.analysis.gaps.busy_runs`) inside it. A slice of length 0 is skipped."""
    s = np.asarray(starts, dtype=np.int64)
    if not s.size:
        return []
    e = np.append(s[1:], np.int64(w1))
    busy = iv.overlap_with_each(s, e, run_starts, run_ends)
    length = e - s
    return [100.0 * float(n - b) / float(n) for n, b in zip(length.tolist(), busy.tolist()) if n > 0]


def idle_range(starts, w1: int, run_starts, run_ends) -> tuple[float | None, float | None]:
    """``(idle_pct_low, idle_pct_high)``: the least and the most idle share (%, 4 decimals) of one kept
    iteration (:func:`iteration_idle_pcts`); ``(None, None)`` for a window of no iterations."""
    return idle_spread(starts, w1, run_starts, run_ends)[:2]


def sample_sd(values) -> float | None:
    """The sample standard deviation (divisor ``n − 1``) of ``values`` (floats), not rounded; None for fewer
    than 2 values."""
    a = np.asarray(values, dtype=float)
    return float(a.std(ddof=1)) if a.size >= 2 else None


def idle_spread(starts, w1: int, run_starts, run_ends) -> tuple[float | None, float | None, float | None]:
    """``(idle_pct_low, idle_pct_high, idle_pct_sd)`` of the kept iterations' idle shares
    (:func:`iteration_idle_pcts`, %): the least, the most and their sample standard deviation
    (:func:`sample_sd`, divisor ``n − 1``), each rounded to 4 decimals (docs/definitions.md#compare-deltas
    uses the SD for its noise floor). ``(None, None, None)`` for a window of no iterations; the SD is None
    with a single iteration."""
    pcts = iteration_idle_pcts(starts, w1, run_starts, run_ends)
    if not pcts:
        return None, None, None
    sd = sample_sd(pcts)
    return round(min(pcts), 4), round(max(pcts), 4), (None if sd is None else round(sd, 4))


def bursts(run_starts, run_ends, gap_ns: int) -> int:
    """``bursts`` of one W (docs/definitions.md#confidence-tiers): how many stretches of work W holds, where
    ``run_starts``, ``run_ends`` (int64 ns) are the kernel union's sorted disjoint runs inside W
    (:func:`pipeline.analysis.gaps.busy_runs`) and a hole between two runs strictly longer than ``gap_ns``
    separates two bursts (shorter holes lie inside one burst; the holes at W's edges separate none). So
    ``1 +`` the holes between runs longer than ``gap_ns``; 0 when W holds no kernel time."""
    s = np.asarray(run_starts, dtype=np.int64)
    e = np.asarray(run_ends, dtype=np.int64)
    if not s.size:
        return 0
    return 1 + int(np.count_nonzero(s[1:] - e[:-1] > np.int64(gap_ns)))


def _known(value):
    """``value``, or None when it is missing (None, NaN or pandas' NA: a table written before its column)."""
    if value is None:
        return None
    try:
        return None if bool(value != value) else value
    except TypeError:  # pandas' NA: its comparisons are NA, which has no truth value
        return None


#: The toy reason of a window that is start-up only (:attr:`KindFigures.startup_only`).
STARTUP_ONLY_REASON = ("start-up only: no kernel after the last graph capture ends (capture and warm-up), "
                       "not a steady state")


@dataclass(frozen=True)
class KindFigures:
    """What a row's job kind adds to its tier (docs/definitions.md#confidence-tiers): ``kind`` (``job_kind``),
    ``left_out_idle_pct`` (``window_left_out_idle_pct``, %), ``idle_pct`` (W's idle share, %), ``bursts``
    (:func:`bursts`, a count) and ``startup_only`` (W is graph-capture start-up only). None where unknown:
    a row from a table written before the column, to which the rule that needs it does not apply (no ``kind``:
    the iteration rule alone, as before kinds existed)."""

    kind: str | None = None
    left_out_idle_pct: float | None = None
    idle_pct: float | None = None
    bursts: int | None = None
    startup_only: bool | None = None
    #: ``busy_ns``: the kernel time in W (0 with kernels in W: every one lasts 0 ns; :func:`_caps`).
    busy_ns: int | None = None
    #: ns of a ``--trim`` window outside the GPU's kernels (before its first, after its last; :func:`_caps`): not
    #: a row column, the warning ``trim-outside-kernels`` says it (:func:`pipeline.analysis.analyse.trim_outside`).
    outside_ns: int | None = None

    @classmethod
    def of_row(cls, row) -> "KindFigures":
        """The figures of a fleet row (a mapping with ``job_kind``, ``window_left_out_idle_pct``, ``idle_pct``,
        ``bursts``, ``busy_ns``; any of them missing or NaN: None)."""
        get = row.get
        kind, left, idle, n, startup, busy = (_known(get(k)) for k in (
            "job_kind", "window_left_out_idle_pct", "idle_pct", "bursts", "startup_only", "busy_ns"))
        return cls(None if kind is None else str(kind), None if left is None else float(left),
                   None if idle is None else float(idle), None if n is None else int(n),
                   None if startup is None else bool(startup), None if busy is None else int(busy))


def _seconds(ns: int, bound_ns: int) -> str:
    """W's length in seconds (µs shown) said under ``bound_ns``: never printed as the bound (:func:`beside_bound`)."""
    return f"{beside_bound(int(ns) / 1e9, int(bound_ns) / 1e9, 6)} s"


def _over(value: float, bound: float) -> str:
    """A figure over ``bound`` as ``:g`` prints it, unless that reads as the bound (then :func:`beside_bound`)."""
    return f"{value:g}" if float(f"{value:g}") > bound else beside_bound(value, bound, 4)


def _caps(figures: KindFigures, cfg: ConfidenceConfig) -> list[tuple[str, str]]:
    """``(tier, reason)`` of each cap on a row (docs/definitions.md#confidence-tiers): whatever its kind, at most
    ``low`` when W holds no kernel time (``busy_ns`` 0: a row that is not ``toy`` has kernels in W, so every one
    lasts 0 ns) or when a ``--trim`` window reaches outside the GPU's kernels (``outside_ns`` > 0); then for an ``unknown`` kind, at most ``low`` when W leaves out more than
    ``cfg.unknown_max_left_out_idle_pct`` % of the capture's idle, at most ``medium`` when W is at least
    ``cfg.unknown_mostly_idle_pct`` % idle."""
    caps = []
    if figures.busy_ns == 0:
        caps.append(("low", "every kernel in W lasts 0 ns (no kernel time recorded)"))
    if figures.outside_ns:
        caps.append(("low", f"the trim reaches {int(figures.outside_ns) / 1e6:,.3f} ms outside the GPU's kernels "
                            "(not measured)"))
    if figures.kind != UNKNOWN:
        return caps
    left, idle = figures.left_out_idle_pct, figures.idle_pct
    if left is not None and left > float(cfg.unknown_max_left_out_idle_pct):
        caps.append(("low", f"the window leaves out {left:g} % of the capture's idle (over "
                            f"{float(cfg.unknown_max_left_out_idle_pct):g} %) and the job's kind is unknown"))
    if idle is not None and idle >= float(cfg.unknown_mostly_idle_pct):
        caps.append(("medium", f"the window is {idle:g} % idle (at least {float(cfg.unknown_mostly_idle_pct):g} %) "
                               "and the job's kind is unknown"))
    return caps


def tier(window_ns: int, kernel_count: int, iterations: int, spread, cfg: ConfidenceConfig = ConfidenceConfig(),
         figures: KindFigures = KindFigures()) -> tuple[str, list[str]]:
    """``(tier, reasons)`` of a row whose W lasts ``window_ns`` ns, holds ``kernel_count`` kernels and
    ``iterations`` stable iterations whose lengths spread ``spread`` % (:func:`spread_pct`; None:
    unknown or no iterations), of a job whose kind gives ``figures``, under the thresholds ``cfg``
    (docs/definitions.md#confidence-tiers):

    * ``toy``: ``window_ns < toy_max_window_ns`` or ``kernel_count < toy_min_kernels``, or W is start-up only
      (``figures.startup_only``: no kernel after the GPU's last graph capture, docs/definitions.md#graph-capture);
    * a ``serving`` row (``figures.kind``): ``high`` with ``figures.bursts ≥ serving_high_min_bursts`` and
      ``window_ns ≥ serving_high_min_window_ns``, ``medium`` the same with the ``serving_medium_*`` thresholds,
      else ``low``;
    * any other row: ``high`` with ``iterations ≥ high_min_iterations``, ``window_ns ≥ high_min_window_ns`` and,
      when W holds iterations, a known ``spread ≤ high_max_spread_pct``; ``medium`` the same with the
      ``medium_*`` thresholds; else ``low``;
    * then an ``unknown`` kind caps the tier (:func:`_caps`): at most ``low`` when W leaves out more than
      ``unknown_max_left_out_idle_pct`` % of the capture's idle, at most ``medium`` when W is at least
      ``unknown_mostly_idle_pct`` % idle.

    ``reasons`` name each shortfall of a ``toy`` row (against the toy thresholds), of a ``low`` row (against
    the medium ones, and each cap at ``low``) and the cap that holds a ``medium`` row below the ``high`` its
    figures reach, e.g. ``"rests on 3 stable iterations (fewer than 5)"``, ``"window 0.018255 s (under 0.05 s)"``,
    ``"14 kernels in W (fewer than 50)"``, ``"iteration spread 62.5 % (over 50 %)"``, ``"rests on 10 bursts
    (fewer than 20)"``, ``"the window leaves out 29.9221 % of the capture's idle (over 10 %) and the job's kind
    is unknown"``; ``[]`` for an uncapped ``medium`` or ``high``."""
    window_ns, kernel_count, iterations = int(window_ns), int(kernel_count), int(iterations)
    toy = []
    if window_ns < int(cfg.toy_max_window_ns):
        toy.append(f"window {_seconds(window_ns, cfg.toy_max_window_ns)} "
                   f"(under {int(cfg.toy_max_window_ns) / 1e9:g} s)")
    if kernel_count < int(cfg.toy_min_kernels):
        toy.append(f"{kernel_count} kernels in W (fewer than {int(cfg.toy_min_kernels)})")
    if figures.startup_only:
        toy.append(STARTUP_ONLY_REASON)
    if toy:
        return "toy", toy

    def short_window(min_window_ns) -> list[str]:
        return [f"window {_seconds(window_ns, min_window_ns)} (under {int(min_window_ns) / 1e9:g} s)"] if (
            window_ns < int(min_window_ns)) else []

    def shortfalls(min_iterations, min_window_ns, max_spread) -> list[str]:
        out = []
        if iterations < int(min_iterations):
            out.append(f"rests on {iterations} stable iterations (fewer than {int(min_iterations)})")
        out += short_window(min_window_ns)
        if iterations >= max(int(min_iterations), 1):  # too few iterations, or none: no spread to judge
            if spread is None or spread != spread:
                out.append("iteration spread unknown")
            elif float(spread) > float(max_spread):
                out.append(f"iteration spread {_over(float(spread), float(max_spread))} % "
                           f"(over {float(max_spread):g} %)")
        return out

    def serving_shortfalls(min_bursts, min_window_ns) -> list[str]:
        n = figures.bursts
        out = (["bursts unknown"] if n is None else
               [f"rests on {int(n)} bursts (fewer than {int(min_bursts)})"] if int(n) < int(min_bursts) else [])
        return out + short_window(min_window_ns)

    if figures.kind == SERVING:
        high = serving_shortfalls(cfg.serving_high_min_bursts, cfg.serving_high_min_window_ns)
        low = [] if not high else serving_shortfalls(cfg.serving_medium_min_bursts, cfg.serving_medium_min_window_ns)
    else:
        high = shortfalls(cfg.high_min_iterations, cfg.high_min_window_ns, cfg.high_max_spread_pct)
        low = [] if not high else shortfalls(cfg.medium_min_iterations, cfg.medium_min_window_ns,
                                             cfg.medium_max_spread_pct)
    reached = "high" if not high else "low" if low else "medium"
    caps = _caps(figures, cfg)
    name = min([reached] + [t for t, _ in caps], key=TIERS.index)
    # a cap is a reason where it holds the row below what its figures reach, and always for a low row
    held = [why for t, why in caps if t == name and (name == "low" or TIERS.index(name) < TIERS.index(reached))]
    return name, (low if reached == "low" else []) + held


def tier_columns(window_ns: int, kernel_count: int, iterations: int, spread,
                 cfg: ConfidenceConfig = ConfidenceConfig(), figures: KindFigures = KindFigures()) -> dict:
    """The one place a row's confidence columns are made: ``confidence_tier`` (:func:`tier`),
    ``low_confidence`` (the tier is ``toy`` or ``low``: not :data:`TRUSTED`) and ``confidence_note``
    (the tier's reasons, ``"; "``-joined; ``""`` for an uncapped ``medium`` or ``high``)."""
    name, reasons = tier(window_ns, kernel_count, iterations, spread, cfg, figures)
    return {"confidence_tier": name, "low_confidence": not trusted(name), "confidence_note": "; ".join(reasons)}
