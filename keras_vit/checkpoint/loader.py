"""Where a pre-trained model comes from, for evaluation and transfer.

Three sources: a training run's workdir (its latest checkpoint), a saved
`.keras` model, or an official / big_vision `.npz` checkpoint (the
architecture is read from the array shapes; `--variant` checks it). From a
source, `load_model` gives the model as it was trained (head included);
`write_backbone` writes its backbone (no head) as an .npz that fine-tuning
configs initialise from, and `transfer_model_config` gives the matching
`config.model` fields.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, Optional

import keras

MODEL_FIELDS = (
    "patch_size", "hidden_size", "num_layers", "num_heads", "mlp_dim",
    "pooling", "representation_size", "resnet_layers", "resnet_width",
)


@dataclasses.dataclass(frozen=True)
class Source:
    """A pre-trained model: exactly one of workdir, keras_model, npz.

    Attributes:
        workdir: str or None. A `train.py --workdir`.
        keras_model: str or None. A `.keras` file.
        npz: str or None. An official-layout `.npz` checkpoint.
        variant: str or None. With npz: the expected variant ("B/16"); the
            file's shapes must match it.
    """

    workdir: Optional[str] = None
    keras_model: Optional[str] = None
    npz: Optional[str] = None
    variant: Optional[str] = None

    def __post_init__(self):
        kinds = ("workdir", "keras_model", "npz")
        given = [k for k in kinds if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "Give exactly one pre-trained model: --workdir=RUN_DIR, "
                "--keras_model=FILE.keras or --npz=FILE.npz [--variant=B/16]"
                f" (got {', '.join(given) or 'none'})."
            )
        if self.variant and not self.npz:
            raise ValueError(
                "--variant goes with --npz only (a workdir or .keras file "
                "records its own architecture)."
            )

    @property
    def path(self) -> str:
        return self.workdir or self.keras_model or self.npz

    def describe(self) -> str:
        """str. A short label for reports, e.g. "ViT-B_16.npz"."""
        name = os.path.basename(os.path.normpath(self.path))
        return f"{name} ({self.variant})" if self.variant else name


def _arch_from_arrays(arrays: Dict[str, Any]) -> Dict[str, Any]:
    from keras_vit.checkpoint.npz import describe_arrays

    shapes = {k: tuple(v.shape) for k, v in arrays.items()}
    info = describe_arrays(shapes)
    if info["resnet_layers"]:
        info["resnet_width"] = int(shapes["conv_root/kernel"][-1]) // 64
    return info


def architecture(source: Source) -> Dict[str, Any]:
    """The source's architecture: MODEL_FIELDS, num_classes and variant
    (None when it is not a named variant)."""
    if source.workdir:
        from keras_vit.checkpoint import workdir as wd
        from keras_vit.training import train_lib

        config = wd.read_config(source.workdir)
        model = config.model.to_dict()
        info = {k: model.get(k) for k in MODEL_FIELDS}
        info["variant"] = model.get("variant")
        if info["variant"]:
            from keras_vit.model import decode_variant

            spec = decode_variant(info["variant"])
            for field in ("hidden_size", "num_layers", "num_heads", "mlp_dim"):
                if info[field] is None:
                    info[field] = getattr(spec.size, field)
            if info["patch_size"] is None:
                info["patch_size"] = spec.patch_size
        info["num_classes"] = train_lib.num_classes_of(config, source.workdir)
        info["image_size"] = config.image_size
        return info
    if source.keras_model:
        from keras_vit.checkpoint import weights as checkpoint

        model = keras.models.load_model(source.keras_model, compile=False)
        info = _arch_from_arrays(checkpoint.model_arrays(model))
        info["image_size"] = tuple(model.input_shape[1:3])
        return info
    from keras_vit.checkpoint.npz import normalize_layout, read_npz

    arrays, _, _ = normalize_layout(read_npz(source.npz), source.npz)
    info = _arch_from_arrays(arrays)
    info["image_size"] = None
    if source.variant:
        from keras_vit.model import decode_variant

        spec = decode_variant(source.variant)
        want = dict(
            hidden_size=spec.size.hidden_size,
            num_layers=spec.size.num_layers,
            num_heads=spec.size.num_heads,
            mlp_dim=spec.size.mlp_dim,
            patch_size=spec.patch_size,
        )
        wrong = {k: info[k] for k, v in want.items() if info[k] != v}
        if wrong:
            raise ValueError(
                f"{source.npz} is not a {source.variant} checkpoint: it has "
                f"{wrong} where {source.variant} has "
                f"{ {k: want[k] for k in wrong} }. Fix --variant (the file "
                f"looks like {info['variant'] or 'a custom size'})."
            )
    return info


def model_arrays(source: Source) -> Dict[str, Any]:
    """The source's parameters in the official .npz layout."""
    if source.npz:
        from keras_vit.checkpoint.npz import normalize_layout, read_npz

        architecture(source)  # checks --variant
        arrays, _, _ = normalize_layout(read_npz(source.npz), source.npz)
        return arrays
    from keras_vit.checkpoint import weights as checkpoint

    return checkpoint.model_arrays(load_model(source))


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
    from keras_vit.checkpoint.npz import write_npz

    drop = ("head/",) if keep_pre_logits else ("head/", "pre_logits/")
    arrays = {
        k: v for k, v in model_arrays(source).items()
        if not k.startswith(drop)
    }
    write_npz(path, arrays)
    return Source(npz=path)


def transfer_model_config(
    source: Source, overrides: Optional[Dict[str, Any]] = None
) -> Dict[str, Any]:
    """`config.model` fields that rebuild the source's architecture.

    `overrides` are non-None fields of a config's `model` (e.g.
    dropout_rate) that win.
    """
    info = architecture(source)
    model = {k: info[k] for k in MODEL_FIELDS if info.get(k) is not None}
    model["variant"] = None  # explicit sizes
    for key, value in (overrides or {}).items():
        if value is not None:
            model[key] = value
    return model


def load_model(source: Source, image_size=None) -> keras.Model:
    """The source's model as trained (head included), float32.

    Args:
        source: Source.
        image_size: int, (height, width) or None. Rebuild at this
            resolution (position embeddings resized); None keeps the
            source's (224 for an .npz, which records none).
    """
    from keras_vit.checkpoint import weights as checkpoint

    if source.workdir:
        from keras_vit.checkpoint import workdir as wd

        model = wd.restore_model(source.workdir, use_ema=True)
    elif source.keras_model:
        model = keras.models.load_model(source.keras_model, compile=False)
    else:
        from keras_vit.model import create_model

        info = architecture(source)
        kwargs = {k: info[k] for k in MODEL_FIELDS if info.get(k) is not None}
        model = create_model(
            None,
            num_classes=info["num_classes"] or 0,
            image_size=image_size or 224,
            **kwargs,
        )
        checkpoint.load_npz(
            model, source.npz, keep_pre_logits=True,
        )
        return model
    if image_size is not None:
        from keras_vit.data.preprocessing import as_hw

        if tuple(model.input_shape[1:3]) != as_hw(image_size):
            model = checkpoint.rebuild_at_resolution(model, image_size)
    return model
