r"""Evaluates a Vision Transformer: `keras-vit-evaluate` (same flags).

    python evaluate.py --mode=eval --workdir=/tmp/vit_digits
    python evaluate.py --mode=fewshot --config=fewshot \
        --model=ViT-B_16.npz --output_dir=/tmp/fewshot_b16

See keras_vit/commands/evaluate.py (or `python evaluate.py --help`) for
every flag.
"""

import sys

if __name__ == "__main__":
    # A command (keras_vit.quiet_start.COMMAND_MARK), under any file name:
    # TensorFlow's start-up notices are kept off stderr.
    __keras_vit_command__ = True
    from keras_vit.commands.evaluate import main

    sys.exit(main())
