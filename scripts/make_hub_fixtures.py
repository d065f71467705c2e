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
- timm_deit_distilled_named: the same saved from the named model, its
  config's model_args without num_heads (as timm writes for a name).
- hf_vit_model_relu: ViTModel with pooler_act "relu"; `pooler_output`.
- hf_vit_model_quick_gelu: ViTModel with pooler_act "quick_gelu" (no exact
  Keras activation: refused).
- hf_vit_v5_state_dict: torch.save(ViTForImageClassification.state_dict())
  of transformers 5 (`vit.layers.0.attention.q_proj.weight`, ...) beside
  its config.json; `logits`.
- timm_vit_gap: timm's `vit_base_patch16_gap_224` layout (no class token,
  global_pool "avg", fc_norm False: the official GAP models); `logits`.
- timm_vit_token_fc_norm: class-token pooling with fc_norm=True (the
  final norm applied after pooling); `logits`.
- timm_vit_label_dict: timm_vit's kind with label_names as {id: name}.
- timm_vit_avg_fc_norm (no class token), timm_vit_avg_class_token
  (fc_norm False), timm_vit_avg_class_token_fc_norm, timm_vit_pre_norm,
  timm_vit_no_embed_class: models this ViT does not compute (refused).
- Read as the library reads the folder (each reference from the library's
  own loader: transformers' from_pretrained, timm's
  create_model("local-dir:...", pretrained=True) and resolve_data_config):
  hf_vit_classifier_stray_pooler (ViTForImageClassification whose file
  also holds vit.pooler.*, which transformers ignores; `logits`),
  hf_vit_model_stray_classifier (ViTModel with classifier.*;
  `pooler_output`), hf_vit_no_normalize (do_normalize false),
  hf_vit_rescale (rescale_factor 1/100 and its own mean / std),
  hf_vit_no_rescale (do_rescale false, mean / std in pixel units): each
  `logits` of the processor's pixel_values; timm_vit_img_size_args
  (model_args img_size 16 x 64 beside pretrained_cfg input_size 32 x 32:
  timm builds a 2 x 8 grid), timm_vit_no_mean_std (no mean / std in
  pretrained_cfg: timm's ImageNet defaults).
- Models the libraries run that need a mapping: hf_vit_size_remainder and
  timm_vit_size_remainder (image size 35, patch 8: the convolution drops
  the last 3 pixel rows and columns; reference pixels are 35 x 35),
  timm_vit_mlp_ratio (mlp_ratio 2.3, an MLP int(2.3 * 16) = 36 wide);
  hf_vit_patch_8x4 and timm_vit_patch_8x4 (non-square patches, refused).
- Configs and files the libraries read their own way (references from
  their loaders): hf_vit_qkv_bias_false_stray (qkv_bias false beside
  stored biases, which transformers ignores), hf_vit_default_heads (no
  num_attention_heads: ViTConfig's 12), timm_vit_dynamic_pad
  (dynamic_img_pad at whole patches), timm_vit_kernel_2d (a 2-D patch
  kernel, reshaped by timm's checkpoint filter), timm_vit_ema_checkpoint
  (a training checkpoint with state_dict and a module.-prefixed
  state_dict_ema, which timm's load_state_dict takes).
- resized/: hf_vit_classifier.npz (transformers with
  interpolate_pos_encoding=True) and timm_vit.npz (timm's own model built
  at another img_size from the folder, its checkpoint filter resampling
  pos_embed) at 48 x 48, 16 x 16 and 24 x 40: `pixels_HxW`, `logits_HxW`.
- bicubic.npz: torch.nn.functional.interpolate(mode="bicubic",
  align_corners=False) of random grids, with and without antialias.
- activations.npz: transformers' ACT2FN of each pooler activation keras_vit
  maps to a Keras activation, on a fixed grid.
- library_fields.json: the fields of transformers' ViTConfig and the
  arguments of timm's VisionTransformer, for the audit test.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil

import numpy as np

# The reference packages (the hub_reference extra) are imported in main(),
# so that the command line parses without them.
safetensors = timm = timm_hub = torch = transformers = None

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


def _reference(path: str, model, seed: int, mean=(0.5,) * 3,
               std=(0.5,) * 3, output: str = "logits") -> None:
    """Stores `model`'s `output` on fixed images as reference.npz."""
    pixels = _pixels(seed)
    with torch.no_grad():
        out = model(_normalised(pixels, mean, std))
    if not torch.is_tensor(out):
        out = getattr(out, output)
    np.savez(os.path.join(path, "reference.npz"), pixels=pixels,
             **{output: out.numpy()})


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
    _reference(path, model, 0)


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
    _reference(path, model, 1, IMAGENET_MEAN, IMAGENET_STD,
               output="pooler_output")


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
    _reference(path, model, 2, IMAGENET_MEAN, IMAGENET_STD)


def timm_deit_distilled() -> None:
    path = _fresh("timm_deit_distilled")
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=2)
    model = timm.create_model(
        "deit_tiny_distilled_patch16_224", **args
    ).eval()
    _randomise(model, 3)
    _timm_save(model, path, args, safetensors=False)


def _hf_pooler(name: str, act: str, seed: int) -> None:
    path = _fresh(name)
    config = transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, image_size=SIZE, patch_size=PATCH,
        pooler_act=act,
    )
    model = transformers.ViTModel(config).eval()
    _randomise(model, seed)
    model.save_pretrained(path)
    _reference(path, model, seed, output="pooler_output")


def hf_v5_state_dict() -> None:
    path = _fresh("hf_vit_v5_state_dict")
    config = _hf_config(num_labels=4)
    model = transformers.ViTForImageClassification(config).eval()
    _randomise(model, 6)
    config.save_pretrained(path)
    # The module names of transformers 5, as a user's torch.save gives.
    torch.save(model.state_dict(), os.path.join(path, "pytorch_model.bin"))
    _reference(path, model, 6)


def activations() -> None:
    from transformers.activations import ACT2FN
    x = np.linspace(-6, 6, 241).astype(np.float32)
    out = {"x": x}
    for name in ("tanh", "relu", "relu6", "sigmoid", "silu", "swish", "gelu",
                 "gelu_python", "linear", "mish", "hardswish", "quick_gelu",
                 "gelu_new", "leaky_relu"):
        with torch.no_grad():
            out[name] = ACT2FN[name](torch.from_numpy(x)).numpy()
    np.savez(os.path.join(ROOT, "activations.npz"), **out)


def _timm_model(name: str, arch: str, seed: int, save_args: dict,
                save: bool = True, **kwargs):
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=3, **kwargs)
    model = timm.create_model(arch, **args).eval()
    _randomise(model, seed)
    path = _fresh(name)
    if save:
        _timm_save(model, path, {**args, **save_args})
    _reference(path, model, seed, IMAGENET_MEAN, IMAGENET_STD)
    return model, path, args


def timm_variants() -> None:
    _timm_model("timm_vit_gap", "vit_base_patch16_gap_224", 7, {})
    _timm_model("timm_vit_token_fc_norm", "vit_tiny_patch16_224", 8, {},
                fc_norm=True)
    _timm_model("timm_vit_avg_fc_norm", "vit_tiny_patch16_224", 9, {},
                global_pool="avg", class_token=False)
    _timm_model("timm_vit_avg_class_token_fc_norm", "vit_tiny_patch16_224",
                15, {}, global_pool="avg")
    _timm_model("timm_vit_avg_class_token", "vit_tiny_patch16_224", 10, {},
                global_pool="avg", fc_norm=False)
    _timm_model("timm_vit_pre_norm", "vit_tiny_patch16_224", 11, {},
                pre_norm=True)
    _timm_model("timm_vit_no_embed_class", "vit_tiny_patch16_224", 12, {},
                no_embed_class=True)
    model, path, args = _timm_model("timm_vit_label_dict",
                                    "vit_tiny_patch16_224", 13, {},
                                    save=False)
    model.pretrained_cfg = dict(
        model.pretrained_cfg, mean=IMAGENET_MEAN, std=IMAGENET_STD,
        input_size=(3, SIZE, SIZE),
    )
    timm_hub.save_for_hf(
        model, path, model_args=args, safe_serialization=True,
        model_config={"label_names": {0: "red", 1: "green", 2: "blue"}})


def timm_deit_distilled_named() -> None:
    # The named model's own head count (3): model_args record only what
    # was passed.
    path = _fresh("timm_deit_distilled_named")
    model = timm.create_model(
        "deit_tiny_distilled_patch16_224", img_size=SIZE, patch_size=PATCH,
        embed_dim=24, depth=1, num_classes=2,
    ).eval()
    _randomise(model, 14)
    model.pretrained_cfg = dict(model.pretrained_cfg,
                                input_size=(3, SIZE, SIZE))
    timm_hub.save_for_hf(model, path, safe_serialization=True)


def _pixels_at(seed: int, height: int, width: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (2, height, width, 3), dtype=np.uint8)


def _save_logits(path: str, pixels, out, output: str = "logits") -> None:
    if not torch.is_tensor(out):
        out = getattr(out, output)
    np.savez(os.path.join(path, "reference.npz"), pixels=pixels,
             **{output: out.detach().numpy()})


def _hf_from_folder(path: str, cls, pixels, processor_kwargs=None,
                    output: str = "logits") -> None:
    """The reference as transformers reads `path`: its class's
    from_pretrained and, with `processor_kwargs`, its image processor's
    pixel_values (no resize: the pixels are at the model's size)."""
    model = cls.from_pretrained(path).eval()
    if processor_kwargs is None:
        values = _normalised(pixels, (0.5,) * 3, (0.5,) * 3)
    else:
        processor = transformers.AutoImageProcessor.from_pretrained(path)
        values = processor(list(pixels), do_resize=False,
                           return_tensors="pt")["pixel_values"]
    with torch.no_grad():
        _save_logits(path, pixels, model(values), output)


def hf_stray_arrays() -> None:
    # A classifier's folder whose file also holds a pooler.
    path = _fresh("hf_vit_classifier_stray_pooler")
    model = transformers.ViTForImageClassification(
        _hf_config(num_labels=3)).eval()
    _randomise(model, 20)
    model.save_pretrained(path)
    weights = os.path.join(path, "model.safetensors")
    arrays = safetensors.torch.load_file(weights)
    generator = torch.Generator().manual_seed(21)
    arrays["vit.pooler.dense.weight"] = torch.randn(32, 32,
                                                    generator=generator)
    arrays["vit.pooler.dense.bias"] = torch.randn(32, generator=generator)
    safetensors.torch.save_file(arrays, weights, metadata={"format": "pt"})
    _hf_from_folder(path, transformers.ViTForImageClassification,
                    _pixels(20))
    # A ViTModel's folder whose file also holds a classifier.
    path = _fresh("hf_vit_model_stray_classifier")
    model = transformers.ViTModel(_hf_config()).eval()
    _randomise(model, 22)
    model.save_pretrained(path)
    weights = os.path.join(path, "model.safetensors")
    arrays = safetensors.torch.load_file(weights)
    arrays["classifier.weight"] = torch.randn(4, 32, generator=generator)
    arrays["classifier.bias"] = torch.randn(4, generator=generator)
    safetensors.torch.save_file(arrays, weights, metadata={"format": "pt"})
    _hf_from_folder(path, transformers.ViTModel, _pixels(22),
                    output="pooler_output")


def hf_processors() -> None:
    for seed, name, kwargs in (
        (23, "hf_vit_no_normalize", dict(do_normalize=False)),
        (24, "hf_vit_rescale", dict(rescale_factor=0.01,
                                    image_mean=[0.3, 0.4, 0.5],
                                    image_std=[0.2, 0.3, 0.4])),
        (25, "hf_vit_no_rescale", dict(do_rescale=False,
                                       image_mean=[100.0, 120.0, 130.0],
                                       image_std=[50.0, 60.0, 70.0])),
    ):
        path = _fresh(name)
        model = transformers.ViTForImageClassification(
            _hf_config(num_labels=3)).eval()
        _randomise(model, seed)
        model.save_pretrained(path)
        transformers.ViTImageProcessor(
            size={"height": SIZE, "width": SIZE}, **kwargs
        ).save_pretrained(path)
        _hf_from_folder(path, transformers.ViTForImageClassification,
                        _pixels(seed), kwargs)


def _timm_from_folder(path: str, pixels, **kwargs):
    """timm's own model and data config of `path` (create_model
    "local-dir:", pretrained), and its logits on `pixels`."""
    model = timm.create_model("local-dir:" + path, pretrained=True,
                              **kwargs).eval()
    data = timm.data.resolve_data_config(model=model)
    with torch.no_grad():
        return model(_normalised(pixels, data["mean"], data["std"]))


def _edit_config(path: str, edit) -> None:
    config_path = os.path.join(path, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    edit(config)
    with open(config_path, "w") as f:
        json.dump(config, f, indent=2)


def timm_read_as_timm() -> None:
    # model_args' img_size wins over pretrained_cfg's input_size.
    args = dict(img_size=(16, 64), patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=3)
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 26)
    path = _fresh("timm_vit_img_size_args")
    _timm_save(model, path, args)

    def square_input(config):
        config["pretrained_cfg"]["input_size"] = [3, SIZE, SIZE]
    _edit_config(path, square_input)
    pixels = _pixels_at(26, 16, 64)
    _save_logits(path, pixels, _timm_from_folder(path, pixels))
    # No mean / std in the config.
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=3)
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 27)
    path = _fresh("timm_vit_no_mean_std")
    _timm_save(model, path, args)

    def no_mean_std(config):
        del config["pretrained_cfg"]["mean"], config["pretrained_cfg"]["std"]
    _edit_config(path, no_mean_std)
    pixels = _pixels(27)
    _save_logits(path, pixels, _timm_from_folder(path, pixels))


