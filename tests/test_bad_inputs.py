"""Bad input of every kind: broken and unusual image files, folders and
splits, labels, configs, command lines, checkpoint files, serving requests,
task names. Each gets a clear error naming the problem and the fix (type
and message excerpts from tests/reliability_cases.py), works (with its
decoded values checked), or is skipped and counted where the user asked.

Also checks that docs/reliability.md is the rendering of the case table
and that every case there is proved by exactly one test.
"""

import base64
import errno
import importlib.util
import io
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile

import keras
import ml_collections as mlc
import numpy as np
import pytest
import tensorflow as tf
from absl import flags
from PIL import Image

import keras_vit
from keras_vit import optim
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import torch_pickle
from keras_vit.commands import evaluate as evaluate_command
from keras_vit.commands import exhausted, runner
from keras_vit.commands import flags as cli
from keras_vit.commands import train as train_command
from keras_vit.data import features as data_features
from keras_vit.data import (
    folder_classes,
    folders,
    image_headers,
    overlaps,
    sources,
    vtab,
)
from keras_vit.data import pipeline as input_pipeline
from keras_vit.data import preprocessing as pp
from keras_vit.errors import UsageError
from keras_vit.storage import atomic, history
from keras_vit.storage import workdir as wd
from keras_vit.training import reporting, train_lib
from keras_vit.training import trainer as trainer_module
from tests import console, hostile_files, tiny
from tests.photo_folder import write_photo_folder
from tests.reliability_cases import CASES, check_error, check_says, covers
from tests.strategies import two_cpu_mirrored

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RNG = np.random.default_rng(0)


def config(**overrides):
    """A tiny digits run (2 steps) with dotted-key overrides."""
    c = tiny.digits_base()
    c.model.update(dict(hidden_size=16, mlp_dim=16, num_layers=1,
                        num_heads=2))
    tiny.set_fields(c, dict(batch_size=8, total_steps=2, steps_per_loop=2,
                            log_every_steps=2, eval_every_steps=0,
                            checkpoint_every_steps=0, jit_compile=False))
    c.schedule.warmup_steps = 0
    return tiny.set_fields(c, overrides)


def folder_config(root, **overrides):
    overrides = dict(dict(image_size=16), **overrides)
    c = config(dataset="folder", data_dir=str(root), **overrides)
    c.input.pp.resize_size = None
    return c


def save(path, array, mode=None, fmt="PNG"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(array, mode).save(path, fmt)


def good_folder(root, splits=("train", "test"), n=4):
    for split in splits:
        for name in ("a", "b"):
            for i in range(n):
                save(f"{root}/{split}/{name}/{i}.png",
                     RNG.integers(0, 256, (12, 12, 3), dtype=np.uint8))
    return root


def add_bad_files(root):
    folder = f"{root}/train/a"
    with open(f"{folder}/bad.jpg", "wb") as f:
        f.write(RNG.integers(0, 256, 500, dtype=np.uint8).tobytes())
    png = tf.io.encode_png(np.full((20, 20, 3), 77, np.uint8)).numpy()
    with open(f"{folder}/truncated.png", "wb") as f:
        f.write(png[: len(png) // 2])
    open(f"{folder}/empty.png", "wb").close()


# ---------------------------------------------------------- image files
@covers("corrupt_image", "truncated_image", "empty_image_file")
def test_unreadable_images_are_named(tmp_path):
    root = good_folder(tmp_path / "images")
    add_bad_files(root)
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(folder_config(root),
                                     str(tmp_path / "run"))
    for case in ("corrupt_image", "truncated_image", "empty_image_file"):
        check_error(case, info.value)
    text = str(info.value)
    assert f"{root}/train/a/bad.jpg (Unknown image file format" in text
    assert f"{root}/train/a/truncated.png (Invalid PNG data" in text


@covers("unreadable_folder")
def test_a_folder_that_cannot_be_listed_is_named(tmp_path, monkeypatch,
                                                 capsys):
    """A sub-folder without read permission (faked: the tests may run as
    root, who reads everything): keras-vit-predict and a training run say
    which folder and how to fix it, where its images were left out
    unsaid."""
    from keras_vit.commands import predict

    root = good_folder(tmp_path / "images")
    model = tmp_path / "m.keras"
    keras_vit.create_model(None, num_classes=2, image_size=16, patch_size=8,
                           hidden_size=16, num_layers=1, num_heads=2,
                           mlp_dim=16).save(model)
    locked = f"{root}/train/b"
    scandir, listdir = os.scandir, tf.io.gfile.listdir

    def no_scandir(path="."):
        if os.fspath(path) == locked:
            raise PermissionError(errno.EACCES, "Permission denied", locked)
        return scandir(path)

    def no_listdir(path):
        if path.rstrip("/") == locked:
            raise tf.errors.PermissionDeniedError(None, None, "denied")
        return listdir(path)

    monkeypatch.setattr(os, "scandir", no_scandir)
    monkeypatch.setattr(tf.io.gfile, "listdir", no_listdir)
    assert predict.main(["keras-vit-predict", f"--model={model}",
                         str(root)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"keras-vit-predict: error: The folder {locked} cannot be listed "
        "(Permission denied)"), err
    check_says("unreadable_folder", err[0])
    folders.folder_index.cache_clear()
    with pytest.raises(UsageError) as info:
        train_lib.train_and_evaluate(folder_config(root),
                                     str(tmp_path / "run"))
    check_says("unreadable_folder", str(info.value))
    assert str(info.value).startswith(f"The folder {locked} cannot be "
                                      "listed (Permission denied)")
    folders.folder_index.cache_clear()


def test_an_eval_image_too_elongated_to_keep_its_aspect_is_found_at_start(
        tmp_path, caplog):
    """An image folder's evaluation resizes keeping the aspect ratio: a
    1 x 300 strip in test/ (256 x 76,800 once resized) is named at
    start-up, before any step (it passed the decode check and failed the
    first evaluation, an epoch in, unnamed); with skip_bad_images it is
    left out and the run trains and evaluates on the rest."""
    root = good_folder(tmp_path / "images")
    save(f"{root}/test/a/strip.png", np.zeros((1, 300, 3), np.uint8))
    settings = {"input.pp.eval_resize_size": 256,
                "input.pp.eval_keep_aspect": True}
    with pytest.raises(UsageError) as info:
        train_lib.train_and_evaluate(folder_config(root, **settings),
                                     str(tmp_path / "run"))
    assert f"{root}/test/a/strip.png (The image is too elongated" in str(
        info.value), info.value
    assert not (tmp_path / "run" / "checkpoints").exists()
    caplog.set_level("WARNING", logger="absl")
    final = train_lib.train_and_evaluate(
        folder_config(root, skip_bad_images=True, **settings),
        str(tmp_path / "kept"))
    assert final["steps"] == 2 and 0.0 <= final["test_accuracy"] <= 1.0
    assert "strip.png (The image is too elongated" in caplog.text


def _error_line(result, command):
    """The one error line of a console script that failed with status 1
    and no traceback."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [x for x in result.stderr.splitlines()
               if x.startswith(f"keras-vit-{command}: error: ")]
    return line


@covers("bad_image_in_eval_split")
def test_a_bad_image_in_the_eval_split_stops_the_run_before_it_trains(
        tmp_path, caplog):
    """keras-vit-train --config=folder:ROOT whose val/ holds a file that
    does not decode: one line at start-up naming it, no step trained, no
    checkpoint; with skip_bad_images the run trains and evaluates on the
    rest, the file named in the log once."""
    from tests import console

    root = good_folder(tmp_path / "images", splits=("train", "val"))
    with open(f"{root}/val/a/bad.jpg", "wb") as f:
        f.write(RNG.integers(0, 256, 500, dtype=np.uint8).tobytes())
    workdir = tmp_path / "run"
    result = console.run("train", [f"--config=folder:{root}",
                                   f"--workdir={workdir}"])
    line = _error_line(result, "train")
    check_says("bad_image_in_eval_split", line)
    assert not workdir.exists()  # the workdir the run made is gone
    assert "Compiled: the first train call" not in result.stderr
    # A workdir the user made is kept, empty as it was.
    workdir.mkdir()
    result = console.run("train", [f"--config=folder:{root}",
                                   f"--workdir={workdir}"])
    check_says("bad_image_in_eval_split", _error_line(result, "train"))
    assert workdir.is_dir() and os.listdir(workdir) == []
    # What the run removes: a tree of folders without a file, never one
    # holding a file anywhere in it.
    (workdir / "a" / "b").mkdir(parents=True)
    (workdir / "c" / "notes.txt").parent.mkdir()
    (workdir / "c" / "notes.txt").write_text("mine")
    atomic.remove_made(str(workdir))
    assert (workdir / "c" / "notes.txt").read_text() == "mine"
    os.remove(workdir / "c" / "notes.txt")
    atomic.remove_made(str(workdir))
    assert not workdir.exists()
    # Skipping: trained, evaluated on the 8 readable val images, the file
    # named once.
    caplog.set_level("WARNING")
    c = folder_config(root, skip_bad_images=True)
    c.input.train_split = "train"
    c.evals.test.split = c.evals.test.val_split = "val"
    c.evals.test.every_steps = 1
    metrics = train_lib.train_and_evaluate(c, str(tmp_path / "skip"))
    named = [r.getMessage() for r in caplog.records
             if f"{root}/val/a/bad.jpg" in r.getMessage()]
    assert len(named) == 1 and "of split 'val'" in named[0]
    assert metrics["test_examples"] == 8


@pytest.mark.slow
@covers("skip_bad_images")
def test_skip_bad_images_counts_and_trains(tmp_path, caplog):
    root = good_folder(tmp_path / "images")
    add_bad_files(root)
    # The unusual-but-valid kinds train too.
    save(f"{root}/train/b/gray.png", RNG.integers(0, 256, (9, 9), np.uint8))
    save(f"{root}/train/b/rgba.png",
         RNG.integers(0, 256, (9, 9, 4), np.uint8))
    save(f"{root}/train/b/tiny.png", RNG.integers(0, 256, (3, 2, 3),
                                                  np.uint8))
    caplog.set_level("WARNING")
    metrics = train_lib.train_and_evaluate(
        folder_config(root, skip_bad_images=True), str(tmp_path / "run")
    )
    log = "\n".join(r.getMessage() for r in caplog.records)
    check_says("skip_bad_images", log)
    for name in ("bad.jpg", "truncated.png", "empty.png"):
        assert f"{root}/train/a/{name}" in log
    assert metrics["steps"] == 2 and np.isfinite(metrics["test_loss"])
    assert metrics["test_examples"] == 8
    # The count is in the results too, not only in the log.
    assert metrics["skipped_images"] == {"train": 3}
    stored = wd.read_json(str(tmp_path / "run" / wd.METRICS))
    assert stored["skipped_images"] == {"train": 3}


def test_evaluate_names_the_images_it_cannot_decode(tmp_path):
    """keras-vit-evaluate --mode=eval on a folder split with bad files:
    one line naming them and the fix, as training says it."""
    from tests import console

    root = good_folder(tmp_path / "images", splits=("train",))
    add_bad_files(root)
    model = str(tmp_path / "m.keras")
    keras_vit.create_model(
        None, num_classes=2, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(model)
    result = console.run("evaluate", [
        "--mode=eval", f"--model={model}", "--dataset=folder",
        f"--data_dir={root}", "--split=train", "--batch_size=4"])
    line = _error_line(result, "evaluate")
    assert "Cannot decode 3 image file(s)" in line
    assert f"{root}/train/a/truncated.png" in line
    assert line.endswith("or pass --skip_bad_images to skip unreadable "
                         "images (they are counted and named in the log).")
    # Skipping as the message says (the same data and preprocessing): scored
    # on the readable ones, and the results file counts what was left
    # out; with a config, its field does the same.
    for args in (["--dataset=folder", f"--data_dir={root}",
                  "--skip_bad_images"],
                 [f"--config=folder:{root}",
                  "--config.input.skip_bad_images=True"]):
        out = tmp_path / f"results{len(args)}"
        result = console.run("evaluate", [
            "--mode=eval", f"--model={model}", *args, "--split=train",
            "--batch_size=4", f"--output_dir={out}"])
        assert result.returncode == 0, result.stderr[-3000:]
        # The log names the skip without a config field the user may not
        # have typed.
        assert "Skipping 3 unreadable image file(s)" in result.stderr
        assert "(skip_bad_images is on)" in result.stderr
        (stored,) = [json.loads(p.read_text())
                     for p in out.glob("eval_*.json")]
        assert stored["skipped_images"] == 3
        assert stored["num_examples"] == len(os.listdir(
            root / "train" / "a")) + len(os.listdir(root / "train" / "b")) - 3


def test_evaluating_an_image_too_elongated_to_keep_its_aspect_names_it(
        tmp_path):
    """keras-vit-evaluate --mode=eval on a folder, resizing keeping the
    aspect ratio (a config that sets it, as augreg_i1k's does): a 1 x 300
    strip, which decodes but which that resize refuses, is named in one
    line, not a TensorFlow traceback that names no file."""
    from tests import console

    root = good_folder(tmp_path / "images", splits=("train", "test"))
    save(f"{root}/test/a/strip.png", np.zeros((1, 300, 3), np.uint8))
    model = str(tmp_path / "m.keras")
    keras_vit.create_model(
        None, num_classes=2, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(model)
    result = console.run("evaluate", [
        "--mode=eval", f"--model={model}", f"--config=folder:{root}",
        "--config.input.pp.eval_keep_aspect=True",
        "--config.input.pp.eval_resize_size=256", "--split=test",
        "--batch_size=4"])
    line = _error_line(result, "evaluate")
    assert f"{root}/test/a/strip.png (The image is too elongated" in line


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A tiny digits run of 4 steps with checkpoints at steps 2 and 4, made
    once: each test resumes a copy of it."""
    workdir = tmp_path_factory.mktemp("checkpointed") / "run"
    first = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=4",
        "--config.checkpoints.every_steps=2", f"--workdir={workdir}"])
    assert first.returncode == 0, first.stderr[-3000:]
    return workdir


@covers("resume_other_optimizer")
def test_resuming_with_another_optimizer_names_the_field(tmp_path,
                                                         checkpointed_run):
    """keras-vit-train on a workdir with checkpoints, asked for another
    optimizer: one line naming the field, exit 1, the checkpoints kept."""
    workdir = tmp_path / "run"
    shutil.copytree(checkpointed_run, workdir)
    before = sorted(os.listdir(workdir / "checkpoints"))
    result = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=8", "--config.optimizer.name=sgd",
        "--config.optimizer.weight_decay=0",
        f"--workdir={workdir}"])
    line = _error_line(result, "train")
    check_says("resume_other_optimizer", line)
    assert "optimizer.momentum" not in line  # SGD's own, not adamw's
    assert "Value in checkpoint could not be found" not in result.stderr
    assert sorted(os.listdir(workdir / "checkpoints")) == before
    # An EMA the checkpoints do not hold: named by the decays written.
    result = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=8", "--config.trainer.ema_decay=0.99",
        f"--workdir={workdir}"])
    line = _error_line(result, "train")
    assert "config.trainer.ema_decay: 0.0 in the workdir, 0.99 asked" in line
    # The run's own optimizer resumes it, with a new learning rate.
    again = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=6", "--config.schedule.lr=0.0005",
        f"--workdir={workdir}"])
    assert again.returncode == 0, again.stderr[-3000:]


