"""Masked patch prediction (MPP): the paper's self-supervised objective
(Section 4.6, Appendix B.1.2), as portable Keras 3.

Half of each image's patch embeddings are corrupted after the patch
projection and before the position embeddings are added, as in BERT: of the
corrupted ones, 80% become a learnable [mask] embedding, 10% the embedding
of another patch of the same image, 10% stay as they are. A small head on
every patch's output token predicts the corrupted patches' 3-bit mean colour
(each RGB channel quantised to 8 levels: 512 classes); the loss counts the
corrupted patches only.

`create_mpp_model` builds that network from the layers `create_model` makes,
under the same names, so the encoder's weights are those of a classifier
(`keras_vit.checkpoint` reads and writes them in the official layout; the
mask token and the MPP head are the only weights of its own).
`encoder_model` copies them into a features model, the form every other tool
takes. Which patches are corrupted, and how, is an input of the model
(`mpp_mode`, `mpp_source`), drawn by the input pipeline
(`keras_vit.data.masking`), so the network itself is deterministic.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import keras
from keras import ops

from keras_vit import layers as vit_layers
from keras_vit import legacy
from keras_vit.architecture import Architecture
from keras_vit.embedding import PACKAGE, patch_grid
from keras_vit.errors import UsageError
from keras_vit.model import (
    VisionTransformer,
    default_name,
    dtype_policy_of,
    from_policy_config,
)

# What is predicted for each corrupted patch: its mean colour (one class of
# 2**(3 * bits)), the mean colours of a grid_size x grid_size downsized
# patch (grid_size**2 such classes), or all its pixels (L2 regression).
TARGETS = ("mean_colour", "colour_grid", "pixels")

# `mpp_mode` values: how each patch embedding is corrupted.
NOT_CORRUPTED, MASKED, REPLACED, KEPT = 0, 1, 2, 3

INPUT_NAMES = ("images", "mpp_mode", "mpp_source")


def check_options(
    target: str,
    colour_bits: int = 3,
    grid_size: int = 4,
    stride: Optional[int] = None,
    corrupt_rate: float = 0.5,
    mask_fraction: float = 0.8,
    random_fraction: float = 0.1,
) -> None:
    """Raises a ValueError naming the fix for options that cannot work;
    `stride`: the model's pixels per token side (`Architecture.stride`),
    which a colour grid must divide (None: not checked)."""
    if target not in TARGETS:
        raise UsageError(
            f"MPP target {target!r} is unknown: use one of "
            f"{', '.join(TARGETS)}."
        )
    if not 1 <= int(colour_bits) <= 8:
        raise UsageError(
            f"colour_bits must be in 1..8 (3: the paper's 512 classes), got "
            f"{colour_bits}."
        )
    if target == "colour_grid" and stride is not None and (
        int(grid_size) < 1 or stride % int(grid_size)
    ):
        raise UsageError(
            f"grid_size {grid_size} does not divide the patch size "
            f"{stride} (the model's stride): use a divisor of it (the "
            "paper: 4 for 16)."
        )
    if not 0.0 < float(corrupt_rate) <= 1.0:
        raise UsageError(
            f"corrupt_rate must be in (0, 1] (the paper: 0.5), got "
            f"{corrupt_rate}."
        )
    if min(mask_fraction, random_fraction) < 0 or (
        mask_fraction + random_fraction > 1.0
    ):
        raise UsageError(
            "mask_fraction and random_fraction must be >= 0 with a sum <= 1 "
            f"(the paper: 0.8 and 0.1), got {mask_fraction} and "
            f"{random_fraction}."
        )


def check_patches(patches: int) -> None:
    """Raises naming the fix when an image has fewer than 2 patches (one
    patch has no other to take its place, nor context to predict from)."""
    if patches < 2:
        raise UsageError(
            f"Masked patch prediction needs at least 2 patches per image, "
            f"and this model cuts its images into {patches}: use a smaller "
            "patch size or a larger image_size (config.model.patch_size, "
            "config.model.image_size).")


def num_colour_classes(colour_bits: int = 3) -> int:
    """int. Classes of one colour target: 2**bits levels per channel."""
    return (2 ** int(colour_bits)) ** 3


def output_width(
    target: str, stride: int, colour_bits: int = 3, grid_size: int = 4
) -> int:
    """int. The MPP head's outputs per patch token, for a model of `stride`
    pixels per token side."""
    check_options(target, colour_bits, grid_size, stride)
    if target == "pixels":
        return stride * stride * 3
    cells = grid_size * grid_size if target == "colour_grid" else 1
    return cells * num_colour_classes(colour_bits)


# ---------------------------------------------------------------- targets
def quantise_colours(rgb, colour_bits: int = 3):
    """int32 class of mean colours `rgb` (..., 3) in [-1, 1]: each channel
    cut into 2**bits equal bins of [-1, 1] (1.0 falls in the top one), the
    class r * L**2 + g * L + b for bin indices r, g, b of L levels."""
    levels = 2 ** int(colour_bits)
    bins = ops.floor((ops.cast(rgb, "float32") + 1.0) * (levels / 2.0))
    bins = ops.cast(ops.clip(bins, 0, levels - 1), "int32")
    return (bins[..., 0] * levels + bins[..., 1]) * levels + bins[..., 2]


def colour_centres(classes, colour_bits: int = 3):
    """float32 (..., 3) in [-1, 1]: the colour at the centre of each class's
    bin (the inverse of `quantise_colours`, for pictures)."""
    levels = 2 ** int(colour_bits)
    classes = ops.cast(classes, "int32")
    channels = [
        (classes // (levels * levels)) % levels,
        (classes // levels) % levels,
        classes % levels,
    ]
    bins = ops.cast(ops.stack(channels, axis=-1), "float32")
    return (bins + 0.5) * (2.0 / levels) - 1.0


def colour_targets(images, stride: int, colour_bits: int = 3,
                   grid_size: int = 1):
    """(batch, patches, grid_size**2) int32 colour classes of each patch.

    Each patch (row-major, the token order) is downsized to grid_size x
    grid_size cells by averaging; each cell's mean colour is quantised by
    `quantise_colours`. grid_size 1 is the paper's mean-colour target.

    Args:
        images: (batch, height, width, 3) in [-1, 1], the model's input.
        stride: int. Image pixels per token side (`Architecture.stride`:
            the patch size, times the ResNet stride for hybrids).
        colour_bits: int. Bits per channel (3: 512 classes).
        grid_size: int. Cells per patch side; divides `stride`.
    """
    rows, cols = patch_grid(images, stride)
    cell = stride // grid_size
    x = ops.cast(images, "float32")
    x = ops.reshape(x, (-1, rows * grid_size, cell, cols * grid_size, cell,
                        3))
    classes = quantise_colours(ops.mean(x, axis=(2, 4)), colour_bits)
    classes = ops.reshape(classes, (-1, rows, grid_size, cols, grid_size))
    classes = ops.transpose(classes, (0, 1, 3, 2, 4))
    return ops.reshape(classes, (-1, rows * cols, grid_size * grid_size))


def patch_pixels(images, stride: int):
    """(batch, patches, stride**2 * 3) float32: each patch's pixels (rows,
    then columns, then RGB), patches row-major; `stride` as in
    `colour_targets`."""
    rows, cols = patch_grid(images, stride)
    x = ops.cast(images, "float32")
    x = ops.reshape(x, (-1, rows, stride, cols, stride, 3))
    x = ops.transpose(x, (0, 1, 3, 2, 4, 5))
    return ops.reshape(x, (-1, rows * cols, stride * stride * 3))


# ------------------------------------------------------------------ model
@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchCorruption(keras.layers.Layer):
    """Corrupts patch embeddings as `mpp_mode` says (BERT-style).

    Called on (tokens, mode, source): tokens (batch, patches, width); mode
    (batch, patches) int, MASKED: the learnable [mask] embedding, REPLACED:
    the embedding of patch `source` of the same image, NOT_CORRUPTED or
    KEPT: unchanged. The mask token starts N(0, 0.02), as the position
    embeddings do.
    """

    def build(self, input_shape):
        self.mask_token = self.add_weight(
            shape=(1, 1, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="mask_token",
        )
        self.built = True

    def call(self, tokens, mode, source):
        index = ops.broadcast_to(
            ops.cast(source, "int32")[..., None], ops.shape(tokens)
        )
        replaced = ops.take_along_axis(tokens, index, axis=1)
        mode = ops.cast(mode, "int32")[..., None]
        mask = ops.cast(self.mask_token, tokens.dtype)
        x = ops.where(mode == REPLACED, replaced, tokens)
        return ops.where(mode == MASKED, mask, x)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)


def _copy(layer):
    return layer.__class__.from_config(layer.get_config())


@keras.saving.register_keras_serializable(package=PACKAGE)
class MppModel(keras.Model):
    """The ViT encoder of an `Architecture` with the corruption layer and an
    MPP head, composed with the Keras functional API from the layers a
    `VisionTransformer` of that architecture has, under the same names (so
    its encoder weights are a classifier's).

    Args:
        architecture: Architecture (or its `to_dict()`). The encoder's: it
            is kept with no classes, no pre-logits layer and every token
            computed (the head reads each patch token). Needs a fixed
            image size.
        target: str. One of `TARGETS`.
        colour_bits: int. Bits per colour channel of the colour targets.
        grid_size: int. "colour_grid": cells per patch side.
        name: str or None. The model's name (None: "mpp_" and the
            variant's).

    Attributes:
        architecture: Architecture. The encoder.
        target, colour_bits, grid_size: what the head predicts.
    """

    def __init__(self, architecture: Architecture, *,
                 target: str = "mean_colour", colour_bits: int = 3,
                 grid_size: int = 4, name: Optional[str] = None, **kwargs):
        if not isinstance(architecture, Architecture):
            architecture = Architecture.from_dict(architecture)
        if architecture.representation_size is not None:
            raise UsageError(
                "An MPP model has no pre-logits layer: leave "
                "representation_size None for pre-training (fine-tuning "
                "may add one).")
        if architecture.dynamic_image_size:
            raise UsageError("MPP pre-training needs a fixed image_size.")
        arch = dataclasses.replace(
            architecture, num_classes=0, all_tokens=True,
            head_zero_init=True, head_bias_init=0.0)
        width = output_width(target, arch.stride, colour_bits, grid_size)
        parts = VisionTransformer(arch).parts
        rows, cols = arch.grid()
        check_patches(rows * cols)
        images = keras.Input((*arch.image_size, 3), name="images")
        mode = keras.Input((rows * cols,), dtype="int32", name="mpp_mode")
        source = keras.Input((rows * cols,), dtype="int32",
                             name="mpp_source")
        # Fresh copies of the classifier's layers (same names and weights'
        # names), chained with the corruption between the patch embedding
        # and the position embedding.
        x = images
        if parts.resnet is not None:
            x = _copy(parts.resnet)(x)
        x = _copy(parts.patch_embedding)(x)
        x = PatchCorruption(name="mpp_corruption")(x, mode, source)
        if parts.class_token is not None:
            x = _copy(parts.class_token)(x)
        if arch.posemb == "learn":
            x = _copy(parts.position_embedding)(x)
        else:  # computed from the images' grid, as the classifier's
            x = _copy(parts.position_embedding)(x, images)
        x = _copy(parts.encoder)(x)
        if parts.class_token is not None:
            x = x[:, 1:]
        x = keras.layers.Dense(
            width, name="mpp_head", dtype="float32",  # float32 under bf16
        )(x)
        super().__init__(
            {"images": images, "mpp_mode": mode, "mpp_source": source}, x,
            name=name or f"mpp_{default_name(arch.variant)}", **kwargs)
        self.architecture = arch
        self.target = target
        self.colour_bits = int(colour_bits)
        self.grid_size = int(grid_size)

    def get_config(self):
        return {
            "name": self.name,
            "trainable": self.trainable,
            "architecture": self.architecture.to_dict(),
            "target": self.target,
            "colour_bits": self.colour_bits,
            "grid_size": self.grid_size,
            "layers_dtype_policy": next(
                layer.dtype_policy.name for layer in self.layers
                if isinstance(layer, vit_layers.Encoder)),
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        return from_policy_config(cls, config)


def create_mpp_model(
    variant: Optional[str] = "B/16",
    *,
    target: str = "mean_colour",
    colour_bits: int = 3,
    grid_size: int = 4,
    image_size=224,
    pooling: str = "token",
    name: Optional[str] = None,
    **kwargs,
) -> MppModel:
    """The ViT encoder with the corruption layer and an MPP head
    (`MppModel`).

    Args:
        variant: str or None. As for `create_model`.
        target: str. One of `TARGETS`.
        colour_bits: int. Bits per colour channel of the colour targets.
        grid_size: int. "colour_grid": cells per patch side.
        image_size: int or (height, width). Fixed input size.
        pooling: str. "token" keeps the class token in the sequence (the
            classifier fine-tuned from this encoder reads it); "gap" has
            none.
        name: str or None. The model's name.
        **kwargs: the sizes, dropout rates and ResNet options of
            `create_model`. A pre-logits layer and the classification head
            belong to fine-tuning: `representation_size` is refused and
            `head_zero_init` / `head_bias_init` are ignored.

    Returns:
        An `MppModel` taking {"images": (batch, h, w, 3) in [-1, 1],
        "mpp_mode": (batch, patches) int32, "mpp_source": (batch, patches)
        int32} to float32 (batch, patches, output_width(...)) predictions,
        one row per patch token (the class token left out).
    """
    if kwargs.get("dynamic_image_size"):
        raise UsageError("MPP pre-training needs a fixed image_size.")
    for key in ("head_zero_init", "head_bias_init"):
        kwargs.pop(key, None)
    arch = Architecture.create(variant, num_classes=0, image_size=image_size,
                               pooling=pooling, all_tokens=True, **kwargs)
    return MppModel(arch, target=target, colour_bits=colour_bits,
                    grid_size=grid_size, name=name)


def is_mpp_model(model: keras.Model) -> bool:
    """Whether `model` is an MPP model: an `MppModel`, or a functional one
    an earlier `create_mpp_model` built (as `.keras` files written before
    the class load; `encoder_model` reads their encoder)."""
    return isinstance(model, MppModel) or any(
        layer.name == "mpp_head" for layer in model.layers)


def encoder_model(model: keras.Model) -> VisionTransformer:
    """The encoder of an MPP model as a `create_model` features model
    (num_classes=0: images -> pooled representation), weights copied.

    The mask token and the MPP head are left behind, as the paper drops a
    pre-training head for transfer. Pooling follows the MPP model: the
    class token when it has one, else the mean patch token.
    """
    if isinstance(model, MppModel):
        arch = model.architecture
    elif is_mpp_model(model):  # an earlier version's functional model
        arch = legacy.architecture_from_layers(model)
    else:
        raise UsageError(
            f"Model {model.name!r} is not an MPP model (create_mpp_model)."
        )
    arch = dataclasses.replace(arch, all_tokens=False)
    name = model.name[4:] if model.name.startswith("mpp_") else model.name
    with dtype_policy_of(model):
        new = VisionTransformer(arch, name=name)
    parts = new.parts
    targets = {type(layer): layer for layer in (
        parts.resnet, parts.patch_embedding, parts.class_token,
        parts.position_embedding, parts.encoder) if layer is not None}
    for layer in model.layers:
        if type(layer) in targets:
            targets[type(layer)].set_weights(layer.get_weights())
    return new
