"""A run's model against where it starts: the workdir it resumes in must
hold the same model (`check_workdir_config`), and fine-tuning takes the
architecture of the model it starts from (`init_architecture`) and its
weights (`initialise_from`)."""

from __future__ import annotations

import filecmp
import json
import os
from typing import Dict, Optional, Sequence

import keras
import ml_collections
import tensorflow as tf
from absl import logging

from keras_vit import config as config_lib
from keras_vit.architecture import CONFIG_FIELDS, SHAPE_FIELDS
from keras_vit.build import config_architecture
from keras_vit.checkpoint import loader
from keras_vit.config_schema import SCRATCH_IMAGE_SIZE
from keras_vit.errors import UsageError, shorten
from keras_vit.model import architecture_of
from keras_vit.storage import checkpoint_list
from keras_vit.storage import workdir as wd
from keras_vit.training.records import BEST
from keras_vit.training.resume import TrainingError, holds_iterator
from keras_vit.values import name_key

# config.model fields a resumed run may change (see model_signature).
RESUMABLE_CHANGES = ("remat", "dropout_rate", "attention_dropout_rate",
                     "stochastic_depth_rate", "head_bias_init",
                     "head_zero_init")


def model_signature(config, resolved: bool = True) -> dict:
    """What fixes a run's parameters: its `config.model` section (but
    RESUMABLE_CHANGES, which change what training does) and MPP head.
    `resolved`: a size's name (variant) stands for the sizes it resolves
    to, so that a run saved with variant B/16 and one asking for
    hidden_size 768, ... agree, and a difference is named by the size
    that differs, not "null asked" (raises what `config_architecture`
    raises for sizes that build no model); else the fields as they are."""
    if resolved:
        arch = config_architecture(config.model)
        sig = {k: getattr(arch, k) for k in CONFIG_FIELDS
               if k not in ("variant",) + RESUMABLE_CHANGES}
    else:
        sig = {k: config.model[k] for k in CONFIG_FIELDS
               if k not in RESUMABLE_CHANGES and k in config.model}
    sig["image_size"] = config.model.image_size
    sig["num_classes"] = config.model.num_classes
    mpp = config.objective.mpp  # the MPP head's shape (a classifier: none)
    sig["mpp"] = [mpp.target, mpp.colour_bits, mpp.grid_size] if (
        mpp.enabled) else None
    # As the saved file holds it (tuples as lists).
    return json.loads(json.dumps(sig))


def optimizer_signature(config) -> dict:
    """What fixes the variables of a checkpoint's optimizer state: the
    optimizer, SGD's momentum or none, an EMA or none (the rest may change)."""
    name = str(config.optimizer.name)
    return {"optimizer.name": name,
            "optimizer.momentum": (float(config.optimizer.momentum) != 0.0
                                   if name == "sgd" else None),
            "trainer.ema_decay": bool(config.trainer.ema_decay)}


def check_workdir_config(config, workdir: str, finished: bool = False
                         ) -> None:
    """A workdir holds one run: resuming with another model is an error,
    as is resuming its checkpoints with an optimizer whose state they do
    not hold. Other changed settings are named in a warning, unless the
    run has `finished` (nothing resumes)."""
    if not tf.io.gfile.exists(os.path.join(workdir, wd.CONFIG)):
        return
    checkpoint = checkpoint_list.latest(os.path.join(workdir, wd.CHECKPOINTS))
    if not checkpoint and not any(
            tf.io.gfile.exists(os.path.join(workdir, name))
            for name in (wd.METRICS, BEST)):
        # A run that stopped before it wrote a checkpoint or a result
        # (refused data, a failed first step): nothing to resume or to
        # keep apart, so this config starts afresh; a config.json that
        # is no run's (a model folder) is not written over.
        _require_run_config(workdir)
        logging.info("%s holds no checkpoint: the run starts afresh with "
                     "this config.", workdir)
        return
    # Fields the saved config predates take their defaults.
    old = wd.read_config(workdir)
    try:
        saved, asked = model_signature(old), model_signature(config)
    except (ValueError, TypeError, KeyError):  # compared as written
        saved, asked = (model_signature(old, resolved=False),
                        model_signature(config, resolved=False))
    _same_written_otherwise(saved, asked, workdir)
    differ = signature_differences(saved, asked)
    if differ:
        started = old.init.model
        same = (f"the same config and --model={started}" if started
                and not config.init.model else "the same config")
        raise TrainingError(
            f"The workdir {workdir} holds a run with a different model: "
            f"{differ}. Use a new `workdir`, or {same} to resume."
        )
    if not checkpoint:
        return  # nothing to restore the optimizer from
    _check_resumed_input(old, config, workdir, checkpoint)
    _check_resumed_start(old, config, workdir)
    saved, asked = optimizer_signature(old), optimizer_signature(config)
    if saved["trainer.ema_decay"] != asked["trainer.ema_decay"]:
        # Named by the decays as written (one of them 0 or None).
        saved["trainer.ema_decay"] = old.trainer.ema_decay
        asked["trainer.ema_decay"] = config.trainer.ema_decay
    if saved["optimizer.name"] != asked["optimizer.name"]:
        # SGD's momentum is SGD's: another optimizer is named alone.
        del saved["optimizer.momentum"], asked["optimizer.momentum"]
    differ = config_lib.named_differences(
        saved, asked, lambda key: f"config.{key}", json.dumps)
    if differ:
        raise TrainingError(
            f"The workdir {workdir} holds checkpoints of another optimizer "
            f"state: {differ}. Resume with the run's own optimizer, use a "
            "new `workdir`, or start a new run from this one's weights "
            f"(--model={workdir})."
        )
    if not finished:
        _say_resumed_changes(old, config, workdir, checkpoint or "")


