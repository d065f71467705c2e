"""benchmarks/memory.py: the numbers it derives from its measurements, the
report it writes, and one real measurement of a tiny model. A check of the
harness, never of how much memory or time anything takes."""

import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import memory  # noqa: E402
import memory_report  # noqa: E402

MIB, GIB = 2**20, 2**30


def _fake_child(peaks, times):
    """A run_child that answers from tables instead of measuring."""

    def run_child(spec, backend):
        if "policies" in spec:
            return {p: dict(step_seconds=times[p], step_cpu_seconds=times[p])
                    for p in spec["policies"]}
        key = (spec["model"], spec["remat"], spec["batch_size"])
        return {"peak_bytes": peaks[key], "params": 7}

    return run_child


def test_per_example_fixed_max_batch_and_ratios(tmp_path, monkeypatch):
    # none: 1 GiB + 500 MiB per example; block: 1 GiB + 100 MiB; keras-hub:
    # 1 GiB + 600 MiB.
    per = {"none": 500 * MIB, "block": 100 * MIB}
    peaks = {}
    for batch in (2, 4):
        for remat, size in per.items():
            peaks[("keras_vit", remat, batch)] = GIB + batch * size
        peaks[("keras_hub", "none", batch)] = GIB + batch * 600 * MIB
    monkeypatch.setattr(memory, "run_child",
                        _fake_child(peaks, {"none": 2.0, "block": 2.6}))
    out = str(tmp_path / "m")
    result = memory.main([
        "--variants", "B/16", "--image_sizes", "384", "--batch_sizes", "2,4",
        "--remat", "none,block", "--compare_keras_hub", "--time", "B/16@384",
        "--output", out,
    ])
    rows = {(r["model"], r["remat"]): r for r in result["rows"]}
    none, block = rows["keras_vit", "none"], rows["keras_vit", "block"]
    assert none["bytes_per_example"] == 500 * MIB
    assert none["fixed_bytes"] == GIB
    # (16 GiB - 1 GiB) / 500 MiB = 30.72; / 100 MiB = 153.6.
    assert (none["max_batch_16GiB"], block["max_batch_16GiB"]) == (30, 153)
    assert none["max_batch_32GiB"] == 63
    assert block["bytes_per_example_saving"] == pytest.approx(5.0)
    assert block["step_seconds_ratio"] == pytest.approx(1.3)
    assert none["vs_keras_hub"] == pytest.approx(500 / 600)
    assert block["timed_batch"] == 2
    with open(out + ".json") as f:
        assert json.load(f)["rows"] == json.loads(json.dumps(result["rows"]))
    with open(out + ".md") as f:
        text = f.read()
    assert "| keras_vit B/16 | 384 | block | 100.0 | 5.0x | 1.00 | 153 | " \
        "317 | 2.60 | 2.60 | 1.30x |" in text
    assert "0.83x of keras-hub's" in text


def test_bad_arguments_name_the_fix():
    with pytest.raises(SystemExit, match="two increasing sizes"):
        memory.parse_args(["--batch_sizes", "4,2", "--output", "x"])
    with pytest.raises(SystemExit, match="JAX backend only"):
        memory.parse_args(["--remat", "none,dots", "--output", "x"])
    with pytest.raises(SystemExit, match="include none"):
        memory.parse_args(["--remat", "block", "--output", "x"])


@pytest.mark.parametrize("argv,message", [
    (["--variants", "B/16,X/9"], "--variants 'X/9' is not a variant"),
    (["--variants", "R50+B/16"], "--variants 'R50+B/16' is a hybrid"),
    (["--remat", "none,foo"],
     "--remat takes a comma-separated subset of none,block,dots"),
    (["--batch_sizes", "2,x"],
     "--batch_sizes takes comma-separated whole numbers >= 1"),
    (["--image_sizes", "abc"],
     "--image_sizes takes comma-separated whole numbers >= 1"),
    (["--steps", "0"], "--steps must be >= 1"),
    (["--time", "B/16"], "--time takes VARIANT@SIZE of --variants and "
     "--image_sizes"),
    (["--time", "L/16@224"], "got 'L/16@224'"),
    (["--image_sizes", "224", "--time", "B/16@384"], "got 'B/16@384'"),
])
def test_bad_lists_are_one_line_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        memory.parse_args(argv + ["--output", "x"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_every_configuration_failed_exits_nonzero(tmp_path, monkeypatch):
    monkeypatch.setattr(memory, "run_child",
                        lambda spec, backend: {"error": "exit code 1: boom"})
    out = str(tmp_path / "m")
    with pytest.raises(SystemExit, match="Every configuration failed"):
        memory.main(["--variants", "B/16", "--image_sizes", "32",
                     "--batch_sizes", "1,2", "--output", out])
    with open(out + ".json") as f:  # written first, with the errors
        assert "boom" in f.read()


def test_a_failed_measurement_is_reported_not_raised():
    row = {"variant": "B/16", "image_size": 384, "model": "keras_vit",
           "remat": "none", "error": "exit code 1: MemoryError"}
    result = {"command": "c", "backend": "tensorflow", "batch_sizes": [2, 4],
              "rows": [row], "machine": memory_report.machine_info()}
    memory_report.add_ratios(result)
    assert "| failed |" in memory_report.markdown(result)
    assert "MemoryError" in memory_report.progress_line(row)


@pytest.mark.slow
def test_one_real_measurement_of_a_tiny_model():
    """A real child: XLA's buffer assignment of the compiled step, read
    back, and the recomputed matmuls of block remat in its HLO."""
    spec = dict(variant="B/16", image_size=32, model="keras_vit",
                dtype="float32", num_classes=10, layers=1, hidden_size=64,
                backend="tensorflow", batch_size=2)
    plain = memory.run_child(dict(spec, remat="none"), "tensorflow")
    rematted = memory.run_child(dict(spec, remat="block"), "tensorflow")
    assert "error" not in plain, plain.get("error")
    assert plain["peak_bytes"] == plain["xla_bytes"] + plain[
        "optimizer_bytes"]
    # SGD momentum: one float32 slot per weight.
    assert plain["optimizer_bytes"] >= 4 * plain["params"]
    assert plain["xla_bytes"] > 2 * 4 * plain["params"]  # weights + grads
    assert rematted["dots_compiled"] == plain["dots_compiled"] + 5
