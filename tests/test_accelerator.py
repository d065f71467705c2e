"""The GPU measurement (benchmarks/accelerator.sh) and what it adds to the
throughput harness: the `dot_product_attention` candidate, the device
memory fields and the deadline.

The GPU machines it is made for have JAX but no TensorFlow and no network,
and their time is short: so the whole command runs here at tiny sizes on
the CPU, under the JAX backend with TensorFlow made unimportable, and the
JSON files it writes must hold every field that the documentation's GPU
tables read. Nothing here asserts how fast anything is.
"""

import json
import os
import statistics
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

import keras_vit
import keras_vit.layers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import throughput  # noqa: E402

from tests.test_results_tables import _load_script  # noqa: E402

tables = _load_script()

TINY = dict(patch_size=8, hidden_size=32, num_layers=2, num_heads=2,
            mlp_dim=64)
RUNS = {  # accelerator.sh's runs: does it time keras_vit_one_path?
    "b16_224_b128_bf16": True, "l16_224_b64_bf16": False,
    "b16_384_b32_bf16": True,
}
ROW_FIELDS = (
    "backend", "model", "mode", "xla", "dtype", "batch_size", "image_size",
    "params", "compile_s", "steps_per_repeat", "seconds", "images_per_s",
    "images_per_s_all", "step_ms", "model_flops_per_s", "mfu",
    "peak_rss_mb", "xla_memory", "xla_step_bytes",
    "xla_temp_bytes_per_example", "device_peak_bytes",
    "device_peak_bytes_per_example", "device_peak_exact",
    "device_bytes_limit",
)


def _swapped(model, attention):
    """The attention layers of `model`, each an `attention`, one per
    block; the library's own class put back after the build."""
    assert keras_vit.layers.MultiHeadSelfAttention is (
        keras_vit.MultiHeadSelfAttention)
    swapped = [layer for layer in model._flatten_layers()
               if isinstance(layer, keras_vit.MultiHeadSelfAttention)]
    assert len(swapped) == TINY["num_layers"]
    assert all(type(layer) is attention for layer in swapped)
    return swapped


def test_dpa_model_computes_what_the_library_computes():
    """keras_vit_dpa: the same weights and outputs as keras_vit, with
    `dot_product_attention` in every attention layer (the last block's
    class-token-only query too), and the library's class put back."""
    ours = keras_vit.create_model(None, num_classes=10, image_size=32,
                                  **TINY)
    dpa = throughput.create_dpa_model(None, num_classes=10, image_size=32,
                                      **TINY)
    swapped = _swapped(dpa, throughput.DotProductSelfAttention)
    assert not any(isinstance(layer, throughput.DotProductSelfAttention)
                   for layer in ours._flatten_layers())
    assert dpa.count_params() == ours.count_params()
    dpa.set_weights(ours.get_weights())
    images = np.random.default_rng(0).uniform(
        -1, 1, (3, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(dpa(images)),
        keras.ops.convert_to_numpy(ours(images)), rtol=1e-5, atol=1e-5)
    # Every token querying, and the attention weights, which the fused op
    # does not give: from the library's computation.
    layer, ref = swapped[0], [
        x for x in ours._flatten_layers()
        if isinstance(x, keras_vit.MultiHeadSelfAttention)][0]
    tokens = np.random.default_rng(1).normal(
        size=(2, 17, 32)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(layer(tokens)),
        keras.ops.convert_to_numpy(ref(tokens)), rtol=1e-5, atol=1e-5)
    y, weights = layer(tokens, return_attention_scores=True)
    assert tuple(weights.shape) == (2, 2, 17, 17)


def test_one_path_model_never_takes_the_fused_attention(monkeypatch):
    """keras_vit_one_path: the same weights and outputs as keras_vit's
    portable path, also where the library's rule would send the attention
    to the fused kernel (here a stand-in kernel that answers zeros, so
    that taking it shows in the output)."""
    ours = keras_vit.create_model(None, num_classes=10, image_size=32,
                                  **TINY)
    one = throughput.create_one_path_model(None, num_classes=10,
                                           image_size=32, **TINY)
    _swapped(one, throughput.OnePathSelfAttention)
    assert one.count_params() == ours.count_params()
    rng = np.random.default_rng(2)  # the head starts at zero: not here
    ours.set_weights([rng.normal(0, 0.2, w.shape).astype("float32")
                      for w in ours.get_weights()])
    one.set_weights(ours.get_weights())
    images = np.random.default_rng(0).uniform(
        -1, 1, (3, 32, 32, 3)).astype("float32")
    portable = keras.ops.convert_to_numpy(ours(images))

    class ZeroKernel:  # the fused kernel's stand-in: usable everywhere
        calls = 0

        @staticmethod
        def usable(dtype, head_dim):
            return True

        @classmethod
        def attention(cls, q, k, v):
            cls.calls += 1
            return keras.ops.zeros_like(q)

    monkeypatch.setattr(keras_vit.attention, "fused_attention", ZeroKernel)
    fused = keras.ops.convert_to_numpy(ours(images))
    assert ZeroKernel.calls == 1  # every-token blocks; the last queries one
    assert not np.allclose(fused, portable, atol=1e-3)
    ZeroKernel.calls = 0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(one(images)),
                               portable, rtol=1e-5, atol=1e-5)
    assert ZeroKernel.calls == 0


