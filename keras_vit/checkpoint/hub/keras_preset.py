"""keras-hub ViT presets: a folder that keras-hub's `save_to_preset`
writes (and that its Kaggle presets, `vit_base_patch16_224_imagenet`, ...,
download into), read into the official layout as a `HubCheckpoint`.

The folder is read the way `keras_hub.models.ImageClassifier.from_preset`
reads it (keras-hub 0.32):

- the architecture: task.json's backbone when task.json holds a
  ViTImageClassifier (keras-hub deserialises that task whole), else
  config.json's ViTBackbone, each field with ViTBackbone's default;
- the weights: model.weights.h5 (the backbone) and, with such a
  task.json, task.weights.h5 (the head, and the tanh pre-logits Dense of
  `intermediate_dim`); without task.weights.h5 the backbone alone is
  read (keras-hub would start that head at random), still with
  task.json's backbone config and preprocessor;
- the pixels: the image converter of task.json's preprocessor, else of
  preprocessor.json, else image_converter.json (`keras_preset_pixels`).

Refused, by name: another class than ViTBackbone (a preset of another
model), a quantized dtype policy, sharded weights, average pooling over
a class token (keras-hub averages the class token with the patches; the
ViT's GAP model has none), class-token pooling without a class token (it
would take the first patch), an output activation (the model gives
logits), a config field ViTBackbone does not take, and any array of
another shape than the config gives or left over. A layer saved without
a bias (`use_mha_bias=False`, ...) is given zeros: the same
computation. At another image size the position table is resized as an
official checkpoint's is: keras-hub itself builds no model there. A
backbone read alone (no classifier to say how it pools) without a class
token is the GAP model: the mean of its patches' outputs.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.hub import keras_preset_arrays as preset_arrays
from keras_vit.checkpoint.hub import keras_preset_pixels as pixels
from keras_vit.checkpoint.hub.processor import warn_once
from keras_vit.checkpoint.hub.reader import (
    CONFIG_FILE,
    HubCheckpoint,
    fold_normalisation,
)
from keras_vit.errors import UsageError

KERAS_HUB = "keras_hub"
MODEL_WEIGHTS = "model.weights.h5"
TASK_WEIGHTS = "task.weights.h5"
SHARDED_WEIGHTS = "model.weights.json"
TASK_FILE = "task.json"
BACKBONE = "ViTBackbone"
CLASSIFIER = "ViTImageClassifier"
# ViTBackbone's arguments and their defaults (None: required).
BACKBONE_FIELDS = {
    "image_shape": None, "patch_size": None, "num_layers": None,
    "num_heads": None, "hidden_dim": None, "mlp_dim": None,
    "dropout_rate": 0.0, "attention_dropout": 0.0,
    "layer_norm_epsilon": 1e-6, "use_mha_bias": True, "use_mlp_bias": True,
    "use_class_token": True, "use_patch_bias": True, "data_format": None,
}
_LAYER_FIELDS = ("name", "trainable", "dtype")
_HEAD_FIELDS = ("num_classes", "pooling", "intermediate_dim",
                "activation", "dropout", "head_dtype", "backbone",
                "preprocessor", "name", "trainable", "dtype")


def is_preset(path: str) -> bool:
    """Whether `path` is a folder whose config.json keras-hub wrote (a
    serialised keras-hub object)."""
    config = os.path.join(path, CONFIG_FILE)
    if not (os.path.isdir(path) and os.path.isfile(config)):
        return False
    try:
        fields = untrusted.read_json_object(config)
    except UsageError:
        return False
    return from_keras_hub(fields)


def from_keras_hub(fields: Dict[str, Any]) -> bool:
    """Whether a config.json's `fields` are a serialised keras-hub
    object's."""
    module = fields.get("module")
    registered = fields.get("registered_name")
    return (isinstance(module, str) and module.startswith(KERAS_HUB)) or (
        isinstance(registered, str) and registered.startswith("keras_hub>"))


