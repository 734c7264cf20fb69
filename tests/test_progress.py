"""pipeline.progress.Progress: plain lines with no terminal (times from an injected clock), a tqdm
bar on one, nothing for no work, and a failing stream never stops the work."""
from __future__ import annotations

import io

import pytest

from pipeline.progress import Progress


class Clock:
    """A fake monotonic clock: ``now`` seconds, moved by the test."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


def plain(total: int, seconds_per_item: float, labels: bool = False) -> list[str]:
    """The lines of ``total`` items advanced one at a time, each taking ``seconds_per_item``."""
    stream, clock = io.StringIO(), Clock()
    with Progress(total, stream=stream, interactive=False, clock=clock) as progress:
        for i in range(total):
            clock.now += seconds_per_item
            progress.advance(label=f"r{i + 1}.sqlite" if labels else None)
    return stream.getvalue().splitlines()


def test_plain_lines_every_10_percent_once_30_s_have_passed():
    # 10 s per report: 10 % (2 reports) comes first, 30 s later: a line every 3 reports.
    assert plain(20, 10.0) == [
        "gpu-idle: progress: analysing 20 reports",
        "gpu-idle: progress: 3/20 reports (15 %) after 30 s, about 170 s left",
        "gpu-idle: progress: 6/20 reports (30 %) after 60 s, about 140 s left",
        "gpu-idle: progress: 9/20 reports (45 %) after 90 s, about 110 s left",
        "gpu-idle: progress: 12/20 reports (60 %) after 120 s, about 80 s left",
        "gpu-idle: progress: 15/20 reports (75 %) after 150 s, about 50 s left",
        "gpu-idle: progress: 18/20 reports (90 %) after 180 s, about 20 s left",
        "gpu-idle: progress: 20/20 reports done in 200.0 s",
    ]


def test_plain_lines_slow_items_every_10_percent_with_the_last_label():
    # 60 s per report: 30 s comes first, 10 % later: a line every 2 reports.
    lines = plain(20, 60.0, labels=True)
    assert lines[:3] == [
        "gpu-idle: progress: analysing 20 reports",
        "gpu-idle: progress: 2/20 reports (10 %) after 120 s, about 1080 s left, last r2.sqlite",
        "gpu-idle: progress: 4/20 reports (20 %) after 240 s, about 960 s left, last r4.sqlite",
    ]
    assert len(lines) == 1 + 9 + 1 and lines[-2].startswith("gpu-idle: progress: 18/20 reports (90 %) after 1080 s")
    assert lines[-1] == "gpu-idle: progress: 20/20 reports done in 1200.0 s"


def test_quick_work_gets_the_first_and_last_line_only():
    assert plain(20, 1.0) == ["gpu-idle: progress: analysing 20 reports",
                              "gpu-idle: progress: 20/20 reports done in 20.0 s"]


def test_work_that_stops_early_says_so_and_close_is_once():
    stream, clock = io.StringIO(), Clock()
    with pytest.raises(KeyError):
        with Progress(20, what="MB", stream=stream, interactive=False, clock=clock) as progress:
            clock.now += 2.5
            progress.advance(7)
            raise KeyError("boom")
    progress.close()
    assert stream.getvalue().splitlines() == ["gpu-idle: progress: analysing 20 MB",
                                              "gpu-idle: progress: 7/20 MB done in 2.5 s, stopped early"]


def test_no_work_prints_nothing():
    for interactive in (False, True):
        stream = io.StringIO()
        with Progress(0, stream=stream, interactive=interactive) as progress:
            progress.advance(0)
        assert stream.getvalue() == ""
    with pytest.raises(ValueError):
        Progress(-1)


def test_interactive_is_a_tqdm_bar_on_the_stream():
    stream = io.StringIO()
    with Progress(20, stream=stream, interactive=True) as progress:
        for i in range(20):
            progress.advance(label=f"r{i + 1}.sqlite")
    out = stream.getvalue()
    assert "gpu-idle: progress:" not in out                 # no plain lines
    final = out.split("\r")[-1]                              # tqdm redraws the line after a carriage return
    assert final.startswith("gpu-idle: 100%") and "20/20" in final and "reports/s" in final
    assert "r20.sqlite" in final and final.endswith("\n")   # the last label; the bar is left in place


def test_terminal_or_not_follows_isatty():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, pipe = Tty(), io.StringIO()
    with Progress(3, stream=tty) as a, Progress(3, stream=pipe) as b:
        assert a.interactive and not b.interactive
        a.advance(3)
        b.advance(3)
    assert "3/3" in tty.getvalue() and "gpu-idle: progress:" not in tty.getvalue()
    assert pipe.getvalue().startswith("gpu-idle: progress: analysing 3 reports\n")


def test_a_failing_stream_never_stops_the_work():
    class Broken(io.StringIO):
        def write(self, text):
            raise BrokenPipeError("reader gone")

    for interactive in (False, True):
        with Progress(5, stream=Broken(), interactive=interactive) as progress:
            for _ in range(5):
                progress.advance()
        assert progress.done == 5
