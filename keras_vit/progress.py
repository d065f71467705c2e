"""Where long work is: "i of n", the time spent and an estimate of the
time left, for the lines the commands log (VTAB tasks, few-shot data sets),
and the count a command keeps on one terminal line (`show`, `end_line`).

Plain Python, no framework: every layer of the package may use it.
"""

from __future__ import annotations

import sys
import time
from typing import Callable, List

from keras_vit import quiet_start
from keras_vit.errors import check_stop

# Seconds between progress lines where no config says (the run config's is
# `log.every_seconds`).
EVERY_S = 10.0


# The stream whose last line `show` left open (no line end yet), if any.
_open_line: List = []
# Where the stream is no terminal (a log file): [stream, text, written,
# when the last line was written] of the last count `show` was given.
_pending: List = []


def show(text: str, stream=None) -> None:
    """Writes `text` as the status line of `stream` (default stderr): on a
    terminal over the one before it ("\\r"), with no line end, so that the
    next count replaces it; elsewhere (a log file) as a line of its own,
    at most every `EVERY_S` seconds (`end_line` writes the last count).
    `end_line` ends it before any other line is written. A stop that a
    library swallowed stops the work here (`errors.check_stop`)."""
    check_stop()
    stream = sys.stderr if stream is None else stream
    if (_open_line and _open_line[0] is not stream) or (
            _pending and _pending[0] is not stream):
        end_line()
    if not is_terminal(stream):
        now = time.monotonic()
        due = not _pending or now - _pending[3] >= EVERY_S
        if due:
            print(text, file=stream, flush=True)
        last = now if due else _pending[3]
        _pending[:] = [stream, text, due, last]
        return
    print(f"\r{text}", end="", file=stream, flush=True)
    _open_line[:] = [stream]


def end_line() -> None:
    """Ends the status line `show` left open (a line end), so that the next
    line (a skipped file, an error, Ctrl-C's) starts on a line of its own,
    or writes the last count a log file has not had; nothing when there
    is none."""
    if _pending:
        stream, text, written, _ = _pending
        del _pending[:]
        if not written:
            _write_line(stream, text)
    if _open_line:
        _write_line(_open_line.pop(), "")


def _write_line(stream, text: str) -> None:
    try:
        print(text, file=stream, flush=True)
    except (OSError, ValueError):  # a closed stream: nothing to end
        pass


def is_terminal(stream) -> bool:
    """Whether `stream` is a terminal (False for a closed stream or one
    without isatty); stderr: the one the command was given, which the
    command's filter of notices reaches through a pipe."""
    try:
        if stream.isatty():
            return True
        return stream.fileno() == 2 and quiet_start.stderr_is_terminal()
    except (AttributeError, OSError, ValueError):
        return False


def duration(seconds: float) -> str:
    """str. A duration as a person reads it: 45s, 12min, 3.5h."""
    seconds = int(round(max(0.0, seconds)))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}min"
    return f"{seconds / 3600:.1f}h"


class Progress:
    """Counts n items of work: `start()` before each, `finish()` after
    it, `skip()` for one that is passed over (it takes no time). The
    estimate of the time left is the mean time of the items finished so
    far times the items left (the current one included)."""

    def __init__(self, total: int, clock: Callable[[], float] = time.time):
        self.total, self.started, self.skipped = int(total), 0, 0
        self.durations: List[float] = []
        self._clock = clock
        self._began = clock()

    def start(self) -> str:
        """str. "i of n" for the item that starts now."""
        self.started += 1
        self._began = self._clock()
        return f"{self.started + self.skipped} of {self.total}"

    def skip(self) -> None:
        self.skipped += 1

    def finish(self) -> None:
        self.durations.append(self._clock() - self._began)

    def eta(self) -> str:
        """str. "; k done in T, about L left" (empty before the first
        item finishes)."""
        if not self.durations:
            return ""
        left = self.total - self.started - self.skipped + 1
        mean = sum(self.durations) / len(self.durations)
        return (f"; {len(self.durations)} done in "
                f"{duration(sum(self.durations))}, about "
                f"{duration(mean * left)} left")


class Rate:
    """Progress through `total` units of one long piece of work (training
    steps, evaluation batches), told by time: `update(done)` returns a
    line at most every `every_s` seconds of wall time, else None:

        step 1200 of 6000 (20%), 1min elapsed, about 4min left,
        5012 images/s

    The estimate of the time left and the throughput come from the units
    done since the first `update` (which only starts the clock: a first
    call that compiles is not counted).

    Args:
        total: int or None (unknown: no percentage, no estimate).
        unit: str. What a unit is called ("step", "batch").
        every_s: float. Seconds between lines; 0: never.
        images: int. Images per unit, for the throughput (0: none shown).
        clock: () -> seconds.
    """

    def __init__(self, total, unit: str = "step", every_s: float = 10.0,
                 images: int = 0, clock: Callable[[], float] = time.time):
        self.total = int(total) if total else None
        self.unit, self.every_s, self.images = unit, float(every_s), images
        self._clock = clock
        self._began = self._last = clock()
        self._first = None  # (time, done) of the first update

    def update(self, done: int) -> "str | None":
        """The line for `done` units when one is due, else None."""
        now = self._clock()
        if self._first is None:
            self._first = (now, int(done))
        if not self.every_s or now - self._last < self.every_s:
            return None
        self._last = now
        return self.line(done, now)

    def line(self, done: int, now: "float | None" = None) -> str:
        """"step 1200 of 6000 (20%), 1min elapsed, about 4min left,
        5012 images/s" (the parts known)."""
        now = self._clock() if now is None else now
        parts = [f"{self.unit} {done}"]
        if self.total:
            parts[0] += f" of {self.total} ({100.0 * done / self.total:.0f}%)"
        parts.append(f"{duration(now - self._began)} elapsed")
        t0, d0 = self._first or (now, done)
        rate = (done - d0) / (now - t0) if now > t0 and done > d0 else 0.0
        if rate and self.total:
            parts.append(f"about {duration((self.total - done) / rate)} "
                         "left")
        if rate and self.images:
            parts.append(f"{rate * self.images:.1f} images/s")
        return ", ".join(parts)


def short_metrics(metrics: dict, limit: int = 160) -> str:
    """str. `metrics` on one short line: `name value` pairs in order,
    numbers to 4 significant digits, those without a value (None: not
    measured, such as top-5 of fewer than 6 classes) left out, cut after
    `limit` characters at a pair (", ..." follows; the whole dict is the
    run's metrics.json)."""
    parts = []
    for name, value in metrics.items():
        if value is None:
            continue
        if isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{name} {value}")
    text = ", ".join(parts)
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(", ", 1)[0] + ", ..."
