"""The uncompressed size of a gzip file without inflating it, from its trailer: one helper for the two
places that need it, the Kineto loader (the size of the buffer it inflates a ``.json.gz`` into:
:func:`pipeline.load.kineto.read_text`) and the memory check that refuses a report too big for a worker
(:func:`pipeline.inputs.discover.too_big`, whose estimate is this size x ``dask.memory_factor``).

A gzip member ends with ISIZE, its uncompressed size mod 2**32, little endian, in its last 4 bytes
(RFC 1952, 2.3.1). Two things keep that from being the file's uncompressed size:

* ISIZE wraps at 4 GiB. A member of ISIZE ``i`` inflates to ``i + k * 2**32`` bytes for some k >= 0;
  the candidates are the sizes not below the compressed size less deflate's largest growth
  (:func:`least_inflated`: JSON compresses 10-20x, so its text is never smaller than its gzip file;
  incompressible data comes out a little under it, by at most zlib's ``deflateBound``, about 0.03%)
  and not above 1032 x the compressed size (deflate cannot compress more than 1032:1). Of them, the one
  nearest (on a log scale) to what the first :data:`HEAD_SNIFF` compressed bytes inflate to, scaled to the
  whole file, is taken: a 6 MB file whose head inflates 700:1 is taken for the 4 GiB + ISIZE it holds,
  not for ISIZE; a trace compressing 10-20x keeps the smallest. (A file whose head compresses far less
  than the rest can still be underestimated: the loader stops inflating at the worker's budget,
  :func:`pipeline.load.kineto.read_text`.) When the smallest candidate is above 1032 x the compressed
  size, it is not one member's size: the file is then treated as having several members (below).
* A file may hold several members one after the other (``cat a.gz b.gz``, bgzip's blocks of at most
  64 KiB); its trailer gives the last member's ISIZE only. The first :data:`HEAD_SNIFF` bytes are
  inflated (output discarded) to see whether the first member ends there; a file seen to hold several
  members gets ``max(ISIZE, least_inflated(compressed size))``, a lower bound of its size and nothing more. Members
  beyond the first :data:`HEAD_SNIFF` bytes are not looked for: such a file is taken as one member.
  An ISIZE of 0 (zero padding after the last member, or an empty last member) is read the same way.

So the size returned is the exact size of a one-member file under 4 GiB, and otherwise an estimate
(for several members a lower bound); only inflating the whole file gives more, which is why the loader
never inflates past the budget the estimate was judged against.
"""
from __future__ import annotations

import os
import zlib

#: The first two bytes of every gzip member (RFC 1952, 2.3.1: ID1 ID2).
GZIP_MAGIC = b"\x1f\x8b"
#: The smallest gzip member: a 10-byte header, an empty deflate block (2 bytes), the 8-byte trailer.
MIN_MEMBER = 20
#: Deflate's largest compression ratio (a run of one byte: 258 bytes per 2-bit code, RFC 1951).
MAX_RATIO = 1032
#: Compressed bytes at the start of the file inflated to look for the end of the first member: more than
#: a bgzip block (at most 64 KiB); inflating them takes well under a millisecond.
HEAD_SNIFF = 1 << 17
WRAP = 1 << 32


def least_inflated(size: int) -> int:
    """The fewest bytes a gzip file of ``size`` bytes can inflate to when its compressor does not pad:
    ``size`` less deflate's largest growth of incompressible data (zlib's ``deflateBound``: n/4096 +
    n/16384 + n/2**25 + 13 bytes, taken as n/1024) and 64 bytes of gzip header and trailer."""
    return max(0, size - size // 1024 - 64)


def _sniff_head(fh, size: int) -> tuple[bool, float | None]:
    """``(several, ratio)`` of the gzip data read from ``fh`` (at offset 0, ``size`` bytes): ``several``
    is True when a second member starts within its first :data:`HEAD_SNIFF` bytes (zero padding after a
    member is not a member); ``ratio`` is how many bytes each compressed byte of that head inflated to
    (None when the head is damaged or inflates to nothing)."""
    head = fh.read(min(size, HEAD_SNIFF))
    d = zlib.decompressobj(wbits=31)
    data, produced = head, 0
    try:
        while data and not d.eof:
            produced += len(d.decompress(data, 1 << 20))  # output discarded, 1 MiB at a time
            data = d.unconsumed_tail
    except zlib.error:
        return False, None  # damaged: the loader says so when it reads the file
    consumed = len(head) - (len(d.unused_data) if d.eof else len(data))
    ratio = produced / consumed if produced and consumed else None
    if not d.eof:
        return False, ratio
    end = len(head) - len(d.unused_data)
    return bool(d.unused_data.strip(b"\x00")) or (end < size and len(head) < size), ratio


def inflated_size(fh) -> int | None:
    """The uncompressed size (bytes) of the gzip data in the open, seekable binary file ``fh``, from its
    trailer and the ratio of its head (see the module doc: exact for one member under 4 GiB, else an
    estimate); None when the
    file does not start with the gzip magic bytes ``1f 8b`` (whatever its name). A gzip file too short to
    hold a member gives 0. Reads the first 2 and last 4 bytes and at most :data:`HEAD_SNIFF` more; leaves
    ``fh`` at offset 0. Raises OSError when the file cannot be read."""
    fh.seek(0)
    if fh.read(2) != GZIP_MAGIC:
        fh.seek(0)
        return None
    size = fh.seek(0, os.SEEK_END)
    if size < MIN_MEMBER:
        fh.seek(0)
        return 0
    fh.seek(size - 4)
    isize = int.from_bytes(fh.read(4), "little")
    fh.seek(0)
    several, ratio = _sniff_head(fh, size)
    fh.seek(0)
    wraps = max(0, -(-(least_inflated(size) - isize) // WRAP))  # the smallest k: isize + k * 2**32 >= that
    guess = isize + wraps * WRAP
    if several or not isize or guess > MAX_RATIO * size:  # ISIZE 0: zero padding at the end, or an empty member
        return max(isize, least_inflated(size))
    if ratio is not None:  # the candidate nearest (log scale) to the head's ratio x the file's size
        predicted = ratio * size
        while guess + WRAP <= MAX_RATIO * size and guess * (guess + WRAP) < predicted * predicted:
            guess += WRAP
    return guess


def file_inflated_size(path: str) -> int | None:
    """:func:`inflated_size` of the file at ``path`` (None: not gzip). Raises OSError (unreadable)."""
    with open(path, "rb") as fh:
        return inflated_size(fh)
