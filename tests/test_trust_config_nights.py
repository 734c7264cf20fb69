"""Issue 42 (round 3), points 4, 5, 8, 9 and 13: never trust a file the product did not vouch for, never hang.

4. A sweep night far ahead of the clock is refused (exit 2) unless forced (``--future-night``); the current
   night of a state folder is the latest one not in the future. Before: ``--night 2062-12-03`` stayed the
   current night for good, every report showing a change against it.
5. A YAML mapping holding one key twice is an error naming both lines, as is a rate card pricing one model
   twice; a label rule or a cluster rate that matches nothing is a warning naming it. Before: the last key won
   silently ($9.00 instead of $1.00), a typo'd cluster rate priced nothing without a word.
8. A cache folder that cannot be written (a file in its place) is not used, said once; Dask's scratch space is
   a temporary folder of the run's own. Before: every run of two reports and every sweep ended in a traceback.
9. A rate file that replaces the card without the default model is refused at load (exit 2 naming the key).
   Before: it loaded, then every GPU with no entry of its own failed with "please report it".
13. A ``--config`` that is no regular file or larger than ``config.MAX_CONFIG_BYTES`` is refused
   at once. Before: ``/dev/zero`` was read until the kernel killed the process, a FIFO hung for ever.

Errors are one ``gpu-idle: ERROR:`` line and exit status 2 (README's exit-status table).
"""
from __future__ import annotations

import datetime as dt
import os
import resource
import tempfile

import pytest
from click.testing import CliRunner
from conftest import run_cli

from pipeline import io
from pipeline.cli import main
from pipeline import config
from pipeline.config import ConfigError, load_config
from pipeline.synth import ExportWriter

MS = 1_000_000


def export(path, device=0) -> str:
    """A tiny export: one GPU, two 1 ms kernels 2 ms apart."""
    w = ExportWriter(str(path))
    w.kernel(pid=10, device=device, stream=7, start=0, end=MS, name="gemm")
    w.kernel(pid=10, device=device, stream=7, start=3 * MS, end=4 * MS, name="gemm")
    return w.close()


