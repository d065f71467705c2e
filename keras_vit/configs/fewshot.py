r"""Few-shot linear evaluation of a frozen model (paper Section 4.1).

Pre-logits features; per data set, shot count and seed, `shots` random
training examples per class; ridge regression (l2_reg 1024) to {-1, 1}
targets in closed form; top-1 accuracy on the test split.

    keras-vit-evaluate --mode=fewshot --config=configs/fewshot.py \
        --model=ViT-B_16.npz --output_dir=/tmp/fewshot_b16

Some data sets only: `--config=fewshot:cifar100,pets`. A quick check
without downloads: `--config=fewshot:digits` with a
digits run (`--workdir=/tmp/vit_digits --config.model.image_size=32
--config.input.pp.eval_resize_size=32`: resized to 32, the whole image as
its crop).

Expected: ViT-B/16 and L/16 pre-trained on ImageNet-21k are well above
chance already at 1 shot and improve steadily to 25 shots (paper Figure 2 /
Section 4.1 report 5-shot ImageNet numbers for the pre-training sweeps).
ImageNet needs the manual download (ILSVRC2012_img_train.tar and
ILSVRC2012_img_val.tar) in <data_dir>/downloads/manual/ or in
--config.input.manual_dir; a data set that cannot be prepared is reported
and skipped.
"""

from keras_vit.config import base_config
from keras_vit.config_schema import evaluator
from keras_vit.errors import UsageError

# name -> (data source, few-shot training pool, test split)
DATASETS = {
    "caltech": ("caltech101", "train", "test"),
    "cars": ("cars196", "train", "test"),
    "cifar100": ("cifar100", "train", "test"),
    "dtd": ("dtd", "train", "test"),
    "pets": ("oxford_iiit_pet", "train", "test"),
    "uc_merced": ("uc_merced", "train[:1000]", "train[1000:]"),
    # big_vision's pool: the first 65,000 training images hold at least 30
    # of each class, enough for 25 shots, without extracting 1.28M features.
    "imagenet": ("imagenet2012", "train[:65000]", "validation"),
}
# Not in the default list: the 1,797 scikit-learn digits (no download).
EXTRA = {"digits": ("digits", "train", "test")}


def get_config(arg=None):
    names = [a.strip() for a in (arg or "").split(",") if a.strip()]
    known = {**DATASETS, **EXTRA}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(
            f"Unknown few-shot data set(s) {unknown}: choose from "
            f"{', '.join(known)}."
        )
    c = base_config()
    # Resize to 256, then the central 224 (model.image_size) crop.
    c.input.pp.eval_resize_size = 256
    # Feature-extraction batch (all replicas): the evaluator's batch_size,
    # else this.
    c.input.batch_size = 256
    # The few-shot evaluator (config_schema.EVALUATORS["fewshot"]), its
    # data sets: name -> data source and splits.
    with c.unlocked():
        c.evals.fewshot = evaluator("fewshot")
    c.evals.fewshot.datasets = {
        name: dict(dataset=d, train_split=tr, test_split=te)
        for name, (d, tr, te) in known.items()
        if (name in names) or (not names and name in DATASETS)
    }
    # New sub-dicts: lock them too.
    c.lock()
    return c
