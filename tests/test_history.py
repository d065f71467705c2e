"""A run's history is kept: history.csv appended row by row (on resume
too, never truncated), the training curves drawn at the end and by
`keras-vit-analysis --curves`, the best checkpoint kept apart when
config.checkpoints.keep_best asks, and a finished run neither trained nor
measured again by the same command."""

import json
import logging
import os
import re
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import config as config_lib
from keras_vit.errors import UsageError
from keras_vit.storage import history
from keras_vit.training import records
from tests import console, tiny


def test_history_appends_and_reads_back_the_latest_rows(tmp_path):
    writer = history.HistoryWriter(str(tmp_path))
    for step in (10, 20, 30):
        writer.add(step, "train", loss=1.0 / step, steps=10,
                   learning_rate=0.1)
    writer.add(30, "test", accuracy=0.5, loss=0.9)
    path = tmp_path / history.FILE
    first = path.read_text()
    assert first.splitlines()[0] == ",".join(history.COLUMNS)
    # A crash cut the last row; a resumed run (from step 20) appends.
    path.write_text(first + "25,train,0.3")
    writer = history.HistoryWriter(str(tmp_path))
    writer.add(25, "train", loss=0.04, steps=5)
    writer.add(35, "train", loss=0.03, steps=10)
    text = path.read_text()
    assert text.startswith(first) and text.count("step,split") == 1
    rows = history.read_history(str(tmp_path))
    assert [(r["step"], r["split"]) for r in rows] == [
        (10, "train"), (20, "train"), (30, "test"), (25, "train"),
        (35, "train")]
    assert rows[3]["loss"] == pytest.approx(0.04)
    assert rows[2]["accuracy"] == 0.5 and rows[2]["grad_norm"] is None
    # Cut inside its last cell (steps 10 as 1), the row has every cell:
    # skipped while it has no line end, and once the next row closes it.
    cut = "45,train,0.02,,,,,,1700000000,1"
    path.write_text(text + cut)
    assert history.read_history(str(tmp_path))[-1]["step"] == 35
    writer.add(45, "train", loss=0.02, steps=10)
    assert f"{cut}{history.CUT}45,train," in path.read_text()
    rows = history.read_history(str(tmp_path))
    assert [r["steps"] for r in rows if r["step"] == 45] == [10]
    # An evaluation on the split "train" is not a training row: neither
    # replaces the other, and only it is an evaluation.
    writer.add(45, "train", loss=0.5, accuracy=0.7)
    rows = history.read_history(str(tmp_path))
    assert [(r["step"], history.is_evaluation(r)) for r in rows
            if r["split"] == "train"][-2:] == [(45, False), (45, True)]
    run = records.RunRecords(writer)
    assert run.evaluated(45, "train") and not run.evaluated(35, "train")
    assert history.read_history(str(tmp_path / "nothing")) == []


def test_keep_best_must_name_an_accuracy_evaluator():
    config = config_lib.base_config()
    assert records.best_evaluator(config.checkpoints, config.evals) is None
    config.checkpoints.keep_best = "test"
    assert records.best_evaluator(config.checkpoints, config.evals) == (
        "test", "test")
    config.evals.test.val_split = "train[:10%]"
    assert records.best_evaluator(config.checkpoints, config.evals) == (
        "test", "train[:10%]")
    config.checkpoints.keep_best = "val"
    with pytest.raises(UsageError, match=r"keep_best='val' names no "
                       r"accuracy evaluator of config.evals; the run's: "
                       r"test\."):
        records.best_evaluator(config.checkpoints, config.evals)


def _train(workdir, total, *extra):
    return console.run("train", [
        *console.TINY_DIGITS, f"--workdir={workdir}",
        f"--config.trainer.total_steps={total}",
        "--config.trainer.steps_per_loop=10", "--config.log.every_steps=10",
        "--config.checkpoints.every_steps=20",
        "--config.evals.test.every_steps=20",
        "--config.checkpoints.keep_best=test", "--config.checkpoints.keep=1",
        "--config.schedule.lr=0.003", *extra])


