"""Image folders as data: `data_dir/<split>/<class>/<images>` (the layout
of `tfds.folder_dataset.ImageFolder`; class ids are the sorted class folder
names of all splits; `IMAGE_EXTENSIONS`), or class folders alone,
`data_dir/<class>/*.jpg`, whose splits are "train" and "val" (`VAL_SHARE`
of each class's images, at least one, into "val", chosen by a hash of the
class and file name, `_held_out`: every run and command holds out the same
images; each split is in the order of that hash, so a slice keeps its
images as files come and go); "val|test" names the first split a folder
has (`resolve_split`). `data.sources` describes it as a data source."""

from __future__ import annotations

import collections
import functools
import glob
import hashlib
import os
from typing import Dict, List, Optional, Tuple

import numpy as np
import tensorflow as tf
from absl import logging

from keras_vit.data.image_files import (
    IMAGE_EXTENSIONS,
    check_class_folder,
    extension_of,
    say_not_read,
    unreadable_folder,
)
from keras_vit.data.image_files import is_hidden as _hidden
from keras_vit.data.image_files import is_image as _is_image
from keras_vit.data.splits import parse_split, split_bounds
from keras_vit.errors import UsageError, shorten

# The top folders that make a folder one of splits, <split>/<class>/, even
# where a stray image lies beside their class folders.
SPLIT_NAMES = ("train", "val", "validation", "valid", "test")
# A folder of class folders alone: the share of each class held out as its
# "val" split.
VAL_SHARE = 0.2
FLAT_SPLITS = ("train", "val")


def list_class_folders(
    root: str, per_level: Optional[bool] = None
) -> Dict[str, Dict[str, List[str]]]:
    """{split: {class: sorted image file names}} of `root`/<split>/<class>/.

    Two ways, the same result (tests/test_folder_listing.py): `per_level`
    (the default for gs:// and other remote file systems): one glob per
    level, two calls however many folders there are; otherwise (local) a
    listing of every folder and a check of every entry. On gs:// every
    call is a request or more: ImageNet-21k's 21,841 class folders cost
    some 44,000 folder by folder, against two paged listings of its 14.2
    million objects (1,000 a page: some 28,400 requests); locally the
    per-folder listing is faster (benchmarks/folder_listing.py)."""
    if per_level is None:
        per_level = "://" in root
    if not per_level:
        return _per_folder(root)
    images: Dict[str, List[str]] = {}
    pattern = glob.escape(root)  # ([, *, ? of its own name: no pattern)
    for path in tf.io.gfile.glob(os.path.join(pattern, "*", "*", "*")):
        folder, name = os.path.split(path.rstrip("/"))
        if not path.endswith("/") and not _hidden(
                os.path.relpath(folder, root)):
            images.setdefault(folder, []).extend(_images_of([name]))
    tree: Dict[str, Dict[str, List[str]]] = {}
    for path in tf.io.gfile.glob(os.path.join(pattern, "*", "*")):
        path = path.rstrip("/")
        if _hidden(os.path.relpath(path, root)):
            continue
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
    tree: Dict[str, Dict[str, List[str]]] = {}
    for split in _subdirs(root):
        for name in _subdirs(os.path.join(root, split)):
            folder = os.path.join(root, split, name)
            names = _listdir(folder)
            _nested(folder, names)
            tree.setdefault(split, {})[name] = sorted(_images_of(names))
    return tree


# Files of the folder being listed that are not read, by extension
# (`_images_of`; `folder_index` logs them once), and the folders inside
# class folders, whose images are not read either (`_nested`).
_NOT_READ: collections.Counter = collections.Counter()
_NESTED: List[str] = []


def _nested(folder: str, names) -> None:
    """Notes the sub-folders of class folder `folder` among its entries
    `names` (a name without an extension that is a folder); the other
    names without an extension are files, counted in _NOT_READ."""
    for name in names:
        name = name.rstrip("/")
        if name.startswith(".") or extension_of(name):
            continue
        if tf.io.gfile.isdir(os.path.join(folder, name)):
            _NESTED.append(os.path.join(folder, name))
        else:
            _NOT_READ[""] += 1


