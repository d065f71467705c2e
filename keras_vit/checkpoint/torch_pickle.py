"""Reads a PyTorch `state_dict` file (`pytorch_model.bin`) without PyTorch.

Hugging Face and timm repositories from before safetensors ship their
weights only as `torch.save(state_dict)` files: a zip holding a pickle
(`<name>/data.pkl`) whose tensors point at raw storages (`<name>/data/<key>`).
PyTorch itself is a several-gigabyte install that this project does not
otherwise need, and no maintained library reads this format without it
(safetensors' converters call torch), so this module reads the zip by hand.

Like `torch.load(weights_only=True)`, the unpickler only builds tensors and
ordered dicts: any other global in the pickle (code a malicious file could
run) is refused with its name. Only the zip format (PyTorch >= 1.6, every
file on the hubs since 2020) is read.
"""

from __future__ import annotations

import collections
import os
import pickle
import zipfile
from typing import Dict

import numpy as np
from keras_vit.errors import UsageError

# torch storage class -> numpy dtype. bfloat16 is read as its raw 16 bits
# and widened to float32 below (numpy has no bfloat16).
_STORAGES = {
    "FloatStorage": np.float32,
    "DoubleStorage": np.float64,
    "HalfStorage": np.float16,
    "BFloat16Storage": np.uint16,
    "LongStorage": np.int64,
    "IntStorage": np.int32,
    "ShortStorage": np.int16,
    "CharStorage": np.int8,
    "ByteStorage": np.uint8,
    "BoolStorage": np.bool_,
}


class _Storage:
    def __init__(self, name: str):
        self.name = name


def _rebuild_tensor(storage, offset, size, stride, *unused):
    array, bfloat16 = storage
    itemsize = array.dtype.itemsize
    if not size:
        tensor = np.array(array[offset])
    else:
        tensor = np.lib.stride_tricks.as_strided(
            array[offset:], shape=tuple(size),
            strides=tuple(s * itemsize for s in stride),
        ).copy()
    if bfloat16:
        tensor = (tensor.astype(np.uint32) << 16).view(np.float32)
    return tensor


def _rebuild_parameter(data, *unused):
    return data


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str,
                 path: str):
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix
        self._path = path

    def find_class(self, module, name):
        if (module, name) == ("collections", "OrderedDict"):
            return collections.OrderedDict
        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch._utils" and name == "_rebuild_parameter":
            return _rebuild_parameter
        if module == "torch" and name in _STORAGES:
            return _Storage(name)
        raise pickle.UnpicklingError(
            f"{self._path} holds a {module}.{name} object, not only tensors;"
            " refusing to run it. Convert the file to model.safetensors with"
            " the tool that made it."
        )

    def persistent_load(self, pid):
        kind, storage, key = pid[0], pid[1], pid[2]
        if kind != "storage" or not isinstance(storage, _Storage):
            raise pickle.UnpicklingError(
                f"{self._path}: unknown storage record {pid!r}."
            )
        dtype = _STORAGES[storage.name]
        data = self._archive.read(f"{self._prefix}/data/{key}")
        array = np.frombuffer(data, dtype=np.dtype(dtype).newbyteorder("<"))
        return array, storage.name == "BFloat16Storage"


def read_state_dict(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a `torch.save`d state dict, as numpy arrays.

    Args:
        path: str. A `pytorch_model.bin` (zip format).

    Returns:
        dict of str to np.ndarray, in the file's order; bfloat16 tensors
        come back as float32.

    Raises:
        ValueError: not a zip-format PyTorch file, or a pickle holding
            anything but tensors.
    """
    if not zipfile.is_zipfile(path):
        raise UsageError(
            f"{path} is not a zip-format PyTorch file (saved by PyTorch "
            "< 1.6, or not a checkpoint): convert it to model.safetensors."
        )
    with zipfile.ZipFile(path) as archive:
        pickles = [n for n in archive.namelist() if n.endswith("/data.pkl")]
        if len(pickles) != 1:
            raise UsageError(f"{path} holds no single data.pkl: not a "
                             "torch.save file.")
        prefix = pickles[0][: -len("/data.pkl")]
        names = set(archive.namelist())
        order = f"{prefix}/byteorder"
        if order in names and archive.read(order).strip() != b"little":
            raise UsageError(f"{path} was saved big-endian; unsupported.")
        with archive.open(pickles[0]) as f:
            try:
                state = _Unpickler(f, archive, prefix, path).load()
            except (pickle.UnpicklingError, KeyError, EOFError) as error:
                raise UsageError(f"Could not read {path}: {error}") from None
    if not isinstance(state, dict):
        raise UsageError(
            f"{path} holds a {type(state).__name__}, not a state dict."
        )
    return {str(k): np.asarray(v) for k, v in state.items()}


def is_torch_file(path: str) -> bool:
    """bool. Whether `path` looks like a `torch.save` file (by name)."""
    return os.path.splitext(path)[1] in (".bin", ".pt", ".pth")
