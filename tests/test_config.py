"""The one config schema (keras_vit/config_schema.py): every configs/*.py
file is the base with overrides, unknown fields are errors that name the closest
real one, the code reads fields directly, and old run directories load with
the defaults of fields they predate."""

import json
import os
import re

import ml_collections
import pytest
from absl import flags
from ml_collections import config_flags

from keras_vit import build, optim
from keras_vit import config as config_lib
from keras_vit.commands import flags as cli
from keras_vit.config_schema import EVALUATORS, evaluator
from keras_vit.errors import UsageError
from keras_vit.storage import workdir as wd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = os.path.join(ROOT, "configs")

# Every configs/ file with the arguments its docstring and the tests use.
ARGS = {
    "digits.py": [None],
    "mpp_digits.py": [None],
    "digits_few_labels.py": [
        None, "labels=10", "labels=5,init=/tmp/mpp_digits",
        "init=/tmp/mpp_digits/encoder.npz",
    ],
    "mpp_pretrain.py": [
        None, "B/16", "variant=L/16,dataset=folder,steps=100000",
    ],
    "vtab.py": [None],
    "fewshot.py": [None, "cifar100,pets", "digits"],
    "imagenet21k_pretrain.py": [
        None, "B/16", "L/16", "B/32", "L/32", "variant=L/16",
        "variant=B/16,dataset=imagenet21k_tfds",
    ],
    "finetune.py": [
        None, "dataset=cifar100,variant=B/16",
        "dataset=imagenet2012,variant=L/16", "dataset=oxford_iiit_pet",
        "dataset=oxford_flowers102,variant=B/32", "dataset=vtab/dtd",
        "dataset=cifar10,init=/runs/i21k_b16", "dataset=cifar10,lr=0.01",
        "dataset=cifar10,init=/m/model.keras",
        "dataset=imagenet2012,variant=L/16,res=512",
    ],
    "augreg_i21k.py": [
        None, "variant=R+Ti/16,aug=strong2,do=0.0,sd=0.0",
        "variant=S/32,aug=none,wd=0.03,epochs=30",
    ],
    "augreg_i1k.py": [None, "variant=S/16,aug=light1"],
    "augreg_finetune.py": [None, "dataset=cifar100,lr=0.03,res=224"],
    "plain_vit_i1k.py": [None, "epochs=300"],
    "folder.py": [None, "/tmp/photos", "data_dir=gs://bucket/photos"],
}
CASES = [(name, arg) for name, args in ARGS.items() for arg in args]


def load(name, arg=None, *overrides, flag_values=None):
    """A configs/ file as train.py gets it: through config_flags, locked."""
    target = os.path.join(CONFIGS, name) + (f":{arg}" if arg else "")
    argv = ["train.py", f"--config={target}", *overrides]
    values = flag_values or flags.FlagValues()
    config_flags.DEFINE_config_file("config", None, flag_values=values,
                                    lock_config=True, sys_argv=argv)
    values(argv)
    return values.config


def test_every_configs_file_is_listed():
    assert sorted(ARGS) == sorted(
        f for f in os.listdir(CONFIGS)
        if f.endswith(".py") and not f.startswith("_")
    )


def _fields_but_evaluators(config):
    return [n for n in config_lib.field_names(config)
            if not n.startswith("evals.") or n.startswith("evals.test.")]


@pytest.mark.parametrize("name,arg", CASES)
def test_configs_file_loads_with_exactly_the_base_fields(name, arg):
    """No config adds a field the base lacks, or drops one; an evaluator
    it adds has exactly its type's fields."""
    config = load(name, arg)
    assert config.is_locked
    assert _fields_but_evaluators(config) == _fields_but_evaluators(
        config_lib.base_config())
    for key, entry in config.evals.items():
        want = evaluator(entry.type)
        assert sorted(entry.keys()) == sorted(want.keys()), key


def test_base_is_locked_and_comments_every_field():
    base = config_lib.base_config()
    assert base.is_locked and base.optimizer.is_locked
    with pytest.raises(AttributeError):
        base.new_field = 1
    with open(os.path.join(ROOT, "keras_vit", "config_schema.py")) as f:
        lines = f.read().splitlines()
    body = lines[lines.index("def base_config() -> ml_collections."
                             "ConfigDict:"):]
    fields = {"c": 0, "e": 0}
    for i, line in enumerate(body):
        match = re.match(r"    ([ce])\.[\w.]+ = ", line)
        if match:
            fields[match.group(1)] += 1
            # A comment above, another field of the same commented group,
            # or a section's first line after a blank one.
            assert body[i - 1].startswith(("    #", "    c.", "    e.")) or (
                body[i - 1] == "" and "ConfigDict()" in line), line
    # Every field is assigned once: the base's, and each evaluator type's.
    assert fields["c"] == len([n for n in config_lib.field_names(base)
                               if not n.startswith("evals.")]) + 1
    assert fields["e"] == sum(
        len(config_lib.field_names(evaluator(k))) for k in EVALUATORS)


