"""Where a pre-trained model comes from, for every tool that needs one.

A source is given as one string or a `Source`: `resolve` (the one
resolver, `keras_vit.checkpoint.resolve`) makes any string local once, and
the source kinds (`keras_vit.checkpoint.sources`) answer the rest.

`load_model` is the one function that turns a source into a model (at
another resolution if asked); `load_report` gives the model with what the
load mapped (`LoadReport`). Evaluation, export, analysis and the converter
call them; training initialises from a source with `initialise`.
`write_backbone` writes a source's backbone (no head) as an .npz that
fine-tuning configs initialise from, and `transfer_model_config` gives the
matching `config.model` fields.
"""

from __future__ import annotations

import glob
import os
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple, Union

import keras
import tensorflow as tf
from absl import logging

from keras_vit import legacy
from keras_vit.architecture import SHAPE_FIELDS, Architecture, Numerics
from keras_vit.checkpoint import weights
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.checkpoint.formats.lazy import renamed, shape_of
from keras_vit.checkpoint.npz_source import NpzSource
from keras_vit.checkpoint.posemb import square_or_none
from keras_vit.checkpoint.resolve import (
    SOURCE_KINDS,
    SourceLike,
    download_kind,
    kind_words,
    resolve,
)
from keras_vit.checkpoint.sources import (
    FROM_SOURCE,
    HubSource,
    KerasSource,
    LiteRTSource,
    SavedModelSource,
    Source,
    WorkdirSource,
    check_pre_logits,
    require_vit,
)
from keras_vit.errors import UsageError
from keras_vit.model import VisionTransformer
from keras_vit.storage import atomic, checkpoint_list
from keras_vit.storage import workdir as wd

__all__ = [
    "FROM_SOURCE", "HubSource", "KerasSource", "LiteRTSource",
    "Loaded",
    "NpzSource", "SOURCE_KINDS", "SavedModelSource", "Source",
    "SourceLike", "WorkdirSource", "class_names", "describe_source",
    "download_kind",
    "initialise", "kind_words", "load_model", "load_report", "load_vit",
    "model_files",
    "require_vit", "warn_if_no_vit",
    "resolve",
    "source_arrays",
    "transfer_model_config", "write_backbone",
]

ImageSize = Union[int, Sequence[int]]


def describe_source(source: SourceLike) -> Architecture:
    """The `Architecture` of what `load_model(source)` gives: its sizes,
    head, pooling, pre-logits layer and numerics, at its own resolution
    (an .npz: a fine-tuned AugReg file's, else its own position-embedding
    grid's, else 224; `variant` None when the sizes are of no named
    variant)."""
    return resolve(source).architecture()


def _content(source: Source, keep_pre_logits: bool):
    content = source.content()
    if keep_pre_logits and any(
        k.startswith("pre_logits/") for k in content.arrays
    ):
        check_pre_logits(source.path, content.pre_logits_activation)
    return content


def source_arrays(
    source: SourceLike, keep_pre_logits: bool = True
) -> Dict[str, Any]:
    """The source's parameters in the official .npz layout; with
    `keep_pre_logits`, a pre-logits layer that is not tanh is refused."""
    return _content(resolve(source), keep_pre_logits).arrays


def write_backbone(
    source: SourceLike, path: str, keep_pre_logits: bool = False
) -> NpzSource:
    """Writes the source without its head as an .npz, for transfer.

    Fine-tuning from this file always starts with a zero-initialised head,
    even when the pre-trained head happens to have the task's class count.
    The pre-logits layer goes too unless `keep_pre_logits` (the paper
    removes the whole pre-training head). Written atomically. A source
    whose position table is of a grid that is not square is refused (the
    file could not say its grid).

    Returns:
        The NpzSource of the written file.
    """
    source = resolve(source)
    content = _content(source, keep_pre_logits)
    grid = tuple(content.grid or ())
    if len(grid) == 2 and grid[0] != grid[1] and (
            checkpoint_io.POSEMB in content.arrays):
        raise UsageError(
            f"{source.path} keeps its position table at a {grid[0]}x"
            f"{grid[1]} patch grid, which an .npz cannot record (its grid "
            "is read as a square): make a square copy first (keras-vit-"
            f"convert --model={source.path} --image_size=N --output="
            "SQUARE.keras) and start from it.")
    drop = ("head/",) if keep_pre_logits else ("head/", "pre_logits/")
    arrays = {k: v for k, v in content.arrays.items()
              if not k.startswith(drop)}
    checkpoint_io.write_npz(path, arrays)
    numerics = describe_source(source).numerics
    if numerics != Numerics():
        # The official layout holds no numerics: what is built from the
        # file computes the official ones (as fine-tuning does).
        logging.warning(
            "%s computes its blocks otherwise (GELU %s, LayerNorm epsilon "
            "%g) than the official ViT, whose numerics (GELU tanh, epsilon "
            "1e-06) models built from %s have: their outputs move a little "
            "before the first step, and fine-tuning adapts to them.",
            source.path, "tanh" if numerics.approximate_gelu
            else "exact (erf)", numerics.layer_norm_epsilon, path)
    # Its table is square (above): said, so that a model of as many
    # patches on another grid resizes it (`posemb.check_grid_said`).
    table = shape_of(arrays, checkpoint_io.POSEMB) if (
        checkpoint_io.POSEMB in arrays) else None
    return NpzSource(path, posemb_grid=square_or_none(
        table[1] - int("cls" in arrays)) if table else None)


