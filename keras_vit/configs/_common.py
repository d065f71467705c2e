"""Blocks the shipped recipes share, defined once (big_vision's
configs/common.py does the same): each takes the run config it changes."""

import math

from keras_vit.checkpoint.zoo import augreg
from keras_vit.errors import UsageError


def whole_arg(args, key: str, what: str, example: int) -> int:
    """Config argument `key` of `args` (`parse_config_arg`'s dict) as a
    whole number of at least 1, `what` it counts; one line naming it
    otherwise (not Python's "invalid literal for int()")."""
    value = str(args[key]).strip()
    if not value.isdigit() or int(value) < 1:
        raise UsageError(
            f"Config argument {key}={value!r}: a whole number of {what} "
            f"of at least 1 (e.g. :{key}={example}).")
    return int(value)


def number_arg(args, key: str, what: str, example: str,
               kind: str = "of at least 0") -> float:
    """Config argument `key` of `args` as a finite number, `what` it sets:
    `kind` "of at least 0", "above 0" or "in [0, 1)"; one line naming it
    otherwise (not Python's "could not convert string to float", nor a
    field the user never typed)."""
    value = str(args[key]).strip()
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    fits = {"of at least 0": number >= 0, "above 0": number > 0,
            "in [0, 1)": 0 <= number < 1}[kind]
    if not (math.isfinite(number) and fits):
        raise UsageError(
            f"Config argument {key}={value!r}: {what}, a number {kind} "
            f"(e.g. :{key}={example}).")
    return number


def regularisation_args(args) -> dict:
    """The AugReg config arguments do, sd (in [0, 1)) and wd (at least 0)
    of `args` as numbers (`number_arg`)."""
    return {key: number_arg(args, key, what, "0.1", kind)
            for key, what, kind in (
                ("do", "the dropout rate", "in [0, 1)"),
                ("sd", "the stochastic depth rate", "in [0, 1)"),
                ("wd", "the weight decay (times the learning rate)",
                 "of at least 0"))}


def set_augmentation(config, aug: str) -> None:
    """Sets a run config's RandAugment (pp.randaug_ops, randaug_magnitude)
    and Mixup (mix.mixup_alpha) to an AugReg `aug` setting
    (`augreg.AUGMENTATION`)."""
    if aug not in augreg.AUGMENTATION:
        raise UsageError(
            f"Unknown aug setting {aug!r}: use one of "
            f"{', '.join(augreg.AUGMENTATION)}."
        )
    setting = augreg.AUGMENTATION[aug]
    pp = config.input.pp
    pp.randaug_ops, pp.randaug_magnitude = setting["randaug"]
    config.input.mix.mixup_alpha = setting["mixup"]


# ImageNet's splits as the recipes use them: ImageNet-1k from TFDS with 1%
# of train held out for the periodic evaluation and the validation split
# reported; ImageNet-21k (no official test split) with 50,000 training
# images held out for both.
IMAGENET1K_SPLITS = ("train[:99%]", "train[99%:]", "validation")
IMAGENET21K_HELD_OUT = 50_000
IMAGENET21K_SPLITS = (f"train[{IMAGENET21K_HELD_OUT}:]",
                      f"train[:{IMAGENET21K_HELD_OUT}]",
                      f"train[:{IMAGENET21K_HELD_OUT}]")


def large_run(config, *, splits, batch: int, eval_batch: int,
              eval_every: int) -> None:
    """What every large pre-training recipe (a TPU pod, millions of
    images) sets alike: the training, periodic and final evaluation
    `splits`; `batch` examples per update (accumulation_steps for fewer
    cores) and `eval_batch` per evaluation batch; bfloat16 compute with
    float32 weights, logits and loss; 100 steps per host call, logging
    every 500 steps, evaluation every `eval_every`, a checkpoint every
    5,000; a 250,000-image shuffle buffer (encoded images, per input
    pipeline), and the input iterator not checkpointed (its shuffle buffer
    would add gigabytes to every checkpoint): a resumed run draws a new
    data order."""
    (config.input.train_split, config.evals.test.val_split,
     config.evals.test.split) = splits
    config.input.batch_size = batch
    config.evals.test.batch_size = eval_batch
    config.trainer.dtype = "bfloat16"
    config.trainer.steps_per_loop = 100
    config.log.every_steps = 500
    config.evals.test.every_steps = eval_every
    config.checkpoints.every_steps = 5_000
    config.checkpoints.iterator = False
    config.input.shuffle_buffer = 250_000
