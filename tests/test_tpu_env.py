"""An install that finds the TPU (keras_vit/training/tpu_env.py): the TPU
build pins one tensorflow-tpu and libtpu pair, the same everywhere it is
named (setup.py, setup.cfg, the start-up check, docs/training.md);
start-up says which pair to install; a failed `--tpu=local` says what was
tried, TensorFlow's reason and the cause found on the machine, each cause
with its fix.

The TensorFlow reason below is the one tensorflow-tpu 2.20.0 gives on a
machine without a TPU (recorded from a real run on the CI machine, libtpu
0.0.14 installed, TPU_LOAD_LIBRARY=0);
`test_real_initialisation_failure_is_one_line` produces it again wherever
tensorflow-tpu is installed (.ci/run's TPU-build step).
"""

import os
import subprocess
import sys

import pytest

from keras_vit.training import cluster, tpu, tpu_env
from tests.test_packaging import _setup_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TF_REASON = ("NotFoundError: TPUs not found in the cluster. Failed in "
             "initialization: No matching devices found for "
             "'/device:TPU_SYSTEM:0' [Op:__inference__tpu_init_fn_9]")


def test_the_tpu_build_pins_the_tested_pair():
    install, extras = _setup_module().requirements("tensorflow-tpu")
    assert f"tensorflow-tpu=={tpu_env.TENSORFLOW_TPU}" in install
    assert extras["tpu"] == [f"libtpu=={tpu_env.LIBTPU}"]
    assert tpu_env.PIN == (f"pip install tensorflow-tpu=="
                           f"{tpu_env.TENSORFLOW_TPU} libtpu=={tpu_env.LIBTPU}")


def test_the_docs_name_the_pair_and_the_install_line():
    with open(os.path.join(ROOT, "docs", "training.md")) as f:
        text = f.read()
    section = text[text.index("## Cloud TPU"):]
    section = section[:section.index("\n## ", 3)]
    assert tpu_env.INSTALL in section
    assert f"tensorflow-tpu {tpu_env.TENSORFLOW_TPU}" in section
    assert f"libtpu {tpu_env.LIBTPU}" in section
    # No tensorflow-tpu 2.21 exists.
    assert "tensorflow-tpu 2.21" not in section
    assert "2.20 or 2.21" not in section


def _versions(monkeypatch, **versions):
    versions = {k.replace("_", "-"): v for k, v in versions.items()}
    monkeypatch.setattr(tpu_env, "installed", versions.get)


@pytest.mark.parametrize("versions,says", [
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.14"), []),
    (dict(tensorflow="2.21.0"),
     ["TensorFlow here is tensorflow 2.21.0, a build without TPU support",
      "libtpu is not installed"]),
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.52"),
     ["libtpu 0.0.52 is installed, but tensorflow-tpu 2.20.0 was built "
      "with libtpu 0.0.14"]),
    (dict(tensorflow_tpu="2.19.1", libtpu="0.0.14"),
     ["tensorflow-tpu 2.19.1 is installed; this package is tested with "
      "tensorflow-tpu 2.20.0"]),
])
def test_start_up_says_which_pair_to_install(monkeypatch, versions, says):
    monkeypatch.delenv("TPU_LOAD_LIBRARY", raising=False)
    _versions(monkeypatch, **versions)
    problems = tpu_env.version_problems()
    assert [p for p, _ in problems] == [
        p for p, _ in problems if any(p.startswith(s) for s in says)]
    assert len(problems) == len(says)
    for _, fix in problems:
        assert "pip install" in fix and "==" in fix or "tpu]" in fix


