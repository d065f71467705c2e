"""The user's journeys, typed as a user types them: the keras-vit-*
console scripts run as subprocesses, offline, with a Hugging Face cache
(HF_HOME) and a $KERAS_VIT_CACHE that the tests fill with tiny models.

- a released name (`--model=ViT-B_16`, `--config digits`) and a Hugging
  Face model (`--config=digits --config.init.model=hf://ORG/NAME`): fine-
  tune on the digits, evaluate the run, export it, predict from the export;
- a .keras file: LiteRT export, then predict from the .tflite;
- a name and an hf:// model offline with an empty cache: one line about
  the cache and how to download;
- the matrix: every command (keras-vit-evaluate in each of its three
  modes) x every kind of source (keras-hub presets among them) works
  or is refused in one line that says why; few-shot probes and VTAB-1k
  read DTD, which TensorFlow Datasets prepared from a loopback download
  (tests/fake_tfds.py).
"""

import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit
from keras_vit.checkpoint import loader, weights
from keras_vit.data import vtab
from tests import fake_tfds, model_cache
from tests.console import script as _script

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HF_URI = "hf://test-org/tiny-vit"
# Two optimizer steps of the digits recipe, evaluated once, at the end.
FAST = [
    "--config.trainer.total_steps=2", "--config.input.batch_size=16",
    "--config.evals.test.every_steps=0", "--config.checkpoints.every_steps=0",
    "--config.log.every_steps=1", "--config.trainer.jit_compile=False",
    "--config.schedule.warmup_steps=1",
]




# What the tiny stand-in for ViT-B_16 holds (`catalog.expected_architecture`).
TINY_RELEASE = dict(hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16,
                    patch_size=8, resnet_layers=None, num_classes=10, grid=4)
STAND_IN = """\
from keras_vit.checkpoint.zoo import catalog

catalog.expected_architecture = lambda info: dict({!r})
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """Tiny models where a user's caches keep them: ViT-B_16 (10 classes,
    the digits' count) in $KERAS_VIT_CACHE, test-org/tiny-vit (5 classes)
    in the Hugging Face cache; the same ViT-B_16 as .npz and .keras files;
    two images; the environment of an offline user."""
    root = tmp_path_factory.mktemp("journeys")
    keras.utils.set_random_seed(0)
    model = keras_vit.create_model(
        None, num_classes=10, image_size=32, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16, head_zero_init=False,
    )
    npz = str(root / "tiny.npz")
    weights.save_npz(model, npz)
    model.save(str(root / "tiny.keras"))
    model_cache.fill_keras_vit_cache(root / "cache", npz,
                                     "imagenet21k/ViT-B_16.npz")
    model_cache.fill_hf_cache(root / "hf_home" / "hub")
    os.makedirs(root / "images")
    rng = np.random.default_rng(0)
    for name in ("a.png", "b.png"):
        pixels = rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)
        Image.fromarray(pixels).save(root / "images" / name)
    # The tiny file stands in for the released ViT-B_16: in every command
    # the catalog's table of what the name holds says the tiny sizes, so
    # the release check still runs (tests/test_model_names.py checks the
    # real table and its refusals).
    site = root / "site"
    os.makedirs(site)
    (site / "sitecustomize.py").write_text(STAND_IN.format(TINY_RELEASE))
    env = dict(os.environ, PYTHONPATH=f"{site}{os.pathsep}{ROOT}",
               CUDA_VISIBLE_DEVICES="",
               HF_HOME=str(root / "hf_home"), HF_HUB_OFFLINE="1",
               KERAS_VIT_CACHE=str(root / "cache"), KERAS_VIT_OFFLINE="1",
               KAGGLEHUB_CACHE=str(root / "kagglehub"))
    for name in ("HF_HUB_CACHE", "TF_CPP_MIN_LOG_LEVEL",
                 "KERAS_VIT_MODELS_BASE_URL"):
        env.pop(name, None)
    # DTD, downloaded by TensorFlow Datasets from the loopback server and
    # prepared, for the few-shot and VTAB-1k cells.
    from tensorflow_datasets.image_classification import dtd

    www, tfds_dir = root / "www", str(root / "tfds")
    os.makedirs(www)
    fake_tfds.write_dtd_archive(www)
    real_url = dtd._DATA_URL
    with fake_tfds.serve(www) as (url, _):
        dtd._DATA_URL = url
        try:
            vtab.prepare("dtd", tfds_dir, download=True)
        finally:
            dtd._DATA_URL = real_url
    return dict(root=root, npz=npz, keras=str(root / "tiny.keras"),
                images=str(root / "images"), env=env, tfds=tfds_dir)


def run(home, name, *args, env=None):
    result = subprocess.run(
        _script(name) + list(args), capture_output=True, text=True,
        env=env or home["env"], cwd=str(home["root"]), timeout=600,
    )
    return result


def ok(result):
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def one_line_error(result, name):
    """The one line a refused command printed (exit status 1, no
    traceback)."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines()
             if line.startswith(f"keras-vit-{name}:")]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


