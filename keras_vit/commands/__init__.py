"""The command lines, the top layer: `train` (train.py, keras-vit-train) and
`evaluate` (evaluate.py, keras-vit-evaluate), with the flags they share
(`flags`). The export, analysis and convert commands live with their
packages (`python -m keras_vit.export`, `python -m keras_vit.analysis`,
`keras_vit.checkpoint.convert`), which need nothing above them.
"""
