"""Resuming a run: the newest complete checkpoint of a workdir.

A listed checkpoint whose files are missing or unreadable is skipped with a
warning, and one that does not fit the model stops the run with a
`TrainingError` that names the fix.
"""

from __future__ import annotations

from typing import Optional

import tensorflow as tf
from absl import logging

from keras_vit.errors import (  # (TrainingError: here too)
    TrainingError,
    shorten,
    without_op_name,
)
from keras_vit.storage import checkpoint_list
from keras_vit.storage import workdir as wd
from keras_vit.values import name_key


class _Damaged(Exception):
    """A checkpoint whose files are missing, truncated or corrupt."""


# What reading a damaged checkpoint raises.
_DAMAGE = wd.DAMAGE


def restore_latest(items: dict, ckpt_dir: str) -> Optional[str]:
    """Restores the newest complete checkpoint listed in `ckpt_dir`
    (`items` loses "iterator" where that checkpoint holds none).

    A listed checkpoint whose files are missing or unreadable (a full disk,
    an interrupted copy) is skipped with a warning, never silently: starting
    from scratch instead would let checkpoint rotation delete the older,
    good ones.

    Returns:
        str or None. The checkpoint restored; None if none is listed.
    """
    candidates = checkpoint_list.listed(ckpt_dir)
    if not candidates:
        return None
    problems = []
    for path in candidates:
        try:
            if not tf.io.gfile.exists(path + ".index"):
                raise _Damaged("is missing")
            try:
                wd.check_checkpoint(path, items["model"])
            except ValueError as e:
                raise TrainingError(f"Cannot resume from {path}: {e}") from None
            except _DAMAGE as e:
                raise _Damaged(f"is unreadable ({_first_line(e)})") from None
            _restore(items, path)
            return path
        except _Damaged as e:
            problems.append(f"{path} {e}")
            if path != candidates[-1]:
                logging.warning(
                    "Checkpoint %s %s: resuming from the previous complete "
                    "checkpoint.", path, e,
                )
    raise TrainingError(
        f"No complete checkpoint in {ckpt_dir}: "
        f"{shorten('; '.join(problems), 200)}. Move "
        "the checkpoints folder away to start from scratch, or use a new "
        "`workdir`."
    )


def _first_line(error: BaseException) -> str:
    text = without_op_name(getattr(error, "message", None) or str(error))
    lines = text.strip().splitlines() or [""]
    return f"{type(error).__name__}: {lines[0][:300]}"


def holds_iterator(checkpoint: str) -> bool:
    """Whether `checkpoint` holds a data iterator (not with a pipeline
    whose augmentation keeps its state in a variable, nor with strategies
    whose iterators cannot be saved, nor written with
    `config.checkpoints.iterator=False`)."""
    try:
        names = [n for n, _ in tf.train.list_variables(checkpoint)]
    except (tf.errors.OpError, ValueError):
        return True  # unreadable: the restore reports it
    return any(n.startswith("iterator/") for n in names)


def _restore(items: dict, path: str) -> None:
    """Restores `items` from `path`; a checkpoint without the data
    iterator (saved with `config.checkpoints.iterator=False`, or on a
    strategy whose iterator is not kept) restores the rest, and "iterator"
    leaves `items`: the data order is drawn anew from the restored step."""
    without = "iterator" in items and not holds_iterator(path)
    restored = {k: v for k, v in items.items()
                if not (without and k == "iterator")}
    # A root of our own: the preemption handler adds a counter to the
    # manager's checkpoint, which older checkpoints do not have. What the
    # checkpoint holds beyond `items` (its iterator, resumed with
    # config.checkpoints.iterator=False) is left as expected, unsaid.
    try:
        tf.train.Checkpoint(**restored).restore(
            path
        ).expect_partial().assert_existing_objects_matched()
    except (*_DAMAGE, ValueError, AssertionError, tf.errors.OpError) as e:
        if not checkpoint_list.damaged(e):
            raise TrainingError(
                f"Cannot resume from {path}: it does not match this "
                f"model/config ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:300]}). Use a new `workdir`."
            ) from None
        if "iterator" in items and "dataset iterator" in str(e):
            raise TrainingError(
                f"The data iterator in {path} does not fit this input "
                "pipeline (another keras_vit version saved it, or "
                "config.input changed): "
                "resume with --config.checkpoints.iterator=False, which "
                "restores the weights and optimizer and draws the data "
                "order anew.") from None
        raise _Damaged(f"is unreadable ({_first_line(e)})") from None
    if without:  # once restored: a damaged one's fallback may hold it
        logging.info("%s holds no data iterator: the data order is drawn "
                     "anew from its step, and this run's checkpoints hold "
                     "none either.", path)
        del items["iterator"]


def check_same_classes(workdir: str, ckpt_dir: str, class_names) -> None:
    """Refuses to resume a run whose data now names other classes than
    the run's labels.txt (a class folder renamed, added or removed): the
    head's outputs would change meaning under its trained weights."""
    saved = wd.read_class_names(workdir)
    if not saved or not class_names:
        return
    saved_keys, keys = ([name_key(n) for n in names]  # (é as é)
                        for names in (saved, class_names))
    if saved_keys == keys or not checkpoint_list.listed(ckpt_dir):
        return
    gone = [n for n, k in zip(saved, saved_keys) if k not in keys]
    new = [n for n, k in zip(class_names, keys) if k not in saved_keys]
    what = " and ".join(part for part in (
        f"lacks {shorten(', '.join(gone))}" if gone else "",
        f"adds {shorten(', '.join(new))}" if new else "",
        "names them in another order" if not gone and not new else "")
        if part)
    raise TrainingError(
        f"The run in {workdir} was trained on the classes of its "
        f"{wd.LABELS} ({shorten(', '.join(saved))}), and the data {what}: the "
        "head's outputs would change meaning. Resume with the data it was "
        "trained on (the class folders as they were), or train a new run "
        "in another --workdir.")
