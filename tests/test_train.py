"""Training tests: the distributed step against one device, gradient
accumulation, the host loop end to end on digits, resume, errors."""

import json
import os
import subprocess
import sys

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import errors, keras_compat, optim
from keras_vit.commands import train as train_command
from keras_vit.storage import history
from keras_vit.storage import workdir as wd
from keras_vit.training import data_fit, loop, reporting, train_lib
from keras_vit.training.trainer import Trainer
from tests import console, tiny
from tests.strategies import two_cpu_mirrored

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data(n=64, size=16, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, size, size, 3)).astype("float32")
    y = rng.integers(0, classes, n).astype("int32")
    return x, y


def _run(strategy, opt_config, *, accumulation=1, clip=None, ema=None,
         steps=(3, 2), batch=16):
    """Trains a tiny model; returns its weights (and EMA weights)."""
    keras.utils.set_random_seed(1)
    x, y = _data()
    with strategy.scope():
        model = keras_vit.create_model(
            None, num_classes=5, image_size=16, patch_size=4, hidden_size=32,
            num_layers=2, num_heads=2, mlp_dim=64, head_zero_init=False,
        )
        optimizer = optim.create_optimizer(
            mlc.ConfigDict(opt_config), 10, ema_decay=ema
        )
    trainer = Trainer(
        model, optimizer, strategy, num_classes=5, global_batch_size=batch,
        accumulation_steps=accumulation, grad_clip_norm=clip,
    )
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(ds))
    results = [trainer.train(iterator, n) for n in steps]
    assert trainer.step == sum(steps)
    weights = [v.numpy() for v in model.trainable_variables]
    averages = (
        [v.numpy() for v in keras_compat.ema_variables(optimizer)]
        if ema else None
    )
    return weights, averages, results


def _max_diff(a, b):
    return max(float(np.abs(u - v).max()) for u, v in zip(a, b))


SGD = dict(name="sgd", lr=0.1, momentum=0.9, decay_type="cosine")
ADAMW = dict(name="adamw", lr=1e-2, weight_decay=0.1, warmup_steps=2)


def test_mirrored_equals_one_device_sgd():
    """SGD without clipping is scale-sensitive: a double cross-replica sum
    (or a missing one) would show up as a large difference."""
    one, _, r1 = _run(tf.distribute.get_strategy(), SGD)
    two, _, r2 = _run(two_cpu_mirrored(), SGD)
    start, _, _ = _run(tf.distribute.get_strategy(), SGD, steps=())
    assert _max_diff(one, start) > 1e-2  # the weights did move
    assert _max_diff(one, two) < 1e-5
    assert r1[0]["loss"] == pytest.approx(r2[0]["loss"], rel=1e-5)


def test_mirrored_equals_one_device_adamw_clip_ema():
    one, ema1, _ = _run(tf.distribute.get_strategy(), ADAMW, clip=0.5,
                        ema=0.9)
    two, ema2, _ = _run(two_cpu_mirrored(), ADAMW,
                        clip=0.5, ema=0.9)
    assert _max_diff(one, two) < 1e-5
    assert _max_diff(ema1, ema2) < 1e-5
    assert _max_diff(one, ema1) > 1e-4  # the average lags the weights


def test_gradient_accumulation_equals_one_large_batch():
    full, _, r_full = _run(tf.distribute.get_strategy(), SGD)
    accum, _, r_acc = _run(tf.distribute.get_strategy(), SGD, accumulation=4)
    assert _max_diff(full, accum) < 1e-5
    assert r_full[1]["loss"] == pytest.approx(r_acc[1]["loss"], rel=1e-5)
    mirrored, _, _ = _run(
        two_cpu_mirrored(), SGD, accumulation=2
    )
    assert _max_diff(full, mirrored) < 1e-5


def test_the_logged_learning_rate_is_the_last_updates():
    """Keras's optimizer.learning_rate reads the schedule at the next
    update's step; the logged one is the rate the last update used."""
    strategy = tf.distribute.get_strategy()
    x, y = _data()
    model = keras_vit.create_model(
        None, num_classes=5, image_size=16, patch_size=4, hidden_size=8,
        num_layers=1, num_heads=2, mlp_dim=8)
    optimizer = optim.create_optimizer(mlc.ConfigDict(SGD), 10)
    trainer = Trainer(model, optimizer, strategy, num_classes=5,
                      global_batch_size=16)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()
    iterator = iter(strategy.experimental_distribute_dataset(ds))
    trainer.train(iterator, 2)
    used = float(optimizer.learning_rate)  # what the third update uses
    trainer.train(iterator, 1)
    window = dict(steps=1, loss=1.0, accuracy=0.5, grad_norm=1.0)
    logged = reporting.log_train(trainer, {}, 3, 10, window, 1.0, 16)
    assert logged["learning_rate"] == pytest.approx(used, rel=1e-6)
    assert float(optimizer.learning_rate) < 0.99 * used  # cosine moved on


