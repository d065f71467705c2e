r"""keras-vit-predict: classify image files with a trained model.

    keras-vit-predict --model=/tmp/vit_digits photos/
    keras-vit-predict --model=exports/vit cat.jpg dog.png --top_k=3 \
        --output=predictions.csv

--model is any model source (`keras_vit.checkpoint.resolve`), an
exported SavedModel (a version folder, or the model folder: its newest
version) or a LiteRT file (`keras-vit-export --format=litert`).
Files and folders are local or at a tf.io.gfile URL (gs://...).
Images are decoded and preprocessed exactly as the export's
`serving_default` does (`keras_vit.data.preprocessing`), so the answer for
a file equals the SavedModel's for the same bytes. Each file is decoded
once first: an unreadable one stops the run with its name, or with
--skip_bad_images is named on stderr and left out (as
`--config.input.skip_bad_images` does for training); so is one the
resize refuses (an image too elongated to keep its aspect ratio).

Prints one line per image (`file: name 0.912, name 0.051, ...`), or writes
JSON or CSV with --output (by its extension; a file already there is kept
unless --overwrite). The class names (--class_names_file, else the
model's) are checked against the model's classes before any image is
read. A progress count goes to stderr when a folder is given.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import TYPE_CHECKING, Callable, Optional, Sequence

import numpy as np
from absl import flags, logging

from keras_vit import progress
from keras_vit.commands import flags as cli
from keras_vit.commands import scoring
from keras_vit.commands.image_inputs import (  # noqa: F401 (this API)
    check_images,
    list_images,
    read_bytes,
    skip,
)
from keras_vit.commands.lazy import lazy_module
from keras_vit.commands.prediction_files import (  # noqa: F401 (this API)
    check_output,
    one_line,
    printable,
    top_k,
    write_output,
)
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    import keras
    import tensorflow as tf

    from keras_vit import derived
    from keras_vit.data import checks, preprocessing
    from keras_vit.export import files as export_files
    from keras_vit.export import graph as export_graph
    from keras_vit.export import litert, litert_record, request_checks
    from keras_vit.scoring import scores as vit_scores
else:
    keras = lazy_module("keras")
    tf = lazy_module("tensorflow")
    derived = lazy_module("keras_vit.derived")
    preprocessing = lazy_module("keras_vit.data.preprocessing")
    checks = lazy_module("keras_vit.data.checks")
    litert = lazy_module("keras_vit.export.litert")
    litert_record = lazy_module("keras_vit.export.litert_record")
    request_checks = lazy_module("keras_vit.export.request_checks")
    vit_scores = lazy_module("keras_vit.scoring.scores")
    export_files = lazy_module("keras_vit.export.files")
    export_graph = lazy_module("keras_vit.export.graph")


def _pixels(images: Sequence[bytes], size, resize_size,
            keep_aspect: bool = False) -> np.ndarray:
    """Encoded images as the batch the export's serving_default makes of
    them: decoded, resized and cropped to `size`, scaled to [-1, 1]."""
    return np.stack([
        preprocessing.preprocess_eval(
            preprocessing.decode_image(tf.constant(image)), size,
            resize_size, keep_aspect,
        ).numpy()
        for image in images
    ])


def keras_predictor(model: keras.Model, resize_size=None,
                    keep_aspect: bool = False,
                    scores: str = "softmax") -> Callable:
    """A function: list of encoded images -> probabilities (n, K) (a
    softmax, or with `scores` "sigmoid" a sigmoid of each logit), with the
    preprocessing of the export's serving_default, and in float32 as the
    export computes (a model saved under mixed_bfloat16 is copied)."""
    model = export_graph.float32_inference_model(model)
    size = derived.input_image_size(model)

    def predict(images: Sequence[bytes]) -> np.ndarray:
        batch = _pixels(images, size, resize_size, keep_aspect)
        logits = keras.ops.convert_to_numpy(model(batch, training=False))
        return vit_scores.probabilities_np(logits, scores)

    predict.num_classes = int(model.output_shape[-1])
    return predict


def saved_model_predictor(path: str) -> Callable:
    """The predict function of the exported SavedModel version `path`."""
    try:
        signature = tf.saved_model.load(path).signatures["serving_default"]
    except (OSError, ValueError, KeyError, IndexError,
            tf.errors.OpError) as error:
        # An empty or cut saved_model.pb holds no graph, which TensorFlow
        # words as a call that needs tags=; a cut variables file reads
        # short (IndexError: "Read less bytes than requested").
        reason = ("its saved_model.pb holds no graph: an empty or damaged "
                  "file" if "tags=" in str(error) else _first_sentence(
                      checks.decode_reason(error)))
        raise UsageError(
            f"{path} is not a readable SavedModel with a serving_default "
            f"signature ({reason}): export the model again.") from None
    export_files.check_saved_signature(path, signature)

    def predict(images: Sequence[bytes]) -> np.ndarray:
        # Requests within the signature's pixel budget (large photos: a
        # few at a time), as a TF Serving client sends them.
        return np.concatenate([signature(
            image_bytes=tf.constant(part, dtype=tf.string)
        )["probabilities"].numpy()
            for part in request_checks.requests_within_budget(images)])

    predict.num_classes = _width(lambda: signature.structured_outputs[
        "probabilities"].shape[-1])
    return predict


def _width(read: Callable) -> Optional[int]:
    """The class count `read()` gives from a model's output shape; None
    when the shape does not say."""
    try:
        width = read()
    except (AttributeError, KeyError, IndexError, TypeError, ValueError):
        return None
    return int(width) if width else None


def _first_sentence(text: str) -> str:
    """TensorFlow's reason without the advice it appends (a device's)."""
    line = (text.strip().splitlines() or [""])[0]
    return re.split(r"(?<=[a-z0-9])\.? (?=You may be|Consider)", line,
                    maxsplit=1)[0]


def litert_predictor(path: str, resize_size=None, labels_used: bool = True,
                     keep_aspect: Optional[bool] = None) -> Callable:
    """The predict function of a LiteRT file (`keras-vit-export
    --format=litert`): the images preprocessed as serving_default does
    (with `resize_size` and `keep_aspect`, else the resize recorded beside
    the file), then given to the file as pixels in [0, 255]."""
    try:
        interpreter = litert.open_interpreter(path)
    except (ValueError, RuntimeError) as error:
        raise UsageError(f"{path} is not a readable LiteRT file ({error}): "
                         "export the model again.") from None
    export_files.check_litert_signature(path, interpreter, (
        litert_record.INPUT_NAME, litert_record.OUTPUT_NAME))
    try:
        size = tuple(int(n) for n in interpreter.get_input_details()[0][
            "shape"][1:3])
        num_classes = _width(lambda: interpreter.get_signature_runner(
            ).get_output_details()[litert_record.OUTPUT_NAME]["shape"][-1])
    except (ValueError, RuntimeError, IndexError) as error:
        raise UsageError(f"{path} is not a readable LiteRT file ({error}): "
                         "export the model again.") from None
    # Read (and checked to go with the file) even where --resize_size
    # replaces what it records: it vouches for the class names too.
    recorded, recorded_keep = litert_record.read_resize(path, size, labels_used)
    litert_record.warn_without_record(path, size, resize_size, not labels_used)
    resize_size = recorded if resize_size is None else resize_size
    keep = recorded_keep if keep_aspect is None else keep_aspect

    def predict(images: Sequence[bytes]) -> np.ndarray:
        pixels = _pixels(images, size, resize_size, keep)
        return litert.run_litert(path, (pixels + 1.0) * 127.5)

    predict.num_classes = num_classes
    predict.input_size = size
    return predict


def _built_in(flag: str, kind: str) -> str:
    return (f"--{flag} is built into {kind} when it is exported: leave "
            f"--{flag} out, or export the model again with it "
            f"(keras-vit-export --{flag}=...).")


def predictor(values, source) -> Callable:
    """The predict function of --model (`source`), with the model's class
    count as its `num_classes` (None where the model does not say)."""
    if source.kind == "saved_model":
        for name in ("resize_size", "keep_aspect"):
            if values[name].value is not None:
                raise UsageError(_built_in(name, "a SavedModel"))
        if values["scores"].present:
            raise UsageError(_built_in("scores", "a SavedModel"))
        return saved_model_predictor(source.version())
    if source.kind == "litert":
        if values["scores"].present:
            raise UsageError(_built_in("scores", "a LiteRT file"))
        predict = litert_predictor(source.path, values.resize_size,
                                   labels_used=not values.class_names_file,
                                   keep_aspect=values.keep_aspect)
        if values.resize_size is not None:
            cli.check_at_least_input(values.resize_size, predict.input_size)
        return predict
    model = cli.load_flagged_model(values, source, head="predict with")
    cli.model_image_size(model, source.path)  # none named: refused here
    resize = cli.resize_size(values, source, model)
    return keras_predictor(
        model, resize, cli.keep_aspect(values, source, resize),
        scoring.scores(values, source, int(model.output_shape[-1])))


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-predict (the images are its arguments)."""
    del argv
    cli.define_model(values, extra=" Or an export: a SavedModel (a version "
                     "folder, or the model folder: its newest version) or a "
                     "LiteRT .tflite file.")
    cli.define_resize_size(values)
    cli.define_class_names_file(values)
    scoring.define_scores(values)
    flags.DEFINE_integer("top_k", 5, "Classes shown per image (at most the "
                         "model's classes).",
                         flag_values=values)
    flags.DEFINE_integer("batch_size", 32, "Images per forward pass.",
                         flag_values=values)
    flags.DEFINE_string("output", None, "Write .json or .csv instead of "
                        "printing (a file already there is kept unless "
                        "--overwrite).", flag_values=values)
    flags.DEFINE_boolean("overwrite", False, "Replace --output where a file "
                         "is there already (by default refused).",
                         flag_values=values)
    flags.DEFINE_boolean("skip_bad_images", False, "Name and leave out "
                         "unreadable files (and images the resize refuses) "
                         "instead of stopping at the first.",
                         flag_values=values)