def test_memory_fields_are_exact_only_where_the_peak_rose():
    plan = {"temp": 4000, "argument": 1000, "output": 900, "alias": 800,
            "generated_code": 0}
    before = {"bytes_in_use": 500, "peak_bytes_in_use": 3000}
    rose = {"bytes_in_use": 1500, "peak_bytes_in_use": 4500,
            "bytes_limit": 10**6}
    got = throughput.memory_fields(plan, before, rose, batch=4)
    assert got["xla_step_bytes"] == 4000 + 1000 + 900 - 800
    assert got["xla_temp_bytes_per_example"] == 1000
    assert got["device_peak_exact"] is True
    assert got["device_peak_bytes"] == 4000
    assert got["device_peak_bytes_per_example"] == 1000
    assert got["device_bytes_limit"] == 10**6
    # An earlier, higher peak hides this model's: no per-image figure.
    hidden = dict(rose, peak_bytes_in_use=3000)
    got = throughput.memory_fields(plan, before, hidden, batch=4)
    assert got["device_peak_exact"] is False
    assert got["device_peak_bytes_per_example"] is None
    # No counters (the CPU), no plan (another backend).
    got = throughput.memory_fields(None, None, None, batch=4)
    assert set(got) == set(ROW_FIELDS[-7:])
    assert all(v is None for v in got.values())


@pytest.mark.slow
def test_deadline_cuts_repeats_and_skips_what_is_left(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "keras_hub", None)  # as if absent
    prefix = str(tmp_path / "late")
    monkeypatch.setattr(throughput, "START", time.monotonic() - 100)
    throughput.main([
        "--variant", "Ti/16", "--image_size", "32", "--patch_size", "8",
        "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2",
        "--mlp_dim", "64", "--num_classes", "10", "--batch_size", "2",
        "--repeats", "3", "--steps", "1", "--warmup", "1",
        "--matmul_size", "64", "--matmul_repeats", "1", "--xla", "off",
        "--mode", "infer,train", "--compare_dpa", "--deadline", "50",
        "--output", prefix,
    ])
    with open(prefix + ".json") as f:
        result = json.load(f)
    # keras_vit's first configuration is kept with one repeat; the
    # candidate and the second configuration are skipped, and said so.
    assert [(r["model"], r["mode"]) for r in result["rows"]] == [
        ("keras_vit", "infer")]
    assert len(result["rows"][0]["seconds"]) == 1
    notes = " ".join(result["notes"])
    assert "keras_vit_dpa infer: skipped" in notes
    assert "after 1 of 3 repeats" in notes
    assert "train xla=False: skipped" in notes
    with pytest.raises(SystemExit):
        throughput.parse_args(["--deadline", "-1", "--output", "x"])


_NO_TENSORFLOW = """
import importlib.abc, sys

class _NoTensorFlow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("tensorflow", "tensorflow_text",
                                  "tensorflow_datasets"):
            raise ImportError("TensorFlow is not installed here: " + name)

sys.meta_path.insert(0, _NoTensorFlow())
"""


def run_accelerator(tmp_path, out, *options, log="accelerator.log",
                    timeout=1200):
    """`bash benchmarks/accelerator.sh --smoke --no-wheels OPTIONS OUT`
    under JAX with TensorFlow unimportable in every process; asserts it
    succeeded and returns its log (OUT/`log`)."""
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(_NO_TENSORFLOW)
    env = dict(os.environ, PYTHON=sys.executable, KERAS_BACKEND="jax",
               PYTHONPATH=str(guard))
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "accelerator.sh"),
         "--smoke", *options, "--no-wheels", str(out)],
        env=env, capture_output=True, text=True, timeout=timeout)
    text = (out / log).read_text()
    assert proc.returncode == 0, proc.stdout + text[-5000:]
    return text


