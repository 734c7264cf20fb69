"""Every number a config gives is finite and bounded (issue 23, point 11): a huge or infinite value is
refused when the config is loaded, exit 2 and one line naming the file and the key, before any report is
read. Before: ``dask.memory_limit: 1e400`` was a traceback (OverflowError), ``1e30`` bytes or a 42-digit
integer were taken as a worker's memory, a rate of 1e300 USD/GPU-hour or a memory factor of 1e300 were
accepted, and ``trim_s: [1.0e+400, 1.0e+401]`` said ``got inf, got [inf, inf]``.
"""
from __future__ import annotations


import pytest
from conftest import PROFILES, run_cli

TINY = PROFILES / "tiny_2kernels.sqlite"
#: 2**53 (the bound of float settings, pipeline.config.MAX_NUMBER) and 2**63 - 1, stated independently.
FLOAT_BOUND, INT64_MAX = 9007199254740992, 9223372036854775807
NO_SIZE = "dask.memory_limit {!r} is not a size like 4GiB ({})"
BEYOND = f"more than {INT64_MAX:,} bytes, beyond any machine's memory"

#: name -> (YAML text, the message after "gpu-idle: ERROR: <file>: ")
CASES = {
    "memory_limit_1e400": ("dask: {memory_limit: 1e400}\n", NO_SIZE.format("1e400", "not a finite number of bytes")),
    "memory_limit_1e400_gb": ("dask: {memory_limit: '1e400 GB'}\n",
                              NO_SIZE.format("1e400 GB", "not a finite number of bytes")),
    "memory_limit_1e30": ("dask: {memory_limit: 1e30}\n", NO_SIZE.format("1e30", BEYOND)),
    "memory_limit_42_digits": (f"dask: {{memory_limit: {10**41}}}\n",
                               f"dask.memory_limit.str: should be a valid string, got {10**41}; "
                               f"dask.memory_limit.constrained-int: should be less than or equal to {INT64_MAX}, "
                               f"got {10**41}"),
    "memory_factor_1e300": ("dask: {memory_factor: 1.0e+300}\n",
                            f"dask.memory_factor: should be less than or equal to {FLOAT_BOUND}, got 1e+300"),
    "rate_1e300": ("cost: {rates: [{model: H100, usd_per_gpu_hour: 1.0e+300}]}\n",
                   f"cost.rates.0.usd_per_gpu_hour: should be less than or equal to {FLOAT_BOUND}, got 1e+300"),
    "rate_sms_huge": (f"cost: {{rates: [{{model: H100, usd_per_gpu_hour: 2.0, sms: {10**30}}}]}}\n",
                      f"cost.rates.0.sms: should be less than or equal to {INT64_MAX}, got {10**30}"),
    "outlier_factor_huge": ("window: {outlier_factor: 1.0e+200}\n",
                            f"window.outlier_factor: should be less than or equal to {FLOAT_BOUND}, got 1e+200"),
    "trim_inf": ("analysis: {trim_s: [1.0e+400, 1.0e+401]}\n",
                 "analysis.trim_s: should be a finite number of seconds, not inf, got [inf, inf]"),
}


@pytest.mark.parametrize("name", CASES)
def test_a_huge_number_in_a_config_is_refused_at_load_naming_its_key(tmp_path, name):
    text, message = CASES[name]
    config = tmp_path / f"{name}.yaml"
    config.write_text(text, encoding="utf-8")
    proc = run_cli("run", str(TINY), "--out", str(tmp_path / "out"), "--config", str(config), check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("gpu-idle: ERROR:")]
    assert errors == [f"gpu-idle: ERROR: {config}: {message}"], proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text", ["analysis: {min_gap_ns: 1e32}\n", "analysis: {trim_s: [1e400, 1e401]}\n"])
def test_huge_values_main_already_refused_stay_refused(tmp_path, text):
    """``min_gap_ns: 1e32`` (YAML text, not a number) and ``trim_s`` beyond the int64 ns clock: exit 2 naming the key."""
    config = tmp_path / "c.yaml"
    config.write_text(text, encoding="utf-8")
    proc = run_cli("run", str(TINY), "--out", str(tmp_path / "out"), "--config", str(config), check=False)
    key = "analysis.min_gap_ns" if "min_gap" in text else "analysis.trim_s"
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"gpu-idle: ERROR: {config}: {key}: should be" in proc.stderr
