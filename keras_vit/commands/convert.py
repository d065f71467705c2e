r"""keras-vit-convert: a model (an official .npz, a Hugging Face / timm
folder, a keras-hub preset, a training run) as a Keras `.keras` file.

    keras-vit-convert --model=imagenet21k+imagenet2012/ViT-B_16 \
        --variant=B/16 --num_classes=1000 --image_size=384 \
        --output=vit_b16_384.keras

An .npz's architecture is read from its shapes (--variant checks it);
--num_classes sets the head of any source (the source's is kept when the
width matches, else it starts at zero; 0 gives a features model),
--representation_size the pre-logits layer under it, --pooling how an
.npz is built. Prints the load report and the file
written; a crash never leaves a partial file at --output, and a file
already there is kept unless --overwrite.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional, Sequence

from absl import flags, logging

from keras_vit.commands import flags as cli
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    from keras_vit.checkpoint import loader
    from keras_vit.checkpoint.hub import keras_preset
    from keras_vit.storage import atomic
    from keras_vit.storage import workdir as wd
else:
    loader = lazy_module("keras_vit.checkpoint.loader")
    keras_preset = lazy_module("keras_vit.checkpoint.hub.keras_preset")
    atomic = lazy_module("keras_vit.storage.atomic")
    wd = lazy_module("keras_vit.storage.workdir")


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-convert."""
    del argv
    cli.define_model(values)
    cli.define_hints(
        values, "variant", "num_classes", "image_size", "representation_size",
        num_classes="The head's width: the source's head is kept when it "
        "matches, else the head starts at zero; 0 gives a features model "
        "(default: the source's).",
        representation_size="Keep the source's pre-logits layer of this "
        "width under a new head (default: the source's where its head is "
        "kept, none under a new one, as for transfer in the paper).",
    )
    flags.DEFINE_string("output", None, "The .keras file to write.",
                        flag_values=values, required=True)
    flags.DEFINE_boolean("overwrite", False, "Replace --output where a file "
                         "is there already (by default refused).",
                         flag_values=values)
    flags.DEFINE_enum("pooling", None, ["token", "gap"], "An .npz model: "
                      "the pooling to build (default: the file's).",
                      flag_values=values)
    flags.DEFINE_boolean("non_strict", False, "An .npz or hub model: load "
                         "what fits instead of failing on any mismatch.",
                         flag_values=values)


def convert(source, output: str, *, image_size=None, overwrite=True,
            **build):
    """Loads `source` (`loader.load_report`, with `image_size` and the
    `build` options it takes: num_classes, pooling, representation_size,
    strict) and writes it to `output` (.keras) atomically: a crash never
    leaves a partial file there. Returns the .npz's or hub folder's
    LoadReport (None for the other sources). Without `overwrite`, a file
    at `output` when it is written (one made during the load, too) is a
    FileExistsError, and is kept."""
    _check_keras_name(output)
    source = loader.resolve(source)
    model, report = loader.load_report(source, image_size, **build)
    loader.warn_if_no_vit(source, model)  # re-saved as it is
    if not _new_head(source, build, report):  # zeros by design
        cli.warn_zero_head(source, model)
    atomic.atomic_write(output, model.save, replace=overwrite)
    return report


def _new_head(source, build, report) -> bool:
    """Whether the model has a new head: `report` (the LoadReport, if any)
    says so, or `build`'s --num_classes is another width than the
    source's (its own width keeps the source's head)."""
    if report is not None and report.head_initialized:
        return True
    width = build.get("num_classes")
    return width is not None and width != source.architecture().num_classes


def _check_keras_name(output: str) -> None:
    if not output.endswith(".keras"):
        raise UsageError(
            f"`output` {output!r} must end with .keras (Keras's format)."
        )


def _main(values: flags.FlagValues, args: list) -> None:
    cli.refuse_arguments(args)
    cli.check_output_path(values, "output", folder=False)
    _check_keras_name(values.output)  # before a model is downloaded
    if not values.overwrite:
        cli.check_not_written(values.output, "output")
    source = cli.model_source(values)
    build = {}
    for name in ("num_classes", "pooling", "representation_size"):
        if values[name].value is not None:
            build[name] = values[name].value
    if values.non_strict:
        if source.kind not in ("npz", "hub") and not build:
            raise UsageError(
                "--non_strict goes with an .npz or hub model, or a new "
                f"--num_classes or --representation_size; {values.model} is "
                f"{cli.what(source)}, which holds its model whole (its "
                "arrays fit it): leave --non_strict out.")
        build["strict"] = False
    if values.image_size is not None:
        cli.check_size(source, values.image_size)
    try:
        report = convert(source, values.output, image_size=values.image_size,
                         overwrite=values.overwrite, **build)
    except FileExistsError:  # made while the model loaded: kept
        cli.check_not_written(values.output, "output")
        raise
    if report is not None:  # worded for the shell, as its errors are
        print(cli.shell_words(str(report), values))
    _warn_not_carried(values, source, _new_head(source, build, report))
    print(f"Wrote {values.output}.")


def _warn_not_carried(values: flags.FlagValues, source,
                      new_head: bool) -> None:
    """One warning line naming what the source records beside its weights
    that a .keras file does not keep (its class names, its eval resize),
    and how predict and export take it instead."""
    given, lost = [], []
    names = None if new_head else loader.class_names(source)
    if names and len(names) != source.architecture().num_classes:
        names = None  # an MPP run's encoder, or names that fit no head
    if names:
        file = (os.path.join(source.path, wd.LABELS)
                if source.kind == "workdir" else "FILE")
        given.append(f"its {len(names)} class names (pass them as "
                     f"--class_names_file={file}, one per line)")
    if not new_head and source.scores() == "sigmoid" and (
            source.architecture().num_classes > 1):
        given.append("its sigmoid scores (pass --scores=sigmoid)")
    resize = cli.source_resize(source, values.image_size)
    if resize:
        keep = " --keep_aspect" * cli.source_keep_aspect(source)
        given.append(f"its evaluation resize (pass --resize_size={resize}"
                     f"{keep})")
    elif cli.source_keep_aspect(source):
        given.append("its crop to the input's aspect ratio before the "
                     "resize (pass --keep_aspect)")
    # keras-hub builds no model at another size: its tables are resized as
    # keras_vit resizes them, so nothing of that is lost.
    if source.kind == "hub" and values.image_size is None and not (
            keras_preset.is_preset(source.path)):
        lost.append("its library's way of resizing the position table (an "
                    "--image_size given to the .keras file resizes it as "
                    "keras_vit does: convert at the size you will use, with "
                    "--image_size here)")
    flags_named = "these flags" if "".join(given).count("--") > 1 else (
        "that flag")
    if given or lost:
        logging.warning(
            "%s does not keep what %s records beside its weights: %s%s",
            values.output, source.path, "; ".join(given + lost),
            f". Give keras-vit-predict and keras-vit-export --model="
            f"{values.output} {flags_named}." if given else ".")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-convert; the exit status."""
    return cli.run("convert", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
