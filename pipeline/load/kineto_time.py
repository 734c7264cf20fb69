"""Kineto timestamps as exact integer nanoseconds: JSON number text (microseconds) -> int64 ns.

The PyTorch profiler writes ``ts`` and ``dur`` in microseconds as JSON numbers: integers
(``1682725898082228``), one decimal (``68.0``) or three (``4458676522690.655``), sometimes at
Unix-epoch magnitude (``1712195495519689.047`` µs), where a float64 is 0.25 µs coarse and cannot
hold the nanoseconds. So the numbers are never parsed as floats: their JSON text is read as a
decimal and scaled by 1000.

Rounding: a value with at most 3 decimals is an exact number of ns (no rounding). A value with
more decimals (finer than 1 ns) is rounded to the nearest ns, ties to even (``0.0005`` µs -> 0 ns,
``0.0015`` µs -> 2 ns). ``ts`` and ``dur`` are converted separately, so an event's end is
``ts_ns + dur_ns`` (the Kineto README's rule, and HTA's order of operations without its float).

The fast path is vectorised in Arrow: the texts are cast to ``decimal128(38, 3)``, which Arrow
parses exactly from the digits and refuses (``ArrowInvalid``) when a value has more than 3 decimals;
the unscaled 128-bit integers of a decimal with scale 3 *are* the ns values. When Arrow refuses some
texts of an array, the plain ones (digits, at most 3 decimals) still take that path and only the
others the slow one, Python's :mod:`decimal` with 100 digits of precision, one value at a time.
"""
from __future__ import annotations

import decimal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

#: 100 significant digits: far more than any timestamp, so scaling never rounds; only the final
#: quantize to whole ns does (half to even).
_CONTEXT = decimal.Context(prec=100, rounding=decimal.ROUND_HALF_EVEN, Emax=10_000, Emin=-10_000)
_NS = decimal.Decimal(1)
INT64_MAX = (1 << 63) - 1
#: A plain decimal number of µs with at most 3 decimals (an exact number of ns), short enough for
#: ``decimal128(38, 3)``: what the Arrow path reads.
_PLAIN = r"^-?[0-9]{1,30}(\.[0-9]{1,3})?$"


class TimeTextError(ValueError):
    """A ``ts``/``dur`` text that is not a decimal number of microseconds (message says which)."""


#: What is said of a time beyond int64 ns (after the value), by the trace loader too.
BEYOND_INT64 = (f"does not fit in 64-bit nanoseconds (beyond ±{INT64_MAX / 1e9 / 86400 / 365.25:.0f} years): "
                "not a time a profiler writes")


class TimeRangeError(TimeTextError):
    """A ``ts``/``dur`` that is a number, but not one 64-bit nanoseconds can hold (the message names the
    value); ``index``: its position in the array converted (:func:`micros_texts_to_ns`), when known."""

    def __init__(self, text: str, index: int | None = None):
        super().__init__(f"{text} µs {BEYOND_INT64}")
        self.text, self.index = text, index


#: Decimal exponent (of the most significant digit, in µs) from which a value cannot be int64 ns:
#: 1e16 µs = 1e19 ns > INT64_MAX. Larger values are refused before any arithmetic (1e308, 1e999999999
#: would otherwise cost the digits they name).
_MAX_ADJUSTED = 16


def micros_text_to_ns(text: str | bytes) -> int:
    """One microsecond value, as JSON text (``b"12.345"``, ``"1.5e3"``, a quoted ``"\\"7\\""``),
    to integer ns, rounded half to even below 1 ns. Raises :class:`TimeTextError` for anything
    that is not a finite decimal number, :class:`TimeRangeError` for one beyond int64 ns."""
    raw = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray, memoryview)) else str(text)
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = raw[1:-1].strip()
    try:
        value = decimal.Decimal(raw)
    except decimal.InvalidOperation:
        raise TimeTextError(f"not a number: {raw[:40]!r}") from None
    if not value.is_finite():
        raise TimeTextError(f"not a finite number: {raw[:40]!r}")
    if value and value.adjusted() >= _MAX_ADJUSTED:
        raise TimeRangeError(raw[:40])
    if value and value.adjusted() < -_MAX_ADJUSTED:  # far below 1 ns: rounds to 0 (quantize would refuse it)
        return 0
    ns = int(_CONTEXT.scaleb(value, 3).quantize(_NS, context=_CONTEXT))
    if not -INT64_MAX <= ns <= INT64_MAX:
        raise TimeRangeError(raw[:40])
    return ns


