"""keras-vit-evaluate run again into the same folder, or on other data:
what each result file records (the weights, the split, the loss), what a
rerun keeps or refuses, and the one-line refusals of splits, sizes and
class names that do not fit."""

import json
import os
import shutil

import keras
import pytest
import tensorflow_datasets as tfds

from keras_vit import config as config_lib
from keras_vit import create_model
from keras_vit.checkpoint import loader as pretrained
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.commands import eval_mode, result_file
from keras_vit.commands import evaluate as evaluate_main
from keras_vit.commands import predict as predict_main
from keras_vit.data import overlaps, sources
from keras_vit.errors import UsageError
from keras_vit.evaluation import fewshot_reports, linear_probe, vtab_run
from keras_vit.storage import atomic
from keras_vit.storage import workdir as wd
from keras_vit.training import model_init, train_lib
from tests import tiny as tiny_configs
from tests.photo_folder import write_photo_folder
from tests.reliability_cases import check_error, check_says, covers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VTAB_CONFIG = os.path.join(ROOT, "configs", "vtab.py")
FEWSHOT_CONFIG = os.path.join(ROOT, "configs", "fewshot.py")
MOCK = dict(num_examples=4, policy=tfds.testing.MockPolicy.USE_CODE)


def cli(*args):
    """Runs keras-vit-evaluate in-process; returns the exit status."""
    return evaluate_main.main(["keras-vit-evaluate", *args])


def _one_line_error(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "keras-vit-evaluate: error: "), err
    return err[0]


def _read(path):
    with open(path) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def ema_run(tmp_path_factory):
    """A 2-step digits run at image 16 that keeps EMA weights and trains
    with the sigmoid loss."""
    config = tiny_configs.digits_config({
        "model.image_size": 16, "trainer.total_steps": 2,
        "trainer.steps_per_loop": 1, "trainer.ema_decay": 0.9,
        "objective.loss": "sigmoid_xent", "checkpoints.every_steps": 0,
        "schedule.warmup_steps": 0, "log.every_steps": 1,
        "evals.test.every_steps": 0})
    workdir = str(tmp_path_factory.mktemp("ema_run"))
    train_lib.train_and_evaluate(config, workdir)
    keras.backend.clear_session()
    return workdir


@covers("vtab_other_weights")
def test_vtab_backbone_stamp_tells_ema_from_raw_weights(ema_run, tmp_path):
    """--no_ema into an output_dir of the EMA weights' tasks is refused
    (it reused the EMA backbone.npz); each kind of weights is stamped."""
    out = str(tmp_path / "vtab")
    os.makedirs(out)
    vtab_run.prepare_backbone(pretrained.WorkdirSource(ema_run), out)
    assert _read(os.path.join(out, vtab_run.BACKBONE_SOURCE))["use_ema"]
    raw = pretrained.WorkdirSource(ema_run, use_ema=False)
    os.makedirs(os.path.join(out, vtab_run.RUNS, "dtd"))  # a task began
    with pytest.raises(UsageError) as info:
        vtab_run.prepare_backbone(raw, out)
    check_error("vtab_other_weights", info.value)
    other = str(tmp_path / "raw")
    os.makedirs(other)
    vtab_run.prepare_backbone(raw, other)
    assert _read(os.path.join(other, vtab_run.BACKBONE_SOURCE))[
        "use_ema"] is False


def test_eval_records_weights_loss_and_split_in_their_own_files(
        ema_run, tmp_path, capsys):
    """--mode=eval of a sigmoid run reports the sigmoid loss (the run's
    own final test loss); --no_ema, --resize_size (with --keep_aspect)
    and two slices of one split each get their own file, which records
    them."""
    out = str(tmp_path / "out")
    common = ("--mode=eval", f"--workdir={ema_run}", f"--output_dir={out}")
    assert cli(*common) == 0
    plain = _read(os.path.join(out, "eval_digits_test.json"))
    final = _read(os.path.join(ema_run, "metrics.json"))
    assert plain["loss_kind"] == "sigmoid_xent" and plain["use_ema"] is True
    assert plain["step"] == 2  # the run's checkpoint scored
    assert plain["loss"] == pytest.approx(final["test_loss"], rel=1e-5)
    assert cli(*common, "--no_ema") == 0
    assert _read(os.path.join(out, "eval_digits_test_noema.json"))[
        "use_ema"] is False
    assert cli(*common, "--resize_size=20") == 0
    squashed = _read(os.path.join(out, "eval_digits_test_resize20.json"))
    assert (squashed["resize_size"], squashed["keep_aspect"]) == (20, False)
    # The shorter side to 20 (area): its own file, another loss.
    assert cli(*common, "--resize_size=20", "--keep_aspect") == 0
    kept = _read(os.path.join(out,
                              "eval_digits_test_resize20_keepaspect.json"))
    assert (kept["resize_size"], kept["keep_aspect"]) == (20, True)
    assert kept["loss"] != pytest.approx(squashed["loss"], rel=1e-6)
    for split in ("test[:100]", "test[100:]"):
        assert cli(*common, f"--split={split}") == 0
    capsys.readouterr()
    sliced = sorted(n for n in os.listdir(out) if n.startswith(
        "eval_digits_test_") and "-" in n)
    assert len(sliced) == 2, sorted(os.listdir(out))
    got = {_read(os.path.join(out, n))["split"]: _read(
        os.path.join(out, n))["num_examples"] for n in sliced}
    assert got == {"test[:100]": 100, "test[100:]": 260}


