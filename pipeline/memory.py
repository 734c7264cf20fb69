"""Giving freed memory back to the operating system between the big steps of a report.

glibc's ``malloc`` keeps memory that numpy and pandas have freed in its heaps for reuse, and the
threads that decode and analyse each have heaps of their own; after loading a 3M-kernel export
~90 MiB of freed memory still counted in the process's RSS (issue 16). :func:`release` asks glibc
to return it (``malloc_trim(0)``: a walk over the free lists, a few ms). Elsewhere it does nothing.
:func:`small_pages`: the loader's arrays in plain pages (no transparent huge page to compact memory for).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import threading

import numpy as np


@functools.lru_cache(maxsize=1)
def _trim():
    """glibc's ``malloc_trim``, or None (another C library, or none found)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release() -> None:
    """Return the memory the C heap holds free to the operating system (glibc only; else nothing)."""
    trim = _trim()
    if trim is not None:
        trim(0)


_PAGES_LOCK = threading.Lock()
_PAGES_USERS = [0, None]  # loads inside :func:`small_pages` now, numpy's setting before the first


@contextlib.contextmanager
def small_pages():
    """Within: numpy asks for no transparent huge pages for its large arrays (``madvise(MADV_HUGEPAGE)``,
    its default from 4 MiB). Where the kernel then compacts memory on the spot to find a 2 MiB page
    (``defrag`` ``madvise``, the usual setting), each first touch of such an array can stall: loading a
    2M-kernel export spent 0.5-1.3 s of system time so (0.3 s with plain pages). Several threads may be
    inside at once; the setting comes back when the last leaves. Nothing happens with a numpy without it."""
    setter = getattr(getattr(np, "_core", None), "multiarray", None)
    setter = getattr(setter, "_set_madvise_hugepage", None)
    if setter is None:
        yield
        return
    with _PAGES_LOCK:
        if not _PAGES_USERS[0]:
            _PAGES_USERS[1] = setter(False)
        _PAGES_USERS[0] += 1
    try:
        yield
    finally:
        with _PAGES_LOCK:
            _PAGES_USERS[0] -= 1
            if not _PAGES_USERS[0]:
                setter(_PAGES_USERS[1])
