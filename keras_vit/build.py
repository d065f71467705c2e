"""A model and its optimizer from a run config (configs/*.py).

Training builds them to train, and `keras_vit.checkpoint` rebuilds them to
read a run's checkpoints back, so both live here, below either: only Keras
and the model core are needed.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit import grid, mpp, optim
from keras_vit.architecture import CONFIG_FIELDS, Architecture
from keras_vit.errors import UsageError
from keras_vit.model import VisionTransformer


@contextlib.contextmanager
def dtype_policy(dtype: str):
    """Builds layers under `mixed_bfloat16` when dtype == "bfloat16"."""
    if dtype not in ("float32", "bfloat16"):
        raise UsageError(
            f'dtype must be "float32" or "bfloat16", got {dtype!r}.'
        )
    previous = keras.config.dtype_policy()
    if dtype == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def config_architecture(model_config, num_classes: int = 0) -> Architecture:
    """The Architecture of a run's `config.model` section at its
    image_size, with `num_classes` classes (0: no head; the section's own
    num_classes is the run's business, not the architecture's)."""
    values = model_config.to_dict()
    values.pop("num_classes", None)
    image_size = values.pop("image_size")
    unknown = set(values) - set(CONFIG_FIELDS)
    if unknown:
        raise UsageError(
            f"Unknown config.model fields {sorted(unknown)}; known: "
            f"{', '.join(CONFIG_FIELDS)}, image_size, num_classes."
        )
    if not isinstance(image_size, int):
        image_size = tuple(image_size)
    return Architecture.create(
        values.pop("variant", None), image_size=image_size,
        num_classes=num_classes, **values)


def checked_architecture(model_config) -> Architecture:
    """`config_architecture(model_config)`, refusing an image size of
    more tokens than `grid.MAX_TOKENS` (a typo: 38400 for 384) before a
    model is built, which the system's out-of-memory killer would end
    without a word."""
    arch = config_architecture(model_config)
    grid.check_tokens(arch.image_size, arch.stride)
    return arch


def config_stride(model_config) -> int:
    """int. Image pixels per token of a `config.model` section
    (`Architecture.stride`)."""
    return config_architecture(model_config).stride


def check_mpp(mpp_config, model_config) -> None:
    """A ValueError naming the fix for `config.objective.mpp` options that
    cannot work with `config.model`."""
    opts = mpp_config
    mpp.check_options(
        opts.target, opts.colour_bits, opts.grid_size,
        config_stride(model_config), opts.corrupt_rate, opts.mask_fraction,
        opts.random_fraction,
    )
    rows, cols = config_architecture(model_config).grid()
    mpp.check_patches(rows * cols)


def build_model(model_config, num_classes: int, *, dtype: str = "float32",
                mpp_config=None) -> keras.Model:
    """The model of a `config.model` section at its image_size, in
    `dtype` (`config.trainer.dtype`): a classifier (`VisionTransformer`)
    of `num_classes` classes, or, given an enabled `config.objective.mpp`
    section, the masked-patch-prediction model
    (`keras_vit.mpp.MppModel`; `num_classes` is not used)."""
    if mpp_config is not None and mpp_config.enabled:
        check_mpp(mpp_config, model_config)
        with dtype_policy(dtype):
            return mpp.MppModel(
                config_architecture(model_config),
                target=mpp_config.target,
                colour_bits=mpp_config.colour_bits,
                grid_size=mpp_config.grid_size)
    arch = config_architecture(model_config, num_classes)
    with dtype_policy(dtype):
        return VisionTransformer(arch)


def build_optimizer(optimizer_config, schedule_config, trainer_config
                    ) -> keras.optimizers.Optimizer:
    """The optimizer of the `config.optimizer` and `config.schedule`
    sections over `config.trainer.total_steps`, with EMA when
    `config.trainer.ema_decay` > 0."""
    return optim.create_optimizer(
        optimizer_config, trainer_config.total_steps,
        trainer_config.ema_decay, schedule=schedule_config)


def build_run(config, num_classes: int):
    """(model, optimizer) of a whole run config: the model of its `model`
    section in `trainer.dtype` (the MPP model with `objective.mpp`), the
    optimizer of its `optimizer`, `schedule` and `trainer` sections. What
    training builds, and what a run's checkpoints are read back into."""
    model = build_model(config.model, num_classes, dtype=config.trainer.dtype,
                        mpp_config=config.objective.mpp)
    optimizer = build_optimizer(config.optimizer, config.schedule,
                                config.trainer)
    return model, optimizer
