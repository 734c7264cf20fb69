"""The output folders are the product's and only the product's (issue 23, points 1, 2 and 9): a run
never deletes or writes through what it cannot prove it wrote (its manifest, its temporary-name
pattern, at the depths it writes), never follows a symlinked sub-folder, holds the folder while it
writes it, keeps a folder only when the files hold what its manifest says, and on a full disk says
exactly what is missing (exit 1, no traceback) instead of leaving a half folder vouched for."""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli, small_reports

from pipeline.fleet.outputs import PAGES_DIR, gpu_json_name, gpu_page_name
from pipeline.report.medical import record_stem

MANIFEST = ".manifest.json"
#: The fleet tables every run writes at the top of its folder.
TABLES = ["clusters.csv", "fix_first.csv", "fix_first.json", "fleet.csv", "fleet.parquet", "jobs.csv"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """Three small reports (2 GPUs each), jobs named after the files."""
    return small_reports(tmp_path_factory.mktemp("safety"), "job", 3, seed=910)


@pytest.fixture
def env(tmp_path):
    return {"GPU_IDLE_CACHE": str(tmp_path / "cache")}


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (symlinks not followed) by relative path, with its bytes."""
    out = {}
    for root, dirs, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if not os.path.islink(path):
                with open(path, "rb") as fh:
                    out[os.path.relpath(path, folder)] = fh.read()
    return out


def outputs_of(fleet: pd.DataFrame) -> set[str]:
    """The relative paths of the files a run of ``fleet`` writes, worked out from its rows."""
    ok = fleet[fleet["status"] != "error"]
    gpus = {f"gpus/{gpu_json_name(r, g)}" for r, g in zip(ok["report"], ok["gpu_key"])}
    return set(TABLES) | gpus | {f"records/{record_stem(str(j))}.md" for j in fleet["job"].unique()}


def manifest(folder: Path) -> dict:
    return json.loads((folder / MANIFEST).read_text())


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# ---- 1. never delete or write what is not ours ------------------------------------------------

#: Files a person keeps in a folder, at the places the product writes (and deeper).
FOREIGN = {"records/notes.md": "my notes", "gpus/data.json": '{"mine": 1}', "report.html": "<p>my page</p>",
           f"{PAGES_DIR}/mine.html": "<p>mine</p>", "deep/nested/.important.tmp": "not a leftover",
           ".fleet.csv.keep.tmp.bak": "a backup"}


def plant(folder: Path, files: dict) -> None:
    for rel, text in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)


@pytest.mark.parametrize("names", [list(FOREIGN), ["records/notes.md"], ["deep/nested/.important.tmp"],
                                   ["fleet.csv"]])
def test_a_folder_holding_files_not_ours_is_refused_and_nothing_in_it_is_touched(reports, tmp_path, env, names):
    """--out S where S holds someone's files and no manifest of ours: exit 2 naming them, every file as
    it was, nothing analysed (before: all of them deleted, exit 0, "removed 4 file(s) of an earlier run")."""
    out = tmp_path / "S"
    files = {n: FOREIGN.get(n, "a table of mine") for n in names}
    plant(out, files)
    proc = run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), check=False, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"Invalid value for --out: {out}: holds {len(files)} file(s) gpu-idle did not write" in proc.stderr
    for rel in sorted(files)[:3]:
        assert rel in proc.stderr
    assert "report(s) analysed" not in proc.stdout and "Traceback" not in proc.stderr
    assert tree(out) == {rel: text.encode() for rel, text in files.items()}


@pytest.mark.slow
def test_a_folder_of_ours_keeps_the_files_it_did_not_write(reports, tmp_path, env):
    """A run folder with a person's files added at every depth: a rerun with other inputs removes only
    the files the manifest lists (and its own temporary files where it writes); theirs stay, byte for byte."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    first = outputs_of(pd.read_parquet(out / "fleet.parquet"))
    run_cli("report", str(out), "--out", str(out / "report.html"))
    pages = {p for p in os.listdir(out / PAGES_DIR) if p.endswith(".html")}
    assert len(pages) == 2
    mine = {k: v for k, v in FOREIGN.items() if k != "report.html"}   # report.html is now the product's
    plant(out, mine)
    leftovers = [out / ".fleet.csv.0a1b2c3d4e5f.tmp", out / "gpus" / ".x.json.ab12cd34ef56.tmp"]
    for path in leftovers:
        path.write_text("half-written by a killed run")
    proc = run_cli("run", str(reports / "job1.sqlite"), "--out", str(out), env=env)
    second = outputs_of(pd.read_parquet(out / "fleet.parquet"))
    gone = {p for p in first - second} | {"report.html"} | {f"{PAGES_DIR}/{p}" for p in pages}
    # what went: job0's 2 per-GPU files and its record, the report and its 2 pages (counted), nothing else
    assert len(gone) == 6
    assert ("; removed 6 file(s) of an earlier run (3 per-GPU file(s) and record(s) of other inputs; report.html "
            "and 2 GPU page(s) rendered from its outputs") in proc.stdout
    files = tree(out)
    assert {rel: files[rel] for rel in mine} == {rel: text.encode() for rel, text in mine.items()}
    assert not any(p.exists() for p in leftovers)
    assert set(files) == second | set(mine) | {MANIFEST}   # the lock went with its holder
    assert set(manifest(out)["files"]) == second


@pytest.mark.parametrize("sub", [PAGES_DIR, "gpus", "records"])
def test_a_symlinked_sub_folder_is_never_followed(reports, tmp_path, env, sub):
    """OUT/<sub> a symlink to another folder: `run` and `report` refuse it, naming it, and the other
    folder's files are as they were (before: run deleted its *.html, report wrote pages into it)."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    elsewhere = tmp_path / "elsewhere"
    plant(elsewhere, {"a.html": "<p>a</p>", "b.json": "{}", "c.md": "c"})
    before = tree(elsewhere)
    if (out / sub).exists():
        shutil.rmtree(out / sub)
    (out / sub).symlink_to(elsewhere, target_is_directory=True)
    proc = run_cli("run", str(reports / "job1.sqlite"), "--out", str(out), check=False, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{out / sub}: a symbolic link (not followed: gpu-idle writes only into real folders)" in proc.stderr
    assert tree(elsewhere) == before and "Traceback" not in proc.stderr
    if sub == PAGES_DIR:
        rep = run_cli("report", str(out), "--out", str(out / "report.html"), check=False)
        assert rep.returncode == 2, rep.stdout + rep.stderr  # nothing done: README "Exit status"
        assert f"{out / sub}: a symbolic link (not followed" in rep.stderr and "Traceback" not in rep.stderr
        assert tree(elsewhere) == before and not (out / "report.html").exists()


@pytest.mark.slow
def test_report_into_a_folder_of_pages_it_did_not_write_keeps_them(reports, tmp_path, env):
    """`report --out X/report.html` where X/gpu-pages/ holds a person's pages: theirs stay; the report's own
    pages are listed in the pages folder's manifest, and the next report removes only those it wrote."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    share = tmp_path / "share"
    plant(share, {f"{PAGES_DIR}/mine.html": "<p>mine</p>", f"{PAGES_DIR}/old.html": "<p>old</p>"})
    rep = run_cli("report", str(out), "--out", str(share / "report.html"))
    fleet = pd.read_parquet(out / "fleet.parquet")
    pages = {gpu_page_name(r, g) for r, g in zip(fleet["report"], fleet["gpu_key"])}
    assert set(os.listdir(share / PAGES_DIR)) == pages | {"mine.html", "old.html"}
    assert set(json.loads((share / ".gpu-pages.json").read_text())["files"]) == \
        {f"{PAGES_DIR}/{p}" for p in pages} | {"report.html"}
    assert f"and 2 GPU page(s) in {share / PAGES_DIR}{os.sep}" in rep.stdout
    run_cli("run", str(reports / "job1.sqlite"), "--out", str(out), env=env)
    run_cli("report", str(out), "--out", str(share / "report.html"))
    fleet = pd.read_parquet(out / "fleet.parquet")
    now = {gpu_page_name(r, g) for r, g in zip(fleet["report"], fleet["gpu_key"])}
    assert set(os.listdir(share / PAGES_DIR)) == now | {"mine.html", "old.html"}
    assert (share / PAGES_DIR / "mine.html").read_text() == "<p>mine</p>"


# ---- 2. one run at a time, and a manifest that covers the files' content ------------------------

@contextlib.contextmanager
def held(folder: Path, holder: str):
    """Hold ``folder/.gpu-idle.lock`` (an exclusive flock) from this process, naming ``holder`` in it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".gpu-idle.lock", os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0)
        os.pwrite(fd, holder.encode(), 0)
        yield
    finally:
        os.close(fd)


def test_a_run_into_a_folder_another_run_writes_is_refused_naming_it(reports, tmp_path, env):
    """While one process holds the folder (run B), another run into it (A) stops at once, naming the
    holder, and writes nothing (before: it wrote over B's tables half-way through B's run)."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    before = {k: v for k, v in tree(out).items() if k != ".gpu-idle.lock"}
    with held(out, f"pid {os.getpid()} on testhost, gpu-idle run, started 2026-12-01T16:00:00+00:00"):
        proc = run_cli("run", str(reports / "job1.sqlite"), "--out", str(out), check=False, env=env)
        rep = run_cli("report", str(out), "--out", str(out / "report.html"), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"{out}: another gpu-idle process is writing this folder (pid {os.getpid()} on testhost, gpu-idle run, "
            "started 2026-12-01T16:00:00+00:00)") in proc.stderr
    assert "report(s) analysed" not in proc.stdout
    assert rep.returncode == 2 and "another gpu-idle process is writing this folder" in rep.stderr
    assert {k: v for k, v in tree(out).items() if k != ".gpu-idle.lock"} == before
    after = run_cli("run", str(reports / "job1.sqlite"), "--out", str(out), env=env)   # released with its holder
    assert "1 report(s) analysed" in after.stdout
    assert not (out / ".gpu-idle.lock").exists()   # removed by the run that held it last


@pytest.mark.parametrize("change", ["other run's tables", "same-size edit"])
def test_kept_only_when_the_files_hold_what_the_manifest_says(reports, tmp_path, env, change):
    """Run A, then B's tables land in A's folder under A's manifest (the interleaving of two runs of earlier
    code, which took no lock), or a same-size edit: the next A run never says "kept everything" with B's
    dollars; the changed files no longer hold what A wrote, so it refuses to overwrite them (exit 2, naming
    them) and keeps nothing; once they are moved away, A's outputs are written again, and kept after."""
    out, other = tmp_path / "a", tmp_path / "b"
    report = str(reports / "job2.sqlite")
    run_cli("run", report, "--out", str(out), env=env)
    mine = tree(out)
    assert ".gpu-idle.lock" not in mine
    run_cli("run", report, "--out", str(other), "--min-gap-ns", "50000000", env=env)
    if change == "other run's tables":
        for name in TABLES:
            shutil.copyfile(other / name, out / name)
        assert (out / "fleet.parquet").read_bytes() != mine["fleet.parquet"]
    else:
        text = (out / "fleet.csv").read_bytes()
        edited = text.replace(b"0", b"1", 1)
        assert len(edited) == len(text) and edited != text
        (out / "fleet.csv").write_bytes(edited)
    changed = sorted(TABLES if change == "other run's tables" else ["fleet.csv"])
    before = tree(out)
    proc = run_cli("run", report, "--out", str(out), check=False, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "kept everything" not in proc.stdout and "are up to date" not in proc.stdout
    shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
    assert f"or were changed since it wrote them ({shown})" in proc.stderr
    assert {k: v for k, v in tree(out).items() if k != MANIFEST} == {k: v for k, v in before.items() if k != MANIFEST}
    for name in changed:
        (out / name).unlink()
    proc = run_cli("run", report, "--out", str(out), env=env)
    assert "0 report(s) analysed, 1 reused" in proc.stdout
    assert {k: v for k, v in tree(out).items() if k not in (MANIFEST, ".gpu-idle.lock")} == \
        {k: v for k, v in mine.items() if k not in (MANIFEST, ".gpu-idle.lock")}
    doc = manifest(out)
    assert doc["files"] == {rel: {"size": (out / rel).stat().st_size, "sha256": sha256(out / rel)}
                            for rel in sorted(doc["files"])}
    again = run_cli("run", report, "--out", str(out), env=env)
    assert "kept everything" in again.stdout


def test_a_manifest_of_earlier_code_proves_ownership_but_keeps_nothing(reports, tmp_path, env):
    """A folder whose manifest lists its files by name only (earlier code): the folder is the product's
    (no refusal, its stale files pruned by name), but nothing vouches for the files' content, so the
    rerun rewrites them and its manifest records every file's size and SHA-256."""
    out = tmp_path / "out"
    report = str(reports / "job0.sqlite")
    run_cli("run", report, "--out", str(out), env=env)
    doc = manifest(out)
    (out / MANIFEST).write_text(json.dumps({"inputs": doc["inputs"], "files": sorted(doc["files"])}))
    proc = run_cli("run", report, "--out", str(out), env=env)
    assert "kept everything" not in proc.stdout and "0 report(s) analysed, 1 reused" in proc.stdout
    again = manifest(out)
    assert again["complete"] is True and again["inputs"] == doc["inputs"]
    assert again["files"] == {rel: {"size": (out / rel).stat().st_size, "sha256": sha256(out / rel)}
                              for rel in sorted(doc["files"])}


# ---- 9. a full disk -----------------------------------------------------------------------------

@dataclasses.dataclass
class Disk:
    """A folder that fills up: ``path``; ``preexec``: what the ``gpu-idle`` process needs before it runs
    (None on a real small file system); ``cause``: the error its writes then get."""

    path: Path
    preexec: object
    cause: str


@contextlib.contextmanager
def small_disk(folder: Path, size_kib: int, file_limit: int):
    """A tmpfs of ``size_kib`` KiB mounted on ``folder``, a real ENOSPC when it fills. Where no tmpfs can
    be mounted (a container without the right), every file the ``gpu-idle`` process writes is limited
    to ``file_limit`` bytes instead (RLIMIT_FSIZE: a larger write fails with EFBIG, "File too large";
    Python ignores the SIGXFSZ that comes with it)."""
    import resource

    folder.mkdir(parents=True, exist_ok=True)
    got = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kib}k", "tmpfs", str(folder)],
                         capture_output=True, text=True)
    if got.returncode != 0:
        yield Disk(folder, lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit)),
                   os.strerror(errno.EFBIG))
        return
    try:
        yield Disk(folder, None, os.strerror(errno.ENOSPC))
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def missing_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "outputs are incomplete" in line]
    assert len(lines) == 1, stderr
    return lines[0]


