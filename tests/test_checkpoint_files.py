"""Checkpoint files: safe reading, exact and atomic saving, remote paths,
and the conversion CLI.

Numbers are compared with tests/numpy_reference.py, as in test_checkpoint.py
(whose helpers are reused).
"""

import io
import json
import os
import pickle
import re
import zipfile

import keras
import numpy as np
import pytest

from keras_vit import create_model, features_model
from keras_vit.checkpoint import loader
from keras_vit.checkpoint import weights as checkpoint
from keras_vit.checkpoint.formats import npz as checkpoint_io
from keras_vit.commands import convert
from keras_vit.commands import flags as cli_flags
from keras_vit.errors import UsageError
from tests import console
from tests import numpy_reference as ref
from tests.reliability_cases import check_says, covers
from tests.test_checkpoint import (
    POSEMB,
    assert_close,
    images,
    keras_features,
    random_arrays,
    save,
    tiny,
    zoom_posemb,
)


def test_unreadable_files_give_clear_errors(tmp_path):
    good = save(tmp_path / "good.npz", random_arrays(tiny(num_layers=1)))
    data = open(good, "rb").read()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="truncated or corrupt") as info:
        checkpoint_io.read_npz(truncated)
    assert str(truncated) in str(info.value)

    html = tmp_path / "page.npz"
    html.write_text("<html>Not Found</html>")
    with pytest.raises(ValueError, match="not an .npz archive"):
        checkpoint_io.read_npz(html)

    npy = tmp_path / "single.npy"
    np.save(npy, np.ones(3))
    with pytest.raises(ValueError, match="single .npy array"):
        checkpoint_io.read_npz(npy)

    objects = tmp_path / "objects.npz"
    np.savez(objects, cls=np.ones(2), evil=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="'evil' holds pickled Python"):
        checkpoint_io.read_npz(objects)

    raw = tmp_path / "raw.npz"
    raw.write_bytes(pickle.dumps({"cls": [1.0]}))
    with pytest.raises(ValueError, match="a Python pickle"):
        checkpoint_io.read_npz(raw)

    empty = tmp_path / "empty.npz"
    np.savez(empty)
    with pytest.raises(ValueError, match="holds no arrays"):
        checkpoint_io.read_npz(empty)

    with pytest.raises(FileNotFoundError):
        checkpoint_io.read_npz(tmp_path / "missing.npz")


def test_npz_header_with_negative_axes_is_refused(tmp_path):
    """numpy's .npy header parser takes negative axis lengths; two of them
    multiply to a positive size that matches the member's bytes. Refused
    from the header, before any width is read from the shape."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": "<f4", "fortran_order": False, "shape": (-2, -3)})
    path = tmp_path / "negative.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("cls.npy", header.getvalue()
                         + np.zeros(6, np.float32).tobytes())
    with pytest.raises(UsageError, match=r"'cls' declares shape \(-2, -3\), "
                       "with an axis of negative length"):
        checkpoint_io.read_npz(path)


# ------------------------------------------------------------ .keras files


def _tiny_keras_files(folder):
    """.keras files of keras_vit models: plain (with a representation
    layer), hybrid (R+ViT with its ResNet stem), of any image size, and a
    functional model of keras_vit's layers and a Softmax (a user's model,
    as earlier versions saved theirs)."""
    sizes = dict(patch_size=4, hidden_size=16, num_layers=1, num_heads=2,
                 mlp_dim=32)
    models = {
        "plain": tiny(representation_size=8, image_size=16, **sizes),
        "hybrid": tiny(resnet_layers=(1, 1), image_size=32,
                       **dict(sizes, patch_size=1)),
        "dynamic": tiny(image_size=16, dynamic_image_size=True, **sizes),
    }
    inputs = keras.Input((16, 16, 3))
    x = inputs
    for layer in models["plain"].layers[1:]:
        x = layer(x)
    models["functional"] = keras.Model(
        inputs, keras.layers.Softmax(name="probs")(x))
    paths = {}
    for name, model in models.items():
        paths[name] = str(folder / f"{name}.keras")
        model.save(paths[name])
    return paths


def test_keras_vit_keras_files_pass_the_size_check(tmp_path):
    from keras_vit.checkpoint.formats import keras_file

    legacy = os.path.join(os.path.dirname(__file__), "fixtures")
    paths = list(_tiny_keras_files(tmp_path).values()) + [
        os.path.join(legacy, "legacy_keras", "tiny_hybrid.keras"),
        os.path.join(legacy, "earlier", "mpp.keras")]
    for path in paths:
        assert keras_file.read_keras_model(path).count_params() > 0, path


def _with_layer(tmp_path, name, layer):
    """A small model's .keras file whose config.json holds `layer` (a
    layer's config, changed by `layer(config)` when callable) instead."""
    source = _tiny_keras_files(tmp_path)["functional"]
    with zipfile.ZipFile(source) as archive:
        stored = {n: archive.read(n) for n in archive.namelist()}
    config = json.loads(stored["config.json"])
    if callable(layer):
        layer(config)
    else:
        config = layer
    path = str(tmp_path / f"{name}.keras")
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in stored.items():
            archive.writestr(member, json.dumps(config)
                             if member == "config.json" else data)
    return path


