"""How a classifier's logits become the scores its users read: a softmax
(one class among all) or a sigmoid per class (each class on its own).

A model trained with the sigmoid loss (`objective.loss=sigmoid_xent`, as
the released ImageNet-21k models were) is scored with a sigmoid, as is a
model of one logit (a softmax over one class is 1.0 for every input;
transformers' pipeline, too, takes the sigmoid of a single logit). The
ranking of the classes is the same either way; the numbers differ.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow as tf

from keras_vit.errors import UsageError
from keras_vit.objectives import SCORES, SIGMOID, SOFTMAX

__all__ = ["AUTO", "SCORES", "SIGMOID", "SOFTMAX", "check_scores",
           "probabilities", "probabilities_np", "scores_for"]

# The command-line choice that takes the model's own (`scores_for`).
AUTO = "auto"


def scores_for(num_classes: int, trained: Optional[str] = None) -> str:
    """str. How to score a classifier of `num_classes` logits whose
    source says it is scored `trained` (one of SCORES, or None where the
    source does not say): a sigmoid for one logit, else `trained`, else a
    softmax."""
    if int(num_classes) == 1:
        return SIGMOID
    return check_scores(trained) if trained is not None else SOFTMAX


def check_scores(scores: str) -> str:
    """`scores` when it is one of SCORES, else a UsageError naming them."""
    if scores not in SCORES:
        raise UsageError(f"scores={scores!r}: give one of "
                         f"{', '.join(SCORES)}.")
    return scores


def probabilities(logits, scores: str) -> tf.Tensor:
    """float32 (batch, K). `logits` (batch, K) scored as `scores` says."""
    logits = tf.cast(logits, tf.float32)
    if check_scores(scores) == SIGMOID:
        return tf.math.sigmoid(logits)
    return tf.nn.softmax(logits, axis=-1)


def probabilities_np(logits, scores: str) -> np.ndarray:
    """`probabilities` of numpy logits, as numpy."""
    return probabilities(np.asarray(logits, np.float32), scores).numpy()
