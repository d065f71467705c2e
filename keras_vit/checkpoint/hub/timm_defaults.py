"""What timm's factory fills in from a hub config before it builds a
`VisionTransformer` (create_model, `_update_default_model_kwargs`,
`load_pretrained`), done the same way here: the architecture's
registration (`timm_registry`), the image size, the input channels and
the classifier width, each with timm's precedence (model_args, then the
architecture's own arguments, then pretrained_cfg, then the defaults),
and the head timm's loader would refuse or drop; and the resize of its
evaluation transform (`eval_resize`). Read by `hub_timm`.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, Optional

from keras_vit.checkpoint.hub import timm_registry
from keras_vit.checkpoint.hub.config import disagree, patch_size, refuse
from keras_vit.checkpoint.hub.processor import past_patches_note, warn_once
from keras_vit.errors import UsageError

# The fields of timm's PretrainedCfg (timm 1.0.31, the registry's): its
# factory builds one from a config.json's pretrained_cfg
# (`PretrainedCfg(**pretrained_cfg)`), which raises TypeError for any
# other key.
PRETRAINED_CFG_FIELDS = (
    "url", "file", "state_dict", "hf_hub_id", "hf_hub_filename", "source",
    "architecture", "tag", "custom_load", "input_size", "test_input_size",
    "min_input_size", "fixed_input_size", "interpolation", "crop_pct",
    "test_crop_pct", "crop_mode", "mean", "std", "num_classes",
    "label_offset", "label_names", "label_descriptions", "pool_size",
    "test_pool_size", "first_conv", "classifier", "license", "description",
    "origin_url", "paper_name", "paper_ids", "notes",
)
# What timm's hub config parsing takes out of an older single-dict config
# (no pretrained_cfg) before the rest becomes the PretrainedCfg ("labels"
# is renamed label_names).
_SINGLE_DICT_EXTRA = ("architecture", "num_features", "labels")
# The patch size in a registered architecture's name: every vit_ / deit_
# (and aimv2_, beit3_, eva_) entrypoint named with `_patchN` passes
# patch_size=N to VisionTransformer (timm's naming convention; the
# registry stores no sizes). The names without it (flexivit_*, test_vit*)
# pass VisionTransformer's default, 16.
_NAME_PATCH = re.compile(r"_patch(\d+)")
TIMM_DEFAULT_PATCH = 16


# The names timm's vision_transformer and deit modules still take for
# their renamed models (`register_model_deprecations`): the architecture
# and pretrained tag each stands for. Folders saved with timm 0.6 name
# them (vit_base_patch16_224_in21k).
DEPRECATED = {
    'vit_tiny_patch16_224_in21k': 'vit_tiny_patch16_224.augreg_in21k',
    'vit_small_patch32_224_in21k': 'vit_small_patch32_224.augreg_in21k',
    'vit_small_patch16_224_in21k': 'vit_small_patch16_224.augreg_in21k',
    'vit_base_patch32_224_in21k': 'vit_base_patch32_224.augreg_in21k',
    'vit_base_patch16_224_in21k': 'vit_base_patch16_224.augreg_in21k',
    'vit_base_patch8_224_in21k': 'vit_base_patch8_224.augreg_in21k',
    'vit_large_patch32_224_in21k': 'vit_large_patch32_224.orig_in21k',
    'vit_large_patch16_224_in21k': 'vit_large_patch16_224.augreg_in21k',
    'vit_huge_patch14_224_in21k': 'vit_huge_patch14_224.orig_in21k',
    'vit_base_patch32_224_sam': 'vit_base_patch32_224.sam',
    'vit_base_patch16_224_sam': 'vit_base_patch16_224.sam',
    'vit_small_patch16_224_dino': 'vit_small_patch16_224.dino',
    'vit_small_patch8_224_dino': 'vit_small_patch8_224.dino',
    'vit_base_patch16_224_dino': 'vit_base_patch16_224.dino',
    'vit_base_patch8_224_dino': 'vit_base_patch8_224.dino',
    'vit_base_patch16_224_miil_in21k': 'vit_base_patch16_224_miil.in21k',
    'vit_base_patch32_224_clip_laion2b': 'vit_base_patch32_clip_224.laion2b',
    'vit_large_patch14_224_clip_laion2b': 'vit_large_patch14_clip_224.laion2b',
    'vit_huge_patch14_224_clip_laion2b': 'vit_huge_patch14_clip_224.laion2b',
    'vit_giant_patch14_224_clip_laion2b': 'vit_giant_patch14_clip_224.laion2b',
    'deit3_small_patch16_224_in21ft1k':
        'deit3_small_patch16_224.fb_in22k_ft_in1k',
    'deit3_small_patch16_384_in21ft1k':
        'deit3_small_patch16_384.fb_in22k_ft_in1k',
    'deit3_medium_patch16_224_in21ft1k':
        'deit3_medium_patch16_224.fb_in22k_ft_in1k',
    'deit3_base_patch16_224_in21ft1k':
        'deit3_base_patch16_224.fb_in22k_ft_in1k',
    'deit3_base_patch16_384_in21ft1k':
        'deit3_base_patch16_384.fb_in22k_ft_in1k',
    'deit3_large_patch16_224_in21ft1k':
        'deit3_large_patch16_224.fb_in22k_ft_in1k',
    'deit3_large_patch16_384_in21ft1k':
        'deit3_large_patch16_384.fb_in22k_ft_in1k',
    'deit3_huge_patch14_224_in21ft1k':
        'deit3_huge_patch14_224.fb_in22k_ft_in1k',
}


def timm_architecture(spec: Dict[str, Any]):
    """(name, registered (heads, args) or None): the architecture of a
    timm config, without a pretrained tag (`vit_b.augreg` -> `vit_b`); a
    deprecated name as the one timm takes it for
    (`vit_base_patch16_224_in21k` -> `vit_base_patch16_224`)."""
    arch = str(spec.get("architecture", "")).split(".")[0]
    arch = DEPRECATED.get(arch, arch).split(".")[0]
    return arch, timm_registry.ARCHITECTURES.get(arch)


def registered(spec: Dict[str, Any]):
    """(name, (heads, args)) of a config's architecture, refused by name
    where timm's vision_transformer / deit modules register no such
    architecture: its arguments (heads, pooling, layers) are what timm
    builds the weights' model from, and cannot be told from the name."""
    arch, known = timm_architecture(spec)
    if known is not None:
        return arch, known
    named = (f"names architecture {arch!r}" if arch else
             "names no architecture")
    raise UsageError(
        f"config.json {named}, not one of the "
        f"{len(timm_registry.ARCHITECTURES)} vision_transformer / deit "
        f"architectures of timm {timm_registry.TIMM_VERSION} (timm raises "
        "'Unknown model' for a name it does not register; keras_vit reads "
        "each one's arguments from that list): set architecture to a "
        "registered name (e.g. 'vit_base_patch16_224') and the model's own "
        "arguments in model_args."
    )


