"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in Keras 3.

The model (`keras_vit.model`, `keras_vit.layers`) is portable Keras 3 and runs
on the TensorFlow and JAX backends; the training, evaluation and export tools
around it use TensorFlow.
"""

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

__version__ = "0.1.0"
