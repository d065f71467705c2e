"""Hostile and broken model files, one builder per kind, for the fuzz test
(tests/torch_fuzz.py runs them in a child process; tests/test_torch_pickle.py
checks the outcomes).

Every builder writes under `folder` and returns a list of
`(label, reader, target)`: `reader` says how the child reads `target` --
"bin" (keras_vit.checkpoint.formats.torch_pickle.read_state_dict, every array
looked up) or "model" (keras_vit.checkpoint.loader.load_model, the user's
function; `target` a path or a model string). `CONTROLS` build files that
must load, so that a refusal proves the check, not a broken harness.

`scale` sizes the cases: 1 for the quick corpus, larger for the slow one
(deeper nesting, bigger inflation, more variants).
"""

from __future__ import annotations

import collections
import io
import json
import os
import shutil
import struct
import zipfile
from typing import Callable, Dict, List, Tuple

import numpy as np

from tests import torch_files

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "hub")
Case = Tuple[str, str, str]


def _bin(path: str, data_pkl: bytes) -> str:
    torch_files.write(path, {}, {"0": np.ones(4, np.float32)},
                      data_pkl=data_pkl)
    return path


def _deep_pickles(depth: int) -> Dict[str, bytes]:
    """Pickles nesting containers `depth` deep, each a different way."""
    p2 = b"\x80\x02"
    # Lists L_0 .. L_(n-1), then L_(i-1) appended into L_i from the
    # outermost in: each append changes a list already inside another,
    # the order that hides depth from a scan adding depths at creation.
    lists = b"".join(b"]r" + struct.pack("<I", i) + b"0"
                     for i in range(depth))
    chain = b"".join(b"j" + struct.pack("<I", i) + b"j"
                     + struct.pack("<I", i - 1) + b"a0"
                     for i in range(depth - 1, 0, -1))
    return {
        "tuple_dict_key": p2 + b"}" + b")" + b"\x85" * depth + b"Ns.",
        "tuple_mark": p2 + b"(" * min(depth, 60000) + b"N"
                      + b"t" * min(depth, 60000) + b".",
        "list_append": p2 + b"]" * depth + b"a" * (depth - 1) + b".",
        "dict_setitem": p2 + b"}" + b"N}" * depth + b"s" * depth + b".",
        "hidden_by_mutation": p2 + lists + chain
                              + b"j" + struct.pack("<I", depth - 1) + b".",
        "marks_left_open": p2 + b"(" * depth + b"N.",
    }


def deep_nesting(folder: str, scale: int) -> List[Case]:
    cases = []
    for name, data in _deep_pickles(10000 * scale).items():
        path = os.path.join(folder, f"deep_{name}.bin")
        cases.append((f"nesting:{name}", "bin", _bin(path, data)))
    # A tensor whose size is a deeply nested tuple.
    size = b")" + b"\x85" * (10000 * scale)
    tensor = (b"\x80\x02}X\x01\x00\x00\x00wctorch._utils\n_rebuild_tensor_v2"
              b"\n(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00"
              b"\x00\x000X\x03\x00\x00\x00cpuK\x04tQK\x00" + size
              + b"K\x01\x85\x89ccollections\nOrderedDict\n)RtRs.")
    path = os.path.join(folder, "deep_tensor_size.bin")
    cases.append(("nesting:tensor_size", "bin", _bin(path, tensor)))
    return cases


def build_on_records(folder: str, scale: int) -> List[Case]:
    """BUILD applied to a storage record, a storage class and a tensor."""
    storage = (b"(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00"
               b"\x00\x000X\x03\x00\x00\x00cpuK\x04tQ")
    state = b"}X\x05\x00\x00\x00arrayK\x01sb"
    tensor = (b"ctorch._utils\n_rebuild_tensor_v2\n(" + storage
              + b"K\x00K\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)R"
              b"tR")
    pickles = {
        "storage": b"\x80\x02}X\x01\x00\x00\x00w" + storage + state + b"s.",
        "storage_class": b"\x80\x02}X\x01\x00\x00\x00wctorch\nFloatStorage"
                         b"\n" + state + b"s.",
        "tensor": b"\x80\x02}X\x01\x00\x00\x00w" + tensor + state + b"s.",
    }
    cases = []
    for name, data in pickles.items():
        path = os.path.join(folder, f"build_{name}.bin")
        cases.append((f"build:{name}", "bin", _bin(path, data)))
    return cases


