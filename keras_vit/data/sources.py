"""The data sources a config can name, and what is known about them.

- "digits": the 1,797 real 8 x 8 handwritten digits that scikit-learn ships
  (no download). Fixed split: a stratified shuffle with seed 0 puts 1,437
  images in "train" and 360 in "test".
- Any TFDS dataset by name (`data_dir` may be a gs:// path), with TFDS split
  strings ("train[:98%]").
- "folder": an image folder `data_dir/<split>/<class>/*.jpg|jpeg|png|gif|bmp`
  (the layout of `tfds.folder_dataset.ImageFolder`; class ids are the sorted
  class folder names of all splits), or one of class folders alone,
  `data_dir/<class>/*.jpg`, whose splits are "train" and "val"
  (`VAL_SHARE` of each class's images, at least one, into "val", chosen
  by a hash of the class and file name, so every run and command holds
  out the same images).
  Splits take "train[:90%]" / "train[90%:]" / "train[:800]" slices, and
  "val|test" names the first of these splits that the folder has
  (`resolve_split`).
- A VTAB-1k task (`config.input.vtab_task`): its TFDS builder, split and label
  function from `keras_vit.data.vtab`.

This module answers "which examples and classes are there"; `pipeline`
turns them into batches and `checks` validates them, both on top of it.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import re
import types
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
from absl import logging

from keras_vit.data import digits, features, folders, splits, vtab
from keras_vit.data.image_files import FOLDER
from keras_vit.errors import UsageError

DIGITS = "digits"


@dataclasses.dataclass
class DatasetInfo:
    """What the trainer needs to know about a data source."""

    num_classes: int
    num_examples: dict  # split -> count (where known)
    class_names: Optional[List[str]] = None


# ----------------------------------------------------------------- digits
@functools.lru_cache(maxsize=1)
def _digits_arrays():
    grey, target = digits.load()
    # 0..16 grey levels -> uint8 0..255.
    images = np.round(grey * (255.0 / 16.0)).astype(np.uint8)
    labels = target.astype(np.int32)
    train, test = digits.stratified_split(labels, test_size=360, seed=0)
    return {"train": (images[train], labels[train]),
            "test": (images[test], labels[test])}


def digits_split(split: str) -> Tuple[np.ndarray, np.ndarray]:
    """(images uint8 (N, 8, 8), labels int32 (N,)) of "train" or "test",
    slices ("train[:80%]") included."""
    name, bounds = splits.parse_split(split)
    arrays = _digits_arrays()
    if name not in arrays:
        raise UsageError(
            f"The digits data has splits 'train' and 'test', got {split!r}."
        )
    x, y = arrays[name]
    start, stop = splits.split_bounds(bounds, len(y), split)
    return x[start:stop], y[start:stop]


def examples_per_class(labels: np.ndarray, count: int,
                       seed: int) -> np.ndarray:
    """Sorted indices of `count` random examples of each class of `labels`
    (all of a class that has fewer), drawn with `seed`: the same draw for
    the same labels and seed, whatever the model or run."""
    if int(count) < 0:
        raise UsageError(
            f"config.input.train_examples_per_class must be >= 0 (0: all), "
            f"got {count}."
        )
    labels = np.asarray(labels)
    rng = np.random.default_rng(int(seed))
    keep = [
        rng.choice(pool, min(int(count), len(pool)), replace=False)
        for pool in (np.flatnonzero(labels == c) for c in np.unique(labels))
    ]
    return np.sort(np.concatenate(keep))


# ----------------------------------------------------------- image folder
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
        index, names = folders.folder_index(inp.data_dir)
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


def tfds_name(inp) -> Optional[str]:
    """The TFDS data set of `config.input` that its readers download and
    prepare (`tfds_builder`); None for the digits, image folders and VTAB
    tasks (the VTAB-1k run prepares those: `vtab.prepare`)."""
    if inp.vtab_task or inp.dataset in (DIGITS, FOLDER):
        return None
    return inp.dataset


def prepare(inp) -> None:
    """Makes `config.input`'s TFDS data set (`tfds_name`) readable: if it
    is not on disk yet, TFDS downloads and prepares it where
    config.input.download allows (else UsageError naming the fix)."""
    if tfds_name(inp):
        tfds_builder(inp)


def prepared_or_skipped(prepare_fn: Callable[[], object], name: str,
                        label: str, in_turn: Optional[Callable],
                        not_run: Dict[str, str], progress) -> bool:
    """Whether data set `name` can be read once `prepare_fn` (its download
    and preparation) has run in the cluster's turn (`in_turn(prepare_fn,
    name)`, a multi-worker run's chief first; None: at once). Where it
    cannot (DataUnavailableError), it is skipped: "Skipping <label>: why"
    logged, the reason kept in `not_run[name]`, `progress.skip()`."""
    try:
        if in_turn is None:
            prepare_fn()
        else:
            in_turn(prepare_fn, name)
    except vtab.DataUnavailableError as e:
        logging.warning("Skipping %s: %s", label, e)
        not_run[name] = str(e)
        progress.skip()
        return False
    return True


def named_builder(name: str, data_dir: Optional[str],
                  what: str = "dataset"):
    """TFDS's builder of data set `name` in `data_dir`. An unknown name is
    a one-line UsageError that names the closest TFDS names (TFDS's own
    error lists every data set it has, hundreds of them); so is a name
    TFDS cannot parse, and `folder:PATH` (train's `--config=folder:PATH`
    written as a data set) names `folder` with PATH as the data_dir."""
    import tensorflow_datasets as tfds

    if name.startswith(f"{FOLDER}:"):
        raise UsageError(
            f"{what} {name!r}: an image folder is the data set "
            f"{FOLDER!r} with the folder as its data_dir: --dataset="
            f"{FOLDER} --data_dir={name[len(FOLDER) + 1:]} in "
            "keras-vit-evaluate; in a config, dataset='folder' and "
            "data_dir=PATH (keras-vit-train --config=folder:PATH writes "
            "that config).")
    try:  # TFDS's own parser, before its long error from tfds.builder
        tfds.core.naming.parse_builder_name_kwargs(name)
    except ValueError:
        raise UsageError(
            f"{what} {name!r} is not a TFDS name: give 'digits', "
            "'folder' or NAME[/CONFIG][:VERSION], e.g. cifar10 or "
            "imagenet2012:5.*.*.") from None
    try:
        return tfds.builder(name, data_dir=data_dir)
    except tfds.core.registered.DatasetNotFoundError:
        close = difflib.get_close_matches(  # TFDS's own, no download
            name.split("/")[0],
            tfds.list_builders(with_community_datasets=False), n=3)
        raise UsageError(
            f"Unknown {what} {name!r}: use 'digits', 'folder' or a TFDS "
            "name (see tfds.list_builders())"
            + (f"; the closest: {', '.join(close)}." if close else ".")
        ) from None


def tfds_builder(inp):
    if inp.vtab_task:
        return vtab.get_task(inp.vtab_task).builder(inp.data_dir)
    builder = named_builder(inp.dataset, inp.data_dir)
    features.check_feature_keys(inp, builder)  # before any download
    # A data set not on disk yet: TFDS's own download_and_prepare, once
    # (config.input.download), as the VTAB tasks and few-shot sets do.
    try:
        vtab.prepare_builder(builder, inp.dataset, inp.data_dir,
                             bool(inp.download), inp.manual_dir)
    except vtab.DataUnavailableError as e:
        raise UsageError(str(e)) from None
    return builder


def check_examples_per_class(inp) -> None:
    """A UsageError where config.input.train_examples_per_class is set for
    data other than the digits and image folders (TFDS data is sliced)."""
    if int(inp.train_examples_per_class) and (inp.vtab_task or (
            inp.dataset not in (DIGITS, FOLDER))):
        raise UsageError(
            "config.input.train_examples_per_class works with the digits "
            "and image folders; for a TFDS data set slice train_split "
            "instead (e.g. 'train[:1000]')."
        )


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
        return len(folders.folder_split(inp.data_dir, split)[0])
    return tfds_split_size(tfds_builder(inp), split)


def split_fix(field: str, split: str, why: str, names=None) -> UsageError:
    """The error of a `split` that cannot be read, naming the flag or
    config `field` that gave it, why, and the data's splits (`names`)."""
    listed = f" (it has {', '.join(names)})" if names else ""
    example = "train" if field.endswith("train_split") else "test"
    return UsageError(
        f"{field}={split} cannot be used: {why.rstrip('.')}{listed}. Pass "
        f"{field}=<an existing split or a slice of one>, e.g. "
        f"{field}='{example}' or {field}='{example}[:50%]'.")


def check_split(inp, split: str, field: str, names=None) -> None:
    """A UsageError naming `field` (`split_fix`) when `split` is not a
    split, a slice or a sum of them of the data of `config.input` section
    `inp`: the digits' read at once; a TFDS one's parsed, then each part
    looked up among `names` (the data set's splits, where TFDS knows
    them) and, where `names` gives each split's size ({name: examples}),
    its slices sized as TFDS reads them; an image folder's looked up in
    its index of files (the folder's own message, after `field`)."""
    import tensorflow_datasets as tfds

    if inp.dataset == FOLDER and not inp.vtab_task:
        try:
            folders.folder_split(inp.data_dir, split)
        except UsageError as error:
            message = str(error)  # a config field's: the one to set
            if field.startswith("config."):  # not training's fields
                message = message.replace(folders.SPLIT_FIX, (
                    f"Set {field}=<a split it has>, or "
                    + folders.SPLIT_ARRANGE))
            raise UsageError(f"{field}={split} cannot be used: {message}"
                             ) from None
        return
    if inp.dataset == DIGITS and not inp.vtab_task:
        try:
            digits_split(split)
        except ValueError as error:
            raise split_fix(field, split, str(error)) from None
        return
    try:
        instruction = tfds.core.ReadInstruction.from_spec(split)
    except (ValueError, AssertionError):
        raise split_fix(field, split, "TFDS cannot parse it", names
                        ) from None
    unknown = [p for p in (re.sub(r"\[.*\]$", "", part.strip())
                           for part in split.split("+"))
               if p not in (names or [p]) and p != "all"]
    if unknown:
        raise split_fix(field, split, f"{inp.dataset} holds no split "
                        f"{unknown[0]!r}", names)
    if isinstance(names, dict) and names and all(names.values()):
        why = _slice_problem(instruction, names)
        if why:
            raise split_fix(field, split, why, _sized(names))


def _slice_problem(instruction, sizes: Dict[str, int]) -> Optional[str]:
    """Why a parsed TFDS split reads no example of splits of `sizes`
    ({name: examples}), as TFDS would say it when reading (a slice past
    the end, or an empty one); None where every part reads some."""
    infos = {k: types.SimpleNamespace(num_examples=int(n))
             for k, n in sizes.items()}
    try:
        parts = instruction.to_absolute(infos)
    except (ValueError, KeyError) as error:  # a slice past the end
        return str(error)
    for part in parts:
        n = sizes[part.splitname]
        start, stop = (n + v if v is not None and v < 0 else v
                       for v in (part.from_, part.to))
        if (n if stop is None else stop) <= (start or 0):
            return f"its slice of {part.splitname} holds no example"
    return None


def _sized(sizes: Dict[str, int]):
    """Split names with their sizes, for `split_fix`."""
    return [f"{k}: {n} examples" for k, n in sizes.items()]


def training_examples(inp) -> Optional[int]:
    """Examples a run of `config.input` trains on: its train_split, at
    most train_examples_per_class of each class (the digits and image
    folders); None where the data source does not say (a TFDS data set
    not prepared)."""
    per_class = int(inp.train_examples_per_class)
    if not per_class:
        return num_split_examples(inp, inp.train_split)
    check_examples_per_class(inp)
    if inp.dataset == FOLDER and not inp.vtab_task:
        labels = folders.folder_split(inp.data_dir, inp.train_split)[1]
    else:
        labels = digits_split(inp.train_split)[1]
    return examples_kept(labels, per_class)


def examples_kept(labels: np.ndarray, per_class: int) -> int:
    """How many of the examples with `labels` a run keeps: at most
    `per_class` of each class (0: all)."""
    if not per_class:
        return len(labels)
    counts = np.unique(labels, return_counts=True)[1]
    return int(np.minimum(counts, per_class).sum())


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
