"""Fault injection: train.py killed with SIGKILL at three points (one of
them inside a checkpoint write) and sent SIGTERM, a kill during export, NaN
batches, damaged or foreign checkpoints, a failing disk.

The process faults hit one workdir in a row, each followed by a restart
with the same command (real subprocesses, digits, a tiny model; harness in
tests/fault_harness.py); the run that finally completes is compared with an
uninterrupted reference run (a module-scoped fixture). With the default
strategy the input iterator is in the checkpoint and augmentation is seeded
per example, so the comparison is exact: test metrics and every
checkpointed tensor.
"""
import functools
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import config_limits, keras_compat, optim
from keras_vit.commands import runner
from keras_vit.commands import train as train_command
from keras_vit.data import pipeline as input_pipeline
from keras_vit.errors import PREEMPTED_EXIT_CODE, UsageError
from keras_vit.storage import atomic, checkpoint_list, history, run_lock
from keras_vit.storage import workdir as wd
from keras_vit.training import interrupt, loop, records, train_lib
from keras_vit.training.trainer import Trainer
from tests import console, tiny
from tests.fault_harness import (
    EXPORTER,
    TOTAL,
    Run,
    assert_nothing_half_written,
    ckpt_dir,
    env,
    no_leftovers,
    read_metrics,
    script,
    state_names,
    tensors,
)
from tests.reliability_cases import check_error, check_says, covers
from tests.strategies import two_cpu_mirrored


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run: (workdir, metrics)."""
    tmp = tmp_path_factory.mktemp("reference")
    run = Run(tmp, str(tmp / "run"), "reference.log")
    run.finish()
    return run.workdir, read_metrics(run.workdir)


def _resumed_from(text, workdir, name):
    step = int(name.split("-")[-1])
    assert f"Resumed from {ckpt_dir(workdir)}/{name} at step {step}" \
        in text, text[-3000:]


def _compare_with_reference(workdir, reference):
    """The finished run equals the uninterrupted one exactly."""
    ref_dir, ref = reference
    got = read_metrics(workdir)
    assert got["steps"] == TOTAL
    for key in ("test_accuracy", "test_loss", "test_top5_accuracy",
                "test_examples"):
        assert got[key] == ref[key], key
    mine = tensors(os.path.join(ckpt_dir(workdir), f"ckpt-{TOTAL}"))
    theirs = tensors(os.path.join(ckpt_dir(ref_dir), f"ckpt-{TOTAL}"))
    assert mine.keys() == theirs.keys()
    for key in mine:
        np.testing.assert_array_equal(mine[key], theirs[key], err_msg=key)


@pytest.mark.slow
@covers("kill_after_first_checkpoint", "kill_mid_run",
        "kill_during_checkpoint_write", "sigterm")
def test_killed_three_times_and_preempted_then_resumes_exactly(
    tmp_path, reference
):
    """One workdir through four faults in a row, each followed by a restart
    with the same command; every restart is checked to resume from the
    newest complete checkpoint, and the run that finally completes equals
    the uninterrupted one bit for bit."""
    workdir = str(tmp_path / "run")
    ckpts = ckpt_dir(workdir)

    # 1. SIGKILL right after the first checkpoint.
    run = Run(tmp_path, workdir, "1.log")
    run.wait_for(lambda: state_names(workdir) == "ckpt-10")
    run.kill()
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))
    assert_nothing_half_written(workdir)
    latest = state_names(workdir)
    assert latest in ("ckpt-10", "ckpt-20")  # the kill may land after 20

    # 2. SIGKILL between two checkpoints.
    run = Run(tmp_path, workdir, "2.log")
    run.wait_for(lambda: "step 25/40" in run.text())
    run.kill()
    _resumed_from(run.text(), workdir, latest)
    check_says("kill_after_first_checkpoint", run.text())
    assert_nothing_half_written(workdir)
    latest = state_names(workdir)
    assert latest in ("ckpt-20", "ckpt-30")

    # 3. SIGKILL inside the write of ckpt-30: its shards are on disk under
    # ckpt-30_temp/, not yet merged under the final name.
    marker = str(tmp_path / "in_merge")
    run = Run(tmp_path, workdir, "3.log",
              extra_env={"FAULT_PAUSE_MERGE": "ckpt-30",
                         "FAULT_MARKER": marker})
    run.wait_for(lambda: os.path.exists(marker))
    run.kill()
    _resumed_from(run.text(), workdir, latest)
    check_says("kill_mid_run", run.text())
    assert glob.glob(os.path.join(ckpts, "ckpt-30_temp", "part-*"))
    assert not glob.glob(os.path.join(ckpts, "ckpt-30.*"))
    assert state_names(workdir) == "ckpt-20"
    assert_nothing_half_written(workdir)
    # Readers (evaluation, export) get the last complete checkpoint.
    model = wd.restore_model(workdir)
    kernel = model.get_layer("head").kernel
    index = [i for i, v in enumerate(model.trainable_variables)
             if v is kernel][0]
    np.testing.assert_array_equal(
        kernel.numpy(),
        tf.train.load_checkpoint(os.path.join(ckpts, "ckpt-20")).get_tensor(
            f"optimizer/_trainable_variables/{index}/.ATTRIBUTES/"
            "VARIABLE_VALUE"
        ),
    )

    # 4. SIGTERM while ckpt-30 is being written (held until released):
    # the save completes, then the run stops there with exit status 42.
    marker, release = str(tmp_path / "in_merge_4"), str(tmp_path / "go")
    run = Run(tmp_path, workdir, "4.log", extra_env={
        "FAULT_PAUSE_MERGE": "ckpt-30", "FAULT_MARKER": marker,
        "FAULT_RELEASE": release,
    })
    run.wait_for(lambda: os.path.exists(marker))
    run.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    open(release, "w").close()
    # A preempted run's status, in every command.
    text = run.finish(timeout=120, status=runner.PREEMPTED_EXIT_CODE)
    _resumed_from(text, workdir, "ckpt-20")
    check_says("kill_during_checkpoint_write", text)
    check_says("sigterm", text)
    step = 30
    assert f"Stopped at step {step} after SIGTERM" in text
    assert state_names(workdir) == f"ckpt-{step}"
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))
    assert_nothing_half_written(workdir)

    # 5. The same command once more runs to the end.
    text = Run(tmp_path, workdir, "5.log").finish()
    _resumed_from(text, workdir, f"ckpt-{step}")
    assert read_metrics(workdir)["steps_this_run"] == TOTAL - step
    _compare_with_reference(workdir, reference)
    assert_nothing_half_written(workdir)
    no_leftovers(workdir)  # ckpt-30_temp/ went with the save of ckpt-30


@pytest.mark.slow
@covers("kill_during_export")
def test_kill_during_export_publishes_nothing(tmp_path):
    from keras_vit.export import versions as export_versions
    from keras_vit.export.saved_model import export_model

    marker = str(tmp_path / "publishing")
    exports = str(tmp_path / "exports")
    exporter = script(tmp_path, EXPORTER, "exporter.py")
    proc = subprocess.Popen(
        [sys.executable, exporter, exports], stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, env=dict(env(), FAULT_MARKER=marker),
    )
    deadline = time.time() + 300
    while not os.path.exists(marker):
        assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
        assert time.time() < deadline
        time.sleep(0.02)
    proc.kill()
    proc.wait(60)
    model_dir = os.path.join(exports, "vit")
    # The complete but unpublished export sits under a dotted name, which
    # TF Serving does not load; no version, no models.config entry.
    leftovers = os.listdir(model_dir)
    assert leftovers and all(n.startswith(".tmp-") for n in leftovers)
    assert export_versions.existing_versions(model_dir) == []
    assert not os.path.exists(os.path.join(exports, "models.config"))
    model = keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16,
    )
    path = export_model(model, exports, warmup_images=[], verify=False)
    assert path == os.path.join(model_dir, "1")
    # The killed export's folder is removed by the next export.
    assert os.listdir(model_dir) == ["1"]
    loaded = tf.saved_model.load(path)
    pixels = tf.zeros([1, 16, 16, 3])
    out = loaded.signatures["predict_images"](images=pixels)
    assert out["probabilities"].shape == (1, 3)


# ------------------------------------------------------------- in process
def tiny_config(**overrides):
    return tiny.digits_config(
        {
            "total_steps": 20,
            "steps_per_loop": 5,
            "log_every_steps": 5,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 10,
            "optimizer.warmup_steps": 0,
        },
        **overrides,
    )


def test_a_stop_swallowed_before_the_loop_ends_its_first_call(
        tmp_path, monkeypatch):
    """A Ctrl-C whose exception a library swallowed just before the
    training loop began (`errors.stop_raised`, after the last file written
    before it, which would raise it again) reaches the first train call,
    at once: the run stops before that call's first step,
    not at its boundary (steps_per_loop=5), and nothing has trained."""
    from keras_vit import progress
    from keras_vit.errors import stop_raised, take_stop

    for module in (atomic, progress):  # the stop outlives the set-up
        monkeypatch.setattr(module, "check_stop", lambda: None)
    workdir = str(tmp_path / "run")
    stop_raised(KeyboardInterrupt())
    # As in a command (a pytest-xdist worker ignores SIGINT).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        result = train_lib.train_and_evaluate(tiny_config(), workdir)
    finally:
        signal.signal(signal.SIGINT, before)
        take_stop()
    assert result["preempted"] and result["step"] == 0, result
    assert not result["saved"]  # nothing trained: nothing to save


def test_a_run_stopped_in_its_final_export_exports_when_run_again(tmp_path):
    """metrics.json (which marks a run finished) comes after the export:
    a run that fails (or is killed) while exporting is not "finished", and
    the same command evaluates and exports again from its last
    checkpoint, without training; once exported, it is finished."""
    workdir = str(tmp_path / "run")
    calls = []

    def failing(model, class_names, step):
        calls.append("failed")
        raise OSError("No space left on device")

    def exporting(model, class_names, step):
        calls.append(("exported", step))
        return {"export_path": "/exports/vit/1"}

    with pytest.raises(OSError):
        train_lib.train_and_evaluate(tiny_config(), workdir,
                                     on_finish=failing)
    assert not os.path.exists(os.path.join(workdir, wd.METRICS))
    again = train_lib.train_and_evaluate(tiny_config(), workdir,
                                         on_finish=exporting)
    assert calls == ["failed", ("exported", 20)]
    assert again["steps"] == 20 and again["steps_this_run"] == 0
    assert wd.read_json(os.path.join(workdir, wd.METRICS))[
        "export_path"] == "/exports/vit/1"
    done = train_lib.train_and_evaluate(tiny_config(), workdir,
                                        on_finish=exporting)
    assert done["finished_before"] and calls == ["failed", ("exported", 20)]


def test_an_on_finish_of_two_arguments_is_still_called():
    """`on_finish` gets the step as a third argument; a callback written
    for (model, class names) is called with those two, not refused with a
    TypeError after the whole run."""
    from keras_vit.training.run_parts import taking_step

    calls = []

    def two(model, class_names):
        calls.append((model, class_names))
        return {"two": True}

    def three(model, class_names, step):
        return step

    def any_number(*args):
        return args

    assert taking_step(two)("m", ["a"], 7) == {"two": True}
    assert calls == [("m", ["a"])]
    assert taking_step(three) is three
    assert taking_step(any_number) is any_number
    assert taking_step(functools.partial(lambda a, m, n, s: s, 1))(
        "m", [], 5) == 5
    assert taking_step(None) is None
    with pytest.raises(UsageError, match=r"on_finish\(model, names, \*, "
                       r"step\) is called with three arguments"):
        taking_step(lambda model, names, *, step: None)


def test_resuming_with_other_input_names_the_field_or_draws_anew(tmp_path):
    """Another preprocessing on resume: the differing field is named
    (config.input.pp.resize_size), not the whole pp section cut short; a
    run whose checkpoints hold no data iterator (written with
    config.checkpoints.iterator=False) resumes with another batch, its
    order drawn anew, rather than being refused for a data order it did
    not keep."""
    from keras_vit.training.resume import TrainingError

    plain = str(tmp_path / "plain")
    train_lib.train_and_evaluate(tiny_config(total_steps=10), plain)
    with pytest.raises(TrainingError, match=r"config.input.pp.resize_size: "
                       r"36 in the workdir, 40 asked"):
        train_lib.train_and_evaluate(
            tiny_config(**{"total_steps": 20, "input.pp.resize_size": 40}),
            plain)
    # Synthetic data is another pipeline: named, not blamed on a version.
    with pytest.raises(TrainingError, match=r"config.input.synthetic_data: "
                       r"false in the workdir, true asked"):
        train_lib.train_and_evaluate(
            tiny_config(**{"total_steps": 20, "input.synthetic_data": True}),
            plain)
    mixed = str(tmp_path / "mixed")
    train_lib.train_and_evaluate(
        tiny_config(**{"total_steps": 10, "input.mix.mixup_alpha": 0.2,
                       "checkpoints.iterator": False}), mixed)
    names = [n for n, _ in tf.train.list_variables(
        tf.train.latest_checkpoint(os.path.join(mixed, wd.CHECKPOINTS)))]
    assert not any(n.startswith("iterator/") for n in names)
    again = train_lib.train_and_evaluate(
        tiny_config(**{"total_steps": 20, "input.mix.mixup_alpha": 0.2,
                       "input.batch_size": 16}), mixed)
    assert again["steps"] == 20 and again["steps_this_run"] == 10


def test_a_checkpoint_without_the_iterator_resumes_drawing_anew(tmp_path):
    """A run saved with config.checkpoints.iterator=False resumes with the
    iterator asked for again (not refused as a model that does not match):
    its data order is drawn anew from the restored step, and its later
    checkpoints hold no iterator (the drawn one's pipeline is seeded by
    its start step, which a resumed run's is not): resumed from them, the
    run ends as one that never kept its iterator."""
    def part(workdir, total, iterator=True):
        # A constant rate: each part's schedule is the whole run's.
        return train_lib.train_and_evaluate(tiny_config(**{
            "total_steps": total, "checkpoints.iterator": iterator,
            "schedule.decay_type": "constant"}), workdir)

    asked, never = str(tmp_path / "asked"), str(tmp_path / "never")
    for workdir in (asked, never):
        part(workdir, 10, iterator=False)
        part(workdir, 20, iterator=workdir == asked)
    names = [n for n, _ in tf.train.list_variables(
        tf.train.latest_checkpoint(os.path.join(asked, wd.CHECKPOINTS)))]
    assert not any(n.startswith("iterator/") for n in names)
    again, without = part(asked, 30), part(never, 30, iterator=False)
    assert again["steps_this_run"] == without["steps_this_run"] == 10
    assert again["test_loss"] == pytest.approx(without["test_loss"],
                                               rel=1e-6)


def test_a_damaged_newest_checkpoint_without_the_iterator_falls_back_whole(
        tmp_path, monkeypatch):
    """The newest checkpoint holds no iterator and is damaged: the one
    before it, which holds the iterator, is restored with it (the
    iterator is left out only once a checkpoint without one restored)."""
    from keras_vit.training import resume

    monkeypatch.setattr(wd, "check_checkpoint", lambda path, model: None)
    model = tf.Module()
    model.v = tf.Variable(1.0)
    kept = iter(tf.data.Dataset.range(10))
    next(kept), next(kept)  # at 2
    folder = str(tmp_path)
    tf.train.CheckpointManager(tf.train.Checkpoint(
        model=model, iterator=kept), folder, 5).save(1)
    model.v.assign(2.0)
    newest = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                        folder, 5).save(2)
    for data in glob.glob(newest + ".data*"):
        with open(data, "wb") as f:
            f.write(b"damaged")
    fresh = iter(tf.data.Dataset.range(10))
    items = {"model": model, "iterator": fresh}
    assert resume.restore_latest(items, folder).endswith("ckpt-1")
    assert items["iterator"] is fresh and int(next(fresh)) == 2
    assert float(model.v.numpy()) == 1.0


def test_the_same_model_written_otherwise_resumes(tmp_path):
    """A run whose classes came from the data (num_classes null) resumed
    with num_classes=10, and image_size 32 resumed as 32x32: one model,
    so it resumes; another count is still refused by name."""
    from keras_vit.training.resume import TrainingError

    workdir = str(tmp_path / "run")
    first = tiny_config(total_steps=10)
    assert first.model.num_classes is None and first.model.image_size == 32
    train_lib.train_and_evaluate(first, workdir)
    from keras_vit import config as config_lib

    again = train_lib.train_and_evaluate(config_lib.replace(
        tiny_config(**{"total_steps": 20, "model.num_classes": 10}),
        model={"image_size": [32, 32]}), workdir)
    assert again["steps"] == 20 and again["steps_this_run"] == 10
    with pytest.raises(TrainingError, match=r"config.model.num_classes: "
                       r"10 in the workdir, 12 asked"):
        train_lib.train_and_evaluate(
            tiny_config(**{"total_steps": 30, "model.num_classes": 12}),
            workdir)


def _poison(monkeypatch, bad_batches):
    """Makes the training pipeline put NaN into the images of the given
    batches (0-based: batch 12 feeds step 13)."""
    original = input_pipeline.train_dataset

    def poisoned(*args, **kwargs):
        bad = tf.constant(bad_batches, tf.int64)

        def poison(index, batch):
            images, labels = batch
            hit = tf.reduce_any(tf.equal(index, bad))
            return images + tf.where(hit, np.nan, 0.0), labels

        return original(*args, **kwargs).enumerate().map(poison)

    monkeypatch.setattr(input_pipeline, "train_dataset", poisoned)


def _finite_checkpoints(workdir):
    ckpts = ckpt_dir(workdir)
    prefixes = sorted(p[:-len(".index")]
                      for p in glob.glob(os.path.join(ckpts, "*.index")))
    for prefix in prefixes:
        for key, value in tensors(prefix).items():
            if value.dtype.kind == "f":
                assert np.isfinite(value).all(), (prefix, key)
    return [os.path.basename(p) for p in prefixes]


@covers("nan_batch_stops")
def test_nan_batch_stops_at_the_step_with_last_good_checkpoint(
    tmp_path, monkeypatch
):
    _poison(monkeypatch, [12])
    workdir = str(tmp_path / "run")
    with pytest.raises(train_lib.TrainingError) as info:
        train_lib.train_and_evaluate(tiny_config(), workdir)
    check_error("nan_batch_stops", info.value)
    assert "in steps 11-15" in str(info.value)
    # The named checkpoint exists, is the only one, and is finite.
    assert _finite_checkpoints(workdir) == ["ckpt-10"]
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))


@covers("nonfinite_weights_update")
@pytest.mark.filterwarnings("ignore:overflow encountered in cast")
@pytest.mark.parametrize("every,best", [(1, False), (10, False), (1, True)])
def test_weights_made_non_finite_stop_before_a_checkpoint(tmp_path, every,
                                                          best, monkeypatch):
    """An update too large for float32 (a learning rate of 1e39) makes the
    weights non-finite from a finite loss and gradient: the run stops in
    one line naming a weight, before a checkpoint holds them (every:
    1, the save after step 1 checks them; best: the best checkpoint of an
    evaluation at step 1 alike) and before it skips every later step for
    good (10: the call that meets the first skipped step). A run config
    refuses such a rate before the run (tests/test_quiet.py): that check
    is lifted here to reach the loop's own, which guards any optimizer."""
    monkeypatch.setattr(config_limits, "FLOAT32_MAX", float("inf"))
    workdir = str(tmp_path / "run")
    extra = {"evals.test.every_steps": 1,
             "checkpoints.keep_best": "test"} if best else {}
    config = tiny_config(skip_nonfinite=True, **{
        "schedule.lr": 1e39, "schedule.decay_type": "constant",
        "steps_per_loop": every, "checkpoint_every_steps": every, **extra})
    with pytest.raises(train_lib.TrainingError) as info:
        train_lib.train_and_evaluate(config, workdir)
    check_error("nonfinite_weights_update", info.value)
    message = str(info.value)
    assert f"The weights became non-finite by step {min(every, 5)}" in message
    assert "Last good checkpoint: none (no checkpoint yet)" in message
    assert "config.trainer.grad_clip_norm" in message
    assert _finite_checkpoints(workdir) == []
    assert checkpoint_list.latest(ckpt_dir(workdir)) is None
    assert not glob.glob(os.path.join(workdir, "best", "**", "*.index"),
                         recursive=True)


@covers("final_loss_nonfinite")
def test_a_final_loss_that_is_not_finite_fails_the_run(tmp_path):
    """With skip_nonfinite, a first update of a learning rate of 1e30
    left finite weights whose outputs overflow, every later step was
    skipped, and the run exited 0 with test_loss null in metrics.json:
    now it fails after its final evaluation, unfinished, and so does the
    same command again (evaluated again from its last checkpoint)."""
    workdir = tmp_path / "run"
    args = ["--config=digits", f"--workdir={workdir}",
            "--config.trainer.total_steps=10",
            "--config.schedule.warmup_steps=0", "--config.schedule.lr=1e30",
            "--config.trainer.skip_nonfinite=True"]
    for skipped in (" 9 step(s) of this run were skipped", ""):
        result = console.run("train", args)
        assert result.returncode == 1, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        (line,) = [x for x in result.stderr.splitlines()
                   if x.startswith("keras-vit-train: error: ")]
        check_says("final_loss_nonfinite", line)
        assert ("step 10;" + skipped) in line if skipped else \
            "skipped" not in line, line
        assert not (workdir / wd.METRICS).exists()
        assert checkpoint_list.latest(ckpt_dir(str(workdir))).endswith(
            "ckpt-10")


@covers("nan_batch_skipped")
def test_nan_batches_skipped_and_counted(tmp_path, monkeypatch, caplog):
    _poison(monkeypatch, [3, 12])
    workdir = str(tmp_path / "run")
    caplog.set_level("WARNING", logger="absl")
    metrics = train_lib.train_and_evaluate(
        tiny_config(skip_nonfinite=True), workdir
    )
    log = "\n".join(r.getMessage() for r in caplog.records)
    check_says("nan_batch_skipped", log)
    assert "Skipped 1 non-finite step(s) in steps 1-5 (first: step 4)" in log
    assert "Skipped 1 non-finite step(s) in steps 11-15 (first: step 13)" \
        in log
    assert ("2 of this run's 20 steps were skipped for a non-finite loss or "
            "gradient (config.trainer.skip_nonfinite)") in log
    assert metrics["steps"] == 20
    assert metrics["skipped_steps_this_run"] == 2
    assert read_metrics(workdir)["skipped_steps_this_run"] == 2
    assert np.isfinite(metrics["test_loss"])
    assert _finite_checkpoints(workdir) == ["ckpt-10", "ckpt-20"]


def _trainer(strategy, opt):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras_vit.create_model(
            None, num_classes=5, image_size=16, patch_size=8, hidden_size=16,
            num_layers=1, num_heads=2, mlp_dim=16, head_zero_init=False,
        )
        optimizer = optim.create_optimizer(mlc.ConfigDict(opt), 10,
                                           ema_decay=0.9)
    return Trainer(model, optimizer, strategy, num_classes=5,
                   global_batch_size=8, skip_nonfinite=True)


def _batches(strategy, batches):
    images = np.stack([b[0] for b in batches])
    labels = np.stack([b[1] for b in batches])
    ds = tf.data.Dataset.from_tensor_slices((images, labels))
    return iter(strategy.experimental_distribute_dataset(ds))


def _state(trainer):
    return ([v.numpy() for v in trainer.model.trainable_variables],
            [(v.path, v.numpy()) for v in trainer.optimizer.variables])


@covers("skip_leaves_state_unchanged")
@pytest.mark.parametrize("mirrored", [False, True])
def test_skipped_step_changes_nothing_but_the_counter(mirrored):
    # Mirrored: the update is conditional in cross-replica context
    # (merge_call); default strategy: a plain tf.cond in replica context.
    strategy = (two_cpu_mirrored()
                if mirrored else tf.distribute.get_strategy())
    rng = np.random.default_rng(0)
    batches = [(rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32"),
                rng.integers(0, 5, 8).astype("int32")) for _ in range(3)]
    poisoned = (batches[1][0].copy(), batches[1][1])
    poisoned[0][5, 3, 3, 0] = np.nan  # one example: the second replica's
    trainer = _trainer(strategy, dict(
        name="adamw", lr=1e-2, weight_decay=0.1, decay_type="constant"
    ))
    iterator = _batches(strategy, [batches[0], poisoned])
    assert trainer.train(iterator, 1)["nonfinite_steps"] == 0
    weights, state = _state(trainer)
    result = trainer.train(iterator, 1)
    assert result["nonfinite_steps"] == 1
    assert result["first_nonfinite_step"] == 1
    weights_after, state_after = _state(trainer)
    for a, b in zip(weights, weights_after):
        np.testing.assert_array_equal(a, b)
    changed = [(p, a, b) for (p, a), (_, b) in zip(state, state_after)
               if not np.array_equal(a, b)]
    # Moments and EMA averages untouched; only the step counter moved.
    assert len(state) > 3 * len(weights)  # m, v and EMA for every weight
    assert [(p.split("/")[-1], int(a), int(b)) for p, a, b in changed] == [
        ("iteration", 1, 2)
    ]
    # With momentum SGD, the skipped batch leaves no trace at all.
    sgd = dict(name="sgd", lr=0.1, momentum=0.9, decay_type="constant")
    without = _trainer(strategy, sgd)
    without.train(_batches(strategy, [batches[0], batches[2]]), 2)
    skipped = _trainer(strategy, sgd)
    result = skipped.train(
        _batches(strategy, [batches[0], poisoned, batches[2]]), 3
    )
    assert result["first_nonfinite_step"] == 2
    for a, b in zip(_state(without)[0], _state(skipped)[0]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mirrored", [False, True])
def test_a_skipped_first_step_starts_the_ema_at_the_weights(mirrored):
    """Keras copies the weights into its zero-started EMA averages on step
    0 only: with step 0 skipped, the averages still start at the weights
    (not at zero, which would scale every later average down), and the
    next step averages them with decay 0.9 as usual."""
    strategy = (two_cpu_mirrored()
                if mirrored else tf.distribute.get_strategy())
    rng = np.random.default_rng(0)
    batches = [(rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32"),
                rng.integers(0, 5, 8).astype("int32")) for _ in range(2)]
    batches[0][0][0, 0, 0, 0] = np.nan
    trainer = _trainer(strategy, dict(name="sgd", lr=0.1,
                                      decay_type="constant"))
    iterator = _batches(strategy, batches)
    start = [v.numpy() for v in trainer.model.trainable_variables]
    assert trainer.train(iterator, 1)["nonfinite_steps"] == 1
    averages = keras_compat.ema_variables(trainer.optimizer)
    for average, weight in zip(averages, start):
        np.testing.assert_array_equal(average.numpy(), weight)
    assert trainer.train(iterator, 1)["nonfinite_steps"] == 0
    for average, before, after in zip(
            averages, start, trainer.model.trainable_variables):
        np.testing.assert_allclose(
            average.numpy(), 0.9 * before + 0.1 * after.numpy(), atol=1e-6)


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
    """A finished in-process run with checkpoints at steps 10 and 20."""
    workdir = str(tmp_path_factory.mktemp("small") / "run")
    metrics = train_lib.train_and_evaluate(tiny_config(), workdir)
    assert metrics["steps"] == 20
    return workdir


def _copy(small_run, tmp_path):
    workdir = str(tmp_path / "copy")
    shutil.copytree(small_run, workdir)
    return workdir


@covers("resume_other_model_no_config")
def test_foreign_checkpoint_without_config_is_refused(small_run, tmp_path):
    workdir = _copy(small_run, tmp_path)
    os.remove(os.path.join(workdir, "config.json"))
    config = tiny_config(total_steps=30)
    config.model.hidden_size = 48
    with pytest.raises(train_lib.TrainingError) as info:
        train_lib.train_and_evaluate(config, workdir)
    check_error("resume_other_model_no_config", info.value)
    # Nothing was rewritten: config.json stays absent, the checkpoints stay.
    assert not os.path.exists(os.path.join(workdir, "config.json"))
    assert state_names(workdir) == "ckpt-20"


@covers("restore_edited_config")
def test_restore_with_edited_config_is_refused(small_run, tmp_path):
    workdir = _copy(small_run, tmp_path)
    path = os.path.join(workdir, "config.json")
    config = json.load(open(path))
    config["model"]["num_layers"] = 2
    json.dump(config, open(path, "w"))
    with pytest.raises(ValueError) as info:
        wd.restore_model(workdir)
    check_error("restore_edited_config", info.value)


def _resume_after_damage(small_run, tmp_path, damage, caplog):
    workdir = _copy(small_run, tmp_path)
    latest = os.path.join(ckpt_dir(workdir), "ckpt-20")
    damage(latest)
    caplog.set_level("INFO")
    caplog.set_level("INFO", logger="absl")
    metrics = train_lib.train_and_evaluate(tiny_config(total_steps=30),
                                           workdir)
    assert metrics["steps"] == 30 and metrics["steps_this_run"] == 20
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"Resumed from {ckpt_dir(workdir)}/ckpt-10 at step 10" in log
    assert_nothing_half_written(workdir)
    return log


def test_a_resume_warning_shows_tensorflows_reason_not_its_op_name():
    """A wrapped op's error begins with its internal op's name; the
    warnings show the reason after it, on one line."""
    from keras_vit import errors
    from keras_vit.training import resume

    error = tf.errors.DataLossError(
        None, None, "{{function_node __wrapped__RestoreV2_dtypes_3_device_"
        "/job:localhost/replica:0/task:0/device:CPU:0}} The length "
        "checksum does not match\n\t [[{{node RestoreV2}}]]")
    assert resume._first_line(error) == (
        "DataLossError: The length checksum does not match")
    assert resume._first_line(tf.errors.DataLossError(
        None, None, "{{function_node __wrapped__RestoreV2}}")) == (
        "DataLossError: ")
    assert errors.one_line(error).startswith("The length checksum")


# A checkpoint file cut short: its data file, or its index ("not an
# sstable"), to half or to nothing.
CUTS = [(".data-00000-of-00001", 0.5), (".index", 0.5), (".index", 0)]


@covers("truncated_latest_checkpoint")
@pytest.mark.parametrize("suffix, keep", CUTS)
def test_truncated_latest_checkpoint_falls_back(small_run, tmp_path, caplog,
                                                suffix, keep):
    def truncate(prefix):
        path = prefix + suffix  # an index cut short: "not an sstable"
        with open(path, "r+b") as f:
            f.truncate(int(os.path.getsize(path) * keep))

    log = _resume_after_damage(small_run, tmp_path, truncate, caplog)
    check_says("truncated_latest_checkpoint", log)


@covers("truncated_checkpoint_as_model")
def test_truncated_checkpoint_of_a_run_given_as_model(small_run, tmp_path):
    """keras-vit-predict --model=RUN whose newest checkpoint is cut short:
    the one before it is loaded, with a warning; with every checkpoint cut
    short, one line naming them."""

    workdir = _copy(small_run, tmp_path)
    image = str(tmp_path / "digit.png")
    tf.io.write_file(image, tf.io.encode_png(
        np.full((8, 8, 3), 200, np.uint8)))

    def truncate(name):
        data = os.path.join(ckpt_dir(workdir), name + ".data-00000-of-00001")
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 2)

    truncate("ckpt-20")
    result = console.run("predict", [f"--model={workdir}", image])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "digit.png: " in result.stdout
    assert "ckpt-20 cannot be used" in result.stderr
    warned = result.stderr
    # What an evaluation and an export of it record: the step loaded.
    out, exports = str(tmp_path / "eval"), str(tmp_path / "exports")
    result = console.run("evaluate", ["--mode=eval", f"--workdir={workdir}",
                                      f"--output_dir={out}"])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(out, "eval_digits_test.json")) as f:
        assert json.load(f)["step"] == 10
    result = console.run("export", [f"--model={workdir}", "--no_warmup",
                                    f"--export_dir={exports}"])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(result.stdout.strip(), "assets.extra",
                           "export.json")) as f:
        assert json.load(f)["source"] == dict(
            location=workdir, kind="workdir", step=10)
    index = os.path.join(ckpt_dir(workdir), "ckpt-10.index")
    with open(index, "r+b") as f:  # its index this time
        f.truncate(100)
    result = console.run("predict", [f"--model={workdir}", image])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    (line,) = [x for x in result.stderr.splitlines()
               if x.startswith("keras-vit-predict: error: ")]
    assert f"No checkpoint of {workdir} can be used: ckpt-20 (" in line
    assert "; ckpt-10 (" in line and "copy the run's checkpoints" in line
    check_says("truncated_checkpoint_as_model", warned + line)


