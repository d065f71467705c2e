"""Reading run configs: values laid over the schema
(`keras_vit.config_schema.base_config`), the fields of older versions
upgraded, a misspelt or unknown field named with the closest real one (in a
config file, on the command line: `--config.totl_steps=5`, and in code:
`config.totl_steps = 5`), the configs shipped in keras_vit/configs/ and
their arguments.
"""

from __future__ import annotations

import difflib
import os
import re
from typing import Any, Callable, List, Mapping, Optional

import ml_collections

from keras_vit.config_limits import check_evaluators
from keras_vit.config_schema import EVALUATORS, base_config, evaluator
from keras_vit.config_upgrade import MOVED, RENAMED, moved_path, upgrade
from keras_vit.errors import NEWER_VERSION, UsageError, shorten

# What a model source (config.init.model, the commands' --model) can be:
# `keras_vit.checkpoint.resolve` takes each.
SOURCE_KINDS = (
    "a released model's name (e.g. ViT-B_16; `keras_vit.list_models()` "
    "lists them), "
    "hf://ORG/NAME[@REVISION], kaggle://... (a keras-hub preset), a "
    "training workdir, a .keras file, an "
    "official .npz (local or gs://) or a Hugging Face / timm / keras-hub "
    "folder"
)

__all__ = [
    "base_config", "complete", "field_names", "closest_field",
    "unknown_field_message", "upgrade", "moved_path", "MOVED", "replace",
    "complete_evaluator", "find_evaluator", "packaged_configs",
    "packaged_config", "parse_config_arg", "epochs_to_steps",
    "differences", "named_differences",
]


def field_names(config: ml_collections.ConfigDict,
                prefix: str = "") -> List[str]:
    """Dotted names of every field of `config`, sub-dicts included (each
    evaluator's fields; not the names a free-form dict holds inside it,
    such as a few-shot evaluator's data sets)."""
    names = []
    for key in config.keys():
        name = prefix + key
        names.append(name)
        value = config[key]
        if isinstance(value, ml_collections.ConfigDict) and not (
                name.endswith(".datasets") and name.startswith("evals.")):
            names.extend(field_names(value, name + "."))
    return names


def closest_field(name: str, config=None) -> Optional[str]:
    """The real field (dotted name) closest to the dotted `name`, or None:
    the field an earlier version's name moved to ("batch_size" ->
    "input.batch_size"), a field of the same name in another section
    ("resize_size" -> "input.pp.resize_size"), else a sibling with a
    similar name (a typo), else a similar name in another section
    ("totl_steps" -> "trainer.total_steps"): for a name inside a section,
    only a near one or one that begins with it ("input.total_step",
    "trainer.warmup"): "input.val_fraction" is not
    "objective.mpp.mask_fraction", and gets its section's fields."""
    config = base_config() if config is None else config
    if name in MOVED:
        return MOVED[name]
    names = field_names(config)
    parent, _, leaf = name.rpartition(".")
    leaves = {}
    for n in sorted(names, key=lambda n: n.count(".")):  # the outermost
        leaves.setdefault(n.rpartition(".")[2], n)
    if leaf in leaves:
        return leaves[leaf]
    siblings = {n.rpartition(".")[2]: n for n in names
                if n.rpartition(".")[0] == parent}
    match = difflib.get_close_matches(leaf, list(siblings), n=1, cutoff=0.6)
    if match:
        return siblings[match[0]]
    if parent and any(n.startswith(parent + ".") for n in names):
        begun = sorted(k for k in leaves if k.startswith(leaf))
        near = difflib.get_close_matches(leaf, list(leaves), n=1,
                                         cutoff=0.85)
        return leaves[(near or begun)[0]] if near or begun else None
    match = difflib.get_close_matches(leaf, list(leaves), n=1, cutoff=0.6)
    return leaves[match[0]] if match else None


def unknown_field_message(name: str, config=None) -> str:
    """'config.X is not a field' with the closest real one, or the fields of
    the section when none is close."""
    if name in RENAMED:
        return (f"config.{name} is now config.{RENAMED[name]} (a model "
                "source, as `model` takes: workdir, .keras, .npz, hub folder)")
    config = base_config() if config is None else config
    close = closest_field(name, config)
    text = f"config.{name} is not a config field"
    if close:
        return f"{text}; did you mean config.{close}?"
    parent = name.rpartition(".")[0]
    section = config
    for part in filter(None, parent.split(".")):
        if not isinstance(section, ml_collections.ConfigDict) or (
                part not in section):
            return text + "."
        section = section[part]
    where = f"config.{parent}" if parent else "config"
    return f"{text}; {where} has: {', '.join(sorted(section.keys()))}."


