"""Image preprocessing ops (TensorFlow, host side; never imports the model),
and the preprocessing function a config asks for (`from_config`).

Each op works on one image, eagerly or inside `tf.data` / a `tf.function`, so
the same code serves training input pipelines, evaluation and the export
signatures (which must preprocess exactly as evaluation does).

Convention: decoded images are uint8 (or float in [0, 255]) HWC RGB; the model
takes float32 in [-1, 1], as in the official implementation.
"""

from __future__ import annotations

import numbers
from typing import Callable, Optional, Sequence, Tuple, Union

import tensorflow as tf

from keras_vit.data import augment as augment_lib
from keras_vit.data.aspect import crop_to_aspect
from keras_vit.data.decoding import (
    JPEG_DCT,
    decode_image,
    refuse_huge,
    to_rgb,
)
from keras_vit.errors import UsageError

Size = Union[int, Sequence[int]]


def as_hw(size: Size) -> Tuple[int, int]:
    """(height, width) from an int (NumPy's too) or a pair."""
    if isinstance(size, numbers.Integral):
        return (int(size), int(size))
    size = tuple(int(s) for s in size)
    if len(size) != 2:
        raise UsageError(f"Expected an int or (height, width), got {size!r}.")
    return size


def scale_to_unit_range(image: tf.Tensor) -> tf.Tensor:
    """[0, 255] -> [-1, 1] float32, the model's input range."""
    return tf.cast(image, tf.float32) / 127.5 - 1.0


def resize(image: tf.Tensor, size: Size) -> tf.Tensor:
    """Bilinear resize to (height, width); float32 [0, 255] out.

    A uint8 image is resized as it is: the kernel reads each byte as a
    float, so the result has the bits of resizing a float32 copy, without
    that copy of the whole decoded image (4 bytes a pixel)."""
    if image.dtype != tf.uint8:
        image = tf.cast(image, tf.float32)
    return tf.image.resize(image, as_hw(size), method="bilinear")


def central_crop(image: tf.Tensor, size: Size) -> tf.Tensor:
    """Crops the central (height, width) window."""
    h, w = as_hw(size)
    shape = tf.shape(image)
    top = (shape[0] - h) // 2
    left = (shape[1] - w) // 2
    return image[top : top + h, left : left + w]


# Keeping the aspect ratio, the longer side grows with it: an image
# resized so may hold at most this many pixels (float32: 192 MiB).
MAX_RESIZED_PIXELS = 1 << 24
ELONGATED_MESSAGE = (
    "The image is too elongated to resize its shorter side keeping the "
    f"aspect ratio (the result would exceed {MAX_RESIZED_PIXELS:,} pixels): "
    "crop it first, or resize both sides (--keep_aspect=false).")


def small_side_size(shape, smaller: int) -> tf.Tensor:
    """(height, width), int32, of an image of `shape` (height, width, ...)
    whose shorter side `resize_small` makes `smaller`."""
    shape = tf.cast(shape, tf.int32)
    factor = tf.cast(smaller, tf.float32) / tf.cast(
        tf.minimum(shape[0], shape[1]), tf.float32)
    return tf.cast(tf.round(tf.cast(shape[:2], tf.float32) * factor),
                   tf.int32)


def assert_resizable(size) -> tf.Operation:
    """The assertion that an image resized to `size` (`small_side_size`)
    holds at most MAX_RESIZED_PIXELS (a 1 x 65535 image: 16M x N)."""
    return tf.debugging.assert_less_equal(
        tf.reduce_prod(tf.cast(size, tf.int64)),
        tf.constant(MAX_RESIZED_PIXELS, tf.int64), message=ELONGATED_MESSAGE)


def eval_keep_size(inp) -> Optional[int]:
    """The shorter side that `config.input` section `inp`'s evaluation
    resizes images to keeping their aspect ratio; None where it does not
    keep it."""
    pp = inp.pp
    return int(pp.eval_resize_size) if (
        pp.eval_keep_aspect and pp.eval_resize_size) else None


