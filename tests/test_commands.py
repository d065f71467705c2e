"""The one command-line language of the six keras-vit-* commands: the same
--model and --verbose on each, one line (exit 1) for a bad model, the
traceback with --verbose, a ValueError from inside Keras (a bug, not a file
Keras cannot read) left with its traceback; the configs shipped in the
package; parse_config_arg and the steps helper."""

import configparser
import gc
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import keras
import pytest
from absl import flags

import keras_vit
from keras_vit import config as config_lib
from keras_vit import create_model, quiet_start
from keras_vit.checkpoint import loader
from keras_vit.checkpoint.zoo import catalog
from keras_vit.commands import evaluate as evaluate_command
from keras_vit.commands import exhausted, runner
from keras_vit.commands import flags as cli
from keras_vit.commands import train as train_command
from keras_vit.errors import UsageError
from keras_vit.storage import workdir as wd
from keras_vit.training import distribute
from keras_vit.training.cluster import SetupError
from tests import console
from tests.reliability_cases import check_says, covers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = ("train", "evaluate", "export", "convert", "analysis", "predict")
MISSING = "/nowhere/no_model"


def module(name):
    return importlib.import_module(f"keras_vit.commands.{name}")


def bad_model_argv(name, tmp_path):
    """A command line of `name` that is right but for its model."""
    program = f"keras-vit-{name}"
    return {
        "train": [program, "--config=digits", f"--workdir={tmp_path}/run",
                  f"--model={MISSING}"],
        "evaluate": [program, "--mode=eval", f"--model={MISSING}"],
        "export": [program, f"--model={MISSING}",
                   f"--export_dir={tmp_path}/export"],
        "convert": [program, f"--model={MISSING}",
                    f"--output={tmp_path}/m.keras"],
        "analysis": [program, f"--model={MISSING}", "--digits=2",
                     f"--output_dir={tmp_path}/analysis"],
        "predict": [program, f"--model={MISSING}", str(tmp_path)],
    }[name]


