"""What a hub model's `config.json` says, checked field by field.

Every field of transformers' `ViTConfig` (`HF_VIT_FIELDS`, here) and every
argument of timm's `VisionTransformer.__init__` (`hub_timm.TIMM_VIT_ARGS`)
is listed with how keras_vit honours it:

- READ: builds the model (heads, image size, epsilon, GELU form, ...).
- SHAPE: checked against the arrays' shapes; a disagreement is refused.
- CHECKED: honoured for the values this ViT computes; any other value is
  refused with the field named.
- NO_EFFECT: training, initialisation or run-time options that leave the
  outputs at the stored resolution unchanged (dropout rates, weight init,
  timm's dynamic_img_size, the device).

"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from absl import logging

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.hub.processor import (  # noqa: F401 (channels)
    PROCESSOR_FILE,
    channels,
    library_resize,
    processor_class,
    processor_normalisation,
    warn_once,
)
from keras_vit.checkpoint.hub.processor_fields import check_fields
from keras_vit.errors import UsageError, shorten

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
    # An activation Keras computes exactly, where the pooler is read (a
    # ViTForImageClassification builds none: any string).
    "pooler_act": CHECKED,
    "num_channels": CHECKED,  # 3
    "hidden_dropout_prob": NO_EFFECT,
    "attention_probs_dropout_prob": NO_EFFECT,
    "initializer_range": NO_EFFECT,
    # The stride of ViTForMaskedImageModeling's decoder, whose arrays are
    # refused as arrays this ViT has no place for.
    "encoder_stride": NO_EFFECT,
}

# ViTConfig's defaults: what transformers builds for a field config.json
# leaves out (pooler_output_size: hidden_size).
HF_VIT_DEFAULTS = {
    "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
    "intermediate_size": 3072, "hidden_act": "gelu", "layer_norm_eps": 1e-12,
    "image_size": 224, "patch_size": 16, "num_channels": 3, "qkv_bias": True,
    "pooler_act": "tanh",
}
# transformers' `hidden_act` -> whether the MLP's GELU is the tanh form
# (gelu_accurate, AccurateGELUActivation: 0.5 x (1 + tanh(sqrt(2 / pi)
# (x + 0.044715 x^3))), gelu_new's formula).
HF_GELU = {"gelu": False, "gelu_python": False, "gelu_new": True,
           "gelu_pytorch_tanh": True, "gelu_python_tanh": True,
           "gelu_fast": True, "gelu_accurate": True}
# transformers' `pooler_act` -> the Keras activation computing the same
# function (tests/fixtures/hub/activations.npz holds transformers' values).
HF_POOLER_ACTIVATIONS = {
    "tanh": "tanh", "relu": "relu", "relu6": "relu6", "sigmoid": "sigmoid",
    "silu": "silu", "swish": "silu", "gelu": "gelu", "gelu_python": "gelu",
    "linear": "linear", "mish": "mish", "hardswish": "hard_silu",
}

# The transformers classes whose arrays this ViT reads, and the parts of a
# folder's arrays each one uses: ViTForImageClassification builds its ViT
# without the pooler (add_pooling_layer=False) and classifies the class
# token; ViTModel has the pooler and no classifier. transformers ignores
# the other part's arrays when a folder holds both, and so does keras_vit.
HF_ARCHITECTURES = {
    "ViTForImageClassification": "pooler.",
    "ViTModel": "classifier.",
}


def refuse(field: str, value, why: str) -> UsageError:
    return UsageError(f"config.json {field}={value!r}: {why}; this ViT "
                      "does not compute that, so the model is refused.")


# transformers' PretrainedConfig refuses any other problem_type.
HF_PROBLEMS = ("regression", "single_label_classification",
               "multi_label_classification")


def _check_problem(spec: Dict[str, Any], folder: str) -> None:
    """Refuses a problem_type transformers refuses; names in the log a
    single logit that transformers reads as a value (regression), which
    these commands score with a sigmoid."""
    problem = spec.get("problem_type")
    if problem is not None and problem not in HF_PROBLEMS:
        raise UsageError(
            f"config.json problem_type={shorten(repr(problem))}: "
            "transformers builds no model from it (it takes "
            f"{', '.join(HF_PROBLEMS)}, or null). Fix or remove the field.")
    single = num_labels(spec.get("id2label"), spec.get("num_labels")) == 1
    if single and problem == "regression":
        logging.warning(
            "%s: config.json gives one label and problem_type regression: "
            "transformers reads its one logit as a value; keras-vit-predict "
            "and exports give its sigmoid. Fine-tune from it "
            "(config.init.model) for classes of your own.", folder)


def spec_scores(spec: Dict[str, Any]) -> Optional[str]:
    """"sigmoid" for a head transformers scores a class at a time
    (problem_type multi_label_classification), else None."""
    if spec.get("problem_type") == "multi_label_classification":
        return "sigmoid"
    return None


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
    nulls = sorted(k for k in HF_VIT_DEFAULTS
                   if k in spec and spec[k] is None and k != "qkv_bias")
    if nulls:
        # transformers passes a null on to the model it builds, which
        # fails (qkv_bias null: no bias, as read below).
        raise UsageError(
            f"config.json sets {', '.join(nulls)} to null, from which "
            "transformers builds no model: give the value (transformers' "
            "default: " + ", ".join(f"{k} {HF_VIT_DEFAULTS[k]!r}"
                                    for k in nulls)
            + ") or leave the field out.")
    _check_problem(spec, folder)
    act = spec.get("hidden_act", "gelu")
    if act not in HF_GELU:
        raise refuse("hidden_act", act, "an MLP activation that is not "
                      f"one of the GELU forms {sorted(HF_GELU)}")
    if spec.get("num_channels", 3) != 3:
        raise refuse("num_channels", spec["num_channels"],
                      "images that are not RGB")
    check_square_patch("config.json patch_size", spec.get("patch_size"))
    processor = os.path.join(folder, PROCESSOR_FILE)
    proc = None
    if os.path.exists(processor):
        proc = read_json(untrusted.in_folder(folder, PROCESSOR_FILE,
                                             processor))
    mean, std = processor_normalisation(proc or {}, processor)
    if proc is None:
        warn_once(
            f"{folder} has no {PROCESSOR_FILE}, with which transformers "
            "prepares the pixels: they are normalised as "
            "ViTImageProcessor's defaults do, to [-1, 1] (mean 0.5, std "
            "0.5). If the model was trained with "
            "other values, save its image processor into the folder "
            "(processor.save_pretrained(folder)).")
    else:
        check_fields(proc, processor_class(proc, processor), processor)
    size = spec.get("image_size", 224)
    size = (size, size) if isinstance(size, int) else tuple(size)
    # The resize before the central crop its processor implies (of the
    # shorter side, the aspect ratio kept, with keep_aspect), for the model
    # built at whole patches.
    resize, keep_aspect = library_resize(
        proc, processor, size, _whole_patches(size, spec.get("patch_size")))
    return dict(
        num_heads=int(spec.get("num_attention_heads",
                               HF_VIT_DEFAULTS["num_attention_heads"])),
        image_size=spec.get("image_size", 224),
        approximate_gelu=HF_GELU[act],
        layer_norm_epsilon=float(spec.get("layer_norm_eps", 1e-12)),
        class_names=class_names(spec.get("id2label"), hf=True),
        mean=mean,
        std=std,
        # Checked where the pooler is read (`pooler_activation`).
        pooler_act=spec.get("pooler_act", "tanh"),
        architecture=hf_architecture(spec),
        eval_resize=resize,
        eval_keep_aspect=keep_aspect,
        # False: transformers builds no query/key/value bias and ignores
        # such arrays of the file.
        qkv_bias=bool(spec.get("qkv_bias", True)),
        scores=spec_scores(spec),
    )


def _whole_patches(size, patch):
    """The image size the patch convolution reads (whole patches), for a
    config.json patch_size that is a square patch; else `size` (the
    arrays' patch is checked against it later)."""
    patch = patch_size(16 if patch is None else patch)
    if not isinstance(patch, int) or isinstance(patch, bool) or patch < 1:
        return size
    return tuple(int(s) // patch * patch for s in size)


def pooler_activation(pooler, read: bool) -> str:
    """The Keras activation of config.json's pooler_act where the pooler is
    `read` (a ViTModel's); a ViTForImageClassification builds no pooler,
    so transformers uses no pooler_act there (tanh, unused, is returned)."""
    if read and pooler not in HF_POOLER_ACTIVATIONS:
        raise refuse("pooler_act", pooler, "a pooler activation with no "
                     "exact Keras equivalent (read: "
                     f"{', '.join(sorted(HF_POOLER_ACTIVATIONS))})")
    return HF_POOLER_ACTIVATIONS[pooler] if read else "tanh"


def hf_architecture(spec: Dict[str, Any]) -> Optional[str]:
    """The transformers class a config's `architectures` names (one of
    HF_ARCHITECTURES), or None when it names none (then the arrays tell)."""
    names = spec.get("architectures") or []
    if not isinstance(names, list) or not all(
            isinstance(n, str) for n in names):
        raise UsageError(
            f"config.json architectures={shorten(names)}: a list of class "
            "names"
            " is expected (e.g. [\"ViTForImageClassification\"])."
        )
    if not names:
        return None
    unknown = [n for n in names if n not in HF_ARCHITECTURES]
    if unknown or len(set(names)) > 1:
        raise refuse("architectures", names, "a transformers class other "
                      f"than one of {', '.join(HF_ARCHITECTURES)}")
    return names[0]


def check_square_patch(field: str, value) -> None:
    """Refuses a non-square patch size, naming it: this ViT's patch
    embedding (and the official layout) cuts P x P patches."""
    if isinstance(value, (list, tuple)) and len(set(value)) > 1:
        raise UsageError(
            f"{field}={list(value)!r}: non-square patches "
            f"({value[0]} x {value[1]} pixels). This ViT's patch embedding "
            "cuts square P x P patches, so the model is refused."
        )


def disagree(field: str, given, found) -> UsageError:
    return UsageError(
        f"config.json {field}={given!r} disagrees with the weights "
        f"({found}): the folder mixes two models."
    )


def patch_size(value):
    if isinstance(value, (list, tuple)) and len(set(value)) == 1:
        return value[0]
    return value


def check_hf_shapes(spec: Dict[str, Any], info: Dict[str, Any],
                    architecture: Optional[str] = None) -> None:
    """Refuses a transformers config whose SHAPE fields, or their
    ViTConfig defaults where it leaves them out, disagree with the arrays
    (`info`: `npz_layout.describe_arrays` of the mapped arrays), and a
    classifier of another width than its labels (id2label, else
    num_labels, else 2, transformers' default, for a
    ViTForImageClassification: `architecture`, the class read, named by
    config.json or the one AutoModelForImageClassification builds; None:
    config.json's)."""
    defaults = dict(HF_VIT_DEFAULTS, pooler_output_size=spec.get(
        "hidden_size", HF_VIT_DEFAULTS["hidden_size"]))
    found = {
        "hidden_size": info["hidden_size"],
        "num_hidden_layers": info["num_layers"],
        "intermediate_size": info["mlp_dim"],
        "patch_size": info["patch_size"],
        "pooler_output_size": info["representation_size"],
    }
    labels, count = spec.get("id2label"), spec.get("num_labels")
    architecture = architecture or hf_architecture(spec)
    if (labels is not None or count is not None
            or architecture == "ViTForImageClassification"):
        defaults["num_labels"] = num_labels(labels, count)
        found["num_labels"] = info["num_classes"]
    for field, value in found.items():
        given = defaults[field] if field == "num_labels" else (
            spec.get(field) or defaults[field])
        if field == "patch_size":
            given = patch_size(given)
        if value is not None and given != value:
            if not spec.get(field) and field != "num_labels":
                field += " (left out: transformers' ViTConfig default)"
            elif field == "num_labels" and (labels or count is None):
                field += " (from id2label)" if labels else (
                    " (no id2label: transformers' default)")
            raise disagree(field, given, value)


def num_labels(labels, count) -> int:
    """The classifier width transformers' PretrainedConfig builds:
    id2label's length, else num_labels (LABEL_0 .. LABEL_{n-1}), else 2.
    num_labels beside an id2label of another length (transformers warns;
    version 5 keeps num_labels, earlier ones id2label) is refused: the
    folder says two things."""
    if labels is None:  # left out (or null): num_labels, else 2
        return 2 if count is None else count
    try:  # as transformers keys them: "0" and "00" are one class
        width = len({int(k) for k in labels})
    except (TypeError, ValueError):
        width = len(labels)  # `class_names` names the ids that are not
    if count is not None and count != width:
        raise UsageError(
            f"config.json num_labels={count!r} disagrees with its id2label "
            f"({width} names): transformers warns, and its versions keep "
            "one or the other. Remove num_labels or make the two agree."
        )
    return width  # {}: 0, the identity head save_pretrained records


def check_hf_grid(spec, arrays, grid, weights_path: str) -> None:
    """The position table holds the class token and the patch grid that
    transformers builds from config.json's image_size (it refuses a table
    of another size)."""
    rows = arrays["Transformer/posembed_input/pos_embedding"].shape[1]
    want = int("cls" in arrays) + grid[0] * grid[1]
    if rows != want:
        raise UsageError(
            f"{weights_path}: position_embeddings has {rows} rows, where "
            f"config.json image_size={spec.get('image_size', 224)!r} gives "
            f"a {grid[0]} x {grid[1]} patch grid and a class token "
            f"({want}): transformers refuses this folder (size mismatch); "
            "fix image_size."
        )


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
    missing = sorted(set(range(max(names) + 1)) - set(names))
    if hf and missing:
        # transformers' num_labels is the count of id2label, whose ids must
        # then be 0 .. count - 1: a gap names no class of the head.
        raise UsageError(
            f"config.json id2label has ids up to {max(names)} but lacks "
            f"{shorten(repr(missing), 60)}: its {len(names)} ids must be "
            f"0 to {len(names) - 1}, the head's classes. Fix the ids.")
    return [names.get(i, str(i)) for i in range(max(names) + 1)]
