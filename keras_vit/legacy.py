"""Models saved before `VisionTransformer`: their architecture, read from
their layers.

`.keras` files written by earlier releases hold an anonymous functional
model whose config names no architecture. `architecture_from_layers` reads
the `Architecture` back from the configs of its layers, found by their
types; `keras_vit.model.as_vision_transformer` rebuilds the model from it,
only for a model that `foreign_layer` finds to be exactly such a ViT: the
chain of layers an older `create_model` built, nothing more (a user's
model that adds a layer to keras_vit's is theirs, never rebuilt as
something else).
"""

from __future__ import annotations

from typing import Any, Dict

import keras

from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit import resnet
from keras_vit.architecture import Architecture, Numerics, variant_of
from keras_vit.errors import UsageError

# The layers of a model an older `create_model` built, in their order, each
# taking the previous one's output; the optional ones may be absent. The
# Dense layers after the pooling are the pre-logits layer (an activation)
# and the head (linear), by these names.
_CHAIN = (
    (keras.layers.InputLayer, True),
    (resnet.ResNetStem, False),
    (vit_embedding.PatchEmbedding, True),
    (vit_embedding.ClassToken, False),
    ((vit_embedding.PositionEmbedding,
      vit_embedding.SinCosPositionEmbedding), True),
    (vit_layers.Encoder, True),
    (vit_layers.TokenPooling, False),
    ("pre_logits", False),
    ("head", False),
)


def _fits(layer, kind) -> bool:
    if isinstance(kind, str):
        linear = getattr(layer, "activation", None) is (
            keras.activations.linear)
        return (type(layer) is keras.layers.Dense and layer.name == kind
                and linear == (kind == "head"))
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return type(layer) in kinds


def _takes(layer, previous, model: keras.Model) -> bool:
    """Whether `layer` takes `previous`'s output: a position embedding of
    an older `create_model` (sin-cos, or of a dynamic size) took the
    images too, for their size."""
    if layer.input is previous.output:
        return True
    inputs = layer.input
    return (isinstance(layer, (vit_embedding.PositionEmbedding,
                               vit_embedding.SinCosPositionEmbedding))
            and isinstance(inputs, (list, tuple)) and len(inputs) == 2
            and inputs[0] is previous.output and inputs[1] is model.inputs[0])


def foreign_layer(model: keras.Model) -> str:
    """'' when `model` is exactly a functional ViT of an older
    `create_model` (every layer one of `_CHAIN`, in order, each taking the
    previous one's output, the last one's output the model's); else what
    is not, naming the first layer that is none of such a ViT's."""
    layers = list(getattr(model, "layers", []))
    if len(getattr(model, "inputs", None) or ()) != 1 or len(
            getattr(model, "outputs", None) or ()) != 1:
        return "it has other than one input and one output"
    kinds = iter(_CHAIN)
    previous = None
    for layer in layers:
        for kind, required in kinds:
            if _fits(layer, kind):
                break
            if required:
                return (f"its layer {layer.name!r} ({type(layer).__name__}) "
                        "is none of a ViT's, or not in a ViT's place")
        else:
            return (f"its layer {layer.name!r} ({type(layer).__name__}) "
                    "comes after a ViT's last layer")
        if previous is not None and not _takes(layer, previous, model):
            return (f"its layer {layer.name!r} does not take the output of "
                    f"{previous.name!r}, as a ViT's layers do")
        previous = layer
    if previous is None or model.outputs[0] is not previous.output:
        return "its output is not its last layer's"
    return ""


def architecture_from_layers(model: keras.Model) -> Architecture:
    """The Architecture of a functional model built by an older
    `create_model` (a `.keras` file written before `VisionTransformer`),
    read from its layers' configs by their types. For the encoder of an
    MPP model (`keras_vit.mpp`: no pooling layer), the features model
    `mpp.encoder_model` makes of it."""
    found: Dict[str, Any] = {}
    dense = []
    for layer in model.layers:
        for kind in (resnet.ResNetStem, vit_embedding.PatchEmbedding,
                     vit_embedding.ClassToken,
                     vit_embedding.PositionEmbedding,
                     vit_embedding.SinCosPositionEmbedding,
                     vit_layers.Encoder, vit_layers.TokenPooling):
            if isinstance(layer, kind):
                found[kind.__name__] = layer
        if "TokenPooling" in found and isinstance(layer, keras.layers.Dense):
            dense.append(layer)
    posemb = (found.get("PositionEmbedding")
              or found.get("SinCosPositionEmbedding"))
    if posemb is None or any(
            k not in found for k in ("PatchEmbedding", "Encoder")):
        raise UsageError(
            f"Model {model.name!r} is not a Vision Transformer built by "
            "keras_vit.create_model."
        )
    embed, encoder = found["PatchEmbedding"], found["Encoder"]
    pooling = "token" if "ClassToken" in found else "gap"
    kwargs = dict(
        patch_size=embed.patch_size, hidden_size=embed.hidden_size,
        num_layers=encoder.num_layers, num_heads=encoder.num_heads,
        mlp_dim=encoder.mlp_dim, pooling=pooling,
        dropout_rate=encoder.dropout_rate,
        attention_dropout_rate=encoder.attention_dropout_rate,
        stochastic_depth_rate=encoder.stochastic_depth_rate,
        remat=encoder.remat,
        numerics=Numerics(encoder.approximate_gelu,
                          encoder.layer_norm_epsilon),
        posemb="sincos2d" if found.get("SinCosPositionEmbedding") else "learn",
        all_tokens=("TokenPooling" in found and pooling == "token"
                    and not encoder.class_token_only),
    )
    stem = found.get("ResNetStem")
    if stem is not None:
        kwargs.update(resnet_layers=stem.layers,
                      resnet_width=stem.width_factor)
    # After the pooling: the pre-logits layer has an activation (tanh),
    # the head has none.
    for layer in dense:
        if layer.activation is not keras.activations.linear:
            kwargs.update(
                representation_size=layer.units,
                pre_logits_activation=keras.activations.serialize(
                    layer.activation))
            continue
        kwargs.update(
            num_classes=layer.units,
            head_zero_init=isinstance(layer.kernel_initializer,
                                      keras.initializers.Zeros),
            head_bias_init=float(
                getattr(layer.bias_initializer, "value", 0.0)))
    height, width = (stem or embed).input.shape[1:3]
    kwargs["dynamic_image_size"] = height is None
    grid = getattr(posemb, "grid_size", None)
    if grid is not None:  # dynamic: the size the table is kept at
        height, width = grid[0] * posemb.stride, grid[1] * posemb.stride
    elif height is None:  # sin-cos at any size: the smallest it accepts
        height = width = posemb.stride
    kwargs["image_size"] = (height, width)
    kwargs["variant"] = variant_of(kwargs)
    return Architecture(**kwargs)
