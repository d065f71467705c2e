"""Dropout and stochastic-depth masks of their own on every replica, step
and micro-batch, reproducible from the seed (TensorFlow).

Keras draws a dropout mask from the layer's seed generator, a variable
(seed, counter) that each call reads and then advances. Under a
`tf.distribute` strategy that variable is mirrored: every replica reads
the same value and advances it the same way, so every replica draws the
same masks for its different examples (a 2-replica MirroredStrategy
shows it; by TensorFlow's code TPUStrategy mirrors it the same way). The
recipes' dropout and stochastic depth assume independent masks, and
big_vision folds the replica index into its random key for that reason.

So the trainer never lets the model read the shared state. For each
micro-batch it maps every generator's state, inside a
`keras.StatelessScope`, to (the generator's own seed, a counter derived
from the training step, the replica and the micro-batch), and drops the
updates the layers make to it:

    key     = fold_in(fold_in(KEY, step), replica)    # once per step
    counter = draw(fold_in(key, micro_batch))          # per micro-batch

The generators' seeds come from `config.seed` (`keras.utils.
set_random_seed` before the model is built) and the step from the
checkpoint, so a run draws the same masks whatever the hardware's order
of execution, and a resumed run draws the masks of the uninterrupted one.
Everything here is stateless random ops on int32 seeds, which XLA
compiles (on a TPU, inside the replica step).
"""

from __future__ import annotations

from typing import List, Sequence

import keras
import tensorflow as tf

# Any fixed int32 pair: where the fold-ins start.
KEY = (0x5EED, 0x1D)


def step_key(step, replica) -> tf.Tensor:
    """int32 (2,): the key of one replica at one training step."""
    key = tf.random.experimental.stateless_fold_in(
        tf.constant(KEY, tf.int32), tf.cast(step, tf.int32)
    )
    return tf.random.experimental.stateless_fold_in(
        key, tf.cast(replica, tf.int32)
    )


def replica_id() -> tf.Tensor:
    """This replica's index in its sync group (0 outside a strategy)."""
    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context: not a replica step
        return tf.constant(0, tf.int32)
    return tf.cast(context.replica_id_in_sync_group, tf.int32)


def generator_states(states: Sequence, key, micro) -> List[tf.Tensor]:
    """The values the seed generators' `states` take for micro-batch
    `micro` of the step and replica of `key` (see the module docstring)."""
    # fold_in gives (a draw from `key`, micro): one more draw mixes both.
    counter = tf.random.stateless_uniform(
        [], seed=tf.random.experimental.stateless_fold_in(
            key, tf.cast(micro, tf.int32)),
        minval=None, maxval=None, dtype=tf.int32,
    )
    counter = tf.cast(counter, states[0].dtype) if states else counter
    return [tf.stack([tf.convert_to_tensor(s.value)[0], counter])
            for s in states]


def scope(states: Sequence, key, micro) -> keras.StatelessScope:
    """A `keras.StatelessScope` in which the generators' `states` read
    their values for micro-batch `micro` of `key` (their updates stay in
    the scope)."""
    values = generator_states(states, key, micro)
    return keras.StatelessScope(state_mapping=list(zip(states, values)))
