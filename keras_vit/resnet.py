"""The ResNet (BiT) stem of the hybrid models, in portable Keras 3.

Hybrids ("R50+B/16", paper Section 3.1) feed the feature map of a ResNet to
the Transformer, with patch size 1. The ResNet is the BiT variant used by the
official implementation: weight-standardised convolutions, GroupNorm (32
groups) instead of BatchNorm, bottleneck units, no biases.

Sublayers are named after the official parameters (`conv_root`, `gn_root`,
`block{s}_unit{u}` with `conv1..3`, `gn1..3`, `conv_proj`, `gn_proj`) so the
checkpoint mapping in `keras_vit.checkpoint.weights` reads like the file it
maps.

Padding "same" of a strided convolution or max-pool pads the extra row or
column at the end (bottom/right) on both the TensorFlow and JAX backends,
which is what the official Flax code does; the tests compare both backends
against an independent NumPy implementation.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import keras
from keras import ops

from keras_vit.errors import UsageError
from keras_vit.grid import resnet_stride

PACKAGE = "keras_vit"
GROUP_NORM_GROUPS = 32
GROUP_NORM_EPSILON = 1e-6
STD_CONV_EPSILON = 1e-5


def resnet_channels(layers: Sequence[int], width_factor: int = 1) -> int:
    """int. Output channels: the root's 64 x width_factor without stages,
    else 4x the last stage's bottleneck width."""
    width = 64 * int(width_factor)
    if not layers:
        return width
    return 4 * width * 2 ** (len(layers) - 1)


def group_norm(name: str) -> keras.layers.GroupNormalization:
    """GroupNorm with the official groups (32) and epsilon (1e-6)."""
    return keras.layers.GroupNormalization(
        groups=GROUP_NORM_GROUPS, epsilon=GROUP_NORM_EPSILON, name=name
    )


