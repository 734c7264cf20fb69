"""Expand INPUT arguments (files, directories, globs; any fsspec URL) into report paths.

Directories (and object-storage prefixes such as ``s3://bucket/prefix``) are
searched recursively for ``*.sqlite`` and ``*.nsys-rep``; globs
(``s3://bucket/prefix/**/*.nsys-rep``) keep the files they match. Results are
de-duplicated (the same file named twice is analysed once) and sorted, so runs
are deterministic. Local paths come back as plain paths, remote ones as URLs
(``s3://bucket/key``). Remote URLs are listed with the ``storage`` section of
the config (endpoint, profile, anonymous access, retries; see
:mod:`pipeline.inputs.storage`).
"""
from __future__ import annotations

import os

from .storage import (
    DEFAULT_RETRIES,
    bucket_problem,
    is_remote,
    missing_message,
    open_fs,
)

REPORT_SUFFIXES = (".sqlite", ".nsys-rep")
GLOB_CHARS = set("*?[")


class InputError(Exception):
    """An INPUT matched nothing (message names it)."""


def _cause(exc: BaseException) -> str:
    text = str(exc).strip() or repr(exc)
    return f"{type(exc).__name__}: {text}"


def _expand(item: str, suffixes, storage) -> tuple[list[str], str | None]:
    """Reports of one INPUT, or a message saying why there are none."""
    remote = is_remote(item)
    if remote:
        options = getattr(storage, "options", None) or {}
        retries = getattr(storage, "retries", DEFAULT_RETRIES)
        fs, path = open_fs(item, options, retries, fresh=True)
    else:
        fs, path = open_fs(item)

    def render(p: str) -> str:
        return fs.unstrip_protocol(p) if remote else p

    try:
        return _match(fs, path, item, remote, suffixes, render)
    except FileNotFoundError:  # e.g. listing a bucket that does not exist
        if remote:
            return [], missing_message(fs, item, path)
        return [], f"{item}: no such file or directory"


def _match(fs, path: str, item: str, remote: bool, suffixes, render) -> tuple[list[str], str | None]:
    if any(c in GLOB_CHARS for c in path):
        matches = sorted(m for m in fs.glob(path) if fs.isfile(m))
        if not matches:
            return [], (remote and bucket_problem(fs, item, path)) or f"{item}: no file matches this pattern"
        return [render(m) for m in matches], None
    if fs.isdir(path):
        matches = sorted(m for m in fs.find(path) if m.endswith(suffixes))
        if not matches:
            return [], f"{item}: {'prefix' if remote else 'directory'} holds no {' or '.join(suffixes)} file"
        return [render(m) for m in matches], None
    if fs.exists(path):
        return [render(path)], None
    if remote:
        return [], missing_message(fs, item, path)
    return [], f"{item}: no such file or directory"


def discover(inputs, suffixes=REPORT_SUFFIXES, storage=None) -> tuple[list[str], list[tuple[str, str]]]:
    """Return ``(report_paths, problems)``.

    Args:
        inputs: paths, directories, globs or fsspec URLs.
        suffixes: report file suffixes searched for in directories and prefixes.
        storage: the config's :class:`~pipeline.config.StorageConfig` (or anything
            with ``options`` and ``retries``) used for remote URLs; ``None``: defaults.
    ``problems`` lists ``(input, message)`` for inputs that matched nothing or
    could not be listed (missing bucket, access denied, unreachable endpoint),
    each message starting with the input, so the sweep can record them as
    error rows and go on with the rest.
    """
    found: list[str] = []
    problems: list[tuple[str, str]] = []
    for item in inputs:
        item = str(item)
        try:
            paths, problem = _expand(item, suffixes, storage)
        except Exception as exc:  # noqa: BLE001 - one bad input must not stop the sweep
            paths, problem = [], f"{item}: cannot list ({_cause(exc)})"
        found.extend(paths)
        if problem:
            problems.append((item, problem))
    # The same file named twice (other spelling, a symlink) is analysed once, under its first name.
    by_identity: dict[str, str] = {}
    for p in found:
        local = "://" not in p
        by_identity.setdefault(os.path.realpath(p) if local else p, os.path.normpath(p) if local else p)
    unique = sorted(by_identity.values())
    return unique, problems
