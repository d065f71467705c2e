r"""Plain ViT on ImageNet-1k ("Better plain ViT baselines for ImageNet-1k",
Beyer et al. 2022), as big_vision's configs/vit_s16_i1k.py.

ViT-S/16 with global average pooling, fixed 2-D sin-cos position
embeddings and a pre-logits layer, no dropout and no stochastic depth;
batch 1024, 90 epochs; Adam at lr 1e-3 with decoupled weight decay 1e-4
in big_vision's absolute terms (weight_decay 0.1 here, multiplied by the
learning rate), 10k warm-up steps then cosine decay, clipping at 1;
Inception crop and flip at 224, RandAugment(2, 10), Mixup 0.2; softmax
cross-entropy; evaluation at resize 256, central crop 224.

    python train.py --config=configs/plain_vit_i1k.py \
        --workdir=gs://BUCKET/vit/plain_s16 --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/tensorflow_datasets

Argument (optional): epochs (90, 150 or 300): `:epochs=300`.

Expected (the paper): 76.5% top-1 on ImageNet validation after 90 epochs,
about 80% after 300 (78.5% after 150). RandAugment is Keras 3's, not
big_vision's (keras_vit/data/augment.py), which may move these numbers.
"""

from keras_vit import config as config_lib
from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common

BATCH = 1024


def get_config(arg=None):
    epochs = common.whole_arg(parse_config_arg(arg, epochs="90"), "epochs",
                              "epochs", 300)
    c = base_config()
    # ImageNet-1k from TFDS: 1% of train held out for validation; the
    # reported accuracy is on the validation split. A large run's common
    # settings: bfloat16, intervals, shuffle buffer (configs/_common.py).
    c.input.dataset = "imagenet2012"
    common.large_run(c, splits=common.IMAGENET1K_SPLITS, batch=BATCH,
                     eval_batch=1000, eval_every=5_000)
    # Inception crop (JPEGs decoded inside it) and flip at 224, then
    # RandAugment(2, 10); evaluation: the shorter side to 256 (the aspect
    # ratio kept, big_vision's resize_small), central 224.
    c.input.pp.train = "pretrain"
    c.input.pp.eval_resize_size, c.input.pp.eval_keep_aspect = 256, True
    c.input.pp.randaug_ops, c.input.pp.randaug_magnitude = 2, 10
    # Mixup with Beta(0.2, 0.2).
    c.input.mix.mixup_alpha = 0.2
    # S/16, global average pooling, sin-cos position embeddings, a
    # pre-logits layer of the width; no dropout, no stochastic depth (the
    # base's).
    c.model.variant = "S/16"
    c.model.pooling = "gap"
    c.model.posemb = "sincos2d"
    c.model.representation_size = 384
    # Updates for the epochs of the training split.
    c.trainer.total_steps = config_lib.epochs_to_steps(
        epochs, config_lib.IMAGENET1K_TRAIN, BATCH
    )
    # Adam with decoupled weight decay (times the learning rate: 0.1 x
    # 1e-3 = big_vision's 1e-4), 10k warm-up steps, cosine decay to 0.
    c.optimizer.name = "adamw"
    c.schedule.lr = 1e-3
    c.optimizer.weight_decay = 0.1
    c.schedule.warmup_steps = 10_000
    c.schedule.decay_type = "cosine"
    return c
