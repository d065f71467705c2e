"""The numbers behind the paper's analysis figures (Section 4.5), in NumPy.

Nothing here touches a model or matplotlib: every function takes arrays and
returns arrays, so each can be tested against an independent computation.

Token layout convention (as in `keras_vit.model`): a sequence is an optional
class token followed by the patch grid flattened row-major, so patch (r, c)
of a (rows, cols) grid is token `num_prefix_tokens + r * cols + c`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Tuple

import numpy as np

from keras_vit.errors import UsageError


@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """How a model's token sequence maps onto the input image.

    Attributes:
        grid: (int, int). Patch rows and columns.
        patch_pixels: (float, float). Height and width of one patch cell in
            input pixels (the patch size; the total stride for hybrids).
        num_prefix_tokens: int. Tokens before the patches: 1 with a class
            token, 0 for global-average-pooling ("gap") models.
    """

    grid: Tuple[int, int]
    patch_pixels: Tuple[float, float]
    num_prefix_tokens: int

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def num_tokens(self) -> int:
        return self.num_prefix_tokens + self.num_patches


def patch_centres(layout: TokenLayout) -> np.ndarray:
    """centres: float64 (num_patches, 2). (y, x) pixel centre of each patch.

    Row-major, matching the token order.
    """
    rows, cols = layout.grid
    ph, pw = layout.patch_pixels
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return np.stack(
        [(r.ravel() + 0.5) * ph, (c.ravel() + 0.5) * pw], axis=-1
    ).astype(np.float64)


def patch_distances(layout: TokenLayout) -> np.ndarray:
    """distances: float64 (N, N). Euclidean pixel distance between centres."""
    centres = patch_centres(layout)
    # One (N, N) component at a time: at most three such tables are held.
    return np.hypot(centres[:, None, 0] - centres[None, :, 0],
                    centres[:, None, 1] - centres[None, :, 1])


def _check_attention(attention: np.ndarray, num_tokens: int) -> np.ndarray:
    attention = np.asarray(attention, dtype=np.float64)
    if attention.ndim != 4 or attention.shape[-2:] != (num_tokens,) * 2:
        raise UsageError(
            "Expected attention weights of shape (batch, heads, "
            f"{num_tokens}, {num_tokens}) for this layout, got "
            f"{attention.shape}: pass one array per layer from "
            "keras_vit.attention_model."
        )
    return attention


def mean_attention_distance(
    attention: Sequence[np.ndarray], layout: TokenLayout
) -> np.ndarray:
    """Mean attention distance per layer and head (paper Fig. 7 right, 11).

    For every query patch, the attention-weighted mean pixel distance to the
    key patches, averaged over query patches and over the batch. The class
    token is left out as query and as key (it has no position in the image);
    each query's weights over the patch keys are renormalised to sum to 1,
    so the result is a distance between image locations only.

    Args:
        attention: sequence of float arrays (batch, heads, T, T), one per
            layer, T = `layout.num_tokens`; rows are queries, columns keys.
        layout: TokenLayout. The token grid and patch size in pixels.

    Returns:
        float64 (layers, heads). Distances in input pixels.
    """
    distances = patch_distances(layout)
    return np.stack([layer_attention_distance(weights, layout, distances)
                     for weights in attention])


def layer_attention_distance(
    weights: np.ndarray, layout: TokenLayout,
    distances: Optional[np.ndarray] = None,
) -> np.ndarray:
    """One layer's row of `mean_attention_distance`: float64 (heads,).

    Args:
        weights: float array (batch, heads, T, T). One layer's attention.
        layout: TokenLayout. The token grid and patch size in pixels.
        distances: float64 (N, N) or None. `patch_distances(layout)`,
            computed once by a caller that goes over many layers.
    """
    if distances is None:
        distances = patch_distances(layout)
    weights = _check_attention(weights, layout.num_tokens)
    start = layout.num_prefix_tokens
    patches = weights[:, :, start:, start:]
    total = patches.sum(axis=-1)
    # Each query's weights renormalised over the patch keys, after the sum
    # (no second copy of the layer's weights). A query that put all its
    # weight on the class token has no patch distribution; it counts as
    # distance 0 rather than NaN.
    per_query = np.einsum("bhqk,qk->bhq", patches, distances) / np.where(
        total > 0, total, 1.0)
    return per_query.mean(axis=(0, 2))


def uniform_attention_distance(layout: TokenLayout) -> float:
    """distance: float. Mean attention distance of uniform attention.

    The mean pixel distance over all ordered pairs of patches (self pairs
    included): where a head attending everywhere equally would sit on the
    mean-attention-distance plot.
    """
    return float(patch_distances(layout).mean())


def attention_rollout(
    attention: Sequence[np.ndarray], residual: bool = True
) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020): joint attention to inputs.

    Each layer's attention is averaged over heads; with `residual`, the
    identity is added for the skip connection and rows are renormalised,
    i.e. 0.5 * A + 0.5 * I. The layers are then multiplied, the last on
    the left: rollout = A_L ... A_2 A_1.

    Args:
        attention: sequence of float arrays (batch, heads, T, T), one per
            layer, in network order.
        residual: bool. Account for the residual connections.

    Returns:
        float64 (batch, T, T). Row q is how much output token q draws on each
        input token.
    """
    if not len(attention):
        raise UsageError("attention_rollout needs at least one layer.")
    joint = None
    for weights in attention:
        joint = rollout_step(joint, weights, residual)
    return joint


