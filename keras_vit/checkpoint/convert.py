"""Converts a model (an official ViT .npz checkpoint, a Hugging Face
folder, a training run) into a Keras `.keras` file.

    keras-vit-convert --model=ViT-B_16.npz --variant=B/16 \\
        --num_classes=1000 --image_size=384 --output=vit_b16_384.keras

`convert` builds the model with `keras_vit.checkpoint.loader.load_model`
(an .npz: head kept when the class count matches, else zero-initialised;
position embedding resized to the image size) and writes it atomically: a
crash never leaves a partial file at the output. The command line is
keras_vit/commands/convert.py.
"""

from __future__ import annotations

from typing import Optional, Tuple, Union

import keras

from keras_vit.checkpoint import loader
from keras_vit.checkpoint.atomic import atomic_write
from keras_vit.checkpoint.npz import LoadReport
from keras_vit.errors import UsageError


def save_keras_atomic(model: keras.Model, path: str) -> None:
    """Saves `model` to `path` (.keras) atomically (`atomic.atomic_write`)."""
    if not path.endswith(".keras"):
        raise UsageError(
            f"{path!r} must end with .keras (Keras's format)."
        )
    atomic_write(path, model.save)


def convert(
    source: Union[loader.Source, str],
    output: str,
    *,
    image_size: Optional[Union[int, Tuple[int, int]]] = None,
    **build,
) -> Optional[LoadReport]:
    """Loads `source` (`loader.load_model`, with `image_size` and the
    `build` options it takes: num_classes, pooling, representation_size,
    strict) and saves it to `output` (.keras). Returns the .npz's or hub
    folder's LoadReport (None for the other sources)."""
    if not output.endswith(".keras"):
        raise UsageError(
            f"`output` {output!r} must end with .keras (Keras's format)."
        )
    model, report = loader.load_report(source, image_size, **build)
    save_keras_atomic(model, output)
    return report
