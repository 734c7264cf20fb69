"""The columnar cache entry's format (issue 44): each frame an uncompressed Arrow IPC file, hashed as it is written.

What the format must keep: the checksums an entry records are those of the bytes on disk, for every file of the
entry (they are computed while writing, never read back); the frames read back are the loader's, column for column
and dtype for dtype; a frame read from an entry keeps none of the entry's bytes alive (its columns are read in place,
so a text or categorical column would otherwise hold the whole file); and an entry of the earlier format (Parquet) is
never read as this one, even under this build's name with matching checksums and a true record of its source and
loader: it is a miss, rebuilt, with one warning naming the entry and the file; and a write refused half way leaves
no entry. In process, on one small generated export; each test has its own cache folder."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import sys
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline import code_keys
from pipeline.checksums import seal
from pipeline.load import cache as columnar
from test_cache_builds import loads  # noqa: F401 (the fixture: the paths the SQLite loader read, in order)
from pipeline.load.report import load_report
from pipeline.synth import generate_scaled_report


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> str:
    """A generated 2-GPU export (2,000 kernels, with copies and NVTX ranges: text and categorical columns)."""
    path = tmp_path_factory.mktemp("in") / "job.sqlite"
    generate_scaled_report(str(path), gpus=2, kernels=2000, seed=44)
    return str(path)


@pytest.fixture(scope="module")
def loaded(export):
    """The export as the loader gives it (no cache)."""
    return load_report(export)


def warnings_in(text: str) -> list[str]:
    return [line for line in text.splitlines() if "WARNING" in line]


def test_an_entrys_checksums_are_the_bytes_on_disk_of_every_file(export, tmp_path):
    """Sealed while writing: each recorded digest is the SHA-256 of the file as read back now, every file of the
    entry but the checksums is recorded, and each frame's file is an Arrow IPC file (its magic at both ends)."""
    cache = tmp_path / "cache"
    columnar.load_cached(export, cache)
    entry = columnar.entry_dir(export, cache)
    sums = json.loads((entry / columnar.SUMS).read_text())["sha256"]
    on_disk = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in entry.iterdir() if p.name != columnar.SUMS}
    assert sums == on_disk
    assert sorted(sums) == sorted(columnar.ENTRY_FILES) == sorted([f"{n}.arrow" for n in columnar.FRAMES]
                                                                  + ["report.json"])
    for name in columnar.FRAMES:
        data = (entry / f"{name}.arrow").read_bytes()
        assert data[:6] == data[-6:] == b"ARROW1", name


def test_frames_read_from_an_entry_are_the_loaders(export, loaded, tmp_path):
    """Every frame read back from the entry equals the loader's: values, column order, dtypes (a categorical's
    categories and their order included)."""
    cache = tmp_path / "cache"
    columnar.load_cached(export, cache)
    got = columnar.load_cached(export, cache)
    assert got.sources  # read from the entry
    assert len(loaded.copies) and len(loaded.nvtx)  # text columns with rows: the check means something
    for name in columnar.FRAMES:
        want, have = getattr(loaded, name), getattr(got, name)
        pd.testing.assert_frame_equal(have, want, check_exact=True, check_categorical=True)
        assert list(have.dtypes.astype(str)) == list(want.dtypes.astype(str)), name
        for column in want.columns:
            if isinstance(want[column].dtype, pd.CategoricalDtype):
                assert list(have[column].cat.categories) == list(want[column].cat.categories), (name, column)


def test_a_frame_read_from_an_entry_keeps_none_of_its_bytes(loaded, tmp_path):
    """The frame made of a frame file's checked bytes holds no reference to them (CPython's reference count of the
    bytes object is back to what it was), so a report read from the cache holds its frames only, never its files."""
    kept = []
    for name in columnar.FRAMES:
        path = tmp_path / columnar.frame_file(name)
        columnar.write_frame(pa.Table.from_pandas(getattr(loaded, name), preserve_index=False), path)
        data = path.read_bytes()
        before = sys.getrefcount(data)
        frame = columnar.read_frame(data).to_pandas()
        if sys.getrefcount(data) != before:
            kept.append(name)
        pd.testing.assert_frame_equal(frame, getattr(loaded, name))
    assert kept == []
    assert any(isinstance(t, pd.CategoricalDtype) for t in loaded.kernels.dtypes)  # what would hold it, present
    assert any(str(t) == "str" for t in loaded.devices.dtypes)


