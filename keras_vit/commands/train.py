r"""keras-vit-train (and `python train.py`): train a config into a workdir,
evaluate it, and export it for serving when `config.export.enabled`.

    keras-vit-train --config=digits --workdir=/tmp/vit_digits
    keras-vit-train --config=finetune:dataset=cifar100,variant=B/16 \
        --workdir=gs://BUCKET/vit/cifar100 --strategy=tpu --tpu=local \
        --config.init.model=ViT-B_16

--config names a config shipped in keras_vit/configs (`digits`) or a path
(`configs/digits.py`, `my_config.py:arg`); --config.FIELD=VALUE overrides a
field (the config is locked: a misspelt field is an error naming the
closest); `--config NAME` and `--config=NAME` are the same.
`--model=SOURCE` (short for `--config.init.model=SOURCE`, and in place of
the config file's) starts from a model: any source the other commands take
(a released name, hf://ORG/NAME, a file, a run), resolved once to its
local file or folder, whose architecture the run takes; `--model=Ti/16`
(a size, Ti/16 ... H/14) trains that variant from scratch. Restarting
with the same --workdir resumes from its latest checkpoint. A run stopped
by SIGTERM (preemption) or Ctrl-C saves a checkpoint at the next step and
exits with status 42; a second Ctrl-C stops at once (status 130).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Dict, Optional, Sequence

from absl import flags, logging
from ml_collections import config_flags

from keras_vit import config as config_lib
from keras_vit import config_overrides
from keras_vit.commands import config_args
from keras_vit.commands import flags as cli
from keras_vit.commands.lazy import lazy_module
from keras_vit.data import image_files
from keras_vit.errors import Preempted, UsageError
from keras_vit.objectives import loss_scores
from keras_vit.storage import atomic, run_names
from keras_vit.variants import VARIANTS

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    import tensorflow as tf

    from keras_vit.analysis import curves
    from keras_vit.export import saved_model
    from keras_vit.storage import workdir as wd
    from keras_vit.training import distribute, train_lib
else:
    tf = lazy_module("tensorflow")
    curves = lazy_module("keras_vit.analysis.curves")
    saved_model = lazy_module("keras_vit.export.saved_model")
    distribute = lazy_module("keras_vit.training.distribute")
    train_lib = lazy_module("keras_vit.training.train_lib")
    wd = lazy_module("keras_vit.storage.workdir")


def run(
    config, workdir: str, strategy: Optional[tf.distribute.Strategy] = None
) -> Dict:
    """`train_lib.train_and_evaluate`, then the export the config asks for.

    Returns the final metrics, with "export_path" when it exported and
    "curves" when it drew training_curves.png (`analysis.curves`).
    """
    export = config.export
    export_dir = export.export_dir or os.path.join(workdir, "export")
    if export.enabled:  # before the run, not after it
        saved_model.check_can_export(export_dir, export.model_name)

    def export_final(model, class_names, step) -> Dict:
        path = saved_model.export_model(
            model,
            export_dir,
            model_name=export.model_name,
            class_names=class_names,
            # Serve with the run's own evaluation preprocessing.
            resize_size=config.input.pp.eval_resize_size,
            keep_aspect=bool(config.input.pp.eval_keep_aspect),
            # Scored as trained: a sigmoid after the sigmoid loss.
            scores=loss_scores(config.objective.loss),
            source=dict(location=atomic.absolute(workdir), kind="workdir",
                        step=step),
        )
        logging.info("Exported SavedModel to %s", path)
        return {"export_path": path}

    # The curves are drawn before the workers of a cluster part.
    final = train_lib.train_and_evaluate(
        config, workdir, strategy,
        on_finish=export_final if export.enabled else None,
        on_end=lambda _: _draw_curves(workdir),
    )
    if not final.get("finished_before"):
        return final
    if export.enabled and not final.get("export_path"):
        logging.warning(
            "config.export.enabled: the run in %s finished without an "
            "export; export it with keras-vit-export --model=%s.", workdir,
            workdir)
    chief = distribute.is_chief(strategy or tf.distribute.get_strategy())
    if chief and not tf.io.gfile.exists(os.path.join(
            workdir, curves.FILE)) and wd.writable(workdir):
        # A finished run stopped before drawing them draws them now.
        final.update(_draw_curves(workdir))
    return final


def _draw_curves(workdir: str) -> Dict:
    """training_curves.png of the run, where matplotlib is installed."""
    try:
        path = curves.draw_curves(workdir)
    except UsageError as e:  # no training rows: nothing to draw
        logging.info("No %s: %s", curves.FILE, e)
        return {}
    except ImportError:
        logging.info("No %s: it needs matplotlib (pip install matplotlib; "
                     "then keras-vit-analysis --curves=%s).", curves.FILE,
                     workdir)
        return {}
    logging.info("Training curves: %s", path)
    return {"curves": path}


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-train."""
    cli.define_config(values, argv, required=True)
    cli.define_run_flags(values)
    flags.mark_flag_as_required("workdir", flag_values=values)
    cli.define_model(values, required=False, ema=False, extra=(
        " The model to start from (fine-tuning): short for "
        "--config.init.model; or a size (Ti/16 ... H/14) to train from "
        "scratch."))


