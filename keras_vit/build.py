"""A model and its optimizer from a run config (configs/*.py).

Training builds them to train, and `keras_vit.checkpoint` rebuilds them to
read a run's checkpoints back, so both live here, below either: only Keras
and the model core are needed.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit import optim
from keras_vit.model import create_model

MODEL_KEYS = (
    "variant", "patch_size", "hidden_size", "num_layers", "num_heads",
    "mlp_dim", "pooling", "representation_size", "dropout_rate",
    "attention_dropout_rate", "head_zero_init", "resnet_layers",
    "resnet_width", "remat",
)


@contextlib.contextmanager
def dtype_policy(dtype: str):
    """Builds layers under `mixed_bfloat16` when dtype == "bfloat16"."""
    if dtype not in ("float32", "bfloat16"):
        raise ValueError(
            f'dtype must be "float32" or "bfloat16", got {dtype!r}.'
        )
    previous = keras.config.dtype_policy()
    if dtype == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def build_model(config, num_classes: int) -> keras.Model:
    """The model of `config.model` at `config.image_size`."""
    kwargs = {
        k: v
        for k, v in config.model.to_dict().items()
        if k in MODEL_KEYS and v is not None
    }
    unknown = set(config.model.keys()) - set(MODEL_KEYS)
    if unknown:
        raise ValueError(
            f"Unknown config.model fields {sorted(unknown)}; known: "
            f"{', '.join(MODEL_KEYS)}."
        )
    variant = kwargs.pop("variant", None)
    image_size = config.image_size
    if not isinstance(image_size, int):
        image_size = tuple(image_size)
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
