"""The arrays of a keras-hub ViT preset's `.weights.h5` files, in the
official layout.

Keras writes a model's weights as `layers/<attribute path>/vars/<i>`
(`keras.saving.save_weights`; the layers of a list by their class's
snake-case name, numbered from the second on). A ViTBackbone's are under
`vi_t_patching_and_embedding` (its class token, the patch Conv2D, the
position Embedding) and `vi_t_encoder` (`vi_t_encoder_block[_i]` with
`layer_norm_1`, `mha` (the query / key / value / output EinsumDense of
Keras's MultiHeadAttention), `layer_norm_2`, `mlp` (`dense_1`,
`dense_2`), then the final `layer_norm`); a ViTImageClassifier's head in
task.weights.h5 is `layers/dense` (and, with a pre-logits layer, that
layer first and the head as `layers/dense_1`).

The files are read with h5py, Keras's own reader of them. Before any
array is read, each dataset the config implies is checked as Keras's
loader checks it (a plain dataset: no soft or external link, no external
or virtual storage) and further: a real dtype, exactly the shape the
config gives, every dataset of the file placed (an optimizer's state
aside), and all of them at most `untrusted.memory_bound` of the file's
bytes.
"""

from __future__ import annotations

import os
from typing import Dict, Optional, Tuple

import h5py
import ml_dtypes
import numpy as np

from keras_vit.checkpoint.formats import h5_weights, untrusted
from keras_vit.checkpoint.formats.npz import POSEMB
from keras_vit.errors import UsageError

Shape = Tuple[int, ...]
_EMBED = "layers/vi_t_patching_and_embedding"
_ENCODER = "layers/vi_t_encoder"


def _block(i: int) -> str:
    suffix = f"_{i}" if i else ""
    return f"{_ENCODER}/encoder_layers/vi_t_encoder_block{suffix}"


def _dense(plan, official: str, stored: str, kernel: Shape, bias: bool):
    """Plans a Dense-like layer: kernel, and bias (zeros when not saved:
    None as its stored name)."""
    plan[f"{official}/kernel"] = (f"{stored}/vars/0", kernel)
    out = kernel[-1:] if len(kernel) != 3 or official.endswith("out") \
        else kernel[1:]
    plan[f"{official}/bias"] = (f"{stored}/vars/1" if bias else None, out)


def _norm(plan, official: str, stored: str, width: int) -> None:
    plan[f"{official}/scale"] = (f"{stored}/vars/0", (width,))
    plan[f"{official}/bias"] = (f"{stored}/vars/1", (width,))


def backbone_plan(sizes) -> Dict[str, Tuple[Optional[str], Shape]]:
    """official key -> (dataset name or None for zeros, shape), for a
    ViTBackbone of `sizes` (`keras_preset.backbone_sizes`)."""
    width, heads = sizes["hidden_dim"], sizes["num_heads"]
    head_dim, patch = width // heads, sizes["patch"]
    tokens = sizes["grid"][0] * sizes["grid"][1] + sizes["use_class_token"]
    plan: Dict[str, Tuple[Optional[str], Shape]] = {}
    _dense(plan, "embedding", f"{_EMBED}/patch_embedding",
           (patch, patch, 3, width), sizes["use_patch_bias"])
    plan[POSEMB] = (f"{_EMBED}/position_embedding/vars/0", (tokens, width))
    if sizes["use_class_token"]:
        plan["cls"] = (f"{_EMBED}/vars/0", (1, 1, width))
    for i in range(sizes["num_layers"]):
        block, stored = f"Transformer/encoderblock_{i}", _block(i)
        _norm(plan, f"{block}/LayerNorm_0", f"{stored}/layer_norm_1", width)
        _norm(plan, f"{block}/LayerNorm_2", f"{stored}/layer_norm_2", width)
        attention = f"{block}/MultiHeadDotProductAttention_1"
        for ours, theirs in (("query", "query"), ("key", "key"),
                             ("value", "value")):
            _dense(plan, f"{attention}/{ours}",
                   f"{stored}/mha/{theirs}_dense", (width, heads, head_dim),
                   sizes["use_mha_bias"])
        _dense(plan, f"{attention}/out", f"{stored}/mha/output_dense",
               (heads, head_dim, width), sizes["use_mha_bias"])
        mlp = f"{block}/MlpBlock_3"
        _dense(plan, f"{mlp}/Dense_0", f"{stored}/mlp/dense_1",
               (width, sizes["mlp_dim"]), sizes["use_mlp_bias"])
        _dense(plan, f"{mlp}/Dense_1", f"{stored}/mlp/dense_2",
               (sizes["mlp_dim"], width), sizes["use_mlp_bias"])
    _norm(plan, "Transformer/encoder_norm", f"{_ENCODER}/layer_norm", width)
    return plan


