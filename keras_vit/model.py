"""Vision Transformer models: `VisionTransformer`, a functional
`keras.Model` that carries its `Architecture`, and `create_model`.

`create_model("B/16", num_classes=1000)` builds the paper's ViT-Base with
16 x 16 patches. Variants are decoded by one table, `VARIANTS`; explicit sizes
override a variant's or replace it (`variant=None`), so tiny models for tests
and small data are one call away.

The model's input is an image already scaled to [-1, 1] (NHWC), as in the
official implementation: resizing and scaling belong to the input pipeline
and to the export signatures.

The model describes itself: `model.architecture` is its `Architecture`
(returned by `get_config`, so a `.keras` file names what it holds and
`keras.saving.load_model` gives back a `VisionTransformer`), and
`model.parts` its layers by role. Models saved before this class existed
load as plain functional models; `as_vision_transformer` reads their
architecture from their layers and rebuilds them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Dict, Optional, Sequence

import keras

from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit import legacy, resnet
from keras_vit.architecture import (
    HYBRID_RESNETS,
    VARIANTS,
    Architecture,
    ImageSize,
    Numerics,
    decode_variant,
)
from keras_vit.architecture import image_hw as _image_hw
from keras_vit.embedding import PACKAGE
from keras_vit.errors import UsageError

__all__ = [
    "HYBRID_RESNETS", "VARIANTS", "Architecture", "Numerics", "ViTParts",
    "VisionTransformer", "architecture_of", "as_vision_transformer",
    "create_model", "default_name", "dtype_policy_of", "from_policy_config",
    "policy_scope",
    "decode_variant", "_image_hw",
]


@dataclasses.dataclass(frozen=True)
class ViTParts:
    """The layers of a `VisionTransformer` by role (None: absent). A plain
    record, not tracked by Keras: the layers belong to the model's graph,
    and a `.keras` file stores them as a functional model's."""

    patch_embedding: vit_embedding.PatchEmbedding
    position_embedding: keras.layers.Layer
    encoder: vit_layers.Encoder
    pooling: vit_layers.TokenPooling
    resnet: Optional[resnet.ResNetStem] = None
    class_token: Optional[vit_embedding.ClassToken] = None
    pre_logits: Optional[keras.layers.Dense] = None
    head: Optional[keras.layers.Dense] = None


def default_name(variant: Optional[str]) -> str:
    """The model name of a variant ("vit_B_16"; "vit" for none)."""
    name = f"vit_{variant}".replace("/", "_") if variant else "vit"
    return name.replace("+", "_")


@contextlib.contextmanager
def policy_scope(name: Optional[str]):
    """Layers built under the dtype policy `name` (None: the current)."""
    previous = keras.config.dtype_policy()
    if name is not None:
        keras.config.set_dtype_policy(name)
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


