"""Blocks the shipped recipes share, defined once (big_vision's
configs/common.py does the same): each takes the run config it changes."""

from keras_vit.checkpoint.zoo import augreg
from keras_vit.errors import UsageError


def set_augmentation(config, aug: str) -> None:
    """Sets a run config's RandAugment (pp.randaug_ops, randaug_magnitude)
    and Mixup (mix.mixup_alpha) to an AugReg `aug` setting
    (`augreg.AUGMENTATION`)."""
    if aug not in augreg.AUGMENTATION:
        raise UsageError(
            f"Unknown aug setting {aug!r}: use one of "
            f"{', '.join(augreg.AUGMENTATION)}."
        )
    setting = augreg.AUGMENTATION[aug]
    config.pp.randaug_ops, config.pp.randaug_magnitude = setting["randaug"]
    config.mix.mixup_alpha = setting["mixup"]
