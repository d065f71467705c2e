"""`.keras` files read as untrusted input: the archive checked from its
directory before Keras inflates a member (only the members Keras's format
has, JSON members and the whole bounded as every model file is:
`keras_vit.checkpoint.formats.untrusted`), a config.json declaring more
parameters than the weights member holds refused before Keras builds the
model (every layer sized from its config and build shape, a layer of a
class the check cannot size refused by name: `_declared_parameters`), each
weights array of a real floating-point dtype, then Keras's own loader in
safe mode (`read_keras_model`), and every array of the file placed in the
model loaded (`h5_weights.check_all_placed`).
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import zipfile
import zlib
from typing import Any, Callable, Dict

import keras

from keras_vit import attention, mpp, resnet
from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit import model as vit_model
from keras_vit.architecture import total_stride
from keras_vit.checkpoint.formats import h5_weights, untrusted
from keras_vit.checkpoint.formats.npz import open_for_reading
from keras_vit.droppath import DropPath
from keras_vit.errors import UsageError, one_line

# The members of a `.keras` file (Keras's saving_lib): its config and
# metadata, the weights, and the assets of layers that have any.
_KERAS_MEMBERS = ("config.json", "metadata.json", "model.weights.h5",
                  "model.weights.npz")


def _check_keras_archive(path: str) -> None:
    """Refuses, from the zip's directory and before Keras inflates a byte,
    a `.keras` file that is no zip (truncated, corrupt), a member Keras's
    format has no place for, a config.json over untrusted.MAX_JSON_BYTES
    or members inflating past `untrusted.memory_bound` of the file."""
    try:
        with open_for_reading(path) as f:
            size = f.seek(0, 2)
            f.seek(0)
            with zipfile.ZipFile(f) as archive:
                untrusted.check_archive(
                    archive, path, size,
                    lambda n: n in _KERAS_MEMBERS or n.startswith("assets/"),
                    json_members=_KERAS_MEMBERS[:2])
                _check_declared_size(archive, path)
    except (zipfile.BadZipFile, EOFError, OSError, zlib.error) as error:
        raise UsageError(
            f"{path}: truncated or corrupt .keras archive ({one_line(error)})"
            ". Save or copy the file again."
        ) from None


def _check_declared_size(archive: zipfile.ZipFile, path: str) -> None:
    """Refuses a `.keras` file whose config.json declares more parameters
    than its weights member can hold (at one byte a parameter, the
    smallest Keras stores: int8), before Keras builds the model, which
    allocates every declared weight."""
    names = set(archive.namelist())
    if "config.json" not in names:
        raise UsageError(
            f"{path} is a zip without config.json, so no whole .keras file "
            "(model.save writes its config, metadata and weights): save or "
            "copy the file again.")
    try:
        config = json.loads(archive.read("config.json"))
    except RecursionError:
        raise UsageError(f"{path}: its config.json nests too deep for a "
                         "model's; the file is corrupt or crafted.") from None
    except ValueError as error:
        raise UsageError(f"{path}: its config.json is not JSON "
                         f"({one_line(error)[:200]}).") from None
    held = sum(archive.getinfo(n).file_size for n in _KERAS_MEMBERS[2:]
               if n in names)
    declared = _declared_parameters(config, path)
    if declared > held + (1 << 20):
        raise UsageError(
            f"{path} declares at least {declared:,} parameters, more than "
            f"its weights ({held:,} bytes) hold: refused before Keras "
            "builds it. The file is corrupt or crafted; save the model "
            "again (model.save).")


def _int(value: Any) -> int:
    """A size as the layers take it (`int(value)`; 0 where it is none)."""
    try:
        return max(0, int(value))
    except (TypeError, ValueError, OverflowError):
        return 0


def _dim(shape: Any, axis: Any) -> int:
    """Axis `axis` of a build shape (0 where it has none)."""
    ok = isinstance(shape, list) and isinstance(axis, int) and not isinstance(
        axis, bool) and -len(shape) <= axis < len(shape)
    return _int(shape[axis]) if ok else 0


def _resnet(layers: Any, width_factor: Any, channels: int) -> int:
    """A lower bound of a ResNet stem's parameters (`resnet.ResNetStem`):
    the root convolution and, per unit, its 3x3 and last 1x1 convolution."""
    width = 64 * _int(width_factor)
    stages = layers if isinstance(layers, list) else []
    total = 49 * channels * width + (1 << 64 if len(stages) > 64 else 0)
    for s, count in enumerate(stages[:64]):
        total += _int(count) * 13 * (width << s) ** 2
    return total


def _architecture(arch: Any) -> int:
    """A lower bound of the parameters of a keras_vit model's
    architecture (VisionTransformer, MppModel)."""
    arch = arch if isinstance(arch, dict) else {}
    width, depth, mlp, patch = (_int(arch.get(k)) for k in (
        "hidden_size", "num_layers", "mlp_dim", "patch_size"))
    size = arch.get("image_size")
    sides = size if isinstance(size, list) and len(size) == 2 else [size, size]
    # Pixels per token: a hybrid's patch is on the ResNet's output.
    layers = arch.get("resnet_layers")
    hybrid = isinstance(layers, list) and all(_int(n) for n in layers)
    stride = total_stride(patch, layers if hybrid else None) if patch else 0
    grid = (_int(sides[0]) // stride) * (_int(sides[1]) // stride) if (
        stride) else 0
    stem = _resnet(layers, arch.get("resnet_width", 1), 3) if hybrid else 0
    # The position table: one row a token, however large the image.
    return (stem + depth * (4 * width * width + 2 * width * mlp)
            + patch * patch * width + grid * width
            + width * (_int(arch.get("num_classes"))
                       + _int(arch.get("representation_size"))))


def _norm(weights: int, fields: Dict[str, Any], shape: Any) -> int:
    """A normalisation's parameters: `weights` (moving statistics) plus
    its scale and centre, each of the size of its axes."""
    axes = fields.get("axis", -1)
    size = math.prod(_dim(shape, a) for a in (
        axes if isinstance(axes, list) else [axes]))
    centre = fields.get("center") is not False and not fields.get(
        "rms_scaling")
    return size * (weights + (fields.get("scale") is not False) + centre)


def _conv(rank: int, fields: Dict[str, Any], shape: Any) -> int:
    """A Conv{rank}D layer's kernel and bias."""
    kernel = fields.get("kernel_size")
    kernel = kernel if isinstance(kernel, list) else [kernel] * rank
    first = (fields.get("data_format") or keras.config.image_data_format()
             ) == "channels_first"
    channels = _dim(shape, 1 if first else -1) // max(
        1, _int(fields.get("groups")))
    filters = _int(fields.get("filters"))
    return math.prod(_int(k) for k in kernel) * channels * filters + filters


