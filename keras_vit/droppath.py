"""Stochastic depth (Huang et al. 2016) for the encoder's residual
branches, in portable Keras 3.

A dropped branch contributes nothing for that example; a kept one is
scaled by 1 / (1 - rate), so the expected output is that of the network
without it, and at inference the network is exactly that network.
"""

from __future__ import annotations

from typing import List

import keras
from keras import ops

from keras_vit.embedding import PACKAGE, check_rate


def stochastic_depth_rates(rate: float, num_layers: int) -> List[float]:
    """Per-block rates: linear over depth, 0 for the first block and `rate`
    for the last, as timm's VisionTransformer (`drop_path_rate`:
    torch.linspace(0, rate, depth)) and DeiT do. This is Huang et al.'s
    linear decay rule: the early blocks, whose features every later block
    reads, are kept most reliably."""
    if num_layers == 1:
        return [0.0]
    return [rate * i / (num_layers - 1) for i in range(num_layers)]


@keras.saving.register_keras_serializable(package=PACKAGE)
class DropPath(keras.layers.Layer):
    """Drops a residual branch per example while training (timm's
    `DropPath`).

    The branch comes as (batch * queries, width) rows, the encoder block's
    layout; the rows of one example are dropped together. Keras's Dropout
    with one noise value per example does the drawing and the scaling.

    Args:
        rate: float. Probability of dropping the branch of an example.
    """

    def __init__(self, rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        check_rate("stochastic_depth_rate", rate)
        self.rate = float(rate)

    def build(self, input_shape):
        self.dropout = keras.layers.Dropout(
            self.rate, noise_shape=(None, 1, 1), name="dropout"
        )
        self.built = True

    def call(self, rows, queries, training=None):
        if not training or not self.rate:
            return rows
        width = ops.shape(rows)[-1]
        y = ops.reshape(rows, (-1, queries, width))
        return ops.reshape(self.dropout(y, training=training), (-1, width))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate)
        return config
