"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in Keras 3.

The model (`keras_vit.model`, `keras_vit.layers`, `keras_vit.resnet`) is
portable Keras 3 and runs on the TensorFlow and JAX backends; the training,
evaluation, checkpoint and export tools around it use TensorFlow and are
imported on first use.
"""

import importlib

from keras_vit.layers import (
    ClassToken,
    Encoder,
    EncoderBlock,
    MultiHeadSelfAttention,
    PatchEmbedding,
    PositionEmbedding,
    TokenPooling,
)
from keras_vit.model import (
    VARIANTS,
    attention_model,
    create_model,
    decode_variant,
    features_model,
)
from keras_vit.resnet import ResNetStem

__version__ = "0.1.0"

# Checkpoint functions load lazily: they need NumPy only for local files,
# TensorFlow for gs:// paths.
_LAZY = {
    "load_npz": "keras_vit.checkpoint",
    "save_npz": "keras_vit.checkpoint",
    "LoadReport": "keras_vit.checkpoint",
    "rebuild_at_resolution": "keras_vit.checkpoint",
    "resize_position_embedding": "keras_vit.checkpoint",
    "export_model": "keras_vit.export",
}

__all__ = [
    "ClassToken",
    "Encoder",
    "EncoderBlock",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "ResNetStem",
    "TokenPooling",
    "VARIANTS",
    "attention_model",
    "create_model",
    "decode_variant",
    "features_model",
    *_LAZY,
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
