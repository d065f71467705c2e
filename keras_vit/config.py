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
from typing import Any, List, Mapping, Optional

import ml_collections

from keras_vit.config_schema import FREE_FORM, base_config
from keras_vit.errors import UsageError

__all__ = [
    "base_config", "complete", "field_names", "closest_field",
    "unknown_field_message", "upgrade", "packaged_configs",
    "packaged_config", "parse_config_arg", "epochs_to_steps",
]


def field_names(config: ml_collections.ConfigDict,
                prefix: str = "") -> List[str]:
    """Dotted names of every field of `config`, sub-dicts included."""
    names = []
    for key in config.keys():
        name = prefix + key
        names.append(name)
        value = config[key]
        if (isinstance(value, ml_collections.ConfigDict)
                and name not in FREE_FORM):
            names.extend(field_names(value, name + "."))
    return names


def closest_field(name: str, config=None) -> Optional[str]:
    """The real field (dotted name) closest to the dotted `name`, or None:
    a field of the same name in another section ("resize_size" ->
    "pp.resize_size"), else a sibling with a similar name (a typo), else a
    similar name in another section."""
    config = base_config() if config is None else config
    names = field_names(config)
    parent, _, leaf = name.rpartition(".")
    leaves = {}
    for n in names:  # the first (outermost) field of each leaf name
        leaves.setdefault(n.rpartition(".")[2], n)
    if leaf in leaves:
        return leaves[leaf]
    siblings = {n.rpartition(".")[2]: n for n in names
                if n.rpartition(".")[0] == parent}
    for pool in (siblings, leaves):
        match = difflib.get_close_matches(leaf, list(pool), n=1, cutoff=0.6)
        if match:
            return pool[match[0]]
    return None


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

    A key the base does not know is an error naming it and the closest real
    field. Values that were JSON (lists for tuples) are accepted.

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
    if not section:
        values = upgrade(values)
    if section:
        for part in section.split("."):
            config = config[part]
        prefix = section + "."
    if isinstance(values, ml_collections.ConfigDict):
        values = values.to_dict()
    _lay_over(config, dict(values), prefix, where)
    config.lock()
    return config


# Fields that take values of more than one type: an int or (height, width).
ANY_TYPE = ("image_size",)


def _lay_over(config, values: Mapping[str, Any], prefix: str,
              where: str) -> None:
    for key, value in values.items():
        name = prefix + key
        if key not in config:
            raise UsageError(
                f"{where}: {unknown_field_message(name)} "
                "(keras_vit/config_schema.py defines every field)"
            )
        if isinstance(config[key], ml_collections.ConfigDict) and (
            name not in FREE_FORM
        ):
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
        try:
            config[key] = value
        except TypeError as e:
            raise UsageError(f"{where}: config.{name}: {e}") from None


# Fields of older configs and what replaced them.
RENAMED = {
    "init.npz": "init.model",
    "init.keras_model": "init.model",
    "init.workdir": "init.model",
}


def upgrade(values: Mapping[str, Any]) -> Mapping[str, Any]:
    """A saved config (config.json) with the fields of an older version
    mapped to their successors (RENAMED): init.npz, init.keras_model and
    init.workdir become init.model; num_classes 0, once "from the data",
    is None."""
    if isinstance(values, ml_collections.ConfigDict):
        values = values.to_dict()
    if values.get("num_classes") == 0:
        values = dict(values, num_classes=None)
    init = values.get("init")
    if not isinstance(init, Mapping):
        return values
    old = [k for k in ("npz", "keras_model", "workdir") if k in init]
    if not old:
        return values
    init = dict(init)
    given = [init.pop(k) for k in old]
    given = [g for g in given if g]
    if len(given) > 1:
        raise UsageError(
            f"config.init names {len(given)} models ({', '.join(given)}): "
            "keep one, as config.init.model."
        )
    if given and not init.setdefault("model", None):
        init["model"] = given[0]
    return dict(values, init=init)


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
    if os.path.exists(path):
        return path
    if os.path.exists(name):
        return None
    raise UsageError(
        f"{name}: no such config. Shipped configs: "
        f"{', '.join(packaged_configs())}; or give a path (my_config.py)."
    )


def parse_config_arg(
    arg: Optional[str], bare_key: Optional[str] = None, **defaults: str
) -> dict:
    """A config's `:arg` ("variant=B/16,aug=medium2") as a dict over
    `defaults` (str values). A part without "=" is the value of
    `bare_key` ("B/16" -> variant) when given; a key that is not in
    `defaults` is an error listing the known ones."""
    out = dict(defaults)
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
            raise UsageError(
                f"Unknown config argument {key!r} in {arg!r}: use key=value "
                f"with keys {', '.join(sorted(out))}."
            )
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
