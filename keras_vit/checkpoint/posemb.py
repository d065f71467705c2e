"""Position-embedding resizing of checkpoint arrays: what makes a
checkpoint load at another resolution. The resizing itself is the model
core's (`keras_vit.embedding.resize_grid`, the one the position-embedding
layer runs in the graph), here in NumPy and float64 as the official
implementation does; this module adds the checks and the grid inference
that arrays read from a file need.
"""

from __future__ import annotations

import math
import numbers
from typing import Optional, Sequence, Tuple, Union

import numpy as np

from keras_vit.embedding import resize_grid
from keras_vit.errors import UsageError
from keras_vit.values import whole

Grid = Tuple[int, int]


def as_grid(value) -> Optional[Grid]:
    """A patch grid given as (rows, cols), an int (square) or "ROWSxCOLS",
    as (rows, cols); None stays None. Anything else is a UsageError."""
    if value is None:
        return None
    parts = value.lower().split("x") if isinstance(value, str) else (
        [value] if isinstance(value, numbers.Number) else value)
    try:
        grid = tuple(whole(part) for part in parts)
        grid = grid * 2 if len(grid) == 1 else grid  # square
    except (TypeError, ValueError):
        grid = ()
    if len(grid) != 2 or min(grid) <= 0:
        raise UsageError(f"`posemb_grid` must be (rows, cols) of positive "
                         f"ints (or \"ROWSxCOLS\"), got {value!r}.")
    return grid


def square_grid(tokens: int, refusal: Optional[str] = None) -> Grid:
    """(g, g) for a square grid of `tokens` patches; otherwise UsageError
    with `refusal` (default: pass the grid as `posemb_grid`)."""
    side = math.isqrt(tokens)
    if side * side != tokens:
        below = math.isqrt(tokens - 1) if tokens > 1 else 0
        token_row = (
            f" ({tokens} = {below} x {below} + 1: a class token's row "
            "beside a square grid, whose `cls` array the file lacks; a "
            "damaged or partly saved file)" if below * below == tokens - 1
            else "")
        shapes = [f"{r}x{c}" for r, c in _grids(tokens)[:3]]
        grids = (f": {', '.join(shapes[:-1])} or {shapes[-1]}?" if shapes
                 else "")
        raise UsageError(refusal or (
            f"Cannot infer the patch grid of a position embedding with "
            f"{tokens} patch tokens (not a square{grids}){token_row}: "
            "pass the grid it was trained with as `posemb_grid`=(rows, "
            "cols), or the `image_size`=(height, width) it was trained at."
        ))
    return side, side


def square_or_none(tokens: int) -> Optional[Grid]:
    """(g, g) where `tokens` patches make a square grid, else None."""
    side = math.isqrt(max(int(tokens), 0))
    return (side, side) if side and side * side == tokens else None


def check_grid_said(tokens: int, model_grid: Grid,
                    posemb_grid: Optional[Grid], source: str) -> None:
    """A UsageError where a table of `tokens` patches, as many as the
    model's non-square `model_grid`, comes with no `posemb_grid`: it is a
    square grid (every released file's, to be resized) or one saved at
    the model's grid, and an .npz cannot say which (it was loaded as it
    is, a square table read row for row as the model's grid)."""
    square, (rows, cols) = square_or_none(tokens), model_grid
    if posemb_grid is not None or rows == cols or square is None:
        return
    side = square[0]
    raise UsageError(
        f"{source}: its position table has {tokens} patches, as many as "
        f"the model's {rows}x{cols} grid: it is a square {side}x{side} "
        "table (every released checkpoint's), to be resized, or one saved "
        f"at {rows}x{cols}, and an .npz cannot say which. Pass its grid "
        f"as `posemb_grid`=(rows, cols): {side}x{side} to resize it, or "
        f"{rows}x{cols} if it was saved at the model's grid.")


def check_grid_holds(tokens: int, posemb_grid: Optional[Grid],
                     source: str) -> None:
    """A UsageError where `posemb_grid`, the grid a user says a table of
    `tokens` patches was trained at, holds another number of patches (so
    no strict or lenient load can use it)."""
    if posemb_grid is None or posemb_grid[0] * posemb_grid[1] == tokens:
        return
    rows, cols = posemb_grid
    close = [f"{r}x{c}" for r, c in _grids(tokens)[:2]]
    holds = f" (a {' or '.join(close)} grid holds that many)" if close else ""
    raise UsageError(
        f"{source}: `posemb_grid`={rows}x{cols} holds {rows * cols} "
        f"patches, its position table {tokens}{holds}: pass the grid it "
        "was trained with.")


