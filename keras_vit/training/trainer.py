"""The distributed training step (TensorFlow); the evaluation step it
extends is `keras_vit.scoring.evaluator.Evaluator`.

Keras `fit` with `steps_per_execution > 1` fails under MirroredStrategy
(keras-team/keras#19246), and several steps per host call are what make TPU
training fast. So the loop is our own: `strategy.run` of one step inside a
`tf.function` that iterates `tf.range(steps)`, with Keras optimizers.

Per step and replica: the per-replica batch is split into
`accumulation_steps` micro-batches whose gradients are summed (so k x b
accumulated equals one step of k*b), and each replica and micro-batch
draws dropout and stochastic-depth masks of its own (`replica_rng`); the
loss is the example sum over the GLOBAL batch, so the cross-replica SUM of
gradients is the global mean gradient; it is clipped at its global norm
and applied once.

A step whose loss or gradient norm is not finite is counted (and reported
with its index). With `skip_nonfinite`, it is also skipped: the step counter
advances (the batch is consumed and the schedule moves on) but the weights,
the optimizer's moments and the EMA averages stay exactly as they were.
"""

from __future__ import annotations

import contextlib
from typing import Dict

import keras
import tensorflow as tf

from keras_vit import keras_compat
from keras_vit.errors import UsageError
from keras_vit.scoring.evaluator import Evaluator
from keras_vit.scoring.losses import hard_labels, per_example_loss
from keras_vit.training import distribute, keras_hooks, replica_rng
from keras_vit.training.train_options import TrainOptions


