"""The files beside a LiteRT export, and how a client reads them back.

A `.tflite` written by `keras_vit.export.litert.export_litert` has two files
beside it: `<name>.labels.txt`, its class names, and
`<name>.preprocessing.json`, the record of what a client does to an image
first (the input size and the evaluation resize) with the SHA-256 of the
`.tflite` and of the class names, so that files that do not go together
are refused rather than used.
"""

from __future__ import annotations

import json
import os
from typing import List, Optional, Sequence, Tuple

import tensorflow as tf
from absl import logging

from keras_vit.errors import UsageError
from keras_vit.storage import atomic

INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
# The preprocessing record beside a .tflite: read at most this many
# bytes, and a resize of at most this many pixels a side.
_MAX_RECORD_BYTES = 1 << 16
_MAX_RESIZE = 1 << 15


def labels_path(path: str) -> str:
    """str. The class-name file written beside a .tflite."""
    return str(path)[: -len(".tflite")] + ".labels.txt"


def preprocessing_path(path: str) -> str:
    """str. The preprocessing record written beside a .tflite."""
    return str(path)[: -len(".tflite")] + ".preprocessing.json"


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def written_paths(path: str) -> List[str]:
    """The files an export to the .tflite `path` writes."""
    return [str(path), labels_path(path), preprocessing_path(path)]


def _read_record(record_path: str):
    """The JSON of a preprocessing record, of its first _MAX_RECORD_BYTES
    (a longer file does not parse: ValueError)."""
    with tf.io.gfile.GFile(record_path, "rb") as f:
        return json.loads(f.read(_MAX_RECORD_BYTES + 1)[:_MAX_RECORD_BYTES])


def killed_export_files(path: str) -> List[str]:
    """The files beside the .tflite `path` that an export killed before
    its last step left (`written_paths`: published before the .tflite,
    which is not there): a preprocessing record of this module's, naming
    a .tflite by its digest, and the class names it digests. Another
    export replaces them without --overwrite; any other file is kept."""
    record_path = preprocessing_path(path)
    if atomic.exists(path) or not atomic.exists(record_path):
        return []
    try:
        record = _read_record(record_path)
        digest = record.get("tflite_sha256")
        names = record.get("labels_sha256")
    except (ValueError, TypeError, AttributeError, RecursionError):
        return []
    if not isinstance(digest, str):
        return []
    labels = labels_path(path)
    if not atomic.exists(labels):
        return [record_path]
    return [record_path] + ([labels] if names == atomic.sha256(labels)
                            else [])


def preprocessing_record(height: int, width: int,
                         resize_size: Optional[int],
                         quantization: str, keep_aspect: bool = False) -> dict:
    """dict. What a client does to an image before the file, as
    `keras_vit.data.preprocessing.preprocess_eval` does it."""
    return {
        "input": INPUT_NAME, "output": OUTPUT_NAME,
        "image_size": [int(height), int(width)],
        "resize_size": None if resize_size is None else int(resize_size),
        "pixels": "RGB, float32 in [0, 255], shape (1, height, width, 3)",
        "keep_aspect": bool(keep_aspect),
        "resize": "bilinear to resize_size (with keep_aspect: the shorter "
                  "side to it, the longer rounded, area, truncated to whole "
                  "values) then the central image_size crop; with "
                  "resize_size null, bilinear to image_size (with "
                  "keep_aspect: first the central crop of image_size's "
                  "aspect ratio, as keras.layers.Resizing's "
                  "crop_to_aspect_ratio)",
        "quantization": quantization,
    }


def warn_without_record(path: str, image_size: Sequence[int],
                        resize_size: Optional[int], names_given: bool
                        ) -> None:
    """Where the .tflite `path` has no preprocessing record beside it (a
    file copied alone, or written before the record was): a warning of
    what that changes, unless the caller gives both the resize and the
    class names (or a labels file is beside it)."""
    if tf.io.gfile.exists(preprocessing_path(path)):
        return
    lost = ([] if resize_size is not None else [
        "the images are resized straight to {}x{}, not as the model was "
        "evaluated".format(*image_size)]) + ([] if names_given or (
            tf.io.gfile.exists(labels_path(path))) else [
            "its classes are numbered"])
    if lost:
        logging.warning("%s has no %s beside it (the record its export "
                        "writes): %s. Copy the files exported with it.",
                        path, os.path.basename(preprocessing_path(path)),
                        ", and ".join(lost))


def read_resize(path: str, image_size: Sequence[int],
                labels_used: bool = True) -> Tuple[Optional[int], bool]:
    """(resize_size, keep_aspect). The evaluation resize recorded beside
    the .tflite `path` ((None, False) where no record is there, as for
    files written before it was; keep_aspect False where a record written
    before it has none), checked against the file's `image_size`, and the
    record checked to name this .tflite and, where they are there and used
    (`labels_used`: no names given instead), the class names beside it
    (by their SHA-256; a record written before it named them is not)."""
    record_path = preprocessing_path(path)
    if not tf.io.gfile.exists(record_path):
        return None, False
    try:
        record = _read_record(record_path)
        size, resize = list(record["image_size"]), record["resize_size"]
        if not all(_is_int(n) for n in size + [resize or 0]):
            raise ValueError("not whole numbers")
        keep = record.get("keep_aspect", False)
        if not isinstance(keep, bool):
            raise ValueError("keep_aspect is not true or false")
        digests = [record.get(f"{name}_sha256")
                   for name in ("tflite", "labels")]
        if not all(d is None or isinstance(d, str) for d in digests):
            raise ValueError("a digest is not a string")
    except (ValueError, TypeError, KeyError, AttributeError,
            RecursionError):
        raise UsageError(
            f"{record_path} is not the preprocessing record of a LiteRT "
            "export: export the model again, or remove the file and pass "
            "--resize_size.") from None
    if size != [int(n) for n in image_size] or (
            resize is not None and not max(size) <= resize <= _MAX_RESIZE):
        raise UsageError(
            f"{record_path} records image_size {size} and resize_size "
            f"{resize}, which do not fit {path} (input "
            f"{list(image_size)}): export the model again, or remove the "
            "file and pass --resize_size.")
    if digests[0] is None:
        return resize, keep
    tflite, labels = _digests_beside(path)
    if digests[0] != tflite:
        raise UsageError(
            f"{record_path} was written with another {path} (the file was "
            "replaced, or an export stopped while it replaced them): "
            "export the model again (--overwrite).")
    if labels_used and labels is not None and digests[1] != labels:
        raise UsageError(
            f"{labels_path(path)} holds other class names than {path} was "
            "exported with (edited or replaced, or an export stopped while "
            "it replaced them): export the model again (--overwrite), or "
            "give the names with --class_names_file.")
    return resize, keep


def _digests_beside(path: str) -> list:
    """[SHA-256 of the .tflite `path`, of its class names (None where
    there are none)], as a record names them."""
    labels = labels_path(path)
    return [atomic.sha256(path),
            atomic.sha256(labels) if tf.io.gfile.exists(labels) else None]
