r"""What RandAugment costs the host per training image, as the training
pipeline applies it (`keras_vit.data.augment.rand_augment`, one image at
a time inside a tf.data map with its own stateless seed): keras_vit's
layer, which runs only each slot's chosen op, against the same layer with
Keras's own `RandAugment.transform_images`, which runs all 11 ops on
every image and keeps the chosen one. Both draw the same ops and
strengths and give the same pixels (checked here on every image).

    python benchmarks/augment_cost.py --num_ops=2 --magnitude=15 \
        --image_size=224 --images=64 --repeats=5 \
        --output=benchmarks/results/augment_cost

A serial map (one image at a time, one thread: `tf.data` options
`private_threadpool_size=1`), so that the time is the CPU time of one
core; the two ways alternate, `--repeats` times, each over the same
`--images` photos (scikit-learn's two sample photos, random crops resized
to `--image_size`). Reported: the median milliseconds per image of each,
and their ratio.

Writes NAME.json and NAME.md for `--output=NAME`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import keras_vit  # noqa: E402, F401

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import throughput  # noqa: E402  (beside this file: machine_info)
import throughput_report as report  # noqa: E402
from sklearn.datasets import load_sample_images  # noqa: E402

from keras_vit.data import augment  # noqa: E402


class KerasOwnTransform(augment.SignedRandAugment):
    """The same layer, transforming as Keras's RandAugment does."""

    transform_images = keras.layers.RandAugment.transform_images


def photos(count: int, size: int, seed: int = 0) -> np.ndarray:
    """`count` random crops of the sample photos, resized to `size`."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        image = load_sample_images().images[i % 2]
        h, w, _ = image.shape
        side = int(rng.integers(size, min(h, w) + 1))
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        crop = tf.image.resize(image[y:y + side, x:x + side], (size, size))
        out.append(crop.numpy())
    return np.stack(out).astype(np.float32)


def serial_map(images: np.ndarray, fn) -> tf.data.Dataset:
    """`fn(image, (0, index))` over `images`, one at a time on one
    thread."""
    ds = tf.data.Dataset.from_tensor_slices(images).enumerate().map(
        lambda i, x: fn(x, tf.stack([tf.constant(0, tf.int64), i])))
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1
    return ds.with_options(options)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num_ops", type=int, default=2)
    parser.add_argument("--magnitude", type=float, default=15)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--images", type=int, default=64)
    report.add_repeats_and_output(parser)
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args, command = report.parse_counts(
        parser, argv, ("num_ops", "image_size", "images", "repeats"),
        "augment_cost.py")
    if args.magnitude < 0:
        parser.error(f"--magnitude must be >= 0, got {args.magnitude:g}")
    machine = throughput.machine_info()
    images = photos(args.images, args.image_size)
    factor = augment.randaugment_factor(args.magnitude)
    ways = {}
    for name, cls in (("keras_vit", augment.SignedRandAugment),
                      ("keras_own", KerasOwnTransform)):
        layer = cls(value_range=(0, 255), num_ops=args.num_ops,
                    factor=factor, seed=0)
        ways[name] = serial_map(
            images, lambda x, s, layer=layer: layer(x, training=True, seed=s))
    outs = {name: np.stack(list(ds.as_numpy_iterator()))  # traced, warm
            for name, ds in ways.items()}
    if not np.array_equal(outs["keras_vit"], outs["keras_own"]):
        raise SystemExit("FAIL: the two ways give other images")
    ms: Dict[str, List[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, ds in ways.items():
            start = time.perf_counter()
            for _ in ds:
                pass
            ms[name].append(1e3 * (time.perf_counter() - start) / len(images))
    medians = {k: statistics.median(v) for k, v in ms.items()}
    result = {
        "command": command, "args": vars(args), "machine": machine,
        "keras_factor": factor, "ms_per_image": ms,
        "median_ms_per_image": medians,
        "speedup": medians["keras_own"] / medians["keras_vit"],
    }
    report.finish(args.output, result, markdown)


def markdown(result) -> str:
    m, args = result["machine"], result["args"]
    rows = [f"| {label} | {result['median_ms_per_image'][name]:.1f} | "
            + ", ".join(f"{v:.1f}" for v in result["ms_per_image"][name])
            + " |" for name, label in (
                ("keras_vit", "keras_vit (the chosen op of each slot)"),
                ("keras_own", "Keras's transform (every op, one kept)"))]
    return "\n".join([
        "# RandAugment's cost per training image",
        "",
        f"`{result['command']}`",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores, one thread; load "
        f"average (1 min) at start {m['load_average'][0]:.2f}, at the end "
        f"{m['load_average_end'][0]:.2f}.",
        f"- randaug({args['num_ops']}, {args['magnitude']:g}) (Keras "
        f"factor {result['keras_factor']:.3f}) on {args['images']} "
        f"{args['image_size']} x {args['image_size']} photos, "
        f"{args['repeats']} repeats; the same images both ways.",
        "",
        "| RandAugment | ms / image (median) | ms / image, each repeat |",
        "|---|---|---|",
        *rows,
        "",
        f"Keras's transform / keras_vit's: {result['speedup']:.1f}x.",
        "",
    ])


if __name__ == "__main__":
    main()
