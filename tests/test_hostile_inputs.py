"""Hostile inputs (issue 23, points 4-6): each is its report's error row with a message naming the
file and the cause, in every engine, or (a text too long to be real) read within a stated limit;
never a traceback, a killed process or a hang.

* Malformed traces (point 4): a ``ts``/``dur`` of 1e308, a device id of 2**70, JSON nested 100,000
  deep and their kin, analysed in this process (one report: no scheduler), on a real LocalCluster
  (``--workers 1``: per report, and per GPU) and in a sweep night where the bad file is the only new one.
* Memory bombs (point 5): a 10 MB kernel name among 400 (numpy once asked for 15 GiB of fixed-width
  strings), a StringIds view expanding itself, a gzip trace whose honest trailer wraps at 4 GiB. The
  runs that meet them have their address space capped (:data:`MEMORY_CAP`), so a regression dies
  quickly instead of taking the machine's memory.
* Hangs (point 6): an infinitely recursive view as the kernel table; reading a report has a
  configurable time bound (``export.read_timeout_s``), shown here with real never-ending queries.

Every CLI run has a timeout (:data:`HANG_S`): a regression that hangs fails instead.
"""
from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys
import zlib

import pandas as pd
import pytest
from conftest import REPO, run_cli

from pipeline.synth import ExportWriter, generate_training_report

MS = 1_000_000
#: A CLI run that hangs fails after this many seconds.
HANG_S = 180
#: The address space of a CLI run meeting a memory bomb: plenty for these small reports, and a
#: regression asking for GiBs gets a MemoryError at once.
MEMORY_CAP = 3 * 2**30
#: What the loader keeps of a text from a profile (pipeline.load.limits.MAX_TEXT_CHARS), stated here
#: independently: a test of the limit must not read it from the code under test.
TEXT_CAP = 4096
LONG = 10_000_000  # characters of the long texts
#: Worker memory and memory factor of the runs that meet the gzip bombs (dask.memory_limit, memory_factor).
LIMIT, FACTOR = 2**30, 3.0
#: ISIZE is the size mod 2**32 (RFC 1952).
WRAP = 2**32


