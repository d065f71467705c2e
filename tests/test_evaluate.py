"""keras-vit-evaluate: plain evaluation against a direct computation, the
three modes through the command line, and its errors.

The command line runs in-process (so TFDS mock data applies), each call
with flags of its own.
"""

import importlib.util
import json
import os
import shutil
import sys
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds

from keras_vit import config as config_lib
from keras_vit import create_model
from keras_vit.checkpoint import loader as pretrained
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.checkpoint.resolution import rebuild_at_resolution
from keras_vit.commands import evaluate as evaluate_main
from keras_vit.commands import result_file
from keras_vit.data import pipeline as input_pipeline
from keras_vit.data import preprocessing
from keras_vit.data.sources import digits_split
from keras_vit.errors import UsageError
from keras_vit.evaluation import reports, vtab_run
from keras_vit.evaluation.accuracy import evaluate_model
from keras_vit.scoring.evaluator import Evaluator
from keras_vit.training import distribute, train_lib
from tests import tiny as tiny_configs
from tests.photo_folder import write_photo_folder
from tests.reliability_cases import check_says, covers
from tests.strategies import two_cpu_mirrored

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTAB_CONFIG = os.path.join(ROOT, "configs", "vtab.py")
FEWSHOT_CONFIG = os.path.join(ROOT, "configs", "fewshot.py")
TINY_VTAB = [
    "--config.model.image_size=32", "--config.input.batch_size=4",
    "--config.evals.test.batch_size=4", "--config.trainer.total_steps=1",
    "--config.trainer.steps_per_loop=1", "--config.checkpoints.every_steps=0",
    "--config.trainer.jit_compile=False", "--config.input.shuffle_buffer=8",
]
MOCK = dict(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE)


def cli(*args):
    """Runs keras-vit-evaluate in-process; returns the exit status."""
    return evaluate_main.main(["keras-vit-evaluate", *args])


def tiny(num_classes=10, image_size=32, **kw):
    return create_model(
        None, num_classes=num_classes, image_size=image_size, patch_size=8,
        hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64,
        head_zero_init=False, **kw,
    )


def direct_digits_metrics(model, size=32):
    """top-1, top-5 and mean cross-entropy with NumPy from model.predict."""
    x, y = digits_split("test")
    images = np.stack([
        preprocessing.preprocess_eval(tf.constant(i[..., None]), size).numpy()
        for i in x
    ])
    logits = model.predict(images, batch_size=360, verbose=0).astype(
        np.float64
    )
    top5 = np.argsort(-logits, axis=1)[:, :5]
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    return {
        "accuracy": np.mean(logits.argmax(1) == y),
        "top5_accuracy": np.mean((top5 == y[:, None]).any(1)),
        "loss": -np.mean(logp[np.arange(len(y)), y]),
        "num_examples": len(y),
    }


def digits_data(size=32):
    """(config.input, RunInput) of the digits at `size`."""
    return (config_lib.complete(dict(dataset="digits"), "input"),
            input_pipeline.RunInput(image_size=size))


@pytest.mark.parametrize("replicas", [1, 2])
def test_evaluate_model_equals_direct_computation(replicas):
    model = tiny()
    want = direct_digits_metrics(model)
    if replicas == 2:
        strategy = two_cpu_mirrored()
        with strategy.scope():
            evaluated = tiny()
        evaluated.set_weights(model.get_weights())
    else:
        strategy, evaluated = None, model
    # 360 = 2 * 128 + 104: the last batch is padded, the padding masked.
    got = evaluate_model(
        evaluated, *digits_data(), "test", 128, strategy, progress=True
    )
    assert got["num_examples"] == 360
    for key in ("accuracy", "top5_accuracy"):
        assert got[key] == pytest.approx(want[key], abs=1e-9)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    assert 0.0 < got["accuracy"] < got["top5_accuracy"] < 1.0


@pytest.mark.parametrize("num_classes, ranked", [(5, False), (6, True)])
def test_top5_is_reported_only_where_five_classes_do_not_cover_all(
        num_classes, ranked):
    """With 5 classes or fewer every label is in the top 5: its accuracy
    is None (left out of the lines and tables), not a constant 1.0."""
    from keras_vit.scoring.evaluator import Evaluator

    model = tiny(num_classes=num_classes, image_size=16)
    evaluator = Evaluator(model, tf.distribute.get_strategy(),
                          num_classes=num_classes)
    images = tf.random.stateless_uniform((8, 16, 16, 3), (1, 2), -1, 1)
    labels = tf.constant([0, 1, 2, 3, 4, 0, 1, 2], tf.int32)
    got = evaluator.evaluate([(images, labels, tf.ones([8]))])
    assert got["num_examples"] == 8
    if ranked:
        logits = model.predict(images, verbose=0)
        top5 = np.argsort(-logits, axis=1)[:, :5]
        assert got["top5_accuracy"] == pytest.approx(
            np.mean((top5 == labels.numpy()[:, None]).any(1)))
    else:
        assert got["top5_accuracy"] is None


def test_top5_counts_five_classes_when_logits_tie():
    """A head of zeros (an untrained zero-initialised one, or a collapsed
    model) ties every logit: five classes are its top 5, the first five
    as argmax takes the first, so top-5 is the share of labels 0-4, not
    1.0 (`tf.nn.in_top_k` counts every class tied at the fifth place)."""
    model = tiny(num_classes=10, image_size=16)
    head = model.get_layer("head")
    head.set_weights([np.zeros_like(w) for w in head.get_weights()])
    evaluator = Evaluator(model, tf.distribute.get_strategy(),
                          num_classes=10)
    images = tf.random.stateless_uniform((20, 16, 16, 3), (1, 2), -1, 1)
    labels = tf.constant(list(range(10)) * 2, tf.int32)
    got = evaluator.evaluate([(images, labels, tf.ones([20]))])
    assert got["top5_accuracy"] == 0.5
    assert got["accuracy"] == 0.1  # argmax: class 0


def test_evaluate_model_uses_the_trainers_evaluation_step():
    """Training and evaluate.py score a model with one step, so a change
    to it (a metric, the masking) reaches both."""
    traced = []
    step = Evaluator._eval_step_fn

    def spy(self, *args):
        traced.append(self)
        return step(self, *args)

    with mock.patch.object(Evaluator, "_eval_step_fn", spy):
        got = evaluate_model(
            tiny(), *digits_data(), "test", 180, progress=False
        )
    assert traced and got["num_examples"] == 360


