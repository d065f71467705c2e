"""What timm's factory fills in from a hub config before it builds a
`VisionTransformer` (create_model, `_update_default_model_kwargs`,
`load_pretrained`), done the same way here: the architecture's
registration (`timm_registry`), the image size, the input channels and
the classifier width, each with timm's precedence (model_args, then the
architecture's own arguments, then pretrained_cfg, then the defaults),
and the head timm's loader would refuse or drop. Read by `hub_timm`.
"""

from __future__ import annotations

from typing import Any, Dict

from keras_vit.checkpoint.hub import timm_registry
from keras_vit.checkpoint.hub.config import disagree, refuse
from keras_vit.errors import UsageError


def timm_architecture(spec: Dict[str, Any]):
    """(name, registered (heads, args) or None): the architecture of a
    timm config, without a pretrained tag (`vit_b.augreg` -> `vit_b`)."""
    arch = str(spec.get("architecture", "")).split(".")[0]
    return arch, timm_registry.ARCHITECTURES.get(arch)


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
