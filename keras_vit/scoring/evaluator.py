"""The distributed evaluation step of a classifier, shared by training (the
trainer's evaluation during a run) and evaluation (`keras_vit.evaluation`):
loss, top-1 and top-5 accuracy of a model's logits over the masked batches
of `keras_vit.data.pipeline.eval_dataset` (TensorFlow).
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import keras
import tensorflow as tf
from absl import logging

from keras_vit.objectives import check_loss
from keras_vit.progress import EVERY_S, Rate
from keras_vit.scoring.losses import per_example_loss


def in_top_k(labels: tf.Tensor, logits: tf.Tensor, k: int) -> tf.Tensor:
    """bool (batch,): whether each label is among the `k` classes of
    largest logits, ties broken to the lower class as argmax breaks them
    (`tf.nn.in_top_k` counts every class tied at the k-th place: a
    collapsed or zero head would score 100% top-5)."""
    top = tf.math.top_k(logits, k, sorted=False).indices
    return tf.reduce_any(
        tf.equal(top, tf.cast(labels, top.dtype)[..., None]), -1)


class Evaluator:
    """The distributed evaluation step of a classifier: loss, top-1 and
    top-5 accuracy over masked batches.

    Evaluation alone (`keras_vit.evaluation.accuracy`) uses it as is;
    `keras_vit.training.trainer.Trainer` extends it, so both score a model
    with the same step.

    Args:
        model: keras.Model. Images -> logits; created under
            `strategy.scope()`.
        strategy: tf.distribute.Strategy.
        num_classes: int. Width of the model's output.
        loss: str. "softmax_xent" or "sigmoid_xent".
    """

    # The name of the accuracy in logs, summaries and final metrics.
    accuracy_name = "accuracy"

    def __init__(
        self,
        model: keras.Model,
        strategy: tf.distribute.Strategy,
        *,
        num_classes: int,
        loss: str = "softmax_xent",
    ):
        check_loss(loss)
        self.model = model
        self.strategy = strategy
        self.num_classes = int(num_classes)
        self.loss = loss
        # No loop or branch on a tensor: nothing for AutoGraph to rewrite
        # (TPUStrategy.run still converts the replica function).
        self._eval_step = tf.function(self._eval_step_fn, autograph=False)

    def _eval_replica_fn(self, images, labels, mask):
        """One replica's sums over its batch: (loss, top-1, top-5, count)
        of the examples whose mask is 1 (replica context; static shapes, so
        that XLA compiles it, as a TPU does)."""
        logits = tf.cast(self.model(images, training=False), tf.float32)
        losses = per_example_loss(labels, logits, self.num_classes, self.loss)
        # A row of NaN or inf logits predicts nothing: not a hit (argmax
        # would make it class 0).
        finite = tf.reduce_all(tf.math.is_finite(logits), axis=-1)
        top1 = tf.cast(
            tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels)
            & finite, tf.float32)
        top5 = tf.cast(in_top_k(labels, logits, min(5, self.num_classes))
                       & finite, tf.float32)
        return (
            tf.reduce_sum(losses * mask),
            tf.reduce_sum(top1 * mask),
            tf.reduce_sum(top5 * mask),
            tf.reduce_sum(mask),
        )

    def _eval_step_fn(self, images, labels, mask):
        results = self.strategy.run(
            self._eval_replica_fn, args=(images, labels, mask)
        )
        return [
            self.strategy.reduce("SUM", r, axis=None) for r in results
        ]

    def evaluate(self, dataset, on_batch=None) -> Dict[str, float]:
        """Loss, top-1 and top-5 accuracy over a distributed eval dataset.

        Args:
            dataset: iterable of (images, labels, mask) batches, distributed
                by `strategy`; examples whose mask is 0 (padding) are not
                counted.
            on_batch: None, or called after each batch with the 1-based
                batch index and the metrics so far.

        Returns:
            {"loss", "accuracy", "top5_accuracy", "num_examples"};
            top5_accuracy is None for a model of at most 5 classes.
        """
        totals = [0.0, 0.0, 0.0, 0.0]
        ranks = self.num_classes > 5
        for i, (images, labels, mask) in enumerate(dataset, start=1):
            values = self._eval_step(images, labels, mask)
            totals = [t + float(v) for t, v in zip(totals, values)]
            if on_batch is not None:
                on_batch(i, _metrics(totals, ranks))
        return _metrics(totals, ranks)


def _metrics(totals, ranks: bool = True) -> Dict[str, float]:
    """The sums as means; top-5 accuracy None where the model has at most
    5 classes (every label is in its top 5: nothing to report)."""
    n = max(totals[3], 1.0)
    return {
        "loss": totals[0] / n,
        "accuracy": totals[1] / n,
        "top5_accuracy": totals[2] / n if ranks else None,
        "num_examples": int(totals[3]),
    }


def progress_callback(batches: Optional[int], batch_size: int, what: str,
                      every_s: float = EVERY_S, bar: bool = False
                      ) -> Callable[[int, Dict], None]:
    """An `Evaluator.evaluate` `on_batch` that shows its progress through
    `batches` batches (None: unknown): a Keras progress bar (`bar`, for a
    terminal), else a log line `what: batch i of n (p%), ... images/s`
    every `every_s` seconds."""
    if bar:
        # The running top-1 is shown as it is (Progbar would average it).
        progbar = keras.utils.Progbar(batches, unit_name="batch",
                                      stateful_metrics=["top1"])
        return lambda i, metrics: progbar.update(
            i, [("top1", metrics["accuracy"])])
    rate = Rate(batches, "batch", every_s, images=batch_size)
    rate.update(0)

    def on_batch(i, metrics):
        del metrics
        line = rate.update(i)
        if line:
            logging.info("%s: %s", what, line)

    return on_batch
