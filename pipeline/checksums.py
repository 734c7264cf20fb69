"""Content checksums of cache entries: written with each entry, checked on every use (docs/operations.md#caches).

Every cache entry (a columnar cache folder, an export in the export cache, a stored result, a
staged copy of a remote report, a cached plot or page of the report) has a small JSON *sidecar*,
``{"sha256": {file name: hex digest}, ...}``, written after the files it covers and atomically
(under a temporary name, then renamed), so an entry without a readable sidecar is one a killed
run or an older version left. Using an entry means reading its files'
bytes once, hashing them (SHA-256, ~1-2 GB/s) and parsing those same bytes: no second pass. A file
whose bytes differ from its recorded digest, a missing or unreadable file or sidecar is a
:class:`EntryCheckFailed`: the caller treats the entry as a cache miss (removes it, rebuilds it and
says so in one line, :func:`note`), never as a failure and never as a number.

:func:`entry_digest` is one digest of a whole entry (of its sidecar's digests): what a stored
result records of each entry it was computed from (:mod:`pipeline.store.results`).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import sys

from .io import atomic_path, file_sha256
from .model import ProfileError
from .snapshot import snapshot_key


class EntryCheckFailed(ValueError):
    """A cache entry whose content is not what its sidecar records (or that has no readable
    sidecar, or a file that cannot be read): a damaged entry, so a ``ValueError`` as the damaged
    entries callers already catch. The message says what, for :func:`note`."""


def file_digest(path: str | os.PathLike) -> str:
    """SHA-256 hex digest of a file's bytes (:func:`pipeline.io.file_sha256`). Raises OSError."""
    return file_sha256(path)[0]


def write_sums(sidecar: str | os.PathLike, files: dict, **extra) -> None:
    """Write the sidecar ``sidecar`` (atomically): ``{"sha256": files, **extra}``; ``files`` maps each
    covered file's name to its SHA-256 hex digest, ``extra`` is kept as is (JSON values). Write it
    after the files it covers. Raises OSError."""
    with atomic_path(os.fspath(sidecar)) as tmp, open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"sha256": dict(sorted(files.items())), **extra}, fh, sort_keys=True)


def seal(sidecar: str | os.PathLike, folder: str | os.PathLike, names, **extra) -> None:
    """:func:`write_sums` of the files ``names`` of ``folder`` (hashed from disk) and ``extra``. Raises OSError."""
    write_sums(sidecar, {name: file_digest(os.path.join(folder, name)) for name in names}, **extra)


#: Bytes hashed then written at a time by :func:`written_digest`: a piece is written while it is still in the CPU's
#: cache. Whole columns in one write each (16 MB for 2M timestamps) cost ten times the system time in a run whose
#: other threads are busy (0.3 CPU-s for a 2M-kernel cache entry instead of 0.03).
WRITE_PIECE = 1 << 20


class _Hashing(io.RawIOBase):
    """A binary file being written (``fh``) that hashes (SHA-256) every byte written through it, as it passes."""

    def __init__(self, fh):
        super().__init__()
        self.fh, self.sha = fh, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        for at in range(0, view.nbytes, WRITE_PIECE):
            piece = view[at:at + WRITE_PIECE]
            self.sha.update(piece)
            self.fh.write(piece)  # a buffered file writes all of it, or raises
        return view.nbytes


def written_digest(path: str | os.PathLike, write) -> str:
    """Write the file ``path`` (created, or emptied) by ``write(fh)``, ``fh`` a binary file object, and return the
    SHA-256 hex digest of the bytes written through ``fh``: hashed as they are written, never read back, so a
    file is sealed (:func:`write_sums`) at the price of its hash alone. Raises OSError (or what ``write`` raises)."""
    with open(path, "wb") as fh:
        sink = _Hashing(fh)
        write(sink)
    return sink.sha.hexdigest()


def read_sums(sidecar: str | os.PathLike) -> dict:
    """The sidecar's document (``"sha256"``: name -> hex digest, and its extra keys). Raises
    :class:`EntryCheckFailed` when it is missing, unreadable or malformed."""
    try:
        with open(sidecar, encoding="utf-8") as fh:
            doc = json.load(fh)
    except FileNotFoundError:
        raise EntryCheckFailed("has no checksum (written by an earlier version, or not completely)") from None
    except (OSError, ValueError) as exc:
        raise EntryCheckFailed(f"its checksum file cannot be read ({type(exc).__name__})") from None
    files = doc.get("sha256") if isinstance(doc, dict) else None
    if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
        raise EntryCheckFailed("its checksum file is malformed")
    return doc


def _checked(name: str, digest: str, sums: dict) -> None:
    """Raise :class:`EntryCheckFailed` unless ``digest`` is the one ``sums`` records for ``name``."""
    want = sums["sha256"].get(name)
    if want is None:
        raise EntryCheckFailed(f"{name} has no recorded checksum")
    if digest != want:
        raise EntryCheckFailed(f"{name} does not match its recorded checksum (changed since it was written)")


def _unreadable(name: str, exc: OSError) -> EntryCheckFailed:
    return EntryCheckFailed(f"{name} cannot be read ({exc.strerror or type(exc).__name__})")


