"""Classification losses per example, in float32, from integer labels."""

from __future__ import annotations

import tensorflow as tf

LOSSES = ("softmax_xent", "sigmoid_xent")


def per_example_loss(
    labels: tf.Tensor,
    logits: tf.Tensor,
    num_classes: int,
    loss: str = "softmax_xent",
    label_smoothing: float = 0.0,
) -> tf.Tensor:
    """Cross-entropy per example, in float32, from integer labels."""
    logits = tf.cast(logits, tf.float32)
    onehot = tf.one_hot(labels, num_classes, dtype=tf.float32)
    if label_smoothing:
        smooth = label_smoothing / num_classes
        onehot = onehot * (1.0 - label_smoothing) + smooth
    if loss == "softmax_xent":
        return tf.nn.softmax_cross_entropy_with_logits(onehot, logits)
    if loss == "sigmoid_xent":
        return tf.reduce_sum(
            tf.nn.sigmoid_cross_entropy_with_logits(onehot, logits), axis=-1
        )
    raise ValueError(f"Unknown loss {loss!r}: use one of {', '.join(LOSSES)}.")