def _position(fields: Dict[str, Any], shape: Any) -> int:
    """A PositionEmbedding's table: a row a token (of its grid_size and
    prefix, or of its input), each of the input's width."""
    grid = fields.get("grid_size")
    rows = _int(fields.get("num_prefix_tokens")) + _int(grid[0]) * _int(
        grid[1]) if isinstance(grid, list) and len(grid) == 2 else _dim(
            shape, 1)
    return rows * _dim(shape, -1)


def _block(width: int, mlp: int) -> int:
    """A lower bound of an encoder block's parameters."""
    return 4 * width * width + 2 * width * mlp


def _sizers() -> Dict[type, Callable[[Dict[str, Any], Any], int]]:
    """The layer classes the check sizes, each to the lower bound of the
    parameters its config (`f`) and build shape (`s`) declare: keras_vit's
    and the standard Keras layers its models hold."""
    kl, w = keras.layers, _dim
    return {
        kl.Dense: lambda f, s: (w(s, -1) + 1) * _int(f.get("units")),
        kl.Embedding: lambda f, s: _int(f.get("input_dim")) * _int(
            f.get("output_dim")),
        kl.Conv1D: functools.partial(_conv, 1),
        kl.Conv2D: functools.partial(_conv, 2),
        kl.Conv3D: functools.partial(_conv, 3),
        kl.LayerNormalization: functools.partial(_norm, 0),
        vit_layers.LayerNorm: functools.partial(_norm, 0),
        kl.GroupNormalization: functools.partial(_norm, 0),
        kl.BatchNormalization: functools.partial(_norm, 2),
        vit_model.VisionTransformer: lambda f, s: _architecture(
            f.get("architecture")),
        mpp.MppModel: lambda f, s: _architecture(f.get("architecture")),
        vit_embedding.PatchEmbedding: lambda f, s: (
            _int(f.get("patch_size")) ** 2 * w(s, -1) + 1) * _int(
                f.get("hidden_size")),
        vit_embedding.ClassToken: lambda f, s: w(s, -1),
        mpp.PatchCorruption: lambda f, s: w(s, -1),
        vit_embedding.PositionEmbedding: _position,
        attention.MultiHeadSelfAttention: lambda f, s: _block(w(s, -1), 0),
        vit_layers.EncoderBlock: lambda f, s: _block(
            w(s, -1), _int(f.get("mlp_dim"))),
        vit_layers.Encoder: lambda f, s: max(1, _int(f.get(
            "num_layers"))) * _block(w(s, -1), _int(f.get("mlp_dim"))),
        resnet.StdConv: lambda f, s: _int(f.get("kernel_size")) ** 2 * w(
            s, -1) * _int(f.get("filters")),
        resnet.BottleneckUnit: lambda f, s: (w(s, -1) + 13 * _int(
            f.get("features"))) * _int(f.get("features")),
        resnet.ResNetStem: lambda f, s: _resnet(
            f.get("layers"), f.get("width_factor", 1), w(s, -1)),
    }


