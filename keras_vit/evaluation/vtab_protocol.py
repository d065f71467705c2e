"""What a VTAB-1k run takes of its config: the protocol's own options
(`Protocol`), each task's training config (`task_config`, the paper's
recipe on the task's splits, a new config each time), what of it a
finished trial's score depends on (`trial_differences`), and the recipe
an output folder's results were made with (`check_recipe`)."""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Optional

import ml_collections
import tensorflow as tf

from keras_vit import config as config_lib
from keras_vit.architecture import SHAPE_FIELDS
from keras_vit.data import vtab
from keras_vit.errors import UsageError, one_line
from keras_vit.storage import workdir as wd

RECIPE = "recipe.json"
# The output folder's pre-trained model without its head.
BACKBONE = "backbone.npz"


@dataclasses.dataclass(frozen=True)
class Protocol:
    """What the runner takes of a VTAB config besides each task's training
    config: its vtab evaluator's tasks, sweep and checkpoint keeping, the
    fixed recipe's learning rate and steps, the batch and resolution (for
    the records), the backbone's pre-logits choice, the model options the
    tasks train with (`model_options`), and where task data is prepared."""

    tasks: Any
    keep_checkpoints: bool
    sweep: Any
    lr: float
    steps: int
    batch_size: int
    image_size: Any
    keep_pre_logits: bool
    model_options: Dict[str, Any]
    data_dir: Optional[str]
    download: bool
    manual_dir: Optional[str]

    @classmethod
    def of(cls, config, evaluator) -> "Protocol":
        """The protocol of a VTAB config and its vtab `evaluator`."""
        return cls(
            tasks=evaluator.tasks,
            keep_checkpoints=bool(evaluator.keep_checkpoints),
            sweep=evaluator.sweep, lr=float(config.schedule.lr),
            steps=int(config.trainer.total_steps),
            batch_size=int(config.input.batch_size),
            image_size=config.model.image_size,
            keep_pre_logits=bool(config.init.keep_pre_logits),
            model_options=model_options(config),
            data_dir=config.input.data_dir,
            download=bool(config.input.download),
            manual_dir=config.input.manual_dir,
        )


# config.model fields that are not the backbone's: its architecture
# (SHAPE_FIELDS, the variant and class count) comes from the backbone and
# the resolution is the protocol's.
_NOT_OPTIONS = SHAPE_FIELDS + ("variant", "num_classes", "image_size")
# Options that do not change a task's score (recomputation only).
_UNSCORED_OPTIONS = ("remat",)


def model_options(config: ml_collections.ConfigDict) -> Dict[str, Any]:
    """The config.model fields each task trains with beside the
    backbone's architecture (dropout, stochastic depth, head init, remat,
    ...: every other field), as the config sets them."""
    return {k: config.model[k] for k in config.model
            if k not in _NOT_OPTIONS}


# The fields of a VTAB config that change a task's score (the recipe), by
# section; every other field (where data and checkpoints go, how often to
# log, the task list) may change between runs into one output folder.
_RECIPE = {
    "model": None, "objective": None, "optimizer": None, "schedule": None,
    "init": ("keep_pre_logits",),
    "trainer": ("total_steps", "epochs", "grad_clip_norm", "dtype",
                "ema_decay", "skip_nonfinite"),
    "input": ("batch_size", "pp", "mix", "train_examples_per_class",
              "shuffle_buffer", "synthetic_data"),
}
# Recipe fields an earlier recipe.json did not record: not compared there
# (its tasks' values are not known).
_RECORDED_LATER = {"input": ("shuffle_buffer", "synthetic_data")}


def recipe(config: ml_collections.ConfigDict) -> Dict:
    """The recipe of a VTAB config (`_RECIPE`, its seed and its vtab
    evaluator's sweep), as plain JSON values: finished tasks of another
    recipe do not mix with new ones in one output folder's means."""
    plain = json.loads(json.dumps(config.to_dict()))
    out = {"seed": plain["seed"]}
    for section, fields in _RECIPE.items():
        values = plain[section]
        if section == "model":  # the tasks' options (`task_config`)
            values = _scored_model_fields(values)
        out[section] = (values if fields is None else
                        {k: values[k] for k in fields if k in values})
    sweep = config_lib.find_evaluator(config.evals, "vtab").sweep
    out["sweep"] = json.loads(json.dumps(sweep.to_dict()))
    return out


def _scored_model_fields(model: Dict) -> Dict:
    """The config.model fields of a recipe: the tasks' resolution and
    options, not the backbone's architecture (from the backbone, whatever
    the config's variant or sizes say) nor what does not change a score
    (an earlier recipe.json recorded both: they are not compared)."""
    return {k: v for k, v in model.items() if k == "image_size" or (
        k not in _NOT_OPTIONS and k not in _UNSCORED_OPTIONS)}


def read_folder_json(path: str) -> Dict:
    """A JSON object the runner wrote into an output folder (recipe.json,
    backbone.json); one that is damaged (no JSON, not an object) is a
    UsageError naming the file and the fix."""
    try:
        value = wd.read_json(path)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
        value, why = None, one_line(e)
    else:
        why = "not a JSON object"
    if not isinstance(value, dict):
        raise UsageError(
            f"{path} is damaged ({why}): put back a good copy of it, or "
            "pass another --output_dir.")
    return value