def test_cli_eval_of_a_run_equals_its_own_final_metrics(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location(
        "digits_cfg", os.path.join(ROOT, "configs", "digits.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    config.model.update(hidden_size=32, num_layers=1, num_heads=2,
                        mlp_dim=64)
    config.schedule.warmup_steps = 1
    tiny_configs.set_fields(config, dict(
        total_steps=2, steps_per_loop=1, batch_size=32, jit_compile=False,
        eval_every_steps=0, checkpoint_every_steps=0, log_every_steps=1))
    workdir = str(tmp_path / "run")
    final = train_lib.train_and_evaluate(config, workdir)
    capsys.readouterr()
    out_dir = str(tmp_path / "eval")
    assert cli("--mode=eval", f"--workdir={workdir}",
               f"--output_dir={out_dir}", "--batch_size=100") == 0
    printed = capsys.readouterr().out
    got = json.loads(printed[printed.index("{"):])
    assert got["num_examples"] == final["test_examples"] == 360
    assert got["accuracy"] == pytest.approx(final["test_accuracy"])
    assert got["top5_accuracy"] == pytest.approx(final["test_top5_accuracy"])
    assert got["loss"] == pytest.approx(final["test_loss"], rel=1e-5)
    saved = json.load(open(os.path.join(out_dir, "eval_digits_test.json")))
    assert saved["accuracy"] == got["accuracy"]


def test_cli_eval_of_npz_and_keras_at_another_resolution(tmp_path, capsys):
    model = tiny(image_size=16)
    npz = str(tmp_path / "m.npz")
    checkpoint.save_npz(model, npz)
    keras_path = str(tmp_path / "m.keras")
    model.save(keras_path)
    # Without --image_size, both evaluate at the resolution the model was
    # trained at (an .npz: its own position-embedding grid's), not at 224.
    want = direct_digits_metrics(model, 16)
    for source in (f"--model={npz}", f"--model={keras_path}"):
        assert cli("--mode=eval", source, "--dataset=digits",
                   "--split=test") == 0
        printed = capsys.readouterr().out
        got = json.loads(printed[printed.index("{"):])
        assert got["image_size"] == [16, 16]
        assert got["accuracy"] == pytest.approx(want["accuracy"])
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)
    # The reference: the same weights rebuilt at 32 (position embeddings
    # resized by the checkpoint module).
    want = direct_digits_metrics(rebuild_at_resolution(model, 32))
    for source in (f"--model={npz}", f"--model={keras_path}"):
        assert cli("--mode=eval", source, "--dataset=digits", "--split=test",
                   "--image_size=32") == 0
        printed = capsys.readouterr().out
        got = json.loads(printed[printed.index("{"):])
        assert got["accuracy"] == pytest.approx(want["accuracy"])
        assert got["loss"] == pytest.approx(want["loss"], rel=1e-4)


def test_cli_errors_name_the_fix(tmp_path, capsys):
    npz = str(tmp_path / "m.npz")
    checkpoint.save_npz(tiny(num_classes=7), npz)
    cases = [
        (("--mode=vtab", f"--config={VTAB_CONFIG}", f"--model={npz}",
          f"--output_dir={tmp_path}", "--tasks=natural,dsprite_loc"),
         ("Valid tasks:", "dsprites_loc")),
        (("--mode=eval", f"--model={npz}", "--dataset=digits"),
         ("predicts 7 classes but digits has 10",)),
        (("--mode=eval", "--dataset=digits"),
         ("--model=SOURCE, or --workdir=RUN",)),
        (("--mode=eval", f"--model={npz}"), ("needs a data source",)),
        (("--mode=vtab", f"--model={npz}", f"--config={VTAB_CONFIG}"),
         ("--output_dir",)),
        (("--mode=eval", f"--model={tmp_path}/none.npz", "--dataset=digits"),
         ("none.npz: no such file or folder",)),
        (("--mode=eval", f"--model={npz}", "--dataset=digits",
          "--tasks=natural"), ("--tasks goes with --mode=vtab only",)),
        (("--mode=eval", f"--model={npz}", "--dataset=digits",
          "--batch_size=0"), ("--batch_size=0: give a batch of at least 1",)),
        (("--mode=vtab", f"--config={VTAB_CONFIG}", f"--model={npz}",
          f"--output_dir={tmp_path}", "--split=train"),
         ("--split goes with --mode=eval only",)),
        (("--mode=vtab", f"--config={VTAB_CONFIG}", f"--model={npz}",
          f"--output_dir={tmp_path}", "--image_size=16"),
         ("--image_size goes with --mode=eval or fewshot only, not "
          "--mode=vtab (VTAB-1k trains at --config.model.image_size).",)),
        (("--mode=eval", f"--model={npz}", "--dataset=folder",
          f"--data_dir={tmp_path}/moved"), ("set --data_dir to the folder",)),
    ]
    for args, says in cases:
        assert cli(*args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(
            "keras-vit-evaluate: error: "), err
        for text in says:
            assert text in err[0]


def test_cli_vtab_one_task(tmp_path, capsys):
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(tiny(num_classes=3, image_size=16), npz)
    out = str(tmp_path / "out")
    with tfds.testing.mock_data(**MOCK):
        code = cli("--mode=vtab", f"--config={VTAB_CONFIG}", *TINY_VTAB,
                   f"--config.input.data_dir={tmp_path}", f"--model={npz}",
                   f"--output_dir={out}", "--tasks=smallnorb_elev",
                   "--name=tiny")
    assert code == 0
    printed = capsys.readouterr().out
    assert "## VTAB-1k" in printed and "| tiny |" in printed
    (record,) = reports.read_jsonl(os.path.join(out, "results.jsonl"))
    assert record["task"] == "smallnorb_elev"
    assert record["lr"] == 0.01 and record["sweep"] == []


@pytest.mark.slow
def test_sweep_picks_the_best_pair_on_two_replicas(tmp_path):
    spec = importlib.util.spec_from_file_location("vtab_cfg", VTAB_CONFIG)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = module.get_config()
    tiny_configs.set_fields(config, dict(
        image_size=32, batch_size=4, eval_batch_size=4, total_steps=1,
        steps_per_loop=1, checkpoint_every_steps=0, jit_compile=False,
        shuffle_buffer=8, data_dir=str(tmp_path)))
    config.evals.vtab.sweep.update(enabled=True, lrs=(0.001, 0.5), steps=(1,))
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(tiny(num_classes=3, image_size=16), npz)
    strategy = two_cpu_mirrored()
    out = str(tmp_path / "out")
    with tfds.testing.mock_data(**MOCK):
        result = vtab_run.run(config, pretrained.NpzSource(npz), out,
                              train_lib.train_and_evaluate, strategy,
                              tasks="dsprites_loc")
    (record,) = result["records"]
    trials = record["sweep"]
    assert [(t["lr"], t["steps"]) for t in trials] == [(0.001, 1), (0.5, 1)]
    best = max(trials, key=lambda t: t["val_accuracy"])
    assert (record["lr"], record["steps"]) == (best["lr"], best["steps"])
    runs = os.path.join(out, "runs", "dsprites_loc")
    assert sorted(os.listdir(runs)) == ["final", "lr0.001_steps1",
                                        "lr0.5_steps1"]
    trial = json.load(open(os.path.join(runs, "lr0.5_steps1", "config.json")))
    assert trial["input"]["train_split"] == "train[:800]"
    assert trial["evals"]["test"]["split"] == "train[589824:590024]"
    final = json.load(open(os.path.join(runs, "final", "config.json")))
    assert final["schedule"]["lr"] == record["lr"]
    assert final["input"]["train_split"] == (
        "train[:800]+train[589824:590024]")


def test_cli_fewshot_on_digits(tmp_path, capsys):
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    out = str(tmp_path / "fs")
    probe = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
             "--config.model.image_size=32",
             "--config.input.pp.eval_resize_size=36",
             "--config.evals.fewshot.shots=(1,2)",
             "--config.evals.fewshot.seeds=(0,)", f"--output_dir={out}")
    code = cli(*probe, f"--model={path}")
    assert code == 0
    saved = json.load(open(os.path.join(out, "fewshot.json")))
    assert set(saved["results"]["digits"]) == {"1", "2"}
    # The model probed, not the config's B/16.
    assert {k: saved["architecture"][k] for k in (
        "hidden_size", "num_layers", "patch_size")} == {
            "hidden_size": 32, "num_layers": 1, "patch_size": 8}
    assert saved["config"]["model"]["variant"] == "B/16"
    assert len(saved["results"]["digits"]["2"]["per_seed"]) == 1
    md = open(os.path.join(out, "fewshot.md")).read()
    assert "| digits |" in md and "2-shot" in md
    assert "| digits |" in capsys.readouterr().out
    # Another model into the same folder is refused before it loads: the
    # first model's results stay as they were.
    before = open(os.path.join(out, "fewshot.json")).read()
    other = str(tmp_path / "other.keras")
    tiny(representation_size=16).save(other)
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               f"--model={other}", f"--output_dir={out}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "holds the few-shot results of model" in err[0]
    assert "pass another --output_dir" in err[0] and "other.keras" in err[0]
    assert open(os.path.join(out, "fewshot.json")).read() == before
    # So is a model of the same file name in another folder.
    os.makedirs(tmp_path / "b")
    tiny(representation_size=16).save(str(tmp_path / "b" / "m.keras"))
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               f"--model={tmp_path / 'b' / 'm.keras'}",
               f"--output_dir={out}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"holds the few-shot results of model " \
        f"'{path}'" in err[0], err
    assert open(os.path.join(out, "fewshot.json")).read() == before
    assert saved["model_location"] == path
    # The model named as --config.init.model (big_vision's way): the same
    # results, kept; beside another --model, refused. (--workdir beside it
    # gives the output folder and config, as beside --model.)
    assert cli(*probe, f"--config.init.model={path}") == 0
    assert json.load(open(os.path.join(out, "fewshot.json")))[
        "results"] == saved["results"]
    capsys.readouterr()
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               f"--config.init.model={path}", f"--model={other}",
               f"--output_dir={out}") == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"keras-vit-evaluate: error: --model={other} and --config.init."
        f"model={path} name two models to evaluate: keep one."]