def _machine(tmp_path, devices=("accel0",), holder=None):
    """A /dev with the given TPU device files and a /proc whose process
    1234 holds `holder` open."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    for name in devices:
        (dev / name).parent.mkdir(parents=True, exist_ok=True)
        (dev / name).write_text("")
    fd = proc / "1234" / "fd"
    fd.mkdir(parents=True)
    (proc / "1234" / "cmdline").write_bytes(b"python3\0train.py\0")
    os.symlink(str(dev / holder) if holder else "/dev/null", fd / "3")
    return str(dev), str(proc)


def test_another_process_holding_the_tpu_is_named(tmp_path, monkeypatch):
    _versions(monkeypatch, tensorflow_tpu="2.20.0", libtpu="0.0.14")
    dev, proc = _machine(tmp_path, holder="accel0")
    assert tpu_env.tpu_holders(tpu_env.tpu_devices(dev), proc) == [
        (1234, "python3 train.py")]
    cause, fix = tpu_env.diagnose(dev, proc)
    assert cause.startswith("the TPU is in use by process 1234 "
                            "(python3 train.py)")
    assert fix == "stop it (kill 1234) or wait for it to end"


@pytest.mark.parametrize("versions,devices,env,cause,fix", [
    (dict(tensorflow="2.21.0"), ("accel0",), {},
     "TensorFlow here is tensorflow 2.21.0, a build without TPU support",
     "pip uninstall -y tensorflow tensorflow-cpu, then "
     'KERAS_VIT_TENSORFLOW=tensorflow-tpu pip install -e ".[tpu,gcs]"'),
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.14"), (), {},
     "this machine has no TPU device", ""),
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.52"), ("vfio/0",), {},
     "libtpu 0.0.52 is installed, but tensorflow-tpu 2.20.0 was built "
     "with libtpu 0.0.14", "pip install libtpu==0.0.14"),
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.14"), ("accel0",),
     {"TPU_LOAD_LIBRARY": "0"},
     "TPU_LOAD_LIBRARY=0 keeps TensorFlow from loading libtpu",
     "unset TPU_LOAD_LIBRARY"),
    (dict(tensorflow_tpu="2.20.0", libtpu="0.0.14"), ("accel0",), {},
     "libtpu gave its reason in its log (/tmp/tpu_logs", ""),
])
def test_each_cause_of_a_failed_local_tpu_has_its_fix(
        tmp_path, monkeypatch, versions, devices, env, cause, fix):
    monkeypatch.delenv("TPU_LOAD_LIBRARY", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _versions(monkeypatch, **versions)
    dev, proc = _machine(tmp_path, devices)
    found, how = tpu_env.diagnose(dev, proc)
    assert found.startswith(cause) and how.startswith(fix)
    monkeypatch.setattr(tpu_env, "diagnose", lambda: (found, how))
    error = tpu._tpu_setup_error("local", RuntimeError(TF_REASON))
    text = str(error)
    assert isinstance(error, cluster.SetupError) and "\n" not in text
    assert text.startswith(
        "Cannot initialise this machine's TPU (`tpu`=local: "
        "TPUClusterResolver, then initialize_tpu_system); TensorFlow says: "
        "No matching devices found for '/device:TPU_SYSTEM:0' "
        "[Op:__inference__tpu_init_fn_9]. Found: " + found)
    assert text.endswith("`strategy`=auto or `strategy`=cpu.")
    assert f"To fix: {how}" in text


def test_tensorflows_reason_is_cut_at_a_word_without_an_ops_attributes():
    """A TensorFlow reason naming an op's attributes (the kernel-less
    build's) ends before them; a long one ends at a word, said so."""
    kernel = ("No OpKernel was registered to support Op "
              "'ConfigureDistributedTPU' used by {{node "
              "ConfigureDistributedTPU}} with these attrs: [compilation_"
              "failure_closes_chips=false, embedding_config=\"\", tpu_"
              "cancellation_closes_chips=2]\nRegistered devices: [CPU]")
    text = str(tpu.local_tpu_error(kernel))
    assert ("TensorFlow says: No OpKernel was registered to support Op "
            "'ConfigureDistributedTPU' used by {{node "
            "ConfigureDistributedTPU}}. Found: ") in text
    text = str(tpu.local_tpu_error("a reason " * 40))
    assert "TensorFlow says: " + "a reason " * 22 + "a (cut short). " in text


@pytest.mark.slow
def test_real_initialisation_failure_is_one_line():
    """`--strategy=tpu --tpu=local` for real, on a machine without a TPU:
    TensorFlow's own failure becomes the one line (with tensorflow-tpu it
    waits about 5 s for a TPU platform first)."""
    code = ("from keras_vit.training import distribute\n"
            "try:\n"
            "    distribute.create_strategy('tpu', 'local')\n"
            "except distribute.SetupError as e:\n"
            "    print('LINE', e)\n")
    env = dict(os.environ, TPU_LOAD_LIBRARY="0", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=ROOT)
    run = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("LINE")]
    assert line.startswith(
        "LINE Cannot initialise this machine's TPU (`tpu`=local")
    assert "TensorFlow says: " in line and "Found: " in line
    if tpu_env.installed("tensorflow-tpu"):
        assert "TPU_SYSTEM" in line
        assert ("this machine has no TPU device" in line
                or "TPU_LOAD_LIBRARY=0" in line)
    else:
        assert "a build without TPU support" in line
