r"""evaluate.py: plain evaluation, few-shot linear probes and VTAB-1k.

    # top-1 / top-5 / loss of a trained run on its eval split (or another)
    python evaluate.py --mode=eval --workdir=/tmp/vit_digits
    python evaluate.py --mode=eval --npz=ViT-B_16_imagenet2012.npz \
        --dataset=imagenet2012 --split=validation --image_size=384

    # few-shot linear accuracy (1/5/10/25 shots, 3 seeds)
    python evaluate.py --mode=fewshot --config=configs/fewshot.py \
        --npz=ViT-B_16.npz --output_dir=/tmp/fewshot_b16

    # the paper's VTAB-1k protocol
    python evaluate.py --mode=vtab --config=configs/vtab.py \
        --npz=ViT-L_16.npz --variant=L/16 --output_dir=/tmp/vtab_l16

The pre-trained model is one of --workdir (a train.py run), --keras_model
or --npz (with an optional --variant check). --strategy / --tpu as for
train.py.
"""

from __future__ import annotations

import json
import os
import time
from typing import Dict, Optional

import tensorflow as tf
from absl import app, flags, logging

from keras_vit import config as config_lib
from keras_vit.checkpoint import loader as pretrained
from keras_vit.checkpoint import workdir as wd
from keras_vit.commands import flags as cli_flags
from keras_vit.data import sources, vtab
from keras_vit.evaluation import fewshot, reports, vtab_run
from keras_vit.evaluation.accuracy import evaluate_model
from keras_vit.errors import UsageError

FLAGS = flags.FLAGS
MODES = ("eval", "fewshot", "vtab")
# --mode=eval of an .npz or .keras file without a config: its global batch.
EVAL_BATCH = 256


def define_flags() -> None:
    """Defines evaluate.py's flags (once)."""
    cli_flags.define_common_flags()
    if "mode" in FLAGS:
        return
    flags.DEFINE_enum("mode", None, list(MODES),
                      "eval: accuracy and loss on a split; fewshot: linear "
                      "probes of frozen features; vtab: VTAB-1k transfer.")
    flags.DEFINE_string("keras_model", None, "A saved .keras model.")
    flags.DEFINE_string("npz", None, "An official-layout .npz checkpoint.")
    flags.DEFINE_string("variant", None, 'With --npz: the expected variant, '
                        'e.g. "B/16" (checked against the file).')
    flags.DEFINE_string("output_dir", None, "Where results go (local or "
                        "gs://); required for fewshot and vtab.")
    flags.DEFINE_string("tasks", None, "vtab: tasks and groups, e.g. "
                        "natural,dsprites_loc (default: config.vtab.tasks).")
    flags.DEFINE_string("name", None, "The model's name in reports.")
    flags.DEFINE_string("dataset", None, "eval: data source (digits, folder "
                        "or a TFDS name); default: the config's.")
    flags.DEFINE_string("split", None, "eval: split (default: the config's "
                        "eval_split, else test).")
    flags.DEFINE_string("data_dir", None, "eval: TFDS data dir or image "
                        "folder.")
    flags.DEFINE_integer("batch_size", None, "eval: global batch size.")
    flags.DEFINE_integer("image_size", None, "eval: input resolution "
                         "(default: the config's, else the model's).")


def _source():
    return pretrained.Source(
        workdir=FLAGS.workdir, keras_model=FLAGS.keras_model, npz=FLAGS.npz,
        variant=FLAGS.variant,
    )


def _write(path: str, text: str) -> None:
    wd.atomic_write(path, text)
    logging.info("Wrote %s", path)


