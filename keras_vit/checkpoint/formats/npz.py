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
from typing import Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.errors import UsageError
from keras_vit.storage.atomic import atomic_write, is_remote

Arrays = Dict[str, np.ndarray]
Grid = Tuple[int, int]
PathLike = Union[str, os.PathLike]
Shape = Tuple[int, ...]

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


def read_npz(path: PathLike) -> Arrays:
    """Reads every array of an .npz file, refusing pickled objects.

    Args:
        path: str or path. Local path, or gs:// (any `tf.io.gfile` URL).

    Returns:
        dict of str to np.ndarray, in the file's order.

    Raises:
        FileNotFoundError: no such local file.
        ValueError: the file is not an .npz archive, is truncated or
            corrupt, holds pickled Python objects, or holds no arrays; the
            message names the file and the problem.
    """
    path = os.fspath(path)
    if not is_remote(path) and not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such checkpoint file.")
    with open_for_reading(path) as f:
        magic = f.read(len(_NPY_MAGIC))
        f.seek(0)
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
        arrays: Arrays = {}
        try:
            _check_members(f, path)
            f.seek(0)
            with np.load(f, allow_pickle=False) as npz:
                for key in npz.files:
                    try:
                        arrays[key] = npz[key]
                    except ValueError as error:
                        if "pickle" in str(error) or "Object arrays" in str(
                            error
                        ):
                            raise UsageError(
                                f"{path}: entry {key!r} holds pickled Python "
                                "objects, which are refused (they can run "
                                "code). A checkpoint holds numeric arrays "
                                "only."
                            ) from None
                        raise UsageError(
                            f"{path}: entry {key!r} is not a readable array "
                            f"({error}); the file is corrupt."
                        ) from None
        except (zipfile.BadZipFile, EOFError, zlib.error, OSError,
                NotImplementedError, RuntimeError) as error:
            raise UsageError(
                f"{path}: truncated or corrupt .npz archive ({error}). "
                "Download or copy the file again."
            ) from None
    if not arrays:
        raise UsageError(f"{path}: the .npz archive holds no arrays.")
    return arrays


def _check_members(f, path: str) -> None:
    """Refuses, before any array is read, members that inflate past the
    bound of every model reader (`untrusted.check_archive`), a member that
    is not an .npy array or whose header declares other bytes than the
    member holds (a huge shape over a few bytes), pickled object arrays
    and arrays that are not real numbers (complex, void, strings)."""
    size = f.seek(0, io.SEEK_END)
    f.seek(0)
    with zipfile.ZipFile(f) as archive:
        # Every member's declared size, from the directory, before any is
        # inflated: all together within the bound of every model reader.
        untrusted.check_archive(archive, path, size, lambda name: True)
        for info in archive.infolist():
            key = info.filename
            if not key.endswith(".npy"):
                raise UsageError(
                    f"{path}: entry {key!r} is not an .npy array; an .npz "
                    "checkpoint holds arrays only."
                )
            with archive.open(info) as member:
                try:
                    version = np.lib.format.read_magic(member)
                    shape, _, dtype = (
                        np.lib.format.read_array_header_1_0(member)
                        if version == (1, 0) else
                        np.lib.format.read_array_header_2_0(member))
                except ValueError as error:
                    raise UsageError(
                        f"{path}: entry {key!r} is not an .npy array "
                        f"({error})."
                    ) from None
                header = member.tell()
            if dtype.hasobject:
                raise UsageError(
                    f"{path}: entry {key[:-4]!r} holds pickled Python "
                    "objects, which are refused (they can run code). A "
                    "checkpoint holds numeric arrays only."
                )
            untrusted.check_real_dtype(dtype, path, key[:-4])
            declared = math.prod(shape) * dtype.itemsize
            if declared != info.file_size - header:
                raise UsageError(
                    f"{path}: entry {key[:-4]!r} declares shape {shape} of "
                    f"{dtype} ({declared} bytes) but holds "
                    f"{info.file_size - header} bytes; the file is corrupt "
                    "or crafted."
                )


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
        head_initialized: bool. The model's head was set to zeros.
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
            lines.append("The head was initialised to zeros.")
        if not self.ok:
            lines.append("Not loaded:\n" + self.problems())
        lines.extend(self.hints)
        return "\n".join(lines)
