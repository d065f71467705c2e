"""Ctrl-C on keras-vit-train as a user presses it (a real SIGINT to the
console script): once, it saves a checkpoint after the step in flight and
exits with the preemption status and one line; twice, it stops at once and
the last checkpoint stays whole; the same command resumes either way."""

import re
import signal
import time

import pytest
import tensorflow as tf

from keras_vit.errors import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
from tests import console

pytestmark = pytest.mark.slow

TOTAL = 1_000_000
# One host call would hold every step (steps_per_loop = total_steps, no
# log, evaluation or checkpoint boundary before the end): the run stops
# early only if the stop reaches the train call in flight.
LONG = [
    *console.TINY_DIGITS, f"--config.trainer.steps_per_loop={TOTAL}",
    f"--config.log.every_steps={TOTAL}", "--config.evals.test.every_steps=0",
]


def _resumes(workdir, step, tmp_path, **flags):
    """The same command, to a near end: it resumes from ckpt-`step`."""
    args = [*LONG, f"--workdir={workdir}",
            f"--config.trainer.total_steps={step + 20}",
            *(f"--config.{k}={v}" for k, v in flags.items())]
    result = console.run("train", args)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"Resumed from {workdir}/checkpoints/ckpt-{step} at step "
            f"{step}") in result.stderr


def test_ctrl_c_saves_at_the_next_step_and_the_same_command_resumes(
        tmp_path):
    workdir = tmp_path / "run"
    log = tmp_path / "first.log"
    proc = console.start("train", [
        *LONG, f"--config.trainer.total_steps={TOTAL}",
        "--config.checkpoints.every_steps=0", f"--workdir={workdir}"], log)
    console.wait_for(log, r"Compiled: the first train call", proc)
    time.sleep(1.0)  # into the one long host call
    proc.send_signal(signal.SIGINT)
    assert console.finish(proc, timeout=120) == PREEMPTED_EXIT_CODE
    text = log.read_text()
    last = text.strip().splitlines()[-1]
    step = int(re.fullmatch(r".* at step (\d+),.*", last)[1])
    assert last == (f"keras-vit-train: stopped: Ctrl-C at step {step}, "
                    "checkpoint saved; run the same command to resume.")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert 0 < step < TOTAL
    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    assert latest.endswith(f"ckpt-{step}")
    assert not (workdir / "metrics.json").exists()
    _resumes(workdir, step, tmp_path, **{"checkpoints.every_steps": 0})


def test_ctrl_c_twice_stops_at_once_and_the_last_checkpoint_stays_whole(
        tmp_path):
    workdir = tmp_path / "run"
    log = tmp_path / "first.log"
    # A checkpoint every 50 steps (a fraction of a second): the second
    # Ctrl-C comes while one is being written or about to be.
    proc = console.start("train", [
        *LONG, f"--config.trainer.total_steps={TOTAL}",
        "--config.checkpoints.every_steps=50", "--config.checkpoints.keep=2",
        f"--workdir={workdir}"], log)
    state = workdir / "checkpoints" / "checkpoint"
    deadline = time.time() + 240
    while not (state.exists() and "ckpt-100" in state.read_text()):
        assert proc.poll() is None and time.time() < deadline, log.read_text()
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    code = console.finish(proc, timeout=120)
    text = log.read_text()
    assert "Traceback" not in text
    last = text.strip().splitlines()[-1]
    if code == PREEMPTED_EXIT_CODE:
        # The first Ctrl-C's checkpoint was written and the run was ending
        # before the second arrived: the one-Ctrl-C end, also clean.
        assert re.fullmatch(r"keras-vit-train: stopped: Ctrl-C at step "
                            r"\d+, checkpoint saved; run the same command "
                            r"to resume\.", last), last
    else:
        assert code == INTERRUPTED_EXIT_CODE, text[-3000:]
        assert last in (
            "keras-vit-train: interrupted: stopped at once (Ctrl-C).",
            "Ctrl-C twice: stopped at once; the last complete checkpoint is "
            "the one to resume from.")
    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    step = int(latest.rpartition("-")[2])
    reader = tf.train.load_checkpoint(latest)  # listed means whole
    assert reader.get_variable_to_shape_map()
    _resumes(workdir, step, tmp_path, **{"checkpoints.every_steps": 50,
                                         "checkpoints.keep": 2})


@pytest.mark.parametrize("name", ["train", "predict"])
def test_ctrl_c_while_the_command_starts_is_one_line(tmp_path, name):
    """Ctrl-C while TensorFlow and Keras load (half a second in): no
    traceback from inside an import, one line, status 130, nothing
    written."""
    log = tmp_path / "log"
    workdir = tmp_path / "run"
    args = {"train": [*LONG, f"--workdir={workdir}"],
            "predict": [f"--model={workdir}", str(tmp_path)]}[name]
    proc = console.start(name, args, log)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    assert console.finish(proc, timeout=120) == INTERRUPTED_EXIT_CODE
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.strip().splitlines()[-1] == (
        f"keras-vit-{name}: interrupted: stopped at once (Ctrl-C).")
    assert not workdir.exists()


def test_sigterm_during_an_export_leaves_no_partial_version(tmp_path):
    """keras-vit-export stopped by SIGTERM (docker stop, a scheduler)
    while it writes the version: the unwinding removes the hidden
    temporary folder, one `preempted:` line, PREEMPTED_EXIT_CODE; the same
    command then exports version 1."""
    import keras_vit

    model = tmp_path / "m.keras"
    keras_vit.create_model(
        None, num_classes=2, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(str(model))
    exports = tmp_path / "exports"
    args = [f"--model={model}", f"--export_dir={exports}",
            "--model_name=vit"]
    log = tmp_path / "log"
    proc = console.start("export", args, log)
    folder = exports / "vit"
    deadline = time.time() + 300
    while not (folder.is_dir() and any(
            p.name.startswith(".tmp-") for p in folder.iterdir())):
        assert proc.poll() is None and time.time() < deadline, (
            log.read_text()[-3000:])
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    assert console.finish(proc, timeout=120) == PREEMPTED_EXIT_CODE
    text = log.read_text()
    assert "Traceback" not in text, text
    assert text.strip().splitlines()[-1] == (
        "keras-vit-export: preempted: stopped at once (SIGTERM); run the "
        "same command again.")
    assert sorted(p.name for p in folder.iterdir()) == []
    again = console.run("export", args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["1"]
