"""keras_vit.lean_imports: a command's process loads neither scikit-learn,
matplotlib nor JAX for Keras's and TensorFlow's optional features, and
still loads each where the command's own work imports it."""

import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from tests.test_quiet import _env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIPPED = ("sklearn", "matplotlib", "jax")

# Runs a command as its console script does; prints, at the end, which of
# SKIPPED the process loaded.
PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m "
    f"in sys.modules if m.split('.')[0] in {SKIPPED!r}}}), file=sys.stderr))\n"
    "sys.argv[0] = 'keras-vit-{name}'\n"
    "from keras_vit.commands.{name} import main\n"
    "sys.exit(main())\n")


def _probe(name, args, cwd, **env):
    result = subprocess.run(
        [sys.executable, "-c", PROBE.replace("{name}", name), *args],
        capture_output=True, text=True, env=_env(**env), cwd=str(cwd),
        timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = [line for line in result.stderr.splitlines()
              if line.startswith("LOADED ")]
    return result, loaded[-1]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import keras_vit

    root = tmp_path_factory.mktemp("lean")
    keras_vit.create_model(
        None, num_classes=3, image_size=32, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16).save(str(root / "m.keras"))
    Image.fromarray(np.zeros((20, 24, 3), np.uint8)).save(root / "x.png")
    return root


def test_a_command_loads_keras_and_tensorflow_without_them(model):
    """keras-vit-predict loads Keras and TensorFlow and predicts, and
    loaded none of the three."""
    result, loaded = _probe("predict", ["--model=m.keras", "x.png"], model)
    assert result.stdout.startswith("x.png: "), result.stdout
    assert loaded == "LOADED []", result.stderr[-3000:]


def test_only_the_optional_imports_of_those_modules_are_refused(tmp_path):
    """The hook refuses scikit-learn to Keras's wrappers and JAX to
    TensorFlow Lite (each imports it in a `try`, as here), and the
    program's own imports of all three load them as usual."""
    code = (
        "import importlib.util, sys\n"
        # The module alone: `import keras_vit` outside a command would
        # load Keras (and with it the three) first.
        "spec = importlib.util.spec_from_file_location('lean', "
        f"{os.path.join(ROOT, 'keras_vit', 'lean_imports.py')!r})\n"
        "lean = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(lean)\n"
        "lean.install()\n"
        "scope = {'__name__': 'keras.src.wrappers.fixes'}\n"
        "exec('try:\\n import sklearn\\nexcept ImportError:\\n sklearn = "
        "None', scope)\n"
        "assert scope['sklearn'] is None and 'sklearn' not in sys.modules\n"
        "scope = {'__name__': 'tensorflow.lite.python.util'}\n"
        "exec('try:\\n from jax import jit\\nexcept ImportError:\\n jit = "
        "None', scope)\n"
        "assert scope['jit'] is None and 'jax' not in sys.modules\n"
        "from sklearn.datasets import load_digits\n"
        "assert load_digits().images.shape == (1797, 8, 8)\n"
        "import matplotlib.pyplot\n"
        "import jax.numpy\n"
        "print('OK')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, env=_env(), cwd=str(tmp_path),
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "OK"