def rollout_step(
    joint: Optional[np.ndarray], weights: np.ndarray, residual: bool = True
) -> np.ndarray:
    """The rollout after one more layer: float64 (batch, T, T).

    `attention_rollout` one layer at a time: `joint` is the rollout of the
    layers before (None before the first), `weights` (batch, heads, T, T)
    the next layer's attention.
    """
    weights = np.asarray(weights, dtype=np.float64)
    num_tokens = weights.shape[-1]
    weights = _check_attention(weights, num_tokens).mean(axis=1)
    if residual:
        weights = weights + np.eye(num_tokens)
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights if joint is None else weights @ joint


def rollout_patch_maps(rollout: np.ndarray, layout: TokenLayout) -> np.ndarray:
    """maps: float64 (batch, rows, cols). Rollout attention on the patch grid.

    With a class token: the class token's row (the token the classifier
    reads), without the class-token column. Without one ("gap" models,
    whose classifier reads the mean of all patch tokens): the mean over all
    query rows, the attention of that mean.
    """
    rollout = np.asarray(rollout, dtype=np.float64)
    if rollout.ndim != 3 or rollout.shape[1:] != (layout.num_tokens,) * 2:
        raise UsageError(
            f"Expected a rollout of shape (batch, {layout.num_tokens}, "
            f"{layout.num_tokens}), got {rollout.shape}."
        )
    start = layout.num_prefix_tokens
    if start:
        rows = rollout[:, 0, start:]
    else:
        rows = rollout.mean(axis=1)
    return rows.reshape((-1,) + tuple(layout.grid))


def _resize_axis(x: np.ndarray, size: int, axis: int) -> np.ndarray:
    # Half-pixel centres: output pixel i samples input coordinate
    # (i + 0.5) * n / size - 0.5, clamped at the borders.
    n = x.shape[axis]
    pos = (np.arange(size) + 0.5) * n / size - 0.5
    pos = np.clip(pos, 0, n - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, n - 1)
    shape = [1] * x.ndim
    shape[axis] = size
    frac = (pos - lo).reshape(shape)
    return (
        np.take(x, lo, axis=axis) * (1 - frac)
        + np.take(x, hi, axis=axis) * frac
    )


