"""Models derived from a ViT built by `create_model`, sharing its weights:
the pre-logits features, attention maps, token features of any encoder
blocks, and a copy that accepts any image size.

Each reads the model's own description (`VisionTransformer.architecture`
and `.parts`). A functional model loaded from a `.keras` file written
before `VisionTransformer` is rebuilt first (`as_vision_transformer`): the
derived model then shares the rebuilt copy's weights, equal to the
original's.
"""

from __future__ import annotations

import numbers
from typing import Sequence, Tuple, Union

import keras
from keras import ops

from keras_vit import embedding as vit_embedding
from keras_vit import layers as vit_layers
from keras_vit.errors import UsageError
from keras_vit.model import (
    VisionTransformer,
    architecture_of,
    as_vision_transformer,
    dtype_policy_of,
)
from keras_vit.values import whole, yes_no


def features_model(model: keras.Model) -> keras.Model:
    """The same network up to the pre-logits representation (shared weights).

    Few-shot probes, fine-tuning and the export's `features` signature use
    this: the output of the pre-logits layer if the model has one, else the
    pooled token. Calling it does not copy weights.
    """
    vit = as_vision_transformer(model)
    last = vit.parts.pre_logits or vit.parts.pooling
    return keras.Model(
        vit.input, last.output, name=f"{vit.name}_features"
    )


def is_features_model(model: keras.Model) -> bool:
    """Whether `model` is a keras_vit ViT without a head (num_classes 0, or
    `features_model`'s output); False for any other model."""
    try:
        return not architecture_of(model).num_classes
    except UsageError:
        return False


class _View(keras.Model):
    """A functional model over the layers of another (shared weights) with
    a layer of its own that Keras cannot save: `save` is refused by name,
    before a file is opened (Keras would leave an empty one behind), and so
    is the config that `keras.saving.save_model` asks for."""

    def save(self, filepath, *args, **kwargs):
        del args, kwargs
        raise UsageError(self._not_saved(f" at {filepath}"))

    def get_config(self):
        raise UsageError(self._not_saved(""))

    def _not_saved(self, where: str) -> str:
        return (
            f"{self.name} is a view of another model (its layers, shared), "
            f"not a model to save{where}: save the model it came from, and "
            "derive the view again after loading that.")


class _EncoderWithAttention(keras.layers.Layer):
    """Calls a built `Encoder` with `return_attention_scores=True`.

    A layer of its own because a Keras functional graph takes a layer's
    output structure from its first call, and the encoder's first call (in
    the classifier) returns a single tensor. The encoder's weights are shared,
    not copied.
    """

    def __init__(self, encoder: vit_layers.Encoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder

    def call(self, x):
        return self.encoder(x, return_attention_scores=True)

    def compute_output_spec(self, x):
        return self.encoder.compute_output_spec(
            x, return_attention_scores=True
        )


def attention_model(model: keras.Model) -> keras.Model:
    """A model returning (output, [attention weights per layer]).

    Shares the weights of `model` (same layers, no new parameters); each
    attention tensor has shape (batch, heads, query tokens, key tokens).
    A separate call path, so training and inference pay nothing for it.
    Works at any input size for a model with `dynamic_image_size`.
    """
    vit = as_vision_transformer(model)
    parts = vit.parts
    # From the encoder's input in the model's own graph, so that what comes
    # before it (one input or two, a ResNet or not) is reused as it is.
    x, attention = _EncoderWithAttention(parts.encoder, name="attention")(
        parts.encoder.input
    )
    for layer in (parts.pooling, parts.pre_logits, parts.head):
        if layer is not None:
            x = layer(x)
    return _View(vit.input, [x, attention], name=f"{vit.name}_attention")


def model_stride(model: keras.Model) -> int:
    """int. Image pixels per patch side: the patch size, times the ResNet
    stride for hybrids (`Architecture.stride`). Input sides must be
    multiples of it."""
    return architecture_of(model).stride


def input_image_size(model: keras.Model) -> Tuple[int, int]:
    """(height, width). A fixed-size model's input size; for a model with
    `dynamic_image_size`, the size its position embeddings are kept at
    (the `image_size` it was created with), (None, None) with sin-cos
    position embeddings, which are kept at no size."""
    arch = architecture_of(model)
    if arch.dynamic_image_size and arch.posemb == "sincos2d":
        return None, None
    return arch.image_size


def with_dynamic_image_size(model: keras.Model) -> keras.Model:
    """The same network taking images of any size, weights copied.

    As `create_model(..., dynamic_image_size=True)` with the weights of
    `model`, a fixed-size model built by `create_model` (or loaded from its
    .keras file): its position embeddings are kept at its grid and
    interpolated to each input's. A model that already has a dynamic image
    size is returned as is. The original model is not modified.
    """
    arch = architecture_of(model)
    if arch.dynamic_image_size:
        return model
    with dtype_policy_of(model):
        new = VisionTransformer(arch.replace(dynamic_image_size=True),
                                name=model.name)
    new.set_weights(model.get_weights())
    return new


class _Intermediates(keras.layers.Layer):
    """Runs a built `Encoder`'s blocks up to the last one asked for and
    returns the chosen blocks' outputs (a list, in the order asked).

    Every token is computed in every block run (no class-token-only last
    block); the blocks after the last one asked for are not run. The
    encoder's weights are shared, not copied.
    """

    def __init__(self, encoder, blocks, norm, output, patch_size,
                 num_prefix_tokens, **kwargs):
        # patch_size: the patch side on `features`, the patch embedding's
        # input (the ResNet's feature map for hybrids).
        super().__init__(**kwargs)
        self.encoder = encoder
        self.block_indices = tuple(blocks)
        self.norm = norm
        self.output_kind = output
        self.patch_size = patch_size
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, tokens, features, training=None):
        wanted = {}
        x = tokens
        for i, block in enumerate(self.encoder.blocks):
            if i > max(self.block_indices):
                break
            x = block(x, training=training)
            if i in self.block_indices:
                wanted[i] = self.encoder.encoder_norm(x) if self.norm else x
        outputs = [wanted[i] for i in self.block_indices]
        if self.output_kind == "grid":
            rows, cols = vit_embedding.patch_grid(features, self.patch_size)
            outputs = [
                ops.reshape(
                    y[:, self.num_prefix_tokens:],
                    (-1, rows, cols, ops.shape(y)[-1]),
                )
                for y in outputs
            ]
        return outputs

    def compute_output_spec(self, tokens, features, training=None):
        batch, length, width = tokens.shape
        if self.output_kind == "grid":
            rows, cols = (
                None if side is None else side // self.patch_size
                for side in features.shape[1:3]
            )
            shape = (batch, rows, cols, width)
        else:
            shape = (batch, length, width)
        # The encoder's blocks compute the outputs, in its dtype (the
        # model's policy, not this layer's).
        return [
            keras.KerasTensor(shape, dtype=self.encoder.compute_dtype)
            for _ in self.block_indices
        ]


