"""How each VTAB-1k task derives its (image, label) from a TFDS example:
object counts, distances, positions and poses binned exactly as the
task_adaptation code does, and grey images tiled to RGB."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from keras_vit.data import preprocessing as pp
from keras_vit.data.decoding import JPEG_DCT

Example = Dict[str, tf.Tensor]


def _count_below(thresholds: Sequence[float], value: tf.Tensor) -> tf.Tensor:
    """Largest i with thresholds[i] < value (thresholds ascending).

    The thresholds below `value` form a prefix, so the index is their count
    minus one (-1, an invalid label, if there is none).
    """
    thrs = tf.constant(thresholds, tf.float32)
    below = tf.cast(thrs < tf.cast(value, tf.float32), tf.int32)
    return tf.reduce_sum(below) - 1


def label_from(key: str) -> Callable[[Example], tf.Tensor]:
    """The label is a feature of the example."""

    def fn(example: Example) -> tf.Tensor:
        return tf.cast(example[key], tf.int32)

    fn.__name__ = f"label_from_{key}"
    fn.feature = key  # lets dataset_info find the class names
    return fn


def clevr_count_label(example: Example) -> tf.Tensor:
    """Number of objects minus 3 (CLEVR scenes hold 3 to 10 objects)."""
    return tf.size(example["objects"]["size"], out_type=tf.int32) - 3


CLEVR_DIST_THRESHOLDS = (0.0, 8.0, 8.5, 9.0, 9.5, 10.0, 100.0)


def clevr_dist_label(example: Example) -> tf.Tensor:
    """Depth bin of the closest object (6 classes).

    Depth is the third pixel coordinate; bins: <=8, (8,8.5], (8.5,9],
    (9,9.5], (9.5,10], (10,100].
    """
    depth = tf.reduce_min(example["objects"]["pixel_coords"][:, 2])
    return _count_below(CLEVR_DIST_THRESHOLDS, depth)


KITTI_DIST_THRESHOLDS = (-100.0, 8.0, 20.0, 999.0)
KITTI_NO_VEHICLE_DEPTH = 1000.0


def kitti_dist_label(example: Example) -> tf.Tensor:
    """Distance bin of the closest vehicle (4 classes).

    Vehicles are objects of type Car, Van or Truck (type < 3); the distance
    is the z location in metres, 1000 when there is no vehicle. Bins: <=8 m,
    (8, 20] m, (20, 999] m, no vehicle.
    """
    objects = example["objects"]
    vehicles = objects["type"] < 3
    depth = tf.boolean_mask(
        tf.cast(objects["location"][:, 2], tf.float32), vehicles
    )
    depth = tf.concat([depth, [KITTI_NO_VEHICLE_DEPTH]], axis=0)
    return _count_below(KITTI_DIST_THRESHOLDS, tf.reduce_min(depth))


def binned_label(
    key: str, num_original: int, num_classes: int
) -> Callable[[Example], tf.Tensor]:
    """Groups `num_original` consecutive class indices into `num_classes`.

    label = floor(index / (num_original / num_classes)), as task_adaptation
    does for dSprites (x position: 32 -> 16 bins of 2; orientation: 40 -> 16
    bins of 2.5).
    """
    factor = float(num_original) / num_classes

    def fn(example: Example) -> tf.Tensor:
        index = tf.cast(example[key], tf.float32)
        return tf.cast(tf.math.floordiv(index, factor), tf.int32)

    fn.__name__ = f"binned_{key}"
    return fn


# -------------------------------------------------------------- images
def rgb_image(example: Example) -> tf.Tensor:
    """The example's image as 3 channels (grayscale tiled)."""
    return pp.to_rgb(example["image"])


def binary_rgb_image(example: Example) -> tf.Tensor:
    """dSprites: 0/1 pixels scaled to 0/255, then tiled to 3 channels."""
    return pp.to_rgb(tf.cast(example["image"], tf.uint8) * 255)


def image_decoders(feature, key: str) -> Optional[Dict[str, Any]]:
    """TFDS `decoders` for a task's uint8 image `feature` (None for any
    other feature): a JPEG decoded as PIL decodes it (`JPEG_DCT`), as the
    project decodes every other photo, where TFDS would take libjpeg's
    fast DCT; other formats by TFDS, as they are lossless."""
    import tensorflow_datasets as tfds

    if not (isinstance(feature, tfds.features.Image)
            and feature.np_dtype == np.uint8):
        return None

    @tfds.decode.make_decoder(output_dtype=tf.uint8)
    def decode(data, feature):
        image = tf.cond(
            tf.io.is_jpeg(data),
            lambda: tf.io.decode_jpeg(data, channels=feature.shape[-1] or 0,
                                      dct_method=JPEG_DCT),
            lambda: feature.decode_example(data))
        image.set_shape(feature.shape)
        return image

    return {key: decode()}


# --------------------------------------------------------------- tasks
