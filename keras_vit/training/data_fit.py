"""What a run config leaves to its data, settled when the run starts: the
length of a run given in epochs (`config.trainer.total_steps` 0: the
steps of `trainer.epochs` passes over the training split, with the
warm-up and the log, checkpoint and evaluation periods fitted inside
them), an image folder's split alternatives ("val|test": the one the
folder has) and the head width (`num_classes_of`). The run's config.json
records what was settled, so that resuming, keras-vit-evaluate and the
logs read plain numbers and splits."""

from __future__ import annotations

import math
from typing import Dict

from absl import logging

from keras_vit import config_limits
from keras_vit.data import checks as data_checks
from keras_vit.data import folders, sources
from keras_vit.errors import UsageError, shorten

# A derived run warms up for at most this share of its steps.
WARMUP_SHARE = 0.1


def num_classes_of(model_config, inp) -> int:
    """The head width of a run: its `config.model.num_classes`, else (None)
    the class count of its `config.input` data source."""
    if model_config.num_classes is not None:
        if int(model_config.num_classes) < 1:
            raise UsageError(
                f"config.model.num_classes={model_config.num_classes}: a "
                "run's head needs a positive class count; leave it None to "
                "read it from the data."
            )
        if inp.dataset == sources.FOLDER and not inp.vtab_task:
            names = sources.dataset_info(inp).class_names
            if len(names) != int(model_config.num_classes):
                raise UsageError(
                    f"config.model.num_classes={model_config.num_classes}, "
                    f"but the image folder {inp.data_dir} has {len(names)} "
                    f"class folders ({shorten(', '.join(names), 60)}): leave "
                    "num_classes out to take the folder's count, or add or "
                    "remove class folders.")
        return int(model_config.num_classes)
    return sources.dataset_info(inp).num_classes


def global_batch(trainer, inp, replicas: int) -> int:
    """int. The run's global batch (`config.input.batch_size`), checked
    with its steps: positive, and a multiple of the replicas times the
    accumulation steps (each update splits it among them)."""
    config_limits.check_fields({"trainer": trainer, "input": inp},
                               ("trainer.total_steps", "input.batch_size"))
    config_limits.check_batch_split(int(inp.batch_size),
                                    int(trainer.accumulation_steps), replicas)
    return int(inp.batch_size)


def fit(inp, trainer, schedule, log, checkpoints, evals) -> Dict[str, dict]:
    """The sections of a run config to change (`config.replace`'s
    arguments; {} when there is nothing to settle), from its `input`,
    `trainer`, `schedule`, `log`, `checkpoints` and `evals` sections."""
    # An epoch's steps divide by the batch, of the examples kept: these
    # are checked first.
    config_limits.check_fields({"input": inp, "trainer": trainer},
                               ("input.batch_size", "trainer.epochs",
                                "input.train_examples_per_class"))
    out = _splits(inp, evals)
    if int(trainer.total_steps) != 0:
        if inp.dataset in (sources.DIGITS, sources.FOLDER) and not (
                inp.vtab_task):  # (counted without reading a TFDS set; a
            try:  # split that is none is named by the splits' check)
                _say_batch_over(data_checks.training_examples(inp), inp)
            except ValueError:
                pass
        return _fit_given_steps(out, trainer, schedule)
    if float(trainer.epochs) <= 0:
        raise UsageError(
            "config.trainer.total_steps is 0, which asks for the steps of "
            "config.trainer.epochs passes over the training split, but "
            f"epochs is {trainer.epochs}: set one of them above 0.")
    examples = data_checks.training_examples(inp)
    if not examples:
        raise UsageError(
            f"config.trainer.total_steps is 0 but the size of "
            f"{inp.dataset}'s split {inp.train_split!r} is not known: set "
            "config.trainer.total_steps.")
    _say_batch_over(examples, inp)
    batch = int(inp.batch_size)
    epoch = max(1, math.ceil(examples / batch))
    total = max(1, math.ceil(float(trainer.epochs) * examples / batch))
    if total > config_limits.INT64_MAX:
        raise UsageError(
            f"config.trainer.epochs={trainer.epochs} asks for {total:.3g} "
            f"steps of batch {batch} over {examples} images, beyond int64's "
            "range: give fewer epochs.")
    warmup = min(int(schedule.warmup_steps), int(WARMUP_SHARE * total))
    out.update(trainer={"total_steps": total},
               schedule={"warmup_steps": warmup},
               log={"every_steps": _within(log.every_steps, epoch)},
               checkpoints={"every_steps": _within(checkpoints.every_steps,
                                                   epoch)})
    for name, entry in evals.items():
        if entry.type == "accuracy":
            out.setdefault(f"evals.{name}", {})["every_steps"] = _within(
                entry.every_steps, epoch)
    ran = f"{total * batch / examples:.3g}"  # (whole steps: rounded up)
    logging.info(
        "%g epochs of %d training images at batch %d: %d step%s (%s per "
        "epoch%s), a warm-up of %d.", float(trainer.epochs), examples, batch,
        total,
        "s" if total != 1 else "",
        f"{examples / batch:.2f}".rstrip("0").rstrip("."),
        "" if ran == f"{float(trainer.epochs):.3g}" else
        f"; whole steps make it {ran} epochs", warmup)
    return out


def _say_batch_over(examples, inp) -> None:
    """A warning where a batch is larger than the training split (of
    `examples` images, None: not known): the repeated data puts images
    in one batch twice or more."""
    if examples and int(inp.batch_size) > examples:
        logging.warning(
            "config.input.batch_size=%s is more than the %d training "
            "examples of %s: each batch holds some of them twice or more. "
            "A batch of at most %d holds each once.", inp.batch_size,
            examples, shorten(inp.train_split, 40), examples)


def _fit_given_steps(out: Dict[str, dict], trainer, schedule
                     ) -> Dict[str, dict]:
    """A config that counts its run in epochs (the folder config), given
    total_steps instead: a warm-up longer than the run (the config's cap
    for epoch-sized runs) is held to its share of the steps given, as an
    epoch-sized run's is; every other config keeps its values, and the
    limits check names a warm-up that does not fit."""
    total, warmup = int(trainer.total_steps), int(schedule.warmup_steps)
    if float(trainer.epochs) <= 0 or total <= 0 or warmup <= total:
        return out
    fitted = int(WARMUP_SHARE * total)
    out["schedule"] = {"warmup_steps": fitted}
    logging.info(
        "total_steps=%d given: a warm-up of %d steps would not fit; held to "
        "%d, a tenth of the run (--config.schedule.warmup_steps of at most "
        "%d sets another).", total, warmup, fitted, total)
    return out


def _within(every: int, epoch: int) -> int:
    """A period (0: none) of at most one epoch."""
    return min(int(every), epoch) if int(every) > 0 else 0


def _splits(inp, evals) -> Dict[str, dict]:
    """The split fields of an image folder whose alternatives ("val|test")
    name one split of the folder, each made that split."""
    if inp.dataset != sources.FOLDER or inp.vtab_task:
        return {}
    out = {}

    def settle(section: str, field: str, split) -> None:
        if split and "|" in split:
            out.setdefault(section, {})[field] = folders.resolve_split(
                inp.data_dir, split)

    settle("input", "train_split", inp.train_split)
    for name, entry in evals.items():
        if entry.type == "accuracy":
            settle(f"evals.{name}", "split", entry.split)
            settle(f"evals.{name}", "val_split", entry.val_split)
    return out
