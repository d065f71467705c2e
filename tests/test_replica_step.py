"""The training and evaluation replica steps as a Cloud TPU runs them,
proven as far as a CPU can (docs/verified.md says what only a TPU can):

- every replica draws dropout and stochastic-depth masks of its own,
  reproducible from the seed, and a resumed run draws the masks of the
  uninterrupted run; Mixup/CutMix and MPP corruption differ per replica
  too;
- the whole replica step compiles with XLA (`tf.function(jit_compile=
  True)`, what TPUStrategy does with it) for recipe-shaped tiny configs
  with dropout on: on one replica the step end to end, update included;
  on 2 replicas everything before the cross-replica reduction (a
  MirroredStrategy cannot put its merge_call inside XLA; a TPU can), and
  the evaluation step;
- TPUStrategy gets no jit-compiled function nested inside its own
  computation;
- every element of the training and evaluation data sets, distributed to
  2 replicas, has a fully defined shape.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit.build import build_run
from keras_vit.data import pipeline as input_pipeline
from keras_vit.training import distribute, replica_rng, train_lib
from tests import tiny, xla_cpu
from tests.strategies import two_cpu_mirrored

# Dropout everywhere the recipes put it, stochastic depth on both blocks.
# A head that does not start at zero and no warm-up, so that the masks
# show in the loss and the first update moves the weights.
RANDOM = {"model.dropout_rate": 0.1, "model.attention_dropout_rate": 0.1,
          "model.stochastic_depth_rate": 0.2, "model.num_layers": 2,
          "model.head_zero_init": False, "schedule.warmup_steps": 0}

# Tiny configs shaped like the recipes: AugReg's ViT (block remat, gradient
# accumulation, Mixup and CutMix, skipped non-finite steps, EMA), masked
# patch prediction, and a hybrid R50+ViT in bf16.
RECIPES = {
    "augreg": {"model.remat": "block",
               "trainer.accumulation_steps": 2,
               "input.mix.mixup_alpha": 0.2, "input.mix.cutmix_alpha": 1.0,
               "trainer.skip_nonfinite": True, "trainer.ema_decay": 0.99},
    "mpp": {"objective.mpp.enabled": True, "trainer.accumulation_steps": 2},
    "hybrid": {"trainer.dtype": "bfloat16", "model.resnet_layers": (1,),
               "model.patch_size": 1, "model.image_size": 16,
               "input.pp.resize_size": 18},
}
BATCH = 16


def _config(recipe="augreg", overrides=None):
    return tiny.digits_config({**RANDOM, **RECIPES[recipe],
                               **(overrides or {})})


def _trainer(config, strategy):
    keras.utils.set_random_seed(int(config.seed))
    classes = train_lib.num_classes_of(config.model, config.input)
    with strategy.scope():
        model, optimizer = build_run(config, classes)
    return train_lib.build_trainer(
        config.trainer, config.objective, model, optimizer, strategy,
        num_classes=classes, global_batch=int(config.input.batch_size))


def _datasets(config, strategy):
    inp, run = tiny.pipeline(config)
    train = strategy.distribute_datasets_from_function(
        lambda ctx: input_pipeline.train_dataset(inp, run, BATCH, ctx))
    evaluation = strategy.distribute_datasets_from_function(
        lambda ctx: input_pipeline.eval_dataset(inp, run, "test", BATCH,
                                                ctx))
    return train, evaluation


def _local(strategy, values):
    return [np.asarray(v) for v in strategy.experimental_local_results(values)]


# --------------------------------------------------- per-replica masks
def _replica_losses(trainer, strategy, batch):
    """Each replica's loss sum of one training step on the SAME batch."""

    @tf.function
    def step():
        return strategy.run(trainer._train_step_fn, args=batch)

    loss_sum, _, _, _ = step()
    return _local(strategy, loss_sum)


def _same_batch(config):
    """Replica 0's first training batch: given to both replicas alike."""
    strategy = two_cpu_mirrored()
    train, _ = _datasets(config, strategy)
    return tf.nest.map_structure(
        lambda v: strategy.experimental_local_results(v)[0], next(iter(train)))


def test_replicas_draw_their_own_dropout_masks_from_the_seed():
    """The same batch on both replicas: with dropout and stochastic depth,
    their losses differ (one shared seed state gave equal ones); the same
    seed and step give the same losses again, another seed others."""
    strategy = two_cpu_mirrored()
    config = tiny.digits_config(RANDOM)
    batch = _same_batch(config)
    first = _replica_losses(_trainer(config, strategy), strategy, batch)
    assert first[0] != first[1]
    again = _replica_losses(_trainer(config, strategy), strategy, batch)
    np.testing.assert_allclose(again, first, rtol=1e-6)
    config.seed = 1
    other = _replica_losses(_trainer(config, strategy), strategy, batch)
    assert not np.allclose(other, first)


def test_masks_depend_on_the_step_replica_and_micro_batch():
    keys = {(step, replica): tuple(replica_rng.step_key(step, replica)
                                   .numpy())
            for step in range(3) for replica in range(2)}
    assert len(set(keys.values())) == len(keys)
    states = [keras.Variable([7, 0], dtype="int64", trainable=False)]
    key = replica_rng.step_key(0, 0)
    micro = [tuple(replica_rng.generator_states(states, key, i)[0].numpy())
             for i in range(3)]
    assert len(set(micro)) == 3
    assert {m[0] for m in micro} == {7}  # the generator keeps its seed


