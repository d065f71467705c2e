"""The serving graph of an exported ViT: signatures, preprocessing, float32.

Three endpoints (and an optional fourth), all preprocessing inside the
graph exactly as evaluation does (`keras_vit.data.preprocessing`'s
`decode_image` + `preprocess_eval`), so a client sends images as they are:

- `serving_default(image_bytes)`: encoded JPEG / PNG / GIF / BMP / WebP
  bytes
  (DT_STRING, shape [batch]) -> probabilities, top-k classes, scores and
  class names.
- `predict_images(images)`: float32 pixels in [0, 255], shape
  [batch, height, width, 3], any height and width -> the same outputs.
- `features(image_bytes)`: encoded bytes -> the pre-logits representation.
- `predict_any_size(images)`, on request (`any_size`), for a model with a
  dynamic image size: float32 pixels in [0, 255] of any height and width
  that are multiples of the model's stride -> the same outputs, the model
  run at that size (scaled, not resized).

`keras_vit.export.saved_model` writes these to disk; this module only
builds them.
"""

from __future__ import annotations

from typing import Optional, Sequence

import keras
import tensorflow as tf

from keras_vit.data import preprocessing
from keras_vit.derived import features_model, input_image_size, model_stride
from keras_vit.errors import UsageError
from keras_vit.export import request_checks
from keras_vit.export.servable import Servable
from keras_vit.model import VisionTransformer, architecture_of
from keras_vit.scoring import scores as vit_scores

SIGNATURES = ("serving_default", "predict_images", "features")
ANY_SIZE_SIGNATURE = "predict_any_size"
# predict_any_size takes at most this many times the patches of the size
# the model was exported at.
ANY_SIZE_TOKENS = 4

_BASE64_PREFIX = request_checks._BASE64_PREFIX
_SNIFF_BYTES = request_checks._SNIFF_BYTES
EMPTY_MESSAGE = request_checks.EMPTY_MESSAGE
BASE64_MESSAGE = request_checks.BASE64_MESSAGE
PIXEL_RANGE_MESSAGE = "predict_images " + request_checks.PIXEL_RANGE_MESSAGE


def is_float32_model(model: keras.Model) -> bool:
    """bool. Whether every layer of `model` computes and stores float32."""
    for layer in _all_layers(model):
        policy = getattr(layer, "dtype_policy", None)
        if policy is not None and (
            policy.compute_dtype != "float32"
            or policy.variable_dtype != "float32"
        ):
            return False
    return all(v.dtype == "float32" for v in model.weights)


def _all_layers(model: keras.Model):
    flatten = getattr(model, "_flatten_layers", None)
    if flatten is not None:
        return list(flatten(include_self=True, recursive=True))
    return [model, *model.layers]


def _has_distributed_variables(model: keras.Model) -> bool:
    for weight in model.weights:
        value = getattr(weight, "value", weight)
        if isinstance(value, tf.distribute.DistributedValues):
            return True
    return False


def float32_inference_model(model: keras.Model) -> keras.Model:
    """A float32 copy of `model` for serving, or `model` itself if it is one.

    A model trained under a mixed policy (e.g. "mixed_bfloat16") keeps
    float32 variables but computes in bfloat16; served as is, its answers
    would differ from float32 evaluation by ~1e-2. The copy is rebuilt layer
    by layer with the "float32" policy (including sublayers created in
    `build()`, which take the global policy) and given the same weights.
    Models whose variables live on several replicas (trained under a
    `tf.distribute` strategy) are copied too, so the export holds plain
    variables.

    Args:
        model: keras.Model. A built model.

    Returns:
        keras.Model. A float32 model with the same weights.
    """
    if not model.built:
        raise UsageError(
            "The model is not built: call it once or build it with an input "
            "shape before exporting."
        )
    if is_float32_model(model) and not _has_distributed_variables(model):
        return model

    def clone_layer(layer):
        config = layer.get_config()
        if "dtype" in config:
            config["dtype"] = "float32"
        return layer.__class__.from_config(config)

    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        if isinstance(model, VisionTransformer):
            # Built again from its description, under the float32 policy.
            clone = VisionTransformer(model.architecture, name=model.name)
        elif isinstance(model, keras.Sequential) or _is_functional(model):
            clone = keras.models.clone_model(
                model, clone_function=clone_layer
            )
        else:
            config = model.get_config()
            config["dtype"] = "float32"
            clone = model.__class__.from_config(config)
        # Sublayers build lazily: build with the model's input shape while
        # the float32 policy is still global.
        if not clone.built:
            clone.build(model.input_shape)
    finally:
        keras.config.set_dtype_policy(previous)
    # get_weights reads a mirrored variable through its primary replica.
    weights = [w.astype("float32") for w in model.get_weights()]
    if len(weights) != len(clone.weights):
        raise UsageError(
            f"Could not rebuild {model.name!r} in float32: the copy has "
            f"{len(clone.weights)} weights, the model {len(weights)}. Export "
            "a model built under the float32 dtype policy instead."
        )
    for variable, value in zip(clone.weights, weights):
        variable.assign(value)
    if not is_float32_model(clone):
        raise UsageError(
            f"Could not rebuild {model.name!r} in float32 (a layer keeps a "
            "non-float32 policy). Export a model built under the float32 "
            "dtype policy instead."
        )
    return clone


