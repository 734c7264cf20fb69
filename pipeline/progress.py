"""Progress of long work (a sweep over thousands of reports, a multi-GB export) while it runs.

:class:`Progress` shows a progress bar (tqdm) on a terminal and, with no terminal
(cron, CI, a pipe into a log), a few plain lines instead::

    gpu-idle: progress: analysing 20 reports
    gpu-idle: progress: 3/20 reports (15 %) after 30 s, about 170 s left
    ...
    gpu-idle: progress: 20/20 reports done in 200.0 s

Other work says what it does and of what (``doing``, ``of``): ``reading 220 MB of g10000.sqlite``,
``writing 10000 GPU files``.

A plain line between the first and the last comes only when both at least
:data:`LINE_EVERY_PERCENT` % of the total has been done and :data:`LINE_EVERY_S`
seconds have passed since the previous line (whichever comes later), so a log
gets at most about ten of them however long the work is, and none for quick work.
Writing progress never stops the work: a stream that fails (closed, broken pipe)
is given up silently.
"""
from __future__ import annotations

import sys
import threading
import time
from typing import Callable, TextIO

__all__ = ["LINE_EVERY_PERCENT", "LINE_EVERY_S", "PREFIX", "Progress"]

#: What every plain line starts with.
PREFIX = "gpu-idle: progress: "
#: A plain line needs at least this percentage of the total done since the previous line ...
LINE_EVERY_PERCENT = 10
#: ... and at least this many seconds since the previous line.
LINE_EVERY_S = 30.0


class Progress:
    """Progress of ``total`` items of work, as a context manager::

        with Progress(len(paths), what="reports") as progress:
            for path in paths:
                ...
                progress.advance(label=os.path.basename(path))

    Args:
        total: the number of items the work has (reports, MB, ...; a count >= 0). 0 shows nothing.
        what: the items' name, plural (``"reports"``, ``"MB"``), as the lines and the bar show it.
        doing: what the work does, the first line's verb (``"analysing"``, ``"reading"``, ``"writing"``).
        of: what the items belong to (a file name: ``"g10000.sqlite"``, read ``220 MB of g10000.sqlite``),
            said on the first and last lines and beside the bar until a ``label`` replaces it; None: nothing.
        stream: where progress goes (default: ``sys.stderr`` at the time of the call).
        interactive: True: a tqdm progress bar; False: plain lines; None (default): a bar when
            ``stream.isatty()``.
        clock: seconds as a float from a monotonic clock (default :func:`time.monotonic`); tests
            pass a fake one. The plain lines take every time from it (the bar keeps its own).
    Raises:
        ValueError: ``total`` is negative.
    """

    def __init__(self, total: int, what: str = "reports", stream: TextIO | None = None,
                 interactive: bool | None = None, clock: Callable[[], float] = time.monotonic,
                 doing: str = "analysing", of: str | None = None):
        if total < 0:
            raise ValueError(f"total must be >= 0, not {total}")
        self.total = int(total)
        self.what = what
        self._of = f" of {of}" if of else ""
        self.stream = sys.stderr if stream is None else stream
        if interactive is None:
            try:
                interactive = bool(self.stream.isatty())
            except (AttributeError, OSError, ValueError):  # no isatty, or a closed stream
                interactive = False
        self.interactive = interactive
        self.clock = clock
        #: items done so far (the sum of every :meth:`advance` ``n``)
        self.done = 0
        #: True once :meth:`close` ran
        self.closed = False
        self._silent = False   # nothing (more) to show: no work, or the stream failed
        self._lock = threading.Lock()
        self._bar = None
        self._start_s = clock()
        self._last_line = (0, self._start_s)   # (items done, clock s) when the last plain line was written
        if self.total == 0:
            self._silent = True
        elif self.interactive:
            from tqdm import tqdm

            try:
                # position 0 always: a bar opened while another is (the GPUs of the one report of a run) draws on
                # the same line, never moving the cursor up over the other's (tqdm's ESC [A for nested bars)
                self._bar = tqdm(total=self.total, unit=" " + what, file=self.stream, desc="gpu-idle",
                                 dynamic_ncols=True, leave=True, position=0)
                if of:
                    self._bar.set_postfix_str(of, refresh=False)
            except (OSError, ValueError):
                self._silent = True
        else:
            self._line(f"{doing} {self.total} {what}{self._of}")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, n: int = 1, label: str | None = None) -> None:
        """Count ``n`` more items done (``label``: what was just done, e.g. a report's file name,
        shown beside the bar and at the end of the next plain line)."""
        with self._lock:
            self.done += n
            if self.closed or self._silent:
                return
            if self._bar is not None:
                try:
                    if label is not None:
                        self._bar.set_postfix_str(label, refresh=False)
                    self._bar.update(n)
                except (OSError, ValueError):
                    self._give_up()
                return
            if self.done >= self.total:
                return   # the last line says it, at close
            now = self.clock()
            last_done, last_s = self._last_line
            if ((self.done - last_done) * 100 >= LINE_EVERY_PERCENT * self.total
                    and now - last_s >= LINE_EVERY_S):
                elapsed = now - self._start_s
                left = elapsed / self.done * (self.total - self.done)   # at the rate so far
                self._line(f"{self.done}/{self.total} {self.what} ({100 * self.done // self.total} %) "
                           f"after {elapsed:.0f} s, about {left:.0f} s left" + (f", last {label}" if label else ""))
                self._last_line = (self.done, now)

    def close(self) -> None:
        """End the progress: the bar stays at its final state, or the last plain line
        (``N/TOTAL <what> done in X s``, X in seconds; ", stopped early" when fewer than
        ``total`` items were done). A second call does nothing."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if self._silent:
                return
            if self._bar is not None:
                try:
                    self._bar.close()
                except (OSError, ValueError):
                    pass
                self._bar = None
            else:
                elapsed = self.clock() - self._start_s
                self._line(f"{self.done}/{self.total} {self.what}{self._of} done in {elapsed:.1f} s"
                           + (", stopped early" if self.done < self.total else ""))

    def _line(self, text: str) -> None:
        try:
            self.stream.write(PREFIX + text + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            self._give_up()

    def _give_up(self) -> None:
        """The stream failed: show nothing more (the work goes on)."""
        if self._bar is not None:
            self._bar.disable = True
            self._bar = None
        self._silent = True
