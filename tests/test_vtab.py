"""VTAB-1k: task registry, label functions, data checks, the protocol runner
and its reports.

Label functions are checked on hand-made TFDS-style examples against plain
Python statements of the task_adaptation rules, eagerly and inside tf.data.
The runner trains all 19 tasks end to end on TFDS mock data (random
examples with each builder's real features) with a tiny model and one step
per task.
"""

import csv
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_vit import config as config_lib
from keras_vit import create_model
from keras_vit.checkpoint import loader as pretrained
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.data import pipeline as input_pipeline
from keras_vit.data import preprocessing, sources, vtab, vtab_labels
from keras_vit.errors import UsageError
from keras_vit.evaluation import reports, vtab_protocol, vtab_run
from keras_vit.training import train_lib
from tests import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# From vtab_tasks.md: name -> (group, builder, train800, val200, test, K).
EXPECTED = {
    "caltech101": ("natural", "caltech101:3.*.*", "train[:800]",
                   "train[2754:2954]", "test", 102),
    "cifar100": ("natural", "cifar100:3.*.*", "train[:800]",
                 "train[45000:45200]", "test", 100),
    "dtd": ("natural", "dtd:3.*.*", "train[:800]", "validation[:200]",
            "test", 47),
    "oxford_flowers102": ("natural", "oxford_flowers102:2.*.*",
                          "train[:800]", "validation[:200]", "test", 102),
    "oxford_iiit_pet": ("natural", "oxford_iiit_pet:3.*.*", "train[:800]",
                        "train[2944:3144]", "test", 37),
    "sun397": ("natural", "sun397/tfds:4.*.*", "train[:800]",
               "validation[:200]", "test", 397),
    "svhn": ("natural", "svhn_cropped:3.*.*", "train[:800]",
             "train[65931:66131]", "test", 10),
    "patch_camelyon": ("specialized", "patch_camelyon:2.*.*", "train[:800]",
                       "validation[:200]", "test", 2),
    "eurosat": ("specialized", "eurosat/rgb:2.*.*", "train[:800]",
                "train[16200:16400]", "train[21600:]", 10),
    "resisc45": ("specialized", "resisc45:3.*.*", "train[:800]",
                 "train[18900:19100]", "train[25200:]", 45),
    "diabetic_retinopathy": ("specialized",
                             "diabetic_retinopathy_detection/btgraham-300"
                             ":3.*.*", "train[:800]", "validation[:200]",
                             "test", 5),
    "clevr_count": ("structured", "clevr:3.*.*", "train[:800]",
                    "train[63000:63200]", "validation", 8),
    "clevr_dist": ("structured", "clevr:3.*.*", "train[:800]",
                   "train[63000:63200]", "validation", 6),
    "dmlab": ("structured", "dmlab:2.0.1", "train[:800]",
              "validation[:200]", "test", 6),
    "dsprites_loc": ("structured", "dsprites:2.*.*", "train[:800]",
                     "train[589824:590024]", "train[663552:]", 16),
    "dsprites_ori": ("structured", "dsprites:2.*.*", "train[:800]",
                     "train[589824:590024]", "train[663552:]", 16),
    "kitti_dist": ("structured", "kitti:3.1.0", "train[:800]",
                   "validation[:200]", "test", 4),
    "smallnorb_azim": ("structured", "smallnorb:2.*.*", "train[:800]",
                       "test[:200]", "test[50%:]", 18),
    "smallnorb_elev": ("structured", "smallnorb:2.*.*", "train[:800]",
                       "test[:200]", "test[50%:]", 9),
}