def _eval_mode(source, strategy) -> Dict:
    # The data, split, preprocessing and batch of the run's own config.
    if FLAGS.config is not None:
        run = FLAGS.config
    elif source.workdir:
        run = wd.read_config(source.workdir)
    else:
        run = None
    if run is None and not FLAGS.dataset:
        raise UsageError(
            "--mode=eval needs a data source: --dataset=digits|folder|<TFDS "
            "name> (and --split), or --config / --workdir whose config "
            "names one."
        )
    data = config_lib.base_config()
    if run is not None:
        data.update(dict(
            dataset=run.dataset, data_dir=run.data_dir,
            image_key=run.image_key, label_key=run.label_key,
            vtab_task=run.vtab_task, eval_split=run.eval_split,
        ))
        data.pp.eval_resize_size = run.pp.eval_resize_size
    if FLAGS.dataset:
        data.dataset, data.vtab_task = FLAGS.dataset, None
    if FLAGS.data_dir:
        data.data_dir = FLAGS.data_dir
    split = FLAGS.split or data.eval_split
    with strategy.scope():
        model = pretrained.load_model(
            source, FLAGS.image_size or (run.image_size if run else None)
        )
    # The model's resolution, square or not.
    with data.ignore_type():
        data.image_size = tuple(int(n) for n in model.input_shape[1:3])
    info = sources.dataset_info(data)
    width = int(model.output_shape[-1])
    if width != info.num_classes:
        raise UsageError(
            f"The model predicts {width} classes but {data.dataset} has "
            f"{info.num_classes}: evaluate it on the data it was trained "
            "or fine-tuned on (--dataset/--split), or fine-tune it first."
        )
    batch = FLAGS.batch_size or (
        (run.eval_batch_size or run.batch_size) if run else EVAL_BATCH
    )
    start = time.time()
    metrics = evaluate_model(model, data, split, int(batch), strategy)
    metrics.update(dataset=data.dataset, split=split, model=source.describe(),
                   image_size=list(data.image_size),
                   wall_time_s=time.time() - start)
    logging.info("eval %s %s: %s", data.dataset, split, metrics)
    print(json.dumps(metrics, indent=2, sort_keys=True))
    if FLAGS.output_dir:
        name = f"eval_{data.dataset}_{split}".replace("/", "_")
        _write(os.path.join(FLAGS.output_dir, name + ".json"),
               json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    return metrics


def _fewshot_mode(source, strategy) -> Dict:
    config = FLAGS.config
    opts = config.fewshot
    datasets = [
        fewshot.FewShotData(name, d.dataset, d.train_split, d.test_split,
                            config.data_dir)
        for name, d in opts.datasets.items()
    ]
    with strategy.scope():
        model = pretrained.load_model(source, config.image_size)
    results, not_run = fewshot.run(
        model, datasets, shots=tuple(opts.shots), seeds=tuple(opts.seeds),
        l2_reg=float(opts.l2_reg), image_size=config.image_size,
        resize_size=config.pp.eval_resize_size,
        batch_size=int(config.batch_size), strategy=strategy,
        download=bool(config.download), layer=opts.layer,
        layer_norm=bool(opts.layer_norm),
    )
    name = FLAGS.name or source.describe()
    out = dict(model=name, results=results, not_run=not_run,
               config=config.to_dict())
    _write(os.path.join(FLAGS.output_dir, "fewshot.json"),
           json.dumps(out, indent=2, sort_keys=True) + "\n")
    text = reports.fewshot_markdown(results, name)
    if not_run:
        text += "\nNot run:\n\n" + "".join(
            f"- {k}: {v}\n" for k, v in not_run.items()
        )
    _write(os.path.join(FLAGS.output_dir, "fewshot.md"), text)
    print(text)
    return out


def _vtab_mode(source, strategy) -> Dict:
    out = vtab_run.run(FLAGS.config, source, FLAGS.output_dir, strategy,
                       tasks=FLAGS.tasks, model_name=FLAGS.name)
    md = out["files"].get("markdown")
    if md:
        with tf.io.gfile.GFile(md) as f:
            print(f.read())
    if out["preempted"]:
        raise SystemExit("Preempted: run the same command again to resume.")
    return out


def _main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    cli_flags.setup_logging(FLAGS.verbose)
    if FLAGS.mode in ("fewshot", "vtab"):
        missing = [f for f, v in (("--config", FLAGS.config),
                                  ("--output_dir", FLAGS.output_dir))
                   if v is None]
        if missing:
            raise app.UsageError(
                f"--mode={FLAGS.mode} needs {' and '.join(missing)} "
                f"(e.g. --config=configs/{FLAGS.mode}.py)."
            )

    try:
        source = _source()
        if FLAGS.mode == "vtab":
            vtab.select_tasks(FLAGS.tasks or FLAGS.config.vtab.tasks)
        strategy = cli_flags.create_strategy_or_exit(FLAGS.config)
        {"eval": _eval_mode, "fewshot": _fewshot_mode,
         "vtab": _vtab_mode}[FLAGS.mode](source, strategy)
    except (ValueError, FileNotFoundError) as e:
        cli_flags.exit_with(e)


def evaluate_main(argv: Optional[list] = None) -> None:
    """Entry point of evaluate.py (and a `keras-vit-evaluate` script)."""
    define_flags()
    flags.mark_flag_as_required("mode")
    app.run(_main, argv=argv, flags_parser=cli_flags.parse_flags_or_exit)
