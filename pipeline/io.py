"""File helpers: atomic writes (temporary name, then rename) and strict, diff-friendly JSON.

Every output file of the pipeline goes through :func:`atomic_path`, so a reader (or a run
killed half-way) never sees a half-written file; a temporary file a killed run left is
named ``.<name>.<random>.tmp`` beside its target.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile

import numpy as np
import pandas as pd


def _current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _current_umask()


@contextlib.contextmanager
def atomic_path(path: str):
    """Yield a temporary path beside ``path``; rename it over ``path`` on success."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp makes 0600; results are for the team to read
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _json_default(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    return str(value)


def plain_scalar(value):
    """JSON-safe scalar: NA, NaN and ±inf become null (strict JSON has no Infinity)."""
    if value is None or value is pd.NA:
        return None
    if isinstance(value, (float, np.floating)) and not math.isfinite(value):
        return None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.bool_):
        return bool(value)
    return value


def compact_json(value) -> str:
    """Strict (no NaN/Infinity), compact JSON of ``value`` on one line (numpy scalars as numbers)."""
    return json.dumps(value, default=_json_default, allow_nan=False)


def json_text(obj) -> str:
    """Strict JSON (no NaN/Infinity) of ``obj``, ending in a newline. A dict or list gets one
    line per top-level key or item, each value compact: readable and diff-friendly, yet
    written by the C encoder (``indent=`` would switch ``json`` to its pure-Python encoder,
    ~10x slower on the large rosters and timelines of per-GPU documents)."""
    compact = compact_json
    if isinstance(obj, dict) and obj:
        return "{\n" + ",\n".join(f"  {compact(str(k))}: {compact(v)}" for k, v in obj.items()) + "\n}\n"
    if isinstance(obj, list) and obj:
        return "[\n" + ",\n".join(f"  {compact(v)}" for v in obj) + "\n]\n"
    return compact(obj) + "\n"


def write_json(path: str, obj) -> None:
    """Write ``obj`` as :func:`json_text`, atomically."""
    write_text(path, json_text(obj))


def write_text(path: str, text: str) -> None:
    """Write ``text`` (UTF-8), atomically."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def prune(folder: str, keep: set[str], suffix: str) -> list[str]:
    """Remove the files of ``folder`` whose name ends with ``suffix`` and is not in ``keep`` (names,
    not paths): what an earlier run with other inputs left in a reused output folder. Returns the
    removed names, sorted; a missing folder removes nothing. Raises OSError when a file cannot be removed."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    stale = sorted(n for n in names if n.endswith(suffix) and n not in keep and not n.startswith("."))
    for name in stale:
        try:
            os.unlink(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    return stale


def remove_if_empty(folder: str) -> bool:
    """Remove ``folder`` when it exists and holds nothing (what :func:`prune` may leave); True when it was
    removed. A missing folder, one that still holds a file, or one that cannot be removed is left as it is."""
    try:
        os.rmdir(folder)
    except OSError:   # missing, not empty, or not ours to remove
        return False
    return True


def is_leftover(name: str) -> bool:
    """Whether a file name is a temporary file of :func:`atomic_path` (``.<name>.<random>.tmp``)."""
    return name.startswith(".") and name.endswith(".tmp")


def remove_leftovers(folder: str, older_than_s: float = 0.0, recursive: bool = True) -> list[str]:
    """Delete the temporary files (:func:`is_leftover`) a killed run left under ``folder`` (and its
    sub-folders with ``recursive``), last modified more than ``older_than_s`` seconds ago (0: all;
    only when no other process writes there). Returns their paths; a missing folder has none."""
    import time

    before = time.time() - older_than_s
    removed = []
    for root, dirs, files in os.walk(folder):
        if not recursive:
            dirs[:] = []
        for name in files:
            if not is_leftover(name):
                continue
            path = os.path.join(root, name)
            try:
                if older_than_s <= 0 or os.stat(path).st_mtime < before:
                    os.unlink(path)
                    removed.append(path)
            except FileNotFoundError:
                pass  # its writer renamed or removed it meanwhile
    return removed


def link_file(src: str, dst: str) -> None:
    """Make ``dst`` the same file as ``src``: a hard link (a copy where links are impossible),
    created under a temporary name and renamed into place. Raises OSError when ``src`` is unreadable."""
    folder = os.path.dirname(os.path.abspath(dst))
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{os.path.basename(dst)}.{os.urandom(6).hex()}.tmp")
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def slug(text: str) -> str:
    """``text`` made safe as a file name part (at most 80 characters)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:80]


#: A night's date in folder names (``nights/YYYY-MM-DD``, ``history/run_date=YYYY-MM-DD``).
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


def dated_dirs(parent: str, prefix: str = "") -> dict[str, str]:
    """``{date: path}`` for the sub-folders of ``parent`` named ``<prefix>YYYY-MM-DD`` (none when
    ``parent`` does not exist)."""
    out = {}
    if os.path.isdir(parent):
        for name in os.listdir(parent):
            date = name[len(prefix):] if name.startswith(prefix) else ""
            if DATE_RE.match(date) and os.path.isdir(os.path.join(parent, name)):
                out[date] = os.path.join(parent, name)
    return out
