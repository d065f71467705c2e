"""The ViT's input layers: patch embedding, class token, position embedding.

Portable Keras 3 (`keras.ops` only), under the same rules as
`keras_vit.layers`, which re-exports them: every layer stores its
constructor arguments, builds its weights in `build()` and returns exactly
those arguments from `get_config()`. Weight names mirror the official Flax
implementation (`embedding`, `cls`, `pos_embedding`).
"""

from __future__ import annotations

import keras
from keras import ops

PACKAGE = "keras_vit"


def check_rate(name: str, value: float) -> None:
    """A dropout-style rate in [0, 1), or a ValueError naming the fix."""
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(
            f"{name} must be in [0, 1), got {value}. Use 0.0 to disable it."
        )


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchEmbedding(keras.layers.Layer):
    """Cuts the image into P x P patches and projects each to `hidden_size`.

    A P x P convolution with stride P and VALID padding (paper Eq. 1), followed
    by flattening the (rows, cols) grid row-major into a token sequence.

    Args:
        patch_size: int. The patch side P in pixels (1 for hybrid models,
            where the input is a CNN feature map).
        hidden_size: int. The token width D.
    """

    def __init__(self, patch_size: int, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.hidden_size = int(hidden_size)

    def build(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        for side, value in (("height", height), ("width", width)):
            if value is not None and value % self.patch_size:
                raise ValueError(
                    f"Input {side} {value} is not divisible by patch size "
                    f"{self.patch_size}: resize the input to a multiple of "
                    f"{self.patch_size}."
                )
        self.conv = keras.layers.Conv2D(
            self.hidden_size,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            kernel_initializer="lecun_normal",
            name="conv",
        )
        self.conv.build(input_shape)
        self.built = True

    def call(self, images):
        x = self.conv(images)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], shape[3]))

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]
        n = None if h is None or w is None else (
            (h // self.patch_size) * (w // self.patch_size)
        )
        return (input_shape[0], n, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(patch_size=self.patch_size, hidden_size=self.hidden_size)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassToken(keras.layers.Layer):
    """Prepends the learnable class embedding x_class to the token sequence.

    Zero-initialised, as in the official implementation.
    """

    def build(self, input_shape):
        self.cls = self.add_weight(
            shape=(1, 1, input_shape[-1]), initializer="zeros", name="cls"
        )
        self.built = True

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.cast(self.cls, tokens.dtype)
        cls = ops.broadcast_to(cls, (batch, 1, ops.shape(tokens)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], n, input_shape[2])


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Adds learnable 1D position embeddings to every token (Eq. 1).

    The class token, when present, is included: the table has one row per
    token of the input sequence. Initialised N(0, 0.02) as in the official
    code. Dropout follows the addition (Appendix B.1).

    Args:
        dropout_rate: float. Dropout applied after adding the embeddings.
    """

    def __init__(self, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        self.dropout_rate = float(dropout_rate)

    def build(self, input_shape):
        if input_shape[1] is None:
            raise ValueError(
                "PositionEmbedding needs a static sequence length: give the "
                "model a fixed image_size."
            )
        self.pos_embedding = self.add_weight(
            shape=(1, input_shape[1], input_shape[2]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="pos_embedding",
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.built = True

    def call(self, tokens, training=None):
        x = tokens + ops.cast(self.pos_embedding, tokens.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(dropout_rate=self.dropout_rate)
        return config
