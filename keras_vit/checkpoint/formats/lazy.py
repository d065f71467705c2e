"""Mappings of arrays read on demand: `LazyArrays` (what
`keras_vit.checkpoint.formats.npz.read_npz` returns: shapes known from the
checked headers, an array inflated only when looked up), `shape_of` and
`renamed`, which keep a mapping as lazy as it was (NumPy only).
"""

from __future__ import annotations

import collections.abc
from typing import Callable, Iterator, List, Mapping, Tuple

import numpy as np

Shape = Tuple[int, ...]


def shape_of(arrays: Mapping[str, np.ndarray], key: str) -> Shape:
    """An array's shape, without inflating it where the mapping knows it
    (`LazyArrays`)."""
    known = getattr(arrays, "shape", None)
    if callable(known):
        return tuple(known(key))
    return tuple(np.shape(arrays[key]))


class LazyArrays(collections.abc.Mapping):
    """A read-only mapping of arrays whose shapes are known and whose values
    are made by `make(key)` each time one is looked up (nothing is kept):
    an array nobody looks up is never made.

    Attributes:
        made: list of str. The keys looked up, in order (what was read).
    """

    def __init__(self, shapes: Mapping[str, Shape],
                 make: Callable[[str], np.ndarray]):
        self._shapes = dict(shapes)
        self._make = make
        self.made: List[str] = []

    def shape(self, key: str) -> Shape:
        return self._shapes[key]

    def __getitem__(self, key: str) -> np.ndarray:
        if key not in self._shapes:
            raise KeyError(key)
        self.made.append(key)
        return self._make(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)

    def __contains__(self, key) -> bool:
        return key in self._shapes


def renamed(arrays: Mapping[str, np.ndarray],
            names: Mapping[str, str]) -> Mapping[str, np.ndarray]:
    """{new: arrays[old]} for `names` {new: old}, as lazy as `arrays`: of a
    `LazyArrays`, another whose arrays are made when looked up."""
    if isinstance(arrays, LazyArrays):
        return LazyArrays({new: arrays.shape(old) for new, old in
                           names.items()},
                          lambda new: arrays[names[new]])
    return {new: arrays[old] for new, old in names.items()}
