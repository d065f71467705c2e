"""The AugReg and plain-ViT recipes: each holds its reference's numbers
and runs real training steps on tiny mock data."""

import math

import keras
import numpy as np
import pytest
from absl import flags

import keras_vit
from keras_vit.checkpoint import weights
from keras_vit.checkpoint.zoo import augreg, catalog
from keras_vit.training import train_lib
from tests import tiny
from tests.test_recipes import (
    ROOT,
    _comments_above_fields,
    _module,
    load,
    shrink,
)

I21K = f"{ROOT}/configs/augreg_i21k.py"
I1K = f"{ROOT}/configs/augreg_i1k.py"
PLAIN = f"{ROOT}/configs/plain_vit_i1k.py"
FINETUNE = f"{ROOT}/configs/augreg_finetune.py"


@pytest.mark.parametrize("aug,randaug,mixup", [
    ("none", (0, 0), 0.0), ("light1", (2, 0), 0.0), ("light2", (2, 10), 0.2),
    ("medium1", (2, 15), 0.2), ("medium2", (2, 15), 0.5),
    ("strong1", (2, 20), 0.5), ("strong2", (2, 20), 0.8),
])
def test_augreg_i21k_recipe(aug, randaug, mixup):
    c = load(I21K, f"variant=S/16,aug={aug},do=0.1,sd=0.1,wd=0.1")
    assert (c.input.pp.randaug_ops, c.input.pp.randaug_magnitude) == randaug
    assert c.input.mix.mixup_alpha == mixup and c.input.mix.cutmix_alpha == 0.0
    assert (c.model.dropout_rate, c.model.stochastic_depth_rate) == (.1, .1)
    o = c.optimizer
    sch = c.schedule
    assert (o.name, sch.lr, o.b1, o.b2) == ("adamw", 1e-3, 0.9, 0.999)
    # big_vision's absolute weight decay 1e-4 = 0.1 x the learning rate.
    assert o.weight_decay * sch.lr == pytest.approx(1e-4)
    assert (sch.warmup_steps, sch.decay_type) == (10_000, "cosine")
    assert c.input.batch_size == 4096 and c.trainer.grad_clip_norm == 1.0
    assert c.objective.loss == "sigmoid_xent"
    assert c.model.head_bias_init == -10.0
    assert c.input.pp.train == "pretrain" and c.model.image_size == 224
    # Evaluated as big_vision's vit_i21k.py: resize_small(256), then
    # central_crop(224).
    assert (c.input.pp.eval_resize_size, c.input.pp.eval_keep_aspect) == (
        256, True)
    assert c.model.pooling == "token" and c.model.posemb == "learn"
    assert c.model.representation_size is None
    assert c.trainer.total_steps == math.ceil(300 * 14_147_122 / 4096)
    assert load(I21K, "variant=B/16,do=0.0,sd=0.0,epochs=30"
                ).trainer.total_steps == math.ceil(30 * 14_147_122 / 4096)
    # Defaults: the variant's recommended released file's settings (the
    # file whose accuracy the config's docstring expects).
    for variant, (aug, wd, do) in {"B/16": ((2, 15), 0.1, 0.0),
                                   "Ti/16": ((0, 0), 0.03, 0.0),
                                   "L/16": ((2, 20), 0.1, 0.0),
                                   "R50+L/32": ((2, 15), 0.1, 0.1)}.items():
        d = load(I21K, f"variant={variant}")
        assert (d.input.pp.randaug_ops, d.input.pp.randaug_magnitude) == aug
        assert d.optimizer.weight_decay == wd
        assert d.model.dropout_rate == d.model.stochastic_depth_rate == do
    # B/8's (big_vision's howto-i21k-B/8): medium2, Mixup 0.5.
    b8 = load(I21K, "variant=B/8")
    assert (b8.input.mix.mixup_alpha, b8.optimizer.weight_decay,
            b8.model.dropout_rate) == (0.5, 0.1, 0.0)
    assert [m.name for m in keras_vit.list_models("augreg/B_8*")] == [
        "augreg/B_8-i21k-300ep-lr_0.001-aug_medium2-wd_0.1-do_0.0-sd_0.0"]
    with pytest.raises((ValueError, flags.Error), match="aug setting"):
        load(I21K, "aug=heavy")
    with pytest.raises((ValueError, flags.Error), match="No AugReg model"):
        load(I21K, "variant=H/14")


