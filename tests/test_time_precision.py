"""Issue 12, kind 6: times stay integer nanoseconds end to end, including ``--trim`` input.

On the UTC-epoch clock (``nsys export`` with its time-shift options) timestamps are ~1.78e18 ns:
a float holds them only to ~256 ns, so seconds given as text must be parsed as decimals.
"""
from __future__ import annotations

from decimal import Decimal

import pandas as pd
import pytest
from conftest import run_cli

from helpers.window import choose_window
from pipeline.analysis.window import trim_window
from pipeline.config import ConfigError, load_config, seconds_to_ns
from pipeline.synth import ExportWriter

S = 1_776_781_226 * 1_000_000_000  # 1776781226 s on the UTC-epoch clock, in ns
MS = 1_000_000
START, END = "1776781226.561295056", "1776781226.579295056"
W0, W1 = S + 561_295_056, S + 579_295_056


def utc_export(path):
    """Kernels on one stream at [560, 565], [570, 575], [578, 590] ms past second 1776781226.
    Trimmed to [561.295056, 579.295056) ms: W = 18,000,000 ns; busy = (565 - 561.295056) + 5 +
    (579.295056 - 578) ms = 3,704,944 + 5,000,000 + 1,295,056 = 10,000,000 ns; idle 8,000,000 ns."""
    w = ExportWriter(str(path))
    for s, e in [(560, 565), (570, 575), (578, 590)]:
        w.kernel(pid=10, device=0, stream=7, start=S + s * MS, end=S + e * MS, name="gemm")
    return w.close()


def assert_exact_window(out):
    row = pd.read_csv(out / "fleet.csv", keep_default_na=False).iloc[0]
    assert row["status"] == "ok", row["error"]
    assert (row["window_rule"], int(row["window_start_ns"]), int(row["window_end_ns"])) == ("trim", W0, W1)
    assert (int(row["window_ns"]), int(row["busy_ns"]), int(row["idle_ns"])) == (18 * MS, 10 * MS, 8 * MS)
    parquet = pd.read_parquet(out / "fleet.parquet").iloc[0]
    assert (int(parquet["window_start_ns"]), int(parquet["window_end_ns"])) == (W0, W1)


def test_trim_on_the_utc_epoch_clock_lands_on_exact_nanoseconds(tmp_path):
    """`--trim 1776781226.561295056 1776781226.579295056`: W = [1776781226561295056,
    1776781226579295056) exactly (before: +48 ns and +176 ns, through a float)."""
    path = utc_export(tmp_path / "utc.sqlite")
    out = tmp_path / "out"
    run_cli("run", path, "--out", str(out), "--trim", START, END, "--no-cache")
    assert_exact_window(out)


def test_trim_from_yaml_text_is_exact_and_yaml_floats_that_cannot_hold_ns_are_refused(tmp_path):
    """The same window from a config file, written as strings; written as YAML floats (which
    cannot hold ns at 1.78e9 s: their spacing there is 238 ns) it is refused before any work,
    with exit status 2 and a message naming the file and the key and saying to quote it."""
    path = utc_export(tmp_path / "utc.sqlite")
    text = tmp_path / "trim.yaml"
    text.write_text(f"analysis:\n  trim_s: ['{START}', '{END}']\n")
    out = tmp_path / "out"
    run_cli("run", path, "--out", str(out), "--config", str(text), "--no-cache")
    assert_exact_window(out)
    floats = tmp_path / "floats.yaml"
    floats.write_text(f"analysis:\n  trim_s: [{START}, {END}]\n")
    proc = run_cli("run", path, "--out", str(tmp_path / "out2"), "--config", str(floats), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"gpu-idle: ERROR: {floats}: analysis.trim_s: should be written as a string (quoted, with every digit): "
            "1776781226.561295 is a float, which cannot hold nanoseconds at this size (floats are 238 ns apart "
            "here), got [1776781226.561295, 1776781226.5792952]") in " ".join(proc.stderr.split())
    assert not (tmp_path / "out2").exists()


@pytest.mark.parametrize("text, ns", [
    ("1776781226.561295056", 1_776_781_226_561_295_056),
    ("1776781226.579295056", 1_776_781_226_579_295_056),
    ("0.0215", 21_500_000),
    ("60.2", 60_200_000_000),
    (" 7 ", 7_000_000_000),
    ("1e-3", 1_000_000),
    ("1.0000000015", 1_000_000_002),  # finer than 1 ns: rounded to the nearest (half to even)
    (Decimal("4.000000001"), 4_000_000_001),
    (60.2, 60_200_000_000),           # a small float still holds every ns: its decimal is recovered
    (3, 3_000_000_000),
])
def test_seconds_to_ns(text, ns):
    assert seconds_to_ns(text) == ns


@pytest.mark.parametrize("bad", ["abc", "", "nan", "inf", "1,5", True, 1776781226.561295056, None, [1]])
def test_seconds_to_ns_refuses_what_is_not_exact_seconds(bad):
    with pytest.raises(ValueError):
        seconds_to_ns(bad)


def test_trim_window_and_config_keep_exact_seconds():
    win = trim_window(START, END)
    assert (win.start_ns, win.end_ns) == (W0, W1)
    cfg = load_config([], {"analysis": {"trim_s": [START, END]}})
    assert cfg.analysis.trim_s == (Decimal(START), Decimal(END))
    kernels = pd.DataFrame({"start": [S], "end": [S + MS]})
    win = choose_window(kernels, None, "auto", cfg.analysis.trim_s)
    assert (win.rule, win.start_ns, win.end_ns) == ("trim", W0, W1)
    with pytest.raises(ConfigError, match=r"analysis.trim_s: END \(1776781226.561295056 s\) must be after START"):
        load_config([], {"analysis": {"trim_s": [END, START]}})
