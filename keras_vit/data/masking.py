"""Which patches masked patch prediction corrupts, drawn on the input side.

The input pipeline draws the corruption of every image (`keras_vit.mpp`'s
`mpp_mode` and `mpp_source` model inputs) with stateless random ops seeded
by the pipeline's seed and the batch's index: reproducible, different on
every input pipeline, and an iterator that still checkpoints. Evaluation
draws the same corruption at every evaluation (from a seed of its own,
not the training batches'), so its MPP accuracy is comparable across a run.
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit import mpp
from keras_vit.architecture import patch_grid
from keras_vit.data.decoding import as_written


def corruption_from_noise(
    noise: tf.Tensor,
    corrupt_rate: float = 0.5,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
):
    """(mode, source) int32 (batch, patches) from uniform noise.

    Exactly round(corrupt_rate * patches) patches of each image (at least
    one) are corrupted: those with the smallest noise[..., 0]. Each of them
    is MASKED if noise[..., 1] < mask_fraction, else REPLACED if it is below
    mask_fraction + random_fraction, else KEPT. A replaced patch takes the
    embedding of another patch of the same image, (index + k) mod patches
    with k in 1..patches-1 from noise[..., 2]; `source` is the patch's own
    index everywhere else.

    Args:
        noise: float (batch, patches, 3) uniform in [0, 1).
        corrupt_rate, mask_fraction, random_fraction: float. See
            `config.objective.mpp`.
    """
    patches = int(noise.shape[1])
    mpp.check_patches(patches)
    count = min(max(int(round(corrupt_rate * patches)), 1), patches)
    # The rank of every patch's noise within its image.
    order = tf.argsort(noise[..., 0], axis=-1, stable=True)
    rank = tf.argsort(order, axis=-1, stable=True)
    corrupted = rank < count
    kind = tf.where(
        noise[..., 1] < mask_fraction,
        mpp.MASKED,
        tf.where(noise[..., 1] < mask_fraction + random_fraction,
                 mpp.REPLACED, mpp.KEPT),
    )
    mode = tf.where(corrupted, kind, mpp.NOT_CORRUPTED)
    offset = 1 + tf.minimum(
        tf.cast(noise[..., 2] * (patches - 1), tf.int32), patches - 2
    )
    index = tf.range(patches, dtype=tf.int32)[None, :]
    source = tf.where(mode == mpp.REPLACED, (index + offset) % patches,
                      index)
    return tf.cast(mode, tf.int32), tf.cast(source, tf.int32)


def num_patches(image_size, stride: int) -> int:
    """int. Patch tokens per image of a model at `image_size` with
    `stride` image pixels per token."""
    rows, cols = patch_grid(image_size, stride)
    return rows * cols


def add_corruption(ds: tf.data.Dataset, mpp_config, patches: int,
                   seed: int, per_example: bool = False) -> tf.data.Dataset:
    """Maps batches (images, *rest) to ({"images", "mpp_mode",
    "mpp_source"}, *rest), the MPP model's inputs, for `patches` tokens per
    image and the corruption rates of `config.objective.mpp`.

    Batch i's corruption comes from stateless noise seeded by (seed, i);
    with `per_example` (batches of one size, as evaluation pads them),
    example j's from (seed, j): the same images get the same corruption
    whatever the batch size (an evaluation's, which accumulation_steps
    divides), so that its scores compare across runs.
    """
    opts = mpp_config
    rates = (float(opts.corrupt_rate), float(opts.mask_fraction),
             float(opts.random_fraction))

    def example_noise(position):
        return tf.random.stateless_uniform(
            [patches, 3], seed=tf.stack([tf.cast(seed, tf.int64), position]))

    def corrupt(index, batch):
        images, *rest = batch if isinstance(batch, tuple) else (batch,)
        size = tf.shape(images, out_type=tf.int64)[0]
        if per_example:
            noise = tf.map_fn(example_noise, index * size + tf.range(size),
                              fn_output_signature=tf.float32)
        else:
            noise = tf.random.stateless_uniform(
                tf.stack([size, patches, 3]),
                seed=tf.stack([tf.cast(seed, tf.int64), index]))
        noise = tf.ensure_shape(noise, [images.shape[0], patches, 3])
        mode, source = corruption_from_noise(noise, *rates)
        features = {"images": images, "mpp_mode": mode, "mpp_source": source}
        return (features, *rest)

    return ds.enumerate().map(
        as_written(corrupt),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
