"""Progress a person can read: a line every few seconds of wall time with
the step, the share done, the time spent, the time left and the images
per second, for training (whatever log.every_steps says), evaluation and
few-shot feature extraction (VTAB's fine-tunings are training runs);
keras_vit/progress.py's `Rate` makes the lines."""

import io
import logging
import re

import pytest

from keras_vit.data import pipeline as input_pipeline
from keras_vit.evaluation import fewshot
from keras_vit.progress import Rate
from tests import console
from tests.test_fewshot import features_model, tiny_digits_model

LINE = (r"step (\d+) of (\d+) \((\d+)%\), \d+s elapsed, about \d+(s|min) "
        r"left, [\d.]+ images/s")


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_status_line_is_ended_before_the_next_line():
    """`show` rewrites one terminal line ("\\r", no line end); `end_line`
    ends it once, so that the next message starts a line of its own and
    no blank line follows it."""
    from keras_vit import progress

    stream = _Terminal()
    progress.show("checked 1/9 images", stream)
    progress.show("checked 9/9 images", stream)
    progress.end_line()
    progress.end_line()  # nothing open: nothing written
    stream.write("skipped x.png: broken\n")
    assert stream.getvalue() == ("\rchecked 1/9 images\rchecked 9/9 images"
                                 "\nskipped x.png: broken\n")


def test_counts_in_a_log_file_are_lines_every_few_seconds(monkeypatch):
    """Where the stream is no terminal (a log file), a count is a line of
    its own: the first, then one every `EVERY_S` seconds, and the last
    one when `end_line` comes (before the next message); no carriage
    returns."""
    from keras_vit import progress

    now = [100.0]
    monkeypatch.setattr(progress.time, "monotonic", lambda: now[0])
    stream = io.StringIO()
    for i in range(1, 10):
        progress.show(f"{i}/9 images", stream)
        now[0] += 4.0  # 1 at 100s, 4 at 112s, 7 at 124s
    progress.end_line()
    progress.end_line()
    assert stream.getvalue() == ("1/9 images\n4/9 images\n7/9 images\n"
                                 "9/9 images\n")
    stream = io.StringIO()
    progress.show("checked 1/2 images", stream)
    progress.end_line()  # written already: not again
    stream.write("error\n")
    assert stream.getvalue() == "checked 1/2 images\nerror\n"


class _Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_rate_tells_by_time_with_share_time_left_and_throughput():
    clock = _Clock()
    rate = Rate(1000, "step", every_s=10, images=32, clock=clock)
    assert rate.update(0) is None  # starts the clock
    clock.now += 4
    assert rate.update(100) is None  # not yet due
    clock.now += 6
    assert rate.update(250) == (
        "step 250 of 1000 (25%), 10s elapsed, about 30s left, "
        "800.0 images/s")
    clock.now += 1
    assert rate.update(275) is None
    clock.now += 9
    assert re.fullmatch(LINE, rate.update(500))


def test_rate_leaves_out_what_it_cannot_know():
    clock = _Clock()
    rate = Rate(None, "batch", every_s=1, clock=clock)
    rate.update(0)
    clock.now += 2
    assert rate.update(7) == "batch 7, 2s elapsed"
    assert Rate(10, every_s=0, clock=clock).update(5) is None  # 0: never


def test_a_terminal_behind_the_notice_filter_keeps_one_line(tmp_path):
    """A command's stderr reaches the terminal through the filter of
    library notices (a pipe): the count is still kept on one line ("\\r"),
    as on the terminal itself; in a file, a line each."""
    import os
    import pty
    import subprocess
    import sys

    code = ("from keras_vit import progress, quiet_start\n"
            "assert quiet_start.filter_stderr()\n"
            "progress.show('1/2 images'); progress.show('2/2 images')\n"
            "progress.end_line()\n")
    main, side = pty.openpty()
    process = subprocess.Popen([sys.executable, "-c", code], stderr=side,
                               stdout=subprocess.DEVNULL)
    os.close(side)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert process.wait(timeout=60) == 0, seen
    assert b"\r1/2 images\r2/2 images" in seen, seen
    with open(tmp_path / "err.txt", "w") as log:
        subprocess.run([sys.executable, "-c", code], stderr=log, check=True)
    text = (tmp_path / "err.txt").read_text()
    # (After any notice lines: `import keras_vit` holds TensorFlow's.)
    assert ("\n" + text).endswith("\n1/2 images\n2/2 images\n")
    assert "\r" not in text


def test_fewshot_features_tell_their_progress(caplog):
    model = features_model(tiny_digits_model())
    inp = fewshot.FewShotData("d", "digits", "train", "test").input(36)
    run = input_pipeline.RunInput(image_size=32)
    with caplog.at_level(logging.INFO):
        fewshot.extract_features(model, inp, run, "test", 64,
                                 every_s=1e-9)
    lines = [r.getMessage() for r in caplog.records
             if r.getMessage().startswith("features of test:")]
    assert lines[-1].startswith("features of test: batch 6 of 6 (100%), ")
    assert "images/s" in lines[-1]


@pytest.mark.slow
def test_training_and_evaluation_tell_progress_every_few_seconds(tmp_path):
    """No log.every_steps boundary before the end: the lines come from the
    clock (log.every_seconds, 10 s by default, 0.05 s here: shorter than
    tracing an evaluation step, so each evaluation owes a line whatever
    the machine's speed)."""
    workdir = tmp_path / "run"
    total = 1500
    result = console.run("train", [
        *console.TINY_DIGITS, f"--workdir={workdir}",
        f"--config.trainer.total_steps={total}",
        f"--config.trainer.steps_per_loop={total}",
        f"--config.log.every_steps={total}",
        "--config.evals.test.every_steps=0", "--config.log.every_seconds=0.05",
        "--config.evals.test.batch_size=8"])
    assert result.returncode == 0, result.stderr[-3000:]
    head = result.stderr.splitlines()[:6]
    assert any("Reading the data: digits." in line for line in head), head
    train = re.findall(r"\] train: " + LINE, result.stderr)
    assert len(train) >= 2, result.stderr[-3000:]
    assert all(0 < int(step) <= total for step, *_ in train)
    assert [int(p) for *_, p, _ in train] == sorted(
        int(p) for *_, p, _ in train)
    assert re.search(r"\] eval test: batch \d+ of 45 \(\d+%\), ",
                     result.stderr), result.stderr[-3000:]
    # keras-vit-evaluate reads the run's config: the same cadence.
    result = console.run("evaluate", ["--mode=eval", f"--workdir={workdir}",
                                      "--batch_size=8"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(
        r"\] eval test: batch \d+ of 45 \(\d+%\), .* left, [\d.]+ images/s",
        result.stderr), result.stderr[-3000:]


def test_the_evaluation_bar_shows_the_running_top1_as_it_is(capsys):
    """The terminal's bar of an evaluation shows the running top-1 it is
    given (the share right so far), not an average of running shares."""
    from keras_vit.scoring import evaluator

    on_batch = evaluator.progress_callback(4, 8, "eval test", bar=True)
    for i, running in enumerate((0.0, 0.5, 0.5, 0.5), 1):
        on_batch(i, {"accuracy": running})
    out = capsys.readouterr().out
    assert "top1: 0.5000" in out and "0.3750" not in out, out


def test_the_final_metrics_line_leaves_out_what_was_not_measured():
    from keras_vit import progress

    line = progress.short_metrics({"test_accuracy": 0.83333,
                                   "test_top5_accuracy": None,
                                   "steps": 8, "eval_split": "val"})
    assert line == "test_accuracy 0.8333, steps 8, eval_split val"
