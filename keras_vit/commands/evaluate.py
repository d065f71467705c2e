r"""keras-vit-evaluate (and `python evaluate.py`): plain evaluation,
few-shot linear probes and VTAB-1k.

    # top-1 / top-5 / loss of a trained run on its eval split (or another)
    keras-vit-evaluate --mode=eval --workdir=/tmp/vit_digits
    keras-vit-evaluate --mode=eval \
        --model=imagenet21k+imagenet2012/ViT-B_16 \
        --dataset=imagenet2012 --split=validation

    # few-shot linear accuracy (1/5/10/25 shots, 3 seeds)
    keras-vit-evaluate --mode=fewshot --config=fewshot \
        --model=ViT-B_16 --output_dir=/tmp/fewshot_b16

    # the paper's VTAB-1k protocol
    keras-vit-evaluate --mode=vtab --config=vtab \
        --model=ViT-L_16 --variant=L/16 --output_dir=/tmp/vtab_l16

The model is --model (any source), else the one in --workdir (a training
run), whose folder also receives the results unless --output_dir says
otherwise. --strategy / --tpu as for keras-vit-train.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Dict, Optional, Sequence

from absl import flags, logging

from keras_vit import config as config_lib
from keras_vit import config_limits
from keras_vit.commands import eval_mode, outputs
from keras_vit.commands import flags as cli
from keras_vit.commands import resize as cli_resize
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import Preempted, UsageError
from keras_vit.storage import atomic

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    import tensorflow as tf

    from keras_vit import model as vit_model
    from keras_vit.checkpoint import loader as pretrained
    from keras_vit.data import vtab
    from keras_vit.evaluation import (
        accuracy,
        fewshot,
        fewshot_reports,
        linear_probe,
        reports,
        vtab_run,
    )
    from keras_vit.training import distribute, state, train_lib
else:
    tf = lazy_module("tensorflow")
    pretrained = lazy_module("keras_vit.checkpoint.loader")
    vit_model = lazy_module("keras_vit.model")
    vtab = lazy_module("keras_vit.data.vtab")
    accuracy = lazy_module("keras_vit.evaluation.accuracy")
    fewshot = lazy_module("keras_vit.evaluation.fewshot")
    fewshot_reports = lazy_module("keras_vit.evaluation.fewshot_reports")
    linear_probe = lazy_module("keras_vit.evaluation.linear_probe")
    reports = lazy_module("keras_vit.evaluation.reports")
    vtab_run = lazy_module("keras_vit.evaluation.vtab_run")
    distribute = lazy_module("keras_vit.training.distribute")
    state = lazy_module("keras_vit.training.state")
    train_lib = lazy_module("keras_vit.training.train_lib")

MODES = ("eval", "fewshot", "vtab")
def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-evaluate."""
    cli.define_config(values, argv)
    cli.define_run_flags(values)
    cli.define_model(values, required=False,
                     extra=" Default: the model in --workdir.")
    cli.define_hints(values, "variant", "image_size", image_size=(
        cli.HINT_HELP["image_size"] + " --mode=fewshot: default the "
        "config's model.image_size."))
    flags.DEFINE_enum("mode", None, list(MODES),
                      "eval: accuracy and loss on a split; fewshot: linear "
                      "probes of frozen features; vtab: VTAB-1k transfer.",
                      flag_values=values, required=True)
    flags.DEFINE_string("output_dir", None, "Where results go (local or "
                        "gs://); default: --workdir (fewshot and vtab need "
                        "one of them).", flag_values=values)
    flags.DEFINE_string("tasks", None, "vtab: tasks and groups, e.g. "
                        "natural,dsprites_loc (default: "
                        "config.evals.vtab.tasks).",
                        flag_values=values)
    flags.DEFINE_string("name", None, "The model's name in reports.",
                        flag_values=values)
    flags.DEFINE_string("dataset", None, "eval: data source (digits, folder "
                        "or a TFDS name); default: the config's.",
                        flag_values=values)
    flags.DEFINE_string("split", None, "eval: split (default: the config's "
                        "evals.test.split, else test; an image folder's: "
                        "the first of test, val, validation, valid it has).",
                        flag_values=values)
    flags.DEFINE_string("data_dir", None, "eval: TFDS data dir or image "
                        "folder.", flag_values=values)
    flags.DEFINE_integer("batch_size", None, "eval: global batch size.",
                         flag_values=values)
    flags.DEFINE_boolean("skip_bad_images", None, "eval: name and leave "
                         "out image files that do not decode (default: the "
                         "run's config.input.skip_bad_images, else stop at "
                         "the first).", flag_values=values)
    cli.define_class_names_file(values)
    cli.define_resize_size(values)


