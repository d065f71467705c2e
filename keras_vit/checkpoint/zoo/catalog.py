"""The released ViT checkpoints by name: what
`keras_vit.load_model("ViT-B_16")` and `keras_vit.list_models()` know.

The official files (google-research/vision_transformer) live in the
`gs://vit_models` bucket:

    imagenet21k/               pre-trained on ImageNet-21k (224 x 224, the
                               21,843-class head all zeros)
    imagenet21k+imagenet2012/  the same, fine-tuned on ImageNet-1k at 384
                               (at 224 for the "-224" files)
    sam/                       trained on ImageNet-1k with the SAM optimizer
    augreg/                    "How to train your ViT?" (AugReg): every file
                               of its index.csv, pre-trained and fine-tuned

A name is the file's path in the bucket without `.npz`
("imagenet21k+imagenet2012/ViT-B_16", "augreg/S_16-i21k-300ep-..."); a
short name ("ViT-B_16", "R50+ViT-B_16") is the ImageNet-21k pre-trained
file, the starting point for transfer (for the sizes only AugReg released,
"ViT-Ti_16", "ViT-S_16", "ViT-S_32", "R+ViT-Ti_16", "R26+ViT-S_32" and
"R50+ViT-L_32", AugReg's recommended ImageNet-21k file), and
"ViT-B_16-224" / "ViT-L_16-224" the ImageNet-1k fine-tuned files at 224.
A string ending in `.npz`, or with a directory part that is no released
name's, is a path (`is_path`): never a download. `augreg/<file>`
takes any name from the AugReg index (`keras_vit.checkpoint.zoo.augreg`);
`list_models()` lists its recommended checkpoints (the best per model, as
the official README's table).

The bucket's address comes from $KERAS_VIT_MODELS_BASE_URL (default
gs://vit_models), so a mirror (another bucket, a local directory, an
`https://` or `file://` URL that tf.io.gfile reads) serves the same names.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import os
from typing import Any, Dict, List, Optional, Tuple

from keras_vit.checkpoint.zoo import augreg
from keras_vit.errors import UsageError
from keras_vit.grid import patch_grid, total_stride
from keras_vit.variants import decode_variant, released_variant

BASE_URL_ENV = "KERAS_VIT_MODELS_BASE_URL"
OFFICIAL_BUCKET = "gs://vit_models"

_IN21K = "ImageNet-21k"
_IN21K_IN1K = "ImageNet-21k, fine-tuned on ImageNet-1k"
_AUGREG_DATA = {"i21k": "ImageNet-21k", "i1k": "ImageNet-1k",
                "imagenet2012": "ImageNet-1k"}

# The files of the bucket's directories (the official README and model
# configs): (directory, pre-trained on, resolution, classes, file names).
_DIRECTORIES = (
    ("imagenet21k", _IN21K, 224, 21843,
     ("ViT-B_8", "ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32", "ViT-H_14",
      "R50+ViT-B_16")),
    ("imagenet21k+imagenet2012", _IN21K_IN1K, 384, 1000,
     ("ViT-B_8", "ViT-B_16", "ViT-B_32", "ViT-L_16", "ViT-L_32",
      "R50+ViT-B_16")),
    ("imagenet21k+imagenet2012", _IN21K_IN1K, 224, 1000,
     ("ViT-B_16-224", "ViT-L_16-224")),
    ("sam", "ImageNet-1k (SAM optimizer)", 224, 1000,
     ("ViT-B_16", "ViT-B_32")),
)

# AugReg's recommended checkpoints: the pre-trained file with the best
# upstream metrics per model, and its ImageNet-1k fine-tuning at 384.
_AUGREG_BEST = (
    "L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-do_0.0-sd_0.0",
    "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0",
    "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0",
    "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1",
    "R26_S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
    "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
    "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0",
    "S_32-i21k-300ep-lr_0.001-aug_none-wd_0.1-do_0.0-sd_0.0",
    "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0",
)
# Also recommended (big_vision's howto-i21k-B/8); no fine-tuning at 384.
_AUGREG_BEST_PRETRAINED = (
    "B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0",)
_AUGREG_FINETUNE_LR = {"L_16": "0.01", "R50_L_32": "0.01", "R26_S_32": "0.01",
                       "B_32": "0.01", "S_32": "0.01"}


# The byte size and sha256 of released files, by name: what a downloaded
# or cached file must match besides the architecture its name implies
# (`expected_architecture`, checked for every file). Only values computed
# from the released files belong here; none is recorded yet.
KNOWN_FILES: Dict[str, Tuple[int, str]] = {}


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """One released checkpoint.

    Attributes:
        name: str. What `load_model` takes: the file's path in the bucket
            without `.npz` ("imagenet21k/ViT-B_16").
        variant: str. The keras_vit variant ("B/16", "R50+B/16").
        pretrained_on: str. The training data ("ImageNet-21k", "ImageNet-21k,
            fine-tuned on ImageNet-1k").
        image_size: int. The resolution the file was trained at, at which
            it loads by default.
        num_classes: int or None. The head's width (None: the data set does
            not fix it).
        size: int or None. The file's size in bytes, where known
            (`KNOWN_FILES`).
        sha256: str or None. The file's SHA-256 (hex), where known.
    """

    name: str
    variant: str
    pretrained_on: str
    image_size: int
    num_classes: Optional[int]
    size: Optional[int] = None
    sha256: Optional[str] = None

    def __post_init__(self):
        known = KNOWN_FILES.get(self.name)
        if known is not None and self.size is None and self.sha256 is None:
            object.__setattr__(self, "size", int(known[0]))
            object.__setattr__(self, "sha256", str(known[1]).lower())

    @property
    def file(self) -> str:
        """str. The file's path in the bucket ("imagenet21k/ViT-B_16.npz")."""
        return self.name + ".npz"

    @property
    def url(self) -> str:
        """str. Where the file is downloaded from (`base_url()`)."""
        return f"{base_url()}/{self.file}"


