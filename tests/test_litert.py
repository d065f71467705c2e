"""LiteRT export: the .tflite files run with the LiteRT interpreter
(ai-edge-litert) and answer as the Keras model does."""

import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import create_model
from keras_vit.commands import export as cli
from keras_vit.commands import predict
from keras_vit.errors import UsageError
from keras_vit.export import litert, litert_record
from tests.reliability_cases import check_says, covers

SIZE = 32
NAMES = ["a", "b", "c", "d"]


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    return create_model(
        None, num_classes=len(NAMES), image_size=SIZE, patch_size=8,
        hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
        head_zero_init=False,
    )


@pytest.fixture(scope="module")
def pixels():
    return np.random.default_rng(5).uniform(
        0, 255, (4, SIZE, SIZE, 3)).astype(np.float32)


def _keras_probabilities(model, pixels):
    logits = keras.ops.convert_to_numpy(model(pixels / 127.5 - 1.0))
    logits = logits - logits.max(-1, keepdims=True)
    return np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)


@pytest.fixture(scope="module")
def float32_file(model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("litert")
    return litert.export_litert(model, str(folder / "vit.tflite"),
                                class_names=NAMES)


def test_float32_equals_keras(model, pixels, float32_file):
    path = float32_file
    interpreter = litert.interpreter_class()(model_path=path)
    details = interpreter.get_signature_list()["serving_default"]
    assert details == {"inputs": ["images"], "outputs": ["probabilities"]}
    got = litert.run_litert(path, pixels)
    want = _keras_probabilities(model, pixels)
    np.testing.assert_allclose(got, want, atol=1e-5)
    # Pixels of another size, or one image without its batch axis: the
    # file's shape, not the interpreter's reshape error.
    size = pixels.shape[1]
    for wrong in (np.zeros((1, 2 * size, 2 * size, 3)), pixels[0]):
        with pytest.raises(UsageError, match=f"takes pixels \\(N, {size}, "
                           f"{size}, 3\\), got"):
            litert.run_litert(path, wrong)
    with open(litert_record.labels_path(path)) as f:
        assert f.read().split() == NAMES
    folder = os.path.dirname(path)
    assert not [n for n in os.listdir(folder) if ".tmp-" in n]


def test_a_mixed_global_policy_exports_float32(model, pixels, tmp_path):
    """export_litert under a global mixed_bfloat16 policy (a TPU script
    or notebook calling the API after training): the wrapper's scaling and
    softmax stay float32 (as bfloat16, the converter refused them), and
    the file answers as the float32 model does."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        path = litert.export_litert(model, str(tmp_path / "vit.tflite"))
    finally:
        keras.config.set_dtype_policy(previous)
    np.testing.assert_allclose(litert.run_litert(path, pixels),
                               _keras_probabilities(model, pixels), atol=1e-5)


def test_float16_weights_half_the_size(model, pixels, float32_file,
                                       tmp_path):
    full = float32_file
    half = litert.export_litert(model, str(tmp_path / "f16.tflite"),
                                quantization="float16")
    assert os.path.getsize(half) < 0.7 * os.path.getsize(full)
    np.testing.assert_allclose(litert.run_litert(half, pixels),
                               _keras_probabilities(model, pixels),
                               atol=5e-3)


def test_int8_from_the_command_line(model, pixels, tmp_path):
    model.save(tmp_path / "vit.keras")
    status = cli.main([
        "keras-vit-export", "--export_dir", str(tmp_path / "out"),
        "--model_name", "tiny",
        "--model", str(tmp_path / "vit.keras"), "--format", "litert",
        "--quantization", "int8", "--class_names", ",".join(NAMES),
    ])
    assert status == 0
    path = tmp_path / "out" / "tiny.tflite"
    got = litert.run_litert(str(path), pixels)
    np.testing.assert_allclose(got.sum(-1), 1.0, atol=1e-4)
    # Dynamic-range int8 keeps the answers close on this random model.
    np.testing.assert_allclose(got, _keras_probabilities(model, pixels),
                               atol=0.05)
    assert (tmp_path / "out" / "tiny.labels.txt").read_text().split() == NAMES
    # A float32 export under the same name keeps the int8 file unless
    # --overwrite, which replaces it.
    again = ["keras-vit-export", "--export_dir", str(tmp_path / "out"),
             "--model_name", "tiny", "--model", str(tmp_path / "vit.keras"),
             "--format", "litert"]
    int8 = path.read_bytes()
    assert cli.main(again) == 1
    assert path.read_bytes() == int8
    assert cli.main(again + ["--overwrite"]) == 0
    assert path.read_bytes() != int8
    # This model names no classes: the int8 file's names are not left
    # beside it as if they were its own.
    assert not (tmp_path / "out" / "tiny.labels.txt").exists()
    np.testing.assert_allclose(litert.run_litert(str(path), pixels),
                               _keras_probabilities(model, pixels),
                               atol=1e-4)


def test_bad_arguments(model, tmp_path, capsys):
    with pytest.raises(ValueError, match="use one of float32, float16, int8"):
        litert.export_litert(model, str(tmp_path / "x.tflite"),
                             quantization="int4")
    with pytest.raises(ValueError, match="ends in .tflite"):
        litert.export_litert(model, str(tmp_path / "x.lite"))
    dynamic = create_model(None, num_classes=2, image_size=16, patch_size=8,
                           hidden_size=16, num_layers=1, num_heads=2,
                           mlp_dim=16, dynamic_image_size=True)
    with pytest.raises(ValueError, match="rebuild_at_resolution"):
        litert.export_litert(dynamic, str(tmp_path / "x.tflite"))
    model.save(tmp_path / "vit.keras")
    status = cli.main(["keras-vit-export", "--export_dir", str(tmp_path),
                       "--model", str(tmp_path / "vit.keras"),
                       "--quantization", "int8"])
    assert status == 1
    assert "--quantization goes with --format=litert" in capsys.readouterr().err
    # The SavedModel's own flags are not dropped from a .tflite in silence
    # (an any-size model asked, a fixed-size file written).
    status = cli.main(["keras-vit-export", "--export_dir", str(tmp_path),
                       "--model", str(tmp_path / "vit.keras"),
                       "--format=litert", "--dynamic_size", "--top_k=3"])
    assert status == 1
    err = capsys.readouterr().err
    assert "--top_k, --dynamic_size go with a SavedModel export only, not " \
        "--format=litert" in err
    assert not (tmp_path / "vit.tflite").exists()


def test_the_evaluation_resize_travels_with_the_file(model, tmp_path,
                                                     capsys):
    """keras-vit-export --format=litert records the evaluation resize
    beside the file (for the client), and keras-vit-predict applies it:
    the .tflite answers as the model does with that resize."""
    model.save(tmp_path / "vit.keras")
    photo = tmp_path / "photo.png"
    Image.fromarray(np.random.default_rng(2).integers(
        0, 256, (50, 70, 3), dtype=np.uint8)).save(photo)
    assert cli.main(["keras-vit-export", "--format=litert",
                     f"--model={tmp_path / 'vit.keras'}",
                     f"--export_dir={tmp_path}", "--resize_size=48"]) == 0
    capsys.readouterr()
    record = tmp_path / "vit.preprocessing.json"
    assert litert_record.read_resize(str(tmp_path / "vit.tflite"),
                              (SIZE, SIZE)) == (48, False)

    def answer(*args):
        out = tmp_path / "answer.json"
        assert predict.main(["keras-vit-predict", *args, str(photo),
                             f"--output={out}", "--overwrite"]) == 0
        top = json.loads(out.read_text())["predictions"][0]["top_k"]
        return np.array([t["probability"] for t in sorted(
            top, key=lambda t: t["class"])])

    keras_48 = answer(f"--model={tmp_path / 'vit.keras'}", "--resize_size=48")
    keras_plain = answer(f"--model={tmp_path / 'vit.keras'}")
    on_device = answer(f"--model={tmp_path / 'vit.tflite'}")
    np.testing.assert_allclose(on_device, keras_48, atol=1e-4)
    assert np.max(np.abs(keras_48 - keras_plain)) > 1e-3  # the resize shows
    # Keeping the aspect ratio travels too (the photo is not square).
    assert cli.main(["keras-vit-export", "--format=litert", "--overwrite",
                     f"--model={tmp_path / 'vit.keras'}", "--keep_aspect",
                     f"--export_dir={tmp_path}", "--resize_size=48"]) == 0
    assert litert_record.read_resize(str(tmp_path / "vit.tflite"),
                              (SIZE, SIZE)) == (48, True)
    # How its probabilities are made, for the device's code (the model's
    # own: a softmax over its classes; --scores=sigmoid, a sigmoid each).
    assert json.loads(record.read_text())["scores"] == "softmax"
    # Where the model came from, as export.json records it.
    assert json.loads(record.read_text())["source"] == {
        "location": str(tmp_path / "vit.keras"), "kind": "keras",
        "step": None}
    keras_kept = answer(f"--model={tmp_path / 'vit.keras'}",
                        "--resize_size=48", "--keep_aspect")
    np.testing.assert_allclose(answer(f"--model={tmp_path / 'vit.tflite'}"),
                               keras_kept, atol=1e-4)
    assert np.max(np.abs(keras_kept - keras_48)) > 1e-3
    np.testing.assert_allclose(  # --nokeep_aspect: the N x N resize again
        answer(f"--model={tmp_path / 'vit.tflite'}", "--nokeep_aspect"),
        keras_48, atol=1e-4)
    assert cli.main(["keras-vit-export", "--format=litert", "--overwrite",
                     f"--model={tmp_path / 'vit.keras'}", "--scores=sigmoid",
                     f"--export_dir={tmp_path}", "--resize_size=48"]) == 0
    assert json.loads(record.read_text())["scores"] == "sigmoid"
    # A record that does not fit its file is refused by name.
    record.write_text('{"image_size": [64, 64], "resize_size": 48}')
    assert predict.main(["keras-vit-predict", str(photo),
                         f"--model={tmp_path / 'vit.tflite'}"]) == 1
    err = capsys.readouterr().err
    assert f"{record} records image_size [64, 64]" in err
    record.write_text("[]")
    assert predict.main(["keras-vit-predict", str(photo),
                         f"--model={tmp_path / 'vit.tflite'}"]) == 1
    assert "is not the preprocessing record" in capsys.readouterr().err
    # A resize smaller than the input is refused before converting.
    assert cli.main(["keras-vit-export", "--format=litert", "--overwrite",
                     f"--model={tmp_path / 'vit.keras'}",
                     f"--export_dir={tmp_path}", "--resize_size=20"]) == 1
    assert "--resize_size 20 is smaller than the model's input 32x32" in (
        capsys.readouterr().err)


def test_unreadable_or_misplaced_files_are_one_line(model, tmp_path, capsys):
    model.save(tmp_path / "vit.keras")
    (tmp_path / "edge" / "vit.tflite").mkdir(parents=True)
    assert cli.main(["keras-vit-export", "--format=litert", "--overwrite",
                     f"--model={tmp_path / 'vit.keras'}",
                     f"--export_dir={tmp_path / 'edge'}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"keras-vit-export: error: {tmp_path}/edge/vit.tflite is "
                   "a folder: choose another --model_name or --export_dir."]
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(64))
    png = tmp_path / "a.png"
    png.write_bytes(tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy())
    assert predict.main(["keras-vit-predict", f"--model={cut}",
                         str(png)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{cut} is not a readable LiteRT file" in err[0]


def test_class_names_beside_the_file_are_checked_where_used(model, tmp_path,
                                                            capsys):
    """The record names the class names it was exported with: names
    edited since are refused where they would be shown, and not where
    --class_names_file gives the names instead; a file whose names were
    removed predicts without names."""
    model.save(tmp_path / "vit.keras")
    photo = tmp_path / "photo.png"
    Image.fromarray(np.zeros((40, 40, 3), np.uint8)).save(photo)
    assert cli.main(["keras-vit-export", "--format=litert",
                     f"--model={tmp_path / 'vit.keras'}",
                     f"--export_dir={tmp_path}",
                     f"--class_names={','.join(NAMES)}"]) == 0
    labels = tmp_path / "vit.labels.txt"
    labels.write_text("w\nx\ny\nz\n")
    own = tmp_path / "names.txt"
    own.write_text("p\nq\nr\ns\n")
    capsys.readouterr()
    tflite = f"--model={tmp_path / 'vit.tflite'}"
    assert predict.main(["keras-vit-predict", tflite, str(photo)]) == 1
    assert "holds other class names than" in capsys.readouterr().err
    assert predict.main(["keras-vit-predict", tflite, str(photo),
                         f"--class_names_file={own}"]) == 0
    assert "photo.png" in capsys.readouterr().out
    labels.unlink()
    assert predict.main(["keras-vit-predict", tflite, str(photo)]) == 0


def test_model_name_is_a_name_in_the_export_dir(model, tmp_path, capsys):
    """--model_name of a LiteRT export is a name, as a SavedModel's is:
    a path out of --export_dir, or one ending in .tflite, is refused
    before anything is converted."""
    model.save(tmp_path / "vit.keras")
    out = tmp_path / "out"
    for name, says in (
            ("../escaped", "model_name '../escaped' is not usable: use "
             "letters, digits"),
            ("sub/m", "model_name 'sub/m' is not usable"),
            ("m.tflite", "--model_name=m.tflite names the file without its "
             ".tflite (--model_name=m).")):
        assert cli.main(["keras-vit-export", "--format=litert",
                         f"--model={tmp_path / 'vit.keras'}",
                         f"--export_dir={out}", f"--model_name={name}"]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert says in line, line
    assert not (tmp_path / "escaped.tflite").exists()
    assert not out.exists() or not list(out.rglob("*.tflite"))


def test_a_folder_or_a_file_without_its_record(model, float32_file, tmp_path,
                                               capsys, caplog):
    """A folder given as the .tflite is named as one; a .tflite copied
    without the record written beside it still predicts, and says what
    it cannot know (the resize, the class names)."""
    png = tmp_path / "a.png"
    png.write_bytes(tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy())
    (tmp_path / "dir.tflite").mkdir()
    assert predict.main(["keras-vit-predict",
                         f"--model={tmp_path / 'dir.tflite'}", str(png)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(f"{tmp_path / 'dir.tflite'}: is a directory; check "
                         "the path (a folder where a file goes, or the other "
                         "way?)."), line
    alone = tmp_path / "alone.tflite"
    alone.write_bytes(open(float32_file, "rb").read())
    caplog.set_level("WARNING", logger="absl")
    assert predict.main(["keras-vit-predict", f"--model={alone}",
                         str(png)]) == 0
    warned = [r.getMessage() for r in caplog.records
              if "has no alone.preprocessing.json beside it" in r.getMessage()]
    assert warned == [
        f"{alone} has no alone.preprocessing.json beside it (the record its "
        f"export writes): the images are resized straight to {SIZE}x{SIZE}, "
        "not as the model was evaluated, and its classes are numbered. Copy "
        "the files exported with it."], warned
    # What the command is given is not said to be lost.
    caplog.clear()
    (tmp_path / "alone.labels.txt").write_text("".join(
        f"{n}\n" for n in NAMES))
    assert predict.main(["keras-vit-predict", f"--model={alone}",
                         f"--resize_size={SIZE + 4}", str(png)]) == 0
    assert not [r for r in caplog.records
                if "preprocessing.json" in r.getMessage()]


def test_a_stop_while_the_converter_runs_keeps_the_earlier_export(
        model, tmp_path, capsys, monkeypatch):
    """Ctrl-C (or SIGTERM) while the converter runs, which a garbage-
    collection callback of JAX or a TensorFlow finalizer would swallow as
    it is raised: the command stops when the converter returns (status
    130), the earlier export whole, nothing left beside it."""
    import signal

    model.save(tmp_path / "vit.keras")
    out = tmp_path / "out"
    argv = ["keras-vit-export", "--format=litert", "--overwrite",
            f"--model={tmp_path / 'vit.keras'}", f"--export_dir={out}"]
    assert cli.main(argv + ["--class_names=a,b,c,d"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real = keras.Model.export
    pressed = []

    def export(self, *args, **kwargs):
        real(self, *args, **kwargs)
        if pressed:  # one Ctrl-C (a second would stop at once)
            return
        pressed.append(True)
        try:  # a callback that swallows what is raised inside it
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass

    monkeypatch.setattr(keras.Model, "export", export)
    # Ctrl-C raises KeyboardInterrupt, as in a command's process (a
    # pytest-xdist worker, or a process a shell started in the background,
    # ignores SIGINT).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    capsys.readouterr()
    try:
        status = cli.main(argv + ["--class_names=w,x,y,z"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert status == 130
    assert "stopped" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


@covers("output_made_during_litert_export")
def test_files_made_while_it_converts_are_kept_and_a_killed_ones_replaced(
        model, tmp_path, capsys, monkeypatch):
    """Without --overwrite, a .tflite or a file beside it that another
    program writes while the converter runs is kept and named, nothing
    left beside it (before, the export replaced both); the files an
    export killed before its .tflite left (its record, its names) are
    replaced by the next export without --overwrite."""
    model.save(tmp_path / "vit.keras")
    out = tmp_path / "out"
    argv = ["keras-vit-export", "--format=litert",
            f"--model={tmp_path / 'vit.keras'}", f"--export_dir={out}",
            "--class_names=a,b,c,d"]
    real = keras.Model.export
    for made in ("vit.tflite", "vit.preprocessing.json"):
        def export(self, *args, made=made, **kwargs):
            real(self, *args, **kwargs)
            (out / made).write_text("the user's")

        monkeypatch.setattr(keras.Model, "export", export)
        assert cli.main(argv) == 1
        err = capsys.readouterr().err.strip()
        check_says("output_made_during_litert_export", err)
        assert err.endswith(f"{out / made} already exists: pass --overwrite "
                            "to replace it, or choose another --model_name."
                            ), err
        assert os.listdir(out) == [made], os.listdir(out)
        assert (out / made).read_text() == "the user's"
        (out / made).unlink()
    monkeypatch.setattr(keras.Model, "export", real)
    # A .tflite made as the files beside it are written: they go too.
    beside = litert._write_side_files

    def racing(path, *args):
        (out / "vit.tflite").write_text("the user's")
        beside(path, *args)

    monkeypatch.setattr(litert, "_write_side_files", racing)
    assert cli.main(argv) == 1
    assert capsys.readouterr().err.strip().endswith(
        f"{out / 'vit.tflite'} already exists: pass --overwrite to replace "
        "it, or choose another --model_name.")
    assert os.listdir(out) == ["vit.tflite"]
    assert (out / "vit.tflite").read_text() == "the user's"
    (out / "vit.tflite").unlink()
    monkeypatch.setattr(litert, "_write_side_files", beside)
    # Killed after its files beside the .tflite were published.
    assert cli.main(argv) == 0
    capsys.readouterr()
    (out / "vit.tflite").unlink()
    assert sorted(litert_record.killed_export_files(str(out / "vit.tflite"))
                  ) == [str(out / "vit.labels.txt"),
                        str(out / "vit.preprocessing.json")]
    assert cli.main(argv[:-1] + ["--class_names=w,x,y,z"]) == 0
    assert (out / "vit.labels.txt").read_text() == "w\nx\ny\nz\n"
    assert sorted(os.listdir(out)) == [
        "vit.labels.txt", "vit.preprocessing.json", "vit.tflite"]
    # Names of the user's own beside a killed export's record: kept.
    (out / "vit.tflite").unlink()
    (out / "vit.labels.txt").write_text("mine\n")
    assert cli.main(argv) == 1
    assert "vit.labels.txt already exists" in capsys.readouterr().err
    assert (out / "vit.labels.txt").read_text() == "mine\n"


@covers("foreign_export")
def test_an_export_another_tool_wrote_is_named(tmp_path, capsys):
    """A SavedModel (and its .tflite) whose signature takes x and gives
    scores, as another tool writes: one line saying so, before any image
    is read, not a KeyError once every image was decoded."""

    class Other(tf.Module):
        @tf.function(input_signature=[
            tf.TensorSpec([1, SIZE, SIZE, 3], tf.float32)])
        def serve(self, x):
            return {"scores": tf.reduce_mean(x, [1, 2])}

    other = Other()
    saved = tmp_path / "other"
    tf.saved_model.save(other, str(saved), signatures=other.serve)
    edge = tmp_path / "other.tflite"
    edge.write_bytes(
        tf.lite.TFLiteConverter.from_saved_model(str(saved)).convert())
    png = tmp_path / "a.png"
    png.write_bytes(tf.io.encode_png(np.zeros((8, 8, 3), np.uint8)).numpy())
    for path, names in ((saved, "image_bytes"), (edge, "images")):
        assert predict.main(["keras-vit-predict", f"--model={path}",
                             str(png)]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(
            f"keras-vit-predict: error: {path} takes x and gives scores, "
            f"not {names} -> probabilities"), line
        check_says("foreign_export", line)


def test_a_source_the_record_cannot_hold_is_refused(model, tmp_path):
    """`source` goes into the preprocessing record: one JSON cannot hold
    is refused before anything is converted or written."""
    with pytest.raises(UsageError, match="source must be a dict \\(the "
                       ".preprocessing.json records it\\) or None, not "
                       "str."):
        litert.export_litert(model, str(tmp_path / "vit.tflite"),
                             source="run")
    with pytest.raises(UsageError, match="source must be a JSON object"):
        litert.export_litert(model, str(tmp_path / "vit.tflite"),
                             source={"step": float("nan")})
    with pytest.raises(UsageError, match="records at most 8192"):
        litert.export_litert(model, str(tmp_path / "vit.tflite"),
                             source={"location": "x" * 9000})
    assert os.listdir(tmp_path) == []
