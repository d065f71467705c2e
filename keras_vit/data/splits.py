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