def test_batch_must_divide_replicas_times_accumulation():
    with pytest.raises(ValueError, match="not divisible by replicas"):
        _run(two_cpu_mirrored(), SGD, batch=15)


def test_trainer_options_are_checked_by_name():
    # Refused before the model, optimizer or strategy is used.
    with pytest.raises(errors.UsageError, match="unknown option\\(s\\) "
                                                "batch_size; its options are "
                                                "num_classes, global_batch"):
        Trainer(None, None, None, num_classes=5, batch_size=8)
    with pytest.raises(errors.UsageError, match="needs global_batch_size"):
        Trainer(None, None, None, num_classes=5)


def test_gradient_clipping_bounds_the_update():
    # With SGD without momentum, the first update is exactly -lr * clipped g.
    opt = dict(name="sgd", lr=1.0, momentum=0.0, decay_type="constant")
    start, _, _ = _run(tf.distribute.get_strategy(), opt, steps=())
    moved, _, results = _run(
        tf.distribute.get_strategy(), opt, clip=0.01, steps=(1,)
    )
    delta = np.sqrt(sum(np.sum((a - b) ** 2) for a, b in zip(start, moved)))
    assert results[0]["grad_norm"] > 0.01
    assert delta == pytest.approx(0.01, rel=1e-3)


@pytest.mark.parametrize("nesterov", [False, True])
def test_sgd_momentum_is_the_official_codes(nesterov):
    """config.optimizer.name="sgd" keeps its momentum as optax's sgd/trace
    (and flax's Momentum) do, the fine-tuning optimizer of the official
    code: m = mu m + g, w -= lr_t m (Nesterov: w -= lr_t (g + mu m)), on a
    warm-up then cosine schedule, step 0 at rate 0. NumPy reference below;
    Keras's own SGD (m = mu m - lr_t g, w += m) differs from the 2nd step."""
    config = mlc.ConfigDict(dict(name="sgd", momentum=0.9, nesterov=nesterov,
                                 lr=0.5, warmup_steps=3, decay_type="cosine"))
    optimizer = optim.create_optimizer(config, total_steps=8)
    assert isinstance(optimizer, optim.MomentumSGD)
    rng = np.random.default_rng(0)
    w0 = rng.normal(size=(3, 4)).astype("float32")
    grads = rng.normal(size=(8, 3, 4)).astype("float32")
    variable = keras.Variable(w0)
    keras_sgd = keras.optimizers.SGD(optim.WarmupDecay(0.5, 8, 3), momentum=0.9,
                                     nesterov=nesterov)
    keras_variable = keras.Variable(w0)
    w, m = w0.astype("float64"), np.zeros((3, 4))
    for step, g in enumerate(grads):
        lr = 0.5 * min(1, step / 3) * 0.5 * (1 + np.cos(
            np.pi * max(0, step - 3) / 5))
        m = 0.9 * m + g
        w = w - lr * (g + 0.9 * m if nesterov else m)
        optimizer.apply_gradients([(tf.constant(g), variable)])
        keras_sgd.apply_gradients([(tf.constant(g), keras_variable)])
        np.testing.assert_allclose(variable.numpy(), w, rtol=1e-5, atol=1e-6)
    assert np.abs(keras_variable.numpy() - w).max() > 1e-2


def digits_config(**overrides):
    return tiny.digits_config(
        {
            "total_steps": 24,
            "steps_per_loop": 4,
            "log_every_steps": 8,
            "eval_every_steps": 12,
            "checkpoint_every_steps": 8,
            "optimizer.warmup_steps": 4,
            "optimizer.lr": 3e-3,
        },
        **overrides,
    )