def test_a_finished_run_without_its_checkpoints_says_where_they_went(
        small_run, tmp_path):
    """A finished run given as a model whose checkpoints were removed (a
    VTAB-1k task's, once scored): the line says so and names the setting
    that keeps them, not "has not saved one yet"."""
    workdir = _copy(small_run, tmp_path)
    shutil.rmtree(ckpt_dir(workdir))
    with pytest.raises(FileNotFoundError, match=r"the run finished "
                       r"\(metrics.json\) and its checkpoints were removed "
                       r"since .*keep_checkpoints=True keeps them"):
        wd.restore_model(workdir)
    os.remove(os.path.join(workdir, wd.METRICS))
    with pytest.raises(FileNotFoundError, match="has not saved one yet"):
        wd.restore_model(workdir)


def _other_bytes(prefix):
    """The checkpoint's data file, its length kept, every byte changed (a
    copy gone wrong)."""
    with open(prefix + ".data-00000-of-00001", "r+b") as f:
        flipped = bytes(b ^ 0xA5 for b in f.read())
        f.seek(0)
        f.write(flipped)


@covers("checkpoint_other_bytes")
def test_a_checkpoint_of_other_bytes_is_passed_over(small_run, tmp_path,
                                                    caplog):
    """The newest checkpoint's data file of other bytes (TensorFlow's
    "length checksum does not match", an error of no kind): given as a
    model, the one before is loaded, with TensorFlow's reason (not its
    internal op's name) in the warning; resumed, the run goes on from the
    one before (not "does not match this model/config")."""
    workdir = _copy(small_run, tmp_path)
    _other_bytes(os.path.join(ckpt_dir(workdir), "ckpt-20"))
    caplog.set_level("WARNING", logger="absl")
    wd.restore_model(workdir, use_ema=False)
    assert "ckpt-20 cannot be used (" in caplog.text
    assert "checksum does not match" in caplog.text, caplog.text
    assert "function_node" not in caplog.text
    warned = caplog.text
    log = _resume_after_damage(small_run, tmp_path / "resumed",
                               _other_bytes, caplog)
    resumed, = [line for line in log.splitlines()
                if "resuming from the previous complete" in line]
    assert "checksum does not match" in resumed, resumed
    assert "function_node" not in resumed
    check_says("checkpoint_other_bytes", warned + log)


