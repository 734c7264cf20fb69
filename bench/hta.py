"""Issue 15's peer comparison: gpu-idle against HTA 0.5.0 on every PyTorch profiler trace in ../shared/kineto.

HTA (Meta's HolisticTraceAnalysis, ``holistictraceanalysis==0.5.0`` from PyPI) runs in its own virtual
environment, ``bench/.venv-hta`` (created on first use, as ``bench/run.py`` does for nsys-ai), one
process per trace: ``TraceAnalysis(trace_dir=D).get_temporal_breakdown(visualize=False)`` on a folder
holding that one trace. For each trace the script records

* HTA's idle per rank (its ``idle_time(us)``) beside ours (``gpu-idle run FILE --window span``:
  ``idle_ns``), and explains the difference step by step: starting from our exact figure it applies
  HTA's conventions one at a time (copies count as busy; only GPU events launched by a CPU call before
  the last ``ProfilerStep`` starts are kept; HTA's float timestamps, rounded inward to whole µs) with
  a small computation of its own on the JSON (stdlib ``json``), and shows that the last step lands on
  HTA's number;
* time per trace, whole process (HTA: its venv's python running the analysis; ours: ``python -m
  pipeline.cli run FILE --window span --no-cache``) and in process (HTA: ``TraceAnalysis`` +
  ``get_temporal_breakdown``; ours: ``load_kineto`` + ``gpu_trace`` + ``analyse_gpu``), best of
  ``--repeat`` runs.

Writes ``bench/RESULTS-hta.md`` (``--out``) and prints it. Needs PyPI for the first run only.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from decimal import ROUND_HALF_EVEN, Decimal

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
HTA_VERSION = "0.5.0"
HTA_VENV = os.path.join(HERE, ".venv-hta")
KINETO = os.path.join(os.path.dirname(REPO), "shared", "kineto")

#: Run inside HTA's venv: times and the temporal breakdown as JSON on the last line of stdout.
HTA_SCRIPT = """
import json, sys, time
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
t1 = time.perf_counter()
analysis = TraceAnalysis(trace_dir=sys.argv[1])
t2 = time.perf_counter()
df = analysis.get_temporal_breakdown(visualize=False)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "load_s": t2 - t1, "analysis_s": t3 - t2,
                  "rows": json.loads(df.to_json(orient="records"))}))
"""


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def hta_python() -> str:
    """bench/.venv-hta's python, HTA installed in it (created on first use)."""
    py = os.path.join(HTA_VENV, "bin", "python")
    if not os.path.exists(py):
        log(f"bench: installing holistictraceanalysis=={HTA_VERSION} into {HTA_VENV}")
        subprocess.run([sys.executable, "-m", "venv", HTA_VENV], check=True)
        subprocess.run([py, "-m", "pip", "install", "--quiet", f"holistictraceanalysis=={HTA_VERSION}"], check=True)
    return py


def run_hta(py: str, trace: str) -> dict:
    """HTA on a folder holding only ``trace``: its JSON plus ``wall_s``, the whole process."""
    with tempfile.TemporaryDirectory(prefix="hta-") as folder:
        os.symlink(trace, os.path.join(folder, os.path.basename(trace)))
        t0 = time.perf_counter()
        proc = subprocess.run([py, "-c", HTA_SCRIPT, folder], check=False, capture_output=True, text=True, cwd=folder)
        wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = wall
    return out


def run_ours(trace: str) -> dict:
    """Our span-window row of the trace's GPU and the in-process time of load + analysis."""
    from pipeline.analysis.analyse import analyse_gpu
    from pipeline.config import Config
    from pipeline.load.kineto import load_kineto
    from pipeline.load.report import gpu_trace

    cfg = Config()
    cfg = dataclasses.replace(cfg, analysis=dataclasses.replace(cfg.analysis, window="span"))
    t0 = time.perf_counter()
    report = load_kineto(trace)
    rows = [analyse_gpu(gpu_trace(report, key), cfg, {}).row for key in report.gpu_keys()]
    return {"in_process_s": time.perf_counter() - t0, "rows": rows}


def ours_wall(trace: str) -> float:
    with tempfile.TemporaryDirectory(prefix="gpu-idle-") as out:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pipeline.cli", "run", trace, "--out", out, "--window", "span",
                        "--no-cache"], check=True, capture_output=True, cwd=REPO)
        return time.perf_counter() - t0


# -- HTA's conventions, one at a time, on the JSON -----------------------------------------------

def _ns(value) -> int:
    return int((Decimal(value) * 1000).to_integral_value(ROUND_HALF_EVEN))


