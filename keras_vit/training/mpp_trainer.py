"""The training and evaluation steps of masked patch prediction.

`MppTrainer` is the classifier's `Trainer` (the same distributed loop,
gradient accumulation, clipping, non-finite skipping, EMA) with another
objective: the MPP model's predictions for every patch are scored against
targets computed from the uncorrupted images (`keras_vit.mpp`), on the
corrupted patches only. The labels the pipeline yields are not used.

Per example, the loss is the mean over its corrupted patches (and, for
"colour_grid", their cells) of the softmax cross-entropy over the colour
classes, or of the squared error per pixel value for "pixels"; its
accuracy is the share of those patches (cells) whose colour class is right
(for "pixels": the class of the predicted patch's mean colour). Every image
has the same number of corrupted patches, so the mean over examples is the
mean over all corrupted patches of the batch.
"""

from __future__ import annotations

from typing import Tuple

import keras
import tensorflow as tf

from keras_vit import mpp
from keras_vit.errors import UsageError
from keras_vit.scoring.evaluator import in_top_k
from keras_vit.training.trainer import Trainer


class MppTrainer(Trainer):
    """`Trainer` for an MPP model (`keras_vit.mpp.MppModel`): the loss and
    accuracies of what its head predicts (the model's `target`,
    `colour_bits`, `grid_size`; its architecture's stride).

    Args:
        model: MppModel. Created under `strategy.scope()`.
        optimizer: keras Optimizer. Created under `strategy.scope()`.
        strategy: tf.distribute.Strategy.
        **kwargs: `Trainer`'s batch, accumulation, clipping, XLA and
            non-finite options (`keras_vit.training.train_options.TrainOptions`;
            no loss or label smoothing: the objective is fixed).
    """

    accuracy_name = "mpp_accuracy"

    def __init__(
        self,
        model: mpp.MppModel,
        optimizer: keras.optimizers.Optimizer,
        strategy: tf.distribute.Strategy,
        **kwargs,
    ):
        if not isinstance(model, mpp.MppModel):
            raise UsageError(
                f"MppTrainer needs an MPP model (keras_vit.mpp.MppModel, "
                f"create_mpp_model), got {model.name!r}."
            )
        self.target = model.target
        self.stride = model.architecture.stride
        self.colour_bits = model.colour_bits
        self.grid_size = (model.grid_size if self.target == "colour_grid"
                          else 1)
        super().__init__(
            model, optimizer, strategy,
            num_classes=mpp.num_colour_classes(self.colour_bits), **kwargs,
        )

    def objective(
        self, features, outputs
    ) -> Tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """Per example: (loss, accuracy, top-5 accuracy) over its corrupted
        patches, float32 (batch,)."""
        images = features["images"]
        weights = tf.cast(features["mpp_mode"] > mpp.NOT_CORRUPTED,
                          tf.float32)
        count = tf.maximum(tf.reduce_sum(weights, -1), 1.0)
        outputs = tf.cast(outputs, tf.float32)
        batch, patches = tf.shape(outputs)[0], tf.shape(outputs)[1]
        if self.target == "pixels":
            targets = mpp.patch_pixels(images, self.stride)
            per_patch = tf.reduce_mean(tf.square(outputs - targets), -1)
            mean_rgb = tf.reduce_mean(
                tf.reshape(outputs, [batch, patches, -1, 3]), 2
            )
            right = tf.cast(
                tf.equal(
                    mpp.quantise_colours(mean_rgb, self.colour_bits),
                    mpp.colour_targets(images, self.stride,
                                       self.colour_bits)[..., 0],
                ),
                tf.float32,
            )
            top5 = right  # not reported (`evaluate`)
        else:
            targets = mpp.colour_targets(
                images, self.stride, self.colour_bits, self.grid_size
            )
            cells = self.grid_size * self.grid_size
            logits = tf.reshape(
                outputs, [batch, patches, cells, self.num_classes]
            )
            per_patch = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    targets, logits
                ),
                -1,
            )
            right = tf.reduce_mean(tf.cast(tf.equal(
                tf.argmax(logits, -1, output_type=tf.int32), targets
            ), tf.float32), -1)
            flat = tf.reshape(logits, [-1, self.num_classes])
            top5 = tf.reduce_mean(tf.reshape(tf.cast(in_top_k(
                tf.reshape(targets, [-1]), flat, 5
            ), tf.float32), [batch, patches, cells]), -1)

        def over_corrupted(values):
            return tf.reduce_sum(values * weights, -1) / count

        return over_corrupted(per_patch), over_corrupted(right), (
            over_corrupted(top5))

    def _loss_and_grads(self, features, labels):
        del labels  # self-supervised
        with tf.GradientTape() as tape:
            outputs = self.model(features, training=True)
            losses, right, _ = self.objective(features, outputs)
            scaled = tf.reduce_sum(losses) / self.global_batch_size
        variables = self.model.trainable_variables
        grads = tape.gradient(scaled, variables)
        return tf.reduce_sum(losses), tf.reduce_sum(right), grads

    def evaluate(self, dataset, use_ema: bool = True, on_batch=None):
        """`Trainer.evaluate`; predicting pixels (a regression), there
        is no top-5 to rank: its top5_accuracy is None."""
        results = super().evaluate(dataset, use_ema, on_batch)
        if self.target == "pixels":
            results["top5_accuracy"] = None
        return results

    def _eval_replica_fn(self, features, labels, mask):
        del labels  # self-supervised
        outputs = self.model(features, training=False)
        losses, right, top5 = self.objective(features, outputs)
        return (
            tf.reduce_sum(losses * mask),
            tf.reduce_sum(right * mask),
            tf.reduce_sum(top5 * mask),
            tf.reduce_sum(mask),
        )
