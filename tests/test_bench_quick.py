"""The quick performance guard's verdicts and its section of bench/RESULTS.md (bench/quick.py, issue 44
point 3), on figures made up here: nothing is measured."""
from __future__ import annotations

import sys

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "bench"))

import quick  # noqa: E402

MIB = 2 ** 20


def figures(**over) -> dict:
    now = {"floor": "sqlite3 CLI", "recorded": "2026-12-06 08:30 UTC", "code": "abc1234", "loadavg": (1.0, 2.0, 3.0),
           "gen_floor_s": 0.5, "gen_run_s": 2.0, "gen_stages_s": 1.0, "gen_run_ratio": 4.0, "gen_stages_ratio": 2.0,
           "gen_run_rss": 300 * MIB, "gen_stages_rss": 250 * MIB, "shared_floor_s": 0.1, "shared_run_s": 3.0,
           "shared_run_ratio": 30.0, "shared_run_rss": 200 * MIB, "shared_files": ["a.sqlite", "b.sqlite"]}
    now.update(over)
    return now


def record_of(now: dict) -> dict:
    """What --record writes, read back as the next run reads it."""
    found = quick.RECORD.search(quick.section(now))
    import json

    return json.loads(found.group(1))


def test_a_figure_1_5x_the_recorded_one_is_worse_and_a_bigger_rss_than_the_target_is_missed():
    last = record_of(figures())
    assert last["figures"]["gen_run_ratio"] == 4.0 and last["floor"] == "sqlite3 CLI"
    assert quick.verdicts(figures(gen_run_ratio=6.0), last) == []  # exactly 1.5x: not worse
    worse = quick.verdicts(figures(gen_run_ratio=6.01, shared_run_rss=301 * MIB), last)
    assert worse == ["1.5x WORSE: 400k kernels: `gpu-idle run` (empty caches) / decode floor 6.01x vs 4.00x recorded "
                     "2026-12-06 08:30 UTC",
                     "1.5x WORSE: shared exports: largest peak RSS of `gpu-idle run` 301 MiB vs 200 MiB recorded "
                     "2026-12-06 08:30 UTC"]
    missed = quick.verdicts(figures(gen_run_rss=600_000_001), None)
    assert missed == ["MISSED: 400k kernels: peak RSS of `gpu-idle run` 572 MiB > 600 MB (make bench's bound at 3M "
                      "kernels)"]
    assert quick.verdicts(figures(gen_run_rss=600_000_000), None) == []
    # figures recorded on another floor are not compared
    assert quick.verdicts(figures(gen_run_ratio=60.0, floor="python sqlite3 module"), last) == []
    lines = quick.report_lines(figures(gen_run_ratio=6.01), last)
    assert "  400k kernels: `gpu-idle run` (empty caches) / decode floor: 6.01x (2.00 s vs 0.500 s); recorded 4.00x" \
        in lines
    assert lines[-1].startswith("  1.5x WORSE: ")


def test_the_section_is_replaced_in_place_and_kept_by_a_rewrite():
    head = "# gpu-idle benchmark results\n\n## Targets\n\n| a | b |\n"
    tail = "\n## 0. Start-up\n\ntext\n"
    first = quick.with_section(head, quick.section(figures()))
    assert first.startswith(head) and quick.quick_section(first) == quick.section(figures())
    middle = head + quick.section(figures()) + tail
    again = quick.with_section(middle, quick.section(figures(gen_run_ratio=5.0, recorded="later")))
    assert again.startswith(head) and again.endswith(tail)
    assert record_of(figures(gen_run_ratio=5.0, recorded="later")) == quick.recorded_in(again)
    assert again.count(quick.SECTION) == 1
    # bench/run.py rewrites RESULTS.md without it, then puts back what it held
    assert quick.with_section(head, quick.quick_section(again)).count("later") == 2


@pytest.mark.parametrize("fast", [True, False])
def test_the_bench_prints_per_table_the_values_the_loader_decoded_and_the_rows_held(tmp_path, monkeypatch, fast):
    """Three kernels (two names) and two runtime calls: the loader reads 8 values of each kernel row, 5 of each
    call, 2 of each of the 3 StringIds; for the kernel-name aliases, off the b-tree (``fast``) the 2 other name ids
    of every kernel row (read in the same pass as its 8), through SQLite the DISTINCT's 2 rows x 3 name columns."""
    from pipeline.load import btree
    from pipeline.load.report import load_report
    from pipeline.load.sqlite import decoded
    from pipeline.synth import ExportWriter

    w = ExportWriter(str(tmp_path / "x.sqlite"))
    w.gpu(0, "NVIDIA H100 80GB HBM3", uuid="aaa", bus="0000:01:00.0")
    w.cuda_device(0, 0, 100)
    for start, name in ((0, "gemm"), (200, "gemm"), (400, "nccl")):
        w.kernel(100, 0, 7, start, start + 100, name)
    w.runtime(100, 101, 0, 50, "cudaLaunchKernel")
    w.runtime(100, 101, 190, 250, "cudaLaunchKernel")
    path = w.close()
    if not fast:
        monkeypatch.setenv(btree.ENV_OFF, "1")
    decoded(reset=True)
    load_report(path)
    table = quick.run.held_and_decoded(path, decoded(reset=True))
    assert table["CUPTI_ACTIVITY_KIND_KERNEL"] == [3 * (8 + 2) if fast else 3 * 8 + 2 * 3, 3, 28]
    assert table["CUPTI_ACTIVITY_KIND_RUNTIME"] == [2 * 5, 2, 8]
    assert table["StringIds"] == [3 * 2, 3, 2]
    lines = quick.run.decoded_lines({"CUPTI_ACTIVITY_KIND_RUNTIME": [10, 2, 8], "EMPTY": [0, 0, 3]}, "400k kernels")
    assert lines[1:] == ["    CUPTI_ACTIVITY_KIND_RUNTIME: 10 values decoded, 2 rows held x 8 columns (5.00 per row)",
                         "    EMPTY: 0 values decoded, 0 rows held x 3 columns (no row)"]
    assert quick.report_lines(figures(decoded={"EMPTY": [0, 0, 3]}), None)[7] == lines[0]