def test_console_scripts_point_into_commands():
    parser = configparser.ConfigParser()
    parser.read(os.path.join(ROOT, "setup.cfg"))
    lines = parser["options.entry_points"]["console_scripts"].split("\n")
    scripts = dict(
        (s.strip() for s in line.split("=")) for line in lines if line
    )
    assert scripts == {
        f"keras-vit-{n}": f"keras_vit.commands.{n}:main" for n in COMMANDS
    }


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_the_same_model_flag_and_verbose(name, capsys):
    assert module(name).main([f"keras-vit-{name}", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: keras-vit-{name} [flags]")
    # The installed version, last (the distribution's name).
    assert text.rstrip().endswith(
        f"\n\nkeras-vision-transformer {keras_vit.__version__}")
    # One definition (flags.MODEL_HELP: the resolver's list of what a
    # model is, names and hf:// first), as absl wraps help.
    assert cli.MODEL_HELP.startswith(
        "The model: a released model's name (e.g. ViT-B_16; --list_models "
        "lists them), hf://ORG/NAME[@REVISION], kaggle://... (a keras-hub "
        "preset), a training workdir")
    assert f"--model: {cli.MODEL_HELP}" in " ".join(text.split())
    assert "--[no]verbose: Debug logging, and the traceback behind a " \
        "one-line error." in text
    for old in ("--keras_model", "--npz", "--hub", "--saved_model",
                "--images"):
        assert old not in text


@pytest.mark.parametrize("name", COMMANDS)
def test_list_models_prints_the_released_models_and_ends(name):
    """`keras-vit-NAME --list_models[=PATTERN]`, as a user types it: the
    released models whose name matches, one row each with what --model
    takes, without the command's required flags; a pattern matching none
    is one line naming the flag's bare form."""
    result = console.run(name, ["--list_models=*B_16*"], cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr == ""
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["size", "image", "classes", "trained", "on",
                              "--model"]
    released = keras_vit.list_models("*B_16*")
    assert len(rows) == len(released)
    for row, info in zip(rows, released):
        given = row.split("  ")[-1].split(" (")[0].strip()
        # What the row says to pass names that very release.
        assert catalog.lookup(given) == info, row
        assert row.split()[:2] == [info.variant, str(info.image_size)]
    assert "ViT-B_16 (imagenet21k/ViT-B_16)" in result.stdout
    every = console.run(name, ["--list_models"], cwd=ROOT)
    assert every.returncode == 0, every.stderr[-3000:]
    assert len(every.stdout.splitlines()) == len(keras_vit.list_models()) + 1
    none = console.run(name, ["--list_models=nothing*"], cwd=ROOT)
    assert none.returncode == 1 and none.stdout == ""
    assert none.stderr.splitlines() == [
        f"keras-vit-{name}: error: no released model's name matches "
        "'nothing*' (a shell pattern over names such as "
        "imagenet21k/ViT-B_16: '*B_16*', 'augreg/*'); --list_models alone "
        f"lists all {len(keras_vit.list_models())}."]


def test_help_wins_over_list_models(capsys):
    assert module("convert").main(
        ["keras-vit-convert", "--list_models", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: keras-vit-convert")


def test_an_unknown_name_points_at_the_lister(tmp_path, capsys):
    """The library's advice (`keras_vit.list_models()`) is the flag in a
    command's line."""
    argv = bad_model_argv("convert", tmp_path)
    argv[1] = "--model=ViT-B_17"
    assert module("convert").main(argv) == 1
    line = capsys.readouterr().err.strip()
    assert "Did you mean ViT-B_16" in line
    assert "(e.g. ViT-B_16; --list_models lists them)" in line
    assert "keras_vit.list_models" not in line


@pytest.mark.parametrize("name", COMMANDS)
def test_bad_model_is_one_line_and_verbose_adds_the_traceback(
    name, tmp_path, capsys
):
    tmp_path.joinpath("a.png").write_bytes(b"")
    argv = bad_model_argv(name, tmp_path)
    assert module(name).main(argv) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"keras-vit-{name}: error: {MISSING}: no such file or folder, and "
        f"no released model's name. A model is {config_source_kinds()}."
    ]
    assert module(name).main(argv + ["--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert "keras_vit.errors.UsageError" in err
    assert err.strip().splitlines()[-1] == f"keras-vit-{name}: error: " \
        f"{MISSING}: no such file or folder, and no released model's " \
        f"name. A model is {config_source_kinds()}."
    assert not os.path.exists(tmp_path / "run")  # nothing started


def config_source_kinds():
    """What a model is, as the commands word it (their flag, not the
    library's function, lists the released models)."""
    return loader.SOURCE_KINDS.replace("`keras_vit.list_models()`",
                                       "--list_models")


def _shell_words(command: str, message: str) -> str:
    """`message` as keras-vit-`command` prints it."""
    values = flags.FlagValues()
    module(command).define_flags(values, [f"keras-vit-{command}"])
    return runner.shell_words(message, values)


def test_library_words_become_the_commands_flags():
    message = ("`variant` goes with an .npz model only; `output` is no flag "
               "here; config.init.model stays")
    assert _shell_words("export", message) == (
        "--variant goes with an .npz model only; `output` is no flag here; "
        "config.init.model stays")
    assert _shell_words(
        "train",
        "set config.model.num_classes=N in config.json or keras_vit/config.py"
    ) == ("set --config.model.num_classes=N in config.json or "
          "keras_vit/config.py")
    # Another's field (a trained run's, the config.json's) stays a field.
    assert _shell_words(
        "evaluate", "--split='a' shares examples with the run's "
        "config.input.train_split='b': use config.input.split") == (
        "--split='a' shares examples with the run's "
        "config.input.train_split='b': use --config.input.split")
    # Arguments that a flag of another name sets: that flag.
    hint = ("pass `keep_pre_logits`=True, or leave out "
            "`representation_size`. Pass `strict`=False to load what fits.")
    assert _shell_words("train", hint) == (
        "pass --config.init.keep_pre_logits=True, or leave out "
        "--config.model.representation_size. Pass `strict`=False to load "
        "what fits.")
    # A command without the flag names the one that has it.
    unfit = "Pass `strict`=False to load what fits and get a report."
    for command in ("predict", "train", "evaluate", "export"):
        assert _shell_words(command, unfit) == (
            "keras-vit-convert --non_strict loads what fits into a .keras "
            "file, with a report.")
    assert _shell_words("convert", unfit) == (
        "Pass --non_strict to load what fits and get a report.")
    assert _shell_words("convert", hint) == (
        "pass `keep_pre_logits`=True, or leave out --representation_size. "
        "Pass --non_strict to load what fits.")
    # A table whose grid an .npz cannot say: the flag where the command
    # has it; keras-vit-train (no such flag) converts first.
    grid = ("m.npz: ... cannot say which. Pass its grid as `posemb_grid`="
            "(rows, cols): 4x4 to resize it, or 2x8 if it was saved at the "
            "model's grid.")
    assert _shell_words("evaluate", grid).endswith(
        "Pass its grid as --posemb_grid=ROWSxCOLS: 4x4 to resize it, or "
        "2x8 if it was saved at the model's grid.")
    assert _shell_words("train", grid).endswith(
        "Convert it first with its grid (keras-vit-convert "
        "--posemb_grid=ROWSxCOLS) and start from the .keras file: 4x4 to "
        "resize it, or 2x8 if it was saved at the model's grid.")
    # A library message names create_strategy's arguments; keras-vit-train
    # prints their flags.
    with pytest.raises(SetupError) as info:
        distribute.create_strategy("cpu", cpu_devices=2)
    assert str(info.value) == (
        "`cpu_devices`=2 splits the CPU for MirroredStrategy: use it with "
        "`strategy`=mirrored (or auto), not `strategy`=cpu.")
    assert _shell_words("train", str(info.value)) == (
        "--cpu_devices=2 splits the CPU for MirroredStrategy: use it with "
        "--strategy=mirrored (or auto), not --strategy=cpu.")
    # A model field named with its config field: the command's flag where
    # it has one, else the override alone.
    with pytest.raises(UsageError) as info:
        create_model(None, num_classes=3, image_size=36, patch_size=8,
                     hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16)
    assert _shell_words("train", str(info.value)).startswith(
        "--config.model.image_size height 36 is not divisible by patch "
        "size 8 (the stride 8): use a multiple of 8, e.g. 32 or 40.")
    assert _shell_words("evaluate", str(info.value)).startswith(
        "--image_size (--config.model.image_size) height 36 is not ")


def test_export_checks_its_version_before_the_model_loads(tmp_path,
                                                          capsys):
    """A --version TF Serving cannot read, or one already there, is one
    line naming the flag, before the (here missing) model is read."""
    export = module("export")
    (tmp_path / "vit" / "004").mkdir(parents=True)
    for version, says in (
            ("-3", "--version=-3 is not a whole number of 0 or more: pass "
             "one, or none for the next free one."),
            (str(2**63), f"--version={2**63} is above 9,223,372,036,854,"
             "775,807 (2**63 - 1)"),
            ("4", f"Version 4 already exists in {tmp_path / 'vit'}: pass "
             "another --version, or none for the next free one.")):
        assert export.main(["keras-vit-export", "--model=missing.keras",
                            f"--export_dir={tmp_path}",
                            f"--version={version}"]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"keras-vit-export: error: {says}"), line


def test_export_without_a_next_version_or_with_both_warmups_is_refused(
        tmp_path, capsys):
    """A model folder whose newest version is 2**63 - 1: the next one,
    which TF Serving could not read, is refused before the model loads
    (it was written, never served, and the export after it looped for
    good with Ctrl-C held); --warmup_images with --no_warmup is refused
    where the images went unread."""
    export = module("export")
    hub = os.path.join(os.path.dirname(__file__), "fixtures", "hub",
                       "hf_vit_classifier")
    (tmp_path / "vit" / str(2**63 - 1)).mkdir(parents=True)
    for flags_given, says in (
            ([], f"{tmp_path / 'vit'} holds version 9,223,372,036,854,775,"
             "807, the largest TF Serving reads (2**63 - 1), so there is no "
             "next one: pass a free --version below it, or another "
             "--model_name."),
            (["--warmup_images=x.jpg", "--no_warmup"],
             "Give --warmup_images or --no_warmup, not both.")):
        assert export.main(["keras-vit-export", f"--model={hub}",
                            f"--export_dir={tmp_path}", *flags_given]) == 1
        err = capsys.readouterr().err
        assert "Loading" not in err, err
        (line,) = err.strip().splitlines()
        assert line == f"keras-vit-export: error: {says}", line
    assert os.listdir(tmp_path / "vit") == [str(2**63 - 1)]


def test_a_bad_flag_is_one_line(tmp_path, capsys):
    export = module("export")
    assert export.main(["keras-vit-export", "--model=x.keras",
                        "--export_dir=x", "--formt=litert"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-vit-export: error: Unknown command line flag 'formt'. Did you "
        "mean: format ? (flags: --help)"
    ]
    assert export.main(["keras-vit-export", "--model=x.keras"]) == 1
    err = capsys.readouterr().err
    assert err == ("keras-vit-export: error: --export_dir is required "
                   "(flags: --help)\n")
    # A boolean mistyped, a flag's or a config field's: what it takes.
    assert export.main(["keras-vit-export", "--model=x.keras",
                        "--export_dir=x", "--keep_aspect=Ture"]) == 1
    assert capsys.readouterr().err == (
        "keras-vit-export: error: --keep_aspect=Ture is not a boolean: use "
        "true or false (1 or 0)\n")
    train = module("train")
    assert train.main(["keras-vit-train", "--config=digits", "--workdir=w",
                       "--config.input.skip_bad_images=yes"]) == 1
    assert capsys.readouterr().err == (
        "keras-vit-train: error: --config.input.skip_bad_images=yes is not a "
        "boolean: use true or false (1 or 0)\n")


def test_value_error_from_inside_keras_is_one_line_naming_it(
    tmp_path, monkeypatch, capsys
):
    # A .keras file is untrusted: whatever Keras raises reading it is one
    # line naming the file and Keras's error (its traceback with
    # --verbose, as the cause).
    path = tmp_path / "m.keras"
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.save(path)

    def broken(*args, **kwargs):
        raise ValueError("a bug inside Keras")

    monkeypatch.setattr(keras.models, "load_model", broken)
    argv = ["keras-vit-export", f"--model={path}",
            f"--export_dir={tmp_path}/out"]
    assert module("export").main(argv) == 1
    err = capsys.readouterr().err
    assert f"{path}: Keras cannot load it (ValueError: a bug inside " \
           "Keras)" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def _run(args, **kwargs):
    env = dict(os.environ, PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
               TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, *args], capture_output=True,
                          text=True, env=env, timeout=300, **kwargs)


@pytest.mark.slow
def test_processes_print_one_line_or_the_traceback(tmp_path):
    # A real process of each kind: the one-line error (python train.py),
    # the traceback with --verbose (a console-script entry point), and a
    # ValueError from inside Keras, which keeps its traceback.
    result = _run([os.path.join(ROOT, "train.py"), "--config=digits",
                   f"--workdir={tmp_path}/run", f"--model={MISSING}"],
                  cwd=str(tmp_path))
    assert result.returncode == 1, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if "error" in line]
    assert lines == [f"keras-vit-train: error: {MISSING}: no such file or "
                     "folder, and no released model's name. A model is "
                     f"{config_source_kinds()}."]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()

    result = _run(["-m", "keras_vit.commands.predict", f"--model={MISSING}",
                   "--verbose", str(tmp_path)])
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"keras-vit-predict: error: {MISSING}: no such file or folder,")

    path = tmp_path / "m.keras"
    path.write_bytes(b"not read")
    code = (
        "import sys\n"
        "from keras_vit.checkpoint import loader\n"
        "def broken(*a, **k):\n"
        "    raise ValueError('a bug inside Keras')\n"
        "loader.load_vit = broken\n"
        "from keras_vit.commands import export\n"
        "sys.exit(export.main(sys.argv))\n"
    )
    result = _run(["-c", code, f"--model={path}",
                   f"--export_dir={tmp_path}/out"])
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "ValueError: a bug inside Keras" in result.stderr
    assert "keras-vit-export: error" not in result.stderr


def test_python_dash_m_of_a_command_starts_quiet_too():
    python = "/usr/bin/python3"
    for orig in ([python, "-m", "keras_vit.commands.train", "--help"],
                 [python, "-X", "dev", "-mkeras_vit.commands.predict"]):
        assert quiet_start._command_module(["-m", "--help"], orig), orig
    for argv, orig in (
            (["-m"], [python, "-m", "pytest", "tests"]),
            (["-m"], [python, "-m", "keras_vit.commandsx"]),
            (["train.py", "-m"], [python, "train.py", "-m",
                                  "keras_vit.commands.train"]),
            (["-c"], [python, "-c", "import keras_vit"])):
        assert not quiet_start._command_module(argv, orig), orig


@pytest.mark.slow
@pytest.mark.parametrize("name", ["train", "predict"])
def test_python_dash_m_prints_no_tensorflow_notices(name, tmp_path):
    # As quiet as the console scripts: TensorFlow's start-up notices only
    # with --verbose (TF_CPP_MIN_LOG_LEVEL left unset, as a user has it).
    # (--help and a path with nothing there load no TensorFlow; a folder
    # of no model kind is refused after the resolver loaded it.)
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="")
    empty = tmp_path / "empty"
    empty.mkdir()
    for verbose in (False, True):
        args = ([f"--workdir={tmp_path}/run", "--config=digits"]
                if name == "train" else [str(tmp_path)])
        result = subprocess.run(
            [sys.executable, "-m", f"keras_vit.commands.{name}",
             f"--model={empty}", *args,
             *(["--verbose"] if verbose else [])],
            capture_output=True, text=True, env=env, timeout=300)
        assert result.returncode == 1, result.stderr[-2000:]
        assert (f"keras-vit-{name}: error: {empty} is a folder of no model "
                "kind") in result.stderr
        notices = [line for line in result.stderr.splitlines()
                   if quiet_start.noise(line, cpu_only=True)]
        if verbose:
            assert notices, result.stderr  # the notices are there to hide
        else:
            assert notices == [], notices
            for word in ("cudart", "cpu_feature_guard"):
                assert word not in result.stderr, result.stderr


@pytest.mark.slow
def test_console_words_library_messages_as_flags(tmp_path):
    # The user's door: create_strategy's and packaged_config's messages,
    # printed by keras-vit-train with the flags the user typed.
    result = _run(["-m", "keras_vit.commands.train", "--config=digits",
                   f"--workdir={tmp_path}/run", "--strategy=cpu",
                   "--cpu_devices=2"])
    assert result.returncode == 1, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-vit-train: error: --cpu_devices=2 splits the CPU for "
        "MirroredStrategy: use it with --strategy=mirrored (or auto), not "
        "--strategy=cpu.")
    result = _run(["-m", "keras_vit.commands.train", "--config", "digitz",
                   f"--workdir={tmp_path}/run"])
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "keras-vit-train: error: --config=digitz: no such config. Shipped "
        f"configs: {', '.join(config_lib.packaged_configs())}; or give a "
        "path (my_config.py)."]


# ---------------------------------------------------------------- configs
def parse_train(argv):
    values = flags.FlagValues()
    argv = ["keras-vit-train", *argv]
    module("train").define_flags(values, argv)
    cli.define_verbose(values)
    cli.parse(values, argv)
    return values


def test_config_by_name_and_by_path(tmp_path):
    by_name = parse_train(["--config=digits", "--workdir=w"]).config
    # The space form, as absl users type flags.
    spaced = parse_train(["--config", "digits", "--workdir=w"]).config
    assert spaced.to_dict() == by_name.to_dict()
    # An argument to a config that takes none is refused, not dropped.
    with pytest.raises(Exception, match="the digits config takes no "
                       "argument; use --config=digits and"):
        parse_train(["--config", "digits:x", "--workdir=w"])
    for path in ("configs/digits.py", "keras_vit/configs/digits.py",
                 os.path.join(ROOT, "configs", "digits.py")):
        cwd = os.getcwd()
        os.chdir(ROOT)
        try:
            by_path = parse_train([f"--config={path}", "--workdir=w"]).config
        finally:
            os.chdir(cwd)
        assert by_path.to_dict() == by_name.to_dict()
    assert os.path.samefile(os.path.join(ROOT, "configs"),
                            config_lib.CONFIGS_DIR)
    few = parse_train(["--config=digits_few_labels:labels=5,init=/r/e.npz",
                       "--config.trainer.total_steps=7", "--workdir=w"]).config
    assert (few.input.train_examples_per_class, few.init.model,
            few.trainer.total_steps) == (5, "/r/e.npz", 7)
    # labels=0 would keep every image (the field's "all"): refused, as a
    # count that is no whole number is in every config (one line, not
    # Python's "invalid literal for int()"; res=-384 named as res=).
    # A rate, likewise: named with what it sets, not Python's "could not
    # convert string to float".
    whole = ("0", "abc", "1.5", "-384")
    rate = ("abc", "-0.1", "nan", "inf")
    fraction, step = rate + ("1", "1.5"), rate + ("0",)
    for config, bads, says in [
            ("digits_few_labels:labels", whole,
             "a whole number of labelled images per class of at least 1"),
            ("finetune:res", whole, "a whole number of pixels of at least 1"),
            ("mpp_pretrain:steps", whole,
             "a whole number of optimizer updates of at least 1"),
            ("augreg_i21k:epochs", whole, "a whole number of epochs of at "
             "least 1"),
            ("augreg_i1k:epochs", whole, "a whole number of epochs of at "
             "least 1"),
            ("augreg_i21k:do", fraction,
             "the dropout rate, a number in [0, 1)"),
            ("augreg_i1k:sd", fraction, "the stochastic depth rate"),
            ("augreg_i21k:wd", rate, "the weight decay"),
            ("finetune:lr", step, "the learning rate, a number above 0"),
            ("augreg_finetune:lr", step, "the learning rate")]:
        key = config.partition(":")[2]
        for bad in bads:
            with pytest.raises(Exception, match=re.escape(
                    f"Config argument {key}='{bad}': {says}")):
                parse_train([f"--config={config}={bad}", "--workdir=w"])
    assert parse_train(["--config=finetune:lr=0.01", "--workdir=w"]
                       ).config.schedule.lr == 0.01
    own = tmp_path / "mine.py"
    own.write_text("from keras_vit.configs import digits\n"
                   "def get_config(arg=None):\n"
                   "    c = digits.get_config()\n"
                   "    c.trainer.total_steps = int(arg)\n"
                   "    return c\n")
    assert parse_train([f"--config={own}:11", "--workdir=w"]
                       ).config.trainer.total_steps == 11


def test_unknown_config_name_lists_the_shipped_ones(capsys):
    with pytest.raises(config_lib.UsageError) as info:
        parse_train(["--config=digitz", "--workdir=w"])
    message = str(info.value)
    assert message.startswith("--config=digitz: no such config. Shipped "
                              "configs: augreg_finetune, augreg_i1k,")
    assert "digits, digits_few_labels," in message
    # The library names the config, not the flag.
    with pytest.raises(config_lib.UsageError, match="^digitz: no such "
                       "config. Shipped configs: augreg_finetune"):
        config_lib.packaged_config("digitz")
    # The command: one line, exit status 1, no traceback.
    assert module("train").main(["keras-vit-train", "--config", "digitz",
                                 "--workdir=w"]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        "keras-vit-train: error: " + message]
    assert config_lib.packaged_configs() == sorted(
        n[:-3] for n in os.listdir(os.path.join(ROOT, "keras_vit", "configs"))
        if n.endswith(".py") and not n.startswith("_"))


def test_old_init_fields_point_to_init_model(tmp_path):
    with pytest.raises(config_lib.UsageError) as info:
        parse_train(["--config=digits", "--workdir=w",
                     "--config.init.npz=x.npz"])
    assert "config.init.npz is now config.init.model" in str(info.value)
    # The config.json of a run made before init.model: read as init.model.
    saved = config_lib.base_config().to_dict()
    saved["init"] = {"npz": None, "keras_model": "/m.keras", "workdir": None,
                     "keep_pre_logits": True}
    wd.write_json(str(tmp_path / wd.CONFIG), saved)
    config = wd.read_config(str(tmp_path))
    assert config.init.model == "/m.keras" and config.init.keep_pre_logits
    assert "npz" not in config.init


def test_train_model_flag_sets_init_model(tmp_path):
    values = parse_train(["--config=digits", "--workdir=w",
                          "--model=/runs/pre"])
    assert values.model == "/runs/pre"
    with pytest.raises(config_lib.UsageError, match="two models"):
        module("train")._main(parse_train([
            "--config=digits_few_labels:init=/a.npz", "--workdir=w",
            "--model=/b.npz"]), [])


def test_train_model_flag_wins_over_the_config_files_start():
    """--model replaces the start a config file sets (finetune's released
    B/16); a size trains that variant from scratch, the sizes given on the
    command line kept; a start given twice on the command line is an
    error."""
    start_from = module("train").start_from
    config = start_from(parse_train([
        "--config=finetune:dataset=cifar10", "--workdir=w",
        "--model=ViT-L_16"]))
    assert config.init.model == "ViT-L_16"
    config = start_from(parse_train([
        "--config=finetune:dataset=cifar10", "--workdir=w", "--model=Ti/16",
        "--config.model.hidden_size=32"]))
    assert config.init.model is None and config.model.variant == "Ti/16"
    assert config.model.hidden_size == 32
    config = start_from(parse_train(["--config=digits", "--workdir=w",
                                     "--model=S/16"]))
    assert (config.model.variant, config.model.patch_size,
            config.model.hidden_size) == ("S/16", None, None)
    with pytest.raises(config_lib.UsageError, match="two models"):
        start_from(parse_train([
            "--config=digits", "--workdir=w", "--model=Ti/16",
            "--config.init.model=/a.npz"]))
    # Two sizes, likewise: one, not the flag that happens to win.
    with pytest.raises(config_lib.UsageError, match=(
            "--model=Ti/16 and config.model.variant=S/16 name two sizes to "
            "train: keep one.")):
        start_from(parse_train([
            "--config=digits", "--workdir=w", "--model=Ti/16",
            "--config.model.variant=S/16"]))
    config = start_from(parse_train([
        "--config=digits", "--workdir=w", "--model=Ti/16",
        "--config.model.variant=Ti/16"]))
    assert config.model.variant == "Ti/16"
    # A model to start from and a variant: fine-tuning would take the
    # start's architecture, the variant silently undone.
    with pytest.raises(config_lib.UsageError, match=(
            r"--model=/a.keras and config.model.variant=Ti/16 name two "
            r"models: .* keep --model \(or --model=Ti/16 to train Ti/16 "
            r"from scratch\).")):
        start_from(parse_train([
            "--config=digits", "--workdir=w", "--model=/a.keras",
            "--config.model.variant=Ti/16"]))


def test_a_variant_on_a_config_that_starts_from_a_model_is_refused(
        tmp_path):
    """keras-vit-train --config=digits_few_labels:init=RUN
    --config.model.variant=Ti/16: the run would fine-tune RUN's
    architecture, not Ti/16; refused in one line naming both ways, before
    the workdir is made."""
    from tests import console

    workdir = tmp_path / "w"
    result = console.run("train", [
        f"--config=digits_few_labels:init={tmp_path / 'run'}",
        f"--workdir={workdir}", "--config.model.variant=Ti/16"])
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "keras-vit-train: error: --config.model.variant=Ti/16 names a model "
        "to train, but the config starts from "
        f"--config.init.model={tmp_path / 'run'}, whose architecture "
        "fine-tuning takes: name the model to start from instead "
        "(--model=SOURCE, or the config's own argument where it has one, as "
        "in --config=finetune:variant=Ti/16), or train Ti/16 from scratch "
        "with --config.init.model=None.")
    assert not workdir.exists()


