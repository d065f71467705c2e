"""The JSON types of the config.json fields a hub folder's reader uses.

A config.json is untrusted input: a field of another type (a string where
transformers has an int, `0` heads, an object where timm has a list)
would otherwise fail deep inside the readers (TypeError, ZeroDivisionError,
AttributeError). `check_config_types` refuses it first, in one line that
names the field, the value and what is expected. Absent fields are
left to the readers' defaults, as transformers and timm do; a JSON `null`
is passed on to the reader, which reads it as its library does (a
transformers size or epsilon that is null is refused by name in
`config.hf_settings`: transformers cannot build from it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, Tuple

from keras_vit.errors import UsageError


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (
        value > 0)


def _count(value) -> bool:  # a class count: 0 means no head
    return isinstance(value, int) and not isinstance(value, bool) and (
        value >= 0)


# Larger than any image a ViT is run at; bounds what a size may allocate.
MAX_IMAGE_SIDE = 1 << 15


def _side(value) -> bool:
    return _positive_int(value) and value <= MAX_IMAGE_SIDE


def _size(value) -> bool:  # an int, or [height, width]
    if _side(value):
        return True
    return isinstance(value, list) and len(value) == 2 and all(
        _side(v) for v in value)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(
        value, bool) and math.isfinite(value)


def _positive_number(value) -> bool:
    return _number(value) and value > 0


def _crop_share(value) -> bool:  # timm's crop_pct
    return _positive_number(value) and value <= 1


def _three_numbers(value) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(
        _number(v) for v in value)


def _input_size(value) -> bool:  # timm's (channels, height, width)
    return isinstance(value, list) and len(value) == 3 and all(
        _side(v) for v in value)


def _string(value) -> bool:
    return isinstance(value, str)


def _flag(value) -> bool:
    return isinstance(value, bool)


def _object(value) -> bool:
    return isinstance(value, dict)


def _labels(value) -> bool:
    return isinstance(value, (list, dict))


Check = Tuple[Callable[[Any], bool], str]
_INT = (_positive_int, "a positive integer")
_SIZE = (_size, f"a positive integer or [height, width], at most "
         f"{MAX_IMAGE_SIDE}")
_STR = (_string, "a string")
_FLAG = (_flag, "true or false")
_LABELS = (_labels, "a list or an {id: name} object")

# transformers' ViTConfig fields that the reader uses.
HF_FIELDS: Dict[str, Check] = {
    "model_type": _STR,
    "hidden_act": _STR,
    "pooler_act": _STR,
    "num_channels": _INT,
    "num_attention_heads": _INT,
    "hidden_size": _INT,
    "num_hidden_layers": _INT,
    "intermediate_size": _INT,
    "pooler_output_size": _INT,
    "image_size": _SIZE,
    "patch_size": _SIZE,
    "layer_norm_eps": (_positive_number, "a positive number"),
    # PretrainedConfig refuses a list ("should be a dictionary").
    "id2label": (_object, "an {id: name} object, as transformers takes it"),
    "num_labels": (_count, "an integer >= 0"),
}

# A timm hub config.json: its top level, model_args and pretrained_cfg.
TIMM_FIELDS: Dict[str, Check] = {
    "architecture": _STR,
    "global_pool": _STR,
    "label_names": _LABELS,
    "num_classes": (_count, "an integer >= 0"),
    "model_args": (_object, "an object"),
    "pretrained_cfg": (_object, "an object"),
}
TIMM_MODEL_ARGS: Dict[str, Check] = {
    "img_size": _SIZE,
    "patch_size": _SIZE,
    "embed_dim": _INT,
    "depth": _INT,
    "num_heads": _INT,
    "num_classes": (_count, "an integer >= 0"),
    "mlp_ratio": (_positive_number, "a positive number"),
    "global_pool": _STR,
    "class_token": _FLAG,
    "no_embed_class": _FLAG,
    "pool_include_prefix": _FLAG,
    "fc_norm": _FLAG,
    "act_layer": _STR,
    "norm_layer": _STR,
}
TIMM_PRETRAINED: Dict[str, Check] = {
    "input_size": (_input_size, "[channels, height, width], each at most "
                   f"{MAX_IMAGE_SIDE}"),
    "fixed_input_size": _FLAG,
    "mean": (_three_numbers, "three numbers"),
    "std": (_three_numbers, "three numbers"),
    "label_names": _LABELS,
    "num_classes": (_count, "an integer >= 0"),
    "crop_pct": (_crop_share, "a number above 0 and at most 1"),
    "crop_mode": _STR,
}


def _check(where: str, spec: Dict[str, Any], fields: Dict[str, Check],
           prefix: str = "") -> None:
    for field, (ok, expected) in fields.items():
        value = spec.get(field)
        if value is not None and not ok(value):
            shown = repr(value)
            if len(shown) > 60:
                shown = shown[:57] + "..."
            raise UsageError(
                f"{where}: {prefix}{field}={shown}: {expected} is expected; "
                "fix or remove the field."
            )


def check_config_types(spec: Dict[str, Any], where: str,
                       timm: bool) -> None:
    """Refuses, in one line, a config.json field of a type its library
    would not accept (`where`: the file, for the message)."""
    if not timm:
        _check(where, spec, HF_FIELDS)
        return
    _check(where, spec, TIMM_FIELDS)
    _check(where, spec.get("model_args") or {}, TIMM_MODEL_ARGS,
           "model_args.")
    pretrained = spec.get("pretrained_cfg")
    # timm's older single-dict configs keep these fields at the top.
    _check(where, spec if pretrained is None else pretrained,
           TIMM_PRETRAINED, "" if pretrained is None else "pretrained_cfg.")


def check_heads(num_heads: int, width: int, where: str) -> None:
    """The head count must divide the model width, as both libraries'
    attention requires (a config without num_heads takes its
    architecture's registered count, which may not fit the arrays)."""
    if width % num_heads:
        raise UsageError(
            f"{where}: {num_heads} attention heads do not divide the "
            f"arrays' width {width}: the config's head count is not this "
            "model's; give its num_heads."
        )
