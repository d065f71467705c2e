r"""Trains a Vision Transformer from a config: `keras-vit-train` (same flags).

    python train.py --config=digits --workdir=/tmp/vit_digits

See keras_vit/commands/train.py (or `python train.py --help`) for every flag.
"""

import sys

if __name__ == "__main__":
    # A command (keras_vit.quiet_start.COMMAND_MARK), under any file name:
    # TensorFlow's start-up notices are kept off stderr.
    __keras_vit_command__ = True
    from keras_vit.commands.train import main

    sys.exit(main())
