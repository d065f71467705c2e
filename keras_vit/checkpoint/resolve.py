"""One way from any model string to a local model source.

`resolve(text)` is the one place where a string a user gives becomes a
`keras_vit.checkpoint.sources.Source`, once; every tool, every command's
`--model` and `config.init.model` go through it:

- `hf://ORG/NAME[@REVISION]`: a Hugging Face model, downloaded into the
  Hugging Face cache (`cache.hf_snapshot`) -> `HubSource`;
- `kaggle://OWNER/MODEL/FRAMEWORK/VARIATION[/VERSION]` or a keras-hub ViT
  preset's name (`vit_base_patch16_224_imagenet`): a keras-hub preset in
  kagglehub's cache, downloaded there when missing (`zoo.kaggle`) ->
  `HubSource`;
- a released checkpoint's name ("ViT-B_16",
  "imagenet21k+imagenet2012/ViT-L_16", "augreg/<file>";
  `keras_vit.list_models()`) or its address in gs://vit_models, downloaded
  once into $KERAS_VIT_CACHE (`cache.locate`) -> `NpzSource`;
- a path (local or a tf.io.gfile URL such as gs://BUCKET/...): a `.npz`
  -> `NpzSource`; a `.keras` file -> `KerasSource`; a folder with Hugging
  Face weights, or such a weights file, or a keras-hub preset folder ->
  `HubSource`; an exported
  SavedModel -> `SavedModelSource`; a training run's workdir (a folder with
  config.json) -> `WorkdirSource`.

Anything else is refused with one line that says why: a missing path (with
the closest released names), a name not in the cache while offline (where
the cache is and how to download), a file or folder of no model kind.
"""

from __future__ import annotations

import json
import os
from typing import Optional, Tuple, Union

import tensorflow as tf

from keras_vit.checkpoint import absent, file_kind
from keras_vit.checkpoint.hub import keras_preset
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.checkpoint.npz_source import NpzSource
from keras_vit.checkpoint.sources import (
    HubSource,
    KerasSource,
    LiteRTSource,
    SavedModelSource,
    Source,
    WorkdirSource,
    is_saved_model,
)
from keras_vit.checkpoint.zoo import cache, catalog
from keras_vit.config import SOURCE_KINDS
from keras_vit.errors import UsageError, one_line
from keras_vit.storage import workdir as wd

SourceLike = Union[Source, str]


def _path_source(text: str, variant, posemb_grid, use_ema) -> Source:
    lower = text.lower().rstrip("/")
    if "://" not in text and not os.path.exists(text):
        raise absent.missing(text)
    try:
        is_dir = tf.io.gfile.isdir(text)
        exists = is_dir or tf.io.gfile.exists(text)
    except (tf.errors.OpError, NotImplementedError) as error:
        reason = one_line(error)
        raise UsageError(f"{text}: cannot be read ({reason}). A model is "
                         f"{SOURCE_KINDS}.") from None
    if not exists:
        raise absent.missing(text)
    if not is_dir:
        named = next((kind for kind, suffix in file_kind.SUFFIXES.items()
                      if lower.endswith(suffix)), None)
        wrong = file_kind.misnamed(text, named)
        if wrong:
            raise UsageError(wrong)
    if lower.endswith(".npz"):
        return NpzSource(text, variant=variant, posemb_grid=posemb_grid)
    if lower.endswith(".keras"):
        return KerasSource(text)
    if lower.endswith(".tflite"):
        return LiteRTSource(text)
    if is_dir:
        if keras_preset.is_preset(text) or any(
                tf.io.gfile.exists(os.path.join(text, name))
                for name in hub.WEIGHT_FILES):
            return HubSource(text)
        if is_saved_model(text):
            return SavedModelSource(text)
        if tf.io.gfile.exists(os.path.join(text, wd.CONFIG)):
            _check_not_hub_config(text)
            return WorkdirSource(text, use_ema=use_ema)
        # An export folder (--export_dir) names its models one level down
        # (SavedModels, or .tflite files).
        inside = sorted(os.path.join(text, n.rstrip("/")) for n in
                        tf.io.gfile.listdir(text)
                        if n.endswith(".tflite") or
                        is_saved_model(os.path.join(text, n.rstrip("/"))))
        more = len(inside) - 3
        hint = (f" It holds the exported model {inside[0]}"
                + (f" (and {', '.join(inside[1:3])}"
                   + (f" and {more} more" if more > 0 else "") + ")"
                   if inside[1:] else "")
                + ", which keras-vit-predict reads (no other command: "
                "they take the model it was exported from)." if inside
                else "")
        raise UsageError(
            f"{text} is a folder of no model kind: it holds no {wd.CONFIG} "
            "(a training run), no Hugging Face weights "
            f"({', '.join(hub.WEIGHT_FILES)}) and no saved_model.pb.{hint} A "
            f"model is {SOURCE_KINDS}."
        )
    if os.path.basename(lower) in hub.WEIGHT_FILES or lower.endswith(
        (".safetensors", ".bin")
    ):
        return HubSource(text)
    raise UsageError(f"{text} is a file of no model kind: give "
                     f"{SOURCE_KINDS}.")


