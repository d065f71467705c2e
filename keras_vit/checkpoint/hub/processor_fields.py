"""Which fields of a transformers `preprocessor_config.json` are read.

`hub.processor` applies the fields the ViT family's image processors
share (resize, crop, rescale, normalise). Other processor classes have
fields of their own that change the pixels the model sees, and
`save_pretrained` writes every one of them, set or not: EfficientNet's
`rescale_offset` (x * factor - 1) and `include_top` (a second division by
the std), MobileViT's `do_flip_channel_order` (RGB to BGR), padding
(`do_pad`, which transformers 5 applies for every class), ImageGPT's
colour clusters. A field outside the shared set that is set is refused
by name, so a folder whose processor computes something else is not
loaded as if it were ViT's.
"""

from __future__ import annotations

import json
from typing import Any, Dict

from keras_vit.errors import UsageError, shorten

# The fields the ViT family's processors write (transformers 4 and 5,
# slow and fast classes), each applied by hub.processor or without an
# effect on the pixels (bookkeeping, layouts, the device).
SHARED = frozenset((
    "image_processor_type", "feature_extractor_type", "processor_class",
    "_processor_class", "do_resize", "size", "resample", "do_rescale",
    "rescale_factor", "do_normalize", "image_mean", "image_std",
    "do_center_crop", "crop_size", "crop_pct", "default_to_square",
    "do_convert_rgb", "data_format", "input_data_format", "return_tensors",
    "device", "disable_grouping",
    # Padding's size, read only where do_pad (refused below) is set;
    # BEiT's label remapping, of segmentation maps, not pixels.
    "pad_size", "do_reduce_labels", "reduce_labels",
))


def check_fields(proc: Dict[str, Any], kind: str, path: str) -> None:
    """Refuses a processor file (`path`, of class `kind`) that sets a
    field outside `SHARED`: one whose effect on the pixels is not
    applied here. A field left out, null or false is the class not doing
    it."""
    applied = [field for field, value in proc.items()
               if field not in SHARED and value not in (None, False, 0)]
    if applied:
        field = sorted(applied)[0]
        raise UsageError(
            f"{path} sets {field}={shorten(json.dumps(proc[field]))} "
            f"({kind}): a step of "
            "transformers' preprocessing that keras-vit does not apply, so "
            "the model would see other pixels than it was trained on; it "
            "reads the resize, crop, rescale and normalisation of the ViT "
            "processors only. Set the field to false if the model was "
            "trained without it, or use the library that wrote the folder."
        )