def test_a_checkpoint_of_nan_weights_is_passed_over_as_a_model(
        small_run, tmp_path, caplog):
    """A run given as a model whose newest checkpoint holds NaN weights
    (it diverged after the one before): the one before is loaded, with a
    warning naming the variable."""
    from keras_vit import build

    workdir = _copy(small_run, tmp_path)
    config = wd.read_config(workdir)
    model, optimizer = build.build_run(
        config, wd.num_classes(config.model, workdir))
    optimizer.build(model.trainable_variables)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer)
    newest = os.path.join(ckpt_dir(workdir), "ckpt-20")
    ckpt.read(newest).expect_partial()
    variable = model.trainable_variables[0]
    variable.assign(np.full(variable.shape, np.nan, variable.dtype))
    ckpt.write(newest)
    caplog.set_level("WARNING", logger="absl")
    got = wd.restore_model(workdir, use_ema=False)
    assert "ckpt-20 cannot be used" in caplog.text
    assert "holds NaN or infinite values" in caplog.text
    want = wd.restore_model(workdir, use_ema=False, checkpoint=os.path.join(
        ckpt_dir(workdir), "ckpt-10"))
    for a, b in zip(got.weights, want.weights):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


@covers("missing_latest_checkpoint")
def test_missing_latest_checkpoint_falls_back(small_run, tmp_path, caplog):
    def delete(prefix):
        for path in glob.glob(prefix + ".*"):
            os.remove(path)

    log = _resume_after_damage(small_run, tmp_path, delete, caplog)
    check_says("missing_latest_checkpoint", log)