@pytest.mark.slow
def test_a_full_disk_as_out_says_what_is_missing(tmp_path, env):
    """--out on a disk that fills half-way: exit 1, one line naming the cause and every missing file (as
    counted against the complete folder the same run makes on a roomy disk), no traceback, no manifest
    vouching for the half folder; a run with room again completes it."""
    from pipeline.synth import generate_training_report

    report = tmp_path / "wide.sqlite"
    generate_training_report(str(report), gpus=8, iterations=6, seed=77, straggler_rank=None)
    roomy = tmp_path / "roomy"
    run_cli("run", str(report), "--out", str(roomy), env=env)
    complete = outputs_of(pd.read_parquet(roomy / "fleet.parquet"))
    assert len(complete) == 15   # 6 tables, 8 per-GPU files, 1 record
    sizes = sorted((roomy / rel).stat().st_size for rel in complete)
    with small_disk(tmp_path / "disk", (sum(sizes) - sizes[-1] - sizes[-2]) // 1024, sizes[-2] - 1) as disk:
        out = disk.path / "out"
        proc = run_cli("run", str(report), "--out", str(out), check=False, env=env, preexec_fn=disk.preexec)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
        line = missing_line(proc.stderr)
        assert line.startswith(f"gpu-idle: ERROR: {out}: the outputs are incomplete ({disk.cause}")
        present = {rel for rel in complete if (out / rel).exists()
                   and (out / rel).read_bytes() == (roomy / rel).read_bytes()}
        missing = sorted(complete - present)
        assert missing, "the disk did not fill: nothing to check"
        assert f"missing {len(missing)} of {len(complete)} file(s): {', '.join(missing)}" in line
        doc = manifest(out) if (out / MANIFEST).exists() else {"inputs": None, "complete": False}
        assert doc.get("inputs") is None and doc.get("complete") is False
        assert "kept everything" not in proc.stdout
        shutil.copytree(out, tmp_path / "moved", symlinks=True)
    moved = tmp_path / "moved"
    rerun = run_cli("run", str(report), "--out", str(moved), env=env)   # room again: the folder is completed
    assert "0 report(s) analysed, 1 reused" in rerun.stdout
    assert {rel: (moved / rel).read_bytes() for rel in complete} == \
        {rel: (roomy / rel).read_bytes() for rel in complete}
    assert manifest(moved)["complete"] is True


@pytest.mark.slow
def test_a_full_disk_as_the_sweeps_state_folder_writes_no_history_row(reports, tmp_path):
    """The sweep's state folder fills while the night is written: exit 1, no traceback, the line names
    every file of the night not written (counted against the same sweep on a roomy disk), and the night
    gets no history row (before: the row was written first, then a traceback)."""
    night = "2026-12-01"
    roomy = tmp_path / "roomy"
    run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(roomy), "--night", night)
    complete = outputs_of(pd.read_parquet(roomy / "nights" / night / "fleet.parquet")) | {"report.html"}
    assert (roomy / "nights" / night / "report.html").exists()
    with small_disk(tmp_path / "disk", 160, 20_000) as disk:
        state = disk.path / "state"
        proc = run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(state), "--night", night,
                       check=False, preexec_fn=disk.preexec)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        line = missing_line(proc.stderr)
        folder = state / "nights" / night
        assert line.startswith(f"gpu-idle: ERROR: {folder}: the outputs are incomplete ({disk.cause}")
        present = {rel for rel in complete if (folder / rel).exists()
                   and (folder / rel).read_bytes() == (roomy / "nights" / night / rel).read_bytes()}
        missing = sorted(complete - present)
        assert missing, "the disk did not fill: nothing to check"
        assert (f"missing {len(missing)} of {len(complete)} file(s): {', '.join(missing)}; no history row for the "
                f"night (history/run_date={night})") in line
        assert not (state / "history" / f"run_date={night}").exists()
        assert (roomy / "history" / f"run_date={night}" / "fleet.parquet").exists()