def _is_functional(model: keras.Model) -> bool:
    return type(model).__name__ == "Functional" or (
        hasattr(model, "_nodes_by_depth") and hasattr(model, "_operations")
    )


def decode_checked(data: tf.Tensor) -> tf.Tensor:
    """Decodes one encoded image with errors that name the problem.

    The empty-string and base64-text checks run before the decoder (by
    control dependency), so they, not a generic decoder error, report those
    two common client mistakes. A format other than the five is refused
    by its first bytes ("Unknown image file format", before any decoder
    runs); truncated or corrupt files raise the decoder's
    `InvalidArgumentError` ("Invalid JPEG data", "Invalid PNG data", ...).

    Args:
        data: tf.Tensor. A scalar DT_STRING of encoded image bytes.

    Returns:
        tf.Tensor. uint8 RGB image (height, width, 3).
    """
    not_empty = tf.debugging.assert_greater(
        tf.strings.length(data), 0, message=EMPTY_MESSAGE
    )
    prefix = tf.strings.substr(data, 0, _SNIFF_BYTES)
    looks_base64 = tf.strings.regex_full_match(prefix, _BASE64_PREFIX)
    not_base64 = tf.debugging.Assert(
        tf.logical_not(looks_base64), [BASE64_MESSAGE]
    )
    with tf.control_dependencies([not_empty, not_base64]):
        data = tf.identity(data)
    return preprocessing.decode_image(data)


def _check_bytes(image_bytes):
    # A scalar or nested list instead of a [batch] vector fails here, with
    # the expected shape in the message.
    return tf.ensure_shape(image_bytes, [None], name="check_image_bytes_shape")


def build_endpoints(
    model: keras.Model,
    class_names: Sequence[str],
    top_k: int,
    resize_size: Optional[preprocessing.Size] = None,
    any_size: bool = False,
    keep_aspect: bool = False,
    scores: str = vit_scores.SOFTMAX,
) -> Servable:
    """A `Servable` with the three serving endpoints, ready to write.

    Args:
        model: keras.Model. A float32 classifier taking (batch, H, W, 3)
            images in [-1, 1] and returning logits (batch, K).
        class_names: sequence of str. K names, one per class.
        top_k: int. Number of top classes returned (<= K).
        resize_size: int, (height, width) or None. As in
            `preprocess_eval`: resize to this, then central-crop to the
            model's input size; None resizes straight to the input size.
        any_size: bool. Also register `predict_any_size`; the model must
            have a dynamic image size. The other endpoints resize to the
            size its position embeddings were made for.
        keep_aspect: bool. `resize_size` is the shorter side's length,
            the aspect ratio kept; without `resize_size`, the central crop
            of the input's aspect ratio is resized (`preprocess_eval`).
        scores: str. "softmax" or "sigmoid": how `probabilities` scores
            the logits (`keras_vit.scoring.scores`).

    Returns:
        Servable. Endpoints `serving_default`, `predict_images` and
        `features` (and `predict_any_size`).
    """
    size = input_image_size(model)
    _check_endpoint_arguments(model, class_names, top_k, any_size)
    forward = _forward(model, (None, None) if any_size else size)
    classify = _classifier(forward, class_names, top_k, scores)
    preprocess, images_from_bytes = _image_readers(size, resize_size,
                                                   keep_aspect)

    def serving_default(image_bytes):
        """Encoded images (JPEG, PNG, GIF, BMP or WebP) -> top-k."""
        return classify(images_from_bytes(image_bytes))

    def predict_images(images):
        """float32 RGB pixels in [0, 255] (not [0, 1], not [-1, 1])."""
        images = tf.map_fn(
            preprocess,
            request_checks.checked_pixels(images, "predict_images"),
            fn_output_signature=tf.TensorSpec(size + (3,), tf.float32),
            name="preprocess",
        )
        return classify(images)

    def features_fn(image_bytes):
        images = images_from_bytes(image_bytes)
        _, embedding = forward(images)
        return {"features": embedding}

    endpoints = {
        "serving_default": serving_default,
        "predict_images": predict_images,
        "features": features_fn,
    }
    if any_size:
        endpoints[ANY_SIZE_SIGNATURE] = _any_size_endpoint(model, classify)
    return Servable(model, endpoints, on_bytes=("serving_default",
                                                "features"))


