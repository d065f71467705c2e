"""The list of a checkpoints folder: TensorFlow's state file, or, where
that file is missing or unreadable (a copy that left it out or cut it
short), the ckpt-N checkpoints there by their step."""

from __future__ import annotations

import os
import re
import time
from typing import Callable, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from keras_vit.storage.atomic import atomic_write


def listed(directory: str) -> List[str]:
    """The checkpoints the state file of `directory` lists, newest first
    (its latest, then the others newest to oldest); where that file is
    missing or unreadable (a copy that left it out or cut it short), the
    ckpt-N checkpoints there by their step, newest first, with a warning,
    and alike without one where it leaves some of them out (`relist`
    writes it again so); [] when there is none."""
    state = _checkpoint_state(directory)
    found = _unlisted(directory)
    if state is not None and state.model_checkpoint_path:
        if not _lists_all(state, found):
            # A list cut at a line's end still parses: by step, as the
            # chief writes it again (`relist`), so that every worker of a
            # run resumes from the same one, before and after.
            return found
        return [state.model_checkpoint_path] + [
            p for p in reversed(state.all_model_checkpoint_paths)
            if p != state.model_checkpoint_path]
    if found and directory not in _WARNED:
        _WARNED.add(directory)
        logging.warning(
            "%s is missing or unreadable: reading the checkpoints there by "
            "their step numbers (newest: %s).",
            os.path.join(directory, "checkpoint"), found[0])
    return found


def latest(directory: str) -> Optional[str]:
    """The newest checkpoint of `directory` (`listed`) whose
    files are there, or None."""
    for path in listed(directory):
        if tf.io.gfile.exists(path + ".index"):
            return path
    return None


def first_usable(paths: Callable[[], List[str]],
                 use: Callable[[str], Optional[str]]
                 ) -> Tuple[Optional[str], List[str]]:
    """The newest checkpoint that `use` reads (it returns None, else why
    it cannot be used), trying each older one after one that cannot be;
    `paths()` lists them, newest first (`listed`), and is asked again
    where a checkpoint's files went while it was read: a run still
    training removed it, and saved a newer one. Returns (that checkpoint
    or None, "ckpt-N (why)" of each that could not be used)."""
    tried, failed = set(), []
    for _ in range(_RELISTS):
        fresh = [path for path in paths() if path not in tried]
        for i, path in enumerate(fresh):
            tried.add(path)
            there = tf.io.gfile.exists(path + ".index")
            why = use(path)
            if why is None:
                return path, failed
            failed.append(f"{os.path.basename(path)} ({why})")
            if there and not tf.io.gfile.exists(path + ".index"):
                logging.info("Checkpoint %s was removed as it was read (a "
                             "run still training): listing them again.",
                             path)
                break
            if i + 1 < len(fresh):
                logging.warning("Checkpoint %s cannot be used (%s): loading "
                                "the one before it.", path, why)
        else:
            return None, failed
    return None, failed


# What reading a damaged checkpoint raises (a truncated data file: "Read
# less bytes than requested"); see `damaged`.
DAMAGE = (IndexError, tf.errors.DataLossError, tf.errors.OutOfRangeError,
          tf.errors.NotFoundError)


def damaged(error: BaseException) -> bool:
    """Whether `error`, raised reading a checkpoint, says that its files
    are damaged: DAMAGE, or the error of no kind that TensorFlow raises
    for a data file of other bytes ("The length checksum does not
    match")."""
    return isinstance(error, DAMAGE) or (
        isinstance(error, tf.errors.OpError)
        and "checksum" in str(error).lower())


# How many times `first_usable` lists the checkpoints again at most.
_RELISTS = 10


def step_of(path: Optional[str]) -> Optional[int]:
    """The step of the checkpoint `path` (`.../ckpt-N`), or None where
    `path` is None or names no step."""
    match = _STEP.search(path or "")
    return int(match.group(1)) if match else None


# The checkpoint each workdir's model was last read from in this process
# (`note_read`, by workdir.restore_model): what an evaluation of a run
# still training (or one whose newest checkpoint was damaged) scored.
_READ: dict = {}


def note_read(workdir: str, path: str) -> None:
    _READ[os.path.normpath(workdir)] = path


def step_read(workdir: str) -> Optional[int]:
    """The step of the checkpoint the model of `workdir` was last read
    from in this process, or None where none was read."""
    return step_of(_READ.get(os.path.normpath(workdir)))


