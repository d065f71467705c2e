"""The markdown report of benchmarks/throughput.py, and how the benchmarks
write their results."""

from __future__ import annotations

import argparse
import json
import math
import os
from typing import Any, Dict, List, Sequence, Tuple

from keras_vit import variants
from keras_vit.storage.atomic import atomic_write


def write_results(prefix: str, result: Dict[str, Any], text: str) -> None:
    """Writes `<prefix>.json` (the results) and `<prefix>.md` (the report),
    each atomically."""
    atomic_write(prefix + ".json", json.dumps(result, indent=1))
    atomic_write(prefix + ".md", text)


def finish(prefix: str, result: Dict[str, Any], markdown) -> None:
    """Records the load average at the end, writes `result` and its
    report (`markdown(result)`, `write_results`) and prints the report."""
    result["machine"]["load_average_end"] = list(os.getloadavg())
    write_results(prefix, result, markdown(result))
    print(markdown(result))


def add_repeats_and_output(parser: argparse.ArgumentParser) -> None:
    """The two flags every small benchmark takes: --repeats (5) and
    --output (NAME: NAME.json and NAME.md)."""
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--output", required=True,
                        help="writes OUTPUT.json and OUTPUT.md")


def parse_counts(parser: argparse.ArgumentParser, argv, counts: Sequence[str],
                 script: str) -> Tuple[argparse.Namespace, str]:
    """The arguments of `parser`, each of `counts` at least 1 (else the
    parser's usage error), and the command as it ran (for the results)."""
    args = parser.parse_args(argv)
    for name in counts:
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    return args, f"python benchmarks/{script} " + " ".join(
        f"--{k}={v}" for k, v in vars(args).items())


def at_least(parser: argparse.ArgumentParser, args: argparse.Namespace,
             bounds: Dict[str, float]) -> None:
    """Refuses (the parser's usage error: one line, exit status 2) any
    option of `bounds` (name: lowest value) set below its bound (None, an
    option left unset, passes)."""
    for name, low in bounds.items():
        value = getattr(args, name)
        if value is not None and value < low:
            parser.error(f"--{name} must be >= {low}, got {value}")


