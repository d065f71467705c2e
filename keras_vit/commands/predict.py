"""`keras-vit-predict`: classify image files with a trained model.

    python -m keras_vit.commands.predict --workdir /tmp/vit_digits photos/
    python -m keras_vit.commands.predict --saved_model exports/vit \\
        cat.jpg dog.png --top_k 3 --output predictions.csv

The model comes from the project's one loader (`--workdir`, `--keras_model`,
`--npz` with `--labels`, `--hub`) or is an exported SavedModel
(`--saved_model`, a version folder or the model folder, whose newest
version is used). Images are decoded and preprocessed exactly as the
export's `serving_default` does (`keras_vit.data.preprocessing`), so the
answer for a file equals the SavedModel's for the same bytes. Each file is
decoded once first: an unreadable one stops the run with its name, or with
--skip_bad_images is named on stderr and left out (as
`--config.skip_bad_images` does for training).

Prints one line per image (`file: name 0.912, name 0.051, ...`), or writes
JSON or CSV with --output (by its extension). A progress count goes to
stderr when a folder is given.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import sys
from typing import Callable, List, Optional, Sequence, Tuple

import keras
import numpy as np
import tensorflow as tf

from keras_vit.checkpoint import loader
from keras_vit.checkpoint import workdir as wd
from keras_vit.data import preprocessing
from keras_vit.derived import input_image_size
from keras_vit.export import files as export_files
from keras_vit.errors import UsageError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
_SOURCES = ("workdir", "keras_model", "npz", "hub", "saved_model")



def list_images(paths: Sequence[str]) -> Tuple[List[str], bool]:
    """(files, any folder given): files as given, folders walked
    recursively for IMAGE_EXTENSIONS, sorted."""
    files, folder = [], False
    for path in paths:
        if os.path.isdir(path):
            folder = True
            found = sorted(
                os.path.join(root, name)
                for root, _, names in os.walk(path) for name in names
                if name.lower().endswith(IMAGE_EXTENSIONS)
            )
            if not found:
                raise UsageError(
                    f"No images ({', '.join(IMAGE_EXTENSIONS)}) in {path}."
                )
            files.extend(found)
        elif os.path.exists(path):
            files.append(path)
        else:
            raise UsageError(f"{path} does not exist.")
    return files, folder


def _reason(error: tf.errors.OpError) -> str:
    """The decoder's message without TensorFlow's node and op names."""
    text = error.message.strip().splitlines()[0]
    text = re.sub(r"^\{\{[^}]*\}\}\s*", "", text)
    return re.sub(r"\s*\[Op:.*$", "", text).strip()


def read_images(files: Sequence[str], skip_bad: bool):
    """(good files, their bytes, [(file, reason)] skipped). Each file is
    decoded once, with the decoder every other path uses."""
    good, data, skipped = [], [], []
    for path in files:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            preprocessing.decode_image(tf.constant(raw))
        except (tf.errors.InvalidArgumentError, ValueError) as error:
            reason = _reason(error) if isinstance(
                error, tf.errors.OpError) else str(error)
            if not skip_bad:
                raise UsageError(
                    f"{path} is not a readable image ({reason}); pass "
                    "--skip_bad_images to leave such files out."
                ) from None
            print(f"skipped {path}: {reason}", file=sys.stderr)
            skipped.append((path, reason))
            continue
        good.append(path)
        data.append(raw)
    return good, data, skipped


def keras_predictor(model: keras.Model, resize_size=None) -> Callable:
    """A function: list of encoded images -> probabilities (n, K), with the
    preprocessing of the export's serving_default."""
    size = input_image_size(model)

    def predict(images: Sequence[bytes]) -> np.ndarray:
        batch = np.stack([
            preprocessing.preprocess_eval(
                preprocessing.decode_image(tf.constant(image)), size,
                resize_size,
            ).numpy()
            for image in images
        ])
        logits = keras.ops.convert_to_numpy(model(batch, training=False))
        return tf.nn.softmax(logits.astype(np.float32), axis=-1).numpy()

    return predict


def saved_model_version(path: str) -> str:
    """str. `path` if it is a SavedModel folder, else its newest numbered
    version (a TF Serving model folder)."""
    if os.path.exists(os.path.join(path, "saved_model.pb")):
        return path
    versions = export_files.existing_versions(path)
    if not versions:
        raise UsageError(
            f"{path} is neither a SavedModel (no saved_model.pb) nor a "
            "model folder with numbered versions."
        )
    return os.path.join(path, str(max(versions)))


def saved_model_predictor(path: str) -> Tuple[Callable, List[str]]:
    """(predict function, class names) of an exported SavedModel."""
    loaded = tf.saved_model.load(path)
    signature = loaded.signatures["serving_default"]

    def predict(images: Sequence[bytes]) -> np.ndarray:
        return signature(
            image_bytes=tf.constant(list(images), dtype=tf.string)
        )["probabilities"].numpy()

    with open(os.path.join(path, "assets", "labels.txt"),
              encoding="utf-8") as f:
        names = [line.rstrip("\n") for line in f if line.strip()]
    return predict, names


def _read_labels(path: str) -> List[str]:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\r\n") for line in f if line.strip()]