def _unscaled_int64(dec: pa.Array) -> np.ndarray:
    """The unscaled integers of a ``decimal128`` array without nulls, as int64. Raises
    :class:`TimeTextError` when one does not fit in 64 bits."""
    n = len(dec)
    words = np.frombuffer(dec.buffers()[1], dtype="<i8", count=2 * (dec.offset + n))[2 * dec.offset:]
    low, high = words[0::2], words[1::2]
    if np.any(high != (low >> 63)):
        raise TimeTextError("a timestamp does not fit in 64-bit nanoseconds")
    return low.astype(np.int64, copy=True)


def micros_texts_to_ns(texts: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """``(ns, bad)`` for an Arrow string (or binary) array of JSON number texts in µs.

    ``ns``: int64 ns (0 where ``bad``); ``bad``: True where the text is ``null``, empty or not a
    finite decimal number (the caller drops those events and says so). Exact as the module says;
    values with more than 3 decimals are rounded half to even. Raises :class:`TimeRangeError` (its
    ``index`` set) when a value does not fit in int64 ns.
    """
    if pa.types.is_binary(texts.type) or pa.types.is_large_binary(texts.type):
        texts = texts.cast(pa.string())  # JSON text is UTF-8 (msgspec validated it)
    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    if pc.any(pc.match_substring(texts, '"')).as_py():
        texts = pc.utf8_trim(texts, '"')
    try:
        return _unscaled_int64(texts.cast(pa.decimal128(38, 3))), np.zeros(n, dtype=bool)
    except (pa.ArrowInvalid, TimeTextError):
        pass  # more than 3 decimals, a null, not a number, or too large: those one at a time
    out = np.zeros(n, dtype=np.int64)
    bad = np.zeros(n, dtype=bool)
    plain = pc.match_substring_regex(texts, _PLAIN).fill_null(False).to_numpy(zero_copy_only=False)
    rows = np.flatnonzero(~plain)
    if plain.any():
        try:  # plain decimals (at most 3 decimals) still go through Arrow, exactly as above
            out[plain] = _unscaled_int64(texts.filter(pa.array(plain)).cast(pa.decimal128(38, 3)))
        except (pa.ArrowInvalid, TimeTextError):
            rows = np.arange(n)  # all one at a time: the message names the value
    values = texts.take(pa.array(rows)).to_pylist() if rows.size < n else texts.to_pylist()
    for i, text in zip(rows.tolist(), values):
        if text is None or text.strip() in ("", "null"):
            bad[i] = True
            continue
        try:
            value = micros_text_to_ns(text)
        except TimeRangeError as exc:
            raise TimeRangeError(exc.text, i) from None
        except TimeTextError:
            bad[i] = True
            continue
        out[i] = value
    return out, bad


def raws_to_ns(raws: list) -> tuple[np.ndarray, np.ndarray]:
    """:func:`micros_texts_to_ns` of a list of raw JSON values (``msgspec.Raw`` or bytes); the
    texts are joined into one buffer and split by Arrow, so no Python object is made per value."""
    if not raws:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    joined = b"\n".join(raws)  # a JSON number or string never holds a raw newline
    parts = pc.split_pattern(pa.array([joined], type=pa.binary()), b"\n").values
    if len(parts) != len(raws):  # a value held a newline after all (invalid JSON): go one by one
        parts = pa.array([bytes(r) for r in raws], type=pa.binary())
    return micros_texts_to_ns(parts)
