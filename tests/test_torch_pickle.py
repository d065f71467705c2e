"""The PyTorch state-dict reader that runs without PyTorch
(`keras_vit.checkpoint.formats.torch_pickle`): exact round trips of files laid
out as torch.save writes them (tests/torch_files.py), and crafted files that
declare views outside their storage, each refused with one line naming the
tensor. Files that could crash the process (read outside memory) are read in a
child process (tests/torch_fuzz.py), where a segfault shows as a failed test.
The hostile corpus of tests/hostile_files.py (deep nesting, BUILD on records,
inflating zip members, zero-stride amplification, shards outside the folder,
broken JSON and .npz, hf:// revisions, Lambda layers) is read there too, each
file's peak memory measured: a quick torch-only version, and every kind
through load_model (slow)."""

import collections
import io
import json
import os
import pickle
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_vit.checkpoint.formats import npz, torch_checks, torch_pickle
from keras_vit.errors import UsageError
from tests import hostile_files, torch_files

CHILD = os.path.join(os.path.dirname(__file__), "torch_fuzz.py")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _child(*args, timeout=120):
    """The child's 'done' records, after checking that it exited cleanly
    (no signal: a read outside memory would end it with SIGSEGV)."""
    run = subprocess.run([sys.executable, CHILD, *args], capture_output=True,
                         text=True, timeout=timeout)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    started = [r for r in records if r["event"] == "start"]
    assert run.returncode == 0, (
        f"child ended with {run.returncode} during {started[-1:]}: "
        f"{run.stderr[-2000:]}")
    done = [r for r in records if r["event"] == "done"]
    assert len(done) == len(started)
    return done