def capped() -> None:
    """``preexec_fn``: cap the address space of the process at :data:`MEMORY_CAP`."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def cut(text: str) -> str:
    """What the loader keeps of ``text`` (docs/inputs.md#limits-on-hostile-input: first 4096 characters, an ellipsis,
    the full length)."""
    return text if len(text) <= TEXT_CAP else text[:TEXT_CAP] + f"\u2026 ({len(text)} characters, cut at {TEXT_CAP})"


# -- hostile PyTorch profiler traces -----------------------------------------------------------

def kernel(ts: str = "1.0", dur: str = "2.0", device: str = "0", stream: str = "7", args: str = "") -> str:
    return (f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {ts}, "dur": {dur}, '
            f'"args": {{"device": {device}, "stream": {stream}{args}}}}}')


def trace(*events: str, top: str = "") -> str:
    return '{"traceEvents": [' + ", ".join(events) + "]" + top + "}"


DEEP = "[" * 100_000 + "]" * 100_000
BEYOND = "does not fit in 64-bit nanoseconds (beyond ±292 years): not a time a profiler writes"
NESTED = ("JSON nested deeper than it can be read (about 1,000 levels; a PyTorch profiler trace nests a few): "
          "not a trace as the profiler writes it")
#: name -> (trace text, its error after the path). Variants of each kind: other fields, other sizes.
TRACES = {
    "dur_1e308.json": (trace(kernel(), kernel(ts="3.0", dur="1e308")), f"kernel events: dur 1e308 µs {BEYOND}"),
    "ts_1e308.json": (trace(kernel(), kernel(ts="1e308")), f"kernel events: ts 1e308 µs {BEYOND}"),
    "ts_digits.json": (trace(kernel(), kernel(ts="9" * 25)), f"kernel events: ts {'9' * 25} µs {BEYOND}"),
    "dur_huge_exponent.json": (trace(kernel(), kernel(dur="-1e999999999")),
                               f"kernel events: dur -1e999999999 µs {BEYOND}"),
    "ts_plus_dur.json": (trace(kernel(), kernel(ts="9000000000000000.0", dur="9000000000000000.0")),
                         f"kernel events: ts + dur of an event {BEYOND}"),
    "base_beyond.json": (trace(kernel(), top=', "baseTimeNanoseconds": -1' + "0" * 30),
                         f"baseTimeNanoseconds -1{'0' * 30} {BEYOND}"),
    "device_2_70.json": (trace(kernel(), kernel(device=str(2**70))),
                         f"kernel events: device id (args.device, else pid) {2**70} does not fit in 64 bits: not "
                         "an id a profiler writes"),
    "stream_text_2_64.json": (trace(kernel(), kernel(stream=f'"{2**64}"')),
                              f"kernel events: stream (args.stream, else tid) {2**64} does not fit in 64 bits: not "
                              "an id a profiler writes"),
    "nested_100k.json": (trace(kernel(), DEEP), NESTED),
    "nested_in_args.json": (trace(kernel(), kernel(args=f', "shapes": {DEEP}')), NESTED),
    "nested_properties.json": (trace(kernel(), top=f', "deviceProperties": {DEEP}'), NESTED),
}


# -- hostile exports ---------------------------------------------------------------------------

def steady(w: ExportWriter, n: int = 5, pid: int = 10) -> None:
    """``n`` 6 ms kernels every 10 ms on stream 7, a CUDA call and an NVTX range."""
    for i in range(n):
        w.kernel(pid=pid, device=0, stream=7, start=i * 10 * MS, end=i * 10 * MS + 6 * MS, name="gemm")
    w.runtime(pid=pid, tid=pid + 1, start=0, end=MS, name="cudaLaunchKernel_v7000")
    w.nvtx(pid=pid, tid=pid + 1, start=0, end=9 * MS, text="setup")


VIEW = ("{table} is a view, not a table as Nsight Systems writes it (a view can expand itself or recurse without "
        "end, so gpu-idle never reads one); export the report again with nsys export")
RECURSE = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) "
#: name -> (table, the view made in its place, the view's name when not the table's): each export is an
#: ordinary one (:func:`steady`) whose table was renamed ``<table>_real`` and replaced by the view.
VIEWS = {
    # StringIds a view doubling its texts without end (300 KB of file)
    "stringids_view.sqlite": ("StringIds", "WITH RECURSIVE r(id, value) AS (SELECT id, value FROM {real} UNION ALL "
                                           "SELECT id + 1000, value || value FROM r) SELECT id, value FROM r", None),
    # the kernel table an infinitely recursive view that never gives a row (a hang at 100 % CPU, flat memory)
    "kernel_recursive_view.sqlite": ("CUPTI_ACTIVITY_KIND_KERNEL", RECURSE + "SELECT k.* FROM r, {real} k WHERE r.n < 0",
                                     None),
    # other tables: a view named in other letter case (SQLite reads it under the table's name), NVTX without end
    "runtime_view_lower_case.sqlite": ("CUPTI_ACTIVITY_KIND_RUNTIME", "SELECT * FROM {real}",
                                       "cupti_activity_kind_runtime"),
    "nvtx_view.sqlite": ("NVTX_EVENTS", RECURSE + "SELECT e.* FROM r, {real} e", None),
}


def make_exports(folder) -> dict:
    """Hostile exports in ``folder``: name -> its error after the path (None: it loads)."""
    out = {}
    # 400 kernel names, one of 10 MB, which precedes the longest gap (8 ms, under a 10 MB NVTX text); a second
    # 10 MB NVTX text through StringIds
    w = ExportWriter(str(folder / "long_name.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=6 * MS, name="x" * LONG)
    for i in range(1, 400):
        start = 14 * MS + (i - 1) * 10 * MS
        w.kernel(pid=10, device=0, stream=7, start=start, end=start + 6 * MS, name=f"k{i}")
    w.nvtx(pid=10, tid=11, start=5 * MS, end=15 * MS, text="n" * LONG)
    w.nvtx(pid=10, tid=11, start=100 * MS, end=200 * MS, text="r" * LONG, registered=True)
    w.runtime(pid=10, tid=11, start=0, end=MS, name="cudaLaunchKernel_v7000")
    w.close()
    out["long_name.sqlite"] = None
    for name, (table, view_sql, view_name) in VIEWS.items():
        w = ExportWriter(str(folder / name))
        steady(w)
        w.close()
        con = sqlite3.connect(folder / name)
        con.execute(f"ALTER TABLE {table} RENAME TO {table}_real")
        con.execute(f"CREATE VIEW {view_name or table} AS {view_sql.format(real=table + '_real')}")
        con.commit()
        con.close()
        out[name] = VIEW.format(table=table)
    return out


# -- gzip traces whose honest trailer wraps at 4 GiB --------------------------------------------

def wrapped_gzip(path, head: bytes, spaces: int, tail: bytes) -> int:
    """Write ``path``: one gzip member of ``head + b" " * spaces + tail`` with its true CRC-32 and ISIZE
    (the size mod 2**32), without compressing GiBs: after a full flush, deflate's output for 64 MiB of
    spaces is the same bytes every time (checked), so they are written again instead. Returns the size
    the member inflates to."""
    block = b" " * (64 << 20)
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    crc = zlib.crc32(head)
    with open(path, "wb") as fh:
        fh.write(c.compress(head) + c.flush(zlib.Z_FULL_FLUSH))
        first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
        again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
        assert again == first  # deflate's output of a block after a full flush does not depend on what came before
        blocks, rest = divmod(spaces, len(block))
        for _ in range(blocks):
            fh.write(first)
            crc = zlib.crc32(block, crc)
        last = c.compress(b" " * rest + tail) + c.flush(zlib.Z_FINISH)
        crc = zlib.crc32(b" " * rest + tail, crc)
        size = len(head) + spaces + len(tail)
        fh.write(last[:-8] + crc.to_bytes(4, "little") + (size % WRAP).to_bytes(4, "little"))
    return size


def events_text(n: int) -> bytes:
    """``n`` kernel events with varied times (compressing about 7x, like a real trace's events)."""
    import random

    rng = random.Random(23)
    return ", ".join(kernel(ts=f"{rng.randrange(10**9)}.{rng.randrange(1000):03d}", dur=str(rng.randrange(1, 999)),
                            stream=str(rng.randrange(7, 9))) for _ in range(n)).encode()


@pytest.fixture(scope="module")
def gzip_bombs(tmp_path_factory) -> dict:
    """Two 4-6 MB gzip traces inflating to 4 GiB + 50 MiB and more: ``uniform.json.gz`` (spaces from the
    start: the head shows the ratio of the whole) and ``late.json.gz`` (5 MB of ordinary events first, far
    more than the head the estimate looks at, then the spaces). Returns name -> (path, inflated size)."""
    folder = tmp_path_factory.mktemp("gzip-bombs")
    spaces = WRAP + 50 * 2**20
    out = {}
    for name, head in (("uniform.json.gz", b'{"traceEvents": [' + kernel().encode() + b"]"),
                       ("late.json.gz", b'{"traceEvents": [' + events_text(40_000) + b"]")):
        path = folder / name
        out[name] = (str(path), wrapped_gzip(path, head, spaces, b"}"))
    return out


# -- fixtures and helpers ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> dict:
    """Every hostile trace and export in one folder: name -> (path, its error after the path, None: loads)."""
    folder = tmp_path_factory.mktemp("hostile")
    out = {}
    for name, (text, error) in TRACES.items():
        (folder / name).write_text(text, encoding="utf-8")
        out[name] = (str(folder / name), error)
    for name, error in make_exports(folder).items():
        out[name] = (str(folder / name), error)
    return out


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> str:
    """One ordinary generated export (2 GPUs)."""
    path = tmp_path_factory.mktemp("good") / "good.sqlite"
    generate_training_report(str(path), gpus=2, iterations=6, seed=23, straggler_rank=None)
    return str(path)


def config(folder, text: str) -> str:
    path = folder / "hostile.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def fleet_of(out) -> pd.DataFrame:
    return pd.read_csv(out / "fleet.csv", keep_default_na=False)


def errors_of(fleet: pd.DataFrame) -> dict:
    """report -> its error (the reports that failed)."""
    failed = fleet[fleet["status"] == "error"]
    return dict(zip(failed["report"], failed["error"]))


def check_clean(proc) -> None:
    """A run that met bad input: exit 1 (a report failed), no traceback, no worker's failure log."""
    assert proc.returncode == 1, proc.stdout + proc.stderr
    for text in ("Traceback", "Compute Failed", "MemoryError"):
        assert text not in proc.stderr, proc.stderr[-3000:]


def check_outputs(out) -> None:
    """The run's folder holds its tables and records."""
    for name in ("fleet.csv", "fleet.parquet", "jobs.csv", "clusters.csv", "fix_first.csv"):
        assert (out / name).exists(), name
    assert any((out / "records").iterdir())


# -- point 4: malformed traces (and every other hostile input) in every engine ------------------

@pytest.mark.parametrize("name", [*TRACES, "stringids_view.sqlite", "kernel_recursive_view.sqlite",
                                  "runtime_view_lower_case.sqlite", "nvtx_view.sqlite"])
def test_one_hostile_report_in_process_is_its_row(hostile, tmp_path, name):
    """One report, no scheduler: analysed in this process. Before: a traceback (InvalidOperation,
    OverflowError, RecursionError, a numpy MemoryError), an empty output folder; the recursive view hung."""
    path, error = hostile[name]
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", str(out), check=False, timeout=HANG_S, preexec_fn=capped)
    assert "engine: in this process" in proc.stdout + proc.stderr
    check_clean(proc)
    check_outputs(out)
    fleet = fleet_of(out)
    assert fleet["report"].tolist() == [path] and errors_of(fleet) == {path: f"{path}: {error}"}
    assert f"ERROR {path}: {error}" in proc.stdout


@pytest.mark.slow
def test_hostile_reports_on_a_local_cluster_are_rows_with_the_same_messages(hostile, good, tmp_path):
    """Every hostile report beside a good one on a real LocalCluster of one worker, per report
    (16 reports on one thread), and two reports per GPU (two threads): the messages are those of a run
    in this process. Before: rows saying ``InvalidOperation: [<class 'decimal.InvalidOperation'>]``."""
    bad = {path: f"{path}: {error}" for path, error in hostile.values() if error is not None}
    out = tmp_path / "out"
    small = config(tmp_path, f"dask: {{memory_limit: {LIMIT}}}\n")  # a regression's worker is killed at 1 GiB
    proc = run_cli("run", *bad, good, "--out", str(out), "--workers", "1", "--config", small, check=False,
                   timeout=HANG_S)
    assert "engine: in this process" not in proc.stdout + proc.stderr
    check_clean(proc)
    check_outputs(out)
    fleet = fleet_of(out)
    assert errors_of(fleet) == bad
    assert set(fleet.loc[fleet["report"] == good, "status"]) == {"ok"} and (fleet["report"] == good).sum() == 2
    dur = hostile["dur_1e308.json"][0]
    fan = tmp_path / "fan"
    proc = run_cli("run", dur, good, "--out", str(fan), "--workers", "1",
                   "--config", config(tmp_path, f"dask: {{threads_per_worker: 2, memory_limit: {LIMIT}}}\n"),
                   check=False, timeout=HANG_S)
    check_clean(proc)
    fleet = fleet_of(fan)
    assert errors_of(fleet) == {dur: bad[dur]} and set(fleet.loc[fleet["report"] == good, "status"]) == {"ok"}


@pytest.mark.slow
def test_a_sweep_night_whose_only_new_report_is_malformed(hostile, good, tmp_path):
    """Night 1 analyses two good reports; night 2 finds one more, malformed: the only report to analyse,
    so in this process. It is the night's error row, the night's outputs and history row are written,
    exit 1. Before: a traceback, no outputs and no history row for the night."""
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    os.symlink(good, inputs / "good.sqlite")
    generate_training_report(str(inputs / "other.sqlite"), gpus=2, iterations=6, seed=24, straggler_rank=None)
    state = tmp_path / "state"
    cfg = config(tmp_path, f"sweep: {{inputs: ['{inputs}'], state_dir: '{state}'}}\n")
    first = run_cli("sweep", "--config", cfg, "--night", "2026-12-01", check=False, timeout=HANG_S)
    assert first.returncode == 0, first.stdout + first.stderr
    name = "dur_1e308.json"
    (inputs / name).write_bytes(open(hostile[name][0], "rb").read())
    night = "2026-12-02"
    proc = run_cli("sweep", "--config", cfg, "--night", night, check=False, timeout=HANG_S, preexec_fn=capped)
    assert "engine: in this process" in proc.stdout + proc.stderr
    check_clean(proc)
    folder = state / "nights" / night
    check_outputs(folder)
    history = pd.read_parquet(state / "history" / f"run_date={night}" / "fleet.parquet")
    expected = {str(inputs / name): f"{inputs / name}: {hostile[name][1]}"}
    assert errors_of(history) == expected
    assert errors_of(fleet_of(folder)) == expected
    assert set(history.loc[history["status"] != "error", "report"]) == {str(inputs / "good.sqlite"),
                                                                         str(inputs / "other.sqlite")}


def test_unexpected_exceptions_are_rows_in_plain_words(good, tmp_path, monkeypatch):
    """An exception nobody foresaw, raised while a report is loaded (here by a stand-in for the loader)
    or while its GPUs are analysed, is that report's (or GPU's) row naming the file, the exception's
    type and its message in plain words, in this process: never the end of the run. MemoryError and
    RecursionError say what they mean."""
    import decimal

    from pipeline.config import Config
    from pipeline.work import tasks
    from pipeline.engine.map import InProcess
    from pipeline.runs.driver import Todo, analysed

    raised = {"a.sqlite": decimal.InvalidOperation([decimal.InvalidOperation]), "b.sqlite": MemoryError(),
              "c.sqlite": RecursionError("maximum recursion depth exceeded"), "d.sqlite": KeyError("stream")}

    def load_cached(path, *args, **kwargs):
        raise raised[os.path.basename(path)]

    monkeypatch.setattr(tasks, "load_cached", load_cached)
    for name in raised:
        os.symlink(good, tmp_path / name)
    todos = [Todo(str(tmp_path / n), {}) for n in raised]
    outcomes = {os.path.basename(o.path): o.failure.message for o in analysed(todos, Config(), InProcess())}
    p = {n: str(tmp_path / n) for n in raised}
    where = "(raised in pipeline/work/tasks.py:"
    assert outcomes["a.sqlite"].startswith(f"{p['a.sqlite']}: unexpected InvalidOperation while analysing it: the "
                                           f"arithmetic on a number failed (decimal.InvalidOperation) {where}")
    assert outcomes["b.sqlite"] == (f"{p['b.sqlite']}: ran out of memory while analysing it (MemoryError: Out of "
                                    "memory); it needs more memory than this process may use: give the workers "
                                    "more (dask.memory_limit) or trim the capture")
    assert outcomes["c.sqlite"] == (f"{p['c.sqlite']}: nested too deeply to analyse (RecursionError: maximum "
                                    "recursion depth exceeded): not a profile as a profiler writes it")
    assert outcomes["d.sqlite"].startswith(f"{p['d.sqlite']}: unexpected KeyError while analysing it: 'stream' {where}")
    assert outcomes["d.sqlite"].endswith("; gpu-idle could not make sense of this report (please report it, with "
                                         "the file)")


# -- point 5: memory bombs ----------------------------------------------------------------------

@pytest.mark.slow
def test_a_ten_megabyte_kernel_name_is_cut_and_never_widened(hostile, tmp_path):
    """400 kernel names, one of 10 MB (and two NVTX texts of 10 MB, inline and through StringIds), in a
    process of 3 GiB: the report is analysed; each text is its first 4096 characters, an ellipsis and
    its full length. Before: numpy asked for 14.9 GiB (400 x 10 M x 4-byte fixed-width strings)."""
    path, _ = hostile["long_name.sqlite"]
    out = tmp_path / "out"
    proc = run_cli("run", path, "--out", str(out), "--window", "span", check=False, timeout=HANG_S,
                   preexec_fn=capped)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert set(fleet_of(out)["status"]) == {"ok"}
    (doc,) = (out / "gpus").iterdir()
    roster = json.loads(doc.read_text())["roster"]
    first = roster[0]
    assert (first["start_ns"], first["length_ns"], first["kernel_after"]) == (6 * MS, 8 * MS, "k1")
    assert first["kernel_before"] == cut("x" * LONG)
    assert first["nvtx_range"] == cut("n" * LONG)
    assert max(len(line) for line in doc.read_text().splitlines()) < 100_000
    from pipeline.load.report import load_report

    report = load_report(path)
    assert set(report.nvtx["text"]) == {cut("n" * LONG), cut("r" * LONG)}
    assert len(report.kernels["name"].cat.categories) == 400


def test_inline_texts_of_older_schemas_are_cut_as_sqlite_reads_them(tmp_path):
    """Kernel names, CUDA API names and NVTX text held in the tables themselves (older schemas; any
    schema's column may hold text whatever its declared type): cut to the same rule as StringIds text."""
    from pipeline.load.report import load_report

    path = str(tmp_path / "inline.sqlite")
    w = ExportWriter(path)
    w.kernel(pid=10, device=0, stream=7, start=0, end=6 * MS, name="x" * LONG)
    w.kernel(pid=10, device=0, stream=7, start=10 * MS, end=16 * MS, name="k1")
    w.runtime(pid=10, tid=11, start=0, end=MS, name="c" * LONG)
    w.nvtx(pid=10, tid=11, start=0, end=9 * MS, text="n" * LONG)
    w.close()
    con = sqlite3.connect(path)
    for table, column in (("CUPTI_ACTIVITY_KIND_KERNEL", "shortName"), ("CUPTI_ACTIVITY_KIND_RUNTIME", "nameId")):
        con.execute(f"UPDATE {table} SET {column} = (SELECT value FROM StringIds WHERE id = {column})")
    con.commit()
    con.close()
    report = load_report(path)
    assert report.kernels["name"].tolist() == [cut("x" * LONG), "k1"]
    assert report.runtime["name"].tolist() == [cut("c" * LONG)]
    assert report.nvtx["text"].tolist() == [cut("n" * LONG)]


def test_cut_text_in_sql_and_in_python_agree():
    """The loader cuts text in SQLite (exports) and in Python (traces): the same text both ways, and
    exactly the stated rule; short texts, integers and NULL pass unchanged."""
    from pipeline.load.limits import cut_sql, cut_text

    con = sqlite3.connect(":memory:")
    for text in ("", "k", "é" * 4096, "é" * 4097, "x" * LONG):
        (got,) = con.execute(f"SELECT {cut_sql('?1')}", (text,)).fetchone()
        assert got == cut_text(text) == cut(text)
    assert con.execute(f"SELECT {cut_sql('?1')}, {cut_sql('?2')}", (12345, None)).fetchone() == (12345, None)


@pytest.mark.slow
def test_gzip_whose_trailer_wraps_is_judged_by_what_it_inflates_to(gzip_bombs, tmp_path):
    """A 4 MB gzip trace inflating to 4 GiB + 50 MiB, its trailer honest (ISIZE = 50 MiB + a few bytes,
    the size mod 2**32): its head inflates 1000:1, so the estimate is the 4 GiB + 50 MiB it holds and the
    report is refused before it is read (worker limit 1 GiB). Before: judged by ISIZE, it passed, and
    inflating it killed the process (here: a MemoryError traceback at 3 GiB)."""
    from pipeline.inputs.gzip_size import file_inflated_size

    path, size = gzip_bombs["uniform.json.gz"]
    compressed = os.path.getsize(path)
    assert compressed < 6 * 2**20 and size % WRAP == 50 * 2**20 + len('{"traceEvents": []}') + len(kernel())
    assert size == WRAP + size % WRAP
    assert file_inflated_size(path) == size
    out = tmp_path / "out"
    cfg = config(tmp_path, f"dask: {{memory_limit: {LIMIT}, memory_factor: {FACTOR}}}\n")
    proc = run_cli("run", path, "--out", str(out), "--config", cfg, check=False, timeout=HANG_S, preexec_fn=capped)
    check_clean(proc)
    assert errors_of(fleet_of(out)) == {path: (
        f"{path}: too big for one worker: about {size * FACTOR / 2**30:.2f} GiB needed ({size / 2**20:,.2f} MiB of "
        f"JSON once inflated ({size:,} bytes, per the gzip trailer of the {compressed / 2**20:,.2f} MiB "
        f"({compressed:,} bytes) file) x {FACTOR:g}), worker memory limit 1.00 GiB; raise dask.memory_limit or "
        "trim the capture")}


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["in process", "local cluster"])
def test_gzip_that_inflates_past_its_estimate_is_stopped_at_the_workers_budget(gzip_bombs, good, tmp_path, engine):
    """The same wrap after 5 MB of ordinary events: the head inflates ~7:1, so the estimate is ISIZE and
    the report passes the check; the loader stops inflating at the worker's budget (1 GiB / 3) and says
    so. In this process (3 GiB address space) and on a LocalCluster worker of 1 GiB. Before: inflating
    4 GiB killed the process (MemoryError) or the worker."""
    path, size = gzip_bombs["late.json.gz"]
    out = tmp_path / "out"
    cfg = config(tmp_path, f"dask: {{memory_limit: {LIMIT}, memory_factor: {FACTOR}}}\n")
    inputs = [path] if engine == "in process" else [path, good]
    proc = run_cli("run", *inputs, "--out", str(out), "--config", cfg, "--workers", "1", check=False,
                   timeout=HANG_S, preexec_fn=capped if engine == "in process" else None)
    check_clean(proc)
    budget = int(LIMIT / FACTOR)
    assert errors_of(fleet_of(out)) == {path: (
        f"{path}: inflates to more than {budget:,} bytes (stopped there), the most a worker may hold for it (its "
        f"memory limit / dask.memory_factor), though its gzip trailer gives {size % WRAP:,}: the trailer's 32-bit "
        "size wraps every 4 GiB, or the file holds several gzip members; too big for one worker: raise "
        "dask.memory_limit or trim the capture")}