def base_url() -> str:
    """str. The bucket the names are downloaded from:
    $KERAS_VIT_MODELS_BASE_URL or gs://vit_models, no trailing slash."""
    return (os.environ.get(BASE_URL_ENV) or OFFICIAL_BUCKET).rstrip("/")


def expected_architecture(info: ModelInfo) -> Dict[str, Any]:
    """What a file released under `info.name` holds: the sizes of its
    variant (as `npz_layout.describe_arrays` reports them), the head's width
    (`num_classes`, None when the data set does not fix it) and the side
    of its square position grid at `info.image_size` (`grid`)."""
    spec = decode_variant(info.variant)
    stride = total_stride(spec.patch_size, spec.resnet_layers)
    return dict(
        hidden_size=spec.size.hidden_size,
        num_layers=spec.size.num_layers,
        num_heads=spec.size.num_heads,
        mlp_dim=spec.size.mlp_dim,
        patch_size=spec.patch_size,
        resnet_layers=spec.resnet_layers,
        num_classes=info.num_classes,
        grid=patch_grid(info.image_size, stride)[0],
    )


def official_variant(file_name: str) -> str:
    """The keras_vit variant of an official file name: "ViT-B_16-224" ->
    "B/16", "R50+ViT-B_16" -> "R50+B/16"."""
    name = file_name.split("-224")[0]
    # (a name of no variant, a typo in the table: refused by name)
    return released_variant(name) or decode_variant(name) and name


def _augreg_info(name: str) -> Optional[ModelInfo]:
    if "/" in name:  # AugReg's files are at the top of augreg/
        return None
    parsed = augreg.parse_name(name)
    if parsed is None:
        return None
    data = _AUGREG_DATA[parsed.dataset]
    if parsed.fine_tuned:
        adapt = parsed.adapt_dataset
        data += f", fine-tuned on {_AUGREG_DATA.get(adapt, adapt)}"
    return ModelInfo(f"augreg/{name}", parsed.variant, f"{data} (AugReg)",
                     parsed.image_size, parsed.num_classes)


def augreg_recommended(variant: str) -> Optional[str]:
    """The name of AugReg's recommended ImageNet-21k file of `variant`
    (the best upstream metrics of its sweep; "B/16" ->
    "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"), or None
    for a variant without one."""
    return next((name for name in _AUGREG_BEST + _AUGREG_BEST_PRETRAINED
                 if augreg.parse_name(name).variant == variant), None)