def read_checked(folder: str | os.PathLike, name: str, sums: dict) -> bytes:
    """The bytes of the file ``name`` of ``folder``, checked against its digest in the sidecar
    document ``sums`` (:func:`read_sums`): read once, hashed, returned for parsing. Raises
    :class:`EntryCheckFailed` when it is not listed, cannot be read or its bytes differ."""
    try:
        with open(os.path.join(folder, name), "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise _unreadable(name, exc) from None
    _checked(name, hashlib.sha256(data).hexdigest(), sums)
    return data


def record_digest(key: str, values: list) -> str:
    """SHA-256 hex digest of one record of a JSON index (``key`` and its JSON ``values``), kept with the
    record so that a record changed in place is dropped, not trusted
    (:class:`pipeline.store.results.IdentityIndex`)."""
    return hashlib.sha256(json.dumps([key, values]).encode()).hexdigest()


#: The checksum sidecar of a cache entry that is one file: ``<file>`` + this (:func:`sidecar_of`).
FILE_SUMS_SUFFIX = ".sums.json"


def sidecar_of(path: str | os.PathLike) -> str:
    """The checksum sidecar of the one-file cache entry ``path``: ``<path>.sums.json``."""
    return f"{os.fspath(path)}{FILE_SUMS_SUFFIX}"


def seal_file(path: str | os.PathLike, digest: str) -> None:
    """Record ``digest`` (the SHA-256 of the one-file entry ``path``, hashed before it was renamed into
    place) in its sidecar (:func:`sidecar_of`). Raises OSError."""
    write_sums(sidecar_of(path), {os.path.basename(path): digest})


def content_digest(path: str) -> str:
    """SHA-256 of the one-file entry ``path`` as the loader hashes it anyway
    (:func:`~pipeline.snapshot.snapshot_key`, remembered per process), so a checked entry is read
    once. Raises OSError, or :class:`EntryCheckFailed` when another process holds SQLite's write lock on it."""
    try:
        return snapshot_key(path)
    except ProfileError as exc:
        raise EntryCheckFailed(f"cannot be read ({exc})") from None


def check_sealed_file(path: str | os.PathLike, digest_of=content_digest) -> None:
    """Check the one-file entry ``path`` against its sidecar: ``digest_of(path)`` (its SHA-256, by default
    :func:`content_digest`) must be the recorded one. Raises :class:`EntryCheckFailed` (no sidecar, file
    missing or unreadable, other bytes)."""
    sums = read_sums(sidecar_of(path))
    name = os.path.basename(path)
    try:
        digest = digest_of(os.fspath(path))
    except FileNotFoundError:
        raise EntryCheckFailed(f"{name} is missing (its checksum file is left)") from None
    except OSError as exc:
        raise _unreadable(name, exc) from None
    _checked(name, digest, sums)


def entry_digest(sums: dict) -> str:
    """One SHA-256 hex digest of a whole entry: of the ``(name, digest)`` pairs of its sidecar
    document ``sums`` (:func:`read_sums`), in name order."""
    lines = "".join(f"{name}\0{digest}\n" for name, digest in sorted(sums["sha256"].items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def source(entry: str | os.PathLike, sums_path: str | os.PathLike, sums: dict) -> dict:
    """What a result computed from the cache entry ``entry`` (a folder or a file) records of it:
    ``{"entry": its absolute path, "sums": its sidecar's, "digest":`` :func:`entry_digest` ``}``."""
    return {"entry": os.path.abspath(entry), "sums": os.path.abspath(sums_path), "digest": entry_digest(sums)}


def file_source(path: str | os.PathLike) -> dict | None:
    """:func:`source` of the one-file entry ``path`` (a cached export, a staged copy), or None when it has
    no readable sidecar (:func:`sidecar_of`)."""
    try:
        return source(path, sidecar_of(path), read_sums(sidecar_of(path)))
    except EntryCheckFailed:
        return None


def check_source(src: dict) -> None:
    """Check that the cache entry a result recorded (:func:`source`) still holds what the result was
    computed from: an entry that is gone passes (the result is keyed by its report's own content); one
    that is present must have a readable sidecar giving the recorded digest. Raises
    :class:`EntryCheckFailed` naming the entry."""
    try:
        entry, sums_path, digest = src["entry"], src["sums"], src["digest"]
    except (KeyError, TypeError):
        raise EntryCheckFailed("its record of the cache entries it came from is malformed") from None
    if not os.path.lexists(entry):
        return
    try:
        now = entry_digest(read_sums(sums_path))
    except EntryCheckFailed as exc:
        raise EntryCheckFailed(f"it was computed from {entry}, which {exc} now") from None
    if now != digest:
        raise EntryCheckFailed(f"it was computed from {entry}, which holds other content now")


def note(text: str) -> None:
    """Say on stderr, in one line, that a cache entry failed its check and what was done instead
    (``gpu-idle: WARNING: <text>``); on a Dask worker, the worker's stderr."""
    print(f"gpu-idle: WARNING: {' '.join(text.split())}", file=sys.stderr, flush=True)