def complete(
    values: Mapping[str, Any],
    section: Optional[str] = None,
    *,
    where: str = "config",
) -> ml_collections.ConfigDict:
    """`values` laid over the base config (or its dotted `section`, e.g.
    "optimizer"): fields `values` leaves out keep their defaults.

    Values of an earlier version (a saved config.json: flat `batch_size`,
    `image_size`, ...) are upgraded first (`upgrade`). A key the base does
    not know is an error naming it and the closest real field. Values that
    were JSON (lists for tuples) are accepted. Each entry of `evals` is
    built from its `type`'s fields (`config_schema.EVALUATORS`).

    Args:
        values: dict or ConfigDict, nested like the config.
        section: str or None. A sub-dict of the base to start from.
        where: str. Names the values' origin in errors (e.g. a file).

    Returns:
        A new locked ConfigDict.

    Raises:
        ValueError: an unknown key.
    """
    config = base_config()
    prefix = ""
    if isinstance(values, ml_collections.ConfigDict):
        values = values.to_dict()
    if not section:
        values = upgrade(values, where=where)
    if section:
        for part in section.split("."):
            config = config[part]
        prefix = section + "."
    _lay_over(config, dict(values), prefix, where)
    config.lock()
    return config


def replace(config: ml_collections.ConfigDict,
            **sections: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """A locked copy of `config` with fields of the named sections set
    (`replace(config, model={"variant": None})`, dotted sections as
    `**{"input.pp": {...}}`); `config` itself is never changed: a
    component that needs another config derives one."""
    out = config.copy_and_resolve_references()
    out.unlock()
    for section, values in sections.items():
        target = out
        for part in section.split("."):
            target = target[part]
        for key, value in values.items():
            if key not in target:
                raise UsageError(unknown_field_message(f"{section}.{key}"))
            with target.ignore_type():
                target[key] = value
    out.lock()
    return out


# Fields that take values of more than one type: an int or (height, width).
ANY_TYPE = ("model.image_size",)


def _lay_over(config, values: Mapping[str, Any], prefix: str,
              where: str) -> None:
    for key, value in values.items():
        name = prefix + key
        if name == "evals":
            _lay_evaluators(config, value, where)
            continue
        if key not in config:
            newer = f"; {NEWER_VERSION}" if where.endswith(".json") else ""
            raise UsageError(
                f"{where}: {unknown_field_message(name)} "
                f"(keras_vit/config_schema.py defines every field{newer})")
        if isinstance(config[key], ml_collections.ConfigDict) and not (
                name.endswith(".datasets") and name.startswith("evals.")):
            if not isinstance(value, Mapping):
                raise UsageError(
                    f"{where}: config.{name} is a section of fields, not "
                    f"{value!r}."
                )
            _lay_over(config[key], value, name + ".", where)
            continue
        if isinstance(value, Mapping):
            value = ml_collections.ConfigDict(dict(value))
        if name in ANY_TYPE:
            with config.ignore_type():
                config[key] = value
            continue
        kind = config.get_type(key)  # (a placeholder's too)
        if isinstance(value, bool) and kind in (int, float):
            raise UsageError(  # (ml_collections would take True as 1)
                f"{where}: config.{name}={value} is not a number: give "
                + (f"one, as {config[key]!r} is." if config[key] is not None
                   else "a whole number." if kind is int else "a number."))
        try:
            config[key] = value
        except TypeError as e:
            raise UsageError(f"{where}: config.{name}: {e}") from None


def _lay_evaluators(config, values: Mapping[str, Any], where: str) -> None:
    """The named evaluators of `values`, each built from its `type`'s
    fields (an entry the base has keeps its type unless it names
    another)."""
    if not isinstance(values, Mapping):
        raise UsageError(f"{where}: config.evals is a section of named "
                         f"evaluators, not {shorten(values)}.")
    for name, entry in values.items():
        if not isinstance(entry, Mapping):
            raise UsageError(
                f"{where}: config.evals.{name} is an evaluator (a section "
                f"with a `type`: {', '.join(EVALUATORS)}), not "
                f"{shorten(entry)}.")
        kind = entry.get("type") or (
            config.evals[name].type if name in config.evals else None)
        if kind not in EVALUATORS:
            raise UsageError(
                f"{where}: config.evals.{name}.type is {kind!r}: an "
                f"evaluator is one of {', '.join(EVALUATORS)}.")
        if name not in config.evals or config.evals[name].type != kind:
            with config.evals.unlocked():
                config.evals[name] = evaluator(kind)
        _lay_over(config.evals[name], dict(entry), f"evals.{name}.", where)


def complete_evaluator(values: Mapping[str, Any], kind: str, *,
                       where: str = "evaluator") -> ml_collections.ConfigDict:
    """An evaluator of type `kind` (`config_schema.EVALUATORS`) with
    `values` laid over its defaults and checked against its limits; a
    ConfigDict is returned as it is (a command's, checked with its config)."""
    if isinstance(values, ml_collections.ConfigDict):
        return values
    entry = evaluator(kind)
    _lay_over(entry, dict(values, type=kind), f"evals.{kind}.", where)
    entry.lock()
    check_evaluators(ml_collections.ConfigDict({"evals": {kind: entry}}))
    return entry


def find_evaluator(evals, kind: str) -> ml_collections.ConfigDict:
    """The evaluator of type `kind` in a config's `evals` section: the one
    named `kind`, else the only one of that type."""
    return evals[evaluator_name(evals, kind)]


def evaluator_name(evals, kind: str) -> str:
    """The name in `evals` of the evaluator `find_evaluator` picks."""
    if kind in evals and evals[kind].type == kind:
        return kind
    found = [name for name, e in evals.items() if e.type == kind]
    if len(found) != 1:
        raise UsageError(
            f"config.evals has {len(found)} evaluators of type {kind!r}: "
            f"one is needed (configs/{kind}.py adds config.evals.{kind}; "
            f"or name yours config.evals.{kind}).")
    return found[0]


# ------------------------------------------------------------ configs
CONFIGS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                           "configs")