def intermediate_model(
    model: keras.Model,
    blocks: Union[int, Sequence[int]] = (-1,),
    *,
    norm: bool = False,
    output: str = "tokens",
) -> keras.Model:
    """Token features of chosen encoder blocks, from one forward pass.

    For dense prediction, probing and analysis: the returned model maps the
    images of `model` (any size if it has `dynamic_image_size`) to a dict
    {"block_{i}": features of block i}, one entry per block asked for, in
    the order asked (i counted from 0, negative indices resolved). The
    blocks run once, up to the deepest one asked for; the weights are those
    of `model` (shared, not copied).

    Args:
        model: keras.Model. A keras_vit model (classifier or features).
        blocks: int or sequence of int. Block indices, 0 to num_layers - 1;
            negative ones count from the end (-1: the last block).
        norm: bool. Apply the encoder's final LayerNorm (`encoder_norm`) to
            each output, as the encoder does to its last block's.
        output: str. "tokens": the token sequence, (batch, 1 + h * w,
            width) with the class token first ("token" pooling), (batch,
            h * w, width) with "gap" pooling. "grid": the patch tokens as
            a 2-D grid, (batch, h, w, width), without the class token.
            h and w are the input's height and width over the model's
            stride (`model_stride`); patches run row-major.

    Returns:
        keras.Model. Images to a dict of `len(blocks)` tensors.
    """
    if output not in ("tokens", "grid"):
        raise UsageError(
            f'output must be "tokens" or "grid", got {output!r}.'
        )
    vit = as_vision_transformer(model)
    encoder = vit.parts.encoder
    count = encoder.num_layers
    try:
        asked = ([whole(blocks)] if isinstance(blocks, (numbers.Number, str))
                 else [whole(b) for b in blocks])
        norm = yes_no(norm)
    except (TypeError, ValueError):
        raise UsageError(
            "blocks must be an int or a sequence of ints and norm True or "
            f"False, got blocks={blocks!r}, norm={norm!r}.") from None
    if not asked:
        raise UsageError("blocks is empty: name at least one block.")
    indices = []
    for index in asked:
        if not -count <= index < count:
            raise UsageError(
                f"Block {index} does not exist: the model has {count} "
                f"blocks, 0 to {count - 1} (or -{count} to -1 from the end)."
            )
        indices.append(index % count)
    if len(set(indices)) != len(indices):
        raise UsageError(f"blocks {asked} name a block twice.")
    embedding = vit.parts.patch_embedding
    outputs = _Intermediates(
        encoder,
        indices,
        norm,
        output,
        vit.architecture.patch_size,
        vit.architecture.num_prefix_tokens,
        name="intermediates",
    )(encoder.input, embedding.input)
    # A dict, not a list: Keras returns a one-output list as a bare tensor.
    outputs = {f"block_{i}": y for i, y in zip(indices, outputs)}
    return _View(vit.input, outputs, name=f"{vit.name}_intermediates")
