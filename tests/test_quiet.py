"""Quiet by default: the console scripts, run as a user types them, print
no TensorFlow line that is not about the run (all of them with
--verbose), short messages, limits that name their flags, and a --help
that loads no TensorFlow."""

import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from tests.console import script as _script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A message the project prints stays under this many characters.
MAX_MESSAGE = 300




def _env(**extra):
    # As a user has it: TF_CPP_MIN_LOG_LEVEL unset.
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "KERAS_BACKEND")}
    env.update(PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="", **extra)
    return env


def run(name, *args, cwd=None, timeout=600, **env):
    return subprocess.run(_script(name) + [str(a) for a in args],
                          capture_output=True, text=True, env=_env(**env),
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
    # Its results (a run that saved nothing is started afresh instead).
    (workdir / "metrics.json").write_text(json.dumps({"steps": 1}))
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
        # A field with no bound: a number the run cannot compute with.
        bad = float("nan") if low is None and high is None else (
            low if isinstance(low, (int, float)) else 0) - 1
        node = config
        for key in filter(None, section.split(".")):
            node = node[key]
        node[field] = bad if isinstance(node[field], int) or node[
            field] is None else float(bad)
        with pytest.raises(UsageError, match=rf"^config\.{path}=") as info:
            config_limits.check_limits(config)
        assert len(str(info.value)) < MAX_MESSAGE
    config_limits.check_limits(base_config())  # the defaults are in range


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e39])
def test_a_number_beyond_float32_is_refused_by_name(bad):
    from keras_vit import config_limits
    from keras_vit.config import base_config
    from keras_vit.configs import fewshot, vtab
    from keras_vit.errors import UsageError

    # (nan passes every comparison with a bound; 1e39 is inf in float32;
    # a field's own bound, where it has one, is named first)
    paths = ("schedule.lr", "schedule.end_lr", "trainer.epochs",
             "optimizer.weight_decay", "model.head_bias_init") + (
        ("trainer.ema_decay", "optimizer.momentum", "optimizer.b1",
         "optimizer.b2") if bad != bad else ())
    for path in paths:
        config = base_config()
        section, _, field = path.rpartition(".")
        config[section][field] = bad
        with pytest.raises(UsageError, match=(
                "^" + re.escape(f"config.{path}={bad} is not a finite number "
                                "within float32's range (largest 3.403e+38)"))):
            config_limits.check_limits(config)
    config = vtab.get_config()
    config.evals.vtab.sweep.lrs = (0.01, bad)
    with pytest.raises(UsageError, match=(
            "^" + re.escape(f"config.evals.vtab.sweep.lrs=0.01,{bad}: {bad} "
                            "is not a finite number"))):
        config_limits.check_limits(config)
    # Integers compare exactly (no float conversion to overflow): a bound
    # is named where the field has one, int64's range where it has none.
    huge = 10**400
    config = base_config()
    config.seed = huge
    with pytest.raises(UsageError, match=r"^config\.seed=1000+ must be in "
                       r"\[0, 4294967295\]"):
        config_limits.check_limits(config)
    config = base_config()
    config.trainer.total_steps = 2**63
    with pytest.raises(UsageError, match=(
            r"^config\.trainer\.total_steps=9223372036854775808 is beyond "
            "int64's range")):
        config_limits.check_limits(config)
    config = fewshot.get_config("digits")
    config.evals.fewshot.seeds = (0, huge)
    with pytest.raises(UsageError, match="is beyond int64's range"):
        config_limits.check_limits(config)


