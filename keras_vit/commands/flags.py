"""What the six commands share: one definition of each common flag
(`--model`, `--config`, the run and shape-hint flags), the model they name
(`model_source`, `load_flagged_model`) and the strategy (`strategy`).
`runner.run` is the one entry point, with the one error policy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Optional, Sequence, Tuple, Union

import numpy as np
from absl import flags, logging
from ml_collections import config_flags

from keras_vit import errors, grid
from keras_vit.checkpoint import absent
from keras_vit.commands import listing
from keras_vit.commands.config_args import (  # noqa: F401 (commands' API)
    WholeConfigParser,
    normalize_argv,
    refuse_arguments,
    resolve_config_arg,
    shell_words,
)
from keras_vit.commands.labels import (  # noqa: F401 (the commands' API)
    check_class_count,
    class_names,
    class_names_file,
    define_class_names_file,
)
from keras_vit.commands.lazy import lazy_module
from keras_vit.commands.listing import stdout_closed  # noqa: F401 (API)
from keras_vit.commands.outputs import (  # noqa: F401 (the commands' API)
    check_not_written,
    check_output_path,
)
from keras_vit.commands.resize import (  # noqa: F401 (the commands' API)
    check_at_least_input,
    define_resize_size,
    keep_aspect,
    resize_size,
    scaled_resize,
    source_keep_aspect,
    source_resize,
)
from keras_vit.commands.runner import (  # noqa: F401 (the commands' API)
    define_verbose,
    parse,
    run,
)
from keras_vit.config import SOURCE_KINDS
from keras_vit.errors import UsageError

if TYPE_CHECKING:  # what type checkers and the import contracts read
    import keras

    from keras_vit import derived
    from keras_vit.checkpoint import loader
    from keras_vit.training import distribute
else:  # imported at first use: `--help` loads no Keras or TensorFlow
    keras = lazy_module("keras")
    loader = lazy_module("keras_vit.checkpoint.loader")
    derived = lazy_module("keras_vit.derived")
    distribute = lazy_module("keras_vit.training.distribute")

# The one description of what --model takes (the resolver's). The flags
# are defined without Keras or TensorFlow (`--help` loads neither); the
# functions that load a model import them.
MODEL_HELP = "The model: {}.".format(SOURCE_KINDS.replace(
    "`keras_vit.list_models()`", f"--{listing.FLAG}"))


# ---------------------------------------------------------------- flags
def define_model(values: flags.FlagValues, required: bool = True,
                 extra: str = "", ema: bool = True) -> None:
    """--model, with --posemb_grid and --no_ema (which picks a workdir's
    weights) unless `ema` is False: a training run records its starting
    model in its config, which keeps neither."""
    flags.DEFINE_string("model", None, MODEL_HELP + extra,
                        flag_values=values, required=required)
    flags.DEFINE_string(listing.FLAG, None, listing.HELP, flag_values=values)
    if not ema:
        return
    flags.DEFINE(ImageSizeParser(), "posemb_grid", None,
                 "An .npz model: its patch grid when not square, e.g. "
                 "14x20.", flag_values=values)
    flags.DEFINE_boolean(
        "no_ema", False,
        "A training workdir: its raw weights, not the EMA (Polyak) average.",
        flag_values=values,
    )


def parse_image_size(text: str) -> Union[int, Tuple[int, int]]:
    """"384" -> 384; "384x512" or "384,512" -> (384, 512)."""
    parts = str(text).replace(",", "x").lower().split("x")
    try:
        sizes = [int(p) for p in parts]
    except ValueError:
        sizes = []
    if len(sizes) == 1:
        return sizes[0]
    if len(sizes) == 2:
        return sizes[0], sizes[1]
    raise UsageError(
        f"image size {text!r}: use an int (384) or HEIGHTxWIDTH (384x512)."
    )


class ImageSizeParser(flags.ArgumentParser):
    """absl parser of "384" or "384x512"."""

    def parse(self, argument):
        if argument is None or isinstance(argument, (int, tuple)):
            return argument
        try:
            return parse_image_size(argument)
        except UsageError as error:
            raise ValueError(str(error)) from None

    def flag_type(self) -> str:
        return "image size"


_HINTS = {
    "variant": lambda v, help_: flags.DEFINE_string(
        "variant", None, help_, flag_values=v),
    "num_classes": lambda v, help_: flags.DEFINE_integer(
        "num_classes", None, help_, flag_values=v),
    "image_size": lambda v, help_: flags.DEFINE(
        ImageSizeParser(), "image_size", None, help_, flag_values=v),
    "representation_size": lambda v, help_: flags.DEFINE_integer(
        "representation_size", None, help_, flag_values=v),
}
HINT_HELP = {
    "variant": 'An .npz model: the variant it must be, e.g. "B/16" or '
    '"R50+B/16" (checked against the file; default: read from it).',
    "num_classes": "An .npz model: the head's class count (checked against "
    "the file's).",
    "image_size": "Input resolution, 384 or HEIGHTxWIDTH (position "
    "embeddings resized); default: the model's (an .npz: its position-"
    "embedding grid's).",
    "representation_size": "An .npz model: its pre-logits width (default: "
    "the file's).",
}


def define_hints(values: flags.FlagValues, *names: str, **helps: str) -> None:
    """The shape hints of an .npz model, by name (variant, num_classes,
    image_size, representation_size); `helps` replaces a help text."""
    for name in names:
        _HINTS[name](values, helps.get(name, HINT_HELP[name]))


def define_config(values: flags.FlagValues, argv: Sequence[str],
                  required: bool = False) -> None:
    """--config: a packaged config by name (`digits`) or a path, with an
    optional `:arg`; --config.FIELD=VALUE overrides its fields."""
    config_flags.DEFINE_config_file(
        "config", None,
        "A config: one shipped in keras_vit/configs by name (digits, "
        "finetune, ...) or a path (configs/digits.py); `NAME:arg` passes arg "
        "to its get_config. --config.FIELD=VALUE overrides a field.",
        flag_values=values, lock_config=True,
        sys_argv=normalize_argv(argv),
    )
    values["config"].parser = WholeConfigParser("config", lock_config=True)
    if required:
        flags.mark_flag_as_required("config", flag_values=values)


class _PathParser(flags.ArgumentParser):
    """A path whose leading `~` is the home folder (the shell leaves it
    after `=`: --workdir=~/run would be a folder named `~` here)."""

    syntactic_help = "a path"

    def parse(self, argument):
        return os.path.expanduser(str(argument))


def define_run_flags(values: flags.FlagValues) -> None:
    """--workdir, --strategy, --tpu and --cpu_devices (train, evaluate)."""
    flags.DEFINE(
        _PathParser(), "workdir", None,
        "A training run's directory (local path or gs://): train writes its "
        "config, checkpoints, summaries and metrics there; evaluate reads "
        "its model and writes results there.",
        flag_values=values, serializer=flags.ArgumentSerializer(),
    )
    flags.DEFINE_enum(
        "strategy", "auto", ["auto", "tpu", "mirrored", "multiworker", "cpu"],
        "tf.distribute strategy: auto picks a TPU if found, else GPUs, else "
        "the CPU.", flag_values=values,
    )
    flags.DEFINE_string("tpu", None, 'TPU name or address; "local" on a TPU '
                        "VM.", flag_values=values)
    flags.DEFINE_integer(
        "cpu_devices", 0,
        "Split the CPU into this many logical devices, one replica each "
        "for --strategy=mirrored (or auto) on a machine without GPUs: "
        "multi-device training on a laptop.", flag_values=values,
    )


# ----------------------------------------------------------- the model
def model_source(values: flags.FlagValues, text: Optional[str] = None, *,
                 exports: bool = False,
                 tensorflow_work: Optional[str] = None) -> loader.Source:
    """The Source that --model (or `text`) names (`loader.resolve`), with
    the hints given; an exported SavedModel only with `exports`. A bad
    --class_names_file is named first, before any model is read; with
    `tensorflow_work` (why the command needs TensorFlow), another Keras
    backend is refused before a released model is downloaded."""
    class_names_file(values)
    text = values.model if text is None else text
    if text:  # a path with nothing there: said before TensorFlow loads
        absent.check_there(str(text))
    if tensorflow_work:
        check_tensorflow_backend(tensorflow_work)
    if hint(values, "no_ema") and text and loader.download_kind(str(text)):
        raise UsageError(  # refused before it is downloaded
            f"--no_ema goes with a training workdir only; {text} is "
            f"{loader.kind_words(loader.download_kind(str(text)))}, which "
            "holds one set of weights: leave --no_ema out.")
    hints = dict(use_ema=not hint(values, "no_ema"), exports=exports)
    for name in ("variant", "posemb_grid"):
        if hint(values, name) is not None:
            hints[name] = hint(values, name)
    source = loader.resolve(text, **hints)
    if hint(values, "no_ema") and source.kind != "workdir":
        raise UsageError(
            f"--no_ema goes with a training workdir only; {text} is "
            f"{what(source)}, which holds one set of weights: leave "
            "--no_ema out.")
    if hint(values, "no_ema") and not source.run_config().trainer.ema_decay:
        raise UsageError(  # else a second result file of the same weights
            f"--no_ema: the run in {text} kept no EMA weights "
            "(its trainer.ema_decay is 0), only the ones it uses "
            "anyway: leave --no_ema out.")
    return source


def model_image_size(model: keras.Model, path: str,
                     fix: Optional[str] = None) -> Tuple[int, int]:
    """(height, width) that images are resized to for `model`
    (`derived.input_image_size`: for a model of any size, the size its
    position embeddings are kept at); one with sin-cos position
    embeddings, kept at no size, is refused in one line naming `fix`
    (default: a fixed-size copy made by keras-vit-convert)."""
    size = derived.input_image_size(model)
    if None in size:
        fix = fix or (f"fix one with keras-vit-convert --model={path} "
                      "--image_size=N --output=FIXED.keras and use that file")
        raise UsageError(
            f"{path} was saved with a dynamic image size (sin-cos position "
            f"embeddings, kept at no size): {fix}.")
    return int(size[0]), int(size[1])


def what(source: loader.Source) -> str:
    """What kind of model `source` is, in words ("a .keras file")."""
    return loader.kind_words(source.kind)


def hint(values: flags.FlagValues, name: str):
    """The value of shape-hint flag `name`, None when the command has no
    such flag."""
    return values[name].value if name in values else None


def load_flagged_model(values: flags.FlagValues,
                       source: Optional[loader.Source] = None, *,
                       image_size=None,
                       head: Optional[str] = None,
                       own_size: bool = False,
                       token_cap: bool = True) -> keras.Model:
    """`loader.load_vit` of the --model source (or `source`) with the
    shape hints the command line gives.

    Args:
        image_size: the resolution to load at; default --image_size.
        own_size: bool. At the source's own resolution, whatever
            --image_size says.
        head: str or None. What the command does with the classifier
            ("serve", "predict with"): a model without a classification
            head is then an error naming the fix.
        token_cap: bool. Refuse a size of more than `grid.MAX_TOKENS`
            tokens (`check_size`); False where the command checks its
            memory itself.
    """
    source = model_source(values) if source is None else source
    kwargs = {}
    if hint(values, "representation_size") is not None:
        kwargs["representation_size"] = hint(values, "representation_size")
    size = image_size if image_size is not None or own_size else hint(
        values, "image_size")
    if size is not None and token_cap:
        check_size(source, size)
    model = loader.load_vit(source, size, **kwargs)
    if head is None:
        return model
    if "head" not in {layer.name for layer in model.layers}:
        raise UsageError(
            f"{source.path} has no classification head (a backbone or an "
            f"MPP encoder): nothing to {head}. Fine-tune it first "
            f"(keras-vit-train --config.init.model={source.path} ...)."
        )
    warn_zero_head(source, model)
    wanted, width = hint(values, "num_classes"), int(model.output_shape[-1])
    if wanted is not None and wanted != width:
        raise UsageError(
            f"--num_classes {wanted} does not match the {width}-class head "
            f"of {source.path}; a new head would be untrained. Drop "
            f"--num_classes or pass {width}."
        )
    return model


def check_size(source: loader.Source, image_size) -> None:
    """A size given on the command line at which `source` would hold more
    than `grid.MAX_TOKENS` tokens (a typo: 38400 for 384) is refused
    before the model is built, which the system's out-of-memory killer
    would end without a word."""
    grid.check_tokens(image_size, source.architecture().stride)


def warn_zero_head(source: loader.Source, model: keras.Model) -> None:
    """A warning when the model's classification head is all zeros, as
    the ImageNet-21k releases ship it (zeroed for fine-tuning), or as a
    new head starts (a `.keras` file converted with another
    --num_classes): every class scores alike."""
    head = getattr(getattr(model, "parts", None), "head", None)
    if head is not None and head.weights and not any(
            np.any(w.numpy()) for w in head.weights):
        released = source.kind in ("npz", "hub")
        logging.warning(
            "%s's classification head is all zeros, %s: every class "
            "scores alike. Fine-tune it first (--config.init.model)%s.",
            source.path, "as the ImageNet-21k releases ship it" if released
            else "as a new head starts",
            ", or use a fine-tuned release" if released else "")


def check_tensorflow_backend(why: str) -> None:
    """Refuses a command whose work (`why`) is TensorFlow's under another
    Keras backend, before it loads a model or writes anything."""
    errors.check_tensorflow_backend(keras.backend.backend(), why)


def strategy(values: flags.FlagValues, config, training: bool = True):
    """The strategy of --strategy, --tpu and --cpu_devices (a failed set-up
    raises cluster.SetupError, which `run` prints as one line).

    Args:
        config: ConfigDict or None. Its connect_timeout_s bounds the wait
            for other workers or a remote TPU (None: the default).
        training: bool. The command trains (not on a TF_CONFIG evaluator).
    """
    timeout = None if config is None else config.trainer.connect_timeout_s
    return distribute.create_strategy(
        values.strategy, values.tpu, connect_timeout_s=timeout,
        cpu_devices=values.cpu_devices, training=training,
    )
