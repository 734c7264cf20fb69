"""How the `gpu-idle` process ends (pipeline.cli.end_process): the exit status and every byte of
output survive; the interpreter's teardown is skipped only when no other thread runs."""
from __future__ import annotations

import subprocess
import sys

from conftest import REPO

PROBE = """
import atexit, sys, threading, time
from pipeline.cli import end_process
atexit.register(lambda: print("teardown ran", flush=True))
print("last line, no newline", end="")
print("to stderr", file=sys.stderr, end="")
if {thread}:
    threading.Thread(target=time.sleep, args=(0.2,)).start()
end_process({code!r})
"""


def probe(code, thread=False) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE.format(code=code, thread=thread)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_only_thread_left_exits_at_once_with_everything_flushed():
    proc = probe(3)
    assert proc.returncode == 3
    assert proc.stdout == "last line, no newline"   # flushed, and no teardown (atexit) ran
    assert proc.stderr == "to stderr"


def test_other_threads_running_get_a_normal_exit():
    proc = probe(4, thread=True)
    assert proc.returncode == 4
    assert proc.stdout == "last line, no newline" + "teardown ran\n"


def test_exit_codes_follow_system_exit():
    assert probe(None).returncode == 0
    proc = probe("no reports found")
    assert proc.returncode == 1 and proc.stderr.endswith("no reports found\n")


def test_the_command_exits_with_its_status_and_full_output(tmp_path):
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"not a database" * 10)
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", str(bad), "--out", str(tmp_path / "o"),
                           "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout.rstrip().endswith("medical record(s) in " + str(tmp_path / "o") + "/records/")
    assert "0 GPU(s) in the fleet table, 1 report(s) failed" in proc.stdout
    out = tmp_path / "o"
    wrote = next(line for line in proc.stdout.splitlines() if line.startswith("wrote "))
    assert all(f"{out / name}" in wrote for name in ("fleet.csv", "fleet.parquet", "jobs.csv", "clusters.csv",
                                                     "fix_first.csv", "fix_first.json"))


def test_a_reader_that_goes_away_does_not_stop_the_run(tmp_path):
    """`gpu-idle run ... | head -1`: the pipe closes after the first line; the run still writes
    every output file and exits with its own status (0 here), not click's broken-pipe 1."""
    from pipeline.synth import generate_training_report

    report = tmp_path / "one.sqlite"
    generate_training_report(str(report), gpus=2, iterations=4, seed=5)
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "pipeline.cli", "run", str(report), "--out", str(out),
                             "--no-cache"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()   # like head -1: later writes meet a pipe without a reader
    assert proc.wait(timeout=120) == 0, proc.stderr.read().decode()
    assert first.startswith(b"gpu-idle: 1 report(s) found")
    assert (out / "fleet.csv").exists() and (out / "records").is_dir() and len(list((out / "gpus").iterdir())) == 2


OFFLOADED = """
import atexit, time
from distributed.utils import _offload_executor
from pipeline.cli import end_process
atexit.register(lambda: print("teardown ran", flush=True))
_offload_executor.submit(lambda: (time.sleep(0.3), print("offloaded work done", end="", flush=True)))
end_process(5)
"""


def test_dask_offload_thread_left_by_a_cluster_run_ends_first_and_its_work_is_kept():
    """After a run on a cluster, Dask's offload thread (distributed.utils' one-thread executor) is still there:
    end_process waits for what it has, ends it, and exits without the interpreter's teardown (~0.35 s of CPU
    after a 200-report run), as when no other thread was ever started."""
    proc = subprocess.run([sys.executable, "-c", OFFLOADED], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "offloaded work done"   # waited for, and no teardown ran


def test_dask_offload_thread_beside_another_thread_keeps_the_normal_exit():
    """Another thread still running (a client's event loop, here a plain one): the normal exit, teardown and all,
    with Dask's offload thread left as it was."""
    probe = OFFLOADED.replace("end_process(5)",
                              "import threading; threading.Thread(target=time.sleep, args=(0.5,)).start()\nend_process(5)")
    proc = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 5, proc.stderr
    assert proc.stdout == "offloaded work done" + "teardown ran\n"
