"""Command line only: parse, call, print. ``gpu-idle run INPUT... --out DIR``."""
from __future__ import annotations

import contextlib
import gc
import logging
import os
import sys
import textwrap
import threading
from typing import TYPE_CHECKING

import click

from . import __version__
from . import interrupts  # standard library only
from .text import message, printable, printable_diagnostics  # standard library only (pipeline/text.py)

if TYPE_CHECKING:  # annotations only
    import pandas as pd

# Only click is imported here: ``gpu-idle --version`` and ``--help`` must not pay for pandas,
# pyarrow, Dask or the report's libraries. Each command imports what it uses when it runs
# (tests/test_startup.py holds this).

def __getattr__(name: str):
    """``SHOWN``: the headers of the table printed in the terminal (the files hold every column), from the
    schema (:func:`pipeline.schema.shown`), made when first asked for: importing the schema imports pandas,
    which ``gpu-idle --version`` must not pay for."""
    if name == "SHOWN":
        from .schema import shown

        return shown("printed")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: The terminal shows at most this many GPU rows (the most expensive); fleet.csv has them all.
MAX_SHOWN_ROWS = 40


#: What the printed table's ``~`` beside a dollar figure and its ``unpriced`` mean (docs/definitions.md#cost).
ASSUMED_LEGEND = ("~$: priced at an assumed rate, the default model's (no model named; or, under cost.unlisted: "
                  "default, not on the card)", "unpriced: no rate (a model not on the rate card, or none named "
                  "on a GPU that is not NVIDIA's), in no total")
#: What the printed table's ``tier`` column means (docs/definitions.md#confidence-tiers); every legend line fits 120
#: columns, as the table does.
TIER_LEGEND = "tier: how far the month can be trusted, toy < low < medium < high (docs/definitions.md#confidence-tiers)"
#: What the printed table's ``!`` after a speed-up means (``implausible_speedup``, docs/definitions.md#fix-first).
IMPLAUSIBLE_LEGEND = "x!: implausible speed-up: 10x or more, the idle holds 90 % or more of the window (docs/definitions.md#fix-first)"


def _usd_marked(ok: pd.DataFrame, cells: list[str]) -> list[str]:
    """The printed ``idle_usd_per_month`` cells (``$1,234.56``, from :func:`_cells`) of the rows ``ok`` marked:
    ``~$1,234.56`` at an assumed rate (``rate_assumed``), ``unpriced`` (``unpriced``)."""
    return ["unpriced" if bool(u) else f"~{c}" if bool(a) else c
            for c, a, u in zip(cells, ok["rate_assumed"].astype(bool), ok["unpriced"].astype(bool))]


def _speedup_marked(ok: pd.DataFrame, cells: list[str]) -> list[str]:
    """The printed ``amdahl_speedup`` cells (``4421.087x``, from :func:`_cells`) of the rows ``ok`` marked ``!``
    where the speed-up itself is implausible (:func:`pipeline.analysis.fixfirst.implausible`: 10× or more, the one
    rule every view marks by): ``4421.087x!``."""
    import pandas as pd

    from .analysis.fixfirst import implausible
    return [f"{c}!" if implausible(v) else c for c, v in zip(cells, pd.to_numeric(ok["amdahl_speedup"], errors="coerce"))]


def _cells(values: pd.Series, col) -> list[str]:
    """The printed table's cells of one column (``col``: a :class:`pipeline.schema.Printed`), read from its
    declared dtype and unit: ns as ms with 3 decimals, ``%`` with 2, USD as ``$1,234.56``, a factor as
    ``1.234x``, a flag ``yes``/``no``, text made printable (:func:`~pipeline.text.printable`) and cut to
    ``col.width`` with ``…`` (:func:`cut_apart`: two texts never read the same once cut); ``-`` where a value is
    missing (a column an older fleet table lacks)."""
    import pandas as pd

    from . import schema

    decl = schema.column(col.name)

    def one(v) -> str:
        if decl.dtype == "bool":
            return "yes" if bool(v) and not pd.isna(v) else "no"
        if v is None or pd.isna(v):
            return "-"
        if decl.dtype == "text":
            return cuts.get(printable(str(v)), printable(str(v)))
        if decl.unit == "ns":
            return f"{int(v) / 1e6:,.3f}"
        if decl.unit in ("USD/month", "USD/h"):
            return f"${float(v):,.2f}"
        if decl.unit == "%":
            return f"{float(v):.2f}"
        if decl.unit == "factor":
            return f"{float(v):.3f}x"
        return str(int(v)) if decl.dtype == "Int64" else str(v)

    cuts = cut_apart([printable(str(v)) for v in values if v is not None and not pd.isna(v)], col.width) \
        if decl.dtype == "text" and col.width else {}
    return [one(v) for v in values]


def cut_apart(texts: list[str], width: int) -> dict:
    """``text -> cell`` of each of ``texts`` as the printed table shows it in ``width`` columns: a text that fits as
    it is, a longer one cut at its end (``zeta-long-job-nam…``); texts that would then read the same (two jobs
    ``ws128_sampled_rank0`` and ``ws128_sampled_rank1``) are cut in the middle instead, keeping their ends
    (``ws128_sam…ed_rank0``), so two names never print alike."""
    out = {t: t if len(t) <= width else t[:width - 1] + "…" for t in dict.fromkeys(texts)}
    seen: dict = {}
    for text, cell in out.items():
        seen.setdefault(cell, []).append(text)
    for cell, alike in seen.items():
        if len(alike) > 1:
            head = (width - 1) - (width - 1) // 2
            for text in alike:
                if len(text) > width:
                    out[text] = text[:head] + "…" + text[len(text) - (width - 1 - head):]
    return out


