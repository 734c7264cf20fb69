"""pipeline.inputs.export on real Nsight Systems reports, recorded here without a GPU.

A small C program (tests/nvtx_app/app.c) marks a ten-iteration "training loop"
with NVTX push/pop ranges; the real ``nsys`` that ``make nsys`` unpacks into
tools/nsys/ records it with ``--trace=nvtx,osrt`` (CPU only; sampling and
context-switch tracing off, see PROFILE_OPTIONS), and
``export_report`` turns the ``.nsys-rep`` into SQLite through ``nsys export``.
The app plants a warm-up iteration 0 of about 3x and a checkpoint iteration 6 of
about 5x a normal ~50 ms iteration, each with nested forward/backward ranges. It
spins on the wall clock, so a busy machine that preempts it stretches a range now
and then: the tests therefore compare the export with what the app itself saw
(CLOCK_MONOTONIC just before and after each NVTX push and pop, written to
``seen.tsv`` beside the recording), never with the planted figures.

Nothing here is skipped: without tools/nsys or gcc the tests fail and say how
to get them (`make test` runs `make nsys` first).
"""
from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from helpers.window import choose_window
from pipeline.inputs import export
from pipeline.checksums import sidecar_of
from pipeline.inputs.export import ExportError, export_report, find_nsys
from pipeline.load.report import ProfileError, load_report

REPO = Path(__file__).resolve().parents[1]
APP_SOURCE = REPO / "tests" / "nvtx_app" / "app.c"
NSYS = export.REPO_NSYS
NVTX_HEADER = "nvtx3/nvToolsExt.h"
MS = 1_000_000  # ns per ms
ITERATIONS = 10
WARMUP, CHECKPOINT = 0, 6


def _need_nsys() -> Path:
    if not os.access(NSYS, os.X_OK):
        pytest.fail(f"{NSYS} not found: run `make nsys` (scripts/install_nsys.sh) to unpack the "
                    "Nsight Systems CLI into tools/nsys/; `make test` does this first")
    return NSYS


def _nvtx_include(nsys: Path) -> Path:
    """``target-linux-x64/nvtx/include`` of the unpacked package (NVTX3, header-only)."""
    root = REPO / "tools" / "nsys"
    hits = sorted(root.glob(f"usr/lib/**/target-linux-x64/nvtx/include/{NVTX_HEADER}"))
    if not hits:
        pytest.fail(f"no {NVTX_HEADER} under {root}: reinstall with `NSYS_FORCE=1 make nsys`")
    return hits[0].parent.parent


def _write_exe(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture(scope="module")
def nsys() -> Path:
    return _need_nsys()


#: ``nsys profile`` options. CPU sampling and context-switch tracing are off: with
#: either on, nsys 2022.4 on a small VM intermittently never finishes after the app
#: exits (its agent spins, "No transition in ...Profiler8ShutdownE ... InterruptE").
PROFILE_OPTIONS = ["--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none", "--force-overwrite", "true"]
PROFILE_TIMEOUT_S = 120
PROFILE_ATTEMPTS = 2


def _end_agents(launcher_pid: int, grace_s: float = 5.0) -> None:
    """End the ``nsys --start-agent`` that ``nsys profile`` (pid ``launcher_pid``)
    daemonised, if it is still there after ``grace_s``: it is named by the
    launcher's pid (``--session-name=profile-<app>-<pid>``) and is ours."""
    suffix = f"-{launcher_pid}"
    deadline = time.monotonic() + grace_s
    while True:
        agents = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--start-agent" in argv and any(a.startswith(b"--session-name=profile-") and
                                                a.endswith(suffix.encode()) for a in argv):
                agents.append(int(proc.name))
        if not agents:
            return
        if time.monotonic() >= deadline:
            for pid in agents:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            return
        time.sleep(0.2)


#: The app's own record of its ranges, written beside the recording.
SEEN = "seen.tsv"


