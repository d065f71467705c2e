"""Rematerialisation of the encoder blocks (keras_vit.remat): the gradients
equal those without it (dropout included) on TensorFlow and JAX, the
backward pass really recomputes the blocks, training steps give the same
weights, and weights, names and checkpoints do not change."""

import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from ml_collections import config_flags

import keras_vit
from keras_vit import build, remat
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.commands import flags as cli
from keras_vit.config import base_config
from keras_vit.training import model_init, train_lib
from keras_vit.training.trainer import Trainer
from tests import tiny, xla_cpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
            mlp_dim=64)


def _model(policy, **kwargs):
    keras.utils.set_random_seed(0)
    return keras_vit.create_model(
        None, num_classes=5, image_size=16, head_zero_init=False,
        remat=policy, **{**TINY, **kwargs}
    )


def _pair(**kwargs):
    """The same weights and dropout seeds without and with block remat."""
    plain, rematted = _model("none", **kwargs), _model("block", **kwargs)
    for a, b in zip(plain.variables, rematted.variables):
        b.assign(a)
    return plain, rematted


def _batch(n=4):
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (n, 16, 16, 3)).astype("float32")
    return x, (np.arange(n) % 5).astype("int32")


def _grad_fn(model, jit):
    @tf.function(jit_compile=jit)
    def grads(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    return grads


@pytest.mark.parametrize("pooling,dropout", [
    ("token", 0.0), ("token", 0.2), ("gap", 0.1),
])
def test_block_remat_gradients_equal_plain_ones(pooling, dropout):
    """In a tf.function; under XLA, the trainer test below."""
    plain, rematted = _pair(pooling=pooling, dropout_rate=dropout,
                            attention_dropout_rate=dropout)
    x, y = _batch()
    loss_a, grads_a = _grad_fn(plain, False)(x, y)
    loss_b, grads_b = _grad_fn(rematted, False)(x, y)
    assert float(loss_a) == pytest.approx(float(loss_b), rel=1e-6)
    assert len(grads_a) == len(grads_b) == len(plain.trainable_variables)
    for v, a, b in zip(plain.trainable_variables, grads_a, grads_b):
        scale = max(float(np.abs(a).max()), 1e-3)
        np.testing.assert_allclose(b, a, atol=2e-5 * scale, err_msg=v.path)
    assert float(np.abs(grads_a[0]).max()) > 0
    # The dropout seeds moved on by the same draws.
    for a, b in zip(plain.non_trainable_variables,
                    rematted.non_trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def _compiled_dots(model):
    x, y = _batch(2)
    hlo = _grad_fn(model, True).experimental_get_compiler_ir(
        tf.constant(x), tf.constant(y))(stage="optimized_hlo")
    return len(re.findall(r" dot\(", hlo))


@xla_cpu.needed
def test_the_backward_pass_recomputes_each_block():
    """XLA keeps TensorFlow's recomputation: in every block, the qkv
    projection, both attention products, the output projection and the
    first MLP layer run once more. (The second MLP layer's output feeds
    only the residual sum, which no gradient reads, so it is not
    recomputed.)"""
    plain, rematted = _pair()
    assert _compiled_dots(rematted) == _compiled_dots(plain) + 5 * 2


@xla_cpu.needed
def test_training_steps_with_remat_give_the_same_weights():
    """The trainer's XLA-compiled steps, with dropout: the same weights."""
    strategy = tf.distribute.get_strategy()
    x, y = _batch(8)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).repeat()
    models = _pair(dropout_rate=0.1)
    for model in models:
        trainer = Trainer(
            model, keras.optimizers.SGD(0.1, momentum=0.9), strategy,
            num_classes=5, global_batch_size=8, jit_compile=True,
        )
        metrics = trainer.train(iter(data), 2)
        assert np.isfinite(metrics["loss"])
    for a, b in zip(*(m.trainable_variables for m in models)):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-5,
                                   err_msg=a.path)


def test_weights_names_and_checkpoints_are_unchanged(tmp_path):
    plain, rematted = _pair()
    assert [(v.path, tuple(v.shape)) for v in plain.weights] == [
        (v.path, tuple(v.shape)) for v in rematted.weights]
    checkpoint.save_npz(rematted, str(tmp_path / "r.npz"))
    checkpoint.save_npz(plain, str(tmp_path / "p.npz"))
    a, b = np.load(tmp_path / "p.npz"), np.load(tmp_path / "r.npz")
    assert sorted(a.files) == sorted(b.files)
    for key in a.files:
        np.testing.assert_array_equal(a[key], b[key])
    # Inference does not rematerialise: the same outputs.
    x, _ = _batch()
    np.testing.assert_array_equal(plain(x), rematted(x))
    # .keras files keep the policy; configs from before it load as "none".
    path = str(tmp_path / "m.keras")
    rematted.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("Transformer").remat == "block"
    np.testing.assert_array_equal(loaded(x), rematted(x))
    config = rematted.get_layer("Transformer").get_config()
    config.pop("remat")
    assert keras_vit.Encoder.from_config(config).remat == "none"


