"""The one Jinja environment setting of the report's pages (report.html, the GPU pages, compare.html)."""
from __future__ import annotations

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from ..text import visible


def shown(value):
    """What a page's ``{{ ... }}`` writes of ``value`` (the environment's ``finalize``, before autoescape):
    a text (``str``) with its hidden characters as visible escapes (:func:`pipeline.text.visible`), a
    :class:`~markupsafe.Markup` (SVG, a record's HTML) likewise and still markup; anything else (numbers,
    None) as it is. So no template can show a profile's escape or bidirectional character raw (issue 23)."""
    if isinstance(value, Markup):
        return Markup(visible(value))
    return visible(value) if isinstance(value, str) else value


def environment(**filters) -> Environment:
    """A Jinja environment over ``pipeline/report/templates``: HTML autoescaped, every shown value through
    :func:`shown` first, undefined names an error (StrictUndefined), block whitespace trimmed, the
    trailing newline kept; ``filters`` added."""
    env = Environment(loader=PackageLoader("pipeline.report", "templates"),
                      autoescape=select_autoescape(["html", "j2"]), undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, finalize=shown)
    env.filters.update(filters)
    return env
