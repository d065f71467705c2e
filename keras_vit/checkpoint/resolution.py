"""A model rebuilt at another input resolution, with the same weights and
its position embeddings resized (`keras_vit.checkpoint.posemb`)."""

from __future__ import annotations

from typing import Sequence, Union

import keras

from keras_vit import model as vit_model
from keras_vit.checkpoint.posemb import resize_position_embedding
from keras_vit.checkpoint.weights import model_grid
from keras_vit.errors import UsageError


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
        A new `keras.Model`.
    """
    height, width = vit_model._image_hw(image_size)
    stride = model.get_layer("embedding").patch_size
    layer_names = {layer.name for layer in model.layers}
    if "resnet" in layer_names:
        stride *= model.get_layer("resnet").stride
    for side, value in (("height", height), ("width", width)):
        if value % stride:
            raise UsageError(
                f"image_size {side} {value} is not divisible by the model's "
                f"total stride {stride}: use a multiple of {stride}."
            )
    config = model.get_config()
    inputs = [c for c in config["layers"] if c["class_name"] == "InputLayer"]
    if len(inputs) != 1:
        raise UsageError("rebuild_at_resolution needs a single-input model.")
    batch_shape = list(inputs[0]["config"]["batch_shape"])
    batch_shape[1:3] = [height, width]
    inputs[0]["config"]["batch_shape"] = batch_shape
    # Without their recorded build shapes the layers build at the new size
    # when the graph is rebuilt.
    for layer_config in config["layers"]:
        layer_config.pop("build_config", None)
        if (layer_config.get("name") == "posembed_input"
                and "grid_size" in layer_config["config"]):
            # A model of dynamic image size becomes a fixed one: its table
            # is resized once here, not interpolated on every call.
            layer_config["config"]["grid_size"] = None
    new = model.__class__.from_config(config)
    prefix = int("cls" in layer_names)
    for layer in model.layers:
        weights = layer.get_weights()
        if not weights:
            continue
        target = new.get_layer(layer.name)
        if layer.name == "posembed_input":
            weights = [
                resize_position_embedding(
                    weights[0], model_grid(new), model_grid(model), prefix
                )
            ]
        target.set_weights(weights)
    return new
