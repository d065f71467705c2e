"""What a command prints and ends with, before any flag is checked:
`--help`'s text (`print_out`) and `--list_models[=PATTERN]` of every
command that takes --model: the released models, one per line (no --model
or other required flag needed).

A row gives the size, the resolution the file was trained at, the head's
width, the training data and what `--model` takes (the short name where
there is one, "ViT-B_16", with the full name in the bucket after it).
PATTERN is a shell pattern matched against the full name,
case-insensitively (`keras_vit.list_models`'s): '*B_16*', 'augreg/*'.
"""

from __future__ import annotations

import os
import re
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from absl import flags

from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # what type checkers and the import contracts read
    from keras_vit.checkpoint.zoo import catalog
else:  # imported by --list_models alone (it loads no Keras)
    catalog = lazy_module("keras_vit.checkpoint.zoo.catalog")

FLAG = "list_models"
HELP = ("Print the released models a --model name downloads (with "
        "--list_models=PATTERN, those whose name matches the shell pattern, "
        "e.g. '*B_16*' or 'augreg/*'; --list_models alone: all), then end.")


def stdout_closed() -> None:
    """After a BrokenPipeError on stdout (`... | head`: the reader stopped):
    Python's own advice, nothing more goes to the closed pipe, so that the
    command ends quietly."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def print_out(text: str) -> int:
    """Prints `text` on stdout (a reader that stops early is no error);
    returns the exit status, 0."""
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `--help | head`
        stdout_closed()
    return 0


def requested(values: flags.FlagValues, args: Sequence[str]
              ) -> Optional[str]:
    """The pattern that `--list_models[=PATTERN]` in `args` asks for ("":
    every model), or None where the command has no such flag or it is not
    given. The pattern is given with '=' only."""
    if FLAG not in values:
        return None
    for i, arg in enumerate(args):
        if arg == "--":
            return None
        arg = arg[1:] if arg.startswith("--") else arg  # absl: - or --
        if arg.startswith(f"-{FLAG}="):
            return arg.split("=", 1)[1]
        if arg == f"-{FLAG}":
            # A pattern after a space where it is one ('*B_16*'), not an
            # image of keras-vit-predict's.
            after = args[i + 1] if i + 1 < len(args) else ""
            return after if re.search(r"[*?[]", after) and not \
                os.path.exists(after) else ""
    return None


def table(pattern: str) -> str:
    """The released models matching `pattern` ("": all), a header line
    first. Raises UsageError where none matches."""
    models = catalog.list_models(pattern or None)
    if not models:
        every = len(catalog.list_models())
        raise UsageError(
            f"no released model's name matches {pattern!r} (a shell "
            f"pattern over names such as imagenet21k/ViT-B_16: "
            f"'*B_16*', 'augreg/*'); --{FLAG} alone lists all {every}.")
    rows = [("size", "image", "classes", "trained on", "--model")]
    for info in models:
        name = catalog.download_name(info)
        rows.append((info.variant, str(info.image_size),
                     "" if info.num_classes is None
                     else str(info.num_classes), info.pretrained_on,
                     name + ("" if name == info.name else f" ({info.name})")))
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    return "\n".join(
        "  ".join([r[c].ljust(widths[c]) for c in range(4)] + [r[4]])
        for r in rows)