@covers("resume_other_input", "resume_other_start_model")
def test_resuming_with_other_data_or_start_model_names_the_field(
        tmp_path, checkpointed_run):
    """keras-vit-train on a workdir with checkpoints of its data order,
    given another batch, or a model to start from that it would not read:
    one line each, the checkpoints and config.json kept; with the data
    order drawn anew the other batch resumes."""
    workdir = tmp_path / "run"
    shutil.copytree(checkpointed_run, workdir)
    config = (workdir / "config.json").read_text()
    other = tmp_path / "other_run"  # a source of the same architecture
    shutil.copytree(workdir, other)
    for case, args in (
            ("resume_other_input", ["--config.input.batch_size=8"]),
            ("resume_other_start_model", [f"--model={other}"])):
        result = console.run("train", console.TINY_DIGITS + [
            "--config.trainer.total_steps=8", *args, f"--workdir={workdir}"])
        check_says(case, _error_line(result, "train"))
        assert (workdir / "config.json").read_text() == config
    again = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=6", "--config.input.batch_size=8",
        "--config.checkpoints.iterator=False", f"--workdir={workdir}"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resumed from" in again.stderr and "drawn anew" in again.stderr
    # The checkpoint's iterator left out as expected: no TensorFlow notice.
    assert "expect_partial" not in again.stderr
    assert "could not be found in the restored object" not in again.stderr


def test_a_run_started_from_a_model_is_resumed_with_it(tmp_path):
    """A fine-tuning run resumes with the --model it started from: left
    out (the config's own model differs) or another one named, the line
    names that --model, and the command with it resumes. A --model given
    relative to the directory the run started in is recorded absolute,
    so that the line names a --model that works from anywhere."""
    source = str(tmp_path / "source.keras")
    keras_vit.create_model(None, num_classes=10, image_size=16,
                           patch_size=8, hidden_size=24, num_layers=1,
                           num_heads=2, mlp_dim=24).save(source)
    workdir = tmp_path / "run"
    steps = ["--config.checkpoints.every_steps=2", f"--workdir={workdir}"]
    first = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=2", "--model=source.keras", *steps],
        cwd=str(tmp_path))
    assert first.returncode == 0, first.stderr[-3000:]
    recorded = json.loads((workdir / "config.json").read_text())
    assert recorded["init"]["model"] == source
    left_out = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=4", *steps])
    line = _error_line(left_out, "train")
    assert "config.model.hidden_size: 24 in the workdir, 16 asked" in line
    assert f"the same config and --model={source} to resume" in line
    other = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=4", f"--model={workdir}", *steps])
    line = _error_line(other, "train")
    assert f"Resume with --model={source}, as it started" in line
    again = console.run("train", console.TINY_DIGITS + [
        "--config.trainer.total_steps=4", f"--model={source}", *steps])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Resumed from" in again.stderr


