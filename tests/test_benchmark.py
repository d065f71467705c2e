"""The throughput harness: FLOP count, derived numbers, files it writes.

A smoke test of the harness on a tiny model, not a timed test: it checks
that every number the harness reports is consistent with the others and
that the JSON and markdown it writes are complete, never how fast anything
is.
"""

import json
import os
import shutil
import statistics
import subprocess
import sys

import keras
import pytest

import keras_vit
import keras_vit.attention

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
    # The class token alone in the last block: 9 of its 12 D^2 per token
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
    assert ("--mode must list some of train, train_jit, infer, infer_jit"
            in capsys.readouterr().err)
    with pytest.raises(SystemExit) as exit_:
        throughput.main(TINY_ARGS[:2] + [
            "--image_size", "36", "--patch_size", "8",
            "--output", str(tmp_path / "x"),
        ])
    assert exit_.value.code == 2
    assert "not divisible by patch size 8" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        throughput.main(["--variant", "R50+B/16", "--output", "x"])
    assert exit_.value.code == 2
    assert "hybrid" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.json")


# (script, arguments, what the one-line refusal says): each refused by
# the script's argument parsing, exit status 2, before any model is built.
BAD_ARGUMENTS = [
    ("throughput", ["--variant", "X/99"], "--variant 'X/99' is not a"),
    ("throughput", ["--patch_size", "0"], "--patch_size must be >= 1"),
    ("throughput", ["--num_heads", "5"], "--num_heads 5 does not divide"),
    ("throughput", ["--num_layers", "0"], "--num_layers must be >= 1"),
    ("throughput", ["--hidden_size", "-3"], "--hidden_size must be >= 1"),
    ("throughput", ["--mlp_dim", "0"], "--mlp_dim must be >= 1"),
    ("throughput", ["--steps", "-1"], "--steps must be >= 0"),
    ("throughput", ["--warmup", "-1"], "--warmup must be >= 0"),
    ("throughput", ["--rewarm", "-2"], "--rewarm must be >= 0"),
    ("throughput", ["--min_time", "0"], "--min_time: must be > 0 seconds"),
    ("throughput", ["--min_time", "nan"], "--min_time: must be > 0"),
    ("throughput", ["--min_time", "inf"], "--min_time: must be > 0 seconds "
     "and finite, got inf"),
    ("step_profile", ["--variant", "X/99"], "--variant 'X/99' is not a"),
    ("step_profile", ["--models", "foo"],
     "--models takes a comma-separated subset of keras_vit,keras_hub"),
    ("step_profile", ["--batch_size", "0"], "--batch_size must be >= 1"),
    ("step_profile", ["--steps", "0"], "--steps must be >= 1"),
    ("device_profile", ["--variant", "X/99"], "--variant 'X/99' is not a"),
    ("device_profile", ["--models", "keras_vit,foo"],
     "--models takes a comma-separated subset of keras_vit,keras_hub"),
    ("device_profile", ["--modes", "fit"],
     "--modes takes a comma-separated subset of train,infer"),
    ("device_profile", ["--patch_size", "0"], "--patch_size must be >= 1"),
    ("attention_kernels", ["--variant", "X/99"], "--variant 'X/99' is not"),
    ("attention_kernels", ["--candidates", "foo"],
     "--candidates takes a comma-separated subset of one_path,cudnn,"),
    ("attention_kernels", ["--modes", "foo"],
     "--modes takes a comma-separated subset of infer,train"),
    ("attention_kernels", ["--num_heads", "7"], "--num_heads 7 does not"),
    ("attention_kernels", ["--min_time", "-1"], "--min_time: must be > 0"),
    ("attention_kernels", ["--min_time", "x"],
     "--min_time: a number of seconds, got 'x'"),
    ("export_latency", ["--variant", "X/99"], "--variant 'X/99' is not a"),
    ("export_latency", ["--repeats", "0"], "--repeats must be >= 1"),
    ("export_latency", ["--batch_sizes", "2,x"],
     "--batch_sizes takes comma-separated whole numbers >= 1"),
    ("export_latency", ["--batch_sizes", "0"],
     "--batch_sizes takes comma-separated whole numbers >= 1"),
    ("augment_cost", ["--magnitude=-5"], "--magnitude must be >= 0"),
    ("multiworker_exit", ["--repeats", "0"], "--repeats must be >= 1"),
]


