"""The one config schema: every field of a run config, its meaning and its
default, in sections that are each handed to one component (big_vision's
way):

    seed          the one top-level field: parameters, data, augmentation
    model         the model builder: the `Architecture` fields a run
                  chooses, the input resolution and the head's width
    init          where fine-tuning starts (any model source), its head
    input         the input pipeline: data set, splits, batch, shuffle,
                  caching, preprocessing (`pp`) and batch mixing (`mix`)
    objective     the loss, or masked patch prediction (`mpp`)
    optimizer     the optimizer and its weight decay
    schedule      the learning rate over the steps
    trainer       steps, accumulation, clipping, precision, XLA, steps
                  per host call, EMA, what a non-finite step does
    checkpoints   how often, how many, the best, the input iterator's
    log           how often the training metrics are logged
    evals         named evaluators, each with a `type` (`EVALUATORS`):
                  "accuracy" (the training run's), "fewshot", "vtab"
    export        the SavedModel written at the end of a run

`base_config()` is what every file in configs/ starts from; each overrides
only what its recipe changes. The config is locked, so a misspelt or
unknown field is an error that names the closest real one
(`keras_vit.config`); fields of earlier versions (the flat `batch_size`,
`image_size`, ...) are mapped to their place here by `keras_vit.config.
upgrade` (one table, `MOVED`), with a one-line notice. A default lives here
and nowhere else.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import FieldReference, placeholder

# The resolution of a model trained from scratch (unless a config says).
SCRATCH_IMAGE_SIZE = 224


def base_config() -> ml_collections.ConfigDict:
    """Every field with its default; locked (returns a new copy)."""
    c = ml_collections.ConfigDict()
    # Random seed for parameters, data order and augmentation.
    c.seed = 0

    # --------------------------------------------------------------- model
    # keras_vit.create_model arguments. Sizes left None come from the
    # variant; variant None builds from the explicit sizes alone.
    c.model = ml_collections.ConfigDict()
    # "B/16", "L/16", "R50+B/16", ... (keras_vit.VARIANTS); None: explicit
    # sizes. A typed field, so that --config.model.variant still switches
    # it (and the sizes: keras_vit.config_overrides.command_line_variant).
    c.model.variant = FieldReference("B/16", field_type=str)
    # Explicit sizes (None: the variant's).
    c.model.patch_size = placeholder(int)
    c.model.hidden_size = placeholder(int)
    c.model.num_layers = placeholder(int)
    c.model.num_heads = placeholder(int)
    c.model.mlp_dim = placeholder(int)
    # Hybrids: bottleneck units per ResNet stage and its width factor
    # (None: the variant's; 1).
    c.model.resnet_layers = placeholder(tuple)
    c.model.resnet_width = placeholder(int)
    # "token" (class token) or "gap" (global average pooling).
    c.model.pooling = "token"
    # Width of the pre-logits layer (tanh) before the head; None: none.
    c.model.representation_size = placeholder(int)
    # Position embeddings: "learn" (the paper's table) or "sincos2d" (fixed
    # 2-D sin-cos, big_vision's plain ViT; no weights).
    c.model.posemb = "learn"
    # Input resolution (position embeddings follow it): an int or (height,
    # width); 0: init.model's, else (MPP: always) SCRATCH_IMAGE_SIZE.
    c.model.image_size = SCRATCH_IMAGE_SIZE
    # Number of classes (the head's width, > 0: a training run has a
    # head); None: read from the data source.
    c.model.num_classes = placeholder(int)
    # Dropout after every dense layer but qkv and after the position
    # embeddings; of the attention weights.
    c.model.dropout_rate = 0.0
    c.model.attention_dropout_rate = 0.0
    # Stochastic depth of the last block while training (AugReg's "sd");
    # block i of L drops each residual branch per example with
    # rate * i / (L - 1) (keras_vit/droppath.py).
    c.model.stochastic_depth_rate = 0.0
    # Start the classification head at zero (the paper's transfer set-up).
    c.model.head_zero_init = True
    # Initial value of every head bias: -10 with the sigmoid loss, as the
    # released ImageNet-21k models were pre-trained (probability ~4.5e-5).
    c.model.head_bias_init = 0.0
    # Rematerialisation of the encoder blocks (keras_vit/remat.py): "none";
    # "block" recomputes each block in the backward pass instead of keeping
    # its activations (high resolutions; docs/performance.md, "Memory");
    # "dots" (training on JAX only: Keras's fit, not keras-vit-train)
    # keeps only dense matmul outputs. Same gradients and checkpoints.
    c.model.remat = "none"

    # Initialisation (fine-tuning): the model to start from, named as
    # --model names one (a released name, hf://ORG/NAME, a workdir, a
    # .keras file, an official .npz, a Hugging Face / timm / keras-hub
    # folder); None: from scratch. Position embeddings are resized to the
    # new patch grid.
    c.init = ml_collections.ConfigDict()
    c.init.model = placeholder(str)
    # Keep the source's pre-logits layer (the paper drops the whole
    # pre-training head; VTAB: the backbone keeps it).
    c.init.keep_pre_logits = False
    # Keep the source's head where its width fits and the class names it
    # records, if any, are the data's ("match"), wherever it fits
    # ("fits"), or never ("zero").
    c.init.head = "match"

    # --------------------------------------------------------------- input
    c.input = ml_collections.ConfigDict()
    # Data source: "digits" (the 1,797 scikit-learn digits, no download),
    # "folder" (data_dir/<split>/<class>/*.jpg|png|...) or a TFDS name.
    c.input.dataset = "digits"
    # A VTAB-1k task (keras_vit/data/vtab.py) instead of `dataset`'s own
    # labels: its TFDS data, splits and derived labels.
    c.input.vtab_task = placeholder(str)
    # TFDS / image-folder directory (may be gs://); None: the TFDS default.
    c.input.data_dir = placeholder(str)
    # Download and prepare missing TFDS data (training, few-shot and VTAB
    # data sets alike).
    c.input.download = True
    # Manually downloaded files (Resisc45, Retinopathy, ImageNet); None:
    # <data_dir>/downloads/manual.
    c.input.manual_dir = placeholder(str)
    # TFDS feature names of the image and the label.
    c.input.image_key = "image"
    c.input.label_key = "label"
    # Image folders: leave out files that do not decode (corrupt, truncated,
    # empty), counted and named in the log; False: stop with an error that
    # names them.
    c.input.skip_bad_images = False
    # Split used for training (slices such as "train[:98%]" work).
    c.input.train_split = "train"
    # Labelled examples kept per class of train_split, a random draw seeded
    # by `seed` (few-label training, e.g. after MPP pre-training); 0: all.
    # The digits and image folders.
    c.input.train_examples_per_class = 0
    # Examples per optimizer update (all replicas and micro-batches).
    c.input.batch_size = 512
    # Shuffle buffer (encoded images, per input pipeline); an image folder
    # reads each epoch in an order of its own without it (unless cached).
    c.input.shuffle_buffer = 10_000
    # Keep the (encoded) training split in memory: for small data sets
    # such as VTAB's 1,000 examples.
    c.input.cache_train = False
    # Batches prefetched per input pipeline; -1: tf.data.AUTOTUNE.
    c.input.prefetch = -1
    # Benchmarking: train on the first batch of the pipeline, repeated, to
    # time the training loop without its input work.
    c.input.synthetic_data = False

    # Preprocessing (keras_vit/data/preprocessing.py).
    c.input.pp = ml_collections.ConfigDict()
    # Training augmentation: "pretrain" (Inception crop of area_range,
    # flip), "finetune" (resize to resize_size, random image_size crop,
    # flip) or "eval" (the evaluation's, below: no random crop or flip).
    c.input.pp.train = "finetune"
    # "finetune": resize before the random crop; None: straight to
    # image_size (no crop).
    c.input.pp.resize_size = placeholder(int)
    # Evaluation, serving: to eval_resize_size (eval_keep_aspect: the shorter
    # side), central crop; None: none (eval_keep_aspect: crop to the aspect).
    c.input.pp.eval_resize_size = placeholder(int)
    c.input.pp.eval_keep_aspect = False
    # "pretrain": the crop's share of the image area (min, max).
    c.input.pp.area_range = (0.05, 1.0)
    # Random horizontal flips ("pretrain", "finetune").
    c.input.pp.flip = True
    # RandAugment ("pretrain", "finetune"): ops per image (big_vision's N;
    # 0: none) and magnitude (big_vision's M, mapped to Keras 3's
    # RandAugment factor M / 60; keras_vit/data/augment.py).
    c.input.pp.randaug_ops = 0
    c.input.pp.randaug_magnitude = 0.0

    # Mixing of training batches, labels mixed alike
    # (keras_vit/data/augment.py); with both, each batch uses one of them.
    c.input.mix = ml_collections.ConfigDict()
    # Mixup's Beta(alpha, alpha); 0: no Mixup.
    c.input.mix.mixup_alpha = 0.0
    # CutMix's Beta(alpha, alpha), in (0, 1]; 0: no CutMix.
    c.input.mix.cutmix_alpha = 0.0

    # ----------------------------------------------------------- objective
    c.objective = ml_collections.ConfigDict()
    # "softmax_xent" or "sigmoid_xent" (both take Mixup's and CutMix's
    # mixed labels).
    c.objective.loss = "softmax_xent"
    # Label smoothing of the targets.
    c.objective.label_smoothing = 0.0
    # Masked patch prediction (paper Section 4.6; keras_vit/mpp.py): the
    # model predicts corrupted patches instead of classes; labels are not
    # used. Its accuracy is the share of corrupted patches (colour cells)
    # whose colour class is right (`mpp_accuracy` in TensorBoard).
    c.objective.mpp = ml_collections.ConfigDict()
    c.objective.mpp.enabled = False
    # Share of each image's patches that is corrupted (paper: 0.5; it also
    # tried 0.15). Exactly round(rate * patches) per image.
    c.objective.mpp.corrupt_rate = 0.5
    # Of the corrupted patches: the share replaced by the learnable [mask]
    # embedding, and by the embedding of another patch of the same image;
    # the rest keep their own (paper: 0.8, 0.1, hence 0.1 kept).
    c.objective.mpp.mask_fraction = 0.8
    c.objective.mpp.random_fraction = 0.1
    # What is predicted: "mean_colour" (the patch's mean colour, each
    # channel in 2**colour_bits levels: 512 classes, the paper's choice),
    # "colour_grid" (the same for each cell of a grid_size x grid_size
    # downsized patch) or "pixels" (L2 regression of the whole patch).
    c.objective.mpp.target = "mean_colour"
    # Bits per colour channel of the colour targets.
    c.objective.mpp.colour_bits = 3
    # "colour_grid": cells per patch side (paper: 4, for 16-pixel patches).
    c.objective.mpp.grid_size = 4

    # ------------------------------------------- optimizer (keras_vit/optim)
    c.optimizer = ml_collections.ConfigDict()
    # "sgd", "adam", "adamw" or "lamb".
    c.optimizer.name = "adamw"
    # Decoupled weight decay (adamw, lamb), multiplied by the learning
    # rate; sgd and adam take none.
    c.optimizer.weight_decay = 0.0
    # Variable-name substrings without weight decay: biases, LayerNorm and
    # GroupNorm parameters, position embeddings, the class token (the MPP
    # configs add MPP's [mask] token, mask_token).
    c.optimizer.no_decay = ("bias", "gamma", "beta", "pos_embedding", "cls")
    # sgd: momentum and Nesterov momentum.
    c.optimizer.momentum = 0.9
    c.optimizer.nesterov = False
    # adam, adamw, lamb: the moment decays.
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999

    # Learning rate over the steps (keras_vit/optim.py).
    c.schedule = ml_collections.ConfigDict()
    # Peak learning rate, reached after the warm-up.
    c.schedule.lr = 1e-3
    # Linear warm-up steps from 0 to lr.
    c.schedule.warmup_steps = 0
    # Decay ("cosine", "linear", "constant") to end_lr, a rate (not a
    c.schedule.decay_type = "cosine"  # fraction of lr, as big_vision's)
    c.schedule.end_lr = 0.0

    # ------------------------------------------------------------- trainer
    c.trainer = ml_collections.ConfigDict()
    # Optimizer updates; 0: `epochs` passes over the training split,
    # counted when the run starts, warm-up and periods fitted to them
    # (keras_vit/training/data_fit.py).
    c.trainer.total_steps = 10_000
    # Passes over the training split when total_steps is 0.
    c.trainer.epochs = 0.0
    # Micro-batches per update (gradient accumulation): keeps
    # input.batch_size when one step of the accelerators cannot hold it.
    c.trainer.accumulation_steps = 1
    # Clip the global norm of each update's gradient (paper: 1); 0 or None:
    # no clipping.
    c.trainer.grad_clip_norm = 1.0
    # "float32" or "bfloat16" (mixed_bfloat16: bf16 compute, f32 weights;
    # logits and loss stay float32).
    c.trainer.dtype = "float32"
    # XLA-compile the forward/backward pass of each replica.
    c.trainer.jit_compile = True
    # Training steps per host call (a tf.function loop; TPUs run it on
    # device).
    c.trainer.steps_per_loop = 50
    # A step whose loss or gradient norm is NaN/Inf: False stops training
    # (naming the step and the last good checkpoint); True skips that update
    # (weights, optimizer moments and EMA unchanged; counted in the log and
    # in metrics.json).
    c.trainer.skip_nonfinite = False
    # Polyak/EMA decay of the weights (paper: 0.9999 for its best ImageNet
    # results); 0 disables it. Evaluation and export use the averages.
    c.trainer.ema_decay = 0.0
    # Multi-worker and remote-TPU runs: seconds to wait for every worker of
    # TF_CONFIG (or the TPU) to connect, logging the missing ones every 30
    # s, before stopping with an error that names them; 0: wait forever.
    c.trainer.connect_timeout_s = 600

    # --------------------------------------------------------- checkpoints
    c.checkpoints = ml_collections.ConfigDict()
    # Checkpoint interval (steps); 0: only at the end and when stopped by
    # SIGTERM.
    c.checkpoints.every_steps = 1000
    # Checkpoints kept in the workdir.
    c.checkpoints.keep = 3
    # An accuracy evaluator's name: keep the checkpoint of its best accuracy
    # in <workdir>/best/, which `keep` never deletes; None: none kept.
    c.checkpoints.keep_best = placeholder(str)
    # Checkpoint the input iterator too (its shuffle buffer, if any).
    c.checkpoints.iterator = True

    c.log = ml_collections.ConfigDict()
    # Train-metric logging interval (steps).
    c.log.every_steps = 100
    # A progress line (step, %, elapsed, time left, images/s) of training
    # and evaluation at least this often (seconds of wall time); 0: none.
    c.log.every_seconds = 10.0

    # ---------------------------------------------------------------- evals
    # Named evaluators (`EVALUATORS` gives each type's fields). A training
    # run runs its "accuracy" ones: every `every_steps` on `val_split` and
    # at the end on `split`; the one named "test" gives metrics.json's
    # test_accuracy, test_loss, ... keras-vit-evaluate runs a config's
    # "fewshot" and "vtab" evaluators (configs/fewshot.py, configs/vtab.py
    # add them).
    c.evals = ml_collections.ConfigDict()
    c.evals.test = evaluator("accuracy")

    # SavedModel export (TF Serving) at the end of the run.
    c.export = ml_collections.ConfigDict()
    c.export.enabled = False
    # None: <workdir>/export.
    c.export.export_dir = placeholder(str)
    # The model's name in the serving config.
    c.export.model_name = "vit"

    c.lock()
    return c


def _accuracy() -> ml_collections.ConfigDict:
    e = ml_collections.ConfigDict()
    # The evaluator's type (`EVALUATORS`).
    e.type = "accuracy"
    # Split of the final (reported) evaluation.
    e.split = "test"
    # Split of the periodic evaluation; None: split.
    e.val_split = placeholder(str)
    # Periodic evaluation on val_split (steps); 0: only the final one.
    e.every_steps = 0
    # Examples per evaluation batch (all replicas together); None: the
    # training micro-batch (keras-vit-evaluate: input.batch_size).
    e.batch_size = placeholder(int)
    # Keep the evaluation split in memory.
    e.cache = False
    return e


def _fewshot() -> ml_collections.ConfigDict:
    # Few-shot linear evaluation (keras-vit-evaluate --mode=fewshot):
    # frozen features at model.image_size (input.pp.eval_resize_size, then
    # a central crop).
    e = ml_collections.ConfigDict()
    # The evaluator's type (`EVALUATORS`).
    e.type = "fewshot"
    # Data sets: name -> dict(dataset, train_split, test_split) (see
    # configs/fewshot.py); their names are the config's to choose.
    e.datasets = ml_collections.ConfigDict()
    # Training examples per class, and random draws per shot count.
    e.shots = (1, 5, 10, 25)
    e.seeds = (0, 1, 2)
    # Ridge strength of the closed-form least squares (big_vision: 2**10).
    e.l2_reg = 1024.0
    # The representation probed: None, the pre-logits features; an encoder
    # block index (negative from the end), that block's class token (mean
    # patch token with "gap" pooling), with the encoder's final LayerNorm
    # applied if layer_norm (keras_vit.evaluation.fewshot.probe_model).
    e.layer = placeholder(int)
    e.layer_norm = True
    # Images per feature-extraction batch (all replicas together); None:
    # the config's input.batch_size.
    e.batch_size = placeholder(int)
    return e


def _vtab() -> ml_collections.ConfigDict:
    # VTAB-1k (keras-vit-evaluate --mode=vtab): each task fine-tunes the
    # pre-trained backbone with the config's other sections (input batch,
    # optimizer, schedule, trainer, ...).
    e = ml_collections.ConfigDict()
    # The evaluator's type (`EVALUATORS`).
    e.type = "vtab"
    # Tasks and groups: "all", "natural", "specialized", "structured" or
    # task names, comma-separated (--tasks wins).
    e.tasks = "all"
    # Keep each task's checkpoints after scoring (large).
    e.keep_checkpoints = False
    # The optional sweep: every (lr, steps) pair trained on train800 and
    # scored on val200; the best is retrained on train800val200 and scored
    # on test.
    e.sweep = ml_collections.ConfigDict()
    e.sweep.enabled = False
    e.sweep.lrs = (0.001, 0.01)
    e.sweep.steps = (500, 2500)
    return e


# The evaluator types: each `evals` entry is one of these (its defaults).
EVALUATORS = {"accuracy": _accuracy, "fewshot": _fewshot, "vtab": _vtab}


def evaluator(kind: str) -> ml_collections.ConfigDict:
    """A new evaluator entry of type `kind` with its defaults."""
    return EVALUATORS[kind]()


# Sub-dicts whose keys each config chooses: the evaluators by name, and the
# few-shot data sets by name (evals.<name>.datasets).
FREE_FORM = ("evals",)