def test_a_model_named_by_config_init_model_gets_its_own_result_file(
        ema_run, tmp_path, capsys):
    """--config.init.model names the model as --model does, its result
    file too: it took the run's own name (eval_digits_test.json) in the
    run's folder, and the run's own evaluation was then refused as
    another model's."""
    run = str(tmp_path / "run")
    shutil.copytree(ema_run, run)
    for name in os.listdir(run):
        if name.startswith("eval_") and name.endswith(".json"):
            os.remove(os.path.join(run, name))
    path = str(tmp_path / "m.keras")
    pretrained.load_model(ema_run).save(path)
    assert cli("--mode=eval", f"--workdir={run}", "--config=digits",
               f"--config.init.model={path}") == 0
    assert _read(os.path.join(run, "eval_digits_test_m.keras.json"))[
        "model_location"] == path
    assert not os.path.exists(os.path.join(run, "eval_digits_test.json"))
    assert cli("--mode=eval", f"--workdir={run}") == 0
    assert _read(os.path.join(run, "eval_digits_test.json"))[
        "model_location"] == run
    capsys.readouterr()


@covers("no_ema_without_ema")
def test_no_ema_with_a_run_that_kept_no_ema_weights_is_refused(
        tmp_path, capsys):
    """--no_ema on a run trained without EMA (config.trainer.ema_decay 0)
    changes nothing: refused by name in every command that takes it, not
    a second result file (eval_..._noema.json) of the same weights."""
    config = tiny_configs.digits_config({
        "model.image_size": 16, "trainer.total_steps": 2,
        "trainer.ema_decay": 0.0, "schedule.warmup_steps": 0,
        "checkpoints.every_steps": 0, "evals.test.every_steps": 0})
    run = str(tmp_path / "run")
    train_lib.train_and_evaluate(config, run)
    keras.backend.clear_session()
    capsys.readouterr()
    line = (f"--no_ema: the run in {run} kept no EMA weights "
            "(its trainer.ema_decay is 0), only the ones it uses "
            "anyway: leave --no_ema out.")
    before = sorted(os.listdir(run))
    assert cli("--mode=eval", f"--workdir={run}", "--no_ema") == 1
    said = _one_line_error(capsys)
    assert said.endswith(line)
    check_says("no_ema_without_ema", said)
    assert predict_main.main(["keras-vit-predict", os.path.join(
        ROOT, "docs", "images", "mpp_predictions.png"), f"--model={run}",
        "--no_ema"]) == 1
    assert capsys.readouterr().err.strip().endswith(line)
    assert sorted(os.listdir(run)) == before
    assert cli("--mode=eval", f"--workdir={run}") == 0


def test_a_result_file_of_another_split_resize_or_weights_is_kept(tmp_path):
    path = str(tmp_path / "eval_digits_test.json")
    held = dict(model_location="/r", data_dir=None, split="test",
                resize_size=None, use_ema=True, image_size=[16, 16])
    with open(path, "w") as f:
        json.dump(held, f)
    result_file.check(path, "/r", None, dict(held))
    for field, value, what in (("split", "test[:5]", "split"),
                               ("resize_size", 20, "resize size"),
                               ("use_ema", False, "choice of EMA weights")):
        with pytest.raises(UsageError, match=f"another {what}"):
            result_file.check(path, "/r", None,
                              dict(held, **{field: value}))
    # A file that names no data folder (TFDS's default) is no other one:
    # the same evaluation with --data_dir writes it again.
    result_file.check(path, "/r", "/tfds", dict(held))


def test_a_result_written_meanwhile_by_another_model_is_not_replaced(
        tmp_path, monkeypatch):
    """Two evaluations into one folder, of two models named alike: the
    file that the other wrote after this one's check (at its start) is
    found as this one writes, and kept; a file of this model's own is
    replaced, also where it appears as this one publishes."""
    path = str(tmp_path / "eval_digits_test_run.json")
    facts = dict(model_location="/a/run", data_dir=None, split="test")
    result_file.check(path, "/a/run", None, facts)  # none there yet
    other = dict(facts, model_location="/b/run", accuracy=0.9)
    with open(path, "w") as f:
        json.dump(other, f)
    with pytest.raises(UsageError, match=r"another model \(/b/run, now "
                       r"/a/run\): pass --name=NAME"):
        result_file.write(path, json.dumps(dict(facts, accuracy=0.4)),
                          facts)
    assert _read(path) == other
    mine = dict(facts, accuracy=0.5)
    real = atomic.atomic_write

    def made_meanwhile(where, text, replace=True):
        if not replace:  # this model's file, written as this one is
            real(where, json.dumps(facts))
        real(where, text, replace=replace)

    os.remove(path)
    monkeypatch.setattr(atomic, "atomic_write", made_meanwhile)
    result_file.write(path, json.dumps(mine), facts)
    assert _read(path) == mine