def test_train_and_evaluate_on_digits(tmp_path):
    workdir = str(tmp_path / "run")
    config = digits_config(total_steps=48, ema_decay=0.9)
    metrics = train_lib.train_and_evaluate(config, workdir)
    on_disk = json.load(open(os.path.join(workdir, "metrics.json")))
    assert on_disk["steps"] == 48
    assert on_disk["test_examples"] == 360
    assert on_disk["test_accuracy"] == pytest.approx(metrics["test_accuracy"])
    assert metrics["test_accuracy"] > 0.2  # twice chance after 48 tiny steps
    assert on_disk["images_per_sec"] > 0
    # The whole host loop takes at least as long as its train calls.
    assert 0 < on_disk["loop_images_per_sec"] <= on_disk["images_per_sec"]
    # What computed the numbers, for whoever reads them later.
    assert on_disk["versions"] == {
        "keras_vit": keras_vit.__version__, "keras": keras.__version__,
        "tensorflow": tf.__version__}
    assert wd.read_class_names(workdir) == [str(i) for i in range(10)]
    assert wd.read_config(workdir).trainer.total_steps == 48
    ckpts = tf.train.get_checkpoint_state(os.path.join(workdir, "checkpoints"))
    assert ckpts.model_checkpoint_path.endswith("ckpt-48")
    # TensorBoard summaries with the promised tags.
    tags = set()
    for path in tf.io.gfile.glob(os.path.join(workdir, "train", "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert {"loss", "accuracy", "learning_rate", "grad_norm",
            "images_per_sec", "step_time_s"} <= tags
    # The loss went down: compare the first and last logged train loss.
    losses = tiny.train_losses(workdir)
    assert losses[-1] < losses[0]
    # The restored model (EMA weights) reproduces the final test accuracy.
    model = wd.restore_model(workdir)
    from keras_vit.data import pipeline as input_pipeline

    correct = total = 0
    for x, y, mask in input_pipeline.eval_dataset(*tiny.pipeline(config),
                                                  "test", 100):
        pred = np.argmax(model(x).numpy(), -1)
        correct += float(np.sum((pred == y.numpy()) * mask.numpy()))
        total += float(np.sum(mask))
    assert total == 360
    assert correct / total == pytest.approx(metrics["test_accuracy"])


def test_resume_after_preemption_matches_uninterrupted_run(
    tmp_path, monkeypatch
):
    config = digits_config()
    straight = train_lib.train_and_evaluate(config, str(tmp_path / "a"))
    workdir = str(tmp_path / "b")
    with monkeypatch.context() as m:
        m.setattr(loop, "_Preemption", tiny.StopAfterFirstLoop)
        stopped = train_lib.train_and_evaluate(config, workdir)
    assert stopped == {"preempted": True, "step": 8, "signal": "SIGTERM",
                       "saved": True}
    resumed = train_lib.train_and_evaluate(config, workdir)
    assert resumed["steps"] == 24 and resumed["steps_this_run"] == 16
    assert resumed["test_accuracy"] == straight["test_accuracy"]
    assert resumed["test_loss"] == pytest.approx(straight["test_loss"],
                                                 rel=1e-6)


def test_preempted_command_exits_42_and_closes_its_summaries(
    tmp_path, monkeypatch, capsys
):
    """keras-vit-train stopped by SIGTERM: the checkpoint saved, one line,
    the one preemption status of every command; the run's TensorBoard
    writers closed (a process may run many trainings, as VTAB does)."""
    opened = []
    create = tf.summary.create_file_writer

    def recorded(path):
        writer = create(path)
        close = writer.close
        entry = {"path": path, "closed": False}

        def closing():
            entry["closed"] = True
            close()

        writer.close = closing
        opened.append(entry)
        return writer

    monkeypatch.setattr(loop.tf.summary, "create_file_writer", recorded)
    monkeypatch.setattr(loop, "_Preemption", tiny.StopAfterFirstLoop)
    workdir = str(tmp_path / "run")
    argv = [
        "keras-vit-train", "--config", "digits", f"--workdir={workdir}",
        "--config.trainer.total_steps=24", "--config.trainer.steps_per_loop=4",
        "--config.log.every_steps=12", "--config.evals.test.every_steps=0",
        "--config.checkpoints.every_steps=8",
        "--config.trainer.jit_compile=False",
        "--config.model.num_layers=1", "--config.model.hidden_size=16",
        "--config.model.mlp_dim=16", "--config.input.batch_size=32",
        "--config.schedule.warmup_steps=4",
    ]
    assert train_command.main(argv) == errors.PREEMPTED_EXIT_CODE == 42
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "keras-vit-train: preempted: stopped at step 8 with a checkpoint "
        "saved; run the same command to resume.")
    ckpts = tf.train.get_checkpoint_state(os.path.join(workdir, "checkpoints"))
    assert ckpts.model_checkpoint_path.endswith("ckpt-8")
    assert sorted(os.path.basename(e["path"]) for e in opened) == [
        "eval", "train"]
    assert all(e["closed"] for e in opened)
    # The steps since the last logged row (the first call's, step 4) are
    # logged at the stop: history.csv covers what the checkpoint holds.
    rows = history.read_history(workdir)
    assert [(r["step"], r["split"], r["steps"]) for r in rows] == [
        (4, "train", 4), (8, "train", 4)]