# Keras layers (keras.layers.X, by name) that build no weight; keras_vit's
# below. Any other layer class but the models that hold layers (each
# counted) is sized by `_sizers` or refused.
_WEIGHTLESS = frozenset("""
    InputLayer Dropout SpatialDropout1D SpatialDropout2D SpatialDropout3D
    GaussianNoise GaussianDropout AlphaDropout Activation ReLU LeakyReLU ELU
    Softmax Lambda Flatten Reshape Permute RepeatVector Identity Rescaling
    Resizing CenterCrop
    MaxPooling1D MaxPooling2D MaxPooling3D AveragePooling1D AveragePooling2D
    AveragePooling3D GlobalAveragePooling1D GlobalAveragePooling2D
    GlobalAveragePooling3D GlobalMaxPooling1D GlobalMaxPooling2D
    GlobalMaxPooling3D ZeroPadding1D ZeroPadding2D ZeroPadding3D Cropping1D
    Cropping2D Cropping3D UpSampling1D UpSampling2D UpSampling3D Add
    Subtract Multiply Average Maximum Minimum Concatenate
    """.split())
# Classes whose sizes all lie in their config (no build shape needed).
_SIZED_BY_CONFIG = (keras.layers.Embedding, vit_model.VisionTransformer,
                    mpp.MppModel)
_WEIGHTLESS_VIT = (vit_layers.TokenPooling, DropPath,
                   vit_embedding.SinCosPositionEmbedding)


def _weightless(cls: type) -> bool:
    """Whether layer class `cls` builds no weight its config sizes."""
    keras_layer = getattr(keras.layers, cls.__name__, None) is cls
    # keras.Model, Sequential and Functional: their layers are counted.
    container = cls.__module__.startswith("keras.src.models.")
    return (keras_layer and cls.__name__ in _WEIGHTLESS) or container or (
        cls in _WEIGHTLESS_VIT)


def _resolve(item: Dict[str, Any]) -> Any:
    """The class Keras's deserializer takes for a config item (None where
    none): a registered class by its registered_name first, else its
    class_name in the module it names, of the packages Keras imports."""
    registered = item.get("registered_name")
    if isinstance(registered, str):
        found = keras.saving.get_registered_object(registered)
        if found is not None:
            return found
    module, name = item.get("module"), item["class_name"]
    if not isinstance(module, str) or module.split(".")[0] not in (
            "keras", "keras_hub", "keras_cv", "keras_nlp"):
        return None
    try:
        found = importlib.import_module(module)
        for part in name.split("."):
            found = getattr(found, part)
    except Exception:  # noqa: BLE001 (Keras fails on it too: no class)
        return None
    return found


