r"""A small ViT on the handwritten digits that scikit-learn ships.

The embedded default: real data (1,797 8 x 8 grey images, 10 classes; a fixed
stratified split of 1,437 train / 360 test), no download. The images are
upsampled to 32 x 32 and cut into 8 x 8 patches (16 tokens, each 2 x 2
original pixels): 4 x 4 patches (64 tokens) reach the same accuracy at
about five times the cost.

    python train.py --config=configs/digits.py --workdir=/tmp/vit_digits

Expected: >= 95% test accuracy (about 97-98%) in under 5 minutes on a
2-core CPU; metrics.json in the workdir holds the numbers.
"""

from keras_vit import config as config_lib
from keras_vit.config import base_config


def get_config(arg=None):
    config_lib.no_config_arg(arg, "digits")
    c = base_config()
    # Upsampled 8 x 8 greys: 8 x 8 patches give 16 tokens of 2 x 2 original
    # pixels each.
    c.model.image_size = 32
    # Resize to 36 and take a random 32 crop (small shifts of the digit);
    # no flip: digits are not mirror-symmetric.
    c.input.pp.resize_size = 36
    c.input.pp.flip = False
    # A 4-layer ViT of width 128 (explicit sizes, no named variant).
    c.model.update(dict(
        variant=None, patch_size=8, hidden_size=128, num_layers=4,
        num_heads=4, mlp_dim=256,
    ))
    # Small data: small batches, 600 updates (about 53 epochs).
    c.input.batch_size = 128
    c.trainer.total_steps = 600
    # AdamW with a short warm-up and cosine decay, some weight decay.
    c.schedule.warmup_steps = 100
    c.optimizer.weight_decay = 0.05
    # Evaluate (on the test split) and checkpoint three times per run.
    c.evals.test.every_steps = 200
    c.checkpoints.every_steps = 200
    return c
