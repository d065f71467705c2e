"""Your own images in one command: the `folder` recipe
(keras_vit/configs/folder.py) on a folder of real photos (crops of
scikit-learn's china.jpg and flower.jpg, tests/photo_folder.py).

- the image folder's layouts: class folders alone (a fixed fifth of each
  class held out as "val") or with their own split folders, and the split
  alternatives ("val|test") the recipe names;
- what the run settles from its data (keras_vit/training/data_fit.py):
  the steps of `trainer.epochs` passes, the warm-up and periods inside
  them; the resolution of the model it starts from
  (`config.model.image_size` 0);
- the journey, typed as a user types it: keras-vit-train --config=folder:
  PHOTOS --model=Ti/16 (a tiny one), then keras-vit-evaluate on the
  workdir, keras-vit-export and keras-vit-predict on a photo, each a
  console script in a process of its own.
"""

import json
import os
import re
import shutil
import subprocess
from unittest import mock

import keras
import pytest

import keras_vit
from keras_vit import config as config_lib
from keras_vit.configs import digits as digits_recipe
from keras_vit.configs import folder
from keras_vit.data import folder_classes, folders, image_files
from keras_vit.errors import UsageError
from keras_vit.storage import history
from keras_vit.training import data_fit, model_init
from tests import console
from tests.console import script as _script
from tests.photo_folder import write_photo_folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tiny model the journey trains: Ti/16 with its sizes overridden.
TINY = ["--config.model.hidden_size=32", "--config.model.num_layers=1",
        "--config.model.num_heads=2", "--config.model.mlp_dim=64",
        "--config.model.image_size=32", "--config.trainer.jit_compile=False",
        "--config.trainer.epochs=3", "--config.input.batch_size=8"]


def _index(root):
    folders.folder_index.cache_clear()
    return folders.folder_index(str(root))


def test_class_folders_alone_hold_out_a_fifth_of_each_class(tmp_path):
    names = write_photo_folder(tmp_path, per_class=10)
    index, found = _index(tmp_path)
    assert found == names == ["china", "flower"]
    assert {k: len(v[0]) for k, v in index.items()} == {"train": 16,
                                                        "val": 4}
    assert sorted(index["val"][1].tolist()) == [0, 0, 1, 1]
    assert not set(index["train"][0]) & set(index["val"][0])
    paths, labels = folders.folder_split(str(tmp_path), "train+val")
    assert paths == index["train"][0] + index["val"][0]
    assert labels.tolist() == (index["train"][1].tolist()
                               + index["val"][1].tolist())
    assert folders.resolve_split(str(tmp_path), "train + val|test") == (
        "train+val")
    # The same images held out in every process.
    again, _ = _index(tmp_path)
    assert again["val"][0] == index["val"][0]
    # Photos added to one class, or one removed: no training image of the
    # run so far is held out now, and the other class's split stays.
    val_before, train_before = set(index["val"][0]), set(index["train"][0])
    china = sorted((tmp_path / "china").iterdir())
    for i in range(3):
        (tmp_path / "china" / f"IMG_{i:04d}.jpg").write_bytes(
            china[0].read_bytes())
    grown, _ = _index(tmp_path)
    assert not set(grown["val"][0]) & train_before
    assert {p for p in grown["val"][0] if "/flower/" in p} == {
        p for p in val_before if "/flower/" in p}
    (tmp_path / "china" / "IMG_0000.jpg").unlink()
    china[1].unlink()
    shrunk, _ = _index(tmp_path)
    assert len(set(shrunk["val"][0]) & train_before) <= 1  # the edge one
    assert {p for p in shrunk["val"][0] if "/flower/" in p} == {
        p for p in val_before if "/flower/" in p}
    root = str(tmp_path)
    assert folders.resolve_split(root, "val|test") == "val"
    assert folders.resolve_split(root, "test|val[:50%]") == "val[:50%]"
    assert len(folders.folder_split(root, "test|val")[0]) == 4
    with pytest.raises(UsageError, match=r"has none of the splits test, "
                       r"valid; it has \['train', 'val'\]"):
        folders.resolve_split(root, "test|valid")


def test_classes_of_one_image_each_are_told_to_add_images(tmp_path):
    """Class folders of one image each hold none out as val: training on
    them stops in one line that says so (not only that the folder has
    no val split), before any workdir is made."""
    for cls in ("a", "b"):
        (tmp_path / "photos" / cls).mkdir(parents=True)
        (tmp_path / "photos" / cls / "0.png").write_bytes(b"")
    result = console.run("train", [
        f"--config=folder:{tmp_path / 'photos'}",
        f"--workdir={tmp_path / 'run'}"])
    assert result.returncode == 1, result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "No class has 2 images, of which val holds a fifth: add some." \
        in line and "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()