@covers("nonfinite_activations")
def test_a_model_that_overflows_scores_nothing(tmp_path, capsys, caplog):
    """A model whose activations overflow (finite weights near float32's
    limit, which loading lets through): the few-shot probe is refused in
    one line, nothing written (its NaN features made every prediction
    class 0, scored as that class's share); --mode=eval counts a row of
    NaN logits as no hit (argmax made it class 0: a tenth of the digits
    right)."""
    model = tiny()
    kernel = model.get_layer("embedding").weights[0]
    kernel.assign(np.full(kernel.shape, 3e38, np.float32))
    path = str(tmp_path / "m.keras")
    model.save(path)
    out = str(tmp_path / "fs")
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               "--config.model.image_size=32",
               "--config.input.pp.eval_resize_size=36",
               "--config.evals.fewshot.shots=(1,)",
               "--config.evals.fewshot.seeds=(0,)",
               f"--model={path}", f"--output_dir={out}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "keras-vit-evaluate: error: The model gives features that are not "
        "finite (NaN or inf) for 1437 of the 1437 images of 'train' of "
        "digits: a linear probe on them would measure nothing. Its weights "
        "hold NaN or inf, or its activations overflow: probe a checkpoint "
        "whose training loss was finite (an earlier one), or a model "
        "trained in float32."], err
    check_says("nonfinite_activations", err[0])
    assert not os.path.exists(os.path.join(out, "fewshot.json"))
    assert cli("--mode=eval", f"--model={path}", "--dataset=digits",
               "--split=test", f"--output_dir={tmp_path / 'ev'}") == 0
    printed = capsys.readouterr().out
    got = json.loads(printed[printed.index("{"):])
    assert got["num_examples"] == 360
    assert got["accuracy"] == 0.0 and got["top5_accuracy"] == 0.0
    assert got["loss"] is None  # NaN, as JSON's null
    # The log line says it as the file does, with the scores alone.
    logged, = [r.getMessage() for r in caplog.records
               if r.getMessage().startswith("eval digits test: ")]
    assert logged == ("eval digits test: loss null (not finite), "
                      "accuracy 0, top5_accuracy 0, num_examples 360"), logged


def test_fewshot_results_of_a_replaced_model_file_are_not_kept(
        tmp_path, capsys):
    """fewshot.json records the model's files (name, size, SHA-256): a
    rerun on one data set keeps another's results of the same file, and
    is refused, the file unchanged, where another model was saved at the
    same path since (the results it would keep are of the old one)."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    out = str(tmp_path / "fs")
    args = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
            "--config.evals.fewshot.shots=(1,)",
            "--config.evals.fewshot.seeds=(0,)", f"--model={path}",
            f"--output_dir={out}")
    assert cli(*args) == 0
    result = os.path.join(out, "fewshot.json")
    saved = json.load(open(result))
    [(name, size, digest)] = saved["model_files"]
    assert (name, size) == ("m.keras", os.path.getsize(path))
    assert len(digest) == 64
    # As if another data set had been probed before (its results kept).
    saved["results"]["pets"] = {"1": {"per_seed": [0.5]}}
    with open(result, "w") as f:
        json.dump(saved, f)
    assert cli(*args) == 0
    assert json.load(open(result))["results"]["pets"] == {
        "1": {"per_seed": [0.5]}}
    before = open(result).read()
    tiny(representation_size=16).save(path)  # new weights, same path
    capsys.readouterr()
    assert cli(*args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "holds few-shot results of pets of the model at" in err[0]
    assert "its files changed since" in err[0]
    assert open(result).read() == before


def test_a_fewshot_rerun_keeps_the_other_data_sets(tmp_path, caplog):
    """The same model's fewshot.json: the data sets a rerun does not probe
    are kept (same recipe), or the rerun is refused, naming what differs
    (another recipe); one that probes them all again keeps the earlier
    file apart, said in the log, rather than overwrite it."""
    from keras_vit.evaluation import fewshot_reports

    facts = dict(image_size=32, resize_size=36, model_location="/m.keras",
                 config={"evals": {"fewshot": {
                     "type": "fewshot", "shots": [1], "l2_reg": 1024.0,
                     "datasets": {"a": {}, "b": {}}}}})
    held = {"a": {"1": {"per_seed": [0.5]}}, "b": {"1": {"per_seed": [0.25]}}}
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m.keras", held, {},
                                          **facts)
    before = (tmp_path / "fewshot.json").read_text()
    kept = fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m.keras", ["a"], **facts)
    assert kept == {"b": held["b"]}
    other = json.loads(json.dumps(facts))
    other["config"]["evals"]["fewshot"]["shots"] = [1, 5]
    other["image_size"] = 64
    with pytest.raises(UsageError) as info:
        fewshot_reports.check_fewshot_folder(
            str(tmp_path), "m.keras", ["a"], **other)
    assert str(info.value) == (
        f"{tmp_path}/fewshot.json holds few-shot results of b of the model "
        "at '/m.keras', made otherwise (config.evals.fewshot.shots: [1] "
        "there, [1, 5] asked; the image size: 32 there, 64 asked), which "
        "this run would drop: probe them too (list them in the config's "
        "data sets), or pass another --output_dir.")
    # The same recipe probing both again: nothing kept, nothing set aside.
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m.keras", ["a", "b"], **facts) == {}
    assert (tmp_path / "fewshot.json").read_text() == before
    # Another probing both: the earlier results are kept apart, not lost.
    caplog.set_level("WARNING", logger="absl")
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m.keras", ["a", "b"], **other) == {}
    assert (tmp_path / "fewshot.before-1.json").read_text() == before
    assert (tmp_path / "fewshot.before-1.md").exists()
    assert not (tmp_path / "fewshot.json").exists()
    assert "held few-shot results of a, b made otherwise (config.evals." \
        "fewshot.shots: [1] there, [1, 5] asked; the image size: 32 " \
        "there, 64 asked): kept apart as fewshot.before-1.json" in caplog.text
    # A fewshot.before-2.md alone (its JSON deleted by hand): the results
    # go to the first name free for both files, and it stays as it was.
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m.keras", held, {},
                                          **facts)
    (tmp_path / "fewshot.before-2.md").write_text("mine")
    fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m.keras", ["a", "b"], **other)
    assert (tmp_path / "fewshot.before-3.json").read_text() == before
    assert (tmp_path / "fewshot.before-2.md").read_text() == "mine"


def test_data_sets_probed_before_are_kept_not_probed_again(tmp_path):
    """A run stopped part way: the data sets its fewshot.json holds,
    probed with the same model files, recipe and data set entry, are not
    probed again; another entry, recipe or file contents are."""
    from keras_vit.evaluation import fewshot_reports

    facts = dict(image_size=32, resize_size=36, model_location="/m.keras",
                 model_files=[["m.keras", 10, "ab"]],
                 config={"evals": {"fewshot": {
                     "type": "fewshot", "shots": [1], "l2_reg": 1024.0,
                     "datasets": {"a": {"train_split": "train"},
                                  "b": {"train_split": "train"}}}}})
    held = {"a": {"1": {"per_seed": [0.5]}}}
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m.keras", held, {},
                                          **facts)
    folder = str(tmp_path)
    assert fewshot_reports.probed_before(folder, ["a", "b"], **facts) == held
    other = json.loads(json.dumps(facts))
    other["config"]["evals"]["fewshot"]["datasets"]["a"]["train_split"] = \
        "train[:50%]"
    assert fewshot_reports.probed_before(folder, ["a", "b"], **other) == {}
    for field, value in (("model_files", [["m.keras", 10, "cd"]]),
                         ("resize_size", 40), ("model_files", None)):
        assert fewshot_reports.probed_before(
            folder, ["a"], **dict(facts, **{field: value})) == {}


def test_cli_fewshot_reads_the_label_key_given(tmp_path, caplog, capsys):
    """--config.input.label_key (and image_key) name the features the
    few-shot data sets are read by, as the other modes read them: CIFAR-
    100's 20 coarse labels (it probed the 100 fine ones without a word),
    recorded in the recipe; a feature that is no class label is one
    line."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    common = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:cifar100",
              f"--config.input.data_dir={tmp_path}",
              "--config.evals.fewshot.shots=(1,)",
              "--config.evals.fewshot.seeds=(0,)", f"--model={path}",
              "--image_size=32")
    caplog.set_level("INFO", logger="absl")
    with tfds.testing.mock_data(**MOCK):
        for key, classes in (("label", 100), ("coarse_label", 20)):
            caplog.clear()
            out = str(tmp_path / key)
            assert cli(*common, f"--config.input.label_key={key}",
                       f"--output_dir={out}") == 0
            assert f"cifar100 ({classes} classes)" in caplog.text
            with open(os.path.join(out, "fewshot.json")) as f:
                assert json.load(f)["config"]["input"]["label_key"] == key
        capsys.readouterr()
        assert cli(*common, "--config.input.label_key=id",
                   f"--output_dir={tmp_path / 'id'}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["keras-vit-evaluate: error: --config.input.label_key='id' "
                   "of cifar100 is a Text feature, not a class label: "
                   "keras_vit reads one class per image (a TFDS ClassLabel). "
                   "Set --config.input.label_key to 'label' or "
                   "'coarse_label'."]


