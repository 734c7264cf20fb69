"""The Testing tables of docs/operations.md from a ``pytest --costs FILE`` run (issue 43): CPU and wall
seconds per test module, and the costliest tests with what each checks (its docstring's first sentence).

    python scripts/suite_costs.py FILE [--top N] [--write docs/operations.md]

Prints the tables; ``--write`` replaces the text between the ``<!-- suite-costs -->`` and
``<!-- /suite-costs -->`` lines of that file with them."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from suite_costs import by_module, read_costs  # noqa: E402

BEGIN, END = "<!-- suite-costs -->", "<!-- /suite-costs -->"


def tables(records: list[dict], top: int) -> str:
    cpu, wall = sum(r["cpu_s"] for r in records), sum(r["wall_s"] for r in records)
    lines = [f"{len(records)} tests, {cpu:.0f} CPU-s in all ({wall:.0f} s of test time, fixtures included).", "",
             "| module | tests | CPU s | wall s |", "|---|---:|---:|---:|"]
    modules = by_module(records)
    for module, n, w, c in modules[:top]:
        lines.append(f"| `{module.removeprefix('tests/')}` | {n} | {c:.1f} | {w:.1f} |")
    rest = modules[top:]
    if rest:
        lines.append(f"| {len(rest)} more modules | {sum(m[1] for m in rest)} | {sum(m[3] for m in rest):.1f} | "
                     f"{sum(m[2] for m in rest):.1f} |")
    lines += ["", "| test | CPU s | wall s | marked | what it checks |", "|---|---:|---:|---|---|"]
    for r in sorted(records, key=lambda r: (-r["cpu_s"], r["test"]))[:top]:
        name = r["test"].removeprefix("tests/").replace("|", "\\|")
        what = r.get("checks", "").replace("|", "\\|")
        lines.append(f"| `{name}` | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {', '.join(r.get('marks', []))} | {what} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--write", metavar="MARKDOWN")
    args = parser.parse_args(argv)
    text = tables(read_costs(args.file), args.top)
    if not args.write:
        print(text, end="")
        return 0
    path = Path(args.write)
    doc = path.read_text(encoding="utf-8")
    if BEGIN not in doc or END not in doc:
        print(f"{path}: no {BEGIN} ... {END} lines to replace", file=sys.stderr)
        return 2
    head, rest = doc.split(BEGIN, 1)
    path.write_text(head + BEGIN + "\n" + text + END + rest.split(END, 1)[1], encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
