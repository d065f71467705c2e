"""A model and its optimizer from a run config (configs/*.py).

Training builds them to train, and `keras_vit.checkpoint` rebuilds them to
read a run's checkpoints back, so both live here, below either: only Keras
and the model core are needed.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit import mpp, optim
from keras_vit.architecture import CONFIG_FIELDS, Architecture
from keras_vit.errors import UsageError
from keras_vit.model import VisionTransformer

# The fields of config.model: the Architecture's (CONFIG_FIELDS).
MODEL_KEYS = CONFIG_FIELDS


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


def config_architecture(config, num_classes: int = 0) -> Architecture:
    """The Architecture of `config.model` at `config.image_size`, with
    `num_classes` classes (0: no head)."""
    values = config.model.to_dict()
    unknown = set(values) - set(MODEL_KEYS)
    if unknown:
        raise UsageError(
            f"Unknown config.model fields {sorted(unknown)}; known: "
            f"{', '.join(MODEL_KEYS)}."
        )
    image_size = config.image_size
    if not isinstance(image_size, int):
        image_size = tuple(image_size)
    return Architecture.create(
        values.pop("variant", None), image_size=image_size,
        num_classes=num_classes, **values)


def config_stride(config) -> int:
    """int. Image pixels per token of `config.model`
    (`Architecture.stride`)."""
    return config_architecture(config).stride


def check_mpp(config) -> None:
    """A ValueError naming the fix for `config.mpp` options that cannot
    work with `config.model`."""
    opts = config.mpp
    mpp.check_options(
        opts.target, opts.colour_bits, opts.grid_size, config_stride(config),
        opts.corrupt_rate, opts.mask_fraction, opts.random_fraction,
    )


def build_model(config, num_classes: int) -> keras.Model:
    """The model of `config.model` at `config.image_size`: a classifier
    (`VisionTransformer`) of `num_classes` classes, or with
    `config.mpp.enabled` the masked-patch-prediction model
    (`keras_vit.mpp.create_mpp_model`; `num_classes` is not used)."""
    if config.mpp.enabled:
        check_mpp(config)
        arch = config_architecture(config)
        kwargs = {k: v for k, v in config.model.to_dict().items()
                  if v is not None}
        opts = config.mpp
        with dtype_policy(config.dtype):
            return mpp.create_mpp_model(
                kwargs.pop("variant", None), target=opts.target,
                colour_bits=opts.colour_bits, grid_size=opts.grid_size,
                image_size=arch.image_size, **kwargs
            )
    arch = config_architecture(config, num_classes)
    with dtype_policy(config.dtype):
        return VisionTransformer(arch)


def build_optimizer(config) -> keras.optimizers.Optimizer:
    """The optimizer of `config.optimizer`, with EMA when
    `config.ema_decay` > 0."""
    return optim.create_optimizer(
        config.optimizer, config.total_steps, config.ema_decay
    )
