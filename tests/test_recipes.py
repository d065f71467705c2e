"""The paper's recipes as configs: each loads for each argument, is locked,
holds the paper's numbers and every key the trainer reads, and runs a few
steps when shrunk (mock TFDS data); bfloat16 mixed precision; Polyak/EMA
evaluation."""

import importlib.util
import math
import os
import re

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from ml_collections import config_flags

import keras_vit
from keras_vit import build, keras_compat, optim
from keras_vit import config as config_lib
from keras_vit.architecture import CONFIG_FIELDS
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.posemb import resize_position_embedding
from keras_vit.training import model_init, train_lib
from keras_vit.training.trainer import Trainer
from tests import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAIN = os.path.join(ROOT, "configs", "imagenet21k_pretrain.py")
FINETUNE = os.path.join(ROOT, "configs", "finetune.py")
DIGITS = os.path.join(ROOT, "configs", "digits.py")


def _module(path):
    spec = importlib.util.spec_from_file_location(
        "recipe_" + os.path.basename(path)[:-3], path
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(path, arg=None, *overrides):
    """The config as train.py gets it: through config_flags, locked."""
    target = path + (f":{arg}" if arg else "")
    argv = ["train.py", f"--config={target}", *overrides]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=values,
                                    lock_config=True, sys_argv=argv)
    values(argv)
    return values.config


PRETRAIN_ARGS = ["B/16", "L/16", "B/32", "L/32", "variant=L/16",
                 "variant=B/16,dataset=imagenet21k_tfds"]
FINETUNE_ARGS = [
    "dataset=cifar100,variant=B/16", "dataset=cifar10,variant=L/16",
    "dataset=imagenet2012,variant=L/16", "dataset=oxford_iiit_pet",
    "dataset=oxford_flowers102,variant=B/32", "dataset=vtab/dtd",
    "dataset=cifar10,init=/runs/i21k_b16", "dataset=cifar10,lr=0.01",
]


@pytest.mark.parametrize("path,arg", [(PRETRAIN, a) for a in PRETRAIN_ARGS]
                         + [(FINETUNE, a) for a in FINETUNE_ARGS])
def test_recipe_loads_locked_with_overrides(path, arg):
    config = load(path, arg, "--config.trainer.total_steps=7")
    assert config.is_locked and config.trainer.total_steps == 7
    with pytest.raises(AttributeError):
        config.totl_steps = 3  # a misspelt field is an error
    with pytest.raises((KeyError, AttributeError, flags.Error)):
        load(path, arg, "--config.optimizer.learning_rate=0.1")


def _keys_read(source, variable):
    """Names `variable.get("x")` / `variable.x` reads in a source file."""
    with open(os.path.join(ROOT, "keras_vit", source)) as f:
        text = f.read()
    gets = re.findall(rf"\b{variable}\.get\(\s*\"(\w+)\"", text)
    # "config.json" (a run directory's file) and "config.py" are not fields,
    # nor is a module path ("keras_vit.export.saved_model").
    attrs = re.findall(
        rf"(?<!keras_vit\.)\b{variable}\.(?!json\b|py\b)([a-z_]\w*)\b"
        r"(?!\s*\()", text
    )
    return set(gets) | set(attrs)


# What each component reads, by the name its code gives the section it
# takes: (module, variable) -> the section of the run config.
SECTION_READERS = {
    ("data/pipeline.py", "inp"): "input",
    ("data/sources.py", "inp"): "input",
    ("data/checks.py", "inp"): "input",
    ("data/preprocessing.py", "cfg"): "input.pp",
    ("data/masking.py", "opts"): "objective.mpp",
    ("build.py", "model_config"): "model",
    ("build.py", "mpp_config"): "objective.mpp",
    ("optim.py", "opt_config"): "optimizer",
    ("optim.py", "schedule_config"): "schedule",
    ("training/train_lib.py", "trainer_config"): "trainer",
    ("training/train_lib.py", "objective"): "objective",
    ("training/model_init.py", "init"): "init",
    ("training/pacing.py", "trainer_config"): "trainer",
    ("training/pacing.py", "log"): "log",
    ("training/pacing.py", "checkpoints"): "checkpoints",
    ("training/loop.py", "entry"): "evals.test",
    ("commands/train.py", "export"): "export",
}