@covers("missing_checkpoint_list")
@pytest.mark.parametrize("damage", ["deleted", "empty", "cut short"])
def test_a_lost_checkpoint_list_is_read_from_the_files(small_run, tmp_path,
                                                       caplog, damage):
    """checkpoints/checkpoint (TensorFlow's list) missing, empty or cut
    short, as a copy may leave it: the run resumes from the newest ckpt-N
    there, never from step 0 (whose ckpt-10 would write over the run's),
    and writes the list again, so that rotation keeps working."""
    workdir = _copy(small_run, tmp_path)
    state = os.path.join(ckpt_dir(workdir), "checkpoint")
    if damage == "deleted":
        os.remove(state)
    else:
        text = open(state).read()
        open(state, "w").write("" if damage == "empty" else text[:30])
    caplog.set_level("INFO", logger="absl")
    metrics = train_lib.train_and_evaluate(
        tiny_config(total_steps=40, **{"checkpoints.keep": 2}), workdir)
    assert metrics["steps"] == 40 and metrics["steps_this_run"] == 20
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"Resumed from {ckpt_dir(workdir)}/ckpt-20 at step 20" in log
    check_says("missing_checkpoint_list", log)
    assert "ParseError" not in log
    # Rotation (keep 2) reached the checkpoints the list was rebuilt from.
    assert sorted(glob.glob(os.path.join(ckpt_dir(workdir), "*.index"))) \
        == [os.path.join(ckpt_dir(workdir), f"ckpt-{s}.index")
            for s in (30, 40)]


