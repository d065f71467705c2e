r"""Evaluates a Vision Transformer: plain accuracy, few-shot, VTAB-1k.

    python evaluate.py --mode=eval --workdir=/tmp/vit_digits
    python evaluate.py --mode=fewshot --config=configs/fewshot.py \
        --npz=ViT-B_16.npz --output_dir=/tmp/fewshot_b16
    python evaluate.py --mode=vtab --config=configs/vtab.py \
        --npz=ViT-L_16.npz --variant=L/16 --output_dir=/tmp/vtab_l16

See keras_vit/commands/evaluate.py for every flag.
"""

import importlib.util
import os


def _quiet_start():
    # By its path: importing keras_vit would load TensorFlow, whose start-up
    # notices it holds back.
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "keras_vit", "commands", "quiet_start.py")
    spec = importlib.util.spec_from_file_location("_quiet_start", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.quiet_tensorflow_start()


if __name__ == "__main__":
    with _quiet_start():
        from keras_vit.commands.evaluate import evaluate_main
    evaluate_main()