def check_recipe(config: ml_collections.ConfigDict, output_dir: str,
                 finished: bool, chief: bool = True) -> None:
    """Refuses to add tasks of another recipe (`recipe`) to an output
    folder whose finished tasks had this one, or whose finished tasks
    have no recipe.json to say: the group means would mix the two. The
    recipe is written once (recipe.json), by the chief."""
    path = os.path.join(output_dir, RECIPE)
    wanted = recipe(config)
    if finished and not tf.io.gfile.exists(path):
        raise UsageError(
            f"{output_dir} holds VTAB results but no {RECIPE} saying which "
            "recipe made them: the new tasks could be averaged with "
            "another recipe's. Use a new output_dir (or put back its "
            f"{RECIPE}).")
    if finished:
        saved = read_folder_json(path)
        if isinstance(saved.get("model"), dict):
            saved["model"] = _scored_model_fields(saved["model"])
        for section, fields in _RECORDED_LATER.items():
            if isinstance(saved.get(section), dict):
                for k in fields:
                    saved[section].setdefault(k, wanted[section][k])
        differ = config_lib.differences(saved, wanted)
        if differ:
            raise UsageError(
                f"{output_dir} holds VTAB results of another recipe "
                f"({differ.replace('in the workdir', 'there')}): its "
                "finished tasks would be averaged with the new ones. Use a "
                "new output_dir, or the recipe of the results there.")
    elif chief:
        wd.write_json(path, wanted)


def task_config(
    config: ml_collections.ConfigDict,
    task: vtab.Task,
    model_fields: Dict,
    backbone: str,
    *,
    lr: float,
    steps: int,
    train_split: str,
    eval_split: str,
) -> ml_collections.ConfigDict:
    """The train_lib config that fine-tunes the backbone on one task (a
    new config: `config` is not changed).

    Args:
        config: ConfigDict. The VTAB config (configs/vtab.py).
        task: vtab.Task.
        model_fields: dict. `config.model` of the backbone's architecture.
        backbone: str. The headless .npz to initialise from.
        lr, steps: the learning rate and the number of steps.
        train_split, eval_split: str. VTAB split names ("train800", ...).
    """
    base = config_lib.base_config()
    # The runner's own fields (its evaluators but the accuracy one, where
    # data is prepared) hold their defaults in each task's config, so that
    # changing them (e.g. evals.vtab.keep_checkpoints) leaves finished
    # trials valid.
    values = config.to_dict()
    values["evals"] = {"test": values["evals"]["test"]}
    values["input"].update(download=base.input.download,
                           manual_dir=base.input.manual_dir)
    # The backbone's architecture; every other field (`model_options`:
    # dropout, stochastic depth, remat, ...) as the config says.
    values["model"] = dict(base.model.to_dict(),
                           **{**model_fields, **model_options(config)},
                           num_classes=task.num_classes,
                           image_size=values["model"]["image_size"])
    return config_lib.replace(
        config_lib.complete(values),
        input=dict(dataset=task.tfds_name, vtab_task=task.name,
                   train_split=task.split(train_split)),
        trainer={"total_steps": int(steps)}, schedule={"lr": float(lr)},
        init={"model": backbone}, export={"enabled": False},
        # The protocol scores once, at the end.
        **{"evals.test": dict(split=task.split(eval_split),
                              val_split=task.split(eval_split),
                              every_steps=0)},
    )


# What of a trial's config does not change its score, and may differ
# when it resumes: logging and checkpoints, where the data is (moved to
# another disk) and how it is read (each evaluator's batch and cache
# too), the host loop's length, and how the same gradients are computed
# (remat=block or accumulation after running out of memory, XLA or not).
_UNSCORED = ("log", "checkpoints")
_UNSCORED_FIELDS = {
    "model": ("remat",),
    "input": ("data_dir", "manual_dir", "download", "prefetch"),
    "trainer": ("steps_per_loop", "connect_timeout_s", "accumulation_steps",
                "jit_compile"),
}
_UNSCORED_EVALUATOR = ("batch_size", "cache")


def trial_differences(saved: Dict, values: Dict) -> str:
    """How a trial's saved config (a dict) differs from `values` in what
    its score depends on (`config.differences`); "" where it does not."""
    return config_lib.differences(*(
        json.loads(json.dumps(_scored(v))) for v in (saved, values)))


def _scored(values: Dict) -> Dict:
    out = {k: v for k, v in values.items() if k not in _UNSCORED}
    for section, fields in _UNSCORED_FIELDS.items():
        out[section] = {k: v for k, v in (out.get(section) or {}).items()
                        if k not in fields}
    out["evals"] = {name: {k: v for k, v in entry.items()
                           if k not in _UNSCORED_EVALUATOR}
                    for name, entry in (out.get("evals") or {}).items()}
    start = dict(out.get("init") or {})  # a dict of the saved JSON
    if os.path.basename(str(start.get("model") or "")) == BACKBONE:
        # The output folder's backbone, wherever the folder is now (or
        # however it is spelled): backbone.json says which model it is.
        out["init"] = dict(start, model=BACKBONE)
    return out
