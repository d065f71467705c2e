"""Keras's HDF5 weights read as untrusted input: a keras-hub preset's
`.weights.h5` files and the weights member of a `.keras` file.

Keras writes a model's weights as `layers/<attribute path>/vars/<i>`, a
compiled model's optimizer state under `optimizer/`. Each dataset of a
model's weights is checked as Keras's loader checks it (a plain dataset:
no soft or external link, no external or virtual storage) and further: a
real dtype, and a floating-point one where the model's weight is
(`check_dataset`, `check_all_placed`). Keras's loader
reads the datasets its model's config places and ignores the others, so a
`.keras` file whose config and weights disagree (a block fewer, learned
position embeddings replaced by fixed ones) loads without a word: a
`.keras` file's datasets are listed before Keras loads it
(`keras_file_datasets`) and each must find its variable in the model
loaded (`check_all_placed`).
"""

from __future__ import annotations

import collections
import zipfile
from typing import List, Tuple

import h5py

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.npz import open_for_reading
from keras_vit.errors import UsageError, one_line

Shape = Tuple[int, ...]
OPTIMIZER = "optimizer/"
# What h5py raises on a damaged file (its C library's errors).
H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError,
             SystemError)
_MEMBER = "model.weights.h5"


def dataset_names(f: h5py.File, path: str) -> List[str]:
    """The datasets of a model's weights in `f`, an optimizer's state
    aside; a link anywhere is refused."""
    links = []
    f.visititems_links(lambda name, link: links.append((name, link)))
    names = []
    for name, link in links:
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            raise UsageError(f"{path}: {name} is a link; a weights file "
                             "holds arrays only (Keras refuses it too).")
        kind = f.get(name, getclass=True)
        if not name.startswith(OPTIMIZER) and kind is h5py.Dataset:
            names.append(name)
    return names


def is_bfloat16(dataset) -> bool:
    """Whether Keras marked the dataset bfloat16 (it stores those as
    2-byte numbers with a `dtype` attribute)."""
    marked = dataset.attrs.get("dtype")
    return isinstance(marked, (str, bytes)) and marked in (
        "bfloat16", b"bfloat16")


def check_dataset(dataset, path: str, name: str,
                  integers: bool = False) -> None:
    """Refuses a dataset kept outside the file, an axis of no length, and
    a dtype that is no real number's, or (unless `integers`) no
    floating-point parameter's."""
    if dataset.external or dataset.is_virtual:
        raise UsageError(f"{path}: {name} keeps its numbers outside the "
                         "file; refused (Keras refuses it too).")
    untrusted.check_shape(dataset.shape, path, name)
    if is_bfloat16(dataset):
        if dataset.dtype.kind != "V" or dataset.dtype.itemsize != 2:
            raise UsageError(f"{path}: {name} is marked bfloat16 but is "
                             f"stored as {dataset.dtype}, not as the 2-byte "
                             "values Keras writes.")
    else:
        untrusted.check_real_dtype(dataset.dtype, path, name)
        if not integers:
            untrusted.check_float_parameter(dataset.dtype, path, name)


def _integer(dtype) -> bool:
    """Whether a dtype (NumPy's, or a Keras variable's name of one) holds
    integers or booleans."""
    return str(dtype).startswith(("int", "uint", "bool"))


def keras_file_datasets(path: str) -> List[Tuple[str, Shape, bool]]:
    """(name, shape, whether of integers) of each dataset of the model's
    weights in `.keras` file `path`, each checked (`check_dataset`; a
    model Keras quantized keeps integer weights of its own), read from
    the archive as Keras reads it (h5py over the zip member); none where
    the file keeps its weights otherwise."""
    try:
        with open_for_reading(path) as raw, zipfile.ZipFile(raw) as archive:
            if _MEMBER not in archive.namelist():
                return []
            with archive.open(_MEMBER) as member, \
                    h5py.File(member, "r") as f:
                found = []
                for name in dataset_names(f, path):
                    check_dataset(f[name], path, name, integers=True)
                    found.append((name, tuple(f[name].shape),
                                  _integer(f[name].dtype)))
                return found
    except UsageError:
        raise
    except H5_ERRORS + (zipfile.BadZipFile, EOFError) as error:
        raise UsageError(
            f"{path}: its {_MEMBER} is not a readable HDF5 weights file "
            f"({one_line(error)[:200]}). Save or copy the file again."
        ) from None


def check_all_placed(model, stored: List[Tuple[str, Shape, bool]],
                     path: str) -> None:
    """Refuses a `.keras` file holding an array that no weight of `model`
    (the model its config describes) takes: each stored dataset must be
    matched by a weight of its shape, of integers where it is (Keras
    casts one into a float weight without a word), as many as there
    are."""
    wanted = collections.Counter(
        (tuple(w.shape), _integer(w.dtype)) for w in model.weights)
    for name, shape, integers in stored:
        if wanted[shape, integers] > 0:
            wanted[shape, integers] -= 1
            continue
        if integers and wanted[shape, False] > 0:
            raise UsageError(
                f"{path}: {name} holds integers, where the model's weight "
                "of its shape is a floating-point number: the weights were "
                "cast or altered. Use the file as it was saved.")
        raise UsageError(
            f"{path}: its weights hold {name} {shape}, which no weight of "
            "the model its config.json describes takes (Keras would leave "
            "it out without a word): the config and the weights disagree; "
            "the file is corrupt or crafted. Save the model again "
            "(model.save).")
