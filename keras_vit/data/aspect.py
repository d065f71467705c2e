"""The crop to an aspect ratio before a resize, as keras-hub's image
converter takes it (keras.layers.Resizing with crop_to_aspect_ratio)."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf


def crop_to_aspect(image: tf.Tensor, size: Sequence[int]) -> tf.Tensor:
    """The largest central window of `image` (height, width, ...) with
    the aspect ratio of `size` (height, width), its box rounded as
    keras.layers.Resizing(crop_to_aspect_ratio=True) rounds it: each side
    truncated from a float32 quotient, the offsets halved down."""
    h, w = int(size[0]), int(size[1])
    shape = tf.shape(image)
    rows = tf.cast(tf.cast(shape[1] * h, tf.float32) / w, tf.int32)
    cols = tf.cast(tf.cast(shape[0] * w, tf.float32) / h, tf.int32)
    rows = tf.maximum(tf.minimum(shape[0], rows), 1)
    cols = tf.maximum(tf.minimum(shape[1], cols), 1)
    top = tf.cast(tf.cast(shape[0] - rows, tf.float32) / 2, tf.int32)
    left = tf.cast(tf.cast(shape[1] - cols, tf.float32) / 2, tf.int32)
    return image[top : top + rows, left : left + cols]
