"""Multi-head self-attention, in portable Keras 3 (`keras.ops` only).

Three ways through the same weights, chosen per call: training (one (D, 3D)
projection and one transpose, so that every gradient is one matmul),
inference (a head-major batched projection with two of the three biases
folded out of the activations) and, on JAX with a GPU, the fused attention
op. `tests/test_model.py` and `tests/test_benchmark.py` check that they
agree. See benchmarks/README.md for why each exists.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from keras_vit.embedding import PACKAGE, check_rate
from keras_vit.errors import UsageError


@functools.lru_cache(maxsize=None)
def _jax_on_gpu() -> bool:
    """True when Keras runs on JAX and its first device is a GPU."""
    return keras.backend.backend() == "jax" and (
        keras.distribution.list_devices()[0].lower().startswith(("gpu", "cuda"))
    )


def fold_input_affine(kernel, bias, scale=None, shift=None):
    """(kernel, bias) of a dense map that, applied to x, gives what the
    original map gives on x * scale + shift: kernel rows times `scale`,
    bias plus `shift` times the kernel. `scale`/`shift`: (D,) or None."""
    if shift is not None:
        bias = bias + ops.matmul(shift, kernel)
    if scale is not None:
        kernel = kernel * ops.expand_dims(scale, -1)
    return kernel, bias


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with one fused query/key/value projection.

    One (D, 3D) kernel instead of three (D, D) ones: fewer ops per block,
    the same parameters (the checkpoint module splits and joins them). In
    training, one matmul by it and one transpose put q, k and v head-major,
    (batch, heads, tokens, head_dim), so that both attention products are
    batched matmuls over leading batch axes; in inference one batched
    matmul by the kernel reshaped per head gives that layout directly
    (`_head_major`). One transpose brings the heads back together for the
    output projection.

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
        first_token_only=False, flat=False, input_scale=None,
        input_shift=None,
    ):
        """x: (batch, tokens, width). With `first_token_only`, only the
        first token queries (keys and values still come from all tokens):
        the output is (batch, 1, width), the first row of the full one.
        With `flat`, the output comes as (batch * queries, width) rows, the
        layout the encoder block adds its residual to.

        `input_scale` and `input_shift`, (width,) tensors, stand for a
        LayerNorm's affine: the layer then computes its output for
        `x * input_scale + input_shift` by folding both into the query, key
        and value weights instead of applying them to `x`. Inference only
        (not with `training`); the output is the same to float rounding."""
        length, width = ops.shape(x)[1], ops.shape(x)[2]
        queries = 1 if first_token_only else length
        dropout_active = self.dropout_rate > 0.0 and bool(training)
        folded = input_scale is not None or input_shift is not None
        rows = ops.reshape(x, (-1, width))
        if folded and (training or _jax_on_gpu()):
            raise UsageError(
                "input_scale/input_shift are for inference on the head-major "
                "path only; apply the LayerNorm to the input instead."
            )
        if _jax_on_gpu() and not return_attention_scores and not dropout_active:
            y, weights = self._fused(rows, length, first_token_only), None
        elif training:
            y, weights = self._batch_major(
                rows, length, first_token_only, training
            )
        else:
            y, weights = self._head_major(
                rows, length, first_token_only, input_scale, input_shift
            )
            if return_attention_scores:  # (heads, batch, ...) to Keras's order
                weights = ops.transpose(weights, (1, 0, 2, 3))
        if not flat:
            y = ops.reshape(y, (-1, queries, width))
        if return_attention_scores:
            return y, weights
        return y

    def _scaled_qkv(self, input_scale=None, input_shift=None):
        """The qkv kernel and bias with the query scale 1/sqrt(head_dim)
        folded into their query columns: (D, D) values scaled instead of
        every query. Exact where the scale is a power of two (head_dim 64:
        Ti, S, B, L); otherwise within float rounding. An input affine
        (x * scale + shift) folds in too: kernel rows times `scale`, bias
        plus `shift` times the kernel."""
        d = self.head_dim * self.num_heads
        columns = ops.concatenate([
            ops.full((d,), 1.0 / math.sqrt(self.head_dim),
                     dtype=self.compute_dtype),
            ops.ones((2 * d,), dtype=self.compute_dtype),
        ])
        kernel = ops.cast(self.qkv.kernel, self.compute_dtype) * columns
        bias = ops.cast(self.qkv.bias, self.compute_dtype) * columns
        return fold_input_affine(kernel, bias, input_scale, input_shift)

    def _attend(self, q, k, v, training=None):
        """Softmax attention over the last two axes; any leading axes batch.
        The softmax runs in float32, also under mixed precision."""
        logits = ops.matmul(q, ops.swapaxes(k, -1, -2))
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = ops.cast(weights, v.dtype)
        # Dropout is the identity outside training or at rate 0.
        return ops.matmul(self.dropout(weights, training=training), v), weights

    def _fused(self, rows, length, first_token_only):
        """JAX on a GPU: the fused attention op (cuDNN flash attention) on
        (batch, tokens, heads, head_dim) operands. Elsewhere that op is the
        same products plus transposes, and measured slower than the paths
        below (TensorFlow 7%, JAX on CPU 15%)."""
        qkv = ops.reshape(
            self.qkv(rows), (-1, length, 3, self.num_heads, self.head_dim)
        )
        q, k, v = ops.unstack(qkv, 3, axis=2)
        if first_token_only:
            q = q[:, :1]
        attended = ops.dot_product_attention(
            q, k, v, scale=1.0 / math.sqrt(self.head_dim)
        )
        width = self.num_heads * self.head_dim
        return self.out(ops.reshape(attended, (-1, width)))

    def _batch_major(self, rows, length, first_token_only, training):
        """Training: one (D, 3D) matmul, whose gradient is one matmul too,
        then one transpose to (3, batch, heads, tokens, head_dim)."""
        kernel, bias = self._scaled_qkv()
        qkv = ops.add(ops.matmul(rows, kernel), bias)
        qkv = ops.reshape(
            qkv, (-1, length, 3, self.num_heads, self.head_dim)
        )
        q, k, v = ops.unstack(ops.transpose(qkv, (2, 0, 3, 1, 4)), 3, axis=0)
        if first_token_only:
            q = q[:, :, :1]
        attended, weights = self._attend(q, k, v, training)
        attended = ops.transpose(attended, (0, 2, 1, 3))  # heads together
        width = self.num_heads * self.head_dim
        return self.out(ops.reshape(attended, (-1, width))), weights

    def _head_major(
        self, rows, length, first_token_only, input_scale=None,
        input_shift=None,
    ):
        """Inference: q, k and v come out of one batched matmul already
        head-major, (3 * heads, batch * tokens, head_dim), with no transpose
        of the (batch * tokens, 3D) projection. Two biases drop out of the
        activations: the key bias adds q . b_k, the same for every key of a
        query, which the softmax cancels; the value bias passes through
        weights that sum to one, so it joins the output projection's bias as
        b_v W_out. Only the query bias is added, to a third of the values."""
        h, hd = self.num_heads, self.head_dim
        width = h * hd
        kernel, bias = self._scaled_qkv(input_scale, input_shift)
        heads_kernel = ops.transpose(
            ops.reshape(kernel, (width, 3 * h, hd)), (1, 0, 2)
        )
        qkv = ops.matmul(rows[None], heads_kernel)  # (3h, rows, hd)
        qkv = ops.reshape(qkv, (3, h, -1, length, hd))
        q, k, v = ops.unstack(qkv, 3, axis=0)  # (h, batch, tokens, hd) each
        if first_token_only:
            q = q[:, :, :1]
        q = q + ops.reshape(bias[:width], (h, 1, 1, hd))
        attended, weights = self._attend(q, k, v)
        attended = ops.transpose(attended, (1, 2, 0, 3))  # (b, q, h, hd)
        out_kernel = ops.cast(self.out.kernel, self.compute_dtype)
        out_bias = ops.cast(self.out.bias, self.compute_dtype) + ops.matmul(
            bias[2 * width:], out_kernel
        )
        y = ops.matmul(ops.reshape(attended, (-1, width)), out_kernel)
        # ops.add, not `+`: a bias add that TensorFlow fuses into the matmul
        # (and the block's residual add after it).
        return ops.add(y, out_bias), weights

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, dropout_rate=self.dropout_rate)
        return config
