"""Reading, writing and describing official .npz arrays (NumPy only).

The model-independent half of `keras_vit.checkpoint.weights`: safe reading
of .npz files (`read_npz`: no pickles, clear errors for truncated or
foreign files), atomic writing (`write_npz`, through
`keras_vit.storage.atomic`) and the load report (`LoadReport`). What
the arrays' keys and shapes mean (layouts, the architecture they imply) is
in `keras_vit.checkpoint.formats.npz_layout`; position-embedding resizing in
`keras_vit.checkpoint.posemb`. TensorFlow is imported only for remote
(gs://) paths.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import zipfile
import zlib
from typing import (
    Dict,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.lazy import LazyArrays, Shape
from keras_vit.errors import UsageError
from keras_vit.storage.atomic import atomic_write, is_remote

Arrays = Dict[str, np.ndarray]
Grid = Tuple[int, int]
PathLike = Union[str, os.PathLike]

POSEMB = "Transformer/posembed_input/pos_embedding"
_ZIP_MAGIC = b"PK"
_NPY_MAGIC = b"\x93NUMPY"


def open_for_reading(path: str):
    """A local file, or a remote one read whole into memory."""
    if is_remote(path):
        import tensorflow as tf  # only remote paths need TensorFlow

        # Read whole: zip access seeks a lot, which some file systems (and
        # GCS, request by request) handle badly.
        with tf.io.gfile.GFile(path, "rb") as f:
            return io.BytesIO(f.read())
    return open(path, "rb")


@dataclasses.dataclass(frozen=True)
class _Member:
    """An .npz member as its checked header declares it."""

    name: str
    shape: Shape
    dtype: np.dtype
    fortran: bool
    file_size: int
    crc: int


def read_npz(path: PathLike) -> LazyArrays:
    """The arrays of an .npz file, checked, each inflated when looked up.

    Every member is checked from the zip's directory and its .npy header
    before any is inflated (`_check_members`: the archive's bound, .npy
    arrays of real numbers only, no pickles, each header's bytes equal to
    the member's); a member is then inflated only when its key is looked
    up, one at a time, so an array nobody asks for (a training
    checkpoint's optimizer state) is never inflated. `dict(read_npz(p))`
    reads them all.

    Args:
        path: str or path. Local path, or gs:// (any `tf.io.gfile` URL).

    Returns:
        LazyArrays of str to np.ndarray, in the file's order (`shape(key)`
        without inflating).

    Raises:
        FileNotFoundError: no such local file.
        UsageError: the file is not an .npz archive, is truncated or
            corrupt, holds pickled Python objects, or holds no arrays (on
            reading); an array that no longer matches its checked header
            (on lookup). The message names the file and the problem.
    """
    path = os.fspath(path)
    if not is_remote(path) and not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file.")
    with open_for_reading(path) as f:
        _check_magic(f.read(len(_NPY_MAGIC)), path)
        # A remote file is read whole once; a local one is opened again for
        # each array looked up.
        data = f.getvalue() if isinstance(f, io.BytesIO) else None
        try:
            members = _check_members(f, path)
        except UsageError:
            raise  # a refusal of its own, naming the file
        except _CORRUPT as error:
            raise _corrupt(path, error) from None
    if not members:
        raise UsageError(f"{path}: the .npz archive holds no arrays.")

    def opener():
        return io.BytesIO(data) if data is not None else open(path, "rb")

    return LazyArrays({k: m.shape for k, m in members.items()},
                      lambda key: _inflate(path, opener, members[key]))


_CORRUPT = (zipfile.BadZipFile, EOFError, zlib.error, OSError,
            NotImplementedError, RuntimeError, ValueError)


def _corrupt(path: str, error: BaseException) -> UsageError:
    return UsageError(f"{path}: truncated or corrupt .npz archive "
                      f"({error}). Download or copy the file again.")


def _check_magic(magic: bytes, path: str) -> None:
    """Refuses a file that is no zip archive, naming what it is."""
    if magic.startswith(_NPY_MAGIC):
        raise UsageError(
            f"{path}: a single .npy array, not an .npz archive of named "
            "parameters. Save checkpoints with keras_vit.save_npz or "
            "np.savez(path, **arrays)."
        )
    if magic[:1] == b"\x80":
        raise UsageError(
            f"{path}: a Python pickle, not an .npz archive. Pickles can "
            "run code when loaded and are refused; convert it to .npz "
            "(np.savez) where it came from."
        )
    if not magic.startswith(_ZIP_MAGIC):
        raise UsageError(
            f"{path}: not an .npz archive (it does not start with the "
            "zip signature). Check the path; an HTML error page or an "
            "interrupted download looks like this."
        )


def _inflate(path: str, opener, member: _Member) -> np.ndarray:
    """One member's array, inflated from the file after its directory
    entry and header are found unchanged since `_check_members`; exactly
    the bytes the header declares are read, in bounded chunks."""
    key = member.name[:-4]
    try:
        with opener() as f, zipfile.ZipFile(f) as archive:
            info = archive.getinfo(member.name)
            if (info.file_size, info.CRC) != (member.file_size, member.crc):
                raise UsageError(f"{path}: entry {key!r} changed after the "
                                 "file was checked; load it again.")
            with archive.open(info) as stream:
                if _read_header(stream, path, member.name)[:3] != (
                        member.shape, member.fortran, member.dtype):
                    raise UsageError(f"{path}: entry {key!r} changed after "
                                     "the file was checked; load it again.")
                shape = member.shape[::-1] if member.fortran else member.shape
                array = np.empty(shape, member.dtype)
                _read_into(stream, array.reshape(-1).view(np.uint8), path,
                           key)
                if stream.read(1):  # also checks the member's CRC
                    raise UsageError(f"{path}: entry {key!r} holds more "
                                     "bytes than its header declares.")
    except UsageError:
        raise
    except _CORRUPT as error:
        raise _corrupt(path, error) from None
    bfloat16 = untrusted.npy_bfloat16(member.dtype)
    if bfloat16 is not None:
        array = array.view(bfloat16)
    return array.T if member.fortran else array


def _read_into(stream, out: np.ndarray, path: str, key: str) -> None:
    """Fills the bytes `out` from `stream`, 1 MiB at a time."""
    done = 0
    while done < out.size:
        chunk = stream.read(min(1 << 20, out.size - done))
        if not chunk:
            raise UsageError(f"{path}: entry {key!r} ends before the "
                             "bytes its header declares; the file is "
                             "truncated or corrupt.")
        out[done:done + len(chunk)] = np.frombuffer(chunk, np.uint8)
        done += len(chunk)


def _read_header(member, path: str, name: str):
    """(shape, fortran_order, dtype, header bytes) of an .npy member."""
    try:
        version = np.lib.format.read_magic(member)
        shape, fortran, dtype = (
            np.lib.format.read_array_header_1_0(member)
            if version == (1, 0) else
            np.lib.format.read_array_header_2_0(member))
    except ValueError as error:
        raise UsageError(
            f"{path}: entry {name!r} is not an .npy array ({error})."
        ) from None
    return tuple(shape), bool(fortran), dtype, member.tell()


def _check_members(f, path: str) -> Dict[str, _Member]:
    """Refuses, before any array is read, members that inflate past the
    bound of every model reader (`untrusted.check_archive`), a member that
    is not an .npy array or whose header declares other bytes than the
    member holds (a huge shape over a few bytes), pickled object arrays
    and arrays that are not real numbers (complex, void, strings).

    Returns:
        dict of key (the name without `.npy`) to its checked `_Member`.
    """
    size = f.seek(0, io.SEEK_END)
    f.seek(0)
    members: Dict[str, _Member] = {}
    with zipfile.ZipFile(f) as archive:
        # Every member's declared size, from the directory, before any is
        # inflated: all together within the bound of every model reader.
        untrusted.check_archive(archive, path, size, lambda name: True)
        for info in archive.infolist():
            members.update(_check_member(archive, info, path, members))
    return members


def _check_member(archive, info, path: str, seen) -> Dict[str, _Member]:
    """{key: _Member} of one archive member, after its checks (see
    `_check_members`); only its header is inflated."""
    name = info.filename
    if not name.endswith(".npy"):
        raise UsageError(
            f"{path}: entry {name!r} is not an .npy array; an .npz "
            "checkpoint holds arrays only."
        )
    key = name[:-4]
    if key in seen:
        raise UsageError(f"{path}: entry {key!r} appears twice; the file "
                         "is corrupt or crafted.")
    with archive.open(info) as member:
        shape, fortran, dtype, header = _read_header(member, path, name)
    if dtype.hasobject:
        raise UsageError(
            f"{path}: entry {key!r} holds pickled Python objects, which "
            "are refused (they can run code). A checkpoint holds numeric "
            "arrays only."
        )
    if untrusted.npy_bfloat16(dtype) is None:  # bfloat16 as NumPy wrote it
        untrusted.check_real_dtype(dtype, path, key)
    untrusted.check_shape(shape, path, key)
    declared = math.prod(shape) * dtype.itemsize
    if declared != info.file_size - header:
        raise UsageError(
            f"{path}: entry {key!r} declares shape {shape} of {dtype} "
            f"({declared} bytes) but holds {info.file_size - header} bytes;"
            " the file is corrupt or crafted."
        )
    return {key: _Member(name, shape, dtype, fortran, info.file_size,
                         info.CRC)}


def write_npz(path: PathLike, arrays: Mapping[str, np.ndarray]) -> None:
    """Writes arrays to an .npz file atomically (`atomic.atomic_write`).

    Args:
        path: str or path. Local path or gs:// URL.
        arrays: dict of str to array. Keys may contain "/".
    """
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    atomic_write(path, lambda tmp: np.savez(tmp, **arrays))


@dataclasses.dataclass
class LoadReport:
    """What `load_npz` did.

    Attributes:
        path: str. The file read.
        layout: str. "official", "official, opt/target/ prefix" or
            "big_vision".
        loaded: list of str. Checkpoint keys copied into the model.
        missing: list of (key, expected shape). Parameters of the model the
            file lacks (non-strict mode leaves them at their initial value).
        unexpected: list of (key, shape). Arrays of the file the model has
            no place for.
        mismatched: list of (key, expected shape, found shape).
        dropped: list of (key, shape, reason). Arrays deliberately not
            loaded (a head for another class count, pre-logits, optimizer
            state).
        head_initialized: bool. The model's head was set anew: a zero
            kernel, the bias at its head_bias_init (as the official
            transfer builds it).
        posemb_resized: ((old rows, old cols), (new rows, new cols)) or None.
        hints: list of str. How to fix what went wrong.
    """

    path: str
    layout: str = "official"
    loaded: List[str] = dataclasses.field(default_factory=list)
    missing: List[Tuple[str, Shape]] = dataclasses.field(default_factory=list)
    unexpected: List[Tuple[str, Shape]] = dataclasses.field(
        default_factory=list
    )
    mismatched: List[Tuple[str, Shape, Shape]] = dataclasses.field(
        default_factory=list
    )
    dropped: List[Tuple[str, Shape, str]] = dataclasses.field(
        default_factory=list
    )
    head_initialized: bool = False
    posemb_resized: Optional[Tuple[Grid, Grid]] = None
    hints: List[str] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """bool. Every parameter of the model was loaded from the file."""
        return not (self.missing or self.unexpected or self.mismatched)

    def problems(self) -> str:
        """str. One line per missing, unexpected or mis-shaped key."""
        lines = [
            f"  missing in file: {k} (model expects {s})"
            for k, s in self.missing
        ]
        lines += [
            f"  unexpected in file: {k} {s} (model has no such parameter)"
            for k, s in self.unexpected
        ]
        lines += [
            f"  shape mismatch: {k}: model expects {e}, file has {f}"
            for k, e, f in self.mismatched
        ]
        return "\n".join(lines)

    def __str__(self) -> str:
        lines = [
            f"Loaded {len(self.loaded)} arrays from {self.path} "
            f"({self.layout} layout)."
        ]
        if self.posemb_resized:
            old, new = self.posemb_resized
            lines.append(
                f"Position embedding resized from grid {old[0]}x{old[1]} "
                f"to {new[0]}x{new[1]}."
            )
        for key, shape, reason in self.dropped:
            lines.append(f"Dropped {key} {shape}: {reason}.")
        if self.head_initialized:
            lines.append("The head was initialised anew: a zero kernel, "
                         "the bias at the model's head_bias_init.")
        if not self.ok:
            lines.append("Not loaded:\n" + self.problems())
        lines.extend(self.hints)
        return "\n".join(lines)