def test_another_kind_of_data_does_not_inherit_the_runs_data_dir():
    """A folder run evaluated on a TFDS data set: the photo folder is not
    its TFDS data_dir (TFDS downloaded into it); the same folder, or a
    TFDS run on another TFDS data set, keeps the run's."""
    class Flags:
        data_dir = None
        skip_bad_images = None

    run = config_lib.base_config()
    run.input.update(dataset="folder", data_dir="/photos")
    for dataset, want in (("mnist", None), ("folder", "/photos"),
                          ("digits", None)):
        values = Flags()
        values.dataset = dataset
        assert eval_mode.eval_input(values, run, (16, 16)).data_dir == want
    run.input.update(dataset="cifar10", data_dir="/tfds")
    values = Flags()
    values.dataset = "mnist"
    assert eval_mode.eval_input(values, run, (16, 16)).data_dir == "/tfds"
    values.data_dir = "/mine"
    assert eval_mode.eval_input(values, run, (16, 16)).data_dir == "/mine"


def test_a_split_its_run_trained_on_is_named(ema_run, tmp_path, caplog):
    """--mode=eval of a run's model on a slice of the split it trained on:
    a warning that the accuracy is partly on its training images; on the
    test split, or the same slice of other data, none."""
    caplog.set_level("WARNING")
    common = ("--mode=eval", f"--model={ema_run}", f"--output_dir={tmp_path}")
    assert cli(*common, "--split=train[:100]") == 0
    assert ("--split='train[:100]' shares examples with the run's "
            "config.input.train_split='train': its accuracy is measured "
            "partly on images the model learns from. Pass --split=<a split "
            "or slice it did not train on>") in caplog.text
    caplog.clear()
    assert cli(*common, "--split=test") == 0
    assert "shares examples" not in caplog.text
    # The same slice of other data, or of a folder elsewhere: none.
    run = wd.read_config(ema_run)
    for fields in ({"dataset": "folder", "data_dir": str(tmp_path)},
                   {"dataset": "mnist"}):
        inp = config_lib.complete(fields, "input")
        overlaps.warn_trained_on(inp, run, "train[:100]")
    assert "shares examples" not in caplog.text
    overlaps.warn_trained_on(run.input, run, "train[:100]")
    assert "shares examples" in caplog.text
    # A folder run: the same folder (however its path is written) warns,
    # another does not.
    run.input.update(dataset="folder", data_dir=str(tmp_path / "photos"))
    for data_dir, warned in ((str(tmp_path / "other"), False),
                             (f"{tmp_path}/./photos/", True)):
        caplog.clear()
        inp = config_lib.complete(
            {"dataset": "folder", "data_dir": data_dir}, "input")
        overlaps.warn_trained_on(inp, run, "train[:50%]")
        assert ("shares examples" in caplog.text) is warned, data_dir


@covers("eval_unknown_split")
def test_unknown_or_unparsable_splits_are_one_line(ema_run, tmp_path,
                                                   capsys, caplog):
    """The digits' splits, TFDS's parse, and a prepared TFDS data set's
    split names: one line naming --split and the splits there are (no
    warning first that the split holds training images)."""
    common = ("--mode=eval", f"--workdir={ema_run}",
              f"--output_dir={tmp_path}")
    assert cli(*common, "--split=nosplit") == 1
    line = _one_line_error(capsys)
    assert "--split=nosplit cannot be used" in line and "'train'" in line
    caplog.clear()
    assert cli(*common, "--split=train+test") == 1
    assert "--split=train+test cannot be used" in _one_line_error(capsys)
    assert "shares examples" not in caplog.text
    # The split a --config's test evaluator gives is named as its field.
    assert cli(*common, "--config=digits", "--config.model.image_size=16",
               "--config.input.pp.eval_resize_size=16",
               "--config.evals.test.split=nosplit") == 1
    line = _one_line_error(capsys)
    assert line.startswith(
        "keras-vit-evaluate: error: --config.evals.test.split=nosplit cannot "
        "be used: The digits data has splits 'train' and 'test'"), line
    builder = tfds.testing.DummyMnist(data_dir=str(tmp_path / "tfds"))
    builder.download_and_prepare()
    capsys.readouterr()  # its progress bars
    model = str(tmp_path / "m.keras")
    create_model(None, num_classes=10, image_size=16, patch_size=8,
                 hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=32).save(model)
    tfds_args = ("--mode=eval", f"--model={model}", "--dataset=dummy_mnist",
                 f"--data_dir={tmp_path / 'tfds'}")
    assert cli(*tfds_args, "--split=nosplit") == 1
    line = _one_line_error(capsys)
    assert ("--split=nosplit cannot be used: dummy_mnist holds no split "
            "'nosplit' (it has train, test)") in line
    check_says("eval_unknown_split", line)
    # TFDS's "all" is every split.
    eval_mode.check_split(config_lib.complete(
        {"dataset": "dummy_mnist"}, "input"), "all", ["train", "test"])
    assert cli(*tfds_args, "--split=val|test") == 1
    assert "--split=val|test cannot be used: TFDS cannot parse it" in (
        _one_line_error(capsys))


