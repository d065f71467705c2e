"""The paper's analysis figures (Section 4.5) drawn with matplotlib.

Figures are built on `matplotlib.figure.Figure` with the Agg canvas, not
pyplot: no global backend is switched, no figure is left open, and the
functions work on a machine without a display. Each writes a PNG through a
temporary name (`keras_vit.storage.atomic.atomic_write`, local or
gs://), so an interrupted run never leaves a truncated file behind.
"""

from __future__ import annotations

import math
import struct
import warnings
from typing import Optional, Sequence, Tuple

import numpy as np

from keras_vit.analysis import core
from keras_vit.errors import UsageError
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write


def require_matplotlib() -> None:
    """Raises the ImportError naming the install command when matplotlib
    is missing: the commands check it before any model is read, not after
    the forward pass."""
    _figure(1.0, 1.0)


def _figure(width: float, height: float):
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "The figures need matplotlib: pip install "
            "'keras-vision-transformer[figures]' (or pip install matplotlib)."
        ) from None

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


# What each figure's PNG says of itself (a tEXt chunk): an analysis knows
# its own figures by it where no analysis.json lists them (a run killed
# outright as they moved in).
MADE_BY = ("Source", "keras-vit-analysis")


def drawn_here(path: str) -> bool:
    """Whether the PNG at `path` says it is an analysis's figure: a tEXt
    chunk `MADE_BY` before its image data (in its first 64 KiB)."""
    mark = "\0".join(MADE_BY).encode("latin-1")
    try:
        with atomic.open_binary(path) as f:
            head = f.read(1 << 16)
    except Exception:  # noqa: BLE001 (unreadable, gone: not ours)
        return False
    at = 8 if head.startswith(b"\x89PNG\r\n\x1a\n") else len(head)
    while at + 8 <= len(head):
        length, kind = struct.unpack(">I4s", head[at:at + 8])
        if kind == b"IDAT":
            break
        if kind == b"tEXt" and head[at + 8:at + 8 + length] == mark:
            return True
        at += 12 + length
    return False


def _save(fig, path: str) -> str:
    with warnings.catch_warnings():
        # A file name in a script the font lacks (CJK) is drawn as boxes;
        # matplotlib's notice per glyph is not about the run.
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .*missing "
                                "from font", category=UserWarning)
        atomic_write(path, lambda tmp: fig.savefig(
            tmp, format="png", dpi=100, bbox_inches="tight",
            metadata=dict([MADE_BY])))
    return path


def _to_display(image: np.ndarray) -> np.ndarray:
    # The model's input range [-1, 1] back to [0, 1] for imshow.
    return np.clip((np.asarray(image, np.float64) + 1.0) / 2.0, 0.0, 1.0)


def plot_attention_rollout(
    images: np.ndarray,
    maps: np.ndarray,
    path: str,
    *,
    titles: Optional[Sequence[str]] = None,
    max_images: int = 8,
    class_token: bool = True,
) -> str:
    """Input images beside their rollout attention (paper Fig. 6 / 14).

    Args:
        images: float (n, height, width, 3) in [-1, 1]. Model inputs.
        maps: float (n, rows, cols). Rollout attention on the patch grid
            (`core.rollout_patch_maps`); each is scaled to its own maximum.
        path: str. Where to write the PNG.
        titles: sequence of str or None. A caption per image (e.g. the
            predicted class).
        max_images: int. Draw at most this many images.
        class_token: bool. Whether the maps are the class token's row
            (else the mean over all tokens' rows: global average pooling).

    Returns:
        str. `path`.
    """
    n = min(len(images), len(maps), int(max_images))
    if n < 1:
        raise UsageError("plot_attention_rollout needs at least one image.")
    height, width = images.shape[1:3]
    heat = core.upsample_bilinear(maps[:n], (height, width))
    heat = heat / np.maximum(heat.max(axis=(1, 2), keepdims=True), 1e-12)
    pairs_per_row = min(n, 4)
    rows = math.ceil(n / pairs_per_row)
    fig = _figure(3.2 * pairs_per_row + 0.8, 1.8 * rows + 0.6)
    grid = fig.add_gridspec(rows, 2 * pairs_per_row)
    mappable = None
    for i in range(n):
        r, c = divmod(i, pairs_per_row)
        caption = titles[i] if titles is not None else f"image {i + 1}"
        ax = fig.add_subplot(grid[r, 2 * c])
        ax.imshow(_to_display(images[i]))
        ax.set_title(f"input: {caption}", fontsize=8)
        ax.set_axis_off()
        ax = fig.add_subplot(grid[r, 2 * c + 1])
        ax.imshow(_to_display(images[i]))
        mappable = ax.imshow(
            heat[i], cmap="inferno", alpha=0.6, vmin=0.0, vmax=1.0
        )
        ax.set_title("attention rollout", fontsize=8)
        ax.set_axis_off()
    fig.colorbar(
        mappable,
        ax=fig.axes,
        shrink=0.8,
        label="rollout attention (scaled to max 1)",
    )
    fig.suptitle(
        "Attention from the class token to the input (attention rollout)"
        if class_token else "Attention from all tokens to the input, "
        "averaged as the pooled output is (attention rollout)")
    return _save(fig, path)


