"""The attention op alone, under JAX: keras_vit's one path against cuDNN's
fused attention, at a ViT's shapes, forward (inference) and forward +
backward (training).

    python benchmarks/attention_kernels.py --variant B/16 --image_size 224 \
        --batch_size 128 --dtype bfloat16 \
        --output benchmarks/results/gpu/attention_kernels_b16_224_b128

Every candidate takes what keras_vit's attention layer has after its qkv
projection, `(batch, tokens, 3, heads, head_dim)` with the query scale
already folded in, and returns `(batch, tokens, width)` for the output
projection:

  * `one_path`: the library's computation (`MultiHeadSelfAttention.call`):
    q, k, v head-major, Q K^T, a float32 softmax, A V, heads back together;
  * `cudnn`: `jax.nn.dot_product_attention(implementation="cudnn")` on q,
    k, v as they come (batch, tokens, heads, head_dim), no mask, no bias;
  * `cudnn_even`: the same with the tokens padded to an even count and
    `key_value_seq_lengths` (and `query_seq_lengths`) set to the real
    count, so that the padded key takes no weight; the padded query row is
    sliced off. JAX's fused-attention training rule passes an empty bias
    array where there is none, and then asks for even sequence lengths,
    which an odd token count (197 at 224, 577 at 384) fails; the padding
    is what makes the training kernel usable at these shapes;
  * `xla`: `jax.nn.dot_product_attention(implementation="xla")`, JAX's
    own unfused attention, for reference.

Each is jitted and timed (the median of `--repeats`, each about
`--min_time` seconds of calls queued back to back and waited for once);
its output and, for training, its gradient are compared with `one_path`'s
in float32. A candidate JAX refuses is recorded with JAX's reason. Writes
NAME.json and NAME.md for `--output NAME`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

if __name__ == "__main__":
    os.environ.setdefault("KERAS_BACKEND", "jax")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import throughput  # noqa: E402  (beside this file)
import throughput_report  # noqa: E402

CANDIDATES = ("one_path", "cudnn", "cudnn_even", "xla")
MODES = ("infer", "train")


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The script's options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", default="B/16")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--dtype", choices=("float32", "bfloat16"),
                   default="bfloat16")
    p.add_argument("--modes", default="infer,train",
                   help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--candidates", default=",".join(CANDIDATES),
                   help="comma-separated subset of " + ",".join(CANDIDATES))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--min_time", type=throughput_report.seconds, default=0.3,
                   help="seconds of calls per repeat")
    throughput.add_size_options(p)
    return p


# ------------------------------------------------------------ candidates
def one_path(qkv: jax.Array) -> jax.Array:
    """keras_vit's attention after the qkv projection (attention.py)."""
    b, t, _, h, hd = qkv.shape
    q, k, v = jnp.transpose(qkv, (2, 0, 3, 1, 4))
    logits = jnp.matmul(q, jnp.swapaxes(k, -1, -2))
    weights = jax.nn.softmax(logits.astype("float32"), axis=-1)
    y = jnp.matmul(weights.astype(v.dtype), v)
    return jnp.reshape(jnp.transpose(y, (0, 2, 1, 3)), (b, t, h * hd))


def cudnn(qkv: jax.Array) -> jax.Array:
    """cuDNN's fused attention, no mask and no bias."""
    b, t, _, h, hd = qkv.shape
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    y = jax.nn.dot_product_attention(q, k, v, scale=1.0,
                                     implementation="cudnn")
    return jnp.reshape(y, (b, t, h * hd))


def cudnn_even(qkv: jax.Array) -> jax.Array:
    """cuDNN's fused attention on an even token count: the padding key
    is outside `key_value_seq_lengths`, the padding query is dropped."""
    b, t, _, h, hd = qkv.shape
    pad = t % 2
    if pad:
        qkv = jnp.pad(qkv, ((0, 0), (0, pad), (0, 0), (0, 0), (0, 0)))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    lengths = jnp.full((b,), t, dtype="int32")
    y = jax.nn.dot_product_attention(
        q, k, v, scale=1.0, query_seq_lengths=lengths,
        key_value_seq_lengths=lengths, implementation="cudnn")
    return jnp.reshape(y[:, :t], (b, t, h * hd))


def xla(qkv: jax.Array) -> jax.Array:
    """JAX's unfused attention."""
    b, t, _, h, hd = qkv.shape
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    y = jax.nn.dot_product_attention(q, k, v, scale=1.0,
                                     implementation="xla")
    return jnp.reshape(y, (b, t, h * hd))


FUNCTIONS: Dict[str, Callable] = {
    "one_path": one_path, "cudnn": cudnn, "cudnn_even": cudnn_even,
    "xla": xla,
}


def step(fn: Callable, mode: str) -> Callable:
    """The jitted function to time: the forward output, or (training) the
    gradient of a fixed projection of it with respect to qkv."""
    if mode == "infer":
        return jax.jit(fn)

    def loss(qkv, w):
        return jnp.sum(fn(qkv).astype("float32") * w)

    return jax.jit(jax.grad(loss))


