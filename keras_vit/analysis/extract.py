"""Reads what the analysis needs out of a keras_vit model.

The token layout, the learned tables (position embeddings, patch filters)
and, over a set of images, the attention statistics. Images pass through
`keras_vit.attention_model` in batches, so only per-batch attention is ever
held in memory, whatever the number of images; each batch's attention is
taken one layer at a time (made float64, used, dropped).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional

import keras
import numpy as np

from keras_vit import embedding as vit_embedding
from keras_vit.analysis import core, memory
from keras_vit.derived import attention_model
from keras_vit.errors import UsageError
from keras_vit.model import (
    VisionTransformer,
    architecture_of,
    as_vision_transformer,
)


def _vit(model: keras.Model) -> VisionTransformer:
    try:
        return as_vision_transformer(model)
    except UsageError:
        raise UsageError(
            f"Model {model.name!r} is not a Vision Transformer: the analysis"
            " needs one built by keras_vit.create_model (or loaded from its"
            " .keras file)."
        ) from None


def _check_range(batch: np.ndarray, start: int) -> None:
    """Refuses images outside the model's input range, [-1, 1] (pixels
    of 0 to 255 or 0 to 1 would give plausible, wrong figures), or not
    finite; `start`: the first one's index."""
    low, high = float(np.min(batch)), float(np.max(batch))
    if np.isfinite(low) and np.isfinite(high) and (
            low >= -1.001 and high <= 1.001):
        return
    raise UsageError(
        f"The images from index {start} hold values in [{low:g}, {high:g}]; "
        "the model takes pixels in [-1, 1]: preprocess them "
        "(keras_vit.data.preprocessing.preprocess_eval, or x / 127.5 - 1 "
        "for pixels of 0 to 255).")


def token_layout(model: keras.Model) -> core.TokenLayout:
    """layout: core.TokenLayout. The model's patch grid and class token."""
    arch = architecture_of(model)
    if model.input_shape[1] is None:
        raise UsageError(
            f"Model {model.name!r} has a dynamic image size; the analysis "
            "needs a fixed one: rebuild it at the size to analyse "
            "(keras_vit.rebuild_at_resolution(model, size))."
        )
    rows, cols = arch.grid()
    return core.TokenLayout(
        grid=(rows, cols),
        patch_pixels=(arch.stride, arch.stride),
        num_prefix_tokens=arch.num_prefix_tokens,
    )


def position_embeddings(model: keras.Model) -> np.ndarray:
    """table: float32 (T, D). The learned position embeddings, or the fixed
    sin-cos ones (posemb="sincos2d") at the model's patch grid."""
    vit = _vit(model)
    layer = vit.parts.position_embedding
    if isinstance(layer, vit_embedding.SinCosPositionEmbedding):
        table = layer.table(token_layout(vit).grid,
                            vit.architecture.hidden_size)
        return np.asarray(keras.ops.convert_to_numpy(table))[0]
    return np.asarray(keras.ops.convert_to_numpy(layer.pos_embedding))[0]


def patch_kernel(model: keras.Model) -> np.ndarray:
    """kernel: float32 (P, P, C, D). The patch projection's filters."""
    layer = _vit(model).parts.patch_embedding
    return np.asarray(keras.ops.convert_to_numpy(layer.conv.kernel))


@dataclasses.dataclass
class AttentionStats:
    """Attention statistics of a model over a set of images.

    Attributes:
        layout: core.TokenLayout. The model's token layout.
        mean_distance: float64 (layers, heads). Mean attention distance in
            pixels, averaged over all images.
        rollout_maps: float64 (images, rows, cols). Rollout attention of
            the output token(s) on the patch grid, per image.
        outputs: float32 (images, ...). The model's outputs (logits).
    """

    layout: core.TokenLayout
    mean_distance: np.ndarray
    rollout_maps: np.ndarray
    outputs: np.ndarray


