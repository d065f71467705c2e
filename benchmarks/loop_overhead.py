r"""What the training loop costs on top of the bare compiled training step.

    python benchmarks/loop_overhead.py --config=configs/digits.py \
        --steps_per_loop=1,10,50 --steps=200 --repeats=3 \
        --output=benchmarks/results/loop_overhead_digits

Config fields are overridden as in train.py, e.g. for ViT-Ti/16 at 224:
    --config.model.variant=Ti/16 --config.model.image_size=224 \
    --config.input.pp.resize_size=256 --config.input.batch_size=32

The same training step of the config (same model, optimizer, loss,
clipping, XLA setting; the default strategy) run three ways:

  bare     a `tf.function` of one step of `Trainer` on a batch already in
           memory, called once per step from Python: the floor.
  trainer  `Trainer.train(iterator, steps_per_loop)` of the same Trainer:
           the in-graph tf.range loop, the distributed iterator and the
           metric sums, on the same batch repeated by `tf.data`.
  train.py `train_lib.train_and_evaluate` with `synthetic_data=True` (one
           batch of the config's pipeline served from memory): the host
           loop around `Trainer.train` (logging and a TensorBoard summary
           every `steps_per_loop` steps, the preemption checks). Its
           metrics.json gives the time inside the train calls
           (`images_per_sec`) and the time of the whole loop
           (`loop_images_per_sec`; every iteration after the first,
           compiling one, without evaluations and checkpoint saves, which
           are placed only at the end here), so the host loop's own cost is
           measured within one run.

bare and trainer alternate, `--steps` steps each, `--repeats` times; their
overhead is the median of the paired ratios. The train.py runs repeat
`--repeats` times. The loop's total overhead over the bare step is the
product of the two. One more train.py run per repeat uses the config's real
input pipeline: on a CPU its work competes with the step for the same cores
(on accelerators it overlaps with the step); it is reported beside the
synthetic run's train-call time.

Writes NAME.json and NAME.md for `--output=NAME`.
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402, F401

# isort: split
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
import throughput  # noqa: E402  (beside this file: machine_info)
import throughput_report as report  # noqa: E402
from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from keras_vit import build  # noqa: E402
from keras_vit.data import pipeline as input_pipeline  # noqa: E402
from keras_vit.training import train_lib  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", "configs/digits.py", "Training config file.", lock_config=True
)
_STEPS_PER_LOOP = flags.DEFINE_list(
    "steps_per_loop", ["1", "10", "50"], "Values of steps_per_loop to time."
)
_STEPS = flags.DEFINE_integer(
    "steps", 200, "Timed steps per repeat (rounded up to whole loops)."
)
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed repeats.")
_OUTPUT = flags.DEFINE_string(
    "output", None, "Path prefix: writes PREFIX.json and PREFIX.md.",
    required=True,
)


def _trainer(config, num_classes: int):
    model, optimizer = build.build_run(config, num_classes)
    return train_lib.build_trainer(
        config.trainer, config.objective, model, optimizer,
        tf.distribute.get_strategy(), num_classes=num_classes,
        global_batch=int(config.input.batch_size),
    )


def _step_s(run, calls: int, steps: int) -> float:
    """Seconds per step of `calls` calls of run(), which make `steps` steps."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / steps