def test_a_class_names_file_of_another_count_is_refused_for_digits(
        ema_run, tmp_path, capsys):
    names = tmp_path / "names.txt"
    names.write_text("a\nb\nc\n")
    assert cli("--mode=eval", f"--workdir={ema_run}",
               f"--output_dir={tmp_path}",
               f"--class_names_file={names}") == 1
    assert ("holds 3 class names for a 10-class model" in
            _one_line_error(capsys))


@covers("keep_aspect_without_resize")
def test_keep_aspect_without_a_resize_size_crops_to_the_aspect(
        ema_run, tmp_path, capsys, caplog):
    """--keep_aspect where neither the flags nor the model give a resize
    size: the central crop of the input's aspect ratio, then the resize
    (keras-hub's image converter), in keras-vit-evaluate and
    keras-vit-predict alike: predict's answer for a 7 x 9 photo is its
    answer for the photo's central 7 x 7."""
    import numpy as np

    from keras_vit.commands import predict

    caplog.set_level("INFO", logger="absl")
    assert cli("--mode=eval", f"--workdir={ema_run}", "--keep_aspect",
               f"--output_dir={tmp_path / 'eval'}") == 0
    check_says("keep_aspect_without_resize", caplog.text)
    pixels = np.random.default_rng(0).integers(0, 256, (7, 9, 3), np.uint8)
    keras.utils.save_img(str(tmp_path / "wide.png"), pixels, scale=False)
    keras.utils.save_img(str(tmp_path / "square.png"), pixels[:, 1:8],
                         scale=False)

    def answer(name, *flags):
        out = tmp_path / f"{name}{len(flags)}.json"
        assert predict.main(["keras-vit-predict", f"--model={ema_run}",
                             str(tmp_path / f"{name}.png"), "--top_k=10",
                             f"--output={out}", *flags]) == 0
        top = json.loads(out.read_text())["predictions"][0]["top_k"]
        return np.array([t["probability"]
                         for t in sorted(top, key=lambda t: t["class"])])

    cropped = answer("wide", "--keep_aspect")
    np.testing.assert_allclose(cropped, answer("square"), atol=1e-6)
    assert not np.allclose(cropped, answer("wide"), atol=1e-4)
    capsys.readouterr()


def test_resize_size_keeps_the_runs_choice_of_aspect(ema_run, capsys):
    """--resize_size changes N, not the form: a --config whose evaluation
    keeps the aspect ratio still keeps it at --resize_size=24 (the model
    has no such setting of its own), unless --nokeep_aspect."""
    config = os.path.join(ROOT, "configs", "digits.py")
    common = ("--mode=eval", f"--config={config}", f"--model={ema_run}",
              "--config.model.image_size=16",
              "--config.input.pp.eval_resize_size=20",
              "--config.input.pp.eval_keep_aspect=True", "--resize_size=24")
    for extra, kept in (((), True), (("--nokeep_aspect",), False)):
        assert cli(*common, *extra) == 0
        printed = capsys.readouterr().out
        got = json.loads(printed[printed.index("{"):])
        assert (got["resize_size"], got["keep_aspect"]) == (24, kept)


@covers("eval_resize_below_image_size")
def test_eval_resize_below_the_image_size_is_one_line(tmp_path, capsys):
    """Few-shot (and any --config) with eval_resize_size below the image
    size: named before the model loads, not TensorFlow's EnsureShape."""
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               "--config.model.image_size=32",
               "--config.input.pp.eval_resize_size=16",
               f"--model={tmp_path / 'absent.keras'}",
               f"--output_dir={tmp_path}") == 1
    line = _one_line_error(capsys)
    check_says("eval_resize_below_image_size", line)
    config = tiny_configs.digits_config({"model.image_size": 16,
                                         "input.pp.eval_resize_size": 8})
    with pytest.raises(UsageError, match=r"eval_resize_size=8 is smaller "
                       r"than config.model.image_size=16"):
        train_lib.train_and_evaluate(config, str(tmp_path / "run"))