@pytest.mark.slow
def test_device_path_imports_no_tensorflow(tmp_path):
    """What accelerator.sh runs of this project imports no TensorFlow
    under the JAX backend, even where TensorFlow is installed (as it is
    here). keras-hub is imported last: where it is installed with
    tensorflow-text (keras-hub 0.32 requires it), that loads TensorFlow
    itself, which the device machine does not have."""
    code = (
        "import sys\n"
        f"sys.path[:0] = [{ROOT!r}, {os.path.join(ROOT, 'benchmarks')!r}]\n"
        "import keras_vit, throughput\n"
        "print(sorted(m for m in sys.modules\n"
        "             if m.split('.')[0] == 'tensorflow'))\n"
        "try:\n"
        "    import keras_hub\n"
        "except ImportError:\n"
        "    pass\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax")
    proc = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=300,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[0] == "[]"


@pytest.mark.slow
def test_accelerator_command_end_to_end_at_tiny_sizes(tmp_path, monkeypatch):
    """`benchmarks/accelerator.sh --smoke`: the GPU command, run here on
    the CPU under JAX with TensorFlow unimportable in every process; its
    JSON files hold every field, and the documentation renders them."""
    out = tmp_path / "benchmarks" / "results" / "gpu"
    log = run_accelerator(tmp_path, out, timeout=1800)
    assert "no wheels installed" in log
    assert sorted(p for p in os.listdir(out) if p.endswith(".json")) == (
        sorted(f"{name}.json" for name in RUNS))
    hub = None
    for name, one_path in RUNS.items():
        with open(out / f"{name}.json") as f:
            result = json.load(f)
        assert (out / f"{name}.md").exists()
        assert result["machine"]["backend"] == "jax"
        assert result["args"]["deadline"] > 0
        assert set(result["ceiling"]) == {"float32", "bfloat16"}
        bf16 = result["ceiling"]["bfloat16"]["flops_per_s"]
        hub = result["keras_hub"]
        models = ["keras_vit"] + ["keras_vit_one_path"] * one_path + (
            ["keras_hub"] if hub else [])
        assert [(r["mode"], r["model"]) for r in result["rows"]] == [
            (mode, m) for mode in ("train", "infer") for m in models]
        assert result["args"]["process_per_config"] is True
        assert result["args"]["compare_one_path"] is one_path
        assert result["keras_vit_attention"] == "one_path"  # the CPU
        for r in result["rows"]:
            missing = [k for k in ROW_FIELDS if k not in r]
            assert not missing, (name, r["model"], missing)
            assert r["cudnn_attention"] == {}  # no cuDNN on the CPU
            assert (r["backend"], r["dtype"], r["xla"]) == (
                "jax", "bfloat16", True)
            plan = r["xla_memory"]
            assert plan["temp"] > 0 and plan["argument"] > 0, plan
            assert r["xla_temp_bytes_per_example"] == plan["temp"] / 2
            flops = (result["forward_flops_per_image_all_tokens"]
                     if r["model"] == "keras_hub"
                     else result["forward_flops_per_image"])
            flops *= 3 if r["mode"] == "train" else 1
            assert r["mfu"] == pytest.approx(flops * r["images_per_s"] / bf16)
            if r["model"] == "keras_vit_one_path":
                assert r["params"] == result["rows"][0]["params"]
                assert r["vs_keras_vit"] > 0
    # The documentation's GPU tables, from these files: each
    # configuration in its own process, keras_vit's attention as its
    # compiled steps recorded it (the one path, on the CPU), so no GPU
    # target reads these runs.
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    monkeypatch.setattr(tables, "targets", lambda: [])
    block = tables.gpu_throughput()
    for name in RUNS:
        assert f"| `{name}` | " in block
    assert block.count("| own process | keras_vit_one_path | one path |"
                       ) == 4
    assert block.count("| own process | keras_vit | one path |") == 6
    # The library against its one path, each B/16 run and mode (on the
    # CPU the library takes the one path too).
    attention = tables.gpu_attention()
    assert attention.count("| train |") == attention.count("| infer |") == 2
    assert attention.count("| the library: one path |") == 4
    gpu = tables.targets_table().split("\n\n")[1].splitlines()[2:]
    assert all(r.endswith("| not measured |") for r in gpu)