def test_a_variant_switched_on_the_command_line_names_the_width_it_keeps(
        caplog):
    """--config.model.variant=L/16 on a recipe made for B/16 switches the
    sizes; the recipe's pre-logits width (B/16's 768) stays, said in the
    log with the flag and the config argument that change it."""
    caplog.set_level("WARNING")
    config = parse_train(["--config=imagenet21k_pretrain", "--workdir=w",
                          "--config.model.variant=L/16"]).config
    assert config.model.hidden_size is None  # L/16's own
    assert config.model.representation_size == 768
    assert ("keeps the config's pre-logits width "
            "config.model.representation_size=768") in caplog.text
    assert "--config=NAME:L/16" in caplog.text
    caplog.clear()
    config = parse_train(["--config=imagenet21k_pretrain:L/16",
                          "--workdir=w"]).config
    assert config.model.representation_size == 1024
    assert "pre-logits width" not in caplog.text


def test_parse_config_arg():
    with pytest.raises(config_lib.UsageError, match="'data_dir' given twice"):
        config_lib.parse_config_arg("/a,b", "data_dir", data_dir="")
    parse = config_lib.parse_config_arg
    assert parse(None, "variant", variant="B/16", aug="none") == {
        "variant": "B/16", "aug": "none"}
    assert parse("L/16,aug= light1 ", "variant", variant="B/16",
                 aug="none") == {"variant": "L/16", "aug": "light1"}
    with pytest.raises(config_lib.UsageError,
                       match=r"Unknown config argument 'epochs' in "
                       r"'epochs=3': use key=value with keys aug, variant"):
        parse("epochs=3", "variant", variant="B/16", aug="none")
    # A folder whose name holds "=": the error names the way to give it.
    with pytest.raises(config_lib.UsageError) as info:
        parse("/tmp/a=b", "data_dir", data_dir="")
    assert str(info.value) == (
        "Unknown config argument '/tmp/a' in '/tmp/a=b': use key=value with "
        "keys data_dir (a data_dir holding '=' is named: data_dir=/tmp/a=b).")
    assert parse("data_dir=/tmp/a=b", "data_dir", data_dir="") == {
        "data_dir": "/tmp/a=b"}
    with pytest.raises(config_lib.UsageError) as info:  # no folder: no hint
        parse("B/16=x", "variant", variant="B/16")
    assert "holding '='" not in str(info.value)
    with pytest.raises(config_lib.UsageError,
                       match=r"Cannot read config argument 'cifar10' in "
                       r"'cifar10': use key=value with keys dataset"):
        parse("cifar10", dataset="cifar100")