def test_a_slice_of_a_split_keeps_its_images_as_files_come(tmp_path):
    """train[:90%] trained on and train[90%:] scored: photos added later
    (one, or ten) move at most the images at the edge between the two,
    so the scored slice holds no image the run trained on (its order was
    a permutation of the file count: one more file reshuffled all)."""
    for cls in ("a", "b"):
        for i in range(25):
            path = tmp_path / "train" / cls / f"{i:03d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"")  # listed, not decoded
    folders.folder_index.cache_clear()
    trained = set(folders.folder_split(str(tmp_path), "train[:90%]")[0])
    assert len(trained) == 45
    for added in (1, 10):
        for i in range(added):
            (tmp_path / "train" / "a" / f"new{added}_{i}.png").write_bytes(
                b"")
        folders.folder_index.cache_clear()
        scored = folders.folder_split(str(tmp_path), "train[90%:]")
        assert len(set(scored[0]) & trained) <= 1, added
        assert set(scored[1].tolist()) <= {0, 1}
    folders.folder_index.cache_clear()


def test_a_folder_with_split_folders_uses_its_own(tmp_path):
    for split, count in (("train", 6), ("validation", 2), ("test", 3)):
        write_photo_folder(tmp_path, per_class=count, split=split)
    index, _ = _index(tmp_path)
    assert {k: len(v[0]) for k, v in index.items()} == {
        "train": 12, "validation": 4, "test": 6}
    config = folder.get_config(str(tmp_path))
    root = config.input.data_dir
    assert folders.resolve_split(root, config.evals.test.split) == "test"
    assert folders.resolve_split(
        root, config.evals.test.val_split) == "validation"
    # A class with images in test/ only: untrained unless the training
    # split joins test (the check reads every part of a join).
    shutil.copytree(tmp_path / "test" / "china", tmp_path / "test" / "zebra")
    _index(tmp_path)
    with pytest.raises(UsageError, match="class zebra has images in split "
                       "test but none in split train,"):
        folder_classes.check_training_classes(config.input, True)
    for joined in ("train+test", "train[:50%]+test"):
        check = config_lib.replace(config, input={"train_split": joined})
        folder_classes.check_training_classes(check.input, True)
    # Nor does a folder run that reads no shuffle buffer refuse to resume
    # with another (a cached one does: its order is the buffer's).
    old = config_lib.replace(config, input={"shuffle_buffer": 5})
    with mock.patch.object(model_init, "holds_iterator", lambda c: True):
        model_init._check_resumed_input(old, config, "run", "ckpt")
        cached = config_lib.replace(config, input={"cache_train": True})
        with pytest.raises(model_init.TrainingError,
                           match="config.input.shuffle_buffer"):
            model_init._check_resumed_input(
                config_lib.replace(old, input={"cache_train": True}),
                cached, "run", "ckpt")


def test_images_the_folder_does_not_read_are_named(tmp_path, caplog):
    """Images in a folder inside a class folder, and images beside the
    class folders: the log names them as not read (the split layout's
    class folders are no such folders)."""
    write_photo_folder(tmp_path / "flat", per_class=3)
    china = sorted((tmp_path / "flat" / "china").iterdir())
    (tmp_path / "flat" / "china" / "nested").mkdir()
    shutil.copy(china[0], tmp_path / "flat" / "china" / "nested" / "x.jpg")
    shutil.copy(china[0], tmp_path / "flat" / "IMG_1.jpg")
    caplog.set_level("WARNING", logger="absl")
    index, _ = _index(tmp_path / "flat")
    assert sum(len(v[0]) for v in index.values()) == 6
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "1 folder(s) inside class folders (china/nested/) are not " \
        "read" in log
    assert "the 1 image(s) directly in it (IMG_1.jpg) are in no class " \
        "folder and are not read" in log
    caplog.clear()
    for split in ("train", "val"):
        write_photo_folder(tmp_path / "split", per_class=2, split=split)
    _index(tmp_path / "split")
    assert "not read" not in "\n".join(r.getMessage()
                                        for r in caplog.records)


def test_a_class_folder_or_a_file_given_as_the_folder_says_so(tmp_path):
    write_photo_folder(tmp_path / "photos", per_class=2)
    china = tmp_path / "photos" / "china"
    with pytest.raises(UsageError, match=f"{china} holds images directly, "
                       "as one class folder does; give the folder above"):
        _index(china)
    with pytest.raises(UsageError, match="is a file, not a folder"):
        _index(sorted(china.iterdir())[0])
    with pytest.raises(UsageError, match=re.escape(
            "does not exist: set config.input.data_dir to the folder "
            "holding <class>/ or <split>/<class>/.")):
        _index(tmp_path / "nosuch")
    os.rename(tmp_path / "photos" / "flower", tmp_path / "photos" / " ")
    with pytest.raises(UsageError, match="has a blank name, which no labels "
                       "file can hold on one line: rename it"):
        _index(tmp_path / "photos")
    # A line end in a name (a copy from a Windows share): labels.txt would
    # read back another class, or one more, and the run never resume.
    before = " "
    for name in ("flower\r", "flo\nwer"):
        os.rename(tmp_path / "photos" / before, tmp_path / "photos" / name)
        before = name
        with pytest.raises(UsageError, match="has a name with a line end, "
                           "which no labels file can hold on one line"):
            _index(tmp_path / "photos")
    os.rename(tmp_path / "photos" / before, tmp_path / "photos" / "flower")
    # Class folders that hold dated folders (china/2023/*.jpg) read as
    # split folders: the error says so, not only that splits are missing.
    for name in ("china", "flower"):
        os.makedirs(tmp_path / "dated" / name)
        shutil.copytree(tmp_path / "photos" / name,
                        tmp_path / "dated" / name / "2023")
    _index(tmp_path / "dated")
    with pytest.raises(UsageError, match=(
            r"none of the splits val, test; it has \['china', 'flower'\]. "
            r"Its top folders \(china/, flower/\) hold folders, not images, "
            r"so they are its splits \(if they are classes instead, put "
            "each class's images directly in its folder")):
        folders.resolve_split(str(tmp_path / "dated"), "val|test")