def conventions(trace: str) -> list[tuple[str, int]]:
    """Idle (ns) of the trace's GPU after each of HTA's conventions, cumulatively: ``[(step, idle)]``.

    0. ours: span of the kernels, idle = span - union of kernels, exact ns;
    1. copies (gpu_memcpy, gpu_memset) count as busy: span and union over kernels and copies;
    2. only GPU events whose correlation id is that of a CPU event starting before the last
       ``ProfilerStep`` (HTA's ``include_last_profiler_step=False``, when the trace has two or more
       ProfilerStep names): the last step and GPU events without a CPU launch event are dropped;
    3. HTA's time arithmetic: a float ``ts`` is read as float64 and the event rounded inward to whole µs
       (``ts`` up, ``ts + dur`` down); integer ``ts`` stay, ends are ``ts + dur`` in float µs.
    """
    with (gzip.open(trace) if trace.endswith(".gz") else open(trace, "rb")) as fh:
        text = fh.read()
    exact = json.loads(text, parse_float=Decimal, parse_int=Decimal)["traceEvents"]
    floats = json.loads(text)["traceEvents"]
    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}

    def stream(e) -> int:
        return int((e.get("args") or {}).get("stream", -1)) if isinstance((e.get("args") or {}).get("stream", -1),
                                                                          (int, Decimal)) else -1

    def idle(intervals) -> float:
        intervals = sorted(intervals)
        if not intervals:
            return 0
        busy, reach, first = 0, None, intervals[0][0]
        last = max(e for _, e in intervals)
        for s, e in intervals:
            if reach is None or s > reach:
                busy += e - s
                reach = e
            elif e > reach:
                busy += e - reach
                reach = e
        return (last - first) - busy

    def gpu(events, cats):
        return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats and stream(e) >= 0]

    def kept(events):
        steps = {e.get("name") for e in events if "ProfilerStep" in str(e.get("name", ""))}
        if len(steps) < 2:
            return gpu(events, gpu_cats)
        cpu = [e for e in events if e.get("ph") == "X" and stream(e) < 0]
        last_start = max(e["ts"] for e in cpu if "ProfilerStep" in str(e.get("name", "")))
        launched = {(e.get("args") or {}).get("correlation") for e in cpu if e["ts"] < last_start}
        return [e for e in gpu(events, gpu_cats) if (e.get("args") or {}).get("correlation") in launched]

    steps = [("ours (exact ns, kernels only)", idle((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
                                                    for e in gpu(exact, {"kernel"})))]
    steps.append(("+ copies count as busy", idle((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
                                                 for e in gpu(exact, gpu_cats))))
    steps.append(("+ last ProfilerStep and unlaunched GPU events dropped",
                  idle((_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in kept(exact))))

    def hta_times(e) -> tuple[float, float]:
        if isinstance(e["ts"], float):
            return math.ceil(e["ts"]), math.floor(e["ts"] + e["dur"])
        return e["ts"], e["ts"] + e["dur"]

    steps.append(("+ float µs rounded inward (HTA)", round(idle(hta_times(e) for e in kept(floats)) * 1000)))
    return steps


def fmt_ms(ns) -> str:
    return f"{ns / 1e6:,.3f}"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=KINETO, help="folder of .json.gz traces (default ../shared/kineto)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (best kept)")
    parser.add_argument("--out", default=os.path.join(HERE, "RESULTS-hta.md"))
    args = parser.parse_args(argv)
    py = hta_python()
    traces = sorted(os.path.join(args.traces, n) for n in os.listdir(args.traces) if n.endswith((".json", ".json.gz")))
    lines = [f"# gpu-idle vs HTA {HTA_VERSION} on PyTorch profiler traces", "",
             f"Machine: {os.cpu_count()} CPUs; best of {args.repeat} runs. `python bench/hta.py` (issue 15). HTA: "
             "`TraceAnalysis(trace_dir=D).get_temporal_breakdown(visualize=False)`, one trace per folder, in "
             "`bench/.venv-hta`. Ours: `--window span` (the whole span of the GPU's kernels).", "",
             "## Idle per rank", "",
             "| trace | ours idle ms | HTA idle ms | ours under HTA's conventions, step by step (ms) | = HTA? |",
             "|---|---|---|---|---|"]
    run_ours(min(traces, key=os.path.getsize))  # imports and first-call costs out of the timings
    timing = ["", "## Time per trace (s)", "",
              "| trace | HTA whole process | ours whole process | speed-up | HTA load + analysis in process | "
              "ours load + analysis in process | speed-up |", "|---|---|---|---|---|---|---|"]
    for trace in traces:
        name = os.path.basename(trace)
        log(f"bench: {name}")
        hta = [run_hta(py, trace) for _ in range(args.repeat)]
        if any("error" in h for h in hta):
            lines.append(f"| `{name}` | | HTA failed: {next(h['error'] for h in hta if 'error' in h)} | | |")
            continue
        ours = [run_ours(trace) for _ in range(args.repeat)]
        walls = [ours_wall(trace) for _ in range(args.repeat)]
        ours_idle = ours[0]["rows"][0]["idle_ns"]
        hta_idle = round(hta[0]["rows"][0]["idle_time(us)"] * 1000)
        steps = conventions(trace)
        assert steps[0][1] == ours_idle, (name, steps[0], ours_idle)
        chain = "; ".join(f"{label}: {fmt_ms(v)}" for label, v in steps[1:])
        lines.append(f"| `{name}` | {fmt_ms(ours_idle)} | {fmt_ms(hta_idle)} | {chain} | "
                     f"{'yes' if steps[-1][1] == hta_idle else f'no ({fmt_ms(steps[-1][1] - hta_idle)} apart)'} |")
        h_wall = min(h["wall_s"] for h in hta)
        h_in = min(h["load_s"] + h["analysis_s"] for h in hta)
        o_wall, o_in = min(walls), min(o["in_process_s"] for o in ours)
        timing.append(f"| `{name}` | {h_wall:.2f} | {o_wall:.2f} | {h_wall / o_wall:.1f}x | {h_in:.3f} | {o_in:.3f} | "
                      f"{h_in / o_in:.1f}x |")
    text = "\n".join(lines + timing + [
        "", "HTA's whole process includes importing HTA (about 2 s of its time); ours includes starting "
        "`gpu-idle run` (Dask not started: one report is analysed in process) and writing its outputs.", ""])
    with open(args.out, "w", encoding="utf-8") as fh:
        fh.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
