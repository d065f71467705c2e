"""Position-embedding resizing of checkpoint arrays: what makes a
checkpoint load at another resolution. The resizing itself is the model
core's (`keras_vit.embedding.resize_grid`, the one the position-embedding
layer runs in the graph), here in NumPy and float64 as the official
implementation does; this module adds the checks and the grid inference
that arrays read from a file need.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from keras_vit.embedding import resize_grid
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
    tokens = len(posemb) - num_prefix_tokens
    new_grid = _as_grid(new_grid)
    old_grid = square_grid(tokens) if old_grid is None else _as_grid(old_grid)
    if old_grid[0] * old_grid[1] != tokens:
        raise UsageError(
            f"The position embedding has {tokens} grid rows, which does "
            f"not match the grid {old_grid[0]}x{old_grid[1]}: pass the grid "
            "it was trained with."
        )
    out = resize_grid(
        posemb[None], old_grid, new_grid, num_prefix_tokens,
        dtype="float64", xp=np,
    )[0]
    return out[None] if batched else out


def _as_grid(grid) -> Grid:
    if isinstance(grid, (int, np.integer)):
        grid = (int(grid), int(grid))
    grid = tuple(int(g) for g in grid)
    if len(grid) != 2 or min(grid) < 1:
        raise UsageError(f"A grid is (rows, cols) of positive ints: {grid}.")
    return grid
