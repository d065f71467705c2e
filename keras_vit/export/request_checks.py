"""Checks on a serving request's inputs whose errors name the fix, and the
image in a batch that caused them.

TF Serving answers a failed request with the op's message only. A decoder
error inside the per-image loop of a batch does not say which image it
was, so every image of the batch is checked (empty, base64 text) and
decoded in a tf.data pass that skips failures and records which images
came through; where one did not, the first is named by its index and what
its header says: "image_bytes[3]: Invalid JPEG data ...". Each image is
decoded once. A single image is decoded as it is, since its index is 0
and the decoder's own message follows.

What a request may cost is bounded before anything is decoded: each image
by the pixels its header declares (`image_headers.MAX_PIXELS`, in
`decode_image`), a batch by the pixels its images declare together
(`MAX_REQUEST_PIXELS`), and the images of a batch are decoded
`DECODE_PARALLEL` at a time, however many cores the server has.

Pixel inputs are checked for their range, including the usual mistake of
sending images scaled to [0, 1] (or [-1, 1]) instead of [0, 255].
"""

from __future__ import annotations

from typing import List, Optional, Sequence

import tensorflow as tf

from keras_vit.data import image_headers
from keras_vit.data.decoding import as_written, decode_image

FORMATS = image_headers.FORMATS
# Images of one request decoded at a time: a fixed few, not one per core
# (tf.data's AUTOTUNE), so that a request's peak memory is that of a few
# decoded images on any server, however many requests run side by side.
DECODE_PARALLEL = 4
# The most pixels the images of one request may declare together (width x
# height, from their headers, summed before any is decoded): four images
# at the limit of one. It bounds the decoding one request asks for; a
# request over it is refused whole (an image over the limit of one is
# refused by its own index instead, and not counted here).
MAX_REQUEST_PIXELS = 4 * image_headers.MAX_PIXELS
# A prefix made only of these characters is base64 text, not an image: the
# usual mistake of a gRPC client (or a REST client that forgot {"b64": ...})
# sending the base64 string itself. Real image formats start with bytes
# outside this set within their first few bytes.
_BASE64_PREFIX = r"[A-Za-z0-9+/=\r\n]+"
_SNIFF_BYTES = 64

EMPTY_MESSAGE = (
    "Empty image: image_bytes holds a zero-length string. Send the encoded "
    f"image file ({FORMATS})."
)
BASE64_MESSAGE = (
    "image_bytes looks like base64 text, not an encoded image. Send the raw "
    'file bytes; over REST wrap the base64 string as {"b64": "..."} so the '
    "server decodes it."
)
UNKNOWN_MESSAGE = (
    f"Unknown image file format: send {FORMATS} (told by the first bytes of "
    "the file; JPEG XL, TIFF, HEIC and other formats are refused unread).")
REQUEST_PIXELS_MESSAGE = (
    "pixels together (width x height, from their headers), more than "
    f"{MAX_REQUEST_PIXELS:,}: the request is refused before decoding. Send "
    "fewer images a request, or smaller ones.")
PIXEL_RANGE_MESSAGE = (
    "expects pixel values in [0, 255] (RGB, float32); got values outside "
    "that range. Do not normalise the pixels: the graph scales them itself."
)
UNIT_RANGE_MESSAGE = (
    "got pixels that all lie in [0, 1] with fractions: images scaled to "
    "[0, 1]. Send the unscaled pixels in [0, 255] (multiply by 255); the "
    "graph scales them to the model's [-1, 1] itself."
)
# ((offset, magic bytes), ...), what a failed decode of such a file means
_SIGNATURES = tuple(
    (magics, f"Invalid {name} data: a truncated or corrupt {name}")
    for name, magics in image_headers.SIGNATURES)


def _first(bad: tf.Tensor) -> tf.Tensor:
    """The first index where `bad` holds (0 where none does, an empty
    batch included: argmax has no answer for one)."""
    flags = tf.concat([tf.cast(bad, tf.int32), [0]], 0)
    return tf.argmax(flags, output_type=tf.int32)


def _assert_none(bad: tf.Tensor, message) -> tf.Operation:
    """Fails naming the first index where `bad` holds, with `message`
    (a str, or a [batch] string tensor of per-image messages)."""
    index = _first(bad)
    if not isinstance(message, str):
        message = tf.gather(tf.concat([message, [""]], 0), index)
    text = tf.strings.join(
        [tf.strings.format("image_bytes[{}]: ", index), message]
    )
    return tf.debugging.Assert(tf.logical_not(tf.reduce_any(bad)), [text])


