"""SIGTERM and Ctrl-C during training: save at the next step boundary and
stop.

`StopRequest` is the host loop's context manager. While it is entered:

- SIGTERM (a preempted VM) and the first Ctrl-C (SIGINT) set `requested`;
  the host loop then saves a checkpoint and stops, or leaves the final
  evaluation (the commands exit with PREEMPTED_EXIT_CODE). A
  PreemptionCheckpointHandler that owns SIGTERM (multi-worker and TPU
  runs) keeps it.
- The request reaches the training step in flight, not only the host
  loop: a Python signal handler runs only once the main thread is back
  from TensorFlow, so a watcher thread, woken through `signal.
  set_wakeup_fd` the moment a signal arrives, calls `on_signal` (the
  trainer's `request_stop`, a variable its in-graph loop reads between
  steps).
- A second Ctrl-C stops at once: KeyboardInterrupt in the main thread
  (the commands print one line and exit with status 130), and if the main
  thread is still inside TensorFlow `HARD_STOP_S` later (compiling, say),
  the process ends there with status 130. Checkpoints are written under a
  temporary name and then listed in the `checkpoint` file, which is
  replaced atomically: a stop in the middle of a save leaves the previous
  checkpoint the latest.
- A SIGINT within `SAME_PRESS_S` of the one before is the same press: GNU
  `timeout -s INT` sends it to the process and again to its process
  group, microseconds apart. And a second Ctrl-C that the main thread has
  not acted on when the run leaves the block (its checkpoint saved) ends
  the run as one Ctrl-C does, not as a stop at once.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from keras_vit import wakeup
from keras_vit.errors import INTERRUPTED_EXIT_CODE, take_stop

# Seconds the main thread has to raise KeyboardInterrupt after a second
# Ctrl-C before the process ends without it.
HARD_STOP_S = 2.0
# Seconds within which a SIGINT after another is the same press (`timeout
# -s INT` signals the process, then its process group).
SAME_PRESS_S = 0.1
_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGINT: "Ctrl-C"}


def _owned_by_handler(handler) -> bool:
    owner = getattr(handler, "__self__", None)
    return isinstance(
        owner, tf.distribute.experimental.PreemptionCheckpointHandler
    )


# What a stop request does while the run trains (`StopRequest.says`).
SAVE_AND_STOP = "saving a checkpoint at the next step, then stopping"


class StopRequest:
    """Records SIGTERM and Ctrl-C so that the host loop can checkpoint and
    stop at a step boundary (see the module doc).

    A context manager. Outside the main thread it installs nothing.

    Attributes:
        requested: bool. A signal asked the run to stop.
        name: str. "SIGTERM" or "Ctrl-C", the signal that asked first.
        on_signal: () -> None, called at once (from the watcher thread)
            and again from the signal handler; the host loop sets it (and
            it is called as it is set where a stop taken on entering,
            `take_stop`, asked before).
        says: str. What the run does on the request, in the warning the
            first one logs; the host loop sets it while it evaluates.
    """

    def __init__(self):
        self.requested = False
        self.name = ""
        self.installed = False
        self._taken = False  # a stop a library swallowed, asked on entering
        self.on_signal: Callable[[], None] = lambda: None
        self.says = SAVE_AND_STOP
        self._previous = {}
        # Ctrl-C as the handler saw it, as the watcher saw it; raised once.
        self._interrupts = self._seen = 0
        # When each last counted one (time.monotonic()).
        self._handled_at = self._seen_at = float("-inf")
        self._raised = False
        self._open = False  # between __enter__ and __exit__
        self._wakeup = wakeup.Wakeup(self._signals,
                                     "keras_vit-stop-watcher")
        self._hard_stop: Optional[threading.Timer] = None

    @property
    def on_signal(self) -> Callable[[], None]:
        return self._on_signal

    @on_signal.setter
    def on_signal(self, callback: Callable[[], None]) -> None:
        self._on_signal = callback
        if self._taken:  # the step in flight learns of it as of any other
            callback()

    # -------------------------------------------------------------- set-up
    def __enter__(self):
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                current = signal.getsignal(signum)
                if signum == signal.SIGTERM and _owned_by_handler(current):
                    continue
                self._previous[signum] = signal.signal(signum, self._handle)
        except ValueError:  # not the main thread
            return self
        self._open = True
        self.installed = bool(self._previous)
        self._wakeup.start()
        lost = take_stop()  # one a library swallowed before: asked now
        if lost is not None:
            self._taken = True
            self._handle(signal.SIGINT if type(lost) is KeyboardInterrupt
                         else signal.SIGTERM, None)
        return self

    def __exit__(self, *exc):
        self._open = False
        self._wakeup.stop()
        if self._hard_stop is not None:
            self._hard_stop.cancel()
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}
        self.installed = False
        # A second Ctrl-C that the handler has not acted on (it ran once for
        # both) finds the run's checkpoint saved: it ends as after one.
        return False

    # ------------------------------------------------------------- signals
    def _signals(self, data: bytes, now: float) -> None:
        """The watcher thread (`keras_vit.wakeup`): reacts the moment a
        signal arrives, while the main thread may be inside a TensorFlow
        call."""
        for signum in data:
            if signum not in self._previous:
                continue
            self.on_signal()
            if (signum == signal.SIGINT
                    and now - self._seen_at >= SAME_PRESS_S):
                self._seen += 1
                self._seen_at = now
        if self._seen >= 2 and self._hard_stop is None:
            self._hard_stop = threading.Timer(HARD_STOP_S,
                                              self._end_now)
            self._hard_stop.daemon = True
            self._hard_stop.start()

    def _end_now(self) -> None:
        """Ends the process after a second Ctrl-C that the main thread
        could not act on in time (it is inside a long TensorFlow call)."""
        if not self._open:
            return
        os.write(2, b"Ctrl-C twice: stopped at once; the last complete "
                 b"checkpoint is the one to resume from.\n")
        os._exit(INTERRUPTED_EXIT_CODE)

    def _twice(self) -> bool:
        """Ctrl-C came twice: counted by the handler, or by the watcher
        where two signals reached the handler as one (Python runs it once
        for signals that arrive while the main thread is in TensorFlow)."""
        return max(self._interrupts, self._seen) >= 2 and not self._raised

    def _handle(self, signum, frame):
        del frame
        now = time.monotonic()
        if signum == signal.SIGINT:
            if now - self._handled_at >= SAME_PRESS_S:
                self._interrupts += 1
                self._handled_at = now
            # On every SIGINT: the watcher may have counted a second press
            # that this (run late, after a TensorFlow call) took for one.
            if self._open and self._twice():  # not inside __exit__
                self._raised = True
                raise KeyboardInterrupt
        if not self.requested:
            self.name = _NAMES.get(signum, f"signal {signum}")
            again = (" (Ctrl-C again stops at once)"
                     if signum == signal.SIGINT else "")
            logging.warning("%s: %s%s.", self.name, self.says, again)
        self.requested = True
        self.on_signal()


class EvaluationStopped(Exception):
    """An evaluation (periodic or final) left unfinished at a stop
    request."""


def stopping(on_batch: Optional[Callable], request: StopRequest
             ) -> Callable:
    """An evaluation's `on_batch` that first raises EvaluationStopped once
    `request` is set, so that a stop does not wait for the whole
    evaluation (a short preemption notice may not outlast it)."""

    def checked(i, metrics):
        if request.requested:
            raise EvaluationStopped
        if on_batch is not None:
            on_batch(i, metrics)

    return checked
