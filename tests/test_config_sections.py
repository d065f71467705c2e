"""The run config in sections, each handed to its component: the top
level is the seed and the sections; the code outside the command lines
and the shipped configs reads the whole config in at most three places
(an AST count); what an earlier version wrote (the flat config of its
shipped configs, a training run's config.json and checkpoint, saved in
tests/fixtures/earlier/) loads and computes what it did."""

import ast
import glob
import json
import os
import shutil

import numpy as np
import pytest
from absl import flags

from keras_vit import config as config_lib
from keras_vit.checkpoint import loader
from keras_vit.commands import flags as cli
from keras_vit.config_schema import base_config
from keras_vit.storage import workdir as wd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EARLIER = os.path.join(ROOT, "tests", "fixtures", "earlier")
TOP = set(base_config().keys())
# Names the code gives a whole run config.
CONFIG_NAMES = {"config", "c", "cfg", "run", "base", "conf", "run_config"}
MAX_WHOLE_CONFIG_READERS = 3


def _whole_config_readers():
    """{"module:function": [top-level fields it reads]} for the functions
    outside keras_vit/commands/ and keras_vit/configs/ that read three or
    more top-level fields of a whole config (`config.input`, ...;
    assignments into a field are writes, not reads)."""
    found = {}
    for path in glob.glob(os.path.join(ROOT, "keras_vit", "**", "*.py"),
                          recursive=True):
        rel = os.path.relpath(path, ROOT).replace(os.sep, "/")
        if rel.startswith(("keras_vit/commands/", "keras_vit/configs/")) or (
                rel == "keras_vit/config_schema.py"):
            continue
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        parents = {child: node for node in ast.walk(tree)
                   for child in ast.iter_child_nodes(node)}
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            fields = set()
            for node in ast.walk(fn):
                if not (isinstance(node, ast.Attribute)
                        and isinstance(node.value, ast.Name)
                        and node.value.id in CONFIG_NAMES
                        and node.attr in TOP):
                    continue
                outer = node
                while isinstance(parents.get(outer), ast.Attribute):
                    outer = parents[outer]
                if isinstance(outer.ctx, ast.Store) and outer is not node:
                    continue  # config.input.x = ...: a write
                fields.add(node.attr)
            if len(fields) >= 3:
                found[f"{rel}:{fn.name}"] = sorted(fields)
    return found


def test_few_places_read_the_whole_config():
    readers = _whole_config_readers()
    assert len(readers) <= MAX_WHOLE_CONFIG_READERS, readers


def _load(path_arg, *overrides):
    """A config as the commands read it: --config and its overrides."""
    argv = ["x", f"--config={path_arg}", *overrides]
    values = flags.FlagValues()
    cli.define_config(values, argv)
    cli.parse(values, argv)
    return values.config


# Recipe values changed on purpose since that version wrote its configs:
# the fine-tuning crop of the official code (an Inception-style crop, not a
# resize to 448 and a random 384 crop), AugReg's ImageNet-21k defaults
# of the recommended released file (no dropout or stochastic depth for
# B/16), AugReg's ImageNet fine-tuning without Polyak averaging (as the
# released fine-tunings) and MPP's steps. Everything else still reads as
# shipped.
_NO_DECAY = ["bias", "gamma", "beta", "pos_embedding", "cls"]
_CHANGED_SINCE = {
    # Fine-tuning starts the head at zero even where its width fits.
    "finetune": {("input", "pp", "train"): "pretrain",
                 ("input", "pp", "resize_size"): None,
                 ("init", "head"): "zero"},
    "augreg_finetune": {("input", "pp", "train"): "pretrain",
                        ("input", "pp", "resize_size"): None,
                        ("trainer", "ema_decay"): 0.0,
                        ("init", "head"): "zero"},
    # MPP on ImageNet for 100k steps (the paper's 1M were on JFT).
    # MPP's [mask] token is left out of weight decay.
    "mpp_pretrain": {("trainer", "total_steps"): 100_000,
                     ("optimizer", "no_decay"): [*_NO_DECAY, "mask_token"]},
    "mpp_digits": {("optimizer", "no_decay"): [*_NO_DECAY, "mask_token"]},
    # ImageNet-21k evaluation as big_vision's vit_i21k.py (resize_small).
    "augreg_i21k": {("model", "dropout_rate"): 0.0,
                    ("model", "stochastic_depth_rate"): 0.0,
                    ("input", "pp", "eval_resize_size"): 256,
                    ("input", "pp", "eval_keep_aspect"): True},
    # ImageNet-1k evaluation keeps the aspect ratio (big_vision's
    # resize_small); an earlier run's config resized both sides.
    "augreg_i1k": {("input", "pp", "eval_keep_aspect"): True},
    "plain_vit_i1k": {("input", "pp", "eval_keep_aspect"): True},
    # ImageNet's few-shot pool is big_vision's (it was train[:10%]).
    "fewshot": {("evals", "fewshot", "datasets", "imagenet", "train_split"):
                "train[:65000]"},
}


@pytest.mark.parametrize("name", sorted(
    os.path.basename(p)[:-5]
    for p in glob.glob(os.path.join(EARLIER, "configs", "*.json"))))