def mapped_models() -> None:
    # Image size 35 with 8-pixel patches: a 4 x 4 grid, 3 pixels dropped.
    path = _fresh("hf_vit_size_remainder")
    config = transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, image_size=35, patch_size=PATCH, num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    _randomise(model, 28)
    model.save_pretrained(path)
    _hf_from_folder(path, transformers.ViTForImageClassification,
                    _pixels_at(28, 35, 35))
    for seed, name, kwargs in (
        (29, "timm_vit_size_remainder", dict(img_size=35)),
        (30, "timm_vit_mlp_ratio", dict(mlp_ratio=2.3)),
    ):
        args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                    num_heads=2, mlp_ratio=2.0, num_classes=3)
        args.update(kwargs)
        model = timm.create_model("vit_tiny_patch16_224", **args).eval()
        _randomise(model, seed)
        path = _fresh(name)
        _timm_save(model, path, args)
        size = args["img_size"]
        pixels = _pixels_at(seed, size, size)
        _save_logits(path, pixels, _timm_from_folder(path, pixels))
    # Non-square patches, which both libraries build.
    path = _fresh("hf_vit_patch_8x4")
    config = transformers.ViTConfig(
        hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, image_size=SIZE, patch_size=[8, 4],
        num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    _randomise(model, 31)
    model.save_pretrained(path)
    args = dict(img_size=SIZE, patch_size=(8, 4), embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=3)
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 32)
    path = _fresh("timm_vit_patch_8x4")
    _timm_save(model, path, args)


