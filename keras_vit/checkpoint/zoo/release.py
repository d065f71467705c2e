"""A released checkpoint's file checked against what its name implies,
before it is used (`check_release`): the architecture of its variant, its
head's width and its patch grid (from the arrays' .npy headers, without
reading or inflating the arrays), and its byte size and SHA-256 where the
catalog knows them (`catalog.KNOWN_FILES`). A verified SHA-256 is
remembered beside the file, so that a cached file is hashed once.
"""

from __future__ import annotations

import os
import zipfile
from typing import Dict, Optional, Tuple

import numpy as np

from keras_vit.checkpoint.formats.npz import POSEMB
from keras_vit.checkpoint.formats.npz_layout import describe_arrays
from keras_vit.checkpoint.zoo import catalog
from keras_vit.errors import UsageError, one_line
from keras_vit.storage import atomic
from keras_vit.storage.atomic import atomic_write


def _npz_shapes(path: str) -> Dict[str, Tuple[int, ...]]:
    """{key: shape} of an .npz from its members' .npy headers (nothing
    else is read or inflated)."""
    shapes = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                if not member.endswith(".npy"):
                    continue
                with archive.open(member) as f:
                    version = np.lib.format.read_magic(f)
                    read = (np.lib.format.read_array_header_1_0
                            if version == (1, 0)
                            else np.lib.format.read_array_header_2_0)
                    shapes[member[: -len(".npy")]] = tuple(read(f)[0])
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as error:
        raise UsageError(
            f"{path} is not a readable .npz archive ({one_line(error)})."
        ) from None
    return shapes


def _sha256(path: str) -> str:  # the tests count the hashing
    return atomic.sha256(path)


def _stamp(path: str) -> str:
    stat = os.stat(path)
    return f"{stat.st_size} {stat.st_mtime_ns}"


def check_release(path: str, info: catalog.ModelInfo,
                  cached: Optional[str] = None) -> None:
    """Refuses a file that is not the release `info` names: another size
    or SHA-256 than `info` records, or arrays of another architecture,
    head width or patch grid than `catalog.expected_architecture(info)`.
    A verified SHA-256 is remembered beside the file (`<file>.sha256`,
    with its size and modification time), so that it is hashed once.

    Args:
        path: str. The file to check.
        info: catalog.ModelInfo. The release it is taken for.
        cached: str or None. Where the cache keeps it, when `path` is that
            copy (the error then says to delete it).

    Raises:
        UsageError: naming the file, the release and what differs.
    """
    where = (f"the cached file {cached}" if cached
             else f"the download of {info.url}")
    fix = (f"Delete {cached} to download {info.name} again, or put the "
           "released file there." if cached else
           f"Check the mirror ({catalog.BASE_URL_ENV}); nothing was "
           "cached.")

    def refuse(what: str) -> UsageError:
        return UsageError(f"{where} is not the released {info.name} "
                          f"({info.variant}): {what}. {fix}")

    actual = os.path.getsize(path)
    if info.size is not None and actual != info.size:
        raise refuse(f"{actual} bytes where the release has {info.size}")
    if info.sha256 is not None:
        stamp_file = path + ".sha256"
        stamp = f"{info.sha256} {_stamp(path)}"
        seen = None
        if os.path.isfile(stamp_file):
            with open(stamp_file, encoding="utf-8") as f:
                seen = f.read().strip()
        if seen != stamp:
            digest = _sha256(path)
            if digest != info.sha256:
                raise refuse(f"SHA-256 {digest} where the release has "
                             f"{info.sha256}")
            if cached:
                atomic_write(stamp_file, stamp + "\n")
    shapes = _npz_shapes(path)
    found = describe_arrays(shapes)
    want = catalog.expected_architecture(info)
    grid = want.pop("grid")
    if want["num_classes"] is None:
        want.pop("num_classes")
    wrong = {k: (found[k], v) for k, v in want.items() if found[k] != v}
    table = shapes.get(POSEMB)
    if table is not None and len(table) == 3 and not wrong:
        tokens = table[1] - (1 if found["pooling"] == "token" else 0)
        if tokens != grid * grid:
            wrong["position grid"] = (f"{tokens} patches",
                                      f"{grid} x {grid}")
    if wrong:
        raise refuse(
            f"it holds {found['variant'] or 'a model of other sizes'} "
            f"({', '.join(f'{k} {f}' for k, (f, _) in wrong.items())}) "
            f"where {info.name} has "
            f"{', '.join(f'{k} {v}' for k, (_, v) in wrong.items())}"
        )