@pytest.mark.slow
def test_a_full_disk_as_report_out_says_what_is_missing(tmp_path, env):
    """`report --out` on a disk with room for some GPU pages only: exit 1, no traceback, a line naming the
    cause and what was not written (report.html, the pages missing)."""
    from pipeline.synth import generate_training_report

    report = tmp_path / "wide.sqlite"
    generate_training_report(str(report), gpus=8, iterations=6, seed=78, straggler_rank=None)
    out = tmp_path / "out"
    run_cli("run", str(report), "--out", str(out), env=env)
    roomy = tmp_path / "roomy"
    run_cli("report", str(out), "--out", str(roomy / "report.html"))
    pages = sorted(os.listdir(roomy / PAGES_DIR))
    page_size = max((roomy / PAGES_DIR / p).stat().st_size for p in pages if p.endswith(".html"))
    with small_disk(tmp_path / "disk", 3 * page_size // 1024 + 8, page_size // 2) as small:
        disk = small.path
        proc = run_cli("report", str(out), "--out", str(disk / "report.html"), check=False, preexec_fn=small.preexec)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr
        written = sorted(p for p in os.listdir(disk / PAGES_DIR) if p.endswith(".html")) \
            if (disk / PAGES_DIR).exists() else []
        assert len(written) < 8 and not (disk / "report.html").exists()
        assert (f"Error: {disk / 'report.html'}: not written ({small.cause}); "
                f"{len(written)} of 8 GPU page(s) written in {disk / PAGES_DIR}{os.sep}") in proc.stderr


@pytest.mark.slow
def test_a_stored_report_that_fails_now_is_not_kept_as_a_failure(reports, tmp_path):
    """A report whose result is stored fails when analysed again (here its read meets a tiny time
    bound, with the columnar cache gone): the night has its error row, but no manifest may vouch for
    it, so the next plain sweep rebuilds the night from the stored result (exit 0, no error row).
    Before: the failed night kept the good night's inputs digest and every later sweep printed the
    same error row, reused."""
    night, report = "2026-12-01", str(reports / "job0.sqlite")
    state = tmp_path / "state"
    run_cli("sweep", report, "--state-dir", str(state), "--night", night, env={"GPU_IDLE_CACHE": str(tmp_path / "c1")})
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text("export:\n  read_timeout_s: 0.000001\n")
    failed = run_cli("sweep", report, "--state-dir", str(state), "--night", night, "--config", str(tiny),
                     "--force", report, check=False, env={"GPU_IDLE_CACHE": str(tmp_path / "c2")})
    assert failed.returncode == 1, failed.stdout + failed.stderr
    fleet = pd.read_parquet(state / "nights" / night / "fleet.parquet")
    assert list(fleet["status"]) == ["error"]
    assert manifest(state / "nights" / night).get("inputs") is None
    again = run_cli("sweep", report, "--state-dir", str(state), "--night", night,
                    env={"GPU_IDLE_CACHE": str(tmp_path / "c2")})
    fleet = pd.read_parquet(state / "nights" / night / "fleet.parquet")
    assert list(fleet["status"]) == ["ok", "ok"], again.stdout


@pytest.mark.slow
def test_a_rebuild_waits_for_no_sweep_it_is_refused(reports, tmp_path):
    """`sweep --report-only` (make report) holds the state folder's lock as a sweep does: while another
    process holds it, the rebuild is refused naming the holder and the night is left as it was
    (before: it rewrote the night under a running sweep)."""
    night, state = "2026-12-01", tmp_path / "state"
    run_cli("sweep", str(reports / "job0.sqlite"), "--state-dir", str(state), "--night", night,
            env={"GPU_IDLE_CACHE": str(tmp_path / "c")})
    before = tree(state / "nights" / night)
    with open(state / ".sweep.lock", "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fh.seek(0)
        fh.truncate()
        fh.write("pid 1 on test-host, gpu-idle sweep, started now")
        fh.flush()
        proc = run_cli("sweep", "--state-dir", str(state), "--night", night, "--report-only", check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "another sweep is running on this state folder (pid 1 on test-host" in proc.stderr
    assert tree(state / "nights" / night) == before


def test_a_persons_file_where_a_run_writes_is_never_overwritten(reports, tmp_path, env):
    """A folder of ours (it has our manifest) where a person put a file at a path a later run writes
    (the record of a job that run adds): that run is refused (exit 2) naming the file, and neither the
    file nor the folder's outputs change. Before: the record overwrote the notes (exit 0) and the next
    run with other inputs removed them as 'of an earlier run'."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    notes = out / "records" / f"{record_stem('job1')}.md"
    notes.write_text("my precious notes\n")
    before = tree(out)
    proc = run_cli("run", str(reports / "job0.sqlite"), str(reports / "job1.sqlite"), "--out", str(out),
                   check=False, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert ("1 file(s) this run writes are there already and are not gpu-idle's, or were changed since it wrote "
            "them (records/job1.md)") in proc.stderr
    after = tree(out)
    claimed = manifest(out)
    assert claimed["inputs"] is None and claimed["complete"] is False
    new = sorted(set(after) - set(before))  # the per-GPU files job1's task wrote: claimed as ours, by name
    assert new and all(rel.startswith("gpus/job1.sqlite__") for rel in new)
    assert all(claimed["files"][rel] is None for rel in new)
    assert {rel: after[rel] for rel in before if rel != MANIFEST} == {rel: b for rel, b in before.items() if rel != MANIFEST}
    # Moved away, the same run writes the folder; job1's result was stored by the refused run: reused.
    notes.unlink()
    again = run_cli("run", str(reports / "job0.sqlite"), str(reports / "job1.sqlite"), "--out", str(out), env=env)
    assert "0 report(s) analysed, 2 reused" in again.stdout
    assert notes.read_text() != "my precious notes\n"


def test_names_and_holders_in_error_messages_reach_the_terminal_escaped(reports, tmp_path, env):
    """A foreign file's name and a lock holder's text (the lock file is anyone's to write) are quoted in
    the refusal messages: their escape sequences are spelled out (pipeline.text.message), never sent raw
    to the terminal (before: a file named with ESC ]0; set the window title)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "x\x1b]0;PWNED\x07\u202e.txt").write_text("mine")
    proc = run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), check=False, env=env)
    assert proc.returncode == 2
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr and "\u202e" not in proc.stderr
    assert "x\\x1b]0;PWNED\\x07\\u202e.txt" in proc.stderr
    ours = tmp_path / "ours"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(ours), env=env)
    with held(ours, "pid 7 \x1b[2J\x1b]0;evil\x07"):
        busy = run_cli("run", str(reports / "job0.sqlite"), "--out", str(ours), check=False, env=env)
    assert busy.returncode == 2 and "\x1b" not in busy.stderr
    assert "(pid 7 \\x1b[2J\\x1b]0;evil\\x07)" in busy.stderr


