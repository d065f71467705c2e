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

from keras_vit import layers as vit_layers
from keras_vit import resnet

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

# The variants users can name. Hybrids ("R50+B/16") are ResNet stages
# followed by a ViT with patch size 1 on the feature map; their ResNet depth
# per stage is in HYBRID_RESNETS.
VARIANTS = (
    "Ti/16", "S/16", "S/32", "B/16", "B/32", "B/8", "L/16", "L/32", "H/14",
    "R50+B/16", "R50+L/32", "R26+S/32",
)

# ResNet (BiT) depth per stage of each hybrid. R50+B/16 is ResNet-50 with
# stage 4 removed and its layers moved into stage 3 (paper Section 4.1).
HYBRID_RESNETS = {
    "R50+B/16": (3, 4, 9),
    "R50+L/32": (3, 4, 6, 3),
    "R26+S/32": (2, 2, 2, 2),
}

_VARIANT_RE = re.compile(r"^(?:(R\d+)\+)?(Ti|S|B|L|H)/(\d+)$")


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    """A decoded variant string."""

    size: ViTSize
    patch_size: int
    resnet_layers: Optional[Tuple[int, ...]] = None


def decode_variant(variant: str) -> VariantSpec:
    """Decodes "B/16", "L/32", "R50+B/16", ... into sizes.

    For hybrids the ViT patch size is 1 (on the ResNet feature map); the
    number after the slash is the total stride of the ResNet.
    """
    if variant not in VARIANTS:
        raise ValueError(
            f"Unknown variant {variant!r}. Known variants: "
            f"{', '.join(VARIANTS)}; or pass variant=None with explicit "
            "patch_size, hidden_size, num_layers, num_heads and mlp_dim."
        )
    match = _VARIANT_RE.match(variant)
    resnet, width, patch = match.groups()
    if resnet:
        return VariantSpec(WIDTHS[width], 1, HYBRID_RESNETS[variant])
    return VariantSpec(WIDTHS[width], int(patch))


def _image_hw(image_size: ImageSize) -> Tuple[int, int]:
    if isinstance(image_size, int):
        hw = (image_size, image_size)
    else:
        hw = tuple(int(s) for s in image_size)
    if len(hw) != 2 or min(hw) <= 0:
        raise ValueError(
            f"image_size must be a positive int or (height, width), got "
            f"{image_size!r}."
        )
    return hw


