"""The parts of one training run that the host loop (`loop.run`) drives:
its trainer, data, checkpoint writer and the callbacks around them."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable, Dict, Optional


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
    earlier versions, which took (model, class names), gets those two."""
    if on_finish is None:
        return None
    try:
        inspect.signature(on_finish).bind(None, None, None)
    except TypeError:
        try:
            inspect.signature(on_finish).bind(None, None)
        except TypeError:
            return on_finish  # neither: its own error, when it is called
        return lambda model, names, step: on_finish(model, names)
    except ValueError:  # no signature to read (a builtin): as it is
        pass
    return on_finish
