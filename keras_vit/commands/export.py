r"""keras-vit-export: a classifier as a versioned SavedModel for TF Serving,
or as a LiteRT (.tflite) file.

    keras-vit-export --model=/tmp/vit_digits --export_dir=/tmp/models
    keras-vit-export --model=imagenet21k+imagenet2012/ViT-B_16 \
        --export_dir=/tmp/models --model_name=vit_b16
    keras-vit-export --model=vit.keras --export_dir=/tmp/edge \
        --format=litert --quantization=int8

--model is any model source (a training workdir: its EMA weights unless
--no_ema, its class names and its evaluation preprocessing). An .npz's
sizes, pooling, class count and pre-logits width come from the file, the
shape hints checked against them; its head must be there (a new one would
be untrained).

--format=saved_model (default) writes <export_dir>/<model_name>/<version>/
and <export_dir>/models.config; --format=litert writes
<export_dir>/<model_name>.tflite (and .labels.txt, and
.preprocessing.json: the input size and the evaluation resize that a
client applies before the file, which keras-vit-predict reads), refused
where that file exists unless --overwrite (name each quantization's file
with its own --model_name). Prints the path written.
"""

from __future__ import annotations

import glob
import os
import sys
from typing import TYPE_CHECKING, List, Optional, Sequence

from absl import flags, logging

from keras_vit.commands import flags as cli
from keras_vit.commands import scoring
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    from keras_vit.checkpoint import loader
    from keras_vit.export import files as export_files
    from keras_vit.export import litert, litert_record, saved_model
    from keras_vit.export import options as export_options
    from keras_vit.export import versions as export_versions
    from keras_vit.storage import atomic, checkpoint_list
else:
    export_files = lazy_module("keras_vit.export.files")
    litert = lazy_module("keras_vit.export.litert")
    litert_record = lazy_module("keras_vit.export.litert_record")
    saved_model = lazy_module("keras_vit.export.saved_model")
    export_options = lazy_module("keras_vit.export.options")
    export_versions = lazy_module("keras_vit.export.versions")
    atomic = lazy_module("keras_vit.storage.atomic")
    checkpoint_list = lazy_module("keras_vit.storage.checkpoint_list")

# --quantization's choices: keras_vit.export.litert.QUANTIZATIONS.
QUANTIZATIONS = ("float32", "float16", "int8")


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-export."""
    del argv
    cli.define_model(values)
    cli.define_hints(values, "variant", "num_classes", "image_size",
                     "representation_size")
    cli.define_resize_size(values)
    flags.DEFINE_string("export_dir", None, "Model root for TF Serving: "
                        "writes <export_dir>/<model_name>/<version>/ (or "
                        "<model_name>.tflite).", flag_values=values,
                        required=True)
    flags.DEFINE_enum("format", "saved_model", ["saved_model", "litert"],
                      "saved_model: TF Serving; litert: a .tflite file for "
                      "phones and edge devices.", flag_values=values)
    flags.DEFINE_enum("quantization", "float32", list(QUANTIZATIONS),
                      "--format=litert: float32, float16 weights, or int8 "
                      "(dynamic-range) weights.", flag_values=values)
    flags.DEFINE_string("model_name", "vit", "The name clients use in URLs.",
                        flag_values=values)
    flags.DEFINE_boolean("overwrite", False, "--format=litert: replace "
                         "<model_name>.tflite where it exists (by default "
                         "refused; a SavedModel version is never "
                         "replaced).", flag_values=values)
    flags.DEFINE_list("class_names", None, "Class names, comma-separated, in "
                      "label order (default: the model's own, if it has "
                      "any).", flag_values=values)
    cli.define_class_names_file(values)
    scoring.define_scores(values)
    flags.DEFINE_integer("top_k", 5, "Top classes in each answer (at most "
                         "the model's classes).",
                         flag_values=values)
    flags.DEFINE_integer("version", None, "Version number; default: the "
                         "next free one.", flag_values=values)
    flags.DEFINE_multi_string("warmup_images", None, "An image file or glob "
                              "for the warm-up file (repeatable); default: "
                              "synthetic.", flag_values=values)
    flags.DEFINE_boolean("no_warmup", False, "Write no warm-up file.",
                         flag_values=values)
    flags.DEFINE_string("serving_base_dir", None, "Where the server sees "
                        "--export_dir (e.g. /models in a container), for "
                        "models.config.", flag_values=values)
    flags.DEFINE_boolean("no_verify", False, "Skip reloading and checking "
                         "the export before publishing it.",
                         flag_values=values)
    flags.DEFINE_boolean("dynamic_size", False, "Also serve "
                         "predict_any_size: pixels of any height and width "
                         "that are multiples of the model's stride, run at "
                         "that size.", flag_values=values)


def class_names(values: flags.FlagValues,
                source: loader.Source) -> Optional[List[str]]:
    """--class_names or --class_names_file, else the source's own."""
    if values.class_names and values.class_names_file:
        raise UsageError("Give --class_names or --class_names_file, not "
                         "both.")
    if values.class_names:
        return list(values.class_names)
    return cli.class_names(values, source)


