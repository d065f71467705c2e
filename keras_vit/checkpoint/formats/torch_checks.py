"""The checks a `torch.save` file passes before anything in it is
unpickled (`keras_vit.checkpoint.formats.torch_pickle` reads it after them):

- `refuse_not_zip`: a file that is no zip (cut short, or no `torch.save`
  file of PyTorch >= 1.6);
- `read_capped`: a zip member's bytes, never inflating past a cap;
- `check_opcodes`: the opcode pre-scan of the pickle, walked by
  `pickletools.genops` (which recurses into nothing): only the opcodes
  `torch.save` writes, containers nested at most `MAX_NESTING` deep, at
  most `MAX_NESTING` open MARKs, a bounded stack and memo, and no
  container changed after it was put into another (which is how a pickle
  builds a cycle or hides depth);
- `check_view`: the bounds of a tensor's view of its storage (sizes,
  strides, a non-negative offset, the largest index it reaches);
- `StateDict`: the arrays, made when first looked up, all of them
  together at most `2 x` the bytes of the file's storages plus
  `MAX_EXTRA_BYTES` (a tensor may repeat storage elements through a zero
  stride; a file whose views would amplify beyond that is refused).

Each refuses with one line (`UsageError`) naming the file and the reason.
"""

from __future__ import annotations

import collections.abc
import math
import pickletools
import reprlib
import zipfile
from typing import Callable, Dict, Iterable, Iterator, Tuple

import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.errors import UsageError


def refuse_not_zip(path: str) -> None:
    """Refuses `path`, which is no zip: one that starts as a zip (its
    index at the end cut off) is a damaged download, to fetch again; any
    other to convert (PyTorch < 1.6's format, or no checkpoint)."""
    with open(path, "rb") as f:
        cut = f.read(4) == b"PK\x03\x04"
    if cut:
        raise UsageError(
            f"{path} is a zip-format PyTorch file cut short (its index at "
            "the end is missing): a damaged or partly downloaded file: "
            "download or copy it again.")
    raise UsageError(
        f"{path} is not a zip-format PyTorch file (saved by PyTorch < 1.6, "
        "or not a checkpoint): convert it to model.safetensors.")


_MAX_DIMS = 16
_MAX_ELEMENTS = 1 << 40
# The pickle of a ViT's state dict is ~100 bytes per tensor (4 KB for 40
# tensors); containers nest ~6 deep in it (the dict, a tensor's arguments,
# its size, the _metadata dicts) and its stack and memo stay small.
MAX_PICKLE_BYTES = 8 << 20
MAX_NESTING = 32
_MAX_STACK = 1 << 16
_MAX_MEMO = 1 << 18
# What the arrays made from one file may hold beyond 2 x its storages:
# the bound of every model reader (`untrusted.memory_bound`).
MAX_EXTRA_BYTES = untrusted.MAX_EXTRA_BYTES
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

SHORT = reprlib.Repr()
SHORT.maxlevel, SHORT.maxtuple, SHORT.maxstring = 3, 8, 60


def clip(text: str, limit: int = 300) -> str:
    """`text` on one line, at most `limit` characters."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_view(where: str, stored: int, size, stride,
               offset) -> Tuple[int, ...]:
    """Refuses (UsageError beginning with `where`) a tensor view that does
    not fit inside its storage of `stored` elements: malformed or negative
    size / stride / offset, more than _MAX_DIMS dimensions, an impossible
    shape, or an index past the storage's end. Returns the shape."""
    if not (isinstance(size, tuple) and isinstance(stride, tuple)
            and len(size) == len(stride) <= _MAX_DIMS
            and all(map(is_int, size + stride)) and is_int(offset)):
        raise UsageError(
            f"{where}: malformed size {SHORT.repr(size)} / stride "
            f"{SHORT.repr(stride)} / offset {SHORT.repr(offset)}.")
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


def contiguous(size: Tuple[int, ...]) -> Tuple[int, ...]:
    """The strides of a C-contiguous tensor of shape `size`."""
    strides, step = [], 1
    for n in reversed(size):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def read_capped(archive: zipfile.ZipFile, info: zipfile.ZipInfo,
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

    # One branch per opcode: the interpreter reads as the table it is.
    def step(self, name: str, arg) -> None:  # noqa: C901
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


def check_opcodes(data: bytes, path: str) -> None:
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
                         f"({clip(str(error))}).") from None


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
                f"(at {SHORT.repr(key)}, {shape}): views that repeat "
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


def byte_limit(tensors: Iterable) -> int:
    """The bytes a `StateDict` of `tensors` (records with a `storage` of
    `count` elements of `itemsize` bytes, as read) may make: twice their
    storages' bytes plus MAX_EXTRA_BYTES."""
    stored = {id(t.storage): t.storage.count * t.storage.itemsize
              for t in tensors}
    return 2 * sum(stored.values()) + MAX_EXTRA_BYTES
