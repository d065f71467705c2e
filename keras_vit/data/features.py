"""What a TFDS data set's features must be for keras_vit to read them:
config.input's image_key and label_key name features of the data set,
the image is one `decoding.to_rgb` makes RGB of (8-bit, 1 to 4
channels), and the label a class label. All are checked from the
builder's DatasetInfo, before anything is downloaded or read."""

from __future__ import annotations

import numpy as np

from keras_vit.errors import UsageError


def check_feature_keys(inp, builder) -> None:
    """A UsageError where config.input's image_key or label_key is not a
    feature of the TFDS data set (imagenet2012_real's labels are
    original_label and real_label; eurosat/all's image is sentinel2)."""
    features = list(builder.info.features.keys())
    for field in ("image_key", "label_key"):
        if inp[field] not in features:
            raise UsageError(
                f"{inp.dataset} has no feature {inp[field]!r} (config.input."
                f"{field}); its features are {', '.join(features)}: set "
                f"config.input.{field} to the one that holds the "
                f"{field.split('_')[0]}.")
    if not inp.vtab_task:  # (a VTAB task's example_fn reads its own)
        _check_image_feature(inp, builder)
        _check_label_feature(inp, builder)


def _class_label(feature) -> bool:
    """One class per example: a ClassLabel's scalar (a Sequence of them,
    imagenet2012_real's real_label, forwards num_classes but holds a list
    of labels)."""
    return hasattr(feature, "num_classes") and tuple(
        getattr(feature, "shape", ()) or ()) == ()


def _check_label_feature(inp, builder) -> None:
    """A UsageError where config.input.label_key is no class label (a
    TFDS ClassLabel: one class per image, and a class count), naming the
    data set's class labels (before, a Text or multi-label feature was an
    AttributeError traceback)."""
    features = builder.info.features
    if _class_label(features[inp.label_key]):
        return
    labels = [k for k, f in features.items() if _class_label(f)]
    raise UsageError(
        f"config.input.label_key={inp.label_key!r} of {inp.dataset} is a "
        f"{type(features[inp.label_key]).__name__} feature, not a class "
        "label: keras_vit reads one class per image (a TFDS ClassLabel). "
        + (f"Set config.input.label_key to {' or '.join(map(repr, labels))}."
           if labels else f"{inp.dataset} has none."))


def _readable_image(feature) -> bool:
    """Whether a TFDS feature holds what `decoding.to_rgb` makes RGB of:
    uint8 (H, W) or (H, W, 1 to 4 channels), an Image or a plain tensor
    (float, 16-bit and multispectral ones have no [0, 255] RGB reading)."""
    shape = tuple(getattr(feature, "shape", ()) or ())
    return (getattr(feature, "np_dtype", None) == np.uint8
            and (len(shape) == 2 or (len(shape) == 3
                                     and shape[-1] in (None, 1, 2, 3, 4))))


def _check_image_feature(inp, builder) -> None:
    """A UsageError where config.input.image_key is no uint8 image
    (`_readable_image`), naming its type and the features that are
    (before, a multispectral one failed inside the input pipeline, and
    a float one was read as if in [0, 255])."""
    features = builder.info.features
    feature = features[inp.image_key]
    if _readable_image(feature):
        return
    images = [k for k, f in features.items() if _readable_image(f)]
    dtype = getattr(feature, "np_dtype", None)
    kind = (f"a {np.dtype(dtype).name if dtype is not None else ''} "
            f"{type(feature).__name__} of shape "
            f"{tuple(getattr(feature, 'shape', ()) or ())}")
    raise UsageError(
        f"config.input.image_key={inp.image_key!r} of {inp.dataset} is "
        f"{kind}, not an image keras_vit reads: it reads uint8 images of "
        "1 to 4 channels (grayscale, RGB, RGBA). "
        + (f"Set config.input.image_key to {' or '.join(map(repr, images))}."
           if images else f"{inp.dataset} has none: use a data set with "
           "RGB images (or such a configuration of this one, as "
           "eurosat/rgb is of eurosat/all)."))