def test_augreg_i1k_and_plain_vit_recipes():
    c = load(I1K, "variant=B/16,aug=medium2")
    assert (c.input.dataset, c.evals.test.split) == (
        "imagenet2012", "validation")
    assert (c.input.pp.randaug_ops, c.input.pp.randaug_magnitude) == (2, 15)
    assert c.input.mix.mixup_alpha == 0.5 and c.input.batch_size == 4096
    assert c.trainer.total_steps == math.ceil(300 * 1_268_355 / 4096)
    assert c.objective.loss == "sigmoid_xent" and c.model.head_bias_init == -6.9
    # Without aug=, big_vision's vit_i1k.py choice for the size.
    for variant, (ops, magnitude, mixup) in {
            "Ti/16": (2, 0, 0.0), "S/32": (2, 15, 0.2),
            "B/16": (2, 15, 0.5)}.items():
        pp = load(I1K, f"variant={variant}").input
        assert (pp.pp.randaug_ops, pp.pp.randaug_magnitude,
                pp.mix.mixup_alpha) == (ops, magnitude, mixup), variant
    p = load(PLAIN)
    m = p.model
    assert (m.variant, m.pooling, m.posemb) == ("S/16", "gap", "sincos2d")
    assert (m.dropout_rate, m.stochastic_depth_rate) == (0.0, 0.0)
    assert m.representation_size == 384
    assert p.input.batch_size == 1024
    assert p.trainer.total_steps == math.ceil(90 * 1_268_355 / 1024)
    assert (p.input.pp.randaug_ops, p.input.pp.randaug_magnitude) == (2, 10)
    assert p.input.mix.mixup_alpha == 0.2
    assert p.objective.loss == "softmax_xent"
    # Both evaluate as big_vision's pp_eval: resize_small(256), then
    # central_crop(224).
    for run in (c, p):
        assert (run.input.pp.eval_resize_size, run.input.pp.eval_keep_aspect,
                run.model.image_size) == (256, True, 224)
    assert p.optimizer.weight_decay * p.schedule.lr == pytest.approx(1e-4)
    assert load(PLAIN, "epochs=300").trainer.total_steps == math.ceil(
        300 * 1_268_355 / 1024)
    # Its one argument, read as every config's: twice, or not a whole
    # number, is one line naming it.
    with pytest.raises((ValueError, flags.Error),
                       match="'epochs' given twice"):
        load(PLAIN, "epochs=300,epochs=90")
    for bad in ("abc", "1.5", "0"):
        with pytest.raises((ValueError, flags.Error),
                           match=f"epochs='{bad}': a whole"):
            load(PLAIN, f"epochs={bad}")
    with pytest.raises((ValueError, flags.Error),
                       match="Unknown config argument 'ep'"):
        load(PLAIN, "ep=3")


