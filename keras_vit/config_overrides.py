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

from keras_vit.config_schema import base_config
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


# What a user types on the command line for "no value".
NONE_WORDS = ("none", "null")
# Typed fields whose None is meaningful though their schema default is
# not (variant None: the explicit sizes).
NULLABLE = ("model.variant",)


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
        *parents, leaf = dotted.split(".")
        schema, target = base, config
        try:
            for part in parents:
                schema, target = schema[part], target[part]
            default = schema[leaf]
        except (KeyError, AttributeError, TypeError):
            continue  # a field the schema does not hold (an evaluator's)
        if default is None or dotted in NULLABLE:
            target[leaf] = None


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
            try:
                default = functools.reduce(lambda c, k: c[k],
                                           match.group(1).split("."), base)
            except (KeyError, AttributeError, TypeError):
                default = ""  # not in the schema: as typed
            if default is None:
                held[match.group(1)] = match.group(2)
                continue
        kept.append(arg)
    return kept, held
