"""keras-vit-predict: the same answer as the exported SavedModel on the same
bytes, from every kind of source; bad files stop the run or are skipped."""

import csv
import io
import json
import os
import shutil
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

import keras_vit
from keras_vit import build, create_model, save_npz
from keras_vit.commands import export as export_cli
from keras_vit.commands import predict
from keras_vit.data import image_files
from keras_vit.export import saved_model
from tests import console
from tests.hub_fixtures import check_predicts_with_resize
from tests.reliability_cases import check_says, covers

NAMES = ["cat", "dog", "bird", "fish"]
SIZE = 16
HUB = os.path.join(os.path.dirname(__file__), "fixtures", "hub")


def _encode(array, fmt):
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("predict")
    keras.utils.set_random_seed(1)
    model = create_model(None, num_classes=4, image_size=SIZE, patch_size=8,
                         hidden_size=16, num_layers=1, num_heads=2,
                         mlp_dim=32, head_zero_init=False)
    model.save(root / "vit.keras")
    save_npz(model, str(root / "vit.npz"))
    (root / "labels.txt").write_text("".join(f"{n}\n" for n in NAMES))
    photos = root / "photos"
    (photos / "nested").mkdir(parents=True)
    rng = np.random.default_rng(0)
    for i, fmt in enumerate(("JPEG", "PNG", "WEBP", "GIF", "BMP")):
        rgb = rng.integers(0, 256, (20 + i, 30, 3), dtype=np.uint8)
        folder = photos / "nested" if i % 2 else photos
        (folder / f"img{i}.{fmt.lower()}").write_bytes(_encode(rgb, fmt))
    (root / "notes.txt").write_text("not an image")
    export = saved_model.export_model(
        model, str(root / "exports"), class_names=NAMES, verify=False,
        warmup_images=[])
    return root, export


def run_predict(args):
    return predict.main(["keras-vit-predict", *args])


def _json(root, name, *args):
    out = root / f"{name}.json"
    assert run_predict([*args, "--output", str(out), "--top_k", "4"]) == 0
    return json.loads(out.read_text())


def _probabilities(data):
    return np.array([[p["probability"] for p in sorted(
        entry["top_k"], key=lambda t: t["class"])]
        for entry in data["predictions"]])


def test_keras_model_equals_the_saved_model(setup, capsys):
    root, export = setup
    photos = str(root / "photos")
    ours = _json(root, "keras", photos, "--model", str(root / "vit.keras"),
                 "--class_names_file", str(root / "labels.txt"))
    served = _json(root, "served", photos, "--model",
                   os.path.dirname(export), "--batch_size", "2")
    files = [e["file"] for e in ours["predictions"]]
    assert len(files) == 5 and files == sorted(files)  # folder walked
    assert "5/5 images" in capsys.readouterr().err  # progress on folders
    np.testing.assert_allclose(_probabilities(ours), _probabilities(served),
                               atol=1e-5)
    # ... and the SavedModel's own answer on the files' bytes.
    loaded = tf.saved_model.load(export)
    datas = [open(f, "rb").read() for f in files]
    want = loaded.signatures["serving_default"](
        image_bytes=tf.constant(datas))["probabilities"].numpy()
    np.testing.assert_allclose(_probabilities(ours), want, atol=1e-5)
    assert ours["predictions"][0]["top_k"][0]["name"] in NAMES


def test_a_mixed_precision_model_predicts_as_its_export(setup, tmp_path):
    """A .keras file saved under mixed_bfloat16 computes in bfloat16 as
    loaded; keras-vit-predict computes in float32, as its SavedModel
    export does: the same probabilities, not bfloat16's."""
    root, _ = setup
    keras.utils.set_random_seed(2)
    with build.dtype_policy("bfloat16"):
        mixed = create_model(None, num_classes=4, image_size=SIZE,
                             patch_size=8, hidden_size=16, num_layers=2,
                             num_heads=2, mlp_dim=32, head_zero_init=False)
    mixed.save(tmp_path / "mixed.keras")
    export = saved_model.export_model(
        mixed, str(tmp_path / "exports"), verify=False, warmup_images=[])
    photos = str(root / "photos")
    ours = _probabilities(_json(tmp_path, "mixed", photos, "--model",
                                str(tmp_path / "mixed.keras")))
    files = sorted(image_files.images_under(photos))
    want = tf.saved_model.load(export).signatures["serving_default"](
        image_bytes=tf.constant([open(f, "rb").read() for f in files])
    )["probabilities"].numpy()
    np.testing.assert_allclose(ours, want, atol=1e-5)
    # (bfloat16, as loaded, answers otherwise: the check means something.)
    loaded = keras.saving.load_model(tmp_path / "mixed.keras")
    pixels = predict._pixels([open(f, "rb").read() for f in files],
                             (SIZE, SIZE), None, False)
    as_loaded = keras.ops.convert_to_numpy(keras.ops.softmax(
        loaded(pixels, training=False)))
    assert np.abs(as_loaded - want).max() > 1e-4


def test_a_version_published_while_the_model_loads_is_not_mixed_in(
        setup, tmp_path, monkeypatch):
    """keras-vit-predict on a TF Serving model folder: the class names are
    the version it loaded, even when a newer version (same class count,
    other names) is published while it loads; a folder numbered past
    int64, which TF Serving skips, is not the newest."""
    root, export = setup
    models = tmp_path / "vit"
    shutil.copytree(os.path.dirname(export), models)
    loads = predict.saved_model_predictor

    def load_then_publish(path):
        loaded = loads(path)
        shutil.copytree(models / "1", models / "2")
        (models / "2" / "assets" / "labels.txt").write_text(
            "".join(f"new {n}\n" for n in NAMES))
        return loaded

    # A folder TF Serving skips (past int64) is no newer version.
    shutil.copytree(models / "1", models / str(2**63))
    (models / str(2**63) / "assets" / "labels.txt").write_text(
        "".join(f"skipped {n}\n" for n in NAMES))
    monkeypatch.setattr(predict, "saved_model_predictor", load_then_publish)
    data = _json(tmp_path, "out", str(root / "photos"), "--model",
                 str(models))
    named = {t["name"] for e in data["predictions"] for t in e["top_k"]}
    assert named == set(NAMES)