def config_variants() -> None:
    """Configs and files each library reads its own way (each reference
    from the library's own loader of the folder)."""
    # qkv_bias false beside stored q/k/v biases: transformers builds none
    # and ignores them.
    path = _fresh("hf_vit_qkv_bias_false_stray")
    model = transformers.ViTForImageClassification(
        _hf_config(num_labels=3)).eval()
    _randomise(model, 60)
    model.save_pretrained(path)
    _edit_config(path, lambda config: config.update(qkv_bias=False))
    _hf_from_folder(path, transformers.ViTForImageClassification,
                    _pixels(60))
    # No num_attention_heads: ViTConfig's default, 12 (width 24).
    path = _fresh("hf_vit_default_heads")
    config = transformers.ViTConfig(
        hidden_size=24, num_hidden_layers=1, num_attention_heads=12,
        intermediate_size=32, image_size=SIZE, patch_size=PATCH,
        num_labels=3)
    model = transformers.ViTForImageClassification(config).eval()
    _randomise(model, 61)
    model.save_pretrained(path)
    _edit_config(path, lambda config: config.pop("num_attention_heads"))
    _hf_from_folder(path, transformers.ViTForImageClassification,
                    _pixels(61))
    args = dict(img_size=SIZE, patch_size=PATCH, embed_dim=16, depth=1,
                num_heads=2, mlp_ratio=2.0, num_classes=3)
    # dynamic_img_pad at whole patches: nothing padded.
    model = timm.create_model("vit_tiny_patch16_224", dynamic_img_pad=True,
                              **args).eval()
    _randomise(model, 62)
    path = _fresh("timm_vit_dynamic_pad")
    _timm_save(model, path, dict(args, dynamic_img_pad=True))
    _save_logits(path, _pixels(62), _timm_from_folder(path, _pixels(62)))
    # A 2-D patch kernel (out, 3 * P * P), reshaped by timm's filter.
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 63)
    path = _fresh("timm_vit_kernel_2d")
    _timm_save(model, path, args)
    weights = os.path.join(path, "model.safetensors")
    arrays = safetensors.torch.load_file(weights)
    kernel = arrays["patch_embed.proj.weight"]
    arrays["patch_embed.proj.weight"] = kernel.reshape(kernel.shape[0], -1)
    safetensors.torch.save_file(arrays, weights, metadata={"format": "pt"})
    _save_logits(path, _pixels(63), _timm_from_folder(path, _pixels(63)))
    # A training checkpoint: state_dict and state_dict_ema (keys with
    # DDP's module. prefix), which timm's loader takes.
    model = timm.create_model("vit_tiny_patch16_224", **args).eval()
    _randomise(model, 64)
    path = _fresh("timm_vit_ema_checkpoint")
    _timm_save(model, path, args, safetensors=False)
    ema = {"module." + k: v for k, v in model.state_dict().items()}
    _randomise(model, 65)
    torch.save({"state_dict": model.state_dict(), "state_dict_ema": ema,
                "epoch": 3}, os.path.join(path, "pytorch_model.bin"))
    _save_logits(path, _pixels(64), _timm_from_folder(path, _pixels(64)))


