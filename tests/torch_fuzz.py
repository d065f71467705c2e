"""Child process for tests/test_torch_pickle.py: loads `torch.save` files
with keras_vit's own reader and reports each outcome as a JSON line, so that
a crash (a segfault reading outside a storage) ends only this process.

    python tests/torch_fuzz.py files PATH...   # load each file
    python tests/torch_fuzz.py fuzz SEED COUNT  # mutate a valid file
    python tests/torch_fuzz.py hostile SCALE KIND...  # tests/hostile_files

The first two modes, and "hostile" with torch kinds only, import only
`keras_vit.checkpoint.formats.torch_pickle` (with its `torch_checks` and
keras_vit package, which would import Keras; "hostile" with other kinds
loads each file with `keras_vit.checkpoint.loader.load_model`. Each file's
peak memory above what the process held before it is reported (Linux's
VmHWM, reset per file through /proc/self/clear_refs).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]
LIGHT = not (len(sys.argv) > 2 and sys.argv[1] == "hostile"
             and set(sys.argv[3:]) - {"deep_nesting", "build_on_records",
                                      "inflation"})
if LIGHT:
    _package = types.ModuleType("keras_vit")
    _package.__path__ = [os.path.join(ROOT, "keras_vit")]
    sys.modules["keras_vit"] = _package

import hostile_files  # noqa: E402
import torch_files  # noqa: E402

from keras_vit.checkpoint.formats import torch_pickle  # noqa: E402
from keras_vit.errors import UsageError  # noqa: E402


def _emit(**record) -> None:
    print(json.dumps(record), flush=True)


def _load(path: str):
    """("ok", arrays) / ("usage", message) / ("other", repr)."""
    try:
        return "ok", torch_pickle.read_without_torch(path)
    except UsageError as error:
        return "usage", str(error)
    except Exception as error:  # the test fails on any of these
        return "other", repr(error)


def load_files(paths) -> None:
    for path in paths:
        _emit(event="start", path=path)
        outcome, value = _load(path)
        shapes = {}
        if outcome == "ok":
            shapes = {k: list(v.shape) for k, v in value.items()}
            value = ""
        _emit(event="done", path=path, outcome=outcome, message=value,
              shapes=shapes)


# The valid file the fuzzer mutates: one storage shared by an ordinary
# tensor and a transposed view, a second storage of another dtype.
STORAGE = np.random.default_rng(0).normal(size=24).astype(np.float32)
LONGS = np.arange(5, dtype=np.int64) * 7 + 3
TENSORS = {
    "a": ((0, (4, 5), (5, 1)), "0"),
    "t": ((2, (3, 4), (1, 6)), "0"),
    "n": ((1, (4,), (1,)), "1"),
}


def _valid():
    tensors = {name: torch_files.Tensor(key, *spec)
               for name, (spec, key) in TENSORS.items()}
    return tensors, {"0": STORAGE, "1": LONGS}


def _consistent(arrays) -> bool:
    """A file that still loads must give arrays made of the storages'
    elements (nothing read from outside them)."""
    pools = {4: set(STORAGE.view(np.uint32).tolist()),
             8: set(LONGS.view(np.uint64).tolist())}
    for value in arrays.values():
        pool = pools.get(value.dtype.itemsize)
        if pool is None or not value.size:
            continue
        bits = value.reshape(-1).view({4: np.uint32, 8: np.uint64}[
            value.dtype.itemsize])
        if not set(bits.tolist()) <= pool:
            return False
    return True


def _mutant(rng, folder: str, case: int):
    """(path, views): a mutated file, and for a changed view the
    (storage, offset, size, stride) of every tensor, else None."""
    path = os.path.join(folder, f"case{case}.bin")
    views = None
    tensors, storages = _valid()
    kind = case % 3
    if kind == 0:  # random bytes of the pickle changed, cut or repeated
        data = bytearray(torch_files.pickle_bytes(
            tensors, {"0": "FloatStorage", "1": "LongStorage"},
            {"0": STORAGE.size, "1": LONGS.size}))
        for _ in range(rng.integers(1, 4)):
            i = int(rng.integers(len(data)))
            data[i] = int(rng.integers(256))
        if rng.random() < 0.2:
            data = data[: int(rng.integers(len(data)))]
        torch_files.write(path, tensors, storages, data_pkl=bytes(data))
    elif kind == 1:  # sizes, strides and offsets changed
        name = list(tensors)[int(rng.integers(len(tensors)))]
        spec = tensors[name]
        values = [0, 1, 2, 5, 23, 24, 25, -1, -5, 2**31, 2**62, 4096]
        size, stride = list(spec.size), list(spec.stride)
        target = rng.integers(3)
        if target == 0:
            size[int(rng.integers(len(size)))] = int(rng.choice(values))
        elif target == 1:
            stride[int(rng.integers(len(stride)))] = int(rng.choice(values))
        else:
            spec.offset = int(rng.choice(values))
        if rng.random() < 0.2:
            size.append(int(rng.choice(values)))
            stride.append(int(rng.choice(values)))
        spec.size, spec.stride = tuple(size), tuple(stride)
        torch_files.write(path, tensors, storages)
        views = {n: (storages[TENSORS[n][1]], t.offset, t.size, t.stride)
                 for n, t in tensors.items()}
    else:  # the storages' bytes or declared counts changed
        key = str(rng.integers(2))
        stored = storages[key].tobytes()
        cut = int(rng.integers(len(stored) + 9))
        raw = {key: (stored + b"\0" * 8)[:cut]}
        counts = {key: int(rng.choice([0, 3, 5, 24, 25, 4096]))}
        if rng.random() < 0.5:
            torch_files.write(path, tensors, storages, raw=raw)
        else:
            torch_files.write(path, tensors, storages, counts=counts)
    return path, views


def _check(arrays, views) -> str:
    """'' when a loaded file's arrays are right, else what is wrong."""
    if not _consistent(arrays):
        return "values not from a storage"
    for name, spec in (views or {}).items():
        want = torch_files.view(*spec)
        got = arrays.get(name)
        if got is None or got.shape != want.shape or not np.array_equal(
                got, want):
            return f"tensor {name} differs from its view {spec[1:]}"
    return ""


