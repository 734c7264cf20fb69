#!/usr/bin/env python3
"""gpu-idle benchmarks (issues 4 and 16): prints every target with its status and writes bench/RESULTS.md.

Run with the project's interpreter (``make bench`` does): ``.venv/bin/python bench/run.py``;
``make bench BENCH_ARGS=--quick`` is a smoke test of every section in a few minutes (small
sizes, one round, small fleets, no nsys-ai; its figures go to bench/data/RESULTS-partial.md).
``--sizes``, ``--repeat``, ``--fleet`` and ``--fleet-small`` set the rest.

0. Start-up: ``gpu-idle --version`` and ``gpu-idle run`` on the real 2-kernel export.
1. Scale: generated 8-GPU reports of 10k, 100k, 1M, 2M, 3M and 10M kernels. Per report, all
   GPUs: ``gpu-idle run FILE --out DIR`` as a subprocess (process start to exit) and the load +
   analysis stages alone (a fresh interpreter timing ``load_report`` and the report's analysis as
   ``gpu-idle run`` does it in its process, :func:`analysed_in_process`), each divided by the decode floor: one ``sqlite3 -readonly`` process computing
   ``total()`` over every column the loader reads. Beside it, the old text floor (the same columns
   printed into /dev/null) and the project's own reader alone in a process that imports nothing
   else. Time per kernel per size; peak RSS of each.
2. nsys-ai 0.3.0 (its own venv in ``bench/.venv-nsysai``, offline thanks to the
   ``duckdb-extension-sqlite-scanner`` wheel): ``nsys-ai skill run gpu_idle_gaps FILE
   -p device=D`` once per GPU, summed, vs ours for the whole report (sizes up to 3M); the idle
   and gap totals of both compared GPU by GPU.
3. Fleet: 200 generated small reports with ``--workers 1`` vs ``--workers 2`` against this
   machine's two-process ceiling, the same run again with nothing changed, the nightly sweep;
   and 2,000 smaller reports with ``--workers 2`` against the ceiling: the per-task overhead.
4. Category accuracy: precision and recall per category of our per-stream gap
   categories against the planted truth (auto window), ``launch`` per GPU. The truth's
   ``periodic`` gaps are the pauses the generator planted as periodic, not its own copy
   of the detection rule.

Every report is made by ``pipeline.synth.generate_scaled_report`` (cached in
``bench/data``, regenerated when its parameters change). Times are the best of
``--repeat`` interleaved runs on a warm page cache, for ours and for the floors alike.
"""
from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

DATA = os.path.join(HERE, "data")
RESULTS = os.path.join(HERE, "RESULTS.md")
NSYSAI_VENV = os.path.join(HERE, ".venv-nsysai")
NSYSAI_VERSION = "0.3.0"
#: nsys-ai 0.3.0 accepts any duckdb >= 1.0; this is the newest duckdb with a matching
#: ``duckdb-extension-sqlite-scanner`` wheel on PyPI (the extension must match exactly).
DUCKDB_VERSION = "1.5.5"
#: The targets of issue 44 for the whole run and load + analysis at 2M and 3M kernels (ratio to the decode
#: floor) and for the peak RSS at 3M (bytes); bench/quick.py prints them too.
E2E_TARGET = 2.5
STAGES_TARGET = 1.5
RSS_TARGET = 600e6
#: Issue 44's other targets (it took over issue 16's): the whole run's speed-up over nsys-ai's per-GPU runs
#: summed (cold) at 3M kernels, and the small-report fleet's ratio to the two-process ceiling.
NSYSAI_TARGET = 4.0
SMALL_FLEET_TARGET = 1.10
SIZES = {"10k": 10_000, "100k": 100_000, "1M": 1_000_000, "2M": 2_000_000, "3M": 3_000_000, "10M": 10_000_000}
#: Sizes whose report is also analysed by nsys-ai (10M would take it minutes; the target is at 3M).
NSYSAI_MAX_KERNELS = 3_000_000
GPUS = 8
FLEET = {"gpus": 4, "kernels": 8_000, "iterations": 10}
#: The many-small-reports fleet (issue 16: 2,000 of them): the scheduler's per-task overhead.
FLEET_SMALL = {"gpus": 2, "kernels": 2_000, "iterations": 10}
CATEGORIES = ("sync", "data", "comm", "boundary", "periodic", "launch", "cpu")
#: The real 2-kernel export of the start-up target (../shared/profiles, or $GPU_IDLE_PROFILES).
PROFILES = os.environ.get("GPU_IDLE_PROFILES", os.path.join(os.path.dirname(ROOT), "shared", "profiles"))
TINY = os.path.join(PROFILES, "tiny_2kernels.sqlite")
#: ``--quick``: a smoke test of every section in a minute or two (figures go to bench/data only).
QUICK = {"sizes": "10k,100k", "repeat": 1, "fleet": 20, "fleet_small": 40, "skip_nsys_ai": True,
         "skip_profile": True}

#: The columns the loader reads, table by table (pipeline/load: report.py, caveats.py, gpus.py,
#: diagnostics.py); both floors read those of them the export has. Text columns are decoded by
#: ``length()`` in the decode floor.
READ_COLUMNS = {
    "StringIds": ("id", "value"),
    "CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "globalPid", "deviceId", "streamId", "correlationId",
                                   "contextId", "shortName"),
    "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "correlationId", "nameId"),
    "CUPTI_ACTIVITY_KIND_MEMCPY": ("start", "end", "globalPid", "deviceId", "streamId", "copyKind", "bytes",
                                   "srcKind", "dstKind", "contextId", "correlationId"),
    "CUPTI_ACTIVITY_KIND_MEMSET": ("start", "end", "globalPid", "deviceId", "streamId", "bytes", "contextId",
                                   "correlationId"),
    "NVTX_EVENTS": ("start", "end", "globalTid", "text", "textId"),
    "TARGET_INFO_GPU": ("id", "name", "uuid", "busLocation"),
    "TARGET_INFO_CUDA_DEVICE": ("gpuId", "cudaId", "pid", "uuid"),
    "META_DATA_EXPORT": ("name", "value"),
}
TEXT_COLUMNS = {"value", "text", "name", "uuid", "busLocation"}
WHERE = {"NVTX_EVENTS": " WHERE eventType IN (59, 60)"}


def floor_sql(path: str, decode: bool) -> str:
    """The floor's SQL for ``path``: every column of :data:`READ_COLUMNS` the file has; ``decode``:
    one ``total()`` per column (each value decoded once, one short row per table printed), else
    the columns themselves (the old text floor: every value formatted as text)."""
    import sqlite3

    con = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro&immutable=1", uri=True)
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        parts = []
        for table, wanted in READ_COLUMNS.items():
            if table not in have:
                continue
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]
            cols = [c for c in wanted if c in cols]
            if not cols:
                continue
            if decode:
                exprs = [f"total(length({c}))" if c in TEXT_COLUMNS else f"total({c})" for c in cols]
            else:
                exprs = cols
            parts.append(f"SELECT {', '.join(exprs)} FROM {table}{WHERE.get(table, '')}")
        return ";\n".join(parts) + ";"
    finally:
        con.close()


def held_and_decoded(path: str, values: dict) -> dict:
    """Table -> ``[values the loader read out of it, rows it holds, columns it has]`` for every table of
    ``path`` the loader read (``values``: :func:`pipeline.load.sqlite.decoded`; issue 44: decode only what is used)."""
    import sqlite3

    con = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro&immutable=1", uri=True)
    try:
        have = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        return {t: [v, con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0],
                    len(con.execute(f'PRAGMA table_info("{t}")').fetchall())]
                for t, v in sorted(values.items(), key=lambda tv: -tv[1]) if t in have}
    finally:
        con.close()


def decoded_lines(table: dict, what: str) -> list[str]:
    """The per-table lines of :func:`held_and_decoded`'s ``table`` (of the export ``what`` names): values
    decoded vs rows held."""
    out = [f"  {what}, per table: values the loader decoded vs rows held (x columns it has; values read off the "
           "table's b-tree or out of SQLite, the kernel table's including its name columns' ids for the aliases)"]
    for name, (values, rows, columns) in table.items():
        per_row = f"{values / rows:.2f} per row" if rows else "no row"
        out.append(f"    {name}: {values:,} values decoded, {rows:,} rows held x {columns} columns ({per_row})")
    return out


def log(*args) -> None:
    print(*args, flush=True)


# -- measuring a subprocess ------------------------------------------------------

#: A small launcher between the bench and the measured command: it forks (a few MiB, so the
#: child's RSS before ``exec`` is not the bench's own, which ``wait4`` would report as the
#: child's peak), execs the command, and prints the command's wall time and peak RSS.
LAUNCHER = (
    "import os, sys, time\n"
    "t0 = time.perf_counter()\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execvp(sys.argv[1], sys.argv[1:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "sys.stderr.write(f'\\n@@bench {time.perf_counter() - t0} {usage.ru_maxrss}\\n')\n"
    "sys.exit(os.waitstatus_to_exitcode(status))\n"
)


def run_env(extra: dict | None = None) -> dict:
    """The environment of measured commands: this one, with Python's bytecode cache allowed
    (``PYTHONDONTWRITEBYTECODE`` dropped: an installed gpu-idle has its ``.pyc`` files; without
    them every start compiles the pipeline's modules again, ~0.2 s here), plus ``extra``."""
    env = dict(os.environ, **(extra or {}))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


#: The sampling of a measured command's RSS (:func:`measure`): every 20 ms, the process tree looked up again every
#: 10th time. Looking it up scans every process of the machine (~1.8 ms of the bench's CPU here); doing so 50 times a
#: second took ~12 % of a core (2.76 s of a 23.2 s fleet run) from the two cores the measured command shares.
SAMPLE_S, TREE_EVERY = 0.02, 10


def measure(cmd: list, env: dict | None = None, cwd: str | None = None) -> dict:
    """Run ``cmd`` through :data:`LAUNCHER`: wall time from fork to exit, peak RSS of the
    command's process tree (sampled with psutil, :data:`SAMPLE_S`, :data:`TREE_EVERY`) and the largest single
    process's peak (``wait4``'s ru_maxrss of the command). ``env``: default :func:`run_env`."""
    import psutil

    env = run_env() if env is None else env

    out = tempfile.TemporaryFile()
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, *cmd], stdout=out, stderr=err, env=env, cwd=cwd)
    peak = [0]
    done = threading.Event()

    def sample():
        try:
            root = psutil.Process(proc.pid)
        except psutil.NoSuchProcess:
            return
        procs, n = [], 0
        while not done.is_set():
            if n % TREE_EVERY == 0:   # the tree again (a scan of every process of the machine, ~2 ms)
                try:
                    procs = root.children(recursive=True)  # the command and its workers, not the launcher
                except psutil.NoSuchProcess:
                    break
            n += 1
            total = 0
            for p in procs:   # each one's RSS (~0.02 ms)
                try:
                    total += p.memory_info().rss
                except psutil.NoSuchProcess:
                    pass
            peak[0] = max(peak[0], total)
            done.wait(SAMPLE_S)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    proc.wait()
    done.set()
    sampler.join()
    out.seek(0)
    err.seek(0)
    stderr = err.read().decode(errors="replace")
    stderr, _, tail = stderr.rpartition("\n@@bench ")
    wall, max_rss = tail.split()[:2]
    max_rss = int(max_rss) * 1024
    return {"wall_s": float(wall), "tree_rss": max(peak[0], max_rss), "max_rss": max_rss,
            "rc": proc.returncode, "stdout": out.read().decode(errors="replace"), "stderr": stderr}