RESIZED = ((48, 48), (16, 16), (24, 40))


def resized() -> None:
    """The libraries' own models at other resolutions, from the
    hf_vit_classifier and timm_vit folders."""
    folder = os.path.join(ROOT, "resized")
    os.makedirs(folder, exist_ok=True)
    hf = transformers.ViTForImageClassification.from_pretrained(
        os.path.join(ROOT, "hf_vit_classifier")).eval()
    out_hf, out_timm = {}, {}
    for i, (height, width) in enumerate(RESIZED):
        key = f"{height}x{width}"
        pixels = _pixels_at(40 + i, height, width)
        with torch.no_grad():
            out_hf[f"logits_{key}"] = hf(
                _normalised(pixels, (0.5,) * 3, (0.5,) * 3),
                interpolate_pos_encoding=True).logits.numpy()
        out_hf[f"pixels_{key}"] = pixels
        out_timm[f"pixels_{key}"] = pixels
        out_timm[f"logits_{key}"] = _timm_from_folder(
            os.path.join(ROOT, "timm_vit"), pixels,
            img_size=(height, width)).numpy()
    np.savez(os.path.join(folder, "hf_vit_classifier.npz"), **out_hf)
    np.savez(os.path.join(folder, "timm_vit.npz"), **out_timm)