def too_elongated(shape, smaller: int) -> bool:
    """Whether `resize_small` to `smaller` refuses an image of `shape`
    (ELONGATED_MESSAGE), asked before it is resized (eagerly)."""
    size = tf.cast(small_side_size(shape, smaller), tf.int64)
    return bool(tf.reduce_prod(size) > MAX_RESIZED_PIXELS)


def resize_small(image: tf.Tensor, smaller: int) -> tf.Tensor:
    """Resizes the shorter side to `smaller`, keeping the aspect ratio (the
    other side rounded), with area resampling, truncated to whole values
    in [0, 255]; the input's dtype out. big_vision's `resize_small`, with
    which its ImageNet runs evaluate (then the central crop)."""
    hw = small_side_size(tf.shape(image), smaller)
    with tf.control_dependencies([assert_resizable(hw)]):
        resized = tf.image.resize(image, hw, method="area")
    # Whole values in [0, 255], as big_vision's cast back to uint8 makes
    # them: float pixels (predict_images, the digits) come out as the
    # same image's bytes would.
    resized = tf.clip_by_value(resized, 0.0, 255.0)
    if image.dtype == tf.uint8:
        return tf.cast(resized, tf.uint8)
    return tf.cast(tf.floor(resized), image.dtype)


def preprocess_eval(
    image: tf.Tensor, size: Size, resize_size: Optional[Size] = None,
    keep_aspect: bool = False,
) -> tf.Tensor:
    """Deterministic evaluation preprocessing.

    Resizes to `size` directly (the official ViT fine-tuning evaluation), or,
    when `resize_size` is given, to `resize_size` and then takes the central
    `size` crop (e.g. resize 256, crop 224 for few-shot probes); with
    `keep_aspect`, the int `resize_size` is the shorter side's length
    (`resize_small`, big_vision's ImageNet evaluation), and without
    `resize_size` the image is cropped to the aspect ratio of `size` first
    (`crop_to_aspect`, as keras-hub's image converter). Returns float32
    (height, width, 3) in [-1, 1].
    """
    image = to_rgb(image)
    if resize_size is None:
        image = resize(crop_to_aspect(image, as_hw(size)) if keep_aspect
                       else image, size)
    elif keep_aspect:
        image = central_crop(resize_small(image, _side(resize_size)), size)
    else:
        image = central_crop(resize(image, resize_size), size)
    h, w = as_hw(size)
    return tf.ensure_shape(scale_to_unit_range(image), [h, w, 3])


def _side(resize_size: Size) -> int:
    if isinstance(resize_size, numbers.Integral):
        return int(resize_size)
    raise UsageError(
        f"A resize that keeps the aspect ratio takes one length (the "
        f"shorter side's), got {resize_size!r}.")


def preprocess_finetune(
    image: tf.Tensor,
    size: Size,
    resize_size: Optional[Size] = None,
    flip: bool = True,
    seed: Optional[tf.Tensor] = None,
    augment: Optional[Callable] = None,
) -> tf.Tensor:
    """Fine-tuning augmentation (official ViT recipe).

    Resize to `resize_size` (or straight to `size`), random `size` crop,
    random horizontal flip. `seed` is an optional stateless seed (shape [2]).
    `augment` (e.g. RandAugment) maps the float [0, 255] result before it
    is scaled to [-1, 1].
    """
    h, w = as_hw(size)
    image = to_rgb(image)
    seeds = _split_seed(seed, 2)
    if resize_size is None:
        image = resize(image, (h, w))
    else:
        image = resize(image, resize_size)
        if seeds is None:
            image = tf.image.random_crop(image, [h, w, 3])
        else:
            image = tf.image.stateless_random_crop(image, [h, w, 3], seeds[0])
    return _finish(image, h, w, flip, seeds, augment)


def _finish(image, h, w, flip, seeds, augment):
    """Flip, augmentation and [-1, 1] scaling of a [0, 255] training
    image of the final size."""
    if flip:
        image = _flip(image, None if seeds is None else seeds[1])
    if augment is not None:  # its own seed, after the crop's and flip's
        image = augment(image, None if seeds is None else
                        tf.random.experimental.stateless_fold_in(seeds[1], 1))
    return tf.ensure_shape(scale_to_unit_range(image), [h, w, 3])


