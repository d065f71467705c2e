"""What an image file's header declares, read before it is decoded (graph
ops on the encoded bytes, so training pipelines and the export signatures
check the same way): the pixels it declares (`declared_pixels`, bounded by
`MAX_PIXELS`: a few kilobytes of compressed zeros may declare billions),
and whether it is a BMP with a colour table (`is_palette_bmp`), whose
colours TensorFlow's decoder does not read."""

from __future__ import annotations

import tensorflow as tf

# The most pixels (width x height, as the file's header declares them) an
# image may have: 2**27, some 134 million (a 108-megapixel photo passes).
# Decoding costs about 16 bytes a pixel (the RGB bytes, then the float32
# copy that resizing makes): a few kilobytes of compressed zeros may
# declare billions of pixels, which are refused before they are decoded.
MAX_PIXELS = 1 << 27
PALETTE_BMP_MESSAGE = (
    "A BMP with a colour table (8 bits per pixel or fewer): the BMP decoder "
    "of TensorFlow reads its colour indices, not its colours. Save the "
    "image as PNG or JPEG, or as a 24-bit BMP.")
HUGE_MESSAGE = (
    f"The header of the image file declares more than {MAX_PIXELS:,} pixels "
    "(width x height): it is refused before decoding, which would take some "
    "16 bytes a pixel in memory. Resize it first.")
_HEAD_BYTES = 32


def _head(data: tf.Tensor) -> tf.Tensor:
    """The first _HEAD_BYTES bytes of `data`, zero-padded."""
    return tf.strings.substr(tf.strings.join([
        tf.strings.substr(data, 0, _HEAD_BYTES), "\0" * _HEAD_BYTES]), 0,
        _HEAD_BYTES)


def _number(head: tf.Tensor, offset: int, size: int,
            little_endian: bool = True) -> tf.Tensor:
    """The unsigned integer of the `size` bytes at `offset`, int64."""
    octets = tf.cast(tf.io.decode_raw(tf.strings.substr(head, offset, size),
                                      tf.uint8), tf.int64)
    shifts = [8 * i for i in range(size)]
    if not little_endian:
        shifts.reverse()
    return tf.reduce_sum(tf.bitwise.left_shift(
        octets, tf.constant(shifts, tf.int64)))


def is_palette_bmp(data: tf.Tensor) -> tf.Tensor:
    """bool: `data` is a BMP of 8 bits per pixel or fewer, which holds
    indices into its colour table; TensorFlow's decoder returns the
    indices as grey levels (a nearly black image, silently)."""
    head = _head(data)
    return tf.logical_and(tf.equal(tf.strings.substr(head, 0, 2), "BM"),
                          tf.less_equal(_number(head, 28, 2), 8))


def declared_pixels(data: tf.Tensor, jpeg: bool = True) -> tf.Tensor:
    """int64: width x height as the header of a PNG, GIF, BMP, WebP or
    (`jpeg`) JPEG file declares them (0 for anything else; a corrupt JPEG
    fails as decoding it would)."""
    head = _head(data)

    def magic(offset, value):
        return tf.equal(tf.strings.substr(head, offset, len(value)), value)

    def signed(offset):  # a BMP's int32 (a negative height: top-down rows)
        value = _number(head, offset, 4)
        return tf.abs(tf.where(value >= 1 << 31, value - (1 << 32), value))

    vp8l = _number(head, 21, 4)
    webp = tf.logical_and(magic(0, b"RIFF"), magic(8, b"WEBP"))
    cases = [
        (magic(0, b"\x89PNG"),
         _number(head, 16, 4, False) * _number(head, 20, 4, False)),
        (magic(0, b"GIF8"), _number(head, 6, 2) * _number(head, 8, 2)),
        (magic(0, b"BM"), signed(18) * signed(22)),
        (tf.logical_and(webp, magic(12, b"VP8X")),
         ((_number(head, 24, 4) & 0xFFFFFF) + 1)
         * ((_number(head, 27, 4) & 0xFFFFFF) + 1)),
        (tf.logical_and(webp, magic(12, b"VP8L")),
         ((vp8l & 0x3FFF) + 1)
         * ((tf.bitwise.right_shift(vp8l, 14) & 0x3FFF) + 1)),
        (tf.logical_and(webp, magic(12, b"VP8 ")),
         (_number(head, 26, 2) & 0x3FFF) * (_number(head, 28, 2) & 0x3FFF)),
    ]
    pixels = tf.constant(0, tf.int64) if not jpeg else tf.cond(
        magic(0, b"\xff\xd8\xff"),
        lambda: tf.reduce_prod(tf.cast(
            tf.image.extract_jpeg_shape(data)[:2], tf.int64)),
        lambda: tf.constant(0, tf.int64))
    for match, value in cases:
        pixels = tf.where(match, value, pixels)
    return pixels