class Trainer(Evaluator):
    """Distributed train/eval steps for a classifier.

    Args:
        model: keras.Model. Created under `strategy.scope()`.
        optimizer: keras Optimizer. Created under `strategy.scope()`.
        strategy: tf.distribute.Strategy.
        num_classes: int. Width of the model's output.
        **options: the fields of `TrainOptions`, by name:
            global_batch_size (required), accumulation_steps,
            grad_clip_norm, loss, label_smoothing, jit_compile,
            skip_nonfinite. An unknown one raises a UsageError.
    """

    def __init__(
        self,
        model: keras.Model,
        optimizer: keras.optimizers.Optimizer,
        strategy: tf.distribute.Strategy,
        *,
        num_classes: int,
        **options,
    ):
        opts = TrainOptions.of(options)
        accumulation_steps = opts.accumulation_steps
        global_batch_size = opts.global_batch_size
        if accumulation_steps < 1:
            raise UsageError(
                f"accumulation_steps must be >= 1, got {accumulation_steps}."
            )
        replicas = strategy.num_replicas_in_sync
        if global_batch_size % (replicas * accumulation_steps):
            raise UsageError(
                f"batch_size {global_batch_size} is not divisible by "
                f"replicas ({replicas}) x accumulation_steps "
                f"({accumulation_steps}): use a multiple of "
                f"{replicas * accumulation_steps}."
            )
        super().__init__(model, strategy, num_classes=num_classes,
                         loss=opts.loss)
        self.optimizer = optimizer
        self.global_batch_size = int(global_batch_size)
        self.accumulation_steps = int(accumulation_steps)
        self.grad_clip_norm = opts.grad_clip_norm
        self.label_smoothing = float(opts.label_smoothing)
        self.skip_nonfinite = bool(opts.skip_nonfinite)
        with strategy.scope():
            optimizer.build(model.trainable_variables)
        keras_hooks.skip_cross_replica_sum(optimizer)
        # The raw weights while the EMA averages are in the model.
        self._raw_weights = None
        # The model's dropout seed generators, which each replica reads
        # with values of its own (replica_rng).
        self._seed_states = keras_compat.seed_states(model)
        # On a TPU the whole replica step is one XLA computation already:
        # a jit-compiled function nested inside it is not what TPUStrategy
        # (nor Keras, which turns XLA off under every strategy) runs.
        self.jit_compile = (bool(opts.jit_compile)
                            and not distribute.is_tpu(strategy))
        if self.jit_compile:
            self._replica_grads = tf.function(
                self._replica_grads, jit_compile=True
            )
        # A stop request (SIGTERM, Ctrl-C) ends a train call after the step
        # in flight, where every replica runs in this process; a multi-worker
        # or TPU run stops between host calls, every worker at the same step.
        self.stoppable = not (distribute.is_multi_worker(strategy)
                              or distribute.is_tpu(strategy))
        with tf.init_scope(), tf.device("/cpu:0"):
            self._stop = tf.Variable(False, trainable=False,
                                     name="stop_request")
        self._train_loop = tf.function(self._train_loop_fn)
        if self.accumulation_steps == 1 or self.jit_compile:
            self._train_step_fn = tf.autograph.experimental.do_not_convert(
                self._train_step_fn)

    # ------------------------------------------------------------- training
    # The functions without a loop or branch on a tensor run as written
    # (do_not_convert): AutoGraph rewrites the host call's loop, and the
    # replica step only where it holds gradient accumulation's loop (not
    # under jit_compile, whose function rewrites its own), not the model's
    # loss, gradients and update: over a second of tracing per process.
    @tf.autograph.experimental.do_not_convert
    def _loss_and_grads(self, images, labels):
        with tf.GradientTape() as tape:
            logits = self.model(images, training=True)
            losses = per_example_loss(labels, logits, self.num_classes,
                                      self.loss, self.label_smoothing)
            scaled = tf.reduce_sum(losses) / self.global_batch_size
        variables = self.model.trainable_variables
        grads = tape.gradient(scaled, variables)
        # Mixed labels count as their dominant class.
        correct = tf.reduce_sum(
            tf.cast(
                tf.equal(
                    tf.argmax(logits, -1, output_type=tf.int32),
                    hard_labels(labels),
                ),
                tf.float32,
            )
        )
        return tf.reduce_sum(losses), correct, grads

    @tf.autograph.experimental.do_not_convert
    def _seeded_loss_and_grads(self, images, labels, key, micro):
        """`_loss_and_grads` with this replica's dropout masks for
        micro-batch `micro` of the step of `key` (replica_rng)."""
        with replica_rng.scope(self._seed_states, key, micro):
            return self._loss_and_grads(images, labels)

    def _replica_grads(self, images, labels, key):
        """This replica's loss sum, correct count and gradient sum over
        its batch, `accumulation_steps` micro-batches (replica context;
        one XLA computation with `jit_compile`)."""
        k = self.accumulation_steps
        if k == 1:
            return self._seeded_loss_and_grads(images, labels, key, 0)
        # Images may be a dict of model inputs (masked patch prediction).
        micro = tf.nest.map_structure(
            lambda t: _split(t, k), (images, labels)
        )
        variables = self.model.trainable_variables
        grads = [tf.zeros_like(v) for v in variables]
        loss_sum = tf.constant(0.0)
        correct = tf.constant(0.0)
        for i in tf.range(k):
            l_i, c_i, g_i = self._seeded_loss_and_grads(
                *tf.nest.map_structure(lambda t: t[i], micro), key, i
            )
            grads = [g + gi for g, gi in zip(grads, g_i)]
            loss_sum += l_i
            correct += c_i
        return loss_sum, correct, grads

    def _train_step_fn(self, images, labels):
        """One optimizer update on this replica's batch (replica context)."""
        key = replica_rng.step_key(self.optimizer.iterations,
                                   replica_rng.replica_id())
        loss_sum, correct, grads = self._replica_grads(images, labels, key)
        ctx = tf.distribute.get_replica_context()
        # The loss sum rides along with the gradients: one all-reduce.
        *grads, total_loss = ctx.all_reduce(
            tf.distribute.ReduceOp.SUM, list(grads) + [loss_sum]
        )
        grad_norm = tf.linalg.global_norm(grads)
        # The same on every replica: both come from all-reduced values.
        finite = tf.logical_and(
            tf.math.is_finite(grad_norm), tf.math.is_finite(total_loss)
        )
        if self.grad_clip_norm:
            grads, _ = tf.clip_by_global_norm(
                grads, self.grad_clip_norm, use_norm=grad_norm
            )
        if self.skip_nonfinite:
            self._apply_if(finite, grads)
            zero = tf.zeros_like(loss_sum)
            loss_sum = tf.where(finite, loss_sum, zero)
            correct = tf.where(finite, correct, zero)
            grad_norm = tf.where(finite, grad_norm, zero)
        else:
            self.optimizer.apply_gradients(
                zip(grads, self.model.trainable_variables)
            )
        return loss_sum, correct, grad_norm, tf.cast(finite, tf.float32)

    @tf.autograph.experimental.do_not_convert
    def _apply_if(self, finite, grads):
        """Applies `grads` if `finite`, else only advances the step counter.

        A `tf.cond` around `apply_gradients` in replica context is only
        allowed where the strategy needs no `merge_call` for variable
        updates (the default strategy, a GPU MirroredStrategy under XLA);
        elsewhere (MirroredStrategy, MultiWorkerMirroredStrategy, and
        TPUStrategy, which uses merge_call by default in TF 2.20 and 2.21)
        the condition is taken in cross-replica context, as Keras's
        LossScaleOptimizer does.
        """
        optimizer = self.optimizer
        variables = self.model.trainable_variables
        averages = keras_compat.ema_variables(optimizer) if self.has_ema \
            else []

        def apply(grads):
            optimizer.apply_gradients(zip(grads, variables))

        def skip():
            # Keras starts the EMA averages at zero and copies the weights
            # into them on step 0 only: a skipped step 0 makes that copy,
            # else every later average would be scaled towards zero.
            first = tf.equal(optimizer.iterations, 0)
            for average, variable in zip(averages, variables):
                if average is not None:  # None: a variable Keras skips
                    average.assign(tf.where(first, variable, average))
            optimizer.iterations.assign_add(1)

        if tf.__internal__.distribute.strategy_supports_no_merge_call():
            tf.cond(finite, lambda: apply(grads), skip)
            return

        def cross_replica(distribution, finite, grads):
            ok = distribution.experimental_local_results(finite)[0]
            tf.cond(
                ok,
                lambda: distribution.extended.call_for_each_replica(
                    apply, args=(grads,)
                ),
                skip,
            )

        tf.distribute.get_replica_context().merge_call(
            cross_replica, args=(finite, grads)
        )

    def _train_loop_fn(self, iterator, steps):
        strategy = self.strategy
        sums = {name: tf.constant(0.0)
                for name in ("loss", "correct", "grad_norm", "nonfinite")}
        sums.update(first_nonfinite=tf.constant(-1), steps=tf.constant(0))
        for i in tf.range(steps):
            if self.stoppable:
                if self._stop.read_value():
                    break
            sums["steps"] += 1
            images, labels = next(iterator)
            loss_sum, correct, grad_norm, finite = strategy.run(
                self._train_step_fn, args=(images, labels)
            )
            sums["loss"] += strategy.reduce("SUM", loss_sum, axis=None)
            sums["correct"] += strategy.reduce("SUM", correct, axis=None)
            # Identical on every replica (computed after the all-reduce).
            sums["grad_norm"] += strategy.reduce("MEAN", grad_norm, axis=None)
            bad = 1.0 - strategy.reduce("MEAN", finite, axis=None)
            sums["nonfinite"] += bad
            sums["first_nonfinite"] = tf.where(
                tf.logical_and(sums["first_nonfinite"] < 0, bad > 0),
                i,
                sums["first_nonfinite"],
            )
        return sums

    def request_stop(self) -> None:
        """Ends the train call in flight after its current step (where the
        run is `stoppable`; any thread may call it)."""
        self._stop.assign(True)

    def stop_requested(self) -> bool:
        """Whether `request_stop` was called (False where the run is not
        `stoppable`: its workers must agree on every step)."""
        return self.stoppable and bool(self._stop.numpy())

    def train(self, iterator, steps: int) -> Dict[str, float]:
        """Runs `steps` optimizer updates in one host call, fewer after
        `request_stop`.

        Returns `steps`, the updates run; the mean loss, accuracy and
        gradient norm over them (with `skip_nonfinite`: over the applied
        steps; NaN if none was), `nonfinite_steps`, the number of steps
        whose loss or gradient norm was NaN or Inf (skipped with
        `skip_nonfinite`), and `first_nonfinite_step`, the 1-based index of
        the first of them in this call, or None.
        """
        if steps < 1:
            raise UsageError(f"steps must be >= 1, got {steps}.")
        if self._raw_weights is not None:
            raise RuntimeError(
                "The model holds its EMA averages (swap_ema_weights): call "
                "swap_ema_weights again to put the raw weights back before "
                "training."
            )
        sums = self._train_loop(iterator, tf.constant(steps, tf.int32))
        steps = int(sums["steps"])
        bad = int(round(float(sums["nonfinite"])))
        first = int(sums["first_nonfinite"])
        applied = steps - bad if self.skip_nonfinite else steps
        examples = float(applied * self.global_batch_size)
        nan = float("nan")
        return {
            "steps": steps,
            "loss": float(sums["loss"]) / examples if applied else nan,
            "accuracy": float(sums["correct"]) / examples if applied else nan,
            "grad_norm": float(sums["grad_norm"]) / applied if applied else nan,
            "nonfinite_steps": bad,
            "first_nonfinite_step": first + 1 if first >= 0 else None,
        }

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def learning_rate(self, applied: bool = False) -> float:
        """The learning rate of the next update; with `applied`, of the
        last one (Keras's `learning_rate` reads the schedule at
        `iterations`, the next update's step)."""
        schedule = getattr(self.optimizer, "_learning_rate", None)
        if applied and isinstance(
                schedule, keras.optimizers.schedules.LearningRateSchedule):
            return float(schedule(max(self.step - 1, 0)))
        lr = self.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    # ----------------------------------------------------------- evaluation
    def evaluate(
        self, dataset, use_ema: bool = True, on_batch=None
    ) -> Dict[str, float]:
        """`Evaluator.evaluate`; with an EMA optimizer and `use_ema`, of the
        averaged weights (the raw weights are put back afterwards)."""
        with self.evaluated_weights(use_ema):
            return super().evaluate(dataset, on_batch=on_batch)

    # ------------------------------------------------------------------ EMA
    @property
    def has_ema(self) -> bool:
        return bool(getattr(self.optimizer, "use_ema", False))

    @contextlib.contextmanager
    def evaluated_weights(self, use_ema: bool = True):
        """Inside the block, the model holds the weights it is evaluated
        with: the EMA averages where the optimizer keeps them (and
        `use_ema`); the raw weights are put back afterwards."""
        swap = use_ema and self.has_ema
        if swap:
            self.swap_ema_weights()
        try:
            yield self.model
        finally:
            if swap:
                self.swap_ema_weights()

    def swap_ema_weights(self) -> None:
        """Puts the EMA averages into the model's weights; called again,
        puts the raw weights back.

        Keras's `finalize_variable_values` copies the averages into the
        weights but has no inverse, so the raw weights wait meanwhile, in
        host memory: accelerator memory already holds the weights, their
        averages and the optimizer's moments.
        """
        variables = self.model.trainable_variables
        with self.strategy.scope():
            if self._raw_weights is None:
                with tf.device("/cpu:0"):
                    self._raw_weights = [
                        tf.identity(v.value) for v in variables
                    ]
                self.optimizer.finalize_variable_values(variables)
            else:
                for var, raw in zip(variables, self._raw_weights):
                    var.assign(raw)
                self._raw_weights = None


def _split(tensor, k: int):
    """(k * b, ...) -> (k, b, ...): the micro-batches of a replica's
    batch, with static shapes where the batch has one (XLA, TPUs)."""
    shape = tensor.shape.as_list()
    if all(d is not None for d in shape):
        return tf.reshape(tensor, [k, shape[0] // k] + shape[1:])
    dynamic = tf.shape(tensor)
    return tf.reshape(tensor, tf.concat([[k, dynamic[0] // k], dynamic[1:]],
                                        0))
