r"""Pre-training ViT-B/16 or ViT-L/16 on ImageNet-21k (paper Table 3).

The recipe: Adam (b1 0.9, b2 0.999) with decoupled weight decay (not on
biases, norms, position embeddings or the class token), batch 4096, 10k
linear warm-up steps then linear decay, gradient clipping at global norm 1,
dropout 0.1, a pre-logits layer of the hidden size, 224 x 224 Inception
crops with horizontal flips, 90 epochs, bfloat16 compute.

Cloud TPU VM (e.g. v3-128 or v4-64), ImageNet-21k as an image folder
<data_dir>/train/<synset>/*.JPEG:

    python train.py --config=configs/imagenet21k_pretrain.py:B/16 \
        --workdir=gs://BUCKET/vit/i21k_b16 --strategy=tpu --tpu=local \
        --config.data_dir=gs://BUCKET/imagenet21k

A TFDS build of ImageNet-21k instead: add `dataset=NAME` to the argument
(`:variant=B/16,dataset=NAME`) and set --config.train_split /
--config.val_split to its split names. Fewer TPU cores: keep the batch and
add --config.accumulation_steps=K.

Steps: the fall 2011 release has 14,197,122 images (21,841 classes); 50,000
are held out for validation, and 90 epochs of the remaining 14,147,122 at
batch 4096 are 310,850 steps. For another copy use
--config.total_steps=ceil(90 * images / 4096).

Expected: the released ImageNet-21k checkpoints come from this recipe; after
fine-tuning at 384 (configs/finetune.py) ViT-L/16 reaches 85.30% on ImageNet,
99.15% on CIFAR-10, 93.25% on CIFAR-100 (paper Table 2), ViT-B/16 somewhat
less. Weight decay: Table 3 lists 0.03 for the ImageNet-21k runs (Section
4.1 mentions 0.1 as the general value; --config.optimizer.weight_decay=0.1).
"""

import ml_collections

# Paper Table 3, ImageNet-21k rows: base LR, weight decay, dropout, epochs.
TABLE3 = {
    "B/16": dict(lr=1e-3, weight_decay=0.03, dropout=0.1, epochs=90),
    "B/32": dict(lr=1e-3, weight_decay=0.03, dropout=0.1, epochs=90),
    "L/16": dict(lr=1e-3, weight_decay=0.03, dropout=0.1, epochs=90),
    "L/32": dict(lr=1e-3, weight_decay=0.03, dropout=0.1, epochs=90),
}
HIDDEN = {"B": 768, "L": 1024}
IMAGENET21K_IMAGES = 14_197_122
HELD_OUT = 50_000
BATCH = 4096


def parse_arg(arg, **defaults):
    """"B/16" or "variant=L/16,dataset=NAME" -> dict over `defaults`."""
    out = dict(defaults)
    for part in filter(None, (arg or "").split(",")):
        key, sep, value = part.partition("=")
        if not sep:
            key, value = "variant", key
        if key.strip() not in out:
            raise ValueError(
                f"Unknown config argument {key!r} in {arg!r}; known: "
                f"{', '.join(sorted(out))}."
            )
        out[key.strip()] = value.strip()
    return out


