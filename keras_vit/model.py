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
        posemb: str. "learn" (the paper's learned table, one row per
            token) or "sincos2d" (fixed 2-D sin-cos embeddings of the patch
            grid, big_vision's; no weights, any input size).
        stochastic_depth_rate: float. Stochastic depth of the last encoder
            block while training; block i of L drops each residual branch
            of an example with rate * i / (L - 1), linear over depth as in
            timm and DeiT (`keras_vit.droppath`). Inference is unchanged.
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
        remat: str. Rematerialisation of the encoder blocks in training
            (keras_vit.remat): "none"; "block", each block's activations
            recomputed in the backward pass instead of kept (one more
            forward pass per step, a fraction of the activation memory;
            benchmarks/memory.py); "dots" (JAX backend only), only the
            dense layers' matmul outputs kept. Gradients, weights and
            checkpoints are the same as with "none".
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
            raise UsageError(
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
            raise UsageError(f"{arg} must be positive, got {value}.")
    if hidden_size % num_heads:
        raise UsageError(
            f"num_heads {num_heads} does not divide hidden_size "
            f"{hidden_size}: choose a head count that divides the width."
        )
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

    height, width = _image_hw(image_size)
    stride = patch_size
    if resnet_layers is not None:
        resnet_layers = tuple(int(n) for n in resnet_layers)
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

    if dynamic_image_size:
        images = keras.Input((None, None, 3), name="images")
    else:
        images = keras.Input((height, width, 3), name="images")
    x = images
    if resnet_layers is not None:
        x = resnet.ResNetStem(
            resnet_layers, width_factor=resnet_width, name="resnet"
        )(x)
    x = vit_embedding.PatchEmbedding(
        patch_size, hidden_size, name="embedding"
    )(x)
    if pooling == "token":
        x = vit_embedding.ClassToken(name="cls")(x)
    if posemb == "sincos2d":
        # Computed at the grid of the images of every call.
        x = vit_embedding.SinCosPositionEmbedding(
            stride,
            num_prefix_tokens=int(pooling == "token"),
            dropout_rate=dropout_rate,
            name="posembed_input",
        )(x, images)
    elif dynamic_image_size:
        x = vit_embedding.PositionEmbedding(
            dropout_rate,
            grid_size=(height // stride, width // stride),
            stride=stride,
            num_prefix_tokens=int(pooling == "token"),
            name="posembed_input",
        )(x, images)
    else:
        x = vit_embedding.PositionEmbedding(
            dropout_rate, name="posembed_input"
        )(x)
    x = vit_layers.Encoder(
        num_layers,
        num_heads,
        mlp_dim,
        dropout_rate,
        attention_dropout_rate,
        class_token_only=pooling == "token" and not all_tokens,
        stochastic_depth_rate=stochastic_depth_rate,
        remat=remat,
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