def test_fewshot_rerun_on_another_data_set_keeps_the_first(tmp_path):
    """The same model probed on another data set, with the live config's
    tuples (shots, seeds) beside the stored file's lists: the first data
    set's results are kept, not refused."""
    config = config_lib.base_config()
    config.evals = {"fewshot": config_lib.complete_evaluator(
        dict(shots=(1, 5), seeds=(0, 1)), "fewshot")}
    facts = dict(image_size=16, resize_size=None, config=config.to_dict(),
                 model_location="/m.keras", use_ema=None)
    held = {"a": {"1": {"per_seed": [0.5]}}}
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m", held, {},
                                          **facts)
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["b"], **facts) == held
    # A file written before the weights were recorded (no use_ema) keeps
    # its results for a run's EMA weights too; a recorded other choice
    # refuses.
    path = os.path.join(str(tmp_path), fewshot_reports.FEWSHOT_JSON)
    stored = _read(path)
    stored.pop("use_ema", None)
    with open(path, "w") as f:
        json.dump(stored, f)
    ema = dict(facts, use_ema=True)
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["b"], **ema) == held
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m", held, {},
                                          **ema)
    with pytest.raises(UsageError, match=r"made otherwise \(EMA weights "
                       r"\(--no_ema\): True there, False asked\)"):
        fewshot_reports.check_fewshot_folder(
            str(tmp_path), "m", ["b"], **dict(facts, use_ema=False))
    # Data read from another folder: the results on the first are not
    # dropped unsaid nor written over, but kept apart when probed again.
    elsewhere = config.to_dict()
    elsewhere["input"]["data_dir"] = "/another/copy"
    moved = dict(ema, config=elsewhere)
    with pytest.raises(UsageError, match=r"config.input.data_dir: None "
                       r"there, '/another/copy' asked"):
        fewshot_reports.check_fewshot_folder(str(tmp_path), "m", ["b"],
                                             **moved)
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["a"], **moved) == {}
    assert os.path.exists(tmp_path / "fewshot.before-1.json")


def test_fewshot_results_of_another_draw_of_the_shots_are_not_kept(
        tmp_path):
    """Results drawn otherwise (a file that records no draw, as earlier
    releases wrote, drew each shot count anew): probed again whole, they
    are kept apart; a run on other data sets refuses to drop them."""
    config = config_lib.base_config()
    facts = dict(image_size=16, resize_size=None, config=config.to_dict(),
                 model_location="/m.keras", use_ema=None,
                 shot_draw=linear_probe.SHOT_DRAW)
    old = {k: v for k, v in facts.items() if k != "shot_draw"}
    held = {"a": {"1": {"per_seed": [0.5]}}}
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m", held, {},
                                          **old)
    with pytest.raises(UsageError, match=r"the draw of the shots: None "
                       r"there, 'big_vision: .*' asked"):
        fewshot_reports.check_fewshot_folder(str(tmp_path), "m", ["b"],
                                             **facts)
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["a"], **facts) == {}
    assert os.path.exists(tmp_path / "fewshot.before-1.json")
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m", held, {},
                                          **facts)
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["b"], **facts) == held

def test_fewshot_batch_size_zero_or_unset_is_the_input_batch():
    config = config_lib.base_config()
    config.input.batch_size = 24
    for batch in (None, 0):
        config.evals = {"fewshot": config_lib.complete_evaluator(
            dict(batch_size=batch), "fewshot")}
        assert evaluate_main.fewshot_options(config).batch_size == 24
    config.evals = {"fewshot": config_lib.complete_evaluator(
        dict(batch_size=8), "fewshot")}
    assert evaluate_main.fewshot_options(config).batch_size == 8


def test_vtab_tasks_train_with_every_model_option(tmp_path, capsys):
    """--config.model.remat and stochastic_depth_rate reach each task's
    config (they were dropped while recipe.json recorded them)."""
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), npz)
    out = tmp_path / "out"
    with tfds.testing.mock_data(**MOCK):
        assert cli("--mode=vtab", f"--config={VTAB_CONFIG}",
                   "--config.model.image_size=16",
                   "--config.input.batch_size=4",
                   "--config.evals.test.batch_size=4",
                   "--config.trainer.total_steps=1",
                   "--config.trainer.steps_per_loop=1",
                   "--config.checkpoints.every_steps=0",
                   "--config.trainer.jit_compile=False",
                   "--config.input.shuffle_buffer=8",
                   "--config.model.remat=block",
                   "--config.model.stochastic_depth_rate=0.1",
                   f"--config.input.data_dir={tmp_path}", f"--model={npz}",
                   f"--output_dir={out}", "--tasks=smallnorb_elev") == 0
    capsys.readouterr()
    task = _read(out / "runs" / "smallnorb_elev" / "final" / "config.json")
    assert task["model"]["remat"] == "block"
    assert task["model"]["stochastic_depth_rate"] == 0.1
    assert task["model"]["hidden_size"] == 16  # the backbone's
    recipe = _read(out / "recipe.json")
    assert recipe["model"]["stochastic_depth_rate"] == 0.1