def _check_not_hub_config(folder: str) -> None:
    """A UsageError when the config.json of `folder` is a Hugging Face
    (transformers) model's, not a training run's: its weights are
    missing."""
    path = os.path.join(folder, wd.CONFIG)
    try:  # (with checkpoints/, a fault is the workdir reader's to say)
        with tf.io.gfile.GFile(path) as f:
            fields = json.load(f)
        fault = "" if isinstance(fields, dict) else "is not a JSON object"
    except (tf.errors.OpError, ValueError) as error:
        fields, fault = None, (
            f"cannot be read ({one_line(error)})" if isinstance(
                error, tf.errors.OpError) else
            f"is not valid JSON ({one_line(error)})")
    unreadable = bool(fault)
    fields = {} if unreadable else fields
    if keras_preset.from_keras_hub(fields):  # not local (else read)
        raise UsageError(
            f"{folder} is a keras-hub preset, which is read from a local "
            "folder: copy it to one (gsutil cp -r) and give that.")
    if "architecture" in fields or "pretrained_cfg" in fields:
        raise UsageError(
            f"{folder} holds a timm model's {wd.CONFIG} but not its "
            "weights: download model.safetensors into it (`hf download "
            "timm/NAME --local-dir ...`), or give --model=hf://timm/NAME.")
    if "model_type" in fields or "architectures" in fields:
        raise UsageError(
            f"{folder} holds a Hugging Face model's {wd.CONFIG} but not its "
            "weights: download model.safetensors (or pytorch_model.bin) "
            "into it "
            "(`hf download ORG/NAME --local-dir ...`), or give "
            "--model=hf://ORG/NAME."
        )
    other = unreadable or (fields and not {"model", "input", "trainer"}
                           & set(fields))
    if other and not tf.io.gfile.isdir(os.path.join(folder,
                                                    wd.CHECKPOINTS)):
        if unreadable:  # (a keras-hub preset's or a run's, damaged)
            raise UsageError(
                f"{path} {fault}, and {folder} holds no checkpoints/: "
                "copy the model folder again (or fix the file).")
        raise UsageError(
            f"{folder} is no training run (its {wd.CONFIG} is not a run's "
            "config, and it holds no checkpoints/) and holds no model "
            f"weights. A model is {SOURCE_KINDS}.")


def resolve(
    source: SourceLike,
    *,
    variant: Optional[str] = None,
    posemb_grid: Optional[Tuple[int, int]] = None,
    use_ema: bool = True,
    exports: bool = False,
) -> Source:
    """The local Source that `source` names (see the module doc); a Source
    is returned as it is.

    Args:
        source: Source, or a string: a released model's name, hf://ORG/NAME
            [@REVISION], a gs:// address or a path.
        variant: str or None. An .npz only: the variant it must be.
        posemb_grid: (rows, cols) or None. An .npz only: its patch grid
            when not square.
        use_ema: bool. A training workdir: its EMA weights (when kept).
        exports: bool. Whether an export (a SavedModel, a .tflite) is
            taken (a caller that serves predictions); else it is refused.

    Raises:
        UsageError: nothing of a model kind is there (one line saying why,
            with the closest released names), a name or URI that is not
            cached and cannot be downloaded (saying how to get it),
            `variant` / `posemb_grid` for a source that records its own, or
            an export without `exports`.
    """
    if isinstance(source, Source):
        return source
    if source is None or not str(source).strip():
        raise UsageError(f"No model given: a model is {SOURCE_KINDS}.")
    # A local path as a shell would read it: `--model=~/m.keras` reaches
    # here unexpanded (bash expands no ~ after `=`).
    text = os.path.expanduser(str(source).strip())
    if download_kind(text) == "hub":  # refused before it is downloaded
        _check_hints(text, "hub", variant, posemb_grid)
    located = cache.locate(text)
    if located is None:
        resolved = _path_source(text, variant, posemb_grid, use_ema)
    elif located.kind == "hub":
        resolved = HubSource(located.path)
    else:
        resolved = NpzSource(located.path, variant=variant,
                             posemb_grid=posemb_grid,
                             image_size=located.image_size)
    if resolved.export and not exports:
        resolved.build()  # refused, saying why
    _check_hints(text, resolved.kind, variant, posemb_grid)
    return resolved


def download_kind(text: str) -> Optional[str]:
    """The kind of source ("hub", "npz") that `text` downloads when it is
    not cached: a Hugging Face URI, a released model's name or an address
    in its bucket; None for a path (read where it is)."""
    if text.startswith(cache.HF_PREFIX) or catalog.is_kaggle(text):
        return "hub"
    return "npz" if catalog.is_download(os.path.expanduser(text)) else None


def _check_hints(text: str, kind: str, variant, posemb_grid) -> None:
    """`variant` and `posemb_grid` (given: not None) refused for a source
    of `kind` other than an .npz, which records its own architecture."""
    for name, value in (("variant", variant), ("posemb_grid", posemb_grid)):
        if value is not None and kind != "npz":
            raise UsageError(
                f"`{name}` goes with an .npz model only; {text} is "
                f"{kind_words(kind)}, which records its own architecture.")


_KIND_WORDS = {"keras": "a .keras file", "npz": "an .npz file",
               "hub": "a Hugging Face, timm or keras-hub model",
               "workdir": "a training run",
               "saved_model": "an exported SavedModel",
               "litert": "a LiteRT file"}


def kind_words(kind: str) -> str:
    """What a kind of source (`Source.kind`) is, in words ("a .keras
    file")."""
    return _KIND_WORDS.get(kind, f"a {kind} model")
