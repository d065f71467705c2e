"""The bounded readers of a model's JSON files and shard names
(`keras_vit.checkpoint.formats.untrusted`): limits exactly where they are
said to be, and the Hugging Face cache's own links told apart from links
out of a model's folder."""

import os

import numpy as np
import pytest

from keras_vit.checkpoint.formats import untrusted
from keras_vit.errors import UsageError


def _write(path, text):
    path.write_text(text)
    return str(path)


def test_json_nesting_limit_is_exact(tmp_path):
    limit = untrusted.MAX_JSON_NESTING
    ok = '{"a": ' + "[" * (limit - 1) + "]" * (limit - 1) + "}"
    assert untrusted.read_json_object(_write(tmp_path / "ok.json", ok))
    deep = '{"a": ' + "[" * limit + "]" * limit + "}"
    with pytest.raises(UsageError, match=f"more than {limit} deep"):
        untrusted.read_json_object(_write(tmp_path / "deep.json", deep))
    # Deeper than Python's parser goes: the same one line.
    deeper = "[" * 100000 + "]" * 100000
    with pytest.raises(UsageError, match=f"more than {limit} deep"):
        untrusted.read_json_object(_write(tmp_path / "deeper.json", deeper))


def test_json_size_type_and_encoding(tmp_path, monkeypatch):
    monkeypatch.setattr(untrusted, "MAX_JSON_BYTES", 64)
    big = _write(tmp_path / "big.json", '{"a": "' + "x" * 60 + '"}')
    with pytest.raises(UsageError, match="larger than 64 bytes"):
        untrusted.read_json_object(big)
    for text, kind in (("[1]", "list"), ('"s"', "str"), ("3", "int"),
                       ("null", "NoneType")):
        path = _write(tmp_path / "v.json", text)
        with pytest.raises(UsageError, match=f"holds a JSON {kind}, not an "
                           "object"):
            untrusted.read_json_object(path)
    path = tmp_path / "bad.json"
    path.write_bytes(b'{"a": "\xff"}')
    with pytest.raises(UsageError, match="is not UTF-8 text"):
        untrusted.read_json_object(str(path))
    with pytest.raises(UsageError, match="is not valid JSON"):
        untrusted.read_json_object(_write(tmp_path / "cut.json", '{"a": '))


def test_shard_names_stay_inside_the_folder(tmp_path):
    folder = tmp_path / "model"
    (folder / "sub").mkdir(parents=True)
    (folder / "sub" / "s.safetensors").write_bytes(b"")
    (tmp_path / "outside.safetensors").write_bytes(b"")
    assert untrusted.inside_folder(str(folder), "sub/s.safetensors", "i") == \
        os.path.join(str(folder), "sub", "s.safetensors")
    for name in ("../outside.safetensors", str(tmp_path / "outside"),
                 "sub/../../outside.safetensors", "..\\outside", "C:x",
                 "", None, 3):
        with pytest.raises(UsageError, match="index.json names"):
            untrusted.inside_folder(str(folder), name, "index.json")
    os.symlink(tmp_path / "outside.safetensors", folder / "link.safetensors")
    with pytest.raises(UsageError, match="a link to .*outside the model's "
                       "folder"):
        untrusted.inside_folder(str(folder), "link.safetensors", "i")


def test_hugging_face_cache_links_into_own_blobs_only(tmp_path):
    hub = tmp_path / "hub"
    for repo in ("models--a--b", "models--c--d"):
        (hub / repo / "blobs").mkdir(parents=True)
        (hub / repo / "blobs" / "f00d").write_bytes(b"")
    snapshot = hub / "models--a--b" / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    os.symlink("../../blobs/f00d", snapshot / "own.safetensors")
    os.symlink("../../../models--c--d/blobs/f00d",
               snapshot / "other.safetensors")
    assert untrusted.inside_folder(str(snapshot), "own.safetensors", "i")
    with pytest.raises(UsageError, match="models--c--d/blobs/f00d, outside"):
        untrusted.inside_folder(str(snapshot), "other.safetensors", "i")
    # The same links outside a cache's layout are links out of the folder.
    plain = tmp_path / "plain" / "model"
    plain.mkdir(parents=True)
    os.symlink(hub / "models--a--b" / "blobs" / "f00d",
               plain / "own.safetensors")
    with pytest.raises(UsageError, match="outside the model's folder"):
        untrusted.inside_folder(str(plain), "own.safetensors", "i")


def test_real_dtypes_include_bfloat16_not_raw_bytes():
    # ml_dtypes' bfloat16 (numpy kind 'V', as safetensors reads BF16) is a
    # real number; raw 2-byte voids, complex numbers and strings are not.
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dtype in (ml_dtypes.bfloat16, np.float16, np.float64, np.int32):
        untrusted.check_real_dtype(dtype, "m.safetensors", "w")
    for dtype in ("V2", np.complex64, "U3"):
        with pytest.raises(UsageError, match=r"m.safetensors: array 'w' has"
                           r" dtype .*, not a real number"):
            untrusted.check_real_dtype(dtype, "m.safetensors", "w")
