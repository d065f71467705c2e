"""Ctrl-C while a command waits on TensorFlow: said at once, and a second
Ctrl-C stops it at once.

Python runs a signal handler only once the main thread is back from the
C++ call it is in: Ctrl-C during one long TensorFlow call (a batch of
few-shot features at a large resolution on a CPU, a SavedModel's
tracing) would wait for that call to end, in silence. While `Watch` is
entered, a thread woken through `signal.set_wakeup_fd` the moment a
signal arrives sees each Ctrl-C:

- the first, where the command has not stopped `NOTICE_S` later, gets
  one line: it stops when the call under way returns, and a second
  Ctrl-C stops it at once;
- the second ends the process there with the command's one line and
  status 130, as a kill would: files are written under temporary names
  and renamed whole (`keras_vit.storage.atomic`), so nothing is left
  half-written, at most a temporary file; inside a block that holds the
  signals back (publishing an export, `errors.signals_held`) the block
  ends first, then acts on it. A held signal sent again
  (`errors.send_again`) is no other press.

A training loop's `StopRequest` takes the wakeup descriptor over while it
trains (it saves a checkpoint on the first Ctrl-C, and has its own second
press) and gives it back. A SIGINT within `SAME_PRESS_S` of the one
before is the same press (GNU `timeout -s INT` signals the process, then
its group). Standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

from keras_vit import errors, progress, quiet_start, wakeup
from keras_vit.errors import INTERRUPTED_EXIT_CODE

# Seconds after a Ctrl-C that the command has not acted on before it is
# told that the call under way ends first.
NOTICE_S = 1.0
# Seconds within which a SIGINT after another is the same press.
SAME_PRESS_S = 0.1


class Watch:
    """The watcher of one command's run (`program`: keras-vit-NAME), in a
    command's own process (or `always`): a program that calls a command's
    main itself (a notebook) keeps Ctrl-C as it has it. Does nothing
    where it cannot watch (not the main thread)."""

    def __init__(self, program: str, always: bool = False):
        self.program = program
        self.always = always
        self._wakeup = wakeup.Wakeup(self._signals, "keras_vit-ctrl-c")
        self._open = False
        self._presses = 0
        self._last = float("-inf")
        self._notice = None

    def __enter__(self) -> "Watch":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> "Watch":
        """Watches from now on (`stop` ends it); never raises: where it
        cannot watch (`keras_vit.wakeup.Wakeup.start`), Ctrl-C is as it
        was."""
        if not (self.always or quiet_start.is_command()):
            return self
        errors.sent_again_clear()
        self._open = self._wakeup.start()
        return self

    def settle(self) -> None:
        """The command acts on the Ctrl-C (its one line follows): no
        notice, and no stop at once from here on."""
        self._open = False
        if self._notice is not None:
            self._notice.cancel()

    def stop(self) -> None:
        self.settle()
        self._wakeup.stop()

    def _signals(self, numbers: bytes, now: float) -> None:
        for signum in numbers:
            if signum == signal.SIGINT:
                with contextlib.suppress(Exception):  # keeps watching
                    self._press(now)

    def _press(self, now: float) -> None:
        if errors.take_sent_again(signal.SIGINT, now):
            return  # one held back, then sent again: no press of its own
        if now - self._last < SAME_PRESS_S or not self._open:
            return  # the same press
        self._last = now
        self._presses += 1
        if self._presses == 1:
            self._notice = threading.Timer(NOTICE_S, self._say_waiting)
            self._notice.daemon = True
            self._notice.start()
        elif not errors.signals_held():  # (a held block acts on it after)
            self._end_now()

    def _say_waiting(self) -> None:
        if not self._open:
            return
        with contextlib.suppress(Exception):
            progress.end_line()
        line = (f"{self.program}: stopping once the step under way ends."
                if errors.signals_held() else
                f"{self.program}: stopping once the TensorFlow call under way "
                "returns; Ctrl-C again stops at once.")
        os.write(2, (line + "\n").encode())

    def _end_now(self) -> None:
        try:
            with contextlib.suppress(Exception):
                progress.end_line()
            os.write(2, (quiet_start.interrupted_line(self.program) + "\n"
                         ).encode())
            # The line through the stderr filter before the process ends.
            quiet_start.stop_filtering(timeout=1.0)
        finally:
            os._exit(INTERRUPTED_EXIT_CODE)
