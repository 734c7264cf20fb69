"""Giving freed memory back to the operating system between the big steps of a report.

glibc's ``malloc`` keeps memory that numpy and pandas have freed in its heaps for reuse, and the
threads that decode and analyse each have heaps of their own; after loading a 3M-kernel export
~90 MiB of freed memory still counted in the process's RSS (issue 16). :func:`release` asks glibc
to return it (``malloc_trim(0)``: a walk over the free lists, a few ms). Elsewhere it does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools


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