def _images_of(names) -> List[str]:
    """The image file names of `names`; the others with an extension
    (.tiff, .heic, .txt: a name without one may be a folder) are counted
    in _NOT_READ."""
    out = []
    for name in names:
        if _is_image(name):
            out.append(name)
        elif not name.startswith(".") and extension_of(name):
            _NOT_READ[extension_of(name)] += 1
    return out


def _listdir(path: str) -> List[str]:
    """The entries of `path`; a name that is not UTF-8 (an old archive's)
    is one line naming the folder, not a decoding error inside TensorFlow."""
    try:
        return tf.io.gfile.listdir(path)
    except tf.errors.PermissionDeniedError:
        raise unreadable_folder(path, "Permission denied") from None
    except UnicodeDecodeError as e:
        raise UsageError(
            f"A file name in {path} is not UTF-8 ({e.object[:e.end]!r}...): "
            "rename the file (e.g. `convmv -f latin1 -t utf8 -r --notest "
            f"{path}`).") from None


def _subdirs(path: str) -> List[str]:
    """The sub-folders of `path` that are not hidden, sorted."""
    return sorted(
        d.rstrip("/") for d in _listdir(path)
        if not d.startswith(".") and tf.io.gfile.isdir(os.path.join(path, d))
    )


def _has_subfolder(path: str) -> bool:
    """Whether `path` holds a folder that is not hidden. Names of images
    are not asked about: a split of class folders costs one question, a
    folder of images none (each is a request on gs://)."""
    return any(not n.startswith(".") and not _is_image(n)
               and tf.io.gfile.isdir(os.path.join(path, n))
               for n in _listdir(path))


def _images(folder: str, name: str, note_nested: bool = True
            ) -> List[Tuple[str, str]]:
    """(path, class `name`) of the images directly in `folder`; with
    `note_nested` (a class folder being listed, not a folder probed for
    the layout: a question per entry, each a request on gs://), its
    sub-folders noted as not read."""
    names = sorted(_listdir(folder))
    if note_nested:
        _nested(folder, names)
    return [(os.path.join(folder, f), name) for f in _images_of(names)]


def _class_folders(root: str, split_dir: str) -> List[Tuple[str, str]]:
    """The images of the class folders in `split_dir`, a folder of `root`
    ("" for root itself)."""
    pairs = []
    for name in _subdirs(os.path.join(root, split_dir)):
        folder = os.path.join(root, split_dir, name)
        images = _images(folder, name)
        check_class_folder(folder, name, images, _NESTED)
        pairs.extend(images)
    return pairs


def _held_out(pairs: List[Tuple[str, str]]) -> Dict[str, list]:
    """{"train", "val"} of the images of a folder of class folders: of each
    class, VAL_SHARE of its images (at least one when it has two) into
    "val", those first in the order of a hash of "<class>/<file name>".
    An image keeps its split when others are added, removed or renamed
    (at most the one at the edge moves as the share's count changes), and
    a class's split never depends on another class's images, so that a
    resumed run or a later evaluation does not score on images the model
    trained on."""
    split = {name: [] for name in FLAT_SPLITS}
    for name in sorted({c for _, c in pairs}):
        mine = [p for p in pairs if p[1] == name]
        n_val = max(1, round(VAL_SHARE * len(mine))) if len(mine) > 1 else 0
        ranked = sorted(mine, key=lambda p: _rank(name, p[0]))
        held = set(ranked[:n_val])
        split["val"] += [p for p in mine if p in held]
        split["train"] += [p for p in mine if p not in held]
    return split


def _rank(name: str, path: str) -> bytes:
    """An image's place in a stable order: a hash of "<class>/<file>"."""
    return hashlib.sha256(f"{name}/{os.path.basename(path)}".encode(
        "utf-8", "surrogateescape")).digest()


