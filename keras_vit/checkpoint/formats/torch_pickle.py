"""Reads a PyTorch `state_dict` file (`pytorch_model.bin`) as numpy arrays.

Hugging Face and timm repositories from before safetensors ship their
weights only as `torch.save(state_dict)` files: a zip holding a pickle
(`<name>/data.pkl`) whose tensors point at raw storages (`<name>/data/<key>`).

Every file is checked before anything is unpickled, with PyTorch
installed or not:

- the zip (`untrusted.check_archive`, `torch_checks.read_capped`): its
  members under one prefix, inflating within `untrusted.memory_bound`;
  one `data.pkl` of at most `MAX_PICKLE_BYTES`; every storage stored
  uncompressed (as `torch.save` writes it), its size in the zip's
  directory equal to the bytes the pickle declares for it;
- the pickle's opcodes (`torch_checks.check_opcodes`): only those
  `torch.save` writes, nested at most `MAX_NESTING` deep (CPython and
  PyTorch's unpickler recurse, and can crash, on deeper ones);
- the unpickled records: only tensors and ordered dicts, any other global
  (code a malicious file could run) refused by name; every tensor checked
  against its storage before any view of memory is made: dtype from an
  allow-list, then `torch_checks.check_view`.

Then the tensors are read:

- PyTorch installed: by `torch.load(path, weights_only=True,
  map_location="cpu")`, PyTorch's own maintained reader.
- PyTorch absent (no maintained library reads the format without it):
  from the storages, by the checked views above.

Either way `read_state_dict` returns a lazy `torch_checks.StateDict`:
an array is made when first looked up (arrays the model has no place for
never are), within a budget of bytes. A file failing any check is refused
with one line (`UsageError`) naming the file and the reason. Only the zip
format (PyTorch >= 1.6) is read.
"""

from __future__ import annotations

import collections
import importlib
import importlib.util
import io
import math
import os
import pickle
import zipfile
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.torch_checks import (
    MAX_PICKLE_BYTES,
    SHORT,
    StateDict,
    byte_limit,
    check_opcodes,
    check_view,
    clip,
    contiguous,
    is_int,
    read_capped,
    refuse_not_zip,
)
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
# Whether PyTorch is installed; imported only when a file is read (it is a
# large import that most runs of this project never need).
HAS_TORCH = importlib.util.find_spec("torch") is not None


class _Record:
    """A record the unpickler makes; a BUILD opcode cannot change it."""

    __slots__ = ()

    def __setstate__(self, state):
        raise pickle.UnpicklingError(
            f"a BUILD opcode changes a {type(self).__name__.strip('_')} "
            "record, which torch.save never writes")


class _Storage(_Record):
    """A storage class named in the pickle (a marker, never called)."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name


class _StorageData(_Record):
    """One storage as the pickle declares it: its zip entry, dtype and
    element count (checked against the zip), read only when needed."""

    __slots__ = ("entry", "dtype", "count", "bfloat16")

    def __init__(self, entry: str, dtype: np.dtype, count: int,
                 bfloat16: bool):
        self.entry, self.dtype, self.count = entry, dtype, count
        self.bfloat16 = bfloat16

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes of one element as read (bfloat16 widened to float32)."""
        return 4 if self.bfloat16 else self.dtype.itemsize


class _Tensor(_Record):
    """What the pickle declares for one tensor; checked, then built."""

    __slots__ = ("storage", "offset", "size", "stride")

    def __init__(self, storage, offset, size, stride):
        self.storage, self.offset = storage, offset
        self.size, self.stride = size, stride


def _rebuild_tensor(storage, offset, size, stride, *unused):
    return _Tensor(storage, offset, size, stride)


def _rebuild_parameter(data, *unused):
    return data


def _check(name: str, tensor: _Tensor) -> Tuple[int, ...]:
    """Refuses (UsageError naming the tensor) a view that does not fit
    inside its storage; returns the shape."""
    where = f"tensor {SHORT.repr(name)}"
    if not isinstance(tensor.storage, _StorageData):
        raise UsageError(f"{where} has no storage record.")
    return check_view(where, tensor.storage.count, tensor.size,
                      tensor.stride, tensor.offset)


