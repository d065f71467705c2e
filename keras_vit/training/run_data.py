"""A training run's distributed data: its training iterators, evaluation
passes and their progress (`RunData`), what its checkpoints hold
(`checkpoint_items`), and what the input pipeline takes of the run
besides `config.input` (`run_input`)."""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Tuple

import tensorflow as tf
from absl import logging

from keras_vit.build import config_stride
from keras_vit.data import checks as data_checks
from keras_vit.data import masking, sources
from keras_vit.data import pipeline as input_pipeline
from keras_vit.errors import UsageError
from keras_vit.scoring import evaluator


@dataclasses.dataclass
class RunData:
    """A run's distributed data: training iterators and evaluation
    passes of its `config.input` section."""

    inp: Any
    run: input_pipeline.RunInput
    strategy: Any
    batch: int
    micro_batch: int
    splits: Any = ()
    checkpointable: List[bool] = dataclasses.field(default_factory=list)
    # The checkpoint whose data iterator the run resumed with, if any.
    restored_iterator: Optional[str] = None
    # The evaluation data of cached evaluators, by (split, batch): made
    # once, so the cache filled by the first evaluation serves the next.
    cached: Dict[Tuple[str, int], Any] = dataclasses.field(
        default_factory=dict)

    def explained(self, training: bool = False):
        """A context that turns input-pipeline failures of the run's
        splits into clear errors (`data.checks.explained_errors`); a
        `training` call's may come from the restored iterator's images."""
        return data_checks.explained_errors(
            self.inp, self.splits,
            self.restored_iterator if training else None)

    def skipped_images(self) -> dict:
        """{split: unreadable files left out} of the run's image folder
        (`config.input.skip_bad_images`), for metrics.json."""
        return data_checks.skipped_images(self.inp)

    def check_eval_batches(self, evals) -> None:
        """Each accuracy evaluator's batch splits over the replicas (said
        before training, not at the first evaluation)."""
        replicas = self.strategy.num_replicas_in_sync
        for name in evals:
            entry = evals[name]
            if entry.type == "accuracy" and int(
                    entry.batch_size or self.micro_batch) % replicas:
                raise UsageError(
                    f"config.evals.{name}.batch_size={entry.batch_size} is "
                    f"not divisible by the {replicas} replicas: use a "
                    f"multiple of {replicas}.")

    def eval_fn(self, entry, split: str):
        """One evaluation pass over `split` for an accuracy evaluator
        `entry` (its batch, else the training micro-batch; its cache: the
        split read once, the same data then for every evaluation)."""
        eval_batch = int(entry.batch_size or self.micro_batch)
        key = (split, eval_batch)
        if entry.cache and key in self.cached:
            return self.cached[key]
        data = self.strategy.distribute_datasets_from_function(
            lambda ctx: input_pipeline.eval_dataset(
                self.inp, self.run, split, eval_batch, ctx,
                cache=bool(entry.cache))
        )
        if entry.cache:
            self.cached[key] = data
        return data

    def eval_progress(self, entry, split: str, every_s: float):
        """The `on_batch` that tells an evaluation's progress (`eval_fn`'s
        batches) every `every_s` seconds."""
        eval_batch = int(entry.batch_size or self.micro_batch)
        total = sources.num_split_examples(self.inp, split)
        return evaluator.progress_callback(
            -(-total // eval_batch) if total else None, eval_batch,
            f"eval {split}", every_s)

    def make_iterator(self, start_step: int):
        def dataset_fn(ctx):
            ds = input_pipeline.train_dataset(
                self.inp, self.run, self.batch, ctx, start_step=start_step
            )
            self.checkpointable.append(input_pipeline.is_checkpointable(ds))
            return ds

        return iter(self.strategy.distribute_datasets_from_function(
            dataset_fn))


def checkpoint_items(model, optimizer, data: RunData, with_iterator: bool):
    """(what each checkpoint holds, the training iterator made now or
    None): the iterator too where `config.checkpoints.iterator` asks and
    the strategy and pipeline allow."""
    items = dict(model=model, optimizer=optimizer)
    if not with_iterator:
        return items, None
    train_iter = data.make_iterator(0)
    if not isinstance(train_iter, tf.__internal__.tracking.Trackable):
        logging.warning(
            "The %s input iterator cannot be checkpointed: a resumed run "
            "draws a new data order.", type(data.strategy).__name__,
        )
    elif not all(data.checkpointable):
        logging.warning(
            "The input pipeline reads from Python (a generator or "
            "py_function) or keeps random state in a variable, which "
            "cannot be checkpointed: a resumed run draws a new data order."
        )
    else:
        items["iterator"] = train_iter
    return items, train_iter


def run_input(seed: int, model_config, mpp_config
               ) -> input_pipeline.RunInput:
    """What the input pipeline takes of a run besides `config.input`."""
    mpp = mpp_config if mpp_config.enabled else None
    patches = masking.num_patches(
        model_config.image_size, config_stride(model_config)) if mpp else 0
    return input_pipeline.RunInput(
        image_size=model_config.image_size, seed=int(seed),
        num_classes=model_config.num_classes, mpp=mpp, patches=patches)