def format_fleet(fleet: pd.DataFrame, max_rows: int = MAX_SHOWN_ROWS, wide: bool = False) -> str:
    """The fleet table for people (docs/outputs.md#the-printed-table): the columns of
    :data:`pipeline.schema.PRINTED` (``wide``: :data:`~pipeline.schema.PRINTED_WIDE`) under their short headers,
    one line per analysed GPU, the GPUs on trusted captures first (``low_confidence`` false: tier ``medium`` or
    ``high``), then those of tier ``low``, then those of tier ``toy``, each group most expensive first
    (``idle_usd_per_month`` descending; the unpriced GPUs after the priced ones, the most idle (``idle_pct``) first;
    ties by the job key, then report and GPU key), so a toy capture at an assumed rate never heads
    the table, text left-aligned and numbers right-aligned (:func:`_cells`); errors listed below, then the
    reports that are duplicates of a capture analysed under another name (docs/inputs.md#duplicate-captures).
    A GPU is shown by its name (:func:`pipeline.report.medical.gpu_names`), a job by its title (``<cluster>/<job>``
    when two clusters run a job of that name). A fleet of more than ``max_rows`` analysed GPUs shows the
    ``max_rows`` most expensive and says how many more fleet.csv holds."""
    import pandas as pd

    from . import schema
    from .report.medical import gpu_names, job_keys, job_titles
    from .report.summary import tier_ranks
    from .schema import JOB_KEY

    columns = schema.PRINTED_WIDE if wide else schema.PRINTED
    names = list(dict.fromkeys([*JOB_KEY, "report", "gpu_key", "gpu_model", "rate_assumed", "unpriced",
                                "implausible_speedup", "low_confidence", "confidence_tier",
                                *(c.name for c in columns if c.name != "gpu_name")]))
    ok = schema.conform(schema.analysed_rows(fleet), names).copy()  # an older table: "-" where it lacks
    lines = []
    if not ok.empty:
        gpu = gpu_names(ok)
        ok["gpu_name"] = [gpu[(str(r), str(g))] for r, g in zip(ok["report"], ok["gpu_key"])]
        titles = job_titles(job_keys(ok))
        ok["_cluster"] = ok["cluster"].astype(str)
        ok["job"] = [titles.get((c, str(j)), j) for c, j in zip(ok["_cluster"], ok["job"])]
        ok["_usd"] = ok["idle_usd_per_month"].astype(float)
        # trusted, then low, then toy (a row of no tier read as low), each most expensive first
        ok["_low"] = tier_ranks(ok)
        # an unpriced GPU's share of its window ranks it among the unpriced (a priced one's ties: by job key)
        share = pd.to_numeric(schema.conform(ok, ["idle_pct"])["idle_pct"], errors="coerce").fillna(0.0)
        ok["_share"] = share.where(ok["_usd"].isna(), 0.0)
        ok["_job"], ok["_report"], ok["_gpu"] = (ok[c].astype(str) for c in ("job", "report", "gpu_key"))
        # the unpriced GPUs (no dollars) after the priced ones of their group, the most idle first
        ok = ok.sort_values(["_low", "_usd", "_share", "_cluster", "_job", "_report", "_gpu"],
                            ascending=[True, False, False, True, True, True, True],
                            na_position="last", kind="stable")
    hidden = max(0, len(ok) - max_rows)
    ok = ok.head(max_rows)
    if not ok.empty:
        marked = {"idle_usd_per_month": _usd_marked, "amdahl_speedup": _speedup_marked}
        table = [[c.header] + marked.get(c.name, lambda _, cells: cells)(ok, _cells(ok[c.name], c)) for c in columns]
        widths = [max(len(cell) for cell in cells) for cells in table]
        left = [schema.column(c.name).dtype == "text" for c in columns]
        for i in range(len(ok) + 1):
            lines.append(" ".join(cells[i].ljust(w) if lt else cells[i].rjust(w)
                                  for cells, w, lt in zip(table, widths, left)).rstrip())
        if any(c.name == "confidence_tier" for c in columns):
            lines.append(TIER_LEGEND)
        if ok["rate_assumed"].astype(bool).any():
            lines.append(ASSUMED_LEGEND[0])
        if ok["unpriced"].astype(bool).any():
            lines.append(ASSUMED_LEGEND[1])
        if any(c.name == "amdahl_speedup" for c in columns) and any(x.endswith("!") for x in _speedup_marked(
                ok, ["x"] * len(ok))):
            lines.append(IMPLAUSIBLE_LEGEND)
    if hidden:
        lines.append(f"... {hidden} more GPU row(s) in fleet.csv (above: the {max_rows} with the highest idle cost)")
    # the columns shown, not whole rows (itertuples reads every one of the table's columns, a row or none)
    errors, dups = (fleet[fleet["status"] == status] for status in ("error", schema.DUPLICATE))
    for error in (errors["error"] if len(errors) else ()):
        lines.append(f"ERROR {printable(error)}")  # the message starts with the report path
    for report, error in (zip(dups["report"], dups["error"]) if len(dups) else ()):  # one capture, analysed once
        lines.append(f"DUPLICATE {printable(report)}: {printable(error)} (not analysed again, not priced)")
    return "\n".join(lines)


def echo(text: str = "", err: bool = False) -> None:
    """``click.echo`` of ``text`` made terminal-safe (:func:`~pipeline.text.message`: a file name in it
    cannot write raw escape or bidirectional characters), that outlives its reader: when stdout (or
    stderr) is a pipe whose reader has gone (``gpu-idle run ... | head -1``), the stream is pointed at
    /dev/null and the command goes on, so the output files are still written and the exit status still
    says whether a report failed (click alone would end the command there, with status 1)."""
    try:
        click.echo(message(text), err=err)
    except BrokenPipeError:
        stream = sys.stderr if err else sys.stdout
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())
        os.close(devnull)


class Failed(click.ClickException):
    """The command could not finish, exit status 1 (:data:`EXIT_STATUSES`): one ``gpu-idle: ERROR: <message>``
    line on stderr (a sweep's state folder it cannot write or that another sweep holds)."""

    def show(self, file=None) -> None:
        echo(f"gpu-idle: ERROR: {self.format_message()}", err=True)


class Refused(click.UsageError):
    """Nothing done, exit status 2 (:data:`EXIT_STATUSES`): one ``gpu-idle: ERROR: <message>`` line on stderr
    (a wrong config file, a night in the future), no usage text around it."""

    def show(self, file=None) -> None:
        echo(f"gpu-idle: ERROR: {self.format_message()}", err=True)


#: Whether this process is the ``gpu-idle`` command itself (:func:`entry`), not a caller running :func:`main` in a
#: process of its own (the tests): only then are the objects of start-up frozen (:func:`_start_up`).
_OWN_PROCESS = False


