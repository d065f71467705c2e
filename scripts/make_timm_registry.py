"""Writes keras_vit/checkpoint/hub/timm_registry.py: what each architecture
name of timm's `vision_transformer` and `deit` modules passes to
`VisionTransformer`, read from timm itself.

    pip install -e ".[hub_reference]"   # torch, torchvision, transformers, timm
    python scripts/make_timm_registry.py

A timm folder's config.json names its architecture and gives, in
`model_args`, only the arguments its maker passed; timm builds the rest
from the name's registration. keras_vit reads a folder the same way, so it
needs every name's registered arguments: each entrypoint is called with
timm's model factory replaced by one that records its arguments.
"""

from __future__ import annotations

import argparse
import functools
import json
import os

from keras_vit.storage.atomic import atomic_write

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "keras_vit", "checkpoint", "hub",
                      "timm_registry.py")
HEADER = '''"""The arguments each timm `vision_transformer` / `deit`
architecture name passes to `VisionTransformer` (timm {version}), written by
scripts/make_timm_registry.py: do not edit by hand.

`ARCHITECTURES[name]` is (num_heads, arguments), the arguments beyond the
sizes (patch_size, embed_dim, depth, mlp_ratio), img_size included where
the entrypoint passes one (timm builds that size when model_args give
none); values that are not JSON (a layer class, a partial) are kept as
their names, which keras_vit refuses by name. `distilled: True` marks
DeiT's VisionTransformerDistilled.
"""

TIMM_VERSION = {version!r}

_GROUPS = [
'''
# The sizes the arrays' shapes give (checked against them). img_size is
# kept: a few entrypoints pass one (beit3_giant_patch14_336: 336), and
# timm builds it before pretrained_cfg's input_size.
SIZES = {"patch_size", "embed_dim", "depth", "mlp_ratio", "num_heads"}


class _Recorded(Exception):
    pass


def record():
    """{name: kwargs} for every registered name of the two modules."""
    import timm
    from timm.models import deit, vision_transformer

    found = {}

    def factory(variant, pretrained=False, **kwargs):
        found[variant] = kwargs
        raise _Recorded

    vision_transformer._create_vision_transformer = factory
    deit._create_deit = factory
    for module in (vision_transformer, deit):
        for name in timm.list_models(module=module.__name__.split(".")[-1]):
            try:
                getattr(module, name)()
            except _Recorded:
                pass
    return timm.__version__, found


def _plain(value):
    """A JSON value as it is; a layer class or partial as a short name."""
    if isinstance(value, (bool, int, float, str, type(None))):
        return value
    if isinstance(value, functools.partial):
        args = ", ".join(f"{k}={_plain(v)}" for k, v in value.keywords.items())
        return f"{_plain(value.func)}({args})"
    return getattr(value, "__name__", repr(value))


def build_parser() -> argparse.ArgumentParser:
    """No options: the registry is read from the installed timm."""
    return argparse.ArgumentParser(description=__doc__.split("\n")[0])


def main() -> None:
    build_parser().parse_args()
    version, found = record()
    groups = {}
    for name, kwargs in sorted(found.items()):
        rest = {k: _plain(v) for k, v in sorted(kwargs.items())
                if k not in SIZES}
        key = json.dumps(rest, sort_keys=True)
        groups.setdefault(key, []).append((name, kwargs["num_heads"]))
    lines = [HEADER.format(version=version)]
    for key, names in groups.items():
        args = json.loads(key)
        if len(f"    ({args!r}, {{") <= 79:
            lines.append(f"    ({args!r}, {{\n")
        else:
            lines.append("    ({\n")
            lines.extend(f"        {k!r}: {v!r},\n" for k, v in args.items())
            lines.append("    }, {\n")
        row = "       "
        for n, h in names:
            item = f" {n!r}: {h},"
            if len(row) + len(item) > 79:
                lines.append(row + "\n")
                row = "       "
            row += item
        lines.append(row + "\n")
        lines.append("    }),\n")
    lines.append("]\n\nARCHITECTURES = {\n"
                 "    name: (heads, args)\n"
                 "    for args, names in _GROUPS for name, heads in "
                 "names.items()\n}\n")
    atomic_write(TARGET, "".join(lines))
    print(f"wrote {TARGET}: {len(found)} names, {len(groups)} groups")


if __name__ == "__main__":
    main()