def seconds(text: str) -> float:
    """An argparse type: a number of seconds above 0 (else the parser's
    usage error, one line)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"a number of seconds, got {text!r}") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(
            f"must be > 0 seconds and finite, got {text}")
    return value


def names_in(parser: argparse.ArgumentParser, flag: str, text: str,
             known: Sequence[str]) -> List[str]:
    """[str]. The comma-separated names `text` of `flag`, at least one and
    each one of `known` (else the parser's usage error naming them)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or set(names) - set(known):
        parser.error(f"{flag} takes a comma-separated subset of "
                     f"{','.join(known)}, got {text!r}")
    return names


def whole_numbers(parser: argparse.ArgumentParser, flag: str,
                  text: str) -> List[int]:
    """[int]. The comma-separated numbers `text` of `flag`, each >= 1
    (else the parser's usage error)."""
    try:
        numbers = [int(n) for n in text.split(",")]
    except ValueError:
        numbers = []
    if not numbers or min(numbers) < 1:
        parser.error(f"{flag} takes comma-separated whole numbers >= 1 "
                     f"(e.g. 2,4), got {text!r}")
    return numbers


def checked_variant(parser: argparse.ArgumentParser, flag: str,
                    variant: str, plain: bool = False) -> Any:
    """keras_vit.variants.VariantSpec. `variant` decoded, or the parser's
    usage error naming the known variants (only the plain ViTs, without
    a ResNet stem, where `plain`)."""
    known = [v for v in variants.VARIANTS
             if not (plain and v in variants.HYBRIDS)]
    if variant not in known:
        hint = "" if variant in variants.VARIANTS else ", ".join(
            variants.closest_variants(str(variant)))
        parser.error(
            f"{flag} {variant!r} is "
            + ("a hybrid: this benchmark covers plain ViTs (no ResNet "
               "stem)" if variant in variants.VARIANTS
               else "not a variant")
            + (f" (did you mean {hint}?)" if hint else "")
            + f"; use one of {', '.join(known)}")
    return variants.decode_variant(variant)


def _repeats(result: Dict[str, Any]) -> str:
    """"N repeats", or the range that ran and how many were asked where
    the deadline stopped rows before them."""
    asked = int(result["args"]["repeats"])
    ran = [len(row.get("seconds") or []) for row in result["rows"]]
    low, high = min(ran or [asked]), max(ran or [asked])
    if low == high == asked:
        return f"{asked} repeats"
    counted = f"{low} repeat" if low == high else f"{low} to {high} repeat"
    return (f"{counted}{'s' * (high != 1)} ({asked} asked; the deadline "
            "stopped the rest)")


def markdown(result: Dict[str, Any]) -> str:
    """str. The results as a markdown report with one table."""
    m, args = result["machine"], result["args"]
    versions = ", ".join(
        f"{k} {m[k]}" for k in ("tensorflow", "keras", "jax") if k in m
    )
    if result.get("keras_hub"):
        versions += f", keras-hub {result['keras_hub']}"
    load = [
        f"{m[k][0]:.2f}" if m.get(k) else "?"
        for k in ("load_average", "load_average_end")
    ]
    lines = [
        f"# Throughput: ViT {args['variant']} {result['sizes']}",
        "",
        f"`{result['command']}`",
        "",
        f"- Machine: {m['cpu']}, {m['cores']} cores, "
        f"accelerators: {', '.join(m.get('accelerators') or ['none'])}; "
        f"load average (1 min) at start {load[0]}, at end {load[1]}.",
        f"- Software: Python {m['python']}, {versions}.",
        f"- Image {args['image_size']}, batch {args['batch_size']}, "
        f"{args['dtype']}, median of {_repeats(result)}.",
        f"- Forward cost: {result['forward_flops_per_image'] / 1e9:.2f} "
        "GFLOP per image for keras_vit, "
        f"{result.get('forward_flops_per_image_all_tokens', 0) / 1e9:.2f} "
        "computing every token in the last block (keras-hub); 2 per "
        "multiply-add, training counted as 3x.",
    ]
    ceilings = [(f"{m['backend']}, {d}", c)
                for d, c in result["ceiling"].items()]
    ceilings += [(f"jax, {d}", c)
                 for d, c in result.get("ceiling_jax", {}).items()]
    for d, c in ceilings:
        lo, hi = min(c["samples"]) / 1e9, max(c["samples"]) / 1e9
        lines.append(
            f"- Matmul ceiling ({d}, {c['size']}^3): "
            f"{c['flops_per_s'] / 1e9:.1f} GFLOP/s median "
            f"(range {lo:.1f}-{hi:.1f}); "
            f"{c['flops_per_cpu_s'] / 1e9:.1f} GFLOP per CPU second."
        )
    if result.get("keras_vit_attention"):
        lines.append("- keras_vit's attention, by the library's rule: "
                     + {"fused": "cuDNN's fused attention"}.get(
                         result["keras_vit_attention"], "the one path")
                     + " (each row's compiled step: `cudnn_attention` in "
                     "the JSON).")
    flash = result.get("flash_attention_usable")
    if flash:
        lines.append(
            "- cuDNN fused attention usable for `dot_product_attention` "
            f"(Keras's check): every token {flash['all_tokens']}, class "
            f"token alone {flash['class_token']}.")
        for which, modes in (flash.get("jax_cudnn") or {}).items():
            said = "; ".join(
                f"{mode} " + ("accepted" if v["accepted"] else
                              f"refused ({v['reason']})")
                for mode, v in modes.items())
            shape = {"all_tokens": "every token",
                     "class_token": "class token alone"}.get(which, which)
            lines.append(f"- JAX asked for cuDNN attention, {shape}: "
                         f"{said}.")
    lines += [f"- {n}" for n in result["notes"]]
    lines += [
        "",
        "| backend | model | mode | XLA | img/s | best img/s | GFLOP/s "
        "| MFU | vs keras-hub | CPU s/img | MFU (CPU time) "
        "| vs keras-hub (CPU time) | peak RSS MiB | XLA temp MiB/img "
        "| device peak MiB/img | compile s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        ratio, ratio_cpu = (
            f"{r[k]:.2f}x" if k in r else ""
            for k in ("vs_keras_hub", "vs_keras_hub_cpu")
        )
        temp, peak = (
            f"{r[k] / 2**20:.1f}" if r.get(k) is not None else ""
            for k in ("xla_temp_bytes_per_example",
                      "device_peak_bytes_per_example")
        )
        lines.append(
            f"| {r['backend']} | {r['model']} | {r['mode']} "
            f"| {'on' if r['xla'] else 'off'} | {r['images_per_s']:.2f} "
            f"| {max(r['images_per_s_all']):.2f} "
            f"| {r['model_flops_per_s'] / 1e9:.1f} "
            f"| {100 * r['mfu']:.0f}% | {ratio} | {r['cpu_s_per_image']:.3f} "
            f"| {100 * r['mfu_cpu']:.0f}% | {ratio_cpu} "
            f"| {r['peak_rss_mb']:.0f} | {temp} | {peak} "
            f"| {r['compile_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"
