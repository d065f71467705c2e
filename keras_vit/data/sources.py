"""The data sources a config can name, and what is known about them.

- "digits": the 1,797 real 8 x 8 handwritten digits that scikit-learn ships
  (no download). Fixed split: a stratified shuffle with seed 0 puts 1,437
  images in "train" and 360 in "test".
- Any TFDS dataset by name (`data_dir` may be a gs:// path), with TFDS split
  strings ("train[:98%]").
- "folder": an image folder `data_dir/<split>/<class>/*.jpg|jpeg|png|gif|bmp`
  (the layout of `tfds.folder_dataset.ImageFolder`; class ids are the sorted
  class folder names of all splits). Splits take "train[:90%]" /
  "train[90%:]" / "train[:800]" slices.
- A VTAB-1k task (`config.input.vtab_task`): its TFDS builder, split and label
  function from `keras_vit.data.vtab`.

This module answers "which examples and classes are there"; `pipeline`
turns them into batches and `checks` validates them, both on top of it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from keras_vit.data import vtab
from keras_vit.errors import UsageError, shorten

DIGITS = "digits"
FOLDER = "folder"
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp")
@dataclasses.dataclass
class DatasetInfo:
    """What the trainer needs to know about a data source."""

    num_classes: int
    num_examples: dict  # split -> count (where known)
    class_names: Optional[List[str]] = None


# ----------------------------------------------------------------- digits
@functools.lru_cache(maxsize=1)
def _digits_arrays():
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    # 0..16 grey levels -> uint8 0..255.
    images = np.round(digits.images * (255.0 / 16.0)).astype(np.uint8)
    labels = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=360, random_state=0, stratify=labels
    )
    return {"train": (x_train, y_train), "test": (x_test, y_test)}


def digits_split(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 8, 8), labels int32 (N,)) of "train" or "test",
    slices ("train[:80%]") included."""
    name, bounds = _parse_split(split)
    arrays = _digits_arrays()
    if name not in arrays:
        raise UsageError(
            f"The digits data has splits 'train' and 'test', got {split!r}."
        )
    x, y = arrays[name]
    start, stop = _slice(bounds, len(y), split)
    return x[start:stop], y[start:stop]


def examples_per_class(labels: np.ndarray, count: int,
                       seed: int) -> np.ndarray:
    """Sorted indices of `count` random examples of each class of `labels`
    (all of a class that has fewer), drawn with `seed`: the same draw for
    the same labels and seed, whatever the model or run."""
    if int(count) < 0:
        raise UsageError(
            f"train_examples_per_class must be >= 0 (0: all), got {count}."
        )
    labels = np.asarray(labels)
    rng = np.random.default_rng(int(seed))
    keep = [
        rng.choice(pool, min(int(count), len(pool)), replace=False)
        for pool in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(keep))


# ----------------------------------------------------------- image folder
_SPLIT_RE = re.compile(r"^([^\[\]]+)(?:\[(-?\d*%?):(-?\d*%?)\])?$")


def _parse_split(split: str):
    match = _SPLIT_RE.match(str(split).strip())
    if not match:
        raise UsageError(
            f"Cannot read split {split!r}: use a name, optionally sliced as "
            "'train[:90%]', 'train[90%:]' or 'train[100:200]'."
        )
    return match.group(1), (match.group(2) or "", match.group(3) or "")


def _slice(bounds, n: int, split: str) -> Tuple[int, int]:
    def index(text: str, default: int) -> int:
        if not text:
            return default
        value = (
            round(n * int(text[:-1]) / 100) if text.endswith("%")
            else int(text)
        )
        return min(max(value + n if value < 0 else value, 0), n)

    start, stop = index(bounds[0], 0), index(bounds[1], n)
    if stop <= start:
        raise UsageError(f"Split {split!r} selects no examples (of {n}).")
    return start, stop


def list_class_folders(
    root: str, per_level: Optional[bool] = None
) -> Dict[str, Dict[str, List[str]]]:
    """{split: {class: sorted image file names}} of `root`/<split>/<class>/.

    Two ways, the same result (tests/test_folder_listing.py):
    `per_level` (the default for gs:// and other remote file systems):
    one glob per level, two calls in all however many folders there are;
    otherwise (the default for local folders) a listing of every folder
    and a check of every entry. On gs:// every call is at least one
    request: ImageNet-21k's 21,841 class folders cost some 44,000 folder
    by folder, against two paged listings of its 14.2 million objects
    (1,000 a page: about 28,400 requests); on a local disk the per-folder
    listing is the faster (benchmarks/folder_listing.py,
    docs/performance.md).
    """
    if per_level is None:
        per_level = "://" in root
    if not per_level:
        return _per_folder(root)
    images: Dict[str, List[str]] = {}
    for path in tf.io.gfile.glob(os.path.join(root, "*", "*", "*")):
        folder, name = os.path.split(path.rstrip("/"))
        if name.lower().endswith(IMAGE_EXTENSIONS):
            images.setdefault(folder, []).append(name)
    tree: Dict[str, Dict[str, List[str]]] = {}
    for path in tf.io.gfile.glob(os.path.join(root, "*", "*")):
        path = path.rstrip("/")
        # A folder holds images, or is one without any (a file beside the
        # class folders is neither).
        if path not in images and not tf.io.gfile.isdir(path):
            continue
        split_dir, name = os.path.split(path)
        tree.setdefault(os.path.basename(split_dir), {})[name] = sorted(
            images.get(path, [])
        )
    return tree


