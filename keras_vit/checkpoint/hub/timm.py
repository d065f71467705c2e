"""timm `vision_transformer` configs, checked argument by argument.

Every argument of timm's `VisionTransformer.__init__` is listed in
`TIMM_VIT_ARGS` with how keras_vit honours it (the categories of
`hub_config`). A timm folder's `model_args` hold only what its maker
passed; the rest comes from the architecture name's registration and
the pretrained_cfg, as timm itself builds it (`timm_registry`, read from
timm; `timm_defaults`). An architecture name timm does not register, a
model_args key neither VisionTransformer nor timm's factory takes
(`TIMM_FACTORY_ARGS`) and a pretrained_cfg key timm's PretrainedCfg
lacks are refused, as timm refuses them; so is a field that cannot be
known, and a part the arrays show that this ViT does not compute (a
distillation or register token, norm_pre, position embeddings without
the class token), each by name.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from keras_vit.checkpoint.hub.config import (
    CHECKED,
    NO_EFFECT,
    READ,
    SHAPE,
    channels,
    check_square_patch,
    class_names,
    disagree,
    patch_size,
    refuse,
)
from keras_vit.checkpoint.hub.timm_defaults import (
    check_classes,
    check_in_chans,
    check_named_sizes,
    check_pretrained_fields,
    eval_resize,  # noqa: F401 (read as hub_timm.eval_resize)
    image_size,
    pretrained_cfg,
    registered,
    timm_architecture,
    timm_patch,
)
from keras_vit.checkpoint.hub.timm_registry import TIMM_VERSION
from keras_vit.errors import UsageError

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
    # True: timm pads an image to whole patches, which this ViT does not;
    # read where the image size is whole patches (nothing to pad).
    "dynamic_img_pad": CHECKED,
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
# The model_args keys timm's factory takes before VisionTransformer
# (create_model hands model_args to the architecture's entrypoint, which
# passes what it does not take to the model, whose __init__ raises
# TypeError for any key of neither list).
TIMM_FACTORY_ARGS = {
    # True: timm builds its NaFlexVit instead (refused).
    "use_naflex": CHECKED,
    # True: a feature extractor, not the classifier (refused).
    "features_only": CHECKED,
    # The feature extractor's outputs; nothing without features_only.
    "out_indices": NO_EFFECT,
    # False: timm loads missing or extra arrays without complaint; a
    # folder keras_vit loads has every array its model needs, no other.
    "pretrained_strict": NO_EFFECT,
}
# timm's `act_layer` names, as its get_act_layer reads them (lower case;
# none or "": VisionTransformer's nn.GELU) -> whether the GELU is the tanh
# form (GELUTanh: F.gelu(approximate='tanh')).
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
    "in_chans": "images that are not RGB (3 channels)",
}
# timm's IMAGENET_DEFAULT_MEAN / _STD: what a pretrained_cfg without mean
# or std gets (timm's PretrainedCfg and resolve_data_config defaults).
TIMM_DEFAULT_MEAN = (0.485, 0.456, 0.406)
TIMM_DEFAULT_STD = (0.229, 0.224, 0.225)
# timm.data's DEFAULT_CROP_PCT: what resolve_data_config gives a config
# without crop_pct.
TIMM_DEFAULT_CROP_PCT = 0.875


def _pair(size):
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if (not isinstance(size, (list, tuple)) or len(size) != 2 or not all(
            isinstance(s, int) and not isinstance(s, bool) and s > 0
            for s in size)):
        raise UsageError(f"config.json image size {size!r}: a positive "
                         "int or [height, width] is expected.")
    return int(size[0]), int(size[1])


def check_shapes(spec: Dict[str, Any], info: Dict[str, Any]) -> None:
    """Refuses a timm config whose SHAPE arguments, num_features or
    architecture name's patch size disagree with the arrays."""
    args = spec.get("model_args") or {}
    width = info["hidden_size"]
    check_classes(spec, info["num_classes"] or 0)
    check_named_sizes(spec, info)
    found = {
        "embed_dim": width,
        "depth": info["num_layers"],
        "patch_size": info["patch_size"],
        "mlp_ratio": info["mlp_dim"],
    }
    for field, value in found.items():
        given = args.get(field)
        if field == "patch_size":
            given = patch_size(given)
        if field == "mlp_ratio" and isinstance(given, (int, float)) and (
                width):
            # timm's Mlp is int(mlp_ratio * embed_dim) wide.
            if int(given * width) == value:
                continue
            value = f"{value} / {width}"
        if given is not None and value is not None and given != value:
            raise disagree(f"model_args.{field}", given, value)