def test_epochs_to_steps():
    steps = config_lib.epochs_to_steps
    # ViT Table 3 / AugReg: 90 and 300 epochs of ImageNet-21k at 4096.
    assert steps(90, config_lib.IMAGENET21K_TRAIN, 4096) == 310_850
    assert steps("300", config_lib.IMAGENET21K_TRAIN, 4096) == 1_036_167
    assert steps(300, config_lib.IMAGENET1K_TRAIN, 4096) == 92_898
    assert steps(1, 10, 4) == 3 and steps(1, 8, 4) == 2


def test_convert_names_what_the_keras_file_does_not_keep(tmp_path, caplog):
    """A hub model's class names stay behind in a .keras file: one warning
    line names them and the flag that gives them to predict and export."""
    from keras_vit.commands import convert

    hub = os.path.join(os.path.dirname(__file__), "fixtures", "hub",
                       "hf_vit_classifier")
    out = str(tmp_path / "m.keras")
    assert convert.main(["keras-vit-convert", f"--model={hub}",
                         f"--output={out}"]) == 0
    (line,) = [r.getMessage() for r in caplog.records
               if "does not keep" in r.getMessage()]
    assert "class names" in line and "--class_names_file" in line
    assert "--resize_size" not in line  # transformers resizes directly
    assert "convert at the size you will use" in line
    # A timm folder: its crop_pct's resize too (0.9 at 32: 35, the
    # shorter side: crop_mode center).
    timm = os.path.join(os.path.dirname(hub), "timm_vit")
    caplog.clear()
    assert convert.main(["keras-vit-convert", f"--model={timm}",
                         f"--output={tmp_path / 't.keras'}"]) == 0
    (line,) = [r.getMessage() for r in caplog.records
               if "does not keep" in r.getMessage()]
    assert ("its evaluation resize (pass --resize_size=35 --keep_aspect)"
            in line and line.endswith("these flags."))
    # Converted at a size: the position table is resized already. A model
    # without a head has no class names, nothing to pass: no flag asked.
    caplog.clear()
    assert convert.main(["keras-vit-convert", f"--model={hub}",
                         "--image_size=48",
                         f"--output={tmp_path / 'h48.keras'}"]) == 0
    (line,) = [r.getMessage() for r in caplog.records
               if "does not keep" in r.getMessage()]
    assert "position table" not in line and line.endswith("that flag.")
    # --num_classes of its own width keeps its head: its names still named.
    caplog.clear()
    assert convert.main(["keras-vit-convert", f"--model={hub}",
                         "--num_classes=5", "--image_size=48",
                         f"--output={tmp_path / 'h5.keras'}"]) == 0
    assert "its 5 class names" in caplog.text
    caplog.clear()
    base = os.path.join(os.path.dirname(hub), "hf_vit_model_bin")
    assert convert.main(["keras-vit-convert", f"--model={base}",
                         f"--output={tmp_path / 'b.keras'}"]) == 0
    (line,) = [r.getMessage() for r in caplog.records
               if "does not keep" in r.getMessage()]
    assert "class names" not in line and "flag." not in line
    # A timm folder naming 1 class of its 3: names predict and export
    # would refuse for its head are not asked for.
    short = tmp_path / "timm_short"
    shutil.copytree(timm, short)
    config = json.loads((short / "config.json").read_text())
    config["label_names"] = ["red"]
    (short / "config.json").write_text(json.dumps(config))
    caplog.clear()
    assert convert.main(["keras-vit-convert", f"--model={short}",
                         f"--output={tmp_path / 's.keras'}"]) == 0
    (line,) = [r.getMessage() for r in caplog.records
               if "does not keep" in r.getMessage()]
    assert "class names" not in line and "--resize_size=35" in line


