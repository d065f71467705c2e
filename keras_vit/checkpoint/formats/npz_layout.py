"""What official .npz arrays' keys and shapes say (NumPy only):
conversion of training (`opt/target/`) and big_vision layouts to the
official one (`normalize_layout`), the architecture a file's shapes imply
(`describe_arrays`, and `architecture_hint` for "wrong variant" errors).
"""

from __future__ import annotations

import collections
import re
from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from keras_vit import architecture
from keras_vit.checkpoint.formats.lazy import LazyArrays, renamed, shape_of
from keras_vit.checkpoint.formats.npz import POSEMB, Arrays, Shape
from keras_vit.errors import UsageError

_BV_RENAMES = (
    ("MultiHeadDotProductAttention_0/", "MultiHeadDotProductAttention_1/"),
    ("LayerNorm_1/", "LayerNorm_2/"),
    ("MlpBlock_0/", "MlpBlock_3/"),
)


def normalize_layout(
    arrays: Arrays, source: str = "<arrays>"
) -> Tuple[Arrays, str, list]:
    """Converts training and big_vision layouts to the official one.

    Returns:
        (arrays, layout name, ignored) where ignored lists
        (key, shape, reason) of arrays left out (optimizer state).
    """
    if any(k.startswith("opt/target/") for k in arrays):
        return _from_training(arrays, source)
    if not _is_big_vision(arrays):
        # Read lazily (`read_npz`), an array is inflated when looked up.
        official = arrays if isinstance(arrays, LazyArrays) else dict(arrays)
        return official, "official", []
    return _from_big_vision(arrays, source), "big_vision", []


def _from_training(arrays: Arrays, source: str
                   ) -> Tuple[Arrays, str, list]:
    """A training checkpoint's `opt/target/` arrays, the optimizer state
    ignored (never inflated when `arrays` is read lazily)."""
    ignored = []
    names = {}
    for key in arrays:
        if key.startswith("opt/target/"):
            names[key[len("opt/target/"):]] = key
        else:
            ignored.append((key, shape_of(arrays, key), "optimizer state"))
    twice = sorted(set(names) & {k for k, _, _ in ignored})
    if twice:
        raise UsageError(
            f"{source} holds {len(twice)} of the model's arrays twice, under "
            f"opt/target/ and by their own names (first {twice[0]}): it is "
            "no one checkpoint. Keep one of the two (the parameters alone, "
            "or a training checkpoint).")
    return renamed(arrays, names), "official, opt/target/ prefix", ignored


# big_vision's position table before 2022 (in the encoder).
_OLD_POSEMB = "Transformer/pos_embedding"


def _is_big_vision(arrays: Arrays) -> bool:
    keys = list(arrays)
    return (
        all(k.startswith("params/") for k in keys)
        or "pos_embedding" in arrays
        or _OLD_POSEMB in arrays
        or any(
            k.startswith("Transformer/encoderblock/")
            or "MultiHeadDotProductAttention_0/" in k
            for k in keys
        )
    )


def _from_big_vision(arrays: Arrays, source: str) -> Arrays:
    """A big_vision file's arrays in the official layout: prefixes
    stripped, scanned blocks unstacked, layers renamed, the position
    embedding given the class token's slot."""
    out = {}
    for key, value in arrays.items():
        if key.startswith("params/"):
            key = key[len("params/"):]
        out[key] = value
    if all(k.startswith("img/") for k in out):
        out = {k[len("img/"):]: v for k, v in out.items()}
    if any(k.startswith("MAPHead_0/") for k in out):
        raise UsageError(
            f"{source}: a big_vision checkpoint with a MAP head "
            "(pool_type='map'), which keras_vit does not implement; use a "
            "checkpoint trained with 'tok' or 'gap' pooling."
        )
    renamed = _renamed_blocks(_unstacked(out))
    if _OLD_POSEMB in renamed and "pos_embedding" not in renamed:
        # Before 2022 big_vision kept the table in the encoder; its own
        # fix_old_checkpoints moves it out, as here.
        renamed["pos_embedding"] = renamed.pop(_OLD_POSEMB)
    if "pos_embedding" in renamed:
        posemb = renamed.pop("pos_embedding")
        # big_vision adds the position embedding before prepending the class
        # token, so the token gets none (its table never holds a row for
        # it, whatever the grid's shape): a zero slot is equivalent.
        if "cls" in renamed and posemb.ndim == 3:  # else refused as read
            zero = np.zeros_like(posemb[:, :1])
            posemb = np.concatenate([zero, posemb], axis=1)
        renamed[POSEMB] = posemb
    return renamed


# The most encoder blocks a stacked (scanned) checkpoint may hold: more
# is a corrupt or crafted file (the largest ViTs have 48).
MAX_BLOCKS = 1 << 10


def _unstacked(arrays: Arrays) -> Arrays:
    """Scanned blocks (stacked under `Transformer/encoderblock/`) as one
    `encoderblock_{i}` each."""
    converted: Arrays = {}
    for key, value in arrays.items():
        if key.startswith("Transformer/encoderblock/"):  # scan: stacked
            rest = key[len("Transformer/encoderblock/"):]
            if not value.shape or value.shape[0] > MAX_BLOCKS:
                raise UsageError(
                    f"{key} declares a stack of "
                    f"{value.shape[0] if value.shape else 0} blocks, where a "
                    f"model has 1 to {MAX_BLOCKS}: refused before the model "
                    "is built. The file is corrupt or crafted; download or "
                    "save it again.")
            for i in range(value.shape[0]):
                converted[f"Transformer/encoderblock_{i}/{rest}"] = value[i]
        else:
            converted[key] = value
    return converted


