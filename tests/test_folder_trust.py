"""Never trust a file the product did not vouch for, never lose a night (issue 42, points 1, 2, 3 and 10).

1. A night folder follows the rule of ``run --out``: a sweep replaces only files it can prove it wrote, never
   lists a person's file as its own, and an unchanged night is a copy of the earlier one (never a hard link:
   editing one night's file must not edit the other's).
2. ``report`` and ``compare`` read only a folder whose manifest says complete, and say what is missing.
3. Every reader checks the files it reads against the manifest (an edited ``fleet.parquet`` is named).
10. A damaged history file is named and left out of the trend; what a night did not write is said by the
    exit status and the manifest.

Everything runs in this process (the sweep of one small report analyses it in-process)."""
from __future__ import annotations

import json
import os
import shutil

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from pipeline.cli import main
from pipeline.config import load_config
from pipeline.io import OutputError, file_entry
from pipeline.runs.compare import read_side
from pipeline.report.html import render_markdown, write_report
from pipeline.report.medical import record_stem
from pipeline.report.summary import ReportError, load_results
from pipeline.runs.driver import RunFolder, drive
from pipeline.runs.sweep import sweep
from pipeline.store.results import MANIFEST, drop_manifest, manifest_holds, read_manifest
from pipeline.synth import generate_training_report
from pipeline.text import md_text

N1, N2, N3 = "2026-12-01", "2026-12-02", "2026-12-03"
RECORD = f"records/{record_stem('job0')}.md"


def quiet(*_args, **_kwargs) -> None:
    pass


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One small report (2 GPUs), swept on nights N1 and N2 (N2 made from N1, nothing changed) into a state
    folder, and run once into a run folder: ``(report, state, run folder)``; a test works on copies."""
    root = tmp_path_factory.mktemp("trust")
    report = str(root / "job0.sqlite")
    generate_training_report(report, gpus=2, iterations=6, seed=910, straggler_rank=None)
    cfg = load_config([], {})
    state = root / "state"
    for night in (N1, N2):
        sweep(cfg, [report], str(state), night, log=quiet)
    run = root / "run"
    drive(cfg, [report], RunFolder(str(run), log=quiet), None, log=quiet)
    return report, state, run


def copied(src, dst):
    shutil.copytree(src, dst, symlinks=True)
    return dst


def again(report, state, night, **kw):
    return sweep(load_config([], {}), [report], str(state), night, log=quiet, **kw)


def manifest(folder) -> dict:
    return json.loads((folder / MANIFEST).read_text())


# ---- 1. a night folder: only the product's files are replaced; nights never share an inode ----------------

@pytest.mark.slow
@pytest.mark.parametrize("edit", ["append to a record", "own fleet.csv", "edit a per-GPU file"])
def test_a_sweep_rerun_never_overwrites_a_file_a_person_changed(made, tmp_path, edit):
    """Before: the rerun of the night wrote over the person's notes (or fleet.csv), exit 0."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    night = state / "nights" / N2
    rel = {"append to a record": RECORD, "own fleet.csv": "fleet.csv",
           "edit a per-GPU file": "gpus/" + sorted(os.listdir(night / "gpus"))[0]}[edit]
    if edit == "own fleet.csv":
        (night / rel).write_text("gpu,usd\nmine,1\n")
    else:
        with open(night / rel, "a", encoding="utf-8") as fh:
            fh.write("\nMY NOTES\n")
    mine = (night / rel).read_bytes()
    for force in ((), (report,)):   # unchanged, and forced to analyse again
        with pytest.raises(OutputError) as refused:
            again(report, state, N2, force=force)
        assert f"{night}: 1 file(s) this sweep writes are there already and are not gpu-idle's, or were changed " \
               f"since it wrote them ({rel})" in str(refused.value)
        assert (night / rel).read_bytes() == mine