def augreg_finetune_lr(model: str) -> float:
    """The learning rate AugReg's released ImageNet fine-tunings of
    `model` (its file name's model, "L_16") used: 0.01 or 0.03."""
    return float(_AUGREG_FINETUNE_LR.get(model, "0.03"))


def _augreg_best() -> List[str]:
    names = []
    for name in _AUGREG_BEST:
        model = name.split("-", 1)[0]
        lr = augreg_finetune_lr(model)
        names += [name, f"{name}--imagenet2012-steps_20k-lr_{lr:g}-res_384"]
    return names + list(_AUGREG_BEST_PRETRAINED)


def _table() -> List[ModelInfo]:
    models = [
        ModelInfo(f"{directory}/{file}", official_variant(file), data, size,
                  classes)
        for directory, data, size, classes, files in _DIRECTORIES
        for file in files
    ]
    return models + [_augreg_info(name) for name in _augreg_best()]


def short_name(variant: str) -> str:
    """The official file name of a variant: "B/16" -> "ViT-B_16",
    "R50+B/16" -> "R50+ViT-B_16" (`official_variant` reversed)."""
    stem, _, size = variant.rpartition("+")
    return f"{stem + '+' if stem else ''}ViT-{size.replace('/', '_')}"


def _short_names(models) -> Dict[str, ModelInfo]:
    """File name -> the imagenet21k file of that name, else the only one;
    a size only AugReg released -> AugReg's recommended ImageNet-21k
    file of it."""
    short = {}
    for info in models:
        directory, file = info.name.split("/", 1)
        if directory != "augreg" and (
            file not in short or directory == "imagenet21k"
        ):
            short[file] = info
    for info in models:
        if info.name.startswith("augreg/") and "--" not in info.name:
            short.setdefault(short_name(info.variant), info)
    return short


_MODELS = {info.name: info for info in _table()}
_SHORT = _short_names(_MODELS.values())
KAGGLE_PREFIX = "kaggle://"
# keras-hub 0.32's ViT presets (keras_hub/src/models/vit/vit_presets.py):
# name -> Kaggle handle (`keras_vit.checkpoint.zoo.kaggle` reads them).
KERAS_HUB_PRESETS = {
    f"vit_{size}_patch{patch}_{res}_{data}":
    f"keras/vit/keras/vit_{size}_patch{patch}_{res}_{data}/{version}"
    for size, patch, res, data, version in (
        ("base", 16, 224, "imagenet", 4), ("base", 16, 384, "imagenet", 4),
        ("large", 16, 224, "imagenet", 4), ("large", 16, 384, "imagenet", 4),
        ("base", 32, 384, "imagenet", 3), ("large", 32, 384, "imagenet", 3),
        ("base", 16, 224, "imagenet21k", 3),
        ("base", 32, 224, "imagenet21k", 3),
        ("huge", 14, 224, "imagenet21k", 3),
        ("large", 16, 224, "imagenet21k", 3),
        ("large", 32, 224, "imagenet21k", 3))
}


def is_kaggle(text: str) -> bool:
    """Whether `text` is a Kaggle handle (the scheme in any case, as
    keras-hub reads it) or keras-hub's name of a ViT preset that is no
    local path (a local path wins over a name of the same spelling);
    downloaded by `keras_vit.checkpoint.zoo.kaggle`."""
    return text.lower().startswith(KAGGLE_PREFIX) or (
        text in KERAS_HUB_PRESETS and not os.path.exists(text))


def list_models(pattern: Optional[str] = None) -> List[ModelInfo]:
    """The released checkpoints `keras_vit.load_model` takes by name.

    Args:
        pattern: str or None. Keep the names matching this shell pattern
            (`fnmatch`, case-insensitive), e.g. "*B_16*" or "augreg/*".

    Returns:
        list of ModelInfo, in the bucket's order: imagenet21k,
        imagenet21k+imagenet2012, sam, then AugReg's recommended ones
        (`augreg/<file>` also takes every other file of AugReg's
        index.csv). The short names ("ViT-B_16") are the imagenet21k files
        (for Ti, S and AugReg's hybrids: AugReg's recommended ImageNet-21k
        files, "ViT-Ti_16"); a pattern matches a model by its name or its
        short name.
    """
    models = list(_MODELS.values())
    if pattern is not None and not isinstance(pattern, str):
        raise UsageError(f"list_models takes a shell pattern (a str, e.g. "
                         f"'*B_16*'), got {pattern!r}.")
    if pattern:
        models = [m for m in models if any(
            fnmatch.fnmatch(name.lower(), pattern.lower())
            for name in (m.name, download_name(m)))]
    return models


