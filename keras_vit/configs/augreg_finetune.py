r"""Fine-tuning an AugReg checkpoint ("How to train your ViT?", Steiner et
al. 2021): the recipe of the `*--<dataset>-steps_*-lr_*-res_*` files.

SGD with momentum 0.9, batch 512, cosine decay after a short warm-up, no
weight decay, clipping at 1, no dropout and no augmentation beyond
configs/finetune.py's Inception-style crop and flip, at 384 by default; a
new zero-initialised head. Everything but the checkpoint and the dropout is
configs/finetune.py's; the model is the one the file's name says.

    python train.py \
        --config=configs/augreg_finetune.py:dataset=imagenet2012,lr=0.01 \
        --workdir=gs://BUCKET/vit/augreg_b16_ft --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/tensorflow_datasets

Arguments (key=value, comma-separated): name (an AugReg pre-trained file
from its index.csv; default B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-
do_0.0-sd_0.0; or init= a local copy named like one), dataset (a row
of configs/finetune.py, or vtab/<task>), lr (ImageNet: by default the
one the released fine-tuning of the model used, 0.01 for L/16, B/32,
S/32, R50+L/32 and R26+S/32, else 0.03; other data sets: the
configs/finetune.py row's), res (384).

It runs without Polyak averaging, as the released fine-tunings did
(configs/finetune.py adds it for the paper's own ImageNet runs); ImageNet
for their 20k steps at 384. Expected (vision_transformer's README, its
recommended i21k files fine-tuned so): ImageNet top-1 at 384 of 78.22%
(Ti/16), 83.73% (S/16), 85.49% (B/16), 85.59% (L/16).
"""

from keras_vit.checkpoint.zoo import augreg, catalog
from keras_vit.config import parse_config_arg
from keras_vit.configs import finetune
from keras_vit.errors import UsageError

DEFAULT = "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"


def get_config(arg=None):
    args = parse_config_arg(arg, name=DEFAULT, init="",
                            dataset="imagenet2012", lr="", res="384")
    source = args["init"] or augreg.url(args["name"])
    name = augreg.parse_name(source)
    if name is None or name.fine_tuned:
        raise UsageError(
            f"{source!r} is not the name of a pre-trained AugReg file "
            "(e.g. B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0"
            "-sd_0.0): take one from gs://vit_models/augreg/index.csv."
        )
    imagenet = args["dataset"] == "imagenet2012"
    lr = args["lr"] or (
        str(catalog.augreg_finetune_lr(name.model)) if imagenet else "")
    # The fine-tuning resolution (the random crop is resized to it), which
    # also decides finetune's rematerialisation.
    parts = [f"dataset={args['dataset']}", f"variant={name.variant}",
             f"init={source}", f"res={args['res']}"]
    if lr:
        parts.append(f"lr={lr}")
    c = finetune.get_config(",".join(parts))
    # No dropout: vit_jax/configs/augreg.py fine-tunes without AugReg; nor
    # Polyak averaging, which it does not use either.
    c.model.dropout_rate = 0.0
    c.trainer.ema_decay = 0.0
    return c
