"""The throughput harness: FLOP count, derived numbers, files it writes.

A smoke test of the harness on a tiny model, not a timed test: it checks
that every number the harness reports is consistent with the others and
that the JSON and markdown it writes are complete, never how fast anything
is.
"""

import json
import os
import shutil
import subprocess
import sys

import keras
import pytest

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import throughput  # noqa: E402

TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
            mlp_dim=64)
TINY_ARGS = [
    "--variant", "Ti/16", "--image_size", "32", "--patch_size", "8",
    "--hidden_size", "32", "--num_layers", "2", "--num_heads", "2",
    "--mlp_dim", "64", "--num_classes", "10", "--batch_size", "2",
    "--repeats", "2", "--steps", "1", "--warmup", "1",
    "--matmul_size", "64", "--matmul_repeats", "2",
]


def _macs_from_weights(model, tokens, patches):
    """Multiply-adds counted from the built model's own kernels."""
    encoder = model.get_layer("Transformer")
    blocks = encoder.blocks
    last = blocks[-1].path + "/"
    queries = 1 if encoder.class_token_only else tokens
    macs = 0
    for w in model.weights:
        if not w.path.endswith("kernel"):
            continue
        shape = tuple(w.shape)
        if len(shape) == 4:  # patch projection, applied once per patch
            macs += patches * shape[0] * shape[1] * shape[2] * shape[3]
        elif w.path.startswith("head"):  # one pooled token
            macs += shape[0] * shape[1]
        elif "qkv" in w.path or not w.path.startswith(last):
            macs += tokens * shape[0] * shape[1]  # every token
        else:  # the last block's other layers: its query tokens only
            macs += queries * shape[0] * shape[1]
    width = blocks[0].mlp2.units
    attention = 2 * tokens * width  # QK^T and AV, per query token
    return macs + ((len(blocks) - 1) * tokens + queries) * attention


