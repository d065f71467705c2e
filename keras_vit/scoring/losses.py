"""Classification losses per example, in float32, from integer labels or
from label vectors (Mixup's and CutMix's mixed labels)."""

from __future__ import annotations

import tensorflow as tf

from keras_vit.objectives import LOSSES, check_loss

__all__ = ["LOSSES", "hard_labels", "per_example_loss", "targets"]


def targets(labels: tf.Tensor, num_classes: int,
            label_smoothing: float = 0.0) -> tf.Tensor:
    """(batch, num_classes) float32 targets: one-hot integer labels (batch,)
    or label vectors (batch, num_classes) as they are, then smoothed."""
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank == 2:
        onehot = tf.cast(labels, tf.float32)
    else:
        onehot = tf.one_hot(labels, num_classes, dtype=tf.float32)
    if label_smoothing:
        smooth = label_smoothing / num_classes
        onehot = onehot * (1.0 - label_smoothing) + smooth
    return onehot


def hard_labels(labels: tf.Tensor) -> tf.Tensor:
    """int32 (batch,): integer labels as they are, the largest entry of
    label vectors (the dominant image's class of a mixed example)."""
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank == 2:
        return tf.argmax(labels, -1, output_type=tf.int32)
    return tf.cast(labels, tf.int32)


def per_example_loss(
    labels: tf.Tensor,
    logits: tf.Tensor,
    num_classes: int,
    loss: str = "softmax_xent",
    label_smoothing: float = 0.0,
) -> tf.Tensor:
    """Cross-entropy per example, in float32, from integer labels (batch,)
    or label vectors (batch, num_classes) whose rows sum to 1."""
    check_loss(loss)
    logits = tf.cast(logits, tf.float32)
    onehot = targets(labels, num_classes, label_smoothing)
    if loss == "softmax_xent":
        return tf.nn.softmax_cross_entropy_with_logits(onehot, logits)
    return tf.reduce_sum(
        tf.nn.sigmoid_cross_entropy_with_logits(onehot, logits), axis=-1
    )
