"""Quiet by default: the console scripts, run as a user types them, print
no TensorFlow line that is not about the run (all of them with
--verbose), short messages, limits that name their flags, and a --help
that loads no TensorFlow."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A message the project prints stays under this many characters.
MAX_MESSAGE = 300


def _script(name):
    """The command line of console script keras-vit-`name`: the installed
    script beside this Python, else its entry point under that name."""
    path = os.path.join(os.path.dirname(sys.executable), f"keras-vit-{name}")
    if os.path.exists(path):
        return [path]
    code = (f"import sys; sys.argv[0] = 'keras-vit-{name}'; "
            f"from keras_vit.commands.{name} import main; sys.exit(main())")
    return [sys.executable, "-c", code]


def _env(**extra):
    # As a user has it: TF_CPP_MIN_LOG_LEVEL unset.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    env.update(PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", **extra)
    return env


def run(name, *args, cwd=None, timeout=600):
    return subprocess.run(_script(name) + [str(a) for a in args],
                          capture_output=True, text=True, env=_env(),
                          cwd=cwd or ROOT, timeout=timeout)


def error_line(result, name):
    """The one error line of a refused command."""
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines()
             if line.startswith(f"keras-vit-{name}: error: ")]
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


# ------------------------------------------------ short messages (item 2)
@pytest.mark.slow
def test_workdir_of_another_run_names_only_the_differing_field(tmp_path):
    from keras_vit.configs import digits

    saved = digits.get_config()
    saved.model.hidden_size = 192
    workdir = tmp_path / "run"
    workdir.mkdir()
    (workdir / "config.json").write_text(json.dumps(saved.to_dict()))
    line = error_line(run("train", "--config=digits", f"--workdir={workdir}",
                          "--config.model.hidden_size=64"), "train")
    assert "--config.model.hidden_size: 192 in the workdir, 64 asked" in line
    assert "num_layers" not in line  # only the field that differs
    assert len(line) < MAX_MESSAGE, line


# ------------------------------------- limits name their flags (item 3)
@pytest.mark.slow
def test_a_limit_names_the_flags_that_set_it(tmp_path):
    line = error_line(run("train", "--config=digits",
                          f"--workdir={tmp_path}/run",
                          "--config.trainer.total_steps=10"), "train")
    assert line == (
        "keras-vit-train: error: --config.schedule.warmup_steps=100 must be "
        "in [0, --config.trainer.total_steps=10].")


def test_every_limit_names_its_config_field():
    from keras_vit import config_limits
    from keras_vit.config import base_config
    from keras_vit.errors import UsageError

    for path, low, high, _ in config_limits.LIMITS:
        config = base_config()
        config.unlock()
        section, _, field = path.rpartition(".")
        bad = (low if isinstance(low, (int, float)) else 0) - 1
        node = config
        for key in section.split("."):
            node = node[key]
        node[field] = bad if isinstance(node[field], int) or node[
            field] is None else float(bad)
        with pytest.raises(UsageError, match=rf"^config\.{path}=") as info:
            config_limits.check_limits(config)
        assert len(str(info.value)) < MAX_MESSAGE
    config_limits.check_limits(base_config())  # the defaults are in range


# ------------------------------------- --help loads no TensorFlow (item 4)
COMMANDS = ("train", "evaluate", "export", "predict", "convert", "analysis")
# Run as the console script runs it; prints the modules loaded at the end.
HELP_PROBE = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('LOADED', sorted({m.split('.')[0] for m "
    "in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')}), "
    "file=sys.stderr))\n"
    "sys.argv[0] = 'keras-vit-{name}'\n"
    "from keras_vit.commands.{name} import main\n"
    "sys.exit(main())\n")


@pytest.mark.parametrize("name", COMMANDS)
def test_help_loads_no_tensorflow_and_prints_each_heading_once(name):
    result = subprocess.run(
        [sys.executable, "-c", HELP_PROBE.replace("{name}", name), "--help"],
        capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"usage: keras-vit-{name} [flags]")
    assert "LOADED []" in result.stderr, result.stderr[-3000:]
    headings = [line for line in result.stdout.splitlines()
                if line.startswith("flags of ")]
    assert headings and len(headings) == len(set(headings)), headings
    # The flags are all there: --verbose (every command) and --model or
    # --config (each command's own).
    assert "--[no]verbose" in result.stdout
    assert "--model" in result.stdout or "--config" in result.stdout
