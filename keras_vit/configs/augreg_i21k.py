r"""AugReg pre-training on ImageNet-21k ("How to train your ViT?", Steiner
et al. 2021): the recipe of the checkpoints in gs://vit_models/augreg/.

Adam (b1 0.9, b2 0.999) at lr 1e-3 with decoupled weight decay 1e-4 in
big_vision's absolute terms (here weight_decay = 0.1, which is multiplied
by the learning rate; the file names' wd_0.1 / wd_0.03), batch 4096, 10k
linear warm-up steps then cosine decay, gradient clipping at global norm
1, 224 x 224 Inception crops with flips, the `aug` setting's RandAugment
and Mixup, dropout and stochastic depth 0.1 or 0, the sigmoid loss with the
head bias at -10, class token, no pre-logits layer, bfloat16.

    python train.py \
        --config=configs/augreg_i21k.py:variant=B/16 \
        --workdir=gs://BUCKET/vit/augreg_b16 --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/imagenet21k

The folder holds the images as <data_dir>/train/<synset>/*.JPEG (the
recipe holds out the first 50,000 of train itself).

Arguments (comma-separated key=value): variant (Ti/16, S/16, S/32, B/16,
B/32, B/8, L/16, R+Ti/16, R26+S/32, R50+L/32), aug (none, light1 =
randaug(2,0), light2 = randaug(2,10) + mixup 0.2, medium1 = randaug(2,15)
+ mixup 0.2, medium2 = randaug(2,15) + mixup 0.5, strong1 = randaug(2,20)
+ mixup 0.5, strong2 = randaug(2,20) + mixup 0.8), do and sd (0.0 or 0.1),
wd (0.1 or 0.03), epochs (300 or 30), dataset (as in
configs/imagenet21k_pretrain.py). aug, do, sd and wd not given are those of
the variant's recommended released file, the one the expected accuracy
below is of (B/16: aug=medium1, wd=0.1, do=0.0, sd=0.0; Ti/16: aug=none,
wd=0.03; `keras_vit.list_models("augreg/*")`). RandAugment is Keras 3's,
whose ops and magnitudes are not big_vision's (keras_vit/data/augment.py).

Expected (what the released files reach, as timm's results table lists
them): fine-tuned on ImageNet at 384 (configs/augreg_finetune.py), about
78.4% top-1 for Ti/16, 83.8% for S/16, 86.0% for B/16, 87.1% for L/16.
"""

from keras_vit import config as config_lib
from keras_vit.checkpoint.zoo import augreg, catalog
from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common
from keras_vit.errors import UsageError

BATCH = 4096


def _recommended_defaults(args: dict) -> dict:
    """`args` with the aug, do, sd and wd not given taken from the
    variant's recommended released file (`catalog.augreg_recommended`:
    B/16 -> aug_medium1-wd_0.1-do_0.0-sd_0.0); for a variant without one,
    medium1, 0.1 and no dropout or stochastic depth (big_vision's
    vit_i21k.py: regularisation did not help on ImageNet-21k)."""
    best = catalog.augreg_recommended(args["variant"])
    best = augreg.parse_name(best) if best else None
    found = dict(aug=best.aug, wd=best.weight_decay, do=best.dropout,
                 sd=best.stochastic_depth) if best else dict(
        aug="medium1", wd=0.1, do=0.0, sd=0.0)
    return dict(args, **{k: str(v) for k, v in found.items()
                         if not args[k]})


def get_config(arg=None):
    args = parse_config_arg(
        arg, "variant", variant="B/16", aug="", do="", sd="", wd="",
        epochs="300", dataset="folder",
    )
    if args["variant"] not in augreg.MODELS.values():
        raise UsageError(
            f"No AugReg model {args['variant']!r}: use one of "
            f"{', '.join(augreg.MODELS.values())}."
        )
    args = _recommended_defaults(args)
    rates = common.regularisation_args(args)
    c = base_config()
    # ImageNet-21k as an image folder (or a TFDS name); 50k training
    # images held out for validation and the final evaluation. A large
    # run's common settings: bfloat16, intervals, shuffle buffer
    # (configs/_common.py).
    c.input.dataset = args["dataset"]
    common.large_run(c, splits=common.IMAGENET21K_SPLITS, batch=BATCH,
                     eval_batch=1024, eval_every=10_000)
    # Inception crop and flip at 224 (the base's), JPEGs decoded inside
    # the crop only; RandAugment and Mixup of the aug setting. Evaluation
    # (and an export) resizes the shorter side to 256, the aspect ratio
    # kept, and takes the central 224 (big_vision's vit_i21k.py pp_eval).
    c.input.pp.train = "pretrain"
    c.input.pp.eval_resize_size, c.input.pp.eval_keep_aspect = 256, True
    common.set_augmentation(c, args["aug"])
    # The variant; class token and learned position embeddings, no
    # pre-logits layer; dropout and stochastic depth of the run.
    c.model.variant = args["variant"]
    c.model.dropout_rate = rates["do"]
    c.model.stochastic_depth_rate = rates["sd"]
    # Sigmoid loss (ImageNet-21k labels overlap), every class starting at
    # probability ~4.5e-5.
    c.objective.loss = "sigmoid_xent"
    c.model.head_bias_init = -10.0
    # Updates for the epochs of the 14.1M training images.
    c.trainer.total_steps = config_lib.epochs_to_steps(
        common.whole_arg(args, "epochs", "epochs", 300),
        config_lib.IMAGENET21K_TRAIN, BATCH)
    # Adam with decoupled weight decay (times the learning rate: 0.1 x
    # 1e-3 = big_vision's 1e-4), 10k warm-up steps, cosine decay to 0.
    c.optimizer.name = "adamw"
    c.schedule.lr = 1e-3
    c.optimizer.weight_decay = rates["wd"]
    c.schedule.warmup_steps = 10_000
    c.schedule.decay_type = "cosine"
    return c
