"""Serving latency of an exported SavedModel against Keras on the same model.

    python benchmarks/export_latency.py --variant Ti/16 --image_size 224 \
        --batch_sizes 1,32 --repeats 10 --output benchmarks/results/export

Exports a freshly initialised model with
`keras_vit.export.saved_model.export_model`, reloads it with
`tf.saved_model.load` (what TF Serving runs, minus the server) and times,
per batch size, milliseconds per image (median over `--repeats` timed
calls after `--warmup` untimed ones) of:

  * savedmodel/serving_default: JPEG bytes in; decoding, resizing and the
    model all in the graph;
  * savedmodel/predict_images: float32 pixels at the input size in;
  * keras/predict: `model.predict` on images already preprocessed;
  * keras/predict_on_batch: the same without predict's per-call set-up;
  * keras/eager_preprocess+predict_on_batch: eager decoding and
    preprocessing with `keras_vit.data.preprocessing`, then `predict_on_batch`:
    the Keras counterpart of serving_default.

Calls of the different paths are interleaved repeat by repeat, so load from
other processes hits all of them alike. Writes NAME.json and NAME.md for
`--output NAME`; the time to export is reported too.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Importable as a script (python benchmarks/export_latency.py) from the repo.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402, F401

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import throughput_report  # noqa: E402  (beside this file)

from keras_vit import create_model  # noqa: E402
from keras_vit.data import preprocessing  # noqa: E402
from keras_vit.export.saved_model import export_model  # noqa: E402
from keras_vit.storage.atomic import atomic_write  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The benchmark's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", default="Ti/16", help="e.g. Ti/16, B/16")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--batch_sizes", default="1,32",
                   help="comma-separated batch sizes")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--source_size", type=int, nargs=2, default=(375, 500),
                   metavar=("HEIGHT", "WIDTH"),
                   help="size of the JPEG images sent to serving_default")
    p.add_argument("--export_dir", default=None,
                   help="where to export (default: a temporary folder)")
    p.add_argument("--output", default=None,
                   help="write NAME.json and NAME.md")
    return p


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """argv: list of str or None. Command-line arguments (sys.argv if None).
    Refuses (a usage error: one line, exit status 2) what measures
    nothing; `args.batch_list` holds the batch sizes."""
    p = build_parser()
    args = p.parse_args(argv)
    throughput_report.at_least(p, args, dict(image_size=1, repeats=1,
                                             warmup=0))
    if min(args.source_size) < 1:
        p.error(f"--source_size must be >= 1, got {args.source_size}")
    throughput_report.checked_variant(p, "--variant", args.variant)
    args.batch_list = throughput_report.whole_numbers(
        p, "--batch_sizes", args.batch_sizes)
    return args


def make_jpegs(count: int, size: Sequence[int], seed: int = 0) -> List[bytes]:
    """list of bytes. Smooth random colour images encoded as JPEG."""
    rng = np.random.RandomState(seed)
    images = []
    for _ in range(count):
        small = rng.uniform(0, 255, (8, 8, 3)).astype(np.float32)
        image = tf.image.resize(small, size, method="bicubic")
        image = tf.cast(tf.clip_by_value(image, 0, 255), tf.uint8)
        images.append(tf.io.encode_jpeg(image, quality=90).numpy())
    return images


def time_interleaved(
    fns: Dict[str, Callable[[], object]], repeats: int, warmup: int
) -> Dict[str, List[float]]:
    """{name: [seconds per call]}, the calls of all `fns` interleaved."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return samples