@pytest.mark.slow
def test_dpa_candidate_records_what_jax_says_of_cudnn(tmp_path):
    """`throughput.py --compare_dpa` under JAX: the candidate's rows, and
    what Keras's check and JAX itself say of cuDNN's attention for each
    query shape and mode (on this CPU JAX refuses, and says why)."""
    guard = tmp_path / "guard"
    guard.mkdir()
    (guard / "sitecustomize.py").write_text(_NO_TENSORFLOW)
    prefix = tmp_path / "dpa"
    env = dict(os.environ, KERAS_BACKEND="jax", PYTHONPATH=str(guard))
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "throughput.py"),
         "--variant", "Ti/16", "--image_size", "32", "--patch_size", "8",
         "--hidden_size", "32", "--num_layers", "1", "--num_heads", "2",
         "--mlp_dim", "64", "--num_classes", "10", "--batch_size", "2",
         "--repeats", "1", "--steps", "1", "--warmup", "1", "--rewarm", "0",
         "--matmul_size", "64", "--matmul_repeats", "1", "--xla", "on",
         "--dtype", "bfloat16", "--mode", "train,infer", "--compare_dpa",
         "--output", str(prefix)],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((tmp_path / "dpa.json").read_text())
    assert [(r["mode"], r["model"]) for r in result["rows"]] == [
        (m, name) for m in ("train", "infer")
        for name in ("keras_vit", "keras_vit_dpa")]
    flash = result["flash_attention_usable"]
    assert set(flash) == {"all_tokens", "class_token", "jax_cudnn"}
    for which in ("all_tokens", "class_token"):
        for mode in ("infer", "train"):
            verdict = flash["jax_cudnn"][which][mode]
            assert verdict["accepted"] is False, verdict
            assert "cuDNN" in verdict["reason"], verdict
    assert ("JAX asked for cuDNN attention, every token: infer refused "
            "(RuntimeError: cuDNN") in (tmp_path / "dpa.md").read_text()


@pytest.mark.slow
def test_inference_and_training_runs_end_to_end_at_tiny_sizes(
        tmp_path, monkeypatch):
    """`accelerator.sh --smoke --inference --training`: each call measured
    in its own process, Keras's calls beside the compiled ones, and the
    table of every GPU run renders them."""
    out = tmp_path / "benchmarks" / "results" / "gpu"
    run_accelerator(tmp_path, out, "--inference", "--training")
    modes = {"inference_b16_384_b32_bf16": ("infer", "infer_jit"),
             "inference_b16_224_b128_bf16": ("infer", "infer_jit"),
             "inference_b16_224_b1024_bf16": ("infer", "infer_jit"),
             "training_b16_224_b128_bf16": ("train", "train_jit"),
             "training_l16_224_b64_bf16": ("train", "train_jit")}
    assert sorted(p[:-5] for p in os.listdir(out) if p.endswith(".json")) \
        == sorted(modes)
    for name, want in modes.items():
        with open(out / f"{name}.json") as f:
            result = json.load(f)
        assert result["args"]["process_per_config"] is True
        ours = [r for r in result["rows"] if r["model"] == "keras_vit"]
        assert tuple(r["mode"] for r in ours) == want
        if name == "inference_b16_384_b32_bf16":  # beside the one path
            assert [r["mode"] for r in result["rows"]
                    if r["model"] == "keras_vit_one_path"] == list(want)
        bf16 = result["ceiling"]["bfloat16"]["flops_per_s"]
        for r in result["rows"]:
            assert r["cudnn_attention"] == {}
            flops = (result["forward_flops_per_image_all_tokens"]
                     if r["model"] == "keras_hub"
                     else result["forward_flops_per_image"])
            flops *= 3 if r["mode"].startswith("train") else 1
            assert r["mfu"] == pytest.approx(flops * r["images_per_s"] / bf16)
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    block = tables.gpu_throughput()
    for mode in ("infer", "infer_jit", "train", "train_jit"):
        assert f"| {mode} | own process | keras_vit | one path |" in block


@pytest.mark.slow
def test_xla_options_run_end_to_end_at_tiny_sizes(tmp_path, monkeypatch):
    """`accelerator.sh --smoke --xla-options`: the compiled training step
    under XLA's defaults and under each option, each in its own process
    with its XLA_FLAGS (XLA takes its GPU options on the CPU too), the
    options recorded in each result and compared in their table."""
    out = tmp_path / "benchmarks" / "results" / "gpu"
    # A result and a log stored under the names the run would write: kept,
    # and the run's own written beside them as NAME_run2.
    out.mkdir(parents=True)
    stored = out / "xla_default_b16_224_b128_bf16.json"
    stored.write_text('{"stored": true}')
    (out / "accelerator.log").write_text("an earlier run's log")
    run_accelerator(tmp_path, out, "--xla-options", log="accelerator_run2.log")
    assert (out / "accelerator.log").read_text() == "an earlier run's log"
    assert json.loads(stored.read_text()) == {"stored": True}
    stored.unlink()
    flags = {"default_run2": "", "cublaslt": "--xla_gpu_enable_cublaslt=true",
             "triton_gemm_any": "--xla_gpu_triton_gemm_any=true",
             "no_triton_gemm": "--xla_gpu_enable_triton_gemm=false"}
    names = {tag: (f"xla_{tag}_b16_224_b128_bf16" if tag != "default_run2"
                   else "xla_default_b16_224_b128_bf16_run2")
             for tag in flags}
    assert sorted(p[:-5] for p in os.listdir(out) if p.endswith(".json")) \
        == sorted(names.values())
    for tag, want in flags.items():
        with open(out / f"{names[tag]}.json") as f:
            result = json.load(f)
        assert result["machine"]["xla_flags"] == want
        assert [(r["model"], r["mode"]) for r in result["rows"]] == [
            ("keras_vit", "train_jit")]
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    block = tables.gpu_xla_options()
    for want in flags.values():
        assert f"| `{want or '(none)'}` | 1 |" in block


