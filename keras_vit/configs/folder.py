r"""Your own images: fine-tune (or train) a ViT on a folder of photos, one
sub-folder per class.

    keras-vit-train --config=folder:/path/to/photos --model=ViT-B_16 \
        --workdir=/tmp/vit_photos

The folder is `photos/<class>/*.jpg|png|...`, or `photos/<split>/<class>/`
with its own train/ and val/ (or validation/, test/) sub-folders. With
class folders alone, a fixed fifth of each class's images is held out as
"val" (the same images in every run and command). The model trains on
"train", is evaluated on "val" during the run and scored at its end on
"test" where the folder has one, else on "val".

Argument: the folder (`folder:PATH`, or `folder:data_dir=PATH`; made
absolute, so that the run's config.json names it from any directory; a
path with a comma goes in --config.input.data_dir=PATH instead).

--model names where to start: a released name (ViT-B_16, ViT-Ti_16, ...),
hf://ORG/NAME, a .keras / .npz file or a training workdir, whose
architecture, resolution and pixel scaling the run takes; or a size
(Ti/16 ... H/14) to train from scratch at 224 x 224. Without --model: a
B/16 from scratch.

The run follows the data: 10 passes over the training images at batch 32
(the steps counted when the run starts), a warm-up of at most a tenth of
them, an evaluation and a checkpoint after every pass; SGD with momentum
and a cosine decay, the paper's fine-tuning recipe (Appendix B.1.1) at a
learning rate for small batches. Any of it is a --config override
(--config.trainer.epochs=3, --config.model.image_size=384, ...); with
--config.trainer.total_steps given instead, a warm-up longer than those
steps is held to a tenth of them.
"""

import os

from keras_vit.config import base_config, parse_config_arg


def get_config(arg=None):
    args = parse_config_arg(arg, "data_dir", data_dir="")
    c = base_config()
    # An image folder: <class>/ or <split>/<class>/ (keras_vit/data/
    # sources.py); the folder from the argument or --config.input.data_dir.
    c.input.dataset = "folder"
    path = args["data_dir"]
    if path and "://" not in path:  # a local folder: from any directory
        path = os.path.abspath(os.path.expanduser(path))
    c.input.data_dir = path or None
    # Train on "train"; evaluate on the folder's own validation split
    # during the run and on its test split at the end, the first of the
    # names it has (class folders alone: the held-out "val").
    c.input.train_split = "train"
    c.evals.test.val_split = "val|validation|valid|test"
    c.evals.test.split = "test|val|validation|valid"
    # The resolution of the model it starts from (224 from scratch); the
    # images resized to it, flipped for training.
    c.model.image_size = 0
    # Small data: 10 epochs at batch 32, the steps counted from the folder
    # when the run starts.
    c.input.batch_size = 32
    c.trainer.total_steps = 0
    c.trainer.epochs = 10.0
    # The paper's fine-tuning optimizer (SGD, momentum 0.9, gradient
    # clipping at 1, cosine decay) at a learning rate for batch 32; a
    # warm-up of at most a tenth of the steps.
    c.optimizer.name = "sgd"
    c.schedule.lr = 0.01
    c.schedule.warmup_steps = 100
    # Log, evaluate and checkpoint once per epoch (the periods are held to
    # one pass over the data).
    c.log.every_steps = 1_000
    c.evals.test.every_steps = 1_000
    c.checkpoints.every_steps = 1_000
    return c
