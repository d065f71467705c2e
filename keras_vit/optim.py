"""Learning-rate schedules and optimizers of the paper's recipes (Keras 3).

Pre-training (paper Appendix B.1): Adam(0.9, 0.999) with decoupled weight
decay, linear warm-up, linear decay. Fine-tuning (Appendix B.1.1): SGD with
momentum 0.9, cosine decay, no weight decay, its momentum kept as the
official code keeps it (`MomentumSGD`). Gradient clipping at global norm
1 is done by the trainer (after the cross-replica reduction), not by the
optimizer, so that it clips the global gradient rather than each replica's.

Polyak / EMA averaging uses the Keras optimizer's own `use_ema`.
"""

from __future__ import annotations

import math
from typing import Optional

import keras
import ml_collections
from keras import ops

from keras_vit import config as config_lib
from keras_vit.config_limits import DECAY_TYPES, OPTIMIZERS
from keras_vit.errors import UsageError


@keras.saving.register_keras_serializable(package="keras_vit")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `base_lr`, then cosine, linear or no decay.

    As in the official implementation: lr(step) = base_lr * min(1, step /
    warmup_steps) * decay(progress), progress = (step - warmup_steps) /
    (total_steps - warmup_steps) clipped to [0, 1]; cosine: 0.5 (1 + cos(pi
    progress)); linear: 1 - progress, both ending at `end_lr`.

    Args:
        base_lr: float. Peak learning rate.
        total_steps: int. Steps of the whole run.
        warmup_steps: int. Linear warm-up steps.
        decay_type: str. "cosine", "linear" or "constant".
        end_lr: float. Learning rate at step `total_steps` (cosine and
            linear), the step after the last update.
    """

    def __init__(
        self,
        base_lr: float,
        total_steps: int,
        warmup_steps: int = 0,
        decay_type: str = "cosine",
        end_lr: float = 0.0,
    ):
        if decay_type not in DECAY_TYPES:
            raise UsageError(
                f"Unknown decay_type {decay_type!r}: use one of "
                f"{', '.join(DECAY_TYPES)}."
            )
        if total_steps <= 0:
            raise UsageError(
                f"total_steps must be positive, got {total_steps}."
            )
        if not 0 <= warmup_steps <= total_steps:
            raise UsageError(
                f"warmup_steps must be in [0, total_steps={total_steps}], got "
                f"{warmup_steps}."
            )
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay_type = decay_type
        self.end_lr = float(end_lr)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = ops.convert_to_tensor(self.base_lr, "float32")
        if self.warmup_steps:
            lr = lr * ops.minimum(1.0, step / self.warmup_steps)
        if self.decay_type == "constant":
            return lr
        span = max(self.total_steps - self.warmup_steps, 1)
        progress = ops.clip((step - self.warmup_steps) / span, 0.0, 1.0)
        if self.decay_type == "cosine":
            factor = 0.5 * (1.0 + ops.cos(math.pi * progress))
        else:
            factor = 1.0 - progress
        return self.end_lr + (lr - self.end_lr) * factor

    def get_config(self):
        return dict(
            base_lr=self.base_lr,
            total_steps=self.total_steps,
            warmup_steps=self.warmup_steps,
            decay_type=self.decay_type,
            end_lr=self.end_lr,
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class MomentumSGD(keras.optimizers.SGD):
    """SGD with momentum as the official code has it (optax's
    `sgd`/`trace`, flax's `Momentum`): the momentum sums gradients, and the
    step's learning rate multiplies it, `m = momentum * m + g`, `w -= lr_t
    * m` (Nesterov: `w -= lr_t * (g + momentum * m)`).

    Keras's `SGD` keeps the learning rate inside the momentum instead (`m =
    momentum * m - lr_t * g`, `w += m`), which differs wherever the
    learning rate changes: with momentum 0.9, its steps lag the schedule
    by about 9 steps (warm-up steps smaller, the last decay steps larger),
    and the gradient of step 0, where the warm-up's rate is 0, is lost.
    The variables are Keras's (`momentums`, in the variables' dtype:
    float32, where vit_jax keeps its momentum in bfloat16), as are the
    arguments.
    """

    def update_step(self, gradient, variable, learning_rate):
        learning_rate = ops.cast(learning_rate, variable.dtype)
        gradient = ops.cast(gradient, variable.dtype)
        if self.momentum == 0:
            self.assign_sub(variable, ops.multiply(gradient, learning_rate))
            return
        m = self.momentums[self._get_variable_index(variable)]
        momentum = ops.cast(self.momentum, variable.dtype)
        self.assign(m, ops.add(ops.multiply(m, momentum), gradient))
        step = (ops.add(gradient, ops.multiply(m, momentum))
                if self.nesterov else m)
        self.assign_sub(variable, ops.multiply(step, learning_rate))


SCHEDULE_FIELDS = ("lr", "warmup_steps", "decay_type", "end_lr")


def create_optimizer(
    opt_config, total_steps: int, ema_decay: Optional[float] = None,
    *, schedule=None,
) -> keras.optimizers.Optimizer:
    """A Keras optimizer from a run config's `optimizer` and `schedule`
    sections (see configs/*.py).

    Fields (keras_vit/config_schema.py): `opt_config` name (sgd | adam |
    adamw | lamb), momentum (sgd), nesterov (sgd), b1, b2 (adam*),
    weight_decay (adamw, lamb: decoupled, multiplied by the learning rate
    as in Flax's Adam), no_decay (variable-name substrings excluded from
    weight decay); `schedule` lr, warmup_steps, decay_type, end_lr (given
    in `opt_config` instead, as earlier versions had them, they are read
    from there). A dict that gives only some of them takes the base
    config's defaults for the rest. `ema_decay` > 0 keeps a Polyak/EMA
    average of the weights. (`grad_clip_norm` is the trainer's.)
    """
    opt_config, schedule_config = _sections(opt_config, schedule)
    name = opt_config.name
    if name not in OPTIMIZERS:
        raise UsageError(
            f"Unknown optimizer {name!r}: use one of {', '.join(OPTIMIZERS)}."
        )
    common = dict(learning_rate=_schedule(schedule_config, total_steps))
    if ema_decay:
        if not 0.0 < ema_decay < 1.0:
            raise UsageError(f"ema_decay must be in (0, 1), got {ema_decay}.")
        common.update(
            use_ema=True, ema_momentum=float(ema_decay),
            ema_overwrite_frequency=None,
        )
    return _optimizer(name, opt_config, common)


def _sections(opt_config, schedule):
    """(optimizer, schedule) sections completed with the base config's
    defaults, the schedule's fields taken from the optimizer's where
    earlier versions gave them there."""
    if isinstance(opt_config, ml_collections.ConfigDict):
        opt_config = opt_config.to_dict()
    opt_config = dict(opt_config)
    schedule = dict(schedule.to_dict() if isinstance(
        schedule, ml_collections.ConfigDict) else (schedule or {}))
    for key in SCHEDULE_FIELDS:
        if key in opt_config:
            schedule.setdefault(key, opt_config.pop(key))
    opt_config = config_lib.complete(
        opt_config, "optimizer", where="optimizer config"
    )
    schedule_config = config_lib.complete(
        schedule, "schedule", where="schedule config")
    return opt_config, schedule_config


def _schedule(schedule_config, total_steps: int) -> WarmupDecay:
    """The learning-rate schedule of a completed `schedule` section."""
    lr = float(schedule_config.lr)
    if lr <= 0:
        raise UsageError(f"schedule.lr must be positive, got {lr}.")
    return WarmupDecay(
        lr,
        total_steps,
        warmup_steps=int(schedule_config.warmup_steps),
        decay_type=schedule_config.decay_type,
        end_lr=float(schedule_config.end_lr),
    )


def _optimizer(name: str, opt_config,
               common: dict) -> keras.optimizers.Optimizer:
    """The optimizer `name` of a completed `optimizer` section, with the
    `common` arguments (learning rate, EMA)."""
    weight_decay = float(opt_config.weight_decay or 0.0)
    if name == "sgd":
        if weight_decay:
            raise UsageError(
                "SGD here has no weight decay (the paper's fine-tuning uses "
                "none): set optimizer.weight_decay=0 or use adamw."
            )
        return MomentumSGD(
            momentum=float(opt_config.momentum),
            nesterov=bool(opt_config.nesterov),
            **common,
        )
    betas = dict(
        beta_1=float(opt_config.b1),
        beta_2=float(opt_config.b2),
    )
    if name == "adam":
        if weight_decay:
            raise UsageError(
                "optimizer.name='adam' has no decoupled weight decay: use "
                "'adamw' for the paper's pre-training recipe."
            )
        return keras.optimizers.Adam(**betas, **common)
    cls = keras.optimizers.AdamW if name == "adamw" else keras.optimizers.Lamb
    kwargs = dict(betas, **common)
    # AdamW always takes it (its default would be 0.004); Lamb only when set.
    if name == "adamw" or weight_decay:
        kwargs["weight_decay"] = weight_decay
    optimizer = cls(**kwargs)
    no_decay = tuple(opt_config.no_decay or ())
    bad = [n for n in no_decay if not isinstance(n, str) or not n.strip()]
    if bad:
        # Keras reads each as a pattern: "" matches every variable (no
        # decay at all), a number or None fails inside Keras.
        raise UsageError(
            f"config.optimizer.no_decay={list(no_decay)!r} holds "
            f"{bad[0]!r}: give variable-name parts such as "
            "bias,pos_embedding (or () to decay every variable).")
    if weight_decay and no_decay:
        optimizer.exclude_from_weight_decay(var_names=list(no_decay))
    return optimizer
