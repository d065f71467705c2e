"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in Keras 3.

The package is layered; each layer imports only the ones before it:

    keras_vit/             the model: portable Keras 3 (`keras.ops` only; runs
                           on the TensorFlow and JAX backends)
    keras_vit/checkpoint/  the official .npz format, run directories, and
                           `load_model(source)`: any source to a model (a
                           path, hf://ORG/NAME, a released model's name:
                           `list_models()`)
    keras_vit/data/        tf.data input: TFDS, image folders, the digits,
                           preprocessing, VTAB task definitions, data checks
    keras_vit/training/    the trainer, strategies, resume, the train command
    keras_vit/evaluation/  accuracy, few-shot, VTAB-1k runs and reports
    keras_vit/export/      SavedModel for TF Serving
    keras_vit/analysis/    attention maps and the paper's Section 4.5 figures

The tools beyond the model use TensorFlow and are imported on first use.
"""

import importlib

from keras_vit.derived import (
    attention_model,
    features_model,
    input_image_size,
    intermediate_model,
    model_stride,
    with_dynamic_image_size,
)
from keras_vit.droppath import DropPath
from keras_vit.layers import (
    ClassToken,
    Encoder,
    EncoderBlock,
    MultiHeadSelfAttention,
    PatchEmbedding,
    PositionEmbedding,
    SinCosPositionEmbedding,
    TokenPooling,
)
from keras_vit.model import VARIANTS, create_model, decode_variant
from keras_vit.resnet import ResNetStem

__version__ = "0.1.0"

# Checkpoint functions load lazily: they need NumPy only for local files,
# TensorFlow for gs:// paths.
_LAZY = {
    "load_npz": "keras_vit.checkpoint.weights",
    "save_npz": "keras_vit.checkpoint.weights",
    "LoadReport": "keras_vit.checkpoint.weights",
    "rebuild_at_resolution": "keras_vit.checkpoint.resolution",
    "resize_position_embedding": "keras_vit.checkpoint.weights",
    "Source": "keras_vit.checkpoint.loader",
    "load_model": "keras_vit.checkpoint.loader",
    "list_models": "keras_vit.checkpoint.catalog",
    "export_model": "keras_vit.export.saved_model",
}

__all__ = [
    "ClassToken",
    "DropPath",
    "Encoder",
    "EncoderBlock",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "ResNetStem",
    "SinCosPositionEmbedding",
    "TokenPooling",
    "VARIANTS",
    "attention_model",
    "create_model",
    "decode_variant",
    "features_model",
    "input_image_size",
    "intermediate_model",
    "model_stride",
    "with_dynamic_image_size",
    *_LAZY,
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'keras_vit' has no attribute {name!r}")
