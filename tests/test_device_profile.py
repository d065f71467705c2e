"""benchmarks/device_profile.py: where a compiled training step spends its
device time under JAX, read from XLA's optimized HLO and the profiler's
trace without TensorFlow.

A GPU's trace cannot be made here, so the reading of a GPU module's HLO
(cuBLAS and cuDNN custom calls, GEMM fusions) is tested on a module's text
written the way XLA's GPU compiler prints it, and the whole command runs
on the CPU, where XLA's thunks carry the same `hlo_op` stats that a GPU's
kernels do. Nothing here asserts how fast anything is.
"""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import device_profile  # noqa: E402

from tests.test_accelerator import run_accelerator  # noqa: E402

# A training step's module as XLA's GPU compiler prints it after
# optimization (abridged): a Triton GEMM fusion, cuBLAS and cuDNN custom
# calls (attention, the patch embedding's convolution and its filter
# gradient), loop fusions, a dot two fusions down, a copy.
with open(os.path.join(ROOT, "tests", "fixtures", "hlo",
                       "gpu_train_step.txt"), encoding="utf-8") as _f:
    GPU_MODULE = _f.read()


def test_a_gpu_module_is_read_by_opcode_target_and_fused_body():
    hlo = device_profile.parse_hlo(GPU_MODULE)
    want = {  # instruction: (kind, phase)
        "gemm_fusion_dot.3": ("matmul", "forward"),
        "custom-call.7": ("matmul", "backward"),
        "custom-call.8": ("attention", "forward"),
        # cuDNN's convolutions are matmul work (the first GPU profile
        # counted them as elementwise).
        "cudnn-conv-bias-activation.3": ("matmul", "forward"),
        "cudnn-conv.3": ("matmul", "backward"),
        "loop_multiply_fusion": ("elementwise", "forward"),
        "transpose_fusion": ("layout", "update and other"),
        "nested": ("matmul", "update and other"),  # a dot two calls down
        "copy.9": ("layout", "update and other"),
        "add.11": ("elementwise", "update and other"),
    }
    got = {name: (device_profile.kind(hlo[name], name),
                  device_profile.phase(hlo[name]["op_name"]))
           for name in want}
    assert got == want
    assert hlo["custom-call.7"]["target"] == "__cublas$gemm"
    assert hlo["gemm_fusion_dot.3"]["computation"] == "main.10"
    assert hlo["dot.3"]["computation"] == "fused_computation.1"
    assert "dot" in hlo["nested"]["inner"]


def test_an_instruction_missing_from_the_dump_is_classified_by_name():
    kind = device_profile.kind
    assert kind(None, "sm90_xmma_gemm_bf16bf16_bf16f32") == "matmul"
    assert kind(None, "cudnn_fmha_forward") == "attention"
    assert kind(None, "copy_transpose_fusion") == "layout"
    assert kind(None, "loop_add_fusion") == "elementwise"


def test_events_find_their_module_by_program_id_then_by_name(tmp_path):
    (tmp_path / "module_0007.jit_train_step.gpu_after_optimizations.txt"
     ).write_text(GPU_MODULE)
    (tmp_path / "module_0007.jit_train_step.before_optimizations.txt"
     ).write_text("HloModule ignored\n")
    modules = device_profile.load_modules(str(tmp_path))
    assert list(modules) == [7]
    assert modules[7]["name"] == "jit_train_step"
    find = device_profile.find_instruction
    event = {"hlo_op": "custom-call.8", "hlo_module": "jit_train_step",
             "program_id": 7}
    assert find(modules, event)["target"] == "__cudnn$fmhaSoftmax"
    # A trace whose program id is not the dump's: the module's name.
    assert find(modules, dict(event, program_id=99)) is not None
    assert find(modules, dict(event, hlo_module="jit_other",
                              program_id=99)) is None


def test_it_refuses_another_backend_by_name():
    env = dict(os.environ, KERAS_BACKEND="tensorflow",
               TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks",
                                      "device_profile.py"),
         "--output", "/nonexistent/x"],
        env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert "runs under KERAS_BACKEND=jax" in proc.stderr


