"""The split strings every data source takes: a name, optionally sliced
("train[:90%]", "train[90%:]", "train[100:200]", TFDS's notation), read
the same way for TFDS data sets, the digits and image folders."""

from __future__ import annotations

import re
from typing import Tuple

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
