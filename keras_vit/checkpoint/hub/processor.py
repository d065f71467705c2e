"""What a transformers folder's `preprocessor_config.json` makes of a
photo, read the way transformers' image processors (5.24, the version the
hub fixtures were written with) read it: the class AutoImageProcessor
builds (`processor_class`), each field the file gives over that class's
default (`PROCESSOR_DEFAULTS`, `PROCESSOR_GEOMETRY`; a null takes the
default, as the processors' `_set_attributes` does).

- The pixel normalisation (`processor_normalisation`): rescale and
  mean / std, an affine map of the pixels that the reader folds exactly
  into the patch embedding.
- The geometry (`library_resize`): `do_resize` with `size` (and
  `default_to_square` for a number), `do_center_crop` with `crop_size`,
  `resample`, and ConvNeXT's `crop_pct`, in keras_vit's evaluation forms
  (resize to N x N, bilinear, or the shorter side to N, area; then the
  central crop of the model's input; or straight to the input). What the
  processor asks beyond them (a bicubic filter, a crop without a resize,
  an output the model cannot take, ...) is said in one warning line per
  folder, with the fix (--resize_size, --keep_aspect).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

from absl import logging

from keras_vit.errors import UsageError, shorten

PROCESSOR_FILE = "preprocessor_config.json"
# transformers.image_utils' IMAGENET_STANDARD_* and OPENAI_CLIP_*.
_STANDARD = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
_CLIP = ((0.48145466, 0.4578275, 0.40821073),
         (0.26862954, 0.26130258, 0.27577711))
# The (image_mean, image_std) each image processor class that a ViT
# folder's preprocessor_config.json names uses where the file leaves them
# out (each class's defaults, in transformers 4 and 5 alike: DeiT's and
# ConvNeXT's are IMAGENET_STANDARD, not IMAGENET_DEFAULT; all rescale by
# 1/255 and normalise by default).
PROCESSOR_DEFAULTS = {
    "ViTImageProcessor": _STANDARD,
    "BeitImageProcessor": _STANDARD,
    "SiglipImageProcessor": _STANDARD,
    "DeiTImageProcessor": _STANDARD,
    "ConvNextImageProcessor": _STANDARD,
    "CLIPImageProcessor": _CLIP,
    "BitImageProcessor": _CLIP,
}

# PIL's resampling filters, as transformers' `resample` numbers them.
_BILINEAR = 2
_RESAMPLE = {0: "NEAREST", 1: "LANCZOS", 2: "BILINEAR", 3: "BICUBIC",
             4: "BOX", 5: "HAMMING"}


def _square(side: int) -> Dict[str, int]:
    return {"height": side, "width": side}


# Each class's resize and crop defaults (transformers 5.24; a class
# without do_center_crop crops nothing unless its file says so).
PROCESSOR_GEOMETRY: Dict[str, Dict[str, Any]] = {
    "ViTImageProcessor": dict(size=_square(224), resample=2),
    "DeiTImageProcessor": dict(size=_square(256), crop_size=_square(224),
                               do_center_crop=True, resample=3),
    "BeitImageProcessor": dict(size=_square(224), crop_size=_square(224),
                               do_center_crop=False, resample=3),
    "SiglipImageProcessor": dict(size=_square(224), resample=3,
                                 default_to_square=False),
    "CLIPImageProcessor": dict(size={"shortest_edge": 224},
                               crop_size=_square(224), do_center_crop=True,
                               resample=3, default_to_square=False),
    "BitImageProcessor": dict(size={"shortest_edge": 224},
                              crop_size=_square(224), do_center_crop=True,
                              resample=3, default_to_square=False),
    "ConvNextImageProcessor": dict(size={"shortest_edge": 384}, resample=3,
                                   default_to_square=False,
                                   crop_pct=224 / 256),
}
# The key sets transformers accepts for `size` (get_size_dict).
_SIZE_KEYS = ({"height", "width"}, {"shortest_edge"},
              {"shortest_edge", "longest_edge"}, {"longest_edge"},
              {"max_height", "max_width"}, {"min_pixels", "max_pixels"})


def channels(value, field: str, path: str) -> Tuple[float, ...]:
    """Three per-channel floats from a number or a list of 1 or 3."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, tuple):  # a default, not JSON
        value = list(value)
    if (not isinstance(value, list) or len(value) not in (1, 3)
            or not all(isinstance(v, (int, float))
                       and not isinstance(v, bool) for v in value)):
        raise UsageError(
            f"{path} {field}={value!r}: a number or a list of 3 numbers "
            "(one per RGB channel) is expected."
        )
    values = tuple(float(v) for v in value) * (3 // len(value))
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"{path} {field}={value!r} is not finite.")
    return values