_CONV_BOMB = {
    "module": "keras.layers", "class_name": "Conv2D",
    "config": {"name": "conv", "filters": 65536, "kernel_size": [512, 512]},
    "build_config": {"input_shape": [None, 8, 8, 3]}}


def _edit(of, **fields):
    """A config change: `fields` into every layer of class `of` (a dict
    merged into the layer's, a key given None dropped)."""
    def change(config):
        for layer in config["config"]["layers"]:
            if layer["class_name"] == of:
                for key, value in fields.items():
                    if value is None:
                        layer.pop(key)
                    elif isinstance(value, dict):
                        layer[key].update(value)
                    else:
                        layer[key] = value
    return change


@pytest.mark.parametrize("layer, says", [
    # 65536 filters of 512 x 512 x 3: ~200 GB, allocated from its
    # build_config before Keras reads a weight.
    (_CONV_BOMB, "declares at least 51,539,673,088 parameters"),
    ({"module": "keras", "class_name": "Sequential", "config": {
        "name": "s", "layers": [_CONV_BOMB]}},
     "declares at least 51,539,673,088 parameters"),
    # A class the check cannot size: refused by name.
    (dict(_CONV_BOMB, class_name="EinsumDense", config={
        "name": "ed", "equation": "ab,bc->ac", "output_shape": [1 << 30]}),
     "holds layer 'ed' (EinsumDense), a class the check before loading "
     "cannot size"),
    # Keras takes a registered_name before the class_name: a "Dropout"
    # that is keras_vit's ResNetStem, 2^20 times as wide.
    (_edit("TokenPooling", class_name="Dropout",
           registered_name="keras_vit>ResNetStem",
           config={"layers": [1], "width_factor": 1 << 20}),
     "parameters, more than its weights"),
    # Without its build shape, a functional model builds a layer from its
    # inputs.
    (_edit("Dense", build_config=None, config={"units": 1 << 30}),
     "layer 'head' (Dense) records no input shape"),
])
def test_keras_file_declaring_unsized_layers_is_refused_before_loading(
        tmp_path, monkeypatch, layer, says):
    from keras_vit.checkpoint.formats import keras_file

    path = _with_layer(tmp_path, "crafted", layer)

    def never(*args, **kwargs):
        raise AssertionError("Keras's loader ran on a crafted file")

    monkeypatch.setattr(keras.models, "load_model", never)
    with pytest.raises(UsageError, match=re.escape(says)) as info:
        keras_file.read_keras_model(path)
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------- saving


