"""The documentation's figures are generated from the stored results.

scripts/results_tables.py renders every `<!-- results: NAME -->` block of
README.md, benchmarks/README.md and docs/*.md from the files in
benchmarks/results/ and docs/results/; these tests regenerate the blocks
and fail on any difference, check the median rule for targets, and keep
measured figures (img/s, GFLOP/s, keras-hub ratios, milliseconds) out of
the hand-written text.
"""

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import throughput_report  # noqa: E402


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "results_tables", os.path.join(ROOT, "scripts", "results_tables.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tables = _load_script()


def _read(doc):
    with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
        return f.read()


@pytest.mark.parametrize("doc", tables.documents())
def test_blocks_are_current(doc):
    text = _read(doc)
    assert tables.fill(text, doc) == text, (
        f"{doc} is stale: run python scripts/results_tables.py")


def test_check_mode_passes_and_names_a_stale_file(tmp_path, monkeypatch):
    # The command line, as CI or a user runs it.
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "results_tables.py"),
         "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # A stale copy is found and rewritten.
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir()
    doc.write_text("before\n<!-- results: flop-count -->\nold 9.99x\n"
                   "<!-- /results -->\nafter\n", encoding="utf-8")
    monkeypatch.setattr(tables, "documents", lambda: ["docs/page.md"])
    monkeypatch.setattr(tables, "ROOT", str(tmp_path))
    monkeypatch.setattr(tables, "load", lambda path: json.loads(
        open(os.path.join(ROOT, path), encoding="utf-8").read()))
    assert tables.main(["--check"]) == 1
    assert tables.main([]) == 0
    new = doc.read_text(encoding="utf-8")
    assert new.startswith("before\n<!-- results: flop-count -->\n| model")
    assert new.endswith("<!-- /results -->\nafter\n")
    assert "9.99x" not in new
    assert tables.main(["--check"]) == 0


def test_every_renderer_is_used_and_every_block_known():
    used = set()
    for doc in tables.documents():
        used.update(tables.blocks(_read(doc)))
    assert used == set(tables.RENDERERS), (
        f"unused: {set(tables.RENDERERS) - used}; "
        f"unknown: {used - set(tables.RENDERERS)}")
    with pytest.raises(KeyError, match="unknown results block 'nope'"):
        tables.fill("<!-- results: nope -->\n<!-- /results -->", "x.md")


def test_fill_keeps_the_text_around_a_block():
    text = ("a\n<!-- results: quickstart -->\nstale\n<!-- /results -->\n"
            "b <!-- results: flop-count -->\n<!-- /results --> c\n")
    out = tables.fill(text)
    assert out.startswith("a\n<!-- results: quickstart -->\nMeasured: ")
    assert "stale" not in out
    assert out.endswith("<!-- /results --> c\n")
    assert tables.fill(out) == out


def _vs_hub(name, mode, field="vs_keras_hub"):
    data = json.loads(_read(f"benchmarks/results/{name}.json"))
    rows = [r for r in data["rows"] if r["model"] == "keras_vit"
            and r["mode"] == mode and r["xla"] is False]
    assert len(rows) == 1
    return rows[0][field]


def test_b16_training_target_is_the_median_of_every_run():
    """Each run's wall-time ratio, with its CPU-time ratio beside it; the
    target judged on the median of the former."""
    runs = [_vs_hub(n, "train") for n in tables.B16_TRAIN]
    cpu = [_vs_hub(n, "train", "vs_keras_hub_cpu") for n in tables.B16_TRAIN]
    assert len(runs) == 4
    median = statistics.median(runs)
    row = [t for t in tables.targets()
           if t.what.startswith("B/16, 224, batch 8, training")][0].row()
    for value, by_cpu, name in zip(runs, cpu, tables.B16_TRAIN):
        assert f"{value:.2f}x / {by_cpu:.2f}x (`{name}`)" in row
    assert f"**{median:.2f}x** / {statistics.median(cpu):.2f}x" in row
    # Its runs measured the model with three attention paths: said.
    assert row.endswith("| met (earlier model) |" if median >= 1.1
                        else "| not met (earlier model) |")


def test_every_ratio_target_shows_the_cpu_time_ratio():
    table = tables.targets_table().split("\n\n")[0]
    for target in tables.targets():
        row = [ln for ln in table.splitlines()
               if ln.startswith(f"| {target.what} |")]
        assert len(row) == 1
        shows_cpu = " / " in row[0].split(" | ")[2]
        assert shows_cpu == ("keras-hub" in target.what
                             and "memory" not in target.what), row[0]


def test_a_ratio_target_is_judged_on_wall_time(monkeypatch):
    fake = {"a": {"wall": 1.0, "cpu": 1.3}, "b": {"wall": 1.05, "cpu": 1.2}}
    monkeypatch.setattr(tables, "bench", lambda name: fake[name])
    target = tables.Target("x >= 1.1", ["a", "b"], lambda d: d["wall"], 1.1,
                           tables.ratio, cpu=lambda d: d["cpu"])
    assert target.row() == ("| x >= 1.1 | 1.00x / 1.30x (`a`), 1.05x / "
                            "1.20x (`b`) | **1.02x** / 1.25x | not met |")


