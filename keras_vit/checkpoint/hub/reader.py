"""ViT weights in the Hugging Face layout, from `transformers` or `timm`.

A local directory (or a weights file inside one) as the hubs store a model:
`config.json` beside `model.safetensors` (or a sharded
`model.safetensors.index.json`, or `pytorch_model.bin`). Two namings are
read, both into the official `.npz` layout that `weights.load_arrays`
loads (the key mapping: `hub_mapping`):

- Hugging Face `ViTForImageClassification` / `ViTModel`
  (`vit.encoder.layer.0.attention.attention.query.weight`, ...;
  `google/vit-*`), and the naming transformers 5 uses in memory, which a
  `torch.save(model.state_dict())` writes (`vit.layers.0.attention.q_proj`).
  The `pooler` of a `ViTModel` becomes the pre-logits layer (Dense on the
  class token with the config's `pooler_act`, the same computation).
- timm `vision_transformer` (`blocks.0.attn.qkv.weight`, ...): plain ViT,
  AugReg, the GAP models, DeiT without the distillation token, DINO
  backbones.

The architecture comes from the arrays' shapes plus `config.json` (heads,
image size, GELU form, LayerNorm epsilon, pooling, the pooler's activation,
class names), each field checked by `hub_config` / `hub_timm` and read the
way the library reads it: transformers' `architectures` picks the arrays
its class uses (a classifier's file may also hold a pooler, a ViTModel's a
classifier; each class leaves the other part out; none named, a file
with a classifier is the ViTForImageClassification that
AutoModelForImageClassification builds), timm's image size
comes from model_args before pretrained_cfg, and an image size the patch
does not divide loses its remainder as the libraries' convolutions drop
it. Anything
the project's ViT does not compute (a distillation token, register tokens,
layer scale, a norm before the first block, average pooling followed by
fc_norm, ...) stops the load with its config field or first such key
named. The pixel normalisation the weights were trained
with (a transformers processor's rescale and `image_mean` / `image_std`,
timm's `mean` / `std` with timm's ImageNet defaults) is folded into the
patch embedding, so the model keeps the project's input convention,
pixels in [-1, 1]: the patch embedding is linear with VALID padding, so
the fold is exact. The resize and crop the library evaluates with
(timm's crop_pct and crop_mode, a transformers processor's size and
crop_size: `hub_processor`) become `eval_resize` and `eval_keep_aspect`.

The weights files are read by `hub_tensors`: safetensors with the
`safetensors` package's numpy API, `pytorch_model.bin` with `torch_pickle`
(PyTorch's own reader where it is installed, a bounds-checked reader
otherwise). Every file read resolves inside the model's folder
(`untrusted.in_folder`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from keras_vit.checkpoint.formats import untrusted
from keras_vit.checkpoint.formats.npz_layout import describe_arrays
from keras_vit.checkpoint.hub import config as hub_config
from keras_vit.checkpoint.hub import (
    config_types as hub_types,
)
from keras_vit.checkpoint.hub import mapping as hub_mapping
from keras_vit.checkpoint.hub import processor as hub_processor
from keras_vit.checkpoint.hub import timm as hub_timm
from keras_vit.checkpoint.hub import timm_filter
from keras_vit.checkpoint.hub.tensors import (
    Unwrapped,
    read_tensors,
)
from keras_vit.checkpoint.hub.tensors import (
    shape as _shape,
)
from keras_vit.errors import UsageError
from keras_vit.grid import MAX_TOKENS

CONFIG_FILE = "config.json"
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
)
HUGGINGFACE = "huggingface"
TIMM = "timm"

@dataclasses.dataclass
class HubCheckpoint:
    """A hub model read into the official layout.

    Attributes:
        path: str. The weights file read.
        naming: str. HUGGINGFACE or TIMM.
        arrays: dict of str to np.ndarray. Official-layout arrays.
        num_heads: int. Attention heads.
        image_size: (height, width). The resolution the library builds
            the model at (config.json; timm's precedence for timm), less
            the remainder its patch convolution drops (VALID padding:
            transformers and timm read only whole patches).
        posemb_grid: (rows, cols). The patch grid of the stored position
            table; another grid than image_size's is resized the way the
            library does (`posemb.resize_like_library`).
        approximate_gelu: bool. Whether the MLP used tanh-approximate GELU.
        layer_norm_epsilon: float.
        class_names: list of str or None. From id2label / label_names.
        mean, std: tuple of 3 floats. The pixel normalisation of the
            weights, in terms of pixels / 255 (a transformers processor's
            rescale folded in), folded into the patch embedding.
        pre_logits_activation: str. The Keras activation of the pre-logits
            layer (a ViTModel's pooler_act), when there is one.
        eval_resize: int or None. The library's evaluation resize (to
            N x N, or the shorter side to N with eval_keep_aspect, then
            the central crop of the input): timm's floor(side /
            pretrained_cfg crop_pct) for a square model (timm's default
            crop_pct 0.875 where the config gives none); for
            transformers, what preprocessor_config.json's resize and crop
            make (`hub.processor.library_resize`: DeiT's 256 before its
            224 crop). None where the library resizes to the input
            directly (ViTImageProcessor, timm's 'squash' at a crop_pct
            of 1).
        eval_keep_aspect: bool. The library resizes the shorter side to
            eval_resize, keeping the aspect ratio (timm's crop_mode
            'center'; a processor's shortest_edge, ConvNeXT's below 384).
        eval_crop_pct: float or None. timm's crop_pct, from which it
            makes the resize at any input size (floor(side / crop_pct)).
        dropped: list of (key, shape, reason). Arrays of the file left out
            where config.json names no transformers class (the pooler
            beside a classifier), for the load report.
        scores: str or None. "sigmoid" for transformers'
            multi_label_classification, else None (the class count decides).
    """

    path: str
    naming: str
    arrays: Dict[str, np.ndarray]
    num_heads: int
    image_size: Tuple[int, int]
    posemb_grid: Tuple[int, int]
    approximate_gelu: bool
    layer_norm_epsilon: float
    class_names: Optional[List[str]]
    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    pre_logits_activation: str = "tanh"
    eval_resize: Optional[int] = None
    eval_keep_aspect: bool = False
    eval_crop_pct: Optional[float] = None
    dropped: List[Tuple[str, Tuple[int, ...], str]] = dataclasses.field(
        default_factory=list)
    scores: Optional[str] = None


def _files(path: str) -> Tuple[str, str]:
    """(config.json, weights file) for a directory or a weights file."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} does not exist.")
    if os.path.isdir(path):
        found = [f for f in WEIGHT_FILES
                 if os.path.exists(os.path.join(path, f))]
        if not found:
            raise FileNotFoundError(
                f"{path} holds none of {', '.join(WEIGHT_FILES)}: not a "
                "model directory in the Hugging Face layout."
            )
        folder, name = path, found[0]
    else:
        folder, name = os.path.dirname(path) or ".", os.path.basename(path)
    config = os.path.join(folder, CONFIG_FILE)
    if not os.path.exists(config):
        raise FileNotFoundError(
            f"{config} is missing: the Hugging Face layout keeps the "
            "architecture in config.json beside the weights."
        )
    # Every file read resolves inside the folder (the Hugging Face cache's
    # snapshot -> blobs/ links of the same repository excepted).
    weights = untrusted.in_folder(folder, name, os.path.join(folder, name))
    return untrusted.in_folder(folder, CONFIG_FILE, config), weights