@pytest.mark.parametrize(
    "kw",
    [dict(representation_size=24), dict(resnet_layers=(1, 1), num_layers=1)],
    ids=["vit", "hybrid"],
)
def test_save_npz_round_trip_is_exact(tmp_path, kw):
    model = tiny(**kw)
    arrays = random_arrays(model)
    path = save(tmp_path / "in.npz", arrays)
    checkpoint.load_npz(model, path)
    out = tmp_path / "out.npz"
    checkpoint.save_npz(model, out)
    with np.load(path) as a, np.load(out) as b:
        assert a.files == b.files  # same keys, same order
        for key in a.files:
            assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype
            np.testing.assert_array_equal(a[key], b[key])
    assert sorted(os.listdir(tmp_path)) == ["in.npz", "out.npz"]


def test_save_npz_is_atomic(tmp_path, monkeypatch):
    model = tiny(num_layers=1)
    out = tmp_path / "model.npz"
    out.write_bytes(b"previous contents")

    def failing_savez(file, **arrays):  # np.savez gets a temporary path
        with open(file, "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint_io.np, "savez", failing_savez)
    with pytest.raises(OSError, match="disk full"):
        checkpoint.save_npz(model, out)
    assert out.read_bytes() == b"previous contents"
    assert os.listdir(tmp_path) == ["model.npz"]


# ------------------------------------------------------------------- CLI


def test_convert_cli_writes_equivalent_keras_file(tmp_path, capsys):
    source = create_model("Ti/16", num_classes=5, image_size=32)
    arrays = random_arrays(source)
    npz = save(tmp_path / "Ti_16.npz", arrays)
    output = tmp_path / "out" / "ti16.keras"
    rc = convert.main([
        "keras-vit-convert", "--model", npz, "--variant", "Ti/16",
        "--num_classes", "5", "--image_size", "48x32", "--output",
        str(output),
    ])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "resized from grid 2x2 to 3x2" in printed
    loaded = keras.models.load_model(output)
    expected = dict(arrays)
    expected[POSEMB] = zoom_posemb(arrays[POSEMB], (2, 2), (3, 2), 1)
    x = images((48, 32))
    assert_close(loaded(x), ref.forward(expected, x))
    assert sorted(os.listdir(output.parent)) == ["ti16.keras"]

    # A checkpoint that does not fit: exit status 1, a message, no file.
    rc = convert.main([
        "keras-vit-convert", "--model", npz, "--variant", "Ti/16",
        "--num_classes", "5", "--image_size", "32", "--pooling", "gap",
        "--output", str(tmp_path / "gap.keras"),
    ])
    assert rc == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "another architecture" in err and "unexpected in file: cls" in err
    assert not (tmp_path / "gap.keras").exists()


def test_convert_gives_a_training_run_or_keras_file_a_new_head(tmp_path):
    """keras-vit-convert --num_classes on a training workdir and on a
    `.keras` file, typed as a user types it: the same network under a new
    zero head (0: the features), every other array as the source's, and
    the report of what was dropped; --pooling is refused by name."""
    run = os.path.join(os.path.dirname(__file__), "fixtures", "earlier",
                       "workdir")
    source = loader.load_model(run)
    x = images(tuple(source.input_shape[1:3]))
    features = features_model(source)(x)
    kept = str(tmp_path / "kept.keras")
    source.save(kept)
    for model, width in ((run, 3), (kept, 0)):
        out = tmp_path / f"{width}.keras"
        result = console.run("convert", [f"--model={model}",
                                         f"--num_classes={width}",
                                         f"--output={out}"])
        assert result.returncode == 0, result.stderr[-2000:]
        assert "Dropped head/kernel" in result.stdout, result.stdout
        assert ("the head was initialised anew" in result.stdout.lower()
                ) == bool(width), result.stdout
        loaded = keras.models.load_model(out)
        assert loaded.output_shape[-1] == (width or features.shape[-1])
        assert_close(features_model(loaded)(x), features)
        if width:
            assert not np.asarray(loaded.get_layer("head").kernel).any()
            assert "class names" not in result.stderr  # a new head's
    result = console.run("convert", [f"--model={run}", "--pooling=gap",
                                     f"--output={tmp_path / 'g.keras'}"])
    assert result.stderr.strip().splitlines()[-1] == (
        f"keras-vit-convert: error: {run}: a saved model keeps the pooling "
        "it was trained with; --pooling goes with an .npz.")
    assert not (tmp_path / "g.keras").exists()


@covers("output_made_during_convert")
def test_convert_keeps_a_file_made_while_the_model_loads(
        tmp_path, capsys, monkeypatch):
    """Without --overwrite, a .keras file that appears at --output during
    the load (after the first check) is kept and named, not replaced."""
    npz = save(tmp_path / "Ti_16.npz", random_arrays(
        create_model("Ti/16", num_classes=5, image_size=32)))
    output = tmp_path / "ti16.keras"
    load_report = convert.loader.load_report

    def racing(*args, **kwargs):
        output.write_bytes(b"the user's")
        return load_report(*args, **kwargs)

    monkeypatch.setattr(convert.loader, "load_report", racing)
    argv = ["keras-vit-convert", "--model", npz, "--variant", "Ti/16",
            "--output", str(output)]
    assert convert.main(argv) == 1
    err = capsys.readouterr().err.strip()
    check_says("output_made_during_convert", err)
    assert err.endswith(
        f"{output} already exists: pass --overwrite to replace it, or "
        "choose another --output.")
    assert output.read_bytes() == b"the user's"
    assert sorted(os.listdir(tmp_path)) == ["Ti_16.npz", "ti16.keras"]
    assert convert.main(argv + ["--overwrite"]) == 0
    assert keras.models.load_model(output).count_params() > 0


def test_archive_member_names_are_official(tmp_path):
    model = tiny(num_layers=1)
    out = tmp_path / "m.npz"
    checkpoint.save_npz(model, out)
    names = zipfile.ZipFile(out).namelist()
    assert "Transformer/encoderblock_0/MultiHeadDotProductAttention_1/" \
        "query/kernel.npy" in names
    assert "Transformer/encoder_norm/scale.npy" in names
    assert "cls.npy" in names and "head/kernel.npy" in names


def test_remote_paths_go_through_gfile():
    # TensorFlow's in-memory file system stands in for gs:// (no network).
    tf = pytest.importorskip("tensorflow")
    root = "ram://keras_vit_checkpoint_test"
    model = tiny(num_layers=1)
    arrays = random_arrays(model)
    checkpoint_io.write_npz(f"{root}/in.npz", arrays)
    report = checkpoint.load_npz(model, f"{root}/in.npz")
    assert report.ok and report.path == f"{root}/in.npz"
    checkpoint.save_npz(model, f"{root}/out.npz")
    back = checkpoint_io.read_npz(f"{root}/out.npz")
    assert list(back) == list(arrays)
    for key in arrays:
        np.testing.assert_array_equal(back[key], arrays[key])
    assert sorted(tf.io.gfile.listdir(root)) == ["in.npz", "out.npz"]


def test_convert_argument_checks(tmp_path, capsys):
    assert cli_flags.parse_image_size("384") == 384
    assert cli_flags.parse_image_size("384x512") == (384, 512)
    assert cli_flags.parse_image_size("384,512") == (384, 512)
    with pytest.raises(UsageError, match="HEIGHTxWIDTH"):
        cli_flags.parse_image_size("big")
    npz = str(tmp_path / "model.npz")
    checkpoint.save_npz(tiny(num_layers=1), npz)
    rc = convert.main([
        "keras-vit-convert", "--model", npz, "--image_size", "big",
        "--output", str(tmp_path / "model.keras"),
    ])
    assert rc == 1 and "HEIGHTxWIDTH" in capsys.readouterr().err
    rc = convert.main([
        "keras-vit-convert", "--model", npz, "--output",
        str(tmp_path / "model.h5"),
    ])
    assert rc == 1 and "must end with .keras" in capsys.readouterr().err
    rc = convert.main([
        "keras-vit-convert", "--model", str(tmp_path / "none.npz"),
        "--variant", "Ti/16", "--num_classes", "5", "--image_size", "32",
        "--output", str(tmp_path / "model.keras"),
    ])
    assert rc == 1 and "no such file or folder" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["model.npz"]


def test_a_new_head_drops_the_pre_logits_unless_kept(tmp_path):
    """keras-vit-convert (and keras_vit.load_model) of an .npz with
    pre-logits: its own head keeps them (the head reads them); another
    --num_classes drops them with the head, as for transfer in the paper;
    --representation_size keeps them under the new head. A features model
    (0) keeps them."""
    arrays = random_arrays(tiny(num_classes=5, representation_size=24))
    npz = save(tmp_path / "pre.npz", arrays)
    x = images(32)
    body = {k: v for k, v in arrays.items()
            if not k.startswith(("head", "pre"))}

    def converted(*flags):
        out = str(tmp_path / f"m{len(os.listdir(tmp_path))}.keras")
        result = console.run("convert", [f"--model={npz}", f"--output={out}",
                                         *flags])
        assert result.returncode == 0, result.stderr[-2000:]
        return keras.saving.load_model(out), result.stdout

    own, _ = converted()
    assert own.architecture.representation_size == 24
    assert_close(own(x), ref.forward(arrays, x))
    new, said = converted("--num_classes=7")
    assert new.architecture.representation_size is None
    assert ("pre_logits/kernel (32, 24): dropped with the head, as for "
            "transfer in the paper") in said, said
    assert_close(keras_features(new, x), ref.features(body, x))
    kept, _ = converted("--num_classes=7", "--representation_size=24")
    assert kept.architecture.representation_size == 24
    assert_close(keras_features(kept, x), ref.features(arrays, x))
    assert loader.load_model(npz, num_classes=7).architecture \
        .representation_size is None
    assert loader.load_model(npz, num_classes=0).architecture \
        .representation_size == 24
    # A backbone saved with its pre-logits and no head keeps them.
    backbone = save(tmp_path / "backbone.npz", random_arrays(
        tiny(num_classes=0, representation_size=24)))
    assert loader.load_model(backbone, num_classes=7).architecture \
        .representation_size == 24
    # A model built without them for the file's classes: the fix is named
    # (whether the head's input is as wide as the encoder's or not).
    for width in (24, 32):
        arrays = random_arrays(tiny(num_classes=5, representation_size=width))
        npz = save(tmp_path / f"pre{width}.npz", arrays)
        with pytest.raises(ValueError, match="The checkpoint's head reads "
                           "its pre-logits layer, which the model lacks: "
                           f"build it with `representation_size`={width}."):
            checkpoint.load_npz(tiny(num_classes=5), npz)


def test_a_non_square_npz_takes_its_grid_in_every_command(tmp_path):
    """An .npz whose position embedding is not square: keras-vit-predict
    and keras-vit-export take --posemb_grid as keras-vit-convert does
    (their refusal names it), keras_vit.load_model takes `posemb_grid`;
    a size the patches do not divide names --image_size alone where the
    command has no --config."""
    npz = str(tmp_path / "wide.npz")
    checkpoint.save_npz(tiny(num_classes=3, image_size=(32, 48),
                             num_layers=1), npz)
    image = str(tmp_path / "wide.png")
    keras.utils.save_img(image, np.full((32, 48, 3), 90, np.uint8))
    for name, args, also in (
            ("predict", [image], ""),
            ("export", [f"--export_dir={tmp_path / 'refused'}"],
             ", or the --image_size=HxW it was trained at")):
        refused = console.run(name, [f"--model={npz}", *args])
        assert refused.returncode == 1
        assert refused.stderr.strip().splitlines()[-1].endswith(
            "pass the grid it was trained with as --posemb_grid=ROWSxCOLS"
            f"{also}."), refused.stderr[-2000:]
    # keras-vit-train records its starting model in its config, with no
    # grid: the way is a .keras file converted with it.
    refused = console.run("train", [
        *console.TINY_DIGITS, f"--model={npz}",
        f"--workdir={tmp_path / 'run'}"])
    assert refused.returncode == 1
    assert ("convert it first with the grid it was trained with "
            "(keras-vit-convert --posemb_grid=ROWSxCOLS) and start from the "
            ".keras file.") in refused.stderr, refused.stderr[-2000:]
    done = console.run("predict", [f"--model={npz}", "--posemb_grid=4x6",
                                   image])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{image}: ")
    exports = str(tmp_path / "exports")
    bad = console.run("export", [f"--model={npz}", "--posemb_grid=4x6",
                                 f"--export_dir={exports}",
                                 "--image_size=50"])
    assert bad.stderr.strip().splitlines()[-1] == (
        "keras-vit-export: error: --image_size height 50 is not divisible "
        "by patch size 8 (the stride 8): use a multiple of 8, e.g. 48 or 56.")
    assert loader.load_model(npz, posemb_grid=(4, 6)).architecture \
        .image_size == (32, 48)
    # A model that records its own architecture takes no grid.
    keras_file = str(tmp_path / "wide.keras")
    tiny(num_classes=3, num_layers=1).save(keras_file)
    refused = console.run("predict", [f"--model={keras_file}",
                                      "--posemb_grid=4x6", image])
    assert refused.stderr.strip().splitlines()[-1] == (
        "keras-vit-predict: error: --posemb_grid goes with an .npz model "
        f"only; {keras_file} is a .keras file, which records its own "
        "architecture.")


def test_convert_names_its_flags_and_refuses_flags_it_would_ignore(
        tmp_path, capsys):
    """keras-vit-convert's errors name its flags, not the library's
    arguments (strict=False, keep_pre_logits=True): a pre-logits width for
    an .npz that has none says to leave out --representation_size, or
    --non_strict. --non_strict with a .keras file or a workdir and
    --no_ema with an .npz or hub model (nothing they would change) are
    refused by name, as --variant on a workdir is; nothing is written."""
    npz = str(tmp_path / "model.npz")
    checkpoint.save_npz(tiny(num_layers=1), npz)
    tiny(num_layers=1).save(str(tmp_path / "model.keras"))
    run = tmp_path / "run"  # a training run's workdir, to the resolver
    run.mkdir()
    (run / "config.json").write_text("{}")
    hub = os.path.join(os.path.dirname(__file__), "fixtures", "hub",
                       "hf_vit_classifier")
    out = str(tmp_path / "out.keras")

    def error(*args):
        assert convert.main(["keras-vit-convert", f"--output={out}",
                             *args]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1, err
        assert err[0].startswith("keras-vit-convert: error: "), err
        return err[0]

    for head in ([], ["--num_classes=3"]):
        line = error(f"--model={npz}", "--representation_size=16", *head)
        assert ("The model has a pre_logits layer but the checkpoint has "
                "none: leave out --representation_size.") in line, line
        assert line.endswith("Pass --non_strict to load what fits and get "
                             "a report."), line
        assert "strict=False" not in line and "keep_pre_logits" not in line
        assert "`" not in line
    for model, what in ((tmp_path / "model.keras", "a .keras file"),
                        (run, "a training run")):
        assert error(f"--model={model}", "--non_strict") == (
            "keras-vit-convert: error: --non_strict goes with an .npz or "
            "hub model, or a new --num_classes or --representation_size; "
            f"{model} is {what}, which holds its model whole (its arrays "
            "fit it): leave --non_strict out.")
    for model, what in ((npz, "an .npz file"),
                        (hub, "a Hugging Face, timm or keras-hub model")):
        assert error(f"--model={model}", "--no_ema") == (
            "keras-vit-convert: error: --no_ema goes with a training "
            f"workdir only; {model} is {what}, which holds one set of "
            "weights: leave --no_ema out.")
    assert not os.path.exists(out)


@pytest.mark.parametrize("layout", ["official", "training"])
def test_members_the_model_has_no_place_for_are_never_inflated(
        tmp_path, monkeypatch, capsys, layout):
    """keras-vit-convert on an .npz with a 48 MiB member no layer takes
    (within the archive bound: refused by name, as strict loading does),
    and on a training checkpoint whose optimizer state is as big as the
    model (converted): the unused members are never inflated; the arrays
    the model loads are, each once, and give the file's model."""
    model = tiny(num_layers=1)
    arrays = random_arrays(model)
    if layout == "official":
        members = dict(arrays, extra=np.zeros(12 << 20, np.float32))
        unused = {"extra"}
    else:
        members = {f"opt/target/{k}": v for k, v in arrays.items()}
        members.update({f"opt/state/{k}": v for k, v in arrays.items()})
        unused = {f"opt/state/{k}" for k in arrays}
    npz = str(tmp_path / "model.npz")
    np.savez_compressed(npz, **members)
    inflated = []
    real = checkpoint_io._inflate

    def spy(path, opener, member):
        inflated.append(member.name[:-4])
        return real(path, opener, member)

    monkeypatch.setattr(checkpoint_io, "_inflate", spy)
    output = tmp_path / "model.keras"
    rc = convert.main([
        "keras-vit-convert", "--model", npz, "--num_classes", "5",
        "--image_size", "32", "--output", str(output)])
    assert not unused & set(inflated), sorted(unused & set(inflated))
    if layout == "official":
        assert rc == 1
        assert "unexpected in file: extra (12582912,)" in (
            capsys.readouterr().err)
        return
    assert rc == 0, capsys.readouterr().err
    assert sorted(inflated) == sorted(
        k for k in members if k not in unused)
    x = images(32)
    assert_close(keras.models.load_model(output)(x), ref.forward(arrays, x))


def _keras_file_edited(path, model, config_change=None, weights_change=None):
    """`model` saved as .keras at `path`, then its config.json changed by
    `config_change` (a dict edited in place) or its weights by
    `weights_change` (an open h5py file)."""
    import h5py

    model.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    if config_change:
        config = json.loads(members["config.json"])
        config_change(config["config"]["architecture"])
        members["config.json"] = json.dumps(config).encode()
    if weights_change:
        buffer = io.BytesIO(members["model.weights.h5"])
        with h5py.File(buffer, "a") as f:
            weights_change(f)
        members["model.weights.h5"] = buffer.getvalue()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return str(path)


def _int8_kernel(f):
    names = []
    f.visititems(lambda name, item: names.append(name)
                 if name.endswith("vars/0") and item.ndim == 2 else None)
    kernel = f[names[0]][()]
    del f[names[0]]
    f[names[0]] = np.round(kernel * 50).astype(np.int8)


def test_a_keras_file_whose_config_and_weights_disagree_is_refused(
        tmp_path):
    """Keras loads the arrays its config places and leaves the others out
    without a word: a .keras file whose config.json says a block fewer,
    or fixed position embeddings where the weights hold a learned table,
    is refused, naming the first array left over; one whose weights were
    cast to integers (Keras casts them back) is refused by its dtype, as
    the other formats refuse it. The file as saved converts."""
    model = create_model(None, num_classes=3, image_size=16, patch_size=4,
                         hidden_size=16, num_layers=2, num_heads=2,
                         mlp_dim=32)
    cases = [
        (_keras_file_edited(tmp_path / "fewer.keras", model,
                            lambda a: a.update(num_layers=1)),
         r"its weights hold layers/\S+ \(\d+,(\s\d+)*\), which no weight of "
         "the model its config.json describes takes"),
        (_keras_file_edited(tmp_path / "sincos.keras", model,
                            lambda a: a.update(posemb="sincos2d")),
         r"its weights hold layers/\S*position\S* \(1, 17, 16\), which no "
         "weight"),
        (_keras_file_edited(tmp_path / "int8.keras", model,
                            weights_change=_int8_kernel),
         r"layers/\S+ holds integers, where the model's weight of its "
         "shape is a floating-point number: the weights were cast or "
         "altered. Use the file as it was saved."),
    ]
    for path, says in cases:
        result = console.run("convert", [f"--model={path}",
                                         f"--output={path}.out.keras"])
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1, result.stderr
        assert lines[-1].startswith(f"keras-vit-convert: error: {path}: "), (
            lines[-1])
        assert re.search(says, lines[-1]), lines[-1]
        assert "Traceback" not in result.stderr
        assert not os.path.exists(f"{path}.out.keras")
    saved = str(tmp_path / "saved.keras")
    model.save(saved)
    result = console.run("convert", [f"--model={saved}",
                                     f"--output={saved}.out.keras"])
    assert result.returncode == 0, result.stderr


def test_a_workdir_checkpoint_of_no_training_run_is_refused(tmp_path):
    """A checkpoint in a workdir's checkpoints/ that holds the model alone
    (tf.train.Checkpoint(model=model), not written by a training run)
    has no list of weights to check against config.json: one of more
    layers than it holds would load with the others random, one of other
    sizes fail inside TensorFlow. It is refused by name; a run's own
    checkpoint loads."""
    import tensorflow as tf

    from keras_vit import build
    from keras_vit.storage import workdir as workdir_lib
    from tests import tiny

    names = [str(i) for i in range(10)]
    for label, change in (("more_layers", {"model.num_layers": 2}),
                          ("wider", {"model.hidden_size": 64})):
        workdir = str(tmp_path / label)
        model, _ = build.build_run(tiny.digits_config(), 10)
        workdir_lib.write_json(os.path.join(workdir, workdir_lib.CONFIG),
                               tiny.digits_config(change).to_dict())
        workdir_lib.write_class_names(workdir, names)
        tf.train.CheckpointManager(
            tf.train.Checkpoint(model=model),
            os.path.join(workdir, workdir_lib.CHECKPOINTS), 1).save()
        out = tmp_path / f"{label}.keras"
        result = console.run("convert", [f"--model={workdir}",
                                         f"--output={out}"])
        assert result.returncode == 1, result.stderr
        assert "Traceback" not in result.stderr
        assert result.stderr.strip().splitlines()[-1].endswith(
            "holds no training run's list of weights (the optimizer's, "
            "which every checkpoint keras-vit-train writes has), so which "
            "model it holds cannot be checked against the workdir's "
            "config.json: refused (the checkpoints read are those training "
            "runs write). Save the model it holds as a .keras file "
            "(model.save) and use that file."), (
                result.stderr)
        assert not out.exists()
    workdir = str(tmp_path / "run")
    tiny.write_run(tiny.digits_config(), workdir, names)
    result = console.run("convert", [f"--model={workdir}",
                                     f"--output={tmp_path / 'run.keras'}"])
    assert result.returncode == 0, result.stderr


def test_a_workdir_named_with_glob_characters_fingerprints_its_files(
        tmp_path):
    """`loader.model_files` of a workdir whose path holds [ ]: its newest
    checkpoint's files (the name is no pattern), as in any workdir."""
    from tests import tiny

    names = [str(i) for i in range(10)]
    for name in ("plain", "run [1]"):
        tiny.write_run(tiny.digits_config(), str(tmp_path / name), names)
    plain, odd = (loader.model_files(loader.resolve(str(tmp_path / name)))
                  for name in ("plain", "run [1]"))
    assert [f[0] for f in plain] == [f[0] for f in odd]
    assert {f[0].split(".")[-1] for f in odd} >= {"index"}
