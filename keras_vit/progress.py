"""Where long work is: "i of n", the time spent and an estimate of the
time left, for the lines the commands log (VTAB tasks, few-shot data sets).

Plain Python, no framework: every layer of the package may use it.
"""

from __future__ import annotations

import time
from typing import Callable, List


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


def short_metrics(metrics: dict, limit: int = 160) -> str:
    """str. `metrics` on one short line: `name value` pairs in order,
    numbers to 4 significant digits, cut after `limit` characters at a
    pair (", ..." follows; the whole dict is the run's metrics.json)."""
    parts = []
    for name, value in metrics.items():
        if isinstance(value, float):
            value = f"{value:.4g}"
        parts.append(f"{name} {value}")
    text = ", ".join(parts)
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(", ", 1)[0] + ", ..."
