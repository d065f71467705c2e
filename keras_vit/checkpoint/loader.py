"""Where a pre-trained model comes from, for every tool that needs one.

Four sources: a training run's workdir (its latest checkpoint), a saved
`.keras` model, an official / big_vision `.npz` checkpoint (the
architecture is read from the array shapes; `variant` checks it), or a
Hugging Face layout directory of Hugging Face or timm ViT weights
(`keras_vit.checkpoint.hub`).
A source is also given as one string (`resolve`): a path of any of the
four kinds, `hf://ORG/NAME[@REVISION]` (a Hugging Face model, downloaded
into the Hugging Face cache), a released checkpoint's name ("ViT-B_16",
"imagenet21k+imagenet2012/ViT-L_16", "augreg/<file>"; `catalog`) or an
address in gs://vit_models, both downloaded once into the local cache
(`cache`).
`load_model` is the one function that turns a source into a model (at
another resolution if asked); evaluation, export, analysis and the
converter call it, and training initialises from a source with
`initialise`. `write_backbone` writes a source's backbone (no head) as an
.npz that fine-tuning configs initialise from, and `transfer_model_config`
gives the matching `config.model` fields.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import keras
import tensorflow as tf

from keras_vit import mpp
from keras_vit.checkpoint import (
    augreg,
    cache,
    catalog,
    hub,
    hub_model,
    weights,
)
from keras_vit.checkpoint import npz as checkpoint_io
from keras_vit.checkpoint import workdir as wd
from keras_vit.checkpoint.resolution import rebuild_at_resolution
from keras_vit.errors import UsageError
from keras_vit.model import (
    _image_hw,
    as_vision_transformer,
    create_model,
    decode_variant,
)
from keras_vit.resnet import resnet_stride

MODEL_FIELDS = (
    "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim",
    "pooling", "posemb", "representation_size", "resnet_layers",
    "resnet_width",
)
_SIZE_FIELDS = ("hidden_size", "num_layers", "num_heads", "mlp_dim")

# `load_model(representation_size=...)`'s default: the source's pre-logits
# layer (None already means "no pre-logits layer").
FROM_SOURCE = "source"

ImageSize = Union[int, Sequence[int]]


@dataclasses.dataclass(frozen=True)
class Source:
    """A pre-trained model: exactly one of workdir, keras_model, npz, hub.

    Attributes:
        workdir: str or None. A `train.py --workdir`.
        keras_model: str or None. A `.keras` file.
        npz: str or None. An official-layout `.npz` checkpoint.
        hub: str or None. A local directory (or its weights file) in the
            Hugging Face layout: config.json + model.safetensors or
            pytorch_model.bin, Hugging Face ViT or timm naming.
        variant: str or None. With npz: the expected variant ("B/16"); the
            file's shapes must match it.
        posemb_grid: (rows, cols) or None. With npz: the file's patch grid,
            needed only when it is not square.
        use_ema: bool. With workdir: the EMA (Polyak) averaged weights when
            the run kept them, else the raw ones.
        image_size: int or None. With npz: the resolution a released
            checkpoint was trained at (`catalog`), its default one (the
            file's own position-embedding grid wins if they differ).
    """

    workdir: Optional[str] = None
    keras_model: Optional[str] = None
    npz: Optional[str] = None
    hub: Optional[str] = None
    variant: Optional[str] = None
    posemb_grid: Optional[Tuple[int, int]] = None
    use_ema: bool = True
    image_size: Optional[int] = None

    def __post_init__(self):
        kinds = ("workdir", "keras_model", "npz", "hub")
        given = [k for k in kinds if getattr(self, k)]
        if len(given) != 1:
            raise UsageError(
                "Give exactly one pre-trained model (--model=SOURCE: "
                f"{SOURCE_KINDS}; got {', '.join(given) or 'none'})."
            )
        if self.variant and not self.npz:
            raise UsageError(
                "--variant goes with an .npz model only (a workdir or .keras "
                "file records its own architecture)."
            )
        if self.posemb_grid is not None:
            if not self.npz:
                raise UsageError(
                    "--posemb_grid goes with an .npz model only (a workdir "
                    "or .keras file records its own grid)."
                )
            grid = self.posemb_grid
            if isinstance(grid, int):
                grid = (grid, grid)
            object.__setattr__(self, "posemb_grid", tuple(int(n) for n in grid))
        if self.image_size is not None and not self.npz:
            raise UsageError(
                "Source.image_size (a released checkpoint's resolution) goes "
                "with npz only."
            )

    @property
    def path(self) -> str:
        return self.workdir or self.keras_model or self.npz or self.hub

    def describe(self) -> str:
        """str. A short label for reports, e.g. "ViT-B_16.npz"."""
        name = os.path.basename(os.path.normpath(self.path))
        return f"{name} ({self.variant})" if self.variant else name


SourceLike = Union[Source, str]

SOURCE_KINDS = (
    "a training workdir, a .keras file, an official .npz (local or gs://), "
    "a Hugging Face / timm folder, hf://ORG/NAME or a released model's name "
    "(keras_vit.list_models())"
)


def source_kind(text: str) -> str:
    """"workdir", "keras_model", "npz" or "hub": the kind of model a path
    (local or a tf.io.gfile URL) is. A path ending .npz or .keras is that
    file; a folder with Hugging Face weights (hub.WEIGHT_FILES), or such a
    weights file, is a hub model; any other folder is a training workdir.

    Raises:
        UsageError: nothing is there (naming the closest released models'
            names), or a file of no model kind.
    """
    lower = text.lower().rstrip("/")
    if "://" not in text and not os.path.exists(text):
        close = catalog.suggestions(text)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UsageError(
            f"{text}: no such file or folder.{hint} A model is "
            f"{SOURCE_KINDS}."
        )
    if lower.endswith(".npz"):
        return "npz"
    if lower.endswith(".keras"):
        return "keras_model"
    if tf.io.gfile.isdir(text):
        if any(tf.io.gfile.exists(os.path.join(text, name))
               for name in hub.WEIGHT_FILES):
            return "hub"
        return "workdir"
    if tf.io.gfile.exists(text):
        if os.path.basename(lower) in hub.WEIGHT_FILES or lower.endswith(
            (".safetensors", ".bin")
        ):
            return "hub"
        raise UsageError(f"{text} is a file of no model kind: give "
                         f"{SOURCE_KINDS}.")
    close = catalog.suggestions(text)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    raise UsageError(
        f"{text!r} is no file or folder and no released model's name.{hint}"
        f" A model is {SOURCE_KINDS}."
    )


def resolve(
    source: SourceLike,
    *,
    variant: Optional[str] = None,
    posemb_grid: Optional[Tuple[int, int]] = None,
    use_ema: bool = True,
) -> Source:
    """The Source that `source` names, with names and URLs made local.

    The one place where every tool's model string becomes a model source:
    a Hugging Face URI or a released checkpoint's name (or its address in
    gs://vit_models) is downloaded once into its cache (`cache.locate`); a
    path is read where it is, its kind from `source_kind`. A Source whose
    npz or hub field holds such a name or URI is resolved alike. The
    keyword arguments go into the Source made from a string.

    Raises:
        UsageError: an unknown name (with the closest known ones), or a
            model that is not cached and cannot be downloaded (saying how
            to get it).
    """
    if isinstance(source, Source):
        if not (source.npz or source.hub):
            return source
        located = cache.locate(source.path)
        if located is None:
            return source
        if (located.kind == "hub") != bool(source.hub):
            what = "a Hugging Face" if located.kind == "hub" else "an .npz"
            raise UsageError(
                f"{source.path} is {what} model: give it as the model "
                "string alone (its kind comes from the name)."
            )
        return dataclasses.replace(
            source, **{located.kind: located.path},
            image_size=source.image_size or located.image_size,
        )
    if not source or not str(source).strip():
        raise UsageError(
            f"No model given: pass --model=SOURCE ({SOURCE_KINDS})."
        )
    text = str(source).strip()
    located = cache.locate(text)
    fields = dict(variant=variant, posemb_grid=posemb_grid, use_ema=use_ema)
    if located is None:
        return Source(**{source_kind(text): text}, **fields)
    return Source(**{located.kind: located.path},
                  image_size=located.image_size, **fields)


@dataclasses.dataclass
class _NpzContent:
    arrays: Dict[str, Any]
    layout: str
    ignored: list
    info: Dict[str, Any]


def _arch_from_arrays(arrays: Dict[str, Any]) -> Dict[str, Any]:
    shapes = {k: tuple(v.shape) for k, v in arrays.items()}
    info = checkpoint_io.describe_arrays(shapes)
    if info["resnet_layers"] is not None:
        info["resnet_width"] = int(shapes["conv_root/kernel"][-1]) // 64
    return info


def _check_variant(source: Source, info: Dict[str, Any]) -> None:
    wrong = augreg.variant_mismatch(source.variant, info)
    if wrong:
        raise UsageError(
            f"{source.npz} is not a {source.variant} checkpoint: it has "
            f"{ {k: f for k, (f, _) in wrong.items()} } where "
            f"{source.variant} has { {k: v for k, (_, v) in wrong.items()} }"
            f". Fix --variant (the file looks like "
            f"{info['variant'] or 'a custom size'})."
        )


def _read_npz(source: Source, check_variant: bool = True) -> _NpzContent:
    arrays, layout, ignored = checkpoint_io.normalize_layout(
        checkpoint_io.read_npz(source.npz), source.npz
    )
    info = _arch_from_arrays(arrays)
    # AugReg files (gs://vit_models/augreg/) say their model and, once
    # fine-tuned, their resolution in the name.
    info["augreg"] = augreg.parse_name(source.npz)
    if info["augreg"] is not None and check_variant:
        augreg.check_name(
            source.npz, info["augreg"], info, source.variant
        )
    if source.variant and check_variant:
        _check_variant(source, info)
    return _NpzContent(arrays, layout, ignored, info)


def _file_image_size(content: _NpzContent) -> Optional[int]:
    """The resolution a file's learnt, square position-embedding grid was
    trained at (grid side x patch x ResNet stride), or None."""
    table = content.arrays.get(checkpoint_io.POSEMB)
    info = content.info
    if table is None or table.ndim != 3 or not info["patch_size"]:
        return None
    tokens = int(table.shape[1]) - (1 if info["pooling"] == "token" else 0)
    side = int(round(tokens ** 0.5))
    if side * side != tokens:
        return None
    stride = info["patch_size"]
    if info["resnet_layers"] is not None:
        stride *= resnet_stride(info["resnet_layers"])
    return side * stride


def _npz_image_size(source: Source, content: _NpzContent) -> int:
    """The resolution an .npz loads at by default: a fine-tuned AugReg
    file's own (from its name), a released checkpoint's (its own grid's),
    else 224."""
    name = content.info.get("augreg")
    if name is not None:
        return name.image_size
    if source.image_size:
        return _file_image_size(content) or source.image_size
    return 224


def describe_source(source: SourceLike) -> Dict[str, Any]:
    """The source's architecture: MODEL_FIELDS, num_classes, image_size
    (for an .npz: None, or the resolution of a released checkpoint or of a
    fine-tuned AugReg file) and
    variant (None when it is not a named variant)."""
    source = resolve(source)
    if source.workdir:
        config = wd.read_config(source.workdir)
        info = {k: config.model[k] for k in MODEL_FIELDS}
        info["variant"] = config.model.variant
        if info["variant"]:
            spec = decode_variant(info["variant"])
            for field in _SIZE_FIELDS:
                if info[field] is None:
                    info[field] = getattr(spec.size, field)
            if info["patch_size"] is None:
                info["patch_size"] = spec.patch_size
        # An MPP run's model is its encoder (see load_model): no head.
        info["num_classes"] = 0 if config.mpp.enabled else wd.num_classes(
            config, source.workdir)
        info["image_size"] = config.image_size
        return info
    if source.keras_model:
        model = load_model(source)
        info = _arch_from_arrays(weights.model_arrays(model))
        info["image_size"] = tuple(model.input_shape[1:3])
        return info
    if source.hub:
        return hub_model.describe_hub(hub.read_hub(source.hub))
    content = _read_npz(source)
    size = None
    if content.info["augreg"] is not None or source.image_size:
        size = _npz_image_size(source, content)
    info = content.info
    del info["augreg"]
    info["image_size"] = size
    return info


def _check_pre_logits(source: Source, activation: str) -> None:
    """Refuses a pre-logits layer this project's models would run with
    another activation: they build it with tanh (the official ViT's)."""
    if activation not in ("tanh", None):
        raise UsageError(
            f"{source.path}: its pre-logits layer uses {activation!r}, and "
            "a model built from a config computes tanh there. Fine-tune "
            "without the pre-logits layer (config.init.keep_pre_logits="
            "False, the paper's transfer), or load the model itself with "
            "keras_vit.load_model."
        )


def _source_content(source: SourceLike, keep_pre_logits: bool = True):
    """(arrays, patch grid or None, layout, ignored) of a source, in the
    official layout, for `weights.load_arrays`. With `keep_pre_logits`, a
    pre-logits layer whose activation is not tanh is refused (the caller
    leaves it out otherwise)."""
    source = resolve(source)
    if source.npz:
        content = _read_npz(source)
        arrays, grid = content.arrays, source.posemb_grid
        layout, ignored, activation = content.layout, content.ignored, None
    elif source.hub:
        checkpoint = hub.read_hub(source.hub)
        arrays = checkpoint.arrays
        grid = tuple(checkpoint.posemb_grid)  # the stored table's grid
        layout, ignored = checkpoint.naming, ()
        activation = checkpoint.pre_logits_activation
    else:
        model = load_model(source)
        arrays, grid = weights.model_arrays(model), weights.model_grid(model)
        layout, ignored, activation = "official", (), None
        if model.architecture.representation_size is not None:
            activation = model.architecture.pre_logits_activation
    if keep_pre_logits and any(k.startswith("pre_logits/") for k in arrays):
        _check_pre_logits(source, activation)
    return arrays, grid, layout, ignored


def source_arrays(
    source: SourceLike, keep_pre_logits: bool = True
) -> Dict[str, Any]:
    """The source's parameters in the official .npz layout; with
    `keep_pre_logits`, a pre-logits layer that is not tanh is refused."""
    return _source_content(source, keep_pre_logits)[0]


def write_backbone(
    source: SourceLike, path: str, keep_pre_logits: bool = False
) -> Source:
    """Writes the source without its head as an .npz, for transfer.

    Fine-tuning from this file always starts with a zero-initialised head,
    even when the pre-trained head happens to have the task's class count.
    The pre-logits layer goes too unless `keep_pre_logits` (the paper
    removes the whole pre-training head). Written atomically.

    Returns:
        A Source for the written file.
    """
    source = resolve(source)
    drop = ("head/",) if keep_pre_logits else ("head/", "pre_logits/")
    arrays = {
        k: v for k, v in source_arrays(source, keep_pre_logits).items()
        if not k.startswith(drop)
    }
    checkpoint_io.write_npz(path, arrays)
    return Source(npz=path)


def transfer_model_config(
    source: SourceLike, overrides: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """`config.model` fields that rebuild the source's architecture.

    `overrides` are non-None fields of a config's `model` (e.g.
    dropout_rate) that win.
    """
    source = resolve(source)
    info = describe_source(source)
    model = {k: info[k] for k in MODEL_FIELDS if info.get(k) is not None}
    model["variant"] = None  # explicit sizes
    for key, value in (overrides or {}).items():
        if value is not None:
            model[key] = value
    return model


def initialise(
    model: keras.Model, source: SourceLike, *, keep_pre_logits: bool = False
) -> checkpoint_io.LoadReport:
    """Loads a source's weights into `model`, for fine-tuning.

    The head is kept only when its shape fits (else it starts at zero, as
    for transfer in the paper); the pre-logits layer only with
    `keep_pre_logits`; the position embedding is resized to the model's
    patch grid. Strict: anything else that does not fit is an error.

    Returns:
        The `LoadReport`.
    """
    source = resolve(source)
    arrays, grid, layout, ignored = _source_content(source, keep_pre_logits)
    return weights.load_arrays(
        model,
        arrays,
        keep_pre_logits=keep_pre_logits,
        posemb_grid=grid,
        source=source.path,
        layout=layout,
        ignored=ignored,
    )


def _model_from_npz(
    source: Source,
    image_size: Optional[ImageSize],
    num_classes: Optional[int],
    pooling: Optional[str],
    representation_size,
    strict: bool,
) -> Tuple[keras.Model, checkpoint_io.LoadReport]:
    # Non-strict loading builds the named variant even when the file is
    # another one, to load what fits.
    content = _read_npz(source, check_variant=strict)
    info = content.info
    variant = source.variant or info["variant"]
    if representation_size == FROM_SOURCE:
        representation_size = info["representation_size"]
    if num_classes is None:
        num_classes = info["num_classes"] or 0
    kwargs = dict(
        num_classes=num_classes,
        image_size=_npz_image_size(source, content) if image_size is None
        else image_size,
        pooling=pooling or info["pooling"],
        posemb=info["posemb"],
        representation_size=representation_size,
    )
    if info["resnet_layers"] is not None:
        kwargs["resnet_width"] = info["resnet_width"]
    if not variant:
        kwargs.update(
            {k: info[k] for k in ("patch_size", "resnet_layers")
             + _SIZE_FIELDS}
        )
    model = create_model(variant, **kwargs)
    report = weights.load_arrays(
        model,
        content.arrays,
        strict=strict,
        keep_pre_logits=representation_size is not None,
        posemb_grid=source.posemb_grid,
        source=str(source.npz),
        layout=content.layout,
        ignored=content.ignored,
    )
    return model, report


def load_model(
    source: SourceLike,
    image_size: Optional[ImageSize] = None,
    *,
    num_classes: Optional[int] = None,
    pooling: Optional[str] = None,
    representation_size: Union[int, None, str] = FROM_SOURCE,
    strict: bool = True,
    with_report: bool = False,
):
    """The source's model as trained (head included), float32 weights.

    A workdir gives its latest checkpoint (`source.use_ema`: the EMA
    weights when the run kept them), a `.keras` file its model; a masked
    patch prediction model (either source) gives its encoder as a features
    model (`keras_vit.mpp.encoder_model`: the MPP head dropped). A hub
    directory gives the model its config.json and arrays describe, at its
    own resolution unless `image_size` says otherwise (`num_classes` and
    `representation_size` as for an .npz). An .npz
    gives the architecture its shapes describe (`source.variant` checks
    it), built with the head, pooling and pre-logits layer of the file
    unless the arguments below say otherwise, its weights loaded through
    `weights.load_arrays`.

    Args:
        source: Source, or a string: a path, hf://ORG/NAME, a released
            model's name or a gs:// address (`resolve`).
        image_size: int, (height, width) or None. Rebuild at this
            resolution (position embeddings resized); None keeps the
            source's (for an .npz: a released checkpoint's resolution, the
            resolution in a fine-tuned AugReg file's name, else 224).
        num_classes: int or None. .npz only: the head's width; the file's
            head is kept when it has this width, else the head starts at
            zero; 0 builds a features model. None: the file's.
        pooling: "token", "gap" or None. .npz only; None: the file's.
        representation_size: int, None or FROM_SOURCE. .npz only: the
            pre-logits width, None for no pre-logits layer; FROM_SOURCE:
            the file's.
        strict: bool. .npz only: any array that does not fit the model is
            an error; False loads what fits (and builds `source.variant`
            even when the file is another variant).
        with_report: bool. Also return the .npz's `LoadReport` (None for
            the other sources).

    Returns:
        keras.Model, or (keras.Model, LoadReport or None) with
        `with_report`.

    Raises:
        FileNotFoundError: a missing file, config.json or checkpoint.
        ValueError: a file that is not a checkpoint, or one that does not
            fit the model asked for.
    """
    source = resolve(source)
    report = None
    if source.npz:
        model, report = _model_from_npz(
            source, image_size, num_classes, pooling, representation_size,
            strict,
        )
        return (model, report) if with_report else model
    if source.hub and pooling is None:
        model, report = hub_model.model_from_hub(
            hub.read_hub(source.hub), image_size, num_classes,
            representation_size, FROM_SOURCE, strict,
        )
        return (model, report) if with_report else model
    if (num_classes, pooling, representation_size) != (
        None, None, FROM_SOURCE
    ):
        raise UsageError(
            "num_classes, pooling and representation_size choose how an "
            ".npz is built (a hub model: not its pooling); a workdir or "
            ".keras file holds its own model."
        )
    if source.workdir:
        model = wd.restore_model(source.workdir, use_ema=source.use_ema)
    else:
        model = weights.read_keras_model(source.keras_model)
        if not mpp.is_mpp_model(model):  # one saved before the class
            model = as_vision_transformer(model)
    if mpp.is_mpp_model(model):
        # The mask token and the MPP head are pre-training's: every tool
        # takes the encoder.
        model = mpp.encoder_model(model)
    if image_size is not None:
        if tuple(model.input_shape[1:3]) != _image_hw(image_size):
            model = rebuild_at_resolution(model, image_size)
    return (model, report) if with_report else model


def class_names(source: SourceLike) -> Optional[list]:
    """list of str or None. The class names a source records: a run's
    labels.txt, a hub model's id2label / label_names."""
    source = resolve(source)
    if source.workdir:
        return wd.read_class_names(source.workdir)
    if source.hub:
        return hub.read_hub(source.hub).class_names
    return None