def check_pretrained_fields(spec: Dict[str, Any]) -> None:
    """Refuses a pretrained_cfg key that timm's PretrainedCfg does not
    define (timm's factory raises TypeError building it), and a null
    pretrained_cfg (its config parsing fails on it); in an older
    single-dict config, the top-level keys become the PretrainedCfg."""
    if "pretrained_cfg" in spec and spec["pretrained_cfg"] is None:
        raise UsageError(
            "config.json pretrained_cfg is null, which timm's config "
            "parsing cannot read: give an object or remove the field.")
    single = "pretrained_cfg" not in spec
    fields = spec if single else spec["pretrained_cfg"]
    allowed = PRETRAINED_CFG_FIELDS + (_SINGLE_DICT_EXTRA if single else ())
    unknown = sorted(str(k) for k in fields if k not in allowed)
    if unknown:
        where = ("config.json (a single-dict timm config, without "
                 "pretrained_cfg)" if single else "config.json pretrained_cfg")
        raise UsageError(
            f"{where} has {unknown[0]!r}, not a field of timm "
            f"{timm_registry.TIMM_VERSION}'s PretrainedCfg, which its "
            "factory builds from these fields (it raises TypeError for "
            f"another): remove {', '.join(repr(k) for k in unknown[:3])}"
            f"{' ...' if len(unknown) > 3 else ''} or fix the name."
        )


