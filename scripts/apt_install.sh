#!/usr/bin/env bash
# Install Debian packages machine-wide for the project's tests (`make chromium`, `make slurm`,
# `make bench`): `apt-get update`, then `apt-get install -y --no-install-recommends PACKAGE...`.
#
# Says first which packages it installs and that this needs root, and stops with that message
# when not root. Another apt or dpkg process holding its lock (an unattended upgrade, another
# install) is waited for instead of failing: apt-get waits for the dpkg lock itself
# (-o DPkg::Lock::Timeout), and an apt-get that still fails on a held lock is run again, with
# one line every ~30 s saying so, for at most APT_LOCK_WAIT_S seconds (default 600).
#
# Usage: scripts/apt_install.sh PACKAGE...
# Environment:
#   APT_LOCK_WAIT_S  how long to wait for a held apt/dpkg lock in all (s, default 600)
#   APT_LOCK_STEP_S  how long one attempt waits, and so how often a line is printed (s, default 30)
set -euo pipefail

WAIT_S="${APT_LOCK_WAIT_S:-600}"
STEP_S="${APT_LOCK_STEP_S:-30}"

say() { printf 'apt_install: %s\n' "$*" >&2; }

(($#)) || { say "usage: $0 PACKAGE..."; exit 2; }
say "installing the system packages $* with apt-get (machine-wide; needs root)"
if [[ "$(id -u)" != 0 ]]; then
    say "ERROR: not root: run this as root, or install $* yourself (apt-get install $*)"
    exit 1
fi

LOG="$(mktemp)"
trap 'rm -f "$LOG"' EXIT

# apt-get "$@", run again while it fails on a lock another process holds, up to WAIT_S in all.
apt() {
    local start=$SECONDS began rc holder
    while :; do
        began=$SECONDS
        set +e
        DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$STEP_S" "$@" 2>&1 | tee "$LOG"
        rc=${PIPESTATUS[0]}
        set -e
        ((rc == 0)) && return 0
        if ! grep -qiE 'could not get lock|unable to acquire|is another process using it' "$LOG"; then
            say "ERROR: apt-get $* failed (exit $rc; see above)"
            return "$rc"
        fi
        if ((SECONDS - start >= WAIT_S)); then
            say "ERROR: apt-get $*: the apt/dpkg lock is still held after ${WAIT_S} s (see above: which" \
                "process holds it); wait for it to finish, then run again"
            return "$rc"
        fi
        holder="$(grep -oiE 'held by process [0-9]+( \([^)]*\))?' "$LOG" | head -n1 || true)"
        say "waiting for the apt/dpkg lock${holder:+ ($holder)}: $((SECONDS - start)) s of ${WAIT_S} s"
        # apt-get waits STEP_S for the dpkg lock itself, but not always for others (the lists' lock):
        # sleep the rest of the step, so that a line comes every ~STEP_S seconds either way.
        if ((SECONDS - began < STEP_S)); then
            sleep "$((STEP_S - (SECONDS - began)))"
        fi
    done
}

apt update
apt install -y --no-install-recommends "$@"
