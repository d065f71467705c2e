"""The Keras internal the model code relies on.

Everything else goes through public Keras API; in particular the trainer
puts the EMA averages into the model with the public
`optimizer.finalize_variable_values`. Each function below says why it
exists. The other internals live with their code: a tf.distribute
concern with the training code
(`keras_vit.training.keras_hooks.skip_cross_replica_sum`), and the seed
generator Keras's image layers ask for (`_get_seed_generator`) with the
data code (`keras_vit.data.augment.PerCallSeed`, checked by
`tests/test_augreg_data.py`).

Tested with Keras 3.15.1; setup.cfg allows keras >= 3.15, < 3.16 (a new
minor release may move a private attribute).
`tests/test_keras_compat.py` checks, on the installed Keras, that both
internals are still there and still behave as relied on, and fails naming
the function to update.
"""

from __future__ import annotations

from keras_vit.errors import UsageError

_EMA_ATTR = "_model_variables_moving_average"
# The name `keras.random.SeedGenerator` gives its state variable.
SEED_STATE_NAME = "seed_generator_state"


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
            "use keras >= 3.15, < 3.16."
        )
    return list(averages)


def seed_states(model) -> list:
    """The state variables of the model's random seed generators (one per
    `keras.layers.Dropout`, stochastic depth included), in the order of
    `model.non_trainable_variables`.

    Each is (seed, counter): a dropout layer draws its mask from the
    state's value and then adds one to the counter. The distributed
    trainer gives each replica and step its own values for them
    (`keras_vit.training.replica_rng`), since one shared state would make
    every replica draw the same masks. Keras names these variables but
    lists no public way to find a layer's seed generators, hence the name.
    """
    return [v for v in model.non_trainable_variables
            if v.name == SEED_STATE_NAME]
