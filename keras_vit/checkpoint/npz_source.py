"""`NpzSource`: an official or AugReg `.npz` checkpoint as a model source
(`keras_vit.checkpoint.sources`).

The architecture is read from the array shapes; `variant` checks it, and
an AugReg file's name is checked against its arrays. The resolution a file
loads at by default is a fine-tuned AugReg file's own (from its name), else
the one its own position-embedding grid was learnt at (grid x patch x
ResNet stride; a grid that is not square is given as `posemb_grid`), else
a released checkpoint's, else 224.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

from absl import logging

from keras_vit.architecture import SIZE_FIELDS, Architecture, total_stride
from keras_vit.checkpoint import sources, weights
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.checkpoint.formats import npz_layout
from keras_vit.checkpoint.formats.lazy import shape_of
from keras_vit.checkpoint.posemb import (
    as_grid,
    check_grid_holds,
    square_grid,
    square_or_none,
)
from keras_vit.checkpoint.zoo import augreg
from keras_vit.errors import UsageError
from keras_vit.grid import MAX_TOKENS
from keras_vit.model import VisionTransformer
from keras_vit.variants import VARIANTS, closest_variants


@dataclasses.dataclass
class _NpzContent:
    arrays: Dict[str, Any]
    layout: str
    ignored: list
    info: Dict[str, Any]


# The array whose shape gives each size of an .npz's architecture
# (`npz_layout.describe_arrays`).
_BLOCK = "Transformer/encoderblock_0/"
_SIZE_ARRAYS = {"patch_size": "embedding/kernel",
                "hidden_size": "embedding/kernel",
                "num_layers": _BLOCK + "...",
                "num_heads": _BLOCK + "MultiHeadDotProductAttention_1/query/"
                "kernel",
                "mlp_dim": _BLOCK + "MlpBlock_3/Dense_0/kernel"}


@dataclasses.dataclass(frozen=True)
class NpzSource(sources.Source):
    """An official-layout `.npz` checkpoint.

    Attributes:
        path: str. The file (local or a tf.io.gfile URL).
        variant: str or None. The expected variant ("B/16"); the file's
            shapes must match it.
        posemb_grid: (rows, cols) or None. The file's patch grid, needed
            only when it is not square.
        image_size: int or None. The resolution a released checkpoint was
            trained at (`catalog`), its default one (the file's own
            position-embedding grid wins if they differ).
    """

    variant: Optional[str] = None
    posemb_grid: Optional[Tuple[int, int]] = None
    image_size: Optional[int] = None
    kind = "npz"

    def __post_init__(self):
        if self.variant and self.variant not in VARIANTS:
            close = closest_variants(self.variant)
            hint = f" Did you mean {', '.join(close)}?" if close else ""
            raise UsageError(
                f"Unknown `variant` {self.variant!r} for {self.path}.{hint} "
                f"The variants are {', '.join(VARIANTS)}; leave `variant` "
                "out to read the size from the file's arrays (it only checks "
                "them).")
        object.__setattr__(self, "posemb_grid",
                           as_grid(self.posemb_grid))

    def describe(self) -> str:
        name = super().describe()
        return f"{name} ({self.variant})" if self.variant else name

    def _read(self, check_variant: bool = True) -> _NpzContent:
        arrays, layout, ignored = npz_layout.normalize_layout(
            checkpoint_io.read_npz(self.path), self.path
        )
        if not self.variant and "embedding/kernel" not in arrays and not any(
                k.startswith("Transformer/") for k in arrays):
            names = ", ".join(sorted(arrays)[:4]) or "none"
            raise UsageError(
                f"{self.path} holds no Vision Transformer checkpoint: no "
                "embedding/kernel or Transformer/ arrays (it holds "
                f"{len(arrays)}: {names}{', ...' if len(arrays) > 4 else ''}"
                "). Give an official ViT .npz or one keras_vit.save_npz "
                "wrote.")
        shapes = {k: shape_of(arrays, k) for k in arrays}
        info = npz_layout.describe_arrays(shapes)
        _check_declared_size(self.path, shapes, info)
        # AugReg files (gs://vit_models/augreg/) say their model and, once
        # fine-tuned, their resolution in the name.
        info["augreg"] = augreg.parse_name(self.path)
        if info["augreg"] is not None and check_variant:
            augreg.check_name(self.path, info["augreg"], info, self.variant)
        if self.variant and check_variant:
            self._check_variant(info)
        if info["posemb"] == "sincos2d":
            self._check_sincos(info)
        return _NpzContent(arrays, layout, ignored, info)

    def _check_sincos(self, info: Dict[str, Any]) -> None:
        """A file without a position table loads with fixed sin-cos
        positions (as keras_vit.save_npz writes such a model), said in the
        log; an AugReg release, which learns its table, is refused."""
        if info["augreg"] is not None:
            raise UsageError(
                f"{self.path} holds no {checkpoint_io.POSEMB}, which every "
                "AugReg release holds: the file is damaged or not the "
                "release. Download it again.")
        logging.info("%s holds no %s: the model takes fixed sin-cos "
                     "position embeddings (posemb='sincos2d').", self.path,
                     checkpoint_io.POSEMB)

    def _check_variant(self, info: Dict[str, Any]) -> None:
        wrong = augreg.variant_mismatch(self.variant, info)
        if wrong:
            raise UsageError(
                f"{self.path} is not a {self.variant} checkpoint: it has "
                f"{ {k: f for k, (f, _) in wrong.items()} } where "
                f"{self.variant} has "
                f"{ {k: v for k, (_, v) in wrong.items()} }. Fix `variant` "
                f"(the file looks like {info['variant'] or 'a custom size'})."
            )

    def _default_image_size(self, content: _NpzContent,
                            ask: bool = False) -> int:
        name = content.info.get("augreg")
        if name is not None:
            return name.image_size
        # The file's own grid: an .npz that another tool or a small run
        # wrote is evaluated at the resolution it was trained at, not at
        # 224 with its position embeddings stretched.
        size = _file_image_size(content, self.posemb_grid) or self.image_size
        tokens = _grid_tokens(content)
        if ask and size is None and tokens:
            # A grid that is not square, to build: its size is asked for
            # (224 would build a model the file's grid does not fit).
            check_grid_holds(tokens, self.posemb_grid, self.path)
            square_grid(tokens)
        return size or 224

    def architecture(self) -> Architecture:
        """As `Source.architecture`: at a fine-tuned AugReg file's
        resolution, else its own grid's, else a released checkpoint's, else
        at 224."""
        content = self._read()
        return self._architecture(content, self._default_image_size(content))

    def _architecture(self, content: _NpzContent, image_size, *,
                      num_classes=None, pooling=None,
                      representation_size=sources.FROM_SOURCE
                      ) -> Architecture:
        """The Architecture the file's arrays describe (`variant` named:
        that variant's, which non-strict loading builds even when the file
        is another one, to load what fits), at `image_size`, with the head,
        pooling and pre-logits layer of the file unless given (a new head
        has no pre-logits unless given: `npz_layout.own_pre_logits`)."""
        info = content.info
        if representation_size == sources.FROM_SOURCE:
            representation_size = npz_layout.own_pre_logits(
                info, num_classes)
        sizes = {} if self.variant else {
            k: info[k] for k in SIZE_FIELDS + ("resnet_layers",)}
        lacking = [k for k in SIZE_FIELDS if k in sizes and not sizes[k]]
        if lacking:
            raise UsageError(
                f"{self.path} lacks the array {_SIZE_ARRAYS[lacking[0]]} "
                f"(whose shape gives the model's {lacking[0]}): a damaged or "
                "partly saved file. Download or copy it again.")
        if sizes and sizes["hidden_size"] % sizes["num_heads"]:
            raise UsageError(
                f"{self.path}: the {sizes['num_heads']} heads of its array "
                f"{_SIZE_ARRAYS['num_heads']} do not divide its width "
                f"{sizes['hidden_size']}: a damaged or edited file. "
                "Download or copy it again.")
        if info["resnet_layers"] is not None:
            sizes["resnet_width"] = info["resnet_width"]
        return Architecture.create(
            self.variant or info["variant"], image_size=image_size,
            num_classes=(info["num_classes"] or 0) if num_classes is None
            else num_classes,
            pooling=pooling or info["pooling"], posemb=info["posemb"],
            representation_size=representation_size, **sizes)

    def content(self) -> sources.Content:
        content = self._read()
        return sources.Content(content.arrays, self._grid(content),
                               content.layout, tuple(content.ignored), None)

    def _grid(self, content: _NpzContent) -> Optional[Tuple[int, int]]:
        """The file's patch grid: `posemb_grid`; a released checkpoint's
        (in the catalog or named as AugReg names its files) square one
        (every released table is square, so it is resized even
        to a non-square grid of as many patches:
        `posemb.check_grid_said`); else None (read from the table)."""
        released = self.image_size is not None or (
            content.info["augreg"] is not None)  # by its name
        if self.posemb_grid or not released or (
                checkpoint_io.POSEMB not in content.arrays):
            return self.posemb_grid
        return square_or_none(shape_of(content.arrays, checkpoint_io.POSEMB
                                       )[1] - int("cls" in content.arrays))

    def build(self, image_size=None, *, num_classes=None, pooling=None,
              representation_size=sources.FROM_SOURCE, strict=True):
        # Non-strict loading builds the named variant even when the file
        # is another one, to load what fits.
        content = self._read(check_variant=strict)
        arch = self._architecture(
            content, self._default_image_size(content, ask=True)
            if image_size is None else image_size,
            num_classes=num_classes, pooling=pooling,
            representation_size=representation_size)
        model = VisionTransformer(arch)
        report = weights.load_arrays(
            model,
            content.arrays,
            strict=strict,
            keep_pre_logits=arch.representation_size is not None,
            posemb_grid=self._grid(content),
            source=str(self.path),
            layout=content.layout,
            ignored=content.ignored,
        )
        return model, report


def _check_declared_size(path: str, shapes: Dict[str, Tuple[int, ...]],
                         info: Dict[str, Any]) -> None:
    """Refuses a file whose arrays' `shapes` declare a model far larger
    than they hold, or a position table of more than MAX_TOKENS rows: the
    sizes are read from a few shapes (the block count from names alone),
    and the model is allocated before any array is compared with it. A
    whole file holds every parameter counted here (blocks, patch
    embedding, table, head and pre-logits, a lower bound of a hybrid's
    ResNet); twice that and 4M spare a partial one."""
    table = shapes.get(checkpoint_io.POSEMB, ())
    tokens = int(table[1]) if len(table) == 3 else 0
    if tokens > MAX_TOKENS:
        raise UsageError(
            f"{path} declares a position table of {tokens:,} patches, more "
            f"than the {MAX_TOKENS:,} a model is built with here: refused "
            "before the model is built. The file is corrupt or crafted; "
            "download or save it again.")
    width, mlp, layers, patch, classes, rep = (int(info[k] or 0) for k in (
        "hidden_size", "mlp_dim", "num_layers", "patch_size", "num_classes",
        "representation_size"))
    # A hybrid's ResNet: each unit of stage s holds at least its 3x3
    # convolution of 64 * width * 2**s features (the unit and stage
    # counts come from key names).
    stages = tuple(info["resnet_layers"] or ())
    units, stem = sum(stages), 64 * int(info.get("resnet_width") or 0)
    declared = (layers * (4 * width * width + 2 * width * mlp)
                + (3 * patch * patch + tokens) * width
                + (rep or width) * classes + width * rep
                + sum(n * 9 * (stem << s) ** 2 for s, n in enumerate(stages)))
    held = sum(math.prod(int(n) for n in shape) for shape in shapes.values())
    if declared > 2 * held + (1 << 22):
        resnet = (f", {units} ResNet unit{'s' if units > 1 else ''} of "
                  f"width {stem}" if units else "")
        raise UsageError(
            f"{path} declares a model of at least {declared:,} parameters "
            f"({layers} blocks of width {width}, MLP {mlp}, a head of "
            f"{rep or width} x {classes}{resnet}) and holds {held:,} "
            "values: refused before the model is built. The file is corrupt "
            "or crafted; download or save it again.")


def _grid_tokens(content: _NpzContent) -> Optional[int]:
    """The patch positions of a file's learnt position embedding (its
    class token's row left out); None where it has none or no patch
    size."""
    info = content.info
    if checkpoint_io.POSEMB not in content.arrays or not info["patch_size"]:
        return None
    shape = shape_of(content.arrays, checkpoint_io.POSEMB)
    if len(shape) != 3:
        return None
    return int(shape[1]) - (1 if info["pooling"] == "token" else 0)


def _file_image_size(content: _NpzContent, grid=None):
    """The resolution a file's learnt position-embedding grid was trained
    at (grid x patch x ResNet stride): the grid given (`posemb_grid`, a
    file whose grid is not square) where it holds the file's tokens, else
    the square one its tokens make; None where neither does."""
    info, tokens = content.info, _grid_tokens(content)
    if not tokens:
        return None
    stride = total_stride(info["patch_size"], info["resnet_layers"])
    if grid is not None and grid[0] * grid[1] == tokens:
        return (grid[0] * stride, grid[1] * stride)
    side = int(round(tokens ** 0.5))
    if side * side != tokens:
        return None
    return side * stride
