"""Small, bounded readers for the parts of a downloaded model that are not
arrays: JSON files (config.json, preprocessor_config.json,
model.safetensors.index.json), the file names they give, the members of
the zip archives a model comes in (`.keras`, `.npz`, `pytorch_model.bin`)
and the dtypes of its arrays.

- `read_json_object`: at most `MAX_JSON_BYTES`, lists and objects nested
  at most `MAX_JSON_NESTING` deep (Python's parser itself stops at the
  recursion limit), a JSON object at the top; anything else is one
  `UsageError` naming the file and the reason.
- `inside_folder`: the path a file name of such a JSON file (a shard of an
  index) refers to, refused unless it stays inside the model's folder:
  no absolute path, no `..`, and no symbolic link out of the folder. The
  one exception is the layout of the Hugging Face cache, whose snapshot
  files are links into the repository's own `blobs/`
  (`models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH`).
  `in_folder` applies the same rule to every file a loader opens in a
  model's folder (config.json, the weights, preprocessor_config.json).
- `check_archive`: a zip's members, from its directory, before any is
  inflated: only the names the reader expects, each JSON member at most
  `MAX_JSON_BYTES`, and all of them together at most `memory_bound` of
  the file's size (`MAX_EXTRA_BYTES` plus twice the file's bytes: the
  bound every reader of a model file keeps to).
- `check_float_parameter`: a parameter's array is of floats;
- `check_real_dtype`: arrays of real numbers only (bfloat16 included; no
  complex, void, string, date or object arrays).
- `check_shape`: no array with an axis of negative length (an .npy header
  may declare two, whose product is a positive size) or of length zero.
  An empty array holds no bytes, so a header may give it any other axis:
  the one shape that a file's size does not bound (`(0, 2**40)`), and a
  model's widths are read from the shapes before any array is.
"""

from __future__ import annotations

import json
import os
import re
import sys
import zipfile
from typing import Any, Callable, Dict, Optional

import numpy as np

from keras_vit.errors import UsageError

# A config.json with 21,843 class names is ~0.6 MB.
MAX_JSON_BYTES = 32 << 20
MAX_JSON_NESTING = 32
# What reading one model file may take beyond twice the file's bytes: the
# inflated members of an archive, and the arrays made from a torch file.
MAX_EXTRA_BYTES = 64 << 20
# Members of one archive: a ViT's .npz has ~200, a torch.save file one per
# storage (~200), a .keras file three.
MAX_MEMBERS = 1 << 16

_SNAPSHOT = re.compile(r"^(?P<repo>.*[\\/]models--[^\\/]+)[\\/]snapshots"
                       r"[\\/][^\\/]+$")


