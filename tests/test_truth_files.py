"""gpu-idle's own truth files (``<report>.truth.json`` beside every generated export and trace) are
recognised as such by the folder search, whichever generator wrote them and however it laid out
the JSON, and never listed as "skipped, not PyTorch profiler traces" (issue 23, point 13)."""
from __future__ import annotations

import os

from conftest import run_cli

from pipeline.inputs.discover import TRUTH, discover, skipped_note


def test_every_truth_file_the_synth_writes_is_known_as_gpu_idles_own(tmp_path):
    """`synth --example`, `synth --out` and `synth --kernels --out` (compact JSON): each truth file is
    skipped as gpu-idle's truth, and the run says nothing about skipped files. Before: the --kernels
    truth (no space after the colon) was "not a trace" and named on stderr."""
    folder = tmp_path / "in"
    folder.mkdir()
    run_cli("synth", "--example", str(folder / "example"))
    run_cli("synth", "--out", str(folder / "one.sqlite"), "--gpus", "1", "--iterations", "4")
    run_cli("synth", "--kernels", "2000", "--gpus", "2", "--out", str(folder / "scaled.sqlite"))
    truths = sorted(str(p) for p in folder.rglob("*.truth.json"))
    # 4 Nsight exports and 2 PyTorch profiler traces of the example, --out's and --kernels' exports
    assert len(truths) == 8 and str(folder / "scaled.sqlite.truth.json") in truths
    skipped = []
    reports, problems = discover([str(folder)], skipped=skipped)
    assert problems == []
    assert sorted(os.path.basename(p) for p in reports) == sorted(
        os.path.basename(p)[:-len(".truth.json")] for p in truths)
    assert skipped == [(p, TRUTH) for p in truths]
    assert skipped_note(skipped) is None


def test_the_scaled_truth_is_not_named_by_a_run(tmp_path):
    """`gpu-idle run` over a folder holding a `synth --kernels` export and its truth: stderr does not
    mention the truth file."""
    folder = tmp_path / "in"
    folder.mkdir()
    run_cli("synth", "--kernels", "1000", "--gpus", "1", "--out", str(folder / "scaled.sqlite"))
    run = run_cli("run", str(folder), "--out", str(tmp_path / "out"), "--no-cache")
    assert "skipped" not in run.stderr, run.stderr
    assert "1 GPU(s) in the fleet table, 0 report(s) failed" in run.stdout