STORED_GPU = os.path.join(ROOT, "benchmarks", "results", "gpu")


def _stored(name):
    with open(os.path.join(STORED_GPU, f"{name}.json")) as f:
        return json.load(f)


def _gpu_folder(tmp_path, runs):
    """A benchmarks/results/gpu of `runs` ({name: result}) under tmp_path,
    and the results tables pointed at it."""
    gpu = tmp_path / "benchmarks" / "results" / "gpu"
    gpu.mkdir(parents=True)
    for name, run in runs.items():
        (gpu / f"{name}.json").write_text(json.dumps(run))
    return gpu


def test_xla_option_runs_are_compared_and_count_toward_no_target(
        monkeypatch, tmp_path):
    """`accelerator.sh --xla-options`' runs (xla_TAG_b16_224_b128_bf16):
    each option's median against the defaults' in their own table; only
    the run under XLA's defaults is read by the train_jit target."""
    stored = _stored("training_b16_224_b128_bf16_run2")
    runs = {}
    for tag, flags, scale in (("default", "", 1.0),
                              ("cublaslt", "--xla_gpu_enable_cublaslt=true",
                               1.1),
                              ("no_triton_gemm",
                               "--xla_gpu_enable_triton_gemm=false", 0.9)):
        run = json.loads(json.dumps(stored))
        run["machine"]["xla_flags"] = flags
        run["rows"] = [r for r in run["rows"] if r["mode"] == "train_jit"
                       and r["model"] == "keras_vit"]
        for row in run["rows"]:
            for field in ("images_per_s", "mfu", "model_flops_per_s"):
                row[field] *= scale
        runs[f"xla_{tag}_b16_224_b128_bf16"] = run
    _gpu_folder(tmp_path, runs)
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    assert tables.gpu_target_runs("B/16", 224, 128, "train_jit") == [
        "gpu/xla_default_b16_224_b128_bf16"]
    block = tables.gpu_xla_options()
    lines = block.splitlines()
    base = tables.gpu_row(runs["xla_default_b16_224_b128_bf16"],
                          "train_jit")["images_per_s"]
    assert lines[2].startswith(f"| `(none)` | 1 | {base:.0f} | ")
    assert lines[3].startswith("| `--xla_gpu_enable_cublaslt=true` | 1 |")
    assert lines[3].endswith("| 1.10x |")
    assert lines[4].endswith("| 0.90x |")
    assert "bash benchmarks/accelerator.sh --xla-options" in block


