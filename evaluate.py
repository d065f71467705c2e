r"""Evaluates a Vision Transformer: `keras-vit-evaluate` (same flags).

    python evaluate.py --mode=eval --workdir=/tmp/vit_digits
    python evaluate.py --mode=fewshot --config=fewshot \
        --model=ViT-B_16.npz --output_dir=/tmp/fewshot_b16

See keras_vit/commands/evaluate.py (or `python evaluate.py --help`) for
every flag.
"""

import os
import runpy
import sys

if __name__ == "__main__":
    # train.py's quiet start (TensorFlow's start-up notices held back).
    train = runpy.run_path(os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "train.py"))
    with train["_quiet_start"]():
        from keras_vit.commands.evaluate import main
    sys.exit(main())
