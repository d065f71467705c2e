"""A model and its optimizer from a run config (configs/*.py).

Training builds them to train, and `keras_vit.checkpoint` rebuilds them to
read a run's checkpoints back, so both live here, below either: only Keras
and the model core are needed.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit import mpp, optim
from keras_vit.errors import UsageError
from keras_vit.model import create_model, decode_variant
from keras_vit.resnet import resnet_stride

MODEL_KEYS = (
    "variant", "patch_size", "hidden_size", "num_layers", "num_heads",
    "mlp_dim", "pooling", "representation_size", "dropout_rate",
    "attention_dropout_rate", "head_zero_init", "head_bias_init",
    "resnet_layers", "resnet_width", "posemb", "stochastic_depth_rate",
    "remat",
)


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


def config_stride(config) -> int:
    """int. Image pixels per token of `config.model`: the patch size, times
    the ResNet stride for hybrids."""
    model = config.model
    spec = decode_variant(model.variant) if model.variant else None
    stride = model.patch_size or (spec.patch_size if spec else None)
    if stride is None:
        raise UsageError(
            "config.model.variant is None: set config.model.patch_size."
        )
    resnet = model.resnet_layers or (spec.resnet_layers if spec else None)
    return int(stride) * (resnet_stride(resnet) if resnet else 1)


def check_mpp(config) -> None:
    """A ValueError naming the fix for `config.mpp` options that cannot
    work with `config.model`."""
    opts = config.mpp
    mpp.check_options(
        opts.target, opts.colour_bits, opts.grid_size, config_stride(config),
        opts.corrupt_rate, opts.mask_fraction, opts.random_fraction,
    )


def build_model(config, num_classes: int) -> keras.Model:
    """The model of `config.model` at `config.image_size`: a classifier,
    or with `config.mpp.enabled` the masked-patch-prediction model
    (`keras_vit.mpp.create_mpp_model`; `num_classes` is not used)."""
    kwargs = {
        k: v
        for k, v in config.model.to_dict().items()
        if k in MODEL_KEYS and v is not None
    }
    unknown = set(config.model.keys()) - set(MODEL_KEYS)
    if unknown:
        raise UsageError(
            f"Unknown config.model fields {sorted(unknown)}; known: "
            f"{', '.join(MODEL_KEYS)}."
        )
    variant = kwargs.pop("variant", None)
    image_size = config.image_size
    if not isinstance(image_size, int):
        image_size = tuple(image_size)
    if config.mpp.enabled:
        check_mpp(config)
        opts = config.mpp
        with dtype_policy(config.dtype):
            return mpp.create_mpp_model(
                variant, target=opts.target, colour_bits=opts.colour_bits,
                grid_size=opts.grid_size, image_size=image_size, **kwargs
            )
    with dtype_policy(config.dtype):
        return create_model(
            variant, num_classes=num_classes, image_size=image_size, **kwargs
        )


def build_optimizer(config) -> keras.optimizers.Optimizer:
    """The optimizer of `config.optimizer`, with EMA when
    `config.ema_decay` > 0."""
    return optim.create_optimizer(
        config.optimizer, config.total_steps, config.ema_decay
    )
