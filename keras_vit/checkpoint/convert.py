"""Converts an official ViT .npz checkpoint into a Keras `.keras` model.

    python -m keras_vit.checkpoint.convert --npz ViT-B_16.npz --variant B/16 \\
        --num_classes 1000 --image_size 384 --output vit_b16_384.keras

builds the variant and loads the checkpoint into it
(`keras_vit.checkpoint.loader.load_model`: head kept when the class count
matches, else zero-initialised; position embedding resized to the image
size) and writes the model atomically: a crash never leaves a partial file
at `--output`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Sequence, Tuple, Union

import keras

from keras_vit import model as vit_model
from keras_vit.checkpoint import loader
from keras_vit.checkpoint.atomic import atomic_write
from keras_vit.checkpoint.npz import LoadReport
from keras_vit.errors import UsageError


def parse_image_size(text: str) -> Union[int, Tuple[int, int]]:
    """"384" -> 384; "384x512" or "384,512" -> (384, 512)."""
    parts = text.replace(",", "x").lower().split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"image size {text!r}: use an int (384) or HEIGHTxWIDTH (384x512)."
        ) from None
    if len(sizes) == 1:
        return sizes[0]
    if len(sizes) == 2:
        return sizes[0], sizes[1]
    raise argparse.ArgumentTypeError(
        f"image size {text!r}: use an int (384) or HEIGHTxWIDTH (384x512)."
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m keras_vit.checkpoint.convert",
        description="Convert an official ViT .npz checkpoint to .keras.",
    )
    parser.add_argument(
        "--npz", required=True, help="Checkpoint path (local or gs://)."
    )
    parser.add_argument(
        "--variant",
        required=True,
        choices=vit_model.VARIANTS,
        help="Model variant, e.g. B/16 or R50+B/16.",
    )
    parser.add_argument(
        "--num_classes",
        type=int,
        required=True,
        help="Head width. The checkpoint's head is kept if it matches, "
        "else the head starts at zero; 0 gives a features model.",
    )
    parser.add_argument(
        "--image_size",
        type=parse_image_size,
        default=224,
        help="Input size: 384 or HEIGHTxWIDTH (default 224).",
    )
    parser.add_argument(
        "--pooling", choices=("token", "gap"), default="token"
    )
    parser.add_argument(
        "--representation_size",
        type=int,
        default=None,
        help="Keep the checkpoint's pre-logits layer of this width.",
    )
    parser.add_argument(
        "--posemb_grid",
        type=parse_image_size,
        default=None,
        help="The checkpoint's patch grid if not square, e.g. 14x20.",
    )
    parser.add_argument(
        "--non_strict",
        action="store_true",
        help="Load what fits instead of failing on any mismatch.",
    )
    parser.add_argument(
        "--output", required=True, help="Destination .keras file."
    )
    return parser


def save_keras_atomic(model: keras.Model, path: str) -> None:
    """Saves `model` to `path` (.keras) atomically (`atomic.atomic_write`)."""
    if not path.endswith(".keras"):
        raise UsageError(
            f"--output {path!r} must end with .keras (Keras's format)."
        )
    atomic_write(path, model.save)


def convert(
    npz: str,
    variant: str,
    num_classes: int,
    output: str,
    *,
    image_size: Union[int, Tuple[int, int]] = 224,
    pooling: str = "token",
    representation_size: Optional[int] = None,
    posemb_grid: Optional[Tuple[int, int]] = None,
    strict: bool = True,
) -> LoadReport:
    """Builds the model, loads `npz` into it and saves it to `output`."""
    if not output.endswith(".keras"):
        raise UsageError(
            f"--output {output!r} must end with .keras (Keras's format)."
        )
    if "://" not in npz and not os.path.isfile(npz):
        raise FileNotFoundError(f"{npz}: no such checkpoint file.")
    model, report = loader.load_model(
        loader.Source(npz=npz, variant=variant, posemb_grid=posemb_grid),
        image_size,
        num_classes=num_classes,
        pooling=pooling,
        representation_size=representation_size,
        strict=strict,
        with_report=True,
    )
    save_keras_atomic(model, output)
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        report = convert(
            args.npz,
            args.variant,
            args.num_classes,
            args.output,
            image_size=args.image_size,
            pooling=args.pooling,
            representation_size=args.representation_size,
            posemb_grid=args.posemb_grid,
            strict=not args.non_strict,
        )
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    lines: List[str] = [str(report), f"Wrote {args.output}."]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