def test_the_top_level_is_sections_and_the_seed():
    """At most four top-level scalars (the seed); everything else is a
    section handed to its component."""
    base = config_lib.base_config()
    scalars = [k for k, v in base.items()
               if not isinstance(v, ml_collections.ConfigDict)]
    assert scalars == ["seed"]
    assert set(base.keys()) == {
        "seed", "model", "init", "input", "objective", "optimizer",
        "schedule", "trainer", "checkpoints", "log", "evals", "export"}


def test_misspelt_field_in_code_names_the_closest():
    config = load("digits.py")
    with pytest.raises(AttributeError) as e:
        config.trainer.totl_steps = 3
    assert 'Did you mean "total_steps" instead of "totl_steps"?' in str(
        e.value)
    with pytest.raises(AttributeError) as e:
        config.optimizer.momentun = 0.5
    assert 'Did you mean "momentum"' in str(e.value)
    with pytest.raises(AttributeError) as e:
        config.trainer.totl_steps  # reading one too
    assert 'Did you mean "total_steps"' in str(e.value)


@pytest.mark.parametrize("override,says", [
    ("--config.trainer.totl_steps=3",
     "unknown config field 'totl_steps'. Did you mean \"total_steps\" "
     "instead of \"totl_steps\"?"),
    ("--config.totl_steps=3",
     "config.totl_steps is not a config field; did you mean "
     "config.trainer.total_steps?"),
    ("--config.resize_size=32",
     "config.resize_size is not a config field; did you mean "
     "config.input.pp.resize_size?"),
    ("--config.model.weight_decay=0.1",
     "did you mean config.optimizer.weight_decay?"),
    ("--config.optimizer.learning_rate=0.1",
     "config.optimizer has: b1, b2, momentum, name, nesterov, no_decay,"),
    ("--config.schedule.learning_rate=0.1",
     "config.schedule has: decay_type, end_lr, lr, warmup_steps."),
    # A similar name in another section is another thing.
    ("--config.input.val_fraction=0.3",
     "config.input.val_fraction is not a config field; config.input has: "
     "batch_size,"),
])
def test_misspelt_field_on_the_command_line_names_the_closest(
    override, says, monkeypatch
):
    values = flags.FlagValues()
    argv = ["train.py", "--config=" + os.path.join(CONFIGS, "digits.py"),
            override]
    config_flags.DEFINE_config_file("config", None, flag_values=values,
                                    lock_config=True, sys_argv=argv)
    with pytest.raises(UsageError) as e:
        cli.parse(values, argv)
    message = str(e.value)
    assert says in message and "\n" not in message, message


def _train_command_config(*args, start=False):
    """The config keras-vit-train parses from `args` (its own flags and
    parser, as the console script; nothing runs); with `start`, with the
    model it starts from (`train.start_from`, its checks included)."""
    from keras_vit.commands import train

    argv = ["keras-vit-train", "--workdir=w", *args]
    values = flags.FlagValues()
    train.define_flags(values, argv)
    cli.define_verbose(values)
    cli.parse(values, argv)
    return train.start_from(values) if start else values.config


@pytest.mark.parametrize("name", config_lib.packaged_configs())
def test_every_shipped_config_switches_the_variant_on_the_command_line(name):
    """--config.model.variant=Ti/16 parses on every shipped config (a
    config that sets variant None, such as digits, included) and builds
    Ti/16: the sizes the config gave explicitly give way, those given on
    the command line stay."""
    starts = _train_command_config(f"--config={name}").init.model
    if starts:  # fine-tuning takes its start's architecture: refused
        with pytest.raises(UsageError, match=(
                r"--config.model.variant=Ti/16 names a model to train, but "
                r"the config starts from config.init.model=.*--model=SOURCE"
                r".* or train Ti/16 from scratch with "
                r"--config.init.model=None.")):
            _train_command_config(f"--config={name}",
                                  "--config.model.variant=Ti/16", start=True)
        # The variant given as None: the config's own start, not refused.
        assert _train_command_config(
            f"--config={name}", "--config.model.variant=None",
            start=True).init.model == starts
    scratch = ["--config.init.model=None"] if starts else []
    config = _train_command_config(f"--config={name}",
                                   "--config.model.variant=Ti/16", *scratch,
                                   start=True)
    model = config_lib.replace(config, model={"image_size": 224}).model
    arch = build.config_architecture(model)
    assert (arch.variant, arch.patch_size, arch.hidden_size,
            arch.num_layers) == ("Ti/16", 16, 192, 12)
    config = _train_command_config(
        f"--config={name}", "--config.model.variant=S/32",
        "--config.model.num_layers=1", *scratch)
    assert (config.model.variant, config.model.num_layers,
            config.model.hidden_size) == ("S/32", 1, None)