def total_steps(epochs: int, images: int = IMAGENET21K_IMAGES - HELD_OUT,
                batch: int = BATCH) -> int:
    return -(-epochs * images // batch)


def get_config(arg=None):
    args = parse_arg(arg, variant="B/16", dataset="folder")
    variant = args["variant"]
    if variant not in TABLE3:
        raise ValueError(
            f"No ImageNet-21k recipe for {variant!r} in paper Table 3: use "
            f"one of {', '.join(TABLE3)}."
        )
    row = TABLE3[variant]
    placeholder = ml_collections.config_dict.placeholder
    c = ml_collections.ConfigDict()
    # Random seed for parameters, data order and augmentation.
    c.seed = 0
    # Data source: "folder" (data_dir/<split>/<class>/*.jpg) or a TFDS name.
    c.dataset = args["dataset"]
    # TFDS / image-folder directory (may be gs://).
    c.data_dir = placeholder(str)
    # Image folders: leave out files that do not decode (logged) instead of
    # stopping with an error that names them.
    c.skip_bad_images = False
    # Training split and the held-out split for periodic and final
    # evaluation (ImageNet-21k has no official test split).
    c.train_split = f"train[{HELD_OUT}:]"
    c.val_split = f"train[:{HELD_OUT}]"
    c.eval_split = f"train[:{HELD_OUT}]"
    # TFDS feature names of the image and the label.
    c.image_key = "image"
    c.label_key = "label"
    # A VTAB-1k task name instead of `dataset` (see keras_vit/data/vtab.py).
    c.vtab_task = placeholder(str)
    # Number of classes; 0: read from the data source.
    c.num_classes = 0
    # Model input resolution.
    c.image_size = 224
    # Preprocessing: Inception crop (5-100% of the area, aspect 3/4-4/3)
    # and horizontal flip for training; evaluation resizes to image_size.
    c.pp = ml_collections.ConfigDict(
        dict(
            train="pretrain",
            area_range=(0.05, 1.0),
            flip=True,
            resize_size=placeholder(int),
            eval_resize_size=placeholder(int),
        )
    )
    # Model: the variant's sizes; pre-logits layer (tanh) of the hidden
    # size, as in the released checkpoints; dropout after every dense layer
    # except qkv and after the position embeddings (none in attention).
    c.model = ml_collections.ConfigDict(
        dict(
            variant=variant,
            # Explicit sizes override the variant's (None: the variant's).
            patch_size=placeholder(int),
            hidden_size=placeholder(int),
            num_layers=placeholder(int),
            num_heads=placeholder(int),
            mlp_dim=placeholder(int),
            pooling="token",
            representation_size=HIDDEN[variant[0]],
            dropout_rate=row["dropout"],
            attention_dropout_rate=0.0,
            head_zero_init=True,
        )
    )
    # Examples per optimizer update (all replicas and micro-batches).
    c.batch_size = BATCH
    # Examples per evaluation batch (all replicas together).
    c.eval_batch_size = 1024
    # Optimizer updates: 90 epochs of the training split.
    c.total_steps = total_steps(row["epochs"])
    # AdamW: linear warm-up, linear decay to 0 ("cosine" selectable);
    # decoupled weight decay, not on biases, norms and embeddings.
    c.optimizer = ml_collections.ConfigDict(
        dict(
            name="adamw",
            lr=row["lr"],
            warmup_steps=10_000,
            decay_type="linear",
            end_lr=0.0,
            b1=0.9,
            b2=0.999,
            weight_decay=row["weight_decay"],
            no_decay=("bias", "gamma", "beta", "pos_embedding", "cls"),
        )
    )
    # Clip the global gradient norm (paper: 1).
    c.grad_clip_norm = 1.0
    # A step whose loss or gradient norm is NaN/Inf: False stops training;
    # True skips that update (counted in the log and metrics.json).
    c.skip_nonfinite = False
    # Micro-batches per update (gradient accumulation): raise it when 4096
    # examples do not fit in one step of the available accelerators.
    c.accumulation_steps = 1
    # "softmax_xent" or "sigmoid_xent" (ImageNet-21k labels overlap: some
    # runs prefer sigmoid); optional label smoothing.
    c.loss = "softmax_xent"
    c.label_smoothing = 0.0
    # bfloat16 compute with float32 weights (mixed_bfloat16); logits and
    # loss stay float32. "float32" for exact CPU runs.
    c.dtype = "bfloat16"
    # Polyak/EMA decay of the weights; 0 disables it.
    c.ema_decay = 0.0
    # XLA-compile the forward/backward pass of each replica.
    c.jit_compile = True
    # Training steps per host call (TPUs run a whole loop on device).
    c.steps_per_loop = 100
    # Benchmarking: train on the first batch of the pipeline, repeated, to
    # time the training loop without its input work.
    c.synthetic_data = False
    # Logging, periodic evaluation and checkpoint intervals (steps).
    c.log_every_steps = 500
    c.eval_every_steps = 10_000
    c.checkpoint_every_steps = 5_000
    c.keep_checkpoints = 3
    # The input iterator is not checkpointed: its shuffle buffer would add
    # gigabytes to every checkpoint. A resumed run draws a new data order.
    c.checkpoint_iterator = False
    # Shuffle buffer (encoded images, per input pipeline), in-memory
    # caching of the splits (no: 14M images), batches prefetched (-1: auto).
    c.shuffle_buffer = 250_000
    c.cache = False
    c.cache_train = False
    c.prefetch = -1
    # Initialisation: none (training from scratch).
    c.init = ml_collections.ConfigDict(
        dict(
            npz=placeholder(str),
            keras_model=placeholder(str),
            workdir=placeholder(str),
            keep_pre_logits=False,
        )
    )
    # SavedModel export at the end of the run.
    c.export = ml_collections.ConfigDict(
        dict(
            enabled=False,
            export_dir=placeholder(str),
            model_name="vit",
        )
    )
    return c
