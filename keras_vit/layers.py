"""The Vision Transformer's layers, in portable Keras 3 (`keras.ops` only).

Every layer stores only its constructor arguments in `__init__`, creates its
weights and sublayers in `build()`, and returns exactly its constructor
arguments from `get_config()`, so `from_config` and `.keras` files round-trip.

Weight names mirror the official Flax implementation where that makes the
checkpoint mapping obvious (see `keras_vit.checkpoint`).

Numerics follow the official implementation rather than Keras defaults:
LayerNorm epsilon 1e-6 (Keras: 1e-3), GELU with the tanh approximation (Keras:
exact erf), the query scaled by 1/sqrt(head_dim) before the dot product.

Dense layers inside a block run on the (batch * tokens, width) matrix rather
than on (batch, tokens, width): the same weights and results, but a plain 2D
matmul, which TensorFlow's CPU runtime fuses with its bias add (and the first
MLP layer with its GELU, which is why the GELU is that layer's activation).
See benchmarks/README.md for the measurements.

Inference (any call without `training`) takes a second path through each
encoder block, with the same weights and the same results to float rounding:
q, k and v come out of one batched matmul already head-major, the key bias
is dropped (the softmax cancels it), the value bias joins the output bias,
and both LayerNorms' scale and shift fold into the kernels that read them.
Training keeps every weight where it is, so that each gradient is one
matmul. `tests/test_model.py` checks that the two paths agree.

The input layers (patch embedding, class token, position embedding) live in
`keras_vit.embedding` and are re-exported here.
"""

from __future__ import annotations

import functools
import math

import keras
from keras import ops

from keras_vit.embedding import (  # noqa: F401 (re-exported)
    PACKAGE,
    ClassToken,
    PatchEmbedding,
    PositionEmbedding,
    check_rate,
)

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_tanh(x):
    """GELU with the tanh approximation, as in the official implementation."""
    return ops.gelu(x, approximate=True)


@functools.lru_cache(maxsize=None)
def _jax_on_gpu() -> bool:
    """True when Keras runs on JAX and its first device is a GPU."""
    return keras.backend.backend() == "jax" and (
        keras.distribution.list_devices()[0].lower().startswith(("gpu", "cuda"))
    )


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
    """Keras's LayerNormalization, computed in fewer passes over the input.

    The same weights (`gamma`, `beta`), config and result (to float32
    rounding); statistics in float32 whatever the compute dtype, as Keras
    does. Keras forms `rsqrt(var + eps) * gamma` and `-mean * that + beta`
    as full-size tensors (a broadcast of a (..., 1) tensor against a (D,)
    one), then `x * scale + shift`: six full-size elementwise passes, three
    of them broadcasts. Here: centre, square, normalise, scale, shift, five
    passes with only one-sided broadcasts, 40% less time for the forward pass
    and 20% less forward + backward on TensorFlow's CPU runtime
    (benchmarks/README.md). Normalising over any axis but the last, and the
    PyTorch backend, where Keras calls a fused kernel, use Keras's own
    computation.
    """

    def call(self, inputs):
        if not self._fast_path(inputs):
            return super().call(inputs)
        y = self.standardize(inputs)  # float32
        if self.gamma is not None:
            y = y * self.gamma
        if self.beta is not None:
            y = y + self.beta
        return ops.cast(y, self.compute_dtype)

    def _fast_path(self, inputs) -> bool:
        last = [-1], [len(inputs.shape) - 1]
        return not (self.rms_scaling or self.axis not in last
                    or keras.backend.backend() == "torch")  # a fused kernel

    def standardize(self, inputs, dtype="float32"):
        """(x - mean) / sqrt(var + eps) over the last axis, before `gamma`
        and `beta`, with float32 statistics; returned in `dtype`. A layer
        that reads this layer's output through a linear map can fold
        `gamma` and `beta` into that map's weights instead (see
        EncoderBlock): two passes over the activations fewer."""
        x = inputs
        if keras.backend.standardize_dtype(x.dtype) in ("float16", "bfloat16"):
            x = ops.cast(x, "float32")
        centred = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centred), axis=-1, keepdims=True)
        y = centred * ops.rsqrt(variance + self.epsilon)
        return y if dtype == "float32" else ops.cast(y, dtype)

    def affine(self):
        """(scale, shift) as (D,) tensors in the compute dtype; ones and
        zeros where `scale` or `center` is off."""
        dim = self.gamma.shape[0] if self.gamma is not None else (
            self.beta.shape[0])
        scale = (ops.ones((dim,), self.compute_dtype) if self.gamma is None
                 else ops.cast(self.gamma, self.compute_dtype))
        shift = (ops.zeros((dim,), self.compute_dtype) if self.beta is None
                 else ops.cast(self.beta, self.compute_dtype))
        return scale, shift


