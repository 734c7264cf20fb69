"""Text from profiles and labels (file names, job and cluster labels, NVTX ranges, kernel names,
error messages that quote them) made safe for where the product writes it: a terminal
(:func:`printable`), an HTML page (:func:`visible`), Markdown (:func:`md_text`) and CSV files opened in a spreadsheet
(:func:`csv_safe`). One definition each, used by the CLI and by every writer.

Standard library only at import time: the CLI imports this module at start-up (only click and
this, tests/test_startup.py); :func:`csv_safe` imports pandas when it is called.
"""
from __future__ import annotations

import logging
import re
import unicodedata
import warnings

#: Unicode categories of characters that are never shown as themselves: controls (``Cc``: C0, DEL
#: and C1, e.g. ESC that starts a terminal escape sequence, CR that overwrites a line), format
#: characters (``Cf``: the bidirectional embeddings, overrides and isolates U+202A-U+202E,
#: U+2066-U+2069, the marks U+200E, U+200F, U+061C, zero-width spaces and joiners, U+FEFF), which
#: reorder or hide the text around them, line and paragraph separators (``Zl``, ``Zp``: new lines
#: to some viewers) and lone surrogates (``Cs``: a file name that is not UTF-8).
HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def escape_code(char: str) -> str:
    """``char`` written as a Python-style escape: ``\\x1b`` (code point below 256), ``\\u202e``,
    ``\\U000e0041``."""
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text) -> str:
    """``text`` (anything; ``str()`` of it) safe for a terminal and for a text file read with ``cat``:
    every character of a :data:`HIDDEN_CATEGORIES` category written as its :func:`escape_code`, so it
    cannot move the cursor, recolour, set the window title, clear the screen, overwrite or reorder
    what is shown around it. Everything else (accents, CJK, emoji) is kept as it is."""
    text = str(text)
    if not _NOT_PLAIN.search(text):  # printable ASCII only (the usual case): nothing to escape
        return text
    # only the characters that are not printable ASCII looked at one by one (the regex skips the rest in C)
    return _NOT_PLAIN.sub(_escaped, text)


def _escaped(found) -> str:
    """The character ``found`` (a match) as :func:`printable` writes it: its escape when of a hidden category."""
    char = found.group()
    return escape_code(char) if unicodedata.category(char) in HIDDEN_CATEGORIES else char


#: A character that is not printable ASCII (space to ``~``): what :func:`printable` must look at; a text without one
#: has no hidden character (every printable ASCII character is a letter, digit, punctuation, symbol or space).
_NOT_PLAIN = re.compile(r"[^\x20-\x7e]")


#: The characters never hidden: tab, new line and printable ASCII (bytes, for :func:`_csv_plain`'s one pass in C).
_SHOWN = b"\t\n" + bytes(range(0x20, 0x7f))
#: A character that may be hidden (anything but :data:`_SHOWN`): what :func:`visible` looks at one by one (a page
#: is mostly ASCII: the regex skips the rest in C).
_MAYBE_HIDDEN = re.compile("[^" + re.escape(_SHOWN.decode("ascii")) + "]")


def visible(text: str) -> str:
    """``text`` (a ``str``; HTML, SVG or text for a page) with every :data:`HIDDEN_CATEGORIES` character
    but tab and new line (whitespace to HTML, kept so markup and ``<pre>`` text stay as they are)
    written as its :func:`escape_code`, as :func:`printable` does. The escapes are plain ASCII
    (backslash, letters, digits), so markup stays markup and text stays text; no escape byte, control or
    bidirectional character reaches a page raw. What every value a page's template shows goes through
    (:func:`pipeline.report.jinja.environment`)."""
    return _MAYBE_HIDDEN.sub(_escaped, text)


def message(exc) -> str:
    """An error message (an exception, or any text) safe for a terminal: each line :func:`printable`, the
    line breaks kept. What the CLI prints of every error, since a message may quote a file name, a lock
    file's holder or a label that holds escape sequences."""
    return "\n".join(printable(line) for line in str(exc).split("\n"))


def printable_diagnostics() -> None:
    """Make every log record (``logging``: WARNING lines of this process's libraries) and every Python
    warning this process prints (``warnings``) :func:`message`-safe, so a file name quoted in one cannot
    write raw escape or bidirectional characters to the terminal. For the CLI's process; a second call
    does nothing."""

    factory = logging.getLogRecordFactory()
    if getattr(factory, "printable", False):
        return

    def record(*args, **kwargs):
        made = factory(*args, **kwargs)
        try:
            made.msg, made.args = message(made.getMessage()), ()
        except Exception:   # a record whose arguments do not fit its format: logging reports it as usual
            pass
        return made

    record.printable = True
    logging.setLogRecordFactory(record)
    formatwarning = warnings.formatwarning
    warnings.formatwarning = lambda *args, **kwargs: message(formatwarning(*args, **kwargs))


