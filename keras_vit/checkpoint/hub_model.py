"""Builds a keras_vit model from a Hugging Face layout directory
(`keras_vit.checkpoint.hub`): the architecture from the arrays' shapes and
config.json, the weights through `weights.load_arrays`. Reached through
`keras_vit.checkpoint.sources.HubSource`."""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import keras

from keras_vit.checkpoint import hub, weights
from keras_vit.checkpoint.npz import LoadReport, describe_arrays
from keras_vit.model import Numerics, create_model

_SIZE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads",
                "mlp_dim")


def describe_hub(checkpoint: hub.HubCheckpoint) -> Dict[str, Any]:
    """The checkpoint's architecture, as `loader.describe_source` gives it,
    plus approximate_gelu, layer_norm_epsilon and pre_logits_activation."""
    info = describe_arrays(
        {k: tuple(v.shape) for k, v in checkpoint.arrays.items()}
    )
    info.update(
        image_size=checkpoint.image_size,
        approximate_gelu=checkpoint.approximate_gelu,
        layer_norm_epsilon=checkpoint.layer_norm_epsilon,
        pre_logits_activation=checkpoint.pre_logits_activation,
    )
    return info


def model_from_hub(
    checkpoint: hub.HubCheckpoint,
    image_size,
    num_classes: Optional[int],
    representation_size,
    from_source,
    strict: bool,
) -> Tuple[keras.Model, LoadReport]:
    """(model, report): the checkpoint built and loaded, at `image_size`
    (None: the checkpoint's own; the position embedding is resized
    otherwise). `num_classes` and `representation_size` as in
    `loader.load_model` (`from_source` is its FROM_SOURCE marker)."""
    info = describe_hub(checkpoint)
    if representation_size == from_source:
        representation_size = info["representation_size"]
    if num_classes is None:
        num_classes = info["num_classes"] or 0
    patch = info["patch_size"]
    rows, cols = (s // patch for s in checkpoint.image_size)
    model = create_model(
        None,
        num_classes=num_classes,
        image_size=checkpoint.image_size if image_size is None
        else image_size,
        pooling=info["pooling"],
        representation_size=representation_size,
        numerics=Numerics(
            approximate_gelu=checkpoint.approximate_gelu,
            layer_norm_epsilon=checkpoint.layer_norm_epsilon,
        ),
        **{k: info[k] for k in _SIZE_FIELDS},
    )
    if representation_size is not None:
        # A ViTModel's pooler_act (tanh unless its config says otherwise):
        # the Dense layer applies and serialises whatever it holds.
        model.get_layer("pre_logits").activation = keras.activations.get(
            checkpoint.pre_logits_activation)
    report = weights.load_arrays(
        model,
        checkpoint.arrays,
        strict=strict,
        keep_pre_logits=representation_size is not None,
        posemb_grid=(rows, cols),
        source=checkpoint.path,
        layout=checkpoint.naming,
    )
    return model, report
