"""What a --config.FIELD=VALUE override means beyond ml_collections'
parsing (the commands apply these right after parsing,
`keras_vit.commands.runner.parse`): a variant named on the command line
switches the model, sizes included (`command_line_variant`), and the word
None is None where a field may be None (`command_line_nones`)."""

from __future__ import annotations

import functools
import re
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import ml_collections
from absl import logging

from keras_vit.config import complete, field_names
from keras_vit.config_schema import EVALUATORS, base_config, evaluator
from keras_vit.errors import UsageError
from keras_vit.variants import SIZE_FIELDS

# The config.model fields a variant gives (its sizes and a hybrid's ResNet).
VARIANT_FIELDS = SIZE_FIELDS + ("resnet_layers", "resnet_width")


def variant_fields(variant: Optional[str],
                   keep: Iterable[str] = ()) -> dict:
    """The `config.model` fields that build `variant`: the variant, and
    None (the variant's own) for each of its sizes set explicitly, except
    the dotted fields in `keep` ("model.hidden_size": given on the command
    line, which win over the variant's)."""
    keep = set(keep)
    fields = {"variant": variant}
    fields.update((f, None) for f in VARIANT_FIELDS
                  if f"model.{f}" not in keep)
    return fields


def command_line_variant(config: ml_collections.ConfigDict,
                         overridden: Iterable[str]) -> None:
    """A variant named on the command line (`overridden`: the dotted fields
    its --config.FIELD=VALUE set) switches the model: the sizes that the
    config file gave explicitly (digits' 4-layer width-128 ViT) give way to
    the variant's, those also on the command line stay. Changes `config`
    (a parsed, locked one) in place."""
    overridden = set(overridden)
    if "model.variant" not in overridden or not config.model.variant:
        return
    for key, value in variant_fields(config.model.variant,
                                     overridden).items():
        config.model[key] = value
    kept = config.model.representation_size
    if kept and "model.representation_size" not in overridden:
        # A recipe's pre-logits width is its variant's: said, not guessed.
        logging.warning(
            "--config.model.variant=%s keeps the config's pre-logits width "
            "config.model.representation_size=%s (and its other choices "
            "for the variant it names): pass "
            "--config.model.representation_size to change it, or name the "
            "variant in the config's argument (--config=NAME:%s) where the "
            "config takes one.", config.model.variant, kept,
            config.model.variant)


# What a user types on the command line for "no value".
NONE_WORDS = ("none", "null")
# Typed fields whose None is meaningful though their schema default is
# not (variant None: the explicit sizes; grad_clip_norm None: none).
NULLABLE = ("model.variant", "trainer.grad_clip_norm")


def command_line_nones(config: ml_collections.ConfigDict,
                       overridden: Mapping[str, Any]) -> None:
    """--config.FIELD=None (or null) for a field that may be None (its
    schema default is None, or NULLABLE) sets it to None: ml_collections
    keeps the word as a string for such a field, which then read as a
    variant, a model or a split named "None". Changes `config` in
    place."""
    base = None  # the schema, read once a None word is seen
    for dotted, value in overridden.items():
        if not (isinstance(value, str)
                and value.strip().lower() in NONE_WORDS):
            continue
        if base is None:
            base = base_config()
        if _schema_default(dotted, base) is not None and (
                dotted not in NULLABLE):
            continue
        *parents, leaf = dotted.split(".")
        try:
            target = functools.reduce(lambda c, k: c[k], parents, config)
        except (KeyError, AttributeError, TypeError):
            continue
        target[leaf] = None


def _schema_default(dotted: str, base: ml_collections.ConfigDict):
    """The schema's default of field `dotted` ("" where it holds none);
    a field of an entry of `evals` (evals.<name>.FIELD), which each config
    names, has its evaluator type's default: None where a type's is."""
    keys = dotted.split(".")

    def walk(config, path):
        return functools.reduce(lambda c, k: c[k], path, config)

    try:
        return walk(base, keys)
    except (KeyError, AttributeError, TypeError):
        pass
    found = ""
    if len(keys) > 2 and keys[0] == "evals":
        for kind in EVALUATORS:
            try:
                found = walk(evaluator(kind), keys[2:])
            except (KeyError, AttributeError, TypeError):
                continue
            if found is None:
                return None
    return found


