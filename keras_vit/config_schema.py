"""The one config schema: every field of a run config, its meaning and its
default.

`base_config()` is what every file in configs/ starts from; each overrides
only what its recipe changes. The config is locked, so a misspelt or unknown
field is an error that names the closest real one (`keras_vit.config`). The
code reads the fields directly: a default lives here and nowhere else.

Evaluation (evaluate.py) reads the same schema: `vtab` and `fewshot` hold
the options of its two protocols, and `download` / `manual_dir` how their
data is prepared. `model` holds the fields of `keras_vit.architecture.
Architecture` that a run chooses (`CONFIG_FIELDS`), with their defaults.
"""

from __future__ import annotations

import ml_collections
from ml_collections.config_dict import placeholder


def base_config() -> ml_collections.ConfigDict:
    """Every field with its default; locked (returns a new copy)."""
    c = ml_collections.ConfigDict()
    # Random seed for parameters, data order and augmentation.
    c.seed = 0

    # ---------------------------------------------------------------- data
    # Data source: "digits" (the 1,797 scikit-learn digits, no download),
    # "folder" (data_dir/<split>/<class>/*.jpg|png|...) or a TFDS name.
    c.dataset = "digits"
    # A VTAB-1k task (keras_vit/data/vtab.py) instead of `dataset`'s own
    # labels: its TFDS data, splits and derived labels.
    c.vtab_task = placeholder(str)
    # TFDS / image-folder directory (may be gs://); None: the TFDS default.
    c.data_dir = placeholder(str)
    # TFDS feature names of the image and the label.
    c.image_key = "image"
    c.label_key = "label"
    # Image folders: leave out files that do not decode (corrupt, truncated,
    # empty), counted and named in the log; False: stop with an error that
    # names them.
    c.skip_bad_images = False
    # Split used for training (slices such as "train[:98%]" work).
    c.train_split = "train"
    # Labelled examples kept per class of train_split, a random draw seeded
    # by `seed` (few-label training, e.g. after MPP pre-training); 0: all.
    # The digits and image folders.
    c.train_examples_per_class = 0
    # Split of the periodic evaluation; None: eval_split.
    c.val_split = placeholder(str)
    # Split of the final (reported) evaluation.
    c.eval_split = "test"
    # Number of classes (the head's width, a positive int); None: read from
    # the data source. (`create_model(num_classes=0)` is a model without a
    # head: a training run always has one.)
    c.num_classes = placeholder(int)
    # Model input resolution (position embeddings follow it).
    c.image_size = 224
    # Shuffle buffer (encoded images, per input pipeline).
    c.shuffle_buffer = 10_000
    # Keep the (encoded) training split in memory: for small data sets
    # such as VTAB's 1,000 examples.
    c.cache_train = False
    # Keep the evaluation splits in memory too.
    c.cache = False
    # Batches prefetched per input pipeline; -1: tf.data.AUTOTUNE.
    c.prefetch = -1

    # Preprocessing (keras_vit/data/preprocessing.py).
    c.pp = ml_collections.ConfigDict()
    # Training augmentation: "pretrain" (Inception crop of area_range,
    # flip), "finetune" (resize to resize_size, random image_size crop,
    # flip) or "eval" (resize only: no crop, no flip).
    c.pp.train = "finetune"
    # "finetune": resize before the random crop; None: straight to
    # image_size (no crop).
    c.pp.resize_size = placeholder(int)
    # Evaluation: resize to eval_resize_size, then the central image_size
    # crop; None: resize straight to image_size. Serving (export) uses it
    # too.
    c.pp.eval_resize_size = placeholder(int)
    # "pretrain": the crop's share of the image area (min, max).
    c.pp.area_range = (0.05, 1.0)
    # Random horizontal flips ("pretrain", "finetune").
    c.pp.flip = True
    # RandAugment ("pretrain", "finetune"): ops per image (big_vision's N;
    # 0: none) and magnitude (big_vision's M, mapped to Keras 3's
    # RandAugment factor M / 60; keras_vit/data/augment.py).
    c.pp.randaug_ops = 0
    c.pp.randaug_magnitude = 0.0

    # Mixing of training batches, labels mixed alike
    # (keras_vit/data/augment.py); with both, each batch uses one of them.
    c.mix = ml_collections.ConfigDict()
    # Mixup's Beta(alpha, alpha); 0: no Mixup.
    c.mix.mixup_alpha = 0.0
    # CutMix's Beta(alpha, alpha), in (0, 1]; 0: no CutMix.
    c.mix.cutmix_alpha = 0.0

    # --------------------------------------------------------------- model
    # keras_vit.create_model arguments. Sizes left None come from the
    # variant; variant None builds from the explicit sizes alone.
    c.model = ml_collections.ConfigDict()
    # "B/16", "L/16", "R50+B/16", ... (keras_vit.VARIANTS).
    c.model.variant = "B/16"
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
    # Dropout after every dense layer except qkv and after the position
    # embeddings; dropout of the attention weights.
    c.model.dropout_rate = 0.0
    c.model.attention_dropout_rate = 0.0
    # Start the classification head at zero (the paper's transfer set-up).
    c.model.head_zero_init = True
    # Initial value of every head bias: -10 with the sigmoid loss, as the
    # released ImageNet-21k models were pre-trained (each class starts at
    # probability ~4.5e-5 instead of 0.5).
    c.model.head_bias_init = 0.0
    # Position embeddings: "learn" (the paper's table) or "sincos2d" (fixed
    # 2-D sin-cos, big_vision's plain ViT; no weights).
    c.model.posemb = "learn"
    # Stochastic depth of the last block while training (AugReg's "sd");
    # block i of L drops each residual branch per example with
    # rate * i / (L - 1) (keras_vit/droppath.py).
    c.model.stochastic_depth_rate = 0.0
    # Rematerialisation of the encoder blocks (keras_vit/remat.py): "none";
    # "block" recomputes each block in the backward pass instead of keeping
    # its activations (high resolutions; docs/performance.md, "Memory");
    # "dots" (JAX backend only) keeps only the dense layers' matmul
    # outputs. Same gradients and checkpoints.
    c.model.remat = "none"

    # ------------------------------------------------------------ training
    # Examples per optimizer update (all replicas and micro-batches).
    c.batch_size = 512
    # Examples per evaluation batch (all replicas together); None: the
    # training micro-batch (evaluate.py: batch_size).
    c.eval_batch_size = placeholder(int)
    # Optimizer updates.
    c.total_steps = 10_000
    # Optimizer and learning-rate schedule (keras_vit/optim.py).
    c.optimizer = ml_collections.ConfigDict()
    # "sgd", "adam", "adamw" or "lamb".
    c.optimizer.name = "adamw"
    # Peak learning rate, reached after the warm-up.
    c.optimizer.lr = 1e-3
    # Linear warm-up steps from 0 to lr.
    c.optimizer.warmup_steps = 0
    # Decay after the warm-up: "cosine", "linear" or "constant"; to end_lr.
    c.optimizer.decay_type = "cosine"
    c.optimizer.end_lr = 0.0
    # Decoupled weight decay (adamw, lamb), multiplied by the learning
    # rate; sgd and adam take none.
    c.optimizer.weight_decay = 0.0
    # Variable-name substrings without weight decay: biases, LayerNorm and
    # GroupNorm parameters, position embeddings, the class token.
    c.optimizer.no_decay = ("bias", "gamma", "beta", "pos_embedding", "cls")
    # sgd: momentum and Nesterov momentum.
    c.optimizer.momentum = 0.9
    c.optimizer.nesterov = False
    # adam, adamw, lamb: the moment decays.
    c.optimizer.b1 = 0.9
    c.optimizer.b2 = 0.999
    # Clip the global gradient norm (paper: 1); None: no clipping.
    c.grad_clip_norm = 1.0
    # A step whose loss or gradient norm is NaN/Inf: False stops training
    # (naming the step and the last good checkpoint); True skips that update
    # (weights, optimizer moments and EMA unchanged; counted in the log and
    # in metrics.json).
    c.skip_nonfinite = False
    # Micro-batches per update (gradient accumulation): keeps batch_size
    # when one step of the accelerators cannot hold it.
    c.accumulation_steps = 1
    # "softmax_xent" or "sigmoid_xent" (both take Mixup's and CutMix's
    # mixed labels).
    c.loss = "softmax_xent"
    # Label smoothing of the targets.
    c.label_smoothing = 0.0
    # "float32" or "bfloat16" (mixed_bfloat16: bf16 compute, f32 weights;
    # logits and loss stay float32).
    c.dtype = "float32"
    # Polyak/EMA decay of the weights (paper: 0.9999 for its best ImageNet
    # results); 0 disables it. Evaluation and export use the averages.
    c.ema_decay = 0.0
    # XLA-compile the forward/backward pass of each replica.
    c.jit_compile = True
    # Multi-worker and remote-TPU runs: seconds to wait for every worker of
    # TF_CONFIG (or the TPU) to connect, logging the missing ones every 30
    # s, before stopping with an error that names them; 0: wait forever.
    c.connect_timeout_s = 600
    # Training steps per host call (a tf.function loop; TPUs run it on
    # device).
    c.steps_per_loop = 50
    # Benchmarking: train on the first batch of the pipeline, repeated, to
    # time the training loop without its input work.
    c.synthetic_data = False

    # ------------------------------------- self-supervised pre-training
    # Masked patch prediction (paper Section 4.6; keras_vit/mpp.py): the
    # model predicts corrupted patches instead of classes; labels are not
    # used. Its accuracy is the share of corrupted patches (colour cells)
    # whose colour class is right (`mpp_accuracy` in TensorBoard).
    c.mpp = ml_collections.ConfigDict()
    c.mpp.enabled = False
    # Share of each image's patches that is corrupted (paper: 0.5; it also
    # tried 0.15). Exactly round(rate * patches) per image.
    c.mpp.corrupt_rate = 0.5
    # Of the corrupted patches: the share replaced by the learnable [mask]
    # embedding, and by the embedding of another patch of the same image;
    # the rest keep their own (paper: 0.8, 0.1, hence 0.1 kept).
    c.mpp.mask_fraction = 0.8
    c.mpp.random_fraction = 0.1
    # What is predicted: "mean_colour" (the patch's mean colour, each
    # channel in 2**colour_bits levels: 512 classes, the paper's choice),
    # "colour_grid" (the same for each cell of a grid_size x grid_size
    # downsized patch) or "pixels" (L2 regression of the whole patch).
    c.mpp.target = "mean_colour"
    # Bits per colour channel of the colour targets.
    c.mpp.colour_bits = 3
    # "colour_grid": cells per patch side (paper: 4, for 16-pixel patches).
    c.mpp.grid_size = 4

    # ----------------------------------------------- logging, checkpoints
    # Train-metric logging interval (steps).
    c.log_every_steps = 100
    # Periodic evaluation on val_split (steps); 0: only the final one.
    c.eval_every_steps = 0
    # Checkpoint interval (steps); 0: only at the end and when stopped by
    # SIGTERM.
    c.checkpoint_every_steps = 1000
    # Checkpoints kept in the workdir.
    c.keep_checkpoints = 3
    # Also checkpoint the input iterator (exact resume of the data order);
    # its shuffle buffer goes into every checkpoint.
    c.checkpoint_iterator = True

    # Initialisation (fine-tuning): the model to start from, named as
    # --model names one (a training workdir, a .keras file, an official
    # .npz, a Hugging Face / timm folder); None: from scratch. The head is
    # re-initialised when the class count differs, position embeddings are
    # resized to the new patch grid.
    c.init = ml_collections.ConfigDict()
    c.init.model = placeholder(str)
    # Keep the source's pre-logits layer (the paper drops the whole
    # pre-training head; VTAB: the backbone keeps it).
    c.init.keep_pre_logits = False

    # SavedModel export (TF Serving) at the end of the run.
    c.export = ml_collections.ConfigDict()
    c.export.enabled = False
    # None: <workdir>/export.
    c.export.export_dir = placeholder(str)
    # The model's name in the serving config.
    c.export.model_name = "vit"

    # ---------------------------------------------------------- evaluation
    # Download and prepare missing TFDS data (few-shot and VTAB data sets).
    c.download = True
    # Manually downloaded files (Resisc45, Retinopathy, ImageNet); None:
    # <data_dir>/downloads/manual.
    c.manual_dir = placeholder(str)

    # VTAB-1k (evaluate.py --mode=vtab): each task fine-tunes the
    # pre-trained backbone with this config's training fields.
    c.vtab = ml_collections.ConfigDict()
    # Tasks and groups: "all", "natural", "specialized", "structured" or
    # task names, comma-separated (--tasks wins).
    c.vtab.tasks = "all"
    # Keep each task's checkpoints after scoring (large).
    c.vtab.keep_checkpoints = False
    # The optional sweep: every (lr, steps) pair trained on train800 and
    # scored on val200; the best is retrained on train800val200 and scored
    # on test.
    c.vtab.sweep = ml_collections.ConfigDict()
    c.vtab.sweep.enabled = False
    c.vtab.sweep.lrs = (0.001, 0.01)
    c.vtab.sweep.steps = (500, 2500)

    # Few-shot linear evaluation (evaluate.py --mode=fewshot): frozen
    # features at image_size (pp.eval_resize_size, then a central crop),
    # batch_size images per extraction batch.
    c.fewshot = ml_collections.ConfigDict()
    # Training examples per class, and random draws per shot count.
    c.fewshot.shots = (1, 5, 10, 25)
    c.fewshot.seeds = (0, 1, 2)
    # Ridge strength of the closed-form least squares (big_vision: 2**10).
    c.fewshot.l2_reg = 1024.0
    # The representation probed: None, the pre-logits features; an encoder
    # block index (negative from the end), that block's class token (mean
    # patch token with "gap" pooling), with the encoder's final LayerNorm
    # applied if layer_norm (keras_vit.evaluation.fewshot.probe_model).
    c.fewshot.layer = placeholder(int)
    c.fewshot.layer_norm = True
    # Data sets: name -> dict(dataset, train_split, test_split) (see
    # configs/fewshot.py); their names are the config's to choose.
    c.fewshot.datasets = ml_collections.ConfigDict()

    c.lock()
    return c


# Sub-dicts whose keys each config chooses (names of data sets); what they
# hold is not a fixed schema.
FREE_FORM = ("fewshot.datasets",)