def start_from(values: flags.FlagValues):
    """The parsed config with the model --model names: a size (`Ti/16`,
    keras_vit.VARIANTS) is that variant from scratch, any other source the
    model to start from (config.init.model). --model wins over the config
    file's own init.model; another one given on the command line too
    (--config.init.model, a config argument's init=) is an error."""
    config, model = values.config, values.model
    given = config_flags.get_override_values(values["config"])
    # (the variant as parsed: --config.model.variant=None is None)
    variant = config.model.variant if "model.variant" in given else None
    if not model:
        if variant and config.init.model:  # its architecture would win
            raise UsageError(
                f"--config.model.variant={variant} names a model to train, "
                "but the config starts from "
                f"config.init.model={config.init.model}, whose architecture "
                "fine-tuning takes: name the model to start from instead "
                "(--model=SOURCE, or the config's own argument where it has "
                f"one, as in --config=finetune:variant={variant}), or train "
                f"{variant} from scratch with --config.init.model=None.")
        return config
    start = config_args.given_start(values)
    if start not in (None, model):
        raise UsageError(
            f"--model={model} and config.init.model={start} name two models "
            "to start from: keep one.")
    if model in VARIANTS and variant not in (None, model):
        raise UsageError(
            f"--model={model} and config.model.variant={variant} name two "
            "sizes to train: keep one.")
    if model not in VARIANTS and variant:  # (the start's architecture wins)
        raise UsageError(
            f"--model={model} and config.model.variant={variant} name two "
            "models: fine-tuning takes the architecture of the model it "
            f"starts from, so keep --model (or --model={variant} to train "
            f"{variant} from scratch).")
    if model in VARIANTS:
        return config_lib.replace(
            config, model=config_overrides.variant_fields(model, given),
            init={"model": None})
    return config_lib.replace(config, init={"model": model})


def absolute_data_paths(config):
    """The config with config.input's local data_dir and manual_dir made
    absolute, as --config=folder:PATH makes its PATH: the run's config.json
    then names the data from any directory (keras-vit-evaluate reads it)."""
    paths = {key: atomic.absolute(os.path.expanduser(value))
             for key in ("data_dir", "manual_dir")
             if (value := config.input[key])}
    return config_lib.replace(config, input=paths) if paths else config


# Evaluators of keras-vit-evaluate's modes: a training run does not run
# them (they fine-tune or probe a finished model).
EVALUATE_ONLY = ("vtab", "fewshot")


def check_training_evaluators(config) -> None:
    """A UsageError for a config whose evaluators training would not run
    (a VTAB or few-shot config given to keras-vit-train)."""
    named = [(name, entry.type) for name, entry in config.evals.items()
             if entry.type in EVALUATE_ONLY]
    if named:
        name, kind = named[0]
        raise UsageError(
            f"config.evals.{name} is a {kind} evaluator, which "
            f"keras-vit-evaluate --mode={kind} runs on a trained model; "
            "training runs accuracy evaluators only. Train with another "
            f"config, then: keras-vit-evaluate --mode={kind} --config=... "
            "--model=<the run's workdir>.")


