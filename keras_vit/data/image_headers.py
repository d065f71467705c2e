"""What an image file's header declares, read before it is decoded (graph
ops on the encoded bytes, so training pipelines and the export signatures
check the same way): whether it is one of the five formats read
(`is_known_format`, by its first bytes), the pixels it declares
(`declared_pixels`, bounded by `MAX_PIXELS`: a few kilobytes of
compressed zeros may declare billions; for a GIF, whose every frame
TensorFlow reads, also its frames' pixels together, from a walk over its
blocks), and whether it is a BMP with a colour table (`is_palette_bmp`),
whose colours TensorFlow's decoder does not read."""

from __future__ import annotations

import tensorflow as tf

# The most pixels (width x height, as the file's header declares them) an
# image may have: 2**27, some 134 million (a 108-megapixel photo passes).
# A decoded image takes its bytes (3 a pixel for RGB, and the RGB copy of
# a grey or RGBA one; it is resized as bytes, with no float32 copy): a few
# kilobytes of compressed zeros may declare billions of pixels, which are
# refused before they are decoded.
MAX_PIXELS = 1 << 27
# Sub-blocks a GIF walk steps over per loop iteration (branch-free): the
# loop's own cost per iteration dominates, and most sub-blocks are data.
_GIF_HOPS = 8
# The most loop iterations a GIF walk takes (a block, or up to _GIF_HOPS
# sub-blocks of 255 bytes, each): some 16,000 frames, or 30 MB of image
# data; a GIF that needs more is refused unread, as UNCHECKED pixels.
GIF_STEPS = 1 << 14
UNCHECKED = 1 << 62
PALETTE_BMP_MESSAGE = (
    "A BMP with a colour table (8 bits per pixel or fewer), or of 16 bits "
    "per pixel: the BMP decoder of TensorFlow reads the first's colour "
    "indices, not its colours, and refuses the second. Save the image as "
    "PNG or JPEG, or as a 24-bit BMP.")
ANIMATED_WEBP_MESSAGE = (
    "An animated WebP: TensorFlow's decoder cannot read one (it corrupts "
    "the process's memory), so it is refused unread. Save its first frame "
    "as PNG, JPEG or a still WebP.")
HUGE_MESSAGE = (
    f"The header of the image file declares more than {MAX_PIXELS:,} pixels "
    "(width x height; an animated GIF, every frame of which is read, more "
    "than 16 times that across its frames), or it is a GIF of more than "
    f"{GIF_STEPS:,} blocks: it is refused before decoding, which would take "
    "3 bytes a pixel or more in memory. Resize it first (or keep one frame "
    "of an animation).")
_HEAD_BYTES = 32
# The formats that are read, by their first bytes: ((offset, magic), ...)
# each. TensorFlow's decode_image also reads JPEG XL, whose size no check
# here reads (a few kilobytes may declare any number of pixels), so every
# other format is refused by these bytes before any decoder sees the file.
FORMATS = "JPEG, PNG, GIF, BMP or WebP"
SIGNATURES = (
    ("JPEG", ((0, b"\xff\xd8\xff"),)),
    ("PNG", ((0, b"\x89PNG"),)),
    ("GIF", ((0, b"GIF8"),)),
    ("BMP", ((0, b"BM"),)),
    ("WebP", ((0, b"RIFF"), (8, b"WEBP"))),
)
UNKNOWN_FORMAT_MESSAGE = (
    f"Unknown image file format. One of {FORMATS} required (told by the "
    "first bytes of the file; JPEG XL, TIFF, HEIC and other formats are "
    "refused unread): save the image as PNG or JPEG.")


def _head(data: tf.Tensor) -> tf.Tensor:
    """The first _HEAD_BYTES bytes of `data`, zero-padded."""
    return tf.strings.substr(tf.strings.join([
        tf.strings.substr(data, 0, _HEAD_BYTES), "\0" * _HEAD_BYTES]), 0,
        _HEAD_BYTES)


def is_format(data: tf.Tensor, magics) -> tf.Tensor:
    """bool, of `data`'s shape (a string or a batch of them): the bytes
    start as `magics` ((offset, magic), ... of SIGNATURES) say; a string
    too short for them does not."""
    head = _head(data)
    return tf.reduce_all(tf.stack([
        tf.equal(tf.strings.substr(head, offset, len(magic)), magic)
        for offset, magic in magics]), axis=0)


