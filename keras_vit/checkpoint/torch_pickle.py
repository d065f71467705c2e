"""Reads a PyTorch `state_dict` file (`pytorch_model.bin`) as numpy arrays.

Hugging Face and timm repositories from before safetensors ship their
weights only as `torch.save(state_dict)` files: a zip holding a pickle
(`<name>/data.pkl`) whose tensors point at raw storages (`<name>/data/<key>`).

Which reader is used:

- PyTorch installed: `torch.load(path, weights_only=True,
  map_location="cpu")`, PyTorch's own maintained reader (it only builds
  tensors and checks every view against its storage).
- PyTorch absent (this project does not otherwise need it, and no
  maintained library reads the format without it: safetensors' converters
  call torch): the reader below, by hand. Its unpickler builds only tensors
  and ordered dicts, refusing any other global (code a malicious file could
  run) by name, and checks every tensor against its storage before any
  view of memory is made: dtype from an allow-list, storage bytes a whole
  number of elements matching the element count the pickle declares, a
  non-negative offset, sizes and strides, and the largest index the view
  reaches inside the storage. A file failing any check is refused with one
  line naming the tensor. Only the zip format (PyTorch >= 1.6, every file on
  the hubs since 2020) is read.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import io
import math
import os
import pickle
import pickletools
import zipfile
from typing import Dict, Optional, Tuple

import numpy as np

from keras_vit.errors import UsageError

# torch storage class -> numpy dtype (the allow-list). bfloat16 is read as
# its raw 16 bits and widened to float32 below (numpy has no bfloat16).
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
# A tensor may repeat storage elements (a zero stride); beyond this many
# elements such a tensor is refused rather than materialised.
_MAX_REPEATED_ELEMENTS = 1 << 26
_MAX_DIMS = 16
_MAX_ELEMENTS = 1 << 40
# The pickle opcodes a state dict saved by torch.save (protocol 2) uses; a
# file with any other (buffers, frames, extensions, ...) is refused before
# unpickling.
_OPCODES = frozenset({
    "PROTO", "STOP", "MARK", "POP", "POP_MARK", "DUP",
    "BINPUT", "LONG_BINPUT", "BINGET", "LONG_BINGET",
    "GLOBAL", "REDUCE", "BUILD", "NEWOBJ", "BINPERSID",
    "EMPTY_DICT", "DICT", "SETITEM", "SETITEMS",
    "EMPTY_LIST", "LIST", "APPEND", "APPENDS",
    "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2", "TUPLE3",
    "NONE", "NEWTRUE", "NEWFALSE",
    "BININT", "BININT1", "BININT2", "LONG1", "BINFLOAT",
    "BINUNICODE", "SHORT_BINUNICODE", "BINSTRING", "SHORT_BINSTRING",
})
# Whether PyTorch is installed; imported only when a file is read (it is a
# large import that most runs of this project never need).
HAS_TORCH = importlib.util.find_spec("torch") is not None


class _Storage:
    """A storage class named in the pickle (a marker, never called)."""

    def __init__(self, name: str):
        self.name = name


class _StorageData:
    """One storage's elements; `bfloat16`: uint16 holding bfloat16 bits."""

    def __init__(self, array: np.ndarray, bfloat16: bool):
        self.array, self.bfloat16 = array, bfloat16


class _Tensor:
    """What the pickle declares for one tensor; checked, then built."""

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, offset
        self.size, self.stride = size, stride


def _rebuild_tensor(storage, offset, size, stride, *unused):
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *unused):
    return data


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(name: str, tensor: _Tensor) -> Tuple[int, ...]:
    """Refuses (UsageError naming the tensor) a view that does not fit
    inside its storage; returns the shape."""
    where = f"tensor {name!r}"
    if not isinstance(tensor.storage, _StorageData):
        raise UsageError(f"{where} has no storage record.")
    array = tensor.storage.array
    size, stride, offset = tensor.size, tensor.stride, tensor.offset
    if not (isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) <= _MAX_DIMS
            and all(map(_is_int, size + stride)) and _is_int(offset)):
        raise UsageError(f"{where}: malformed size {size!r} / stride "
                         f"{stride!r} / offset {offset!r}.")
    if min(size + stride + (offset,)) < 0:
        raise UsageError(f"{where}: negative size, stride or offset (size "
                         f"{size}, stride {stride}, offset {offset}).")
    if math.prod(max(n, 1) for n in size) > _MAX_ELEMENTS:
        raise UsageError(f"{where} declares an impossible shape {size}.")
    count = math.prod(size)
    if count == 0:
        return size
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= array.size:
        raise UsageError(
            f"{where} reaches element {last} of a storage of "
            f"{array.size}: size {size}, stride {stride}, offset {offset} "
            "do not fit; the file is corrupt or crafted."
        )
    if count > max(array.size, _MAX_REPEATED_ELEMENTS):
        raise UsageError(f"{where} declares {count} elements over a "
                         f"storage of {array.size}; refusing.")
    return size


def _build(name: str, tensor: _Tensor) -> np.ndarray:
    """The checked tensor as a new array (never a view of the file)."""
    size = _check(name, tensor)
    array, offset = tensor.storage.array, tensor.offset
    # A dimension of size 1 never steps: its stride, checked or not, is 0.
    stride = tuple(0 if n == 1 else s for n, s in zip(size, tensor.stride))
    if math.prod(size) == 0:
        out = np.zeros(size, array.dtype)
    elif stride == tuple(0 if n == 1 else s for n, s in
                         zip(size, _contiguous(size))):
        out = array[offset:offset + math.prod(size)].reshape(size).copy()
    else:
        # Every index this view reaches was checked above.
        itemsize = array.dtype.itemsize
        out = np.lib.stride_tricks.as_strided(
            array[offset:], shape=size,
            strides=tuple(s * itemsize for s in stride), writeable=False,
        ).copy()
    if tensor.storage.bfloat16:
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return out


