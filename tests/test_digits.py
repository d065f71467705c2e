"""keras_vit.data.digits against scikit-learn itself: the same images and
labels as `load_digits`, the same split as `train_test_split(...,
stratify=...)`, and a command that reads the digits imports no
scikit-learn."""

import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import StratifiedShuffleSplit, train_test_split
from sklearn.utils.extmath import _approximate_mode

from keras_vit.data import digits, sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_file_read_is_load_digits():
    assert digits._installed_file() is not None  # not the fallback
    images, labels = digits.load()
    reference = load_digits()
    np.testing.assert_array_equal(images, reference.images)
    np.testing.assert_array_equal(labels, reference.target)


def test_without_the_file_it_asks_scikit_learn(monkeypatch):
    monkeypatch.setattr(digits, "FILE", os.path.join("no", "such.csv.gz"))
    assert digits._installed_file() is None
    images, labels = digits.load()
    assert images.shape == (1797, 8, 8) and labels.shape == (1797,)


def test_the_digits_splits_are_train_test_splits():
    """sources' train and test splits: train_test_split's arrays, in its
    order (which the training order and the README's figure rest on)."""
    reference = load_digits()
    images = np.round(reference.images * (255.0 / 16.0)).astype(np.uint8)
    labels = reference.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=360, random_state=0, stratify=labels)
    for split, (x, y) in (("train", (x_train, y_train)),
                          ("test", (x_test, y_test))):
        ours = sources.digits_split(split)
        np.testing.assert_array_equal(ours[0], x)
        np.testing.assert_array_equal(ours[1], y)
        assert (ours[0].dtype, ours[1].dtype) == (np.uint8, np.int32)


@pytest.mark.parametrize("seed", range(6))
def test_stratified_split_draws_what_scikit_learn_draws(seed):
    """Uneven classes, ties among the remainders and labels out of order,
    several seeds and test sizes: the same indices in the same order."""
    rng = np.random.default_rng(seed)
    labels = rng.choice([3, 7, 1, 9, 4], size=int(rng.integers(20, 300)),
                        p=[0.4, 0.3, 0.15, 0.1, 0.05])
    labels[:10] = [3, 3, 7, 7, 1, 1, 9, 9, 4, 4]  # two of each at least
    for test_size in (5, len(labels) // 3, len(labels) - 5):
        splitter = StratifiedShuffleSplit(n_splits=1, test_size=test_size,
                                          random_state=seed)
        train, test = next(splitter.split(np.zeros(len(labels)), labels))
        ours = digits.stratified_split(labels, test_size, seed)
        np.testing.assert_array_equal(ours[0], train)
        np.testing.assert_array_equal(ours[1], test)


def test_approximate_mode_breaks_ties_as_scikit_learn_does():
    for counts, draws in (([4, 2], 3), ([5, 2], 4), ([2, 2, 2, 1], 2),
                          ([10, 10, 10], 0), ([3, 3, 3, 3, 3], 7),
                          ([178, 182, 177, 183, 181], 360)):
        for seed in (0, 1, 42):
            counts = np.asarray(counts)
            np.testing.assert_array_equal(
                digits.approximate_mode(counts, draws,
                                        np.random.RandomState(seed)),
                _approximate_mode(counts, draws,
                                  np.random.RandomState(seed)))


def test_a_split_without_every_class_on_both_sides_is_refused():
    with pytest.raises(ValueError, match="every class on both sides"):
        digits.stratified_split(np.array([0, 0, 1]), 1, 0)
    with pytest.raises(ValueError, match="every class on both sides"):
        digits.stratified_split(np.array([0, 0, 1, 1]), 1, 0)


def test_a_command_reading_the_digits_imports_no_scikit_learn():
    """A command's process (lean_imports in place) reads both splits
    without loading scikit-learn."""
    code = (
        "import sys\n"
        "sys.argv[0] = 'keras-vit-train'\n"
        "import keras_vit\n"
        "from keras_vit.data import sources\n"
        "import tensorflow, keras\n"
        "assert sources.digits_split('test')[0].shape == (360, 8, 8)\n"
        "assert sources.digits_split('train[:10%]')[0].shape[0] == 144\n"
        "print('sklearn' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True,
        env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""),
        timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "False", proc.stdout
