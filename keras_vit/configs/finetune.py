r"""Fine-tuning a pre-trained ViT (paper Appendix B.1.1, Table 4).

The recipe: SGD with momentum 0.9, batch 512, cosine decay after a short
linear warm-up, no weight decay, gradient clipping at global norm 1, at 384
x 384: an Inception-style random crop (5% to all of the image, aspect 3/4
to 4/3) resized to 384 and a horizontal flip for training, a plain resize
to 384 for evaluation, as in the official fine-tuning code
(vit_jax/input_pipeline.py; big_vision's transfer configs crop alike).
Dropout 0.1 for L/16, H/14 and R50+B/16, 0 for the others, as the official
model configs fine-tune them. The pre-training head is replaced by a
zero-initialised linear head and the position embeddings are resized to
the new patch grid. ImageNet (dataset=imagenet2012) follows the paper's
best runs: 512 x 512 for L/16, 518 x 518 for H/14 (384 for the others),
with Polyak averaging of the weights (factor 0.9999).

    python train.py \
        --config=configs/finetune.py:dataset=cifar100,variant=B/16 \
        --workdir=gs://BUCKET/vit/cifar100_b16 --strategy=tpu --tpu=local \
        --config.input.data_dir=gs://BUCKET/tensorflow_datasets

Arguments (comma-separated key=value): dataset (a row of DATASETS below,
or vtab/<task> for one VTAB-1k task), variant (B/16, L/16, ... of the
checkpoint), init (a released .npz, a .keras file or a train.py workdir;
default: the released ImageNet-21k checkpoint of the variant,
gs://vit_models/imagenet21k/ViT-<variant>.npz, or for the sizes only
AugReg released (Ti/16, S/16, S/32 and AugReg's hybrids) AugReg's
recommended ImageNet-21k file, `keras_vit.checkpoint.zoo.catalog.
pretrained`; a variant with no released checkpoint needs init), lr
(default: the table's), res (the resolution, default 384, and for
ImageNet the paper's 512 for L/16 and 518 for H/14), remat
(rematerialisation of the encoder blocks: none or block; default block
above 384, where activations decide what fits). Short runs on fewer cores:
--config.trainer.accumulation_steps=8 keeps the batch at 512.

At 512 (1,025 tokens for L/16), in bfloat16:

    python train.py \
        --config=configs/finetune.py:dataset=imagenet2012,variant=L/16,res=512 \
        --config.trainer.dtype=bfloat16 --workdir=gs://BUCKET/vit/in1k_l16_512 \
        --strategy=tpu --tpu=local --config.input.data_dir=gs://BUCKET/tfds

Expected (paper Table 2, ViT-L/16 pre-trained on ImageNet-21k): ImageNet
85.30%, CIFAR-10 99.15%, CIFAR-100 93.25%, Pets 94.67%, Flowers 99.61%,
VTAB 72.72% (mean of 19 tasks); ViT-B/16 is a little lower. Table 4 lists
the learning rates swept per dataset (`lrs` below); the best one was kept.
"""

from keras_vit.checkpoint.zoo import catalog
from keras_vit.config import base_config, parse_config_arg
from keras_vit.configs import _common as common
from keras_vit.data import vtab
from keras_vit.errors import UsageError

# Paper Table 4 (steps, swept learning rates) with the splits and warm-ups
# of the official fine-tuning code (Pets and Flowers: big_vision's
# configs/transfer.py): part of the training split is held out as a
# validation split for periodic evaluation. lr: the default learning rate.
DATASETS = {
    "imagenet2012": dict(
        train="train[:99%]", val="train[99%:]", test="validation",
        steps=20_000, lrs=(0.003, 0.01, 0.03, 0.06), lr=0.03, warmup=500,
        cache=False,
    ),
    "cifar10": dict(
        train="train[:98%]", val="train[98%:]", test="test",
        steps=10_000, lrs=(0.001, 0.003, 0.01, 0.03), lr=0.03, warmup=500,
        cache=True,
    ),
    "cifar100": dict(
        train="train[:98%]", val="train[98%:]", test="test",
        steps=10_000, lrs=(0.001, 0.003, 0.01, 0.03), lr=0.03, warmup=500,
        cache=True,
    ),
    "oxford_iiit_pet": dict(
        train="train[:90%]", val="train[90%:]", test="test",
        steps=500, lrs=(0.001, 0.003, 0.01, 0.03), lr=0.03, warmup=100,
        cache=True,
    ),
    "oxford_flowers102": dict(
        train="train[:90%]", val="train[90%:]", test="test",
        steps=500, lrs=(0.001, 0.003, 0.01, 0.03), lr=0.03, warmup=100,
        cache=True,
    ),
    # One VTAB-1k task (dataset=vtab/<task>): train on train800val200, score
    # on test, no evaluation in between (val200 is trained on); all 19
    # with the paper's protocol: configs/vtab.py.
    "vtab": dict(
        train="train800val200", val=None, test="test",
        steps=2_500, lrs=(0.01,), lr=0.01, warmup=0, cache=True,
    ),
}
# Appendix B.1.1: the ImageNet results of Table 2 fine-tune at a higher
# resolution and with Polyak averaging (factor 0.9999).
IMAGENET_RESOLUTION = {"L/16": 512, "H/14": 518}
# The official model configs (vit_jax/configs/models.py) fine-tune these
# with dropout 0.1 (the others with none).
DROPOUT = {"L/16": 0.1, "H/14": 0.1, "R50+B/16": 0.1}


