"""The options of a SavedModel export (`export_model`'s keyword arguments)
and their checks: one frozen record, documented once.

    options = ExportOptions.of({"model_name": "vit", "top_k": 3})

An unknown option is refused by name (a `UsageError`), as are option values
that could not be served (see `checked_top_k`, `check_version`,
`class_names`, `check_resize_size`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Optional, Sequence

import keras
import numpy as np

from keras_vit.data import preprocessing
from keras_vit.derived import is_features_model
from keras_vit.errors import UsageError, check_options
from keras_vit.export import files as export_files
from keras_vit.storage import lines
from keras_vit.storage.version_names import MAX_VERSION


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """The keyword options of `keras_vit.export.saved_model.export_model`.

    Attributes:
        model_name: str. The name clients use (`/v1/models/<name>`).
        class_names: sequence of str or None. One name per class, in label
            order; None names classes "0" .. "K-1".
        top_k: int. How many top classes each answer lists (at most K).
        warmup_images: sequence or None. Images for TF Serving's warm-up
            file (encoded bytes, paths or uint8 arrays); None uses small
            synthetic JPEG and PNG images; an empty list writes no file.
        version: int or None. The version number; None takes one more than
            the highest existing. An existing version is never replaced.
        resize_size: int, (height, width) or None. Resize then central-crop
            to the input size, as `preprocess_eval` does for evaluation with
            the same argument; None resizes straight to the input size.
        keep_aspect: bool. Resize the shorter side to the int
            `resize_size`, keeping the aspect ratio; without
            `resize_size`, crop the central region of the input's aspect
            ratio before the resize (`preprocess_eval`).
        serving_base_dir: str or None. Where the server sees `export_dir`
            (e.g. "/models" in a container), for models.config; None uses
            the local absolute path. Also replaces this model's existing
            base_path in models.config.
        verify: bool. Reload the written SavedModel, replay the warm-up
            requests and compare with the Keras model before publishing.
        dynamic_size: bool. Also serve `predict_any_size`: pixels of any
            height and width that are multiples of the model's stride, run
            at that size (position embeddings interpolated on every call).
            A fixed-size model is served through a dynamic-size copy
            (`keras_vit.with_dynamic_image_size`); the other signatures
            still resize to its size.
        scores: str or None. How `probabilities` scores the logits:
            "softmax" (one class among all) or "sigmoid" (each class on
            its own: a model trained with the sigmoid loss); None: a
            sigmoid for a model of one logit, else a softmax
            (`keras_vit.scoring.scores.scores_for`).
        source: dict or None. What export.json records of where the model
            came from (the commands': its `location`, `kind` and, for a
            training run, the `step` of the checkpoint exported).
    """

    model_name: str = "vit"
    class_names: Optional[Sequence[str]] = None
    top_k: int = 5
    warmup_images: Optional[Sequence[export_files.WarmupImage]] = None
    version: Optional[int] = None
    resize_size: Optional[preprocessing.Size] = None
    keep_aspect: bool = False
    serving_base_dir: Optional[str] = None
    verify: bool = True
    dynamic_size: bool = False
    scores: Optional[str] = None
    source: Optional[dict] = None

    @classmethod
    def of(cls, options: dict) -> "ExportOptions":
        """The options named in `options`, the others at their defaults.

        Raises:
            UsageError: an option that `export_model` does not take, or
                a `source` that is no JSON object.
        """
        check_options(options, [f.name for f in dataclasses.fields(cls)],
                      "export_model")
        check_source(options.get("source"), "export.json")
        return cls(**options)


# The most characters of JSON a `source` may take (a path, a kind, a
# step: far less), so that the records holding it stay small.
MAX_SOURCE_CHARS = 8192


def check_source(source, record: str) -> None:
    """Refuses a `source` (where the model came from) that the JSON file
    `record` cannot hold, before anything is written."""
    try:
        text = json.dumps(source, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise UsageError(f"source must be a JSON object or None: {error}"
                         ) from None
    if source is not None and not isinstance(source, dict):
        raise UsageError(f"source must be a dict ({record} records it) or "
                         f"None, not {type(source).__name__}.")
    if len(text) > MAX_SOURCE_CHARS:
        raise UsageError(f"source is {len(text)} characters of JSON: "
                         f"{record} records at most {MAX_SOURCE_CHARS}.")


def class_names(names, num_classes: int) -> list:
    """list of str. `names` checked against the model's `num_classes`
    (bytes decoded); None names the classes "0" .. "K-1"."""
    if names is None:
        return [str(i) for i in range(num_classes)]
    if isinstance(names, str):
        raise UsageError("class_names must be a list of str, not one str.")
    names = [n.decode("utf-8") if isinstance(n, bytes) else n for n in names]
    if len(names) != num_classes:
        raise UsageError(
            f"{len(names)} class_names for a model with {num_classes} "
            "classes: give one name per class, in label order."
        )
    for index, name in enumerate(names):
        # labels.txt holds a name a line; a blank line is no name when read.
        if not lines.fits_a_line(name):
            raise UsageError(
                f"class_names[{index}] = {name!r}: names must be str "
                "without newlines, and not blank (name a class without one "
                f'by its index, "{index}").'
            )
    return names


def check_resize_size(resize_size, size, keep_aspect=False) -> None:
    """Raises a UsageError unless `resize_size` is None or an int or
    (height, width) of at least the model's input `size` on each side:
    the central crop of `size` is taken from the image resized to it.
    `keep_aspect` (the shorter side resized to it) takes an int."""
    if not isinstance(keep_aspect, bool):
        raise UsageError(f"keep_aspect must be True or False, got "
                         f"{keep_aspect!r}.")
    if keep_aspect and not isinstance(resize_size, (int, np.integer,
                                                    type(None))):
        raise UsageError(
            "keep_aspect resizes the shorter side to resize_size, which "
            f"must then be one int (at least the input's longer side), got "
            f"{resize_size!r}.")
    if resize_size is None:
        return
    sides = list(resize_size) if isinstance(resize_size, (list, tuple)) \
        else [resize_size] * 2
    if len(sides) != 2 or not all(
            isinstance(n, (int, np.integer)) and not isinstance(n, bool)
            and n > 0 for n in sides):
        raise UsageError(f"resize_size must be an int or (height, width), "
                         f"positive, got {resize_size!r}.")
    if any(r < s for r, s in zip(sides, size)):
        raise UsageError(
            f"resize_size {resize_size} is smaller than the model's input "
            f"{'x'.join(str(n) for n in size)}: the central crop is taken "
            "from the resized image, so give sides at least the input's (an "
            "int: at least its longer side), or None to resize straight to "
            "the input size.")


def checked_top_k(top_k, num_classes: int) -> int:
    """int. `top_k` (an int >= 1), at most `num_classes`."""
    if isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) \
            or top_k < 1:
        raise UsageError(f"top_k must be an int >= 1, got {top_k!r}.")
    return min(int(top_k), num_classes)


def check_version(version) -> None:
    """Raises a UsageError unless `version` is None or an int from 0 to
    MAX_VERSION (a larger one would be written and never served)."""
    if version is not None and (
        isinstance(version, bool)
        or not isinstance(version, (int, np.integer))
        or version < 0
    ):
        raise UsageError(
            f"`version`={version!r} is not a whole number of 0 or more: "
            "pass one, or none for the next free one.")
    if version is not None and int(version) > MAX_VERSION:
        raise UsageError(
            f"`version`={version} is above {MAX_VERSION:,} (2**63 - 1), the "
            "largest TF Serving reads (it skips a folder whose number it "
            "cannot read, serving nothing from it): pass a smaller one, "
            "such as a time in seconds ($(date +%s)).")


def classifier_width(model: keras.Model, who: str) -> int:
    """int. The class count of `model`, a classifier with outputs (batch,
    classes); a UsageError naming the fix for any other model (a features
    model: give it a head), since an export's `probabilities` would be a
    softmax over something that is no class scores."""
    shape = model.output_shape
    if isinstance(shape, list) or len(shape) != 2 or not shape[-1] or (
        is_features_model(model)
    ):
        raise UsageError(
            f"{who} needs a classifier with outputs (batch, classes); "
            f"{model.name!r} outputs {shape}. A features model (num_classes=0)"
            " cannot be exported: give it a head first."
        )
    return int(shape[-1])
