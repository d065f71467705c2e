"""One folder for the workers of a multi-worker run: the check that they
share it.

A multi-worker run keeps its state in one folder (keras-vit-train's
workdir, the output folder of a VTAB-1k run): the chief writes the
checkpoints, the config, the finished trials and tasks there, and every
worker reads them back to resume. Where each worker has a folder of its own
under that path (a local disk on every host), the chief resumes or skips
what is done while the others start again: their steps part, so the run
hangs or trains on from weights that differ between the workers. `check`
turns that into one line on every worker before anything is read:

1. the chief writes a file named by a random token into the folder;
2. the token goes to every worker (a sum over the workers: the chief adds
   it, the others 0);
3. each worker looks for that file (a few times, for a network file
   system's caches);
4. which workers did not find it goes to every worker (a second sum), and
   the chief removes the file.

The sums are passed in (`sum_fn`: `distribute.sum_over_workers`), so the
check runs the same with a real cluster and in a test.
"""

from __future__ import annotations

import os
import random
import time
from typing import Callable, List, Optional, Sequence

import tensorflow as tf

from keras_vit.errors import UsageError

# The file the chief writes; the token makes it this check's own.
CHECK_FILE = ".keras_vit_shared_{}"
# How often, 1 s apart, a worker looks for the chief's file.
LOOKS = 3
# Tokens stay below 2**16, so that float32 sums carry them exactly, also
# where each of a worker's 3, 5, 6 or 7 replicas adds an inexact share.
_TOKENS = 1 << 16


def check(folder: str, what: str, *, tasks: Sequence, this: int,
          sum_fn: Callable[[List[float]], List[float]],
          sleep: Callable[[float], None] = time.sleep,
          token: Optional[int] = None) -> None:
    """Raises UsageError on every worker alike where some worker does not
    see the files the chief writes into `folder` (see the module doc).

    Args:
        folder: str. The folder every worker names (local or gs://).
        what: str. The folder as the message names it (e.g. "workdir").
        tasks: the cluster's tasks, the chief first (`cluster.cluster_tasks`).
        this: int. This worker's index in `tasks`.
        sum_fn: [float] -> [float]: the element-wise sum of the lists that
            every worker passes (an all-reduce).
        token: int or None. The chief's token (None: drawn at random).
    """
    path, written, failed = None, 0.0, ""
    if this == 0:
        token = token or random.randrange(1, _TOKENS)
        path = os.path.join(folder, CHECK_FILE.format(token))
        try:
            with tf.io.gfile.GFile(path, "w") as f:
                f.write("keras_vit: does every worker see this folder? "
                        "Removed once each has looked.\n")
            written = float(token)
        except tf.errors.OpError as e:
            failed = e.message.strip().splitlines()[0]
    try:
        token = round(sum_fn([written])[0])
        if not token:
            raise UsageError(
                f"The chief ({tasks[0]}) could not write into the {what} "
                f"{folder}"
                + (f": {failed}" if this == 0 else "")
                + f". Check the path and its permissions on {tasks[0]}.")
        seen = this == 0 or _looks(os.path.join(
            folder, CHECK_FILE.format(token)), sleep)
        flags = [0.0] * len(tasks)
        flags[this] = 0.0 if seen else 1.0
        missing = [t for t, flag in zip(tasks, sum_fn(flags)) if flag > 0.5]
    finally:
        if path is not None:
            _remove(path)
    if missing:
        raise UsageError(
            f"{', '.join(map(str, missing))} "
            f"{'does' if len(missing) == 1 else 'do'} not see the files the "
            f"chief ({tasks[0]}) writes into the {what} {folder}: each has "
            "a folder of its own there. Every worker reads the run's "
            "checkpoints and results from that folder to resume: give all "
            "workers one shared folder (e.g. gs://BUCKET/...) and run the "
            "same command on each.")


def _looks(path: str, sleep) -> bool:
    for look in range(LOOKS):
        if look:
            sleep(1.0)
        if tf.io.gfile.exists(path):
            return True
    return False


def _remove(path: str) -> None:
    try:
        tf.io.gfile.remove(path)
    except tf.errors.OpError:
        pass