def _grids(tokens: int):
    """The (rows, cols) grids of `tokens` patches, squarest first, none of
    one row."""
    pairs = [(r, tokens // r) for r in range(2, tokens // 2 + 1)
             if tokens % r == 0]
    return sorted(pairs, key=lambda p: (abs(p[0] - p[1]), p[0] > p[1]))


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
    if tokens < 1:
        raise UsageError(
            f"The position embedding holds {len(posemb)} row(s) for "
            f"{num_prefix_tokens} class token(s), so no patch position: the "
            "file is damaged.")
    new_grid = _as_grid(new_grid)
    old_grid = square_grid(tokens) if old_grid is None else _as_grid(old_grid)
    if old_grid[0] * old_grid[1] != tokens:
        raise UsageError(
            f"The position embedding has {tokens} patch positions, which do "
            f"not fill the grid {old_grid[0]}x{old_grid[1]} "
            f"({old_grid[0] * old_grid[1]}): pass the grid it was trained "
            "with."
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


# How each library resizes a position table when its model runs at another
# resolution: (its name, whether torch's antialiased kernel is used).
# transformers' ViTEmbeddings.interpolate_pos_encoding calls
# torch.nn.functional.interpolate(mode="bicubic", align_corners=False);
# timm's checkpoint_filter_fn calls resample_abs_pos_embed(...,
# interpolation="bicubic", antialias=True).

LIBRARY_RESIZE = {"huggingface": False, "timm": True}


def _cubic(x: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `a`."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def torch_bicubic_matrix(old: int, new: int, antialias: bool) -> np.ndarray:
    """The (new, old) float64 matrix of torch's 1-D bicubic resize
    (`torch.nn.functional.interpolate(mode="bicubic",
    align_corners=False)` with a target size, so scale = old / new).

    Without antialias (aten's upsample_bicubic2d): source coordinate
    (i + 0.5) * scale - 0.5, Keys' kernel with a = -0.75 on the four
    nearest samples, indices clamped to the border. With antialias (aten's
    _upsample_bicubic2d_aa, PIL's convolution): a = -0.5, the kernel
    stretched by the scale when shrinking, taps limited to the input and
    the weights normalised to sum to 1.
    """
    scale = old / new
    matrix = np.zeros((new, old))
    for i in range(new):
        if not antialias:
            src = (i + 0.5) * scale - 0.5
            base = int(np.floor(src))
            taps = np.arange(base - 1, base + 3)
            w = _cubic(src - taps, -0.75)
            np.add.at(matrix[i], np.clip(taps, 0, old - 1), w)
            continue
        support = 2.0 * scale if scale >= 1.0 else 2.0
        invscale = 1.0 / scale if scale >= 1.0 else 1.0
        center = scale * (i + 0.5)
        low = max(int(center - support + 0.5), 0)
        high = min(int(center + support + 0.5), old)
        taps = np.arange(low, high)
        w = _cubic((taps - center + 0.5) * invscale, -0.5)
        total = w.sum()
        matrix[i, low:high] = w / total if total != 0.0 else w
    return matrix


def resize_like_library(
    posemb: np.ndarray, new_grid, old_grid, num_prefix_tokens: int,
    library: str,
) -> np.ndarray:
    """A (1, N, D) position table at another patch grid, resized as
    `library` ("huggingface" or "timm", `LIBRARY_RESIZE`) does when its
    own model runs at that grid, in float64: the prefix rows kept, the
    grid rows resized bicubically by rows then columns (torch's separable
    kernel), flattened row-major."""
    antialias = LIBRARY_RESIZE[library]
    posemb = np.asarray(posemb)
    new_grid, old_grid = _as_grid(new_grid), _as_grid(old_grid)
    rows, cols = old_grid
    prefix = posemb[:, :num_prefix_tokens]
    grid = posemb[0, num_prefix_tokens:].astype(np.float64)
    if len(grid) != rows * cols:
        raise UsageError(
            f"The position embedding has {len(grid)} patch positions, "
            f"which do not fill the grid {rows}x{cols} ({rows * cols})."
        )
    grid = grid.reshape(rows, cols, -1)
    grid = np.einsum("ir,rcd->icd",
                     torch_bicubic_matrix(rows, new_grid[0], antialias), grid)
    grid = np.einsum("jc,icd->ijd",
                     torch_bicubic_matrix(cols, new_grid[1], antialias), grid)
    grid = grid.reshape(1, new_grid[0] * new_grid[1], -1).astype(posemb.dtype)
    return np.concatenate([prefix, grid], axis=1)