def test_unknown_or_unsupported_policies_name_the_choices(tmp_path):
    """An unknown policy is refused by name. "dots" is JAX's: on
    TensorFlow a model of it (one trained on JAX) builds, saves, loads
    and infers as the plain model (inference never rematerialises), and
    a training call or a training config is refused naming "block"."""
    with pytest.raises(ValueError, match="'none', 'block', 'dots'"):
        _model("full")
    assert keras.backend.backend() == "tensorflow"
    dots, plain = _model("dots"), _model("none")
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3))
    path = str(tmp_path / "dots.keras")
    dots.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.get_layer("Transformer").remat == "dots"
    np.testing.assert_array_equal(loaded(x), plain(x))
    with pytest.raises(ValueError, match='JAX backend.*use remat="block"'):
        loaded(x, training=True)
    config = tiny.digits_config({"model.remat": "dots"})
    with pytest.raises(ValueError, match='JAX backend.*use remat="block"'):
        train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    assert remat.check_remat("block") == "block"


def test_config_field_builds_the_rematerialised_model():
    assert base_config().model.remat == "none"
    config = base_config()
    config.model.update(dict(variant=None, **TINY, remat="block"))
    config.model.image_size = 16
    model = build.build_run(config, num_classes=5)[0]
    assert model.get_layer("Transformer").remat == "block"


def test_a_run_may_resume_with_remat_switched():
    """The workdir check compares the model's parameters, which remat (and
    the dropout rate) does not change."""
    plain, rematted = base_config(), base_config()
    rematted.model.remat = "block"
    rematted.model.dropout_rate = 0.1
    assert model_init.model_signature(plain) == model_init.model_signature(
        rematted)
    rematted.model.mlp_dim = 1024
    assert model_init.model_signature(plain) != model_init.model_signature(
        rematted)


def test_remat_at_the_top_level_names_the_model_field(monkeypatch):
    values = flags.FlagValues()
    argv = ["train.py", "--config=" + os.path.join(ROOT, "configs",
                                                   "digits.py"),
            "--config.remat=block"]
    config_flags.DEFINE_config_file("config", None, flag_values=values,
                                    lock_config=True, sys_argv=argv)
    with pytest.raises(ValueError) as e:  # UsageError
        cli.parse(values, argv)
    assert "did you mean config.model.remat?" in str(e.value)


JAX_SCRIPT = textwrap.dedent(
    """
    import re
    import jax, keras, numpy as np, keras_vit

    def model(policy):
        keras.utils.set_random_seed(0)
        return keras_vit.create_model(
            None, num_classes=5, image_size=16, patch_size=8, hidden_size=32,
            num_layers=2, num_heads=2, mlp_dim=64, head_zero_init=False,
            dropout_rate=0.2, attention_dropout_rate=0.2, remat=policy)

    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (4, 16, 16, 3)).astype("float32")
    y = np.arange(4) % 5
    plain = model("none")
    trainable = [v.value for v in plain.trainable_variables]
    state = [v.value for v in plain.non_trainable_variables]
    results = {}
    for policy in ("none", "block", "dots"):
        m = model(policy)

        def loss(trainable, state):
            logits, state = m.stateless_call(trainable, state, x,
                                             training=True)
            return keras.ops.mean(
                keras.losses.sparse_categorical_crossentropy(
                    y, logits, from_logits=True)), state

        fn = jax.grad(loss, has_aux=True)
        results[policy] = jax.jit(fn)(trainable, state)
        # One checkpoint per block (none without remat).
        count = len(re.findall(r"= remat\\w*\\[",
                               str(jax.make_jaxpr(fn)(trainable, state))))
        assert count == (0 if policy == "none" else 2), (policy, count)
    for policy in ("block", "dots"):
        grads, seeds = results[policy]
        for a, b in zip(results["none"][0], grads):
            a, b = np.asarray(a), np.asarray(b)
            np.testing.assert_allclose(
                b, a, atol=2e-5 * max(np.abs(a).max(), 1e-3))
        # The dropout seeds moved on by the same draws.
        for a, b in zip(results["none"][1], seeds):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    print("JAX_REMAT_OK")
    """
)


@pytest.mark.slow
def test_jax_block_and_dots_gradients_equal_plain_ones():
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu",
               PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-c", JAX_SCRIPT], env=env, capture_output=True,
        text=True, timeout=300, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "JAX_REMAT_OK" in result.stdout
