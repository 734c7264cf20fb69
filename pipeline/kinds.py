"""The kinds of input gpu-idle reads, in one registry (docs/inputs.md): each kind's file names, how its
content is recognised when the name alone does not say it, the loader that reads it and whether it is
exported first. Discovery (:mod:`pipeline.inputs.discover`), staging (:mod:`pipeline.inputs.storage`),
the exporter (:mod:`pipeline.inputs.export`), the columnar cache (:mod:`pipeline.load.cache`), the
default labels (:meth:`pipeline.config.Config.labels_for`) and the GPU pages
(:func:`pipeline.report.gpu_page.clock_words`) all ask this module; none keeps a suffix list of its own.

Names are matched case-insensitively, the longest suffix first (``run.pt.trace.json.gz`` is a trace
by its name, ``run.json.gz`` one only when its first bytes read as a trace).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

#: Loaders (``InputKind.loader``): an Nsight Systems SQLite export (``pipeline.load.report.load_report``)
#: or a PyTorch profiler trace (``pipeline.load.kineto.load_kineto``).
SQLITE, KINETO = "sqlite", "kineto"
#: How much of a file (uncompressed) a sniff reads.
SNIFF_BYTES = 1 << 20
#: Keys of which one appears near the start of every Chrome / PyTorch profiler trace.
TRACE_MARKERS = (b'"traceEvents"', b'"ph"', b'"deviceProperties"', b'"distributedInfo"')
#: The first 16 bytes of every SQLite database file.
SQLITE_MAGIC = b"SQLite format 3\x00"


def looks_like_trace(head: bytes) -> bool:
    """True when ``head``, the first bytes of a ``.json`` or ``.json.gz`` file, may be a Chrome trace
    (a PyTorch profiler trace): gzip data that does not inflate (a damaged trace is a report with
    an error row, not a file to ignore), or JSON text with one of :data:`TRACE_MARKERS` in its
    first :data:`SNIFF_BYTES`. Other JSON is not a report."""
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=31).decompress(head, SNIFF_BYTES)
        except zlib.error:
            return True
        if not head:  # not even the first bytes inflate (a damaged or truncated header)
            return True
    head = head[:SNIFF_BYTES]
    return any(marker in head for marker in TRACE_MARKERS)


def looks_like_sqlite(head: bytes) -> bool:
    """True when ``head``, the first bytes of a file, begin with :data:`SQLITE_MAGIC`."""
    return head[:len(SQLITE_MAGIC)] == SQLITE_MAGIC


@dataclass(frozen=True)
class InputKind:
    """One kind of input.

    ``name``: how messages and docs call it. ``named``: file-name suffixes (lower case) that make a file
    of this kind by name alone. ``sniffed``: suffixes of names shared with other files (``.json``, ``.db``):
    a file found in a folder or prefix is of this kind only when ``sniff(first bytes)`` is True (a file
    named on the command line is always read). ``not_it``: why a sniffed file is passed over. ``loader``:
    :data:`SQLITE` or :data:`KINETO`. ``needs_export``: read only after the nsys CLI exports it to SQLite."""

    name: str
    named: tuple[str, ...]
    loader: str
    needs_export: bool = False
    sniffed: tuple[str, ...] = ()
    sniff: object = None
    not_it: str = ""

    @property
    def suffixes(self) -> tuple[str, ...]:
        """Every suffix of the kind, the longest first."""
        return tuple(sorted(self.named + self.sniffed, key=len, reverse=True))


#: Nsight Systems reports (``.qdrep``: the name before 2021.4), exported to SQLite first.
NSYS_REPORT = InputKind("Nsight Systems report", (".nsys-rep", ".qdrep"), SQLITE, needs_export=True)
#: Nsight Systems SQLite exports (``nsys export --type sqlite``, or ``nsys stats``' ``.sqlite``).
SQLITE_EXPORT = InputKind("Nsight Systems SQLite export", (".sqlite", ".sqlite3"), SQLITE, sniffed=(".db",),
                          sniff=looks_like_sqlite, not_it="not SQLite")
#: PyTorch profiler (Kineto) traces: ``*.pt.trace.json(.gz)`` by name (``tensorboard_trace_handler``),
#: other ``.json`` / ``.json.gz`` by their first bytes.
PYTORCH_TRACE = InputKind("PyTorch profiler trace", (".pt.trace.json.gz", ".pt.trace.json"), KINETO,
                          sniffed=(".json.gz", ".json"), sniff=looks_like_trace, not_it="not a trace")
#: Every kind, in the order docs/inputs.md lists them.
KINDS = (NSYS_REPORT, SQLITE_EXPORT, PYTORCH_TRACE)
#: Every suffix of every kind, the longest first (what a folder or prefix is searched for).
SUFFIXES = tuple(sorted((s for k in KINDS for s in k.suffixes), key=len, reverse=True))


#: What gpu-idle reads, in the words of a message about a file that is none of it (:func:`not_an_input`).
READS = "Nsight Systems reports and exports, PyTorch profiler traces"
#: Archive names (lower case, the longest first): gpu-idle does not unpack archives; their files, unpacked, may be inputs.
ARCHIVES = (".tar.bz2", ".tar.zst", ".tar.gz", ".tar.xz", ".tbz2", ".tgz", ".txz", ".tar", ".zip", ".7z")


def not_an_input(path: str) -> str:
    """Why a file named like none of the :data:`KINDS` is not read: ``not an input gpu-idle reads (…)``,
    and for an archive (:data:`ARCHIVES`) that its files, unpacked, may be."""
    lower = str(path).lower()
    archive = next((s for s in ARCHIVES if lower.endswith(s)), None)
    unpack = f": a {archive} archive is not unpacked; unpack it and name its files or folder" if archive else ""
    return f"not an input gpu-idle reads ({READS}){unpack}"


def suffix_of(path: str) -> str | None:
    """The registry suffix ``path``'s file name ends with (lower case, the longest that matches), or None."""
    lower = str(path).lower()
    return next((s for s in SUFFIXES if lower.endswith(s)), None)


def kind_of(path: str) -> InputKind | None:
    """The kind of input ``path`` (a path or URL) is by its name (:func:`suffix_of`), or None for a name
    no kind has. A sniffed name (``x.json``, ``x.db``) gets its kind without reading the file."""
    suffix = suffix_of(path)
    return next((k for k in KINDS if suffix in k.suffixes), None) if suffix else None


def needs_sniff(path: str) -> bool:
    """True when ``path``'s name alone does not make it an input (a ``.json``, ``.json.gz`` or ``.db``):
    a folder search keeps it only if :func:`passed_over` of its first bytes is None."""
    kind, suffix = kind_of(path), suffix_of(path)
    return kind is not None and suffix in kind.sniffed


def passed_over(path: str, head: bytes) -> str | None:
    """Why a file found in a folder whose name :func:`needs_sniff` is not an input of its kind, from its
    first bytes ``head`` (``kind.not_it``: ``"not a trace"``, ``"not SQLite"``), or None when it is one."""
    kind = kind_of(path)
    return None if kind is None or kind.sniff(head) else kind.not_it


def is_trace(path: str) -> bool:
    """True when ``path``'s name makes it a PyTorch profiler trace (read by the Kineto loader)."""
    return kind_of(path) is PYTORCH_TRACE


def stem(name: str) -> str:
    """``name`` without its registry suffix (``job7.pt.trace.json.gz`` -> ``job7``); unchanged for another name."""
    suffix = suffix_of(name)
    return name[: -len(suffix)] if suffix else name
