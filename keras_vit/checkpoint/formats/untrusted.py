"""Small, bounded readers for the parts of a downloaded model that are not
arrays: JSON files (config.json, preprocessor_config.json,
model.safetensors.index.json) and the file names they give.

- `read_json_object`: at most `MAX_JSON_BYTES`, lists and objects nested
  at most `MAX_JSON_NESTING` deep (Python's parser itself stops at the
  recursion limit), a JSON object at the top; anything else is one
  `UsageError` naming the file and the reason.
- `inside_folder`: the path a file name of such a JSON file (a shard of an
  index) refers to, refused unless it stays inside the model's folder:
  no absolute path, no `..`, and no symbolic link out of the folder. The
  one exception is the layout of the Hugging Face cache, whose snapshot
  files are links into the repository's own `blobs/`
  (`models--ORG--NAME/snapshots/REV/FILE -> ../../blobs/HASH`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any, Dict

from keras_vit.errors import UsageError

# A config.json with 21,843 class names is ~0.6 MB.
MAX_JSON_BYTES = 32 << 20
MAX_JSON_NESTING = 32

_SNAPSHOT = re.compile(r"^(?P<repo>.*[\\/]models--[^\\/]+)[\\/]snapshots"
                       r"[\\/][^\\/]+$")


def _nesting(value: Any) -> int:
    """How deep lists and objects nest in a parsed JSON value (without
    recursion)."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, depth = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, depth)
            if depth <= MAX_JSON_NESTING:
                todo.extend((child, depth + 1) for child in item)
    return deepest


def read_json_object(path: str) -> Dict[str, Any]:
    """The JSON object in `path`, bounded (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        UsageError: too large, nested too deep, not JSON, not UTF-8, or
            not an object at the top.
    """
    with open(path, "rb") as f:
        raw = f.read(MAX_JSON_BYTES + 1)
    if len(raw) > MAX_JSON_BYTES:
        raise UsageError(f"{path} is larger than {MAX_JSON_BYTES} bytes; "
                         "not a model's JSON file.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(f"{path} is not UTF-8 text: {error}.") from None
    try:
        value = json.loads(text)
    except RecursionError:  # json's parser stops at Python's limit
        value = None
        depth = sys.getrecursionlimit()
    except ValueError as error:
        raise UsageError(f"{path} is not valid JSON: {error}") from None
    else:
        depth = _nesting(value)
    if depth > MAX_JSON_NESTING:
        raise UsageError(f"{path} nests lists or objects more than "
                         f"{MAX_JSON_NESTING} deep; not a model's JSON "
                         "file.")
    if not isinstance(value, dict):
        raise UsageError(f"{path} holds a JSON {type(value).__name__}, not "
                         "an object of named fields.")
    return value


def inside_folder(folder: str, name: Any, what: str) -> str:
    """The path of file `name` (as a JSON file in `folder` gives it),
    refused unless it stays inside `folder` (see the module docstring).

    Raises:
        UsageError: `name` is no relative file name inside the folder, or
            a link out of it.
    """
    if not isinstance(name, str) or not name or "\0" in name:
        raise UsageError(f"{what} names {name!r}, not a file name.")
    parts = re.split(r"[\\/]", name)
    if os.path.isabs(name) or name.startswith(("/", "\\")) or ".." in parts \
            or re.match(r"^[A-Za-z]:", name):
        raise UsageError(
            f"{what} names {name!r}, outside the model's folder {folder}; "
            "a model's files must lie in its own folder."
        )
    path = os.path.join(folder, *parts)
    real = os.path.realpath(path)
    roots = [os.path.realpath(folder)]
    snapshot = _SNAPSHOT.match(os.path.abspath(folder))
    if snapshot:  # the Hugging Face cache: snapshot files link to blobs/
        roots.append(os.path.realpath(
            os.path.join(snapshot.group("repo"), "blobs")))
    if not any(os.path.commonpath([real, root]) == root for root in roots):
        raise UsageError(
            f"{what} names {name!r}, a link to {real}, outside the model's "
            f"folder {folder}; a model's files must lie in its own folder."
        )
    return path
