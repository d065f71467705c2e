"""The PyTorch state-dict reader that runs without PyTorch
(`keras_vit.checkpoint.torch_pickle`): exact round trips of files laid out
as torch.save writes them (tests/torch_files.py), and crafted files that
declare views outside their storage, each refused with one line naming the
tensor. Files that could crash the process (read outside memory) are read
in a child process (tests/torch_fuzz.py), where a segfault shows as a
failed test."""

import json
import os
import pickle
import re
import subprocess
import sys

import numpy as np
import pytest

from keras_vit.checkpoint import torch_pickle
from keras_vit.errors import UsageError
from tests import torch_files

CHILD = os.path.join(os.path.dirname(__file__), "torch_fuzz.py")


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
                          r"tensor 'w' declares 67117056 elements over a "
                          r"storage of 4"),
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
    # this process is safe too; here through the public entry point.
    for name in CRAFTED:
        path = _write_crafted(str(tmp_path), name)
        with pytest.raises(UsageError, match=CRAFTED[name][3]):
            torch_pickle.read_state_dict(path, use_torch=False)


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
    monkeypatch.setattr(torch_pickle, "read_with_torch",
                        lambda p: calls.append(p) or {})
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
