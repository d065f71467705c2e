"""The evaluation resize the commands apply to a photo before the model:
--resize_size and --keep_aspect, else the source's own (a training run's
`input.pp` eval_resize_size and eval_keep_aspect, which serving must
match; the resize of the library that wrote a hub folder).

Resize to N x N (or, keeping the aspect ratio, the shorter side to N),
then the central crop of the model's input; no resize: straight to the
input (`keras_vit.data.preprocessing.preprocess_eval`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from absl import flags, logging

from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:
    import keras

    from keras_vit import derived
    from keras_vit.checkpoint import loader
else:  # imported at first use: `--help` loads no Keras
    derived = lazy_module("keras_vit.derived")


def define_resize_size(values: flags.FlagValues) -> None:
    """--resize_size and --keep_aspect."""
    flags.DEFINE_integer(
        "resize_size", None,
        "Resize to this, then center-crop to the input size, as evaluation "
        "does with the same setting; default: the model's own (a training "
        "workdir's eval_resize_size, a timm model's crop_pct, a "
        "transformers processor's size and crop_size), else resize "
        "directly.", flag_values=values,
    )
    flags.DEFINE_boolean(
        "keep_aspect", None,
        "Resize the shorter side to the resize size, keeping the aspect "
        "ratio (area resampling, big_vision's resize_small), before the "
        "central crop; without a resize size, crop the central region of "
        "the input's aspect ratio, then resize (keras-hub's image "
        "converter); --nokeep_aspect resizes both sides. Default: the "
        "model's own (a workdir's eval_keep_aspect, a timm model's "
        "crop_mode, a transformers processor's shortest_edge, a keras-hub "
        "preset's crop_to_aspect_ratio).",
        flag_values=values,
    )


def _flag(values: flags.FlagValues, name: str):
    return values[name].value if name in values else None


def resize_size(values: flags.FlagValues, source: loader.Source,
                model: Optional[keras.Model] = None) -> Optional[int]:
    """--resize_size, else the source's evaluation resize (a training
    workdir's eval_resize_size, the preprocessing the run evaluated with,
    which serving must match; a timm model's crop_pct; a transformers
    processor's size before its crop_size), scaled to
    --image_size when that differs from the source's (`source_resize`)."""
    if _flag(values, "resize_size") is not None:
        # (a model of any size: where its position embeddings are kept)
        check_at_least_input(values.resize_size, derived.input_image_size(
            model) if model is not None else ())
        return values.resize_size
    resize = source_resize(source, _flag(values, "image_size"))
    if resize and source.run_config() is None:
        kept = keep_aspect(values, source, resize)
        logging.info(
            "%s: resized to %s (%s), then the central crop: the size the "
            "library that wrote it evaluates at (timm's crop_pct, the "
            "transformers processor's size and crop_size; the library may "
            "resize bicubic: --resize_size and --keep_aspect set others).",
            source.path, resize, "the shorter side, area" if kept
            else "both sides, bilinear")
    return resize


def check_at_least_input(resize: int, size: Sequence) -> None:
    """--resize_size `resize` against the model's input `size` (height,
    width; None for a dynamic side): the central crop is taken from the
    resized image."""
    if resize < 1:
        raise UsageError(f"--resize_size {resize} must be at least 1 (the "
                         "side the images are resized to), or left out.")
    if resize < max([1, *(int(n or 0) for n in size)]):
        raise UsageError(
            f"--resize_size {resize} is smaller than the model's input "
            f"{'x'.join(str(n) for n in size) or 1}: the central crop is "
            "taken from the resized image, so give at least its longer side "
            "(or leave --resize_size out).")


def keep_aspect(values: flags.FlagValues, source: loader.Source,
                resize: Optional[int]) -> bool:
    """Whether the aspect ratio is kept: `resize` (what `resize_size`
    chose) is the shorter side's length, or without a resize the central
    crop of the input's aspect ratio is resized to the input (keras-hub's
    image converter): --keep_aspect, else the source's own
    (`source_keep_aspect`)."""
    wanted = _flag(values, "keep_aspect")
    if wanted is None:
        return source_keep_aspect(source)
    return bool(wanted)


def source_keep_aspect(source: loader.Source) -> bool:
    """A training run's eval_keep_aspect, else the library's (a timm
    model's crop_mode 'center', a transformers processor's
    shortest_edge)."""
    recorded = source.run_config()
    if recorded is not None:
        return bool(recorded.input.pp.eval_keep_aspect)
    library = source.library_resize()
    return bool(library and library[2])


def source_resize(source: loader.Source, image_size=None) -> Optional[int]:
    """The evaluation resize a source records, scaled to `image_size`
    (default: the source's own): a training run's eval_resize_size, else
    the library's (a timm model's crop_pct)."""
    recorded = source.run_config()
    if recorded is not None:
        resize = recorded.input.pp.eval_resize_size
        trained = recorded.model.image_size
    else:
        library = source.library_resize()
        if library is None:
            return None
        resize, trained, _, crop_pct = library
        rows, cols = _hw(image_size or trained)
        if (resize is not None and crop_pct and rows == cols
                and (rows, cols) != _hw(trained)):
            # timm's own rule at any size (scaling its floored resize
            # would be a pixel off: 35 at 32 is 52.5 at 48, timm's 53).
            return max(rows, math.floor(rows / crop_pct))
    return scaled_resize(resize, trained, image_size or trained)


def _hw(size) -> Tuple[int, int]:
    if isinstance(size, (tuple, list)):
        return int(size[0]), int(size[1])
    return int(size), int(size)


def scaled_resize(resize: Optional[int], trained_size,
                  image_size) -> Optional[int]:
    """The eval resize (resize to it, then the central crop) for
    `image_size` of one set for `trained_size`: scaled alike, so the crop
    keeps the same share of the image, and never below the image's side
    (24 at 16 -> 48 at 32, 12 at 8). None stays None; an unknown
    `trained_size` (0 or None) leaves `resize`, at least the image's side.
    """
    if resize is None:
        return None
    rows, cols = _hw(image_size)
    if trained_size and min(_hw(trained_size)) > 0:
        trained_rows, trained_cols = _hw(trained_size)
        resize = round(int(resize) * max(rows / trained_rows,
                                         cols / trained_cols))
    return max(rows, cols, int(resize))


def warn_config_size(source: loader.Source, image_size) -> None:
    """A warning where few-shot features are taken at the config's
    `image_size`, not the size the model was trained at (a 32 x 32 run
    probed at the config's 224: its table stretched, far below what it
    scores at its own). Read from the sources that say it without being
    loaded (a run's config, an .npz's or a hub folder's header)."""
    if source.kind not in ("workdir", "npz", "hub"):
        return
    own = tuple(source.architecture().image_size or ())
    if len(own) != 2 or None in own or _hw(image_size) == own:
        return
    flag = (f"--image_size={own[0]}" if own[0] == own[1]
            else "--config.model.image_size=0")
    logging.warning(
        "%s was trained at %dx%d; its few-shot features are taken at %dx%d "
        "(config.model.image_size), its position embeddings resized: %s "
        "takes them at its own size.", source.path, *own,
        *_hw(image_size), flag)