def best(runs: list) -> dict:
    """The fastest run, with the peak RSS over all of them."""
    fastest = min(runs, key=lambda r: r["wall_s"])
    return dict(fastest, tree_rss=max(r["tree_rss"] for r in runs), max_rss=max(r["max_rss"] for r in runs),
                runs=[round(r["wall_s"], 3) for r in runs])


def check(run: dict, what: str) -> dict:
    if run["rc"] != 0:
        raise SystemExit(f"bench: {what} failed (exit {run['rc']}):\n{run['stderr'][-3000:]}\n{run['stdout'][-2000:]}")
    return run


def mib(n: float) -> str:
    return f"{n / 2 ** 20:,.0f} MiB"


# -- machine ----------------------------------------------------------------------

def machine_facts() -> dict:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), "")
    except OSError:
        pass
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    sqlite = subprocess.run(["sqlite3", "--version"], capture_output=True, text=True).stdout.split()[:1]
    import dask
    import numpy
    import pandas

    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    return {"git": git or "?", "cpus": os.cpu_count(), "cpu_model": model, "ram_gib": round(ram / 2 ** 30, 1),
            "python": platform.python_version(), "platform": platform.platform(),
            "sqlite3_cli": sqlite[0] if sqlite else "?", "numpy": numpy.__version__, "pandas": pandas.__version__,
            "dask": dask.__version__}


# -- reports ------------------------------------------------------------------------

def ensure_report(path: str, **params) -> tuple[str, float | None]:
    """Generate ``path`` unless it exists with the same parameters. Returns (path, seconds or None if cached)."""
    from pipeline import synth

    try:
        with open(synth.truth_path(path), encoding="utf-8") as fh:
            have = json.load(fh)["params"]
        if os.path.exists(path) and all(have.get(k) == v for k, v in params.items()):
            return path, None
    except (OSError, ValueError, KeyError):
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    t0 = time.perf_counter()
    synth.generate_scaled_report(path, **params)
    return path, time.perf_counter() - t0


def read_truth(path: str) -> dict:
    with open(path + ".truth.json", encoding="utf-8") as fh:
        return json.load(fh)


# -- 1. scale -------------------------------------------------------------------------

def floor_once(path: str, decode: bool = True) -> dict:
    """One ``sqlite3 -readonly`` process over :func:`floor_sql`: the decode floor, or the old text floor."""
    what = "decode floor" if decode else "text floor"
    return check(measure(["sqlite3", "-readonly", path, floor_sql(path, decode)]), f"sqlite3 {what}")