def test_convert_asks_for_the_grid_of_a_file_that_is_not_square(
        tmp_path, capsys):
    """An .npz of 4 x 6 patches: its grid or size asked for in the
    command's flags (not a 224 model its table does not fit), a wrong grid
    named; given either, converted."""
    from keras_vit.checkpoint import weights
    from keras_vit.commands import convert

    path = str(tmp_path / "grid.npz")
    weights.save_npz(create_model(
        None, num_classes=3, image_size=(32, 48), patch_size=8,
        hidden_size=16, num_layers=1, num_heads=2, mlp_dim=16), path)
    out = f"--output={tmp_path / 'g.keras'}"
    for flag, says in (
            ("--non_strict", "24 patch tokens (not a square: 4x6, 6x4 or "
             "3x8?): pass the grid it was trained with as "
             "--posemb_grid=ROWSxCOLS, or the --image_size=HxW it was "
             "trained at."),
            ("--posemb_grid=5x5", f"{path}: --posemb_grid=5x5 holds 25 "
             "patches, its position table 24 (a 4x6 or 6x4 grid holds that "
             "many): pass the grid it was trained with.")):
        capsys.readouterr()
        assert convert.main(["keras-vit-convert", f"--model={path}", out,
                             flag]) == 1
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.endswith(says), line
    assert not (tmp_path / "g.keras").exists()
    for flag in ("--posemb_grid=4x6", "--image_size=32x48"):
        assert convert.main(["keras-vit-convert", f"--model={path}", out,
                             flag, "--overwrite"]) == 0
        assert keras.saving.load_model(
            str(tmp_path / "g.keras")).input_shape == (None, 32, 48, 3)


def test_an_unknown_variant_of_an_npz_is_named_with_the_closest(
        tmp_path, capsys):
    """--variant of an .npz checks the file's size: a name no variant has
    is one line with the closest names and the way out (leave it out), not
    the builder's advice about custom sizes."""
    from keras_vit.checkpoint import weights
    from keras_vit.commands import convert

    path = str(tmp_path / "m.npz")
    weights.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16), path)
    assert convert.main(["keras-vit-convert", f"--model={path}",
                         f"--output={tmp_path / 'm.keras'}",
                         "--variant=b/16"]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"keras-vit-convert: error: Unknown --variant "
                           f"'b/16' for {path}. Did you mean B/16? The "
                           "variants are Ti/16, S/16"), line
    assert line.endswith("leave --variant out to read the size from the "
                         "file's arrays (it only checks them)."), line
    assert "variant=None" not in line
    assert not (tmp_path / "m.keras").exists()


def test_a_size_the_model_refuses_names_the_flag(tmp_path, capsys):
    """The model's own checks name its arguments in backquotes: the line
    names the command's flags."""
    from keras_vit.checkpoint import weights
    from keras_vit.commands import convert

    path = str(tmp_path / "m.npz")
    weights.save_npz(create_model(
        None, num_classes=3, image_size=16, patch_size=8, hidden_size=16,
        num_layers=1, num_heads=2, mlp_dim=16), path)
    for flag, says in (
            ("--representation_size=0", "--representation_size must be a "
             "positive width, got 0 (a model without a pre-logits layer "
             "leaves it out)."),
            ("--image_size=8x0", "--image_size must be positive (an int or "
             "(height, width)), got (8, 0)."),
            ("--num_classes=-1", "--num_classes must be >= 0 (0: no head), "
             "got -1.")):
        assert convert.main(["keras-vit-convert", f"--model={path}", flag,
                             f"--output={tmp_path / 'o.keras'}"]) == 1
        assert capsys.readouterr().err.strip() == (
            f"keras-vit-convert: error: {says}")
    # A pooling the file's weights do not fit: named as the flag, with no
    # Python call to build another model.
    assert convert.main(["keras-vit-convert", f"--model={path}",
                         "--pooling=gap",
                         f"--output={tmp_path / 'o.keras'}"]) == 1
    line = capsys.readouterr().err.strip()
    assert ("The file's pooling is token, the model's --pooling=gap: build "
            "the model with the file's pooling. Pass --non_strict to load "
            "what fits and get a report.") in line
    assert "create_model" not in line and "\n" not in line


