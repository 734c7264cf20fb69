"""A ``--trim`` window reaching outside the GPU's kernels is cut to them (issue 45, point 8;
docs/definitions.md#the-analysis-window): the time outside the trace is not idle, no category, no dollar; the row
says how much was cut (``trim-outside-kernels``, also on the console) and its tier is at most ``low``.

The export (worked by hand): one H100, 10 iterations ("Iteration N" NVTX ranges) of 30 ms from t = 1 s on the
report's clock, each six 4 ms kernels every 5 ms: kernels run 1.000..1.299 s, 60 of them, 240 ms busy; over the
extent [1.000, 1.299) s W is 299 ms with 59 ms idle (five 1 ms holes per iteration, 9 between iterations).
"""
from __future__ import annotations

import pandas as pd
import pytest

from pipeline.synth import ExportWriter

MS = 1_000_000
T0 = 1_000 * MS
H100 = "NVIDIA H100 80GB HBM3"
TRIMS = {"past": ("0.995", "1.319"), "cut": ("1.000", "1.299"), "inside": ("1.002", "1.297")}
WARNING = ("--trim reaches 25.000 of its 324.000 ms outside this GPU's kernels (they run 1.000000..1.299000 s on the "
           "report's clock): that time is not measured idle, so W is cut to the kernels (299.000 ms) and it is "
           "neither counted, categorised nor priced, and the tier is at most low")


def _export(path) -> str:
    w = ExportWriter(str(path))
    w.gpu(0, H100, uuid="gpu-0", bus="0000:18:00.0")
    w.cuda_device(0, 0, 10)
    for i in range(10):
        t = T0 + i * 30 * MS
        w.nvtx(pid=10, tid=11, start=t, end=t + 30 * MS, text=f"Iteration {i}")
        for j in range(6):
            c = w.correlation()
            w.runtime(pid=10, tid=11, start=t + j * 5 * MS - MS // 2, end=t + j * 5 * MS - MS // 4,
                      name="cudaLaunchKernel_v7000", correlation=c)
            w.kernel(pid=10, device=0, stream=7, start=t + j * 5 * MS, end=t + j * 5 * MS + 4 * MS, name="gemm",
                     correlation=c)
    return w.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """name -> (fleet row, console output) of one run per trim of :data:`TRIMS`, in process."""
    from click.testing import CliRunner

    from pipeline.cli import main

    folder = tmp_path_factory.mktemp("trimcut")
    path = _export(folder / "trim.sqlite")
    out = {}
    for name, (start, end) in TRIMS.items():
        result = CliRunner().invoke(
            main, ["run", path, "--trim", start, end, "--out", str(folder / name), "--no-cache"])
        assert result.exit_code == 0, result.output
        (row,) = pd.read_parquet(folder / name / "fleet.parquet").to_dict("records")
        out[name] = (row, result.output)
    return out


def test_a_trim_past_the_kernels_counts_only_the_kernels_extent(runs):
    past, _ = runs["past"]
    cut, _ = runs["cut"]
    assert (past["window_start_ns"], past["window_end_ns"], past["window_ns"]) == (T0, T0 + 299 * MS, 299 * MS)
    assert (past["busy_ns"], past["idle_ns"]) == (240 * MS, 59 * MS)
    assert past["idle_pct"] == pytest.approx(100 * 59 / 299, abs=1e-4)
    cats = sorted(c for c in past if c.startswith("cat_") and c.endswith("_ns"))
    assert cats and {c: past[c] for c in cats} == {c: cut[c] for c in cats}
    assert sum(past[c] for c in cats) <= 59 * MS
    assert past["main_category"] == cut["main_category"]
    # dollars: the idle fraction of the cut window at the row's rate over the default 730 h month, in cents
    assert past["idle_usd_per_month"] == round(59 / 299 * past["rate_usd_per_hour"] * 730, 2) > 0
    assert past["idle_usd_per_month"] == cut["idle_usd_per_month"]


def test_a_trim_past_the_kernels_warns_on_the_row_and_the_console_and_is_low(runs):
    past, console = runs["past"]
    cut, cut_console = runs["cut"]
    assert past["status"] == "partial" and "trim-outside-kernels" in past["warning_codes"].split(",")
    assert WARNING in past["warnings"].split("; ")
    assert f"gpu-idle: WARNING: {past['report']} GPU {past['gpu_key']}: {WARNING}" in console.splitlines()
    assert cut["confidence_tier"] == "medium" and past["confidence_tier"] == "low"
    assert "trim-outside-kernels" not in cut["warning_codes"] and "--trim reaches" not in cut_console


def test_a_trim_inside_the_kernels_is_unchanged(runs):
    row, console = runs["inside"]
    assert (row["window_start_ns"], row["window_end_ns"], row["window_ns"]) == (T0 + 2 * MS, T0 + 297 * MS, 295 * MS)
    assert (row["busy_ns"], row["idle_ns"]) == (236 * MS, 59 * MS)
    assert "trim-outside-kernels" not in row["warning_codes"] and "--trim reaches" not in console
    assert row["confidence_tier"] == "medium"


def test_trim_cut_lines_read_only_their_columns():
    """cli.trim_cut_lines: one line per row carrying trim-outside-kernels whose warnings say ``--trim reaches``, that
    part of the text up to the tier's clause, in row order; rows without the code, or without the text, give none;
    a table without warning codes gives none, and one without a ``warnings`` column none either."""
    from pipeline.cli import trim_cut_lines

    fleet = pd.DataFrame({
        "report": ["a.sqlite", "b.sqlite", "c.sqlite", "d.sqlite"],
        "gpu_key": ["0", "1", "2", "3"],
        "warning_codes": ["x,trim-outside-kernels", "trim-outside-kernels", None, "trim-outside-kernels-not"],
        "warnings": ["first; " + WARNING + "; after", "no such words", "--trim reaches 1 ms", "--trim reaches 2 ms"],
    })
    assert trim_cut_lines(fleet) == [f"gpu-idle: WARNING: a.sqlite GPU 0: {WARNING}"]
    assert trim_cut_lines(fleet.drop(columns=["warning_codes"])) == []
    assert trim_cut_lines(fleet.drop(columns=["warnings"])) == []