def test_split_folders_in_capitals_and_splits_of_other_names(tmp_path):
    """Train/, Val/ are the splits train and val (the paths as found); a
    folder whose splits have other names is one line naming the fields to
    set and the layouts read."""
    caps = tmp_path / "caps"
    for split, count in (("Train", 4), ("Val", 2)):
        write_photo_folder(caps, per_class=count, split=split)
    index, _ = _index(caps)
    assert {k: len(v[0]) for k, v in index.items()} == {"train": 8, "val": 4}
    assert all("/Train/" in p for p in index["train"][0])
    assert folders.resolve_split(str(caps), "test|val") == "val"
    write_photo_folder(caps, per_class=1, split="train")
    with pytest.raises(UsageError, match="has both Train/ and train/"):
        _index(caps)
    other = tmp_path / "kaggle"
    for split in ("training_set", "test_set"):
        write_photo_folder(other, per_class=2, split=split)
    _index(other)
    with pytest.raises(UsageError) as info:
        folders.resolve_split(str(other), "test|val")
    assert "it has ['test_set', 'training_set']. Its top folders (" \
        "test_set/, training_set/) hold folders, not images, so they are " \
        "its splits" in str(info.value)
    assert ". Name a split it has in the config (config.input.train_split" \
        in str(info.value)
    assert "<split>/<class>/ with split folders named train, val" in str(
        info.value)


def _fitted(config):
    return config_lib.replace(config, **data_fit.fit(
        config.input, config.trainer, config.schedule, config.log,
        config.checkpoints, config.evals))


def test_the_run_follows_the_data(tmp_path, caplog):
    """10 epochs of 20 images at batch 8: 25 steps (2.5 per epoch), a
    warm-up of 2 (a tenth), the periods one epoch rounded up (3 steps);
    the splits settled. The log says the epochs that whole steps make
    where they are not those asked for."""
    write_photo_folder(tmp_path, per_class=12)
    _index(tmp_path)
    caplog.set_level("INFO")
    config = _fitted(config_lib.replace(
        folder.get_config(f"data_dir={tmp_path}"), input={"batch_size": 8}))
    assert ("10 epochs of 20 training images at batch 8: 25 steps (2.5 per "
            "epoch), a warm-up of 2.") in caplog.text
    short = _fitted(config_lib.replace(
        folder.get_config(f"data_dir={tmp_path}"), input={"batch_size": 8},
        trainer={"epochs": 0.01}))
    assert short.trainer.total_steps == 1
    assert ("0.01 epochs of 20 training images at batch 8: 1 step (2.5 per "
            "epoch; whole steps make it 0.4 epochs), a warm-up of 0.") in (
        caplog.text)
    # A count kept per class out of range is named before any step is
    # counted from it (it counted -3 images).
    caplog.clear()
    with pytest.raises(UsageError, match=r"config.input.train_examples_per_"
                       r"class=-1 must be >= 0\.$"):
        _fitted(config_lib.replace(
            folder.get_config(f"data_dir={tmp_path}"),
            input={"train_examples_per_class": -1}))
    assert "training images" not in caplog.text
    # A batch larger than the split (counted in epochs or in steps) holds
    # images twice: said.
    assert "more than the" not in caplog.text
    for trainer in ({}, {"total_steps": 3}):
        caplog.clear()
        _fitted(config_lib.replace(
            folder.get_config(f"data_dir={tmp_path}"),
            input={"batch_size": 32}, trainer=trainer))
        assert ("config.input.batch_size=32 is more than the 20 training "
                "examples of train: each batch holds some of them twice or "
                "more. A batch of at most 20 holds each once.") in caplog.text
    assert config.trainer.total_steps == 25
    assert config.schedule.warmup_steps == 2
    assert (config.log.every_steps, config.checkpoints.every_steps,
            config.evals.test.every_steps) == (3, 3, 3)
    assert (config.input.train_split, config.evals.test.split,
            config.evals.test.val_split) == ("train", "val", "val")
    # Steps given: kept as they are; the config's warm-up, longer than
    # the run, held to a tenth of it, and a warm-up that fits kept.
    given = _fitted(config_lib.replace(folder.get_config(str(tmp_path)),
                                       trainer={"total_steps": 30}))
    assert given.trainer.total_steps == 30
    assert given.schedule.warmup_steps == 3
    assert given.log.every_steps == 1_000
    fits = _fitted(config_lib.replace(folder.get_config(str(tmp_path)),
                                      trainer={"total_steps": 30},
                                      schedule={"warmup_steps": 20}))
    assert fits.schedule.warmup_steps == 20
    # A config that does not count epochs keeps its warm-up: the limits
    # check names it.
    digits = config_lib.replace(digits_recipe.get_config(),
                                trainer={"total_steps": 7})
    assert digits.schedule.warmup_steps > 7
    assert _fitted(digits).schedule.warmup_steps == (
        digits.schedule.warmup_steps)
    with pytest.raises(UsageError, match="set one of them above 0"):
        _fitted(config_lib.replace(folder.get_config(str(tmp_path)),
                                   trainer={"epochs": 0.0}))
    with pytest.raises(UsageError, match=r"needs data_dir.*--config=folder:"
                       r"PATH"):
        _fitted(folder.get_config())


