"""Column decoding: StringIds resolution, categorical text, int64 columns, CUDA API names."""
from __future__ import annotations

import re

import numpy as np
import pandas as pd

from ..frames import codes_of
from .limits import cut_sql
from .sqlite import text_rows
from .tables import STRING_TABLE, Schema

_API_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds)+$")


def normalise_api_name(name: str) -> str:
    """``cudaStreamSynchronize_v3020`` -> ``cudaStreamSynchronize``; also drops
    ``_ptsz``/``_ptds`` (per-thread default stream) suffixes."""
    return _API_SUFFIX.sub("", name or "")


def read_strings(schema: Schema) -> dict[int, str]:
    """StringIds as id -> text ({} without the table); text that is not UTF-8 gets replacement characters;
    text longer than :data:`~pipeline.load.limits.MAX_TEXT_CHARS` is cut by SQLite as it is read
    (:func:`~pipeline.load.limits.cut_sql`), so a 10 MB name never reaches Python whole."""
    if not schema.has(STRING_TABLE):
        return {}
    return dict(text_rows(schema.con, f"SELECT id, {cut_sql('value')} FROM {STRING_TABLE}", cast=True))


def distinct_codes(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(uniques, inverse)`` of an int64 array, like ``np.unique(ids, return_inverse=True)``.

    StringIds ids are small and dense, so a lookup table of ``max(ids) + 1`` slots
    does it in O(n) instead of sorting n ids; other inputs (negative or sparse ids)
    fall back to ``np.unique``. ``uniques`` is sorted; ``ids == uniques[inverse]``.
    """
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size == 0:
        return ids[:0], np.zeros(0, dtype=np.intp)
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high > 4 * ids.size + (1 << 20):
        return np.unique(ids, return_inverse=True)
    present = np.zeros(high + 1, dtype=bool)
    present[ids] = True
    uniques = np.flatnonzero(present)
    slot = np.zeros(high + 1, dtype=np.intp)
    slot[uniques] = np.arange(uniques.size)
    return uniques.astype(np.int64), slot[ids]


def resolve_ids(ids: np.ndarray, strings: dict[int, str], index=None, each=None) -> pd.Series:
    """Categorical text of StringIds ``ids`` (integers, -1 for NULL); unknown ids give ``""``; ``each``: a
    function of one text (e.g. :func:`normalise_api_name`), applied to each distinct text, that two ids
    may map to one text. Small dense ids (StringIds') go through a lookup table of ``max(ids) + 1``
    category codes: one gather over the rows, in the codes' own small dtype; others through
    :func:`distinct_codes`."""
    ids = np.asarray(ids)
    if ids.size and ids.dtype.kind == "i" and int(ids.min()) >= 0 and int(ids.max()) <= 4 * ids.size + (1 << 20):
        present = np.zeros(int(ids.max()) + 1, dtype=bool)
        present[ids] = True
        uniques = np.flatnonzero(present)
        texts = [strings.get(int(u), "") for u in uniques]
        categories, remap = np.unique(text_objects([each(t) for t in texts] if each else texts), return_inverse=True)
        codes = pd.Categorical.from_codes(remap, categories=categories).codes  # the codes' dtype pandas picks
        table = np.full(present.size, -1, dtype=codes.dtype)
        table[uniques] = codes
        return pd.Series(pd.Categorical.from_codes(table[ids], categories=categories, validate=False), index=index)
    uniques, inverse = distinct_codes(ids)
    texts = np.array([strings.get(int(u), "") for u in uniques], dtype=object)
    if each:
        texts = np.array([each(t) for t in texts.tolist()], dtype=object)
    return categorical(texts, inverse, index)


def text_objects(values) -> np.ndarray:
    """``values`` (a sequence or array) as an object array of Python ``str`` (``None`` as ``""``, other
    values as their ``str``). Never a fixed-width ``<U`` array: numpy sizes those by the longest text,
    so one long name among 400 short ones would cost 400 times its size (issue 23)."""
    return np.array([v if type(v) is str else "" if v is None else str(v) for v in values], dtype=object)


def categorical(texts: np.ndarray, codes: np.ndarray, index=None) -> pd.Series:
    """A categorical Series whose row i is ``texts[codes[i]]`` (``texts`` may repeat; any values, as
    :func:`text_objects` makes them text)."""
    categories, remap = np.unique(text_objects(texts), return_inverse=True)
    return pd.Series(pd.Categorical.from_codes(remap[codes], categories=categories), index=index)


def _inline_text(col, index=None) -> pd.Series:
    return pd.Series(col.to_pandas(), index=index).fillna("").astype(str).astype("category")


def decoded_text(decoded, name: str, strings: dict[int, str], index=None, each=None) -> pd.Series:
    """Column ``name`` of a :class:`~pipeline.load.sqlite.Decoded` (StringIds ids read with NULL as
    -1, or inline text in older schemas) as categorical text; ``each``: a function of one text applied to
    each distinct text (:func:`resolve_ids`)."""
    if name in decoded.texts:
        texts = _inline_text(decoded.texts[name], index)
        if each:
            texts = categorical(np.array([each(t) for t in texts.cat.categories], dtype=object),
                                codes_of(texts), texts.index)
        return texts
    return resolve_ids(decoded.ints[name], strings, index, each)
