"""One measurement of benchmarks/memory.py, in a process of its own.

    KERAS_BACKEND=tensorflow python benchmarks/memory_child.py \
        '{"variant": "B/16", "image_size": 384, "model": "keras_vit",
          "remat": "block", "batch_size": 2, "backend": "tensorflow",
          "dtype": "float32", "num_classes": 1000, "time": false, ...}'

Prints one JSON line: the bytes of the compiled training step (TensorFlow:
"Total bytes used" of the buffer assignment that XLA dumps for the
jit-compiled forward and backward pass, plus the optimizer's state, which
lives outside it; JAX: the compiled step's memory analysis) and this
process's peak resident memory. With "policies": ["none", "block"] in the
spec, the step times of those policies instead, measured side by side.
"""

from __future__ import annotations

import glob
import json
import os
import re
import resource
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# XLA writes its buffer assignment here (read by run_tensorflow); set before
# TensorFlow parses XLA_FLAGS.
DUMP = tempfile.mkdtemp(prefix="xla_dump_")
os.environ["XLA_FLAGS"] = " ".join(filter(None, [
    os.environ.get("XLA_FLAGS"), f"--xla_dump_to={DUMP}",
    "--xla_dump_hlo_module_re=.*loss_and_grads.*",
]))

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_vit.model import decode_variant  # noqa: E402


def sizes(spec: Dict[str, Any]) -> Dict[str, int]:
    """dict. The encoder sizes of the spec's variant, with its overrides."""
    decoded = decode_variant(spec["variant"])
    size = decoded.size
    dims = dict(
        patch_size=decoded.patch_size, hidden_size=size.hidden_size,
        num_layers=size.num_layers, num_heads=size.num_heads,
        mlp_dim=size.mlp_dim,
    )
    if spec.get("layers"):
        dims["num_layers"] = spec["layers"]
    if spec.get("hidden_size"):
        dims["hidden_size"] = spec["hidden_size"]
        dims["mlp_dim"] = 4 * spec["hidden_size"]
        dims["num_heads"] = max(1, spec["hidden_size"] // 64)
    return dims


def build_model(spec: Dict[str, Any]) -> keras.Model:
    """keras.Model. Ours with the spec's remat, or keras-hub's ViT."""
    dims = sizes(spec)
    if spec["model"] == "keras_vit":
        return keras_vit.create_model(
            None, num_classes=spec["num_classes"],
            image_size=spec["image_size"], remat=spec["remat"], **dims
        )
    import keras_hub  # optional (the "benchmark" extra)

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(spec["image_size"], spec["image_size"], 3),
        patch_size=dims["patch_size"], num_layers=dims["num_layers"],
        num_heads=dims["num_heads"], hidden_dim=dims["hidden_size"],
        mlp_dim=dims["mlp_dim"],
    )
    x = backbone.output[:, 0]  # the class token, as in ours
    x = keras.layers.Dense(spec["num_classes"], dtype="float32",
                           name="head")(x)
    return keras.Model(backbone.input, x, name="keras_hub_vit")


def optimizer() -> keras.optimizers.Optimizer:
    """The fine-tuning recipe's update: SGD, momentum 0.9, global-norm
    clipping at 1."""
    return keras.optimizers.SGD(
        learning_rate=1e-3, momentum=0.9, global_clipnorm=1.0
    )


def batch(spec: Dict[str, Any]):
    rng = np.random.default_rng(0)
    shape = (spec["batch_size"], spec["image_size"], spec["image_size"], 3)
    images = rng.uniform(-1, 1, shape).astype("float32")
    labels = rng.integers(0, spec["num_classes"], spec["batch_size"])
    return images, labels.astype("int32")


def loss_of(labels, logits):
    logits = keras.ops.cast(logits, "float32")
    return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(
        labels, logits, from_logits=True
    ))


def jax_step(model, opt, images, labels):
    """(memory dict, one-step callable): the whole step jit-compiled, the
    weights and optimizer state donated (updated in place)."""
    import jax

    def loss_fn(trainable, non_trainable, images, labels):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, images, training=True
        )
        return loss_of(labels, logits), non_trainable

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def step(trainable, non_trainable, opt_vars, images, labels):
        (loss, non_trainable), grads = grad_fn(
            trainable, non_trainable, images, labels
        )
        trainable, opt_vars = opt.stateless_apply(opt_vars, grads, trainable)
        return loss, trainable, non_trainable, opt_vars

    state = [
        [v.value for v in model.trainable_variables],
        [v.value for v in model.non_trainable_variables],
        [v.value for v in opt.variables],
    ]
    lowered = jax.jit(step, donate_argnums=(0, 1, 2)).lower(
        *state, images, labels
    )
    compiled = lowered.compile()
    analysis = compiled.memory_analysis()
    # The profile of what the compiler kept: matmuls traced (a recomputed
    # block adds its own) and matmuls left after XLA's optimisations.
    out = {"dots_traced": lowered.as_text().count("dot_general"),
           "dots_compiled": count_dots(compiled.as_text())}
    for key in ("argument", "output", "alias", "temp"):
        out[f"{key}_bytes"] = int(getattr(analysis, f"{key}_size_in_bytes"))
    out["peak_bytes"] = (out["argument_bytes"] + out["temp_bytes"]
                         + out["output_bytes"] - out["alias_bytes"])

    def run_once():
        loss, *state[:] = compiled(*state, images, labels)
        loss.block_until_ready()

    return out, run_once