def predictions(home, model, tag):
    """keras-vit-predict's JSON answer for the two images."""
    out = str(home["root"] / f"{tag}.json")
    ok(run(home, "predict", f"--model={model}", home["images"],
           f"--output={out}"))
    with open(out) as f:
        data = json.load(f)
    return {os.path.basename(p["file"]): {t["name"]: t["probability"]
                                          for t in p["top_k"]}
            for p in data["predictions"]}


def assert_same_answers(a, b, atol):
    assert a.keys() == b.keys()
    for image in a:
        assert a[image].keys() == b[image].keys(), image
        for name, p in a[image].items():
            assert abs(p - b[image][name]) <= atol, (image, name)


@pytest.fixture(scope="module")
def runs(home):
    """Two fine-tuning runs on the digits, typed as a user would: from a
    released name (--model, `--config NAME`), and from a Hugging Face model
    (--config.init.model, `--config=NAME`)."""
    root = home["root"]
    by_name = str(root / "ft_name")
    by_hf = str(root / "ft_hf")
    results = {
        "name": run(home, "train", "--config", "digits",
                    f"--workdir={by_name}", "--model=ViT-B_16", *FAST),
        "hf": run(home, "train", "--config=digits", f"--workdir={by_hf}",
                  f"--config.init.model={HF_URI}", *FAST),
    }
    return dict(results=results, name=by_name, hf=by_hf)


@pytest.mark.parametrize("kind", ["name", "hf"])
def test_fine_tune_evaluate_export_predict(home, runs, kind):
    result = ok(runs["results"][kind])
    workdir = runs[kind]
    # Quiet as python train.py: no TensorFlow start-up notices.
    for notice in ("cpu_feature_guard", "oneDNN", "cuInit", "cudart_stub"):
        assert notice not in result.stderr, notice
    with open(os.path.join(workdir, "config.json")) as f:
        config = json.load(f)
    start = config["init"]["model"]
    if kind == "name":
        assert start == os.path.join(
            home["env"]["KERAS_VIT_CACHE"], "vit_models", "imagenet21k",
            "ViT-B_16.npz")
    else:
        assert os.path.realpath(start) == os.path.realpath(os.path.join(
            home["env"]["HF_HOME"], "hub", "models--test-org--tiny-vit",
            "snapshots", model_cache.REVISION))
    # The run is the model it started from, fine-tuned: its architecture.
    started = loader.describe_source(start)
    for field in ("hidden_size", "num_layers", "num_heads", "mlp_dim",
                  "patch_size"):
        assert config["model"][field] == getattr(started, field), field
    with open(os.path.join(workdir, "metrics.json")) as f:
        metrics = json.load(f)
    assert metrics["steps"] == 2 and metrics["test_examples"] == 360

    # keras-vit-evaluate: the run's own numbers again.
    result = ok(run(home, "evaluate", "--mode=eval", f"--workdir={workdir}"))
    evaluated = json.loads(result.stdout[result.stdout.index("{"):])
    assert evaluated["num_examples"] == 360
    assert evaluated["accuracy"] == metrics["test_accuracy"]
    assert evaluated["loss"] == pytest.approx(metrics["test_loss"], 1e-5)

    # keras-vit-export, then keras-vit-predict from the export answers as
    # from the run.
    export_dir = str(home["root"] / f"export_{kind}")
    result = ok(run(home, "export", f"--model={workdir}",
                    f"--export_dir={export_dir}"))
    version = result.stdout.strip().splitlines()[-1]
    assert version == os.path.join(export_dir, "vit", "1")
    served = predictions(home, os.path.join(export_dir, "vit"),
                         f"served_{kind}")
    direct = predictions(home, workdir, f"direct_{kind}")
    assert_same_answers(served, direct, atol=1e-5)
    # The digits' class names, which the run recorded, top 5 of them.
    assert len(served["a.png"]) == 5
    assert set(served["a.png"]) <= {str(i) for i in range(10)}