def _entry(script):
    """The function of benchmarks/SCRIPT.py that reads its arguments."""
    import importlib

    module = importlib.import_module(script)
    return getattr(module, "parse_args", None) or module.main


@pytest.mark.parametrize("script,argv,message", BAD_ARGUMENTS)
def test_bad_arguments_are_one_line_naming_the_flag(
        script, argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        _entry(script)(argv + ["--output", str(tmp_path / "x")])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "error: " in err.strip().splitlines()[-1]
    assert not os.listdir(tmp_path)


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
        throughput.parse_args(["--compare_tree", "x", "--output", "x"])
    with pytest.raises(SystemExit, match="holds no keras_vit package"):
        throughput.main(["--compare_tree", "x=/nonexistent",
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


def _part(mode, images_per_s, samples, note):
    """One child's result of a --process_per_config run (the fields that
    merge_results reads)."""
    return {
        "machine": {"cpu": "x", "load_average_end": [float(samples[0])]},
        "sizes": {}, "keras_hub": "0.1", "forward_flops_per_image": 1e9,
        "forward_flops_per_image_all_tokens": 2e9,
        "ceiling": {"float32": {"flops_per_s": statistics.median(samples),
                                "samples": samples,
                                "flops_per_cpu_s": 1.0,
                                "cpu_samples": [1.0] * len(samples),
                                "size": 64}},
        "rows": [{"backend": "jax", "model": m, "mode": mode, "xla": True,
                  "images_per_s": ips, "cpu_s_per_image": 1 / ips}
                 for m, ips in (("keras_vit", images_per_s),
                                ("keras_hub", images_per_s / 2))],
        "notes": ["keras-hub says hello", note],
    }


def test_each_configuration_runs_in_its_own_process(monkeypatch):
    """--process_per_config: one child per (mode, XLA setting), given what
    is left of the deadline; the rows merged in order, against one matmul
    ceiling over every child's samples; a failed child said and counted,
    a configuration past the deadline skipped."""
    calls = []
    parts = {"train": _part("train", 10.0, [100e9, 300e9], "a"),
             "infer": _part("infer", 40.0, [200e9], "b")}

    def run_script(script, argv, env=None):
        calls.append((os.path.basename(script), list(argv)))
        mode = argv[argv.index("--mode", len(argv) - 6) + 1]
        return parts.get(mode, {"error": "exit code 1"})

    monkeypatch.setattr(throughput, "run_script", run_script)
    argv = TINY_ARGS + ["--mode", "train,infer_jit,infer", "--xla", "on",
                        "--deadline", "100", "--jax",
                        "--process_per_config", "--output", "x"]
    args = throughput.parse_args(argv)
    monkeypatch.setattr(throughput, "START", throughput.time.monotonic())
    result = throughput.run_per_config(argv, args)
    assert [c[0] for c in calls] == ["throughput.py"] * 3
    for (_, child), mode in zip(calls, ("train", "infer_jit", "infer")):
        assert "--process_per_config" not in child and "--jax" not in child
        # The child's own configuration comes last, so argparse takes it.
        assert child[-6:-1] == ["--mode", mode, "--xla", "on", "--deadline"]
        assert 99 < float(child[-1]) <= 100
    assert [(r["mode"], r["model"]) for r in result["rows"]] == [
        ("train", "keras_vit"), ("train", "keras_hub"),
        ("infer", "keras_vit"), ("infer", "keras_hub")]
    ceiling = result["ceiling"]["float32"]
    assert ceiling["samples"] == [100e9, 300e9, 200e9]
    assert ceiling["flops_per_s"] == 200e9
    train, _, infer, _ = result["rows"]  # MFU against the merged ceiling
    assert train["mfu"] == pytest.approx(3e9 * 10 / 200e9)
    assert infer["mfu"] == pytest.approx(1e9 * 40 / 200e9)
    assert train["vs_keras_hub"] == infer["vs_keras_hub"] == 2.0
    assert result["machine"]["load_average_end"] == [200e9]  # the last
    assert result["notes"] == [
        "keras-hub says hello", "a", "b",
        "infer_jit xla=True: its process failed (exit code 1)"]
    assert result["failed_configs"] == 1
    # Past the deadline, what is left is skipped (the first still runs).
    calls.clear()
    monkeypatch.setattr(throughput, "START",
                        throughput.time.monotonic() - 1000)
    result = throughput.run_per_config(argv, args)
    assert len(calls) == 1 and calls[0][1][-1] == "0.001"
    assert [n for n in result["notes"] if "skipped" in n] == [
        "infer_jit xla=True: skipped, --deadline 100 s passed",
        "infer xla=True: skipped, --deadline 100 s passed"]
    # Refused in this process (its argument parsing), not in each child.
    calls.clear()
    with pytest.raises(SystemExit) as exit_:
        throughput.main(TINY_ARGS[:2] + [
            "--image_size", "36", "--patch_size", "8",
            "--process_per_config", "--output", "x"])
    assert exit_.value.code == 2 and not calls


def test_the_library_attention_of_a_run_is_recorded(monkeypatch):
    """A run records whether keras_vit took cuDNN's fused attention by the
    library's own rule: never off JAX, and on JAX where its check says."""
    args = throughput.parse_args(TINY_ARGS + ["--dtype", "bfloat16",
                                              "--output", "x"])
    monkeypatch.setattr(keras_vit.attention, "fused_attention", None)
    assert throughput.library_attention(TINY, args) == "one_path"

    class Rule:
        @staticmethod
        def usable(dtype, head_dim):
            return (dtype, head_dim) == ("bfloat16", 16)

    monkeypatch.setattr(keras_vit.attention, "fused_attention", Rule)
    assert throughput.library_attention(TINY, args) == "fused"
    args.dtype = "float32"
    assert throughput.library_attention(TINY, args) == "one_path"


class _Compiled:
    def __init__(self, text):
        self.text = text

    def as_text(self):
        if self.text is None:
            raise RuntimeError("no text")
        return self.text


def test_cudnn_attention_calls_are_counted_in_the_compiled_step():
    with open(os.path.join(ROOT, "tests", "fixtures", "hlo",
                           "gpu_train_step.txt"), encoding="utf-8") as f:
        module = f.read()
    count = throughput.cudnn_attention_calls
    assert count(_Compiled(module)) == {"__cudnn$fmhaSoftmax": 1}
    backward = module.replace("fmhaSoftmax", "fmhaSoftmaxBackward")
    assert count(_Compiled(module + backward)) == {
        "__cudnn$fmhaSoftmax": 1, "__cudnn$fmhaSoftmaxBackward": 1}
    assert count(_Compiled("HloModule m\n")) == {}  # none: the portable path
    assert count(_Compiled(None)) is None  # unknown


_TRAIN_JIT = """
import os, sys
os.environ["KERAS_BACKEND"] = "jax"
sys.path[:0] = [sys.argv[1], os.path.join(sys.argv[1], "benchmarks")]
import argparse
import keras, numpy as np
import throughput

args = argparse.Namespace(batch_size=2, image_size=32, num_classes=10)
dims = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
            mlp_dim=64)
import keras_vit
a = keras_vit.create_model(None, num_classes=10, image_size=32, **dims)
b = keras_vit.create_model(None, num_classes=10, image_size=32, **dims)
b.set_weights(a.get_weights())
initial = [v.numpy() for v in a.trainable_variables]
recorder = throughput.CompiledMemory()
train = throughput.make_step(a, "train", True, args)
train_jit = throughput.make_step(b, "train_jit", True, args, recorder)
for _ in range(2):
    train()
    train_jit()
assert recorder.plan["temp"] > 0, recorder.plan
assert recorder.cudnn_attention == {}, recorder.cudnn_attention
# The compiled step's state, after two steps, is Keras's.
got = train_jit.state[0][0]
want = [v.numpy() for v in a.trainable_variables]
worst = max(float(np.max(np.abs(np.asarray(g) - w)))
            for g, w in zip(got, want))
moved = max(float(np.max(np.abs(w - i))) for w, i in zip(want, initial))
assert worst <= 1e-6 and moved > 1e-4, (worst, moved)  # lr 1e-4, 2 steps
print("ok", worst, moved)
"""


@pytest.mark.slow
def test_train_jit_takes_the_step_train_on_batch_takes(tmp_path):
    """--mode train_jit: the compiled step with its state on the device
    updates the weights as Keras's train_on_batch does (two AdamW steps,
    float32, on the CPU under JAX), and its memory plan is recorded."""
    script = tmp_path / "train_jit.py"
    script.write_text(_TRAIN_JIT)
    proc = subprocess.run([sys.executable, str(script), ROOT],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, KERAS_BACKEND="jax"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().startswith("ok")
