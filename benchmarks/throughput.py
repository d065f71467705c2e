"""Training and inference throughput of keras_vit models on this machine.

    python benchmarks/throughput.py --variant B/16 --image_size 224 \
        --batch_size 8 --dtype float32 --xla both --compare_keras_hub \
        --mode train,infer --repeats 5 --output benchmarks/results/b16_cpu

One run measures, for each mode (`--mode`) and XLA setting:
  * images/s as the median over `--repeats` timed repeats, after warm-up
    (the first call compiles); a training step is forward + backward + AdamW
    update through Keras's compiled train function (`train_on_batch`), an
    inference step is `predict_on_batch`;
  * model FLOPs utilisation (MFU): analytic model FLOPs/s over the machine's
    own matmul ceiling (a large square matmul, measured in the same run,
    before and after the models); each model is credited with the FLOPs it
    does (keras_vit's last block computes the class token only);
  * the peak resident memory of the process while the model was built and
    warmed up (Linux VmHWM, reset per model when the kernel allows it).
With `--compare_keras_hub` the same configuration built from keras-hub's
ViTBackbone (+ a Dense head on the class token) is timed side by side, its
repeats interleaved with ours so that load from other processes hits both
alike; every repeat starts with `--rewarm` untimed steps, since the first
step after the other model ran is slower. keras-hub is optional and
imported only here. With `--jax` the same measurements run again in a
subprocess under KERAS_BACKEND=jax. `--compare_tree NAME=DIR` (repeatable)
also times keras_vit as another checkout at DIR has it (an earlier commit,
a candidate change), interleaved with the others in the same process: the
way to measure what one code path gains. `--compare_dpa` also times
keras_vit with `keras.ops.dot_product_attention` (cuDNN's fused attention
where the JAX backend can use it) in place of its attention's two matmuls
and softmax, reported as keras_vit_dpa, a benchmark candidate
(`DotProductSelfAttention` below; on JAX it pads an odd token count to an
even one so that cuDNN also takes the training step). It was measured
before the library took cuDNN's fused attention on NVIDIA GPUs
(keras_vit/fused_attention.py), which pads only where JAX refuses the
odd count (the training kernel). `--compare_one_path` also times
keras_vit with that fused attention turned off, reported as
keras_vit_one_path: the library's portable path in the same process, the
way to measure what the fused attention gains where the library takes it
(`OnePathSelfAttention` below).

`--mode train_jit` (JAX) times the training step compiled once from the
model's `stateless_call` and the optimizer's `stateless_apply`, its state
kept on the device from step to step: the device's step without
`train_on_batch`'s per-call work (gathering the state, writing it back
into the variables, the logs copied to the host), as `infer_jit` is
inference without `predict_on_batch`'s. `--process_per_config` runs each
configuration (mode and XLA setting) in a fresh child process and merges
their rows into one result: in one process, a configuration compiled
after an earlier one was cleared has been measured much slower on a GPU
(docs/performance.md, "On a GPU").

On the JAX backend every row also has the device memory of the model's
step: XLA's plan of the compiled step (`memory_analysis()`: temporaries,
arguments, outputs) and, where the device reports it
(`memory_stats()`, GPUs and TPUs), the allocator's peak while the model was
built and warmed up, and `cudnn_attention`: the cuDNN fused-attention
calls in the compiled step, by custom-call target (`{}`: none; where
the step's HLO could not be read, None). `--deadline S` cuts repeats and
skips configurations once S seconds have passed, so that a run fits a
fixed time (benchmarks/accelerator.sh).

Writes NAME.json (every sample) and NAME.md (a table) for `--output NAME`.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Importable as a script (python benchmarks/throughput.py) from the repo root.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# First: keras_vit holds TensorFlow's start-up notices back while it
# loads Keras (keras_vit.quiet_start).
import keras_vit  # noqa: E402

# isort: split
import keras  # noqa: E402
import numpy as np  # noqa: E402
import throughput_report as report  # noqa: E402  (beside this file)

import keras_vit.attention  # noqa: E402
import keras_vit.layers  # noqa: E402
from keras_vit.attention import MultiHeadSelfAttention  # noqa: E402
from keras_vit.model import decode_variant  # noqa: E402

START = time.monotonic()  # --deadline counts from here
DPA = "keras_vit_dpa"
ONE_PATH = "keras_vit_one_path"
MODES = ("train", "train_jit", "infer", "infer_jit")
TRAINING = ("train", "train_jit")  # 3x the forward FLOPs
PROFILED = ("keras_vit", "keras_hub")  # what a profile's --models names
SIZE_NAMES = ("patch_size", "hidden_size", "num_layers", "num_heads",
              "mlp_dim")  # the sizes add_size_options overrides


def build_parser() -> argparse.ArgumentParser:
    """argparse.ArgumentParser. The benchmark's options (parse_args also
    checks their values)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--variant", default="B/16", help="e.g. Ti/16, B/16")
    p.add_argument("--image_size", type=int, default=224)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--dtype", default="float32",
                   choices=("float32", "bfloat16"))
    p.add_argument("--xla", default="both", choices=("on", "off", "both"))
    p.add_argument("--mode", default="train,infer",
                   help="comma-separated subset of train,train_jit,infer,"
                        "infer_jit (train: train_on_batch and infer: "
                        "predict_on_batch, as Keras users call them; "
                        "train_jit (JAX): the training step compiled once, "
                        "its state kept on the device; infer_jit: the "
                        "model's stateless_call compiled once and called on "
                        "inputs already on the device)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--steps", type=int, default=0,
                   help="steps per repeat; 0 picks enough for --min_time")
    p.add_argument("--min_time", type=report.seconds, default=5.0,
                   help="seconds per repeat when --steps is 0")
    p.add_argument("--warmup", type=int, default=2,
                   help="untimed steps before timing (the first compiles)")
    p.add_argument("--rewarm", type=int, default=1,
                   help="untimed steps at the start of every repeat (the "
                        "first step after another model ran is slower)")
    p.add_argument("--num_classes", type=int, default=1000)
    p.add_argument("--matmul_size", type=int, default=4096)
    p.add_argument("--matmul_repeats", type=int, default=5)
    p.add_argument("--compare_keras_hub", action="store_true")
    p.add_argument("--jax", action="store_true",
                   help="also run under KERAS_BACKEND=jax (subprocess)")
    p.add_argument("--compare_tree", action="append", default=[],
                   metavar="NAME=DIR",
                   help="also time keras_vit as imported from the checkout "
                        "at DIR, reported as NAME (repeatable)")
    p.add_argument("--compare_dpa", action="store_true",
                   help="also time keras_vit with keras.ops."
                        "dot_product_attention in its attention, reported "
                        f"as {DPA}")
    p.add_argument("--compare_one_path", action="store_true",
                   help="also time keras_vit with its cuDNN fused "
                        "attention turned off (its portable path "
                        f"everywhere), reported as {ONE_PATH}")
    p.add_argument("--deadline", type=float, default=0.0,
                   help="seconds after the start: past it, repeats are cut "
                        "(one is kept) and configurations skipped; 0: none")
    p.add_argument("--process_per_config", action="store_true",
                   help="run each configuration (mode, XLA setting) in a "
                        "fresh child process and merge the rows")
    add_size_options(p)
    return p


