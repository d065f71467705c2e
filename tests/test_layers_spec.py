"""The encoder's output spec, computed from shapes (Encoder.
compute_output_spec), equals the one Keras gets by tracing every block: the
same shapes and dtypes for each pooling, the class-token-only last block,
attention scores, mixed precision and unknown token counts."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers as vit_layers


def _traced(layer, x, **kwargs):
    """Keras's own spec: the layer's call traced symbolically."""
    return keras.layers.Layer.compute_output_spec(layer, x, **kwargs)


def _flat(spec):
    if isinstance(spec, (tuple, list)):
        return [s for part in spec for s in _flat(part)]
    return [(tuple(spec.shape), keras.backend.standardize_dtype(spec.dtype))]


@pytest.fixture
def policy(request):
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"],
                         indirect=True)
@pytest.mark.parametrize("class_token_only", [False, True])
@pytest.mark.parametrize("shape", [(2, 5, 8), (None, 5, 8), (None, None, 8)])
def test_spec_equals_the_traced_one(policy, class_token_only, shape):
    encoder = vit_layers.Encoder(
        num_layers=2, num_heads=2, mlp_dim=16,
        class_token_only=class_token_only,
    )
    x = keras.KerasTensor(shape, dtype=encoder.compute_dtype)
    encoder.build(shape)
    for scores in (False, True):
        ours = encoder.compute_output_spec(x, return_attention_scores=scores)
        assert _flat(ours) == _flat(
            _traced(encoder, x, return_attention_scores=scores))
    assert _flat(encoder.compute_output_spec(x))[0][1] == (
        "bfloat16" if policy == "mixed_bfloat16" else "float32")


def test_models_declare_what_they_compute():
    """The built model's outputs (classifier, attention model, features)
    have the shapes and dtypes that running it gives."""
    model = keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=4, hidden_size=8,
        num_layers=2, num_heads=2, mlp_dim=16,
    )
    x = np.zeros((2, 16, 16, 3), "float32")
    assert tuple(model.output.shape) == (None, 3)
    assert model(x).shape == (2, 3)
    attention = keras_vit.attention_model(model)
    out, scores = attention(x)
    assert [tuple(s.shape) for s in attention.output[1]] == [
        (None, 2, 17, 17)] * 2
    assert [tuple(s.shape) for s in scores] == [(2, 2, 17, 17)] * 2
    np.testing.assert_allclose(out, model(x), rtol=1e-6, atol=1e-6)
