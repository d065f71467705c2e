r"""Trains a Vision Transformer from a config: `keras-vit-train` (same flags).

    python train.py --config=digits --workdir=/tmp/vit_digits

See keras_vit/commands/train.py (or `python train.py --help`) for every flag.
"""

import contextlib
import importlib.util
import os
import sys


def _quiet_start():
    # Loaded by its path: importing keras_vit would load TensorFlow, whose
    # start-up notices it holds back. find_spec of the top-level package
    # runs none of its code.
    package = importlib.util.find_spec("keras_vit")
    if package is None or not package.submodule_search_locations:
        return contextlib.nullcontext()
    path = os.path.join(list(package.submodule_search_locations)[0],
                        "quiet_start.py")
    if not os.path.exists(path):
        return contextlib.nullcontext()
    spec = importlib.util.spec_from_file_location("_quiet_start", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.quiet_tensorflow_start()


if __name__ == "__main__":
    with _quiet_start():
        from keras_vit.commands.train import main
    sys.exit(main())