@contextlib.contextmanager
def _start_up():
    """Load a command's stages with Python's cyclic garbage collector paused: importing pandas, pyarrow and the
    pipeline makes ~70k objects that live as long as the process and no garbage, and the collector's passes
    over them cost ~0.1 s of every start. In the ``gpu-idle`` process itself (:data:`_OWN_PROCESS`) they are
    then frozen (:func:`gc.freeze`), so the collector's later passes, while the reports are analysed, skip them."""
    from .memory import collector_paused  # standard library only at import (ctypes)

    try:
        with collector_paused():
            yield
    finally:
        if _OWN_PROCESS:
            gc.freeze()


def _config(configs, overrides=None):
    """:func:`pipeline.config.load_config` of the ``--config`` files; a file that cannot be used is
    :class:`Refused` (exit status 2), its message naming the file and the key."""
    from .config import ConfigError, load_config

    try:
        return load_config(configs, overrides)
    except ConfigError as exc:
        raise Refused(message(exc)) from exc


def _dask_overrides(workers: int | None, dashboard: str | None) -> dict:
    """The ``dask:`` config overrides of ``--workers`` and ``--dashboard`` (only those given)."""
    return {k: v for k, v in (("n_workers", workers), ("dashboard", dashboard)) if v is not None}


#: What each exit status of ``gpu-idle`` means; the commands' ``--help`` and the README say the same.
EXIT_STATUSES = {
    0: "every report analysed (or nothing to do); for report and compare: every page and table written (reports "
       "that failed in the run they read are shown there, the run's status said so)",
    1: "a report failed (its row says why), or the command could not finish (e.g. a full disk: one line "
       "counts and names the files not written)",
    2: "nothing done: a wrong option, config, scheduler address, RESULTS or --out (not gpu-idle's, or being "
       "written)",
    3: "compare's gate failed: a job's idle $/month grew by more than --fail-above (a category) or "
       "--fail-above-total (its total) beyond its noise floor, or, with --strict, a job could not be gated",
    130: "interrupted by SIGINT (Ctrl-C); the worker processes end with it",
    143: "interrupted by SIGTERM; the worker processes end with it",
}
EXIT_HELP = "\b\nExit status:\n" + "\n".join(f"  {code:<4} {text}" for code, text in EXIT_STATUSES.items())


def _scheduler(ctx, param, value):
    """``--scheduler`` (or ``DASK_SCHEDULER_ADDRESS``): an address gpu-idle can connect to, checked
    before any work (:func:`pipeline.config.check_scheduler_address`)."""
    if value is None:
        return None
    from .config import check_scheduler_address

    try:
        return check_scheduler_address(value)
    except ValueError as exc:
        from_env = ctx.get_parameter_source(param.name) == click.core.ParameterSource.ENVIRONMENT
        raise click.BadParameter(message(exc), param_hint="DASK_SCHEDULER_ADDRESS (the environment)"
                                 if from_env else None) from exc


class Seconds(click.ParamType):
    """Seconds given as decimal text, kept exact (:class:`~decimal.Decimal`): ``1776781226.561295056``
    is that many ns, never the nearest float (which is 48 ns off on the UTC-epoch clock)."""

    name = "seconds"

    def convert(self, value, param, ctx):
        from .config import parse_seconds

        try:
            return parse_seconds(value)
        except ValueError as exc:
            self.fail(message(exc), param, ctx)


#: ``--accounting`` of run and sweep (docs/operations.md#feeding-the-accounting).
ACCOUNTING_OPTION = click.option(
    "--accounting", "accounting", multiple=True, type=click.Path(exists=True, dir_okay=False),
    help="The scheduler's accounting: `sacct --json` or `kubectl get pods -o json` output (repeatable; "
         "replaces accounting.files): each report gets its job, user, team and GPUs, and teams.csv and "
         "coverage.csv are written (docs/operations.md#feeding-the-accounting).")


@click.group(epilog=EXIT_HELP)
@click.version_option(__version__, prog_name="gpu-idle")
def main():
    """Find, explain and price every idle gap on every GPU in Nsight Systems profiles and PyTorch
    profiler (Kineto) traces."""


@main.command()
@click.argument("inputs", nargs=-1, required=True)
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config, layered over the defaults (repeatable).")
@click.option("--window", type=click.Choice(["auto", "span", "nvtx", "periodic"]), default=None,
              help="Window rule. auto (default): NVTX iterations, else kernel periodicity, else span; "
                   "span: first kernel start to last kernel end; nvtx/periodic: that rule only (a GPU where it "
                   "finds no iterations gets an error row saying why).")
@click.option("--trim", nargs=2, type=Seconds(), default=None, metavar="START END",
              help="Explicit window in seconds on the report's clock (wins over --window); read as decimals, "
                   "exact to the ns (e.g. 1776781226.561295056 on the UTC-epoch clock).")
@click.option("--min-gap-ns", type=click.IntRange(min=0), default=None,
              help="Keep per-stream gaps longer than this (ns); default 1000000.")
@click.option("--limit", type=click.IntRange(min=0), default=None, help="Roster size per GPU (default 20).")
@click.option("--scheduler", default=None, envvar="DASK_SCHEDULER_ADDRESS", callback=_scheduler,
              help="Address of a running Dask scheduler, tcp://HOST:PORT or HOST:PORT (also DASK_SCHEDULER_ADDRESS; "
                   "tls:// with Dask's TLS configuration); default: a LocalCluster, or, for a single report, this "
                   "process (no cluster). A scheduler that does not answer in dask.connect_timeout_s is an error.")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Worker processes of the embedded LocalCluster (default 2, from dask.n_workers); a single "
                   "report runs in this process on as many threads.")
@click.option("--no-cache", is_flag=True,
              help="Read every export from SQLite (and every trace from its JSON) and analyse every report; "
                   "use and fill no cache of any kind (exports, staged copies, Parquet, results): a .nsys-rep is "
                   "exported, a remote report staged, into a temporary folder removed afterwards.")
@click.option("--dashboard", default=None, metavar="ADDRESS",
              help="Serve the LocalCluster's Dask dashboard here, e.g. :8787 (default: none).")
@click.option("--wide", is_flag=True,
              help="Print every column of the fleet table's terminal view (device-level and per-stream figures, node, "
                   "GPU key and model), not only the 120-column one that leads with money.")