def transfer_model_config(
    source: SourceLike, overrides: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """`config.model` fields that rebuild the source's architecture.

    `overrides` are non-None fields of a config's `model` (e.g.
    dropout_rate) that win.
    """
    arch = describe_source(source)
    model = {k: getattr(arch, k) for k in SHAPE_FIELDS
             if getattr(arch, k) is not None}
    if arch.resnet_layers is None:
        del model["resnet_width"]  # a hybrid's alone
    model["variant"] = None  # explicit sizes
    for key, value in (overrides or {}).items():
        if value is not None:
            model[key] = value
    return model


def initialise(
    model: keras.Model, source: SourceLike, *, keep_pre_logits: bool = False,
    drop_head: str = "",
) -> checkpoint_io.LoadReport:
    """Loads a source's weights into `model`, for fine-tuning.

    The head is kept only when its shape fits, no `drop_head` reason is
    given and it reads no pre-logits layer that is dropped (else it starts
    at zero, as for transfer in the paper); the pre-logits layer only with
    `keep_pre_logits`; the position embedding is resized to the model's
    patch grid (hub weights the way their library resizes them, as
    `load_model` does). Strict: anything else that does not fit is an error.

    Returns:
        The `LoadReport`.
    """
    source = resolve(source)
    content = _content(source, keep_pre_logits)
    arrays, grid = content.arrays, content.grid
    target = tuple(weights.model_grid(model))
    resized = isinstance(source, HubSource) and tuple(grid) != target
    if resized:
        # Weights from transformers or timm: the table resized as their
        # library resizes it (the official interpolation is the .npz's).
        arrays = source.arrays_at(target)
    ignored = tuple(content.ignored)
    if not (drop_head or keep_pre_logits) and any(
            k.startswith("pre_logits/") for k in arrays):
        # The paper's transfer: the whole head goes (a head kept would read
        # the encoder's features in place of its pre-logits layer's).
        drop_head = ("it reads the pre-logits layer, which is dropped "
                     "(config.init.keep_pre_logits=True keeps both)")
    if drop_head:  # left out as the file's other arrays are: named
        ignored += tuple((k, shape_of(arrays, k), f"{drop_head}; the head "
                          "starts at zero") for k in weights.HEAD_KEYS
                         if k in arrays)
        arrays = renamed(arrays, {k: k for k in arrays
                                  if k not in weights.HEAD_KEYS})
    report = weights.load_arrays(
        model,
        arrays,
        keep_pre_logits=keep_pre_logits,
        posemb_grid=target if resized else grid,
        source=source.path,
        layout=content.layout,
        ignored=ignored,
    )
    if resized:
        report.posemb_resized = (tuple(grid), target)
    return report


class Loaded(NamedTuple):
    """What `load_report` gives: the model, and the `LoadReport` of the
    arrays mapped into it (None for a workdir or a `.keras` file, which
    hold their model)."""

    model: keras.Model
    report: Optional[checkpoint_io.LoadReport]


def load_report(
    source: SourceLike,
    image_size: Optional[ImageSize] = None,
    *,
    num_classes: Optional[int] = None,
    pooling: Optional[str] = None,
    representation_size: Union[int, None, str] = FROM_SOURCE,
    strict: bool = True,
    posemb_grid: Optional[Tuple[int, int]] = None,
) -> Loaded:
    """`load_model` (the same arguments), with the LoadReport of what was
    mapped (`Loaded`; its report is None for a source that holds its whole
    model, a `.keras` file or a training run, taken as saved)."""
    source = resolve(source, posemb_grid=posemb_grid)
    model, report = source.build(
        image_size, num_classes=num_classes, pooling=pooling,
        representation_size=representation_size, strict=strict,
    )
    if report is None:  # a model the source holds (its arrays are checked
        # as they are mapped)
        for variable in model.weights:
            weights.check_finite(keras.ops.convert_to_numpy(variable.value),
                                 variable.path, source.path)
    return Loaded(model, report)


def load_model(
    source: SourceLike,
    image_size: Optional[ImageSize] = None,
    *,
    num_classes: Optional[int] = None,
    pooling: Optional[str] = None,
    representation_size: Union[int, None, str] = FROM_SOURCE,
    strict: bool = True,
    posemb_grid: Optional[Tuple[int, int]] = None,
) -> keras.Model:
    """The source's model as trained (head included), float32 weights.

    A workdir gives its latest checkpoint (`WorkdirSource.use_ema`: the EMA
    weights when the run kept them), a `.keras` file its model (one that
    is no ViT as Keras saved it, with a warning: `load_vit` refuses it); a
    masked patch prediction model (either source) gives its encoder as a
    features model (`keras_vit.mpp.encoder_model`: the MPP head dropped).
    A hub model gives the model its config.json and arrays describe, at its
    own resolution unless `image_size` says otherwise. An .npz gives the
    architecture its shapes describe (`NpzSource.variant` checks it),
    built with the head, pooling and pre-logits layer of the file unless
    the arguments below say otherwise. The arrays of an .npz or a hub model
    (and of a workdir or `.keras` model given `num_classes` or
    `representation_size`: rebuilt with that head) are mapped by
    `weights.load_arrays`; `load_report` also gives what it mapped.

    Args:
        source: Source, or a string (`resolve`): a released model's name,
            hf://ORG/NAME[@REVISION], a gs:// address or a path.
        image_size: int, (height, width) or None. Rebuild at this
            resolution (position embeddings resized); None keeps the
            source's (for an .npz: the resolution in a fine-tuned AugReg
            file's name, else its own position-embedding grid's, else 224).
        num_classes: int or None. The head's width (any source but an
            export): the source's head is kept when it has this width,
            else the head starts at zero; 0 builds a features model.
            None: the source's.
        pooling: "token", "gap" or None. An .npz only; None: the file's.
            (A hub model, a workdir or a `.keras` file keeps its own.)
        representation_size: int, None or FROM_SOURCE. The pre-logits
            width, None for no pre-logits layer; FROM_SOURCE: the
            source's, where its head is kept (or there is none); a new
            head (`num_classes` another width) drops them, as for
            transfer in the paper.
        strict: bool. Any array that does not fit the model is an error;
            False loads what fits (and builds an .npz's `variant` even
            when the file is another variant).
        posemb_grid: (rows, cols) or None. An .npz named by a string: its
            patch grid, where it is not square (`resolve`).

    Returns:
        keras.Model.

    Raises:
        UsageError: a string that names no model (`resolve`), `pooling`
            for a source that keeps its own, a file that does not fit the
            model asked for.
        FileNotFoundError: a missing config.json or checkpoint.
    """
    source = resolve(source, posemb_grid=posemb_grid)
    model = load_report(
        source, image_size, num_classes=num_classes, pooling=pooling,
        representation_size=representation_size, strict=strict,
    ).model
    warn_if_no_vit(source, model)
    return model


def warn_if_no_vit(source: Source, model: keras.Model) -> None:
    """Warns where `source`, a `.keras` file, holds a Keras model that is
    no ViT (given back as Keras saved it)."""
    if isinstance(source, KerasSource) and not isinstance(
            model, VisionTransformer):
        logging.warning(
            "%s holds a Keras model that is not a keras_vit Vision "
            "Transformer (%s): it is given back as Keras saved it; the "
            "keras-vit commands and what else needs a ViT refuse it.",
            source.path, legacy.foreign_layer(model))


def load_vit(source: SourceLike,
             image_size: Optional[ImageSize] = None, **build) -> keras.Model:
    """`load_model` for what needs a ViT (the commands read its logits,
    features and attention): a `.keras` file holding another Keras model
    is refused by name (`require_vit`), not warned of."""
    source = resolve(source)
    return require_vit(load_report(source, image_size, **build).model,
                       source.path)


def class_names(source: SourceLike) -> Optional[list]:
    """list of str or None. The class names a source records: a run's
    labels.txt, a hub model's id2label / label_names. (An export's
    labels.txt is keras-vit-predict's to read: an export is no source.)"""
    return resolve(source).class_names()


def model_files(source: Source) -> Optional[list]:
    """[[name, size, sha256]] of the local files `source` reads its
    weights from (a workdir: its newest checkpoint's), so that a file
    replaced at the same path is known for another model (and a copy of
    the same file, on another worker, for the same one); None for a
    remote source, known by its location."""
    path = source.path
    if atomic.is_remote(path):
        return None
    if source.kind == "workdir":
        newest = checkpoint_list.latest(os.path.join(path, wd.CHECKPOINTS))
        files = tf.io.gfile.glob(glob.escape(newest) + ".*") if newest else []
    elif os.path.isdir(path):
        files = [os.path.join(path, name) for name in os.listdir(path)
                 if os.path.isfile(os.path.join(path, name))]
    else:
        files = [path]
    return [[os.path.basename(f), os.path.getsize(f), atomic.sha256(f)]
            for f in sorted(files)]
