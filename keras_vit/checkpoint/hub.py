"""ViT weights in the Hugging Face layout, from `transformers` or `timm`.

A local directory (or a weights file inside one) as the hubs store a model:
`config.json` beside `model.safetensors` (or a sharded
`model.safetensors.index.json`, or `pytorch_model.bin`). Two namings are
read, both into the official `.npz` layout that `weights.load_arrays`
loads:

- Hugging Face `ViTForImageClassification` / `ViTModel`
  (`vit.encoder.layer.0.attention.attention.query.weight`, ...;
  `google/vit-*`). The `pooler` of a `ViTModel` becomes the pre-logits
  layer (Dense + tanh on the class token, the same computation).
- timm `vision_transformer` (`blocks.0.attn.qkv.weight`, ...): plain ViT,
  AugReg, DeiT without the distillation token, DINO backbones.

The architecture comes from the arrays' shapes plus `config.json` (heads,
image size, GELU form, LayerNorm epsilon, class names). Anything the
project's ViT does not compute (a distillation token, register tokens,
layer scale, an fc_norm after average pooling, ...) stops the load with
the first such key named. The pixel normalisation the weights were trained
with (`image_mean` / `image_std`) is folded into the patch embedding, so
the model keeps the project's input convention, pixels in [-1, 1]: the
patch embedding is linear with VALID padding, so the fold is exact.

safetensors files are read with the `safetensors` package's numpy API;
`pytorch_model.bin` with `torch_pickle` (neither needs PyTorch).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import safetensors.numpy

from keras_vit.checkpoint import torch_pickle
from keras_vit.errors import UsageError

CONFIG_FILE = "config.json"
WEIGHT_FILES = (
    "model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
)
HUGGINGFACE = "huggingface"
TIMM = "timm"

_ATT = "MultiHeadDotProductAttention_1"
_MLP = "MlpBlock_3"
# Heads of timm's named sizes (its config.json records only the name).
_TIMM_HEADS = {"tiny": 3, "small": 6, "base": 12, "large": 16, "huge": 16,
               "giant": 16}
_TIMM_NAME = re.compile(
    r"^(?:vit|deit)_(tiny|small|base|large|huge|giant)_patch(\d+)_(\d+)"
)
# Hugging Face `hidden_act` -> approximate (tanh) GELU or not.
_HF_GELU = {"gelu": False, "gelu_new": True, "gelu_pytorch_tanh": True,
            "gelu_fast": True}


@dataclasses.dataclass
class HubCheckpoint:
    """A hub model read into the official layout.

    Attributes:
        path: str. The weights file read.
        naming: str. HUGGINGFACE or TIMM.
        arrays: dict of str to np.ndarray. Official-layout arrays.
        num_heads: int. Attention heads.
        image_size: (height, width). The resolution the weights were
            trained at (their position-embedding grid times the patch).
        approximate_gelu: bool. Whether the MLP used tanh-approximate GELU.
        layer_norm_epsilon: float.
        class_names: list of str or None. From id2label / label_names.
        mean, std: tuple of 3 floats. The pixel normalisation of the
            weights, folded into the patch embedding.
    """

    path: str
    naming: str
    arrays: Dict[str, np.ndarray]
    num_heads: int
    image_size: Tuple[int, int]
    approximate_gelu: bool
    layer_norm_epsilon: float
    class_names: Optional[List[str]]
    mean: Tuple[float, ...]
    std: Tuple[float, ...]


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
        folder, weights = path, os.path.join(path, found[0])
    else:
        folder, weights = os.path.dirname(path) or ".", path
    config = os.path.join(folder, CONFIG_FILE)
    if not os.path.exists(config):
        raise FileNotFoundError(
            f"{config} is missing: the Hugging Face layout keeps the "
            "architecture in config.json beside the weights."
        )
    return config, weights


def read_tensors(path: str) -> Dict[str, np.ndarray]:
    """The arrays of a safetensors file, a sharded index or a
    pytorch_model.bin, as float32 numpy arrays (no PyTorch needed)."""
    if path.endswith(".index.json"):
        with open(path, encoding="utf-8") as f:
            shards = dict.fromkeys(json.load(f)["weight_map"].values())
        folder = os.path.dirname(path)
        tensors = {}
        for shard in shards:
            tensors.update(read_tensors(os.path.join(folder, shard)))
        return tensors
    if torch_pickle.is_torch_file(path):
        tensors = torch_pickle.read_state_dict(path)
    else:
        try:
            tensors = safetensors.numpy.load_file(path)
        except Exception as error:  # the library raises its own types
            raise UsageError(
                f"Could not read {path} as safetensors: {error}"
            ) from None
    return {k: np.asarray(v, dtype=np.float32) for k, v in tensors.items()}


def _dense(weight: np.ndarray) -> np.ndarray:
    # PyTorch Linear stores (out, in); the official kernels are (in, out).
    return np.ascontiguousarray(weight.T)


class _Mapper:
    """Moves hub arrays into the official layout, tracking what is used."""

    def __init__(self, tensors: Dict[str, np.ndarray], prefix: str):
        self.tensors = tensors
        self.prefix = prefix
        self.used = set()
        self.arrays: Dict[str, np.ndarray] = {}

    def has(self, key: str) -> bool:
        return self.prefix + key in self.tensors

    def take(self, key: str, required: bool = True):
        full = self.prefix + key
        if full not in self.tensors:
            if required:
                raise UsageError(f"The checkpoint lacks {full}.")
            return None
        self.used.add(full)
        return self.tensors[full]

    def put(self, key: str, value: Optional[np.ndarray],
            fn: Callable = lambda v: v) -> None:
        if value is not None:
            self.arrays[key] = np.ascontiguousarray(fn(value), np.float32)

    def attention(self, block: str, qkv, bias, out_w, out_b, heads: int):
        width = qkv[0].shape[1]
        head_dim = width // heads
        for name, w, b in zip(("query", "key", "value"), qkv, bias):
            self.put(f"{block}/{_ATT}/{name}/kernel",
                     _dense(w).reshape(width, heads, head_dim))
            self.put(f"{block}/{_ATT}/{name}/bias",
                     np.zeros(width) if b is None else b,
                     lambda v: v.reshape(heads, head_dim))
        self.put(f"{block}/{_ATT}/out/kernel",
                 _dense(out_w).reshape(heads, head_dim, -1))
        self.put(f"{block}/{_ATT}/out/bias", out_b)

    def norm(self, key: str, official: str) -> None:
        self.put(f"{official}/scale", self.take(key + ".weight"))
        self.put(f"{official}/bias", self.take(key + ".bias"))

    def dense(self, key: str, official: str, required: bool = True) -> None:
        weight = self.take(key + ".weight", required)
        if weight is not None:
            self.put(f"{official}/kernel", _dense(weight))
            self.put(f"{official}/bias", self.take(key + ".bias"))

    def unused(self) -> List[str]:
        return [k for k in self.tensors if k not in self.used]


def _stem(m: _Mapper, cls: str, posemb: str, patch: str) -> None:
    m.put("cls", m.take(cls, required=False))
    m.put("Transformer/posembed_input/pos_embedding", m.take(posemb))
    # (out, in, kh, kw) -> (kh, kw, in, out)
    m.put("embedding/kernel", m.take(patch + ".weight"),
          lambda v: v.transpose(2, 3, 1, 0))
    m.put("embedding/bias", m.take(patch + ".bias"))


def _num_blocks(tensors, pattern: str) -> int:
    found = {int(m.group(1)) for k in tensors
             for m in [re.match(pattern, k)] if m}
    return max(found) + 1 if found else 0


def _map_huggingface(tensors, heads: int) -> _Mapper:
    prefix = "vit." if any(k.startswith("vit.") for k in tensors) else ""
    m = _Mapper(tensors, prefix)
    _stem(m, "embeddings.cls_token", "embeddings.position_embeddings",
          "embeddings.patch_embeddings.projection")
    layers = _num_blocks(
        tensors, re.escape(prefix) + r"encoder\.layer\.(\d+)\."
    )
    for i in range(layers):
        hf, block = f"encoder.layer.{i}.", f"Transformer/encoderblock_{i}"
        att = hf + "attention.attention."
        m.norm(hf + "layernorm_before", f"{block}/LayerNorm_0")
        m.attention(
            block,
            [m.take(att + n + ".weight") for n in ("query", "key", "value")],
            [m.take(att + n + ".bias", False)
             for n in ("query", "key", "value")],
            m.take(hf + "attention.output.dense.weight"),
            m.take(hf + "attention.output.dense.bias"),
            heads,
        )
        m.norm(hf + "layernorm_after", f"{block}/LayerNorm_2")
        m.dense(hf + "intermediate.dense", f"{block}/{_MLP}/Dense_0")
        m.dense(hf + "output.dense", f"{block}/{_MLP}/Dense_1")
    m.norm("layernorm", "Transformer/encoder_norm")
    m.dense("pooler.dense", "pre_logits", required=False)
    m.prefix = ""
    m.dense("classifier", "head", required=False)
    return m


def _map_timm(tensors, heads: int) -> _Mapper:
    m = _Mapper(tensors, "")
    _stem(m, "cls_token", "pos_embed", "patch_embed.proj")
    for i in range(_num_blocks(tensors, r"blocks\.(\d+)\.")):
        t, block = f"blocks.{i}.", f"Transformer/encoderblock_{i}"
        m.norm(t + "norm1", f"{block}/LayerNorm_0")
        qkv_bias = m.take(t + "attn.qkv.bias", False)
        m.attention(
            block,
            np.split(m.take(t + "attn.qkv.weight"), 3),
            [None] * 3 if qkv_bias is None else np.split(qkv_bias, 3),
            m.take(t + "attn.proj.weight"),
            m.take(t + "attn.proj.bias"),
            heads,
        )
        m.norm(t + "norm2", f"{block}/LayerNorm_2")
        m.dense(t + "mlp.fc1", f"{block}/{_MLP}/Dense_0")
        m.dense(t + "mlp.fc2", f"{block}/{_MLP}/Dense_1")
    m.norm("norm", "Transformer/encoder_norm")
    m.dense("head", "head", required=False)
    return m


def _fold_normalisation(arrays, mean, std) -> None:
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
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path} is not valid JSON: {error}") from None


def _hf_settings(spec: Dict[str, Any], folder: str) -> Dict[str, Any]:
    model_type = spec.get("model_type", "vit")
    if model_type != "vit":
        raise UsageError(
            f"config.json says model_type {model_type!r}; only 'vit' "
            "(ViTForImageClassification / ViTModel) is read. For DeiT, load"
            " the timm checkpoint (facebook/deit-*: timm/deit_*) instead."
        )
    act = spec.get("hidden_act", "gelu")
    if act not in _HF_GELU:
        raise UsageError(f"config.json hidden_act {act!r} is not a GELU; "
                         "unsupported.")
    size = spec.get("image_size", 224)
    labels = spec.get("id2label")
    names = None
    if labels and not all(
        v == f"LABEL_{k}" for k, v in labels.items()
    ):
        names = [labels[str(i)] for i in range(len(labels))]
    processor = os.path.join(folder, "preprocessor_config.json")
    proc = _read_json(processor) if os.path.exists(processor) else {}
    return dict(
        num_heads=int(spec["num_attention_heads"]),
        image_size=size,
        approximate_gelu=_HF_GELU[act],
        layer_norm_epsilon=float(spec.get("layer_norm_eps", 1e-12)),
        class_names=names,
        mean=tuple(proc.get("image_mean", (0.5,) * 3)),
        std=tuple(proc.get("image_std", (0.5,) * 3)),
    )


def _timm_settings(spec: Dict[str, Any]) -> Dict[str, Any]:
    arch = str(spec.get("architecture", ""))
    args = spec.get("model_args") or {}
    pretrained = spec.get("pretrained_cfg") or {}
    named = _TIMM_NAME.match(arch)
    heads = args.get("num_heads") or (
        _TIMM_HEADS[named.group(1)] if named else None
    )
    if heads is None:
        raise UsageError(
            f"config.json names architecture {arch!r} without num_heads in "
            "model_args: cannot tell the head count."
        )
    pool = spec.get("global_pool", args.get("global_pool", "token"))
    if pool != "token":
        raise UsageError(
            f"config.json global_pool {pool!r}: only timm's class-token "
            "pooling ('token') computes what this ViT does."
        )
    size = pretrained.get("input_size", [3] + [args.get("img_size")] * 2)
    if size[1] is None:
        size = [3] + [int(named.group(3))] * 2 if named else [3, 224, 224]
    return dict(
        num_heads=int(heads),
        image_size=(int(size[1]), int(size[2])),
        approximate_gelu=False,  # timm's ViT uses nn.GELU (exact)
        layer_norm_epsilon=1e-6,
        class_names=spec.get("label_names"),
        mean=tuple(pretrained.get("mean", (0.5,) * 3)),
        std=tuple(pretrained.get("std", (0.5,) * 3)),
    )


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


def read_hub(path: str) -> HubCheckpoint:
    """Reads a hub model directory (or weights file) into the official
    layout.

    Raises:
        FileNotFoundError: no weights or no config.json.
        ValueError: another architecture, or a key this ViT cannot use
            (named).
    """
    config_path, weights_path = _files(path)
    spec = _read_json(config_path)
    tensors = read_tensors(weights_path)
    kind = naming(tensors)
    if kind == HUGGINGFACE:
        settings = _hf_settings(spec, os.path.dirname(config_path))
        mapper = _map_huggingface(tensors, settings["num_heads"])
    else:
        settings = _timm_settings(spec)
        mapper = _map_timm(tensors, settings["num_heads"])
    unused = mapper.unused()
    if unused:
        raise UsageError(
            f"{weights_path} has {len(unused)} array(s) this ViT has no "
            f"place for, first {unused[0]} {tensors[unused[0]].shape}: a "
            f"{kind} model with parts the plain ViT does not compute "
            "(e.g. a distillation or register token, layer scale, fc_norm)."
        )
    size = settings.pop("image_size")
    size = (size, size) if isinstance(size, int) else tuple(size)
    _fold_normalisation(mapper.arrays, settings["mean"], settings["std"])
    return HubCheckpoint(
        path=weights_path, naming=kind, arrays=mapper.arrays,
        image_size=size, **settings,
    )