def test_none_on_the_command_line_is_none_where_a_field_may_be_none():
    """--config.FIELD=None (or null) gives None, not the word, for a field
    that may be None; elsewhere the word stays what the user typed."""
    config = _train_command_config(
        "--config=digits", "--config.model.variant=None",
        "--config.init.model=null", "--config.evals.test.split=None")
    assert config.model.variant is None and config.init.model is None
    assert config.model.hidden_size == 128  # digits' own sizes stay
    assert config.evals.test.split == "None"  # no schema default of None
    config = _train_command_config("--config=plain_vit_i1k",
                                   "--config.model.variant=none",
                                   "--config.model.hidden_size=64")
    assert config.model.variant is None and config.model.hidden_size == 64
    # An int field whose default is None: ml_collections' int parser
    # would refuse the word before it could become None.
    config = _train_command_config(
        "--config=digits", "--config.input.pp.resize_size=None",
        "--config.model.representation_size=null")
    assert config.input.pp.resize_size is None
    assert config.model.representation_size is None
    # The later flag wins, as with any flag: a value after None is kept.
    config = _train_command_config(
        "--config=digits", "--config.init.model=None",
        "--config.init.model=/tmp/run", "--config.trainer.grad_clip_norm=None",
        "--config.trainer.grad_clip_norm=2")
    assert config.init.model == "/tmp/run"
    assert config.trainer.grad_clip_norm == 2
    config = _train_command_config(
        "--config=digits", "--config.model.variant=None",
        "--config.model.variant=S/16")
    assert config.model.variant == "S/16"
    config = _train_command_config(
        "--config=digits", "--config.init.model=/tmp/run",
        "--config.init.model=None")
    assert config.init.model is None


def test_none_on_the_command_line_for_an_evaluators_field():
    """An entry of config.evals is named by its config, not the schema:
    its fields take their evaluator type's defaults, so a few-shot
    probe's layer and batch of None parse (the int parser refused the
    word)."""
    from keras_vit.commands import evaluate

    argv = ["keras-vit-evaluate", "--mode=fewshot", "--model=m.keras",
            "--config=fewshot:digits", "--config.evals.fewshot.layer=-2",
            "--config.evals.fewshot.layer=None",
            "--config.evals.fewshot.batch_size=null"]
    values = flags.FlagValues()
    evaluate.define_flags(values, argv)
    cli.define_verbose(values)
    cli.parse(values, argv)
    entry = values.config.evals.fewshot
    assert entry.layer is None and entry.batch_size is None


def test_a_config_without_a_variant_keeps_its_sizes():
    config = _train_command_config("--config=digits")
    assert config.model.variant is None and config.model.hidden_size == 128


def test_complete_lays_values_over_the_defaults():
    c = config_lib.complete({"trainer": {"total_steps": 5},
                             "input": {"pp": {"flip": False}},
                             "model": {"resnet_layers": [3, 4, 9],
                                       "image_size": [32, 48]}})
    assert c.is_locked and c.trainer.total_steps == 5 and not c.input.pp.flip
    assert c.input.pp.train == "finetune"  # a default
    assert c.model.resnet_layers == (3, 4, 9)  # JSON list -> tuple
    assert tuple(c.model.image_size) == (32, 48)  # (height, width) allowed
    opt = config_lib.complete({"name": "sgd"}, "optimizer")
    assert (opt.name, opt.momentum) == ("sgd", 0.9)
    assert config_lib.complete({}, "schedule").lr == 1e-3
    with pytest.raises(ValueError, match=r"did you mean config\.optimizer"
                       r"\.momentum\?"):
        config_lib.complete({"momentun": 0.5}, "optimizer")
    with pytest.raises(ValueError, match="is a section of fields"):
        config_lib.complete({"optimizer": "sgd"})


def test_optimizer_config_with_an_unknown_field_is_refused():
    with pytest.raises(ValueError, match=r"config\.optimizer\.weight_decy is "
                       r"not a config field; did you mean "
                       r"config\.optimizer\.weight_decay\?"):
        optim.create_optimizer(dict(name="adamw", lr=0.1, weight_decy=0.1),
                               10)


EARLIER = os.path.join(ROOT, "tests", "fixtures", "earlier")


def _old_run_config():
    """A digits run's config.json as an earlier version wrote it (the flat
    fields, tests/fixtures/earlier/), from before some fields existed (no
    pp.eval_resize_size, export, skip_nonfinite, resnet fields)."""
    with open(os.path.join(EARLIER, "workdir", wd.CONFIG)) as f:
        config = json.load(f)
    del config["pp"]["eval_resize_size"], config["export"]
    del config["skip_nonfinite"], config["model"]["resnet_layers"]
    del config["model"]["resnet_width"], config["vtab"]
    return config


