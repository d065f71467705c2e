"""Argument values as a caller writes them, checked for their kind.

Python's int() and bool() take too much: int(8.9) is 8 and bool("False")
is True, so a size given as a fraction or a flag given as a string would
build another model than the one asked for. `whole` and `yes_no` take the
values that mean one thing (an int of any library, numpy's, JAX's or a
TensorFlow scalar's included; a float of no fraction; True or False) and
raise ValueError for the rest, which the callers turn into a UsageError
naming the argument.
"""

from __future__ import annotations

import numbers
import operator
import unicodedata
from typing import Sequence, Tuple, Union

import numpy as np

from keras_vit.errors import UsageError

ImageSize = Union[int, Tuple[int, int], Sequence[int]]


def name_key(name) -> str:
    """A class name as names are compared: in Unicode's composed form
    (NFC), so that a folder named on macOS, whose file system writes "é"
    as "e" and a combining accent (NFD), is the class that a labels file
    or a model's id2label writes with "é"."""
    return unicodedata.normalize("NFC", str(name))


def is_bool(value) -> bool:
    """Whether `value` is a bool (Python's or numpy's)."""
    return isinstance(value, (bool, np.bool_))


def whole(value) -> int:
    """`value` as an int: an int (numpy's, a 0-d array's or a tensor's
    too), a number of no fraction or a string of digits. A ValueError for
    anything else (a bool, 8.9, "eight"), which int() would truncate or
    take."""
    if is_bool(value):
        raise ValueError(value)
    try:
        return operator.index(value)
    except TypeError:
        pass
    if isinstance(value, str):
        if value.strip().lstrip("-").isdigit():
            return int(value)
        raise ValueError(value)
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(value) from None
    if number.is_integer():
        return int(number)
    raise ValueError(value)


def yes_no(value) -> bool:
    """`value` as a bool: True, False (numpy's too), 1 or 0. A ValueError
    for anything else (a string such as "False" is truthy)."""
    if isinstance(value, (str, bytes)) or not isinstance(
            value, numbers.Number) and not is_bool(value):
        raise ValueError(value)
    if value not in (True, False):
        raise ValueError(value)
    return bool(value)


def image_hw(image_size: ImageSize) -> Tuple[int, int]:
    """(height, width) of an int or (height, width) image size, checked."""
    try:
        if isinstance(image_size, str):
            raise ValueError(image_size)  # "32" is no (3, 2)
        if isinstance(image_size, numbers.Number) or (
                getattr(image_size, "ndim", None) == 0):
            hw = (whole(image_size),) * 2
        else:
            hw = tuple(whole(s) for s in image_size)
    except (TypeError, ValueError):
        hw = ()
    if len(hw) != 2 or min(hw) <= 0:
        what = ("a whole number of pixels or (height, width), not a string"
                if isinstance(image_size, str) else
                "positive (an int or (height, width))")
        raise UsageError(f"`image_size` must be {what}, got {image_size!r}.")
    return hw