def inflation(folder: str, scale: int) -> List[Case]:
    """Zip members that inflate far beyond the file."""
    inflated = (32 << 20) * scale
    cases = []
    zeros = np.zeros(1 << 20, np.uint8).tobytes()

    def deflated(path, member, declared):
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr("archive/data.pkl", torch_files.pickle_bytes(
                {"w": torch_files.Tensor("0", 0, (4,), (1,))},
                {"0": "FloatStorage"}, {"0": declared}))
            archive.writestr("archive/byteorder", "little")
            with archive.open(member, "w", force_zip64=True) as out:
                for _ in range(inflated >> 20):
                    out.write(zeros)
        return path

    # The pickle declares 4 floats; the member inflates to `inflated`.
    cases.append(("inflation:storage", "bin", deflated(
        os.path.join(folder, "inflate_storage.bin"), "archive/data/0", 4)))
    # The pickle declares what the member inflates to (a compressed
    # storage: torch.save never compresses).
    cases.append(("inflation:declared", "bin", deflated(
        os.path.join(folder, "inflate_declared.bin"), "archive/data/0",
        inflated // 4)))
    # data.pkl itself inflates.
    path = os.path.join(folder, "inflate_pickle.bin")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("archive/data.pkl", "w", force_zip64=True) as out:
            out.write(b"\x80\x02(")
            for _ in range(inflated >> 20):
                out.write(b"N" * len(zeros))
    cases.append(("inflation:pickle", "bin", path))
    return cases


def zero_stride(folder: str, scale: int) -> List[Case]:
    """A small file whose views repeat storage elements far beyond it."""
    count = 8 * scale
    path = os.path.join(folder, "zero_stride.bin")
    torch_files.write(
        path,
        {f"w{i}": torch_files.Tensor("0", 0, (8191, 8191), (0, 0))
         for i in range(count)},
        {"0": np.ones(4, np.float32)})
    cases = [("zero_stride:state_dict", "bin", path)]
    # The same arrays beside a real model's: names it has no place for.
    model = os.path.join(folder, "zero_stride_model")
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_model_bin"), model)
    weights = os.path.join(model, "pytorch_model.bin")
    arrays = torch_files_arrays(weights)
    tensors = {name: torch_files.Tensor(str(i), 0, a.shape,
                                        torch_files.contiguous(a.shape))
               for i, (name, a) in enumerate(arrays.items())}
    storages = {str(i): a.reshape(-1) for i, a in enumerate(arrays.values())}
    for i in range(count):
        tensors[f"extra.{i}"] = torch_files.Tensor("0", 0, (8191, 8191),
                                                   (0, 0))
    torch_files.write(weights, tensors, storages)
    cases.append(("zero_stride:model", "model", model))
    return cases


def torch_files_arrays(path: str) -> Dict[str, np.ndarray]:
    """A fixture's arrays, read by the checked reader."""
    from keras_vit.checkpoint.formats import torch_pickle  # noqa: E402 (child)

    return torch_pickle.read_without_torch(path)


def _index_folder(folder: str, name: str, weight_map) -> str:
    model = os.path.join(folder, name)
    os.makedirs(model)
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier", "config.json"),
                model)
    with open(os.path.join(model, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    return model


def _keys() -> List[str]:
    import safetensors  # noqa: E402 (child)

    with safetensors.safe_open(os.path.join(
            FIXTURES, "hf_vit_classifier", "model.safetensors"), "np") as f:
        return list(f.keys())


def path_escape(folder: str, scale: int) -> List[Case]:
    """Shards outside the model's folder: each a complete, valid model, so
    that loading it would succeed if the path were followed."""
    source = os.path.join(FIXTURES, "hf_vit_classifier", "model.safetensors")
    other = os.path.join(folder, "other")
    os.makedirs(other)
    shutil.copy(source, other)
    keys = _keys()
    cases = []
    for label, shard in (("parent", "../other/model.safetensors"),
                         ("absolute", os.path.join(other,
                                                   "model.safetensors")),
                         ("inner_parent", "sub/../../other/"
                                          "model.safetensors")):
        model = _index_folder(folder, f"escape_{label}",
                              dict.fromkeys(keys, shard))
        cases.append((f"escape:{label}", "model", model))
    # A shard that is a link inside the folder pointing out of it.
    model_link = _index_folder(folder, "escape_link_index",
                               dict.fromkeys(keys, "shard.safetensors"))
    os.symlink(os.path.join(other, "model.safetensors"),
               os.path.join(model_link, "shard.safetensors"))
    cases.append(("escape:link", "model", model_link))
    # A Hugging Face cache whose snapshot links into another repository.
    snapshot = _hf_cache(folder, "models--a--b", "models--c--d", keys)
    cases.append(("escape:other_repository", "model", snapshot))
    return cases


def _hf_cache(folder: str, repo: str, blobs_repo: str, keys) -> str:
    """A Hugging Face cache repository whose snapshot's shard links to
    `blobs_repo`'s blobs (the repository itself for a normal cache)."""
    hub = os.path.join(folder, "hf", "hub")
    blobs = os.path.join(hub, blobs_repo, "blobs")
    os.makedirs(blobs, exist_ok=True)
    blob = os.path.join(blobs, "0123abcd")
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier",
                             "model.safetensors"), blob)
    snapshot = os.path.join(hub, repo, "snapshots", "c0ffee")
    os.makedirs(snapshot)
    os.makedirs(os.path.join(hub, repo, "blobs"), exist_ok=True)
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier", "config.json"),
                snapshot)
    shard = "model-00001-of-00001.safetensors"
    os.symlink(os.path.relpath(blob, snapshot), os.path.join(snapshot, shard))
    with open(os.path.join(snapshot, "model.safetensors.index.json"),
              "w") as f:
        json.dump({"weight_map": dict.fromkeys(keys, shard)}, f)
    return snapshot


def broken_json(folder: str, scale: int) -> List[Case]:
    depth = 100000 * scale
    cases = []
    for label, index in (("no_weight_map", {"metadata": {}}),
                         ("weight_map_list", {"weight_map": ["a"]}),
                         ("shard_not_string", {"weight_map": {"w": 3}}),
                         ("not_safetensors", {"weight_map": {
                             "w": "config.json"}})):
        model = _index_folder(folder, f"index_{label}", {})
        with open(os.path.join(model, "model.safetensors.index.json"),
                  "w") as f:
            json.dump(index, f)
        cases.append((f"index:{label}", "model", model))
    model = _index_folder(folder, "index_deep", {})
    with open(os.path.join(model, "model.safetensors.index.json"), "w") as f:
        f.write("[" * depth + "]" * depth)
    cases.append(("index:deep", "model", model))
    for label, text in (("deep", '{"a": ' + "[" * depth + "]" * depth + "}"),
                        ("list", "[1, 2, 3]"),
                        ("string", '"vit"'),
                        ("not_utf8", None)):
        model = os.path.join(folder, f"config_{label}")
        shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), model)
        with open(os.path.join(model, "config.json"), "wb") as f:
            f.write(b"{\"a\": \"\xff\xfe\"}" if text is None
                    else text.encode())
        cases.append((f"config:{label}", "model", model))
    return cases