def preprocess_pretrain(
    image: tf.Tensor,
    size: Size,
    area_range: Tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: Tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    seed: Optional[tf.Tensor] = None,
    augment: Optional[Callable] = None,
) -> tf.Tensor:
    """Pre-training augmentation: Inception-style crop + horizontal flip.

    A random window covering `area_range` of the image with an aspect ratio in
    `aspect_ratio_range` (10 attempts; the whole image if none fits), resized
    to `size`. `augment` as for `preprocess_finetune`.
    """
    image = to_rgb(image)
    seeds = _split_seed(seed, 2)
    begin, crop_size = inception_crop_window(
        tf.shape(image), area_range, aspect_ratio_range,
        None if seeds is None else seeds[0],
    )
    # (tf.slice leaves the channels unknown; RandAugment needs them.)
    crop = tf.ensure_shape(tf.slice(image, begin, crop_size),
                           [None, None, 3])
    return _pretrain_from_crop(crop, size, flip, seeds, augment)


def _pretrain_from_crop(crop, size, flip, seeds, augment):
    h, w = as_hw(size)
    return _finish(resize(crop, (h, w)), h, w, flip, seeds, augment)


def inception_crop_window(
    shape: tf.Tensor,
    area_range: Tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: Tuple[float, float] = (3 / 4, 4 / 3),
    seed: Optional[tf.Tensor] = None,
) -> Tuple[tf.Tensor, tf.Tensor]:
    """(begin, size) of an Inception crop of an image of `shape` (H, W, C):
    `tf.image.(stateless_)sample_distorted_bounding_box`, 10 attempts, the
    whole image if none fits."""
    kwargs = dict(
        bounding_boxes=tf.zeros([1, 0, 4], tf.float32),
        min_object_covered=0.0,
        aspect_ratio_range=aspect_ratio_range,
        area_range=area_range,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    shape = tf.cast(shape, tf.int32)
    if seed is None:
        begin, size, _ = tf.image.sample_distorted_bounding_box(
            shape, **kwargs
        )
    else:
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape, seed=seed, **kwargs
        )
    return begin, size


def decode_and_inception_crop(
    data: tf.Tensor,
    area_range: Tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: Tuple[float, float] = (3 / 4, 4 / 3),
    seed: Optional[tf.Tensor] = None,
) -> tf.Tensor:
    """An Inception crop of encoded image bytes, uint8 RGB.

    A JPEG is decoded only inside the crop window
    (`tf.image.decode_and_crop_jpeg`, as big_vision's
    `decode_jpeg_and_inception_crop`): the window comes from the header's
    size (`tf.image.extract_jpeg_shape`), so it is the window
    `inception_crop_window` draws for the decoded image with the same seed,
    and the pixels are those of the decoded image's crop, except that with
    subsampled colour (4:2:0, the usual JPEG) the window's last row and
    column can differ slightly: libjpeg's chroma upsampling lacks the
    neighbours outside the window. Other formats (PNG, GIF, BMP) are
    decoded whole and then cropped.
    """
    def jpeg():  # the window is no more than the header allows
        with tf.control_dependencies([refuse_huge(data)]):
            shape = tf.image.extract_jpeg_shape(data)
        begin, size = inception_crop_window(shape, area_range,
                                            aspect_ratio_range, seed)
        window = tf.stack([begin[0], begin[1], size[0], size[1]])
        return tf.image.decode_and_crop_jpeg(data, window, channels=3,
                                             dct_method=JPEG_DCT)

    def other():
        image = decode_image(data)
        begin, size = inception_crop_window(
            tf.shape(image), area_range, aspect_ratio_range, seed
        )
        return tf.slice(image, begin, size)

    crop = tf.cond(tf.io.is_jpeg(data), jpeg, other)
    return tf.ensure_shape(crop, [None, None, 3])