def test_augreg_finetune_recipe():
    c = load(FINETUNE, "dataset=imagenet2012,lr=0.03")
    assert c.model.variant == "B/16"
    assert c.init.model == augreg.url(
        "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0")
    o = c.optimizer
    sch = c.schedule
    assert (o.name, o.momentum, o.weight_decay, sch.lr) == (
        "sgd", 0.9, 0.0, 0.03)
    assert (c.model.image_size, c.input.pp.train, c.model.dropout_rate,
            c.trainer.total_steps) == (384, "pretrain", 0.0, 20_000)
    # As the released ImageNet fine-tunings: no Polyak averaging, and by
    # default each model's own learning rate (the file names': lr_0.03
    # for B/16, lr_0.01 for L/16).
    assert c.trainer.ema_decay == 0.0
    assert load(FINETUNE, "dataset=imagenet2012").schedule.lr == 0.03
    l16 = load(FINETUNE, "name=L_16-i21k-300ep-lr_0.001-aug_strong1-wd_0.1-"
               "do_0.0-sd_0.0,dataset=imagenet2012")
    assert (l16.schedule.lr, l16.trainer.ema_decay) == (0.01, 0.0)
    assert catalog.lookup("augreg/L_16-i21k-300ep-lr_0.001-aug_strong1-wd_"
                          "0.1-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.01"
                          "-res_384") is not None
    # The resolution decides the rematerialisation, as in finetune.
    assert load(FINETUNE, "res=512,dataset=cifar100").model.remat == "block"
    small = load(FINETUNE, "name=R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_"
                 "0.03-do_0.0-sd_0.0,dataset=cifar100,res=224")
    assert small.model.variant == "R+Ti/16"
    assert small.model.image_size == 224
    # No dropout for an L/16 either: AugReg fine-tunes without it.
    large = load(FINETUNE, "name=L_16-i21k-300ep-lr_0.001-aug_medium1-wd_"
                 "0.1-do_0.1-sd_0.1,dataset=cifar100")
    assert large.model.dropout_rate == 0.0
    with pytest.raises((ValueError, flags.Error),
                       match="pre-trained AugReg file"):
        load(FINETUNE, "name=ViT-B_16")


@pytest.mark.parametrize("path", [I21K, I1K, PLAIN, FINETUNE])
def test_recipes_say_how_to_run_them_and_comment_their_fields(path):
    doc = _module(path).__doc__
    assert "python train.py" in doc and "Expected" in doc
    assert f"--config=configs/{path.rsplit('/', 1)[1]}" in doc
    if path != FINETUNE:  # the rest is configs/finetune.py's
        _comments_above_fields(path)


def _mock(fn, *args):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=8,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        return fn(*args)


@pytest.mark.slow
@pytest.mark.parametrize("path,arg", [
    (I21K, "variant=S/16,aug=strong2,do=0.1,sd=0.1"),
    (I1K, "variant=B/16,aug=medium2"),
    (PLAIN, None),
])
def test_recipes_run_shrunk(tmp_path, path, arg):
    """Two real steps of each recipe (its augmentation, loss, head bias,
    pooling and position embeddings) on a tiny model and mock data."""
    config = shrink(load(path, arg), eval_every_steps=0)
    config.model.num_layers = 2
    if config.model.representation_size:
        config.model.representation_size = 16
    metrics = _mock(train_lib.train_and_evaluate, config,
                    str(tmp_path / "run"))
    assert metrics["steps"] == 2 and math.isfinite(metrics["test_loss"])


@pytest.mark.slow
def test_augreg_finetune_runs_from_a_file_named_like_augreg(tmp_path):
    keras.utils.set_random_seed(0)
    source = keras_vit.create_model("R+Ti/16", num_classes=5,
                                    image_size=64)
    name = "R_Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
    npz = str(tmp_path / f"{name}.npz")
    weights.save_npz(source, npz)
    config = load(FINETUNE, f"init={npz},dataset=cifar10,res=64")
    assert config.model.variant == "R+Ti/16" and config.init.model == npz
    tiny.set_fields(config, dict(
        batch_size=4, eval_batch_size=4, total_steps=2, steps_per_loop=1,
        log_every_steps=1, eval_every_steps=0, checkpoint_every_steps=0,
        jit_compile=False, shuffle_buffer=8, train_split="train",
        val_split="test", eval_split="test", cache_train=False,
    ))
    config.schedule.warmup_steps = 1
    config.input.pp.resize_size = None
    metrics = _mock(train_lib.train_and_evaluate, config,
                    str(tmp_path / "ft"))
    assert metrics["steps"] == 2 and math.isfinite(metrics["test_loss"])
    kernel = source.get_layer("resnet").conv_root.kernel.numpy()
    restored = keras_vit.load_model(str(tmp_path / "ft"))
    # Two SGD steps moved the stem a little from the checkpoint's.
    moved = restored.get_layer("resnet").conv_root.kernel.numpy()
    assert np.abs(moved - kernel).max() < 0.05
