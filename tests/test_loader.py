"""`keras_vit.checkpoint.loader`: one model from every kind of source.

The same weights as a training run's workdir, a `.keras` file and an
official-layout `.npz` give the same model, at the trained resolution and
at another one; training initialises from each alike.
"""

import dataclasses
import glob
import json
import logging
import os
import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import build, create_model, features_model
from keras_vit import config as config_lib
from keras_vit.checkpoint import loader, weights
from keras_vit.errors import UsageError
from keras_vit.storage import checkpoint_graph
from keras_vit.storage import workdir as wd
from keras_vit.training import train_lib
from tests import tiny

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZE = 32  # the run's resolution: a 4 x 4 grid of 8-pixel patches
RESIZED = 48  # a 6 x 6 grid


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """A two-step digits run (EMA on) and its EMA weights as .keras and
    .npz files. The run sees a data source without class names."""
    root = tmp_path_factory.mktemp("sources")
    run = str(root / "run")
    config = tiny.digits_config(
        total_steps=2, steps_per_loop=1, log_every_steps=1,
        eval_every_steps=0, checkpoint_every_steps=0, ema_decay=0.5,
        **{"optimizer.warmup_steps": 1},
    )
    info = train_lib.sources.dataset_info

    def unnamed(config):
        return dataclasses.replace(info(config), class_names=None)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(train_lib.sources, "dataset_info", unnamed)
        train_lib.train_and_evaluate(config, run)
    # Numbers stand in for the names, so the run records its class count.
    assert wd.read_class_names(run) == [str(i) for i in range(10)]
    model = wd.restore_model(run)
    keras_path = str(root / "model.keras")
    model.save(keras_path)
    npz_path = str(root / "model.npz")
    weights.save_npz(model, npz_path)
    return {
        "workdir": loader.WorkdirSource(run),
        "keras_model": loader.KerasSource(keras_path),
        "npz": loader.NpzSource(npz_path),
    }


def _images(size, n=3):
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (n, size, size, 3)).astype("float32")


@pytest.mark.parametrize("image_size", [None, RESIZED])
def test_every_source_gives_the_same_model(sources, image_size, caplog):
    size = image_size or SIZE
    x = _images(size)
    outputs = {}
    for kind, source in sources.items():
        # An .npz records no resolution: name the run's.
        wanted = image_size or (SIZE if kind == "npz" else None)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            model = loader.load_model(source, wanted)
        assert tuple(model.input_shape[1:3]) == (size, size), kind
        # A saved model built at another size says so (an .npz's load
        # report does).
        said = (f"{source.path} was saved for {SIZE}x{SIZE} images; built "
                f"for {size}x{size}, its position embeddings resized")
        assert (said in caplog.text) == (
            kind != "npz" and size != SIZE), (kind, caplog.text)
        assert model.output_shape[-1] == 10, kind
        outputs[kind] = np.asarray(model(x))
    for kind in ("keras_model", "npz"):
        np.testing.assert_allclose(
            outputs[kind], outputs["workdir"], rtol=1e-5, atol=1e-6,
            err_msg=kind,
        )


def test_workdir_ema_or_raw_weights(sources):
    x = _images(SIZE)
    run = sources["workdir"].path
    ema = loader.load_model(loader.WorkdirSource(run))
    raw = loader.load_model(loader.WorkdirSource(run, use_ema=False))
    assert not np.allclose(np.asarray(ema(x)), np.asarray(raw(x)))


def test_initialise_from_every_source_alike(sources):
    loaded = {}
    for kind, source in sources.items():
        keras.utils.set_random_seed(1)
        model = create_model(
            None, num_classes=10, image_size=RESIZED, patch_size=8,
            hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64,
        )
        report = loader.initialise(model, source)
        assert report.ok and not report.head_initialized, kind
        assert report.posemb_resized == ((4, 4), (6, 6)), kind
        loaded[kind] = weights.model_arrays(model)
    for kind in ("keras_model", "npz"):
        for key, value in loaded["workdir"].items():
            np.testing.assert_allclose(
                loaded[kind][key], value, rtol=1e-6, atol=1e-7,
                err_msg=f"{kind}: {key}",
            )


