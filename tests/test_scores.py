"""How probabilities score a model's logits: a softmax, or a sigmoid for a
model of one logit and for a model trained with the sigmoid loss, the same
in keras-vit-predict, a SavedModel's signatures and a LiteRT file."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import create_model, objectives
from keras_vit.commands import convert, predict
from keras_vit.commands import export as export_cli
from keras_vit.errors import UsageError
from keras_vit.export import litert, saved_model
from keras_vit.scoring import scores
from tests import tiny
from tests.test_export import ROOT, SIZE, make_images, preprocess_eagerly


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def _softmax(x):
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _logits(model, datas, resize_size=None):
    batch = np.stack([preprocess_eagerly(d, resize_size, False)
                      for d in datas])
    return keras.ops.convert_to_numpy(model(batch, training=False))


def _answer(path):
    """Probabilities in class order from keras-vit-predict's JSON."""
    with open(path) as f:
        rows = json.load(f)["predictions"]
    return np.array([[t["probability"] for t in sorted(
        row["top_k"], key=lambda t: t["class"])] for row in rows])


def test_scores_for_and_probabilities():
    assert scores.scores_for(1) == scores.scores_for(1, "softmax") == \
        "sigmoid"
    assert scores.scores_for(5) == "softmax"
    assert scores.scores_for(5, "sigmoid") == "sigmoid"
    assert objectives.loss_scores("sigmoid_xent") == "sigmoid"
    assert objectives.loss_scores("softmax_xent") == "softmax"
    with pytest.raises(UsageError, match="softmax_xent, sigmoid_xent"):
        objectives.loss_scores("hinge")
    logits = np.random.default_rng(0).normal(0, 3, (4, 6)).astype(np.float32)
    np.testing.assert_allclose(scores.probabilities_np(logits, "sigmoid"),
                               _sigmoid(logits), rtol=1e-6)
    np.testing.assert_allclose(scores.probabilities_np(logits, "softmax"),
                               _softmax(logits), rtol=1e-5)
    with pytest.raises(UsageError, match="give one of softmax, sigmoid"):
        scores.probabilities(logits, "tanh")


def _tiny(num_classes, seed, **options):
    keras.utils.set_random_seed(seed)
    return create_model(None, num_classes=num_classes, image_size=SIZE,
                        patch_size=8, hidden_size=16, num_layers=1,
                        num_heads=2, mlp_dim=32, head_zero_init=False,
                        **options)


def _exported(model, export_dir, capsys, *flags):
    """The path keras-vit-export prints for `model` (earlier output
    dropped)."""
    capsys.readouterr()
    assert export_cli.main(["keras-vit-export", f"--model={model}",
                            f"--export_dir={export_dir}", *flags]) == 0
    return capsys.readouterr().out.strip()


def _predicted(model, photo, answer, *flags):
    """keras-vit-predict's probabilities of `photo` by `model`."""
    assert predict.main(["keras-vit-predict", f"--model={model}",
                         str(photo), f"--output={answer}", "--overwrite",
                         *flags]) == 0
    return _answer(answer)


@pytest.fixture(scope="module")
def one_logit(tmp_path_factory):
    """A .keras classifier of one logit and a photo."""
    root = tmp_path_factory.mktemp("one_logit")
    model = _tiny(1, 3, head_bias_init=0.5)
    model.save(root / "one.keras")
    data = make_images()["jpeg"]
    (root / "photo.jpg").write_bytes(data)
    return root, model, data


def test_one_logit_is_a_sigmoid_in_predict_and_the_export(one_logit,
                                                          capsys):
    """A softmax over one class is 1.0 for every image: keras-vit-predict
    (run as a user types it), the SavedModel and the LiteRT file give the
    sigmoid of the logit."""
    root, model, data = one_logit
    want = _sigmoid(_logits(model, [data]))
    assert 0.01 < float(want[0, 0]) < 0.99
    answer = root / "answer.json"
    result = subprocess.run(
        [sys.executable, "-m", "keras_vit.commands.predict",
         f"--model={root / 'one.keras'}", str(root / "photo.jpg"),
         f"--output={answer}"],
        capture_output=True, text=True, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=ROOT))
    assert result.returncode == 0, result.stderr[-2000:]
    np.testing.assert_allclose(_answer(answer), want, atol=1e-5)
    # --scores=softmax too: one logit is a sigmoid, as its export gives.
    np.testing.assert_allclose(_predicted(
        root / "one.keras", root / "photo.jpg", answer, "--scores=softmax"),
        want, atol=1e-5)
    export_dir = str(root / "exports")
    path = _exported(root / "one.keras", export_dir, capsys, "--no_warmup",
                     "--top_k=1")
    served = tf.saved_model.load(path).signatures["serving_default"](
        image_bytes=tf.constant([data]))
    np.testing.assert_allclose(served["probabilities"].numpy(), want,
                               atol=1e-5)
    with open(os.path.join(path, "assets.extra", "export.json")) as f:
        assert json.load(f)["scores"] == "sigmoid"
    tflite = _exported(root / "one.keras", export_dir, capsys,
                       "--format=litert")
    np.testing.assert_allclose(
        _predicted(tflite, root / "photo.jpg", answer), want, atol=1e-4)