def test_read_config_of_an_old_workdir_fills_the_defaults(tmp_path):
    saved = _old_run_config()
    saved["total_steps"] = 7
    wd.write_json(str(tmp_path / wd.CONFIG), saved)
    config = wd.read_config(str(tmp_path))
    assert config.is_locked and config.trainer.total_steps == 7
    assert config.input.pp.resize_size == 36
    assert config.input.pp.eval_resize_size is None
    assert config.export.enabled is False and config.export.model_name
    assert config.trainer.skip_nonfinite is False
    assert config.model.resnet_layers is None
    # What it saved stays its setting (a default changed since is not).
    assert tuple(config.optimizer.no_decay) == tuple(
        saved["optimizer"]["no_decay"])
    assert config_lib.field_names(config) == config_lib.field_names(
        config_lib.base_config())


def test_read_config_refuses_an_unknown_saved_field(tmp_path):
    saved = _old_run_config()
    saved["optimizer"]["learning_rate"] = 0.1
    wd.write_json(str(tmp_path / wd.CONFIG), saved)
    with pytest.raises(ValueError) as e:
        wd.read_config(str(tmp_path))
    assert "config.optimizer.learning_rate is not a config field" in str(
        e.value)
    assert wd.CONFIG in str(e.value)


def test_read_config_without_a_config_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match="is .* the workdir of a "
                       "training run"):
        wd.read_config(str(tmp_path))


# A `.get(` on a config, a section of one, or a dict of one: the default
# would live outside keras_vit/config_schema.py.
_CONFIG_GET = re.compile(
    r"(?<![\w.])(config|cfg|opt_config|data_config|dataset_config|opts|"
    r"sweep|init|export|base|run|pp|model)(\.\w+)*\.get\("
)
_SOURCES = sorted(
    os.path.relpath(os.path.join(d, f), ROOT)
    for d, _, files in os.walk(os.path.join(ROOT, "keras_vit"))
    for f in files if f.endswith(".py")
)


def _config_gets(path):
    with open(os.path.join(ROOT, path)) as f:
        return [f"{path}:{i}: {line.strip()}"
                for i, line in enumerate(f, start=1)
                if _CONFIG_GET.search(line) and "environ" not in line]


@pytest.mark.parametrize("path", _SOURCES)
def test_code_reads_config_fields_directly(path):
    assert not _config_gets(path)


def test_train_takes_variant_none_as_the_configs_own_sizes(tmp_path):
    """keras-vit-train --config=digits --config.model.variant=None trains
    digits' own explicit sizes (it failed with "Unknown variant 'None'",
    after making the workdir)."""
    from tests import console

    workdir = tmp_path / "run"
    result = console.run("train", console.TINY_DIGITS + [
        "--config.model.variant=None", "--config.trainer.total_steps=2",
        f"--workdir={workdir}"])
    assert result.returncode == 0, result.stderr[-3000:]
    with open(workdir / "config.json") as f:
        model = json.load(f)["model"]
    assert model["variant"] is None and model["hidden_size"] == 16


def test_a_stored_config_of_a_newer_version_says_to_upgrade(tmp_path):
    """A workdir's config.json holding a field this version does not know
    (written by a newer release) names the field and the upgrade; a flag
    of that name is a typo, and says nothing of versions."""
    saved = json.loads(json.dumps(config_lib.base_config().to_dict()))
    saved["input"]["pp"]["eval_crop_pct"] = 0.9
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(UsageError, match=r"config.input.pp.eval_crop_pct is "
                       r"not a config field.*newer keras_vit\? Upgrade: pip "
                       r"install -U keras-vision-transformer"):
        wd.read_config(str(tmp_path))
    with pytest.raises(UsageError) as info:
        config_lib.complete({"input": {"pp": {"eval_crop_pct": 0.9}}})
    assert "newer" not in str(info.value)


@pytest.mark.parametrize("typed,closest", [
    # A near name, or one beginning with it, in another section.
    ("input.total_step", "trainer.total_steps"),
    ("input.num_class", "model.num_classes"),
    ("trainer.warmup", "schedule.warmup_steps"),
    ("input.resize", "input.pp.resize_size"),
    # The same leaf elsewhere: its outermost field.
    ("trainer.batch_size", "input.batch_size"),
    # Only a loosely similar name elsewhere: none (the section's fields).
    ("input.val_fraction", None),
    ("totl_steps", "trainer.total_steps"),
])
def test_closest_field_across_sections(typed, closest):
    assert config_lib.closest_field(typed) == closest
