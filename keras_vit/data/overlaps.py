"""Evaluation splits that share examples with the training split: "train"
evaluated on "train[90%:]" measures images the model learns from, a
figure that says nothing of how it generalises. Named in a warning, not
refused (evaluating on training images can be meant): at the start of a
run (`warn_overlaps`) and by --mode=eval on a run's own model and data
(`warn_trained_on`)."""

from __future__ import annotations

import os
from typing import Callable, Optional, Sequence, Tuple

from absl import logging

from keras_vit.data import sources
from keras_vit.data.splits import parse_split, split_bounds
from keras_vit.errors import UsageError

# What a training run's warning proposes.
RUN_FIX = ("Give them slices that do not meet (e.g. train_split="
           "'train[:90%]' with 'train[90%:]'), or another split.")


def warn_overlaps(inp, splits: Sequence[Tuple[str, str]],
                  fix: str = RUN_FIX) -> None:
    """Logs a warning for each evaluation split of `splits` ((what names
    it, split), the training split first) that shares examples with the
    training split, in `inp`'s data; `fix`: what to do instead."""
    if inp.vtab_task:
        return
    (trained, train), warned = splits[0], set()
    for what, split in splits[1:]:
        if split in warned or not overlap(
                train, split, lambda name: _count(inp, name)):
            continue
        warned.add(split)
        logging.warning(
            "%s=%r shares examples with %s=%r: its accuracy is measured "
            "partly on images the model learns from. %s", what, split,
            trained, train, fix)


def warn_trained_on(inp, run, split: str) -> None:
    """--mode=eval of a run's model (`run`: its config, or None) on `split`
    of `inp`: a warning where that is the data the run trained on and the
    split shares examples with its training split."""
    if run is None or (run.input.dataset, run.input.vtab_task) != (
            inp.dataset, inp.vtab_task) or _where(run.input) != _where(inp):
        return
    warn_overlaps(inp, [("the run's config.input.train_split",
                         run.input.train_split), ("--split", split)],
                  fix="Pass --split=<a split or slice it did not train on> "
                  "to measure how it generalises.")


def _where(inp) -> Optional[str]:
    return os.path.abspath(inp.data_dir) if inp.data_dir and "://" not in \
        inp.data_dir else inp.data_dir


def _count(inp, name: str) -> Optional[int]:
    """Examples in split `name` of `inp`'s data, or None where the data
    source does not count them without reading (a TFDS data set not
    prepared, a split it does not have)."""
    try:
        return sources.num_split_examples(inp, name) or None
    except Exception:  # noqa: BLE001 - not counted: nothing to compare
        return None


def overlap(first: str, second: str,
            count: Callable[[str], Optional[int]]) -> bool:
    """Whether the (sliced, "+"-joined) splits `first` and `second` share
    an example, as far as can be told without reading them: slices in
    percent are compared as they are, others where `count` (split name ->
    its examples, or None) counts their split."""
    for a in str(first).split("+"):
        for b in str(second).split("+"):
            try:
                (name, bounds), (other, others) = (parse_split(a),
                                                   parse_split(b))
            except UsageError:
                return False
            name = name.strip()
            if name.lower() != other.strip().lower() or "|" in name:
                continue
            ranges = _ranges((bounds, others), (a, b), lambda: count(name))
            if ranges and max(ranges[0][0], ranges[1][0]) < min(
                    ranges[0][1], ranges[1][1]):
                return True
    return False


def _ranges(bounds, splits, count):
    """((start, stop), (start, stop)) of two slices of one split: in
    hundredths where both are in percent, else in examples where `count()`
    counts them; None where it does not."""
    percent = all(b.endswith("%") for pair in bounds for b in pair if b)
    n = 100 if percent else count()
    if not n:
        return None
    if percent:
        bounds = [tuple(b.replace("%", "") for b in pair) for pair in bounds]
    try:
        return tuple(split_bounds(pair, n, split)
                     for pair, split in zip(bounds, splits))
    except UsageError:
        return None