def fewshot_options(config):
    """The config's few-shot evaluator, its batch_size 0 or None (not
    set) the config's input batch (`config_limits`: 0 is the input's)."""
    opts = config_lib.find_evaluator(config.evals, "fewshot")
    if not opts.batch_size:
        opts = config_lib.complete_evaluator(
            dict(opts.to_dict(), batch_size=int(config.input.batch_size)),
            "fewshot")
    return opts


def _fewshot_mode(values, source, strategy) -> Dict:
    config = values.config
    opts = fewshot_options(config)
    evaluator = config_lib.evaluator_name(config.evals, "fewshot")
    datasets = [
        fewshot.FewShotData(name, d.dataset, d.train_split, d.test_split,
                            config.input.data_dir, config.input.manual_dir,
                            bool(config.input.skip_bad_images), evaluator,
                            config.input.image_key, config.input.label_key)
        for name, d in opts.datasets.items()
    ]
    image_size, resize_size = _fewshot_sizes(values, config)
    if image_size:  # the config's too, as --image_size is checked
        cli.check_size(source, image_size)
    model = None
    if not image_size:  # 0: the model's own (config_limits), once loaded
        model = _fewshot_model(source, None, strategy)
        image_size, resize_size = _fewshot_sizes(
            values, config, _own_size(model, source))
    if config.input.pp.eval_keep_aspect:
        logging.warning("config.input.pp.eval_keep_aspect=True is not "
                        "applied to few-shot features: images are resized "
                        "on both sides, as big_vision's few-shot evaluator "
                        "does (fewshot.json: keep_aspect false).")
    name = values.name or source.describe()
    facts = dict(image_size=image_size, resize_size=resize_size,
                 keep_aspect=False, config=config.to_dict(),
                 model_location=atomic.absolute(source.path),
                 model_files=pretrained.model_files(source),
                 use_ema=accuracy.ema_weights(source),
                 shot_draw=linear_probe.SHOT_DRAW)
    # Another model's file is refused; this model's other data sets kept
    # (not where its files changed since they were probed).
    kept = fewshot_reports.check_fewshot_folder(
        eval_mode.output_dir(values), name, [d.name for d in datasets],
        chief=distribute.is_chief(strategy), **facts)
    done = fewshot_reports.probed_before(
        eval_mode.output_dir(values), [d.name for d in datasets], **facts)
    if done:  # a run stopped part way: what it finished is kept
        logging.info("Kept the results of %s, probed before with this "
                     "model's files and recipe: not probed again.",
                     ", ".join(done))
        kept.update(done)
        datasets = [d for d in datasets if d.name not in done]

    def write(results, not_run):  # a cluster's chief writes the files
        # The model probed (the source's where all its results were kept).
        arch = (vit_model.architecture_of(model) if model is not None
                else pretrained.describe_source(source))
        return fewshot_reports.write_fewshot_reports(
            eval_mode.output_dir(values), name, {**kept, **results},
            not_run, chief=distribute.is_chief(strategy),
            architecture=arch.to_dict(), **facts)

    results, not_run = {}, {}
    if datasets:  # what is not kept
        if model is None:
            if not values.image_size:  # the config's size
                cli_resize.warn_config_size(source, image_size)
            model = _fewshot_model(source, image_size, strategy)
        results, not_run = fewshot.run(
            model, opts, datasets, image_size=image_size,
            resize_size=resize_size, strategy=strategy,
            download=bool(config.input.download),
            every_s=float(config.log.every_seconds),
            in_turn=distribute.prepare_in_turn(strategy), on_result=write)
    if not results and not done:
        raise UsageError(reports.nothing_ran("few-shot data set", not_run))
    print(write(results, not_run))
    if distribute.is_chief(strategy):
        logging.info("Wrote %s", os.path.join(eval_mode.output_dir(values),
                                              fewshot_reports.FEWSHOT_JSON))
    return dict(model=name, results=results, not_run=not_run, **facts)


def _fewshot_model(source, image_size, strategy):
    """The ViT to probe, at `image_size` (None: its own)."""
    with strategy.scope():
        return pretrained.load_vit(source, image_size)


