"""What a hub model's `config.json` says, checked field by field.

Every field of transformers' `ViTConfig` and every argument of timm's
`VisionTransformer.__init__` is listed here (`HF_VIT_FIELDS`,
`TIMM_VIT_ARGS`) with how keras_vit honours it:

- READ: builds the model (heads, image size, epsilon, GELU form, ...).
- SHAPE: checked against the arrays' shapes; a disagreement is refused.
- CHECKED: honoured for the values this ViT computes; any other value is
  refused with the field named.
- NO_EFFECT: training, initialisation or run-time options that leave the
  outputs at the stored resolution unchanged (dropout rates, weight init,
  timm's dynamic_img_size, the device).

A timm folder's `model_args` hold only what its maker passed; the rest
comes from the architecture name's registration, as timm itself builds it
(`timm_registry`, read from timm). A field that cannot be known is refused.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Optional

from keras_vit.checkpoint import timm_registry
from keras_vit.errors import UsageError

READ, SHAPE, CHECKED, NO_EFFECT = "read", "shape", "checked", "no effect"

HF_VIT_FIELDS = {
    "hidden_size": SHAPE,
    "num_hidden_layers": SHAPE,
    "intermediate_size": SHAPE,
    "patch_size": SHAPE,
    "pooler_output_size": SHAPE,  # the pooler's width, when it has one
    "num_attention_heads": READ,
    "image_size": READ,
    "layer_norm_eps": READ,
    "qkv_bias": READ,  # False: zero query/key/value biases
    "hidden_act": CHECKED,  # a GELU form
    "pooler_act": CHECKED,  # an activation Keras computes exactly
    "num_channels": CHECKED,  # 3
    "hidden_dropout_prob": NO_EFFECT,
    "attention_probs_dropout_prob": NO_EFFECT,
    "initializer_range": NO_EFFECT,
    # The stride of ViTForMaskedImageModeling's decoder, whose arrays are
    # refused as arrays this ViT has no place for.
    "encoder_stride": NO_EFFECT,
}

# transformers' `hidden_act` -> whether the MLP's GELU is the tanh form.
HF_GELU = {"gelu": False, "gelu_python": False, "gelu_new": True,
           "gelu_pytorch_tanh": True, "gelu_python_tanh": True,
           "gelu_fast": True}
# transformers' `pooler_act` -> the Keras activation computing the same
# function (tests/fixtures/hub/activations.npz holds transformers' values).
HF_POOLER_ACTIVATIONS = {
    "tanh": "tanh", "relu": "relu", "relu6": "relu6", "sigmoid": "sigmoid",
    "silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_python": "gelu",
    "linear": "linear", "mish": "mish", "hardswish": "hard_silu",
}

TIMM_VIT_ARGS = {
    "img_size": READ,
    "patch_size": SHAPE,
    "in_chans": CHECKED,
    "num_classes": SHAPE,
    "global_pool": CHECKED,
    "embed_dim": SHAPE,
    "depth": SHAPE,
    "num_heads": READ,
    "mlp_ratio": SHAPE,
    "qkv_bias": READ,
    "qk_norm": CHECKED,
    "scale_attn_norm": CHECKED,
    "scale_mlp_norm": CHECKED,
    "proj_bias": CHECKED,
    "init_values": CHECKED,
    "class_token": CHECKED,
    "pos_embed": CHECKED,
    "no_embed_class": CHECKED,
    "reg_tokens": CHECKED,
    "pre_norm": CHECKED,
    "final_norm": CHECKED,
    "fc_norm": CHECKED,
    "pool_include_prefix": CHECKED,
    "dynamic_img_size": NO_EFFECT,
    "dynamic_img_pad": NO_EFFECT,
    "drop_rate": NO_EFFECT,
    "pos_drop_rate": NO_EFFECT,
    "patch_drop_rate": NO_EFFECT,
    "proj_drop_rate": NO_EFFECT,
    "attn_drop_rate": NO_EFFECT,
    "drop_path_rate": NO_EFFECT,
    "weight_init": NO_EFFECT,
    "fix_init": NO_EFFECT,
    "embed_layer": CHECKED,
    "embed_norm_layer": CHECKED,
    "norm_layer": CHECKED,
    "act_layer": CHECKED,
    "block_fn": CHECKED,
    "mlp_layer": CHECKED,
    "attn_layer": CHECKED,
    "device": NO_EFFECT,
    "dtype": NO_EFFECT,
}
# timm's `act_layer` names -> whether the GELU is the tanh form.
_TIMM_GELU = {None: False, "gelu": False, "gelu_tanh": True}
# VisionTransformer's defaults of the CHECKED arguments, and what each
# must be for this ViT (a value, or a rule in _timm_refusal).
_TIMM_PLAIN = {
    "in_chans": 3, "qk_norm": False, "scale_attn_norm": False,
    "scale_mlp_norm": False, "proj_bias": True, "init_values": None,
    "pos_embed": "learn", "reg_tokens": 0, "pre_norm": False,
    "final_norm": True, "embed_layer": None, "embed_norm_layer": None,
    "block_fn": None, "mlp_layer": None, "attn_layer": None,
}
_TIMM_WHY = {
    "qk_norm": "a LayerNorm on queries and keys",
    "scale_attn_norm": "a norm inside attention",
    "scale_mlp_norm": "a norm inside the MLP",
    "proj_bias": "output projections without bias",
    "init_values": "layer scale (ls1 / ls2)",
    "pos_embed": "no learned position embedding",
    "reg_tokens": "register tokens",
    "pre_norm": "norm_pre, a LayerNorm before the first block",
    "final_norm": "no LayerNorm after the last block",
}
_TIMM_NAME = re.compile(
    r"^(?:vit|deit)_(tiny|small|base|large|huge|giant)_patch(\d+)_(\d+)"
)
_TIMM_HEADS = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16,
               "giant": 16}


def _refuse(field: str, value, why: str) -> UsageError:
    return UsageError(f"config.json {field}={value!r}: {why}; this ViT "
                      "does not compute that, so the model is refused.")


def hf_settings(spec: Dict[str, Any], folder: str,
                read_json) -> Dict[str, Any]:
    """The settings of a transformers ViT config (every ViTConfig field
    either honoured or refused by name)."""
    model_type = spec.get("model_type", "vit")
    if model_type != "vit":
        raise UsageError(
            f"config.json says model_type {model_type!r}; only 'vit' "
            "(ViTForImageClassification / ViTModel) is read. For DeiT, load"
            " the timm checkpoint (facebook/deit-*: timm/deit_*) instead."
        )
    act = spec.get("hidden_act", "gelu")
    if act not in HF_GELU:
        raise _refuse("hidden_act", act, "an MLP activation that is not "
                      f"one of the GELU forms {sorted(HF_GELU)}")
    pooler = spec.get("pooler_act", "tanh")
    if pooler not in HF_POOLER_ACTIVATIONS:
        raise _refuse("pooler_act", pooler, "a pooler activation with no "
                      "exact Keras equivalent (read: "
                      f"{', '.join(sorted(HF_POOLER_ACTIVATIONS))})")
    if spec.get("num_channels", 3) != 3:
        raise _refuse("num_channels", spec["num_channels"],
                      "images that are not RGB")
    processor = os.path.join(folder, "preprocessor_config.json")
    proc = read_json(processor) if os.path.exists(processor) else {}
    return dict(
        num_heads=int(spec["num_attention_heads"]),
        image_size=spec.get("image_size", 224),
        approximate_gelu=HF_GELU[act],
        layer_norm_epsilon=float(spec.get("layer_norm_eps", 1e-12)),
        class_names=class_names(spec.get("id2label"), hf=True),
        mean=tuple(proc.get("image_mean", (0.5,) * 3)),
        std=tuple(proc.get("image_std", (0.5,) * 3)),
        pre_logits_activation=HF_POOLER_ACTIVATIONS[pooler],
    )


def _disagree(field: str, given, found) -> UsageError:
    return UsageError(
        f"config.json {field}={given!r} disagrees with the weights "
        f"({found}): the folder mixes two models."
    )


def _patch(value):
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        return value[0]
    return value


def check_hf_shapes(spec: Dict[str, Any], info: Dict[str, Any]) -> None:
    """Refuses a transformers config whose SHAPE fields disagree with the
    arrays (`info`: `npz.describe_arrays` of the mapped arrays)."""
    found = {
        "hidden_size": info["hidden_size"],
        "num_hidden_layers": info["num_layers"],
        "intermediate_size": info["mlp_dim"],
        "patch_size": info["patch_size"],
        "pooler_output_size": info["representation_size"],
    }
    for field, value in found.items():
        given = spec.get(field)
        if field == "patch_size":
            given = _patch(given)
        if given is not None and value is not None and given != value:
            raise _disagree(field, given, value)


def check_timm_shapes(spec: Dict[str, Any], info: Dict[str, Any]) -> None:
    """Refuses a timm config whose SHAPE arguments disagree with the
    arrays."""
    args = spec.get("model_args") or {}
    width = info["hidden_size"]
    found = {
        "embed_dim": width,
        "depth": info["num_layers"],
        "patch_size": info["patch_size"],
        "num_classes": info["num_classes"] or 0,
        "mlp_ratio": info["mlp_dim"] / width if width else None,
    }
    for field, value in found.items():
        given = args.get(field)
        if field == "patch_size":
            given = _patch(given)
        if given is not None and value is not None and given != value:
            raise _disagree(f"model_args.{field}", given, value)


def class_names(labels, hf: bool = False) -> Optional[List[str]]:
    """A list of names in class-id order, from transformers' id2label or
    timm's label_names (a list, or {id: name} with ids as JSON strings or
    ints; an id missing from a dict keeps its number as its name)."""
    if not labels:
        return None
    if isinstance(labels, (list, tuple)):
        return [str(n) for n in labels]
    if not isinstance(labels, dict):
        raise UsageError("config.json label names must be a list or an "
                         f"{{id: name}} object, not {type(labels).__name__}.")
    try:
        names = {int(k): str(v) for k, v in labels.items()}
    except ValueError:
        raise UsageError("config.json label ids must be integers, got "
                         f"{sorted(labels)[:3]}.") from None
    if hf and all(v == f"LABEL_{k}" for k, v in names.items()):
        return None  # transformers' placeholder names
    if min(names) < 0:
        raise UsageError(f"config.json label id {min(names)} is negative.")
    return [names.get(i, str(i)) for i in range(max(names) + 1)]


def timm_architecture(spec: Dict[str, Any]):
    """(name, registered (heads, args) or None): the architecture of a
    timm config, without a pretrained tag (`vit_b.augreg` -> `vit_b`)."""
    arch = str(spec.get("architecture", "")).split(".")[0]
    return arch, timm_registry.ARCHITECTURES.get(arch)


def is_distilled(spec: Dict[str, Any]) -> bool:
    arch, known = timm_architecture(spec)
    return "_distilled_" in arch or bool(known and known[1].get("distilled"))


def _pool(spec, arch, known, model_args) -> str:
    """global_pool as timm builds it from this config: model_args, else
    the architecture's registration; the top-level copy timm writes is
    informational and must agree."""
    top = spec.get("global_pool")
    if "global_pool" in model_args:
        pool = model_args["global_pool"]
    elif known is not None:
        pool = known[1].get("global_pool", "token")
    elif top is not None:
        return top
    else:
        raise UsageError(
            f"config.json names architecture {arch!r}, not one of timm's "
            "vision_transformer / deit models, and gives no global_pool: "
            "cannot tell how the tokens are pooled. Add \"global_pool\" to "
            "its model_args."
        )
    if top is not None and top != pool:
        raise UsageError(
            f"config.json global_pool {top!r} disagrees with what timm "
            f"builds from its model_args / architecture {arch!r} ({pool!r})"
            ": fix the config so that both say how the weights pool."
        )
    return pool


def _timm_refusal(args: Dict[str, Any], pool: str) -> Optional[UsageError]:
    """The first argument this ViT does not compute, as an error."""
    for field, plain in _TIMM_PLAIN.items():
        value = args.get(field, plain)
        if value != plain:
            why = _TIMM_WHY.get(field, "another layer than timm's default")
            return _refuse(field, value, why)
    if args.get("norm_layer") not in (None, "layernorm"):
        return _refuse("norm_layer", args["norm_layer"],
                       "a norm other than timm's LayerNorm (epsilon 1e-6)")
    if args.get("act_layer") not in _TIMM_GELU:
        return _refuse("act_layer", args["act_layer"],
                       "an MLP activation other than GELU")
    cls = args.get("class_token", True)
    fc_norm = args.get("fc_norm")
    if fc_norm is None:
        fc_norm = pool in ("avg", "avgmax", "max")
    if pool == "token" and not cls:
        return _refuse("class_token", cls, "token pooling without a token")
    if pool == "avg" and cls:
        return _refuse("global_pool", pool, "an average of the patch tokens "
                       "beside a class token (this ViT's average pooling, "
                       "the official GAP models', has no class token)")
    if pool == "avg" and fc_norm:
        return _refuse("fc_norm", args.get("fc_norm"), "average pooling "
                       "followed by a LayerNorm (fc_norm; timm's default "
                       "with 'avg'), while this ViT normalises every token "
                       "and then averages, as the official GAP models do")
    if pool not in ("token", "avg"):
        return _refuse("global_pool", pool, "a pooling other than the class"
                       " token ('token') or the average ('avg')")
    if args.get("no_embed_class") and cls:
        return _refuse("no_embed_class", True, "position embeddings without"
                       " the class token (it is added unembedded)")
    if args.get("pool_include_prefix") and cls:
        return _refuse("pool_include_prefix", True,
                       "the class token averaged with the patches")
    return None


def timm_settings(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The settings of a timm config (every VisionTransformer argument
    honoured or refused by name)."""
    arch, known = timm_architecture(spec)
    model_args = spec.get("model_args") or {}
    pretrained = spec.get("pretrained_cfg")
    if pretrained is None:  # timm's older single-dict config
        pretrained = spec
    args = {**(known[1] if known else {}), **model_args}
    pool = _pool(spec, arch, known, model_args)
    refusal = _timm_refusal(args, pool)
    if refusal is not None:
        raise refusal
    named = _TIMM_NAME.match(arch)
    heads = model_args.get("num_heads") or (known[0] if known else None) or (
        _TIMM_HEADS[named.group(1)] if named else None)
    if heads is None:
        raise UsageError(
            f"config.json names architecture {arch!r} without num_heads in "
            "model_args: cannot tell the head count."
        )
    size = pretrained.get("input_size", [3] + [args.get("img_size")] * 2)
    if size[1] is None:
        size = [3] + [int(named.group(3))] * 2 if named else [3, 224, 224]
    if isinstance(size[1], (list, tuple)):  # input_size from img_size pair
        size = [3, *size[1]]
    return dict(
        num_heads=int(heads),
        image_size=(int(size[1]), int(size[2])),
        approximate_gelu=_TIMM_GELU[args.get("act_layer")],
        layer_norm_epsilon=1e-6,
        class_names=class_names(spec.get("label_names",
                                         pretrained.get("label_names"))),
        mean=tuple(pretrained.get("mean", (0.5,) * 3)),
        std=tuple(pretrained.get("std", (0.5,) * 3)),
        pooling="gap" if pool == "avg" else "token",
        fc_norm=bool(args.get("fc_norm")),
    )