def head_plan(head, width: int) -> Dict[str, Tuple[Optional[str], Shape]]:
    """The plan of a ViTImageClassifier's head: `head` is (num_classes,
    intermediate_dim or None)."""
    classes, inner = head
    plan: Dict[str, Tuple[Optional[str], Shape]] = {}
    stored = "layers/dense"
    if inner is not None:
        _dense(plan, "pre_logits", stored, (width, inner), True)
        stored, width = "layers/dense_1", inner
    _dense(plan, "head", stored, (width, classes), True)
    return plan


def backbone_arrays(path: str, sizes) -> Dict[str, np.ndarray]:
    """The backbone's official-layout arrays from model.weights.h5."""
    arrays = read_planned(path, backbone_plan(sizes))
    arrays[POSEMB] = arrays[POSEMB][None]  # an Embedding's (N, D) table
    return arrays


def head_arrays(path: str, head, width: int) -> Dict[str, np.ndarray]:
    """The head's (and pre-logits layer's) arrays from task.weights.h5."""
    return read_planned(path, head_plan(head, width))


def read_planned(path: str, plan) -> Dict[str, np.ndarray]:
    """The arrays of `plan` (official key -> (dataset, shape)) from the
    .weights.h5 file `path`, each checked before any is read (the module
    doc)."""
    try:
        with h5py.File(path, "r") as f:
            names = h5_weights.dataset_names(f, path)
            datasets = {key: _checked(f, name, shape, path)
                        for key, (name, shape) in plan.items() if name}
            left = sorted(set(names) - {n for n, _ in plan.values() if n})
            if left:
                raise UsageError(
                    f"{path} has {len(left)} array(s) this ViT has no place "
                    f"for, first {left[0]} {f[left[0]].shape}: a model "
                    "with parts keras_vit's ViT does not compute, or "
                    "another config than the file's.")
            total = sum(d.size * d.dtype.itemsize for d in datasets.values())
            bound = untrusted.memory_bound(os.path.getsize(path))
            if total > bound:
                raise UsageError(f"{path}: its arrays declare {total} "
                                 f"bytes, more than {bound}; refused.")
            arrays = {key: _read(d) for key, d in datasets.items()}
    except UsageError:
        raise
    except h5_weights.H5_ERRORS as error:
        raise UsageError(f"{path} is not a readable HDF5 weights file "
                         f"({error}); download it again.") from None
    for key, (name, shape) in plan.items():
        if name is None:
            arrays[key] = np.zeros(shape, np.float32)
    return arrays


def _checked(f: h5py.File, name: str, shape: Shape, path: str):
    if name not in f or not isinstance(f[name], h5py.Dataset):
        raise UsageError(
            f"{path} has no array {name}: not the weights of the ViT its "
            "config describes.")
    dataset = f[name]
    h5_weights.check_dataset(dataset, path, name)
    if tuple(dataset.shape) != tuple(shape):
        raise UsageError(
            f"{path}: {name} has shape {tuple(dataset.shape)}, where the "
            f"config gives {tuple(shape)}.")
    return dataset


def _read(dataset) -> np.ndarray:
    if h5_weights.is_bfloat16(dataset):  # as Keras's H5Entry reads it
        return np.array(dataset, dtype=ml_dtypes.bfloat16).astype(
            np.float32)
    return np.asarray(dataset[()]).astype(np.float32)