def _build_shape(item: Dict[str, Any]) -> Any:
    """The input shape a layer's build_config gives its build (None where
    it gives none)."""
    build = item.get("build_config")
    if not isinstance(build, dict):
        return None
    shapes = build.get("shapes_dict")
    if "input_shape" not in build and isinstance(shapes, dict) and shapes:
        return shapes.get("input_shape", next(iter(shapes.values())))
    return build.get("input_shape")


def _declared_parameters(config: Any, path: str) -> int:
    """A lower bound of the parameters a .keras config declares: of every
    layer (`_sizers`) with the input shape its build_config records.
    Refuses (UsageError naming it) a layer of another class that may build
    weights, and a layer of a model whose build_config records no shape
    (the model would build it from its inputs)."""
    sizers, total, todo = _sizers(), 0, [config]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
        if not isinstance(item, dict):
            continue
        todo.extend(item.values())
        fields = item.get("config")
        if not isinstance(item.get("class_name"), str) or not isinstance(
                fields, dict):
            continue
        cls = _resolve(item)
        if not isinstance(cls, type):
            if "build_config" not in item:
                continue  # no layer, or one Keras finds no class of
            cls = None
        elif not issubclass(cls, keras.layers.Layer) or _weightless(cls):
            continue
        what = (f"layer {str(fields.get('name'))[:80]!r} "
                f"({item['class_name'][:80]})")
        if cls not in sizers:
            raise UsageError(
                f"{path}: its config.json holds {what}, a class the check "
                "before loading cannot size (Keras builds its weights "
                "before reading any): refused. Load .keras files of "
                "keras_vit models (load another yourself with keras.models"
                ".load_model if you trust it).")
        shape = _build_shape(item)
        # A model builds its layers; a layer alone (no model) stays unbuilt.
        if not isinstance(shape, list) and cls not in _SIZED_BY_CONFIG and (
                item is not config):
            raise UsageError(
                f"{path}: its config.json's {what} records no input shape "
                "(build_config), so its size cannot be checked before "
                "Keras builds it: refused. Save the model built "
                "(model.save).")
        total += sizers[cls](fields, shape)
    return total


def read_keras_model(path: str) -> keras.Model:
    """A saved `.keras` model, loaded by Keras in safe mode (no Python code
    from the file runs), uncompiled, after `_check_keras_archive`.

    Raises:
        UsageError: one line naming the file when it is truncated or no
            zip, holds a member Keras's format has none of, inflates past
            the memory bound, holds Python code (a Lambda layer's
            function) that safe mode refuses, holds no model (a layer at
            its top), holds weights of integers or an array its model
            takes none of, or Keras cannot load it (its reason).
    """
    _check_keras_archive(path)
    stored = h5_weights.keras_file_datasets(path)
    try:
        model = keras.models.load_model(path, compile=False, safe_mode=True)
    except ValueError as error:
        if "safe_mode" not in str(error):
            raise UsageError(f"{path}: Keras cannot load it (ValueError: "
                             f"{one_line(error)[:500]}).") from error
        raise UsageError(
            f"{path} holds Python code (a Lambda layer's function), which "
            "Keras's safe mode refuses to run. Rebuild the model without "
            "Lambda layers; load it yourself with keras.models.load_model("
            "path, safe_mode=False) only if you trust the file."
        ) from None
    except Exception as error:  # an untrusted file: Keras's own types
        # One line; --verbose shows Keras's traceback (the cause).
        raise UsageError(
            f"{path}: Keras cannot load it ({type(error).__name__}: "
            f"{one_line(error)[:500]})."
        ) from error
    if not isinstance(model, keras.Model):
        raise UsageError(
            f"{path} holds a {type(model).__name__}, not a model: a .keras "
            "file to load holds a Keras model (model.save(path))."
        )
    h5_weights.check_all_placed(model, stored, path)
    return model