def _where_it_runs(image_bytes: tf.Tensor, fn, spec: tf.TensorSpec):
    """(indices, values): `fn` (one image's bytes -> a tensor of `spec`)
    of each image it runs on without an error, in order, in a tf.data
    pass that skips the failures, and the indices of those images."""
    count = tf.shape(image_bytes)[0]
    ds = tf.data.Dataset.from_tensor_slices((tf.range(count), image_bytes))
    ds = ds.map(as_written(lambda i, data: (i, fn(data))),
                num_parallel_calls=DECODE_PARALLEL,
                deterministic=True).ignore_errors()
    # A last element that is always there: one batch of everything.
    ds = ds.concatenate(tf.data.Dataset.from_tensors(
        (tf.constant(-1), tf.zeros(spec.shape, spec.dtype))))
    indices, values = ds.batch(
        tf.cast(count, tf.int64) + 1).get_single_element()
    return indices[:-1], values[:-1]


def _within_budget(image_bytes: tf.Tensor) -> tf.Operation:
    """Fails unless the images declare MAX_REQUEST_PIXELS or fewer
    together: those within the limit of one image (the others fail by
    their index), each read from its header (one whose header does not
    read counts 0: it fails to decode, by its index)."""
    _, declared = _where_it_runs(
        image_bytes, image_headers.declared_pixels, tf.TensorSpec([], tf.int64))
    counted = tf.where(declared <= image_headers.MAX_PIXELS, declared, 0)
    total = tf.reduce_sum(counted)
    return tf.debugging.Assert(total <= MAX_REQUEST_PIXELS, [
        tf.strings.join([tf.strings.format(
            "image_bytes: the {} images of this request declare {} ",
            (tf.shape(image_bytes)[0], total)), REQUEST_PIXELS_MESSAGE])])


def _decoded_all(image_bytes: tf.Tensor, decode, spec: tf.TensorSpec):
    """(images, ok): `decode` of each image that decodes, in order (every
    image where all do), and bool [batch]: which did; once the images are
    within MAX_REQUEST_PIXELS together."""
    with tf.control_dependencies([_within_budget(image_bytes)]):
        image_bytes = tf.identity(image_bytes)
    indices, images = _where_it_runs(image_bytes, decode, spec)
    ok = tf.scatter_nd(indices[:, None], tf.ones_like(indices),
                       tf.shape(image_bytes)[:1]) > 0
    return images, ok


def _failure_reasons(image_bytes: tf.Tensor,
                     refused: Optional[str] = None) -> tf.Tensor:
    """[batch] strings: what a decode failure means, by the file's magic;
    `refused`, for an image that decodes, what the preprocessing after
    the decoder refuses (an image too elongated to keep its aspect)."""
    # Byte comparisons, not regexes: TensorFlow's regexes read UTF-8.
    reasons = tf.fill(tf.shape(image_bytes), UNKNOWN_MESSAGE)
    for magics, reason in _SIGNATURES:
        reasons = tf.where(image_headers.is_format(image_bytes, magics),
                           reason, reasons)
    # What the header says, where the decoder's own words are lost: a
    # palette BMP, and more pixels than are decoded (0 where the header
    # does not read: a JPEG's is read by its decoder's parser).
    indices, read = _where_it_runs(image_bytes, lambda data: tf.stack([
        tf.cast(image_headers.is_palette_bmp(data), tf.int64),
        image_headers.declared_pixels(data),
        tf.cast(image_headers.is_animated_webp(data), tf.int64)]),
        tf.TensorSpec([3], tf.int64))
    header = tf.scatter_nd(indices[:, None], read,
                           [tf.shape(image_bytes)[0], 3])
    reasons = tf.where(header[:, 0] > 0, image_headers.PALETTE_BMP_MESSAGE,
                       reasons)
    reasons = tf.where(header[:, 2] > 0,
                       image_headers.ANIMATED_WEBP_MESSAGE, reasons)
    reasons = tf.where(header[:, 1] > image_headers.MAX_PIXELS,
                       image_headers.HUGE_MESSAGE, reasons)
    if refused is None:
        return reasons
    # Only in a failed request: which images decode whole (what fails
    # after the decoder, in `decode`, is what `refused` says).
    decodes, _ = _where_it_runs(
        image_bytes, lambda data: tf.size(decode_image(data)) > 0,
        tf.TensorSpec([], tf.bool))
    whole = tf.scatter_nd(decodes[:, None], tf.ones_like(decodes),
                          tf.shape(image_bytes)[:1]) > 0
    return tf.where(whole, refused, reasons)