def _profile(nsys: Path, app: Path, out_base: Path) -> tuple[int | None, str]:
    """Run ``nsys profile`` once; (exit code or None on timeout, output). The app writes what it saw of
    its ranges to :data:`SEEN` beside ``out_base``."""
    proc = subprocess.Popen([str(nsys), "profile", *PROFILE_OPTIONS, "-o", str(out_base), str(app),
                             str(out_base.parent / SEEN)],
                            cwd=out_base.parent, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=PROFILE_TIMEOUT_S)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        code = None
    finally:
        _end_agents(proc.pid)
    return code, out


@pytest.fixture(scope="module")
def recording(nsys, tmp_path_factory) -> Path:
    """Compile the NVTX app and record it with ``nsys profile --trace=nvtx,osrt``; the .nsys-rep."""
    work = tmp_path_factory.mktemp("nvtx_app")
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.fail("gcc not found: the export tests compile tests/nvtx_app/app.c (apt-get install gcc libc6-dev)")
    app = work / "app"
    build = subprocess.run([cc, "-O1", "-Wall", "-I", str(_nvtx_include(nsys)), str(APP_SOURCE), "-o", str(app),
                            "-ldl"], capture_output=True, text=True)
    assert build.returncode == 0, f"compiling {APP_SOURCE} failed:\n{build.stderr}"
    rep = work / "run.nsys-rep"
    tries = []
    for _ in range(PROFILE_ATTEMPTS):  # a second try only for nsys's own intermittent hang or failure
        code, out = _profile(nsys, app, work / "run")
        if code == 0 and rep.is_file() and rep.stat().st_size > 0:
            assert "10 iterations done" in out
            return rep
        state = f"timed out after {PROFILE_TIMEOUT_S} s" if code is None else f"exited {code}"
        tries.append(f"nsys profile {state}; wrote {rep.name}: {rep.is_file()}\n{out[-3000:]}")
    pytest.fail("recording the NVTX app failed (is the importer link in tools/nsys missing? "
                "`NSYS_FORCE=1 make nsys` reinstalls):\n" + "\n---\n".join(tries))