def test_round_trip_of_every_storage_type(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.normal(size=(3, 4)).astype(np.float32),
        "f64": rng.normal(size=(2, 2, 2)),
        "f16": rng.normal(size=7).astype(np.float16),
        "i64": np.arange(-3, 9, dtype=np.int64).reshape(4, 3),
        "i32": np.arange(5, dtype=np.int32),
        "u8": np.arange(250, 256, dtype=np.uint8),
        "scalar": np.asarray(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    path = str(tmp_path / "pytorch_model.bin")
    torch_files.save(path, arrays)
    got = torch_pickle.read_without_torch(path)
    assert list(got) == list(arrays)
    for name, want in arrays.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape
        np.testing.assert_array_equal(got[name], want)


def test_bfloat16_is_widened_exactly(tmp_path):
    values = np.asarray([1.0, -2.5, 3.140625, 0.0], np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    path = str(tmp_path / "bf16.bin")
    torch_files.write(path, {"w": torch_files.Tensor("0", 0, (4,), (1,))},
                      {"0": np.zeros(4, np.float32)},
                      kinds={"0": "BFloat16Storage"},
                      raw={"0": bits.tobytes()})
    # The writer's storage classes are the ones the reader allows.
    got = torch_pickle.read_without_torch(path)["w"]
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, values)


def test_one_storage_shared_by_overlapping_views(tmp_path):
    # A state dict may hold several views of one storage (tied weights,
    # slices): each must come back as its own view, values by index
    # arithmetic.
    storage = np.arange(30, dtype=np.float32) * 1.5
    views = {
        "whole": (0, (5, 6), (6, 1)),
        "transposed": (0, (6, 5), (1, 6)),
        "overlap": (3, (4, 4), (4, 1)),       # rows overlap "whole"
        "repeated": (7, (3, 2), (0, 2)),      # a zero stride
        "column": (2, (5,), (6,)),
    }
    path = str(tmp_path / "shared.bin")
    torch_files.write(
        path, {n: torch_files.Tensor("0", *v) for n, v in views.items()},
        {"0": storage})
    got = torch_pickle.read_without_torch(path)
    for name, (offset, size, stride) in views.items():
        want = torch_files.view(storage, offset, size, stride)
        np.testing.assert_array_equal(got[name], want)
    np.testing.assert_array_equal(got["transposed"], got["whole"].T)
    got["whole"][0, 0] = -1  # copies, not views of one buffer
    assert got["transposed"][0, 0] == 0


# name -> (tensor, storages, kwargs for torch_files.write, expected text)
CRAFTED = {
    # The 532-byte file: 4 floats stored, 1,024 declared.
    "too_short": (("0", 0, (1024,), (1,)), np.ones(4, np.float32), {},
                  r"tensor 'w' reaches element 1023 of a storage of 4"),
    "huge_shape": (("0", 0, (4096, 4096), (4096, 1)),
                   np.ones(4, np.float32), {},
                   r"tensor 'w' reaches element 16777215 of a storage of 4"),
    "impossible_shape": (("0", 0, (2 ** 31, 2 ** 31), (0, 0)),
                         np.ones(4, np.float32), {},
                         r"tensor 'w' declares an impossible shape"),
    "repeated_too_much": (("0", 0, (8193, 8192), (0, 0)),
                          np.ones(4, np.float32), {},
                          r"its tensors would make more than 67108896 bytes "
                          r"of arrays from 16 bytes of storage \(at 'w'"),
    "negative_stride": (("0", 3, (4,), (-1,)), np.ones(4, np.float32), {},
                        r"tensor 'w': negative size, stride or offset"),
    "negative_size": (("0", 0, (-4,), (1,)), np.ones(4, np.float32), {},
                      r"tensor 'w': negative size"),
    "offset_past_end": (("0", 9, (2,), (1,)), np.ones(4, np.float32), {},
                        r"tensor 'w' reaches element 10 of a storage of 4"),
    "stride_past_end": (("0", 0, (2, 2), (3, 1)), np.ones(4, np.float32),
                        {}, r"tensor 'w' reaches element 4 of a storage"),
    "bytes_not_whole_elements": (
        ("0", 0, (2,), (1,)), np.ones(4, np.float32),
        {"raw": {"0": b"\0" * 10}},
        r"holds 10 bytes, but the pickle declares 4 FloatStorage elements"),
    "declared_count_too_big": (
        ("0", 0, (8,), (1,)), np.ones(4, np.float32),
        {"counts": {"0": 8}},
        r"holds 16 bytes, but the pickle declares 8 FloatStorage elements"),
    "double_bytes_as_float": (
        ("0", 0, (4,), (1,)), np.ones(4, np.float64),
        {"kinds": {"0": "FloatStorage"}},
        r"holds 32 bytes, but the pickle declares 4 FloatStorage elements"),
    "missing_storage": (("1", 0, (2,), (1,)), np.ones(4, np.float32), {},
                        r"storage archive/data/1 is missing"),
}


def _write_crafted(folder, name):
    (key, offset, size, stride), storage, kwargs, _ = CRAFTED[name]
    path = os.path.join(folder, f"{name}.bin")
    kwargs = dict(kwargs)
    storages = {"0": storage}
    if key not in storages:  # the pickle names a storage the zip lacks
        kwargs["kinds"] = {key: "FloatStorage"}
        kwargs["counts"] = {key: 2}
    torch_files.write(path, {"w": torch_files.Tensor(key, offset, size,
                                                     stride)},
                      storages, **kwargs)
    return path


@pytest.mark.slow
def test_crafted_files_are_refused_in_a_child_process(tmp_path):
    paths = [_write_crafted(str(tmp_path), name) for name in CRAFTED]
    done = _child("files", *paths)
    assert [os.path.basename(r["path"])[:-4] for r in done] == list(CRAFTED)
    for record, (name, case) in zip(done, CRAFTED.items()):
        assert record["outcome"] == "usage", (name, record)
        assert "\n" not in record["message"]
        assert re.search(case[3], record["message"]), (name, record)


def test_crafted_files_are_refused_in_process(tmp_path):
    # Each check runs before any view of memory is made, so refusing in
    # this process is safe too; here through the public entry point, whose
    # arrays are made when looked up (the amplification is refused then).
    for name in CRAFTED:
        path = _write_crafted(str(tmp_path), name)
        with pytest.raises(UsageError, match=CRAFTED[name][3]):
            dict(torch_pickle.read_state_dict(path, use_torch=False))


def test_other_pickle_content_is_refused(tmp_path):
    # A global outside the allow-list (a storage type included), an
    # opcode torch.save never writes, a non-tensor entry.
    path = str(tmp_path / "complex.bin")
    torch_files.write(path, {"w": torch_files.Tensor("0", 0, (2,), (1,))},
                      {"0": np.ones(2, np.float32)},
                      kinds={"0": "ComplexFloatStorage"}, counts={"0": 1})
    with pytest.raises(UsageError, match=r"torch\.ComplexFloatStorage object"):
        torch_pickle.read_without_torch(path)
    # BYTEARRAY8 (protocol 5) before the dict.
    torch_files.write(path, {}, {"0": np.ones(2, np.float32)},
                      data_pkl=b"\x80\x05\x96\x01\0\0\0\0\0\0\0x0}.")
    with pytest.raises(UsageError, match="opcode BYTEARRAY8"):
        torch_pickle.read_without_torch(path)
    torch_files.write(path, {}, {}, data_pkl=pickle.dumps({"w": 3},
                                                          protocol=2))
    with pytest.raises(UsageError, match="entry 'w' is a int, not a tensor"):
        torch_pickle.read_without_torch(path)


def test_reader_is_chosen_by_whether_torch_is_installed(tmp_path,
                                                        monkeypatch):
    path = str(tmp_path / "pytorch_model.bin")
    torch_files.save(path, {"w": np.ones((2, 2), np.float32)})
    calls = []
    monkeypatch.setattr(torch_pickle, "open_with_torch",
                        lambda p, pick=None: calls.append(p) or {})
    monkeypatch.setattr(torch_pickle, "HAS_TORCH", True)
    assert torch_pickle.read_state_dict(path) == {} and calls == [path]
    monkeypatch.setattr(torch_pickle, "HAS_TORCH", False)
    assert list(torch_pickle.read_state_dict(path)) == ["w"]


@pytest.mark.slow
def test_fuzzed_files_load_right_or_are_refused():
    # Random changes to a valid file's pickle bytes, its views' sizes,
    # strides and offsets, and its storages' bytes and declared counts:
    # every file either loads with the right values (views checked by
    # index arithmetic, other loads made only of storage elements) or is
    # refused with a UsageError; the child never crashes.
    done = _child("fuzz", "2024", "1200", timeout=60)
    outcomes = [r["outcome"] for r in done]
    assert len(outcomes) == 1200
    bad = [r for r in done if r["outcome"] not in ("ok", "usage")]
    assert not bad, bad[:3]
    # Both paths are exercised.
    assert outcomes.count("ok") > 50 and outcomes.count("usage") > 500


def test_pytorch_reader_agrees_where_installed(tmp_path):
    # Where PyTorch is installed it is the reader: the same files load to
    # the same arrays, and the crafted ones are refused as UsageError too.
    pytest.importorskip("torch")
    path = os.path.join(os.path.dirname(__file__), "fixtures", "hub",
                        "hf_vit_model_bin", "pytorch_model.bin")
    mine = torch_pickle.read_without_torch(path)
    theirs = torch_pickle.read_with_torch(path)
    assert list(mine) == list(theirs)
    for name in mine:
        np.testing.assert_array_equal(mine[name], theirs[name])
    for name in CRAFTED:
        with pytest.raises(UsageError):
            torch_pickle.read_with_torch(_write_crafted(str(tmp_path), name))


def _hostile_child(scale, kinds, timeout):
    """Runs tests/hostile_files' builders `kinds` in one child; returns its
    records after checking that it ended cleanly and printed no
    traceback."""
    run = subprocess.run([sys.executable, CHILD, "hostile", str(scale),
                          *kinds], capture_output=True, text=True,
                         timeout=timeout)
    records = [json.loads(line) for line in run.stdout.splitlines()]
    started = [r for r in records if r["event"] == "start"]
    assert run.returncode == 0, (
        f"child ended with {run.returncode} during {started[-1:]}: "
        f"{run.stderr[-2000:]}")
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    done = [r for r in records if r["event"] == "done"]
    assert len(done) == len(started)
    return done


def _check_hostile(done):
    """0 loads, 0 errors other than one UsageError line naming the file
    (its basename, or the hf:// URI), each within a memory budget of
    MAX_EXTRA_BYTES plus twice the file's bytes."""
    for record in done:
        label, message = record["label"], record["message"]
        if label.startswith("control:"):
            assert record["outcome"] == "ok", record
            continue
        assert record["outcome"] == "usage", record
        assert "\n" not in message, record
        target = record["target"]
        name = (target if target.startswith("hf://")
                else os.path.basename(target.rstrip("/")))
        assert name in message, record
        budget = torch_checks.MAX_EXTRA_BYTES + 2 * record["file_bytes"]
        assert record["peak_bytes"] <= budget, record


TORCH_KINDS = ["deep_nesting", "build_on_records", "inflation"]
MODEL_KINDS = ["zero_stride", "path_escape", "broken_json", "broken_npz",
               "uris", "keras_lambda", "links_out", "archive_bombs",
               "keras_not_vit", "odd_configs", "empty_axes", "controls"]
ROUND_THREE = ["links_out", "archive_bombs", "keras_not_vit", "odd_configs"]


def test_hostile_torch_files_quick():
    # One of each: containers nested 10,000 deep seven ways (a dict key, a
    # tensor's size, MARKs, lists, dicts, depth hidden by changing a list
    # after it was put into another), BUILD on a storage / storage class /
    # tensor record, zip members inflating to 32 MiB. Each is refused by
    # one line naming the file, in a child that never crashes.
    done = _hostile_child(1, TORCH_KINDS, timeout=120)
    assert len(done) == 13
    _check_hostile(done)
    by_label = {r["label"]: r["message"] for r in done}
    assert "nests containers more than 32 deep" in by_label[
        "nesting:tuple_dict_key"]
    assert "changes a container after putting it into another" in by_label[
        "nesting:hidden_by_mutation"]
    assert "a BUILD opcode changes a StorageData record" in by_label[
        "build:storage"]
    assert ("holds 33554432 bytes, but the pickle declares 4 FloatStorage"
            in by_label["inflation:storage"])
    assert "is compressed" in by_label["inflation:declared"]
    assert "more than the 8388608 it may hold" in by_label[
        "inflation:pickle"]


@pytest.mark.slow
def test_hostile_corpus_in_one_child_under_a_memory_cap():
    # Every kind, larger (nesting 40,000 deep, members inflating to
    # 128 MiB, 32 zero-stride tensors of 67 million elements each), read
    # the user's way (load_model, a path or an hf:// URI) where the kind is
    # a model (hf:// URIs from a cache only): 0 crashes, 0 tracebacks, 0
    # loads of a hostile file, each within its memory budget; the
    # controls (a folder, a .bin, an index with its shard, a Hugging Face
    # cache snapshot whose shard links to its own blobs/) load.
    done = _hostile_child(4, TORCH_KINDS + MODEL_KINDS, timeout=900)
    _check_hostile(done)
    labels = {r["label"] for r in done}
    for kind in ("nesting:", "build:", "inflation:", "zero_stride:",
                 "escape:", "index:", "config:", "npz:", "hf:", "keras:",
                 "empty:", "control:"):
        assert any(label.startswith(kind) for label in labels), kind
    by_label = {r["label"]: r["message"] for r in done}
    assert "views that repeat storage elements" in by_label[
        "zero_stride:state_dict"]
    # The arrays a model has no place for are named, never materialised.
    assert "has 32 array(s) this ViT has no place for, first extra.0 " \
           "(8191, 8191)" in by_label["zero_stride:model"]
    for label in ("parent", "absolute", "inner_parent"):
        assert "outside the model's folder" in by_label[f"escape:{label}"]
    assert "a link to" in by_label["escape:link"]
    assert "a link to" in by_label["escape:other_repository"]
    assert "has no weight_map" in by_label["index:no_weight_map"]
    assert "nests lists or objects more than 32 deep" in by_label[
        "config:deep"]
    assert "holds a JSON list, not an object" in by_label["config:list"]
    assert "declares shape (4194304, 1048576)" in by_label["npz:huge_shape"]
    assert "entry 'notes.txt' is not an .npy array" in by_label[
        "npz:other_member"]
    assert "holds no '..' and starts with no '.'" in by_label["hf:.."]
    assert "refused it (IsADirectoryError" in by_label["hf:dir"]
    assert "Keras's safe mode refuses to run" in by_label["keras:lambda"]


@pytest.mark.slow
def test_links_bombs_user_models_and_odd_configs_in_a_child():
    # Each read the user's way in one child: files of a model folder that
    # link out of it (weights, config.json, preprocessor_config.json), a
    # cache snapshot linking into another repository's blobs/, refs/main
    # walking out of snapshots/ (relative and absolute), a .keras
    # config.json and an .npz member inflating to 128 MiB from a small
    # file, a .keras member Keras's format has no place for, a .keras
    # holding a layer or cut short, complex and void .npz arrays, timm
    # configs the weights contradict (qkv_bias=False, a zero std, a NaN
    # mean, a 2-D kernel of another patch), a transformers file wrapped
    # as a training checkpoint: 0 crashes, 0 tracebacks, 0 links followed,
    # each refused in one line naming it within 64 MiB plus twice its
    # size; a user's model of keras_vit's layers and a Softmax loads as
    # Keras saved it, Softmax included.
    done = _hostile_child(1, ROUND_THREE, timeout=300)
    _check_hostile(done)
    by_label = {r["label"]: r for r in done}
    assert len(by_label) == 22
    for label in ("weights", "config", "processor", "other_repository_blob"):
        assert "is a link to" in by_label[f"link:{label}"]["message"]
        assert "elsewhere" in by_label[f"link:{label}"]["message"] or (
            "models--g--h" in by_label[f"link:{label}"]["message"])
    for label in ("escape", "absolute"):
        assert "its refs/ file names a path outside" in by_label[
            f"link:refs_{label}"]["message"]
    assert "refused before inflating" in by_label["bomb:npz_extra"][
        "message"]
    assert "config.json declares 134217737 bytes" in by_label[
        "bomb:keras_config"]["message"]
    loaded = by_label["control:keras_softmax"]["loaded"]
    assert loaded[0] == "Functional" and loaded[-1] == "Softmax"
    assert "holds a Dense, not a model" in by_label["keras:layer_top"][
        "message"]
    assert "truncated or corrupt .keras" in by_label["keras:cut_short"][
        "message"]
    for label in ("huge_vit", "huge_image", "huge_dense"):
        assert "refused before Keras builds it" in by_label[
            f"keras:{label}"]["message"]
    assert "(complex64), not a real number" in by_label["dtype:complex"][
        "message"]
    assert "hf_wrapped" in by_label["config:hf_wrapped"]["message"]


def test_checks_run_before_torch_load(tmp_path, monkeypatch):
    # With PyTorch installed, torch.load(weights_only=True) crashes on the
    # deeply nested pickle too: every check of this module runs first, and
    # torch.load is reached only by files that pass them.
    calls = []

    class FakeTorch:
        Tensor = np.ndarray
        bfloat16 = "bfloat16"

        @staticmethod
        def load(path, **kwargs):
            calls.append((path, kwargs))
            return {"w": np.ones((2, 2), np.float32)}

    monkeypatch.setattr(torch_pickle.importlib, "import_module",
                        lambda name: FakeTorch)
    hostile = [target for build in (hostile_files.deep_nesting,
                                    hostile_files.build_on_records,
                                    hostile_files.inflation)
               for _, _, target in build(str(tmp_path), 1)]
    for path in hostile:
        with pytest.raises(UsageError):
            torch_pickle.read_state_dict(path, use_torch=True)
    assert calls == []
    path = str(tmp_path / "pytorch_model.bin")
    torch_files.save(path, {"w": np.zeros((2, 2), np.float32)})
    state = torch_pickle.read_state_dict(path, use_torch=True)
    assert calls == [(path, {"weights_only": True, "map_location": "cpu"})]
    assert state.shape("w") == (2, 2)


@pytest.mark.slow
def test_console_script_refuses_hostile_models_in_one_line(tmp_path):
    # The user's door: keras-vit-convert on a model folder whose
    # pytorch_model.bin nests tuples 10,000 deep (CPython crashes hashing
    # it), and on hf://ORG/NAME@..: exit status 1, one error line, no
    # traceback, nothing written.
    folder = tmp_path / "model"
    shutil.copytree(os.path.join(hostile_files.FIXTURES, "hf_vit_model_bin"),
                    folder)
    data = hostile_files._deep_pickles(10000)["tuple_dict_key"]
    weights = str(folder / "pytorch_model.bin")
    torch_files.write(weights, {}, {"0": np.ones(4, np.float32)},
                      data_pkl=data)
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
               TF_CPP_MIN_LOG_LEVEL="3", HF_HUB_OFFLINE="1",
               HF_HUB_CACHE=str(tmp_path / "hf"))
    for model, says in ((str(folder), f"{weights}: its pickle nests "
                         "containers more than 32 deep"),
                        ("hf://ORG/NAME@..", "hf://ORG/NAME@..: a Hugging "
                         "Face repository or revision holds no '..'")):
        output = tmp_path / "out.keras"
        run = subprocess.run(
            [sys.executable, "-m", "keras_vit.commands.convert",
             f"--model={model}", f"--output={output}"],
            capture_output=True, text=True, env=env, timeout=300)
        assert run.returncode == 1, run.stderr[-2000:]
        assert "Traceback" not in run.stderr, run.stderr[-2000:]
        errors = [line for line in run.stderr.splitlines()
                  if line.startswith("keras-vit-convert: error:")]
        assert len(errors) == 1 and says in errors[0], run.stderr[-2000:]
        assert not output.exists()


@pytest.mark.slow
def test_budget_counts_each_dtype_as_read(tmp_path):
    # 20 million float16 elements (40 MB): within 2 x the storage bytes,
    # so they load; the same views repeated once more than that are
    # refused. bfloat16 is budgeted as the float32 it is widened to.
    count = 20_000_000
    half = np.arange(count, dtype=np.float16)
    path = str(tmp_path / "half.bin")
    torch_files.write(path, {"w": torch_files.Tensor("0", 0, (count,), (1,)),
                             "v": torch_files.Tensor("0", 0, (count,), (1,))},
                      {"0": half}, kinds={"0": "HalfStorage"})
    state = torch_pickle.read_state_dict(path, use_torch=False)
    np.testing.assert_array_equal(state["w"], half)
    np.testing.assert_array_equal(state["v"], half)
    torch_files.write(path, {name: torch_files.Tensor("0", 0, (count,), (1,))
                             for name in "abcd"},
                      {"0": half}, kinds={"0": "HalfStorage"})
    state = torch_pickle.read_state_dict(path, use_torch=False)
    for name in "abc":
        assert state[name].shape == (count,)
    with pytest.raises(UsageError, match="views that repeat storage"):
        state["d"]
    torch_files.write(path, {name: torch_files.Tensor("0", 0, (count,), (1,))
                             for name in "ab"},
                      {"0": half}, kinds={"0": "BFloat16Storage"})
    state = torch_pickle.read_state_dict(path, use_torch=False)
    assert state["a"].dtype == np.float32 and state["b"].shape == (count,)


def test_fuzzed_npz_files_load_right_or_are_refused(tmp_path):
    # Random bytes of a valid .npz (stored and compressed) changed: every
    # file loads as numeric arrays (no object arrays) or is refused with
    # one UsageError line naming it; nothing else is raised.
    rng = np.random.default_rng(7)
    arrays = {"a/kernel": np.ones((3, 4), np.float32), "b": np.arange(5)}
    originals = []
    for save in (np.savez, np.savez_compressed):
        buffer = io.BytesIO()
        save(buffer, **arrays)
        originals.append(buffer.getvalue())
    path = str(tmp_path / "x.npz")
    outcomes = collections.Counter()
    for case in range(600):
        data = bytearray(originals[case % 2])
        for _ in range(int(rng.integers(1, 5))):
            data[int(rng.integers(len(data)))] = int(rng.integers(256))
        with open(path, "wb") as f:
            f.write(bytes(data))
        try:
            got = npz.read_npz(path)
        except UsageError as error:
            assert "\n" not in str(error) and path in str(error)
            outcomes["usage"] += 1
            continue
        for key, value in got.items():
            assert isinstance(value, np.ndarray) and not value.dtype.hasobject
        outcomes["ok"] += 1
    assert outcomes["ok"] > 20 and outcomes["usage"] > 400, outcomes