def check_flags(args) -> None:
    """UsageErrors for flags that cannot work, before any model is read."""
    for name in ("top_k", "batch_size"):
        if getattr(args, name) < 1:
            raise UsageError(f"--{name}={getattr(args, name)}: must be >= 1.")
    cli.check_output_path(args, "output", folder=False)
    check_output(args.output)
    if args.overwrite and not args.output:
        raise UsageError("--overwrite goes with --output only: give the "
                         "file to replace, or leave --overwrite out.")
    if args.output and not args.overwrite:
        cli.check_not_written(args.output, "output")


def classify(predict: Callable, files: Sequence[str], batch_size: int,
             show_progress: bool, skip_bad: bool = False):
    """(probabilities (n, K), the n files answered, [(file, reason)] left
    out): `files` `batch_size` at a time, with a count on stderr where
    `show_progress`. A file the preprocessing refuses (an image too
    elongated to resize keeping its aspect ratio) stops the run with its
    name, or with `skip_bad` is named on stderr and left out (its batch
    tried again a file at a time)."""
    probabilities, answered, skipped = [], [], []
    for start in range(0, len(files), batch_size):
        batch = files[start: start + batch_size]
        try:
            probabilities.append(predict([read_bytes(f) for f in batch]))
            answered.extend(batch)
        except tf.errors.InvalidArgumentError as error:  # preprocessing
            if not skip_bad:
                raise UsageError(_refused(predict, batch, error)) from None
            progress.end_line()  # what follows is on a line of its own
            _each_alone(predict, batch, probabilities, answered, skipped)
        if show_progress:
            progress.show(f"predicted {start + len(batch)}/{len(files)} images")
    progress.end_line()
    if not probabilities:
        raise UsageError("No readable image to classify.")
    return np.concatenate(probabilities), answered, skipped