def preprocess_pretrain_encoded(
    data: tf.Tensor,
    size: Size,
    area_range: Tuple[float, float] = (0.05, 1.0),
    aspect_ratio_range: Tuple[float, float] = (3 / 4, 4 / 3),
    flip: bool = True,
    seed: Optional[tf.Tensor] = None,
    augment: Optional[Callable] = None,
) -> tf.Tensor:
    """`preprocess_pretrain` of encoded bytes, decoding a JPEG only inside
    the crop window (`decode_and_inception_crop`); with the same seed, the
    result of `preprocess_pretrain(decode_image(data), ...)` (up to the
    chroma edge of subsampled JPEGs described there)."""
    seeds = _split_seed(seed, 2)
    crop = decode_and_inception_crop(
        data, area_range, aspect_ratio_range,
        None if seeds is None else seeds[0],
    )
    return _pretrain_from_crop(crop, size, flip, seeds, augment)


def _flip(image, seed):
    if seed is None:
        return tf.image.random_flip_left_right(image)
    return tf.image.stateless_random_flip_left_right(image, seed)


def _split_seed(seed, n):
    if seed is None:
        return None
    return tf.unstack(tf.random.experimental.stateless_split(seed, n))


def from_config(pp_config, image_size, seed: int, training: bool,
                encoded: bool = False) -> Callable:
    """`fn(image, seed=None)`: the preprocessing of a training or evaluation
    split at `image_size` (`config.model.image_size`), from a run's
    `config.input.pp` section (train: 'pretrain', 'finetune' or 'eval';
    resize_size, eval_resize_size, eval_keep_aspect, area_range, flip,
    randaug_ops, randaug_magnitude); `seed` (the input pipeline's,
    `pipeline.pipeline_seed`) seeds RandAugment.
    `input_pipeline.make_preprocess_fn` is this function.

    With `encoded` (training only), `fn` takes encoded image bytes: decoded
    whole, or, for 'pretrain', a JPEG only inside its crop window
    (`preprocess_pretrain_encoded`)."""
    size = image_size
    cfg = pp_config
    resize_size = cfg.resize_size
    eval_resize, keep = cfg.eval_resize_size, bool(cfg.eval_keep_aspect)
    if not training:
        return lambda image, seed=None: preprocess_eval(
            image, size, eval_resize, keep)
    kind = cfg.train
    flip = bool(cfg.flip)
    augment = augment_lib.rand_augment(
        int(cfg.randaug_ops), float(cfg.randaug_magnitude), int(seed)
    )
    if augment is not None and kind not in ("pretrain", "finetune"):
        raise UsageError(
            f"config.input.pp.randaug_ops={cfg.randaug_ops} augments the "
            f"'pretrain' and 'finetune' training preprocessing, not "
            f"{kind!r}: set config.input.pp.train to one of them, or "
            "config.input.pp.randaug_ops=0."
        )
    if resize_size is not None and kind == "finetune":  # its crop alone
        small = [r < s for r, s in zip(as_hw(resize_size), as_hw(size))]
        if any(small):
            side = max(as_hw(size))
            raise UsageError(
                f"config.input.pp.resize_size={resize_size} is smaller than "
                f"the image size {size}: the random crop must fit; set "
                f"config.input.pp.resize_size to at least {side} (or None "
                "to resize straight to the image size)."
            )
    decode = decode_image if encoded else (lambda image: image)
    if kind == "pretrain":
        area = tuple(cfg.area_range)
        if encoded:
            return lambda data, seed=None: preprocess_pretrain_encoded(
                data, size, area_range=area, flip=flip, seed=seed,
                augment=augment,
            )
        return lambda image, seed=None: preprocess_pretrain(
            image, size, area_range=area, flip=flip, seed=seed,
            augment=augment,
        )
    if kind == "finetune":
        return lambda image, seed=None: preprocess_finetune(
            decode(image), size, resize_size, flip=flip, seed=seed,
            augment=augment,
        )
    if kind == "eval":  # the evaluation's own: trained as it is scored
        return lambda image, seed=None: preprocess_eval(
            decode(image), size, eval_resize, keep)
    raise UsageError(
        f"Unknown pp.train {kind!r}: use 'pretrain' (Inception crop + flip), "
        "'finetune' (resize, random crop, flip) or 'eval' (the evaluation's)."
    )
