"""Multi-head self-attention, in portable Keras 3 (`keras.ops` only).

One path for training and inference on every backend and device: a fused
(D, 3D) query/key/value projection, the products as batched matmuls over
(batch, heads, tokens, head_dim), one projection out.
`tests/test_model.py` checks it against an independent NumPy reference.

One exception, chosen by a measured rule: on the JAX backend with an
NVIDIA GPU and a 16-bit compute dtype, softmax(q k^T) v runs as cuDNN's
fused attention (`keras_vit/fused_attention.py`), which took 1.75x to
3.1x less time than this path on an H100; the projections around it are
the same. On a CPU, `keras.ops.dot_product_attention` in this path's
place measured 16% (TensorFlow) and 9% (JAX) more CPU time per image for
Ti/16 inference, and a head-major inference path with the LayerNorms
folded into the kernels gained less than 3% on either backend
(benchmarks/results/attention_paths.md).
"""

from __future__ import annotations

import math

import keras
from keras import ops

from keras_vit.embedding import PACKAGE, check_rate
from keras_vit.errors import UsageError

if keras.backend.backend() == "jax":  # cuDNN's attention on NVIDIA GPUs
    from keras_vit import fused_attention
else:
    fused_attention = None


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with one fused query/key/value projection.

    One (D, 3D) kernel instead of three (D, D) ones: fewer ops per block,
    the same parameters (the checkpoint module splits and joins them), the
    query scale folded into its query columns. One
    matmul by it and one transpose put q, k and v head-major, (batch,
    heads, tokens, head_dim), so that both attention products are batched
    matmuls over leading axes; one transpose brings the heads back
    together for the output projection.

    Args:
        num_heads: int. Number of attention heads; must divide the width.
        dropout_rate: float. Dropout on the attention weights.
    """

    def __init__(self, num_heads: int, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        check_rate("attention_dropout_rate", dropout_rate)
        self.num_heads = int(num_heads)
        self.dropout_rate = float(dropout_rate)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise UsageError(
                f"hidden_size {width} is not divisible by num_heads "
                f"{self.num_heads}: choose a head count that divides it."
            )
        self.head_dim = width // self.num_heads
        self.qkv = keras.layers.Dense(
            3 * width, kernel_initializer="glorot_uniform", name="qkv"
        )
        self.qkv.build(input_shape)
        self.out = keras.layers.Dense(
            width, kernel_initializer="glorot_uniform", name="out"
        )
        self.out.build(tuple(input_shape[:-1]) + (width,))
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.built = True

    def call(
        self, x, training=None, return_attention_scores=False,
        first_token_only=False, flat=False,
    ):
        """x: (batch, tokens, width). With `first_token_only`, only the
        first token queries (keys and values still come from all tokens):
        the output is (batch, 1, width), the first row of the full one.
        With `flat`, the output comes as (batch * queries, width) rows, the
        layout the encoder block adds its residual to. With
        `return_attention_scores`, also the attention weights, (batch,
        heads, queries, tokens)."""
        length, width = ops.shape(x)[1], ops.shape(x)[2]
        h, hd = self.num_heads, self.head_dim
        kernel, bias = self._scaled_qkv()
        qkv = ops.add(ops.matmul(ops.reshape(x, (-1, width)), kernel), bias)
        qkv = ops.reshape(qkv, (-1, length, 3, h, hd))
        fused = None
        if self._fused(training, return_attention_scores, first_token_only):
            fused = fused_attention.attention(
                qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2])
        if fused is not None:
            y = self.out(ops.reshape(fused, (-1, width)))
            return y if flat else ops.reshape(y, (-1, length, width))
        q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)
        if first_token_only:
            q = q[:, :, :1]
        # The softmax runs in float32, also under mixed precision.
        logits = ops.cast(ops.matmul(q, ops.swapaxes(k, -1, -2)), "float32")
        if logits.shape[-1] == 1:  # one token (GAP over one patch): its
            # weight is exactly 1, for which Keras's softmax warns.
            weights = ops.ones_like(logits)
        else:
            weights = ops.softmax(logits, axis=-1)
        weights = ops.cast(weights, v.dtype)
        # Dropout is the identity outside training or at rate 0.
        y = ops.matmul(self.dropout(weights, training=training), v)
        y = ops.reshape(ops.transpose(y, (0, 2, 1, 3)), (-1, width))
        y = self.out(y)
        if not flat:
            y = ops.reshape(y, (-1, 1 if first_token_only else length, width))
        if return_attention_scores:
            return y, weights
        return y

    def _fused(self, training, return_attention_scores, first_token_only):
        """bool. Whether to try cuDNN's fused attention (the module
        docstring's rule): JAX, an NVIDIA GPU, a 16-bit compute dtype,
        every token querying, no attention weights asked for and no
        attention dropout at work."""
        return (fused_attention is not None and not return_attention_scores
                and not first_token_only
                and not (self.dropout_rate > 0.0 and training)
                and fused_attention.usable(self.compute_dtype, self.head_dim))

    def _scaled_qkv(self):
        """The qkv kernel and bias with the query scale 1/sqrt(head_dim)
        folded into their query columns: (D, D) values scaled instead of
        every query, one pass over the activations fewer. Exact where the
        scale is a power of two (head_dim 64: Ti, S, B, L); otherwise
        within float rounding."""
        d = self.head_dim * self.num_heads
        columns = ops.concatenate([
            ops.full((d,), 1.0 / math.sqrt(self.head_dim),
                     dtype=self.compute_dtype),
            ops.ones((2 * d,), dtype=self.compute_dtype),
        ])
        kernel = ops.cast(self.qkv.kernel, self.compute_dtype) * columns
        bias = ops.cast(self.qkv.bias, self.compute_dtype) * columns
        return kernel, bias

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, dropout_rate=self.dropout_rate)
        return config
