"""Reads a PyTorch `state_dict` file (`pytorch_model.bin`) as numpy arrays.

Hugging Face and timm repositories from before safetensors ship their
weights only as `torch.save(state_dict)` files: a zip holding a pickle
(`<name>/data.pkl`) whose tensors point at raw storages (`<name>/data/<key>`).

Every file is checked by this module before anything is unpickled, with
PyTorch installed or not:

- the zip: one `data.pkl` of at most `MAX_PICKLE_BYTES`, read with that
  cap; every storage stored uncompressed (as `torch.save` writes it), its
  size in the zip's directory equal to the bytes the pickle declares for
  it, so no member inflates beyond what the file's own bytes hold;
- the pickle's opcodes, walked by `pickletools.genops` (which recurses
  into nothing): only those `torch.save` writes, containers nested at most
  `MAX_NESTING` deep, at most `MAX_NESTING` open MARKs, a bounded stack
  and memo, and no container changed after it was put into another (which
  is how a pickle builds a cycle or hides depth). CPython recurses, and
  can crash, when it hashes or prints a deeply nested tuple; PyTorch's
  `weights_only` unpickler too;
- the unpickled records: only tensors and ordered dicts, any other global
  (code a malicious file could run) refused by name; every tensor checked
  against its storage before any view of memory is made: dtype from an
  allow-list, sizes and strides, a non-negative offset and the largest
  index the view reaches inside the storage.

Then the tensors are read:

- PyTorch installed: by `torch.load(path, weights_only=True,
  map_location="cpu")`, PyTorch's own maintained reader.
- PyTorch absent (this project does not otherwise need it, and no
  maintained library reads the format without it: safetensors' converters
  call torch): from the storages, by the checked views above.

Either way `read_state_dict` returns a lazy mapping: an array is made when
it is first looked up, so arrays the model has no place for are never
materialised, and all arrays made from one file together may hold at most
`2 x` the bytes its storages hold plus `MAX_EXTRA_BYTES` (a tensor may
repeat storage elements through a zero stride; a file whose views would
amplify beyond that is refused). A file failing any check is refused with
one line (`UsageError`) naming the file and the reason. Only the zip
format (PyTorch >= 1.6, every file on the hubs since 2020) is read.
"""

from __future__ import annotations

import collections
import collections.abc
import importlib
import importlib.util
import io
import math
import os
import pickle
import pickletools
import reprlib
import zipfile
from typing import Callable, Dict, Iterator, Optional, Tuple

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
_MAX_DIMS = 16
_MAX_ELEMENTS = 1 << 40
# The pickle of a ViT's state dict is ~100 bytes per tensor (4 KB for 40
# tensors); containers nest ~6 deep in it (the dict, a tensor's arguments,
# its size, the _metadata dicts) and its stack and memo stay small.
MAX_PICKLE_BYTES = 8 << 20
MAX_NESTING = 32
_MAX_STACK = 1 << 16
_MAX_MEMO = 1 << 18
# What the arrays made from one file may hold beyond 2 x its storages.
MAX_EXTRA_BYTES = 64 << 20
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

_short = reprlib.Repr()
_short.maxlevel, _short.maxtuple, _short.maxstring = 3, 8, 60


