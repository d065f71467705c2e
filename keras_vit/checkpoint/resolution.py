"""A model rebuilt at another input resolution, with the same weights and
its position embeddings resized (`keras_vit.checkpoint.posemb`), or with
another head."""

from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import keras

from keras_vit import model as vit_model
from keras_vit.architecture import image_hw
from keras_vit.checkpoint import weights as checkpoint_weights
from keras_vit.checkpoint.formats.npz import LoadReport
from keras_vit.checkpoint.posemb import resize_position_embedding


def rebuild_at_resolution(
    model: keras.Model, image_size: Union[int, Sequence[int]]
) -> keras.Model:
    """The same network at another input resolution, weights copied.

    The position embedding is resized to the new patch grid (bilinear,
    official convention); every other weight is copied unchanged. The
    original model is not modified.

    Args:
        model: keras.Model. Built by `keras_vit.create_model`.
        image_size: int or (height, width). The new input size.

    Returns:
        A new `VisionTransformer`.
    """
    vit = vit_model.as_vision_transformer(model)
    arch = vit.architecture
    # A model of dynamic image size becomes a fixed one: its table is
    # resized once here, not interpolated on every call.
    new_arch = arch.replace(image_size=image_hw(image_size),
                            dynamic_image_size=False)
    with vit_model.dtype_policy_of(vit):
        new = vit_model.VisionTransformer(new_arch, name=vit.name)
    for layer, target in zip(vit.layers, new.layers):
        weights = layer.get_weights()
        if layer is vit.parts.position_embedding and weights:
            weights = [
                resize_position_embedding(
                    weights[0], new_arch.grid(), arch.grid(),
                    arch.num_prefix_tokens,
                )
            ]
        target.set_weights(weights)
    return new


def rebuild_with_head(
    model: keras.Model, num_classes: Optional[int],
    representation_size: Optional[int], source: str, strict: bool = True,
) -> Tuple[keras.Model, LoadReport]:
    """The same network with another head, every other weight copied.

    The head is kept where it is `num_classes` wide (None: its own width),
    else a new one starts at zero (0: none, a features model), as an .npz
    is loaded (`weights.load_arrays`, which also reports it). The
    pre-logits layer is kept where `representation_size` is its width;
    another width is a new layer (an error when `strict`: the saved one
    does not fit), None drops it. The original model is not modified.

    Returns:
        (a new `VisionTransformer`, the LoadReport of what was copied).
    """
    vit = vit_model.as_vision_transformer(model)
    arch = vit.architecture
    new_arch = arch.replace(
        num_classes=arch.num_classes if num_classes is None else num_classes,
        representation_size=representation_size)
    with vit_model.dtype_policy_of(vit):
        new = vit_model.VisionTransformer(new_arch, name=vit.name)
    report = checkpoint_weights.load_arrays(
        new, checkpoint_weights.model_arrays(vit), strict=strict,
        keep_pre_logits=representation_size is not None,
        posemb_grid=checkpoint_weights.model_grid(vit), source=source)
    return new, report
