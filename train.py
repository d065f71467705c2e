r"""Trains a Vision Transformer from a config file.

    python train.py --config=configs/digits.py --workdir=/tmp/vit_digits

Cloud TPU (TPU VM):
    python train.py --config=configs/finetune.py:dataset=cifar100,variant=B/16 \
        --workdir=gs://BUCKET/vit/cifar100 --strategy=tpu --tpu=local \
        --config.data_dir=gs://BUCKET/tensorflow_datasets

Config fields can be overridden on the command line (`--config.total_steps=
100`); the config is locked, so a misspelt field is an error. Restarting with
the same --workdir resumes from its latest checkpoint.
"""

import importlib.util
import os


def _quiet_start():
    # By its path: importing keras_vit would load TensorFlow, whose start-up
    # notices it holds back.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "keras_vit", "commands", "quiet_start.py")
    spec = importlib.util.spec_from_file_location("_quiet_start", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.quiet_tensorflow_start()


if __name__ == "__main__":
    with _quiet_start():
        from keras_vit.commands.train import train_main
    train_main()
