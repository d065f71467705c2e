"""A data set's download and preparation in a multi-worker run: the chief
first, then the other workers.

`chief_first` runs the preparation (TFDS's `download_and_prepare`,
`config.input.download`) on the chief while the other workers wait for its
word through TensorFlow's coordination service; then they run it: where
the workers share config.input.data_dir they find the data prepared, where
each has its own they prepare their own copy. So no two workers write one
data set at once (which fails both: each removes the other's files), and a
chief that cannot prepare it stops every worker with its reason, or, in the
evaluators, has every worker skip that data set alike.
"""

from __future__ import annotations

import itertools
import time
from typing import Callable

import tensorflow as tf
from absl import logging

# The coordination service's key-value store has no public API: the eager
# context's set/get_config_key_value (TF 2.21) are what MultiWorkerMirrored-
# Strategy itself uses.
from tensorflow.python.eager import context as tf_context

from keras_vit.data.vtab import DataUnavailableError
from keras_vit.errors import UsageError
from keras_vit.training.cluster import (
    FIRST_LOG_S,
    LOG_EVERY_S,
    SetupError,
    cluster_tasks,
    first_line,
)

# Seconds each wait for the chief's word on a data set lasts (`chief_first`).
PREPARE_POLL_S = 5.0
# The coordination service's key of the chief's word on the n-th data set
# this process prepares: every worker prepares the same ones in the same
# order, so the counts agree.
_PREPARED_KEY = "keras_vit/prepared/{}/{}"
_prepared = itertools.count()
# The errors a chief's failed preparation raises again on the other workers
# (by name; any other: UsageError).
_PASSED_ON = {e.__name__: e for e in (DataUnavailableError, UsageError)}


def chief_first(prepare: Callable[[], object], name: str, *,
                multi_worker: bool, chief: bool, store=None,
                poll_s: float = PREPARE_POLL_S, clock=time.monotonic):
    """Runs `prepare` (the download and preparation of data set `name`) at
    once outside a multi-worker run and on its chief; on any other worker
    once the chief has said it finished (see the module doc).

    Args:
        prepare: () -> result. Its result is returned.
        name: str. The data set, as the log names it.
        multi_worker: bool. The run is one of several workers.
        chief: bool. This worker is the chief.
        store: the coordination service's key-value store (an object with
            set_config_key_value and get_config_key_value(key, timeout_ms));
            None: TensorFlow's.
        poll_s: float. Seconds of each wait for the chief's word, between
            which the wait logs (after FIRST_LOG_S, then every LOG_EVERY_S).

    Raises:
        What `prepare` raises; on a waiting worker, the chief's
        DataUnavailableError or UsageError again (naming the chief), and
        SetupError when the chief stopped before it said a word.
    """
    if not multi_worker:
        return prepare()
    store = store or tf_context.context()
    key = _PREPARED_KEY.format(next(_prepared), name)
    if chief:
        try:
            result = prepare()
        except Exception as e:
            store.set_config_key_value(
                key, f"failed {type(e).__name__} {first_line(e)}")
            raise
        store.set_config_key_value(key, "done")
        return result
    word = _chief_word(store, key, name, poll_s, clock)
    if word.startswith("failed "):
        kind, _, reason = word[len("failed "):].partition(" ")
        reason = reason.split(": ", 1)[-1]
        if reason.startswith(f"{name}: "):  # the chief's error names it
            reason = reason[len(name) + 2:]
        raise _PASSED_ON.get(kind, UsageError)(
            f"The chief ({_chief()}) could not prepare {name}: {reason}")
    return prepare()


def _chief() -> str:
    tasks, _ = cluster_tasks()
    return str(tasks[0]) if tasks else "worker 0"


def _chief_word(store, key: str, name: str, poll_s: float, clock) -> str:
    """The chief's word on `key`, waited for in `poll_s` steps."""
    start = clock()
    next_log = start + FIRST_LOG_S
    while True:
        try:
            return store.get_config_key_value(key, int(poll_s * 1000))
        except tf.errors.DeadlineExceededError:
            pass
        except tf.errors.UnavailableError:
            raise SetupError(
                f"The chief ({_chief()}) stopped while it prepared {name}, "
                "before this worker could read it: see the chief's log, "
                "then run the same command on every worker again (or "
                "prepare the data first: `tfds build`)."
            ) from None
        if clock() >= next_log:
            logging.info(
                "Waiting %.0f s so far for the chief (%s) to download and "
                "prepare %s (config.input.download); this worker then reads "
                "it from config.input.data_dir, or prepares its own copy "
                "where that folder is not shared.", clock() - start,
                _chief(), name)
            next_log += LOG_EVERY_S