def _per_folder(root: str) -> Dict[str, Dict[str, List[str]]]:
    def subdirs(path):
        return sorted(
            d.rstrip("/") for d in tf.io.gfile.listdir(path)
            if tf.io.gfile.isdir(os.path.join(path, d))
        )

    tree: Dict[str, Dict[str, List[str]]] = {}
    for split in subdirs(root):
        for name in subdirs(os.path.join(root, split)):
            tree.setdefault(split, {})[name] = sorted(
                f for f in tf.io.gfile.listdir(os.path.join(root, split, name))
                if f.lower().endswith(IMAGE_EXTENSIONS)
            )
    return tree


@functools.lru_cache(maxsize=8)
def _folder_index(root: str):
    """{split: (paths, labels)}, class names; labels index the sorted class
    folder names over all splits. Files are listed once per process."""
    if not root:
        raise UsageError(
            "dataset='folder' needs data_dir: the folder that holds "
            "<split>/<class>/*.jpg|png."
        )
    if not tf.io.gfile.isdir(root):
        raise UsageError(
            f"Image folder {root!r} does not exist: set "
            "config.input.data_dir to the folder holding <split>/<class>/."
        )

    files: Dict[str, List[Tuple[str, str]]] = {}
    for split, classes in sorted(list_class_folders(root).items()):
        for name, images in sorted(classes.items()):
            folder = os.path.join(root, split, name)
            # An empty class folder would silently drop (or never train)
            # its class; hidden ones (.ipynb_checkpoints) are not classes.
            if not images and not name.startswith("."):
                raise UsageError(
                    f"Class folder {folder} has no images "
                    f"({', '.join(IMAGE_EXTENSIONS)}; other files are "
                    "ignored): add images or remove the folder."
                )
            files.setdefault(split, []).extend(
                (os.path.join(folder, f), name) for f in images
            )
    names = sorted({name for pairs in files.values() for _, name in pairs})
    if not names:
        raise UsageError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found under "
            f"{root}/<split>/<class>/."
        )
    ids = {n: i for i, n in enumerate(names)}
    index = {}
    for split, pairs in files.items():
        # A fixed order that mixes the classes, so that slices such as
        # train[:90%] hold every class.
        order = np.random.default_rng(0).permutation(len(pairs))
        index[split] = (
            [pairs[i][0] for i in order],
            np.array([ids[pairs[i][1]] for i in order], np.int32),
        )
    return index, names


def folder_split(root: str, split: str) -> Tuple[List[str], np.ndarray]:
    """(file paths, labels) of a (sliced) split of an image folder."""
    index, _ = _folder_index(root)
    name, bounds = _parse_split(split)
    if name not in index:
        raise UsageError(
            f"Image folder {root} has no split {name!r} with images; it has "
            f"{shorten(', '.join(sorted(index)), 120)}."
        )
    paths, labels = index[name]
    start, stop = _slice(bounds, len(paths), split)
    return paths[start:stop], labels[start:stop]


# ----------------------------------------------------------- dataset info
def dataset_info(inp) -> DatasetInfo:
    """Number of classes, split sizes and class names of the data source
    of a run's `config.input` section."""
    if inp.vtab_task:
        return _vtab_info(inp.vtab_task, inp.data_dir)
    name = inp.dataset
    if name == DIGITS:
        arrays = _digits_arrays()
        return DatasetInfo(
            num_classes=10,
            num_examples={k: len(v[1]) for k, v in arrays.items()},
            class_names=[str(i) for i in range(10)],
        )
    if name == FOLDER:
        index, names = _folder_index(inp.data_dir)
        return DatasetInfo(
            num_classes=len(names),
            num_examples={k: len(v[0]) for k, v in index.items()},
            class_names=list(names),
        )
    builder = tfds_builder(inp)
    label = builder.info.features[inp.label_key]
    num_examples = {
        k: int(v.num_examples) for k, v in (builder.info.splits or {}).items()
    }
    names = list(label.names) if hasattr(label, "names") else None
    return DatasetInfo(
        num_classes=int(label.num_classes),
        num_examples=num_examples,
        class_names=names,
    )


def tfds_builder(inp):
    import tensorflow_datasets as tfds

    if inp.vtab_task:
        return vtab.get_task(inp.vtab_task).builder(inp.data_dir)
    try:
        return tfds.builder(inp.dataset, data_dir=inp.data_dir)
    except tfds.core.registered.DatasetNotFoundError as e:
        raise UsageError(
            f"Unknown dataset {inp.dataset!r}: use 'digits', 'folder' or a "
            f"TFDS name (see tfds.list_builders()). ({e})"
        ) from None


def tfds_split_size(builder, split) -> Optional[int]:
    try:
        return int(builder.info.splits[split].num_examples)
    except (KeyError, ValueError, TypeError, AssertionError):
        return None  # not prepared (e.g. mock data) or an unusual split


def num_split_examples(inp, split: str) -> Optional[int]:
    """Examples in `split` (slices such as "train[:800]" included)."""
    if inp.dataset == DIGITS and not inp.vtab_task:
        return len(digits_split(split)[1])
    if inp.dataset == FOLDER and not inp.vtab_task:
        return len(folder_split(inp.data_dir, split)[0])
    return tfds_split_size(tfds_builder(inp), split)


def _vtab_info(name: str, data_dir: Optional[str]) -> DatasetInfo:
    """A VTAB task's class count (its label function's, not the TFDS
    feature's), split sizes and class names."""
    task = vtab.get_task(name)
    builder = task.builder(data_dir)
    num_examples = {
        k: int(v.num_examples) for k, v in (builder.info.splits or {}).items()
    }
    names = task.class_names
    key = getattr(task.label, "feature", None)
    if names is None and key in builder.info.features:
        names = getattr(builder.info.features[key], "names", None)
    return DatasetInfo(
        num_classes=task.num_classes,
        num_examples=num_examples,
        class_names=list(names) if names else None,
    )