def _all_keys_read():
    """{section: the fields its components read}, and "" for the
    sections the orchestrator (train_and_evaluate) reads."""
    read = {"": _keys_read("training/train_lib.py", "config")}
    for (source, variable), section in SECTION_READERS.items():
        read.setdefault(section, set()).update(_keys_read(source,
                                                          variable))
    return read


@pytest.mark.parametrize("path,arg", [(PRETRAIN, "B/16"),
                                      (FINETUNE, "dataset=cifar10"),
                                      (FINETUNE, "dataset=vtab/dtd")])
def test_recipe_has_every_key_the_trainer_reads(path, arg):
    config = load(path, arg)
    read = _all_keys_read()
    assert {"trainer", "input", "model", "checkpoints",
            "evals"} <= read[""]
    assert {"total_steps", "steps_per_loop"} <= read["trainer"]
    assert {"train_split", "shuffle_buffer"} <= read["input"]
    # Fields of the other optimizers are not needed.
    name = config.optimizer.name
    read["optimizer"] -= (
        {"b1", "b2", "no_decay"} if name == "sgd" else {"momentum", "nesterov"}
    )
    for section, keys in read.items():
        node = config
        for part in filter(None, section.split(".")):
            node = node[part]
        missing = sorted(k for k in keys if k not in node)
        assert not missing, f"config.{section or ''} lacks {missing}"
    assert set(config.model) <= set(CONFIG_FIELDS) | {"image_size",
                                                         "num_classes"}


def _comments_above_fields(path):
    """Every override of the base config (keras_vit/config_schema.py, where each
    field has its own comment) says why above it, or follows another
    override of the same commented group."""
    lines = open(path).read().splitlines()
    fields = 0
    for i, line in enumerate(lines):
        match = re.match(r"( +)c\.[\w.]+(, c\.[\w.]+)* = ", line)
        if match:
            fields += 1
            above = lines[i - 1].strip()
            assert above.startswith(("#", "c.")), line
    assert fields >= 10


def test_recipes_comment_every_field():
    for path in (PRETRAIN, FINETUNE):
        _comments_above_fields(path)
        doc = _module(path).__doc__
        assert "python train.py" in doc
        assert f"--config=configs/{os.path.basename(path)}:" in doc