def test_a_list_cut_at_a_line_still_offers_the_checkpoints_it_left_out(
        tmp_path):
    """A list cut at a line's end parses, but leaves checkpoints out: they
    are all read by step, newest first, as the chief writes the list
    again (every worker then agrees, before and after); a folder without
    a list, by step alike."""
    for step in (5, 10, 20):
        (tmp_path / f"ckpt-{step}.index").write_bytes(b"")
    (tmp_path / "ckpt-30_temp").mkdir()  # a save in progress: not one
    state = tmp_path / "checkpoint"
    state.write_text('model_checkpoint_path: "ckpt-10"\n')
    folder = str(tmp_path)
    assert checkpoint_list.listed(folder) == [
        os.path.join(folder, f"ckpt-{s}") for s in (20, 10, 5)]
    state.unlink()
    assert checkpoint_list.listed(folder) == [
        os.path.join(folder, f"ckpt-{s}") for s in (20, 10, 5)]
    assert checkpoint_list.latest(folder) == os.path.join(folder, "ckpt-20")


@pytest.mark.parametrize("kept_lines", [2, 3, 4])
def test_a_list_cut_at_a_line_is_written_again_for_rotation(
        small_run, tmp_path, caplog, kept_lines):
    """A list cut at a line's end parses, but TensorFlow's manager would
    never rotate what it leaves out (a path, or a path's timestamp): the
    run writes it again at its start, resumes from the newest, and
    rotation (keep 2) removes the old checkpoints."""
    workdir = _copy(small_run, tmp_path)
    state = os.path.join(ckpt_dir(workdir), "checkpoint")
    lines = open(state).read().splitlines(keepends=True)
    # 2: the newest path and the oldest of the list; 3: every path, no
    # timestamp; 4: every path, one timestamp of two.
    open(state, "w").write("".join(lines[:kept_lines]))
    caplog.set_level("INFO", logger="absl")
    metrics = train_lib.train_and_evaluate(
        tiny_config(total_steps=40, **{"checkpoints.keep": 2}), workdir)
    assert metrics["steps_this_run"] == 20
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert f"Resumed from {ckpt_dir(workdir)}/ckpt-20 at step 20" in log
    assert "again from the checkpoints there: ckpt-10, ckpt-20" in log
    assert sorted(glob.glob(os.path.join(ckpt_dir(workdir), "*.index"))) \
        == [os.path.join(ckpt_dir(workdir), f"ckpt-{s}.index")
            for s in (30, 40)]


def test_a_whole_list_is_left_as_it_is(tmp_path):
    """A list naming every checkpoint there, with their times (as
    TensorFlow writes it) is not written again."""
    for step in (10, 20):
        (tmp_path / f"ckpt-{step}.index").write_bytes(b"")
    text = ('model_checkpoint_path: "ckpt-20"\n'
            'all_model_checkpoint_paths: "ckpt-10"\n'
            'all_model_checkpoint_paths: "ckpt-20"\n'
            "all_model_checkpoint_timestamps: 1.0\n"
            "all_model_checkpoint_timestamps: 2.0\n")
    (tmp_path / "checkpoint").write_text(text)
    checkpoint_list.relist(str(tmp_path))
    assert (tmp_path / "checkpoint").read_text() == text
    (tmp_path / "ckpt-5.index").write_bytes(b"")  # one it leaves out
    checkpoint_list.relist(str(tmp_path))
    assert 'all_model_checkpoint_paths: "ckpt-5"' in (
        tmp_path / "checkpoint").read_text()


@covers("two_runs_one_workdir")
def test_a_second_training_of_a_workdir_in_training_is_refused(tmp_path):
    """keras-vit-train on a workdir another keras-vit-train trains: one
    line, nothing read; the lock goes with the process that held it."""
    workdir = tmp_path / "run"
    log = tmp_path / "first.log"
    args = [*console.TINY_DIGITS, f"--workdir={workdir}",
            "--config.trainer.total_steps=100000",
            "--config.checkpoints.every_steps=0",
            "--config.evals.test.every_steps=0"]
    proc = console.start("train", args, log)
    try:
        console.wait_for(log, r"Reading the data", proc)  # it holds it
        second = console.run("train", args)
    finally:
        proc.send_signal(signal.SIGINT)
        console.finish(proc, timeout=120)
    assert second.returncode == 1, second.stderr[-3000:]
    assert second.stderr.strip().splitlines() == [
        f"keras-vit-train: error: Another process is running the training "
        f"run in {workdir} (it holds the folder's lock): let it end or stop "
        "it (the same command then resumes), or give this run another "
        "folder."]
    check_says("two_runs_one_workdir", second.stderr)
    with run_lock.held(str(workdir)):  # let go of at the first's end
        with pytest.raises(UsageError, match="holds the folder's lock"):
            with run_lock.held(str(workdir)):
                pass
    with run_lock.held("gs://bucket/run"):  # remote: not locked
        pass


@covers("two_evaluations_one_output_folder")
def test_a_second_evaluation_into_a_folder_in_use_is_refused(
        small_run, tmp_path):
    """keras-vit-evaluate --mode=fewshot or --mode=vtab into an output
    folder that another such run holds: one line, nothing written there;
    once that run has ended, the same command runs."""
    out = tmp_path / "results"
    out.mkdir()
    (out / "fewshot.json").write_text("{}")  # the other run's, so far
    probe = ["--mode=fewshot", "--config=fewshot:digits",
             "--config.model.image_size=16",
             "--config.input.pp.eval_resize_size=16",
             f"--workdir={small_run}", f"--output_dir={out}"]
    vtab = ["--mode=vtab", "--config=vtab", "--tasks=dtd",
            f"--workdir={small_run}", f"--output_dir={out}"]
    with run_lock.held(str(out), "few-shot evaluation"):  # the other run
        refused = [console.run("evaluate", args) for args in (probe, vtab)]
    for result in refused:
        assert result.returncode == 1, result.stderr[-3000:]
        assert result.stderr.strip().splitlines() == [
            f"keras-vit-evaluate: error: Another process is running the "
            f"VTAB-1k or few-shot evaluation in {out} (it holds the "
            "folder's lock): let it end or stop it (the same command then "
            "resumes), or give this run another --output_dir."]
    check_says("two_evaluations_one_output_folder", refused[0].stderr)
    assert os.listdir(out) == ["fewshot.json"]
    (out / "fewshot.json").unlink()
    done = console.run("evaluate", probe)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "fewshot.json").read_text())["results"][
        "digits"]
    # Into the run's own folder (no --output_dir) while it trains (it
    # holds the folder): probed; the training's lock is not asked for.
    workdir = _copy(small_run, tmp_path)
    with run_lock.held(workdir):
        done = console.run("evaluate", probe[:-2] + [f"--workdir={workdir}"])
    assert done.returncode == 0, done.stderr[-3000:]
    assert os.path.exists(os.path.join(workdir, "fewshot.json"))


