#!/usr/bin/env bash
# Install a real NVIDIA Nsight Systems CLI (`nsys` 2022.4, Debian bookworm
# non-free) into tools/nsys/ inside the repository, for the project's own tests.
# No GPU is needed: `nsys profile --trace=nvtx,osrt` and `nsys export` work on a
# CPU-only machine.
#
# The machine's apt configuration is left alone: apt-get runs with a
# project-local sources file (scripts/nsys-sources.list, which adds the non-free
# component) and project-local lists and caches under tools/.nsys-apt/, then
# `apt-get download` fetches nsight-systems, nsight-systems-target and libssh-4
# and `dpkg -x` unpacks them into tools/nsys/ (nothing is installed into the
# system, no maintainer scripts run). Works from a clean state (apt-get update
# never run on the machine) and does not need root.
#
# Idempotent: when tools/nsys/usr/bin/nsys already runs it only prints the path.
# On success the only line on stdout is the absolute path of the nsys binary;
# progress, timings and sizes go to stderr.
#
# Environment:
#   NSYS_DEBIAN_MIRROR  Debian mirror URL to use instead of the one the
#                       machine's own apt configuration names.
#   NSYS_FORCE=1        reinstall even when tools/nsys already works.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$REPO/tools"
DEST="$TOOLS/nsys"
NSYS="$DEST/usr/bin/nsys"
WORK="$TOOLS/.nsys-apt"
TEMPLATE="$REPO/scripts/nsys-sources.list"
PACKAGES=(nsight-systems nsight-systems-target libssh-4)
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg

say() { printf 'install_nsys: %s\n' "$*" >&2; }
die() { printf 'install_nsys: ERROR: %s\n' "$*" >&2; exit 1; }

# The importer (host-linux-x64/QdstrmImporter) is looked up beside the real
# nsys binary; `nsys profile` cannot turn its capture into a .nsys-rep without it.
installed_ok() {
    local real
    [[ -x "$NSYS" ]] || return 1
    "$NSYS" --version >/dev/null 2>&1 || return 1
    real="$(readlink -f "$NSYS")" || return 1
    [[ -x "$(dirname "$(dirname "$real")")/host-linux-x64/QdstrmImporter" ]]
}

mkdir -p "$TOOLS"
# Two concurrent `make nsys` runs must not unpack into the same folder.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$TOOLS/.nsys.lock"
    flock 9
fi

if [[ "${NSYS_FORCE:-0}" != 1 ]] && installed_ok; then
    say "already installed: $("$NSYS" --version 2>/dev/null | head -n1)"
    echo "$NSYS"
    exit 0
fi

for tool in apt-get dpkg; do
    command -v "$tool" >/dev/null 2>&1 \
        || die "'$tool' not found: this installer needs a Debian-based machine (apt-get and dpkg)"
done
[[ -f "$TEMPLATE" ]] || die "missing $TEMPLATE"