def test_gpu_tables_take_the_median_of_every_run(monkeypatch, tmp_path):
    """A rerun stored as NAME_runN joins NAME's row where keras_vit
    attended the same way: the tables give the median of every run and
    list each one, and the GPU targets read every run of the fused
    attention whose configuration came first in its process; the other
    scripts' files stay out of the throughput tables."""
    fused, one_path = (_stored("fused_b16_224_b128_bf16"),
                       _stored("b16_224_b128_bf16"))
    runs, speeds, mfus = {}, {}, {}
    for name, scale in (("fused_b16_224_b128_bf16", 1.0),
                        ("fused_b16_224_b128_bf16_run2", 0.5),
                        ("fused_b16_224_b128_bf16_run3", 0.75)):
        run = json.loads(json.dumps(fused))
        for row in run["rows"]:
            row["images_per_s"] *= scale
            row["mfu"] *= scale
            row["model_flops_per_s"] *= scale
        runs[name] = run
        speeds[name] = tables.gpu_row(run, "train")["images_per_s"]
        mfus[name] = tables.gpu_row(run, "train")["mfu"]
    asked = json.loads(json.dumps(one_path))
    asked["flash_attention_usable"]["jax_cudnn"] = {
        which: {"infer": {"accepted": True, "reason": ""},
                "train": {"accepted": False, "reason": "no"}}
        for which in ("all_tokens", "class_token")}
    runs.update({
        "b16_224_b128_bf16": one_path, "b16_224_b128_bf16_run2": asked,
        "attention_kernels_b16_224_b128": _stored(
            "attention_kernels_b16_224_b128"),
        "device_profile_b16_224_b128_bf16": _stored(
            "device_profile_b16_224_b128_bf16")})
    gpu = _gpu_folder(tmp_path, runs)
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    monkeypatch.setattr(tables, "targets", lambda: [])
    assert tables.gpu_groups() == {
        ("b16_224_b128_bf16", "one path"): [
            "b16_224_b128_bf16", "b16_224_b128_bf16_run2"],
        ("fused_b16_224_b128_bf16", "cuDNN fused"): sorted(speeds)}
    block = tables.gpu_throughput()
    train = [line for line in block.splitlines()
             if "| train | 1st | keras_vit | cuDNN fused |" in line]
    assert len(train) == 1, block  # one row for the three runs
    each = ", ".join(f"{speeds[n]:.1f}" for n in sorted(speeds))
    assert f"| {statistics.median(speeds.values()):.1f} | {each} |" in train[0]
    assert "| infer | 2nd | before | one path |" in block
    assert "attention_kernels" not in block and "device_profile" not in block
    gpu_rows = tables.targets_table().split("\n\n")[1].splitlines()
    mfu = [r for r in gpu_rows if r.startswith(
        "| B/16, 224, batch 128, training (`train_on_batch`): MFU")][0]
    assert mfu.count("(`gpu/fused_b16_224_b128_bf16") == 3
    assert f"**{tables.pct(statistics.median(mfus.values()))}** (" in mfu
    assert mfu.endswith("| not met |")
    # Inference came second in these runs: no predict_on_batch target run.
    predict = [r for r in gpu_rows if "`predict_on_batch`: MFU" in r][0]
    assert predict.endswith("| not measured |")
    # Runs that record the library's attention and each compiled step's
    # cuDNN calls: the record, not the name, says which. A run of the
    # fused library with each configuration in its own process counts for
    # predict_on_batch, its step's kernels whatever they were.
    clean = json.loads(json.dumps(fused))
    clean["args"]["process_per_config"] = True
    clean["keras_vit_attention"] = "fused"
    for row in clean["rows"]:
        row["cudnn_attention"] = (
            {"__cudnn$fmhaSoftmax": 11} if (row["model"], row["mode"]) == (
                "keras_vit", "train") else {})
    other = json.loads(json.dumps(clean))
    other["keras_vit_attention"] = "one_path"
    (gpu / "fused_b16_224_b128_bf16_run4.json").write_text(json.dumps(clean))
    (gpu / "fused_b16_224_b128_bf16_run5.json").write_text(json.dumps(other))
    groups = tables.gpu_groups()
    assert groups[("fused_b16_224_b128_bf16", "one path")] == [
        "fused_b16_224_b128_bf16_run5"]
    assert len(groups[("fused_b16_224_b128_bf16", "cuDNN fused")]) == 4
    gpu_rows = tables.targets_table().split("\n\n")[1].splitlines()
    predict = [r for r in gpu_rows if "`predict_on_batch`: MFU" in r][0]
    assert "(`gpu/fused_b16_224_b128_bf16_run4`)" in predict
    assert "_run5" not in predict
    block = tables.gpu_throughput()
    assert "| infer | own process | keras_vit | one path |" in block
    assert "| train | own process | keras_vit | cuDNN fused |" in block
    # The candidate table: JAX's answer from the one run that asked.
    attention = tables.gpu_attention()
    assert attention.count("| train |") == 1
    dpa = [r["vs_keras_vit"] for r in one_path["rows"]
           if r["model"] == "keras_vit_dpa"]
    assert f"**{dpa[0]:.3f}**" in attention
    assert "| infer yes, train no / infer yes, train no |" in attention
    (gpu / "b16_224_b128_bf16_run2.json").unlink()
    assert "| not asked |" in tables.gpu_attention()


