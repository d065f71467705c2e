"""Ctrl-C on keras-vit-train as a user presses it (a real SIGINT to the
console script): once, it saves a checkpoint after the step in flight and
exits with the preemption status and one line; twice, it stops at once and
the last checkpoint stays whole; the same command resumes either way. Two
SIGINTs microseconds apart (`timeout -s INT` signals the process and its
process group) are one Ctrl-C. Also `interrupt.StopRequest` itself, with
real SIGINTs to this process."""

import gc
import os
import re
import signal
import sys
import time

import pytest
import tensorflow as tf

from keras_vit import errors
from keras_vit.errors import (
    INTERRUPTED_EXIT_CODE,
    PREEMPTED_EXIT_CODE,
    stop_raised,
    take_stop,
)
from keras_vit.training import interrupt
from tests import console

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_sigint_twice_at_once_as_timeout_sends_it_is_one_ctrl_c(tmp_path):
    """`timeout -s INT 16 keras-vit-train ...`: GNU timeout signals the
    process, then its process group, microseconds apart. One Ctrl-C: the
    checkpoint after the step in flight, the `stopped:` line, status 42
    (not a stop at once, 130)."""
    workdir = tmp_path / "run"
    log = tmp_path / "log"
    proc = console.start("train", [
        *LONG, f"--config.trainer.total_steps={TOTAL}",
        "--config.checkpoints.every_steps=0", f"--workdir={workdir}"], log)
    console.wait_for(log, r"Compiled: the first train call", proc)
    time.sleep(1.0)  # into the one long host call
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(0.001)
    os.kill(proc.pid, signal.SIGINT)
    code = console.finish(proc, timeout=120)
    text = log.read_text()
    assert code == PREEMPTED_EXIT_CODE, text[-3000:]
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    last = text.strip().splitlines()[-1]
    saved = re.fullmatch(r"keras-vit-train: stopped: Ctrl-C at step (\d+), "
                         r"checkpoint saved; run the same command to "
                         r"resume\.", last)
    assert saved, last
    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    assert latest.endswith(f"ckpt-{saved[1]}")


@pytest.mark.slow
def test_ctrl_c_twice_stops_at_once_and_the_last_checkpoint_stays_whole(
        tmp_path):
    """Ctrl-C, then again (more than SAME_PRESS_S later, a second press)
    while the resumed run compiles its train step, where the first cannot
    stop it yet: it stops at once, and ckpt-20 stays the whole latest."""
    workdir = tmp_path / "run"
    log = tmp_path / "second.log"
    args = [*LONG, "--config.checkpoints.every_steps=50",
            "--config.checkpoints.keep=2", f"--workdir={workdir}"]
    first = console.run("train", [*args, "--config.trainer.total_steps=20"])
    assert first.returncode == 0, first.stderr[-3000:]
    proc = console.start(
        "train", [*args, f"--config.trainer.total_steps={TOTAL}"], log)
    console.wait_for(log, r"Tracing and compiling the training step", proc)
    proc.send_signal(signal.SIGINT)
    time.sleep(interrupt.SAME_PRESS_S + 0.05)
    proc.send_signal(signal.SIGINT)
    code = console.finish(proc, timeout=120)
    text = log.read_text()
    assert "Traceback" not in text
    last = text.strip().splitlines()[-1]
    if code == PREEMPTED_EXIT_CODE:
        # The compilation and the first Ctrl-C's checkpoint were done and
        # the run was ending before the second arrived: the one-Ctrl-C
        # end, also clean.
        assert re.fullmatch(r"keras-vit-train: stopped: Ctrl-C at step "
                            r"\d+, checkpoint saved; run the same command "
                            r"to resume\.", last), last
    else:
        assert code == INTERRUPTED_EXIT_CODE, text[-3000:]
        assert last in (
            "keras-vit-train: interrupted: stopped at once (Ctrl-C).",
            "Ctrl-C twice: stopped at once; the last complete checkpoint is "
            "the one to resume from.")
        assert tf.train.latest_checkpoint(
            str(workdir / "checkpoints")).endswith("ckpt-20")
    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    step = int(latest.rpartition("-")[2])
    reader = tf.train.load_checkpoint(latest)  # listed means whole
    assert reader.get_variable_to_shape_map()
    _resumes(workdir, step, tmp_path, **{"checkpoints.every_steps": 50,
                                         "checkpoints.keep": 2})


@pytest.mark.slow
@pytest.mark.parametrize("name, signum, delay", [
    ("train", signal.SIGINT, 0.5), ("predict", signal.SIGINT, 0.5),
    ("train", signal.SIGTERM, 0.5), ("train", signal.SIGINT, 3.0),
    ("train", signal.SIGTERM, 3.0)])
def test_a_stop_while_the_command_starts_is_one_line(tmp_path, name, signum,
                                                      delay):
    """Ctrl-C (or SIGTERM) while the command starts: half a second in, or
    3 s in, while its work's first import loads TensorFlow and Keras
    (errors.signals_after): no traceback from inside an import, one
    line, status 130 (42: a preempted command's), nothing written."""
    log = tmp_path / "log"
    workdir = tmp_path / "run"
    # (A folder of no model kind: predict loads TensorFlow to refuse it; a
    # path with nothing there is refused at once, before any import.)
    (tmp_path / "folder").mkdir()
    args = {"train": [*LONG, f"--workdir={workdir}"],
            "predict": [f"--model={tmp_path / 'folder'}", str(tmp_path)]}[name]
    proc = console.start(name, args, log)
    time.sleep(delay)
    proc.send_signal(signum)
    term = signum == signal.SIGTERM
    assert console.finish(proc, timeout=120) == (
        PREEMPTED_EXIT_CODE if term else INTERRUPTED_EXIT_CODE)
    text = log.read_text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.strip().splitlines()[-1] == (
        f"keras-vit-{name}: preempted: stopped at once (SIGTERM); run the "
        "same command again." if term else
        f"keras-vit-{name}: interrupted: stopped at once (Ctrl-C).")
    assert not workdir.exists()