def broken_npz(folder: str, scale: int) -> List[Case]:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": "<f4", "fortran_order": False,
        "shape": (1 << (18 + scale), 1 << 20)})
    cases = []
    members = {
        "huge_shape": {"embedding/kernel.npy": header.getvalue() + b"\0" * 64},
        "not_npy": {"embedding/kernel.npy": b"not an array at all"},
        "other_member": {"notes.txt": b"hello"},
        "short_data": {"head/bias.npy": _npy(np.ones(10, np.float32))[:-8]},
    }
    for label, content in members.items():
        path = os.path.join(folder, f"npz_{label}.npz")
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in content.items():
                archive.writestr(name, data)
        cases.append((f"npz:{label}", "model", path))
    return cases


def empty_axes(folder: str, scale: int) -> List[Case]:
    """Arrays with an axis of length zero, whose other axis is huge: no
    bytes for the file's size to bound (an .npz member; a hub folder's
    safetensors file)."""
    import safetensors.numpy  # noqa: E402 (child)

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": "<f4", "fortran_order": False,
        "shape": (0, 1 << (26 + scale))})
    npz = os.path.join(folder, "empty_axis.npz")
    with zipfile.ZipFile(npz, "w") as archive:
        archive.writestr("head/kernel.npy", header.getvalue())
    model = os.path.join(folder, "empty_axis_hub")
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), model)
    weights = os.path.join(model, "model.safetensors")
    with safetensors.safe_open(weights, "np") as f:
        arrays = {k: f.get_tensor(k) for k in f.keys()}
    arrays["classifier.weight"] = np.zeros((0, 1 << (26 + scale)),
                                           np.float32)
    safetensors.numpy.save_file(arrays, weights)
    return [("empty:npz", "model", npz), ("empty:safetensors", "model", model)]


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def uris(folder: str, scale: int) -> List[Case]:
    """hf:// revisions that name no revision (the child runs with
    HF_HUB_OFFLINE=1 and HF_HUB_CACHE at a cache holding ORG/NAME, whose
    ref "dir" is a folder)."""
    return [(f"hf:{rev}", "model", f"hf://ORG/NAME@{rev}")
            for rev in ("..", ".", "x.lock", "a..b", "dir")]