def warmup_images(values: flags.FlagValues):
    """list of paths, [] for none, or None for the synthetic default."""
    if values.no_warmup:
        if values.warmup_images:
            raise UsageError("Give --warmup_images or --no_warmup, not "
                             "both.")
        return []
    if not values.warmup_images:
        return None
    paths = []
    for pattern in values.warmup_images:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise UsageError(f"--warmup_images {pattern} matches no file.")
        files = [path for path in matches if not os.path.isdir(path)]
        if not files:
            raise UsageError(
                f"--warmup_images {pattern} names only folders: name image "
                f"files, or a glob of them (e.g. {pattern.rstrip('/*')}"
                "/*.jpg).")
        paths.extend(files)
    return paths


# The flags a SavedModel export reads and a LiteRT one does not.
_SAVED_MODEL_FLAGS = ("top_k", "warmup_images", "no_warmup", "version",
                      "serving_base_dir", "dynamic_size")


def _check_version(values: flags.FlagValues) -> None:
    """--version, before the model loads: one TF Serving reads, and no
    version there already (checked again as it is published)."""
    export_options.check_version(values.version)
    model_dir = os.path.join(values.export_dir, values.model_name)
    if values.version in export_versions.existing_versions(model_dir):
        raise UsageError(
            f"Version {values.version} already exists in {model_dir}: pass "
            "another --version, or none for the next free one.")


def _check_litert_files(values: flags.FlagValues, tflite: str) -> None:
    """The .tflite file and those beside it, before the model loads: a
    name (not a path, nor one ending in .tflite), and none of them there
    already unless --overwrite (or left by a killed export: replaced)."""
    if values.model_name.lower().endswith(".tflite"):
        raise UsageError(
            f"--model_name={values.model_name} names the file without "
            f"its .tflite (--model_name={values.model_name[:-7]}).")
    # A name, not a path: the files stay in --export_dir.
    export_files.check_model_name(values.model_name)
    left = litert_record.killed_export_files(tflite)  # (replaced)
    for path in litert_record.written_paths(tflite):
        if os.path.isdir(path):
            raise UsageError(f"{path} is a folder: choose another "
                             "--model_name or --export_dir.")
        if not values.overwrite and path not in left:
            cli.check_not_written(path, "model_name")


def export(values: flags.FlagValues) -> str:
    """str. Exports the --model as the flags say; the new version's path
    (or the .tflite file's)."""
    tflite = os.path.join(values.export_dir, f"{values.model_name}.tflite")
    if values.format == "litert":
        _check_litert_files(values, tflite)
    saved_model_only = [f"--{name}" for name in _SAVED_MODEL_FLAGS
                        if values[name].present]
    if values.format == "litert" and saved_model_only:
        raise UsageError(
            f"{', '.join(saved_model_only)} "
            f"{'go' if len(saved_model_only) > 1 else 'goes'} with a "
            "SavedModel export only, not --format=litert (a .tflite file "
            "has a fixed input size, no top-k output, version, warm-up or "
            "serving folder).")
    if values.format != "litert" and values.quantization != "float32":
        raise UsageError("--quantization goes with --format=litert only.")
    if values.format != "litert" and values.overwrite:
        raise UsageError("--overwrite goes with --format=litert only: a "
                         "SavedModel version is never replaced (pass "
                         "another --version, or none for the next).")
    if values.format != "litert" and values.version is not None:
        _check_version(values)  # (loads TensorFlow: only when given)
    warmup = warmup_images(values) if values.format != "litert" else None
    source = cli.model_source(
        values,
        tensorflow_work="it writes TensorFlow's SavedModel and LiteRT files")
    if values.format != "litert" and values.version is None:
        export_versions.next_version(  # below TF Serving's largest
            os.path.join(values.export_dir, values.model_name))
    logging.info("Loading %s ...", values.model)
    model = cli.load_flagged_model(values, source, head="serve")
    names = class_names(values, source)
    width = int(model.output_shape[-1])
    if values.class_names and len(names) != width:
        raise UsageError(f"--class_names gives {len(names)} names for a "
                         f"{width}-class model: give one name per class, "
                         "in label order.")
    cli.check_class_count(values, source, names, width)
    resize = cli.resize_size(values, source, model)
    keep = cli.keep_aspect(values, source, resize)
    scores = scoring.scores(values, source, width)
    made_from = dict(location=atomic.absolute(source.path), kind=source.kind,
                     step=(checkpoint_list.step_read(source.path)
                           if source.kind == "workdir" else None))
    if values.format == "litert":
        try:
            return litert.export_litert(
                model, tflite,
                quantization=values.quantization,
                class_names=names,
                verify=not values.no_verify,
                resize_size=resize,
                keep_aspect=keep,
                scores=scores,
                overwrite=values.overwrite,
                source=made_from,
            )
        except FileExistsError as made:  # made as it converted: kept
            cli.check_not_written(made.filename, "model_name")
            raise
    return saved_model.export_model(
        model,
        values.export_dir,
        model_name=values.model_name,
        class_names=names,
        top_k=values.top_k,
        warmup_images=warmup,
        version=values.version,
        resize_size=resize,
        keep_aspect=keep,
        serving_base_dir=values.serving_base_dir,
        verify=not values.no_verify,
        dynamic_size=values.dynamic_size,
        scores=scores,
        source=made_from,
    )


def _main(values: flags.FlagValues, args: list) -> None:
    cli.refuse_arguments(args)
    cli.check_output_path(values, "export_dir")
    print(export(values))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-export; the exit status."""
    return cli.run("export", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