def test_where_each_configuration_ran_in_its_process():
    run = _stored("onepath_inference_b16_224_b128_bf16")
    assert tables.place(run, "infer") == "1st"
    assert tables.place(run, "infer_jit") == "2nd"
    assert tables.first_in_process(run, "infer")
    assert not tables.first_in_process(run, "infer_jit")
    run["args"]["process_per_config"] = True
    assert tables.place(run, "infer_jit") == tables.OWN_PROCESS
    assert tables.first_in_process(run, "infer_jit")
    # Which attention each row timed, for the stored runs by their names.
    fused = _stored("fused_b16_224_b128_bf16")
    by_model = {r["model"]: tables.attention_of("fused_b16_224_b128_bf16", r)
                for r in fused["rows"]}
    assert by_model == {"keras_vit": "cuDNN fused", "before": "one path",
                        "keras_hub": "keras-hub's"}
    assert tables.attention_of(
        "b16_224_b128_bf16", {"model": "keras_vit"}) == "one path"
    assert "padded" in tables.attention_of(
        "onepath_dpa_b16_224_b128_bf16_train", {"model": "keras_vit_dpa"})
    kinds = {n: tables.gpu_kind(_stored(n)) for n in (
        "fused_b16_224_b128_bf16", "attention_kernels_b16_384_b32",
        "device_profile_b16_224_b128_bf16",
        "device_profile_cmdbuf_b16_224_b128_bf16")}
    assert list(kinds.values()) == [
        "throughput", "attention_kernels", "device_profile",
        "device_profile"]


def test_the_profile_block_states_what_the_stored_files_hold():
    """The GPU profile's derived figures, from the stored profile and the
    training run of the same code (train_on_batch and the compiled step,
    each in its own process)."""
    profile = _stored("device_profile_b16_224_b128_bf16")
    run = _stored("training_b16_224_b128_bf16")
    block = tables.gpu_profile()
    vit = profile["rows"][0]
    assert (vit["model"], vit["mode"]) == ("keras_vit", "train")
    op = vit["op_seconds_per_step"]
    step = tables.gpu_row(run, "train")["step_ms"] / 1e3
    jit = tables.gpu_row(run, "train_jit")["step_ms"] / 1e3
    assert f"{1e3 * op:.2f} ms of kernels per step" in block
    assert f"costs {1e3 * (step - jit):.1f} ms a step" in block
    assert f"still spends {1e3 * (jit - op):.1f} ms" in block
    flops = tables._forward_flops(profile["sizes"], 224, 1000)
    assert flops["total"] == run["forward_flops_per_image"]
    ceiling = run["ceiling"]["bfloat16"]["flops_per_s"]
    busy = 3 * 128 * flops["total"] / op / ceiling
    assert f"at {tables.pct(busy)} MFU of the measured ceiling" in block
    # Each model and mode was profiled in its own process; the convolution
    # is counted as matmul now.
    assert "| keras_vit | infer | own process | forward (the whole step) |" \
        in block
    assert "is counted as elementwise in this stored run" not in block
    hub = profile["rows"][1]
    assert (hub["model"], hub["mode"]) == ("keras_hub", "train")
    assert (f"{tables.ratio(hub['op_seconds_per_step'] / op)} keras_vit's"
            in block)
    # The earlier one-process profile and the command-buffer attempt.
    assert "took 0.164 ms in the training step profiled first" in block
    assert "4,945 of 4,975" in block
    # predict_on_batch's per-call cost, measured at both batches, each
    # call in its own process; the estimate at batch 128 from other runs
    # is no longer given once a stored run measures it.
    inference = tables.gpu_inference()
    for name in ("inference_b16_224_b1024_bf16",
                 "inference_b16_224_b128_bf16"):
        run = _stored(name)
        p, c = (tables.gpu_row(run, m)["step_ms"]
                for m in ("infer", "infer_jit"))
        assert (f"(`{name}`, batch {run['args']['batch_size']}, each call "
                f"in its own process): {p:.2f} ms per batch against the "
                f"compiled forward's {c:.2f} ms, {p - c:.1f} ms a call"
                ) in inference
    assert "estimated (no stored run measured" not in inference


def test_attention_kernel_table_gives_the_median_of_its_runs():
    """A rerun of attention_kernels.py stored as NAME_runN joins NAME's
    rows: one row per candidate, the median time, each run's time."""
    block = tables.gpu_attention_kernels()
    first = _stored("attention_kernels_b16_224_b128")
    second = _stored("attention_kernels_b16_224_b128_run2")
    a, b = first["rows"][0]["ms"], second["rows"][0]["ms"]
    assert (first["rows"][0]["mode"], first["rows"][0]["candidate"]) == (
        "infer", "one_path")
    assert f"| 224 (197), 128 | infer | `one_path` | **{(a + b) / 2:.3f}** " \
        f"({a:.3f}, {b:.3f}) |" in block
    assert block.count("| 224 (197), 128 | infer | `one_path` |") == 1


