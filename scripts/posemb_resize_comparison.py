"""How keras_vit resizes the position embeddings of hub weights, against
timm and transformers, measured. Writes docs/results/posemb_resize.json.

    pip install -e ".[hub_reference]"   # torch, torchvision, transformers, timm
    python scripts/posemb_resize_comparison.py

The official ViT code resizes the patch grid of a position embedding
bilinearly with corners aligned (`scipy.ndimage.zoom(order=1)`;
`keras_vit.checkpoint.posemb.resize_position_embedding`, used for .npz
files). timm resamples bicubically with antialiasing and half-pixel
centres (`resample_abs_pos_embed`, used when a checkpoint is loaded at
another img_size); transformers' `interpolate_pos_encoding=True`
bicubically with half-pixel centres, without antialiasing. keras_vit
resizes the table of hub weights the way the library that wrote them does
(`posemb.resize_like_library`). Two comparisons:

- tables: big_vision's 2-D sin-cos embedding of ViT-B/16 (width 768, a
  smooth table like the learned ones), 14x14 -> 24x24 (224 -> 384 px) and
  24x24 -> 14x14, resized by each library's own function, by the official
  interpolation and by keras_vit's library-way resizing; the difference
  relative to the table's RMS.
- outputs: the tiny models of tests/fixtures/hub (random weights, written
  by timm and transformers) run at another resolution by keras_vit
  (`load_model(folder, image_size)`) and by the library that wrote them;
  the logit difference relative to the largest logit, the share of 64
  random images whose top-1 class agrees, and the difference had the
  table been resized with the official interpolation instead. At the
  stored 32 px the outputs agree to float32 rounding, which checks the
  setup.
"""

from __future__ import annotations

import argparse
import json
import os

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: F401

# isort: split
import keras
import numpy as np

try:  # the hub_reference extra; main() names it when it is missing
    import timm
    import torch
    import transformers
    from timm.layers import resample_abs_pos_embed
except ImportError:
    timm = torch = transformers = resample_abs_pos_embed = None

from keras_vit.checkpoint import posemb
from keras_vit.checkpoint.formats.npz import POSEMB
from keras_vit.checkpoint.hub import model as hub_model
from keras_vit.checkpoint.hub import reader as hub
from keras_vit.embedding import sincos2d_table
from keras_vit.storage.atomic import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "hub")
OUTPUT = os.path.join(ROOT, "docs", "results", "posemb_resize.json")


def _stats(mine: np.ndarray, theirs: np.ndarray, scale: float) -> dict:
    diff = mine - theirs
    return {"max_abs": float(np.abs(diff).max()),
            "rms_relative": float(np.sqrt((diff ** 2).mean()) / scale)}


def _transformers_resize(table: np.ndarray, old: int, new: int) -> np.ndarray:
    """transformers' own ViTEmbeddings.interpolate_pos_encoding."""
    width = table.shape[-1]
    config = transformers.ViTConfig(hidden_size=width, image_size=old,
                                    patch_size=1, num_attention_heads=1)
    embeddings = transformers.models.vit.modeling_vit.ViTEmbeddings(config)
    with torch.no_grad():
        embeddings.position_embeddings.copy_(torch.from_numpy(
            np.concatenate([np.zeros((1, width)), table])[None]).float())
        out = embeddings.interpolate_pos_encoding(
            torch.zeros(1, new * new + 1, width), new, new)
    return out[0, 1:].numpy()


def tables() -> dict:
    results = {}
    for old, new in ((14, 24), (24, 14)):
        table = keras.ops.convert_to_numpy(
            sincos2d_table(old, old, 768)).reshape(old * old, 768)
        scale = float(np.sqrt((table ** 2).mean()))
        official = posemb.resize_position_embedding(
            table, new, old, num_prefix_tokens=0)
        as_timm, as_hf = (
            posemb.resize_like_library(table[None], new, old, 0, library)[0]
            for library in (hub.TIMM, hub.HUGGINGFACE))
        with torch.no_grad():
            timm_out = resample_abs_pos_embed(
                torch.from_numpy(table)[None].float(), [new, new],
                [old, old], num_prefix_tokens=0)[0].numpy()
        hf_out = _transformers_resize(table, old, new)
        results[f"{old}x{old}->{new}x{new}"] = {
            "official_vs_timm": _stats(official, timm_out, scale),
            "official_vs_transformers": _stats(official, hf_out, scale),
            "keras_vit_timm_way_vs_timm": _stats(as_timm, timm_out, scale),
            "keras_vit_transformers_way_vs_transformers": _stats(
                as_hf, hf_out, scale),
            "timm_vs_transformers": _stats(timm_out, hf_out, scale),
        }
    return results