def test_an_epoch_counts_the_images_trained_on(tmp_path):
    """With skip_bad_images, the files left out are not counted in the
    run's length: 10 epochs of the 24 readable images of 28 at batch 8
    are 30 steps, not 35."""
    write_photo_folder(tmp_path, per_class=12, split="train")
    write_photo_folder(tmp_path, per_class=2, split="val")
    for i in range(4):
        (tmp_path / "train" / "china" / f"bad{i}.jpg").write_bytes(
            b"not an image")
    _index(tmp_path)

    def steps(**inp):
        return _fitted(config_lib.replace(
            folder.get_config(f"data_dir={tmp_path}"),
            input=dict(batch_size=8, **inp))).trainer.total_steps

    assert steps() == 35
    assert steps(skip_bad_images=True) == 30
    assert steps(skip_bad_images=True, train_examples_per_class=10) == 25


def test_the_resolution_follows_the_model_it_starts_from(tmp_path):
    model_config = folder.get_config().model
    init = config_lib.complete({}, "init")
    assert model_init.init_architecture(init, model_config) == {
        "image_size": 224}
    tiny = keras_vit.create_model(None, num_classes=3, image_size=48,
                                  patch_size=16, hidden_size=16, num_layers=1,
                                  num_heads=2, mlp_dim=16)
    path = str(tmp_path / "tiny.keras")
    tiny.save(path)
    keras.backend.clear_session()
    init = config_lib.complete({"model": path}, "init")
    fields = model_init.init_architecture(init, model_config)
    assert fields["image_size"] == 48 and fields["hidden_size"] == 16
    # Said by the user: kept.
    said = config_lib.replace(folder.get_config(), model={"image_size": 32})
    assert "image_size" not in model_init.init_architecture(init,
                                                            said.model)


# ------------------------------------------------------------- the journey


def _run(cwd, name, *args):
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
               KERAS_VIT_OFFLINE="1", HF_HUB_OFFLINE="1")
    result = subprocess.run(_script(name) + list(args), capture_output=True,
                            text=True, cwd=str(cwd), env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def test_a_test_folder_without_a_trained_class_is_named(tmp_path):
    """keras-vit-train on photos whose test/ lacks a class that train/
    has: the run trains, and says once (for the final and the periodic
    evaluation alike) that the test accuracy leaves that class out."""
    photos = tmp_path / "photos"
    write_photo_folder(photos, per_class=4, split="train")
    write_photo_folder(photos, per_class=2, split="test")
    shutil.rmtree(photos / "test" / "flower")
    result = _run(tmp_path, "train", f"--config=folder:{photos}",
                  "--model=Ti/16", "--workdir=run",
                  *(a for a in TINY if "epochs" not in a),
                  "--config.trainer.total_steps=2")
    lines = [line for line in result.stderr.splitlines()
             if "which has no images of class" in line]
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].endswith(
        f"Image folder {photos}: --config.evals.test.split='test' reads "
        "test/, which has no images of class flower that the model trains "
        "on: its accuracy leaves it out."), lines


def test_a_class_of_one_image_in_class_folders_alone_is_named(tmp_path,
                                                               caplog):
    """Class folders alone, one class of a single image: it trains on
    that image and the held-out val has none of it, said as for a test/
    folder without a class."""
    write_photo_folder(tmp_path, per_class=6)
    (tmp_path / "solo").mkdir()
    shutil.copy(sorted((tmp_path / "china").iterdir())[0],
                tmp_path / "solo" / "only.jpg")
    _index(tmp_path)
    caplog.set_level("WARNING")
    config = folder.get_config(f"data_dir={tmp_path}")
    folder_classes.warn_unevaluated_classes(
        config.input, [("input.train_split", "train"),
                       ("evals.test.split", "val")], labelled=True)
    assert (f"Image folder {tmp_path}: config.evals.test.split='val' reads "
            "the held-out val, which has no images of class solo that the "
            "model trains on: its accuracy leaves it out.") in caplog.text


