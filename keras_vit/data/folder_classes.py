"""The classes of an image folder checked before a classifier trains on
it: at least two, each with training images, the share held out of a
folder of class folders read, and an evaluation split's classes that the
model never sees said in the log."""

from __future__ import annotations

from typing import Sequence, Tuple

from absl import logging

from keras_vit.data import folders, sources
from keras_vit.data.splits import parse_split
from keras_vit.errors import UsageError


def check_training_classes(inp, labelled: bool) -> None:
    """The classes of an image folder that a classifier trains on
    (`labelled`): one class is nothing to learn, and a class with images in
    another split but none in the training split (a misspelt folder) one
    the model never learns (an evaluation may read one class, or a split
    of its own)."""
    if not labelled or inp.dataset != sources.FOLDER or inp.vtab_task:
        return
    root = inp.data_dir
    index, names = folders.folder_index(root)
    if len(names) < 2:
        raise UsageError(
            f"Image folder {root} has one class ({names[0]}): a classifier "
            "needs at least two class folders.")
    classes = {split: {names[i] for i in labels}
               for split, (_, labels) in index.items()}
    parts, trained = _split_classes(root, inp.train_split)  # "train+val"
    train = " or ".join(parts)
    untrained = sorted(set(names) - trained) if trained else []
    if untrained:
        where = sorted(s for s, held in classes.items()
                       if held & set(untrained))
        raise UsageError(
            f"Image folder {root}: class {', '.join(untrained)} has images "
            f"in split {', '.join(where)} but none in split {train}, so "
            "the model would never learn it: add its training images, or "
            "rename the folder to the class it belongs to.")


def check_probe_classes(inp, pool: str, test: str) -> None:
    """The classes of an image folder that a few-shot probe reads: two or
    more, each of split `test` with images in split `pool` (the probe
    never predicts a class it has no shot of)."""
    if inp.dataset != sources.FOLDER:
        return
    root = inp.data_dir
    pool_parts, pooled = _split_classes(root, pool)
    test_parts, tested = _split_classes(root, test)
    if len(pooled | tested) < 2:
        raise UsageError(
            f"Image folder {root} has one class ({', '.join(pooled | tested)}"
            "): a probe needs at least two class folders.")
    unpooled = sorted(tested - pooled)
    if unpooled:
        raise UsageError(
            f"Image folder {root}: class {', '.join(unpooled)} has images in "
            f"split {' or '.join(test_parts)} but none in split "
            f"{' or '.join(pool_parts)}, the probe's shots, so it would "
            "never be predicted: add its images there, or rename the "
            "folder to the class it belongs to.")


def check_held_out_read(inp, splits: Sequence[Tuple[str, str]],
                        resumed: bool = False) -> None:
    """A folder of class folders alone (no <split>/ folders) holds out a
    share of each class as its split "val": a training run whose splits
    (`run_splits`: (config field, split)) never read it would silently
    leave those images out (the ImageNet-21k recipes slice train for
    their own held-out images). Refused; a `resumed` run (whose images
    would move between its slices with the fix) is warned."""
    if inp.dataset != sources.FOLDER or inp.vtab_task or not (
            folders.holds_out(inp.data_dir)):
        return
    root = inp.data_dir
    read = {folders.split_key(part) for _, split in splits
            for part in _split_classes(root, split)[0]}
    if "val" in read or not folders.folder_index(root)[0].get(
            "val", ((), ()))[0]:
        return
    named = {}  # each split once, by the first field that reads it
    for field, split in splits:
        named.setdefault(split, f"config.{field}={split!r}")
    said = (f"Image folder {root} has no split folders, so "
            f"{folders.VAL_SHARE:.0%} of each class of two images or more is "
            "held out as its split val, which this run never reads "
            f"({', '.join(named.values())})")
    if resumed:  # (moved now, its images would change slices)
        logging.warning("%s: a new run would be refused.", said)
        return
    raise UsageError(
        f"{said}: move the class folders into {root}/train/ to train on "
        "all of them, or read val in one of those splits.")


def _split_classes(root: str, split: str):
    """The split folders that `split` of image folder `root` reads
    ("train+val": both; a slice reads part of one) and the classes they
    hold images of."""
    index, names = folders.folder_index(root)
    parts = [parse_split(part)[0] for part in folders.resolve_split(
        root, split).split("+")]
    return parts, {names[i] for p in parts
                   for i in index.get(folders.split_key(p), ((), ()))[1]}


def warn_unevaluated_classes(inp, splits: Sequence[Tuple[str, str]],
                             labelled: bool) -> None:
    """An image folder's evaluation split (of `run_splits`, the training
    split first) whose folder holds no images of a class the classifier
    trains on: its accuracy leaves that class out (class folders alone:
    a class of one image, which holds none out). Warned once a split (a
    small test folder of some classes can be meant)."""
    if not labelled or inp.dataset != sources.FOLDER or inp.vtab_task:
        return
    # (class folders alone: a class of one image holds none out)
    held_out = folders.holds_out(inp.data_dir)
    _, trained = _split_classes(inp.data_dir, splits[0][1])
    warned = set()
    for field, split in splits[1:]:
        parts, held = _split_classes(inp.data_dir, split)
        missing = sorted(trained - held)
        if missing and split not in warned:
            warned.add(split)
            logging.warning(
                "Image folder %s: config.%s=%r reads %s, which has no "
                "images of %s %s that the model trains on: its accuracy "
                "leaves %s out.", inp.data_dir, field, split,
                "the held-out val" if held_out and parts == ["val"] else
                "/, ".join(parts) + "/", "classes" if missing[1:] else
                "class", ", ".join(missing), "them" if missing[1:] else "it")