@pytest.mark.slow
def test_a_file_a_person_added_to_a_night_is_never_listed_as_the_products(made, tmp_path):
    """Before: the night's manifest listed every file in the folder (the person's notes too), so a later sweep
    of the night with other inputs removed them as its own."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    night = state / "nights" / N2
    (night / "records" / "notes.md").write_text("my notes\n")
    (night / "mine.txt").write_text("mine\n")
    again(report, state, N2, force=(report,))
    listed = manifest(night)["files"]
    assert "records/notes.md" not in listed and "mine.txt" not in listed
    assert RECORD in listed and "fleet.parquet" in listed
    assert (night / "records" / "notes.md").read_text() == "my notes\n"


def test_a_person_s_file_where_a_night_is_copied_is_refused(made, tmp_path):
    """A new night made from an unchanged earlier one would replace a file a person put in its folder (no
    manifest of ours there): refused, naming it (before: overwritten through the link)."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    night = state / "nights" / N3
    (night / "records").mkdir(parents=True)
    (night / RECORD).write_text("mine\n")
    with pytest.raises(OutputError) as refused:
        again(report, state, N3)
    assert f"{night}: holds 1 file(s) gpu-idle did not write ({RECORD})" in str(refused.value)
    assert (night / RECORD).read_text() == "mine\n"


def test_an_unchanged_night_is_a_copy_and_editing_it_leaves_the_first_night_whole(made, tmp_path):
    """Before: every document of N3 was a hard link to N2's; an edit of N3's record edited N2's, whose manifest
    then no longer held."""
    report, state = made[0], copied(made[1], tmp_path / "state")   # (a copy of the tree shares no inode)
    again(report, state, N3)   # made from N2, nothing changed
    a, b = state / "nights" / N2, state / "nights" / N3
    docs = sorted(rel for rel in manifest(a)["files"] if not rel.startswith(("report.html", "gpu-pages/")))
    assert RECORD in docs and "fleet.parquet" in docs
    for rel in docs:
        assert (b / rel).read_bytes() == (a / rel).read_bytes(), rel
        assert os.stat(b / rel).st_ino != os.stat(a / rel).st_ino, rel
        assert os.stat(b / rel).st_nlink == 1, rel
    part = state / "history" / f"run_date={N3}" / "fleet.parquet"
    assert os.stat(part).st_nlink == 1 and part.read_bytes() == (b / "fleet.parquet").read_bytes()
    with open(b / RECORD, "a", encoding="utf-8") as fh:
        fh.write("\nedited\n")
    assert b"edited" not in (a / RECORD).read_bytes()
    assert manifest_holds(str(a), read_manifest(str(a)))


# ---- 2. and 3. readers read only what a complete manifest vouches for ---------------------------------------

def readers(folder):
    """What report and compare make of ``folder``: each one's ReportError text, or None when it read it."""
    out = []
    for read in (lambda: load_results(str(folder)), lambda: read_side(str(folder), "before", "x")):
        try:
            read()
            out.append(None)
        except ReportError as exc:
            out.append(str(exc))
    return out


def test_a_whole_folder_is_read(made):
    assert readers(made[2]) == [None, None]
    assert readers(made[1]) == [None, None]


@pytest.mark.parametrize("where", ["run", "sweep"])
def test_a_folder_whose_manifest_says_incomplete_is_not_read(made, tmp_path, where):
    """Before: report and compare read it, exit 0, no word."""
    folder = copied(made[2] if where == "run" else made[1], tmp_path / "f")
    target = folder if where == "run" else folder / "nights" / N2
    drop_manifest(str(target))
    errors = readers(folder)
    for text in errors:
        assert text.startswith(f"{target}: not read: its manifest ({MANIFEST}) says it is incomplete"), text


def test_a_record_of_another_run_beside_the_table_is_named(made, tmp_path):
    """The page that showed one run's table beside another run's record: the record is not the manifest's."""
    folder = copied(made[2], tmp_path / "f")
    other = tmp_path / "other"
    generate_training_report(str(tmp_path / "job0.sqlite"), gpus=2, iterations=6, seed=911, straggler_rank=None)
    drive(load_config([], {}), [str(tmp_path / "job0.sqlite")], RunFolder(str(other), log=quiet), None, log=quiet)
    assert (other / RECORD).read_bytes() != (folder / RECORD).read_bytes()
    shutil.copyfile(other / RECORD, folder / RECORD)
    for text in readers(folder):
        assert text == (f"{folder}: not read: changed since gpu-idle wrote them (size or SHA-256 not the "
                        f"manifest's): {RECORD}; run it again (gpu-idle run --out, or the sweep) to make it whole")