def in_process_runners(config, num_classes: int, k: int, steps: int):
    """Timers (seconds per step) of the bare step and of Trainer.train."""
    run_input = train_lib.run_input(config.seed, config.model,
                                    config.objective.mpp)
    batch = next(iter(input_pipeline.train_dataset(
        config.input, run_input, config.input.batch_size)))
    images, labels = (tf.identity(t) for t in batch)
    trainer = _trainer(config, num_classes)
    strategy = tf.distribute.get_strategy()

    @tf.function
    def bare_step():
        return strategy.run(trainer._train_step_fn, (images, labels))

    def bare():
        bare_step()[0].numpy()  # one host sync per step, like any loop

    iterator = iter(tf.data.Dataset.from_tensors((images, labels)).repeat())

    def loop():
        trainer.train(iterator, k)

    loops = -(-steps // k)
    for _ in range(2):  # compile, then one untimed call each
        bare()
        loop()
    return {
        "bare": lambda: _step_s(bare, loops * k, loops * k),
        "trainer": lambda: _step_s(loop, loops, loops * k),
    }


def time_train_lib(config, k: int, steps: int, synthetic: bool):
    """(seconds per step in the train calls, in the whole host loop)."""
    loops = -(-steps // k)
    with config.unlocked():
        config.input.synthetic_data = synthetic
        config.trainer.steps_per_loop = k
        config.log.every_steps = k
        config.trainer.total_steps = (loops + 1) * k  # the first call compiles
        config.schedule.warmup_steps = min(  # the schedule's cost is alike
            config.schedule.warmup_steps, config.trainer.total_steps // 2
        )
        config.evals.test.every_steps = 0
        config.checkpoints.every_steps = 0
        config.export.enabled = False
    with tempfile.TemporaryDirectory() as workdir:
        final = train_lib.train_and_evaluate(config, workdir)
    return (config.input.batch_size / final["images_per_sec"],
            config.input.batch_size / final["loop_images_per_sec"])


def measure(config, num_classes: int, k: int, steps: int,
            repeats: int) -> Dict[str, Any]:
    """dict. Every sample and the derived overheads for one steps_per_loop."""
    runners = in_process_runners(config, num_classes, k, steps)
    samples: Dict[str, List[float]] = {
        name: [] for name in ("bare", "trainer", "train_calls", "host_loop",
                              "input_train_calls", "input_host_loop")
    }
    for _ in range(repeats):
        for name, run in runners.items():
            samples[name].append(run())
    del runners
    for _ in range(repeats):
        for synthetic, prefix in ((True, ""), (False, "input_")):
            calls, loop = time_train_lib(
                config.copy_and_resolve_references(), k, steps, synthetic
            )
            samples[prefix + "train_calls"].append(calls)
            samples[prefix + "host_loop"].append(loop)
        keras.backend.clear_session()
        gc.collect()

    def ratio(a: str, b: str) -> float:
        return statistics.median(
            x / y for x, y in zip(samples[a], samples[b])
        )

    med = {name: statistics.median(v) for name, v in samples.items()}
    in_graph = ratio("trainer", "bare") - 1
    host = ratio("host_loop", "train_calls") - 1
    return {
        "steps_per_loop": k,
        "samples_s_per_step": samples,
        "step_ms": {name: 1000 * v for name, v in med.items()},
        "in_graph_loop_overhead": in_graph,
        "host_loop_overhead": host,
        "total_overhead": (1 + in_graph) * (1 + host) - 1,
        "input_pipeline_cost": ratio("input_host_loop", "host_loop") - 1,
        "images_per_s": config.input.batch_size / med["host_loop"],
    }


def main(argv) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    logging.set_verbosity(logging.WARNING)
    config = _CONFIG.value
    try:
        values = sorted({int(v) for v in _STEPS_PER_LOOP.value})
    except ValueError:
        raise app.UsageError("--steps_per_loop takes integers, e.g. 1,10,50")
    if not values or values[0] < 1 or _STEPS.value < 1 or _REPEATS.value < 1:
        raise app.UsageError(
            "--steps_per_loop values, --steps and --repeats must be >= 1."
        )
    num_classes = train_lib.num_classes_of(config.model, config.input)
    result: Dict[str, Any] = {
        "machine": throughput.machine_info(),
        "command": "python " + " ".join(sys.argv),
        "config": config.to_dict(), "rows": [],
    }
    for k in values:
        keras.utils.set_random_seed(0)
        row = measure(config, num_classes, k, _STEPS.value, _REPEATS.value)
        result["rows"].append(row)
        print(
            f"steps_per_loop={k}: bare {row['step_ms']['bare']:.2f} ms, "
            f"loop overhead in graph {100 * row['in_graph_loop_overhead']:+.1f}"
            f"%, host {100 * row['host_loop_overhead']:+.1f}%, total "
            f"{100 * row['total_overhead']:+.1f}%; input pipeline "
            f"{100 * row['input_pipeline_cost']:+.1f}%", file=sys.stderr,
        )
    result["machine"]["load_average_end"] = list(os.getloadavg())
    text = markdown(result)
    report.write_results(_OUTPUT.value, result, text)
    print(text)


def markdown(result: Dict[str, Any]) -> str:
    """str. The table of step times and overheads."""
    m, c = result["machine"], result["config"]
    model = c["model"]
    sizes = (model.get("variant") or
             f"patch {model['patch_size']}, width {model['hidden_size']}, "
             f"{model['num_layers']} layers")
    lines = [
        "# Training-loop overhead",
        "",
        f"`{result['command']}`",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores; TensorFlow "
        f"{m.get('tensorflow')}, Keras {m['keras']}; load average (1 min) "
        f"{m['load_average'][0]:.2f} at start, "
        f"{m['load_average_end'][0]:.2f} at end.",
        f"- Model: {sizes}; image {c['model']['image_size']}, batch "
        f"{c['input']['batch_size']}, {c['optimizer']['name']}, XLA "
        f"{'on' if c['trainer']['jit_compile'] else 'off'}, data "
        f"{c['input']['dataset']}.",
        "",
        "| steps_per_loop | bare step ms | Trainer.train ms "
        "| in-graph loop | host loop | **loop total** "
        "| with the real input pipeline |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        ms = r["step_ms"]
        lines.append(
            f"| {r['steps_per_loop']} | {ms['bare']:.2f} "
            f"| {ms['trainer']:.2f} "
            f"| {100 * r['in_graph_loop_overhead']:+.1f}% "
            f"| {100 * r['host_loop_overhead']:+.1f}% "
            f"| **{100 * r['total_overhead']:+.1f}%** "
            f"| {ms['input_host_loop']:.2f} ms "
            f"({100 * r['input_pipeline_cost']:+.1f}%) |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    app.run(main)
