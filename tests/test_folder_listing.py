"""Image folders on gs:// are listed with one glob per level, local ones
folder by folder (`folders.list_class_folders`); both ways find the same
folders and files, odd entries included; the benchmark that compares the
two (benchmarks/folder_listing.py) writes consistent results."""

import json
import os
import subprocess
import sys

import pytest

from keras_vit.data import folders, sources

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "folder_listing.py")


def _touch(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "wb").close()


def test_one_glob_per_level_finds_what_the_folder_listing_found(tmp_path):
    root = str(tmp_path)
    for split in ("train", "test"):
        for cls in ("cat", "dog"):
            for name in ("b.JPG", "a.png", "c.jpeg"):
                _touch(os.path.join(root, split, cls, name))
    _touch(os.path.join(root, "train", "dog", "notes.txt"))  # not an image
    _touch(os.path.join(root, "train", "dog", "sub", "x.jpg"))  # too deep
    _touch(os.path.join(root, "train", "README.md"))  # beside the classes
    _touch(os.path.join(root, "LICENSE"))  # beside the splits
    _touch(os.path.join(root, "train", ".hidden", "h.jpg"))
    os.makedirs(os.path.join(root, "train", ".ipynb_checkpoints"))
    os.makedirs(os.path.join(root, "empty_split"))
    tree = folders.list_class_folders(root, per_level=True)
    assert tree == folders.list_class_folders(root)  # folder by folder
    assert tree["train"]["dog"] == ["a.png", "b.JPG", "c.jpeg"]
    assert set(tree["train"]) == {"cat", "dog"}  # hidden folders: no class
    assert set(tree) == {"train", "test"}


@pytest.mark.parametrize("name", ["photos [2023]", "a*b?", "x]y"])
def test_a_folder_named_with_glob_characters_is_listed_as_named(tmp_path,
                                                                name):
    """A path holding [, ], * or ? is the folder it names, not a pattern:
    listed one glob per level as folder by folder, and on a remote file
    system (TensorFlow's ram://, which takes gs://'s way) indexed."""
    import tensorflow as tf

    for root in (str(tmp_path / name), f"ram://{tmp_path.name}/{name}"):
        for split in ("train", "val"):
            for cls in ("cat", "dog"):
                path = f"{root}/{split}/{cls}/a.jpg"
                tf.io.gfile.makedirs(os.path.dirname(path))
                with tf.io.gfile.GFile(path, "wb") as f:
                    f.write(b"")
        tree = folders.list_class_folders(root, per_level=True)
        assert tree == {split: {"cat": ["a.jpg"], "dog": ["a.jpg"]}
                        for split in ("train", "val")}, root
        assert tree == folders._per_folder(root)
        folders.folder_index.cache_clear()
        assert {split: len(pairs) for split, pairs in
                folders.folder_index(root)[0].items()} == {
                    "train": 2, "val": 2}, root


def test_remote_folders_are_listed_one_glob_per_level(monkeypatch):
    globs = []
    monkeypatch.setattr(folders.tf.io.gfile, "glob",
                        lambda pattern: globs.append(pattern) or [])
    monkeypatch.setattr(folders.tf.io.gfile, "listdir", None)  # unused
    assert folders.list_class_folders("gs://bucket/i21k") == {}
    assert globs == ["gs://bucket/i21k/*/*/*", "gs://bucket/i21k/*/*"]


def test_an_empty_class_folder_is_still_refused(tmp_path):
    _touch(str(tmp_path / "train" / "cat" / "a.jpg"))
    os.makedirs(tmp_path / "train" / "dog")
    folders.folder_index.cache_clear()
    with pytest.raises(sources.UsageError, match="Class folder .*dog has no "
                       "images"):
        folders.folder_split(str(tmp_path), "train")


@pytest.mark.slow
def test_listing_benchmark_writes_consistent_results(tmp_path):
    prefix = str(tmp_path / "listing")
    run = subprocess.run(
        [sys.executable, SCRIPT, "--classes=30", "--splits=2", "--images=2",
         "--repeats=2", f"--output={prefix}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with open(prefix + ".json") as f:
        result = json.load(f)
    assert result["folders"] == 60 and result["files"] == 120
    assert all(len(v) == 2 for v in result["seconds"].values())
    # 1 + 2 listings and 2 + 60 checks, against 2 globs and no check.
    assert result["calls"]["per_folder"] == {"listdir": 63, "isdir": 62}
    assert result["calls"]["glob_per_level"] == {"glob": 2}
    assert result["speedup"] == pytest.approx(
        result["median_s"]["per_folder"]
        / result["median_s"]["glob_per_level"])
    with open(prefix + ".md") as f:
        assert result["command"] in f.read()
