"""`lazy_module(name)`: a module imported on first use, so that a command's
`--help` (its flags) loads no Keras or TensorFlow.

A command module names the modules its work needs as

    if TYPE_CHECKING:  # what type checkers and the import contracts read
        import tensorflow as tf
    else:
        tf = lazy_module("tensorflow")

and uses them as before (`tf.constant(...)`): the import runs at the first
attribute read, at the latest when the command starts working.
"""

from __future__ import annotations

from types import ModuleType

from keras_vit import errors


class LazyModule:
    """Stands for module `name` and imports it on first attribute read."""

    def __init__(self, name: str):
        self._lazy_name = name

    def _module(self) -> ModuleType:
        return errors.import_module(self._lazy_name)

    def __getattr__(self, attr: str):
        if attr.startswith("_lazy_"):
            raise AttributeError(attr)
        return getattr(self._module(), attr)

    def __repr__(self) -> str:
        return f"<lazy module {self._lazy_name!r}>"


def lazy_module(name: str) -> LazyModule:
    """Module `name` (dotted), imported on first attribute read."""
    return LazyModule(name)