def fold_normalisation(arrays, mean, std) -> None:
    """Makes the patch embedding take [-1, 1] pixels instead of
    (pixels / 255 - mean) / std: with x = p / 255 and y = 2x - 1 (the
    project's input), (x - mean) / std = y * a + c, a = 1 / (2 std),
    c = (0.5 - mean) / std, per channel."""
    mean, std = np.asarray(mean, np.float64), np.asarray(std, np.float64)
    if np.allclose(mean, 0.5) and np.allclose(std, 0.5):
        return  # a = 1, c = 0
    kernel = arrays["embedding/kernel"].astype(np.float64)  # (p, p, 3, D)
    a, c = 1.0 / (2.0 * std), (0.5 - mean) / std
    arrays["embedding/bias"] = (
        arrays["embedding/bias"] + np.einsum("hwcd,c->d", kernel, c)
    ).astype(np.float32)
    arrays["embedding/kernel"] = (kernel * a[:, None]).astype(np.float32)


def _read_json(path: str) -> Dict[str, Any]:
    return untrusted.read_json_object(path)


def read_scores(path: str) -> Optional[str]:
    """`HubCheckpoint.scores` from config.json alone (no weights read)."""
    return hub_config.spec_scores(_read_json(_files(path)[0]))


def naming(tensors: Dict[str, np.ndarray]) -> str:
    """HUGGINGFACE or TIMM, from the keys."""
    keys = list(tensors)
    if any(k.endswith("embeddings.patch_embeddings.projection.weight")
           for k in keys):
        return HUGGINGFACE
    if "patch_embed.proj.weight" in tensors:
        return TIMM
    raise UsageError(
        "Neither Hugging Face ViT nor timm vision_transformer naming (no "
        "embeddings.patch_embeddings.projection.weight or "
        f"patch_embed.proj.weight); first key: {keys[0] if keys else None}."
    )