def test_npz_build_options_and_report(sources):
    source = sources["npz"]
    model, report = loader.load_report(source, SIZE, num_classes=3)
    assert model.output_shape[-1] == 3 and report.head_initialized
    assert not np.asarray(model.get_layer("head").kernel).any()
    features = loader.load_model(source, SIZE, num_classes=0)
    assert features.output_shape[-1] == 32
    with pytest.raises(ValueError, match="not a B/16 checkpoint"):
        loader.load_model(loader.NpzSource(source.path, variant="B/16"))
    keras_path = sources["keras_model"].path
    with pytest.raises(ValueError, match="`posemb_grid` goes with an .npz "
                       "model only"):
        loader.resolve(keras_path, posemb_grid=(2, 3))
    # Every source kind from its string, through the one resolver.
    for kind, source in sources.items():
        assert loader.resolve(source.path) == source, kind


@pytest.mark.parametrize("kind", ["workdir", "keras_model"])
def test_saved_models_take_a_new_head_as_an_npz_does(sources, kind):
    """A workdir or `.keras` file with `num_classes`: the same network
    under a new zero head (its own width keeps its head; 0 gives the
    features), at any resolution, as the .npz of the same weights."""
    source, x = sources[kind], _images(SIZE)
    own = loader.load_model(source)
    features = np.asarray(features_model(own)(x))
    model, report = loader.load_report(source, num_classes=3)
    assert model.output_shape == (None, 3) and report.head_initialized
    assert not np.asarray(model.get_layer("head").kernel).any()
    np.testing.assert_array_equal(features_model(model)(x), features)
    npz_model = loader.load_model(sources["npz"], SIZE, num_classes=3)
    np.testing.assert_allclose(model(x), npz_model(x), atol=1e-5)
    kept, report = loader.load_report(source, num_classes=10)
    assert report.ok and not report.head_initialized
    np.testing.assert_array_equal(kept(x), own(x))
    bare = loader.load_model(source, num_classes=0)
    assert bare.output_shape == (None, own.architecture.hidden_size)
    np.testing.assert_array_equal(bare(x), features)
    resized = loader.load_model(source, RESIZED, num_classes=3)
    np.testing.assert_allclose(
        resized(_images(RESIZED)),
        loader.load_model(sources["npz"], RESIZED, num_classes=3)(
            _images(RESIZED)), atol=1e-5)
    with pytest.raises(UsageError, match="keeps the pooling it was "
                       "trained with; `pooling` goes with an .npz"):
        loader.load_model(source, pooling="gap")
    with pytest.raises(UsageError, match="has a pre_logits layer but the "
                       "checkpoint has none"):
        loader.load_model(source, representation_size=16)


def test_workdir_without_class_count_names_the_fix(sources, tmp_path):
    run = str(tmp_path / "old_run")
    shutil.copytree(sources["workdir"].path, run)
    os.remove(os.path.join(run, wd.LABELS))  # as runs once left it
    with pytest.raises(ValueError, match="config.model.num_classes=N"):
        loader.load_model(loader.WorkdirSource(run))
    config_path = os.path.join(run, wd.CONFIG)
    config = json.load(open(config_path))
    config["model"]["num_classes"] = 10
    wd.write_json(config_path, config)
    assert loader.load_model(loader.WorkdirSource(run)).output_shape[-1] == 10


def test_a_workdir_loads_under_another_backend_by_the_checkpoints_graph(
        sources, monkeypatch):
    """Under a backend other than TensorFlow's, a run's checkpoint is read
    by its object graph (`checkpoint_graph`), not `tf.train.Checkpoint`:
    the same EMA weights and the same predictions as TensorFlow's restore
    (under JAX itself: tests/test_quiet.py's JAX test)."""
    source = sources["workdir"]
    expected = loader.load_model(source)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    model = loader.load_model(source)
    for mine, theirs in zip(model.weights, expected.weights, strict=True):
        assert mine.path == theirs.path
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    x = _images(SIZE)
    np.testing.assert_array_equal(model.predict(x, verbose=0),
                                  expected.predict(x, verbose=0))


