"""Issue 12, kind 7: the configuration is checked before any work.

A value of the wrong type or out of range is one message naming the file, the key and what is
expected, and exit status 2 before anything starts (no cluster, no report read, nothing written)
for `gpu-idle run` and `gpu-idle sweep` alike. Before: every GPU failed with numpy type errors,
or the fleet showed negative dollars.
"""
from __future__ import annotations

import dataclasses

import pytest
from conftest import run_cli

from pipeline.config import Config, ConfigError, load_config
from pipeline.synth import ExportWriter

MS = 1_000_000

#: The four cases of the issue: (YAML, the message after "<file>: ").
NAMED = [
    ("analysis:\n  min_gap_ns: 1e6\n",
     "analysis.min_gap_ns: should be a valid integer, got '1e6' (text, not a number; write it with digits "
     "only: 1000000)"),
    ("analysis:\n  roster_size: abc\n", "analysis.roster_size: should be a valid integer, got 'abc'"),
    ("cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: -4.0, match: ['*H100*']}\n",
     "cost.rates.0.usd_per_gpu_hour: should be greater than 0, got -4.0"),
    ("cost:\n  hours_per_month: 0\n", "cost.hours_per_month: should be greater than 0, got 0"),
]


@pytest.fixture
def report(tmp_path):
    w = ExportWriter(str(tmp_path / "one.sqlite"))
    w.kernel(pid=10, device=0, stream=7, start=0, end=MS, name="gemm")
    w.kernel(pid=10, device=0, stream=7, start=3 * MS, end=4 * MS, name="gemm")
    return w.close()