def reader_stage(path: str) -> None:
    """(Child process) the second reference: the columns of :data:`READ_COLUMNS` read with the
    project's own reader (:func:`pipeline.load.sqlite.read_columns`: each table off its b-tree where the fast
    path applies, else Arrow batches from the ADBC driver, into numpy) in a process that imports nothing else
    (checked: printed ``modules``)."""
    import sqlite3

    from pipeline.load.sqlite import Query, read_columns, readonly_uri
    from pipeline.load.tables import Schema

    uri = readonly_uri(path)
    schema = Schema(sqlite3.connect(uri, uri=True), uri)
    queries = {}
    for table, wanted in READ_COLUMNS.items():
        cols = [c for c in wanted if c in schema.columns(table)]
        if cols:
            queries[table] = Query(table, f"SELECT {', '.join(cols)} FROM {table}", cols)
    t0 = time.perf_counter()
    got = read_columns(schema, queries)
    seconds = time.perf_counter() - t0
    mods = sorted({m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"__main__"})
    print(json.dumps({"read_s": seconds, "rows": {t: d.rows for t, d in got.items()}, "modules": mods,
                      "maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


def reader_once(path: str) -> dict:
    run = check(measure([sys.executable, os.path.abspath(__file__), "_reader", path]), "reader reference")
    return dict(run, **json.loads(run["stdout"].strip().splitlines()[-1]))


def scale_rounds(path: str, repeat: int) -> dict:
    """``repeat`` interleaved rounds (decode floor, text floor, reader reference, ours first + cached,
    in-process), so that load from elsewhere on the machine hits all of them alike. Returns the
    best of each (peak RSS over all rounds)."""
    runs = {k: [] for k in ("floor", "text_floor", "reader", "e2e", "warm", "inproc")}
    for _ in range(repeat):
        runs["floor"].append(floor_once(path))
        runs["text_floor"].append(floor_once(path, decode=False))
        runs["reader"].append(reader_once(path))
        first, warm = ours_run(path, 1)
        runs["e2e"].append(first)
        runs["warm"].append(warm)
        runs["inproc"].append(inproc(path, 1))
    out = {k: best(v) for k, v in runs.items() if k != "inproc"}
    fastest = min(runs["inproc"], key=lambda r: r["stages_s"])
    out["inproc"] = dict(fastest, maxrss=max(r["maxrss"] for r in runs["inproc"]),
                         runs=[r["runs"][0] for r in runs["inproc"]])
    return out


def gpu_idle_env(cache: str) -> dict:
    """Environment for our runs: the columnar cache (``$GPU_IDLE_CACHE``) in ``cache``, never in ~/.cache."""
    return run_env({"GPU_IDLE_CACHE": cache})


def ours_run(path: str, repeat: int, extra=()) -> tuple[dict, dict]:
    """``gpu-idle run`` best of ``repeat``: cold (a fresh, empty columnar cache: read SQLite, write the cache)
    and warm (the same command again on that cache). Returns (cold, warm)."""
    gpu_idle = os.path.join(os.path.dirname(sys.executable), "gpu-idle")
    cold, warm = [], []
    for _ in range(repeat):
        scratch = tempfile.mkdtemp(prefix="gpu-idle-bench-", dir=DATA)
        env = gpu_idle_env(os.path.join(scratch, "cache"))
        try:
            for runs in (cold, warm):
                out = os.path.join(scratch, f"out{len(runs)}")
                runs.append(check(measure([gpu_idle, "run", path, "--out", out, *extra], env=env),
                                  f"gpu-idle run {path}"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return best(cold), best(warm)


def analysed_in_process(report, cfg, labels) -> list:
    """The price-free results of every GPU of ``report``, analysed as ``gpu-idle run FILE`` analyses one local
    report in its own process: the GPUs' plans, their agreement and matched collective calls, then each GPU, on
    the run's threads (:func:`pipeline.work.tasks.analyse_report` on
    :func:`pipeline.runs.driver.in_process_threads`, two by default)."""
    from pipeline.runs.driver import in_process_threads
    from pipeline.work.tasks import analyse_report

    return analyse_report(report, report.gpu_keys(), cfg, labels, in_process_threads(cfg))


def imports_frozen() -> None:
    """(Child process, once the stages are imported) what the `gpu-idle` process does then
    (:func:`pipeline.cli._start_up`): the objects made so far frozen, so that the collector's later passes skip the
    ~70k objects of the modules (unfrozen, one pass over them during the analysis of 2M kernels took ~50 ms that
    `gpu-idle run` does not spend)."""
    gc.freeze()


def inproc_stage(path: str) -> None:
    """(Child process) time load_report + the report's analysis (:func:`analysed_in_process`) with the default
    config, print JSON."""
    import pipeline.runs.driver  # noqa: F401 - imported before the clock starts (analysed_in_process)
    import pipeline.work.tasks  # noqa: F401
    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.config import load_config
    from pipeline.load.report import gpu_trace, load_report
    from pipeline.load.sqlite import decoded

    cfg = load_config([])
    labels = cfg.labels_for(path)
    imports_frozen()
    t0 = time.perf_counter()
    report = load_report(path)
    t1 = time.perf_counter()
    values = decoded()
    rows = [r.row for r in analysed_in_process(report, cfg, labels)]
    t2 = time.perf_counter()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cached_s = None
    try:   # the columnar cache (pipeline.load.cache), if this version of the pipeline has one: a warm load
        from pipeline.load.cache import load_cached

        scratch = tempfile.mkdtemp(prefix="gpu-idle-cache-", dir=DATA)
        try:
            load_cached(path, scratch)
            t3 = time.perf_counter()
            load_cached(path, scratch)
            cached_s = time.perf_counter() - t3
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    except ImportError:
        pass
    # Untimed: the span-window totals that nsys-ai's whole-profile figures correspond to.
    span = load_config([], {"analysis": {"window": "span"}})
    keep = ("gpu_key", "pid", "device_id", "gap_count", "gap_total_ns", "idle_ns", "window_start_ns",
            "window_end_ns", "gaps_le_5ms", "gaps_5_50ms", "gaps_gt_50ms")
    span_rows = [{k: analyse_gpu(gpu_trace(report, key), span, labels).row[k] for k in keep}
                 for key in report.gpu_keys()]
    print(json.dumps({"load_s": t1 - t0, "analyse_s": t2 - t1, "stages_s": t2 - t0, "maxrss": maxrss,
                      "cached_load_s": cached_s, "decoded": held_and_decoded(path, values),
                      "gpus": len(rows), "status": sorted({r["status"] for r in rows}), "span": span_rows}))


def inproc(path: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        run = check(measure([sys.executable, os.path.abspath(__file__), "_inproc", path]), f"in-process {path}")
        runs.append(dict(json.loads(run["stdout"].strip().splitlines()[-1]), proc_s=run["wall_s"]))
    fastest = min(runs, key=lambda r: r["stages_s"])
    return dict(fastest, maxrss=max(r["maxrss"] for r in runs), runs=[round(r["stages_s"], 3) for r in runs])


def profile_stage(path: str, out_txt: str) -> dict:
    """cProfile of load_report and of the per-GPU analyses (default config); top entries written to ``out_txt``."""
    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.config import load_config
    from pipeline.load.report import gpu_trace, load_report

    cfg = load_config([])
    summary = {}
    text = []
    holder = {}
    for stage, fn in (("load_report", lambda: holder.__setitem__("r", load_report(path))),
                      ("gpu_trace + analyse_gpu (all GPUs)",
                       lambda: [analyse_gpu(gpu_trace(holder["r"], k), cfg, {}) for k in holder["r"].gpu_keys()])):
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.runcall(fn)
        summary[stage] = time.perf_counter() - t0
        stats = pstats.Stats(prof)
        top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:8]
        summary[stage + " top"] = [(f"{os.path.basename(k[0])}:{k[1]}({k[2]})", round(v[2], 3), round(v[3], 3))
                                   for k, v in top]
        for order in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).strip_dirs().sort_stats(order).print_stats(18)
            text.append(f"===== {stage}: by {order} (wall {summary[stage]:.2f} s under cProfile) =====\n"
                        + buf.getvalue().split("\n\n", 1)[-1])
    with open(out_txt, "w", encoding="utf-8") as fh:
        fh.write("\n".join(text))
    return summary


# -- 2. nsys-ai ------------------------------------------------------------------------

def nsysai_setup() -> tuple[str, dict]:
    """Create bench/.venv-nsysai with nsys-ai and the DuckDB sqlite_scanner extension; return (nsys-ai, env)."""
    exe = os.path.join(NSYSAI_VENV, "bin", "nsys-ai")
    py = os.path.join(NSYSAI_VENV, "bin", "python")
    home = os.path.join(NSYSAI_VENV, "home")
    stamp = os.path.join(NSYSAI_VENV, f".installed-{NSYSAI_VERSION}-{DUCKDB_VERSION}")
    if not os.path.exists(stamp):
        log(f"bench: installing nsys-ai=={NSYSAI_VERSION} (duckdb=={DUCKDB_VERSION}) into {NSYSAI_VENV}")
        subprocess.run([sys.executable, "-m", "venv", "--clear", NSYSAI_VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", f"nsys-ai=={NSYSAI_VERSION}",
                        f"duckdb=={DUCKDB_VERSION}", f"duckdb-extension-sqlite-scanner=={DUCKDB_VERSION}"], check=True)
        # DuckDB autoloads extensions from ~/.duckdb/extensions/<version>/<platform>/: give nsys-ai its own
        # HOME with the wheel's extension there, so it never tries the network (and ~ stays untouched).
        src = subprocess.run([py, "-c", "import duckdb_extension_sqlite_scanner as m, os; "
                              "print(os.path.dirname(m.__file__))"], check=True, capture_output=True,
                             text=True).stdout.strip()
        platform_name = subprocess.run([py, "-c", "import duckdb; print(duckdb.execute("
                                        "'PRAGMA platform').fetchone()[0])"], check=True, capture_output=True,
                                       text=True).stdout.strip()
        dest = os.path.join(home, ".duckdb", "extensions", f"v{DUCKDB_VERSION}", platform_name)
        os.makedirs(dest, exist_ok=True)
        shutil.copy(os.path.join(src, "extensions", f"v{DUCKDB_VERSION}", "sqlite_scanner.duckdb_extension"), dest)
        open(stamp, "w").close()
    env = run_env({"HOME": home})
    env.pop("COVERAGE_PROCESS_START", None)
    return exe, env


def nsysai_summary(stdout: str) -> dict:
    rows = json.loads(stdout)
    return next((r for r in rows if isinstance(r, dict) and r.get("_summary")), {})


def nsysai_report(exe: str, env: dict, path: str, devices) -> dict:
    """``gpu_idle_gaps`` once per device: a cold pass (no parquet cache: the first run builds it) and a warm pass."""
    cache = os.path.splitext(path)[0] + ".nsys-cache"
    shutil.rmtree(cache, ignore_errors=True)
    passes = {}
    for name in ("cold", "warm", "direct"):
        run_env = dict(env, NSYS_AI_CACHE_MODE="direct") if name == "direct" else env
        runs = [check(measure([exe, "skill", "run", "gpu_idle_gaps", path, "--format", "json", "-p", f"device={d}"],
                              env=run_env), f"nsys-ai device {d}") for d in devices]
        passes[name] = {"sum_s": sum(r["wall_s"] for r in runs), "runs": [round(r["wall_s"], 3) for r in runs],
                        "tree_rss": max(r["tree_rss"] for r in runs),
                        "summaries": [nsysai_summary(r["stdout"]) for r in runs]}
    shutil.rmtree(cache, ignore_errors=True)
    if os.path.exists(cache + ".build.lock"):
        os.unlink(cache + ".build.lock")
    return passes


def compare_totals(ours_span: list, theirs: list) -> list:
    """Per GPU: (device, field, ours, theirs) for every figure where the two disagree beyond nsys-ai's rounding."""
    diffs = []
    by_dev = {r["device_id"]: r for r in ours_span}
    for s in theirs:
        o = by_dev.get(s.get("gpu_id"))
        if o is None:
            diffs.append((s.get("gpu_id"), "gpu", None, "present"))
            continue
        pairs = [("gap_count", o["gap_count"], s["gap_count"], 0),
                 ("gap total ms", o["gap_total_ns"] / 1e6, s["total_idle_ms"], 0.0051),
                 ("device idle ms", o["idle_ns"] / 1e6, s["device_idle_ms"], 0.0051),
                 ("gaps <= 5 ms", o["gaps_le_5ms"], s["gaps_1_5ms"], 0),
                 ("gaps 5-50 ms", o["gaps_5_50ms"], s["gaps_5_50ms"], 0),
                 ("gaps > 50 ms", o["gaps_gt_50ms"], s["gaps_gt50ms"], 0),
                 ("span start", o["window_start_ns"], s["profile_start_ns"], 0),
                 ("span end", o["window_end_ns"], s["profile_end_ns"], 0)]
        for field, a, b, tol in pairs:
            if b is None or abs(a - b) > tol:
                diffs.append((s.get("gpu_id"), field, a, b))
    return diffs


# -- 3. fleet --------------------------------------------------------------------------

def fleet_part_stage(folder: str, part: int, parts: int) -> None:
    """(Child process) ``pipeline.work.tasks.report_task`` on every ``parts``-th report of ``folder`` from
    ``part`` on, in a plain loop (no Dask), fresh columnar and result cache and output folder, each
    report's results stored as `gpu-idle run` stores them; prints the seconds."""
    from pipeline.config import load_config
    from pipeline.runs.driver import Todo, report_sinks
    from pipeline.store.results import ResultCache
    from pipeline.work.tasks import report_task

    scratch = tempfile.mkdtemp(prefix="gpu-idle-ceiling-", dir=DATA)
    os.environ["GPU_IDLE_CACHE"] = os.path.join(scratch, "cache")
    try:
        cfg = load_config([])
        paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".sqlite"))[part::parts]
        runs = ResultCache.for_run(cfg)
        runs.identify(paths)
        t0 = time.perf_counter()
        for path in paths:
            labels = cfg.labels_for(path)
            report_task(path, labels, cfg, report_sinks(Todo(path, labels, runs.slot(path)), cfg,
                                                        os.path.join(scratch, "gpus")))
        print(json.dumps({"reports": len(paths), "seconds": time.perf_counter() - t0}))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def ceiling_once(folder: str, parts: int) -> float:
    """What this machine allows plain processes on this very work, without Dask (the ceiling the fleet runs are
    measured against): the wall seconds of ``parts`` processes at once (:func:`fleet_part_stage`: the per-report
    task, load, analyse, write the per-GPU JSON, store the result), each over its share of the reports of
    ``folder``, from their start to the last one's end. One process over all of them against two over half each:
    2.0x on two idle, independent CPUs."""
    cmd = [sys.executable, os.path.abspath(__file__), "_fleet_part", folder]
    if parts == 1:
        return check(measure(cmd + ["0", "1"]), "ceiling: one process")["wall_s"]
    # the processes under one measured command, so that the same sampler runs beside them as beside the fleet run
    parts_cmd = [json.dumps(cmd + [str(i), str(parts)]) for i in range(parts)]
    return check(measure([sys.executable, "-S", "-c", ALL_AT_ONCE, *parts_cmd]), f"ceiling: {parts} processes")["wall_s"]


#: Runs the commands given (each a JSON list) at once and waits for them all; exit 1 if one fails.
ALL_AT_ONCE = (
    "import json, subprocess, sys\n"
    "procs = [subprocess.Popen(json.loads(c), stdout=subprocess.DEVNULL) for c in sys.argv[1:]]\n"
    "sys.exit(1 if any([p.wait() for p in procs]) else 0)\n"
)


def ensure_fleet(name: str, n: int, pattern: str, first_seed: int, params: dict, what: str) -> str:
    """``bench/data/<name>``, holding ``n`` reports named ``pattern.format(i)``, report ``i`` generated
    (:func:`ensure_report`) with seed ``first_seed + i`` and ``params`` unless already there. Returns the folder."""
    folder = os.path.join(DATA, name)
    made = 0.0
    for i in range(n):
        _, t = ensure_report(os.path.join(folder, pattern.format(i)), seed=first_seed + i, **params)
        made += t or 0.0
    if made:
        log(f"bench: generated {what} {n} reports in {made:.1f} s")
    return folder


#: The run's own last progress line (stderr): how long its analysis took, from the cluster's start
#: to the last report's result (:mod:`pipeline.progress`).
TASKS_DONE_RE = re.compile(r"progress: \d+/\d+ reports done in ([0-9.]+) s")


def tasks_seconds(run: dict) -> float | None:
    """The seconds of the run's analysis (cluster start to the last result) by its own progress
    line, None when it printed none."""
    found = TASKS_DONE_RE.findall(run.get("stderr", "") or "")
    return float(found[-1]) if found else None


def fleet(n: int, rounds: int = 2) -> dict:
    folder = ensure_fleet(f"fleet{n}", n, "job{:03d}.sqlite", 1000, FLEET, "fleet of")
    gpu_idle = os.path.join(os.path.dirname(sys.executable), "gpu-idle")
    runs = {"workers1": [], "workers2": [], "rerun": []}
    ceiling = {1: [], 2: []}
    # Each run beside its ceiling (one worker, one process; two workers, two processes), round after round, so
    # that this machine's drift (its speed moves by 10 % within minutes) hits both sides of each ratio alike.
    order = [("workers1", 1, "1"), ("workers2", 2, "2")] * rounds + [("rerun", 2, "2")]
    for name, workers, tag in order:   # rerun: nothing changed
        out, cache = os.path.join(DATA, f"fleet-out-{tag}"), os.path.join(DATA, f"fleet-cache-{tag}")
        if name != "rerun":
            shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(cache, ignore_errors=True)
        runs[name].append(check(measure([gpu_idle, "run", folder, "--out", out, "--workers", str(workers)],
                                        env=gpu_idle_env(cache)), f"fleet run ({name})"))
        if name != "rerun":
            ceiling[workers].append(ceiling_once(folder, workers))
    res = {name: best(r) for name, r in runs.items()}
    for name in ("workers1", "workers2"):
        res[name]["tasks_s"] = tasks_seconds(res[name])
        res[f"{name}_s"] = [r["wall_s"] for r in runs[name]]
    res["ceiling"] = {"one_s": min(ceiling[1]), "two_s": min(ceiling[2]), "ratio": min(ceiling[1]) / min(ceiling[2]),
                      "ones_s": ceiling[1], "twos_s": ceiling[2]}
    # The nightly sweep skips reports whose result for the same content and configuration exists.
    state, cache = os.path.join(DATA, "fleet-sweep-state"), os.path.join(DATA, "fleet-cache-sweep")
    # First night; the same night again; the next night (the nightly case: a new night folder,
    # history point and trend) with nothing changed. ``rounds`` times from an empty state, best kept.
    nights = {"sweep": "2026-01-01", "sweep_rerun": "2026-01-01", "sweep_next_night": "2026-01-02"}
    sweeps = {name: [] for name in nights}
    for _ in range(rounds):
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        for name, night in nights.items():
            cmd = [gpu_idle, "sweep", folder, "--state-dir", state, "--workers", "2", "--night", night]
            sweeps[name].append(check(measure(cmd, env=gpu_idle_env(cache)), f"fleet sweep ({name})"))
    res.update({name: best(r) for name, r in sweeps.items()})
    for tag in ("1", "2", "sweep"):
        for what in ("fleet-out", "fleet-cache"):
            shutil.rmtree(os.path.join(DATA, f"{what}-{tag}"), ignore_errors=True)
    shutil.rmtree(state, ignore_errors=True)
    res["reports"], res["gpus"], res["rounds"] = n, n * FLEET["gpus"], rounds
    return res


def round_shares(fl: dict) -> list[float]:
    """:func:`fleet_share` of each round alone: the two plain processes' time over the 2-worker run's of the same
    round (run one right after the other), in round order; empty for a record without the rounds. Their spread is
    this machine's noise on the best-of figure the target is judged by."""
    twos, ours = fl.get("ceiling", {}).get("twos_s", []), fl.get("workers2_s", [])
    return [c / w for c, w in zip(twos, ours)]


def fleet_share(fl: dict) -> float:
    """The share of this machine's two-process ceiling the ``--workers 2`` run reaches: the two plain processes'
    wall time over the run's (1.0: as fast; the same reports, the same per-report work). Not the ratio of the two
    speed-ups (one worker to two against one process to two): that one falls when the one-worker run gets
    faster, however fast the two-worker run is."""
    return fl["ceiling"]["two_s"] / fl["workers2"]["wall_s"]


def fleet_small(n: int, rounds: int = 2) -> dict:
    """``n`` small reports (:data:`FLEET_SMALL`): ``gpu-idle run DIR --workers 2`` (empty caches) vs this
    machine's two-process ceiling for the same per-report work (:func:`ceiling_once`, no Dask),
    alternating, best of ``rounds`` each. ``ratio`` = Dask / ceiling; ``overhead_ms`` = the extra wall
    time per report, what the scheduler (and the run's own start, discovery and reduce) cost a task."""
    folder = ensure_fleet(f"fleet-small{n}", n, "job{:04d}.sqlite", 5000, FLEET_SMALL, "small")
    gpu_idle = os.path.join(os.path.dirname(sys.executable), "gpu-idle")
    dask, two = [], []
    for _ in range(rounds):
        out, cache = os.path.join(DATA, "fleet-small-out"), os.path.join(DATA, "fleet-small-cache")
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)
        dask.append(check(measure([gpu_idle, "run", folder, "--out", out, "--workers", "2"],
                                  env=gpu_idle_env(cache)), "small fleet run"))
        two.append(ceiling_once(folder, 2))
    for what in ("fleet-small-out", "fleet-small-cache"):
        shutil.rmtree(os.path.join(DATA, what), ignore_errors=True)
    run = best(dask)
    run = dict({k: v for k, v in run.items() if k not in ("stdout", "stderr")}, tasks_s=tasks_seconds(run))
    return {"reports": n, "run": run, "ceiling_two_s": min(two), "ratio": run["wall_s"] / min(two),
            "overhead_ms": 1e3 * (run["wall_s"] - min(two)) / n, "rounds": rounds,
            "runs_s": [d["wall_s"] for d in dask], "ceilings_s": two}


# -- 0. start-up -------------------------------------------------------------------------

def startup(repeat: int) -> dict:
    """``gpu-idle --version`` and ``gpu-idle run`` on the real 2-kernel export (fresh caches and output
    each time), best of ``max(repeat, 5)`` after a warm-up run each."""
    gpu_idle = os.path.join(os.path.dirname(sys.executable), "gpu-idle")
    n = max(repeat, 5)
    version = [check(measure([gpu_idle, "--version"]), "gpu-idle --version") for _ in range(n + 1)][1:]
    res = {"version": {k: v for k, v in best(version).items() if k not in ("stdout", "stderr")}}
    if os.path.exists(TINY):
        tiny = []
        for _ in range(n + 1):
            scratch = tempfile.mkdtemp(prefix="gpu-idle-bench-", dir=DATA)
            try:
                tiny.append(check(measure([gpu_idle, "run", TINY, "--out", os.path.join(scratch, "out")],
                                          env=gpu_idle_env(os.path.join(scratch, "cache"))), "gpu-idle run (tiny)"))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        res["tiny"] = {k: v for k, v in best(tiny[1:]).items() if k not in ("stdout", "stderr")}
        res.update(startup_floors(n))
        res["imports"] = tiny_imports()
    return res


#: What any Python tool built on the same libraries pays before its first line of work.
LIBRARY_IMPORTS = "import numpy, pyarrow, pandas"


def startup_floors(n: int) -> dict:
    """Where a start-up goes that is not ours: ``python -c pass`` (the interpreter's own start) and
    ``python -c "import numpy, pyarrow, pandas"`` (the libraries the analysis is written in), best of ``n``
    after a warm-up each, in seconds."""
    out = {}
    for key, code in (("python_s", "pass"), ("libraries_s", LIBRARY_IMPORTS)):
        runs = [check(measure([sys.executable, "-c", code]), f"python -c {code!r}") for _ in range(n + 1)][1:]
        out[key] = best(runs)["wall_s"]
    return out


def import_times(stderr: str) -> dict:
    """``python -X importtime``'s report (``import time: self | cumulative | name`` lines, µs) summed by
    top-level package: ``{package: seconds}`` of own import time, largest first."""
    by_package: dict = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line[len("import time:"):].split("|")
        try:
            own = int(parts[0])
        except ValueError:   # the header line
            continue
        name = parts[2].strip().split(".")[0]
        by_package[name] = by_package.get(name, 0) + own / 1e6
    return dict(sorted(by_package.items(), key=lambda kv: -kv[1]))


def tiny_imports() -> dict:
    """One ``gpu-idle run`` of the 2-kernel export under ``python -X importtime`` (fresh caches and output):
    ``{"wall_s", "import_s", "packages": {package: seconds}}``, the own import time by top-level package
    (:func:`import_times`) and their sum; the rest of ``wall_s`` is the interpreter's start and the work."""
    scratch = tempfile.mkdtemp(prefix="gpu-idle-bench-", dir=DATA)
    try:
        run = check(measure([sys.executable, "-X", "importtime", "-m", "pipeline.cli", "run", TINY, "--out",
                             os.path.join(scratch, "out")], env=gpu_idle_env(os.path.join(scratch, "cache"))),
                    "gpu-idle run (tiny, -X importtime)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    packages = import_times(run["stderr"])
    return {"wall_s": run["wall_s"], "import_s": sum(packages.values()),
            "packages": {name: round(sec, 4) for name, sec in packages.items() if sec >= 0.001}}


# -- 4. accuracy -------------------------------------------------------------------------

def accuracy(paths: list) -> dict:
    """Precision/recall per category (auto window): planted gaps inside W, and every per-stream gap."""
    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.config import load_config
    from pipeline.load.report import gpu_trace, load_report

    cfg = load_config([], {"analysis": {"roster_size": 10_000_000, "window": "auto"}})
    planted_pairs, all_pairs = [], []   # (truth category or None, predicted category or None)
    launch_pairs, device_exact, gpus = [], 0, 0
    for path in paths:
        truth = read_truth(path)
        report = load_report(path)
        by_pid = {g["pid"]: g for g in truth["gpus"]}
        for key in report.gpu_keys():
            trace = gpu_trace(report, key)
            res = analyse_gpu(trace, cfg, {})
            gpu = by_pid[trace.pids[0]]
            want = gpu["windows"]["nvtx"]
            row = res.row
            gpus += 1
            launch_pairs.append(("launch" if gpu["launch_bound"] else None, "launch" if row["launch_bound"] else None))
            device_exact += all(row[f"cat_{c}_ns"] == want["expected"][f"cat_{c}_ns"] for c in CATEGORIES)
            found = {(g["stream_id"], g["start_ns"]): g for g in res.roster}
            w0, w1 = row["window_start_ns"], row["window_end_ns"]
            for p in gpu["planted"]:
                if w0 <= p["start_ns"] and p["end_ns"] <= w1 and p["category"]:
                    g = found.get((p["stream_id"], p["start_ns"]))
                    planted_pairs.append((p["category"], g["category"] if g and g["length_ns"] == p["length_ns"]
                                          else None))
            truth_gaps = {(g["stream_id"], g["start_ns"], g["length_ns"]): g["category"] for g in want["gaps"]}
            got = {(g["stream_id"], g["start_ns"], g["length_ns"]): g["category"] for g in res.roster}
            for k in truth_gaps.keys() | got.keys():
                all_pairs.append((truth_gaps.get(k), got.get(k)))

    def pr(pairs, cats):
        out = {}
        for c in cats:
            tp = sum(t == c and p == c for t, p in pairs)
            fp = sum(p == c and t != c for t, p in pairs)
            fn = sum(t == c and p != c for t, p in pairs)
            out[c] = {"support": tp + fn, "precision": tp / (tp + fp) if tp + fp else None,
                      "recall": tp / (tp + fn) if tp + fn else None}
        return out

    gap_cats = [c for c in CATEGORIES if c != "launch"]
    return {"reports": len(paths), "gpus": gpus, "planted": pr(planted_pairs, gap_cats),
            "all_gaps": pr(all_pairs, gap_cats), "launch": pr(launch_pairs, ["launch"])["launch"],
            "device_exact": device_exact, "planted_count": len(planted_pairs), "gap_count": len(all_pairs)}


# -- RESULTS.md ----------------------------------------------------------------------------

def fmt_ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def status(ok: bool | None) -> str:
    """A target's status: met, missed, or not measured (None: the run left out what judges it)."""
    return "**not measured**" if ok is None else ("**met**" if ok else "**missed**")


#: Said of a target whose measurement this run left out (``--sizes``, ``--skip-nsys-ai``, ``--fleet 0``, ...).
NOT_MEASURED = "not measured in this run"


def gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB"


def targets(r: dict) -> list[tuple[str, str, bool | None]]:
    """Every target of issues 16 and 44 (and the earlier ones kept): (target, what was measured, met)."""
    out = []
    scale, ns = r.get("scale", {}), r.get("nsysai", {})
    big = [k for k in ("2M", "3M") if k in scale]
    if big:
        e2e = {k: scale[k]["e2e_ratio"] for k in big}
        out.append((f"whole `gpu-idle run` (start to exit, empty caches, all GPUs) <= {E2E_TARGET}x the decode floor "
                    "at 2M and 3M kernels", ", ".join(f"{k}: {v:.2f}x" for k, v in e2e.items()),
                    all(v <= E2E_TARGET for v in e2e.values())))
        st = {k: scale[k]["stages_ratio"] for k in big}
        out.append((f"load + analysis in process <= {STAGES_TARGET}x the decode floor (2M, 3M)",
                    ", ".join(f"{k}: {v:.2f}x ({scale[k]['inproc']['stages_s']:.2f} s vs "
                              f"{scale[k]['floor']['wall_s']:.2f} s)" for k, v in st.items()),
                    all(v <= STAGES_TARGET for v in st.values())))
    else:
        out += [(f"whole `gpu-idle run` <= {E2E_TARGET}x the decode floor at 2M and 3M kernels",
                 NOT_MEASURED + " (no 2M or 3M size)", None),
                (f"load + analysis in process <= {STAGES_TARGET}x the decode floor (2M, 3M)", NOT_MEASURED, None)]
    su = r.get("startup")
    if su:
        v = su["version"]["wall_s"]
        out.append(("start-up: `gpu-idle --version` <= 0.15 s (kept from issue 16)", f"{v:.3f} s", v <= 0.15))
        if "tiny" in su:
            t = su["tiny"]["wall_s"]
            floors = (f"; of that, Python's own start takes {su['python_s']:.3f} s and `{LIBRARY_IMPORTS}` "
                      f"alone {su['libraries_s']:.3f} s" if "libraries_s" in su else "")
            out.append(("start-up: `gpu-idle run` on the 2-kernel real export <= 0.5 s (kept from issue 16)",
                        f"{t:.3f} s (peak RSS {mib(su['tiny']['tree_rss'])}){floors}", t <= 0.5))
    if "3M" in scale:
        rss = scale["3M"]["e2e"]["tree_rss"]
        out.append((f"peak RSS of `gpu-idle run` on 3M kernels <= {RSS_TARGET / 1e6:.0f} MB",
                    f"{gb(rss)} ({mib(rss)}; load + analysis in one process {mib(scale['3M']['inproc']['maxrss'])})",
                    rss <= RSS_TARGET))
    else:
        out.append((f"peak RSS of `gpu-idle run` on 3M kernels <= {RSS_TARGET / 1e6:.0f} MB", NOT_MEASURED, None))
    if "10M" in scale:
        s10 = scale["10M"]
        rss = s10["e2e"]["tree_rss"]
        base = scale.get("1M")
        per = s10["e2e_ns_per_kernel"] / base["e2e_ns_per_kernel"] if base else None
        out.append(("10M-kernel report analysed under 2 GB, time per kernel within 1.2x of the 1M figure",
                    f"{gb(rss)} peak; {s10['e2e_ns_per_kernel']:.0f} ns/kernel" +
                    (f" vs {base['e2e_ns_per_kernel']:.0f} at 1M ({per:.2f}x; load + analysis "
                     f"{s10['stages_ns_per_kernel'] / base['stages_ns_per_kernel']:.2f}x)" if base else ""),
                    rss < 2e9 and (per is not None and per <= 1.2)))
    else:
        out.append(("10M-kernel report analysed under 2 GB, time per kernel within 1.2x of the 1M figure",
                    NOT_MEASURED, None))
    if not ns.get("3M"):
        out.append((f"&gt;= {NSYSAI_TARGET:g}x faster than nsys-ai 0.3.0's per-GPU runs summed (cold) at 3M kernels, "
                    "identical totals", NOT_MEASURED, None))
    if not ns:
        out.append(("identical idle and gap totals to nsys-ai at every size", NOT_MEASURED, None))
    if ns:
        at3 = ns.get("3M")
        if at3:
            out.append((f"&gt;= {NSYSAI_TARGET:g}x faster than nsys-ai 0.3.0's per-GPU runs summed (cold) at 3M "
                        "kernels, identical totals", f"{at3['speedup_cold_e2e']:.2f}x ({at3['cold']['sum_s']:.2f} s vs "
                        f"{at3['ours_e2e_s']:.2f} s); totals {'identical' if not at3['diffs'] else 'differ'}",
                        at3["speedup_cold_e2e"] >= NSYSAI_TARGET and not at3["diffs"]))
        agree = all(not v["diffs"] for v in ns.values())
        out.append(("identical idle and gap totals to nsys-ai at every size",
                    "identical on every GPU of every size" if agree else "differences: see section 2", agree))
    fl = r.get("fleet")
    if fl and fl.get("ceiling"):
        speed = fl["workers1"]["wall_s"] / fl["workers2"]["wall_s"]
        share = fleet_share(fl)
        out.append((f"fleet: 2 workers >= 95 % of this machine's two-process ceiling ({fl['reports']} reports)",
                    f"{100 * share:.0f} % (the two plain processes' {fl['ceiling']['two_s']:.1f} s over the 2-worker "
                    f"run's {fl['workers2']['wall_s']:.1f} s; scaling: 2 workers {speed:.2f}x one worker, two plain "
                    f"processes {fl['ceiling']['ratio']:.2f}x one"
                    + (f"; each round's own pair: {', '.join(f'{100 * x:.0f}' for x in rounds)} %, median "
                       f"{100 * statistics.median(rounds):.0f} %" if (rounds := round_shares(fl)) else "")
                    + ")", share >= 0.95))
    else:
        out.append(("fleet: 2 workers >= 95 % of this machine's two-process ceiling", NOT_MEASURED, None))
    fs = r.get("fleet_small")
    if fs:
        out.append((f"fleet of {fs['reports']:,} small reports within {SMALL_FLEET_TARGET:.2f}x of the two-process "
                    f"ceiling", f"{fs['ratio']:.3f}x ({fs['run']['wall_s']:.2f} s vs {fs['ceiling_two_s']:.2f} s; "
                    f"scheduler and run overhead {fs['overhead_ms']:.1f} ms per report)",
                    fs["ratio"] <= SMALL_FLEET_TARGET))
    else:
        out.append((f"fleet of small reports within {SMALL_FLEET_TARGET:.2f}x of the two-process ceiling", NOT_MEASURED,
                    None))
    if not fl:
        out.append(("unchanged rerun <= 5 % of a full run (kept)", NOT_MEASURED, None))
    if fl:
        if "sweep_next_night" in fl:
            rerun = max(fl["sweep_rerun"]["wall_s"], fl["sweep_next_night"]["wall_s"]) / fl["sweep"]["wall_s"]
            how = ("`gpu-idle sweep` rerun / first sweep, the slower of the same and the next night; the first sweep "
                   "also draws a page per GPU, see section 3")
        else:
            rerun = fl["rerun"]["wall_s"] / fl["workers2"]["wall_s"]
            how = "`gpu-idle run` rerun / first run"
        out.append(("unchanged rerun <= 5 % of a full run (kept)", f"{100 * rerun:.1f} % ({how})", rerun <= 0.05))
    acc = r.get("accuracy")
    if acc:
        vals = [v for c in acc["planted"].values() for v in (c["precision"], c["recall"]) if v is not None]
        vals += [v for v in (acc["launch"]["precision"], acc["launch"]["recall"]) if v is not None]
        lo = min(vals) if vals else None
        out.append(("planted-gap precision and recall >= 0.95 for every category (kept)",
                    "n/a" if lo is None else f"lowest {lo:.3f}", lo is not None and lo >= 0.95))
    else:
        out.append(("planted-gap precision and recall >= 0.95 for every category (kept)", NOT_MEASURED, None))
    return out


def where_time_goes(r: dict) -> list[str]:
    """The section that says, from the bench's own measurements, where the time of each missed
    speed target goes: the whole run at each size of 1M kernels and more split into load, analysis
    and the rest (the difference), each against the decode floor; what the
    2-kernel run spends before its first line of work; what nsys-ai's figure would leave us; the
    small-report fleet's per-report overhead. Markdown lines ([] when no target is missed)."""
    scale, su, ns = r.get("scale", {}), r.get("startup") or {}, r.get("nsysai", {})
    missed_names = [name for name, _, ok in targets(r) if ok is False]
    if not missed_names:
        return []

    def missed(prefix: str) -> bool:
        return any(name.startswith(prefix) for name in missed_names)

    lines = ["", "## Where the time of the missed targets goes", "",
             "Every figure below is measured by `make bench` (in the run, or the runs, named at the top). *Libraries*: `python -c \"" + LIBRARY_IMPORTS + "\"` (interpreter "
             "start included), what any tool built on them pays first. *Load*, *analysis*: timed inside a fresh "
             "interpreter (section 1). *Reader*: the project's own column reader alone, in a process of its own "
             "(its interpreter start and pyarrow import included). *The rest*: `gpu-idle run` less load and "
             "analysis: the interpreter's start and every import (numpy, pyarrow and pandas alone: the "
             "libraries' figure of section 0), hashing the file, writing the columnar cache and the output "
             "files, exit.", "",
             "| kernels | decode floor | `gpu-idle run` | load | analysis | the rest | reader alone |",
             "|---:|---:|---:|---:|---:|---:|---:|"]
    if not any(k in scale for k in ("1M", "2M", "3M", "10M")):
        lines = lines[:4]   # no size of 1M kernels or more in this run: no table
    libs = su.get("libraries_s")
    for k in [k for k in ("1M", "2M", "3M", "10M") if k in scale]:
        s = scale[k]
        fl, e2e, ip = s["floor"]["wall_s"], s["e2e"]["wall_s"], s["inproc"]
        rest = e2e - ip["load_s"] - ip["analyse_s"]
        cell = lambda x: f"{x:.2f} s ({x / fl:.2f}x)"  # noqa: E731 - s and x the floor
        lines.append(f"| {s['kernels']:,} | {fl:.2f} s | {cell(e2e)} | {cell(ip['load_s'])} | {cell(ip['analyse_s'])} "
                     f"| {cell(rest)} | {cell(s['reader']['wall_s'])} |")
    notes = []
    name = next((k for k in ("3M", "2M") if k in scale), None)
    if name is not None and (missed("whole `gpu-idle run`") or missed("load + analysis")):
        at = scale[name]
        fl, ip = at["floor"]["wall_s"], at["inproc"]
        load_x, analysis_x = ip["load_s"] / fl, ip["analyse_s"] / fl
        notes.append(
            f"**Load + analysis, whole run ({name}).** Load alone is {load_x:.2f}x the decode floor and analysis "
            f"alone {analysis_x:.2f}x" + (f"; each alone is above the {STAGES_TARGET}x of the target" if min(load_x, analysis_x) > STAGES_TARGET
                                          else "") + ". The load waits on decoding (in the profile below, `acquire` "
            f"of a lock is the main thread waiting for other threads); the reader alone, doing nothing but "
            f"decode the same columns, is {at['reader']['wall_s'] / fl:.2f}x the floor (its process "
            "start and imports included; the kernel and runtime tables off their b-trees, the small tables "
            "through SQLite). Analysis is numpy work over every kernel "
            "and CUDA API call of each GPU (sorts, unions, searches: the profile's top entries).")
    tiny = su.get("tiny")
    if tiny and libs and missed("start-up: `gpu-idle run`"):
        imp = su.get("imports") or {}
        top = ", ".join(f"`{p}` {v:.2f} s" for p, v in list(imp.get("packages", {}).items())[:4])
        notes.append(
            f"**The 2-kernel run** ({tiny['wall_s']:.2f} s against 0.5 s). The interpreter starts in "
            f"{su.get('python_s', 0):.2f} s and importing numpy, pyarrow and pandas takes it to {libs:.2f} s "
            f"({100 * libs / tiny['wall_s']:.0f} % of the run) before the analysis starts"
            + (f"; by package, the largest imports are {top} (section 0)" if top else "") + ".")
    at3 = ns.get("3M")
    if at3 and "3M" in scale and missed(f"&gt;= {NSYSAI_TARGET:g}x faster than nsys-ai"):
        need = at3["cold"]["sum_s"] / NSYSAI_TARGET
        ip, first = scale["3M"]["inproc"], at3["cold"]["runs"][0]
        notes.append(
            f"**nsys-ai at 3M.** Their per-GPU runs sum to {at3['cold']['sum_s']:.2f} s (cold): {first:.2f} s for "
            f"the first call, which converts the file to Parquet with DuckDB, and {at3['cold']['sum_s'] - first:.2f} s "
            f"for the seven others reading that Parquet (section 2). {NSYSAI_TARGET:g}x would need our whole run in {need:.2f} s; "
            f"our load alone takes {ip['load_s']:.2f} s, our analysis {ip['analyse_s']:.2f} s"
            + (", so the target is below what our load alone takes: it needs a faster decode, not a faster analysis."
               if need < ip["load_s"] else "."))
    fl = r.get("fleet")
    if fl and fl.get("ceiling") and fl["workers2"].get("tasks_s") is not None and missed("fleet: 2 workers"):
        w2, two = fl["workers2"], fl["ceiling"]["two_s"]
        excess = w2["tasks_s"] - two
        notes.append(
            f"**Fleet, 2 workers ({fl['reports']} reports).** The run took {w2['wall_s']:.1f} s; its analysis, "
            f"from starting the cluster to the last report's result (the run's own progress line), "
            f"{w2['tasks_s']:.1f} s, against {two:.1f} s for the same per-report work in two plain processes. "
            f"The other {w2['wall_s'] - w2['tasks_s']:.1f} s run one after another in the client: start-up and "
            "imports, discovering and hashing the inputs, then the fleet tables, rollups and records at the end."
            + (f" The analysis' own excess ({excess:.1f} s) is starting the cluster (two worker processes, each "
               "importing the pipeline), the scheduler, and the client sharing the two CPUs with the workers."
               if excess > 0 else " The analysis itself is no slower than the plain processes."))
    if fl and missed("unchanged rerun") and "sweep_next_night" in fl:
        notes.append(
            f"**Unchanged rerun.** The same night again took {fl['sweep_rerun']['wall_s']:.1f} s and the next night "
            f"{fl['sweep_next_night']['wall_s']:.1f} s, against {fl['sweep']['wall_s']:.1f} s for the first sweep: "
            "the next night reads every stored result, writes the night's tables, records and report (with its "
            "new trend) and takes each GPU page from the plot cache; with few reports, start-up and the report "
            "weigh more than the analysis they save.")
    fs = r.get("fleet_small")
    if fs and not fs["ratio"] <= SMALL_FLEET_TARGET:
        tasks = fs["run"].get("tasks_s")
        notes.append(
            f"**Small-report fleet ({fs['reports']:,} reports).** {fs['overhead_ms']:.1f} ms per report over two "
            "plain processes" + (f"; its analysis (cluster start to the last result) took {tasks:.1f} s of the "
                                 f"run's {fs['run']['wall_s']:.1f} s (two plain processes: {fs['ceiling_two_s']:.1f} s)"
                                 if tasks is not None else "")
            + ": the Dask scheduler's per-task cost (each task's result goes back to the client, which stores "
            "it and advances the progress line), the client's share of the two CPUs, and the serial start "
            "and reduce.")
    for note in notes:
        lines += ["", note]
    return lines


def write_results(r: dict, path: str = RESULTS) -> str:
    m = r["machine"]
    lines = ["# gpu-idle benchmark results", "",
             f"Written by `bench/run.py` ({r['finished']}, {r['elapsed_s']:.0f} s, code at `{m['git']}`). "
             f"Machine: {m['cpus']} CPUs ({m['cpu_model'] or 'unknown model'}), {m['ram_gib']} GiB RAM, "
             f"Python {m['python']}, {m['platform']}; sqlite3 CLI {m['sqlite3_cli']}, numpy {m['numpy']}, "
             f"pandas {m['pandas']}, dask {m['dask']}. Times are the best of {r['repeat']} interleaved runs on a warm "
             "page cache (ours and the floors alike), Python's bytecode cache allowed as in an installed copy; "
             "RSS is the peak over those runs. Load average (1/5/15 min) "
             f"at the start {'/'.join(f'{x:.1f}' for x in r['loadavg_start'])}, at the end "
             f"{'/'.join(f'{x:.1f}' for x in r['loadavg_end'])}: anything well above 0 means other work shared "
             "the CPUs and the times are pessimistic." + (f" ({r['updated']}.)" if r.get("updated") else ""), "",
             "Reports: `pipeline.synth.generate_scaled_report(gpus=8, kernels=N, seed=0, device_per_rank=True)` "
             "(8 processes, one GPU each, CUDA device = rank, as torchrun leaves it; ~3,000 kernels per GPU and "
             "iteration).", "", "## Targets (issues 16 and 44)", "",
             "The floor is the decode floor: one `sqlite3 -readonly FILE` process computing `total()` over every "
             "column the loader reads (`length()` of text), nothing printed but a row per table.", "",
             "| target | measured | status |", "|---|---|---|"]
    for target, measured, ok in targets(r):
        lines.append(f"| {target} | {measured} | {status(ok)} |")
    lines += where_time_goes(r)
    scale = r.get("scale", {})
    ns = r.get("nsysai", {})
    fl = r.get("fleet")
    acc = r.get("accuracy")
    su = r.get("startup")
    if su:
        lines += ["", "## 0. Start-up", "",
                  f"`gpu-idle --version`: {su['version']['wall_s']:.3f} s (peak RSS {mib(su['version']['tree_rss'])})"
                  + (f"; `gpu-idle run {os.path.basename(TINY)} --out DIR` (the real 2-kernel export, fresh caches "
                     f"and output): {su['tiny']['wall_s']:.3f} s (peak RSS {mib(su['tiny']['tree_rss'])})"
                     if "tiny" in su else "") + ". Best of 5 after a warm-up. What each loads is held by "
                  "`tests/test_startup.py`: click alone for `--version` and `--help`; for one local report with "
                  "the default settings, pandas, numpy, pyarrow and the ADBC SQLite driver, no Dask, "
                  "matplotlib, jinja2, markdown, fsspec/s3fs, psutil, YAML or pydantic. Most of the rest is "
                  "importing pandas (with numpy and pyarrow)."]
        if "libraries_s" in su:
            lines += ["", f"Floors measured the same way in this run: `python -c pass` {su['python_s']:.3f} s; "
                      f"`python -c \"{LIBRARY_IMPORTS}\"` {su['libraries_s']:.3f} s, what any tool written with "
                      "these libraries pays before its first line of work."]
        imp = su.get("imports")
        if imp:
            top = list(imp["packages"].items())[:8]
            rest = imp["import_s"] - sum(v for _, v in top)
            lines += ["", f"Where the 2-kernel run's time goes: one run under `python -X importtime` took "
                      f"{imp['wall_s']:.3f} s, {imp['import_s']:.3f} s of it importing modules (own time, by "
                      "top-level package; the tracing itself adds a little):", "",
                      "| package | import s |", "|---|---:|"]
            lines += [f"| `{name}` | {sec:.3f} |" for name, sec in top]
            lines += [f"| other packages | {rest:.3f} |",
                      f"| **not imports**: interpreter start, reading and analysing the report, writing the "
                      f"outputs | {imp['wall_s'] - imp['import_s']:.3f} |"]
    if scale:
        lines += ["", "## 1. Scale: ours vs the decode floor (per report, all 8 GPUs)", "",
                  "*Decode floor*: `sqlite3 -readonly FILE` with `SELECT total(start), total(end), ... FROM "
                  "<table>` over every column the loader reads (kernels, runtime, memcpy, memset, NVTX ranges, "
                  "StringIds, GPU tables, metadata). *Text floor* (the floor of earlier runs, kept for "
                  "continuity): the same columns printed as text into /dev/null. *Reader*: the same columns "
                  "read with the project's own reader (`pipeline.load.sqlite.read_columns`: each table's integer "
                  "columns off its b-tree where they are plain integers, else Arrow batches from the ADBC SQLite "
                  "driver into numpy, rowid ranges on two threads) in a process that imports "
                  "nothing else, spawn to exit. `gpu-idle run FILE --out DIR` with default options, spawn to exit: "
                  "*first* with an empty columnar cache (`$GPU_IDLE_CACHE` in a fresh folder: hash the file, read "
                  "SQLite, write the cache; ratios and targets use this run), *cached* the same command again. "
                  "Load + analysis: `load_report` + the report's analysis as `gpu-idle run` does it in its "
                  "process (plans, agreement, collective calls, every GPU; on the run's 2 threads unless the GPUs "
                  "are large: `pipeline.work.tasks.analyse_report`) timed inside a fresh interpreter (imports "
                  "excluded). Ratios are to the decode floor; ns/kernel = seconds / kernels.", "",
                  "| kernels | file | decode floor | text floor | reader | `gpu-idle run` first | ratio | ns/kernel "
                  "| cached | load | analysis | load + analysis | ratio | ns/kernel | RSS `gpu-idle run` (tree / "
                  "largest process) | RSS load + analysis | RSS reader |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, s in scale.items():
            ip = s["inproc"]
            rd = s.get("reader")
            lines.append(
                f"| {s['kernels']:,} | {mib(s['bytes'])} | {s['floor']['wall_s']:.2f} s | "
                f"{s['text_floor']['wall_s']:.2f} s | {rd['wall_s']:.2f} s ({s['reader_ratio']:.2f}x) | "
                f"{s['e2e']['wall_s']:.2f} s | {s['e2e_ratio']:.2f}x | {s['e2e_ns_per_kernel']:.0f} | "
                f"{s['warm']['wall_s']:.2f} s | {ip['load_s']:.2f} s | {ip['analyse_s']:.2f} s | {ip['stages_s']:.2f} s "
                f"| {s['stages_ratio']:.2f}x | {s['stages_ns_per_kernel']:.0f} | {mib(s['e2e']['tree_rss'])} / "
                f"{mib(s['e2e']['max_rss'])} | {mib(ip['maxrss'])} | {mib(rd.get('maxrss', rd['max_rss']))} |")
        dask_line = next((ln for s in scale.values() for ln in s.get("dask", [])), "")
        if dask_line:
            lines += ["", f"How `gpu-idle run` set Dask up for one report: `{dask_line}`."]
        gen = {k: s["generate_s"] for k, s in scale.items() if s["generate_s"] is not None}
        if gen:
            lines += ["", "Generation time (`generate_scaled_report`, this run): " +
                      ", ".join(f"{k}: {v:.1f} s" for k, v in gen.items()) + "."]
    if r.get("profile"):
        prof = r["profile"]
        stages = [k for k in prof if not k.endswith(" top")]
        lines += ["", f"Where the time goes: cProfile of the {r.get('profile_size', '1M')}-kernel report (full listing "
                  f"written to `bench/{os.path.basename(r['profile_txt'])}`, not committed): "
                  + ", ".join(f"{k} {prof[k]:.2f} s" for k in stages) + ". Top functions by own time "
                  "(`acquire` of a lock: the main thread waiting for the decode threads):", "",
                  "| stage | function | own s | cumulative s |", "|---|---|---:|---:|"]
        for k in stages:
            for fn, tt, ct in prof[k + " top"]:
                lines.append(f"| {k} | `{fn}` | {tt:.2f} | {ct:.2f} |")
    if ns:
        lines += ["", "## 2. Against nsys-ai 0.3.0 (`gpu_idle_gaps`, once per GPU)", "",
                  f"`nsys-ai skill run gpu_idle_gaps FILE --format json -p device=D` for D = 0..7, each a separate "
                  f"process, summed; duckdb {DUCKDB_VERSION} with the `duckdb-extension-sqlite-scanner` wheel, "
                  "offline. *Cold*: no cache beside the file, so the first call builds nsys-ai's Parquet cache "
                  "(DuckDB reading the SQLite file once) and the other seven query it; *warm*: the same eight "
                  "calls again with the cache in place; *direct*: `NSYS_AI_CACHE_MODE=direct`, every call reads "
                  "the SQLite file itself. Speed-up = nsys-ai's sum / ours (`gpu-idle run` first run, empty "
                  "columnar cache).", "",
                  "| kernels | nsys-ai cold sum (first call) | warm sum | direct sum | ours `gpu-idle run` "
                  "| ours load + analysis | speed-up cold | warm | direct | totals |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for name, v in ns.items():
            lines.append(f"| {v['kernels']:,} | {v['cold']['sum_s']:.2f} s ({v['cold']['runs'][0]:.2f} s) | "
                         f"{v['warm']['sum_s']:.2f} s | {v['direct']['sum_s']:.2f} s | {v['ours_e2e_s']:.2f} s | "
                         f"{v['ours_stages_s']:.2f} s | {v['speedup_cold_e2e']:.2f}x | {v['speedup_warm_e2e']:.2f}x | "
                         f"{v['speedup_direct_e2e']:.2f}x | "
                         f"{'identical' if not v['diffs'] else str(len(v['diffs'])) + ' differences'} |")
        lines += ["", "Totals compared per GPU against our `--window span` figures (nsys-ai analyses the whole "
                  "profile): per-stream gap count and total, device-level idle, the three size buckets, the span "
                  "edges. nsys-ai rounds ms to 2 decimals; everything else must be equal."]
        for name, v in ns.items():
            for d in v["diffs"][:8]:
                lines.append(f"- {name}: device {d[0]}: {d[1]}: ours {d[2]}, nsys-ai {d[3]}")
        d0 = r.get("nsysai_device0")
        if d0:
            lines += ["", "Definitional difference, shown on the same 100k-kernel report written with CUDA device 0 in "
                      "every process (each rank sees only its own GPU, e.g. `CUDA_VISIBLE_DEVICES` per rank): "
                      "nsys-ai selects a GPU by `deviceId` alone and partitions streams by (deviceId, streamId), "
                      "so `-p device=0` merges all eight processes into one \"GPU\" and interleaves their stream "
                      "7s, and devices 1-7 are empty. SPEC: a GPU is the physical GPU (TARGET_INFO_GPU / "
                      "TARGET_INFO_CUDA_DEVICE, else (pid, deviceId)) and stream ids are per process.", "",
                      f"- nsys-ai device 0: {d0['theirs']['gap_count']} gaps, {d0['theirs']['total_idle_ms']} ms "
                      f"of gaps, device idle {d0['theirs'].get('device_idle_ms')} ms over a "
                      f"{(d0['theirs']['profile_end_ns'] - d0['theirs']['profile_start_ns']) / 1e6:,.1f} ms span;",
                      f"- ours, 8 GPUs: {d0['ours_gap_count']} gaps, {d0['ours_gap_ms']:,.2f} ms of gaps, device idle "
                      f"{d0['ours_idle_ms']:,.2f} ms summed over the GPUs."]
        lines += ["", "Other definitional notes: nsys-ai's gap is `start - LAG(end)` in (start, correlationId) "
                  "order, ours runs from the latest end seen on the stream; they agree when a stream's kernels do "
                  "not overlap (true here, and for real CUDA streams). Its threshold is `> min_gap_ns` like ours. "
                  "Its category is the first matching API name among the top 5 calls by *full* duration "
                  "(not overlap), for the top 5 gaps only; ours categorises every gap by overlap (SPEC), so "
                  "categories were not compared."]
    if fl:
        lines += ["", f"## 3. Fleet: {fl['reports']} reports x {FLEET['gpus']} GPUs ({FLEET['kernels']:,} kernels each)",
                  "", f"`--workers 1` and `--workers 2` alternate, {fl.get('rounds', 2)} times each (best kept), and so do the "
                  "one- and two-process runs of the ceiling; the `gpu-idle run` rerun runs once; the three sweeps "
                  f"(first night, same night again, next night) run {fl.get('rounds', 2)} times from an empty state, "
                  "best of each kept.", "",
                  "| run | wall | peak RSS (tree) |", "|---|---:|---:|"]
        for key, label in (("workers1", "`gpu-idle run DIR --out D1 --workers 1`"),
                           ("workers2", "`gpu-idle run DIR --out D2 --workers 2`"),
                           ("rerun", "the same `--workers 2` command again, nothing changed"),
                           ("sweep", "`gpu-idle sweep DIR --state-dir S --workers 2` (empty state)"),
                           ("sweep_rerun", "the same sweep again, same night, nothing changed"),
                           ("sweep_next_night", "the same sweep on the next night (`--night` + 1 day), "
                                                "nothing changed")):
            if key not in fl:
                continue
            lines.append(f"| {label} | {fl[key]['wall_s']:.1f} s | {mib(fl[key]['tree_rss'])} |")
        if fl.get("ceiling"):
            c = fl["ceiling"]
            lines += ["", f"Ceiling (no Dask): the per-report task (load, analyse, write the per-GPU JSON, store the result) over "
                      f"all {fl['reports']} reports in one plain process took {c['one_s']:.1f} s, over half of them "
                      f"in each of two processes at once {c['two_s']:.1f} s: {fmt_ratio(c['ratio'])} is what this "
                      "machine gave two plain processes in this run (each also paying its own start-up and "
                      "hashing); the rest of the gap to 2x is the CPUs slowing each other down. The 2-worker run reaches "
                      f"{100 * fleet_share(fl):.0f} % of the two processes' speed (their time over its time; its "
                      f"speed-up over the 1-worker run, {fl['workers1']['wall_s'] / fl['workers2']['wall_s']:.2f}x, is "
                      f"{100 * fl['workers1']['wall_s'] / fl['workers2']['wall_s'] / c['ratio']:.0f} % of theirs)"
                      + (". Each run was timed beside its ceiling, round after round (best kept): one process "
                         + ", ".join(f"{t:.1f}" for t in c["ones_s"]) + " s, two "
                         + ", ".join(f"{t:.1f}" for t in c["twos_s"]) + " s; 1 worker "
                         + ", ".join(f"{t:.1f}" for t in fl.get("workers1_s", [])) + " s, 2 workers "
                         + ", ".join(f"{t:.1f}" for t in fl.get("workers2_s", [])) + " s"
                         if "twos_s" in c else "")
                      + ". They "
                      "also pay, serially in the client, start-up and imports, discovering and hashing the inputs "
                      "and, at the end, the fleet tables and records"
                      + (f" ({fl['workers2']['wall_s'] - fl['workers2']['tasks_s']:.1f} s of the 2-worker run: its "
                         f"wall time less its analysis, {fl['workers2']['tasks_s']:.1f} s by its own progress line)"
                         if fl["workers2"].get("tasks_s") is not None else "")
                      + ", and the scheduler takes its share of the two CPUs."]
        lines += ["", "The first two runs start from an empty columnar cache each; the rerun finds the caches "
                  "(and the output folder) of the `--workers 2` run: every report's result is stored and the "
                  "folder's manifest still holds, so it analyses nothing and keeps the folder. `gpu-idle sweep` "
                  "(the nightly job) keeps results per report content, settings and code and skips unchanged "
                  "reports; its first run starts from an empty state and cache. Unlike `gpu-idle run`, the sweep "
                  "also writes report.html and a page per GPU (" + f"{fl['gpus']:,}" + " here): the workers draw "
                  "each GPU's timeline (matplotlib) right after its report's analysis, and the report renders "
                  "the pages"
                  + (f", so the first sweep takes {fl['sweep']['wall_s'] - fl['workers2']['wall_s']:.1f} s more "
                     "than the same `--workers 2` run" if "sweep" in fl else "")
                  + ". An unchanged night reuses the last complete night's files (hard links) and redraws only "
                  "what shows the new night (the trend in report.html); the next night takes every GPU page from "
                  "the plot cache (kept by the page's JSON, links and code), so it renders none again."]
    fs = r.get("fleet_small")
    if fs:
        lines += ["", f"## 3b. Fleet of {fs['reports']:,} small reports ({FLEET_SMALL['gpus']} GPUs, "
                  f"{FLEET_SMALL['kernels']:,} kernels each)", "",
                  f"`gpu-idle run DIR --out D --workers 2` from empty caches: {fs['run']['wall_s']:.1f} s (peak RSS "
                  f"{mib(fs['run']['tree_rss'])}); the same per-report work in two plain processes (no Dask, half "
                  f"the reports each): {fs['ceiling_two_s']:.1f} s. Ratio {fs['ratio']:.2f}x: the scheduler, the "
                  f"run's start, discovery, hashing and the final reduce cost {fs['overhead_ms']:.1f} ms of wall "
                  "time per report over the ceiling."
                  + (f" Best of {fs['rounds']} interleaved rounds each; every round, in order: `gpu-idle run` "
                     + ", ".join(f"{t:.1f}" for t in fs["runs_s"]) + " s; the two processes "
                     + ", ".join(f"{t:.1f}" for t in fs["ceilings_s"]) + " s (the spread is this machine's noise, "
                     "which the same work shows between rounds)." if fs.get("runs_s") else "")]
    if acc:
        lines += ["", f"## 4. Category accuracy ({acc['reports']} reports, {acc['gpus']} GPUs, auto window)", "",
                  f"Planted: the {acc['planted_count']} planted gaps inside the stable window, with the category "
                  f"they were planted for; all gaps: every per-stream gap above 1 ms ({acc['gap_count']}: the "
                  "planted ones plus the NCCL stream's waits between backward passes, truth computed by the "
                  "generator's own numpy reference of the SPEC rules, `periodic` being the pauses it planted "
                  "as periodic). `launch` is per GPU.", "",
                  "| category | planted: support | precision | recall | all gaps: support | precision | recall |",
                  "|---|---:|---:|---:|---:|---:|---:|"]

        def f3(x):
            return "n/a" if x is None else f"{x:.3f}"

        for c in CATEGORIES:
            if c == "launch":
                la = acc["launch"]
                lines.append(f"| launch (per GPU) | {la['support']} | {f3(la['precision'])} | {f3(la['recall'])} "
                             f"| | | |")
                continue
            p, a = acc["planted"][c], acc["all_gaps"][c]
            lines.append(f"| {c} | {p['support']} | {f3(p['precision'])} | {f3(p['recall'])} | {a['support']} | "
                         f"{f3(a['precision'])} | {f3(a['recall'])} |")
        lines += ["", f"Device-level category shares (`cat_*_ns`) equal to the truth on {acc['device_exact']} of "
                  f"{acc['gpus']} GPUs.", "",
                  "What this shows and what it does not: the planted gaps are unambiguous by construction (a witness "
                  "covers nearly all of the gap or none of it, boundaries and periodic pauses sit well inside the "
                  "rules' margins), so 1.000 says the pipeline applies the SPEC rules exactly as the generator's "
                  "independent reference does, and calls periodic exactly the pauses planted as periodic, at "
                  "every size. (Not scored here: in the span window, with no iteration boundaries, the "
                  "pipeline also calls the one checkpoint pause periodic; see tests/test_synth_scale.py.) "
                  "It says nothing about how well the rules themselves "
                  "name real, messy gaps (partial witnesses near the 50 % thresholds, overlapping causes)."]
    lines.append("")
    text = "\n".join(lines)
    import quick  # bench/quick.py, beside this file

    try:  # the quick guard's recorded figures (bench/quick.py --record) stay until it records new ones
        with open(path, encoding="utf-8") as fh:
            kept = quick.quick_section(fh.read())
    except OSError:
        kept = None
    if kept:
        text = quick.with_section(text, kept)
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return text


# -- main ----------------------------------------------------------------------------------

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default=",".join(SIZES), help="comma-separated subset of " + ",".join(SIZES))
    ap.add_argument("--repeat", type=int, default=3, help="interleaved rounds per measurement (best is kept)")
    ap.add_argument("--fleet", type=int, default=200, help="reports in the fleet benchmark (0: skip)")
    ap.add_argument("--fleet-small", type=int, default=2000,
                    help="small reports in the scheduler-overhead fleet (0: skip)")
    ap.add_argument("--skip-nsys-ai", action="store_true")
    ap.add_argument("--skip-profile", action="store_true")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: " + ", ".join(f"{k}={v}" for k, v in QUICK.items()) + " (figures to bench/data)")
    ap.add_argument("--rewrite", action="store_true", help="only re-render RESULTS.md from bench/data/results.json")
    ap.add_argument("--update", action="store_true",
                    help="keep the sections of the last run (bench/data/results.json) that this run does not measure")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes, args.repeat, args.fleet = QUICK["sizes"], QUICK["repeat"], QUICK["fleet"]
        args.fleet_small, args.skip_nsys_ai, args.skip_profile = QUICK["fleet_small"], True, True
    if args.rewrite:
        with open(os.path.join(DATA, "results.json"), encoding="utf-8") as fh:
            log(write_results(json.load(fh)))
        return 0
    if shutil.which("sqlite3") is None:
        raise SystemExit("bench: the sqlite3 CLI is needed for the floor (apt-get install -y sqlite3)")
    os.makedirs(DATA, exist_ok=True)
    started = time.perf_counter()
    r = {"machine": machine_facts(), "repeat": args.repeat, "loadavg_start": os.getloadavg()}
    log("bench: machine", json.dumps(r["machine"]))
    r["startup"] = startup(args.repeat)
    st = r["startup"]
    log(f"bench: start-up: gpu-idle --version {st['version']['wall_s']:.3f} s"
        + (f", gpu-idle run (2-kernel export) {st['tiny']['wall_s']:.3f} s" if "tiny" in st else ""))
    exe = env = None
    if not args.skip_nsys_ai:
        exe, env = nsysai_setup()
    r["scale"], r["nsysai"] = {}, {}
    for name in [s for s in args.sizes.split(",") if s]:
        kernels = SIZES[name]
        path, gen = ensure_report(os.path.join(DATA, f"scale-{name}.sqlite"), gpus=GPUS, kernels=kernels, seed=0,
                                  device_per_rank=True)
        log(f"bench: {name}: {path} ({mib(os.path.getsize(path))})" + (f", generated in {gen:.1f} s" if gen else ""))
        m = scale_rounds(path, args.repeat)
        fl, e2e, ip = m["floor"], m["e2e"], m["inproc"]
        s = {"kernels": kernels, "bytes": os.path.getsize(path), "generate_s": gen, **m,
             "e2e_ratio": e2e["wall_s"] / fl["wall_s"], "warm_ratio": m["warm"]["wall_s"] / fl["wall_s"],
             "stages_ratio": ip["stages_s"] / fl["wall_s"], "reader_ratio": m["reader"]["wall_s"] / fl["wall_s"],
             "text_floor_ratio": m["text_floor"]["wall_s"] / fl["wall_s"],
             "e2e_ns_per_kernel": 1e9 * e2e["wall_s"] / kernels, "stages_ns_per_kernel": 1e9 * ip["stages_s"] / kernels}
        s["dask"] = [ln.split(", dashboard")[0].strip() for ln in e2e["stdout"].splitlines()
                     if ln.startswith("dask:")][:1]
        for k in ("floor", "text_floor", "reader", "e2e", "warm"):
            s[k] = {x: v for x, v in s[k].items() if x not in ("stdout", "stderr")}
        r["scale"][name] = s
        log(f"bench: {name}: decode floor {fl['wall_s']:.2f} s (text floor {m['text_floor']['wall_s']:.2f} s, "
            f"reader {m['reader']['wall_s']:.2f} s) | gpu-idle run {e2e['wall_s']:.2f} s ({s['e2e_ratio']:.2f}x, "
            f"{s['e2e_ns_per_kernel']:.0f} ns/kernel, tree RSS {mib(e2e['tree_rss'])}), cached {m['warm']['wall_s']:.2f} s"
            f" | load {ip['load_s']:.2f} s + analysis {ip['analyse_s']:.2f} s = {ip['stages_s']:.2f} s "
            f"({s['stages_ratio']:.2f}x, RSS {mib(ip['maxrss'])})")
        if ip.get("decoded"):
            log("\n".join(decoded_lines(ip["decoded"], f"bench: {name}")))
        if exe and kernels <= NSYSAI_MAX_KERNELS:
            ns = nsysai_report(exe, env, path, range(GPUS))
            v = {"kernels": kernels, "cold": ns["cold"], "warm": ns["warm"], "ours_e2e_s": e2e["wall_s"],
                 "ours_stages_s": ip["stages_s"], "speedup_cold_e2e": ns["cold"]["sum_s"] / e2e["wall_s"],
                 "speedup_warm_e2e": ns["warm"]["sum_s"] / e2e["wall_s"], "direct": ns["direct"],
                 "speedup_direct_e2e": ns["direct"]["sum_s"] / e2e["wall_s"],
                 "speedup_cold_stages": ns["cold"]["sum_s"] / ip["stages_s"],
                 "diffs": [d for p in ("cold", "warm", "direct") for d in compare_totals(ip["span"], ns[p]["summaries"])]}
            r["nsysai"][name] = v
            log(f"bench: {name}: nsys-ai per-GPU sum cold {ns['cold']['sum_s']:.2f} s, warm {ns['warm']['sum_s']:.2f} s,"
                f" direct {ns['direct']['sum_s']:.2f} s;"
                f" ours {e2e['wall_s']:.2f} s -> {v['speedup_cold_e2e']:.2f}x (cold) / {v['speedup_warm_e2e']:.2f}x "
                f"(warm); totals {'identical' if not v['diffs'] else v['diffs'][:4]}")
    if exe:
        path, _ = ensure_report(os.path.join(DATA, "device0-100k.sqlite"), gpus=GPUS, kernels=100_000, seed=0)
        theirs = nsysai_summary(check(measure([exe, "skill", "run", "gpu_idle_gaps", path, "--format", "json",
                                               "-p", "device=0"], env=env), "nsys-ai device 0")["stdout"])
        for leftover in (".nsys-cache", ".nsys-cache.build.lock"):
            shutil.rmtree(os.path.splitext(path)[0] + leftover, ignore_errors=True)
            if os.path.isfile(os.path.splitext(path)[0] + leftover):
                os.unlink(os.path.splitext(path)[0] + leftover)
        span = [g["windows"]["span"]["expected"] for g in read_truth(path)["gpus"]]
        r["nsysai_device0"] = {"theirs": theirs, "ours_gap_count": sum(e["gap_count"] for e in span),
                               "ours_gap_ms": sum(e["gap_total_ns"] for e in span) / 1e6,
                               "ours_idle_ms": sum(e["idle_ns"] for e in span) / 1e6}
        log(f"bench: device-0 report: nsys-ai device 0 -> {theirs.get('gap_count')} gaps "
            f"{theirs.get('total_idle_ms')} ms; ours {r['nsysai_device0']['ours_gap_count']} gaps")
    prof_size = next((k for k in ("3M", "1M") if k in r["scale"]), None)
    if not args.skip_profile and prof_size:
        r["profile_txt"] = os.path.join(HERE, f"profile-{prof_size}.txt")
        r["profile_size"] = prof_size
        r["profile"] = profile_stage(os.path.join(DATA, f"scale-{prof_size}.sqlite"), r["profile_txt"])
        log(f"bench: cProfile ({prof_size}): {json.dumps(r['profile'])} -> {r['profile_txt']}")
    if args.fleet:
        r["fleet"] = fleet(args.fleet, args.repeat)
        f = r["fleet"]
        log(f"bench: fleet {args.fleet}: workers 1 {f['workers1']['wall_s']:.1f} s, workers 2 "
            f"{f['workers2']['wall_s']:.1f} s ({f['workers1']['wall_s'] / f['workers2']['wall_s']:.2f}x); "
            f"unchanged rerun {f['rerun']['wall_s']:.1f} s" + (f"; sweep {f['sweep']['wall_s']:.1f} s, unchanged "
                                                                f"sweep rerun {f['sweep_rerun']['wall_s']:.1f} s"
                                                                if "sweep_rerun" in f else "")
            + (f", next night {f['sweep_next_night']['wall_s']:.1f} s" if "sweep_next_night" in f else ""))
        if "ceiling" in f:
            log(f"bench: ceiling without Dask: one process {f['ceiling']['one_s']:.1f} s, two at once "
                f"{f['ceiling']['two_s']:.1f} s ({f['ceiling']['ratio']:.2f}x)")
        for k in ("workers1", "workers2", "rerun", "sweep", "sweep_rerun", "sweep_next_night"):
            if k not in f:
                continue
            f[k] = {x: v for x, v in f[k].items() if x not in ("stdout", "stderr")}
    if args.fleet_small:
        r["fleet_small"] = fs = fleet_small(args.fleet_small, args.repeat)
        log(f"bench: {fs['reports']} small reports: gpu-idle run --workers 2 {fs['run']['wall_s']:.1f} s, two plain "
            f"processes {fs['ceiling_two_s']:.1f} s ({fs['ratio']:.2f}x; {fs['overhead_ms']:.1f} ms per report)")
    paths = []
    if os.path.exists(os.path.join(DATA, "scale-1M.sqlite")) and "1M" in r["scale"]:
        paths.append(os.path.join(DATA, "scale-1M.sqlite"))
    if args.fleet:
        paths += [os.path.join(DATA, f"fleet{args.fleet}", f"job{i:03d}.sqlite") for i in range(args.fleet)]
    if paths:
        r["accuracy"] = acc = accuracy(paths)
        log("bench: accuracy (planted):", json.dumps(acc["planted"]), "launch:", json.dumps(acc["launch"]))
    r["elapsed_s"] = time.perf_counter() - started
    r["loadavg_end"] = os.getloadavg()
    previous = os.path.join(DATA, "results.json")
    if args.update and os.path.exists(previous):
        with open(previous, encoding="utf-8") as fh:
            old = json.load(fh)
        la = "/".join(f"{x:.1f}" for x in old.get("loadavg_start", ()))
        theirs = (f"the run of {old.get('finished')} (code at `{old.get('machine', {}).get('git', '?')}`), which "
                  f"started at load average {la}")
        r["sources"] = {}   # section -> the run it was measured in, kept through later updates
        for key in ("startup", "scale", "nsysai", "nsysai_device0", "profile", "profile_txt", "profile_size", "fleet",
                    "fleet_small", "accuracy"):
            if not r.get(key) and old.get(key):
                r[key] = old[key]
                r["sources"][key] = old.get("sources", {}).get(key, theirs)
        names = {"startup": "start-up (0)", "scale": "scale (1)", "profile": "the profile (1)", "nsysai": "nsys-ai (2)",
                 "fleet": "fleet (3)", "fleet_small": "small fleet (3b)", "accuracy": "accuracy (4)"}
        by_source: dict = {}
        for key, source in r["sources"].items():
            if key in names:
                by_source.setdefault(source, []).append(names[key])
        r["updated"] = "; ".join(f"{', '.join(v)} from {src}" for src, v in by_source.items()) + "; the rest from this run"
    r["finished"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    full = ({s for s in args.sizes.split(",") if s} == set(SIZES) and args.fleet == 200 and args.repeat >= 3
            and args.fleet_small == 2000 and not args.skip_nsys_ai)
    # A quick look (fewer sizes, a small fleet, one round) must not replace the committed figures:
    # it goes to bench/data unless --update merges it into the last full run.
    partial = not (full or args.update)
    stem = "results-partial" if partial else "results"
    with open(os.path.join(DATA, f"{stem}.json"), "w", encoding="utf-8") as fh:
        json.dump(r, fh, indent=1, default=str)
    out = os.path.join(DATA, "RESULTS-partial.md") if partial else RESULTS
    log("\n" + write_results(r, out))
    if partial:
        log(f"bench: a partial run: figures in {out}; {RESULTS} keeps the last full run's "
            "(all sizes, nsys-ai, --fleet 200, --fleet-small 2000, --repeat 3; or add --update to merge this run "
            "into it)")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_reader":
        reader_stage(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 3 and sys.argv[1] == "_inproc":
        inproc_stage(sys.argv[2])
        sys.exit(0)
    if len(sys.argv) == 5 and sys.argv[1] == "_fleet_part":
        fleet_part_stage(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    sys.exit(main())