def fuzz(seed: int, count: int) -> None:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as folder:
        for case in range(count):
            path, views = _mutant(rng, folder, case)
            _emit(event="start", case=case)
            outcome, value = _load(path)
            if outcome == "ok":
                value = _check(value, views)
                outcome = "other" if value else "ok"
            _emit(event="done", case=case, outcome=outcome, message=value)
            os.remove(path)


def _memory(field: str) -> int:
    """A /proc/self/status field in bytes (VmRSS, VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) << 10
    raise KeyError(field)


def _read(reader: str, target: str):
    if reader == "bin":
        state = torch_pickle.read_state_dict(target)
        return {key: state[key].shape for key in state}
    from keras_vit.checkpoint import loader  # noqa: E402 (model mode)

    return loader.load_model(target)


def hostile(scale: int, kinds) -> None:
    builders = {b.__name__: b for b in (
        hostile_files.TORCH_KINDS + hostile_files.MODEL_KINDS
        + [hostile_files.controls])}
    with tempfile.TemporaryDirectory() as folder:
        # An hf:// URI is read from this cache only, which holds ORG/NAME
        # (so that a revision '..' would reach the cache's folders).
        repo = os.path.join(folder, "hf", "hub", "models--ORG--NAME")
        # refs/dir: a ref that is a folder (huggingface_hub raises
        # IsADirectoryError reading it).
        os.makedirs(os.path.join(repo, "refs", "dir"))
        os.makedirs(os.path.join(repo, "snapshots", "abc"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write("abc")
        os.environ.update(HF_HUB_CACHE=os.path.join(folder, "hf", "hub"),
                          HF_HUB_OFFLINE="1", KERAS_VIT_OFFLINE="1")
        for kind in kinds:
            for label, reader, target in builders[kind](folder, scale):
                size = (os.path.getsize(target) if os.path.isfile(target)
                        else sum(os.path.getsize(os.path.join(r, n))
                                 for r, _, names in os.walk(target)
                                 for n in names) if os.path.isdir(target)
                        else 0)
                _emit(event="start", label=label)
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")  # resets VmHWM to the current VmRSS
                before = _memory("VmRSS")
                loaded = []
                try:
                    value = _read(reader, target)
                    outcome, message = "ok", ""
                    if reader == "model":  # the model's layers, by type
                        loaded = [type(value).__name__] + [
                            type(layer).__name__ for layer in value.layers]
                except UsageError as error:
                    outcome, message = "usage", str(error)
                except Exception as error:  # the test fails on these
                    outcome, message = "other", repr(error)[:2000]
                _emit(event="done", label=label, target=target,
                      outcome=outcome, message=message, file_bytes=size,
                      loaded=loaded,
                      peak_bytes=_memory("VmHWM") - before)


def main(argv) -> None:
    # A runaway allocation fails as MemoryError (a test failure), not by
    # exhausting the machine; Keras and TensorFlow reserve ~2.3 GB of
    # address space on import.
    limit = (4 if LIGHT else 6) << 30
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if argv[1] == "files":
        load_files(argv[2:])
    elif argv[1] == "hostile":
        hostile(int(argv[2]), argv[3:])
    else:
        fuzz(int(argv[2]), int(argv[3]))


if __name__ == "__main__":
    main(sys.argv)