def _own_size(model, source):
    """The loaded model's own resolution (an int when square); one line
    naming --image_size where the model does not say."""
    hw = tuple(vit_model.architecture_of(model).image_size or ())
    if len(hw) != 2 or not all(isinstance(n, int) and n > 0 for n in hw):
        raise UsageError(
            f"{source.path} does not say its image size, and "
            "config.model.image_size=0 asks for the model's own: pass "
            "--image_size=N (the size its features are taken at).")
    return hw[0] if hw[0] == hw[1] else hw


def _fewshot_sizes(values, config, own=None):
    """(image_size, resize_size) of the few-shot features: the config's
    (model.image_size, input.pp.eval_resize_size); --image_size, when
    given, replaces the first and scales the second alike (the config's
    256 / 224 becomes 64 / 56 at --image_size=56). An image_size of 0 is
    the model's `own` (the resize at least its side); (0, resize) while
    that is not known."""
    image_size = config.model.image_size
    resize_size = config.input.pp.eval_resize_size
    if not values.image_size and not image_size:
        if own is None:
            return 0, resize_size
        image_size = own
        resize_size = cli.scaled_resize(resize_size, 0, own)
    if values.image_size:
        wanted = values.image_size
        if isinstance(wanted, (tuple, list)):
            if wanted[0] != wanted[1]:
                raise UsageError(
                    f"--image_size={wanted[0]}x{wanted[1]}: few-shot "
                    "features are taken at a square size (--image_size=N).")
            wanted = wanted[0]
        wanted = int(wanted)
        # (from a (height, width) config size too: by its larger ratio)
        resize_size = cli.scaled_resize(resize_size, image_size, wanted)
        image_size = wanted
    if isinstance(image_size, (tuple, list)):
        side = max(image_size)
    else:
        side = image_size
    if resize_size and side and int(resize_size) < int(side):
        raise UsageError(
            f"The few-shot resize {resize_size} is smaller than the image "
            f"size {side}: set --config.input.pp.eval_resize_size to at "
            f"least {side} (images are resized to it, then the central "
            "crop is taken).")
    if resize_size and int(resize_size) > 2 * int(side):  # (a size typed
        logging.warning(  # over the config's, which its resize is set for)
            "Few-shot features at %s, resized to %s first: the central crop "
            "keeps less than half of each side. %s; or set "
            "--config.input.pp.eval_resize_size.", side, resize_size,
            "Leave config.model.image_size at the size the config's resize "
            "is set for, and --image_size scales it" if values.image_size
            else f"--image_size={side} in place of config.model.image_size="
            f"{config.model.image_size} scales the config's resize with the "
            "size")
    logging.info("Few-shot features at %s x %s (resized to %s, then the "
                 "central crop).", image_size, image_size,
                 resize_size or image_size)
    return image_size, resize_size


def _vtab_mode(values, source, strategy) -> Dict:
    # Finished tasks and trials are read back from there: one folder.
    output_dir = eval_mode.output_dir(values)
    reports.require_charts()  # before the first task, not after it
    distribute.check_shared(output_dir, "output folder", strategy)
    out = vtab_run.run(values.config, source, output_dir,
                       train_lib.train_and_evaluate, strategy,
                       tasks=values.tasks, model_name=values.name,
                       chief=distribute.is_chief(strategy),
                       in_turn=distribute.prepare_in_turn(strategy))
    md = out["files"].get("markdown")
    if out["preempted"]:
        raise Preempted(
            f"{'Ctrl-C in a' if out['preempted'] == 'stopped' else 'a'} "
            f"VTAB task{'' if out['preempted'] == 'stopped' else ' stopped'}"
            f", {'checkpoint' if out['saved'] else 'nothing'} saved; run the "
            "same command to resume.", kind=out["preempted"])
    if md:
        with tf.io.gfile.GFile(md) as f:
            print(f.read())
    selected = {t.name for t in vtab.select_tasks(
        values.tasks or config_lib.find_evaluator(values.config.evals,
                                                  "vtab").tasks)}
    if not selected & {r["task"] for r in out["records"]}:
        raise UsageError(reports.nothing_ran("VTAB task", out["not_run"]))
    return out