def test_a_start_recorded_relative_is_the_same_model_from_elsewhere(
        tmp_path, monkeypatch):
    """A run recorded before its --model was made absolute names it as
    given ("run1"): from another directory, the same folder named by its
    absolute path is its start (the same name, and the saved one is not
    where the relative path now points)."""
    from keras_vit.training import model_init

    (tmp_path / "runs" / "run1").mkdir(parents=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert model_init._same_path("run1", str(tmp_path / "runs" / "run1"))
    assert not model_init._same_path("run1", str(tmp_path / "runs"))
    assert not model_init._same_path("run1", str(tmp_path / "nothing/run1"))
    # A folder recorded absolute (a data_dir, a start recorded since) that
    # is gone is not any folder of the same name.
    assert not model_init._same_path(str(tmp_path / "gone" / "run1"),
                                     str(tmp_path / "runs" / "run1"))


def test_a_config_override_without_a_config_names_the_missing_flag(
        tmp_path):
    """--config.FIELD=V with no --config: one line saying the override has
    no config to apply to (not absl's "Unknown command line flag")."""
    for command, args in (
            ("evaluate", ["--mode=eval", "--model=m.npz", "--dataset=digits",
                          "--config.input.batch_size=4"]),
            ("train", [f"--workdir={tmp_path / 'run'}",
                       "--config.trainer.total_steps=3"])):
        line = _error_line(console.run(command, args), command)
        field = args[-1].split("=")[0]
        assert line.endswith(
            f"error: {field} overrides a field of --config, which is not "
            "given: pass --config=NAME too (a shipped config, e.g. digits, "
            "or a config file), or the command's own flag for it (--help)")
    assert not (tmp_path / "run").exists()
    line = _error_line(console.run("predict", ["--config.x=1", "a.jpg"]),
                       "predict")
    assert line.endswith(
        "error: --config.x: this command takes no --config (flags: --help)")


@covers("unknown_model_size")
def test_train_names_the_closest_sizes_for_an_unknown_one(tmp_path):
    """keras-vit-train --model=Ti/17: one line with the closest sizes,
    exit 1, and no workdir made."""
    from tests import console

    workdir = tmp_path / "run"
    result = console.run("train", console.TINY_DIGITS + [
        "--model=Ti/17", f"--workdir={workdir}"])
    line = _error_line(result, "train")
    check_says("unknown_model_size", line)
    assert not workdir.exists()


@covers("misnamed_model_file")
def test_a_model_file_renamed_on_download_is_named_by_its_content(
        tmp_path):
    """keras-vit-convert --model=weights.bin where the file is an .npz:
    one line naming what it holds and the suffix, exit 1, nothing
    written."""
    model = keras_vit.create_model(None, num_classes=3, image_size=16,
                                   patch_size=8, hidden_size=16,
                                   num_layers=1, num_heads=2, mlp_dim=16)
    source = tmp_path / "weights.bin"
    checkpoint.save_npz(model, str(tmp_path / "vit.npz"))
    os.rename(tmp_path / "vit.npz", source)
    output = tmp_path / "out.keras"
    result = console.run("convert", [f"--model={source}",
                                     f"--output={output}"])
    check_says("misnamed_model_file", _error_line(result, "convert"))
    assert not output.exists()


@covers("output_exists")
def test_an_existing_output_is_kept_unless_overwrite(tmp_path):
    """keras-vit-convert onto a file already there, and keras-vit-export
    --format=litert onto an existing <model_name>.tflite: one line each
    naming --overwrite, exit 1, the file as it was; convert --overwrite
    replaces it; --overwrite with a SavedModel is refused."""
    from tests import console

    source = tmp_path / "vit.keras"
    keras_vit.create_model(None, num_classes=3, image_size=16, patch_size=8,
                           hidden_size=16, num_layers=1, num_heads=2,
                           mlp_dim=16).save(source)
    output = tmp_path / "out.keras"
    output.write_bytes(b"an earlier result")
    result = console.run("convert", [f"--model={source}",
                                     f"--output={output}"])
    check_says("output_exists", _error_line(result, "convert"))
    assert output.read_bytes() == b"an earlier result"
    result = console.run("convert", [f"--model={source}",
                                     f"--output={output}", "--overwrite"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert keras.models.load_model(output).count_params() == (
        keras.models.load_model(source).count_params())
    edge = tmp_path / "edge"
    edge.mkdir()
    (edge / "vit.tflite").write_bytes(b"a float32 export")
    result = console.run("export", [
        f"--model={source}", f"--export_dir={edge}", "--format=litert",
        "--quantization=int8"])
    line = _error_line(result, "export")
    check_says("output_exists", line)
    assert "--model_name" in line
    assert (edge / "vit.tflite").read_bytes() == b"a float32 export"
    result = console.run("export", [
        f"--model={source}", f"--export_dir={edge}", "--overwrite"])
    assert "--overwrite goes with --format=litert only" in _error_line(
        result, "export")
    assert sorted(os.listdir(edge)) == ["vit.tflite"]


@covers("blank_class_name")
def test_a_blank_class_name_is_refused_before_converting(tmp_path):
    """keras-vit-export --class_names=a,,c: one line naming the blank name
    by its index, for a SavedModel and for --format=litert (whose
    labels.txt would hold a blank line, which keras-vit-predict refuses),
    and nothing written."""
    from tests import console

    source = tmp_path / "vit.keras"
    keras_vit.create_model(None, num_classes=3, image_size=16, patch_size=8,
                           hidden_size=16, num_layers=1, num_heads=2,
                           mlp_dim=16).save(source)
    out = tmp_path / "out"
    for extra in ([], ["--format=litert"]):
        result = console.run("export", [
            f"--model={source}", f"--export_dir={out}", "--class_names=a,,c",
            *extra])
        check_says("blank_class_name", _error_line(result, "export"))
        assert not out.exists() or os.listdir(out) == [], os.listdir(out)


@covers("export_resize_smaller_than_input")
def test_export_resize_smaller_than_the_input_is_refused_first(tmp_path):
    """export_model's resize_size is checked as the commands check
    --resize_size: before anything is written, not as a shape error of
    the serving graph that leaves an empty model folder."""
    from keras_vit.export.saved_model import export_model

    model = keras_vit.create_model(None, num_classes=3, image_size=16,
                                   patch_size=8, hidden_size=16, num_layers=1,
                                   num_heads=2, mlp_dim=16)
    with pytest.raises(UsageError) as info:
        export_model(model, str(tmp_path), resize_size=8)
    check_error("export_resize_smaller_than_input", info.value)
    for bad in ((16, 8), (8, 32), "x", 0, True):
        with pytest.raises(UsageError, match="resize_size"):
            export_model(model, str(tmp_path), resize_size=bad)
    assert os.listdir(tmp_path) == []
    path = export_model(model, str(tmp_path), resize_size=(20, 16),
                        warmup_images=[], verify=False)
    assert os.path.basename(path) == "1"


def _through_pipeline(tmp_path, name, data, image_size):
    """The one image of a folder, as the evaluation pipeline yields it,
    mapped back from [-1, 1] to [0, 255]."""
    root = tmp_path / "kinds"
    os.makedirs(root / "train" / "x")
    with open(root / "train" / "x" / name, "wb") as f:
        f.write(data)
    c = folder_config(root, image_size=image_size)
    (images, _, _), = input_pipeline.eval_dataset(
        *tiny.pipeline(c), "train", 1).take(1)
    return (images.numpy()[0] + 1.0) * 127.5


def _encode(array, mode=None, fmt="PNG", **kw):
    buf = io.BytesIO()
    Image.fromarray(array, mode).save(buf, fmt, **kw)
    return buf.getvalue()


@covers("grayscale_png")
def test_grayscale_png(tmp_path):
    gray = RNG.integers(0, 256, (8, 8), np.uint8)
    got = _through_pipeline(tmp_path, "g.png", _encode(gray), 8)
    np.testing.assert_allclose(got, np.stack([gray] * 3, -1), atol=1e-4)


@covers("rgba_png")
def test_rgba_png(tmp_path):
    rgba = RNG.integers(0, 256, (8, 8, 4), np.uint8)
    got = _through_pipeline(tmp_path, "a.png", _encode(rgba), 8)
    np.testing.assert_allclose(got, rgba[..., :3], atol=1e-4)


@covers("png_16bit")
def test_16_bit_png(tmp_path):
    deep = RNG.integers(0, 65536, (8, 8, 3), np.uint16)
    data = tf.io.encode_png(deep).numpy()
    got = _through_pipeline(tmp_path, "d.png", data, 8)
    np.testing.assert_allclose(got, deep // 256, atol=1e-4)


@covers("cmyk_jpeg")
def test_cmyk_jpeg(tmp_path):
    # Four flat 8 x 8 blocks: JPEG keeps flat blocks (almost) exactly.
    colours = [(30, 200, 90, 40), (250, 10, 128, 0), (0, 0, 0, 255),
               (120, 60, 10, 100)]
    cmyk = np.zeros((16, 16, 4), np.uint8)
    blocks = [(slice(0, 8), slice(0, 8)), (slice(0, 8), slice(8, 16)),
              (slice(8, 16), slice(0, 8)), (slice(8, 16), slice(8, 16))]
    for block, colour in zip(blocks, colours):
        cmyk[block] = colour
    data = _encode(cmyk, "CMYK", "JPEG", quality=100)
    got = _through_pipeline(tmp_path, "c.jpg", data, 16)
    for block, (c, m, y, k) in zip(blocks, colours):
        want = [(255 - v) * (255 - k) / 255 for v in (c, m, y)]
        np.testing.assert_allclose(
            got[block], np.broadcast_to(want, (8, 8, 3)), atol=2
        )


@covers("tiny_image")
def test_image_smaller_than_a_patch(tmp_path):
    tiny = RNG.integers(0, 256, (3, 2, 3), np.uint8)
    got = _through_pipeline(tmp_path, "t.png", _encode(tiny), 16)
    want = tf.image.resize(tiny.astype("float32"), (16, 16)).numpy()
    assert got.shape == (16, 16, 3)
    np.testing.assert_allclose(got, want, atol=1e-3)


@covers("non_image_files")
def test_non_image_files_are_ignored(tmp_path, caplog):
    root = good_folder(tmp_path / "images", splits=("train",), n=2)
    for junk in ("notes.txt", ".DS_Store", "IMG_1.HEIC", "IMG_2"):
        with open(f"{root}/train/a/{junk}", "w") as f:
            f.write("not an image")
    with open(f"{root}/train/b/more.txt.", "w") as f:  # (as .txt)
        f.write("not an image")
    save(f"{root}/train/.thumbnails/t.png", np.zeros((4, 4, 3), np.uint8))
    save(f"{root}/train/a/._0.png", np.zeros((4, 4, 3), np.uint8))
    save(f"{root}/train/b/w.webp", np.zeros((4, 4, 3), np.uint8), fmt="WEBP")
    caplog.set_level("WARNING")
    paths, labels = folders.folder_split(str(root), "train")
    check_says("non_image_files", caplog.text)
    assert sorted(os.path.basename(p) for p in paths) == [
        "0.png", "0.png", "1.png", "1.png", "w.webp"]
    assert sorted(labels.tolist()) == [0, 0, 1, 1, 1]
    assert folders.folder_index(str(root))[1] == ["a", "b"]
    # The flat layout alike: a hidden folder is no class.
    flat = good_folder(tmp_path / "flat", splits=("",), n=3)
    save(f"{flat}/.thumbnails/t.png", np.zeros((4, 4, 3), np.uint8))
    assert folders.folder_index(str(flat))[1] == ["a", "b"]


def test_a_split_named_folder_of_images_beside_classes_is_said_a_class(
        tmp_path, caplog):
    """Class folders alone and a test/ of photos (to predict on, put
    beside them): test/ holds images directly, so it is a class, as the
    others are; the log says so and how a split folder is laid out.
    Without such a folder, nothing is said."""
    flat = good_folder(tmp_path / "flat", splits=("",), n=3)
    caplog.set_level("WARNING")
    folders.folder_index.cache_clear()
    assert folders.folder_index(str(flat))[1] == ["a", "b"]
    assert "named as a split" not in caplog.text
    save(f"{flat}/test/IMG_1.png", np.zeros((4, 4, 3), np.uint8))
    folders.folder_index.cache_clear()
    assert folders.folder_index(str(flat))[1] == ["a", "b", "test"]
    assert (f"Image folder {flat}: test/, named as a split, holds images "
            "directly, so it is read as a class, as its other folders are; "
            "a split folder holds class folders (test/<class>/*.jpg)."
            ) in caplog.text, caplog.text


@covers("stray_image_beside_class_folders")
def test_a_stray_image_beside_the_class_folders_keeps_the_layout(
        tmp_path, caplog):
    root = good_folder(tmp_path / "images", splits=("train", "val"))
    save(f"{root}/train/IMG_1234.png", np.zeros((4, 4, 3), np.uint8))
    save(f"{root}/val/IMG_1235.png", np.zeros((4, 4, 3), np.uint8))
    caplog.set_level("WARNING")
    index, names = folders.folder_index(str(root))
    assert names == ["a", "b"] and sorted(index) == ["train", "val"]
    assert len(index["train"][0]) == len(index["val"][0]) == 8
    check_says("stray_image_beside_class_folders", caplog.text)
    assert "train/, val/" in caplog.text


@covers("unreadable_entry_in_class_folder")
def test_links_folders_and_palette_bmps_are_named_like_corrupt_files(
        tmp_path):
    """Each used to stop training with TensorFlow's traceback, or (the
    BMP) to train on a nearly black image."""
    root = good_folder(tmp_path / "images")
    os.symlink("/nonexistent/gone.png", f"{root}/train/a/link.png")
    save(f"{root}/train/a/burst.jpg/frame0.jpg",
         np.zeros((4, 4, 3), np.uint8), fmt="JPEG")
    colours = np.zeros((8, 8, 3), np.uint8)
    colours[:, :4] = (255, 0, 0)
    colours[:, 4:] = (0, 0, 255)
    Image.fromarray(colours).convert(
        "P", palette=Image.Palette.ADAPTIVE).save(f"{root}/train/b/p8.bmp")
    Image.fromarray(colours).save(f"{root}/train/b/rgb24.bmp")
    # 16 bits per pixel (5-bit blue), which TensorFlow's decoder refuses.
    pixels = b"\x1f\x00" * 4 * 2
    with open(f"{root}/train/b/rgb16.bmp", "wb") as f:
        f.write(b"BM" + struct.pack("<IHHI", 54 + len(pixels), 0, 0, 54)
                + struct.pack("<IiiHHIIiiII", 40, 4, 2, 1, 16, 0,
                              len(pixels), 2835, 2835, 0, 0) + pixels)
    # TensorFlow's decoder corrupts memory on an animated WebP (a crash).
    Image.fromarray(colours).save(
        f"{root}/train/b/anim.webp", save_all=True,
        append_images=[Image.fromarray(255 - colours)])
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(folder_config(root),
                                     str(tmp_path / "run"))
    check_error("unreadable_entry_in_class_folder", info.value)
    text = str(info.value)
    for name in ("link.png", "burst.jpg", "p8.bmp", "rgb16.bmp",
                 "anim.webp"):
        assert f"{root}/train/" in text and name in text
    assert "rgb24.bmp" not in text
    decoded = pp.decode_image(
        tf.io.read_file(f"{root}/train/b/rgb24.bmp")).numpy()
    np.testing.assert_array_equal(decoded, colours)  # 24-bit: its colours
    # Skipping: trained on the rest.
    metrics = train_lib.train_and_evaluate(
        folder_config(root, skip_bad_images=True), str(tmp_path / "skip"))
    assert metrics["steps"] == 2


@covers("num_classes_not_the_folders")
def test_a_head_width_other_than_the_folders_is_refused(tmp_path):
    root = good_folder(tmp_path / "images")
    c = folder_config(root)
    c.model.num_classes = 5
    with pytest.raises(UsageError) as info:
        train_lib.train_and_evaluate(c, str(tmp_path / "run"))
    check_error("num_classes_not_the_folders", info.value)
    assert not (tmp_path / "run").exists()
    c.model.num_classes = 2  # the folder's count, named: trains
    assert train_lib.train_and_evaluate(c, str(tmp_path / "ok"))["steps"]


@covers("class_without_training_images")
def test_a_class_without_training_images_is_refused(tmp_path):
    root = good_folder(tmp_path / "images", splits=("train", "val"))
    os.rename(f"{root}/val/b", f"{root}/val/dogs")
    c = folder_config(root)
    c.evals.test.split = "val"
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(c, str(tmp_path / "run"))
    check_error("class_without_training_images", info.value)
    assert not (tmp_path / "run").exists()
    one = good_folder(tmp_path / "one", splits=("",), n=3)
    shutil.rmtree(f"{one}/b")
    c.input.data_dir = str(one)
    with pytest.raises(UsageError, match=r"has one class \(a\): a "
                       "classifier needs at least two class folders"):
        train_lib.train_and_evaluate(c, str(tmp_path / "run"))
    # Evaluation may read one class.
    assert folders.folder_index(str(one))[1] == ["a"]


@covers("class_all_unreadable_when_skipping")
def test_a_class_of_unreadable_images_is_refused_when_skipping(tmp_path):
    root = good_folder(tmp_path / "images")
    os.makedirs(f"{root}/train/c")
    for i in range(3):
        with open(f"{root}/train/c/{i}.jpg", "w") as f:
            f.write("not a jpeg")
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(
            folder_config(root, skip_bad_images=True), str(tmp_path / "run"))
    check_error("class_all_unreadable_when_skipping", info.value)


@covers("non_utf8_file_name")
def test_a_file_name_that_is_not_utf8_is_one_line(tmp_path):
    root = good_folder(tmp_path / "images")
    os.rename(f"{root}/train/a/0.png",
              os.fsencode(f"{root}/train/a/") + b"caf\xe9.png")
    with pytest.raises(ValueError) as info:
        folders.folder_index(str(root))
    check_error("non_utf8_file_name", info.value)
    assert f"{root}/train/a" in str(info.value)


# -------------------------------------------------------- folders, splits
@covers("empty_class_folder")
def test_empty_class_folder(tmp_path):
    root = good_folder(tmp_path / "images", splits=("train",), n=2)
    os.makedirs(f"{root}/train/c")
    with open(f"{root}/train/c/readme.txt", "w") as f:
        f.write("images go here")
    with pytest.raises(ValueError) as info:
        sources.dataset_info(folder_config(root).input)
    check_error("empty_class_folder", info.value)
    assert f"{root}/train/c" in str(info.value)


@covers("missing_split")
def test_missing_eval_split_fails_before_training(tmp_path):
    root = good_folder(tmp_path / "images", splits=("train",), n=2)
    workdir = tmp_path / "run"
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(folder_config(root), str(workdir))
    check_error("missing_split", info.value)
    assert not (workdir / "checkpoints").exists()
    # The slices it suggests each hold an example (a tenth of 4 would be
    # none); a training split that is none is named without them.
    assert str(info.value).endswith(
        "(e.g. config.input.train_split='train[:3]' and 'train[3:]' here).")
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(
            folder_config(root, train_split="train[9:]"),
            str(workdir))
    assert str(info.value) == (
        "config.input.train_split='train[9:]' cannot be used: Split "
        "'train[9:]' asks for 9 of 4 examples: a slice bound goes up to 4 "
        "(as in TFDS); slice within them, or leave the bound out for the "
        "end; set it to an existing split or a slice of one.")
    # A folder of class folders holds out its own val: that is named.
    flat = good_folder(tmp_path / "flat", splits=("",), n=5)
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(folder_config(flat), str(workdir))
    assert str(info.value).endswith(
        "(e.g. config.input.train_split='train' and 'val' here).")


@covers("eval_split_overlaps_train")
def test_an_eval_split_sharing_training_images_is_named(tmp_path, caplog):
    caplog.set_level("WARNING")
    metrics = train_lib.train_and_evaluate(
        config(**{"evals.test.split": "train[90%:]"}), str(tmp_path / "run"))
    log = "\n".join(r.getMessage() for r in caplog.records)
    check_says("eval_split_overlaps_train", log)
    assert log.count("shares examples") == 1
    assert metrics["steps"] == 2
    # Slices that do not meet, and another split, are not named.
    for train, test in (("train[:90%]", "train[90%:]"), ("train", "test")):
        caplog.clear()
        overlaps.warn_overlaps(config(train_split=train).input, [
            ("config.input.train_split", train),
            ("config.evals.test.split", test)])
        assert "shares examples" not in caplog.text


@covers("labels_out_of_range")
def test_labels_beyond_num_classes(tmp_path):
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(config(num_classes=5),
                                     str(tmp_path / "run"))
    check_error("labels_out_of_range", info.value)


@covers("unknown_dataset")
def test_unknown_dataset(tmp_path):
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(config(dataset="digitz"),
                                     str(tmp_path / "run"))
    check_error("unknown_dataset", info.value)


@covers("dataset_path_as_name")
def test_folder_path_given_as_dataset_name(tmp_path):
    photos = str(tmp_path / "photos")
    write_photo_folder(photos, per_class=1)
    tiny.write_run(tiny.digits_config(), str(tmp_path / "run"),
                   [str(i) for i in range(10)])
    runs = [
        ("evaluate", ["--mode=eval", f"--workdir={tmp_path / 'run'}",
                      f"--dataset=folder:{photos}"]),
        ("train", ["--config=digits", f"--workdir={tmp_path / 'new'}",
                   f"--config.input.dataset=folder:{photos}"]),
    ]
    for name, args in runs:
        result = console.run(name, args)
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        line = result.stderr.strip().splitlines()[-1]
        check_says("dataset_path_as_name", line)
        assert f"--data_dir={photos}" in line
    assert not os.path.exists(tmp_path / "new")
    with pytest.raises(ValueError, match="'a b' is not a TFDS name"):
        train_lib.train_and_evaluate(config(dataset="a b"),
                                     str(tmp_path / "run2"))


@covers("missing_data_dir")
def test_folder_that_does_not_exist(tmp_path):
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(
            folder_config(tmp_path / "nowhere"), str(tmp_path / "run")
        )
    check_error("missing_data_dir", info.value)


# --------------------------------------------------------------- configs
@pytest.mark.parametrize("case,overrides", [
    ("image_not_divisible", {"image_size": 30, "pp.resize_size": 34}),
    ("unknown_variant", {"model.variant": "B/15"}),
    ("zero_batch", {"batch_size": 0}),
    # A run counted in epochs divides by the batch for its steps: checked
    # before.
    ("zero_batch", {"batch_size": 0, "total_steps": 0, "trainer.epochs": 1}),
    ("negative_batch", {"batch_size": -8}),
    ("unknown_optimizer", {"optimizer.name": "rmsprop"}),
    ("unknown_loss", {"loss": "hinge"}),
    ("zero_total_steps", {"total_steps": 0}),
    ("resize_smaller_than_crop", {"pp.resize_size": 24}),
])
@covers("image_not_divisible", "unknown_variant", "zero_batch",
        "negative_batch", "unknown_optimizer", "unknown_loss",
        "zero_total_steps", "resize_smaller_than_crop")
def test_config_errors(tmp_path, case, overrides):
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(config(**overrides),
                                     str(tmp_path / "run"))
    check_error(case, info.value)
    # The model's and the run's sizes, the optimizer and the loss are
    # refused before anything is written (no empty workdir left behind);
    # the preprocessing is checked where it is built.
    if case != "resize_smaller_than_crop":
        assert not (tmp_path / "run").exists()


@covers("batch_not_divisible")
def test_batch_not_divisible_by_replicas(tmp_path):
    strategy = two_cpu_mirrored()
    with pytest.raises(ValueError) as info:
        train_lib.train_and_evaluate(config(batch_size=15),
                                     str(tmp_path / "run"), strategy)
    check_error("batch_not_divisible", info.value)


def test_a_starting_model_that_does_not_load_leaves_no_workdir(
        tmp_path, monkeypatch):
    """A run refused while it loads its starting weights (after its
    set-up, before it writes anything): the workdir it made is removed,
    with the parents made for it while they are empty; one the user made
    is kept."""
    from keras_vit.training import model_init

    def refuse(init, model, class_names=None):
        raise UsageError("the starting checkpoint does not fit")

    monkeypatch.setattr(model_init, "initialise_from", refuse)
    workdir = tmp_path / "runs" / "b16" / "run"  # its parents made too
    with pytest.raises(UsageError, match="does not fit"):
        train_lib.train_and_evaluate(config(), str(workdir))
    assert os.listdir(tmp_path) == []
    # Another run's workdir made beside it meanwhile (empty still): kept,
    # and the parents it is in.
    sibling = tmp_path / "runs" / "b16" / "other"

    def refuse_beside(init, model, class_names=None):
        sibling.mkdir()
        raise UsageError("the starting checkpoint does not fit")

    monkeypatch.setattr(model_init, "initialise_from", refuse_beside)
    with pytest.raises(UsageError, match="does not fit"):
        train_lib.train_and_evaluate(config(), str(workdir))
    assert sibling.is_dir() and not workdir.exists()
    monkeypatch.setattr(model_init, "initialise_from", refuse)
    workdir.mkdir(parents=True)
    with pytest.raises(UsageError, match="does not fit"):
        train_lib.train_and_evaluate(config(), str(workdir))
    assert workdir.is_dir()


@covers("unsupported_filesystem")
def test_workdir_on_unknown_file_system(tmp_path):
    with pytest.raises(UsageError) as info:
        train_lib.train_and_evaluate(config(), "nofs://bucket/run")
    check_error("unsupported_filesystem", info.value)
    assert "nofs" in str(info.value)


@pytest.mark.slow
@covers("config_typo", "missing_workdir", "unknown_strategy")
def test_command_line_errors(tmp_path):
    train = [sys.executable, os.path.join(ROOT, "train.py"),
             "--config=" + os.path.join(ROOT, "configs", "digits.py")]
    workdir = "--workdir=" + str(tmp_path / "run")
    commands = {
        "config_typo": train + [workdir, "--config.model.hiden_size=64"],
        "missing_workdir": train,
        "unknown_strategy": train + [workdir, "--strategy=gpu"],
    }
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    procs = {
        case: subprocess.Popen(cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, env=env)
        for case, cmd in commands.items()
    }
    for case, proc in procs.items():
        output = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 1, output[-2000:]
        assert "Traceback" not in output  # one line, not a stack
        check_says(case, output)
    assert not (tmp_path / "run").exists()  # nothing started


# ------------------------------------------------------ checkpoint files
def tiny_vit(width=32):
    return keras_vit.create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=width,
        num_layers=1, num_heads=2, mlp_dim=32,
    )


@covers("truncated_npz")
def test_truncated_npz(tmp_path):
    path = str(tmp_path / "vit.npz")
    checkpoint.save_npz(tiny_vit(), path)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    with pytest.raises(ValueError) as info:
        checkpoint.load_npz(tiny_vit(), path)
    check_error("truncated_npz", info.value)


@covers("pickled_npz")
def test_pickled_npz_is_refused(tmp_path):
    path = str(tmp_path / "evil.npz")
    np.savez(path, **{"head/kernel": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError) as info:
        checkpoint.load_npz(tiny_vit(), path)
    check_error("pickled_npz", info.value)


@covers("deep_pickle", "inflating_bin", "zero_stride_bin", "index_escape",
        "index_no_weight_map", "config_list", "npy_huge_shape",
        "keras_lambda", "hf_dotdot_revision", "empty_axis_array")
def test_hostile_model_files_are_refused_in_one_line(tmp_path, monkeypatch):
    # In-process, through the user's function, after the child-process fuzz
    # test (tests/test_torch_pickle.py) showed none of these can crash.
    folder = str(tmp_path)
    cases = {label: (reader, target) for build in (
        hostile_files.deep_nesting, hostile_files.inflation,
        hostile_files.zero_stride, hostile_files.path_escape,
        hostile_files.broken_json, hostile_files.broken_npz,
        hostile_files.keras_lambda, hostile_files.uris,
        hostile_files.empty_axes)
        for label, reader, target in build(folder, 1)}
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    for case_id, label in (
            ("deep_pickle", "nesting:tuple_dict_key"),
            ("inflating_bin", "inflation:storage"),
            ("zero_stride_bin", "zero_stride:state_dict"),
            ("index_escape", "escape:parent"),
            ("index_no_weight_map", "index:no_weight_map"),
            ("config_list", "config:list"),
            ("npy_huge_shape", "npz:huge_shape"),
            ("keras_lambda", "keras:lambda"),
            ("hf_dotdot_revision", "hf:.."),
            ("empty_axis_array", "empty:npz"),
            ("empty_axis_array", "empty:safetensors")):
        reader, target = cases[label]
        with pytest.raises(UsageError) as info:
            if reader == "bin":
                dict(torch_pickle.read_state_dict(target))
            else:
                keras_vit.load_model(target)
        assert "\n" not in str(info.value)
        check_error(case_id, info.value)


@covers("link_out_of_folder", "hf_refs_escape", "keras_config_bomb",
        "npz_member_bomb", "keras_user_model", "keras_not_a_model",
        "keras_truncated", "keras_declares_huge_model", "npz_complex",
        "timm_qkv_bias_stray", "timm_zero_std")
def test_links_bombs_and_other_models_are_refused_in_one_line(
        tmp_path, monkeypatch):
    # In-process, through the user's function (the child-process test of
    # tests/test_torch_pickle.py reads the same files with memory measured).
    folder = str(tmp_path)
    cases = {label: target for build in (
        hostile_files.links_out, hostile_files.archive_bombs,
        hostile_files.keras_not_vit, hostile_files.odd_configs)
        for label, _, target in build(folder, 1)}
    monkeypatch.setenv("KERAS_VIT_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE",
                        os.path.join(folder, "hf", "hub"))
    softmax = cases["control:keras_softmax"]
    model = keras_vit.load_model(softmax)
    assert type(model.layers[-1]).__name__ == "Softmax"
    for case_id, label, load in (
            ("link_out_of_folder", "link:weights", keras_vit.load_model),
            ("hf_refs_escape", "link:refs_escape", keras_vit.load_model),
            ("keras_config_bomb", "bomb:keras_config", keras_vit.load_model),
            ("npz_member_bomb", "bomb:npz_extra", keras_vit.load_model),
            ("keras_user_model", "control:keras_softmax",
             keras_vit.checkpoint.loader.describe_source),
            ("keras_not_a_model", "keras:layer_top", keras_vit.load_model),
            ("keras_truncated", "keras:cut_short", keras_vit.load_model),
            ("keras_declares_huge_model", "keras:huge_vit",
             keras_vit.load_model),
            ("keras_declares_huge_model", "keras:huge_dense",
             keras_vit.load_model),
            ("keras_declares_huge_model", "keras:huge_image",
             keras_vit.load_model),
            ("npz_complex", "dtype:complex", keras_vit.load_model),
            ("timm_qkv_bias_stray", "config:timm_qkv_bias_false",
             keras_vit.load_model),
            ("timm_zero_std", "config:timm_zero_std", keras_vit.load_model)):
        with pytest.raises(UsageError) as info:
            load(cases[label])
        assert "\n" not in str(info.value)
        check_error(case_id, info.value)
    # A zip with no config.json (an archive of something else, renamed).
    bare = os.path.join(folder, "bare.keras")
    with zipfile.ZipFile(bare, "w") as archive:
        archive.writestr("model.weights.h5", b"")
    with pytest.raises(UsageError, match="is a zip without config.json, so "
                       "no whole .keras file"):
        keras_vit.load_model(bare)


@covers("npz_declares_huge_model")
def test_an_npz_declaring_a_huge_model_is_refused_before_it_is_built(
        tmp_path):
    """The sizes an .npz declares come from a few shapes; a file of a few
    kB that declares billions of parameters is refused before the model
    (every declared weight) is allocated, as a .keras file is: its
    blocks, its head and pre-logits, a hybrid's ResNet units and width."""
    def npz(name, **arrays):
        path = str(tmp_path / f"{name}.npz")
        np.savez_compressed(path, **{k.replace("__", "/"): v
                                     for k, v in arrays.items()})
        return path

    block = "Transformer__encoderblock_{}__"
    wide = npz("wide", **{
        "embedding__kernel": np.zeros((1, 1, 3, 8192), np.float32),
        block.format(0) + "MultiHeadDotProductAttention_1__query__kernel":
            np.zeros((1, 8, 1), np.float32),
        block.format(0) + "MlpBlock_3__Dense_0__kernel":
            np.zeros((1, 65536), np.float32),
        **{block.format(i) + "x": np.zeros(1, np.float32)
           for i in range(1, 10)}})
    table = npz("table", **{
        "embedding__kernel": np.zeros((1, 1, 3, 4), np.float32),
        "cls": np.zeros((1, 1, 4), np.float32),
        "Transformer__posembed_input__pos_embedding":
            np.zeros((1, 20001, 1), np.float32)})
    stacked = npz("stacked", **{
        "params__img__embedding__kernel": np.zeros((1, 1, 3, 4), np.float32),
        "params__img__Transformer__encoderblock__LayerNorm_0__scale":
            np.zeros((2000, 1), np.float32)})
    small = {"embedding__kernel": np.zeros((16, 16, 3, 8), np.float32),
             block.format(0) + "MultiHeadDotProductAttention_1__query__"
             "kernel": np.zeros((8, 2, 4), np.float32),
             block.format(0) + "MlpBlock_3__Dense_0__kernel":
                 np.zeros((8, 16), np.float32)}
    # A 65536 x 65536 head (17 GB) from two kernels of one row each.
    head = npz("head", **small,
               head__kernel=np.zeros((1, 65536), np.float32),
               pre_logits__kernel=np.zeros((1, 65536), np.float32))
    # A million ResNet units from one key name; a ResNet of width 512.
    units = npz("units", **small,
                conv_root__kernel=np.zeros((7, 7, 3, 64), np.float32),
                block1__unit1000000__conv1__kernel=np.zeros(1, np.float32))
    # Twelve stages of one unit each: the last alone 64 * 2**11 wide.
    deep = npz("deep", **small,
               conv_root__kernel=np.zeros((7, 7, 3, 64), np.float32),
               **{f"block{s}__unit1__conv1__kernel": np.zeros(1, np.float32)
                  for s in range(1, 13)})
    root = npz("root", **small,
               conv_root__kernel=np.zeros((1, 1, 1, 64 * 512), np.float32),
               block1__unit1__conv1__kernel=np.zeros(1, np.float32))
    assert os.path.getsize(wide) < 20_000
    for path, says in ((wide, "declares a model of at least "),
                       (head, "a head of 65536 x 65536) and holds"),
                       (units, "1000000 ResNet units of width 64"),
                       (root, "1 ResNet unit of width 32768"),
                       (deep, "12 ResNet units of width 64"),
                       (table, "declares a position table of 20,001"),
                       (stacked, "declares a stack of 2000 blocks, where "
                        "a model has 1 to 1024")):
        for read in (keras_vit.load_model,
                     keras_vit.checkpoint.loader.describe_source):
            with pytest.raises(UsageError) as info:
                read(path)
            assert says in str(info.value), info.value
            check_error("npz_declares_huge_model", info.value)


def test_a_workdir_whose_labels_no_longer_fit_its_head_names_them(
        tmp_path):
    """A run whose config.json leaves its class count to labels.txt, that
    file then edited (a name added or removed): the line names labels.txt
    and both counts, where it blamed config.json."""
    from tests import console

    earlier = os.path.join(os.path.dirname(__file__), "fixtures", "earlier",
                           "workdir")
    names = open(os.path.join(earlier, "labels.txt")).read().splitlines()
    for kept in (names + ["extra"], names[:-1]):
        workdir = tmp_path / "run"
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.copytree(earlier, workdir)
        (workdir / "labels.txt").write_text("\n".join(kept) + "\n")
        result = console.run("convert", [f"--model={workdir}",
                                         f"--output={tmp_path}/m.keras"])
        line = _error_line(result, "convert")
        assert f"has a head of {len(names)} classes, and the run's " \
            f"labels.txt names {len(kept)}: its config.json leaves the " \
            "class count to labels.txt" in line, line
        assert line.endswith("Put back the run's labels.txt."), line
        assert not (tmp_path / "m.keras").exists()


def test_an_npz_without_an_array_its_sizes_come_from_names_it(tmp_path):
    """An .npz that lacks the array whose shape gives one of its sizes
    (a file saved in part): keras-vit-convert names that array and the
    fix, where it said "variant=None needs explicit sizes", a variant
    the user never gave."""
    from tests import console

    arrays = checkpoint.model_arrays(tiny_vit())
    for key, size in (
            ("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
             "query/kernel", "num_heads"),
            ("embedding/kernel", "patch_size")):
        path = tmp_path / "part.npz"
        np.savez(path, **{k: v for k, v in arrays.items() if k != key})
        result = console.run("convert", [f"--model={path}",
                                         f"--output={tmp_path}/m.keras"])
        assert _error_line(result, "convert") == (
            f"keras-vit-convert: error: {path} lacks the array {key} (whose "
            f"shape gives the model's {size}): a damaged or partly saved "
            "file. Download or copy it again.")
        assert not (tmp_path / "m.keras").exists()


def test_an_npz_whose_heads_do_not_divide_its_width_is_named(tmp_path):
    """Attention kernels of 3 heads in a model 32 wide (a damaged or
    edited file): keras-vit-convert names the file and the array, where
    it told the user, who set no head count, to choose one."""
    from tests import console

    arrays = checkpoint.model_arrays(tiny_vit())
    key = ("Transformer/encoderblock_0/MultiHeadDotProductAttention_1/"
           "query/kernel")
    width = arrays[key].shape[0]
    assert width % 3
    for name in ("query", "key", "value"):
        arrays[key.replace("query", name)] = np.zeros((width, 3, 10),
                                                      np.float32)
    path = tmp_path / "heads.npz"
    np.savez(path, **arrays)
    result = console.run("convert", [f"--model={path}",
                                     f"--output={tmp_path}/m.keras"])
    assert _error_line(result, "convert") == (
        f"keras-vit-convert: error: {path}: the 3 heads of its array {key} "
        f"do not divide its width {width}: a damaged or edited file. "
        "Download or copy it again.")
    assert not (tmp_path / "m.keras").exists()


def test_an_image_size_of_too_many_tokens_is_refused_in_one_line(
        tmp_path):
    """--image_size=38400 for 384 (a typo): millions of tokens, whose
    model the system's out-of-memory killer ended without a word (exit
    137). keras-vit-convert and -export refuse it before building,
    naming the most tokens and the largest image size at the model's
    patch size (the Python API builds any size it is asked for)."""
    from tests import console

    model = tiny_vit()
    path = tmp_path / "m.npz"
    np.savez(path, **checkpoint.model_arrays(model))
    for command, args in (
            ("convert", [f"--output={tmp_path}/m.keras"]),
            ("export", [f"--export_dir={tmp_path}/e"])):  # (as evaluate)
        result = console.run(command, [f"--model={path}",
                                       "--image_size=38400", *args])
        line = _error_line(result, command)
        assert "--image_size 38400 x 38400 makes 23,040,000 tokens of 8 x " \
            "8 pixels, more than the 16,384 a model is built with here" in \
            line, line
        assert line.endswith("give an image size of at most 1024 x 1024."), \
            line
    assert not (tmp_path / "m.keras").exists()


def test_a_config_image_size_of_too_many_tokens_is_refused_in_one_line(
        tmp_path):
    """The same typo as config.model.image_size: keras-vit-train and
    keras-vit-evaluate --mode=vtab and fewshot refuse it before they build
    a model (train built 200M parameters of position embeddings and then
    died in the first step), and make no workdir or output folder."""
    model = tiny_vit()
    path = tmp_path / "m.npz"
    np.savez(path, **checkpoint.model_arrays(model))
    for command, args, made in (
            ("train", ["--config=digits", f"--workdir={tmp_path}/run",
                       "--config.trainer.total_steps=2",
                       "--config.schedule.warmup_steps=1"], "run"),
            ("evaluate", ["--mode=vtab", "--config=vtab", f"--model={path}",
                          f"--output_dir={tmp_path}/vtab"], "vtab"),
            ("evaluate", ["--mode=fewshot", "--config=fewshot",
                          f"--model={path}", f"--output_dir={tmp_path}/fs",
                          "--config.input.pp.eval_resize_size=None"], "fs")):
        result = console.run(command, [*args,
                                       "--config.model.image_size=38400"])
        line = _error_line(result, command)
        assert "38400 x 38400 makes 23,040,000 tokens of 8 x 8 pixels, " \
            "more than the 16,384 a model is built with here" in line, line
        assert "--config.model.image_size" in line, line
        assert line.endswith("give an image size of at most 1024 x 1024."), \
            line
        assert not (tmp_path / made).exists()


@covers("nonfinite_weights")
def test_nonfinite_weights_are_refused_by_name(tmp_path):
    """One NaN in an .npz: keras-vit-predict and -export stop in one line
    naming the array, before writing anything; an infinity in a .keras
    file and fine-tuning from the .npz are refused alike."""
    from keras_vit.checkpoint import loader
    from tests import console

    model = tiny_vit()
    arrays = checkpoint.model_arrays(model)
    arrays["Transformer/encoder_norm/scale"][0] = np.nan
    path = str(tmp_path / "nan.npz")
    np.savez(path, **arrays)
    images = good_folder(tmp_path / "images", splits=("test",))
    result = console.run("predict", [f"--model={path}", images])
    line = _error_line(result, "predict")
    check_says("nonfinite_weights", line)
    assert "Transformer/encoder_norm/scale" in line and path in line
    assert "nan" not in result.stdout.lower()
    out = tmp_path / "exports"
    result = console.run("export", [f"--model={path}",
                                    f"--export_dir={out}"])
    check_says("nonfinite_weights", _error_line(result, "export"))
    assert not out.exists() or not any(out.rglob("saved_model.pb"))
    # The model a strict load refuses is left as it was: the finite
    # arrays before the NaN are not assigned.
    target = tiny_vit()
    before = [w.numpy().copy() for w in target.weights]
    with pytest.raises(UsageError) as info:
        loader.initialise(target, path)
    check_error("nonfinite_weights", info.value)
    for kept, weight in zip(before, target.weights):
        np.testing.assert_array_equal(kept, weight.numpy())
    variable = model.get_layer("posembed_input").weights[0]
    value = variable.numpy()
    value.flat[3] = np.inf
    variable.assign(value)
    model.save(str(tmp_path / "inf.keras"))
    with pytest.raises(UsageError) as info:
        keras_vit.load_model(str(tmp_path / "inf.keras"))
    check_error("nonfinite_weights", info.value)
    assert "pos_embedding" in str(info.value)


def test_weights_cast_to_integers_are_refused_by_name(tmp_path):
    """An .npz whose parameters were cast to integers (or one to bool),
    and a safetensors file whose header says I32 for a float tensor: each
    a parameter that is no float, refused by name (they loaded, predicting
    nonsense without a word)."""
    import safetensors.numpy

    from tests import console
    from tests.hub_fixtures import FIXTURES

    arrays = checkpoint.model_arrays(tiny_vit())
    images = good_folder(tmp_path / "images", splits=("test",), n=1)
    for name, cast in (("int", lambda k, v: (v * 100).astype(np.int32)),
                       ("bool", lambda k, v: v.astype(bool) if k.endswith(
                           "encoder_norm/scale") else v)):
        path = str(tmp_path / f"{name}.npz")
        np.savez(path, **{k: cast(k, v) for k, v in arrays.items()})
        result = console.run("predict", [f"--model={path}", images])
        line = _error_line(result, "predict")
        assert f"{path}: " in line and ", where a model parameter is a " \
            "floating-point number: the weights were cast or altered." in line
        assert "dtype int32" in line or "dtype bool" in line, line
    folder = tmp_path / "hf"
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), folder)
    tensors = safetensors.numpy.load_file(str(folder / "model.safetensors"))
    key = sorted(k for k in tensors if k.endswith("layernorm.weight"))[0]
    tensors[key] = tensors[key].view(np.int32)  # the header's dtype alone
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(UsageError, match=r"has dtype int32, where a model "
                       r"parameter is a floating-point number"):
        keras_vit.load_model(str(folder))
    # A model saved whole with integer weights of its own (quantized) is
    # given back as saved: the refusal is of a file's arrays mapped in.
    quantized = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4)])
    quantized.layers[0].quantize("int8")  # (the Dense alone: no notice)
    quantized.save(tmp_path / "q.keras")
    assert len(keras_vit.load_model(str(tmp_path / "q.keras")).layers) == 1


