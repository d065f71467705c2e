"""The ViT's input layers: patch embedding, class token, position embedding.

Portable Keras 3 (`keras.ops` only), under the same rules as the encoder
layers of `keras_vit.layers`: every layer stores its
constructor arguments, builds its weights in `build()` and returns exactly
those arguments from `get_config()`. Weight names mirror the official Flax
implementation (`embedding`, `cls`, `pos_embedding`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from keras_vit.errors import UsageError

PACKAGE = "keras_vit"


def check_rate(name: str, value: float) -> None:
    """A dropout-style rate in [0, 1), or a ValueError naming the fix."""
    if not 0.0 <= float(value) < 1.0:
        raise UsageError(
            f"{name} must be in [0, 1), got {value}. Use 0.0 to disable it."
        )


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchEmbedding(keras.layers.Layer):
    """Cuts the image into P x P patches and projects each to `hidden_size`.

    A P x P convolution with stride P and VALID padding (paper Eq. 1), followed
    by flattening the (rows, cols) grid row-major into a token sequence.

    Args:
        patch_size: int. The patch side P in pixels (1 for hybrid models,
            where the input is a CNN feature map).
        hidden_size: int. The token width D.
    """

    def __init__(self, patch_size: int, hidden_size: int, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = int(patch_size)
        self.hidden_size = int(hidden_size)

    def build(self, input_shape):
        height, width = input_shape[1], input_shape[2]
        for side, value in (("height", height), ("width", width)):
            if value is not None and value % self.patch_size:
                raise UsageError(
                    f"Input {side} {value} is not divisible by patch size "
                    f"{self.patch_size}: resize the input to a multiple of "
                    f"{self.patch_size}."
                )
        self.conv = keras.layers.Conv2D(
            self.hidden_size,
            self.patch_size,
            strides=self.patch_size,
            padding="valid",
            kernel_initializer="lecun_normal",
            name="conv",
        )
        self.conv.build(input_shape)
        self.built = True

    def call(self, images):
        x = self.conv(images)
        shape = ops.shape(x)
        return ops.reshape(x, (shape[0], shape[1] * shape[2], shape[3]))

    def compute_output_shape(self, input_shape):
        h, w = input_shape[1], input_shape[2]
        n = None if h is None or w is None else (
            (h // self.patch_size) * (w // self.patch_size)
        )
        return (input_shape[0], n, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(patch_size=self.patch_size, hidden_size=self.hidden_size)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassToken(keras.layers.Layer):
    """Prepends the learnable class embedding x_class to the token sequence.

    Zero-initialised, as in the official implementation.
    """

    def build(self, input_shape):
        self.cls = self.add_weight(
            shape=(1, 1, input_shape[-1]), initializer="zeros", name="cls"
        )
        self.built = True

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.cast(self.cls, tokens.dtype)
        cls = ops.broadcast_to(cls, (batch, 1, ops.shape(tokens)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        n = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], n, input_shape[2])


def _cast(x, dtype, xp):
    """x (a Python number too) in `dtype`, in NumPy or Keras."""
    return np.asarray(x).astype(dtype) if xp is np else ops.cast(x, dtype)


def _resize_axis(x, axis: int, old: int, new, dtype, xp):
    """`x` resized from `old` to `new` entries along `axis` (0 or 1 of a
    (rows, cols, D) grid) by linear interpolation with the corners
    aligned: entry i samples old position i * (old - 1) / (new - 1), the
    official `scipy.ndimage.zoom(order=1)` convention."""
    step = _cast(old - 1, dtype, xp) / xp.maximum(_cast(new, dtype, xp) - 1, 1)
    coords = _cast(xp.arange(new), dtype, xp) * step
    low = xp.clip(_cast(xp.floor(coords), "int32", xp), 0, old - 1)
    high = xp.minimum(low + 1, old - 1)
    t = coords - _cast(low, dtype, xp)
    t = xp.reshape(t, (-1, 1, 1) if axis == 0 else (1, -1, 1))
    return (xp.take(x, low, axis=axis) * (1 - t)
            + xp.take(x, high, axis=axis) * t)


def resize_grid(
    table, old_grid, new_grid, num_prefix_tokens: int = 0, *,
    dtype: str = "float32", xp=ops,
):
    """A (1, prefix + rows * cols, D) position table at another patch grid.

    The prefix rows are kept; the grid rows, reshaped to (rows, cols, D),
    are resized bilinearly with the corners aligned (`_resize_axis`, rows
    then columns) in `dtype` and flattened row-major again, in the table's
    dtype. The one resizer of the package: the checkpoint loader calls it
    with `xp=numpy` and float64 (the official implementation's precision,
    on the host whatever the backend); `PositionEmbedding` calls it in the
    graph with `keras.ops`, where `new_grid` may hold run-time scalars.
    """
    rows, cols = old_grid
    depth = xp.shape(table)[-1]
    prefix = table[:, :num_prefix_tokens]
    grid = xp.reshape(
        _cast(table[0, num_prefix_tokens:], dtype, xp), (rows, cols, depth)
    )
    grid = _resize_axis(grid, 0, rows, new_grid[0], dtype, xp)
    grid = _resize_axis(grid, 1, cols, new_grid[1], dtype, xp)
    grid = xp.reshape(
        _cast(grid, table.dtype, xp), (1, new_grid[0] * new_grid[1], depth)
    )
    return xp.concatenate([prefix, grid], axis=1)


def patch_grid(images, stride: int):
    """(rows, cols) of the patch grid of `images`, whose sides must be
    multiples of `stride`, else an error that says so.

    A side known when the call is traced (eager calls, JAX, most Keras
    graphs) is checked in Python. One known only at run time (a TensorFlow
    graph traced with unknown sizes) is counted by reshaping it into rows
    of `stride`: a reshape that fails unless `stride` divides the side, in
    a name scope that the error message quotes ("image_height_must_be_a_
    multiple_of_16/Reshape"), as Keras has no portable assertion op.
    """
    shape = ops.shape(images)
    grid = []
    for side, value in (("height", shape[1]), ("width", shape[2])):
        if isinstance(value, int):
            if value % stride:
                raise UsageError(
                    f"Image {side} {value} is not divisible by {stride}, "
                    "the model's stride (patch size, times the ResNet "
                    "stride for hybrids): resize, crop or pad the images to "
                    f"a multiple of {stride}."
                )
            grid.append(value // stride)
            continue
        with keras.name_scope(f"image_{side}_must_be_a_multiple_of_{stride}"):
            pixels = ops.reshape(ops.ones((value,), "int32"), (-1, stride))
            # The count reads the reshaped values, so the reshape runs.
            grid.append(ops.sum(pixels[:, 0]))
    return tuple(grid)


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Adds learnable 1D position embeddings to every token (Eq. 1).

    The class token, when present, is included: the table has one row per
    token of the input sequence. Initialised N(0, 0.02) as in the official
    code. Dropout follows the addition (Appendix B.1).

    With `grid_size` the layer serves any input size: the table holds the
    embeddings of that patch grid (plus `num_prefix_tokens` rows) and every
    call interpolates it to the grid of `images` (their size over
    `stride`), with the loader's interpolation (`resize_grid`).

    Args:
        dropout_rate: float. Dropout applied after adding the embeddings.
        grid_size: (rows, cols) or None. The table's patch grid, for a
            model of any input size; None: one row per input token, fixed.
        stride: int or None. Image pixels per patch side (patch size, times
            the ResNet stride for hybrids); needed with `grid_size`.
        num_prefix_tokens: int. Leading tokens that are not grid positions
            (1 with a class token); used with `grid_size`.
    """

    def __init__(
        self,
        dropout_rate: float = 0.0,
        grid_size=None,
        stride=None,
        num_prefix_tokens: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        self.dropout_rate = float(dropout_rate)
        self.grid_size = (
            None if grid_size is None else tuple(int(g) for g in grid_size)
        )
        self.stride = None if stride is None else int(stride)
        self.num_prefix_tokens = int(num_prefix_tokens)
        if self.grid_size is not None and (
            len(self.grid_size) != 2 or min(self.grid_size) < 1
            or not self.stride or self.stride < 1
        ):
            raise UsageError(
                "grid_size must be (rows, cols) of positive ints and stride "
                f"a positive int; got {grid_size!r} and {stride!r}."
            )

    def build(self, input_shape):
        if self.grid_size is not None:
            rows, cols = self.grid_size
            length = self.num_prefix_tokens + rows * cols
        elif input_shape[1] is None:
            raise UsageError(
                "PositionEmbedding needs a static sequence length: give the "
                "model a fixed image_size, or create it with "
                "dynamic_image_size=True."
            )
        else:
            length = input_shape[1]
        self.pos_embedding = self.add_weight(
            shape=(1, length, input_shape[2]),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="pos_embedding",
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.built = True

    def call(self, tokens, images=None, training=None):
        table = self.pos_embedding
        if self.grid_size is not None:
            if images is None:
                raise UsageError(
                    "A PositionEmbedding with grid_size is called on "
                    "(tokens, images): the images give the patch grid."
                )
            grid = patch_grid(images, self.stride)
            # Interpolated from the float32 variable, as the loader does.
            table = resize_grid(
                ops.cast(table, "float32"), self.grid_size, grid,
                self.num_prefix_tokens,
            )
        x = tokens + ops.cast(table, tokens.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            dropout_rate=self.dropout_rate,
            grid_size=self.grid_size,
            stride=self.stride,
            num_prefix_tokens=self.num_prefix_tokens,
        )
        return config


def sincos2d_table(rows, cols, width: int, temperature: float = 10_000.0):
    """(rows * cols, width) fixed 2-D sin-cos position embeddings.

    big_vision's `posemb_sincos_2d` (the MoCo v3 form), row-major over the
    grid: for grid position (y, x) the features are [sin(x w), cos(x w),
    sin(y w), cos(y w)] with w_k = temperature ** -(k / (width / 4 - 1)),
    k = 0 .. width / 4 - 1. `rows` and `cols` may be run-time scalars.
    """
    if width % 4:
        raise UsageError(
            f"posemb='sincos2d' needs a width divisible by 4, got {width}: "
            "use a hidden_size that is a multiple of 4, or posemb='learn'."
        )
    quarter = width // 4
    # big_vision divides by quarter - 1; a width of 4 (quarter 1) would be
    # 0 / 0 there, so that one case uses the single frequency 1.
    omega = ops.arange(quarter, dtype="float32") / max(quarter - 1, 1)
    omega = 1.0 / ops.power(float(temperature), omega)
    y = ops.cast(ops.repeat(ops.arange(rows), cols), "float32")
    x = ops.cast(ops.tile(ops.arange(cols), [rows]), "float32")
    x = x[:, None] * omega[None, :]
    y = y[:, None] * omega[None, :]
    return ops.concatenate(
        [ops.sin(x), ops.cos(x), ops.sin(y), ops.cos(y)], axis=1
    )


@keras.saving.register_keras_serializable(package=PACKAGE)
class SinCosPositionEmbedding(keras.layers.Layer):
    """Adds fixed 2-D sin-cos position embeddings (`sincos2d_table`).

    As big_vision's `posemb="sincos2d"`: nothing is learned, so the layer
    has no weights and a checkpoint has no position-embedding array. The
    table is computed at the patch grid of the images the layer is called
    with, so one model serves every input size. Prefix (class) tokens get
    zeros: big_vision adds the embeddings before it prepends the class
    token, which is the same.

    Args:
        stride: int. Image pixels per patch side (patch size, times the
            ResNet stride for hybrids).
        num_prefix_tokens: int. Leading tokens that are not grid positions
            (1 with a class token).
        dropout_rate: float. Dropout after adding the embeddings.
        temperature: float. The frequency base (big_vision: 10,000).
    """

    # Read by code that handles both position layers: no stored grid.
    grid_size = None

    def __init__(
        self,
        stride: int,
        num_prefix_tokens: int = 0,
        dropout_rate: float = 0.0,
        temperature: float = 10_000.0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        check_rate("dropout_rate", dropout_rate)
        if int(stride) < 1:
            raise UsageError(f"stride must be a positive int, got {stride}.")
        self.stride = int(stride)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.dropout_rate = float(dropout_rate)
        self.temperature = float(temperature)

    def build(self, tokens_shape, images_shape=None):
        if tokens_shape[-1] % 4:
            sincos2d_table(1, 1, tokens_shape[-1])  # raises, naming the fix
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout")
        self.built = True

    def table(self, grid, width: int):
        """(1, prefix + rows * cols, width) float32: zeros for the prefix
        tokens, then the embeddings of the (rows, cols) grid."""
        grid_table = sincos2d_table(grid[0], grid[1], width, self.temperature)
        prefix = ops.zeros((self.num_prefix_tokens, width), "float32")
        return ops.concatenate([prefix, grid_table], axis=0)[None]

    def call(self, tokens, images, training=None):
        grid = patch_grid(images, self.stride)
        table = self.table(grid, tokens.shape[-1])
        x = tokens + ops.cast(table, tokens.dtype)
        return self.dropout(x, training=training)

    def compute_output_shape(self, tokens_shape, images_shape=None):
        return tuple(tokens_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            stride=self.stride,
            num_prefix_tokens=self.num_prefix_tokens,
            dropout_rate=self.dropout_rate,
            temperature=self.temperature,
        )
        return config
