r"""The digits classifier trained on a few labelled images per class, from
scratch or from a masked-patch-prediction encoder (configs/mpp_digits.py).

    python train.py --config=configs/digits_few_labels.py:labels=10 \
        --workdir=/tmp/digits_10_scratch
    python train.py \
        --config=configs/digits_few_labels.py:labels=10,init=/tmp/mpp_digits \
        --workdir=/tmp/digits_10_mpp

Arguments (comma-separated key=value): labels (per class, a random draw
seeded by --config.seed; default 10), init (an MPP run's workdir, its
encoder.npz, or any checkpoint of configs/digits.py's model; default: from
scratch). Both arms train the same steps on the same images.

Expected at labels=10 (100 images): about 71% test accuracy from scratch,
about 86% from the MPP encoder (scripts/mpp_label_efficiency.py measures
mean and spread over seeds; README.md has the numbers).
"""

from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common


def get_config(arg=None):
    args = parse_config_arg(arg, labels="10", init="")
    c = base_config()
    # configs/digits.py's data and preprocessing: 32 x 32 upsampled greys,
    # random 32 crops of a 36 resize, no flip.
    c.model.image_size = 32
    c.input.pp.resize_size = 36
    c.input.pp.flip = False
    # Labelled images per class kept from the training split.
    # (0 would keep every image: the field's "all".)
    labels = common.whole_arg(args, "labels", "labelled images per class",
                              10)
    c.input.train_examples_per_class = labels
    # configs/digits.py's 4-layer ViT of width 128 (what MPP pre-trains).
    c.model.update(dict(
        variant=None, patch_size=8, hidden_size=128, num_layers=4,
        num_heads=4, mlp_dim=256,
    ))
    # The encoder to start from: an MPP run's workdir, or an .npz such as
    # its encoder.npz; the head starts at zero. Empty: from scratch.
    c.init.model = args["init"] or None
    # 300 updates of 32 images (96 passes over 100 images at labels=10).
    c.input.batch_size = 32
    c.trainer.total_steps = 300
    # AdamW with a short warm-up and cosine decay, some weight decay.
    c.schedule.warmup_steps = 30
    c.optimizer.weight_decay = 0.05
    # One evaluation (test split) and one checkpoint, at the end.
    c.evals.test.every_steps = 0
    c.checkpoints.every_steps = 0
    return c