def plot_mean_attention_distance(
    distances: np.ndarray,
    path: str,
    *,
    uniform_distance: Optional[float] = None,
    title: str = "Mean attention distance per head",
) -> str:
    """One dot per head: depth vs mean attention distance (Fig. 7, 11).

    Args:
        distances: float (layers, heads). From
            `core.mean_attention_distance`, in pixels.
        path: str. Where to write the PNG.
        uniform_distance: float or None. Drawn as a dashed reference line:
            the distance of a head attending uniformly to all patches.
        title: str. Figure title.

    Returns:
        str. `path`.
    """
    distances = np.asarray(distances, dtype=np.float64)
    num_layers, num_heads = distances.shape
    fig = _figure(6.4, 4.4)
    ax = fig.add_subplot()
    cmap = _colormap("tab20" if num_heads > 10 else "tab10")
    depth = np.arange(1, num_layers + 1)
    for head in range(num_heads):
        ax.scatter(
            depth,
            distances[:, head],
            s=22,
            color=cmap(head % cmap.N),
            label=f"head {head + 1}",
            edgecolors="black",
            linewidths=0.3,
        )
    if uniform_distance is not None:
        ax.axhline(
            uniform_distance,
            color="grey",
            linestyle="--",
            linewidth=1,
            label="uniform attention",
        )
    top = max(float(distances.max()), uniform_distance or 0.0)
    ax.set_ylim(0, top * 1.1 + 1e-9)
    ax.set_xlim(0.5, num_layers + 0.5)
    ax.set_xticks(depth if num_layers <= 16 else depth[::2])
    ax.set_xlabel("Network depth (layer)")
    ax.set_ylabel("Mean attention distance (pixels)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if num_heads <= 16:
        ax.legend(
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            frameon=False,
        )
    return _save(fig, path)


def _colormap(name: str):
    from matplotlib import colormaps

    return colormaps[name]


def plot_position_similarity(
    similarity: np.ndarray,
    grid: Tuple[int, int],
    path: str,
    *,
    title: str = "Position embedding similarity",
) -> str:
    """Cosine similarity of each position embedding with all others (Fig. 7).

    Tile (r, c) shows, over the whole patch grid, the similarity of the
    embedding of patch (r, c) with every other position's embedding.

    Args:
        similarity: float (N, N). From `core.position_embedding_similarity`.
        grid: (int, int). Patch rows and columns.
        path: str. Where to write the PNG.
        title: str. Figure title.

    Returns:
        str. `path`.
    """
    rows, cols = grid
    gap = 1 if max(rows, cols) <= 32 else 0
    mosaic = core.similarity_mosaic(np.asarray(similarity), grid, gap=gap)
    scale = 6.0 / max(mosaic.shape)
    fig = _figure(mosaic.shape[1] * scale + 1.6, mosaic.shape[0] * scale + 1.0)
    ax = fig.add_subplot()
    cmap = _colormap("viridis").with_extremes(bad="white")
    image = ax.imshow(
        np.ma.masked_invalid(mosaic),
        cmap=cmap,
        vmin=-1.0,
        vmax=1.0,
        interpolation="nearest",
    )
    step_r = max(1, rows // 8)
    step_c = max(1, cols // 8)
    ax.set_yticks(
        [(r * (rows + gap)) + (rows - 1) / 2 for r in range(0, rows, step_r)],
        [str(r + 1) for r in range(0, rows, step_r)],
    )
    ax.set_xticks(
        [(c * (cols + gap)) + (cols - 1) / 2 for c in range(0, cols, step_c)],
        [str(c + 1) for c in range(0, cols, step_c)],
    )
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_xlabel("Input patch column")
    ax.set_ylabel("Input patch row")
    ax.set_title(title)
    fig.colorbar(image, ax=ax, shrink=0.8, label="Cosine similarity")
    return _save(fig, path)


def plot_patch_embedding_pca(
    components: np.ndarray,
    explained: np.ndarray,
    path: str,
    *,
    title: Optional[str] = None,
) -> str:
    """Principal components of the patch filters as RGB tiles (Fig. 7 left).

    Args:
        components: float (K, P, P, 3). From `core.patch_embedding_pca`;
            each tile is min-max normalised on its own.
        explained: float (K,). Fraction of variance per component.
        path: str. Where to write the PNG.
        title: str or None. Figure title.

    Returns:
        str. `path`.
    """
    components = np.asarray(components, dtype=np.float64)
    if components.ndim != 4 or components.shape[-1] != 3:
        raise UsageError(
            "Expected RGB components (K, P, P, 3), got "
            f"{components.shape}: hybrid models embed ResNet features, not "
            "pixels, and have no RGB filters to draw."
        )
    k = len(components)
    cols = min(k, 7)
    rows = math.ceil(k / cols)
    fig = _figure(1.3 * cols + 0.4, 1.45 * rows + 0.7)
    low = components.min(axis=(1, 2, 3), keepdims=True)
    high = components.max(axis=(1, 2, 3), keepdims=True)
    tiles = (components - low) / np.maximum(high - low, 1e-12)
    for i in range(k):
        ax = fig.add_subplot(rows, cols, i + 1)
        ax.imshow(tiles[i], interpolation="nearest")
        ax.set_title(f"PC {i + 1}: {100 * explained[i]:.1f}%", fontsize=7)
        ax.set_axis_off()
    if title is None:
        title = (
            f"RGB embedding filters: top {k} principal components "
            f"({100 * float(np.sum(explained)):.0f}% of variance)"
        )
    fig.suptitle(title, fontsize=10)
    return _save(fig, path)
