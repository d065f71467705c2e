"""Command line of `python -m keras_vit.export` (see
`keras_vit.export.saved_model`).

Exactly one model source: --keras_model (a .keras file), --npz (an official
checkpoint, with --variant, --num_classes and --image_size), --workdir (a
training run's folder; EMA weights by default) or --hub (a Hugging Face
layout directory of Hugging Face or timm ViT weights).

--format=saved_model (default) writes a versioned SavedModel for TF
Serving; --format=litert writes `<export_dir>/<model_name>.tflite` (and
`.labels.txt`) for LiteRT, --quantization float32, float16 or int8.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import List, Optional, Sequence

import keras

from keras_vit.checkpoint import loader
from keras_vit.checkpoint import workdir as wd
from keras_vit.export import litert
from keras_vit.export.saved_model import export_model
from keras_vit.errors import UsageError

_SOURCES = ("keras_model", "npz", "workdir", "hub")



def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The options of `python -m keras_vit.export`."""
    p = argparse.ArgumentParser(
        prog="python -m keras_vit.export",
        description="Export a ViT classifier as a versioned SavedModel for "
        "TF Serving, or as a LiteRT (.tflite) file.",
    )
    p.add_argument("--format", choices=("saved_model", "litert"),
                   default="saved_model",
                   help="saved_model: TF Serving (default); litert: "
                   "<export_dir>/<model_name>.tflite for phones and edge "
                   "devices")
    p.add_argument("--quantization", choices=litert.QUANTIZATIONS,
                   default="float32",
                   help="--format=litert: float32 (default), float16 "
                   "weights, or int8 (dynamic-range) weights")
    p.add_argument("--export_dir", required=True, help="model root for TF "
                   "Serving: writes <export_dir>/<model_name>/<version>/")
    p.add_argument("--model_name", default="vit",
                   help="the name clients use in URLs (default: vit)")
    source = p.add_argument_group("model source (exactly one)")
    source.add_argument("--keras_model", help="a .keras model file")
    source.add_argument("--npz", help="an official ViT .npz checkpoint")
    source.add_argument("--workdir", help="a training run's workdir")
    source.add_argument("--hub", help="a local directory in the Hugging "
                        "Face layout (config.json + model.safetensors or "
                        "pytorch_model.bin; Hugging Face ViT or timm)")
    p.add_argument("--no_ema", action="store_true",
                   help="--workdir: export the raw, not the EMA, weights")
    p.add_argument("--variant", help="--npz: e.g. B/16, R50+B/16; default: "
                   "inferred from the file")
    p.add_argument("--num_classes", type=int,
                   help="--npz: classes of the head (checked against the "
                   "file's)")
    p.add_argument("--image_size", type=int, default=224,
                   help="--npz: input resolution (default: 224)")
    p.add_argument("--representation_size", type=int,
                   help="--npz: pre-logits width; default: the file's")
    p.add_argument("--class_names", help="comma-separated class names, in "
                   "label order")
    p.add_argument("--class_names_file", help="a text file with one class "
                   "name per line, in label order")
    p.add_argument("--top_k", type=int, default=5,
                   help="top classes in each answer (default: 5)")
    p.add_argument("--version", type=int,
                   help="version number; default: the next free one")
    p.add_argument("--resize_size", type=int,
                   help="resize to this, then center-crop to the input size, "
                   "as evaluation does with the same setting; default: "
                   "resize directly (--workdir: the run's eval_resize_size)")
    p.add_argument("--warmup_images", nargs="+", help="image files (globs "
                   "allowed) for the warm-up file; default: synthetic")
    p.add_argument("--no_warmup", action="store_true",
                   help="write no warm-up file")
    p.add_argument("--serving_base_dir", help="where the server sees "
                   "--export_dir (e.g. /models in a container), for "
                   "models.config")
    p.add_argument("--no_verify", action="store_true", help="skip reloading "
                   "and checking the SavedModel before publishing it")
    p.add_argument("--dynamic_size", action="store_true",
                   help="also serve predict_any_size: pixels of any height "
                   "and width that are multiples of the model's stride, "
                   "run at that size (position embeddings interpolated on "
                   "every call)")
    return p