def processor_class(proc: Dict[str, Any], path: str) -> str:
    """The image processor class transformers' AutoImageProcessor builds
    for a ViT folder: `image_processor_type`, else the older
    `feature_extractor_type` with FeatureExtractor read as ImageProcessor,
    else ViTConfig's ViTImageProcessor; a fast variant ('...Fast') has its
    slow class's defaults."""
    name = proc.get("image_processor_type")
    field = "image_processor_type"
    if name is None and proc.get("feature_extractor_type") is not None:
        field = "feature_extractor_type"
        name = proc[field]
        if isinstance(name, str):
            name = name.replace("FeatureExtractor", "ImageProcessor")
    if name is None:
        return "ViTImageProcessor"
    if not isinstance(name, str):
        raise UsageError(f"{path} {field}={shorten(name)}: a transformers "
                         "class name (a string) is expected.")
    return name[:-len("Fast")] if name.endswith("Fast") else name


def _given(proc: Dict[str, Any], field: str, default):
    """The file's value of `field`, the class default where it leaves the
    field out or sets it to null (the processors' `_set_attributes`)."""
    value = proc.get(field)
    return default if value is None else value


def processor_normalisation(proc: Dict[str, Any], path: str):
    """(mean, std) of pixels / 255 that equal what a transformers image
    processor feeds the model: `do_rescale` (x rescale_factor, default
    1/255) and `do_normalize` ((x - image_mean) / image_std, default mean
    and std those of the processor class, `PROCESSOR_DEFAULTS`;
    transformers' defaults for a field left out or null). Any such affine
    map of the pixels folds exactly into the patch embedding; a zero scale or
    std, which no model input can come from, is refused, and so is a
    class of unknown defaults that leaves image_mean or image_std out."""
    if not isinstance(proc, dict):
        raise UsageError(f"{path} is not a JSON object.")
    kind = processor_class(proc, path)
    rescale = _given(proc, "do_rescale", True)
    factor = _given(proc, "rescale_factor", 1 / 255) if rescale else 1.0
    if (isinstance(factor, bool) or not isinstance(factor, (int, float))
            or not math.isfinite(factor) or factor <= 0):
        raise UsageError(
            f"{path} rescale_factor={factor!r}: a positive number is "
            "expected (transformers multiplies the pixels by it)."
        )
    mean, std = (0.0,) * 3, (1.0,) * 3
    if _given(proc, "do_normalize", True):
        default = PROCESSOR_DEFAULTS.get(kind)
        unset = [f for f in ("image_mean", "image_std")
                 if proc.get(f) is None]
        if default is None and unset:
            raise UsageError(
                f"{path} names image processor {kind!r}, whose default "
                f"{unset[0]} is not known here (known: "
                f"{', '.join(sorted(PROCESSOR_DEFAULTS))}): add image_mean "
                "and image_std to the file."
            )
        mean = channels(proc.get("image_mean") if proc.get(
            "image_mean") is not None else default[0], "image_mean", path)
        std = channels(proc.get("image_std") if proc.get(
            "image_std") is not None else default[1], "image_std", path)
        if min(abs(s) for s in std) == 0:
            raise UsageError(
                f"{path} image_std={list(std)} has a zero: transformers "
                "would divide by it, so no model input is defined."
            )
    # The model sees (p * factor - mean) / std for pixels p in [0, 255]:
    # in terms of p / 255, mean / (255 factor) and std / (255 factor).
    unit = 255.0 * float(factor)
    return (tuple(m / unit for m in mean), tuple(s / unit for s in std))