def test_a_finished_run_with_val_and_test_resumes_without_redoing(tmp_path):
    """Photos with train/, val/ and test/: the last step is validated as
    well as tested (the validation curve's last point), so the same
    command with more steps resumes without evaluating that step again."""
    photos = tmp_path / "photos"
    for split, count in (("train", 4), ("val", 2), ("test", 2)):
        write_photo_folder(photos, per_class=count, split=split)
    command = [f"--config=folder:{photos}", "--model=Ti/16", "--workdir=run",
               *(a for a in TINY if "epochs" not in a),
               "--config.evals.test.every_steps=2"]
    _run(tmp_path, "train", *command, "--config.trainer.total_steps=2")
    more = _run(tmp_path, "train", *command, "--config.trainer.total_steps=4")
    assert "Resumed from" in more.stderr, more.stderr[-3000:]
    assert "Evaluating at step 2 first" not in more.stderr
    rows = [(r["step"], r["split"]) for r in history.read_history(
        str(tmp_path / "run")) if r["split"] != "train"]
    assert rows == [(2, "val"), (2, "test"), (4, "val"), (4, "test")], rows


def test_a_run_in_epochs_whose_photos_changed_says_so(tmp_path):
    """A finished run counted in epochs, run again after photos were
    added: its epochs are more steps now; the warning says the split
    changed size since the run counted its steps, and names the flag
    that keeps the run's own count (which then finds it finished)."""
    write_photo_folder(tmp_path / "photos", per_class=6)
    command = ["--config=folder:photos", "--model=Ti/16", "--workdir=run",
               *(a for a in TINY if "epochs" not in a),
               "--config.trainer.epochs=1"]
    _run(tmp_path, "train", *command)
    steps = json.loads((tmp_path / "run" / "metrics.json").read_text())[
        "steps"]
    write_photo_folder(tmp_path / "photos", per_class=12, seed=1)
    again = _run(tmp_path, "train", *command)
    counted = json.loads((tmp_path / "run" / "config.json").read_text())[
        "trainer"]["total_steps"]
    assert counted > steps
    assert (f"--config.trainer.epochs=1 is {counted} steps of the training "
            f"split now, where the run in run counted {steps} when it last "
            "ran: the split has changed size since, and the run goes "
            f"by the new count. --config.trainer.total_steps={steps} in "
            "place of epochs keeps its own.") in again.stderr, again.stderr


def test_a_run_resumes_only_on_the_classes_it_trained_on(tmp_path):
    """A class folder renamed (or added) between two runs of the same
    command: the resumed run is refused in one line naming the change,
    before its checkpoint is read, and labels.txt stays the run's."""
    write_photo_folder(tmp_path / "photos", per_class=6)
    args = ["--config=folder:photos", "--model=Ti/16", "--workdir=run",
            *(a for a in TINY if "epochs" not in a),
            "--config.trainer.total_steps=2"]
    _run(tmp_path, "train", *args)
    labels = (tmp_path / "run" / "labels.txt").read_text()
    assert labels.split() == ["china", "flower"]
    os.rename(tmp_path / "photos" / "china", tmp_path / "photos" / "zz")
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    result = subprocess.run(
        _script("train") + args[:-1] + ["--config.trainer.total_steps=4"],
        capture_output=True, text=True, cwd=str(tmp_path), env=env,
        timeout=600)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert ("was trained on the classes of its labels.txt (china, "
            "flower), and the data lacks china and adds zz: the head's "
            "outputs would change meaning"
            ) in result.stderr, result.stderr[-2000:]
    assert (tmp_path / "run" / "labels.txt").read_text() == labels
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["steps"] == 2
    # The folders as they were: the run resumes and goes on.
    os.rename(tmp_path / "photos" / "zz", tmp_path / "photos" / "china")
    _run(tmp_path, "train", *args[:-1], "--config.trainer.total_steps=4")
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["steps"] == 4