def _restored_both_ways(run):
    """A run's latest checkpoint read by tf.train.Checkpoint and by
    `checkpoint_graph.read_into`: (model, optimizer) pairs."""
    config = wd.read_config(run)
    path = tf.train.latest_checkpoint(os.path.join(run, wd.CHECKPOINTS))
    pairs = []
    for _ in range(2):
        model, optimizer = build.build_run(
            config, wd.num_classes(config.model, run))
        optimizer.build(model.trainable_variables)
        pairs.append((model, optimizer))
    tf.train.Checkpoint(model=pairs[0][0], optimizer=pairs[0][1]).read(
        path).expect_partial()
    checkpoint_graph.read_into(path, *pairs[1])
    return path, pairs


@pytest.mark.parametrize("kind", ["this version, EMA", "an earlier run"])
def test_the_graph_reader_restores_what_tensorflow_restores(sources, kind):
    """Every variable TensorFlow's restore sets, model and optimizer (step,
    EMA averages, moments), the graph reader sets to the same value."""
    run = (sources["workdir"].path if kind.endswith("EMA")
           else os.path.join(ROOT, "tests", "fixtures", "earlier", "workdir"))
    _, ((model, optimizer), (model2, optimizer2)) = _restored_both_ways(run)
    assert int(optimizer2.iterations.numpy()) == 2
    for theirs, mine in zip(model.weights + optimizer.variables,
                            model2.weights + optimizer2.variables,
                            strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


def test_the_graph_reader_refuses_what_a_run_does_not_save(
        sources, tmp_path):
    """A model or optimizer holding a variable no run of the model saves,
    or an optimizer of another layout, is refused by name rather than
    loaded in part; the run's own bookkeeping beside them (a multi-worker
    run's checkpointed_runs) is left alone, as TensorFlow's restore does."""
    run = sources["workdir"].path
    path, ((model, optimizer), _) = _restored_both_ways(run)
    bookkeeping = tf.train.Checkpoint(
        model=model, optimizer=optimizer,
        checkpointed_runs=tf.Variable(3, dtype=tf.int64))
    checkpoint_graph.read_into(bookkeeping.write(str(tmp_path / "kept")),
                               model, optimizer)
    holder = tf.Module()
    holder.probe, holder.net = tf.Variable(1.0), model
    extra = tf.train.Checkpoint(model=holder, optimizer=optimizer)
    written = extra.write(str(tmp_path / "extra"))
    with pytest.raises(UsageError, match=(
            r"holds 1 variable\(s\) no training run of this model saves "
            r"\(e.g. model/probe/.ATTRIBUTES/VARIABLE_VALUE\)")):
        checkpoint_graph.read_into(written, model, optimizer)
    config = wd.read_config(run)
    plain, plain_optimizer = build.build_run(
        config_lib.replace(config, trainer={"ema_decay": 0.0}),
        wd.num_classes(config.model, run))
    plain_optimizer.build(plain.trainable_variables)
    with pytest.raises(UsageError, match=(
            r"optimizer/_variables lists \d+ variables, the model built "
            r"from its config.json \d+")):
        checkpoint_graph.read_into(path, plain, plain_optimizer)


def _rewritten(path, out, graph=None, **values):
    """The checkpoint `path` written again to `out` with its own bytes
    (TensorFlow's SaveV2), the object graph or some values replaced."""
    reader = tf.train.load_checkpoint(path)
    tensors = {key: reader.get_tensor(key)  # (not the input iterator's)
               for key, dtype in reader.get_variable_to_dtype_map().items()
               if dtype != tf.variant}
    if graph is not None:
        tensors[checkpoint_graph.GRAPH_KEY] = graph
    tensors.update(values)
    names = sorted(tensors)
    tf.raw_ops.SaveV2(prefix=out, tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    return out


def test_the_graph_reader_checks_a_file_before_it_reads_values(
        sources, tmp_path):
    """A garbled object graph or one naming a node it lacks is damage (the
    loader then tries the checkpoint before it); a value of another dtype
    than its variable's is refused by name before it is read; an integer
    is narrowed only where it fits."""
    path, ((model, optimizer), _) = _restored_both_ways(
        sources["workdir"].path)
    garbled = _rewritten(path, str(tmp_path / "garbled"), graph=b"\xff" * 9)
    with pytest.raises(tf.errors.DataLossError, match="its object graph"):
        checkpoint_graph.read_into(garbled, model, optimizer)
    graph = checkpoint_graph._graph(tf.train.load_checkpoint(path))
    graph.nodes[0].children[0].node_id = len(graph.nodes) + 5
    outside = _rewritten(path, str(tmp_path / "outside"),
                         graph=graph.SerializeToString())
    with pytest.raises(tf.errors.DataLossError, match=(
            rf"names a node outside its {len(graph.nodes)} nodes")):
        checkpoint_graph.read_into(outside, model, optimizer)
    step = "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE"
    retyped = _rewritten(path, str(tmp_path / "retyped"),
                         **{step: np.bytes_(b"two")})
    with pytest.raises(UsageError, match=(
            rf"{step} holds string \(\), the model's .* integer \(\)")):
        checkpoint_graph.read_into(retyped, model, optimizer)
    # JAX keeps the step as int32 where TensorFlow wrote int64: cast where
    # it fits, refused where it does not.
    wide = _rewritten(path, str(tmp_path / "wide"), **{step: np.int64(2**40)})
    narrow = keras.Variable(0, dtype="int32")
    for written, fits in ((path, True), (wide, False)):
        reader = tf.train.load_checkpoint(written)
        if fits:
            assert checkpoint_graph._value(reader, step, narrow, path) == 2
        else:
            with pytest.raises(UsageError, match="values beyond the model's"):
                checkpoint_graph._value(reader, step, narrow, written)


@pytest.mark.parametrize("damage", ["a flipped byte", "no data file",
                                    "a garbled graph"])
def test_a_damaged_checkpoint_under_another_backend_is_named_in_one_line(
        sources, tmp_path, monkeypatch, damage):
    """What TensorFlow's restore takes as damage (the loader then tries the
    checkpoint before it, and names each it could not use), the graph
    reader does too: a checksum mismatch or a missing data shard, which
    TensorFlow's reader raises as a bare OpError, and a garbled graph."""
    run = str(tmp_path / "run")
    shutil.copytree(sources["workdir"].path, run)
    path = tf.train.latest_checkpoint(os.path.join(run, wd.CHECKPOINTS))
    data = glob.glob(path + ".data-*")[0]
    if damage == "a flipped byte":  # in the patch embedding's kernel
        kernel = tf.train.load_checkpoint(path).get_tensor(
            "optimizer/_trainable_variables/0/.ATTRIBUTES/VARIABLE_VALUE")
        raw = bytearray(open(data, "rb").read())
        raw[raw.index(kernel.tobytes()) + 5] ^= 0xFF
        open(data, "wb").write(bytes(raw))
    elif damage == "no data file":
        os.remove(data)
    else:
        _rewritten(path, path, graph=b"\xff" * 9)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(UsageError) as info:
        loader.load_model(loader.WorkdirSource(run))
    line = str(info.value)
    assert "\n" not in line
    assert line.startswith(f"No checkpoint of {run} can be used: "
                           f"{os.path.basename(path)} ("), line
    if damage == "a flipped byte":  # found reading the value itself
        assert "(its data (optimizer/_trainable_variables/0/" in line, line


def test_the_resolver_refuses_in_one_line_saying_why(tmp_path):
    def refusal(text, **kwargs):
        with pytest.raises(UsageError) as info:
            loader.resolve(text, **kwargs)
        message = str(info.value)
        assert "\n" not in message
        return message

    assert "no such file or folder, and no released model's name" in (
        refusal(str(tmp_path / "missing.npz")))
    (tmp_path / "empty").mkdir()
    assert "is a folder of no model kind" in refusal(str(tmp_path / "empty"))
    # The folder keras-vit-export wrote into (--export_dir): its model,
    # one level down, is named.
    (tmp_path / "exports" / "vit" / "1").mkdir(parents=True)
    (tmp_path / "exports" / "vit" / "1" / "saved_model.pb").write_bytes(b"")
    assert (f"It holds the exported model {tmp_path / 'exports' / 'vit'}, "
            "which keras-vit-predict reads (no other command: they take the "
            "model it was exported from).") in refusal(
                str(tmp_path / "exports"))
    # A --format=litert export folder: its .tflite files.
    (tmp_path / "edge").mkdir()
    (tmp_path / "edge" / "vit.tflite").write_bytes(b"")
    (tmp_path / "edge" / "vit.preprocessing.json").write_text("{}")
    assert (f"It holds the exported model {tmp_path / 'edge' / 'vit.tflite'}"
            ", which keras-vit-predict reads") in refusal(
                str(tmp_path / "edge"))
    # Many: the first three named, the others counted.
    for name in ("b", "c", "d", "e"):
        (tmp_path / "edge" / f"{name}.tflite").write_bytes(b"")
    edge = tmp_path / "edge"
    assert (f"It holds the exported model {edge / 'b.tflite'} (and "
            f"{edge / 'c.tflite'}, {edge / 'd.tflite'} and 2 more), which "
            "keras-vit-predict reads") in refusal(str(edge))
    # A file renamed on download is named by what it holds, before the
    # reader its name picks refuses it for another reason.
    vit = create_model(None, num_classes=3, image_size=16, patch_size=8,
                       hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16)
    vit.save(str(tmp_path / "vit.keras"))
    weights.save_npz(vit, str(tmp_path / "vit.npz"))
    for name, source, says in (
            ("keras_as.npz", "vit.keras", "a Keras model (a .keras file)"),
            ("keras_bare", "vit.keras", "rename it to end in .keras"),
            ("npz_as.keras", "vit.npz", "rename it to end in .npz"),
            ("npz_as.bin", "vit.npz", "holds numpy arrays (an .npz)")):
        shutil.copy(tmp_path / source, tmp_path / name)
        assert says in refusal(str(tmp_path / name)), name
    for name in ("vit.keras", "vit.npz"):  # named as they are: taken
        assert loader.load_model(str(tmp_path / name)).count_params() \
            == vit.count_params()
    (tmp_path / "notes.txt").write_text("x")
    assert "is a file of no model kind" in refusal(str(tmp_path / "notes.txt"))
    # A config.json without weights: a timm model's, or no run's at all
    # (empty; other fields), is not taken for a run without checkpoints.
    for name, text, says in (
            ("timm", '{"architecture": "vit_tiny_patch16_224"}',
             "holds a timm model's config.json but not its weights"),
            ("blank", "", "config.json is not valid JSON (Expecting value"
             ": line 1 column 1 (char 0)), and"),
            ("list", "[]", "config.json is not a JSON object, and"),
            ("other", '{"epochs": 3}', "is no training run")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(text)
        assert says in refusal(str(tmp_path / name))
    # An .npz of other arrays is not taken for a ViT of unknown sizes.
    np.savez(tmp_path / "other.npz", weights=np.zeros(3), bias=np.zeros(1))
    with pytest.raises(UsageError, match=r"other.npz holds no Vision "
                       r"Transformer checkpoint: no embedding/kernel or "
                       r"Transformer/ arrays \(it holds 2: bias, weights\)"):
        loader.load_model(str(tmp_path / "other.npz"))
    for uri in ("hf://org/name@..", "hf://../name", "hf://org/.hidden"):
        assert "holds no '..'" in refusal(uri), uri
    # Exports serve predictions only: refused unless the caller serves.
    version = tmp_path / "export" / "vit" / "3"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"")
    (version / "assets").mkdir()
    (version / "assets" / "labels.txt").write_bytes(b"cat\r\ndog\r\n")
    folder = str(tmp_path / "export" / "vit")
    assert "is an exported SavedModel" in refusal(folder)
    served = loader.resolve(folder, exports=True)
    assert served.kind == "saved_model" and served.version() == str(version)
    # One reader of label files: CRLF and LF alike.
    assert loader.class_names(served) == ["cat", "dog"]
    tflite = tmp_path / "vit.tflite"
    tflite.write_bytes(b"")
    assert "is a LiteRT file" in refusal(str(tflite))
    with pytest.raises(UsageError, match="is a LiteRT file"):
        loader.load_model(loader.LiteRTSource(str(tflite)))