def test_each_model_and_mode_is_profiled_in_its_own_process(monkeypatch):
    """The parent runs this script once per (model, mode), with XLA's
    flags as it was given them (each child dumps its own HLO), keeps the
    rows in order, and leaves out (and says) what failed."""
    calls = []

    def run_script(script, argv, env=None):
        calls.append((os.path.basename(script), argv, env))
        model, mode = argv[-3], argv[-1]
        if (model, mode) == ("keras_hub", "infer"):
            return {"error": "exit code 1"}
        return {"rows": [{"model": model, "mode": mode}],
                "machine": {"cpu": model + mode}}

    monkeypatch.setattr(device_profile.throughput, "run_script", run_script)
    monkeypatch.setattr(device_profile, "XLA_FLAGS", None)
    notes = []
    pairs = [("keras_vit", "train"), ("keras_hub", "train"),
             ("keras_vit", "infer"), ("keras_hub", "infer")]
    rows, machine = device_profile.profile_in_children(
        ["--steps", "2", "--models", "keras_vit,keras_hub"], pairs, notes)
    assert [(r["model"], r["mode"]) for r in rows] == pairs[:3]
    assert machine == {"cpu": "keras_vittrain"}  # the first child's
    assert notes == ["keras_hub infer: its process failed (exit code 1)"]
    for (script, argv, env), (model, mode) in zip(calls, pairs):
        assert script == "device_profile.py"
        # The child's own pair comes last, so argparse takes it.
        assert argv[-4:] == ["--models", model, "--modes", mode]
        assert env == {"XLA_FLAGS": None}  # unset, as it was
    with pytest.raises(SystemExit, match="No profile was made"):
        device_profile.profile_in_children(
            [], [("keras_hub", "infer")], [])


@pytest.mark.slow
def test_profile_command_end_to_end_at_tiny_sizes(tmp_path):
    """`benchmarks/accelerator.sh --smoke --profile` with TensorFlow
    unimportable: each model and mode profiled in its own process, every
    traced op of a step found in the dumped HLO, the forward and backward
    matmuls seen, and the phase-by-kind table adding up to the op time."""
    out = tmp_path / "out"
    run_accelerator(tmp_path, out, "--profile", timeout=900)
    name = "device_profile_b16_224_b128_bf16"
    with open(out / f"{name}.json") as f:
        result = json.load(f)
    md = (out / f"{name}.md").read_text()
    assert result["args"]["dtype"] == "bfloat16"
    assert result["args"]["one_process"] is False
    assert "Each model and mode in a fresh process." in md
    models = [r["model"] for r in result["rows"]]
    assert [(r["model"], r["mode"]) for r in result["rows"]] == [
        (m, mode) for mode in ("train", "infer") for m in models[:len(
            models) // 2]]
    assert models[0] == "keras_vit"
    for row in result["rows"]:
        assert row["planes"] == ["/host:CPU"]
        assert row["events"] > 0 and row["events_unmatched"] == 0
        table = row["seconds_per_step"]
        assert set(table) == set(device_profile.PHASES)
        assert table["forward"]["matmul"] > 0
        if row["mode"] == "train":
            assert table["backward"]["matmul"] > 0
            assert any("jvp(" in r["op_name"] for r in row["top"])
        else:  # an inference step is all forward pass
            assert not any(table["backward"].values())
            assert not any(table["update and other"].values())
        total = sum(sum(kinds.values()) for kinds in table.values())
        assert total == pytest.approx(row["op_seconds_per_step"])
        assert row["top"] and all(r["seconds"] > 0 for r in row["top"])
        assert isinstance(row["custom_call_seconds"], dict)
        assert f"| {row['model']} | {row['mode']} | " in md
    assert "instructions that took longest" in md
    # The HLO dumps and the traces are temporary; nothing is left behind
    # in the output folder but the results and the log.
    assert sorted(os.listdir(out)) == sorted(
        ["accelerator.log", f"{name}.json", f"{name}.md"]
        + [f"attention_kernels_b16_{tag}.{ext}"
           for tag in ("224_b128", "384_b32") for ext in ("json", "md")])
