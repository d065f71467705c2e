"""AugReg's data augmentation (tf.data, host side): RandAugment on each
image, Mixup or CutMix on each batch. Never imports the model.

All three are Keras 3's own preprocessing layers (`keras.layers.RandAugment`,
`MixUp`, `CutMix`), which run inside `tf.data` whatever the Keras backend.

RandAugment: big_vision's `randaug(N, M)` is the TF TPU autoaugment code
(tensorflow/tpu models/official/efficientnet/autoaugment.py): 16 ops
(AutoContrast, Equalize, Invert, Rotate, Posterize, Solarize, Color,
Contrast, Brightness, Sharpness, ShearX/Y, TranslateX/Y, Cutout,
SolarizeAdd), each applied at the fixed level M / 10 of its range (e.g.
Rotate by 3M degrees with a random sign). The maintained home of that code,
tf-models-official (`official.vision.ops.augment`), requires
tensorflow~=2.20 and pulls in the whole Model Garden, so it cannot be
installed beside this project's TensorFlow. This project therefore follows
Keras 3's RandAugment, with ITS op set and magnitude scale: 11 ops (shear,
translation, rotation, brightness, colour degeneration, contrast,
sharpness, posterization, solarization, auto-contrast, equalization; no
Invert, Cutout or SolarizeAdd), each drawing its strength uniformly from
[0, factor] of its own range instead of a fixed level, the geometric ones
with a random sign as the TPU code's (rotation: [-factor x 360, factor x
360] degrees; translation: up to factor of each side either way; Keras's
own RandAugment hands its rotation and translation [0, factor], which
turns every image the same way and shifts it down and right only, so
`SignedRandAugment` rebuilds those two). A big_vision magnitude M maps to
factor = M / 60, chosen so that a rotation's mean absolute angle (180 x
factor) equals the TPU code's fixed 3M degrees. The other ops do not match the
TPU strengths; two even run the other way: Keras's posterization keeps
max(1, int(8 x factor)) bits and its solarization inverts the pixels
above a threshold drawn from [0, 255 x factor], so both are strongest
at small factors (the TPU code keeps 4M / 10 bits and solarizes above
25.6 M). Neither M = 0 is the identity (the TPU
code's posterizes to 0 bits and sets Color and Contrast to 0.1).
`randaug(2, 15)` here is therefore Keras's RandAugment(num_ops=2,
factor=0.25), not a reproduction of big_vision's op for op.

Mixup (Zhang et al. 2018): each image is mixed with another of the batch
(a random permutation) with weight lambda ~ Beta(alpha, alpha) per
example, labels alike. CutMix (Yun et al. 2019): a box of area 1 - lambda,
lambda ~ Beta(alpha, alpha), from another image of the batch is pasted in,
and the labels are mixed by the share of the pixels pasted (Keras's
CutMix mixes them by the box's fractional area, which differs from the
whole pixels it pastes by up to a row and a column: `_cutmix`). With
both, each batch uses one of the two, with equal probability (timm's
Mixup `switch_prob=0.5`).

Keras's layers keep their random state in a variable, which a parallel
map advances in whatever order examples reach it and which tf.data cannot
save with the input iterator. Here each call draws instead from a
stateless seed that the input pipeline derives from (its seed, the
example's or batch's index), as the crops and flips are drawn: the same
seed augments each image the same way run after run, the per-image map
stays parallel, and the iterator can be checkpointed (`PerCallSeed`).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, Tuple

import keras
import tensorflow as tf

from keras_vit.errors import UsageError

# big_vision's RandAugment magnitude M -> Keras's `factor` (see above).
MAGNITUDE_TO_FACTOR = 1.0 / 60.0


def randaugment_factor(magnitude: float) -> float:
    """Keras RandAugment's factor for big_vision's magnitude M: M / 60,
    at most 1 (M = 60)."""
    if magnitude < 0:
        raise UsageError(
            "config.input.pp.randaug_magnitude must be >= 0, got "
            f"{magnitude}."
        )
    return min(float(magnitude) * MAGNITUDE_TO_FACTOR, 1.0)


class StatelessSeeds(keras.random.SeedGenerator):
    """The draws of one layer call from one stateless seed, a (2,) integer
    tensor: draw i uses `stateless_fold_in(seed, i)`. Unlike a
    `keras.random.SeedGenerator` it holds no state variable (its
    `__init__` does not create one), so a tf.data map that uses it stays
    deterministic in parallel and serialisable. Keras's random functions
    accept it wherever they accept a seed generator: they call `next()`.
    """

    def __init__(self, seed: tf.Tensor):  # no super(): no state variable
        self._seed = tf.cast(seed, tf.int64)
        self._draws = 0

    def next(self, ordered: bool = True) -> tf.Tensor:
        self._draws += 1
        return tf.random.experimental.stateless_fold_in(self._seed,
                                                        self._draws)


class PerCallSeed:
    """Mixin for a Keras 3 preprocessing layer: `layer(x, training=True,
    seed=s)` draws every random number of that call from the stateless
    seed `s` (`StatelessSeeds`); without `seed`, the layer's own state.

    Keras's image layers ask `self._get_seed_generator(backend)` for their
    generator when no seed is handed to `get_random_transformation`
    (RandAugment hands its own to each of its ops); this mixin answers
    with the call's seeds while the call runs. A private method, hence
    `tests/test_augreg_data.py`, which checks on the installed Keras that
    the draws repeat, follow the seed and leave the layer's state alone.
    """

    def call(self, data, training=True, seed=None):
        if seed is None:
            return super().call(data, training=training)
        # Not through the Layer's __setattr__, which would track the
        # generator as layer state.
        object.__setattr__(self, "_call_seeds", StatelessSeeds(seed))
        try:
            return super().call(data, training=training)
        finally:
            object.__setattr__(self, "_call_seeds", None)

    def _get_seed_generator(self, backend=None):
        seeds = self.__dict__.get("_call_seeds")
        if seeds is not None:
            return seeds
        return super()._get_seed_generator(backend)


class MixUp(PerCallSeed, keras.layers.MixUp):
    """Keras's MixUp, drawing from a per-call seed (`PerCallSeed`)."""


