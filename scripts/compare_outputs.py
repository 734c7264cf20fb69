"""Check that two versions of gpu-idle write the same outputs, byte for byte.

    python scripts/compare_outputs.py [BASE_REF]      (default: HEAD~1)

Checks out BASE_REF into a temporary git worktree and runs both it and the working
tree (with this interpreter, ``python -m pipeline.cli``, each with empty caches of its
own, on the same absolute input paths) on the example fleet (``examples/fleet``, as
``make run``), on ``../shared/profiles`` (as the README's real-profile command,
with the working tree's ``configs/profiles.yaml``, with the span window and the automatic one)
and on the PyTorch traces in ``../shared/kineto`` (both windows), then compares every
file the two runs wrote: fleet.parquet, fleet.csv, jobs.csv, clusters.csv, gpus/*.json
and records/*. Files that say which run made them (the folder's ``.manifest.json``,
which holds a digest of the pipeline's source) are not compared. Then, on the working tree alone,
re-pricing (:data:`REPRICE`): ``../shared/profiles`` run with ``configs/profiles.yaml``, then into the same
folder with another rate card, month and label rules (its stored results reused: nothing analysed), must
write what a run under those settings without the result cache writes. Prints one line per
case and exits 1 when any file differs or is missing on one side.
"""
from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared", "profiles")
KINETO = os.path.join(os.path.dirname(REPO), "shared", "kineto")
SKIP = {".manifest.json"}

EXAMPLES = os.path.join(REPO, "examples", "fleet")
CASES = [
    ("example fleet", [EXAMPLES, "--config", os.path.join(EXAMPLES, "labels.yaml")]),
    ("shared profiles", [SHARED, "--window", "span", "--config", os.path.join(REPO, "configs", "profiles.yaml")]),
    ("shared profiles auto", [SHARED, "--config", os.path.join(REPO, "configs", "profiles.yaml")]),
    ("shared kineto", [KINETO]),
    ("shared kineto span", [KINETO, "--window", "span"]),
]
NEEDS = {"shared profiles": SHARED, "shared profiles auto": SHARED, "shared kineto": KINETO,
         "shared kineto span": KINETO}


#: Other settings for the re-pricing case: another rate, month and cluster override, a label rule renaming a job and
#: one matching nothing (appended to ``configs/profiles.yaml``'s rules).
REPRICE = """  - {match: "*train_h100_2gpu_nccl*", cluster: lab-b, job: train-renamed}
  - {match: "*matches-nothing*", cluster: nowhere}
cost:
  hours_per_month: 700
  cluster_rates: {workstation: {H100: 1.25}}
  rates:
    - {model: H100, usd_per_gpu_hour: 3.1, match: ["*H100*"]}
"""


def run(tree: str, args: list[str], out: str, cache: str) -> tuple[int, str]:
    """Run ``gpu-idle run ARGS --out OUT`` of the code in ``tree`` with caches of its own under ``cache``: its exit
    status and what it printed."""
    os.makedirs(cache, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=tree, GPU_IDLE_CACHE=os.path.join(cache, "columns"),
               GPU_IDLE_EXPORT_CACHE=os.path.join(cache, "exports"), GPU_IDLE_STAGE_CACHE=os.path.join(cache, "staged"))
    # the same input paths and the same working folder for both: the report paths in the outputs match
    proc = subprocess.run([sys.executable, "-m", "pipeline.cli", "run", *args, "--out", out], cwd=cache, env=env,
                          capture_output=True, text=True)
    return proc.returncode, proc.stdout


def compared(one: str, two: str) -> tuple[list, list, set]:
    """``(differ, on one side only, common)`` of the output files of folders ``one`` and ``two``."""
    a, b = files(one), files(two)
    return (sorted(f for f in a & b if not filecmp.cmp(os.path.join(one, f), os.path.join(two, f), shallow=False)),
            sorted(a ^ b), a & b)


def reprice(work: str) -> bool:
    """The re-pricing case (:data:`REPRICE`) on the working tree; prints its line, returns whether it holds."""
    if not os.path.isdir(SHARED):
        print("re-priced shared profiles: skipped (../shared/profiles not found)")
        return True
    with open(os.path.join(REPO, "configs", "profiles.yaml"), encoding="utf-8") as fh:
        other = os.path.join(work, "reprice.yaml")
        with open(other, "w", encoding="utf-8") as out:
            out.write(fh.read().rstrip("\n") + "\n" + REPRICE)
    cache, folder, fresh = (os.path.join(work, n) for n in ("cache-reprice", "reprice", "reprice-fresh"))
    run(REPO, [SHARED, "--config", os.path.join(REPO, "configs", "profiles.yaml")], folder, cache)
    again = run(REPO, [SHARED, "--config", other], folder, cache)
    run(REPO, [SHARED, "--config", other, "--no-cache"], fresh, cache + "-off")
    said = again[1]
    differ, missing, common = compared(folder, fresh)
    ok = "0 report(s) analysed" in said and not differ and not missing and bool(common)
    print(f"re-priced shared profiles: {'0' if '0 report(s) analysed' in said else 'some'} report(s) analysed again, "
          f"{len(common)} file(s) compared with a fresh run, {len(differ)} differ, {len(missing)} on one side only"
          + ("" if ok else f": {(differ + missing)[:10]}"))
    return ok


def files(root: str) -> set[str]:
    out = set()
    for folder, _, names in os.walk(root):
        for name in names:
            if name not in SKIP and not name.endswith(".tmp"):
                out.add(os.path.relpath(os.path.join(folder, name), root))
    return out


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else "HEAD~1"
    work = tempfile.mkdtemp(prefix="gpu-idle-compare-")
    tree = os.path.join(work, "base")
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", tree, base], check=True, capture_output=True)
    bad = 0
    try:
        # the example fleet is generated, not committed: both runs read the working tree's copy
        if not os.path.exists(os.path.join(REPO, "examples", "fleet", "labels.yaml")):
            subprocess.run([sys.executable, "-m", "pipeline.cli", "synth", "--example", "examples/fleet"], cwd=REPO,
                           check=True)
        for name, args in CASES:
            if name in NEEDS and not os.path.isdir(NEEDS[name]):
                print(f"{name}: skipped ({NEEDS[name]} not found)")
                continue
            outs = {}
            for side, root in (("base", tree), ("work", REPO)):
                outs[side] = os.path.join(work, f"{side}-{name.replace(' ', '-')}")
                run(root, args, outs[side], os.path.join(work, f"cache-{side}-{name.replace(' ', '-')}"))
            a, b = files(outs["base"]), files(outs["work"])
            missing = sorted(a ^ b)
            differ = sorted(f for f in a & b
                            if not filecmp.cmp(os.path.join(outs["base"], f), os.path.join(outs["work"], f),
                                               shallow=False))
            ok = not missing and not differ and a
            bad += not ok
            print(f"{name}: {len(a & b)} file(s) compared, {len(differ)} differ, {len(missing)} on one side only"
                  + ("" if ok else f": {(differ + missing)[:10]}") + f" [{base} vs working tree]")
        bad += not reprice(work)
    finally:
        subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], capture_output=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