def is_distilled(spec: Dict[str, Any]) -> bool:
    arch, known = timm_architecture(spec)
    return "_distilled_" in arch or bool(known and known[1].get("distilled"))


def _pool(spec, arch, known, model_args) -> str:
    """global_pool as timm builds it from this config: model_args, else
    the architecture's registration (else VisionTransformer's 'token');
    the top-level copy timm writes is informational and must agree."""
    top = spec.get("global_pool")
    pool = model_args.get("global_pool", known[1].get("global_pool",
                                                      "token"))
    if top is not None and top != pool:
        raise UsageError(
            f"config.json global_pool {top!r} disagrees with what timm "
            f"builds from its model_args / architecture {arch!r} ({pool!r})"
            ": fix the config so that both say how the weights pool."
        )
    return pool


def _layer_name(value, underscores: bool = True):
    """A norm_layer / act_layer name as timm's get_norm_layer (without
    `underscores`) / get_act_layer looks it up: lower case; none or ""
    for VisionTransformer's default (LayerNorm, nn.GELU)."""
    if not value:
        return None
    if not isinstance(value, str):
        return repr(value)  # no name: refused as one timm does not know
    return (value if underscores else value.replace("_", "")).lower()


def _timm_refusal(args: Dict[str, Any], pool: str) -> Optional[UsageError]:
    """The first argument this ViT does not compute, as an error."""
    for field, plain in _TIMM_PLAIN.items():
        value = args.get(field, plain)
        if field == "init_values" and not value:
            continue  # timm's Block builds LayerScale only `if init_values`
        if value != plain:
            why = _TIMM_WHY.get(field, "another layer than timm's default")
            return refuse(field, value, why)
    if _layer_name(args.get("norm_layer"), False) not in (None, "layernorm"):
        return refuse("norm_layer", args["norm_layer"],
                       "a norm other than timm's LayerNorm (epsilon 1e-6)")
    if _layer_name(args.get("act_layer")) not in _TIMM_GELU:
        return refuse("act_layer", args["act_layer"],
                       "an MLP activation other than GELU")
    cls = args.get("class_token", True)
    fc_norm = args.get("fc_norm")
    if fc_norm is None:
        fc_norm = pool in ("avg", "avgmax", "max")
    if pool == "token" and not cls:
        return refuse("class_token", cls, "token pooling without a token")
    if pool == "avg" and cls:
        return refuse("global_pool", pool, "an average of the patch tokens "
                       "beside a class token (this ViT's average pooling, "
                       "the official GAP models', has no class token)")
    if pool == "avg" and fc_norm:
        return refuse("fc_norm", args.get("fc_norm"), "average pooling "
                       "followed by a LayerNorm (fc_norm; timm's default "
                       "with 'avg'), while this ViT normalises every token "
                       "and then averages, as the official GAP models do")
    if pool not in ("token", "avg"):
        return refuse("global_pool", pool, "a pooling other than the class"
                       " token ('token') or the average ('avg')")
    if args.get("no_embed_class") and cls:
        return refuse("no_embed_class", True, "position embeddings without"
                       " the class token (it is added unembedded)")
    if args.get("pool_include_prefix") and cls:
        return refuse("pool_include_prefix", True,
                       "the class token averaged with the patches")
    return None


def _check_model_args(model_args: Dict[str, Any]) -> None:
    """Refuses a model_args key neither VisionTransformer nor timm's
    factory takes (timm raises TypeError), and a factory key that makes
    another model than this ViT."""
    unknown = sorted(str(k) for k in model_args
                     if k not in TIMM_VIT_ARGS and k not in TIMM_FACTORY_ARGS)
    if unknown:
        raise UsageError(
            f"config.json model_args has {unknown[0]!r}, which timm "
            f"{TIMM_VERSION}'s VisionTransformer does not take (nor its "
            "factory: timm raises TypeError building the model): remove "
            f"{', '.join(repr(k) for k in unknown[:3])}"
            f"{' ...' if len(unknown) > 3 else ''} or fix the name."
        )
    for field, why in (("use_naflex", "timm's NaFlexVit, another model"),
                       ("features_only", "a feature extractor, not the "
                        "model with its head")):
        if model_args.get(field):
            raise refuse(f"model_args.{field}", model_args[field], why)