def _split_folders(root: str) -> Dict[str, List[Tuple[str, str]]]:
    """{split: (path, class)} of `root`/<split>/<class>/ images, listed by
    `list_class_folders`."""
    files: Dict[str, List[Tuple[str, str]]] = {}
    found: Dict[str, str] = {}
    for split, classes in sorted(list_class_folders(root).items()):
        # Train/, VAL/ are the splits train and val, as they are found.
        key = split_key(split)
        if key in found:
            raise UsageError(
                f"Image folder {root} has both {found[key]}/ and {split}/: "
                "merge them into one split folder.")
        found[key] = split
        for name, images in sorted(classes.items()):
            folder = os.path.join(root, split, name)
            check_class_folder(folder, name, images, _NESTED)
            files.setdefault(key, []).extend(
                (os.path.join(folder, f), name) for f in images
            )
    return files


def holds_out(root: str) -> bool:
    """Whether `root` has no <split>/<class>/ folders: its "val" split is
    then held out of each class (`VAL_SHARE`)."""
    return not any(d.lower() in SPLIT_NAMES and _has_subfolder(
        os.path.join(root, d)) for d in _subdirs(root))


def _layout(root: str) -> Dict[str, List[Tuple[str, str]]]:
    """{split: (path, class)} of either layout: <split>/<class>/ where a
    top folder is named as a split (SPLIT_NAMES) and holds class folders,
    or where no top folder holds images; else <class>/, held out."""
    tops = _subdirs(root)
    splits = [d for d in tops if d.lower() in SPLIT_NAMES
              and _has_subfolder(os.path.join(root, d))]
    if not splits and any(_images(os.path.join(root, d), d, False)
                          for d in tops):
        _NOT_READ.clear()  # counted again as the class folders are listed
        loose = [n for n in _listdir(root) if _is_image(n)]
        if loose:
            logging.warning(
                "Image folder %s: the %d image(s) directly in it (%s) are in "
                "no class folder and are not read: move them into "
                "<class>/ folders.", root, len(loose),
                shorten(", ".join(sorted(loose)), 80))
        named = [f"{d}/" for d in tops if d.lower() in SPLIT_NAMES]
        if named:  # (photos to predict on, put beside the classes?)
            logging.warning(
                "Image folder %s: %s, named as a split, holds images "
                "directly, so it is read as a class, as its other folders "
                "are; a split folder holds class folders (%s<class>/*.jpg).",
                root, ", ".join(named), named[0])
        return _held_out(_class_folders(root, ""))
    # (Without a split-named folder, none of the tops holds an image.)
    stray = [d for d in tops
             if splits and _images(os.path.join(root, d), d, False)]
    if stray:  # images beside the class folders of a split
        logging.warning(
            "Image folder %s: the images directly in %s are in no class "
            "folder (<split>/<class>/) and are not read.", root,
            ", ".join(f"{d}/" for d in stray))
    return _split_folders(root)


@functools.lru_cache(maxsize=8)
def folder_index(root: str):
    """{split: (paths, labels)}, class names; labels index the sorted class
    folder names over all splits. Files are listed once per process."""
    if not root:
        raise UsageError(
            "dataset='folder' needs data_dir: the folder that holds "
            "<class>/*.jpg|png or <split>/<class>/*.jpg|png "
            "(config.input.data_dir; the folder config: --config=folder:PATH)."
        )
    if not tf.io.gfile.isdir(root):
        what = ("is a file, not a folder" if tf.io.gfile.exists(root)
                else "does not exist")
        raise UsageError(
            f"Image folder {root!r} {what}: set config.input.data_dir to "
            "the folder holding <class>/ or <split>/<class>/.")
    _NOT_READ.clear()
    _NESTED.clear()
    files = {split: pairs for split, pairs in _layout(root).items() if pairs}
    if _NESTED:
        logging.warning(
            "Image folder %s: %d folder(s) inside class folders (%s) are not "
            "read: only the images directly in each class folder are.",
            root, len(_NESTED), shorten(", ".join(
                os.path.relpath(p, root) + "/" for p in _NESTED), 100))
    say_not_read(root, _NOT_READ)
    names = sorted({name for pairs in files.values() for _, name in pairs})
    if not names:
        loose = any(_is_image(n) for n in _listdir(root))
        raise UsageError(
            f"No images ({', '.join(IMAGE_EXTENSIONS)}) found under "
            f"{root}/<class>/ or {root}/<split>/<class>/"
            + (f": {root} holds images directly, as one class folder does; "
               "give the folder above it, whose sub-folders are the "
               "classes." if loose else ".")
        )
    ids = {n: i for i, n in enumerate(names)}
    index = {}
    for split, pairs in files.items():
        # The classes mixed (slices hold each), stable (module docstring).
        ranked = sorted(pairs, key=lambda p: _rank(p[1], p[0]))
        index[split] = ([path for path, _ in ranked],
                        np.array([ids[c] for _, c in ranked], np.int32))
    return index, names


