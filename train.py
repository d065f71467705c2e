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

from keras_vit.commands.train import train_main

if __name__ == "__main__":
    train_main()
