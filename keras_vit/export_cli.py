"""Command line of `python -m keras_vit.export` (see `keras_vit.export`).

Exactly one model source: --keras_model (a .keras file), --npz (an official
checkpoint, with --variant, --num_classes and --image_size) or --workdir (a
training run's folder; EMA weights by default).
"""

from __future__ import annotations

import glob
import os
from typing import List, Optional

import keras
from absl import app, flags, logging

FLAGS = flags.FLAGS

_SOURCES = ("keras_model", "npz", "workdir")


def define_flags() -> None:
    """Defines the CLI's absl flags (once per process)."""
    if "export_dir" in FLAGS:
        return
    flags.DEFINE_string("export_dir", None, "Model root for TF Serving: "
                        "writes <export_dir>/<model_name>/<version>/.")
    flags.DEFINE_string("model_name", "vit", "Name clients use in URLs.")
    flags.DEFINE_string("keras_model", None, "A .keras model file.")
    flags.DEFINE_string("npz", None, "An official ViT .npz checkpoint.")
    flags.DEFINE_string("workdir", None, "A training run's workdir.")
    flags.DEFINE_bool("use_ema", True, "--workdir: export the EMA weights.")
    flags.DEFINE_string("variant", None, "--npz: e.g. B/16, R50+B/16.")
    flags.DEFINE_integer("num_classes", None, "--npz: classes of the head.")
    flags.DEFINE_integer("image_size", 224, "--npz: input resolution.")
    flags.DEFINE_list("class_names", None, "Comma-separated class names, in "
                      "label order.")
    flags.DEFINE_string("class_names_file", None, "A text file with one "
                        "class name per line, in label order.")
    flags.DEFINE_integer("top_k", 5, "Top classes in each answer.")
    flags.DEFINE_integer("version", None, "Version number; default: the "
                         "next free one.")
    flags.DEFINE_integer("resize_size", None, "Resize to this, then center-"
                         "crop to the input size (as evaluation does with "
                         "the same setting); default: resize directly.")
    flags.DEFINE_list("warmup_images", None, "Image files (globs allowed) "
                      "for the TF Serving warm-up file; default: synthetic.")
    flags.DEFINE_bool("no_warmup", False, "Write no warm-up file.")
    flags.DEFINE_string("serving_base_dir", None, "Where the server sees "
                        "--export_dir (e.g. /models in a container), for "
                        "models.config.")
    flags.DEFINE_bool("verify", True, "Reload and check the SavedModel "
                      "before publishing it.")


def _lazy_import(module: str, what: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise app.UsageError(
            f"{what} needs {module}, which cannot be imported ({e}). "
            "Use --keras_model with a .keras file instead."
        ) from None


def load_source_model() -> keras.Model:
    """keras.Model. The model named by the source flags."""
    given = [s for s in _SOURCES if getattr(FLAGS, s)]
    if len(given) != 1:
        raise app.UsageError(
            "Give exactly one of --keras_model, --npz or --workdir "
            f"(got {', '.join('--' + s for s in given) or 'none'})."
        )
    if FLAGS.keras_model:
        import keras_vit  # noqa: F401  (registers the custom layers)

        if not os.path.exists(FLAGS.keras_model):
            raise app.UsageError(f"--keras_model {FLAGS.keras_model} does "
                                 "not exist.")
        return keras.saving.load_model(FLAGS.keras_model, compile=False)
    if FLAGS.npz:
        if not FLAGS.variant or not FLAGS.num_classes:
            raise app.UsageError("--npz needs --variant (e.g. B/16) and "
                                 "--num_classes.")
        checkpoint = _lazy_import("keras_vit.checkpoint", "--npz")
        return checkpoint.load_npz(
            FLAGS.npz,
            variant=FLAGS.variant,
            num_classes=FLAGS.num_classes,
            image_size=FLAGS.image_size,
        )
    workdir = _lazy_import("keras_vit.workdir", "--workdir")
    return workdir.restore_model(FLAGS.workdir, use_ema=FLAGS.use_ema)


def class_names_from_flags() -> Optional[List[str]]:
    """list of str or None. Names from --class_names(_file) or the workdir."""
    if FLAGS.class_names and FLAGS.class_names_file:
        raise app.UsageError("Give --class_names or --class_names_file, "
                             "not both.")
    if FLAGS.class_names:
        return list(FLAGS.class_names)
    if FLAGS.class_names_file:
        with open(FLAGS.class_names_file, encoding="utf-8") as f:
            return [line.rstrip("\r\n") for line in f if line.strip()]
    if FLAGS.workdir:
        workdir = _lazy_import("keras_vit.workdir", "--workdir")
        return workdir.read_class_names(FLAGS.workdir)
    return None


def warmup_images_from_flags():
    """list of paths, [] for none, or None for the synthetic default."""
    if FLAGS.no_warmup:
        return []
    if not FLAGS.warmup_images:
        return None
    paths = []
    for pattern in FLAGS.warmup_images:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise app.UsageError(f"--warmup_images {pattern} matches no "
                                 "file.")
        paths.extend(matches)
    return paths


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS.export_dir:
        raise app.UsageError("--export_dir is required.")
    from keras_vit.export import export_model

    model = load_source_model()
    path = export_model(
        model,
        FLAGS.export_dir,
        model_name=FLAGS.model_name,
        class_names=class_names_from_flags(),
        top_k=FLAGS.top_k,
        warmup_images=warmup_images_from_flags(),
        version=FLAGS.version,
        resize_size=FLAGS.resize_size,
        serving_base_dir=FLAGS.serving_base_dir,
        verify=FLAGS.verify,
    )
    logging.info("Exported %s", path)
    print(path)


def run() -> None:
    """Entry point: parses flags and exports."""
    define_flags()
    app.run(main)