def time_calls(run: Callable, repeats: int, min_time: float) -> List[float]:
    """[seconds per call], one per repeat: calls queued back to back and
    waited for once."""
    start = time.perf_counter()
    jax.block_until_ready(run())
    one = max(time.perf_counter() - start, 1e-6)
    n = max(1, min(2000, round(min_time / one)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n):
            out = run()
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / n)
    return samples


def measure(args: argparse.Namespace) -> Dict[str, Any]:
    """dict. Every (mode, candidate) row, with the flops, time and error."""
    dims = throughput.sizes(args)
    heads, width = dims["num_heads"], dims["hidden_size"]
    tokens = (args.image_size // dims["patch_size"]) ** 2 + 1
    rng = np.random.default_rng(0)
    qkv = jnp.asarray(rng.standard_normal(
        (args.batch_size, tokens, 3, heads, width // heads)), args.dtype)
    hd = width // heads
    qkv = qkv * jnp.asarray([hd ** -0.25, hd ** -0.25, 1.0],
                            args.dtype)[:, None, None]
    w = jnp.asarray(rng.standard_normal((args.batch_size, tokens, width)),
                    "float32")
    # 2 products of (tokens x tokens x head_dim) per head: Q K^T and A V.
    fwd_flops = 2 * 2 * args.batch_size * tokens * tokens * width
    rows = []
    reference: Dict[str, Any] = {}
    for mode in args.modes_list:
        for name in args.candidates_list:
            fn = step(FUNCTIONS[name], mode)
            row: Dict[str, Any] = {"mode": mode, "candidate": name}
            try:
                out = jax.block_until_ready(
                    fn(qkv) if mode == "infer" else fn(qkv, w))
            except Exception as e:  # noqa: BLE001  (JAX's refusal)
                row["refused"] = f"{type(e).__name__}: {e}".splitlines()[0]
                rows.append(row)
                print(f"{mode} {name}: refused: {row['refused']}",
                      file=sys.stderr)
                continue
            out = np.asarray(out, "float32")
            if name == "one_path":
                reference[mode] = out
            if mode in reference:
                ref = reference[mode]
                row["max_abs_error"] = float(np.max(np.abs(out - ref)))
                row["ref_max_abs"] = float(np.max(np.abs(ref)))
            call = ((lambda: fn(qkv)) if mode == "infer"
                    else (lambda: fn(qkv, w)))
            samples = time_calls(call, args.repeats, args.min_time)
            row["ms"] = 1e3 * statistics.median(samples)
            row["ms_all"] = [1e3 * s for s in samples]
            flops = fwd_flops * (1 if mode == "infer" else 3)
            row["tflops_per_s"] = flops / statistics.median(samples) / 1e12
            rows.append(row)
            print(f"{mode} {name}: {row['ms']:.3f} ms", file=sys.stderr)
    for row in rows:
        base = next((r for r in rows if r["mode"] == row["mode"]
                     and r["candidate"] == "one_path" and "ms" in r), None)
        if base and "ms" in row:
            row["speedup_vs_one_path"] = base["ms"] / row["ms"]
    return {"tokens": tokens, "sizes": dims, "rows": rows,
            "attention_flops_forward": fwd_flops}


def report(result: Dict[str, Any]) -> str:
    """str. The markdown table of a run."""
    a, m = result["args"], result["machine"]
    lines = [
        f"# Attention kernels: ViT {a['variant']}, {result['tokens']} tokens",
        "", f"`{result['command']}`", "",
        f"- Machine: {m.get('device_kind', m['cpu'])}; jax {m.get('jax')}.",
        f"- Batch {a['batch_size']}, {a['dtype']}, heads "
        f"{result['sizes']['num_heads']}, head dim "
        f"{result['sizes']['hidden_size'] // result['sizes']['num_heads']}; "
        "one layer's attention after the qkv projection; training = the "
        "gradient with respect to qkv.", "",
        "| mode | candidate | ms | vs one_path | TFLOP/s | max abs error "
        "(of max) | refused |", "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        err = (f"{r['max_abs_error']:.2g} ({r['ref_max_abs']:.2g})"
               if "max_abs_error" in r else "")
        lines.append(
            f"| {r['mode']} | {r['candidate']} | "
            + (f"{r['ms']:.3f} | {r.get('speedup_vs_one_path', 1):.2f}x | "
               f"{r['tflops_per_s']:.0f}" if "ms" in r else " | | ")
            + f" | {err} | {r.get('refused', '')[:120]} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The script's arguments, refused with a usage error (one line, exit
    status 2) where they measure nothing; `args.modes_list` and
    `args.candidates_list` hold the names."""
    p = build_parser()
    args = p.parse_args(argv)
    throughput_report.at_least(p, args, dict(batch_size=1, repeats=1))
    throughput.check_size_args(p, args)
    args.modes_list = throughput_report.names_in(
        p, "--modes", args.modes, MODES)
    args.candidates_list = throughput_report.names_in(
        p, "--candidates", args.candidates, CANDIDATES)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    result = measure(args)
    result.update(
        args=vars(args), machine=throughput.machine_info(),
        command="python benchmarks/attention_kernels.py "
        + " ".join(argv if argv is not None else sys.argv[1:]))
    text = report(result)
    throughput_report.write_results(args.output, result, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