def attention_stats(
    model: keras.Model,
    images: np.ndarray,
    batch_size: int = 16,
    attention: Optional[keras.Model] = None,
    on_batch: Optional[Callable[[int, int], None]] = None,
) -> AttentionStats:
    """Runs `images` through the model and gathers attention statistics.

    Args:
        model: keras.Model. A keras_vit Vision Transformer.
        images: float array (n, height, width, 3) in [-1, 1] (other
            values, or ones not finite, refused), or a
            sequence of them whose slices are such arrays and that has a
            `shape` (`inputs.ImageFiles`: read one batch at a time).
        batch_size: int. Images per forward pass.
        attention: keras.Model or None. A ready `attention_model(model)`, to
            skip building it again.
        on_batch: None, or called after each batch with the images done
            and their number (a command's progress).

    Returns:
        AttentionStats over all `images`.
    """
    layout = token_layout(model)  # a model of fixed size, first
    expected = tuple(model.input_shape[1:])
    shape = tuple(np.shape(images))
    if len(shape) != 4 or shape[1:] != expected or not len(images):
        raise UsageError(
            f"Expected images of shape (n, {', '.join(map(str, expected))}) "
            f"with n >= 1, got {shape}: preprocess them to the "
            "model's input size (keras_vit.data.preprocessing.preprocess_eval)."
        )
    if batch_size < 1:
        raise UsageError(f"`batch_size`={batch_size}: must be >= 1.")
    check_memory(model, min(batch_size, len(images)))
    if attention is None:
        attention = attention_model(model)
    distances = core.patch_distances(layout)
    distance_sum, maps, outputs = 0.0, [], []
    for start in range(0, len(images), batch_size):
        batch = np.asarray(images[start : start + batch_size], np.float32)
        _check_range(batch, start)
        output, weights = attention(batch, training=False)
        weights = list(weights)
        distance, rollout = _layer_by_layer(weights, layout, distances)
        # Weighted by batch size, so the mean is over images, not batches.
        distance_sum = distance_sum + len(batch) * distance
        maps.append(core.rollout_patch_maps(rollout, layout))
        outputs.append(np.asarray(keras.ops.convert_to_numpy(output)))
        if on_batch is not None:
            on_batch(start + len(batch), len(images))
    return AttentionStats(
        layout=layout,
        mean_distance=distance_sum / len(images),
        rollout_maps=np.concatenate(maps),
        outputs=np.concatenate(outputs),
    )


def check_memory(model: keras.Model, batch_size: int,
                 free: Optional[int] = None) -> None:
    """Raises UsageError when `batch_size` images' attention cannot fit in
    the free memory (`memory.check_attention_fits`), naming the batch size
    or image size that fits, before anything is computed."""
    arch, layout = architecture_of(model), token_layout(model)
    itemsize = np.dtype(keras.backend.standardize_dtype(
        _vit(model).parts.encoder.compute_dtype)).itemsize
    memory.check_attention_fits(arch.num_layers, arch.num_heads,
                                layout.num_tokens, layout.num_patches,
                                batch_size, free, itemsize)


def _layer_by_layer(weights: list, layout: core.TokenLayout,
                    distances: np.ndarray):
    """(mean distance (layers, heads), rollout (batch, T, T)) of one
    batch's attention, `weights` (one tensor per layer), as
    `core.mean_attention_distance` and `core.attention_rollout` compute
    them, one layer at a time: each layer is made float64 when its turn
    comes and dropped from `weights` (emptied as it goes) once used, so
    at most one layer's float64 copy is held beside the model's output."""
    rows, joint = [], None
    for index in range(len(weights)):
        layer = np.asarray(keras.ops.convert_to_numpy(weights[index]),
                           np.float64)
        weights[index] = None
        rows.append(core.layer_attention_distance(layer, layout, distances))
        joint = core.rollout_step(joint, layer)
        del layer
    return np.stack(rows), joint