def cli(*args, env=None):
    """``gpu-idle ARGS`` in this process; returns (exit status, stdout, stderr lines)."""
    result = CliRunner().invoke(main, [str(a) for a in args], env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr.splitlines()


def refused(tmp_path, text: str) -> str:
    """The message of :func:`load_config` on a file holding ``text``, after ``<file>: ``."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_config([path])
    assert str(exc.value).startswith(f"{path}: "), exc.value
    return str(exc.value)[len(f"{path}: "):]


# -- 13: a config file has a size bound and must be a regular file -------------------------------------------


def _memory_bound():
    """In the child: at most 3 GiB of address space, so that a run reading /dev/zero fails fast instead of
    taking the machine's memory (what main did, until the kernel killed it)."""
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


@pytest.mark.parametrize("what", ["device", "fifo", "link"])
def test_a_config_that_is_no_regular_file_is_refused_at_once(tmp_path, what):
    """``--config /dev/zero``, a FIFO nobody writes, a YAML-named link to /dev/urandom: exit 2 within seconds, one line naming the file
    and what it is; nothing written. Bounded: the process is killed after 60 s (main hung on the FIFO, and
    read /dev/zero until memory ran out)."""
    report = export(tmp_path / "one.sqlite")
    config = {"device": "/dev/zero", "fifo": str(tmp_path / "fifo.yaml"), "link": str(tmp_path / "l.yaml")}[what]
    if what == "fifo":
        os.mkfifo(config)
    if what == "link":
        os.symlink("/dev/urandom", config)
    proc = run_cli("run", report, "--out", str(tmp_path / "out"), "--config", config, check=False, timeout=60,
                   preexec_fn=_memory_bound)
    kind = {"device": "a device", "fifo": "a FIFO", "link": "a device"}[what]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.splitlines() == [f"gpu-idle: ERROR: {config}: cannot read config: {kind}, not a regular file"]
    assert proc.stdout == "" and not (tmp_path / "out").exists()


def test_a_config_larger_than_the_bound_is_refused_without_parsing(tmp_path):
    """A 26 MB trace given as --config by mistake (here: 1 byte over the bound, of valid YAML comments) is
    refused naming its size and the bound; a file of exactly the bound loads."""
    MAX_CONFIG_BYTES = config.MAX_CONFIG_BYTES
    line = "# " + "x" * 97 + "\n"  # 100 bytes
    at_bound = tmp_path / "at.yaml"
    at_bound.write_text("analysis: {roster_size: 7}\n" + line * ((MAX_CONFIG_BYTES - 27) // 100)
                        + "#" * ((MAX_CONFIG_BYTES - 27) % 100))
    assert at_bound.stat().st_size == MAX_CONFIG_BYTES
    assert load_config([at_bound]).analysis.roster_size == 7
    over = tmp_path / "over.yaml"
    over.write_bytes(at_bound.read_bytes() + b"#")
    with pytest.raises(ConfigError) as exc:
        load_config([over])
    assert str(exc.value) == (f"{over}: cannot read config: {MAX_CONFIG_BYTES + 1:,} bytes, more than the "
                              f"{MAX_CONFIG_BYTES:,} a config file may hold (is it a config file?)")
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [' + ", ".join(['{"ph": "X", "ts": 1, "dur": 2}'] * 1_000_000) + "]}")
    code, out, err = cli("run", export(tmp_path / "one.sqlite"), "--out", tmp_path / "o", "--config", trace)
    assert code == 2 and out == ""
    assert err == [f"gpu-idle: ERROR: {trace}: cannot read config: {trace.stat().st_size:,} bytes, more than the "
                   f"{MAX_CONFIG_BYTES:,} a config file may hold (is it a config file?)"]


# -- 5: duplicate keys are an error naming both lines; what matches nothing is a warning naming it ------------


def test_duplicate_yaml_keys_are_an_error_naming_both_lines(tmp_path):
    """Two ``cost:`` sections (the second would silently replace the first), two prices for one model in a
    cluster's rates ($1.00 then $9.00: $9.00 was used), the same key at the top of a slurm jobqueue file."""
    assert refused(tmp_path, "cost:\n  hours_per_month: 700\nanalysis: {}\ncost:\n  default_model: A100\n") == (
        "duplicate key 'cost' at line 1 and line 4: YAML would keep only the last; write it once")
    assert refused(tmp_path, "labels:\n  - {match: '*', cluster: a}\ncost:\n  cluster_rates:\n    a:\n"
                             "      H100: 1.00\n      A100: 2.0\n      H100: 9.00\n") == (
        "duplicate key 'H100' at line 6 and line 8: YAML would keep only the last; write it once")
    # in a flow mapping, and a key YAML reads as a number
    assert refused(tmp_path, "cost: {cluster_rates: {a: {H100: 1.0, H100: 9.0}}}\n") == (
        "duplicate key 'H100' at line 1 and line 1: YAML would keep only the last; write it once")
    assert refused(tmp_path, "labels:\n  - match: '*'\n    rank: 1\n    rank: 2\n") == (
        "duplicate key 'rank' at line 3 and line 4: YAML would keep only the last; write it once")


def test_keys_met_again_legitimately_still_load(tmp_path):
    """The same key in two mappings, and a key a ``<<`` merge brought in, given again: no error."""
    path = tmp_path / "ok.yaml"
    path.write_text("labels:\n  - &base {match: 'a*', cluster: east, job: j}\n  - <<: *base\n    match: 'b*'\n"
                    "    job: k\ncost:\n  cluster_rates: {east: {H100: 3.0}}\n")
    cfg = load_config([path])
    assert [(r.match, r.cluster, r.job) for r in cfg.labels] == [("a*", "east", "j"), ("b*", "east", "k")]
    assert cfg.cost.cluster_rates == {"east": {"H100": 3.0}}


def test_a_card_pricing_one_model_twice_is_an_error_naming_both(tmp_path):
    """Two entries for one model at $1.00 and $9.00 (model names compared as the card does: case and spaces
    aside): only one would have been used. The same model for a MIG profile (``sms``) is another entry."""
    assert refused(tmp_path, "cost:\n  rates:\n    - {model: H100, usd_per_gpu_hour: 1.00}\n"
                             "    - {model: L4, usd_per_gpu_hour: 0.5}\n    - {model: ' h100', usd_per_gpu_hour: 9.00}\n"
                   ) == ("cost.rates.0 and cost.rates.2 both price ' h100' (at 1.0 and 9.0 USD/GPU-hour): only one "
                         "would be used; keep one entry per model")
    assert refused(tmp_path, "cost:\n  rates:\n    - {model: A100, usd_per_gpu_hour: 0.3, sms: 14}\n"
                             "    - {model: A100, usd_per_gpu_hour: 0.4, sms: 14}\n") == (
        "cost.rates.0 and cost.rates.1 both price 'A100' (sms 14) (at 0.3 and 0.4 USD/GPU-hour): only one would be "
        "used; keep one entry per model")
    path = tmp_path / "mig.yaml"
    path.write_text("cost:\n  rates:\n    - {model: A100, usd_per_gpu_hour: 0.3, sms: 14}\n"
                    "    - {model: A100, usd_per_gpu_hour: 2.0}\n")
    rates = {(r.model, r.sms): r.usd_per_gpu_hour for r in load_config([path]).cost.rates}
    assert rates[("A100", 14)] == 0.3 and rates[("A100", 0)] == 2.0


def test_a_duplicate_key_stops_the_run_with_one_line(tmp_path):
    """``gpu-idle run`` and ``sweep``: exit 2, one ``gpu-idle: ERROR:`` line, nothing written."""
    report = export(tmp_path / "one.sqlite")
    bad = tmp_path / "bad.yaml"
    bad.write_text("cost:\n  cluster_rates:\n    default: {H100: 1.00, H100: 9.00}\n")
    for args in (["run", report, "--out", tmp_path / "out"], ["sweep", report, "--state-dir", tmp_path / "out"]):
        code, out, err = cli(*args, "--config", bad)
        assert (code, out) == (2, "")
        assert err == [f"gpu-idle: ERROR: {bad}: duplicate key 'H100' at line 3 and line 3: YAML would keep only the "
                       "last; write it once"]
        assert not (tmp_path / "out").exists()


def test_rules_and_rates_that_match_nothing_are_warnings_naming_them(tmp_path):
    """A label rule no report fits, a cluster rate for a cluster no rule gives (a typo), a cluster rate for a
    model the card does not name exactly: each one warning naming it; the prices are those of the card."""
    path = tmp_path / "c.yaml"
    path.write_text("labels:\n  - {match: 'job*', cluster: east}\n  - {match: '*/nowhere/*', job: x}\n"
                    "cost:\n  cluster_rates:\n    east: {H100: 3.0, h100: 2.0}\n    eats: {H100: 1.0}\n")
    cfg = load_config([path])
    reports = [str(tmp_path / "job1.sqlite"), str(tmp_path / "other.sqlite")]
    assert cfg.unused_rules(reports) == [
        "labels.1 (match '*/nowhere/*') fits none of the 2 report(s): it labels nothing",
        "cost.cluster_rates.east.h100: no rate-card entry is named 'h100' (an override names a cost.rates model "
        "exactly): it prices nothing",
        "cost.cluster_rates.eats: no label rule gives cluster 'eats' (clusters: default, east): its rates price "
        "nothing"]
    assert cfg.unused_rules([]) == cfg.unused_rules(reports)[1:]  # no report found: no rule judged by it
    assert load_config([]).unused_rules(reports) == []
    ok = tmp_path / "ok.yaml"
    ok.write_text("labels:\n  - {match: 'job*', cluster: east}\ncost:\n  cluster_rates:\n    east: {H100: 3.0}\n"
                  "    default: {H100: 2.0}\n")
    assert load_config([ok]).unused_rules(reports) == []
    # in a run: on its output, once each, and the row is priced as the card says (the rules change nothing)
    job = export(tmp_path / "job1.sqlite")
    code, out, err = cli("run", job, "--out", tmp_path / "out", "--config", path, "--no-cache")
    assert code == 0, err
    warnings = [line for line in out.splitlines() if line.startswith("WARNING: ")]
    assert warnings == ["WARNING: labels.1 (match '*/nowhere/*') fits none of the 1 report(s): it labels nothing",
                        *(f"WARNING: {w}" for w in cfg.unused_rules(reports)[1:])]
    import pandas as pd

    fleet = pd.read_parquet(tmp_path / "out" / "fleet.parquet")
    assert fleet["cluster"].tolist() == ["east"] and fleet["rate_usd_per_hour"].tolist() == [3.0]


# -- 9: a rate file that replaces the card without the default model is refused at load -----------------------


def test_a_replaced_card_without_the_default_model_is_refused_at_load(tmp_path):
    """``rates_replace`` with a card lacking ``cost.default_model`` (H100): exit 2 naming the key and the card's
    models, before any work. Before: it loaded, then every GPU failed with "please report it"."""
    text = ("cost:\n  rates_replace: true\n  rates:\n    - {model: A100, usd_per_gpu_hour: 2.0, match: ['*A100*']}\n"
            "    - {model: H100, usd_per_gpu_hour: 0.5, sms: 16}\n")
    message = ("cost.default_model: 'H100' has no whole-GPU entry on the rate card (cost.rates_replace: the card is "
               "the file's entries alone); its models: A100. Add an entry for it, or name one of them")
    assert refused(tmp_path, text) == message
    report = export(tmp_path / "one.sqlite")
    code, out, err = cli("run", report, "--out", tmp_path / "out", "--config", tmp_path / "c.yaml")
    assert (code, out, err) == (2, "", [f"gpu-idle: ERROR: {tmp_path / 'c.yaml'}: {message}"])
    assert not (tmp_path / "out").exists()
    # a default model that names no entry at all, without replacing the card
    assert refused(tmp_path, "cost: {default_model: H800}\n").startswith(
        "cost.default_model: 'H800' has no whole-GPU entry on the rate card; its models: H100 NVL, H100 PCIe, H100,")


def test_a_default_model_given_in_another_file_than_its_entry_loads(tmp_path):
    """Layering: one file adds a model, the next names it the default; a replaced card naming its own
    default: both load, and price an unnamed GPU at that entry."""
    card = tmp_path / "card.yaml"
    card.write_text("cost:\n  rates:\n    - {model: X9, usd_per_gpu_hour: 7.0, match: ['*X9*']}\n")
    default = tmp_path / "default.yaml"
    default.write_text("cost: {default_model: X9}\n")
    assert load_config([card, default]).cost.default_model == "X9"
    with pytest.raises(ConfigError, match=r"^.*default\.yaml: cost\.default_model: 'X9' has no whole-GPU entry"):
        load_config([default])
    own = tmp_path / "own.yaml"
    own.write_text("cost:\n  rates_replace: true\n  default_model: A100\n  rates:\n"
                   "    - {model: A100, usd_per_gpu_hour: 2.0, match: ['*A100*']}\n")
    from pipeline.analysis.cost import find_rate

    cfg = load_config([own])
    assert [r.model for r in cfg.cost.rates] == ["A100"]
    assert find_rate("", cfg.cost).usd_per_gpu_hour == 2.0


# -- 4: a night far ahead of the clock -----------------------------------------------------------------------


def test_when_a_night_is_in_the_future():
    """A night is in the future when it is more than one day after today's UTC date (the date of any time zone
    is today's or tomorrow's in UTC); the current night is the latest not in the future."""
    assert not io.in_future("2026-12-07", today="2026-12-06")
    assert io.in_future("2026-12-08", today="2026-12-06")
    assert not io.in_future("2026-01-01", today="2026-12-06")
    assert io.in_future("2027-01-02", today="2026-12-31") and not io.in_future("2027-01-01", today="2026-12-31")
    today = dt.datetime.now(dt.timezone.utc).date()
    future = (today + dt.timedelta(days=2)).isoformat()
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    assert io.current_night(["2026-11-01", "2062-12-03", "2026-11-02", future]) == "2026-11-02"
    assert io.current_night(["2026-11-01", tomorrow]) == tomorrow
    assert io.current_night(["2062-12-03"]) is None and io.current_night([]) is None


@pytest.mark.slow
def test_a_night_far_ahead_is_refused_unless_forced(tmp_path):
    """``gpu-idle sweep --night 2062-12-03``: exit 2, one line, no state folder. With ``--future-night`` it is
    written, and stays out of the current night: the report, ``report-only`` and a later night read the latest
    night not in the future, so no made-up change against 2062 is shown."""
    from pipeline.report.summary import load_results

    reports = tmp_path / "reports"
    reports.mkdir()
    export(reports / "a.sqlite")
    state = tmp_path / "state"
    code, out, err = cli("sweep", reports, "--state-dir", state, "--night", "2062-12-03")
    assert (code, out) == (2, "")
    today = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert err == [f"gpu-idle: ERROR: --night 2062-12-03 is in the future (today is {today}, UTC): it would stay "
                   "the state folder's latest night; give --future-night to write it anyway"]
    assert not state.exists()
    code, out, err = cli("sweep", reports, "--state-dir", state, "--night", "2026-11-01")
    assert code == 0, err
    export(reports / "b.sqlite", device=1)  # the future night holds one report more: a change if compared
    code, out, err = cli("sweep", reports, "--state-dir", state, "--night", "2062-12-03", "--future-night")
    assert code == 0, err
    assert sorted(os.listdir(state / "nights")) == ["2026-11-01", "2062-12-03"]
    results = load_results(str(state))
    assert results.current_date == "2026-11-01"
    assert [d for d, _ in results.history] == ["2026-11-01"] and len(results.current) == 1
    assert load_results(str(state), night="2062-12-03").current_date == "2062-12-03"  # asked for by name
    code, out, err = cli("sweep", "--state-dir", state, "--report-only")
    assert code == 0 and out.startswith(f"rebuilt {state / 'nights' / '2026-11-01'} "), (out, err)


# -- 8: a cache folder that cannot be written ------------------------------------------------------------------


def test_dask_scratch_is_a_temporary_folder_of_its_own(tmp_path, monkeypatch):
    """Whatever the cache folders are: a new folder under the temporary folder, removed afterwards."""
    from pipeline.engine.cluster import scratch_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with scratch_dir() as one, scratch_dir() as two:
        assert one != two and os.path.dirname(one) == os.path.dirname(two) == str(tmp_path)
        assert os.path.isdir(one) and os.path.isdir(two)
    assert os.listdir(tmp_path) == []


def test_unwritable_reason():
    """A file in the folder's place (or in its path), a folder that can be written, one to be made."""
    with tempfile.TemporaryDirectory() as root:
        file = os.path.join(root, "file")
        open(file, "w").close()
        assert io.unwritable_reason(file) == f"{file} is a file, not a folder"
        assert io.unwritable_reason(os.path.join(file, "columns")) == f"{file} is a file, not a folder"
        assert io.unwritable_reason(root) is None
        assert io.unwritable_reason(os.path.join(root, "new", "deeper")) is None
        assert not os.path.exists(os.path.join(root, "new"))  # nothing made


@pytest.mark.slow
@pytest.mark.parametrize("env_name, what", [("GPU_IDLE_CACHE", "cache"), ("GPU_IDLE_EXPORT_CACHE", "export cache")])
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_cache_folder_that_cannot_be_written_is_not_used_and_said_once(tmp_path, env_name, what, command):
    """A file in the cache folder's place: a run of two reports (a LocalCluster) and a sweep analyse every
    report and write their outputs, exit 0, with one line saying the caches are not used. Before: a traceback
    from Dask's scratch folder under the cache, nothing written. Bounded: killed after 300 s."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for i in range(2):
        export(reports / f"r{i}.sqlite", device=i)
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    out = tmp_path / "out"
    args = (["run", str(reports), "--out", str(out)] if command == "run"
            else ["sweep", str(reports), "--state-dir", str(out), "--night", "2026-11-01"])
    proc = run_cli(*args, check=False, env={env_name: str(blocker)}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "not used" in line]
    assert said == [f"gpu-idle: caches not used: the {what} folder {blocker} cannot be written ({blocker} is a file, "
                    "not a folder); every report is read from its file, as with --no-cache"]
    assert "dask: LocalCluster with 2 worker processes" in proc.stdout
    fleet = out / ("fleet.csv" if command == "run" else "nights/2026-11-01/fleet.csv")
    assert len(fleet.read_text().splitlines()) == 3  # the header and one row per report's GPU
    assert blocker.read_text() == "not a folder"
