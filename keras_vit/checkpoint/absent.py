"""What a model string that names nothing means, said in one line before
anything loads: `check_there` runs in the commands before TensorFlow
(`keras_vit.commands.flags.model_source`), `missing` in the resolver
(`keras_vit.checkpoint.resolve`) for what only it finds absent. Plain
Python: the catalog of released names and the sizes."""

from __future__ import annotations

import os
import re

from keras_vit.checkpoint.zoo import catalog
from keras_vit.config import SOURCE_KINDS
from keras_vit.errors import UsageError
from keras_vit.variants import VARIANTS, closest_variants

# What reads as a model size (Ti/16, B/32, ...), not a path: a family and
# a patch size, no folder or file name around them.
SIZE_LIKE = re.compile(r"^(R\d*\+)?[A-Za-z]{1,2}/\d{1,2}$")


def _released_of_that_name(text: str, release) -> str:
    """How to download `release`, the released file that the missing path
    `text` names, or each released file of that file name (ViT-B_16.npz
    is in imagenet21k/, imagenet21k+imagenet2012/ and sam/)."""
    named = text[:-len(".npz")] if text.endswith(".npz") else text
    if not named.endswith(release.name):  # by its file name alone
        stem = os.path.basename(release.name)
        same = [m for m in catalog.list_models()
                if os.path.basename(m.name) == stem]
        if len(same) > 1:
            names = []
            for m in same:
                short = catalog.download_name(m)
                names.append(short if short == m.name
                             else f"{short} ({m.name})")
            return ("To download a released file of that name, give its "
                    f"name: {', '.join(names[:-1])} or {names[-1]}.")
    return (f"To download the released {release.name}, give its name: "
            f"{catalog.download_name(release)}.")


def missing(text: str) -> UsageError:
    """The one line for a model string that names nothing there: a size
    (not a model with weights), a released file's path (never
    downloaded), a misspelt size, or no file and no released name, each
    with the closest names."""
    if text in VARIANTS:
        return UsageError(_size_message(text))
    parts = text.replace("\\", "/").rstrip("/").split("/")
    release = next(filter(None, (catalog.lookup(t) for t in (
        text, "/".join(parts[-2:]), parts[-1]))), None)
    if release is not None and catalog.is_path(text):
        return UsageError(
            f"{text}: no such local file (a path is never downloaded). "
            + _released_of_that_name(text, release))
    if SIZE_LIKE.match(text):
        close = closest_variants(text)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        return UsageError(
            f"{text}: no such size, file or folder.{hint} The sizes are "
            f"{', '.join(VARIANTS)} (keras-vit-train trains one from "
            f"scratch); a model is {SOURCE_KINDS}.")
    close = catalog.suggestions(text)
    hint = f" Did you mean {', '.join(close)}?" if close else ""
    return UsageError(
        f"{text}: no such file or folder, and no released model's name."
        f"{hint} A model is {SOURCE_KINDS}."
    )


def _size_message(variant: str) -> str:
    release = catalog.pretrained(variant)
    weights = (f"; the released pre-trained {variant} is "
               f"{catalog.download_name(release)}") if release else ""
    return (f"{variant} is a size, not a model with weights{weights} "
            f"(keras-vit-train --model={variant} trains one from scratch).")


def check_there(text: str) -> None:
    """`missing(text)` raised where the resolver would raise it for a
    local path (no URL, nothing the cache downloads: `catalog.is_download`)
    with nothing there; else nothing, the rest left to the resolver."""
    text = os.path.expanduser(text.strip())
    if not text or "://" in text or os.path.exists(text) or (
            catalog.is_download(text) or catalog.is_kaggle(text)):
        return
    raise missing(text)
