"""The split strings every data source takes: a name, optionally sliced
("train[:90%]", "train[90%:]", "train[100:200]", TFDS's notation), read
the same way for TFDS data sets, the digits and image folders."""

from __future__ import annotations

import re
from typing import Callable, Optional, Tuple

from keras_vit.errors import UsageError

_SPLIT_RE = re.compile(r"^([^\[\]]+)(?:\[(-?\d*%?):(-?\d*%?)\])?$")


def parse_split(split: str):
    match = _SPLIT_RE.match(str(split).strip())
    if not match:
        raise UsageError(
            f"Cannot read split {split!r}: use a name, optionally sliced as "
            "'train[:90%]', 'train[90%:]' or 'train[100:200]'."
        )
    return match.group(1), (match.group(2) or "", match.group(3) or "")


def split_bounds(bounds, n: int, split: str) -> Tuple[int, int]:
    """(start, stop) of a parsed slice of `n` examples. A bound beyond
    them (example 800 of 500, or 120%) is refused, as TFDS refuses it,
    rather than read as the end."""
    def index(text: str, default: int) -> int:
        if not text:
            return default
        percent = text.endswith("%")
        value = int(text[:-1]) if percent else int(text)
        if abs(value) > (100 if percent else n):
            raise UsageError(
                f"Split {split!r} asks for {text} of {n} examples: a slice "
                f"bound goes up to {'100%' if percent else n} (as in TFDS); "
                "slice within them, or leave the bound out for the end.")
        if percent:
            value = round(n * value / 100)
        return value + n if value < 0 else value

    start, stop = index(bounds[0], 0), index(bounds[1], n)
    if stop <= start:
        raise UsageError(f"Split {split!r} selects no examples (of {n}).")
    return start, stop


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