@pytest.mark.parametrize(
    "image_size, pooling, all_tokens",
    [(32, "token", False), (32, "token", True), (48, "gap", False)],
)
def test_forward_flops_match_the_models_kernels(image_size, pooling,
                                                all_tokens):
    model = keras_vit.create_model(
        None, num_classes=10, image_size=image_size, pooling=pooling,
        all_tokens=all_tokens, **TINY
    )
    patches = (image_size // 8) ** 2
    tokens = patches + (pooling == "token")
    expected = _macs_from_weights(model, tokens, patches)
    got = throughput.forward_flops(
        image_size=image_size, num_classes=10,
        class_token=pooling == "token",
        last_block_class_token_only=not all_tokens, **TINY
    )
    assert got == 2 * expected


def test_forward_flops_of_b16_match_the_paper():
    flops = throughput.forward_flops(
        image_size=224, patch_size=16, hidden_size=768, num_layers=12,
        mlp_dim=3072, num_classes=1000,
    )
    # 17.6 GMAC per image (paper Table 6); norms, softmax etc. not counted.
    assert flops / 2 == pytest.approx(17.6e9, rel=0.005)
    pruned = throughput.forward_flops(
        image_size=224, patch_size=16, hidden_size=768, num_layers=12,
        mlp_dim=3072, num_classes=1000, last_block_class_token_only=True,
    )
    # The class token alone in the last block: 10 of its 12 D^2 per token
    # and its N^2 attention are skipped, 6.3% of the forward pass.
    skipped = 196 * (768 * 768 * 9 + 2 * 197 * 768)
    assert (flops - pruned) / 2 == skipped


def test_derived_numbers_and_ratio():
    result = {
        "forward_flops_per_image": 1e9,
        "ceiling": {"float32": {"flops_per_s": 100e9,
                                "flops_per_cpu_s": 50e9}},
        "rows": [
            {"backend": "tensorflow", "model": m, "mode": mode, "xla": False,
             "images_per_s": ips, "cpu_s_per_image": 4 / ips}
            for m, mode, ips in (
                ("keras_vit", "infer", 50.0), ("keras_hub", "infer", 40.0),
                ("keras_vit", "train", 10.0), ("keras_hub", "train", 8.0),
            )
        ],
    }
    throughput.add_derived(result, "float32")
    vit_infer, hub_infer, vit_train, _ = result["rows"]
    assert vit_infer["mfu"] == pytest.approx(0.5)
    assert vit_train["model_flops_per_s"] == pytest.approx(30e9)  # 3x fwd
    assert vit_infer["vs_keras_hub"] == pytest.approx(1.25)
    assert vit_train["vs_keras_hub"] == pytest.approx(1.25)
    assert vit_infer["mfu_cpu"] == pytest.approx(1e9 / 0.08 / 50e9)
    assert vit_train["vs_keras_hub_cpu"] == pytest.approx(1.25)
    assert "vs_keras_hub" not in hub_infer


@pytest.mark.slow
def test_harness_writes_consistent_json_and_markdown(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # as if absent
    prefix = str(tmp_path / "tiny")
    throughput.main(TINY_ARGS + [
        "--xla", "both", "--mode", "train,infer", "--compare_keras_hub",
        "--output", prefix,
    ])
    with open(prefix + ".json") as f:
        result = json.load(f)
    rows = result["rows"]
    assert [(r["mode"], r["xla"]) for r in rows] == [
        ("train", False), ("train", True), ("infer", False), ("infer", True)
    ]
    params = keras_vit.create_model(
        None, num_classes=10, image_size=32, **TINY
    ).count_params()
    ceiling = result["ceiling"]["float32"]
    # before and after the models, per wall and per CPU second
    assert len(ceiling["samples"]) == len(ceiling["cpu_samples"]) == 4
    for r in rows:
        assert r["model"] == "keras_vit" and r["params"] == params
        assert len(r["seconds"]) == 2 and min(r["seconds"]) > 0
        median_step = sum(r["seconds"]) / 2  # median of two, 1 step each
        assert r["images_per_s"] == pytest.approx(2 / median_step)
        flops = result["forward_flops_per_image"] * (
            3 if r["mode"] == "train" else 1
        )
        assert r["mfu"] == pytest.approx(
            flops * r["images_per_s"] / ceiling["flops_per_s"]
        )
        median_cpu = sum(r["cpu_seconds"]) / 2
        assert r["cpu_s_per_image"] == pytest.approx(median_cpu / 2)
        assert r["mfu_cpu"] == pytest.approx(
            flops / r["cpu_s_per_image"] / ceiling["flops_per_cpu_s"]
        )
        assert r["peak_rss_mb"] > 0
    assert result["keras_hub"] is None
    assert any("keras-hub is not installed" in n for n in result["notes"])
    assert result["machine"]["cores"] == os.cpu_count()
    with open(prefix + ".md") as f:
        text = f.read()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + len(rows)  # header + one row per measurement
    assert "| tensorflow | keras_vit | train | off |" in text
    assert "Matmul ceiling (tensorflow, float32, 64^3)" in text
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


_WITHOUT_TENSORFLOW = """
import importlib.abc, os, runpy, sys
os.environ["KERAS_BACKEND"] = "jax"

class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_datasets"):
            raise ImportError("TensorFlow is not installed here: " + name)

sys.meta_path.insert(0, _NoTensorFlow())
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "benchmarks")]
sys.argv = sys.argv[1:]
runpy.run_path(os.path.join(sys.argv[0], "benchmarks", "throughput.py"),
               run_name="__main__")
assert "tensorflow" not in sys.modules
"""


@pytest.mark.slow
def test_harness_runs_under_jax_without_tensorflow(tmp_path):
    # The GPU machines have JAX but not TensorFlow: the harness, the model
    # and bfloat16 must work there with TensorFlow unimportable.
    runner = tmp_path / "run.py"
    runner.write_text(_WITHOUT_TENSORFLOW)
    prefix = str(tmp_path / "jax")
    env = dict(os.environ, KERAS_BACKEND="jax")
    subprocess.run(
        [sys.executable, str(runner), ROOT] + TINY_ARGS + [
            "--xla", "on", "--mode", "train,infer", "--dtype", "bfloat16",
            "--output", prefix,
        ],
        check=True, env=env, cwd=str(tmp_path), timeout=600,
    )
    with open(prefix + ".json") as f:
        result = json.load(f)
    assert [(r["backend"], r["mode"], r["dtype"]) for r in result["rows"]] == [
        ("jax", "train", "bfloat16"), ("jax", "infer", "bfloat16")
    ]
    # MFU in bfloat16 is against the measured bfloat16 matmul ceiling.
    assert set(result["ceiling"]) == {"float32", "bfloat16"}
    bf16 = result["ceiling"]["bfloat16"]["flops_per_s"]
    for r in result["rows"]:
        flops = result["forward_flops_per_image"] * (
            3 if r["mode"] == "train" else 1
        )
        assert r["mfu"] == pytest.approx(flops * r["images_per_s"] / bf16)


def test_bad_arguments_name_the_fix(tmp_path, capsys):
    with pytest.raises(SystemExit):
        throughput.parse_args(["--mode", "fit", "--output", "x"])
    assert "--mode must list some of train, infer, infer_jit" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit, match="not divisible by patch size 8"):
        throughput.main(TINY_ARGS[:2] + [
            "--image_size", "36", "--patch_size", "8",
            "--output", str(tmp_path / "x"),
        ])
    with pytest.raises(SystemExit, match="hybrid"):
        throughput.main(["--variant", "R50+B/16", "--output", "x"])


@pytest.mark.slow
def test_compare_tree_times_another_checkout_beside_ours(
    tmp_path, monkeypatch
):
    """`--compare_tree NAME=DIR` builds the model with the keras_vit of
    DIR, interleaved with ours and reported as NAME, and leaves this
    process's keras_vit in place."""
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # as if absent
    other = tmp_path / "other"
    shutil.copytree(os.path.join(ROOT, "keras_vit"), other / "keras_vit")
    marker = "\n\nTREE_MARKER = 1\n"
    (other / "keras_vit" / "model.py").write_text(
        (other / "keras_vit" / "model.py").read_text() + marker
    )
    prefix = str(tmp_path / "tree")
    throughput.main(TINY_ARGS + [
        "--xla", "off", "--mode", "infer", "--compare_keras_hub",
        "--compare_tree", f"copy={other}", "--output", prefix,
    ])
    with open(prefix + ".json") as f:
        result = json.load(f)
    rows = {r["model"]: r for r in result["rows"]}
    assert sorted(rows) == ["copy", "keras_vit"]
    assert rows["copy"]["params"] == rows["keras_vit"]["params"]
    assert len(rows["copy"]["seconds"]) == 2
    assert f"copy: keras_vit from {other}" in result["notes"]
    create = throughput.import_tree(str(other))
    assert create.__globals__["TREE_MARKER"] == 1
    assert not hasattr(sys.modules["keras_vit.model"], "TREE_MARKER")
    assert sys.modules["keras_vit"] is keras_vit
    # Keras's registry still names this package's classes: a model saved
    # and loaded later in this process is built from them.
    ours = {name: cls for name, cls in keras.saving.get_custom_objects()
            .items() if name.startswith("keras_vit")}
    assert ours
    for cls in ours.values():
        assert getattr(sys.modules[cls.__module__], cls.__name__) is cls
    with pytest.raises(SystemExit):
        throughput.parse_args(["--compare_tree", "x=/nonexistent",
                               "--output", "x"])


LOOP_ARGS = [
    "--config=configs/digits.py", "--config.model.hidden_size=32",
    "--config.model.mlp_dim=64", "--config.model.num_layers=1",
    "--config.input.batch_size=16", "--config.trainer.jit_compile=False",
    "--steps=2", "--repeats=1",
]


def _loop_overhead(*args, cwd):
    script = os.path.join(ROOT, "benchmarks", "loop_overhead.py")
    return subprocess.run(
        [sys.executable, script, *LOOP_ARGS, *args], cwd=cwd,
        capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow
def test_loop_overhead_harness_writes_consistent_results(tmp_path):
    prefix = str(tmp_path / "loop")
    proc = _loop_overhead("--steps_per_loop=2,1", f"--output={prefix}",
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(prefix + ".json") as f:
        result = json.load(f)
    assert [r["steps_per_loop"] for r in result["rows"]] == [1, 2]
    for row in result["rows"]:
        s = {k: v[0] for k, v in row["samples_s_per_step"].items()}
        assert len(s) == 6 and min(s.values()) > 0  # one repeat each
        assert row["step_ms"]["bare"] == pytest.approx(1000 * s["bare"])
        # The host loop contains its train calls.
        assert s["host_loop"] >= s["train_calls"]
        assert row["in_graph_loop_overhead"] == pytest.approx(
            s["trainer"] / s["bare"] - 1
        )
        assert row["host_loop_overhead"] == pytest.approx(
            s["host_loop"] / s["train_calls"] - 1
        )
        assert 1 + row["total_overhead"] == pytest.approx(
            (1 + row["in_graph_loop_overhead"])
            * (1 + row["host_loop_overhead"])
        )
        assert row["input_pipeline_cost"] == pytest.approx(
            s["input_host_loop"] / s["host_loop"] - 1
        )
    assert result["config"]["model"]["hidden_size"] == 32
    with open(prefix + ".md") as f:
        table = [ln for ln in f if ln.startswith("| ")]
    assert len(table) == 1 + 2 and table[1].startswith("| 1 | ")


@pytest.mark.slow
def test_loop_overhead_bad_flags_name_the_fix(tmp_path):
    proc = _loop_overhead("--steps_per_loop=ten", f"--output={tmp_path}/x",
                          cwd=ROOT)
    assert proc.returncode != 0
    assert "--steps_per_loop takes integers" in proc.stderr