#: Characters of profile text that Markdown would read as syntax (links, images, emphasis, raw HTML,
#: autolinks, table cells, entities, ``$...$`` math in GitHub, GitLab, Jupyter and other viewers):
#: each is written with a backslash before it (CommonMark escapes any ASCII punctuation).
MARKDOWN_SPECIAL = "\\`*_[]<>|~&$"


def md_text(text) -> str:
    """``text`` from a profile as literal Markdown text on one line: line breaks as spaces, every other
    hidden character as its escape (:func:`printable`), then every :data:`MARKDOWN_SPECIAL` character
    backslash-escaped (the escapes' backslashes too), so no viewer makes it a link, HTML, math or a
    new line, and no raw control or bidirectional character reaches the page."""
    return _MARKDOWN_SPECIAL.sub(r"\\\g<0>", printable(" ".join(str(text).splitlines())))


#: One :data:`MARKDOWN_SPECIAL` character (what :func:`md_text` puts a backslash before).
_MARKDOWN_SPECIAL = re.compile("[" + re.escape(MARKDOWN_SPECIAL) + "]")


def md_code(text) -> str:
    """``text`` from a profile as one Markdown code span, shown as it is: on one line, every hidden character as its
    escape (:func:`printable`), no backslash escape (a code span shows backslashes as they are, and nothing in it is
    a link, HTML or emphasis), fenced by one backtick more than the longest run of backticks it holds, with a space
    inside the fences when it starts or ends with a backtick (CommonMark's code spans): ``a::b<int>`` ->
    `` `a::b<int>` ``."""
    text = printable(" ".join(str(text).splitlines()))
    fence = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_unescape(text: str) -> str:
    """The text :func:`md_text` gave, its backslash escapes of ASCII punctuation removed (the escapes
    of hidden characters, ``\\x1b``, stay)."""
    return re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", text)


#: First characters that make a spreadsheet (Excel, LibreOffice, Google Sheets) read a CSV cell as a
#: formula (``=HYPERLINK(...)``, ``@SUM(...)``, ``+1+cmd|...``, ``-2+3``), tab and carriage return
#: included (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """One CSV cell's value: a text spelled as a page spells it (:func:`visible`: ESC, BEL, CR, U+202E and
    every other hidden character but tab and new line as its escape, so ``cat fleet.csv`` cannot retitle or
    clear the terminal nor reorder what it shows), then, starting with a :data:`FORMULA_START` character,
    with a leading ``'`` (the spreadsheet shows the text, never runs it); anything else is returned as it is."""
    if not isinstance(value, str):
        return value
    value = visible(value)
    return "'" + value if value.startswith(FORMULA_START) else value


#: A line starting with a :data:`FORMULA_START` character.
_FORMULA_LINE = re.compile("\n[" + re.escape("".join(FORMULA_START)) + "]")


def _csv_plain(texts: list) -> bool:
    """Whether :func:`csv_cell` leaves every text of ``texts`` as it is: none holds a character but tab, new line
    and printable ASCII (:data:`_MAYBE_HIDDEN`), and none starts with a :data:`FORMULA_START` character (looked at
    over the texts joined by new lines, in C: a line inside a text starting with one answers False too)."""
    joined = "\n" + "\n".join(texts)
    return (joined.isascii() and not joined.encode("ascii").translate(None, _SHOWN)
            and not _FORMULA_LINE.search(joined))


def csv_safe(frame):
    """``frame`` (a pandas DataFrame) for ``to_csv``: every text cell of its text columns (object,
    string or categorical dtype) through :func:`csv_cell` (hidden characters spelled out, formulas quoted). Numeric, boolean and datetime columns are
    untouched (a negative number stays a number); the frame itself is not changed (a copy is returned
    when a cell changes, else ``frame``)."""
    import pandas as pd

    changed = {}
    for i, dtype in enumerate(frame.dtypes.tolist()):  # the text columns by their dtype: one column read each
        if not (pd.api.types.is_object_dtype(dtype) or pd.api.types.is_string_dtype(dtype)
                or isinstance(dtype, pd.CategoricalDtype)):
            continue
        column = frame.iloc[:, i]
        values = column.astype(object).tolist()
        if _csv_plain([v for v in values if isinstance(v, str)]):
            continue  # no cell of it changes (one look at the column's texts, not a call per cell)
        safe = [csv_cell(v) for v in values]
        if any(a is not b for a, b in zip(safe, values)):
            changed[i] = pd.Series(safe, index=column.index, dtype=object)
    if not changed:
        return frame
    out = frame.copy()
    for i, safe in changed.items():
        out.isetitem(i, safe)
    return out
