"""train.py / keras-vit-train: train a config into a workdir, evaluate it,
and export it for serving when `config.export.enabled`."""

from __future__ import annotations

import os
from typing import Dict, Optional

import tensorflow as tf
from absl import app, flags, logging

from keras_vit.commands import flags as cli_flags
from keras_vit.export import saved_model
from keras_vit.training import train_lib

FLAGS = flags.FLAGS


def run(
    config, workdir: str, strategy: Optional[tf.distribute.Strategy] = None
) -> Dict:
    """`train_lib.train_and_evaluate`, then the export the config asks for.

    Returns the final metrics, with "export_path" when it exported.
    """
    export = config.export

    def export_final(model, class_names) -> Dict:
        path = saved_model.export_model(
            model,
            export.export_dir or os.path.join(workdir, "export"),
            model_name=export.model_name,
            class_names=class_names,
            # Serve with the run's own evaluation preprocessing.
            resize_size=config.pp.eval_resize_size,
        )
        logging.info("Exported SavedModel to %s", path)
        return {"export_path": path}

    return train_lib.train_and_evaluate(
        config, workdir, strategy,
        on_finish=export_final if export.enabled else None,
    )


def _train(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    cli_flags.setup_logging(FLAGS.verbose)
    strategy = cli_flags.create_strategy_or_exit(FLAGS.config)
    try:
        run(FLAGS.config, FLAGS.workdir, strategy)
    except (train_lib.TrainingError, ValueError) as e:
        cli_flags.exit_with(e)


def train_main() -> None:
    """Entry point of train.py (and the `keras-vit-train` script)."""
    cli_flags.define_common_flags()
    flags.mark_flags_as_required(["config", "workdir"])
    app.run(_train, flags_parser=cli_flags.parse_flags_or_exit)