@click.option("--prom", "prom", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the fleet table as Prometheus metrics to FILE (text format, written atomically), "
                   "e.g. into a node exporter's textfile-collector folder as gpu_idle.prom.")
@ACCOUNTING_OPTION
def run(inputs, out_dir, configs, window, trim, min_gap_ns, limit, scheduler, workers, no_cache, dashboard, wide,
        prom, accounting):
    """Analyse every GPU of every report in INPUTS: .nsys-rep (or older .qdrep) reports (exported
    with nsys), .sqlite exports, or PyTorch profiler traces (.json, .json.gz, *.pt.trace.json(.gz));
    files, directories (searched recursively) or globs; local paths or fsspec URLs. In a directory a
    .json / .json.gz not named *.pt.trace.json(.gz) is read only when its first MiB reads as a trace
    (the others are skipped, and stderr says which). Writes DIR/fleet.parquet, fleet.csv, jobs.csv,
    clusters.csv, fix_first.csv, fix_first.json, gpus/*.json and records/<job>.md (and DIR/.manifest.json: a rerun with nothing
    changed keeps them all); `gpu-idle report DIR --out DIR/report.html` then renders the report and
    the GPU pages. Exit status 1 when any report failed (it still gets its row); see below."""
    from .hashing import hash_ahead  # standard library only
    from .kinds import SQLITE_EXPORT, kind_of, needs_sniff  # standard library only
    from .load.ahead import drop as drop_ahead, read_ahead  # standard library only

    # a report given by name, or named as one in a folder given, is hashed on its own thread while the stages import
    hash_ahead(inputs, lambda name: kind_of(name) is not None and not needs_sniff(name))
    if len(inputs) == 1 and scheduler is None and kind_of(inputs[0]) is SQLITE_EXPORT and not needs_sniff(inputs[0]):
        read_ahead(inputs[0])  # and the one export given is read too (the loader takes what it read)
    try:
        _run(inputs, out_dir, configs, window, trim, min_gap_ns, limit, scheduler, workers, no_cache, dashboard, wide,
             prom, accounting)
    finally:
        drop_ahead()  # whatever the run did not take (it stopped early, or did not load that export)


def _run(inputs, out_dir, configs, window, trim, min_gap_ns, limit, scheduler, workers, no_cache, dashboard, wide,
         prom, accounting):
    """:func:`run`, once the reports given are being hashed (and read) ahead."""
    with _start_up():
        from .inputs.discover import skipped_note, unmatched
        from .runs.driver import IncompleteOutputs, OutputError, RunFolder, drive

    if trim and trim[1] <= trim[0]:
        raise click.BadParameter(f"END ({trim[1]}) must be after START ({trim[0]})", param_hint="--trim")
    analysis = {k: v for k, v in (("window", window), ("min_gap_ns", min_gap_ns), ("roster_size", limit),
                                  ("trim_s", list(trim) if trim else None)) if v is not None}
    overrides = {"analysis": analysis, "dask": _dask_overrides(workers, dashboard)}
    if accounting:
        overrides["accounting"] = {"files": list(accounting)}
    if no_cache:
        overrides["cache"] = {"enabled": False}
    cfg = _config(configs, overrides)
    missing = unmatched(inputs)
    if missing:  # a mistyped path: nothing to analyse there, nothing written (not a failed report of $0.00)
        raise click.BadParameter("; ".join(f"{printable(m)}: no such file or directory (matches nothing)"
                                           for m in missing) + ": nothing written", param_hint="INPUTS")
    cfg = _writable_caches(cfg)
    cache = _result_cache(cfg)
    try:
        result = drive(cfg, inputs, RunFolder(out_dir, log=echo), cache, scheduler, log=echo,
                       progress_factory=progress_factory())
    except OutputError as exc:
        raise click.BadParameter(message(exc), param_hint="--out") from exc
    except IncompleteOutputs as exc:
        echo(f"gpu-idle: ERROR: {message(exc)}", err=True)
        sys.exit(1)
    note = skipped_note(result.skipped)
    if note:  # an empty trace of a profiler that crashed must not vanish without a word
        echo(f"gpu-idle: {note}", err=True)
    where = f"(result cache {cache.store.dir})" if cache else "(result cache off)"
    if result.kept:
        # Nothing changed since the run that wrote DIR: its outputs are this run's, byte for byte.
        echo(f"0 report(s) analysed, {result.reused} reused: the outputs in {out_dir} are up to date {where}")
        cov = _coverage(result.fleet, cfg)
        _finish(result.fleet, f"kept everything in {out_dir}", wide, _write_prom(prom, result.fleet, None, cov), cov)
    fleet = result.fleet
    failed_now = fleet.loc[(fleet["status"] == "error") & fleet["report"].isin(result.todo), "report"].nunique()
    echo(f"{len(result.todo)} report(s) analysed" + (f" ({failed_now} failed)" if failed_now else "")
         + f", {result.reused} reused {where}")
    if result.engine_problem:
        echo(f"gpu-idle: ERROR: {message(result.engine_problem)}", err=True)
    cov = _coverage(fleet, cfg)
    _finish(fleet, result.wrote, wide, _write_prom(prom, fleet, None, cov), cov)


def _finish(fleet: pd.DataFrame, wrote: str, wide: bool = False, prom_written: bool = True,
            cov: pd.DataFrame | None = None) -> None:
    """Print the fleet table (``wide``: every column, :func:`format_fleet`), the totals (:func:`total_lines`), the
    accounting's coverage (``cov``, :func:`coverage_lines`) and what was written; exit 1 when any report failed or
    the metrics file could not be written (``prom_written`` false, :func:`_write_prom`)."""
    echo(format_fleet(fleet, wide=wide))
    echo(total_lines(fleet))
    for line in trim_cut_lines(fleet):
        echo(line, err=True)
    if cov is not None:
        echo(coverage_lines(cov))
    echo(wrote)
    sys.exit(1 if fleet[fleet["status"] == "error"]["report"].nunique() or not prom_written else 0)