@pytest.mark.slow
def test_sigterm_during_an_export_leaves_no_partial_version(tmp_path):
    """keras-vit-export stopped by SIGTERM (docker stop, a scheduler)
    while it writes the version: the unwinding removes the hidden
    temporary folder, one `preempted:` line, PREEMPTED_EXIT_CODE; the same
    command then exports version 1. The folders it made for the version
    go too (they hold no file)."""
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
    assert not exports.exists()
    again = console.run("export", args)
    assert again.returncode == 0, again.stderr[-3000:]
    assert sorted(p.name for p in folder.iterdir()) == ["1"]


# ------------------------------------------------- StopRequest in-process
@pytest.fixture
def ended(monkeypatch):
    """Python's own SIGINT handler, as in a terminal (a test process that a
    shell started in the background may have SIGINT ignored); a hard stop
    (`_end_now`) is recorded instead of ending this process."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    calls = []
    monkeypatch.setattr(interrupt.StopRequest, "_end_now",
                        lambda self: calls.append(self._open))
    monkeypatch.setattr(interrupt, "HARD_STOP_S", 0.2)
    yield calls
    signal.signal(signal.SIGINT, previous)


def _ctrl_c():
    os.kill(os.getpid(), signal.SIGINT)


def test_two_sigints_a_millisecond_apart_are_one_ctrl_c(ended):
    """What `timeout -s INT` sends: a request to stop at the next step,
    neither KeyboardInterrupt nor a hard stop."""
    try:
        with interrupt.StopRequest() as stop:
            _ctrl_c()
            time.sleep(0.001)
            _ctrl_c()
            time.sleep(0.4)  # the handler, the watcher, HARD_STOP_S
            assert stop.requested and stop.name == "Ctrl-C"
    except KeyboardInterrupt:
        pytest.fail("two SIGINTs 1 ms apart stopped the run at once")
    assert ended == []


def test_a_stop_swallowed_before_the_loop_is_its_request(ended):
    """A Ctrl-C or SIGTERM whose exception a library's callback dropped
    before the training loop began (`errors.stop_raised`, never caught):
    the loop's StopRequest takes it as a request to stop at the next
    step, and the stop is no longer pending."""
    for raised, name in ((KeyboardInterrupt(), "Ctrl-C"),
                         (type("Terminated", (KeyboardInterrupt,), {})(),
                          "SIGTERM")):
        stop_raised(raised)
        with interrupt.StopRequest() as stop:
            assert stop.requested and stop.name == name
        assert take_stop() is None
    assert ended == []


def test_a_second_ctrl_c_later_stops_at_once(ended):
    with pytest.raises(KeyboardInterrupt):
        with interrupt.StopRequest() as stop:
            _ctrl_c()
            time.sleep(interrupt.SAME_PRESS_S + 0.1)
            assert stop.requested
            _ctrl_c()
            time.sleep(0.1)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert ended == []


def test_a_second_ctrl_c_unhandled_when_the_save_is_done_ends_as_one(
        ended):
    """A second Ctrl-C that the watcher counted but the handler did not
    act on (Python ran it once for both) when the run leaves the block,
    its checkpoint saved: the run ends as after one Ctrl-C (its status
    42), not with KeyboardInterrupt (130), and no hard stop follows. The
    second arrives as the wakeup fd gets it, without the handler."""
    try:
        with interrupt.StopRequest() as stop:
            _ctrl_c()
            time.sleep(interrupt.SAME_PRESS_S + 0.1)
            os.write(stop._wakeup._pipe[1], bytes([signal.SIGINT]))
            time.sleep(0.05)  # the watcher counts it: a second press
            assert stop._twice()
    except KeyboardInterrupt:
        pytest.fail("the stop after a saved checkpoint became "
                    "KeyboardInterrupt")
    assert stop.requested and not stop.installed
    time.sleep(interrupt.HARD_STOP_S + 0.1)
    assert ended == []


def test_a_stop_raised_inside_a_gc_callback_is_quiet_and_raised_again(
        capsys):
    """A signal's stop raised while Python runs a garbage-collection
    callback (JAX registers one), which swallows it: nothing printed (no
    'Exception ignored' traceback under the command's one line), and
    `check_stop` raises it where the command unwinds. Another error in
    such a callback is still printed."""
    stop = KeyboardInterrupt()

    def swallowed(phase, info):
        if phase == "start":
            raise errors.stop_raised(stop)

    def other(phase, info):
        if phase == "start":
            raise ValueError("another error")

    def collect_with(callback):
        gc.callbacks.append(callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(callback)

    previous = sys.unraisablehook
    sys.unraisablehook = errors.quiet_unraisable(sys.__unraisablehook__)
    try:
        collect_with(swallowed)
        assert capsys.readouterr().err == ""
        with pytest.raises(KeyboardInterrupt) as raised:
            errors.check_stop()
        assert raised.value is stop
        collect_with(other)
    finally:
        sys.unraisablehook = previous
        errors.stop_seen()
    assert "ValueError: another error" in capsys.readouterr().err