def run(args: argparse.Namespace) -> dict:
    """dict. All settings, the export time and every latency sample."""
    model = create_model(args.variant, num_classes=args.num_classes,
                         image_size=args.image_size, head_zero_init=False)
    size = (args.image_size, args.image_size)
    export_dir = args.export_dir or tempfile.mkdtemp(prefix="export_bench_")
    start = time.perf_counter()
    path = export_model(model, export_dir, model_name="bench")
    export_seconds = time.perf_counter() - start
    start = time.perf_counter()
    loaded = tf.saved_model.load(path)
    load_seconds = time.perf_counter() - start
    serving = loaded.signatures["serving_default"]
    pixels_fn = loaded.signatures["predict_images"]

    results = {}
    batch_sizes = args.batch_list
    jpegs = make_jpegs(max(batch_sizes), args.source_size)
    for batch in batch_sizes:
        data = tf.constant(jpegs[:batch])
        pixels = tf.stack([
            preprocessing.resize(preprocessing.decode_image(d), size)
            for d in data
        ])
        preprocessed = (pixels.numpy() / 127.5 - 1.0).astype(np.float32)

        def eager_then_keras():
            return model.predict_on_batch(eager_x(data, size))

        fns = {
            "savedmodel/serving_default": lambda: serving(
                image_bytes=data)["probabilities"].numpy(),
            "savedmodel/predict_images": lambda: pixels_fn(
                images=pixels)["probabilities"].numpy(),
            "keras/predict": lambda: model.predict(
                preprocessed, batch_size=batch, verbose=0),
            "keras/predict_on_batch": lambda: model.predict_on_batch(
                preprocessed),
            "keras/eager_preprocess+predict_on_batch": eager_then_keras,
        }
        samples = time_interleaved(fns, args.repeats, args.warmup)
        results[batch] = {
            name: {
                "ms_per_image": 1e3 * statistics.median(s) / batch,
                "ms_per_batch": 1e3 * statistics.median(s),
                "samples_s": s,
            }
            for name, s in samples.items()
        }
        # Same answers: the export must not trade accuracy for speed.
        got = serving(image_bytes=data)["probabilities"].numpy()
        want = tf.nn.softmax(model.predict_on_batch(eager_x(data, size)))
        results[batch]["max_abs_diff_probabilities"] = float(
            np.abs(got - want.numpy()).max())
    return {
        "variant": args.variant,
        "image_size": args.image_size,
        "num_classes": args.num_classes,
        "source_jpeg_size": list(args.source_size),
        "repeats": args.repeats,
        "export_seconds": export_seconds,
        "load_seconds": load_seconds,
        "devices": [d.name for d in tf.config.list_logical_devices()],
        "machine": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "loadavg_at_end": os.getloadavg(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "results": results,
    }


def eager_x(data, size) -> np.ndarray:
    """np.ndarray. `data` decoded and preprocessed eagerly, batched."""
    return np.stack([
        preprocessing.preprocess_eval(preprocessing.decode_image(d),
                                      size).numpy()
        for d in data
    ])


def markdown(report: dict) -> str:
    """str. A table of ms/image per path and batch size."""
    batches = list(report["results"])
    names = [n for n in report["results"][batches[0]]
             if n != "max_abs_diff_probabilities"]
    lines = [
        f"ViT-{report['variant']} at {report['image_size']}, "
        f"{report['num_classes']} classes; JPEG inputs "
        f"{report['source_jpeg_size'][0]}x{report['source_jpeg_size'][1]}; "
        f"median of {report['repeats']} repeats; "
        f"{report['cpu_count']} CPUs, load at end "
        f"{report['loadavg_at_end'][0]:.1f}; TF {report['tensorflow']}, "
        f"Keras {report['keras']}.",
        "",
        f"Export: {report['export_seconds']:.1f} s (incl. verification); "
        f"load: {report['load_seconds']:.1f} s.",
        "",
        "| path | " + " | ".join(f"batch {b} ms/image" for b in batches)
        + " |",
        "|---|" + "---:|" * len(batches),
    ]
    for name in names:
        cells = [f"{report['results'][b][name]['ms_per_image']:.2f}"
                 for b in batches]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    diffs = ", ".join(
        f"batch {b}: {report['results'][b]['max_abs_diff_probabilities']:.1e}"
        for b in batches)
    lines += ["", f"max |probabilities SavedModel - Keras|: {diffs}"]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    report = run(args)
    table = markdown(report)
    print(table)
    if args.output:
        atomic_write(args.output + ".json", json.dumps(report, indent=2))
        atomic_write(args.output + ".md", table)


if __name__ == "__main__":
    main()