def count_dots(hlo: str) -> int:
    """int. Matrix multiplications in optimised HLO text."""
    return len(re.findall(r" dot\(", hlo))


def xla_total_bytes(folder: str) -> int:
    """int. "Total bytes used" of the buffer assignment XLA dumped for the
    compiled forward and backward pass: its arguments, outputs and the
    temporaries at their peak (the heap simulator's packing)."""
    paths = glob.glob(os.path.join(folder, "*buffer-assignment.txt"))
    if not paths:
        raise SystemExit(f"XLA dumped no buffer assignment into {folder}")
    totals = []
    for path in paths:
        with open(path) as f:
            found = re.search(r"^Total bytes used: (\d+)", f.read(), re.M)
        if found:
            totals.append(int(found.group(1)))
    return max(totals)


def tf_step(model, opt, images, labels):
    """(memory dict, one-step callable), split as the trainer splits it
    (keras_vit/training/trainer.py): the forward and backward pass
    XLA-compiled, the update outside."""
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def loss_and_grads(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_of(labels, model(images, training=True))
        return loss, tape.gradient(loss, model.trainable_variables)

    @tf.function
    def step(images, labels):
        loss, grads = loss_and_grads(images, labels)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    images, labels = tf.constant(images), tf.constant(labels)
    # Compiling is enough for the buffer assignment: no step runs (nor is
    # its memory taken) unless the step is timed.
    for old in glob.glob(os.path.join(DUMP, "*")):
        os.remove(old)
    hlo = loss_and_grads.experimental_get_compiler_ir(images, labels)(
        stage="optimized_hlo"
    )
    state = sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                for v in opt.variables)
    out = {"xla_bytes": xla_total_bytes(DUMP), "optimizer_bytes": state,
           "dots_compiled": count_dots(hlo)}
    out["peak_bytes"] = out["xla_bytes"] + state

    def run_once():
        float(step(images, labels))

    return out, run_once


def prepare(spec: Dict[str, Any], remat: str):
    """(memory dict, one-step callable, model) of the spec's model."""
    keras.utils.set_random_seed(0)
    model = build_model(dict(spec, remat=remat))
    opt = optimizer()
    opt.build(model.trainable_variables)
    images, labels = batch(spec)
    make = jax_step if spec["backend"] == "jax" else tf_step
    memory, run_once = make(model, opt, images, labels)
    memory["params"] = int(model.count_params())
    return memory, run_once


def measure_memory(spec: Dict[str, Any]) -> Dict[str, Any]:
    return prepare(spec, spec["remat"])[0]


def measure_time(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Wall and CPU seconds per step of each policy in spec["policies"]:
    one untimed step each, then `steps` rounds that run each policy's step
    in turn, so that load from other processes hits all of them alike.
    The medians over the rounds."""
    runs = {p: prepare(spec, p)[1] for p in spec["policies"]}
    for run_once in runs.values():
        run_once()  # the first call compiles (TensorFlow) and warms up
    samples = {p: {"wall": [], "cpu": []} for p in runs}
    for _ in range(spec["steps"]):
        for policy, run_once in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            run_once()
            samples[policy]["cpu"].append(time.process_time() - cpu)
            samples[policy]["wall"].append(time.perf_counter() - wall)
    return {p: {"step_seconds": statistics.median(s["wall"]),
                "step_cpu_seconds": statistics.median(s["cpu"]),
                "samples": s} for p, s in samples.items()}


def main(spec: Dict[str, Any]) -> Dict[str, Any]:
    if keras.backend.backend() != spec["backend"]:
        raise SystemExit(f"run with KERAS_BACKEND={spec['backend']}")
    if spec["dtype"] == "bfloat16":
        keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        if spec.get("policies"):
            out = measure_time(spec)
        else:
            out = measure_memory(spec)
    finally:
        shutil.rmtree(DUMP, ignore_errors=True)
    # ru_maxrss: this process's peak resident set, in KiB on Linux.
    out["max_rss_bytes"] = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    )
    return out


if __name__ == "__main__":
    print(json.dumps(main(json.loads(sys.argv[1]))))
