"""A run folder's name, as TensorFlow's checkpoint manager reads it.

`tf.train.CheckpointManager` looks a run's checkpoints up with a glob
pattern made of the folder's path: a folder named with [, * or ? would
find none of them (nor delete the old ones). Without TensorFlow, so that
a command refuses such a name before it loads it.
"""

from __future__ import annotations

from keras_vit.errors import UsageError


def check_folder_name(folder: str, what: str = "`workdir`") -> None:
    """Refuses a run's `folder` (`what`: its flag or argument) whose name
    holds a character of a glob pattern."""
    odd = sorted(set("[*?") & set(str(folder)))
    if odd:
        raise UsageError(
            f"{what} {folder} holds {' '.join(odd)}, which TensorFlow's "
            "checkpoint manager reads as a pattern: it would find none of "
            "the run's checkpoints (nor delete the old ones). Name the "
            "folder without [, * or ?.")