@pytest.mark.slow
def test_a_persons_file_in_records_is_no_record_of_the_report(reports, tmp_path, env):
    """A person's Markdown file in a run folder's records/ is kept (never deleted) and is no medical record
    of the fleet: the report shows the records of the fleet's jobs only (before: 'Medical record: my-notes'
    among the jobs)."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), env=env)
    (out / "records" / "my-notes.md").write_text("# my-notes\n\nthe secret plan\n")
    run_cli("report", str(out), "--out", str(out / "report.html"))
    html = (out / "report.html").read_text()
    assert "the secret plan" not in html and "my-notes" not in html
    assert f'id="record-{record_stem("job0")}"' in html
    assert (out / "records" / "my-notes.md").read_text() == "# my-notes\n\nthe secret plan\n"


@pytest.mark.slow
def test_per_gpu_files_a_killed_run_left_unlisted_are_known_as_ours(reports, tmp_path, env):
    """A run killed after its tasks wrote per-GPU files and before its manifest listed them leaves gpus/
    files no manifest lists (the state is made here as such a kill leaves it: a new folder, its manifest
    marked as changing with nothing listed, gpus/ as the tasks wrote it). Their content proves them ours
    (their name is the hash of the report and GPU they name): the same run again writes the folder (was
    refused as 'not gpu-idle's'), and a run with other inputs removes them; a person's gpus/data.json beside
    them is kept."""
    done = tmp_path / "done"
    inputs = [str(reports / "job0.sqlite"), str(reports / "job1.sqlite")]
    run_cli("run", *inputs, "--out", str(done), env=env)
    out = tmp_path / "out"
    shutil.copytree(done / "gpus", out / "gpus")
    (out / "gpus" / "data.json").write_text('{\n  "report": "mine",\n  "gpu_key": "x"\n}\n')
    (out / MANIFEST).write_text(json.dumps({"inputs": None, "complete": False, "files": {}}))
    killed = sorted(os.listdir(done / "gpus"))
    assert len(killed) == 4
    again = run_cli("run", *inputs, "--out", str(out), check=False, env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(os.listdir(out / "gpus")) == sorted(killed + ["data.json"])
    # Killed again, in a folder of ours: the manifest still lists the tables and records, not gpus/.
    doc = manifest(out)
    doc.update(inputs=None, complete=False, files={k: v for k, v in doc["files"].items() if not k.startswith("gpus/")})
    (out / MANIFEST).write_text(json.dumps(doc))
    other = run_cli("run", str(reports / "job2.sqlite"), "--out", str(out), env=env)
    left = sorted(os.listdir(out / "gpus"))
    assert "data.json" in left and not set(killed) & set(left), other.stdout
    assert len(left) == 3 and all(n.startswith("job2.sqlite__") for n in left if n != "data.json")


@pytest.mark.slow
def test_a_second_report_into_the_folder_of_anothers_pages_is_refused(reports, tmp_path, env):
    """Two reports rendered into one folder would share gpu-pages/: the second is refused (exit 2, naming
    the first) and the first's pages and links stay whole (before: the second removed the first's pages,
    'wrote … 2 GPU page(s)', and every GPU link of the first report was broken)."""
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(a), env=env)
    run_cli("run", str(reports / "job1.sqlite"), "--out", str(b), env=env)
    share = tmp_path / "share"
    run_cli("report", str(a), "--out", str(share / "first.html"))
    before = tree(share)
    proc = run_cli("report", str(b), "--out", str(share / "second.html"), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{share / PAGES_DIR}: holds the GPU pages of another report beside it (first.html)" in proc.stderr
    assert tree(share) == before
    (share / "first.html").unlink()  # the first report gone: its pages are the second's to replace
    run_cli("report", str(b), "--out", str(share / "second.html"))
    fleet = pd.read_parquet(b / "fleet.parquet")
    assert sorted(os.listdir(share / PAGES_DIR)) == sorted(gpu_page_name(r, g) for r, g in
                                                         zip(fleet["report"], fleet["gpu_key"]))


@pytest.mark.parametrize("edited", ["fleet.csv", "records", "gpus"])
def test_an_output_a_person_edited_is_never_overwritten(reports, tmp_path, env, edited):
    """An output of ours that a person changed since (its size and SHA-256 are no longer the manifest's) is
    theirs now: a run that would write it again is refused (exit 2, naming it) and the edit stays (before:
    overwritten, exit 0). A run interrupted while it rewrote its outputs leaves them claimed by name, so the
    next run is not refused."""
    out = tmp_path / "out"
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), "--no-cache", env=env)
    rel = {"fleet.csv": "fleet.csv", "records": f"records/{record_stem('job0')}.md",
           "gpus": next(f"gpus/{n}" for n in sorted(os.listdir(out / "gpus")))}[edited]
    with open(out / rel, "a", encoding="utf-8") as fh:
        fh.write("\nMY EDIT\n")
    mine = (out / rel).read_bytes()
    proc = run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), "--no-cache", check=False, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert f"or were changed since it wrote them ({rel})" in proc.stderr
    assert (out / rel).read_bytes() == mine
    # As an interrupted rewrite leaves it: every output claimed by name, whatever it holds now.
    doc = manifest(out)
    doc.update(inputs=None, complete=False, files={k: None for k in doc["files"]})
    (out / MANIFEST).write_text(json.dumps(doc))
    run_cli("run", str(reports / "job0.sqlite"), "--out", str(out), "--no-cache", env=env)
    assert b"MY EDIT" not in (out / rel).read_bytes() and manifest(out)["complete"] is True
