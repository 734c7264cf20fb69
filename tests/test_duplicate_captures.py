"""One capture is one set of GPUs, whatever the files (docs/inputs.md#duplicate-captures): a report beside its
export, byte-identical copies of an export or a trace, a trace beside its gzip are analysed once, the others
listed as ``duplicate of <file>`` (never priced, in no total); two different captures of one program both stay."""
from __future__ import annotations

import gzip
import shutil
import sqlite3

import pandas as pd
import pytest
from helpers.engine import analyse_reports

from pipeline.cli import _finish, format_fleet
from pipeline.config import load_config
from pipeline.engine.map import InProcess
from pipeline.fleet.reduce import rollup
from pipeline.load.capture import capture_identity
from pipeline.load.kineto import load_kineto
from pipeline.load.report import load_report
from pipeline.runs.driver import RunFolder, drive, duplicates
from pipeline.store.results import ResultCache
from pipeline.synth import generate_scaled_report
from pipeline.synth.kineto import generate_scaled_trace


def _export(path, seed=1) -> str:
    generate_scaled_report(str(path), gpus=2, kernels=2000, seed=seed)
    return str(path)


def _trace(path, seed=1) -> str:
    generate_scaled_trace(str(path), 600, seed=seed)
    return str(path)


def _gzip(src: str, dst) -> str:
    with open(src, "rb") as fh, gzip.open(dst, "wb") as out:
        out.write(fh.read())
    return str(dst)


def _cfg(tmp_path, cache=True, name="cache"):
    return load_config([], {"cache": {"dir": str(tmp_path / name), "enabled": cache}})


def _run(tmp_path, inputs, out="out"):
    """``gpu-idle run`` in this process (one report left to analyse: no cluster), with a result cache of the
    output folder's own (a run into ``alone`` stores nothing the other runs find)."""
    cfg = _cfg(tmp_path, name=f"cache-{out}")
    lines = []
    result = drive(cfg, [str(p) for p in inputs], RunFolder(str(tmp_path / out), log=lines.append),
                   ResultCache.for_run(cfg), log=lines.append)
    return result


def _usd(fleet: pd.DataFrame) -> float:
    return round(float(fleet["idle_usd_per_month"].astype(float).sum()), 2)


def test_capture_identity_is_the_capture_not_the_file(tmp_path):
    a = _export(tmp_path / "a.sqlite")
    copy = str(shutil.copy(a, tmp_path / "copy.sqlite"))
    other = _export(tmp_path / "other.sqlite", seed=2)           # the same program, run again
    shifted = shutil.copy(a, tmp_path / "shifted.sqlite")        # one kernel ends 1 ns later
    with sqlite3.connect(shifted) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + 1 WHERE rowid = 7")
    ids = {name: capture_identity(load_report(p)) for name, p in
           (("a", a), ("copy", copy), ("other", other), ("shifted", shifted))}
    assert ids["a"] is not None and len(ids["a"]) == 20
    assert ids["copy"] == ids["a"]
    assert len({ids["a"], ids["other"], ids["shifted"]}) == 3
    trace = _trace(tmp_path / "t.json")
    assert capture_identity(load_kineto(_gzip(trace, tmp_path / "t.json.gz"))) == capture_identity(load_kineto(trace))
    assert capture_identity(load_kineto(_trace(tmp_path / "u.json", seed=2))) != capture_identity(load_kineto(trace))