def _nesting(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value (without
    recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_NESTING:
                todo.extend((child, depth + 1) for child in item)
    return deepest


def read_json_object(path: str) -> Dict[str, Any]:
    """The JSON object in `path`, bounded (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        UsageError: too large, nested too deep, not JSON, not UTF-8, or
            not an object at the top.
    """
    with open(path, "rb") as f:
        raw = f.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise UsageError(f"{path} is larger than {MAX_JSON_BYTES} bytes; "
                         "not a model's JSON file.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(f"{path} is not UTF-8 text: {error}.") from None
    try:
        value = json.loads(text)
    except RecursionError:  # json's parser stops at Python's limit
        value = None
        depth = sys.getrecursionlimit()
    except ValueError as error:
        raise UsageError(f"{path} is not valid JSON: {error}") from None
    else:
        depth = _nesting(value)
    if depth > MAX_JSON_NESTING:
        raise UsageError(f"{path} nests lists or objects more than "
                         f"{MAX_JSON_NESTING} deep; not a model's JSON "
                         "file.")
    if not isinstance(value, dict):
        raise UsageError(f"{path} holds a JSON {type(value).__name__}, not "
                         "an object of named fields.")
    return value


def inside_folder(folder: str, name: Any, what: str) -> str:
    """The path of file `name` (as a JSON file in `folder` gives it),
    refused unless it stays inside `folder` (see the module docstring).

    Raises:
        UsageError: `name` is no relative file name inside the folder, or
            a link out of it.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        raise UsageError(f"{what} names {name!r}, not a file name.")
    parts = re.split(r"[\\/]", name)
    if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts \
            or re.match(r"^[A-Za-z]:", name):
        raise UsageError(
            f"{what} names {name!r}, outside the model's folder {folder}; "
            "a model's files must lie in its own folder."
        )
    return _kept_inside(folder, os.path.join(folder, *parts),
                        f"{what} names {name!r}, a link to", "")


def in_folder(folder: str, name: str, what: str) -> str:
    """The path of file `name` of a model's `folder`, refused (one line
    naming `what`) when it is a link that leads out of the folder (the
    Hugging Face cache's snapshot links into the repository's own
    `blobs/` excepted, as for `inside_folder`)."""
    return _kept_inside(folder, os.path.join(folder, name),
                        f"{what} is a link to",
                        " (copy the file in if you mean it)")


def _kept_inside(folder: str, path: str, said: str, advice: str) -> str:
    """`path`, refused (`said`, where it leads, `advice`) when it resolves
    outside `folder` and the cache roots that `_roots` allows."""
    real = os.path.realpath(path)
    if not any(os.path.commonpath([real, root]) == root
               for root in _roots(folder)):
        raise UsageError(
            f"{said} {real}, outside the model's folder {folder}; a model's "
            f"files must lie in its own folder{advice}."
        )
    return path


def _roots(folder: str):
    """Where the files of `folder` may resolve: the folder itself and, in
    the Hugging Face cache, its repository's own blobs/ (a snapshot folder
    that is itself a link out of its repository's snapshots/ is
    refused)."""
    roots = [os.path.realpath(folder)]
    snapshot = _SNAPSHOT.match(os.path.abspath(folder))
    if snapshot:  # the Hugging Face cache: snapshot files link to blobs/
        repo = snapshot.group("repo")
        snapshots = os.path.realpath(os.path.join(repo, "snapshots"))
        if os.path.dirname(roots[0]) != snapshots:
            raise UsageError(
                f"{folder} is a link to {roots[0]}, not a snapshot of its "
                f"repository's cache {repo}; a model's files must lie in "
                "its own folder."
            )
        roots.append(os.path.realpath(os.path.join(repo, "blobs")))
    return roots


def check_snapshot(folder: str, repo_cache: str, what: str) -> str:
    """`folder`, the snapshot that the Hugging Face cache resolved for
    `what` (a revision, through refs/), refused unless it is one folder of
    `repo_cache`/snapshots/ (a ref holding '..' or a path walks out of
    it)."""
    snapshots = os.path.realpath(os.path.join(repo_cache, "snapshots"))
    real = os.path.realpath(folder)
    if (os.path.dirname(real) != snapshots
            or os.path.dirname(os.path.abspath(folder)) != os.path.abspath(
                os.path.join(repo_cache, "snapshots"))):
        raise UsageError(
            f"{what}: the Hugging Face cache resolves it to {real}, not a "
            f"snapshot of {os.path.join(repo_cache, 'snapshots')} (its refs/"
            " file names a path outside); refused. Delete the cache entry "
            "and download it again."
        )
    return folder


def memory_bound(file_bytes: int) -> int:
    """The bytes reading a model file of `file_bytes` may make:
    MAX_EXTRA_BYTES plus twice the file's size."""
    return MAX_EXTRA_BYTES + 2 * int(file_bytes)


def check_archive(archive: zipfile.ZipFile, path: str, file_bytes: int,
                  expected: Callable[[str], bool],
                  json_members=()) -> None:
    """Refuses, from the zip's directory and before any member is
    inflated, an archive with a member the reader has no place for
    (`expected(name)` false), a JSON member (`json_members`) over
    MAX_JSON_BYTES, or members that inflate past `memory_bound` of the
    file's size in all. One UsageError line naming `path`."""
    infos = archive.infolist()
    if len(infos) > MAX_MEMBERS:
        raise UsageError(f"{path} holds {len(infos)} archive members, more "
                         f"than the {MAX_MEMBERS} a model file has.")
    total = 0
    for info in infos:
        name = info.filename
        if not expected(name):
            raise UsageError(
                f"{path}: archive member {name!r} is nothing this model "
                "file holds; refused before it is inflated."
            )
        if name in json_members and info.file_size > MAX_JSON_BYTES:
            raise UsageError(
                f"{path}: {name} declares {info.file_size} bytes, more "
                f"than the {MAX_JSON_BYTES} a model's JSON file may hold."
            )
        total += info.file_size
    bound = memory_bound(file_bytes)
    if total > bound:
        raise UsageError(
            f"{path}: its members inflate to {total} bytes, more than "
            f"{bound} (64 MiB plus twice the file's {file_bytes} bytes); "
            "refused before inflating (a zip bomb, or not a model file)."
        )


def _bfloat16():
    """ml_dtypes' bfloat16 (the dtype the `safetensors` package gives a
    BF16 array), or None where ml_dtypes is not loaded: an array of that
    dtype exists only once ml_dtypes is (TensorFlow and safetensors
    load it), so it is looked up, never imported here."""
    ml_dtypes = sys.modules.get("ml_dtypes")
    return None if ml_dtypes is None else np.dtype(ml_dtypes.bfloat16)


def npy_bfloat16(dtype) -> Optional[np.dtype]:
    """ml_dtypes' bfloat16 where `dtype`, read from an .npy header, is a
    plain 2-byte void: NumPy writes a bfloat16 array's dtype so ('|V2'),
    and big_vision and timm read such arrays back as bfloat16. None for
    any other dtype (or where ml_dtypes is not loaded)."""
    dtype = np.dtype(dtype)
    if (dtype.kind == "V" and dtype.itemsize == 2 and dtype.names is None
            and dtype.subdtype is None):
        return _bfloat16()
    return None


def check_real_dtype(dtype, path: str, key: str) -> None:
    """Refuses an array whose dtype is not a real number (bool, integer
    or floating point, bfloat16 included: ml_dtypes' bfloat16 has numpy
    kind 'V', and its float32 is the same number): complex, void (raw
    bytes), strings, dates and objects have no place in a checkpoint."""
    dtype, bfloat16 = np.dtype(dtype), _bfloat16()
    if dtype.kind not in "biuf" and (bfloat16 is None or dtype != bfloat16):
        raise UsageError(
            f"{path}: array {key!r} has dtype {dtype.str} ({dtype}), not a "
            "real number; a checkpoint holds real numeric arrays only."
        )


def check_float_parameter(dtype, path: str, key: str) -> None:
    """Refuses a model parameter's array of integers or booleans: a
    parameter is a float, so the file's weights were cast or altered (a
    cast back would predict nonsense without a word)."""
    if np.dtype(dtype).kind in "biu":
        raise UsageError(
            f"{path}: {key} has dtype {np.dtype(dtype)}, where a model "
            "parameter is a floating-point number: the weights were cast or "
            "altered. Use the checkpoint as it was saved.")


def check_shape(shape, path: str, key: str) -> None:
    """Refuses an array with an axis of negative length (numpy's .npy
    header parser takes one, and an even count of them multiplies to a
    positive size) or of length zero (`shape`): no model parameter is
    empty, and the other axes of an empty array are bounded by nothing (a
    model built from them would not fit in memory)."""
    if any(int(n) < 0 for n in shape):
        raise UsageError(
            f"{path}: array {key!r} declares shape {tuple(shape)}, with an "
            "axis of negative length; no array has one (the file is "
            "corrupt or crafted)."
        )
    if any(int(n) == 0 for n in shape):
        raise UsageError(
            f"{path}: array {key!r} declares shape {tuple(shape)}, which "
            "holds no numbers; no parameter of a model is empty (the file "
            "is corrupt or crafted)."
        )