def bicubic() -> None:
    """torch's bicubic resize of random (1, D, rows, cols) grids."""
    rng = np.random.default_rng(50)
    out = {}
    for old, new in (((4, 4), (6, 6)), ((6, 6), (2, 2)), ((4, 4), (3, 5)),
                     ((2, 8), (5, 7)), ((7, 3), (7, 3)), ((5, 5), (1, 9))):
        grid = rng.normal(size=(1, 3, *old))
        key = "{}x{}_{}x{}".format(*old, *new)
        out[f"in_{key}"] = grid
        for antialias in (False, True):
            out[f"out_{key}_{'aa' if antialias else 'plain'}"] = (
                torch.nn.functional.interpolate(
                    torch.from_numpy(grid), size=new, mode="bicubic",
                    align_corners=False, antialias=antialias).numpy())
    np.savez(os.path.join(ROOT, "bicubic.npz"), **out)


def library_fields() -> None:
    base = set(transformers.PretrainedConfig().to_dict())
    vit = [k for k in transformers.ViTConfig().to_dict() if k not in base]
    timm_args = [
        k for k in inspect.signature(
            timm.models.vision_transformer.VisionTransformer.__init__
        ).parameters if k != "self"
    ]
    with open(os.path.join(ROOT, "library_fields.json"), "w") as f:
        json.dump({"transformers.ViTConfig": sorted(vit),
                   "timm.VisionTransformer": timm_args}, f, indent=2)
        f.write("\n")