def test_a_finished_run_is_read_where_it_cannot_be_written(
        small_run, tmp_path, monkeypatch):
    """A finished run on a read-only mount says it has finished (status
    0, as everywhere); one with steps to train is refused in one line."""
    workdir = _copy(small_run, tmp_path)
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: False if (
        path == workdir and mode == os.W_OK) else real_access(path, mode))
    metrics = train_lib.train_and_evaluate(tiny_config(), workdir)
    assert metrics["finished_before"] and metrics["steps"] == 20
    with pytest.raises(UsageError, match=r"Cannot write in `workdir` .* "
                       r"\(read-only, or not yours\)"):
        train_lib.train_and_evaluate(tiny_config(total_steps=30), workdir)


def test_a_save_that_did_not_finish_is_removed_at_the_next_start(tmp_path):
    """A `ckpt-N_temp` folder (the shards of a save a full disk or a kill
    cut short; TensorFlow never removes it) goes at the next start, one
    written minutes ago (a save perhaps in progress) stays; the run
    resumes from its last complete checkpoint."""
    workdir = str(tmp_path / "run")
    assert train_lib.train_and_evaluate(tiny_config(total_steps=10),
                                        workdir)["steps"] == 10
    partial = os.path.join(ckpt_dir(workdir), "ckpt-15_temp")
    os.makedirs(partial)
    with open(os.path.join(partial, "part-00000-of-00001.data-00000-of-"
                           "00001"), "wb") as f:
        f.write(b"\0" * 1024)
    recent = os.path.join(ckpt_dir(workdir), "ckpt-16_temp")
    os.makedirs(recent)  # a save that may be in progress: kept
    # A killed save of a step the run saves again, holding a file that
    # TensorFlow's merge leaves: it goes with that save.
    redone = os.path.join(ckpt_dir(workdir), "ckpt-20_temp")
    os.makedirs(redone)
    open(os.path.join(redone, "checkpoint.tmp1a2b.tempstate"), "w").close()
    old = time.time() - checkpoint_list.PARTIAL_AGE_S - 60
    os.utime(partial, (old, old))
    again = train_lib.train_and_evaluate(tiny_config(), workdir)
    assert again["steps"] == 20 and again["steps_this_run"] == 10
    assert not os.path.exists(partial) and os.path.isdir(recent)
    assert not os.path.exists(redone)
    assert checkpoint_list.latest(ckpt_dir(workdir)).endswith("ckpt-20")


@covers("foreign_config_json")
def test_a_workdir_holding_another_programs_config_is_refused(tmp_path):
    """--workdir naming a model folder (a transformers config.json, no
    checkpoint): refused by name, the file left as it was."""
    folder = tmp_path / "vit-base"
    folder.mkdir()
    text = '{"architectures": ["ViTForImageClassification"]}'
    (folder / "config.json").write_text(text)
    with pytest.raises(keras_vit.errors.UsageError) as info:
        train_lib.train_and_evaluate(tiny_config(), str(folder))
    check_error("foreign_config_json", info.value)
    assert (folder / "config.json").read_text() == text
    assert os.listdir(folder) == ["config.json"]
    timm = '{"architecture": "vit_base_patch16_224"}'
    (folder / "config.json").write_text(timm)
    with pytest.raises(keras_vit.errors.UsageError, match="config.json is "
                       "a timm model's config, not a training run's"):
        train_lib.train_and_evaluate(tiny_config(), str(folder))
    assert os.listdir(folder) == ["config.json"]


class _SigintAtStart(interrupt.StopRequest):
    """The real Ctrl-C flag; a real SIGINT reaches this process as the
    loop starts, before its first step (while it compiles)."""

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        if name == "on_signal" and getattr(self, "_open", False):
            os.kill(os.getpid(), signal.SIGINT)


@covers("stop_before_first_step")
def test_a_stop_before_the_first_step_saves_nothing(tmp_path, monkeypatch,
                                                    capsys, caplog):
    """Ctrl-C before the first step writes no checkpoint: a fresh run
    leaves none (another config may start afresh there; the command's
    line says so), a resumed one leaves its checkpoint as it was (not
    written again)."""
    workdir = str(tmp_path / "run")
    monkeypatch.setattr(loop, "_Preemption", _SigintAtStart)
    code = train_command.main(["keras-vit-train", *console.TINY_DIGITS,
                               f"--workdir={workdir}"])
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    # The log's line and the command's agree: nothing to resume yet.
    assert "Stopped at step 0 after Ctrl-C; nothing trained, nothing " \
        "saved. Run the same command to start." in caplog.text
    # The call that compiled ran no step: it says so, not "training".
    assert re.search(r"Compiled: the first train call took [\d.]+ s; "
                     r"stopping\.", caplog.text)
    assert code == PREEMPTED_EXIT_CODE and line == (
        "keras-vit-train: stopped: Ctrl-C at step 0, nothing trained, "
        "nothing saved; run the same command to start.")
    check_says("stop_before_first_step", line)
    assert tf.train.latest_checkpoint(ckpt_dir(workdir)) is None
    other = tiny_config(total_steps=10, **{"model.hidden_size": 24})
    monkeypatch.setattr(loop, "_Preemption", interrupt.StopRequest)
    assert train_lib.train_and_evaluate(other, workdir)["steps"] == 10
    index = os.path.join(ckpt_dir(workdir), "ckpt-10.index")
    before = os.stat(index).st_mtime_ns
    monkeypatch.setattr(loop, "_Preemption", _SigintAtStart)
    stopped = train_lib.train_and_evaluate(
        tiny_config(total_steps=20, **{"model.hidden_size": 24}), workdir)
    assert stopped == {"preempted": True, "step": 10, "signal": "Ctrl-C",
                       "saved": False}
    assert os.stat(index).st_mtime_ns == before


def _ctrl_c_at_the_second_batch(monkeypatch, signum=signal.SIGINT) -> list:
    """Trainer.evaluate sends a real Ctrl-C (or `signum`) once, at its
    first evaluation's second batch; the list of batch numbers it reads."""
    evaluate, batches = Trainer.evaluate, []

    def signalled(self, dataset, use_ema=True, on_batch=None):
        def batch_by_batch():
            for i, batch in enumerate(dataset, start=1):
                batches.append(i)
                if i == 2 and len(batches) == 2:
                    os.kill(os.getpid(), signum)
                yield batch
        return evaluate(self, batch_by_batch(), use_ema, on_batch)

    monkeypatch.setattr(Trainer, "evaluate", signalled)
    return batches


@covers("stop_during_evaluation")
def test_a_stop_during_an_evaluation_leaves_it(tmp_path, monkeypatch,
                                               capsys, caplog):
    """Ctrl-C during a periodic evaluation (one host): the evaluation is
    left after its current batch, not recorded, and the run saves that
    step and stops, as a stop between steps does."""
    workdir = str(tmp_path / "run")
    batches = _ctrl_c_at_the_second_batch(monkeypatch)
    args = [
        "keras-vit-train", *console.TINY_DIGITS, f"--workdir={workdir}",
        "--config.trainer.total_steps=20", "--config.trainer.steps_per_loop=5",
        "--config.evals.test.every_steps=10",
        "--config.checkpoints.every_steps=20"]
    code = train_command.main(args)
    err = capsys.readouterr().err
    assert code == PREEMPTED_EXIT_CODE, err[-2000:]
    assert batches == [1, 2]  # of the ~23 the split has
    assert err.strip().splitlines()[-1] == (
        "keras-vit-train: stopped: Ctrl-C at step 10, checkpoint saved; "
        "run the same command to resume.")
    check_says("stop_during_evaluation", caplog.text + err)
    assert checkpoint_list.latest(ckpt_dir(workdir)).endswith("ckpt-10")
    rows = history.read_history(workdir)
    assert [r["split"] for r in rows if r["split"] != "train"] == []
    # The same command evaluates step 10 first, then trains on.
    caplog.clear()
    caplog.set_level("INFO")
    caplog.set_level("INFO", logger="absl")
    assert train_command.main(args) == 0
    assert ("Evaluating at step 10 first: history.csv has no evaluation "
            "of it (a stop left it unfinished).") in caplog.text
    rows = history.read_history(workdir)
    assert [(r["step"], r["split"]) for r in rows
            if r["split"] != "train"] == [(10, "test"), (20, "test")]
    caplog.clear()  # a resume after a recorded evaluation does not redo it
    assert train_command.main([
        "--config.trainer.total_steps=30" if "total_steps" in arg else arg
        for arg in args]) == 0
    assert "Evaluating at step 20 first" not in caplog.text