def trim_cut_lines(fleet: pd.DataFrame) -> list[str]:
    """One console warning per GPU row whose ``--trim`` reaches outside its kernels (``trim-outside-kernels``): its
    report, GPU and the warning's text as the row has it (docs/definitions.md#the-analysis-window)."""
    from .analysis.analyse import TRIM_CUT_END

    if "warning_codes" not in fleet.columns:
        return []
    # the four columns it reads, not every row as a dict of every column (0.1 s of a 2,000-row fleet's end)
    texts = fleet["warnings"].tolist() if "warnings" in fleet.columns else [None] * len(fleet)
    lines = []
    for report, gpu, codes, text in zip(fleet["report"].tolist(), fleet["gpu_key"].tolist(),
                                        fleet["warning_codes"].tolist(), texts):
        text = str(text or "")
        if "trim-outside-kernels" in str(codes or "").split(",") and "--trim reaches" in text:
            part = text[text.index("--trim reaches"):]
            part = part[:part.index(TRIM_CUT_END) + len(TRIM_CUT_END)] if TRIM_CUT_END in part else part
            lines.append(f"gpu-idle: WARNING: {report} GPU {gpu}: {part}")
    return lines


def _coverage(fleet: pd.DataFrame, cfg) -> pd.DataFrame | None:
    """The accounting's coverage of ``fleet`` (:func:`pipeline.accounting.hooks.coverage_table`: what
    ``coverage.csv`` holds); None without accounting."""
    from .accounting.hooks import coverage_table

    return coverage_table(fleet, cfg)


def coverage_lines(cov: pd.DataFrame, width: int = 120) -> str:
    """The line under the printed totals when the accounting is given (docs/outputs.md#the-printed-table): the
    share of the GPU spend the captures represent and the allocations never traced
    (:func:`~pipeline.report.teams.summary_text`), indented two spaces and wrapped at ``width`` columns."""
    from .report.teams import summary_text

    return textwrap.fill(summary_text(cov), width=width, initial_indent="  ", subsequent_indent="  ",
                         break_on_hyphens=False, break_long_words=False)


def _write_prom(path: str | None, fleet: pd.DataFrame, night: str | None = None,
                cov: pd.DataFrame | None = None, create_folder: bool = False) -> bool:
    """Write the fleet table (and the accounting's coverage ``cov``, when given) as Prometheus metrics to ``path``
    (:func:`pipeline.fleet.prom.write_prom`; None: nothing to write). False, with a ``gpu-idle: ERROR:`` line,
    when it cannot be written or its folder does not exist (unless ``create_folder``)."""
    if not path:
        return True
    from .accounting.joined import measured_share
    from .fleet.prom import write_prom

    try:
        write_prom(path, fleet, night, cov, measured_share(cov) if cov is not None else None, create_folder)
    except OSError as exc:
        echo(f"gpu-idle: ERROR: metrics file {path} not written: {message(exc)}", err=True)
        return False
    return True


def total_lines(fleet: pd.DataFrame) -> str:
    """The lines under the printed fleet table, the same after ``run`` and ``sweep`` (docs/outputs.md#the-printed-table):
    a blank line, then ``N GPU(s) in the fleet table, F report(s) failed; fleet idle cost $X/month`` (``no priced
    GPU`` when every analysed GPU is unpriced, never $0.00; no total without an analysed GPU), the rates assumed or
    missing on lines of their own, and the total cut by confidence tier (:func:`trust_lines`); every line within 120
    columns."""
    from .analysis.cost import models_text, unpriced_total
    from .fleet.reduce import assumed_text, rate_assumptions
    from .schema import DUPLICATE, analysed_rows

    failed = fleet[fleet["status"] == "error"]["report"].nunique()
    total_usd = fleet["idle_usd_per_month"].astype(float).sum()
    ra, gpus = rate_assumptions(fleet), len(analysed_rows(fleet))
    dups = int((fleet["status"] == DUPLICATE).sum())
    # every analysed GPU unpriced: the total reads unpriced, never $0.00 (docs/definitions.md#cost); no GPU
    # analysed: no total at all (there is nothing it could be the cost of)
    named = models_text(ra.get("unpriced_models") or {})
    total = (f": no priced GPU ({ra['unpriced_gpus']} GPU(s) unpriced" + (f": {named})" if named else ")")
             if unpriced_total(gpus - ra["unpriced_gpus"], ra["unpriced_gpus"]) else f" ${total_usd:,.2f}/month")
    # a duplicate row: another file of a capture analysed under another name, counted once (docs/inputs.md)
    lines = [f"\n{gpus} GPU(s) in the fleet table, {failed} report(s) failed"
             + (f", {dups} duplicate(s) not priced" if dups else "") + "; "
             + (f"fleet idle cost{total}" if gpus else "no GPU analysed: no idle cost")]
    assumed = assumed_text(ra)
    if assumed:  # on lines of their own: every line printed fits 120 columns
        lines.append(textwrap.fill(assumed.removeprefix("; "), 120, initial_indent="  ", subsequent_indent="  ",
                                   break_long_words=False, break_on_hyphens=False))
    if gpus:
        lines.append(trust_lines(fleet))
    return "\n".join(lines)


def trust_lines(fleet: pd.DataFrame, width: int = 120) -> str:
    """The printed total cut by confidence tier, under it (docs/definitions.md#confidence-tiers): the report's
    trusted card in words (:func:`~pipeline.report.html.trust_text` of
    :func:`~pipeline.report.summary.trust_split`, the one definition of both), indented two spaces and wrapped at
    ``width`` columns."""
    from .report.words import trust_text
    from .report.summary import trust_split

    return textwrap.fill(trust_text(trust_split(fleet)), width=width, initial_indent="  ", subsequent_indent="  ",
                         break_on_hyphens=False)


def _writable_caches(cfg):
    """``cfg``, or ``cfg`` with the caches off (as ``--no-cache``) when the columnar cache's folder
    (``cache.dir``, ``GPU_IDLE_CACHE``) or the export cache's (``export.cache_dir``, ``GPU_IDLE_EXPORT_CACHE``)
    cannot be written (read-only, a file in its place): one line on stderr says so, and the run goes on
    reading every report from its file."""
    if not cfg.cache.enabled:
        return cfg
    import dataclasses

    from .inputs.export import default_cache_dir as export_cache_dir
    from .io import unwritable_reason
    from .load.cache import default_cache_dir

    for what, folder in (("cache", cfg.cache.dir or default_cache_dir()),
                         ("export cache", cfg.export.cache_dir or export_cache_dir())):
        why = unwritable_reason(folder)
        if why:
            echo(f"gpu-idle: caches not used: the {what} folder {folder} cannot be written ({why}); every report "
                 "is read from its file, as with --no-cache", err=True)
            return dataclasses.replace(cfg, cache=dataclasses.replace(cfg.cache, enabled=False))
    return cfg


