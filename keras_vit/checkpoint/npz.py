"""Reading, writing and describing official .npz arrays (NumPy only).

The model-independent half of `keras_vit.checkpoint.weights`: safe reading
of .npz files (`read_npz`: no pickles, clear errors for truncated or
foreign files), atomic writing (`write_npz`, through
`keras_vit.checkpoint.atomic`), conversion of training (`opt/target/`) and
big_vision layouts to the official one (`normalize_layout`), the
architecture a file's shapes imply (`describe_arrays`, and
`architecture_hint` for "wrong variant" errors) and the load report
(`LoadReport`). Position-embedding resizing is in
`keras_vit.checkpoint.posemb`. TensorFlow is imported only for remote
(gs://) paths.
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
import re
import zipfile
import zlib
from typing import Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from keras_vit import architecture
from keras_vit.checkpoint.atomic import atomic_write, is_remote
from keras_vit.errors import UsageError

Arrays = Dict[str, np.ndarray]
Grid = Tuple[int, int]
PathLike = Union[str, os.PathLike]
Shape = Tuple[int, ...]

POSEMB = "Transformer/posembed_input/pos_embedding"
_ZIP_MAGIC = b"PK"
_NPY_MAGIC = b"\x93NUMPY"


def _open_for_reading(path: str):
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
    with _open_for_reading(path) as f:
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
    """Refuses, before any array is read, a member that is not an .npy
    array or whose header declares other bytes than the member holds (a
    huge shape over a few bytes), and pickled object arrays."""
    with zipfile.ZipFile(f) as archive:
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


# ----------------------------------------------------------------- layouts


_BV_RENAMES = (
    ("MultiHeadDotProductAttention_0/", "MultiHeadDotProductAttention_1/"),
    ("LayerNorm_1/", "LayerNorm_2/"),
    ("MlpBlock_0/", "MlpBlock_3/"),
)


def normalize_layout(
    arrays: Arrays, source: str = "<arrays>"
) -> Tuple[Arrays, str, list]:
    """Converts training and big_vision layouts to the official one.

    Returns:
        (arrays, layout name, ignored) where ignored lists
        (key, shape, reason) of arrays left out (optimizer state).
    """
    ignored = []
    if any(k.startswith("opt/target/") for k in arrays):
        out = {}
        for key, value in arrays.items():
            if key.startswith("opt/target/"):
                out[key[len("opt/target/"):]] = value
            else:
                ignored.append((key, value.shape, "optimizer state"))
        return out, "official, opt/target/ prefix", ignored
    keys = list(arrays)
    big_vision = (
        all(k.startswith("params/") for k in keys)
        or "pos_embedding" in arrays
        or any(
            k.startswith("Transformer/encoderblock/")
            or "MultiHeadDotProductAttention_0/" in k
            for k in keys
        )
    )
    if not big_vision:
        return dict(arrays), "official", ignored
    out = {}
    for key, value in arrays.items():
        if key.startswith("params/"):
            key = key[len("params/"):]
        out[key] = value
    if all(k.startswith("img/") for k in out):
        out = {k[len("img/"):]: v for k, v in out.items()}
    if any(k.startswith("MAPHead_0/") for k in out):
        raise UsageError(
            f"{source}: a big_vision checkpoint with a MAP head "
            "(pool_type='map'), which keras_vit does not implement; use a "
            "checkpoint trained with 'tok' or 'gap' pooling."
        )
    converted: Arrays = {}
    for key, value in out.items():
        if key.startswith("Transformer/encoderblock/"):  # scan: stacked
            rest = key[len("Transformer/encoderblock/"):]
            for i in range(value.shape[0]):
                converted[f"Transformer/encoderblock_{i}/{rest}"] = value[i]
        else:
            converted[key] = value
    renamed: Arrays = {}
    for key, value in converted.items():
        if key.startswith("Transformer/encoderblock_"):
            for old, new in _BV_RENAMES:
                key = key.replace(old, new)
        renamed[key] = value
    if "pos_embedding" in renamed:
        posemb = renamed.pop("pos_embedding")
        n = posemb.shape[1]
        # big_vision adds the position embedding before prepending the class
        # token, so the token gets none: a zero slot is equivalent.
        if "cls" in renamed and math.isqrt(n) ** 2 == n:
            zero = np.zeros_like(posemb[:, :1])
            posemb = np.concatenate([zero, posemb], axis=1)
        renamed[POSEMB] = posemb
    return renamed, "big_vision", ignored


def resnet_stages(keys) -> Tuple[int, ...]:
    """Units per ResNet stage, from `block{s}/unit{u}/` key names."""
    counts: Dict[int, int] = {}
    for key in keys:
        match = re.match(r"block(\d+)/unit(\d+)/", key)
        if match:
            stage, unit = int(match.group(1)), int(match.group(2))
            counts[stage] = max(counts.get(stage, 0), unit)
    return tuple(counts[s] for s in sorted(counts))


def describe_arrays(shapes: Dict[str, Shape]) -> Dict[str, object]:
    """The architecture implied by official keys and shapes.

    Args:
        shapes: dict of str to shape. Official key -> array shape.

    Returns:
        dict with hidden_size, patch_size, num_layers, num_heads, mlp_dim,
        resnet_layers, pooling, posemb, representation_size, num_classes
        and variant (a name from `keras_vit.VARIANTS`, or None).
    """
    def dim(key, axis):
        try:
            return int(shapes[key][axis])
        except (KeyError, IndexError):
            return None

    blocks = {
        k.split("/")[1]
        for k in shapes
        if k.startswith("Transformer/encoderblock_")
    }
    stages = resnet_stages(shapes)
    att = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
    info = dict(
        hidden_size=dim("embedding/kernel", -1),
        patch_size=dim("embedding/kernel", 0),
        num_layers=len(blocks),
        num_heads=dim(att + "query/kernel", 1),
        mlp_dim=dim(
            "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel", 1
        ),
        # A root block without stages is AugReg's R+Ti/16 stem.
        resnet_layers=stages or (() if "conv_root/kernel" in shapes else None),
        pooling="token" if "cls" in shapes else "gap",
        # No table: fixed sin-cos embeddings (big_vision's posemb).
        posemb="learn" if POSEMB in shapes else "sincos2d",
        representation_size=dim("pre_logits/kernel", 1),
        num_classes=dim("head/kernel", 1),
    )
    info["variant"] = None
    for name in architecture.VARIANTS:
        spec = architecture.decode_variant(name).sizes()
        if all(info[k] == v for k, v in spec.items()):
            info["variant"] = name
    return info


# The Architecture fields that arrays' shapes and names determine.
_ARCH_FIELDS = (
    *architecture.SIZE_FIELDS, "resnet_layers", "pooling", "posemb",
)


def architecture_hint(file_shapes, model_shapes) -> Optional[str]:
    found, wanted = describe_arrays(file_shapes), describe_arrays(model_shapes)
    if all(found[f] == wanted[f] for f in _ARCH_FIELDS):
        return None

    def fmt(info):
        text = ", ".join(f"{f}={info[f]}" for f in _ARCH_FIELDS)
        if info["variant"]:
            text += f" (variant {info['variant']})"
        return text

    fix = (
        f"keras_vit.create_model({found['variant']!r}, "
        f"pooling={found['pooling']!r}, posemb={found['posemb']!r}, ...)"
        if found["variant"]
        else "keras_vit.create_model(None, ...) with the sizes above"
    )
    return (
        "The checkpoint is from another architecture.\n"
        f"  checkpoint: {fmt(found)}\n  model:      {fmt(wanted)}\n"
        f"Build the model with {fix}."
    )