def test_an_empty_tasks_flag_is_refused(tmp_path, capsys):
    # --tasks= (or only commas) named every task before: 19 runs nobody
    # asked for.
    for tasks in ("", ","):
        assert cli("--mode=vtab", "--config=configs/vtab.py",
                   f"--model={tmp_path / 'm.keras'}", f"--tasks={tasks}",
                   f"--output_dir={tmp_path}") == 1
        assert f"--tasks={tasks} names no task" in _one_line_error(capsys)


def test_a_vtab_resolution_the_patches_do_not_divide_writes_nothing(
        tmp_path, capsys):
    # Refused before the output folder and its backbone.npz are made.
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), npz)
    assert cli("--mode=vtab", f"--config={VTAB_CONFIG}",
               "--config.model.image_size=20", f"--model={npz}",
               f"--output_dir={tmp_path / 'out'}", "--tasks=dtd") == 1
    assert ("(--config.model.image_size) height 20 is not divisible by "
            "patch size 8") in _one_line_error(capsys)
    assert not (tmp_path / "out").exists()
    (tmp_path / "mine").mkdir()  # a folder the user made stays
    assert cli("--mode=vtab", f"--config={VTAB_CONFIG}",
               "--config.model.image_size=20", f"--model={npz}",
               f"--output_dir={tmp_path / 'mine'}", "--tasks=dtd") == 1
    assert (tmp_path / "mine").is_dir()


# keras-vit-evaluate --mode=vtab on TFDS mock data: one step per task.
TINY_VTAB = (
    f"--config={VTAB_CONFIG}", "--config.model.image_size=16",
    "--config.input.batch_size=4", "--config.evals.test.batch_size=4",
    "--config.trainer.total_steps=1", "--config.trainer.steps_per_loop=1",
    "--config.checkpoints.every_steps=0", "--config.trainer.jit_compile=False",
    "--config.input.shuffle_buffer=8")


def _vtab_folder(tmp_path, capsys):
    """A tiny .npz's VTAB output folder with smallnorb_elev done, under
    --name=tiny; the command line that adds to it."""
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), npz)
    out = str(tmp_path / "out")
    command = ["--mode=vtab", *TINY_VTAB, f"--config.input.data_dir={tmp_path}",
               f"--model={npz}", f"--output_dir={out}", "--name=tiny"]
    with tfds.testing.mock_data(**MOCK):
        assert cli(*command, "--tasks=smallnorb_elev") == 0
    capsys.readouterr()
    return out, command


def test_a_vtab_task_stopped_before_its_first_step_says_nothing_saved(
        tmp_path, capsys, monkeypatch):
    # The task's run stopped while its step compiled: it saved nothing,
    # and the command's line says so (status 42, as for any stop).
    npz = str(tmp_path / "src.npz")
    checkpoint.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=32), npz)
    monkeypatch.setattr(train_lib, "train_and_evaluate", lambda *a, **k: {
        "preempted": True, "signal": "Ctrl-C", "step": 0, "saved": False})
    with tfds.testing.mock_data(**MOCK):
        assert cli("--mode=vtab", *TINY_VTAB,
                   f"--config.input.data_dir={tmp_path}", f"--model={npz}",
                   f"--output_dir={tmp_path / 'out'}",
                   "--tasks=smallnorb_elev") == 42
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "keras-vit-evaluate: stopped: Ctrl-C in a VTAB task, nothing saved; "
        "run the same command to resume.")


def _lines(path):
    with open(path) as f:
        return f.read().splitlines()


def test_a_vtab_folder_copied_elsewhere_runs_its_task_again_there(
        tmp_path, capsys, monkeypatch):
    """Each task's config names the folder's backbone.npz: a copy of the
    folder (or the folder spelled otherwise) takes it as the same one
    (backbone.json says which model it is), where it was refused as
    "another config"."""
    out, command = _vtab_folder(tmp_path, capsys)
    saved = json.load(open(os.path.join(
        out, vtab_run.RUNS, "smallnorb_elev", vtab_run.FINAL, wd.CONFIG)))
    assert saved["init"]["model"] == os.path.join(out, vtab_run.BACKBONE)
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    # The copy's task stopped before its end: run again there.
    os.remove(copy / vtab_run.RUNS / "smallnorb_elev" / vtab_run.FINAL
              / wd.METRICS)
    os.remove(copy / "results.jsonl")
    monkeypatch.chdir(tmp_path)
    again = [arg if not arg.startswith("--output_dir=") else
             "--output_dir=copy" for arg in command]
    with tfds.testing.mock_data(**MOCK):
        assert cli(*again, "--tasks=smallnorb_elev") == 0
    (done,) = _lines(copy / "results.jsonl")
    assert json.loads(done)["task"] == "smallnorb_elev"
    # A trial resumed from its checkpoints in the copy: its start, the
    # copy's backbone, is the one it started from, byte for byte.
    first, second = (os.path.join(folder, vtab_run.BACKBONE)
                     for folder in (out, copy))
    assert model_init._same_path(first, second)
    with open(second, "ab") as f:
        f.write(b"\0")
    assert not model_init._same_path(first, second)
    assert not model_init._same_path(first, "gs://bucket/backbone.npz")
    # The folder moved: the start it named is gone, the one of its name
    # in the new place is it.
    shutil.rmtree(out)
    assert model_init._same_path(first, second)
    assert not model_init._same_path(first, str(copy / "other.npz"))


