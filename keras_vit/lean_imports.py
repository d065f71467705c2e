"""Leaves out, in a command's process, three packages that TensorFlow and
Keras import for features the commands never use, which take seconds of
every command's start.

- scikit-learn, which Keras's scikit-learn wrappers (`keras.wrappers`)
  import if they can;
- matplotlib, which Keras's image-gallery plots (`keras.visualization`)
  import if they can;
- JAX, which TensorFlow Lite's converter from JAX functions and Keras's
  Orbax checkpoint callback import if they can (where JAX is loaded
  already, as under Keras's JAX backend once Keras is, they find it).

Each of those modules imports the package in a `try` and sets it to None
on ImportError, so the feature alone is unavailable and nothing else
changes. Only an import made by those modules is refused: the commands'
own imports of scikit-learn (`load_digits`, where its digits file is not
where `keras_vit.data.digits` looks), of matplotlib (the training curves)
and of JAX (the JAX backend, whose Keras modules import it) load the
packages as usual. No maintained library does this; the
standard library's import hooks do it in a few lines. Standard library
only; `import keras_vit` installs it in a command's process
(`keras_vit.quiet_start.is_command`), before anything loads Keras.
"""

from __future__ import annotations

import importlib.abc
import sys

# Package -> the modules whose imports of it are refused (prefixes).
SKIPPED = {
    "sklearn": ("keras.src.wrappers.",),
    "matplotlib": ("keras.src.visualization.",),
    "jax": ("tensorflow.lite.python.", "keras.src.callbacks.orbax_checkpoint"),
}


def importer_of(frame) -> str:
    """The name of the module whose code runs the import in progress at
    `frame` (the first frame outside the import machinery), or ""."""
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name != "importlib" and not name.startswith(
                ("importlib.", "_frozen_importlib")):
            return name
        frame = frame.f_back
    return ""


class _Skip(importlib.abc.MetaPathFinder):
    """Refuses `SKIPPED`'s packages to the modules it names."""

    def find_spec(self, name, path=None, target=None):
        del path, target
        prefixes = SKIPPED.get(name.partition(".")[0])
        if prefixes and importer_of(sys._getframe(1)).startswith(prefixes):
            raise ImportError(f"{name} is left out of this command's "
                              "process (keras_vit.lean_imports)", name=name)
        return None


def install() -> None:
    """Installs the hook first on `sys.meta_path` (once)."""
    if not any(isinstance(f, _Skip) for f in sys.meta_path):
        sys.meta_path.insert(0, _Skip())
