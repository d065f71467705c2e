r"""keras-vit-analysis: the paper's analysis figures (Section 4.5) of a
model in one command, or a training run's curves.

    keras-vit-analysis --model=vit.keras --output_dir=analysis/ photos/
    keras-vit-analysis --model=/tmp/vit_digits --digits=8 \
        --output_dir=/tmp/analysis
    keras-vit-analysis --curves=/tmp/vit_digits

writes attention_rollout.png, mean_attention_distance.png,
position_embedding_similarity.png, patch_embedding_pca.png (not for a
hybrid), for a masked-patch-prediction run also mpp_predictions.png, and,
last, analysis.json (the numbers behind them all) into --output_dir (local
or gs://), replacing an earlier analysis there whole once every figure
is drawn (a stop midway leaves it as it was); a file of those names that
no earlier analysis wrote there is refused, not replaced. A model saved with a
dynamic image size is analysed at the size it keeps its position
embeddings at, or at --image_size. The images are the positional
arguments (files and folders) or, with no data at hand, scikit-learn's
bundled digits (--digits=N), preprocessed as
keras-vit-predict does (the model's evaluation resize, or --resize_size).
Prints the paths written.

--curves=WORKDIR draws a training run's loss, accuracy and learning rate
over the steps, from its history.csv, into training_curves.png in
--output_dir (default: the workdir).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from absl import flags

from keras_vit import progress
from keras_vit.commands import flags as cli
from keras_vit.commands import scoring
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    from keras_vit import derived
    from keras_vit import model as vit_model
    from keras_vit.analysis import (
        curves,
        extract,
        inputs,
        mpp_figure,
        plots,
        report,
    )
    from keras_vit.checkpoint import resolution
    from keras_vit.evaluation import accuracy
    from keras_vit.export import graph as export_graph
    from keras_vit.storage import atomic
else:
    derived = lazy_module("keras_vit.derived")
    vit_model = lazy_module("keras_vit.model")
    curves = lazy_module("keras_vit.analysis.curves")
    extract = lazy_module("keras_vit.analysis.extract")
    inputs = lazy_module("keras_vit.analysis.inputs")
    mpp_figure = lazy_module("keras_vit.analysis.mpp_figure")
    plots = lazy_module("keras_vit.analysis.plots")
    report = lazy_module("keras_vit.analysis.report")
    resolution = lazy_module("keras_vit.checkpoint.resolution")
    export_graph = lazy_module("keras_vit.export.graph")
    accuracy = lazy_module("keras_vit.evaluation.accuracy")
    atomic = lazy_module("keras_vit.storage.atomic")


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-analysis."""
    del argv
    cli.define_model(values, required=False)
    cli.define_hints(values, "variant", "image_size")
    cli.define_resize_size(values)
    flags.DEFINE_string("output_dir", None, "Where the figures and "
                        "analysis.json go (--curves: default the workdir).",
                        flag_values=values)
    flags.DEFINE_string("curves", None, "A training run's workdir: draw its "
                        "loss, accuracy and learning rate over the steps "
                        "(training_curves.png) instead.", flag_values=values)
    flags.DEFINE_integer("digits", None, "Use the first N scikit-learn "
                         "digits (bundled, no download) instead of image "
                         "arguments.", flag_values=values)
    cli.define_class_names_file(values)
    scoring.define_scores(values)
    flags.DEFINE_integer("batch_size", 16, "Images per forward pass.",
                         flag_values=values)
    flags.DEFINE_integer("max_rollout_images", 8, "Images drawn in the "
                         "rollout figure (all go into the JSON).",
                         flag_values=values)
    flags.DEFINE_integer("num_components", 28, "Principal components of the "
                         "patch filters.", flag_values=values)
    flags.DEFINE_boolean("skip_bad_images", False, "Name an image that "
                         "cannot be read on stderr and leave it out, "
                         "instead of stopping.", flag_values=values)


