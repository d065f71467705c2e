"""Vision Transformer models, composed with the Keras functional API.

`create_model("B/16", num_classes=1000)` builds the paper's ViT-Base with
16 x 16 patches. Variants are decoded by one table, `VARIANTS`; explicit sizes
override a variant's or replace it (`variant=None`), so tiny models for tests
and small data are one call away.

The model's input is an image already scaled to [-1, 1] (NHWC), as in the
official implementation: resizing and scaling belong to the input pipeline
and to the export signatures.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence, Tuple, Union

import keras

from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit import resnet
from keras_vit.errors import UsageError

ImageSize = Union[int, Tuple[int, int], Sequence[int]]


@dataclasses.dataclass(frozen=True)
class ViTSize:
    """The sizes that define a ViT encoder (paper Table 1)."""

    hidden_size: int
    num_layers: int
    mlp_dim: int
    num_heads: int


# Widths (paper Table 1; Ti and S from DeiT / AugReg, as in the official
# repository's configs).
WIDTHS = {
    "Ti": ViTSize(hidden_size=192, num_layers=12, mlp_dim=768, num_heads=3),
    "S": ViTSize(hidden_size=384, num_layers=12, mlp_dim=1536, num_heads=6),
    "B": ViTSize(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12),
    "L": ViTSize(hidden_size=1024, num_layers=24, mlp_dim=4096, num_heads=16),
    "H": ViTSize(hidden_size=1280, num_layers=32, mlp_dim=5120, num_heads=16),
}

# The variants users can name. Hybrids ("R50+B/16") are a ResNet followed by
# a ViT on its feature map; their stem and patch size are in HYBRIDS.
VARIANTS = (
    "Ti/16", "S/16", "S/32", "B/16", "B/32", "B/8", "L/16", "L/32", "H/14",
    "R50+B/16", "R50+L/32", "R26+S/32", "R+Ti/16",
)

# Hybrids: ResNet (BiT) units per stage and the ViT patch size on its
# feature map. R50+B/16 is ResNet-50 with stage 4 removed and its layers
# moved into stage 3 (paper Section 4.1). AugReg's R+Ti/16 has no stages:
# the ResNet root (7x7 stride-2 StdConv, GroupNorm, ReLU, 3x3 stride-2
# max-pool) and 8x8 patches on its 64-channel map (google-research/
# vision_transformer vit_jax/configs/models.py, get_r_ti16_config:
# resnet.num_layers = (), patches 8): a total stride of 32, 7 x 7 tokens
# at 224; the "16" is AugReg's name, not the stride.
HYBRIDS = {
    "R50+B/16": ((3, 4, 9), 1),
    "R50+L/32": ((3, 4, 6, 3), 1),
    "R26+S/32": ((2, 2, 2, 2), 1),
    "R+Ti/16": ((), 8),
}
# Units per stage of each hybrid (HYBRIDS without the patch sizes).
HYBRID_RESNETS = {name: stages for name, (stages, _) in HYBRIDS.items()}

POSEMBS = ("learn", "sincos2d")

_VARIANT_RE = re.compile(r"^(?:(R\d*)\+)?(Ti|S|B|L|H)/(\d+)$")


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    """A decoded variant string."""

    size: ViTSize
    patch_size: int
    resnet_layers: Optional[Tuple[int, ...]] = None


def decode_variant(variant: str) -> VariantSpec:
    """Decodes "B/16", "L/32", "R50+B/16", ... into sizes.

    For hybrids the ViT patch size is on the ResNet feature map (1, or 8
    for R+Ti/16); the number after the slash is the variant's name.
    """
    if variant not in VARIANTS:
        raise UsageError(
            f"Unknown variant {variant!r}. Known variants: "
            f"{', '.join(VARIANTS)}; or pass variant=None with explicit "
            "patch_size, hidden_size, num_layers, num_heads and mlp_dim."
        )
    match = _VARIANT_RE.match(variant)
    resnet, width, patch = match.groups()
    if resnet:
        stages, patch_size = HYBRIDS[variant]
        return VariantSpec(WIDTHS[width], patch_size, stages)
    return VariantSpec(WIDTHS[width], int(patch))


def _image_hw(image_size: ImageSize) -> Tuple[int, int]:
    if isinstance(image_size, int):
        hw = (image_size, image_size)
    else:
        hw = tuple(int(s) for s in image_size)
    if len(hw) != 2 or min(hw) <= 0:
        raise UsageError(
            f"image_size must be a positive int or (height, width), got "
            f"{image_size!r}."
        )
    return hw


@dataclasses.dataclass(frozen=True)
class Numerics:
    """How each block computes where weights trained elsewhere differ from
    the official ones (PyTorch: Hugging Face, timm). The defaults are the
    official implementation's.

    Attributes:
        approximate_gelu: bool. The MLP's GELU in the tanh approximation;
            False: the exact erf form, as PyTorch models were trained with.
        layer_norm_epsilon: float. Every LayerNorm's epsilon: 1e-6
            officially, 1e-12 in Hugging Face's ViT.
    """

    approximate_gelu: bool = True
    layer_norm_epsilon: float = vit_layers.LAYER_NORM_EPSILON


@dataclasses.dataclass(frozen=True)
class _Geometry:
    """The checked sizes of a model: its encoder, its patches and stem,
    its input."""

    size: ViTSize
    patch_size: int
    resnet_layers: Optional[Tuple[int, ...]]
    stride: int  # image pixels per token side: patch size x ResNet stride
    height: int
    width: int


def _resolve_sizes(variant, resnet_layers, explicit):
    """(ViTSize, patch size, ResNet stages or None): the variant's sizes
    with the `explicit` ones (a dict of patch_size, hidden_size,
    num_layers, num_heads, mlp_dim; None: the variant's) over them."""
    defaults = {}
    if variant is not None:
        spec = decode_variant(variant)
        defaults = dict(dataclasses.asdict(spec.size),
                        patch_size=spec.patch_size)
        if resnet_layers is None:
            resnet_layers = spec.resnet_layers
    missing = [k for k, v in explicit.items() if v is None and not defaults]
    if missing:
        raise UsageError(
            "variant=None needs explicit sizes; missing: "
            f"{', '.join(missing)}."
        )
    sizes = {k: int(defaults[k] if v is None else v)
             for k, v in explicit.items()}
    for arg, value in sizes.items():
        if value <= 0:
            raise UsageError(f"{arg} must be positive, got {value}.")
    if sizes["hidden_size"] % sizes["num_heads"]:
        raise UsageError(
            f"num_heads {sizes['num_heads']} does not divide hidden_size "
            f"{sizes['hidden_size']}: choose a head count that divides the "
            "width."
        )
    if resnet_layers is not None:
        resnet_layers = tuple(int(n) for n in resnet_layers)
    patch_size = sizes.pop("patch_size")
    return ViTSize(**sizes), patch_size, resnet_layers


def _geometry(variant, resnet_layers, image_size, **explicit) -> _Geometry:
    """The checked sizes of a model (`_resolve_sizes`) at `image_size`,
    whose sides the model's stride must divide."""
    size, patch_size, resnet_layers = _resolve_sizes(
        variant, resnet_layers, explicit
    )
    height, width = _image_hw(image_size)
    stride = patch_size
    if resnet_layers is not None:
        stride *= resnet.resnet_stride(resnet_layers)
    for side, value in (("height", height), ("width", width)):
        if value % stride:
            what = f"patch size {patch_size}"
            if resnet_layers is not None:
                what = f"the total stride {stride} (ResNet x patch size)"
            raise UsageError(
                f"image_size {side} {value} is not divisible by {what}: use a "
                f"multiple of {stride}, e.g. "
                f"{max(stride, value // stride * stride)}."
            )
    return _Geometry(size, patch_size, resnet_layers, stride, height, width)


def _check_options(
    *, num_classes, representation_size, dropout_rate,
    attention_dropout_rate, stochastic_depth_rate, posemb, pooling,
) -> None:
    """A UsageError naming the fix for any option out of its range."""
    if int(num_classes) < 0:
        raise UsageError(f"num_classes must be >= 0, got {num_classes}.")
    if representation_size is not None and int(representation_size) <= 0:
        raise UsageError(
            f"representation_size must be positive or None, got "
            f"{representation_size}."
        )
    vit_embedding.check_rate("dropout_rate", dropout_rate)
    vit_embedding.check_rate("attention_dropout_rate", attention_dropout_rate)
    vit_embedding.check_rate("stochastic_depth_rate", stochastic_depth_rate)
    if posemb not in POSEMBS:
        raise UsageError(
            f'posemb must be "learn" or "sincos2d", got {posemb!r}.'
        )
    if pooling not in ("token", "gap"):
        raise UsageError(f'pooling must be "token" or "gap", got {pooling!r}.')


def _stem(
    images, geometry: _Geometry, *, pooling: str, posemb: str,
    dropout_rate: float, resnet_width: int, dynamic_image_size: bool,
):
    """Images to the encoder's input tokens: the ResNet of a hybrid, the
    patch embedding, the class token ("token" pooling) and the position
    embedding."""
    x = images
    if geometry.resnet_layers is not None:
        x = resnet.ResNetStem(
            geometry.resnet_layers, width_factor=resnet_width, name="resnet"
        )(x)
    x = vit_embedding.PatchEmbedding(
        geometry.patch_size, geometry.size.hidden_size, name="embedding"
    )(x)
    prefix = int(pooling == "token")
    if prefix:
        x = vit_embedding.ClassToken(name="cls")(x)
    if posemb == "sincos2d":
        # Computed at the grid of the images of every call.
        return vit_embedding.SinCosPositionEmbedding(
            geometry.stride, num_prefix_tokens=prefix,
            dropout_rate=dropout_rate, name="posembed_input",
        )(x, images)
    if dynamic_image_size:
        stride = geometry.stride
        return vit_embedding.PositionEmbedding(
            dropout_rate,
            grid_size=(geometry.height // stride, geometry.width // stride),
            stride=stride, num_prefix_tokens=prefix, name="posembed_input",
        )(x, images)
    return vit_embedding.PositionEmbedding(
        dropout_rate, name="posembed_input"
    )(x)


def _head(
    x, *, pooling: str, representation_size: Optional[int],
    num_classes: int, head_zero_init: bool, head_bias_init: float,
):
    """Encoder output to the model's output: the pooled token, the
    pre-logits layer if asked for, and the classification head unless
    `num_classes` is 0."""
    x = vit_layers.TokenPooling(pooling, name="pooling")(x)
    if representation_size is not None:
        x = keras.layers.Dense(
            int(representation_size), activation="tanh", name="pre_logits"
        )(x)
    if not num_classes:
        return x
    return keras.layers.Dense(
        int(num_classes),
        kernel_initializer="zeros" if head_zero_init else "glorot_uniform",
        bias_initializer=keras.initializers.Constant(float(head_bias_init)),
        name="head",
        dtype="float32",  # logits stay float32 under mixed precision
    )(x)


def create_model(
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
) -> keras.Model:
    """Builds a Vision Transformer as a functional `keras.Model`.

    Args:
        variant: str or None. One of `VARIANTS` ("Ti/16", "B/16",
            "R50+B/16", ...). None builds from the explicit sizes alone.
        num_classes: int. Width of the classification head; 0 gives a
            features model that outputs the (pre-logits) representation.
        image_size: int or (height, width). Input resolution; each side must
            be divisible by the patch size (times the ResNet stride for
            hybrids). With `dynamic_image_size`, the resolution whose patch
            grid the position embeddings are kept at.
        pooling: str. "token" (class token, the paper's default) or "gap"
            (global average of patch tokens, no class token).
        representation_size: int or None. Adds the pre-logits layer
            (Dense + tanh) of this width, as at pre-training time.
        dropout_rate: float. Dropout after the position embedding and after
            every dense layer except the qkv projection.
        attention_dropout_rate: float. Dropout on attention weights.
        head_zero_init: bool. Zero-initialise the head (the paper's choice
            for transfer); otherwise Xavier-uniform.
        head_bias_init: float. Initial value of every head bias (-10 for
            the released ImageNet-21k models' sigmoid loss,
            google-research/vision_transformer #2).
        posemb: str. "learn" (the paper's learned table, one row per
            token) or "sincos2d" (fixed 2-D sin-cos embeddings of the patch
            grid, big_vision's; no weights, any input size).
        stochastic_depth_rate: float. Stochastic depth of the last encoder
            block while training, linear over depth (`keras_vit.droppath`).
        patch_size, hidden_size, num_layers, num_heads, mlp_dim: int or None.
            Override the variant's sizes (required when `variant` is None).
        resnet_layers: tuple of int or None. Bottleneck units per ResNet
            stage: makes a hybrid (overrides a hybrid variant's stages).
        resnet_width: int. ResNet width factor (hybrids only).
        all_tokens: bool. With "token" pooling the last encoder block
            computes only the class token, the one token the head reads
            (6.3% fewer FLOPs for B/16, the same outputs). True computes
            every token there, for reading patch features from
            `model.get_layer("Transformer").output`. Same weights.
        dynamic_image_size: bool. Accept images of any height and width
            divisible by the patch size (times the ResNet stride for
            hybrids): the input is (batch, None, None, 3), and every call
            interpolates the position embeddings, kept at the `image_size`
            grid, to the input's grid, as the checkpoint loader does. The
            same weights as with False.
        remat: str. Rematerialisation of the encoder blocks in training
            (`keras_vit.remat`): "none", "block" or "dots" (JAX only). The
            same gradients and weights, less activation memory for more
            compute (benchmarks/memory.py).
        numerics: Numerics. The GELU form and LayerNorm epsilon, for
            weights trained with other ones (PyTorch: exact GELU; Hugging
            Face: epsilon 1e-12). The default is the official numerics.
        name: str or None. The model's name.

    Returns:
        A `keras.Model` mapping (batch, height, width, 3) images in [-1, 1]
        to logits (batch, num_classes), or to features if num_classes == 0.
    """
    geometry = _geometry(
        variant, resnet_layers, image_size, patch_size=patch_size,
        hidden_size=hidden_size, num_layers=num_layers, num_heads=num_heads,
        mlp_dim=mlp_dim,
    )
    _check_options(
        num_classes=num_classes, representation_size=representation_size,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        stochastic_depth_rate=stochastic_depth_rate, posemb=posemb,
        pooling=pooling,
    )
    if not isinstance(numerics, Numerics):
        raise UsageError(
            f"numerics must be a keras_vit.model.Numerics, got {numerics!r}."
        )
    if dynamic_image_size:
        images = keras.Input((None, None, 3), name="images")
    else:
        images = keras.Input((geometry.height, geometry.width, 3),
                             name="images")
    x = _stem(
        images, geometry, pooling=pooling, posemb=posemb,
        dropout_rate=dropout_rate, resnet_width=resnet_width,
        dynamic_image_size=dynamic_image_size,
    )
    size = geometry.size
    x = vit_layers.Encoder(
        size.num_layers,
        size.num_heads,
        size.mlp_dim,
        dropout_rate,
        attention_dropout_rate,
        class_token_only=pooling == "token" and not all_tokens,
        stochastic_depth_rate=stochastic_depth_rate,
        remat=remat,
        approximate_gelu=numerics.approximate_gelu,
        layer_norm_epsilon=numerics.layer_norm_epsilon,
        name="Transformer",
    )(x)
    x = _head(
        x, pooling=pooling, representation_size=representation_size,
        num_classes=num_classes, head_zero_init=head_zero_init,
        head_bias_init=head_bias_init,
    )
    if name is None:
        name = f"vit_{variant}".replace("/", "_") if variant else "vit"
        name = name.replace("+", "_")
    return keras.Model(images, x, name=name)