def _images(count: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (count, size, size, 3), dtype=np.uint8)


def _normalised(pixels, mean, std) -> torch.Tensor:
    x = (pixels / 255.0 - np.asarray(mean)) / np.asarray(std)
    return torch.from_numpy(x.transpose(0, 3, 1, 2).astype(np.float32))


def _keras_logits(folder: str, size: int, pixels,
                  official: bool = False) -> np.ndarray:
    """keras_vit's model of `folder` at `size`; with `official`, its
    table resized by the official interpolation instead."""
    checkpoint = hub.read_hub(folder)
    if official:
        patch = checkpoint.arrays["embedding/kernel"].shape[0]
        table = checkpoint.arrays[POSEMB]
        checkpoint.arrays = dict(checkpoint.arrays, **{
            POSEMB: posemb.resize_position_embedding(
                table, size // patch, checkpoint.posemb_grid, 1)})
        checkpoint.posemb_grid = (size // patch,) * 2
    model, _ = hub_model.model_from_hub(checkpoint, size, None, None,
                                        object(), True)
    x = pixels.astype(np.float32) / 127.5 - 1.0
    return keras.ops.convert_to_numpy(model(x, training=False))


def _timm_logits(folder: str, size: int, pixels) -> np.ndarray:
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    args = dict(config["model_args"], img_size=size)
    model = timm.create_model(
        config["architecture"],
        pretrained_cfg_overlay={
            "file": os.path.join(folder, "model.safetensors"),
            "num_classes": config["num_classes"]},
        pretrained=True, **args).eval()  # timm resamples pos_embed here
    cfg = config["pretrained_cfg"]
    with torch.no_grad():
        return model(_normalised(pixels, cfg["mean"], cfg["std"])).numpy()


def _transformers_logits(folder: str, pixels) -> np.ndarray:
    model = transformers.ViTForImageClassification.from_pretrained(
        folder).eval()
    with torch.no_grad():
        return model(_normalised(pixels, [0.5] * 3, [0.5] * 3),
                     interpolate_pos_encoding=True).logits.numpy()


def outputs() -> dict:
    results = {}
    for size in (32, 16, 48, 64):  # 32: the stored size, a set-up check
        pixels = _images(64, size)
        for name, theirs in (
            ("timm_vit", lambda f: _timm_logits(f, size, pixels)),
            ("hf_vit_classifier", lambda f: _transformers_logits(f, pixels)),
        ):
            folder = os.path.join(FIXTURES, name)
            mine = _keras_logits(folder, size, pixels)
            official = _keras_logits(folder, size, pixels, official=True)
            other = theirs(folder)
            scale = float(np.abs(other).max())
            results[f"{name} 32px->{size}px"] = {
                "max_abs_logit_difference_relative": float(
                    np.abs(mine - other).max() / scale),
                "official_resize_max_abs_logit_difference_relative": float(
                    np.abs(official - other).max() / scale),
                "top1_agreement": float(
                    (mine.argmax(-1) == other.argmax(-1)).mean()),
                "images": len(pixels),
            }
    return results


def build_parser() -> argparse.ArgumentParser:
    """No options: the comparison and its output file are fixed."""
    return argparse.ArgumentParser(description=__doc__.split("\n")[0])


def main() -> None:
    build_parser().parse_args()
    if timm is None:
        raise SystemExit(
            "error: this comparison needs timm, torch and transformers: "
            "pip install -e \".[hub_reference]\"")
    result = {
        "what": "position-embedding resizing: the official bilinear "
                "(corners aligned) and keras_vit's library-way resizing "
                "of hub weights vs timm bicubic (antialiased, half-pixel) "
                "and transformers bicubic (half-pixel)",
        "versions": {"timm": timm.__version__,
                     "transformers": transformers.__version__,
                     "torch": torch.__version__},
        "sincos2d_B16_tables": tables(),
        "fixture_model_logits": outputs(),
    }
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    atomic_write(OUTPUT, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