CONFIG_FILES = {
    # (file text, what the one line says)
    "extra.py": ("from keras_vit.config import base_config\n"
                 "def get_config(arg=None):\n"
                 "    c = base_config()\n"
                 "    with c.unlocked():\n"
                 "        c.extra_field = 3\n"
                 "    return c\n",
                 "extra.py: --config.extra_field is not a config field"),
    "locked.py": ("from keras_vit.config import base_config\n"
                  "def get_config(arg=None):\n"
                  "    c = base_config()\n"
                  "    c.model.hiden_size = 64\n"
                  "    return c\n",
                  "locked.py failed at line 4 (c.model.hiden_size = 64): "
                  "the config has no field hiden_size; did you mean "
                  "hidden_size? The fields are those of "
                  "keras_vit/config_schema.py."),
    "none.py": ("def get_config(arg=None):\n    return None\n",
                "none.py: its get_config() returned None: return the config"),
    "syntax.py": ("def get_config(arg=None)\n    return 1\n",
                  "syntax.py failed at line 1: SyntaxError: "),
    "divide.py": ("def get_config(arg=None):\n    return 1 / 0\n",
                  "divide.py failed at line 2: ZeroDivisionError: division "
                  "by zero"),
    "imports.py": ("import not_a_module_of_anyone\n"
                   "def get_config(arg=None):\n    return None\n",
                   "imports.py failed at line 1: ModuleNotFoundError: No "
                   "module named 'not_a_module_of_anyone'"),
    "noget.py": ("CONFIG = 1\n", "the --config file defines no "
                 "get_config(arg=None)"),
}


def test_config_files_are_checked_against_the_schema(tmp_path, capsys):
    """A config file's fields are the schema's: one it adds is named with
    the file; one it leaves out (a partial ConfigDict, a dict, an earlier
    version's flat config) takes its default; a file that fails to run
    is one line naming it and the line."""
    train = module("train")
    for name, (text, says) in CONFIG_FILES.items():
        (tmp_path / name).write_text(text)
        # ml_collections loads every config file as one module name, and
        # loading runs the new file in the old module of that name: the
        # functions of the last file read stay (once per process, a
        # user's command; many times here).
        sys.modules.pop("config_config", None)
        assert train.main(["keras-vit-train", f"--config={tmp_path / name}",
                           f"--workdir={tmp_path}/w"]) == 1, name
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], (name, err)
        assert "Traceback" not in err[0]
    partial = tmp_path / "partial.py"
    partial.write_text(
        "import ml_collections\n"
        "def get_config(arg=None):\n"
        "    c = ml_collections.ConfigDict()\n"
        "    c.model = dict(variant=None, patch_size=8, hidden_size=32,\n"
        "                   num_layers=1, num_heads=4, mlp_dim=64)\n"
        "    c.trainer = dict(total_steps=7)\n"
        "    return c\n")
    config = parse_train([f"--config={partial}", "--workdir=w"]).config
    base = config_lib.base_config()
    assert config.trainer.total_steps == 7 and config.model.hidden_size == 32
    assert config.schedule.lr == base.schedule.lr  # the schema's default
    assert config.input.dataset == base.input.dataset
    plain = tmp_path / "plain.py"
    plain.write_text("def get_config(arg=None):\n"
                     "    return {'trainer': {'total_steps': 5}}\n")
    assert parse_train([f"--config={plain}", "--workdir=w"]
                       ).config.trainer.total_steps == 5
    flat = tmp_path / "flat.py"  # an earlier version's names
    flat.write_text("import ml_collections\n"
                    "def get_config(arg=None):\n"
                    "    return ml_collections.ConfigDict(\n"
                    "        dict(batch_size=8, total_steps=3))\n")
    config = parse_train([f"--config={flat}", "--workdir=w"]).config
    assert (config.input.batch_size, config.trainer.total_steps) == (8, 3)
    # An earlier version's name of a boolean, in both absl spellings.
    for flag, value in (("--config.cache_train", True),
                        ("--noconfig.cache_train", False)):
        assert parse_train(["--config=digits", "--workdir=w", flag]
                           ).config.input.cache_train is value, flag
    # A private module of the configs folder is no config.
    with pytest.raises(config_lib.UsageError, match="_common: no such "
                       "config"):
        parse_train(["--config=_common", "--workdir=w"])


def test_overrides_as_users_type_them():
    """Lists of words, a (height, width) size and None where the schema
    allows them, as typed; a whole section is refused."""
    config = parse_train([
        "--config=digits", "--workdir=w", "--config.optimizer.no_decay=bias,"
        "gamma", "--config.model.image_size=32x48",
        "--config.trainer.grad_clip_norm=None"]).config
    assert tuple(config.optimizer.no_decay) == ("bias", "gamma")
    assert tuple(config.model.image_size) == (32, 48)
    assert config.trainer.grad_clip_norm is None
    config = parse_train(["--config=digits", "--workdir=w",
                          "--config.optimizer.no_decay=(bias, cls)",
                          "--config.model.image_size=24,32"]).config
    assert tuple(config.optimizer.no_decay) == ("bias", "cls")
    assert tuple(config.model.image_size) == (24, 32)
    # The later value of a field wins, a pair or a number; the space form
    # of an override reads as the = form.
    config = parse_train(["--config=digits", "--workdir=w",
                          "--config.model.image_size=24x32",
                          "--config.model.image_size=40"]).config
    assert config.model.image_size == 40
    config = parse_train(["--config", "digits", "--workdir=w",
                          "--config.model.image_size", "40",
                          "--config.model.image_size", "24x32",
                          "--config.trainer.jit_compile", "False"]).config
    assert tuple(config.model.image_size) == (24, 32)
    assert config.trainer.jit_compile is False
    with pytest.raises(config_lib.UsageError, match=r"--config.model is a "
                       "section of fields: set them one by one"):
        parse_train(["--config=digits", "--workdir=w",
                     "--config.model={'hidden_size': 64}"])
    from keras_vit import config_limits
    for bad in ("0.5", "0.9,0.1"):
        config = parse_train(["--config=digits", "--workdir=w",
                              f"--config.input.pp.area_range={bad}"]).config
        with pytest.raises(config_lib.UsageError, match="must be two shares "
                           "of the image, low,high with 0 < low"):
            config_limits.check_limits(config)


def test_a_tpu_named_beside_another_strategy_is_refused():
    with pytest.raises(SetupError, match="`tpu`=foo names a TPU, which "
                       "`strategy`=cpu does not use"):
        distribute.create_strategy("cpu", "foo")
    with pytest.raises(SetupError, match="`cpu_devices`=-1: give 2 or more"):
        distribute.create_strategy("cpu", None, cpu_devices=-1)