def _width(tensors) -> int:
    """The model width: the patch embedding's output channels."""
    for key in tensors:
        if key == "patch_embed.proj.weight" or key.endswith(
                "embeddings.patch_embeddings.projection.weight"):
            return int(_shape(tensors, key)[0])
    raise UsageError("No patch embedding kernel among the arrays.")


def read_hub(path: str) -> HubCheckpoint:
    """Reads a hub model directory (or weights file) into the official
    layout.

    Raises:
        FileNotFoundError: no weights or no config.json.
        UsageError: another architecture, a config field or a key this ViT
            cannot honour (named, with the folder).
    """
    try:
        return _read_hub(path)
    except UsageError as error:
        if path in str(error):
            raise
        raise UsageError(f"{path}: {error}") from None


def _read_hub(path: str) -> HubCheckpoint:
    config_path, weights_path = _files(path)
    spec = _read_json(config_path)
    tensors, kind = _read_weights(weights_path)
    hub_types.check_config_types(spec, config_path, timm=kind == TIMM)
    _check_patch_kernel(tensors, weights_path)
    if kind == HUGGINGFACE:
        settings, mapper = _map_huggingface(spec, tensors, config_path)
    else:
        settings, mapper = _map_timm(spec, tensors, config_path,
                                     weights_path)
    unused = mapper.unused()
    if unused:
        raise UsageError(
            f"{weights_path} has {len(unused)} array(s) this ViT has no "
            f"place for, first {unused[0]} {_shape(tensors, unused[0])}: a "
            f"{kind} model with parts the plain ViT does not compute "
            "(e.g. a distillation or register token, layer scale, fc_norm)."
        )
    _set_sizes(settings, spec, mapper, kind, weights_path)
    fold_normalisation(mapper.arrays, settings["mean"], settings["std"])
    return HubCheckpoint(
        path=weights_path, naming=kind, arrays=mapper.arrays,
        dropped=list(mapper.left_out), **settings,
    )


def _read_weights(weights_path: str):
    """(tensors, naming) of the weights file: timm's or transformers'."""
    unwrap = Unwrapped()
    tensors = read_tensors(weights_path, unwrap)
    kind = naming(tensors)
    if unwrap.changed and kind != TIMM:
        raise UsageError(
            f"{weights_path} holds its arrays under {unwrap.changed!r}, "
            "which timm's loader reads and transformers' does not (it "
            "would start every array at random); save the state dict "
            "itself."
        )
    return tensors, kind


def _check_patch_kernel(tensors, weights_path: str) -> None:
    """Refuses a patch kernel that is not a Conv2d's (out, 3, P, P) of
    square patches of RGB pixels; a timm kernel of another rank is left to
    its checkpoint filter (`timm_filter.timm_kernel`: a 2-D (out,
    3 * P * P) one is reshaped)."""
    key = "patch_embed.proj.weight"
    for name in tensors:
        if name.endswith("embeddings.patch_embeddings.projection.weight"):
            key = name
    if key not in tensors:
        return
    shape = _shape(tensors, key)
    hf = key != "patch_embed.proj.weight"
    if (shape[1:2] != (3,) if len(shape) == 4 else hf):
        raise UsageError(
            f"{weights_path}: {key} has shape {shape}, where a Conv2d "
            "patch kernel (out, 3, P, P) over RGB images is expected: "
            "only ViT weights of 3-channel images are read.")
    if len(shape) == 4:
        hub_config.check_square_patch(
            f"{weights_path}: the patch kernel's patch size", shape[2:])