def _result_cache(cfg):
    """The result cache of ``gpu-idle run`` (:meth:`~pipeline.store.results.ResultCache.for_run`), or None
    when ``cache.enabled`` is false (``--no-cache``) or its folder cannot be created (a warning says so)."""
    if not cfg.cache.enabled:
        return None
    from .store.results import ResultCache

    try:
        return ResultCache.for_run(cfg)
    except OSError as exc:
        echo(f"gpu-idle: result cache not used: {message(exc)}", err=True)
        return None


def progress_factory():
    """``(total, what="reports") -> Progress`` for the driver (:class:`~pipeline.progress.Progress` on stderr): a
    bar of reports (or of the GPUs inside a report analysed in this process) done on a terminal, a few plain
    ``gpu-idle: progress:`` lines otherwise (cron, CI, a log). Further keywords (``doing``, ``of``) go to
    :class:`~pipeline.progress.Progress`: reading a large report, writing its GPU files."""
    from .progress import Progress

    return lambda total, what="reports", **words: Progress(total, what=what, **words)


def _night(ctx, param, value):
    """``--night``: a date written YYYY-MM-DD, nothing else (it names a folder)."""
    if value is None:
        return None
    from .runs.sweep import check_night

    try:
        return check_night(value)
    except ValueError as exc:
        raise click.BadParameter(message(str(exc).split(": ", 1)[1])) from exc


@main.command()
@click.argument("inputs", nargs=-1)
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config(s); the `sweep:` section names the inputs and the state folder.")
@click.option("--state-dir", default=None, help="Results, history and nightly outputs (default: sweep.state_dir).")
@click.option("--night", default=None, metavar="YYYY-MM-DD", callback=_night,
              help="Date of this run (default: today, UTC).")
@click.option("--force", multiple=True, metavar="REPORT", help="Analyse this report again even if unchanged.")
@click.option("--report-only", is_flag=True,
              help="Rebuild a night's outputs (--night, default the latest not in the future) from stored results only.")
@click.option("--future-night", is_flag=True,
              help="Write a --night more than a day after today (UTC); without it such a night is refused (exit 2).")
