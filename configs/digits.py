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

import ml_collections


def get_config(arg=None):
    del arg
    c = ml_collections.ConfigDict()
    # Random seed for parameters, data order and augmentation.
    c.seed = 0
    # Data source: "digits", "folder" (data_dir/<split>/<class>/*.png) or a
    # TFDS name.
    c.dataset = "digits"
    # TFDS / image-folder directory (may be gs://); None: TFDS default.
    c.data_dir = ml_collections.config_dict.placeholder(str)
    # Image folders: leave out files that do not decode (corrupt, truncated,
    # empty), counted and named in the log; False: stop with an error that
    # names them.
    c.skip_bad_images = False
    # Split used for training, for periodic evaluation, and for the final
    # evaluation.
    c.train_split = "train"
    c.val_split = "test"
    c.eval_split = "test"
    # Number of classes; 0: read from the data source.
    c.num_classes = 0
    # Model input resolution (int or (height, width)).
    c.image_size = 32
    # Preprocessing: "finetune" = resize to resize_size, random crop of
    # image_size (small shifts of the digit); no flip (digits are not
    # mirror-symmetric).
    c.pp = ml_collections.ConfigDict(
        dict(train="finetune", resize_size=36, flip=False)
    )
    # Model: explicit sizes (variant None); a 4-layer ViT of width 128.
    c.model = ml_collections.ConfigDict(
        dict(
            variant=ml_collections.config_dict.placeholder(str),
            patch_size=8,
            hidden_size=128,
            num_layers=4,
            num_heads=4,
            mlp_dim=256,
            pooling="token",
            representation_size=ml_collections.config_dict.placeholder(int),
            dropout_rate=0.0,
            attention_dropout_rate=0.0,
            head_zero_init=True,
        )
    )
    # Examples per optimizer update (all replicas together).
    c.batch_size = 128
    # Optimizer updates.
    c.total_steps = 600
    # AdamW with a short warm-up and cosine decay.
    c.optimizer = ml_collections.ConfigDict(
        dict(
            name="adamw",
            lr=1e-3,
            warmup_steps=100,
            decay_type="cosine",
            weight_decay=0.05,
            b1=0.9,
            b2=0.999,
        )
    )
    # Clip the global gradient norm (paper: 1).
    c.grad_clip_norm = 1.0
    # A step whose loss or gradient norm is NaN/Inf: False stops training
    # (naming the step and the last good checkpoint); True skips that update
    # (weights, optimizer moments and EMA unchanged; counted in the log and
    # in metrics.json).
    c.skip_nonfinite = False
    # Micro-batches per update (gradient accumulation).
    c.accumulation_steps = 1
    # "softmax_xent" or "sigmoid_xent"; label smoothing.
    c.loss = "softmax_xent"
    c.label_smoothing = 0.0
    # "float32" or "bfloat16" (mixed_bfloat16: bf16 compute, f32 weights).
    c.dtype = "float32"
    # Polyak/EMA decay of the weights; 0 disables it.
    c.ema_decay = 0.0
    # XLA-compile the forward/backward pass of each replica.
    c.jit_compile = True
    # Training steps per host call (tf.function loop).
    c.steps_per_loop = 50
    # Benchmarking: train on the first batch of the pipeline, repeated, to
    # time the training loop without its input work.
    c.synthetic_data = False
    # Logging, periodic evaluation and checkpoint intervals (steps).
    c.log_every_steps = 100
    c.eval_every_steps = 200
    c.checkpoint_every_steps = 200
    c.keep_checkpoints = 3
    # Also checkpoint the input iterator (exact resume of the data order).
    c.checkpoint_iterator = True
    # Fine-tuning initialisation: a released .npz, a .keras file or another
    # run's workdir (head re-initialised if the class count differs).
    c.init = ml_collections.ConfigDict(
        dict(
            npz=ml_collections.config_dict.placeholder(str),
            keras_model=ml_collections.config_dict.placeholder(str),
            workdir=ml_collections.config_dict.placeholder(str),
            keep_pre_logits=False,
        )
    )
    # SavedModel export at the end of the run.
    c.export = ml_collections.ConfigDict(
        dict(
            enabled=False,
            export_dir=ml_collections.config_dict.placeholder(str),
            model_name="vit",
        )
    )
    return c