def _one_at_a_time(predict: Callable, batch: Sequence[str]):
    """(file, probabilities, None), or (file, None, reason) where
    `predict` refuses it, for each file of `batch` given alone (its own
    reason: a batch's error may name another file's)."""
    for path in batch:
        try:
            yield path, predict([read_bytes(path)]), None
        except tf.errors.InvalidArgumentError as error:
            yield path, None, checks.decode_reason(error)


def _refused(predict: Callable, batch: Sequence[str], error) -> str:
    """'file: reason' for the first file of `batch` that `predict`
    refuses alone, else 'files: reason' of the batch's `error`."""
    return next((f"{path}: {reason}" for path, _, reason in
                 _one_at_a_time(predict, batch) if reason),
                f"{', '.join(batch)}: {checks.decode_reason(error)}")


def _each_alone(predict: Callable, batch: Sequence[str], probabilities,
                answered, skipped) -> None:
    """`batch` given to `predict` a file at a time: the answers appended
    to `probabilities` and `answered`, each file refused named on stderr
    and appended to `skipped` with its reason."""
    for path, answer, reason in _one_at_a_time(predict, batch):
        if reason:
            skip(path, reason, skipped)
        else:
            probabilities.append(answer)
            answered.append(path)


def print_results(args, files, tops, skipped) -> None:
    """The answers on stdout (or written to --output, and a line saying
    so). A reader that stops early (`| head`) ends the printing quietly."""
    try:
        if args.output:
            try:  # kept unless --overwrite, even one made meanwhile
                write_output(args.output, files, tops, skipped,
                             args.overwrite)
            except FileExistsError:
                cli.check_not_written(args.output, "output")
                raise
            count = f"{len(files)} image{'' if len(files) == 1 else 's'}"
            print(f"{count} -> {args.output}"
                  + (f" ({len(skipped)} skipped)" if skipped else ""))
        else:
            for path, top in zip(files, tops):
                answer = ", ".join(f"{n} {p:.3f}" for _, n, p in top)
                print(f"{one_line(path)}: {answer}")
        sys.stdout.flush()
    except BrokenPipeError:  # `... | head -2`: the reader has its lines
        cli.stdout_closed()