def _renamed_blocks(arrays: Arrays) -> Arrays:
    """The blocks' layers under their official names."""
    renamed: Arrays = {}
    for key, value in arrays.items():
        if key.startswith("Transformer/encoderblock_"):
            for old, new in _BV_RENAMES:
                key = key.replace(old, new)
        renamed[key] = value
    return renamed


def resnet_stages(keys) -> Tuple[int, ...]:
    """Units per ResNet stage, from `block{s}/unit{u}/` key names."""
    counts: Dict[int, int] = {}
    for key in keys:
        match = re.match(r"block(\d+)/unit(\d+)/", key)
        if match:
            stage, unit = int(match.group(1)), int(match.group(2))
            counts[stage] = max(counts.get(stage, 0), unit)
    return tuple(counts[s] for s in sorted(counts))


def describe_arrays(shapes: Dict[str, Shape]) -> Dict[str, object]:
    """The architecture implied by official keys and shapes.

    Args:
        shapes: dict of str to shape. Official key -> array shape.

    Returns:
        dict with hidden_size, patch_size, num_layers, num_heads, mlp_dim,
        resnet_layers (and, for a hybrid, resnet_width), pooling, posemb,
        representation_size, num_classes and variant (a name from
        `keras_vit.VARIANTS`, or None).
    """
    def dim(key, axis):
        try:
            return int(shapes[key][axis])
        except (KeyError, IndexError):
            return None

    blocks = {
        k.split("/")[1]
        for k in shapes
        if k.startswith("Transformer/encoderblock_")
    }
    stages = resnet_stages(shapes)

    def blocks_say(key, axis):
        """The size most blocks' `key` arrays give (one damaged array is
        then the one named as not fitting, not every other block's)."""
        found = [dim(f"Transformer/{b}/{key}", axis)
                 for b in sorted(blocks, key=lambda b: (len(b), b))]
        found = collections.Counter(f for f in found if f is not None)
        return found.most_common(1)[0][0] if found else None

    info = dict(
        hidden_size=dim("embedding/kernel", -1),
        patch_size=dim("embedding/kernel", 0),
        num_layers=len(blocks),
        num_heads=blocks_say("MultiHeadDotProductAttention_1/query/kernel", 1),
        mlp_dim=blocks_say("MlpBlock_3/Dense_0/kernel", 1),
        # A root block without stages is AugReg's R+Ti/16 stem.
        resnet_layers=stages or (() if "conv_root/kernel" in shapes else None),
        pooling="token" if "cls" in shapes else "gap",
        # No table: fixed sin-cos embeddings (big_vision's posemb).
        posemb="learn" if POSEMB in shapes else "sincos2d",
        representation_size=dim("pre_logits/kernel", 1),
        num_classes=dim("head/kernel", 1),
    )
    if "conv_root/kernel" in shapes:  # a hybrid's ResNet width factor
        info["resnet_width"] = int(shapes["conv_root/kernel"][-1]) // 64
    info["variant"] = architecture.variant_of(info)
    return info


# What a hint about another architecture compares: the fields the arrays'
# names and shapes determine (a pre-logits layer is dropped or kept by
# the loader's `keep_pre_logits`).
_HINT_FIELDS = tuple(f for f in architecture.SHAPE_FIELDS
                     if f != "representation_size")


def architecture_hint(file_shapes, model_shapes) -> Optional[str]:
    found, wanted = describe_arrays(file_shapes), describe_arrays(model_shapes)
    if all(found.get(f) == wanted.get(f) for f in _HINT_FIELDS):
        return None

    def fmt(info):
        text = ", ".join(f"{f}={info.get(f)}" for f in _HINT_FIELDS
                         if f != "resnet_width" or info.get(f) is not None)
        if info["variant"]:
            text += f" (variant {info['variant']})"
        return text

    fix = (
        f"keras_vit.create_model({found['variant']!r}, "
        f"pooling={found['pooling']!r}, posemb={found['posemb']!r}, ...)"
        if found["variant"]
        else "keras_vit.create_model(None, ...) with the sizes above"
    )
    return (
        "The checkpoint is from another architecture.\n"
        f"  checkpoint: {fmt(found)}\n  model:      {fmt(wanted)}\n"
        f"Build the model with {fix}."
    )


def own_pre_logits(info: Mapping, num_classes: Optional[int]
                   ) -> Optional[int]:
    """The pre-logits width of a model built from a file described by
    `info` (`describe_arrays`) with a head `num_classes` wide (None: the
    file's): the file's where its head is kept, the model has none (0) or
    the file has none (a backbone kept with them), none where a new head
    replaces the file's, as for transfer in the paper (the whole head,
    pre-logits included, becomes one layer)."""
    new_head = bool(info["num_classes"]) and num_classes not in (
        None, 0, info["num_classes"])
    return None if new_head else info["representation_size"]
