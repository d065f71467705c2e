"""The handwritten digits that scikit-learn ships (1,797 images of 8 x 8
grey levels 0..16), read and split without importing scikit-learn.

`import sklearn` loads SciPy: over a second of every process that reads
the digits (the quick start, and each command a user points at them),
for a 100 KB file and a shuffle. `load` reads the file where
scikit-learn installs it, as `sklearn.datasets.load_digits` does (where
it is not there, it calls `load_digits`). `stratified_split` draws the
split that `sklearn.model_selection.train_test_split(..., stratify=labels,
random_state=seed)` draws (StratifiedShuffleSplit's steps) from NumPy's
legacy `RandomState`, whose streams NumPy keeps fixed; tests/test_digits.py
checks both against scikit-learn itself.
"""

from __future__ import annotations

import gzip
import importlib.util
import os
from typing import Optional, Tuple

import numpy as np

FILE = os.path.join("datasets", "data", "digits.csv.gz")


def _installed_file() -> Optional[str]:
    """scikit-learn's digits.csv.gz, found without importing it; None
    where scikit-learn is not installed or keeps the file elsewhere."""
    try:
        spec = importlib.util.find_spec("sklearn")
    except ValueError:  # a module without a spec put in its place
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(folder, FILE)
        if os.path.isfile(path):
            return path
    return None


def load() -> Tuple[np.ndarray, np.ndarray]:
    """(images float64 (1797, 8, 8) of 0..16, labels int (1797,)), as
    `load_digits()`'s `images` and `target`."""
    path = _installed_file()
    if path is None:  # ImportError where scikit-learn is not installed
        from sklearn.datasets import load_digits

        digits = load_digits()
        return digits.images, digits.target
    with gzip.open(path, "rt", encoding="utf-8") as f:
        data = np.loadtxt(f, delimiter=",")
    return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(int)


def approximate_mode(counts: np.ndarray, draws: int,
                     rng: np.random.RandomState) -> np.ndarray:
    """int (classes,): how many of `draws` each class of `counts` gets,
    in proportion, rounded down, then one more to the classes of the
    largest remainders (ties broken by `rng`) until they sum to `draws`."""
    exact = counts / counts.sum() * draws
    taken = np.floor(exact)
    missing = int(draws - taken.sum())
    remainder = exact - taken
    for value in np.sort(np.unique(remainder))[::-1]:
        if missing <= 0:
            break
        (tied,) = np.where(remainder == value)
        chosen = rng.choice(tied, size=min(len(tied), missing),
                            replace=False)
        taken[chosen] += 1
        missing -= len(chosen)
    return taken.astype(int)


def stratified_split(labels: np.ndarray, test_size: int,
                     seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices) of `labels`: each class in the test
    split in proportion, `test_size` in all, both in shuffled order."""
    classes, inverse, counts = np.unique(labels, return_inverse=True,
                                         return_counts=True)
    if counts.min() < 2 or test_size < len(classes) or (
            len(labels) - test_size < len(classes)):
        raise ValueError(f"{len(labels)} labels of {len(classes)} classes "
                         f"cannot be split {test_size} for testing with "
                         "every class on both sides")
    members = np.split(np.argsort(inverse, kind="stable"),
                       np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    n_train = approximate_mode(counts, len(labels) - test_size, rng)
    n_test = approximate_mode(counts - n_train, test_size, rng)
    train, test = [], []
    for i, indices in enumerate(members):
        shuffled = indices.take(rng.permutation(counts[i]), mode="clip")
        train.extend(shuffled[:n_train[i]])
        test.extend(shuffled[n_train[i]:n_train[i] + n_test[i]])
    return rng.permutation(train), rng.permutation(test)
