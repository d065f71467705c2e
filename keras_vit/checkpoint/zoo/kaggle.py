"""keras-hub's ViT presets on Kaggle: `kaggle://OWNER/MODEL/FRAMEWORK/
VARIATION[/VERSION]` handles and keras-hub's preset names
(`vit_base_patch16_224_imagenet`, ...: `PRESETS`), made a local preset
folder as keras-hub makes them.

A versioned handle whose folder kagglehub's cache holds whole
($KAGGLEHUB_CACHE, else ~/.cache/kagglehub; `models/OWNER/MODEL/
FRAMEWORK/VARIATION/VERSION`, marked complete) is read from there without
network: a version on Kaggle never changes. Anything else is downloaded
whole with kagglehub's `model_download` (the `kaggle` extra), which keeps
it in that cache, unless KERAS_VIT_OFFLINE is set; offline, a folder that
keras-hub downloaded file by file is read when each of its files is
marked complete and none that it reads is missing. The folder is then read by
`keras_vit.checkpoint.hub.keras_preset`.
"""

from __future__ import annotations

import contextlib
import logging as std_logging
import os
import re
from typing import Optional, Tuple

from absl import logging

from keras_vit.checkpoint.hub import keras_preset
from keras_vit.checkpoint.zoo import catalog
from keras_vit.errors import UsageError, one_line

PREFIX = catalog.KAGGLE_PREFIX
PRESETS = catalog.KERAS_HUB_PRESETS
CACHE_ENV = "KAGGLEHUB_CACHE"
_SLUG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def parse(text: str) -> Tuple[str, Optional[int]]:
    """(the handle without its version, the version or None) of a
    `kaggle://` handle or preset name."""
    handle = PRESETS.get(text) or text[len(PREFIX):].strip("/")
    parts = handle.split("/")
    version = None
    if len(parts) == 5:
        if not re.fullmatch(r"[1-9][0-9]{0,8}", parts[4]):
            raise UsageError(f"{text}: the version {parts[4]!r} is not a "
                             "model version (1, 2, ...: kaggle://OWNER/"
                             "MODEL/FRAMEWORK/VARIATION/VERSION).")
        version = int(parts.pop())
    if len(parts) != 4 or not all(_SLUG.match(p) for p in parts):
        raise UsageError(
            f"{text} is not a Kaggle model handle: kaggle://OWNER/MODEL/"
            "FRAMEWORK/VARIATION[/VERSION], e.g. "
            f"{PREFIX}{PRESETS['vit_base_patch16_224_imagenet']}.")
    return "/".join(parts), version


def cache_folder() -> str:
    """kagglehub's cache: $KAGGLEHUB_CACHE (as kagglehub reads it), else
    ~/.cache/kagglehub."""
    if CACHE_ENV in os.environ:
        return os.environ[CACHE_ENV]
    return os.path.join(os.path.expanduser("~"), ".cache", "kagglehub")


def _cached(handle: str, version: Optional[int],
            offline: bool) -> Optional[str]:
    """The cached folder of a versioned handle: downloaded whole (its
    bundle marked complete); offline also one that keras-hub downloaded
    file by file, when every file there is marked complete and nothing it
    reads is missing (a classifier's task.json without task.weights.h5,
    no pixel converter: files keras-hub had not needed yet)."""
    if version is None:
        return None
    base = os.path.join(cache_folder(), "models", *handle.split("/"))
    folder = os.path.join(base, str(version))
    if not os.path.isfile(os.path.join(folder, keras_preset.MODEL_WEIGHTS)):
        return None
    if os.path.exists(os.path.join(base, f"{version}.complete")):
        return folder
    if not offline:
        return None  # downloaded whole by kagglehub instead
    files = os.listdir(folder)
    marked = all(os.path.exists(os.path.join(
        base, ".complete", str(version), f"{name}.complete"))
        for name in files)
    needed = {keras_preset.CONFIG_FILE} | (
        {keras_preset.TASK_WEIGHTS} if keras_preset.TASK_FILE in files
        else set())
    pixels = {"task.json", "preprocessor.json", "image_converter.json"}
    whole = needed <= set(files) and pixels & set(files)
    return folder if marked and whole else None


def preset_folder(text: str, offline: bool) -> str:
    """The local keras-hub preset folder of a `kaggle://` handle or preset
    name `text`, from kagglehub's cache or downloaded into it.

    Raises:
        UsageError: a malformed handle, kagglehub not installed, a
            download that fails (or is not allowed offline), or a folder
            that is no keras-hub preset.
    """
    handle, version = parse(text)
    folder = _cached(handle, version, offline)
    shown = f"{handle}/{version}" if version is not None else handle
    if folder is None:
        if offline:
            raise UsageError(
                f"{text} is not in kagglehub's cache ({cache_folder()}) "
                f"and KERAS_VIT_OFFLINE is set: unset it to download "
                f"{shown}, or download the preset where there is network "
                "and give its folder.")
        folder = _download(text, shown)
    if not keras_preset.is_preset(folder):
        raise UsageError(
            f"{text} ({folder}) is not a keras-hub preset (its config.json "
            "was not written by keras-hub): only keras-hub ViT presets are "
            "read from Kaggle.")
    return folder


def _download(text: str, handle: str) -> str:
    try:
        import kagglehub  # optional: the kaggle extra
    except ImportError:
        raise UsageError(
            f"{text} is downloaded with kagglehub, which is not installed: "
            "pip install -e \".[kaggle]\" (or pip install kagglehub), or "
            "give the preset's folder.") from None
    try:
        with _quiet_info():
            return kagglehub.model_download(handle)
    except Exception as error:  # noqa: BLE001 (network, HTTP, auth...)
        raise UsageError(
            f"{text}: kagglehub could not download {handle} "
            f"({type(error).__name__}: {one_line(error)}); check the "
            "handle and the network connection, and for a private or "
            "gated model kagglehub's login (kagglehub.login()) and the "
            "model's terms on Kaggle.") from None


@contextlib.contextmanager
def _quiet_info():
    """kagglehub's INFO lines ("Downloading to FILE...", printed on stdout,
    where a command's answers go) held back unless the run logs at debug
    level (--verbose); its progress bars stay. kagglehub sets its logger's
    level when imported (KAGGLEHUB_VERBOSITY), so it is raised here, for
    the download only, and put back."""
    logger = std_logging.getLogger("kagglehub")
    previous = logger.level
    if logging.get_verbosity() < logging.DEBUG:
        logger.setLevel(max(previous, std_logging.WARNING))
    try:
        yield
    finally:
        logger.setLevel(previous)