def test_named_values_and_combinations_are_checked_as_flags():
    """A field of a few named values, and fields that do not go together,
    are named as their flags before the run builds anything; the lists
    are the library's own."""
    from keras_vit import config_limits, objectives, optim
    from keras_vit.data import preprocessing
    from keras_vit.remat import REMAT_POLICIES

    choices = dict(config_limits.CHOICES)
    assert choices["model.remat"] == REMAT_POLICIES
    assert choices["objective.loss"] == tuple(objectives.LOSS_SCORES)
    assert choices["optimizer.name"] == tuple(optim.OPTIMIZERS)
    assert choices["schedule.decay_type"] == tuple(optim.DECAY_TYPES)
    pp = parse_train(["--config=digits", "--workdir=w"]).config.input.pp
    for kind in choices["input.pp.train"]:  # each one the data reads
        pp.train = kind
        assert callable(preprocessing.from_config(pp, 32, 0, training=True))
    cases = [
        (["--config.optimizer.name=lars"], "config.optimizer.name='lars': "
         "use one of 'sgd', 'adam', 'adamw', 'lamb'."),
        (["--config.schedule.decay_type=rsqrt"], "config.schedule.decay_type"
         "='rsqrt': use one of 'cosine', 'linear', 'constant'."),
        (["--config.objective.loss=xent"], "config.objective.loss='xent': "
         "use one of 'softmax_xent', 'sigmoid_xent'."),
        (["--config.input.pp.train=train"], "config.input.pp.train='train': "
         "use one of 'pretrain', 'finetune', 'eval'."),
        (["--config.model.pooling=mean"], "config.model.pooling='mean': use "
         "one of 'token', 'gap'."),
        (["--config.trainer.dtype=float16"], "config.trainer.dtype="
         "'float16': use one of 'float32', 'bfloat16'."),
        (["--config.optimizer.name=sgd", "--config.optimizer.weight_decay="
          "0.1"], "config.optimizer.name='sgd' takes no weight decay"),
        (["--config.optimizer.name=adam", "--config.optimizer.weight_decay="
          "0.1"], "config.optimizer.name='adam' has no decoupled weight "
         "decay (adamw, the paper's pre-training recipe, has): set "
         "config.optimizer.weight_decay=0"),
        (["--config.input.batch_size=32",
          "--config.trainer.accumulation_steps=3"],
         "config.input.batch_size=32 does not split into "
         "config.trainer.accumulation_steps=3 equal micro-batches: use a "
         "multiple of 3."),
        (["--config.input.pp.eval_resize_size=0"],
         "config.input.pp.eval_resize_size=0 must be > 0."),
        (["--config.input.pp.resize_size=-8"],
         "config.input.pp.resize_size=-8 must be > 0."),
    ]
    for args, says in cases:
        config = parse_train(["--config=digits", "--workdir=w", *args]).config
        with pytest.raises(config_lib.UsageError) as info:
            config_limits.check_limits(config)
        assert says in str(info.value), (args, str(info.value))


def test_a_warm_up_or_period_given_to_a_run_in_epochs_is_said_a_cap(
        tmp_path, caplog):
    """The folder config counts its run in epochs, where the warm-up and
    the periods are caps (`data_fit`): one given on the command line is
    said to be one, with the flag that keeps it; the config's own caps,
    and any value of a run counted in steps, are not said."""
    caplog.set_level("INFO", logger="absl")
    folder_arg = f"--config=folder:{tmp_path}"
    for args, said in [
            ([folder_arg, "--config.schedule.warmup_steps=10",
              "--config.checkpoints.every_steps=10"],
             "--config.checkpoints.every_steps=10, --config.schedule."
             "warmup_steps=10: a cap in a run counted in epochs (a warm-up "
             "of at most a tenth of its steps, periods of at most an "
             "epoch); --config.trainer.total_steps in place of epochs "
             "keeps them as given."),
            ([folder_arg], None),
            ([folder_arg, "--config.trainer.total_steps=50",
              "--config.schedule.warmup_steps=10"], None),
            (["--config=digits", "--config.schedule.warmup_steps=10"], None)]:
        caplog.clear()
        values = parse_train([*args, "--workdir=w"])
        train_command._say_caps(values, values.config)
        lines = [r.getMessage() for r in caplog.records]
        assert lines == ([said] if said else []), args


def test_config_file_code_and_partial_files_with_overrides(tmp_path,
                                                           capsys):
    """A KeyError of a config file's own code names its line; a field a
    partial file leaves out takes the schema's default and can be
    overridden, while a field it adds is named (with an override too); a
    quoted list value is one word as typed."""
    train = module("train")
    (tmp_path / "keys.py").write_text(
        "def get_config(arg=None):\n    d = {}\n    return d['missing']\n")
    for name, trainer in [("part.py", "total_steps"),
                          ("typo.py", "total_stepz")]:
        (tmp_path / name).write_text(
            "def get_config(arg=None):\n"
            f"    return {{'trainer': {{'{trainer}': 2}}}}\n")
    # (ml_collections takes a bool for a number, where True would be 1)
    (tmp_path / "flag.py").write_text(
        "def get_config(arg=None):\n"
        "    return {'input': {'batch_size': True}}\n")
    (tmp_path / "unset.py").write_text(  # a field unset (None) by default
        "def get_config(arg=None):\n"
        "    return {'model': {'representation_size': False}}\n")
    sys.modules.pop("config_config", None)  # see the test above
    config = parse_train([f"--config={tmp_path / 'part.py'}", "--workdir=w",
                          "--config.model.hidden_size=9"]).config
    assert (config.trainer.total_steps, config.model.hidden_size) == (2, 9)
    assert config.model.num_layers == config_lib.base_config(
    ).model.num_layers
    cases = [
        ([f"--config={tmp_path / 'keys.py'}"],
         "keys.py failed at line 3: KeyError: 'missing'"),
        *[([f"--config={tmp_path / 'typo.py'}", *more],
           f"{tmp_path / 'typo.py'}: --config.trainer.total_stepz is not a "
           "config field; did you mean --config.trainer.total_steps?")
          for more in ([], ["--config.model.hidden_size=9"])],
        ([f"--config={tmp_path / 'flag.py'}"],
         "config.input.batch_size=True is not a number: give one, as 512 "
         "is."),
        ([f"--config={tmp_path / 'unset.py'}"],
         "config.model.representation_size=False is not a number: give a "
         "whole number."),
    ]
    for args, says in cases:
        sys.modules.pop("config_config", None)  # see the test above
        assert train.main(["keras-vit-train", *args,
                           f"--workdir={tmp_path}/w"]) == 1
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0], err
    # Epochs beside a run counted in steps would go unread: refused, and
    # read once the steps are 0.
    sys.modules.pop("config_config", None)
    assert train.main(["keras-vit-train", "--config=digits",
                       "--config.trainer.epochs=3",
                       f"--workdir={tmp_path}/w"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("--config.trainer.epochs=3.0 is read only "
                              "when --config.trainer.total_steps is 0, and "
                              "this run's is 600: add --config.trainer."
                              "total_steps=0") in err[0], err
    assert not os.path.exists(f"{tmp_path}/w")
    config = parse_train(["--config=digits", "--workdir=w",
                          "--config.trainer.total_steps=0",
                          "--config.trainer.epochs=3"]).config
    assert (config.trainer.total_steps, config.trainer.epochs) == (0, 3.0)
    config = parse_train(["--config=digits", "--workdir=w",
                          "--config.optimizer.no_decay='block_\\d{1,2}/g'"]
                         ).config
    assert tuple(config.optimizer.no_decay) == ("block_\\d{1,2}/g",)


def test_out_of_memory_is_one_line_naming_the_fix(capsys):
    """A run out of memory (TensorFlow's ResourceExhaustedError, whose
    message holds the allocator's report): one line with the allocation
    that failed and what to lower; the traceback with --verbose."""
    import tensorflow as tf

    report = ("OOM when allocating tensor with shape[1,4,1048577,1048577] "
              "and type float on /job:localhost/replica:0/task:0/device:CPU:0"
              " by allocator cpu\n\t [[{{node einsum}}]]\nHint: If you want "
              "to see a list of allocated tensors when OOM happens...")

    def main(values, args):
        raise tf.errors.ResourceExhaustedError(None, None, report)

    code = runner.run("test", lambda values, argv: None, main,
                      ["keras-vit-test"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["keras-vit-test: error: Out of memory (OOM when allocating "
                   "tensor with shape[1,4,1048577,1048577]): lower the batch "
                   "size, the image size or the model, or run on a machine "
                   "with more memory."], err
    # In the flags of the command: keras-vit-evaluate has both.
    from keras_vit.commands import evaluate

    values = flags.FlagValues()
    evaluate.define_flags(values, ["keras-vit-evaluate"])
    line = exhausted.out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, report), values)
    assert "lower the batch size (config.input.batch_size or " \
        "--batch_size)" in line
    # A resize given is named first where the allocation is of its size
    # (a typo of 100000 asks for 120 GB), not otherwise.
    values(["keras-vit-evaluate", "--mode=eval", "--resize_size=100000"])
    line = exhausted.out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, report), values)
    assert "lower the batch size" in line and "resize" not in line
    line = exhausted.out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, report.replace("1048577,1048577", "100000,100000")),
        values)
    assert "lower --resize_size=100000, the batch size" in line
    assert runner.run("test", lambda values, argv: None, main,
                      ["keras-vit-test", "--verbose"]) == 1
    assert "Traceback" in capsys.readouterr().err


