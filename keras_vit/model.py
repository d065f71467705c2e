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
from keras import ops

from keras_vit import layers as vit_layers

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
        from keras_vit import resnet

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


def features_model(model: keras.Model) -> keras.Model:
    """The same network up to the pre-logits representation (shared weights).

    Few-shot probes, fine-tuning and the export's `features` signature use
    this: the output of `pre_logits` if the model has one, else the pooled
    token. Calling it does not copy weights.
    """
    names = {layer.name for layer in model.layers}
    last = "pre_logits" if "pre_logits" in names else "pooling"
    return keras.Model(
        model.input, model.get_layer(last).output, name=f"{model.name}_features"
    )


class _EncoderWithAttention(keras.layers.Layer):
    """Calls a built `Encoder` with `return_attention_scores=True`.

    A layer of its own because a Keras functional graph takes a layer's
    output structure from its first call, and the encoder's first call (in
    the classifier) returns a single tensor. The encoder's weights are shared,
    not copied.
    """

    def __init__(self, encoder: vit_layers.Encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder

    def call(self, x):
        return self.encoder(x, return_attention_scores=True)


def _encoder(model: keras.Model) -> vit_layers.Encoder:
    for layer in model.layers:
        if isinstance(layer, vit_layers.Encoder):
            return layer
    raise ValueError(
        f"Model {model.name!r} has no Encoder layer: it is not a Vision "
        "Transformer built by keras_vit.create_model."
    )


def attention_model(model: keras.Model) -> keras.Model:
    """A model returning (output, [attention weights per layer]).

    Shares the weights of `model` (same layers, no new parameters); each
    attention tensor has shape (batch, heads, query tokens, key tokens).
    A separate call path, so training and inference pay nothing for it.
    Works at any input size for a model with `dynamic_image_size`.
    """
    encoder = _encoder(model)
    # From the encoder's input in the model's own graph, so that what comes
    # before it (one input or two, a ResNet or not) is reused as it is.
    x, attention = _EncoderWithAttention(encoder, name="attention")(
        encoder.input
    )
    after = model.layers[model.layers.index(encoder) + 1:]
    for layer in after:
        x = layer(x)
    return keras.Model(
        model.input, [x, attention], name=f"{model.name}_attention"
    )


def model_stride(model: keras.Model) -> int:
    """int. Image pixels per patch side: the patch size, times the ResNet
    stride for hybrids. Input sides must be multiples of it."""
    stride = model.get_layer("embedding").patch_size
    if "resnet" in {layer.name for layer in model.layers}:
        stride *= model.get_layer("resnet").stride
    return stride


def input_image_size(model: keras.Model) -> Tuple[int, int]:
    """(height, width). A fixed-size model's input size (None for a side
    of unknown size); for a model with `dynamic_image_size`, the size its
    position embeddings are kept at (the `image_size` it was created
    with)."""
    names = {layer.name for layer in model.layers}
    grid = None
    if "posembed_input" in names:
        grid = model.get_layer("posembed_input").grid_size
    if grid is None:
        return tuple(
            None if side is None else int(side)
            for side in model.input_shape[1:3]
        )
    stride = model_stride(model)
    return grid[0] * stride, grid[1] * stride


def with_dynamic_image_size(model: keras.Model) -> keras.Model:
    """The same network taking images of any size, weights copied.

    As `create_model(..., dynamic_image_size=True)` with the weights of
    `model`, a fixed-size model built by `create_model` (or loaded from its
    .keras file): its position embeddings are kept at its grid and
    interpolated to each input's. A model that already has a dynamic image
    size is returned as is. The original model is not modified.
    """
    posembed = model.get_layer("posembed_input")
    if posembed.grid_size is not None:
        return model
    height, width = input_image_size(model)
    stride = model_stride(model)
    has_class_token = any(
        isinstance(layer, vit_layers.ClassToken) for layer in model.layers
    )
    images = keras.Input((None, None, model.input_shape[-1]), name="images")
    x = images
    # create_model's models are a chain of layers, input to output.
    for layer in model.layers[1:]:
        config = layer.get_config()
        if layer is posembed:
            config.update(
                grid_size=(height // stride, width // stride),
                stride=stride,
                num_prefix_tokens=int(has_class_token),
            )
            copy = layer.__class__.from_config(config)
            x = copy(x, images)
        else:
            copy = layer.__class__.from_config(config)
            x = copy(x)
        copy.set_weights(layer.get_weights())
    return keras.Model(images, x, name=model.name)


class _Intermediates(keras.layers.Layer):
    """Runs a built `Encoder`'s blocks up to the last one asked for and
    returns the chosen blocks' outputs (a list, in the order asked).

    Every token is computed in every block run (no class-token-only last
    block); the blocks after the last one asked for are not run. The
    encoder's weights are shared, not copied.
    """

    def __init__(self, encoder, blocks, norm, output, patch_size,
                 num_prefix_tokens, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.block_indices = tuple(blocks)
        self.norm = norm
        self.output_kind = output
        self.patch_size = patch_size
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens, features, training=None):
        wanted = {}
        x = tokens
        for i, block in enumerate(self.encoder.blocks):
            if i > max(self.block_indices):
                break
            x = block(x, training=training)
            if i in self.block_indices:
                wanted[i] = self.encoder.encoder_norm(x) if self.norm else x
        outputs = [wanted[i] for i in self.block_indices]
        if self.output_kind == "grid":
            shape = ops.shape(features)
            rows = shape[1] // self.patch_size
            cols = shape[2] // self.patch_size
            outputs = [
                ops.reshape(
                    y[:, self.num_prefix_tokens:],
                    (-1, rows, cols, ops.shape(y)[-1]),
                )
                for y in outputs
            ]
        return outputs

    def compute_output_spec(self, tokens, features, training=None):
        batch, length, width = tokens.shape
        if self.output_kind == "grid":
            rows, cols = (
                None if side is None else side // self.patch_size
                for side in features.shape[1:3]
            )
            shape = (batch, rows, cols, width)
        else:
            shape = (batch, length, width)
        return [
            keras.KerasTensor(shape, dtype=self.compute_dtype)
            for _ in self.block_indices
        ]


def intermediate_model(
    model: keras.Model,
    blocks: Union[int, Sequence[int]] = (-1,),
    *,
    norm: bool = False,
    output: str = "tokens",
) -> keras.Model:
    """Token features of chosen encoder blocks, from one forward pass.

    For dense prediction, probing and analysis: the returned model maps the
    images of `model` (any size if it has `dynamic_image_size`) to a dict
    {"block_{i}": features of block i}, one entry per block asked for, in
    the order asked (i counted from 0, negative indices resolved). The
    blocks run once, up to the deepest one asked for; the weights are those
    of `model` (shared, not copied).

    Args:
        model: keras.Model. A keras_vit model (classifier or features).
        blocks: int or sequence of int. Block indices, 0 to num_layers - 1;
            negative ones count from the end (-1: the last block).
        norm: bool. Apply the encoder's final LayerNorm (`encoder_norm`) to
            each output, as the encoder does to its last block's.
        output: str. "tokens": the token sequence, (batch, 1 + h * w,
            width) with the class token first ("token" pooling), (batch,
            h * w, width) with "gap" pooling. "grid": the patch tokens as
            a 2-D grid, (batch, h, w, width), without the class token.
            h and w are the input's height and width over the model's
            stride (`model_stride`); patches run row-major.

    Returns:
        keras.Model. Images to a dict of `len(blocks)` tensors.
    """
    if output not in ("tokens", "grid"):
        raise ValueError(
            f'output must be "tokens" or "grid", got {output!r}.'
        )
    encoder = _encoder(model)
    count = encoder.num_layers
    asked = [blocks] if isinstance(blocks, int) else list(blocks)
    if not asked:
        raise ValueError("blocks is empty: name at least one block.")
    indices = []
    for index in asked:
        if not -count <= int(index) < count:
            raise ValueError(
                f"Block {index} does not exist: the model has {count} "
                f"blocks, 0 to {count - 1} (or -{count} to -1 from the end)."
            )
        indices.append(int(index) % count)
    if len(set(indices)) != len(indices):
        raise ValueError(f"blocks {asked} name a block twice.")
    embedding = model.get_layer("embedding")
    has_class_token = any(
        isinstance(layer, vit_layers.ClassToken) for layer in model.layers
    )
    outputs = _Intermediates(
        encoder,
        indices,
        bool(norm),
        output,
        embedding.patch_size,
        int(has_class_token),
        name="intermediates",
    )(encoder.input, embedding.input)
    # A dict, not a list: Keras returns a one-output list as a bare tensor.
    outputs = {f"block_{i}": y for i, y in zip(indices, outputs)}
    return keras.Model(
        model.input, outputs, name=f"{model.name}_intermediates"
    )
