r"""Masked patch prediction pre-training of ViT-B/16 (paper Section 4.6,
Appendix B.1.2), on ImageNet (TFDS) or an image folder, on Cloud TPU.

The recipe: 50% of each image's patch embeddings corrupted (80% [mask],
10% another patch of the image, 10% kept), their 3-bit mean colour
predicted (512 classes, softmax cross-entropy on the corrupted patches);
Adam with base learning rate 2e-4, 10k linear warm-up steps, cosine decay,
batch 4096, gradient clipping at global norm 1; 224 x 224
Inception crops with flips; bfloat16 compute. Labels are not used.

    python train.py --config=configs/mpp_pretrain.py:B/16 \
        --workdir=gs://BUCKET/vit/mpp_b16 --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/tensorflow_datasets

Arguments (comma-separated key=value, or a bare variant): variant (default
B/16), dataset (a TFDS name, default imagenet2012, or "folder" for
<data_dir>/train/<class>/*.JPEG), steps (default 100k, about 320
ImageNet epochs: the paper's 1M steps were on JFT, about 14 of its
epochs, and it saw the gains level off after 100k, alike when
pre-training on ImageNet; `mpp_pretrain:B/16,steps=1000000` for the
JFT length). The alternatives the paper tried are config fields:
--config.objective.mpp.target=colour_grid (a 4 x 4 downsized patch, 16
predictions of 512 classes) or pixels (L2 regression of the full patch),
--config.objective.mpp.corrupt_rate=0.15. Fewer TPU cores: keep the batch
and add --config.trainer.accumulation_steps=K.

Expected: fine-tuned on ImageNet (configs/finetune.py:dataset=imagenet2012,
init=<this workdir>), the paper's ViT-B/16, MPP pre-trained on JFT,
reached 79.9% top-1, 2 points above training from scratch and 4 below
supervised pre-training; pre-trained on ImageNet the paper reports
similar gains without a number. The
workdir holds encoder.npz, the encoder in the official .npz layout.
"""

from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common

# TFDS ImageNet (ILSVRC-2012) has 1,281,167 training images; 10k of them
# are held out for the MPP accuracy during training.
HELD_OUT = 10_000


def get_config(arg=None):
    args = parse_config_arg(
        arg, "variant", variant="B/16", dataset="imagenet2012",
        steps="100000")
    c = base_config()
    # Data source: a TFDS name or "folder" (data_dir/<split>/<class>/...).
    c.input.dataset = args["dataset"]
    # Training images, and held-out training images for the MPP accuracy
    # (labels are not used, so any split of images would do); examples per
    # optimizer update and per evaluation batch; a large run's common
    # settings: bfloat16 compute with float32 weights (predictions and loss
    # float32), intervals (the MPP accuracy on the held-out images every
    # 10k steps), shuffle buffer, no checkpointed iterator
    # (configs/_common.py).
    common.large_run(c, splits=(f"train[{HELD_OUT}:]", f"train[:{HELD_OUT}]",
                                f"train[:{HELD_OUT}]"),
                     batch=4096, eval_batch=1024, eval_every=10_000)
    # Inception crop and horizontal flip at 224 x 224 (the base's size).
    c.input.pp.train = "pretrain"
    # The variant's encoder; no pre-logits layer (the MPP head replaces the
    # classification head) and no dropout.
    c.model.variant = args["variant"]
    # Masked patch prediction, the paper's corruption and 3-bit mean
    # colour target (the base's mpp fields).
    c.objective.mpp.enabled = True
    # The [mask] embedding, a learned token as the class token is, is left
    # out of any weight decay with it.
    c.optimizer.no_decay = (*c.optimizer.no_decay, "mask_token")
    # Optimizer updates (paper: 1M on JFT; 100k already gives most of the
    # gain, on ImageNet too).
    c.trainer.total_steps = common.whole_arg(args, "steps",
                                             "optimizer updates", 100000)
    # Adam (b1 0.9, b2 0.999; no weight decay), base learning rate 2e-4,
    # 10k linear warm-up steps, cosine decay to 0.
    c.optimizer.name = "adam"
    c.schedule.lr = 2e-4
    c.schedule.warmup_steps = 10_000
    c.schedule.decay_type = "cosine"
    return c
