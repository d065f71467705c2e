"""Ctrl-C while a command is inside one long TensorFlow call
(keras_vit.commands.second_press): the first press is said at once, the
second stops the command at once, with its one line and status 130. With
real SIGINTs to a process whose main thread spins in a compiled loop, and
to keras-vit-evaluate --mode=fewshot extracting a batch of features at a
resolution that makes the batch long."""

import os
import signal
import subprocess
import sys
import time

import pytest

from keras_vit.commands import second_press
from keras_vit.errors import INTERRUPTED_EXIT_CODE
from tests import console

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A process that enters the watch and then spends SECONDS in one compiled
# TensorFlow call (a loop on the clock), where Python cannot run its
# handler of SIGINT.
_SPIN = """
import signal, sys
import tensorflow as tf
from keras_vit.commands import second_press

@tf.function
def spin(seconds):
    start = tf.timestamp()
    return tf.while_loop(lambda n: tf.timestamp() - start < seconds,
                         lambda n: [n + 1], [tf.constant(0, tf.int64)])

spin(tf.constant(0.0, tf.float64))  # traced and compiled before "ready"
# Ctrl-C as Python has it (a pytest-xdist worker's child inherits SIGINT
# ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
with second_press.Watch("keras-vit-demo", always=True):
    print("ready", flush=True)
    spin(tf.constant(float(sys.argv[1]), tf.float64))
print("returned", flush=True)
"""


def _spinning(seconds):
    proc = subprocess.Popen(
        [sys.executable, "-c", _SPIN, str(seconds)], cwd=ROOT,
        env=console.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    return proc


def test_a_second_ctrl_c_inside_a_tensorflow_call_stops_at_once():
    proc = _spinning(120)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    time.sleep(second_press.NOTICE_S + 1.0)
    pressed = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    took = time.monotonic() - pressed
    out, err = proc.communicate()
    assert code == INTERRUPTED_EXIT_CODE, err[-3000:]
    assert took < 10, took  # not the 120 s the call would take
    assert "returned" not in out
    assert err.strip().splitlines()[-2:] == [
        "keras-vit-demo: stopping once the TensorFlow call under way "
        "returns; Ctrl-C again stops at once.",
        "keras-vit-demo: interrupted: stopped at once (Ctrl-C)."], err


def test_one_ctrl_c_is_said_and_acted_on_when_the_call_returns():
    """One press (sent twice microseconds apart, as `timeout -s INT` does,
    is still one): said at once; Python's own KeyboardInterrupt once the
    call is back."""
    proc = _spinning(6)
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)
    out, err = proc.communicate()
    assert code != 0 and "returned" not in out
    assert "KeyboardInterrupt" in err
    assert err.count("stopping once the TensorFlow call under way "
                     "returns") == 1, err
    assert "stopped at once" not in err


_HELD = """
import signal, time
from keras_vit import errors
from keras_vit.commands import second_press

signal.signal(signal.SIGINT, signal.default_int_handler)  # (see _SPIN)
with second_press.Watch("keras-vit-demo", always=True):
    print("ready", flush=True)
    try:
        with errors.signals_after():  # as a publish or an import holds
            time.sleep(3)
        print("not stopped", flush=True)
    except KeyboardInterrupt:
        print("stopped after the block", flush=True)
    time.sleep(1.5)  # a notice or a stop at once would come by now
print("done", flush=True)
"""


def test_ctrl_c_twice_inside_a_block_that_holds_it_waits_for_the_block():
    """Two presses while signals are held back (an export being
    published): the block ends first, then the held Ctrl-C acts; the
    signal the block sends again is no third press."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD], cwd=ROOT, env=console.env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=60)
    out, err = proc.communicate()
    assert code == 0, err[-3000:]
    assert out.split() == ["stopped", "after", "the", "block", "done"]
    assert "stopped at once" not in err
    # Said while the block holds it: not "Ctrl-C again stops at once".
    assert "keras-vit-demo: stopping once the step under way ends." in err


@pytest.mark.slow
def test_fewshot_stops_at_the_second_ctrl_c_inside_a_batch(tmp_path):
    """keras-vit-evaluate --mode=fewshot of a digits run (patch 4) at 224
    (3,136 tokens: a batch of features takes seconds here): Ctrl-C once is said
    at once; again, it stops there, writing no results."""
    run = str(tmp_path / "run")
    trained = console.run("train", [
        "--config=digits", f"--workdir={run}",
        "--config.trainer.total_steps=2", "--config.schedule.warmup_steps=0",
        "--config.evals.test.every_steps=0"])
    assert trained.returncode == 0, trained.stderr[-3000:]
    out = tmp_path / "fewshot"
    log = tmp_path / "fewshot.log"
    proc = console.start("evaluate", [
        "--mode=fewshot", "--config=fewshot:digits", f"--model={run}",
        "--config.model.image_size=224", "--config.log.every_seconds=0.01",
        f"--output_dir={out}"], log)
    # The first batch done (compiled): the second is under way.
    console.wait_for(log, r"features of \w+: batch 1 of", proc, timeout=600)
    proc.send_signal(signal.SIGINT)
    console.wait_for(log, r"Ctrl-C again stops at once", proc, timeout=60)
    pressed = time.monotonic()
    proc.send_signal(signal.SIGINT)
    code = console.finish(proc, timeout=120)
    took = time.monotonic() - pressed
    text = log.read_text()
    assert code == INTERRUPTED_EXIT_CODE, text[-3000:]
    assert took < 10, took
    assert "Traceback" not in text
    assert text.strip().splitlines()[-1] == (
        "keras-vit-evaluate: interrupted: stopped at once (Ctrl-C).")
    assert not out.exists() or not [
        n for n in os.listdir(out) if n.endswith(".json")]