def load_config(name, arg=None):
    path = os.path.join(ROOT, "configs", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"cfg_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


# ------------------------------------------------------------ registry
def test_registry_matches_the_reference_table():
    assert list(vtab.TASKS) == list(EXPECTED)
    for name, (group, builder, tr, va, te, k) in EXPECTED.items():
        task = vtab.TASKS[name]
        assert (task.group, task.tfds_name, task.num_classes) == (
            group, builder, k
        )
        assert task.split("train800") == tr
        assert task.split("val200") == va
        assert task.split("train800val200") == f"{tr}+{va}"
        assert task.split("test") == te
    counts = {g: len(vtab.tasks_in_group(g)) for g in vtab.GROUPS}
    assert counts == {"natural": 7, "specialized": 4, "structured": 8}
    manual = {t.name for t in vtab.TASKS.values() if t.manual_files}
    assert manual == {"resisc45", "diabetic_retinopathy"}


def test_select_tasks_groups_names_order_and_errors():
    chosen = vtab.select_tasks("dsprites_loc,natural, svhn")
    assert [t.name for t in chosen] == [
        "caltech101", "cifar100", "dtd", "oxford_flowers102",
        "oxford_iiit_pet", "sun397", "svhn", "dsprites_loc",
    ]
    assert len(vtab.select_tasks("all")) == 19
    assert len(vtab.select_tasks(None)) == 19
    assert [t.name for t in vtab.select_tasks(["specialized"])] == [
        "patch_camelyon", "eurosat", "resisc45", "diabetic_retinopathy"
    ]
    with pytest.raises(ValueError) as e:
        vtab.select_tasks("natural,dsprite_loc,cifar")
    msg = str(e.value)
    assert "'dsprite_loc'" in msg and "'cifar'" in msg
    assert "dsprites_loc" in msg and "structured" in msg


# -------------------------------------------------------------- labels
def both_ways(fn, example):
    """fn(example) eagerly and inside a tf.data map; both must agree."""
    eager = fn(example).numpy()
    ds = tf.data.Dataset.from_tensors(example).map(fn)
    graph = next(iter(ds)).numpy()
    assert eager == graph
    return int(eager)


def clevr_example(depths):
    n = len(depths)
    coords = np.stack([np.zeros(n), np.zeros(n), depths], 1)
    return {"objects": {"pixel_coords": tf.constant(coords, tf.float32),
                        "size": tf.zeros([n], tf.int64)}}


def reference_bin(thresholds, value):
    return max(i for i, t in enumerate(thresholds) if t < value)


def test_clevr_count_label():
    for n in (3, 4, 10):
        ex = clevr_example(np.linspace(5, 12, n))
        assert both_ways(vtab_labels.clevr_count_label, ex) == n - 3


@pytest.mark.parametrize(
    "depths",
    [[7.9, 12.0], [8.0, 9.0], [8.2], [8.5, 30.0], [8.75], [9.0], [9.2],
     [9.99, 11.0], [10.0], [10.01], [50.0, 60.0]],
)
def test_clevr_dist_label(depths):
    thrs = [0, 8, 8.5, 9, 9.5, 10, 100]
    want = reference_bin(thrs, min(depths))
    got = both_ways(vtab_labels.clevr_dist_label, clevr_example(depths))
    assert got == want


def kitti_example(types, depths):
    n = len(types)
    loc = np.stack([np.ones(n), np.ones(n), np.asarray(depths, float)], 1)
    return {"objects": {
        "type": tf.constant(types, tf.int64),
        "location": tf.constant(loc.reshape(n, 3), tf.float32),
    }}


@pytest.mark.parametrize(
    "types,depths,want",
    [
        ([0], [5.0], 0),              # a car at 5 m
        ([1], [8.0], 0),              # a van at exactly 8 m
        ([2], [8.01], 1),             # a truck just beyond 8 m
        ([0, 0], [30.0, 20.0], 1),    # the closest of two cars
        ([0], [25.0], 2),
        ([3, 0], [2.0, 15.0], 1),     # the pedestrian at 2 m is no vehicle
        ([3, 4, 7], [1.0, 2.0, 3.0], 3),  # no vehicle at all
        ([], [], 3),
    ],
)
def test_kitti_dist_label(types, depths, want):
    ex = kitti_example(types, depths)
    vehicle = [d for t, d in zip(types, depths) if t < 3] or [1000.0]
    assert reference_bin([-100, 8, 20, 999], min(vehicle)) == want
    assert both_ways(vtab_labels.kitti_dist_label, ex) == want


def test_dsprites_labels_bin_the_class_index():
    loc, ori = vtab.TASKS["dsprites_loc"], vtab.TASKS["dsprites_ori"]
    for x in range(32):
        ex = {"label_x_position": tf.constant(x, tf.int64)}
        assert both_ways(loc.label, ex) == math.floor(x / 2)
    for o in range(40):
        ex = {"label_orientation": tf.constant(o, tf.int64)}
        assert both_ways(ori.label, ex) == math.floor(o / 2.5)
    assert both_ways(ori.label, {"label_orientation": tf.constant(5)}) == 2


def test_smallnorb_and_plain_labels():
    ex = {"label_azimuth": tf.constant(16, tf.int64),
          "label_elevation": tf.constant(7, tf.int64),
          "label": tf.constant(3, tf.int64)}
    assert both_ways(vtab.TASKS["smallnorb_azim"].label, ex) == 16
    assert both_ways(vtab.TASKS["smallnorb_elev"].label, ex) == 7
    assert both_ways(vtab.TASKS["svhn"].label, ex) == 3


def test_images_become_uint8_rgb():
    bits = np.random.default_rng(0).integers(0, 2, (64, 64, 1), np.uint8)
    ex = {"image": tf.constant(bits), "label_x_position": tf.constant(9)}
    image, label = vtab.TASKS["dsprites_loc"].example_fn(ex)
    assert image.dtype == tf.uint8 and image.shape == (64, 64, 3)
    np.testing.assert_array_equal(image.numpy(), np.repeat(bits, 3, -1) * 255)
    assert int(label) == 4
    grey = np.arange(96 * 96, dtype=np.uint8).reshape(96, 96, 1)
    ex = {"image": tf.constant(grey), "label_elevation": tf.constant(2)}
    ds = tf.data.Dataset.from_tensors(ex).map(
        vtab.TASKS["smallnorb_elev"].example_fn
    )
    image, label = next(iter(ds))
    np.testing.assert_array_equal(image.numpy(), np.repeat(grey, 3, -1))
    assert int(label) == 2


def test_input_pipeline_reads_a_task_with_its_labels():
    """input_pipeline with config.input.vtab_task: the task's labels, RGB in
    [-1, 1], its class count; checked against the raw mock examples."""
    cfg = config_lib.complete(dict(
        dataset="dsprites", vtab_task="dsprites_ori", image_size=16,
    ))
    # max_value=2: dSprites-like 0/1 pixels.
    with tfds.testing.mock_data(num_examples=5, max_value=2,
                                policy=tfds.testing.MockPolicy.USE_CODE):
        raw = list(tfds.load("dsprites:2.*.*", split="train[:800]"))
        images, labels, mask = next(iter(
            input_pipeline.eval_dataset(*tiny.pipeline(cfg), "train[:800]", 8)
        ))
        info = sources.dataset_info(cfg.input)
    assert info.num_classes == 16
    want = [int(np.floor(int(r["label_orientation"]) / 2.5)) for r in raw]
    np.testing.assert_array_equal(labels.numpy()[:5], want)
    np.testing.assert_array_equal(mask.numpy(), [1] * 5 + [0] * 3)
    assert images.shape == (8, 16, 16, 3)
    for got, r in zip(images.numpy(), raw):
        pixels = r["image"].numpy()
        assert set(np.unique(pixels)) <= {0, 1}
        rgb = np.repeat(pixels.astype(np.float32) * 255.0, 3, axis=-1)
        expected = preprocessing.preprocess_eval(tf.constant(rgb), 16)
        np.testing.assert_allclose(got, expected.numpy(), atol=1e-6)


# -------------------------------------------------------- data checks
def test_manual_download_missing_names_the_directory(tmp_path):
    with pytest.raises(vtab.DataUnavailableError) as e:
        vtab.prepare("resisc45", str(tmp_path))
    msg = str(e.value)
    manual = os.path.join(str(tmp_path), "downloads", "manual")
    assert manual in msg and "NWPU-RESISC45" in msg and "1drv.ms" in msg
    with pytest.raises(vtab.DataUnavailableError) as e:
        vtab.prepare("diabetic_retinopathy", str(tmp_path),
                     manual=str(tmp_path / "mine"))
    assert "trainLabels.csv" in str(e.value)
    assert "sample/ unzipped" in str(e.value)
    assert str(tmp_path / "mine") in str(e.value)


@pytest.mark.parametrize("name", ["resisc45", "diabetic_retinopathy"])
def test_manual_files_are_what_the_tfds_builder_reads(tmp_path, name):
    """A task's manual_files are the paths its TFDS builder reads from the
    manual directory (Retinopathy's includes the `sample` split)."""
    from types import SimpleNamespace

    task = vtab.TASKS[name]
    manual = str(tmp_path / "manual")
    make_manual_files(str(tmp_path), task.manual_files, manual)
    dl_manager = SimpleNamespace(
        manual_dir=manual, download=lambda url: str(tmp_path / "other.csv"))
    splits = task.builder(str(tmp_path / "data"))._split_generators(
        dl_manager)
    if isinstance(splits, dict):
        splits = list(splits.values())
    read = {os.path.relpath(v, manual).split(os.sep)[0]
            for split in splits for v in split.gen_kwargs.values()
            if isinstance(v, str) and v.startswith(manual + os.sep)}
    assert read == set(task.manual_files)


def test_not_prepared_without_download_says_how(tmp_path):
    with pytest.raises(vtab.DataUnavailableError) as e:
        vtab.prepare("dtd", str(tmp_path), download=False)
    assert f"`tfds build dtd --data_dir={tmp_path}` first" in str(e.value)
    assert "config.input.download=True" in str(e.value)


# ------------------------------------------------------------- reports
def paper_records():
    return [
        {"task": t.name, "accuracy": t.paper_vit_l16 / 100.0,
         "top5_accuracy": 1.0, "loss": 0.5, "test_examples": 10}
        for t in vtab.TASKS.values()
    ]


def test_summary_reproduces_the_papers_group_means():
    s = reports.summarize(paper_records())
    ref = vtab.PAPER_REFERENCE["ViT-L/16 (I21k)"]
    for group in vtab.GROUPS:
        assert 100 * s[group]["mean"] == pytest.approx(ref[group], abs=0.006)
        assert s[group]["tasks"] == s[group]["total"]
    # The paper's 72.72 is the mean of unrounded task scores.
    assert 100 * s["all"]["mean"] == pytest.approx(ref["all"], abs=0.015)
    partial = reports.summarize(paper_records()[:3])
    assert partial["natural"] == {
        "mean": pytest.approx((0.908 + 0.841 + 0.741) / 3), "tasks": 3,
        "total": 7,
    }
    assert partial["specialized"]["mean"] is None


def test_markdown_and_csv(tmp_path):
    records = paper_records()[:8]  # 7 natural + Camelyon
    text = reports.markdown_table(records, "m", {"dsprites_loc": "why"})
    lines = text.splitlines()
    summary_row = next(line for line in lines if line.startswith("| m |"))
    assert "83.27 | 82.50 (1/4) | n/a |" in summary_row
    per_task = [line for line in lines if line.startswith("| m |")][1]
    cells = [c.strip() for c in per_task.strip("|").split("|")]
    assert cells[1:9] == ["90.80", "84.10", "74.10", "99.30", "92.70",
                          "61.00", "80.90", "83.27"]
    assert "- dsprites_loc: why" in text
    # The paper's row gives the paper's means (72.72, not the 72.71 that
    # its one-decimal task scores average to).
    per_task_paper = [line for line in reports.markdown_table(
        paper_records(), "m").splitlines()
        if line.startswith("| ViT-L/16 (I21k), paper")][-1]
    assert per_task_paper.endswith(" | 30.5 | 41.7 | 57.50 | 72.72 |")
    path = str(tmp_path / "r.csv")
    reports.write_csv(path, list(reversed(records)))
    rows = list(csv.DictReader(open(path)))
    assert [r["task"] for r in rows] == [r["task"] for r in records]
    assert rows[0]["accuracy_percent"] == "90.80"


@pytest.mark.slow
def test_charts_leave_matplotlibs_backend_alone(tmp_path):
    """Importing the report writer and drawing both charts neither switches
    the process's backend nor leaves figures in pyplot (Keras itself imports
    pyplot). A fresh process, so that nothing else has touched
    matplotlib."""
    script = f"""
import sys
import matplotlib
matplotlib.use("svg")
from keras_vit.data import vtab
from keras_vit.evaluation import reports
records = [{{"task": t.name, "accuracy": 0.5}} for t in vtab.TASKS.values()]
reports.plot_tasks(records, {str(tmp_path / "t.png")!r}, "m")
reports.plot_groups(records, {str(tmp_path / "g.png")!r}, "m")
pyplot = sys.modules.get("matplotlib.pyplot")
print(matplotlib.get_backend(), pyplot.get_fignums() if pyplot else [])
"""
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True,
        text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-2:] == ["svg", "[]"], out.stdout
    for name in ("t.png", "g.png"):
        with open(tmp_path / name, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_append_jsonl_replaces_and_keeps_other_lines(tmp_path):
    path = str(tmp_path / "r.jsonl")
    reports.append_jsonl(path, {"task": "a", "accuracy": 0.1})
    reports.append_jsonl(path, {"task": "b", "accuracy": 0.2})
    reports.append_jsonl(path, {"task": "a", "accuracy": 0.3})
    assert reports.read_jsonl(path) == [
        {"task": "b", "accuracy": 0.2}, {"task": "a", "accuracy": 0.3}
    ]
    assert os.listdir(tmp_path) == ["r.jsonl"]  # no temporary left behind
    # A diverged task's NaN loss: null, JSON that any reader takes.
    reports.append_jsonl(path, {"task": "c", "loss": float("nan")})
    with open(path) as f:
        assert f.read().splitlines()[-1] == '{"loss": null, "task": "c"}'


# ------------------------------------------------------ the protocol
def test_task_config_is_the_papers_recipe():
    config = load_config("vtab")
    fields = {"patch_size": 16, "hidden_size": 768, "num_layers": 12,
              "num_heads": 12, "mlp_dim": 3072, "pooling": "token",
              "variant": None}
    task = vtab.TASKS["caltech101"]
    c = vtab_run.task_config(
        config, task, fields, "/b.npz", lr=config.schedule.lr,
        steps=config.trainer.total_steps, train_split="train800val200",
        eval_split="test",
    )
    assert (c.optimizer.name, c.schedule.lr, c.optimizer.momentum) == (
        "sgd", 0.01, 0.9
    )
    assert c.schedule.decay_type == "cosine"
    assert c.optimizer.weight_decay == 0.0
    assert (c.trainer.total_steps, c.input.batch_size,
            c.model.image_size) == (2500, 512, 384)
    assert c.trainer.grad_clip_norm == 1.0
    assert c.input.train_split == "train[:800]+train[2754:2954]"
    assert c.evals.test.split == "test" and c.model.num_classes == 102
    assert c.input.vtab_task == "caltech101" and c.init.model == "/b.npz"
    # The backbone's architecture, the task's classes, the other model
    # fields the defaults (the resolution the config's).
    base = config_lib.base_config()
    assert c.model.to_dict() == {**base.model.to_dict(), **fields,
                                 "num_classes": 102, "image_size": 384}
    # The runner's own fields hold their defaults: changing them keeps the
    # finished trials valid.
    config.evals.vtab.keep_checkpoints = True
    again = vtab_run.task_config(
        config, task, fields, "/b.npz", lr=0.01, steps=2500,
        train_split="train800val200", eval_split="test",
    )
    assert again.to_dict() == c.to_dict()
    assert set(c.evals) == {"test"}  # the protocol's own evaluator left out
    assert not c.input.download or c.input.download == base.input.download
    assert c.is_locked and not c.input.pp.flip


def tiny_source(path, num_classes=10):
    """A tiny pre-trained model at 16 x 16 (2 x 2 patches, so VTAB at 32
    resizes the position embeddings) with a non-zero head."""
    model = create_model(
        None, num_classes=num_classes, image_size=16, patch_size=8,
        hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        representation_size=16, head_zero_init=False,
    )
    checkpoint.save_npz(model, path)
    return pretrained.NpzSource(path)


def test_backbone_has_no_head(tmp_path):
    source = tiny_source(str(tmp_path / "src.npz"))
    out = pretrained.write_backbone(source, str(tmp_path / "b.npz"))
    keys = set(checkpoint_io.read_npz(out.path))
    assert not any(k.startswith(("head/", "pre_logits/")) for k in keys)
    assert "cls" in keys and len(keys) > 10
    fields = pretrained.transfer_model_config(out, {"dropout_rate": 0.1})
    assert fields == dict(patch_size=8, hidden_size=32, num_layers=1,
                          num_heads=2, mlp_dim=64, pooling="token",
                          posemb="learn", variant=None, dropout_rate=0.1)
    with pytest.raises(ValueError, match="not a B/16 checkpoint"):
        pretrained.describe_source(
            pretrained.NpzSource(source.path, variant="B/16")
        )
    # A model of a non-square grid: its .npz could not say the grid (a
    # 8 x 32 one would be read as 16 x 16, scrambled, without a word).
    wide = create_model(None, num_classes=3, image_size=(16, 32),
                        patch_size=8, hidden_size=32, num_layers=1,
                        num_heads=2, mlp_dim=64)
    wide.save(tmp_path / "wide.keras")
    with pytest.raises(UsageError, match=r"wide.keras keeps its position "
                       r"table at a 2x4 patch grid, which an .npz cannot "
                       r"record .* make a square copy first"):
        pretrained.write_backbone(str(tmp_path / "wide.keras"),
                                  str(tmp_path / "w.npz"))
    assert not (tmp_path / "w.npz").exists()


def tiny_vtab_config(data_dir):
    c = load_config("vtab")
    c.model.image_size = 32
    c.input.batch_size = 4
    c.evals.test.batch_size = 4
    c.trainer.total_steps = 1
    c.trainer.steps_per_loop = 1
    c.log.every_steps = 1
    c.checkpoints.every_steps = 0
    c.trainer.jit_compile = False
    c.input.shuffle_buffer = 8
    c.input.data_dir = data_dir
    return c


def make_manual_files(data_dir, names, manual=None):
    manual = manual or os.path.join(data_dir, "downloads", "manual")
    for name in names:
        path = os.path.join(manual, name)
        if name.endswith(".csv"):
            os.makedirs(manual, exist_ok=True)
            open(path, "w").close()
        else:
            os.makedirs(path, exist_ok=True)


@pytest.fixture
def consistent_mock_data(monkeypatch):
    """TFDS mock examples whose variable-length features all have length
    10 (by default each draws its own length in [5, 50)): KITTI then has
    one type per location, as real data does, and CLEVR scenes 10 objects
    (Clevr-Count label 7) instead of counts outside the task's 3-10."""
    from tensorflow_datasets.testing import mocking

    cls = mocking.RandomFakeGenerator
    original = cls.__init__

    def init(self, *args, **kwargs):
        kwargs["constant_dynamic_shape"] = True
        original(self, *args, **kwargs)

    monkeypatch.setattr(cls, "__init__", init)
    # With a `decoders` argument (the project's JPEG decoder), TFDS's mock
    # encodes its random examples first, which some tasks' features do
    # not survive (unordered bounding boxes, nested sequences): the tasks'
    # own decoding here. The decoder is tested on data TFDS prepared
    # (tests/test_tfds_prepare.py) and on dSprites' mock examples.
    monkeypatch.setattr(vtab_labels, "image_decoders", lambda *a: None)


@pytest.mark.slow
def test_all_19_tasks_end_to_end_with_rerun(tmp_path, consistent_mock_data):
    data_dir = str(tmp_path / "data")
    out = str(tmp_path / "out")
    source = tiny_source(str(tmp_path / "src.npz"))
    config = tiny_vtab_config(data_dir)
    make_manual_files(data_dir, ["NWPU-RESISC45"])  # Retinopathy missing
    mock = dict(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE)
    with tfds.testing.mock_data(**mock):
        first = vtab_run.run(config, source, out, train_lib.train_and_evaluate,
                             model_name="tiny")
    assert list(first["not_run"]) == ["diabetic_retinopathy"]
    assert "downloads/manual" in first["not_run"]["diabetic_retinopathy"]
    records = reports.read_jsonl(os.path.join(out, "results.jsonl"))
    assert [r["task"] for r in records] == [
        n for n in vtab.TASK_NAMES if n != "diabetic_retinopathy"
    ]
    for r in records:
        assert r["test_examples"] == 4 and r["steps"] == 1
        assert 0.0 <= r["accuracy"] <= 1.0 and r["model"] == "tiny"
    # Every final run trained on train800val200 and scored on test, and
    # its checkpoints were removed after scoring.
    run_dir = os.path.join(out, "runs", "clevr_dist", "final")
    saved = json.load(open(os.path.join(run_dir, "config.json")))
    assert saved["input"]["train_split"] == "train[:800]+train[63000:63200]"
    assert saved["evals"]["test"]["split"] == "validation"
    assert not os.path.exists(os.path.join(run_dir, "checkpoints"))
    # A finished trial is reused, not retrained (there is no mock data here,
    # so training would fail); another config in its directory is refused.
    backbone = os.path.join(out, "backbone.npz")
    fields = pretrained.transfer_model_config(
        pretrained.NpzSource(backbone),
        {"dropout_rate": 0.0, "attention_dropout_rate": 0.0},
    )
    cfg = vtab_run.task_config(
        config, vtab.TASKS["clevr_dist"], fields, backbone, lr=0.01,
        steps=1, train_split="train800val200", eval_split="test",
    )
    # The checkpoints a run stopped before removing (after its
    # metrics.json) are removed when the trial is reused; kept ones stay.
    left = os.path.join(run_dir, "checkpoints")
    os.makedirs(left)
    open(os.path.join(left, "ckpt-1.index"), "w").close()
    vtab_run.run_trial(cfg, run_dir, train_lib.train_and_evaluate,
                       keep_checkpoints=True)
    assert os.path.exists(left)
    metrics = vtab_run.run_trial(cfg, run_dir, train_lib.train_and_evaluate)
    assert metrics == json.load(open(os.path.join(run_dir, "metrics.json")))
    assert not os.path.exists(left)
    # Logging and checkpoint settings may change (the docs say so), the
    # rematerialisation and accumulation (the same gradients), where the
    # data is, the host loop's length and how the evaluation is batched
    # (a smaller batch after running out of memory).
    cfg.evals.test.batch_size = 2
    cfg.evals.test.cache = not cfg.evals.test.cache
    cfg.log.every_steps = 7
    cfg.checkpoints.every_steps = 3
    cfg.model.remat = "block"
    cfg.trainer.accumulation_steps = 2
    cfg.trainer.steps_per_loop = 5
    cfg.input.data_dir = str(tmp_path / "moved")
    cfg.input.download = not cfg.input.download
    assert vtab_run.run_trial(cfg, run_dir,
                              train_lib.train_and_evaluate) == metrics
    cfg.schedule.lr = 0.02
    with pytest.raises(ValueError, match="another config"):
        vtab_run.run_trial(cfg, run_dir, train_lib.train_and_evaluate)

    # Rerun with the manual files in place: only Retinopathy runs.
    make_manual_files(data_dir, ["train", "test", "sample",
                                 "trainLabels.csv"])
    with tfds.testing.mock_data(**mock):
        second = vtab_run.run(config, source, out, train_lib.train_and_evaluate,
                             model_name="tiny")
    assert second["not_run"] == {}
    again = reports.read_jsonl(os.path.join(out, "results.jsonl"))
    assert again[:-1] == records  # finished tasks untouched
    assert again[-1]["task"] == "diabetic_retinopathy"

    # Reports: group means are the means of the task numbers.
    by_task = {r["task"]: r["accuracy"] for r in again}
    summary = json.load(open(os.path.join(out, "summary.json")))
    for group in vtab.GROUPS:
        values = [by_task[t.name] for t in vtab.tasks_in_group(group)]
        assert summary["groups"][group]["mean"] == pytest.approx(
            np.mean(values)
        )
    assert summary["groups"]["all"]["mean"] == pytest.approx(
        np.mean(list(by_task.values()))
    )
    md = open(os.path.join(out, "results.md")).read()
    row = next(line for line in md.splitlines() if line.startswith("| tiny"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    want = [summary["groups"][g]["mean"] for g in vtab.GROUPS + ("all",)]
    assert cells == [f"{100 * v:.2f}" for v in want]
    rows = list(csv.DictReader(open(os.path.join(out, "results.csv"))))
    assert len(rows) == 19
    for name in ("tasks.png", "groups.png"):
        png = open(os.path.join(out, name), "rb").read()
        image = tf.io.decode_png(png).numpy()
        assert image.shape[0] > 300 and image.shape[1] > 500
        assert image.std() > 10  # not blank
    assert not [f for f in os.listdir(out) if ".tmp-" in f]


def test_a_stop_while_the_reports_are_written_waits_for_all_of_them(
        tmp_path, consistent_mock_data, monkeypatch):
    """Ctrl-C while a task's results are written (its line, the CSV, the
    table, the summary, the charts): the files are written together, all
    naming the task, then the run stops."""
    import signal

    out = str(tmp_path / "out")
    source = tiny_source(str(tmp_path / "src.npz"))
    config = tiny_vtab_config(str(tmp_path / "data"))
    write_csv = reports.write_csv

    def pressed(*args, **kwargs):  # Ctrl-C after the CSV
        write_csv(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)

    monkeypatch.setattr(reports, "write_csv", pressed)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with tfds.testing.mock_data(num_examples=4), pytest.raises(
                KeyboardInterrupt):
            vtab_run.run(config, source, out, train_lib.train_and_evaluate,
                         tasks="dtd,svhn", model_name="tiny")
    finally:
        signal.signal(signal.SIGINT, previous)
    tasks = [r["task"] for r in reports.read_jsonl(
        os.path.join(out, "results.jsonl"))]
    assert tasks == ["dtd"]
    with open(os.path.join(out, "summary.json")) as f:
        assert list(json.load(f)["tasks"]) == tasks
    assert "| tiny" in open(os.path.join(out, "results.md")).read()
    assert os.path.exists(os.path.join(out, "tasks.png"))


def test_other_backbone_in_the_same_output_dir_is_refused(tmp_path):
    a = tiny_source(str(tmp_path / "a.npz"))
    b = tiny_source(str(tmp_path / "b.npz"))
    vtab_run.prepare_backbone(a, str(tmp_path / "out"))
    os.makedirs(tmp_path / "out" / vtab_run.RUNS / "dtd")  # a task began
    with pytest.raises(ValueError, match="use a new `output_dir`"):
        vtab_run.prepare_backbone(b, str(tmp_path / "out"))
    # Another file at the same path is another model.
    assert vtab_run.prepare_backbone(a, str(tmp_path / "out"))
    shutil.copyfile(b.path, a.path)
    with pytest.raises(ValueError, match="its files changed since"):
        vtab_run.prepare_backbone(a, str(tmp_path / "out"))


def test_a_deleted_backbone_still_keeps_out_another_model(tmp_path):
    """backbone.npz deleted (it is large): the stamp still refuses
    another model, and the same model's backbone is written again; with
    the stamp deleted too, results there are not added to."""
    a = tiny_source(str(tmp_path / "a.npz"))
    b = tiny_source(str(tmp_path / "b.npz"))
    out = str(tmp_path / "out")
    path = vtab_run.prepare_backbone(a, out)
    first = open(path, "rb").read()
    os.remove(path)
    os.makedirs(os.path.join(out, vtab_run.RUNS, "dtd"))  # a task began
    with pytest.raises(ValueError, match="holds results of another"):
        vtab_run.prepare_backbone(b, out)
    assert vtab_run.prepare_backbone(a, out) == path
    assert open(path, "rb").read() == first
    os.remove(path)
    os.remove(os.path.join(out, vtab_run.BACKBONE_SOURCE))
    reports.append_jsonl(os.path.join(out, reports.RESULTS_JSONL),
                         {"task": "dtd", "accuracy": 0.5})
    with pytest.raises(ValueError, match="holds VTAB runs but no "
                       "backbone.json"):
        vtab_run.prepare_backbone(b, out)


def test_a_backbone_no_task_started_from_is_written_anew(tmp_path):
    """An output_dir holding another model's backbone but no task run and
    no result (a run stopped before its first task): the backbone and
    its stamp are written anew for this model, not refused as results."""
    a = tiny_source(str(tmp_path / "a.npz"))
    b = tiny_source(str(tmp_path / "b.npz"))
    out = str(tmp_path / "out")
    path = vtab_run.prepare_backbone(a, out)
    first = open(path, "rb").read()
    assert vtab_run.prepare_backbone(b, out) == path
    assert open(path, "rb").read() != first
    with open(os.path.join(out, vtab_run.BACKBONE_SOURCE)) as f:
        assert json.load(f)["source"] == os.path.abspath(b.path)


def test_backbone_of_every_source_kind_and_of_an_earlier_stamp(tmp_path):
    """A source is asked what every kind answers (its path and kind): a
    .keras file's backbone is written as an .npz's is; an output_dir
    stamped by an earlier version (with an .npz's variant) is still the
    same backbone."""
    a = tiny_source(str(tmp_path / "a.npz"))
    model = pretrained.load_model(a, 16)  # the file's own resolution
    model.save(str(tmp_path / "a.keras"))
    keras_source = pretrained.resolve(str(tmp_path / "a.keras"))
    out = str(tmp_path / "out_keras")
    path = vtab_run.prepare_backbone(keras_source, out)
    from_npz = vtab_run.prepare_backbone(a, str(tmp_path / "out_npz"))
    got, want = checkpoint_io.read_npz(path), checkpoint_io.read_npz(from_npz)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
    with open(os.path.join(out, vtab_run.BACKBONE_SOURCE)) as f:
        stamp = json.load(f)
    assert stamp["kind"] == "keras" and "variant" not in stamp
    os.makedirs(os.path.join(out, vtab_run.RUNS, "dtd"))  # a task began
    with pytest.raises(ValueError, match="kind 'keras', now 'npz'"):
        vtab_run.prepare_backbone(pretrained.NpzSource(path), out)
    # An earlier version's stamp: source, variant, keep_pre_logits.
    stamp_path = os.path.join(str(tmp_path / "out_npz"),
                              vtab_run.BACKBONE_SOURCE)
    with open(stamp_path, "w") as f:
        json.dump(dict(source=os.path.abspath(a.path), variant=None,
                       keep_pre_logits=False), f)
    assert vtab_run.prepare_backbone(a, str(tmp_path / "out_npz")) == (
        from_npz)


def test_each_tasks_data_is_prepared_in_the_clusters_turn(tmp_path):
    """run() hands each task's preparation to `in_turn` (a multi-worker
    run's chief first, `training.distribute.prepare_in_turn`); what it
    raises (here the chief's failure passed on, and a task not prepared)
    skips that task as a missing download does, and the run goes on."""
    config = tiny_vtab_config(str(tmp_path / "empty"))
    config.input.download = False
    turns = []

    def in_turn(prepare, name):
        turns.append(name)
        if name == "dtd":
            raise vtab.DataUnavailableError(
                "The chief (worker 0 (h:1)) could not prepare dtd: no route")
        return prepare()

    result = vtab_run.run(config, tiny_source(str(tmp_path / "src.npz")),
                          str(tmp_path / "out"), train_lib.train_and_evaluate,
                          tasks="dtd,caltech101", in_turn=in_turn)
    assert turns == ["caltech101", "dtd"]  # VTAB's order
    assert result["records"] == []
    assert result["not_run"]["dtd"] == (
        "The chief (worker 0 (h:1)) could not prepare dtd: no route")
    assert "is not prepared in" in result["not_run"]["caltech101"]


def test_run_rejects_unknown_tasks_before_work(tmp_path):
    config = tiny_vtab_config(str(tmp_path))
    with pytest.raises(ValueError, match="Valid tasks: caltech101"):
        vtab_run.run(config, pretrained.NpzSource("/nonexistent.npz"),
                     str(tmp_path / "o"), train_lib.train_and_evaluate,
                     tasks="natural,bogus")
    assert not os.path.exists(tmp_path / "o")


def test_a_rerun_of_another_recipe_is_refused(tmp_path, monkeypatch):
    """Finished tasks of one recipe and new tasks of another would be
    averaged into one group mean: a rerun into the same output folder with
    another learning rate (a recipe field) is refused by name, before any
    task trains; one that changes only what does not make the scores (the
    task list, logging, where checkpoints go) goes on."""
    from keras_vit.configs import vtab as vtab_config

    monkeypatch.setattr(vtab_run, "prepare_backbone",
                        lambda source, out, keep=False: "/b.npz")
    monkeypatch.setattr(pretrained, "transfer_model_config",
                        lambda source, overrides=None: {"hidden_size": 8})
    monkeypatch.setattr(vtab, "prepare", lambda *args, **kwargs: None)
    trained = []

    def train_fn(config, workdir, strategy):
        trained.append((workdir, config.schedule.lr))
        return dict(test_accuracy=0.5, test_top5_accuracy=1.0, test_loss=1.0,
                    test_examples=10)

    source = tiny_source(str(tmp_path / "src.npz"))
    out = str(tmp_path / "out")
    config = vtab_config.get_config()
    config.evals.vtab.sweep.enabled = False
    assert len(vtab_run.run(config, source, out, train_fn,
                            tasks="dtd")["records"]) == 1
    other = vtab_config.get_config()
    other.evals.vtab.sweep.enabled = False
    other.schedule.lr = 0.003
    with pytest.raises(ValueError, match=(
            r"holds VTAB results of another recipe \(config.schedule.lr: "
            r"0.01 there, 0.003 asked\)")):
        vtab_run.run(other, source, out, train_fn, tasks="dtd,cifar100")
    # Tasks trained on one batch over and over (synthetic_data) or in
    # another data order are of another recipe too.
    for field, value, said in (("synthetic_data", True, "True"),
                               ("shuffle_buffer", 8, "8")):
        fake = vtab_config.get_config()
        fake.evals.vtab.sweep.enabled = False
        fake.input[field] = value
        with pytest.raises(ValueError, match=(
                rf"another recipe \(config.input.{field}: \S+ there, "
                rf"{said} asked\)")):
            vtab_run.run(fake, source, out, train_fn, tasks="dtd,cifar100")
    assert len(trained) == 1
    # A recipe.json that recorded the config's sizes (earlier versions):
    # they are not compared, nor the input's shuffle_buffer and
    # synthetic_data where it did not record them (earlier versions).
    recipe_path = os.path.join(out, "recipe.json")
    with open(recipe_path) as f:
        older = json.load(f)
    older["model"].update(variant="B/16", hidden_size=768, remat="none")
    del older["input"]["shuffle_buffer"], older["input"]["synthetic_data"]
    with open(recipe_path, "w") as f:
        json.dump(older, f)
    config.log.every_steps = 7
    config.model.variant = "S/16"  # the backbone's architecture decides
    result = vtab_run.run(config, source, out, train_fn, tasks="dtd,cifar100")
    assert [r["task"] for r in result["records"]] == ["dtd", "cifar100"]
    assert len(trained) == 2


def test_an_image_size_of_zero_is_the_backbones_resolution(tmp_path,
                                                           monkeypatch):
    """config.model.image_size=0 (the model's own resolution, as
    fine-tuning reads it) passes the check of the backbone's patches."""
    from keras_vit.configs import vtab as vtab_config

    monkeypatch.setattr(vtab_run, "prepare_backbone",
                        lambda source, out, keep=False: "/b.npz")
    monkeypatch.setattr(pretrained, "transfer_model_config",
                        lambda source, overrides=None: {"hidden_size": 8})
    monkeypatch.setattr(vtab, "prepare", lambda *args, **kwargs: None)
    config = vtab_config.get_config()
    config.evals.vtab.sweep.enabled = False
    config.model.image_size = 0
    sizes = []

    def train_fn(config, workdir, strategy):
        sizes.append(config.model.image_size)
        return dict(test_accuracy=0.5, test_top5_accuracy=1.0, test_loss=1.0,
                    test_examples=10)

    source = tiny_source(str(tmp_path / "src.npz"))
    result = vtab_run.run(config, source, str(tmp_path / "out"), train_fn,
                          tasks="dtd")
    assert len(result["records"]) == 1 and sizes == [0]


def test_finished_tasks_without_a_recipe_are_not_added_to(tmp_path):
    """results.jsonl without recipe.json (deleted, or from before it was
    written): the recipe of the finished tasks is not known, so
    keras-vit-evaluate does not average new tasks with them; refused in
    one line before any task starts, and no recipe.json is written."""
    from tests import console

    source = tiny_source(str(tmp_path / "src.npz"))
    out = str(tmp_path / "out")
    vtab_run.prepare_backbone(source, out)  # the model is known
    reports.append_jsonl(os.path.join(out, reports.RESULTS_JSONL),
                         {"task": "dtd", "accuracy": 0.5})
    result = console.run("evaluate", [
        "--mode=vtab", "--config=vtab", f"--model={source.path}",
        f"--output_dir={out}", "--tasks=dtd,cifar100",
        f"--config.input.data_dir={tmp_path / 'data'}"])
    assert result.returncode == 1, result.stderr[-3000:]
    err = [line for line in result.stderr.splitlines()
           if line.startswith("keras-vit-evaluate: error:")]
    assert err == [
        f"keras-vit-evaluate: error: {out} holds VTAB results but no "
        "recipe.json saying which recipe made them: the new tasks could "
        "be averaged with another recipe's. Use a new output_dir (or put "
        "back its recipe.json)."], result.stderr[-3000:]
    assert "VTAB task" not in result.stderr
    assert not os.path.exists(os.path.join(out, vtab_protocol.RECIPE))


def test_a_run_with_no_result_gives_the_first_reason_whole():
    """The one line of a VTAB or few-shot run that produced nothing: the
    first reason whole (its fix with it), each other by its first
    sentence; the generic fix only where the first reason names none."""
    dtd = ("dtd (DTD): cannot download from www.robots.ox.ac.uk (Name or "
           "service not known). Without network here, prepare it where "
           "there is one (`tfds build dtd --data_dir=DIR`, copy DIR here) "
           "and set config.input.data_dir=DIR.")
    line = reports.nothing_ran("VTAB task", {
        "dtd": dtd, "resisc45": "resisc45 needs a manual download, e.g. "
        "from its site. Its files go into X."})
    assert line == (
        "no VTAB task produced a result (dtd: " + dtd.rstrip(".")
        + "; resisc45: resisc45 needs a manual download, e.g. from its site)"
        " (the log above gives each reason whole).")
    assert reports.nothing_ran("few-shot data set", {"pets": "Offline."}) == (
        "no few-shot data set produced a result (pets: Offline). Prepare "
        "the data (config.input.download, config.input.data_dir) and run "
        "the same command again.")
