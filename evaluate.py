r"""Evaluates a Vision Transformer: plain accuracy, few-shot, VTAB-1k.

    python evaluate.py --mode=eval --workdir=/tmp/vit_digits
    python evaluate.py --mode=fewshot --config=configs/fewshot.py \
        --npz=ViT-B_16.npz --output_dir=/tmp/fewshot_b16
    python evaluate.py --mode=vtab --config=configs/vtab.py \
        --npz=ViT-L_16.npz --variant=L/16 --output_dir=/tmp/vtab_l16

See keras_vit/commands/evaluate.py for every flag.
"""

from keras_vit.commands.evaluate import evaluate_main

if __name__ == "__main__":
    evaluate_main()
