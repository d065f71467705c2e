"""The numeric limits of a run config, checked before a run starts, each
error naming the field that breaks it and the field behind a limit taken
from another (`config.schedule.warmup_steps=20 must be in [0,
config.trainer.total_steps=10]`): the commands word a config field as its
override, `--config.schedule.warmup_steps`.

The library checks the same values where they are used (an optimizer's
schedule, a layer's rate); this names them as a run config sets them.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Tuple, Union

from keras_vit.errors import UsageError
from keras_vit.objectives import LOSSES

# The choices of fields that the optimizer (keras_vit.optim) and the
# training preprocessing (keras_vit.data.preprocessing) read: here, so
# that a run refuses a misspelt one before it builds a model.
OPTIMIZERS = ("sgd", "adam", "adamw", "lamb")
DECAY_TYPES = ("cosine", "linear", "constant")
PP_TRAIN = ("pretrain", "finetune", "eval")

Bound = Union[None, float, str]  # a number, a field's path, or no bound
# The largest float32: the run computes its values in float32 (or lower).
FLOAT32_MAX = 3.4028234663852886e38
# The largest int64, the widest integer the run's tensors hold.
INT64_MAX = 2**63 - 1


def _unrepresentable(value) -> str:
    """Why the number `value` is none the run can compute with ("" if
    it is one): an int beyond int64, a float not finite or beyond
    float32 (Python's ints compare exactly; nan passes every bound)."""
    if isinstance(value, int):
        return ("" if abs(value) <= INT64_MAX else
                "is beyond int64's range, the widest integer the run holds")
    if math.isfinite(value) and abs(value) <= FLOAT32_MAX:
        return ""
    return (f"is not a finite number within float32's range (largest "
            f"{FLOAT32_MAX:.4g}), in which the run computes")

# (field, low, high, brackets): the value must lie between `low` and
# `high` (None: no bound; a str: that field's value), "[" / "]" closed and
# "(" / ")" open ends, as the message writes them.
LIMITS: Tuple[Tuple[str, Bound, Bound, str], ...] = (
    ("trainer.total_steps", 0, None, "(]"),
    # 0: total_steps says how long the run is.
    ("trainer.epochs", 0, None, "[]"),
    ("input.batch_size", 0, None, "(]"),
    ("schedule.warmup_steps", 0, "trainer.total_steps", "[]"),
    ("schedule.lr", 0, None, "(]"),
    ("schedule.end_lr", 0, None, "[]"),
    ("trainer.ema_decay", 0, 1, "[)"),
    ("trainer.accumulation_steps", 1, None, "[]"),
    ("trainer.steps_per_loop", 1, None, "[]"),
    ("model.patch_size", 0, None, "(]"),
    ("model.hidden_size", 0, None, "(]"),
    ("model.num_layers", 1, None, "[]"),
    ("model.num_heads", 0, None, "(]"),
    ("model.mlp_dim", 0, None, "(]"),
    # 0: the starting model's resolution (the folder config).
    ("model.image_size", 0, None, "[]"),
    ("model.dropout_rate", 0, 1, "[)"),
    ("model.attention_dropout_rate", 0, 1, "[)"),
    ("model.stochastic_depth_rate", 0, 1, "[)"),
    ("input.train_examples_per_class", 0, None, "[]"),
    # None: no resize before the crop.
    ("input.pp.resize_size", 0, None, "(]"),
    ("input.pp.eval_resize_size", 0, None, "(]"),
    ("input.pp.randaug_ops", 0, None, "[]"),
    ("input.pp.randaug_magnitude", 0, None, "[]"),
    ("input.mix.mixup_alpha", 0, None, "[]"),
    ("input.mix.cutmix_alpha", 0, 1, "[]"),
    ("objective.label_smoothing", 0, 1, "[)"),
    ("objective.mpp.corrupt_rate", 0, 1, "(]"),
    ("objective.mpp.colour_bits", 1, 8, "[]"),
    # Periods: 0 turns checkpoints (but the last) and progress lines off.
    ("checkpoints.every_steps", 0, None, "[]"),
    ("checkpoints.keep", 1, None, "[]"),
    ("log.every_steps", 1, None, "[]"),
    ("log.every_seconds", 0, None, "[]"),
    ("input.shuffle_buffer", 1, None, "[]"),
    ("input.prefetch", -1, None, "[]"),  # -1: tf.data.AUTOTUNE
    ("trainer.grad_clip_norm", 0, None, "[]"),  # 0 or None: no clipping
    ("optimizer.weight_decay", 0, None, "[]"),
    ("optimizer.momentum", 0, 1, "[)"),
    ("optimizer.b1", 0, 1, "[)"),
    ("optimizer.b2", 0, 1, "[)"),
    ("model.head_bias_init", None, None, "[]"),  # any finite number
    ("trainer.connect_timeout_s", 0, None, "[]"),
    ("seed", 0, 2**32 - 1, "[]"),
)


def _value(config, path: str):
    node = config
    for key in path.split("."):
        node = node[key]
    return node


def _bound(config, bound: Bound) -> Tuple[Optional[float], str]:
    """(value, as written) of a bound: a number, or a field's value."""
    if isinstance(bound, str):
        value = _value(config, bound)
        return value, f"config.{bound}={value}"
    return bound, "" if bound is None else str(bound)


def _wanted(low: str, high: str, brackets: str, open_low: bool) -> str:
    if not high:
        return f"must be {'>' if open_low else '>='} {low}"
    return f"must be in {brackets[0]}{low}, {high}{brackets[1]}"


# Per evaluator type (`config_schema.EVALUATORS`), the limits of its
# fields, as LIMITS words them, for every entry of `evals` of that type.
EVALUATOR_LIMITS = {
    # batch_size 0 or None: the training (or input) batch.
    "accuracy": (("batch_size", 0, None, "[]"),
                 ("every_steps", 0, None, "[]")),
    "fewshot": (("batch_size", 0, None, "[]"),
                ("l2_reg", 0, None, "(]")),
    "vtab": (),
}
# Per evaluator type, its fields that list values: (field, low, brackets,
# whole) for every value, and at least one value, none twice; `whole`:
# each a whole number (a count, a step or a seed).
EVALUATOR_LISTS = {
    "accuracy": (),
    "fewshot": (("shots", 1, "[]", True), ("seeds", 0, "[]", True)),
    "vtab": (("sweep.lrs", 0, "(]", False), ("sweep.steps", 1, "[]", True)),
}


def _check(config, path: str, value, low: Bound, high: Bound,
           brackets: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return  # None (unset), or a size given as (height, width)
    low_value, low_text = _bound(config, low)
    high_value, high_text = _bound(config, high)
    open_low, open_high = brackets[0] == "(", brackets[1] == ")"
    below = low_value is not None and (
        value < low_value or (open_low and value == low_value))
    above = high_value is not None and (
        value > high_value or (open_high and value == high_value))
    why = "" if below or above else _unrepresentable(value)
    if why:
        raise UsageError(f"config.{path}={value} {why}.")
    if below or above:
        raise UsageError(
            f"config.{path}={value} "
            f"{_wanted(low_text, high_text, brackets, open_low)}"
            f"{_ALSO.get(path, '') if value <= 0 else ''}."
        )


# What else a field takes beside its limits (said of a value below them).
# (0 is refused only where no epochs are set)
_ALSO = {"trainer.total_steps": ", or 0 with config.trainer.epochs > 0 to "
         "count the run in epochs"}


def check_list(path: str, values, low: Bound, brackets: str,
               whole: bool, prefix: str = "config.") -> None:
    """Each of `values` (a tuple or list of numbers) at least `low`
    (None: any number) and, if `whole`, a whole number; one value or
    more, none twice. Refused as `prefix` + `path` (a config field, or
    with prefix "" an argument of a library call)."""
    written = ",".join(str(v) for v in values) if isinstance(
        values, (tuple, list)) else str(values)
    name = prefix + path
    if not isinstance(values, (tuple, list)) or not values:
        raise UsageError(
            f"{name}={written or '()'} must list one value or more "
            f"(e.g. {name}=1,2).")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise UsageError(f"{name}={written}: {value!r} is not a number.")
        why = _unrepresentable(value)
        if why:
            raise UsageError(f"{name}={written}: {value} {why}.")
        if low is not None and (value < low or (
                brackets[0] == "(" and value == low)):
            raise UsageError(
                f"{name}={written}: each value must be "
                f"{'>' if brackets[0] == '(' else '>='} {low}.")
        if whole and value != int(value):
            raise UsageError(f"{name}={written}: {value} is not a "
                             "whole number.")
    if len(set(values)) < len(values):
        twice = sorted({v for v in values if list(values).count(v) > 1})
        raise UsageError(f"{name}={written}: "
                         f"{', '.join(map(str, twice))} given twice; "
                         "list each value once.")


def check_fields(config, paths) -> None:
    """`check_limits` of the fields `paths` alone: those a run needs
    before its data settles the rest (an epoch's steps need a batch)."""
    for path, low, high, brackets in LIMITS:
        if path in paths:
            _check(config, path, _value(config, path), low, high, brackets)


def check_limits(config, settled_later=()) -> None:
    """A UsageError naming the first field of run config `config` outside
    its limits (`LIMITS`, then `check_evaluators`); fields left None, and
    those of `settled_later`, are not checked. A training run checks them
    once its data has settled what the config leaves to it
    (`training.data_fit`)."""
    for path, low, high, brackets in LIMITS:
        if path not in settled_later:
            _check(config, path, _value(config, path), low, high, brackets)
    _check_range("input.pp.area_range", _value(config, "input.pp.area_range"))
    for path, allowed in CHOICES:
        value = _value(config, path)
        if value is not None and value not in allowed:
            raise UsageError(
                f"config.{path}={value!r}: use one of "
                f"{', '.join(map(repr, allowed))}.")
    _check_combinations(config)
    check_resize(config)
    check_evaluators(config)


def check_trials(config, sweep) -> None:
    """`check_limits` of each training run a VTAB-1k evaluation makes of
    `config` (before the first task): with `sweep` (the vtab evaluator's)
    enabled, one per (lr, steps) pair it lists, else the config's own."""
    check_evaluators(config)
    pairs = ([(lr, steps) for lr in sweep.lrs for steps in sweep.steps]
             if sweep.enabled else [None])
    for pair in pairs:
        trial = config.copy_and_resolve_references()
        if pair is not None:
            trial.schedule.lr = float(pair[0])
            trial.trainer.total_steps = int(pair[1])
        # A run counted in epochs: its data settles its steps, and a
        # warm-up longer than them is held to a share (`data_fit`).
        settled = ()
        if float(trial.trainer.epochs or 0) > 0:
            settled = ("schedule.warmup_steps",) + (
                ("trainer.total_steps",)
                if int(trial.trainer.total_steps) == 0 else ())
        try:
            check_limits(trial, settled)
        except UsageError as error:
            if pair is None:
                raise
            raise UsageError(
                f"{str(error).rstrip('.')} (in the sweep's trial at "
                f"schedule.lr={pair[0]}, trainer.total_steps={pair[1]})."
            ) from None


# Fields of a few named values (the library checks the same where it
# builds the model or the optimizer; here they are named as flags first).
CHOICES = (
    ("init.head", ("match", "fits", "zero")),
    ("input.pp.train", PP_TRAIN),
    ("objective.loss", LOSSES),
    ("optimizer.name", OPTIMIZERS),
    ("schedule.decay_type", DECAY_TYPES),
    ("model.pooling", ("token", "gap")),
    ("model.posemb", ("learn", "sincos2d")),
    ("model.remat", ("none", "block", "dots")),
    ("trainer.dtype", ("float32", "bfloat16")),
)


# The optimizers that take no weight decay here, and why.
_NO_DECAY = {
    "sgd": "takes no weight decay (the paper's fine-tuning uses none)",
    "adam": "has no decoupled weight decay (adamw, the paper's pre-training "
            "recipe, has)",
}


def _check_combinations(config) -> None:
    """Fields that are each in range but do not go together."""
    name = _value(config, "optimizer.name")
    if name in _NO_DECAY and float(
            _value(config, "optimizer.weight_decay") or 0):
        raise UsageError(
            f"config.optimizer.name={name!r} {_NO_DECAY[name]}: set "
            "config.optimizer.weight_decay=0, or config.optimizer.name=adamw.")
    batch = _value(config, "input.batch_size")
    steps = _value(config, "trainer.accumulation_steps")
    if isinstance(batch, int) and isinstance(steps, int) and steps > 0:
        check_batch_split(batch, steps)


def check_batch_split(batch: int, accumulation: int, replicas: int = 1):
    """A UsageError unless the global batch `batch` splits evenly among
    `replicas` and, on each, into `accumulation` micro-batches (the
    training strategy's replicas are known once it is built)."""
    parts = replicas * accumulation
    if not batch % parts:
        return
    among = (f"into config.trainer.accumulation_steps={accumulation} equal "
             "micro-batches" if replicas == 1 else
             f"among {replicas} replica(s) x config.trainer."
             f"accumulation_steps={accumulation}")
    raise UsageError(
        f"config.input.batch_size={batch} does not split {among}: use a "
        f"multiple of {parts}.")


def check_resize(config) -> None:
    """The evaluation resize is at least the image's side: images are
    resized to it, then the central image_size crop is taken (None: no
    resize; an image_size of 0, the starting model's, is not known yet)."""
    resize = _value(config, "input.pp.eval_resize_size")
    size = _value(config, "model.image_size")
    sides = list(size) if isinstance(size, (tuple, list)) else [size]
    if resize is None or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0
            for n in sides + [resize]):
        return
    if resize < max(sides):
        written = "x".join(map(str, sides))
        raise UsageError(
            f"config.input.pp.eval_resize_size={resize} is smaller than "
            f"config.model.image_size={written}: images are resized to it, "
            "then the central image_size crop is taken. Set "
            f"config.input.pp.eval_resize_size to at least {max(sides)} "
            "(or None: resized to the image size directly).")


def _check_range(path: str, values) -> None:
    """A (low, high) share of the image: 0 < low <= high <= 1."""
    if values is None:
        return
    pair = list(values) if isinstance(values, (tuple, list)) else [values]
    if not (len(pair) == 2 and all(
            isinstance(v, (int, float)) and not isinstance(v, bool)
            for v in pair) and 0 < pair[0] <= pair[1] <= 1):
        written = ",".join(str(v) for v in pair)
        raise UsageError(
            f"config.{path}={written} must be two shares of the image, "
            f"low,high with 0 < low <= high <= 1 (e.g. config.{path}="
            "0.05,1.0).")


def check_evaluators(config) -> None:
    """A UsageError naming the first field of an entry of `config.evals`
    outside its type's limits (`EVALUATOR_LIMITS`, `EVALUATOR_LISTS`):
    what keras-vit-evaluate checks of the config it is given (a training
    config's own fields, such as a total_steps of 0 that its data settles,
    are the training run's)."""
    for name in config.evals:
        kind = config.evals[name].type
        for field, low, high, brackets in EVALUATOR_LIMITS.get(kind, ()):
            path = f"evals.{name}.{field}"
            _check(config, path, _value(config, path), low, high, brackets)
        for field, low, brackets, whole in EVALUATOR_LISTS.get(kind, ()):
            path = f"evals.{name}.{field}"
            check_list(path, _value(config, path), low, brackets, whole)
        if kind == "fewshot":
            _check_datasets(f"evals.{name}.datasets",
                            config.evals[name].datasets)


# The fields of each few-shot data set (evals.<name>.datasets.<data set>).
DATASET_FIELDS = ("dataset", "train_split", "test_split")


def _check_datasets(path: str, datasets) -> None:
    """Each few-shot data set a section of the three DATASET_FIELDS, each
    a string (a data source and two of its splits)."""
    example = ("dict(dataset='cifar100', train_split='train', "
               "test_split='test')")
    for name, entry in (datasets or {}).items():
        fields = dict(entry) if hasattr(entry, "keys") else None
        wrong = (None if fields is None else
                 [f for f in DATASET_FIELDS if not isinstance(
                     fields.get(f), str) or not fields[f].strip()]
                 + sorted(set(fields) - set(DATASET_FIELDS)))
        if fields is None or wrong:
            missing = fields is not None and wrong[0] in DATASET_FIELDS
            why = ("is not a section of fields" if fields is None else
                   f"has no {wrong[0]} (a non-empty string)" if missing
                   else f"has an unknown field {wrong[0]!r}")
            raise UsageError(
                f"config.{path}.{name} {why}: a few-shot data set names "
                f"its data and two of its splits, {example}.")
