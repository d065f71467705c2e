"""keras_vit/fused_attention.py on the CPU: when the fused kernel is tried,
and the padding that gets an odd token count past JAX's training rule.

cuDNN cannot run here, so `jax.nn.dot_product_attention` is replaced by one
that behaves as JAX does on a GPU (it refuses cuDNN for an odd token count
under differentiation unless sequence lengths are given) and computes with
JAX's XLA implementation; the padded result and its gradient must equal
the unpadded attention's. Nothing here runs cuDNN's kernel itself
(docs/verified.md).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from keras_vit import fused_attention

REAL = jax.nn.dot_product_attention


def _like_a_gpu(calls, training):
    """A `jax.nn.dot_product_attention` that refuses cuDNN as JAX's
    training rule does (with `training`: an odd length and no sequence
    lengths) and otherwise computes with XLA."""
    def attend(q, k, v, *, implementation=None, **kwargs):
        calls.append((q.shape[1], k.shape[1], sorted(kwargs)))
        lengths = "key_value_seq_lengths" in kwargs
        if (implementation == "cudnn" and training and not lengths
                and (q.shape[1] % 2 or k.shape[1] % 2)):
            raise NotImplementedError(
                f"Unsupported sequence length Q {q.shape[1]}, KV "
                f"{k.shape[1]}.")
        return REAL(q, k, v, implementation="xla", **kwargs)
    return attend


def _qkv(tokens, queries=None, seed=0):
    rng = np.random.default_rng(seed)
    shape = (2, tokens, 3, 8)
    q, k, v = (jnp.asarray(rng.normal(size=shape), "float32")
               for _ in range(3))
    return (q if queries is None else q[:, :queries]), k, v


def _reference(q, k, v):
    logits = jnp.einsum("bqhd,bkhd->bhqk", q, k)
    return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, -1), v)


@pytest.mark.parametrize("tokens", [17, 16])
def test_padding_gets_an_odd_count_past_the_training_rule(monkeypatch,
                                                          tokens):
    calls = []
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        _like_a_gpu(calls, training=True))
    q, k, v = _qkv(tokens)

    def loss(fn, q, k, v):
        return (fn(q, k, v) ** 2).sum()

    got = jax.jit(jax.value_and_grad(
        lambda *a: loss(fused_attention.attention, *a), argnums=(0, 1, 2))
    )(q, k, v)
    want = jax.jit(jax.value_and_grad(
        lambda *a: loss(_reference, *a), argnums=(0, 1, 2)))(q, k, v)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    if tokens % 2:  # refused as it is, then taken padded to an even count
        assert calls == [(17, 17, ["scale"]), (18, 18, [
            "key_value_seq_lengths", "query_seq_lengths", "scale"])]
    else:
        assert calls == [(16, 16, ["scale"])]
    # Inference: taken as it is.
    calls.clear()
    monkeypatch.setattr(jax.nn, "dot_product_attention",
                        _like_a_gpu(calls, training=False))
    np.testing.assert_allclose(jax.jit(fused_attention.attention)(q, k, v),
                               _reference(q, k, v), rtol=1e-5, atol=1e-6)
    assert calls == [(tokens, tokens, ["scale"])]


def test_a_shape_refused_anyway_falls_back_to_the_caller(monkeypatch):
    def refuse(*args, **kwargs):
        raise RuntimeError("cuDNN is not detected.")
    monkeypatch.setattr(jax.nn, "dot_product_attention", refuse)
    assert fused_attention.attention(*_qkv(17)) is None
    assert fused_attention.attention(*_qkv(16)) is None


def test_the_fused_kernel_is_tried_only_where_the_rule_allows(monkeypatch):
    # On this CPU: never.
    assert fused_attention.cuda_device() is False
    assert not fused_attention.usable("bfloat16", 64)
    monkeypatch.setattr(fused_attention, "cuda_device", lambda: True)
    assert fused_attention.usable("bfloat16", 64)
    assert fused_attention.usable("float16", 128)
    assert not fused_attention.usable("float32", 64)  # 16-bit only
    assert not fused_attention.usable("bfloat16", 60)  # a multiple of 8
    assert not fused_attention.usable("bfloat16", 256)  # at most 128