def _parquet_entry(entry: Path, arrow_names: bool) -> None:
    """Rewrite ``entry`` as the earlier format wrote it: each frame a Parquet file keeping its schema metadata (its
    true source and this build's loader digest), named ``<frame>.parquet`` (``arrow_names``: under this format's
    names), ``report.json`` as it is, its checksums rewritten to match."""
    for name in columnar.FRAMES:
        arrow = entry / columnar.frame_file(name)
        table = columnar.read_frame(arrow.read_bytes())
        arrow.unlink()
        pq.write_table(table, arrow if arrow_names else entry / f"{name}.parquet", compression="none")
    files = sorted(p.name for p in entry.iterdir() if p.name != columnar.SUMS)
    seal(entry / columnar.SUMS, entry, files)


@pytest.mark.parametrize("names", ["parquet-names", "arrow-names"])
def test_an_entry_of_the_parquet_format_is_never_read(export, loaded, tmp_path, loads, capsys, names):
    """An entry in the earlier format under this build's name, its checksums matching and its record of source and
    loader true, is a miss: the report is read from the export again, one warning names the entry and the frame
    file, and the entry is rebuilt in this format (read from silently next time). Another format is also another
    entry name: this module is loader code, whose digest names the entries (tests/test_reprice.py)."""
    cache = tmp_path / "cache"
    columnar.load_cached(export, cache)
    entry = columnar.entry_dir(export, cache)
    _parquet_entry(entry, arrow_names=names == "arrow-names")
    capsys.readouterr()
    got = columnar.load_cached(export, cache)
    pd.testing.assert_frame_equal(got.kernels, loaded.kernels)
    assert got.sources == [] and loads == [export, export]  # read from the export, not the entry
    [said] = warnings_in(capsys.readouterr().err)
    cause = "does not parse (ArrowInvalid" if names == "arrow-names" else "cannot be read"
    assert str(entry) in said and f"{columnar.frame_file('kernels')} {cause}" in said and "rebuilt" in said, said
    assert (entry / columnar.frame_file("kernels")).read_bytes()[:6] == b"ARROW1"
    assert columnar.load_cached(export, cache).sources and loads == [export, export]
    assert warnings_in(capsys.readouterr().err) == []
    this = os.path.relpath(columnar.__file__, code_keys.PACKAGE).replace(os.sep, "/")
    assert any(this == p or this.startswith(p + "/") for p in code_keys.LOADER_CODE)


def test_a_disk_that_fills_while_an_entry_is_written_leaves_no_entry(export, loaded, tmp_path, monkeypatch, capsys):
    """The file system refusing a frame's bytes half way (ENOSPC from the hashing writer) fails no load: the report
    is the loader's, one warning names the entry and the cause, and neither the entry nor its temporary folder is
    left (a later run never trusts half an entry)."""
    from pipeline import checksums

    cache = tmp_path / "cache"
    write, seen = checksums._Hashing.write, []

    def full(self, data):
        seen.append(memoryview(data).nbytes)
        if sum(seen) > 100_000:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(self, data)

    monkeypatch.setattr(checksums._Hashing, "write", full)
    capsys.readouterr()
    got = columnar.load_cached(export, cache)
    pd.testing.assert_frame_equal(got.kernels, loaded.kernels)
    [said] = warnings_in(capsys.readouterr().err)
    assert str(columnar.entry_dir(export, cache)) in said and "not written (No space left on device)" in said, said
    assert list(cache.iterdir()) == []