def _side(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and (
        value > 0)


def size_dict(value, square: bool, field: str, path: str) -> Dict[str, int]:
    """`size` / `crop_size` as transformers' get_size_dict makes it: a
    number is {height, width} (`square`, default_to_square) or
    {shortest_edge}, a pair (height, width); a dict must have one of
    transformers' key sets. Anything else is refused (transformers
    cannot build the processor from it)."""
    if _side(value):
        return _square(value) if square else {"shortest_edge": value}
    if isinstance(value, list) and len(value) == 2 and all(
            _side(v) for v in value):
        return {"height": value[0], "width": value[1]}
    if isinstance(value, dict) and set(value) in _SIZE_KEYS and all(
            _side(v) for v in value.values()):
        return dict(value)
    raise UsageError(
        f"{path} {field}={shorten(repr(value), 80)}: transformers reads a "
        "positive number, [height, width] or an object such as "
        "{\"height\": H, \"width\": W} or {\"shortest_edge\": S}; fix or "
        "remove the field."
    )


_SAID = set()


def warn_once(text: str) -> None:
    """One warning line per text and process (a folder is read several
    times by one command)."""
    if text not in _SAID:
        _SAID.add(text)
        logging.warning("%s", text)


def library_resize(proc: Optional[Dict[str, Any]], path: str,
                   model_hw: Tuple[int, int],
                   built_hw: Optional[Tuple[int, int]] = None,
                   ) -> Tuple[Optional[int], bool]:
    """(N, keep_aspect) of the evaluation resize (to N x N, or with
    keep_aspect the shorter side to N, then the central crop of the
    model's input) that the folder's processor implies, or (None, False)
    where it resizes to the input directly (or there is no processor
    file, which transformers cannot process photos without). `model_hw`:
    the config.json image size the model takes; `built_hw`: the whole
    patches of it that its patch convolution reads, the size keras_vit
    builds the model at (default `model_hw`). What the processor does
    that these forms cannot is said in one warning line, with what is
    done instead."""
    if proc is None:
        return None, False
    kind = processor_class(proc, path)
    model_hw = tuple(model_hw)
    built = tuple(built_hw or model_hw)
    plan, notes = _plan(proc, path, kind, model_hw)
    if built != model_hw:
        plan = _past_patches(plan, notes, model_hw, built)
    resize, keep = plan if isinstance(plan, tuple) else (None, False)
    if notes:
        warn_once(
            f"{path}: transformers' {kind} {'; '.join(notes)}. "
            "keras-vit-predict, -evaluate, -analysis and -export "
            f"{_done(resize, keep, built)}.")
    return resize, keep


def _past_patches(plan, notes: List[str], model_hw, built):
    """The plan for `model_hw` images of which whole patches cover
    `built`: resized as for `model_hw`, the central `built` (said)."""
    if plan == "direct" and not notes and model_hw[0] == model_hw[1]:
        plan = (model_hw[0], False)
    notes.append(past_patches_note(
        model_hw, built, plan[0] if isinstance(plan, tuple) else None))
    return plan


def past_patches_note(made, built, resize: Optional[int]) -> str:
    """What a library does with `made` images of which whole patches
    cover `built`, and (after a `resize`) the window keras-vit reads."""
    drop = max(m - b for m, b in zip(made, built))
    return (f"makes {made[0]} x {made[1]} images, of which the patch "
            f"embedding reads the top-left {built[0]} x {built[1]} (whole "
            "patches; the model is built at that size)" + (
                f": keras-vit takes the central {built[0]} x {built[1]} "
                f"after the library's resize to {resize} (the same scale), "
                "a window shifted down and right by about half the "
                f"{drop} pixels dropped" if resize else ""))


def _done(resize: Optional[int], keep: bool, model_hw) -> str:
    """What the commands do to a photo, and the flags that change it."""
    rows, cols = model_hw
    if keep:
        return (f"resize a photo's shorter side to {resize} (area, the "
                f"aspect ratio kept) and take the central {rows} x {cols}; "
                "--resize_size=N sets another shorter side, "
                "--nokeep_aspect resizes both sides to N x N")
    did = (f"resize a photo to {resize} x {resize} (both sides, bilinear) "
           f"and take the central {rows} x {cols}" if resize else
           f"resize a photo to {rows} x {cols} (both sides, bilinear)")
    return f"{did}; --resize_size=N resizes to N x N before the central crop"


def _plan(proc, path, kind, model_hw):
    """((N, keep_aspect), or "direct", notes): the resize the processor
    implies in keras_vit's forms, and what it does beyond them."""
    known = PROCESSOR_GEOMETRY.get(kind)

    def get(field, default=None):
        if proc.get(field) is not None:
            return proc[field]
        return (known or {}).get(field, default)

    needed = ("do_resize", "size", "do_center_crop") + (
        ("crop_size",) if proc.get("do_center_crop") else ())
    if known is None and any(proc.get(f) is None for f in needed):
        return "direct", [
            "is a class whose resize defaults are not known here (known: "
            f"{', '.join(sorted(PROCESSOR_GEOMETRY))}) and the file leaves "
            f"{' or '.join(needed)} out"]
    notes: List[str] = []
    resample = get("resample", _BILINEAR)
    if get("do_resize", True) and resample != _BILINEAR:
        notes.append(f"resizes with {_RESAMPLE.get(resample, resample)} "
                     f"(resample {resample!r})")
    resized = _resized(proc, path, kind, get, notes)
    crop = None
    if get("do_center_crop", False):
        if get("crop_size") is None:
            notes.append("crops with no crop_size")
            return "direct", notes
        crop = size_dict(get("crop_size"), True, "crop_size", path)
        if set(crop) != {"height", "width"}:
            notes.append(f"crops by crop_size {crop}")
            return "direct", notes
        crop = (crop["height"], crop["width"])
    return _fit(resized, crop, tuple(model_hw), notes)


def _resized(proc, path, kind, get, notes):
    """What the resize step makes: ("none",) without one, ("warp", h, w),
    ("short", S, crop, note) (the short side to S, the aspect ratio kept;
    ConvNeXT's own central crop side or None; the note said where
    keras_vit cannot follow), or None for a resize keras_vit has no form
    for (said in `notes`)."""
    if not get("do_resize", True):
        return ("none",)
    size = size_dict(get("size"), bool(get("default_to_square", True)),
                     "size", path)
    aspect = f"keeps a photo's aspect ratio (size {size})"
    if kind == "ConvNextImageProcessor":
        # ConvNeXT's own resize: below 384, the short side to
        # int(S / crop_pct) and the central S x S; else both sides to S.
        short, pct = size.get("shortest_edge"), get("crop_pct", 224 / 256)
        if short is None or not isinstance(pct, (int, float)) or pct <= 0:
            notes.append(f"resizes by size {size} and crop_pct {pct!r}")
            return None
        if short >= 384:
            return ("warp", short, short)
        return ("short", int(short / pct), short, aspect)
    if set(size) == {"height", "width"}:
        return ("warp", size["height"], size["width"])
    if "shortest_edge" in size:
        if "longest_edge" in size:
            notes.append(f"resizes by size {size}, whose longest_edge "
                         "keras-vit does not apply")
        return ("short", size["shortest_edge"], None, aspect)
    notes.append(f"resizes by size {size}")
    return None


def _fit(resized, crop, model_hw, notes):
    """((N, keep_aspect) or "direct", notes) for a resize step and an
    optional central crop (h, w), against the model's input."""
    if resized is None:
        return "direct", notes
    if resized[0] == "none":
        if crop is not None:
            notes.append(f"crops a photo's central {crop[0]} x {crop[1]} "
                         "without resizing it (do_resize false)")
        return "direct", notes
    short = resized[0] == "short"
    if short and resized[2] is not None:  # ConvNeXT's own crop
        crop = crop or (resized[2], resized[2])
    plan = _cropped(resized, crop, model_hw, notes)
    if plan == "direct" and short:
        notes.append(resized[3])
    return plan, notes


def _cropped(resized, crop, model_hw, notes):
    """(N, keep_aspect) or "direct" for a resize step ("warp" or "short")
    and an optional central crop, with what differs added to `notes`."""
    short = resized[0] == "short"
    made = (resized[1],) * 2 if short else resized[1:3]
    out = crop or made
    if tuple(out) != model_hw:
        what = (f"images whose shorter side is {made[0]}" if short and not
                crop else f"{out[0]} x {out[1]} images")
        notes.append(
            f"makes {what}, where the model takes {model_hw[0]} x "
            f"{model_hw[1]} (config.json image_size): transformers cannot "
            "run the two together")
        return "direct"
    if crop is None or (not short and tuple(made) == tuple(crop)):
        return "direct"
    if made[0] != made[1]:
        notes.append(f"resizes to {made[0]} x {made[1]} before its central"
                     " crop, which keras-vit cannot (it resizes to N x N or "
                     "the shorter side to N)")
        return "direct"
    if made[0] < max(crop):
        what = (f"a photo's shorter side to {made[0]}" if short else
                f"to {made[0]} x {made[1]}")
        notes.append(f"resizes {what}, smaller than its {crop[0]} x "
                     f"{crop[1]} crop, and pads it")
        return "direct"
    return int(made[0]), short
