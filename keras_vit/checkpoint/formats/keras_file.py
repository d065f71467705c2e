"""`.keras` files read as untrusted input: the archive checked from its
directory before Keras inflates a member (only the members Keras's format
has, JSON members and the whole bounded as every model file is:
`keras_vit.checkpoint.formats.untrusted`), a config.json declaring more
parameters than the weights member holds refused before Keras builds the
model, then Keras's own loader in safe mode (`read_keras_model`).
"""

from __future__ import annotations

import json
import zipfile
import zlib
from typing import Any, Dict

import keras

from keras_vit.architecture import total_stride
from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.npz import open_for_reading
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
        return
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
    declared = _declared_parameters(config)
    if declared > held + (1 << 20):
        raise UsageError(
            f"{path} declares at least {declared:,} parameters, more than "
            f"its weights ({held:,} bytes) hold: refused before Keras "
            "builds it. The file is corrupt or crafted; save the model "
            "again (model.save).")


def _positive(value: Any) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else 0


def _declared_parameters(config: Any) -> int:
    """A lower bound of the parameters a .keras config declares: of every
    layer config whose sizes say it (a keras_vit model's architecture;
    an encoder, patch embedding, Dense or Embedding layer with the input
    width its build_config records)."""
    total, todo = 0, [config]
    while todo:
        item = todo.pop()
        if isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, dict):
            todo.extend(item.values())
            if "class_name" in item and isinstance(item.get("config"), dict):
                total += _layer_parameters(item["config"],
                                           item.get("build_config"))
    return total


def _layer_parameters(fields: Dict[str, Any], build: Any) -> int:
    """A lower bound of one layer config's parameters (0 where its sizes
    do not say)."""
    arch = fields.get("architecture")
    if isinstance(arch, dict):
        width, depth, mlp, patch = (_positive(arch.get(k)) for k in (
            "hidden_size", "num_layers", "mlp_dim", "patch_size"))
        size = arch.get("image_size")
        sides = size if isinstance(size, list) and len(size) == 2 else [
            size, size]
        # Pixels per token: a hybrid's patch is on the ResNet's output.
        layers = arch.get("resnet_layers")
        stride = total_stride(patch, layers if isinstance(layers, list) and all(
            _positive(n) for n in layers) else None) if patch else 0
        grid = (_positive(sides[0]) // stride) * (
            _positive(sides[1]) // stride) if stride else 0
        # The position table: one row a token, however large the image.
        return (depth * (4 * width * width + 2 * width * mlp)
                + patch * patch * width + grid * width
                + width * _positive(arch.get("num_classes")))
    shape = build.get("input_shape") if isinstance(build, dict) else None
    width = _positive(shape[-1]) if isinstance(shape, list) and shape else 0
    if "mlp_dim" in fields:  # keras_vit's Encoder and EncoderBlock
        return max(1, _positive(fields.get("num_layers"))) * (
            4 * width * width + 2 * width * _positive(fields.get("mlp_dim")))
    if "units" in fields:
        return width * _positive(fields.get("units"))
    if "patch_size" in fields and "hidden_size" in fields:
        return (_positive(fields["patch_size"]) ** 2 * width
                * _positive(fields["hidden_size"]))
    if "input_dim" in fields and "output_dim" in fields:
        return _positive(fields["input_dim"]) * _positive(fields["output_dim"])
    return 0


def read_keras_model(path: str) -> keras.Model:
    """A saved `.keras` model, loaded by Keras in safe mode (no Python code
    from the file runs), uncompiled, after `_check_keras_archive`.

    Raises:
        UsageError: one line naming the file when it is truncated or no
            zip, holds a member Keras's format has none of, inflates past
            the memory bound, holds Python code (a Lambda layer's
            function) that safe mode refuses, holds no model (a layer at
            its top), or Keras cannot load it (its reason).
    """
    _check_keras_archive(path)
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
    return model