@pytest.mark.parametrize("variant,hidden", [("B/16", 768), ("L/16", 1024)])
def test_pretrain_recipe_has_the_paper_numbers(variant, hidden):
    """Paper Table 3 and what the authors state about the released
    ImageNet-21k runs (google-research/vision_transformer #2 and #34)."""
    c = load(PRETRAIN, variant)
    o = c.optimizer
    sch = c.schedule
    assert (o.name, o.b1, o.b2) == ("adamw", 0.9, 0.999)
    assert (sch.lr, o.weight_decay) == (1e-3, 0.03)  # Table 3, ImageNet-21k
    assert (sch.warmup_steps, sch.decay_type) == (10_000, "linear")
    assert sch.end_lr == 1e-5  # linear decay to 1e-5, not to 0
    assert c.objective.loss == "sigmoid_xent"
    assert c.model.head_bias_init == -10.0
    assert c.input.batch_size == 4096 and c.trainer.grad_clip_norm == 1.0
    assert c.model.variant == variant
    assert (c.model.dropout_rate, c.model.attention_dropout_rate) == (0.1, 0)
    assert c.model.representation_size == hidden  # pre-logits layer
    assert c.model.image_size == 224 and c.input.pp.train == "pretrain"
    assert tuple(c.input.pp.area_range) == (0.05, 1.0) and c.input.pp.flip
    # 90 epochs of 14,197,122 - 50,000 held-out images at batch 4096.
    assert c.trainer.total_steps == 310_850 == math.ceil(90 * 14_147_122 / 4096)
    assert c.trainer.dtype == "bfloat16" and c.objective.label_smoothing == 0.0
    schedule = build.build_run(c, 1)[1]._learning_rate
    assert float(schedule(10_000)) == pytest.approx(1e-3)
    assert float(schedule(310_850)) == pytest.approx(1e-5)
    assert float(schedule(10_000 + (310_850 - 10_000) // 2)) == \
        pytest.approx((1e-3 + 1e-5) / 2, rel=1e-4)
    # The head starts at -10 (sigmoid ~4.5e-5 per class), the pre-logits
    # layer's bias at 0.
    small = load(PRETRAIN, variant)
    small.model.update(dict(
        variant=None, patch_size=4, hidden_size=8, num_layers=1,
        num_heads=2, mlp_dim=8, representation_size=8,
    ))
    small.model.image_size, small.trainer.dtype = 8, "float32"
    model = build.build_run(small, num_classes=5)[0]
    head = model.get_layer("head")
    np.testing.assert_array_equal(head.bias.numpy(), np.full(5, -10.0))
    logits = model(np.zeros((1, 8, 8, 3), "float32"), training=False)
    assert np.allclose(logits.numpy(), -10.0)


def test_pretrain_weight_decay_skips_biases_norms_and_embeddings():
    opt = build.build_run(load(PRETRAIN, "B/16"), 1)[1]
    model = keras_vit.create_model(
        None, num_classes=3, image_size=8, patch_size=4, hidden_size=8,
        num_layers=1, num_heads=2, mlp_dim=8, representation_size=8,
    )
    opt.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables
               if opt._use_weight_decay(v)}
    kept = {v.path for v in model.trainable_variables} - decayed
    assert decayed and all(p.endswith("kernel") for p in decayed)
    assert any("pos_embedding" in p for p in kept)
    assert any(p.endswith("cls") for p in kept)
    assert any(p.endswith("bias") for p in kept)
    assert any(p.endswith(("gamma", "beta")) for p in kept)


@pytest.mark.parametrize(
    "dataset,steps,test_split",
    [("imagenet2012", 20_000, "validation"), ("cifar10", 10_000, "test"),
     ("cifar100", 10_000, "test"), ("oxford_iiit_pet", 500, "test"),
     ("oxford_flowers102", 500, "test")],
)
def test_finetune_recipe_has_the_paper_numbers(dataset, steps, test_split):
    c = load(FINETUNE, f"dataset={dataset},variant=L/16")
    o = c.optimizer
    sch = c.schedule
    assert (o.name, o.momentum, sch.decay_type, o.weight_decay) == (
        "sgd", 0.9, "cosine", 0.0)
    assert c.input.batch_size == 512 and c.trainer.grad_clip_norm == 1.0
    assert c.trainer.total_steps == steps and c.evals.test.split == test_split
    table4 = _module(FINETUNE).DATASETS[dataset]["lrs"]
    assert sch.lr in table4
    if dataset == "imagenet2012":
        # Appendix B.1.1: L/16 at 512 with Polyak averaging 0.9999.
        assert c.model.image_size == 512
        assert c.trainer.ema_decay == 0.9999
        b16 = load(FINETUNE, f"dataset={dataset},variant=B/16")
        assert b16.model.image_size == 384 and b16.trainer.ema_decay == 0.9999
        assert load(FINETUNE, "dataset=imagenet2012,variant=H/14"
                    ).model.image_size == 518
    else:
        assert c.trainer.ema_decay == 0.0
        assert c.model.image_size == 384
    # The official fine-tuning code's augmentation: an Inception-style crop
    # (area 5% to 100%) resized to the resolution, and a flip.
    assert c.input.pp.train == "pretrain" and c.input.pp.flip
    assert tuple(c.input.pp.area_range) == (0.05, 1.0)
    assert c.model.head_zero_init and c.model.representation_size is None
    assert c.init.model == "gs://vit_models/imagenet21k/ViT-L_16.npz"
    # Dropout as the official model configs fine-tune: 0.1 for L/16.
    assert c.model.dropout_rate == 0.1
    assert load(FINETUNE, f"dataset={dataset},variant=B/16"
                ).model.dropout_rate == 0.0
    if dataset.startswith("oxford"):  # big_vision's transfer.py rows
        assert c.input.train_split == "train[:90%]"
        assert c.evals.test.val_split == "train[90%:]"
        assert c.schedule.warmup_steps == 100
    assert build.build_run(c, 1)[1].__class__.__name__ == "MomentumSGD"


def test_finetune_vtab_task_and_arguments():
    c = load(FINETUNE, "dataset=vtab/dtd,variant=B/16")
    assert (c.trainer.total_steps, c.schedule.lr) == (2_500, 0.01)
    assert c.input.vtab_task == "dtd" and c.input.dataset.startswith("dtd")
    assert c.input.pp.train == "eval" and not c.input.pp.flip
    # Trained on train800val200: scored on test once, at the end (val200
    # is training data; the protocol selects on it only beside train800).
    assert "+" in c.input.train_split  # train800 + val200
    assert (c.evals.test.val_split, c.evals.test.every_steps) == (None, 0)
    assert c.evals.test.split.startswith("test")
    own = load(FINETUNE, "dataset=cifar10,init=/runs/pre")
    assert own.init.model == "/runs/pre"
    keras_file = load(FINETUNE, "dataset=cifar10,init=/m/model.keras")
    assert keras_file.init.model == "/m/model.keras"
    assert load(FINETUNE, "dataset=cifar10,lr=0.003").schedule.lr == 0.003
    with pytest.raises(ValueError, match="No fine-tuning recipe"):
        _module(FINETUNE).get_config("dataset=mnist")
    for empty in ("vtab", "vtab/"):  # no task: refused, not left to TFDS
        with pytest.raises(ValueError, match=r"names no VTAB task: use "
                           r"vtab/<task> \(one of caltech101"):
            _module(FINETUNE).get_config(f"dataset={empty}")
    with pytest.raises(ValueError, match="key=value"):
        _module(FINETUNE).get_config("cifar10")
    with pytest.raises(ValueError, match="Table 3"):
        _module(PRETRAIN).get_config("H/14")
    with pytest.raises(ValueError, match="Unknown config argument"):
        _module(PRETRAIN).get_config("variant=B/16,epochs=7")


# ------------------------------------------------------------ shrunk runs
TINY = dict(variant=None, patch_size=8, hidden_size=16, num_layers=1,
            num_heads=2, mlp_dim=16)


def shrink(config, **extra):
    """Tiny model, tiny batch, two steps, the mock TFDS cifar10 splits."""
    config.model.update(TINY)
    tiny.set_fields(config, dict(
        image_size=32, batch_size=4, eval_batch_size=4, total_steps=2,
        steps_per_loop=1, log_every_steps=1, eval_every_steps=1,
        checkpoint_every_steps=0, jit_compile=False, shuffle_buffer=8,
        dataset="cifar10", train_split="train", val_split="test",
        eval_split="test",
    ))
    config.schedule.warmup_steps = 1
    return tiny.set_fields(config, extra)


def _capture_model(monkeypatch):
    built = []

    def record(*args, **kwargs):
        model, optimizer = build.build_run(*args, **kwargs)
        built.append(model)
        return model, optimizer

    monkeypatch.setattr(train_lib, "build_run", record)
    return built


@pytest.mark.slow
def test_pretrain_recipe_runs_shrunk_in_bfloat16(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    config = shrink(load(PRETRAIN, "B/16"))
    config.model.representation_size = 16
    assert config.trainer.dtype == "bfloat16"
    built = _capture_model(monkeypatch)
    with tfds.testing.mock_data(num_examples=8,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        metrics = train_lib.train_and_evaluate(config, str(tmp_path / "run"))
    assert metrics["steps"] == 2 and math.isfinite(metrics["test_loss"])
    model = built[0]
    # Mixed precision: float32 variables, bfloat16 compute inside, float32
    # logits.
    assert all(v.dtype == "float32" for v in model.weights)
    assert model.get_layer("Transformer").compute_dtype == "bfloat16"
    assert model.get_layer("pre_logits").compute_dtype == "bfloat16"
    logits = model(tf.zeros([2, 32, 32, 3]))
    assert logits.dtype == tf.float32
    inner = keras.Model(model.input, model.get_layer("Transformer").output)
    assert inner(tf.zeros([1, 32, 32, 3])).dtype == tf.bfloat16
    losses = tiny.train_losses(tmp_path / "run")
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert keras.config.dtype_policy().name == "float32"  # restored


def test_finetune_recipe_runs_shrunk_from_an_npz(tmp_path, monkeypatch):
    """A tiny 'pre-trained' model at 16 x 16 (2 x 2 grid, 10 classes, with
    a pre-logits layer) fine-tunes at 32 x 32 (4 x 4 grid) on 10 classes:
    its head, which fits, starts at zero all the same."""
    import tensorflow_datasets as tfds

    keras.utils.set_random_seed(3)
    source = keras_vit.create_model(
        None, num_classes=10, image_size=16, representation_size=16,
        head_zero_init=False, **{k: v for k, v in TINY.items() if v},
    )
    npz = str(tmp_path / "pre.npz")
    checkpoint.save_npz(source, npz)
    config = shrink(load(FINETUNE, f"dataset=cifar10,init={npz}"),
                    eval_every_steps=0)
    assert config.init.model == npz
    snapshot = {}
    initialise = model_init.initialise_from

    def record(config, model, class_names=None):
        initialise(config, model, class_names)
        snapshot.update({v.path: v.numpy() for v in model.weights})

    monkeypatch.setattr(model_init, "initialise_from", record)
    with tfds.testing.mock_data(num_examples=8,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        metrics = train_lib.train_and_evaluate(config, str(tmp_path / "ft"))
    assert metrics["steps"] == 2 and math.isfinite(metrics["test_loss"])
    old = source.get_layer("posembed_input").pos_embedding.numpy()
    new = [v for k, v in snapshot.items() if k.endswith("pos_embedding")][0]
    assert new.shape == (1, 17, 16)
    np.testing.assert_allclose(new, resize_position_embedding(old, 4, 2),
                               atol=1e-6)
    heads = [v for k, v in snapshot.items() if k.startswith("head/")]
    assert heads and all(not h.any() for h in heads)  # zero-initialised
    assert not any(k.startswith("pre_logits") for k in snapshot)
    kernel = source.get_layer("embedding").conv.kernel.numpy()
    assert any(np.array_equal(v, kernel) for v in snapshot.values())


@pytest.mark.slow
@pytest.mark.parametrize("res", [384, 512])
def test_finetune_recipe_runs_at_high_resolution(res, tmp_path, monkeypatch):
    """The recipe at the paper's fine-tuning resolutions, with 16 x 16
    patches (577 and 1,025 tokens): a 'pre-trained' model at 32 x 32 (a
    2 x 2 grid) fine-tunes in bfloat16 with rematerialised blocks, XLA on,
    its position embeddings resized to the 24 x 24 / 32 x 32 grid."""
    import tensorflow_datasets as tfds

    tiny16 = {k: v for k, v in TINY.items() if v}
    tiny16["patch_size"] = 16
    keras.utils.set_random_seed(3)
    source = keras_vit.create_model(None, num_classes=5, image_size=32,
                                    head_zero_init=False, **tiny16)
    npz = str(tmp_path / "pre.npz")
    checkpoint.save_npz(source, npz)
    arg = f"dataset=cifar10,init={npz},res={res},remat=block"
    config = shrink(load(FINETUNE, arg, "--config.trainer.dtype=bfloat16"),
                    eval_every_steps=0, image_size=res, jit_compile=True)
    config.model.patch_size = 16
    built = _capture_model(monkeypatch)
    start = {}
    initialise = model_init.initialise_from

    def record(config, model, class_names=None):
        initialise(config, model, class_names)
        layer = model.get_layer("posembed_input")
        start["posemb"] = layer.pos_embedding.numpy()

    monkeypatch.setattr(model_init, "initialise_from", record)
    with tfds.testing.mock_data(num_examples=8,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        metrics = train_lib.train_and_evaluate(config, str(tmp_path / "ft"))
    assert metrics["steps"] == 2 and math.isfinite(metrics["test_loss"])
    losses = tiny.train_losses(tmp_path / "ft")
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    model = built[0]
    encoder = model.get_layer("Transformer")
    assert encoder.remat == "block" and encoder.compute_dtype == "bfloat16"
    assert tuple(model.input.shape[1:3]) == (res, res)
    grid = res // 16
    old = source.get_layer("posembed_input").pos_embedding.numpy()
    assert start["posemb"].shape == (1, grid * grid + 1, 16)
    np.testing.assert_allclose(start["posemb"],
                               resize_position_embedding(old, grid, 2),
                               atol=1e-6)


def test_finetune_recipe_rematerialises_above_384():
    assert load(FINETUNE, "dataset=cifar10").model.remat == "none"
    high = load(FINETUNE, "dataset=imagenet2012,variant=L/16,res=512")
    assert (high.model.image_size, high.model.remat) == (512, "block")
    assert load(FINETUNE, "dataset=cifar10,res=512,remat=none").model.remat \
        == "none"


def test_init_from_two_sources_is_refused(tmp_path):
    # One field, config.init.model, names the source; a config.json of an
    # older version that set two of init.npz / keras_model / workdir is
    # refused, one is mapped to init.model.
    old = {"init": {"npz": "/m/a.npz", "keras_model": None,
                    "workdir": str(tmp_path)}}
    with pytest.raises(ValueError, match="keep one, as config.init.model"):
        config_lib.complete(old)
    old["init"]["npz"] = None
    assert config_lib.complete(old).init.model == str(tmp_path)
    # Beside init.model (set in the config.json since), another model is
    # refused, not dropped; the same one is the same.
    both = {"init": {"model": "/runs/a", "workdir": str(tmp_path)}}
    with pytest.raises(ValueError, match=r"config.init.model \(/runs/a\) "
                       r"and config.init.workdir .* name two models"):
        config_lib.complete(both)
    both["init"]["model"] = str(tmp_path)
    assert config_lib.complete(both).init.model == str(tmp_path)
    config = shrink(load(FINETUNE, "dataset=cifar10"))
    with pytest.raises(AttributeError):
        config.init.workdir = str(tmp_path)


# -------------------------------------------------------------- Polyak
def test_ema_evaluation_uses_the_averages():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (48, 16, 16, 3)).astype("float32")
    y = rng.integers(0, 4, 48).astype("int32")
    strategy = tf.distribute.get_strategy()

    def model_fn():
        return keras_vit.create_model(
            None, num_classes=4, image_size=16, patch_size=8, hidden_size=16,
            num_layers=1, num_heads=2, mlp_dim=16, head_zero_init=False,
        )

    model = model_fn()
    opt = optim.create_optimizer(
        mlc.ConfigDict(dict(name="adamw", lr=1e-2, weight_decay=0.0)), 10,
        ema_decay=0.8,
    )
    trainer = Trainer(model, opt, strategy, num_classes=4,
                      global_batch_size=16)
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    trainer.train(iter(train), 6)
    evaluation = tf.data.Dataset.from_tensor_slices(
        (x, y, np.ones(48, "float32"))).batch(16)
    raw = [v.numpy() for v in model.trainable_variables]
    with_ema = trainer.evaluate(evaluation, use_ema=True)
    without = trainer.evaluate(evaluation, use_ema=False)
    assert with_ema["loss"] != pytest.approx(without["loss"], rel=1e-4)
    # Evaluation put the raw weights back.
    for a, b in zip(raw, model.trainable_variables):
        np.testing.assert_array_equal(a, b.numpy())
    # A model loaded with the averages scores exactly the EMA evaluation.
    averaged = model_fn()
    for var, avg in zip(averaged.trainable_variables,
                        keras_compat.ema_variables(opt)):
        var.assign(avg)
    plain = Trainer(averaged, optim.create_optimizer(
        mlc.ConfigDict(dict(name="sgd", lr=0.1)), 10), strategy,
        num_classes=4, global_batch_size=16)
    reference = plain.evaluate(evaluation)
    assert reference["loss"] == pytest.approx(with_ema["loss"], rel=1e-6)
    assert reference["accuracy"] == with_ema["accuracy"]