def test_cli_fewshot_on_a_photo_folder_needs_every_class_in_its_pool(
        tmp_path, capsys, caplog):
    """A few-shot probe of the user's photos: one class folder, or a class
    with test photos and none in the pool of shots, is refused as training
    refuses it (it scored 100%, or counted that class's photos wrong);
    the folder itself is probed."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    for name in ("both", "untrained", "one"):
        for split in ("train", "test"):
            write_photo_folder(tmp_path / name, per_class=3, split=split)
    shutil.rmtree(tmp_path / "untrained" / "train" / "flower")
    for split in ("train", "test"):
        shutil.rmtree(tmp_path / "one" / split / "flower")

    def probe(name):
        return cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
                   "--config.evals.fewshot.datasets.digits.dataset=folder",
                   f"--config.input.data_dir={tmp_path / name}",
                   "--config.evals.fewshot.shots=(1,2)",
                   "--config.evals.fewshot.seeds=(0,)", "--image_size=32",
                   f"--model={path}", f"--output_dir={tmp_path / name}_fs")

    caplog.set_level("INFO", logger="absl")
    assert probe("both") == 0
    assert "few-shot data set 1 of 1: digits (2 classes)" in caplog.text
    capsys.readouterr()
    assert probe("untrained") == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"keras-vit-evaluate: error: Image folder {tmp_path / 'untrained'}: "
        "class flower has images in split test but none in split train, "
        "the probe's shots, so it would never be predicted: add its images "
        "there, or rename the folder to the class it belongs to."]
    assert probe("one") == 1
    assert f"Image folder {tmp_path / 'one'} has one class (china): a " \
        "probe needs at least two class folders." in (
            capsys.readouterr().err)
    # A split the probe does not read (val/) may hold another class.
    for split in ("train", "test", "val"):
        write_photo_folder(tmp_path / "withval", per_class=2, split=split)
    shutil.copytree(tmp_path / "withval" / "val" / "china",
                    tmp_path / "withval" / "val" / "extra")
    assert probe("withval") == 0
    assert not os.path.exists(tmp_path / "one_fs" / "fewshot.json")
    # Class folders alone (train and val, no test): the fix names the
    # probe's own field, not training's.
    write_photo_folder(tmp_path / "classes", per_class=5)
    capsys.readouterr()
    assert probe("classes") == 1
    err = capsys.readouterr().err
    assert "has no split 'test' with images; it has train, val. Set " \
        "--config.evals.fewshot.datasets.digits.test_split=<a split it " \
        "has>, or arrange it as <class>/ folders" in err
    assert "config.input.train_split" not in err


def test_cli_fewshot_run_again_keeps_what_it_probed(tmp_path, capsys,
                                                    caplog):
    """The same few-shot command again: its data sets are kept, not
    probed again, and the table printed (a data set not prepared, not
    run either time, leaves the exit status 0); other shot counts probe
    anew."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    out = str(tmp_path / "fs")
    common = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits,cifar100",
              "--config.input.download=False",
              f"--config.input.data_dir={tmp_path / 'no_tfds'}",
              "--config.evals.fewshot.seeds=(0,)", f"--model={path}",
              f"--output_dir={out}", "--image_size=32")
    assert cli(*common, "--config.evals.fewshot.shots=(1,)") == 0
    first = capsys.readouterr().out
    with open(os.path.join(out, "fewshot.json")) as f:
        results = json.load(f)["results"]
    caplog.set_level("INFO", logger="absl")
    caplog.clear()
    assert cli(*common, "--config.evals.fewshot.shots=(1,)") == 0
    assert capsys.readouterr().out == first
    assert "Kept the results of digits, probed before with this model's " \
        "files and recipe: not probed again." in caplog.text
    assert "few-shot data set" not in caplog.text  # nothing extracted
    with open(os.path.join(out, "fewshot.json")) as f:
        assert json.load(f)["results"] == results
    caplog.clear()
    assert cli(*common, "--config.evals.fewshot.shots=(1,2)") == 0
    assert "Kept the results" not in caplog.text
    assert "few-shot data set 2 of 2: digits" in caplog.text
    assert "2-shot" in capsys.readouterr().out
    with open(os.path.join(out, "fewshot.before-1.json")) as f:
        assert json.load(f)["results"] == results  # the 1-shot run's, kept