@pytest.mark.slow
def test_a_head_for_other_classes_starts_at_zero(tmp_path):
    """Fine-tuning from a run whose head has the data's width but other
    class names (labels.txt): the head starts at zero, the log naming the
    first class that differs and config.init.head='fits', which keeps it;
    names with none in common keep it with a warning; the same classes
    keep it; config.init.head='zero' drops any."""
    write_photo_folder(tmp_path / "photos", per_class=6)
    tiny = [*(a for a in TINY if "epochs" not in a),
            "--config.trainer.total_steps=1"]
    _run(tmp_path, "train", "--config=folder:photos", "--model=Ti/16",
         "--workdir=run", *tiny)
    os.rename(tmp_path / "photos" / "china", tmp_path / "photos" / "zz")
    tuned = ["--config=folder:photos", "--model=run", *tiny]
    other = _run(tmp_path, "train", *tuned, "--workdir=tuned").stderr
    assert ("Dropped head/kernel (32, 2): its classes are not the data's "
            "(class 0: 'china' there, 'flower' here; config.init.head="
            "'fits' keeps such a head); the head starts at zero.") in other
    # Each line of the load report is a log line of its own, prefixed.
    assert re.search(r"^I\d{4} [\d:. ]+\d+ model_init\.py:\d+\] Dropped "
                     r"head/kernel \(32, 2\)", other, re.M), other
    kept = _run(tmp_path, "train", *tuned, "--workdir=kept",
                "--config.init.head=fits").stderr
    assert "Initialised from" in kept and "Dropped head" not in kept
    # No name in common: maybe the same classes written otherwise (words,
    # synset ids): kept, with a warning naming config.init.head='zero'.
    os.rename(tmp_path / "photos" / "flower", tmp_path / "photos" / "yy")
    unlike = _run(tmp_path, "train", *tuned, "--workdir=unlike").stderr
    assert "names its classes otherwise than the data (class 0: 'china' " \
        "there, 'yy' here; no name in common): kept" in unlike
    assert "Dropped head" not in unlike
    os.rename(tmp_path / "photos" / "yy", tmp_path / "photos" / "flower")
    os.rename(tmp_path / "photos" / "zz", tmp_path / "photos" / "china")
    same = _run(tmp_path, "train", *tuned, "--workdir=same").stderr
    assert "Initialised from" in same and "Dropped head" not in same
    zero = _run(tmp_path, "train", *tuned, "--workdir=zero",
                "--config.init.head=zero").stderr
    assert "Dropped head/bias (2,): config.init.head='zero'; the head " \
        "starts at zero." in zero