@pytest.mark.slow
def test_byte_identical_exports_are_analysed_once(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    a = _export(folder / "a.sqlite")
    b = str(shutil.copy(a, folder / "b.sqlite"))
    alone = _run(tmp_path, [a], out="alone").fleet
    result = _run(tmp_path, [folder])
    fleet = result.fleet
    assert result.todo == [a]                                    # the copy is never analysed
    kept = fleet[fleet["report"] == a]
    assert list(kept["status"]) == ["ok", "ok"]
    assert kept["idle_usd_per_month"].tolist() == alone["idle_usd_per_month"].tolist()
    dup = fleet[fleet["report"] == b]
    assert len(dup) == 1 and dup["status"].iloc[0] == "duplicate"
    assert dup["error"].iloc[0] == f"duplicate of {a}"
    assert pd.isna(dup["idle_usd_per_month"].iloc[0]) and pd.isna(dup["gpu_key"].iloc[0])
    assert dup["capture_id"].iloc[0] == kept["capture_id"].iloc[0]
    assert duplicates(fleet) == [(b, f"duplicate of {a}")]
    assert _usd(fleet) == _usd(alone)
    jobs = pd.read_csv(tmp_path / "out" / "jobs.csv")
    assert jobs["gpus"].sum() == 2 and round(jobs["idle_usd_per_month"].sum(), 2) == _usd(alone)
    on_disk = pd.read_csv(tmp_path / "out" / "fleet.csv")
    assert on_disk.loc[on_disk["status"] == "duplicate", "error"].tolist() == [f"duplicate of {a}"]
    assert sorted(p.name for p in (tmp_path / "out" / "gpus").iterdir()) == \
        sorted(p.name for p in (tmp_path / "alone" / "gpus").iterdir())
    # the printed summary lists it and counts only the kept GPUs' dollars
    assert f"DUPLICATE {b}: duplicate of {a} (not analysed again, not priced)" in format_fleet(fleet).splitlines()
    with pytest.raises(SystemExit) as done:
        _finish(fleet, "wrote")
    assert done.value.code == 0
    assert (f"2 GPU(s) in the fleet table, 0 report(s) failed, 1 duplicate(s) not priced; "
            f"fleet idle cost ${_usd(alone):,.2f}/month") in capsys.readouterr().out
    # its job's record says so too
    record = (tmp_path / "out" / "records" / "b.md").read_text()
    assert "Every report of this job is another file of a capture analysed under another name" in record
    assert record.splitlines()[-1].endswith("a.sqlite (not analysed again, not priced)")
    assert "duplicate of" in record.splitlines()[-1]
    # the report lists it apart from the failures
    from click.testing import CliRunner

    from pipeline.cli import main

    done = CliRunner().invoke(main, ["report", str(tmp_path / "out"), "--out", str(tmp_path / "out" / "report.html")])
    assert done.exit_code == 0, done.output
    html = (tmp_path / "out" / "report.html").read_text()
    assert f'<ul class="duplicates"><li>{b}: duplicate of {a}</li></ul>' in html
    # an unchanged rerun keeps the folder: the duplicate needs no stored result of its own
    again = _run(tmp_path, [folder])
    assert again.kept and again.todo == []
    assert duplicates(again.fleet) == [(b, f"duplicate of {a}")]


@pytest.mark.parametrize("name", ["run.json.gz", "run.pt.trace.json"])
def test_byte_identical_trace_copies_are_analysed_once(tmp_path, name):
    folder = tmp_path / "in"
    folder.mkdir()
    trace = _trace(tmp_path / "src.json")
    first = _gzip(trace, folder / name) if name.endswith(".gz") else shutil.copy(trace, folder / name)
    second = str(shutil.copy(first, folder / f"copy-{name}"))
    alone = _run(tmp_path, [first], out="alone").fleet
    result = _run(tmp_path, [folder])
    # "copy-run..." sorts before "run...": the first by path is kept, whichever the user thinks the original
    kept, dup = sorted([str(first), str(second)])
    assert result.todo == [kept]
    assert duplicates(result.fleet) == [(dup, f"duplicate of {kept}")]
    assert _usd(result.fleet) == _usd(alone) > 0


def test_a_trace_beside_its_gzip_is_one_capture(tmp_path):
    trace = _trace(tmp_path / "run.json")
    packed = _gzip(trace, tmp_path / "run.json.gz")
    cfg = _cfg(tmp_path, cache=False)
    alone, _ = analyse_reports([trace], cfg, InProcess())
    fleet, rosters = analyse_reports([trace, packed], cfg, InProcess())
    assert duplicates(fleet) == [(packed, f"duplicate of {trace}")]
    assert fleet.loc[fleet["report"] == trace, "idle_usd_per_month"].tolist() == alone["idle_usd_per_month"].tolist()
    assert _usd(fleet) == _usd(alone) > 0
    assert all(report == trace for report, _ in rosters)     # no GPU page of the duplicate


def test_a_report_beside_its_export_is_analysed_as_the_export(tmp_path, monkeypatch):
    """``X.nsys-rep`` beside ``X.sqlite``, as ``nsys stats`` leaves them: nsys exports the report to the same
    rows (played here by a copy of the export: the real CLI records no GPU on this machine); the export is kept
    though the report's name sorts first, the report is its duplicate, the dollars are counted once."""
    export = _export(tmp_path / "X.sqlite")
    report = tmp_path / "X.nsys-rep"
    report.write_bytes(b"not SQLite: a report nsys exports")
    exported = str(shutil.copy(export, tmp_path / "exported-by-nsys.sqlite"))
    calls = []

    def fake_export(path, *args, **kwargs):  # an export passes through, as the real exporter's does
        if not path.endswith(".nsys-rep"):
            return path
        calls.append(path)
        return exported

    monkeypatch.setattr("pipeline.work.tasks.export_report", fake_export)
    cfg = _cfg(tmp_path, cache=False)
    alone, _ = analyse_reports([export], cfg, InProcess())
    fleet, _ = analyse_reports([str(report), export], cfg, InProcess())
    assert calls == [str(report)]
    assert duplicates(fleet) == [(str(report), f"duplicate of {export}")]
    assert list(fleet.loc[fleet["report"] == export, "status"]) == ["ok", "ok"]
    assert _usd(fleet) == _usd(alone) > 0
    assert rollup(fleet, ["cluster"])["gpus"].tolist() == [2]


def test_two_captures_of_one_program_both_stay(tmp_path):
    first = _export(tmp_path / "train.sqlite", seed=1)
    second = _export(tmp_path / "train-again.sqlite", seed=2)
    cfg = _cfg(tmp_path, cache=False)
    fleet, _ = analyse_reports([first, second], cfg, InProcess())
    one, _ = analyse_reports([first], cfg, InProcess())
    two, _ = analyse_reports([second], cfg, InProcess())
    assert duplicates(fleet) == []
    assert set(fleet["status"]) == {"ok"} and len(fleet) == 4
    assert fleet["capture_id"].nunique() == 2
    assert _usd(fleet) == round(_usd(one) + _usd(two), 2)


def test_which_file_of_a_capture_is_kept_and_copies_name_it():
    """Rows as the reduce gets them: an export is kept before a report nsys must export (``.qdrep`` too), else
    the first by path; a byte-identical copy of a file that is itself a duplicate names the file analysed."""
    from pipeline.fleet.reduce import drop_duplicates

    cfg = load_config([])

    def rows(report, capture, gpus=("g0", "g1")):
        return [{"report": report, "gpu_key": g, "status": "ok", "capture_id": capture} for g in gpus]

    found = (rows("/d/a.qdrep", "c1") + rows("/d/z.sqlite", "c1") + rows("/d/y.json.gz", "c2")
             + rows("/d/b.json", "c2") + rows("/d/solo.sqlite", "c3") + rows("/d/none.sqlite", None))
    rosters = {(r["report"], r["gpu_key"]): {} for r in found}
    kept, kept_rosters = drop_duplicates(found, rosters, cfg, identical={"/d/x.json.gz": "/d/y.json.gz"})
    marked = {r["report"]: (r["status"], r["error"], r["capture_id"]) for r in kept if r["status"] == "duplicate"}
    assert marked == {"/d/a.qdrep": ("duplicate", "duplicate of /d/z.sqlite", "c1"),
                      "/d/y.json.gz": ("duplicate", "duplicate of /d/b.json", "c2"),
                      "/d/x.json.gz": ("duplicate", "duplicate of /d/b.json", "c2")}
    assert sorted({r["report"] for r in kept if r["status"] == "ok"}) == ["/d/b.json", "/d/none.sqlite",
                                                                         "/d/solo.sqlite", "/d/z.sqlite"]
    assert sorted({report for report, _ in kept_rosters}) == ["/d/b.json", "/d/none.sqlite", "/d/solo.sqlite",
                                                              "/d/z.sqlite"]


@pytest.mark.parametrize("named", ["X.nsys-rep", "other.nsys-rep"])
def test_a_report_that_cannot_be_read_beside_an_export_naming_it_says_so(tmp_path, named):
    """No nsys to export ``X.nsys-rep``: the capture identity cannot be established, so neither file is
    dropped; the report's error row says that the export beside it names it as its source (META_DATA_EXPORT)
    and is analysed, when it does, and nothing more when it names another report."""
    export = _export(tmp_path / "X.sqlite")
    with sqlite3.connect(export) as db:
        db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_PARAM_INPUT_FILE', ?)", (named,))
    report = tmp_path / "X.nsys-rep"
    report.write_bytes(b"a report nsys would export")
    cfg = load_config([], {"cache": {"enabled": False}, "export": {"nsys": str(tmp_path / "no-nsys")}})
    fleet, _ = analyse_reports([str(report), export], cfg, InProcess())
    assert duplicates(fleet) == []
    assert list(fleet.loc[fleet["report"] == export, "status"]) == ["ok", "ok"]
    error = fleet.loc[fleet["report"] == str(report), "error"].tolist()
    assert len(error) == 1 and error[0].startswith(f"{report}: ")
    note = (f"; {export} beside it says it was exported from this report and is analysed: whether both hold one "
            "capture could not be confirmed (docs/inputs.md#duplicate-captures)")
    assert error[0].endswith(note) == (named == "X.nsys-rep")


def test_an_export_and_its_re_export_are_one_capture(tmp_path):
    """A re-export of the same report: other bytes (its own export time), the same rows. The identify step
    cannot see it (other content hash); the capture identity does, after loading."""
    first = _export(tmp_path / "run.sqlite")
    again = str(shutil.copy(first, tmp_path / "run-reexported.sqlite"))
    with sqlite3.connect(again) as db:
        db.execute("INSERT INTO META_DATA_EXPORT VALUES ('EXPORT_TIME_UTC', '2026-12-06T07:45:00')")
    assert open(first, "rb").read() != open(again, "rb").read()
    cfg = _cfg(tmp_path, cache=False)
    alone, _ = analyse_reports([first], cfg, InProcess())
    fleet, _ = analyse_reports([first, again], cfg, InProcess())
    # "run-reexported.sqlite" sorts before "run.sqlite": the first by path is the one analysed
    assert duplicates(fleet) == [(first, f"duplicate of {again}")]
    assert _usd(fleet) == _usd(alone) > 0


def test_a_duplicate_in_another_labelled_folder_says_its_labels_are_not_used(tmp_path):
    # a .sqlite in east/ (cluster east, job job-a) and a byte-identical copy in west/ (cluster west, job job-b):
    # one capture, analysed once as east/a.sqlite, under east's labels. The copy's row and the printed DUPLICATE line
    # say which of its own labels were not used (main: "duplicate of <file>" alone). A copy whose labels match, or
    # whose job is each file's own name (no rule names it), says nothing more (the other tests of this file).
    from pipeline.fleet.reduce import labels_not_used

    east, west = tmp_path / "east", tmp_path / "west"
    east.mkdir(), west.mkdir()
    a = _export(east / "a.sqlite")
    b = str(shutil.copy(a, west / "b.sqlite"))
    cfg = load_config([], {"cache": {"dir": str(tmp_path / "cache"), "enabled": True},
                           "labels": [{"match": "*/east/*", "cluster": "east", "job": "job-a"},
                                      {"match": "*/west/*", "cluster": "west", "job": "job-b"}]})
    result = drive(cfg, [a, b], RunFolder(str(tmp_path / "out"), log=lambda _: None), ResultCache.for_run(cfg),
                   log=lambda _: None)
    fleet = result.fleet
    assert result.todo == [a]
    said = f"duplicate of {a}; its labels cluster=west job=job-b not used (those of {a} are)"
    assert duplicates(fleet) == [(b, said)]
    assert set(fleet.loc[fleet["report"] == a, "cluster"]) == {"east"}
    assert f"DUPLICATE {b}: {said} (not analysed again, not priced)" in format_fleet(fleet).splitlines()
    # by hand: one label differing, an unset one shown as "-"; the default job (each file's own name) is no difference
    assert labels_not_used("/w/b.sqlite", {"cluster": "c", "job": "b", "gpu_model": None}, "/e/a.sqlite",
                           {"cluster": "c", "job": "a", "gpu_model": "H100"}) == (
        "; its labels gpu_model=- not used (those of /e/a.sqlite are)")
    assert labels_not_used("/w/b.sqlite", {"cluster": "c", "job": "b"}, "/e/a.sqlite", {"cluster": "c", "job": "a"}) == ""


def test_observed_values_of_a_categorical_are_its_used_categories():
    """A categorical column's values (the kernel and API names) are those its codes use, as text, sorted: not the
    categories no row has, nor a missing value; the same as the distinct values of its rows."""
    import numpy as np

    from pipeline.load.capture import _observed

    names = pd.Series(pd.Categorical.from_codes(np.array([2, -1, 0, 2, 4], dtype=np.int8), ["b", "a", "c", "x", "d"]))
    assert _observed(names) == ["b", "c", "d"]
    assert _observed(names.astype(object)) == ["b", "c", "d"]
    assert _observed(pd.Series(pd.Categorical([], categories=["a"]))) == []