def test_every_evaluator_limit_names_its_config_field():
    from keras_vit import config_limits
    from keras_vit.configs import fewshot, vtab
    from keras_vit.errors import UsageError

    configs = {"fewshot": fewshot.get_config("digits"),
               "vtab": vtab.get_config(), "accuracy": vtab.get_config()}
    names = {"fewshot": "fewshot", "vtab": "vtab", "accuracy": "test"}
    for kind, limits in config_limits.EVALUATOR_LIMITS.items():
        for field, low, _, _ in limits:
            config = configs[kind].copy_and_resolve_references()
            config.unlock()
            config.evals[names[kind]][field] = low - 1
            with pytest.raises(UsageError, match=(
                    rf"^config\.evals\.{names[kind]}\.{field}=")):
                config_limits.check_limits(config)
    for kind, lists in config_limits.EVALUATOR_LISTS.items():
        for field, low, _, whole in lists:
            bads = [(), (low + 1, low + 1)] + (
                [(low - 1,)] if low is not None else []) + (
                [(low + 0.5,)] if whole else [])
            for bad in bads:
                config = configs[kind].copy_and_resolve_references()
                config.unlock()
                node = config.evals[names[kind]]
                *parents, leaf = field.split(".")
                for key in parents:
                    node = node[key]
                node[leaf] = bad
                with pytest.raises(UsageError, match=(
                        rf"^config\.evals\.{names[kind]}\.{field}=")):
                    config_limits.check_limits(config)
    for config in configs.values():
        config_limits.check_limits(config)  # the defaults are in range


def test_a_few_shot_limit_is_told_before_any_model_loads(tmp_path):
    # Zero shots would score a probe that saw no example; no seed would
    # average nothing. The model named does not exist: the limit comes
    # first.
    for flag, says in (
            ("--config.evals.fewshot.shots=0,5",
             "--config.evals.fewshot.shots=0,5: each value must be >= 1."),
            ("--config.evals.fewshot.seeds=()",
             "--config.evals.fewshot.seeds=() must list one value or more"),
            # A negative seed failed after the first data set's features;
            # a fraction was cut to the seed before it (two equal draws);
            # a shot counted twice overwrote its own column.
            ("--config.evals.fewshot.seeds=-1,0",
             "--config.evals.fewshot.seeds=-1,0: each value must be >= 0."),
            ("--config.evals.fewshot.seeds=0.2,0.7",
             "--config.evals.fewshot.seeds=0.2,0.7: 0.2 is not a whole "
             "number."),
            ("--config.evals.fewshot.shots=1,5,1",
             "--config.evals.fewshot.shots=1,5,1: 1 given twice; list each "
             "value once.")):
        line = error_line(run(
            "evaluate", "--mode=fewshot", "--config=fewshot:digits",
            f"--model={tmp_path}/none.npz", f"--output_dir={tmp_path}/out",
            flag), "evaluate")
        assert line.startswith(f"keras-vit-evaluate: error: {says}"), line
    assert not (tmp_path / "out").exists()


def test_a_vtab_training_limit_is_told_before_any_task(tmp_path):
    """Each VTAB-1k task trains with the config's recipe (or each trial of
    its sweep): a field out of range is named before the backbone is read
    and before any task's data, not after each task is prepared."""
    for flags, says in (
            (["--config.schedule.lr=0"],
             "--config.schedule.lr=0.0 must be > 0."),
            (["--config.evals.vtab.sweep.enabled=True",
              "--config.schedule.warmup_steps=1000"],
             "--config.schedule.warmup_steps=1000 must be in [0, "
             "--config.trainer.total_steps=500] (in the sweep's trial at "
             "schedule.lr=0.001, trainer.total_steps=500).")):
        line = error_line(run(
            "evaluate", "--mode=vtab", "--config=vtab", "--tasks=dtd",
            f"--model={tmp_path}/none.npz", f"--output_dir={tmp_path}/out",
            *flags), "evaluate")
        assert line == f"keras-vit-evaluate: error: {says}", line
    assert not (tmp_path / "out").exists()


def test_vtab_trials_are_checked_as_each_task_runs_them():
    """The up-front check of a VTAB-1k run's training takes what each task
    takes: a sweep's step counts as whole numbers (500.0 is 500), and a
    run counted in epochs, whose data settles its steps and holds a long
    warm-up to a share of them, is left to that."""
    from keras_vit import config_limits
    from keras_vit.configs import vtab
    from keras_vit.errors import UsageError

    config = vtab.get_config()
    entry = config.evals.vtab
    config_limits.check_trials(config, entry.sweep)  # the recipe as shipped
    entry.sweep.enabled, entry.sweep.steps = True, (500.0, 2500)
    config_limits.check_trials(config, entry.sweep)
    config.trainer.total_steps, config.trainer.epochs = 0, 5.0
    config.schedule.warmup_steps = 1000  # longer than the 500-step trial
    config_limits.check_trials(config, entry.sweep)
    entry.sweep.enabled = False
    config_limits.check_trials(config, entry.sweep)
    config.trainer.epochs = 0.0  # neither steps nor epochs: refused
    with pytest.raises(UsageError, match=r"^config\.trainer\.total_steps=0 "
                       "must be > 0"):
        config_limits.check_trials(config, entry.sweep)