def build_parser() -> argparse.ArgumentParser:
    """--only NAME ...: write only these groups (the functions of
    GROUPS); the fixtures are fixed otherwise."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", nargs="+", metavar="GROUP",
                        help="write only these groups (default: all)")
    return parser


def main() -> None:
    global safetensors, timm, timm_hub, torch, transformers
    args = build_parser().parse_args()
    import safetensors.torch
    import timm
    import timm.data
    import torch
    import transformers
    from timm.models import _hub as timm_hub

    os.makedirs(ROOT, exist_ok=True)
    groups = {
        "hf_classifier": hf_classifier,
        "hf_model_bin": hf_model_bin,
        "timm_vit": timm_vit,
        "timm_deit_distilled": timm_deit_distilled,
        "timm_deit_distilled_named": timm_deit_distilled_named,
        "hf_poolers": lambda: (
            _hf_pooler("hf_vit_model_relu", "relu", 4),
            _hf_pooler("hf_vit_model_quick_gelu", "quick_gelu", 5)),
        "hf_v5_state_dict": hf_v5_state_dict,
        "timm_variants": timm_variants,
        "hf_stray_arrays": hf_stray_arrays,
        "hf_processors": hf_processors,
        "timm_read_as_timm": timm_read_as_timm,
        "mapped_models": mapped_models,
        "config_variants": config_variants,
        "resized": resized,  # after hf_classifier and timm_vit
        "bicubic": bicubic,
        "activations": activations,
        "library_fields": library_fields,
    }
    unknown = set(args.only or ()) - set(groups)
    if unknown:
        raise SystemExit(f"unknown groups {sorted(unknown)}; "
                         f"known: {', '.join(groups)}")
    for name, write in groups.items():
        if not args.only or name in args.only:
            write()
    versions = {"torch": torch.__version__,
                "transformers": transformers.__version__,
                "timm": timm.__version__}
    with open(os.path.join(ROOT, "versions.json"), "w") as f:
        json.dump(versions, f, indent=2)
        f.write("\n")
    print(f"wrote {ROOT} with {versions}")


if __name__ == "__main__":
    main()
