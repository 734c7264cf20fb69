"""``gpu-idle report RESULTS --out FILE [--format html|csv|md]``: command line only."""
from __future__ import annotations

import contextlib
import os

import click

#: Output formats (pipeline.report.html.FORMATS; repeated here so that loading the CLI does not
#: import matplotlib and the template engine).
FORMATS = ("html", "csv", "md")


@click.command()
@click.argument("results", type=click.Path(exists=True, file_okay=False))
@click.option("--out", "out_path", default=None, type=click.Path(dir_okay=False),
              help="File to write (e.g. report.html); html also writes gpu-pages/ beside it. Default for the HTML "
                   "report of a run folder: RESULTS/report.html (as `make run` renders it); priced again (--config): "
                   "RESULTS/repriced-<card>/report.html, <card> the config files' names, so the run's own report "
                   "is never replaced.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="html", show_default=True,
              help="html: self-contained page with plots, trend and medical records; csv: the per-GPU cost "
                   "table for spreadsheets; md: a short summary for chat or e-mail.")
@click.option("--night", default=None, metavar="YYYY-MM-DD",
              help="With a sweep state folder: the night to report (its history up to it); default the latest "
                   "night not in the future.")
@click.option("--config", "configs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="YAML config (repeatable, layered over the defaults) whose rate card prices the report: the "
                   "folder's table is priced again with its `cost` section (rates, cluster overrides, hours per "
                   "month), nothing analysed, and the report says which card priced it. Default: the dollars as the "
                   "run priced them.")
def report(results, out_path, fmt, night, configs):
    """Render the idle-cost report of RESULTS: a `gpu-idle run --out` folder, or a nightly-sweep
    state folder (history/run_date=YYYY-MM-DD/fleet.parquet and nights/YYYY-MM-DD/), whose latest
    night not in the future is the current one and whose history gives the trend. The HTML report comes with one
    page per analysed GPU, written beside it in gpu-pages/ (pages an earlier report wrote there of
    GPUs no longer in the fleet are removed; files gpu-idle did not write are never touched) and
    linked from it; render it into the run folder itself (--out DIR/report.html) so the medical
    records' links to those pages resolve. A report priced again (--config) shows no medical records (they keep the
    run's dollars) and goes into a folder of its own: by default RESULTS/repriced-<card>/report.html (<card>: the
    config files' names, e.g. repriced-before for --config before.yaml), so the run's own report.html is never
    replaced; an explicit --out wins (in the run folder it can only take the place of the run's own report.html:
    the run folder's gpu-pages/ are that report's). Exit status 1 when it cannot be written (a full disk), 2
    when nothing could be done: RESULTS is no results folder, no such --night, a --config that cannot be used or
    cannot price the folder's table, or --out is a folder not to write into (a symlinked gpu-pages/, another
    report's pages, another gpu-idle process writing it)."""
    from ..io import OutputError, folder_lock
    from ..text import message
    from .html import ReportError, ReportNotWritten, write_report

    if out_path is None:
        if fmt != "html" or not os.path.isfile(os.path.join(results, "fleet.parquet")):
            raise click.UsageError("--out FILE is needed: its default, RESULTS/report.html, is only for the HTML "
                                   "report of a run folder")
        out_path = default_out(results, configs)
    try:
        # html writes gpu-pages/ beside the report (and records them in a run folder): one writer at a time
        with folder_lock(os.path.dirname(os.path.abspath(out_path)), command="gpu-idle report") \
                if fmt == "html" else contextlib.nullcontext():
            path = write_report(results, out_path, fmt, night, cfg=_config(configs), configs=configs)
    except OutputError as exc:  # a folder not to write (a symlinked gpu-pages/, another writer): nothing done, 2
        raise click.BadParameter(message(exc), param_hint="--out") from exc
    except ReportNotWritten as exc:  # begun, not finished (a full disk): 1
        raise click.ClickException(message(exc)) from exc
    except ReportError as exc:  # RESULTS is no results folder, no such --night: nothing done, 2
        raise click.UsageError(message(exc)) from exc
    click.echo(f"wrote {path}" + (pages_note(path) if fmt == "html" else "")
               + (f" (priced again with the rate card of {', '.join(configs)}; nothing analysed)" if configs else ""))


#: The folder a report priced again goes into by default, in the run folder: ``repriced-<card>``.
REPRICED_DIR = "repriced-{card}"


def default_out(results: str, configs=()) -> str:
    """The default ``--out`` of the HTML report of the run folder ``results``: its own ``report.html``; priced again
    with the rate card of ``configs`` (the ``--config`` files), ``repriced-<card>/report.html`` in it, ``<card>`` the
    files' names without their suffix joined by ``+`` (``--config cards/before.yaml`` -> ``repriced-before``), made
    safe as a file name: the run's own report (and its GPU pages) is never replaced by a report of other prices."""
    from ..io import slug

    if not configs:
        return os.path.join(results, "report.html")
    card = "+".join(slug(os.path.splitext(os.path.basename(os.fspath(c)))[0]) for c in configs)
    return os.path.join(results, REPRICED_DIR.format(card=card[:80] or "card"), "report.html")


def _config(configs):
    """The configuration of the ``--config`` files (None when none is given: the run's prices kept); a file that
    cannot be used: a usage error (nothing done, 2)."""
    if not configs:
        return None
    from ..config import ConfigError, load_config
    from ..text import message

    try:
        return load_config(configs)
    except ConfigError as exc:
        raise click.UsageError(message(exc)) from exc


def pages_note(report_path: str) -> str:
    """`` and N GPU page(s) in <folder>`` for the pages beside an HTML report (those its folder's manifest
    lists: the report just written's; files of others there are not counted), "" when there are none."""
    from .rendered import pages_folder, written_pages

    n = written_pages(report_path)
    return f" and {n} GPU page(s) in {pages_folder(report_path)}{os.sep}" if n else ""
