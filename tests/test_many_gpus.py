"""A report of thousands of GPUs (issue 42 point 14): each GPU's cut out of the report costs its own rows,
not a pass over every row of the report (the grouping is built once per report), and a run in this process
counts the GPUs inside the report as it analyses them (a progress line, not silence for ten minutes)."""
from __future__ import annotations

import pandas as pd
import pytest
from click.testing import CliRunner

from pipeline.load.report import gpu_trace, load_report, plan_trace
from pipeline.synth import generate_training_report

#: The report-wide frames a GPU's cut reads.
FRAMES = ("kernels", "runtime", "copies", "nvtx", "devices", "overhead", "untraced")


class Counted(pd.DataFrame):
    """A report frame that counts the reads of its columns (``frame[name]``) in ``reads``; what is cut out
    of it is a plain frame."""

    _metadata = ["reads"]

    @property
    def _constructor(self):
        return pd.DataFrame

    def __getitem__(self, key):
        if isinstance(key, str):
            self.reads[key] = self.reads.get(key, 0) + 1
        return super().__getitem__(key)


def column_reads(path, gpus: int) -> dict:
    """Every GPU of the report at ``path`` cut out (:func:`plan_trace`, then :func:`gpu_trace`): how many
    times each report-wide frame's columns were read, ``{frame: {column: n}}``."""
    report = load_report(str(path))
    keys = report.gpu_keys()
    assert len(keys) == gpus
    reads = {}
    for name in FRAMES:
        counted = Counted(getattr(report, name))
        counted.reads = reads.setdefault(name, {})
        setattr(report, name, counted)
    for key in keys:
        plan, trace = plan_trace(report, key), gpu_trace(report, key)
        assert len(plan.kernels) == len(trace.kernels) > 0 and trace.gpu_key == key
    return {name: got for name, got in reads.items() if got}


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    folder = tmp_path_factory.mktemp("many")
    out = {}
    for gpus in (3, 8):
        out[gpus] = folder / f"g{gpus}.sqlite"
        generate_training_report(str(out[gpus]), gpus=gpus, iterations=4, seed=gpus)
    return out


def test_each_gpus_cut_reads_no_report_wide_column_again(reports):
    """Before: every GPU's cut compared every row of the report's kernels, copies, devices and NVTX ranges
    with its own key (a pass over the report per GPU: quadratic in GPUs; 10,000 GPUs ran over 10 minutes).
    Now each report-wide column is read once per report, to group its rows, whatever the number of GPUs:
    the same reads for 3 GPUs and for 8."""
    few, many = column_reads(reports[3], 3), column_reads(reports[8], 8)
    assert few == many
    assert all(n == 1 for columns in many.values() for n in columns.values()), many
    assert many["kernels"] == {"gpu_key": 1} and many["devices"] == {"gpu_key": 1}


def test_each_gpus_cut_is_the_filter_of_its_rows(reports):
    """Variant: the grouped cut holds exactly the rows a plain filter of each frame gives (same rows, same
    order), for every GPU of the report."""
    report = load_report(str(reports[8]))
    for key in report.gpu_keys():
        trace = gpu_trace(report, key)
        pids = list(trace.pids)
        want = report.kernels[report.kernels["gpu_key"] == key].reset_index(drop=True)
        pd.testing.assert_frame_equal(trace.kernels, want)
        want = report.copies[report.copies["gpu_key"] == key].reset_index(drop=True)
        pd.testing.assert_frame_equal(trace.copies, want)
        want = report.nvtx[report.nvtx["pid"].isin(pids)].reset_index(drop=True)
        pd.testing.assert_frame_equal(trace.nvtx, want)
        assert sorted(set(report.devices.loc[report.devices["gpu_key"] == key, "pid"])) == pids


