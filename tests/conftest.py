"""Shared fixtures: where the real exports are, and one CLI run over them."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
from distributed import Client

from suite_costs import add_costs_option, costs_summary, pytest_runtest_protocol  # noqa: F401 (a hook)

REPO = Path(__file__).resolve().parents[1]
# Keep the tests' caches out of the user's ~/.cache (inherited by every CLI run below).
_CACHE_ROOT = tempfile.mkdtemp(prefix="gpu-idle-tests-")
atexit.register(shutil.rmtree, _CACHE_ROOT, ignore_errors=True)
os.environ.setdefault("GPU_IDLE_CACHE", os.path.join(_CACHE_ROOT, "columns"))
os.environ.setdefault("GPU_IDLE_EXPORT_CACHE", os.path.join(_CACHE_ROOT, "exports"))
PROFILES = Path(os.environ.get("GPU_IDLE_PROFILES", REPO.parent / "shared" / "profiles")).resolve()
#: The real PyTorch profiler traces, beside the real exports unless GPU_IDLE_KINETO names them.
KINETO = Path(os.environ.get("GPU_IDLE_KINETO", PROFILES.parent / "kineto")).resolve()

#: What a test can need from the system, by its marker (registered in pyproject.toml): the fixtures and the
#: helper functions that need it, and what provides it. `make check` (``--quick``) skips the marked tests,
#: saying why; `make test` installs them all first. tests/test_markers.py checks that every test reaching
#: one of these fixtures or helpers (from its body, its fixtures, or module functions they call) is marked.
SYSTEM_NEEDS = {
    "needs_nsys": ({"nsys"}, {"_need_nsys"}, "the Nsight Systems CLI in tools/nsys (`make nsys`)"),
    "needs_chromium": (set(), {"chromium_load"}, "Debian's chromium (`make chromium`, as root)"),
    "needs_slurm": ({"slurm"}, set(), "Debian's slurm-wlm and munge (`make slurm`, as root)"),
    "needs_promtool": (set(), {"promtool_check"}, "Debian's prometheus for promtool (`make promtool`, as root)"),
}


def pytest_addoption(parser):
    parser.addoption("--quick", action="store_true",
                     help="skip the tests that need system packages (markers " + ", ".join(SYSTEM_NEEDS) + ")")
    parser.addoption("--list-system-needs", action="store_true",
                     help="print, for every collected test, its needs_* markers and the needs found from its code")
    add_costs_option(parser)


def _names(code, seen: set) -> set:
    """The global names ``code`` (a code object, nested ones included) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names") and id(const) not in seen:
            seen.add(id(const))
            names |= _names(const, seen)
    return names


def found_needs(item) -> set[str]:
    """The :data:`SYSTEM_NEEDS` markers that ``item`` reaches: through the fixtures it uses (transitively),
    or through the helpers its function or its fixtures' functions call, following the module-level
    functions they call in turn."""
    fixtures = set(getattr(item, "fixturenames", ()))
    funcs = [getattr(item, "function", None)]
    for name, defs in getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {}).items():
        funcs += [d.func for d in defs]
    reached, seen, todo = set(), set(), [f for f in funcs if hasattr(f, "__code__")]
    while todo:
        func = todo.pop()
        if id(func) in seen:
            continue
        seen.add(id(func))
        for name in _names(func.__code__, set()):
            reached.add(name)
            value = getattr(func, "__globals__", {}).get(name)
            if hasattr(value, "__code__") and getattr(value, "__module__", None) == func.__module__:
                todo.append(value)
    return {mark for mark, (fixture_names, helpers, _) in SYSTEM_NEEDS.items()
            if fixtures & fixture_names or reached & helpers}


def pytest_collection_modifyitems(config, items):
    """``--quick``: the tests marked with a :data:`SYSTEM_NEEDS` marker are skipped, the reason naming
    what they need, and the tests marked ``slow`` (a whole end-to-end run: several processes, nights or a
    cluster) are left out, counted on one line at the end. ``--list-system-needs``: print
    ``nodeid<TAB>markers<TAB>found needs`` per test."""
    if config.getoption("--quick"):
        slow = [item for item in items if item.get_closest_marker("slow")]
        if slow:
            config.hook.pytest_deselected(items=slow)
            items[:] = [item for item in items if not item.get_closest_marker("slow")]
            config.stash[SLOW_LEFT_OUT] = len(slow)
    for item in items:
        marks = sorted(m for m in SYSTEM_NEEDS if item.get_closest_marker(m))
        if config.getoption("--list-system-needs"):
            print(f"NEEDS\t{item.nodeid}\t{','.join(marks)}\t{','.join(sorted(found_needs(item)))}")
        if config.getoption("--quick") and marks:
            why = "; ".join(SYSTEM_NEEDS[m][2] for m in marks)
            item.add_marker(pytest.mark.skip(reason=f"make check: needs {why}; `make test` runs it"))


