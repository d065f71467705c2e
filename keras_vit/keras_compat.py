"""The Keras internals this project relies on, in one place.

Everything else goes through public Keras API; in particular the trainer
puts the EMA averages into the model with the public
`optimizer.finalize_variable_values`. Two needs have no public form in
Keras 3, and each function below says why it exists.

Tested with Keras 3.15.1; setup.cfg allows keras >= 3.10, < 4.
`tests/test_keras_compat.py` checks, on the installed Keras, that each
internal is still there and still behaves as relied on, and fails naming
the function here to update.
"""

from __future__ import annotations
from keras_vit.errors import UsageError

_EMA_ATTR = "_model_variables_moving_average"
_REDUCE_ATTR = "_all_reduce_sum_gradients"


def ema_variables(optimizer) -> list:
    """The EMA (Polyak) averages of the model's trainable variables, in the
    order of `model.trainable_variables`, kept by an optimizer built with
    `use_ema=True`.

    Keras only exposes them by overwriting the model's weights
    (`finalize_variable_values`); reading them without touching the model
    (to load averaged weights into a fresh model, or to check them) needs
    the optimizer's private list.
    """
    if not getattr(optimizer, "use_ema", False):
        raise UsageError(
            "The optimizer keeps no EMA averages: build it with use_ema=True."
        )
    averages = getattr(optimizer, _EMA_ATTR, None)
    if averages is None:
        raise RuntimeError(
            f"This Keras version's optimizer has no {_EMA_ATTR} (or was not "
            "built): update keras_vit.keras_compat.ema_variables for it, or "
            "use keras >= 3.10, < 4."
        )
    return list(averages)


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
            "keras_vit.keras_compat.skip_cross_replica_sum for it, or use "
            "keras >= 3.10, < 4."
        )
    setattr(optimizer, _REDUCE_ATTR, lambda grads_and_vars: list(
        grads_and_vars
    ))