def is_known_format(data: tf.Tensor) -> tf.Tensor:
    """bool, of `data`'s shape: one of the SIGNATURES' formats."""
    return tf.reduce_any(tf.stack([
        is_format(data, magics) for _, magics in SIGNATURES]), axis=0)


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
    indices into its colour table (TensorFlow's decoder returns the
    indices as grey levels: a nearly black image, silently), or of 16
    bits per pixel (5-bit colours, which it refuses as 2 channels)."""
    head = _head(data)
    bits = _number(head, 28, 2)
    return tf.logical_and(
        tf.equal(tf.strings.substr(head, 0, 2), "BM"),
        tf.logical_or(tf.less_equal(bits, 8), tf.equal(bits, 16)))


def is_animated_webp(data: tf.Tensor) -> tf.Tensor:
    """bool: `data` is a WebP whose extended header (VP8X) sets the
    animation flag; TensorFlow's WebP decoder corrupts memory on one
    (TensorFlow 2.21), so it must never reach it."""
    head = _head(data)
    extended = tf.reduce_all(tf.stack([
        tf.equal(tf.strings.substr(head, 0, 4), b"RIFF"),
        tf.equal(tf.strings.substr(head, 8, 8), b"WEBPVP8X")]))
    flags = _number(head, 20, 1)
    return tf.logical_and(extended, tf.bitwise.bitwise_and(flags, 2) > 0)


def declared_pixels(data: tf.Tensor) -> tf.Tensor:
    """int64: width x height as the header of a PNG, GIF, BMP, WebP or
    JPEG file declares them (0 for anything else; a corrupt JPEG fails as
    decoding it would)."""
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
    pixels = tf.cond(
        magic(0, b"\xff\xd8\xff"),
        lambda: tf.reduce_prod(tf.cast(
            tf.image.extract_jpeg_shape(data)[:2], tf.int64)),
        lambda: tf.constant(0, tf.int64))
    for match, value in cases:
        pixels = tf.where(match, value, pixels)
    return tf.cond(magic(0, b"GIF8"), lambda: gif_pixels(data),
                   lambda: pixels)


# `declared_pixels` traced once, for callers that count one image at a
# time, eagerly (a request's pixel budget): op by op it takes about 20 ms
# an image.
declared_pixels_of_one = tf.function(
    declared_pixels, autograph=False,
    input_signature=[tf.TensorSpec([], tf.string)])

@tf.function(input_signature=[tf.TensorSpec([], tf.string)])
def gif_pixels(data: tf.Tensor) -> tf.Tensor:
    """int64: the pixels a GIF declares, as TensorFlow's decoder takes
    them when one frame is kept: that frame at the largest frame width
    and the largest height, after every frame is read at one byte a pixel
    of its own size; so the larger of those width x height and a
    sixteenth of the frames' pixels together (read at a byte a pixel, the
    frames may take 16 x MAX_PIXELS bytes, 2 GiB; the logical screen's
    size is not used). The walk
    over the file's blocks stops once MAX_PIXELS is passed; a file of more
    than GIF_STEPS steps (a block, or _GIF_HOPS sub-blocks) is not walked
    to its end and counts as UNCHECKED.

    The layout, read as giflib reads it: a 13-byte header whose byte 10
    flags a global colour table; then blocks until the trailer: an
    extension (0x21, label) or an image (0x2C, 9 bytes: left, top, width,
    height, flags of a local colour table; then the LZW code size), each
    followed by sub-blocks (a length byte, that many bytes) ended by a
    zero length. An extension whose first length is zero is read on to
    the next zero, as giflib reads it."""
    i64 = tf.int64
    octets = tf.io.decode_raw(data, tf.uint8)  # one byte a byte: no copy
    size = tf.size(octets, out_type=i64)

    def byte(at):
        inside = tf.gather(octets, tf.clip_by_value(at, 0, size - 1))
        return tf.where(at < size, tf.cast(inside, i64), 0)

    def word(at):
        return byte(at) + 256 * byte(at + 1)

    def table(flags):  # the bytes of the colour table `flags` declares
        return tf.where(flags >= 128, 3 * tf.bitwise.left_shift(
            tf.constant(2, i64), flags & 7), 0)

    def declared(width, height, together):
        return tf.maximum(width * height, (together + 15) // 16)

    def step(at, sub, widest, tallest, together):
        for _ in range(_GIF_HOPS):  # inside sub-blocks: hop, or leave
            length = byte(at)
            at = tf.where(sub, at + 1 + length, at)
            sub = tf.logical_and(sub, length > 0)
        kind = byte(at)  # then at a block, or still in sub-blocks
        image = tf.logical_and(tf.logical_not(sub), tf.equal(kind, 0x2C))
        extension = tf.logical_and(tf.logical_not(sub), tf.equal(kind, 0x21))
        ended = tf.logical_not(tf.reduce_any([sub, image, extension]))
        width, height = word(at + 5), word(at + 7)
        widest = tf.where(image, tf.maximum(widest, width), widest)
        tallest = tf.where(image, tf.maximum(tallest, height), tallest)
        together += tf.where(image, width * height, 0)
        empty = tf.cast(tf.equal(byte(at + 2), 0), i64)
        at = tf.where(extension, at + 2 + empty, tf.where(
            image, at + 11 + table(byte(at + 9)), tf.where(ended, size, at)))
        return at, tf.logical_not(ended), widest, tallest, together

    zero = tf.constant(0, i64)
    at, _, widest, tallest, together = tf.while_loop(
        lambda at, sub, widest, tallest, together: tf.logical_and(
            at < size, declared(widest, tallest, together) <= MAX_PIXELS),
        step, (13 + table(byte(tf.constant(10, i64))), tf.constant(False),
               zero, zero, zero), maximum_iterations=GIF_STEPS)
    pixels = declared(widest, tallest, together)
    unfinished = tf.logical_and(at < size, pixels <= MAX_PIXELS)
    return tf.where(unfinished, tf.constant(UNCHECKED, i64), pixels)
