#!/usr/bin/env python3
"""The quick performance guard (issue 44): ``make bench-quick``, also printed at the end of ``make check``.

In well under 30 s on an idle machine:

* a generated 8-GPU export of 400k kernels (``pipeline.synth.generate_scaled_report(gpus=8,
  kernels=400_000, seed=7)``, as ``gpu-idle synth --gpus 8 --kernels 400000 --seed 7``; made once and
  cached in ``bench/data/``): ``gpu-idle run FILE --out DIR`` with an empty columnar cache (spawn to exit,
  default options, as ``make bench``) and the load + analysis stages in a fresh interpreter;
* each export of ``../shared/profiles`` (``$GPU_IDLE_PROFILES``): ``gpu-idle run FILE --out DIR``, summed;

each divided by the decode floor of the same files measured in the same run, before and after (the
faster kept): ``bench/run.py``'s floor, one ``sqlite3 -readonly`` process computing ``total()`` over every
column the loader reads; without the sqlite3 CLI, Python's ``sqlite3`` module running the same SQL in a
process of its own (said in the output: a slower floor, so the ratios are lower and not compared with
figures recorded on the CLI's floor). Peak RSS of every run.

It prints each figure, then a ``MISSED`` line for a target of ``make bench`` this run can judge (peak RSS:
the 3M-kernel bound holds for any smaller export) and a ``1.5x WORSE`` line for a figure 1.5 times the last
one recorded in ``bench/RESULTS.md`` (its "Quick guard" section, written by ``--record``: ``make bench``
records one at its end). The times of a loaded machine are noisy: the ratios, measured side by side, much
less so. Exit status 0 whatever the figures (``--strict``: 1 when a line says MISSED or 1.5x WORSE).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402  (bench/run.py: the floor's SQL, the measuring launcher, the cached reports)

KERNELS = 400_000
SEED = 7
REPORT = os.path.join(run.DATA, "quick-400k.sqlite")
#: A figure this many times the recorded one is printed as worse.
WORSE = 1.5
#: The targets of ``make bench`` (issue 44), in bench/run.py's :func:`run.targets`.
RSS_TARGET = run.RSS_TARGET
#: The section of bench/RESULTS.md that holds the last recorded figures, and its machine-readable line.
SECTION = "## Quick guard (`make bench-quick`, issue 44)"
RECORD = re.compile(r"<!-- bench-quick (\{.*?\}) -->")

#: What each figure is, in the order printed: key -> (words, is a ratio).
FIGURES = {
    "gen_run_ratio": ("400k kernels: `gpu-idle run` (empty caches) / decode floor", True),
    "gen_stages_ratio": ("400k kernels: load + analysis in process / decode floor", True),
    "shared_run_ratio": ("shared exports: `gpu-idle run` per export, summed / their decode floors", True),
    "gen_run_rss": ("400k kernels: peak RSS of `gpu-idle run`", False),
    "gen_stages_rss": ("400k kernels: peak RSS of load + analysis in process", False),
    "shared_run_rss": ("shared exports: largest peak RSS of `gpu-idle run`", False),
}

#: The Python fallback of the floor (no sqlite3 CLI): the same SQL, every row fetched, in a process of its own.
PY_FLOOR = ("import sqlite3, sys\n"
            "con = sqlite3.connect('file:' + sys.argv[1] + '?mode=ro', uri=True)\n"
            "for statement in sys.argv[2].split(';'):\n"
            "    if statement.strip():\n"
            "        con.execute(statement).fetchall()\n")


def floor_kind() -> str:
    return "sqlite3 CLI" if shutil.which("sqlite3") else "python sqlite3 module"


def floor(path: str) -> float:
    """Seconds of one decode-floor process over ``path`` (:func:`floor_kind` says which)."""
    sql = run.floor_sql(path, decode=True)
    cmd = (["sqlite3", "-readonly", path, sql] if shutil.which("sqlite3")
           else [sys.executable, "-S", "-c", PY_FLOOR, os.path.abspath(path), sql])
    return run.check(run.measure(cmd), f"decode floor {path}")["wall_s"]


def gpu_idle_run(path: str) -> dict:
    """``gpu-idle run path --out DIR`` with a fresh columnar cache: ``{"wall_s", "rss"}`` (tree peak)."""
    gpu_idle = os.path.join(os.path.dirname(sys.executable), "gpu-idle")
    scratch = tempfile.mkdtemp(prefix="gpu-idle-quick-", dir=run.DATA)
    try:
        m = run.check(run.measure([gpu_idle, "run", path, "--out", os.path.join(scratch, "out")],
                                  env=run.gpu_idle_env(os.path.join(scratch, "cache"))), f"gpu-idle run {path}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"wall_s": m["wall_s"], "rss": m["tree_rss"]}


def stages_child(path: str) -> None:
    """(Child process) load_report + the report's analysis as ``gpu-idle run`` does it in its process
    (``run.analysed_in_process``) with the default config, timed; prints JSON."""
    import resource

    import pipeline.runs.driver  # noqa: F401 - imported before the clock starts (run.analysed_in_process)
    import pipeline.work.tasks  # noqa: F401
    from pipeline.config import load_config
    from pipeline.load.report import load_report
    from pipeline.load.sqlite import decoded

    cfg = load_config([])
    labels = cfg.labels_for(path)
    run.imports_frozen()
    t0 = time.perf_counter()
    report = load_report(path)
    run.analysed_in_process(report, cfg, labels)
    took = time.perf_counter() - t0
    print(json.dumps({"stages_s": took, "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "decoded": run.held_and_decoded(path, decoded())}))


def stages(path: str) -> dict:
    m = run.check(run.measure([sys.executable, os.path.abspath(__file__), "_stages", path]), f"in-process {path}")
    return json.loads(m["stdout"].strip().splitlines()[-1])


def measure_all() -> dict:
    """Every figure of :data:`FIGURES`, with the seconds behind the ratios."""
    os.makedirs(run.DATA, exist_ok=True)
    path, made = run.ensure_report(REPORT, gpus=8, kernels=KERNELS, seed=SEED)
    shared = sorted(glob.glob(os.path.join(run.PROFILES, "*.sqlite")))
    floors = {p: floor(p) for p in [path, *shared]}
    gen, st = gpu_idle_run(path), stages(path)
    theirs = [gpu_idle_run(p) for p in shared]
    for p in floors:  # again after ours, the faster kept: load from elsewhere hits both alike
        floors[p] = min(floors[p], floor(p))
    shared_floor = sum(floors[p] for p in shared)
    shared_run = sum(t["wall_s"] for t in theirs)
    out = {"gen_floor_s": floors[path], "gen_run_s": gen["wall_s"], "gen_stages_s": st["stages_s"],
           "gen_run_ratio": gen["wall_s"] / floors[path], "gen_stages_ratio": st["stages_s"] / floors[path],
           "gen_run_rss": gen["rss"], "gen_stages_rss": st["rss"], "generated_s": made, "decoded": st["decoded"],
           "shared_files": [os.path.basename(p) for p in shared]}
    if shared:
        out.update(shared_floor_s=shared_floor, shared_run_s=shared_run, shared_run_ratio=shared_run / shared_floor,
                   shared_run_rss=max(t["rss"] for t in theirs))
    return out


def recorded_in(text: str) -> dict | None:
    """The figures recorded in ``text`` (bench/RESULTS.md; :data:`RECORD`), or None."""
    found = RECORD.search(text)
    return json.loads(found.group(1)) if found else None


def recorded(path: str = run.RESULTS) -> dict | None:
    """The last figures recorded in ``path``, or None."""
    try:
        with open(path, encoding="utf-8") as fh:
            return recorded_in(fh.read())
    except OSError:
        return None


def value(key: str, figures: dict) -> str:
    v = figures[key]
    return f"{v:.2f}x" if FIGURES[key][1] else run.mib(v)


def seconds_behind(key: str, f: dict) -> str:
    """The seconds a ratio of ``f`` divides (``" (4.10 s vs 0.41 s)"``), else ``""``."""
    pairs = {"gen_run_ratio": ("gen_run_s", "gen_floor_s"), "gen_stages_ratio": ("gen_stages_s", "gen_floor_s"),
             "shared_run_ratio": ("shared_run_s", "shared_floor_s")}
    if key not in pairs or not all(k in f for k in pairs[key]):
        return ""
    ours, theirs = pairs[key]
    return f" ({f[ours]:.2f} s vs {f[theirs]:.3f} s)"


def verdicts(now: dict, last: dict | None) -> list[str]:
    """The MISSED and 1.5x WORSE lines of ``now`` against the targets and ``last`` (recorded)."""
    lines = []
    for key in ("gen_run_rss", "shared_run_rss"):
        if key in now and now[key] > RSS_TARGET:
            lines.append(f"MISSED: {FIGURES[key][0]} {value(key, now)} > {RSS_TARGET / 1e6:.0f} MB "
                         "(make bench's bound at 3M kernels)")
    if last and last.get("floor") == now["floor"]:
        for key in FIGURES:
            if key in now and key in last["figures"] and now[key] > WORSE * last["figures"][key]:
                lines.append(f"{WORSE}x WORSE: {FIGURES[key][0]} {value(key, now)} vs {value(key, last['figures'])} "
                             f"recorded {last['recorded']}")
    return lines


def report_lines(now: dict, last: dict | None) -> list[str]:
    out = [f"bench-quick (issue 44): decode floor by the {now['floor']}"
           + ("" if now["floor"] == "sqlite3 CLI" else " (no sqlite3 CLI here: a slower floor, ratios not "
              "comparable with make bench's)")
           + f"; load average {'/'.join(f'{x:.1f}' for x in now['loadavg'])} at the start"]
    for key, (words, _) in FIGURES.items():
        if key not in now:
            continue
        was = (f"; recorded {value(key, last['figures'])}" if last and last.get("floor") == now["floor"]
               and key in last["figures"] else "")
        out.append(f"  {words}: {value(key, now)}{seconds_behind(key, now)}{was}")
    if now.get("decoded"):
        out += run.decoded_lines(now["decoded"], f"{KERNELS // 1000}k kernels")
    if not last:
        out.append("  nothing recorded in bench/RESULTS.md to compare with (bench/quick.py --record)")
    elif last.get("floor") != now["floor"]:
        out.append(f"  recorded figures use the {last.get('floor')} floor: not compared")
    else:
        out.append(f"  recorded: {last['recorded']}, code at {last.get('code', '?')}")
    out.append(f"  targets at 2M and 3M kernels (make bench): whole run <= {run.E2E_TARGET}x the floor, load + "
               f"analysis <= {run.STAGES_TARGET}x, peak RSS <= {RSS_TARGET / 1e6:.0f} MB")
    found = verdicts(now, last)
    out += ["  " + line for line in found] or ["  ok: no target missed, no figure 1.5x worse than recorded"]
    return out


def section(now: dict) -> str:
    """The "Quick guard" section of bench/RESULTS.md holding ``now``."""
    keep = {"recorded": now["recorded"], "code": now["code"], "floor": now["floor"],
            "figures": {k: now[k] for k in FIGURES if k in now}}
    rows = [f"| {words} | {value(key, now)}{seconds_behind(key, now)} |" for key, (words, _) in FIGURES.items()
            if key in now]
    return "\n".join([
        SECTION, "",
        f"Recorded by `bench/quick.py --record` ({now['recorded']}, code at `{now['code']}`, load average "
        f"{'/'.join(f'{x:.1f}' for x in now['loadavg'])} at the start; decode floor by the {now['floor']}). "
        f"`make bench-quick` (and the end of `make check`) measures these again: a generated 8-GPU export of "
        f"{KERNELS:,} kernels (seed {SEED}) and the exports of `../shared/profiles` "
        f"({', '.join(now.get('shared_files', [])) or 'none'}), one run each, every ratio to the decode floor of "
        f"the same files measured in the same run; it prints `{WORSE}x WORSE` for a figure {WORSE} times the one "
        "below and `MISSED` for a peak RSS above the 3M-kernel target.", "",
        f"<!-- bench-quick {json.dumps(keep, sort_keys=True)} -->", "",
        "| figure | value |", "|---|---|", *rows, ""])


def with_section(text: str, block: str) -> str:
    """``text`` (bench/RESULTS.md) with its quick-guard section replaced by ``block`` (appended when absent)."""
    start = text.find(SECTION)
    if start < 0:
        return text.rstrip("\n") + "\n\n" + block
    end = text.find("\n## ", start + len(SECTION))
    return text[:start] + block + (text[end + 1:] if end >= 0 else "")


def quick_section(text: str) -> str | None:
    """The quick-guard section of ``text`` (bench/RESULTS.md), for bench/run.py to keep when it rewrites the file."""
    start = text.find(SECTION)
    if start < 0:
        return None
    end = text.find("\n## ", start + len(SECTION))
    return text[start:end + 1] if end >= 0 else text[start:]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", action="store_true", help="write this run's figures into bench/RESULTS.md")
    ap.add_argument("--strict", action="store_true", help="exit 1 when a line says MISSED or 1.5x WORSE")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    now = {"loadavg": os.getloadavg(), "floor": floor_kind(),
           "recorded": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "code": subprocess.run(["git", "-C", run.ROOT, "describe", "--always", "--dirty"], capture_output=True,
                                  text=True).stdout.strip() or "?"}
    if not os.path.exists(REPORT):
        print(f"bench-quick: generating {REPORT} ({KERNELS:,} kernels, once)", flush=True)
    now.update(measure_all())
    last = recorded()
    lines = report_lines(now, last)
    lines.append(f"  ({time.perf_counter() - started:.1f} s)")
    print("\n".join(lines), flush=True)
    if args.record:
        with open(run.RESULTS, encoding="utf-8") as fh:
            text = fh.read()
        with open(run.RESULTS, "w", encoding="utf-8") as fh:
            fh.write(with_section(text, section(now)))
        print(f"bench-quick: recorded in {run.RESULTS}")
    return 1 if args.strict and verdicts(now, last) else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "_stages":
        stages_child(sys.argv[2])
        sys.exit(0)
    sys.exit(main())
