"""Train calls sized by time, so that the host speaks every few seconds.

The host loop asks for the steps up to its next boundary (at most
`config.trainer.steps_per_loop`). Where every replica runs in this process
(`Trainer.stoppable`), `Pacer` runs them as train calls of about `CALL_S`
seconds each: one call when the steps are fast, as before, and one step
per call when a step takes longer. Between calls the host loop reports
progress; a stop request (SIGTERM, Ctrl-C)
ends the call in flight after its current step. A multi-worker or TPU run
keeps one call per boundary, the same on every worker.

The steps, their order and their updates are the same however they are
split; only the host's chances to speak change.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from keras_vit import progress

# Seconds of training per train call where steps are slow.
CALL_S = 2.0


def boundary(step: int, every: int) -> bool:
    """`step` ends a period of `every` steps (0: never)."""
    return bool(every) and step % every == 0


def next_stop(step: int, total: int, steps_per_loop: int, *everys) -> int:
    """The host loop's next boundary after `step`: at most `steps_per_loop`
    steps on, not past `total`, the first multiple of any of `everys`."""
    stop = min(total, step + steps_per_loop)
    for every in everys:
        if every:
            stop = min(stop, (step // every + 1) * every)
    return stop


def merge(parts: List[Dict[str, Any]], skip_nonfinite: bool
          ) -> Dict[str, Any]:
    """The metrics of consecutive train calls as if one call had run their
    steps: means weighted by the steps applied, counts summed, the first
    non-finite step counted from the first call's start."""
    steps = sum(p["steps"] for p in parts)
    bad = sum(p["nonfinite_steps"] for p in parts)
    out: Dict[str, Any] = {"steps": steps, "nonfinite_steps": bad,
                           "first_nonfinite_step": None}
    offset = 0
    for part in parts:
        first = part["first_nonfinite_step"]
        if first is not None and out["first_nonfinite_step"] is None:
            out["first_nonfinite_step"] = offset + first
        offset += part["steps"]
    applied = [p["steps"] - p["nonfinite_steps"] if skip_nonfinite
               else p["steps"] for p in parts]
    total = sum(applied)
    for key in ("loss", "accuracy", "grad_norm"):
        out[key] = (sum(p[key] * a for p, a in zip(parts, applied) if a)
                    / total) if total else math.nan
    return out


class Pacer:
    """Runs a trainer's steps in train calls of about `call_s` seconds.

    Args:
        trainer: Trainer. Its `stoppable`, `stop_requested` and `train`.
        call_s: float. Seconds per call; 0 keeps one call per request.
        clock: () -> seconds.
    """

    def __init__(self, trainer, call_s: float = CALL_S,
                 clock: Callable[[], float] = time.time):
        self.trainer = trainer
        self.call_s = float(call_s) if trainer.stoppable else 0.0
        self.clock = clock
        self.step_s: Optional[float] = None  # of the latest call

    def _size(self, left: int) -> int:
        if not self.call_s:
            return left
        if self.step_s is None:
            return 1  # the first call traces and compiles: one step
        return max(1, min(left, int(self.call_s / max(self.step_s, 1e-9))))

    def train(self, iterator, steps: int,
              on_call: Optional[Callable[[int, Dict, float], None]] = None
              ) -> Dict[str, Any]:
        """Runs up to `steps` steps (fewer after a stop request); their
        merged metrics (`merge`). `on_call(steps done, metrics, seconds)`
        follows every call."""
        parts: List[Dict[str, Any]] = []
        done = 0
        while done < steps:
            if parts and self.trainer.stop_requested():
                break
            t0 = self.clock()
            metrics = self.trainer.train(iterator, self._size(steps - done))
            seconds = self.clock() - t0
            done += metrics["steps"]
            parts.append(metrics)
            if metrics["steps"]:
                self.step_s = seconds / metrics["steps"]
            if on_call is not None:
                on_call(done, metrics, seconds)
            if metrics["steps"] == 0:
                break  # stopped before its first step
        return merge(parts, self.trainer.skip_nonfinite)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the host loop takes of a run's config: its `trainer` steps,
    its `log` and `checkpoints` periods, its accuracy evaluators (name,
    entry of `evals`) and the seconds between progress lines."""

    total_steps: int
    steps_per_loop: int
    log_every: int
    checkpoint_every: int
    evaluators: Tuple[Tuple[str, Any], ...]
    progress_every_s: float = progress.EVERY_S

    @classmethod
    def of(cls, trainer_config, log, checkpoints, evals) -> "Plan":
        """The plan of a run's `trainer`, `log`, `checkpoints` and `evals`
        sections."""
        return cls(
            int(trainer_config.total_steps),
            int(trainer_config.steps_per_loop),
            int(log.every_steps), int(checkpoints.every_steps),
            tuple((name, entry) for name, entry in evals.items()
                  if entry.type == "accuracy"),
            float(log.every_seconds))