_NONE_ARG = re.compile(r"--?config\.([\w.]+)=(\w+)")


def held_nones(argv: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
    """(`argv` without the --config.FIELD=None of the fields whose schema
    default is None, {FIELD: the word}): ml_collections' parser of an int
    or float field refuses the word before `command_line_nones` could make
    it None; the caller passes the held words to it once parsed."""
    kept, held, base = [], {}, None
    for arg in argv:
        match = _NONE_ARG.fullmatch(str(arg))
        if match and match.group(2).lower() in NONE_WORDS:
            base = base if base is not None else base_config()
            default = _schema_default(match.group(1), base)
            if default is None or match.group(1) in NULLABLE:
                held[match.group(1)] = match.group(2)
                continue
        # A later plain value of the field wins, as any later flag does.
        plain = re.match(r"--?config\.([\w.]+)=", str(arg))
        if plain:
            held.pop(plain.group(1), None)
        kept.append(arg)
    return kept, held


# Fields that take an int or a (height, width) pair, typed as int.
SIZE_PAIRS = ("model.image_size",)
_PAIR_ARG = re.compile(
    r"--?config\.([\w.]+)=\(?\s*(\d+)\s*(?:,|x|\s)\s*(\d+)\s*\)?")


def held_pairs(argv: Sequence[str]) -> Tuple[List[str], Dict[str, tuple]]:
    """(`argv` without the --config.FIELD=HxW (or H,W) of SIZE_PAIRS,
    {FIELD: (H, W)}): ml_collections parses such a field as an int, which
    a pair is not; `set_pairs` sets them once parsed."""
    kept, held = [], {}
    for arg in argv:
        match = _PAIR_ARG.fullmatch(str(arg))
        if match and match.group(1) in SIZE_PAIRS:
            held[match.group(1)] = (int(match.group(2)), int(match.group(3)))
            continue
        # A later plain value of the field wins, as any later flag does.
        plain = re.match(r"--?config\.([\w.]+)=", str(arg))
        if plain:
            held.pop(plain.group(1), None)
        kept.append(arg)
    return kept, held


def _section_of(config: ml_collections.ConfigDict, dotted: str):
    """(the section that holds field `dotted` of `config`, its name)."""
    *parents, leaf = dotted.split(".")
    return functools.reduce(lambda c, k: c[k], parents, config), leaf


def set_pairs(config: ml_collections.ConfigDict,
              pairs: Mapping[str, tuple]) -> None:
    """Sets each held (height, width) pair (`held_pairs`) in `config`."""
    for dotted, pair in pairs.items():
        section, leaf = _section_of(config, dotted)
        with section.ignore_type():
            section[leaf] = pair


def split_string_lists(config: ml_collections.ConfigDict,
                       overridden: Mapping[str, Any],
                       typed: Mapping[str, str]) -> None:
    """--config.FIELD=a,b of a field holding a tuple of strings (e.g.
    optimizer.no_decay) is ("a", "b"): ml_collections keeps the words as
    one string, "a,b", which would match no name. A value typed with
    quotes is one string as typed (`typed`: FIELD -> the text after =).
    Changes `config`."""
    for dotted, value in overridden.items():
        if not (isinstance(value, (tuple, list)) and len(value) == 1
                and isinstance(value[0], str)
                and re.search(r"[,()]", value[0])) or re.search(
                    r"['\"]", typed.get(dotted, "")):
            continue
        words = tuple(w.strip(" '\"") for w in value[0].strip("()[] ")
                      .split(",") if w.strip(" '\""))
        section, leaf = _section_of(config, dotted)
        section[leaf] = type(value)(words)


def section_refusal(overridden: Iterable[str]) -> Optional[str]:
    """The line refusing a --config.SECTION={...} among the dotted
    fields `overridden` (it would replace a whole section, config.evals'
    entries included), or None where each names a field."""
    base = base_config()
    for dotted in overridden:
        if dotted == "evals":
            return ("--config.evals is the section of the config's "
                    "evaluators: set their fields one by one (e.g. "
                    "--config.evals.NAME.split=...).")
        if dotted.startswith("evals.") and dotted.count(".") == 1:
            return (f"--config.{dotted} is an evaluator: set its fields one "
                    f"by one (e.g. --config.{dotted}.batch_size=...).")
        try:
            value = functools.reduce(lambda c, k: c[k], dotted.split("."),
                                     base)
        except (KeyError, AttributeError, TypeError):
            continue
        if isinstance(value, ml_collections.ConfigDict):
            return (f"--config.{dotted} is a section of fields: set them "
                    f"one by one (e.g. --config.{dotted}."
                    f"{next(iter(value.keys()))}=...).")
    return None


def check_parsed(config, where: str, overridden: Iterable[str]):
    """The config a --config file gave, checked against the schema (a
    UsageError names a field it does not define, with the file), with
    the schema's defaults for what it leaves out (a partial ConfigDict,
    a dict, an earlier version's flat config); `config` itself when it
    is whole. A --config.SECTION={...} override, which would replace a
    whole section, is refused: set its fields one by one."""
    refusal = section_refusal(overridden)
    if refusal:
        raise UsageError(refusal)
    for dotted in overridden:
        if dotted.startswith("evals."):
            _check_evaluator_type(config, dotted)
    if not isinstance(config, (ml_collections.ConfigDict, Mapping)):
        raise UsageError(
            f"{where}: get_config() returned a {type(config).__name__}, not "
            "a config: return keras_vit.config.base_config() with the "
            "fields changed.")
    from_dict = (config.to_dict()
                 if isinstance(config, ml_collections.ConfigDict)
                 else dict(config))
    whole = complete(from_dict, where=where)
    if isinstance(config, ml_collections.ConfigDict) and set(
            field_names(whole)) == set(field_names(config)):
        return config
    return whole


def _check_evaluator_type(config, dotted: str) -> None:
    """Refuses a --config.evals.NAME.type that leaves the entry fields of
    another type: the config file makes its evaluators."""
    keys = dotted.split(".")
    if keys[2:] != ["type"]:
        return
    try:
        entry = config["evals"][keys[1]]
        kind, fields = entry["type"], set(entry.keys())
    except (KeyError, TypeError, AttributeError):
        return  # the schema's check names what is missing
    foreign = sorted(fields - set(evaluator(kind).keys())) if (
        kind in EVALUATORS) else []
    if foreign:
        raise UsageError(
            f"--config.{dotted}={kind}: config.evals.{keys[1]} is an "
            f"evaluator of another type (its {', '.join(foreign)} "
            f"{'is' if len(foreign) == 1 else 'are'} no {kind} evaluator's), "
            "and the command line cannot change an evaluator's type: give "
            f"a --config whose get_config makes a {kind} evaluator "
            f"(keras_vit.config_schema.evaluator({kind!r})).")


def check_epochs(config: ml_collections.ConfigDict,
                 overridden: Iterable[str]) -> None:
    """Refuses --config.trainer.epochs where the run is counted in steps
    (trainer.total_steps above 0), which would leave it unread."""
    steps = int(config.trainer.total_steps)
    if "trainer.epochs" in overridden and steps != 0:
        raise UsageError(
            f"--config.trainer.epochs={config.trainer.epochs} is read only "
            "when config.trainer.total_steps is 0, and this run's is "
            f"{steps}: add --config.trainer.total_steps=0 to count the run "
            "in epochs, or leave --config.trainer.epochs out.")