def layer_norm(name: str) -> LayerNorm:
    """LayerNorm with the official epsilon (1e-6), not Keras's 1e-3."""
    return LayerNorm(epsilon=LAYER_NORM_EPSILON, name=name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with one fused query/key/value projection.

    One (D, 3D) matmul instead of three (D, D) ones: fewer ops per block, the
    same parameters (the checkpoint module splits and joins them). One
    transpose then puts q, k and v head-major, (batch, heads, tokens,
    head_dim), so that both attention products are batched matmuls over
    leading batch axes, with no further transposes of their operands; one
    more transpose brings the heads back together for the output projection.

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
            raise ValueError(
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
            raise ValueError(
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
        if input_shift is not None:
            bias = bias + ops.matmul(input_shift, kernel)
        if input_scale is not None:
            kernel = kernel * ops.expand_dims(input_scale, -1)
        return kernel, bias

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


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBlock(keras.layers.Layer):
    """One Transformer encoder block (paper Eq. 2-3).

    x = x + Dropout(MSA(LN(x)));  x = x + MLP(LN(x)), where the MLP is
    Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout.

    Args:
        num_heads: int. Attention heads.
        mlp_dim: int. Hidden width of the MLP.
        dropout_rate: float. Dropout after every dense layer but the qkv.
        attention_dropout_rate: float. Dropout on attention weights.
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)

    def build(self, input_shape):
        width = input_shape[-1]
        self.norm1 = layer_norm("norm1")
        self.norm1.build(input_shape)
        self.attention = MultiHeadSelfAttention(
            self.num_heads, self.attention_dropout_rate, name="attention"
        )
        self.attention.build(input_shape)
        self.norm2 = layer_norm("norm2")
        self.norm2.build(input_shape)
        # The official MLP initialises biases N(0, 1e-6), kernels Xavier.
        bias_init = keras.initializers.RandomNormal(stddev=1e-6)
        self.mlp1 = keras.layers.Dense(
            self.mlp_dim,
            activation=gelu_tanh,
            bias_initializer=bias_init,
            name="mlp1",
        )
        self.mlp1.build(input_shape)
        self.mlp2 = keras.layers.Dense(
            width, bias_initializer=bias_init, name="mlp2"
        )
        self.mlp2.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.built = True

    def call(
        self, x, training=None, return_attention_scores=False,
        first_token_only=False,
    ):
        """x: (batch, tokens, width). With `first_token_only` the block
        computes only the first token's new state, (batch, 1, width):
        attention from that token alone, and the MLP on its row.

        The residual stream runs as (batch * tokens, width) rows inside the
        block, so that each residual add directly follows the matmul that
        feeds it (TensorFlow's CPU runtime then fuses the add into it)."""
        shape = ops.shape(x)
        width = shape[2]
        queries = 1 if first_token_only else shape[1]
        # Inference folds both LayerNorms' scale and shift into the weights
        # of the layer that reads them: two passes over the activations
        # fewer per norm. Training and JAX on a GPU keep them as layers.
        fold = not training and not _jax_on_gpu() and all(
            norm._fast_path(x) for norm in (self.norm1, self.norm2)
        )
        if fold:
            scale, shift = self.norm1.affine()
            y = self.attention(
                self.norm1.standardize(x, self.compute_dtype),
                return_attention_scores=return_attention_scores,
                first_token_only=first_token_only,
                flat=True,
                input_scale=scale,
                input_shift=shift,
            )
        else:
            y = self.attention(
                self.norm1(x),
                training=training,
                return_attention_scores=return_attention_scores,
                first_token_only=first_token_only,
                flat=True,
            )
        if return_attention_scores:
            y, weights = y
        if first_token_only:
            x = x[:, :1]
        x = ops.reshape(x, (-1, width))
        x = x + self.dropout(y, training=training)
        if fold:
            scale, shift = self.norm2.affine()
            kernel = ops.cast(self.mlp1.kernel, self.compute_dtype)
            bias = ops.cast(self.mlp1.bias, self.compute_dtype)
            y = ops.matmul(
                self.norm2.standardize(x, self.compute_dtype),
                kernel * ops.expand_dims(scale, -1),
            )
            y = self.mlp1.activation(
                ops.add(y, bias + ops.matmul(shift, kernel))
            )
        else:
            y = self.mlp1(self.norm2(x))  # with GELU
        y = self.dropout(y, training=training)
        x = x + self.dropout(self.mlp2(y), training=training)
        x = ops.reshape(x, (-1, queries, width))
        if return_attention_scores:
            return x, weights
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class Encoder(keras.layers.Layer):
    """L encoder blocks followed by the final LayerNorm (Eq. 2-4).

    Blocks are named `encoderblock_{i}` and the final norm `encoder_norm`,
    as in the official checkpoints.

    Args:
        num_layers: int. Number of blocks L.
        num_heads: int. Attention heads per block.
        mlp_dim: int. MLP hidden width.
        dropout_rate: float. Dropout after dense layers.
        attention_dropout_rate: float. Dropout on attention weights.
        class_token_only: bool. Compute only the first token (the class
            token) in the last block and return (batch, 1, width). The
            other tokens' last states feed nothing when the class token is
            what is read, so this skips their attention rows, output
            projections and MLPs (three quarters of a block; 6.3% of
            ViT-B/16's FLOPs) and gives the same class token. Calls with
            `return_attention_scores` always compute every token.
    """

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        class_token_only: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_layers) < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}.")
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.class_token_only = bool(class_token_only)

    def build(self, input_shape):
        for i in range(self.num_layers):
            block = EncoderBlock(
                self.num_heads,
                self.mlp_dim,
                self.dropout_rate,
                self.attention_dropout_rate,
                name=f"encoderblock_{i}",
            )
            block.build(input_shape)
            # One attribute per block, not a list: TensorFlow checkpoints
            # (tf.train.Checkpoint(model=...)) follow layer attributes but not
            # Keras's tracked lists.
            setattr(self, f"encoderblock_{i}", block)
        self.encoder_norm = layer_norm("encoder_norm")
        self.encoder_norm.build(input_shape)
        self.built = True

    @property
    def blocks(self) -> list:
        """list of EncoderBlock. The blocks, first to last."""
        return [
            getattr(self, f"encoderblock_{i}") for i in range(self.num_layers)
        ]

    def call(self, x, training=None, return_attention_scores=False):
        all_weights = []
        last = self.num_layers - 1
        for i, block in enumerate(self.blocks):
            if return_attention_scores:
                x, weights = block(
                    x, training=training, return_attention_scores=True
                )
                all_weights.append(weights)
            else:
                x = block(
                    x,
                    training=training,
                    first_token_only=self.class_token_only and i == last,
                )
        x = self.encoder_norm(x)
        if return_attention_scores:
            return x, all_weights
        return x

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            class_token_only=self.class_token_only,
        )
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenPooling(keras.layers.Layer):
    """Image representation from the encoder output (Eq. 4).

    Args:
        pooling: str. "token": the class token's state; "gap": the mean of
            the patch tokens (Appendix D.3; no class token in the sequence).
    """

    def __init__(self, pooling: str = "token", **kwargs):
        super().__init__(**kwargs)
        if pooling not in ("token", "gap"):
            raise ValueError(
                f'pooling must be "token" or "gap", got {pooling!r}.'
            )
        self.pooling = pooling

    def call(self, x):
        if self.pooling == "token":
            return x[:, 0]
        return ops.mean(x, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        config = super().get_config()
        config.update(pooling=self.pooling)
        return config