def test_compare_names_an_edited_fleet_table_and_compares_nothing(made, tmp_path):
    """Before: compare read an edited fleet.parquet (its checksum unchecked) and claimed a saving."""
    folder = copied(made[2], tmp_path / "edited")
    table = pd.read_parquet(folder / "fleet.parquet")
    table["idle_usd_per_month"] = table["idle_usd_per_month"] / 2
    table.to_parquet(folder / "fleet.parquet", index=False)
    for text in readers(folder):
        assert "changed since gpu-idle wrote them (size or SHA-256 not the manifest's): fleet.parquet;" in text
    got = CliRunner().invoke(main, ["compare", str(made[2]), str(folder)])
    assert got.exit_code == 2, got.output
    assert "fleet.parquet" in got.output and "changed since gpu-idle wrote them" in got.output
    assert "saving" not in got.output.lower() and got.exception is None or isinstance(got.exception, SystemExit)


@pytest.mark.parametrize("damage", ["missing per-GPU file", "no manifest", "edited per-GPU file"])
def test_every_file_a_reader_reads_is_checked(made, tmp_path, damage):
    folder = copied(made[2], tmp_path / "f")
    gpu = "gpus/" + sorted(os.listdir(folder / "gpus"))[0]
    if damage == "missing per-GPU file":
        (folder / gpu).unlink()
        want = f"missing {gpu}"
    elif damage == "no manifest":
        (folder / MANIFEST).unlink()
        want = f"no manifest of gpu-idle's ({MANIFEST}) vouches for its files"
    else:
        (folder / gpu).write_text((folder / gpu).read_text().replace('"', "'", 1))
        want = f"changed since gpu-idle wrote them (size or SHA-256 not the manifest's): {gpu}"
    for text in readers(folder):
        assert want in text
    got = CliRunner().invoke(main, ["report", str(folder), "--out", str(tmp_path / "r.html")])
    assert got.exit_code == 2 and want in " ".join(got.output.split()), got.output
    assert not (tmp_path / "r.html").exists()


# ---- 10. a damaged history file, and what a night did not write ---------------------------------------------

def damage_part(path, how: str) -> str:
    if how == "truncated":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        return "not a readable Parquet file"
    if how == "empty":
        path.write_bytes(b"")
        return "not a readable Parquet file"
    pq.write_table(pa.table({"a": [1], "b": ["x"]}), path)
    return "not a fleet table (no column report, job, cluster, status, idle_usd_per_month)"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["truncated", "empty", "wrong schema"])