@keras.saving.register_keras_serializable(package=PACKAGE)
class StdConv(keras.layers.Layer):
    """A 2D convolution with weight standardisation, without bias.

    At every call the kernel is standardised over (height, width, input):
    (w - mean) / (std + 1e-5) with the biased std, as in BiT and the official
    hybrid ViT. The stored kernel is the raw one, as in the checkpoints.

    Args:
        filters: int. Output channels.
        kernel_size: int. Square kernel side.
        strides: int. Stride in both directions.
    """

    def __init__(
        self, filters: int, kernel_size: int, strides: int = 1, **kwargs
    ):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.strides = int(strides)

    def build(self, input_shape):
        # autocast=False: standardise in float32 even under mixed precision;
        # the standardised kernel is cast to the compute dtype afterwards.
        self.kernel = self.add_weight(
            shape=(
                self.kernel_size,
                self.kernel_size,
                input_shape[-1],
                self.filters,
            ),
            initializer="he_normal",
            name="kernel",
            autocast=False,
        )
        self.built = True

    def standardized_kernel(self):
        """The kernel as the convolution uses it (float32)."""
        w = ops.cast(self.kernel, "float32")
        mean = ops.mean(w, axis=(0, 1, 2), keepdims=True)
        w = w - mean
        std = ops.sqrt(ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True))
        return w / (std + STD_CONV_EPSILON)

    def call(self, x):
        kernel = ops.cast(self.standardized_kernel(), x.dtype)
        return ops.conv(x, kernel, strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        return (
            input_shape[0],
            _ceil_div(input_shape[1], self.strides),
            _ceil_div(input_shape[2], self.strides),
            self.filters,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            filters=self.filters,
            kernel_size=self.kernel_size,
            strides=self.strides,
        )
        return config


def _ceil_div(value, divisor):
    return None if value is None else -(-value // divisor)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BottleneckUnit(keras.layers.Layer):
    """A pre-BiT bottleneck residual unit (1x1, 3x3, 1x1; output 4x width).

    y = relu(proj(x) + gn3(conv3(relu(gn2(conv2(relu(gn1(conv1(x)))))))))
    where conv2 carries the stride and `proj` (conv_proj + gn_proj) exists
    when the stride or the channel count changes, else it is the identity.

    Args:
        features: int. Bottleneck width; the output has 4 * features.
        strides: int. Stride of conv2 and of the projection.
    """

    def __init__(self, features: int, strides: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = int(strides)

    def build(self, input_shape):
        out = 4 * self.features
        self.needs_projection = input_shape[-1] != out or self.strides != 1
        shape = tuple(input_shape)
        if self.needs_projection:
            self.conv_proj = StdConv(out, 1, self.strides, name="conv_proj")
            self.conv_proj.build(shape)
            self.gn_proj = group_norm("gn_proj")
            self.gn_proj.build(self.conv_proj.compute_output_shape(shape))
        self.conv1 = StdConv(self.features, 1, name="conv1")
        self.conv1.build(shape)
        shape = self.conv1.compute_output_shape(shape)
        self.gn1 = group_norm("gn1")
        self.gn1.build(shape)
        self.conv2 = StdConv(self.features, 3, self.strides, name="conv2")
        self.conv2.build(shape)
        shape = self.conv2.compute_output_shape(shape)
        self.gn2 = group_norm("gn2")
        self.gn2.build(shape)
        self.conv3 = StdConv(out, 1, name="conv3")
        self.conv3.build(shape)
        shape = self.conv3.compute_output_shape(shape)
        # gn3's scale starts at zero (as in BiT): each unit starts as the
        # identity of its residual branch.
        self.gn3 = keras.layers.GroupNormalization(
            groups=GROUP_NORM_GROUPS,
            epsilon=GROUP_NORM_EPSILON,
            gamma_initializer="zeros",
            name="gn3",
        )
        self.gn3.build(shape)
        self.built = True

    def call(self, x):
        residual = x
        if self.needs_projection:
            residual = self.gn_proj(self.conv_proj(x))
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(residual + y)

    def compute_output_shape(self, input_shape):
        return (
            input_shape[0],
            _ceil_div(input_shape[1], self.strides),
            _ceil_div(input_shape[2], self.strides),
            4 * self.features,
        )

    def get_config(self):
        config = super().get_config()
        config.update(features=self.features, strides=self.strides)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResNetStem(keras.layers.Layer):
    """The ResNet part of a hybrid ViT: root block and bottleneck stages.

    Root: 7x7 stride-2 StdConv (64 x width_factor channels), GroupNorm, ReLU,
    3x3 stride-2 max-pool. Then stage s (from 0) has `layers[s]` units of
    width 64 * 2^s * width_factor (output 4x that); the first unit of a stage
    has stride 1 for s = 0 and 2 after. The total stride is 4 * 2^(S-1), and
    4 without stages: AugReg's R+Ti/16 (`layers=()`) is the root alone.

    Args:
        layers: tuple of int. Bottleneck units per stage, e.g. (3, 4, 9) for
            R50+B/16; () for the root block alone.
        width_factor: int. Multiplies every width.
    """

    def __init__(
        self, layers: Sequence[int], width_factor: int = 1, **kwargs
    ):
        super().__init__(**kwargs)
        layers = tuple(int(n) for n in layers)
        if layers and min(layers) < 1:
            raise UsageError(
                f"layers must be a tuple of positive unit counts per stage, "
                f"e.g. (3, 4, 9), or () for the root alone; got {layers!r}."
            )
        if int(width_factor) < 1:
            raise UsageError(
                f"width_factor must be a positive int, got {width_factor}."
            )
        self.layers = layers
        self.width_factor = int(width_factor)

    @property
    def stride(self) -> int:
        """int. Total downsampling factor of the stem."""
        return resnet_stride(self.layers)

    def stage_units(self) -> Tuple[Tuple[BottleneckUnit, ...], ...]:
        """The built units, grouped by stage (stage 0 first)."""
        units, start = [], 0
        for count in self.layers:
            units.append(tuple(self.units[start:start + count]))
            start += count
        return tuple(units)

    def build(self, input_shape):
        width = 64 * self.width_factor
        shape = tuple(input_shape)
        self.conv_root = StdConv(width, 7, 2, name="conv_root")
        self.conv_root.build(shape)
        shape = self.conv_root.compute_output_shape(shape)
        self.gn_root = group_norm("gn_root")
        self.gn_root.build(shape)
        self.pool = keras.layers.MaxPooling2D(
            3, strides=2, padding="same", name="pool"
        )
        shape = self.pool.compute_output_shape(shape)
        # One attribute per unit, not a list: TensorFlow checkpoints follow
        # layer attributes but not Keras's tracked lists. `units` lists them
        # flat; stage_units() regroups them.
        self._unit_names = []
        for s, count in enumerate(self.layers):
            for u in range(count):
                name = f"block{s + 1}_unit{u + 1}"
                unit = BottleneckUnit(
                    width * 2**s,
                    strides=2 if (s > 0 and u == 0) else 1,
                    name=name,
                )
                unit.build(shape)
                shape = unit.compute_output_shape(shape)
                setattr(self, name, unit)
                self._unit_names.append(name)
        self.built = True

    @property
    def units(self) -> list:
        """list of BottleneckUnit. All units, stage by stage."""
        return [getattr(self, name) for name in self._unit_names]

    def call(self, images):
        x = ops.relu(self.gn_root(self.conv_root(images)))
        x = self.pool(x)
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        out = resnet_channels(self.layers, self.width_factor)
        return (
            input_shape[0],
            _ceil_div(input_shape[1], self.stride),
            _ceil_div(input_shape[2], self.stride),
            out,
        )

    def get_config(self):
        config = super().get_config()
        config.update(layers=self.layers, width_factor=self.width_factor)
        return config