def _map_huggingface(spec, tensors, config_path: str):
    """(settings, mapper) of a transformers model."""
    settings = hub_config.hf_settings(
        spec, os.path.dirname(config_path), _read_json)
    hub_types.check_heads(settings["num_heads"], _width(tensors),
                          config_path)
    mapper = hub_mapping.map_huggingface(
        tensors, settings["num_heads"], settings.pop("architecture"),
        settings.pop("qkv_bias"),
        hub_config.num_labels(spec.get("id2label"), spec.get("num_labels")))
    settings["pre_logits_activation"] = hub_config.pooler_activation(
        settings.pop("pooler_act"), "pre_logits/kernel" in mapper.arrays)
    if mapper.left_out:
        hub_processor.warn_once(
            f"{config_path} names no architectures and its weights hold a "
            "classifier: read as transformers' "
            "AutoModelForImageClassification builds it, a "
            "ViTForImageClassification, which classifies the class token "
            "and has no pooler (left out: "
            f"{', '.join(k for k, _, _ in mapper.left_out)}). Set "
            "architectures to [\"ViTModel\"] for the pooler's output.")
    return settings, mapper


def _map_timm(spec, tensors, config_path: str, weights_path: str):
    """(settings, mapper) of a timm model."""
    hub_timm.refuse_arrays(spec, tensors, weights_path)
    settings = hub_timm.settings(spec)
    fc_norm = settings.pop("fc_norm")
    if "fc_norm.weight" in tensors and not fc_norm:
        raise UsageError(
            f"{weights_path} has fc_norm.weight, but config.json gives "
            f"global_pool {settings['pooling']!r} without fc_norm=True: "
            "weights trained with average pooling (timm "
            "global_pool='avg') whose config does not say so. Add the "
            "model's global_pool and fc_norm to config.json's model_args."
        )
    hub_types.check_heads(settings["num_heads"], _width(tensors),
                          config_path)
    mapper = hub_mapping.map_timm(
        tensors, settings["num_heads"], fc_norm, settings.pop("qkv_bias"),
        timm_filter.timm_kernel(tensors, settings, weights_path))
    return settings, mapper




def _set_sizes(settings: dict, spec, mapper, kind: str,
               weights_path: str) -> None:
    """Sets the image size read (whole patches) and the position
    embedding's grid in `settings`, checked against config.json."""
    arrays = mapper.arrays
    info = describe_arrays({k: v.shape for k, v in arrays.items()})
    size = settings.pop("image_size")
    size = (size, size) if isinstance(size, int) else tuple(size)
    patch = info["patch_size"]
    if kind == TIMM:
        hub_timm.check_padding(settings.pop("dynamic_img_pad"), size, patch)
        settings.pop("patch_size")
    # The libraries' patch convolutions (stride P, VALID padding) drop the
    # rows and columns past the last whole patch; so does this ViT's, and
    # the model is built at the size of the pixels that are read.
    settings["image_size"] = tuple(int(s) // patch * patch for s in size)
    if min(settings["image_size"]) < 1:
        raise UsageError(
            f"config.json image size {list(size)} is smaller than one "
            f"{patch} x {patch} patch."
        )
    grid = tuple(s // patch for s in settings["image_size"])
    if grid[0] * grid[1] > MAX_TOKENS:
        raise UsageError(
            f"config.json image size {list(size)} at patch {patch} makes "
            f"{grid[0] * grid[1]:,} tokens, more than the {MAX_TOKENS:,} a "
            "hub model is built with here (its attention alone would take "
            f"{4 * (grid[0] * grid[1]) ** 2 / 2 ** 30:,.0f} GiB a head and "
            "image): the config.json is corrupt or edited; give its "
            "image size as the model was trained.")
    if kind == HUGGINGFACE:
        hub_config.check_hf_shapes(spec, info, mapper.architecture)
        hub_config.check_hf_grid(spec, arrays, grid, weights_path)
        settings["posemb_grid"] = grid
    else:
        hub_timm.check_shapes(spec, info)
        settings["posemb_grid"] = timm_filter.check_tokens(
            settings, arrays, weights_path)
        settings.pop("pooling")
        settings.pop("stored_size")
        settings["eval_crop_pct"] = settings.pop("crop_pct")
        settings["eval_resize"], settings["eval_keep_aspect"] = (
            hub_timm.eval_resize(
                settings["eval_crop_pct"], settings.pop("crop_mode"), size,
                os.path.join(os.path.dirname(weights_path), CONFIG_FILE),
                settings["image_size"]))
