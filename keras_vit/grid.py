"""The token grid of an image: pixels per token side and tokens per side.

Arithmetic only (no Keras), so that what reads a model's sizes without
building it (the released models' table, `--list_models`) loads no
TensorFlow. `keras_vit.architecture` names these functions too.
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

from keras_vit.errors import UsageError
from keras_vit.values import ImageSize, image_hw

# The most tokens a model is built with (2,048 x 2,048 pixels at patch
# 16): attention over more needs gigabytes a head and image, so a larger
# image size is a typo (38400 for 384) or a corrupt or edited file, and is
# refused before anything is allocated (which the system's out-of-memory
# killer would end without a word).
MAX_TOKENS = 1 << 14


def check_tokens(image_size: ImageSize, stride: int) -> None:
    """A UsageError naming the fix where `image_size` at `stride` pixels a
    token (whole tokens, as a resize to a multiple would make them) holds
    more than MAX_TOKENS tokens."""
    height, width = image_hw(image_size)
    tokens = (height // stride) * (width // stride)
    if tokens > MAX_TOKENS:
        side = int(MAX_TOKENS ** 0.5) * int(stride)
        raise UsageError(
            f"`image_size` (config.model.image_size) "
            f"{' x '.join(map(str, image_hw(image_size)))} makes {tokens:,}"
            f" tokens of {stride} x {stride} pixels, more than the "
            f"{MAX_TOKENS:,} a model is built with here (its attention "
            f"alone would take {4 * tokens ** 2 / 2 ** 30:,.0f} GiB a head "
            f"and image): give an image size of at most {side} x {side}.")


def resnet_stride(layers: Sequence[int]) -> int:
    """int. Total downsampling of a ResNet stem with `layers` units per
    stage: 4 for the root (stride-2 conv, stride-2 max-pool), then 2 per
    stage after the first."""
    return 4 * 2 ** max(len(layers) - 1, 0)


def total_stride(patch_size: int,
                 resnet_layers: Optional[Sequence[int]] = None) -> int:
    """int. Image pixels per token side: the patch size, times the ResNet
    stride for hybrids (`resnet_layers` not None). The one formula."""
    stride = int(patch_size)
    if resnet_layers is not None:
        stride *= resnet_stride(resnet_layers)
    return stride


def patch_grid(image_size: ImageSize, stride: int,
               what: str = "") -> Tuple[int, int]:
    """(rows, cols) of tokens at `image_size` for `stride` image pixels per
    token side (`total_stride`): the one place the grid is computed. A side
    the stride does not divide is an error naming the fix (`what` names the
    stride: "patch size 16")."""
    height, width = image_hw(image_size)
    stride = int(stride)
    for side, value in (("height", height), ("width", width)):
        if value % stride:
            raise UsageError(
                f"`image_size` (config.model.image_size) {side} {value} "
                "is not divisible by "
                f"{what or f'the stride {stride}'}: use a multiple of "
                f"{stride}, e.g. "
                f"{' or '.join(map(str, _multiples_near(value, stride)))}."
            )
    return height // stride, width // stride


def _multiples_near(value: int, stride: int) -> Tuple[int, ...]:
    """The multiples of `stride` either side of `value` (only the one
    above where none below is positive)."""
    below = value // stride * stride
    return (below, below + stride) if below else (stride,)
