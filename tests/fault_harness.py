"""Subprocess harness of tests/test_faults.py: train.py (and an export)
run as real processes that can be paused inside a checkpoint write or a
publish, killed, signalled and restarted; and checks of what a workdir holds
afterwards."""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTAL = 40

TRAIN_ARGS = [
    "--config=" + os.path.join(ROOT, "configs", "digits.py"),
    "--config.model.num_layers=1", "--config.model.hidden_size=32",
    "--config.model.mlp_dim=64", f"--config.trainer.total_steps={TOTAL}",
    "--config.trainer.steps_per_loop=5", "--config.checkpoints.every_steps=10",
    "--config.log.every_steps=5", "--config.evals.test.every_steps=0",
    "--config.input.batch_size=32", "--config.trainer.jit_compile=False",
    "--config.schedule.warmup_steps=0",
    # The default strategy: its input iterator is checkpointed.
    "--strategy=auto",
]

# train.py with an optional pause inside the checkpoint write: after the
# shards are written to <prefix>_temp/ and before they are merged under the
# final name (where a crash is most likely to leave a partial checkpoint).
# The pause lasts until the file FAULT_RELEASE appears (if given).
RUNNER = r'''
import os, sys, time
sys.path.insert(0, {root!r})
pause = os.environ.get("FAULT_PAUSE_MERGE")
if pause:
    from tensorflow.python.ops import gen_io_ops
    merge = gen_io_ops.merge_v2_checkpoints

    def slow_merge(checkpoint_prefixes, destination_prefix, *args, **kw):
        name = destination_prefix
        name = name.numpy() if hasattr(name, "numpy") else name
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name.endswith(pause):
            open(os.environ["FAULT_MARKER"], "w").close()
            release = os.environ.get("FAULT_RELEASE", "")
            deadline = time.time() + 600
            while time.time() < deadline and not os.path.exists(release):
                time.sleep(0.01)
        return merge(checkpoint_prefixes, destination_prefix, *args, **kw)

    gen_io_ops.merge_v2_checkpoints = slow_merge
from keras_vit.commands.train import main
sys.argv[0] = "train.py"
sys.exit(main())
'''

EXPORTER = r'''
import os, sys, time
sys.path.insert(0, {root!r})
import keras_vit
from keras_vit.export import saved_model as export
from keras_vit.export import versions as export_versions

def stalled_publish(*args, **kwargs):
    open(os.environ["FAULT_MARKER"], "w").close()
    time.sleep(600)

export_versions.publish_version = stalled_publish
model = keras_vit.create_model(
    None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
    num_layers=1, num_heads=2, mlp_dim=16,
)
export.export_model(model, sys.argv[1], warmup_images=[], verify=False)
'''


def env():
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ""  # the default (one-device) strategy
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["PYTHONPATH"] = ROOT
    return env


def script(tmp_path, text, name):
    path = tmp_path / name
    path.write_text(text.format(root=ROOT))
    return str(path)


class Run:
    """A train.py process with its combined output in a log file."""

    def __init__(self, tmp_path, workdir, log_name, extra_env=None):
        runner = script(tmp_path, RUNNER, "runner.py")
        self.log = str(tmp_path / log_name)
        self.workdir = workdir
        with open(self.log, "w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, runner, *TRAIN_ARGS, f"--workdir={workdir}"],
                stdout=out, stderr=subprocess.STDOUT,
                env=dict(env(), **(extra_env or {})),
            )

    def text(self) -> str:
        with open(self.log) as f:
            return f.read()

    def wait_for(self, condition, timeout=300):
        """Polls `condition()` until true; fails if the process ends first."""
        deadline = time.time() + timeout
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"train.py ended early:\n{self.text()[-3000:]}")
            if time.time() > deadline:
                self.proc.kill()
                pytest.fail(f"Timed out:\n{self.text()[-3000:]}")
            time.sleep(0.02)

    def finish(self, timeout=300, status=0) -> str:
        """The log, once the run ended with exit status `status`."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise
        text = self.text()
        assert self.proc.returncode == status, text[-3000:]
        return text

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)


def ckpt_dir(workdir):
    return os.path.join(workdir, "checkpoints")


def state_names(workdir):
    """The checkpoint state file's latest entry ('' if none yet)."""
    path = os.path.join(ckpt_dir(workdir), "checkpoint")
    try:
        with open(path) as f:
            match = re.search(r'^model_checkpoint_path: "([^"]+)"', f.read(),
                              re.MULTILINE)
    except FileNotFoundError:
        return ""
    return os.path.basename(match.group(1)) if match else ""


def tensors(prefix):
    """Every numeric tensor of a checkpoint (reads the whole data file)."""
    reader = tf.train.load_checkpoint(prefix)
    out = {}
    for key in reader.get_variable_to_shape_map():
        if key.endswith("VARIABLE_VALUE") and "save_counter" not in key:
            out[key] = reader.get_tensor(key)
    return out


def assert_nothing_half_written(workdir):
    """What a reader would pick up is complete."""
    state = tf.train.get_checkpoint_state(ckpt_dir(workdir))
    if state is not None:
        latest = state.model_checkpoint_path
        assert os.path.exists(latest + ".index")
        assert tensors(latest)  # every tensor readable in full
    for name in ("config.json", "metrics.json"):
        path = os.path.join(workdir, name)
        if os.path.exists(path):
            json.load(open(path))
    labels = os.path.join(workdir, "labels.txt")
    if os.path.exists(labels):
        assert open(labels).read().split() == [str(i) for i in range(10)]


def no_leftovers(workdir):
    stray = glob.glob(os.path.join(workdir, "**", "*.tmp*"), recursive=True)
    stray += glob.glob(os.path.join(ckpt_dir(workdir), "*_temp*"))
    assert not stray, stray


def read_metrics(workdir):
    return json.load(open(os.path.join(workdir, "metrics.json")))