def packaged_configs() -> List[str]:
    """Names of the configs shipped in keras_vit/configs/."""
    return sorted(
        name[:-3] for name in os.listdir(CONFIGS_DIR)
        if name.endswith(".py") and not name.startswith("_")
    )


def packaged_config(name: str) -> Optional[str]:
    """The path of the shipped config `name` ("digits"), or None when
    `name` is not a bare config name. An unknown bare name that is no
    file either is an error listing the shipped ones."""
    if not re.fullmatch(r"\w+", name):
        return None
    path = os.path.join(CONFIGS_DIR, name + ".py")
    if os.path.exists(path) and name in packaged_configs():
        return path
    if os.path.exists(name):
        return None
    raise UsageError(
        f"{name}: no such config. Shipped configs: "
        f"{', '.join(packaged_configs())}; or give a path (my_config.py)."
    )


def no_config_arg(arg: Optional[str], name: str) -> None:
    """Refuses an argument given to a config that takes none
    (`--config=digits:foo`), rather than dropping it in silence."""
    if arg:
        raise UsageError(
            f"--config={name}:{arg}: the {name} config takes no argument; "
            f"use --config={name} and --config.FIELD=VALUE overrides.")


def parse_config_arg(
    arg: Optional[str], bare_key: Optional[str] = None, **defaults: str
) -> dict:
    """A config's `:arg` ("variant=B/16,aug=medium2") as a dict over
    `defaults` (str values). A part without "=" is the value of
    `bare_key` ("B/16" -> variant) when given; a key that is not in
    `defaults` is an error listing the known ones."""
    out, seen = dict(defaults), set()
    for part in filter(None, (arg or "").split(",")):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep and bare_key is not None:
            key, value = bare_key, key
        elif not sep:
            raise UsageError(
                f"Cannot read config argument {part!r} in {arg!r}: use "
                f"key=value with keys {', '.join(sorted(out))}."
            )
        if key not in out:
            # A path with "=" in it, read as key=value.
            named = (f" (a {bare_key} holding '=' is named: "
                     f"{bare_key}={part})" if bare_key and "/" in key
                     and os.path.isdir(os.path.dirname(
                         os.path.expanduser(key)) or ".") else "")
            raise UsageError(
                f"Unknown config argument {key!r} in {arg!r}: use key=value "
                f"with keys {', '.join(sorted(out))}{named}."
            )
        if key in seen:
            raise UsageError(
                f"Config argument {key!r} given twice in {arg!r} (arguments "
                "are split at commas: a value with a comma, such as a "
                "folder's name, goes in its --config.FIELD instead).")
        seen.add(key)
        out[key] = value
    return out


# Training images of the ImageNet recipes, their validation hold-out
# removed.
IMAGENET1K_TRAIN = 1_268_355  # 99% of ImageNet-1k's 1,281,167
IMAGENET21K_TRAIN = 14_197_122 - 50_000  # 50k held out, as the paper's


def epochs_to_steps(epochs: float, images: int, batch: int) -> int:
    """Optimizer updates for `epochs` passes over `images` at `batch`
    (rounded up)."""
    return -(-int(float(epochs) * images) // int(batch))


def _flat(values: Mapping[str, Any], prefix: str = "") -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differences(saved: Mapping[str, Any], asked: Mapping[str, Any],
                limit: int = 3) -> str:
    """The fields where two configs (nested dicts) differ, as
    `config.A.B: SAVED in the workdir, ASKED asked` ("; "-separated, at
    most `limit` named, each value cut short); "" when they agree."""
    return named_differences(_flat(saved), _flat(asked),
                             lambda key: f"config.{key}",
                             lambda value: shorten(repr(value), 40), limit)


def named_differences(saved: Mapping[str, Any], asked: Mapping[str, Any],
                      path: Callable[[str], str],
                      render: Callable[[Any], str], limit: int = 3,
                      where: str = "in the workdir") -> str:
    """The keys where two flat mappings differ, as `PATH: SAVED in the
    workdir, ASKED asked` (`path(key)`, `render(value)`, `where` the saved
    one is; "; "-separated, at most `limit` named, then how many more);
    "" when they agree."""
    keys = [k for k in sorted(set(saved) | set(asked))
            if saved.get(k) != asked.get(k)]
    parts = [f"{path(k)}: {render(saved.get(k))} {where}, "
             f"{render(asked.get(k))} asked" for k in keys[:limit]]
    if len(keys) > limit:
        parts.append(f"and {len(keys) - limit} more")
    return "; ".join(parts)