def upsample_bilinear(maps: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """maps: float64 (..., height, width). Bilinear upsampling of grid maps.

    Half-pixel centres (each patch value sits at its cell's centre), the
    convention of `tf.image.resize`, so the heat map lines up with the
    patches it came from.
    """
    maps = np.asarray(maps, dtype=np.float64)
    out = _resize_axis(maps, int(size[0]), maps.ndim - 2)
    return _resize_axis(out, int(size[1]), maps.ndim - 1)


def position_embedding_similarity(
    pos_embedding: np.ndarray, num_prefix_tokens: int
) -> np.ndarray:
    """Cosine similarity between patch position embeddings (paper Fig. 7).

    Args:
        pos_embedding: float array (1, T, D) or (T, D). The learned table.
        num_prefix_tokens: int. Leading rows to drop (the class token's).

    Returns:
        float64 (N, N). Entry (i, j): cosine similarity of patch positions i
        and j (row-major).
    """
    table = np.asarray(pos_embedding, dtype=np.float64)
    if table.ndim == 3:
        table = table[0]
    if table.ndim != 2:
        raise UsageError(
            f"Expected a position embedding (1, T, D) or (T, D), got "
            f"{np.shape(pos_embedding)}."
        )
    table = table[num_prefix_tokens:]
    norms = np.linalg.norm(table, axis=-1, keepdims=True)
    unit = table / np.maximum(norms, 1e-12)
    return np.clip(unit @ unit.T, -1.0, 1.0)


def similarity_mosaic(
    similarity: np.ndarray, grid: Tuple[int, int], gap: int = 1
) -> np.ndarray:
    """The similarity matrix laid out as the paper's grid of tiles.

    Tile (r, c) is the similarity of patch (r, c) with every patch, shaped
    as the (rows, cols) grid; tiles are separated by `gap` NaN pixels.

    Returns:
        float64 (rows * (rows + gap) - gap, cols * (cols + gap) - gap).
    """
    rows, cols = grid
    n = rows * cols
    if similarity.shape != (n, n):
        raise UsageError(
            f"similarity must be ({n}, {n}) for a {rows}x{cols} grid, got "
            f"{similarity.shape}."
        )
    out = np.full(
        (rows * (rows + gap) - gap, cols * (cols + gap) - gap), np.nan
    )
    for index in range(n):
        r, c = divmod(index, cols)
        top, left = r * (rows + gap), c * (cols + gap)
        out[top : top + rows, left : left + cols] = similarity[index].reshape(
            rows, cols
        )
    return out


def patch_embedding_pca(
    kernel: np.ndarray, num_components: int = 28
) -> Tuple[np.ndarray, np.ndarray]:
    """Principal components of the patch-embedding filters (paper Fig. 7).

    The kernel (P, P, C, D) holds D linear filters over a P x P x C patch;
    PCA treats the D filters as samples of a (P * P * C)-vector, centred on
    their mean. Each component's sign is fixed so its largest-magnitude
    entry is positive (PCA signs are arbitrary).

    Args:
        kernel: float array (P, P, C, D). The patch projection's weights.
        num_components: int. How many components to return (at most
            min(D - 1, P * P * C): D filters centred on their mean span
            D - 1 directions).

    Returns:
        (components, explained): float64 (K, P, P, C) orthonormal components
        in order of decreasing variance, and float64 (K,) the fraction of
        the total variance each explains.
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    if kernel.ndim != 4:
        raise UsageError(
            f"Expected a patch kernel (P, P, C, D), got {kernel.shape}."
        )
    ph, pw, channels, width = kernel.shape
    filters = kernel.reshape(ph * pw * channels, width).T  # (D, P*P*C)
    filters = filters - filters.mean(axis=0, keepdims=True)
    _, singular, vt = np.linalg.svd(filters, full_matrices=False)
    # D filters centred on their mean span at most D - 1 directions: a
    # D-th component would explain nothing (an arbitrary direction).
    k = min(int(num_components), vt.shape[0], max(width - 1, 1))
    if k < 1:
        raise UsageError(
            f"`num_components`={num_components}: must be >= 1.")
    variance = singular**2
    total = variance.sum()
    explained = variance[:k] / (total if total > 0 else 1.0)
    components = vt[:k]
    peak = np.argmax(np.abs(components), axis=1)
    signs = np.sign(components[np.arange(k), peak])
    components = components * np.where(signs == 0, 1.0, signs)[:, None]
    return components.reshape(k, ph, pw, channels), explained
