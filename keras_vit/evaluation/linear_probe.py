"""The few-shot linear probe on features (big_vision's fewshot_lsr).

For each shot count and seed: `shots` training examples per class (the
first of each class's random order of that seed, as big_vision draws
them); features standardised with the mean and std (+1e-5) of those
examples, a constant bias feature of 100 appended (large, so the bias is
almost unregularised); ridge regression to targets 2 * onehot - 1 with
l2_reg 1024, solved in closed form; accuracy of the argmax on the test
features.

The closed form goes through the smaller Gram matrix: (X^T X + l2 I)^-1
X^T Y when N >= D, X^T (X X^T + l2 I)^-1 Y otherwise (the same solution by
the push-through identity). NumPy only: the features are small, and
float64 keeps the solve exact.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
from absl import logging

from keras_vit import config_limits
from keras_vit.errors import UsageError

# How the examples of each shot count are drawn, recorded in fewshot.json:
# results drawn otherwise (an earlier release drew each count anew) are
# not kept as if made alike.
SHOT_DRAW = "big_vision: a permutation per class and seed, its first shots"
BIAS_FEATURE = 100.0
L2_REG = 1024.0


# --------------------------------------------------------------- solver
def ridge_weights(x: np.ndarray, y: np.ndarray, l2_reg: float) -> np.ndarray:
    """argmin_W |X W - Y|^2 + l2_reg |W|^2, in closed form (float64).

    Args:
        x: (N, D) array. Inputs.
        y: (N, K) array. Targets.
        l2_reg: float. Ridge strength (> 0).

    Returns:
        (D, K) float64 weights.
    """
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[0] != y.shape[0]:
        raise UsageError(
            f"Expected x (N, D) and y (N, K) with the same N, got {x.shape} "
            f"and {y.shape}."
        )
    if l2_reg <= 0:
        raise UsageError(f"l2_reg must be positive, got {l2_reg}.")
    n, d = x.shape
    if n >= d:  # D x D system
        gram = x.T @ x + l2_reg * np.eye(d)
        return np.linalg.solve(gram, x.T @ y)
    gram = x @ x.T + l2_reg * np.eye(n)  # N x N system
    return x.T @ np.linalg.solve(gram, y)


def fit_predict(train_x: np.ndarray, train_y: np.ndarray, test_x: np.ndarray,
                num_classes: int, l2_reg: float = L2_REG,
                bias: float = BIAS_FEATURE) -> np.ndarray:
    """Fits the few-shot linear classifier and predicts test classes.

    Args:
        train_x: (N, D) features of the few-shot examples.
        train_y: (N,) int labels.
        test_x: (M, D) features.
        num_classes: int.
        l2_reg: float. Ridge strength.
        bias: float. Value of the appended constant feature.

    Returns:
        (M,) int predictions.
    """
    train_x = np.asarray(train_x, np.float64)
    test_x = np.asarray(test_x, np.float64)
    mean = train_x.mean(axis=0, keepdims=True)
    std = train_x.std(axis=0, keepdims=True) + 1e-5

    def prepare(x):
        x = (x - mean) / std
        return np.concatenate([x, np.full((len(x), 1), bias)], axis=1)

    targets = 2.0 * np.eye(num_classes)[np.asarray(train_y)] - 1.0
    weights = ridge_weights(prepare(train_x), targets, l2_reg)
    return np.argmax(prepare(test_x) @ weights, axis=1)


def class_orders(labels: np.ndarray, seed: int,
                 num_classes: int) -> List[np.ndarray]:
    """Each class's example indices in the random order of `seed`: one
    `default_rng(seed)` permutation per class, classes in turn, as
    big_vision's fewshot_lsr draws them (so that each seed picks what
    big_vision's does)."""
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    return [rng.permutation(np.flatnonzero(labels == c))
            for c in range(num_classes)]


def draw_shots(labels: np.ndarray, shots: int, seed: int,
               num_classes: int) -> np.ndarray:
    """Indices of `shots` random examples per class (without replacement):
    the first `shots` of each class's order (`class_orders`), so that a
    seed's 1-shot examples are among its 5-shot ones; a class with fewer
    gives all it has (`evaluate_features` says so)."""
    return first_shots(class_orders(labels, seed, num_classes), shots)


def first_shots(orders: List[np.ndarray], shots: int) -> np.ndarray:
    """The first `shots` indices of each class's order (`class_orders`,
    drawn once for every shot count of a seed)."""
    chosen = [order[:shots] for order in orders]
    return (np.concatenate(chosen).astype(np.int64) if chosen
            else np.zeros([0], np.int64))


def check_draws(shots: Sequence[int], seeds: Sequence[int]) -> None:
    """A UsageError unless `shots` are whole numbers of at least 1 and
    `seeds` whole numbers of at least 0, each list one value or more,
    none twice (the limits of a few-shot evaluator's config): a shot
    count of 0 or less would train on no example, or on all but some,
    under its name."""
    for path, values, low in (("shots", shots, 1), ("seeds", seeds, 0)):
        config_limits.check_list(path, list(values), low, "[]", True,
                                 prefix="")


def evaluate_features(
    train: Tuple[np.ndarray, np.ndarray],
    test: Tuple[np.ndarray, np.ndarray],
    num_classes: int,
    shots: Sequence[int],
    seeds: Sequence[int],
    l2_reg: float = L2_REG,
) -> Dict[str, dict]:
    """Few-shot accuracies from precomputed features.

    Returns:
        {str(shots): {"mean": accuracy, "per_seed": [accuracy per seed]}},
        with "fewest_shots" (the examples of the poorest class) where a
        class has fewer training examples than the shot count.
    """
    check_draws(shots, seeds)
    if num_classes < 2:
        raise UsageError(f"A probe of {num_classes} class measures nothing: "
                         "give data of two classes or more.")
    train_x, train_y = train
    test_x, test_y = test
    counts = np.bincount(np.asarray(train_y, np.int64),
                         minlength=num_classes)[:num_classes]
    orders = {int(seed): class_orders(train_y, int(seed), num_classes)
              for seed in seeds}  # one draw per seed, for every shot count
    if not counts.all():  # a probe predicts only classes it has shots of
        logging.warning(
            "%d of %d classes have no training example: the probe never "
            "predicts them, and the accuracies count their test images "
            "wrong.", np.sum(counts == 0), num_classes)
    out = {}
    for k in shots:
        short = counts < int(k)
        if short.any():
            logging.warning(
                "%d of %d classes have fewer than %d training examples "
                "(fewest: %d): each uses all it has, so the %d-shot figure "
                "is of fewer shots (recorded as fewest_shots).",
                short.sum(), num_classes, k, counts.min(), k)
        accs = []
        for seed in seeds:
            idx = first_shots(orders[int(seed)], int(k))
            pred = fit_predict(train_x[idx], train_y[idx], test_x,
                               num_classes, l2_reg)
            accs.append(float(np.mean(pred == test_y)))
        out[str(int(k))] = {"mean": float(np.mean(accs)), "per_seed": accs}
        if short.any():
            out[str(int(k))]["fewest_shots"] = int(counts.min())
    return out