def _view(name: str, tensor: _Tensor, array: np.ndarray) -> np.ndarray:
    """The checked tensor as a new array (never a view of the file)."""
    size = _check(name, tensor)
    offset = tensor.offset
    # A dimension of size 1 never steps: its stride, checked or not, is 0.
    stride = tuple(0 if n == 1 else s for n, s in zip(size, tensor.stride))
    if math.prod(size) == 0:
        out = np.zeros(size, array.dtype)
    elif stride == tuple(0 if n == 1 else s for n, s in
                         zip(size, contiguous(size))):
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
            f"{self._path} holds a {SHORT.repr(module)[1:-1]}."
            f"{SHORT.repr(name)[1:-1]} object, not only tensors;"
            " refusing to run it. Convert the file to model.safetensors with"
            " the tool that made it."
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5
                and pid[0] == "storage" and isinstance(pid[1], _Storage)
                and isinstance(pid[2], str) and is_int(pid[4])
                and pid[4] >= 0):
            raise pickle.UnpicklingError(
                f"unknown storage record {SHORT.repr(pid)}")
        storage, key, count = pid[1], pid[2], pid[4]
        if key in self._storages:
            return self._storages[key]
        dtype = np.dtype(_STORAGES[storage.name]).newbyteorder("<")
        entry = f"{self._prefix}/data/{key}"
        try:
            info = self._archive.getinfo(entry)
        except KeyError:
            raise pickle.UnpicklingError(
                f"storage {SHORT.repr(entry)[1:-1]} is missing") from None
        # Compared before a byte is inflated: the zip's directory against
        # the pickle, and stored, so the file's own bytes bound the read.
        if info.file_size != count * dtype.itemsize:
            raise pickle.UnpicklingError(
                f"storage {entry} holds {info.file_size} bytes, but the "
                f"pickle declares {count} {storage.name} elements of "
                f"{dtype.itemsize} bytes"
            )
        if info.compress_type != zipfile.ZIP_STORED:
            raise pickle.UnpicklingError(
                f"storage {entry} is compressed; torch.save stores "
                "storages uncompressed")
        record = _StorageData(entry, dtype, count,
                              storage.name == "BFloat16Storage")
        self._storages[key] = record
        return record


def _open_state(path: str) -> dict:
    """The unpickled state dict of a zip-format file, tensors unbuilt and
    storages unread (every check of the module docstring made)."""
    if not zipfile.is_zipfile(path):
        refuse_not_zip(path)
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
            pickles = [n for n in names if n.endswith("/data.pkl")]
            if len(pickles) != 1:
                raise UsageError(f"{path} holds no single data.pkl: not a "
                                 "torch.save file.")
            prefix = pickles[0][: -len("/data.pkl")]
            untrusted.check_archive(archive, path, os.path.getsize(path),
                                    lambda n: n.startswith(prefix + "/"))
            order = f"{prefix}/byteorder"
            if order in names and read_capped(
                    archive, archive.getinfo(order), 16,
                    f"{path}: {order}").strip() != b"little":
                raise UsageError(f"{path} was saved big-endian; unsupported.")
            data = read_capped(archive, archive.getinfo(pickles[0]),
                                MAX_PICKLE_BYTES, f"{path}: {pickles[0]}")
            check_opcodes(data, path)
            return _Unpickler(io.BytesIO(data), archive, prefix, path).load()
    except UsageError:
        raise
    except Exception as error:  # any defect of an untrusted file
        raise UsageError(
            f"Could not read {path}: {clip(str(error) or repr(error))}"
        ) from None


Pick = Optional[Callable[[Any], Tuple[str, Any]]]


def _entries(path: str, state, pick: Pick = None) -> Dict[str, _Tensor]:
    """The state dict's tensors by name (the dict `pick` takes out of a
    wrapping one: `(key, dict)`), each view checked."""
    if pick is not None:
        state = pick(state)[1]
    if not isinstance(state, dict):
        raise UsageError(
            f"{path} holds a {type(state).__name__}, not a state dict."
        )
    tensors = {}
    for key, value in state.items():
        if not isinstance(value, _Tensor):
            raise UsageError(f"{path}: entry {SHORT.repr(key)} is a "
                             f"{type(value).__name__}, not a tensor.")
        try:
            _check(str(key), value)
        except UsageError as error:
            raise UsageError(f"{path}: {error}") from None
        tensors[str(key)] = value
    return tensors