def test_a_target_is_not_met_by_its_best_run(monkeypatch):
    fake = {"a": 1.5, "b": 0.9, "c": 0.95}
    monkeypatch.setattr(tables, "bench", lambda name: fake[name])
    target = tables.Target("x >= 1.0", ["a", "b", "c"], lambda v: v, 1.0,
                           tables.ratio)
    assert target.row() == ("| x >= 1.0 | 1.50x (`a`), 0.90x (`b`), "
                            "0.95x (`c`) | **0.95x** | not met |")
    low = tables.Target("y <= 1.0", ["b", "c"], lambda v: v, 1.0,
                        tables.ratio, at_least=False)
    assert low.row().endswith("| **0.93x** | met |")


def test_flop_count_is_what_the_model_computes():
    data = json.loads(_read("benchmarks/results/b16_224_b8_fp32_hm.json"))
    block = tables.flop_count()
    ours = data["forward_flops_per_image"]
    assert f"| B/16 | {ours / 1e9:.2f} |" in block
    # The credited count is the class-token-only last block's, below the
    # every-token count, and it is what MFU divides by.
    assert ours < data["forward_flops_per_image_all_tokens"]
    row = [r for r in data["rows"] if r["model"] == "keras_vit"][0]
    factor = 3 if row["mode"] == "train" else 1
    assert row["model_flops_per_s"] == pytest.approx(
        ours * factor * row["images_per_s"])


def test_quickstart_result_is_of_the_readme_command():
    result = json.loads(_read("docs/results/quickstart.json"))
    readme = _read("README.md")
    block = re.search(r"## Quick start\n.*?```bash\n(.*?)\n", readme, re.S)
    assert result["quick_start_line"] == block.group(1)
    assert result["test_accuracy"] >= 0.95
    assert result["total_s"] >= result["train_loop_s"] > 0


# Measured figures that only a results block may state.
MEASURED = re.compile(
    r"\d+(\.\d+)?\s?(img/s|images/s|GFLOP/s|ms\b)|\b\d\.\d\dx\b")


@pytest.mark.parametrize("doc", tables.documents())
def test_no_measured_figure_outside_a_results_block(doc):
    text = tables.BLOCK.sub("", _read(doc))
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code and output
    found = [m.group(0) for m in MEASURED.finditer(text)]
    assert not found, (
        f"{doc} states {found} outside a results block: generate it from a "
        "stored result (scripts/results_tables.py) or remove it")


def test_posemb_resize_block_states_the_stored_differences():
    data = json.loads(_read("docs/results/posemb_resize.json"))
    block = tables.posemb_resize()
    for resize, pairs in data["sincos2d_B16_tables"].items():
        row = [ln for ln in block.splitlines()
               if ln.startswith(f"| {resize.replace('->', ' -> ')} ")]
        assert len(row) == 1
        for key, _ in tables.POSEMB_PAIRS:
            value = pairs[key]["rms_relative"]
            shown = f"{value:.1e}" if value < 1e-3 else f"{100 * value:.1f}%"
            assert f"| {shown} " in row[0] + " "
    assert block.startswith("| B/16 sin-cos table")
    rows = [ln for ln in block.splitlines() if ln.startswith("| `")]
    assert len(rows) == len(data["fixture_model_logits"])
    for row, r in zip(rows, data["fixture_model_logits"].values()):
        agree = f"{100 * r['top1_agreement']:.0f}% of {r['images']} images"
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == agree
        # float32 rounding in scientific notation, differences in percent
        for cell, key in ((2, "max_abs_logit_difference_relative"),
                          (4, "official_resize_max_abs_logit_difference_"
                           "relative")):
            diff = r[key]
            assert cells[cell] == (f"{diff:.1e}" if diff < 1e-3 else
                                   f"{100 * diff:.1f}%")


def test_one_row_over_its_ceiling_hides_the_mfu_of_its_whole_run(
        monkeypatch):
    """An MFU over 100% shows the run's ceiling (of that backend) was read
    low: no row measured against it states one, keras_vit's included
    where only keras-hub's went over; the other backend's rows keep
    theirs. The repeats column counts the repeats that ran."""
    def row(model, backend, mfu, repeats=3):
        return {"model": model, "mode": "infer", "xla": True,
                "backend": backend, "mfu": mfu, "images_per_s": 1.0,
                "seconds": [1.0] * repeats}
    data = {"args": {"variant": "B/16", "image_size": 224, "batch_size": 8,
                     "dtype": "float32", "repeats": 3},
            "machine": {}, "ceiling": {},
            "rows": [row("keras_vit", "jax", 0.53, repeats=2),
                     row("keras_hub", "jax", 1.05),
                     row("keras_vit", "tensorflow", 0.40)]}
    monkeypatch.setattr(tables, "throughput_files", lambda: ["r"])
    monkeypatch.setattr(tables, "bench", lambda name: data)
    lines = [line for line in tables.throughput_runs().splitlines()
             if line.startswith("| `r`")]
    assert "| 2 |" in lines[0] and "| n/a |" in lines[0]
    assert "| 3 |" in lines[1] and "| 40% |" in lines[1]


def test_a_report_says_how_many_repeats_ran():
    def result(counts):
        return {"args": {"repeats": 3},
                "rows": [{"seconds": [1.0] * n} for n in counts]}
    assert throughput_report._repeats(result([3, 3])) == "3 repeats"
    assert throughput_report._repeats(result([1])) == (
        "1 repeat (3 asked; the deadline stopped the rest)")
    assert throughput_report._repeats(result([2, 3])).startswith(
        "2 to 3 repeats (3 asked")
