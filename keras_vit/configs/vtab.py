r"""VTAB-1k transfer with the paper's protocol (Appendix B.1.1).

Every task: the pre-trained backbone with a new zero-initialised head,
SGD momentum 0.9, LR 0.01, 2,500 steps, batch 512, cosine decay, no weight
decay, gradient clipping at norm 1, at 384 x 384 (position embeddings
resized); top-1 accuracy on the test split.

    keras-vit-evaluate --mode=vtab --config=configs/vtab.py \
        --model=ViT-L_16.npz --variant=L/16 --output_dir=/tmp/vtab_l16

--model takes any pre-trained model: a training run's workdir, a .keras
file, a Hugging Face folder. Some tasks only: --tasks=natural,dsprites_loc.
The small hyper-parameter sweep (2 LRs x 2 step counts on train800 /
val200, winner retrained on train800val200): --config.evals.vtab.sweep.enabled.
Cloud TPU: add --strategy=tpu --tpu=local --config.input.data_dir=gs://...

Expected (paper Table 9): ViT-L/16 pre-trained on ImageNet-21k reaches
83.3 (Natural), 84.7 (Specialized), 57.5 (Structured), 72.7 (all 19).
Resisc45 and Retinopathy need a manual download into
<data_dir>/downloads/manual/ (the run says what is missing and goes on).
"""

from keras_vit import config as config_lib
from keras_vit.config import base_config
from keras_vit.config_schema import evaluator


def get_config(arg=None):
    config_lib.no_config_arg(arg, "vtab")
    c = base_config()
    # The paper's fine-tuning resolution.
    c.model.image_size = 384
    # Resize to image_size only: no random crop or flip, which would change
    # the labels of the structured tasks (object positions, orientations,
    # azimuths).
    c.input.pp.train = "eval"
    c.input.pp.flip = False
    # Evaluation batch as training's. (The architecture comes from the
    # pre-trained model: config.model only sets its dropout, none here.)
    c.evals.test.batch_size = 512
    # Optimizer updates per task: SGD with momentum, cosine decay, no
    # warm-up, no weight decay.
    c.trainer.total_steps = 2500
    c.optimizer.name = "sgd"
    c.schedule.lr = 0.01
    # Checkpoint every 500 steps, keep one (nineteen tasks' worth of
    # checkpoints add up).
    c.checkpoints.every_steps = 500
    c.checkpoints.keep = 1
    # The 1,000 training examples are cached in memory (decoded); the
    # shuffle buffer holds them all.
    c.input.cache_train = True
    c.input.shuffle_buffer = 1000
    # Checkpointing the iterator would store the shuffle buffer of raw
    # images in every checkpoint.
    c.checkpoints.iterator = False
    # The VTAB-1k evaluator (config_schema.EVALUATORS["vtab"]): all 19
    # tasks, the fixed recipe (its optional sweep off).
    with c.unlocked():
        c.evals.vtab = evaluator("vtab")
    c.lock()
    return c