def read_preset(folder: str) -> HubCheckpoint:
    """Reads a keras-hub ViT preset folder (see the module doc).

    Raises:
        UsageError: anything the module doc refuses, named with its file.
    """
    folder = folder.rstrip("/") or "/"
    config_path = _file(folder, CONFIG_FILE)
    _refuse_sharded(folder)
    task = _task(folder)
    backbone = (task["backbone"] if task else
                _object(untrusted.read_json_object(config_path),
                        config_path, BACKBONE))
    where = os.path.join(folder, TASK_FILE) if task else config_path
    sizes = backbone_sizes(backbone, where)
    # keras-hub builds the task from task.json and starts its head at
    # random without task.weights.h5: then the backbone alone is read.
    head = None if task is None or not os.path.isfile(os.path.join(
        folder, TASK_WEIGHTS)) else _head(task, sizes, where)
    if task is not None and head is None:  # the folder is read often
        warn_once(
            f"{folder} holds a classifier's {TASK_FILE} but no "
            f"{TASK_WEIGHTS}: its backbone alone is read, a model of "
            "features (keras-hub would start the head at random). Download "
            "the whole preset for its head.")
    weights_path = _file(folder, MODEL_WEIGHTS)
    arrays = preset_arrays.backbone_arrays(weights_path, sizes)
    if head is not None:
        arrays.update(preset_arrays.head_arrays(
            _file(folder, TASK_WEIGHTS), head, sizes["hidden_dim"]))
    converter, said = pixels.converter(folder, task)
    mean, std, resize, keep = pixels.pixel_map(converter, said,
                                               sizes["image_size"])
    fold_normalisation(arrays, mean, std)
    return HubCheckpoint(
        path=weights_path, naming=KERAS_HUB, arrays=arrays,
        num_heads=sizes["num_heads"], image_size=sizes["image_size"],
        posemb_grid=sizes["grid"], approximate_gelu=False,
        layer_norm_epsilon=sizes["layer_norm_epsilon"], class_names=None,
        mean=mean, std=std, eval_resize=resize, eval_keep_aspect=keep,
    )


def _file(folder: str, name: str) -> str:
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise UsageError(
            f"{folder} is a keras-hub preset without {name}: download the "
            "whole preset folder (keras-hub's save_to_preset writes it).")
    return untrusted.in_folder(folder, name, path)


def _refuse_sharded(folder: str) -> None:
    if (os.path.exists(os.path.join(folder, SHARDED_WEIGHTS))
            and not os.path.exists(os.path.join(folder, MODEL_WEIGHTS))):
        raise UsageError(
            f"{folder} holds sharded weights ({SHARDED_WEIGHTS}); only a "
            f"single {MODEL_WEIGHTS} is read. Save the preset again with "
            "keras-hub's save_to_preset(..., max_shard_size=None).")


def _object(fields: Dict[str, Any], path: str, wanted: str) -> Dict:
    """The `config` of the serialised keras-hub object `fields`, which must
    be of class `wanted`."""
    name = fields.get("class_name")
    if not from_keras_hub(fields) or not isinstance(
            fields.get("config"), dict):
        raise UsageError(
            f"{path} is not a serialised keras-hub object (no keras_hub "
            "module or registered_name, or no config).")
    if name != wanted:
        raise UsageError(
            f"{path} is a keras-hub {name!r}, not a {wanted}: only "
            "keras-hub's ViT presets are read.")
    _check_dtype(fields["config"], path)
    return fields["config"]


def _check_dtype(fields: Dict[str, Any], path: str) -> None:
    dtype = fields.get("dtype")
    if isinstance(dtype, dict):
        name = (dtype.get("config") or {}).get("name")
        if dtype.get("class_name") != "DTypePolicy" or not isinstance(
                name, str):
            raise UsageError(
                f"{path}: dtype policy {dtype.get('class_name')!r} (a "
                "quantized preset); only float presets are read.")


def _task(folder: str) -> Optional[Dict[str, Any]]:
    """task.json's config when it is a ViTImageClassifier (its backbone's
    config under "backbone"), else None."""
    path = os.path.join(folder, TASK_FILE)
    if not os.path.isfile(path):
        return None
    fields = untrusted.read_json_object(untrusted.in_folder(
        folder, TASK_FILE, path))
    if fields.get("class_name") != CLASSIFIER:
        return None
    task = dict(_object(fields, path, CLASSIFIER))
    backbone = task.get("backbone")
    if not isinstance(backbone, dict):
        raise UsageError(f"{path}: the task has no backbone config.")
    task["backbone"] = _object(backbone, path, BACKBONE)
    return task


def _int(config: Dict[str, Any], field: str, where: str) -> int:
    value = config[field]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{where}: {field} is {value!r}, not a positive "
                         "whole number.")
    return value


def _pair(value, field: str, where: str) -> Tuple[int, ...]:
    items = [value, value] if isinstance(value, int) else value
    if (not isinstance(items, (list, tuple)) or not items or any(
            isinstance(v, bool) or not isinstance(v, int) or v < 1
            for v in items)):
        raise UsageError(f"{where}: {field} is {value!r}, not positive "
                         "whole numbers.")
    return tuple(items)


