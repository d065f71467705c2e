"""Position-embedding resizing: what makes a checkpoint load at another
resolution. The patch-token grid is interpolated bilinearly with aligned
corners, in float64, as the official implementation does; the prefix
(class) token is kept as it is.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np
from keras_vit.errors import UsageError

Grid = Tuple[int, int]

def square_grid(tokens: int) -> Grid:
    """(g, g) for a square grid of `tokens` patches; ValueError otherwise."""
    side = math.isqrt(tokens)
    if side * side != tokens:
        raise UsageError(
            f"Cannot infer the patch grid of a position embedding with "
            f"{tokens} patch tokens (not a square): pass its grid as "
            "posemb_grid=(rows, cols)."
        )
    return side, side


def _interpolation(old: int, new: int):
    """Indices and weights along one axis, corners aligned."""
    if new == 1 or old == 1:
        coords = np.zeros(new)
    else:
        coords = np.arange(new) * ((old - 1) / (new - 1))
    low = np.clip(np.floor(coords).astype(np.int64), 0, old - 1)
    high = np.minimum(low + 1, old - 1)
    return low, high, coords - low


def resize_position_embedding(
    posemb: np.ndarray,
    new_grid: Union[int, Sequence[int]],
    old_grid: Optional[Union[int, Sequence[int]]] = None,
    num_prefix_tokens: int = 1,
) -> np.ndarray:
    """Resizes a position embedding to another patch grid (paper Sec. 3.2).

    The prefix (class-token) rows are kept; the grid rows are reshaped to
    (rows, cols, D), resized bilinearly with the official convention of
    `scipy.ndimage.zoom(order=1)` (corners aligned: new row i samples old
    row i * (old - 1) / (new - 1)) and flattened row-major. Non-square grids
    work in both directions.

    Args:
        posemb: np.ndarray. (1, N, D) or (N, D).
        new_grid: int or (rows, cols). The target grid.
        old_grid: int, (rows, cols) or None. The source grid; None means a
            square grid inferred from N.
        num_prefix_tokens: int. Leading rows that are not grid positions
            (1 with a class token, 0 for global average pooling).

    Returns:
        np.ndarray of the input's rank and dtype with
        num_prefix_tokens + rows * cols rows.
    """
    posemb = np.asarray(posemb)
    batched = posemb.ndim == 3
    if batched:
        if posemb.shape[0] != 1:
            raise UsageError(
                f"posemb must be (1, N, D) or (N, D), got {posemb.shape}."
            )
        posemb = posemb[0]
    if posemb.ndim != 2:
        raise UsageError(
            f"posemb must be (1, N, D) or (N, D), got {posemb.shape}."
        )
    prefix, grid = posemb[:num_prefix_tokens], posemb[num_prefix_tokens:]
    new_grid = _as_grid(new_grid)
    old_grid = (
        square_grid(len(grid)) if old_grid is None else _as_grid(old_grid)
    )
    if old_grid[0] * old_grid[1] != len(grid):
        raise UsageError(
            f"The position embedding has {len(grid)} grid rows, which does "
            f"not match the grid {old_grid[0]}x{old_grid[1]}: pass the grid "
            "it was trained with."
        )
    x = grid.reshape(old_grid[0], old_grid[1], -1).astype(np.float64)
    lo, hi, t = _interpolation(old_grid[0], new_grid[0])
    x = x[lo] * (1 - t)[:, None, None] + x[hi] * t[:, None, None]
    lo, hi, t = _interpolation(old_grid[1], new_grid[1])
    x = x[:, lo] * (1 - t)[None, :, None] + x[:, hi] * t[None, :, None]
    x = x.reshape(new_grid[0] * new_grid[1], -1).astype(posemb.dtype)
    out = np.concatenate([prefix, x], axis=0)
    return out[None] if batched else out


def _as_grid(grid) -> Grid:
    if isinstance(grid, (int, np.integer)):
        grid = (int(grid), int(grid))
    grid = tuple(int(g) for g in grid)
    if len(grid) != 2 or min(grid) < 1:
        raise UsageError(f"A grid is (rows, cols) of positive ints: {grid}.")
    return grid