SLOW_LEFT_OUT = pytest.StashKey[int]()


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # an xdist worker: its count goes to the controller
        session.config.workeroutput["slow_left_out"] = session.config.stash.get(SLOW_LEFT_OUT, 0)


class SlowCount:
    """xdist's controller (registered only when xdist is loaded: its hook is unknown otherwise)."""

    @staticmethod
    def pytest_testnodedown(node, error):
        """Every worker collected the same tests: keep one worker's count of the slow ones left out."""
        count = getattr(node, "workeroutput", {}).get("slow_left_out", 0)
        node.config.stash[SLOW_LEFT_OUT] = max(count, node.config.stash.get(SLOW_LEFT_OUT, 0))


def pytest_configure(config):
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(SlowCount())


def pytest_terminal_summary(terminalreporter, config):
    """How many ``slow`` tests ``--quick`` left out (:data:`SLOW_LEFT_OUT`), then ``--costs``' tables."""
    left_out = config.stash.get(SLOW_LEFT_OUT, 0)
    if left_out and not hasattr(config, "workerinput"):
        terminalreporter.write_line(f"--quick: {left_out} tests marked slow (1.5 CPU-s or more each: whole end-to-end "
                                    "runs) left out; `make test` runs them")
    costs_summary(terminalreporter, config)


#: Why a GPU names no model: an Nsight export without a GPU table, a trace without deviceProperties.
EXPORT_NAMES_NO_GPU = "export names no GPU"
TRACE_NAMES_NO_GPU = "trace names no GPU (it has no deviceProperties)"


def model_warning(note: str = EXPORT_NAMES_NO_GPU, model: str = "H100") -> str:
    """The ``gpu-model-unresolved`` warning text of a GPU that names no model (``note``: why), priced at the
    default model's (``model``) rate under ``cost.unlisted: assume`` (docs/definitions.md#cost)."""
    return (f"GPU model not named: {note}; priced at an assumed rate, {model}'s (cost.default_model); "
            "a gpu_model label for this report names it")


def without_model_warning(warnings: str, note: str = EXPORT_NAMES_NO_GPU, model: str = "H100") -> str:
    """A row's ``warnings`` (its texts joined by ``"; "``) without its :func:`model_warning`, which every
    synthetic export or trace naming no GPU carries: raises AssertionError unless it holds that text exactly
    once, as a whole entry (first, last, between two others, or alone)."""
    text = model_warning(note, model)
    assert str(warnings).count(text) == 1, f"expected one {text!r} in {warnings!r}"
    if warnings == text:
        return ""
    if warnings.startswith(f"{text}; "):
        return warnings[len(text) + 2:]
    if warnings.endswith(f"; {text}"):
        return warnings[:-len(text) - 2]
    if f"; {text}; " in warnings:
        return warnings.replace(f"; {text}; ", "; ", 1)
    raise AssertionError(f"{text!r} is not a whole entry of {warnings!r}")


#: ``GPU_IDLE_TEST_PROCESSES=1``: every :func:`run_cli` starts a real ``gpu-idle`` process, as the suite did
#: before issue 43 (a check that running in the test's process changes no outcome).
ALWAYS_A_PROCESS = os.environ.get("GPU_IDLE_TEST_PROCESSES") == "1"


