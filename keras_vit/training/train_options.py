"""The keyword options of a `keras_vit.training.trainer.Trainer` (and an
`MppTrainer`), checked by name: `TrainOptions`."""

from __future__ import annotations

import dataclasses
from typing import Optional

from keras_vit.errors import UsageError, check_options


@dataclasses.dataclass(frozen=True)
class TrainOptions:
    """The keyword options of a `Trainer` (and an `MppTrainer`), besides
    `num_classes`.

    Attributes:
        global_batch_size: int. Examples per optimizer update, all replicas
            and micro-batches together (required).
        accumulation_steps: int. Micro-batches per update.
        grad_clip_norm: float or None. Clip the global gradient norm.
        loss: str. "softmax_xent" or "sigmoid_xent".
        label_smoothing: float.
        jit_compile: bool. XLA-compile each replica's forward and backward
            passes, its micro-batches included (the cross-replica
            reduction and the update stay outside, where every strategy
            supports them). On a TPU, TPUStrategy compiles the whole
            replica step with XLA whatever this says, and no compiled
            function is nested inside it.
        skip_nonfinite: bool. Skip updates whose loss or gradient norm is
            NaN or Inf instead of applying them (see the module docstring).
    """

    global_batch_size: int
    accumulation_steps: int = 1
    grad_clip_norm: Optional[float] = 1.0
    loss: str = "softmax_xent"
    label_smoothing: float = 0.0
    jit_compile: bool = False
    skip_nonfinite: bool = False

    @classmethod
    def of(cls, options: dict) -> "TrainOptions":
        """The options named in `options`, the others at their defaults.

        Raises:
            UsageError: an option that `Trainer` does not take, or no
                global_batch_size.
        """
        check_options(options, [f.name for f in dataclasses.fields(cls)],
                      "Trainer", also="num_classes, ")
        if "global_batch_size" not in options:
            raise UsageError(
                "Trainer needs global_batch_size: the examples per "
                "optimizer update, all replicas and micro-batches together."
            )
        return cls(**options)