@pytest.mark.slow
def test_history_best_checkpoint_curves_and_a_finished_run(tmp_path):
    workdir = tmp_path / "run"
    first = _train(workdir, 40)
    assert first.returncode == 0, first.stderr[-3000:]
    csv_path = workdir / history.FILE
    after_first = csv_path.read_text()
    # Resumed to 80 steps: appended, never truncated.
    second = _train(workdir, 80)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "Resumed from" in second.stderr
    text = csv_path.read_text()
    assert text.startswith(after_first) and len(text) > len(after_first)
    rows = history.read_history(str(workdir))
    train = [r for r in rows if r["split"] == "train"]
    # One row per logged step ("step N/80: loss ..."), of both runs.
    logged = [int(n) for n in re.findall(r"step (\d+)/\d+: loss",
                                         first.stderr + second.stderr)]
    assert [r["step"] for r in train] == logged
    assert logged[-1] == 80 and {10, 20, 30, 40, 50, 80} <= set(logged)
    assert sum(r["steps"] for r in train) == 80
    for key in ("loss", "accuracy", "learning_rate", "grad_norm",
                "images_per_sec", "wall_time"):
        assert all(r[key] is not None for r in train), key
    evals = [r["step"] for r in rows if r["split"] == "test"]
    assert evals == [20, 40, 60, 80]  # 40: the first run's final one

    # The curves, at the end and from any workdir.
    assert (workdir / "training_curves.png").exists()
    # (A first run of matplotlib, its cache empty: its notice that it
    # built the cache is not the run's and stays off the terminal.)
    result = subprocess.run(
        console.script("analysis") + [f"--curves={workdir}",
                                      f"--output_dir={tmp_path}/fig"],
        capture_output=True, text=True, timeout=600,
        env=console.env(MPLCONFIGDIR=str(tmp_path / "matplotlib")))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "fontManager" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.strip() == f"{tmp_path}/fig/training_curves.png"
    assert Image.open(result.stdout.strip()).size[0] > 600

    # The best test accuracy's checkpoint: a workdir of its own.
    best = json.loads((workdir / "best" / "best.json").read_text())
    accuracies = {r["step"]: r["accuracy"] for r in rows
                  if r["split"] == "test"}
    assert best["accuracy"] == pytest.approx(max(accuracies.values()),
                                             abs=1e-6)
    assert accuracies[best["step"]] == pytest.approx(best["accuracy"],
                                                     abs=1e-6)
    assert os.listdir(workdir / "checkpoints") != []
    result = console.run("evaluate", [
        "--mode=eval", f"--model={workdir}/best"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout)["accuracy"] == pytest.approx(
        best["accuracy"], abs=1e-6)

    # The same command again: finished, nothing trained or measured.
    metrics = (workdir / "metrics.json").read_bytes()
    log = csv_path.read_bytes()
    third = _train(workdir, 80)
    assert third.returncode == 0, third.stderr[-3000:]
    assert f"The run in {workdir} has finished: step 80 of 80 (80 asked)." \
        in third.stderr
    assert "To train on, raise config.trainer.total_steps." in third.stderr
    assert f"{workdir}/metrics.json" in third.stderr
    assert "Compiling" not in third.stderr and "Resumed" not in third.stderr
    assert (workdir / "metrics.json").read_bytes() == metrics
    assert csv_path.read_bytes() == log
    # Fewer steps asked of the finished run: the same, nothing rewritten.
    fourth = _train(workdir, 40)
    assert fourth.returncode == 0, fourth.stderr[-3000:]
    assert "has finished: step 80 of 80 (40 asked)." in fourth.stderr
    assert "Resumed" not in fourth.stderr
    # (Nothing resumes: no word of settings that would apply from here.)
    assert "other settings" not in fourth.stderr
    assert not (workdir / "config.step-80.json").exists()
    assert (workdir / "metrics.json").read_bytes() == metrics
    assert csv_path.read_bytes() == log
    # An export asked of the run finished without one: said, with the
    # command that exports it.
    fifth = _train(workdir, 80, "--config.export.enabled=True")
    assert fifth.returncode == 0, fifth.stderr[-3000:]
    assert (f"the run in {workdir} finished without an export; export it "
            f"with keras-vit-export --model={workdir}.") in fifth.stderr
    assert (workdir / "metrics.json").read_bytes() == metrics


def _history_workdir(path):
    path.mkdir()
    writer = history.HistoryWriter(str(path))
    for step in (1, 10, 20):
        writer.add(step, "train", loss=2.0 / step, accuracy=step / 40,
                   learning_rate=1e-3, grad_norm=1.0, steps=10,
                   images_per_sec=100.0)
    writer.add(20, "test", loss=1.5, accuracy=0.4, top5_accuracy=0.9)
    return path


def test_analysis_curves_flag_and_its_errors(tmp_path, capsys):
    from keras_vit.commands import analysis

    run = _history_workdir(tmp_path / "run")
    assert analysis.main(["keras-vit-analysis", f"--curves={run}"]) == 0
    assert capsys.readouterr().out.strip() == str(run / "training_curves.png")
    assert Image.open(run / "training_curves.png").size[0] > 600
    cases = [
        ([f"--curves={run}", "--model=x.keras"], "give it alone"),
        # Every flag the curves do not use is named, not passed over.
        ([f"--curves={run}", "--batch_size=4", "--image_size=32"],
         "give it alone (with --output_dir), not with --batch_size, "
         "--image_size."),
        ([f"--curves={run}", "a.png"], "not with images."),
        ([f"--curves={tmp_path}"], "no history.csv with training rows"),
        ([f"--curves={tmp_path / 'missing'}"], "missing is not a folder"),
        ([f"--output_dir={tmp_path}"], "or --curves=WORKDIR"),
    ]
    for args, message in cases:
        assert analysis.main(["keras-vit-analysis", *args]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_curves_do_not_replace_a_users_file_of_their_name(tmp_path, capsys):
    """--output_dir holding a training_curves.png that no analysis drew
    (the user's own) is refused, the file kept; one the analysis drew
    there is drawn again, and so is a run's own, in its workdir (which
    earlier versions drew without a mark)."""
    from keras_vit.commands import analysis

    run = _history_workdir(tmp_path / "run")
    out = tmp_path / "figures"
    out.mkdir()
    mine = out / "training_curves.png"
    mine.write_bytes(b"my own figure")
    args = ["keras-vit-analysis", f"--curves={run}", f"--output_dir={out}"]
    assert analysis.main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "which no keras-vit-analysis drew: not " \
        "replaced; move it away, or pass another --output_dir." in err[0], err
    assert mine.read_bytes() == b"my own figure"
    mine.unlink()
    for _ in range(2):  # drawn, then drawn again over its own
        assert analysis.main(args) == 0
        assert capsys.readouterr().out.strip() == str(mine)
        assert Image.open(mine).size[0] > 600
    for output in ([], [f"--output_dir={run}/"]):  # the workdir itself
        (run / "training_curves.png").write_bytes(b"an earlier version's")
        assert analysis.main(["keras-vit-analysis", f"--curves={run}",
                              *output]) == 0
        assert Image.open(run / "training_curves.png").size[0] > 600


def test_train_skips_the_curves_without_matplotlib(tmp_path, monkeypatch,
                                                    caplog):
    from keras_vit.commands import train

    run = _history_workdir(tmp_path / "run")
    # matplotlib not installed: its import fails.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    caplog.set_level(logging.INFO)
    assert train._draw_curves(str(run)) == {}
    assert not (run / "training_curves.png").exists()
    lines = [r.getMessage() for r in caplog.records
             if "training_curves.png" in r.getMessage()]
    assert len(lines) == 1 and "matplotlib" in lines[0], lines


def test_a_run_started_again_keeps_the_earlier_history_apart(tmp_path):
    """Its checkpoints deleted, a workdir's run starts at step 0 again:
    the earlier run's history.csv, best checkpoint, TensorBoard
    summaries, final metrics and configs are kept apart
    (history.before-1.csv, best.before-1/, train.before-1/,
    metrics.before-1.json, config.before-1.json, said in the log),
    history.csv
    holds the new run's rows alone, so the curves do not mix two runs, and
    best/ the new run's best, not one it cannot beat."""
    workdir = tmp_path / "run"
    args = console.TINY_DIGITS + ["--config.checkpoints.every_steps=2",
                                  "--config.log.every_steps=2",
                                  "--config.evals.test.every_steps=2",
                                  "--config.checkpoints.keep_best=test",
                                  f"--workdir={workdir}"]
    first = console.run("train", args + ["--config.trainer.total_steps=4"])
    assert first.returncode == 0, first.stderr[-3000:]
    earlier = (workdir / history.FILE).read_text()
    # An earlier best the new run cannot beat.
    best_json = workdir / records.BEST / records.BEST_JSON
    earlier_best = dict(json.loads(best_json.read_text()), accuracy=1.0)
    best_json.write_text(json.dumps(earlier_best))
    # A config the earlier run kept at a resume that changed settings.
    earlier_config = (workdir / "config.json").read_text()
    (workdir / "config.step-2.json").write_text(earlier_config)
    shutil.rmtree(workdir / "checkpoints")
    again = console.run("train", args + ["--config.trainer.total_steps=2"])
    assert again.returncode == 0, again.stderr[-3000:]
    # Its configs go with it: none passes for the new run's record.
    assert (workdir / "config.before-1.json").read_text() == earlier_config
    assert (workdir / "config.step-2.before-1.json").exists()
    assert not (workdir / "config.step-2.json").exists()
    assert json.loads((workdir / "config.json").read_text())["trainer"][
        "total_steps"] == 2
    assert (f"config is kept apart in {workdir}/config.before-1.json and "
            f"{workdir}/config.step-2.before-1.json.") in again.stderr
    kept = workdir / "history.before-1.csv"
    assert kept.read_text() == earlier
    assert f"that history is kept apart in {kept}" in again.stderr
    steps = [r["step"] for r in history.read_history(str(workdir))]
    assert steps and max(steps) == 2  # the new run's rows alone
    kept_best = workdir / "best.before-1"
    assert json.loads((kept_best / records.BEST_JSON).read_text()) == \
        earlier_best
    assert os.listdir(kept_best / "checkpoints")
    assert f"best checkpoint is kept apart in {kept_best}" in again.stderr
    new_best = json.loads(best_json.read_text())
    assert new_best["step"] == 2 and new_best["accuracy"] < 1.0
    # TensorBoard shows the earlier run beside the new one, not under it.
    for name in ("train", "eval"):
        assert os.listdir(workdir / f"{name}.before-1")
        assert os.listdir(workdir / name)
    assert (f"summaries are kept apart in {workdir}/train.before-1 and "
            f"{workdir}/eval.before-1.") in again.stderr
    # Its final metrics beside the new run's.
    earlier_metrics = json.loads(
        (workdir / "metrics.before-1.json").read_text())
    assert earlier_metrics["steps"] == 4
    assert json.loads((workdir / "metrics.json").read_text())["steps"] == 2
    assert (f"final metrics are kept apart in {workdir}/"
            "metrics.before-1.json.") in again.stderr
    # Resumed with the best chosen on another split: accuracies on two
    # splits are not compared; the best so far is kept apart.
    before = json.loads(best_json.read_text())
    moved = console.run("train", args + [
        "--config.trainer.total_steps=4",
        "--config.evals.test.val_split=train[:360]"])
    assert moved.returncode == 0, moved.stderr[-3000:]
    kept_best = workdir / "best.before-2"
    assert json.loads((kept_best / records.BEST_JSON).read_text()) == before
    assert (f"kept apart in {kept_best}, and {workdir}/best holds the best "
            "from the step this run resumes at") in moved.stderr
    now = json.loads(best_json.read_text())
    compared = {r["step"]: r["accuracy"] for r in history.read_history(
        str(workdir)) if r["split"] == "train[:360]"}
    # From the step it resumed at, to the last: the final weights
    # compete too (its final evaluation is on the test split).
    assert sorted(compared) == [2, 4]
    assert now["split"] == "train[:360]"
    assert now["accuracy"] == pytest.approx(max(compared.values()),
                                            abs=1e-6)


def test_summaries_without_a_value_are_not_kept_apart(tmp_path, caplog):
    """An earlier run that failed before its first log left event files
    with their headers alone: they go (no empty run beside the new one in
    TensorBoard); summaries with a value are kept apart."""
    workdir = tmp_path / "run"
    for name, values in (("train", 0), ("eval", 1)):
        writer = tf.summary.create_file_writer(str(workdir / name))
        with writer.as_default():
            for step in range(values):
                tf.summary.scalar("accuracy", 0.5, step=step)
        writer.close()
    assert os.listdir(workdir / "train")
    with caplog.at_level("WARNING"):
        records.set_earlier_run_aside(str(workdir), chief=True)
    assert sorted(os.listdir(workdir)) == ["eval.before-1"]
    assert ("summaries are kept apart in "
            f"{workdir}/eval.before-1.") in caplog.text


def test_the_config_before_a_resume_is_kept_once_and_only_if_it_differs(
        tmp_path):
    """config.step-N.json keeps the config of the steps before a resume at
    N that changes settings: written once (a second resume at N, back to
    the first settings, keeps the true record), and not for a file an
    earlier version wrote without fields added since (read completed); a
    workdir named with [ ] finds its own (its name is no pattern)."""
    from keras_vit.storage import workdir as wd

    workdir = str(tmp_path / "run [1]")
    os.makedirs(workdir)
    first = tiny.digits_config(total_steps=4).to_dict()
    older = json.loads(json.dumps(first))
    del older["trainer"]["skip_nonfinite"]  # a field added since
    wd.write_json(os.path.join(workdir, wd.CONFIG), older)
    records.keep_earlier_config(workdir, first, 2)
    kept = wd.earlier_config(workdir, 2)
    assert not os.path.exists(kept)  # the same config, completed
    changed = tiny.digits_config(total_steps=8).to_dict()
    records.keep_earlier_config(workdir, changed, 2)
    assert wd.read_json(kept) == older
    wd.write_json(os.path.join(workdir, wd.CONFIG), changed)
    records.keep_earlier_config(workdir, first, 2)  # back, at step 2 again
    assert wd.read_json(kept) == older
    records.keep_earlier_config(workdir, first, None)  # started afresh
    assert sorted(os.listdir(workdir)) == [wd.CONFIG, "config.step-2.json"]
    # One an earlier run's restart set aside is not this run's again.
    wd.write_json(os.path.join(workdir, "config.step-4.before-1.json"), {})
    assert wd.earlier_configs(workdir) == [kept]



def test_summary_folders_of_a_run_that_logged_nothing_are_told_quietly(
        tmp_path, caplog):
    """An events file with its header alone (a run stopped before its
    first log) holds no summary; one with a scalar does. Read through
    tf.data, without TensorFlow's deprecation notice of
    tf.compat.v1.train.summary_iterator on the terminal."""
    empty, logged = tmp_path / "empty", tmp_path / "logged"
    for folder in (empty, logged):
        writer = tf.summary.create_file_writer(str(folder))
        if folder == logged:
            with writer.as_default():
                tf.summary.scalar("loss", 1.0, step=1)
        writer.close()
    caplog.set_level(logging.WARNING)
    assert records._without_summaries(str(empty))
    assert not records._without_summaries(str(logged))
    assert "deprecated" not in caplog.text


def test_a_summaries_folder_of_other_files_is_refused_not_moved(tmp_path):
    """A workdir's train/ holding files and no event file is no run's
    summaries (the user's photos): refused, left where it is. One holding
    only a hidden file or a profiler's plugins/ folder is a run's
    leftover: set aside as before."""
    from keras_vit.errors import UsageError

    workdir = tmp_path / "run"
    (workdir / "train" / "cat").mkdir(parents=True)
    with pytest.raises(UsageError, match=r"train holds cat and no "
                       "TensorBoard event file: it is no run's summaries"):
        records.set_earlier_run_aside(str(workdir), chief=True)
    assert sorted(os.listdir(workdir)) == ["train"]
    (workdir / "train" / "cat").rmdir()
    (workdir / "train" / ".DS_Store").write_bytes(b"")
    (workdir / "eval" / "plugins" / "profile").mkdir(parents=True)
    records.set_earlier_run_aside(str(workdir), chief=True)
    assert sorted(os.listdir(workdir)) == ["eval.before-1", "train.before-1"]
