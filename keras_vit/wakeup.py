"""A thread that sees each signal the moment it arrives.

Python runs a signal handler only once the main thread is back from the
C++ call it is in (a TensorFlow step, a compilation). `Wakeup` sets a
pipe as the signal wakeup descriptor (`signal.set_wakeup_fd`): the C
handler writes each signal's number into it at once, and a daemon
thread reading the pipe hands the numbers to a callback. The training
loop's `StopRequest` and the commands' Ctrl-C watcher
(`keras_vit.commands.second_press`) are built on it; one of them holds
the descriptor at a time, and each gives back the one it found.
Standard library only (no `fcntl`, so it also runs on Windows).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable

# What `stop` writes to end the thread: no signal has the number 0.
_END = b"\0"


class Wakeup:
    """Calls `on_signals(numbers, now)` in its own thread (`name`) with
    the signal numbers (bytes) that arrived together and
    `time.monotonic()` when they were read, from `start` until `stop`."""

    def __init__(self, on_signals: Callable[[bytes, float], None],
                 name: str):
        self._on_signals = on_signals
        self._name = name
        self._pipe = None
        self._thread = None
        self._previous = -1

    @property
    def running(self) -> bool:
        return self._pipe is not None

    def start(self) -> bool:
        """Whether it now watches. Never raises: where it cannot (not the
        main thread, no pipe or thread to spare, a platform whose wakeup
        descriptor takes no pipe) signals are as they were."""
        if self._pipe is not None:
            return True  # (started already: one pipe, one thread)
        try:
            read, write = os.pipe()
        except OSError:
            return False
        try:
            os.set_blocking(write, False)
            self._previous = signal.set_wakeup_fd(
                write, warn_on_full_buffer=False)
        except (ValueError, OSError, AttributeError):
            _close(read, write)
            return False
        thread = threading.Thread(target=self._read, args=(read,),
                                  daemon=True, name=self._name)
        try:
            thread.start()
        except RuntimeError:
            signal.set_wakeup_fd(self._previous)
            _close(read, write)
            return False
        self._pipe, self._thread = (read, write), thread
        return True

    def stop(self) -> None:
        """Gives the wakeup descriptor back and ends the thread; a no-op
        when it is not running."""
        if self._pipe is None:
            return
        signal.set_wakeup_fd(self._previous)
        read, write = self._pipe
        os.write(write, _END)
        self._thread.join(timeout=5)
        _close(read, write)
        self._pipe = self._thread = None

    def _read(self, read: int) -> None:
        while True:
            data = os.read(read, 64)
            if not data or _END in data:
                return
            self._on_signals(data, time.monotonic())


def _close(*fds: int) -> None:
    for fd in fds:
        os.close(fd)
