"""The keras-vit-* console scripts started as a user starts them: their
command lines, the environment and a tiny digits run's flags, and waiting
on a log."""

import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# configs/digits.py shrunk: a 1-layer ViT of width 16 on 16 x 16 digits,
# tens of steps a second on one core.
TINY_DIGITS = [
    "--config=digits",
    "--config.model.image_size=16", "--config.input.pp.resize_size=18",
    "--config.model.num_layers=1", "--config.model.hidden_size=16",
    "--config.model.mlp_dim=16", "--config.model.num_heads=2",
    "--config.input.batch_size=16", "--config.trainer.jit_compile=False",
    "--config.schedule.warmup_steps=0",
]


def script(name):
    """The command line that starts console script keras-vit-`name`: the
    installed script beside this Python, else its entry point under the
    script's name."""
    path = os.path.join(os.path.dirname(sys.executable), f"keras-vit-{name}")
    if os.path.exists(path):
        return [path]
    code = (f"import sys; sys.argv[0] = 'keras-vit-{name}'; "
            f"from keras_vit.commands.{name} import main; sys.exit(main())")
    return [sys.executable, "-c", code]


def env(**extra):
    """A user's environment for this checkout, without a GPU and without
    the test suite's TF_CPP_MIN_LOG_LEVEL."""
    out = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    out.update(PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", **extra)
    return out


def start(name, args, log_path, **popen):
    """Starts keras-vit-`name` with `args`, its stdout and stderr into the
    file `log_path`."""
    with open(log_path, "w") as out:
        return subprocess.Popen(script(name) + list(args), stdout=out,
                                stderr=subprocess.STDOUT, env=env(),
                                **popen)


def run(name, args, timeout=600, **kwargs):
    """keras-vit-`name` with `args` to its end: the CompletedProcess
    (text)."""
    return subprocess.run(script(name) + list(args), capture_output=True,
                          text=True, env=env(), timeout=timeout, **kwargs)


def wait_for(path, pattern, proc, timeout=240):
    """The first match of `pattern` in the log at `path`, waiting while
    `proc` runs."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            match = re.search(pattern, f.read())
        if match:
            return match
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    with open(path) as f:
        raise AssertionError(f"{pattern!r} not seen; log:\n{f.read()[-3000:]}")


def finish(proc, timeout=240):
    """`proc`'s exit status (killed after `timeout` seconds)."""
    try:
        return proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