# The flags of some modes only: each with the modes that read it.
_MODE_FLAGS = {"tasks": ("vtab",), "dataset": ("eval",), "split": ("eval",),
               "data_dir": ("eval",), "batch_size": ("eval",),
               "class_names_file": ("eval",), "resize_size": ("eval",),
               "keep_aspect": ("eval",), "skip_bad_images": ("eval",),
               "image_size": ("eval", "fewshot")}
# What a misplaced flag's mode reads instead, by (flag, mode).
_MODE_HINTS = {
    ("image_size", "vtab"): "VTAB-1k trains at --config.model.image_size",
    ("data_dir", "fewshot"): "set --config.input.data_dir instead",
    ("data_dir", "vtab"): "set --config.input.data_dir instead",
    ("skip_bad_images", "fewshot"): "set --config.input.skip_bad_images "
                                    "instead",
    ("skip_bad_images", "vtab"): "VTAB-1k reads TFDS data sets, not image "
                                 "files",
    ("batch_size", "fewshot"): "set --config.evals.fewshot.batch_size "
                               "instead",
    ("batch_size", "vtab"): "set --config.input.batch_size (training) or "
                            "--config.evals.test.batch_size (scoring) "
                            "instead",
}


def _misplaced(flag: str, mode: str) -> str:
    """Where flag --`flag` goes, given with --mode=`mode`, and what that
    mode reads instead where it has a counterpart."""
    hint = _MODE_HINTS.get((flag, mode))
    return (f"--{flag} goes with --mode={' or '.join(_MODE_FLAGS[flag])} "
            f"only, not --mode={mode}" + (f" ({hint})" if hint else ""))


def _main(values: flags.FlagValues, args: list) -> None:
    cli.refuse_arguments(args)
    if values.mode in ("fewshot", "vtab"):
        output_dir = eval_mode.output_dir(values)
        missing = [f for f, v in (("--config", values.config),
                                  ("--output_dir", output_dir))
                   if v is None]
        examples = {"--config": f"--config={values.mode}",
                    "--output_dir": "--output_dir=/tmp/results"}
        if missing:
            raise UsageError(
                f"--mode={values.mode} needs {' and '.join(missing)} (e.g. "
                f"{' '.join(examples[f] for f in missing)}).")
    misplaced = [_misplaced(name, values.mode)
                 for name, modes in _MODE_FLAGS.items()
                 if values[name].present and values.mode not in modes]
    if misplaced:
        raise UsageError("; ".join(misplaced) + ".")
    if values.batch_size is not None and values.batch_size < 1:
        raise UsageError(f"--batch_size={values.batch_size}: give a batch "
                         "of at least 1 (or leave it out for the config's).")
    cli.check_output_path(values, "output_dir",
                          default=("workdir", values.workdir))
    if values.config is not None:
        # Before the model loads: a field out of range named as its flag.
        config_limits.check_fields(values.config, (
            "input.batch_size", "input.pp.eval_resize_size"))
        config_limits.check_evaluators(values.config)
        config_limits.check_resize(values.config)
    if values.mode == "vtab":
        if values.tasks is not None and not values.tasks.strip(" ,"):
            raise UsageError(
                f"--tasks={values.tasks} names no task: give tasks or "
                "groups (--tasks=natural,dtd), or leave --tasks out for "
                "the config's.")
        entry = config_lib.find_evaluator(values.config.evals, "vtab")
        vtab.select_tasks(values.tasks or entry.tasks)
        # Each task's training, checked before the first one starts.
        config_limits.check_trials(values.config, entry.sweep)
    cli.check_tensorflow_backend(
        "its evaluators run on tf.distribute and tf.data")
    source = eval_mode.model_source(values)
    strategy = cli.strategy(values, values.config,
                            training=values.mode == "vtab")
    if values.mode != "eval":
        with outputs.results_held(
                eval_mode.output_dir(values),
                shared=distribute.is_multi_worker(strategy),
                hold=lambda folder: state.held_run(
                    folder, strategy, "VTAB-1k or few-shot evaluation",
                    "give this run another --output_dir"),
                evaluated=values.workdir):
            {"fewshot": _fewshot_mode, "vtab": _vtab_mode}[values.mode](
                values, source, strategy)
    else:
        try:
            eval_mode.evaluate(values, source, strategy)
        except UsageError as error:
            if values.config is not None:
                raise
            raise UsageError(eval_mode.in_eval_flags(str(error))) from None
    distribute.leave_together(strategy)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-evaluate (and evaluate.py); the exit
    status."""
    return cli.run("evaluate", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