def keras_lambda(folder: str, scale: int) -> List[Case]:
    import keras  # noqa: E402 (child, model mode)

    inputs = keras.Input((4,))
    outputs = keras.layers.Lambda(lambda x: x * 2.0)(inputs)
    path = os.path.join(folder, "lambda.keras")
    keras.Model(inputs, outputs).save(path)
    return [("keras:lambda", "model", path)]


def links_out(folder: str, scale: int) -> List[Case]:
    """A model folder's own files that link out of it, each to a valid
    model's file (so that following the link would load), and a Hugging
    Face cache whose snapshot file links into another repository's blobs/
    or whose refs/ walks out of its snapshots/."""
    other = os.path.join(folder, "elsewhere")
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_model_bin"), other)
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier",
                             "model.safetensors"), other)
    cases = []
    for label, fixture, name in (
            ("weights", "hf_vit_classifier", "model.safetensors"),
            ("config", "hf_vit_classifier", "config.json"),
            ("processor", "hf_vit_model_bin", "preprocessor_config.json")):
        model = os.path.join(folder, f"link_{label}")
        shutil.copytree(os.path.join(FIXTURES, fixture), model)
        os.remove(os.path.join(model, name))
        os.symlink(os.path.join(other, name), os.path.join(model, name))
        cases.append((f"link:{label}", "model", model))
    # A snapshot's weights (no index) linking to another repository's blob.
    hub = os.path.join(folder, "hf", "hub")
    blob = os.path.join(hub, "models--g--h", "blobs", "feed")
    os.makedirs(os.path.dirname(blob))
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier",
                             "model.safetensors"), blob)
    snapshot = os.path.join(hub, "models--i--j", "snapshots", "beef")
    os.makedirs(snapshot)
    os.makedirs(os.path.join(hub, "models--i--j", "blobs"))
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier", "config.json"),
                snapshot)
    os.symlink(os.path.relpath(blob, snapshot),
               os.path.join(snapshot, "model.safetensors"))
    cases.append(("link:other_repository_blob", "model", snapshot))
    # refs/main of ORG/ESCAPE names a snapshot of another repository (a
    # valid one), by a relative and by an absolute path.
    target = os.path.join(hub, "models--k--l", "snapshots", "cafe")
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_classifier"), target)
    for name, ref in (("ESCAPE", "../../models--k--l/snapshots/cafe"),
                      ("ABSOLUTE", target)):
        repo = os.path.join(hub, f"models--ORG--{name}")
        os.makedirs(os.path.join(repo, "refs"))
        os.makedirs(os.path.join(repo, "snapshots"))
        with open(os.path.join(repo, "refs", "main"), "w") as f:
            f.write(ref)
        cases.append((f"link:refs_{name.lower()}", "model",
                      f"hf://ORG/{name}"))
    return cases


