"""Hub arrays into the official `.npz` layout: the names of the Hugging
Face `ViTForImageClassification` / `ViTModel` files (transformers 4 and
save_pretrained, and transformers 5's in-memory naming) and of timm's
`vision_transformer`, each mapped to the official key, PyTorch's (out, in)
Linear kernels transposed and the attention's fused or separate q/k/v
split into heads. `Mapper.unused` lists what no official key took
(`hub.read_hub` refuses a file with any).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional

import numpy as np

from keras_vit.checkpoint.hub import config as hub_config
from keras_vit.checkpoint.hub.tensors import shape as stored_shape
from keras_vit.errors import UsageError

_ATT = "MultiHeadDotProductAttention_1"
_MLP = "MlpBlock_3"


def _dense(weight: np.ndarray) -> np.ndarray:
    # PyTorch Linear stores (out, in); the official kernels are (in, out).
    return np.ascontiguousarray(weight.T)


class Mapper:
    """Moves hub arrays into the official layout, tracking what is used."""

    def __init__(self, tensors: Dict[str, np.ndarray], prefix: str):
        self.tensors = tensors
        self.prefix = prefix
        self.used = set()
        self.arrays: Dict[str, np.ndarray] = {}
        self.width = 0  # the patch embedding's output channels
        # The transformers class read (map_huggingface), whether config.json
        # named it, and the (key, shape, reason) of the arrays it leaves
        # out where it did not.
        self.architecture: Optional[str] = None
        self.inferred = False
        self.left_out: List[tuple] = []

    def set_width(self, patch_kernel: str) -> None:
        self.width = int(stored_shape(self.tensors, patch_kernel)[0])

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

    def shaped(self, key: str, want, required: bool = True):
        """`take(key)`, refused in one line naming the array, its shape
        and the shape a model of the patch embedding's width needs (a
        query bias of another width cannot be split into its heads)."""
        full = self.prefix + key
        if full in self.tensors:
            got = stored_shape(self.tensors, full)
            if got != tuple(want):
                self.refuse(full, got, str(tuple(want)))
        return self.take(key, required)

    def refuse(self, full: str, got, want: str) -> None:
        """Refuses array `full` of shape `got`, where `want` is needed."""
        raise UsageError(
            f"{full} has shape {got}, where a model {self.width} wide (its "
            f"patch embedding's width) needs {want}: the arrays are not one "
            "ViT's; the file is refused.")

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
        width = (self.width,)
        self.put(f"{official}/scale", self.shaped(key + ".weight", width))
        self.put(f"{official}/bias", self.shaped(key + ".bias", width))

    def dense(self, key: str, official: str, required: bool = True,
              inputs: Optional[int] = None) -> int:
        """A Linear (out, in) as a Dense, `in` the model width or
        `inputs`, one bias per output; returns `out` (0: none)."""
        full = self.prefix + key + ".weight"
        if full not in self.tensors:
            self.take(key + ".weight", required)
            return 0
        rows = stored_shape(self.tensors, full)[:1] or (0,)
        weight = self.shaped(key + ".weight", rows + (inputs or self.width,))
        self.put(f"{official}/kernel", _dense(weight))
        self.put(f"{official}/bias", self.shaped(key + ".bias", rows))
        return rows[0]

    def unused(self) -> List[str]:
        return [k for k in self.tensors if k not in self.used]


def _stem(m: Mapper, cls: str, posemb: str, patch: str,
          kernel: Optional[np.ndarray] = None) -> None:
    m.set_width(m.prefix + patch + ".weight")
    m.put("cls", m.shaped(cls, (1, 1, m.width), required=False))
    # (1, tokens, width); the token count is checked against the grid.
    table = stored_shape(m.tensors, m.prefix + posemb) if m.has(
        posemb) else (1, 0, m.width)
    if len(table) != 3 or table[0] != 1 or table[2] != m.width:
        m.refuse(m.prefix + posemb, table, f"(1, tokens, {m.width})")
    m.put("Transformer/posembed_input/pos_embedding", m.take(posemb))
    # (out, in, kh, kw) -> (kh, kw, in, out); `kernel`: the stored one as
    # the library reshapes it.
    stored = m.take(patch + ".weight")
    m.put("embedding/kernel", stored if kernel is None else kernel,
          lambda v: v.transpose(2, 3, 1, 0))
    m.put("embedding/bias", m.take(patch + ".bias"))


def _num_blocks(tensors, pattern: str) -> int:
    found = {int(m.group(1)) for k in tensors
             for m in [re.match(pattern, k)] if m}
    return max(found) + 1 if found else 0


# transformers' module names inside one encoder layer: the hub files'
# (transformers 4 and save_pretrained) and transformers 5's in memory.
_HF_LAYER = {
    "files": dict(blocks=r"encoder\.layer\.(\d+)\.", block="encoder.layer.",
                  q="attention.attention.query", k="attention.attention.key",
                  v="attention.attention.value",
                  out="attention.output.dense", fc1="intermediate.dense",
                  fc2="output.dense"),
    "transformers5": dict(blocks=r"layers\.(\d+)\.", block="layers.",
                          q="attention.q_proj", k="attention.k_proj",
                          v="attention.v_proj", out="attention.o_proj",
                          fc1="mlp.fc1", fc2="mlp.fc2"),
}


def _choose_class(m: Mapper, architecture: Optional[str]) -> Optional[str]:
    """The transformers class whose arrays are read (config.json's, else
    for a file with a classifier the ViTForImageClassification that
    AutoModelForImageClassification builds for model_type vit, which has
    no pooler); the other class's part is marked used (left out), and
    listed in `m.left_out` where config.json named no class."""
    tensors, prefix = m.tensors, m.prefix
    if architecture is None and any(k.startswith("classifier.")
                                    for k in tensors):
        architecture = "ViTForImageClassification"
        m.inferred = True
    m.architecture = architecture
    if architecture is not None:
        skip = hub_config.HF_ARCHITECTURES[architecture]
        skipped = [k for k in tensors if k.startswith(skip) or
                   k.startswith(prefix + skip)]
        m.used.update(skipped)
        if m.inferred:
            m.left_out = [(k, stored_shape(tensors, k), (
                "config.json names no architectures: read as transformers' "
                "AutoModelForImageClassification builds it, a "
                "ViTForImageClassification, which has no pooler"))
                for k in sorted(skipped)]
    return architecture


def map_huggingface(tensors, heads: int,
                     architecture: Optional[str] = None,
                     qkv_bias: bool = True,
                     num_labels: Optional[int] = None) -> Mapper:
    """The arrays `architecture` (a transformers class; None: a file with
    a classifier is read as the ViTForImageClassification transformers'
    AutoModelForImageClassification builds, one without by its arrays:
    a ViTModel's pooler output where it holds the pooler) uses, in the
    official layout; the other class's part (the pooler beside a
    classifier, a classifier beside the pooler) is left out, as
    transformers leaves it out (`Mapper.left_out` lists it where
    config.json named no class), and so are query/key/value
    biases with `qkv_bias` False (transformers builds none: zeros). A
    classifier of `num_labels` 0 is transformers' identity: the class
    token's features, a features model here. The class token is
    required: transformers' ViT always has one."""
    prefix = "vit." if any(k.startswith("vit.") for k in tensors) else ""
    m = Mapper(tensors, prefix)
    architecture = _choose_class(m, architecture)
    if architecture == "ViTForImageClassification" and num_labels != 0 \
            and not any(k.startswith("classifier.") for k in tensors):
        raise UsageError(
            "config.json architectures names ViTForImageClassification, but"
            " the weights hold no classifier.weight: transformers would "
            "start that head at random. Load it as a ViTModel (set "
            "architectures to [\"ViTModel\"]) for its features."
        )
    names = _HF_LAYER["files"]
    if any(k.startswith(prefix + "layers.") for k in tensors):
        names = _HF_LAYER["transformers5"]
    if not m.has("embeddings.cls_token"):
        raise UsageError(
            f"The weights lack {prefix}embeddings.cls_token: transformers' "
            "ViTEmbeddings always has a class token (and a position table of"
            " the patches plus its row), so it would start the token at "
            "random or refuse the table. A ViT without a class token (timm "
            "class_token=False, global_pool='avg') is read in timm's "
            "naming, with its config.json."
        )
    _stem(m, "embeddings.cls_token", "embeddings.position_embeddings",
          "embeddings.patch_embeddings.projection")
    width = m.width
    layers = _num_blocks(tensors, re.escape(prefix) + names["blocks"])
    for i in range(layers):
        hf, block = f"{names['block']}{i}.", f"Transformer/encoderblock_{i}"
        qkv = [names[n] for n in "qkv"]
        m.norm(hf + "layernorm_before", f"{block}/LayerNorm_0")
        # Without qkv_bias transformers builds no bias and ignores these;
        # with it, a missing bias is a damaged file (refused as any other
        # missing array is, not loaded as zeros).
        biases = [m.shaped(hf + n + ".bias", (width,)) if qkv_bias
                  else m.take(hf + n + ".bias", False) for n in qkv]
        m.attention(
            block,
            [m.shaped(hf + n + ".weight", (width, width)) for n in qkv],
            biases if qkv_bias else [None] * 3,
            m.shaped(hf + names["out"] + ".weight", (width, width)),
            m.shaped(hf + names["out"] + ".bias", (width,)),
            heads,
        )
        m.norm(hf + "layernorm_after", f"{block}/LayerNorm_2")
        mlp = m.dense(hf + names["fc1"], f"{block}/{_MLP}/Dense_0")
        m.dense(hf + names["fc2"], f"{block}/{_MLP}/Dense_1", inputs=mlp)
    m.norm("layernorm", "Transformer/encoder_norm")
    pooled = 0
    if architecture != "ViTForImageClassification":
        pooled = m.dense("pooler.dense", "pre_logits", required=False)
    m.prefix = ""
    if architecture != "ViTModel":
        m.dense("classifier", "head", required=False, inputs=pooled or None)
    return m


