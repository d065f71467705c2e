"""The classification losses a run config names (`objective.loss`) and the
scores each one trains a model for: a softmax over the classes after
`softmax_xent`, a sigmoid per class after `sigmoid_xent` (as the released
ImageNet-21k models were trained).

Plain names, without TensorFlow, so that the checkpoint layer (a
workdir's scores), the training command (the end-of-run export) and the
scoring layer read one mapping.
"""

from __future__ import annotations

from keras_vit.errors import UsageError

SOFTMAX = "softmax"
SIGMOID = "sigmoid"
SCORES = (SOFTMAX, SIGMOID)

# objective.loss -> the scores a model trained with it is read with.
LOSS_SCORES = {"softmax_xent": SOFTMAX, "sigmoid_xent": SIGMOID}
LOSSES = tuple(LOSS_SCORES)


def check_loss(loss: str) -> str:
    """`loss` when it is one of LOSSES, else a UsageError naming them."""
    if loss not in LOSS_SCORES:
        raise UsageError(
            f"Unknown loss {loss!r}: use one of {', '.join(LOSSES)}.")
    return loss


def loss_scores(loss: str) -> str:
    """str. The scores that go with the training loss `loss`: "sigmoid"
    for "sigmoid_xent", "softmax" for "softmax_xent"."""
    return LOSS_SCORES[check_loss(loss)]
