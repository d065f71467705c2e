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
)

# Seconds each wait for the chief's word on a data set lasts (`chief_first`).
PREPARE_POLL_S = 5.0
# The coordination service's key of the chief's word on a data set. Keyed
# by name, not by call: workers whose calls differ in number (one skips a
# VTAB task that another still runs) still read the right word.
_PREPARED_KEY = "keras_vit/prepared/{}"
# The data sets this process (the chief) has given its word on.
_said = set()
# The errors a chief's failed preparation raises again on the other workers
# (by name; any other: UsageError, its name in the text).
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
        What `prepare` raises on the chief. On another worker: the chief's
        DataUnavailableError or UsageError again (naming the chief);
        UsageError where the chief prepared the data and this worker cannot
        (it must not skip a data set alone: the workers would part); and
        SetupError when the chief stopped before it said a word.
    """
    if not multi_worker:
        return prepare()
    store = store or tf_context.context()
    key = _PREPARED_KEY.format(name)
    if chief:
        return _prepare_and_say(prepare, name, store, key)
    word = _chief_word(store, key, name, poll_s, clock)
    if word.startswith("failed "):
        kind, _, reason = word[len("failed "):].partition(" ")
        if reason.startswith(f"{name}: "):  # the chief's error names it
            reason = reason[len(name) + 2:]
        error = _PASSED_ON.get(kind)
        raise (error or UsageError)(
            f"The chief ({_chief()}) could not prepare {name}: "
            f"{reason if error else f'{kind}: {reason}'}")
    try:
        return prepare()
    except DataUnavailableError as e:
        raise UsageError(
            f"The chief ({_chief()}) prepared {name} but this worker cannot "
            f"read or prepare it ({e}): share config.input.data_dir between "
            f"the workers (e.g. gs://), or prepare {name} on every worker "
            "first."
        ) from None


def _prepare_and_say(prepare, name: str, store, key: str):
    """The chief: `prepare()`, then its word on `key` ("done", or "failed
    <error type> <the message's first line>"), once per data set."""
    try:
        result = prepare()
    except Exception as e:
        if name not in _said:
            _said.add(name)
            lines = str(e).strip().splitlines() or [""]
            store.set_config_key_value(
                key, f"failed {type(e).__name__} {lines[0]}")
        raise
    if name not in _said:
        _said.add(name)
        store.set_config_key_value(key, "done")
    return result


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
