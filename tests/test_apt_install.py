"""scripts/apt_install.sh, which `make chromium`, `make slurm` and `make bench` install system packages
with (issue 25, point 6): it says first what it installs and that this needs root, and waits for an
apt/dpkg lock another process holds (bounded) instead of failing.

The script runs as a real process; ``apt-get`` and ``id`` are stand-ins on its PATH (the real ones
would change the machine, and this machine's apt is shared): ``apt-get`` records its arguments and
answers as apt-get does when the dpkg lock is held, a given number of times.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from conftest import REPO

SCRIPT = REPO / "scripts" / "apt_install.sh"
LOCKED = ("E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)\n"
          "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?")


def stand_ins(folder: Path, locked_calls: int, uid: int = 0, other_error: str = "") -> Path:
    """``apt-get`` failing with the held-lock message on its first ``locked_calls`` calls (and with
    ``other_error`` instead, when given), then succeeding; ``id -u`` printing ``uid``. Returns the folder."""
    calls = folder / "calls"
    failure = f"printf '%s\\n' '{other_error}' >&2; exit 100" if other_error else \
        f"printf '%s\\n' '{LOCKED.splitlines()[0]}' '{LOCKED.splitlines()[1]}' >&2; exit 100"
    (folder / "apt-get").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> "{calls}"\n'
        'echo "apt-get ran: $*" >&2\n'
        f'if [ "$(wc -l < "{calls}")" -le {locked_calls} ]; then {failure}; fi\n'
        'echo "apt-get: done"\n')
    (folder / "id").write_text(f"#!/bin/sh\necho {uid}\n")
    for name in ("apt-get", "id"):
        os.chmod(folder / name, 0o755)
    return folder


def install(folder: Path, *packages: str, wait_s: int = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{folder}:{os.environ['PATH']}", "APT_LOCK_STEP_S": "1",
           "APT_LOCK_WAIT_S": str(wait_s)}
    return subprocess.run(["bash", str(SCRIPT), *packages], capture_output=True, text=True, env=env, timeout=120,
                          check=False)


def calls(folder: Path) -> list[str]:
    path = folder / "calls"
    return path.read_text().splitlines() if path.exists() else []


def test_says_what_it_installs_then_waits_for_a_held_lock(tmp_path):
    folder = stand_ins(tmp_path, locked_calls=2)
    proc = install(folder, "slurm-wlm", "munge")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == ("apt_install: installing the system packages slurm-wlm munge with apt-get "
                        "(machine-wide; needs root)")
    waits = [line for line in lines if line.startswith("apt_install: waiting")]
    assert len(waits) == 2 and all(
        line.startswith("apt_install: waiting for the apt/dpkg lock (held by process 4242 (apt-get)): ")
        and line.endswith(" s of 60 s") for line in waits), lines
    timeout = "-o DPkg::Lock::Timeout=1"
    assert calls(folder) == [f"{timeout} update"] * 3 + [f"{timeout} install -y --no-install-recommends slurm-wlm munge"]


def test_gives_up_after_the_bound_naming_the_cause(tmp_path):
    folder = stand_ins(tmp_path, locked_calls=10_000)
    proc = install(folder, "chromium", wait_s=2)
    assert proc.returncode == 100
    assert proc.stderr.splitlines()[-1] == (
        "apt_install: ERROR: apt-get update: the apt/dpkg lock is still held after 2 s (see above: which process "
        "holds it); wait for it to finish, then run again")
    assert 2 <= len(calls(folder)) <= 4 and set(calls(folder)) == {"-o DPkg::Lock::Timeout=1 update"}


def test_another_failure_is_not_retried(tmp_path):
    folder = stand_ins(tmp_path, locked_calls=2, other_error="E: Unable to locate package nope")
    proc = install(folder, "nope")
    assert proc.returncode == 100
    assert calls(folder) == ["-o DPkg::Lock::Timeout=1 update"]
    assert proc.stderr.splitlines()[-1] == "apt_install: ERROR: apt-get update failed (exit 100; see above)"


def test_not_root_says_so_and_installs_nothing(tmp_path):
    folder = stand_ins(tmp_path, locked_calls=0, uid=1000)
    proc = install(folder, "chromium")
    assert proc.returncode == 1 and calls(folder) == []
    assert proc.stderr.splitlines() == [
        "apt_install: installing the system packages chromium with apt-get (machine-wide; needs root)",
        "apt_install: ERROR: not root: run this as root, or install chromium yourself (apt-get install chromium)"]


def test_the_makefile_installs_through_it_and_says_so_first():
    """Every apt-get of the Makefile goes through the script; `make test` says what it installs first."""
    makefile = (REPO / "Makefile").read_text()
    assert "apt-get update" not in makefile and "apt-get install" not in makefile
    for target in ("chromium:", "slurm:", "promtool:", "bench:"):
        body = makefile.split("\n" + target, 1)[1].split("\n\n", 1)[0]
        assert "$(APT_INSTALL)" in body, target
    proc = subprocess.run(["make", "-s", "-C", str(REPO), "system-note"], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout == ("make test: installs the system packages chromium slurm-wlm munge slurmdbd mariadb-server prometheus with "
                           "apt-get when "
                           "missing (machine-wide: needs root) and unpacks the Nsight Systems CLI into tools/nsys "
                           "(no root); `make check` runs the tests that need none of them\n")
    test_line = next(line for line in makefile.splitlines() if line.startswith("test:"))
    assert test_line.split()[1] == "system-note", test_line