def _require_run_config(workdir: str) -> None:
    try:
        wd.read_config(workdir)
    except UsageError as error:
        raise UsageError(
            f"{error} The workdir holds no run's checkpoint, and nothing was "
            "written over: for a new run use another --workdir (a model to "
            "start from goes in --config.init.model).") from None


# Settings a resumed run may change, each changing the training from the
# step it resumes at (a recipe's default changed since the run started
# reads the same): named in one warning.
_RESUMED_FIELDS = (
    ("model", tuple(f for f in RESUMABLE_CHANGES if f != "remat")),
    ("optimizer", ("weight_decay", "no_decay", "b1", "b2", "momentum",
                   "nesterov")),
    ("schedule", ("lr", "warmup_steps", "decay_type", "end_lr")),
    ("input", ("dataset", "train_split", "batch_size",
               "train_examples_per_class", "pp", "mix")),
    ("objective", ("loss", "label_smoothing")),
    ("trainer", ("total_steps", "accumulation_steps", "grad_clip_norm",
                 "dtype", "ema_decay", "skip_nonfinite")),
    ("checkpoints", ("every_steps", "keep", "keep_best")),  # (which kept)
    ("", ("seed",)),
)


def _say_resumed_changes(old, config, workdir: str, checkpoint: str) -> None:
    before, now = {}, {}
    for name, fields in _RESUMED_FIELDS:
        for values, out in ((old, before), (config, now)):
            values = values[name] if name else values
            section = _plain(values, [f for f in fields if f in values])
            out.update(_flat(section, f"{name}." if name else ""))
    differ = config_lib.named_differences(
        before, now, lambda key: f"config.{key}",
        lambda value: shorten(json.dumps(value), _MAX_VALUE), 6)
    if differ:
        logging.warning(
            "Resuming %s with other settings than it ran with: %s. They "
            "apply from the step it resumes at: once it does, config.json "
            "takes them, the earlier config kept in %s.", workdir, differ,
            wd.earlier_config(workdir,
                              checkpoint_list.step_of(checkpoint) or 0))


# The config.input fields that make the training data's order, which a
# checkpoint of the data iterator (config.checkpoints.iterator) holds.
_ORDER_FIELDS = ("dataset", "data_dir", "vtab_task", "train_split",
                 "batch_size", "train_examples_per_class", "shuffle_buffer",
                 "cache_train", "image_key", "label_key", "pp", "mix",
                 "synthetic_data")


def _plain(section, fields) -> dict:
    return {k: json.loads(json.dumps(section.to_dict().get(k)))
            for k in fields}