def test_cli_fewshot_at_the_image_size_flag(tmp_path, capsys):
    """--image_size replaces the config's model.image_size and scales its
    resize alike (224 / 256 -> 16 / 18): the same numbers as the config
    fields set by hand, at a resolution other than the model's 32."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    common = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
              "--config.evals.fewshot.shots=(2,)",
              "--config.evals.fewshot.seeds=(0,)", f"--model={path}")
    saved = []
    for name, extra in (("flag", ("--image_size=16",)),
                        ("fields", ("--config.model.image_size=16",
                                    "--config.input.pp.eval_resize_size=18"))):
        out = str(tmp_path / name)
        assert cli(*common, *extra, f"--output_dir={out}") == 0
        with open(os.path.join(out, "fewshot.json")) as f:
            saved.append(json.load(f))
    capsys.readouterr()
    by_flag, by_fields = saved
    assert (by_flag["image_size"], by_flag["resize_size"]) == (16, 18)
    assert (by_fields["image_size"], by_fields["resize_size"]) == (16, 18)
    assert by_flag["results"] == by_fields["results"]


def test_cli_fewshot_hands_the_manual_dir_to_tfds(tmp_path, monkeypatch):
    """--config.input.manual_dir reaches TFDS's download config when a
    few-shot data set (ImageNet, the default list's manual one) is
    prepared: its files are looked for there, not in
    <data_dir>/downloads/manual."""
    from keras_vit.evaluation import fewshot

    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    manual = tmp_path / "manual"
    manual.mkdir()
    for name in fewshot.MANUAL_DATA["imagenet2012"][0]:
        (manual / name).write_bytes(b"")
    seen = []

    def download_and_prepare(self, *args, download_config=None, **kwargs):
        seen.append((self.name, download_config.manual_dir))
        raise OSError("stopped by the test")

    monkeypatch.setattr(tfds.core.DatasetBuilder, "download_and_prepare",
                        download_and_prepare)
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:imagenet",
               "--config.model.image_size=32",
               "--config.input.pp.eval_resize_size=36",
               f"--config.input.data_dir={tmp_path / 'data'}",
               f"--config.input.manual_dir={manual}", f"--model={path}",
               f"--output_dir={tmp_path / 'fs'}") == 1
    assert seen == [("imagenet2012", str(manual))]


def test_cli_fewshot_at_the_models_own_size(tmp_path, capsys):
    """config.model.image_size=0 (the model's own) probes at the loaded
    model's resolution; eval_keep_aspect is not applied to few-shot
    (fewshot.json says so). The same model under another --name is
    refused naming the name its results have."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)  # at 32 x 32
    out = str(tmp_path / "fs")
    common = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
              "--config.evals.fewshot.shots=(1,)",
              "--config.evals.fewshot.seeds=(0,)", f"--model={path}",
              f"--output_dir={out}")
    assert cli(*common, "--config.model.image_size=0",
               "--config.input.pp.eval_resize_size=36",
               "--config.input.pp.eval_keep_aspect=True", "--name=first") == 0
    with open(os.path.join(out, "fewshot.json")) as f:
        saved = json.load(f)
    assert (saved["image_size"], saved["resize_size"]) == (32, 36)
    assert saved["keep_aspect"] is False
    assert set(saved["results"]["digits"]) == {"1"}
    capsys.readouterr()
    assert cli(*common, "--name=second") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"keras-vit-evaluate: error: {out}/fewshot.json holds the few-shot "
        f"results of this model ({path!r}) named 'first', not 'second': "
        "pass --name=first to add to them, or another --output_dir."]


def test_fewshot_at_the_config_s_size_names_the_model_s_own(tmp_path,
                                                            caplog):
    """A 32 x 32 model probed at the config's 224 (its table stretched):
    a warning names the size it was trained at and the flag for it; none
    at its own size."""
    path = str(tmp_path / "m.npz")
    checkpoint.save_npz(tiny(representation_size=16), path)
    common = ("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
              "--config.evals.fewshot.shots=(1,)",
              "--config.evals.fewshot.seeds=(0,)", f"--model={path}")
    caplog.set_level("WARNING", logger="absl")
    assert cli(*common, "--config.model.image_size=64",
               f"--output_dir={tmp_path / 'a'}") == 0
    assert f"{path} was trained at 32x32; its few-shot features are taken " \
        "at 64x64 (--config.model.image_size), its position embeddings " \
        "resized: --image_size=32 takes them at its own size." in caplog.text
    caplog.clear()
    assert cli(*common, "--image_size=32",
               f"--output_dir={tmp_path / 'b'}") == 0
    assert "was trained at" not in caplog.text


def test_fewshot_at_the_models_own_size_warns_of_a_small_crop(caplog):
    """config.model.image_size=0 keeps the config's resize (at least the
    model's side): where the crop then keeps less than half of each side
    (256 for a 32 x 32 model), a warning names --image_size, which scales
    it (256 for 224: 37 for 32)."""
    from types import SimpleNamespace

    from keras_vit.configs import fewshot as fewshot_config

    config = fewshot_config.get_config("digits")
    with config.unlocked():
        config.model.image_size = 0
    caplog.set_level("WARNING", logger="absl")
    sizes = evaluate_main._fewshot_sizes(SimpleNamespace(image_size=None),
                                         config, own=32)
    assert sizes == (32, 256)
    assert "the central crop keeps less than half of each side. " \
        "--image_size=32 in place of config.model.image_size=0 scales " \
        "the config's resize" in caplog.text
    caplog.clear()
    assert evaluate_main._fewshot_sizes(
        SimpleNamespace(image_size=32), fewshot_config.get_config("digits"),
        own=32) == (32, 37)
    assert "less than half" not in caplog.text
    # Both: --image_size has no size to scale the resize from; said too.
    assert evaluate_main._fewshot_sizes(
        SimpleNamespace(image_size=32), config, own=32) == (32, 256)
    assert "Few-shot features at 32, resized to 256 first: the central " \
        "crop keeps less than half" in caplog.text
    # A (height, width) config size scales it too (it was left at 320:
    # the crop kept a fifth of each side, without a word).
    with config.unlocked(), config.model.ignore_type():
        config.model.image_size = (224, 320)  # (--config.model.image_size=
        config.input.pp.eval_resize_size = 320  # 224x320)
    assert evaluate_main._fewshot_sizes(
        SimpleNamespace(image_size=64), config, own=32) == (64, 91)
    # A size typed over the config's, the resize left as set for 224: the
    # central 32 of 256 (an eighth of each side) was taken without a word.
    caplog.clear()
    config = fewshot_config.get_config("digits")
    with config.unlocked():
        config.model.image_size = 32
    assert evaluate_main._fewshot_sizes(
        SimpleNamespace(image_size=None), config) == (32, 256)
    assert "keeps less than half of each side. --image_size=32 in place " \
        "of config.model.image_size=32 scales the config's resize" in \
        caplog.text


def test_a_missing_mode_or_output_is_one_line_naming_it(capsys):
    """No --mode, and fewshot or vtab without what they need: one line
    each, the example naming only what is missing."""
    assert cli("--model=m.npz") == 1
    assert _one_line_error(capsys) == (
        "keras-vit-evaluate: error: --mode is required (flags: --help)")
    assert cli("--mode=fewshot", "--config=fewshot", "--model=m.npz") == 1
    assert _one_line_error(capsys) == (
        "keras-vit-evaluate: error: --mode=fewshot needs --output_dir (e.g. "
        "--output_dir=/tmp/results).")
    assert cli("--mode=vtab", "--model=m.npz") == 1
    assert _one_line_error(capsys).endswith(
        "needs --config and --output_dir (e.g. --config=vtab "
        "--output_dir=/tmp/results).")


def test_a_damaged_fewshot_json_is_refused_not_replaced(tmp_path, capsys):
    """A fewshot.json cut short (or not of this project) in --output_dir:
    one line saying so, before the work; the file is left as it was."""
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    out = tmp_path / "fs"
    out.mkdir()
    (out / "fewshot.json").write_text('{"results": ')
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               f"--model={path}", f"--output_dir={out}",
               "--image_size=32") == 1
    assert _one_line_error(capsys) == (
        f"keras-vit-evaluate: error: {out}/fewshot.json is no few-shot "
        "results file of this project (not JSON of its fields, or cut "
        "short): move it away or pass another --output_dir, so that it is "
        "not overwritten.")
    assert (out / "fewshot.json").read_text() == '{"results": '


def test_a_batch_of_no_whole_share_per_replica_names_the_flag():
    """--mode=eval's data errors are worded in its flags: a batch the
    replicas cannot share names --batch_size."""
    from keras_vit.commands import eval_mode

    assert eval_mode.in_eval_flags(
        "batch_size 7 is not divisible by the 2 replicas: use a multiple "
        "of 2.") == ("--batch_size=7 is not divisible by the 2 replicas: "
                     "use a multiple of 2.")