def image_size(model_args, pretrained, known):
    """The img_size (an int or [height, width]) timm builds from a hub
    config: model_args' img_size (create_model passes them over the
    entrypoint's own arguments), else the architecture's registered
    img_size (what its entrypoint passes, e.g. beit3_giant_patch14_336's
    336), else
    pretrained_cfg's input_size when the config says fixed_input_size
    (timm's _update_default_model_kwargs only fills in what is unset),
    else VisionTransformer's 224. A `vit_*_384` name alone gives no size:
    its entrypoint passes none."""
    size = model_args.get("img_size")
    if size is None and known is not None:
        size = known[1].get("img_size")
    if size is None and fixed_input_size(model_args, pretrained):
        size = list(pretrained.get("input_size") or (3, 224, 224))[-2:]
    return 224 if size is None else size


def fixed_input_size(model_args, pretrained) -> bool:
    """pretrained_cfg's fixed_input_size (PretrainedCfg's default False)
    as timm's hub config parsing leaves it: off for model_args with
    dynamic_img_size, strict_img_size false or use_naflex."""
    if (model_args.get("dynamic_img_size") or model_args.get(
            "use_naflex") or model_args.get("strict_img_size") is False):
        return False
    return bool(pretrained.get("fixed_input_size", False))


def pretrained_cfg(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The config's pretrained_cfg (timm's older single-dict config: the
    config itself)."""
    pretrained = spec.get("pretrained_cfg")
    return spec if pretrained is None else pretrained


def num_classes(spec: Dict[str, Any]):
    """(classes, field): the classifier width timm builds from a hub
    config: model_args' num_classes, else the architecture's registered
    one, else the top-level num_classes (which timm copies over
    pretrained_cfg's), else pretrained_cfg's, else PretrainedCfg's 1000;
    a negative or null value is not passed, leaving VisionTransformer's
    1000."""
    model_args = spec.get("model_args") or {}
    _, known = timm_architecture(spec)
    if model_args.get("num_classes") is not None:
        return model_args["num_classes"], "model_args.num_classes"
    if known is not None and known[1].get("num_classes") is not None:
        return known[1]["num_classes"], "the architecture's num_classes"
    value, field = _cfg_classes(spec)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        return 1000, f"{field} (VisionTransformer's default)"
    return value, field


def _cfg_classes(spec: Dict[str, Any]):
    """(value, field) of the num_classes timm's pretrained_cfg holds."""
    pretrained = pretrained_cfg(spec)
    if "num_classes" in spec:
        return spec["num_classes"], "num_classes"
    if "num_classes" in pretrained:
        return pretrained["num_classes"], "pretrained_cfg.num_classes"
    return 1000, "num_classes (left out: timm's PretrainedCfg default)"


def check_classes(spec: Dict[str, Any], found: int) -> None:
    """Refuses a head timm's strict load would refuse (another width than
    the one it builds), would drop (load_pretrained starts the head at
    random when the built width is not pretrained_cfg's num_classes and
    the config names its classifier) or would cut (label_offset)."""
    built, field = num_classes(spec)
    offset = pretrained_cfg(spec).get("label_offset")
    if (isinstance(offset, int) and offset > 0 and found
            and pretrained_cfg(spec).get("classifier")):
        raise refuse("pretrained_cfg.label_offset", offset,
                     f"timm's loader drops the stored head's first {offset}"
                     " row(s) (a background class) before loading it")
    if built != found:
        raise disagree(field, built, found)
    stored, where = _cfg_classes(spec)
    if stored != built and pretrained_cfg(spec).get("classifier"):
        raise UsageError(
            f"config.json {where}={stored!r} is not the {built} classes "
            f"timm builds ({field}): its loader then drops the stored head"
            " and starts it at random. Make the two agree."
        )


def check_in_chans(args, pretrained) -> None:
    """timm's _update_default_model_kwargs sets in_chans, where neither
    model_args nor the architecture gives it, to pretrained_cfg's
    input_size[0] (PretrainedCfg's default (3, 224, 224))."""
    if args.get("in_chans") is None:
        size = pretrained.get("input_size") or (3, 224, 224)
        if size[0] != 3:
            raise refuse("pretrained_cfg.input_size", size,
                         f"timm builds in_chans={size[0]} from it (model_"
                         "args gives no in_chans), images that are not "
                         "RGB")


def named_patch(spec: Dict[str, Any]) -> Optional[int]:
    """The patch size in the config's architecture name
    (vit_base_patch32_224 -> 32), or None where the name has none."""
    found = _NAME_PATCH.search(timm_architecture(spec)[0])
    return int(found.group(1)) if found else None


def timm_patch(spec: Dict[str, Any]):
    """The patch size timm builds: model_args' patch_size (create_model
    passes it over the entrypoint's), else the architecture name's, else
    VisionTransformer's 16."""
    given = (spec.get("model_args") or {}).get("patch_size")
    if given is not None:
        return patch_size(given)
    return named_patch(spec) or TIMM_DEFAULT_PATCH


def check_named_sizes(spec: Dict[str, Any], info: Dict[str, Any]) -> None:
    """Refuses the sizes a timm hub config gives beside model_args (which
    hold only what its maker passed) that disagree with the arrays: the
    top-level num_features timm writes (a ViT's embed_dim), and the patch
    size in the architecture's name where model_args gives none (timm
    builds that patch and its checkpoint filter resamples a stored kernel
    of another size to it, a model of other patches than the weights')."""
    features, width = spec.get("num_features"), info["hidden_size"]
    if None not in (features, width) and features != width:
        raise disagree("num_features", features, width)
    if (spec.get("model_args") or {}).get("patch_size") is not None:
        return  # checked as model_args.patch_size
    named, found = named_patch(spec), info["patch_size"]
    if None not in (named, found) and named != found:
        raise disagree(
            "architecture", spec.get("architecture"),
            f"{found}-pixel patches, where timm builds the "
            f"name's patch{named} as model_args gives no patch_size")


def eval_resize(crop_pct: float, crop_mode, size, path: str, built=None):
    """(N, keep_aspect) of timm's evaluation transform
    (transforms_imagenet_eval: resize to floor(side / crop_pct), then the
    central crop) in keras-vit's form, or (None, False) where it resizes
    to the input directly. crop_mode 'center' (timm's default, and what
    timm does for a mode it does not name) resizes a photo's shorter side
    to N, the aspect ratio kept (torchvision's Resize(int)), a crop_pct
    of 1 included: keep_aspect True. 'squash' resizes both sides to N x N
    (to the input directly at a crop_pct of 1). What timm does beyond
    these forms, a non-square resize or crop_mode 'border', is said in one
    warning line; timm's filter (bicubic by default, where keras-vit
    resizes with area keeping the aspect ratio, bilinear otherwise) is
    logged by the commands. `size`: the model's input as timm makes it;
    `built`: the whole patches of it that the patch convolution reads,
    which keras_vit builds the model at (default `size`): the resize is
    timm's, for `size`, and the window read is said."""
    built = tuple(built or size)
    plan = _eval_resize(crop_pct, crop_mode, tuple(size), path, built)
    if built != tuple(size):
        note = past_patches_note(size, built, plan[0])
        if not plan[0]:
            note += (f": keras-vit resizes a photo to {built[0]} x "
                     f"{built[1]} directly")
        warn_once(f"{path}: timm {note}.")
    return plan


def _eval_resize(crop_pct, crop_mode, size, path, built):
    """eval_resize's (N, keep_aspect) for a model input `size`."""
    rows, cols = size
    scale = (math.floor(rows / crop_pct), math.floor(cols / crop_pct))
    if rows != cols:
        if scale[0] > rows or scale[1] > cols or crop_mode != "squash":
            warn_once(
                f"{path}: timm resizes to {scale[0]} x {scale[1]} (crop_pct "
                f"{crop_pct}, crop_mode {crop_mode!r}) before its central "
                f"{rows} x {cols}, which "
                "keras-vit cannot (it resizes to N x N, or the shorter side "
                f"to N): a photo is resized to {built[0]} x {built[1]} "
                "directly; "
                "--resize_size=N resizes to N x N before the central crop.")
        return None, False
    if scale[0] < rows:  # a crop_pct above 1, which timm pads
        return None, False
    if crop_mode not in ("squash", "border"):
        return scale[0], True
    if crop_mode == "border":
        warn_once(
            f"{path}: timm's crop_mode 'border' fits a photo's longer side "
            f"in {scale[0]} pixels and pads the rest; keras-vit resizes "
            f"both sides to {scale[0]} and takes the central {built[0]} x "
            f"{built[1]}; --resize_size=N sets another resize.")
    return (None if (scale[0],) * 2 == built else scale[0]), False
