"""config.json fields of the wrong type are refused in one line that names
the field (never a TypeError, ZeroDivisionError or numpy error from deep
inside the readers), and a seeded mutation run over both fixtures' fields
finds nothing but loads and such refusals."""

import json
import os
import random
import shutil

import pytest

import keras_vit
from keras_vit.errors import UsageError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "hub")


def _folder(tmp_path, fixture, edit):
    folder = tmp_path / fixture
    shutil.copytree(os.path.join(FIXTURES, fixture), folder)
    with open(folder / "config.json") as f:
        spec = json.load(f)
    edit(spec)
    with open(folder / "config.json", "w") as f:
        json.dump(spec, f)
    return str(folder)


def _set(path, value):
    def edit(spec):
        for key in path[:-1]:
            spec = spec.setdefault(key, {})
        spec[path[-1]] = value
    return edit


@pytest.mark.parametrize("fixture, path, value, named", [
    ("hf_vit_classifier", ("num_attention_heads",), 0, "num_attention_heads"),
    ("hf_vit_classifier", ("num_attention_heads",), "x",
     "num_attention_heads"),
    ("hf_vit_classifier", ("image_size",), "x", "image_size"),
    ("hf_vit_classifier", ("image_size",), 10**30, "image_size"),
    ("hf_vit_classifier", ("layer_norm_eps",), "x", "layer_norm_eps"),
    ("hf_vit_classifier", ("pooler_act",), [], "pooler_act"),
    ("hf_vit_classifier", ("num_attention_heads",), 5, "heads"),
    ("timm_vit", ("model_args",), 3, "model_args"),
    ("timm_vit", ("pretrained_cfg",), 3, "pretrained_cfg"),
    ("timm_vit", ("model_args", "img_size"), 10**30, "model_args.img_size"),
    ("timm_vit", ("model_args", "mlp_ratio"), "x", "model_args.mlp_ratio"),
    ("timm_vit", ("pretrained_cfg", "mean"), "x", "pretrained_cfg.mean"),
    ("timm_vit", ("model_args", "num_heads"), 5, "heads"),
])
def test_wrong_type_is_one_line(tmp_path, fixture, path, value, named):
    folder = _folder(tmp_path, fixture, _set(path, value))
    with pytest.raises(UsageError, match=named) as caught:
        keras_vit.load_model(folder)
    assert "\n" not in str(caught.value)
    assert "config.json" in str(caught.value)


def test_timm_config_without_model_args_is_refused_by_head_count(tmp_path):
    # With no model_args the registered architecture's head count is
    # taken; it does not divide this tiny model's width.
    folder = _folder(tmp_path, "timm_vit",
                     lambda spec: spec.pop("model_args"))
    with pytest.raises(UsageError, match="heads do not divide"):
        keras_vit.load_model(folder)


@pytest.mark.slow
def test_mutated_configs_load_or_are_refused(tmp_path):
    rng = random.Random(0)
    values = [None, [], {}, "x", -1, 0, 10**30, 1.5, float("nan"), True,
              [1, 2], {"a": 1}, "gelu", 3]
    outcomes = {"loaded": 0, "refused": 0}
    for fixture in ("hf_vit_classifier", "timm_vit"):
        with open(os.path.join(FIXTURES, fixture, "config.json")) as f:
            base = json.load(f)
        paths = []

        def walk(spec, prefix=()):
            for key, value in spec.items():
                paths.append(prefix + (key,))
                if isinstance(value, dict):
                    walk(value, prefix + (key,))
        walk(base)
        for i in range(25):
            path, value = rng.choice(paths), rng.choice(values)
            folder = _folder(tmp_path / f"{fixture}{i}", fixture,
                             _set(path, value))
            try:
                keras_vit.load_model(folder)
                outcomes["loaded"] += 1
            except UsageError as e:
                assert "\n" not in str(e), (path, value)
                outcomes["refused"] += 1
    assert outcomes["loaded"] > 0 and outcomes["refused"] > 0, outcomes
