"""Builds a keras_vit model from a Hugging Face layout directory
(`keras_vit.checkpoint.hub.reader`): the architecture from the arrays'
shapes and config.json, the weights through `weights.load_arrays`.
Reached through `keras_vit.checkpoint.sources.HubSource`."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import keras

from keras_vit.architecture import SIZE_FIELDS, Architecture, Numerics
from keras_vit.checkpoint import weights
from keras_vit.checkpoint.formats.npz import POSEMB, LoadReport
from keras_vit.checkpoint.formats.npz_layout import (
    describe_arrays,
    own_pre_logits,
)
from keras_vit.checkpoint.hub import keras_preset
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.posemb import (
    resize_like_library,
    resize_position_embedding,
)
from keras_vit.errors import UsageError
from keras_vit.model import VisionTransformer, _image_hw

_OWN = object()  # hub_architecture's default: the checkpoint's own


def hub_architecture(checkpoint: hub.HubCheckpoint, image_size=None,
                     num_classes: Optional[int] = None,
                     representation_size=_OWN) -> Architecture:
    """The `Architecture` of a hub checkpoint: its sizes, pooling and head
    from the arrays, its numerics and pre-logits activation from
    config.json; at `image_size` (None: the checkpoint's own), with
    `num_classes` (None: its head's, 0 without one) and
    `representation_size` (default: its pre-logits layer's, none under a
    new head: `npz_layout.own_pre_logits`)."""
    info = describe_arrays(
        {k: tuple(v.shape) for k, v in checkpoint.arrays.items()})
    return Architecture(
        num_classes=(info["num_classes"] or 0) if num_classes is None
        else num_classes,
        image_size=checkpoint.image_size if image_size is None
        else _image_hw(image_size),
        pooling=info["pooling"],
        representation_size=own_pre_logits(info, num_classes)
        if representation_size is _OWN else representation_size,
        # A ViTModel's pooler_act (tanh unless its config says otherwise).
        pre_logits_activation=checkpoint.pre_logits_activation,
        numerics=Numerics(
            approximate_gelu=checkpoint.approximate_gelu,
            layer_norm_epsilon=checkpoint.layer_norm_epsilon,
        ),
        variant=info["variant"],
        **{k: info[k] for k in SIZE_FIELDS},
    )


def model_from_hub(
    checkpoint: hub.HubCheckpoint,
    image_size,
    num_classes: Optional[int],
    representation_size,
    from_source,
    strict: bool,
) -> Tuple[keras.Model, LoadReport]:
    """(model, report): the checkpoint built and loaded, at `image_size`
    (None: the checkpoint's own). At another patch grid than the stored
    table's, the table is resized the way the library that wrote the
    weights resizes it for its own model at that size (`posemb.
    resize_like_library`: transformers' interpolate_pos_encoding, timm's
    checkpoint filter). `num_classes` and `representation_size` as in
    `loader.load_model` (`from_source` is its FROM_SOURCE marker)."""
    arch = hub_architecture(
        checkpoint, image_size, num_classes,
        _OWN if representation_size == from_source else representation_size)
    arrays = library_table(checkpoint, arch.image_size)
    model = VisionTransformer(arch)
    grid = arch.grid()
    report = weights.load_arrays(
        model,
        arrays,
        strict=strict,
        keep_pre_logits=arch.representation_size is not None,
        posemb_grid=grid,
        source=checkpoint.path,
        layout=checkpoint.naming,
    )
    if grid != tuple(checkpoint.posemb_grid):
        report.posemb_resized = (tuple(checkpoint.posemb_grid), grid)
    # What the library's class leaves out of the file (named where
    # config.json did not name the class).
    report.dropped.extend(checkpoint.dropped)
    return model, report


def library_table(checkpoint: hub.HubCheckpoint, image_size) -> Dict[str, Any]:
    """The checkpoint's arrays with the position table at the patch grid
    of `image_size` ((height, width)), resized as the library that wrote
    them does (unchanged at the stored grid)."""
    patch = int(checkpoint.arrays["embedding/kernel"].shape[0])
    grid = tuple(int(s) // patch for s in image_size)
    old = tuple(checkpoint.posemb_grid)
    if grid == old:
        return checkpoint.arrays
    if checkpoint.naming == hub.HUGGINGFACE and old[0] != old[1]:
        raise UsageError(
            f"{checkpoint.path}: a {old[0]} x {old[1]} position table; "
            "transformers' interpolate_pos_encoding resizes square ones "
            "only, so there is no library model at another size to match. "
            "Load it at its own image size."
        )
    arrays = dict(checkpoint.arrays)
    if checkpoint.naming == keras_preset.KERAS_HUB:
        # keras-hub builds no model at another grid: resized as an
        # official checkpoint is.
        arrays[POSEMB] = resize_position_embedding(
            arrays[POSEMB], grid, old, int("cls" in arrays))
        return arrays
    arrays[POSEMB] = resize_like_library(
        arrays[POSEMB], grid, old, int("cls" in arrays), checkpoint.naming)
    return arrays