def test_a_damaged_history_file_is_named_and_left_out_of_the_trend(made, tmp_path, how):
    """Before: `gpu-idle report STATE` ended in a traceback, and every later sweep skipped its report."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    part = state / "history" / f"run_date={N1}" / "fleet.parquet"
    why = damage_part(part, how)
    res = load_results(str(state))
    assert [d for d, _ in res.history] == [N2]
    assert [(x["date"], x["file"]) for x in res.lacking] == [(N1, f"history/run_date={N1}/fleet.parquet")]
    assert res.lacking[0]["why"].startswith(why)
    assert f"The trend lacks night(s) whose history file is damaged: {N1} " \
           f"({md_text(f'history/run_date={N1}/fleet.parquet')}: {md_text(why)}" in render_markdown(res)
    # The next night is whole: its report says which night the trend lacks, and nothing is unwritten.
    _, summary = again(report, state, N3, force=(report,))
    assert summary.not_written == {}
    night = state / "nights" / N3
    doc = manifest(night)
    assert doc["complete"] is True and doc["report"] == "report.html" and "not_written" not in doc
    page = (night / "report.html").read_text()
    assert 'id="trend-lacking"' in page and f"{N1} (history/run_date={N1}/fleet.parquet: " in page
    assert f'data-date="{N1}"' not in page and f'data-date="{N3}"' in page and f'data-date="{N2}"' in page
    got = CliRunner().invoke(main, ["report", str(state), "--out", str(tmp_path / "r.md"), "--format", "md"])
    assert got.exit_code == 0 and got.exception is None, got.output
    assert f"lacks night(s) whose history file is damaged: {N1} (history/run" in (tmp_path / "r.md").read_text()


def test_a_night_whose_report_is_not_written_says_so_in_its_exit_status_and_manifest(made, tmp_path, monkeypatch):
    """Before: the sweep said one stderr line, exited 0 and its manifest said complete with no word of it."""
    import pipeline.report.html as html

    report, state = made[0], copied(made[1], tmp_path / "state")

    def broken(*_args, **_kwargs):
        raise RuntimeError("the template broke")

    monkeypatch.setattr(html, "write_report", broken)
    got = CliRunner().invoke(main, ["sweep", report, "--state-dir", str(state), "--night", N3, "--force", report])
    assert got.exit_code == 1, got.output
    night = state / "nights" / N3
    lines = [line for line in got.output.splitlines() if "ERROR" in line]
    assert lines == [f"gpu-idle: ERROR: {night}: not written: report.html (RuntimeError: the template broke)"]
    doc = manifest(night)
    assert doc["not_written"] == {"report.html": "RuntimeError: the template broke"}
    assert doc["complete"] is True and "report.html" not in doc["files"]
    # the documents it wrote are whole: a reader reads them
    assert load_results(str(state)).current_date == N3
    assert doc["files"]["fleet.parquet"] == file_entry(str(night / "fleet.parquet"))


def test_the_sweep_compares_with_a_last_night_only_as_its_manifest_vouches(made, tmp_path):
    """The sweep's own comparison reads the last night as every reader does: an edited table there is named,
    nothing is compared, and the night says what it did not write (before: compared with the edited table)."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    last = state / "nights" / N2
    table = pd.read_parquet(last / "fleet.parquet")
    table["idle_ns"] = table["idle_ns"] // 2
    table.to_parquet(last / "fleet.parquet", index=False)
    _, summary = again(report, state, N3, force=(report,))
    assert list(summary.not_written) == ["compare/compare.html"]
    assert summary.not_written["compare/compare.html"].startswith(
        f"{last}: not read: changed since gpu-idle wrote them (size or SHA-256 not the manifest's): fleet.parquet")
    night = state / "nights" / N3
    assert manifest(night)["not_written"] == summary.not_written and not (night / "compare").exists()
    assert (night / "report.html").exists()


# ---- the README's promise for the sweep too: one `gpu-idle: ERROR:` line, whatever stops it ------------------

def test_a_sweep_refusing_a_persons_file_and_a_rebuild_of_a_damaged_night_say_one_error_line(made, tmp_path):
    """Before: a refused night said click's `Error: cannot write the sweep's state folder: …` (not the one
    `gpu-idle: ERROR:` line every other command gives), and `sweep --report-only` of a night whose own history
    file is damaged ended in a traceback. Now both are one line and exit 1, the person's file untouched."""
    report, state = made[0], copied(made[1], tmp_path / "state")
    night = state / "nights" / N3
    (night / "records").mkdir(parents=True)
    (night / RECORD).write_text("mine\n")
    got = CliRunner().invoke(main, ["sweep", report, "--state-dir", str(state), "--night", N3])
    assert got.exit_code == 1, got.output
    lines = [line for line in got.output.splitlines() if "ERROR" in line or "Error" in line]
    assert len(lines) == 1 and lines[0].startswith("gpu-idle: ERROR: cannot write the sweep's state folder: "), lines
    assert f"holds 1 file(s) gpu-idle did not write ({RECORD})" in lines[0]
    assert (night / RECORD).read_text() == "mine\n"

    part = state / "history" / f"run_date={N2}" / "fleet.parquet"
    part.write_bytes(part.read_bytes()[:100])   # truncated
    got = CliRunner().invoke(main, ["sweep", "--state-dir", str(state), "--night", N2, "--report-only"])
    assert got.exit_code == 1 and isinstance(got.exception, SystemExit), (got.output, got.exception)
    lines = [line for line in got.output.splitlines() if "ERROR" in line or "Error" in line or "Traceback" in line]
    assert len(lines) == 1 and lines[0].startswith(f"gpu-idle: ERROR: {part}: night {N2}'s history file is damaged "
                                                   "(not a readable Parquet file"), lines