def test_a_workdir_in_the_image_folder_is_refused(tmp_path):
    """keras-vit-train with --workdir the photo folder itself, or a folder
    inside it: one line before anything is written, since the run's files
    would be read as classes and images next time."""
    photos = tmp_path / "photos"
    write_photo_folder(photos, per_class=2)
    before = sorted(os.listdir(photos))
    export = ["--config.export.enabled=True",
              "--config.export.export_dir=photos/served"]
    for workdir, where, more in (
            ("photos", "--workdir photos is the", []),
            ("photos/run", "--workdir photos/run is inside the", []),
            (str(photos) + "/", f"--workdir {photos}/ is the", []),
            ("run", "--config.export.export_dir photos/served is inside the",
             export)):
        result = subprocess.run(
            _script("train") + ["--config=folder:photos", *TINY, *more,
                                f"--workdir={workdir}"],
            capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
            env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
        assert result.returncode == 1, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"keras-vit-train: error: {where} image "
            f"folder {photos} (--config.input.data_dir): its next reading "
            "would take the run's files (checkpoints/, train/, ...) for "
            "classes and images. Give the run a folder outside it.")
        assert sorted(os.listdir(photos)) == before
    assert not (tmp_path / "run").exists()
    # With the export off, its folder is never written: not refused.
    off = subprocess.run(
        _script("train") + ["--config=folder:photos", *TINY, export[1],
                            "--config.trainer.epochs=1", "--workdir=run"],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
        env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
    assert off.returncode == 0, off.stderr[-2000:]
    assert sorted(os.listdir(photos)) == before


def test_a_new_run_in_another_image_folder_or_an_export_is_refused(
        tmp_path):
    """keras-vit-train on the digits with --workdir an image folder of the
    user's (class folders of photos, or photos alone) or a model export:
    one line before anything is written. Before, the run wrote its
    checkpoints/, train/, ... among the photos, which then failed as
    classes, or among the exported models. An empty folder, or a run's
    own workdir, is taken."""
    write_photo_folder(tmp_path / "photos", per_class=2)
    (tmp_path / "loose").mkdir()
    shutil.copy(next((tmp_path / "photos" / "china").iterdir()),
                tmp_path / "loose" / "a.jpg")
    (tmp_path / "exports" / "vit" / "1").mkdir(parents=True)
    (tmp_path / "exports" / "vit" / "1" / "saved_model.pb").write_bytes(b"")
    (tmp_path / "exports" / "models.config").write_text("")
    for workdir, holds, kind in (
            ("photos", "photos/china/", "an image folder"),
            ("loose", "loose/a.jpg", "an image folder"),
            ("exports", "exports/models.config", "a model export"),
            ("exports/vit", "exports/vit/1", "a model export")):
        before = sorted(os.listdir(tmp_path / workdir))
        result = subprocess.run(
            _script("train") + [*console.TINY_DIGITS, f"--workdir={workdir}"],
            capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
            env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
        assert result.returncode == 1, result.stderr[-2000:]
        said = result.stderr.strip().splitlines()[-1]
        assert said.startswith(f"keras-vit-train: error: --workdir {workdir} "
                               f"holds {holds}"), said
        assert said.endswith(f"and no run's config.json: it is {kind}, among "
                             "whose files the run would write its own "
                             "(checkpoints/, train/, ...). Give the run a "
                             "folder of its own."), said
        assert sorted(os.listdir(tmp_path / workdir)) == before
    (tmp_path / "empty").mkdir()
    image_files.check_workdir_holds_no_data(str(tmp_path / "empty"))
    for name in ("config.json", "config.before-1.json", "history.csv"):
        (tmp_path / "loose" / name).write_text("")  # a run's own files
        image_files.check_workdir_holds_no_data(str(tmp_path / "loose"))
        os.remove(tmp_path / "loose" / name)


def test_an_image_folder_where_the_run_writes_is_never_moved(tmp_path):
    """The photos in the workdir's train/ (or eval/, best/, checkpoints/),
    the folders a run writes and sets an earlier run's aside: refused
    before anything is written, as the image folder, or inside it, with
    --workdir=. or another workdir; a train/ of the user's beside another
    run's data is refused when the run would set it aside, and stays.
    Before, it was moved to train.before-1/, then its images were not
    found."""
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    project = tmp_path / "project"
    write_photo_folder(project / "train", per_class=2)
    before = sorted(os.listdir(project / "train"))
    for data, workdir, cwd, name, inside in (
            ("train", ".", project, "train", False),
            ("project/train/china", "project", tmp_path, "train", True),
            ("project/eval", "project", tmp_path, "eval", False)):
        if name == "eval":
            shutil.copytree(project / "train", project / "eval")
        result = subprocess.run(
            _script("train") + [f"--config=folder:{data}", *TINY,
                                f"--workdir={workdir}"],
            capture_output=True, text=True, cwd=str(cwd), timeout=600,
            env=env)
        assert result.returncode == 1, result.stderr[-2000:]
        assert result.stderr.strip().splitlines()[-1] == (
            f"keras-vit-train: error: The image folder "
            f"{os.path.join(str(cwd), data)} (--config.input.data_dir) is "
            f"{'inside ' if inside else ''}the run's {name}/ folder of "
            f"--workdir {workdir}, which the run writes (and sets an "
            "earlier run's aside): move the images to a folder of their "
            "own, or give the run another workdir."), result.stderr[-2000:]
        assert sorted(os.listdir(project)) == ["eval", "train"][
            name != "eval":], os.listdir(project)
    shutil.rmtree(project / "eval")
    result = subprocess.run(
        _script("train") + [*console.TINY_DIGITS,
                            "--config.trainer.total_steps=2",
                            "--workdir=project"],
        capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
        env=env)
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-vit-train: error: project/train holds china and no "
        "TensorBoard event file: it is no run's summaries, and the run "
        "writes its own there. Move it out of the workdir, or give the run "
        "another workdir."), result.stderr[-2000:]
    assert sorted(os.listdir(project / "train")) == before
    assert not any(n.startswith("train.") for n in os.listdir(project))


def test_a_class_folder_whose_photos_are_one_folder_down_is_named(
        tmp_path):
    """Photos in china/2023/ (a class folder's sub-folder, not read) and
    none in china/ itself: the refusal names the sub-folder and says to
    move its images up; before, it said to add images or remove the
    folder (and with it a class of photos). Both layouts; an empty class
    folder is refused as before."""
    write_photo_folder(tmp_path / "photos", per_class=2)
    china = tmp_path / "photos" / "china"
    (china / "2023").mkdir()
    for image in list(china.glob("*.jpg")):
        image.rename(china / "2023" / image.name)
    shutil.copytree(tmp_path / "photos", tmp_path / "split" / "train")
    (tmp_path / "empty" / "china").mkdir(parents=True)
    shutil.copytree(tmp_path / "photos" / "flower",
                    tmp_path / "empty" / "flower")
    for data, says in (
            ("photos", f"Class folder {china} has no images of its own, "
             f"only folders inside it (2023/), which are not read: move "
             f"their images up into {china}."),
            ("split", "Class folder {0}/china has no images of its own, "
             "only folders inside it (2023/), which are not read: move "
             "their images up into {0}/china.".format(
                 tmp_path / "split" / "train")),
            ("empty", f"Class folder {tmp_path / 'empty' / 'china'} has no "
             "images (")):
        result = subprocess.run(
            _script("train") + [f"--config=folder:{data}", *TINY,
                                f"--workdir=run_{data}"],
            capture_output=True, text=True, cwd=str(tmp_path), timeout=600,
            env=dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES=""))
        assert result.returncode == 1, result.stderr[-2000:]
        line = result.stderr.strip().splitlines()[-1]
        assert line.startswith(f"keras-vit-train: error: {says}"), line


