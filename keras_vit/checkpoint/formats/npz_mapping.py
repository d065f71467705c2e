"""The mapping between a keras_vit model's variables and the official
.npz keys (`model_params`): query/key/value kernels (D, heads, head_dim)
joined into the model's fused (D, 3D) `qkv` kernel as [q | k | v], the
output kernel (heads, head_dim, D) as (D, D), LayerNorm `scale`/`bias` as
Keras's `gamma`/`beta`, the hybrid's GroupNorm parameters in the released
files' (1, 1, 1, C) shape. `model_arrays` reads a model into that layout;
`keras_vit.checkpoint.weights` loads and saves through it.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence, Tuple

import keras
import numpy as np

from keras_vit.architecture import Numerics
from keras_vit.checkpoint.formats.npz import POSEMB, Arrays, Grid, Shape
from keras_vit.errors import UsageError
from keras_vit.model import architecture_of

# Variables keras's `Model.quantize` (int8, int4, float8, GPTQ, AWQ) adds
# beside a layer's kernel or embeddings.
QUANTIZATION_NAMES = (
    "_scale", "_scales", "_zero", "_amax_history", "g_idx", "zero_point",
)
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


@dataclasses.dataclass
class Param:
    """One model variable and the checkpoint array(s) it corresponds to."""

    variable: keras.Variable
    keys: Tuple[str, ...]
    kind: str = "plain"  # plain | q/k/v kernel | q/k/v bias | out | gn
    heads: int = 0

    def to_file(self, value: np.ndarray) -> Tuple[np.ndarray, ...]:
        if self.kind == "qkv_kernel":  # (D, 3D) -> 3 x (D, heads, hd)
            parts = value.reshape(value.shape[0], 3, self.heads, -1)
            return tuple(parts[:, i] for i in range(3))
        if self.kind == "qkv_bias":  # (3D,) -> 3 x (heads, hd)
            return tuple(value.reshape(3, self.heads, -1))
        if self.kind == "out_kernel":  # (D, D) -> (heads, hd, D)
            return (value.reshape(self.heads, -1, value.shape[-1]),)
        if self.kind == "gn":  # released hybrid files store (1, 1, 1, C)
            return (value.reshape(1, 1, 1, -1),)
        return (value,)

    def from_file(self, arrays: Sequence[np.ndarray]) -> np.ndarray:
        if self.kind == "qkv_kernel":
            return np.concatenate(
                [a.reshape(a.shape[0], -1) for a in arrays], axis=-1
            )
        if self.kind == "qkv_bias":
            return np.concatenate([a.reshape(-1) for a in arrays])
        if self.kind == "out_kernel":
            return arrays[0].reshape(-1, arrays[0].shape[-1])
        if self.kind == "gn":
            return arrays[0].reshape(-1)
        return arrays[0]

    def file_shapes(self) -> Dict[str, Shape]:
        zeros = np.zeros(self.variable.shape, np.int8)
        return {k: a.shape for k, a in zip(self.keys, self.to_file(zeros))}

    def accepts(self, expected: Shape, found: Shape) -> bool:
        if self.kind == "gn":  # both (C,) and (1, 1, 1, C) are in use
            return found in (expected, expected[-1:])
        return found == expected


def dense_params(layer, prefix: str) -> List[Param]:
    return [
        Param(layer.kernel, (f"{prefix}/kernel",)),
        Param(layer.bias, (f"{prefix}/bias",)),
    ]


def _norm(layer, prefix: str, kind: str = "plain") -> List[Param]:
    return [
        Param(layer.gamma, (f"{prefix}/scale",), kind),
        Param(layer.beta, (f"{prefix}/bias",), kind),
    ]


def _resnet_params(stem) -> List[Param]:
    params = [
        Param(stem.conv_root.kernel, ("conv_root/kernel",)),
        *_norm(stem.gn_root, "gn_root", "gn"),
    ]
    for s, units in enumerate(stem.stage_units(), start=1):
        for u, unit in enumerate(units, start=1):
            pre = f"block{s}/unit{u}/"
            names = ["1", "2", "3"]
            if unit.needs_projection:
                names.append("_proj")
            for n in names:
                conv, gn = getattr(unit, f"conv{n}"), getattr(unit, f"gn{n}")
                params.append(Param(conv.kernel, (f"{pre}conv{n}/kernel",)))
                params.extend(_norm(gn, f"{pre}gn{n}", "gn"))
    return params


def model_params(model: keras.Model) -> List[Param]:
    """Every variable of a keras_vit model with its official key(s)."""
    layers = {layer.name: layer for layer in model.layers}
    for name in ("embedding", "posembed_input", "Transformer"):
        if name not in layers:
            raise UsageError(
                f"The model has no layer named {name!r}: it is not a "
                "keras_vit Vision Transformer. Build it with "
                "keras_vit.create_model(...)."
            )
    params: List[Param] = []
    if "resnet" in layers:
        params += _resnet_params(layers["resnet"])
    params += dense_params(layers["embedding"].conv, "embedding")
    if "cls" in layers:
        params.append(Param(layers["cls"].cls, ("cls",)))
    # Fixed sin-cos embeddings (posemb="sincos2d") are not parameters.
    table = getattr(layers["posembed_input"], "pos_embedding", None)
    if table is not None:
        params.append(Param(table, (POSEMB,)))
    encoder = layers["Transformer"]
    for i, block in enumerate(encoder.blocks):
        pre = f"Transformer/encoderblock_{i}/"
        att = pre + "MultiHeadDotProductAttention_1/"
        heads = block.attention.num_heads
        params += _norm(block.norm1, pre + "LayerNorm_0")
        params += [
            Param(
                block.attention.qkv.kernel,
                tuple(f"{att}{n}/kernel" for n in ("query", "key", "value")),
                "qkv_kernel",
                heads,
            ),
            Param(
                block.attention.qkv.bias,
                tuple(f"{att}{n}/bias" for n in ("query", "key", "value")),
                "qkv_bias",
                heads,
            ),
            Param(
                block.attention.out.kernel, (att + "out/kernel",),
                "out_kernel", heads,
            ),
            Param(block.attention.out.bias, (att + "out/bias",)),
        ]
        params += _norm(block.norm2, pre + "LayerNorm_2")
        params += dense_params(block.mlp1, pre + "MlpBlock_3/Dense_0")
        params += dense_params(block.mlp2, pre + "MlpBlock_3/Dense_1")
    params += _norm(encoder.encoder_norm, "Transformer/encoder_norm")
    for name in ("pre_logits", "head"):
        if name in layers:
            params += dense_params(layers[name], name)
    return params


def model_grid(model: keras.Model) -> Grid:
    """(rows, cols). The model's patch grid (tokens = rows * cols)."""
    # A model of dynamic image size keeps its table at a fixed grid.
    grid = getattr(model.get_layer("posembed_input"), "grid_size", None)
    if grid is not None:
        return tuple(grid)
    embedding = model.get_layer("embedding")
    shape = embedding.input.shape
    if None in shape[1:3]:  # sin-cos positions at any size: its own grid
        return tuple(architecture_of(model).grid())
    return (
        shape[1] // embedding.patch_size,
        shape[2] // embedding.patch_size,
    )


