"""configs/digits.py shrunk for tests: a 1-layer ViT of width 32 that trains
in seconds. `settings` and `overrides` take dotted field names
("optimizer.lr")."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def digits_config(settings=None, **overrides):
    sys.path.insert(0, os.path.join(ROOT, "configs"))
    try:
        import digits
    finally:
        sys.path.pop(0)
    config = digits.get_config()
    config.model.hidden_size = 32
    config.model.mlp_dim = 64
    config.model.num_layers = 1
    config.batch_size = 32
    config.jit_compile = False
    for key, value in {**(settings or {}), **overrides}.items():
        target = config
        *path, leaf = key.split(".")
        for part in path:
            target = target[part]
        target[leaf] = value
    return config