def _flag(config: Dict[str, Any], field: str, where: str) -> bool:
    value = config[field]
    if not isinstance(value, bool):
        raise UsageError(f"{where}: {field} is {value!r}, not true or "
                         "false.")
    return value


def backbone_sizes(backbone: Dict[str, Any], where: str) -> Dict[str, Any]:
    """What a ViTBackbone config builds: sizes, flags and the patch grid,
    each field given or ViTBackbone's default; refused fields named."""
    unknown = sorted(set(backbone) - set(BACKBONE_FIELDS)
                     - set(_LAYER_FIELDS))
    if unknown:
        raise UsageError(f"{where}: {unknown[0]!r} is no ViTBackbone "
                         "argument keras_vit knows; it is not read.")
    config = {k: backbone.get(k, d) for k, d in BACKBONE_FIELDS.items()}
    missing = [k for k, v in config.items()
               if v is None and k != "data_format"]
    if missing:
        raise UsageError(f"{where}: the backbone config has no "
                         f"{missing[0]}.")
    first = config["data_format"] == "channels_first"
    shape = _pair(config["image_shape"], "image_shape", where)
    if len(shape) != 3 or shape[0 if first else 2] != 3:
        raise UsageError(f"{where}: image_shape {list(shape)} is not an "
                         "RGB image's (height, width, 3).")
    image = shape[1:] if first else shape[:2]
    patch = _pair(config["patch_size"], "patch_size", where)
    if len(patch) != 2 or patch[0] != patch[1]:
        raise UsageError(f"{where}: patch_size {list(patch)}; only square "
                         "patches are read.")
    if any(s % patch[0] for s in image):
        raise UsageError(f"{where}: image_shape {list(shape)} is not whole "
                         f"patches of {patch[0]} (ViTBackbone refuses it).")
    sizes = {k: _int(config, k, where) for k in
             ("num_layers", "num_heads", "hidden_dim", "mlp_dim")}
    if sizes["hidden_dim"] % sizes["num_heads"]:
        raise UsageError(f"{where}: hidden_dim {sizes['hidden_dim']} is not "
                         f"whole heads of num_heads {sizes['num_heads']}.")
    epsilon = config["layer_norm_epsilon"]
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) \
            or not 0 < epsilon < 1:
        raise UsageError(f"{where}: layer_norm_epsilon {epsilon!r} is not a "
                         "number in (0, 1).")
    sizes.update(
        {k: _flag(config, k, where) for k in
         ("use_mha_bias", "use_mlp_bias", "use_class_token",
          "use_patch_bias")},
        patch=patch[0], image_size=tuple(image), layer_norm_epsilon=epsilon,
        grid=tuple(s // patch[0] for s in image))
    return sizes


def _head(task: Dict[str, Any], sizes: Dict[str, Any], where: str):
    """(num_classes, intermediate_dim or None) of a ViTImageClassifier,
    whose pooling and activation this ViT must compute."""
    unknown = sorted(set(task) - set(_HEAD_FIELDS))
    if unknown:
        raise UsageError(f"{where}: {unknown[0]!r} is no ViTImageClassifier "
                         "argument keras_vit knows; it is not read.")
    pooling = task.get("pooling", "token")
    token = sizes["use_class_token"]
    if pooling == "token" and not token:
        raise UsageError(
            f"{where}: pooling 'token' without a class token takes the "
            "first patch's output, which keras_vit's ViT does not compute.")
    if pooling == "gap" and token:
        raise UsageError(
            f"{where}: pooling 'gap' with a class token averages the class "
            "token with the patches; keras_vit's GAP model has no class "
            "token, so it does not compute this.")
    if pooling not in ("token", "gap"):
        raise UsageError(f"{where}: pooling {pooling!r}; keras-hub's ViT "
                         "pools by 'token' or 'gap'.")
    if task.get("activation") not in (None, "linear"):
        raise UsageError(
            f"{where}: the head's activation {task['activation']!r}; "
            "keras_vit's model gives logits, so only a head without one is "
            "read.")
    classes = _int(task, "num_classes", where) if "num_classes" in task \
        else None
    if classes is None:
        raise UsageError(f"{where}: the task has no num_classes.")
    inner = task.get("intermediate_dim")
    if inner is not None:
        inner = _int(task, "intermediate_dim", where)
    return classes, inner