def test_npz_with_labels_and_printed_lines(setup, capsys):
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    status = run_predict([image, "--model", str(root / "vit.npz"),
                           "--class_names_file", str(root / "labels.txt"),
                           "--top_k", "2"])
    assert status == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith(f"{image}: ") and len(line.split(", ")) == 2
    assert line.split(": ")[1].split()[0] in NAMES


def test_hub_source_uses_its_class_names(tmp_path, capsys):
    folder = os.path.join(HUB, "hf_vit_classifier")
    pixels = np.load(os.path.join(folder, "reference.npz"))["pixels"][0]
    path = tmp_path / "hub.png"
    path.write_bytes(_encode(pixels, "PNG"))
    assert run_predict([str(path), "--model", folder, "--top_k", "5"]) == 0
    names = [n.split()[0] for n in
             capsys.readouterr().out.split(": ")[1].split(", ")]
    assert sorted(names) == sorted(["cat", "dog", "bird", "fish", "frog"])


def test_class_names_of_the_model_in_another_order_are_warned_of(
        tmp_path):
    """keras-vit-predict --class_names_file holding the classes the model
    records, in another order: its order is taken, with a warning naming
    the first class that differs (a file that reorders a run's labels
    scored every image under another class without a word)."""
    folder = os.path.join(HUB, "hf_vit_classifier")
    pixels = np.load(os.path.join(folder, "reference.npz"))["pixels"][0]
    (tmp_path / "hub.png").write_bytes(_encode(pixels, "PNG"))
    (tmp_path / "names.txt").write_text("dog\ncat\nbird\nfish\nfrog\n")
    result = subprocess.run(
        console.script("predict") + [
            f"--model={folder}", str(tmp_path / "hub.png"),
            f"--class_names_file={tmp_path / 'names.txt'}"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (f"--class_names_file={tmp_path / 'names.txt'} holds the classes "
            f"{folder} records in another order (class 0: 'cat' there, "
            "'dog' here): the file's order is taken.") in result.stderr


def test_a_names_file_stands_in_for_a_model_s_damaged_names(
        tmp_path, monkeypatch):
    """--class_names_file beside a model whose own names cannot be read (a
    labels.txt with a blank line): the file's names are taken, as before
    the order check read the model's names too."""
    from absl import flags

    from keras_vit.checkpoint import loader
    from keras_vit.commands import labels
    from keras_vit.errors import UsageError

    values = flags.FlagValues()
    labels.define_class_names_file(values)
    (tmp_path / "names.txt").write_text("a\nb\n")
    values(["prog", f"--class_names_file={tmp_path / 'names.txt'}"])

    def damaged(source):
        raise UsageError("labels.txt line 2 is blank")

    monkeypatch.setattr(loader, "class_names", damaged)
    assert labels.class_names(values, None) == ["a", "b"]


def test_a_names_file_in_another_unicode_form_is_the_same_order(
        tmp_path, monkeypatch, caplog):
    """--class_names_file writing "é" as "e" and an accent (NFD) beside a
    model that records it composed (NFC), in the same order: no warning
    of another order; a true reorder is still warned of."""
    import types
    import unicodedata

    from absl import flags

    from keras_vit.checkpoint import loader
    from keras_vit.commands import labels

    composed, decomposed = (unicodedata.normalize(form, "café")
                            for form in ("NFC", "NFD"))
    monkeypatch.setattr(loader, "class_names",
                        lambda source: [composed, "tea"])
    values = flags.FlagValues()
    labels.define_class_names_file(values)
    path = tmp_path / "names.txt"
    values(["prog", f"--class_names_file={path}"])
    caplog.set_level("WARNING", logger="absl")
    path.write_text(f"{decomposed}\ntea\n", encoding="utf-8")
    source = types.SimpleNamespace(path="m.keras")
    assert labels.class_names(values, source) == [decomposed, "tea"]
    assert "another order" not in caplog.text
    path.write_text(f"tea\n{decomposed}\n", encoding="utf-8")
    assert labels.class_names(values, source) == ["tea", decomposed]
    assert "in another order (class 0: 'café' there, 'tea' here)" in (
        caplog.text)


def test_a_blank_hub_class_name_is_named_by_its_index(tmp_path):
    """A Hugging Face config whose id2label gives class 1 a blank name:
    keras-vit-predict names it "1" (with a warning), as keras-vit-export
    then does in its labels.txt, where it refused the blank name."""
    folder = tmp_path / "hub"
    shutil.copytree(os.path.join(HUB, "hf_vit_classifier"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"]["1"] = " "
    (folder / "config.json").write_text(json.dumps(config))
    pixels = np.load(folder / "reference.npz")["pixels"][0]
    image = tmp_path / "hub.png"
    image.write_bytes(_encode(pixels, "PNG"))
    result = console.run("predict", [str(image), f"--model={folder}",
                                     "--top_k=5"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"{folder} records a blank or multi-line name for class(es) 1: "
            "named by index here") in result.stderr
    names = {n.split()[0] for n in result.stdout.split(": ")[1].split(", ")}
    assert "1" in names and len(names) == 5, result.stdout
    result = console.run("export", [f"--model={folder}",
                                    f"--export_dir={tmp_path / 'out'}"])
    assert result.returncode == 0, result.stderr[-3000:]
    labels = tmp_path / "out" / "vit" / "1" / "assets" / "labels.txt"
    assert labels.read_text().splitlines()[1] == "1"


def test_bad_file_stops_or_is_skipped(setup, capsys):
    root, _ = setup
    bad = root / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 truncated")
    good = str(root / "photos" / "img0.jpeg")
    args = [good, str(bad), "--model", str(root / "vit.keras")]
    assert run_predict(args) == 1
    err = capsys.readouterr().err
    assert f"{bad} is not a readable image" in err
    assert "--skip_bad_images" in err
    out = root / "skipped.csv"
    assert run_predict(args + ["--skip_bad_images", "--output",
                                str(out)]) == 0
    assert f"skipped {bad}" in capsys.readouterr().err
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["file", "rank", "class", "name", "probability",
                       "skipped"]
    # top 5 of 4 classes: all 4, for the one readable image; the skipped
    # file a row of its own, with its reason
    assert [r[0] for r in rows[1:]] == [good] * 4 + [str(bad)]
    assert all(r[1] and r[5] == "" for r in rows[1:5])
    assert rows[5][1:5] == [""] * 4
    assert rows[5][5] == "Invalid JPEG data, size 14", rows[5]


def test_usage_errors(setup, capsys):
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    cases = [
        ([image], "--model is required (flags: --help)"),
        ([image, "--model", str(root / "x")], "no such file or folder"),
        ([str(root / "missing.png"), "--model", str(root / "vit.keras")],
         "does not exist"),
        ([image, "--model", str(root / "vit.keras"), "--output",
          str(root / "x.txt")], "use a .json or .csv"),
        ([image, "--model", str(root / "exports")], "config.json"),
        ([image, "--model", str(root / "vit.keras"), "--output",
          str(root / "photos")], "is a folder: name a file in it"),
        ([str(root / "photos" / "*.png"), "--model",
          str(root / "vit.keras")], "*.png does not exist: a shell pattern "
         "in quotes is not expanded; leave out the quotes, or give the "
         "folder."),
    ]
    for args, message in cases:
        assert run_predict(args) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
        assert err[0].startswith("keras-vit-predict: error: ")


def test_a_newer_version_without_a_graph_is_named_as_passed_over(
        setup, tmp_path):
    """keras-vit-predict on a TF Serving model folder whose newest version
    folder lacks saved_model.pb (an export stopped while copying it):
    it answers with the newest complete version and says which, naming
    the folder it passed over."""
    root, export = setup
    models = tmp_path / "vit"
    shutil.copytree(export, models / "3")
    (models / "0004" / "variables").mkdir(parents=True)
    result = console.run("predict", [
        str(root / "photos" / "img0.jpeg"), f"--model={models}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert (f"Reading version folder 3 of {models}: the newer 0004 hold(s) "
            "no saved_model.pb") in result.stderr
    assert "img0.jpeg" in result.stdout
    # With the version complete, nothing is said.
    shutil.rmtree(models / "0004")
    result = console.run("predict", [
        str(root / "photos" / "img0.jpeg"), f"--model={models}"])
    assert result.returncode == 0 and "Reading version" not in result.stderr


def test_an_empty_saved_model_pb_is_named(setup, tmp_path, capsys):
    """A version whose saved_model.pb was cut to nothing: named as such,
    not as TensorFlow's advice to pass tags=."""
    root, export = setup
    version = tmp_path / "vit" / "1"
    shutil.copytree(export, version)
    (version / "saved_model.pb").write_bytes(b"")
    assert run_predict([str(root / "photos" / "img0.jpeg"), "--model",
                        str(version)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        f"keras-vit-predict: error: {version} is not a readable SavedModel "
        "with a serving_default signature (its saved_model.pb holds no "
        "graph: an empty or damaged file): export the model again."), line


@covers("saved_model_variables_cut")
def test_a_saved_model_whose_weights_are_cut_short_is_named(setup, tmp_path,
                                                          capsys):
    """A version whose variables file was cut short (an interrupted copy):
    one line naming it and the fix, not TensorFlow's IndexError."""
    root, export = setup
    version = tmp_path / "vit" / "1"
    shutil.copytree(export, version)
    data = version / "variables" / "variables.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 3)
    assert run_predict([str(root / "photos" / "img0.jpeg"), "--model",
                        str(version)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(
        f"keras-vit-predict: error: {version} is not a readable SavedModel "
        "with a serving_default signature ("), line
    assert line.endswith("): export the model again."), line
    check_says("saved_model_variables_cut", line)


def test_a_name_stdout_cannot_encode_is_printed_escaped(setup, tmp_path):
    """Under a Latin-1 stdout (PYTHONIOENCODING, a Latin-1 locale, a
    Windows console) a file name in another script is printed escaped,
    not a UnicodeEncodeError once every image is classified."""
    root, _ = setup
    image = tmp_path / "Sechs \u516d.jpeg"
    shutil.copy(root / "photos" / "img0.jpeg", image)
    result = subprocess.run(
        console.script("predict") + [str(image),
                                     f"--model={root / 'vit.keras'}"],
        capture_output=True, env=console.env(PYTHONIOENCODING="latin-1"),
        timeout=600)
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    assert b"Sechs \\u516d.jpeg: " in result.stdout, result.stdout


def test_a_model_that_names_no_classes_is_said_to_print_numbers(
        setup, caplog, capsys):
    """A .keras or .npz file holds no class names: the classes printed
    as numbers are said once, with the flag that names them."""
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    caplog.set_level("WARNING", logger="absl")
    for model in ("vit.keras", "vit.npz"):
        caplog.clear()
        assert run_predict([image, f"--model={root / model}"]) == 0
        assert caplog.text.count(
            f"{root / model} names no classes: they are printed as numbers "
            "(--class_names_file=FILE names them") == 1, caplog.text
    caplog.clear()
    assert run_predict([image, f"--model={root / 'vit.keras'}",
                        f"--class_names_file={root / 'labels.txt'}"]) == 0
    assert "names no classes" not in caplog.text
    capsys.readouterr()


def test_folders_are_walked_through_links_and_past_hidden_names(tmp_path):
    """A linked class folder is read (as training reads it), a link to a
    parent folder ends the walk, hidden files and folders are not images,
    and a broken link is a bad file: with --skip_bad_images, skipped."""
    png = _encode(np.zeros((8, 8, 3), np.uint8), "PNG")
    elsewhere = tmp_path / "elsewhere" / "bird"
    elsewhere.mkdir(parents=True)
    (elsewhere / "b.png").write_bytes(png)
    root = tmp_path / "photos"
    (root / "cat" / ".thumbnails").mkdir(parents=True)
    (root / "cat" / "c.png").write_bytes(png)
    (root / "cat" / "._c.png").write_bytes(b"macOS resource fork")
    (root / "cat" / ".thumbnails" / "t.png").write_bytes(png)
    os.symlink(elsewhere, root / "bird")
    os.symlink(root, root / "cat" / "loop")
    files, folder = predict.list_images([str(root)])
    assert folder and files == [str(root / "bird" / "b.png"),
                                str(root / "cat" / "c.png")]
    os.symlink(tmp_path / "gone.png", root / "cat" / "gone.png")
    files, _ = predict.list_images([str(root)])
    good, skipped = predict.check_images(files, skip_bad=True)
    assert good == [str(root / "bird" / "b.png"), str(root / "cat" / "c.png")]
    assert skipped == [(str(root / "cat" / "gone.png"),
                        "No such file or directory")]
    with pytest.raises(ValueError, match="gone.png is not a readable image "
                       r"\(No such file or directory\); pass "
                       "--skip_bad_images"):
        predict.check_images(files, skip_bad=False)


def test_an_image_given_twice_is_classified_once(setup, tmp_path, capsys):
    """A folder and a file or subfolder in it, a link to a file in it and
    a path repeated: each image is one row of --output, where it comes
    first, and the command says how many were given again."""
    root, _ = setup
    photos = root / "photos"
    link = tmp_path / "link.png"
    os.symlink(photos / "img0.jpeg", link)
    model = f"--model={root / 'vit.keras'}"
    data = _json(root, "twice", model, str(photos), str(photos / "nested"),
                 str(photos / "img0.jpeg"), str(link),
                 str(photos / "img0.jpeg"))
    files = [entry["file"] for entry in data["predictions"]]
    alone = [entry["file"] for entry in _json(
        root, "once", model, str(photos))["predictions"]]
    assert files == alone and len(files) == 5
    assert ("5 images given more than once (a folder and a file or folder "
            "in it, a link, a path repeated): each is classified once."
            ) in capsys.readouterr().err


def test_tilde_in_model_is_the_home_folder(setup, monkeypatch, capsys):
    """`--model=~/vit.keras` (bash expands no ~ after `=`) and
    keras_vit.load_model("~/...") read the home folder's file."""
    import keras_vit

    root, _ = setup
    monkeypatch.setenv("HOME", str(root))
    image = str(root / "photos" / "img0.jpeg")
    assert run_predict([image, "--model=~/vit.keras"]) == 0
    assert "img0.jpeg" in capsys.readouterr().out
    # --output and --class_names_file too: no ./~ folder is made.
    monkeypatch.chdir(root / "photos")
    assert run_predict([image, "--model=~/vit.npz", "--output=~/t/p.json",
                        "--class_names_file=~/labels.txt"]) == 0
    assert f"-> {root / 't' / 'p.json'}" in capsys.readouterr().out
    data = json.loads((root / "t" / "p.json").read_text())
    assert data["predictions"][0]["top_k"][0]["name"] in NAMES
    assert not (root / "photos" / "~").exists()
    assert keras_vit.load_model("~/vit.npz").output_shape[-1] == 4


def test_hub_config_without_weights_names_the_missing_file(setup, tmp_path,
                                                           capsys):
    root, _ = setup
    folder = tmp_path / "hf_config_only"
    folder.mkdir()
    config = os.path.join(HUB, "hf_vit_classifier", "config.json")
    (folder / "config.json").write_text(open(config).read())
    assert run_predict([str(root / "photos"), f"--model={folder}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a config field" not in err[0], err
    assert "Hugging Face model's config.json but not its weights" in err[0]
    assert "model.safetensors (or pytorch_model.bin)" in err[0]


def test_keras_model_of_no_vit_is_refused_once(setup, tmp_path, capsys,
                                                caplog):
    """The command refuses a .keras of another model in one line, without
    the warning `keras_vit.load_model` gives as it returns that model."""
    root, _ = setup
    inputs = keras.Input((SIZE, SIZE, 3))
    outputs = keras.layers.Dense(4)(keras.layers.Flatten()(inputs))
    path = str(tmp_path / "not_vit.keras")
    keras.Model(inputs, outputs).save(path)
    assert run_predict([str(root / "photos"), f"--model={path}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a Vision Transformer" in err[0], err
    assert "its layer 'flatten' (Flatten) is none of a ViT's" in err[0]
    assert not [r for r in caplog.records
                if "not a keras_vit Vision" in r.getMessage()]
    caplog.clear()
    model = keras_vit.load_model(path)
    assert type(model.layers[-1]).__name__ == "Dense"
    warned = " ".join(r.getMessage() for r in caplog.records
                      if "not a keras_vit Vision" in r.getMessage())
    assert "given back as Keras saved it" in warned
    assert "the keras-vit commands" in warned and "refuse it" in warned
    # keras-vit-convert re-saves it as it is, saying so alike.
    from keras_vit.commands import convert

    caplog.clear()
    convert.convert(path, str(tmp_path / "again.keras"))
    assert "not a keras_vit Vision Transformer" in caplog.text
    assert os.path.exists(tmp_path / "again.keras")


def test_output_is_checked_first_and_its_folder_made(setup, capsys):
    root, export = setup
    image = str(root / "photos" / "img0.jpeg")
    # A bad --output is refused before the model loads: the model named
    # here does not exist.
    assert run_predict([image, "--model", str(root / "missing.keras"),
                        "--output", str(root / "x.txt")]) == 1
    assert "use a .json or .csv" in capsys.readouterr().err
    out = root / "new" / "deeper" / "answers.csv"
    assert run_predict([image, "--model", str(root / "vit.keras"),
                        "--output", str(out)]) == 0
    assert next(csv.reader(out.open()))[0] == "file"
    assert sorted(os.listdir(out.parent)) == ["answers.csv"]  # no temp left
    # An export that does not load is one line naming it.
    broken = root / "broken_export" / "vit" / "1"
    broken.mkdir(parents=True)
    (broken / "saved_model.pb").write_bytes(b"not a protocol buffer")
    assert run_predict([image, "--model", str(broken.parent)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{broken} is not a readable SavedModel" in err[0]
    assert "export the model again" in err[0]


def test_a_file_name_that_is_not_utf8_is_written_escaped(setup, tmp_path):
    """An old archive's Latin-1 name (caf\\xe9.jpg): keras-vit-predict
    classifies it and writes its name escaped in the CSV and the JSON,
    which stay UTF-8 (it was an encoding traceback after the whole
    folder ran)."""
    from tests import console

    root, _ = setup
    folder = os.fsencode(str(tmp_path / "old"))
    os.makedirs(folder)
    with open(os.path.join(folder, b"caf\xe9.jpg"), "wb") as f:
        f.write((root / "photos" / "img0.jpeg").read_bytes())
    for ext in ("csv", "json"):
        out = tmp_path / f"answers.{ext}"
        result = console.run("predict", [f"--model={root / 'vit.keras'}",
                                         str(tmp_path / "old"),
                                         f"--output={out}"])
        assert result.returncode == 0, result.stderr[-2000:]
        text = out.read_bytes().decode("utf-8")  # strict
        assert "caf\\xe9.jpg" in text.replace("\\\\", "\\")
    assert json.loads(text)["predictions"][0]["file"].endswith(
        "caf\\xe9.jpg")


def test_a_newline_in_a_file_name_stays_on_its_line(setup, tmp_path,
                                                    capsys):
    """The plain output is a line per file: a name holding a newline or
    a tab is printed with them escaped ("a\\nb.jpeg"), not split over two
    lines; the JSON keeps the name as it is."""
    root, _ = setup
    folder = tmp_path / "odd"
    folder.mkdir()
    photo = (root / "photos" / "img0.jpeg").read_bytes()
    (folder / "a\nb.jpeg").write_bytes(photo)
    (folder / "c\td.jpeg").write_bytes(photo)
    assert run_predict([f"--model={root / 'vit.keras'}", str(folder)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        str(folder / "a\\nb.jpeg"), str(folder / "c\\td.jpeg")], lines
    data = _json(root, "odd", f"--model={root / 'vit.keras'}", str(folder))
    assert [p["file"] for p in data["predictions"]] == [
        str(folder / "a\nb.jpeg"), str(folder / "c\td.jpeg")]
    # Spaces of other scripts and joiners are no line break: as they are.
    for name in ("a\u3000b.jpg", "a\xa0b.jpg", "\U0001F468\u200d\U0001F469.jpg",
                 "caf\xe9.jpg"):
        assert predict.one_line(name) == name
    assert predict.one_line("a\u2028b\rc.jpg") == "a\\u2028b\\rc.jpg"


def test_a_timm_model_is_scored_with_its_crop_pct(tmp_path, capsys):
    """A timm folder's pretrained_cfg crop_pct (0.9 at 32: resize to 35,
    then the central 32 crop; the shorter side, the aspect ratio kept),
    as timm evaluates it: keras-vit-predict
    answers what the model says on that crop; timm's default 0.875 where
    the config gives none; transformers' folders resize directly;
    --resize_size wins."""
    import shutil

    from keras_vit.checkpoint import loader

    folder = str(tmp_path / "timm")
    shutil.copytree(os.path.join(HUB, "timm_vit"), folder)
    source = loader.resolve(folder)
    assert source.library_resize()[:3] == (35, (32, 32), True)  # shorter side
    assert loader.resolve(os.path.join(
        HUB, "hf_vit_classifier")).library_resize() is None
    rgb = np.random.default_rng(3).integers(0, 256, (40, 50, 3), np.uint8)
    image = tmp_path / "photo.png"
    image.write_bytes(_encode(rgb, "PNG"))
    check_predicts_with_resize(folder, image, 35, top_k=3)
    config = json.loads(open(os.path.join(folder, "config.json")).read())
    del config["pretrained_cfg"]["crop_pct"]
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    assert loader.resolve(folder).library_resize()[:3] == (36, (32, 32), True)
    config["pretrained_cfg"]["crop_pct"] = 1.5
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f)
    assert run_predict([str(image), "--model", folder]) == 1
    assert "crop_pct" in capsys.readouterr().err


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-vit-predict: error: "), \
        err
    return err[0]


def test_class_names_of_another_count_are_refused_before_any_image(
        setup, tmp_path, capsys):
    """A --class_names_file of 3 names for the 4-class model: one line
    naming the flag, right after the model loads (the broken image after
    it is never read); a blank line between names is refused by its number
    (dropped, it shifted every later name); blank lines at the end are
    not."""
    root, _ = setup
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8\xff truncated")
    image = str(root / "photos" / "img0.jpeg")
    three = tmp_path / "three.txt"
    three.write_text("cat\ndog\nbird\n")
    assert run_predict([image, str(broken), f"--model={root / 'vit.keras'}",
                        f"--class_names_file={three}"]) == 1
    assert _one_error_line(capsys).endswith(
        f"--class_names_file={three} holds 3 class names for a 4-class "
        "model: give one name per class, one per line, in label order.")
    blank = tmp_path / "blank.txt"
    blank.write_text("cat\n\ndog\nbird\nfish\n")
    assert run_predict([image, f"--model={root / 'vit.npz'}",
                        f"--class_names_file={blank}"]) == 1
    assert f"--class_names_file={blank} line 2 is blank: give one class " \
        "name per line" in _one_error_line(capsys)
    trailing = tmp_path / "trailing.txt"
    trailing.write_text("cat\r\ndog\r\nbird\r\nfish\r\n\r\n \n")
    # Notepad's UTF-8 starts with a byte order mark: not part of a name.
    marked = tmp_path / "marked.txt"
    marked.write_bytes("".join(f"{n}\n" for n in NAMES).encode("utf-8-sig"))
    for names in (trailing, marked):
        assert run_predict([image, f"--model={root / 'vit.npz'}",
                            "--top_k=4", f"--class_names_file={names}"]) == 0
        answer = capsys.readouterr().out.split(": ")[1]
        assert sorted(n.split()[0] for n in answer.split(", ")) == sorted(
            NAMES)


def test_an_existing_output_is_kept_unless_overwrite(setup, tmp_path,
                                                     capsys):
    """--output never replaces a file by accident (a run's config.json
    was overwritten): refused as keras-vit-convert refuses, before the
    model loads; --overwrite replaces it, and goes with --output only."""
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    config = tmp_path / "config.json"
    config.write_text('{"model": {}}')
    assert run_predict([image, f"--model={tmp_path / 'missing.keras'}",
                        f"--output={config}"]) == 1
    assert _one_error_line(capsys).endswith(
        f"{config} already exists: pass --overwrite to replace it, or "
        "choose another --output.")
    assert config.read_text() == '{"model": {}}'
    assert run_predict([image, f"--model={root / 'vit.keras'}",
                        f"--output={config}", "--overwrite"]) == 0
    assert json.loads(config.read_text())["predictions"][0]["file"] == image
    assert sorted(os.listdir(tmp_path)) == ["config.json"]  # no temp left
    capsys.readouterr()
    assert run_predict([image, f"--model={root / 'vit.keras'}",
                        "--overwrite"]) == 1
    assert "--overwrite goes with --output only" in _one_error_line(capsys)


@covers("output_made_during_predict")
def test_an_output_made_while_images_are_classified_is_kept(
        setup, tmp_path, monkeypatch, capsys):
    """Without --overwrite, a file that appears at --output after the
    first check (while the model loads or the images are classified) is
    kept and named, not replaced."""
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    output = tmp_path / "answer.json"
    classify = predict.classify

    def racing(*args, **kwargs):
        output.write_text("the user's")
        return classify(*args, **kwargs)

    monkeypatch.setattr(predict, "classify", racing)
    assert run_predict([image, f"--model={root / 'vit.keras'}",
                        f"--output={output}"]) == 1
    line = _one_error_line(capsys)
    check_says("output_made_during_predict", line)
    assert line.endswith(f"{output} already exists: pass --overwrite to "
                         "replace it, or choose another --output.")
    assert output.read_text() == "the user's"
    assert sorted(os.listdir(tmp_path)) == ["answer.json"]


def test_no_ema_with_a_model_of_one_set_of_weights_is_refused(setup,
                                                               capsys):
    """--no_ema picks a training run's raw weights: given with a .keras,
    .npz or hub model (which hold one set) it is refused by name, as
    --variant on a workdir is, not ignored."""
    root, _ = setup
    image = str(root / "photos" / "img0.jpeg")
    for model, what in ((root / "vit.keras", "a .keras file"),
                        (root / "vit.npz", "an .npz file"),
                        (os.path.join(HUB, "hf_vit_classifier"),
                         "a Hugging Face, timm or keras-hub model")):
        assert run_predict([image, f"--model={model}", "--no_ema"]) == 1
        assert _one_error_line(capsys).endswith(
            f"--no_ema goes with a training workdir only; {model} is "
            f"{what}, which holds one set of weights: leave --no_ema out.")


def test_progress_lines_end_before_skipped_and_error_lines(setup, tmp_path,
                                                          monkeypatch,
                                                          capsys):
    """The counts that rewrite one line ("\\r") are ended before a
    'skipped' line, an error or Ctrl-C's line, and no blank line
    follows: each message starts a line of its own."""
    from keras_vit.data import preprocessing

    root, _ = setup
    folder = tmp_path / "photos"
    shutil.copytree(root / "photos", folder)
    (folder / "a_broken.jpg").write_bytes(b"\xff\xd8\xff truncated")
    (folder / "z_broken.jpg").write_bytes(b"\xff\xd8\xff truncated")
    model = f"--model={root / 'vit.keras'}"
    assert run_predict([str(folder), model, "--skip_bad_images"]) == 0
    lines = capsys.readouterr().err.split("\n")
    skipped = [line for line in lines if "skipped" in line]
    assert len(skipped) == 2 and all(
        line.startswith("skipped ") for line in skipped), lines
    assert "" not in lines[:-1], lines  # no blank line
    assert lines[-2].endswith("5/5 images") and lines[-1] == ""
    assert run_predict([str(folder), model]) == 1
    lines = capsys.readouterr().err.split("\n")
    assert lines[-2].startswith("keras-vit-predict: error: "), lines
    assert lines[-3].endswith("checked 1/7 images"), lines
    decode = preprocessing.decode_image
    seen = []

    def interrupted(data):
        seen.append(data)
        if len(seen) == 1:  # Ctrl-C while "checked 1/7 images" shows
            raise KeyboardInterrupt
        return decode(data)

    monkeypatch.setattr(preprocessing, "decode_image", interrupted)
    assert run_predict([str(folder), model, "--skip_bad_images"]) == 130
    lines = capsys.readouterr().err.split("\n")
    assert lines[-2] == ("keras-vit-predict: interrupted: stopped at once "
                         "(Ctrl-C)."), lines
    assert lines[-3].endswith("checked 1/7 images"), lines


def test_a_reader_that_stops_early_ends_the_command_quietly(setup):
    """`keras-vit-predict --model=M FOLDER | head -2`: the pipe closes
    before the answers are all printed; the command ends with status 0
    and no BrokenPipeError traceback."""
    import subprocess

    from tests import console

    root, _ = setup
    many = root / "many"
    if not many.exists():
        many.mkdir()
        data = (root / "photos" / "nested" / "img1.png").read_bytes()
        # More lines than a pipe holds (64 KiB): 300 of over 250 bytes.
        for i in range(300):
            (many / f"{i:04d}_{'x' * 240}.png").write_bytes(data)
    proc = subprocess.Popen(
        console.script("predict") + [f"--model={root / 'vit.keras'}",
                                     str(many), "--batch_size=500"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=console.env())
    first = proc.stdout.readline()
    proc.stdout.close()  # as `head -1` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=600) == 0, err[-3000:]
    assert first.startswith(str(many).encode())
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-3000:]


@covers("elongated_image_keep_aspect")
def test_an_image_too_elongated_to_keep_its_aspect_is_one_line(
        tmp_path, capsys):
    """Keeping the aspect ratio, the longer side grows with the ratio: a
    1 x 300 strip at a resize of 256 would be 256 x 76800 pixels. It is
    refused by name (memory bounded), the op says so in graphs too, and
    --nokeep_aspect answers."""
    from keras_vit.data import preprocessing

    model = tmp_path / "m.keras"
    create_model(None, num_classes=3, image_size=32, patch_size=8,
                 hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=32).save(model)
    strip = tmp_path / "strip.png"
    strip.write_bytes(_encode(np.zeros((1, 300, 3), np.uint8), "PNG"))
    good = tmp_path / "good.png"
    good.write_bytes(_encode(np.zeros((40, 50, 3), np.uint8), "PNG"))
    args = [str(good), str(strip), f"--model={model}", "--resize_size=256"]
    assert run_predict([*args, "--keep_aspect"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"keras-vit-predict: error: {strip}: ")
    check_says("elongated_image_keep_aspect", err[0])
    # With --skip_bad_images it is named and left out; the other image
    # of its batch is answered.
    out = tmp_path / "kept.json"
    assert run_predict([*args, "--keep_aspect", "--skip_bad_images",
                        f"--output={out}"]) == 0
    captured = capsys.readouterr()
    assert f"skipped {strip}: The image is too elongated" in captured.err
    assert "1 image -> " in captured.out and "(1 skipped)" in captured.out
    data = json.loads(out.read_text())
    assert [p["file"] for p in data["predictions"]] == [str(good)]
    assert [s["file"] for s in data["skipped"]] == [str(strip)]
    check_says("elongated_image_keep_aspect", data["skipped"][0]["reason"])
    assert run_predict([*args, "--nokeep_aspect"]) == 0
    # An export's warm-up image so elongated is named before anything is
    # written: TF Serving replays warm-up when it loads the model, and
    # would fail the load on it.
    export_dir = tmp_path / "export"
    capsys.readouterr()
    assert export_cli.main([
        "keras-vit-export", f"--model={model}", f"--export_dir={export_dir}",
        "--resize_size=256", "--keep_aspect", f"--warmup_images={good}",
        f"--warmup_images={strip}"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"keras-vit-export: error: warmup_images[1] ({strip}), 1 x 300 "
        "pixels: The image is too elongated"), err
    check_says("elongated_image_keep_aspect", err[0])
    assert not export_dir.exists()
    with pytest.raises(tf.errors.InvalidArgumentError, match="elongated"):
        tf.function(lambda image: preprocessing.preprocess_eval(
            image, 32, 256, keep_aspect=True))(tf.zeros((1, 300, 3), tf.uint8))


def test_jpeg_files_named_jfif_or_jpe_are_found_in_folders(setup, tmp_path,
                                                           capsys):
    """.jfif and .jpe are JPEG files (what some browsers and cameras
    save): a folder's are classified, not left out unsaid."""
    root, _ = setup
    jpeg = (root / "photos" / "img0.jpeg").read_bytes()
    folder = tmp_path / "saved"
    folder.mkdir()
    for name in ("a.jfif", "b.JPE", "c.jpg"):
        (folder / name).write_bytes(jpeg)
    assert run_predict([str(folder), f"--model={root / 'vit.keras'}"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(": ")[0] for line in lines] == [
        str(folder / n) for n in ("a.jfif", "b.JPE", "c.jpg")]


def test_a_saved_model_names_what_its_resize_refuses(setup, tmp_path,
                                                     capsys):
    """A SavedModel that keeps the aspect ratio refuses a 1 x 60000 strip
    in its graph: the line says why (not "Graph execution error:"), and
    --skip_bad_images leaves the strip out."""
    root, _ = setup
    assert export_cli.main([
        "keras-vit-export", f"--model={root / 'vit.keras'}",
        f"--export_dir={tmp_path / 'kept'}", "--resize_size=20",
        "--keep_aspect"]) == 0
    strip = tmp_path / "strip.png"
    strip.write_bytes(_encode(np.zeros((1, 60000, 3), np.uint8), "PNG"))
    good = str(root / "photos" / "img0.jpeg")
    # What a TF Serving client reads: the strip by its index and its
    # reason, in a batch too (not "a truncated or corrupt PNG").
    signature = tf.saved_model.load(str(tmp_path / "kept" / "vit" / "1")
                                    ).signatures["serving_default"]
    with open(good, "rb") as f:
        batch = tf.constant([f.read(), strip.read_bytes()])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"image_bytes\[1\]: The image is too elongated"):
        signature(image_bytes=batch)
    args = [good, str(strip), f"--model={tmp_path / 'kept' / 'vit'}"]
    capsys.readouterr()
    assert run_predict(args) == 1
    err = _one_error_line(capsys)
    assert err.startswith(f"keras-vit-predict: error: {strip}: The image is "
                          "too elongated"), err
    assert "Graph execution error" not in err
    assert run_predict([*args, "--skip_bad_images"]) == 0
    captured = capsys.readouterr()
    assert f"skipped {strip}: The image is too elongated" in captured.err
    assert [line.split(": ")[0] for line in
            captured.out.strip().splitlines()] == [good]


def test_a_litert_resize_smaller_than_its_input_is_refused_first(
        setup, tmp_path, capsys):
    """--resize_size below a .tflite file's input is refused as for a
    Keras model, before any image is read (the image here is broken)."""
    root, _ = setup
    assert export_cli.main([
        "keras-vit-export", f"--model={root / 'vit.keras'}",
        f"--export_dir={tmp_path}", "--format=litert"]) == 0
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"not an image")
    capsys.readouterr()
    assert run_predict([str(broken), f"--model={tmp_path / 'vit.tflite'}",
                        "--resize_size=4"]) == 1
    assert _one_error_line(capsys).endswith(
        "--resize_size 4 is smaller than the model's input 16x16: the "
        "central crop is taken from the resized image, so give at least its "
        "longer side (or leave --resize_size out).")
    assert run_predict([str(broken), f"--model={tmp_path / 'vit.tflite'}",
                        "--resize_size=0"]) == 1
    assert _one_error_line(capsys).endswith(
        "--resize_size 0 must be at least 1 (the side the images are "
        "resized to), or left out.")


def _copy_tree_to(local, remote):
    """The files under folder `local` copied below URL `remote`."""
    for root, _, names in os.walk(local):
        target = remote + root[len(str(local)):]
        tf.io.gfile.makedirs(target)
        for name in names:
            tf.io.gfile.copy(os.path.join(root, name),
                             f"{target}/{name}", overwrite=True)


def test_files_of_other_kinds_in_a_folder_are_counted(setup, tmp_path):
    """A folder holding a TIFF scan, an iPhone HEIC and a text file beside
    its photos: keras-vit-predict, typed as a user types it, classifies
    the photos and names what it left out, by extension, in one line."""
    root, _ = setup
    folder = tmp_path / "mixed"
    shutil.copytree(root / "photos", folder)
    for name in ("scan.tiff", "nested/IMG_1.HEIC", "notes.txt", "README"):
        (folder / name).write_bytes(b"not read")
    (folder / ".DS_Store").write_bytes(b"hidden")
    result = console.run("predict", [f"--model={root / 'vit.keras'}",
                                     str(folder)])
    assert result.returncode == 0, result.stderr[-2000:]
    photos = image_files.images_under(str(root / "photos"))
    assert len(result.stdout.strip().splitlines()) == len(photos)
    (line,) = [t for t in result.stderr.splitlines() if "not read" in t]
    assert line.endswith(
        f"Image folder {folder}: 1 extensionless file, 1 .heic file, "
        "1 .tiff file, 1 .txt file not read (only .jpg, .jpeg, .jpe, .jfif, "
        ".png, .gif, .bmp, .webp are images here)."), line


def test_an_earlier_analysis_s_figures_are_not_classified(setup, tmp_path):
    """keras-vit-analysis's output folder inside a folder of photos: its
    figures (beside its analysis.json) are not read as photos when the
    folder is walked, and said; one given by name is classified."""
    root, _ = setup
    folder = tmp_path / "photos"
    shutil.copytree(root / "photos", folder)
    (folder / "analysis").mkdir()
    (folder / "analysis" / "analysis.json").write_text("{}")
    figure = folder / "analysis" / "attention_rollout.png"
    figure.write_bytes(_encode(np.zeros((20, 30, 3), np.uint8), "PNG"))
    photos = image_files.images_under(str(root / "photos"))
    model = f"--model={root / 'vit.keras'}"
    for args, count in (([str(folder)], len(photos)),
                        ([str(figure)], 1)):
        result = console.run("predict", [model, *args])
        assert result.returncode == 0, result.stderr[-2000:]
        named = [line.split(": ")[0]
                 for line in result.stdout.strip().splitlines()]
        assert len(named) == count, named
        assert (str(figure) in named) == (count == 1), named
        said = f"{folder}: 1 figure(s) of an earlier analysis (beside its " \
            "analysis.json) not read as images."
        assert (said in result.stderr) == (count > 1), result.stderr
    # A folder of the figures alone: said, not "no readable image".
    result = console.run("predict", [model, str(figure.parent)])
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        f"keras-vit-predict: error: {figure.parent} holds only the figures "
        "of an earlier analysis (beside its analysis.json), which are not "
        "read as images when a folder is walked: name a figure to classify "
        "it."), result.stderr


def test_remote_images_are_read_as_local_ones(setup, tmp_path, capsys,
                                             caplog):
    """A folder at a tf.io.gfile URL (here TensorFlow's in-memory ram://
    file system, standing for gs://) is walked with its sub-folders,
    hidden ones skipped, and its files answered as the same local files
    are; a web address is refused naming the fix."""
    root, _ = setup
    remote = "ram://predict_photos"
    _copy_tree_to(root / "photos", remote)
    tf.io.gfile.makedirs(f"{remote}/.thumbs")
    tf.io.gfile.copy(str(root / "photos" / "img0.jpeg"),
                     f"{remote}/.thumbs/img0.jpeg", overwrite=True)
    args = ["--model", str(root / "vit.keras"), "--class_names_file",
            str(root / "labels.txt")]
    with tf.io.gfile.GFile(f"{remote}/nested/scan.tiff", "wb") as f:
        f.write(b"not read")
    local = _json(tmp_path, "local", str(root / "photos"), *args)
    caplog.clear()
    far = _json(tmp_path, "far", remote, *args)
    assert f"Image folder {remote}: 1 .tiff file not read" in caplog.text
    assert [e["file"] for e in far["predictions"]] == [
        remote + e["file"][len(str(root / "photos")):]
        for e in local["predictions"]]
    np.testing.assert_allclose(_probabilities(far), _probabilities(local),
                               atol=1e-6)
    one = f"{remote}/nested/img1.png"
    assert run_predict([one, *args]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"{one}: ")
    for missing, says in [(f"{remote}/nope.png", "does not exist"),
                          ("https://example.com/cat.jpg",
                           "not web addresses: download it first")]:
        assert run_predict([missing, *args]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
