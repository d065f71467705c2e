"""--scores, shared by keras-vit-predict and keras-vit-export: how the
probabilities score a model's logits. "auto" (the default) takes what the
source says (a workdir's loss: a sigmoid after `sigmoid_xent`; a
transformers multi-label head), a sigmoid for a model of one logit, else
a softmax (`keras_vit.scoring.scores`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from absl import flags

from keras_vit.commands.lazy import lazy_module

if TYPE_CHECKING:  # what type checkers and the import contracts read
    from keras_vit.checkpoint import loader
    from keras_vit.scoring import scores as vit_scores
else:  # imported at first use: `--help` loads no Keras or TensorFlow
    vit_scores = lazy_module("keras_vit.scoring.scores")

# keras_vit.scoring.scores.AUTO and SCORES, named here without TensorFlow.
CHOICES = ("auto", "softmax", "sigmoid")


def define_scores(values: flags.FlagValues) -> None:
    flags.DEFINE_enum(
        "scores", "auto", list(CHOICES), "How the probabilities score the "
        "logits: softmax (one class among all), sigmoid (each class on its "
        "own, for a model trained with the sigmoid loss, such as the "
        "ImageNet-21k ones), or auto: what the model's source says (a "
        "workdir's objective.loss), a sigmoid for one logit, else softmax.",
        flag_values=values)


def scores(values: flags.FlagValues, source: loader.Source,
           num_classes: int) -> str:
    """"softmax" or "sigmoid" for a model of `num_classes` logits from
    `source`, as --scores says (a model of one logit: a sigmoid, always,
    as its export scores it)."""
    chosen = values.scores
    return vit_scores.scores_for(
        num_classes, source.scores() if chosen == vit_scores.AUTO else chosen)