def _main(values: flags.FlagValues, images: list) -> None:
    cli.check_output_path(values, "output_dir",
                          default=("curves", values.curves))
    # Before any model is read: the figures are the command's output.
    plots.require_matplotlib()
    if values.curves:
        given = sorted({f"--{n}" for n in values if values[n].present}
                       - {"--curves", "--output_dir", "--verbose"})
        if given or images:
            raise UsageError(
                "--curves draws a run's training curves: give it alone "
                "(with --output_dir), not with "
                + ", ".join(given + (["images"] if images else [])) + ".")
        print(curves.draw_curves(values.curves, values.output_dir))
        return
    if not (values.model and values.output_dir):
        raise UsageError("Give --model and --output_dir (the attention "
                         "figures), or --curves=WORKDIR (a run's training "
                         "curves).")
    if bool(images) == (values.digits is not None):
        both = " (not both)" if images else ""
        raise UsageError(
            f"Give the images (files or folders, as arguments) or "
            f"--digits=N{both}."
        )
    for name in ("batch_size", "max_rollout_images", "num_components"):
        if values[name].value < 1:
            raise UsageError(f"--{name}={values[name].value}: must be "
                             ">= 1.")
    report.check_replaceable(values.output_dir)  # before the model loads
    source = cli.model_source(values)
    # In float32, as keras-vit-predict and the export compute (a model
    # saved under mixed_bfloat16 is copied).
    model = export_graph.float32_inference_model(
        _fixed_size(cli.load_flagged_model(values, source, token_cap=False),
                    values.model))  # (its memory checked below)
    cli.warn_zero_head(source, model)  # its predictions would mean nothing
    class_names = _class_names(values, source, model)
    # Before any image is read: a size at which not one image's attention
    # fits (the batch size is checked once the images are counted).
    extract.check_memory(model, 1)
    size = tuple(model.input_shape[1:3])
    # Preprocessed as keras-vit-predict and evaluation do: the model's
    # evaluation resize (or --resize_size), then the central crop.
    resize = cli.resize_size(values, source, model)
    keep = cli.keep_aspect(values, source, resize)
    # Before the images: a source that does not load again stops the run
    # before they are read.
    learned = _learned_positions(values, source, model)
    if images:
        pixels, names = inputs.load_images(
            images, size, resize, keep, output_dir=values.output_dir,
            show_progress=True,
            skip_bad_images=values.skip_bad_images)
    else:
        pixels, names = inputs.digits_images(values.digits, size, resize,
                                             keep)
    data = report.run_analysis(
        model, pixels, values.output_dir, names=names,
        batch_size=values.batch_size,
        max_rollout_images=values.max_rollout_images,
        num_components=values.num_components, class_names=class_names,
        more_figures=_mpp_figure(values, source, pixels, names, size),
        on_batch=_count if len(pixels) > values.batch_size else None,
        learned_positions=learned, scores=_scores(values, source, model),
        model_facts=dict(  # the weights read (a workdir's EMA or not)
            location=atomic.absolute(source.path),
            use_ema=accuracy.ema_weights(source), image_size=list(size),
            resize_size=resize, keep_aspect=keep),
    )
    for name in list(data["figures"].values()) + [report.JSON_NAME]:
        print(os.path.join(values.output_dir, name))


def _count(done: int, total: int) -> None:
    """The forward pass's progress, on one terminal line."""
    progress.show(f"analysed {done}/{total} images")
    if done == total:
        progress.end_line()


def _fixed_size(model, path: str):
    """`model` at a fixed input size: a model saved with a dynamic image
    size is rebuilt at the size its position embeddings are kept at (as
    keras-vit-predict reads it), and one with no such size (sin-cos
    position embeddings) is refused, before any image is read, naming
    --image_size (which the loader rebuilds the model at)."""
    if None not in tuple(model.input_shape[1:3]):
        return model
    size = cli.model_image_size(
        model, path, "pass --image_size=N, the resolution to analyse at")
    return resolution.rebuild_at_resolution(model, size)


def _learned_positions(values: flags.FlagValues, source, model):
    """(table, grid) of the position embeddings as `source` learned them,
    where --image_size resized the model's (bilinear interpolation alone
    makes neighbours alike: the resized table is no figure of what was
    learned); None where the model's own table is the learned one, or a
    computed one (sin-cos). The source is read once more, at its own
    size, for it."""
    if cli.hint(values, "image_size") is None or (
            vit_model.architecture_of(model).posemb != "learn"):
        return None
    own = _fixed_size(cli.load_flagged_model(values, source, own_size=True),
                      values.model)
    grid = extract.token_layout(own).grid
    if grid == extract.token_layout(model).grid:
        return None
    return extract.position_embeddings(own), grid


def _mpp_figure(values: flags.FlagValues, source, pixels, names,
                size) -> dict:
    """An MPP run's mpp_predictions.png, as `run_analysis`'s
    `more_figures`: what its head predicts for corrupted patches, from the
    same model as the other figures (its size and weights: EMA or raw,
    --no_ema). Nothing for other models."""
    if source.run_config() is None or not mpp_figure.is_mpp_run(source.path):
        return {}
    return {"mpp_predictions": (mpp_figure.FIGURE, lambda folder: (
        mpp_figure.draw_for_run(
            source.path, pixels, folder, titles=names,
            max_images=values.max_rollout_images, image_size=size,
            use_ema=getattr(source, "use_ema", True))))}


def _scores(values: flags.FlagValues, source, model) -> str:
    """How each image's probability scores the logits (--scores); a
    features model has none to score."""
    if derived.is_features_model(model):
        return "softmax"
    return scoring.scores(values, source, int(model.output_shape[-1]))


def _class_names(values: flags.FlagValues, source, model) -> Optional[list]:
    """--class_names_file's names (else the model's own), one per class of
    `model`: checked before any image is read."""
    names = cli.class_names(values, source)
    if values.class_names_file and derived.is_features_model(model):
        raise UsageError(
            f"{values.model} has no classification head (a backbone or an "
            "MPP encoder): --class_names_file has no class to name; leave "
            "it out.")
    if derived.is_features_model(model):
        return None  # the source's own names: no head here to name
    cli.check_class_count(values, source, names, int(model.output_shape[-1]))
    return names


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-analysis; the exit status."""
    return cli.run("analysis", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