def test_one_damaged_block_array_is_the_one_named(tmp_path):
    """An .npz whose first block's MLP kernel lost a column: the sizes are
    read from what most blocks say, so the error names that one array,
    not every intact block's as not fitting."""
    model = keras_vit.create_model(
        None, num_classes=4, image_size=16, patch_size=8, hidden_size=16,
        num_layers=3, num_heads=2, mlp_dim=32)
    arrays = checkpoint.model_arrays(model)
    key = "Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"
    arrays[key] = arrays[key][:, :-1]
    path = str(tmp_path / "damaged.npz")
    np.savez(path, **arrays)
    with pytest.raises(UsageError) as info:
        keras_vit.load_model(path)
    message = str(info.value)
    assert f"shape mismatch: {key}: model expects (16, 32), file has " \
        "(16, 31)" in message, message
    assert "encoderblock_1" not in message and "encoderblock_2" not in (
        message)


def test_an_all_zero_head_is_named_in_the_log(tmp_path):
    """An .npz whose head is all zeros (the ImageNet-21k releases'):
    keras-vit-predict (and convert, analysis) says every class scores
    alike and names the fix."""
    from tests import console

    path = str(tmp_path / "zero.npz")
    checkpoint.save_npz(tiny_vit(), path)  # a new model's head is zeros
    images = good_folder(tmp_path / "images", splits=("test",), n=1)
    result = console.run("predict", [f"--model={path}", images])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "classification head is all zeros" in result.stderr
    assert "Fine-tune it first (--config.init.model)" in result.stderr
    # Converted to .keras (which would then serve it without a word): said
    # too; not of a head the conversion makes new (--num_classes).
    converted = console.run("convert", [f"--model={path}",
                                        f"--output={tmp_path / 'z.keras'}"])
    assert converted.returncode == 0, converted.stderr[-2000:]
    assert "classification head is all zeros" in converted.stderr
    renewed = console.run("convert", [f"--model={path}", "--num_classes=4",
                                      f"--output={tmp_path / 'n.keras'}"])
    assert renewed.returncode == 0, renewed.stderr[-2000:]
    assert "classification head is all zeros" not in renewed.stderr
    # ... but predicting with that .keras file (its head new, never
    # trained) says so.
    result = console.run("predict", [f"--model={tmp_path / 'n.keras'}",
                                     images])
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("classification head is all zeros, as a new head starts: every "
            "class scores alike. Fine-tune it first (--config.init.model)."
            ) in result.stderr
    # --num_classes of the file's own width keeps its head: said.
    kept = console.run("convert", [f"--model={path}", "--num_classes=3",
                                   f"--output={tmp_path / 'k.keras'}"])
    assert "classification head is all zeros" in kept.stderr
    # keras-vit-analysis titles each image with its prediction: said too.
    analysed = console.run("analysis", [f"--model={path}", images,
                                        f"--output_dir={tmp_path / 'a'}"])
    assert analysed.returncode == 0, analysed.stderr[-2000:]
    assert "classification head is all zeros" in analysed.stderr