@pytest.fixture(scope="module")
def exported(recording, nsys, tmp_path_factory) -> str:
    return export_report(recording, nsys_path=nsys, cache_dir=tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def seen(recording) -> pd.DataFrame:
    """What the app saw of each range, in push order: text and CLOCK_MONOTONIC (ns) just before and just
    after its push and its pop."""
    return pd.read_csv(recording.parent / SEEN, sep="\t", header=None,
                       names=["text", "before_push", "after_push", "before_pop", "after_pop"])


#: Slack on the bounds the app's records give: 1 us of timestamp rounding plus 100 ppm of the interval
#: (should nsys's clock run at another rate than CLOCK_MONOTONIC; here they agree to the ns).
SLACK_NS, SLACK_RATE = 1_000, 1e-4


def _within(value: int, low: int, high: int) -> bool:
    slack = SLACK_NS + SLACK_RATE * max(abs(low), abs(high))
    return low - slack <= value <= high + slack


def _nvtx(sqlite_path: str) -> tuple[pd.DataFrame, dict]:
    """NVTX ranges and export metadata of a CPU-only export (no kernels)."""
    report = load_report(sqlite_path, require_kernels=False)
    assert report.kernels.empty and not report.nvtx.empty
    return report.nvtx, report.meta


@pytest.mark.needs_nsys
def test_window_from_the_real_capture_is_the_window_of_what_the_app_ran(exported, seen):
    """capture -> export -> load -> window: the window the product picks on the real capture is the one
    the same rules pick on the ranges as the app itself timed them (the app plants a warm-up and a
    checkpoint; a preempted range may add an outlier, and then both sides must name it)."""
    report = load_report(exported, require_kernels=False)
    win = choose_window(report.kernels, report.nvtx, "auto")
    iters = report.nvtx[report.nvtx["text"].str.fullmatch(r"Iteration \d+")].sort_values("start")
    pid, tid = int(iters["pid"].iloc[0]), int(iters["tid"].iloc[0])
    own = pd.DataFrame({"start": (seen["before_push"] + seen["after_push"]) // 2,
                        "end": (seen["before_pop"] + seen["after_pop"]) // 2,
                        "pid": pid, "tid": tid, "text": seen["text"]})
    want = choose_window(pd.DataFrame(columns=report.kernels.columns), own, "auto")
    assert (win.rule, win.untrimmed, win.iterations) == ("nvtx", False, want.iterations)
    assert dict(win.excluded) == dict(want.excluded)
    assert dict(win.excluded)[WARMUP] == "warm-up"
    # The window runs from the first kept iteration's start to the last one's end, as exported.
    own_iters = own[own["text"].str.fullmatch(r"Iteration \d+")].reset_index(drop=True)
    first = int(own_iters.index[own_iters["start"] == want.start_ns][0])
    last = int(own_iters.index[own_iters["end"] == want.end_ns][0])
    assert last - first + 1 == win.iterations
    assert win.start_ns == int(iters.iloc[first]["start"])
    assert win.end_ns == int(iters.iloc[last]["end"])


@pytest.mark.needs_nsys
def test_export_is_a_real_nsight_export(exported, recording):
    assert exported.endswith(".sqlite") and os.path.isfile(exported)
    _, meta = _nvtx(exported)
    assert meta.get("EXPORT_PRODUCT_NAME") == "NVIDIA Nsight Systems"
    assert meta.get("EXPORT_PRODUCT_VERSION", "").startswith("2022.4")
    assert os.path.samefile(meta["EXPORT_INPUT_PATH_ABS"], recording)


@pytest.mark.needs_nsys
def test_cpu_only_capture_is_an_error_for_the_gpu_loader(exported):
    """No kernels, so the full loader refuses it with a ProfileError (an error row in a sweep)."""
    with pytest.raises(ProfileError, match="CUPTI_ACTIVITY_KIND_KERNEL"):
        load_report(exported)


@pytest.mark.needs_nsys
def test_nvtx_ranges_keep_the_times_the_app_saw(exported, seen):
    """Every exported range (ten iterations, their forward and backward, the checkpoint) starts and ends
    where the app saw its push and pop: between its clock readings just before and just after each
    NVTX call, measured from the first iteration's push; so its duration is what the app ran."""
    nvtx, _ = _nvtx(exported)
    iters = nvtx[nvtx["text"].str.fullmatch(r"Iteration \d+")].copy()
    iters["n"] = iters["text"].str.split().str[1].astype(int)
    iters = iters.sort_values("n").reset_index(drop=True)
    assert iters["n"].tolist() == list(range(ITERATIONS))
    assert iters["start"].is_monotonic_increasing
    # One process, main thread only (tid == pid).
    assert iters["pid"].nunique() == 1 and (iters["tid"] == iters["pid"]).all()

    ranges = nvtx.sort_values(["start", "end"], ascending=[True, False]).reset_index(drop=True)
    assert ranges["text"].tolist() == seen["text"].tolist()  # push order: nothing lost, added or renamed
    assert len(seen) == 3 * ITERATIONS + 1
    zero, first = int(ranges["start"].iloc[0]), seen.iloc[0]
    for got, own in zip(ranges.itertuples(), seen.itertuples()):
        start, end = int(got.start) - zero, int(got.end) - zero
        assert _within(start, own.before_push - first.after_push, own.after_push - first.before_push), own
        assert _within(end, own.before_pop - first.after_push, own.after_pop - first.before_push), own
        assert _within(end - start, own.before_pop - own.after_push, own.after_pop - own.before_push), own


@pytest.mark.needs_nsys
def test_forward_backward_nest_inside_each_iteration(exported):
    nvtx, _ = _nvtx(exported)
    counts = nvtx["text"].value_counts()
    assert counts.get("forward") == ITERATIONS and counts.get("backward") == ITERATIONS
    assert counts.get("checkpoint") == 1
    iters = nvtx[nvtx["text"].str.startswith("Iteration ")]
    for it in iters.itertuples():
        inner = nvtx[(nvtx["start"] >= it.start) & (nvtx["end"] <= it.end) & (nvtx["text"] != it.text)]
        names = inner.sort_values("start")["text"].tolist()
        expected = ["forward", "backward"] + (["checkpoint"] if it.text == f"Iteration {CHECKPOINT}" else [])
        assert names == expected, f"{it.text}: nested {names}"
        fwd, bwd = (inner[inner["text"] == n].iloc[0] for n in ("forward", "backward"))
        assert fwd["end"] <= bwd["start"]


@pytest.mark.needs_nsys
def test_second_export_reuses_the_cache(recording, nsys, tmp_path):
    """Same content -> same cached file, nsys not run again (an invocation counter
    wraps the real nsys); nothing is written beside the report."""
    calls = tmp_path / "calls.log"
    wrapper = _write_exe(tmp_path / "nsys-counting",
                         f'#!/bin/sh\necho "$*" >> "{calls}"\nexec "{nsys}" "$@"\n')
    cache = tmp_path / "cache"
    beside_before = sorted(os.listdir(recording.parent))

    first = export_report(recording, nsys_path=wrapper, cache_dir=cache)
    assert len(calls.read_text().splitlines()) == 1
    mtime = os.stat(first).st_mtime_ns
    second = export_report(str(recording), nsys_path=wrapper, cache_dir=cache)
    assert second == first
    assert len(calls.read_text().splitlines()) == 1, "nsys ran again for an unchanged report"
    assert os.stat(second).st_mtime_ns == mtime

    # The key is the content, not the name: a renamed copy reuses the export too.
    copy = tmp_path / "renamed.nsys-rep"
    shutil.copyfile(recording, copy)
    assert export_report(copy, nsys_path=wrapper, cache_dir=cache) == first
    assert len(calls.read_text().splitlines()) == 1

    # The command is an argument list writing a temporary name, then renamed.
    argv = calls.read_text().splitlines()[0].split()
    assert argv[:3] == ["export", "--type", "sqlite"] and "--force-overwrite" in argv
    assert argv[argv.index("--output") + 1] != first
    assert sorted(os.listdir(cache)) == [os.path.basename(first), os.path.basename(sidecar_of(first))], \
        "temporary files left in the cache"
    assert sorted(os.listdir(recording.parent)) == beside_before, "something was written beside the report"


def test_sqlite_input_passes_through_without_nsys(tmp_path, monkeypatch):
    db = tmp_path / "run.sqlite"
    db.write_bytes(b"")
    monkeypatch.setenv(export.NSYS_ENV, str(tmp_path / "no-such-nsys"))
    assert export_report(db, cache_dir=tmp_path / "cache") == str(db)
    assert not (tmp_path / "cache").exists()


@pytest.mark.needs_nsys
def test_corrupt_report_names_the_file_and_nsys_cause(nsys, tmp_path):
    bad = tmp_path / "corrupt.nsys-rep"
    bad.write_bytes(os.urandom(64 * 1024))
    cache = tmp_path / "cache"
    with pytest.raises(ExportError) as err:
        export_report(bad, nsys_path=nsys, cache_dir=cache)
    msg = str(err.value)
    assert msg.startswith(str(bad)) and "nsys export failed" in msg
    assert "Exportation error" in msg, f"nsys's own stderr not quoted: {msg}"
    assert isinstance(err.value, ProfileError)
    assert os.listdir(cache) == [], "a failed export left a file in the cache"


def test_missing_or_empty_report(tmp_path):
    with pytest.raises(ExportError, match="file not found"):
        export_report(tmp_path / "gone.nsys-rep", cache_dir=tmp_path / "cache")
    empty = tmp_path / "empty.nsys-rep"
    empty.write_bytes(b"")
    with pytest.raises(ExportError, match="empty file"):
        export_report(empty, cache_dir=tmp_path / "cache")
    with pytest.raises(ExportError, match=r"notes\.txt: not an input gpu-idle reads \(Nsight Systems reports and "
                       r"exports, PyTorch profiler traces\)$"):
        export_report(tmp_path / "notes.txt", cache_dir=tmp_path / "cache")


def test_missing_nsys_is_an_export_error(tmp_path, monkeypatch):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"not really a report")
    monkeypatch.delenv(export.NSYS_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(export, "REPO_NSYS", tmp_path / "tools" / "nsys" / "usr" / "bin" / "nsys")
    with pytest.raises(ExportError) as err:
        export_report(rep, cache_dir=tmp_path / "cache")
    msg = str(err.value)
    assert msg.startswith(str(rep)) and "nsys" in msg and "make nsys" in msg
    with pytest.raises(ExportError, match="not an executable file"):
        export_report(rep, nsys_path=tmp_path / "nope" / "nsys", cache_dir=tmp_path / "cache")


def test_find_nsys_order(tmp_path, monkeypatch):
    """configured > $GPU_IDLE_NSYS > PATH > the repo's tools/nsys."""
    def fake(name):
        d = tmp_path / name
        d.mkdir()
        return _write_exe(d / "nsys", "#!/bin/sh\nexit 0\n")

    configured, env, on_path, repo = fake("configured"), fake("env"), fake("path"), fake("repo")
    monkeypatch.setattr(export, "REPO_NSYS", repo)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv(export.NSYS_ENV, str(env))
    assert find_nsys(configured) == str(configured)
    assert find_nsys() == str(env)
    monkeypatch.delenv(export.NSYS_ENV)
    assert find_nsys() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    assert find_nsys() == str(repo)


def test_hung_nsys_times_out(tmp_path):
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"x" * 100)
    slow = _write_exe(tmp_path / "nsys-hangs", "#!/bin/sh\nsleep 60\n")
    with pytest.raises(ExportError, match="timed out after 1 s") as err:
        export_report(rep, nsys_path=slow, cache_dir=tmp_path / "cache", timeout_s=1)
    assert str(err.value).startswith(str(rep))
    assert os.listdir(tmp_path / "cache") == []


