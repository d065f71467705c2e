"""Weights in and out: the official .npz layout (`npz`: read, write,
layout checks, position-embedding resizing), the model <-> array mapping
(`weights`), training run directories (`workdir`), `convert` (the
keras-vit-convert command) and `loader.load_model`, the one function that
turns any source (a workdir, a `.keras` file, an official `.npz`, a Hugging
Face / timm folder, `hf://ORG/NAME`, a released checkpoint's name) into a
model. `catalog` names the released checkpoints (`list_models`); `cache`
downloads them, and Hugging Face models, once.
"""