def test_mode_flags_name_what_the_mode_reads_instead(tmp_path):
    """--data_dir and --batch_size are --mode=eval's: with fewshot or
    vtab the one line names the config field that mode reads."""
    from tests import console

    common = [f"--model={tmp_path}/m.npz", f"--output_dir={tmp_path}/o",
              f"--data_dir={tmp_path}", "--batch_size=8"]
    for mode, batch in (
            ("fewshot", "--config.evals.fewshot.batch_size"),
            ("vtab", "--config.input.batch_size (training) or "
                     "--config.evals.test.batch_size (scoring)")):
        result = console.run("evaluate", [f"--mode={mode}",
                                          f"--config={mode}", *common])
        assert result.returncode == 1
        assert result.stderr.strip().splitlines() == [
            f"keras-vit-evaluate: error: --data_dir goes with --mode=eval "
            f"only, not --mode={mode} (set --config.input.data_dir "
            f"instead); --batch_size goes with --mode=eval only, not "
            f"--mode={mode} (set {batch} instead)."], result.stderr
    result = console.run("evaluate", ["--mode=vtab", "--config=vtab",
                                      *common[:2], "--skip_bad_images"])
    assert result.stderr.strip().splitlines() == [
        "keras-vit-evaluate: error: --skip_bad_images goes with --mode=eval "
        "only, not --mode=vtab (VTAB-1k reads TFDS data sets, not image "
        "files)."], result.stderr


def test_keras_file_is_usable_as_a_vtab_source(tmp_path):
    model = tiny(num_classes=10, image_size=16, representation_size=16)
    path = str(tmp_path / "m.keras")
    model.save(path)
    info = pretrained.describe_source(pretrained.KerasSource(path))
    assert info.num_classes == 10 and info.representation_size == 16
    assert info.image_size == (16, 16)
    out = pretrained.write_backbone(pretrained.KerasSource(path),
                                    str(tmp_path / "b.npz"))
    arrays = checkpoint_io.read_npz(out.path)
    source = checkpoint.model_arrays(keras.models.load_model(path))
    assert set(arrays) == set(source) - {
        "head/kernel", "head/bias", "pre_logits/kernel", "pre_logits/bias"
    }
    for key, value in arrays.items():
        np.testing.assert_array_equal(value, source[key])


# ---------------------------------- the model source, as a user gives it
def _printed_metrics(capsys):
    printed = capsys.readouterr().out
    return json.loads(printed[printed.index("{"):])


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "keras-vit-evaluate: error: "), err
    return err[0]


@pytest.fixture(scope="module")
def resize_run(tmp_path_factory):
    """A 2-step digits run at image 16 that evaluates resized to 24, then
    the central 16 crop."""
    config = tiny_configs.digits_config({
        "model.image_size": 16, "input.pp.eval_resize_size": 24,
        "trainer.total_steps": 2, "trainer.steps_per_loop": 1,
        "checkpoints.every_steps": 0, "schedule.warmup_steps": 1,
        "log.every_steps": 1, "evals.test.every_steps": 0})
    workdir = str(tmp_path_factory.mktemp("resize_run"))
    train_lib.train_and_evaluate(config, workdir)
    keras.backend.clear_session()
    return workdir


def test_cli_eval_refuses_a_model_without_head_by_name(tmp_path, capsys):
    """A features model whose width equals the class count is not scored
    as if its features were logits; a wider one is not "predicts 16
    classes"."""
    for width in (10, 16):
        path = str(tmp_path / f"features{width}.keras")
        tiny(num_classes=0, representation_size=width).save(path)
        assert cli("--mode=eval", f"--model={path}", "--dataset=digits") == 1
        err = _one_line_error(capsys)
        assert f"{path} has no classification head" in err
        assert "nothing to evaluate" in err and "predicts" not in err


def test_cli_eval_with_a_config_uses_the_models_own_size(tmp_path, capsys):
    """--config gives the data and batch; the model keeps its resolution
    (16, not the config's model.image_size) unless --image_size."""
    path = str(tmp_path / "m.keras")
    model = tiny(image_size=16)
    model.save(path)
    config = os.path.join(ROOT, "configs", "digits.py")
    assert cli("--mode=eval", f"--config={config}",
               "--config.model.image_size=32", f"--model={path}") == 0
    got = _printed_metrics(capsys)
    assert got["image_size"] == [16, 16]
    want = direct_digits_metrics(model, 16)
    assert got["accuracy"] == pytest.approx(want["accuracy"])
    assert cli("--mode=eval", f"--config={config}", f"--model={path}",
               "--image_size=32") == 0
    assert _printed_metrics(capsys)["image_size"] == [32, 32]


def test_cli_eval_scales_the_runs_resize_with_image_size(resize_run,
                                                         capsys):
    """The run's eval_resize_size 24 at 16 is 48 at --image_size=32 (no
    EnsureShape traceback) and 12 at 8 (not a small centre crop)."""
    for size, resize in ((None, 24), (32, 48), (8, 12)):
        extra = [f"--image_size={size}"] if size else []
        assert cli("--mode=eval", f"--model={resize_run}", *extra) == 0
        got = _printed_metrics(capsys)
        assert got["resize_size"] == resize
        assert got["image_size"] == [size or 16] * 2
        assert got["num_examples"] == 360


def test_scaled_resize_is_the_one_rule():
    from keras_vit.commands import flags as cli_flags

    assert cli_flags.scaled_resize(None, 16, 32) is None
    assert cli_flags.scaled_resize(24, 16, 32) == 48
    assert cli_flags.scaled_resize(24, 16, 8) == 12
    assert cli_flags.scaled_resize(256, 224, 56) == 64
    assert cli_flags.scaled_resize(18, 16, (16, 32)) == 36
    assert cli_flags.scaled_resize(18, 0, 32) == 32  # never below the image


def test_cli_eval_reads_the_data_of_workdir_beside_model(resize_run,
                                                         tmp_path, capsys):
    """--workdir=RUN --model=M.keras: M on the run's data (its config),
    results into the run's folder; a --workdir without a config names the
    real fix."""
    path = str(tmp_path / "m.keras")
    tiny(image_size=16).save(path)
    out = str(tmp_path / "out")
    os.makedirs(out)
    assert cli("--mode=eval", f"--workdir={out}", f"--model={path}") == 1
    err = _one_line_error(capsys)
    assert f"--workdir={out} holds no config.json" in err
    assert "--dataset=" in err
    assert cli("--mode=eval", f"--workdir={resize_run}", f"--model={path}",
               f"--output_dir={out}") == 0
    got = _printed_metrics(capsys)
    assert got["dataset"] == "digits" and got["num_examples"] == 360
    # Another model into the same --output_dir: a file of its own, and
    # the first model's results stay.
    other = str(tmp_path / "other.keras")
    tiny(image_size=16).save(other)
    assert cli("--mode=eval", f"--workdir={resize_run}", f"--model={other}",
               f"--output_dir={out}") == 0
    second = _printed_metrics(capsys)
    assert sorted(os.listdir(out)) == ["eval_digits_test_m.keras.json",
                                       "eval_digits_test_other.keras.json"]
    for name, want in (("m", got), ("other", second)):
        with open(os.path.join(
                out, f"eval_digits_test_{name}.keras.json")) as f:
            saved = json.load(f)
        assert saved["model"] == want["model"] and name in saved["model"]
        assert saved["loss"] == pytest.approx(want["loss"])
    # A model of the same file name from another folder: refused before
    # it is evaluated, the first one's file kept; --name gives it its own.
    os.makedirs(tmp_path / "b")
    twin = str(tmp_path / "b" / "m.keras")
    tiny(image_size=16).save(twin)
    before = open(os.path.join(out, "eval_digits_test_m.keras.json")).read()
    assert cli("--mode=eval", f"--workdir={resize_run}", f"--model={twin}",
               f"--output_dir={out}") == 1
    err = _one_line_error(capsys)
    assert f"holds the results of another model ({path}, now {twin}): " \
        "pass --name=NAME" in err, err
    assert open(os.path.join(out, "eval_digits_test_m.keras.json")).read() \
        == before
    assert cli("--mode=eval", f"--workdir={resize_run}", f"--model={twin}",
               f"--output_dir={out}", "--name=twin") == 0
    assert _printed_metrics(capsys)["model_location"] == twin
    assert "eval_digits_test_twin.json" in os.listdir(out)


