"""How much memory the analysis's attention takes, and how much is free.

`keras_vit.attention_model` returns every layer's attention weights of a
batch at once: (batch, heads, tokens, tokens) float32 per layer, and the
tokens grow with the square of the image side. At 1024 x 1024 a B/16
takes about 24 GiB per image (384 GiB for the default batch of 16),
and a process that asks for more memory than the machine has is killed
by the kernel without a word. So the
analysis checks the need against the memory that is free before it runs
a batch, and says which batch size (or image size) fits.

The free memory is Linux's own estimate (`MemAvailable` in
/proc/meminfo), capped by the control group's limit where one is set (a
container): the limit less the group's working set (its usage less the
inactive file pages the kernel reclaims first, as container runtimes
count it). Elsewhere nothing is checked.
"""

from __future__ import annotations

from typing import Dict, Optional

from keras_vit.errors import UsageError

_MEMINFO = "/proc/meminfo"
# (limit, usage, stat) of cgroup v2, then of cgroup v1.
_CGROUPS = (
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current",
     "/sys/fs/cgroup/memory.stat"),
    ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
     "/sys/fs/cgroup/memory/memory.usage_in_bytes",
     "/sys/fs/cgroup/memory/memory.stat"),
)
# A cgroup v1 group without a limit reports about 2**63.
_NO_LIMIT = 1 << 60
# Bytes per attention weight that the host's work on one layer holds at
# its peak (measured: 15 to 22), with a margin.
HOST_BYTES = 32


def attention_bytes(num_layers: int, num_heads: int, num_tokens: int,
                    batch_size: int, itemsize: int = 4) -> int:
    """The memory one batch's attention takes at its peak, in bytes, per
    attention weight (batch x heads x tokens x tokens of a layer):
    `itemsize` bytes of every layer's weights, which the attention model
    returns together (4 in float32, 2 under a 16-bit policy); as much
    again of TensorFlow's buffers per layer while the forward pass runs;
    and `HOST_BYTES` while the host takes the layers one at a time (one
    layer's float64 copy, its conversion, the rollout's means over the
    heads). Measured as the peak resident memory of the forward pass and
    the host's work (`tests/test_analysis_memory.py`): counting only the
    weights and the float64 copy, half of the peak, let batches through
    that the kernel then killed."""
    weights = batch_size * num_heads * num_tokens**2
    return weights * (2 * itemsize * num_layers + HOST_BYTES)


def distance_bytes(num_patches: int) -> int:
    """The bytes of the patch-distance table (`core.patch_distances`:
    float64 (N, N), made from two float64 (N, N) offsets, one at a time),
    held for the whole forward pass."""
    return 24 * num_patches**2


def _read(path: str) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def _fields(text: Optional[str], scale: int = 1) -> Dict[str, int]:
    """`name value` lines (/proc/meminfo's `Name: N kB`, memory.stat's
    `name N`) as a dict of ints, each times `scale`."""
    fields = {}
    for line in (text or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2 and parts[1].isdigit():
            fields[parts[0]] = int(parts[1]) * scale
    return fields


def _cgroup_free() -> Optional[int]:
    """The control group's limit less its working set, or None where no
    limit is set (or none can be read)."""
    for limit_path, usage_path, stat_path in _CGROUPS:
        limit, usage = _read(limit_path), _read(usage_path)
        if limit is None or usage is None:
            continue
        limit, usage = limit.strip(), usage.strip()
        if not (limit.isdigit() and usage.isdigit()):
            return None  # "max": no limit
        if int(limit) >= _NO_LIMIT:
            return None
        stat = _fields(_read(stat_path))
        # v1 counts the whole subtree in usage_in_bytes (total_...).
        inactive = stat.get("total_inactive_file",
                            stat.get("inactive_file", 0))
        return max(0, int(limit) - max(0, int(usage) - inactive))
    return None


def free_bytes() -> Optional[int]:
    """The memory this process can still take, in bytes, or None where the
    system does not say (not Linux)."""
    available = _fields(_read(_MEMINFO), 1024).get("MemAvailable")
    group = _cgroup_free()
    known = [x for x in (available, group) if x is not None]
    return min(known) if known else None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _gib(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def check_attention_fits(  # noqa: PLR0913 (the attention's sizes)
        num_layers: int, num_heads: int, num_tokens: int, num_patches: int,
        batch_size: int, free: Optional[int] = None,
        itemsize: int = 4) -> None:
    """Raises UsageError, before any batch runs, when a batch's attention
    (`attention_bytes`) cannot fit in the free memory (`free`, default
    `free_bytes()`) beside the patch-distance table
    (`distance_bytes`): naming the largest batch size that fits, or,
    where not even one image fits, a smaller image size.

    Args:
        num_layers, num_heads, num_tokens, num_patches: int. The model's
            attention.
        batch_size: int. Images per forward pass.
        free: int or None. Free bytes (None: measure them; nothing is
            checked where they cannot be measured).
        itemsize: int. Bytes of one attention weight (the model's
            compute dtype).
    """
    free = free_bytes() if free is None else free
    fixed = distance_bytes(num_patches)
    need = attention_bytes(num_layers, num_heads, num_tokens, batch_size,
                           itemsize)
    if free is None or fixed + need <= free:
        return
    one = attention_bytes(num_layers, num_heads, num_tokens, 1, itemsize)
    fits = max(0, free - fixed) // one
    said = (f"The attention weights of {_count(num_layers, 'layer')} x "
            f"{_count(num_heads, 'head')} over {num_tokens:,} tokens take "
            f"about {_gib(one)} per image ({_gib(need)} for a batch of "
            f"{batch_size}), the distances between the patches "
            f"{_gib(fixed)}, and {_gib(free)} of memory is free")
    if fits >= 1:
        raise UsageError(f"{said}: analyse at most "
                         f"{_count(fits, 'image')} per batch "
                         f"(--batch_size={fits}).")
    raise UsageError(
        f"{said}: not one image fits. Analyse at a smaller image size "
        "(--image_size=N; the tokens grow with the square of the side), "
        "or on a machine with more memory.")