@pytest.mark.slow
def test_resumed_run_draws_the_masks_of_the_uninterrupted_run(tmp_path):
    """2 replicas, dropout and stochastic depth: a trainer restored from
    the checkpoint of step 8 draws, on the same batch, the masks of the
    run that never stopped (they come from the seed and the checkpointed
    step; the generators' own counters are in no checkpoint)."""
    strategy = two_cpu_mirrored()
    config = tiny.digits_config(RANDOM)
    batch = _same_batch(config)
    straight = _trainer(config, strategy)
    train, _ = _datasets(config, strategy)
    straight.train(iter(train), 8)
    path = tf.train.Checkpoint(model=straight.model,
                               optimizer=straight.optimizer).write(
        str(tmp_path / "ckpt"))
    expected = _replica_losses(straight, strategy, batch)
    resumed = _trainer(config, strategy)
    tf.train.Checkpoint(model=resumed.model,
                        optimizer=resumed.optimizer).read(path)
    assert resumed.step == 8
    np.testing.assert_allclose(
        _replica_losses(resumed, strategy, batch), expected, rtol=1e-6)
    assert expected[0] != expected[1]


def test_mix_and_mpp_corruption_differ_per_replica():
    """Mixup/CutMix and MPP corruption are drawn per input batch, and each
    replica gets a batch of its own: their draws differ, and the same seed
    draws them again."""
    strategy = two_cpu_mirrored()

    def draws(config):
        train, _ = _datasets(config, strategy)
        images, labels = next(iter(train))
        if config.objective.mpp.enabled:
            return _local(strategy, images["mpp_mode"])
        # Each row: lambda and 1 - lambda (Mixup), or the box's area.
        return [np.sort(r, -1)[:, -1] for r in _local(strategy, labels)]

    for config in (_config(), _config("mpp")):
        first = draws(config)
        assert not np.array_equal(first[0], first[1])
        for a, b in zip(first, draws(config)):
            np.testing.assert_array_equal(a, b)


# --------------------------------------------- the step compiled whole
@pytest.mark.slow
@xla_cpu.needed
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_whole_replica_step_compiles_with_xla(recipe):
    """On one replica (where no merge_call is needed): the training replica
    step end to end, all-reduce, clipping, the skip-or-apply update and
    the EMA included, as one XLA computation; and the evaluation step
    (slow: XLA compiles on a CPU for about 15-40 s)."""
    config = _config(recipe)
    strategy = tf.distribute.get_strategy()
    trainer = _trainer(config, strategy)
    train, evaluation = _datasets(config, strategy)
    images, labels = next(iter(train))
    step = tf.function(trainer._train_step_fn, jit_compile=True)
    before = [v.numpy() for v in trainer.model.trainable_variables]
    loss_sum, _, grad_norm, finite = step(images, labels)
    assert float(finite) == 1.0 and np.isfinite(float(loss_sum))
    assert float(grad_norm) > 0 and trainer.step == 1
    after = [v.numpy() for v in trainer.model.trainable_variables]
    assert any(not np.array_equal(a, b) for a, b in zip(before, after))
    scores = tf.function(trainer._eval_replica_fn, jit_compile=True)(
        *next(iter(evaluation)))
    assert float(scores[3]) == BATCH


@pytest.mark.slow
@xla_cpu.needed
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_replica_steps_compile_with_xla_on_two_replicas(recipe):
    """2 replicas, jit_compile on: each replica's forward and backward
    passes (micro-batches, dropout masks and all) are one XLA computation,
    the training loop runs them, the replicas' masks differ, and the
    evaluation step compiles too."""
    config = _config(recipe, {"trainer.jit_compile": True})
    strategy = two_cpu_mirrored()
    trainer = _trainer(config, strategy)
    assert trainer.jit_compile
    train, evaluation = _datasets(config, strategy)
    metrics = trainer.train(iter(train), 2)
    assert metrics["nonfinite_steps"] == 0 and np.isfinite(metrics["loss"])
    # The compiled step draws each replica's own masks too.
    losses = _replica_losses(trainer, strategy, _same_batch(config))
    assert losses[0] != losses[1]
    evaluate = tf.function(trainer._eval_replica_fn, jit_compile=True)

    @tf.function
    def scores(batch):
        return strategy.run(lambda *b: evaluate(*b), args=batch)

    counts = _local(strategy, scores(next(iter(evaluation)))[3])
    assert [float(c) for c in counts] == [BATCH / 2] * 2


def test_no_jit_function_is_nested_inside_a_tpu_computation(monkeypatch):
    tpu = object.__new__(tf.distribute.TPUStrategy)
    assert distribute.is_tpu(tpu)
    assert not distribute.is_tpu(two_cpu_mirrored())
    monkeypatch.setattr(distribute, "is_tpu", lambda strategy: True)
    trainer = _trainer(_config("augreg", {"trainer.jit_compile": True}),
                       tf.distribute.get_strategy())
    assert not trainer.jit_compile
    assert not hasattr(trainer._replica_grads, "experimental_get_tracing_count")


# ------------------------------------------------------- static shapes
@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_distributed_elements_have_static_shapes(recipe):
    """What TPUStrategy needs: every element of the training and the
    evaluation data set, after distribution to 2 replicas, has a fully
    defined shape."""
    train, evaluation = _datasets(_config(recipe), two_cpu_mirrored())
    for name, dataset in (("train", train), ("eval", evaluation)):
        specs = tf.nest.flatten(dataset.element_spec, expand_composites=True)
        assert len(specs) >= 4, (name, specs)
        undefined = [s for s in specs if not s.shape.is_fully_defined()]
        assert not undefined, (name, undefined)