def decoded(image_bytes: tf.Tensor, decode, spec: tf.TensorSpec,
            refused: Optional[str] = None) -> tf.Tensor:
    """`decode` (one image's bytes -> a tensor of `spec`) of each of
    `image_bytes` ([batch] strings), stacked, once every image is known to
    be non-empty, not base64 text and (for batches of more than one)
    decodable; otherwise an InvalidArgumentError naming the first bad
    image's index and the problem (`refused`: what `decode` refuses of an
    image the decoder reads)."""
    lengths = tf.strings.length(image_bytes)
    empty = tf.equal(lengths, 0)
    prefix = tf.strings.substr(image_bytes, 0, _SNIFF_BYTES)
    base64 = tf.logical_and(
        tf.strings.regex_full_match(prefix, _BASE64_PREFIX),
        tf.logical_not(empty),
    )
    first = [_assert_none(empty, EMPTY_MESSAGE),
             _assert_none(base64, BASE64_MESSAGE)]
    with tf.control_dependencies(first):
        count = tf.shape(image_bytes)[0]
        images, ok = tf.cond(
            count > 1,
            lambda: _decoded_all(image_bytes, decode, spec),
            lambda: (tf.map_fn(decode, image_bytes, fn_output_signature=spec),
                     tf.ones([count], tf.bool)),
        )
        # The reasons are read only where an image failed: not on every
        # request.
        failed = tf.logical_not(ok)
        reasons = tf.cond(
            tf.reduce_any(failed),
            lambda: _failure_reasons(image_bytes, refused),
            lambda: tf.fill(tf.shape(image_bytes), ""),
        )
        decodes = _assert_none(failed, reasons)
    with tf.control_dependencies([decodes]):
        return tf.identity(images)


def checked_pixels(images: tf.Tensor, signature: str) -> tf.Tensor:
    """`images` once they are [batch, H, W, 3] float32 pixels in [0, 255]
    with H, W >= 1, and not evidently scaled to [0, 1]: every value in
    [0, 1] and some value fractional (a real [0, 255] image that dark is
    integer-valued; an all-black one passes)."""
    # The declared shape is not enforced when a server feeds the graph:
    # check it first, so a wrong rank fails here with a clear message.
    images = tf.ensure_shape(
        images, [None, None, None, 3], name="check_images_shape"
    )
    shape = tf.shape(images)
    low, high = tf.reduce_min(images), tf.reduce_max(images)
    # Per image: one scaled image in a batch of [0, 255] ones is refused
    # too (the batch's range would hide it).
    axes = [1, 2, 3]
    fractional = tf.reduce_any(tf.not_equal(images, tf.round(images)),
                               axis=axes)
    unit_range = tf.logical_and(
        tf.reduce_max(images, axis=axes) <= 1.0,
        tf.logical_and(tf.reduce_min(images, axis=axes) >= 0.0, fractional))
    checks = [
        tf.debugging.assert_positive(
            shape[1:3],
            message=f"{signature} got an image with zero height or width; "
            "send images of shape [batch, height, width, 3] with height, "
            "width >= 1.",
        ),
        tf.debugging.assert_greater_equal(
            low, 0.0, message=f"{signature} {PIXEL_RANGE_MESSAGE}"
        ),
        tf.debugging.assert_less_equal(
            high, 255.0, message=f"{signature} {PIXEL_RANGE_MESSAGE}"
        ),
        tf.debugging.Assert(
            tf.logical_not(tf.reduce_any(unit_range)),
            [f"{signature} {UNIT_RANGE_MESSAGE} Images (by index in the "
             "batch):", tf.reshape(tf.where(unit_range), [-1])],
        ),
    ]
    with tf.control_dependencies(checks):
        return tf.identity(images)


def requests_within_budget(images: Sequence[bytes],
                           max_count: Optional[int] = None
                           ) -> List[List[bytes]]:
    """`images` cut into consecutive requests that each declare at most
    MAX_REQUEST_PIXELS together (and hold at most `max_count` images):
    what a client of the serving signatures sends, keras-vit-predict, the
    export's own check and its warm-up included. An image over the limit
    of one, or whose header cannot be read, counts nothing, as the
    signature counts it (it is refused by its own index)."""
    out: List[List[bytes]] = []
    current: List[bytes] = []
    total = 0
    for image in images:
        try:
            pixels = int(image_headers.declared_pixels_of_one(
                tf.constant(image)))
        except (tf.errors.OpError, ValueError):
            pixels = 0
        if pixels > image_headers.MAX_PIXELS:
            pixels = 0
        if current and (total + pixels > MAX_REQUEST_PIXELS or (
                max_count and len(current) >= max_count)):
            out.append(current)
            current, total = [], 0
        current.append(image)
        total += pixels
    if current:
        out.append(current)
    return out