# -- point 6: a time bound on reading ----------------------------------------------------------

@pytest.mark.slow
def test_reading_has_a_configurable_time_bound(good, hostile, tmp_path):
    """``export.read_timeout_s``: an export and a trace read past it are error rows saying so (a bound
    of 1 µs has always passed by the first read); validated like every setting."""
    trace_path = tmp_path / "t.json"
    trace_path.write_text(trace(kernel(), kernel(ts="10.0"), kernel(ts="20.0")), encoding="utf-8")
    out = tmp_path / "out"
    cfg = config(tmp_path, "export: {read_timeout_s: 0.000001}\ncache: {enabled: false}\n")
    proc = run_cli("run", good, str(trace_path), "--out", str(out), "--config", cfg, "--workers", "1", check=False,
                   timeout=HANG_S)
    check_clean(proc)
    stopped = ("reading stopped after 1e-06 s (export.read_timeout_s): the export takes longer than that to read: "
               "a table made never to end, or a very large export on a slow disk; for a real export that needs "
               "longer, raise export.read_timeout_s")
    assert errors_of(fleet_of(out)) == {good: f"{good}: {stopped}", str(trace_path): f"{trace_path}: {stopped}"}
    bad = config(tmp_path, "export: {read_timeout_s: 0}\n")
    proc = run_cli("run", good, "--out", str(out), "--config", bad, check=False, timeout=HANG_S)
    assert proc.returncode == 2 and "export.read_timeout_s: should be greater than 0, got 0" in proc.stderr