# The Debian mirror this machine already uses: the first enabled 'deb' source
# (deb822 .sources stanza or one-line .list entry) for a Debian release suite
# that is not a security suite.
system_mirror() {
    local files=() f
    [[ -f /etc/apt/sources.list ]] && files+=(/etc/apt/sources.list)
    for f in /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] && files+=("$f")
    done
    ((${#files[@]})) || return 0
    awk '
        function good_suite(s) { return s ~ /^(bookworm|trixie|bullseye|forky|sid|stable|testing|unstable|oldstable)(-updates)?$/ }
        function flush(   n, i, sw, su) {
            if (!found && types ~ /(^|[ \t])deb([ \t]|$)/ && enabled !~ /^[Nn][Oo]/ && uris != "" && uris !~ /security/) {
                n = split(suites, sw, /[ \t]+/)
                for (i = 1; i <= n; i++) if (good_suite(sw[i])) { split(uris, su, /[ \t]+/); print su[1]; found = 1; break }
            }
            types = ""; uris = ""; suites = ""; enabled = ""
        }
        found { exit }
        FNR == 1 { flush(); if (found) exit }
        FILENAME ~ /\.sources$/ {
            if ($0 ~ /^[ \t]*$/) { flush(); if (found) exit; next }
            if ($0 ~ /^#/) next
            if (tolower($1) == "types:")   { sub(/^[^:]*:[ \t]*/, ""); types = $0 }
            if (tolower($1) == "uris:")    { sub(/^[^:]*:[ \t]*/, ""); uris = $0 }
            if (tolower($1) == "suites:")  { sub(/^[^:]*:[ \t]*/, ""); suites = $0 }
            if (tolower($1) == "enabled:") { sub(/^[^:]*:[ \t]*/, ""); enabled = $0 }
            next
        }
        $1 == "deb" {
            line = $0; sub(/^deb[ \t]+/, "", line)
            if (line ~ /^\[/) sub(/^\[[^]]*\][ \t]*/, "", line)
            split(line, w, /[ \t]+/)
            if (w[1] !~ /security/ && good_suite(w[2])) { print w[1]; found = 1; exit }
        }
        END { if (!found) flush() }
    ' "${files[@]}" | head -n1
}

MIRROR="${NSYS_DEBIAN_MIRROR:-$(system_mirror)}"
MIRROR="${MIRROR%/}"
[[ -n "$MIRROR" ]] || die "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/; set NSYS_DEBIAN_MIRROR=<Debian mirror URL>"
SIGNED_BY=""
[[ -f "$KEYRING" ]] && SIGNED_BY="signed-by=$KEYRING"
say "Debian mirror: $MIRROR"

rm -rf "$WORK"
mkdir -p "$WORK/lists/partial" "$WORK/cache/archives/partial" "$WORK/sources.list.d" "$WORK/debs"
sed -e "s|@MIRROR@|$MIRROR|g" -e "s|@SIGNED_BY@|$SIGNED_BY|g" "$TEMPLATE" >"$WORK/sources.list"

# Everything apt reads or writes besides the package database stays under $WORK.
APT_OPTS=(
    -o "Dir::Etc::SourceList=$WORK/sources.list"
    -o "Dir::Etc::SourceParts=$WORK/sources.list.d"
    -o "Dir::State::Lists=$WORK/lists"
    -o "Dir::Cache=$WORK/cache"
    -o "Dir::Cache::pkgcache="
    -o "Dir::Cache::srcpkgcache="
    -o "Acquire::Languages=none"
    -o "APT::Sandbox::User=$(id -un)"
    -o "DPkg::Lock::Timeout=600"
)

t0=$(date +%s.%N)
say "apt-get update (project-local lists in ${WORK#"$REPO"/})"
if ! apt-get "${APT_OPTS[@]}" -q update >"$WORK/update.log" 2>&1; then
    tail -n 20 "$WORK/update.log" >&2
    die "apt-get update failed against $MIRROR (see above); is the Debian mirror reachable?"
fi
if grep -qE '^(W|E): ' "$WORK/update.log"; then
    grep -E '^(W|E): ' "$WORK/update.log" >&2 || true
    # apt-get update exits 0 when an index could not be fetched; without it
    # the download below can only fail with a less helpful message.
    if grep -qE '^(W|E): (Failed to fetch|Some index files failed)' "$WORK/update.log"; then
        die "apt-get update could not fetch the package lists from $MIRROR (see above); is the Debian mirror reachable?"
    fi
fi

say "apt-get download ${PACKAGES[*]}"
if ! (cd "$WORK/debs" && apt-get "${APT_OPTS[@]}" -q download "${PACKAGES[@]}") >"$WORK/download.log" 2>&1; then
    tail -n 20 "$WORK/download.log" >&2
    die "apt-get download ${PACKAGES[*]} failed from $MIRROR (see above)"
fi
t1=$(date +%s.%N)
for p in "${PACKAGES[@]}"; do
    compgen -G "$WORK/debs/${p}_*.deb" >/dev/null || die "apt-get download did not produce a .deb for $p"
done
deb_bytes=$(du -cb "$WORK"/debs/*.deb | tail -n1 | cut -f1)

say "unpacking with dpkg -x into ${DEST#"$REPO"/}"
STAGE="$TOOLS/.nsys-unpack"
rm -rf "$STAGE"
mkdir -p "$STAGE"
for deb in "$WORK"/debs/*.deb; do
    dpkg -x "$deb" "$STAGE" || die "dpkg -x $(basename "$deb") failed"
done

# nsys resolves to .../x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys and
# looks for its importer in the sibling host-linux-x64, but the package ships
# host-linux-x64 under .../lib/nsight-systems/. Link it where nsys looks.
real_nsys="$(readlink -f "$STAGE/usr/bin/nsys")" || die "unpacked tree has no usr/bin/nsys"
[[ -x "$real_nsys" ]] || die "usr/bin/nsys does not resolve to an executable ($real_nsys)"
target_parent="$(dirname "$(dirname "$real_nsys")")"      # .../x86_64-linux-gnu/nsight-systems
host_dir="$(find "$STAGE" -type d -name host-linux-x64 -path '*/nsight-systems/host-linux-x64' | head -n1)"
[[ -n "$host_dir" && -x "$host_dir/QdstrmImporter" ]] || die "unpacked tree has no nsight-systems/host-linux-x64/QdstrmImporter"
if [[ "$(readlink -f "$target_parent/host-linux-x64" 2>/dev/null)" != "$(readlink -f "$host_dir")" ]]; then
    rm -rf "$target_parent/host-linux-x64"
    ln -s "$(realpath --relative-to="$target_parent" "$host_dir")" "$target_parent/host-linux-x64"
fi
say "linked ${target_parent#"$STAGE"/}/host-linux-x64 -> $(readlink "$target_parent/host-linux-x64")"

rm -rf "$DEST"
mv "$STAGE" "$DEST"
t2=$(date +%s.%N)
rm -rf "$WORK"

installed_ok || die "unpacked nsys at $NSYS does not run: $("$NSYS" --version 2>&1 | tail -n3)"
say "$("$NSYS" --version | head -n1)"
say "$(awk -v a="$t0" -v b="$t1" -v c="$t2" -v n="$deb_bytes" -v u="$(du -sb "$DEST" | cut -f1)" \
    'BEGIN { printf "download %.1f s (%.0f MB of .deb), unpack %.1f s (%.0f MB in tools/nsys)", b-a, n/1e6, c-b, u/1e6 }')"
echo "$NSYS"