_WHY = ("its loop, data and checkpoints are tf.distribute's, tf.data's "
        "and tf.train's")


def _main(values: flags.FlagValues, args: list) -> None:
    cli.refuse_arguments(args)
    if not values.workdir.strip():
        raise UsageError("--workdir is empty: name the run's folder (e.g. "
                         "--workdir=/tmp/vit_run).")
    run_names.check_folder_name(values.workdir, "--workdir")
    check_training_evaluators(values.config)
    config = absolute_data_paths(start_from(values))
    _say_caps(values, config)
    # Before TensorFlow loads (train_lib checks it again, for its callers).
    image_files.check_workdir_apart(config, values.workdir)
    image_files.check_workdir_holds_no_data(values.workdir)
    if config.init.model:
        # The one resolver: a name or hf:// URI becomes its cached file or
        # folder once, here, before anything starts; the run's config
        # records it (a copy: the parsed config is not changed), a local
        # path made absolute: the run resumes from any directory.
        config = config_lib.replace(config, init={
            "model": _start_path(values, config.init.model)})
    cli.check_tensorflow_backend(_WHY)
    final = run(config, values.workdir, cli.strategy(values, config))
    saved = final.get("saved", True)
    then = ("evaluate again and finish" if final.get("final") else "resume"
            if final.get("step") else "start")
    if final.get("preempted") and final.get("signal") == "Ctrl-C":
        raise Preempted(
            f"Ctrl-C at step {final['step']}, "
            + ("checkpoint saved" if saved else "nothing trained, nothing "
               "saved")
            + f"; run the same command to {then}.", kind="stopped")
    if final.get("preempted"):
        raise Preempted(
            f"stopped at step {final['step']} "
            + ("with a checkpoint saved" if saved else "before its first "
               "step, nothing saved")
            + f"; run the same command to {then}"
            + (" (on every worker)." if final.get("restart") else ".")
        )


def _say_caps(values: flags.FlagValues, config) -> None:
    """Says that a run counted in epochs takes a warm-up or a period given
    on the command line as a cap (`data_fit`: the warm-up at most a tenth
    of the run, a period at most an epoch), and how to keep it as given."""
    if int(config.trainer.total_steps) or not float(config.trainer.epochs):
        return
    given = config_flags.get_override_values(values["config"])
    caps = [f"--config.{key}={given[key]}" for key in sorted(given)
            if key == "schedule.warmup_steps" or key.endswith(".every_steps")]
    if caps:
        logging.info(
            "%s: a cap in a run counted in epochs (a warm-up of at most a "
            "tenth of its steps, periods of at most an epoch); "
            "--config.trainer.total_steps in place of epochs keeps %s as "
            "given.", ", ".join(caps), "them" if caps[1:] else "it")


def _start_path(values: flags.FlagValues, model: str) -> str:
    """The model to start from, resolved (a local path made absolute);
    where it is gone, the path the run in --workdir started from, when
    that is the one named: the run resumes from its own checkpoints."""
    try:
        return atomic.absolute(cli.model_source(
            values, model, tensorflow_work=_WHY).path)
    except UsageError as error:
        if "://" in model or os.path.exists(os.path.expanduser(model)) or (
                "://" not in values.workdir and not os.path.exists(
                    os.path.join(os.path.expanduser(values.workdir),
                                 "config.json"))):
            raise  # refused for what it is, or no run there (said before
            # TensorFlow loads)
        run = wd.resumable_config(values.workdir)
        if run is not None and run.init.model and run.init.model not in (
                model, atomic.absolute(model)):  # (another directory)
            raise UsageError(
                f"{error} The run in {values.workdir} started from "
                f"{run.init.model}: resume it with --model="
                f"{run.init.model}, as it started.") from None
        if run is None or not run.init.model:
            raise
    logging.info("%s is not there: the run in %s resumes from its own "
                 "checkpoints (config.json records the model's "
                 "architecture).", model, values.workdir)
    return run.init.model


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-train (and train.py); the exit status."""
    return cli.run("train", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
