"""Builds keras-vision-transformer; setup.cfg holds everything but one choice.

Exactly one TensorFlow distribution is installed. `tensorflow` and
`tensorflow-tpu` (the TPU VM build) both provide the `tensorflow` module,
and pip treats them as unrelated projects: a package that requires
`tensorflow`, installed beside `tensorflow-tpu`, brings a second
TensorFlow that overwrites the first one's files. A requirement cannot say
"tensorflow unless an extra is asked for", so the choice is made when the
package is built, from the environment:

    pip install -e .                                          # tensorflow
    KERAS_VIT_TENSORFLOW=tensorflow-tpu pip install -e ".[tpu]"  # TPU VM

setup.cfg's install_requires names the default (`tensorflow`, at the
bounds CI installs); for the TPU build that line becomes `tensorflow-tpu`
and the `tpu` extra (libtpu) exists, both pinned. The default build has
no `tpu` extra, so that pip warns about `.[tpu]` rather than installing a
TensorFlow without TPU support. tests/test_packaging.py resolves both
builds with `pip install --dry-run --report`.
"""

import configparser
import os
import re

from setuptools import setup

CHOICE = "KERAS_VIT_TENSORFLOW"
# The distributions of the `tensorflow` module and their requirement.
# tensorflow-tpu follows TensorFlow's releases with a delay (its newest is
# 2.20.0) and asks for an open range of libtpu releases, of which the
# newest do not find the TPU with it; so the TPU build pins the pair it is
# tested with: tensorflow-tpu here, libtpu in setup.cfg's `tpu` extra
# (keras_vit/training/tpu_env.py holds the same pair and checks it at
# start-up; tests/test_tpu_env.py checks that all three agree).
TENSORFLOW = {
    "tensorflow": None,  # as setup.cfg says
    "tensorflow-tpu": "tensorflow-tpu==2.20.0",
}
TPU_EXTRA = "tpu"


def _lines(text: str):
    return [line.strip() for line in text.splitlines() if line.strip()]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def requirements(choice: str):
    """(install_requires, extras_require) of setup.cfg for the TensorFlow
    distribution `choice`."""
    if choice not in TENSORFLOW:
        raise SystemExit(
            f"{CHOICE}={choice!r}: use one of {', '.join(TENSORFLOW)} "
            "(tensorflow-tpu on a TPU VM)."
        )
    parser = configparser.ConfigParser()
    parser.read(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                             "setup.cfg"))
    install = _lines(parser["options"]["install_requires"])
    extras = {name: _lines(text) for name, text in
              parser["options.extras_require"].items()}
    if TENSORFLOW[choice] is None:
        del extras[TPU_EXTRA]
    else:
        install = [TENSORFLOW[choice] if _name(line) == "tensorflow" else line
                   for line in install]
    return install, extras


if __name__ == "__main__":
    install_requires, extras_require = requirements(
        os.environ.get(CHOICE, "tensorflow").strip()
    )
    setup(install_requires=install_requires, extras_require=extras_require)