def archive_bombs(folder: str, scale: int) -> List[Case]:
    """Archive members that inflate far beyond the file: a .keras file's
    config.json, an .npz's extra array (a valid header, zeros behind it)."""
    import keras  # noqa: E402 (child, model mode)

    inflated = (128 << 20) * scale
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    small = os.path.join(folder, "small.keras")
    model.save(small)
    with zipfile.ZipFile(small) as archive:
        stored = {n: archive.read(n) for n in archive.namelist()
                  if n != "config.json"}
    keras_bomb = os.path.join(folder, "config_bomb.keras")
    with zipfile.ZipFile(keras_bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in stored.items():
            archive.writestr(member, data)
        with archive.open("config.json", "w", force_zip64=True) as out:
            out.write(b'{"a": "')
            for _ in range(inflated >> 20):
                out.write(b" " * (1 << 20))
            out.write(b'"}')
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {
        "descr": "<f4", "fortran_order": False,
        "shape": (inflated // 4,)})
    npz_bomb = os.path.join(folder, "extra_bomb.npz")
    arrays = _npz_members()
    with zipfile.ZipFile(npz_bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in arrays.items():
            archive.writestr(member, data)
        with archive.open("extra.npy", "w", force_zip64=True) as out:
            out.write(header.getvalue())
            for _ in range(inflated >> 20):
                out.write(np.zeros(1 << 18, np.float32).tobytes())
    # An extra member Keras's format has no place for (it would extract
    # it to disk).
    extra = os.path.join(folder, "extra_member.keras")
    with zipfile.ZipFile(extra, "w") as archive:
        for member, data in stored.items():
            archive.writestr(member, data)
        archive.writestr("config.json", zipfile.ZipFile(small).read(
            "config.json"))
        archive.writestr("payload.bin", b"\0" * 1024)
    return [("bomb:keras_config", "model", keras_bomb),
            ("bomb:npz_extra", "model", npz_bomb),
            ("bomb:keras_extra_member", "model", extra)]


def _npz_members() -> Dict[str, bytes]:
    """A tiny official-layout model's .npz members (name.npy -> bytes)."""
    import keras_vit  # noqa: E402 (child, model mode)
    from keras_vit.checkpoint import weights  # noqa: E402

    model = keras_vit.create_model(None, num_classes=3, image_size=16,
                                   patch_size=4, hidden_size=16,
                                   num_layers=1, num_heads=2, mlp_dim=32)
    return {f"{k}.npy": _npy(v)
            for k, v in weights.model_arrays(model).items()}


def keras_not_vit(folder: str, scale: int) -> List[Case]:
    """.keras files that are not a plain keras_vit model: a functional
    model of keras_vit's layers plus a Softmax on the logits (a user's
    model: loads as Keras saved it, a control), one whose top-level
    object is a layer, and one cut short."""
    import keras  # noqa: E402 (child, model mode)

    import keras_vit  # noqa: E402

    vit = keras_vit.create_model(None, num_classes=3, image_size=16,
                                 patch_size=4, hidden_size=16, num_layers=1,
                                 num_heads=2, mlp_dim=32)
    inputs = keras.Input((16, 16, 3))
    x = inputs
    for layer in vit.layers[1:]:
        x = layer(x)
    softmax = os.path.join(folder, "vit_softmax.keras")
    keras.Model(inputs, keras.layers.Softmax(name="probs")(x)).save(softmax)
    layer = os.path.join(folder, "layer_top.keras")
    with zipfile.ZipFile(softmax) as source, zipfile.ZipFile(
            layer, "w") as archive:
        archive.writestr("config.json", json.dumps(
            keras.saving.serialize_keras_object(keras.layers.Dense(3))))
        archive.writestr("metadata.json", source.read("metadata.json"))
        archive.writestr("model.weights.h5",
                         source.read("model.weights.h5"))
    cut = os.path.join(folder, "cut_short.keras")
    with open(softmax, "rb") as f:
        data = f.read()
    with open(cut, "wb") as f:
        f.write(data[: len(data) // 2])
    # Files of a few kB whose config.json declares a model of billions of
    # parameters: Keras would allocate them all before reading a weight.
    huge_vit = _with_config(vit, os.path.join(folder, "huge_vit.keras"),
                            lambda c: c["config"]["architecture"].update(
                                hidden_size=65536, num_layers=64,
                                mlp_dim=262144))
    # Small sizes but an image whose position table alone is 2^24 rows.
    huge_image = _with_config(vit, os.path.join(folder, "huge_image.keras"),
                              lambda c: c["config"]["architecture"].update(
                                  image_size=[32768, 32768], patch_size=8))
    dense = keras.Sequential([keras.Input((4096,)), keras.layers.Dense(2)])
    huge_dense = _with_config(dense, os.path.join(folder, "huge_dense.keras"),
                              lambda c: c["config"]["layers"][-1][
                                  "config"].update(units=1 << 20))
    return [("control:keras_softmax", "model", softmax),
            ("keras:layer_top", "model", layer),
            ("keras:cut_short", "model", cut),
            ("keras:huge_vit", "model", huge_vit),
            ("keras:huge_image", "model", huge_image),
            ("keras:huge_dense", "model", huge_dense)]


def _with_config(model, path: str, change: Callable) -> str:
    """`model` saved at `path` with its config.json changed by `change`
    (the weights as saved)."""
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        stored = {n: archive.read(n) for n in archive.namelist()}
    config = json.loads(stored["config.json"])
    change(config)
    stored["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in stored.items():
            archive.writestr(member, data)
    return path


def odd_configs(folder: str, scale: int) -> List[Case]:
    """Configs and files their library reads otherwise or refuses: .npz
    arrays of complex and void dtypes, a timm config whose qkv_bias=False
    or zero std the weights contradict, a 2-D patch kernel that timm's
    filter cannot reshape, a transformers file wrapped as a training
    checkpoint."""
    cases = []
    members = _npz_members()
    for label, array in (("complex", np.ones(3, np.complex64)),
                         ("void", np.zeros(3, "V8"))):
        path = os.path.join(folder, f"dtype_{label}.npz")
        with zipfile.ZipFile(path, "w") as archive:
            for member, data in members.items():
                if member != "head/bias.npy":
                    archive.writestr(member, data)
            archive.writestr("head/bias.npy", _npy(array))
        cases.append((f"dtype:{label}", "model", path))

    def timm(label, edit):
        model = os.path.join(folder, f"timm_{label}")
        shutil.copytree(os.path.join(FIXTURES, "timm_vit"), model)
        with open(os.path.join(model, "config.json")) as f:
            config = json.load(f)
        edit(config)
        with open(os.path.join(model, "config.json"), "w") as f:
            json.dump(config, f)
        cases.append((f"config:timm_{label}", "model", model))
        return model

    timm("qkv_bias_false", lambda c: c["model_args"].update(qkv_bias=False))
    timm("zero_std", lambda c: c["pretrained_cfg"].update(std=[0.2, 0, 0.2]))
    timm("nan_mean", lambda c: c["pretrained_cfg"].update(
        mean=[float("nan")] * 3))
    model = timm("kernel_2d_odd", lambda c: c["model_args"].update(
        patch_size=16))
    import safetensors.numpy  # noqa: E402 (child)

    weights = os.path.join(model, "model.safetensors")
    arrays = safetensors.numpy.load_file(weights)
    kernel = arrays["patch_embed.proj.weight"]
    arrays["patch_embed.proj.weight"] = kernel.reshape(kernel.shape[0], -1)
    safetensors.numpy.save_file(arrays, weights)
    wrapped = os.path.join(folder, "hf_wrapped")
    shutil.copytree(os.path.join(FIXTURES, "hf_vit_model_bin"), wrapped)
    weights = os.path.join(wrapped, "pytorch_model.bin")
    arrays = torch_files_arrays(weights)
    tensors = {name: torch_files.Tensor(str(i), 0, a.shape,
                                        torch_files.contiguous(a.shape))
               for i, (name, a) in enumerate(arrays.items())}
    storages = {str(i): a.reshape(-1) for i, a in enumerate(arrays.values())}
    data = torch_files.pickle_bytes(
        {"state_dict": collections.OrderedDict(tensors), "epoch": 3},
        dict.fromkeys(storages, "FloatStorage"),
        {k: v.size for k, v in storages.items()})
    torch_files.write(weights, tensors, storages, data_pkl=data)
    cases.append(("config:hf_wrapped", "model", wrapped))
    return cases


def controls(folder: str, scale: int) -> List[Case]:
    """Files that must load: a plain fixture, its safetensors split into an
    index with a shard, and a Hugging Face cache snapshot whose shard links
    to its own blobs/."""
    keys = _keys()
    shard = _index_folder(folder, "control_index",
                          dict.fromkeys(keys, "model-1.safetensors"))
    shutil.copy(os.path.join(FIXTURES, "hf_vit_classifier",
                             "model.safetensors"),
                os.path.join(shard, "model-1.safetensors"))
    return [
        ("control:folder", "model", os.path.join(FIXTURES,
                                                 "hf_vit_classifier")),
        ("control:bin", "model", os.path.join(FIXTURES, "hf_vit_model_bin")),
        ("control:index", "model", shard),
        ("control:hf_cache", "model",
         _hf_cache(folder, "models--e--f", "models--e--f", keys)),
    ]


# Builders whose files the "bin" reader alone reads (no Keras needed).
TORCH_KINDS: List[Callable] = [deep_nesting, build_on_records, inflation]
# Every kind of issue: the torch kinds and those read through load_model.
MODEL_KINDS: List[Callable] = [zero_stride, path_escape, broken_json,
                               broken_npz, uris, keras_lambda, links_out,
                               archive_bombs, keras_not_vit, odd_configs,
                               empty_axes]