def test_scores_flag_and_where_it_is_refused(one_logit, tmp_path, capsys):
    """--scores=sigmoid scores a softmax-trained model a class at a time;
    an export has its scores built in, so the flag is refused there."""
    root, _, data = one_logit
    model = _tiny(3, 4)
    model.save(tmp_path / "three.keras")
    logits = _logits(model, [data])
    answer = tmp_path / "answer.json"
    for flag, want in (("auto", _softmax(logits)),
                       ("sigmoid", _sigmoid(logits))):
        np.testing.assert_allclose(_predicted(
            tmp_path / "three.keras", root / "photo.jpg", answer,
            f"--scores={flag}"), want, atol=1e-5)
    path = _exported(tmp_path / "three.keras", str(tmp_path / "exports"),
                     capsys, "--no_warmup", "--top_k=3")
    assert predict.main(["keras-vit-predict", f"--model={path}",
                         str(root / "photo.jpg"), "--scores=softmax"]) == 1
    assert "--scores is built into a SavedModel when it is exported: leave " \
        "--scores out, or export the model again with it (keras-vit-export " \
        "--scores=...)." in capsys.readouterr().err
    assert predict.main(["keras-vit-predict", f"--model={path}",
                         str(root / "photo.jpg"), "--resize_size=40"]) == 1
    assert "--resize_size is built into a SavedModel when it is exported: " \
        "leave --resize_size out" in capsys.readouterr().err


def test_a_quantized_litert_file_scores_with_a_sigmoid(tmp_path):
    """A float16 LiteRT file of a model scored a class at a time: its
    check before publishing takes sigmoid scores (they need not sum to 1),
    and they are the model's sigmoids to float16's rounding."""
    pytest.importorskip("ai_edge_litert")
    model = _tiny(3, 5)
    path = litert.export_litert(model, str(tmp_path / "vit.tflite"),
                                quantization="float16", scores="sigmoid")
    pixels = np.random.default_rng(1).uniform(
        0, 255, (2, SIZE, SIZE, 3)).astype(np.float32)
    got = litert.run_litert(path, pixels)
    want = _sigmoid(keras.ops.convert_to_numpy(
        model(pixels / 127.5 - 1.0, training=False)))
    np.testing.assert_allclose(got, want, atol=1e-2)
    assert not np.allclose(got.sum(-1), 1.0, atol=1e-2)


@pytest.mark.slow
def test_a_sigmoid_loss_run_is_scored_with_a_sigmoid(tmp_path, capsys,
                                                     caplog):
    """A workdir trained with objective.loss=sigmoid_xent: keras-vit-predict
    on it, its SavedModel and its LiteRT file give each class's sigmoid,
    not a softmax."""
    config = tiny.digits_base()
    config.model.update(hidden_size=32, num_layers=1, num_heads=2,
                        mlp_dim=64, head_zero_init=False)
    config.objective.loss = "sigmoid_xent"
    workdir = str(tmp_path / "run")
    trained = tiny.write_run(config, workdir, [str(i) for i in range(10)])
    data = make_images()["png"]
    photo = tmp_path / "photo.png"
    photo.write_bytes(data)
    want = _sigmoid(_logits(trained, [data],
                            config.input.pp.eval_resize_size))
    assert not np.allclose(want.sum(), 1.0, atol=0.05)
    answer = tmp_path / "answer.json"
    export_dir = str(tmp_path / "exports")
    path = _exported(workdir, export_dir, capsys, "--no_warmup")
    tflite = _exported(workdir, export_dir, capsys, "--format=litert")
    for model in (workdir, path, tflite):
        np.testing.assert_allclose(
            _predicted(model, photo, answer, "--top_k=10"), want,
            atol=1e-4, err_msg=model)
    assert saved_model.ExportOptions.of({"scores": "sigmoid"}).scores == \
        "sigmoid"
    # A .keras file keeps no scores: keras-vit-convert says which flag
    # gives them back.
    caplog.set_level("WARNING", logger="absl")
    assert convert.main(["keras-vit-convert", f"--model={workdir}",
                         f"--output={tmp_path / 'run.keras'}"]) == 0
    assert "its sigmoid scores (pass --scores=sigmoid)" in caplog.text