def _contiguous(size: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


class _Unpickler(pickle.Unpickler):
    def __init__(self, file, archive: zipfile.ZipFile, prefix: str,
                 path: str):
        super().__init__(file)
        self._archive = archive
        self._prefix = prefix
        self._path = path
        self._storages: Dict[str, _StorageData] = {}

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
        if not (isinstance(pid, tuple) and len(pid) == 5
                and pid[0] == "storage" and isinstance(pid[1], _Storage)
                and isinstance(pid[2], str) and _is_int(pid[4])):
            raise pickle.UnpicklingError(f"unknown storage record {pid!r}")
        storage, key, count = pid[1], pid[2], pid[4]
        if key in self._storages:
            return self._storages[key]
        dtype = np.dtype(_STORAGES[storage.name]).newbyteorder("<")
        entry = f"{self._prefix}/data/{key}"
        try:
            data = self._archive.read(entry)
        except KeyError:
            raise pickle.UnpicklingError(f"storage {entry} is missing")
        if len(data) != count * dtype.itemsize:
            raise pickle.UnpicklingError(
                f"storage {entry} holds {len(data)} bytes, but the pickle "
                f"declares {count} {storage.name} elements of "
                f"{dtype.itemsize} bytes"
            )
        record = _StorageData(np.frombuffer(data, dtype=dtype),
                              storage.name == "BFloat16Storage")
        self._storages[key] = record
        return record


def _open_state(path: str) -> dict:
    """The unpickled state dict of a zip-format file, tensors unbuilt."""
    if not zipfile.is_zipfile(path):
        raise UsageError(
            f"{path} is not a zip-format PyTorch file (saved by PyTorch "
            "< 1.6, or not a checkpoint): convert it to model.safetensors."
        )
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise UsageError(f"{path} holds no single data.pkl: not a "
                                 "torch.save file.")
            prefix = pickles[0][: -len("/data.pkl")]
            order = f"{prefix}/byteorder"
            if order in names and archive.read(order).strip() != b"little":
                raise UsageError(f"{path} was saved big-endian; unsupported.")
            data = archive.read(pickles[0])
            _check_opcodes(data, path)
            return _Unpickler(io.BytesIO(data), archive, prefix, path).load()
    except UsageError:
        raise
    except Exception as error:  # any defect of an untrusted file
        raise UsageError(
            f"Could not read {path}: {str(error) or repr(error)}"
        ) from None


def _check_opcodes(data: bytes, path: str) -> None:
    """Refuses a pickle using an opcode torch.save does not write."""
    for opcode, _, _ in pickletools.genops(data):
        if opcode.name not in _OPCODES:
            raise UsageError(
                f"{path}: its pickle uses opcode {opcode.name}, which "
                "torch.save does not write; refusing the file."
            )


def read_without_torch(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a `torch.save`d state dict, read without PyTorch
    (every storage bound checked first; see the module docstring)."""
    state = _open_state(path)
    if not isinstance(state, dict):
        raise UsageError(
            f"{path} holds a {type(state).__name__}, not a state dict."
        )
    tensors = {}
    for key, value in state.items():
        if not isinstance(value, _Tensor):
            raise UsageError(f"{path}: entry {key!r} is a "
                             f"{type(value).__name__}, not a tensor.")
        tensors[str(key)] = _build(str(key), value)
    return tensors


def read_with_torch(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a `torch.save`d state dict, read by
    `torch.load(weights_only=True)`; bfloat16 widened to float32."""
    torch = importlib.import_module("torch")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # torch raises its own types
        message = str(error).strip().splitlines()
        raise UsageError(f"Could not read {path}: "
                         f"{message[0] if message else error!r}") from None
    if not isinstance(state, dict):
        raise UsageError(
            f"{path} holds a {type(state).__name__}, not a state dict."
        )
    tensors = {}
    for key, value in state.items():
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"{path}: entry {key!r} is a "
                             f"{type(value).__name__}, not a tensor.")
        stored = value.untyped_storage().nbytes() // value.element_size()
        if value.numel() > max(stored, _MAX_REPEATED_ELEMENTS):
            raise UsageError(
                f"tensor {key!r} declares {value.numel()} elements over a "
                f"storage of {stored}; refusing."
            )
        if value.dtype == torch.bfloat16:
            value = value.float()
        tensors[str(key)] = value.detach().numpy().copy()
    return tensors


def read_state_dict(path: str,
                    use_torch: Optional[bool] = None) -> Dict[str, np.ndarray]:
    """The tensors of a `torch.save`d state dict, as numpy arrays.

    Args:
        path: str. A `pytorch_model.bin` (zip format).
        use_torch: bool or None. None: PyTorch's reader when PyTorch is
            installed, else the checked reader of this module.

    Returns:
        dict of str to np.ndarray, in the file's order; bfloat16 tensors
        come back as float32.

    Raises:
        UsageError: not a zip-format PyTorch file, a pickle holding
            anything but tensors, or a tensor outside its storage (named).
    """
    if HAS_TORCH if use_torch is None else use_torch:
        return read_with_torch(path)
    return read_without_torch(path)


def is_torch_file(path: str) -> bool:
    """bool. Whether `path` looks like a `torch.save` file (by name)."""
    return os.path.splitext(path)[1] in (".bin", ".pt", ".pth")
