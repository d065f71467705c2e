"""Command line of `python -m keras_vit.export.saved_model` (see `keras_vit.export.saved_model`).

Exactly one model source: --keras_model (a .keras file), --npz (an official
checkpoint, with --variant, --num_classes and --image_size) or --workdir (a
training run's folder; EMA weights by default).
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import List, Optional, Sequence

import keras

_SOURCES = ("keras_model", "npz", "workdir")


class UsageError(ValueError):
    """A command line that cannot work; the message says what to change."""


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The options of `python -m keras_vit.export.saved_model`."""
    p = argparse.ArgumentParser(
        prog="python -m keras_vit.export.saved_model",
        description="Export a ViT classifier as a versioned SavedModel for "
        "TF Serving.",
    )
    p.add_argument("--export_dir", required=True, help="model root for TF "
                   "Serving: writes <export_dir>/<model_name>/<version>/")
    p.add_argument("--model_name", default="vit",
                   help="the name clients use in URLs (default: vit)")
    source = p.add_argument_group("model source (exactly one)")
    source.add_argument("--keras_model", help="a .keras model file")
    source.add_argument("--npz", help="an official ViT .npz checkpoint")
    source.add_argument("--workdir", help="a training run's workdir")
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
    return p


def _lazy_import(module: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UsageError(
            f"{what} needs {module}, which cannot be imported ({e}). "
            "Use --keras_model with a .keras file instead."
        ) from None


def load_source_model(args: argparse.Namespace) -> keras.Model:
    """keras.Model. The model named by the source options."""
    given = [s for s in _SOURCES if getattr(args, s)]
    if len(given) != 1:
        raise UsageError(
            "Give exactly one of --keras_model, --npz or --workdir "
            f"(got {', '.join('--' + s for s in given) or 'none'})."
        )
    if args.keras_model:
        import keras_vit  # noqa: F401  (registers the custom layers)

        if not os.path.exists(args.keras_model):
            raise UsageError(f"--keras_model {args.keras_model} does not "
                             "exist.")
        return keras.saving.load_model(args.keras_model, compile=False)
    if args.npz:
        return model_from_npz(
            args.npz,
            variant=args.variant,
            num_classes=args.num_classes,
            image_size=args.image_size,
            representation_size=args.representation_size,
        )
    workdir = _lazy_import("keras_vit.checkpoint.workdir", "--workdir")
    return workdir.restore_model(args.workdir, use_ema=not args.no_ema)


def model_from_npz(
    path: str,
    *,
    variant: Optional[str] = None,
    num_classes: Optional[int] = None,
    image_size: int = 224,
    representation_size: Optional[int] = None,
) -> keras.Model:
    """A classifier with the weights of an official .npz checkpoint.

    The file is read once; its shapes give what the flags leave out: the
    architecture when `variant` is None, the pooling, the class count, and
    the pre-logits width (kept with the file's head).

    Args:
        path: str. Local path or gs:// URL of the .npz file.
        variant: str or None. e.g. "B/16"; None infers the sizes.
        num_classes: int or None. Must match the file's head if given.
        image_size: int. Input resolution (the position embedding is
            resized to it).
        representation_size: int or None. Pre-logits width; None takes the
            file's.

    Returns:
        keras.Model. The float32 classifier, its head from the file.
    """
    checkpoint = _lazy_import("keras_vit.checkpoint.weights", "--npz")
    from keras_vit.checkpoint import npz as checkpoint_io
    from keras_vit.model import create_model

    arrays, layout, ignored = checkpoint_io.normalize_layout(
        checkpoint_io.read_npz(path), str(path)
    )
    info = checkpoint_io.describe_arrays(
        {key: tuple(value.shape) for key, value in arrays.items()}
    )
    file_classes = info["num_classes"]
    if not file_classes:
        raise ValueError(
            f"{path} has no classification head, so there is nothing to "
            "serve: fine-tune it first (train.py with init.npz), then export "
            "the run's --workdir."
        )
    if num_classes is not None and num_classes != file_classes:
        raise ValueError(
            f"--num_classes {num_classes} does not match the {file_classes}-"
            f"class head in {path}; a new head would be untrained. Drop "
            f"--num_classes or pass {file_classes}."
        )
    if representation_size is None:
        representation_size = info["representation_size"]
    sizes = {}
    if not variant:
        variant = info["variant"]
    if not variant:
        sizes = {key: info[key] for key in (
            "patch_size", "hidden_size", "num_layers", "num_heads",
            "mlp_dim", "resnet_layers")}
    model = create_model(
        variant,
        num_classes=file_classes,
        image_size=image_size,
        pooling=info["pooling"],
        representation_size=representation_size,
        **sizes,
    )
    checkpoint.load_arrays(
        model,
        arrays,
        strict=True,
        keep_pre_logits=representation_size is not None,
        source=str(path),
        layout=layout,
        ignored=ignored,
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
        workdir = _lazy_import("keras_vit.checkpoint.workdir", "--workdir")
        return workdir.read_class_names(args.workdir)
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
    workdir = _lazy_import("keras_vit.checkpoint.workdir", "--workdir")
    pp = workdir.read_config(args.workdir).get("pp", None) or {}
    # The run evaluated with this preprocessing; serving must match it.
    return pp.get("eval_resize_size", None)


def export_from_args(args: argparse.Namespace) -> str:
    """str. Exports the model `args` describe; the new version's path."""
    from keras_vit.export.saved_model import export_model

    model = load_source_model(args)
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
    )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        path = export_from_args(args)
    except (ValueError, FileExistsError, FileNotFoundError) as error:
        # Bad input, not a bug: the message says what to change.
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0
