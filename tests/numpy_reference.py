"""An independent NumPy forward pass of ViT, working on official .npz arrays.

Written from the paper's equations (Eq. 1-4) and the checkpoint format, not
from the Keras model: it reads the parameter dict in the official layout
(unfused query/key/value, (heads, head_dim) shapes, HWIO convolutions) and
computes logits in float64. Tests compare the Keras model against it.

The architecture is read off the arrays: patch size from `embedding/kernel`,
heads from the query kernel, depth from the block names, token pooling if
`cls` exists (else global average pooling), pre-logits and head if present,
and the ResNet stem if `conv_root/kernel` exists.
"""

from __future__ import annotations

import math
import re
from typing import Dict, Tuple

import numpy as np

Params = Dict[str, np.ndarray]


# ----------------------------------------------------------------- basics


def layer_norm(x: np.ndarray, scale, bias, eps: float = 1e-6) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (
        x + 0.044715 * x**3)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = x - x.max(axis, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis, keepdims=True)


def same_padding(size: int, kernel: int, stride: int) -> Tuple[int, int]:
    """(before, after) padding of TF/XLA "SAME": the odd pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def conv2d(x: np.ndarray, w: np.ndarray, stride: int, padding: str):
    """NHWC x HWIO convolution as a sum of shifted matmuls."""
    kh, kw = w.shape[:2]
    if padding == "SAME":
        ph = same_padding(x.shape[1], kh, stride)
        pw = same_padding(x.shape[2], kw, stride)
        x = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    out_h = (x.shape[1] - kh) // stride + 1
    out_w = (x.shape[2] - kw) // stride + 1
    y = np.zeros((x.shape[0], out_h, out_w, w.shape[3]))
    for i in range(kh):
        for j in range(kw):
            window = x[
                :,
                i:i + stride * (out_h - 1) + 1:stride,
                j:j + stride * (out_w - 1) + 1:stride,
            ]
            y += window @ w[i, j]
    return y


def max_pool_same(x: np.ndarray, size: int, stride: int) -> np.ndarray:
    ph = same_padding(x.shape[1], size, stride)
    pw = same_padding(x.shape[2], size, stride)
    x = np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=-np.inf)
    out_h = (x.shape[1] - size) // stride + 1
    out_w = (x.shape[2] - size) // stride + 1
    y = np.full((x.shape[0], out_h, out_w, x.shape[3]), -np.inf)
    for i in range(size):
        for j in range(size):
            y = np.maximum(
                y,
                x[
                    :,
                    i:i + stride * (out_h - 1) + 1:stride,
                    j:j + stride * (out_w - 1) + 1:stride,
                ],
            )
    return y


def standardize(w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    w = w - w.mean(axis=(0, 1, 2), keepdims=True)
    return w / (w.std(axis=(0, 1, 2), keepdims=True) + eps)


def group_norm(x, scale, bias, groups: int = 32, eps: float = 1e-6):
    b, h, w, c = x.shape
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = ((g - mean) ** 2).mean(axis=(1, 2, 4), keepdims=True)
    g = (g - mean) / np.sqrt(var + eps)
    return g.reshape(b, h, w, c) * np.ravel(scale) + np.ravel(bias)


# ----------------------------------------------------------------- ResNet


def _gn(p: Params, name: str, x):
    return group_norm(x, p[f"{name}/scale"], p[f"{name}/bias"])


def _std_conv(p: Params, name: str, x, stride: int):
    return conv2d(x, standardize(p[f"{name}/kernel"]), stride, "SAME")


def resnet_stages(p: Params) -> Tuple[int, ...]:
    """Units per stage, read from the `block{s}/unit{u}` key names."""
    counts: Dict[int, int] = {}
    for key in p:
        m = re.match(r"block(\d+)/unit(\d+)/", key)
        if m:
            s, u = int(m.group(1)), int(m.group(2))
            counts[s] = max(counts.get(s, 0), u)
    return tuple(counts[s] for s in sorted(counts))


def resnet_forward(p: Params, x: np.ndarray) -> np.ndarray:
    x = _std_conv(p, "conv_root", x, 2)
    x = np.maximum(_gn(p, "gn_root", x), 0.0)
    x = max_pool_same(x, 3, 2)
    for s, count in enumerate(resnet_stages(p), start=1):
        for u in range(1, count + 1):
            prefix = f"block{s}/unit{u}/"
            stride = 2 if (s > 1 and u == 1) else 1
            residual = x
            if prefix + "conv_proj/kernel" in p:
                residual = _std_conv(p, prefix + "conv_proj", x, stride)
                residual = _gn(p, prefix + "gn_proj", residual)
            y = _std_conv(p, prefix + "conv1", x, 1)
            y = np.maximum(_gn(p, prefix + "gn1", y), 0.0)
            y = _std_conv(p, prefix + "conv2", y, stride)
            y = np.maximum(_gn(p, prefix + "gn2", y), 0.0)
            y = _gn(p, prefix + "gn3", _std_conv(p, prefix + "conv3", y, 1))
            x = np.maximum(residual + y, 0.0)
    return x


# ------------------------------------------------------------ Transformer


def attention(p: Params, prefix: str, x: np.ndarray) -> np.ndarray:
    def proj(name):
        return (
            np.einsum("btd,dhk->bthk", x, p[f"{prefix}{name}/kernel"])
            + p[f"{prefix}{name}/bias"]
        )

    q, k, v = proj("query"), proj("key"), proj("value")
    head_dim = q.shape[-1]
    logits = np.einsum("bqhk,bthk->bhqt", q / math.sqrt(head_dim), k)
    weights = softmax(logits, axis=-1)
    attended = np.einsum("bhqt,bthk->bqhk", weights, v)
    return (
        np.einsum("bqhk,hkd->bqd", attended, p[f"{prefix}out/kernel"])
        + p[f"{prefix}out/bias"]
    )


def encoder_block(p: Params, i: int, x: np.ndarray) -> np.ndarray:
    pre = f"Transformer/encoderblock_{i}/"
    def norm(name, v):
        return layer_norm(v, p[f"{pre}{name}/scale"], p[f"{pre}{name}/bias"])

    def dense(name, v):
        return v @ p[f"{pre}{name}/kernel"] + p[f"{pre}{name}/bias"]

    x = x + attention(
        p, pre + "MultiHeadDotProductAttention_1/", norm("LayerNorm_0", x)
    )
    y = gelu_tanh(dense("MlpBlock_3/Dense_0", norm("LayerNorm_2", x)))
    return x + dense("MlpBlock_3/Dense_1", y)


def num_blocks(p: Params) -> int:
    ids = {
        int(m.group(1))
        for m in (re.match(r"Transformer/encoderblock_(\d+)/", k) for k in p)
        if m
    }
    return max(ids) + 1


def features(p: Params, images: np.ndarray) -> np.ndarray:
    """The pre-logits representation of `images` (B, H, W, 3) in [-1, 1]."""
    p = {k: np.asarray(v, np.float64) for k, v in p.items()}
    x = np.asarray(images, np.float64)
    if "conv_root/kernel" in p:
        x = resnet_forward(p, x)
    kernel = p["embedding/kernel"]
    patch = kernel.shape[0]
    b, h, w, c = x.shape
    gh, gw = h // patch, w // patch
    # Eq. 1: flatten each P x P x C patch (row-major, like HWIO) and project.
    patches = (
        x[:, : gh * patch, : gw * patch]
        .reshape(b, gh, patch, gw, patch, c)
        .transpose(0, 1, 3, 2, 4, 5)
        .reshape(b, gh * gw, patch * patch * c)
    )
    kernel = kernel.reshape(-1, kernel.shape[-1])
    tokens = patches @ kernel + p["embedding/bias"]
    if "cls" in p:
        cls = np.broadcast_to(p["cls"], (b, 1, tokens.shape[-1]))
        tokens = np.concatenate([cls, tokens], axis=1)
    x = tokens + p["Transformer/posembed_input/pos_embedding"]
    for i in range(num_blocks(p)):
        x = encoder_block(p, i, x)
    x = layer_norm(
        x,
        p["Transformer/encoder_norm/scale"],
        p["Transformer/encoder_norm/bias"],
    )
    x = x[:, 0] if "cls" in p else x.mean(axis=1)
    if "pre_logits/kernel" in p:
        x = np.tanh(x @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    return x


def forward(p: Params, images: np.ndarray) -> np.ndarray:
    """Logits (or features if the arrays have no head), float64."""
    x = features(p, images)
    if "head/kernel" in p:
        kernel = np.asarray(p["head/kernel"], np.float64)
        x = x @ kernel + np.asarray(p["head/bias"], np.float64)
    return x