def test_workdir_with_another_model_is_refused(tmp_path):
    workdir = str(tmp_path / "run")
    train_lib.train_and_evaluate(digits_config(total_steps=4), workdir)
    other = digits_config(total_steps=4)
    other.model.hidden_size = 48
    with pytest.raises(train_lib.TrainingError, match="different model"):
        train_lib.train_and_evaluate(other, workdir)
    # A size's name stands for its sizes: the sizes that differ are named,
    # not the name against a null.
    sized = digits_config(total_steps=4)
    sized.model.variant = "Ti/16"
    for field in ("hidden_size", "num_layers", "patch_size"):
        sized.model[field] = None
    with pytest.raises(train_lib.TrainingError) as error:
        train_lib.train_and_evaluate(sized, workdir)
    message = str(error.value)
    assert "config.model.hidden_size: " in message
    assert "192 asked" in message
    assert "null" not in message and "variant" not in message


def test_a_saved_model_that_builds_nothing_is_compared_as_written(
        tmp_path):
    """A workdir whose config.json names sizes that build no model (a
    variant this version does not know) is compared field by field, as
    written: the variant is named, nothing raised from deep inside."""
    from keras_vit.storage import workdir as wd
    from keras_vit.training import model_init

    saved = digits_config(total_steps=4)
    saved.model.variant = "B/15"
    wd.write_json(str(tmp_path / wd.CONFIG), saved.to_dict())
    # A checkpoint to resume (without one, any config starts afresh).
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        str(tmp_path / wd.CHECKPOINTS / "ckpt"))
    with pytest.raises(train_lib.TrainingError) as error:
        model_init.check_workdir_config(digits_config(total_steps=4),
                                        str(tmp_path))
    assert 'config.model.variant: "B/15" in the workdir, null asked' in str(
        error.value)


def test_train_and_evaluate_refuses_an_export_folder(tmp_path):
    """From Python (the command refuses it before TensorFlow loads): an
    exported SavedModel's folder is no workdir, and nothing is written
    beside what TF Serving loads."""
    export = tmp_path / "vit" / "1"
    export.mkdir(parents=True)
    (export / "saved_model.pb").write_bytes(b"")
    with pytest.raises(errors.UsageError, match="is an exported SavedModel "
                       r"\(saved_model.pb or its version folders\), not a "
                       "training workdir"):
        train_lib.train_and_evaluate(digits_config(total_steps=4),
                                     str(export))
    assert sorted(os.listdir(export)) == ["saved_model.pb"]


def test_a_resumed_run_names_the_settings_it_changes(tmp_path, caplog):
    """Settings a resumed run may change (dropout, weight decay, the
    schedule, the augmentation; a recipe's default changed since the run
    started reads the same) are named in one warning; the same config
    resumes without one."""
    from keras_vit.storage import workdir as wd
    from keras_vit.training import model_init

    saved = digits_config(total_steps=4)
    wd.write_json(str(tmp_path / wd.CONFIG), saved.to_dict())
    tf.train.Checkpoint(step=tf.Variable(1)).save(
        str(tmp_path / wd.CHECKPOINTS / "ckpt"))
    caplog.set_level("WARNING")
    model_init.check_workdir_config(digits_config(total_steps=4),
                                    str(tmp_path))
    assert "other settings" not in caplog.text
    changed = digits_config(total_steps=4)
    changed.model.dropout_rate = 0.1
    changed.optimizer.weight_decay = 0.03
    changed.input.pp.flip = not saved.input.pp.flip
    model_init.check_workdir_config(changed, str(tmp_path))
    assert "other settings than it ran with" in caplog.text
    for field in ("config.model.dropout_rate: 0.0 in the workdir, 0.1 "
                  "asked", "config.optimizer.weight_decay",
                  "config.input.pp.flip"):
        assert field in caplog.text, field
    caplog.clear()
    changed = digits_config(total_steps=4)
    changed.seed, changed.input.batch_size = 7, 16
    changed.objective.label_smoothing = 0.1
    changed.trainer.grad_clip_norm = 2.0
    model_init.check_workdir_config(changed, str(tmp_path))
    for field in ("config.seed: 0 in the workdir, 7 asked",
                  "config.input.batch_size", "config.objective.label_smoothing",
                  "config.trainer.grad_clip_norm"):
        assert field in caplog.text, field
    assert f"kept in {tmp_path / 'config.step-1.json'}" in caplog.text
    # Which checkpoints are kept: named too (a smaller keep deletes some).
    caplog.clear()
    changed = digits_config(total_steps=4)
    changed.checkpoints.keep = saved.checkpoints.keep + 2
    model_init.check_workdir_config(changed, str(tmp_path))
    assert (f"config.checkpoints.keep: {saved.checkpoints.keep} in the "
            f"workdir, {saved.checkpoints.keep + 2} asked") in caplog.text