def _clip(text: str, limit: int = 300) -> str:
    """`text` on one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


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


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check(name: str, tensor: _Tensor) -> Tuple[int, ...]:
    """Refuses (UsageError naming the tensor) a view that does not fit
    inside its storage; returns the shape."""
    where = f"tensor {_short.repr(name)}"
    if not isinstance(tensor.storage, _StorageData):
        raise UsageError(f"{where} has no storage record.")
    stored = tensor.storage.count
    size, stride, offset = tensor.size, tensor.stride, tensor.offset
    if not (isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) <= _MAX_DIMS
            and all(map(_is_int, size + stride)) and _is_int(offset)):
        raise UsageError(
            f"{where}: malformed size {_short.repr(size)} / stride "
            f"{_short.repr(stride)} / offset {_short.repr(offset)}.")
    if min(size + stride + (offset,)) < 0:
        raise UsageError(f"{where}: negative size, stride or offset (size "
                         f"{size}, stride {stride}, offset {offset}).")
    if math.prod(max(n, 1) for n in size) > _MAX_ELEMENTS:
        raise UsageError(f"{where} declares an impossible shape {size}.")
    if math.prod(size) == 0:
        return size
    last = offset + sum((n - 1) * s for n, s in zip(size, stride))
    if last >= stored:
        raise UsageError(
            f"{where} reaches element {last} of a storage of "
            f"{stored}: size {size}, stride {stride}, offset {offset} "
            "do not fit; the file is corrupt or crafted."
        )
    return size


def _view(name: str, tensor: _Tensor, array: np.ndarray) -> np.ndarray:
    """The checked tensor as a new array (never a view of the file)."""
    size = _check(name, tensor)
    offset = tensor.offset
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
            f"{self._path} holds a {_short.repr(module)[1:-1]}."
            f"{_short.repr(name)[1:-1]} object, not only tensors;"
            " refusing to run it. Convert the file to model.safetensors with"
            " the tool that made it."
        )

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5
                and pid[0] == "storage" and isinstance(pid[1], _Storage)
                and isinstance(pid[2], str) and _is_int(pid[4])
                and pid[4] >= 0):
            raise pickle.UnpicklingError(
                f"unknown storage record {_short.repr(pid)}")
        storage, key, count = pid[1], pid[2], pid[4]
        if key in self._storages:
            return self._storages[key]
        dtype = np.dtype(_STORAGES[storage.name]).newbyteorder("<")
        entry = f"{self._prefix}/data/{key}"
        try:
            info = self._archive.getinfo(entry)
        except KeyError:
            raise pickle.UnpicklingError(
                f"storage {_short.repr(entry)[1:-1]} is missing") from None
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


def _read_capped(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
                 limit: int, what: str) -> bytes:
    """A zip member's bytes, never inflating more than `limit` + 1."""
    if info.file_size > limit:
        raise UsageError(f"{what} declares {info.file_size} bytes, more "
                         f"than the {limit} it may hold.")
    with archive.open(info) as member:
        data = member.read(limit + 1)
    if len(data) > limit:
        raise UsageError(f"{what} inflates beyond {limit} bytes.")
    return data


class _Scan:
    """The opcode pre-scan: containers' nesting depth, tracked without
    building any object (see the module docstring)."""

    def __init__(self, path: str):
        self.path = path
        self.stack: list = []
        self.memo: Dict[int, list] = {}
        self.marks = 0

    def refuse(self, why: str) -> UsageError:
        return UsageError(f"{self.path}: its pickle {why}; refusing the "
                          "file (torch.save does not write that).")

    def node(self, depth: int) -> list:
        if depth > MAX_NESTING:
            raise self.refuse(f"nests containers more than {MAX_NESTING} "
                              "deep")
        return [depth, False]  # [nesting depth, put into another already]

    def push(self, item) -> None:
        if len(self.stack) >= _MAX_STACK:
            raise self.refuse(f"stacks more than {_MAX_STACK} objects")
        self.stack.append(item)

    def pop(self) -> list:
        if not self.stack or self.stack[-1] is None:
            raise self.refuse("takes an object where there is none")
        return self.stack.pop()

    def pop_mark(self) -> list:
        items = []
        while self.stack and self.stack[-1] is not None:
            items.append(self.stack.pop())
        if not self.stack:
            raise self.refuse("closes a MARK it never opened")
        self.stack.pop()
        self.marks -= 1
        return items

    def contain(self, items) -> list:
        """A new container holding `items`."""
        for item in items:
            item[1] = True
        return self.node(1 + max((item[0] for item in items), default=0))

    def add(self, items) -> None:
        """Puts `items` into the container on top of the stack."""
        if not self.stack or self.stack[-1] is None:
            raise self.refuse("adds to a container that is not there")
        target = self.stack[-1]
        if target[1]:
            raise self.refuse("changes a container after putting it into "
                              "another")
        if any(item is target for item in items):
            raise self.refuse("puts a container into itself")
        grown = self.contain(items)
        target[0] = max(target[0], grown[0])

    def step(self, name: str, arg) -> None:
        if name in ("PROTO", "STOP"):
            return
        if name == "MARK":
            self.marks += 1
            if self.marks > MAX_NESTING:
                raise self.refuse(f"opens more than {MAX_NESTING} MARKs")
            self.push(None)
        elif name == "POP":
            if self.stack and self.stack[-1] is None:
                self.pop_mark()
            else:
                self.pop()
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "DUP":
            item = self.pop()
            self.push(item)
            self.push(item)
        elif name in ("BINPUT", "LONG_BINPUT"):
            if not self.stack or self.stack[-1] is None:
                raise self.refuse("memoizes a MARK")
            if arg not in self.memo and len(self.memo) >= _MAX_MEMO:
                raise self.refuse(f"memoizes more than {_MAX_MEMO} objects")
            self.memo[arg] = self.stack[-1]
        elif name in ("BINGET", "LONG_BINGET"):
            if arg not in self.memo:
                raise self.refuse(f"reads memo entry {arg}, never stored")
            self.push(self.memo[arg])
        elif name in ("REDUCE", "NEWOBJ"):
            args, function = self.pop(), self.pop()
            self.push(self.contain([function, args]))
        elif name == "BUILD":
            self.add([self.pop()])
        elif name == "BINPERSID":
            self.push(self.contain([self.pop()]))
        elif name in ("EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE"):
            self.push(self.node(1))
        elif name in ("DICT", "LIST", "TUPLE"):
            self.push(self.contain(self.pop_mark()))
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            self.push(self.contain([self.pop() for _ in range(int(name[-1]))]))
        elif name == "SETITEM":
            self.add([self.pop(), self.pop()])
        elif name == "APPEND":
            self.add([self.pop()])
        elif name in ("SETITEMS", "APPENDS"):
            self.add(self.pop_mark())
        else:  # GLOBAL, a number, a string, None, a bool: no container
            self.push(self.node(0))