@covers("vtab_damaged_results")
def test_vtab_results_cut_short_rerun_and_damaged_ones_are_refused(
        tmp_path, capsys, caplog):
    """results.jsonl is rewritten whole per task, but a copy may cut its
    last line short: that line is left out with a warning naming it, and
    its task runs again; a damaged line before it, or a damaged
    recipe.json or backbone.json, is one line naming the file and the
    fix (they were tracebacks), and nothing is run or rewritten."""
    out, command = _vtab_folder(tmp_path, capsys)
    results = os.path.join(out, "results.jsonl")
    (done,) = _lines(results)
    with open(results, "a") as f:
        f.write('{"task": "dtd", "acc\n')
    caplog.set_level("WARNING")
    with tfds.testing.mock_data(**MOCK):
        assert cli(*command, "--tasks=smallnorb_elev,dtd") == 0
    warned = [r.getMessage() for r in caplog.records
              if "cut short" in r.getMessage()]
    assert len(warned) == 1, warned
    assert warned[0].startswith(
        f"{results}: the last line (2) is cut short or damaged "
        "(Unterminated string") and warned[0].endswith(
        "): left out; its task runs again if selected."), warned
    lines = _lines(results)
    assert lines[0] == done and json.loads(lines[1])["task"] == "dtd"
    capsys.readouterr()
    # A damaged line before the last: refused, the file left as it is.
    with open(results, "w") as f:
        f.write(f'{lines[0]}\n{{"task": "dt\n{lines[1]}\n')
    before = _lines(results)
    assert cli(*command, "--tasks=smallnorb_elev,dtd,svhn") == 1
    error = _one_line_error(capsys)
    assert error.startswith(
        f"keras-vit-evaluate: error: {results}: line 2 is damaged "
        "(Unterminated string") and error.endswith(
        "): mend it, or delete that line (its task then runs again), or "
        "pass another --output_dir."), error
    check_says("vtab_damaged_results", f"{warned[0]}\n{error}")
    assert _lines(results) == before
    assert not os.path.exists(os.path.join(out, "runs", "svhn"))
    with open(results, "w") as f:
        f.write("\n".join(lines) + "\n")
    for name in ("recipe.json", "backbone.json"):
        path = os.path.join(out, name)
        os.rename(path, path + ".good")
        with open(path, "w") as f:
            f.write("garbage\n")
        assert cli(*command, "--tasks=svhn") == 1
        error = _one_line_error(capsys)
        assert error.startswith(
            f"keras-vit-evaluate: error: {path} is damaged (Expecting value"
            ) and error.endswith(
            "): put back a good copy of it, or pass another --output_dir."
            ), error
        os.replace(path + ".good", path)
    assert not os.path.exists(os.path.join(out, "runs", "svhn"))


def test_a_vtab_rerun_under_another_name_is_refused(tmp_path, capsys):
    """The same model's tasks under another --name (or none: the model's
    file name): refused in one line naming the name the folder holds, not
    reports relabelled while results.jsonl keeps the old name."""
    out, command = _vtab_folder(tmp_path, capsys)
    files = {n: open(os.path.join(out, n), "rb").read()
             for n in ("results.jsonl", "results.md", "summary.json")}
    results = os.path.join(out, "results.jsonl")
    for name, shown in (("--name=foo", "'foo'"), ("--name=", "'src.npz'")):
        argv = [a for a in command if not a.startswith("--name=")]
        if name != "--name=":
            argv.append(name)
        assert cli(*argv, "--tasks=smallnorb_elev,svhn") == 1
        assert _one_line_error(capsys) == (
            f"keras-vit-evaluate: error: {results} holds the VTAB results "
            f"of this model named 'tiny', not {shown}: pass --name=tiny to "
            "add to them, or another --output_dir.")
    assert not os.path.exists(os.path.join(out, "runs", "svhn"))
    assert files == {n: open(os.path.join(out, n), "rb").read()
                     for n in files}


