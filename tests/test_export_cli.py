"""The export command line, keras-vit-export: --model names a .keras file,
an official .npz checkpoint or a training workdir.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from keras_vit.commands import export as export_cli
from keras_vit.commands import predict
from keras_vit.export import files as export_files
from keras_vit.export import litert_record
from tests import tiny
from tests.test_export import (
    ROOT,
    SIZE,
    make_images,
    reference,
    serve,
    tiny_model,
)


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def images():
    return make_images()


@pytest.mark.slow
def test_cli_keras_model(model, images, tmp_path):
    keras_path = str(tmp_path / "model.keras")
    model.save(keras_path)
    export_dir = str(tmp_path / "exports")
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit.commands.export",
         f"--export_dir={export_dir}", "--model_name=cli",
         f"--model={keras_path}", "--class_names=a,b,c,d,e",
         "--top_k=2", "--no_warmup"],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    path = result.stdout.strip().splitlines()[-1]
    assert path == os.path.join(export_dir, "cli", "1")
    out = serve(tf.saved_model.load(path), [images["jpeg"]])
    np.testing.assert_allclose(
        out["probabilities"], reference(model, [images["jpeg"]]), atol=1e-5)
    assert out["class_names"].shape == (1, 2)
    assert not os.path.exists(
        os.path.join(path, "assets.extra", export_files.WARMUP_FILE))
    # The export's folders are no training workdir: refused in one line
    # (before TensorFlow loads), nothing written beside what TF Serving
    # loads.
    from tests import console

    for folder, holds in ((path, "saved_model.pb"), (os.path.dirname(path),
                                                      "1")):
        before = sorted(os.listdir(folder))
        result = console.run("train", ["--config=digits",
                                       f"--workdir={folder}"])
        assert result.returncode == 1, result.stderr[-2000:]
        assert result.stderr.strip().splitlines() == [
            f"keras-vit-train: error: --workdir {folder} holds "
            f"{os.path.join(folder, holds)} and no run's config.json: it is "
            "a model export, among whose files the run would write its own "
            "(checkpoints/, train/, ...). Give the run a folder of its own."
        ], result.stderr[-2000:]
        assert sorted(os.listdir(folder)) == before


def test_cli_npz_source(model, images, tmp_path, capsys):
    from keras_vit.checkpoint import weights as checkpoint

    npz = str(tmp_path / "tiny.npz")
    checkpoint.save_npz(model, npz)
    export_dir = str(tmp_path / "exports")
    # Sizes, pooling, pre-logits width and class count come from the file.
    status = export_cli.main(["keras-vit-export", "--export_dir", export_dir,
                              "--model", npz, "--image_size", str(SIZE),
                              "--no_warmup"])
    assert status == 0
    path = capsys.readouterr().out.strip()
    assert path == os.path.join(export_dir, "vit", "1")
    np.testing.assert_allclose(
        serve(tf.saved_model.load(path), [images["png"]])["probabilities"],
        reference(model, [images["png"]]), atol=1e-5)
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        assert json.load(f)["source"] == dict(location=npz, kind="npz",
                                              step=None)
    assert export_cli.main(["keras-vit-export", "--export_dir", export_dir,
                            "--model", npz, "--num_classes", "7"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-vit-export: error: ")
    assert "does not match the 5-class head" in err[0]
    assert export_cli.main(["keras-vit-export", "--export_dir", export_dir,
                            "--model", npz + ".missing.npz"]) == 1
    assert "no such file or folder" in capsys.readouterr().err
    # Names of another count: the flag that gave them is named.
    three = tmp_path / "three.txt"
    three.write_text("a\nb\nc\n")
    for flag, words in ((f"--class_names_file={three}",
                         f"--class_names_file={three} holds 3 class names "
                         "for a 5-class model"),
                        ("--class_names=a,b", "--class_names gives 2 names "
                         "for a 5-class model")):
        assert export_cli.main(["keras-vit-export", "--export_dir",
                                export_dir, "--model", npz, flag]) == 1
        assert words in capsys.readouterr().err
    assert os.listdir(os.path.join(export_dir, "vit")) == ["1"]


@pytest.mark.parametrize("keep_aspect", [False, True])
def test_cli_workdir_source(images, tmp_path, capsys, keep_aspect):
    """A workdir's evaluation resize (40, both sides or the shorter side)
    is what its SavedModel, its LiteRT file and keras-vit-predict on the
    workdir itself apply, and what export.json records."""
    config = tiny.digits_base()
    config.model.update(hidden_size=32, num_layers=1, num_heads=2,
                        mlp_dim=64, head_zero_init=False)
    config.input.pp.eval_resize_size = 40
    config.input.pp.eval_keep_aspect = keep_aspect
    names = [f"digit {i}" for i in range(10)]
    workdir = str(tmp_path / "run")
    trained = tiny.write_run(config, workdir, names)
    export_dir = str(tmp_path / "exports")
    assert export_cli.main(["keras-vit-export", "--export_dir", export_dir,
                            "--model", workdir, "--model_name", "digits",
                            "--no_warmup"]) == 0
    path = capsys.readouterr().out.strip()
    with open(os.path.join(path, "assets", "labels.txt")) as f:
        assert f.read().splitlines() == names
    datas = [images["png_gray"], images["jpeg"]]
    out = serve(tf.saved_model.load(path), datas)
    # The run's eval preprocessing (resize 40, crop 32) is the served one.
    want = reference(trained, datas, 40, keep_aspect)
    np.testing.assert_allclose(out["probabilities"], want, atol=1e-5)
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        info = json.load(f)
    assert info["keep_aspect"] is keep_aspect
    # Where it came from: the run and the step of its checkpoint.
    assert info["source"] == dict(location=workdir, kind="workdir", step=1)
    # [height, width], or the shorter side's length: the record, read
    # back as written, is the served preprocessing.
    assert info["resize_size"] == (40 if keep_aspect else [40, 40])
    np.testing.assert_allclose(reference(
        trained, datas, info["resize_size"], info["keep_aspect"]), want,
        atol=1e-6)
    if keep_aspect:  # the JPEG is 45 x 60: the two resizes differ
        assert np.max(np.abs(want - reference(trained, datas, 40))) > 1e-4
    assert out["class_names"][0, 0].decode() == names[want[0].argmax()]
    # LiteRT: the run's resize is recorded beside the file, and
    # keras-vit-predict applies it (the SavedModel's answer).
    assert export_cli.main(["keras-vit-export", "--export_dir", export_dir,
                            "--model", workdir, "--model_name", "digits",
                            "--format=litert"]) == 0
    tflite = capsys.readouterr().out.strip()
    assert litert_record.read_resize(tflite, (SIZE, SIZE)) == (40, keep_aspect)
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(images["jpeg"])
    answer = tmp_path / "answer.json"
    # The LiteRT file, and the workdir itself: the SavedModel's answer.
    for model in (tflite, workdir):
        assert predict.main(["keras-vit-predict", f"--model={model}",
                             str(photo), f"--output={answer}",
                             "--top_k=10", "--overwrite"]) == 0
        top = json.loads(answer.read_text())["predictions"][0]["top_k"]
        got = [t["probability"]
               for t in sorted(top, key=lambda t: t["class"])]
        np.testing.assert_allclose(got, out["probabilities"][1], atol=1e-4)


def test_outputs_that_cannot_be_written_are_refused_first(model, images,
                                                          tmp_path, capsys):
    """Each refused before the model is loaded, in one line naming the
    fix; nothing is written."""
    keras_path = str(tmp_path / "model.keras")
    model.save(keras_path)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "vit").write_text("a file of the user's")
    (tmp_path / "photos").mkdir()
    (tmp_path / "photos" / "a.jpg").write_bytes(images["jpeg"])
    (tmp_path / "cut.jpg").write_bytes(images["jpeg"][:100])
    base = ["keras-vit-export", f"--model={keras_path}"]
    cases = [
        ([f"--export_dir={tmp_path / 'taken'}"],
         f"{tmp_path / 'taken' / 'vit'} is a file, not a model folder"),
        ([f"--export_dir={tmp_path / 'out'}", "--model_name=models.config"],
         "'models.config' is the name of a file the export writes"),
        ([f"--export_dir={tmp_path / 'out'}",
          "--model_name=models.config.bak"],
         "'models.config.bak' is the name of a file the export writes"),
        ([f"--export_dir={tmp_path / 'out'}",
          "--model_name=models.config.bak.1"],
         "'models.config.bak.1' is the name of a file the export writes"),

        ([f"--export_dir={tmp_path / 'out'}",
          f"--warmup_images={tmp_path / 'photos'}"],
         "names only folders: name image files, or a glob of them"),
        ([f"--export_dir={tmp_path / 'out'}",
          f"--warmup_images={tmp_path / 'cut.jpg'}"],
         "is not a decodable JPEG/PNG/GIF/BMP image: Invalid JPEG data, "
         "size 100"),
    ]
    for args, message in cases:
        assert export_cli.main(base + args) == 1, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert err[0].startswith("keras-vit-export: error: ")
        assert "Op:" not in err[0] and "{{" not in err[0]
    assert (tmp_path / "taken" / "vit").read_text() == "a file of the user's"
    assert not os.path.exists(tmp_path / "out" / "models.config")


def test_a_training_runs_export_is_checked_before_it_trains(tmp_path):
    """keras-vit-train with config.export.enabled: an unusable model name
    or a models.config TF Serving cannot read in the export folder is one
    line at the start, before any step (it came after the whole run,
    with no metrics.json); the user's models.config is left as it was."""
    from tests import console

    workdir = tmp_path / "run"
    result = console.run("train", console.TINY_DIGITS + [
        f"--workdir={workdir}", "--config.export.enabled=True",
        "--config.export.model_name=my model"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("keras-vit-train: error: model_name 'my model' is not usable"
            in result.stderr)
    assert not workdir.exists()
    export_dir = tmp_path / "exports"
    export_dir.mkdir()
    (export_dir / "models.config").write_text("garbage {\n")
    result = console.run("train", console.TINY_DIGITS + [
        f"--workdir={workdir}", "--config.export.enabled=True",
        f"--config.export.export_dir={export_dir}"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "models.config is not a valid TF Serving model config" \
        in result.stderr
    assert not (workdir / "checkpoints").exists()
    assert (export_dir / "models.config").read_text() == "garbage {\n"