@click.option("--scheduler", default=None, envvar="DASK_SCHEDULER_ADDRESS", callback=_scheduler,
              help="Address of a running Dask scheduler, tcp://HOST:PORT or HOST:PORT (also DASK_SCHEDULER_ADDRESS; "
                   "tls:// with Dask's TLS configuration); default: a LocalCluster, or, for a single report, this "
                   "process (no cluster). A scheduler that does not answer in dask.connect_timeout_s is an error.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="LocalCluster worker processes.")
@click.option("--dashboard", default=None, metavar="ADDRESS",
              help="Serve the LocalCluster's Dask dashboard here, e.g. :8787 (default: none).")
@click.option("--wide", is_flag=True,
              help="Print every column of the fleet table's terminal view (device-level and per-stream figures, node, "
                   "GPU key and model), not only the 120-column one that leads with money.")
@click.option("--prom", "prom", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="Also write the night's fleet table as Prometheus metrics to FILE (default: the sweep.prom setting, "
                   "relative to the state folder; empty: none).")
@ACCOUNTING_OPTION
def sweep(inputs, configs, state_dir, night, force, report_only, future_night, scheduler, workers, dashboard, wide,
          prom, accounting):
    """The nightly sweep: discover reports (config `sweep.inputs` plus INPUTS), skip those whose
    result for the same content and configuration exists, analyse the rest, append the night to
    the fleet history and write that night's tables, records and report. Exit status 1 when any
    report failed; see below."""
    with _start_up():
        from .runs.driver import IncompleteOutputs, OutputError
        from .runs.sweep import FutureNight, SweepBusy, rebuild
        from .runs.sweep import sweep as run_sweep

    overrides = {"dask": _dask_overrides(workers, dashboard)}
    if accounting:
        overrides["accounting"] = {"files": list(accounting)}
    cfg = _config(configs, overrides)
    if report_only:
        not_written: dict = {}
        try:
            out = rebuild(cfg, state_dir, night, not_written)
        except (FileNotFoundError, OutputError) as exc:
            raise Failed(message(exc)) from exc
        except IncompleteOutputs as exc:
            echo(f"gpu-idle: ERROR: {message(exc)}", err=True)
            sys.exit(1)
        echo(f"rebuilt {out} from stored results (nothing analysed)")
        _not_written(out, not_written)
        sys.exit(1 if not_written else 0)
    cfg = _writable_caches(cfg)
    try:
        fleet, summary = run_sweep(cfg, inputs, state_dir, night, force, scheduler, log=echo,
                                   progress_factory=progress_factory(), future=future_night)
    except FutureNight as exc:
        raise Refused(message(exc)) from exc
    except SweepBusy as exc:
        raise Failed(message(exc)) from exc
    except OutputError as exc:
        raise Failed(f"cannot write the sweep's state folder: {message(exc)}") from exc
    except IncompleteOutputs as exc:
        echo(f"gpu-idle: ERROR: {message(exc)}", err=True)
        sys.exit(1)
    if summary.reports == 0:
        echo("gpu-idle sweep: WARNING: no input found (check sweep.inputs in the config, or give INPUTS)", err=True)
    echo(format_fleet(fleet, wide=wide))
    echo(total_lines(fleet))   # the same totals as run prints
    for line in trim_cut_lines(fleet):
        echo(line, err=True)
    cov = _coverage(fleet, cfg)
    if cov is not None:
        echo(coverage_lines(cov))
    report_html = os.path.join(summary.out_dir, "report.html")
    echo(f"night folder: {summary.out_dir}" + (f" (report: {report_html})" if os.path.exists(report_html) else ""))
    if summary.engine_problem:
        echo(f"gpu-idle: ERROR: {message(summary.engine_problem)}", err=True)
    echo(summary.line())
    _not_written(summary.out_dir, summary.not_written)
    prom_path = prom or (os.path.join(state_dir or cfg.sweep.state_dir, cfg.sweep.prom) if cfg.sweep.prom else None)
    prom_written = _write_prom(prom_path, fleet, summary.night, cov, create_folder=not prom)  # the setting: under state_dir
    sys.exit(1 if summary.failed or summary.not_written or not prom_written else 0)


def _not_written(night_dir: str, not_written: dict) -> None:
    """One ``gpu-idle: ERROR:`` line naming what the night ``night_dir`` should hold and does not, and why
    (its manifest says the same under ``not_written``); nothing when it is whole."""
    if not_written:
        echo(f"gpu-idle: ERROR: {night_dir}: not written: "
             + "; ".join(f"{what} ({message(why)})" for what, why in sorted(not_written.items())), err=True)


@main.command()
@click.option("--example", "example_dir", type=click.Path(file_okay=False), default=None,
              help="Write the built-in example fleet into this folder: four Nsight Systems exports, one job "
                   "profiled with the PyTorch profiler (vit-train-pytorch/rank{0,1}.pt.trace.json.gz), "
                   "their truths and labels.yaml.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="Write one synthetic training export to this .sqlite file.")
@click.option("--gpus", type=click.IntRange(min=1), default=8, show_default=True, help="Ranks, one GPU each.")
@click.option("--iterations", type=click.IntRange(min=1), default=12, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--profile", type=click.Choice(["balanced", "data-bound", "comm-heavy"]), default="balanced",
              show_default=True, help="Which planted gaps dominate.")
@click.option("--kernels", type=click.IntRange(min=100), default=None,
              help="Fleet-scale report with this many kernels in all (fast, vectorised generator; "
                   "every category planted; --iterations and --profile do not apply).")
def synth(example_dir, out_path, gpus, iterations, seed, profile, kernels):
    """Generate deterministic exports in the real Nsight Systems schema, with planted gaps
    and their truth (FILE.truth.json beside each export); --example also writes a job's PyTorch
    profiler (Kineto) traces, one per rank, with their truths."""
    from .synth import generate_training_report, make_example_fleet

    if bool(example_dir) == bool(out_path):
        raise click.UsageError("give exactly one of --example DIR or --out FILE.sqlite")
    if example_dir:
        paths = make_example_fleet(example_dir)
        echo(f"example fleet: {len(paths)} report(s) in {example_dir} (labels: {example_dir}/labels.yaml)")
        return
    try:
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    except OSError as exc:
        raise click.BadParameter(f"{out_path}: cannot create its folder ({exc.strerror or exc})",
                                 param_hint="--out") from exc
    try:
        if kernels:
            from .synth import generate_scaled_report

            generate_scaled_report(out_path, gpus=gpus, kernels=kernels, seed=seed)
        else:
            generate_training_report(out_path, gpus=gpus, iterations=iterations, seed=seed, profile=profile)
    except ValueError as exc:  # the plan is checked before anything is written
        raise click.BadParameter(message(exc), param_hint="--kernels" if kernels else "--gpus/--iterations") from exc
    except RuntimeError as exc:  # the written export does not hold what was planted (too small to plant it)
        for path in (out_path, f"{out_path}.truth.json"):
            if os.path.exists(path):
                os.unlink(path)
        raise click.ClickException(f"{message(exc)}; nothing written: give more --kernels (or fewer --gpus)") from exc
    echo(f"wrote {out_path} and {out_path}.truth.json")


@main.command("slurm-job")
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config with a dask.slurm section (repeatable; later files win).")
def slurm_job(configs):
    """Print the worker job script that `dask.slurm` submits to Slurm (nothing is submitted; a
    scheduler starts in this process only to fill in its address)."""

    cfg = _config(configs)
    if cfg.dask.slurm is None:
        raise click.UsageError("no dask.slurm section in the config (e.g. --config deploy/slurm/slurm.yaml)")
    from .engine.cluster import EngineError
    from .engine.slurm import job_script

    try:
        echo(job_script(cfg))
    except EngineError as exc:
        raise click.ClickException(message(exc)) from exc


@main.command()
@click.argument("before")
@click.argument("after")
@click.option("--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="Output folder: compare.csv, compare.json, compare.html, records/ (and before/, after/: the run "
                   "folders of a side that names reports). Without it nothing is written: the comparison is only "
                   "printed (a side that names reports is analysed into a temporary folder, removed afterwards).")
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text", show_default=True,
              help="What is printed: text (a few lines), md (the comparison in Markdown, for chat or a pull-request "
                   "comment) or json (compare.json's content).")
@click.option("--force", is_flag=True, help="Show the figures of a job that is not comparable, and each GPU pair's where GPUs were paired by "
                   "a position only (no rank), every one marked.")
@click.option("--fail-above", "fail_above", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Gate: exit status 3 when any category's idle $/month of a job grew by more than USD beyond the "
                   "job's noise floor (docs/operations.md#compare-as-a-ci-gate).")
@click.option("--fail-above-total", "fail_above_total", type=click.FloatRange(min=0), default=None, metavar="USD",
              help="Gate: exit status 3 when a job's total idle $/month grew by more than USD beyond its noise floor.")
@click.option("--strict", is_flag=True,
              help="With a gate: a job that cannot be gated (not comparable, unpriced, no noise floor) fails it too.")
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config for the sides that name reports (repeatable).")
@click.option("--window", type=click.Choice(["auto", "span", "nvtx", "periodic"]), default=None,
              help="Window rule for the sides that name reports (as `gpu-idle run --window`).")
def compare(before, after, out_dir, fmt, force, fail_above, fail_above_total, strict, configs, window):
    """Compare BEFORE and AFTER (docs/definitions.md#compare): each a `gpu-idle run --out` folder or sweep
    state folder (its stored results, nothing analysed again), or reports as `gpu-idle run` takes them (a
    file or a folder of them: analysed by `run`'s driver into DIR/before or DIR/after, reusing stored
    results). GPUs are paired by job and rank (else device ordinal, else process order); each job gets a
    comparable-or-not verdict with its reasons before any figure (withheld unless --force). Writes
    DIR/compare.csv, compare.json, compare.html and records/<job>.md (each job's page, before above after);
    without --out only prints. Exit status 2 when a side does not exist, holds no report or cannot be read,
    DIR is a gpu-idle run or sweep output folder, or DIR holds a file of these names that gpu-idle compare did
    not write (nothing is written then). Exit status 3 when the gate (--fail-above, --fail-above-total) fails."""
    from .compare.comparison import GATE_FAILED
    from .report.compare import json_result, render_markdown, render_text
    from .report.summary import ReportError
    from .runs.compare import NotWritten, OutRefused, SideNotFound, check_out, compare_sides

    overrides = {"analysis": {"window": window}} if window else {}
    cfg = _config(configs, overrides)
    try:
        check_out(out_dir)
        cfg = _writable_caches(cfg)
        result = compare_sides(cfg, before, after, out_dir, _result_cache(cfg), force=force, fail_above=fail_above,
                               fail_above_total=fail_above_total, strict=strict, log=lambda line: echo(line, err=True))
    except SideNotFound as exc:
        raise click.BadParameter(str(exc), param_hint=exc.label.upper()) from exc
    except OutRefused as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from exc
    except ReportError as exc:
        raise click.UsageError(message(exc)) from exc
    except NotWritten as exc:
        raise click.ClickException(str(exc)) from exc
    if fmt == "md":
        echo(render_markdown(result).rstrip("\n"))
    elif fmt == "json":
        echo(json_result(result).rstrip("\n"))
    else:
        echo("\n".join(printable(line) for line in render_text(result)))
        if out_dir is not None:
            echo(f"wrote {os.path.join(out_dir, 'compare.html')}, compare.csv, compare.json, records/")
    if result.get("gate", {}).get("failed"):
        sys.exit(GATE_FAILED)


from .report.command import report as _report_command  # noqa: E402

main.add_command(_report_command)
for _command in main.commands.values():  # every command's --help ends with the exit statuses
    _command.epilog = EXIT_HELP


def entry() -> None:
    """The ``gpu-idle`` command (console script and ``python -m pipeline.cli``): :func:`run_command`, then
    :func:`end_process` with its exit status.

    SIGINT ends it with exit status 130, SIGTERM with 143 (:data:`EXIT_STATUSES`), after the cluster
    it started is closed and its worker processes have ended (:mod:`pipeline.interrupts`).

    The pipeline does no linear algebra, so numpy's BLAS gets one thread
    (``OPENBLAS_NUM_THREADS=1`` unless set): OpenBLAS otherwise starts a thread per CPU when
    numpy is imported, a quarter of numpy's import time on two CPUs. The command's modules load with the
    garbage collector paused, and their objects are then frozen (:func:`_start_up`)."""
    global _OWN_PROCESS
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    _OWN_PROCESS = True
    interrupts.install()
    try:
        code = run_command()
    except interrupts.Interrupted as exc:
        echo(f"gpu-idle: interrupted by {exc.name}: stopped, exit status {exc.status} "
             "(the outputs of this run may be incomplete; run it again)", err=True)
        end_process(exc.status, wait_for_threads=False)
    end_process(code)


def run_command(args: list[str] | None = None):
    """:func:`main` on ``args`` (None: the command line) as the ``gpu-idle`` process runs it, without its
    signal handlers and its exit: returns the exit code (``SystemExit`` semantics: None, an int or a text,
    as :func:`end_process` takes it). Tests call it in their own process (tests/conftest.py ``run_cli``)."""
    printable_diagnostics()
    try:
        main.main(args, prog_name="gpu-idle")
    except SystemExit as exc:
        return exc.code
    return 0


def exit_status(code) -> int:
    """The exit status of ``code`` (``SystemExit`` semantics): None is 0, an int itself, a text is printed
    to stderr and gives 1."""
    if code is None:
        return 0
    if not isinstance(code, int):
        print(code, file=sys.stderr)
        return 1
    return code


def end_process(code, wait_for_threads: bool = True) -> None:
    """End the process with exit status ``code`` (``SystemExit`` semantics: None is 0, a text is
    printed to stderr and gives 1), skipping the interpreter's teardown when nothing else runs
    (or, with ``wait_for_threads=False``, an interrupted run's, even when other threads run).

    With pandas, pyarrow and matplotlib loaded, finalising the interpreter (destroying every
    module's objects) takes ~0.15 s, a sixth of an unchanged rerun. So when the main thread is the
    only thread left (no cluster, no fsspec event loop, no background cache write: they would be
    cut off; a file still being hashed or read ahead, :func:`pipeline.hashing.hash_ahead`, :mod:`pipeline.load.ahead`,
    holds nothing to keep), stdout and stderr are flushed, logging is shut down and :func:`os._exit` ends the
    process; every output file is already closed by then (all are written atomically in ``with``
    blocks). Otherwise it raises ``SystemExit(code)`` for a normal exit.
    """
    code = exit_status(code)
    hashing = sys.modules.get(f"{__package__}.hashing")   # imported only by a command that may hash ahead
    reading = sys.modules.get(f"{__package__}.load.ahead")   # or read ahead
    ahead = (hashing.running_ahead() if hashing is not None else 0) + (reading.reading() if reading is not None else 0)
    if wait_for_threads and threading.active_count() - ahead > 1 and not _only_dask_offload_left(ahead):
        raise SystemExit(code)
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


#: The name Dask gives its offload thread (``distributed.utils``' ``thread_name_prefix``).
DASK_OFFLOAD = "Dask-Offload"


def _only_dask_offload_left(ahead: int) -> bool:
    """Whether, besides the main thread and the ``ahead`` threads (hashing, reading ahead), the only thread still
    running is Dask's offload thread; if so it is ended, waiting for what it still has (nothing once the run's
    client is closed), and True.

    ``distributed`` (de)serialises large messages on a one-thread executor of its own
    (``distributed.utils._offload_executor``), whose thread outlives the cluster: left running, it made
    :func:`end_process` take the normal exit after every run on a cluster, the interpreter's teardown, ~0.35 s of
    one CPU after a 200-report run. Any other thread (a client still connected, its event loop) keeps the normal
    exit, the offload thread included."""
    utils = sys.modules.get("distributed.utils")
    executor = getattr(utils, "_offload_executor", None) if utils is not None else None
    if executor is None:
        return False
    others = [t for t in threading.enumerate()
              if t is not threading.main_thread() and not t.name.startswith(DASK_OFFLOAD)]
    if len(others) > ahead:
        return False
    executor.shutdown(wait=True)
    return True


if __name__ == "__main__":
    entry()
