"""The parts of one training run that the host loop (`loop.run`) drives:
its trainer, data, checkpoint writer and the callbacks around them."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Optional

from keras_vit.errors import UsageError


@dataclasses.dataclass
class Run:
    """The parts of one training run the host loop drives.

    Attributes:
        workdir: str.
        strategy: tf.distribute.Strategy.
        trainer: Trainer (or MppTrainer).
        train_iter: the distributed training iterator.
        eval_fn: (evaluator entry, split) -> distributed evaluation data.
        writer: state.CheckpointWriter. Saves this worker's part of each
            checkpoint.
        handler: PreemptionCheckpointHandler or None.
        chief: bool. This worker writes the run's files.
        info: the data source's DatasetInfo (class names).
        batch: int. Images per optimizer update.
        on_finish: (model, class names, step) -> dict or None, on the
            chief after the final evaluation.
        explained: (training=False) -> context manager turning input
            failures into clear errors (`data.checks.explained_errors`).
        eval_progress: (evaluator entry, split, seconds) -> the `on_batch`
            of an evaluation that reports its progress, or None.
        records: records.RunRecords or None. The history rows and the best
            checkpoint.
        skipped_images: () -> {split: unreadable images left out}.
    """

    workdir: str
    strategy: Any
    trainer: Any
    train_iter: Any
    eval_fn: Callable
    writer: Any
    handler: Any
    chief: bool
    info: Any
    batch: int
    on_finish: Optional[Callable]
    explained: Callable
    eval_progress: Optional[Callable] = None
    records: Any = None
    skipped_images: Callable[[], Dict[str, int]] = dict


def taking_step(on_finish: Optional[Callable]) -> Optional[Callable]:
    """`on_finish` called as (model, class names, step): one written for
    earlier versions, which took (model, class names), gets those two.

    Raises:
        UsageError: `on_finish` takes neither, before the run trains (it
            would fail after the whole run).
    """
    if on_finish is None:
        return None
    try:
        signature = inspect.signature(on_finish)
    except (TypeError, ValueError):  # no signature to read: as it is
        return on_finish
    for count in (3, 2):
        try:
            signature.bind(*[None] * count)
        except TypeError:
            continue
        return on_finish if count == 3 else (
            lambda model, names, step: on_finish(model, names))
    raise UsageError(
        f"on_finish{signature} is called with three arguments after the "
        "final evaluation: (model, class_names, step).")