def _check_resumed_input(old, config, workdir: str, checkpoint: str) -> None:
    """A checkpointed data iterator resumes the data it was made of: with
    another batch, split or preprocessing it would fail on its first batch,
    or go on reading the old data while config.json names the new."""
    if not config.checkpoints.iterator or not holds_iterator(checkpoint):
        return  # the data order is drawn anew from the step
    before, now = (_plain(c.input, _ORDER_FIELDS) for c in (old, config))
    if _same_path(before["data_dir"] or "", now["data_dir"] or ""):
        before["data_dir"] = now["data_dir"]  # a path written two ways
    if now["dataset"] == "folder" and not now["cache_train"]:
        before["shuffle_buffer"] = now["shuffle_buffer"]  # not read
    differ = config_lib.named_differences(
        _flat(before), _flat(now),
        lambda key: f"config.input.{key}",
        lambda value: shorten(json.dumps(value), _MAX_VALUE), _MAX_NAMED)
    if differ:
        raise TrainingError(
            f"The workdir {workdir} holds checkpoints of the data order of "
            f"other training data: {differ}. Resume with the run's own "
            "input, or set --config.checkpoints.iterator=False to resume "
            "with this input, its order drawn anew.")


def _same_written_otherwise(saved: dict, asked: dict, workdir: str) -> None:
    """One model written two ways compares equal: image_size 32 and
    32x32 ([32, 32]); a class count from the data (num_classes null) and
    that count named (the run's labels.txt says how many it learned)."""
    def pair(size):
        return [size, size] if isinstance(size, int) else size

    if pair(saved["image_size"]) == pair(asked["image_size"]):
        asked["image_size"] = saved["image_size"]
    if (saved["num_classes"] is None) == (asked["num_classes"] is None):
        return
    names = wd.read_class_names(workdir)
    if names and len(names) == (saved["num_classes"] or
                                asked["num_classes"]):
        saved["num_classes"] = asked["num_classes"] = len(names)


def _flat(fields: dict, prefix: str = "") -> dict:
    """Nested sections (pp, mix) as dotted fields, so that the one that
    differs is named (pp.resize_size), not the whole section."""
    out = {}
    for key, value in fields.items():
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _check_resumed_start(old, config, workdir: str) -> None:
    """A run resumes from its own checkpoints: a model to start from other
    than the run's would not be read, though config.json would name it."""
    saved, asked = old.init.model, config.init.model
    if asked and asked != saved and not (saved and _same_path(saved, asked)):
        raise TrainingError(
            f"The workdir {workdir} resumes from its own checkpoints "
            f"(it started from {saved or 'scratch'}): --model={asked} "
            "would not be read. "
            + (f"Resume with --model={saved}, as it started"
               if saved else "Leave --model out to resume")
            + f", or use a new workdir to fine-tune from {asked}.")


def _same_path(saved: str, asked: str) -> bool:
    """Two names of one local file, or of two files alike byte for byte
    (the run's folder copied with the file it started from), or a file of
    the same name where the saved one is gone (the folder moved, or it
    was saved relative to another directory)."""
    if "://" in saved + asked:
        return False
    a, b = (os.path.abspath(os.path.expanduser(p)) for p in (saved, asked))
    if not os.path.exists(a):  # (a folder: only a relative record's)
        return os.path.basename(a) == os.path.basename(b) and (
            os.path.isfile(b) or (os.path.isdir(b) and not os.path.isabs(
                os.path.expanduser(saved))))
    return a == b or (os.path.isfile(a) and os.path.isfile(b)
                      and filecmp.cmp(a, b, shallow=False))


# At most this many differing fields are named, each value cut to
# _MAX_VALUE characters: the error stays one short line.
_MAX_NAMED, _MAX_VALUE = 3, 40


def _field_path(key: str) -> str:
    """A signature key's config field (the MPP head is config.objective's)."""
    return "config.objective.mpp" if key == "mpp" else f"config.model.{key}"


def signature_differences(saved: dict, asked: dict) -> str:
    """The fields where two `model_signature`s differ, as `config.model.F:
    SAVED in the workdir, ASKED asked` ("; "-separated, at most _MAX_NAMED
    named); "" when they agree."""
    return config_lib.named_differences(
        saved, asked, _field_path,
        lambda value: shorten(json.dumps(value), _MAX_VALUE), _MAX_NAMED)


# The fields that must agree with the model fine-tuning starts from (its
# pre-logits layer: config.init.keep_pre_logits)
_START_FIELDS = tuple(f for f in SHAPE_FIELDS if f != "representation_size")


