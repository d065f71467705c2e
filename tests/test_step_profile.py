"""The training-step profiler (benchmarks/step_profile.py): the self time
of nested trace events, the grouping of ops, and a real profiled step of a
tiny model with the files it writes. Not a timed test."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import step_profile  # noqa: E402
from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402


def _space(events):
    """An XSpace of one plane and one line: events (name, start, length)
    in picoseconds."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    line = plane.lines.add(id=1)
    ids = {}
    for name, start, length in events:
        if name not in ids:
            ids[name] = len(ids) + 1
            plane.event_metadata[ids[name]].id = ids[name]
            plane.event_metadata[ids[name]].name = name
        line.events.add(metadata_id=ids[name], offset_ps=start,
                        duration_ps=length)
    return space


def test_self_time_subtracts_nested_events_and_skips_calls():
    ps = 10**12
    space = _space([
        # A function call holding two ops; the call is not counted, the
        # ops' times are theirs alone.
        ("model/StatefulPartitionedCall:StatefulPartitionedCall", 0, 10 * ps),
        ("ExecutorState::Process", 0, 6 * ps),
        ("model/dense/MatMul:MatMul", 1 * ps, 3 * ps),
        ("gradient_tape/model/dense/MatMul:MatMul", 4 * ps, 2 * ps),
        ("adam_w/Sqrt:Sqrt", 7 * ps, 1 * ps),
        # An op that called another: its own time excludes the callee's.
        ("model/Outer:Transpose", 8 * ps, 2 * ps),
        ("model/Inner:Mul", 8 * ps, ps // 2),
    ])
    ops = step_profile.self_times(space)
    assert ops["MatMul"] == {"forward": 3.0, "backward": 2.0}
    assert ops["Sqrt"] == {"optimizer": 1.0}
    assert ops["Transpose"] == {"forward": 1.5}
    assert ops["Mul"] == {"forward": 0.5}
    assert "StatefulPartitionedCall" not in ops
    assert "Process" not in ops  # "ExecutorState::Process" is no op


def test_kinds_and_phases():
    assert step_profile.kind("_FusedMatMul") == "matmul"
    assert step_profile.kind("BatchMatMulV2") == "matmul"
    assert step_profile.kind("Conv2DBackpropFilter") == "matmul"
    assert step_profile.kind("Transpose") == "layout"
    assert step_profile.kind("StridedSliceGrad") == "layout"
    assert step_profile.kind("Tanh") == "elementwise"
    assert step_profile.phase("adam_w/Mul_3") == "optimizer"
    # The scope of a process's second AdamW (as in a whole test run).
    assert step_profile.phase("adamw_2/Mul_3") == "optimizer"
    assert step_profile.phase("adam_w_12/Sqrt") == "optimizer"
    assert step_profile.phase("gradient_tape/x/MatMul") == "backward"
    assert step_profile.phase("x/encoder/MatMul") == "forward"


@pytest.mark.slow
def test_profiles_a_tiny_training_step(tmp_path):
    out = str(tmp_path / "profile")
    assert step_profile.main([
        "--variant", "Ti/16", "--image_size", "32", "--patch_size", "8",
        "--hidden_size", "32", "--num_layers", "2", "--num_heads", "2",
        "--mlp_dim", "64", "--num_classes", "10", "--batch_size", "2",
        "--steps", "1", "--models", "keras_vit", "--output", out]) == 0
    with open(out + ".json", encoding="utf-8") as f:
        result = json.load(f)
    (row,) = result["rows"]
    assert row["model"] == "keras_vit"
    summary = row["summary"]
    # Every phase ran matmuls: dense layers, their gradients, and the
    # optimizer touched every weight.
    assert summary["forward"]["matmul"] > 0
    assert summary["backward"]["matmul"] > 0
    assert sum(summary["optimizer"].values()) > 0
    total = sum(sum(b.values()) for b in row["op_seconds_per_step"].values())
    assert sum(sum(k.values()) for k in summary.values()) == pytest.approx(
        total)
    with open(out + ".md", encoding="utf-8") as f:
        text = f.read()
    assert "| keras_vit | backward |" in text
    assert result["command"].startswith("python benchmarks/step_profile.py")
