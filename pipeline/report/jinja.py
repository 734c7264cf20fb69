"""The one Jinja environment setting of the report's pages (report.html and the GPU pages)."""
from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape


def environment(**filters) -> Environment:
    """A Jinja environment over ``pipeline/report/templates``: HTML autoescaped, undefined names an
    error (StrictUndefined), block whitespace trimmed, the trailing newline kept; ``filters`` added."""
    env = Environment(loader=PackageLoader("pipeline.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters.update(filters)
    return env