def init_architecture(init, model_config, resumed=None) -> Dict:
    """Fine-tuning starts from `config.init.model`'s architecture: the
    `config.model` fields to change where its shapes differ from the
    source's (the source's, as explicit sizes with no variant; {} when
    they agree), with a warning; the other fields (dropout, remat, ...)
    stay the config's. An image_size of 0 becomes the source's resolution
    (SCRATCH_IMAGE_SIZE without one). A run that `resumed` (its config)
    from the same source took it already: not read again (it may be gone)."""
    if not init.model:
        return {"image_size": SCRATCH_IMAGE_SIZE} if (
            model_config.image_size == 0) else {}
    again = resumed is not None and resumed.init.model and (
        resumed.init.model == init.model
        or _same_path(resumed.init.model, init.model))
    start = (config_architecture(resumed.model) if again
             else loader.describe_source(init.model))
    size = {}
    if model_config.image_size == 0:  # the source's own resolution
        height, width = start.image_size
        size = {"image_size": height if height == width else [height, width]}
        logging.info("config.model.image_size is 0: the model takes %s, "
                     "the resolution of %s.", size["image_size"], init.model)
        model_config = ml_collections.ConfigDict(
            dict(model_config.to_dict(), **size))
    have = config_architecture(model_config)
    differ = {k: (getattr(have, k), getattr(start, k))
              for k in _START_FIELDS
              if getattr(have, k) != getattr(start, k)}
    if not differ:
        return size
    logging.warning(
        "config.model takes the architecture of %s, the model it starts "
        "from: %s.", init.model,
        ", ".join(f"{k} {a} -> {b}" for k, (a, b) in sorted(differ.items())),
    )
    fields = dict(size, **{key: getattr(start, key) for key in _START_FIELDS})
    if start.resnet_layers is None:
        fields["resnet_width"] = None  # a hybrid's alone
    fields["variant"] = None
    if init.keep_pre_logits:
        fields["representation_size"] = start.representation_size
    return fields


def initialise_from(init, model: keras.Model,
                    class_names: Optional[Sequence[str]] = None) -> None:
    """Fine-tuning: weights from `config.init` (a released .npz, a .keras
    file, another run's workdir, ...; `loader.initialise`). The head is kept
    only if its shape fits and `init.head` keeps it (`class_names`: the
    data's, compared with the source's under "match"), else it starts at
    zero; position embeddings are resized to this model's grid."""
    if not init.model:
        return
    source = loader.resolve(init.model)
    report = loader.initialise(
        model, source, keep_pre_logits=bool(init.keep_pre_logits),
        drop_head=_head_dropped(init, source, class_names))
    for i, line in enumerate(str(report).splitlines()):  # each prefixed
        logging.info("%s%s", "" if i else f"Initialised from {source.path}: ",
                     line)
    theirs, ours = (loader.describe_source(source).numerics,
                    architecture_of(model).numerics)
    if theirs != ours:  # a run's config holds the official numerics
        logging.warning(
            "%s computes its blocks otherwise (%s) than the model it "
            "starts here (%s, the official ViT's): its outputs move a "
            "little before the first step, and fine-tuning adapts to them.",
            source.path, _numerics(theirs), _numerics(ours))


def _head_dropped(init, source, class_names) -> str:
    """Why config.init.head starts the source's head at zero wherever it
    fits, or "": "zero" always; "match" where the source and the data
    name their classes from one set of names, otherwise (other classes,
    or the same in another order). Names with none in common may be the
    same classes written otherwise (ImageNet's words and TFDS's synset
    ids): the head is kept, with a warning. (One that reads a pre-logits
    layer the fine-tune drops goes with it, in `loader.initialise`.)"""
    if init.head in ("zero", "fits"):
        return "config.init.head='zero'" if init.head == "zero" else ""
    theirs = [name_key(n) for n in loader.class_names(source) or []]
    ours = [name_key(n) for n in class_names or []]  # (é as é)
    if not theirs or len(theirs) != len(ours) or theirs == ours or (
            not init.keep_pre_logits
            and loader.describe_source(source).representation_size):
        return ""  # unnamed, another width (the head's shape decides)...
    i = next(i for i, (a, b) in enumerate(zip(theirs, ours)) if a != b)
    differ = f"class {i}: {theirs[i]!r} there, {ours[i]!r} here"
    if not set(theirs) & set(ours):
        logging.warning(
            "The head of %s names its classes otherwise than the data (%s; "
            "no name in common): kept, as they may be the same classes "
            "written otherwise. If they are other classes, start it at "
            "zero: config.init.head='zero'.", source.path, differ)
        return ""
    return (f"its classes are not the data's ({differ}; "
            "config.init.head='fits' keeps such a head)")


def _numerics(numerics) -> str:
    return (f"GELU {'tanh' if numerics.approximate_gelu else 'exact (erf)'}"
            f", LayerNorm epsilon {numerics.layer_norm_epsilon:g}")
