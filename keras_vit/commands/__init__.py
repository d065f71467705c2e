"""The six command lines, the top layer: keras-vit-train (`train`, also
`python train.py`), keras-vit-evaluate (`evaluate`, also
`python evaluate.py`), keras-vit-export (`export`), keras-vit-convert
(`convert`), keras-vit-analysis (`analysis`) and keras-vit-predict
(`predict`). All take absl flags defined once in `flags` (`--model`,
`--verbose`, `--config`, ...) and share one entry point with one error
policy (`runner.run`).
"""