def test_a_run_refused_before_its_first_checkpoint_takes_the_fix(
        tmp_path, capsys):
    """A run that stopped before its first checkpoint (here labels beyond
    its classes) holds nothing to resume: the command its error suggests
    runs in the same workdir. A resumed run may change what is no
    parameter (dropout, stochastic depth, the head's initial values), not
    the parameters."""
    workdir = str(tmp_path / "run")
    argv = ["keras-vit-train", "--config=digits", f"--workdir={workdir}",
            "--config.trainer.total_steps=2", "--config.model.num_layers=1",
            "--config.model.hidden_size=16", "--config.model.mlp_dim=16",
            "--config.input.batch_size=16", "--config.schedule.warmup_steps=0",
            "--config.trainer.jit_compile=False",
            "--config.evals.test.every_steps=0"]
    assert train_command.main(argv + ["--config.model.num_classes=5"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("keras-vit-train: error: Label out of range")
    assert "model's classes" in err[-1] and "\\" not in err[-1]
    assert os.path.exists(os.path.join(workdir, "config.json"))
    assert train_command.main(argv) == 0
    capsys.readouterr()
    assert train_command.main(
        argv + ["--config.trainer.total_steps=3",
                "--config.model.dropout_rate=0.1",
                "--config.model.stochastic_depth_rate=0.1",
                "--config.model.head_bias_init=-2"]) == 0
    with open(os.path.join(workdir, "metrics.json")) as f:
        assert json.load(f)["steps"] == 3
    # The config of the steps before the resume is kept beside the new.
    for name, steps in (("config.step-2.json", 2), ("config.json", 3)):
        with open(os.path.join(workdir, name)) as f:
            assert json.load(f)["trainer"]["total_steps"] == steps, name
    capsys.readouterr()
    assert train_command.main(argv + ["--config.trainer.total_steps=4",
                                      "--config.model.mlp_dim=32"]) == 1
    assert "holds a run with a different model: --config.model.mlp_dim" in (
        capsys.readouterr().err)
    # A config.json cut short, an empty --workdir, an evaluation config:
    # one line each.
    with open(os.path.join(workdir, "config.json"), "w") as f:
        f.write("{cut")
    cases = [(argv, "config.json is not readable JSON"),
             ([a if not a.startswith("--workdir") else "--workdir="
               for a in argv], "--workdir is empty"),
             # (TensorFlow's checkpoint manager globs the path.)
             ([a if not a.startswith("--workdir") else
               f"--workdir={tmp_path}/run [2]" for a in argv],
              f"--workdir {tmp_path}/run [2] holds [, which TensorFlow's "
              "checkpoint manager reads as a pattern: it would find none of "
              "the run's checkpoints (nor delete the old ones). Name the "
              "folder without [, * or ?."),
             (["keras-vit-train", "--config=vtab",
               f"--workdir={tmp_path}/vtab"],
              "--config.evals.vtab is a vtab evaluator, which "
              "keras-vit-evaluate --mode=vtab runs")]
    for args, says in cases:
        assert train_command.main(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    assert not os.path.exists(tmp_path / "vtab")
    assert not os.path.exists(tmp_path / "run [2]")


def test_a_workdir_named_as_a_pattern_is_refused_by_the_api_too(tmp_path):
    """train_and_evaluate (the Python API, a VTAB task's run) refuses a
    workdir holding [, * or ? as the command does, before it makes it."""
    workdir = str(tmp_path / "run*")
    with pytest.raises(errors.UsageError, match=r"`workdir` .*run\* holds "
                       r"\*, which TensorFlow's checkpoint manager reads"):
        train_lib.train_and_evaluate(tiny.digits_config({}), workdir)
    assert not os.path.exists(workdir)


def test_a_size_name_and_its_sizes_are_one_model():
    """model_signature resolves config.model.variant into its sizes."""
    from keras_vit.training import model_init
    from keras_vit.variants import WIDTHS

    named = digits_config(total_steps=4)
    named.model.variant = "Ti/16"
    spelt = digits_config(total_steps=4)
    spelt.model.variant = None
    spelt.model.patch_size = 16
    named.model.patch_size = None
    for field in ("hidden_size", "num_layers", "num_heads", "mlp_dim"):
        named.model[field] = None
        spelt.model[field] = getattr(WIDTHS["Ti"], field)
    assert model_init.model_signature(named) == model_init.model_signature(
        spelt)


def test_non_finite_loss_stops_with_step_and_checkpoint(tmp_path):
    config = digits_config(total_steps=40)
    config.schedule.lr = 1e12
    config.schedule.warmup_steps = 0
    config.trainer.grad_clip_norm = 0.0
    workdir = str(tmp_path / "run")
    with pytest.raises(train_lib.TrainingError,
                       match=r"Non-finite loss .* in steps \d+-\d+\. Last "
                             r"good checkpoint"):
        train_lib.train_and_evaluate(config, workdir)
    state = tf.train.get_checkpoint_state(os.path.join(workdir, "checkpoints"))
    if state is not None:  # any checkpoint saved holds finite weights
        model = wd.restore_model(workdir)
        assert all(np.isfinite(v.numpy()).all() for v in model.weights)


def test_fine_tune_from_workdir_resizes_and_reinitialises_head(tmp_path):
    source = str(tmp_path / "pre")
    train_lib.train_and_evaluate(digits_config(total_steps=4), source)
    config = digits_config(total_steps=4)
    config.model.image_size = 48  # 6 x 6 grid instead of 4 x 4
    config.input.pp.resize_size = 52
    config.init.model = source
    metrics = train_lib.train_and_evaluate(config, str(tmp_path / "ft"))
    assert metrics["steps"] == 4


@pytest.mark.slow
def test_train_py_command_line(tmp_path):
    """train.py with a locked config (the shipped digits, by name, from
    another folder): overrides work, a typo is one line naming the field."""
    cmd = [
        sys.executable, os.path.join(ROOT, "train.py"), "--config=digits",
        "--workdir=" + str(tmp_path / "run"),
        "--config.trainer.total_steps=2", "--config.trainer.steps_per_loop=1",
        "--config.model.num_layers=1", "--config.model.hidden_size=16",
        "--config.model.mlp_dim=16", "--config.trainer.jit_compile=False",
        "--config.schedule.warmup_steps=0",
        "--strategy=cpu",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "step 2/2" in done.stderr
    metrics = json.load(open(tmp_path / "run" / "metrics.json"))
    assert metrics["steps"] == 2
    typo = subprocess.run(
        cmd[:3] + ["--workdir=" + str(tmp_path / "x"), "--config.totl_steps=2"],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
    )
    assert typo.returncode == 1
    (line,) = [s for s in typo.stderr.splitlines() if "error" in s]
    assert line.startswith("keras-vit-train: error: unknown config field "
                           "'totl_steps'")
    assert "did you mean --config.trainer.total_steps?" in line
    assert line.endswith("(config fields: keras_vit/config_schema.py)")
    assert "Traceback" not in typo.stderr


def test_schedule_warmup_and_decay():
    s = optim.WarmupDecay(1.0, 110, warmup_steps=10, decay_type="cosine")
    assert float(s(0)) == 0.0
    assert float(s(5)) == pytest.approx(0.5)
    assert float(s(10)) == pytest.approx(1.0)
    assert float(s(60)) == pytest.approx(0.5, abs=1e-6)
    assert float(s(110)) == pytest.approx(0.0, abs=1e-7)
    lin = optim.WarmupDecay(2.0, 20, warmup_steps=0, decay_type="linear")
    assert float(lin(5)) == pytest.approx(1.5)
    clone = optim.WarmupDecay.from_config(s.get_config())
    assert float(clone(33)) == float(s(33))


def test_weight_decay_skips_biases_norms_and_embeddings():
    opt = optim.create_optimizer(
        mlc.ConfigDict(dict(name="adamw", lr=1.0, weight_decay=0.1)), 10
    )
    model = keras_vit.create_model(
        None, num_classes=3, image_size=8, patch_size=4, hidden_size=8,
        num_layers=1, num_heads=2, mlp_dim=8,
    )
    opt.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables
               if opt._use_weight_decay(v)}
    assert decayed and all(p.endswith("kernel") for p in decayed)


@pytest.mark.parametrize(
    "opt,message",
    [
        (dict(name="rmsprop", lr=1.0), "Unknown optimizer"),
        (dict(name="sgd", lr=0.0), "lr must be positive"),
        (dict(name="sgd", lr=1.0, weight_decay=0.1), "no weight decay"),
        (dict(name="adamw", lr=1.0, decay_type="step"), "Unknown decay_type"),
        # "" would match every variable: no decay at all, silently.
        (dict(name="adamw", lr=1.0, weight_decay=0.1, no_decay=("bias", "")),
         r"optimizer.no_decay=\['bias', ''\] holds '': give variable-name"),
        (dict(name="adamw", lr=1.0, weight_decay=0.1, no_decay=(5,)),
         r"holds 5: give variable-name parts"),
    ],
)
def test_optimizer_config_errors(opt, message):
    with pytest.raises(ValueError, match=message):
        optim.create_optimizer(mlc.ConfigDict(opt), 10)


@pytest.mark.parametrize("loss", ["softmax_xent", "sigmoid_xent"])
def test_export_at_the_end_of_a_run(tmp_path, loss):
    """--config.export.enabled=True writes a served version of the final
    (EMA) weights with the run's class names and evaluation resize (the
    shorter side to 40, then the central 32), scored as the run trained
    (a sigmoid per class after the sigmoid loss)."""
    from keras_vit.data import preprocessing

    workdir = str(tmp_path / "run")
    config = digits_config(total_steps=4, ema_decay=0.5)
    config.input.pp.eval_resize_size = 40
    config.input.pp.eval_keep_aspect = True
    config.export.enabled = True
    config.export.model_name = "digits"
    config.objective.loss = loss
    metrics = train_command.run(config, workdir)
    version = metrics["export_path"]
    with pytest.raises(ValueError, match="train command"):
        train_lib.train_and_evaluate(config, str(tmp_path / "other"))
    assert version == os.path.join(workdir, "export", "digits", "1")
    assert tf.io.gfile.exists(os.path.join(version, "saved_model.pb"))
    served = tf.saved_model.load(version).signatures["predict_images"]
    x, _ = _data(n=3, size=32, classes=10)
    pixels = (x + 1.0) * 127.5  # the signature takes [0, 255]
    probabilities = served(images=tf.constant(pixels))["probabilities"]
    evaluated = np.stack([preprocessing.preprocess_eval(
        tf.constant(p), 32, 40, keep_aspect=True) for p in pixels])
    logits = wd.restore_model(workdir)(evaluated)
    expected = (tf.math.sigmoid(logits) if loss == "sigmoid_xent"
                else tf.nn.softmax(logits)).numpy()
    np.testing.assert_allclose(probabilities, expected, atol=1e-5)
    with open(os.path.join(version, "assets.extra", "export.json")) as f:
        info = json.load(f)
    assert info["keep_aspect"] is True
    assert info["scores"] == loss.split("_")[0]
    assert info["source"] == dict(location=workdir, kind="workdir",
                                  step=config.trainer.total_steps)
    names = served(images=tf.constant(pixels))["class_names"].numpy()
    assert {n.decode() for n in names.ravel()} <= {str(i) for i in range(10)}


@pytest.mark.parametrize("field, value", [
    ("trainer.total_steps", 0), ("input.batch_size", -8)])
def test_the_api_names_the_config_field_of_a_bad_step_or_batch(field,
                                                               value):
    """train_and_evaluate called from Python (the commands check limits
    before): the message names the field as the config spells it."""
    from keras_vit import config as config_lib

    config = config_lib.base_config()
    section, name = field.split(".")
    setattr(config[section], name, value)
    also = (", or 0 with config.trainer.epochs > 0 to count the run in "
            "epochs" if field == "trainer.total_steps" else "")
    with pytest.raises(errors.UsageError, match=(
            rf"^config\.{field}={value} must be > 0{also}\.$")):
        data_fit.global_batch(config.trainer, config.input, 1)


def test_a_batch_the_replicas_do_not_split_is_one_line(tmp_path):
    """keras-vit-train --strategy=mirrored on 2 CPU devices with a batch of
    33: one line naming the flags, before the workdir is made."""
    workdir = tmp_path / "run"
    result = console.run("train", [
        *console.TINY_DIGITS, "--strategy=mirrored", "--cpu_devices=2",
        "--config.input.batch_size=33", f"--workdir={workdir}"])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-vit-train: error: --config.input.batch_size=33 does not "
        "split among 2 replica(s) x --config.trainer.accumulation_steps=1: "
        "use a multiple of 2.")
    assert not workdir.exists()


def test_fine_tuning_says_when_the_source_computes_otherwise(tmp_path):
    """keras-vit-train --model=<a Hugging Face folder>: its exact GELU and
    LayerNorm epsilon 1e-12 are not the official numerics the run's model
    computes with; the log says so, naming both."""
    folder = os.path.join(os.path.dirname(__file__), "fixtures", "hub",
                          "hf_vit_classifier")
    result = console.run("train", console.TINY_DIGITS[:1] + [
        f"--model={folder}", "--config.model.image_size=16",
        "--config.input.pp.resize_size=18", "--config.input.batch_size=16",
        "--config.trainer.jit_compile=False",
        "--config.schedule.warmup_steps=0", "--config.trainer.total_steps=2",
        f"--workdir={tmp_path / 'run'}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"{folder} computes its blocks otherwise (GELU exact (erf), "
            "LayerNorm epsilon 1e-12) than the model it starts here (GELU "
            "tanh, LayerNorm epsilon 1e-06, the official ViT's)"
            ) in result.stderr


def test_a_fine_tune_resumes_when_the_file_it_started_from_is_gone(
        tmp_path):
    """keras-vit-train --model=start.keras (relative), run again after
    the file was moved away: the run resumes from its own checkpoints
    (config.json records the architecture; the file is not read again).
    Another name that is not there is still refused by name."""
    keras_vit.create_model(
        None, num_classes=10, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(tmp_path / "start.keras")
    args = console.TINY_DIGITS + ["--model=start.keras",
                                  f"--workdir={tmp_path / 'run'}"]
    result = console.run("train", args + ["--config.trainer.total_steps=2"],
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    os.rename(tmp_path / "start.keras", tmp_path / "moved.keras")
    result = console.run("train", args + ["--config.trainer.total_steps=4"],
                         cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"start.keras is not there: the run in {tmp_path / 'run'} "
            "resumes from its own checkpoints") in result.stderr
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())[
        "steps"] == 4
    result = console.run("train", args[:-2] + [
        "--model=other.keras", f"--workdir={tmp_path / 'run'}",
        "--config.trainer.total_steps=6"], cwd=tmp_path)
    assert result.returncode == 1
    assert "other.keras: no such file or folder" in result.stderr
    # (or the same relative name from another directory): the way to
    # resume is named.
    assert (f"The run in {tmp_path / 'run'} started from "
            f"{tmp_path / 'start.keras'}: resume it with --model="
            f"{tmp_path / 'start.keras'}, as it started.") in result.stderr, \
        result.stderr


def test_a_run_stopped_past_the_steps_asked_is_refused(tmp_path):
    """An unfinished run (its checkpoint at step 4, no metrics.json) asked
    for 2 steps: refused, naming the step it reached and the fix, not
    ended at step 4 with a config.json that says 2."""
    workdir = tmp_path / "run"
    args = console.TINY_DIGITS + [f"--workdir={workdir}"]
    result = console.run("train", args + ["--config.trainer.total_steps=4"])
    assert result.returncode == 0, result.stderr[-3000:]
    os.remove(workdir / "metrics.json")  # as if stopped after its save
    result = console.run("train", args + ["--config.trainer.total_steps=2"])
    assert result.returncode == 1
    (line,) = [e for e in result.stderr.splitlines() if "error:" in e]
    assert line.startswith(
        f"keras-vit-train: error: The run in {workdir} has trained 4 steps "
        "(its latest checkpoint, "), line
    assert line.endswith(
        "more than the --config.trainer.total_steps=2 asked: ask for 4 steps "
        "or more to resume it, or use a new --workdir."), line
    assert wd.read_config(str(workdir)).trainer.total_steps == 4
    result = console.run("train", args + ["--config.trainer.total_steps=4"])
    assert result.returncode == 0, result.stderr[-3000:]
