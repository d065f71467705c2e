"""Writes tests/fixtures/hub/: tiny random ViTs saved by Hugging Face
`transformers` and by `timm` in their own layouts, with the outputs their
own PyTorch code gives on fixed images.

    pip install -e ".[hub_reference]"   # torch, torchvision, transformers, timm
    python scripts/make_hub_fixtures.py

tests/test_hub_weights.py loads each folder with keras_vit's loader (no
PyTorch) and compares its outputs with the stored ones: the reference is
the independent implementation that wrote the weights, not this project.

Folders (each with reference.npz: `pixels` uint8 (N, H, W, 3) and the
reference outputs):
- hf_vit_classifier: ViTForImageClassification, model.safetensors,
  id2label names; `logits`.
- hf_vit_model_bin: ViTModel with its pooler, pytorch_model.bin (torch.save
  of the state dict), preprocessor_config.json with ImageNet mean / std;
  `pooler_output`.
- timm_vit: timm VisionTransformer (class token, 3 classes),
  model.safetensors, ImageNet mean / std (as DeiT), label_names; `logits`.
- timm_deit_distilled: timm's distilled DeiT (a distillation token),
  pytorch_model.bin, which keras_vit refuses, naming the key.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import safetensors.torch
import timm
import torch
import transformers
from timm.models import _hub as timm_hub

ROOT = os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tests", "fixtures", "hub")
SIZE, PATCH = 32, 8
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random, LayerNorm scales around 1, so that each
    array's mapping shows in the outputs (default inits zero biases)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=generator)
            if p.ndim == 1 and ("norm" in name or "layernorm" in name) and (
                name.endswith("weight")
            ):
                p.copy_(1.0 + 0.2 * noise)
            else:
                p.copy_(0.3 * noise)


def _pixels(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (3, SIZE, SIZE, 3), dtype=np.uint8)


def _normalised(pixels: np.ndarray, mean, std) -> torch.Tensor:
    x = pixels.astype(np.float32) / 255.0
    x = (x - np.asarray(mean, np.float32)) / np.asarray(std, np.float32)
    return torch.from_numpy(x.transpose(0, 3, 1, 2).copy())


def _fresh(name: str) -> str:
    path = os.path.join(ROOT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _hf_config(**kwargs) -> transformers.ViTConfig:
    return transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, image_size=SIZE, patch_size=PATCH, **kwargs,
    )


def hf_classifier() -> None:
    path = _fresh("hf_vit_classifier")
    names = ["cat", "dog", "bird", "fish", "frog"]
    config = _hf_config(
        num_labels=len(names),
        id2label=dict(enumerate(names)),
        label2id={n: i for i, n in enumerate(names)},
    )
    model = transformers.ViTForImageClassification(config).eval()
    _randomise(model, 0)
    model.save_pretrained(path)
    pixels = _pixels(0)
    with torch.no_grad():
        logits = model(_normalised(pixels, (0.5,) * 3, (0.5,) * 3)).logits
    np.savez(os.path.join(path, "reference.npz"), pixels=pixels,
             logits=logits.numpy())


def hf_model_bin() -> None:
    path = _fresh("hf_vit_model_bin")
    model = transformers.ViTModel(_hf_config()).eval()
    _randomise(model, 1)
    # save_pretrained writes the hub naming (transformers 5 renames
    # its modules in memory); older releases wrote the same names with
    # torch.save, which is the file made here.
    model.save_pretrained(path)
    weights = os.path.join(path, "model.safetensors")
    torch.save(safetensors.torch.load_file(weights),
               os.path.join(path, "pytorch_model.bin"))
    os.remove(weights)
    transformers.ViTImageProcessor(
        image_mean=list(IMAGENET_MEAN), image_std=list(IMAGENET_STD),
        size={"height": SIZE, "width": SIZE},
    ).save_pretrained(path)
    pixels = _pixels(1)
    with torch.no_grad():
        out = model(_normalised(pixels, IMAGENET_MEAN, IMAGENET_STD))
    np.savez(os.path.join(path, "reference.npz"), pixels=pixels,
             pooler_output=out.pooler_output.numpy())


def _timm_save(model, path: str, args: dict, names=None,
               safetensors: bool = True) -> None:
    model.pretrained_cfg = dict(
        model.pretrained_cfg, mean=IMAGENET_MEAN, std=IMAGENET_STD,
        input_size=(3, SIZE, SIZE),
    )
    config = {"label_names": names} if names else None
    timm_hub.save_for_hf(model, path, model_config=config, model_args=args,
                         safe_serialization=safetensors)


def timm_vit() -> None:
    path = _fresh("timm_vit")
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=32, depth=2,
                num_heads=4, mlp_ratio=2.0, num_classes=3)
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 2)
    _timm_save(model, path, args, ["red", "green", "blue"])
    pixels = _pixels(2)
    with torch.no_grad():
        logits = model(_normalised(pixels, IMAGENET_MEAN, IMAGENET_STD))
    np.savez(os.path.join(path, "reference.npz"), pixels=pixels,
             logits=logits.numpy())


def timm_deit_distilled() -> None:
    path = _fresh("timm_deit_distilled")
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=2)
    model = timm.create_model(
        "deit_tiny_distilled_patch16_224", **args
    ).eval()
    _randomise(model, 3)
    _timm_save(model, path, args, safetensors=False)


def main() -> None:
    os.makedirs(ROOT, exist_ok=True)
    hf_classifier()
    hf_model_bin()
    timm_vit()
    timm_deit_distilled()
    versions = {"torch": torch.__version__,
                "transformers": transformers.__version__,
                "timm": timm.__version__}
    with open(os.path.join(ROOT, "versions.json"), "w") as f:
        json.dump(versions, f, indent=2)
        f.write("\n")
    print(f"wrote {ROOT} with {versions}")


if __name__ == "__main__":
    main()