def test_a_run_counts_the_gpus_inside_its_one_report(reports, tmp_path, monkeypatch):
    """Before: a run over one report printed "analysing 1 reports" and nothing more until the report was
    done. Now the GPUs inside it are counted: a line when they start, one per 10 % once the line interval
    has passed (set to 0 s here), and the last when all 8 are done."""
    import pipeline.progress as progress
    from pipeline.cli import main

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    result = CliRunner().invoke(main, ["run", str(reports[8]), "--out", str(tmp_path / "out"), "--no-cache"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith(progress.PREFIX + "")]
    gpus = [line[len(progress.PREFIX):] for line in lines if "GPUs" in line]
    assert gpus[0] == "analysing 8 GPUs"
    assert [line.split(" GPUs")[0] for line in gpus[1:-1]] == [f"{n}/8" for n in range(1, 8)]
    assert gpus[-1].startswith("8/8 GPUs done in ")
    assert lines[0] == progress.PREFIX + "analysing 1 reports" and lines[-1].startswith(progress.PREFIX + "1/1 reports")


def mig_checks(path, monkeypatch) -> int:
    """How many times loading the report at ``path`` asks whether a uuid is a MIG instance's
    (:func:`pipeline.load.gpus.is_mig`), the step every listed GPU took for every device before."""
    import pipeline.load.gpus as gpus

    calls = []
    real = gpus.is_mig
    monkeypatch.setattr(gpus, "is_mig", lambda uuid: calls.append(uuid) or real(uuid))
    load_report(str(path))
    return len(calls)


def test_each_device_is_identified_without_a_pass_over_the_listed_gpus(reports, monkeypatch):
    """Before: identifying each device (pid, CUDA ordinal) passed over every GPU TARGET_INFO_GPU lists (its
    boards, twice per listed GPU), so the loader's GPU identity was quadratic in GPUs: 10,000 GPUs spent 23 CPU-s there
    (0.14 s now) before the first GPU was analysed. Now the listing is indexed once per report: the checks grow
    by the same number per GPU, 3 GPUs or 8 (before: 18 checks for 3 GPUs, 88 for 8; now 15 and 40)."""
    few, many = mig_checks(reports[3], monkeypatch), mig_checks(reports[8], monkeypatch)
    assert few * 8 == many * 3, (few, many)
    assert many <= 5 * 8   # 5 per GPU now


def progress_lines(path, out, monkeypatch, **limits) -> list[str]:
    """The ``gpu-idle: progress:`` lines (without the prefix) of ``gpu-idle run PATH --out OUT --no-cache`` in this
    process, with :mod:`pipeline.work.tasks`'s line thresholds set to ``limits``."""
    import pipeline.progress as progress
    import pipeline.work.tasks as tasks
    from pipeline.cli import main

    for name, value in limits.items():
        monkeypatch.setattr(tasks, name, value)
    result = CliRunner().invoke(main, ["run", str(path), "--out", str(out), "--no-cache"])
    assert result.exit_code == 0, result.output
    return [line[len(progress.PREFIX):] for line in result.stderr.splitlines() if line.startswith(progress.PREFIX)]


def test_a_small_report_gets_no_reading_or_writing_lines(reports, tmp_path, monkeypatch):
    """A report far under the thresholds (a few hundred kB, 3 GPUs) says what it said before and no more: the
    report and its GPUs, each started and done (no line between them: the run takes less than 30 s)."""
    lines = progress_lines(reports[3], tmp_path / "out", monkeypatch)
    assert [line.split(" done in ")[0] for line in lines] == [
        "analysing 1 reports", "analysing 3 GPUs", "3/3 GPUs", "1/1 reports"]


def test_a_large_report_says_what_it_reads_plans_and_writes(reports, tmp_path, monkeypatch):
    """Before: from "analysing 1 reports" to the first GPU line (reading the export, then planning every GPU's
    iterations: over two minutes at 10,000 GPUs), and from the last GPU line to the end (writing 10,000 GPU files,
    then the fleet tables and the job's record: minutes), nothing was said. Now a report file of at least
    READ_LINE_MB MB says it is read, and a report of at least MANY_GPUS GPUs counts their plans and their GPU files,
    and says when the fleet rows are written (thresholds set low here: the file's MB, rounded up, and 8 GPUs; the
    line interval set to 0 s, so a line per 10 % done)."""
    import os

    import pipeline.progress as progress

    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)
    mb = -(-os.path.getsize(reports[8]) // 1_000_000)
    lines = progress_lines(reports[8], tmp_path / "out", monkeypatch, READ_LINE_MB=mb, MANY_GPUS=8)
    counted = [f"{n}/8" for n in range(1, 8)]
    assert lines[:3] == ["analysing 1 reports", f"reading {mb} MB of g8.sqlite", lines[2]]
    assert lines[2].startswith(f"{mb}/{mb} MB of g8.sqlite done in ")
    assert lines[3] == "making 8 GPU plans" and lines[11].startswith("8/8 GPU plans done in ")
    assert [line.split(" GPU plans")[0] for line in lines[4:11]] == counted
    assert lines[12] == "analysing 8 GPUs" and lines[20].startswith("8/8 GPUs done in ")
    assert lines[21] == "writing 8 GPU files" and lines[29].startswith("8/8 GPU files done in ")
    assert [line.split(" GPU files")[0] for line in lines[22:29]] == counted
    assert lines[30].startswith("1/1 reports done in ")
    assert lines[31] == "writing 8 fleet rows" and lines[32].startswith("8/8 fleet rows done in ")
    assert len(lines) == 33 and len(os.listdir(tmp_path / "out" / "gpus")) == 8
    # one GPU fewer than the threshold, one MB more than the file: none of these lines
    lines = progress_lines(reports[8], tmp_path / "out2", monkeypatch, READ_LINE_MB=mb + 1, MANY_GPUS=9)
    assert [line.split(" (")[0].split(" done in ")[0] for line in lines] == [
        "analysing 1 reports", "analysing 8 GPUs", *[f"{n}/8 GPUs" for n in range(1, 8)], "8/8 GPUs", "1/1 reports"]
