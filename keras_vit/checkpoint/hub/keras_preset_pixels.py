"""What a keras-hub ViT preset's image converter makes of a photo, read
the way keras-hub 0.32 reads it.

The converter is the one `ImageClassifier.from_preset` builds: the one
inside task.json's preprocessor when task.json is read (a task saved
without a preprocessor has none: it takes pixels as they come), else the
one inside preprocessor.json (a ViTImageClassifierPreprocessor), else
image_converter.json. Its fields, each with ImageConverter's default:

- `scale` and `offset` (a number, or one per channel; null: none), the
  affine map `pixels * scale + offset`, folded exactly into the patch
  embedding as a mean and std (`reader.fold_normalisation`); the legacy
  `mean` with `variance` as ImageConverter turns them into those;
- `image_size` (or `height` and `width`) with `crop_to_aspect_ratio`
  (true by default): the central crop of the model's aspect ratio,
  rounded as keras.layers.Resizing rounds it, then a bilinear resize
  without antialiasing to the model's input (`eval_keep_aspect` without
  `eval_resize`); without it (or with `pad_to_aspect_ratio`, which
  keras_vit does not do) the image is resized whole to the input. A
  filter other than bilinear, an antialiased resize or padding is said
  in one warning line.
"""

from __future__ import annotations

import math
import os
from typing import Any, Dict, Optional, Tuple

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.hub.processor import warn_once
from keras_vit.errors import UsageError

PREPROCESSOR_FILE = "preprocessor.json"
CONVERTER_FILE = "image_converter.json"
_CONVERTERS = ("ViTImageConverter", "ImageConverter")
_FIELDS = ("image_size", "scale", "offset", "crop_to_aspect_ratio",
           "pad_to_aspect_ratio", "interpolation", "antialias",
           "bounding_box_format", "data_format", "height", "width", "mean",
           "variance", "name", "trainable", "dtype")


def converter(folder: str, task: Optional[Dict[str, Any]]):
    """(the converter's config or None (no converter: pixels as they
    come), the file it is read from)."""
    if task is not None:
        where = os.path.join(folder, "task.json")
        pre = task.get("preprocessor")
        if pre is None:
            return None, where
        return _inner(pre, where), where
    path = os.path.join(folder, PREPROCESSOR_FILE)
    if os.path.isfile(path):
        pre = untrusted.read_json_object(
            untrusted.in_folder(folder, PREPROCESSOR_FILE, path))
        if pre.get("class_name") == "ViTImageClassifierPreprocessor":
            return _inner(pre, path), path
    path = os.path.join(folder, CONVERTER_FILE)
    if not os.path.isfile(path):
        raise UsageError(
            f"{folder} is a keras-hub preset without {CONVERTER_FILE} (or "
            f"{PREPROCESSOR_FILE}): the pixel scale its weights expect is "
            "unknown. Save the ViTImageConverter the model was trained with "
            "into it (converter.save_to_preset(folder)).")
    fields = untrusted.read_json_object(
        untrusted.in_folder(folder, CONVERTER_FILE, path))
    return _config(fields, path), path


def _inner(pre: Any, where: str) -> Optional[Dict[str, Any]]:
    """The converter of a task's preprocessor: the image converter of a
    ViTImageClassifierPreprocessor, or the converter itself (keras-hub
    takes any layer as a task's preprocessor)."""
    conv = pre.get("config") if isinstance(pre, dict) else None
    if not isinstance(conv, dict):
        raise UsageError(f"{where}: the preprocessor has no config.")
    if pre.get("class_name") in _CONVERTERS:
        return _config(pre, where)
    if pre.get("class_name") != "ViTImageClassifierPreprocessor":
        raise UsageError(
            f"{where}: the task's preprocessor is {pre.get('class_name')!r}"
            "; keras_vit reads a ViTImageClassifierPreprocessor or an "
            "image converter.")
    inner = conv.get("image_converter")
    return None if inner is None else _config(inner, where)


