r"""keras-vit-train (and `python train.py`): train a config into a workdir,
evaluate it, and export it for serving when `config.export.enabled`.

    keras-vit-train --config=digits --workdir=/tmp/vit_digits
    keras-vit-train --config=finetune:dataset=cifar100,variant=B/16 \
        --workdir=gs://BUCKET/vit/cifar100 --strategy=tpu --tpu=local \
        --config.init.model=ViT-B_16.npz

--config names a config shipped in keras_vit/configs (`digits`) or a path
(`configs/digits.py`, `my_config.py:arg`); --config.FIELD=VALUE overrides a
field (the config is locked: a misspelt field is an error naming the
closest); `--config NAME` and `--config=NAME` are the same.
`--model=SOURCE` (short for `--config.init.model=SOURCE`) starts from a
model: any source the other commands take (a released name, hf://ORG/NAME,
a file, a run), resolved once to its local file or folder, whose
architecture the run takes. Restarting with the same --workdir resumes
from its latest checkpoint. A run stopped by SIGTERM (preemption) saves a
checkpoint and exits with status 42.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Dict, Optional, Sequence

from absl import flags, logging

from keras_vit import config as config_lib
from keras_vit.commands import flags as cli
from keras_vit.commands.lazy import lazy_module
from keras_vit.errors import Preempted, UsageError

if TYPE_CHECKING:  # imported on first use: --help loads no TensorFlow
    import tensorflow as tf

    from keras_vit.export import saved_model
    from keras_vit.training import train_lib
else:
    saved_model = lazy_module("keras_vit.export.saved_model")
    train_lib = lazy_module("keras_vit.training.train_lib")


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
            resize_size=config.input.pp.eval_resize_size,
        )
        logging.info("Exported SavedModel to %s", path)
        return {"export_path": path}

    return train_lib.train_and_evaluate(
        config, workdir, strategy,
        on_finish=export_final if export.enabled else None,
    )


def define_flags(values: flags.FlagValues, argv: Sequence[str]) -> None:
    """The flags of keras-vit-train."""
    cli.define_config(values, argv, required=True)
    cli.define_run_flags(values)
    flags.mark_flag_as_required("workdir", flag_values=values)
    cli.define_model(values, required=False, ema=False, extra=(
        " The model to start from (fine-tuning): short for "
        "--config.init.model."))


def _main(values: flags.FlagValues, args: list) -> None:
    if args:
        raise UsageError(f"Unexpected arguments: {' '.join(args)}")
    config = values.config
    start = config.init.model
    if values.model:
        if start and start != values.model:
            raise UsageError(
                f"--model={values.model} and config.init.model={start} name "
                "two models to start from: keep one."
            )
        start = values.model
    if start:
        # The one resolver: a name or hf:// URI becomes its cached file or
        # folder once, here, before anything starts; the run's config
        # records it (a copy: the parsed config is not changed).
        config = config_lib.replace(config, init={
            "model": cli.model_source(values, start).path})
    final = run(config, values.workdir, cli.strategy(values, config))
    if final.get("preempted"):
        raise Preempted(
            f"stopped at step {final['step']} with a checkpoint saved; run "
            "the same command to resume"
            + (" (on every worker)." if final.get("restart") else ".")
        )


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of keras-vit-train (and train.py); the exit status."""
    return cli.run("train", define_flags, _main, argv, __doc__)


if __name__ == "__main__":
    sys.exit(main())