def test_keras_file_to_litert_then_predict(home):
    out = str(home["root"] / "edge")
    result = ok(run(home, "export", f"--model={home['keras']}",
                    f"--export_dir={out}", "--format=litert"))
    tflite = os.path.join(out, "vit.tflite")
    assert result.stdout.strip().splitlines()[-1] == tflite
    # LiteRT's notice of its CPU delegate stays off the terminal.
    assert "XNNPACK" not in result.stderr, result.stderr[-3000:]
    on_device = predictions(home, tflite, "litert")
    keras_file = predictions(home, home["keras"], "keras_file")
    # float32 LiteRT equals the Keras model (litert.VERIFY_ATOL).
    assert_same_answers(on_device, keras_file, atol=1e-4)


def test_offline_with_an_empty_cache_says_how_to_download(home, tmp_path):
    env = dict(home["env"], KERAS_VIT_CACHE=str(tmp_path / "empty"),
               HF_HOME=str(tmp_path / "hf_empty"))
    line = one_line_error(
        run(home, "train", "--config", "digits",
            f"--workdir={tmp_path}/run", "--model=ViT-L_16", env=env),
        "train")
    target = os.path.join(str(tmp_path / "empty"), "vit_models",
                          "imagenet21k", "ViT-L_16.npz")
    assert "no such file" not in line
    for part in ("is not in the cache", target, "unset KERAS_VIT_OFFLINE",
                 "copy the file to"):
        assert part in line, part
    assert not os.path.exists(tmp_path / "run")  # nothing started
    line = one_line_error(
        run(home, "predict", f"--model={HF_URI}", home["images"], env=env),
        "predict")
    assert "no such file" not in line
    for part in ("not (fully) in the Hugging Face cache",
                 "hf download test-org/tiny-vit", "unset HF_HUB_OFFLINE"):
        assert part in line, part


# ----------------------------------------------------------- the matrix
# Runs every cell in one child process, each through its command's entry
# point (`main(argv)`, what the console script calls), in the environment
# of the other tests; prints {cell: [status, error line or None]}.
_DRIVER = r"""
import contextlib, io, json, sys, traceback
cells = json.loads(sys.argv[1])
out = {}
for key, (name, argv) in cells.items():
    module = __import__(f"keras_vit.commands.{name}", fromlist=["main"])
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = module.main([f"keras-vit-{name}"] + argv)
    except BaseException:
        status = "crash: " + traceback.format_exc()[-2000:]
    lines = [line for line in err.getvalue().splitlines()
             if line.startswith(f"keras-vit-{name}:")]
    out[key] = [status, lines]
print("MATRIX " + json.dumps(out))
"""

# Expected refusals: (command, source kind) -> what the line says.
EXPORTS = ("saved_model", "litert")
# keras-vit-evaluate's three modes are three cells of the matrix.
CELLS = ("train", "evaluate", "evaluate:fewshot", "evaluate:vtab", "export",
         "convert", "analysis", "predict")
REFUSED = {
    **{(c, k): "serves predictions (keras-vit-predict) but holds no Keras "
       "model" for c in CELLS if c != "predict" for k in EXPORTS},
    # The Hugging Face model has 5 classes, the digits 10.
    ("evaluate", "hf"): "The model predicts 5 classes but digits has 10",
    ("evaluate", "hub_folder"): "The model predicts 5 classes but digits "
    "has 10",
    ("evaluate", "keras_hub"): "The model predicts 5 classes but digits "
    "has 10",
    ("evaluate", "kaggle"): "The model predicts 5 classes but digits "
    "has 10",
}


# A few steps of VTAB-1k's protocol at 32 x 32, and few-shot probes at
# 32 x 32, on the prepared DTD (no download).
TINY_VTAB = [
    "--config=vtab", "--tasks=dtd", "--config.model.image_size=32",
    "--config.input.batch_size=8", "--config.evals.test.batch_size=32",
    "--config.trainer.total_steps=2", "--config.checkpoints.every_steps=0",
    "--config.trainer.jit_compile=False", "--config.input.shuffle_buffer=8",
    "--config.input.download=False",
]
TINY_FEWSHOT = [
    "--config=fewshot:dtd", "--config.model.image_size=32",
    "--config.input.pp.eval_resize_size=32", "--config.input.batch_size=64",
    "--config.input.download=False",
]