@pytest.mark.parametrize("yaml_text, message", NAMED)
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_bad_config_stops_before_any_work(tmp_path, report, yaml_text, message, command):
    """Exit status 2 and one message `<file>: <key>: <what is expected>, got <value>`; no output
    folder, no state folder, no cache, nothing analysed."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml_text)
    out = tmp_path / "out"
    env = {"GPU_IDLE_CACHE": str(tmp_path / "cache")}
    args = (["run", report, "--out", str(out)] if command == "run"
            else ["sweep", report, "--state-dir", str(out)])
    proc = run_cli(*args, "--config", str(bad), check=False, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"gpu-idle: ERROR: {bad}: {message}" in " ".join(proc.stderr.split())
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert not out.exists() and not (tmp_path / "cache").exists()


def write(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


def config_error(tmp_path, text) -> str:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        load_config([path])
    message = str(exc.value)
    assert message.startswith(f"{path}: "), message
    return message[len(f"{path}: "):]


def numeric_fields():
    """Every int or float setting of every section (the defaults tell the type)."""
    for section in dataclasses.fields(Config):
        if section.name == "labels":
            continue
        for f in dataclasses.fields(section.default):
            value = getattr(section.default, f.name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield section.name, f.name, value


NUMERIC = list(numeric_fields())


def test_every_numeric_setting_is_covered():
    """The variant below runs over all of them: 20-odd settings, not only the four of the issue."""
    names = {f"{s}.{k}" for s, k, _ in NUMERIC}
    assert {"analysis.min_gap_ns", "analysis.roster_size", "cost.hours_per_month", "categories.periodic_min_ns",
            "window.outlier_factor", "dask.n_workers", "export.timeout_s", "storage.backoff_s", "dask.batch_bytes",
            "dask.batch_reports", "cache.max_gib"} <= names
    assert len(NUMERIC) == 55  # with cache.max_gib (the columnar cache's bound), with dask.batch_bytes and dask.batch_reports (small reports in batches), with
    # categories.profiler_min_fraction, the 15 confidence.* tier thresholds (8 of
    # iterations, 2 caps of an unknown kind, 5 of serving), export.read_timeout_s, dask.connect_timeout_s,
    # window.max_left_out_idle_pct, meter.sample_ns, collective.chronic_share, the 6 diagnosis.* rule thresholds
    assert {f"diagnosis.{k}" for k in ("copy_stream_share", "pageable_share", "small_copy_bytes", "sync_regular_share",
                                       "break_point_share", "break_point_min_gaps")} <= names


@pytest.mark.parametrize("section, key, default", NUMERIC, ids=[f"{s}.{k}" for s, k, _ in NUMERIC])
def test_each_numeric_setting_refuses_text_and_negatives(tmp_path, section, key, default):
    """For each numeric setting: text is refused (it is not a number, whatever YAML made of it),
    and so is -1 (no count, length, share, rate or time here may be negative); the default passes."""
    text = config_error(tmp_path, f"{section}:\n  {key}: twenty\n")
    kind = "integer" if isinstance(default, int) else "number"
    assert text == f"{section}.{key}: should be a valid {kind}, got 'twenty'"
    text = config_error(tmp_path, f"{section}:\n  {key}: -1\n")
    assert text.startswith(f"{section}.{key}: should be greater than") and text.endswith(", got -1")
    assert getattr(getattr(load_config([write(tmp_path, f"{section}:\n  {key}: {default!r}\n")]), section), key) \
        == default


@pytest.mark.parametrize("yaml_text, message", [
    ("analysis:\n  launch_min_share: 1.5\n", "analysis.launch_min_share: should be less than or equal to 1, got 1.5"),
    ("analysis:\n  actionable_pct: 101\n", "analysis.actionable_pct: should be less than or equal to 100, got 101"),
    ("analysis:\n  window: spam\n",
     "analysis.window: should be 'auto', 'span', 'nvtx' or 'periodic', got 'spam'"),
    ("categories:\n  sync_min_fraction: 2\n", "categories.sync_min_fraction: should be less than or equal to 1, got 2"),
    ("categories:\n  collective_kernel: 'nccl('\n",
     "categories.collective_kernel: should be a regular expression (missing ), unterminated subpattern at "
     "position 4), got 'nccl('"),
    ("window:\n  iteration_patterns: ['Iteration \\d+', '[']\n",
     "window.iteration_patterns.1: should be a regular expression (unterminated character set at position 0), "
     "got '['"),
    ("window:\n  outlier_factor: 0.5\n", "window.outlier_factor: should be greater than or equal to 1, got 0.5"),
    ("window:\n  min_iterations: 0\n", "window.min_iterations: should be greater than or equal to 1, got 0"),
    ("cost:\n  hours_per_month: 7300\n",
     "cost.hours_per_month: should be less than or equal to 744, got 7300"),
    ("cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: 0}\n",
     "cost.rates.0.usd_per_gpu_hour: should be greater than 0, got 0"),
    ("cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: '4'}\n",
     "cost.rates.0.usd_per_gpu_hour: should be a valid number, got '4' (text, not a number; write it with "
     "digits only: 4)"),
    ("cost:\n  cluster_rates: {spot: {H100: -1.8}}\n",
     "cost.cluster_rates.spot.H100: should be greater than 0, got -1.8"),
    ("diagnosis:\n  break_point_share: 1.2\n", "diagnosis.break_point_share: should be less than or equal to 1, got 1.2"),
    ("diagnosis:\n  break_point_min_gaps: 0\n",
     "diagnosis.break_point_min_gaps: should be greater than or equal to 1, got 0"),
    ("diagnosis:\n  small_copy_bytes: 1.5\n", "diagnosis.small_copy_bytes: should be a valid integer, got 1.5"),
    ("dask:\n  n_workers: 0\n", "dask.n_workers: should be greater than or equal to 1, got 0"),
    ("dask:\n  no_workers_timeout_s: 0\n", "dask.no_workers_timeout_s: should be greater than 0, got 0"),
    ("cache:\n  enabled: 'no'\n", "cache.enabled: should be a valid boolean, got 'no'"),
    ("analysis:\n  min_gap_ns: 1500000.5\n", "analysis.min_gap_ns: should be a valid integer, got 1500000.5"),
    ("analysis:\n  roster_size: true\n", "analysis.roster_size: should be a valid integer, got True"),
])
def test_range_type_and_pattern_checks(tmp_path, yaml_text, message):
    assert config_error(tmp_path, yaml_text) == message


def test_defaults_and_real_configs_still_load():
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    assert load_config([repo / "configs" / "default.yaml"]) == Config()
    for name in ("profiles.yaml", "nightly.yaml"):
        load_config([repo / "configs" / name])
    assert load_config([], {"analysis": {"min_gap_ns": 500_000}, "cost": {"hours_per_month": 720}}).cost \
        .hours_per_month == 720.0


def _sections() -> list:
    """Every section dataclass of :mod:`pipeline.config`."""
    from pipeline import config as config_module

    return [v for v in vars(config_module).values()
            if isinstance(v, type) and dataclasses.is_dataclass(v) and v.__module__ == config_module.__name__]


def _literal_fields():
    """``(section class, field, words)`` of every setting declared ``Literal[...]`` (resolved as pydantic resolves it)."""
    import typing

    from pipeline import config as config_module

    config_module._value_types()
    out = []
    for section in _sections():
        for f in dataclasses.fields(section):
            declared = eval(f.type, vars(config_module))  # noqa: S307 - the module's own annotation text
            if typing.get_origin(declared) is typing.Literal:
                out.append((section, f.name, typing.get_args(declared)))
    return out


def test_a_literal_word_is_built_as_pydantic_builds_it_without_it():
    """A section whose every value is one of its field's Literal words (``--window span``) is built without
    pydantic (its ~0.1 s import): the same Config as pydantic's check gives, every word of every such field;
    a word that is not one (a wrong case, a number) still goes to pydantic and is refused naming the key."""
    from pipeline import config as config_module

    fields = _literal_fields()
    assert {(cls.__name__, name) for cls, name, _ in fields} >= {("AnalysisConfig", "window"), ("CostConfig", "unlisted")}
    for cls, name, words in fields:
        for word in words:
            assert config_module._one_of_its_words(next(f for f in dataclasses.fields(cls) if f.name == name), word)
            assert config_module._build(cls, {name: word}, "x", "s") == \
                config_module._adapter(cls).validate_python({name: word})
    assert load_config([], {"analysis": {"window": "span"}}) == Config(analysis=dataclasses.replace(
        Config().analysis, window="span"))
    assert load_config([], {"cost": {"unlisted": "assume"}}).cost.unlisted == "default"   # its __post_init__ ran
    for bad in ("Span", 1, None):
        with pytest.raises(ConfigError, match=r"^<defaults>: analysis\.window: should be 'auto', 'span', 'nvtx' or "
                                               r"'periodic', got "):
            load_config([], {"analysis": {"window": bad}})


def _whole_number_fields():
    """``(section class, field, (least, most))`` of every setting declared as one of the whole-number value types."""
    from pipeline import config as config_module

    return [(section, f, config_module.WHOLE_NUMBERS[f.type])
            for section in _sections() for f in dataclasses.fields(section) if f.type in config_module.WHOLE_NUMBERS]


def _outcome(build):
    try:
        return build()
    except ConfigError as exc:
        return ("refused", str(exc))


def test_a_whole_number_in_range_is_built_as_pydantic_builds_it_without_it():
    """A whole number within its value type's bounds (``--workers 2``) is built without pydantic (its import and
    the section's check, ~0.2 s of a run's start): what pydantic's check gives, at the bounds and next to them,
    for every such field; a value out of range, a bool, a float or a text still goes to pydantic, refused there."""
    from pipeline import config as config_module

    fields = _whole_number_fields()
    assert {(cls.__name__, f.name) for cls, f, _ in fields} >= {("DaskConfig", "n_workers"), ("AnalysisConfig", "min_gap_ns")}
    for cls, f, (least, most) in fields:
        for value in (least, least + 1, most):
            assert config_module._taken_as_is(f, value)
            assert _outcome(lambda: config_module._build(cls, {f.name: value}, "x", "s")) == \
                _outcome(lambda: config_module._build_checked(cls, {f.name: value}, "x", "s")), (cls, f.name, value)
        for bad in (least - 1, most + 1, True, float(least + 1), str(least + 1), None):
            assert not config_module._taken_as_is(f, bad), (cls, f.name, bad)
    with pytest.raises(ConfigError, match=r"^<defaults>: dask\.n_workers: should be greater than or equal to 1, got 0$"):
        load_config([], {"dask": {"n_workers": 0}})
    with pytest.raises(ConfigError, match=r"^<defaults>: dask\.n_workers: should be a valid integer, got True$"):
        load_config([], {"dask": {"n_workers": True}})


def test_workers_on_the_command_line_needs_no_pydantic():
    """`gpu-idle run ... --workers 3` (a dask.n_workers override): the config is built without importing pydantic."""
    import subprocess
    import sys

    from conftest import REPO

    probe = ("import sys; from pipeline.config import load_config; "
             "c = load_config([], {'dask': {'n_workers': 3}, 'analysis': {'window': 'span'}}); "
             "print(c.dask.n_workers, c.analysis.window, 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["3", "span", "False"], out.stderr