@covers("stop_during_final_evaluation")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_during_the_final_evaluation_leaves_it(tmp_path, monkeypatch,
                                                      capsys, caplog, signum):
    """Ctrl-C (or SIGTERM) during the final evaluation (one host): it is
    left after its current batch, the run is not finished (no export, no
    metrics.json), and the same command evaluates again, exports and
    finishes without training."""
    workdir = str(tmp_path / "run")
    batches = _ctrl_c_at_the_second_batch(monkeypatch, signum)
    caplog.set_level("INFO", logger="absl")
    args = [
        "keras-vit-train", *console.TINY_DIGITS, f"--workdir={workdir}",
        "--config.trainer.total_steps=10", "--config.trainer.steps_per_loop=5",
        "--config.evals.test.every_steps=0", "--config.export.enabled=True",
        "--config.checkpoints.every_steps=5"]
    code = train_command.main(args)
    err = capsys.readouterr().err
    assert code == PREEMPTED_EXIT_CODE, err[-2000:]
    assert batches == [1, 2]  # of the ~23 the split has
    assert err.strip().splitlines()[-1] == (
        "keras-vit-train: stopped: Ctrl-C at step 10, checkpoint saved; run "
        "the same command to evaluate again and finish."
        if signum == signal.SIGINT else
        "keras-vit-train: preempted: stopped at step 10 with a checkpoint "
        "saved; run the same command to evaluate again and finish.")
    check_says("stop_during_final_evaluation", caplog.text + err)
    assert checkpoint_list.latest(ckpt_dir(workdir)).endswith("ckpt-10")
    assert not os.path.exists(os.path.join(workdir, "metrics.json"))
    assert not os.path.exists(os.path.join(workdir, "export"))
    rows = history.read_history(workdir)
    assert [r["split"] for r in rows if r["split"] != "train"] == []
    caplog.clear()
    assert train_command.main(args) == 0
    assert "Tracing and compiling" not in caplog.text  # no training
    assert wd.read_json(os.path.join(workdir, "metrics.json"))["steps"] == 10
    assert os.listdir(os.path.join(workdir, "export", "vit")) == ["1"]
    rows = history.read_history(workdir)
    assert [(r["step"], r["split"]) for r in rows
            if r["split"] != "train"] == [(10, "test")]


def test_a_refused_block_removes_only_the_folders_it_made(tmp_path):
    """atomic.removed_if_refused: the folder made (and its empty parents
    made with it) goes when the block raises one of the refusals given;
    another error, a folder given as made by no one (None), or one that
    holds a file by then, stays."""

    target = tmp_path / "runs" / "b16" / "run"
    made = atomic.make_folders(str(target))
    assert made == str(tmp_path / "runs")
    with pytest.raises(OSError, match="not a refusal"):
        with atomic.removed_if_refused(str(target), made, UsageError):
            raise OSError("not a refusal")
    assert target.is_dir()
    with pytest.raises(UsageError):
        with atomic.removed_if_refused(str(target), None, UsageError):
            raise UsageError("made by no one")
    assert target.is_dir()
    (target / "notes.txt").write_text("mine")
    with pytest.raises(UsageError):
        with atomic.removed_if_refused(str(target), made, UsageError):
            raise UsageError("refused")
    assert (target / "notes.txt").read_text() == "mine"
    os.remove(target / "notes.txt")
    with pytest.raises(KeyboardInterrupt):
        with atomic.removed_if_refused(str(target), made):
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []


@covers("failed_metrics_write")
def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path,
                                                        monkeypatch):
    path = str(tmp_path / "metrics.json")
    wd.write_json(path, {"test_accuracy": 0.5})
    real_open = open

    class FullDisk:
        """A local file whose write stops half-way on a full disk."""

        def __init__(self, file, mode="r", *args, **kwargs):
            self._file = real_open(file, mode, *args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self._file.close()

        def write(self, data):
            self._file.write(data[: len(data) // 2])
            raise OSError(28, "No space left on device")

    # atomic_write writes local files with the built-in open.
    monkeypatch.setattr(atomic, "open", FullDisk, raising=False)
    with pytest.raises(OSError) as info:
        wd.write_json(path, {"test_accuracy": 0.9})
    monkeypatch.undo()
    check_error("failed_metrics_write", info.value)
    assert json.load(open(path)) == {"test_accuracy": 0.5}
    assert os.listdir(tmp_path) == ["metrics.json"]


def test_json_files_hold_null_for_nan_and_infinity(tmp_path):
    """A diverged run's metrics (NaN loss) stay valid JSON: null, which
    strict readers accept (Python writes NaN by default, which they
    refuse)."""
    path = str(tmp_path / "metrics.json")
    wd.write_json(path, {"test_loss": float("nan"), "steps": 40,
                         "curve": [1.5, float("inf"), -float("inf")],
                         "eval": {"loss": np.float64("nan")}})
    text = open(path).read()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(name):
        raise ValueError(name)

    assert json.loads(text, parse_constant=refuse) == {
        "test_loss": None, "steps": 40, "curve": [1.5, None, None],
        "eval": {"loss": None}}


def _ctrl_c_after_publishing(monkeypatch) -> None:
    """A real Ctrl-C reaches this process the moment an export's version
    is published (before models.config lists it)."""
    from keras_vit.export import versions as export_versions

    publish = export_versions.publish_version

    def publish_then_ctrl_c(*args, **kwargs):
        path = publish(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return path

    monkeypatch.setattr(export_versions, "publish_version",
                        publish_then_ctrl_c)


@covers("failed_remote_publish")
def test_a_url_export_is_copied_graph_last_and_a_failed_copy_leaves_nothing(
        tmp_path, monkeypatch, caplog):
    """Where a folder has no rename (gs://), the version is copied file by
    file with its saved_model.pb last; a copy that fails is removed; a
    version that a killed copy left without saved_model.pb is named by the
    next export, which takes the next number. (A local folder stands in
    for the bucket: tf.io.gfile copies on both alike.)"""
    from keras_vit.export import versions as export_versions
    from keras_vit.export.saved_model import export_model

    monkeypatch.setattr(export_versions, "renames_whole", lambda path: False)
    copied, failing = {}, []
    real_copy = tf.io.gfile.copy

    def copy(source, target, overwrite=False):
        if failing and len(copied) == failing[0]:
            raise OSError("connection reset")
        with tf.io.gfile.GFile(source, "rb") as f:
            copied[target] = f.read()
        real_copy(source, target, overwrite=overwrite)

    monkeypatch.setattr(tf.io.gfile, "copy", copy)
    model = keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16)
    exports = tmp_path / "exports"
    path = export_model(model, str(exports), warmup_images=[], verify=True)
    assert path == str(exports / "vit" / "1")
    written = {os.path.join(d, n) for d, _, names in os.walk(path)
               for n in names}
    assert set(copied) == written
    assert list(copied)[-1] == os.path.join(path, "saved_model.pb")
    for target, content in copied.items():
        with open(target, "rb") as f:
            assert f.read() == content, target
    assert os.listdir(exports / "vit") == ["1"]  # the temporary one gone
    # A copy that fails after two files: neither version 2 nor its
    # temporary folder stays.
    copied.clear()
    failing.append(2)
    with pytest.raises(OSError, match="connection reset"):
        export_model(model, str(exports), warmup_images=[], verify=False)
    assert os.listdir(exports / "vit") == ["1"]
    # What a kill -9 in the middle of a copy leaves: no saved_model.pb.
    failing.clear()
    (exports / "vit" / "2" / "variables").mkdir(parents=True)
    caplog.set_level("WARNING", logger="absl")
    path = export_model(model, str(exports), warmup_images=[], verify=False)
    assert path == str(exports / "vit" / "3")
    log = "\n".join(r.getMessage() for r in caplog.records)
    check_says("failed_remote_publish", log)
    assert f"{exports / 'vit' / '2'} holds no saved_model.pb" in log
    assert "vit/1 holds" not in log and "vit/3 holds" not in log
    loaded = tf.saved_model.load(path)
    assert "serving_default" in loaded.signatures


def test_ctrl_c_while_an_export_is_published_waits_until_it_is_listed(
        tmp_path, monkeypatch):
    """Ctrl-C the moment a version is published: it is also listed in
    models.config (and batching_parameters.txt written) before the
    KeyboardInterrupt, not left unlisted."""
    from keras_vit.export.saved_model import export_model

    _ctrl_c_after_publishing(monkeypatch)
    model = keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16)
    exports = tmp_path / "exports"
    # As in a command (a pytest-xdist worker ignores SIGINT).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            export_model(model, str(exports), warmup_images=[],
                         verify=False)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert sorted(os.listdir(exports / "vit")) == ["1"]
    assert "name: \"vit\"" in (exports / "models.config").read_text()
    assert (exports / "batching_parameters.txt").exists()


def test_ctrl_c_while_publishing_names_what_was_published(
        tmp_path, monkeypatch, capsys):
    """keras-vit-export stopped by a Ctrl-C held while it published a
    version: its line names the version, written whole (run again, the
    command would make a second one)."""
    from keras_vit.commands import export as export_command

    _ctrl_c_after_publishing(monkeypatch)
    model_path = str(tmp_path / "m.keras")
    keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(model_path)
    exports = tmp_path / "exports"
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = export_command.main([
            "keras-vit-export", f"--model={model_path}",
            f"--export_dir={exports}", "--model_name=vit"])
    finally:
        signal.signal(signal.SIGINT, before)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 130
    assert line == (
        "keras-vit-export: interrupted: stopped at once (Ctrl-C). "
        f"{exports / 'vit' / '1'} was complete before the stop: no need to "
        "write it again.")
    assert atomic.written_before_stop() == []  # told once: not the next


@covers("concurrent_exports")
def test_exports_at_once_keep_each_others_models_config_entries(tmp_path):
    """Four processes add twenty models each to one models.config, all at
    the same moment (each waits for a start file once it has imported):
    every entry is there, as each reads the file again under the lock."""
    from keras_vit.export import server_config

    code = (
        "import os, sys, time\n"
        "from keras_vit.export import server_config\n"
        "path, worker, ready, go = sys.argv[1:]\n"
        "open(ready, 'w').close()\n"
        "while not os.path.exists(go):\n"
        "    time.sleep(0.001)\n"
        "for k in range(20):\n"
        "    name = f'm{worker}_{k}'\n"
        "    server_config.update_models_config(path, name, '/models/' + "
        "name, False)\n"
    )
    path = tmp_path / "exports" / "models.config"
    go = tmp_path / "go"
    workers = [subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(i),
         str(tmp_path / f"ready{i}"), str(go)], env=env(),
        stderr=subprocess.PIPE, text=True) for i in range(4)]
    deadline = time.time() + 300
    while not all((tmp_path / f"ready{i}").exists() for i in range(4)):
        assert time.time() < deadline and all(
            w.poll() is None for w in workers)
        time.sleep(0.05)
    go.touch()
    for worker in workers:
        assert worker.wait(300) == 0, worker.stderr.read()[-3000:]
    listed = [entry.name for entry in server_config.read_models_config(
        str(path)).model_config_list.config]
    assert sorted(listed) == sorted(
        f"m{i}_{k}" for i in range(4) for k in range(20))