def model_arrays(model: keras.Model) -> Arrays:
    """The model's parameters in the official layout (key -> array).

    Every array is float32, the official files' dtype, whatever the
    variable's (float16, bfloat16, float32 or float64): NumPy writes
    bfloat16 as raw 2-byte values (`|V2`) that the official loaders
    cannot read. GroupNorm parameters of the hybrid stem use the released
    files' shape (1, 1, 1, C).

    Raises:
        UsageError: the model is quantized (`Model.quantize`) or has a
            parameter that is not floating point, which the layout cannot
            record (checked before any array is read).
    """
    params = model_params(model)
    check_float(model, params)
    arrays: Arrays = {}
    for param in params:
        value = np.asarray(param.variable.numpy()).astype(np.float32)
        arrays.update(zip(param.keys, param.to_file(value)))
    return arrays


def check_float(model: keras.Model, params: Sequence[Param]) -> None:
    """A UsageError naming the first variable of a quantized layer, or
    else the first parameter of a dtype other than float16, bfloat16,
    float32 or float64: the official layout records float arrays alone
    (a quantized kernel would load without its scale)."""
    quantized = [v.path for v in model.variables
                 if v.name.endswith(QUANTIZATION_NAMES)]
    if quantized:
        more = f" and {len(quantized) - 1} more" * (len(quantized) > 1)
        raise UsageError(
            f"The model is quantized ({quantized[0]}{more}): the official "
            ".npz layout and the weight loaders take float arrays only, and "
            "a quantized kernel would load without its scale. Start from "
            "(or write the .npz from) the model before quantizing it "
            "(model.quantize); quantize after loading.")
    for param in params:
        dtype = keras.backend.standardize_dtype(param.variable.dtype)
        if dtype not in FLOAT_DTYPES:
            raise UsageError(
                f"{param.variable.path} is {dtype}: the official .npz "
                "layout records float arrays only (float32). Build the "
                "model with a float dtype (float32, bfloat16, float16) "
                "and load its weights into it, or save it as a .keras "
                "file (model.save).")


def check_recordable(model: keras.Model, path: str) -> None:
    """A UsageError when `model` computes in a way the official layout
    cannot record (non-official numerics, a pre-logits activation other
    than tanh): an .npz of it at `path` would load as another model."""
    try:
        arch = architecture_of(model)
    except UsageError:
        return  # no ViT: model_arrays says why
    unrecorded = [f"numerics={arch.numerics}"] * (arch.numerics != Numerics())
    if arch.representation_size and arch.pre_logits_activation != "tanh":
        unrecorded.append(
            f"pre_logits_activation={arch.pre_logits_activation!r}")
    if unrecorded:
        raise UsageError(
            f"{path}: the .npz layout records arrays only, and this model "
            f"computes with {', '.join(unrecorded)}, which the file would "
            "load without (the official GELU, LayerNorm epsilon and tanh): "
            "save it as a .keras file (model.save), which records them.")