@covers("stop_swallowed_by_a_callback")
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_stop_a_library_swallowed_still_stops(tmp_path, capsys):
    """Ctrl-C or SIGTERM landing in a garbage-collection callback (JAX
    registers one): Python prints "Exception ignored" and drops the
    exception. The command still stops before it publishes a file (its
    stop's line and status), and one that writes nothing stops when its
    work ends."""
    from keras_vit.errors import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE
    from keras_vit.storage import atomic

    def swallowed(signum):
        fired = []

        def callback(phase, info):
            if not fired:
                fired.append(phase)
                signal.raise_signal(signum)

        gc.callbacks.append(callback)
        try:
            gc.collect()
        finally:
            gc.callbacks.remove(callback)
        assert fired  # and the stop did not reach this code

    out = tmp_path / "out.json"
    lines = []
    for signum, code, says in (
            (signal.SIGINT, INTERRUPTED_EXIT_CODE, "interrupted"),
            (signal.SIGTERM, PREEMPTED_EXIT_CODE, "preempted")):

        def main(values, args):
            swallowed(signum)
            atomic.atomic_write(str(out), "{}")

        assert runner.run("test", lambda values, argv: None, main,
                          ["keras-vit-test"]) == code
        err = capsys.readouterr().err  # (pytest keeps the "Exception
        # ignored" report Python prints: sys.unraisablehook)
        assert err.strip().splitlines()[-1].startswith(
            f"keras-vit-test: {says}"), err
        lines.append(err.strip().splitlines()[-1])
        assert not out.exists() and os.listdir(tmp_path) == []
    check_says("stop_swallowed_by_a_callback", "\n".join(lines))
    assert runner.run("test", lambda values, argv: None,
                      lambda values, args: swallowed(signal.SIGINT),
                      ["keras-vit-test"]) == INTERRUPTED_EXIT_CODE
    # Told once: the next command in this process runs.
    capsys.readouterr()
    assert runner.run("test", lambda values, argv: None,
                      lambda values, args: None, ["keras-vit-test"]) == 0


@covers("stop_after_the_work")
def test_a_stop_after_the_work_ends_the_process_with_its_status(tmp_path):
    """A Ctrl-C or SIGTERM once the command's work is done and said (the
    interpreter's shutdown takes a second or more with TensorFlow loaded)
    ends it at once with the work's status, not killed by the signal."""
    script = tmp_path / "keras-vit-late"
    script.write_text(
        "import os, signal, sys, time\n"
        "from keras_vit.commands import runner\n"
        "def main(values, args):\n"
        "    print('done', flush=True)\n"
        "status = runner.run('late', lambda v, a: None, main)\n"
        "os.kill(os.getpid(), getattr(signal, sys.argv[1]))\n"
        "time.sleep(30)\n"
        "sys.exit(status)\n")
    for name in ("SIGINT", "SIGTERM"):
        done = subprocess.run(
            [sys.executable, str(script), name], capture_output=True,
            text=True, timeout=120, env=dict(os.environ, PYTHONPATH=ROOT))
        assert done.returncode == 0, (name, done.stderr[-2000:])
        assert done.stdout == "done\n"
        assert "Traceback" not in done.stderr


def test_a_stop_inside_tensorflow_is_the_stop_it_was(capsys):
    """Ctrl-C (or SIGTERM) that lands while TensorFlow's C++ code raises an
    error reaches Python as pybind11's RuntimeError naming both (seen on
    keras-vit-export stopped during the SavedModel write): one line and the
    stop's exit status, as a Ctrl-C anywhere else; another RuntimeError
    keeps its traceback."""
    from keras_vit.errors import INTERRUPTED_EXIT_CODE, PREEMPTED_EXIT_CODE

    def stopped_by(kind):
        def main(values, args):
            raise RuntimeError(
                "pybind11::error_already_set: MISMATCH of original and "
                "normalized active exception types: ORIGINAL "
                f"InvalidArgumentError REPLACED BY {kind}: ")
        return main

    code = runner.run("test", lambda values, argv: None,
                      stopped_by("KeyboardInterrupt"), ["keras-vit-test"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == INTERRUPTED_EXIT_CODE
    assert len(err) == 1, err
    assert err[0].startswith("keras-vit-test: interrupted"), err
    code = runner.run("test", lambda values, argv: None,
                      stopped_by("Terminated"), ["keras-vit-test"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == PREEMPTED_EXIT_CODE
    assert err == ["keras-vit-test: preempted: stopped at once (SIGTERM); "
                   "run the same command again."], err
    # --verbose: TensorFlow's error in the traceback.
    assert runner.run("test", lambda values, argv: None,
                      stopped_by("KeyboardInterrupt"),
                      ["keras-vit-test", "--verbose"]) == INTERRUPTED_EXIT_CODE
    assert "RuntimeError: pybind11" in capsys.readouterr().err
    with pytest.raises(RuntimeError, match="REPLACED BY ValueError"):
        runner.run("test", lambda values, argv: None,
                   stopped_by("ValueError"), ["keras-vit-test"])


def test_a_workdir_under_the_home_folder_is_written_there(tmp_path,
                                                          monkeypatch,
                                                          capsys):
    """--workdir=~/run, as typed (the shell leaves a `~` after `=`): the
    run goes to the home folder, for keras-vit-train and -evaluate alike,
    not to a folder named `~` where the command runs."""
    home, here = tmp_path / "home", tmp_path / "here"
    home.mkdir()
    here.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(here)
    assert train_command.main([
        "keras-vit-train", *console.TINY_DIGITS, "--workdir=~/run",
        "--config.trainer.total_steps=2",
        "--config.evals.test.every_steps=0"]) == 0
    assert (home / "run" / wd.METRICS).exists()
    capsys.readouterr()
    assert evaluate_command.main(["keras-vit-evaluate", "--mode=eval",
                                  "--workdir=~/run"]) == 0
    assert '"accuracy"' in capsys.readouterr().out
    assert list(here.iterdir()) == []