def predictor_from_args(args) -> Tuple[Callable, Optional[List[str]]]:
    """(predict function, class names or None) for the source options."""
    given = [s for s in _SOURCES if getattr(args, s)]
    if len(given) != 1:
        raise UsageError(
            "Give exactly one of --workdir, --keras_model, --npz, --hub or "
            f"--saved_model (got {', '.join(given) or 'none'})."
        )
    if args.saved_model:
        if args.resize_size is not None:
            raise UsageError("--resize_size is built into a SavedModel.")
        predict, names = saved_model_predictor(
            saved_model_version(args.saved_model)
        )
        return predict, names
    source = loader.Source(
        workdir=args.workdir, keras_model=args.keras_model, npz=args.npz,
        hub=args.hub, use_ema=not args.no_ema,
    )
    model = loader.load_model(source)
    if model.layers[-1].name != "head":
        raise UsageError(
            f"{source.path} has no classification head: nothing to predict."
        )
    resize = args.resize_size
    if resize is None and args.workdir:
        # The run evaluated (and exports) with this preprocessing.
        resize = wd.read_config(args.workdir).pp.eval_resize_size
    return keras_predictor(model, resize), loader.class_names(source)


def top_k(probabilities: np.ndarray, names: Sequence[str], k: int):
    """[[(class, name, probability)] per image], best first."""
    order = np.argsort(-probabilities, axis=-1, kind="stable")[:, :k]
    return [
        [(int(c), names[c], float(p[c])) for c in row]
        for p, row in zip(probabilities, order)
    ]


def write_output(path: str, files, tops, skipped) -> None:
    """Writes the predictions as JSON or CSV (by `path`'s extension)."""
    extension = os.path.splitext(path)[1].lower()
    if extension == ".json":
        data = {
            "predictions": [
                {"file": f, "top_k": [
                    {"class": c, "name": n, "probability": p}
                    for c, n, p in top]}
                for f, top in zip(files, tops)
            ],
            "skipped": [{"file": f, "reason": r} for f, r in skipped],
        }
        text = json.dumps(data, indent=1)
    elif extension == ".csv":
        rows = [("file", "rank", "class", "name", "probability")] + [
            (f, rank, c, n, f"{p:.6f}")
            for f, top in zip(files, tops)
            for rank, (c, n, p) in enumerate(top, start=1)
        ]
        with open(path, "w", newline="", encoding="utf-8") as f:
            csv.writer(f).writerows(rows)
        return
    else:
        raise UsageError(f"--output {path}: use a .json or .csv file.")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The options of keras-vit-predict."""
    p = argparse.ArgumentParser(
        prog="keras-vit-predict",
        description="Classify image files (or folders of them) with a "
        "trained ViT; prints the top classes with probabilities.",
    )
    p.add_argument("images", nargs="+", help="image files and/or folders "
                   f"(searched recursively for {', '.join(IMAGE_EXTENSIONS)})")
    source = p.add_argument_group("model (exactly one)")
    source.add_argument("--workdir", help="a training run's workdir")
    source.add_argument("--keras_model", help="a .keras model file")
    source.add_argument("--npz", help="an official .npz with its head "
                        "(class names from --labels)")
    source.add_argument("--hub", help="a Hugging Face layout directory "
                        "(Hugging Face ViT or timm)")
    source.add_argument("--saved_model", help="an export: a version folder "
                        "or the model folder (newest version)")
    p.add_argument("--labels", help="class names, one per line, in label "
                   "order (default: the source's, else class indices)")
    p.add_argument("--top_k", type=int, default=5)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--resize_size", type=int, help="resize to this, then "
                   "center-crop, as evaluation does (default: resize "
                   "directly; --workdir: the run's eval_resize_size)")
    p.add_argument("--output", help="write .json or .csv instead of "
                   "printing")
    p.add_argument("--skip_bad_images", action="store_true",
                   help="name and leave out unreadable files instead of "
                   "stopping at the first")
    p.add_argument("--no_ema", action="store_true",
                   help="--workdir: the raw, not the EMA, weights")
    return p


def run(args) -> int:
    """Runs the command; returns the exit status."""
    if args.top_k < 1 or args.batch_size < 1:
        raise UsageError("--top_k and --batch_size must be >= 1.")
    files, folder = list_images(args.images)
    predict, names = predictor_from_args(args)
    files, data, skipped = read_images(files, args.skip_bad_images)
    probabilities = []
    for start in range(0, len(data), args.batch_size):
        probabilities.append(predict(data[start: start + args.batch_size]))
        if folder:
            done = min(start + args.batch_size, len(data))
            print(f"\r{done}/{len(data)} images", end="", file=sys.stderr)
    if folder and data:
        print(file=sys.stderr)
    if not probabilities:
        raise UsageError("No readable image to classify.")
    probabilities = np.concatenate(probabilities)
    num_classes = probabilities.shape[-1]
    if args.labels:
        names = _read_labels(args.labels)
    if names is None:
        names = [str(i) for i in range(num_classes)]
    if len(names) != num_classes:
        raise UsageError(
            f"{len(names)} class names for a {num_classes}-class model."
        )
    tops = top_k(probabilities, names, min(args.top_k, num_classes))
    if args.output:
        write_output(args.output, files, tops, skipped)
        print(f"{len(files)} images -> {args.output}"
              + (f" ({len(skipped)} skipped)" if skipped else ""))
    else:
        for path, top in zip(files, tops):
            answer = ", ".join(f"{n} {p:.3f}" for _, n, p in top)
            print(f"{path}: {answer}")
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-predict; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except (UsageError, ValueError, FileNotFoundError) as error:
        # Bad input, not a bug: the message names the fix.
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