def _label_names(spec: Dict[str, Any], pretrained: Dict[str, Any]):
    """The label names timm's config parsing keeps: the top-level
    label_names over pretrained_cfg's; in a single-dict config, "labels"
    (renamed label_names) over label_names."""
    if "pretrained_cfg" not in spec and "labels" in spec:
        return spec["labels"]
    return spec.get("label_names", pretrained.get("label_names"))


def settings(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The settings of a timm config (every VisionTransformer argument
    honoured or refused by name)."""
    arch, known = registered(spec)
    model_args = spec.get("model_args") or {}
    _check_model_args(model_args)
    check_pretrained_fields(spec)
    pretrained = pretrained_cfg(spec)
    args = {**known[1], **model_args}
    check_in_chans(args, pretrained)
    pool = _pool(spec, arch, known, model_args)
    refusal = _timm_refusal(args, pool)
    if refusal is not None:
        raise refusal
    heads = model_args.get("num_heads") or known[0]
    check_square_patch("config.json model_args.patch_size",
                       args.get("patch_size"))
    return dict(
        num_heads=int(heads),
        image_size=_pair(image_size(model_args, pretrained, known)),
        stored_size=_pair(model_args.get("img_size") or list(
            pretrained.get("input_size") or (3, 224, 224))[-2:]),
        approximate_gelu=_TIMM_GELU[_layer_name(args.get("act_layer"))],
        layer_norm_epsilon=1e-6,
        class_names=class_names(_label_names(spec, pretrained)),
        mean=channels(pretrained.get("mean") or TIMM_DEFAULT_MEAN,
                      "pretrained_cfg mean", "config.json"),
        std=_std(pretrained.get("std") or TIMM_DEFAULT_STD),
        pooling="gap" if pool == "avg" else "token",
        fc_norm=bool(args.get("fc_norm")),
        # What timm's strict load and its checkpoint filter read.
        qkv_bias=args.get("qkv_bias", True),
        dynamic_img_pad=bool(args.get("dynamic_img_pad", False)),
        patch_size=timm_patch(spec),
        # timm's evaluation transform: resize to side / crop_pct, then the
        # central crop (timm.data's default crop_pct where none is given).
        crop_pct=float(pretrained.get("crop_pct") or TIMM_DEFAULT_CROP_PCT),
        # How it resizes before that crop (timm's 'center' where none).
        crop_mode=pretrained.get("crop_mode") or "center",
    )


def _std(value):
    std = channels(value, "pretrained_cfg std", "config.json")
    if min(abs(s) for s in std) == 0:
        raise UsageError(
            f"config.json pretrained_cfg std={list(value)!r} has a zero: "
            "timm would divide the pixels by it, so no model input is "
            "defined."
        )
    return std


def check_padding(pad: bool, size, patch: int) -> None:
    """dynamic_img_pad=True: timm pads an image that is not whole patches
    with zeros to whole patches, which this ViT does not compute (it reads
    whole patches, as timm does without the padding)."""
    if pad and any(s % patch for s in size):
        raise refuse("model_args.dynamic_img_pad", True,
                     f"an image of {size[0]} x {size[1]} pixels padded to "
                     f"whole {patch}-pixel patches")


def refuse_arrays(spec, tensors, weights_path: str) -> None:
    """Refuses, by name, a timm model whose arrays show a part this ViT
    does not compute, before anything else is read from its config."""
    if "dist_token" in tensors or is_distilled(spec):
        found = (f"first dist_token {tensors['dist_token'].shape}"
                 if "dist_token" in tensors else "a dist_token")
        raise UsageError(
            f"{weights_path} is a distilled DeiT "
            f"({spec.get('architecture', 'dist_token in its arrays')}): "
            f"{found}, a distillation token this ViT does not compute. "
            "Load the same model without distillation (timm deit_*)."
        )
    for key, why in (("norm_pre.weight", "norm_pre, a LayerNorm before the "
                      "first block (timm pre_norm=True)"),
                     ("reg_token", "register tokens (timm reg_tokens)")):
        if key in tensors:
            raise UsageError(f"{weights_path} has {key}: {why}; this ViT "
                             "does not compute that.")