def relist(directory: str) -> None:
    """Writes the state file of `directory` again from its ckpt-N
    checkpoints where it is missing, unreadable or leaves some of them out
    (a list cut at a line's end still parses), so that the checkpoint
    manager finds and rotates them all (it would otherwise fail on an
    empty file, or keep saving beside checkpoints it does not know and
    never remove them)."""
    found = _unlisted(directory)
    if not found or _lists_all(_checkpoint_state(directory), found):
        return
    # TensorFlow's text format of its CheckpointState, as its manager
    # writes it: the times let the manager rotate them (without, it would
    # keep them all and list only its own).
    names = [os.path.basename(p) for p in reversed(found)]
    times = [tf.io.gfile.stat(p + ".index").mtime_nsec / 1e9
             for p in reversed(found)]
    atomic_write(os.path.join(directory, "checkpoint"), "".join(
        [f'model_checkpoint_path: "{names[-1]}"\n']
        + [f'all_model_checkpoint_paths: "{n}"\n' for n in names]
        + [f"all_model_checkpoint_timestamps: {t!r}\n" for t in times]
        + [f"last_preserved_timestamp: {min(times) - 1.0!r}\n"]))
    logging.warning("Wrote %s again from the checkpoints there: %s.",
                    os.path.join(directory, "checkpoint"), ", ".join(names))


def _lists_all(state, found: List[str]) -> bool:
    """Whether TensorFlow's manager, reading `state`, rotates every
    checkpoint `found` on disk: it rotates those of
    all_model_checkpoint_paths that have a timestamp (where none has, it
    takes them all as preserved, and never removes them)."""
    if state is None or not state.model_checkpoint_path:
        return False
    paths = list(state.all_model_checkpoint_paths)
    if len(state.all_model_checkpoint_timestamps) != len(paths):
        return False
    names = {os.path.basename(p) for p in paths}
    return all(os.path.basename(p) in names for p in found)


def remove_partial(directory: str) -> None:
    """Removes the `ckpt-N_temp` folders of saves that did not finish (a
    full disk, a kill): TensorFlow writes a checkpoint's shards there and
    merges them into `ckpt-N`, and never reads nor removes them later.
    One written in the last `PARTIAL_AGE_S` seconds is left: it may be a
    save in progress (a run still stopping while its successor starts)."""
    if not tf.io.gfile.isdir(directory):
        return
    for name in sorted(tf.io.gfile.listdir(directory)):
        name = name.rstrip("/")
        path = os.path.join(directory, name)
        if _PARTIAL.match(name) and tf.io.gfile.isdir(path) and (
                _age_s(path) > PARTIAL_AGE_S):
            logging.info("Removing %s, left by a save that did not finish.",
                         path)
            tf.io.gfile.rmtree(path)


def remove_save(directory: str, step: int) -> None:
    """Removes what a save of `step` that did not finish wrote in
    `directory` (its `ckpt-N_temp` folder: this process's failed save, or
    a killed run's once the step is saved again); never raises, so that
    the save's own error is the one reported."""
    path = os.path.join(directory, f"ckpt-{int(step)}_temp")
    try:
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
    except (tf.errors.OpError, OSError) as error:
        logging.warning("Could not remove %s, left by a save that did not "
                        "finish: %s", path, error)


def _age_s(path: str) -> float:
    """Seconds since `path` was last written (0 where that is unknown)."""
    try:
        return time.time() - tf.io.gfile.stat(path).mtime_nsec / 1e9
    except tf.errors.OpError:
        return 0.0


_WARNED: set = set()
_CKPT = re.compile(r"^ckpt-(\d+)\.index$")
# Seconds after which a ckpt-N_temp folder is a save that did not finish.
PARTIAL_AGE_S = 600
_PARTIAL = re.compile(r"^ckpt-\d+_temp$")
_STEP = re.compile(r"ckpt-(\d+)$")


def _checkpoint_state(directory: str):
    """TensorFlow's reading of the state file (None where it is missing,
    empty or not parsed; TensorFlow's own warnings left out)."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        return tf.train.get_checkpoint_state(directory)
    except ValueError:  # an empty file
        return None
    finally:
        logger.setLevel(level)


def _unlisted(directory: str) -> List[str]:
    if not tf.io.gfile.isdir(directory):
        return []
    steps = [int(m.group(1)) for m in map(
        _CKPT.match, tf.io.gfile.listdir(directory)) if m]
    return [os.path.join(directory, f"ckpt-{step}")
            for step in sorted(steps, reverse=True)]
