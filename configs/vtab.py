r"""VTAB-1k transfer with the paper's protocol (Appendix B.1.1).

Every task: the pre-trained backbone with a new zero-initialised head,
SGD momentum 0.9, LR 0.01, 2,500 steps, batch 512, cosine decay, no weight
decay, gradient clipping at norm 1, at 384 x 384 (position embeddings
resized); top-1 accuracy on the test split.

    python evaluate.py --mode=vtab --config=configs/vtab.py \
        --npz=ViT-L_16.npz --variant=L/16 --output_dir=/tmp/vtab_l16

Other pre-trained models: --workdir=RUN_DIR (a train.py run) or
--keras_model=model.keras. Some tasks only: --tasks=natural,dsprites_loc.
The small hyper-parameter sweep (2 LRs x 2 step counts on train800 /
val200, winner retrained on train800val200): --config.vtab.sweep.enabled.
Cloud TPU: add --strategy=tpu --tpu=local --config.data_dir=gs://...

Expected (paper Table 9): ViT-L/16 pre-trained on ImageNet-21k reaches
83.3 (Natural), 84.7 (Specialized), 57.5 (Structured), 72.7 (all 19).
Resisc45 and Retinopathy need a manual download into
<data_dir>/downloads/manual/ (the run says what is missing and goes on).
"""

import ml_collections


def get_config(arg=None):
    del arg
    c = ml_collections.ConfigDict()
    # Random seed for the head, data order and augmentation.
    c.seed = 0
    # TFDS data directory (may be gs://); None: the TFDS default.
    c.data_dir = ml_collections.config_dict.placeholder(str)
    # Download and prepare missing task data with TFDS.
    c.download = True
    # Manually downloaded files (Resisc45, Retinopathy); None:
    # <data_dir>/downloads/manual.
    c.manual_dir = ml_collections.config_dict.placeholder(str)
    # Fine-tuning resolution (the paper's 384).
    c.image_size = 384
    # Preprocessing: resize to image_size only ("eval"). No random crop or
    # flip: they would change the labels of the structured tasks (object
    # positions, orientations, azimuths).
    c.pp = ml_collections.ConfigDict(dict(train="eval", flip=False))
    # Regularisation of the fine-tuned model (the architecture comes from
    # the pre-trained model).
    c.model = ml_collections.ConfigDict(
        dict(dropout_rate=0.0, attention_dropout_rate=0.0)
    )
    # Keep the pre-trained pre-logits layer (the paper drops the whole
    # pre-training head).
    c.keep_pre_logits = False
    # Examples per update (all replicas together), and per eval batch.
    c.batch_size = 512
    c.eval_batch_size = 512
    # Optimizer updates per task.
    c.total_steps = 2500
    # SGD with momentum, cosine decay, no warm-up, no weight decay.
    c.optimizer = ml_collections.ConfigDict(
        dict(
            name="sgd",
            lr=0.01,
            momentum=0.9,
            nesterov=False,
            warmup_steps=0,
            decay_type="cosine",
            weight_decay=0.0,
        )
    )
    # Clip the global gradient norm (paper: 1).
    c.grad_clip_norm = 1.0
    # Micro-batches per update: raise it when 512 images at 384 do not fit.
    c.accumulation_steps = 1
    # Loss and label smoothing.
    c.loss = "softmax_xent"
    c.label_smoothing = 0.0
    # "float32" or "bfloat16" (bf16 compute, f32 weights).
    c.dtype = "float32"
    # No Polyak averaging for VTAB.
    c.ema_decay = 0.0
    # XLA-compile each replica's forward/backward pass.
    c.jit_compile = True
    # Training steps per host call; logging and checkpoint intervals.
    c.steps_per_loop = 50
    # Benchmarking: train on the first batch of the pipeline, repeated, to
    # time the training loop without its input work.
    c.synthetic_data = False
    c.log_every_steps = 100
    c.checkpoint_every_steps = 500
    c.keep_checkpoints = 1
    # The 1,000 training examples are cached in memory (decoded); the
    # shuffle buffer holds them all.
    c.cache_train = True
    c.shuffle_buffer = 1000
    # Checkpointing the iterator would store the shuffle buffer of raw
    # images in every checkpoint.
    c.checkpoint_iterator = False
    c.vtab = ml_collections.ConfigDict(
        dict(
            # Tasks and groups: "all", "natural", "specialized",
            # "structured" or task names, comma-separated (--tasks wins).
            tasks="all",
            # Keep each task's checkpoints after scoring (large).
            keep_checkpoints=False,
            # The optional sweep: every (lr, steps) pair trained on
            # train800 and scored on val200; the best is retrained on
            # train800val200 and scored on test.
            sweep=ml_collections.ConfigDict(
                dict(enabled=False, lrs=(0.001, 0.01), steps=(500, 2500))
            ),
        )
    )
    return c