def _check_opcodes(data: bytes, path: str) -> None:
    """Refuses a pickle using an opcode torch.save does not write, or one
    whose objects nest deeper than MAX_NESTING (see `_Scan`)."""
    scan = _Scan(path)
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name not in _OPCODES:
                raise UsageError(
                    f"{path}: its pickle uses opcode {opcode.name}, which "
                    "torch.save does not write; refusing the file."
                )
            scan.step(opcode.name, arg)
    except ValueError as error:  # genops: a truncated or corrupt pickle
        if isinstance(error, UsageError):
            raise
        raise UsageError(f"{path}: its pickle is corrupt "
                         f"({_clip(str(error))}).") from None


def _open_state(path: str) -> dict:
    """The unpickled state dict of a zip-format file, tensors unbuilt and
    storages unread (every check of the module docstring made)."""
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
            if order in names and _read_capped(
                    archive, archive.getinfo(order), 16,
                    f"{path}: {order}").strip() != b"little":
                raise UsageError(f"{path} was saved big-endian; unsupported.")
            data = _read_capped(archive, archive.getinfo(pickles[0]),
                                MAX_PICKLE_BYTES, f"{path}: {pickles[0]}")
            _check_opcodes(data, path)
            return _Unpickler(io.BytesIO(data), archive, prefix, path).load()
    except UsageError:
        raise
    except Exception as error:  # any defect of an untrusted file
        raise UsageError(
            f"Could not read {path}: {_clip(str(error) or repr(error))}"
        ) from None


def _entries(path: str, state) -> Dict[str, _Tensor]:
    """The state dict's tensors by name, each view checked."""
    if not isinstance(state, dict):
        raise UsageError(
            f"{path} holds a {type(state).__name__}, not a state dict."
        )
    tensors = {}
    for key, value in state.items():
        if not isinstance(value, _Tensor):
            raise UsageError(f"{path}: entry {_short.repr(key)} is a "
                             f"{type(value).__name__}, not a tensor.")
        try:
            _check(str(key), value)
        except UsageError as error:
            raise UsageError(f"{path}: {error}") from None
        tensors[str(key)] = value
    return tensors


