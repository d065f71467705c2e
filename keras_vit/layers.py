"""The Vision Transformer's layers, in portable Keras 3 (`keras.ops` only).

Every layer stores only its constructor arguments in `__init__`, creates its
weights and sublayers in `build()`, and returns exactly its constructor
arguments from `get_config()`, so `from_config` and `.keras` files round-trip.

Weight names mirror the official Flax implementation where that makes the
checkpoint mapping obvious (see `keras_vit.checkpoint.weights`).

Numerics follow the official implementation rather than Keras defaults:
LayerNorm epsilon 1e-6 (Keras: 1e-3), GELU with the tanh approximation (Keras:
exact erf), the query scaled by 1/sqrt(head_dim) before the dot product.

Dense layers inside a block run on the (batch * tokens, width) matrix rather
than on (batch, tokens, width): the same weights and results, but a plain 2D
matmul, which TensorFlow's CPU runtime fuses with its bias add (and the first
MLP layer with its GELU, which is why the GELU is that layer's activation).
See benchmarks/README.md for the measurements.

Training and inference take the same path through each block: one attention
path (`keras_vit.attention`) and `LayerNorm`, Keras's layer in fewer passes
(measured in benchmarks/README.md). The input layers: `keras_vit.embedding`.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_vit import remat as _remat
from keras_vit.attention import MultiHeadSelfAttention
from keras_vit.droppath import DropPath, stochastic_depth_rates
from keras_vit.embedding import PACKAGE, check_rate
from keras_vit.errors import UsageError

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package=PACKAGE)
def gelu_tanh(x):
    """GELU with the tanh approximation, as in the official implementation."""
    return ops.gelu(x, approximate=True)


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
    """Keras's LayerNormalization, computed in fewer passes over the input.

    The same weights (`gamma`, `beta`), config and result (to float32
    rounding); statistics in float32 whatever the compute dtype, as Keras
    does. Keras forms `rsqrt(var + eps) * gamma` and `-mean * that + beta`
    as full-size tensors (a broadcast of a (..., 1) tensor against a (D,)
    one), then `x * scale + shift`: six full-size elementwise passes, three
    of them broadcasts. Here: centre, square, normalise, scale, shift, five
    passes with only one-sided broadcasts. Measured in the whole model
    against Keras's layer, interleaved in one process: see
    benchmarks/results/attention_paths_*. Normalising over any axis but the
    last, RMS scaling and the PyTorch backend (where Keras calls a fused
    kernel) use Keras's own computation.
    """

    def call(self, inputs):
        last = [-1], [len(inputs.shape) - 1]
        if (self.rms_scaling or self.axis not in last
                or keras.backend.backend() == "torch"):
            return super().call(inputs)
        x = inputs
        if keras.backend.standardize_dtype(x.dtype) in ("float16", "bfloat16"):
            x = ops.cast(x, "float32")
        centred = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centred), axis=-1, keepdims=True)
        y = centred * ops.rsqrt(variance + self.epsilon)
        # In float32 whatever the weights' dtype (a bfloat16 policy's too).
        if self.gamma is not None:
            y = y * ops.cast(self.gamma, y.dtype)
        if self.beta is not None:
            y = y + ops.cast(self.beta, y.dtype)
        return ops.cast(y, self.compute_dtype)


def layer_norm(name: str, epsilon: float = LAYER_NORM_EPSILON) -> LayerNorm:
    """LayerNorm with the official epsilon (1e-6), not Keras's 1e-3."""
    return LayerNorm(epsilon=epsilon, name=name)


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBlock(keras.layers.Layer):
    """One Transformer encoder block (paper Eq. 2-3).

    x = x + Dropout(MSA(LN(x)));  x = x + MLP(LN(x)), where the MLP is
    Dense(mlp_dim) -> GELU -> Dropout -> Dense(D) -> Dropout.

    With stochastic depth, each residual branch (attention, MLP) is dropped
    per example while training (`keras_vit.droppath.DropPath`); at
    inference the block is exactly the block without it.

    Args:
        num_heads: int. Attention heads.
        mlp_dim: int. Hidden width of the MLP.
        dropout_rate: float. Dropout after every dense layer but the qkv.
        attention_dropout_rate: float. Dropout on attention weights.
        stochastic_depth_rate: float. Probability of dropping each residual
            branch of an example while training.
        approximate_gelu: bool. The tanh approximation of GELU (the
            official implementation's); False: the exact erf form (PyTorch's
            and so Hugging Face's and timm's).
        layer_norm_epsilon: float. 1e-6 officially (Hugging Face ViT:
            1e-12).
    """

    def __init__(
        self,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        stochastic_depth_rate: float = 0.0,
        approximate_gelu: bool = True,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        check_rate("stochastic_depth_rate", stochastic_depth_rate)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)

    def build(self, input_shape):
        width = input_shape[-1]
        eps = self.layer_norm_epsilon
        self.norm1 = layer_norm("norm1", eps)
        self.norm1.build(input_shape)
        self.attention = MultiHeadSelfAttention(
            self.num_heads, self.attention_dropout_rate, name="attention"
        )
        self.attention.build(input_shape)
        self.norm2 = layer_norm("norm2", eps)
        self.norm2.build(input_shape)
        # The official MLP initialises biases N(0, 1e-6), kernels Xavier.
        bias_init = keras.initializers.RandomNormal(stddev=1e-6)
        self.mlp1 = keras.layers.Dense(
            self.mlp_dim,
            activation=gelu_tanh if self.approximate_gelu else "gelu",
            bias_initializer=bias_init,
            name="mlp1",
        )
        self.mlp1.build(input_shape)
        self.mlp2 = keras.layers.Dense(
            width, bias_initializer=bias_init, name="mlp2"
        )
        self.mlp2.build(tuple(input_shape[:-1]) + (self.mlp_dim,))
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.drop_path = DropPath(self.stochastic_depth_rate, name="drop_path")
        self.drop_path.build(input_shape)
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
        x = x + self.drop_path(
            self.dropout(y, training=training), queries=queries,
            training=training,
        )
        y = self.mlp1(self.norm2(x))  # with GELU
        y = self.dropout(y, training=training)
        y = self.dropout(self.mlp2(y), training=training)
        x = x + self.drop_path(y, queries=queries, training=training)
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
            stochastic_depth_rate=self.stochastic_depth_rate,
            approximate_gelu=self.approximate_gelu,
            layer_norm_epsilon=self.layer_norm_epsilon,
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
        stochastic_depth_rate: float. Stochastic depth of the last block;
            block i of L drops its branches with rate * i / (L - 1)
            (`stochastic_depth_rates`).
        class_token_only: bool. Compute only the first token (the class
            token) in the last block and return (batch, 1, width). The
            other tokens' last states feed nothing when the class token is
            what is read, so this skips their attention rows, output
            projections and MLPs (three quarters of a block; 6.3% of
            ViT-B/16's FLOPs) and gives the same class token. Calls with
            `return_attention_scores` always compute every token.
        remat: str. Rematerialisation of the blocks in training calls
            (keras_vit.remat): "none", "block" (recompute each block in
            the backward pass) or "dots" (JAX: keep only the dense layers'
            matmul outputs). The same weights and gradients; less
            activation memory for more compute.
        approximate_gelu, layer_norm_epsilon: as in EncoderBlock (the
            epsilon also for `encoder_norm`).
    """

    def __init__(  # noqa: PLR0913 (the architecture's fields, by name)
        self,
        num_layers: int,
        num_heads: int,
        mlp_dim: int,
        dropout_rate: float = 0.0,
        attention_dropout_rate: float = 0.0,
        class_token_only: bool = False,
        stochastic_depth_rate: float = 0.0,
        remat: str = "none",
        approximate_gelu: bool = True,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if int(num_layers) < 1:
            raise UsageError(f"num_layers must be >= 1, got {num_layers}.")
        check_rate("dropout_rate", dropout_rate)
        check_rate("attention_dropout_rate", attention_dropout_rate)
        check_rate("stochastic_depth_rate", stochastic_depth_rate)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.class_token_only = bool(class_token_only)
        self.remat = _remat.check_remat(remat)
        self.approximate_gelu = bool(approximate_gelu)
        self.layer_norm_epsilon = float(layer_norm_epsilon)

    def build(self, input_shape):
        rates = stochastic_depth_rates(
            self.stochastic_depth_rate, self.num_layers
        )
        for i in range(self.num_layers):
            block = EncoderBlock(
                self.num_heads,
                self.mlp_dim,
                self.dropout_rate,
                self.attention_dropout_rate,
                stochastic_depth_rate=rates[i],
                approximate_gelu=self.approximate_gelu,
                layer_norm_epsilon=self.layer_norm_epsilon,
                name=f"encoderblock_{i}",
            )
            block.build(input_shape)
            # One attribute per block, not a list: TensorFlow checkpoints
            # (tf.train.Checkpoint(model=...)) follow layer attributes but not
            # Keras's tracked lists.
            setattr(self, f"encoderblock_{i}", block)
        self.encoder_norm = layer_norm(
            "encoder_norm", self.layer_norm_epsilon
        )
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
                # Only a training call has a backward pass to save for.
                x = _remat.remat_call(
                    block,
                    x,
                    self.remat if training else "none",
                    training=training,
                    first_token_only=self.class_token_only and i == last,
                )
        x = self.encoder_norm(x)
        if return_attention_scores:
            return x, all_weights
        return x

    def compute_output_spec(self, x, training=None,
                            return_attention_scores=False):
        """What `call` returns, from shapes: Keras would trace every block
        (half the time building a ViT takes). tests/test_layers_spec.py."""
        batch, tokens, width = x.shape
        one = self.class_token_only and not return_attention_scores
        out = keras.KerasTensor((batch, 1 if one else tokens, width),
                                dtype=self.encoder_norm.compute_dtype)
        if not return_attention_scores:
            return out
        weights = [
            keras.KerasTensor(
                (batch, block.attention.num_heads, tokens, tokens),
                dtype=block.attention.compute_dtype,
            )
            for block in self.blocks
        ]
        return out, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            num_heads=self.num_heads,
            mlp_dim=self.mlp_dim,
            dropout_rate=self.dropout_rate,
            attention_dropout_rate=self.attention_dropout_rate,
            class_token_only=self.class_token_only,
            stochastic_depth_rate=self.stochastic_depth_rate,
            remat=self.remat,
            approximate_gelu=self.approximate_gelu,
            layer_norm_epsilon=self.layer_norm_epsilon,
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
            raise UsageError(
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