# What a split that a folder lacks asks of the user.
# (keras-vit-evaluate --mode=eval words it in its --split flag.)
SPLIT_ARRANGE = (
    "arrange it as <class>/ folders with the images directly inside, or as "
    "<split>/<class>/ with split folders named train, val, validation, "
    "valid or test.")
SPLIT_FIX = (
    "Name a split it has in the config (config.input.train_split, "
    "config.evals.test.split, config.evals.test.val_split), or "
    + SPLIT_ARRANGE)


def split_key(name: str) -> str:
    """A split's key in the folder index: train, val, ... whatever their
    case on disk or in a config (Train/ is train)."""
    return name.lower() if name.lower() in SPLIT_NAMES else name


def _layout_hint(index, root: str) -> str:
    """Why top folders were read as splits, or class folders have no val."""
    if list(index) == ["train"] and holds_out(root):  # (1 image a class)
        return "No class has 2 images, of which val holds a fifth: add some. "
    if any(split in SPLIT_NAMES for split in index):
        return ""
    tops = shorten(", ".join(f"{s}/" for s in sorted(index)), 60)
    return (f"Its top folders ({tops}) hold folders, not images, so they "
            "are its splits (if they are classes instead, put each class's "
            "images directly in its folder, cat/*.jpg: deeper folders are "
            "not read). ")


def resolve_split(root: str, split: str) -> str:
    """`split` of the image folder `root` with its alternatives ("val|test":
    the first of them that the folder has) made the one it has; the slice
    kept; each part of a join ("train+val") alike."""
    if "+" in split:
        return "+".join(resolve_split(root, part.strip())
                        for part in split.split("+"))
    name, bounds = parse_split(split)
    if "|" not in name:
        return split
    index, _ = folder_index(root)
    choices = [split_key(n.strip()) for n in name.split("|")]
    found = next((n for n in choices if n in index), None)
    if found is None:
        raise UsageError(
            f"Image folder {root} has none of the splits {', '.join(choices)}"
            f"; it has {shorten(repr(sorted(index)), 120)}. "
            f"{_layout_hint(index, root)}{SPLIT_FIX}"
        )
    return found + (f"[{bounds[0]}:{bounds[1]}]" if any(bounds) else "")


def folder_split(root: str, split: str) -> Tuple[List[str], np.ndarray]:
    """(file paths, labels) of a (sliced) split of an image folder, or of
    several joined ("train+val": every image of a folder of class folders
    alone, as TFDS joins splits)."""
    if "+" in split:
        parts = [folder_split(root, part) for part in
                 resolve_split(root, split).split("+")]
        return ([path for paths, _ in parts for path in paths],
                np.concatenate([labels for _, labels in parts]))
    index, _ = folder_index(root)
    name, bounds = parse_split(resolve_split(root, split))
    name = split_key(name)
    if name not in index:
        raise UsageError(
            f"Image folder {root} has no split {name!r} with images; it has "
            f"{shorten(', '.join(sorted(index)), 120)}. "
            f"{_layout_hint(index, root)}{SPLIT_FIX}"
        )
    paths, labels = index[name]
    start, stop = split_bounds(bounds, len(paths), split)
    return paths[start:stop], labels[start:stop]

