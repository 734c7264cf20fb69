"""Giving freed memory back to the operating system between the big steps of a report.

glibc's ``malloc`` keeps memory that numpy and pandas have freed in its heaps for reuse, and the
threads that decode and analyse each have heaps of their own; after loading a 3M-kernel export
~90 MiB of freed memory still counted in the process's RSS (issue 16). :func:`release` asks glibc
to return it (``malloc_trim(0)``: a walk over the free lists, a few ms). Elsewhere it does nothing.

The other way round, while one report's GPUs are analysed (:func:`reusing_heap`), freed memory is kept for
the next array instead: handing it back after each GPU, or each time the heap's top grows past glibc's
moving threshold, made every large temporary array of the next GPU fresh pages from the system, and
faulting them in was ~20 % of the analysis' CPU time (2M kernels, 8 GPUs: 126k page faults, 0.27 s of
system time, against 15k and 0.02 s kept).

:func:`small_pages`: the loader's arrays in plain pages (no transparent huge page to compact memory for).
"""
from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import gc
import threading



#: glibc's ``mallopt`` parameters (malloc.h).
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
#: What :func:`reusing_heap` sets: arrays up to 32 MiB come from the heap (glibc's own moving threshold
#: stops there on 64-bit systems), and up to 1 GiB free at the heap's top stays (one GPU's analysis of a
#: 3M-kernel, 8-GPU report frees more than 64 MiB at once: trimmed, the next GPU faults it all in again).
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30


@functools.lru_cache(maxsize=None)
def _glibc(name: str, *argtypes):
    """glibc's function ``name`` taking ``argtypes`` and returning an int, or None (another C library, or none
    found)."""
    try:
        fn = getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = list(argtypes), ctypes.c_int
    return fn


def _mallopt():
    """glibc's ``mallopt``, or None."""
    return _glibc("mallopt", ctypes.c_int, ctypes.c_int)


def _trim():
    """glibc's ``malloc_trim``, or None."""
    return _glibc("malloc_trim", ctypes.c_size_t)


@contextlib.contextmanager
def reusing_heap():
    """Within: memory freed is kept in the C heap for the next allocation (large arrays from the heap, up to
    :data:`MMAP_THRESHOLD`; the heap's top trimmed only beyond :data:`TRIM_THRESHOLD`); on the way out, all
    that is free goes back to the system (:func:`release`), so what the process holds after is as before.
    After, the thresholds are those glibc's moving ones reach at most (arrays up to 32 MiB from the heap, its
    top trimmed beyond 64 MiB): once a value is set, glibc moves them no more. glibc only; elsewhere it does
    nothing but :func:`release`."""
    mallopt = _mallopt()
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    try:
        yield
    finally:
        if mallopt is not None:
            mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
        release()


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
    import numpy as np   # here: the collector's pause (:func:`collector_paused`) is wanted before numpy is imported

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


@contextlib.contextmanager
def collector_paused():
    """No cyclic garbage collection within (as it was after): for steps that make many objects that live on, or
    many short-lived ones, where each of the collector's passes would walk every object the process holds (the
    modules, every report's results) again: importing the stages, the reduce and the writing of a run's documents.
    What they leave is collected once it resumes."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