def test_own_photos_with_a_step_count_given(tmp_path):
    """--config.trainer.total_steps on the folder config: the run trains
    those steps, its warm-up held to a tenth of them (the config's 100
    would not fit); a batch over the training split is warned of, in the
    flag's words. The folder named by a relative
    --config.input.data_dir is recorded absolute, as folder:PATH is, so
    that the run is evaluated from any directory."""
    write_photo_folder(tmp_path / "photos", per_class=6)
    result = _run(tmp_path, "train", "--config=folder",
                  "--config.input.data_dir=photos",
                  "--model=Ti/16", "--workdir=run",
                  *(a for a in TINY if "epochs" not in a),
                  "--config.trainer.total_steps=20",
                  "--config.input.batch_size=16")
    with open(tmp_path / "run" / "config.json") as f:
        saved = json.load(f)
    assert saved["trainer"]["total_steps"] == 20
    assert saved["input"]["data_dir"] == str(tmp_path / "photos")
    assert saved["schedule"]["warmup_steps"] == 2
    assert "a warm-up of 100 steps would not fit; held to 2" in (
        result.stderr)
    # A warning names a field as the flag that sets it, as errors do.
    assert "--config.input.batch_size=16 is more than the 10 training " \
        "examples" in result.stderr, result.stderr
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["steps"] == 20


@pytest.mark.slow
def test_own_photos_with_augmentation_resume_with_their_data_order(tmp_path):
    """keras-vit-train on one's photos with RandAugment and Mixup: the
    run trains, and the same command with more epochs resumes it with the
    data order and augmentation draws restored from the checkpoint, not
    drawn anew."""
    write_photo_folder(tmp_path / "photos", per_class=12)
    command = ["--config=folder:photos", "--workdir=run", *TINY,
               "--config.input.pp.randaug_ops=2",
               "--config.input.pp.randaug_magnitude=10",
               "--config.input.mix.mixup_alpha=0.2"]
    _run(tmp_path, "train", *command)
    more = _run(tmp_path, "train", *command, "--config.trainer.epochs=5")
    assert "data order restored." in more.stderr, more.stderr[-3000:]
    assert "cannot be checkpointed" not in more.stderr
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["steps"] == 13  # 5 epochs of 20 at batch 8


def test_own_photos_train_evaluate_export_predict(tmp_path):
    classes = write_photo_folder(tmp_path / "photos", per_class=12)
    _run(tmp_path, "train", "--config=folder:photos", "--model=Ti/16",
         "--workdir=run", *TINY)
    with open(tmp_path / "run" / "metrics.json") as f:
        metrics = json.load(f)
    assert {"test_accuracy", "test_loss", "test_examples"} <= set(metrics)
    assert metrics["test_examples"] == 4 and metrics["steps"] == 8
    with open(tmp_path / "run" / "config.json") as f:
        saved = json.load(f)
    assert saved["trainer"]["total_steps"] == 8  # 3 epochs of 20 at 8
    assert saved["evals"]["test"]["split"] == "val"
    assert (tmp_path / "run" / "labels.txt").read_text().split() == classes
    # The same command again: finished; its length was given in epochs,
    # the field to raise (total_steps would be refused beside them).
    again = _run(tmp_path, "train", "--config=folder:photos",
                 "--model=Ti/16", "--workdir=run", *TINY)
    assert "To train on, raise config.trainer.epochs." in again.stderr
    evaluated = _run(tmp_path, "evaluate", "--mode=eval", "--workdir=run")
    result = json.loads(evaluated.stdout[evaluated.stdout.index("{"):])
    assert result["split"] == "val" and result["num_examples"] == 4
    assert 0.0 <= result["accuracy"] <= 1.0
    # The folder config itself (its total_steps 0 and image_size 0 are
    # the training run's to settle): the same numbers at the run's size.
    again = _run(tmp_path, "evaluate", "--mode=eval", "--config=folder:photos",
                 "--model=run")
    again = json.loads(again.stdout[again.stdout.index("{"):])
    assert again["image_size"] == result["image_size"]
    assert again["accuracy"] == result["accuracy"]
    assert again["loss"] == pytest.approx(result["loss"], rel=1e-5)
    # Every photo of the folder: its two splits joined, as TFDS joins.
    whole = _run(tmp_path, "evaluate", "--mode=eval", "--workdir=run",
                 "--split=train+val")
    whole = json.loads(whole.stdout[whole.stdout.index("{"):])
    assert whole["split"] == "train+val" and whole["num_examples"] == 24
    exported = _run(tmp_path, "export", "--model=run", "--export_dir=exports",
                    "--model_name=photos")
    version = exported.stdout.strip().splitlines()[-1]
    assert version == os.path.join("exports", "photos", "1")
    assert (tmp_path / version / "saved_model.pb").exists()
    photo = os.path.join("photos", "china", "china_00.jpg")
    answer = _run(tmp_path, "predict", "--model=exports/photos", photo)
    line = answer.stdout.strip().splitlines()[-1]
    assert line.startswith(f"{photo}: ")
    assert line.split(": ", 1)[1].split()[0] in classes
