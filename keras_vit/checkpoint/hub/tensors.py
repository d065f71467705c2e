"""The weights files of a Hugging Face / timm folder, read lazily
(`keras_vit.checkpoint.hub.reader` reads the folder): `model.safetensors` with
the `safetensors` package's NumPy API, a sharded
`model.safetensors.index.json` (its shards inside the folder:
`untrusted.inside_folder`), and `pytorch_model.bin` with `torch_pickle`
(timm's reading of a training checkpoint through `Unwrapped`). Every
array is made when first looked up, as float32, and only when its dtype
is a real number (`untrusted.check_real_dtype`).
"""

from __future__ import annotations

import collections.abc
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np
import safetensors.numpy

from keras_vit.checkpoint.formats import torch_pickle, untrusted
from keras_vit.checkpoint.hub import timm_filter
from keras_vit.errors import UsageError


def shape(tensors: Mapping[str, Any], key: str) -> Tuple[int, ...]:
    """An array's shape, without reading it where the mapping knows it."""
    known = getattr(tensors, "shape", None)
    return tuple(known(key)) if known else tuple(tensors[key].shape)


def check_shapes(tensors: Mapping[str, Any], path: str) -> None:
    """Refuses, before any is read, an array of `tensors` that declares
    an axis of length zero (`untrusted.check_shape`)."""
    for key in tensors:
        untrusted.check_shape(shape(tensors, key), path, key)


class _Float32(collections.abc.Mapping):
    """Arrays of `tensors` as float32, each made when first looked up (an
    array the model has no place for is never read)."""

    def __init__(self, tensors: Mapping[str, Any], path: str):
        self._tensors = tensors
        self._path = path
        self._made: Dict[str, np.ndarray] = {}

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._made:
            value = self._tensors[key]
            untrusted.check_real_dtype(value.dtype, self._path, key)
            untrusted.check_float_parameter(value.dtype, self._path, key)
            self._made[key] = np.asarray(value, np.float32)
        return self._made[key]

    def shape(self, key: str) -> Tuple[int, ...]:
        return shape(self._tensors, key)

    def __iter__(self):
        return iter(self._tensors)

    def __len__(self) -> int:
        return len(self._tensors)


class _Safetensors(collections.abc.Mapping):
    """A safetensors file's arrays, read by the `safetensors` package one
    by one when looked up."""

    def __init__(self, path: str):
        self.path = path
        try:
            with safetensors.safe_open(path, "np") as f:
                self._keys = list(f.keys())
        except Exception as error:  # the library raises its own types
            # Its header cut short or past the file's end: a download that
            # stopped (any other fault is said as the library says it).
            cut = re.search(r"header|not fully covered|too small",
                            str(error), re.I)
            raise UsageError(
                f"Could not read {path} as safetensors: "
                f"{str(error).rstrip('.')}."
                + (" A damaged or partly downloaded file: download or copy "
                   "it again." if cut else "")
            ) from None

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._keys:
            raise KeyError(key)
        try:
            with safetensors.safe_open(self.path, "np") as f:
                dtype = f.get_slice(key).get_dtype()
                if dtype.startswith("F8"):  # NumPy has no float8 type
                    raise UsageError(
                        f"{key} of {self.path} is stored as float8 "
                        f"({dtype}), which is not read: save the model in "
                        "float32, bfloat16 or float16.")
                return f.get_tensor(key)
        except UsageError:
            raise
        except Exception as error:  # the library raises its own types
            raise UsageError(
                f"Could not read {key} of {self.path}: {error}"
            ) from None

    def shape(self, key: str) -> Tuple[int, ...]:
        with safetensors.safe_open(self.path, "np") as f:
            return tuple(f.get_slice(key).get_shape())

    def __iter__(self):
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


class _Shards(collections.abc.Mapping):
    """The arrays of a sharded model: each key read from the shard the
    index's weight_map names for it, as transformers reads them."""

    def __init__(self, weight_map: Dict[str, str],
                 shards: Dict[str, Mapping[str, Any]], path: str):
        held: Dict[str, str] = {}
        for name, shard in shards.items():
            for key in shard:  # the keys of its header; no array is read
                if key in held:
                    raise UsageError(
                        f"{path}: array {key!r} is in both shards "
                        f"{held[key]!r} and {name!r}; the index is corrupt "
                        "or crafted (each array lies in one shard).")
                held[key] = name
        for key, name in held.items():
            if weight_map.get(key) != name:
                raise UsageError(
                    f"{path}: array {key!r} is in shard {name!r}, but its "
                    f"weight_map names {weight_map.get(key)!r} for it; the "
                    "index is corrupt or crafted (download the model "
                    "again).")
        for key, name in weight_map.items():
            if held.get(key) != name:
                raise UsageError(
                    f"{path}: its weight_map puts array {key!r} in shard "
                    f"{name!r}, which does not hold it; the index or the "
                    "shard is corrupt or incomplete (download the model "
                    "again).")
        self._where = {key: shards[name] for key, name in weight_map.items()}

    def __getitem__(self, key: str):
        return self._where[key][key]

    def shape(self, key: str) -> Tuple[int, ...]:
        return shape(self._where[key], key)

    def __iter__(self):
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)


def _read_index(path: str) -> Mapping[str, Any]:
    """The arrays of the shards a model.safetensors.index.json names, each
    shard inside the index's folder (`untrusted.inside_folder`) and each
    array in the one shard its weight_map names (`_Shards`)."""
    index = untrusted.read_json_object(path)
    weight_map = index.get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise UsageError(
            f"{path} has no weight_map (an object of array name -> shard "
            "file): not a safetensors index."
        )
    folder = os.path.dirname(path) or "."
    shards = {}
    for name in weight_map.values():
        if not isinstance(name, str) or name not in shards:
            shard = untrusted.inside_folder(folder, name, path)
            if not shard.endswith(".safetensors"):
                raise UsageError(f"{path} names {name!r}, not a "
                                 ".safetensors shard.")
            shards[name] = _read_file(shard)
    return _Shards(weight_map, shards, path)


class Unwrapped:
    """timm's reading of a torch file (`timm_filter.checkpoint_entry`: a
    training checkpoint's state_dict_ema, ...), remembering what it took
    that a plain state dict would not have given."""

    def __init__(self):
        self.changed = ""

    def __call__(self, checkpoint):
        key, state = timm_filter.checkpoint_entry(checkpoint)
        self.changed = self.changed or key
        return key, state


def _read_file(path: str, unwrap: Optional[Unwrapped] = None):
    if path.endswith(".index.json"):
        return _read_index(path)
    if os.path.splitext(path)[1] in (".bin", ".pt", ".pth"):
        return torch_pickle.read_state_dict(path, pick=unwrap)
    return _Safetensors(path)


def read_tensors(path: str, unwrap: Optional[Unwrapped] = None
                 ) -> Mapping[str, np.ndarray]:
    """The arrays of a safetensors file, a sharded index or a
    pytorch_model.bin, as float32 numpy arrays (no PyTorch needed), each
    read when first looked up; arrays that are not real numbers are
    refused, as is an array that declares an axis of length zero.
    `unwrap`: a torch file's state dict as timm takes it."""
    tensors = _read_file(path, unwrap)
    check_shapes(tensors, path)
    return _Float32(tensors, path)
