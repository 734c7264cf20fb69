"""Row selections and new columns of pandas frames at the lowest fixed cost per call.

A pandas operation costs ~0.05-0.5 ms whatever the size of the frame (pandas 3: column labels are
text arrays, each column lookup and each new frame goes through them), so on a small report the
fixed costs of a few hundred of them outweigh the data. The loaders and the analysis select rows
and add columns through these helpers: the same rows, columns and dtypes as ``frame[mask]``,
``frame.iloc[rows]`` or adding columns one at a time, with a shallow copy when every row is kept, a
slice (no copy) when the rows are one contiguous run, numpy takes column by column otherwise, and one
new frame for many new columns.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def take_rows(frame: pd.DataFrame, rows: np.ndarray | slice, **replace) -> pd.DataFrame:
    """A new frame of ``frame``'s rows at positions ``rows`` (a fresh 0..n-1 index), its columns in
    their order and dtypes but those named in ``replace``, which are given (arrays of ``len(rows)``).
    A ``slice`` (step 1), or one contiguous run of positions, is a slice (no copy: copy-on-write); other
    positions are taken column by column with numpy (:func:`taken`: several times cheaper than pandas'
    block-wise take, which checks and converts every block)."""
    if not isinstance(rows, slice):
        rows = np.asarray(rows, dtype=np.intp)
        if _run(rows):
            rows = slice(int(rows[0]), int(rows[0]) + rows.size) if rows.size else slice(0, 0)
    if isinstance(rows, slice):
        out = frame.iloc[rows]
        out = out.set_axis(pd.RangeIndex(len(out)), axis=0)
    elif frame.columns.is_unique:
        out = pd.DataFrame({name: taken(col, rows) for name, col in frame.items()}, index=pd.RangeIndex(rows.size),
                           columns=frame.columns, copy=False)
    else:
        out = frame.take(rows)
        out.index = pd.RangeIndex(len(out))
    for name, values in replace.items():
        out[name] = values
    return out


def _run(rows: np.ndarray) -> bool:
    """True when ``rows`` are consecutive ascending positions (``k, k+1, ...``; none: True), checked
    from its ends first, then in one vectorised pass."""
    if not rows.size:
        return True
    if int(rows[-1]) - int(rows[0]) + 1 != rows.size:
        return False
    return rows.size < 3 or bool((np.diff(rows) == 1).all())


def codes_of(col) -> np.ndarray:
    """The codes of a categorical column (a Series or a Categorical) as kept: a read-only view, no copy
    (``Series.cat.codes`` makes a new Series, and pandas 3 copies the codes into it)."""
    return (col.array if isinstance(col, pd.Series) else col).codes


def taken(col: pd.Series, rows: np.ndarray, take=np.take):
    """The values of ``col`` at positions ``rows`` in a form a new frame keeps with ``col``'s dtype
    (:func:`_values`): numpy arrays and categorical codes taken by ``take`` (``np.take``'s arguments; numpy's by
    default; :func:`kept_as`), other arrays by their own take."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        return kept_as(col.dtype, take(codes_of(col), rows))
    if isinstance(col.dtype, np.dtype):
        return kept_as(col.dtype, take(col.to_numpy(), rows))
    return col.array.take(rows)


def kept_as(dtype, values: np.ndarray):
    """``values`` (a numpy array; a categorical's codes when ``dtype`` is categorical) in a form a new frame
    keeps with ``dtype``: the array itself, a Categorical of those codes, or for ``object`` a Series (a frame
    made of an object array would infer text)."""
    if isinstance(dtype, pd.CategoricalDtype):
        return pd.Categorical.from_codes(values, dtype=dtype, validate=False)
    return pd.Series(values, dtype=object, copy=False) if dtype == object else values


def _values(col: pd.Series, index):
    """The values of ``col`` in a form a new frame keeps with ``col``'s dtype: an array, or for
    object columns a Series on ``index`` (a frame made of an object array would infer text)."""
    if col.dtype == object:
        return pd.Series(col.to_numpy(), index=index, dtype=object, copy=False)
    return col.to_numpy() if isinstance(col.dtype, np.dtype) else col.array


def with_columns(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """A new frame of ``frame``'s columns (same index, dtypes and order) and ``columns`` (name ->
    array of ``len(frame)``; a name already there is replaced in its place), made at once: copying
    ``frame`` and adding a column at a time costs several times more."""
    out = {name: _values(col, frame.index) for name, col in frame.items()}
    out.update(columns)
    return pd.DataFrame(out, index=frame.index, copy=False)


def rows(frame: pd.DataFrame, positions: np.ndarray | slice) -> pd.DataFrame:
    """``frame.iloc[positions].reset_index(drop=True)`` (``positions``: ascending row positions, no
    repeats, or a slice of step 1: :func:`take_rows`); when they are every row, a shallow copy of ``frame``
    (copy-on-write) with that index."""
    if isinstance(positions, slice):
        return take_rows(frame, positions)
    positions = np.asarray(positions, dtype=np.int64)
    if positions.size == len(frame):  # ascending and distinct: every row, in order
        return where(frame, np.ones(len(frame), dtype=bool))
    return take_rows(frame, positions)


def where(frame: pd.DataFrame, mask: np.ndarray) -> pd.DataFrame:
    """``frame[mask]`` (``mask``: one bool per row) with a fresh 0..n-1 index, as
    ``frame[mask].reset_index(drop=True)``; when every row is kept, a shallow copy of ``frame``
    (copy-on-write: changing either leaves the other as it was) with that index."""
    mask = np.asarray(mask, dtype=bool)
    if mask.all():
        out = frame.copy(deep=False)
        if not isinstance(out.index, pd.RangeIndex) or out.index.start != 0 or out.index.step != 1:
            out = out.reset_index(drop=True)
        return out
    if not mask.any():
        return frame.iloc[:0].reset_index(drop=True)
    return take_rows(frame, np.flatnonzero(mask))


def concat_rows(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(parts, ignore_index=True)`` of frames with the same columns and dtypes (rows of one
    table split apart): when at most one part has rows, that part (a shallow copy with a fresh index)
    instead of a concatenation."""
    full = [p for p in parts if len(p)]
    if len(full) == 1:
        return where(full[0], np.ones(len(full[0]), dtype=bool))
    return pd.concat(parts, ignore_index=True)
