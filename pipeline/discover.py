"""Expand INPUT arguments (files, directories, globs; any fsspec URL) into report paths.

Directories are searched recursively for ``*.sqlite`` and ``*.nsys-rep``.
Results are de-duplicated (the same file named twice is analysed once) and
sorted, so runs are deterministic. Local paths come back as plain paths.
"""
from __future__ import annotations

import os

import fsspec

REPORT_SUFFIXES = (".sqlite", ".nsys-rep")
GLOB_CHARS = set("*?[")


class InputError(Exception):
    """An INPUT matched nothing (message names it)."""


def _is_local(protocol) -> bool:
    protocols = protocol if isinstance(protocol, (tuple, list)) else (protocol,)
    return any(p in ("file", "local") for p in protocols)


def discover(inputs, suffixes=REPORT_SUFFIXES) -> tuple[list[str], list[tuple[str, str]]]:
    """Return ``(report_paths, problems)``.

    ``problems`` lists ``(input, message)`` for inputs that matched nothing, so
    the sweep can record them as error rows and go on with the rest.
    """
    found: list[str] = []
    problems: list[tuple[str, str]] = []
    for item in inputs:
        item = str(item)
        fs, path = fsspec.core.url_to_fs(item)
        local = _is_local(fs.protocol)

        def render(p: str) -> str:
            return p if local else fs.unstrip_protocol(p)

        if any(c in GLOB_CHARS for c in path):
            matches = sorted(m for m in fs.glob(path) if fs.isfile(m))
            if not matches:
                problems.append((item, f"{item}: no file matches this pattern"))
            found.extend(render(m) for m in matches)
        elif fs.isdir(path):
            matches = sorted(m for m in fs.find(path) if m.endswith(suffixes))
            if not matches:
                problems.append((item, f"{item}: directory holds no {' or '.join(suffixes)} file"))
            found.extend(render(m) for m in matches)
        elif fs.exists(path):
            found.append(render(path))
        else:
            problems.append((item, f"{item}: no such file or directory"))
    unique = sorted(dict.fromkeys(os.path.normpath(p) if not p.count("://") else p for p in found))
    return unique, problems
