"""The workers of a multi-worker run leave their processes together.

TensorFlow's coordination service, which runs in the chief's process,
reports a worker whose process has ended as crashed ("The tasks have
crashed") once its heartbeats have been missing for about ten seconds,
even where the run ended well: a worker's process ends without telling
the service. The workers part when the run ends (`cluster.finish`), but
the chief may still work for longer than that afterwards (a slow
exit, curves drawn for a finished run). So each worker that parted
cleanly also waits, when its process exits, at one last barrier of the
coordination service for every other: they then end within moments of
each other. The wait is bounded (`TIMEOUT_S`): a worker that has died
makes it fail at the service's next heartbeat check, and a chief that
has died makes it fail at once.
"""

from __future__ import annotations

import atexit
import signal
import threading

import tensorflow as tf
from absl import logging
from tensorflow.python.eager import context

# Long enough for the chief's work after the parting (its exit, or curves
# drawn for a finished run); a barrier that times out changes nothing but
# the wait.
TIMEOUT_S = 60
# One barrier per process, under one name on every worker.
BARRIER = "keras_vit_exit"

_registered = False


def wait_at_exit() -> None:
    """Registers this process's wait at the exit barrier, once (every
    worker of the run must register it)."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(_wait)


def _wait() -> None:
    # TensorFlow's call holds Python's lock while it waits, so no Python
    # signal handler could run: Ctrl-C and SIGTERM end the process at once
    # (the run's work is done).
    main = threading.current_thread() is threading.main_thread()
    if main:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_DFL)
    try:
        context.context().wait_at_barrier(BARRIER, TIMEOUT_S * 1000)
    except (tf.errors.OpError, ValueError) as error:
        # The run's results are saved; only the leaving is not together.
        lines = str(error).strip().splitlines() or [type(error).__name__]
        logging.info("The workers did not leave together: %s",
                     lines[0][:300])