def _check_endpoint_arguments(model, class_names, top_k, any_size) -> None:
    """Raises a UsageError unless `build_endpoints` can serve `model` so."""
    if any_size and model.input_shape[1:3] != (None, None):
        raise UsageError(
            "any_size needs a model with a dynamic image size: create it "
            "with dynamic_image_size=True or convert it with "
            "keras_vit.with_dynamic_image_size."
        )
    num_classes = int(model.output_shape[-1])
    if len(class_names) != num_classes or not 1 <= top_k <= num_classes:
        raise UsageError(
            f"Need {num_classes} class names and 1 <= top_k <= "
            f"{num_classes}; got {len(class_names)} names, top_k={top_k}."
        )


def _forward(model: keras.Model, image_size):
    """tf.function. Images of `image_size` (or any size: (None, None)) ->
    float32 (logits, pre-logits features)."""
    # One network with both outputs (features feed the head anyway), traced
    # once and called by all the endpoints: tracing a deep model is most
    # of the export time.
    both = keras.Model(
        model.input, [model.output, features_model(model).output]
    )

    @tf.function(
        input_signature=[
            tf.TensorSpec((None,) + tuple(image_size) + (3,), tf.float32)
        ],
        autograph=False,
    )
    def forward(images):
        logits, embedding = both(images, training=False)
        return tf.cast(logits, tf.float32), tf.cast(embedding, tf.float32)

    return forward


def _classifier(forward, class_names: Sequence[str], top_k: int,
                scores: str):
    """Images in [-1, 1] -> the classification outputs of every endpoint:
    probabilities (`scores`: softmax or sigmoid), the top-k classes, their
    scores and names."""
    names = tf.constant(list(class_names), dtype=tf.string)

    def classify(images):
        logits, _ = forward(images)
        probabilities = vit_scores.probabilities(logits, scores)
        best, classes = tf.math.top_k(probabilities, k=top_k)
        return {
            "probabilities": probabilities,
            "classes": classes,
            "scores": best,
            "class_names": tf.gather(names, classes),
        }

    return classify


def _image_readers(size, resize_size, keep_aspect):
    """(preprocess, images_from_bytes): one image's evaluation
    preprocessing to the model's `size`, and a batch of encoded images
    decoded and preprocessed."""
    image_spec = tf.TensorSpec(size + (3,), tf.float32)

    def preprocess(image):
        return preprocessing.preprocess_eval(image, size, resize_size,
                                             keep_aspect)

    def images_from_bytes(image_bytes):
        return request_checks.decoded(
            _check_bytes(image_bytes),
            lambda data: preprocess(decode_checked(data)), image_spec,
            # What the resize refuses of an image that decodes.
            preprocessing.ELONGATED_MESSAGE if keep_aspect
            and resize_size is not None else None)

    return preprocess, images_from_bytes


def _any_size_endpoint(model: keras.Model, classify):
    """The `predict_any_size` endpoint: pixels whose sides are multiples of
    the model's stride, run at their own size, of at most
    ANY_SIZE_TOKENS times the patches of the model's own size (attention
    grows with their square: one request of a huge declared shape would
    hold the server's memory)."""
    stride = model_stride(model)
    height, width = architecture_of(model).image_size
    limit = ANY_SIZE_TOKENS * (height // stride) * (width // stride)

    def predict_any_size(images):
        images = request_checks.checked_pixels(images, ANY_SIZE_SIGNATURE)
        # int64: a declared shape whose patches overflow int32 (an empty
        # batch carries none of its pixels) would wrap below the limit.
        sides = tf.shape(images, out_type=tf.int64)[1:3]
        divisible = tf.debugging.assert_equal(
            sides % stride, tf.constant(0, tf.int64),
            message=f"predict_any_size needs a height and width that are "
            f"multiples of {stride} (the model's stride): resize, crop or "
            "pad the images, or send them to predict_images.",
        )
        bounded = tf.debugging.assert_less_equal(
            (sides[0] // stride) * (sides[1] // stride),
            tf.constant(limit, tf.int64),
            message=f"predict_any_size runs images of at most {limit:,} "
            f"patches of {stride} ({ANY_SIZE_TOKENS} times those of the "
            f"exported {height} x {width}): send smaller images, or send "
            "them to predict_images.",
        )
        with tf.control_dependencies([divisible, bounded]):
            # No resize: the model runs at the images' own size.
            images = preprocessing.scale_to_unit_range(images)
        return classify(images)

    return predict_any_size