def add_size_options(p: argparse.ArgumentParser) -> None:
    """The options that override the variant's sizes, and --output (this
    script's and benchmarks/step_profile.py's)."""
    for name in SIZE_NAMES:
        p.add_argument(f"--{name}", type=int, default=None,
                       help="override the variant's size")
    p.add_argument("--output", required=True,
                   help="path prefix: writes PREFIX.json and PREFIX.md")


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """argv: list of str or None. Command-line arguments (sys.argv if None)."""
    p = build_parser()
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.mode.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        p.error(f"--mode must list some of {', '.join(MODES)}, got "
                f"{args.mode!r}")
    args.modes = modes
    args.trees = {}
    for spec in args.compare_tree:
        name, _, folder = spec.partition("=")
        if not name or not folder:
            p.error(f"--compare_tree {spec!r}: NAME=DIR, where DIR holds "
                    "a keras_vit package")
        if (name in ("keras_vit", "keras_hub", DPA, ONE_PATH)
                or name in args.trees):
            p.error(f"--compare_tree name {name!r} is taken")
        args.trees[name] = os.path.abspath(folder)
    for name in ("batch_size", "repeats", "image_size", "matmul_size",
                 "matmul_repeats", "num_classes"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1")
    if args.deadline < 0:
        p.error("--deadline must be >= 0 (0: no deadline)")
    report.at_least(p, args, dict(steps=0, warmup=0, rewarm=0))
    check_size_args(p, args)
    return args


def check_size_args(p: argparse.ArgumentParser,
                    args: argparse.Namespace) -> Dict[str, int]:
    """`sizes(args)`, or the parser's usage error (one line, exit status
    2) naming the fix: a --variant that is no plain ViT, a size below 1, a
    head count that does not divide the width, an image that does not
    divide into patches (this script's parse_args and those of the
    scripts that take `add_size_options`)."""
    report.at_least(p, args, dict.fromkeys(("image_size",) + SIZE_NAMES, 1))
    report.checked_variant(p, "--variant", args.variant, plain=True)
    dims = sizes(args)
    if dims["hidden_size"] % dims["num_heads"]:
        p.error(f"--num_heads {dims['num_heads']} does not divide the width "
                f"{dims['hidden_size']} (--hidden_size): pick a head count "
                "that divides it")
    if args.image_size % dims["patch_size"]:
        p.error(f"--image_size {args.image_size} is not divisible by patch "
                f"size {dims['patch_size']}: use a multiple of "
                f"{dims['patch_size']}")
    return dims


def past_deadline(args: argparse.Namespace) -> bool:
    """bool. Whether --deadline seconds have passed since the start."""
    return bool(args.deadline) and time.monotonic() - START > args.deadline


def sizes(args: argparse.Namespace) -> Dict[str, int]:
    """The encoder sizes of the variant (a plain ViT: the FLOP count has
    no ResNet stem; `check_size_args` refuses a hybrid), with the
    command-line overrides."""
    spec = decode_variant(args.variant)
    out = dict(
        patch_size=spec.patch_size, hidden_size=spec.size.hidden_size,
        num_layers=spec.size.num_layers, num_heads=spec.size.num_heads,
        mlp_dim=spec.size.mlp_dim,
    )
    for name in out:
        if getattr(args, name) is not None:
            out[name] = getattr(args, name)
    return out


def forward_flops(
    *, image_size: int, patch_size: int, hidden_size: int, num_layers: int,
    mlp_dim: int, num_classes: int, class_token: bool = True,
    last_block_class_token_only: bool = False, channels: int = 3, **_: Any,
) -> int:
    """int. Forward FLOPs per image (2 per multiply-add) of a plain ViT.

    Counts the matmul work only: patch projection, per block the fused qkv
    projection, the attention logits Q K^T and the weighted sum A V, the
    output projection and the two MLP layers, and the head. Norms, softmax,
    GELU and adds are O(tokens * width) and left out, as is customary.
    With `last_block_class_token_only` (keras_vit's classifiers with token
    pooling) the last block computes the fused qkv projection for every
    token but the attention row, output projection and MLP of the class
    token alone.
    """
    patches = (image_size // patch_size) ** 2
    tokens = patches + int(class_token)
    d = hidden_size

    def block(queries: int) -> int:
        return (
            tokens * d * 3 * d  # qkv
            + 2 * queries * tokens * d  # Q K^T and A V, all heads together
            + queries * d * d  # out
            + 2 * queries * d * mlp_dim  # MLP
        )

    macs = patches * patch_size * patch_size * channels * d
    last = 1 if last_block_class_token_only and class_token else tokens
    macs += (num_layers - 1) * block(tokens) + block(last) + d * num_classes
    return 2 * macs


def _read_status(field: str) -> Optional[int]:
    try:
        with open("/proc/self/status") as f:
            found = [ln for ln in f if ln.startswith(field + ":")]
        return int(found[0].split()[1]) if found else None  # kB
    except OSError:
        return None


def reset_peak_memory() -> bool:
    """bool. Resets VmHWM to the current RSS (Linux >= 4.0); True if done."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_mb() -> Dict[str, float]:
    """dict. Current and peak resident memory of this process in MiB."""
    peak = _read_status("VmHWM")
    if peak is None:  # not Linux: ru_maxrss (kB on Linux, bytes on macOS)
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = rss // 1024 if sys.platform == "darwin" else rss
    current = _read_status("VmRSS") or peak
    return {"rss_mb": current / 1024, "peak_mb": peak / 1024}


def machine_info() -> Dict[str, Any]:
    """dict. CPU model, core count, library versions and load average."""
    cpu = platform.processor() or platform.machine()
    flags: List[str] = []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and cpu:
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    info: Dict[str, Any] = {
        "cpu": cpu, "cores": os.cpu_count(),
        "simd": [f for f in flags if f.startswith(("avx512", "amx"))
                 or f in ("avx2", "fma")],
        "python": platform.python_version(), "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "load_average": list(os.getloadavg()),
    }
    if info["backend"] == "tensorflow":
        import tensorflow as tf

        info["tensorflow"] = tf.__version__
        devices = tf.config.list_physical_devices()
        info["accelerators"] = [
            d.name for d in devices if d.device_type != "CPU"
        ]
    elif info["backend"] == "jax":
        import jax

        info["jax"] = jax.__version__
        info["accelerators"] = [
            f"{d.platform}:{d.id} {d.device_kind}" for d in jax.devices()
            if d.platform != "cpu"
        ]
        info["device_kind"] = jax.devices()[0].device_kind
    # XLA's options of the run (accelerator.sh --xla-options sets them).
    info["xla_flags"] = os.environ.get("XLA_FLAGS", "").strip()
    return info


def matmul_ceiling(
    size: int, dtype: str, repeats: int
) -> Dict[str, List[float]]:
    """dict. FLOPs of a size^3 matmul per wall second ("wall") and per
    second of this process's CPU time ("cpu"), one sample per repeat.

    A sample times as many products back to back as take about 0.2 s
    (one on a CPU, hundreds on a GPU, where one alone is too short to
    time)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    if keras.backend.backend() == "jax":
        import jax
        import jax.numpy as jnp

        a, b = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
        fn = jax.jit(jnp.matmul)

        def run(n: int = 1) -> None:
            for _ in range(n):  # queued on the device, waited for once
                out = fn(a, b)
            out.block_until_ready()
    else:
        import tensorflow as tf

        a, b = tf.cast(a, dtype), tf.cast(b, dtype)
        fn = tf.function(tf.matmul)

        def run(n: int = 1) -> None:
            for _ in range(n):
                fn(a, b).numpy()
    run()  # warm-up (tracing, thread pools)
    one = _timed(run, 1)[0]
    n = max(1, min(1000, round(0.2 / max(one, 1e-6))))
    samples: Dict[str, List[float]] = {"wall": [], "cpu": []}
    for _ in range(repeats):
        wall, cpu = _timed(lambda: run(n), 1)
        samples["wall"].append(2.0 * size**3 * n / wall)
        samples["cpu"].append(2.0 * size**3 * n / max(cpu, 1e-9))
    return samples


def import_tree(folder: str) -> Callable[..., keras.Model]:
    """`create_model` of the keras_vit package in `folder`, imported beside
    the one in use: that package's modules are set aside while the other's
    import, then put back. Both register their Keras classes under the same
    names, so Keras's registry of serialisable classes is put back too:
    models saved and loaded afterwards in this process get this package's
    classes."""
    ours = [k for k in sys.modules
            if k == "keras_vit" or k.startswith("keras_vit.")]
    saved = {k: sys.modules.pop(k) for k in ours}
    registry = keras.saving.get_custom_objects()
    registered = dict(registry)
    sys.path.insert(0, folder)
    try:
        return importlib.import_module("keras_vit.model").create_model
    finally:
        registry.clear()
        registry.update(registered)
        sys.path.remove(folder)
        for k in [k for k in sys.modules
                  if k == "keras_vit" or k.startswith("keras_vit.")]:
            del sys.modules[k]
        sys.modules.update(saved)


class DotProductSelfAttention(MultiHeadSelfAttention):
    """keras_vit's attention with `keras.ops.dot_product_attention` in
    place of its two batched matmuls and softmax: the same weights, the
    same qkv and output projections (the query scale stays in the qkv
    kernel, so the op's own scale is 1). Keras dispatches the op to cuDNN's
    fused (flash) attention on JAX GPUs where the shapes and dtypes allow,
    otherwise to XLA. A benchmark candidate, not a library path: the
    attention weights and attention dropout, which the op does not give,
    fall back to the library's computation."""

    def call(self, x, training=None, return_attention_scores=False,
             first_token_only=False, flat=False):
        dropout = self.dropout_rate > 0.0 and bool(training)
        if return_attention_scores or dropout:
            return super().call(
                x, training=training,
                return_attention_scores=return_attention_scores,
                first_token_only=first_token_only, flat=flat)
        ops = keras.ops
        length, width = ops.shape(x)[1], ops.shape(x)[2]
        kernel, bias = self._scaled_qkv()
        qkv = ops.add(ops.matmul(ops.reshape(x, (-1, width)), kernel), bias)
        qkv = ops.reshape(qkv, (-1, length, 3, self.num_heads,
                                self.head_dim))
        q, k, v = ops.unstack(qkv, 3, axis=2)  # (batch, tokens, heads, hd)
        if first_token_only:
            q = q[:, :1]
        if keras.backend.backend() == "jax":
            y = jax_fused_attention(q, k, v)
        else:
            y = ops.dot_product_attention(q, k, v, scale=1.0)
        y = self.out(ops.reshape(y, (-1, width)))
        if not flat:
            y = ops.reshape(y, (-1, 1 if first_token_only else length, width))
        return y


def jax_fused_attention(q, k, v):
    """softmax(q k^T) v on JAX, (batch, tokens, heads, head_dim) each: cuDNN's
    fused attention where JAX accepts the shapes, else JAX's XLA attention.

    JAX's fused-attention training rule passes an empty bias array where
    there is none, then asks for even sequence lengths, so an odd token
    count (197 at 224, 577 at 384) is refused for training; the tokens are
    padded to an even count, with `key_value_seq_lengths` (and
    `query_seq_lengths`) the real counts so that the padding key takes no
    weight, and the padding query row is dropped
    (benchmarks/attention_kernels.py times it alone)."""
    import jax
    import jax.numpy as jnp

    batch, queries, tokens = q.shape[0], q.shape[1], k.shape[1]
    pad_q, pad_k = queries % 2, tokens % 2
    if pad_q or pad_k:
        def pad(x, n):
            return jnp.pad(x, ((0, 0), (0, n), (0, 0), (0, 0)))
        q, k, v = pad(q, pad_q), pad(k, pad_k), pad(v, pad_k)
        lengths = {
            "query_seq_lengths": jnp.full((batch,), queries, "int32"),
            "key_value_seq_lengths": jnp.full((batch,), tokens, "int32"),
        }
    else:
        lengths = {}
    try:
        y = jax.nn.dot_product_attention(q, k, v, scale=1.0,
                                         implementation="cudnn", **lengths)
    except Exception:  # noqa: BLE001  (no GPU, or shapes cuDNN refuses)
        y = jax.nn.dot_product_attention(q, k, v, scale=1.0, **lengths)
    return y[:, :queries]


class OnePathSelfAttention(MultiHeadSelfAttention):
    """keras_vit's attention with its cuDNN fused attention turned off:
    the library's portable path on every backend and device, the same
    weights. A benchmark candidate: where the library's rule takes the
    fused kernel (JAX, an NVIDIA GPU, a 16-bit compute dtype), this is
    what the library would run without it."""

    def _fused(self, training, return_attention_scores, first_token_only):
        return False


def create_model_with(attention: type, *args, **kwargs) -> keras.Model:
    """`keras_vit.create_model` with every attention layer an `attention`
    (a subclass of the library's): the encoder blocks build theirs while
    the model is created, so the class they find is swapped for that
    time."""
    layers = keras_vit.layers
    saved = layers.MultiHeadSelfAttention
    layers.MultiHeadSelfAttention = attention
    try:
        return keras_vit.create_model(*args, **kwargs)
    finally:
        layers.MultiHeadSelfAttention = saved


def create_dpa_model(*args, **kwargs) -> keras.Model:
    """`keras_vit.create_model` with every attention layer a
    `DotProductSelfAttention`."""
    return create_model_with(DotProductSelfAttention, *args, **kwargs)


def create_one_path_model(*args, **kwargs) -> keras.Model:
    """`keras_vit.create_model` with every attention layer a
    `OnePathSelfAttention`."""
    return create_model_with(OnePathSelfAttention, *args, **kwargs)


def flash_attention_usable(dims: Dict[str, int], args) -> Dict[str, Any]:
    """dict. Whether `dot_product_attention` can run as cuDNN's fused
    attention for this model's shapes, every token querying and the last
    block's class token alone: `all_tokens` and `class_token` as Keras's
    JAX backend decides it before it tries cuDNN (None where that cannot
    be asked: another backend or Keras), and `jax_cudnn`, what JAX itself
    says when asked for `implementation="cudnn"`, traced (not run) for
    inference and for the gradient that training takes: per query shape
    and mode, `{"accepted": bool, "reason": str}`. Keras's check asks
    only about inference; where JAX refuses, Keras logs the refusal and
    falls back to XLA's attention, so `jax_cudnn` says which one a
    `keras_vit_dpa` row timed."""
    none = {"all_tokens": None, "class_token": None}
    if keras.backend.backend() != "jax":
        return dict(none, jax_cudnn=None)
    import jax
    import jax.numpy as jnp

    dtype = "bfloat16" if args.dtype == "bfloat16" else "float32"
    tokens = (args.image_size // dims["patch_size"]) ** 2 + 1
    heads = dims["num_heads"]
    kv = jnp.zeros((args.batch_size, tokens, heads,
                    dims["hidden_size"] // heads), dtype)
    queries = {"all_tokens": kv, "class_token": kv[:, :1]}

    def attend(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, scale=1.0,
                                            implementation="cudnn")

    def loss(q, k, v):
        return attend(q, k, v).astype("float32").sum()

    probes = {"infer": attend, "train": jax.grad(loss, argnums=(0, 1, 2))}
    verdicts = {}
    for which, q in queries.items():
        verdicts[which] = {}
        for mode, fn in probes.items():
            try:
                jax.eval_shape(fn, q, kv, kv)
                verdicts[which][mode] = {"accepted": True, "reason": ""}
            except Exception as e:  # JAX's refusal, whatever its type
                verdicts[which][mode] = {
                    "accepted": False,
                    "reason": f"{type(e).__name__}: {e}".splitlines()[0]}
    try:
        from keras.src.backend.jax.nn import _can_use_flash_attention
    except ImportError:
        return dict(none, jax_cudnn=verdicts)
    return {
        "all_tokens": bool(_can_use_flash_attention(kv, kv, kv, None)),
        "class_token": bool(_can_use_flash_attention(kv[:, :1], kv, kv,
                                                     None)),
        "jax_cudnn": verdicts,
    }


def build_model(which: str, dims: Dict[str, int], args) -> keras.Model:
    """keras.Model. The classifier to time: ours, another checkout's
    (`--compare_tree`), ours with `dot_product_attention` (`--compare_dpa`),
    ours without the fused attention (`--compare_one_path`) or keras-hub's
    ViT."""
    if which in ("keras_vit", DPA, ONE_PATH) or which in args.trees:
        create = keras_vit.create_model
        if which in args.trees:
            create = import_tree(args.trees[which])
        elif which == DPA:
            create = create_dpa_model
        elif which == ONE_PATH:
            create = create_one_path_model
        return create(
            None, num_classes=args.num_classes, image_size=args.image_size,
            **dims
        )
    import keras_hub  # optional; availability checked by the caller

    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3),
        patch_size=dims["patch_size"], num_layers=dims["num_layers"],
        num_heads=dims["num_heads"], hidden_dim=dims["hidden_size"],
        mlp_dim=dims["mlp_dim"],
    )
    x = backbone.output[:, 0]  # the class token, as in ours
    x = keras.layers.Dense(args.num_classes, dtype="float32", name="head")(x)
    return keras.Model(backbone.input, x, name="keras_hub_vit")


def make_step(model: keras.Model, mode: str, xla: bool, args,
              recorder: Optional["CompiledMemory"] = None) -> Callable:
    """A function running one step on a fixed batch and waiting for it.
    `recorder` keeps XLA's plan of the steps compiled here (train_jit,
    infer_jit); Keras's own steps are recorded by `CompiledMemory` as
    Keras compiles them."""
    model.compile(
        optimizer=keras.optimizers.AdamW(learning_rate=1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=xla,
    )
    rng = np.random.default_rng(0)
    shape = (args.batch_size, args.image_size, args.image_size, 3)
    images = keras.ops.convert_to_tensor(
        rng.uniform(-1, 1, shape).astype("float32")
    )
    labels = keras.ops.convert_to_tensor(
        rng.integers(0, args.num_classes, args.batch_size).astype("int32")
    )
    if mode == "train":
        return lambda: model.train_on_batch(images, labels)
    if mode == "train_jit":
        return compiled_training(model, images, labels, recorder)
    if mode == "infer_jit":
        return compiled_inference(model, images, xla, recorder)
    return lambda: model.predict_on_batch(images)


def compiled_inference(model: keras.Model, images: Any, xla: bool,
                       recorder: Optional["CompiledMemory"] = None
                       ) -> Callable:
    """A function running the model's forward pass compiled once, on
    inputs and weights already on the device, and waiting for it: what a
    serving loop pays per batch, without `predict_on_batch`'s per-call
    work (its data handling, the state it gathers and writes back, the
    copy of the outputs to the host). On JAX the model's
    `stateless_call` under `jax.jit`, compiled ahead of time; on
    TensorFlow a `tf.function` (with `jit_compile` as `xla` says)."""
    if keras.backend.backend() == "jax":
        import jax

        trainable = [v.value for v in model.trainable_variables]
        other = [v.value for v in model.non_trainable_variables]
        fn = jax.jit(lambda t, n, x: model.stateless_call(
            t, n, x, training=False)[0])
        fn = fn.lower(trainable, other, images).compile()
        if recorder is not None:
            recorder.record(fn)
        return lambda: fn(trainable, other, images).block_until_ready()
    import tensorflow as tf

    fn = tf.function(lambda x: model(x, training=False), jit_compile=xla)
    return lambda: fn(images).numpy()


def compiled_training(model: keras.Model, images: Any, labels: Any,
                      recorder: Optional["CompiledMemory"] = None
                      ) -> Callable:
    """A function running one training step compiled once (JAX): the
    model's `stateless_call` under `jax.value_and_grad`, the same loss,
    and the compiled optimizer's `stateless_apply` (AdamW), in one
    `jax.jit` whose state (weights, non-trainable variables, optimizer
    slots) stays on the device from step to step (donated, so updated in
    place); each call waits for the step's outputs. What a training step
    costs without `train_on_batch`'s per-call work: gathering the state
    from the variables, writing it back, the metrics, the logs copied to
    the host. The model's own variables are left stale (a benchmark's
    step, not a training loop)."""
    if keras.backend.backend() != "jax":
        raise ValueError("train_jit runs on the JAX backend only")
    import jax

    optimizer = model.optimizer
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss_and_state(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(
            trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    grads_of = jax.value_and_grad(loss_and_state, has_aux=True)

    def train_step(state, x, y):
        trainable, non_trainable, slots = state
        (loss, non_trainable), grads = grads_of(trainable, non_trainable,
                                                x, y)
        trainable, slots = optimizer.stateless_apply(slots, grads, trainable)
        return loss, (trainable, non_trainable, slots)

    state = [([v.value for v in model.trainable_variables],
              [v.value for v in model.non_trainable_variables],
              [v.value for v in optimizer.variables])]
    fn = jax.jit(train_step, donate_argnums=0).lower(
        state[0], images, labels).compile()
    if recorder is not None:
        recorder.record(fn)

    def step() -> None:
        loss, state[0] = fn(state[0], images, labels)
        jax.block_until_ready((loss, state[0]))

    step.state = state  # [(weights, other variables, slots)], as they are
    return step


def _timed(step: Callable, steps: int) -> Tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads)."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        step()  # returns NumPy values, so the work is done on return
    return time.perf_counter() - start, time.process_time() - cpu


def device_memory() -> Optional[Dict[str, int]]:
    """dict or None. The first JAX device's allocator counters
    (`bytes_in_use`, `peak_bytes_in_use`, ...), where it keeps them (GPUs,
    TPUs; not the CPU) and the backend is JAX."""
    if keras.backend.backend() != "jax":
        return None
    import jax

    try:
        stats = jax.local_devices()[0].memory_stats()
    except Exception:  # noqa: BLE001  (platforms without the counters)
        return None
    return dict(stats) if stats and "peak_bytes_in_use" in stats else None


class CompiledMemory:
    """Records XLA's memory plan of the first step function that Keras's
    JAX trainer compiles while this context is open: Keras makes its train
    and predict steps with `jax.jit`, looked up in its JAX trainer module,
    which is wrapped here so that the first call also lowers and compiles
    the step ahead of time (XLA caches the executable, so the call that
    follows does not compile it again) and keeps `memory_analysis()`.
    Nothing is recorded on other backends or where Keras's internals
    differ (`plan` stays None)."""

    def __init__(self) -> None:
        self.plan: Optional[Dict[str, int]] = None
        self.cudnn_attention: Optional[Dict[str, int]] = None
        self._module: Any = None

    def record(self, compiled: Any) -> None:
        """Keeps a compiled JAX step's memory plan and its cuDNN
        fused-attention calls (the first step recorded only)."""
        if self.plan is not None:
            return
        try:
            m = compiled.memory_analysis()
            self.plan = {
                name: int(getattr(m, f"{name}_size_in_bytes"))
                for name in ("temp", "argument", "output", "alias",
                             "generated_code")
            }
        except Exception as e:  # noqa: BLE001  (recorded instead)
            self.plan = {"error": f"{type(e).__name__}: {e}"[:300]}
        self.cudnn_attention = cudnn_attention_calls(compiled)

    def __enter__(self) -> "CompiledMemory":
        if keras.backend.backend() != "jax":
            return self
        try:
            from keras.src.backend.jax import trainer as module
        except ImportError:
            return self
        if not callable(getattr(module, "jit", None)):
            return self
        self._module, self._jit = module, module.jit
        module.jit = self._recording_jit
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._module is not None:
            self._module.jit = self._jit

    def _recording_jit(self, fn: Callable, *args: Any, **kwargs: Any):
        jitted = self._jit(fn, *args, **kwargs)

        def call(*a: Any, **k: Any) -> Any:
            if self.plan is None and hasattr(jitted, "lower"):
                try:
                    compiled = jitted.lower(*a, **k).compile()
                except Exception as e:  # noqa: BLE001  (recorded instead)
                    self.plan = {"error": f"{type(e).__name__}: {e}"[:300]}
                else:
                    self.record(compiled)
            return jitted(*a, **k)

        return call


CUDNN_ATTENTION = re.compile(r'custom_call_target="(__cudnn\$fmha[^"]*)"')


def cudnn_attention_calls(compiled: Any) -> Optional[Dict[str, int]]:
    """{custom-call target: count}. The cuDNN fused-attention calls
    (`__cudnn$fmha...`: forward, backward) in a compiled JAX step's
    optimized HLO; {} where there are none, None where the text cannot
    be read."""
    try:
        text = compiled.as_text()
    except Exception:  # noqa: BLE001  (a JAX without it)
        return None
    if not isinstance(text, str):
        return None
    counts: Dict[str, int] = {}
    for target in CUDNN_ATTENTION.findall(text):
        counts[target] = counts.get(target, 0) + 1
    return counts


def memory_fields(plan: Optional[Dict[str, Any]], before: Optional[dict],
                  after: Optional[dict], batch: int) -> Dict[str, Any]:
    """dict. A row's device-memory fields, from XLA's plan of the step and
    the allocator counters before the model was built and after its
    warm-up. XLA's plan: temporaries (activations, workspaces), arguments
    (weights, optimizer state, the batch) and outputs, less what outputs
    reuse of donated arguments; its temporaries per example are the
    activation memory. The allocator's peak over what was in use before
    the model was built (weights, optimizer state and the step's
    temporaries, per example of the batch) is exact only where the peak
    rose while this model ran; otherwise an earlier, higher peak hides it
    and the field is None."""
    out: Dict[str, Any] = {
        "xla_memory": plan, "xla_step_bytes": None,
        "xla_temp_bytes_per_example": None,
        "device_peak_bytes": None, "device_peak_bytes_per_example": None,
        "device_peak_exact": None, "device_bytes_limit": None,
    }
    if plan and "temp" in plan:
        out["xla_step_bytes"] = (plan["temp"] + plan["argument"]
                                 + plan["output"] - plan["alias"])
        out["xla_temp_bytes_per_example"] = plan["temp"] / batch
    if before and after:
        exact = after["peak_bytes_in_use"] > before["peak_bytes_in_use"]
        peak = after["peak_bytes_in_use"] - before["bytes_in_use"]
        out.update(device_peak_exact=exact, device_peak_bytes=peak,
                   device_bytes_limit=after.get("bytes_limit"))
        if exact:
            out["device_peak_bytes_per_example"] = peak / batch
    return out


def measure_config(
    mode: str, xla: bool, models: List[str], dims, args
) -> Tuple[List[Dict[str, Any]], List[str]]:
    """(rows, notes). One result row per model for this (mode, XLA)
    config. A comparison model (any but keras_vit) that fails to build or
    compile is left out with a note naming the error."""
    rows, steps_fns, notes = [], [], []
    for which in models:
        if which != "keras_vit" and past_deadline(args):
            notes.append(f"{which} {mode}: skipped, --deadline "
                         f"{args.deadline:g} s passed")
            continue
        gc.collect()
        before = memory_mb()["rss_mb"]
        exact = reset_peak_memory()
        device_before = device_memory()
        try:
            with CompiledMemory() as compiled:
                model = build_model(which, dims, args)
                start = time.perf_counter()
                # train_jit and infer_jit compile here, Keras's steps below
                step = make_step(model, mode, xla, args, compiled)
                step()
                compile_s = time.perf_counter() - start
        except Exception as e:  # noqa: BLE001  (a candidate may not run)
            if which == "keras_vit":
                raise
            notes.append(f"{which} {mode}: left out, it failed: "
                         f"{type(e).__name__}: {str(e)[:300]}")
            print(notes[-1], file=sys.stderr)
            model = step = None
            keras.backend.clear_session()
            gc.collect()
            continue
        step_s = compile_s
        for _ in range(max(0, args.warmup - 1)):
            step_s = _timed(step, 1)[0]
        steps = args.steps or max(1, round(args.min_time / step_s))
        mem = memory_mb()
        rows.append({
            "backend": keras.backend.backend(), "model": which, "mode": mode,
            "xla": xla, "dtype": args.dtype, "batch_size": args.batch_size,
            "image_size": args.image_size, "params": model.count_params(),
            "compile_s": compile_s, "steps_per_repeat": steps,
            "peak_rss_mb": mem["peak_mb"],
            "peak_rss_delta_mb": mem["peak_mb"] - before,
            "peak_rss_exact": exact, "seconds": [], "cpu_seconds": [],
            **memory_fields(compiled.plan, device_before, device_memory(),
                            args.batch_size),
            "cudnn_attention": compiled.cudnn_attention,
        })
        steps_fns.append((step, steps, model))
    for repeat in range(args.repeats):  # interleaved: load hits all alike
        if repeat and past_deadline(args):
            notes.append(f"{mode}: --deadline {args.deadline:g} s passed "
                         f"after {repeat} of {args.repeats} repeats")
            break
        for row, (step, steps, _) in zip(rows, steps_fns):
            for _ in range(args.rewarm):
                step()
            wall, cpu = _timed(step, steps)
            row["seconds"].append(wall)
            row["cpu_seconds"].append(cpu)
    for row in rows:
        per_step = [s / row["steps_per_repeat"] for s in row["seconds"]]
        row["cpu_s_per_image"] = statistics.median(
            row["cpu_seconds"]
        ) / (row["steps_per_repeat"] * args.batch_size)
        row["step_ms"] = 1000 * statistics.median(per_step)
        row["images_per_s"] = args.batch_size / statistics.median(per_step)
        row["images_per_s_all"] = [args.batch_size / s for s in per_step]
    del steps_fns
    keras.backend.clear_session()
    gc.collect()
    return rows, notes


def keras_hub_available() -> Optional[str]:
    """str or None. keras-hub's version, or None when it cannot be imported."""
    try:
        import keras_hub
    except ImportError:
        return None
    return getattr(keras_hub, "__version__", "unknown")


def profiled_models(names: Sequence[str]) -> List[str]:
    """[str]. The models a profile's `--models` names (`names`, of
    PROFILED: its parse_args checks them), without keras_hub where
    keras-hub cannot be imported, which it says
    (benchmarks/step_profile.py, benchmarks/device_profile.py)."""
    models = list(names)
    if "keras_hub" in models and not keras_hub_available():
        print("keras-hub is not installed: profiling keras_vit only.",
              file=sys.stderr)
        models.remove("keras_hub")
    return models


def library_attention(dims: Dict[str, int], args) -> str:
    """str. The attention keras_vit takes in this run by the library's own
    rule (keras_vit/attention.py): "fused" where it tries cuDNN's fused
    attention (JAX, an NVIDIA GPU, a 16-bit compute dtype, a head width
    cuDNN takes), else "one_path". Whether a compiled step has the fused
    kernel is each row's `cudnn_attention`."""
    module = keras_vit.attention.fused_attention  # None off JAX
    dtype = "bfloat16" if args.dtype == "bfloat16" else "float32"
    head = dims["hidden_size"] // dims["num_heads"]
    return ("fused" if module is not None and module.usable(dtype, head)
            else "one_path")


def configurations(args: argparse.Namespace) -> List[Tuple[str, bool]]:
    """[(mode, xla)]. The configurations one run measures, in order (JAX
    always compiles with XLA)."""
    xlas = {"on": [True], "off": [False], "both": [False, True]}[args.xla]
    if keras.backend.backend() == "jax":
        xlas = [True]
    return [(mode, xla) for mode in args.modes for xla in xlas]


def _shown_folder(folder: str) -> str:
    """A --compare_tree folder as the notes name it: relative to the
    current folder when inside it (a checkout's `.before`), else whole."""
    relative = os.path.relpath(folder)
    return folder if relative.startswith("..") else relative


def run_benchmarks(args: argparse.Namespace) -> Dict[str, Any]:
    """dict. Measures everything one process can (one Keras backend)."""
    if args.dtype == "bfloat16":
        keras.mixed_precision.set_dtype_policy("mixed_bfloat16")
    backend = keras.backend.backend()
    dims = sizes(args)  # (checked by parse_args)
    models = (["keras_vit", *args.trees]
              + ([ONE_PATH] if args.compare_one_path else [])
              + ([DPA] if args.compare_dpa else []))
    notes = [f"{name}: keras_vit from {_shown_folder(folder)}"
             for name, folder in args.trees.items()]
    hub = keras_hub_available() if args.compare_keras_hub else None
    if args.compare_keras_hub and hub is None:
        notes.append("keras-hub is not installed: comparison skipped "
                     "(pip install keras-hub to measure it).")
        print(notes[-1], file=sys.stderr)
    elif hub is not None:
        models.append("keras_hub")
    result: Dict[str, Any] = {
        "machine": machine_info(), "sizes": dims, "keras_hub": hub,
        # keras_vit's classifier computes only the class token in its last
        # block; keras-hub's backbone computes every token.
        "forward_flops_per_image": forward_flops(
            image_size=args.image_size, num_classes=args.num_classes,
            last_block_class_token_only=True, **dims
        ),
        "forward_flops_per_image_all_tokens": forward_flops(
            image_size=args.image_size, num_classes=args.num_classes, **dims
        ),
        "ceiling": {}, "rows": [], "notes": notes,
    }
    result["keras_vit_attention"] = library_attention(dims, args)
    if args.compare_dpa:
        result["flash_attention_usable"] = flash_attention_usable(dims, args)
    dtypes = ["float32"] + (["bfloat16"] if args.dtype == "bfloat16" else [])
    ceil = {d: matmul_ceiling(args.matmul_size, d, args.matmul_repeats)
            for d in dtypes}  # before the models and (below) after them
    for mode, xla in configurations(args):
        if mode == "train_jit" and backend != "jax":
            notes.append(f"train_jit xla={xla}: skipped, the JAX backend "
                         "only")
            continue
        if result["rows"] and past_deadline(args):
            notes.append(f"{mode} xla={xla}: skipped, --deadline "
                         f"{args.deadline:g} s passed")
            continue
        rows, config_notes = measure_config(mode, xla, models, dims, args)
        notes.extend(config_notes)
        result["rows"].extend(rows)
        for row in rows:
            print(f"[{backend}] {row['model']:9s} {mode:5s} xla={xla!s:5s}"
                  f" {row['images_per_s']:8.2f} img/s", file=sys.stderr)
    for d in dtypes:
        after = matmul_ceiling(args.matmul_size, d, args.matmul_repeats)
        wall = ceil[d]["wall"] + after["wall"]
        cpu = ceil[d]["cpu"] + after["cpu"]
        result["ceiling"][d] = {
            "flops_per_s": statistics.median(wall), "samples": wall,
            "flops_per_cpu_s": statistics.median(cpu), "cpu_samples": cpu,
            "size": args.matmul_size,
        }
    result["machine"]["load_average_end"] = list(os.getloadavg())
    add_derived(result, args.dtype)
    return result


def add_derived(result: Dict[str, Any], dtype: str) -> None:
    """Adds model FLOP/s, MFU and the ratios to keras-hub (and, for the
    other comparison models, to keras_vit) to every row.

    Each measure comes twice: per wall second (what a user waits for) and
    per second of CPU time (the work done, which load from other processes
    on a shared machine distorts much less).
    """
    ceiling = result["ceiling"][dtype]
    fwd = {
        "keras_hub": result.get(
            "forward_flops_per_image_all_tokens",
            result["forward_flops_per_image"],
        ),
    }
    hub = {
        (r["backend"], r["mode"], r["xla"]): r
        for r in result["rows"] if r["model"] == "keras_hub"
    }
    ours = {
        (r["backend"], r["mode"], r["xla"]): r
        for r in result["rows"] if r["model"] == "keras_vit"
    }
    for row in result["rows"]:
        flops = fwd.get(row["model"], result["forward_flops_per_image"])
        flops *= 3 if row["mode"] in TRAINING else 1
        row["model_flops_per_s"] = flops * row["images_per_s"]
        row["mfu"] = row["model_flops_per_s"] / ceiling["flops_per_s"]
        if "cpu_s_per_image" in row:
            row["mfu_cpu"] = flops / row["cpu_s_per_image"] / ceiling.get(
                "flops_per_cpu_s", float("nan"))
        base = ours.get((row["backend"], row["mode"], row["xla"]))
        if row["model"] not in ("keras_vit", "keras_hub") and base:
            row["vs_keras_vit"] = row["images_per_s"] / base["images_per_s"]
        other = hub.get((row["backend"], row["mode"], row["xla"]))
        if row["model"] != "keras_hub" and other:
            row["vs_keras_hub"] = row["images_per_s"] / other["images_per_s"]
            if "cpu_s_per_image" in row:
                row["vs_keras_hub_cpu"] = (
                    other["cpu_s_per_image"] / row["cpu_s_per_image"]
                )


def run_script(script: str, argv: Sequence[str],
               env: Optional[Dict[str, Optional[str]]] = None
               ) -> Dict[str, Any]:
    """dict. The result that `script` (a benchmark of this folder that
    writes `--output PREFIX` as PREFIX.json) writes when run with `argv`
    in a child process, its `--output` a temporary one (argparse keeps the
    last); {"error": ...} where the child fails. Its stdout (its report)
    is dropped, its stderr is ours. `env`: variables set for the child
    (None: unset)."""
    env = {k: v for k, v in dict(os.environ, **(env or {})).items()
           if v is not None}
    with tempfile.TemporaryDirectory() as tmp:
        target = os.path.join(tmp, "child")
        proc = subprocess.run(
            [sys.executable, os.path.abspath(script), *argv,
             "--output", target],
            env=env, stdout=subprocess.DEVNULL,
        )
        if proc.returncode:
            return {"error": f"{os.path.basename(script)} {' '.join(argv)}:"
                             f" exit code {proc.returncode}"}
        with open(target + ".json") as f:
            return json.load(f)


def run_jax_child(argv: Sequence[str]) -> Dict[str, Any]:
    """dict. The same benchmark run in a subprocess under the JAX backend."""
    child = run_script(__file__, [a for a in argv if a != "--jax"],
                       env={"KERAS_BACKEND": "jax"})
    if "error" in child:
        return {"error": f"JAX run failed: {child['error']}"}
    return child


def run_per_config(argv: Sequence[str],
                   args: argparse.Namespace) -> Dict[str, Any]:
    """dict. `--process_per_config`: each configuration (mode, XLA
    setting) measured by this script in a fresh child process, and their
    results merged (`merge_results`). The deadline counts from this
    process's start: each child gets what is left of it, and once it has
    passed the configurations left are skipped. This process measures
    nothing and leaves the device alone (a JAX process that touched a GPU
    would hold most of its memory)."""
    base = [a for a in argv if a not in ("--process_per_config", "--jax")]
    parts: List[Dict[str, Any]] = []
    notes: List[str] = []
    for mode, xla in configurations(args):
        left = args.deadline - (time.monotonic() - START)
        if parts and args.deadline and left <= 0:
            notes.append(f"{mode} xla={xla}: skipped, --deadline "
                         f"{args.deadline:g} s passed")
            continue
        child = base + ["--mode", mode, "--xla", "on" if xla else "off"]
        if args.deadline:
            child += ["--deadline", f"{max(left, 0.001):.3f}"]
        part = run_script(__file__, child)
        if "error" in part:
            notes.append(f"{mode} xla={xla}: its process failed "
                         f"({part['error']})")
            print(notes[-1], file=sys.stderr)
            continue
        parts.append(part)
    if not parts:
        raise SystemExit("No configuration ran: " + "; ".join(notes))
    result = merge_results(parts, args.dtype)
    result["notes"] += notes
    result["failed_configs"] = sum("its process failed" in n for n in notes)
    return result


def merge_results(parts: Sequence[Dict[str, Any]],
                  dtype: str) -> Dict[str, Any]:
    """dict. The results of runs of one command that each measured some of
    its configurations, as one: their rows in order, their notes once
    each, the matmul ceiling over every run's samples (so the MFU of every
    row is against the same ceiling), the machine as the first run saw it
    and the load at the end of the last; the derived fields again."""
    result = dict(parts[0])
    result["rows"] = [row for part in parts for row in part["rows"]]
    result["notes"] = list(dict.fromkeys(
        note for part in parts for note in part["notes"]))
    result["machine"] = dict(parts[0]["machine"], load_average_end=parts[
        -1]["machine"].get("load_average_end"))
    for part in parts:  # the dot_product_attention check, where asked
        if part.get("flash_attention_usable"):
            result["flash_attention_usable"] = part["flash_attention_usable"]
            break
    result["ceiling"] = {}
    for d, first in parts[0]["ceiling"].items():
        wall = [x for part in parts for x in part["ceiling"][d]["samples"]]
        cpu = [x for part in parts
               for x in part["ceiling"][d]["cpu_samples"]]
        result["ceiling"][d] = {
            "flops_per_s": statistics.median(wall), "samples": wall,
            "flops_per_cpu_s": statistics.median(cpu), "cpu_samples": cpu,
            "size": first["size"],
        }
    add_derived(result, dtype)
    return result


def check_trees(trees: Dict[str, str]) -> None:
    """Exits naming a `--compare_tree` folder that holds no keras_vit
    package (checked when the run starts, not when the arguments are
    parsed: the checkout may be made between the two)."""
    for name, folder in trees.items():
        if not os.path.isdir(os.path.join(folder, "keras_vit")):
            sys.exit(f"throughput.py: error: --compare_tree {name}={folder}: "
                     "the folder holds no keras_vit package (a checkout of "
                     "this project, e.g. git worktree add DIR COMMIT)")


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Runs the benchmark and writes PREFIX.json and PREFIX.md.

    argv: list of str or None. Command-line arguments (sys.argv if None).
    Returns the result dict that was written.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    check_trees(args.trees)
    if args.process_per_config:
        result = run_per_config(argv, args)
    else:
        result = run_benchmarks(args)
    failed = result.pop("failed_configs", 0)
    result["args"] = {
        k: v for k, v in vars(args).items() if k not in ("modes", "trees")
    }
    result["command"] = "python benchmarks/throughput.py " + " ".join(argv)
    if args.jax and keras.backend.backend() != "jax":
        child = run_jax_child(argv)
        if "error" in child:
            result["notes"].append(child["error"])
        else:
            result["machine"]["jax"] = child["machine"].get("jax")
            result["ceiling_jax"] = child["ceiling"]
            result["rows"].extend(child["rows"])
    text = report.markdown(result)
    report.write_results(args.output, result, text)
    print(text)
    if failed:  # written, and said by the exit status
        raise SystemExit(f"{failed} configuration(s) failed: see the notes "
                         f"of {args.output}.json")
    return result


if __name__ == "__main__":
    main()