def test_default_cache_dir_is_not_beside_reports(tmp_path, monkeypatch):
    monkeypatch.delenv(export.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert export.default_cache_dir() == tmp_path / "xdg" / "gpu-idle" / "exports"
    monkeypatch.setenv(export.CACHE_ENV, str(tmp_path / "mine"))
    assert export.default_cache_dir() == tmp_path / "mine"


@pytest.mark.needs_nsys
def test_sweep_exports_reports_and_records_failures(recording, nsys, profiles, tmp_path):
    """gpu-idle run on .nsys-rep inputs: each failure is that report's error row; the sweep goes on."""
    from conftest import run_cli

    corrupt = tmp_path / "broken run.nsys-rep"
    corrupt.write_bytes(os.urandom(4096))
    cfg = tmp_path / "export.yaml"
    cfg.write_text(f"export: {{nsys: '{nsys}', cache_dir: '{tmp_path / 'cache'}'}}\n")
    out = tmp_path / "out"
    proc = run_cli("run", str(recording), str(corrupt), str(profiles / "tiny_2kernels.sqlite"), "--out", str(out),
                   "--config", str(cfg), check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fleet = pd.read_csv(out / "fleet.csv", keep_default_na=False).set_index("report")
    assert fleet.loc[str(profiles / "tiny_2kernels.sqlite"), "status"] == "ok"
    cpu_only = fleet.loc[str(recording)]
    assert cpu_only["status"] == "error"
    assert cpu_only["error"].startswith(f"{recording}: (exported to ")
    assert "no CUPTI_ACTIVITY_KIND_KERNEL table" in cpu_only["error"]
    broken = fleet.loc[str(corrupt)]
    assert broken["status"] == "error" and broken["error"].startswith(str(corrupt))
    assert "2 report(s) failed" in proc.stdout


# ---------------------------------------------------------------- report versions, .qdrep (issue 12, kind 9)

def _cli_version(nsys: Path) -> str:
    """The version ``nsys --version`` prints (``NVIDIA Nsight Systems version 2022.4.2.1-df9881f``)."""
    out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, check=True).stdout
    return out.strip().rsplit(" ", 1)[-1]


@pytest.mark.needs_nsys
def test_report_version_is_read_from_the_real_recording(recording, nsys):
    # the report was written by the very nsys that recorded it
    assert export.report_version(recording) == _cli_version(nsys)
    assert export.nsys_version(str(nsys)) == _cli_version(nsys)


@pytest.mark.needs_nsys
def test_report_newer_than_the_nsys_names_both_versions_and_the_setting(recording, nsys, tmp_path):
    # A report whose trailer says a later Nsight Systems wrote it, which this nsys cannot read:
    # the real recording's header and trailer (its own version string patched to 2025.1, same
    # length) around sections the old nsys cannot parse.
    data = recording.read_bytes()
    old = _cli_version(nsys)
    release = ".".join(old.split(".")[:2])
    new = old.replace(release, "2025.1", 1)
    assert len(new) == len(old) and data.count(old.encode()) >= 1
    newer = tmp_path / "from-2025.nsys-rep"
    newer.write_bytes(data[:32] + os.urandom(4096) + data[-2048:].replace(old.encode(), new.encode()))
    assert export.report_version(newer) == new
    with pytest.raises(ExportError) as err:
        export_report(newer, nsys_path=nsys, cache_dir=tmp_path / "cache")
    msg = str(err.value)
    assert msg.startswith(f"{newer}: written by Nsight Systems {new}, newer than the nsys that exports it "
                          f"({nsys}, version {old}), which cannot read it: point export.nsys in the config "
                          f"(or $GPU_IDLE_NSYS) at the nsys of Nsight Systems 2025.1 or newer (nsys export failed, exit ")
    assert "Exportation error" in msg and "corrupt" not in msg


@pytest.mark.needs_nsys
def test_report_of_the_same_version_that_fails_is_still_called_corrupt(recording, nsys, tmp_path):
    data = recording.read_bytes()
    broken = tmp_path / "broken.nsys-rep"
    broken.write_bytes(data[:32] + os.urandom(4096) + data[-2048:])   # version readable, same as the CLI's
    assert export.report_version(broken) == _cli_version(nsys)
    with pytest.raises(ExportError, match=r"nsys export failed \(exit \d+; corrupt or truncated report\?\)"):
        export_report(broken, nsys_path=nsys, cache_dir=tmp_path / "cache")


@pytest.mark.needs_nsys
def test_qdrep_reports_are_found_named_and_exported(recording, nsys, tmp_path):
    from pipeline.config import Config
    from pipeline.inputs.discover import discover

    folder = tmp_path / "2020"
    folder.mkdir()
    old = folder / "old-run.qdrep"          # the report suffix before Nsight Systems 2021.4
    old.write_bytes(recording.read_bytes())
    found, problems = discover([str(tmp_path)])
    assert (found, problems) == ([str(old)], [])
    assert Config().labels_for(str(old))["job"] == "old-run"
    report = load_report(export_report(old, nsys_path=nsys, cache_dir=tmp_path / "cache"), require_kernels=False)
    assert len(report.nvtx) > 0


def test_a_run_over_a_report_reads_and_hashes_it_once(tmp_path, monkeypatch, profiles):
    """A cold ``gpu-idle run`` over an ``.nsys-rep`` hashes its bytes once (:func:`pipeline.hashing.content_key`):
    for its identity (the result key), then the export cache's key reuses it; the exported SQLite is read for its
    seal and its load's key only. Counted on every file hash of the process (``pipeline.hashing.hash_into``); nsys is a
    stand-in that writes the shared tiny export."""
    import hashlib

    from conftest import run_cli

    from pipeline import hashing

    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"an Nsight Systems report's bytes" * 1000)
    fake = _write_exe(tmp_path / "nsys-copies",
                      f'#!/bin/sh\nwhile [ "$1" != "--output" ]; do shift; done\ncp "{profiles / "tiny_2kernels.sqlite"}" "$2"\n')
    monkeypatch.setattr(hashing, "SETTLE_NS", -10**18)   # as if written long ago: each key kept for the process
    monkeypatch.setattr(hashing, "_KEYS", {})
    read = []
    real = hashing.hash_into
    monkeypatch.setattr(hashing, "hash_into", lambda digest, path: read.append(os.fspath(path)) or real(digest, path))
    run_cli("run", str(rep), "--out", str(tmp_path / "out"),
            env={"GPU_IDLE_CACHE": str(tmp_path / "cache"), "GPU_IDLE_EXPORT_CACHE": str(tmp_path / "exports"),
                 "GPU_IDLE_NSYS": str(fake)})
    assert read.count(str(rep)) == 1
    key = hashlib.sha256(rep.read_bytes()).hexdigest()
    assert (tmp_path / "exports" / f"{key}.sqlite").is_file()   # the export cache is keyed by that one hash