@covers("npz_other_variant")
def test_npz_of_another_variant(tmp_path):
    path = str(tmp_path / "wide.npz")
    checkpoint.save_npz(tiny_vit(width=48), path)
    model = tiny_vit()
    before = [w.numpy() for w in model.weights]
    with pytest.raises(ValueError) as info:
        checkpoint.load_npz(model, path)
    check_error("npz_other_variant", info.value)
    for a, b in zip(before, model.weights):
        np.testing.assert_array_equal(a, b.numpy())


# --------------------------------------------------------------- serving
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The signatures of a tiny exported SavedModel, reloaded."""
    from keras_vit.export.saved_model import export_model

    path = export_model(
        tiny_vit(), str(tmp_path_factory.mktemp("exports")),
        warmup_images=[], verify=False,
    )
    return tf.saved_model.load(path).signatures


PNG = tf.io.encode_png(np.full((16, 16, 3), 9, np.uint8)).numpy()


@pytest.mark.parametrize("case,signature,inputs", [
    ("serve_garbage_bytes", "serving_default",
     {"image_bytes": [b"\x00\x01\x02\xff not an image"]}),
    ("serve_empty_string", "serving_default", {"image_bytes": [b""]}),
    ("serve_base64_text", "serving_default",
     {"image_bytes": [base64.b64encode(PNG)]}),
    ("serve_wrong_dtype", "serving_default", {"image_bytes": [1.0, 2.0]}),
    ("serve_wrong_rank", "serving_default", {"image_bytes": b"x"}),
    ("serve_pixels_out_of_range", "predict_images",
     {"images": np.full((1, 16, 16, 3), -0.5, np.float32)}),
])
@covers("serve_garbage_bytes", "serve_empty_string", "serve_base64_text",
        "serve_wrong_dtype", "serve_wrong_rank", "serve_pixels_out_of_range")
def test_bad_serving_requests(served, case, signature, inputs):
    with pytest.raises(tf.errors.InvalidArgumentError) as info:
        served[signature](**{k: tf.constant(v) for k, v in inputs.items()})
    check_error(case, info.value)
    # The server keeps answering good requests.
    out = served["serving_default"](image_bytes=tf.constant([PNG]))
    assert out["probabilities"].shape == (1, 3)


# ------------------------------------------------------------------ VTAB
@covers("unknown_vtab_task")
def test_unknown_vtab_task():
    with pytest.raises(ValueError) as info:
        vtab.get_task("cifar1000")
    check_error("unknown_vtab_task", info.value)


def test_optimizer_names_in_message_are_the_real_ones():
    """The optimizers the unknown-name message lists are exactly the ones
    that exist: each listed name builds that optimizer (its Keras class,
    the schedule's learning rate) and takes a step."""
    with pytest.raises(ValueError) as info:
        optim.create_optimizer(mlc.ConfigDict(dict(name="adamm", lr=0.1)),
                               10)
    listed = str(info.value).split("use one of ")[1].rstrip(".").split(", ")
    keras_class = {"sgd": "MomentumSGD", "adam": "Adam", "adamw": "AdamW",
                   "lamb": "Lamb"}
    assert sorted(listed) == sorted(keras_class)
    for name in listed:
        opt = dict(name=name, lr=0.1, warmup_steps=0, decay_type="linear")
        if name in ("adamw", "lamb"):
            opt["weight_decay"] = 0.0
        optimizer = optim.create_optimizer(mlc.ConfigDict(opt), 10)
        assert type(optimizer).__name__ == keras_class[name], name
        variable = tf.Variable([1.0, -2.0])
        optimizer.apply_gradients([(tf.constant([0.5, 0.5]), variable)])
        assert int(optimizer.iterations.numpy()) == 1, name
        # A step at the first learning rate (0.1) moved the weights down.
        moved = np.asarray(variable.numpy()) - np.array([1.0, -2.0])
        assert np.all(moved < 0) and np.all(moved > -0.2), (name, moved)


# ------------------------------------------------------- the published table
def _table_script():
    spec = importlib.util.spec_from_file_location(
        "reliability_table", os.path.join(ROOT, "scripts",
                                          "reliability_table.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_case_has_exactly_one_test():
    found = _table_script().find_tests()
    assert sorted(found) == sorted(CASES)
    assert {k: v for k, v in found.items() if len(v) != 1} == {}


def test_reliability_doc_is_current():
    script = _table_script()
    with open(os.path.join(ROOT, "docs", "reliability.md")) as f:
        assert f.read() == script.render(), (
            "docs/reliability.md is stale: run "
            "python scripts/reliability_table.py"
        )


@pytest.mark.slow
def test_commands_refuse_a_users_keras_model_by_name(tmp_path):
    # A .keras functional model of keras_vit's layers plus a Softmax:
    # keras-vit-predict (it reads a ViT's logits), keras-vit-export (its
    # features) and keras-vit-evaluate (its logits) each refuse it in one
    # line naming the file and the Softmax layer, no traceback; the
    # converter, which only re-saves it, keeps it as Keras saved it.
    target = dict((label, path) for label, _, path in
                  hostile_files.keras_not_vit(str(tmp_path), 1))[
                      "control:keras_softmax"]
    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(image)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root, CUDA_VISIBLE_DEVICES="",
               TF_CPP_MIN_LOG_LEVEL="3")
    for name, args in (
            ("predict", [str(image)]),
            ("export", [f"--export_dir={tmp_path}/exports"]),
            ("evaluate", ["--mode=eval", "--dataset=digits"])):
        code = (f"import sys; sys.argv[0] = 'keras-vit-{name}'; from "
                f"keras_vit.commands.{name} import main; sys.exit(main())")
        run = subprocess.run(
            [sys.executable, "-c", code, f"--model={target}", *args],
            capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 1, run.stderr[-2000:]
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
        errors = [line for line in run.stderr.splitlines()
                  if line.startswith(f"keras-vit-{name}: error:")]
        assert len(errors) == 1, run.stderr[-2000:]
        assert target in errors[0] and "'probs' (Softmax)" in errors[0]
    assert not os.path.exists(tmp_path / "exports")
    code = ("import sys; sys.argv[0] = 'keras-vit-convert'; from "
            "keras_vit.commands.convert import main; sys.exit(main())")
    out = tmp_path / "again.keras"
    run = subprocess.run([sys.executable, "-c", code, f"--model={target}",
                          f"--output={out}"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert type(keras_vit.load_model(str(out)).layers[-1]).__name__ == (
        "Softmax")


@pytest.mark.parametrize("fmt, options, mode", [
    ("PNG", {}, "RGB"), ("GIF", {}, "RGB"), ("BMP", {}, "RGB"),
    ("JPEG", {}, "RGB"), ("WEBP", {"lossless": True}, "RGB"),
    ("WEBP", {"quality": 80}, "RGB"), ("WEBP", {}, "RGBA"),
])
def test_the_declared_pixels_are_read_from_each_header(fmt, options, mode):
    """width x height as each format's header declares it (lossless WebP
    is VP8L, lossy VP8, with alpha VP8X), before anything is decoded."""
    channels = len(mode)
    buffer = io.BytesIO()
    Image.fromarray(RNG.integers(0, 256, (21, 33, channels), np.uint8),
                    mode).save(buffer, fmt, **options)
    data = buffer.getvalue()
    assert int(image_headers.declared_pixels(tf.constant(data))) == 21 * 33
    assert pp.decode_image(tf.constant(data)).shape == (21, 33, 3)
    if fmt == "BMP":  # a top-down BMP declares a negative height
        top_down = bytearray(data)
        top_down[22:26] = (-21).to_bytes(4, "little", signed=True)
        declared = image_headers.declared_pixels(tf.constant(bytes(top_down)))
        assert int(declared) == 693


def _gif(frames, screen=(33, 21)):
    """A GIF of one 33 x 21 frame written by PIL, its image block repeated
    with each (width, height) of `frames`: the LZW data then fits none
    but the first; enough for what the headers declare."""
    buffer = io.BytesIO()
    Image.new("P", (33, 21), 1).save(buffer, "GIF")
    data = buffer.getvalue()
    at = data.index(b"\x2c\0\0\0\0" + struct.pack("<HH", 33, 21))
    block = data[at:-1]
    head = data[:6] + struct.pack("<HH", *screen) + data[10:at]
    return head + b"".join(block[:5] + struct.pack("<HH", *shape) + block[9:]
                           for shape in frames) + b";"


def test_an_animated_gif_declares_the_pixels_of_all_its_frames():
    """TensorFlow reads every frame of a GIF (a byte a pixel) and returns
    the first at the largest frame width and height (not the screen's):
    the larger of that and a sixteenth of the frames' pixels is declared;
    the walk stops past the limit, reads an extension as giflib does, and
    a file of too many blocks is refused unread."""
    frames = [Image.fromarray(RNG.integers(0, 256, (21, 33, 3), np.uint8))
              for _ in range(3)]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:])
    data = buffer.getvalue()
    assert int(image_headers.declared_pixels(tf.constant(data))) == 693
    assert tf.io.decode_gif(data).shape == (3, 21, 33, 3)
    assert pp.decode_image(tf.constant(data)).shape == (21, 33, 3)
    assert int(image_headers.declared_pixels(
        tf.constant(data[:len(data) // 2]))) == 693

    def declared(gif):
        return int(image_headers.declared_pixels(tf.constant(gif)))

    # A tall frame and a wide one: the first returned at 64 x 64.
    assert declared(_gif([(1, 64), (64, 1)], screen=(1, 1))) == 64 * 64
    # A large screen with small frames: the screen is not decoded.
    assert declared(_gif([(33, 21)] * 9, screen=(4000, 4000))) == 693
    # A long animation: a sixteenth of its frames' pixels.
    assert declared(_gif([(100, 100)] * 64)) == 4 * 100 * 100
    # Bytes after the trailer are not read.
    assert declared(_gif([(33, 21)]) + bytes(1 << 20)) == 693
    # An extension whose first length is zero: giflib reads on to the
    # next zero, and so the frame after it is read.
    one = _gif([(33, 21)])
    at = one.index(b"\x2c\0\0\0\0")
    hidden = one[:at] + b"\x21\xfe\0\x05abcde\0" + one[at:]
    assert tf.io.decode_gif(hidden).shape == (1, 21, 33, 3)
    assert declared(hidden) == 693
    # Past the limit the walk stops: 2**14 frames of 2**12 x 2**12.
    many = declared(_gif([(4096, 4096)] * 2**14))
    assert image_headers.MAX_PIXELS < many <= (
        image_headers.MAX_PIXELS + 4096 * 4096 // 16)
    # More blocks than are walked: 2**15 one-byte comments.
    comments = one[:at] + b"\x21\xfe\x01x\0" * 2**15 + one[at:]
    assert tf.io.decode_gif(comments).shape == (1, 21, 33, 3)
    assert declared(comments) == image_headers.UNCHECKED
    for gif, why in ((_gif([(4096, 4096)] * 129), "animated GIF"),
                     (comments, "GIF of more than 16,384 blocks")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=why):
            pp.decode_image(tf.constant(gif))


@covers("bad_class_names_file")
@pytest.mark.slow
def test_a_bad_class_names_file_is_one_line_before_the_model_loads(
        tmp_path):
    """keras-vit-predict and keras-vit-export given a --class_names_file
    that does not exist, is a folder, is not UTF-8, is empty or has a
    blank line between names: one line naming the file, no traceback;
    read before the model (a model that does not exist is not what is
    reported)."""
    from tests import console

    image = tmp_path / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(image)
    (tmp_path / "latin1.txt").write_bytes("caf\xe9\n".encode("latin-1"))
    (tmp_path / "empty.txt").write_text("\n \n")
    (tmp_path / "blank.txt").write_text("cat\n\ndog\n")
    (tmp_path / "folder").mkdir()
    missing_model = str(tmp_path / "no_model.keras")
    said = []
    for name, expected in (
            ("nofile.txt", "does not exist."),
            ("folder", "cannot be read ("),
            ("latin1.txt", "is not UTF-8 text"),
            ("empty.txt", "holds no class name"),
            ("blank.txt", "line 2 is blank")):
        path = tmp_path / name
        for command, args in (
                ("predict", [str(image)]),
                ("export", [f"--export_dir={tmp_path / 'exports'}"])):
            result = console.run(command, [
                f"--model={missing_model}",
                f"--class_names_file={path}"] + args)
            line = _error_line(result, command)
            assert f"--class_names_file={path} {expected}" in line, line
            said.append(line)
    check_says("bad_class_names_file", "\n".join(said))
    assert not (tmp_path / "exports").exists()


@covers("disk_full_at_checkpoint")
def test_a_full_disk_at_a_checkpoint_is_one_line_naming_the_file(
        tmp_path, monkeypatch, capsys):
    """TensorFlow raises ResourceExhaustedError, its out-of-memory error,
    for a checkpoint write that fills the disk: keras-vit-train says the
    disk is full, naming the file TensorFlow names, and exits 1; ckpt-2
    stays the latest."""
    workdir = tmp_path / "run"
    part = (f"{workdir}/checkpoints/ckpt-4_temp/part-00000-of-00001"
            ".data-00000-of-00001.tempstate1")
    save = tf.train.CheckpointManager.save

    def full_disk(manager, checkpoint_number=None, **kwargs):
        if checkpoint_number == 4:  # a shard part written, as TF does
            os.makedirs(os.path.dirname(part))
            with open(part, "wb") as f:
                f.write(b"\0" * 1000)
            raise tf.errors.ResourceExhaustedError(None, None, (
                "{{function_node __wrapped__SaveV2_dtypes_5_device_/job:"
                "localhost/replica:0/task:0/device:CPU:0}} "
                f"{part}; No space left on device [Op:SaveV2]"))
        return save(manager, checkpoint_number=checkpoint_number, **kwargs)

    monkeypatch.setattr(tf.train.CheckpointManager, "save", full_disk)
    code = train_command.main([
        "keras-vit-train", *console.TINY_DIGITS, f"--workdir={workdir}",
        "--config.trainer.total_steps=4", "--config.trainer.steps_per_loop=2",
        "--config.checkpoints.every_steps=2",
        "--config.evals.test.every_steps=0"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line == (
        f"keras-vit-train: error: The disk is full writing {part}: free "
        "space or use a --workdir on a larger disk; the last complete "
        "checkpoint is kept.")
    check_says("disk_full_at_checkpoint", line)
    latest = tf.train.latest_checkpoint(str(workdir / "checkpoints"))
    assert latest.endswith("ckpt-2")
    # The failed save's shards do not keep the disk full.
    assert not os.path.exists(os.path.dirname(part))


@covers("evaluation_out_of_memory")
def test_an_evaluation_out_of_memory_saves_its_step_and_names_the_batch(
        tmp_path, monkeypatch, capsys):
    """A periodic evaluation out of memory at step 3 (checkpoints every 4
    steps): keras-vit-train saves step 3, then says which batch to lower
    in one line, exit 1; the same command with it evaluates step 3 first
    and trains on from there."""
    workdir = tmp_path / "run"
    evaluate = trainer_module.Trainer.evaluate

    def out_of_memory(self, *args, **kwargs):
        if self.step == 3:
            raise tf.errors.ResourceExhaustedError(None, None, (
                "OOM when allocating tensor with shape[512,3,17,17] and "
                "type float on /job:localhost/replica:0/task:0/device:GPU:0 "
                "by allocator GPU_0_bfc\n[[{{node softmax}}]]"))
        return evaluate(self, *args, **kwargs)

    args = ["keras-vit-train", *console.TINY_DIGITS, f"--workdir={workdir}",
            "--config.trainer.total_steps=4",
            "--config.trainer.steps_per_loop=1",
            "--config.checkpoints.every_steps=4",
            "--config.evals.test.every_steps=3"]
    monkeypatch.setattr(trainer_module.Trainer, "evaluate", out_of_memory)
    assert train_command.main(args) == 1
    err = capsys.readouterr().err
    line = err.strip().splitlines()[-1]
    assert "Traceback" not in err and line == (
        "keras-vit-train: error: Out of memory in the 'test' evaluation on "
        "test at step 3 (OOM when allocating tensor with "
        "shape[512,3,17,17]): lower --config.evals.test.batch_size (unset: "
        "the training micro-batch now); the checkpoint of step 3 is saved; "
        "the same command with it evaluates step 3 first and trains on."
    ), err[-3000:]
    check_says("evaluation_out_of_memory", line)
    assert tf.train.latest_checkpoint(
        str(workdir / "checkpoints")).endswith("ckpt-3")
    # The steps it holds are logged (history.csv's train rows).
    assert sum(r["steps"] for r in history.read_history(str(workdir))
               if r["split"] == "train") == 3

    monkeypatch.setattr(trainer_module.Trainer, "evaluate", evaluate)
    assert train_command.main(
        args + ["--config.evals.test.batch_size=16"]) == 0
    rows = history.read_history(str(workdir))
    assert [r["step"] for r in rows if r["split"] == "test"] == [3, 4]
    assert json.loads((workdir / "metrics.json").read_text())[
        "steps_this_run"] == 1


@covers("flat_folder_val_never_read")
def test_a_flat_folder_whose_held_out_share_no_split_reads_is_refused(
        tmp_path, caplog):
    """keras-vit-train on class folders alone with splits that slice train
    (the ImageNet-21k recipes' layout): refused in one line, since 20% of
    each class would be held out as val and never read; a run begun
    before is warned; with the class folders under train/ the same splits
    read every image."""
    root = tmp_path / "photos"
    write_photo_folder(root, per_class=5)
    result = console.run("train", [
        *console.TINY_DIGITS, "--config.input.dataset=folder",
        f"--config.input.data_dir={root}", f"--workdir={tmp_path}/run",
        "--config.input.train_split=train[2:]",
        "--config.evals.test.split=train[:2]"])
    line = _error_line(result, "train")
    check_says("flat_folder_val_never_read", line)
    assert ("never reads (--config.input.train_split='train[2:]', "
            "--config.evals.test.split='train[:2]'): move the class "
            f"folders into {root}/train/") in line, line
    assert "Compiled" not in result.stderr
    inp = mlc.ConfigDict(dict(dataset="folder", data_dir=str(root),
                              vtab_task=None))
    splits = [("input.train_split", "train[2:]")]
    with pytest.raises(UsageError, match="never reads"):
        folder_classes.check_held_out_read(inp, splits)
    # A run begun before: warned (its images would change slices).
    with caplog.at_level("WARNING", logger="absl"):
        folder_classes.check_held_out_read(inp, splits, resumed=True)
    assert "never reads (config.input.train_split='train[2:]'): a new " \
        "run would be refused." in caplog.text
    folder_classes.check_held_out_read(  # val read: nothing left out
        inp, splits + [("evals.test.split", "val")])
    os.makedirs(root / "train")
    for name in ("china", "flower"):
        os.rename(root / name, root / "train" / name)
    folders.folder_index.cache_clear()  # (listed once per process)
    folder_classes.check_held_out_read(inp, splits)


def test_a_full_disk_in_python_is_one_line_and_another_oserror_is_not(
        capsys):
    """An OSError ENOSPC (a file Python writes) is the same line, naming
    its file; any other OSError keeps its traceback."""
    def main(error):
        def raises(values, args):
            raise error
        return runner.run("test", lambda values, argv: None, raises,
                          ["keras-vit-test"])

    assert main(OSError(errno.ENOSPC, "No space left on device",
                        "/data/out/x.json")) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-vit-test: error: The disk is full writing /data/out/x.json: "
        "free space or write to a larger disk."]
    with pytest.raises(OSError, match="Input/output error"):
        main(OSError(errno.EIO, "Input/output error"))


@covers("output_not_writable")
def test_an_output_this_user_may_not_write_is_one_line(tmp_path):
    """keras-vit-export, -convert and -evaluate given a place they may not
    write (/proc takes no new folder, /sys no new file, root included):
    one line naming the path and the flag, before any work, not
    TensorFlow's traceback nor the temporary file's name."""
    from tests import console

    model = str(tmp_path / "m.keras")
    tiny_vit().save(model)
    runs = {mode: console.run("evaluate", [
        f"--mode={mode}", f"--model={model}", *args,
        f"--output_dir={where}/keras_vit_results"])
        for mode, where, args in (
            ("eval", "/proc", ["--dataset=digits"]),
            ("fewshot", "/sys", ["--config=fewshot:digits",
                                 "--image_size=16"]))}
    for mode, result in runs.items():
        assert result.stdout == "", (mode, result.stdout)  # no results
        assert "Evaluating" not in result.stderr, result.stderr
    lines = {f"evaluate {mode}": _error_line(result, "evaluate")
             for mode, result in runs.items()}
    lines.update({
        "export /proc": _error_line(console.run("export", [
            f"--model={model}", "--export_dir=/proc/keras_vit_exports"]),
            "export"),
        "export litert /sys": _error_line(console.run("export", [
            f"--model={model}", "--export_dir=/sys/keras_vit_exports",
            "--format=litert"]), "export"),
        "convert /sys": _error_line(console.run("convert", [
            f"--model={model}", "--output=/sys/keras_vit.keras"]),
            "convert"),
    })
    for where, line in lines.items():
        check_says("output_not_writable", line)
        assert "--export_dir" in line or "--output" in line, (where, line)
        assert ".tmp-" not in line, (where, line)
    assert "/proc/keras_vit_exports" in lines["export /proc"]
    assert lines["evaluate eval"] == (
        "keras-vit-evaluate: error: Cannot write /proc/keras_vit_results "
        "(no such file or directory in /proc): give --output_dir a folder "
        "this user may write.")
    assert lines["convert /sys"].startswith(
        "keras-vit-convert: error: Cannot write /sys/keras_vit.keras (")
    assert lines["convert /sys"].endswith(
        "in /sys): give --output a path this user may write.")


@covers("run_folder_not_writable")
def test_a_workdir_written_in_place_of_output_dir_is_checked_first(
        tmp_path, monkeypatch, capsys):
    """keras-vit-evaluate --mode=eval --workdir=RUN and keras-vit-analysis
    --curves=RUN write into the run's folder without --output_dir: one
    that cannot be written (a read-only mount, another user's run) is
    named with the flag to give before the model is read, not after the
    evaluation, in a traceback."""
    from keras_vit.commands import analysis as analysis_command

    result = console.run("evaluate", ["--mode=eval", "--workdir=/sys"])
    line = _error_line(result, "evaluate")
    assert line.startswith(
        "keras-vit-evaluate: error: Cannot write --workdir=/sys (")
    assert line.endswith("in /sys): its results go there without "
                         "--output_dir: give --output_dir a folder this "
                         "user may write."), line
    check_says("run_folder_not_writable", line)
    assert result.stdout == "" and "Traceback" not in result.stderr
    # A real run on a read-only mount (which root, too, may not write).
    workdir = str(tmp_path / "run")
    os.makedirs(workdir)
    tiny.write_run(tiny.digits_config(), workdir, [str(i) for i in range(10)])
    rows = history.HistoryWriter(workdir)
    for step, loss in ((1, 2.3), (2, 2.1)):
        rows.add(step, "train", loss=loss, steps=1)
    real_mkdtemp = tempfile.mkdtemp

    def read_only(*args, dir=None, **kwargs):
        if dir is not None and os.path.abspath(dir) == workdir:
            raise OSError(errno.EROFS, "Read-only file system", dir)
        return real_mkdtemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkdtemp", read_only)
    before = sorted(os.listdir(workdir))
    for main, args in (
            (evaluate_command.main, ["--mode=eval", f"--workdir={workdir}"]),
            (analysis_command.main, [f"--curves={workdir}"])):
        assert main(["keras-vit", *args]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert err[-1].endswith(
            f"error: Cannot write {args[-1]} (read-only file system in "
            f"{workdir}): its results go there without --output_dir: give "
            "--output_dir a folder this user may write."), err
    # A --workdir still to be made (a probe's results), in such a folder.
    assert evaluate_command.main([
        "keras-vit-evaluate", "--mode=fewshot", "--config=fewshot:digits",
        f"--model={workdir}", f"--workdir={workdir}/probe/new"]) == 1
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(
        f"error: Cannot write --workdir={workdir}/probe/new (read-only file "
        f"system in {workdir}): its results go there without --output_dir: "
        "give --output_dir a folder this user may write.")
    assert sorted(os.listdir(workdir)) == before  # nothing computed or left
    # With --output_dir elsewhere, the run is read where it lies.
    out = tmp_path / "curves"
    assert analysis_command.main(["keras-vit-analysis", f"--curves={workdir}",
                                  f"--output_dir={out}"]) == 0
    assert os.listdir(out) == ["training_curves.png"]


def test_a_permission_error_names_the_flag_only_for_what_it_writes(
        capsys):
    """A path this user may not read is not blamed on an output flag
    beside it; a denied error without a path (a gs:// 403) keeps its own
    message, in one line."""
    values = flags.FlagValues()
    flags.DEFINE_string("output", "/a/m.keras", "", flag_values=values)
    flags.DEFINE_string("workdir", "/runs/a", "", flag_values=values)
    values.mark_as_parsed()
    denied = PermissionError(errno.EACCES, "Permission denied", "/a/m.npz")
    assert runner.not_permitted(denied, values) == (
        "/a/m.npz: permission denied; check its permissions.")
    assert runner.not_permitted(PermissionError(
        errno.EACCES, "Permission denied", "/a/m.tmp-0123456789ab.keras"),
        values).endswith("give --output a folder this user may write.")
    assert runner.not_permitted(PermissionError(
        errno.EACCES, "Permission denied", "/runs/data"), values) == (
        "/runs/data: permission denied; check its permissions.")
    http = tf.errors.PermissionDeniedError(
        None, None, "Error executing an HTTP request: HTTP response code "
        "403 with body 'forbidden'")
    assert runner.not_permitted(http, values) is None

    def raises(values, args):
        raise http

    assert runner.run("test", lambda values, argv: None, raises,
                      ["keras-vit-test"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-vit-test: error: Error executing an HTTP request: HTTP "
        "response code 403 with body 'forbidden'"]


def test_a_path_the_file_system_refuses_is_one_line(tmp_path, capsys,
                                                     monkeypatch):
    """A folder where a file goes, written with Python or TensorFlow's
    file functions (as a gs:// bucket out of reach is): one line naming
    the path; another TensorFlow error keeps its traceback. A gs:// output
    is looked up before the work, so that one out of reach fails first."""
    folder = tmp_path / "analysis.json"
    folder.mkdir()

    def gfile_write(values, args):
        with tf.io.gfile.GFile(str(folder), "w") as f:
            f.write("{}")

    def python_write(values, args):
        with open(folder, "w") as f:
            f.write("{}")

    def other(values, args):
        raise tf.errors.InvalidArgumentError(None, None, "bad shape")

    def define(values, argv):
        flags.DEFINE_string("output_dir", str(tmp_path), "",
                            flag_values=values)

    for main, says in (
            (gfile_write, f"{folder}; Is a directory: check the path and "
             "this machine's access to it."),
            (python_write, f"{folder}: is a directory; check the path (a "
             "folder where a file goes, or the other way?).")):
        assert runner.run("test", define, main, ["keras-vit-test"]) == 1
        assert capsys.readouterr().err.strip().splitlines() == [
            f"keras-vit-test: error: {says}"]
    with pytest.raises(tf.errors.InvalidArgumentError):
        runner.run("test", define, other, ["keras-vit-test"])
    looked_up = []
    monkeypatch.setattr(atomic, "exists", looked_up.append)
    values = flags.FlagValues()
    flags.DEFINE_string("output_dir", "gs://bucket/a", "", flag_values=values)
    values.mark_as_parsed()
    cli.check_output_path(values, "output_dir")
    assert looked_up == ["gs://bucket/a"]

    def unreachable(path):
        raise tf.errors.UnavailableError(
            None, None, "Error executing an HTTP request: libcurl code 6\n"
            "when reading metadata of gs://bucket/a")

    monkeypatch.setattr(atomic, "exists", unreachable)
    with pytest.raises(UsageError) as info:
        cli.check_output_path(values, "output_dir")
    assert str(info.value) == (
        "--output_dir=gs://bucket/a cannot be reached (Error executing an "
        "HTTP request: libcurl code 6): check the path and this machine's "
        "access to it.")
    # Met later (a model read from a bucket), raised in TensorFlow's file
    # code: the path its message names on a later line, no output flag.
    scope = {}
    exec(compile("def read(error):\n    raise error\n",  # noqa: S102
                 os.path.join("tf", "lib", "io", "file_io.py"), "exec"),
         scope)
    with pytest.raises(tf.errors.UnavailableError) as info:
        scope["read"](tf.errors.UnavailableError(
            None, None, "Error executing an HTTP request: libcurl code 6\n"
            "when reading metadata of gs://bucket/m.npz"))
    assert exhausted.refused_path(info.value) == (
        "Error executing an HTTP request: libcurl code 6 (gs://bucket/m.npz)"
        ": check the path and this machine's access to it.")


def test_a_full_disk_names_the_folder_the_command_writes():
    """Without a file in the error, the line names the folder written:
    --output_dir where the command has one and it is given (evaluate,
    analysis), else --workdir."""
    error = OSError(errno.ENOSPC, "No space left on device")
    values = flags.FlagValues()
    flags.DEFINE_string("workdir", "/runs/a", "", flag_values=values)
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    values.mark_as_parsed()
    assert exhausted.disk_full(error, values) == (
        "The disk is full writing /runs/a: free space or use a --workdir "
        "on a larger disk.")
    values.output_dir = "/results/a"
    assert exhausted.disk_full(error, values) == (
        "The disk is full writing /results/a: free space or use an "
        "--output_dir on a larger disk.")


def test_a_full_disk_before_any_checkpoint_says_none_is_kept(tmp_path):
    """keras-vit-train (a --workdir, no --output_dir) keeps its last
    complete checkpoint, and says so only where one is there: a disk
    filled before the first says the run starts again from step 0."""
    error = OSError(errno.ENOSPC, "No space left on device")
    values = flags.FlagValues()
    workdir = tmp_path / "run [1]"  # a glob's brackets in the name
    flags.DEFINE_string("workdir", str(workdir), "", flag_values=values)
    values.mark_as_parsed()
    assert exhausted.disk_full(error, values) == (
        f"The disk is full writing {workdir}: free space or use a "
        "--workdir on a larger disk; no checkpoint was complete yet, so "
        "the run starts again from step 0.")
    (workdir / "checkpoints").mkdir(parents=True)
    (workdir / "checkpoints" / "ckpt-2.index").write_bytes(b"")
    assert exhausted.disk_full(error, values) == (
        f"The disk is full writing {workdir}: free space or use a "
        "--workdir on a larger disk; the last complete checkpoint is "
        "kept.")


def test_a_full_disk_in_an_evaluation_is_no_memory_to_lower():
    """TensorFlow raises a full disk as a ResourceExhaustedError too: an
    evaluation's passes it on unchanged (the command's line names the
    disk), without saving; an allocation that failed saves and names the
    evaluation's batch."""
    saved = []
    full = tf.errors.ResourceExhaustedError(
        None, None, "/runs/a/ckpt-3.data; No space left on device")
    with pytest.raises(tf.errors.ResourceExhaustedError) as info:
        with reporting.evaluation_memory("test", mlc.ConfigDict(dict(
                batch_size=8)), "test", 3, False, lambda: saved.append(3)):
            raise full
    assert info.value is full and not saved
    assert exhausted.exhausted_line(full) == (
        "The disk is full writing /runs/a/ckpt-3.data: free space or write "
        "to a larger disk.")
    with pytest.raises(train_lib.TrainingError, match=r"lower config\.evals"
                       r"\.test\.batch_size \(8 now\)"):
        with reporting.evaluation_memory("test", mlc.ConfigDict(dict(
                batch_size=8)), "test", 3, False, lambda: saved.append(3)):
            raise tf.errors.ResourceExhaustedError(None, None, "OOM")
    assert saved == [3]


def test_image_features_keras_vit_reads():
    """uint8 images of 1 to 4 channels, as Image or plain tensor, are
    read; float, 16-bit, multispectral and video features are not."""
    import tensorflow_datasets as tfds

    feats = tfds.features
    readable = [feats.Image(shape=(None, None, 3)),
                feats.Image(shape=(28, 28, 1)),
                feats.Image(shape=(None, None, 4)),
                feats.Tensor(shape=(32, 32, 3), dtype=np.uint8),
                feats.Tensor(shape=(32, 32), dtype=np.uint8)]
    unreadable = [feats.Image(shape=(None, None, 3), dtype=np.uint16),
                  feats.Image(shape=(None, None, 1), dtype=np.float32),
                  feats.Tensor(shape=(64, 64, 13), dtype=np.float32),
                  feats.Tensor(shape=(64, 64, 13), dtype=np.uint8),
                  feats.Video(shape=(None, 8, 8, 3)),
                  feats.ClassLabel(num_classes=3)]
    labels = feats.ClassLabel(num_classes=3)
    assert data_features._class_label(labels)
    assert not data_features._class_label(feats.Sequence(labels))
    assert not data_features._class_label(feats.Text())
    assert all(data_features._readable_image(f) for f in readable)
    assert not any(data_features._readable_image(f) for f in unreadable)
    # A data set holding both: the one to set is named.
    builder = mlc.ConfigDict({"info": {"features": None}}, type_safe=False)
    builder.info.features = {"sentinel2": unreadable[2],
                             "rgb": readable[0], "label": unreadable[-1]}
    inp = mlc.ConfigDict({"dataset": "x", "image_key": "sentinel2"})
    with pytest.raises(UsageError, match=r"Set config.input.image_key to "
                       r"'rgb'\.$"):
        data_features._check_image_feature(inp, builder)


@covers("tfds_feature_not_an_image")
def test_a_tfds_feature_that_is_no_rgb_image_is_one_line(tmp_path, capsys):
    """keras-vit-evaluate on eurosat/all's 13-band float `sentinel2`
    feature: one line naming the feature, its type and the fix, before
    any example is read (it was a traceback from inside the input
    pipeline: "Cannot convert an image with 13 channels to RGB"); MNIST's
    grayscale images are read."""
    import tensorflow_datasets as tfds

    npz = str(tmp_path / "m.npz")
    checkpoint.save_npz(keras_vit.create_model(
        None, num_classes=10, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), npz)

    def run(dataset, image_key, *more):
        return evaluate_command.main([
            "keras-vit-evaluate", "--mode=eval", f"--model={npz}",
            "--config=digits", f"--config.input.dataset={dataset}",
            f"--config.input.image_key={image_key}", "--split=train[:4]",
            "--config.input.batch_size=4",
            "--config.evals.test.batch_size=4",
            "--config.model.image_size=16", "--config.model.num_classes=10",
            f"--config.input.data_dir={tmp_path / 'tfds'}", *more])

    with tfds.testing.mock_data(num_examples=4,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        assert run("eurosat/all", "sentinel2") == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        (line,) = [x for x in err.splitlines() if "error:" in x]
        check_says("tfds_feature_not_an_image", line)
        assert run("mnist", "image") == 0
        # A label that is no class label (DTD's file name, a Text).
        capsys.readouterr()
        assert run("dtd", "image", "--config.input.label_key=file_name") == 1
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert ("--config.input.label_key='file_name' of dtd is a Text "
                "feature, not a class label: keras_vit reads one class per "
                "image (a TFDS ClassLabel). Set --config.input.label_key to "
                "'label'.") in err