@keras.saving.register_keras_serializable(package=PACKAGE)
class VisionTransformer(keras.Model):
    """The Vision Transformer of an `Architecture`, composed with the Keras
    functional API: images in [-1, 1], (batch, height, width, 3), to logits
    (batch, num_classes), or to the (pre-logits) features with
    num_classes 0.

    Built as `create_model` builds it (most code calls that); the layers
    keep the official parameter names (`embedding`, `cls`,
    `posembed_input`, `Transformer`, `pre_logits`, `head`) for the
    checkpoint mapping.

    Args:
        architecture: Architecture (or its `to_dict()`).
        name: str or None. The model's name (None: from the variant).

    Attributes:
        architecture: Architecture. What the model is.
        parts: ViTParts. Its layers by role.
    """

    def __init__(self, architecture: Architecture, *, name=None, **kwargs):
        if not isinstance(architecture, Architecture):
            architecture = Architecture.from_dict(architecture)
        arch = architecture
        shape = (None, None) if arch.dynamic_image_size else arch.image_size
        images = keras.Input((*shape, 3), name="images")
        x, parts = images, {}
        if arch.resnet_layers is not None:
            parts["resnet"] = resnet.ResNetStem(
                arch.resnet_layers, width_factor=arch.resnet_width,
                name="resnet")
            x = parts["resnet"](x)
        parts["patch_embedding"] = vit_embedding.PatchEmbedding(
            arch.patch_size, arch.hidden_size, name="embedding")
        x = parts["patch_embedding"](x)
        if arch.num_prefix_tokens:
            parts["class_token"] = vit_embedding.ClassToken(name="cls")
            x = parts["class_token"](x)
        parts["position_embedding"] = _position_embedding(arch)
        if arch.posemb == "learn" and not arch.dynamic_image_size:
            x = parts["position_embedding"](x)
        else:  # computed at the grid of the images of every call
            x = parts["position_embedding"](x, images)
        parts["encoder"] = vit_layers.Encoder(
            arch.num_layers,
            arch.num_heads,
            arch.mlp_dim,
            arch.dropout_rate,
            arch.attention_dropout_rate,
            class_token_only=arch.pooling == "token" and not arch.all_tokens,
            stochastic_depth_rate=arch.stochastic_depth_rate,
            remat=arch.remat,
            approximate_gelu=arch.numerics.approximate_gelu,
            layer_norm_epsilon=arch.numerics.layer_norm_epsilon,
            name="Transformer",
        )
        x = parts["encoder"](x)
        parts["pooling"] = vit_layers.TokenPooling(arch.pooling,
                                                   name="pooling")
        x = parts["pooling"](x)
        if arch.representation_size is not None:
            parts["pre_logits"] = keras.layers.Dense(
                arch.representation_size,
                activation=arch.pre_logits_activation, name="pre_logits")
            x = parts["pre_logits"](x)
        if arch.num_classes:
            parts["head"] = keras.layers.Dense(
                arch.num_classes,
                kernel_initializer=(
                    "zeros" if arch.head_zero_init else "glorot_uniform"),
                bias_initializer=keras.initializers.Constant(
                    arch.head_bias_init),
                name="head",
                dtype="float32",  # logits stay float32 under mixed precision
            )
            x = parts["head"](x)
        super().__init__(
            images, x, name=name or default_name(arch.variant), **kwargs)
        self.architecture = arch
        self.parts = ViTParts(**parts)

    def get_config(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "trainable": self.trainable,
            "architecture": self.architecture.to_dict(),
            # The policy the layers were built under (mixed_bfloat16 for
            # bfloat16 training), as a functional model's layers keep it.
            "layers_dtype_policy": self.parts.encoder.dtype_policy.name,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return from_policy_config(cls, config)


def from_policy_config(cls, config: Dict[str, Any]):
    """`cls(**config)` built under the dtype policy its config records
    (`layers_dtype_policy`): a functional model class's `from_config`."""
    config = dict(config)
    policy = config.pop("layers_dtype_policy", None)
    with policy_scope(policy):
        return cls(**config)


def _position_embedding(arch: Architecture) -> keras.layers.Layer:
    prefix = arch.num_prefix_tokens
    if arch.posemb == "sincos2d":
        return vit_embedding.SinCosPositionEmbedding(
            arch.stride, num_prefix_tokens=prefix,
            dropout_rate=arch.dropout_rate, name="posembed_input")
    if arch.dynamic_image_size:
        return vit_embedding.PositionEmbedding(
            arch.dropout_rate, grid_size=arch.grid(), stride=arch.stride,
            num_prefix_tokens=prefix, name="posembed_input")
    return vit_embedding.PositionEmbedding(arch.dropout_rate,
                                           name="posembed_input")


def create_model(  # noqa: PLR0913 (the architecture's fields, by name)
    variant: Optional[str] = "B/16",
    *,
    num_classes: int,
    image_size: ImageSize = 224,
    pooling: str = "token",
    representation_size: Optional[int] = None,
    dropout_rate: float = 0.0,
    attention_dropout_rate: float = 0.0,
    head_zero_init: bool = True,
    head_bias_init: float = 0.0,
    posemb: str = "learn",
    stochastic_depth_rate: float = 0.0,
    patch_size: Optional[int] = None,
    hidden_size: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    mlp_dim: Optional[int] = None,
    resnet_layers: Optional[Sequence[int]] = None,
    resnet_width: int = 1,
    all_tokens: bool = False,
    dynamic_image_size: bool = False,
    remat: str = "none",
    numerics: Numerics = Numerics(),
    name: Optional[str] = None,
) -> VisionTransformer:
    """Builds a Vision Transformer (`VisionTransformer`).

    Args:
        variant: str or None. One of `VARIANTS` ("Ti/16", "B/16",
            "R50+B/16", ...). None builds from the explicit sizes alone.
        num_classes: int. Width of the classification head; 0: no head, a
            features model that outputs the (pre-logits) representation.
        image_size: int or (height, width). Input resolution; each side must
            be divisible by the patch size (times the ResNet stride for
            hybrids).
        patch_size, hidden_size, num_layers, num_heads, mlp_dim: int or None.
            Override the variant's sizes (required when `variant` is None).
        resnet_layers: tuple of int or None. Bottleneck units per ResNet
            stage: makes a hybrid (overrides a hybrid variant's stages).
        name: str or None. The model's name.
        pooling: str. This and representation_size, dropout_rate,
            attention_dropout_rate, head_zero_init, head_bias_init,
            posemb, stochastic_depth_rate, resnet_width, all_tokens,
            dynamic_image_size, remat and numerics are the fields of
            `keras_vit.Architecture` of these names, which says what each
            does.

    Returns:
        A `VisionTransformer` mapping (batch, height, width, 3) images in
        [-1, 1] to logits (batch, num_classes), or to features if
        num_classes == 0; `model.architecture` holds these arguments.
    """
    if num_classes is None:  # would fall back to the default, 0
        raise UsageError(
            "num_classes=None: give the head's width (0: no head, a "
            "features model).")
    if image_size is None:  # would fall back to the default, 224
        raise UsageError(
            "image_size=None: give the size the position embeddings are "
            "kept at (e.g. 224), and dynamic_image_size=True to take "
            "images of any size.")
    # Every argument but `variant` and `name` is the Architecture field of
    # its name.
    fields = dict(locals())
    del fields["variant"], fields["name"]
    arch = Architecture.create(variant, **fields)
    # Unnamed, it is named by what it is ("vit" for sizes of no variant).
    return VisionTransformer(arch, name=name)


def architecture_of(model: keras.Model) -> Architecture:
    """The Architecture of a `VisionTransformer` (or the encoder of an
    `keras_vit.mpp.MppModel`), or of a functional model
    built by an older `create_model` (read from its layers)."""
    arch = getattr(model, "architecture", None)  # also an MPP model's
    if isinstance(arch, Architecture):
        return arch
    return legacy.architecture_from_layers(model)


def dtype_policy_of(model: keras.Model):
    """A context in which layers are built under the dtype policy of the
    encoder of `model` (mixed_bfloat16 for a bfloat16 run's model)."""
    policy = None
    for layer in model.layers:
        if isinstance(layer, vit_layers.Encoder):
            policy = layer.dtype_policy.name
    return policy_scope(policy)


def as_vision_transformer(model: keras.Model) -> VisionTransformer:
    """`model` as a `VisionTransformer`: itself if it is one, else (a
    functional model built by an older `create_model`, as `.keras` files
    written before the class load) the same network rebuilt from the
    architecture its layers describe, weights copied.

    Raises:
        UsageError: any other model (one with a layer such a ViT does not
            have, named), which is never rebuilt as something else.
    """
    if isinstance(model, VisionTransformer):
        return model
    foreign = legacy.foreign_layer(model)
    if foreign:
        raise UsageError(
            f"Model {model.name!r} is not a Vision Transformer built by "
            f"keras_vit.create_model ({foreign}), and is never rebuilt as "
            "one: what needs a ViT (the commands, fine-tuning from it, its "
            "features or attention, another resolution) refuses it."
        )
    arch = legacy.architecture_from_layers(model)
    with dtype_policy_of(model):
        new = VisionTransformer(arch, name=model.name)
    new.set_weights(model.get_weights())
    return new