NEVER_ENDING = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r)"


def test_a_never_ending_query_is_stopped_at_the_deadline(tmp_path):
    """Real never-ending queries, in a child process with a timeout (a regression hangs no test run):
    on the loader's sqlite3 connection SQLite's progress handler interrupts one that yields no row, and a
    bulk read (ADBC, which cannot be cancelled) of one that yields rows forever stops between batches."""
    db = tmp_path / "x.sqlite"
    sqlite3.connect(db).close()
    code = f"""
import sqlite3, time
from pipeline.load.limits import Deadline, ReadTimeout
from pipeline.load.sqlite import _stream, readonly_uri
d = Deadline(0.5)
con = sqlite3.connect(":memory:")
d.install(con)
try:
    con.execute("{NEVER_ENDING} SELECT count(*) FROM r WHERE n < 0").fetchall()
except sqlite3.OperationalError as exc:
    print("sqlite3:", exc, d.expired())
rows = []
try:
    _stream(readonly_uri({str(db)!r}), "{NEVER_ENDING} SELECT n FROM r", Deadline(0.5),
            lambda seq, b: rows.append(b.num_rows), 1000)
except ReadTimeout as exc:
    print("adbc:", str(exc)[:40], len(rows) > 0)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.stdout.splitlines() == ["sqlite3: interrupted True",
                                        "adbc: reading stopped after 0.5 s (export.read True"], proc.stderr