def test_rows_of_a_run_stopped_before_its_result_are_read_from_its_log(
        monkeypatch, tmp_path):
    """A run that accelerator.sh stopped at its limit (exit 124) wrote no
    JSON: the rows it printed are listed from its log, with its batch and
    keras_vit's ratio to keras-hub; a run that ended is not listed."""
    gpu = _gpu_folder(tmp_path, {})
    (gpu / "accelerator_run1.log").write_text(
        "inference_b16_224_b128_bf16: starting, killed after 120s\n"
        "[jax] keras_vit infer xla=True   8000.00 img/s\n"
        "[jax] keras_hub infer xla=True   6400.00 img/s\n"
        "inference_b16_224_b128_bf16: exit 124 after 361s in all\n"
        "training_b16_224_b128_bf16: starting, killed after 88s\n"
        "[jax] keras_vit train xla=True   2000.00 img/s\n"
        "training_b16_224_b128_bf16: exit 0 after 400s in all\n")
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    block = tables.gpu_logged_only()
    assert ("| `accelerator_run1.log` | `inference_b16_224_b128_bf16` | 128 "
            "| keras_vit | `predict_on_batch` | 8000 | 16.00 | 1.25x |"
            in block)
    assert "| keras_hub | `predict_on_batch` | 6400 | 20.00 |  |" in block
    assert "training_b16" not in block
    (gpu / "accelerator_run1.log").write_text("")
    assert tables.gpu_logged_only().startswith("No GPU run was stopped")


def test_no_gpu_run_is_said_plainly(monkeypatch, tmp_path):
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    monkeypatch.setattr(tables, "targets", lambda: [])
    assert tables.gpu_files() == []
    assert tables.gpu_throughput().startswith("No GPU run has been made yet")
    assert "bash benchmarks/accelerator.sh" in tables.gpu_throughput()
    for render in (tables.gpu_attention, tables.gpu_summary,
                   tables.gpu_attention_kernels, tables.gpu_profile,
                   tables.gpu_inference):
        assert render().startswith("No GPU run has been made yet")
    gpu = tables.targets_table().split("\n\n")[1].splitlines()[2:]
    assert len(gpu) == len(tables.GPU_TARGETS)
    assert all(r.endswith("| | not measured |") for r in gpu)


def test_accelerator_script_refuses_an_unknown_option():
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "accelerator.sh"),
         "--fast"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown option --fast" in proc.stderr


@pytest.mark.slow
def test_full_sizes_refuse_at_once_without_a_gpu(tmp_path):
    """Without a GPU the full run stops at its environment check, before
    any measurement, and names --smoke; it writes nothing into the output
    folder (not even its log), nor makes it."""
    env = dict(os.environ, PYTHON=sys.executable, KERAS_BACKEND="jax")
    out = tmp_path / "results" / "gpu"
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "accelerator.sh"),
         "--no-wheels", str(out)],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "JAX sees no GPU" in proc.stderr and "--smoke" in proc.stderr
    assert os.listdir(tmp_path) == []


def _stub_python(tmp_path):
    """An interpreter that runs nothing: it records its arguments and, for
    a benchmark script, writes the result file its --output names."""
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "python"
    stub.write_text(
        "#!/bin/bash\n"
        f'echo "$*" >> {calls}\n'
        'out=""; prev=""\n'
        'for a in "$@"; do [ "$prev" = --output ] && out=$a; prev=$a; done\n'
        '[ -n "$out" ] && echo "{}" > "$out.json"\n'
        "exit 0\n")
    stub.chmod(0o755)
    return stub, calls


@pytest.mark.parametrize("budget, written", [(45, 3), (35, 0)])
def test_a_short_budget_skips_a_run_rather_than_pass_no_deadline(
        tmp_path, budget, written):
    """With BUDGET_S set, --inference's throughput runs get a deadline of
    at least 1 s (30 s below their limit), or are skipped, said in the
    log; the closing line counts the files this command wrote, not what
    the folder held before."""
    stub, calls = _stub_python(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "stored_earlier.json").write_text("{}")
    env = dict(os.environ, PYTHON=str(stub), BUDGET_S=str(budget))
    proc = subprocess.run(
        ["bash", os.path.join(ROOT, "benchmarks", "accelerator.sh"),
         "--no-wheels", "--inference", str(out)],
        env=env, capture_output=True, text=True, timeout=60)
    runs = [line.split() for line in calls.read_text().splitlines()
            if "benchmarks/throughput.py" in line]
    deadlines = [int(a[a.index("--deadline") + 1]) for a in runs]
    assert len(runs) == written and all(d >= 1 for d in deadlines)
    assert f"{written} result files written" in proc.stdout
    assert (proc.stdout.count("skipped") == 3 - written
            and proc.returncode == int(written < 3))
