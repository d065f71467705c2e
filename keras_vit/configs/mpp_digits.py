r"""Masked patch prediction on the digits' training images, no labels.

The self-supervised objective of the paper (Section 4.6): half of each
image's 16 patch embeddings are corrupted (80% [mask], 10% another patch,
10% kept) and the model predicts their 3-bit mean colour (512 classes; the
digits are grey, so 8 of them occur). The model is configs/digits.py's, so
that its encoder fine-tunes with configs/digits_few_labels.py (or
configs/digits.py) through config.init.model.

    python train.py --config=configs/mpp_digits.py --workdir=/tmp/mpp_digits

Expected: MPP accuracy on the test images (metrics.json
"test_mpp_accuracy", TensorBoard "mpp_accuracy") about 0.73 after 1,500
steps, in about 3 minutes on a 2-core CPU; the workdir also holds
encoder.npz, the encoder in the official .npz layout.
scripts/mpp_label_efficiency.py compares fine-tuning from it with
training from scratch on a few labels per class.
"""

from keras_vit import config as config_lib
from keras_vit.config import base_config


def get_config(arg=None):
    config_lib.no_config_arg(arg, "mpp_digits")
    c = base_config()
    # Upsampled 8 x 8 greys, cut into 8 x 8 patches of 2 x 2 original
    # pixels (configs/digits.py): 16 tokens per image.
    c.model.image_size = 32
    # Resize to 36 and take a random 32 crop; no flip (as configs/digits.py).
    c.input.pp.resize_size = 36
    c.input.pp.flip = False
    # configs/digits.py's 4-layer ViT of width 128: its encoder transfers.
    c.model.update(dict(
        variant=None, patch_size=8, hidden_size=128, num_layers=4,
        num_heads=4, mlp_dim=256,
    ))
    # Masked patch prediction with the paper's corruption and target (the
    # base's mpp fields); the labels are not used.
    c.objective.mpp.enabled = True
    # The [mask] token without weight decay, as the class token.
    c.optimizer.no_decay = (*c.optimizer.no_decay, "mask_token")
    # 1,500 updates of 128 images (about 134 passes over the 1,437).
    c.input.batch_size = 128
    c.trainer.total_steps = 1_500
    # AdamW with a short warm-up and cosine decay (configs/digits.py's).
    c.schedule.warmup_steps = 100
    c.optimizer.weight_decay = 0.05
    # MPP accuracy on the test images and a checkpoint every 500 steps.
    c.evals.test.every_steps = 500
    c.checkpoints.every_steps = 500
    return c
