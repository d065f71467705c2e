"""Where a pre-trained model comes from, for every tool that needs one.

Four sources: a training run's workdir (its latest checkpoint), a saved
`.keras` model, an official / big_vision `.npz` checkpoint (the
architecture is read from the array shapes; `variant` checks it), or a
Hugging Face layout directory of Hugging Face or timm ViT weights
(`keras_vit.checkpoint.hub`).
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

from keras_vit import mpp
from keras_vit.checkpoint import augreg, hub, hub_model, weights
from keras_vit.checkpoint import npz as checkpoint_io
from keras_vit.checkpoint import workdir as wd
from keras_vit.checkpoint.resolution import rebuild_at_resolution
from keras_vit.model import _image_hw, create_model, decode_variant
from keras_vit.errors import UsageError

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
    """

    workdir: Optional[str] = None
    keras_model: Optional[str] = None
    npz: Optional[str] = None
    hub: Optional[str] = None
    variant: Optional[str] = None
    posemb_grid: Optional[Tuple[int, int]] = None
    use_ema: bool = True

    def __post_init__(self):
        kinds = ("workdir", "keras_model", "npz", "hub")
        given = [k for k in kinds if getattr(self, k)]
        if len(given) != 1:
            raise UsageError(
                "Give exactly one pre-trained model: --workdir=RUN_DIR, "
                "--keras_model=FILE.keras, --npz=FILE.npz [--variant=B/16]"
                " or --hub=HF_MODEL_DIR"
                f" (got {', '.join(given) or 'none'})."
            )
        if self.variant and not self.npz:
            raise UsageError(
                "--variant goes with --npz only (a workdir or .keras file "
                "records its own architecture)."
            )
        if self.posemb_grid is not None:
            if not self.npz:
                raise UsageError(
                    "--posemb_grid goes with --npz only (a workdir or .keras "
                    "file records its own grid)."
                )
            grid = self.posemb_grid
            if isinstance(grid, int):
                grid = (grid, grid)
            object.__setattr__(self, "posemb_grid", tuple(int(n) for n in grid))

    @property
    def path(self) -> str:
        return self.workdir or self.keras_model or self.npz or self.hub

    def describe(self) -> str:
        """str. A short label for reports, e.g. "ViT-B_16.npz"."""
        name = os.path.basename(os.path.normpath(self.path))
        return f"{name} ({self.variant})" if self.variant else name


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


def _npz_image_size(info: Dict[str, Any]) -> int:
    """The resolution an .npz loads at by default: a fine-tuned AugReg
    file's own (from its name), else 224."""
    name = info.get("augreg")
    return name.image_size if name is not None else 224


def describe_source(source: Source) -> Dict[str, Any]:
    """The source's architecture: MODEL_FIELDS, num_classes, image_size
    (for an .npz: None, or a fine-tuned AugReg file's resolution) and
    variant (None when it is not a named variant)."""
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
    info = _read_npz(source).info
    name = info.pop("augreg")
    info["image_size"] = None if name is None else name.image_size
    return info


def _source_content(source: Source):
    """(arrays, patch grid or None, layout, ignored) of a source, in the
    official layout, for `weights.load_arrays`."""
    if source.npz:
        content = _read_npz(source)
        return (
            content.arrays, source.posemb_grid, content.layout,
            content.ignored,
        )
    if source.hub:
        checkpoint = hub.read_hub(source.hub)
        patch = int(checkpoint.arrays["embedding/kernel"].shape[0])
        grid = tuple(s // patch for s in checkpoint.image_size)
        return checkpoint.arrays, grid, checkpoint.naming, ()
    model = load_model(source)
    return (
        weights.model_arrays(model), weights.model_grid(model), "official",
        (),
    )


def source_arrays(source: Source) -> Dict[str, Any]:
    """The source's parameters in the official .npz layout."""
    return _source_content(source)[0]


def write_backbone(
    source: Source, path: str, keep_pre_logits: bool = False
) -> Source:
    """Writes the source without its head as an .npz, for transfer.

    Fine-tuning from this file always starts with a zero-initialised head,
    even when the pre-trained head happens to have the task's class count.
    The pre-logits layer goes too unless `keep_pre_logits` (the paper
    removes the whole pre-training head). Written atomically.

    Returns:
        A Source for the written file.
    """
    drop = ("head/",) if keep_pre_logits else ("head/", "pre_logits/")
    arrays = {
        k: v for k, v in source_arrays(source).items()
        if not k.startswith(drop)
    }
    checkpoint_io.write_npz(path, arrays)
    return Source(npz=path)


def transfer_model_config(
    source: Source, overrides: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """`config.model` fields that rebuild the source's architecture.

    `overrides` are non-None fields of a config's `model` (e.g.
    dropout_rate) that win.
    """
    info = describe_source(source)
    model = {k: info[k] for k in MODEL_FIELDS if info.get(k) is not None}
    model["variant"] = None  # explicit sizes
    for key, value in (overrides or {}).items():
        if value is not None:
            model[key] = value
    return model


def initialise(
    model: keras.Model, source: Source, *, keep_pre_logits: bool = False
) -> checkpoint_io.LoadReport:
    """Loads a source's weights into `model`, for fine-tuning.

    The head is kept only when its shape fits (else it starts at zero, as
    for transfer in the paper); the pre-logits layer only with
    `keep_pre_logits`; the position embedding is resized to the model's
    patch grid. Strict: anything else that does not fit is an error.

    Returns:
        The `LoadReport`.
    """
    arrays, grid, layout, ignored = _source_content(source)
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
        image_size=_npz_image_size(info) if image_size is None
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
    source: Source,
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
        source: Source.
        image_size: int, (height, width) or None. Rebuild at this
            resolution (position embeddings resized); None keeps the
            source's (for an .npz: 224, or the resolution in a fine-tuned
            AugReg file's name).
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
        model = keras.models.load_model(source.keras_model, compile=False)
    if mpp.is_mpp_model(model):
        # The mask token and the MPP head are pre-training's: every tool
        # takes the encoder.
        model = mpp.encoder_model(model)
    if image_size is not None:
        if tuple(model.input_shape[1:3]) != _image_hw(image_size):
            model = rebuild_at_resolution(model, image_size)
    return (model, report) if with_report else model


def class_names(source: Source) -> Optional[list]:
    """list of str or None. The class names a source records: a run's
    labels.txt, a hub model's id2label / label_names."""
    if source.workdir:
        return wd.read_class_names(source.workdir)
    if source.hub:
        return hub.read_hub(source.hub).class_names
    return None
