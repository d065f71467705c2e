"""Rematerialisation (gradient checkpointing) of the encoder blocks.

Activation memory, not FLOPs, decides what fits at fine-tuning resolutions
(577 tokens at 384 with 16 x 16 patches, 1,025 at 512): every block keeps
its attention weights, (heads, tokens, tokens) per example, and its MLP's
hidden state for the backward pass. Rematerialising a block keeps only its
input and runs its forward pass again in the backward pass.

Policies (`create_model(..., remat=...)`, `config.model.remat`):

    "none"   keep every activation (the default).
    "block"  keep each block's input only; recompute the block in the
             backward pass (`keras.remat`: `jax.checkpoint` on JAX,
             `tf.recompute_grad` on TensorFlow). One more forward pass.
    "dots"   JAX only: keep the outputs of the dense layers' matmuls (the
             un-batched dots: qkv, attention output, both MLP layers) and
             recompute the rest (attention products and softmax, norms,
             GELU): `jax.checkpoint` with `dots_with_no_batch_dims_saveable`.
             Keras's own `keras.remat` has no policy argument and TensorFlow's
             `recompute_grad` recomputes everything, hence the backend call.

Gradients equal those without rematerialisation to float rounding, dropout
included (tests/test_remat.py), and the weights and their names do not
change, so checkpoints are the same. benchmarks/memory.py measures what
each policy saves and costs.
"""

from __future__ import annotations

from typing import Callable

import keras
from keras import ops

from keras_vit.errors import UsageError

REMAT_POLICIES = ("none", "block", "dots")


def check_remat(remat: str) -> str:
    """Returns `remat` if it is a policy; else a ValueError naming the
    choices. Any policy builds and loads on any backend (inference never
    rematerialises: a model trained with "dots" on JAX evaluates and
    exports on TensorFlow); training checks the backend
    (`check_backend`)."""
    if remat not in REMAT_POLICIES:
        raise UsageError(
            f"remat must be one of {', '.join(map(repr, REMAT_POLICIES))}, "
            f"got {remat!r}."
        )
    return remat


def check_backend(remat: str) -> str:
    """Returns `remat` if this backend trains with it; else a ValueError
    naming the one that does: "dots" is JAX's policy."""
    if remat == "dots" and keras.backend.backend() != "jax":
        raise UsageError(
            'remat="dots" (save the matmul outputs) trains on the JAX '
            "backend only (KERAS_BACKEND=jax: Keras's fit or a JAX "
            "training step; keras-vit-train runs on TensorFlow); on the "
            f'{keras.backend.backend()} backend use remat="block".'
        )
    return remat


def _checkpoint(fn: Callable, remat: str) -> Callable:
    if remat == "block":
        return keras.remat(fn)
    check_backend(remat)
    # Documented lazy import: JAX is an optional dependency (the "jax" extra)
    # and check_backend admits "dots" only on the JAX backend.
    import jax

    return jax.checkpoint(
        fn, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    )


def remat_call(layer: keras.layers.Layer, x, remat: str, **kwargs):
    """`layer(x, **kwargs)`, its activations recomputed in the backward pass.

    The layer's mutable state (its dropout seed generators) goes in and out
    of the recomputed function explicitly: the forward pass and its
    recomputation draw the same dropout masks, and on JAX no value computed
    inside the checkpoint escapes it through a variable. The weights are
    read inside, where each backend's mechanism follows them.

    Args:
        layer: keras.layers.Layer. Built; called with one tensor input.
        x: tensor. The layer's input.
        remat: str. "block" or "dots" (see the module docstring).
        **kwargs: passed to the layer's call (`training`, ...).

    Returns:
        The layer's output.
    """
    if remat == "none":
        return layer(x, **kwargs)
    state = layer.non_trainable_variables
    # Copies: on TensorFlow a variable handle would be read again, after
    # the update below, when the backward pass recomputes the layer.
    values = [ops.copy(v.value) for v in state]
    weights = layer.trainable_variables

    def forward(x):
        # Weights map to themselves (read here); state to the values
        # taken before the call. The scope also shields the variables from
        # the call's updates, which come back as outputs.
        mapping = [(v, v) for v in weights] + list(zip(state, values))
        with keras.StatelessScope(state_mapping=mapping) as scope:
            y = layer(x, **kwargs)
        return y, [scope.get_current_value(v) for v in state]

    y, updated = _checkpoint(forward, remat)(x)
    for variable, value in zip(state, updated):
        variable.assign(value)
    return y