def test_a_moved_run_evaluates_itself_into_its_own_folder(resize_run,
                                                          tmp_path, capsys):
    """A run's own results file names where the run was: the run moved
    elsewhere evaluates itself again, into its own folder; a copy beside
    the original (still there) does not take over its file."""
    first = tmp_path / "a" / "run"
    shutil.copytree(resize_run, first)
    assert cli("--mode=eval", f"--workdir={first}") == 0
    capsys.readouterr()
    moved = tmp_path / "b" / "run"
    shutil.move(str(first), str(moved))
    assert cli("--mode=eval", f"--workdir={moved}") == 0
    assert _printed_metrics(capsys)["model_location"] == str(moved)
    with open(moved / "eval_digits_test.json") as f:
        assert json.load(f)["model_location"] == str(moved)
    copy = tmp_path / "c" / "run"
    shutil.copytree(moved, copy)
    assert cli("--mode=eval", f"--workdir={copy}") == 1
    assert f"holds the results of another model ({moved}, now {copy})" \
        in _one_line_error(capsys)


def test_a_folder_of_class_folders_alone_is_scored_on_its_held_out_part(
        tmp_path, capsys, caplog):
    """Without split folders, an image folder's default split is the share
    of each class training holds out: the log says so, and how to score
    every image (--split=train+val)."""
    model = str(tmp_path / "m.keras")
    tiny(num_classes=2, image_size=16).save(model)
    rng = np.random.default_rng(0)
    for name in ("cat", "dog"):
        (tmp_path / "photos" / name).mkdir(parents=True)
        for i in range(10):
            image = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
            tf.io.write_file(str(tmp_path / "photos" / name / f"{i}.png"),
                             tf.io.encode_png(image))
    base = ["--mode=eval", f"--model={model}", "--dataset=folder",
            f"--data_dir={tmp_path / 'photos'}"]
    caplog.set_level("INFO", logger="absl")
    assert cli(*base) == 0
    assert _printed_metrics(capsys)["num_examples"] == 4
    log = " ".join(r.getMessage() for r in caplog.records)
    assert "has no split folders: scoring its val split, the 20% of each " \
        "class that training holds out (4 of 20 images); " \
        "--split=train+val scores every image." in log
    caplog.clear()
    assert cli(*base, "--split=train+val") == 0
    assert _printed_metrics(capsys)["num_examples"] == 20
    assert "has no split folders" not in " ".join(
        r.getMessage() for r in caplog.records)


def test_export_scales_the_runs_resize_with_image_size(resize_run, tmp_path,
                                                       capsys):
    """keras-vit-export --image_size=32 of a run that evaluates resized to
    24 at 16: resized to 48, then the central 32 (no EnsureShape
    traceback), the same rule as --mode=eval."""
    from keras_vit.commands import export as export_main
    from keras_vit.export import saved_model

    out = str(tmp_path / "exports")
    with mock.patch.object(saved_model, "export_model",
                           wraps=saved_model.export_model) as spy:
        assert export_main.main([
            "keras-vit-export", f"--model={resize_run}", "--image_size=32",
            f"--export_dir={out}"]) == 0
    assert spy.call_args.kwargs["resize_size"] == 48
    capsys.readouterr()


def test_cli_eval_scores_a_folder_by_the_models_class_names(tmp_path,
                                                             capsys, caplog):
    """A folder's labels follow its sorted class folders; a model that
    names its classes in another order is scored by name (each image is
    in the folder of the class the model gives it: 100%), a class folder
    that is none of its classes is refused by name, and the results of a
    model beside a run's workdir do not overwrite the run's."""
    names = ["zebra", "cat", "mouse"]  # the model's order, not sorted
    keras.utils.set_random_seed(5)  # (a model that gives all 3 classes)
    model = tiny(num_classes=3, image_size=16)
    keras_path = str(tmp_path / "m.keras")
    model.save(keras_path)
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n")
    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, (24, 16, 16, 3), dtype=np.uint8)
    given = model.predict(pixels / 127.5 - 1.0, verbose=0).argmax(-1)
    assert len(set(given.tolist())) > 1
    for i, (image, label) in enumerate(zip(pixels, given)):
        folder = tmp_path / "photos" / "test" / names[label]
        folder.mkdir(parents=True, exist_ok=True)
        tf.io.write_file(str(folder / f"{i}.png"), tf.io.encode_png(image))
    for name in names:  # every class has a folder, empty or not
        (tmp_path / "photos" / "test" / name).mkdir(exist_ok=True)
    base = ["--mode=eval", f"--model={keras_path}", "--dataset=folder",
            f"--data_dir={tmp_path / 'photos'}", "--split=test"]

    def accuracy(*args):
        assert cli(*base, *args) == 0
        printed = capsys.readouterr().out
        return json.loads(printed[printed.index("{"):])

    by_name = accuracy(f"--class_names_file={tmp_path / 'names.txt'}")
    assert by_name["accuracy"] == 1.0 and by_name["classes_by_name"]
    caplog.set_level("INFO", logger="absl")
    by_index = accuracy()  # no names: sorted folders are classes 0, 1, 2
    assert ("The model records no class names: the sorted class folders of "
            f"{tmp_path / 'photos'} are scored as its classes 0, 1, ... "
            "('cat', 'mouse', 'zebra'); --class_names_file names the "
            "model's, in its output order.") in caplog.text
    # Without --split: the folder config's, the first of test|val|... there.
    assert cli(*base[:-1]) == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("{"):])["split"] == "test"
    assert cli(*base[:-1], "--split=val") == 1
    err = capsys.readouterr().err
    assert "Pass --split=<one of them> (of a folder of class folders" in err
    # The config's fields are not named: --mode=eval has --split for them.
    assert "config.input.train_split" not in err
    sorted_names = sorted(names)
    want = np.mean([sorted_names.index(names[g]) == g for g in given])
    assert by_index["accuracy"] == pytest.approx(want) and want < 1.0
    assert "classes_by_name" not in by_index
    (tmp_path / "other.txt").write_text("zebra\ncat\nrat\n")
    assert cli(*base, f"--class_names_file={tmp_path / 'other.txt'}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "are the model's classes and some are not " \
        "('mouse'): name every folder as the model's class" in err[0], err
    # Folders named otherwise (synsets beside words): scored by index.
    (tmp_path / "words.txt").write_text("n01\nn02\nn03\n")
    assert accuracy(f"--class_names_file={tmp_path / 'words.txt'}")[
        "accuracy"] == by_index["accuracy"]
    (tmp_path / "two.txt").write_text("zebra\ncat\n")
    assert cli(*base, f"--class_names_file={tmp_path / 'two.txt'}") == 1
    assert "2 class names for a 3-class model" in capsys.readouterr().err
    # A test folder of two of the three classes: scored by name, each
    # image still classified among all three.
    some = tmp_path / "some" / "test"
    for name in ("zebra", "cat"):
        shutil.copytree(tmp_path / "photos" / "test" / name, some / name)
    kept = sum(names[g] in ("zebra", "cat") for g in given)
    part = ["--data_dir=" + str(tmp_path / "some")]
    subset = accuracy(*part, f"--class_names_file={tmp_path / 'names.txt'}")
    assert subset["accuracy"] == 1.0 and subset["classes_by_name"]
    assert subset["num_examples"] == kept < 24
    assert cli(*part, *base[:3], "--split=test") == 1  # no names: refused
    assert ("The model predicts 3 classes but folder has 2" in
            capsys.readouterr().err)
    # Two folders, one of them no class of the model's: named.
    stray = tmp_path / "stray" / "test"
    shutil.copytree(some / "zebra", stray / "zebra")
    shutil.copytree(some / "cat", stray / "dog")
    assert cli(f"--data_dir={tmp_path / 'stray'}", *base[:3], "--split=test",
               f"--class_names_file={tmp_path / 'names.txt'}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "are the model's classes and some are not " \
        "('dog')" in err[0], err
    # Names that repeat: a folder of a repeated name is refused by name
    # (it fell through to the class count, which named the flag given);
    # folders of the others are still scored by name.
    (tmp_path / "twice.txt").write_text("zebra\nzebra\ncat\n")
    assert cli(*part, *base[:3], "--split=test",
               f"--class_names_file={tmp_path / 'twice.txt'}") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "are named as model classes whose names " \
        "repeat ('zebra'): which class each holds is not known" in err[0]
    (tmp_path / "mice.txt").write_text("mouse\ncat\nmouse\n")
    only_cat = tmp_path / "cat_only" / "test"
    shutil.copytree(some / "cat", only_cat / "cat")
    cats = accuracy(f"--data_dir={tmp_path / 'cat_only'}",
                    f"--class_names_file={tmp_path / 'mice.txt'}")
    assert cats["classes_by_name"] and cats["accuracy"] == 1.0
    # Beside a run's workdir, another model's results get their own file.
    run = tmp_path / "run"
    run.mkdir()
    assert cli(*base, f"--workdir={run}", "--name=mine") == 0
    assert cli(*base, f"--workdir={run}", "--image_size=32") == 0
    capsys.readouterr()
    assert sorted(os.listdir(run)) == ["eval_folder_test_m.keras_32x32.json",
                                       "eval_folder_test_mine.json"]
    # A file of that name this command did not write: kept, and named.
    (run / "eval_folder_test_mine.json").write_text('{"mine": ')
    assert cli(*base, f"--workdir={run}", "--name=mine") == 1
    assert "eval_folder_test_mine.json is no results file of this command " \
        "(not JSON" in capsys.readouterr().err
    assert (run / "eval_folder_test_mine.json").read_text() == '{"mine": '


def test_class_names_match_in_either_unicode_form(tmp_path, capsys):
    """A class folder named on macOS ("e" and a combining accent, NFD) is
    the class a names file writes with "é" (NFC): scored by name, not
    refused as a stranger; a resumed run's labels.txt compares alike."""
    import unicodedata

    from keras_vit.training import resume

    composed, decomposed = (unicodedata.normalize(form, "café")
                            for form in ("NFC", "NFD"))
    names = ["zebra", composed, "cafeteria"]  # the model's order
    keras.utils.set_random_seed(5)
    model = tiny(num_classes=3, image_size=16)
    model.save(str(tmp_path / "m.keras"))
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n",
                                        encoding="utf-8")
    rng = np.random.default_rng(4)
    pixels = rng.integers(0, 256, (18, 16, 16, 3), dtype=np.uint8)
    given = model.predict(pixels / 127.5 - 1.0, verbose=0).argmax(-1)
    on_disk = [n.replace(composed, decomposed) for n in names]
    for name in on_disk:
        (tmp_path / "photos" / "test" / name).mkdir(parents=True)
    for i, (image, label) in enumerate(zip(pixels, given)):
        tf.io.write_file(str(tmp_path / "photos" / "test" / on_disk[label]
                             / f"{i}.png"), tf.io.encode_png(image))
    assert cli("--mode=eval", f"--model={tmp_path / 'm.keras'}",
               "--dataset=folder", f"--data_dir={tmp_path / 'photos'}",
               "--split=test",
               f"--class_names_file={tmp_path / 'names.txt'}") == 0
    printed = capsys.readouterr().out
    result = json.loads(printed[printed.index("{"):])
    assert result["accuracy"] == 1.0 and result["classes_by_name"]
    # Both forms of one name as two folders: refused, not merged.
    for name in (composed, decomposed, "zebra"):
        (tmp_path / "twins" / "test" / name).mkdir(parents=True)
        tf.io.write_file(str(tmp_path / "twins" / "test" / name / "0.png"),
                         tf.io.encode_png(pixels[0]))
    assert cli("--mode=eval", f"--model={tmp_path / 'm.keras'}",
               "--dataset=folder", f"--data_dir={tmp_path / 'twins'}",
               "--split=test",
               f"--class_names_file={tmp_path / 'names.txt'}") == 1
    assert "differ only in how Unicode writes their names ('café'" in (
        capsys.readouterr().err)
    # Resuming: labels.txt in one form, the class folders in the other.
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "labels.txt").write_text("\n".join(names) + "\n",
                                    encoding="utf-8")
    with mock.patch.object(resume.checkpoint_list, "listed",
                           return_value=True):
        resume.check_same_classes(str(run), str(run / "checkpoints"),
                                  on_disk)
        with pytest.raises(Exception, match="lacks zebra and adds zoo"):
            resume.check_same_classes(str(run), str(run / "checkpoints"),
                                      ["zoo", decomposed, "cafeteria"])