def bucket_path(text: str) -> Optional[str]:
    """The path in the bucket that an address in gs://vit_models or in the
    mirror (`base_url()`) points at ("imagenet21k/ViT-B_16.npz"), or None
    for any other string."""
    for prefix in {OFFICIAL_BUCKET, base_url()}:
        if text.startswith(prefix + "/"):
            return text[len(prefix) + 1:]
    return None


def lookup(text: str) -> Optional[ModelInfo]:
    """The released checkpoint that `text` names, or None.

    `text` is a name from `list_models()` or a short one ("ViT-B_16"), with
    or without `.npz`; `augreg/<file>` (or the bare AugReg file name) for
    any file of AugReg's index; or the file's address in gs://vit_models or
    in the configured mirror.
    """
    text = text.strip()
    relative = bucket_path(text)
    name = relative if relative is not None else text
    if name.endswith(".npz"):
        name = name[: -len(".npz")]
    if name in _MODELS:
        return _MODELS[name]
    if relative is None and name in _SHORT:
        return _SHORT[name]
    if name.startswith("augreg/"):
        return _augreg_info(name[len("augreg/"):])
    if relative is None and "/" not in name:
        return _augreg_info(name)
    return None


def pretrained(variant: str) -> Optional[ModelInfo]:
    """The released ImageNet-21k pre-trained checkpoint of `variant` (its
    short name's: the official file, else AugReg's recommended one), or
    None when no size of that name was released."""
    return _SHORT.get(short_name(variant))


def download_name(info: ModelInfo) -> str:
    """The shortest name that downloads `info`: its short name where that
    is it ("ViT-B_16"), else its name."""
    short = os.path.basename(info.name)
    return short if _SHORT.get(short) == info else (
        next((n for n, i in _SHORT.items() if i == info), info.name))


def pretrained_variants() -> List[str]:
    """The variants that `pretrained` finds a checkpoint of."""
    return sorted({info.variant for name, info in _SHORT.items()
                   if name == short_name(info.variant)})


def _is_name(text: str) -> bool:
    """Whether `text` (a directory part, no .npz) is a released name."""
    return text in _MODELS or (text.startswith("augreg/") and _augreg_info(
        text[len("augreg/"):]) is not None)


def is_path(text: str) -> bool:
    """Whether `text` is a path, never a name to download: it ends in
    `.npz`, starts with "/", "./", "../" or "~", or has a directory part
    that no released name has (an address in gs://vit_models is neither:
    `bucket_path`)."""
    text = text.strip()
    if bucket_path(text) is not None:
        return False
    if text.lower().endswith(".npz") or text.startswith(
            ("/", "./", "../", "~")):
        return True
    has_folder = "/" in text or os.sep in text
    return has_folder and not _is_name(text)


def is_download(text: str) -> bool:
    """Whether `text` names a file that the cache downloads (a released
    name or an address in the bucket) rather than a local path, which is
    read where it is (`keras_vit.checkpoint.zoo.cache.locate`)."""
    bucket = bucket_path(text)
    if bucket is None:
        return not (os.path.exists(text) or is_path(text)) and (
            lookup(text) is not None)
    return lookup(text) is not None or bucket.endswith(".npz")


def suggestions(text: str, n: int = 3) -> List[str]:
    """The known names closest to `text` (difflib, ignoring case; of an
    augreg/ name, AugReg's names, else the recommended file of its
    model), best first."""
    text, sweep = text.strip(), text.strip().lower().startswith("augreg/")
    names = {name.lower(): name for name in [*_SHORT, *_MODELS,
             *KERAS_HUB_PRESETS] if not sweep or name.startswith("augreg/")}
    close = [names[name] for name in difflib.get_close_matches(
        text.lower(), list(names), n=n, cutoff=0.5)]
    model = sweep and not close and augreg.model_named(text[7:])
    return close or [f"augreg/{name}" for name in _AUGREG_BEST
                     if model and name.startswith(f"{model}-")]
