"""The run configs shipped with the package: `--config=NAME` (e.g.
`keras-vit-train --config=digits`) loads keras_vit/configs/NAME.py; each
file's `get_config(arg)` returns a locked config over
`keras_vit.config.base_config()`. The top-level `configs/` of a source
checkout is this folder."""