def _config(fields: Any, where: str) -> Dict[str, Any]:
    name = fields.get("class_name") if isinstance(fields, dict) else None
    if name not in _CONVERTERS or not isinstance(fields.get("config"), dict):
        raise UsageError(f"{where}: the image converter is {name!r}, not a "
                         "ViTImageConverter.")
    conv = fields["config"]
    unknown = sorted(set(conv) - set(_FIELDS))
    if unknown:
        raise UsageError(f"{where}: {unknown[0]!r} is no ImageConverter "
                         "argument keras_vit knows; it is not read.")
    # What ImageConverter's constructor refuses (it takes each pair whole).
    for one, other in (("mean", "variance"), ("height", "width")):
        if (one in conv) != (other in conv):
            given = one if one in conv else other
            raise UsageError(
                f"{where}: the image converter gives {given} without "
                f"{other if given == one else one}; keras-hub's "
                "ImageConverter refuses it (an unrecognised argument).")
    if "mean" in conv and not isinstance(conv.get("scale"),
                                           (int, float)):
        raise UsageError(
            f"{where}: the image converter's mean and variance need a "
            "single number as its scale; keras-hub's ImageConverter "
            f"fails on scale {conv.get('scale')!r}.")
    if conv.get("crop_to_aspect_ratio", True) and conv.get(
            "pad_to_aspect_ratio", False):
        raise UsageError(
            f"{where}: the image converter both crops and pads to the "
            "aspect ratio; keras-hub's ImageConverter refuses it.")
    return conv


def _channels(value, field: str, where: str) -> Tuple[float, ...]:
    items = [value] * 3 if isinstance(value, (int, float)) else value
    if (not isinstance(items, list) or len(items) != 3 or any(
            isinstance(v, bool) or not isinstance(v, (int, float))
            or not math.isfinite(v) for v in items)):
        raise UsageError(f"{where}: the image converter's {field} is "
                         f"{value!r}, not a finite number or three.")
    return tuple(float(v) for v in items)


def _affine(conv: Dict[str, Any], where: str):
    """(scale, offset) per channel, as ImageConverter computes them."""
    scale, offset = conv.get("scale"), conv.get("offset")
    if "variance" in conv and "mean" in conv:
        variance = _channels(conv["variance"], "variance", where)
        if any(v <= 0 for v in variance):
            raise UsageError(f"{where}: the image converter's variance "
                             f"{list(variance)} is not positive.")
        std = [math.sqrt(v) for v in variance]
        scale = [scale / s for s in std]
        offset = [-m / s for m, s in zip(
            _channels(conv["mean"], "mean", where), std)]
    scale = (1.0,) * 3 if scale is None else _channels(scale, "scale", where)
    offset = (0.0,) * 3 if offset is None else _channels(offset, "offset",
                                                         where)
    if any(s == 0 for s in scale):
        raise UsageError(f"{where}: the image converter's scale {scale} "
                         "has a zero: every pixel would be the same.")
    return scale, offset


def pixel_map(conv: Optional[Dict[str, Any]], where: str, image_size):
    """(mean, std, eval_resize, eval_keep_aspect) of the converter
    `conv` for a backbone of `image_size` ((height, width)): mean and
    std in terms of pixels / 255, so that (p / 255 - mean) / std is the
    converter's p * scale + offset."""
    if conv is None:
        return (0.0,) * 3, (1 / 255,) * 3, None, False
    scale, offset = _affine(conv, where)
    std = tuple(1.0 / (255.0 * s) for s in scale)
    mean = tuple(-o * d for o, d in zip(offset, std))
    size = conv.get("image_size")
    if "height" in conv and "width" in conv:
        size = [conv["height"], conv["width"]]
    if size is not None and list(size) != list(image_size):
        raise UsageError(
            f"{where}: the image converter resizes to {list(size)}, the "
            f"backbone takes {list(image_size)}: keras-hub itself cannot "
            "run this preset.")
    return mean, std, *_geometry(conv, where, size, image_size)


def _geometry(conv, where: str, size, image_size):
    """(eval_resize, eval_keep_aspect): None and True, the central crop
    of the model's aspect resized to it, with `crop_to_aspect_ratio`;
    else None and False, the image resized whole."""
    notes = []
    if conv.get("interpolation", "bilinear") != "bilinear":
        notes.append(f"a {conv['interpolation']} filter")
    if conv.get("antialias", False):
        notes.append("antialiasing")
    if conv.get("pad_to_aspect_ratio", False):
        notes.append("padding to the model's aspect ratio")
    if notes:
        warn_once(
            f"{where}: its image converter asks for {', '.join(notes)}; "
            "keras_vit resizes bilinearly without antialiasing and does "
            "not pad. Set --resize_size and --keep_aspect to choose.")
    crop = bool(conv.get("crop_to_aspect_ratio", True))
    return None, size is not None and crop
