"""Writes `torch.save` zip files without PyTorch, for the reader's tests.

The layout is PyTorch's (>= 1.6): `archive/data.pkl` (pickle protocol 2,
tensors reduced to `torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, backward_hooks)`, storages as persistent ids
`("storage", torch.FloatStorage, key, "cpu", numel)`), `archive/byteorder`,
`archive/version` and one `archive/data/<key>` entry of raw little-endian
bytes per storage. The pickle is written by Python's own pickler, with
stand-ins registered as `torch` / `torch._utils` only while it runs, so the
globals it names are exactly PyTorch's. Any size, stride, offset or storage
length can be declared, which is how the tests craft bad files.
"""

from __future__ import annotations

import collections
import io
import pickle
import sys
import types
import zipfile
from typing import Dict, Optional, Sequence
from unittest import mock

import numpy as np

STORAGE_DTYPES = {
    "FloatStorage": np.float32, "DoubleStorage": np.float64,
    "HalfStorage": np.float16, "LongStorage": np.int64,
    "IntStorage": np.int32, "ByteStorage": np.uint8,
}


def _rebuild_tensor_v2(*args):  # only named in the pickle, never called
    raise AssertionError("stand-in")


_rebuild_tensor_v2.__module__ = "torch._utils"
_TORCH = types.ModuleType("torch")
_UTILS = types.ModuleType("torch._utils")
_UTILS._rebuild_tensor_v2 = _rebuild_tensor_v2
_TORCH._utils = _UTILS


def _storage_class(name: str) -> type:
    """torch.<name> as a pickle global (any name, for crafted files)."""
    if not hasattr(_TORCH, name):
        setattr(_TORCH, name, type(name, (), {"__module__": "torch"}))
    return getattr(_TORCH, name)


class Tensor:
    """One tensor entry: a view (offset, size, stride) of storage `key`."""

    def __init__(self, key: str, offset: int, size: Sequence[int],
                 stride: Sequence[int]):
        self.key, self.offset = key, offset
        self.size, self.stride = tuple(size), tuple(stride)

    def __reduce__(self):
        return (_rebuild_tensor_v2, (
            _StorageRef(self.key), self.offset, self.size, self.stride,
            False, collections.OrderedDict(),
        ))


class _StorageRef:
    def __init__(self, key: str):
        self.key = key


def contiguous(size: Sequence[int]) -> tuple:
    strides, step = [], 1
    for n in reversed(tuple(size)):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def pickle_bytes(tensors: Dict[str, Tensor], kinds: Dict[str, str],
                 counts: Dict[str, int]) -> bytes:
    """The data.pkl of a state dict (`kinds`: storage key -> storage class
    name, `counts`: key -> the element count the pickle declares)."""

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, _StorageRef):
                return ("storage", _storage_class(kinds[obj.key]), obj.key,
                        "cpu", counts[obj.key])
            return None

    buffer = io.BytesIO()
    with mock.patch.dict(sys.modules,
                         {"torch": _TORCH, "torch._utils": _UTILS}):
        Pickler(buffer, protocol=2).dump(
            collections.OrderedDict(tensors.items()))
    return buffer.getvalue()


def write(path: str, tensors: Dict[str, Tensor],
          storages: Dict[str, np.ndarray],
          kinds: Optional[Dict[str, str]] = None,
          counts: Optional[Dict[str, int]] = None,
          raw: Optional[Dict[str, bytes]] = None,
          data_pkl: Optional[bytes] = None) -> None:
    """Writes a torch.save zip. `storages` gives each storage's elements
    (their dtype picks the storage class unless `kinds` says otherwise);
    `counts` overrides the declared element counts, `raw` the stored bytes,
    `data_pkl` the whole pickle."""
    by_dtype = {np.dtype(v): k for k, v in STORAGE_DTYPES.items()}
    kinds = dict(kinds or {})
    for key, array in storages.items():
        kinds.setdefault(key, by_dtype[np.asarray(array).dtype])
    counts = {**{k: int(np.asarray(a).size) for k, a in storages.items()},
              **(counts or {})}
    if data_pkl is None:
        data_pkl = pickle_bytes(tensors, kinds, counts)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", data_pkl)
        archive.writestr("archive/byteorder", "little")
        for key, array in storages.items():
            data = (raw or {}).get(key)
            if data is None:
                data = np.ascontiguousarray(array).astype(
                    np.asarray(array).dtype.newbyteorder("<")).tobytes()
            archive.writestr(f"archive/data/{key}", data)
        archive.writestr("archive/version", "3\n")


def save(path: str, arrays: Dict[str, np.ndarray]) -> None:
    """torch.save of a state dict of contiguous tensors, one storage each."""
    write(path,
          {name: Tensor(str(i), 0, a.shape, contiguous(a.shape))
           for i, (name, a) in enumerate(arrays.items())},
          {str(i): np.asarray(a).reshape(-1)
           for i, a in enumerate(arrays.values())})


def view(storage: np.ndarray, offset: int, size: Sequence[int],
         stride: Sequence[int]) -> np.ndarray:
    """What PyTorch gives for a view, by index arithmetic alone (the
    independent reference for the reader's results)."""
    if 0 in tuple(size):
        return np.zeros(tuple(size), storage.dtype)
    index = np.full(tuple(size), offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        index = index + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return storage[index]