def _resnet_stride(resnet_layers: Sequence[int]) -> int:
    # Root: conv stride 2 + max-pool stride 2; then stride 2 per stage after
    # the first.
    return 4 * 2 ** (len(resnet_layers) - 1)


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
    patch_size: Optional[int] = None,
    hidden_size: Optional[int] = None,
    num_layers: Optional[int] = None,
    num_heads: Optional[int] = None,
    mlp_dim: Optional[int] = None,
    resnet_layers: Optional[Sequence[int]] = None,
    resnet_width: int = 1,
    all_tokens: bool = False,
    dynamic_image_size: bool = False,
    approximate_gelu: bool = True,
    layer_norm_epsilon: float = vit_layers.LAYER_NORM_EPSILON,
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
        head_bias_init: float. Initial value of every head bias. The
            authors pre-trained the released ImageNet-21k models with a
            sigmoid loss and this at -10 (google-research/vision_transformer
            #2), so that every class starts at probability ~4.5e-5 instead
            of 0.5 and the first steps are not spent pushing 21k logits
            down.
        patch_size, hidden_size, num_layers, num_heads, mlp_dim: int or None.
            Override the variant's sizes (required when `variant` is None).
        resnet_layers: tuple of int or None. Bottleneck units per ResNet
            stage: makes a hybrid (overrides a hybrid variant's stages).
        resnet_width: int. ResNet width factor (hybrids only).
        all_tokens: bool. With "token" pooling the last encoder block
            computes only the class token, the one token the head reads
            (6.3% fewer FLOPs for B/16, the same outputs), and the encoder
            layer ("Transformer") outputs (batch, 1, width). True computes
            every token's final state there, for reading patch features
            from `model.get_layer("Transformer").output`. Weights are the
            same either way.
        dynamic_image_size: bool. Accept images of any height and width
            divisible by the patch size (times the ResNet stride for
            hybrids): the input is (batch, None, None, 3), and every call
            interpolates the position embeddings, kept at the `image_size`
            grid, to the input's grid, as the checkpoint loader does when
            it resizes them. The logits at a new size equal those of a
            model built at that size with the resized weights; the cost is
            that interpolation on every call. Weights are the same as with
            False.
        approximate_gelu: bool. The MLP's GELU in the official tanh
            approximation; False: the exact erf form, as PyTorch models
            (Hugging Face, timm) were trained with.
        layer_norm_epsilon: float. Every LayerNorm's epsilon: 1e-6
            officially, 1e-12 in Hugging Face's ViT.
        name: str or None. The model's name.

    Returns:
        A `keras.Model` mapping (batch, height, width, 3) images in [-1, 1]
        to logits (batch, num_classes), or to features if num_classes == 0.
    """
    if variant is not None:
        spec = decode_variant(variant)
        size, default_patch = spec.size, spec.patch_size
        if resnet_layers is None:
            resnet_layers = spec.resnet_layers
    else:
        missing = [
            arg
            for arg, value in (
                ("patch_size", patch_size),
                ("hidden_size", hidden_size),
                ("num_layers", num_layers),
                ("num_heads", num_heads),
                ("mlp_dim", mlp_dim),
            )
            if value is None
        ]
        if missing:
            raise ValueError(
                "variant=None needs explicit sizes; missing: "
                f"{', '.join(missing)}."
            )
        size, default_patch = None, None
    patch_size = int(patch_size if patch_size is not None else default_patch)
    if hidden_size is None:
        hidden_size = size.hidden_size
    hidden_size = int(hidden_size)
    num_layers = int(num_layers if num_layers is not None else size.num_layers)
    num_heads = int(num_heads if num_heads is not None else size.num_heads)
    mlp_dim = int(mlp_dim if mlp_dim is not None else size.mlp_dim)

    for arg, value in (
        ("patch_size", patch_size),
        ("hidden_size", hidden_size),
        ("num_layers", num_layers),
        ("num_heads", num_heads),
        ("mlp_dim", mlp_dim),
    ):
        if value <= 0:
            raise ValueError(f"{arg} must be positive, got {value}.")
    if hidden_size % num_heads:
        raise ValueError(
            f"num_heads {num_heads} does not divide hidden_size "
            f"{hidden_size}: choose a head count that divides the width."
        )
    if int(num_classes) < 0:
        raise ValueError(f"num_classes must be >= 0, got {num_classes}.")
    if representation_size is not None and int(representation_size) <= 0:
        raise ValueError(
            f"representation_size must be positive or None, got "
            f"{representation_size}."
        )
    vit_layers.check_rate("dropout_rate", dropout_rate)
    vit_layers.check_rate("attention_dropout_rate", attention_dropout_rate)
    if pooling not in ("token", "gap"):
        raise ValueError(f'pooling must be "token" or "gap", got {pooling!r}.')

    height, width = _image_hw(image_size)
    stride = patch_size
    if resnet_layers is not None:
        resnet_layers = tuple(int(n) for n in resnet_layers)
        stride *= _resnet_stride(resnet_layers)
    for side, value in (("height", height), ("width", width)):
        if value % stride:
            what = f"patch size {patch_size}"
            if resnet_layers is not None:
                what = f"the total stride {stride} (ResNet x patch size)"
            raise ValueError(
                f"image_size {side} {value} is not divisible by {what}: use a "
                f"multiple of {stride}, e.g. "
                f"{max(stride, value // stride * stride)}."
            )

    if dynamic_image_size:
        images = keras.Input((None, None, 3), name="images")
    else:
        images = keras.Input((height, width, 3), name="images")
    x = images
    if resnet_layers is not None:
        x = resnet.ResNetStem(
            resnet_layers, width_factor=resnet_width, name="resnet"
        )(x)
    x = vit_layers.PatchEmbedding(patch_size, hidden_size, name="embedding")(x)
    if pooling == "token":
        x = vit_layers.ClassToken(name="cls")(x)
    if dynamic_image_size:
        x = vit_layers.PositionEmbedding(
            dropout_rate,
            grid_size=(height // stride, width // stride),
            stride=stride,
            num_prefix_tokens=int(pooling == "token"),
            name="posembed_input",
        )(x, images)
    else:
        x = vit_layers.PositionEmbedding(
            dropout_rate, name="posembed_input"
        )(x)
    x = vit_layers.Encoder(
        num_layers,
        num_heads,
        mlp_dim,
        dropout_rate,
        attention_dropout_rate,
        class_token_only=pooling == "token" and not all_tokens,
        approximate_gelu=approximate_gelu,
        layer_norm_epsilon=layer_norm_epsilon,
        name="Transformer",
    )(x)
    x = vit_layers.TokenPooling(pooling, name="pooling")(x)
    if representation_size is not None:
        x = keras.layers.Dense(
            int(representation_size), activation="tanh", name="pre_logits"
        )(x)
    if num_classes:
        x = keras.layers.Dense(
            int(num_classes),
            kernel_initializer="zeros" if head_zero_init else "glorot_uniform",
            bias_initializer=keras.initializers.Constant(
                float(head_bias_init)
            ),
            name="head",
            dtype="float32",  # logits stay float32 under mixed precision
        )(x)
    if name is None:
        name = f"vit_{variant}".replace("/", "_") if variant else "vit"
        name = name.replace("+", "_")
    return keras.Model(images, x, name=name)
