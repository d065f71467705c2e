"""Decoding untrusted image bytes to uint8 RGB (TensorFlow, host side).

The format is known by its first bytes and the declared size is bounded
before any decoder runs (`image_headers`); grayscale and RGBA become RGB.
`keras_vit.data.preprocessing` exposes both functions as its own.
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit.data import image_headers as headers
from keras_vit.errors import UsageError


def as_written(fn):
    """`fn` for `tf.data.Dataset.map`, traced as written rather than
    rewritten by AutoGraph. The data functions branch on static shapes and
    config values only (on a tensor through `tf.cond` / `tf.case`), so the
    rewrite (about half a second of every process that builds a pipeline)
    would change nothing."""
    return tf.autograph.experimental.do_not_convert(fn)


def to_rgb(image: tf.Tensor) -> tf.Tensor:
    """Grayscale -> 3 channels (tiled), RGBA -> RGB (alpha dropped).

    A rank-2 image (H, W) is treated as grayscale.
    """
    if image.shape.rank == 2:
        image = image[..., tf.newaxis]
    channels = image.shape[-1]
    if channels == 3:
        return image
    if channels == 1:
        return tf.tile(image, [1, 1, 3])
    if channels == 4:
        return image[..., :3]
    if channels == 2:  # grayscale + alpha
        return tf.tile(image[..., :1], [1, 1, 3])
    if channels is None:
        # Unknown statically (e.g. decode_image without channels): decide at
        # run time.
        channels = tf.shape(image)[-1]
        return tf.case(
            [
                (tf.equal(channels, 1), lambda: tf.tile(image, [1, 1, 3])),
                (
                    tf.equal(channels, 2),
                    lambda: tf.tile(image[..., :1], [1, 1, 3]),
                ),
            ],
            default=lambda: image[..., :3],
        )
    raise UsageError(
        f"Cannot convert an image with {channels} channels to RGB."
    )


# libjpeg's accurate integer DCT, as PIL decodes (and so the pipelines of
# transformers and timm): TensorFlow's default, the fast one, is a grey
# level or two off on about a third of a photo's pixels.
JPEG_DCT = "INTEGER_ACCURATE"


def decode_image(data: tf.Tensor) -> tf.Tensor:
    """Decodes JPEG, PNG, GIF (first frame), BMP or WebP (TensorFlow >= 2.18)
    bytes to uint8 RGB (H, W, 3).

    16-bit PNGs are converted to 8 bits; grayscale and RGBA become RGB.
    A JPEG is decoded as PIL decodes it (`JPEG_DCT`).
    Another format (TensorFlow's decoder would read JPEG XL, whose size is
    not checked) is refused by its first bytes, before any decoder runs;
    invalid bytes raise `tf.errors.InvalidArgumentError` from the decoder.
    """
    tf.debugging.assert_greater(
        tf.strings.length(data),
        0,
        message="Empty image: got a zero-length string instead of encoded "
        "image bytes (JPEG, PNG, GIF, BMP or WebP).",
    )
    with tf.control_dependencies([_refuse_unknown_format(data),
                                  _refuse_palette_bmp(data),
                                  _refuse_animated_webp(data),
                                  refuse_huge(data)]):
        image = tf.cond(
            tf.io.is_jpeg(data),
            lambda: tf.io.decode_jpeg(data, channels=0, dct_method=JPEG_DCT),
            lambda: tf.io.decode_image(
                data, channels=0, dtype=tf.uint8, expand_animations=False))
    image.set_shape([None, None, None])
    return tf.ensure_shape(to_rgb(image), [None, None, 3])


def _refuse_unknown_format(data: tf.Tensor):
    return tf.debugging.assert_equal(headers.is_known_format(data), True,
                                     message=headers.UNKNOWN_FORMAT_MESSAGE)


def _refuse_palette_bmp(data: tf.Tensor):
    return tf.debugging.assert_equal(headers.is_palette_bmp(data), False,
                                     message=headers.PALETTE_BMP_MESSAGE)


def _refuse_animated_webp(data: tf.Tensor):
    return tf.debugging.assert_equal(headers.is_animated_webp(data), False,
                                     message=headers.ANIMATED_WEBP_MESSAGE)


def refuse_huge(data: tf.Tensor):
    """The assertion that the header of `data` declares at most
    `image_headers.MAX_PIXELS` pixels (a decompression bomb refused
    unread)."""
    return tf.debugging.assert_less_equal(
        headers.declared_pixels(data),
        tf.constant(headers.MAX_PIXELS, tf.int64),
        message=headers.HUGE_MESSAGE)


# For callers that decode images one at a time, eagerly (an export's
# warm-up images): the header checks run op by op otherwise, about 20 ms
# an image (1,000 warm-up images: 20 s); traced once, each call is one
# function call.
decode_one = tf.function(decode_image, autograph=False,
                         input_signature=[tf.TensorSpec([], tf.string)])