class StateDict(collections.abc.Mapping):
    """A state dict's arrays, each made when it is first looked up.

    The keys (and `shape(key)`) are known without reading a tensor; all
    arrays made together may hold at most `limit` bytes (`itemsizes`: the
    bytes of one element of each array).
    """

    def __init__(self, path: str, shapes: Dict[str, Tuple[int, ...]],
                 itemsizes: Dict[str, int],
                 make: Callable[[str], np.ndarray], limit: int):
        self.path = path
        self._shapes = shapes
        self._itemsizes = itemsizes
        self._make = make
        self._limit = limit
        self._made: Dict[str, np.ndarray] = {}
        self.materialised = 0

    def shape(self, key: str) -> Tuple[int, ...]:
        return self._shapes[key]

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self._made:
            return self._made[key]
        shape = self._shapes[key]
        size = math.prod(shape) * self._itemsizes[key]
        if self.materialised + size > self._limit:
            raise UsageError(
                f"{self.path}: its tensors would make more than "
                f"{self._limit} bytes of arrays from "
                f"{self._limit - MAX_EXTRA_BYTES >> 1} bytes of storage "
                f"(at {_short.repr(key)}, {shape}): views that repeat "
                "storage elements; refusing the file."
            )
        array = self._make(key)
        self.materialised += size
        self._made[key] = array
        return array

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)


def _limit(tensors: Dict[str, _Tensor]) -> int:
    """Twice the bytes of the storages, as read, plus MAX_EXTRA_BYTES."""
    stored = {id(t.storage): t.storage.count * t.storage.itemsize
              for t in tensors.values()}
    return 2 * sum(stored.values()) + MAX_EXTRA_BYTES


def open_without_torch(path: str) -> StateDict:
    """The tensors of a `torch.save`d state dict, read without PyTorch
    (every check of the module docstring made first), as a `StateDict`."""
    tensors = _entries(path, _open_state(path))
    storages: Dict[str, np.ndarray] = {}

    def make(key: str) -> np.ndarray:
        tensor = tensors[key]
        record = tensor.storage
        if record.entry not in storages:
            try:
                with zipfile.ZipFile(path) as archive:
                    data = _read_capped(
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
                     make, _limit(tensors))


def read_without_torch(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of a `torch.save`d state dict, read without PyTorch
    (see `open_without_torch`), in the file's order."""
    state = open_without_torch(path)
    return {key: state[key] for key in state}


def open_with_torch(path: str) -> StateDict:
    """The tensors of a `torch.save`d state dict, read by
    `torch.load(weights_only=True)` after every check of the module
    docstring; bfloat16 widened to float32."""
    checked = _entries(path, _open_state(path))
    torch = importlib.import_module("torch")
    try:
        state = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as error:  # torch raises its own types
        message = str(error).strip().splitlines()
        raise UsageError(f"Could not read {path}: "
                         f"{message[0] if message else error!r}") from None
    if not isinstance(state, dict) or list(map(str, state)) != list(checked):
        raise UsageError(f"{path}: PyTorch reads other entries than the "
                         "checks did; refusing the file.")
    values = {str(k): v for k, v in state.items()}
    for key, value in values.items():
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"{path}: entry {_short.repr(key)} is a "
                             f"{type(value).__name__}, not a tensor.")

    def make(key: str) -> np.ndarray:
        value = values[key]
        if value.dtype == torch.bfloat16:
            value = value.float()
        return value.detach().numpy().copy()

    return StateDict(path, {k: tuple(v.shape) for k, v in values.items()},
                     {k: t.storage.itemsize for k, t in checked.items()},
                     make, _limit(checked))


def read_with_torch(path: str) -> Dict[str, np.ndarray]:
    """Every tensor of a `torch.save`d state dict, read by PyTorch (see
    `open_with_torch`), in the file's order."""
    state = open_with_torch(path)
    return {key: state[key] for key in state}


def read_state_dict(path: str,
                    use_torch: Optional[bool] = None) -> StateDict:
    """The tensors of a `torch.save`d state dict, as numpy arrays made
    when first looked up.

    Args:
        path: str. A `pytorch_model.bin` (zip format).
        use_torch: bool or None. None: PyTorch's reader when PyTorch is
            installed, else the checked reader of this module.

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
        return open_with_torch(path)
    return open_without_torch(path)


def is_torch_file(path: str) -> bool:
    """bool. Whether `path` looks like a `torch.save` file (by name)."""
    return os.path.splitext(path)[1] in (".bin", ".pt", ".pth")
