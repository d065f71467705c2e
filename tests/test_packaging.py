"""Installs bring exactly one TensorFlow (setup.py): `tensorflow` by default,
`tensorflow-tpu` for a TPU VM build (KERAS_VIT_TENSORFLOW=tensorflow-tpu),
never both; and the versions pip resolves are within the tested bounds.

The resolution tests run `pip install --dry-run --report` against the
package index and skip, with their reason, when it cannot be reached.
"""

import importlib
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from keras_vit.training import tpu_env

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Distributions that install the `tensorflow` module.
TENSORFLOWS = {
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-tpu",
    "tensorflow-intel", "tensorflow-macos", "tensorflow-aarch64",
    "tensorflow-cpu-aws", "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu",
    "tf-nightly-tpu", "intel-tensorflow",
}


def _setup_module():
    spec = importlib.util.spec_from_file_location(
        "keras_vit_setup", os.path.join(ROOT, "setup.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # setup() runs only as __main__
    return module


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _tensorflows(requirements):
    return sorted(_normal(Requirement(r).name) for r in requirements
                  if _normal(Requirement(r).name) in TENSORFLOWS)


@pytest.mark.parametrize("choice", ["tensorflow", "tensorflow-tpu"])
def test_each_build_names_exactly_one_tensorflow(choice):
    install, extras = _setup_module().requirements(choice)
    assert _tensorflows(install) == [choice]
    for name, requirements in extras.items():
        # An extra that named a TensorFlow (tensorflow[gcs-filesystem],
        # tensorflow-tpu) would bring a second one beside install_requires.
        # tensorflow-serving-api requires `tensorflow` itself: the README
        # installs it with --no-deps on a TPU VM.
        assert _tensorflows(requirements) == [], name
    assert ("tpu" in extras) == (choice == "tensorflow-tpu")


def test_an_unknown_choice_is_refused():
    with pytest.raises(SystemExit, match="use one of tensorflow, "
                       "tensorflow-tpu"):
        _setup_module().requirements("tensorflow-gpu")


def _index_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("choice, tensorflow", [
    (None, "tensorflow"),
    ("tensorflow-tpu", "tensorflow-tpu"),
])
def test_pip_resolves_one_tensorflow(tmp_path, choice, tensorflow):
    if not _index_reachable():
        pytest.skip("needs the package index (pypi.org) to resolve the "
                    "install; CI has it")
    env = dict(os.environ)
    env.pop("KERAS_VIT_TENSORFLOW", None)
    if choice:
        env["KERAS_VIT_TENSORFLOW"] = choice
    report = tmp_path / "report.json"
    run = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run",
         "--ignore-installed", "--disable-pip-version-check",
         "--report", str(report), ".[tpu,gcs]"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    installs = json.loads(report.read_text())["install"]
    resolved = {
        _normal(item["metadata"]["name"]): Version(item["metadata"]["version"])
        for item in installs
    }
    assert sorted(set(resolved) & TENSORFLOWS) == [tensorflow]
    if choice is None:
        # The default build has no `tpu` extra, and pip says so.
        assert "does not provide the extra 'tpu'" in run.stderr
        assert Version("2.21") <= resolved["tensorflow"] < Version("2.22")
    else:
        # The pair the TPU build pins (keras_vit/training/tpu_env.py).
        assert resolved[tensorflow] == Version(tpu_env.TENSORFLOW_TPU)
        assert resolved["libtpu"] == Version(tpu_env.LIBTPU)
    assert Version("3.15") <= resolved["keras"] < Version("3.16")
    # The package itself needs neither scipy, pillow nor matplotlib (the
    # tests and figures do: extras); scikit-learn brings scipy and
    # tensorboard pillow.
    (ours,) = [item["metadata"] for item in installs
               if _normal(item["metadata"]["name"]) ==
               "keras-vision-transformer"]
    needed = {_normal(Requirement(r).name)
              for r in ours.get("requires_dist", [])
              if "extra ==" not in r}
    assert not needed & {"scipy", "pillow", "matplotlib"}


@pytest.mark.parametrize("module", ["keras_vit.analysis.plots",
                                    "keras_vit.evaluation.reports"])
def test_missing_matplotlib_names_the_extra(monkeypatch, module):
    # None in sys.modules makes the import fail as if not installed.
    for name in ("matplotlib", "matplotlib.figure",
                 "matplotlib.backends.backend_agg"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ImportError,
                       match=r"pip install 'keras-vision-transformer"
                       r"\[figures\]'"):
        importlib.import_module(module)._figure(2.0, 2.0)
