"""What earlier versions called the fields of a run config, and where
each is now: `MOVED` (the one table: the flat `batch_size` of earlier
versions is `input.batch_size`, ...) and `RENAMED` (the model-source fields
that became `init.model`); `upgrade` rewrites a saved config (config.json,
a dict) into the sections of `keras_vit.config_schema`, with a one-line
notice naming the new places, and `moved_path` does the same for one
field (a `--config.FIELD` override)."""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional

import ml_collections
from absl import logging

from keras_vit.config_schema import evaluator
from keras_vit.errors import UsageError

# Fields of older configs that name a model source, and what replaced
# them.
RENAMED = {
    "init.npz": "init.model",
    "init.keras_model": "init.model",
    "init.workdir": "init.model",
}

# Where every field of the flat config of earlier versions went (the one
# table of `upgrade`); a section moved whole maps its every field.
MOVED = {
    **{f: f"input.{f}" for f in (
        "dataset", "vtab_task", "data_dir", "download", "manual_dir",
        "image_key", "label_key", "skip_bad_images", "train_split",
        "train_examples_per_class", "batch_size", "shuffle_buffer",
        "cache_train", "prefetch", "synthetic_data")},
    "image_size": "model.image_size",
    "num_classes": "model.num_classes",
    "eval_split": "evals.test.split",
    "val_split": "evals.test.val_split",
    "eval_every_steps": "evals.test.every_steps",
    "eval_batch_size": "evals.test.batch_size",
    "cache": "evals.test.cache",
    "loss": "objective.loss",
    "label_smoothing": "objective.label_smoothing",
    "grad_clip_norm": "trainer.grad_clip_norm",
    **{f"optimizer.{f}": f"schedule.{f}" for f in (
        "lr", "warmup_steps", "decay_type", "end_lr")},
    **{f: f"trainer.{f}" for f in (
        "total_steps", "accumulation_steps", "dtype", "jit_compile",
        "steps_per_loop", "skip_nonfinite", "ema_decay",
        "connect_timeout_s")},
    "checkpoint_every_steps": "checkpoints.every_steps",
    "keep_checkpoints": "checkpoints.keep",
    "checkpoint_iterator": "checkpoints.iterator",
    "log_every_steps": "log.every_steps",
    **{f"pp.{f}": f"input.pp.{f}" for f in (
        "train", "resize_size", "eval_resize_size", "area_range", "flip",
        "randaug_ops", "randaug_magnitude")},
    **{f"mix.{f}": f"input.mix.{f}" for f in ("mixup_alpha",
                                               "cutmix_alpha")},
    **{f"mpp.{f}": f"objective.mpp.{f}" for f in (
        "enabled", "corrupt_rate", "mask_fraction", "random_fraction",
        "target", "colour_bits", "grid_size")},
    **{f"fewshot.{f}": f"evals.fewshot.{f}" for f in (
        "datasets", "shots", "seeds", "l2_reg", "layer", "layer_norm")},
    **{f"vtab.{f}": f"evals.vtab.{f}" for f in (
        "tasks", "keep_checkpoints", "sweep.enabled", "sweep.lrs",
        "sweep.steps")},
}
# Sections of earlier versions whose fields all moved.
_OLD_SECTIONS = ("pp", "mix", "mpp", "fewshot", "vtab")


def moved_path(name: str) -> Optional[str]:
    """The dotted path that an earlier version's field `name` moved to, or
    None ("batch_size" -> "input.batch_size")."""
    return MOVED.get(name)


def _set(values: Dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    for part in parts[:-1]:
        values = values.setdefault(part, {})
    values[parts[-1]] = value


def _pop(values: Dict[str, Any], path: str) -> Any:
    parts = path.split(".")
    for part in parts[:-1]:
        values = values.get(part)
        if not isinstance(values, dict):
            return _MISSING
    return values.pop(parts[-1], _MISSING)


def _unused_protocol(old: Mapping[str, Any], kind: str) -> bool:
    """Whether an earlier version's `fewshot` or `vtab` section holds only
    its defaults (every earlier config.json has them): nothing to move."""
    default = json.loads(json.dumps(evaluator(kind).to_dict()))
    default.pop("type")
    default.pop("batch_size", None)
    return not old.get("datasets") and all(
        old.get(k, v) == v for k, v in default.items())


def upgrade(values: Mapping[str, Any], *, where: str = "config"
            ) -> Mapping[str, Any]:
    """A config (a saved config.json, a dict) with the fields of an
    earlier version moved to their place in the sections of this one
    (`MOVED`), with a one-line notice naming the new paths: the flat
    `batch_size` becomes `input.batch_size`, ...; init.npz,
    init.keras_model and init.workdir become init.model; num_classes 0,
    once "from the data", is None. A field given both ways is an error."""
    if isinstance(values, ml_collections.ConfigDict):
        values = values.to_dict()
    values = _upgrade_init(json.loads(json.dumps(dict(values), default=list)))
    for kind in ("fewshot", "vtab"):
        old = values.get(kind)
        if isinstance(old, dict) and _unused_protocol(old, kind):
            del values[kind]
    moved = []
    for old in sorted(MOVED, key=lambda n: -n.count(".")):
        value = _pop(values, old)
        if value is _MISSING:
            continue
        new = MOVED[old]
        if _get(values, new) is not _MISSING:
            raise UsageError(
                f"{where}: config.{old} and config.{new} are the same field "
                f"(config.{old} is an earlier version's name): keep "
                f"config.{new}.")
        if new == "model.num_classes" and value == 0:
            value = None
        _set(values, new, value)
        moved.append(old)
    for section in ("vtab.sweep",) + _OLD_SECTIONS:
        if _get(values, section) == {}:
            _pop(values, section)
    for kind in ("fewshot", "vtab"):
        entry = _get(values, f"evals.{kind}")
        if isinstance(entry, dict):
            entry.setdefault("type", kind)
    if moved and (where, *moved) not in _TOLD:  # once, however often read
        _TOLD.add((where, *moved))
        moved.reverse()
        logging.warning(
            "%s: fields of an earlier version, read in their new place: %s.",
            where, ", ".join(f"{o} -> {MOVED[o]}" for o in moved[:4])
            + (f" and {len(moved) - 4} more" if len(moved) > 4 else ""))
    return values


_MISSING = object()
# (where, the fields moved) told of (`upgrade`) in this process.
_TOLD: set = set()


def _get(values: Mapping[str, Any], path: str) -> Any:
    for part in path.split("."):
        if not isinstance(values, Mapping) or part not in values:
            return _MISSING
        values = values[part]
    return values


def _upgrade_init(values: Dict[str, Any]) -> Dict[str, Any]:
    """init.npz, init.keras_model and init.workdir become init.model."""
    init = values.get("init")
    if not isinstance(init, Mapping):
        return values
    old = [k for k in ("npz", "keras_model", "workdir") if k in init]
    if not old:
        return values
    init = dict(init)
    given = [init.pop(k) for k in old]
    given = [g for g in given if g]
    model = init.setdefault("model", None)
    if given and model and model not in given:
        raise UsageError(
            f"config.init.model ({model}) and config.init."
            f"{old[0] if len(old) == 1 else '|'.join(old)} ({given[0]}) "
            "name two models: keep one, as config.init.model."
        )
    if len(given) > 1:
        raise UsageError(
            f"config.init names {len(given)} models ({', '.join(given)}): "
            "keep one, as config.init.model."
        )
    if given and not model:
        init["model"] = given[0]
    return dict(values, init=init)