class CutMix(PerCallSeed, keras.layers.CutMix):
    """Keras's CutMix, drawing from a per-call seed (`PerCallSeed`)."""


class SignedRandAugment(PerCallSeed, keras.layers.RandAugment):
    """Keras's RandAugment with its rotation and translation drawn either
    way, [-factor, factor] (Keras's hands them [0, factor]; its shear
    already draws a sign), as the TPU RandAugment rotates, shears and
    translates with a random sign."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        factor = float(self.factor[1])  # a number: drawn in [-f, f]
        common = dict(interpolation=self.interpolation, seed=self.seed,
                      data_format=self.data_format)
        self.random_translation = keras.layers.RandomTranslation(
            height_factor=factor, width_factor=factor, **common)
        self.random_rotation = keras.layers.RandomRotation(factor=factor,
                                                           **common)

    def transform_images(self, images, transformation, training=True):
        """Keras's RandAugment, running only each slot's chosen op. Keras's
        own runs all 11 ops on the image and keeps one (`where`): 11 times
        the work, the host's CPU the bottleneck of a small model's run.
        The same draws (`get_random_transformation`), the same images:
        `tests/test_augreg_data.py` compares them with Keras's on the
        installed Keras."""
        images = self.backend.cast(images, self.compute_dtype)
        if not training:
            return images
        ops = list(transformation["transforms"].items())  # Keras's order
        for i in range(self.num_ops):
            images = tf.switch_case(
                tf.cast(transformation["layer_idxes"][i], tf.int32),
                [functools.partial(self._one_op, name, images, value)
                 for name, value in ops])
        return images

    def _one_op(self, name, images, value):
        return self.backend.cast(getattr(self, name).transform_images(
            images, value), self.compute_dtype)


def rand_augment(
    num_ops: int, magnitude: float, seed: Optional[int] = None
) -> Optional[Callable[[tf.Tensor], tf.Tensor]]:
    """`fn(image, seed=None)`: RandAugment of one float [0, 255] (H, W, 3)
    image (or a batch), float32 [0, 255] out; None when `num_ops` is 0.
    With `seed` (a stateless (2,) seed), the ops and strengths are drawn
    from it; without, from the layer's state.

    Args:
        num_ops: int. Ops applied one after the other (big_vision's N).
        magnitude: float. big_vision's M, mapped to Keras's factor by
            `randaugment_factor`.
        seed: int or None. Seed of the layer's random state (calls
            without a seed of their own).
    """
    if num_ops < 0:
        raise UsageError("config.input.pp.randaug_ops must be >= 0, got "
                         f"{num_ops}.")
    if not num_ops:
        return None
    layer = SignedRandAugment(
        value_range=(0, 255),
        num_ops=int(num_ops),
        factor=randaugment_factor(magnitude),
        seed=seed,
    )

    def apply(image: tf.Tensor, seed: Optional[tf.Tensor] = None
              ) -> tf.Tensor:
        out = layer(tf.cast(image, tf.float32), training=True, seed=seed)
        return tf.clip_by_value(tf.cast(out, tf.float32), 0.0, 255.0)

    return apply


# Folded into every batch's (seed, index) before its mix is drawn.
_BATCH_MIX_TAG = 0x6D6978  # "mix"


def mix_batch(
    num_classes: int,
    mixup_alpha: float = 0.0,
    cutmix_alpha: float = 0.0,
    seed: Optional[int] = None,
) -> Optional[Callable[[tf.Tensor, tf.Tensor], Tuple[tf.Tensor, tf.Tensor]]]:
    """`fn(images, labels, index=None)`: a batch mixed by Mixup and/or
    CutMix, with integer labels (B,) in and float32 mixed labels
    (B, num_classes) out, each row summing to 1; None when both alphas are
    0. With batch `index` (the input pipeline's count), every draw is
    stateless, from (seed, index): with both, which of the two mixes the
    batch, and the mix itself. Without `index`, the layers' state.

    Args:
        num_classes: int. Width of the label vectors.
        mixup_alpha: float. Beta(alpha, alpha) of Mixup; 0: no Mixup.
        cutmix_alpha: float. Beta(alpha, alpha) of CutMix; 0: no CutMix.
        seed: int or None. Seed of the layers' random state.
    """
    for name, alpha in (("mixup_alpha", mixup_alpha),
                        ("cutmix_alpha", cutmix_alpha)):
        if alpha < 0:
            raise UsageError(
                f"config.input.mix.{name} must be >= 0 (0 disables it), "
                f"got {alpha}."
            )
    if cutmix_alpha > 1:
        raise UsageError(
            "config.input.mix.cutmix_alpha must be in (0, 1] (Keras's "
            "CutMix), got "
            f"{cutmix_alpha}; the CutMix paper uses 1."
        )
    mixers = []
    if mixup_alpha:
        mixers.append(MixUp(alpha=float(mixup_alpha), seed=seed))
    if cutmix_alpha:
        # A (lower, upper) pair fixes the Beta parameter at alpha (a single
        # number would draw it from [0, alpha]).
        alpha = float(cutmix_alpha)
        mixers.append(CutMix(factor=(alpha, alpha), seed=seed))
    if not mixers:
        return None

    def one(mixer, images, onehot, draw):
        if isinstance(mixer, CutMix):
            return _cutmix(mixer, images, onehot, draw)
        out = mixer({"images": images, "labels": onehot}, training=True,
                    seed=draw)
        return (tf.cast(out["images"], tf.float32),
                tf.cast(out["labels"], tf.float32))

    def apply(images, labels, index=None):
        onehot = tf.one_hot(labels, num_classes, dtype=tf.float32)
        images = tf.cast(images, tf.float32)
        draw = None
        if index is not None:  # stateless: reproducible whatever ran before
            # The tag keeps batch seeds apart from the example seeds
            # (seed, example index) by design.
            draw = tf.random.experimental.stateless_fold_in(
                tf.stack([tf.constant(seed or 0, tf.int64),
                          tf.cast(index, tf.int64)]), _BATCH_MIX_TAG)
        if len(mixers) == 1:
            return one(mixers[0], images, onehot, draw)
        if draw is None:
            use_mixup = tf.random.uniform([], seed=seed) < 0.5
        else:  # the mix draws from the next seed of the batch's
            use_mixup = tf.random.stateless_uniform([], seed=draw) < 0.5
            draw = tf.random.experimental.stateless_fold_in(draw, 1)
        return tf.cond(
            use_mixup,
            lambda: one(mixers[0], images, onehot, draw),
            lambda: one(mixers[1], images, onehot, draw),
        )

    return apply


def _cutmix(mixer, images, onehot, draw):
    """Keras's CutMix of (images, one-hot labels), the labels mixed by the
    share of whole pixels each image keeps: a channel holding each image's
    index travels with the pixels, so it says which pixels came from
    which image (an image paired with itself keeps its label either
    way)."""
    shape = tf.shape(images)
    ids = tf.cast(tf.range(shape[0]), tf.float32)
    tag = tf.broadcast_to(ids[:, None, None, None],
                          tf.concat([shape[:3], [1]], 0))
    out = mixer({"images": tf.concat([images, tag], -1), "labels": onehot},
                training=True, seed=draw)
    mixed = tf.cast(out["images"], tf.float32)
    came_from = mixed[..., -1]
    own = tf.equal(came_from, ids[:, None, None])
    kept = tf.reduce_mean(tf.cast(own, tf.float32), [1, 2])[:, None]
    partner = tf.cast(tf.reduce_max(tf.where(own, -1.0, came_from), [1, 2]),
                      tf.int32)
    partner = tf.where(partner < 0, tf.range(shape[0]), partner)
    labels = kept * onehot + (1.0 - kept) * tf.gather(onehot, partner)
    return mixed[..., :-1], labels
