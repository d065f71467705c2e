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
each other. The wait is bounded: a worker that has died makes it fail
at the service's next heartbeat check, and a chief that has died makes
it fail at once.
"""

from __future__ import annotations

import atexit
import itertools

import tensorflow as tf
from absl import logging
from tensorflow.python.eager import context

# Long enough for the chief's work after the parting (its exit, or curves
# drawn for a finished run); a barrier that times out changes nothing but
# the wait.
TIMEOUT_S = 60

_ids = itertools.count()


def wait_at_exit(timeout_s: float = TIMEOUT_S) -> None:
    """Registers this process's wait at the exit barrier (every worker of
    the run must register one)."""
    atexit.register(_wait, f"keras_vit_exit_{next(_ids)}", timeout_s)


def _wait(barrier_id: str, timeout_s: float) -> None:
    try:
        context.context().wait_at_barrier(barrier_id, int(timeout_s * 1000))
    except (tf.errors.OpError, ValueError) as error:
        # The run's results are saved; only the leaving is not together.
        logging.info("The workers did not leave together: %s",
                     str(error).strip().splitlines()[0][:300])