def _argv(name, source, out, tfds_dir):
    return {
        "train": ["--config=digits", f"--workdir={out}", f"--model={source}",
                  *FAST],
        "evaluate": ["--mode=eval", f"--model={source}", "--dataset=digits",
                     "--batch_size=120"],
        "evaluate:fewshot": ["--mode=fewshot", f"--model={source}",
                             f"--output_dir={out}", *TINY_FEWSHOT,
                             f"--config.input.data_dir={tfds_dir}"],
        "evaluate:vtab": ["--mode=vtab", f"--model={source}",
                          f"--output_dir={out}", *TINY_VTAB,
                          f"--config.input.data_dir={tfds_dir}"],
        "export": [f"--model={source}", f"--export_dir={out}",
                   "--no_warmup", "--no_verify"],
        "convert": [f"--model={source}", f"--output={out}.keras"],
        "analysis": [f"--model={source}", "--digits=2",
                     f"--output_dir={out}"],
        "predict": [f"--model={source}", "images"],
    }[name]


def test_every_command_with_every_kind_of_source(home, runs, tmp_path):
    ok(runs["results"]["name"])
    workdir = runs["name"]
    exports = tmp_path / "exports"
    ok(run(home, "export", f"--model={workdir}", f"--export_dir={exports}"))
    ok(run(home, "export", f"--model={workdir}", f"--export_dir={exports}",
           "--format=litert"))
    hub_folder = str(tmp_path / "hub_folder")
    shutil.copytree(model_cache.HF_FIXTURE, hub_folder)
    keras_hub = str(tmp_path / "keras_hub_preset")
    shutil.copytree(os.path.join(ROOT, "tests", "fixtures", "keras_hub",
                                 "vit_classifier"), keras_hub)
    # The same preset downloaded by kagglehub (its cache, a whole bundle).
    kaggle_cache = os.path.join(home["env"]["KAGGLEHUB_CACHE"], "models",
                                "keras", "vit", "keras", "tiny_vit")
    if not os.path.exists(kaggle_cache):
        shutil.copytree(keras_hub, os.path.join(kaggle_cache, "1"))
        open(os.path.join(kaggle_cache, "1.complete"), "w").close()
    sources = {
        "name": "ViT-B_16", "hf": HF_URI, "hub_folder": hub_folder,
        "keras_hub": keras_hub,
        "kaggle": "kaggle://keras/vit/keras/tiny_vit/1",
        "npz": home["npz"], "gs": "gs://vit_models/imagenet21k/ViT-B_16.npz",
        "keras": home["keras"], "workdir": workdir,
        "saved_model": str(exports / "vit"),
        "litert": str(exports / "vit.tflite"),
    }
    cells = {
        f"{cell}|{kind}": [cell.split(":")[0], _argv(
            cell, source, str(tmp_path / f"{cell.replace(':', '_')}_{kind}"),
            home["tfds"])]
        for cell in CELLS for kind, source in sources.items()
    }
    # Fine-tuning starts from a name or a URI by config.init.model alike.
    for kind in ("name", "hf"):
        cells[f"train|{kind}|init"] = ["train", [
            "--config=digits", f"--workdir={tmp_path}/init_{kind}",
            f"--config.init.model={sources[kind]}", *FAST]]
    result = subprocess.run(
        [sys.executable, "-c", _DRIVER, json.dumps(cells)],
        capture_output=True, text=True, env=home["env"],
        cwd=str(home["root"]), timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = [s for s in result.stdout.splitlines() if s.startswith("MATRIX ")]
    table = json.loads(line[-1][len("MATRIX "):])
    assert len(table) == len(CELLS) * len(sources) + 2
    for key, (status, lines) in table.items():
        name, kind = key.split("|")[:2]
        refusal = REFUSED.get((name, kind))
        if refusal is None:
            assert status == 0, (key, status, lines)
            assert not any(": error:" in s for s in lines), (key, lines)
        else:
            assert status == 1, (key, status, lines)
            assert len(lines) == 1, (key, lines)
            command = name.split(":")[0]
            assert lines[0].startswith(f"keras-vit-{command}: error: "), key
            assert refusal in lines[0], (key, lines[0])
    # What the working cells wrote.
    assert os.path.exists(tmp_path / "convert_hf.keras")
    assert os.path.exists(tmp_path / "export_name" / "vit" / "1"
                          / "saved_model.pb")
    for kind in ("hub_folder", "keras_hub"):
        with open(tmp_path / f"train_{kind}" / "metrics.json") as f:
            assert json.load(f)["steps"] == 2
    # Few-shot probes and VTAB-1k from every kind of model source.
    for kind in sources:
        if kind in EXPORTS:
            continue
        with open(tmp_path / f"evaluate_fewshot_{kind}" / "fewshot.json") as f:
            assert set(json.load(f)["results"]["dtd"]) == {
                "1", "5", "10", "25"}, kind
        with open(tmp_path / f"evaluate_vtab_{kind}" / "results.jsonl") as f:
            record = json.loads(f.readline())
        assert (record["task"], record["test_examples"]) == ("dtd", 94), kind
