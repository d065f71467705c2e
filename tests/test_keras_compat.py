"""The Keras internals in keras_vit.keras_compat and
keras_vit.training.keras_hooks, checked on the installed
Keras: each is still there, and still does what the project relies on.

A failure here means a Keras release changed one of them; the message names
the keras_compat function to update.
"""

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import keras_compat, optim
from keras_vit.training import keras_hooks
from keras_vit.training.trainer import Trainer
from tests.strategies import two_cpu_mirrored

KERAS = f"Keras {keras.__version__}"


def _sgd_on_scalar(strategy, **kwargs):
    with strategy.scope():
        var = keras.Variable(0.0, name="w")
        optimizer = keras.optimizers.SGD(learning_rate=1.0, **kwargs)
    with strategy.scope():
        optimizer.build([var])
    return var, optimizer


# ------------------------------------------------- skip_cross_replica_sum
def test_optimizer_has_the_reduction_hook():
    _, optimizer = _sgd_on_scalar(two_cpu_mirrored())
    assert hasattr(optimizer, keras_hooks._REDUCE_ATTR), (
        f"{KERAS}'s TensorFlow optimizer has no "
        f"{keras_hooks._REDUCE_ATTR}: update "
        "keras_vit.training.keras_hooks.skip_cross_replica_sum (the "
        "trainer needs apply_gradients not to sum its all-reduced gradients "
        "again)."
    )


def _apply_ones_on_each_replica(skip: bool) -> float:
    strategy = two_cpu_mirrored()
    var, optimizer = _sgd_on_scalar(strategy)
    if skip:
        keras_hooks.skip_cross_replica_sum(optimizer)

    @tf.function
    def step():
        strategy.run(
            lambda: optimizer.apply_gradients([(tf.constant(1.0), var)])
        )

    step()
    values = strategy.experimental_local_results(var.value)
    assert len(values) == 2
    assert float(values[0]) == float(values[1])  # replicas stay in sync
    return float(values[0])


def test_keras_sums_gradients_over_replicas():
    """Why the hook is replaced: without it, a gradient of 1 on each of two
    replicas moves the weight by 2."""
    assert _apply_ones_on_each_replica(skip=False) == -2.0, (
        f"{KERAS}'s apply_gradients no longer sums gradients over replicas: "
        "keras_vit.training.keras_hooks.skip_cross_replica_sum may no "
        "longer be needed; update it and the trainer."
    )


def test_skip_cross_replica_sum_applies_the_gradients_as_given():
    assert _apply_ones_on_each_replica(skip=True) == -1.0, (
        f"Under {KERAS}, "
        "keras_vit.training.keras_hooks.skip_cross_replica_sum no longer "
        "stops apply_gradients summing the gradients over replicas: "
        "the trainer's updates would be scaled by the number of replicas. "
        "Update it."
    )


def test_skip_cross_replica_sum_refuses_an_optimizer_without_the_hook():
    class NoHook:
        pass

    with pytest.raises(RuntimeError, match="skip_cross_replica_sum"):
        keras_hooks.skip_cross_replica_sum(NoHook())


# ------------------------------------------------------------ ema_variables
def test_optimizer_keeps_the_ema_list():
    var, optimizer = _sgd_on_scalar(
        tf.distribute.get_strategy(), use_ema=True
    )
    averages = getattr(optimizer, keras_compat._EMA_ATTR, None)
    assert averages is not None and len(averages) == 1, (
        f"{KERAS}'s optimizer has no {keras_compat._EMA_ATTR} list: update "
        "keras_vit.keras_compat.ema_variables."
    )


def test_ema_variables_are_the_averages_keras_computes():
    """The averages follow Keras's documented EMA (the first step copies
    the weights), and are what the public finalize_variable_values puts
    into the model."""
    momentum = 0.5
    var, optimizer = _sgd_on_scalar(
        tf.distribute.get_strategy(), use_ema=True, ema_momentum=momentum,
        ema_overwrite_frequency=None,
    )
    expected = None
    for grad in (1.0, -3.0, 0.5):
        optimizer.apply_gradients([(tf.constant(grad), var)])
        value = float(var.numpy())
        expected = value if expected is None else (
            momentum * expected + (1 - momentum) * value
        )
    (average,) = keras_compat.ema_variables(optimizer)
    assert float(average.numpy()) == pytest.approx(expected, rel=1e-6), (
        f"Under {KERAS}, keras_vit.keras_compat.ema_variables no longer "
        "returns the EMA averages: update it."
    )
    optimizer.finalize_variable_values([var])
    assert float(var.numpy()) == float(average.numpy())


def test_ema_variables_refuses_an_optimizer_without_ema():
    _, optimizer = _sgd_on_scalar(tf.distribute.get_strategy())
    with pytest.raises(ValueError, match="use_ema"):
        keras_compat.ema_variables(optimizer)


def test_trainer_swaps_the_averages_in_and_out_on_every_replica():
    strategy = two_cpu_mirrored()
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (32, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 4, 32).astype("int32")
    with strategy.scope():
        model = keras_vit.create_model(
            None, num_classes=4, image_size=16, patch_size=8,
            hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16,
            head_zero_init=False,
        )
        optimizer = optim.create_optimizer(
            mlc.ConfigDict(dict(name="adamw", lr=1e-2)), 10, ema_decay=0.8
        )
    trainer = Trainer(model, optimizer, strategy, num_classes=4,
                      global_batch_size=16)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    trainer.train(iter(strategy.experimental_distribute_dataset(ds)), 4)

    def per_replica(variables):
        return [
            [r.numpy() for r in strategy.experimental_local_results(v.value)]
            for v in variables
        ]

    raw = per_replica(model.trainable_variables)
    averages = [v.numpy() for v in keras_compat.ema_variables(optimizer)]
    assert max(
        float(np.abs(a - r[0]).max()) for a, r in zip(averages, raw)
    ) > 1e-4  # the averages lag the weights
    trainer.swap_ema_weights()
    with pytest.raises(RuntimeError, match="swap_ema_weights"):
        trainer.train(iter(strategy.experimental_distribute_dataset(ds)), 1)
    for avg, replicas in zip(
        averages, per_replica(model.trainable_variables)
    ):
        for value in replicas:
            np.testing.assert_array_equal(value, avg)
    trainer.swap_ema_weights()
    for before, after in zip(raw, per_replica(model.trainable_variables)):
        for a, b in zip(before, after):
            np.testing.assert_array_equal(a, b)
    # The averages themselves were left as they were.
    for a, v in zip(averages, keras_compat.ema_variables(optimizer)):
        np.testing.assert_array_equal(a, v.numpy())
