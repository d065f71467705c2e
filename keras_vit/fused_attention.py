"""cuDNN's fused (flash) attention for the JAX backend on NVIDIA GPUs.

`MultiHeadSelfAttention` sends softmax(q k^T) v here when Keras runs on
JAX, a CUDA device is present and the compute dtype is bfloat16 or
float16; everywhere else (TensorFlow, the CPU, a TPU, float32) it keeps
its portable `keras.ops` path. The rule is measured: on one H100, B/16 in
bfloat16, the fused kernel took 1.75x (224, 197 tokens) and 3.0x (384,
577 tokens) less time than the portable path for one layer's attention
with its gradient, 2.3x and 3.1x less for inference, and a B/16 training
step at 224 ran 1.19x faster with it (benchmarks/attention_kernels.py,
docs/performance.md).

Keras's own `ops.dot_product_attention` cannot be used for this: it
offers no sequence lengths, and JAX's fused-attention training rule
passes an empty bias array where there is none and then asks for even
sequence lengths, so a ViT's odd token count (197 at 224, 577 at 384)
is refused for training and Keras falls back to an unfused attention
slower than the portable one. Here the tokens are padded to an even count
for the training kernel, with the real count as `key_value_seq_lengths`
(the padding key takes no weight) and `query_seq_lengths`, and the
padding query row is dropped. Where JAX refuses a shape anyway, `None` is
returned and the caller takes its portable path.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

FUSED_DTYPES = ("bfloat16", "float16")


@functools.lru_cache(maxsize=None)
def cuda_device() -> bool:
    """bool. Whether JAX's default device is an NVIDIA GPU."""
    try:
        device = jax.devices()[0]
    except RuntimeError:
        return False
    return device.platform == "gpu" and "cuda" in str(
        getattr(device.client, "platform_version", "")).lower()


def usable(dtype: str, head_dim: int) -> bool:
    """bool. Whether to try the fused kernel: a CUDA device, a 16-bit
    compute dtype and a head width cuDNN takes (a multiple of 8, at most
    128)."""
    return (dtype in FUSED_DTYPES and head_dim % 8 == 0 and head_dim <= 128
            and cuda_device())


def attention(q, k, v) -> Optional[jax.Array]:
    """softmax(q k^T) v, each (batch, tokens, heads, head_dim) with the
    scale already in q; the output has q's shape. None where cuDNN refuses
    the shapes (the caller computes it another way)."""
    try:
        return jax.nn.dot_product_attention(q, k, v, scale=1.0,
                                            implementation="cudnn")
    except (NotImplementedError, RuntimeError, ValueError):
        pass  # an odd token count under differentiation: pad it
    batch, queries, tokens = q.shape[0], q.shape[1], k.shape[1]
    pad_q, pad_k = queries % 2, tokens % 2
    if not (pad_q or pad_k):
        return None

    def pad(x, n):
        return jnp.pad(x, ((0, 0), (0, n), (0, 0), (0, 0)))

    try:
        y = jax.nn.dot_product_attention(
            pad(q, pad_q), pad(k, pad_k), pad(v, pad_k), scale=1.0,
            query_seq_lengths=jnp.full((batch,), queries, "int32"),
            key_value_seq_lengths=jnp.full((batch,), tokens, "int32"),
            implementation="cudnn")
    except (NotImplementedError, RuntimeError, ValueError):
        return None
    return y[:, :queries]
