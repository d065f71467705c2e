"""The named ViT variants of the paper (Table 1) and its successors: their
widths (`WIDTHS`), the names users give (`VARIANTS`: "B/16", "R50+B/16",
...), the hybrids' ResNet stages (`HYBRIDS`), and the two ways between a
name and sizes: `decode_variant` (a name's sizes) and `variant_of` (the
name of some sizes, the one place a variant is recognised)."""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any, Dict, Mapping, Optional, Tuple

from keras_vit.errors import UsageError


@dataclasses.dataclass(frozen=True)
class ViTSize:
    """The sizes that define a ViT encoder (paper Table 1)."""

    hidden_size: int
    num_layers: int
    mlp_dim: int
    num_heads: int


# Widths (paper Table 1; Ti and S from DeiT / AugReg, as in the official
# repository's configs).
WIDTHS = {
    "Ti": ViTSize(hidden_size=192, num_layers=12, mlp_dim=768, num_heads=3),
    "S": ViTSize(hidden_size=384, num_layers=12, mlp_dim=1536, num_heads=6),
    "B": ViTSize(hidden_size=768, num_layers=12, mlp_dim=3072, num_heads=12),
    "L": ViTSize(hidden_size=1024, num_layers=24, mlp_dim=4096, num_heads=16),
    "H": ViTSize(hidden_size=1280, num_layers=32, mlp_dim=5120, num_heads=16),
}

# The variants users can name. Hybrids ("R50+B/16") are a ResNet followed by
# a ViT on its feature map; their stem and patch size are in HYBRIDS.
VARIANTS = (
    "Ti/16", "S/16", "S/32", "B/16", "B/32", "B/8", "L/16", "L/32", "H/14",
    "R50+B/16", "R50+L/32", "R26+S/32", "R+Ti/16",
)

# Hybrids: ResNet (BiT) units per stage and the ViT patch size on its
# feature map. R50+B/16 is ResNet-50 with stage 4 removed and its layers
# moved into stage 3 (paper Section 4.1). AugReg's R+Ti/16 has no stages:
# the ResNet root (7x7 stride-2 StdConv, GroupNorm, ReLU, 3x3 stride-2
# max-pool) and 8x8 patches on its 64-channel map (google-research/
# vision_transformer vit_jax/configs/models.py, get_r_ti16_config:
# resnet.num_layers = (), patches 8): a total stride of 32, 7 x 7 tokens
# at 224; the "16" is AugReg's name, not the stride.
HYBRIDS = {
    "R50+B/16": ((3, 4, 9), 1),
    "R50+L/32": ((3, 4, 6, 3), 1),
    "R26+S/32": ((2, 2, 2, 2), 1),
    "R+Ti/16": ((), 8),
}
# Units per stage of each hybrid (HYBRIDS without the patch sizes).
HYBRID_RESNETS = {name: stages for name, (stages, _) in HYBRIDS.items()}

POSEMBS = ("learn", "sincos2d")

_VARIANT_RE = re.compile(r"^(?:(R\d*)\+)?(Ti|S|B|L|H)/(\d+)$")

# The sizes a variant gives and explicit arguments override.
SIZE_FIELDS = ("patch_size", "hidden_size", "num_layers", "num_heads",
               "mlp_dim")
# The fields that fix the shapes of a ViT's parameters: what a checkpoint's
# arrays say, and what a run that resumes, or fine-tunes, must keep.
SHAPE_FIELDS = SIZE_FIELDS + ("resnet_layers", "resnet_width", "pooling",
                              "posemb", "representation_size")


@dataclasses.dataclass(frozen=True)
class VariantSpec:
    """A decoded variant string."""

    size: ViTSize
    patch_size: int
    resnet_layers: Optional[Tuple[int, ...]] = None

    def sizes(self) -> Dict[str, Any]:
        """{field: value} of `SIZE_FIELDS` and resnet_layers."""
        return dict(dataclasses.asdict(self.size), patch_size=self.patch_size,
                    resnet_layers=self.resnet_layers)


# A released checkpoint's name of a size (ViT-B_16, R50+ViT-B_16).
_RELEASED_RE = re.compile(r"^(R\d*\+)?ViT-(Ti|S|B|L|H)_(\d+)$")


def released_variant(text: str) -> Optional[str]:
    """The variant a released checkpoint's name of a size names
    ("ViT-B_16" -> "B/16", "R50+ViT-B_16" -> "R50+B/16"), or None."""
    released = _RELEASED_RE.match(text)
    name = released and f"{released[1] or ''}{released[2]}/{released[3]}"
    return name if name in VARIANTS else None


def closest_variants(text: str) -> list:
    """The variants `text` may mean: the one it names in other case
    ("b/16") or as a released checkpoint names it ("ViT-B_16"), else up
    to 3 close spellings (difflib)."""
    text = released_variant(text) or text
    return [v for v in VARIANTS if v.lower() == text.lower()] or \
        difflib.get_close_matches(text, list(VARIANTS), n=3, cutoff=0.5)


def decode_variant(variant: str) -> VariantSpec:
    """Decodes "B/16", "L/32", "R50+B/16", ... into sizes.

    For hybrids the ViT patch size is on the ResNet feature map (1, or 8
    for R+Ti/16); the number after the slash is the variant's name.
    """
    if variant not in VARIANTS:
        close = closest_variants(str(variant))
        raise UsageError(
            f"Unknown variant {variant!r}."
            + (f" Did you mean {', '.join(close)}?" if close else "")
            + (f" ({variant} names a released model: a model source, "
               f"--model={variant} or keras_vit.load_model({variant!r}).)"
               if released_variant(str(variant)) else "")
            + " Known variants: "
            f"{', '.join(VARIANTS)}; or pass variant=None with explicit "
            "patch_size, hidden_size, num_layers, num_heads and mlp_dim."
        )
    match = _VARIANT_RE.match(variant)
    resnet_name, width, patch = match.groups()
    if resnet_name:
        stages, patch_size = HYBRIDS[variant]
        return VariantSpec(WIDTHS[width], patch_size, stages)
    return VariantSpec(WIDTHS[width], int(patch))


def variant_of(sizes: Mapping[str, Any]) -> Optional[str]:
    """str or None. The `VARIANTS` name whose sizes (`SIZE_FIELDS` and
    resnet_layers) `sizes` holds, or None: the one place a variant is
    recognised from sizes."""
    for name in VARIANTS:
        spec = decode_variant(name).sizes()
        if all(sizes.get(k) == v for k, v in spec.items()):
            return name
    return None
