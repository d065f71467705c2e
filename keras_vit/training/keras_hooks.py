"""The Keras internal the distributed trainer relies on (a tf.distribute
concern, so it lives with the training code; the model's other Keras
internal is in `keras_vit.keras_compat`).

Tested with Keras 3.15.1; setup.cfg allows keras >= 3.15, < 3.16.
`tests/test_keras_compat.py` checks, on the installed Keras, that the hook
is still there and still behaves as relied on.
"""

from __future__ import annotations

_REDUCE_ATTR = "_all_reduce_sum_gradients"


def skip_cross_replica_sum(optimizer) -> None:
    """Makes `optimizer.apply_gradients` use the gradients as given.

    The trainer all-reduces the gradients itself, together with the loss in
    one collective, to clip them at the global norm of the summed gradient
    and to skip non-finite steps before the update. Under a
    `tf.distribute` strategy the Keras TensorFlow optimizer would then sum
    them over replicas a second time. tf.keras had a public switch for this
    (`apply_gradients(..., experimental_aggregate_gradients=False)`); Keras
    3 does not, so the optimizer's reduction hook is replaced by the
    identity, for this optimizer instance only.
    """
    if not hasattr(optimizer, _REDUCE_ATTR):
        raise RuntimeError(
            f"This Keras version's optimizer has no {_REDUCE_ATTR} hook, so "
            "the trainer cannot stop it summing the gradients over replicas "
            "a second time: update "
            "keras_vit.training.keras_hooks.skip_cross_replica_sum for it, "
            "or use keras >= 3.15, < 3.16."
        )
    setattr(optimizer, _REDUCE_ATTR, lambda grads_and_vars: list(
        grads_and_vars
    ))