def map_timm(tensors, heads: int, fc_norm: bool, qkv_bias=True,
             kernel: Optional[np.ndarray] = None) -> Mapper:
    """timm's arrays in the official layout, as timm's strict load takes
    them: query/key/value biases exactly where `qkv_bias` (the model's
    argument) builds them; `kernel`: the patch kernel as timm's checkpoint
    filter reshapes it."""
    m = Mapper(tensors, "")
    _stem(m, "cls_token", "pos_embed", "patch_embed.proj", kernel)
    width = m.width
    for i in range(_num_blocks(tensors, r"blocks\.(\d+)\.")):
        t, block = f"blocks.{i}.", f"Transformer/encoderblock_{i}"
        m.norm(t + "norm1", f"{block}/LayerNorm_0")
        bias = m.shaped(t + "attn.qkv.bias", (3 * width,), False)
        if (bias is None) == bool(qkv_bias):
            built, stored = ("a", "without") if qkv_bias else ("no", "with")
            raise UsageError(
                f"config.json qkv_bias={qkv_bias!r} (model_args, else the "
                f"architecture's, else timm's True): timm builds {built} "
                f"query/key/value bias, and its strict load refuses weights "
                f"{stored} {t}attn.qkv.bias; the config does not describe "
                "them."
            )
        m.attention(
            block,
            np.split(m.shaped(t + "attn.qkv.weight", (3 * width, width)), 3),
            [None] * 3 if bias is None else np.split(bias, 3),
            m.shaped(t + "attn.proj.weight", (width, width)),
            m.shaped(t + "attn.proj.bias", (width,)),
            heads,
        )
        m.norm(t + "norm2", f"{block}/LayerNorm_2")
        mlp = m.dense(t + "mlp.fc1", f"{block}/{_MLP}/Dense_0")
        m.dense(t + "mlp.fc2", f"{block}/{_MLP}/Dense_1", inputs=mlp)
    # With class-token pooling, timm's fc_norm normalises the pooled
    # token: the same LayerNorm as a final norm of every token, read there.
    m.norm("fc_norm" if fc_norm else "norm", "Transformer/encoder_norm")
    m.dense("head", "head", required=False)
    return m