@pytest.mark.parametrize("name, config, says", [
    ("evaluate", "fewshot:digitz", "Unknown few-shot data set(s) ['digitz']"),
    ("train", "finetune:dataset=cifar10,variant=X/16",
     "No released pre-trained checkpoint of variant 'X/16'"),
])
def test_a_config_argument_error_is_its_own_line(tmp_path, name, config,
                                                 says):
    # get_config raised: the line is its message, not ml_collections'
    # flattened traceback.
    line = error_line(run(name, f"--config={config}", "--model=x",
                          f"--workdir={tmp_path}/run",
                          f"--output_dir={tmp_path}/out"), name)
    assert line.startswith(f"keras-vit-{name}: error: {says}"), line
    assert "Traceback" not in line and "config_flags.py" not in line
    assert len(line) < MAX_MESSAGE, line


@pytest.mark.parametrize("name, flag", [
    ("evaluate", "--output_dir=FILE/sub"), ("export", "--export_dir=FILE/sub"),
    ("predict", "--output=FILE/p.json"), ("analysis", "--output_dir=FILE/sub"),
    ("convert", "--output=FILE/m.keras")])
def test_an_output_path_through_a_file_is_refused_first(tmp_path, name,
                                                        flag):
    """Before the model (a missing one here) or any work: one line naming
    the file in the way."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("mine\n")
    extra = {"evaluate": ["--mode=eval", "--dataset=digits"],
             "analysis": ["--digits=2"], "predict": [str(tmp_path)]}
    line = error_line(run(name, f"--model={tmp_path}/none.keras",
                          flag.replace("FILE", str(blocker)),
                          *extra.get(name, [])), name)
    assert line.endswith(f"{blocker} is a file, not a folder. Choose "
                         "another path."), line
    assert blocker.read_text() == "mine\n"


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


@pytest.mark.parametrize("name, args, out", [
    ("train", ["--config=digits", "--config.input.batch_sizee=3",
               "--workdir=run"],
     "keras-vit-train: error: unknown config field 'batch_sizee'. Did you "
     'mean "batch_size" instead of "batch_sizee"?'),
    ("evaluate", ["--mode=eval", "--config=digits", "--workdir=run",
                  "--config.evals.test.every_stepz=1"],
     "keras-vit-evaluate: error: unknown config field 'every_stepz'."),
    ("predict", ["--list_models=*B_16*"], "ViT-B_16"),
    ("train", ["--config=folder:.", "--workdir=run"],
     "keras-vit-train: error: --workdir run is inside the image folder"),
    ("train", ["--config=digits", "--workdir=run", "--model=Ti/17"],
     "keras-vit-train: error: Ti/17: no such size, file or folder. Did you "
     "mean Ti/16"),
    ("predict", ["--model=no_such.keras", "x.png"],
     "keras-vit-predict: error: no_such.keras: no such file or folder"),
    ("export", ["--model=no_such.keras", "--class_names_file=names.txt",
                "--export_dir=out"],
     "keras-vit-export: error: --class_names_file=names.txt does not "
     "exist."),
    # An evaluator replaced whole took its fields from the defaults again
    # (the config's every_steps lost); its type changed, another type's
    # fields were left on it.
    ("train", ["--config=digits", "--workdir=run",
               "--config.evals.test={'split': 'test'}"],
     "keras-vit-train: error: --config.evals.test is an evaluator: set its "
     "fields one by one (e.g. --config.evals.test.batch_size=...)."),
    # An argument no command takes, shown as it would be typed (an empty
    # one, from an unset shell variable, is '').
    ("train", ["--config=digits", "--workdir=run", ""],
     "keras-vit-train: error: Unexpected arguments: ''"),
    ("convert", ["--model=x.npz", "--output=y.keras", "a b"],
     "keras-vit-convert: error: Unexpected arguments: 'a b'"),
    # A number that is none, in Python's words no more.
    ("train", ["--config=digits", "--workdir=run",
               "--config.trainer.total_steps=1e3"],
     "keras-vit-train: error: --config.trainer.total_steps=1e3 is not a "
     "whole number."),
    ("train", ["--config=digits", "--workdir=run", "--config.schedule.lr=x"],
     "keras-vit-train: error: --config.schedule.lr=x is not a number."),
    # A section given whole beside one of its fields, in either order.
    *[("train", ["--config=digits", "--workdir=run", *pair],
       "keras-vit-train: error: --config.trainer is a section of fields: "
       "set them one by one (e.g. --config.trainer.accumulation_steps=...).")
      for pair in [("--config.trainer={'total_steps': 5}",
                    "--config.trainer.jit_compile=False"),
                   ("--config.trainer.jit_compile=False",
                    "--config.trainer={'total_steps': 5}")]],
    ("train", ["--config=digits", "--workdir=run", "--config.evals={}"],
     "keras-vit-train: error: --config.evals is the section of the config's "
     "evaluators: set their fields one by one"),
    ("train", ["--config=digits", "--workdir=run",
               "--config.evals.test.type=fewshot"],
     "keras-vit-train: error: --config.evals.test.type=fewshot: "
     "--config.evals.test is an evaluator of another type (its cache, "
     "every_steps, split, val_split are no fewshot evaluator's)"),
    # A few-shot data set without its splits failed with a traceback.
    ("evaluate", ["--mode=fewshot", "--config=fewshot:digits",
                  "--model=m.keras", "--output_dir=out",
                  "--config.evals.fewshot.datasets={'d2': {'dataset': "
                  "'digits'}}"],
     "keras-vit-evaluate: error: --config.evals.fewshot.datasets.d2 has no "
     "train_split (a non-empty string): a few-shot data set names its data "
     "and two of its splits, dict(dataset='cifar100', train_split='train', "
     "test_split='test')."),
    # --mode=eval read a resize of -5 as the image size, and a batch of 0
    # was refused without its field.
    ("evaluate", ["--mode=eval", "--config=digits", "--model=m.keras",
                  "--config.input.pp.eval_resize_size=-5"],
     "keras-vit-evaluate: error: --config.input.pp.eval_resize_size=-5 must "
     "be > 0."),
    ("evaluate", ["--mode=eval", "--config=digits", "--model=m.keras",
                  "--config.input.batch_size=0"],
     "keras-vit-evaluate: error: --config.input.batch_size=0 must be > 0."),
])
def test_a_refused_flag_and_the_models_table_load_no_tensorflow(
        name, args, out, tmp_path):
    """What needs no model answers before Keras and TensorFlow load (at
    once, not seconds later): a misspelt config field, --list_models, a
    run's folder inside its image folder, a model path or size that is not
    there, a --class_names_file that is not there."""
    result = subprocess.run(
        [sys.executable, "-c", HELP_PROBE.replace("{name}", name), *args],
        capture_output=True, text=True, env=_env(), cwd=str(tmp_path),
        timeout=300)
    assert result.returncode == (0 if "list" in args[0] else 1), (
        result.stderr[-3000:])
    assert out in result.stdout + result.stderr
    assert "LOADED []" in result.stderr, result.stderr[-3000:]


@pytest.mark.parametrize("backend, says", [
    ("tensorfow", "KERAS_BACKEND=tensorfow: Keras has no such backend (it "
     "has tensorflow, jax, torch, numpy, openvino): set "
     "KERAS_BACKEND=tensorflow (or jax, with the jax extra)."),
    ("openvino", "KERAS_BACKEND=openvino needs openvino, which is not "
     "installed: install it, or set KERAS_BACKEND=tensorflow (or jax, with "
     "the jax extra)."),
])
def test_a_keras_backend_that_cannot_load_is_one_line(tmp_path, backend,
                                                      says):
    """A misspelt KERAS_BACKEND, or one whose library is not installed,
    is named with its fix (it was Keras's traceback, or a bare "No module
    named ..."), by a command that loads Keras for its work."""
    pytest.importorskip("keras")
    if backend == "openvino" and importlib.util.find_spec("openvino"):
        pytest.skip("openvino is installed here")
    for name, args in (("convert", [f"--model={tmp_path}/m.npz",
                                    f"--output={tmp_path}/m.keras"]),
                       ("train", ["--config=digits",
                                  f"--workdir={tmp_path}/run"])):
        (tmp_path / "m.npz").write_bytes(b"")
        line = error_line(run(name, *args, KERAS_BACKEND=backend), name)
        assert line == f"keras-vit-{name}: error: {says}", line
    assert not (tmp_path / "run").exists()


def test_a_config_file_that_needs_its_argument_says_how_to_give_it(
        tmp_path):
    config = tmp_path / "steps.py"
    config.write_text("from keras_vit.config import base_config\n\n\n"
                      "def get_config(arg):\n    c = base_config()\n"
                      "    c.trainer.total_steps = int(arg)\n    return c\n")
    line = error_line(run("train", f"--config={config}",
                          f"--workdir={tmp_path}/run"), "train")
    assert line == (
        f"keras-vit-train: error: --config={config}: its get_config(arg) "
        "needs an argument, given after a colon: "
        f"--config={config}:ARG"), line
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ("train", "evaluate"))
def test_help_into_a_closed_pipe_ends_quietly(name):
    """`keras-vit-train --help | head`: the reader closes the pipe early;
    the command ends with status 0 and no traceback."""
    proc = subprocess.Popen(_script(name) + ["--help"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env(), cwd=ROOT)
    proc.stdout.close()  # before the command writes a byte
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "BrokenPipe" not in err, err[-3000:]


# ------------------------------- TensorFlow's notices stay off (item 1)
def _messages(stderr):
    """The lines of `stderr`, each without absl's prefix (level, time,
    thread, file:line)."""
    return [re.sub(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] ", "", line)
            for line in stderr.splitlines()]


def _tiny_model(path):
    from keras_vit import create_model

    create_model(image_size=32, patch_size=8, hidden_size=16, num_layers=1,
                 num_heads=2, mlp_dim=16, num_classes=3).save(str(path))
    return str(path)


def _jpegs(folder):
    """A good JPEG, a truncated one (unreadable) and one with extraneous
    bytes (readable: libjpeg warns)."""
    import numpy as np
    import tensorflow as tf

    pixels = np.random.default_rng(0).integers(0, 255, (32, 32, 3))
    data = tf.io.encode_jpeg(tf.constant(pixels, tf.uint8)).numpy()
    folder.mkdir()
    (folder / "good.jpg").write_bytes(data)
    (folder / "truncated.jpg").write_bytes(data[:len(data) // 2])
    (folder / "corrupt.jpg").write_bytes(data[:300] + b"\xff\xd0" + data[300:])
    (folder / "header_cut.jpg").write_bytes(data[:100])  # ends in its header
    # Markers and no image data: libjpeg's "Input file read error".
    (folder / "markers_only.jpg").write_bytes(
        b"\xff\xd8\xff\xe0garbage" * 8)
    return str(folder)


JPEG_NOTICES = ("jpeg_mem.cc", "Corrupt JPEG data", "Premature end of JPEG",
                "Improper call to JPEG library", "Input file read error")


@pytest.mark.slow
def test_training_prints_no_checkpoint_notices(tmp_path):
    tiny = ["--config=digits", "--config.trainer.total_steps=4",
            "--config.schedule.warmup_steps=1",
            "--config.checkpoints.every_steps=2",
            "--config.evals.test.every_steps=0",
            "--config.model.hidden_size=16", "--config.model.num_layers=1",
            "--config.model.mlp_dim=16", "--config.input.batch_size=16"]
    result = run("train", *tiny, f"--workdir={tmp_path}/run")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Sharding callback duration" not in result.stderr
    assert "Final test metrics: test_accuracy" in result.stderr
    assert max(map(len, _messages(result.stderr))) < MAX_MESSAGE, \
        result.stderr
    result = run("train", *tiny, f"--workdir={tmp_path}/verbose",
                 "--verbose")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Sharding callback duration" in result.stderr
    # --verbose is the run's detail, not a library's search for fonts.
    assert "findfont" not in result.stderr and "STREAM b'" not in (
        result.stderr)


@pytest.mark.slow
def test_export_prints_no_signature_notices(tmp_path):
    model = _tiny_model(tmp_path / "tiny.keras")
    result = run("export", f"--model={model}", f"--export_dir={tmp_path}/a")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == f"{tmp_path}/a/vit/1"
    assert "signature_serialization" not in result.stderr
    # Where the time goes, stage by stage.
    stages = [m for m in _messages(result.stderr) if m.endswith(" ...")]
    assert stages == [f"Loading {model} ...",
                      "Tracing the serving signatures ...",
                      "Writing version 1 of 'vit' (SavedModel) ...",
                      "Checking the reloaded SavedModel against the model ..."]
    assert max(map(len, _messages(result.stderr)), default=0) < \
        MAX_MESSAGE, result.stderr
    result = run("export", f"--model={model}", f"--export_dir={tmp_path}/b",
                 "--verbose")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "contains input name(s)" in result.stderr
    result = run("export", f"--model={model}", f"--export_dir={tmp_path}/c",
                 "--format=litert", "--quantization=int8")
    assert result.returncode == 0, result.stderr[-3000:]
    assert [m for m in _messages(result.stderr) if m.endswith(" ...")] == [
        f"Loading {model} ...", "Converting to LiteRT (int8) ...",
        "Checking the LiteRT file against the model ..."]
    assert max(map(len, _messages(result.stderr)), default=0) < \
        MAX_MESSAGE, result.stderr


@pytest.mark.slow
def test_bad_jpegs_are_reported_once_in_the_commands_words(tmp_path):
    model = _tiny_model(tmp_path / "tiny.keras")
    images = _jpegs(tmp_path / "images")
    result = run("predict", f"--model={model}", "--skip_bad_images", images)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"skipped {images}/truncated.jpg: " in result.stderr
    assert f"skipped {images}/header_cut.jpg: " in result.stderr
    assert f"skipped {images}/markers_only.jpg: " in result.stderr
    assert not [line for line in result.stderr.splitlines()
                if any(word in line for word in JPEG_NOTICES)], result.stderr
    assert f"{images}/corrupt.jpg: " in result.stdout  # it decodes
    result = run("predict", f"--model={model}", "--skip_bad_images", images,
                 "--verbose")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Premature end of JPEG data" in result.stderr
    assert "Corrupt JPEG data" in result.stderr
    assert "Improper call to JPEG library" in result.stderr
    assert "Input file read error" in result.stderr


def test_a_value_quoted_in_a_message_is_cut():
    from keras_vit import config as config_lib
    from keras_vit.errors import UsageError, shorten

    assert shorten("abc") == "abc"
    assert shorten(list(range(100)), 20) == "[0, 1, 2, 3, 4, 5..."
    evals = {"test": {"type": "accuracy"}, "big": list(range(1000))}
    with pytest.raises(UsageError, match="config.evals.big is an evaluator"
                       ) as info:
        config_lib.complete({"evals": evals})
    assert len(str(info.value)) < MAX_MESSAGE


@pytest.mark.slow
def test_a_commands_own_limit_names_its_flag(tmp_path):
    model = _tiny_model(tmp_path / "tiny.keras")
    line = error_line(run("analysis", f"--model={model}", "--digits=2",
                          f"--output_dir={tmp_path}/out", "--batch_size=0"),
                      "analysis")
    assert line == "keras-vit-analysis: error: --batch_size=0: must be >= 1."
    # keras-vit-predict names the one flag at fault, not both of its limits.
    line = error_line(run("predict", f"--model={model}", "--top_k=0",
                          str(tmp_path)), "predict")
    assert line == "keras-vit-predict: error: --top_k=0: must be >= 1."


def test_two_configs_differ_by_their_fields_named():
    from keras_vit import config as config_lib

    saved = config_lib.base_config().to_dict()
    asked = config_lib.base_config().to_dict()
    assert config_lib.differences(saved, asked) == ""
    asked["schedule"]["lr"] = 0.02
    asked["input"]["dataset"] = "x" * 500
    for i, field in enumerate(("dropout_rate", "attention_dropout_rate")):
        asked["model"][field] = 0.1 * (i + 1)
    text = config_lib.differences(saved, asked)
    assert text.startswith("config.input.dataset: 'digits' in the workdir, ")
    assert "config.model.attention_dropout_rate: 0.0 in the workdir, 0.2 " \
        "asked" in text
    assert text.endswith("; and 1 more") and len(text) < MAX_MESSAGE


def test_data_library_notices_stay_off_the_terminal():
    """TensorFlow Datasets' INFO lines and its notice of a version folder
    without dataset_info.json are dropped (not with --verbose); its other
    warnings and the commands' own lines pass."""
    import logging as std_logging

    from keras_vit.commands import log_setup

    tfds_file = os.path.join("site-packages", "tensorflow_datasets", "core",
                             "load.py")

    def record(level, pathname, msg):
        return std_logging.LogRecord("absl", level, pathname, 1, msg, (),
                                     None)

    keep = log_setup._DropDataLibraryInfo().filter
    assert not keep(record(std_logging.INFO, tfds_file,
                           "Load dataset info from %s"))
    assert not keep(record(std_logging.WARNING, tfds_file, "Variant folder "
                           "/d/dtd/3.0.1 has no dataset_info.json"))
    assert keep(record(std_logging.WARNING, tfds_file, "Something else"))
    assert keep(record(std_logging.INFO, os.path.join(
        "keras_vit", "training", "loop.py"), "Reading the data: dtd."))
    log_setup.setup_logging(verbose=False)
    assert any(isinstance(f, log_setup._DropDataLibraryInfo)
               for f in std_logging.getLogger("absl").filters)


@pytest.mark.slow
def test_the_jax_backend_prints_no_notice_of_its_start(tmp_path):
    """keras-vit-predict under KERAS_BACKEND=jax: the prediction, and no
    INFO line of JAX's about the platforms it probes ("Unable to initialize
    backend 'tpu'"); with --verbose it still answers. A training workdir
    answers as under TensorFlow, and converts and is analysed there;
    keras-vit-train, keras-vit-evaluate and keras-vit-export are refused
    in one line."""
    model = _tiny_model(tmp_path / "m.keras")
    image = f"{_jpegs(tmp_path / 'images')}/good.jpg"
    for verbose in ([], ["--verbose"]):
        result = run("predict", f"--model={model}", image, *verbose,
                     cwd=tmp_path, KERAS_BACKEND="jax")
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"{image}: " in result.stdout
        if not verbose:  # (a GPU host may add JAX's warning about CUDA)
            assert not re.search(r"^I\d{4} |initialize backend",
                                 result.stderr, re.MULTILINE), result.stderr
    # A training workdir's TensorFlow checkpoint, read by its object graph:
    # the same top 10 as under TensorFlow.
    workdir = os.path.join(ROOT, "tests", "fixtures", "earlier", "workdir")
    answers = [run("predict", f"--model={workdir}", image, "--top_k=10",
                   cwd=tmp_path, KERAS_BACKEND=backend)
               for backend in ("jax", "tensorflow")]
    assert [a.returncode for a in answers] == [0, 0], answers[0].stderr
    assert answers[0].stdout == answers[1].stdout
    assert answers[0].stdout.startswith(f"{image}: ")
    # keras-vit-convert and keras-vit-analysis of the workdir under JAX: the
    # converted file answers as the workdir did; the figures are written.
    converted = tmp_path / "converted.keras"
    result = run("convert", f"--model={workdir}", f"--output={converted}",
                 cwd=tmp_path, KERAS_BACKEND="jax")
    assert result.returncode == 0, result.stderr[-3000:]
    again = run("predict", f"--model={converted}", image, "--top_k=10",
                f"--class_names_file={workdir}/labels.txt", cwd=tmp_path)
    assert again.stdout == answers[0].stdout, again.stderr[-3000:]
    result = run("analysis", f"--model={workdir}", "--digits=2",
                 f"--output_dir={tmp_path / 'analysis'}", cwd=tmp_path,
                 KERAS_BACKEND="jax")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "analysis" / "analysis.json").exists()
    # The commands whose work is TensorFlow's: refused in one line before
    # they read or write anything.
    # A released name among them: refused before it is downloaded (offline
    # with an empty cache, a fetch would be refused with another message).
    offline = dict(KERAS_BACKEND="jax", KERAS_VIT_OFFLINE="1",
                   KERAS_VIT_CACHE=str(tmp_path / "cache"))
    for command, args in (("train", ["--config=digits",
                                     f"--workdir={tmp_path / 'run'}"]),
                          ("train", ["--config=digits",
                                     f"--workdir={tmp_path / 'run'}",
                                     "--config.init.model=ViT-Ti_16"]),
                          ("evaluate", ["--mode=eval",
                                        f"--workdir={workdir}"]),
                          ("export", [f"--model={workdir}", "--export_dir="
                                      f"{tmp_path / 'exports'}"]),
                          ("export", ["--model=ViT-Ti_16", "--export_dir="
                                      f"{tmp_path / 'exports'}"])):
        line = error_line(run(command, *args, cwd=tmp_path, **offline),
                          command)
        assert line.startswith(f"keras-vit-{command}: error: This runs "
                               "on the TensorFlow backend ("), line
        assert "KERAS_BACKEND=jax here: set KERAS_BACKEND=tensorflow" in line
    assert not (tmp_path / "run").exists()
    assert not (tmp_path / "exports").exists()


def test_a_moved_field_is_said_as_a_line_of_the_log(tmp_path):
    """--config.optimizer.lr (moved to config.schedule) is upgraded with
    one warning in the log's own form (not Python's default format, nor
    absl's notice of logging before flag parsing), then the run goes on:
    here to the limit its other override breaks."""
    result = run("train", "--config=digits", f"--workdir={tmp_path}/w",
                 "--config.optimizer.lr=0.5",
                 "--config.trainer.total_steps=-5")
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, lines
    assert re.fullmatch(r"W\d{4} [\d:.]+\s+\d+ runner\.py:\d+\] "
                        r"--config\.optimizer\.lr is now "
                        r"--config\.schedule\.lr\.", lines[0]), lines
    # 0 is a value of its own (count the run in epochs), said beside > 0.
    assert lines[1] == (
        "keras-vit-train: error: --config.trainer.total_steps=-5 must be > "
        "0, or 0 with --config.trainer.epochs > 0 to count the run in "
        "epochs.")


@pytest.mark.slow
def test_a_strategys_start_is_said_in_the_commands_words(tmp_path):
    """TensorFlow's lines of a strategy's start (the single-worker
    MultiWorkerMirroredStrategy's devices, a TPU's initialisation) stay
    off the terminal: the command says what it connects to, and the
    replicas; --verbose keeps them."""
    tiny = ["--config=digits", "--config.trainer.total_steps=1",
            "--config.schedule.warmup_steps=0",
            "--config.evals.test.every_steps=0",
            "--config.model.hidden_size=16", "--config.model.num_layers=1",
            "--config.model.mlp_dim=16"]
    said = {}
    for verbose in ("", "--verbose"):
        tiny += [verbose] if verbose else []
        worker = run("train", *tiny, "--strategy=multiworker",
                     f"--workdir={tmp_path}/mw{verbose}")
        assert worker.returncode == 0, worker.stderr[-3000:]
        tpu = run("train", *tiny, "--strategy=tpu", "--tpu=local",
                  f"--workdir={tmp_path}/tpu")
        assert tpu.returncode == 1, tpu.stderr[-3000:]
        said[verbose] = worker.stderr + tpu.stderr
    for notice in ("Single-worker MultiWorkerMirroredStrategy",
                   "Initializing the TPU system"):
        assert notice not in said[""] and notice in said["--verbose"]
    assert "Connecting to the TPU local" in said[""]
    assert "Model vit: " in said[""] and " 1 replica." in said[""]
