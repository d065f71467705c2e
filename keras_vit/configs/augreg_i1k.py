r"""AugReg from scratch on ImageNet-1k ("How to train your ViT?", Steiner
et al. 2021): the recipe of the `*-i1k-300ep-*` files in
gs://vit_models/augreg/.

As configs/augreg_i21k.py (Adam at lr 1e-3, weight decay 0.1 x lr, batch
4096, 10k warm-up steps then cosine decay, clipping at 1, Inception crop
and flip at 224, RandAugment + Mixup of the `aug` setting, dropout and
stochastic depth 0.1 or 0, bfloat16) on ImageNet-1k for 300 epochs, with
the sigmoid loss and the head bias at log(1/1000) = -6.9, so that every
class starts at its prior.

    python train.py \
        --config=configs/augreg_i1k.py:variant=B/16,aug=medium2,do=0.1,sd=0.1 \
        --workdir=gs://BUCKET/vit/augreg_i1k_b16 --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/tensorflow_datasets

Arguments (key=value, comma-separated): variant, aug, do, sd, wd, epochs
as in configs/augreg_i21k.py; aug defaults to big_vision's vit_i1k.py
choice for the variant (light1 for Ti/16, medium1 for S/32, medium2 for
the others). ImageNet-1k is TFDS's imagenet2012 (a manual download); 1%
of its training split is held out for validation, the reported accuracy
is on its validation split.

Expected (AugReg Section 4, Figure 4: from ImageNet-1k alone, augmentation
and regularisation pay most for B/32, B/16 and L/16; big_vision's
vit_i1k.py leaves the regularisation out, `:do=0,sd=0` here): the
released i1k files timm lists (vit_base_patch16_224.augreg_in1k, about
79%) were fine-tuned a further 20k steps on ImageNet at 224 after such a
run (the `--imagenet2012-steps_20k` part of their names), which this
recipe does not do: configs/augreg_finetune.py does.
RandAugment is Keras 3's, not big_vision's (keras_vit/data/augment.py).
"""

from keras_vit import config as config_lib
from keras_vit.checkpoint.zoo import augreg
from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common
from keras_vit.errors import UsageError

BATCH = 4096
# big_vision's configs/vit_i1k.py: the augmentation of each size from
# ImageNet-1k alone ("a good average between 30ep and 300ep").
I1K_AUG = {"Ti/16": "light1", "S/32": "medium1"}


def get_config(arg=None):
    args = parse_config_arg(
        arg, "variant", variant="B/16", aug="", do="0.1", sd="0.1",
        wd="0.1", epochs="300",
    )
    if args["variant"] not in augreg.MODELS.values():
        raise UsageError(
            f"No AugReg model {args['variant']!r}: use one of "
            f"{', '.join(augreg.MODELS.values())}."
        )
    rates = common.regularisation_args(args)
    c = base_config()
    # ImageNet-1k from TFDS: 1% of train held out for validation; the
    # reported accuracy is on the validation split. A large run's common
    # settings: bfloat16, intervals, shuffle buffer (configs/_common.py).
    c.input.dataset = "imagenet2012"
    common.large_run(c, splits=common.IMAGENET1K_SPLITS, batch=BATCH,
                     eval_batch=1000, eval_every=5_000)
    # Inception crop and flip at 224, JPEGs decoded inside the crop only;
    # evaluation resizes the shorter side to 256 (area, the aspect ratio
    # kept: big_vision's resize_small) and takes the central 224.
    c.input.pp.train = "pretrain"
    c.input.pp.eval_resize_size, c.input.pp.eval_keep_aspect = 256, True
    # RandAugment and Mixup of the aug setting (big_vision's per-variant
    # choice where none is given).
    common.set_augmentation(
        c, args["aug"] or I1K_AUG.get(args["variant"], "medium2"))
    # The variant (class token, learned position embeddings, no pre-logits
    # layer, as the released i1k files: big_vision's vit_i1k.py today adds
    # one, rep_size=True); dropout and stochastic depth of the run.
    c.model.variant = args["variant"]
    c.model.dropout_rate = rates["do"]
    c.model.stochastic_depth_rate = rates["sd"]
    # Sigmoid loss; every class starts at its prior, 1/1000.
    c.objective.loss = "sigmoid_xent"
    c.model.head_bias_init = -6.9
    # Updates for the epochs of the training split.
    c.trainer.total_steps = config_lib.epochs_to_steps(
        common.whole_arg(args, "epochs", "epochs", 300),
        config_lib.IMAGENET1K_TRAIN, BATCH)
    # Adam with decoupled weight decay (times the learning rate), 10k
    # warm-up steps, cosine decay to 0.
    c.optimizer.name = "adamw"
    c.schedule.lr = 1e-3
    c.optimizer.weight_decay = rates["wd"]
    c.schedule.warmup_steps = 10_000
    c.schedule.decay_type = "cosine"
    return c
