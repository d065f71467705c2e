"""save_npz writes float32 arrays whatever the model's float dtype, and
refuses by name a model the official layout cannot record (a quantized
one), leaving no file."""

import os
import warnings

import keras
import ml_dtypes
import numpy as np
import pytest

from keras_vit import create_model
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import npz_mapping
from keras_vit.errors import UsageError


def tiny():
    return create_model(None, num_classes=5, image_size=32, patch_size=8,
                        hidden_size=32, num_layers=1, num_heads=4,
                        mlp_dim=64)


def tiny_of(dtype_policy):
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(dtype_policy)
    try:
        return tiny()
    finally:
        keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("dtype", ["bfloat16", "mixed_bfloat16", "float16",
                                   "float64"])
def test_a_model_of_any_float_dtype_is_written_as_float32(tmp_path, dtype):
    """A bfloat16 model's arrays were written as bfloat16, which NumPy
    stores as raw 2-byte values ('|V2') that NumPy, vit_jax and big_vision
    cannot use; every array is float32 now and loads back equal."""
    model = tiny_of(dtype)
    rng = np.random.default_rng(0)
    for variable in model.weights:  # values bfloat16 cannot all keep
        variable.assign(rng.normal(size=variable.shape).astype(
            keras.backend.standardize_dtype(variable.dtype)))
    path = str(tmp_path / "m.npz")
    checkpoint.save_npz(model, path)
    with np.load(path, allow_pickle=False) as data:
        dtypes = {key: data[key].dtype for key in data.files}
    assert set(dtypes.values()) == {np.dtype("float32")}, dtypes
    for read in (tiny(), tiny_of(dtype)):
        assert checkpoint.load_npz(read, path).ok
        for w, r in zip(model.weights, read.weights):
            np.testing.assert_array_equal(
                np.asarray(r.numpy()),
                np.asarray(w.numpy()).astype(np.float32).astype(
                    keras.backend.standardize_dtype(r.dtype)))


def test_a_quantized_model_is_refused_and_no_file_is_left(tmp_path):
    """model.quantize("int8") gives int8 kernels whose scales the layout
    has no key for: written, they reloaded silently wrong."""
    model = tiny()
    with warnings.catch_warnings():  # layers keras cannot quantize
        warnings.simplefilter("ignore")
        model.quantize("int8")
    path = str(tmp_path / "q.npz")
    with pytest.raises(UsageError, match=r"quantized \(Transformer/"
                       r"encoderblock_0/attention/qkv/kernel_scale.*"
                       r"before quantizing it.*quantize after loading"):
        checkpoint.save_npz(model, path)
    assert not os.path.exists(path)
    assert os.listdir(tmp_path) == []


def test_a_parameter_that_is_not_float_is_refused_by_name():
    """An integer parameter has no float32 form the official loaders
    would read as the model's."""
    counts = keras.Variable(np.zeros((3,), "int32"), name="counts")
    with pytest.raises(UsageError, match=r"counts is int32: the official "
                       r".npz layout records float arrays only.*float dtype"):
        npz_mapping.check_float(
            tiny(), [npz_mapping.Param(counts, ("counts",))])


def test_a_hybrid_file_round_trips_as_docs_checkpoints_says(tmp_path):
    """An official-layout file loaded into a float32 model and saved again
    gives back the same keys and values, as float32 (a bfloat16 file's
    values converted exactly), GroupNorm scale/bias as (1, 1, 1, C) even
    where the file stored (C,) (docs/checkpoints.md)."""
    model = create_model(None, num_classes=5, image_size=32, patch_size=1,
                         hidden_size=32, num_layers=1, num_heads=4,
                         mlp_dim=64, resnet_layers=(1,))
    rng = np.random.default_rng(0)
    stored = {}
    for key, value in checkpoint.model_arrays(model).items():
        value = rng.normal(size=value.shape).astype(ml_dtypes.bfloat16)
        stored[key] = value.reshape(-1) if "/gn" in "/" + key else value
    assert stored["gn_root/scale"].shape == (64,)
    np.savez(tmp_path / "in.npz", **stored)
    assert checkpoint.load_npz(model, str(tmp_path / "in.npz")).ok
    checkpoint.save_npz(model, str(tmp_path / "out.npz"))
    with np.load(tmp_path / "out.npz", allow_pickle=False) as data:
        written = {key: data[key] for key in data.files}
    assert sorted(written) == sorted(stored)
    for key, value in stored.items():
        want = value.astype(np.float32)
        if "/gn" in "/" + key:
            want = want.reshape(1, 1, 1, -1)
        assert written[key].dtype == np.float32, key
        np.testing.assert_array_equal(written[key], want, err_msg=key)