def open_without_torch(path: str, pick: Pick = None) -> StateDict:
    """The tensors of a `torch.save`d state dict, read without PyTorch
    (every check of the module docstring made first), as a `StateDict`."""
    tensors = _entries(path, _open_state(path), pick)
    storages: Dict[str, np.ndarray] = {}

    def make(key: str) -> np.ndarray:
        tensor = tensors[key]
        record = tensor.storage
        if record.entry not in storages:
            try:
                with zipfile.ZipFile(path) as archive:
                    data = read_capped(
                        archive, archive.getinfo(record.entry),
                        record.nbytes, f"{path}: {record.entry}")
            except UsageError:
                raise
            except Exception as error:  # the file changed, or is corrupt
                raise UsageError(f"Could not read {path}: {error}") from None
            if len(data) != record.nbytes:
                raise UsageError(f"{path}: {record.entry} holds "
                                 f"{len(data)} bytes, not {record.nbytes}.")
            storages[record.entry] = np.frombuffer(data, record.dtype)
        return _view(key, tensor, storages[record.entry])

    return StateDict(path, {k: tuple(t.size) for k, t in tensors.items()},
                     {k: t.storage.itemsize for k, t in tensors.items()},
                     make, byte_limit(tensors.values()))


def read_without_torch(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of a state dict, by `open_without_torch`, in order."""
    state = open_without_torch(path)
    return {key: state[key] for key in state}


def open_with_torch(path: str, pick: Pick = None) -> StateDict:
    """The tensors of a `torch.save`d state dict, read by
    `torch.load(weights_only=True)` after every check of the module
    docstring; bfloat16 widened to float32."""
    checked = _entries(path, _open_state(path), pick)
    torch = importlib.import_module("torch")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # torch raises its own types
        message = str(error).strip().splitlines()
        raise UsageError(f"Could not read {path}: "
                         f"{message[0] if message else error!r}") from None
    if pick is not None:
        state = pick(state)[1]
    if not isinstance(state, dict) or list(map(str, state)) != list(checked):
        raise UsageError(f"{path}: PyTorch reads other entries than the "
                         "checks did; refusing the file.")
    values = {str(k): v for k, v in state.items()}
    for key, value in values.items():
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"{path}: entry {SHORT.repr(key)} is a "
                             f"{type(value).__name__}, not a tensor.")

    def make(key: str) -> np.ndarray:
        value = values[key]
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.detach().numpy().copy()

    return StateDict(path, {k: tuple(v.shape) for k, v in values.items()},
                     {k: t.storage.itemsize for k, t in checked.items()},
                     make, byte_limit(checked.values()))


def read_with_torch(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of a state dict, by `open_with_torch`, in order."""
    state = open_with_torch(path)
    return {key: state[key] for key in state}


def read_state_dict(path: str, use_torch: Optional[bool] = None,
                    pick: Pick = None) -> StateDict:
    """The tensors of a `torch.save`d state dict, as numpy arrays made
    when first looked up.

    Args:
        path: str. A `pytorch_model.bin` (zip format).
        use_torch: bool or None. None: PyTorch's reader when PyTorch is
            installed, else the checked reader of this module.
        pick: the state dict in the file's object, as `(key, dict)` (a
            training checkpoint's `state_dict_ema`), or None: the object.

    Returns:
        A `StateDict` (a mapping of str to np.ndarray, in the file's
        order); bfloat16 tensors come back as float32.

    Raises:
        UsageError: not a zip-format PyTorch file, a pickle holding
            anything but tensors or nesting too deep, a storage whose size
            disagrees with the pickle, a tensor outside its storage, or
            views that would amplify the file (named).
    """
    if HAS_TORCH if use_torch is None else use_torch:
        return open_with_torch(path, pick)
    return open_without_torch(path, pick)