def test_an_earlier_versions_configs_upgrade_to_the_shipped_ones(name):
    """Each shipped config as an earlier version wrote it (its flat
    config.json) reads as the config shipped now: every field in its
    place, no value changed (VTAB's protocol options were defaults then,
    and stay out of a run's config)."""
    with open(os.path.join(EARLIER, "configs", f"{name}.json")) as f:
        earlier = config_lib.complete(json.load(f))
    now = _load(os.path.join(ROOT, "keras_vit", "configs", f"{name}.py"))
    got, want = earlier.to_dict(), now.to_dict()
    for path, value in _CHANGED_SINCE.get(name, {}).items():
        section = got
        for key in path[:-1]:
            section = section[key]
        assert section[path[-1]] != value, (name, path)  # it did change
        section[path[-1]] = value
    if name == "vtab":
        want["evals"].pop("vtab")
    assert json.loads(json.dumps(got)) == json.loads(json.dumps(want))


def test_an_earlier_override_on_the_command_line_moves(caplog):
    config = _load(os.path.join(ROOT, "keras_vit", "configs", "digits.py"),
                   "--config.total_steps=7", "--config.optimizer.lr=0.5",
                   "--config.pp.flip=False", "--config.eval_split=train")
    assert config.trainer.total_steps == 7 and config.schedule.lr == 0.5
    assert not config.input.pp.flip and config.evals.test.split == "train"


def test_an_earlier_versions_run_loads_and_resumes(tmp_path):
    """A training run an earlier version wrote: its config reads in the
    sections, its checkpoint gives the logits it gave then, and training
    it further resumes at its step (the config passed in unchanged)."""
    run = str(tmp_path / "run")
    shutil.copytree(os.path.join(EARLIER, "workdir"), run)
    config = wd.read_config(run)
    assert (config.model.hidden_size, config.trainer.total_steps,
            config.input.batch_size) == (16, 2, 16)
    model = loader.load_model(run)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(
        "float32")
    np.testing.assert_allclose(
        np.asarray(model(x)),
        np.load(os.path.join(EARLIER, "workdir_logits.npy")), atol=1e-6)

    from keras_vit.training import train_lib

    more = config_lib.replace(config, trainer={"total_steps": 3})
    before = more.to_dict()
    metrics = train_lib.train_and_evaluate(more, run)
    assert (metrics["steps"], metrics["steps_this_run"]) == (3, 1)
    assert more.to_dict() == before


def test_an_earlier_versions_mpp_run_loads_and_resumes(tmp_path):
    """An MPP run an earlier version wrote (its model a plain functional
    one then, an `MppModel` now): its checkpoint restores into the class,
    the encoder gives the features it gave then, training resumes."""
    run = str(tmp_path / "mpp")
    shutil.copytree(os.path.join(EARLIER, "mpp_workdir"), run)
    config = wd.read_config(run)
    assert config.objective.mpp.enabled and config.model.hidden_size == 16
    model = loader.load_model(run)
    assert model.output_shape == (None, 16)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype(
        "float32")
    np.testing.assert_allclose(
        np.asarray(model(x)),
        np.load(os.path.join(EARLIER, "mpp_workdir_features.npy")),
        atol=1e-6)

    from keras_vit.training import train_lib

    more = config_lib.replace(config, trainer={"total_steps": 3})
    metrics = train_lib.train_and_evaluate(more, run)
    assert (metrics["steps"], metrics["steps_this_run"]) == (3, 1)


def test_an_earlier_versions_mpp_keras_file_gives_its_encoder():
    """A .keras MPP model an earlier version saved (a functional model
    with an `mpp_head`): every tool reads its encoder, with the features
    it gave then."""
    path = os.path.join(EARLIER, "mpp.keras")
    model = loader.load_model(path)
    assert model.output_shape == (None, 16)
    assert loader.describe_source(path).hidden_size == 16
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype(
        "float32")
    np.testing.assert_allclose(
        np.asarray(model(x)),
        np.load(os.path.join(EARLIER, "mpp_keras_features.npy")), atol=1e-6)


def _doc_table():
    """{section: field names} of docs/development.md's run-config table."""
    import re

    with open(os.path.join(ROOT, "docs", "development.md")) as f:
        text = f.read()
    text = text[text.index("## The run config"):]
    text = text[:text.index("\n## ")]
    rows = {}
    for line in text.splitlines():
        cells = line.split("|")
        if len(cells) == 5 and cells[1].strip().startswith("`"):
            section = cells[1].strip().strip("`")
            rows[section] = set(re.findall(r"`(\w+)`", cells[2]))
    return rows


def test_the_run_config_table_in_the_docs_is_the_schema():
    """docs/development.md names every section and every field of the
    schema, and nothing else (an evaluator's fields: each type's)."""
    from keras_vit.config_schema import EVALUATORS

    rows = _doc_table()
    schema = base_config()
    assert set(rows) == set(schema.keys())
    for section, named in rows.items():
        if section == "seed":
            continue
        want = set()
        if section == "evals":
            for kind, make in EVALUATORS.items():
                want |= {kind} | set(make().keys()) - {"type"}
            want.add("type")
        else:
            for key, value in schema[section].items():
                want.add(key)
                if hasattr(value, "items"):
                    want |= set(value.keys())
        assert named == want, (section, named ^ want)