def run(args, images: Sequence[str]) -> int:
    """Classifies `images` (files and folders) with the model `args`
    (the parsed flags) name; returns the exit status."""
    if not images:
        raise UsageError("Give the images to classify (files or folders) "
                         "as arguments.")
    check_flags(args)  # --output=~/p.json: the home folder, as --model
    # A model is there, before the images are read.
    source = cli.model_source(args, exports=True)
    if source.kind == "saved_model":  # one version for model and names,
        # even when another is published while the model loads
        source = dataclasses.replace(source, path=source.version())
    if args.output and source.kind == "litert" and os.path.abspath(
            args.output) in map(os.path.abspath,
                                litert_record.written_paths(source.path)):
        raise UsageError(f"--output {args.output} is a file of the LiteRT "
                         "export: choose another name.")
    files, folder = list_images(images)
    predict = predictor(args, source)
    # One name per class, before any image is read.
    names = cli.class_names(args, source)
    if names is None and source.kind != "litert":  # (a .tflite says so)
        logging.warning("%s names no classes: they are printed as numbers "
                        "(--class_names_file=FILE names them, one per line "
                        "in label order).", args.model)
    cli.check_class_count(args, source, names, predict.num_classes)
    files, skipped = check_images(files, args.skip_bad_images,
                                  show_progress=folder)
    probabilities, files, refused = classify(
        predict, files, args.batch_size, folder, args.skip_bad_images)
    skipped += refused
    num_classes = probabilities.shape[-1]
    if predict.num_classes is None:  # the model did not say before
        cli.check_class_count(args, source, names, num_classes)
    if names is None:
        names = [str(i) for i in range(num_classes)]
    tops = top_k(probabilities, names, min(args.top_k, num_classes))
    print_results(args, files, tops, skipped)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-predict; the exit status."""
    return cli.run("predict", define_flags, run, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