def test_an_eval_file_of_another_data_folder_is_not_overwritten(tmp_path):
    """--mode=eval's file names carry the data set, not the data folder:
    a file of another folder (photos/ then photos_b/) is refused."""

    path = str(tmp_path / "eval_folder_val.json")
    with open(path, "w") as f:
        json.dump({"model_location": "/runs/run",
                   "data_dir": str(tmp_path / "photos")}, f)
    result_file.check(path, "/runs/run", str(tmp_path / "photos"))
    with pytest.raises(UsageError, match=r"another data folder \(.*photos, "
                       r"now .*photos_b\): pass --name=NAME"):
        result_file.check(path, "/runs/run",
                                    str(tmp_path / "photos_b"))
    with pytest.raises(UsageError, match=r"another model \(/runs/run, now "
                       r"/other/run\)"):
        result_file.check(path, "/other/run",
                                    str(tmp_path / "photos"))
    # A file this command did not write (its writes are whole): kept,
    # named. Before, it was overwritten without a word.
    for text, why in (('{"accuracy": 0.9, "mod', r"not JSON \(.*\)"),
                      ("[1]", "not a JSON object"),
                      ('{"a": 1}', "no model_location")):
        with open(path, "w") as f:
            f.write(text)
        with pytest.raises(UsageError, match=f"is no results file of this "
                           f"command \\({why}\\), and is not overwritten: "
                           "move it away, or pass --name=NAME"):
            result_file.check(path, "/runs/run", None)
        assert open(path).read() == text


def test_vtab_without_matplotlib_stops_before_the_first_task(tmp_path,
                                                              capsys,
                                                              monkeypatch):
    """The charts need matplotlib: without it, one line before any task
    is trained (a 19-task run stopped after its first one)."""
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(tiny(num_classes=3, image_size=16), npz)
    for name in [m for m in sys.modules if m.startswith("matplotlib")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    out = tmp_path / "out"
    assert cli("--mode=vtab", f"--config={VTAB_CONFIG}", *TINY_VTAB,
               f"--config.input.data_dir={tmp_path}", f"--model={npz}",
               f"--output_dir={out}", "--tasks=smallnorb_elev") == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "The VTAB charts need matplotlib" in err[0]
    assert not out.exists()


def test_a_clusters_other_workers_write_no_results(tmp_path, monkeypatch,
                                                   capsys):
    """Under --strategy=multiworker every worker runs the evaluation; on
    a shared --output_dir only the chief writes (eval's JSON, few-shot's
    fewshot.json and .md): the others print their results only."""
    monkeypatch.setattr(distribute, "is_chief", lambda strategy: False)
    path = str(tmp_path / "m.keras")
    tiny(representation_size=16).save(path)
    out = tmp_path / "shared"
    assert cli("--mode=eval", f"--model={path}", "--dataset=digits",
               "--split=test", f"--output_dir={out}") == 0
    printed = capsys.readouterr().out
    assert json.loads(printed[printed.index("{"):])["num_examples"] == 360
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               "--config.evals.fewshot.shots=(1,)",
               "--config.evals.fewshot.seeds=(0,)",
               f"--model={path}", f"--output_dir={out}") == 0
    assert "| digits |" in capsys.readouterr().out
    assert not out.exists() or os.listdir(out) == []