def run_cli(*args: str, check: bool = True, env: dict | None = None, timeout: float | None = None,
            preexec_fn=None, process: bool = False) -> subprocess.CompletedProcess:
    """Run the ``gpu-idle`` command on ``args`` (from the repository's folder, ``env`` added to the
    environment) and return its exit status, stdout and stderr as a ``CompletedProcess``; ``check``: raise
    AssertionError unless it exits 0.

    By default it runs in this process (:func:`in_process`: what the command computes, writes, prints and
    its exit status, without the 0.5-1 CPU-s of a new interpreter importing pandas, pyarrow and Dask). A real
    process (``python -m pipeline.cli``) when the behaviour needs one: ``process=True`` (signals, locks
    between processes, the process's own exit), a ``timeout`` (s: raise ``subprocess.TimeoutExpired``, the
    process killed, instead of waiting longer: a test of a hang), a ``preexec_fn`` (called in the child
    before it runs Python, e.g. to drop privileges), or ``GPU_IDLE_TEST_PROCESSES=1``."""
    if process or timeout is not None or preexec_fn is not None or ALWAYS_A_PROCESS:
        proc = subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=REPO, capture_output=True,
                              text=True, env={**os.environ, **(env or {})}, timeout=timeout or 600,
                              preexec_fn=preexec_fn)
    else:
        proc = in_process(list(args), env or {})
    if check and proc.returncode != 0:
        raise AssertionError(f"gpu-idle {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def wait_until_group_gone(pgid: int, timeout_s: float = 30.0) -> None:
    """Wait until no process of the process group ``pgid`` is left (a killed ``gpu-idle`` and the worker
    processes it forked, which hold its open files, its folder lock among them, until they are gone)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"processes of group {pgid} still running {timeout_s:g} s after the kill")
        time.sleep(0.02)


def in_process(args: list[str], env: dict) -> subprocess.CompletedProcess:
    """``gpu-idle ARGS`` in this process, as the process would run it (:func:`pipeline.cli.run_command`, then
    its exit status as :func:`pipeline.cli.end_process` gives it): from the repository's folder, ``env``
    set for the call (click's ``CliRunner.isolation``), stdout and stderr captured as text with universal
    newlines (as ``subprocess.run(text=True)`` reads them), log lines included (the handlers that wrote to
    stderr write to the captured one for the call); an exception the command lets out is printed to stderr
    as the interpreter would, exit status 1."""
    import logging
    import traceback

    from click.testing import CliRunner

    from pipeline.cli import exit_status, run_command

    here, before = os.getcwd(), sys.stderr
    with CliRunner().isolation(env=env) as (out, err, _):
        # each handler once (one handler may serve several loggers, as Dask's does): told the same stream a
        # second time, setStream says None ("unchanged"), which must never be put back as its stream
        handlers = list(dict.fromkeys(h for lg in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
                                      for h in getattr(lg, "handlers", ()) if isinstance(h, logging.StreamHandler)
                                      and getattr(h, "stream", None) in (before, sys.__stderr__)))
        streams = [h.setStream(sys.stderr) for h in handlers]
        # As in the process, whose root logger has no handler: a warning of a logger without one reaches
        # stderr through logging's last resort (not pytest's capture handlers on the root logger).
        root = logging.getLogger()
        root_handlers, root.handlers = root.handlers, []
        os.chdir(REPO)
        try:
            try:
                code = run_command(args)
            except Exception:  # noqa: BLE001 - what the interpreter does with it: a traceback, exit status 1
                traceback.print_exc()
                code = 1
            code = exit_status(code)
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os.chdir(here)
            root.handlers = root_handlers
            for handler, stream in zip(handlers, streams):
                handler.setStream(stream)
        stdout, stderr = (stream.getvalue().decode() for stream in (out, err))
    newlines = lambda text: text.replace("\r\n", "\n").replace("\r", "\n")  # noqa: E731
    return subprocess.CompletedProcess(["gpu-idle", *args], code, newlines(stdout), newlines(stderr))


@pytest.fixture(scope="session")
def profiles() -> Path:
    if not (PROFILES / "fastvideo_h100_sp2_1s.sqlite").exists():
        pytest.fail(f"real exports not found in {PROFILES} (set GPU_IDLE_PROFILES)")
    return PROFILES


@pytest.fixture(scope="session")
def span_run(profiles, tmp_path_factory) -> Path:
    """``gpu-idle run ../shared/profiles --out OUT --window span`` once per session; returns OUT."""
    out = tmp_path_factory.mktemp("span_run")
    run_cli("run", str(profiles), "--out", str(out), "--window", "span", "--config", "configs/profiles.yaml")
    return out


@pytest.fixture(scope="session")
def span_fleet(span_run) -> pd.DataFrame:
    return pd.read_csv(span_run / "fleet.csv", keep_default_na=False)


def vouch(folder) -> None:
    """Make the run folder (or sweep night) ``folder``, whose files a test changed by hand, one its manifest
    vouches for again, as the product would have written it: complete, listing the files it lists that are
    still there as they are now (a file it does not list stays unlisted; what else it says, e.g. its pricing,
    kept). Every reader refuses a folder otherwise."""
    from pipeline.store.results import read_manifest, write_folder_manifest

    doc = read_manifest(str(folder))
    extra = {k: v for k, v in doc.items() if k not in ("inputs", "complete", "files")}
    files = [rel for rel in doc["files"] if os.path.isfile(os.path.join(folder, rel))]
    write_folder_manifest(str(folder), files, None, **extra)


def small_reports(root: Path, stem: str, count: int, seed: int) -> Path:
    """``count`` small generated training exports (2 GPUs, 6 iterations, no straggler) in ``root``:
    ``<stem>0.sqlite`` ... (seeds ``seed``, ``seed + 1``, ...); returns ``root``."""
    from pipeline.synth import generate_training_report

    for i in range(count):
        generate_training_report(str(root / f"{stem}{i}.sqlite"), gpus=2, iterations=6, seed=seed + i,
                                 straggler_rank=None)
    return root


def scheduler_address(sched_file: Path, timeout_s: float = 60.0) -> str:
    """The address a ``dask scheduler --scheduler-file FILE`` wrote, once the file holds it (it
    appears empty before its text is written). Raises TimeoutError after ``timeout_s``."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            return json.loads(sched_file.read_text())["address"]
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.1)
    raise TimeoutError(f"{sched_file}: no scheduler address after {timeout_s:g} s")


DASK_WORKERS: dict = {}


@pytest.fixture
def dask_cluster(tmp_path):
    """A real ``dask scheduler`` and two ``dask worker`` processes on 127.0.0.1; yields the address.
    ``DASK_WORKERS[address]`` holds the two worker ``Popen`` objects (for fault tests)."""
    bindir = Path(sys.executable).parent
    sched_file = tmp_path / "scheduler.json"
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    procs = [subprocess.Popen([str(bindir / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                               "--dashboard-address", ":0", "--scheduler-file", str(sched_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                              start_new_session=True)]
    try:
        address = scheduler_address(sched_file)
        for i in range(2):
            procs.append(subprocess.Popen(
                [str(bindir / "dask"), "worker", address, "--nworkers", "1", "--nthreads", "1",
                 "--name", f"w{i}", "--no-dashboard", "--local-directory", str(tmp_path / f"w{i}")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True))
        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        DASK_WORKERS[address] = procs[1:]
        yield address
    finally:
        for p in procs[::-1]:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def promtool_check(path: Path, kind: str = "metrics") -> str:
    """``promtool check metrics`` (Debian's prometheus package) on the metrics file ``path``, or ``promtool check
    rules`` on the rules file ``path`` (``kind="rules"``: every expression parsed as PromQL): fails the test when
    promtool is missing or finds a problem; returns its output (a lint problem fails too)."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: `make promtool` installs Debian's prometheus package")
    with open(path, "rb") as fh:
        args = [promtool, "check", "metrics"] if kind == "metrics" else [promtool, "check", "rules", str(path)]
        proc = subprocess.run(args, stdin=fh, capture_output=True, timeout=120, check=False)
    out = (proc.stdout + proc.stderr).decode("utf-8", "replace")
    assert proc.returncode == 0 and (kind != "metrics" or not out.strip()), out
    return out


def chromium_load(page: Path, shot: Path, size: str) -> str:
    """Load the file ``page`` in real headless Chromium twice, in a window of ``size`` (``"WIDTH,HEIGHT"``): a
    screenshot into ``shot`` and a dump of the DOM after load, which it returns. Fails the test when
    Chromium is missing, exits non-zero or logs a console message."""
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.fail("chromium not found: `make chromium` installs Debian's package")
    with tempfile.TemporaryDirectory(prefix="gpu-idle-chromium-") as profile:
        base = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0"]
        url = page.resolve().as_uri()
        shot_run = subprocess.run([*base, f"--screenshot={shot}", f"--window-size={size}", url],
                                  capture_output=True, text=True, timeout=180, check=False)
        dom_run = subprocess.run([*base, f"--window-size={size}", "--dump-dom", url], capture_output=True, text=True,
                                 timeout=180, check=False)
    for proc in (shot_run, dom_run):
        assert proc.returncode == 0, proc.stderr[-3000:]
        console = [line for line in proc.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
        assert not console, "\n".join(console)
    return dom_run.stdout