def _released(variant: str) -> str:
    """The address of the released ImageNet-21k checkpoint of `variant`
    (the official file, else AugReg's), or an error naming those there
    are."""
    release = catalog.pretrained(variant)
    if release is None:
        raise UsageError(
            f"No released pre-trained checkpoint of variant {variant!r} to "
            "fine-tune: released ones are of "
            f"{', '.join(catalog.pretrained_variants())}; or give init=SOURCE."
        )
    return f"{catalog.OFFICIAL_BUCKET}/{release.file}"


def _dataset(given: str):
    """(row of DATASETS, VTAB task or None) of the dataset= argument."""
    name, vtab_task = given, None
    if name.startswith("vtab/"):
        vtab_task, name = name.split("/", 1)[1], "vtab"
    if name == "vtab" and not vtab_task:
        raise UsageError(
            f"dataset={given!r} names no VTAB task: use vtab/<task> (one "
            f"of {', '.join(vtab.TASK_NAMES)}), or configs/vtab.py for all "
            "19.")
    if name not in DATASETS:
        raise UsageError(
            f"No fine-tuning recipe for dataset {given!r}: use one of "
            f"{', '.join(k for k in DATASETS if k != 'vtab')} or "
            "vtab/<task>.")
    return name, vtab_task


def get_config(arg=None):
    args = parse_config_arg(arg, dataset="cifar100", variant="B/16", init="",
                            lr="", res="", remat="")
    name, vtab_task = _dataset(args["dataset"])
    row = DATASETS[name]
    variant = args["variant"]
    init = args["init"] or _released(variant)
    c = base_config()
    # Data source: a TFDS name (or "folder" with data_dir/<split>/<class>/).
    c.input.dataset = name
    # Training split, the held-out split for periodic evaluation, and the
    # split of the final (reported) evaluation (official fine-tuning code).
    c.input.train_split = row["train"]
    c.evals.test.val_split = row["val"]
    c.evals.test.split = row["test"]
    if vtab_task:
        task = vtab.get_task(vtab_task)
        # The task's TFDS data, its class count and its VTAB-1k splits.
        c.input.dataset, c.input.vtab_task = task.tfds_name, task.name
        c.model.num_classes = task.num_classes
        c.input.train_split = task.split(row["train"])
        c.evals.test.val_split = None
        c.evals.test.split = task.split(row["test"])
    # Fine-tuning resolution (position embeddings are resized to it): res=,
    # else 384, and for ImageNet the paper's best runs at 512 (L/16) and
    # 518 (H/14).
    c.model.image_size = (common.whole_arg(args, "res", "pixels", 384)
                          if args["res"] else 384)
    if name == "imagenet2012":
        # ImageNet: the paper's resolution for the variant.
        c.model.image_size = (c.model.image_size if args["res"]
                              else IMAGENET_RESOLUTION.get(variant, 384))
        # Polyak averaging of the weights, evaluated and exported.
        c.trainer.ema_decay = 0.9999
    # An Inception-style crop (area 5% to 100%, aspect 3/4 to 4/3) resized
    # to image_size, and a flip: the official fine-tuning code's.
    c.input.pp.train = "pretrain"
    if vtab_task:
        # VTAB: resize only (crops and flips would change the labels of
        # the structured tasks).
        c.input.pp.train = "eval"
        c.input.pp.flip = False
    # The pre-trained variant; a new zero-initialised head without the
    # pre-logits layer; dropout as the official model configs fine-tune it.
    c.model.variant = variant
    c.model.dropout_rate = DROPOUT.get(variant, 0.0)
    # Above 384 each block's activations are recomputed in the backward
    # pass instead of kept: the same gradients, and at 384 already 7.8x
    # less memory per example for L/16 (1,431 -> 184 MiB, float32), 5.3x
    # for B/16 at 1.15x the step's CPU time (docs/performance.md, "Memory").
    c.model.remat = args["remat"] or (
        "block" if c.model.image_size > 384 else "none")
    # Examples per evaluation batch (all replicas together).
    c.evals.test.batch_size = 512
    # Optimizer updates (paper Table 4).
    c.trainer.total_steps = row["steps"]
    # SGD with momentum 0.9, linear warm-up then cosine decay to 0, no
    # weight decay; lr from the table (Table 4 sweeps `lrs`). The official
    # code accumulates 8 micro-batches on one TPU v3-8 host
    # (--config.trainer.accumulation_steps=8).
    c.optimizer.name = "sgd"
    c.schedule.warmup_steps = row["warmup"]
    c.schedule.lr = common.number_arg(
        args, "lr", "the learning rate", "0.003", "above 0"
    ) if args["lr"] else row["lr"]
    # Log often, evaluate and checkpoint ten times per run (VTAB: evaluate
    # at the end only).
    c.log.every_steps = 50
    c.evals.test.every_steps = max(row["steps"] // 10, 50) * bool(row["val"])
    c.checkpoints.every_steps = max(row["steps"] // 10, 50)
    # The input iterator is not checkpointed (its 50k-example shuffle
    # buffer would weigh on every checkpoint); a resumed run draws a new
    # data order.
    c.checkpoints.iterator = False
    # A 50k-example shuffle buffer; the small data sets keep their encoded
    # training split in memory.
    c.input.shuffle_buffer = 50_000
    c.input.cache_train = row["cache"]
    # Initialisation: the pre-trained weights, position embeddings resized,
    # the head at zero even where it fits (as the official code starts it).
    c.init.model = init
    c.init.head = "zero"
    return c