def test_fewshot_rerun_compares_the_evaluator_the_run_uses(tmp_path):
    """With a second few-shot evaluator in the config, the recipe compared
    is the one named fewshot (the one the run uses), not the last: results
    made at another l2_reg are refused, not kept as made alike; at another
    batch size, kept."""
    def facts(l2_reg, batch_size=None):
        config = config_lib.base_config()
        config.evals = {
            "fewshot": config_lib.complete_evaluator(
                dict(shots=(1,), seeds=(0,), l2_reg=l2_reg,
                     batch_size=batch_size), "fewshot"),
            "fewshot_b6": config_lib.complete_evaluator(
                dict(shots=(1,), seeds=(0,), layer=6), "fewshot")}
        return dict(image_size=16, resize_size=None, use_ema=None,
                    config=config.to_dict(), model_location="/m.keras")

    held = {"a": {"1": {"per_seed": [0.5]}}}
    fewshot_reports.write_fewshot_reports(str(tmp_path), "m", held, {},
                                          **facts(1024.0))
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["b"], **facts(1024.0)) == held
    # Another batch (a smaller one after running out of memory) extracts
    # the same features: the results are kept.
    assert fewshot_reports.check_fewshot_folder(
        str(tmp_path), "m", ["b"], **facts(1024.0, batch_size=8)) == held
    with pytest.raises(UsageError, match=r"config.evals.fewshot.l2_reg: "
                       r"1024.0 there, 1.0 asked"):
        fewshot_reports.check_fewshot_folder(str(tmp_path), "m", ["b"],
                                             **facts(1.0))


def test_a_fewshot_split_that_is_none_is_named_before_extraction(
        tmp_path, capsys):
    """A few-shot data set's split that the data lacks: one line naming
    the config field, before any feature is extracted (TFDS's own
    "Unknown split" came after the whole training pool)."""
    path = str(tmp_path / "m.keras")
    create_model(None, num_classes=3, image_size=16, patch_size=8,
                 hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=16).save(path)
    assert cli("--mode=fewshot", f"--config={FEWSHOT_CONFIG}:digits",
               "--config.model.image_size=16",
               "--config.evals.fewshot.datasets.digits.test_split=valid",
               f"--model={path}", f"--output_dir={tmp_path / 'fs'}") == 1
    line = _one_line_error(capsys)
    assert line.startswith(
        "keras-vit-evaluate: error: --config.evals.fewshot.datasets.digits."
        "test_split=valid cannot be used: The digits data has splits "
        "'train' and 'test', got 'valid'."), line
    assert line.endswith(
        "Pass --config.evals.fewshot.datasets.digits.test_split=<an "
        "existing split or a slice of one>, e.g. --config.evals.fewshot."
        "datasets.digits.test_split='test' or --config.evals.fewshot."
        "datasets.digits.test_split='test[:50%]'."), line
    # A TFDS data set's splits, as TFDS lists them.
    inp = config_lib.complete(dict(dataset="cifar100"), "input")
    with pytest.raises(UsageError) as info:
        sources.check_split(inp, "validation", "F", ["train", "test"])
    assert str(info.value).startswith(
        "F=validation cannot be used: cifar100 holds no split 'validation' "
        "(it has train, test). Pass F=<an existing split")
    sources.check_split(inp, "train[:10%]+test", "F", ["train", "test"])


def test_a_fewshot_split_is_named_by_its_own_evaluator_and_field(
        tmp_path, capsys):
    """The refusal names the few-shot evaluator the config holds (here
    config.evals.probe, not config.evals.fewshot) and gives an example of
    the field's own kind (a train split for train_split); an image
    folder's split is looked up before anything is read."""
    path = str(tmp_path / "m.keras")
    create_model(None, num_classes=3, image_size=16, patch_size=8,
                 hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=16).save(path)
    config = tmp_path / "probe.py"
    config.write_text(
        "from keras_vit.configs import fewshot\n\n\n"
        "def get_config(arg=None):\n"
        "    config = fewshot.get_config(arg)\n"
        "    with config.unlocked():\n"
        "        config.evals.probe = config.evals.fewshot\n"
        "        del config.evals['fewshot']\n"
        "    return config\n")
    assert cli("--mode=fewshot", f"--config={config}:digits",
               "--config.model.image_size=16",
               "--config.evals.probe.datasets.digits.train_split=valid",
               f"--model={path}", f"--output_dir={tmp_path / 'fs'}") == 1
    line = _one_line_error(capsys)
    field = "--config.evals.probe.datasets.digits.train_split"
    assert line.startswith(f"keras-vit-evaluate: error: {field}=valid "
                           "cannot be used: The digits data"), line
    assert line.endswith(f"e.g. {field}='train' or {field}='train[:50%]'."
                         ), line
    root = tmp_path / "photos"
    write_photo_folder(root, per_class=2)
    inp = config_lib.complete(dict(dataset="folder", data_dir=str(root)),
                              "input")
    sources.check_split(inp, "train[:50%]", "F")
    with pytest.raises(UsageError, match=r"^F=valid cannot be used: Image "
                       r"folder .* has no split 'valid'"):
        sources.check_split(inp, "valid", "F")