@covers("litert_overwrite_interrupted")
def test_a_litert_overwrite_stopped_between_its_writes_is_refused(
        tmp_path, monkeypatch, capsys):
    """An --overwrite of a LiteRT export stopped before its class names are
    written (nothing changed: the old files answer as before), after them,
    or after the preprocessing record too (the new .tflite written whole
    but not renamed over the old): keras-vit-predict refuses the files
    that do not go together, in one line, rather than preprocess the old
    file as the new record says (a resize of 24, then none)."""
    pytest.importorskip("ai_edge_litert")
    from PIL import Image

    from keras_vit.commands import predict
    from keras_vit.export import litert

    def tiny(seed):
        keras.utils.set_random_seed(seed)
        return keras_vit.create_model(
            None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
            num_layers=1, num_heads=2, mlp_dim=16, head_zero_init=False)

    path, photo = str(tmp_path / "vit.tflite"), tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(0).integers(
        0, 256, (30, 40, 3), dtype=np.uint8)).save(photo)
    old, new = tiny(1), tiny(2)

    def export_old():
        litert.export_litert(old, path, class_names=["a", "b", "c"],
                             resize_size=24, verify=False)

    def predicted():
        status = predict.main(["keras-vit-predict", f"--model={path}",
                               str(photo)])
        return status, capsys.readouterr()

    export_old()
    status, first = predicted()
    assert status == 0, first.err
    write = litert.atomic_write
    for stop_at in (".labels.txt", ".preprocessing.json", ".tflite"):
        def stopping(target, content, stop_at=stop_at, **kwargs):
            if not str(target).endswith(stop_at):
                return write(target, content, **kwargs)
            if stop_at != ".tflite":
                raise KeyboardInterrupt
            def written_not_renamed(tmp):
                content(tmp)
                raise KeyboardInterrupt
            return write(target, written_not_renamed, **kwargs)

        monkeypatch.setattr(litert, "atomic_write", stopping)
        with pytest.raises(KeyboardInterrupt):
            litert.export_litert(new, path, class_names=["x", "y", "z"],
                                 verify=False)
        monkeypatch.setattr(litert, "atomic_write", write)
        status, seen = predicted()
        if stop_at == ".labels.txt":
            assert (status, seen.out) == (0, first.out)
            continue
        assert status == 1
        (line,) = [x for x in seen.err.splitlines()
                   if x.startswith("keras-vit-predict: error: ")]
        check_says("litert_overwrite_interrupted", line)
        export_old()
    assert not [n for n in os.listdir(tmp_path) if ".tmp-" in n]


class _BestWriter:
    """Stands in for the best checkpoint's writer: its newest checkpoint
    is `latest`; saves are counted, not written."""

    chief = False

    def __init__(self, latest):
        self.latest = lambda: latest
        self.saved = []

    def save(self, step):
        self.saved.append(step)


@covers("stop_before_best_record")
def test_a_best_checkpoint_saved_but_not_recorded_is_recorded_again(
        tmp_path):
    """What a kill between saving a best checkpoint and writing best.json
    leaves: the checkpoint of step S beside the record of an earlier best.
    The resumed run compares with S's accuracy (read from history.csv),
    not the earlier record's, and writes S's record again."""
    workdir = tmp_path / "run"
    args = console.TINY_DIGITS + [
        "--config.checkpoints.every_steps=2", "--config.log.every_steps=2",
        "--config.evals.test.every_steps=2",
        "--config.checkpoints.keep_best=test", f"--workdir={workdir}"]
    first = console.run("train", args + ["--config.trainer.total_steps=4"])
    assert first.returncode == 0, first.stderr[-3000:]
    best_json = workdir / "best" / "best.json"
    best = json.loads(best_json.read_text())
    ckpt = checkpoint_list.latest(str(workdir / "best" / "checkpoints"))
    assert ckpt.endswith(f"ckpt-{best['step']}")
    accuracy = {r["step"]: r["accuracy"] for r in history.read_history(
        str(workdir)) if r["split"] == "test"}
    assert best["accuracy"] == pytest.approx(accuracy[best["step"]],
                                             abs=1e-6)
    stale = dict(best, step=best["step"] - 1, accuracy=0.0)
    best_json.write_text(json.dumps(stale))

    # Every worker decides with S's accuracy: one below it keeps S.
    writer = _BestWriter(ckpt)
    keeper = records.BestKeeper("test", "test", str(workdir), writer)
    assert keeper.best == pytest.approx(best["accuracy"], abs=1e-6)
    keeper.offer(6, "test", best["accuracy"] - 0.01)
    assert writer.saved == []
    assert json.loads(best_json.read_text()) == stale  # not the chief
    # Without S's row in the history: the earlier record's accuracy, which
    # S beat, as a bound.
    csv_path = workdir / history.FILE
    kept = csv_path.read_text()
    csv_path.write_text("".join(
        line for line in kept.splitlines(keepends=True)
        if f",{best['step']},test," not in f",{line}"))
    keeper = records.BestKeeper("test", "test", str(workdir), writer)
    assert keeper.best == 0.0
    # The first best, never recorded (no best.json): S's accuracy from
    # the history; without S's row, no bound (the next evaluation wins).
    best_json.unlink()
    keeper = records.BestKeeper("test", "test", str(workdir), writer)
    assert keeper.best is None
    csv_path.write_text(kept)
    keeper = records.BestKeeper("test", "test", str(workdir), writer)
    assert keeper.best == pytest.approx(best["accuracy"], abs=1e-6)
    keeper.offer(6, "test", best["accuracy"] - 0.01)
    assert writer.saved == []
    best_json.write_text(json.dumps(stale))

    # The same through the command: said, and recorded again (or beaten).
    again = console.run("train", args + ["--config.trainer.total_steps=6"])
    assert again.returncode == 0, again.stderr[-3000:]
    check_says("stop_before_best_record", again.stderr)
    assert (f"best.json records step {stale['step']}, and the best "
            f"checkpoint in {workdir}/best is step {best['step']}") \
        in again.stderr
    now = json.loads(best_json.read_text())
    assert "accuracy_at_least" not in now
    assert (now["step"], now["accuracy"]) == (
        best["step"], pytest.approx(best["accuracy"], abs=1e-6)) or (
        now["step"] == 6 and now["accuracy"] > best["accuracy"])


def test_a_checkpoint_removed_as_it_is_read_gives_way_to_the_newer_one(
        tmp_path, caplog):
    """A run still training with checkpoints.keep=1 removes the checkpoint
    an evaluation listed before the evaluation reads it, and saves a newer
    one: that one is read (it was called damaged, the newer never tried).
    One whose files are there but cannot be used gives way to the one
    before it; none usable: each named with its reason."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    old, new = str(folder / "ckpt-2"), str(folder / "ckpt-4")
    (folder / "ckpt-2.index").write_text("")
    listings = iter([[old], [new]])

    def use(path):
        if path == old:  # rotated away by the run, ckpt-4 saved
            os.remove(old + ".index")
            (folder / "ckpt-4.index").write_text("")
            return "Failed to find any matching files"
        return None

    caplog.set_level("INFO")
    assert checkpoint_list.first_usable(lambda: next(listings), use)[0] == new
    assert "ckpt-2 was removed as it was read" in caplog.text
    damaged = {new: "a NaN", old: None}
    (folder / "ckpt-2.index").write_text("")
    got, failed = checkpoint_list.first_usable(lambda: [new, old],
                                               damaged.get)
    assert (got, failed) == (old, ["ckpt-4 (a NaN)"])
    got, failed = checkpoint_list.first_usable(
        lambda: [new, old], lambda path: "unreadable")
    assert got is None and failed == ["ckpt-4 (unreadable)",
                                      "ckpt-2 (unreadable)"]