def load_source_model(args: argparse.Namespace) -> keras.Model:
    """keras.Model. The model named by the source options.

    An .npz's sizes, pooling, class count and pre-logits width come from
    the file unless the options give them; its head must be there (a new
    one would be untrained) and have --num_classes classes if that is
    given.
    """
    given = [s for s in _SOURCES if getattr(args, s)]
    if len(given) != 1:
        raise UsageError(
            "Give exactly one of --keras_model, --npz, --workdir or --hub "
            f"(got {', '.join('--' + s for s in given) or 'none'})."
        )
    if args.keras_model:
        if not os.path.exists(args.keras_model):
            raise UsageError(f"--keras_model {args.keras_model} does not "
                             "exist.")
        return loader.load_model(loader.Source(keras_model=args.keras_model))
    if args.workdir:
        return loader.load_model(
            loader.Source(workdir=args.workdir, use_ema=not args.no_ema)
        )
    if args.hub:
        model = loader.load_model(loader.Source(hub=args.hub))
        if model.layers[-1].name != "head":
            raise UsageError(
                f"{args.hub} has no classification head (a backbone such "
                "as ViTModel or a timm model with num_classes=0): nothing "
                "to classify with; fine-tune it first."
            )
        return model
    rep = args.representation_size
    model = loader.load_model(
        loader.Source(npz=args.npz, variant=args.variant),
        args.image_size,
        representation_size=loader.FROM_SOURCE if rep is None else rep,
    )
    layers = {layer.name for layer in model.layers}
    if "head" not in layers:
        raise UsageError(
            f"{args.npz} has no classification head, so there is nothing to "
            "serve: fine-tune it first (train.py with init.npz), then export "
            "the run's --workdir."
        )
    file_classes = int(model.output_shape[-1])
    if args.num_classes is not None and args.num_classes != file_classes:
        raise UsageError(
            f"--num_classes {args.num_classes} does not match the "
            f"{file_classes}-class head in {args.npz}; a new head would be "
            f"untrained. Drop --num_classes or pass {file_classes}."
        )
    return model


def class_names_from_args(args: argparse.Namespace) -> Optional[List[str]]:
    """list of str or None. Names from --class_names(_file) or the workdir."""
    if args.class_names and args.class_names_file:
        raise UsageError("Give --class_names or --class_names_file, not "
                         "both.")
    if args.class_names:
        return args.class_names.split(",")
    if args.class_names_file:
        with open(args.class_names_file, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f if line.strip()]
    if args.workdir:
        return wd.read_class_names(args.workdir)
    if args.hub:
        return loader.class_names(loader.Source(hub=args.hub))
    return None


def warmup_images_from_args(args: argparse.Namespace):
    """list of paths, [] for none, or None for the synthetic default."""
    if args.no_warmup:
        return []
    if not args.warmup_images:
        return None
    paths = []
    for pattern in args.warmup_images:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise UsageError(f"--warmup_images {pattern} matches no file.")
        paths.extend(matches)
    return paths


def resize_size_from_args(args: argparse.Namespace) -> Optional[int]:
    """int or None. --resize_size, else a workdir's eval_resize_size."""
    if args.resize_size is not None or not args.workdir:
        return args.resize_size
    # The run evaluated with this preprocessing; serving must match it.
    return wd.read_config(args.workdir).pp.eval_resize_size


def export_from_args(args: argparse.Namespace) -> str:
    """str. Exports the model `args` describe; the new version's path (or
    the .tflite file's)."""
    model = load_source_model(args)
    if args.format == "litert":
        return litert.export_litert(
            model,
            os.path.join(args.export_dir, f"{args.model_name}.tflite"),
            quantization=args.quantization,
            class_names=class_names_from_args(args),
            verify=not args.no_verify,
        )
    if args.quantization != "float32":
        raise UsageError("--quantization goes with --format=litert only.")
    return export_model(
        model,
        args.export_dir,
        model_name=args.model_name,
        class_names=class_names_from_args(args),
        top_k=args.top_k,
        warmup_images=warmup_images_from_args(args),
        version=args.version,
        resize_size=resize_size_from_args(args),
        serving_base_dir=args.serving_base_dir,
        verify=not args.no_verify,
        dynamic_size=args.dynamic_size,
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        path = export_from_args(args)
    except (ValueError, FileExistsError, FileNotFoundError,
            ImportError) as error:
        # Bad input, not a bug: the message says what to change.
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0
